-- CUDA code generation cases that once compiled into wrong kernels (found in review), each
-- checked in the generated source (NVRTC compiles it here; the GPU suite runs such kernels)
-- and, where the schedule is legal, in numbers on the C backend against stof.eval.
local stof = require("stof")
local te = stof.te

local function expect_error(f, substr)
  local ok, err = pcall(f)
  assert(not ok, "expected an error containing: " .. substr)
  assert(tostring(err):find(substr, 1, true), ("error %q lacks %q"):format(tostring(err), substr))
end

local function check_c(s, args, inputs, out, want)
  local f = stof.build(s, args, {target = "c"})
  local call = {}
  for _, t in ipairs(inputs) do call[#call + 1] = t end
  call[#call + 1] = out
  f(table.unpack(call))
  local err = stof.rel_l2(out, want)
  assert(err < 1e-5, ("C backend: relative L2 error %g"):format(err))
end

-- 1. A row sum across threads whose outer reduce loop is pipelined (operands staged in shared
-- memory by cp.async): the all-reduce and the store of the result follow the pipelined loop.
do
  te.reset()
  local M, K = 64, 1024
  local X = te.placeholder({M, K}, "float32", "X")
  local k = te.reduce_axis(K, "k")
  local S = te.compute({M}, function(i) return te.sum(X[{i, k}], {k}) end, "S")
  local s = stof.schedule({S})
  local b = s:get_block("S")
  local i, kk = table.unpack(s:get_loops(b))
  local ko, ki = s:split(kk, {stof.INFER, 128})
  local kt, kv = s:split(ki, {32, 4})
  s:bind(i, "blockIdx.x")
  s:bind(kt, "threadIdx.x")
  local sh = s:cache_read(b, 0, "shared")
  s:compute_at(sh, ko)
  local _, c = table.unpack(s:get_loops(sh))
  local co, cv = s:split(c, {32, 4})
  s:bind(co, "threadIdx.x")
  s:vectorize(cv)
  s:annotate(ko, "pipeline_stages", "2")
  local src = stof.build_source(s, {X, S}, {target = "cuda"})
  local pipe = src:find("pipelined: 2 stages", 1, true)
  local reduce = src:find("all-reduce (sum) of S over threadIdx.x", 1, true)
  assert(pipe and reduce and reduce > pipe, "the all-reduce must follow the pipelined loop")
  assert(src:find("= (float)(stof_acc0);", reduce, true), "the reduced value must be stored")
  local x = stof.rand({M, K}, "float32", 1)
  check_c(s, {X, S}, {x}, stof.zeros({M}, "float32"):fill(0 / 0), stof.eval(S, {[X] = x}))
end

-- 2. A block reading a warp accumulator anywhere but at its own axes is refused: each lane
-- holds only the elements its fragment loop names.
do
  te.reset()
  local M, N, K = 32, 16, 32
  local A = te.placeholder({M, K}, "float16", "A")
  local B = te.placeholder({K, N}, "float16", "B")
  local k = te.reduce_axis(K, "k")
  local C = te.compute({M, N}, function(i, j)
    return te.sum(A[{i, k}]:astype("float32") * B[{k, j}]:astype("float32"), {k})
  end, "C")
  local D = te.compute({M, N}, function(i, j) return C[{i, N - 1 - j}] end, "D")
  local s = stof.schedule({D})
  local cb = s:get_block("C")
  s:compute_inline(s:cache_write(cb, "warp"))
  local i, j, kk = table.unpack(s:get_loops(cb))
  local io, ii = s:split(i, {2, 16})
  local ko, ki = s:split(kk, {2, 16})
  s:reorder({io, ko, ii, j, ki})
  s:bind(io, "blockIdx.x")
  s:tensorize(ii, "mma_m16n8k16")
  for input = 0, 1 do s:compute_at(s:cache_read(cb, input, "shared"), ko) end
  s:reverse_compute_at(s:get_block("D"), io)
  expect_error(function() stof.build_source(s, {A, B, D}, {target = "cuda"}) end,
    "ScheduleError: cuda: block D reads warp buffer C.warp: it must read it at its own axes only, its last two loops")
end

-- 3. A load in a branch of a select is not hoisted into a vector load before the loop (it
-- would read past the tensor where the branch is not taken); the store still is one.
do
  te.reset()
  local A = te.placeholder({8}, "float32", "A")
  local B = te.compute({16}, function(i) return te.select(te.lt(i, 8), A[i], 0.0) end, "B")
  local s = stof.schedule({B})
  local b = s:get_block("B")
  local io, iv = s:split(s:get_loops(b)[1], {stof.INFER, 4})
  s:bind(io, "threadIdx.x")
  s:vectorize(iv)
  local src = stof.build_source(s, {A, B}, {target = "cuda"})
  assert(not src:find("stof_vl0", 1, true), "the load under the select must stay scalar")
  assert(src:find("*(uint4 *)&b", 1, true), "the store is still one 16-byte access")
  local a = stof.rand({8}, "float32", 2)
  check_c(s, {A, B}, {a}, stof.zeros({16}, "float32"):fill(0 / 0), stof.eval(B, {[A] = a}))
end

print("ok")
