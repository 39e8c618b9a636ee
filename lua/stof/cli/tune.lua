-- stof tune NAME [--batch B] [--seq S] [--mask MASK] [...]: builds a zoo model as `stof
-- model` does (seeded random weights, or a Hugging Face directory's), searches its fastest
-- correct plan with stof.tune (fusion schemes, then templates and knobs per segment, every
-- candidate measured and checked; docs/SEARCH.md) with a progress bar on stderr, and
-- prints the default and tuned times and the speed-up; --explain adds the winning plan's
-- segments and its fusion scheme. With --db, every candidate is a record and a later run
-- of the same workload resumes from the best one without measuring.
local stof = require("stof")
local common = require("stof.cli.common")
local zoo = require("stof.cli.zoo")

local usage = [[
usage: stof tune NAME [options]           search the fastest plan of a zoo model

NAME is a named config (bert-base, gpt2, ...; stof model list) or a directory holding
config.json + model.safetensors as Hugging Face saves them.
options:
]] .. zoo.options_usage .. [[

  --db FILE          the tuning database: every candidate is recorded there, and a later
                     run of the same workload rebuilds its best record without searching
                     (without --db nothing is kept)
  --budget T         wall-clock budget: SECONDS, or 30s, 5m (30s)
  --trials N         measured candidates at most (no limit but the budget)
  --reps N           timed runs per candidate (10); the median counts
  --force            search even when the database holds a best record
  --explain          print the winning plan's segments (kind, template, knobs) and its
                     fusion scheme
  --trace            one line per candidate on stderr: seconds building (compiling
                     included), timing and checking it, its result and the templates it
                     ran off the default (where the budget goes)
  -q                 no progress bar

example: stof tune gpt2 --layers 1 --seq 64 --target c --db tune.jsonl --budget 60s]]

-- "30s", "5m", "90" -> seconds
local function seconds(flag, v)
  local n, unit = v:match("^%s*(%d+%.?%d*)%s*([sm]?)%s*$")
  n = tonumber(n)
  if not n or n <= 0 then common.fail("%s: a positive number of seconds expected (30, 30s, 5m), got '%s'", flag, v) end
  return unit == "m" and n * 60 or n
end

local function parse(args)
  local o = zoo.defaults()
  local function set(key, v) return function(x) x[key] = v end end
  return zoo.parse(args, "tune", o, {
    ["--db"] = function(x, v) x.db = v end,
    ["--budget"] = function(x, v, flag) x.budget = seconds(flag, v) end,
    ["--trials"] = function(x, v, flag) x.trials = zoo.int(flag, v) end,
    ["--reps"] = function(x, v, flag) x.reps = zoo.int(flag, v) end,
  }, {["--force"] = set("force", true), ["--explain"] = set("explain", true), ["--trace"] = set("trace", true), ["-q"] = set("verbose", false)})
end

local function tune(args)
  local o = parse(args)
  if o.target ~= nil and o.target ~= "c" and o.target ~= "cuda" then
    common.fail("--target: c or cuda, got '%s'", o.target)
  end
  local r = zoo.prepare(o, {plan = false})
  local workload = r:workload():gsub("/[^/]*$", "") -- the target: the search's key adds it
  local ok, plan, res = pcall(stof.tune, {r.model.output}, {
    feed = r:feed(), target = o.target, budget = o.budget, trials = o.trials, reps = o.reps, db = o.db,
    workload = workload, force = o.force, verbose = o.verbose, trace = o.trace})
  if not ok then
    local msg = common.user_error(plan)
    if msg then common.fail("%s", msg) end
    error(plan, 0)
  end
  r.plan = plan
  local default_ms = res.default_ms
  if res.from_db then -- nothing was measured: the default plan for the comparison
    local def = stof.plan({r.model.output}, {target = plan.target})
    def:bind(r:feed())
    default_ms = def:time(o.reps or 10, 2)
  end
  print(("%s on %s: default %.3f ms, tuned %.3f ms (%.2fx)"):format(zoo.title(o, r), plan.target, default_ms,
    res.best_ms, res.best_ms > 0 and default_ms / res.best_ms or 0))
  if res.from_db then
    print(("  from the best record of %s (workload %s), rebuilt in %.2f s; --force searches again"):format(o.db,
      res.workload, res.seconds))
  else
    print(("  %d candidates measured (%d failed%s, %d rejected by the check%s) in %.1f s%s; workload %s"):format(
      res.trials, res.failed, res.pruned > 0 and (", %d of them pruned before compiling"):format(res.pruned) or "",
      res.rejected, (res.cut_slow or 0) > 0 and (", %d cut as over 3x the best%s"):format(res.cut_slow,
        (res.abandoned or 0) > 0 and (" (%d of them abandoned during their first run)"):format(res.abandoned) or "") or "",
      res.seconds, o.db and (", recorded in " .. o.db) or "", res.workload))
    print(("  ablation: default %.3f ms, after stage 1 (fusion) %.3f ms, after stage 2 (templates, knobs) %.3f ms"):format(
      res.default_ms, res.stage1_ms, res.best_ms))
    if res.setup_s >= (o.budget or 30) * 0.9 then
      print(("  note: the reference and the default plan alone took %.1f s of the %g s budget, which left no"
        .. " time to search: give --budget more than that"):format(res.setup_s, o.budget or 30))
    end
  end
  if o.explain then
    print(plan:describe())
    print("fusion scheme (segment of each op, in op order): " .. plan.scheme)
    -- each segment's time, kernel by kernel, and what implements it
    local segs = plan:time_segments(o.reps or 10)
    local total = 0
    print("segment times (kernel by kernel, median):")
    for i, g in ipairs(segs) do
      total = total + g.ms
      local knobs = {}
      for k, v in pairs(g.knobs or {}) do knobs[#knobs + 1] = ("%s=%d"):format(k, v) end
      table.sort(knobs)
      local how = g.detail:match("template [%w_%-]+") or (g.kind == "gemm" and "vendor GEMM") or g.kind
      print(("  %4d  %8.4f ms  %-9s %-28s %-22s %s%s"):format(i - 1, g.ms, g.kind, g.template, how,
        table.concat(knobs, " "), g.shared_with > 0 and (" (as segment %d)"):format(g.shared_with - 1) or ""))
    end
    print(("  total %.4f ms"):format(total))
    -- the schedule of each distinct generated segment, as a Lua script that rebuilds it
    for i, g in ipairs(segs) do
      if g.trace and g.shared_with == 0 then
        print(("-- segment %d (%s): its schedule"):format(i - 1, g.template))
        print(g.trace)
      end
    end
  end
end

common.main("tune", usage, setmetatable({}, {__index = function(_, name)
  return function(args)
    table.insert(args, 1, name)
    return tune(args)
  end
end}), ...)
