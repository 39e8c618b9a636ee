-- stof model NAME [--batch B] [--seq S] [--mask MASK] [...]: builds a zoo model, plans it
-- (exec/: the default fusion scheme, CUDA-graph replay), binds seeded random weights (or a
-- Hugging Face directory's), runs it and prints the time per forward, the split by kernel
-- kind and the memory. `stof model list` lists the named configs.
local stof = require("stof")
local common = require("stof.cli.common")
local models = require("stof.models")
local zoo = require("stof.cli.zoo")

local usage = [[
usage: stof model NAME [options]          run a zoo model and time it
       stof model list                    the named configs

NAME is a named config (bert-base, bert-large, gpt2, ...) or a directory holding
config.json + model.safetensors as Hugging Face saves them.
options:
]] .. zoo.options_usage .. [[

  --reps N           timed runs (20); the median is printed
  --no-graph         launch kernel by kernel instead of replaying a CUDA graph
  --exact-gelu       keep the erf GELU out of the GEMM epilogue (tanh form otherwise)
  --describe         print the plan's segments
  --split            time each segment and print the GEMM / attention / other split
  --check            compare the last hidden state with the reference interpreter (CPU;
                     slow for full-size models)
  -q                 no progress lines]]

local function parse(args)
  local o = zoo.defaults()
  o.reps = 20
  local function set(key, v) return function(x) x[key] = v end end
  return zoo.parse(args, "model", o, {["--reps"] = function(x, v, flag) x.reps = zoo.int(flag, v) end},
    {["--no-graph"] = set("graph", false), ["--exact-gelu"] = set("exact_gelu", true),
     ["--describe"] = set("describe", true), ["--split"] = set("split", true), ["--check"] = set("check", true),
     ["-q"] = set("verbose", false)})
end

local function mib(b) return b / 2^20 end

local function model(args)
  local o = parse(args)
  local r = zoo.prepare(o, {graph = o.graph, exact_gelu = o.exact_gelu})
  local plan = r.plan
  if o.describe then print(plan:describe()) end
  local out = r:run()
  local ms = r:time(o.reps, 3)
  local mem = r:memory()
  print(("%s on %s: %.3f ms per forward (median of %d%s)"):format(zoo.title(o, r), plan.target, ms, o.reps,
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
    -- each family's own names (T5: d_model, num_layers per stack, num_heads)
    local layers = c.num_hidden_layers or c.n_layer
    if not layers and c.num_layers then
      layers = ("%d + %d"):format(c.num_layers, c.num_decoder_layers or c.num_layers)
    end
    print(("%-12s %s, hidden %s, %s layers, %s heads"):format(n, c.model_type, tostring(c.hidden_size or c.n_embd or c.d_model),
      tostring(layers), tostring(c.num_attention_heads or c.n_head or c.num_heads)))
  end
end

local commands = setmetatable({list = function() list() end}, {__index = function(_, name)
  return function(args)
    table.insert(args, 1, name)
    return model(args)
  end
end})

common.main("model", usage, commands, ...)
