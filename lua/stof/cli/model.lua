-- stof model NAME [--batch B] [--seq S] [--mask MASK] [...]: builds a zoo model, plans it
-- (exec/: the default fusion scheme, CUDA-graph replay), binds seeded random weights (or a
-- Hugging Face directory's), runs it and prints the time per forward, the split by kernel
-- kind and the memory. `stof model list` lists the named configs.
local stof = require("stof")
local common = require("stof.cli.common")
local models = require("stof.models")
local run = require("stof.models.run")

local usage = [[
usage: stof model NAME [options]          run a zoo model and time it
       stof model list                    the named configs

NAME is a named config (bert-base, bert-large, gpt2, ...) or a directory holding
config.json + model.safetensors as Hugging Face saves them.
options:
  --batch B          batch size (1)
  --seq S            sequence length (128)
  --mask MASK        a suite mask: dense, causal, sliding, causal_sliding, longformer,
                     bigbird, document (bigbird); decoders add causal themselves
  --dtype T          float16 (default), bfloat16 or float32
  --target T         cuda (default with a GPU) or c (the CPU backend)
  --reps N           timed runs (20); the median is printed
  --layers N         keep only the first N layers (a quick look at a big model)
  --no-graph         launch kernel by kernel instead of replaying a CUDA graph
  --exact-gelu       keep the erf GELU out of the GEMM epilogue (tanh form otherwise)
  --describe         print the plan's segments
  --split            time each segment and print the GEMM / attention / other split
  --check            compare the last hidden state with the reference interpreter (CPU;
                     slow for full-size models)
  -q                 no progress lines]]

local function parse(args)
  local o = {batch = 1, seq = 128, mask = "bigbird", dtype = "float16", reps = 20, verbose = true}
  local i = 1
  local function value(flag)
    local v = args[i + 1]
    if v == nil then common.fail("%s needs a value", flag) end
    i = i + 2
    return v
  end
  local function int(flag)
    local s = value(flag)
    local n = math.tointeger(tonumber(s))
    if not n or n < 1 then common.fail("%s: a positive integer expected, got '%s'", flag, s) end
    return n
  end
  while i <= #args do
    local a = args[i]
    if a == "--batch" then o.batch = int(a)
    elseif a == "--seq" then o.seq = int(a)
    elseif a == "--reps" then o.reps = int(a)
    elseif a == "--layers" then o.layers = int(a)
    elseif a == "--mask" then o.mask = value(a)
    elseif a == "--dtype" then o.dtype = value(a)
    elseif a == "--target" then o.target = value(a)
    elseif a == "--no-graph" then o.graph = false; i = i + 1
    elseif a == "--exact-gelu" then o.exact_gelu = true; i = i + 1
    elseif a == "--describe" then o.describe = true; i = i + 1
    elseif a == "--split" then o.split = true; i = i + 1
    elseif a == "--check" then o.check = true; i = i + 1
    elseif a == "-q" then o.verbose = false; i = i + 1
    elseif a:sub(1, 1) == "-" then common.fail("unknown option '%s' (see stof model --help)", a)
    elseif o.name then common.fail("one model at a time (got '%s' and '%s')", o.name, a)
    else o.name = a; i = i + 1 end
  end
  if not o.name then common.fail("which model? (stof model list)") end
  return o
end

local function mib(b) return b / 2^20 end

local function model(args)
  local o = parse(args)
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
    overrides = {num_hidden_layers = o.layers}
  end
  local ok, r = pcall(run.prepare, spec, {batch = o.batch, seq = o.seq, mask = o.mask, dtype = o.dtype, overrides = overrides,
                                           target = o.target, graph = o.graph, exact_gelu = o.exact_gelu,
                                           verbose = o.verbose, weights = weights})
  if not ok then common.fail("%s", (tostring(r):gsub("^[^%s]*%.lua:%d+: ", ""))) end
  local plan = r.plan
  if o.describe then print(plan:describe()) end
  local out = r:run()
  local ms = r:time(o.reps, 3)
  local mem = r:memory()
  print(("%s  batch %d  seq %d%s  mask %s  %s on %s: %.3f ms per forward (median of %d%s)"):format(
    type(o.name) == "string" and o.name or "model", o.batch, r.seq,
    r.image_size and (" (image %d px)"):format(r.image_size) or "", o.mask, o.dtype, plan.target, ms, o.reps,
    plan.target == "cuda" and (o.graph == false and ", kernel by kernel" or ", CUDA graph replay") or ""))
  print(("  %d segments; memory: weights %.1f MiB, arena %.1f MiB (%.1f MiB of values before sharing), workspace %.1f MiB"):format(
    plan.nsegment, mib(mem.weights), mib(mem.arena), mib(mem.values), mib(mem.workspace)))
  if o.split then
    local s = r:split(10)
    print(("  kernel by kernel %.3f ms: GEMM %.3f (%.0f%%), attention %.3f (%.0f%%), other %.3f (%.0f%%)"):format(
      s.total, s.gemm, 100 * s.gemm / s.total, s.attention, 100 * s.attention / s.total, s.other, 100 * s.other / s.total))
  end
  if o.check then
    local want = stof.eval(r.model.output, r.model:feed(r.weights, r.inputs))
    local e = stof.rel_l2(out:astype("float32"), want:astype("float32"))
    print(("  check against the reference interpreter: rel L2 %.3g"):format(e))
    if not (e < 1e-2) then common.fail("the result disagrees with the reference interpreter (rel L2 %g)", e) end
  end
end

local function list()
  local names = {}
  for n in pairs(models.configs) do names[#names + 1] = n end
  table.sort(names)
  for _, n in ipairs(names) do
    local c = models.configs[n]
    print(("%-12s %s, hidden %s, %s layers, %s heads"):format(n, c.model_type, tostring(c.hidden_size or c.n_embd),
      tostring(c.num_hidden_layers or c.n_layer), tostring(c.num_attention_heads or c.n_head)))
  end
end

local commands = setmetatable({list = function() list() end}, {__index = function(_, name)
  return function(args)
    table.insert(args, 1, name)
    return model(args)
  end
end})

common.main("model", usage, commands, ...)
