-- stof.models.run: a zoo model built, planned (exec/: the default fusion scheme, one kernel
-- per segment, a packed arena, CUDA-graph replay) and bound to its weights in one call.
--
--   local run = require("stof.models.run")
--   local r = run.prepare("bert-base", {batch = 8, seq = 512, mask = "bigbird", dtype = "float16"})
--   local hidden = r:run()                 -- the last hidden state (a CPU tensor)
--   print(r:time(20))                      -- median ms per forward
local stof = require("stof")
local models = require("stof.models")
local common = require("stof.models.common")

local R = {}
R.__index = R

local function fail(fmt, ...) error(("stof.models.run: " .. fmt):format(...), 3) end

local function mask_of(spec, seq)
  if spec == nil then return stof.mask.dense() end
  if type(spec) == "string" then
    local ok, m = pcall(stof.mask.suite, spec, seq)
    if not ok then fail("unknown mask %q (dense, causal, sliding, causal_sliding, longformer, bigbird, document)", spec) end
    return m
  end
  return spec
end

local function bytes_of(t)
  local n = 1
  for _, d in ipairs(t:shape()) do n = n * d end
  local size = ({float32 = 4, float16 = 2, bfloat16 = 2, float64 = 8, int32 = 4, int64 = 8, bool = 1})[t:dtype()] or 4
  return n * size
end

-- the options R.prepare takes (anything else is refused by name)
local PREPARE_KEYS = {"batch", "seq", "mask", "dtype", "target", "weights", "seed", "hidden_states", "verbose", "graph",
                      "exact_gelu", "plan", "overrides", "inputs"}

--- Builds model `name` (a zoo name or a config table), plans it and binds its weights.
--- opts: batch, seq, mask (a stof.mask value or a suite name; decoders add causal), dtype
--- ("float16"), target ("cuda" when a GPU is present, else "c"), weights (name -> tensor;
--- default seeded random weights), seed, hidden_states (plan every hidden state, not only the
--- last; then the output where it is not the last hidden state: ViT), verbose (progress on
--- stderr), graph (CUDA-graph replay, default true), exact_gelu, plan (false: build the model
--- and draw its weights and inputs but make no plan: r.plan is nil, r:feed() gives what
--- stof.tune takes), overrides (config fields for a named config: {num_hidden_layers = 1}),
--- inputs (name -> tensor instead of drawn ones).
--- ViT: seq picks the smallest image side whose token count is at least seq (128 -> 192 px,
--- 145 tokens) unless weights are given (then the config's image_size rules); r.seq is the
--- token count, r.seq_requested and r.image_size say what was asked and what was built.
function R.prepare(name, opts)
  opts = opts or {}
  if type(opts) ~= "table" then fail("options must be a table, got %s", type(opts)) end
  local bad = common.unknown_key(opts, PREPARE_KEYS)
  if bad ~= nil then
    error(("ValueError: stof.models.run.prepare: unknown option %q (known: %s)"):format(tostring(bad),
      table.concat(PREPARE_KEYS, ", ")), 2)
  end
  local mod = models.module(name)
  local batch, seq = opts.batch or 1, opts.seq or 128
  local cfg = type(name) == "table" and name or mod.config(name, opts.overrides)
  if type(name) == "string" and not opts.weights and cfg.max_position_embeddings ~= nil
     and cfg.max_position_embeddings < seq then
    -- random weights: the position table is sized for the sequence, as the peers do
    -- (DESIGN.md section 8: max_position_embeddings >= S)
    local over = {}
    for k, v in pairs(opts.overrides or {}) do over[k] = v end
    over.max_position_embeddings = seq
    cfg = mod.config(name, over)
  end
  local seq_requested = seq
  if mod.tokens then
    -- ViT: with random weights, the image side whose token count is nearest above seq
    -- (DESIGN.md section 9); the sequence is that token count
    if not opts.weights then
      local image = mod.image_for(seq, cfg.patch_size)
      if image ~= cfg.image_size then cfg = mod.config(cfg, {image_size = image}) end
    end
    seq = mod.tokens(cfg)
  end
  local dtype = opts.dtype or "float16"
  local mask = mask_of(opts.mask, seq)
  local t0 = os.clock()
  local m = mod.build(cfg, {batch = batch, seq = seq, mask = mask, dtype = dtype})
  local outs = {m.output}
  if opts.hidden_states then
    -- every hidden state, then the output where it is none of them (ViT's final layernorm)
    outs = {table.unpack(m.hidden_states)}
    if outs[#outs] ~= m.output then outs[#outs + 1] = m.output end
  end
  local plan
  if opts.plan ~= false then
    plan = stof.plan(outs, {target = opts.target, graph = opts.graph, verbose = opts.verbose,
                            exact_gelu = opts.exact_gelu})
  end
  local weights = opts.weights
  if not weights then
    if opts.verbose then io.stderr:write("stof: drawing random weights\n") end
    weights = mod.random_weights(cfg, opts.seed or 0, dtype)
  end
  local wbytes = 0
  for _, t in pairs(weights) do wbytes = wbytes + bytes_of(t) end
  local mem = plan and plan:memory()
  if plan and plan.target == "cuda" then
    local free = stof.cuda_mem_info and select(1, stof.cuda_mem_info()) or nil
    local need = wbytes + mem.arena + mem.workspace
    if free and need > free then
      fail("the weights (%.1f MiB), the arena (%.1f MiB) and the GEMM workspace (%.1f MiB) need %.1f MiB, the GPU has %.1f MiB free",
           wbytes / 2^20, mem.arena / 2^20, mem.workspace / 2^20, need / 2^20, free / 2^20)
    end
  end
  local inputs = {}
  for iname, ph in pairs(m.inputs) do
    -- token ids (the encoder's and T5's decoder's) in [0, 100) (inside every zoo
    -- vocabulary); token types 0; pixels in [-1, 1)
    inputs[iname] = iname:match("input_ids$") and stof.rand(ph.shape, "int64", (opts.seed or 0) + 17 + #iname)
      or iname == "pixel_values" and stof.rand(ph.shape, ph.dtype, (opts.seed or 0) + 17)
      or stof.zeros(ph.shape, "int64")
  end
  if opts.inputs then for k, v in pairs(opts.inputs) do inputs[k] = v end end
  if plan then plan:bind(m:feed(weights, inputs)) end
  local self = setmetatable({model = m, plan = plan, target = opts.target, config = cfg, weights = weights, inputs = inputs,
                             weight_bytes = wbytes, build_s = os.clock() - t0, mask = mask,
                             batch = batch, seq = seq, seq_requested = seq_requested,
                             image_size = cfg.image_size, dtype = dtype}, R)
  return self
end

--- The feed of the model: every weight and input placeholder -> its tensor.
function R:feed() return self.model:feed(self.weights, self.inputs) end

--- stof.tune(NAME or config, opts) lands here: the zoo model built as R.prepare builds it
--- (opts batch, seq, mask, dtype, target, weights, seed, overrides, inputs), then searched
--- (opts budget, trials, db, workload (default: the model, shape, mask and dtype), force,
--- reps, warmup, seed, threads, stage1, stage2, templates, verbose). Returns the tuned plan
--- bound to the weights, the search's figures and the prepared model (r.plan is the plan).
function R.tune(name, opts)
  opts = opts or {}
  local prep_keys = {batch = true, seq = true, mask = true, dtype = true, target = true, weights = true,
                     overrides = true, inputs = true, seed = true}
  local tune_keys = {budget = true, trials = true, db = true, workload = true, force = true, reps = true, warmup = true,
                     seed = true, threads = true, stage1 = true, stage2 = true, templates = true, verbose = true,
                     target = true}
  local prep, topts = {plan = false}, {}
  for k, v in pairs(opts) do
    if not prep_keys[k] and not tune_keys[k] then
      error(("ValueError: stof.tune: unknown option %q for a zoo model"):format(tostring(k)), 3)
    end
    if prep_keys[k] then prep[k] = v end
    if tune_keys[k] then topts[k] = v end
  end
  local r = R.prepare(name, prep)
  topts.feed = r:feed()
  topts.workload = topts.workload or r:workload():gsub("/[^/]*$", "")
  -- the search's refusals (a bad budget, say) at the caller's line, as this function's own
  local ok, plan, res = pcall(stof.tune, {r.model.output}, topts)
  if not ok then error(plan, 3) end
  r.plan = plan
  return plan, res, r
end

--- Binds new inputs (name -> tensor), runs, returns the planned outputs (CPU tensors).
function R:run(inputs)
  if inputs then
    local f = {}
    for k, v in pairs(inputs) do
      local ph = self.model.inputs[k]
      if not ph then fail("the model has no input %q", k) end
      f[ph] = v
      self.inputs[k] = v
    end
    self.plan:bind(f)
  end
  return self.plan:run()
end

--- Two plans timed in turn, rounds (3) times each, reps runs a round after warmup: each
--- plan's median round, (ms_a, ms_b). Both in the same minutes, so that neither is flattered
--- by the device's state (clocks after a search's load, caches): how a tuned plan is compared
--- with its default one.
function R.time_in_turn(a, b, reps, warmup, rounds)
  local ta, tb = {}, {}
  for k = 1, rounds or 3 do
    ta[k] = a:time(reps, warmup)
    tb[k] = b:time(reps, warmup)
  end
  table.sort(ta)
  table.sort(tb)
  return ta[(#ta + 1) // 2], tb[(#tb + 1) // 2]
end

--- Median milliseconds per forward (graph replay on the GPU).
function R:time(reps, warmup) return self.plan:time(reps or 20, warmup or 3) end

--- Milliseconds per segment kind: {gemm =, attention =, other =, total =} (kernel by kernel).
function R:split(reps)
  local segs = self.plan:time_segments(reps or 10)
  local s = {gemm = 0, attention = 0, other = 0, total = 0}
  for _, g in ipairs(segs) do
    local k = g.kind == "gemm" and "gemm" or g.template:find("attention", 1, true) and "attention" or "other"
    s[k] = s[k] + g.ms
    s.total = s.total + g.ms
  end
  return s, segs
end

--- The workload key of this run in a tuning database: model, shape, mask, dtype, target.
function R:workload()
  local name = self.config.model_type or "model"
  return ("%s-h%d-l%d/%dx%d/%s/%s/%s"):format(name, self.config.hidden_size or 0, self.config.num_hidden_layers or 0,
    self.batch, self.seq, tostring(self.mask), self.dtype, self.plan and self.plan.target or self.target or "default")
end

--- Times the plan and appends the measurement to db (a stof.db handle) as a tuning record:
--- the fusion scheme's code, every knob decision (Plan:knobs()), the times. Returns the
--- record as stored.
function R:record(db, reps)
  local times = {}
  for i = 1, 3 do times[i] = self.plan:time(reps or 10, i == 1 and 3 or 0) end
  local device = "cpu"
  if self.plan.target == "cuda" then device = "cuda" end
  return db:append{workload = self:workload(), device = device, scheme = self.plan.scheme,
                   knobs = self.plan:knobs(), times_ms = times}
end

--- Bytes: weights, the plan's arena and workspace, and their sum (the device memory the
--- model holds while it runs, beside the inputs).
function R:memory()
  local m = self.plan:memory()
  return {weights = self.weight_bytes, arena = m.arena, workspace = m.workspace, values = m.values,
          inputs = m.owned_inputs, total = self.weight_bytes + m.arena + m.workspace + m.owned_inputs}
end

return R
