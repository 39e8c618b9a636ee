-- Layer norm (with gamma and beta) of an [M, N] float16 tensor on the GPU, computed in
-- float32 and stored as float16, one CUDA block per row. The mean and the variance are
-- reductions across the block's threads (reduce loops bound to threadIdx.x: each thread
-- folds its share, then an all-reduce gives every thread the result, kept in a register);
-- the normalisation is bound the same way. X is read three times (mean, variance, output),
-- the second and third from L1/L2, so DRAM sees one read of X and one write of Y.
-- Prints the CUDA source. With a GPU it runs and checks against the reference interpreter;
-- without one the build proves that the source compiles (NVRTC) and the run is skipped.
--
--   stof run examples/schedule_layernorm_cuda.lua [M N THREADS]
local stof = require("stof")
local te = stof.te

local M, N = tonumber(arg[1]) or 64, tonumber(arg[2]) or 1024
local V = 8 -- elements per vector access (16 bytes of float16)
local T = tonumber(arg[3]) or math.max(1, math.min(512, N // V)) -- threads per row
local eps = 1e-5

local X = te.placeholder({M, N}, "float16", "X")
local gamma = te.placeholder({N}, "float16", "gamma")
local beta = te.placeholder({N}, "float16", "beta")
local r = te.reduce_axis(N, "r")
local mean = te.compute({M}, function(i) return te.sum(X[{i, r}]:astype("float32") * (1 / N), {r}) end, "mean")
local c = te.reduce_axis(N, "c")
local var = te.compute({M}, function(i)
  local d = X[{i, c}]:astype("float32") - mean[i]
  return te.sum(d * d * (1 / N), {c})
end, "var")
local Y = te.compute({M, N}, function(i, j)
  local y = (X[{i, j}]:astype("float32") - mean[i]) * te.rsqrt(var[i] + eps)
  return (y * gamma[j]:astype("float32") + beta[j]:astype("float32")):astype("float16")
end, "Y")

-- The schedule: rows on blockIdx.x; every row's columns split into (serial, T threads, V
-- vectorized): thread t takes the runs of V contiguous columns at t * V, (T + t) * V, ..., so
-- each access of X, gamma, beta and Y moves 16 bytes (V = 8 halves). The statistics of a row
-- are computed at its row loop, their reduce loops split the same way.
local function schedule(threads, vec)
  local s = stof.schedule({Y})
  local i, j = table.unpack(s:get_loops(s:get_block("Y")))
  local jo, jt, jv = s:split(j, {stof.INFER, threads, vec})
  s:bind(i, "blockIdx.x")
  s:bind(jt, "threadIdx.x")
  s:unroll(jo)
  s:vectorize(jv)
  s:compute_at(s:get_block("var"), i)
  s:compute_at(s:get_block("mean"), i)
  for _, name in ipairs({"mean", "var"}) do
    local loops = s:get_loops(s:get_block(name))
    local ro, rt, rv = s:split(loops[#loops], {stof.INFER, threads, vec})
    s:bind(rt, "threadIdx.x")
    s:unroll(ro)
    s:vectorize(rv)
  end
  return s
end

local s = schedule(T, V)
print(("layer norm of [%d x %d] float16, %d threads per row, %d-element vectors, for CUDA\n"):format(M, N, T, V))
print(s:print_loop_nest())
local args = {X, gamma, beta, Y}
local src = stof.build_source(s, args, {target = "cuda"})
assert(src:find("__shfl_xor_sync", 1, true) and src:find("all-reduce (sum) of var over threadIdx.x", 1, true))
if N % (T * V) == 0 then assert(src:find("= *(const uint4 *)&", 1, true) and src:find("*(uint4 *)&", 1, true)) end
print(src)

-- The C backend runs the same schedule serially (bound loops are loops there).
local x, g, b = stof.rand({M, N}, "float16", 1), stof.rand({N}, "float16", 2), stof.rand({N}, "float16", 3)
local want = stof.eval(Y, {[X] = x, [gamma] = g, [beta] = b})
local fc = stof.build(s, args, {target = "c"})
local yc = stof.zeros({M, N}, "float16"):fill(0 / 0)
fc(x, g, b, yc)
local errc = stof.rel_l2(yc, want)
print(("C backend: relative L2 error against stof.eval %.3g"):format(errc))
assert(errc < 1e-2, "schedule_layernorm_cuda: the C backend disagrees")

local ok, f = pcall(stof.build, s, args, {target = "cuda"})
if not ok then
  if not tostring(f):find("DeviceError: build: the CUDA source compiled", 1, true) then error(f, 0) end
  print("the CUDA source compiled; no GPU is present, so the run is skipped")
  print("ok")
  return
end

local y = stof.zeros({M, N}, "float16"):fill(0 / 0):to("cuda")
f(x:to("cuda"), g:to("cuda"), b:to("cuda"), y)
local err = stof.rel_l2(y:to("cpu"), want)
print(("relative L2 error against stof.eval: %.3g"):format(err))
if not (err < 1e-2) then error(("schedule_layernorm_cuda: mismatch (relative L2 error %g)"):format(err)) end
print("ok")
