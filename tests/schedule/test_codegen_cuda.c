/* The CUDA backend, compile-only: every schedule below generates CUDA C that NVRTC compiles
 * for sm_80 and sm_90 (a non-empty cubin); golden snippets of one source (signature, bound
 * indices, guard); schedules CUDA cannot run fail with STOF_ERR_SCHEDULE and a message;
 * stof_build(..., "cuda") without a GPU compiles, then reports STOF_ERR_NO_DEVICE. Nothing
 * here runs on a GPU. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

static int graph_args(sh_graph *G, const stof_op **args) {
  int n = 0;
  for (int i = 0; i < G->nin; i++) args[n++] = G->in[i];
  for (int i = 0; i < G->nout; i++) args[n++] = G->out[i];
  return n;
}

/* The CUDA source of s (malloc'd). */
static char *cuda_source(sh_graph *G, stof_sched *s) {
  const stof_op *args[16];
  int n = graph_args(G, args);
  char *src;
  SH_OK(G->ctx, stof_build_source(s, n, args, "cuda", &src));
  char *copy = strdup(src);
  stof_ctx_dealloc(G->ctx, src, strlen(src) + 1);
  return copy;
}

/* NVRTC compiles the CUDA source of s for sm_80 and sm_90. */
static void expect_compiles(sh_graph *G, stof_sched *s) {
  const stof_op *args[16];
  int n = graph_args(G, args);
  static const char *const arch[] = {"sm_80", "sm_90"};
  for (int i = 0; i < 2; i++) {
    size_t size = 0;
    stof_status st = stof_sched_cuda_check(s, n, args, arch[i], &size);
    if (st) {
      char *src = cuda_source(G, s);
      fprintf(stderr, "%s\n", src);
      free(src);
      fail_msg("%s: %s: %s", arch[i], stof_status_name(st), stof_ctx_message(G->ctx));
    }
    assert_true(size > 0);
  }
}

static void expect_illegal_with(sh_graph *G, stof_sched *s, const stof_op *extra, const char *substr) {
  const stof_op *args[16];
  int n = graph_args(G, args);
  if (extra) args[n++] = extra;
  sh_expect_error(G->ctx, stof_sched_cuda_check(s, n, args, "sm_80", NULL), STOF_ERR_SCHEDULE, substr);
  char *src = NULL;
  sh_expect_error(G->ctx, stof_build_source(s, n, args, "cuda", &src), STOF_ERR_SCHEDULE, substr);
  assert_null(src);
}

static void expect_illegal(sh_graph *G, stof_sched *s, const char *substr) {
  expect_illegal_with(G, s, NULL, substr);
}

/* Binds loop 0 of every block to blockIdx.x and, when data-parallel, loop 1 to threadIdx.x. */
static void bind_rows(stof_sched *s) {
  for (int b0 = 0; b0 < stof_sched_nblock(s); b0++) {
    if (!stof_sched_block_alive(s, b0)) continue;
    int b = sh_block(s, stof_sched_block_name(s, b0));
    int l[STOF_SCHED_MAX_LOOPS], n = sh_loops(s, b, l);
    stof_loop_info info;
    SH_OK(stof_sched_ctx(s), stof_sched_loop_info(s, l[0], &info));
    if (info.iter != STOF_ITER_DATA_PAR) continue;
    SH_OK(stof_sched_ctx(s), stof_sched_bind(s, l[0], "blockIdx.x"));
    if (n < 2) continue;
    SH_OK(stof_sched_ctx(s), stof_sched_loop_info(s, l[1], &info));
    if (info.iter == STOF_ITER_DATA_PAR) SH_OK(stof_sched_ctx(s), stof_sched_bind(s, l[1], "threadIdx.x"));
  }
}

/* ---------------------------------------------------------------- compiles */

static void every_helper_graph_compiles_unscheduled(void **state) {
  (void)state;
  for (int k = 0; k < 12; k++) {
    sh_graph G;
    switch (k) {
    case 0: sh_matmul(&G, 16, 24, 8); break;
    case 1: sh_vec(&G, 37, STOF_DTYPE_F32); break;
    case 2: sh_vec(&G, 37, STOF_DTYPE_F16); break;
    case 3: sh_vec(&G, 37, STOF_DTYPE_BF16); break;
    case 4: sh_elem2(&G, 8, 12); break;
    case 5: sh_matmul_bias_relu(&G, 8, 16, 4); break;
    case 6: sh_softmax(&G, 4, 32); break;
    case 7: sh_sum2(&G, 4, 3, 5); break;
    case 8: sh_chain(&G, 50); break;
    case 9: sh_stencil(&G, 30); break;
    case 10: sh_layernorm(&G, 4, 32); break;
    default: sh_gemm_bias_gelu(&G, 8, 16, 4); break;
    }
    stof_sched *s = sh_sched(&G);
    expect_compiles(&G, s);
    stof_sched_free(s);
    sh_done(&G);
  }
}

static void plain_matmul_and_rows_bound(void **state) {
  (void)state;
  sh_graph G;
  sh_matmul(&G, 32, 64, 16);
  stof_sched *s = sh_sched(&G);
  bind_rows(s);
  expect_compiles(&G, s);
  char *src = cuda_source(&G, s);
  assert_non_null(strstr(src, "grid (32, 1, 1), block (64, 1, 1)"));
  free(src);
  stof_sched_free(s);
  sh_done(&G);
}

static void tiled_matmul_bound_to_blocks_and_threads(void **state) {
  (void)state;
  sh_graph G;
  sh_matmul(&G, 64, 64, 32);
  stof_sched *s = sh_sched(&G);
  int bc = sh_block(s, "C"), l[3], t[4], k[2];
  sh_loops(s, bc, l);
  SH_OK(G.ctx, stof_sched_tile(s, l[0], l[1], stof_factor_const(16), stof_factor_const(16), t));
  sh_split(s, l[2], 8, k);
  SH_OK(G.ctx, stof_sched_bind(s, t[0], "blockIdx.y"));
  SH_OK(G.ctx, stof_sched_bind(s, t[1], "blockIdx.x"));
  SH_OK(G.ctx, stof_sched_bind(s, t[2], "threadIdx.y"));
  SH_OK(G.ctx, stof_sched_bind(s, t[3], "threadIdx.x"));
  SH_OK(G.ctx, stof_sched_unroll(s, k[1]));
  expect_compiles(&G, s);
  char *src = cuda_source(&G, s);
  assert_non_null(strstr(src, "stof_k0_C (4, 4, 1; 16, 16, 1)"));
  assert_non_null(strstr(src, "(int64_t)blockIdx.y;"));
  assert_non_null(strstr(src, "(int64_t)threadIdx.x;"));
  assert_non_null(strstr(src, "#pragma unroll 8"));
  free(src);
  stof_sched_free(s);
  sh_done(&G);
}

/* The golden snippets: a non-divisible split bound to blocks and threads. */
static void non_divisible_split_golden_snippets(void **state) {
  (void)state;
  sh_graph G;
  sh_vec(&G, 37, STOF_DTYPE_F32);
  stof_sched *s = sh_sched(&G);
  int bb = sh_block(s, "B"), l[1], p[2];
  sh_loops(s, bb, l);
  sh_split(s, l[0], 8, p);
  SH_OK(G.ctx, stof_sched_bind(s, p[0], "blockIdx.x"));
  SH_OK(G.ctx, stof_sched_bind(s, p[1], "threadIdx.x"));
  expect_compiles(&G, s);
  char *src = cuda_source(&G, s);
  static const char *const golden[] = {
      "#include <cuda_fp16.h>",
      " *   stof_k0_B (5, 1, 1; 8, 1, 1)\n",
      "extern \"C\" __global__ void __launch_bounds__(8) stof_k0_B(const float *b",
      "  { /* blockIdx.x */\n    const int64_t l1_i_outer = (int64_t)blockIdx.x;\n",
      "    { /* threadIdx.x */\n      const int64_t l2_i_inner = (int64_t)threadIdx.x;\n",
      " = ((l1_i_outer * INT64_C(8)) + l2_i_inner);\n",
      "if (",
      " < INT64_C(37)) {\n",
  };
  for (size_t i = 0; i < sizeof golden / sizeof *golden; i++)
    if (!strstr(src, golden[i])) fail_msg("missing %s in\n%s", golden[i], src);
  free(src);
  stof_sched_free(s);
  sh_done(&G);
}

static void softmax_rows_bound(void **state) {
  (void)state;
  sh_graph G;
  sh_softmax(&G, 8, 128);
  stof_sched *s = sh_sched(&G);
  bind_rows(s);
  expect_compiles(&G, s);
  char *src = cuda_source(&G, s);
  assert_non_null(strstr(src, "stof_k3_P (8, 1, 1; 128, 1, 1)"));
  free(src);
  stof_sched_free(s);
  sh_done(&G);
}

static void layernorm_rows_bound(void **state) {
  (void)state;
  sh_graph G;
  sh_layernorm(&G, 8, 256);
  stof_sched *s = sh_sched(&G);
  bind_rows(s);
  expect_compiles(&G, s);
  stof_sched_free(s);
  sh_done(&G);
}

/* B computed per thread (compute_at the threadIdx loop): a private array. */
static void elementwise_chain_per_thread(void **state) {
  (void)state;
  sh_graph G;
  sh_chain(&G, 100);
  stof_sched *s = sh_sched(&G);
  int bb = sh_block(s, "B"), bc = sh_block(s, "C"), l[1], p[2];
  sh_loops(s, bc, l);
  sh_split(s, l[0], 32, p);
  SH_OK(G.ctx, stof_sched_bind(s, p[0], "blockIdx.x"));
  SH_OK(G.ctx, stof_sched_bind(s, p[1], "threadIdx.x"));
  SH_OK(G.ctx, stof_sched_compute_at(s, bb, p[1]));
  expect_compiles(&G, s);
  char *src = cuda_source(&G, s);
  assert_non_null(strstr(src, "private to the thread"));
  free(src);
  stof_sched_free(s);
  sh_done(&G);
}

static void elementwise_chain_inlined_and_f16(void **state) {
  (void)state;
  sh_graph G;
  sh_chain(&G, 100);
  stof_sched *s = sh_sched(&G);
  SH_OK(G.ctx, stof_sched_compute_inline(s, sh_block(s, "B")));
  bind_rows(s);
  expect_compiles(&G, s);
  stof_sched_free(s);
  sh_done(&G);
  sh_vec(&G, 1000, STOF_DTYPE_F16);
  s = sh_sched(&G);
  int l[1], p[2];
  sh_loops(s, sh_block(s, "B"), l);
  sh_split(s, l[0], 128, p);
  SH_OK(G.ctx, stof_sched_bind(s, p[0], "blockIdx.x"));
  SH_OK(G.ctx, stof_sched_bind(s, p[1], "threadIdx.x"));
  expect_compiles(&G, s);
  char *src = cuda_source(&G, s);
  assert_non_null(strstr(src, "const __half *"));
  assert_non_null(strstr(src, "stof_f2h("));
  free(src);
  stof_sched_free(s);
  sh_done(&G);
}

/* A reduction across threads through rfactor: S.rf per (row, lane), then S per row. */
static void rfactor_bound_to_threads(void **state) {
  (void)state;
  sh_graph G;
  sh_rowsum(&G, 16, 256, 0);
  stof_sched *s = sh_sched(&G);
  int bs = sh_block(s, "S"), l[2], k[2], rf;
  sh_loops(s, bs, l);
  sh_split(s, l[1], 32, k);
  SH_OK(G.ctx, stof_sched_rfactor(s, k[1], 1, &rf));
  int rl[8], n = sh_loops(s, rf, rl);
  assert_true(n >= 3);
  SH_OK(G.ctx, stof_sched_bind(s, rl[0], "blockIdx.x"));
  for (int i = 1; i < n; i++) {
    stof_loop_info info;
    SH_OK(G.ctx, stof_sched_loop_info(s, rl[i], &info));
    if (info.iter == STOF_ITER_DATA_PAR) SH_OK(G.ctx, stof_sched_bind(s, rl[i], "threadIdx.x"));
  }
  int sl[4];
  sh_loops(s, bs, sl);
  SH_OK(G.ctx, stof_sched_bind(s, sl[0], "blockIdx.x"));
  expect_compiles(&G, s);
  stof_sched_free(s);
  sh_done(&G);
}

/* The C backend's tests' schedules with shared/local caches, where each thread owns its
 * tiles (no threads bound inside them). */
static void matmul_caches_unbound(void **state) {
  (void)state;
  sh_graph G;
  sh_matmul(&G, 20, 24, 16);
  stof_sched *s = sh_sched(&G);
  int bc = sh_block(s, "C"), l[4], t[4], k[2], as, bs, cw;
  sh_loops(s, bc, l);
  SH_OK(G.ctx, stof_sched_tile(s, l[0], l[1], stof_factor_const(8), stof_factor_const(8), t));
  sh_split(s, l[2], 4, k);
  int order[6] = {t[0], t[1], k[0], t[2], k[1], t[3]};
  SH_OK(G.ctx, stof_sched_reorder(s, 6, order));
  SH_OK(G.ctx, stof_sched_cache_read(s, bc, 0, "shared", &as));
  SH_OK(G.ctx, stof_sched_cache_read(s, bc, 1, "shared", &bs));
  SH_OK(G.ctx, stof_sched_compute_at(s, as, k[0]));
  SH_OK(G.ctx, stof_sched_compute_at(s, bs, k[0]));
  SH_OK(G.ctx, stof_sched_cache_write(s, bc, "local", &cw));
  SH_OK(G.ctx, stof_sched_reverse_compute_at(s, cw, t[1]));
  SH_OK(G.ctx, stof_sched_bind(s, t[0], "blockIdx.y"));
  SH_OK(G.ctx, stof_sched_bind(s, t[1], "blockIdx.x"));
  SH_OK(G.ctx, stof_sched_vectorize(s, t[3]));
  expect_compiles(&G, s);
  stof_sched_free(s);
  sh_done(&G);
}

/* ---------------------------------------------------------------- illegal for CUDA */

static void reduce_loop_bound_to_a_thread(void **state) {
  (void)state;
  sh_graph G;
  sh_matmul(&G, 8, 8, 8);
  stof_sched *s = sh_sched(&G);
  int l[3];
  sh_loops(s, sh_block(s, "C"), l);
  sh_expect_error(G.ctx, stof_sched_bind(s, l[2], "threadIdx.x"), STOF_ERR_SCHEDULE, "reduce");
  stof_sched_free(s);
  sh_done(&G);
}

static void too_many_threads(void **state) {
  (void)state;
  sh_graph G;
  sh_vec(&G, 4096, STOF_DTYPE_F32);
  stof_sched *s = sh_sched(&G);
  int l[1];
  sh_loops(s, sh_block(s, "B"), l);
  SH_OK(G.ctx, stof_sched_bind(s, l[0], "threadIdx.x"));
  expect_illegal(&G, s, "threadIdx.x = 4096, at most 1024");
  stof_sched_free(s);
  sh_done(&G);
  sh_matmul(&G, 64, 64, 8);
  s = sh_sched(&G);
  int m[3];
  sh_loops(s, sh_block(s, "C"), m);
  SH_OK(G.ctx, stof_sched_bind(s, m[0], "threadIdx.y"));
  SH_OK(G.ctx, stof_sched_bind(s, m[1], "threadIdx.x"));
  expect_illegal(&G, s, "threads per block (threadIdx x * y * z) = 4096");
  stof_sched_free(s);
  sh_done(&G);
}

static void one_tag_twice_in_a_kernel(void **state) {
  (void)state;
  sh_graph G;
  sh_chain(&G, 64);
  stof_sched *s = sh_sched(&G);
  int bb = sh_block(s, "B"), bc = sh_block(s, "C"), l[1], p[2], bl[2];
  sh_loops(s, bc, l);
  sh_split(s, l[0], 16, p);
  SH_OK(G.ctx, stof_sched_bind(s, p[0], "blockIdx.x"));
  SH_OK(G.ctx, stof_sched_bind(s, p[1], "threadIdx.x"));
  SH_OK(G.ctx, stof_sched_compute_at(s, bb, p[0]));
  sh_loops(s, bb, bl);
  SH_OK(G.ctx, stof_sched_bind(s, bl[0], "threadIdx.x"));
  expect_illegal(&G, s, "are both bound to threadIdx.x in kernel stof_k0_C");
  stof_sched_free(s);
  sh_done(&G);
}

static void shared_intermediate_needs_staging(void **state) {
  (void)state;
  sh_graph G;
  sh_chain(&G, 64);
  stof_sched *s = sh_sched(&G);
  int bb = sh_block(s, "B"), bc = sh_block(s, "C"), l[1], p[2];
  sh_loops(s, bc, l);
  sh_split(s, l[0], 16, p);
  SH_OK(G.ctx, stof_sched_bind(s, p[0], "blockIdx.x"));
  SH_OK(G.ctx, stof_sched_bind(s, p[1], "threadIdx.x"));
  SH_OK(G.ctx, stof_sched_compute_at(s, bb, p[0]));
  expect_illegal(&G, s, "buffer B is allocated per iteration of loop i.outer, outside the loop bound to threadIdx.x");
  stof_sched_free(s);
  sh_done(&G);
}

static void output_written_by_every_thread(void **state) {
  (void)state;
  sh_graph G;
  sh_chain(&G, 64);
  stof_sched *s = sh_sched(&G);
  int bb = sh_block(s, "B"), bc = sh_block(s, "C"), l[1], p[2];
  sh_loops(s, bb, l);
  sh_split(s, l[0], 16, p);
  SH_OK(G.ctx, stof_sched_bind(s, p[0], "blockIdx.x"));
  SH_OK(G.ctx, stof_sched_bind(s, p[1], "threadIdx.x"));
  SH_OK(G.ctx, stof_sched_reverse_compute_at(s, bc, p[0]));
  /* B is an argument: C is the only block writing memory other threads see unbound */
  expect_illegal_with(&G, s, sh_op(&G, "B"), "block C stores into C outside any loop bound to threadIdx.x");
  stof_sched_free(s);
  sh_done(&G);
}

/* ---------------------------------------------------------------- build */

static void build_without_gpu_compiles_then_reports(void **state) {
  (void)state;
  sh_graph G;
  sh_vec(&G, 37, STOF_DTYPE_F32);
  stof_sched *s = sh_sched(&G);
  const stof_op *args[4];
  int n = graph_args(&G, args);
  stof_func *f = NULL;
  int gpu = stof_cuda_init(G.ctx) == STOF_OK;
  stof_ctx_clear_error(G.ctx);
  stof_status st = stof_build(s, n, args, "cuda", &f);
  if (!gpu) {
    assert_null(f);
    sh_expect_error(G.ctx, st, STOF_ERR_NO_DEVICE, "the CUDA source compiled (sm_80, 1 kernels) but no GPU");
  } else {
    SH_OK(G.ctx, st);
    assert_non_null(strstr(stof_func_source(f), "__global__"));
    stof_func_free(f);
  }
  char *src = NULL;
  SH_OK(G.ctx, stof_build_source(s, n, args, "c", &src));
  assert_non_null(strstr(src, "int stof_kernel("));
  stof_ctx_dealloc(G.ctx, src, strlen(src) + 1);
  sh_expect_error(G.ctx, stof_build_source(s, n, args, "metal", &src), STOF_ERR_ARG, "unknown target \"metal\"");
  sh_expect_error(G.ctx, stof_sched_cuda_check(s, n, args, "compute_80", NULL), STOF_ERR_ARG, "not sm_XY");
  stof_sched_free(s);
  sh_done(&G);
}

int run_codegen_cuda_tests(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(every_helper_graph_compiles_unscheduled),
      cmocka_unit_test(plain_matmul_and_rows_bound),
      cmocka_unit_test(tiled_matmul_bound_to_blocks_and_threads),
      cmocka_unit_test(non_divisible_split_golden_snippets),
      cmocka_unit_test(softmax_rows_bound),
      cmocka_unit_test(layernorm_rows_bound),
      cmocka_unit_test(elementwise_chain_per_thread),
      cmocka_unit_test(elementwise_chain_inlined_and_f16),
      cmocka_unit_test(rfactor_bound_to_threads),
      cmocka_unit_test(matmul_caches_unbound),
      cmocka_unit_test(reduce_loop_bound_to_a_thread),
      cmocka_unit_test(too_many_threads),
      cmocka_unit_test(one_tag_twice_in_a_kernel),
      cmocka_unit_test(shared_intermediate_needs_staging),
      cmocka_unit_test(output_written_by_every_thread),
      cmocka_unit_test(build_without_gpu_compiles_then_reports),
  };
  return cmocka_run_group_tests_name("codegen_cuda", tests, NULL, NULL);
}
