-- stof.attention on the CPU, te.attention inside graphs, stof.explain, and their errors.
local stof = require("stof")
local te, M = stof.te, stof.mask

local function expect_error(kind, substr, f, ...)
  local args = table.pack(...)
  -- called from a line of this file, so the message carries test_attention.lua:N
  local ok, err = pcall(function() return f(table.unpack(args, 1, args.n)) end)
  assert(not ok, "expected an error containing " .. substr)
  err = tostring(err)
  assert(err:find(kind .. ":", 1, true), "wrong kind in: " .. err)
  assert(err:find(substr, 1, true), "'" .. substr .. "' not in: " .. err)
  assert(err:find("test_attention.lua:%d+:"), "no file:line in: " .. err)
end

-- Masked softmax attention in plain Lua, rows with no key giving 0.
local function reference(q, k, v, mask, scale)
  local B, H, S, D = table.unpack(q:shape())
  local Hkv, Sk = k:shape()[2], k:shape()[3]
  local out = stof.zeros({B, H, S, D}, "float32")
  for b = 0, B - 1 do
    for h = 0, H - 1 do
      local hk = h // (H // Hkv)
      for i = 0, S - 1 do
        local s, mx = {}, -math.huge
        for j = 0, Sk - 1 do
          if mask:eval(b, h, i, j) then
            local d = 0
            for x = 0, D - 1 do d = d + q[{b, h, i, x}] * k[{b, hk, j, x}] end
            s[j] = d * scale
            if s[j] > mx then mx = s[j] end
          end
        end
        local sum, acc = 0, {}
        for x = 0, D - 1 do acc[x] = 0 end
        for j, sj in pairs(s) do
          local e = math.exp(sj - mx)
          sum = sum + e
          for x = 0, D - 1 do acc[x] = acc[x] + e * v[{b, hk, j, x}] end
        end
        for x = 0, D - 1 do out[{b, h, i, x}] = sum > 0 and acc[x] / sum or 0 end
      end
    end
  end
  return out
end

local B, H, S, D = 2, 2, 29, 8
local q = stof.rand({B, H, S, D}, "float32", 11)
local k = stof.rand({B, H, S, D}, "float32", 12)
local v = stof.rand({B, H, S, D}, "float32", 13)

-- Every suite mask, plus a mask with fully masked rows (causal minus its diagonal empties row 0).
local masks = {}
for _, name in ipairs(M.suite_names()) do masks[#masks + 1] = M.suite(name, S) end
masks[#masks + 1] = M.causal() - M.window(0, 0)
masks[#masks + 1] = M.dilated(3, 1)
for _, m in ipairs(masks) do
  local o = stof.attention(q, k, v, m)
  local ref = reference(q, k, v, m, 1 / math.sqrt(D))
  local err = stof.rel_l2(o, ref)
  assert(err < 1e-5, tostring(m) .. ": rel err " .. err)
  for _, tile in ipairs({32, 64, 128}) do -- the GPU plans' tiles, on the CPU too
    assert(stof.rel_l2(stof.attention(q, k, v, m, {tile = tile}), ref) < 1e-5, tostring(m) .. " tile " .. tile)
  end
end
-- row 0 of causal minus the diagonal keeps no key: exactly zero
local o0 = stof.attention(q, k, v, M.causal() - M.window(0, 0))
for x = 0, D - 1 do assert(o0[{1, 1, 0, x}] == 0) end

-- Grouped-query attention (H = 4 query heads over 2 key/value heads) and a custom scale.
local q4 = stof.rand({1, 4, S, D}, "float32", 21)
local k2, v2 = stof.rand({1, 2, S, D}, "float32", 22), stof.rand({1, 2, S, D}, "float32", 23)
local og = stof.attention(q4, k2, v2, M.causal(), {scale = 0.5})
assert(stof.rel_l2(og, reference(q4, k2, v2, M.causal(), 0.5)) < 1e-5)

-- The same attention inside a TE graph, through the interpreter; an fn mask works there.
local Q = te.placeholder({B, H, S, D}, "float32", "Q")
local K = te.placeholder({B, H, S, D}, "float32", "K")
local V = te.placeholder({B, H, S, D}, "float32", "V")
local A = te.attention(Q, K, V, M.longformer(4, 2))
assert(A.pattern == "opaque" and A.compute_intensive)
local R = te.compute({B, H, S, D}, function(b, h, i, x) return A[{b, h, i, x}] * 2 end, "R")
local r = stof.eval(R, {[Q] = q, [K] = k, [V] = v})
local ra = reference(q, k, v, M.longformer(4, 2), 1 / math.sqrt(D))
for b = 0, B - 1 do for x = 0, D - 1 do
  assert(math.abs(r[{b, 1, 5, x}] - 2 * ra[{b, 1, 5, x}]) < 1e-5)
end end
local F = te.attention(Q, K, V, M.fn(function(_, _, i, j) return j <= i end))
assert(stof.rel_l2(stof.eval(F, {[Q] = q, [K] = k, [V] = v}), reference(q, k, v, M.causal(), 1 / math.sqrt(D))) < 1e-5)
local bad = te.attention(Q, K, V, M.fn(function() error("no luck") end))
expect_error("ValueError", "no luck", stof.eval, bad, {[Q] = q, [K] = k, [V] = v})

-- explain: the paper's rule at two extremes, and forced choices.
local text, choice = stof.explain(M.dense(), {S = 1024, B = 8, H = 12})
assert(choice.kernel == "block" and text:find("block%-wise") and text:find("100%.0%%"))
local _, c2 = stof.explain(M.random_blocks(16, 0.0002, 1), {S = 8192})
assert(c2.kernel == "row" and c2.frac16 < c2.threshold, c2.why)
local _, c2b = stof.explain(M.sliding(8), {S = 8192})
assert(c2b.kernel == "block" and c2b.tile == 64, c2b.why)
local _, c3 = stof.explain(M.dense(), {S = 1024}, {kernel = "row", tile = 128})
assert(c3.kernel == "row" and c3.tile == 128 and c3.why:find("asked for"))
-- explain for a named GPU (no GPU needed): the Hopper kernel on an H100, tile 128 at D 128;
-- the portable kernel on an A100, where tile 128 at D 128 does not fit; "none": no GPU.
local th, ch = stof.explain(M.dense(), {S = 4096, D = 128}, {gpu = "h100"})
assert(ch.hopper and ch.tile == 128 and ch.warps == 8 and th:find("on NVIDIA H100", 1, true), th)
-- at D 64 dense runs at tile 128 in 64-key steps (key64), unless asked not to
local _, ch64 = stof.explain(M.dense(), {S = 4096, D = 64}, {gpu = "h200"})
assert(ch64.hopper and ch64.tile == 128 and ch64.key64 and ch64.why:find("TMA, 64%-key steps"), ch64.why)
local _, ch64n = stof.explain(M.dense(), {S = 4096, D = 64}, {gpu = "h200", key64 = -1})
assert(ch64n.hopper and ch64n.tile == 64 and not ch64n.key64 and ch64n.why:find("TMA"), ch64n.why)
local _, ch64d = stof.explain(M.suite("document", 4096), {S = 4096, D = 64}, {gpu = "h200"})
assert(ch64d.hopper and ch64d.tile == 64 and not ch64d.key64, ch64d.why)
expect_error("UnsupportedError", "key64 asked for", stof.explain, M.dense(), {S = 4096, D = 128}, {gpu = "h100", key64 = 1})
-- the query shift: asked for where it cannot run (tile 128; no Hopper kernel), out of range
expect_error("UnsupportedError", "qshift asked for, but it needs the Hopper kernel at tile 64", stof.explain, M.dense(),
             {S = 4096, D = 128}, {gpu = "h100", qshift = 1})
expect_error("UnsupportedError", "not the Hopper kernel", stof.explain, M.suite("sliding", 4096), {S = 4096, D = 64},
             {gpu = "a100", qshift = 1})
expect_error("ValueError", "qshift 2 (1 on, -1 off, 0 the rule)", stof.explain, M.dense(), {S = 4096, D = 64},
             {gpu = "h100", qshift = 2})
local _, cqs = stof.explain(M.suite("document", 4096), {S = 4096, D = 64}, {gpu = "h100", tile = 64, qshift = 1})
assert(cqs.qshift == 32 and cqs.why:find("queries shifted by 32 %(%d+ tiles an instance against %d+, asked for%)"), cqs.why)
-- the lazy rescale: the rule's at D 128 on Hopper without ping-pong (BigBird's tile 32,
-- sliding's tile 64), not for dense's ping-pong or at D 64; forced on and off; the row-wise
-- kernel refuses it
local _, clz = stof.explain(M.suite("bigbird", 4096), {S = 4096, B = 16, H = 12, D = 128}, {gpu = "h200"})
assert(clz.tile == 32 and clz.lazy and clz.why:find("O rescaled lazily (Hopper GPU, D = 128, no ping-pong)", 1, true), clz.why)
local _, clz2 = stof.explain(M.suite("sliding", 4096), {S = 4096, D = 128}, {gpu = "h200", lazy = -1})
assert(clz2.tile == 64 and not clz2.lazy and not clz2.why:find("lazily"), clz2.why)
local _, clz3 = stof.explain(M.dense(), {S = 4096, D = 128}, {gpu = "h200"})
assert(clz3.tile == 128 and not clz3.lazy, clz3.why)
local _, clz4 = stof.explain(M.dense(), {S = 4096, D = 64}, {gpu = "h200", lazy = 1})
assert(clz4.lazy and clz4.why:find("O rescaled lazily (asked for)", 1, true), clz4.why)
expect_error("UnsupportedError", "lazy asked for, but it is the block-wise kernels'", stof.explain,
             M.suite("sliding", 4096), {S = 4096, D = 128}, {gpu = "h200", kernel = "row", lazy = 1})
expect_error("ValueError", "lazy 3 (1 on, -1 off, 0 the selector's)", stof.explain, M.dense(), {S = 4096, D = 64},
             {gpu = "h200", lazy = 3})
-- the MMA work line: kept pairs over the pairs the chosen kernel computes at the plan's tile,
-- checked against the format's own counts (BigBird at tile 32 on Hopper, causal_sliding at
-- tile 64 with its empty key halves skipped, dense at tile 128, sliding's shifted plan)
local function work_share(mask, S, T, half)
  local st = mask:format(S, {tile = T}).stats
  local computed = T * T * (st.full + st.partial) - (half and T * T / 2 * st.halfempty or 0)
  return ("MMA work: %.1f%% of the pairs computed are kept (tile %d"):format(100 * st.nvalid / computed, T)
end
for _, w in ipairs({{"bigbird", 32, false, ")"}, {"causal_sliding", 64, true, ", empty key halves skipped)"},
                    {"dense", 128, false, ")"}, {"sliding", 64, false, "; counted on the unshifted tiles"}}) do
  local m = M.suite(w[1], 4096)
  local text, cw = stof.explain(m, {S = 4096, B = 16, H = 12, D = 128}, {gpu = "h200"})
  assert(cw.tile == w[2] and (w[1] ~= "sliding" or cw.qshift == 32), cw.why)
  local want = work_share(m, 4096, w[2], w[3]) .. w[4]
  assert(text:find(want, 1, true), want .. " not in:\n" .. text)
end
assert(work_share(M.suite("bigbird", 4096), 4096, 32, false):find("95.2%", 1, true))
-- the row-wise kernel skips by 16 x 16 tile: its share from frac16
do
  local m = M.suite("sliding", 4096)
  local st = m:format(4096, {tile = 64}).stats
  local text = stof.explain(m, {S = 4096, D = 64}, {gpu = "h200", kernel = "row"})
  local want = ("MMA work: %.1f%% of the pairs computed are kept (16 x 16 tiles, the row-wise kernel)"):format(
    100 * st.nvalid / (256 * st.frac16 * 256 * 256))
  assert(text:find(want, 1, true), want .. " not in:\n" .. text)
end
local _, ca = stof.explain(M.dense(), {S = 4096, D = 128}, {gpu = "a100"})
assert(not ca.hopper and ca.tile == 64 and ca.why:find("would need 167936 bytes", 1, true), ca.why)
local _, ca64 = stof.explain(M.dense(), {S = 4096, D = 64}, {gpu = "a100"})
assert(not ca64.hopper and ca64.tile == 128 and ca64.why:find("mma.sync", 1, true), ca64.why)
local tn, cn = stof.explain(M.dense(), {S = 4096, D = 128}, {gpu = "none"})
assert(not cn.hopper and cn.why:find("no GPU seen", 1, true) and not tn:find("on NVIDIA", 1, true), tn)
expect_error("ValueError", 'unknown gpu "b300"', stof.explain, M.causal(), {S = 128}, {gpu = "b300"})
expect_error("TypeError", "option gpu must be a string", stof.explain, M.causal(), {S = 128}, {gpu = 5})
expect_error("UnsupportedError", "ask for tile 64", stof.explain, M.dense(), {S = 4096, D = 128},
             {gpu = "rtx4090", tile = 128, kernel = "block"})
-- how partial tiles are masked, and the split of heavy tile-rows, as a plan on that GPU would
-- (the split from the format at the chosen tile): longformer's global rows at 1 x 32 x 131072
-- D 128 on an H100 split into one wave of chunks (132 SMs x 3 CTAs: 384 of the 396 slots), its
-- shifted tiles' empty halves (25%) skipped;
-- BigBird 16 x 12 x 4096 per lane with its empty halves skipped and no split; dense neither; a
-- forced split without the Hopper kernel
local _, cl = stof.explain(M.longformer(32, 32), {S = 131072, H = 32, D = 128}, {gpu = "h100"})
assert(cl.hopper and cl.rowmask and cl.halfskip and cl.split_rows == 32 and cl.split_chunks == 384, cl.why)
-- (from the query-shifted format the plan runs: 8190 tiles an instance, not 10234)
assert(cl.qshift == 32 and cl.why:find("queries shifted by 32 (8190 tiles an instance against 10234", 1, true), cl.why)
assert(cl.why:find("split 32 tile-rows of >= 662 tiles into 384 chunks of <= 171 tiles (automatic", 1, true), cl.why)
local _, cl0 = stof.explain(M.longformer(32, 32), {S = 131072, H = 32, D = 128}, {gpu = "h100", split = -1})
assert(cl0.split_rows == 0 and cl0.why:find("no split (asked for)", 1, true), cl0.why)
-- the launch order (seventeenth session): split rows keep the default order; with the split
-- refused, the global rows are launched before every other row instead. At the grid's
-- 16 x 12 x 4096 D 64 they are not split: ordered, and longformer's empty halves skipped
-- (59% of its tiles have one: >= 45% at D 64)
assert(cl.heavy_rows == 0 and not cl.why:find("launched first", 1, true), cl.why)
assert(cl0.heavy_rows == 1 and cl0.why:find("1 long tile-row a (b, h) launched first", 1, true), cl0.why)
-- (without the query shift; with it, the default, the shifted tiles have 25% empty halves)
local _, co = stof.explain(M.longformer(32, 32), {S = 4096, B = 16, H = 12, D = 64}, {gpu = "h100", qshift = -1})
assert(co.split_rows == 0 and co.heavy_rows == 1 and co.halfskip and co.qshift == 0, co.why)
assert(co.why:find("empty halves skipped (59% with an empty key half, >= 45%)", 1, true), co.why)
local _, cos = stof.explain(M.longformer(32, 32), {S = 4096, B = 16, H = 12, D = 64}, {gpu = "h100"})
assert(cos.qshift == 32 and cos.heavy_rows == 1 and not cos.halfskip, cos.why)
assert(cos.why:find("no half skip (25% with an empty key half, < 45%)", 1, true), cos.why)
local _, co0 = stof.explain(M.longformer(32, 32), {S = 4096, B = 16, H = 12, D = 64}, {gpu = "h100", order = -1})
assert(co0.heavy_rows == 0 and co0.why:find("last tile-row first (asked for)", 1, true), co0.why)
-- the other suite masks have no tile-row of 3x their mean there; those whose rows differ in
-- length by 4 tiles or more are launched longest first over groups of (b, h) pairs whose K
-- and V fit 24 MB (at S 4096, D 64: 24 pairs), the others in the usual order (twenty-third
-- session)
for _, name in ipairs({"document", "causal", "sliding", "causal_sliding", "bigbird"}) do
  local _, cn = stof.explain(M.suite(name, 4096), {S = 4096, B = 16, H = 12, D = 64}, {gpu = "h100", tile = 64})
  local grouped = name == "document" or name == "causal" or name == "bigbird"
  assert(cn.heavy_rows == 0, name .. ": " .. cn.why)
  if grouped then
    assert(cn.order_group == 24 and cn.why:find("tile-rows longest first, 24 (b, h) at a time (", 1, true),
           name .. ": " .. cn.why)
  else
    assert(cn.order_group == 1 and cn.why:find("last tile-row first (none has 3x its mean tiles", 1, true),
           name .. ": " .. cn.why)
  end
  -- order_group 1: pair by pair, as before
  local _, c1 = stof.explain(M.suite(name, 4096), {S = 4096, B = 16, H = 12, D = 64},
                             {gpu = "h100", tile = 64, order_group = 1})
  assert(c1.order_group == 1 and c1.why:find("last tile-row first (none has 3x its mean tiles", 1, true),
         name .. ": " .. c1.why)
end
local ok_g, err_g = pcall(stof.explain, M.causal(), {S = 1024}, {gpu = "h100", order_group = -2})
assert(not ok_g and tostring(err_g):find("order_group -2", 1, true), tostring(err_g))
local ok_o, err_o = pcall(stof.explain, M.dense(), {S = 1024}, {gpu = "h100", order = 1})
assert(not ok_o and tostring(err_o):find("order 1", 1, true), tostring(err_o))
local _, cb = stof.explain(M.suite("bigbird", 4096), {S = 4096, B = 16, H = 12, D = 64}, {gpu = "h100", tile = 64})
assert(cb.rowmask and cb.halfskip and cb.split_rows == 0 and cb.why:find("empty halves skipped (82%", 1, true), cb.why)
-- left to the selector, BigBird's 32-wide blocks run at tile 32 on the mma.sync kernel there
local t32, c32 = stof.explain(M.suite("bigbird", 4096), {S = 4096, B = 16, H = 12, D = 64}, {gpu = "h100"})
-- the text shows the tiles the selector read, then the plan's
assert(t32:find("tiles of 64: 5 full, 1629 partial, 2462 empty", 1, true), t32)
assert(t32:find("tiles of 32 (the plan's): 1999 full, 222 partial, 14163 empty", 1, true), t32)
assert(c32.tile == 32 and not c32.hopper and c32.warps == 2 and not c32.halfskip and c32.split_rows == 0, c32.why)
assert(c32.why:find("tile 32 (Hopper: 32 at >= 72% of the non-empty 64-tiles with an empty key half (82%), S >= 2048)",
                    1, true), c32.why)
local td, cd = stof.explain(M.dense(), {S = 4096, D = 64}, {gpu = "h100", key64 = -1})
assert(not td:find("the plan's", 1, true), td) -- the tile the selector read is the plan's
assert(not cd.rowmask and not cd.halfskip and cd.why:find("masked from the bitmap (0% partial", 1, true), cd.why)
expect_error("UnsupportedError", "split 4 asked for, but the Hopper kernel is not chosen", stof.explain,
             M.dense(), {S = 1024}, {gpu = "a100", split = 4})
expect_error("ValueError", "option split = 4294967296 is out of range", stof.explain, M.dense(), {S = 1024},
             {gpu = "h100", split = 1 << 32})
expect_error("ValueError", "split -2", stof.explain, M.dense(), {S = 1024}, {gpu = "h100", split = -2})

-- Errors.
-- a mask that keeps nothing gives zeros (tests/lua/test_messages.lua), as rows with no key do
expect_error("ShapeError", "[B, H, S, D]", stof.attention, stof.rand({2, 3}, "float32", 1), k, v, M.causal())
expect_error("ShapeError", "multiple of", stof.attention, stof.rand({1, 3, S, D}, "float32", 1),
             stof.rand({1, 2, S, D}, "float32", 2), stof.rand({1, 2, S, D}, "float32", 3), M.causal())
expect_error("ShapeError", "v must have k's shape", stof.attention, q, k, stof.rand({B, H, S, 4}, "float32", 1), M.causal())
expect_error("TypeError", "stof.Mask", stof.attention, q, k, v, "causal")
expect_error("ValueError", "kernel must be", stof.attention, q, k, v, M.causal(), {kernel = "fast"})
expect_error("ValueError", "tile 96", stof.explain, M.causal(), {S = 128}, {tile = 96})
expect_error("ValueError", "give S", stof.explain, M.causal(), {B = 2})
expect_error("ShapeError", "[B, H, S, D]", te.attention, te.placeholder({4, 4}, "float32", "x"), K, V, M.causal())
print("attention tests passed")
