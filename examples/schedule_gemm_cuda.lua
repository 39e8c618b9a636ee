-- An fp16 GEMM + bias + GELU scheduled for the GPU: each output tile of 16 x 16 is a CUDA
-- block (blockIdx.y, blockIdx.x) and each element a thread (threadIdx.y, threadIdx.x), the
-- reduction split by 8 and unrolled; the epilogue is a second kernel bound the same way.
-- Prints the generated CUDA source. With a GPU it builds, runs and checks the result
-- against the reference interpreter; without one the build proves the source compiles
-- (NVRTC, sm_80) and the run is skipped.
--
--   stof run examples/schedule_gemm_cuda.lua [M N K]
local stof = require("stof")
local te = stof.te

local M, N, K = tonumber(arg[1]) or 96, tonumber(arg[2]) or 80, tonumber(arg[3]) or 64

local A = te.placeholder({M, K}, "float16", "A")
local W = te.placeholder({K, N}, "float16", "W")
local bias = te.placeholder({N}, "float16", "bias")
local k = te.reduce_axis(K, "k")
local C = te.compute({M, N}, function(i, j)
  return te.sum(A[{i, k}]:astype("float32") * W[{k, j}]:astype("float32"), {k})
end, "C")
local D = te.compute({M, N}, function(i, j)
  local z = C[{i, j}] + bias[j]:astype("float32")
  return (0.5 * z * (1 + te.erf(z * (1 / math.sqrt(2))))):astype("float16")
end, "D")

local s = stof.schedule({D})
local function bind_tiles(block)
  local loops = s:get_loops(s:get_block(block))
  local io, jo, ii, ji = s:tile(loops[1], loops[2], 16, 16)
  s:bind(io, "blockIdx.y")
  s:bind(jo, "blockIdx.x")
  s:bind(ii, "threadIdx.y")
  s:bind(ji, "threadIdx.x")
  return loops[3]
end
local kk = bind_tiles("C")
local _, ki = s:split(kk, {stof.INFER, 8})
s:unroll(ki)
bind_tiles("D")

print(("fp16 GEMM [%d x %d] @ [%d x %d] + bias, GELU, for CUDA\n"):format(M, K, K, N))
print(s:print_loop_nest())
local args = {A, W, bias, D}
local src = stof.build_source(s, args, {target = "cuda"})
assert(src:find('extern "C" __global__', 1, true) and src:find("threadIdx.x", 1, true))
print(src)
assert(stof.build_source(s, args, {target = "c"}):find("int stof_kernel(", 1, true))

-- What CUDA refuses, at build time: a reduce loop bound to a thread (rfactor it first), and
-- more than 1024 threads per block.
local bad = stof.schedule({D})
local bl = bad:get_loops(bad:get_block("C"))
local ok_bind, why = pcall(bad.bind, bad, bl[3], "threadIdx.z")
assert(not ok_bind and tostring(why):find("ScheduleError", 1, true), why)
print("refused: " .. tostring(why))
bad:bind(bl[1], "threadIdx.y")
bad:bind(bl[2], "threadIdx.x")
local ok_src, why2 = pcall(stof.build_source, bad, args, {target = "cuda"})
assert(not ok_src and tostring(why2):find("ScheduleError: cuda: kernel stof_k0_C launches threads per block", 1, true), why2)
print("refused: " .. tostring(why2))

local ok, f = pcall(stof.build, s, args, {target = "cuda"})
if not ok then
  if not tostring(f):find("DeviceError: build: the CUDA source compiled", 1, true) then error(f, 0) end
  print("the CUDA source compiled; no GPU is present, so the run is skipped")
  print("ok")
  return
end

local a, w, b = stof.rand({M, K}, "float16", 1), stof.rand({K, N}, "float16", 2), stof.rand({N}, "float16", 3)
local want = stof.eval(D, {[A] = a, [W] = w, [bias] = b})
local d = stof.zeros({M, N}, "float16"):fill(0 / 0):to("cuda")
f(a:to("cuda"), w:to("cuda"), b:to("cuda"), d)
local err = stof.rel_l2(d:to("cpu"), want)
print(("relative L2 error against stof.eval: %.3g"):format(err))
if not (err < 1e-2) then error(("schedule_gemm_cuda: mismatch (relative L2 error %g)"):format(err)) end
print("ok")
