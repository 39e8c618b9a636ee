-- stof.db: the tuning database from Lua (records round-trip, the best record, a second
-- handle sees appends after refresh, malformed lines are skipped with a note, errors).
local stof = require("stof")

local function expect_error(kind, substr, f, ...)
  local args = table.pack(...)
  local ok, err = pcall(function() return f(table.unpack(args, 1, args.n)) end)
  assert(not ok, "expected an error containing " .. substr)
  err = tostring(err)
  assert(err:find(kind .. ":", 1, true), "wrong kind in: " .. err)
  assert(err:find(substr, 1, true), "'" .. substr .. "' not in: " .. err)
  assert(err:find("test_db.lua:%d+:"), "no file:line in: " .. err)
end

local path = os.tmpname()
os.remove(path)
local db <close> = stof.db.open(path)
assert(#db == 0 and tostring(db):find("0 records"))
local r1 = db:append{workload = "mm/64", device = "cpu", scheme = "001", knobs = {["C.tile_i"] = 2, ["C.tile_j"] = 1},
                     times_ms = {3.0, 1.0, 2.0}}
assert(r1.index == 1 and r1.median_ms == 2.0 and r1.version == stof.version and r1.status == "OK")
db:append{workload = "mm/64", device = "cpu", scheme = "011", knobs = {["C.tile_i"] = 0}, times_ms = {1.5}}
db:append{workload = "mm/64", device = "cpu", scheme = "111", status = "ERR_COMPILE", message = "cc: error"}
db:append{workload = "mm/64", device = "gpu", times_ms = {0.25}}
assert(#db == 4)
local best = db:best("mm/64", "cpu")
assert(best.index == 2 and best.scheme == "011" and best.knobs["C.tile_i"] == 0 and best.median_ms == 1.5)
assert(db:best("mm/64", "gpu").times_ms[1] == 0.25)
local none, why = db:best("mm/128", "cpu")
assert(none == nil and why:find("no successful record of mm/128 on cpu", 1, true), why)
local failed = db:get(3)
assert(failed.status == "ERR_COMPILE" and failed.message == "cc: error" and #failed.times_ms == 0)

-- a second handle (another process's view) and refresh
local other <close> = stof.db.open(path)
assert(#other == 4)
db:append{workload = "mm/64", device = "cpu", scheme = "000", times_ms = {0.5, 0.75}}
assert(#other == 4 and other:refresh() == 1 and #other == 5)
assert(other:best("mm/64", "cpu").scheme == "000" and other:best("mm/64", "cpu").median_ms == 0.625)

-- a hand-broken line is skipped, with its line number
local f = assert(io.open(path, "a"))
f:write("{this is not json}\n")
f:close()
local third <close> = stof.db.open(path)
local n, note = third:skipped()
assert(#third == 5 and n == 1 and note:find(":6: not JSON", 1, true), note)

-- errors
expect_error("TypeError", "field workload must be a string", db.append, db, {device = "cpu", times_ms = {1}})
expect_error("ValueError", 'unknown status "FAST"', db.append, db,
             {workload = "w", device = "d", status = "FAST", times_ms = {1}})
expect_error("ValueError", "a successful record needs times", db.append, db, {workload = "w", device = "d"})
expect_error("ValueError", "time -1 ms", db.append, db, {workload = "w", device = "d", times_ms = {-1}})
expect_error("TypeError", "knobs maps names to integer decisions", db.append, db,
             {workload = "w", device = "d", times_ms = {1}, knobs = {tile = 1.5}})
expect_error("TypeError", "times_ms[2] is string", db.append, db, {workload = "w", device = "d", times_ms = {1, "x"}})
expect_error("IndexError", "index 9 out of 1..5", db.get, db, 9)
expect_error("IOError", "/nonexistent-dir-of-stof/t.jsonl: No such file or directory", stof.db.open,
             "/nonexistent-dir-of-stof/t.jsonl")
-- a misspelt field is refused (time_ms would have stored a record with no times)
expect_error("ValueError", 'unknown record field "time_ms"', db.append, db, {workload = "w", device = "d", time_ms = {1}})
db:close()
expect_error("ValueError", "the database is closed", db.best, db, "w", "d")
assert(tostring(db) == "stof.Db (closed)")
os.remove(path)
print("db tests passed")
