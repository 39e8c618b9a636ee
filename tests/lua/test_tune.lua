-- stof.tune and stof.search.template on the C backend, with real measurements: a small MLP
-- block (GEMM + bias + tanh GELU, GEMM + bias + residual, layer norm; float32). The tuned
-- plan matches the interpreter; every measured candidate is a record; a second search of
-- the same workload loads its best record without measuring; bad options are refused
-- naming the key; a user template is explored (its records name "@NAME"), its knobs are
-- sampled, and it wins where it is faster; a template whose schedule or matches raises is
-- recorded as failed and the search goes on; one that computes a wrong value is rejected
-- by the check; the schedule lent to a template is closed once it returns.
package.path = debug.getinfo(1, "S").source:match("^@(.*/)") .. "?.lua;" .. package.path
local U = require("util")
local stof = require("stof")
local te, nn = stof.te, stof.nn

-- x [R, E] -> layer_norm(gelu(x w1^T + b1) w2^T + b2 + x); weights [out, in] as torch's.
local R, E, F = 16, 32, 64
local x = te.placeholder({R, E}, "float32", "x")
local w1, b1 = te.placeholder({F, E}, "float32", "w1"), te.placeholder({F}, "float32", "b1")
local w2, b2 = te.placeholder({E, F}, "float32", "w2"), te.placeholder({E}, "float32", "b2")
local gamma, beta = te.placeholder({E}, "float32", "gamma"), te.placeholder({E}, "float32", "beta")
local h = nn.gelu_tanh(nn.linear(x, w1, b1, {name = "fc1", transposed = true}), "fc1.gelu")
local y = nn.layer_norm(nn.add(nn.linear(h, w2, b2, {name = "fc2", transposed = true}), x, "res"), gamma, beta, 1e-5, "ln")
local feed = {}
for i, p in ipairs({x, w1, b1, w2, b2, gamma, beta}) do feed[p] = stof.rand(p.shape, "float32", 40 + i) end
local want = stof.eval(y, feed)

local function check(plan, what)
  plan:poison()
  local e = stof.rel_l2(plan:run(), want)
  if not (e <= 1e-5) then error(("%s: relative L2 error %g against the interpreter"):format(what, e), 2) end
end

-- The records of workload w: the list, and those whose knobs name template tname ("s3@NAME").
local function records(path, w, tname)
  local db <close> = stof.db.open(path)
  assert(db:skipped() == 0, select(2, db:skipped()))
  local all, using = {}, {}
  for i = 1, #db do
    local r = db:get(i)
    if r.workload == w then
      all[#all + 1] = r
      for k in pairs(r.knobs) do
        if tname and k:match("^s%d+@(.*)$") == tname then using[#using + 1] = r; break end
      end
    end
  end
  return all, using
end

local function tmp()
  local p = os.tmpname()
  os.remove(p) -- the database creates it
  return p
end

local base = {feed = feed, target = "c", reps = 3, warmup = 1, seed = 7,
              verbose = os.getenv("STOF_TEST_VERBOSE") ~= nil} -- the progress bar, for a reader
local function opts(extra)
  local o = {}
  for k, v in pairs(base) do o[k] = v end
  for k, v in pairs(extra) do o[k] = v end
  return o
end

-- ---------------------------------------------------------------- the registry
assert(#stof.search.templates() == 0)
local function tags_of(seg, tag)
  for i, t in ipairs(seg.tags) do if t == tag then return seg.ops[i] end end
end
local seen_segs = {}
-- "split_j": the GEMM's output axis split by a knob (a template with a tunable parameter)
assert(stof.search.template("split_j", {
  matches = function(seg)
    seen_segs[#seen_segs + 1] = seg
    return tags_of(seg, "gemm") ~= nil
  end,
  schedule = function(s, seg)
    local gemm = s:get_block(tags_of(seg, "gemm"))
    local loops = s:get_loops(gemm)
    s:split(loops[2], {stof.INFER, s:knob("jtile", {4, 8, 16})})
  end}) == false)
assert(table.concat(stof.search.templates(), ",") == "split_j")
-- re-registering replaces (true), nil removes
local function noop() end
assert(stof.search.template("tmp", {schedule = noop}) == false)
assert(stof.search.template("tmp", {schedule = noop, matches = function() return false end}) == true)
assert(table.concat(stof.search.templates(), ",") == "split_j,tmp")
assert(stof.search.template("tmp", nil) == true and stof.search.template("tmp", nil) == false)
assert(table.concat(stof.search.templates(), ",") == "split_j")
-- bad registrations
U.raises(function() stof.search.template("a.b", {schedule = noop}) end, "ValueError: stof.search.template: template name \"a.b\"")
U.raises(function() stof.search.template("s@1", {schedule = noop}) end, "no '@', '.'")
U.raises(function() stof.search.template("auto", {schedule = noop}) end, "\"auto\" is taken by a built-in template")
U.raises(function() stof.search.template("tensorcore", {schedule = noop}) end, "\"tensorcore\" is taken by a built-in template")
U.raises(function() stof.search.template("tensorcore_norm", {schedule = noop}) end, "\"tensorcore_norm\" is taken by a built-in template")
U.raises(function() stof.search.template("tensorcore_ffn", {schedule = noop}) end, "\"tensorcore_ffn\" is taken by a built-in template")
U.raises(function() stof.search.template("x", {}) end, "TypeError: stof.search.template: template x: schedule must be a function")
U.raises(function() stof.search.template("x", {schedule = noop, matches = 3}) end, "matches must be a function")
U.raises(function() stof.search.template("x", {schedule = noop, sched = noop}) end,
  "ValueError: stof.search.template: unknown template field \"sched\" (known: matches, schedule)")

-- ---------------------------------------------------------------- options
U.raises(function() stof.tune(y, opts({bogus = 1})) end, "ValueError: stof.tune: unknown option \"bogus\" (known: feed,")
U.raises(function() stof.tune(y, opts({budegt = 3})) end, "unknown option \"budegt\"")
U.raises(function() stof.tune(y, {target = "c"}) end, "TypeError: stof.tune: option feed must be a table")
U.raises(function() stof.tune(y) end, "TypeError: stof.tune: bad argument #2 (options table (feed is required) expected")
U.raises(function() stof.tune(y, opts({target = "tpu"})) end, "ValueError: stof.tune: option target must be \"c\" or \"cuda\"")
U.raises(function() stof.tune(y, opts({budget = -1})) end, "ValueError: stof.tune: option budget")
U.raises(function() stof.tune(y, opts({budget = 6e21})) end,
         "ValueError: stof.tune: option budget = 6e+21 seconds: it must be positive and at most 1e7")
U.raises(function() stof.tune(y, opts({trials = 1.5})) end, "TypeError: stof.tune: option trials must be an integer, got 1.5")
U.raises(function() stof.tune(y, opts({reps = 0 / 0})) end, "TypeError: stof.tune: option reps must be an integer, got ", "nan")
U.raises(function() stof.tune(y, opts({seed = 0.5})) end, "TypeError: stof.tune: option seed must be an integer, got 0.5")
U.raises(function() stof.tune(y, opts({seed = "7"})) end, "TypeError: stof.tune: option seed must be an integer, got string")
U.raises(function() stof.tune(y, opts({stage1 = "no"})) end, "TypeError: stof.tune: option stage1 must be a boolean")
U.raises(function() stof.tune(y, opts({db = 3})) end, "TypeError: stof.tune: option db must be a stof.Db or a path")
U.raises(function() stof.tune(y, opts({templates = {"nope"}})) end,
  "ValueError: stof.tune: templates[1]: no template named \"nope\" (registered: split_j)")
U.raises(function() stof.tune(y, opts({feed = {[x] = feed[x]}})) end, "ValueError: tune: no input given for placeholder")
do
  local wrong = {}
  for k, v in pairs(feed) do wrong[k] = v end
  wrong[w1] = feed[x]
  U.raises(function() stof.tune(y, opts({feed = wrong})) end, "ShapeError")
end

-- ---------------------------------------------------------------- search, records, resume
local path = tmp()
local plan, r = stof.tune(y, opts({db = path, workload = "mlp", budget = 30, trials = 10}))
assert(getmetatable(plan).__name == "stof.Plan" and plan.target == "c", tostring(plan))
check(plan, "tuned")
assert(r.trials >= 1 and r.trials <= 10 and r.from_db == false, r.trials)
assert(r.default_ms > 0 and r.best_ms > 0 and r.best_ms <= r.default_ms and r.stage1_ms >= r.best_ms)
assert(r.seconds > 0 and r.workload:match("^mlp/c/%x+$"), r.workload)
-- the reference and the default plan: part of the seconds, before any other candidate
assert(r.setup_s > 0 and r.setup_s <= r.seconds, ("setup %g s of %g"):format(r.setup_s, r.seconds))
local all, using = records(path, r.workload, "split_j")
assert(#all == r.trials, ("%d records for %d trials"):format(#all, r.trials))
assert(#using > 0, "the user's template was never explored")
local failed = 0
for _, rec in ipairs(all) do failed = failed + (rec.status == "OK" and 0 or 1) end
assert(failed == r.failed + r.rejected, failed)
-- the template saw segments as tables
local s1 = seen_segs[1]
assert(type(s1.index) == "number" and s1.target == "c" and #s1.ops == #s1.tags and type(s1.name) == "string")
-- resume: the best record rebuilt, nothing measured; by handle or by path
local db <close> = stof.db.open(path)
local t0 = os.time()
local plan2, r2 = stof.tune(y, opts({db = db, workload = "mlp", budget = 30}))
assert(r2.from_db == true and r2.trials == 0 and r2.seconds < 1, r2.seconds)
assert(r2.setup_s == 0, "nothing measured: no set-up")
assert(os.time() - t0 <= 2)
assert(math.abs(r2.best_ms - r.best_ms) <= 1e-9 * r.best_ms, r2.best_ms .. " vs " .. r.best_ms)
assert(plan2.scheme == plan.scheme and plan2:describe() == plan:describe())
check(plan2, "resumed")
assert(#db == r.trials) -- nothing appended
local _, r3 = stof.tune(y, opts({db = path, workload = "mlp"}))
assert(r3.from_db and r3.trials == 0)

-- ---------------------------------------------------------------- failing templates
-- schedule raises: every candidate that runs it is recorded as failed, the search goes on
stof.search.template("boom", {
  matches = function(seg) return seg.name:find("layer_norm", 1, true) ~= nil end,
  schedule = function(s, seg) error("boom in " .. seg.name) end})
-- matches raises (on the layer norm only): the template then fails on that segment
stof.search.template("badmatch", {
  matches = function(seg)
    if seg.name:find("layer_norm", 1, true) then error("cannot decide") end
    return false
  end,
  schedule = function() error("never called") end})
-- keeps the lent schedule and tries what a lent schedule refuses
local kept, kept_loop, refusals = nil, nil, {}
stof.search.template("keeper", {
  matches = function(seg) return seg.name:find("layer_norm", 1, true) ~= nil end,
  schedule = function(s, seg)
    kept = s
    kept_loop = s:get_loops(s:get_block(seg.ops[#seg.ops]))[1]
    assert(kept_loop.extent == R)
    for _, f in ipairs({function() s:clone() end, function() s:with_decisions({}) end,
                        function() stof.build(s, {}) end, function() stof.tune(y, opts({})) end}) do
      local ok, err = pcall(f)
      refusals[#refusals + 1] = not ok and tostring(err) or "accepted"
    end
    s:auto(seg.target)
  end})
for _, case in ipairs({{"boom", "ERR_SCHEDULE", "template boom: schedule: "},
                       {"badmatch", "ERR_SCHEDULE", "template badmatch: matches: "},
                       {"keeper", nil}}) do
  local name, status, msg = case[1], case[2], case[3]
  local p = tmp()
  local plan3, r4 = stof.tune(y, opts({db = p, workload = "fail-" .. name, templates = {name}, stage1 = false,
                                       budget = 20, trials = 6}))
  check(plan3, name)
  assert(not plan3:describe():find("template " .. name, 1, true) or not status, plan3:describe())
  local recs, used = records(p, r4.workload, name)
  assert(#recs == r4.trials and #used >= 1, name .. ": never explored")
  if status then
    assert(r4.failed >= 1)
    for _, rec in ipairs(used) do
      assert(rec.status == status, rec.status)
      assert(rec.message:find(msg, 1, true), rec.message)
      assert(rec.message:find("test_tune.lua:%d+:"), rec.message) -- the script's position
    end
  end
  os.remove(p)
end
-- the lent schedule: refused clone / with_decisions / build, and closed after the call
assert(#refusals >= 4)
assert(refusals[1]:find("ValueError: clone: a template's schedule cannot be cloned", 1, true), refusals[1])
assert(refusals[2]:find("ValueError: with_decisions: a template's schedule cannot be copied", 1, true), refusals[2])
assert(refusals[3]:find("ValueError: stof.build: a template's schedule cannot be built here", 1, true), refusals[3])
assert(refusals[4]:find("ValueError: stof.tune: called from a template while a search runs", 1, true), refusals[4])
assert(getmetatable(kept).__name == "stof.Schedule")
U.raises(function() kept:get_block("ln") end, "ValueError: get_block: the schedule is closed (a template's schedule")
U.raises_any(function() return kept_loop.extent end, "ValueError: the schedule of this handle is closed")
assert(tostring(kept) == "stof.Schedule (closed)" and pcall(tostring, kept_loop) == false)
kept, kept_loop = nil, nil
collectgarbage()

-- a template computing a wrong value (fault injection): rejected by the check, never chosen
stof.search.template("wrong", {schedule = function(s, seg) s:auto(seg.target) end})
local pw = tmp()
local plan4, r5 = stof.tune(y, opts({db = pw, workload = "wrong", templates = {"wrong"}, stage1 = false,
                                     inject_wrong = "wrong", budget = 20, trials = 6}))
check(plan4, "with a wrong template")
assert(not plan4:describe():find("template wrong", 1, true), plan4:describe())
local recs, used = records(pw, r5.workload, "wrong")
assert(r5.rejected >= 1 and #used >= 1, r5.rejected)
for _, rec in ipairs(used) do
  assert(rec.status == "ERR_CHECK" and rec.message:find("relative L2 error", 1, true), rec.status)
end
os.remove(pw)

-- a template whose candidates are far slower than the best, by fault injection: timed 10x
-- (inject_slow: timed twice only) or hanging (inject_hang: their first run abandoned at once,
-- recorded with a lower bound and why; the trace prints a line per candidate, on stderr, not
-- checked here): each counted as cut (cut_slow, abandoned), recorded, never chosen
for _, hang in ipairs({false, true}) do
  local what = hang and "hang" or "slow"
  local pc = tmp()
  local o = opts({db = pc, workload = what, templates = {"wrong"}, stage1 = false, budget = 20, trials = 6,
                  trace = hang})
  o[hang and "inject_hang" or "inject_slow"] = "wrong"
  local plan_c, rc = stof.tune(y, o)
  check(plan_c, "with a " .. what .. " template")
  assert(not plan_c:describe():find("template wrong", 1, true), plan_c:describe())
  local _, used_c = records(pc, rc.workload, "wrong")
  assert(#used_c >= 1 and rc.cut_slow == #used_c and rc.abandoned == (hang and #used_c or 0),
         ("%s: %d cut, %d abandoned, %d records"):format(what, rc.cut_slow, rc.abandoned, #used_c))
  for _, rec in ipairs(used_c) do
    assert(rec.status == "OK" and rec.median_ms > 3 * rc.best_ms, rec.status)
    if hang then
      assert(rec.median_ms >= 6 * rc.best_ms * 0.999 and rec.message:find("abandoned", 1, true), rec.message)
    end
  end
  os.remove(pc)
end

-- a template that works once and then raises (a user's Lua function need not do the same
-- twice): when its candidate was the best, stage 2's rebuild of the best scheme fails; the
-- search keeps the best plan and skips stage 2 (a note on stderr) instead of failing (found
-- by trying the API as a new user). On this small MLP without its norm, stage 1 fuses it
-- into one segment that the template leaves unscheduled, which on the C backend usually
-- wins (timing decides: the assertion holds either way, the path is taken when it wins).
do
  local xs = te.placeholder({16, 32}, "float32", "xs")
  local v1, c1 = te.placeholder({64, 32}, "float32", "v1"), te.placeholder({64}, "float32", "c1")
  local v2, c2 = te.placeholder({32, 64}, "float32", "v2"), te.placeholder({32}, "float32", "c2")
  local hs = nn.gelu_tanh(nn.linear(xs, v1, c1, {name = "g1", transposed = true}), "g1.gelu")
  local ys = nn.add(nn.linear(hs, v2, c2, {name = "g2", transposed = true}), xs, "g.res")
  local fs = {}
  for i, p in ipairs({xs, v1, c1, v2, c2}) do fs[p] = stof.rand(p.shape, "float32", 60 + i) end
  local want_s = stof.eval(ys, fs)
  local calls = 0
  stof.search.template("flaky", {schedule = function()
    calls = calls + 1
    if calls > 1 then error("flaky: call " .. calls) end
  end})
  for seed = 1, 3 do
    calls = 0
    local ok, plan_f = pcall(stof.tune, ys, {feed = fs, target = "c", templates = {"flaky"}, budget = 5, trials = 8,
                                             reps = 3, warmup = 1, seed = seed})
    assert(ok, plan_f)
    plan_f:poison()
    local e = stof.rel_l2(plan_f:run(), want_s)
    assert(e <= 1e-5, ("with a flaky template: relative L2 error %g"):format(e))
  end
end

-- the search without a database, stage 1 only; the plan keeps its feed alive (the CPU
-- backend borrows the tensors it is bound to)
local plan5, r6
do
  local own = {}
  for i, p in ipairs({x, w1, b1, w2, b2, gamma, beta}) do own[p] = stof.rand(p.shape, "float32", 40 + i) end
  plan5, r6 = stof.tune(y, {feed = own, target = "c", templates = {}, stage2 = false, budget = 10, trials = 3, reps = 2})
end
collectgarbage()
collectgarbage()
check(plan5, "stage 1 only, after a collection")
assert(r6.trials >= 1 and r6.trials <= 3 and r6.from_db == false)

os.remove(path)
print("test_tune: ok")
