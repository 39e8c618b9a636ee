-- What the model files share: user errors raised at the caller's line, config checking
-- (Hugging Face names, defaults, types), seeded random weights initialised like Hugging
-- Face's, loading a Hugging Face model directory (config.json + model.safetensors), and
-- the feed table that stof.eval takes. Internal to stof.models: the model files wrap it.
local stof = require("stof")
local te = stof.te
local nn = require("stof.nn")

local C = {}

-- ---------------------------------------------------------------- user errors

-- A user error travels as a table up to the public function (C.api), which raises its
-- message at the user's line; any other error is a bug and keeps its own position.
local USER = {}
USER.__index = USER
USER.__tostring = function(e) return e.msg end

function C.raise(fmt, ...)
  error(setmetatable({msg = fmt:format(...)}, USER), 0)
end

-- fn wrapped so that its user errors point at the line that called the wrapper.
function C.api(fn)
  return function(...)
    local r = table.pack(pcall(fn, ...))
    if r[1] then return table.unpack(r, 2, r.n) end
    local e = r[2]
    if getmetatable(e) == USER then error(e.msg, 2) end
    error(e, 0)
  end
end

function C.shape_str(s)
  return "[" .. table.concat(s, ", ") .. "]"
end

local function is_null(v)
  return v == nil or (stof.null ~= nil and v == stof.null)
end
C.is_null = is_null

-- ---------------------------------------------------------------- configs

local function typename(v)
  if math.type(v) then return math.type(v) == "integer" and "integer" or "number" end
  return type(v)
end

-- What v is, for an error that wanted an integer: a float's value (1.5), else its type.
local function intname(v)
  return math.type(v) == "float" and tostring(v) or typename(v)
end

-- One field's value checked against kind ("int", "number", "string", "boolean"); an
-- integral float is taken as an integer (JSON writers differ).
local function check_field(key, kind, v)
  if kind == "int" then
    if math.type(v) == "float" and v == math.floor(v) and math.abs(v) < 2 ^ 53 then v = math.tointeger(v) end
    if math.type(v) ~= "integer" then
      C.raise("config: %s must be an integer, got %s", key, intname(v))
    end
    if v <= 0 then C.raise("config: %s must be positive, got %d", key, v) end
  elseif kind == "number" then
    if type(v) ~= "number" then C.raise("config: %s must be a number, got %s", key, typename(v)) end
    if v ~= v or v < 0 then C.raise("config: %s must be a non-negative number, got %s", key, tostring(v)) end
  elseif kind == "string" then
    if type(v) ~= "string" then C.raise("config: %s must be a string, got %s", key, typename(v)) end
  elseif kind == "boolean" then
    if type(v) ~= "boolean" then C.raise("config: %s must be a boolean, got %s", key, typename(v)) end
  end
  return v
end

-- The config of spec from a name (spec.configs[name]) or a table (filled from
-- spec.configs[spec.default]), with overrides applied, aliases resolved and each field
-- checked. spec = {model =, configs =, default =, fields = {{key, kind[, optional]}},
-- aliases = {generic = own}, check = fn(cfg)}. Unknown keys are kept unchecked (a
-- config.json carries many); null (stof.null) counts as absent.
function C.config(spec, src, overrides)
  local given = {}
  if type(src) == "string" then
    local c = spec.configs[src]
    if not c then
      local names = {}
      for k in pairs(spec.configs) do names[#names + 1] = k end
      table.sort(names)
      C.raise("config: unknown %s config %q (known: %s)", spec.model, src, table.concat(names, ", "))
    end
    src = c
  elseif type(src) ~= "table" then
    C.raise("config: a config name or table expected, got %s", type(src))
  end
  if overrides ~= nil and type(overrides) ~= "table" then
    C.raise("config: overrides must be a table, got %s", type(overrides))
  end
  for _, t in ipairs({src, overrides or {}}) do
    for k, v in pairs(t) do
      if type(k) == "string" and not is_null(v) then
        local own = spec.aliases and spec.aliases[k]
        if own and t[own] ~= nil and not is_null(t[own]) and t[own] ~= v then
          C.raise("config: %s = %s and its alias %s = %s disagree", own, tostring(t[own]), k, tostring(v))
        end
        given[own or k] = v
      end
    end
  end
  local cfg = {}
  for k, v in pairs(spec.configs[spec.default]) do cfg[k] = v end
  for k, v in pairs(given) do cfg[k] = v end
  for _, f in ipairs(spec.fields) do
    local key, kind, optional = f[1], f[2], f[3]
    if cfg[key] == nil then
      if not optional then C.raise("config: %s is missing", key) end
    else
      cfg[key] = check_field(key, kind, cfg[key])
    end
  end
  if cfg.model_type ~= nil and cfg.model_type ~= spec.model then
    C.raise("config: model_type is %s, not %s", tostring(cfg.model_type), spec.model)
  end
  cfg.model_type = spec.model
  if spec.aliases then
    for generic, own in pairs(spec.aliases) do cfg[generic] = cfg[own] end
  end
  if spec.check then spec.check(cfg) end
  return cfg
end

-- The activation layer for a config's activation name (key names the field).
function C.activation(cfg, key)
  local f, known = nn.activation(cfg[key])
  if not f then C.raise("config: %s %q is not one of %s", key, cfg[key], known) end
  return f
end

-- ---------------------------------------------------------------- build options

-- The first key of opts that is not in the list known, or nil: a misspelt option must never
-- pass for a default (build's dtyp, run.prepare's tagret).
function C.unknown_key(opts, known)
  for k in pairs(opts) do
    local ok = false
    for _, n in ipairs(known) do ok = ok or n == k end
    if not ok then return k end
  end
end

function C.build_opts(model, opts, max_pos, extra)
  if type(opts) ~= "table" then C.raise("%s.build: options {batch =, seq = ...} expected, got %s", model, type(opts)) end
  local known = {"batch", "seq", "mask", "dtype", extra}
  local bad = C.unknown_key(opts, known)
  if bad ~= nil then C.raise("%s.build: unknown option %q (known: %s)", model, tostring(bad), table.concat(known, ", ")) end
  for _, k in ipairs({"batch", "seq"}) do
    local v = opts[k]
    if math.type(v) ~= "integer" or v <= 0 then
      C.raise("%s.build: %s must be a positive integer, got %s", model, k, tostring(v))
    end
  end
  if opts.seq > max_pos then
    C.raise("%s.build: seq %d exceeds the config's max_position_embeddings %d (the position table's rows)",
      model, opts.seq, max_pos)
  end
  local dtype = opts.dtype or "float32"
  if dtype ~= "float32" and dtype ~= "float16" and dtype ~= "bfloat16" then
    C.raise("%s.build: dtype %s: float32, float16 or bfloat16 expected", model, tostring(dtype))
  end
  local mask = opts.mask
  if mask ~= nil then
    local mt = getmetatable(mask)
    if type(mt) ~= "table" or mt.__name ~= "stof.Mask" then
      C.raise("%s.build: mask must be a stof.mask value, got %s", model, type(mask))
    end
  end
  return opts.batch, opts.seq, dtype, mask
end

-- One placeholder per weight, named after it: hf_name -> te tensor.
function C.placeholders(shapes, dtype)
  local w, names = {}, {}
  for name in pairs(shapes) do names[#names + 1] = name end
  table.sort(names)
  for _, name in ipairs(names) do w[name] = te.placeholder(shapes[name], dtype, name) end
  return w
end

-- The feed table for stof.eval: each weight placeholder -> weights[name], each input
-- placeholder -> inputs[name].
local function feed(m, weights, inputs)
  if type(weights) ~= "table" then C.raise("feed: a table of weights (name -> stof.Tensor) expected, got %s", type(weights)) end
  if type(inputs) ~= "table" then C.raise("feed: a table of inputs (name -> stof.Tensor) expected, got %s", type(inputs)) end
  local f = {}
  for name, ph in pairs(m.weights) do
    local t = weights[name]
    if t == nil then C.raise("feed: the weights lack %s", name) end
    f[ph] = t
  end
  for name, ph in pairs(m.inputs) do
    local t = inputs[name]
    if t == nil then C.raise("feed: the inputs lack %s", name) end
    f[ph] = t
  end
  return f
end
C.feed_raw = feed
C.feed = C.api(feed)

-- ---------------------------------------------------------------- random weights

-- Runs fn with a fresh current te graph, then gives the caller's current graph back, so
-- that the scratch ops never land in the user's graph. (The current graph lives in the
-- registry under "stof.graph", lua/te.c; without the debug library the caller simply
-- finds a new current graph, as after te.reset().)
local function in_scratch_graph(fn)
  local reg = debug and debug.getregistry and debug.getregistry()
  local saved = reg and rawget(reg, "stof.graph")
  te.reset()
  local ok, r = pcall(fn)
  if reg then rawset(reg, "stof.graph", saved) end
  if not ok then error(r, 0) end
  return r
end

-- t (a CPU tensor) with shape, the same elements in the same (row-major) order: a view
-- where stof.Tensor has reshape, else a copy made by the reference interpreter.
function C.reshape(t, shape)
  if t.reshape then return t:reshape(shape) end
  local from, n, m = t:shape(), 1, 1
  for _, d in ipairs(from) do n = n * d end
  for _, d in ipairs(shape) do m = m * d end
  if n ~= m then C.raise("reshape: %s to %s changes the element count", C.shape_str(from), C.shape_str(shape)) end
  return in_scratch_graph(function()
    local src = te.placeholder(from, t:dtype(), "src")
    local out = te.compute(shape, function(...)
      local idx, flat = {...}, nil
      for d = 1, #idx do flat = flat and flat * shape[d] + idx[d] or idx[d] end
      local at, stride = {}, 1
      for d = #from, 1, -1 do
        at[d] = stride == 1 and flat % from[d] or (flat // stride) % from[d]
        stride = stride * from[d]
      end
      return src[at]
    end, "reshape")
    return (stof.eval(out, {[src] = t}))
  end)
end

-- hf_name -> CPU tensor of dtype for each of shapes, deterministic from seed: matrices
-- and embeddings uniform with standard deviation std (0.02, Hugging Face's
-- initializer_range; uniform rather than normal), 1-D ".weight" (norm scales) 1 +- 0.05,
-- 1-D ".bias" +- 0.02 (Hugging Face starts them at 1 and 0; non-zero here so that tests see
-- them). stof.uniform draws each in the dtype in one C pass over the CPUs (bert-base in
-- float16 on two cores: 2.3 s; through the interpreter and a cast it took 5.8 s).
function C.random_weights(shapes, seed, dtype, opts)
  if math.type(seed) ~= "integer" then
    C.raise("random_weights: seed must be an integer, got %s", intname(seed))
  end
  dtype = dtype or "float32"
  if dtype ~= "float32" and dtype ~= "float16" and dtype ~= "bfloat16" then
    C.raise("random_weights: dtype %s: float32, float16 or bfloat16 expected", tostring(dtype))
  end
  if opts ~= nil and type(opts) ~= "table" then C.raise("random_weights: opts must be a table, got %s", type(opts)) end
  local std = opts and opts.std or 0.02
  if type(std) ~= "number" or not (std > 0 and std < math.huge) then
    C.raise("random_weights: opts.std must be a positive number, got %s", tostring(std))
  end
  local names = {}
  for name in pairs(shapes) do names[#names + 1] = name end
  table.sort(names)
  local w = {}
  for i, name in ipairs(names) do
    local shape, s = shapes[name], seed * 100003 + i
    local a, b = 0.05, 1 -- half-width and middle
    if #shape >= 2 then
      a, b = std * math.sqrt(3), 0
    elseif name:match("%.bias$") then
      a, b = std, 0
    end
    local ok, t = pcall(stof.uniform, shape, b - a, b + a, dtype, s)
    if not ok then C.raise("random_weights: %s: %s", name, tostring(t)) end
    w[name] = t
  end
  return w
end

-- ---------------------------------------------------------------- from_pretrained

local FLOATS = {float32 = true, float16 = true, bfloat16 = true}

-- cfg, weights from a Hugging Face model directory: dir/config.json through M.config and
-- dir/model.safetensors, each tensor found under its name or a prefixed one (prefixes:
-- "bert.", "transformer.", ...) or one of M.weight_aliases[name] (optional), checked
-- against M.weight_shapes. opts.dtype converts every
-- weight to that dtype; without it all weights must share one float dtype.
function C.from_pretrained(M, prefixes, dir, opts)
  local what = M.name .. ".from_pretrained"
  if type(dir) ~= "string" then C.raise("%s: a directory name expected, got %s", what, type(dir)) end
  if opts ~= nil and type(opts) ~= "table" then C.raise("%s: opts must be a table, got %s", what, type(opts)) end
  opts = opts or {}
  if not stof.load_json or not stof.load then
    C.raise("%s: this build of stof lacks stof.load_json / stof.load", what)
  end
  local jpath, wpath = dir .. "/config.json", dir .. "/model.safetensors"
  local ok, raw = pcall(stof.load_json, jpath)
  if not ok then C.raise("%s: cannot read %s: %s", what, jpath, tostring(raw)) end
  if type(raw) ~= "table" then C.raise("%s: %s holds a %s, a JSON object expected", what, jpath, type(raw)) end
  local okc, cfg = pcall(M.config_raw, raw, opts.overrides)
  if not okc then
    if getmetatable(cfg) == USER then C.raise("%s: %s: %s", what, jpath, cfg.msg) end
    error(cfg, 0)
  end
  local okw, file = pcall(stof.load, wpath)
  if not okw then C.raise("%s: cannot read %s: %s", what, wpath, tostring(file)) end
  local shapes = M.weight_shapes(cfg)
  local names = {}
  for name in pairs(shapes) do names[#names + 1] = name end
  table.sort(names)
  local dtype = opts.dtype
  if dtype ~= nil and not FLOATS[dtype] then
    C.raise("%s: opts.dtype %s: float32, float16 or bfloat16 expected", what, tostring(dtype))
  end
  local weights, count = {}, {}
  for _, name in ipairs(names) do
    local t = file[name]
    if t == nil then
      for _, p in ipairs(prefixes) do
        t = file[p .. name]
        if t ~= nil then break end
      end
    end
    -- M.weight_aliases[name]: other names a weight may be saved under (a tied embedding)
    for _, alt in ipairs(t == nil and M.weight_aliases and M.weight_aliases[name] or {}) do
      if t == nil then t = file[alt] end
    end
    if t == nil then C.raise("from_pretrained: model.safetensors lacks %s (in %s)", name, dir) end
    local want, got = shapes[name], t:shape()
    local same = #want == #got
    for d = 1, #want do same = same and want[d] == got[d] end
    if not same then
      C.raise("from_pretrained: %s has shape %s in model.safetensors, expected %s from config.json (in %s)",
        name, C.shape_str(got), C.shape_str(want), dir)
    end
    local dt = t:dtype()
    if not FLOATS[dt] then
      C.raise("from_pretrained: %s has dtype %s in model.safetensors, expected a float dtype (in %s)", name, dt, dir)
    end
    count[dt] = (count[dt] or 0) + 1
    weights[name] = t
  end
  -- without opts.dtype, the weights' common dtype is that of most of them
  local common = dtype
  if not common then
    for dt, n in pairs(count) do
      if not common or n > count[common] or (n == count[common] and dt < common) then common = dt end
    end
  end
  for _, name in ipairs(names) do
    local dt = weights[name]:dtype()
    if dt ~= common then
      if not dtype then
        C.raise("from_pretrained: %s has dtype %s, expected %s as the other weights (in %s; opts.dtype converts)",
          name, dt, common, dir)
      end
      weights[name] = weights[name]:astype(dtype)
    end
  end
  return cfg, weights
end

return C
