-- ViT (Hugging Face ViTModel without the pooler) as a stof.nn graph: the patch embedding as
-- a GEMM over unfolded patches, the class token, learned positions for the config's
-- image_size (1 + (image_size / patch_size)^2 tokens: no interpolation), pre-LN encoder
-- layers with the mask over all tokens, the final layernorm. Weight names and layouts are
-- those ViTModel.save_pretrained writes (nn.Linear: [out, in]; the patch projection is a
-- Conv2d weight [E, C, p, p], which the graph reads as the matrix [E, C p p]).
local stof = require("stof")
local te = stof.te
local nn = require("stof.nn")
local C = require("stof.models.common")

local M = {name = "vit"}

-- "vit": ViT-base/16 (transformers' ViTConfig defaults).
M.configs = {
  vit = {
    hidden_size = 768, num_hidden_layers = 12, num_attention_heads = 12, intermediate_size = 3072,
    hidden_act = "gelu", layer_norm_eps = 1e-12, image_size = 224, patch_size = 16, num_channels = 3,
    qkv_bias = true,
  },
}

local SPEC = {
  model = "vit", configs = M.configs, default = "vit",
  fields = {
    {"hidden_size", "int"}, {"num_hidden_layers", "int"}, {"num_attention_heads", "int"},
    {"intermediate_size", "int"}, {"hidden_act", "string"}, {"layer_norm_eps", "number"},
    {"image_size", "int"}, {"patch_size", "int"}, {"num_channels", "int"}, {"qkv_bias", "boolean"},
  },
  check = function(cfg)
    if cfg.hidden_size % cfg.num_attention_heads ~= 0 then
      C.raise("config: hidden_size %d is not a multiple of num_attention_heads %d", cfg.hidden_size,
        cfg.num_attention_heads)
    end
    if cfg.image_size % cfg.patch_size ~= 0 then
      C.raise("config: image_size %d is not a multiple of patch_size %d", cfg.image_size, cfg.patch_size)
    end
    C.activation(cfg, "hidden_act")
  end,
}

function M.config_raw(src, overrides)
  return C.config(SPEC, src, overrides)
end

--- vit.config(name_or_table[, overrides]) -> a checked config, defaults from "vit".
M.config = C.api(M.config_raw)

--- The number of tokens of a config: 1 + (image_size / patch_size)^2 (197 for vit).
function M.tokens(cfg)
  local n = cfg.image_size // cfg.patch_size
  return 1 + n * n
end

--- The smallest image side (a multiple of patch, default 16) whose token count is at least
--- seq, and that count: the benchmark's rule (shared/bench/peers.py), e.g. 128 -> 192, 145.
function M.image_for(seq, patch)
  patch = patch or 16
  local n = 1
  while n * n + 1 < seq do n = n + 1 end
  return n * patch, n * n + 1
end

local PROJ = "embeddings.patch_embeddings.projection.weight"

local function weight_shapes(cfg)
  cfg = M.config_raw(cfg)
  local E, I, T = cfg.hidden_size, cfg.intermediate_size, M.tokens(cfg)
  local s = {
    ["embeddings.cls_token"] = {1, 1, E}, ["embeddings.position_embeddings"] = {1, T, E},
    [PROJ] = {E, cfg.num_channels, cfg.patch_size, cfg.patch_size},
    ["embeddings.patch_embeddings.projection.bias"] = {E},
    ["layernorm.weight"] = {E}, ["layernorm.bias"] = {E},
  }
  for l = 0, cfg.num_hidden_layers - 1 do
    local p = "encoder.layer." .. l .. "."
    for _, n in ipairs({"query", "key", "value"}) do
      s[p .. "attention.attention." .. n .. ".weight"] = {E, E}
      if cfg.qkv_bias then s[p .. "attention.attention." .. n .. ".bias"] = {E} end
    end
    s[p .. "attention.output.dense.weight"], s[p .. "attention.output.dense.bias"] = {E, E}, {E}
    s[p .. "intermediate.dense.weight"], s[p .. "intermediate.dense.bias"] = {I, E}, {I}
    s[p .. "output.dense.weight"], s[p .. "output.dense.bias"] = {E, I}, {E}
    for _, n in ipairs({"layernorm_before", "layernorm_after"}) do
      s[p .. n .. ".weight"], s[p .. n .. ".bias"] = {E}, {E}
    end
  end
  return s
end

--- vit.weight_shapes(cfg) -> hf_name -> shape (as saved: the projection [E, C, p, p]).
M.weight_shapes = C.api(weight_shapes)

-- The feed table: as C.feed, with the projection's [E, C, p, p] tensor read as the
-- placeholder's [E, C p p] (a tensor already [E, C p p] is taken as it is).
local function feed(m, weights, inputs)
  local t = type(weights) == "table" and weights[PROJ]
  if t and getmetatable(t) and getmetatable(t).__name == "stof.Tensor" then
    local want, got = m.weights[PROJ].shape, t:shape()
    if #got ~= 2 then
      local cfg, conv = m.config, true
      local full = {want[1], cfg.num_channels, cfg.patch_size, cfg.patch_size}
      for d = 1, 4 do conv = conv and got[d] == full[d] end
      if not conv then
        C.raise("feed: %s has shape %s, expected %s", PROJ, C.shape_str(got), C.shape_str(full))
      end
      local w = {}
      for k, v in pairs(weights) do w[k] = v end
      w[PROJ] = C.reshape(t, want)
      weights = w
    end
  end
  return C.feed_raw(m, weights, inputs)
end
local FEED = C.api(feed)

--- vit.build(cfg, {batch =, seq =, mask =, dtype =}) -> the model table (docs/MODELS.md).
--- seq may be left out; given, it must be the config's token count (vit.tokens(cfg)). The
--- input is pixel_values [batch, num_channels, image_size, image_size] in dtype.
M.build = C.api(function(cfg, opts)
  cfg = M.config_raw(cfg)
  local T = M.tokens(cfg)
  if type(opts) == "table" then
    if opts.seq ~= nil and opts.seq ~= T then
      C.raise("vit.build: seq %s: image_size %d with patch_size %d gives %d tokens", tostring(opts.seq),
        cfg.image_size, cfg.patch_size, T)
    end
    local o = {}
    for k, v in pairs(opts) do o[k] = v end
    o.seq = T
    opts = o
  end
  local B, S, dtype, mask = C.build_opts("vit", opts, T)
  mask = mask or stof.mask.dense()
  local act = C.activation(cfg, "hidden_act")
  local E, P, Cn = cfg.hidden_size, cfg.patch_size, cfg.num_channels
  local shapes = weight_shapes(cfg)
  shapes[PROJ] = {E, Cn * P * P}
  local W = C.placeholders(shapes, dtype)
  local pixels = te.placeholder({B, Cn, cfg.image_size, cfg.image_size}, dtype, "pixel_values")
  local H, eps = cfg.num_attention_heads, cfg.layer_norm_eps
  local function linear(x, p)
    return nn.linear(x, W[p .. ".weight"], W[p .. ".bias"], {name = p, transposed = true})
  end
  local function norm(x, p)
    return nn.layer_norm(x, W[p .. ".weight"], W[p .. ".bias"], eps, p)
  end

  local x = nn.patches(pixels, P, "embeddings.patch_embeddings.patches")
  local e = linear(x, "embeddings.patch_embeddings.projection")
  e = nn.prepend(W["embeddings.cls_token"], e, "embeddings.cls_token")
  local pe = nn.position_embedding(W["embeddings.position_embeddings"], B, S, "embeddings.position_embeddings")
  local h = nn.add(e, pe, "embeddings.add_position", "add")
  local hidden = {h}
  for l = 0, cfg.num_hidden_layers - 1 do
    local p = "encoder.layer." .. l .. "."
    x = norm(h, p .. "layernorm_before")
    local q = nn.split_heads(linear(x, p .. "attention.attention.query"), H, p .. "attention.attention.query.heads")
    local k = nn.split_heads(linear(x, p .. "attention.attention.key"), H, p .. "attention.attention.key.heads")
    local v = nn.split_heads(linear(x, p .. "attention.attention.value"), H, p .. "attention.attention.value.heads")
    local a = nn.merge_heads(nn.attention(q, k, v, mask), p .. "attention.attention.merge_heads")
    h = nn.add(linear(a, p .. "attention.output.dense"), h, p .. "attention.output.residual")
    x = norm(h, p .. "layernorm_after")
    local f = act(linear(x, p .. "intermediate.dense"), p .. "intermediate.act")
    h = nn.add(linear(f, p .. "output.dense"), h, p .. "output.residual")
    hidden[#hidden + 1] = h
  end
  local out = norm(h, "layernorm")
  return {
    config = cfg, batch = B, seq = S, dtype = dtype, mask = mask, image_size = cfg.image_size,
    inputs = {pixel_values = pixels},
    weights = W, hidden_states = hidden, output = out, feed = FEED,
  }
end)

--- vit.random_weights(cfg, seed[, dtype][, {std =}]) -> hf_name -> CPU stof.Tensor.
M.random_weights = C.api(function(cfg, seed, dtype, opts)
  return C.random_weights(weight_shapes(cfg), seed, dtype, opts)
end)

--- vit.from_pretrained(dir[, {dtype =, overrides =}]) -> cfg, weights (names as ViTModel
--- saves them; "vit."-prefixed names, as ViTForImageClassification saves them, are
--- accepted; the pooler and the classifier are ignored).
M.from_pretrained = C.api(function(dir, opts)
  return C.from_pretrained(M, {"vit."}, dir, opts)
end)

return M
