-- GPT-2 (Hugging Face GPT2Model) as a stof.nn graph: pre-LN decoder blocks with a fused
-- QKV projection, learned positions 0..S-1, causal & the mask on every block, ln_f at the
-- end. Weight names and layouts are those GPT2Model.save_pretrained writes (Conv1D: [in, out]).
local stof = require("stof")
local te = stof.te
local nn = require("stof.nn")
local C = require("stof.models.common")

local M = {name = "gpt2"}

M.configs = {
  gpt2 = {
    n_embd = 768, n_layer = 12, n_head = 12, n_positions = 1024, vocab_size = 50257,
    layer_norm_epsilon = 1e-5, activation_function = "gelu_new", scale_attn_weights = true,
  },
}

local SPEC = {
  model = "gpt2", configs = M.configs, default = "gpt2",
  fields = {
    {"n_embd", "int"}, {"n_layer", "int"}, {"n_head", "int"}, {"n_positions", "int"},
    {"vocab_size", "int"}, {"layer_norm_epsilon", "number"}, {"activation_function", "string"},
    {"n_inner", "int", true}, {"scale_attn_weights", "boolean"},
    {"scale_attn_by_inverse_layer_idx", "boolean", true}, {"reorder_and_upcast_attn", "boolean", true},
  },
  -- the generic Hugging Face names, accepted as input and mirrored in the result
  aliases = {
    hidden_size = "n_embd", num_hidden_layers = "n_layer", num_attention_heads = "n_head",
    max_position_embeddings = "n_positions", layer_norm_eps = "layer_norm_epsilon",
    intermediate_size = "n_inner",
  },
  check = function(cfg)
    if cfg.n_embd % cfg.n_head ~= 0 then
      C.raise("config: n_embd %d is not a multiple of n_head %d", cfg.n_embd, cfg.n_head)
    end
    if cfg.scale_attn_by_inverse_layer_idx then
      C.raise("config: scale_attn_by_inverse_layer_idx = true is not built (the scores would be scaled per layer)")
    end
    C.activation(cfg, "activation_function")
  end,
}

local function inner(cfg) return cfg.n_inner or 4 * cfg.n_embd end

function M.config_raw(src, overrides)
  local cfg = C.config(SPEC, src, overrides)
  cfg.intermediate_size = inner(cfg)
  return cfg
end

--- gpt2.config(name_or_table[, overrides]) -> a checked config, defaults from gpt2.
M.config = C.api(M.config_raw)

local function weight_shapes(cfg)
  cfg = M.config_raw(cfg)
  local E, I = cfg.n_embd, inner(cfg)
  local s = {
    ["wte.weight"] = {cfg.vocab_size, E}, ["wpe.weight"] = {cfg.n_positions, E},
    ["ln_f.weight"] = {E}, ["ln_f.bias"] = {E},
  }
  for l = 0, cfg.n_layer - 1 do
    local p = "h." .. l .. "."
    for _, n in ipairs({"ln_1", "ln_2"}) do s[p .. n .. ".weight"], s[p .. n .. ".bias"] = {E}, {E} end
    s[p .. "attn.c_attn.weight"], s[p .. "attn.c_attn.bias"] = {E, 3 * E}, {3 * E}
    s[p .. "attn.c_proj.weight"], s[p .. "attn.c_proj.bias"] = {E, E}, {E}
    s[p .. "mlp.c_fc.weight"], s[p .. "mlp.c_fc.bias"] = {E, I}, {I}
    s[p .. "mlp.c_proj.weight"], s[p .. "mlp.c_proj.bias"] = {I, E}, {E}
  end
  return s
end

--- gpt2.weight_shapes(cfg) -> hf_name -> shape.
M.weight_shapes = C.api(weight_shapes)

--- gpt2.build(cfg, {batch =, seq =, mask =, dtype =}) -> the model table (docs/MODELS.md).
--- The attention mask is stof.mask.causal() & mask.
M.build = C.api(function(cfg, opts)
  cfg = M.config_raw(cfg)
  local B, S, dtype, mask = C.build_opts("gpt2", opts, cfg.n_positions)
  local causal = stof.mask.causal()
  mask = mask and (causal & mask) or causal
  local act = C.activation(cfg, "activation_function")
  local W = C.placeholders(weight_shapes(cfg), dtype)
  local ids = te.placeholder({B, S}, "int64", "input_ids")
  local H, eps = cfg.n_head, cfg.layer_norm_epsilon
  local aopts = {scale = not cfg.scale_attn_weights and 1.0 or nil}
  local function linear(x, p)
    return nn.linear(x, W[p .. ".weight"], W[p .. ".bias"], {name = p})
  end
  local function norm(x, p)
    return nn.layer_norm(x, W[p .. ".weight"], W[p .. ".bias"], eps, p)
  end

  local we = nn.embedding(ids, W["wte.weight"], "wte")
  local pe = nn.position_embedding(W["wpe.weight"], B, S, "wpe")
  local h = nn.add(we, pe, "embeddings.add_position", "add")
  local hidden = {h}
  for l = 0, cfg.n_layer - 1 do
    local p = "h." .. l .. "."
    local qkv = linear(norm(h, p .. "ln_1"), p .. "attn.c_attn")
    local q, k, v = nn.split_qkv(qkv, H, p .. "attn.heads")
    local a = nn.merge_heads(nn.attention(q, k, v, mask, aopts), p .. "attn.merge_heads")
    h = nn.add(h, linear(a, p .. "attn.c_proj"), p .. "attn.residual")
    local f = act(linear(norm(h, p .. "ln_2"), p .. "mlp.c_fc"), p .. "mlp.act")
    h = nn.add(h, linear(f, p .. "mlp.c_proj"), p .. "mlp.residual")
    hidden[#hidden + 1] = h
  end
  local out = norm(h, "ln_f")
  hidden[#hidden] = out -- as Hugging Face: the last hidden state has ln_f applied
  return {
    config = cfg, batch = B, seq = S, dtype = dtype, mask = mask,
    inputs = {input_ids = ids},
    weights = W, hidden_states = hidden, output = out, feed = C.feed,
  }
end)

--- gpt2.random_weights(cfg, seed[, dtype][, {std =}]) -> hf_name -> CPU stof.Tensor.
M.random_weights = C.api(function(cfg, seed, dtype, opts)
  return C.random_weights(weight_shapes(cfg), seed, dtype, opts)
end)

--- gpt2.from_pretrained(dir[, {dtype =, overrides =}]) -> cfg, weights (names as
--- GPT2Model saves them; "transformer."-prefixed names, as GPT2LMHeadModel saves them, are
--- accepted).
M.from_pretrained = C.api(function(dir, opts)
  return C.from_pretrained(M, {"transformer."}, dir, opts)
end)

return M
