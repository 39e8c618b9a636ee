-- Score modifiers from Lua: stof.attention (CPU) with a T5 bias table, ALiBi slopes (given
-- and standard) and the tanh soft cap on every suite mask, Sq == Sk and Sq != Sk, against
-- plain-Lua attention written from the formulas; te.attention with the table as a graph
-- input through stof.eval and through stof.plan (target "c", poisoned first); nn.attention
-- passing the options through; the GPU refusal (where a plan for the GPU can be made at
-- all); option errors with the script's file:line.
package.path = debug.getinfo(1, "S").source:match("^@(.*/)") .. "?.lua;" .. package.path
local U = require("util")
local stof = require("stof")
local te, nn, M = stof.te, stof.nn, stof.mask

-- Hugging Face's _relative_position_bucket, from its formula (rel = key - query).
local function bucket(rel, bidirectional, nb, max_distance)
  local base, n = 0, nil
  if bidirectional then
    nb = nb // 2
    if rel > 0 then base = nb end
    n = math.abs(rel)
  else
    n = math.max(-rel, 0)
  end
  local max_exact = nb // 2
  if n < max_exact then return base + n end
  local large = max_exact + math.floor(math.log(n / max_exact) / math.log(max_distance / max_exact) * (nb - max_exact))
  return base + math.min(large, nb - 1)
end
assert(bucket(-16, true, 32, 128) == 10 and bucket(12, true, 32, 128) == 25 and bucket(-20, false, 32, 128) == 17)

-- ALiBi's standard slopes (H a power of two here).
local function alibi_slope(H, h) return 2 ^ (-8 * (h + 1) / H) end

-- Masked softmax attention with a modifier, in plain Lua. mod: {scale, softcap, t5 = {tbl
-- [H, nb] tensor, bidirectional, nb, max_distance}, alibi = slopes tensor or true}.
local function reference(q, k, v, mask, mod)
  local B, H, Sq, D = table.unpack(q:shape())
  local Hkv, Sk = k:shape()[2], k:shape()[3]
  local out = stof.zeros({B, H, Sq, D}, "float32")
  local scale = mod.scale or 1 / math.sqrt(D)
  for b = 0, B - 1 do
    for h = 0, H - 1 do
      local hk = h // (H // Hkv)
      for i = 0, Sq - 1 do
        local s, mx = {}, -math.huge
        for j = 0, Sk - 1 do
          if mask:eval(b, h, i, j) then
            local d = 0
            for x = 0, D - 1 do d = d + q[{b, h, i, x}] * k[{b, hk, j, x}] end
            d = d * scale
            if mod.softcap then d = mod.softcap * math.tanh(d / mod.softcap) end
            if mod.t5 then
              local t = mod.t5
              d = d + t.tbl[{h, bucket(j - i, t.bidirectional, t.nb, t.max_distance)}]
            elseif mod.alibi then
              local slope = mod.alibi == true and alibi_slope(H, h) or mod.alibi[{h}]
              d = d + slope * (j - i)
            end
            s[j] = d
            if d > mx then mx = d end
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

local B, H, D = 2, 4, 8
local tbl32 = stof.rand({H, 32}, "float32", 31)   -- in [-1, 1)
local tbl8 = stof.rand({H, 8}, "float32", 32)
local slopes = stof.rand({H}, "float32", 33)
-- the modifiers as stof.attention options and as the reference reads them
local cases = {
  {"t5 bidirectional", {scale = 1, bias = tbl32}, {scale = 1, t5 = {tbl = tbl32, bidirectional = true, nb = 32, max_distance = 128}}},
  {"t5 unidirectional", {scale = 1, bias = tbl32, bidirectional = false, max_distance = 128, buckets = 32},
    {scale = 1, t5 = {tbl = tbl32, bidirectional = false, nb = 32, max_distance = 128}}},
  {"t5 8 buckets / 20", {bias = tbl8, max_distance = 20}, {t5 = {tbl = tbl8, bidirectional = true, nb = 8, max_distance = 20}}},
  {"alibi slopes", {alibi = slopes}, {alibi = slopes}},
  {"alibi standard", {alibi = true, scale = 0.5}, {alibi = true, scale = 0.5}},
  {"softcap", {softcap = 0.8}, {softcap = 0.8}},
  {"softcap + t5", {softcap = 1.5, bias = tbl8, max_distance = 20, bidirectional = false},
    {softcap = 1.5, t5 = {tbl = tbl8, bidirectional = false, nb = 8, max_distance = 20}}},
}

-- ---------------------------------------------------------------- stof.attention (CPU)
for _, sq_sk in ipairs({{29, 29}, {17, 29}}) do
  local Sq, Sk = sq_sk[1], sq_sk[2]
  -- uniform in [-1, 1): random, never all zero
  local q = stof.rand({B, H, Sq, D}, "float32", 41)
  local k = stof.rand({B, H // 2, Sk, D}, "float32", 42)
  local v = stof.rand({B, H // 2, Sk, D}, "float32", 43)
  for _, name in ipairs(M.suite_names()) do
    local m = M.suite(name, Sk)
    for _, c in ipairs(cases) do
      local got = stof.attention(q, k, v, m, c[2])
      local e = stof.rel_l2(got, reference(q, k, v, m, c[3]))
      assert(e < 1e-5, ("%s, %s, Sq %d Sk %d: rel L2 %g"):format(name, c[1], Sq, Sk, e))
    end
  end
end

-- ---------------------------------------------------------------- in a graph: eval and plan "c"
do
  local Sq, Sk = 13, 19
  local Q = te.placeholder({B, H, Sq, D}, "float32", "Q")
  local K = te.placeholder({B, H, Sk, D}, "float32", "K")
  local V = te.placeholder({B, H, Sk, D}, "float32", "V")
  local T = te.placeholder({H, 8}, "float32", "T")
  local S = te.placeholder({H}, "float32", "slopes")
  local Tw = te.placeholder({H, 12}, "float32", "Tw")
  local tblw = stof.rand({H, 12}, "float32", 34)
  local m = M.bigbird(2, 1, 4, 0.3, 5)
  local q, k, v = stof.rand({B, H, Sq, D}, "float32", 51), stof.rand({B, H, Sk, D}, "float32", 52),
    stof.rand({B, H, Sk, D}, "float32", 53)
  local feed = {[Q] = q, [K] = k, [V] = v, [T] = tbl8, [S] = slopes, [Tw] = tblw}
  local graphs = {
    {te.attention(Q, K, V, m, {bias = T, max_distance = 20, bidirectional = false, scale = 1}),
      {scale = 1, t5 = {tbl = tbl8, bidirectional = false, nb = 8, max_distance = 20}}},
    {te.attention(Q, K, V, m, {alibi = S, softcap = 2}), {alibi = slopes, softcap = 2}},
    {te.attention(Q, K, V, m, {alibi = true}), {alibi = true}},
    -- the table [buckets, H] transposed in the graph (as T5's weight is saved): a generated
    -- segment feeds the intrinsic's 4th input
    {te.attention(Q, K, V, m, {bias = te.compute({H, 8}, function(h, b) return (T[{h, b}] * 2) end, "T2"),
      max_distance = 20}), {t5 = {tbl = stof.eval(te.compute({H, 8}, function(h, b) return T[{h, b}] * 2 end, "T3"),
      {[T] = tbl8}), bidirectional = true, nb = 8, max_distance = 20}}},
    -- the table a slice of a wider one (a pure load, last stride 1): the runtime reads it as
    -- a view of Tw's storage, strided
    {te.attention(Q, K, V, m, {bias = te.compute({H, 8}, function(h, b) return Tw[{h, b + 3}] end, "Tslice"),
      max_distance = 20, bidirectional = false}),
      {t5 = {tbl = stof.eval(te.compute({H, 8}, function(h, b) return Tw[{h, b + 3}] end, "Tslice2"), {[Tw] = tblw}),
      bidirectional = false, nb = 8, max_distance = 20}}},
    -- through nn.attention
    {nn.attention(Q, K, V, m, {bias = T, max_distance = 20, softcap = 1}),
      {softcap = 1, t5 = {tbl = tbl8, bidirectional = true, nb = 8, max_distance = 20}}},
  }
  for i, g in ipairs(graphs) do
    local A, mod = g[1], g[2]
    assert(A.pattern == "opaque")
    local want = reference(q, k, v, m, mod)
    local ev = stof.eval(A, feed)
    assert(stof.rel_l2(ev, want) < 1e-5, "graph " .. i .. ": eval")
    local p = stof.plan(A, {target = "c"})
    local f = {}
    for _, ph in ipairs(p:inputs()) do f[ph] = feed[ph] end
    p:poison()
    local got = p:run(f)
    local e = stof.rel_l2(got, ev)
    assert(e < 1e-6, ("graph %d: plan \"c\" vs eval: %g"):format(i, e))
    local kinds = {}
    for _, s in ipairs(p:segments()) do kinds[#kinds + 1] = s.kind end
    assert(kinds[#kinds] == "intrinsic", table.concat(kinds, " "))
    if i == 5 then assert(p:segments()[#kinds].template == "attention (views)", p:describe()) end
    -- the GPU kernels take the modifier (tests/gpu/attention_mod.lua): without a GPU the
    -- plan fails for want of one, not for the modifier
    if not stof.cuda_mem_info() then
      local ok, err = pcall(stof.plan, A, {target = "cuda"})
      assert(not ok and tostring(err):find("no GPU", 1, true), err)
    end
  end
  -- a plan's two attention ops that differ only in their modifier do not share
  local A1 = te.attention(Q, K, V, m, {bias = T, max_distance = 20})
  local A2 = te.attention(Q, K, V, m, {bias = T, max_distance = 20, bidirectional = false})
  local p = stof.plan({A1, A2}, {target = "c"})
  local f = {}
  for _, ph in ipairs(p:inputs()) do f[ph] = feed[ph] end
  local r1, r2 = p:run(f)
  assert(stof.rel_l2(r1, stof.eval(A1, feed)) < 1e-6 and stof.rel_l2(r2, stof.eval(A2, feed)) < 1e-6)
  assert(stof.rel_l2(r1, r2) > 1e-3)
end

-- ---------------------------------------------------------------- errors
do
  local q = stof.rand({1, 2, 9, 4}, "float32", 1)
  local Q = te.placeholder({1, 2, 9, 4}, "float32", "Qe")
  local T = te.placeholder({2, 8}, "float32", "Te")
  U.raises(function() te.attention(Q, Q, Q, M.causal(), {bias = T, max_distanc = 20}) end,
    "ValueError", "te.attention: unknown option \"max_distanc\"")
  U.raises(function() stof.attention(q, q, q, M.causal(), {alibi = true, sofcap = 1}) end,
    "ValueError", "stof.attention: unknown option \"sofcap\"")
  U.raises(function() te.attention(Q, Q, Q, M.causal(), {bias = T, alibi = true}) end,
    "ValueError", "bias and alibi exclude each other")
  U.raises(function() te.attention(Q, Q, Q, M.causal(), {buckets = 8}) end,
    "ValueError", "option buckets is for the T5 bias")
  U.raises(function() te.attention(Q, Q, Q, M.causal(), {bias = tbl8}) end,
    "TypeError", "option bias must be a te tensor, got stof.Tensor")
  U.raises(function() stof.attention(q, q, q, M.causal(), {bias = T}) end,
    "TypeError", "option bias must be a stof.Tensor")
  U.raises(function() te.attention(Q, Q, Q, M.causal(), {bias = T, softcap = -1}) end,
    "ValueError", "option softcap must be a positive number")
  U.raises(function() te.attention(Q, Q, Q, M.causal(), {bias = T, buckets = 6}) end,
    "ShapeError", "the T5 bias table (Te) must be [H, buckets] = [2, 6]")
  U.raises(function() te.attention(Q, Q, Q, M.causal(), {bias = T, max_distance = 2}) end,
    "ValueError", "max_distance 2 must exceed")
  U.raises(function() te.attention(Q, Q, Q, M.causal(), {alibi = te.placeholder({3}, "float32", "s3")}) end,
    "ShapeError", "the ALiBi slopes (s3) must be [H] = [2]")
  U.raises(function() stof.attention(q, q, q, M.causal(), {bias = stof.rand({2, 5}, "float32", 2), buckets = 8}) end,
    "ShapeError", "[H, buckets] = [2, 8]")
  U.raises(function() nn.attention(Q, Q, Q, M.causal(), {bias = T, bogus = 1}) end, "unknown option \"bogus\"")
end
-- stof.explain names the modifier a plan would compile in (stof explain --mod / --softcap)
do
  local text = stof.explain(M.causal(), {S = 256}, {mod = "t5", bidirectional = false, max_distance = 64})
  assert(text:find("score modifier: T5 relative position bias (unidirectional, 32 buckets, max distance 64)", 1, true),
    text)
  text = stof.explain(M.causal(), {S = 256}, {mod = "alibi", softcap = 30})
  assert(text:find("score modifier: tanh soft cap 30 on the scaled scores, then ALiBi", 1, true), text)
  assert(stof.explain(M.causal(), {S = 256}):find("score modifier: none", 1, true))
  U.raises(function() stof.explain(M.causal(), {S = 256}, {mod = "t6"}) end, "ValueError", "option mod must be")
  U.raises(function() stof.explain(M.causal(), {S = 256}, {mod = "t5", max_distance = 4}) end,
    "ValueError", "max_distance 4 must exceed")
  -- and chooses as the plan would under it: dense D 64 on an H200 takes tile 128 in 64-key
  -- steps without a modifier, tile 64 with one (the rule was measured without)
  local dims = {S = 4096, B = 16, H = 12, D = 64}
  local _, plain = stof.explain(M.dense(), dims, {gpu = "h200"})
  local _, alibi = stof.explain(M.dense(), dims, {gpu = "h200", mod = "alibi"})
  assert(plain.key64 and plain.tile == 128, plain.why)
  assert(not alibi.key64 and alibi.tile == 64, alibi.why)
end
print("attention modifier tests passed")
