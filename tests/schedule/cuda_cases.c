/* The CUDA test schedules (see cuda_cases.h): builders, then the table. */
#include <stdio.h>
#include <string.h>

#include "cuda_cases.h"
#include "segments.h"

void sh_bind_rows(stof_sched *s) {
  stof_ctx *ctx = stof_sched_ctx(s);
  for (int b0 = 0; b0 < stof_sched_nblock(s); b0++) {
    if (!stof_sched_block_alive(s, b0)) continue;
    int b = sh_block(s, stof_sched_block_name(s, b0));
    int l[STOF_SCHED_MAX_LOOPS], n = sh_loops(s, b, l);
    stof_loop_info info;
    SH_OK(ctx, stof_sched_loop_info(s, l[0], &info));
    if (info.iter != STOF_ITER_DATA_PAR) continue;
    SH_OK(ctx, stof_sched_bind(s, l[0], "blockIdx.x"));
    if (n < 2) continue;
    SH_OK(ctx, stof_sched_loop_info(s, l[1], &info));
    if (info.iter == STOF_ITER_DATA_PAR) SH_OK(ctx, stof_sched_bind(s, l[1], "threadIdx.x"));
  }
}

/* ---------------------------------------------------------------- unscheduled graphs
 * (every loop serial in one thread of one block) */

static stof_sched *unscheduled_matmul(sh_graph *G) { sh_matmul(G, 16, 24, 8); return sh_sched(G); }
static stof_sched *unscheduled_vec_f32(sh_graph *G) { sh_vec(G, 37, STOF_DTYPE_F32); return sh_sched(G); }
static stof_sched *unscheduled_vec_f16(sh_graph *G) { sh_vec(G, 37, STOF_DTYPE_F16); return sh_sched(G); }
static stof_sched *unscheduled_vec_bf16(sh_graph *G) { sh_vec(G, 37, STOF_DTYPE_BF16); return sh_sched(G); }
static stof_sched *unscheduled_elem2(sh_graph *G) { sh_elem2(G, 8, 12); return sh_sched(G); }
static stof_sched *unscheduled_matmul_bias_relu(sh_graph *G) { sh_matmul_bias_relu(G, 8, 16, 4); return sh_sched(G); }
static stof_sched *unscheduled_softmax(sh_graph *G) { sh_softmax(G, 4, 32); return sh_sched(G); }
static stof_sched *unscheduled_sum2(sh_graph *G) { sh_sum2(G, 4, 3, 5); return sh_sched(G); }
static stof_sched *unscheduled_chain(sh_graph *G) { sh_chain(G, 50); return sh_sched(G); }
static stof_sched *unscheduled_stencil(sh_graph *G) { sh_stencil(G, 30); return sh_sched(G); }
static stof_sched *unscheduled_layernorm(sh_graph *G) { sh_layernorm(G, 4, 32); return sh_sched(G); }
static stof_sched *unscheduled_gemm_bias_gelu(sh_graph *G) { sh_gemm_bias_gelu(G, 8, 16, 4); return sh_sched(G); }

/* ---------------------------------------------------------------- scheduled */

static stof_sched *matmul_rows_bound(sh_graph *G) {
  sh_matmul(G, 32, 64, 16);
  stof_sched *s = sh_sched(G);
  sh_bind_rows(s);
  return s;
}

/* 16 x 16 tiles: blocks (y, x), threads (y, x); k split by 8 and unrolled. */
static stof_sched *tiled_matmul_bound(sh_graph *G) {
  sh_matmul(G, 64, 64, 32);
  stof_sched *s = sh_sched(G);
  int bc = sh_block(s, "C"), l[3], t[4], k[2];
  sh_loops(s, bc, l);
  SH_OK(G->ctx, stof_sched_tile(s, l[0], l[1], stof_factor_const(16), stof_factor_const(16), t));
  sh_split(s, l[2], 8, k);
  SH_OK(G->ctx, stof_sched_bind(s, t[0], "blockIdx.y"));
  SH_OK(G->ctx, stof_sched_bind(s, t[1], "blockIdx.x"));
  SH_OK(G->ctx, stof_sched_bind(s, t[2], "threadIdx.y"));
  SH_OK(G->ctx, stof_sched_bind(s, t[3], "threadIdx.x"));
  SH_OK(G->ctx, stof_sched_unroll(s, k[1]));
  return s;
}

/* 37 elements split by 8: 5 blocks of 8 threads, the last three guarded off. */
static stof_sched *non_divisible_split_bound(sh_graph *G) {
  sh_vec(G, 37, STOF_DTYPE_F32);
  stof_sched *s = sh_sched(G);
  int l[1], p[2];
  sh_loops(s, sh_block(s, "B"), l);
  sh_split(s, l[0], 8, p);
  SH_OK(G->ctx, stof_sched_bind(s, p[0], "blockIdx.x"));
  SH_OK(G->ctx, stof_sched_bind(s, p[1], "threadIdx.x"));
  return s;
}

static stof_sched *softmax_rows_bound(sh_graph *G) {
  sh_softmax(G, 8, 128);
  stof_sched *s = sh_sched(G);
  sh_bind_rows(s);
  return s;
}

static stof_sched *layernorm_rows_bound(sh_graph *G) {
  sh_layernorm(G, 8, 256);
  stof_sched *s = sh_sched(G);
  sh_bind_rows(s);
  return s;
}

/* GEMM, bias, ReLU grouped (one kernel: D inlined into E, E after C's row loop), rows on
 * blocks (a thread each: E reads the whole row of C its thread computed). */
static stof_sched *grouped_gemm_bias_relu(sh_graph *G) {
  sh_matmul_bias_relu(G, 32, 48, 16);
  stof_sched *s = sh_sched(G);
  const stof_op *ops[3] = {sh_op(G, "C"), sh_op(G, "D"), sh_op(G, "E")};
  int g, l[3];
  SH_OK(G->ctx, stof_sched_group(s, 3, ops, &g));
  sh_loops(s, sh_block(s, "C"), l);
  SH_OK(G->ctx, stof_sched_bind(s, l[0], "blockIdx.x"));
  return s;
}

/* B computed per thread (compute_at the threadIdx loop): a private array. */
static stof_sched *chain_per_thread(sh_graph *G) {
  sh_chain(G, 100);
  stof_sched *s = sh_sched(G);
  int bb = sh_block(s, "B"), bc = sh_block(s, "C"), l[1], p[2];
  sh_loops(s, bc, l);
  sh_split(s, l[0], 32, p);
  SH_OK(G->ctx, stof_sched_bind(s, p[0], "blockIdx.x"));
  SH_OK(G->ctx, stof_sched_bind(s, p[1], "threadIdx.x"));
  SH_OK(G->ctx, stof_sched_compute_at(s, bb, p[1]));
  return s;
}

static stof_sched *chain_inlined_rows_bound(sh_graph *G) {
  sh_chain(G, 100);
  stof_sched *s = sh_sched(G);
  SH_OK(G->ctx, stof_sched_compute_inline(s, sh_block(s, "B")));
  sh_bind_rows(s);
  return s;
}

static stof_sched *vec_f16_bound(sh_graph *G) {
  sh_vec(G, 1000, STOF_DTYPE_F16);
  stof_sched *s = sh_sched(G);
  int l[1], p[2];
  sh_loops(s, sh_block(s, "B"), l);
  sh_split(s, l[0], 128, p);
  SH_OK(G->ctx, stof_sched_bind(s, p[0], "blockIdx.x"));
  SH_OK(G->ctx, stof_sched_bind(s, p[1], "threadIdx.x"));
  return s;
}

/* A reduction across threads through rfactor: S.rf per (row, lane), then S per row. */
static stof_sched *rfactor_bound_to_threads(sh_graph *G) {
  sh_rowsum(G, 16, 256, 0);
  stof_sched *s = sh_sched(G);
  int bs = sh_block(s, "S"), l[2], k[2], rf;
  sh_loops(s, bs, l);
  sh_split(s, l[1], 32, k);
  SH_OK(G->ctx, stof_sched_rfactor(s, k[1], 1, &rf));
  int rl[STOF_SCHED_MAX_LOOPS], n = sh_loops(s, rf, rl);
  assert_true(n >= 3);
  SH_OK(G->ctx, stof_sched_bind(s, rl[0], "blockIdx.x"));
  for (int i = 1; i < n; i++) {
    stof_loop_info info;
    SH_OK(G->ctx, stof_sched_loop_info(s, rl[i], &info));
    if (info.iter == STOF_ITER_DATA_PAR) SH_OK(G->ctx, stof_sched_bind(s, rl[i], "threadIdx.x"));
  }
  int sl[STOF_SCHED_MAX_LOOPS];
  sh_loops(s, bs, sl);
  SH_OK(G->ctx, stof_sched_bind(s, sl[0], "blockIdx.x"));
  return s;
}

/* The C backend's tests' schedule with shared/local caches, where each thread owns its
 * tiles (no threads bound inside them). */
static stof_sched *matmul_caches_unbound(sh_graph *G) {
  sh_matmul(G, 20, 24, 16);
  stof_sched *s = sh_sched(G);
  int bc = sh_block(s, "C"), l[4], t[4], k[2], as, bs, cw;
  sh_loops(s, bc, l);
  SH_OK(G->ctx, stof_sched_tile(s, l[0], l[1], stof_factor_const(8), stof_factor_const(8), t));
  sh_split(s, l[2], 4, k);
  int order[6] = {t[0], t[1], k[0], t[2], k[1], t[3]};
  SH_OK(G->ctx, stof_sched_reorder(s, 6, order));
  SH_OK(G->ctx, stof_sched_cache_read(s, bc, 0, "shared", &as));
  SH_OK(G->ctx, stof_sched_cache_read(s, bc, 1, "shared", &bs));
  SH_OK(G->ctx, stof_sched_compute_at(s, as, k[0]));
  SH_OK(G->ctx, stof_sched_compute_at(s, bs, k[0]));
  SH_OK(G->ctx, stof_sched_cache_write(s, bc, "local", &cw));
  SH_OK(G->ctx, stof_sched_reverse_compute_at(s, cw, t[1]));
  SH_OK(G->ctx, stof_sched_bind(s, t[0], "blockIdx.y"));
  SH_OK(G->ctx, stof_sched_bind(s, t[1], "blockIdx.x"));
  SH_OK(G->ctx, stof_sched_vectorize(s, t[3]));
  return s;
}

/* ---------------------------------------------------------------- tensor cores and shared
 * staging (examples/schedule_gemm_tensorcore.lua at small sizes) */

/* Splits loop into the given number of parts, the first inferred; parts[] gets them. */
static void split_n(stof_sched *s, int loop, int n, const int64_t *inner, int *parts) {
  stof_factor f[4] = {stof_factor_const(STOF_INFER)};
  for (int i = 1; i < n; i++) f[i] = stof_factor_const(inner[i - 1]);
  SH_OK(stof_sched_ctx(s), stof_sched_split(s, loop, n, f, parts));
}

/* The shared tile of input `input` of block cb, computed at loop at and fetched by all
 * threads (warps_m x warps_n warps of 32 lanes) together, 8 elements (16 bytes) per
 * vectorized copy, rows padded by pad elements (none when pad is 0); returns its block. */
static int stage_in_shared(stof_sched *s, int cb, int input, int at, int warps_m, int warps_n, int pad) {
  stof_ctx *ctx = stof_sched_ctx(s);
  int sh, l[3], c[2], f, p[4];
  SH_OK(ctx, stof_sched_cache_read(s, cb, input, "shared", &sh));
  SH_OK(ctx, stof_sched_compute_at(s, sh, at));
  /* rows and columns; a batched operand's tile has a leading loop of extent 1 too */
  int n = sh_loops(s, sh, l);
  assert_in_range(n, 2, 3);
  int64_t eight = 8, lanes[3] = {warps_m, warps_n, 32};
  split_n(s, l[n - 1], 2, &eight, c);
  int fl[3] = {l[0], l[1], c[0]};
  if (n == 2) fl[1] = c[0];
  SH_OK(ctx, stof_sched_fuse(s, n, fl, &f));
  split_n(s, f, 4, lanes, p);
  SH_OK(ctx, stof_sched_bind(s, p[1], "threadIdx.z"));
  SH_OK(ctx, stof_sched_bind(s, p[2], "threadIdx.y"));
  SH_OK(ctx, stof_sched_bind(s, p[3], "threadIdx.x"));
  SH_OK(ctx, stof_sched_vectorize(s, c[1]));
  if (pad) {
    char text[16];
    snprintf(text, sizeof text, "%d", pad);
    SH_OK(ctx, stof_sched_annotate_block(s, sh, "pad", text));
  }
  return sh;
}

stof_sched *sh_tensorcore_schedule(sh_graph *G, const sh_tensorcore *t) {
  enum { BM = 128, BN = 128, BK = 32, WARPS_M = 2, WARPS_N = 4 };
  if (t->epilogue) sh_matmul_f16_bias_layout(G, t->M, t->N, t->K, t->dtype, t->b_nk);
  else sh_matmul_f16(G, t->M, t->N, t->K, t->dtype);
  stof_sched *s = sh_sched(G);
  stof_ctx *ctx = G->ctx;
  int cb = sh_block(s, "C"), copy, l[3], i[3], j[3], k[3];
  /* accumulate in the warps' registers; the write-back (or epilogue) reads them */
  SH_OK(ctx, stof_sched_cache_write(s, cb, t->acc_scope ? t->acc_scope : "warp", &copy));
  int reader = copy;
  if (t->epilogue) {
    SH_OK(ctx, stof_sched_compute_inline(s, copy));
    reader = sh_block(s, "D");
  }
  sh_loops(s, cb, l);
  int64_t fi[2] = {WARPS_M, BM / WARPS_M}, fj[2] = {WARPS_N, BN / WARPS_N}, fk[2] = {BK / 16, 16};
  split_n(s, l[0], 3, fi, i);
  split_n(s, l[1], 3, fj, j);
  split_n(s, l[2], 3, fk, k);
  int order[9] = {i[0], j[0], i[1], j[1], k[0], k[1], i[2], j[2], k[2]};
  SH_OK(ctx, stof_sched_reorder(s, 9, order));
  SH_OK(ctx, stof_sched_bind(s, i[0], "blockIdx.y"));
  SH_OK(ctx, stof_sched_bind(s, j[0], "blockIdx.x"));
  SH_OK(ctx, stof_sched_bind(s, i[1], "threadIdx.z"));
  SH_OK(ctx, stof_sched_bind(s, j[1], t->warp_n_tag ? t->warp_n_tag : "threadIdx.y"));
  SH_OK(ctx, stof_sched_unroll(s, k[1]));
  SH_OK(ctx, stof_sched_tensorize(s, i[2], "mma_m16n8k16"));
  for (int input = 0; input < 2; input++) /* B stays input 1 after A's cache_read */
    if (!(t->unstaged >> input & 1)) stage_in_shared(s, cb, input, k[0], WARPS_M, WARPS_N, t->pad);
  if (t->stages > 1) {
    char text[16];
    snprintf(text, sizeof text, "%d", t->stages);
    SH_OK(ctx, stof_sched_annotate_loop(s, k[0], "pipeline_stages", text));
  }
  SH_OK(ctx, stof_sched_reverse_compute_at(s, reader, j[1]));
  return s;
}

/* f16 GEMM + bias on tensor cores, operands staged through a 3-stage cp.async pipeline. */
static stof_sched *gemm_tensorcore_f16(sh_graph *G) {
  sh_tensorcore t = {256, 256, 64, STOF_DTYPE_F16, 1, 3, 8};
  return sh_tensorcore_schedule(G, &t);
}

/* The f16 GEMM + bias of gemm_tensorcore_f16 with B stored [N, K] (torch's Linear weight):
 * the B tiles are staged as [128 x 32] rows of k and read by ldmatrix without .trans. */
static stof_sched *gemm_tensorcore_f16_nk(sh_graph *G) {
  sh_tensorcore t = {256, 256, 64, STOF_DTYPE_F16, 1, 3, 8};
  t.b_nk = 1;
  return sh_tensorcore_schedule(G, &t);
}

/* A batched Linear on tensor cores: x[b, s, k] @ W[n, k] + bias for 2 x 256 rows, b bound to
 * blockIdx.z (a tile holds one b), the rows of s tiled as the 2-D case's; A's staged tile is
 * [1, 128, 32 + 8] and the warps' accumulators [1, 64, 32]. */
static stof_sched *gemm_tensorcore_f16_batched(sh_graph *G) {
  enum { BM = 128, BN = 128, BK = 32, WARPS_M = 2, WARPS_N = 4 };
  sh_batched_matmul_f16_bias_nk(G, 2, 256, 256, 64, STOF_DTYPE_F16);
  stof_sched *s = sh_sched(G);
  stof_ctx *ctx = G->ctx;
  int cb = sh_block(s, "C"), copy, l[4], i[3], j[3], k[3];
  SH_OK(ctx, stof_sched_cache_write(s, cb, "warp", &copy));
  SH_OK(ctx, stof_sched_compute_inline(s, copy));
  assert_int_equal(sh_loops(s, cb, l), 4);
  int64_t fi[2] = {WARPS_M, BM / WARPS_M}, fj[2] = {WARPS_N, BN / WARPS_N}, fk[2] = {BK / 16, 16};
  split_n(s, l[1], 3, fi, i);
  split_n(s, l[2], 3, fj, j);
  split_n(s, l[3], 3, fk, k);
  int order[10] = {l[0], i[0], j[0], i[1], j[1], k[0], k[1], i[2], j[2], k[2]};
  SH_OK(ctx, stof_sched_reorder(s, 10, order));
  SH_OK(ctx, stof_sched_bind(s, l[0], "blockIdx.z"));
  SH_OK(ctx, stof_sched_bind(s, i[0], "blockIdx.y"));
  SH_OK(ctx, stof_sched_bind(s, j[0], "blockIdx.x"));
  SH_OK(ctx, stof_sched_bind(s, i[1], "threadIdx.z"));
  SH_OK(ctx, stof_sched_bind(s, j[1], "threadIdx.y"));
  SH_OK(ctx, stof_sched_unroll(s, k[1]));
  SH_OK(ctx, stof_sched_tensorize(s, i[2], "mma_m16n8k16"));
  for (int input = 0; input < 2; input++) stage_in_shared(s, cb, input, k[0], WARPS_M, WARPS_N, 8);
  SH_OK(ctx, stof_sched_annotate_loop(s, k[0], "pipeline_stages", "3"));
  SH_OK(ctx, stof_sched_reverse_compute_at(s, sh_block(s, "D"), j[1]));
  return s;
}

/* bf16 GEMM on tensor cores, no pipelining: barriers around each stage's copies. */
static stof_sched *gemm_tensorcore_bf16(sh_graph *G) {
  sh_tensorcore t = {128, 256, 64, STOF_DTYPE_BF16, 0, 1, 8};
  return sh_tensorcore_schedule(G, &t);
}

/* f16 GEMM + bias through wgmma (sm_90a): 128 x 128 tiles, two warpgroups of 64 rows on
 * threadIdx.y (threadIdx.x: a warpgroup's 128 lanes), k in steps of 64, both operand tiles
 * in shared memory in wgmma's swizzled layout, fetched by all 256 threads 16 bytes at a
 * time through a 2-stage cp.async pipeline; the epilogue reads the accumulators. */
stof_sched *sh_wgmma_schedule(sh_graph *G, int64_t M, int64_t N, int64_t K, int stages) {
  sh_matmul_f16_bias(G, M, N, K, STOF_DTYPE_F16);
  stof_sched *s = sh_sched(G);
  stof_ctx *ctx = G->ctx;
  int cb = sh_block(s, "C"), copy, l[3], i[3], j[2], k[2];
  SH_OK(ctx, stof_sched_cache_write(s, cb, "warp", &copy));
  SH_OK(ctx, stof_sched_compute_inline(s, copy));
  sh_loops(s, cb, l);
  int64_t fi[2] = {2, 64}, fj = 128, fk = 64;
  split_n(s, l[0], 3, fi, i);
  split_n(s, l[1], 2, &fj, j);
  split_n(s, l[2], 2, &fk, k);
  int order[7] = {i[0], j[0], i[1], k[0], i[2], j[1], k[1]};
  SH_OK(ctx, stof_sched_reorder(s, 7, order));
  SH_OK(ctx, stof_sched_bind(s, i[0], "blockIdx.y"));
  SH_OK(ctx, stof_sched_bind(s, j[0], "blockIdx.x"));
  SH_OK(ctx, stof_sched_bind(s, i[1], "threadIdx.y"));
  SH_OK(ctx, stof_sched_tensorize(s, i[2], "wgmma_m64nNk16"));
  for (int input = 0; input < 2; input++) {
    int sh, sl[2], c[2], f, p[3];
    SH_OK(ctx, stof_sched_cache_read(s, cb, input, "shared", &sh));
    SH_OK(ctx, stof_sched_compute_at(s, sh, k[0]));
    assert_int_equal(sh_loops(s, sh, sl), 2);
    int64_t eight = 8, lanes[2] = {2, 128};
    split_n(s, sl[1], 2, &eight, c);
    int fl[2] = {sl[0], c[0]};
    SH_OK(ctx, stof_sched_fuse(s, 2, fl, &f));
    split_n(s, f, 3, lanes, p);
    SH_OK(ctx, stof_sched_bind(s, p[1], "threadIdx.y"));
    SH_OK(ctx, stof_sched_bind(s, p[2], "threadIdx.x"));
    SH_OK(ctx, stof_sched_vectorize(s, c[1]));
  }
  if (stages > 1) {
    char text[16];
    snprintf(text, sizeof text, "%d", stages);
    SH_OK(ctx, stof_sched_annotate_loop(s, k[0], "pipeline_stages", text));
  }
  SH_OK(ctx, stof_sched_reverse_compute_at(s, sh_block(s, "D"), i[1]));
  return s;
}

static stof_sched *gemm_wgmma_f16(sh_graph *G) { return sh_wgmma_schedule(G, 256, 128, 128, 2); }

/* A float32 matmul, 16 x 16 tiles (one thread per element), whose A and B tiles of 32 along
 * k are staged in shared memory at k.outer and fetched by all 256 threads together (two
 * elements each): shared memory and __syncthreads alone. */
static stof_sched *shared_staging_no_tensorize(sh_graph *G) {
  sh_matmul(G, 64, 48, 64);
  stof_sched *s = sh_sched(G);
  stof_ctx *ctx = G->ctx;
  int bc = sh_block(s, "C"), l[3], t[4], k[2];
  sh_loops(s, bc, l);
  SH_OK(ctx, stof_sched_tile(s, l[0], l[1], stof_factor_const(16), stof_factor_const(16), t));
  sh_split(s, l[2], 32, k);
  int order[5] = {t[0], t[1], k[0], t[2], t[3]};
  SH_OK(ctx, stof_sched_reorder(s, 5, order));
  SH_OK(ctx, stof_sched_bind(s, t[0], "blockIdx.y"));
  SH_OK(ctx, stof_sched_bind(s, t[1], "blockIdx.x"));
  SH_OK(ctx, stof_sched_bind(s, t[2], "threadIdx.y"));
  SH_OK(ctx, stof_sched_bind(s, t[3], "threadIdx.x"));
  for (int input = 0; input < 2; input++) {
    int sh, sl[2], f, p[3];
    SH_OK(ctx, stof_sched_cache_read(s, bc, input, "shared", &sh));
    SH_OK(ctx, stof_sched_compute_at(s, sh, k[0]));
    sh_loops(s, sh, sl);
    SH_OK(ctx, stof_sched_fuse(s, 2, sl, &f));
    int64_t f2[2] = {16, 16};
    split_n(s, f, 3, f2, p);
    SH_OK(ctx, stof_sched_bind(s, p[1], "threadIdx.y"));
    SH_OK(ctx, stof_sched_bind(s, p[2], "threadIdx.x"));
  }
  return s;
}

/* A float16 matmul on the per-thread path with k.outer outside the thread loops: CUDA
 * blocks of 16 x 32 outputs (blockIdx.y, x), threads of 1 x 2 outputs (threadIdx.y, x),
 * the pair vectorized. Each thread sums its pair in a float32 accumulator of 2 floats (the
 * thread-bound loops are not dimensions of it) and rounds it into C once, with one 4-byte
 * store. */
static stof_sched *matmul_f16_k_outer_bound(sh_graph *G) {
  sh_matmul_dtype(G, 64, 64, 256, STOF_DTYPE_F16);
  stof_sched *s = sh_sched(G);
  stof_ctx *ctx = G->ctx;
  int bc = sh_block(s, "C"), l[3], t[4], jp[2], k[2];
  sh_loops(s, bc, l);
  SH_OK(ctx, stof_sched_tile(s, l[0], l[1], stof_factor_const(16), stof_factor_const(32), t));
  sh_split(s, t[3], 2, jp);
  sh_split(s, l[2], 8, k);
  int order[7] = {t[0], t[1], k[0], t[2], jp[0], k[1], jp[1]};
  SH_OK(ctx, stof_sched_reorder(s, 7, order));
  SH_OK(ctx, stof_sched_bind(s, t[0], "blockIdx.y"));
  SH_OK(ctx, stof_sched_bind(s, t[1], "blockIdx.x"));
  SH_OK(ctx, stof_sched_bind(s, t[2], "threadIdx.y"));
  SH_OK(ctx, stof_sched_bind(s, jp[0], "threadIdx.x"));
  SH_OK(ctx, stof_sched_vectorize(s, jp[1]));
  return s;
}

/* ---------------------------------------------------------------- cross-thread reductions
 * (reduce loops bound to threadIdx: codegen_cuda_reduce.c) */

/* Splits the innermost loop of block b by threads, binds the inner part to threadIdx.x and
 * unrolls the outer part. */
static void bind_inner_threads(stof_sched *s, int b, int64_t threads) {
  int l[STOF_SCHED_MAX_LOOPS], n = sh_loops(s, b, l), p[2];
  sh_split(s, l[n - 1], threads, p);
  SH_OK(stof_sched_ctx(s), stof_sched_bind(s, p[1], "threadIdx.x"));
  SH_OK(stof_sched_ctx(s), stof_sched_unroll(s, p[0]));
}

/* Row sums with 64 threads per row (two warps: shuffles, then shared memory). */
static stof_sched *rowsum_allreduce(sh_graph *G) {
  sh_rowsum(G, 16, 256, 0);
  stof_sched *s = sh_sched(G);
  int l[2];
  sh_loops(s, sh_block(s, "S"), l);
  SH_OK(G->ctx, stof_sched_bind(s, l[0], "blockIdx.x"));
  bind_inner_threads(s, sh_block(s, "S"), 64);
  return s;
}

/* Row sums, 32 threads per row, the reduction's outer loop pipelined over 2 stages of the
 * input staged in shared memory by cp.async: the all-reduce and the store follow the
 * pipelined loop. */
static stof_sched *rowsum_allreduce_pipelined(sh_graph *G) {
  sh_rowsum(G, 16, 1024, 0);
  stof_sched *s = sh_sched(G);
  stof_ctx *ctx = G->ctx;
  int b = sh_block(s, "S"), l[2], k[3], sh, sl[2], c[2];
  sh_loops(s, b, l);
  int64_t fk[2] = {32, 4};
  split_n(s, l[1], 3, fk, k);
  SH_OK(ctx, stof_sched_bind(s, l[0], "blockIdx.x"));
  SH_OK(ctx, stof_sched_bind(s, k[1], "threadIdx.x"));
  SH_OK(ctx, stof_sched_cache_read(s, b, 0, "shared", &sh));
  SH_OK(ctx, stof_sched_compute_at(s, sh, k[0]));
  assert_int_equal(sh_loops(s, sh, sl), 2);
  int64_t four = 4;
  split_n(s, sl[1], 2, &four, c);
  SH_OK(ctx, stof_sched_bind(s, c[0], "threadIdx.x"));
  SH_OK(ctx, stof_sched_vectorize(s, c[1]));
  SH_OK(ctx, stof_sched_annotate_loop(s, k[0], "pipeline_stages", "2"));
  return s;
}

/* Row maxima with 16 threads per row (half a warp) and a split that does not divide. */
static stof_sched *rowmax_allreduce_half_warp(sh_graph *G) {
  sh_rowsum(G, 8, 100, 1);
  stof_sched *s = sh_sched(G);
  int l[2];
  sh_loops(s, sh_block(s, "S"), l);
  SH_OK(G->ctx, stof_sched_bind(s, l[0], "blockIdx.x"));
  bind_inner_threads(s, sh_block(s, "S"), 16);
  return s;
}

/* Softmax, one CUDA block of 128 threads per row: e inlined, mx and sm all-reduced at the
 * row loop (a register in every thread), P bound to the same threads. */
static stof_sched *softmax_allreduce(sh_graph *G) {
  sh_softmax(G, 8, 512);
  stof_sched *s = sh_sched(G);
  SH_OK(G->ctx, stof_sched_compute_inline(s, sh_block(s, "e")));
  int bp = sh_block(s, "P"), l[2];
  sh_loops(s, bp, l);
  SH_OK(G->ctx, stof_sched_bind(s, l[0], "blockIdx.x"));
  bind_inner_threads(s, bp, 128);
  SH_OK(G->ctx, stof_sched_compute_at(s, sh_block(s, "sm"), l[0]));
  SH_OK(G->ctx, stof_sched_compute_at(s, sh_block(s, "mx"), l[0]));
  bind_inner_threads(s, sh_block(s, "mx"), 128);
  bind_inner_threads(s, sh_block(s, "sm"), 128);
  return s;
}

/* Layer norm, one CUDA block of 256 threads per row, mean and var all-reduced. */
static stof_sched *layernorm_allreduce(sh_graph *G) {
  sh_layernorm(G, 6, 1024);
  stof_sched *s = sh_sched(G);
  int by = sh_block(s, "Y"), l[2];
  sh_loops(s, by, l);
  SH_OK(G->ctx, stof_sched_bind(s, l[0], "blockIdx.x"));
  bind_inner_threads(s, by, 256);
  SH_OK(G->ctx, stof_sched_compute_at(s, sh_block(s, "var"), l[0]));
  SH_OK(G->ctx, stof_sched_compute_at(s, sh_block(s, "mean"), l[0]));
  bind_inner_threads(s, sh_block(s, "mean"), 256);
  bind_inner_threads(s, sh_block(s, "var"), 256);
  return s;
}

/* ---------------------------------------------------------------- vector loads and stores
 * (vectorized loops over contiguous elements of arguments: codegen_cuda.c) */

/* Splits the innermost loop of block b into (unrolled, threads bound to threadIdx.x, vec
 * vectorized): thread t takes runs of vec contiguous elements. */
static void bind_inner_threads_vec(stof_sched *s, int b, int64_t threads, int64_t vec) {
  int l[STOF_SCHED_MAX_LOOPS], n = sh_loops(s, b, l), p[3];
  int64_t f[2] = {threads, vec};
  split_n(s, l[n - 1], 3, f, p);
  SH_OK(stof_sched_ctx(s), stof_sched_bind(s, p[1], "threadIdx.x"));
  SH_OK(stof_sched_ctx(s), stof_sched_unroll(s, p[0]));
  SH_OK(stof_sched_ctx(s), stof_sched_vectorize(s, p[2]));
}

/* softmax_allreduce with 64 threads of 4-element (16-byte) runs, the reduce loops too. */
static stof_sched *softmax_allreduce_vec4(sh_graph *G) {
  sh_softmax(G, 8, 512);
  stof_sched *s = sh_sched(G);
  SH_OK(G->ctx, stof_sched_compute_inline(s, sh_block(s, "e")));
  int bp = sh_block(s, "P"), l[2];
  sh_loops(s, bp, l);
  SH_OK(G->ctx, stof_sched_bind(s, l[0], "blockIdx.x"));
  bind_inner_threads_vec(s, bp, 64, 4);
  SH_OK(G->ctx, stof_sched_compute_at(s, sh_block(s, "sm"), l[0]));
  SH_OK(G->ctx, stof_sched_compute_at(s, sh_block(s, "mx"), l[0]));
  bind_inner_threads_vec(s, sh_block(s, "mx"), 64, 4);
  bind_inner_threads_vec(s, sh_block(s, "sm"), 64, 4);
  return s;
}

/* layernorm_allreduce with 128 threads of 4-element runs: X, gamma, beta and Y vectorized. */
static stof_sched *layernorm_allreduce_vec4(sh_graph *G) {
  sh_layernorm(G, 6, 1024);
  stof_sched *s = sh_sched(G);
  int by = sh_block(s, "Y"), l[2];
  sh_loops(s, by, l);
  SH_OK(G->ctx, stof_sched_bind(s, l[0], "blockIdx.x"));
  bind_inner_threads_vec(s, by, 128, 4);
  SH_OK(G->ctx, stof_sched_compute_at(s, sh_block(s, "var"), l[0]));
  SH_OK(G->ctx, stof_sched_compute_at(s, sh_block(s, "mean"), l[0]));
  bind_inner_threads_vec(s, sh_block(s, "mean"), 128, 4);
  bind_inner_threads_vec(s, sh_block(s, "var"), 128, 4);
  return s;
}

/* float16 elementwise: blocks of 32 threads, 8 halves (16 bytes) each. */
static stof_sched *vec_f16_vec8(sh_graph *G) {
  sh_vec(G, 2048, STOF_DTYPE_F16);
  stof_sched *s = sh_sched(G);
  int l[1], p[3];
  int64_t f[2] = {32, 8};
  sh_loops(s, sh_block(s, "B"), l);
  split_n(s, l[0], 3, f, p);
  SH_OK(G->ctx, stof_sched_bind(s, p[0], "blockIdx.x"));
  SH_OK(G->ctx, stof_sched_bind(s, p[1], "threadIdx.x"));
  SH_OK(G->ctx, stof_sched_vectorize(s, p[2]));
  return s;
}

/* The stencil with B inlined, vectorized by 2 floats: A[i] and A[i + 2] are 8-byte loads,
 * A[i + 1] starts off a pair and stays scalar in the same loop; C is an 8-byte store. */
static stof_sched *stencil_vec2_misaligned(sh_graph *G) {
  sh_stencil(G, 64);
  stof_sched *s = sh_sched(G);
  SH_OK(G->ctx, stof_sched_compute_inline(s, sh_block(s, "B")));
  int l[1], p[3];
  int64_t f[2] = {16, 2};
  sh_loops(s, sh_block(s, "C"), l);
  split_n(s, l[0], 3, f, p);
  SH_OK(G->ctx, stof_sched_bind(s, p[0], "blockIdx.x"));
  SH_OK(G->ctx, stof_sched_bind(s, p[1], "threadIdx.x"));
  SH_OK(G->ctx, stof_sched_vectorize(s, p[2]));
  return s;
}

/* Rows of 100 floats split by 8 (a guard in the vectorized loop): every access scalar. */
static stof_sched *elem2_vec8_not_dividing(sh_graph *G) {
  sh_elem2(G, 4, 100);
  stof_sched *s = sh_sched(G);
  int l[2], p[2];
  sh_loops(s, sh_block(s, "B"), l);
  sh_split(s, l[1], 8, p);
  SH_OK(G->ctx, stof_sched_bind(s, l[0], "blockIdx.x"));
  SH_OK(G->ctx, stof_sched_bind(s, p[0], "threadIdx.x"));
  SH_OK(G->ctx, stof_sched_vectorize(s, p[1]));
  return s;
}

/* Row sums of 100 over 4 threads of 8-element runs: the split overshoots (a guard in the
 * vectorized reduce loop), so its loads stay scalar. */
static stof_sched *rowsum_allreduce_vec8_not_dividing(sh_graph *G) {
  sh_rowsum(G, 8, 100, 0);
  stof_sched *s = sh_sched(G);
  int l[2];
  sh_loops(s, sh_block(s, "S"), l);
  SH_OK(G->ctx, stof_sched_bind(s, l[0], "blockIdx.x"));
  bind_inner_threads_vec(s, sh_block(s, "S"), 4, 8);
  return s;
}

/* ---------------------------------------------------------------- default schedules
 * (stof_sched_auto on segments of model graphs: segments.c, test_auto.c) */

static stof_sched *auto_layernorm_4096x768_f16(sh_graph *G) {
  sh_seg_layernorm(G, 4096, 768, STOF_DTYPE_F16, 0);
  return sh_auto(G, "cuda");
}
static stof_sched *auto_layernorm_residual_7x1000_f32(sh_graph *G) {
  sh_seg_layernorm(G, 7, 1000, STOF_DTYPE_F32, 1);
  return sh_auto(G, "cuda");
}
static stof_sched *auto_layernorm_residual_out_5x48_f16(sh_graph *G) {
  sh_seg_layernorm(G, 5, 48, STOF_DTYPE_F16, 2);
  return sh_auto(G, "cuda");
}
static stof_sched *auto_rmsnorm_4096x2048_f16(sh_graph *G) {
  sh_seg_rmsnorm(G, 4096, 2048, STOF_DTYPE_F16);
  return sh_auto(G, "cuda");
}
static stof_sched *auto_softmax_128x128_f16(sh_graph *G) {
  sh_seg_softmax(G, 1, 128, 128, STOF_DTYPE_F16);
  return sh_auto(G, "cuda");
}
static stof_sched *auto_softmax_rows_of_3_f16(sh_graph *G) {
  sh_seg_softmax(G, 2, 7, 3, STOF_DTYPE_F16);
  return sh_auto(G, "cuda");
}
static stof_sched *auto_embedding_128x768_f16(sh_graph *G) {
  sh_seg_embedding(G, 128, 1000, 768, STOF_DTYPE_F16);
  return sh_auto(G, "cuda");
}
static stof_sched *auto_split_heads_f16(sh_graph *G) {
  sh_seg_split_heads(G, 2, 128, 12, 64, STOF_DTYPE_F16);
  return sh_auto(G, "cuda");
}
static stof_sched *auto_merge_heads_f16(sh_graph *G) {
  sh_seg_merge_heads(G, 2, 128, 12, 64, STOF_DTYPE_F16);
  return sh_auto(G, "cuda");
}
static stof_sched *auto_qkv_split_f16(sh_graph *G) {
  sh_seg_qkv_split(G, 2, 64, 4, 32, STOF_DTYPE_F16);
  return sh_auto(G, "cuda");
}
static stof_sched *auto_rotary_f16(sh_graph *G) {
  sh_seg_rotary(G, 2, 4, 33, 64, STOF_DTYPE_F16);
  return sh_auto(G, "cuda");
}
static stof_sched *auto_bias_gelu_4096x3072_f16(sh_graph *G) {
  sh_seg_bias_gelu(G, 4096, 3072, STOF_DTYPE_F16, 0);
  return sh_auto(G, "cuda");
}
static stof_sched *auto_swiglu_7x1000_f32(sh_graph *G) {
  sh_seg_swiglu(G, 7, 1000, STOF_DTYPE_F32);
  return sh_auto(G, "cuda");
}
static stof_sched *auto_mirrored_rowsum(sh_graph *G) {
  sh_seg_mirrored_rowsum(G, 7, 40);
  return sh_auto(G, "cuda");
}
static stof_sched *auto_row_norm_f16(sh_graph *G) {
  sh_seg_row_norm(G, 33, 100, STOF_DTYPE_F16);
  return sh_auto(G, "cuda");
}

/* ---------------------------------------------------------------- the table */

#define CASE(fn) {#fn, fn}
const sh_cuda_case sh_cuda_cases[] = {
    CASE(unscheduled_matmul),
    CASE(unscheduled_vec_f32),
    CASE(unscheduled_vec_f16),
    CASE(unscheduled_vec_bf16),
    CASE(unscheduled_elem2),
    CASE(unscheduled_matmul_bias_relu),
    CASE(unscheduled_softmax),
    CASE(unscheduled_sum2),
    CASE(unscheduled_chain),
    CASE(unscheduled_stencil),
    CASE(unscheduled_layernorm),
    CASE(unscheduled_gemm_bias_gelu),
    CASE(matmul_rows_bound),
    CASE(tiled_matmul_bound),
    CASE(non_divisible_split_bound),
    CASE(softmax_rows_bound),
    CASE(layernorm_rows_bound),
    CASE(chain_per_thread),
    CASE(chain_inlined_rows_bound),
    CASE(vec_f16_bound),
    CASE(rfactor_bound_to_threads),
    CASE(matmul_caches_unbound),
    CASE(grouped_gemm_bias_relu),
    CASE(gemm_wgmma_f16),
    CASE(rowsum_allreduce_pipelined),
    CASE(rowsum_allreduce),
    CASE(rowmax_allreduce_half_warp),
    CASE(softmax_allreduce),
    CASE(layernorm_allreduce),
    CASE(gemm_tensorcore_f16),
    CASE(gemm_tensorcore_bf16),
    CASE(gemm_tensorcore_f16_nk),
    CASE(gemm_tensorcore_f16_batched),
    CASE(shared_staging_no_tensorize),
    CASE(matmul_f16_k_outer_bound),
    CASE(softmax_allreduce_vec4),
    CASE(layernorm_allreduce_vec4),
    CASE(vec_f16_vec8),
    CASE(stencil_vec2_misaligned),
    CASE(elem2_vec8_not_dividing),
    CASE(rowsum_allreduce_vec8_not_dividing),
    CASE(auto_layernorm_4096x768_f16),
    CASE(auto_layernorm_residual_7x1000_f32),
    CASE(auto_layernorm_residual_out_5x48_f16),
    CASE(auto_rmsnorm_4096x2048_f16),
    CASE(auto_softmax_128x128_f16),
    CASE(auto_softmax_rows_of_3_f16),
    CASE(auto_embedding_128x768_f16),
    CASE(auto_split_heads_f16),
    CASE(auto_merge_heads_f16),
    CASE(auto_qkv_split_f16),
    CASE(auto_rotary_f16),
    CASE(auto_bias_gelu_4096x3072_f16),
    CASE(auto_swiglu_7x1000_f32),
    CASE(auto_mirrored_rowsum),
    CASE(auto_row_norm_f16),
};
#undef CASE
const int sh_cuda_ncase = (int)(sizeof sh_cuda_cases / sizeof sh_cuda_cases[0]);

const sh_cuda_case *sh_cuda_case_find(const char *name) {
  for (int i = 0; i < sh_cuda_ncase; i++)
    if (strcmp(sh_cuda_cases[i].name, name) == 0) return &sh_cuda_cases[i];
  fail_msg("no CUDA test case named %s", name);
  return NULL;
}

void sh_cuda_case_tests(struct CMUnitTest *tests, char (*names)[96], const char *prefix,
                        CMUnitTestFunction fn) {
  for (int i = 0; i < sh_cuda_ncase; i++) {
    snprintf(names[i], sizeof names[i], "%s/%s", prefix, sh_cuda_cases[i].name);
    struct CMUnitTest t = {names[i], fn, NULL, NULL, (void *)&sh_cuda_cases[i]};
    tests[i] = t;
  }
}
