-- Layer norm scheduled by hand on the C backend: the mean and variance reductions are
-- computed per row of the output (compute_at into its row loop), rows are tiled by a knob,
-- and the normalisation's inner loop is vectorized. Checked against the reference
-- interpreter for every decision of the knob, each a replay of the trace. (A CUDA version
-- of this schedule comes with the CUDA backend.)
--
--   stof run examples/schedule_layernorm.lua [M N]
local stof = require("stof")
local te = stof.te

local M, N = tonumber(arg[1]) or 50, tonumber(arg[2]) or 96
local eps = 1e-5

local X = te.placeholder({M, N}, "float32", "X")
local gamma = te.placeholder({N}, "float32", "gamma")
local beta = te.placeholder({N}, "float32", "beta")
local r = te.reduce_axis(N, "r")
local mean = te.compute({M}, function(i) return te.sum(X[{i, r}] * (1 / N), {r}) end, "mean")
local c = te.reduce_axis(N, "c")
local var = te.compute({M}, function(i)
  local d = X[{i, c}] - mean[i]
  return te.sum(d * d * (1 / N), {c})
end, "var")
local Y = te.compute({M, N}, function(i, j)
  return (X[{i, j}] - mean[i]) * te.rsqrt(var[i] + eps) * gamma[j] + beta[j]
end, "Y")

-- The schedule: rows in tiles of tile_rows; the statistics of a row right before it.
local s = stof.schedule({Y})
local i, j = table.unpack(s:get_loops(s:get_block("Y")))
local io, ii = s:split(i, {stof.INFER, s:knob("tile_rows", {1, 4, 8}, 1)})
s:compute_at(s:get_block("var"), ii)
s:compute_at(s:get_block("mean"), ii)
s:parallel(io)
local _, ji = s:split(j, {stof.INFER, 8})
s:vectorize(ji)

print(("layer norm over the rows of [%d x %d] (float32)\n"):format(M, N))
print("loop nest:")
print(s:print_loop_nest())
print("\ntrace:")
print(s:trace())

local x, g, b = stof.rand({M, N}, "float32", 1), stof.rand({N}, "float32", 2), stof.rand({N}, "float32", 3)
local want = stof.eval(Y, {[X] = x, [gamma] = g, [beta] = b})
local function check(sched, what)
  local f = stof.build(sched, {X, gamma, beta, Y}, {target = "c"})
  local y = stof.zeros({M, N}, "float32"):fill(0 / 0)
  f(x, g, b, y)
  local err = stof.rel_l2(y, want)
  print(("%-24s relative L2 error %.3g"):format(what, err))
  if not (err < 1e-5) then error(("schedule_layernorm: %s: mismatch (relative L2 error %g)"):format(what, err)) end
end
check(s, "tile_rows = 4:")
for d = 0, 2 do
  check(s:with_decisions({tile_rows = d}), ("tile_rows = %d (replayed):"):format(({1, 4, 8})[d + 1]))
end
print("ok")
