-- sample_perfect_tile and sample_compute_location through Lua: knob handles whose values
-- multiply to the extent, split by them as by constants (numbers against stof.eval), the
-- trace round trip (Lua text and JSON), changed decisions, and errors with file:line.
package.path = arg[0]:match("^(.*/)") .. "?.lua;" .. package.path
local u = require("util")
local stof = require("stof")
local te = stof.te

local function chain(n)
  te.reset()
  local A = te.placeholder({n, 8}, "float32", "A")
  local B = te.compute({n, 8}, function(i, j) return A[{i, j}] * 2 end, "B")
  local C = te.compute({n, 8}, function(i, j) return B[{i, j}] + 1 end, "C")
  return {inputs = {A}, outputs = {C}, A = A, B = B, C = C}
end

local function check_numbers(g, s)
  local a = stof.rand(g.A.shape, "float32", 3)
  local c = stof.zeros(g.C.shape, "float32"):fill(0 / 0)
  stof.build(s, {g.A, g.C}, {target = "c"})(a, c)
  local want = stof.eval({g.C}, {[g.A] = a})
  assert(stof.rel_l2(c, want) < 1e-5)
end

local function round_trip(g, s)
  local fresh = stof.schedule(g.outputs)
  assert(load(s:trace(), "=trace"))()(fresh, stof)
  assert(fresh:print_loop_nest() == s:print_loop_nest(), fresh:print_loop_nest())
  local again = stof.schedule(g.outputs):replay(s:trace_json())
  assert(again:print_loop_nest() == s:print_loop_nest())
end

-- perfect tilings: product, bound, names, candidates
local g = chain(24)
for n = 1, 4 do
  local s = stof.schedule(g.outputs)
  local i = s:get_loops(s:get_block("C"))[1]
  local ks = {s:sample_perfect_tile(i, n, n == 1 and 0 or 4)}
  assert(#ks == n)
  local prod = 1
  for k, kn in ipairs(ks) do
    assert(kn.name == ("i.tile%d"):format(k - 1))
    assert(#kn.candidates == 8 and kn.candidates[8] == 24) -- 1 2 3 4 6 8 12 24
    prod = prod * kn.value
  end
  assert(prod == 24)
  if n > 1 then
    assert(ks[n].value <= 4)
    local parts = {s:split(i, ks)}
    assert(#parts == n)
    assert(not s:print_loop_nest():find("if ", 1, true)) -- perfect: no guard
    check_numbers(g, s)
    round_trip(g, s)
  end
end

-- imposed factors, and the nest is the one constants give
local s = stof.schedule(g.outputs)
local i = s:get_loops(s:get_block("C"))[1]
local k0, k1 = s:sample_perfect_tile(i, 2, 8, {3, 8})
assert(k0.value == 3 and k1.value == 8 and k0.decision == 2)
s:split(i, {k0, k1})
local c = stof.schedule(g.outputs)
c:split(c:get_loops(c:get_block("C"))[1], {3, 8})
assert(s:print_loop_nest() == c:print_loop_nest())
assert(s:trace():find('s:sample_perfect_tile(l1, 2, 8, {3, 8}, {"i.tile0", "i.tile1"})', 1, true))
-- both decisions changed together: 6 x 4; one alone breaks the product and is refused
local r = s:with_decisions({["i.tile0"] = 4, ["i.tile1"] = 3})
assert(r:print_loop_nest():find("for i.outer in 0..6:", 1, true))
u.raises(function() return s:with_decisions({["i.tile0"] = 4}) end,
         "ScheduleError: replay: instruction 2 (SamplePerfectTile): sample_perfect_tile: factors {6, 8} (knobs i.tile0, i.tile1) do not multiply to the extent 24 of loop i")

-- errors
local j = s:get_loops(s:get_block("B"))[2]
u.raises(function() s:sample_perfect_tile(j, 0, 4) end, "ScheduleError: sample_perfect_tile: 0 factors for loop j, must be 1..64")
u.raises(function() s:sample_perfect_tile(j, 2, -1) end, "max_innermost -1 for loop j must be >= 0")
u.raises(function() s:sample_perfect_tile(j, 2, 0, {3, 3}) end, "factors {3, 3} (knobs j.tile0, j.tile1) do not multiply to the extent 8 of loop j")
u.raises(function() s:sample_perfect_tile(j, 2, 0, {8}) end, "1 factors for n = 2")
u.raises(function() s:sample_perfect_tile(i, 2, 0) end, "loop i was split")
u.raises(function() s:sample_perfect_tile(c:get_loops(c:get_block("B"))[1], 2, 0) end, "belongs to another schedule")

-- compute locations: B under C's tiles, every decision legal, the knob applied by compute_at
local s2 = stof.schedule(g.outputs)
local b = s2:get_block("B")
local ci = s2:get_loops(s2:get_block("C"))[1]
local t0, t1 = s2:sample_perfect_tile(ci, 2, 4, {6, 4})
s2:split(ci, {t0, t1})
local loc = s2:sample_compute_location(b, 1)
assert(loc.name == "B.location" and loc.value == 0)
assert(table.concat(loc.candidates, ",") == "-1,0,1,2")
s2:compute_at(b, loc)
assert(s2:print_loop_nest():find("alloc B: float32[4, 8] at i.outer", 1, true))
assert(s2:trace():find("s:compute_at(b0, k8)", 1, true))
check_numbers(g, s2)
round_trip(g, s2)
for d = 0, 3 do
  local r2 = s2:with_decisions({["B.location"] = d})
  check_numbers(g, r2)
  assert((r2:print_loop_nest():find("alloc B: float32[24, 8]\n", 1, true) ~= nil) == (d == 0))
end
u.raises(function() s2:sample_compute_location(b, 9) end, "ScheduleError: sample_compute_location B_1.location: decision 9 out of range (4 candidates)")
u.raises(function() s2:compute_at(b, 3) end, "loop or location knob expected")
print("ok")
