-- stof.nn's rotary, swiglu, patches and prepend against plain Lua (Hugging Face's
-- formulas); tiny LLaMA (GQA, 4 heads over 2 KV heads) and tiny ViT (image 32, patch 8:
-- 17 tokens) with random weights through stof.eval against the same models written in
-- plain Lua loops, hidden state by hidden state (relative L2 below 1e-4); the same models
-- through stof.plan on the CPU backend against stof.eval (1e-5, every projection a GEMM
-- segment); configs and their errors; from_pretrained round trips and errors; run.prepare.
package.path = debug.getinfo(1, "S").source:match("^@(.*/)") .. "?.lua;" .. package.path
local U = require("util")
local stof = require("stof")
local te, nn, M = stof.te, stof.nn, stof.mask
local models = require("stof.models")
local llama, vit = models.llama, models.vit
assert(models.configs.llama.model_type == "llama" and models.configs.vit.model_type == "vit")
assert(models.module("llama") == llama and models.module({model_type = "vit"}) == vit)

local function sigmoid(x) return 1 / (1 + math.exp(-x)) end
local function gelu(x) return 0.5 * x * (1 + U.erf(x / math.sqrt(2))) end

local seed = 0
local function input(shape, name, dtype)
  seed = seed + 1
  local ph = te.placeholder(shape, dtype or "float32", name)
  local t = stof.rand(shape, dtype or "float32", seed)
  return ph, t, t:totable()
end

-- Hugging Face's apply_rotary_pos_emb for one head vector x (1-based, D entries) at
-- position pos: inv_freq = 1 / theta^(arange(0, D, 2) / D), emb = cat(freqs, freqs),
-- x * cos(emb) + rotate_half(x) * sin(emb) with rotate_half(x) = cat(-x2, x1).
local function hf_rotary(x, pos, theta)
  local D = #x
  local half = D // 2
  local emb, rot, out = {}, {}, {}
  for i = 0, half - 1 do
    local f = pos * (1 / theta ^ ((2 * i) / D))
    emb[i + 1], emb[i + 1 + half] = f, f
  end
  for i = 1, half do rot[i], rot[i + half] = -x[i + half], x[i] end
  for i = 1, D do out[i] = x[i] * math.cos(emb[i]) + rot[i] * math.sin(emb[i]) end
  return out
end

-- ---------------------------------------------------------------- the new layers
do
  for _, tag in ipairs({"rotary", "swiglu", "patches", "concat"}) do
    local found = false
    for _, t in ipairs(nn.TAGS) do found = found or t == tag end
    assert(found, tag .. " is not in nn.TAGS")
  end
  -- rotary: theta 500000 and offset 3 (positions 3 .. 7), float32 and float16
  local B, H, S, D = 2, 3, 5, 8
  local x, xv, xt = input({B, H, S, D}, "x")
  local r = nn.rotary(x, {theta = 500000.0, offset = 3, name = "rope"})
  assert(r.tag == "rotary" and r.name == "rope" and r.dtype == "float32")
  assert(nn.rotary(x).name == "rotary" and nn.rotary(x, "q.rot").name == "q.rot")
  -- a misspelt option is refused (thetta would have left theta at 10000)
  U.raises(function() nn.rotary(x, {thetta = 500000}) end, 'nn.rotary: unknown option "thetta" (known: name, theta, offset, table)')
  U.raises(function() nn.linear(x, x, nil, {transpose = true}) end, 'nn.linear: unknown option "transpose"')
  local rv = stof.eval(r, {[x] = xv})
  local worst = U.check(rv, function(b, h, s, d)
    return hf_rotary(xt[b + 1][h + 1][s + 1], s + 3, 500000.0)[d + 1]
  end, 1e-5, "rotary")
  assert(worst < 1e-5)
  -- the default theta (10000) and offset 0 at a larger D
  local y, yv, yt = input({1, 2, 11, 64}, "y")
  U.check(stof.eval(nn.rotary(y), {[y] = yv}), function(_, h, s, d)
    return hf_rotary(yt[1][h + 1][s + 1], s, 10000.0)[d + 1]
  end, 1e-5, "rotary D 64")
  local xh, xhv, xht = input({1, 2, 9, 16}, "xh", "float16")
  local rh = nn.rotary(xh, {offset = 100})
  assert(rh.dtype == "float16")
  U.check(stof.eval(rh, {[xh] = xhv}), function(_, h, s, d)
    return hf_rotary(xht[1][h + 1][s + 1], s + 100, 10000.0)[d + 1]
  end, 1e-2, "rotary float16")
  U.raises(function() nn.rotary(te.placeholder({2, 3, 5}, "float32", "x3")) end,
    "nn.rotary: x has shape [2, 3, 5], [B, H, S, D] expected")
  U.raises(function() nn.rotary(te.placeholder({1, 1, 2, 5}, "float32", "odd")) end, "nn.rotary: the head dim 5")
  U.raises(function() nn.rotary(x, {offset = -1}) end, "nn.rotary: opts.offset must be a non-negative integer")
  U.raises(function() nn.rotary(x, {theta = 0}) end, "nn.rotary: opts.theta 0 is not positive")
  U.raises(function() nn.rotary(x, 3) end, "nn.rotary: opts must be a table or a name")
  U.raises(function() nn.rotary(te.placeholder({1, 1, 2, 4}, "int32", "i")) end, "nn.rotary: x has dtype int32")

  -- rotary from a table of cos and sin (nn.rotary_table, once per model): the same values as
  -- the angles computed per element; a table longer than x's sequence is fine
  local tab = nn.rotary_table(S + 4, D, {theta = 500000.0, offset = 3, name = "rope_tab"})
  assert(tab.tag == "rotary_table" and tab.name == "rope_tab" and tab.dtype == "float32")
  assert(tab.shape[1] == 2 and tab.shape[2] == S + 4 and tab.shape[3] == D)
  local rt = nn.rotary(x, {table = tab, name = "rope_t"})
  assert(rt.tag == "rotary" and rt.dtype == "float32")
  local rtv = stof.eval(rt, {[x] = xv})
  U.check(rtv, function(b, h, s, d)
    return hf_rotary(xt[b + 1][h + 1][s + 1], s + 3, 500000.0)[d + 1]
  end, 1e-5, "rotary from a table")
  assert(stof.rel_l2(rtv, rv) < 1e-6, "the table and the per-element angles disagree")
  local tabh = nn.rotary_table(9, 16, {offset = 100})
  U.check(stof.eval(nn.rotary(xh, {table = tabh}), {[xh] = xhv}), function(_, h, s, d)
    return hf_rotary(xht[1][h + 1][s + 1], s + 100, 10000.0)[d + 1]
  end, 1e-2, "rotary float16 from a table")
  U.raises(function() nn.rotary(x, {table = nn.rotary_table(S - 1, D)}) end,
    "nn.rotary: opts.table is float32 [2, 4, 8], float32 [2, >= 5, 8] expected (nn.rotary_table)")
  U.raises(function() nn.rotary(x, {table = nn.rotary_table(S, 2 * D)}) end, "nn.rotary: opts.table is float32 [2, 5, 16]")
  U.raises(function() nn.rotary(x, {table = x}) end, "nn.rotary: opts.table is float32 [2, 3, 5, 8]")
  U.raises(function() nn.rotary(x, {table = {}}) end, "nn.rotary: opts.table must be a te tensor")
  U.raises(function() nn.rotary(x, {table = tab, theta = 500000.0}) end,
    "nn.rotary: opts.theta and opts.offset are the table's; give them to nn.rotary_table")
  U.raises(function() nn.rotary_table(0, 8) end, "nn.rotary_table: S must be a positive integer, got 0")
  U.raises(function() nn.rotary_table(4, 7) end, "nn.rotary_table: D must be a positive even integer, got 7")
  U.raises(function() nn.rotary_table(4, 8, {theta = -1}) end, "nn.rotary_table: opts.theta -1 is not positive")
  U.raises(function() nn.rotary_table(4, 8, {offst = 1}) end, 'nn.rotary_table: unknown option "offst"')
  -- a NaN theta was "must be a number, got number"; an infinite one made every angle but the
  -- first pair's 0 without a word
  U.raises(function() nn.rotary_table(4, 8, {theta = 0 / 0}) end, "nn.rotary_table: opts.theta must be a finite number, got ")
  U.raises(function() nn.rotary_table(4, 8, {theta = math.huge}) end, "nn.rotary_table: opts.theta must be a finite number, got inf")
  U.raises(function() nn.rotary(x, {theta = math.huge}) end, "nn.rotary: opts.theta must be a finite number, got inf")

  -- swiglu: silu(gate) * up
  local g, gv, gt = input({2, 3, 7}, "g")
  local u, uv, ut = input({2, 3, 7}, "u")
  local sw = nn.swiglu(g, u, "mlp.act")
  assert(sw.tag == "swiglu" and sw.name == "mlp.act")
  U.check(stof.eval(sw, {[g] = gv, [u] = uv}), function(a, b, c)
    local v = gt[a + 1][b + 1][c + 1]
    return v * sigmoid(v) * ut[a + 1][b + 1][c + 1]
  end, 1e-6, "swiglu")
  U.raises(function() nn.swiglu(g, te.placeholder({2, 3, 6}, "float32", "u6")) end,
    "nn.swiglu: shapes [2, 3, 7] and [2, 3, 6] differ")

  -- patches: the convolution's (c, kh, kw) order, image 8 x 12, patch 4
  local px, pxv, pxt = input({2, 3, 8, 12}, "px")
  local pt = nn.patches(px, 4, "pt")
  assert(pt.tag == "patches" and pt.shape[1] == 2 and pt.shape[2] == 6 and pt.shape[3] == 48)
  U.check(stof.eval(pt, {[px] = pxv}), function(b, n, col)
    local c, kh, kw = col // 16, (col // 4) % 4, col % 4
    local ph, pw = n // 3, n % 3
    return pxt[b + 1][c + 1][ph * 4 + kh + 1][pw * 4 + kw + 1]
  end, 0, "patches")
  U.raises(function() nn.patches(px, 5) end, "nn.patches: the image 8x12 is not a multiple of the patch size 5")
  U.raises(function() nn.patches(px, 0) end, "nn.patches: patch must be a positive integer, got 0")
  U.raises(function() nn.patches(pt, 2) end, "nn.patches: pixels has shape [2, 6, 48], [B, C, H, W] expected")

  -- prepend: [E] and [1, 1, E] tokens
  local tok, tokv, tokt = input({1, 1, 48}, "tok")
  local flat, flatv, flatt = input({48}, "flat")
  local c1, c2 = nn.prepend(tok, pt, "cls"), nn.prepend(flat, pt)
  assert(c1.tag == "concat" and c1.name == "cls" and c1.shape[2] == 7 and c2.name == "prepend")
  local o1, o2, pv = stof.eval({c1, c2, pt}, {[px] = pxv, [tok] = tokv, [flat] = flatv})
  local ptt = pv:totable()
  U.check(o1, function(b, s, e) return s == 0 and tokt[1][1][e + 1] or ptt[b + 1][s][e + 1] end, 0, "prepend")
  U.check(o2, function(b, s, e) return s == 0 and flatt[e + 1] or ptt[b + 1][s][e + 1] end, 0, "prepend [E]")
  U.raises(function() nn.prepend(te.placeholder({47}, "float32", "t47"), pt) end,
    "nn.prepend: token has shape [47], [48] or [1, 1, 48] expected")
  U.raises(function() nn.prepend(te.placeholder({48}, "float16", "t16"), pt) end,
    "nn.prepend: dtypes float16 and float32 differ")

  -- position_embedding reads ViT's [1, P, E] table
  local pos, posv, post = input({1, 7, 5}, "pos")
  U.check(stof.eval(nn.position_embedding(pos, 2, 7, "pe"), {[pos] = posv}), function(_, s, e)
    return post[1][s + 1][e + 1]
  end, 0, "position table [1, P, E]")
  U.raises(function() nn.position_embedding(te.placeholder({2, 7, 5}, "float32", "p2"), 1, 3) end,
    "nn.position_embedding: table has shape [2, 7, 5], [P, E] or [1, P, E] expected")

  -- the CPU backend runs all of them as stof.eval does
  local outs = {r, rh, sw, pt, c1}
  local feed = {[x] = xv, [xh] = xhv, [g] = gv, [u] = uv, [px] = pxv, [tok] = tokv}
  local p = stof.plan(outs, {target = "c"})
  p:poison()
  local got, want = {p:run(feed)}, {stof.eval(outs, feed)}
  for i = 1, #outs do
    local e = stof.rel_l2(got[i]:astype("float32"), want[i]:astype("float32"))
    assert(e < (outs[i].dtype == "float32" and 1e-5 or 1e-2), ("layer %s: plan vs eval %g"):format(outs[i].name, e))
  end
end

-- ---------------------------------------------------------------- configs
do
  local c = llama.config("llama")
  assert(c.hidden_size == 2048 and c.intermediate_size == 8192 and c.num_hidden_layers == 16)
  assert(c.num_attention_heads == 32 and c.num_key_value_heads == 8 and c.vocab_size == 128256)
  assert(c.rope_theta == 10000.0 and c.rms_norm_eps == 1e-6 and c.hidden_act == "silu" and c.head_dim == 64)
  local v = vit.config("vit")
  assert(v.hidden_size == 768 and v.num_hidden_layers == 12 and v.num_attention_heads == 12)
  assert(v.intermediate_size == 3072 and v.image_size == 224 and v.patch_size == 16 and v.num_channels == 3)
  assert(v.layer_norm_eps == 1e-12 and v.hidden_act == "gelu" and v.qkv_bias == true)
  assert(vit.tokens(v) == 197)
  -- the benchmark's image sizes (shared/bench/peers.py): smallest side with tokens >= S
  local function is(S, img, T)
    local i, t = vit.image_for(S)
    assert(i == img and t == T, ("S %d: image %d, %d tokens"):format(S, i, t))
  end
  is(128, 192, 145); is(512, 368, 530); is(2048, 736, 2117); is(197, 224, 197); is(1, 16, 2)
  -- newer transformers write rope_parameters, older rope_scaling (null here)
  assert(llama.config({rope_parameters = {rope_theta = 500000.0, rope_type = "default"}}).rope_theta == 500000.0)
  assert(llama.config({rope_scaling = stof.null}).rope_theta == 10000.0)
  U.raises(function() llama.config({rope_scaling = {rope_type = "llama3", factor = 32.0}}) end,
    "config: rope_scaling.rope_type \"llama3\" is not built")
  U.raises(function() llama.config({num_key_value_heads = 5}) end,
    "config: num_attention_heads 32 is not a multiple of num_key_value_heads 5")
  U.raises(function() llama.config({attention_bias = true}) end, "config: attention_bias = true is not built")
  U.raises(function() llama.config({head_dim = 63}) end, "config: head_dim 63 is odd")
  U.raises(function() llama.config({hidden_act = "swiglu"}) end, "config: hidden_act \"swiglu\" is not one of")
  U.raises(function() vit.config({image_size = 100}) end, "config: image_size 100 is not a multiple of patch_size 16")
  U.raises(function() vit.config({num_channels = "3"}) end, "config: num_channels must be an integer, got string")
  U.raises(function() vit.build("vit", {batch = 1, seq = 196}) end,
    "vit.build: seq 196: image_size 224 with patch_size 16 gives 197 tokens")
  U.raises(function() llama.build("llama", {batch = 1, seq = 0}) end, "llama.build: seq must be a positive integer, got 0")

  -- weight names and shapes
  local s, n = llama.weight_shapes(llama.config("llama", {num_hidden_layers = 2})), 0
  for _ in pairs(s) do n = n + 1 end
  assert(n == 2 + 2 * 9, n)
  local function shape_is(t, name, ...)
    local want, got = {...}, t[name]
    assert(got and #got == #want, name)
    for d = 1, #want do assert(got[d] == want[d], name) end
  end
  shape_is(s, "embed_tokens.weight", 128256, 2048)
  shape_is(s, "layers.1.self_attn.q_proj.weight", 2048, 2048)
  shape_is(s, "layers.1.self_attn.k_proj.weight", 512, 2048)
  shape_is(s, "layers.0.self_attn.v_proj.weight", 512, 2048)
  shape_is(s, "layers.0.self_attn.o_proj.weight", 2048, 2048)
  shape_is(s, "layers.0.mlp.gate_proj.weight", 8192, 2048)
  shape_is(s, "layers.0.mlp.up_proj.weight", 8192, 2048)
  shape_is(s, "layers.1.mlp.down_proj.weight", 2048, 8192)
  shape_is(s, "layers.1.input_layernorm.weight", 2048)
  shape_is(s, "layers.1.post_attention_layernorm.weight", 2048)
  shape_is(s, "norm.weight", 2048)
  s, n = vit.weight_shapes(vit.config("vit", {num_hidden_layers = 2})), 0
  for _ in pairs(s) do n = n + 1 end
  assert(n == 6 + 2 * 16, n)
  shape_is(s, "embeddings.cls_token", 1, 1, 768)
  shape_is(s, "embeddings.position_embeddings", 1, 197, 768)
  shape_is(s, "embeddings.patch_embeddings.projection.weight", 768, 3, 16, 16)
  shape_is(s, "embeddings.patch_embeddings.projection.bias", 768)
  shape_is(s, "encoder.layer.1.attention.attention.query.weight", 768, 768)
  shape_is(s, "encoder.layer.1.attention.attention.value.bias", 768)
  shape_is(s, "encoder.layer.0.attention.output.dense.weight", 768, 768)
  shape_is(s, "encoder.layer.0.intermediate.dense.weight", 3072, 768)
  shape_is(s, "encoder.layer.0.output.dense.weight", 768, 3072)
  shape_is(s, "encoder.layer.1.layernorm_before.bias", 768)
  shape_is(s, "encoder.layer.1.layernorm_after.weight", 768)
  shape_is(s, "layernorm.bias", 768)
  s = vit.weight_shapes(vit.config("vit", {num_hidden_layers = 1, qkv_bias = false, image_size = 32}))
  assert(s["encoder.layer.0.attention.attention.key.weight"] and not s["encoder.layer.0.attention.attention.key.bias"])
  shape_is(s, "embeddings.position_embeddings", 1, 5, 768)
end

-- ---------------------------------------------------------------- plain-Lua references

local function tables(w)
  local t = {}
  for k, v in pairs(w) do t[k] = v:totable() end
  return t
end

-- y = x W^T (+ b), W [out, in]
local function linear(x, W, b)
  local y = {}
  for o = 1, #W do
    local s, row = b and b[o] or 0, W[o]
    for i = 1, #x do s = s + x[i] * row[i] end
    y[o] = s
  end
  return y
end

local function layer_norm(x, g, b, eps)
  local m, v, n = 0, 0, #x
  for i = 1, n do m = m + x[i] end
  m = m / n
  for i = 1, n do v = v + (x[i] - m) ^ 2 end
  local r, y = 1 / math.sqrt(v / n + eps), {}
  for i = 1, n do y[i] = (x[i] - m) * r * g[i] + b[i] end
  return y
end

-- LlamaRMSNorm: x * rsqrt(mean(x^2) + eps) * weight
local function rms_norm(x, g, eps)
  local ms = 0
  for i = 1, #x do ms = ms + x[i] * x[i] end
  local r, y = 1 / math.sqrt(ms / #x + eps), {}
  for i = 1, #x do y[i] = x[i] * r * g[i] end
  return y
end

local function vadd(a, b)
  local y = {}
  for i = 1, #a do y[i] = a[i] + b[i] end
  return y
end

-- Attention of one batch element: Q [S][H*D], K and V [S][Hkv*D]; query head h reads key /
-- value head h // (H / Hkv) (Hugging Face's repeat_kv); keep(h, i, j) 0-based.
local function attention(Q, K, V, H, Hkv, keep)
  local S, D = #Q, #Q[1] // H
  local scale, out, rep = 1 / math.sqrt(D), {}, H // Hkv
  for i = 1, S do out[i] = {} end
  for h = 0, H - 1 do
    local kh = h // rep
    for i = 1, S do
      local sc, mx = {}, -math.huge
      for j = 1, S do
        if keep(h, i - 1, j - 1) then
          local s = 0
          for d = 1, D do s = s + Q[i][h * D + d] * K[j][kh * D + d] end
          sc[j] = s * scale
          mx = math.max(mx, sc[j])
        end
      end
      local den = 0
      for j, s in pairs(sc) do sc[j] = math.exp(s - mx); den = den + sc[j] end
      for d = 1, D do
        local acc = 0
        for j, p in pairs(sc) do acc = acc + p * V[j][kh * D + d] end
        out[i][h * D + d] = den > 0 and acc / den or 0
      end
    end
  end
  return out
end

-- rotary on every head of a projection row r [n*D] at position pos
local function rotate_heads(r, n, D, pos, theta)
  local y = {}
  for h = 0, n - 1 do
    local head = hf_rotary({table.unpack(r, h * D + 1, h * D + D)}, pos, theta)
    for d = 1, D do y[h * D + d] = head[d] end
  end
  return y
end

-- hidden[l][b][s], as LlamaModel(output_hidden_states = True): the last entry has the norm
local function llama_ref(cfg, W, ids, mask)
  local H, Hkv, D, eps, L = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim, cfg.rms_norm_eps,
    cfg.num_hidden_layers
  local hidden = {}
  for b = 1, #ids do
    local X = {}
    for s = 1, #ids[b] do
      X[s] = {table.unpack(W["embed_tokens.weight"][math.max(0, math.min(cfg.vocab_size - 1, ids[b][s])) + 1])}
    end
    hidden[1] = hidden[1] or {}
    hidden[1][b] = X
    for l = 0, L - 1 do
      local p = "layers." .. l .. "."
      local function lin(x, n) return linear(x, W[p .. n .. ".weight"]) end
      local Q, K, V = {}, {}, {}
      for s = 1, #X do
        local x = rms_norm(X[s], W[p .. "input_layernorm.weight"], eps)
        Q[s] = rotate_heads(lin(x, "self_attn.q_proj"), H, D, s - 1, cfg.rope_theta)
        K[s] = rotate_heads(lin(x, "self_attn.k_proj"), Hkv, D, s - 1, cfg.rope_theta)
        V[s] = lin(x, "self_attn.v_proj")
      end
      local A = attention(Q, K, V, H, Hkv, function(h, i, j) return j <= i and mask:eval(b - 1, h, i, j) end)
      local Y = {}
      for s = 1, #X do
        local h1 = vadd(X[s], lin(A[s], "self_attn.o_proj"))
        local x = rms_norm(h1, W[p .. "post_attention_layernorm.weight"], eps)
        local gate, up, f = lin(x, "mlp.gate_proj"), lin(x, "mlp.up_proj"), {}
        for i = 1, #gate do f[i] = gate[i] * sigmoid(gate[i]) * up[i] end
        Y[s] = vadd(h1, lin(f, "mlp.down_proj"))
        if l == L - 1 then Y[s] = rms_norm(Y[s], W["norm.weight"], eps) end
      end
      X = Y
      hidden[l + 2] = hidden[l + 2] or {}
      hidden[l + 2][b] = X
    end
  end
  return hidden
end

-- hidden[l][b][s] as ViTModel(output_hidden_states = True) (no final layernorm), and the
-- final layernorm's output; the patch embedding as the convolution it is.
local function vit_ref(cfg, W, pixels, mask)
  local H, eps, P, E = cfg.num_attention_heads, cfg.layer_norm_eps, cfg.patch_size, cfg.hidden_size
  local n = cfg.image_size // P
  local hidden, out = {}, {}
  local conv, cb = W["embeddings.patch_embeddings.projection.weight"], W["embeddings.patch_embeddings.projection.bias"]
  local pos, cls = W["embeddings.position_embeddings"][1], W["embeddings.cls_token"][1][1]
  for b = 1, #pixels do
    local X = {vadd(cls, pos[1])}
    for ph = 0, n - 1 do
      for pw = 0, n - 1 do
        local e = {}
        for o = 1, E do
          local s = cb[o]
          for c = 1, cfg.num_channels do
            for kh = 1, P do
              for kw = 1, P do
                s = s + conv[o][c][kh][kw] * pixels[b][c][ph * P + kh][pw * P + kw]
              end
            end
          end
          e[o] = s
        end
        X[#X + 1] = vadd(e, pos[#X + 1])
      end
    end
    hidden[1] = hidden[1] or {}
    hidden[1][b] = X
    for l = 0, cfg.num_hidden_layers - 1 do
      local p = "encoder.layer." .. l .. "."
      local function lin(x, nm) return linear(x, W[p .. nm .. ".weight"], W[p .. nm .. ".bias"]) end
      local function ln(x, nm) return layer_norm(x, W[p .. nm .. ".weight"], W[p .. nm .. ".bias"], eps) end
      local Q, K, V = {}, {}, {}
      for s = 1, #X do
        local x = ln(X[s], "layernorm_before")
        Q[s], K[s], V[s] = lin(x, "attention.attention.query"), lin(x, "attention.attention.key"),
          lin(x, "attention.attention.value")
      end
      local A = attention(Q, K, V, H, H, function(h, i, j) return mask:eval(b - 1, h, i, j) end)
      local Y = {}
      for s = 1, #X do
        local h1 = vadd(lin(A[s], "attention.output.dense"), X[s])
        local f = lin(ln(h1, "layernorm_after"), "intermediate.dense")
        for i = 1, #f do f[i] = gelu(f[i]) end
        Y[s] = vadd(lin(f, "output.dense"), h1)
      end
      X = Y
      hidden[l + 2] = hidden[l + 2] or {}
      hidden[l + 2][b] = X
    end
    out[b] = {}
    for s = 1, #X do out[b][s] = layer_norm(X[s], W["layernorm.weight"], W["layernorm.bias"], eps) end
  end
  return hidden, out
end

local function rel_l2(t, ref)
  local v, num, den = t:totable(), 0, 0
  for b = 1, #ref do
    for s = 1, #ref[b] do
      for e = 1, #ref[b][s] do
        local d = v[b][s][e] - ref[b][s][e]
        num, den = num + d * d, den + ref[b][s][e] ^ 2
      end
    end
  end
  return math.sqrt(num / den)
end

local function compare(what, outs, ref)
  assert(#outs == #ref, what .. ": " .. #outs .. " hidden states, want " .. #ref)
  for l = 1, #ref do
    local e = rel_l2(outs[l], ref[l])
    assert(e < 1e-4, ("%s: hidden state %d: relative L2 %.3g"):format(what, l, e))
  end
end

-- Plans outs on the CPU backend, poisons, runs and compares every output with stof.eval;
-- every GEMM segment starts with one of the names in gemms, and every name is one.
local function check_plan(what, outs, feed, gemms, tol)
  local p = stof.plan(outs, {target = "c"})
  p:poison()
  local got, want = {p:run(feed)}, {stof.eval(outs, feed)}
  for i = 1, #outs do
    local e = stof.rel_l2(got[i]:astype("float32"), want[i]:astype("float32"))
    assert(e < (tol or 1e-5), ("%s: output %d: plan vs eval rel L2 %g"):format(what, i, e))
  end
  local seen = {}
  for _, g in ipairs(p:segments()) do
    if g.kind == "gemm" then
      assert(gemms[g.first], what .. ": GEMM segment " .. g.first .. " is not a projection")
      seen[g.first] = true
    end
  end
  for name in pairs(gemms) do
    assert(seen[name], what .. ": projection " .. name .. " is not a GEMM segment:\n" .. p:describe())
  end
  return p
end

local B, S = 2, 9
local ids = stof.rand({B, S}, "int64", 7) -- in [0, 100): some ids beyond the vocabulary of 50
local masks = {dense = M.dense(), bigbird = M.bigbird(2, 1, 4, 0.3, 0), ["sliding|global"] = M.sliding(2) | M.global(1)}

-- ---------------------------------------------------------------- tiny LLaMA
local tiny_llama = llama.config("llama", {
  hidden_size = 64, num_hidden_layers = 2, num_attention_heads = 4, num_key_value_heads = 2,
  intermediate_size = 96, vocab_size = 50, max_position_embeddings = 16,
})
assert(tiny_llama.head_dim == 16)
local lw = llama.random_weights(tiny_llama, 1, "float32", {std = 0.2})
do
  local W = tables(lw)
  local gemms = {}
  for l = 0, 1 do
    for _, n in ipairs({"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
        "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"}) do
      gemms["layers." .. l .. "." .. n] = true
    end
  end
  for name, mask in pairs(masks) do
    local m = llama.build(tiny_llama, {batch = B, seq = S, mask = name ~= "dense" and mask or nil})
    assert(#m.hidden_states == 3 and m.output == m.hidden_states[3] and m.output.name == "norm")
    assert(m.output.tag == "rms_norm" and m.inputs.input_ids.dtype == "int64")
    -- grouped-query attention: k and v keep their 2 heads
    local kshape = m.weights["layers.0.self_attn.k_proj.weight"].shape
    assert(kshape[1] == 32 and kshape[2] == 64)
    local feed = m:feed(lw, {input_ids = ids})
    local outs = {stof.eval(m.hidden_states, feed)}
    compare("llama " .. name, outs, llama_ref(tiny_llama, W, ids:totable(), mask))
    local p = check_plan("llama " .. name, m.hidden_states, feed, gemms)
    if name == "bigbird" then print("tiny llama, causal & bigbird:\n" .. p:describe()) end
  end
  -- the op graph: rotary after the head split of q and k, not of v; one swiglu op
  local m = llama.build(tiny_llama, {batch = 1, seq = 4})
  local seen = {}
  for line in tostring(m.output):gmatch("[^\n]+") do
    local name = line:match("^(%S+) = compute")
    if name then seen[name] = true end
  end
  assert(seen["layers.0.self_attn.q_proj.rotary"] and seen["layers.1.self_attn.k_proj.rotary"])
  assert(not seen["layers.0.self_attn.v_proj.rotary"] and seen["layers.0.mlp.act"] and seen["embed_tokens"])
  -- float16 through the plan (1e-2)
  local mh = llama.build(tiny_llama, {batch = B, seq = S, dtype = "float16", mask = masks.bigbird})
  local lwh = llama.random_weights(tiny_llama, 1, "float16", {std = 0.2})
  check_plan("llama float16", mh.hidden_states, mh:feed(lwh, {input_ids = ids}), gemms, 1e-2)
end

-- ---------------------------------------------------------------- tiny ViT
local tiny_vit = vit.config("vit", {
  image_size = 32, patch_size = 8, hidden_size = 32, num_hidden_layers = 2, num_attention_heads = 2,
  intermediate_size = 48,
})
local vw = vit.random_weights(tiny_vit, 2, "float32", {std = 0.2})
local pixels = stof.rand({B, 3, 32, 32}, "float32", 11)
do
  local W = tables(vw)
  local gemms = {["embeddings.patch_embeddings.projection"] = true}
  for l = 0, 1 do
    for _, n in ipairs({"attention.attention.query", "attention.attention.key", "attention.attention.value",
        "attention.output.dense", "intermediate.dense", "output.dense"}) do
      gemms["encoder.layer." .. l .. "." .. n] = true
    end
  end
  local vmasks = {dense = M.dense(), bigbird = M.bigbird(2, 1, 4, 0.3, 0), sliding = M.sliding(3)}
  for name, mask in pairs(vmasks) do
    local m = vit.build(tiny_vit, {batch = B, mask = name ~= "dense" and mask or nil})
    assert(m.seq == 17 and #m.hidden_states == 3 and m.output.name == "layernorm" and m.output ~= m.hidden_states[3])
    local px = m.inputs.pixel_values
    assert(px.shape[1] == B and px.shape[2] == 3 and px.shape[3] == 32 and px.shape[4] == 32 and px.dtype == "float32")
    local proj = m.weights["embeddings.patch_embeddings.projection.weight"].shape
    assert(#proj == 2 and proj[1] == 32 and proj[2] == 192)
    local feed = m:feed(vw, {pixel_values = pixels})
    local outs = {stof.eval(m.hidden_states, feed)}
    local hidden, final = vit_ref(tiny_vit, W, pixels:totable(), mask)
    compare("vit " .. name, outs, hidden)
    local e = rel_l2(stof.eval(m.output, feed), final)
    assert(e < 1e-4, ("vit %s: output: relative L2 %.3g"):format(name, e))
    local all = {table.unpack(m.hidden_states)}
    all[#all + 1] = m.output
    local p = check_plan("vit " .. name, all, feed, gemms)
    if name == "bigbird" then print("tiny vit, bigbird:\n" .. p:describe()) end
  end
  -- the projection weight may also be given as the [E, C p p] matrix; another shape is an error
  local m = vit.build(tiny_vit, {batch = B, seq = 17})
  local w2 = {}
  for k, v in pairs(vw) do w2[k] = v end
  local proj = "embeddings.patch_embeddings.projection.weight"
  local feed = m:feed(vw, {pixel_values = pixels})
  w2[proj] = feed[m.weights[proj]]
  assert(#w2[proj]:shape() == 2)
  assert(stof.rel_l2(stof.eval(m.output, m:feed(w2, {pixel_values = pixels})), stof.eval(m.output, feed)) == 0)
  w2[proj] = stof.rand({32, 3, 4, 16}, "float32", 1)
  U.raises(function() m:feed(w2, {pixel_values = pixels}) end,
    "feed: embeddings.patch_embeddings.projection.weight has shape [32, 3, 4, 16], expected [32, 3, 8, 8]")
  U.raises(function() m:feed(vw, {input_ids = ids}) end, "feed: the inputs lack pixel_values")
  -- qkv_bias = false
  local nb = vit.config(tiny_vit, {qkv_bias = false, num_hidden_layers = 1})
  local nbw = vit.random_weights(nb, 3, "float32", {std = 0.2})
  local mnb = vit.build(nb, {batch = 1})
  local px1 = stof.rand({1, 3, 32, 32}, "float32", 12)
  local hidden = vit_ref(nb, tables(nbw), px1:totable(), M.dense())
  compare("vit without qkv biases", {stof.eval(mnb.hidden_states, mnb:feed(nbw, {pixel_values = px1}))}, hidden)
end

-- ---------------------------------------------------------------- run.prepare
do
  local run = require("stof.models.run")
  -- ViT: seq picks the image size (the smallest with at least seq tokens)
  local r = run.prepare(tiny_vit, {batch = 1, seq = 10, target = "c", dtype = "float32", hidden_states = true})
  assert(r.seq == 10 and r.seq_requested == 10 and r.image_size == 24 and r.model.seq == 10, r.seq)
  assert(r.inputs.pixel_values and r.inputs.pixel_values:shape()[4] == 24)
  local got = {r:run()} -- the hidden states, then the output (the final layernorm)
  local outs = {table.unpack(r.model.hidden_states)}
  outs[#outs + 1] = r.model.output
  local want = {stof.eval(outs, r.model:feed(r.weights, r.inputs))}
  assert(#got == 4 and #want == 4)
  for i = 1, #want do assert(stof.rel_l2(got[i], want[i]) < 1e-5, "run.prepare vit") end
  r = run.prepare(tiny_vit, {batch = 1, seq = 12, target = "c", dtype = "float32"})
  assert(r.seq == 17 and r.image_size == 32 and r.seq_requested == 12)
  -- LLaMA with causal & bigbird
  local rl = run.prepare(tiny_llama, {batch = 2, seq = 16, mask = "bigbird", target = "c", dtype = "float32"})
  local y = rl:run()
  assert(stof.rel_l2(y, stof.eval(rl.model.output, rl.model:feed(rl.weights, rl.inputs))) < 1e-5)
end

-- ---------------------------------------------------------------- from_pretrained
if not (stof.save and stof.load and stof.load_json) then
  print("test_models_llama_vit: stof.save / stof.load / stof.load_json missing: from_pretrained not tested")
else
  local json = U.json
  local base = os.tmpname()
  os.remove(base)
  local made = {}
  local function model_dir(tag, cfg_json, weights)
    local dir = base .. "-" .. tag
    assert(os.execute("mkdir -p '" .. dir .. "'"))
    local f = assert(io.open(dir .. "/config.json", "w"))
    f:write(cfg_json)
    f:close()
    stof.save(dir .. "/model.safetensors", weights)
    made[#made + 1] = dir
    return dir
  end
  local function renamed(w, prefix, drop, replace)
    local r = {}
    for k, v in pairs(w) do if k ~= drop then r[prefix .. k] = v end end
    for k, v in pairs(replace or {}) do r[prefix .. k] = v end
    return r
  end
  -- as LlamaConfig.save_pretrained writes it: rope_scaling null, head_dim given
  local lcfg = {
    architectures = {"LlamaForCausalLM"}, model_type = "llama", hidden_size = 64, intermediate_size = 96,
    num_hidden_layers = 2, num_attention_heads = 4, num_key_value_heads = 2, vocab_size = 50,
    max_position_embeddings = 16, rms_norm_eps = 1e-6, rope_theta = 10000.0, hidden_act = "silu",
    head_dim = 16, attention_bias = false, mlp_bias = false, tie_word_embeddings = false,
    torch_dtype = "float32",
  }
  local ljson = json(lcfg):gsub("}$", ', "rope_scaling": null}')
  -- LlamaForCausalLM's names: "model." and an lm_head beside them
  local dir = model_dir("llama", ljson, renamed(lw, "model.", nil, {["lm_head.weight"] = stof.rand({50, 64})}))
  local cfg, w = llama.from_pretrained(dir)
  assert(cfg.hidden_size == 64 and cfg.num_key_value_heads == 2 and cfg.rms_norm_eps == 1e-6 and cfg.head_dim == 16)
  local m = llama.build(cfg, {batch = B, seq = S, mask = masks.bigbird})
  local m0 = llama.build(tiny_llama, {batch = B, seq = S, mask = masks.bigbird})
  assert(stof.rel_l2(stof.eval(m.output, m:feed(w, {input_ids = ids})),
    stof.eval(m0.output, m0:feed(lw, {input_ids = ids}))) == 0)
  -- LlamaModel's own names
  local dir2 = model_dir("llama-model", ljson, lw)
  local _, w2 = llama.from_pretrained(dir2, {dtype = "float16"})
  assert(w2["layers.1.mlp.down_proj.weight"]:dtype() == "float16")
  -- ViT as ViTForImageClassification saves it: "vit." and a classifier beside them
  local vcfg = {
    architectures = {"ViTForImageClassification"}, model_type = "vit", hidden_size = 32, num_hidden_layers = 2,
    num_attention_heads = 2, intermediate_size = 48, hidden_act = "gelu", layer_norm_eps = 1e-12,
    image_size = 32, patch_size = 8, num_channels = 3, qkv_bias = true, encoder_stride = 8,
    hidden_dropout_prob = 0.0,
  }
  local vdir = model_dir("vit", json(vcfg), renamed(vw, "vit.", nil, {["classifier.weight"] = stof.rand({10, 32})}))
  local vc, vw2 = vit.from_pretrained(vdir)
  assert(vc.image_size == 32 and vc.patch_size == 8 and vit.tokens(vc) == 17)
  assert(#vw2["embeddings.patch_embeddings.projection.weight"]:shape() == 4)
  local vm = vit.build(vc, {batch = B})
  local vm0 = vit.build(tiny_vit, {batch = B})
  assert(stof.rel_l2(stof.eval(vm.output, vm:feed(vw2, {pixel_values = pixels})),
    stof.eval(vm0.output, vm0:feed(vw, {pixel_values = pixels}))) == 0)
  -- errors: a missing tensor, a wrong shape (the projection flattened), a config error
  local missing = model_dir("llama-missing", ljson, renamed(lw, "", "layers.1.self_attn.k_proj.weight"))
  U.raises(function() llama.from_pretrained(missing) end,
    "from_pretrained: model.safetensors lacks layers.1.self_attn.k_proj.weight")
  local kv = model_dir("llama-kv", ljson, renamed(lw, "", nil,
    {["layers.0.self_attn.v_proj.weight"] = stof.rand({64, 64})}))
  U.raises(function() llama.from_pretrained(kv) end,
    "from_pretrained: layers.0.self_attn.v_proj.weight has shape [64, 64] in model.safetensors, expected [32, 64]")
  local flat = model_dir("vit-flat", json(vcfg), renamed(vw, "", nil,
    {["embeddings.patch_embeddings.projection.weight"] = stof.rand({32, 192})}))
  U.raises(function() vit.from_pretrained(flat) end,
    "from_pretrained: embeddings.patch_embeddings.projection.weight has shape [32, 192] in model.safetensors, expected [32, 3, 8, 8]")
  local vmiss = model_dir("vit-missing", json(vcfg), renamed(vw, "", "embeddings.cls_token"))
  U.raises(function() vit.from_pretrained(vmiss) end, "from_pretrained: model.safetensors lacks embeddings.cls_token")
  local big = model_dir("vit-224", json(vcfg):gsub('"image_size": 32', '"image_size": 64'), vw)
  U.raises(function() vit.from_pretrained(big) end,
    "embeddings.position_embeddings has shape [1, 17, 32] in model.safetensors, expected [1, 65, 32]")
  local scaled = model_dir("llama-scaled", json(lcfg):gsub("}$", ', "rope_scaling": {"rope_type": "llama3", "factor": 32.0}}'), lw)
  U.raises(function() llama.from_pretrained(scaled) end, "config.json: config: rope_scaling.rope_type \"llama3\" is not built")
  for _, d in ipairs(made) do
    os.remove(d .. "/config.json")
    os.remove(d .. "/model.safetensors")
    os.remove(d)
  end
end

print("models llama vit ok")
