-- Two processes tuning the same graph into one database at once lose no record: this
-- script starts itself twice as a child (`stof run test_tune_procs.lua child DB SEED`),
-- each child searches with force = true (so neither resumes from the other's records) and
-- prints its trial count (both start once both are ready); afterwards the database holds exactly the sum of both counts, and
-- no line was skipped (no torn or interleaved line).
local stof = require("stof")
local te, nn = stof.te, stof.nn

local function graph()
  local R, E, F = 64, 128, 256 -- a run of a millisecond or so: the children's searches overlap
  local x = te.placeholder({R, E}, "float32", "x")
  local w1, b1 = te.placeholder({F, E}, "float32", "w1"), te.placeholder({F}, "float32", "b1")
  local w2, b2 = te.placeholder({E, F}, "float32", "w2"), te.placeholder({E}, "float32", "b2")
  local h = nn.gelu_tanh(nn.linear(x, w1, b1, {name = "fc1", transposed = true}), "fc1.gelu")
  local y = nn.add(nn.linear(h, w2, b2, {name = "fc2", transposed = true}), x, "res")
  local feed = {}
  for i, p in ipairs({x, w1, b1, w2, b2}) do feed[p] = stof.rand(p.shape, "float32", 10 + i) end
  return y, feed
end

local mode, db_path, seed = ...
if mode == "child" then
  local y, feed = graph()
  -- start together: each says it is ready, then waits (at most 20 s) for the other
  io.open(db_path .. ".ready" .. seed, "w"):close()
  local t0 = os.time()
  repeat
    local f = io.open(db_path .. ".ready" .. (3 - tonumber(seed)), "r")
    if f then f:close() end
  until f or os.time() - t0 > 20
  local _, r = stof.tune(y, {feed = feed, target = "c", db = db_path, workload = "procs", force = true,
                             budget = 15, trials = 12, reps = 20, seed = tonumber(seed), threads = 1})
  print(("child %s: trials %d workload %s"):format(seed, r.trials, r.workload))
  return
end

-- the executable running this script: the most negative index of arg
local exe, i = nil, -1
while arg[i] do exe, i = arg[i], i - 1 end
assert(exe, "cannot tell which executable runs this script")
local script = debug.getinfo(1, "S").source:match("^@(.*)$")
local path = os.tmpname()
os.remove(path)
local function q(s) return "'" .. s:gsub("'", "'\\''") .. "'" end
local children = {}
for k = 1, 2 do
  children[k] = assert(io.popen(("%s run %s child %s %d 2>&1"):format(q(exe), q(script), q(path), k)))
end
local total, workload = 0, nil
for k = 1, 2 do
  local out = children[k]:read("a")
  local ok, how, code = children[k]:close()
  assert(ok, ("child %d: %s %s\n%s"):format(k, tostring(how), tostring(code), out))
  local n, w = out:match("child %d+: trials (%d+) workload (%S+)")
  assert(n, "child " .. k .. " said: " .. out)
  assert(workload == nil or workload == w, "the children tuned different workloads")
  workload = w
  total = total + tonumber(n)
end
local db <close> = stof.db.open(path)
assert(db:skipped() == 0, select(2, db:skipped()))
local n = 0
for k = 1, #db do n = n + (db:get(k).workload == workload and 1 or 0) end
assert(n == #db and n == total, ("%d records (%d of the workload), %d trials"):format(#db, n, total))
db:close()
os.remove(path)
os.remove(path .. ".ready1")
os.remove(path .. ".ready2")
print(("test_tune_procs: ok (%d records)"):format(total))
