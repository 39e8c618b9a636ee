-- A scheduled matmul built for CUDA through Lua: f(...) against stof.eval, then f:time
-- (stof_func_time: reps launches between CUDA events) gives a positive, finite mean.
-- Run by scripts/gpu-check.sh on the GPU machine; prints a skip line without a GPU.
local stof = require("stof")
local te = stof.te
local M, N, K = 128, 96, 64
local A = te.placeholder({M, K}, "float32", "A")
local B = te.placeholder({K, N}, "float32", "B")
local k = te.reduce_axis(K, "k")
local C = te.compute({M, N}, function(i, j) return te.sum(A[{i, k}] * B[{k, j}], {k}) end, "C")
local s = stof.schedule({C})
local l = s:get_loops(s:get_block("C"))
local io, jo, ii, ji = s:tile(l[1], l[2], 16, 16)
s:bind(io, "blockIdx.y")
s:bind(jo, "blockIdx.x")
s:bind(ii, "threadIdx.y")
s:bind(ji, "threadIdx.x")
local ok, f = pcall(stof.build, s, {A, B, C}, {target = "cuda"})
if not ok then
  assert(tostring(f):find("DeviceError: build: the CUDA source compiled", 1, true), f)
  print("no GPU: skipped")
  return
end
local a, b = stof.rand({M, K}, "float32", 1), stof.rand({K, N}, "float32", 2)
local c = stof.zeros({M, N}):fill(0 / 0):to("cuda")
local da, db = a:to("cuda"), b:to("cuda")
f(da, db, c)
local err = stof.rel_l2(c:to("cpu"), stof.eval(C, {[A] = a, [B] = b}))
print(("matmul %dx%dx%d on CUDA: relative L2 %.3g"):format(M, N, K, err))
assert(err < 1e-5)
local ms = f:time(da, db, c, {reps = 20, warmup = 2})
print(("f:time: %.4f ms per call"):format(ms))
assert(ms > 0 and ms < math.huge)
assert(f:time(da, db, c) > 0) -- the defaults (reps 50, warmup 5)
local okt, why = pcall(f.time, f, a, db, c)
assert(not okt and tostring(why):find("time: argument 1 (A) is on the CPU", 1, true), why)
print("gpu schedule through Lua ok")
