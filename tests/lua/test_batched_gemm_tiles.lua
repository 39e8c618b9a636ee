-- Batched GEMMs, x[b, s, k] @ W[n, k] (a Linear layer over [batch, sequence, features]), in
-- the schedule language: the row tiles of a fused (b, s) loop and of an unfused one, their
-- accumulators written back by a consumer computed at the tile (reverse_compute_at), and
-- mma_m16n8k16 tensorize over the batched operand. Checked in numbers on the C backend
-- against stof.eval (outputs poisoned first), in the loop nests' buffer extents, and in the
-- CUDA source (NVRTC compiles it here; the GPU suite runs the same schedule as a case of
-- tests/schedule/cuda_cases.c).
local stof = require("stof")
local te = stof.te
package.path = debug.getinfo(1, "S").source:match("^@(.*/)") .. "?.lua;" .. package.path
local U = require("util")
local expect_error = U.raises_any

-- D[b, s, n] = 2 * sum_k A[b, s, k] * W[n, k]: the sum in float32 of float32 factors, or
-- (plain) in A's dtype as stof.nn.linear writes it
local function batched(B, S, N, K, dtype, plain)
  te.reset()
  local A = te.placeholder({B, S, K}, dtype, "A")
  local W = te.placeholder({N, K}, dtype, "W")
  local k = te.reduce_axis(K, "k")
  local C = te.compute({B, S, N}, function(b, s, j)
    if plain then return te.sum(A[{b, s, k}] * W[{j, k}], {k}) end
    return te.sum(A[{b, s, k}]:astype("float32") * W[{j, k}]:astype("float32"), {k})
  end, "C")
  local D = te.compute({B, S, N}, function(b, s, j) return (C[{b, s, j}] * 2):astype(dtype) end, "D")
  return A, W, D
end

local function run_c(s, A, W, D, B, S, N, K, dtype)
  local f = stof.build(s, {A, W, D}, {target = "c"})
  local a, w = stof.rand({B, S, K}, dtype, 11), stof.rand({N, K}, dtype, 12)
  local d = stof.zeros({B, S, N}, dtype):fill(0 / 0)
  f(a, w, d)
  local want = stof.eval(D, {[A] = a, [W] = w})
  return stof.rel_l2(d:astype("float32"), want:astype("float32"))
end

-- A (b, s) fused and split by factors (the first inferred: the tiles), the accumulator per
-- tile, the consumer at the tile.
local function fused_tiles(B, S, factors)
  local N, K = 32, 16
  local A, W, D = batched(B, S, N, K, "float32")
  local s = stof.schedule({D})
  local cb = s:get_block("C")
  s:compute_inline(s:cache_write(cb, "local"))
  local b, sq = table.unpack(s:get_loops(cb))
  local io = s:split(s:fuse(b, sq), factors)
  s:reverse_compute_at(s:get_block("D"), io)
  return s, A, W, D, N, K
end

-- 1. Tiles that hold whole sequences (16 rows: two sequences of 8, the inner part of the
-- split one sequence): each tile's b and s are affine in the tile's loops, so the
-- accumulator holds exactly the tile (before: the whole [B, S, N], and the consumer read
-- every element of it at every tile).
do
  local B, S = 4, 8
  local s, A, W, D, N, K = fused_tiles(B, S, {stof.INFER, 2, 8})
  local nest = s:print_loop_nest()
  assert(nest:find("alloc C.local: float32[2, 8, 32]", 1, true), nest)
  local err = run_c(s, A, W, D, B, S, N, K, "float32")
  assert(err < 1e-5, ("fused whole-sequence tiles: relative L2 error %g"):format(err))
end

-- 2. Tiles that split a sequence (S a multiple of T, or neither), or hold two sequences in
-- one inner loop of 16: a tile's b is not affine in its loops, the region of the accumulator would be taken whole, and the consumer would
-- read elements this tile never wrote: refused with the cause, not compiled.
for _, c in ipairs({{2, 16, 8}, {3, 12, 8}, {4, 8, 16}}) do
  local B, S, T = c[1], c[2], c[3]
  expect_error(function()
    local s, A, W, D = fused_tiles(B, S, {stof.INFER, T})
    stof.build(s, {A, W, D}, {target = "c"})
  end, "would read C.local where block C has not written it: loop b is fused and split across that loop")
end

-- 2b. A fused loop one of whose sources has a gap (j split 4 x 4 over 6: the lowering decodes
-- the fused loop compactly, by the sources' valid bounds): its sources stay whole terms in
-- bound inference, so a producer computed at a tile covers what the tile reads (found in
-- review: the affine form claimed a region of the wrong row, numbers 1e33 off), and a
-- consumer placed at such a tile is refused rather than reading outside its buffer.
do
  local function gapped(consumer_at)
    te.reset()
    local A = te.placeholder({4, 6}, "float32", "A")
    local C = te.compute({4, 6}, function(i, j) return A[{i, j}] * 2 end, "C")
    local D = te.compute({4, 6}, function(i, j) return C[{i, j}] + 1 end, "D")
    local s = stof.schedule({D})
    local blk = s:get_block(consumer_at and "C" or "D")
    local i, j = table.unpack(s:get_loops(blk))
    local j0 = s:split(j, {4, 4})
    local f0 = s:split(s:fuse(i, j0), {stof.INFER, 4})
    if consumer_at then s:reverse_compute_at(s:get_block("D"), f0) else s:compute_at(s:get_block("C"), f0) end
    return s, A, D
  end
  local s, A, D = gapped(false)
  local f = stof.build(s, {A, D}, {target = "c"})
  local a = stof.rand({4, 6}, "float32", 3)
  local d = stof.zeros({4, 6}, "float32"):fill(0 / 0)
  f(a, d)
  local err = stof.rel_l2(d, stof.eval(D, {[A] = a}))
  assert(err < 1e-6, ("compute_at under a gapped fused loop: relative L2 error %g"):format(err))
  expect_error(function() gapped(true) end, "would read C where block C has not written it")
end

-- 3. The tensor-core schedule of a batched Linear: b bound to blockIdx.z, the rows of s
-- tiled, A's staged tile [1, rows, k] read as a matrix by ldmatrix, the accumulators
-- [1, 64, 32] per warp, the epilogue at the warps' loop. Twice: with the sum written in
-- float32, and as stof.nn.linear writes it (a float16 sum of float16 products), whose warp
-- accumulator cache_write makes float32 (the products' factors widened, one rounding).
for _, plain in ipairs({false, true}) do
  local B, S, N, K = 2, 256, 256, 64
  local BM, BN, BK, WM, WN = 128, 128, 32, 2, 4
  local A, W, D = batched(B, S, N, K, "float16", plain)
  local s = stof.schedule({D})
  local cb = s:get_block("C")
  s:compute_inline(s:cache_write(cb, "warp"))
  local b, i, j, kk = table.unpack(s:get_loops(cb))
  local i0, i1, i2 = s:split(i, {stof.INFER, WM, BM // WM})
  local j0, j1, j2 = s:split(j, {stof.INFER, WN, BN // WN})
  local k0, k1 = s:split(kk, {stof.INFER, BK})
  s:reorder({b, i0, j0, i1, j1, k0, i2, j2, k1})
  s:bind(b, "blockIdx.z")
  s:bind(i0, "blockIdx.y")
  s:bind(j0, "blockIdx.x")
  s:bind(i1, "threadIdx.z")
  s:bind(j1, "threadIdx.y")
  expect_error(function() s:tensorize(i2, "wgmma_m64nNk16") end,
               "wgmma_m64nNk16 takes 2-D blocks only; block C has 3 axes")
  s:tensorize(i2, "mma_m16n8k16")
  for input = 0, 1 do
    local sh = s:cache_read(cb, input, "shared")
    s:compute_at(sh, k0)
    local loops = s:get_loops(sh)
    local co, cv = s:split(loops[#loops], {stof.INFER, 8})
    local rows = loops[#loops - 1]
    if #loops == 3 then rows = s:fuse(loops[1], rows) end
    local _, tz, ty, tx = s:split(s:fuse(rows, co), {stof.INFER, WM, WN, 32})
    s:bind(tz, "threadIdx.z")
    s:bind(ty, "threadIdx.y")
    s:bind(tx, "threadIdx.x")
    s:vectorize(cv)
    s:annotate(sh, "pad", "8")
  end
  s:annotate(k0, "pipeline_stages", "3")
  s:reverse_compute_at(s:get_block("D"), j1)
  local nest = s:print_loop_nest()
  assert(nest:find("alloc C.warp: float32[1, 64, 32] warp", 1, true), nest)
  assert(nest:find("alloc A.shared: float16[1, 128, 40] shared", 1, true), nest)
  local err = run_c(s, A, W, D, B, S, N, K, "float16")
  assert(err < 1e-2, ("batched tensor-core schedule on C: relative L2 error %g"):format(err))
  local src = stof.build_source(s, {A, W, D}, {target = "cuda"})
  assert(src:find("stof_mma_f16<4, 4, 2, 1>(", 1, true), "one mma call per warp tile, B read as W[j, k]")
  -- the staged tile's row stride is its padded row (32 + 8), and it holds one b
  assert(src:find("* INT64_C(40)", 1, true), "padded rows of the staged tiles")
  local ok, e = pcall(stof.build, s, {A, W, D}, {target = "cuda"})
  assert(ok or tostring(e):find("the CUDA source compiled", 1, true), tostring(e))
end

print("ok")
