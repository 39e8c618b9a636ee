-- Scheduled CUDA kernels against the memory bandwidth of the same GPU, in one run: row
-- softmax and layer norm (with gamma/beta) of an [M, N] float16 tensor (computed in float32),
-- one CUDA block per row with the row reductions bound to threadIdx.x (cross-thread
-- all-reduce; examples/schedule_softmax_cuda.lua and schedule_layernorm_cuda.lua hold the
-- same schedules with checks), for several threads per row; and a scheduled identity copy
-- Y[i, j] = X[i, j], the device-to-device copy bandwidth these are measured against. Each
-- kernel is timed with f:time (CUDA events around reps back-to-back launches). Prints one
-- JSON line per measurement: GB/s = (bytes read + bytes written) / time; "of_copy" is the
-- fraction of the copy's GB/s. bench/bench_dense_peers.py --rows MxN measures torch (x.clone,
-- softmax, layer_norm, cuBLAS GEMM) on the same GPU.
-- Needs a GPU (prints a skip line without one).
--
--   build-gpu/stof run bench/bench_schedule.lua [M N REPS]
local stof = require("stof")
local te = stof.te

local M, N = tonumber(arg[1]) or 16384, tonumber(arg[2]) or 4096
local REPS = tonumber(arg[3]) or 100
local eps = 1e-5

local function softmax_graph()
  local X = te.placeholder({M, N}, "float16", "X")
  local r = te.reduce_axis(N, "r")
  local mx = te.compute({M}, function(i) return te.max(X[{i, r}]:astype("float32"), {r}) end, "mx")
  local e = te.compute({M, N}, function(i, j) return te.exp(X[{i, j}]:astype("float32") - mx[i]) end, "e")
  local c = te.reduce_axis(N, "c")
  local sm = te.compute({M}, function(i) return te.sum(e[{i, c}], {c}) end, "sm")
  local P = te.compute({M, N}, function(i, j) return (e[{i, j}] / sm[i]):astype("float16") end, "P")
  return {X, P}, P
end

local function layernorm_graph()
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
  return {X, gamma, beta, Y}, Y
end

-- rows on blockIdx.x, columns over `threads` threads; the row statistics at the row loop,
-- their reduce loops over the same threads.
local function row_schedule(out, main, stats, inline, threads)
  local s = stof.schedule({out})
  for _, b in ipairs(inline) do s:compute_inline(s:get_block(b)) end
  local i, j = table.unpack(s:get_loops(s:get_block(main)))
  local jo, ji = s:split(j, {stof.INFER, threads})
  s:bind(i, "blockIdx.x")
  s:bind(ji, "threadIdx.x")
  s:unroll(jo)
  for k = #stats, 1, -1 do s:compute_at(s:get_block(stats[k]), i) end
  for _, name in ipairs(stats) do
    local loops = s:get_loops(s:get_block(name))
    local ro, ri = s:split(loops[#loops], {stof.INFER, threads})
    s:bind(ri, "threadIdx.x")
    s:unroll(ro)
  end
  return s
end

local function copy_schedule(threads)
  local X = te.placeholder({M, N}, "float16", "X")
  local Y = te.compute({M, N}, function(i, j) return X[{i, j}] end, "Y")
  local s = stof.schedule({Y})
  local i, j = table.unpack(s:get_loops(s:get_block("Y")))
  local jo, ji = s:split(j, {stof.INFER, threads})
  s:bind(i, "blockIdx.x")
  s:bind(ji, "threadIdx.x")
  s:unroll(jo)
  return s, {X, Y}
end

local function json(t)
  local keys, parts = {}, {}
  for k in pairs(t) do keys[#keys + 1] = k end
  table.sort(keys)
  for _, k in ipairs(keys) do
    local v = t[k]
    parts[#parts + 1] = ("%q:%s"):format(k, type(v) == "string" and ("%q"):format(v) or ("%.6g"):format(v))
  end
  return "{" .. table.concat(parts, ",") .. "}"
end

local bytes_rw = 2 * M * N * 2 -- read X, write the output (float16)

-- The copy first: without a GPU the build says so and the bench stops.
local cs, cargs = copy_schedule(512)
local ok, fcopy = pcall(stof.build, cs, cargs, {target = "cuda"})
if not ok then
  if tostring(fcopy):find("DeviceError", 1, true) then
    print(json({bench = "schedule", skipped = "no GPU: " .. tostring(fcopy):sub(1, 120)}))
    return
  end
  error(fcopy, 0)
end
local x = stof.rand({M, N}, "float16", 1):to("cuda")
local y = stof.zeros({M, N}, "float16"):to("cuda")
local g, b = stof.rand({N}, "float16", 2):to("cuda"), stof.rand({N}, "float16", 3):to("cuda")

local copy_gbs = 0
for _, t in ipairs({256, 512, 1024}) do
  local s2, a2 = copy_schedule(t)
  local f = stof.build(s2, a2, {target = "cuda"})
  local ms = f:time(x, y, {reps = REPS, warmup = 10})
  local gbs = bytes_rw / (ms * 1e-3) / 1e9
  copy_gbs = math.max(copy_gbs, gbs)
  print(json({op = "copy (scheduled)", M = M, N = N, threads = t, us = ms * 1e3, GBs = gbs}))
end

for _, t in ipairs({256, 512, 1024}) do
  if N % t == 0 then
    local args, P = softmax_graph()
    local f = stof.build(row_schedule(P, "P", {"mx", "sm"}, {"e"}, t), args, {target = "cuda"})
    local ms = f:time(x, y, {reps = REPS, warmup = 10})
    local gbs = bytes_rw / (ms * 1e-3) / 1e9
    print(json({op = "softmax", M = M, N = N, threads = t, us = ms * 1e3, GBs = gbs, of_copy = gbs / copy_gbs}))
  end
end

for _, t in ipairs({256, 512, 1024}) do
  if N % t == 0 then
    local args, Y = layernorm_graph()
    local f = stof.build(row_schedule(Y, "Y", {"mean", "var"}, {}, t), args, {target = "cuda"})
    local ms = f:time(x, g, b, y, {reps = REPS, warmup = 10})
    local gbs = (bytes_rw + 2 * N * 2) / (ms * 1e-3) / 1e9
    print(json({op = "layernorm", M = M, N = N, threads = t, us = ms * 1e3, GBs = gbs, of_copy = gbs / copy_gbs}))
  end
end
