-- stof.models.t5: a tiny T5 (d_model 32, 2 + 2 layers, 2 heads, d_kv 16, d_ff 64, 8 buckets,
-- max_distance 20; encoder length 9, decoder length 7, batch 2) with random weights through
-- stof.eval against the same model written here in plain Lua loops from Hugging Face's
-- formulas (T5LayerNorm, T5Attention without scaling, _relative_position_bucket, the first
-- block's bias shared by the stack, DenseReluDense), every hidden state of both stacks
-- within 1e-4 relative L2 (float32), dense and sparse masks; the same model through
-- stof.plan (target "c", poisoned first) against stof.eval; the config; weight names;
-- from_pretrained round trips and its errors.
package.path = debug.getinfo(1, "S").source:match("^@(.*/)") .. "?.lua;" .. package.path
local U = require("util")
local stof = require("stof")
local M = stof.mask
local models = require("stof.models")
local t5 = models.t5
assert(models.configs.t5 and models.configs.t5.model_type == "t5" and models.module("t5") == t5)

-- ---------------------------------------------------------------- config
do
  local c = t5.config("t5")
  assert(c.d_model == 768 and c.d_kv == 64 and c.d_ff == 3072 and c.num_layers == 12)
  assert(c.num_decoder_layers == 12 and c.num_heads == 12 and c.relative_attention_num_buckets == 32)
  assert(c.relative_attention_max_distance == 128 and c.layer_norm_epsilon == 1e-6)
  assert(c.feed_forward_proj == "relu" and c.vocab_size == 32128)
  assert(c.hidden_size == 768 and c.num_attention_heads == 12 and c.num_hidden_layers == 12)
  local d = t5.config({num_layers = 3})
  assert(d.num_decoder_layers == 3) -- absent: num_layers, as T5Config
  local e = t5.config({d_model = 64, num_layers = 3, num_decoder_layers = stof.null})
  assert(e.num_decoder_layers == 3)
  assert(t5.config({num_layers = 3, num_decoder_layers = 2}).num_decoder_layers == 2)
  U.raises(function() t5.config({feed_forward_proj = "gated-gelu"}) end, "config: feed_forward_proj \"gated-gelu\" is not built")
  U.raises(function() t5.config({feed_forward_proj = "tanh"}) end, "is not one of \"relu\", \"gelu\"")
  U.raises(function() t5.config({relative_attention_num_buckets = 2}) end, "relative_attention_num_buckets 2: at least 4")
  U.raises(function() t5.config({relative_attention_max_distance = 8}) end, "relative_attention_max_distance 8 must exceed")
  U.raises(function() t5.config({model_type = "bert"}) end, "config: model_type is bert, not t5")
  U.raises(function() t5.build("t5", {batch = 1, seq = 8, decoder_seq = 0}) end, "t5.build: decoder_seq must be a positive integer")
end

local tiny = {
  d_model = 32, num_layers = 2, num_decoder_layers = 2, num_heads = 2, d_kv = 16, d_ff = 64,
  relative_attention_num_buckets = 8, relative_attention_max_distance = 20, vocab_size = 50,
}
local cfg = t5.config(tiny)

-- ---------------------------------------------------------------- weight names
do
  local s, n = t5.weight_shapes(cfg), 0
  for _ in pairs(s) do n = n + 1 end
  -- shared, 2 final norms, 2 bias tables; encoder 8 a block (q, k, v, o, 2 norms, wi, wo),
  -- decoder 13 (twice q, k, v, o, 3 norms, wi, wo)
  assert(n == 5 + 2 * 8 + 2 * 13, n)
  local function is(name, ...)
    local want, got = {...}, s[name]
    assert(got and #got == #want, name)
    for d = 1, #want do assert(got[d] == want[d], name) end
  end
  is("shared.weight", 50, 32)
  is("encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight", 8, 2)
  is("decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight", 8, 2)
  assert(s["encoder.block.1.layer.0.SelfAttention.relative_attention_bias.weight"] == nil)
  is("encoder.block.1.layer.0.SelfAttention.q.weight", 32, 32)
  is("encoder.block.1.layer.0.SelfAttention.o.weight", 32, 32)
  is("encoder.block.1.layer.1.DenseReluDense.wi.weight", 64, 32)
  is("encoder.block.1.layer.1.DenseReluDense.wo.weight", 32, 64)
  is("decoder.block.1.layer.1.EncDecAttention.k.weight", 32, 32)
  is("decoder.block.1.layer.2.layer_norm.weight", 32)
  is("decoder.final_layer_norm.weight", 32)
end

-- ---------------------------------------------------------------- the reference

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

-- a stof.Tensor [r, c] as a Lua array a[i][j] (1-based)
local function mat(t)
  local r, c = t:shape()[1], t:shape()[2]
  local a = {}
  for i = 1, r do
    a[i] = {}
    for j = 1, c do a[i][j] = t[{i - 1, j - 1}] end
  end
  return a
end
local function vec(t)
  local a = {}
  for i = 1, t:shape()[1] do a[i] = t[{i - 1}] end
  return a
end

-- x[s][e] -> y[s][o] = sum_e x[s][e] w[o][e] (nn.Linear, [out, in])
local function linear(x, w)
  local y = {}
  for s = 1, #x do
    local row = {}
    for o = 1, #w do
      local acc, wo, xs = 0, w[o], x[s]
      for e = 1, #xs do acc = acc + xs[e] * wo[e] end
      row[o] = acc
    end
    y[s] = row
  end
  return y
end
-- T5LayerNorm: x / sqrt(mean(x^2) + eps) * weight
local function rms(x, g, eps)
  local y = {}
  for s = 1, #x do
    local ms = 0
    for e = 1, #x[s] do ms = ms + x[s][e] ^ 2 end
    ms = ms / #x[s]
    local r = 1 / math.sqrt(ms + eps)
    y[s] = {}
    for e = 1, #x[s] do y[s][e] = x[s][e] * r * g[e] end
  end
  return y
end
local function add(a, b)
  local y = {}
  for s = 1, #a do
    y[s] = {}
    for e = 1, #a[s] do y[s][e] = a[s][e] + b[s][e] end
  end
  return y
end

-- One batch element's T5 forward; returns the encoder's and the decoder's hidden states.
local function reference(c, w, ids, dec_ids, b, enc_mask, dec_mask)
  local H, dk, eps, nb, maxd = c.num_heads, c.d_kv, c.layer_norm_epsilon, c.relative_attention_num_buckets,
    c.relative_attention_max_distance
  local W = setmetatable({}, {__index = function(t, name)
    local x = w[name]
    local v = #x:shape() == 2 and mat(x) or vec(x)
    rawset(t, name, v)
    return v
  end})
  -- T5Attention: no scaling; bias[bucket][h] of the stack's first block, or none
  local function attention(x, kv, p, mask, bias_w, bidirectional)
    local q, k, v = linear(x, W[p .. "q.weight"]), linear(kv, W[p .. "k.weight"]), linear(kv, W[p .. "v.weight"])
    local out = {}
    for i = 1, #x do
      out[i] = {}
      for e = 1, H * dk do out[i][e] = 0 end
    end
    for h = 0, H - 1 do
      for i = 1, #x do
        local s, mx = {}, -math.huge
        for j = 1, #kv do
          if mask:eval(b, h, i - 1, j - 1) then
            local d = 0
            for x_ = 1, dk do d = d + q[i][h * dk + x_] * k[j][h * dk + x_] end
            if bias_w then d = d + bias_w[bucket(j - i, bidirectional, nb, maxd) + 1][h + 1] end
            s[j] = d
            if d > mx then mx = d end
          end
        end
        local sum = 0
        for _, sj in pairs(s) do sum = sum + math.exp(sj - mx) end
        for j, sj in pairs(s) do
          local p_ = math.exp(sj - mx) / sum
          for x_ = 1, dk do out[i][h * dk + x_] = out[i][h * dk + x_] + p_ * v[j][h * dk + x_] end
        end
      end
    end
    return linear(out, W[p .. "o.weight"])
  end
  local function ff(h, p)
    local f = linear(rms(h, W[p .. "layer_norm.weight"], eps), W[p .. "DenseReluDense.wi.weight"])
    for s = 1, #f do for e = 1, #f[s] do f[s][e] = math.max(f[s][e], 0) end end
    return add(h, linear(f, W[p .. "DenseReluDense.wo.weight"]))
  end
  local function embed(id_t, n)
    local x = {}
    for s = 1, n do x[s] = {} ; local row = W["shared.weight"][id_t[{b, s - 1}] + 1]
      for e = 1, #row do x[s][e] = row[e] end end
    return x
  end
  local dense = M.dense()
  local h = embed(ids, ids:shape()[2])
  local enc = {h}
  local eb = W["encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"]
  for l = 0, c.num_layers - 1 do
    local p = "encoder.block." .. l .. ".layer."
    local x = rms(h, W[p .. "0.layer_norm.weight"], eps)
    h = add(h, attention(x, x, p .. "0.SelfAttention.", enc_mask, eb, true))
    h = ff(h, p .. "1.")
    enc[#enc + 1] = h
  end
  local enc_out = rms(h, W["encoder.final_layer_norm.weight"], eps)
  enc[#enc] = enc_out
  h = embed(dec_ids, dec_ids:shape()[2])
  local dec = {h}
  local db = W["decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"]
  for l = 0, c.num_decoder_layers - 1 do
    local p = "decoder.block." .. l .. ".layer."
    local x = rms(h, W[p .. "0.layer_norm.weight"], eps)
    h = add(h, attention(x, x, p .. "0.SelfAttention.", dec_mask, db, false))
    x = rms(h, W[p .. "1.layer_norm.weight"], eps)
    h = add(h, attention(x, enc_out, p .. "1.EncDecAttention.", dense, nil, false))
    h = ff(h, p .. "2.")
    dec[#dec + 1] = h
  end
  dec[#dec] = rms(h, W["decoder.final_layer_norm.weight"], eps)
  return enc, dec
end

-- rel L2 of got [B, S, E] (stof.Tensor) against want[b][s][e] for every b
local function rel_l2(got, wants)
  local num, den = 0, 0
  local B, S, E = table.unpack(got:shape())
  for b = 0, B - 1 do
    for s = 0, S - 1 do
      for e = 0, E - 1 do
        local w = wants[b + 1][s + 1][e + 1]
        num = num + (got[{b, s, e}] - w) ^ 2
        den = den + w ^ 2
      end
    end
  end
  return math.sqrt(num / den)
end

-- ---------------------------------------------------------------- stof.eval against the reference
local B, S, Sd = 2, 9, 7
local w = t5.random_weights(cfg, 7, "float32", {std = 0.15})
-- the bias tables larger than the init's, so that the buckets matter
for _, st in ipairs({"encoder", "decoder"}) do
  local name = st .. ".block.0.layer.0.SelfAttention.relative_attention_bias.weight"
  w[name] = stof.rand({8, 2}, "float32", st == "encoder" and 71 or 72)
end
local ids = stof.rand({B, S}, "int64", 3)
local dec_ids = stof.rand({B, Sd}, "int64", 4)
for i = 0, B * S - 1 do ids[{i // S, i % S}] = ids[{i // S, i % S}] % 50 end
for i = 0, B * Sd - 1 do dec_ids[{i // Sd, i % Sd}] = dec_ids[{i // Sd, i % Sd}] % 50 end
local inputs = {input_ids = ids, decoder_input_ids = dec_ids}

for _, mk in ipairs({{"dense", nil}, {"sparse", M.sliding(2) | M.global(1)}}) do
  local mname, mask = mk[1], mk[2]
  local m = t5.build(cfg, {batch = B, seq = S, decoder_seq = Sd, mask = mask})
  assert(#m.encoder_hidden_states == 3 and #m.decoder_hidden_states == 3 and #m.hidden_states == 6)
  assert(m.output == m.decoder_hidden_states[3] and m.encoder_output == m.encoder_hidden_states[3])
  local feed = m:feed(w, inputs)
  local outs = {}
  for _, x in ipairs(m.hidden_states) do outs[#outs + 1] = x end
  local got = {stof.eval(outs, feed)}
  local enc_want, dec_want = {}, {}
  for _ = 1, 3 do enc_want[#enc_want + 1] = {} ; dec_want[#dec_want + 1] = {} end
  for b = 0, B - 1 do
    local enc, dec = reference(cfg, w, ids, dec_ids, b, m.encoder_mask, m.decoder_mask)
    for l = 1, 3 do enc_want[l][b + 1] = enc[l] ; dec_want[l][b + 1] = dec[l] end
  end
  for l = 1, 3 do
    local e1, e2 = rel_l2(got[l], enc_want[l]), rel_l2(got[3 + l], dec_want[l])
    assert(e1 < 1e-4, ("%s: encoder hidden state %d: rel L2 %g"):format(mname, l - 1, e1))
    assert(e2 < 1e-4, ("%s: decoder hidden state %d: rel L2 %g"):format(mname, l - 1, e2))
  end
  -- the bias matters: the same model without the tables' values differs
  local w0 = {}
  for k, v in pairs(w) do w0[k] = v end
  for _, st in ipairs({"encoder", "decoder"}) do
    w0[st .. ".block.0.layer.0.SelfAttention.relative_attention_bias.weight"] = stof.zeros({8, 2}, "float32")
  end
  assert(stof.rel_l2(stof.eval(m.output, m:feed(w0, inputs)), got[6]) > 1e-3)

  -- stof.plan on the CPU backend against stof.eval, poisoned first
  local p = stof.plan(outs, {target = "c"})
  p:poison()
  local pr = {p:run(feed)}
  for i = 1, #outs do
    local e = stof.rel_l2(pr[i], got[i])
    assert(e < 1e-5, ("%s: plan \"c\" output %d: rel L2 %g"):format(mname, i, e))
  end
  local nattn = 0
  for _, sg in ipairs(p:segments()) do nattn = nattn + (sg.template:find("^attention") and 1 or 0) end
  assert(nattn == 2 * 1 + 2 * 2, nattn)
  -- the GPU kernels take the T5 bias (tests/gpu/models.lua runs T5 there): without a GPU
  -- the plan fails for want of one, not for the bias
  if not stof.cuda_mem_info() then
    local ok, err = pcall(stof.plan, m.output, {target = "cuda"})
    assert(not ok and tostring(err):find("no GPU", 1, true), err)
  end
end

-- ---------------------------------------------------------------- from_pretrained
if not (stof.save and stof.load and stof.load_json) then
  print("test_models_t5: stof.save / stof.load / stof.load_json missing: from_pretrained not tested")
else
  local function json(t)
    local keys, parts = {}, {}
    for k in pairs(t) do keys[#keys + 1] = k end
    table.sort(keys)
    for _, k in ipairs(keys) do
      local v = t[k]
      parts[#parts + 1] = ("%q: %s"):format(k, type(v) == "string" and ("%q"):format(v)
        or math.type(v) == "float" and ("%.17g"):format(v) or tostring(v))
    end
    return "{" .. table.concat(parts, ", ") .. "}"
  end
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
  local cj = {}
  for k, v in pairs(tiny) do cj[k] = v end
  cj.model_type, cj.is_encoder_decoder, cj.feed_forward_proj = "t5", true, "relu"
  cj.layer_norm_epsilon, cj.dropout_rate = 1e-6, 0.1
  -- as T5ForConditionalGeneration may save it: the tied embedding under the encoder's name,
  -- an lm_head beside
  local saved = {}
  for k, v in pairs(w) do if k ~= "shared.weight" then saved[k] = v end end
  saved["encoder.embed_tokens.weight"] = w["shared.weight"]
  saved["lm_head.weight"] = stof.rand({50, 32}, "float32", 9)
  local dir = model_dir("t5", json(cj), saved)
  local c2, w2 = t5.from_pretrained(dir)
  assert(c2.d_model == 32 and c2.num_layers == 2 and c2.relative_attention_num_buckets == 8)
  assert(stof.rel_l2(w2["shared.weight"], w["shared.weight"]) == 0)
  local m = t5.build(c2, {batch = B, seq = S, decoder_seq = Sd})
  assert(stof.rel_l2(stof.eval(m.output, m:feed(w2, inputs)), stof.eval(m.output, m:feed(w, inputs))) == 0)
  local _, wh = t5.from_pretrained(dir, {dtype = "float16"})
  assert(wh["decoder.final_layer_norm.weight"]:dtype() == "float16")
  -- errors
  local missing = {}
  for k, v in pairs(w) do if k ~= "decoder.block.1.layer.1.EncDecAttention.v.weight" then missing[k] = v end end
  local dm = model_dir("missing", json(cj), missing)
  U.raises(function() t5.from_pretrained(dm) end,
    "from_pretrained: model.safetensors lacks decoder.block.1.layer.1.EncDecAttention.v.weight")
  local bad = {}
  for k, v in pairs(w) do bad[k] = v end
  bad["encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"] = stof.rand({2, 8}, "float32", 1)
  local ds = model_dir("shape", json(cj), bad)
  U.raises(function() t5.from_pretrained(ds) end,
    "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight has shape [2, 8] in model.safetensors, expected [8, 2]")
  local gj = {}
  for k, v in pairs(cj) do gj[k] = v end
  gj.feed_forward_proj = "gated-gelu"
  local dg = model_dir("gated", json(gj), w)
  U.raises(function() t5.from_pretrained(dg) end, "config.json: config: feed_forward_proj \"gated-gelu\" is not built")
  U.raises(function() t5.from_pretrained(base .. "-nowhere") end, "t5.from_pretrained: cannot read", "config.json")
  for _, d in ipairs(made) do
    os.remove(d .. "/config.json")
    os.remove(d .. "/model.safetensors")
    os.remove(d)
  end
end
print("t5 tests passed")
