-- An fp16 GEMM + bias + GELU on tensor cores, scheduled by hand:
--  * each CUDA block computes a BM x BN tile of D; its warps (threadIdx.z, threadIdx.y) a
--    WM x WN sub-tile each, accumulated in registers (cache_write "warp");
--  * the warp's inner nest (WM x WN x 16) is tensorized into mma.sync m16n8k16;
--  * A and W tiles of BK columns/rows are staged in shared memory (cache_read "shared"),
--    fetched by all threads together with 16-byte asynchronous copies (cp.async), rows
--    padded against bank conflicts, and the loop over K pipelined over STAGES buffers;
--  * the epilogue (bias, GELU, f16) is applied while writing the accumulators back.
-- The same schedule runs on the C backend (loops as written) and is checked there against
-- the reference interpreter; with a GPU it runs on it and is checked too. Without one, the
-- CUDA source is compiled by NVRTC and the run is skipped.
--
--   stof run examples/schedule_gemm_tensorcore.lua [M N K] [--print]
local stof = require("stof")
local te = stof.te

local M, N, K = tonumber(arg[1]) or 256, tonumber(arg[2]) or 256, tonumber(arg[3]) or 128
local show = arg[4] == "--print" or arg[1] == "--print"
local BM, BN, BK = 128, 128, 32     -- CUDA block tile
local WARPS_M, WARPS_N = 2, 4       -- warps per block: 8 (256 threads)
local STAGES = 3
-- another tiling: STOF_GEMM_CFG="BM,BN,BK,WARPS_M,WARPS_N,STAGES"
local cfg = os.getenv("STOF_GEMM_CFG")
if cfg then
  BM, BN, BK, WARPS_M, WARPS_N, STAGES = cfg:match("^(%d+),(%d+),(%d+),(%d+),(%d+),(%d+)$")
  assert(BM, "STOF_GEMM_CFG: expected BM,BN,BK,WARPS_M,WARPS_N,STAGES, got " .. cfg)
  BM, BN, BK, WARPS_M, WARPS_N, STAGES = tonumber(BM), tonumber(BN), tonumber(BK), tonumber(WARPS_M),
    tonumber(WARPS_N), tonumber(STAGES)
end
local check = os.getenv("STOF_GEMM_NOCHECK") ~= "1"
-- STOF_GEMM_INTRIN=wgmma: Hopper warpgroup MMA instead (one warpgroup per 64 x BN rows,
-- BK = 64, operand tiles in wgmma's swizzled layout; WARPS_N must be 1)
local wgmma = os.getenv("STOF_GEMM_INTRIN") == "wgmma"
if wgmma and not cfg then BM, BN, BK, WARPS_M, WARPS_N, STAGES = 128, 128, 64, 2, 1, 3 end

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

-- Operand `input` of block cb staged in shared memory at loop at, fetched by all threads
-- together: its elements in runs of 8 (16-byte copies), the runs spread over the thread
-- loops (extents `threads`, bound to `tags`, outermost first). Returns the tile's block.
local function stage_tile(s, cb, input, at, threads, tags)
  local sh = s:cache_read(cb, input, "shared")
  s:compute_at(sh, at)
  local r, c = table.unpack(s:get_loops(sh))
  local co, cv = s:split(c, {stof.INFER, 8})
  local parts = {stof.INFER}
  for _, t in ipairs(threads) do parts[#parts + 1] = t end
  local loops = {s:split(s:fuse(r, co), parts)}
  for k, tag in ipairs(tags) do s:bind(loops[k + 1], tag) end
  s:vectorize(cv)
  return sh
end

local function schedule_wgmma()
  local s = stof.schedule({D})
  local cb = s:get_block("C")
  s:compute_inline(s:cache_write(cb, "warp"))
  local i, j, kk = table.unpack(s:get_loops(cb))
  local ib, iw, im = s:split(i, {stof.INFER, WARPS_M, 64})
  local jb, jm = s:split(j, {stof.INFER, BN})
  local ko, kt = s:split(kk, {stof.INFER, BK})
  s:reorder({ib, jb, iw, ko, im, jm, kt})
  s:bind(ib, "blockIdx.y")
  s:bind(jb, "blockIdx.x")
  s:bind(iw, "threadIdx.y")
  s:tensorize(im, "wgmma_m64nNk16")  -- the warpgroup's 64 x BN x BK: wgmma m64nBNk16
  for input = 0, 1 do stage_tile(s, cb, input, ko, {WARPS_M, 128}, {"threadIdx.y", "threadIdx.x"}) end
  s:annotate(ko, "pipeline_stages", tostring(STAGES))
  s:reverse_compute_at(s:get_block("D"), iw)
  return s
end

local function schedule()
  if wgmma then return schedule_wgmma() end
  local s = stof.schedule({D})
  local cb = s:get_block("C")
  -- accumulate in the warps' registers; the epilogue reads them directly
  local copy = s:cache_write(cb, "warp")
  s:compute_inline(copy)
  local i, j, kk = table.unpack(s:get_loops(cb))
  local ib, iw, im = s:split(i, {stof.INFER, WARPS_M, BM // WARPS_M})
  local jb, jw, jm = s:split(j, {stof.INFER, WARPS_N, BN // WARPS_N})
  local ko, kt = s:split(kk, {stof.INFER, BK})
  s:reorder({ib, jb, iw, jw, ko, im, jm, kt})
  s:bind(ib, "blockIdx.y")
  s:bind(jb, "blockIdx.x")
  s:bind(iw, "threadIdx.z")
  s:bind(jw, "threadIdx.y")
  s:tensorize(im, "mma_m16n8k16")  -- the warp's WM x WN x BK: mma.sync m16n8k16, k-steps pipelined
  -- operand tiles in shared memory, fetched cooperatively 16 bytes per thread
  for input = 0, 1 do
    local sh = stage_tile(s, cb, input, ko, {WARPS_M, WARPS_N, 32}, {"threadIdx.z", "threadIdx.y", "threadIdx.x"})
    s:annotate(sh, "pad", "8")
  end
  s:annotate(ko, "pipeline_stages", tostring(STAGES))
  -- bias + GELU while the warps write their tiles back
  s:reverse_compute_at(s:get_block("D"), jw)
  return s
end

local s = schedule()
local args = {A, W, bias, D}
print(("fp16 GEMM [%d x %d] @ [%d x %d] + bias, GELU, on tensor cores; block %dx%dx%d, %dx%d warps, %d stages"):format(
  M, K, K, N, BM, BN, BK, WARPS_M, WARPS_N, STAGES))
if show then
  print(s:print_loop_nest())
  print(stof.build_source(s, args, {target = "cuda"}))
end

local a, w, b = stof.rand({M, K}, "float16", 1), stof.rand({K, N}, "float16", 2), stof.rand({N}, "float16", 3)

-- The reference interpreter is slow (float64, an element at a time): a large problem is
-- checked on R rows spread over every tile and warp (row i of D depends on row i of A
-- alone), on a graph of that size.
local rows = {}
if M * N * K <= 256 * 256 * 256 then
  for i = 1, M do rows[i] = i end
else
  for i = 0, 15 do rows[#rows + 1] = (i * 1031 + (i % 4) * 17) % M + 1 end
  rows[#rows + 1] = M
end
local R = #rows
local function pick(t)
  local all, out = t:totable(), {}
  for i, r in ipairs(rows) do out[i] = all[r] end
  return stof.tensor(out, "float16")
end
local want
if check then
  local rA, rW, rbias, rD = gemm_bias_gelu(R, N, K)
  want = stof.eval(rD, {[rA] = pick(a), [rW] = w, [rbias] = b})
end

-- the C backend runs the same loops
if check and R == M then
  local f = stof.build(s, args, {target = "c"})
  local d = stof.zeros({M, N}, "float16"):fill(0 / 0)
  f(a, w, b, d)
  local err = stof.rel_l2(d, want)
  print(("C backend: relative L2 error against stof.eval %.3g"):format(err))
  if not (err < 1e-2) then error(("schedule_gemm_tensorcore: C backend mismatch (%g)"):format(err)) end
end

-- the trace rebuilds the same schedule
local fresh = stof.schedule({D})
load(s:trace())()(fresh, stof)
assert(fresh:print_loop_nest() == s:print_loop_nest(), "the replayed schedule differs")

local ok, f = pcall(stof.build, s, args, {target = "cuda"})
if not ok then
  if not tostring(f):find("DeviceError: build: the CUDA source compiled", 1, true) then error(f, 0) end
  print("the CUDA source compiled; no GPU is present, so the run is skipped")
  print("ok")
  return
end
local da, dw, db = a:to("cuda"), w:to("cuda"), b:to("cuda")
local d = stof.zeros({M, N}, "float16"):fill(0 / 0):to("cuda")
f(da, dw, db, d)
if check then
  local err = stof.rel_l2(pick(d:to("cpu")), want)
  print(("GPU: relative L2 error against stof.eval (%d of %d rows) %.3g"):format(R, M, err))
  if not (err < 1e-2) then error(("schedule_gemm_tensorcore: GPU mismatch (relative L2 error %g)"):format(err)) end
end
local ms = f:time(da, dw, db, d, {reps = 30, warmup = 5})
print(("GPU: %.4f ms per call (mean of 30), %.1f TFLOP/s"):format(ms, 2 * M * N * K / (ms * 1e-3) / 1e12))
print("ok")
