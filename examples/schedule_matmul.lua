-- A matrix product with a bias and a ReLU, scheduled TVM-style (tile, split, reorder,
-- vectorize, unroll, knobs, one group), compiled for the CPU by the C backend, and checked
-- against the reference interpreter. Prints the loop nest and the trace (a Lua script that
-- rebuilds the schedule), then replays the trace with other knob decisions.
--
--   stof run examples/schedule_matmul.lua [M N K]
local stof = require("stof")
local te = stof.te

local M, N, K = tonumber(arg[1]) or 100, tonumber(arg[2]) or 72, tonumber(arg[3]) or 64

local A = te.placeholder({M, K}, "float32", "A")
local W = te.placeholder({K, N}, "float32", "W")
local bias = te.placeholder({N}, "float32", "bias")
local k = te.reduce_axis(K, "k")
local C = te.compute({M, N}, function(i, j) return te.sum(A[{i, k}] * W[{k, j}], {k}) end, "C")
local D = te.compute({M, N}, function(i, j) return te.maximum(C[{i, j}] + bias[j], 0) end, "D")

-- The schedule: C tiled by two knobs, k split by 8, the innermost column loop vectorized.
local s = stof.schedule({D})
s:group({C, D}) -- one kernel (the C backend still emits a loop nest per block)
local i, j, kk = table.unpack(s:get_loops(s:get_block("C")))
local tile_i = s:knob("tile_i", {8, 16, 32}, 1)
local tile_j = s:knob("tile_j", {8, 16}, 1)
local io, jo, ii, ji = s:tile(i, j, tile_i, tile_j)
local ko, ki = s:split(kk, {stof.INFER, 8})
s:reorder(io, jo, ko, ii, ki, ji)
s:vectorize(ji)
s:unroll(ki)
s:parallel(io)
local _, dj = table.unpack(s:get_loops(s:get_block("D")))
s:vectorize(dj)

print(("matmul [%d x %d] @ [%d x %d] + bias, ReLU (float32)\n"):format(M, K, K, N))
print("loop nest:")
print(s:print_loop_nest())
print("\ntrace:")
print(s:trace())

-- Build, run on random inputs with the output poisoned, compare with the interpreter.
local a, w, b = stof.rand({M, K}, "float32", 1), stof.rand({K, N}, "float32", 2), stof.rand({N}, "float32", 3)
local want = stof.eval(D, {[A] = a, [W] = w, [bias] = b})
local function check(sched, what)
  local f = stof.build(sched, {A, W, bias, D}, {target = "c"})
  local d = stof.zeros({M, N}, "float32"):fill(0 / 0)
  local t0 = os.clock()
  f(a, w, b, d)
  local ms = (os.clock() - t0) * 1e3
  local err = stof.rel_l2(d, want)
  print(("%-28s relative L2 error %.3g, %.2f ms"):format(what, err, ms))
  if not (err < 1e-5) then error(("schedule_matmul: %s: mismatch (relative L2 error %g)"):format(what, err)) end
end
check(s, "tile_i = 16, tile_j = 16:")

-- Search changes decisions and replays the trace; every variant computes the same.
for di = 0, 2 do
  for dj = 0, 1 do
    local v = s:with_decisions({tile_i = di, tile_j = dj})
    check(v, ("tile_i = %d, tile_j = %d:"):format(({8, 16, 32})[di + 1], ({8, 16})[dj + 1]))
  end
end
print("ok")
