-- stof.tune on a zoo model by name or config (stof.models.run.tune): the model built with its
-- seeded weights, searched on the C backend, the tuned plan checked against the interpreter;
-- the third result is the prepared model; an option that neither building nor searching
-- takes is refused by name.
local stof = require("stof")
local models = require("stof.models")

local cfg = models.gpt2.config("gpt2", {n_embd = 64, n_layer = 1, n_head = 2, vocab_size = 100})
local path = os.tmpname()
os.remove(path)
local plan, res, r = stof.tune(cfg, {batch = 1, seq = 16, mask = "bigbird", dtype = "float32", target = "c",
                                     budget = 10, trials = 6, db = path})
assert(plan.target == "c" and r.plan == plan and r.seq == 16)
assert(res.trials >= 2 and res.trials <= 6 and res.best_ms <= res.default_ms)
assert(res.workload:find("^gpt2%-h64%-l1/1x16/bigbird"), res.workload)
plan:poison()
local e = stof.rel_l2(plan:run(), stof.eval(r.model.output, r:feed()))
assert(e < 1e-5, ("tuned zoo model: relative L2 error %g"):format(e))
-- again: the best record
local _, again = stof.tune(cfg, {batch = 1, seq = 16, mask = "bigbird", dtype = "float32", target = "c", db = path})
assert(again.from_db and again.trials == 0)
os.remove(path)
local ok, err = pcall(stof.tune, cfg, {seq = 16, bogus = 1})
assert(not ok and tostring(err):find('unknown option "bogus"', 1, true), tostring(err))
print("test_tune_model: ok")
