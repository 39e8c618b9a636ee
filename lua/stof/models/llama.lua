-- LLaMA (Hugging Face LlamaModel, no LM head) as a stof.nn graph: pre-norm decoder layers
-- with RMSNorm, rotary positions 0..S-1 on q and k after the head split, grouped-query
-- attention (k and v keep their num_key_value_heads heads: nothing is copied per query
-- head), causal & the mask on every layer, a SwiGLU feed-forward, the final norm. Weight
-- names and layouts are those LlamaModel.save_pretrained writes (nn.Linear: [out, in], no
-- biases).
local stof = require("stof")
local te = stof.te
local nn = require("stof.nn")
local C = require("stof.models.common")

local M = {name = "llama"}

-- "llama": the Llama-3.2-1B shape as the benchmark builds it (shared/bench/peers.py):
-- transformers' LlamaConfig defaults elsewhere (rope_theta 10000, rms_norm_eps 1e-6, no
-- rope scaling).
M.configs = {
  llama = {
    hidden_size = 2048, intermediate_size = 8192, num_hidden_layers = 16, num_attention_heads = 32,
    num_key_value_heads = 8, vocab_size = 128256, max_position_embeddings = 2048, rms_norm_eps = 1e-6,
    rope_theta = 10000.0, hidden_act = "silu", attention_bias = false, mlp_bias = false,
  },
}

-- rope_parameters (newer transformers) or rope_scaling (older) naming the plain rotary
-- embedding, or absent; its theta, if it gives one.
local function plain_rope(cfg, key)
  local r = cfg[key]
  if C.is_null(r) then return nil end
  if type(r) ~= "table" then C.raise("config: %s must be a table or null, got %s", key, type(r)) end
  local kind = r.rope_type or r.type
  if kind ~= nil and kind ~= "default" then
    C.raise("config: %s.rope_type %q is not built (only the default rotary embedding: no scaling)", key,
      tostring(kind))
  end
  if r.rope_theta ~= nil and type(r.rope_theta) ~= "number" then
    C.raise("config: %s.rope_theta must be a number, got %s", key, type(r.rope_theta))
  end
  return r.rope_theta
end

local SPEC = {
  model = "llama", configs = M.configs, default = "llama",
  fields = {
    {"hidden_size", "int"}, {"intermediate_size", "int"}, {"num_hidden_layers", "int"},
    {"num_attention_heads", "int"}, {"num_key_value_heads", "int"}, {"vocab_size", "int"},
    {"max_position_embeddings", "int"}, {"rms_norm_eps", "number"}, {"rope_theta", "number"},
    {"hidden_act", "string"}, {"head_dim", "int", true}, {"attention_bias", "boolean", true},
    {"mlp_bias", "boolean", true},
  },
  check = function(cfg)
    local theta = plain_rope(cfg, "rope_scaling") or plain_rope(cfg, "rope_parameters")
    if theta then cfg.rope_theta = theta end
    if cfg.rope_theta <= 0 then C.raise("config: rope_theta must be positive, got %s", tostring(cfg.rope_theta)) end
    local H, Hkv = cfg.num_attention_heads, cfg.num_key_value_heads
    if not cfg.head_dim and cfg.hidden_size % H ~= 0 then
      C.raise("config: hidden_size %d is not a multiple of num_attention_heads %d", cfg.hidden_size, H)
    end
    cfg.head_dim = cfg.head_dim or cfg.hidden_size // H
    if cfg.head_dim % 2 ~= 0 then C.raise("config: head_dim %d is odd (rotary pairs need an even one)", cfg.head_dim) end
    if H % Hkv ~= 0 then
      C.raise("config: num_attention_heads %d is not a multiple of num_key_value_heads %d", H, Hkv)
    end
    for _, k in ipairs({"attention_bias", "mlp_bias"}) do
      if cfg[k] then C.raise("config: %s = true is not built (LLaMA's projections have no biases)", k) end
    end
    C.activation(cfg, "hidden_act")
  end,
}

function M.config_raw(src, overrides)
  return C.config(SPEC, src, overrides)
end

--- llama.config(name_or_table[, overrides]) -> a checked config, defaults from "llama";
--- head_dim is filled in (hidden_size / num_attention_heads unless given).
M.config = C.api(M.config_raw)

local function weight_shapes(cfg)
  cfg = M.config_raw(cfg)
  local E, I = cfg.hidden_size, cfg.intermediate_size
  local Q, KV = cfg.num_attention_heads * cfg.head_dim, cfg.num_key_value_heads * cfg.head_dim
  local s = {["embed_tokens.weight"] = {cfg.vocab_size, E}, ["norm.weight"] = {E}}
  for l = 0, cfg.num_hidden_layers - 1 do
    local p = "layers." .. l .. "."
    s[p .. "input_layernorm.weight"], s[p .. "post_attention_layernorm.weight"] = {E}, {E}
    s[p .. "self_attn.q_proj.weight"], s[p .. "self_attn.o_proj.weight"] = {Q, E}, {E, Q}
    s[p .. "self_attn.k_proj.weight"], s[p .. "self_attn.v_proj.weight"] = {KV, E}, {KV, E}
    s[p .. "mlp.gate_proj.weight"], s[p .. "mlp.up_proj.weight"] = {I, E}, {I, E}
    s[p .. "mlp.down_proj.weight"] = {E, I}
  end
  return s
end

--- llama.weight_shapes(cfg) -> hf_name -> shape.
M.weight_shapes = C.api(weight_shapes)

--- llama.build(cfg, {batch =, seq =, mask =, dtype =}) -> the model table (docs/MODELS.md).
--- The attention mask is stof.mask.causal() & mask; positions are 0 .. seq-1.
M.build = C.api(function(cfg, opts)
  cfg = M.config_raw(cfg)
  -- rotary positions need no table: seq is not bounded by max_position_embeddings
  local B, S, dtype, mask = C.build_opts("llama", opts, math.maxinteger)
  local causal = stof.mask.causal()
  mask = mask and (causal & mask) or causal
  local act = C.activation(cfg, "hidden_act")
  local silu = cfg.hidden_act == "silu" or cfg.hidden_act == "swish"
  local W = C.placeholders(weight_shapes(cfg), dtype)
  local ids = te.placeholder({B, S}, "int64", "input_ids")
  local H, Hkv, eps = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.rms_norm_eps
  local function linear(x, p)
    return nn.linear(x, W[p .. ".weight"], nil, {name = p, transposed = true})
  end
  local function norm(x, p)
    return nn.rms_norm(x, W[p .. ".weight"], eps, p)
  end
  -- the cos and sin of every position's angles, once for all layers (as Hugging Face's
  -- rotary_emb): each layer's q and k rotations read them
  local rope = nn.rotary_table(S, cfg.head_dim, {theta = cfg.rope_theta, name = "rotary_emb"})
  local function heads(x, n, p, rotate)
    local y = nn.split_heads(linear(x, p), n, p .. ".heads")
    if not rotate then return y end
    return nn.rotary(y, {table = rope, name = p .. ".rotary"})
  end

  local h = nn.embedding(ids, W["embed_tokens.weight"], "embed_tokens")
  local hidden = {h}
  for l = 0, cfg.num_hidden_layers - 1 do
    local p = "layers." .. l .. "."
    local x = norm(h, p .. "input_layernorm")
    local q = heads(x, H, p .. "self_attn.q_proj", true)
    local k = heads(x, Hkv, p .. "self_attn.k_proj", true)
    local v = heads(x, Hkv, p .. "self_attn.v_proj", false)
    local a = nn.merge_heads(nn.attention(q, k, v, mask), p .. "self_attn.merge_heads")
    h = nn.add(h, linear(a, p .. "self_attn.o_proj"), p .. "self_attn.residual")
    x = norm(h, p .. "post_attention_layernorm")
    local gate, up = linear(x, p .. "mlp.gate_proj"), linear(x, p .. "mlp.up_proj")
    local f = silu and nn.swiglu(gate, up, p .. "mlp.act")
      or nn.mul(act(gate, p .. "mlp.act"), up, p .. "mlp.gate")
    h = nn.add(h, linear(f, p .. "mlp.down_proj"), p .. "mlp.residual")
    hidden[#hidden + 1] = h
  end
  local out = norm(h, "norm")
  hidden[#hidden] = out -- as Hugging Face: the last hidden state has the final norm applied
  return {
    config = cfg, batch = B, seq = S, dtype = dtype, mask = mask,
    inputs = {input_ids = ids},
    weights = W, hidden_states = hidden, output = out, feed = C.feed,
  }
end)

--- llama.random_weights(cfg, seed[, dtype][, {std =}]) -> hf_name -> CPU stof.Tensor.
M.random_weights = C.api(function(cfg, seed, dtype, opts)
  return C.random_weights(weight_shapes(cfg), seed, dtype, opts)
end)

--- llama.from_pretrained(dir[, {dtype =, overrides =}]) -> cfg, weights (names as
--- LlamaModel saves them; "model."-prefixed names, as LlamaForCausalLM saves them, are
--- accepted; lm_head.weight is ignored).
M.from_pretrained = C.api(function(dir, opts)
  return C.from_pretrained(M, {"model."}, dir, opts)
end)

return M
