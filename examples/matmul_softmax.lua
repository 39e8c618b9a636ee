-- A matrix product followed by a row softmax, written as tensor expressions, evaluated by
-- stof's reference interpreter on random inputs, and checked against plain Lua loops.
--
--   stof run examples/matmul_softmax.lua [M N K]
local stof = require("stof")
local te = stof.te

local M, N, K = tonumber(arg[1]) or 24, tonumber(arg[2]) or 40, tonumber(arg[3]) or 32

-- C = A @ B, then P = softmax(C) along each row (max-subtracted for stability).
local A = te.placeholder({M, K}, "float32", "A")
local B = te.placeholder({K, N}, "float32", "B")
local k = te.reduce_axis(K, "k")
local C = te.compute({M, N}, function(i, j) return te.sum(A[{i, k}] * B[{k, j}], {k}) end, "C")
local j1 = te.reduce_axis(N, "j1")
local rowmax = te.compute({M}, function(i) return te.max(C[{i, j1}], {j1}) end, "rowmax")
local E = te.compute({M, N}, function(i, j) return te.exp(C[{i, j}] - rowmax[i]) end, "E")
local j2 = te.reduce_axis(N, "j2")
local rowsum = te.compute({M}, function(i) return te.sum(E[{i, j2}], {j2}) end, "rowsum")
local P = te.compute({M, N}, function(i, j) return E[{i, j}] / rowsum[i] end, "P")

local a, b = stof.rand({M, K}, "float32", 1), stof.rand({K, N}, "float32", 2)
local p = stof.eval(P, {[A] = a, [B] = b})

-- The same in plain Lua.
local at, bt, pt = a:totable(), b:totable(), p:totable()
local maxerr, maxrowerr = 0, 0
for i = 1, M do
  local c, m = {}, -math.huge
  for j = 1, N do
    local s = 0
    for kk = 1, K do s = s + at[i][kk] * bt[kk][j] end
    c[j] = s
    if s > m then m = s end
  end
  local sum = 0
  for j = 1, N do c[j] = math.exp(c[j] - m); sum = sum + c[j] end
  local rowtotal = 0
  for j = 1, N do
    local err = math.abs(pt[i][j] - c[j] / sum)
    if err > maxerr then maxerr = err end
    rowtotal = rowtotal + pt[i][j]
  end
  maxrowerr = math.max(maxrowerr, math.abs(rowtotal - 1))
end

print(("matmul [%d x %d] @ [%d x %d], then row softmax (float32)"):format(M, K, K, N))
print(("ops in the graph: A, B, C, rowmax, E, rowsum, P; pattern of C: %s"):format(C.pattern))
print(("max |stof - Lua| = %.3g; max |row sum - 1| = %.3g"):format(maxerr, maxrowerr))
if not (maxerr < 1e-6 and maxrowerr < 1e-5) then
  error(("matmul_softmax: mismatch (max error %g)"):format(maxerr))
end
print("ok")
