-- The block primitives through Lua (compute_at, reverse_compute_at, compute_inline,
-- reverse_compute_inline, cache_read, cache_write, rfactor): each gets a golden loop nest,
-- numbers on the C backend against stof.eval (random inputs, outputs poisoned with NaN) and
-- a round trip of its trace (the Lua text replayed into a fresh schedule: same nest, same
-- numbers; and the JSON). Then the illegal schedules and worked examples.
package.path = arg[0]:match("^(.*/)") .. "?.lua;" .. package.path
local u = require("util")
local stof = require("stof")
local te = stof.te

-- Graphs -----------------------------------------------------------------------------------

local function chain(n)
  te.reset()
  local A = te.placeholder({n}, "float32", "A")
  local B = te.compute({n}, function(i) return A[i] * 2 end, "B")
  local C = te.compute({n}, function(i) return B[i] + 1 end, "C")
  return {inputs = {A}, outputs = {C}, A = A, B = B, C = C}
end

local function matmul(M, N, K)
  te.reset()
  local A = te.placeholder({M, K}, "float32", "A")
  local B = te.placeholder({K, N}, "float32", "B")
  local k = te.reduce_axis(K, "k")
  local C = te.compute({M, N}, function(i, j) return te.sum(A[{i, k}] * B[{k, j}], {k}) end, "C")
  return {inputs = {A, B}, outputs = {C}, A = A, B = B, C = C}
end

local function rowsum(M, K)
  te.reset()
  local X = te.placeholder({M, K}, "float32", "X")
  local k = te.reduce_axis(K, "k")
  local S = te.compute({M}, function(i) return te.sum(X[{i, k}], {k}) end, "S")
  return {inputs = {X}, outputs = {S}, X = X, S = S}
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

local function gemm_bias_gelu(M, N, K)
  te.reset()
  local A = te.placeholder({M, K}, "float32", "A")
  local W = te.placeholder({K, N}, "float32", "W")
  local bias = te.placeholder({N}, "float32", "bias")
  local k = te.reduce_axis(K, "k")
  local C = te.compute({M, N}, function(i, j) return te.sum(A[{i, k}] * W[{k, j}], {k}) end, "C")
  local D = te.compute({M, N}, function(i, j) return C[{i, j}] + bias[j] end, "D")
  local E = te.compute({M, N}, function(i, j)
    return D[{i, j}] * 0.5 * (1 + te.erf(D[{i, j}] * 0.7071067811865476))
  end, "E")
  return {inputs = {A, W, bias}, outputs = {E}, C = C, D = D, E = E}
end

-- Checks -----------------------------------------------------------------------------------

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
  local call = {}
  for _, t in ipairs(ins) do call[#call + 1] = t end
  for _, t in ipairs(outs) do call[#call + 1] = t end
  f(table.unpack(call))
  return ins, outs, f
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

local function round_trip(g, s)
  local text = s:trace()
  local fresh = stof.schedule(g.outputs)
  assert(load(text, "=trace"))()(fresh, stof)
  assert(fresh:print_loop_nest() == s:print_loop_nest(), "replayed nest differs:\n" .. fresh:print_loop_nest())
  local _, a = run(g, s, 20)
  local _, b = run(g, fresh, 20)
  for i = 1, #a do assert(stof.allclose(a[i], b[i], 0, 0), "replayed numbers differ") end
  local again = stof.schedule(g.outputs):replay(s:trace_json())
  assert(again:print_loop_nest() == s:print_loop_nest())
end

local function check_all(g, s, golden)
  local got = s:print_loop_nest()
  if got ~= golden then error(("loop nest:\n%s\nexpected:\n%s"):format(got, golden), 2) end
  check_numbers(g, s)
  round_trip(g, s)
end

-- The primitives -----------------------------------------------------------------------------

do -- compute_at under a split loop
  local g = chain(37)
  local s = stof.schedule(g.outputs)
  local b = s:get_block("B")
  local io = s:split(s:get_loops(s:get_block("C"))[1], {stof.INFER, 8})
  local old = s:get_loops(b)[1]
  s:compute_at(b, io)
  assert(s:trace():find("s:compute_at(b", 1, true))
  local ax0 = s:get_loops(b)[1]
  assert(ax0.name == "ax0" and ax0.extent == 8 and not old.alive)
  check_all(g, s, [=[
alloc B: float32[8] at i.outer
for i.outer in 0..5:
  for ax0 in 0..8:
    let i = i.outer * 8 + ax0
    if i < 37:
      B[i] = A[i] * 2.0
  for i.inner in 0..8:
    let i = i.outer * 8 + i.inner
    if i < 37:
      C[i] = B[i] + 1.0]=])
  u.raises(function() s:unroll(old) end, "ScheduleError: unroll: loop i of block B was replaced when the block moved")
end

do -- reverse_compute_at under a split loop
  local g = chain(20)
  local s = stof.schedule(g.outputs)
  local io = s:split(s:get_loops(s:get_block("B"))[1], {stof.INFER, 8})
  s:reverse_compute_at(s:get_block("C"), io)
  check_all(g, s, [=[
alloc B: float32[8] at i.outer
for i.outer in 0..3:
  for i.inner in 0..8:
    let i = i.outer * 8 + i.inner
    if i < 20:
      B[i] = A[i] * 2.0
  for ax0 in 0..8:
    let i = i.outer * 8 + ax0
    if i < 20:
      C[i] = B[i] + 1.0]=])
end

do -- compute_inline
  local g = chain(6)
  local s = stof.schedule(g.outputs)
  local b = s:get_block("B")
  s:compute_inline(b)
  assert(not b.alive and b.name == "B")
  check_all(g, s, [=[
for i in 0..6:
  C[i] = (A[i] * 2.0) + 1.0]=])
  u.raises(function() s:get_loops(b) end, "ScheduleError: get_loops: block B was inlined into its consumers")
  u.raises(function() stof.build(s, {g.A, g.B, g.C}) end, "ValueError: build: argument 2 (B) has no buffer")
end

do -- reverse_compute_inline
  local g = chain(6)
  local s = stof.schedule(g.outputs)
  s:reverse_compute_inline(s:get_block("C"))
  check_all(g, s, [=[
for i in 0..6:
  C[i] = (A[i] * 2.0) + 1.0]=])
end

do -- cache_read at the root
  local g = matmul(6, 5, 4)
  local s = stof.schedule(g.outputs)
  local bg = s:cache_read(s:get_block("C"), 1, "global")
  assert(tostring(bg) == "block B.global" and bg.name == "B.global")
  assert(s:trace():find('local b1 = s:cache_read(b0, 1, "global")', 1, true))
  check_all(g, s, [=[
alloc B.global: float32[4, 5]
for v0 in 0..4:
  for v1 in 0..5:
    B.global[v0, v1] = B[v0, v1]
for i in 0..6:
  for j in 0..5:
    C[i, j] = 0.0
    for k in 0..4:
      C[i, j] = C[i, j] + (A[i, k] * B.global[k, j])]=])
end

do -- cache_write at the root
  local g = matmul(6, 5, 4)
  local s = stof.schedule(g.outputs)
  local cw = s:cache_write(s:get_block("C"), "local")
  assert(cw.name == "C.local")
  check_all(g, s, [=[
alloc C.local: float32[6, 5] local
for i in 0..6:
  for j in 0..5:
    C.local[i, j] = 0.0
    for k in 0..4:
      C.local[i, j] = C.local[i, j] + (A[i, k] * B[k, j])
for v0 in 0..6:
  for v1 in 0..5:
    C[v0, v1] = C.local[v0, v1]]=])
end

do -- rfactor
  local g = rowsum(4, 30)
  local s = stof.schedule(g.outputs)
  local _, k = table.unpack(s:get_loops(s:get_block("S")))
  local _, ki = s:split(k, {stof.INFER, 8})
  local rf = s:rfactor(ki, 1)
  assert(rf.name == "S.rf" and ki.kind == "data-parallel" and ki.alive)
  assert(s:trace():find("local b5 = s:rfactor(l4, 1)", 1, true))
  check_all(g, s, [=[
alloc S.rf: float32[4, 8]
for i in 0..4:
  for k.inner in 0..8:
    S.rf[i, k.inner] = 0.0
  for k.outer in 0..4:
    for k.inner in 0..8:
      let k = k.outer * 8 + k.inner
      if k < 30:
        S.rf[i, k.inner] = S.rf[i, k.inner] + X[i, k]
for i in 0..4:
  S[i] = 0.0
  for k.inner in 0..8:
    S[i] = S[i] + S.rf[i, k.inner]]=])
end

-- Illegal schedules (each leaves the schedule as it was) ---------------------------------------

do
  local g = softmax(4, 6)
  local s = stof.schedule(g.outputs)
  local i = s:get_loops(s:get_block("P"))[1]
  local e, sm, mx, P = s:get_block("e"), s:get_block("sm"), s:get_block("mx"), s:get_block("P")
  local before, trace = s:print_loop_nest(), s:trace()
  u.raises(function() s:compute_at(e, i) end,
    "ScheduleError: compute_at: loop i of block P does not enclose consumer sm of block e")
  u.raises(function() s:compute_at(P, i) end, "ScheduleError: compute_at: loop i belongs to block P itself")
  u.raises(function() s:compute_inline(sm) end,
    "ScheduleError: compute_inline: block sm is a reduction (only injective blocks inline)")
  u.raises(function() s:compute_inline(P) end, "ScheduleError: compute_inline: block P is an output")
  u.raises(function() s:reverse_compute_inline(P) end,
    "ScheduleError: reverse_compute_inline: block P reads 2 blocks (e, sm); it must read exactly one")
  u.raises(function() s:rfactor(i, 0) end,
    "ScheduleError: rfactor: loop i of block P is data-parallel (rfactor takes a reduce loop)")
  u.raises(function() s:cache_read(mx, 1, "shared") end,
    "ScheduleError: cache_read: input index 1 is out of range: block mx reads 1 tensor (X)")
  u.raises(function() s:cache_read(mx, 0, "texture") end, "ScheduleError: cache_read: unknown scope 'texture'")
  u.raises(function() s:cache_read(mx, "0", "shared") end, "TypeError:")
  u.raises(function() s:compute_at(i, i) end, "TypeError: compute_at: bad argument #1 (block expected, got stof.Loop)")
  assert(s:print_loop_nest() == before and s:trace() == trace)
end

-- Worked examples ----------------------------------------------------------------------------

do -- softmax: the max, exp and sum stages per row of the normalisation
  local g = softmax(8, 10)
  local s = stof.schedule(g.outputs)
  local i = s:get_loops(s:get_block("P"))[1]
  s:compute_at(s:get_block("sm"), i)
  s:compute_at(s:get_block("e"), i)
  s:compute_at(s:get_block("mx"), i)
  check_all(g, s, [=[
alloc mx: float32[1] at i
alloc e: float32[1, 10] at i
alloc sm: float32[1] at i
for i in 0..8:
  mx[i] = -inf
  for r in 0..10:
    mx[i] = max(mx[i], X[i, r])
  for j in 0..10:
    e[i, j] = exp((X[i, j] - mx[i]))
  sm[i] = 0.0
  for c in 0..10:
    sm[i] = sm[i] + e[i, c]
  for j in 0..10:
    P[i, j] = e[i, j] / sm[i]]=])
end

do -- matmul: A and B in "shared" per k-tile, the accumulator in "local" per output tile
  local g = matmul(20, 24, 16)
  local s = stof.schedule(g.outputs)
  local c = s:get_block("C")
  local i, j, k = table.unpack(s:get_loops(c))
  local io, jo, ii, ji = s:tile(i, j, 8, 8)
  local ko, ki = s:split(k, {stof.INFER, 4})
  s:reorder(io, jo, ko, ii, ki, ji)
  local as, bs = s:cache_read(c, 0, "shared"), s:cache_read(c, 1, "shared")
  s:compute_at(as, ko)
  s:compute_at(bs, ko)
  s:reverse_compute_at(s:cache_write(c, "local"), jo)
  local nest = s:print_loop_nest()
  assert(nest:find("^alloc C.local: float32%[8, 8%] local at j.outer\nalloc A.shared: float32%[8, 4%] shared at k.outer\n"))
  check_numbers(g, s)
  round_trip(g, s)
  local _, _, f = run(g, s, 1)
  assert(f:source():find("_A_shared[32]; /* shared */", 1, true))
end

do -- GEMM + bias + GELU: the epilogue folded into the accumulator's write-back
  local g = gemm_bias_gelu(12, 10, 6)
  local s = stof.schedule(g.outputs)
  local c = s:get_block("C")
  local i, j = table.unpack(s:get_loops(c))
  local _, jo = s:tile(i, j, 4, 5)
  local cw = s:cache_write(c, "local")
  s:reverse_compute_inline(s:get_block("E"))
  s:reverse_compute_inline(s:get_block("D"))
  s:reverse_compute_at(cw, jo)
  check_all(g, s, [=[
alloc C.local: float32[4, 5] local at j.outer
for i.outer in 0..3:
  for j.outer in 0..2:
    for i.inner in 0..4:
      let i = i.outer * 4 + i.inner
      for j.inner in 0..5:
        let j = j.outer * 5 + j.inner
        C.local[i, j] = 0.0
        for k in 0..6:
          C.local[i, j] = C.local[i, j] + (A[i, k] * W[k, j])
    for ax0 in 0..4:
      let v0 = i.outer * 4 + ax0
      for ax1 in 0..5:
        let v1 = j.outer * 5 + ax1
        E[v0, v1] = ((C.local[v0, v1] + bias[v1]) * 0.5) * (1.0 + erf(((C.local[v0, v1] + bias[v1]) * 0.70710677)))]=])
end

-- Random schedules ---------------------------------------------------------------------------
-- Random sequences of primitives (most are refused: that is part of the test) on small
-- graphs: each refusal is a ScheduleError that leaves the schedule usable, and every
-- schedule that results computes the interpreter's numbers and replays from its trace.

local function random_graph(kind)
  if kind == 1 then
    local g = gemm_bias_gelu(math.random(3, 9), math.random(3, 9), math.random(2, 7))
    return g, {"C", "D", "E"}
  elseif kind == 2 then
    return softmax(math.random(2, 6), math.random(2, 11)), {"mx", "e", "sm", "P"}
  end
  te.reset()
  local n = math.random(3, 20)
  local A = te.placeholder({n + 2}, "float32", "A")
  local B = te.compute({n + 2}, function(i) return A[i] * 2 end, "B")
  local C = te.compute({n}, function(i) return B[i] + B[i + 1] + B[i + 2] end, "C")
  local D = te.compute({n}, function(i) return C[i] * 3 end, "D")
  return {inputs = {A}, outputs = {D}}, {"B", "C", "D"}
end

math.randomseed(7)
for _ = 1, 24 do
  local g, names = random_graph(math.random(1, 3))
  local s = stof.schedule(g.outputs)
  local blocks = {}
  for _, n in ipairs(names) do blocks[#blocks + 1] = s:get_block(n) end
  local function any_loop()
    local ok, ls = pcall(function() return s:get_loops(blocks[math.random(#blocks)]) end)
    if ok and #ls > 0 then return ls[math.random(#ls)] end
  end
  local scopes = {"global", "shared", "local"}
  for _ = 1, 10 do
    local b = blocks[math.random(#blocks)]
    local op = math.random(1, 10)
    local ok, err = pcall(function()
      if op == 1 then s:split(any_loop(), {stof.INFER, math.random(1, 5)})
      elseif op == 2 then s:compute_at(b, any_loop())
      elseif op == 3 then s:reverse_compute_at(b, any_loop())
      elseif op == 4 then s:compute_inline(b)
      elseif op == 5 then s:reverse_compute_inline(b)
      elseif op == 6 then blocks[#blocks + 1] = s:cache_read(b, math.random(0, 1), scopes[math.random(3)])
      elseif op == 7 then blocks[#blocks + 1] = s:cache_write(b, scopes[math.random(3)])
      elseif op == 8 then blocks[#blocks + 1] = s:rfactor(any_loop(), math.random(0, 1))
      elseif op == 9 then s:reorder(any_loop(), any_loop())
      else s:fuse(any_loop(), any_loop()) end
    end)
    if not ok then
      local e = tostring(err)
      assert(e:find("ScheduleError:", 1, true) or e:find("TypeError:", 1, true), e)
    end
  end
  check_numbers(g, s)
  round_trip(g, s)
end

print("test_schedule2: ok")
