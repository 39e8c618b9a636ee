-- Row softmax of an [M, N] float16 tensor on the GPU (computed in float32, stored as float16),
-- one CUDA block per row. The row max and the row sum are reductions across the block's
-- threads: their reduce loops are bound to threadIdx.x, so each thread folds its share and an
-- all-reduce (warp shuffles, then shared memory across warps) gives every thread the result,
-- kept in a register (a buffer computed at the row loop, private to each thread). The
-- exponential is inlined: X is read three times (max, sum, output), the second and third
-- from L1/L2, so DRAM sees one read of X and one write of P.
-- Prints the CUDA source. With a GPU it runs and checks against the reference interpreter;
-- without one the build proves that the source compiles (NVRTC) and the run is skipped.
--
--   stof run examples/schedule_softmax_cuda.lua [M N THREADS]
local stof = require("stof")
local te = stof.te

local M, N = tonumber(arg[1]) or 64, tonumber(arg[2]) or 1024
local V = 8 -- elements per vector access (16 bytes of float16)
local T = tonumber(arg[3]) or math.max(1, math.min(512, N // V)) -- threads per row

local X = te.placeholder({M, N}, "float16", "X")
local r = te.reduce_axis(N, "r")
local mx = te.compute({M}, function(i) return te.max(X[{i, r}]:astype("float32"), {r}) end, "mx")
local e = te.compute({M, N}, function(i, j) return te.exp(X[{i, j}]:astype("float32") - mx[i]) end, "e")
local c = te.reduce_axis(N, "c")
local sm = te.compute({M}, function(i) return te.sum(e[{i, c}], {c}) end, "sm")
-- one division per row, a multiplication per element (as torch does)
local inv = te.compute({M}, function(i) return 1 / sm[i] end, "inv")
local P = te.compute({M, N}, function(i, j) return (e[{i, j}] * inv[i]):astype("float16") end, "P")

-- The schedule: rows on blockIdx.x; every row's columns split into (serial, T threads, V
-- vectorized): thread t takes the runs of V contiguous columns at t * V, (T + t) * V, ..., so
-- each access of X and P moves 16 bytes (V = 8 halves) per thread and a warp 512 contiguous
-- bytes. The reduce loops of mx and sm are split the same way (the vectorized reduce loop
-- folds its V elements in order into the thread's accumulator).
local function schedule(threads, vec)
  local s = stof.schedule({P})
  s:compute_inline(s:get_block("e"))
  local i, j = table.unpack(s:get_loops(s:get_block("P")))
  local jo, jt, jv = s:split(j, {stof.INFER, threads, vec})
  s:bind(i, "blockIdx.x")
  s:bind(jt, "threadIdx.x")
  s:unroll(jo)
  s:vectorize(jv)
  s:compute_at(s:get_block("inv"), i) -- a scalar per row: every thread computes it
  s:compute_at(s:get_block("sm"), i)
  s:compute_at(s:get_block("mx"), i)
  for _, name in ipairs({"mx", "sm"}) do
    local loops = s:get_loops(s:get_block(name))
    local ro, rt, rv = s:split(loops[#loops], {stof.INFER, threads, vec})
    s:bind(rt, "threadIdx.x")
    s:unroll(ro)
    s:vectorize(rv)
  end
  return s
end

local s = schedule(T, V)
print(("row softmax of [%d x %d] float16, %d threads per row, %d-element vectors, for CUDA\n"):format(M, N, T, V))
print(s:print_loop_nest())
local args = {X, P}
local src = stof.build_source(s, args, {target = "cuda"})
assert(src:find("__shfl_xor_sync", 1, true) and src:find("all-reduce (max) of mx over threadIdx.x", 1, true))
if N % (T * V) == 0 then assert(src:find("= *(const uint4 *)&", 1, true) and src:find("*(uint4 *)&", 1, true)) end
print(src)

-- The C backend runs the same schedule serially (bound loops are loops there).
local x = stof.rand({M, N}, "float16", 1)
local want = stof.eval(P, {[X] = x})
local fc = stof.build(s, args, {target = "c"})
local pc = stof.zeros({M, N}, "float16"):fill(0 / 0)
fc(x, pc)
local errc = stof.rel_l2(pc, want)
print(("C backend: relative L2 error against stof.eval %.3g"):format(errc))
assert(errc < 1e-2, "schedule_softmax_cuda: the C backend disagrees")

local ok, f = pcall(stof.build, s, args, {target = "cuda"})
if not ok then
  if not tostring(f):find("DeviceError: build: the CUDA source compiled", 1, true) then error(f, 0) end
  print("the CUDA source compiled; no GPU is present, so the run is skipped")
  print("ok")
  return
end

local p = stof.zeros({M, N}, "float16"):fill(0 / 0):to("cuda")
f(x:to("cuda"), p)
local err = stof.rel_l2(p:to("cpu"), want)
print(("relative L2 error against stof.eval: %.3g"):format(err))
if not (err < 1e-2) then error(("schedule_softmax_cuda: mismatch (relative L2 error %g)"):format(err)) end
print("ok")
