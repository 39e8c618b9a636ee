-- What `stof model` and `stof tune` share: the NAME argument (a named config of the zoo or a
-- Hugging Face directory), the options that say which model to build and how (--batch,
-- --seq, --mask, --dtype, --target, --layers), and building it through stof.models.run
-- (seeded random weights, or the directory's). A module, not a command.
local stof = require("stof")
local common = require("stof.cli.common")
local models = require("stof.models")
local run = require("stof.models.run")

local M = {}

--- The usage lines of the shared options (for a command's usage text).
M.options_usage = [[
  --batch B          batch size (1)
  --seq S            sequence length (128)
  --mask MASK        a suite mask: dense, causal, sliding, causal_sliding, longformer,
                     bigbird, document (bigbird); decoders add causal themselves
  --dtype T          float16 (default), bfloat16 or float32
  --target T         cuda (default with a GPU) or c (the CPU backend)
  --layers N         keep only the first N layers (a quick look at a big model)]]

--- The defaults of the shared options.
function M.defaults()
  return {batch = 1, seq = 128, mask = "bigbird", dtype = "float16", verbose = true}
end

--- A positive integer option's value (a user error otherwise).
function M.int(flag, s)
  local n = math.tointeger(tonumber(s))
  if not n or n < 1 then common.fail("%s: a positive integer expected, got '%s'", flag, s) end
  return n
end

--- Parses args into o (M.defaults() and the command's own defaults) for command cmd: the
--- shared options, then values[flag] = function(o, v, flag) for the command's options that
--- take a value and flags[flag] = function(o, flag) for those that do not; one positional
--- argument, the model (o.name). A user error for anything else.
function M.parse(args, cmd, o, values, flags)
  local i = 1
  local function value(flag)
    local v = args[i + 1]
    if v == nil then common.fail("%s needs a value", flag) end
    i = i + 2
    return v
  end
  local function int(flag) return M.int(flag, value(flag)) end
  while i <= #args do
    local a = args[i]
    if a == "--batch" then o.batch = int(a)
    elseif a == "--seq" then o.seq = int(a)
    elseif a == "--layers" then o.layers = int(a)
    elseif a == "--mask" then o.mask = value(a)
    elseif a == "--dtype" then o.dtype = value(a)
    elseif a == "--target" then o.target = value(a)
    elseif values and values[a] then values[a](o, value(a), a)
    elseif flags and flags[a] then flags[a](o, a); i = i + 1
    elseif a:sub(1, 1) == "-" then common.fail("unknown option '%s' (see stof %s --help)", a, cmd)
    elseif o.name then common.fail("one model at a time (got '%s' and '%s')", o.name, a)
    else o.name = a; i = i + 1 end
  end
  if not o.name then common.fail("which model? (stof model list)") end
  return o
end

--- The model o names: the config (a zoo name, or a table from a Hugging Face directory),
--- the weights (nil: random) and the config overrides (--layers).
function M.resolve(o)
  local spec, weights = o.name, nil
  local f = io.open(o.name .. "/config.json", "r")
  if f then
    f:close()
    local raw = stof.load_json(o.name .. "/config.json")
    local mod = type(raw.model_type) == "string" and models[raw.model_type]
    if type(mod) ~= "table" or not mod.from_pretrained then
      common.fail("%s/config.json: model_type '%s' is not in the zoo", o.name, tostring(raw.model_type))
    end
    spec, weights = mod.from_pretrained(o.name, {dtype = o.dtype})
    spec.model_type = raw.model_type
  elseif not models.configs[o.name] then
    local names = {}
    for n in pairs(models.configs) do names[#names + 1] = n end
    table.sort(names)
    common.fail("unknown model '%s' (%s, or a Hugging Face directory)", o.name, table.concat(names, ", "))
  end
  local overrides
  if o.layers then
    if weights then common.fail("--layers applies to named configs, not to a directory's weights") end
    local have = models.module(o.name).config(o.name).num_hidden_layers
    if have and o.layers > have then
      common.fail("--layers %d: %s has %d layers (--layers keeps the first N)", o.layers, o.name, have)
    end
    overrides = {num_hidden_layers = o.layers}
  end
  return spec, weights, overrides
end

--- Builds the model o names with stof.models.run.prepare (extra: more of its options, e.g.
--- plan = false); a user error names what went wrong. Returns the run.
function M.prepare(o, extra)
  local spec, weights, overrides = M.resolve(o)
  local opts = {batch = o.batch, seq = o.seq, mask = o.mask, dtype = o.dtype, overrides = overrides,
                target = o.target, verbose = o.verbose, weights = weights}
  for k, v in pairs(extra or {}) do opts[k] = v end
  local ok, r = pcall(run.prepare, spec, opts)
  if not ok then common.fail("%s", (tostring(r):gsub("^[^%s]*%.lua:%d+: ", ""))) end
  return r
end

--- "gpt2  batch 2  seq 24  mask bigbird  float32": what a line of output is about.
function M.title(o, r)
  return ("%s  batch %d  seq %d%s  mask %s  %s"):format(type(o.name) == "string" and o.name or "model", o.batch, r.seq,
    r.image_size and (" (image %d px)"):format(r.image_size) or "", o.mask, o.dtype)
end

return M
