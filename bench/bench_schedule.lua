-- Scheduled CUDA kernels against the memory bandwidth of the same GPU, in one run: row
-- softmax and layer norm (with gamma/beta) of an [M, N] float16 tensor (computed in float32),
-- one CUDA block per row with the row reductions bound to threadIdx.x (cross-thread
-- all-reduce; examples/schedule_softmax_cuda.lua and schedule_layernorm_cuda.lua hold the
-- same schedules with checks), for several threads per row and vector widths (16-, 8-byte
-- and scalar accesses); and a scheduled identity copy
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
  -- one division per row, a multiplication per element (as torch does)
  local inv = te.compute({M}, function(i) return 1 / sm[i] end, "inv")
  local P = te.compute({M, N}, function(i, j) return (e[{i, j}] * inv[i]):astype("float16") end, "P")
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

-- rows on blockIdx.x, columns split into (serial, `threads` threads, `vec` vectorized): each
-- thread moves runs of `vec` contiguous elements (8 float16: one 16-byte load or store); the
-- row statistics at the row loop, their reduce loops split the same way. vec = 1 is the
-- strided variant (thread t takes columns t, t + threads, ...: 2-byte accesses).
local function split_cols(s, loop, threads, vec)
  if vec == 1 then
    local o, t = s:split(loop, {stof.INFER, threads})
    s:bind(t, "threadIdx.x")
    s:unroll(o)
    return
  end
  local o, t, v = s:split(loop, {stof.INFER, threads, vec})
  s:bind(t, "threadIdx.x")
  s:unroll(o)
  s:vectorize(v)
end

local function row_schedule(out, main, stats, inline, threads, vec)
  local s = stof.schedule({out})
  for _, b in ipairs(inline) do s:compute_inline(s:get_block(b)) end
  local i, j = table.unpack(s:get_loops(s:get_block(main)))
  s:bind(i, "blockIdx.x")
  split_cols(s, j, threads, vec)
  for k = #stats, 1, -1 do s:compute_at(s:get_block(stats[k]), i) end
  for _, name in ipairs(stats) do
    if name == "inv" then goto continue end -- a scalar per row, computed by every thread
    local loops = s:get_loops(s:get_block(name))
    split_cols(s, loops[#loops], threads, vec)
    ::continue::
  end
  return s
end

local function copy_schedule(threads, vec)
  local X = te.placeholder({M, N}, "float16", "X")
  local Y = te.compute({M, N}, function(i, j) return X[{i, j}] end, "Y")
  local s = stof.schedule({Y})
  local i, j = table.unpack(s:get_loops(s:get_block("Y")))
  s:bind(i, "blockIdx.x")
  split_cols(s, j, threads, vec)
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

-- The sweep: threads per row, and elements per vector access (8: 16 bytes; 4: 8 bytes; 1: the
-- strided 2-byte variant), where the row divides.
local THREADS, VECS = {128, 256, 512}, {8, 4, 1}
local function fits(t, v) return N % (t * v) == 0 end

-- The copy first: without a GPU the build says so and the bench stops.
local cs, cargs = copy_schedule(256, 8)
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
for _, v in ipairs(VECS) do
  for _, t in ipairs(THREADS) do
    if fits(t, v) then
      local s2, a2 = copy_schedule(t, v)
      local f = stof.build(s2, a2, {target = "cuda"})
      local ms = f:time(x, y, {reps = REPS, warmup = 10})
      local gbs = bytes_rw / (ms * 1e-3) / 1e9
      copy_gbs = math.max(copy_gbs, gbs)
      print(json({op = "copy (scheduled)", M = M, N = N, threads = t, vec = v, us = ms * 1e3, GBs = gbs}))
    end
  end
end

for _, v in ipairs(VECS) do
  for _, t in ipairs(THREADS) do
    if fits(t, v) then
      local args, P = softmax_graph()
      local f = stof.build(row_schedule(P, "P", {"mx", "sm", "inv"}, {"e"}, t, v), args, {target = "cuda"})
      local ms = f:time(x, y, {reps = REPS, warmup = 10})
      local gbs = bytes_rw / (ms * 1e-3) / 1e9
      print(json({op = "softmax", M = M, N = N, threads = t, vec = v, us = ms * 1e3, GBs = gbs,
                  of_copy = gbs / copy_gbs}))
    end
  end
end

for _, v in ipairs(VECS) do
  for _, t in ipairs(THREADS) do
    if fits(t, v) then
      local args, Y = layernorm_graph()
      local f = stof.build(row_schedule(Y, "Y", {"mean", "var"}, {}, t, v), args, {target = "cuda"})
      local ms = f:time(x, g, b, y, {reps = REPS, warmup = 10})
      local gbs = (bytes_rw + 2 * N * 2) / (ms * 1e-3) / 1e9
      print(json({op = "layernorm", M = M, N = N, threads = t, vec = v, us = ms * 1e3, GBs = gbs,
                  of_copy = gbs / copy_gbs}))
    end
  end
end
