-- stof.schedule through Lua: every primitive gets a golden loop nest, numbers on the C
-- backend against stof.eval (random inputs, outputs poisoned with NaN), and a round trip of
-- its trace (the Lua text replayed into a fresh schedule: same nest, same numbers). Then the
-- illegal schedules, knob replays, JSON traces and the binding's own checks.
package.path = arg[0]:match("^(.*/)") .. "?.lua;" .. package.path
local u = require("util")
local stof = require("stof")
local te = stof.te

assert(stof.INFER == -1)

-- Graphs -----------------------------------------------------------------------------------

local function matmul(M, N, K)
  te.reset()
  local A = te.placeholder({M, K}, "float32", "A")
  local B = te.placeholder({K, N}, "float32", "B")
  local k = te.reduce_axis(K, "k")
  local C = te.compute({M, N}, function(i, j) return te.sum(A[{i, k}] * B[{k, j}], {k}) end, "C")
  return {inputs = {A, B}, outputs = {C}, A = A, B = B, C = C}
end

local function vec(n)
  te.reset()
  local A = te.placeholder({n}, "float32", "A")
  local B = te.compute({n}, function(i) return A[i] * 3 - 1 end, "B")
  return {inputs = {A}, outputs = {B}, A = A, B = B}
end

local function elem2(M, N)
  te.reset()
  local A = te.placeholder({M, N}, "float32", "A")
  local B = te.compute({M, N}, function(i, j) return A[{i, j}] * 2 + 1 end, "B")
  return {inputs = {A}, outputs = {B}, A = A, B = B}
end

local function softmax(M, N)
  te.reset()
  local X = te.placeholder({M, N}, "float32", "X")
  local r = te.reduce_axis(N, "r")
  local mx = te.compute({M}, function(i) return te.max(X[{i, r}], {r}) end, "mx")
  local e = te.compute({M, N}, function(i, j) return te.exp(X[{i, j}] - mx[i]) end, "e")
  local c = te.reduce_axis(N, "c")
  local sm = te.compute({M}, function(i) return te.sum(e[{i, c}], {c}) end, "sm")
  local P = te.compute({M, N}, function(i, j) return e[{i, j}] / sm[i] end, "P")
  return {inputs = {X}, outputs = {P}, mx = mx, e = e, sm = sm, P = P}
end

-- Checks -----------------------------------------------------------------------------------

-- Runs the schedule on the C backend: random inputs (seed), NaN-poisoned outputs.
local function run(g, s, seed)
  local args, ins, outs = {}, {}, {}
  for i, op in ipairs(g.inputs) do
    args[#args + 1] = op
    ins[i] = stof.rand(op.shape, op.dtype, seed + i)
  end
  for i, op in ipairs(g.outputs) do
    args[#args + 1] = op
    outs[i] = stof.zeros(op.shape, op.dtype):fill(0 / 0)
  end
  local f = stof.build(s, args, {target = "c"})
  u.raises(function() stof.build(s, args, {targte = "c"}) end, "ValueError", 'unknown option "targte"', "known: target")
  local call = {}
  for _, t in ipairs(ins) do call[#call + 1] = t end
  for _, t in ipairs(outs) do call[#call + 1] = t end
  f(table.unpack(call))
  return ins, outs
end

local function check_numbers(g, s)
  local ins, outs = run(g, s, 10)
  local feed = {}
  for i, op in ipairs(g.inputs) do feed[op] = ins[i] end
  local want = {stof.eval(g.outputs, feed)}
  for i = 1, #outs do
    local err = stof.rel_l2(outs[i], want[i])
    if not (err < 1e-5) then error(("output %d: relative L2 error %g"):format(i, err), 2) end
  end
end

-- The Lua trace replayed into a fresh schedule gives the same nest and the same numbers.
local function round_trip(g, s)
  local text = s:trace()
  assert(text:find("return function(s, stof)", 1, true))
  local fresh = stof.schedule(g.outputs)
  assert(load(text, "=trace"))()(fresh, stof)
  assert(fresh:print_loop_nest() == s:print_loop_nest(), "replayed nest differs:\n" .. fresh:print_loop_nest())
  local _, a = run(g, s, 20)
  local _, b = run(g, fresh, 20)
  for i = 1, #a do assert(stof.allclose(a[i], b[i], 0, 0), "replayed numbers differ") end
  -- and through JSON
  local again = stof.schedule(g.outputs):replay(s:trace_json())
  assert(again:print_loop_nest() == s:print_loop_nest())
  return fresh
end

local function expect_nest(s, golden)
  local got = s:print_loop_nest()
  if got ~= golden then error(("loop nest:\n%s\nexpected:\n%s"):format(got, golden), 2) end
end

local function check_all(g, s, golden)
  expect_nest(s, golden)
  check_numbers(g, s)
  round_trip(g, s)
end

-- The primitives -----------------------------------------------------------------------------

do -- unscheduled matmul, handles
  local g = matmul(6, 5, 4)
  local s = stof.schedule(g.outputs)
  local b = s:get_block("C")
  assert(tostring(b) == "block C" and b.name == "C")
  assert(s:get_block(g.C) == b)
  local i, j, k = table.unpack(s:get_loops(b))
  assert(tostring(i) == "i" and j.name == "j" and k.extent == 4)
  assert(i.kind == "data-parallel" and k.kind == "reduce" and i.derive == "root" and i.alive)
  check_all(g, s, [[
for i in 0..6:
  for j in 0..5:
    C[i, j] = 0.0
    for k in 0..4:
      C[i, j] = C[i, j] + (A[i, k] * B[k, j])]])
  assert(tostring(s) == s:print_loop_nest())
end

do -- split, non-divisible (37 by 8)
  local g = vec(37)
  local s = stof.schedule(g.outputs)
  local i = s:get_loops(s:get_block("B"))[1]
  local io, ii = s:split(i, {stof.INFER, 8})
  assert(io.name == "i.outer" and io.extent == 5 and ii.extent == 8 and io.derive == "split")
  assert(not i.alive)
  check_all(g, s, [[
for i.outer in 0..5:
  for i.inner in 0..8:
    let i = i.outer * 8 + i.inner
    if i < 37:
      B[i] = (A[i] * 3.0) - 1.0]])
end

do -- split of a reduce loop, three factors
  local g = matmul(4, 3, 24)
  local s = stof.schedule(g.outputs)
  local _, _, k = table.unpack(s:get_loops(s:get_block("C")))
  local k0, k1, k2 = s:split(k, {2, stof.INFER, 4})
  assert(k0.name == "k.0" and k1.extent == 3 and k2.kind == "reduce")
  check_all(g, s, [[
for i in 0..4:
  for j in 0..3:
    C[i, j] = 0.0
    for k.0 in 0..2:
      for k.1 in 0..3:
        for k.2 in 0..4:
          let k = k.0 * 12 + k.1 * 4 + k.2
          C[i, j] = C[i, j] + (A[i, k] * B[k, j])]])
end

do -- fuse
  local g = elem2(4, 8)
  local s = stof.schedule(g.outputs)
  local i, j = table.unpack(s:get_loops(s:get_block("B")))
  local f = s:fuse(i, j)
  assert(f.name == "i_j_fused" and f.extent == 32 and f.derive == "fuse")
  check_all(g, s, [[
for i_j_fused in 0..32:
  let i = i_j_fused / 8
  let j = i_j_fused % 8
  B[i, j] = (A[i, j] * 2.0) + 1.0]])
end

do -- reorder: the reduce loop outermost
  local g = matmul(6, 5, 7)
  local s = stof.schedule(g.outputs)
  local i, j, k = table.unpack(s:get_loops(s:get_block("C")))
  s:reorder(k, i, j)
  check_all(g, s, [[
for i in 0..6:
  for j in 0..5:
    C[i, j] = 0.0
for k in 0..7:
  for i in 0..6:
    for j in 0..5:
      C[i, j] = C[i, j] + (A[i, k] * B[k, j])]])
end

do -- tile, non-divisible
  local g = matmul(37, 20, 5)
  local s = stof.schedule(g.outputs)
  local i, j = table.unpack(s:get_loops(s:get_block("C")))
  local io, jo, ii, ji = s:tile(i, j, 8, 16)
  assert(io.name == "i.outer" and jo.name == "j.outer" and ii.name == "i.inner" and ji.name == "j.inner")
  check_all(g, s, [[
for i.outer in 0..5:
  for j.outer in 0..2:
    for i.inner in 0..8:
      let i = i.outer * 8 + i.inner
      if i < 37:
        for j.inner in 0..16:
          let j = j.outer * 16 + j.inner
          if j < 20:
            C[i, j] = 0.0
            for k in 0..5:
              C[i, j] = C[i, j] + (A[i, k] * B[k, j])]])
end

do -- bind
  local g = vec(64)
  local s = stof.schedule(g.outputs)
  local io, ii = s:split(s:get_loops(s:get_block("B"))[1], {stof.INFER, 16})
  s:bind(io, "blockIdx.x")
  s:bind(ii, "threadIdx.x")
  assert(io.annotation == "blockIdx.x")
  check_all(g, s, [[
for i.outer in 0..4 [blockIdx.x]:
  for i.inner in 0..16 [threadIdx.x]:
    let i = i.outer * 16 + i.inner
    B[i] = (A[i] * 3.0) - 1.0]])
end

do -- vectorize, unroll, parallel
  local g = matmul(9, 16, 6)
  local s = stof.schedule(g.outputs)
  local i, j, k = table.unpack(s:get_loops(s:get_block("C")))
  s:parallel(i)
  s:vectorize(j)
  s:unroll(k)
  assert(j.annotation == "vectorized" and k.annotation == "unrolled" and i.annotation == "parallel")
  check_all(g, s, [[
for i in 0..9 [parallel]:
  for j in 0..16 [vectorized]:
    C[i, j] = 0.0
    for k in 0..6 [unrolled]:
      C[i, j] = C[i, j] + (A[i, k] * B[k, j])]])
  local f = stof.build(s, {g.A, g.B, g.C})
  assert(f:source():find("#pragma GCC ivdep", 1, true) and f:source():find("#pragma GCC unroll 6", 1, true))
  assert(f:library():find("%.so$"))
end

do -- annotate loops and blocks
  local g = elem2(3, 4)
  local s = stof.schedule(g.outputs)
  local b = s:get_block("B")
  local i, j = table.unpack(s:get_loops(b))
  s:annotate(i, "unroll_explicit", 1)
  s:annotate(b, "stage", "epilogue")
  s:annotate(j, "note", true)
  check_all(g, s, [[
# block B: stage=epilogue
for i in 0..3 [unroll_explicit=1]:
  for j in 0..4 [note=true]:
    B[i, j] = (A[i, j] * 2.0) + 1.0]])
end

do -- knob: a changed decision replays to a new nest with the same numbers
  local g = matmul(37, 12, 8)
  local s = stof.schedule(g.outputs)
  local i = s:get_loops(s:get_block("C"))[1]
  local kn = s:knob("tile_i", {4, 8, 16})
  assert(kn.name == "tile_i" and kn.decision == 0 and kn.value == 4 and #kn.candidates == 3)
  assert(tostring(kn) == "knob tile_i = 4")
  s:split(i, {stof.INFER, kn})
  check_all(g, s, [[
for i.outer in 0..10:
  for i.inner in 0..4:
    let i = i.outer * 4 + i.inner
    if i < 37:
      for j in 0..12:
        C[i, j] = 0.0
        for k in 0..8:
          C[i, j] = C[i, j] + (A[i, k] * B[k, j])]])
  local nests = {}
  for d = 0, 2 do
    local r = s:with_decisions({tile_i = d})
    nests[d] = r:print_loop_nest()
    assert(nests[d]:find(("for i.inner in 0..%d:"):format(4 << d), 1, true))
    check_numbers(g, r)
    -- editing the decision in the Lua text does the same
    local text = s:trace():gsub('s:knob%("tile_i", {4, 8, 16}, 0%)', ('s:knob("tile_i", {4, 8, 16}, %d)'):format(d))
    local fresh = stof.schedule(g.outputs)
    load(text)()(fresh, stof)
    assert(fresh:print_loop_nest() == nests[d])
  end
  assert(nests[0] ~= nests[1] and nests[1] ~= nests[2])
  u.raises(function() s:with_decisions({tile_i = 3}) end, "ValueError:", "decision 3 for knob tile_i out of range")
  u.raises(function() s:with_decisions({nope = 0}) end, "NotFoundError:", "no knob named nope")
end

do -- sample_categorical: drawn once, recorded, replayed
  local g = vec(48)
  local s = stof.schedule(g.outputs)
  local v = s:sample_categorical("v", {4, 8, 16}, {0, 1, 0})
  assert(v.decision == 1 and v.value == 8)
  local w = s:sample_categorical("w", {2, 3}, {0.5, 0.5}, 1)
  assert(w.value == 3)
  s:split(s:get_loops(s:get_block("B"))[1], {stof.INFER, v})
  assert(s:trace():find('s:sample_categorical("v", {4, 8, 16}, {0, 1, 0}, 1)', 1, true))
  check_all(g, s, [[
for i.outer in 0..6:
  for i.inner in 0..8:
    let i = i.outer * 8 + i.inner
    B[i] = (A[i] * 3.0) - 1.0]])
end

do -- group and ungroup
  local g = softmax(4, 6)
  local s = stof.schedule(g.outputs)
  u.raises(function() s:group({g.mx, g.sm}) end, "ScheduleError:",
    "group {mx, sm}: mx (reduction) and sm (reduction) are both reductions")
  local g0 = s:group({g.mx, "e"})
  local g1 = s:group({s:get_block("sm"), g.P})
  assert(g0 == 0 and g1 == 1)
  s:ungroup(g0)
  local nest = s:print_loop_nest()
  assert(nest:find("^group 1: sm, P\nalloc mx: float32%[4%]\n"))
  check_numbers(g, s)
  round_trip(g, s)
  u.raises(function() s:group({g.e, g.P}) end, "ScheduleError: group {e, P}: op P is already in group 1")
  u.raises(function() s:ungroup(g0) end, "ScheduleError: ungroup: group 0 was already removed")
end

do -- clone: independent copies
  local g = vec(16)
  local s = stof.schedule(g.outputs)
  local i = s:get_loops(s:get_block("B"))[1]
  local c = s:clone()
  s:split(i, {stof.INFER, 4})
  assert(c:print_loop_nest() == "for i in 0..16:\n  B[i] = (A[i] * 3.0) - 1.0")
  u.raises(function() c:split(i, {2, 8}) end, "ValueError:", "split: the loop belongs to another schedule")
  local ci = c:get_loops(c:get_block("B"))[1]
  c:split(ci, {2, 8})
  check_numbers(g, c)
end

do -- a handle keeps its schedule (and the schedule its graph) alive
  local g = vec(8)
  local i = (function()
    local s = stof.schedule(g.outputs)
    return s:get_loops(s:get_block("B"))[1]
  end)()
  g = nil
  te.reset()
  collectgarbage()
  collectgarbage()
  assert(tostring(i) == "i" and i.extent == 8 and i.kind == "data-parallel")
end

-- Illegal schedules ----------------------------------------------------------------------------

do
  local g = matmul(16, 12, 8)
  local s = stof.schedule(g.outputs)
  local i, j, k = table.unpack(s:get_loops(s:get_block("C")))
  local before = s:print_loop_nest()
  s:bind(i, "blockIdx.x")
  local bound = s:print_loop_nest()
  u.raises(function() s:bind(i, "threadIdx.x") end, "ScheduleError: bind: loop i is already bound to blockIdx.x")
  u.raises(function() s:split(j, {0, 4}) end, "ScheduleError: split: factor 0 for loop j")
  u.raises(function() s:split(j, {stof.INFER, -3}) end, "ScheduleError: split: negative factor -3 for loop j")
  u.raises(function() s:fuse(i, k) end, "ScheduleError: fuse: loop i is bound to blockIdx.x")
  u.raises(function() s:bind(k, "blockIdx.y") end, "ScheduleError: bind: loop k is a reduce loop: it cannot be bound to blockIdx.y")
  u.raises(function() s:parallel(k) end, "ScheduleError: parallel: loop k is a reduce loop")
  u.raises(function() s:knob("t", {}) end, "ScheduleError: knob t: no candidates")
  assert(s:print_loop_nest() == bound and bound ~= before)

  local g2 = matmul(8, 8, 8)
  local s2 = stof.schedule(g2.outputs)
  local a, b, c = table.unpack(s2:get_loops(s2:get_block("C")))
  s2:reorder(a, c, b)
  u.raises(function() s2:fuse(a, b) end, "ScheduleError: fuse: loops i and j are not adjacent in block C (k lies between them)")

  local g3 = softmax(3, 4)
  local s3 = stof.schedule(g3.outputs)
  local l1 = s3:get_loops(s3:get_block("mx"))[1]
  local l2 = s3:get_loops(s3:get_block("P"))[2]
  u.raises(function() s3:reorder(l1, l2) end, "ScheduleError: reorder: loop i is in block mx, loop j in block P")
  u.raises(function() s3:group({g3.e, g3.P}) end, "ScheduleError:", "sm, outside the group, lies on a path")
  u.raises(function() s3:get_block("nope") end, "ScheduleError: get_block: no block named nope (blocks: mx, e, sm, P)")
end

-- The binding's own checks -----------------------------------------------------------------

do
  local g = matmul(4, 4, 4)
  local s = stof.schedule(g.outputs)
  local i = s:get_loops(s:get_block("C"))[1]
  u.raises(function() s:split(i, {stof.INFER, "x"}) end, "TypeError: split: bad argument #2 (factor 2 must be an integer or a knob, got string)")
  u.raises(function() s:split(i, {stof.INFER, 2.5}) end, "(factor 2 must be an integer or a knob, got 2.5)")
  u.raises(function() s:split(i, 4) end, "TypeError: split: bad argument #2 (table of factors expected, got integer)")
  u.raises(function() s:bind(i) end, "TypeError: bind: bad argument #2 (thread tag string expected, got no value)")
  u.raises(function() s:get_loops(i) end, "TypeError: get_loops: bad argument #1 (block expected, got stof.Loop)")
  u.raises(function() stof.schedule({}) end, "TypeError: stof.schedule: bad argument #1 (the list of outputs is empty)")
  u.raises(function() stof.schedule({g.A}) end, "ValueError: schedule: output A is a placeholder")
  do -- without a GPU the CUDA source still compiles, then the build reports the device
    local ok, err = pcall(stof.build, s, {g.A, g.B, g.C}, {target = "cuda"})
    assert(ok or tostring(err):find("DeviceError: build: the CUDA source compiled", 1, true), err)
  end
  u.raises(function() stof.build(s, {g.A, g.C}) end, "ValueError: build: placeholder B is read but not among the arguments")
  local f = stof.build(s, {g.A, g.B, g.C})
  local a, b, c = stof.rand({4, 4}), stof.rand({4, 4}), stof.zeros({4, 4})
  u.raises(function() f(a, b) end, "ValueError: stof.Func: 2 tensors given, 3 expected")
  u.raises(function() f(a, stof.rand({4, 5}), c) end, "ShapeError: call: argument 2 (B): shape [4, 5] given, [4, 4] expected")
  u.raises(function() f(a, b, stof.zeros({4, 4}, "float64")) end, "TypeError: call: argument 3 (C): dtype float64 given, float32 expected")
  f(a, b, c)
  assert(stof.allclose(c, stof.eval(g.C, {[g.A] = a, [g.B] = b}), 1e-5, 1e-6))
  -- f:time times "cuda" builds only (with CUDA events): a "c" build is refused, GPU or not
  u.raises(function() f:time(a, b, c) end, 'ValueError: time: the function was built for target "c"; only "cuda" builds are timed')
  u.raises(function() f:time(a, b, c, {reps = 0}) end, "ValueError: time: reps = 0 and warmup = 5 (reps >= 1, warmup >= 0)")
  u.raises(function() f:time(a, b, c, {warmup = 1.5}) end, "TypeError: Func:time: bad argument #4 (warmup must be an integer, got 1.5)")
  u.raises(function() f:time(a, b, c, {warmup = 2.0}) end, "(warmup must be an integer, got 2.0)")
  u.raises(function() f:time(a, b, {reps = 3}) end, "ValueError: Func:time: 2 tensors given, 3 expected")
  u.raises(function() s:replay("{") end, "ParseError: trace: JSON error")
end

do -- a long trace replays through the table form
  local g = elem2(3, 5)
  local s = stof.schedule(g.outputs)
  local b = s:get_block("B")
  local loops
  for _ = 1, 100 do loops = s:get_loops(b) end
  s:fuse(loops[1], loops[2])
  local text = s:trace()
  assert(text:find("local v = {}", 1, true))
  round_trip(g, s)
end

print("test_schedule: ok")
