-- Row softmax scheduled by hand on the C backend: the max, exp and sum stages are computed
-- per row of the normalisation (compute_at into its row loop), so each row's intermediates
-- live in row-sized buffers (bound inference) instead of whole tensors. Checked against
-- the reference interpreter; the trace is printed and replayed. (A CUDA version of this
-- schedule, with the rows bound to thread blocks, comes with the CUDA backend.)
--
--   stof run examples/schedule_softmax.lua [M N]
local stof = require("stof")
local te = stof.te

local M, N = tonumber(arg[1]) or 64, tonumber(arg[2]) or 100

local X = te.placeholder({M, N}, "float32", "X")
local r = te.reduce_axis(N, "r")
local mx = te.compute({M}, function(i) return te.max(X[{i, r}], {r}) end, "mx")
local e = te.compute({M, N}, function(i, j) return te.exp(X[{i, j}] - mx[i]) end, "e")
local c = te.reduce_axis(N, "c")
local sm = te.compute({M}, function(i) return te.sum(e[{i, c}], {c}) end, "sm")
local P = te.compute({M, N}, function(i, j) return e[{i, j}] / sm[i] end, "P")

-- The schedule: every stage inside the row loop of P, consumers first (compute_at needs
-- every consumer of a block under the loop already).
local s = stof.schedule({P})
local i, j = table.unpack(s:get_loops(s:get_block("P")))
s:compute_at(s:get_block("sm"), i)
s:compute_at(s:get_block("e"), i)
s:compute_at(s:get_block("mx"), i)
s:parallel(i)
local _, ji = s:split(j, {stof.INFER, 4})
s:vectorize(ji)

print(("softmax over the rows of [%d x %d] (float32)\n"):format(M, N))
print("loop nest:")
print(s:print_loop_nest())
print("\ntrace:")
print(s:trace())

local x = stof.rand({M, N}, "float32", 1)
local want = stof.eval(P, {[X] = x})
local function check(sched, what)
  local f = stof.build(sched, {X, P}, {target = "c"})
  local p = stof.zeros({M, N}, "float32"):fill(0 / 0)
  f(x, p)
  local err = stof.rel_l2(p, want)
  print(("%-26s relative L2 error %.3g"):format(what, err))
  if not (err < 1e-5) then error(("schedule_softmax: %s: mismatch (relative L2 error %g)"):format(what, err)) end
end
check(s, "hand-written schedule:")

-- The trace rebuilds the same schedule in a fresh one.
local fresh = stof.schedule({P})
load(s:trace())()(fresh, stof)
assert(fresh:print_loop_nest() == s:print_loop_nest(), "the replayed schedule differs")
check(fresh, "replayed from its trace:")
print("ok")
