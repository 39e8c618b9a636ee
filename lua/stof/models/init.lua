-- stof.models: the model zoo built from stof.nn (DESIGN.md section 8). Each model module
-- offers configs, config, weight_shapes, build, random_weights and from_pretrained
-- (docs/MODELS.md); `configs` here lists every named config with the module it belongs to.
--
--   local models = require("stof.models")       -- or stof.models
--   local m = models.bert.build("bert-base", {batch = 1, seq = 128})
local models = {
  bert = require("stof.models.bert"),
  gpt2 = require("stof.models.gpt2"),
  llama = require("stof.models.llama"),
  vit = require("stof.models.vit"),
  t5 = require("stof.models.t5"),
}

-- name -> the config table, with model_type naming its module
models.configs = {}
for _, key in ipairs({"bert", "gpt2", "llama", "vit", "t5"}) do
  for name, cfg in pairs(models[key].configs) do
    local c = {model_type = key}
    for k, v in pairs(cfg) do c[k] = v end
    models.configs[name] = c
  end
end

--- The model module for a config name ("bert-base") or a config table (its model_type).
function models.module(cfg)
  local key = type(cfg) == "string" and models.configs[cfg] and models.configs[cfg].model_type
    or type(cfg) == "table" and cfg.model_type
  local m = key and models[key]
  if type(m) ~= "table" or not m.build then
    error(("stof.models: no model for %s"):format(type(cfg) == "string" and ("%q"):format(cfg)
      or "a config without a known model_type"), 2)
  end
  return m
end

return models
