-- stof.nn: every layer on seeded random inputs through stof.eval against plain Lua loops
-- (1e-5 in float32, 1e-2 in float16), the embedding clamp, the tag of every op a layer
-- builds, and the argument errors (layer, cause and the caller's file:line).
package.path = debug.getinfo(1, "S").source:match("^@(.*/)") .. "?.lua;" .. package.path
local U = require("util")
local stof = require("stof")
local te, nn, M = stof.te, stof.nn, stof.mask

local seed = 0
-- A placeholder, its random value and that value as a nested Lua table (1-based).
local function input(shape, name, dtype)
  seed = seed + 1
  local ph = te.placeholder(shape, dtype or "float32", name)
  local t = stof.rand(shape, dtype or "float32", seed)
  return ph, t, t:totable()
end

-- v[i][j]... of a nested table from 0-based indices
local function at(v, ...)
  for _, i in ipairs({...}) do v = v[i + 1] end
  return v
end

local function gelu(x) return 0.5 * x * (1 + U.erf(x / math.sqrt(2))) end
local function gelu_tanh(x)
  return 0.5 * x * (1 + math.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ^ 3)))
end
local function sigmoid(x) return 1 / (1 + math.exp(-x)) end

-- ---------------------------------------------------------------- linear
do
  local x, xv, xt = input({2, 3, 5}, "x")
  local w, wv, wt = input({5, 4}, "w")
  local wT, wTv, wTt = input({4, 5}, "wT")
  local b, bv, bt = input({4}, "b")
  local y = nn.linear(x, w, b, {name = "fc"})
  local g = nn.linear(x, w, nil, "fc0")
  local yT = nn.linear(x, wT, b, {name = "fcT", transposed = true})
  assert(y.tag == "bias_add" and y.name == "fc.bias", y.tag)
  assert(g.tag == "gemm" and g.name == "fc0" and g.dtype == "float32")
  assert(yT.tag == "bias_add")
  -- the GEMM body is exactly sum(load(x) * load(w)): no casts, no bias
  local body = tostring(g.body)
  assert(body == "sum((x[i, j, fc0.k] * w[fc0.k, k]), axis=[fc0.k:5])", body)
  local out, outg, outT = stof.eval({y, g, yT}, {[x] = xv, [w] = wv, [b] = bv, [wT] = wTv})
  local function ref(trans, bias)
    return function(i, s, j)
      local r = bias and bt[j + 1] or 0
      for k = 0, 4 do
        r = r + at(xt, i, s, k) * (trans and at(wTt, j, k) or at(wt, k, j))
      end
      return r
    end
  end
  U.check(out, ref(false, true), 1e-5, "linear")
  U.check(outg, ref(false, false), 1e-5, "linear without bias")
  U.check(outT, ref(true, true), 1e-5, "linear transposed")
  -- float16: computed from the same f16 values, within 1e-2
  local xh, xhv, xht = input({3, 16}, "xh", "float16")
  local wh, whv, wht = input({16, 8}, "wh", "float16")
  local bh, bhv, bht = input({8}, "bh", "float16")
  local yh = nn.linear(xh, wh, bh, "fch")
  assert(yh.dtype == "float16")
  U.check(stof.eval(yh, {[xh] = xhv, [wh] = whv, [bh] = bhv}), function(i, j)
    local r = bht[j + 1]
    for k = 0, 15 do r = r + xht[i + 1][k + 1] * wht[k + 1][j + 1] end
    return r
  end, 1e-2, "linear float16")
  -- errors
  U.raises(function() nn.linear(x, wT, b) end, "nn.linear", "x's last dim 5 is not w's first dim 4")
  U.raises(function() nn.linear(x, w, b, {transposed = true}) end, "nn.linear", "w's second dim 4")
  U.raises(function() nn.linear(x, w, wT) end, "nn.linear: bias has shape [4, 5], [4] expected")
  U.raises(function() nn.linear(x, wh) end, "nn.linear: w has dtype float16, x float32")
  U.raises(function() nn.linear(xv, w) end, "nn.linear: x must be a te tensor, got userdata")
  U.raises(function() nn.linear(x, w, nil, 3) end, "nn.linear: opts must be a table or a name")
end

-- ---------------------------------------------------------------- embedding
do
  local tbl, tv, tt = input({10, 6}, "table")
  local ids = te.placeholder({2, 3}, "int64", "ids")
  local iv = stof.tensor({{0, 3, 9}, {12, -1, 5}}, "int64")
  local e = nn.embedding(ids, tbl, "emb")
  assert(e.tag == "embedding" and e.name == "emb")
  local sh = e.shape
  assert(#sh == 3 and sh[1] == 2 and sh[2] == 3 and sh[3] == 6)
  local want = {{0, 3, 9}, {9, 0, 5}} -- 12 reads the last row, -1 the first
  U.check(stof.eval(e, {[ids] = iv, [tbl] = tv}), function(b, s, j)
    return tt[want[b + 1][s + 1] + 1][j + 1]
  end, 0, "embedding (clamped)")
  local ids32 = te.placeholder({4}, "int32", "ids32")
  local e32 = nn.embedding(ids32, tbl)
  U.check(stof.eval(e32, {[ids32] = stof.tensor({1, 100, 2, 3}, "int32"), [tbl] = tv}), function(s, j)
    return tt[({1, 9, 2, 3})[s + 1] + 1][j + 1]
  end, 0, "embedding int32")
  local pe = nn.position_embedding(tbl, 2, 4, "pos")
  assert(pe.tag == "embedding")
  U.check(stof.eval(pe, {[tbl] = tv}), function(_, s, j) return tt[s + 1][j + 1] end, 0, "positions")
  U.raises(function() nn.embedding(tbl, tbl) end, "nn.embedding: ids has dtype float32, int32 or int64 expected")
  U.raises(function() nn.embedding(ids, ids) end, "nn.embedding: table has dtype int64, a float dtype expected")
  U.raises(function() nn.embedding(ids, te.placeholder({10}, "float32", "t1")) end,
    "nn.embedding: table has shape [10], [V, E] expected")
  U.raises(function() nn.position_embedding(tbl, 2, 11) end, "nn.position_embedding", "at least 11 rows, it has 10")
end

-- ---------------------------------------------------------------- activations, add, mul
do
  local x, xv, xt = input({2, 3, 7}, "x")
  local y, yv, yt = input({2, 3, 7}, "y")
  local cases = {
    {nn.gelu, "gelu", gelu}, {nn.gelu_tanh, "gelu_tanh", gelu_tanh},
    {nn.relu, "relu", function(v) return math.max(v, 0) end},
    {nn.silu, "silu", function(v) return v * sigmoid(v) end},
  }
  for _, c in ipairs(cases) do
    local out = c[1](x)
    assert(out.tag == c[2] and out.name == c[2] and out.dtype == "float32", c[2])
    assert(c[1](x, "act." .. c[2]).name == "act." .. c[2])
    U.check(stof.eval(out, {[x] = xv}), function(...) return c[3](at(xt, ...)) end, 1e-5, c[2])
    U.raises(function() c[1](3) end, "nn." .. c[2] .. ": x must be a te tensor, got number")
  end
  assert(nn.activation("gelu_new") == nn.gelu_tanh and nn.activation("gelu") == nn.gelu)
  assert(nn.activation("swish") == nn.silu and nn.activation("relu") == nn.relu)
  local none, known = nn.activation("tanhh")
  assert(none == nil and known:find("gelu_new", 1, true))
  local s = nn.add(x, y, "res")
  local s2 = nn.add(x, y, "emb.sum", "add")
  local p = nn.mul(x, y)
  assert(s.tag == "residual_add" and s2.tag == "add" and p.tag == "mul" and s.name == "res")
  local sv, pv = stof.eval({s, p}, {[x] = xv, [y] = yv})
  U.check(sv, function(...) return at(xt, ...) + at(yt, ...) end, 1e-6, "add")
  U.check(pv, function(...) return at(xt, ...) * at(yt, ...) end, 1e-6, "mul")
  local z = te.placeholder({2, 3, 6}, "float32", "z")
  U.raises(function() nn.add(x, z) end, "nn.add: shapes [2, 3, 7] and [2, 3, 6] differ")
  U.raises(function() nn.mul(x, te.placeholder({2, 3, 7}, "float16", "h")) end, "nn.mul: dtypes float32 and float16 differ")
  U.raises(function() nn.add(x, y, "r", "gemm") end, "nn.add: tag must be")
  U.raises(function() nn.gelu(te.placeholder({3}, "int32", "i")) end, "nn.gelu: x has dtype int32, a float dtype expected")
  -- float16: f32 math, stored in f16
  local xh, xhv, xht = input({4, 5}, "xh", "float16")
  local gh = nn.gelu(xh)
  assert(gh.dtype == "float16")
  U.check(stof.eval(gh, {[xh] = xhv}), function(i, j) return gelu(xht[i + 1][j + 1]) end, 1e-2, "gelu float16")
end

-- ---------------------------------------------------------------- layer norm, rms norm, softmax
do
  local D = 8
  local x, xv, xt = input({2, 3, D}, "x")
  local g, gv, gt = input({D}, "gamma")
  local b, bv, bt = input({D}, "beta")
  local eps = 1e-5
  local ln = nn.layer_norm(x, g, b, eps, "ln")
  assert(ln.tag == "layer_norm" and ln.name == "ln" and ln.dtype == "float32")
  local rn = nn.rms_norm(x, g, eps, "rms")
  assert(rn.tag == "rms_norm" and rn.name == "rms")
  local sm = nn.softmax(x, "sm")
  assert(sm.tag == "softmax" and sm.name == "sm")
  local function row(i, s)
    local r = {}
    for j = 0, D - 1 do r[j] = at(xt, i, s, j) end
    return r
  end
  local function stats(r)
    local m, v = 0, 0
    for j = 0, D - 1 do m = m + r[j] end
    m = m / D
    for j = 0, D - 1 do v = v + (r[j] - m) ^ 2 end
    return m, v / D
  end
  local lv, rv, sv = stof.eval({ln, rn, sm}, {[x] = xv, [g] = gv, [b] = bv})
  U.check(lv, function(i, s, j)
    local r = row(i, s)
    local m, v = stats(r)
    return (r[j] - m) / math.sqrt(v + eps) * gt[j + 1] + bt[j + 1]
  end, 1e-5, "layer_norm")
  U.check(rv, function(i, s, j)
    local r, ms = row(i, s), 0
    for k = 0, D - 1 do ms = ms + r[k] ^ 2 end
    return r[j] / math.sqrt(ms / D + eps) * gt[j + 1]
  end, 1e-5, "rms_norm")
  U.check(sv, function(i, s, j)
    local r, mx, den = row(i, s), -math.huge, 0
    for k = 0, D - 1 do mx = math.max(mx, r[k]) end
    for k = 0, D - 1 do den = den + math.exp(r[k] - mx) end
    return math.exp(r[j] - mx) / den
  end, 1e-5, "softmax")
  -- the stat ops: float32, tagged, named after the layer
  local function find(t, name)
    for line in tostring(t):gmatch("[^\n]+") do
      if line:find("^" .. name:gsub("%.", "%%.") .. " = ") then return line end
    end
  end
  for _, c in ipairs({{ln, "ln.mean"}, {ln, "ln.var"}, {rn, "rms.ms"}, {sm, "sm.max"}, {sm, "sm.sum"}}) do
    assert(find(c[1], c[2]), c[2] .. " missing in\n" .. tostring(c[1]))
    assert(find(c[1], c[2]):find("float32", 1, true), c[2])
  end
  -- float16 input: stats in f32, output f16
  local xh, xhv, xht = input({3, D}, "xh", "float16")
  local gh, ghv, ght = input({D}, "gh", "float16")
  local bh, bhv, bht = input({D}, "bh", "float16")
  local lnh = nn.layer_norm(xh, gh, bh, eps, "lnh")
  assert(lnh.dtype == "float16" and find(lnh, "lnh.mean"):find("float32", 1, true))
  U.check(stof.eval(lnh, {[xh] = xhv, [gh] = ghv, [bh] = bhv}), function(i, j)
    local m, v = 0, 0
    for k = 1, D do m = m + xht[i + 1][k] end
    m = m / D
    for k = 1, D do v = v + (xht[i + 1][k] - m) ^ 2 end
    return (xht[i + 1][j + 1] - m) / math.sqrt(v / D + eps) * ght[j + 1] + bht[j + 1]
  end, 1e-2, "layer_norm float16")
  U.raises(function() nn.layer_norm(x, b, g, "1e-5") end, "nn.layer_norm: eps must be a number, got string")
  U.raises(function() nn.layer_norm(x, b, g, 1 / 0) end, "nn.layer_norm: eps must be a finite number, got inf")
  -- an error of te.compute inside a layer (an extent of 0) points at the caller's line and
  -- names the op, not nn.lua's line
  local e = U.raises(function() nn.gelu(te.placeholder({0, 3}, "float32", "x0")) end,
    "ShapeError: compute axis i: extent 0 must be positive (building op gelu)")
  assert(not e:find("stof/nn.lua", 1, true), e)
  U.raises(function() nn.rotary_table(math.maxinteger, 16, "big") end, "shape too large (building op big)")
  U.raises(function() nn.layer_norm(x, te.placeholder({7}, "float32", "g7"), b, eps) end,
    "nn.layer_norm: gamma has shape [7], [8] expected")
  U.raises(function() nn.layer_norm(x, g, nil, eps) end, "nn.layer_norm: beta is missing")
  U.raises(function() nn.rms_norm(x, gh, eps) end, "nn.rms_norm: gamma has dtype float16, float32 expected")
  U.raises(function() nn.softmax({}) end, "nn.softmax: x must be a te tensor, got table")
end

-- ---------------------------------------------------------------- heads
do
  local B, S, H, D = 2, 3, 2, 4
  local x, xv, xt = input({B, S, H * D}, "x")
  local qkv, qv, qt = input({B, S, 3 * H * D}, "qkv")
  local sh = nn.split_heads(x, H, "sh")
  assert(sh.tag == "split_heads" and sh.name == "sh")
  local s = sh.shape
  assert(s[1] == B and s[2] == H and s[3] == S and s[4] == D)
  local mh = nn.merge_heads(sh, "mh")
  assert(mh.tag == "merge_heads" and mh.shape[3] == H * D)
  local q, k, v = nn.split_qkv(qkv, H, "attn")
  assert(q.name == "attn.q" and k.name == "attn.k" and v.name == "attn.v")
  assert(q.tag == "split_heads" and k.tag == "split_heads" and v.tag == "split_heads")
  local shv, mhv, qv2, kv2, vv2 = stof.eval({sh, mh, q, k, v}, {[x] = xv, [qkv] = qv})
  U.check(shv, function(b, h, i, d) return at(xt, b, i, h * D + d) end, 0, "split_heads")
  U.check(mhv, function(...) return at(xt, ...) end, 0, "merge_heads")
  for part, t in ipairs({qv2, kv2, vv2}) do
    U.check(t, function(b, h, i, d) return at(qt, b, i, (part - 1) * H * D + h * D + d) end, 0, "split_qkv")
  end
  U.raises(function() nn.split_heads(x, 3) end, "nn.split_heads: the last dim 8 of x is not a multiple of 3 heads")
  U.raises(function() nn.split_qkv(x, 2) end, "nn.split_qkv: the last dim 8 of x is not a multiple of 3 x 2 heads")
  U.raises(function() nn.split_heads(x, 0) end, "nn.split_heads: heads must be a positive integer, got 0")
  U.raises(function() nn.merge_heads(x) end, "nn.merge_heads: x has shape [2, 3, 8], [B, H, S, D] expected")
end

-- ---------------------------------------------------------------- attention
do
  -- plain Lua: softmax(scale q k^T over the kept keys) v; zeros for a row with none
  local function ref(qt, kt, vt, mask, scale, H, Hkv)
    return function(b, h, i, d)
      local hk = h // (H // Hkv)
      local qi, scores, mx = qt[b + 1][h + 1][i + 1], {}, -math.huge
      local keys = kt[b + 1][hk + 1]
      for j = 0, #keys - 1 do
        if mask:eval(b, h, i, j) then
          local sc = 0
          for e = 1, #qi do sc = sc + qi[e] * keys[j + 1][e] end
          scores[j] = sc * scale
          mx = math.max(mx, scores[j])
        end
      end
      local num, den = 0, 0
      for j, sc in pairs(scores) do
        local p = math.exp(sc - mx)
        den = den + p
        num = num + p * vt[b + 1][hk + 1][j + 1][d + 1]
      end
      return den > 0 and num / den or 0
    end
  end
  local B, H, S, D = 2, 4, 9, 8
  local q, qv, qt = input({B, H, S, D}, "q")
  local k, kv, kt = input({B, 2, S, D}, "k") -- GQA: 2 KV heads for 4 heads
  local v, vv, vt = input({B, 2, S, D}, "v")
  for _, mask in ipairs({M.causal(), M.sliding(2) | M.global(1), M.bigbird(2, 1, 4, 0.3, 0),
      M.window(0, 0) - M.window(0, 0)}) do
    local a = nn.attention(q, k, v, mask)
    assert(a.intrin == "attention" or a.op == "extern", tostring(a.intrin))
    U.check(stof.eval(a, {[q] = qv, [k] = kv, [v] = vv}), ref(qt, kt, vt, mask, 1 / math.sqrt(D), H, 2),
      1e-5, "attention " .. tostring(mask))
  end
  local a2 = nn.attention(q, k, v, M.dense(), {scale = 0.5})
  U.check(stof.eval(a2, {[q] = qv, [k] = kv, [v] = vv}), ref(qt, kt, vt, M.dense(), 0.5, H, 2), 1e-5, "attention scale")
  U.raises(function() nn.attention(q, k, v, "causal") end, "nn.attention: mask must be a stof.mask value, got string")
  U.raises(function() nn.attention(k, q, v, M.dense()) end, "nn.attention", "H a multiple of Hkv")
  U.raises(function() nn.attention(q, k, te.placeholder({B, 2, S}, "float32", "v3"), M.dense()) end,
    "nn.attention: v has shape [2, 2, 9], [B, H, S, D] expected")
  U.raises(function() nn.attention(q, k, v, M.dense(), {scale = "x"}) end, "nn.attention: opts.scale must be a number")
end

-- ---------------------------------------------------------------- compatibility: linear(x, w, bias, name)
do
  local x, xv = input({3, 5}, "x")
  local w, wv = input({5, 2}, "w")
  local y = nn.linear(x, w, nil, "old")
  assert(y.name == "old" and y.shape[2] == 2)
end

print("nn ok")
