-- GPU: the two-stage search on CUDA plans (search/tune.c through stof.tune): small BERT
-- (BigBird) and LLaMA models tuned for a few seconds into a fresh database; the tuned plan
-- is run with its memory poisoned and checked against the reference interpreter; every
-- measured candidate is a record; a second search of the same workload rebuilds the best
-- record in under a second without measuring.
--   build-gpu/stof run tests/gpu/tune.lua [BUDGET_SECONDS]
local stof = require("stof")
local models = require("stof.models")
local run = require("stof.models.run")

if not stof.cuda_mem_info() then
  print("no GPU: skipped")
  return
end
local budget = tonumber(arg[1]) or 8
local dir = os.tmpname()
os.remove(dir)
local path = dir .. ".jsonl"

local function clock()
  local f = io.popen("date +%s.%N")
  local t = tonumber(f:read("l"))
  f:close()
  return t
end

local function tune(name, cfg, mask, B, S)
  local r = run.prepare(cfg, {batch = B, seq = S, mask = mask, dtype = "float16", target = "cuda", seed = 5})
  local outs = {r.model.output}
  local feed = r.model:feed(r.weights, r.inputs)
  local db <close> = stof.db.open(path)
  local before = #db
  local plan, res = stof.tune(outs, {feed = feed, target = "cuda", budget = budget, db = db, workload = name,
                                     verbose = true})
  print(("%-6s %-28s B %d S %3d: default %.4f ms, stage 1 %.4f ms, tuned %.4f ms (%.2fx), %d trials (%d failed, %d rejected), %.1f s"):format(
    name, tostring(mask), B, S, res.default_ms, res.stage1_ms, res.best_ms, res.default_ms / res.best_ms, res.trials,
    res.failed, res.rejected, res.seconds))
  assert(not res.from_db and res.trials >= 2)
  assert(res.best_ms <= res.default_ms)
  db:refresh()
  assert(#db - before == res.trials, ("%d records for %d trials"):format(#db - before, res.trials))
  plan:poison()
  local got = plan:run()
  local want = stof.eval(r.model.output, feed)
  local e = stof.rel_l2(got:astype("float32"), want:astype("float32"))
  print(("       tuned plan vs the interpreter: relative L2 %.3g"):format(e))
  assert(e < 1e-2, name .. ": the tuned plan disagrees with the interpreter")
  print(plan:describe())
  -- again: the best record, nothing measured
  local t0 = clock()
  local plan2, res2 = stof.tune(outs, {feed = feed, target = "cuda", budget = budget, db = db, workload = name})
  local took = clock() - t0
  print(("       from the database: %.3f s, %.4f ms recorded"):format(took, res2.best_ms))
  assert(res2.from_db and res2.trials == 0 and took < 1.0)
  plan2:poison()
  local e2 = stof.rel_l2(plan2:run():astype("float32"), want:astype("float32"))
  assert(e2 < 1e-2, name .. ": the plan rebuilt from the database disagrees")
end

local bert = models.bert.config("bert-base", {hidden_size = 256, num_hidden_layers = 2, num_attention_heads = 4,
                                              intermediate_size = 1024, vocab_size = 100})
local llama = models.llama.config("llama", {hidden_size = 256, num_hidden_layers = 2, num_attention_heads = 4,
                                            num_key_value_heads = 2, intermediate_size = 512, vocab_size = 100})
tune("bert", bert, stof.mask.bigbird(32, 32, 32, 0.1, 0), 2, 200)
tune("llama", llama, stof.mask.dense(), 1, 128)
os.remove(path)
print("ok")
