-- stof.tune samples a user template's knobs once the template has run: a graph of one
-- segment (a layer norm) whose choices are "auto" and a template with a knob "jtile";
-- after round 1 of stage 2 the records must hold decisions "s0.jtile".

local stof = require("stof")
local te, nn = stof.te, stof.nn

local R, E = 16, 32
local x = te.placeholder({R, E}, "float32", "x")
local gamma, beta = te.placeholder({E}, "float32", "gamma"), te.placeholder({E}, "float32", "beta")
local feed = {}
for i, p in ipairs({x, gamma, beta}) do feed[p] = stof.rand(p.shape, "float32", 40 + i) end
local z = nn.layer_norm(x, gamma, beta, 1e-5, "ln")

stof.search.template("ln_split", {
  schedule = function(s, seg)
    local loops = s:get_loops(s:get_block("ln"))
    s:split(loops[#loops], {stof.INFER, s:knob("jtile", {2, 4, 8})})
  end})

local path = os.tmpname()
os.remove(path)
local plan, r = stof.tune(z, {feed = feed, target = "c", db = path, workload = "knobs", stage1 = false,
                              budget = 20, trials = 8, reps = 3, seed = 7})
plan:poison()
assert(stof.rel_l2(plan:run(), stof.eval(z, feed)) <= 1e-5)
local db <close> = stof.db.open(path)
local decisions = {}
for i = 1, #db do
  local rec = db:get(i)
  if rec.workload == r.workload and rec.knobs["s0@ln_split"] and rec.knobs["s0.jtile"] then
    decisions[rec.knobs["s0.jtile"]] = true
  end
end
db:close()
os.remove(path)
assert(next(decisions), ("%d trials, the template's knob jtile was never sampled"):format(r.trials))
-- a segment that runs the template shows its knob
local seg = plan:segments()[1]
if seg.detail:find("template ln_split", 1, true) then assert(seg.knobs and seg.knobs.jtile ~= nil, seg.detail) end
print("test_tune_knobs: ok")
