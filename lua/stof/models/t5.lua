-- T5 (Hugging Face T5Model) as a stof.nn graph: an encoder-decoder run with decoder inputs
-- (teacher forcing). Pre-norm blocks with T5's RMS-style layer norm (no mean, no bias),
-- attention without the 1/sqrt(d_kv) scale, and the bucketed relative position bias of each
-- stack's first block (a [num_heads, buckets] table, computed inside the attention op: never
-- an S x S tensor) shared by every block of that stack: bidirectional in the encoder,
-- unidirectional in the decoder's self-attention; cross-attention has none. Weight names
-- and layouts are those T5Model.save_pretrained writes (nn.Linear: [out, in]; the relative
-- attention bias [buckets, heads], transposed in the graph).
local stof = require("stof")
local te = stof.te
local nn = require("stof.nn")
local C = require("stof.models.common")

local M = {name = "t5"}

M.configs = {
  -- the t5-base shape (DESIGN.md section 8; shared/bench/peers.py's T5Config); the decoder
  -- has num_layers blocks unless num_decoder_layers says otherwise, as in T5Config
  t5 = {
    d_model = 768, d_kv = 64, d_ff = 3072, num_layers = 12, num_heads = 12,
    relative_attention_num_buckets = 32, relative_attention_max_distance = 128, layer_norm_epsilon = 1e-6,
    feed_forward_proj = "relu", vocab_size = 32128,
  },
}

local SPEC = {
  model = "t5", configs = M.configs, default = "t5",
  fields = {
    {"d_model", "int"}, {"d_kv", "int"}, {"d_ff", "int"}, {"num_layers", "int"},
    {"num_decoder_layers", "int", true}, {"num_heads", "int"}, {"relative_attention_num_buckets", "int"},
    {"relative_attention_max_distance", "int"}, {"layer_norm_epsilon", "number"},
    {"feed_forward_proj", "string"}, {"vocab_size", "int"},
  },
  -- T5Config's attribute_map, and the other generic names
  aliases = {
    hidden_size = "d_model", num_attention_heads = "num_heads", num_hidden_layers = "num_layers",
    head_dim = "d_kv", intermediate_size = "d_ff", layer_norm_eps = "layer_norm_epsilon",
  },
  check = function(cfg)
    local ff = cfg.feed_forward_proj
    if ff:match("^gated%-") then
      C.raise("config: feed_forward_proj %q is not built (T5 v1.1's gated feed-forward, wi_0 and wi_1): \"relu\" or \"gelu\"", ff)
    end
    if ff ~= "relu" and ff ~= "gelu" then
      C.raise("config: feed_forward_proj %q is not one of \"relu\", \"gelu\"", ff)
    end
    local nb = cfg.relative_attention_num_buckets
    if nb < 4 then C.raise("config: relative_attention_num_buckets %d: at least 4 (half for each direction)", nb) end
    if cfg.relative_attention_max_distance <= nb // 4 then
      C.raise("config: relative_attention_max_distance %d must exceed relative_attention_num_buckets / 4 = %d",
        cfg.relative_attention_max_distance, nb // 4)
    end
  end,
}

function M.config_raw(src, overrides)
  local cfg = C.config(SPEC, src, overrides)
  cfg.num_decoder_layers = cfg.num_decoder_layers or cfg.num_layers
  return cfg
end

--- t5.config(name_or_table[, overrides]) -> a checked config, defaults from t5 (t5-base).
M.config = C.api(M.config_raw)

local function weight_shapes(cfg)
  cfg = M.config_raw(cfg)
  local E, I, F, H, NB = cfg.d_model, cfg.num_heads * cfg.d_kv, cfg.d_ff, cfg.num_heads,
    cfg.relative_attention_num_buckets
  local s = {
    ["shared.weight"] = {cfg.vocab_size, E},
    ["encoder.final_layer_norm.weight"] = {E}, ["decoder.final_layer_norm.weight"] = {E},
    ["encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"] = {NB, H},
    ["decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"] = {NB, H},
  }
  local function attention(p)
    for _, n in ipairs({"q", "k", "v"}) do s[p .. n .. ".weight"] = {I, E} end
    s[p .. "o.weight"] = {E, I}
  end
  local function ff(p)
    s[p .. "DenseReluDense.wi.weight"], s[p .. "DenseReluDense.wo.weight"] = {F, E}, {E, F}
    s[p .. "layer_norm.weight"] = {E}
  end
  for l = 0, cfg.num_layers - 1 do
    local p = "encoder.block." .. l .. ".layer."
    attention(p .. "0.SelfAttention.")
    s[p .. "0.layer_norm.weight"] = {E}
    ff(p .. "1.")
  end
  for l = 0, cfg.num_decoder_layers - 1 do
    local p = "decoder.block." .. l .. ".layer."
    attention(p .. "0.SelfAttention.")
    s[p .. "0.layer_norm.weight"] = {E}
    attention(p .. "1.EncDecAttention.")
    s[p .. "1.layer_norm.weight"] = {E}
    ff(p .. "2.")
  end
  return s
end

--- t5.weight_shapes(cfg) -> hf_name -> shape.
M.weight_shapes = C.api(weight_shapes)

-- Where from_pretrained may also find a weight: the tied token embedding under the names
-- the stacks give it (save_pretrained keeps one of the tied names).
M.weight_aliases = {["shared.weight"] = {"encoder.embed_tokens.weight", "decoder.embed_tokens.weight"}}

--- t5.build(cfg, {batch =, seq =, decoder_seq = (seq), mask =, dtype =}) -> the model table
--- (docs/MODELS.md): inputs input_ids [batch, seq] and decoder_input_ids [batch,
--- decoder_seq]; encoder self-attention: the mask; decoder self-attention: causal & the
--- mask; cross-attention: dense. encoder_hidden_states and decoder_hidden_states as Hugging
--- Face returns them (the embeddings, then each block, the last with the stack's final
--- norm applied); output = the decoder's last hidden state.
M.build = C.api(function(cfg, opts)
  cfg = M.config_raw(cfg)
  local B, S, dtype, mask = C.build_opts("t5", opts, math.maxinteger, "decoder_seq")
  local Sd = opts.decoder_seq or S
  if math.type(Sd) ~= "integer" or Sd <= 0 then
    C.raise("t5.build: decoder_seq must be a positive integer, got %s", tostring(opts.decoder_seq))
  end
  local enc_mask = mask or stof.mask.dense()
  local causal = stof.mask.causal()
  local dec_mask = mask and (causal & mask) or causal
  local cross_mask = stof.mask.dense()
  local ff_act = C.activation(cfg, "feed_forward_proj")
  local W = C.placeholders(weight_shapes(cfg), dtype)
  local ids = te.placeholder({B, S}, "int64", "input_ids")
  local dec_ids = te.placeholder({B, Sd}, "int64", "decoder_input_ids")
  local H, eps, NB = cfg.num_heads, cfg.layer_norm_epsilon, cfg.relative_attention_num_buckets

  local function linear(x, name)
    return nn.linear(x, W[name .. ".weight"], nil, {name = name, transposed = true})
  end
  local function norm(x, name)
    return nn.rms_norm(x, W[name .. ".weight"], eps, name)
  end
  -- [buckets, H] as saved -> [H, buckets], the attention op's table
  local function bias_table(stack)
    local name = stack .. ".block.0.layer.0.SelfAttention.relative_attention_bias"
    local w = W[name .. ".weight"]
    return te.compute({H, NB}, function(h, b) return w[{b, h}] end, name .. ".table")
  end
  -- x attends to kv (x itself for self-attention) under m, with the modifier opts aopts
  local function attention(x, kv, p, m, aopts)
    local q = nn.split_heads(linear(x, p .. "q"), H, p .. "q.heads")
    local k = nn.split_heads(linear(kv, p .. "k"), H, p .. "k.heads")
    local v = nn.split_heads(linear(kv, p .. "v"), H, p .. "v.heads")
    local a = nn.merge_heads(nn.attention(q, k, v, m, aopts), p .. "merge_heads")
    return linear(a, p .. "o")
  end
  local function feed_forward(h, p)
    local f = ff_act(linear(norm(h, p .. "layer_norm"), p .. "DenseReluDense.wi"), p .. "DenseReluDense.act")
    return nn.add(h, linear(f, p .. "DenseReluDense.wo"), p .. "residual")
  end
  local max_distance = cfg.relative_attention_max_distance

  -- encoder
  local enc_bias = {scale = 1.0, bias = bias_table("encoder"), buckets = NB, max_distance = max_distance,
    bidirectional = true}
  local h = nn.embedding(ids, W["shared.weight"], "encoder.embed_tokens")
  local enc_hidden = {h}
  for l = 0, cfg.num_layers - 1 do
    local p = "encoder.block." .. l .. ".layer."
    local x = norm(h, p .. "0.layer_norm")
    h = nn.add(h, attention(x, x, p .. "0.SelfAttention.", enc_mask, enc_bias), p .. "0.residual")
    h = feed_forward(h, p .. "1.")
    enc_hidden[#enc_hidden + 1] = h
  end
  local enc_out = norm(h, "encoder.final_layer_norm")
  enc_hidden[#enc_hidden] = enc_out -- as Hugging Face: the last one has the final norm applied

  -- decoder
  local dec_bias = {scale = 1.0, bias = bias_table("decoder"), buckets = NB, max_distance = max_distance,
    bidirectional = false}
  h = nn.embedding(dec_ids, W["shared.weight"], "decoder.embed_tokens")
  local dec_hidden = {h}
  for l = 0, cfg.num_decoder_layers - 1 do
    local p = "decoder.block." .. l .. ".layer."
    local x = norm(h, p .. "0.layer_norm")
    h = nn.add(h, attention(x, x, p .. "0.SelfAttention.", dec_mask, dec_bias), p .. "0.residual")
    x = norm(h, p .. "1.layer_norm")
    h = nn.add(h, attention(x, enc_out, p .. "1.EncDecAttention.", cross_mask, {scale = 1.0}), p .. "1.residual")
    h = feed_forward(h, p .. "2.")
    dec_hidden[#dec_hidden + 1] = h
  end
  local out = norm(h, "decoder.final_layer_norm")
  dec_hidden[#dec_hidden] = out
  local hidden = {} -- both stacks', the encoder's first
  for _, t in ipairs({enc_hidden, dec_hidden}) do
    for _, x in ipairs(t) do hidden[#hidden + 1] = x end
  end

  return {
    config = cfg, batch = B, seq = S, decoder_seq = Sd, dtype = dtype, mask = mask,
    encoder_mask = enc_mask, decoder_mask = dec_mask,
    inputs = {input_ids = ids, decoder_input_ids = dec_ids},
    weights = W, encoder_hidden_states = enc_hidden, decoder_hidden_states = dec_hidden,
    hidden_states = hidden,
    encoder_output = enc_out, output = out, feed = C.feed,
  }
end)

--- t5.random_weights(cfg, seed[, dtype][, {std =}]) -> hf_name -> CPU stof.Tensor.
M.random_weights = C.api(function(cfg, seed, dtype, opts)
  return C.random_weights(weight_shapes(cfg), seed, dtype, opts)
end)

--- t5.from_pretrained(dir[, {dtype =, overrides =}]) -> cfg, weights (names as T5Model
--- saves them; "shared.weight" may be found as "encoder.embed_tokens.weight" or
--- "decoder.embed_tokens.weight"; T5ForConditionalGeneration's lm_head is ignored).
M.from_pretrained = C.api(function(dir, opts)
  return C.from_pretrained(M, {}, dir, opts)
end)

return M
