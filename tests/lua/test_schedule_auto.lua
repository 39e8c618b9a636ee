-- s:auto(target[, {threads, vec}]) (stof_sched_auto): default schedules of segments. Layer
-- norm and an elementwise chain on the C backend against stof.eval, the CUDA source (one
-- kernel, all-reduces, 16-byte accesses), the knobs in the trace and a replay with another
-- decision, options, and the errors.
local stof = require("stof")
local te = stof.te

local function layernorm(M, N, dtype)
  te.reset()
  local X = te.placeholder({M, N}, dtype, "X")
  local g = te.placeholder({N}, dtype, "g")
  local b = te.placeholder({N}, dtype, "b")
  local r, c = te.reduce_axis(N, "r"), te.reduce_axis(N, "c")
  local mean = te.compute({M}, function(i) return te.sum(X[{i, r}]:astype("float32") * (1 / N), {r}) end, "mean")
  local var = te.compute({M}, function(i)
    local d = X[{i, c}]:astype("float32") - mean[i]
    return te.sum(d * d * (1 / N), {c})
  end, "var")
  local Y = te.compute({M, N}, function(i, j)
    local y = (X[{i, j}]:astype("float32") - mean[i]) * te.rsqrt(var[i] + 1e-5)
    return (y * g[j]:astype("float32") + b[j]:astype("float32")):astype(dtype)
  end, "Y")
  return {X, g, b}, Y
end

local function check_c(inputs, Y, s, tol)
  local f = stof.build(s, {inputs[1], inputs[2], inputs[3], Y}, {target = "c"})
  local xs, env = {}, {}
  for k, t in ipairs(inputs) do
    xs[k] = stof.rand(t.shape, t.dtype, k)
    env[t] = xs[k]
  end
  local y = stof.zeros(Y.shape, Y.dtype):fill(0 / 0)
  f(xs[1], xs[2], xs[3], y)
  local err = stof.rel_l2(y, stof.eval(Y, env))
  assert(err < tol, ("auto: relative L2 error %g"):format(err))
end

-- C: the statistics computed per row (compute_at), numbers against the interpreter
do
  local inputs, Y = layernorm(7, 100, "float32")
  local s = stof.schedule({Y})
  s:auto("c")
  local nest = s:print_loop_nest()
  assert(nest:find("alloc mean: float32[1] at i", 1, true), nest)
  check_c(inputs, Y, s, 1e-5)
end

-- CUDA: one kernel, the reductions across threads, 16-byte accesses; knobs in the trace
do
  local inputs, Y = layernorm(64, 768, "float16")
  local s = stof.schedule({Y})
  s:auto("cuda")
  local args = {inputs[1], inputs[2], inputs[3], Y}
  local src = stof.build_source(s, args, {target = "cuda"})
  local _, kernels = src:gsub('extern "C" __global__', "")
  assert(kernels == 1, src)
  assert(src:find("all-reduce (sum) of mean over threadIdx.x", 1, true))
  assert(src:find("= *(const uint4 *)&", 1, true))
  local trace = s:trace()
  assert(trace:find('s:knob("threads", {32, 64, 96, 128}, 2)', 1, true), trace)
  assert(trace:find('s:knob("vec", {1, 2, 4, 8}, 3)', 1, true), trace)
  check_c(inputs, Y, s, 1e-2) -- the C backend runs the CUDA schedule serially
  -- another decision replayed: 128 threads, 4-element vectors
  local s2 = s:with_decisions({threads = 3, vec = 2})
  local src2 = stof.build_source(s2, args, {target = "cuda"})
  assert(src2:find("stof_k0_Y (64, 1, 1; 128, 1, 1)", 1, true), src2)
  check_c(inputs, Y, s2, 1e-2)
  -- options
  local s3 = stof.schedule({Y})
  s3:auto("cuda", {threads = 256, vec = 4})
  assert(stof.build_source(s3, args, {target = "cuda"}):find("stof_k0_Y (64, 1, 1; 256, 1, 1)", 1, true))
end

-- errors: the message names the cause; the schedule stays as it was
do
  local _, Y = layernorm(4, 32, "float32")
  local s = stof.schedule({Y})
  local ok, err = pcall(s.auto, s, "opencl")
  assert(not ok and err:find('ValueError: auto: unknown target "opencl"', 1, true), err)
  ok, err = pcall(s.auto, s, "cuda", {threads = 48})
  assert(not ok and err:find("auto: threads = 48", 1, true), err)
  s:auto("c")
  ok, err = pcall(s.auto, s, "c")
  assert(not ok and err:find("ScheduleError: auto: the schedule is not fresh", 1, true), err)
end
print("ok")
