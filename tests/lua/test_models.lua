-- stof.models: tiny BERT and GPT-2 (random weights, batch 2, odd seq 9, dense and sparse
-- masks) through stof.eval against the same models written in plain Lua loops, hidden
-- state by hidden state (relative L2 below 1e-4); configs and their errors; weight names;
-- from_pretrained round trips and its errors.
package.path = debug.getinfo(1, "S").source:match("^@(.*/)") .. "?.lua;" .. package.path
local U = require("util")
local stof = require("stof")
local te, M = stof.te, stof.mask
local models = require("stof.models")
local bert, gpt2 = models.bert, models.gpt2
assert(stof.models == models and models.configs["bert-base"] and models.configs.gpt2)
assert(models.module("bert-large") == bert and models.module({model_type = "gpt2"}) == gpt2)

-- ---------------------------------------------------------------- configs
do
  local c = bert.config("bert-base")
  assert(c.hidden_size == 768 and c.num_hidden_layers == 12 and c.num_attention_heads == 12)
  assert(c.intermediate_size == 3072 and c.max_position_embeddings == 512 and c.type_vocab_size == 2)
  assert(c.vocab_size == 30522 and c.layer_norm_eps == 1e-12 and c.hidden_act == "gelu")
  local l = bert.config("bert-large")
  assert(l.hidden_size == 1024 and l.num_hidden_layers == 24 and l.num_attention_heads == 16)
  assert(l.intermediate_size == 4096)
  local t = bert.config({hidden_size = 64, num_attention_heads = 4}, {num_hidden_layers = 1})
  assert(t.hidden_size == 64 and t.num_hidden_layers == 1 and t.vocab_size == 30522)
  assert(bert.config({hidden_size = 64.0, num_attention_heads = 4}).hidden_size == 64)
  local g = gpt2.config("gpt2")
  assert(g.n_embd == 768 and g.n_layer == 12 and g.n_head == 12 and g.n_positions == 1024)
  assert(g.vocab_size == 50257 and g.layer_norm_epsilon == 1e-5 and g.activation_function == "gelu_new")
  assert(g.hidden_size == 768 and g.intermediate_size == 3072) -- the generic names mirrored
  local ga = gpt2.config({hidden_size = 64, num_hidden_layers = 3, num_attention_heads = 4})
  assert(ga.n_embd == 64 and ga.n_layer == 3 and ga.n_head == 4 and ga.intermediate_size == 256)

  U.raises(function() bert.config({hidden_size = "768"}) end, "config: hidden_size must be an integer, got string")
  U.raises(function() bert.config("bert-huge") end, "config: unknown bert config \"bert-huge\"", "bert-base")
  U.raises(function() bert.config({hidden_size = 100}) end, "hidden_size 100 is not a multiple of num_attention_heads 12")
  U.raises(function() bert.config({layer_norm_eps = "x"}) end, "config: layer_norm_eps must be a number, got string")
  U.raises(function() bert.config({hidden_act = "gelu2"}) end, "config: hidden_act \"gelu2\" is not one of")
  U.raises(function() bert.config({num_hidden_layers = 0}) end, "config: num_hidden_layers must be positive")
  U.raises(function() local m = gpt2.build(gpt2.config("gpt2", {n_layer = 1}), {batch = 1, seq = 8, dtyp = "float32"}); return m end,
    'gpt2.build: unknown option "dtyp" (known: batch, seq, mask, dtype)', "test_models.lua:")
  -- run.prepare: a misspelt option is refused by name, at the caller's line
  local run = require("stof.models.run")
  -- time_in_turn: each plan's median round, the two alternating
  local order = {}
  local function fake(name, times)
    local k = 0
    return {time = function(_, reps, warmup)
      assert(reps == 7 and warmup == 2)
      k = k + 1
      order[#order + 1] = name
      return times[k]
    end}
  end
  local ma, mb = run.time_in_turn(fake("a", {5, 1, 3}), fake("b", {9, 8, 40}), 7, 2)
  assert(ma == 3 and mb == 9, ("medians %s %s"):format(ma, mb))
  assert(table.concat(order) == "ababab", table.concat(order))
  U.raises(function() local r = run.prepare("gpt2", {tagret = "c"}); return r end, "ValueError",
    'unknown option "tagret"', "known: batch, seq", "test_models.lua:")
  U.raises(function() bert.config({model_type = "gpt2"}) end, "config: model_type is gpt2, not bert")
  U.raises(function() gpt2.config({n_embd = 64, hidden_size = 32}) end, "config: n_embd = 64 and its alias hidden_size = 32 disagree")
  U.raises(function() gpt2.config({n_head = 1.5}) end, "config: n_head must be an integer, got 1.5")
  U.raises(function() bert.build("bert-base", {batch = 1, seq = 513}) end,
    "bert.build: seq 513 exceeds the config's max_position_embeddings 512")
  U.raises(function() gpt2.build("gpt2", {batch = 0, seq = 8}) end, "gpt2.build: batch must be a positive integer, got 0")
  U.raises(function() bert.build("bert-base", {batch = 1, seq = 8, mask = "causal"}) end,
    "bert.build: mask must be a stof.mask value, got string")
  U.raises(function() bert.build("bert-base", {batch = 1, seq = 8, dtype = "int8"}) end, "bert.build: dtype int8")
end

-- ---------------------------------------------------------------- weight names
do
  local cfg = bert.config({num_hidden_layers = 2})
  local s, n = bert.weight_shapes(cfg), 0
  for _ in pairs(s) do n = n + 1 end
  assert(n == 5 + 2 * 16, n)
  local function is(name, ...)
    local want, got = {...}, s[name]
    assert(got and #got == #want, name)
    for d = 1, #want do assert(got[d] == want[d], name) end
  end
  is("embeddings.word_embeddings.weight", 30522, 768)
  is("embeddings.position_embeddings.weight", 512, 768)
  is("embeddings.token_type_embeddings.weight", 2, 768)
  is("embeddings.LayerNorm.bias", 768)
  is("encoder.layer.1.attention.self.query.weight", 768, 768)
  is("encoder.layer.1.attention.self.value.bias", 768)
  is("encoder.layer.0.attention.output.dense.weight", 768, 768)
  is("encoder.layer.0.attention.output.LayerNorm.weight", 768)
  is("encoder.layer.1.intermediate.dense.weight", 3072, 768)
  is("encoder.layer.1.output.dense.weight", 768, 3072)
  is("encoder.layer.1.output.LayerNorm.bias", 768)
  s, n = gpt2.weight_shapes(gpt2.config({n_layer = 2})), 0
  for _ in pairs(s) do n = n + 1 end
  assert(n == 4 + 2 * 12, n)
  is("wte.weight", 50257, 768)
  is("wpe.weight", 1024, 768)
  is("h.1.attn.c_attn.weight", 768, 2304)
  is("h.1.attn.c_attn.bias", 2304)
  is("h.0.attn.c_proj.weight", 768, 768)
  is("h.0.mlp.c_fc.weight", 768, 3072)
  is("h.0.mlp.c_proj.weight", 3072, 768)
  is("h.1.ln_2.weight", 768)
  is("ln_f.bias", 768)
end

-- ---------------------------------------------------------------- plain-Lua references

local function tables(w)
  local t = {}
  for k, v in pairs(w) do t[k] = v:totable() end
  return t
end

-- y = x W^T + b (nn.Linear, W [out, in]) or x W + b (Conv1D, W [in, out])
local function linear(x, W, b, conv1d)
  local y = {}
  for o = 1, #b do
    local s = b[o]
    if conv1d then
      for i = 1, #x do s = s + x[i] * W[i][o] end
    else
      local row = W[o]
      for i = 1, #x do s = s + x[i] * row[i] end
    end
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

local function vadd(a, b)
  local y = {}
  for i = 1, #a do y[i] = a[i] + b[i] end
  return y
end

local function gelu(x) return 0.5 * x * (1 + U.erf(x / math.sqrt(2))) end
local function gelu_tanh(x) return 0.5 * x * (1 + math.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ^ 3))) end

local function map(x, f)
  local y = {}
  for i = 1, #x do y[i] = f(x[i]) end
  return y
end

-- Multi-head attention of one batch element: Q, K, V [S][H*D]; keep(h, i, j) 0-based.
local function attention(Q, K, V, H, keep)
  local S, E = #Q, #Q[1]
  local D = E // H
  local scale, out = 1 / math.sqrt(D), {}
  for i = 1, S do out[i] = {} end
  for h = 0, H - 1 do
    for i = 1, S do
      local sc, mx = {}, -math.huge
      for j = 1, S do
        if keep(h, i - 1, j - 1) then
          local s = 0
          for d = 1, D do s = s + Q[i][h * D + d] * K[j][h * D + d] end
          sc[j] = s * scale
          mx = math.max(mx, sc[j])
        end
      end
      local den = 0
      for j, s in pairs(sc) do sc[j] = math.exp(s - mx); den = den + sc[j] end
      for d = 1, D do
        local acc = 0
        for j, p in pairs(sc) do acc = acc + p * V[j][h * D + d] end
        out[i][h * D + d] = den > 0 and acc / den or 0
      end
    end
  end
  return out
end

local function clamp(id, V) return math.max(0, math.min(V - 1, id)) end

-- hidden[l][b][s] (vectors), as Hugging Face's BertModel(output_hidden_states = True)
local function bert_ref(cfg, W, ids, types, mask)
  local H, eps, hidden = cfg.num_attention_heads, cfg.layer_norm_eps, {}
  local act = cfg.hidden_act == "gelu" and gelu or gelu_tanh
  local function lin(x, p) return linear(x, W[p .. ".weight"], W[p .. ".bias"]) end
  local function ln(x, p) return layer_norm(x, W[p .. ".weight"], W[p .. ".bias"], eps) end
  for b = 1, #ids do
    local X = {}
    for s = 1, #ids[b] do
      local e = vadd(W["embeddings.word_embeddings.weight"][clamp(ids[b][s], cfg.vocab_size) + 1],
        W["embeddings.position_embeddings.weight"][s])
      e = vadd(e, W["embeddings.token_type_embeddings.weight"][types[b][s] + 1])
      X[s] = ln(e, "embeddings.LayerNorm")
    end
    hidden[1] = hidden[1] or {}
    hidden[1][b] = X
    for l = 0, cfg.num_hidden_layers - 1 do
      local p = "encoder.layer." .. l .. "."
      local Q, K, V = {}, {}, {}
      for s = 1, #X do
        Q[s], K[s], V[s] = lin(X[s], p .. "attention.self.query"), lin(X[s], p .. "attention.self.key"),
          lin(X[s], p .. "attention.self.value")
      end
      local A = attention(Q, K, V, H, function(h, i, j) return mask:eval(b - 1, h, i, j) end)
      local Y = {}
      for s = 1, #X do
        local h1 = ln(vadd(lin(A[s], p .. "attention.output.dense"), X[s]), p .. "attention.output.LayerNorm")
        local f = map(lin(h1, p .. "intermediate.dense"), act)
        Y[s] = ln(vadd(lin(f, p .. "output.dense"), h1), p .. "output.LayerNorm")
      end
      X = Y
      hidden[l + 2] = hidden[l + 2] or {}
      hidden[l + 2][b] = X
    end
  end
  return hidden
end

-- as Hugging Face's GPT2Model(output_hidden_states = True): the last entry has ln_f
local function gpt2_ref(cfg, W, ids, mask)
  local H, eps, hidden, L = cfg.n_head, cfg.layer_norm_epsilon, {}, cfg.n_layer
  local function lin(x, p) return linear(x, W[p .. ".weight"], W[p .. ".bias"], true) end
  local function ln(x, p) return layer_norm(x, W[p .. ".weight"], W[p .. ".bias"], eps) end
  for b = 1, #ids do
    local X = {}
    for s = 1, #ids[b] do
      X[s] = vadd(W["wte.weight"][clamp(ids[b][s], cfg.vocab_size) + 1], W["wpe.weight"][s])
    end
    hidden[1] = hidden[1] or {}
    hidden[1][b] = X
    for l = 0, L - 1 do
      local p = "h." .. l .. "."
      local E = cfg.n_embd
      local Q, K, V = {}, {}, {}
      for s = 1, #X do
        local qkv = lin(ln(X[s], p .. "ln_1"), p .. "attn.c_attn")
        Q[s], K[s], V[s] = {table.unpack(qkv, 1, E)}, {table.unpack(qkv, E + 1, 2 * E)}, {table.unpack(qkv, 2 * E + 1, 3 * E)}
      end
      local A = attention(Q, K, V, H, function(h, i, j) return j <= i and mask:eval(b - 1, h, i, j) end)
      local Y = {}
      for s = 1, #X do
        local h1 = vadd(X[s], lin(A[s], p .. "attn.c_proj"))
        local f = map(lin(ln(h1, p .. "ln_2"), p .. "mlp.c_fc"), gelu_tanh)
        Y[s] = vadd(h1, lin(f, p .. "mlp.c_proj"))
        if l == L - 1 then Y[s] = ln(Y[s], "ln_f") end
      end
      X = Y
      hidden[l + 2] = hidden[l + 2] or {}
      hidden[l + 2][b] = X
    end
  end
  return hidden
end

-- relative L2 between a stof tensor [B, S, E] and nested tables
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

local B, S = 2, 9
local ids = stof.rand({B, S}, "int64", 7) -- in [0, 100): some ids beyond the vocabulary of 50
local masks = {
  dense = M.dense(), bigbird = M.bigbird(2, 1, 4, 0.3, 0), ["sliding|global"] = M.sliding(2) | M.global(1),
}

-- ---------------------------------------------------------------- tiny BERT
local tiny_bert = bert.config({
  hidden_size = 32, num_hidden_layers = 2, num_attention_heads = 2, intermediate_size = 48,
  vocab_size = 50, max_position_embeddings = 12, type_vocab_size = 2,
})
local bw = bert.random_weights(tiny_bert, 1, "float32", {std = 0.2})
local types = stof.tensor({{0, 0, 0, 0, 1, 1, 1, 1, 1}, {0, 1, 0, 1, 0, 1, 0, 1, 0}}, "int64")
do
  local W = tables(bw)
  for name, mask in pairs(masks) do
    local m = bert.build(tiny_bert, {batch = B, seq = S, mask = mask})
    assert(#m.hidden_states == 3 and m.output == m.hidden_states[3] and m.output.tag == "layer_norm")
    assert(m.inputs.input_ids.dtype == "int64" and m.inputs.token_type_ids.shape[2] == S)
    assert(m.weights["encoder.layer.1.output.dense.weight"].shape[2] == 48)
    local outs = {stof.eval(m.hidden_states, m:feed(bw, {input_ids = ids, token_type_ids = types}))}
    compare("bert " .. name, outs, bert_ref(tiny_bert, W, ids:totable(), types:totable(), mask))
  end
  local m = bert.build(tiny_bert, {batch = B, seq = S})
  U.raises(function() m:feed(bw, {input_ids = ids}) end, "feed: the inputs lack token_type_ids")
  U.raises(function() m:feed({}, {}) end, "feed: the weights lack")
end

-- ---------------------------------------------------------------- tiny GPT-2
local tiny_gpt2 = gpt2.config({n_embd = 32, n_layer = 2, n_head = 2, vocab_size = 50, n_positions = 12})
local gw = gpt2.random_weights(tiny_gpt2, 2, "float32", {std = 0.2})
do
  local W = tables(gw)
  for name, mask in pairs(masks) do
    local m = gpt2.build(tiny_gpt2, {batch = B, seq = S, mask = name ~= "dense" and mask or nil})
    assert(#m.hidden_states == 3 and m.output == m.hidden_states[3] and m.output.name == "ln_f")
    assert(m.inputs.input_ids and not m.inputs.token_type_ids)
    local outs = {stof.eval(m.hidden_states, m:feed(gw, {input_ids = ids}))}
    compare("gpt2 " .. name, outs, gpt2_ref(tiny_gpt2, W, ids:totable(), mask))
  end
end

-- ---------------------------------------------------------------- the ops' tags
do
  local m = gpt2.build(tiny_gpt2, {batch = 1, seq = 4})
  local seen = {}
  for line in tostring(m.output):gmatch("[^\n]+") do
    local name = line:match("^(%S+) = compute")
    if name then seen[name] = true end
  end
  assert(seen["h.0.attn.c_attn"] and seen["h.0.attn.c_attn.bias"] and seen["h.1.mlp.act"] and seen["wte"])
  assert(seen["h.0.attn.heads.q"] and seen["h.1.attn.merge_heads"] and seen["h.0.ln_1.mean"])
end

-- ---------------------------------------------------------------- random weights
do
  local a, b = bert.random_weights(tiny_bert, 1), bert.random_weights(tiny_bert, 2)
  local n = "encoder.layer.0.attention.self.query.weight"
  assert(stof.rel_l2(a[n], bert.random_weights(tiny_bert, 1)[n]) == 0)
  assert(stof.rel_l2(a[n], b[n]) > 0.5)
  local ln, bias = a["embeddings.LayerNorm.weight"]:totable(), a["encoder.layer.0.output.dense.bias"]:totable()
  for i = 1, #ln do assert(math.abs(ln[i] - 1) <= 0.05 and ln[i] ~= 1) end
  for i = 1, #bias do assert(math.abs(bias[i]) <= 0.02) end
  local sq, cnt = 0, 0
  for _, row in ipairs(a[n]:totable()) do for _, v in ipairs(row) do sq, cnt = sq + v * v, cnt + 1 end end
  U.near(math.sqrt(sq / cnt), 0.02, 0.15, "std of a random matrix")
  local h = gpt2.random_weights(tiny_gpt2, 1, "float16")
  assert(h["h.0.mlp.c_fc.weight"]:dtype() == "float16")
  -- opts.std scales the matrices (the same draw)
  local wide = bert.random_weights(tiny_bert, 1, "float32", {std = 0.2})[n]
  U.near(stof.rel_l2(wide, a[n]), 9, 1e-4, "std 0.2 is 10x std 0.02 (the same draw)")
  U.raises(function() bert.random_weights(tiny_bert, 1, "float32", {std = 0}) end,
    "random_weights: opts.std must be a positive number, got 0")
  -- a std past the dtype's range: the weight and the cause, at the caller's line
  U.raises(function() bert.random_weights(tiny_bert, 1, "float16", {std = 1e5}) end,
    "random_weights: ", "overflows float16")
  -- random_weights leaves the caller's current graph alone
  local x = te.placeholder({3}, "float32", "x")
  bert.random_weights(tiny_bert, 3)
  local y = te.placeholder({3}, "float32", "y")
  local z = te.compute({3}, function(i) return x[i] + y[i] end, "z")
  assert(stof.eval(z, {[x] = stof.full({3}, 1), [y] = stof.full({3}, 2)})[{1}] == 3)
  U.raises(function() bert.random_weights(tiny_bert, "1") end, "random_weights: seed must be an integer, got string")
  U.raises(function() bert.random_weights(tiny_bert, 0.5) end, "random_weights: seed must be an integer, got 0.5")
end

-- ---------------------------------------------------------------- from_pretrained
if not (stof.save and stof.load and stof.load_json) then
  print("test_models: stof.save / stof.load / stof.load_json missing: from_pretrained not tested")
else
  local json = U.json
  local base = os.tmpname()
  os.remove(base)
  local made = {}
  local function model_dir(tag, cfg, weights, extra_json)
    local dir = base .. "-" .. tag
    assert(os.execute("mkdir -p '" .. dir .. "'"))
    local f = assert(io.open(dir .. "/config.json", "w"))
    f:write(extra_json or json(cfg))
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
  local cfg_json = {}
  for k, v in pairs(tiny_bert) do cfg_json[k] = v end
  cfg_json.architectures = {"BertForMaskedLM"}
  -- BERT saved by a BertFor* model: "bert." names, a pooler and a head beside them
  local extra = renamed(bw, "bert.", nil, {["pooler.dense.weight"] = stof.rand({32, 32})})
  extra["cls.predictions.bias"] = stof.rand({50})
  local dir = model_dir("bert", cfg_json, extra)
  local cfg, w = bert.from_pretrained(dir)
  assert(cfg.hidden_size == 32 and cfg.num_hidden_layers == 2 and cfg.vocab_size == 50)
  local m = bert.build(cfg, {batch = B, seq = S, mask = masks.bigbird})
  local m0 = bert.build(tiny_bert, {batch = B, seq = S, mask = masks.bigbird})
  local inputs = {input_ids = ids, token_type_ids = types}
  assert(stof.rel_l2(stof.eval(m.output, m:feed(w, inputs)), stof.eval(m0.output, m0:feed(bw, inputs))) == 0)
  local _, wh = bert.from_pretrained(dir, {dtype = "float16"})
  assert(wh["embeddings.LayerNorm.weight"]:dtype() == "float16")
  -- GPT-2 with GPT2Model's own names
  local gdir = model_dir("gpt2", tiny_gpt2, gw)
  local gcfg, gw2 = gpt2.from_pretrained(gdir)
  assert(gcfg.n_embd == 32 and gcfg.n_layer == 2)
  local gm = gpt2.build(gcfg, {batch = B, seq = S})
  assert(stof.rel_l2(stof.eval(gm.output, gm:feed(gw2, {input_ids = ids})),
    stof.eval(gm.output, gm:feed(gw, {input_ids = ids}))) == 0)
  -- errors
  local missing = model_dir("missing", tiny_bert, renamed(bw, "", "encoder.layer.1.output.dense.weight"))
  U.raises(function() bert.from_pretrained(missing) end,
    "from_pretrained: model.safetensors lacks encoder.layer.1.output.dense.weight")
  local shape = model_dir("shape", tiny_bert, renamed(bw, "", nil,
    {["encoder.layer.0.intermediate.dense.weight"] = stof.rand({32, 48})}))
  U.raises(function() bert.from_pretrained(shape) end,
    "from_pretrained: encoder.layer.0.intermediate.dense.weight has shape [32, 48] in model.safetensors, expected [48, 32]")
  local dt = model_dir("dtype", tiny_bert, renamed(bw, "", nil,
    {["embeddings.LayerNorm.bias"] = stof.rand({32}, "float16")}))
  U.raises(function() bert.from_pretrained(dt) end, "embeddings.LayerNorm.bias has dtype float16, expected float32")
  local bad = model_dir("badcfg", nil, bw, '{"hidden_size": "32", "num_attention_heads": 2}')
  U.raises(function() bert.from_pretrained(bad) end, "config.json: config: hidden_size must be an integer, got string")
  local nulls = model_dir("nulls", nil, gw, json(tiny_gpt2):gsub("}$", ', "n_inner": null}'))
  assert(gpt2.from_pretrained(nulls).intermediate_size == 128)
  U.raises(function() gpt2.from_pretrained(base .. "-nowhere") end, "gpt2.from_pretrained: cannot read", "config.json")
  for _, d in ipairs(made) do
    os.remove(d .. "/config.json")
    os.remove(d .. "/model.safetensors")
    os.remove(d)
  end
end

print("models ok")
