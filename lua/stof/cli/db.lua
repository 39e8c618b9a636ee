-- stof db: what a tuning database holds (DESIGN.md section 7; docs/SEARCH.md).
--
--   stof db show FILE [--workload W] [--device D]
--
-- Prints how many records the file holds and how many lines were skipped (with the last
-- reason), then one row per (workload, device): the records, the failed ones, and the best
-- record's median time, scheme and knob decisions. Errors print "stof db: <cause>" and exit
-- with status 1.
local stof = require("stof")

local USAGE = [[
usage: stof db show FILE [--workload W] [--device D]

Summarises a tuning database (JSON lines written by the search or by stof.db):
records, skipped lines, and per (workload, device) the best record of this stof version.

  --workload W   only this workload
  --device D     only this device
  -h, --help     this text

example: stof db show tune.jsonl --device cpu]]

local common = require("stof.cli.common")
local fail = common.fail

local function parse(args)
  local o = {}
  local k = 1
  while k <= #args do
    local a = args[k]
    local name, inline = a:match("^(%-%-[%w-]+)=(.*)$")
    name = name or a
    local function value()
      if inline then return inline end
      k = k + 1
      if args[k] == nil then fail("%s needs a value", name) end
      return args[k]
    end
    if name == "-h" or name == "--help" then o.help = true
    elseif name == "--workload" then o.workload = value()
    elseif name == "--device" then o.device = value()
    elseif a:sub(1, 1) == "-" then fail("unknown option '%s' (see stof db --help)", a)
    elseif not o.file then o.file = a
    else fail("unexpected argument '%s'", a) end
    k = k + 1
  end
  return o
end

local function knobs_text(knobs)
  local names = {}
  for n in pairs(knobs) do names[#names + 1] = n end
  table.sort(names)
  for i, n in ipairs(names) do names[i] = ("%s=%d"):format(n, knobs[n]) end
  return #names > 0 and table.concat(names, " ") or "-"
end

local function show(args)
  local o = parse(args)
  if o.help then return print(USAGE) end
  if not o.file then fail("missing FILE (see stof db --help)") end
  -- stof.db.open would create a missing file: say so instead; any other reason the file
  -- cannot be read (permission denied, a path through a file) is reported as it is
  local f, err, errno = io.open(o.file, "r")
  if not f and errno == 2 then fail("%s: no such file (stof db show does not create one)", o.file) end
  if not f then fail("cannot read %s", err) end
  f:close()
  local ok, db = pcall(stof.db.open, o.file)
  if not ok then fail("%s", tostring(db)) end
  local nskip, note = db:skipped()
  print(("%s: %d record%s, %d line%s skipped%s"):format(o.file, #db, #db == 1 and "" or "s", nskip,
    nskip == 1 and "" or "s", nskip > 0 and " (last: " .. note .. ")" or ""))
  local groups, order = {}, {}
  for i = 1, #db do
    local r = db:get(i)
    if (not o.workload or r.workload == o.workload) and (not o.device or r.device == o.device) then
      local key = r.workload .. "\0" .. r.device
      local g = groups[key]
      if not g then
        g = {workload = r.workload, device = r.device, n = 0, failed = 0}
        groups[key] = g
        order[#order + 1] = g
      end
      g.n = g.n + 1
      if r.status ~= "OK" then g.failed = g.failed + 1 end
    end
  end
  if #order == 0 then return print("no records" .. ((o.workload or o.device) and " match" or "")) end
  print(("%-28s %-28s %7s %6s %10s  %-8s %s"):format("workload", "device", "records", "failed", "best ms", "scheme", "knobs"))
  for _, g in ipairs(order) do
    local best = db:best(g.workload, g.device)
    print(("%-28s %-28s %7d %6d %10s  %-8s %s"):format(g.workload, g.device, g.n, g.failed,
      best and ("%.4f"):format(best.median_ms) or "-", best and (best.scheme ~= "" and best.scheme or "-") or "-",
      best and knobs_text(best.knobs) or "(no successful record of this stof version)"))
  end
  db:close()
end

common.main("db", USAGE, {show = show}, ...)
