-- BERT (Hugging Face BertModel without the pooler) as a stof.nn graph: post-LN encoder
-- layers, learned positions 0..S-1, token types, the mask on every layer's attention.
-- Weight names and layouts are those BertModel.save_pretrained writes (nn.Linear: [out, in]).
local stof = require("stof")
local te = stof.te
local nn = require("stof.nn")
local C = require("stof.models.common")

local M = {name = "bert"}

M.configs = {
  ["bert-base"] = {
    hidden_size = 768, num_hidden_layers = 12, num_attention_heads = 12, intermediate_size = 3072,
    max_position_embeddings = 512, type_vocab_size = 2, vocab_size = 30522, layer_norm_eps = 1e-12,
    hidden_act = "gelu",
  },
  ["bert-large"] = {
    hidden_size = 1024, num_hidden_layers = 24, num_attention_heads = 16, intermediate_size = 4096,
    max_position_embeddings = 512, type_vocab_size = 2, vocab_size = 30522, layer_norm_eps = 1e-12,
    hidden_act = "gelu",
  },
}

local SPEC = {
  model = "bert", configs = M.configs, default = "bert-base",
  fields = {
    {"hidden_size", "int"}, {"num_hidden_layers", "int"}, {"num_attention_heads", "int"},
    {"intermediate_size", "int"}, {"max_position_embeddings", "int"}, {"type_vocab_size", "int"},
    {"vocab_size", "int"}, {"layer_norm_eps", "number"}, {"hidden_act", "string"},
    {"position_embedding_type", "string", true},
  },
  check = function(cfg)
    if cfg.hidden_size % cfg.num_attention_heads ~= 0 then
      C.raise("config: hidden_size %d is not a multiple of num_attention_heads %d", cfg.hidden_size,
        cfg.num_attention_heads)
    end
    if cfg.position_embedding_type and cfg.position_embedding_type ~= "absolute" then
      C.raise("config: position_embedding_type %q: only \"absolute\" is built", cfg.position_embedding_type)
    end
    C.activation(cfg, "hidden_act")
  end,
}

function M.config_raw(src, overrides)
  return C.config(SPEC, src, overrides)
end

--- bert.config(name_or_table[, overrides]) -> a checked config, defaults from bert-base.
M.config = C.api(M.config_raw)

local function weight_shapes(cfg)
  cfg = M.config_raw(cfg)
  local E, I = cfg.hidden_size, cfg.intermediate_size
  local s = {
    ["embeddings.word_embeddings.weight"] = {cfg.vocab_size, E},
    ["embeddings.position_embeddings.weight"] = {cfg.max_position_embeddings, E},
    ["embeddings.token_type_embeddings.weight"] = {cfg.type_vocab_size, E},
    ["embeddings.LayerNorm.weight"] = {E},
    ["embeddings.LayerNorm.bias"] = {E},
  }
  for l = 0, cfg.num_hidden_layers - 1 do
    local p = "encoder.layer." .. l .. "."
    for _, n in ipairs({"attention.self.query", "attention.self.key", "attention.self.value",
        "attention.output.dense"}) do
      s[p .. n .. ".weight"], s[p .. n .. ".bias"] = {E, E}, {E}
    end
    s[p .. "intermediate.dense.weight"], s[p .. "intermediate.dense.bias"] = {I, E}, {I}
    s[p .. "output.dense.weight"], s[p .. "output.dense.bias"] = {E, I}, {E}
    for _, n in ipairs({"attention.output.LayerNorm", "output.LayerNorm"}) do
      s[p .. n .. ".weight"], s[p .. n .. ".bias"] = {E}, {E}
    end
  end
  return s
end

--- bert.weight_shapes(cfg) -> hf_name -> shape.
M.weight_shapes = C.api(weight_shapes)

--- bert.build(cfg, {batch =, seq =, mask =, dtype =}) -> the model table (docs/MODELS.md).
M.build = C.api(function(cfg, opts)
  cfg = M.config_raw(cfg)
  local B, S, dtype, mask = C.build_opts("bert", opts, cfg.max_position_embeddings)
  mask = mask or stof.mask.dense()
  local act = C.activation(cfg, "hidden_act")
  local W = C.placeholders(weight_shapes(cfg), dtype)
  local ids = te.placeholder({B, S}, "int64", "input_ids")
  local types = te.placeholder({B, S}, "int64", "token_type_ids")
  local H, eps = cfg.num_attention_heads, cfg.layer_norm_eps
  local function linear(x, p, name)
    return nn.linear(x, W[p .. ".weight"], W[p .. ".bias"], {name = name or p, transposed = true})
  end
  local function norm(x, p)
    return nn.layer_norm(x, W[p .. ".weight"], W[p .. ".bias"], eps, p)
  end

  local we = nn.embedding(ids, W["embeddings.word_embeddings.weight"], "embeddings.word_embeddings")
  local pe = nn.position_embedding(W["embeddings.position_embeddings.weight"], B, S, "embeddings.position_embeddings")
  local tt = nn.embedding(types, W["embeddings.token_type_embeddings.weight"], "embeddings.token_type_embeddings")
  local e = nn.add(nn.add(we, pe, "embeddings.add_position", "add"), tt, "embeddings.add_token_type", "add")
  local h = norm(e, "embeddings.LayerNorm")
  local hidden = {h}
  for l = 0, cfg.num_hidden_layers - 1 do
    local p = "encoder.layer." .. l .. "."
    local q = nn.split_heads(linear(h, p .. "attention.self.query"), H, p .. "attention.self.query.heads")
    local k = nn.split_heads(linear(h, p .. "attention.self.key"), H, p .. "attention.self.key.heads")
    local v = nn.split_heads(linear(h, p .. "attention.self.value"), H, p .. "attention.self.value.heads")
    local a = nn.merge_heads(nn.attention(q, k, v, mask), p .. "attention.self.merge_heads")
    local o = linear(a, p .. "attention.output.dense")
    h = norm(nn.add(o, h, p .. "attention.output.residual"), p .. "attention.output.LayerNorm")
    local f = act(linear(h, p .. "intermediate.dense"), p .. "intermediate.act")
    local d = linear(f, p .. "output.dense")
    h = norm(nn.add(d, h, p .. "output.residual"), p .. "output.LayerNorm")
    hidden[#hidden + 1] = h
  end
  return {
    config = cfg, batch = B, seq = S, dtype = dtype, mask = mask,
    inputs = {input_ids = ids, token_type_ids = types},
    weights = W, hidden_states = hidden, output = h, feed = C.feed,
  }
end)

--- bert.random_weights(cfg, seed[, dtype][, {std =}]) -> hf_name -> CPU stof.Tensor.
M.random_weights = C.api(function(cfg, seed, dtype, opts)
  return C.random_weights(weight_shapes(cfg), seed, dtype, opts)
end)

--- bert.from_pretrained(dir[, {dtype =, overrides =}]) -> cfg, weights (names as BertModel
--- saves them; "bert."-prefixed names, as BertFor* save them, are accepted).
M.from_pretrained = C.api(function(dir, opts)
  return C.from_pretrained(M, {"bert."}, dir, opts)
end)

return M
