-- An fp16 GEMM + bias + GELU scheduled for the GPU: each output tile of 16 x 16 is a CUDA
-- block (blockIdx.y, blockIdx.x) and each element a thread (threadIdx.y, threadIdx.x), the
-- reduction split by 8 and unrolled; the epilogue is a second kernel bound the same way.
-- Prints the generated CUDA source. With a GPU it builds, runs, checks the result against
-- the reference interpreter and times it (f:time); without one the build proves the
-- source compiles (NVRTC, sm_80) and the run is skipped.
--
--   stof run examples/schedule_gemm_cuda.lua [M N K]
local stof = require("stof")
local te = stof.te

local M, N, K = tonumber(arg[1]) or 96, tonumber(arg[2]) or 80, tonumber(arg[3]) or 64

-- D = GELU(A @ W + bias), fp16 in and out, accumulated in fp32.
local function gemm_bias_gelu(m, n, kk)
  local A = te.placeholder({m, kk}, "float16", "A")
  local W = te.placeholder({kk, n}, "float16", "W")
  local bias = te.placeholder({n}, "float16", "bias")
  local k = te.reduce_axis(kk, "k")
  local C = te.compute({m, n}, function(i, j)
    return te.sum(A[{i, k}]:astype("float32") * W[{k, j}]:astype("float32"), {k})
  end, "C")
  local D = te.compute({m, n}, function(i, j)
    local z = C[{i, j}] + bias[j]:astype("float32")
    return (0.5 * z * (1 + te.erf(z * (1 / math.sqrt(2))))):astype("float16")
  end, "D")
  return A, W, bias, D
end

local A, W, bias, D = gemm_bias_gelu(M, N, K)
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

-- What CUDA refuses: a reduce loop bound to a CUDA block (blocks cannot combine partial
-- results; a reduce loop bound to threadIdx is a cross-thread reduction), and
-- more than 1024 threads per block. Shown on a graph of fixed size (64 x 64 threads, each
-- dimension legal, 4096 in all), whatever M, N, K are.
do
  local bA, bW, bbias, bD = gemm_bias_gelu(64, 64, 16)
  local bad = stof.schedule({bD})
  local bl = bad:get_loops(bad:get_block("C"))
  local ok_bind, why = pcall(bad.bind, bad, bl[3], "blockIdx.z")
  assert(not ok_bind and tostring(why):find("ScheduleError", 1, true), why)
  print("refused: " .. tostring(why))
  bad:bind(bl[1], "threadIdx.y")
  bad:bind(bl[2], "threadIdx.x")
  local ok_src, why2 = pcall(stof.build_source, bad, {bA, bW, bbias, bD}, {target = "cuda"})
  assert(not ok_src and tostring(why2):find("ScheduleError: cuda: kernel stof_k0_C launches threads per block", 1, true), why2)
  print("refused: " .. tostring(why2))
end

local ok, f = pcall(stof.build, s, args, {target = "cuda"})
if not ok then
  if not tostring(f):find("DeviceError: build: the CUDA source compiled", 1, true) then error(f, 0) end
  print("the CUDA source compiled; no GPU is present, so the run is skipped")
  print("ok")
  return
end

local a, w, b = stof.rand({M, K}, "float16", 1), stof.rand({K, N}, "float16", 2), stof.rand({N}, "float16", 3)
local da, dw, db = a:to("cuda"), w:to("cuda"), b:to("cuda")
local d = stof.zeros({M, N}, "float16"):fill(0 / 0):to("cuda")
f(da, dw, db, d)

-- The reference interpreter is slow (float64, one element at a time, about 40 M
-- multiply-adds a second): a large problem checks its first R rows only (row i of D
-- depends on row i of A alone), on a graph of that size.
local R = math.min(M, math.max(16, (1 << 25) // (N * K)))
local got, want
if R == M then
  got, want = d:to("cpu"), stof.eval(D, {[A] = a, [W] = w, [bias] = b})
else
  local function first_rows(t) return stof.tensor(table.move(t:totable(), 1, R, 1, {}), "float16") end
  local rA, rW, rbias, rD = gemm_bias_gelu(R, N, K)
  got, want = first_rows(d:to("cpu")), stof.eval(rD, {[rA] = first_rows(a), [rW] = w, [rbias] = b})
end
local err = stof.rel_l2(got, want)
print(("relative L2 error against stof.eval (%d of %d rows): %.3g"):format(R, M, err))
if not (err < 1e-2) then error(("schedule_gemm_cuda: mismatch (relative L2 error %g)"):format(err)) end

local ms = f:time(da, dw, db, d, {reps = 20, warmup = 3})
print(("f:time: %.4f ms per call (mean of 20), %.2f TFLOP/s"):format(ms, 2 * M * N * K / (ms * 1e-3) / 1e12))
print("ok")
