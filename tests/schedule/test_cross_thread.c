/* Cross-thread reductions on CUDA (a reduce loop bound to threadIdx; codegen_cuda_reduce.c):
 * golden snippets of the generated all-reduce, NVRTC compiles, the same schedules on the C
 * backend against the interpreter (a bound loop is a serial loop there), and what is
 * refused: a reduce loop bound to blockIdx, an all-reduce under a guard, a data-parallel
 * loop inside the reduce loops; vectorized reduce loops inside the bound one (vector loads,
 * no ivdep on the C backend). The schedules are the shared CUDA cases (cuda_cases.c),
 * which the GPU suite runs against the interpreter. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_cases.h"

/* The CUDA source of s (malloc'd); NVRTC compiles it for sm_80 and sm_90. */
static char *compiled_source(sh_graph *G, stof_sched *s) {
  const stof_op *args[16];
  int n = sh_args(G, args);
  static const char *const arch[] = {"sm_80", "sm_90"};
  for (int i = 0; i < 2; i++) {
    size_t size = 0;
    SH_OK(G->ctx, stof_sched_cuda_check(s, n, args, arch[i], &size));
    assert_true(size > 0);
  }
  char *src;
  SH_OK(G->ctx, stof_build_source(s, n, args, "cuda", &src));
  char *copy = strdup(src);
  stof_ctx_dealloc(G->ctx, src, strlen(src) + 1);
  return copy;
}


static void rowsum_over_two_warps(void **state) {
  (void)state;
  sh_graph G;
  stof_sched *s = sh_cuda_case_find("rowsum_allreduce")->make(&G);
  sh_expect_nest(s,
                 "for i in 0..16 [blockIdx.x]:\n"
                 "  S[i] = 0.0\n"
                 "  for k.outer in 0..4 [unrolled]:\n"
                 "    for k.inner in 0..64 [threadIdx.x]:\n"
                 "      let k = k.outer * 64 + k.inner\n"
                 "      S[i] = S[i] + X[i, k]\n");
  char *src = compiled_source(&G, s);
  static const char *const golden[] = {
      " *   stof_k0_S (16, 1, 1; 64, 1, 1)\n",
      "STOF_D T stof_xr_max_##S(T a, T b) { return (b > a || b != b) ? b : a; } \\\n",
      "    float stof_acc0 = (float)0; /* this thread's share of S */\n",
      "        stof_acc0 = stof_xr_sum_f32(stof_acc0, ",
      "    { /* all-reduce (sum) of S over threadIdx.x: 64 threads, 2 warps */\n"
      "      const int stof_lin = (int)(threadIdx.x + 64u * (threadIdx.y + 1u * threadIdx.z));\n"
      "      float stof_v = stof_acc0;\n"
      "      stof_v = stof_warp_sum_f32(stof_v, 0xffffffffu, 32);\n"
      "      __shared__ float stof_part[2];\n"
      "      if ((stof_lin & 31) == 0) stof_part[stof_lin >> 5] = stof_v;\n"
      "      __syncthreads(); /* every warp's partial is written */\n"
      "      stof_v = (stof_lin & 31) < 2 ? stof_part[stof_lin / 64 * 2 + (stof_lin & 31)] : (float)0;\n"
      "      stof_v = stof_warp_sum_f32(stof_v, 0xffffffffu, 32);\n"
      "      __syncthreads(); /* every warp has read the partials */\n"
      "      stof_acc0 = stof_v;\n"
      "    }\n",
      "_S[(v",
      "(float)(stof_acc0);\n",
  };
  sh_expect_snippets(src, golden, sizeof golden / sizeof *golden);
  free(src);
  sh_check_numeric(&G, s);
  stof_sched_free(s);
  sh_done(&G);
}

/* 16 threads: one butterfly over 16 lanes of a partial warp, no shared memory. */
static void rowmax_within_half_a_warp(void **state) {
  (void)state;
  sh_graph G;
  stof_sched *s = sh_cuda_case_find("rowmax_allreduce_half_warp")->make(&G);
  char *src = compiled_source(&G, s);
  static const char *const golden[] = {
      "    float stof_acc0 = (float)-INFINITY; /* this thread's share of S */\n",
      "stof_acc0 = stof_xr_max_f32(stof_acc0, ",
      "      stof_v = stof_warp_max_f32(stof_v, stof_warp_mask(stof_lin, 16), 16);\n"
      "      stof_acc0 = stof_v;\n",
  };
  sh_expect_snippets(src, golden, sizeof golden / sizeof *golden);
  assert_null(strstr(src, "__syncthreads"));
  free(src);
  sh_check_numeric(&G, s);
  stof_sched_free(s);
  sh_done(&G);
}

/* mx and sm, computed at the row loop bound to blockIdx.x, are all-reduced: each thread
 * keeps its own copy (a private array), which "threads would share it" refused before. */
static void softmax_statistics_in_every_thread(void **state) {
  (void)state;
  sh_graph G;
  stof_sched *s = sh_cuda_case_find("softmax_allreduce")->make(&G);
  char *src = compiled_source(&G, s);
  static const char *const golden[] = {
      " *   stof_k0_P (8, 1, 1; 128, 1, 1)\n",
      "  float b1_mx[1]; /* global, private to the thread */\n",
      "{ /* all-reduce (max) of mx over threadIdx.x: 128 threads, 4 warps */\n",
      "{ /* all-reduce (sum) of sm over threadIdx.x: 128 threads, 4 warps */\n",
      "_mx[(v",
      ") * INT64_C(1)] = (float)(stof_acc0);\n",
  };
  sh_expect_snippets(src, golden, sizeof golden / sizeof *golden);
  free(src);
  sh_check_numeric(&G, s);
  stof_sched_free(s);
  sh_done(&G);
}

static void layernorm_statistics_in_every_thread(void **state) {
  (void)state;
  sh_graph G;
  stof_sched *s = sh_cuda_case_find("layernorm_allreduce")->make(&G);
  char *src = compiled_source(&G, s);
  assert_non_null(strstr(src, "all-reduce (sum) of mean over threadIdx.x: 256 threads, 8 warps"));
  assert_non_null(strstr(src, "all-reduce (sum) of var over threadIdx.x: 256 threads, 8 warps"));
  free(src);
  sh_check_numeric(&G, s);
  stof_sched_free(s);
  sh_done(&G);
}

/* ---------------------------------------------------------------- vectorized reduce loops */

/* The C source of s (malloc'd). */
static char *c_source(sh_graph *G, stof_sched *s) {
  const stof_op *args[16];
  int n = sh_args(G, args);
  char *src;
  SH_OK(G->ctx, stof_build_source(s, n, args, "c", &src));
  char *copy = strdup(src);
  stof_ctx_dealloc(G->ctx, src, strlen(src) + 1);
  return copy;
}

/* r = r.0 * 256 + r.1 * 4 + r.2, r.1 on threadIdx.x, r.2 vectorized: each thread folds a
 * 16-byte load of X in order, then the all-reduce; P is a 16-byte store. On the C backend
 * the vectorized reduce loop is unrolled, not ivdep (its iterations share the accumulator). */
static void softmax_vectorized_reductions(void **state) {
  (void)state;
  sh_graph G;
  stof_sched *s = sh_cuda_case_find("softmax_allreduce_vec4")->make(&G);
  char *src = compiled_source(&G, s);
  static const char *const golden[] = {
      " *   stof_k0_P (8, 1, 1; 64, 1, 1)\n",
      "{ /* loop c.2 vectorized: 1 vector loads, 0 vector stores */\n",
      "{ /* loop r.2 vectorized: 1 vector loads, 0 vector stores */\n"
      "            uint4 stof_vl0;\n"
      "            {\n"
      "              const int64_t l17_r_2 = 0;\n"
      "              const int64_t v1_r = (((l15_r_0 * INT64_C(256)) + (l16_r_1 * INT64_C(4))) + l17_r_2);\n"
      "              stof_vl0 = *(const uint4 *)&b0_X[((int64_t)(v0_i)) * INT64_C(512) + ((int64_t)(v1_r)) * INT64_C(1)];\n"
      "            }\n"
      "            #pragma unroll\n"
      "            for (int64_t l17_r_2 = 0; l17_r_2 < INT64_C(4); ++l17_r_2) {\n"
      "              const int64_t v1_r = (((l15_r_0 * INT64_C(256)) + (l16_r_1 * INT64_C(4))) + l17_r_2);\n"
      "              stof_acc0 = stof_xr_max_f32(stof_acc0, (((const float *)&stof_vl0)[l17_r_2]));\n"
      "            }\n",
      "{ /* all-reduce (max) of mx over threadIdx.x: 64 threads, 2 warps */\n",
      "{ /* loop j.2 vectorized: 1 vector loads, 1 vector stores */\n",
      "            ((float *)&stof_vs)[l10_j_2] = (float)(((expf(((((const float *)&stof_vl0)[l10_j_2]) - ",
      "          {\n"
      "            const int64_t l10_j_2 = 0;\n"
      "            const int64_t v11_j = (((l8_j_0 * INT64_C(256)) + (l9_j_1 * INT64_C(4))) + l10_j_2);\n"
      "            *(uint4 *)&b4_P[(v10_i) * INT64_C(512) + (v11_j) * INT64_C(1)] = stof_vs;\n"
      "          }\n",
  };
  sh_expect_snippets(src, golden, sizeof golden / sizeof *golden);
  free(src);
  char *c = c_source(&G, s);
  static const char *const golden_c[] = {
      "            #pragma GCC unroll 4\n"
      "            for (int64_t l17_r_2 = 0; l17_r_2 < INT64_C(4); ++l17_r_2) {\n",
      "            #pragma GCC unroll 4\n"
      "            for (int64_t l20_c_2 = 0; l20_c_2 < INT64_C(4); ++l20_c_2) {\n",
      "          #pragma GCC ivdep\n" /* P's vectorized loop is data-parallel */
      "          for (int64_t l10_j_2 = 0; l10_j_2 < INT64_C(4); ++l10_j_2) {\n",
  };
  sh_expect_snippets(c, golden_c, sizeof golden_c / sizeof *golden_c);
  assert_null(strstr(strstr(c, "ivdep") + 1, "ivdep")); /* there only */
  free(c);
  sh_check_numeric(&G, s);
  stof_sched_free(s);
  sh_done(&G);
}

/* X, gamma and beta are 16-byte loads, Y a 16-byte store; var reads X once per element. */
static void layernorm_vectorized(void **state) {
  (void)state;
  sh_graph G;
  stof_sched *s = sh_cuda_case_find("layernorm_allreduce_vec4")->make(&G);
  char *src = compiled_source(&G, s);
  static const char *const golden[] = {
      "vectorized: 1 vector loads, 0 vector stores */\n",
      "vectorized: 3 vector loads, 1 vector stores */\n",
      "= *(const uint4 *)&b1_gamma[",
      "= *(const uint4 *)&b2_beta[",
      "*(uint4 *)&b5_Y[",
  };
  sh_expect_snippets(src, golden, sizeof golden / sizeof *golden);
  free(src);
  sh_check_numeric(&G, s);
  stof_sched_free(s);
  sh_done(&G);
}

/* K = 100 over 4 threads of 8: the vectorized reduce loop has a guard, so its loads stay
 * scalar (the loop is unrolled as before); right on the C backend. */
static void vectorized_reduce_not_dividing_stays_scalar(void **state) {
  (void)state;
  sh_graph G;
  stof_sched *s = sh_cuda_case_find("rowsum_allreduce_vec8_not_dividing")->make(&G);
  char *src = compiled_source(&G, s);
  assert_null(strstr(src, "stof_vl"));
  assert_non_null(strstr(src, "#pragma unroll 8 /* vectorize */\n"));
  free(src);
  char *c = c_source(&G, s);
  assert_null(strstr(c, "ivdep"));
  free(c);
  sh_check_numeric(&G, s);
  stof_sched_free(s);
  sh_done(&G);
}

/* ---------------------------------------------------------------- refused */

static void expect_illegal(sh_graph *G, stof_sched *s, const char *substr) {
  sh_expect_cuda_illegal(G, s, NULL, substr);
}

static void reduce_loop_bound_to_blockidx(void **state) {
  (void)state;
  sh_graph G;
  sh_rowsum(&G, 8, 64, 0);
  stof_sched *s = sh_sched(&G);
  int l[2];
  sh_loops(s, sh_block(s, "S"), l);
  sh_expect_error(G.ctx, stof_sched_bind(s, l[1], "blockIdx.y"), STOF_ERR_SCHEDULE,
                  "bind: loop k is a reduce loop: it cannot be bound to blockIdx.y (CUDA blocks do not "
                  "combine partial results; bind it to threadIdx.x/y/z");
  SH_OK(G.ctx, stof_sched_bind(s, l[1], "threadIdx.y")); /* threads: allowed */
  stof_sched_free(s);
  sh_done(&G);
}

/* Rows split by 3 (16 rows: the last tile is guarded): the all-reduce would sit under
 * "if (i < 16)", which some threads of a CUDA block could skip. */
static void allreduce_under_a_guard(void **state) {
  (void)state;
  sh_graph G;
  sh_rowsum(&G, 16, 64, 0);
  stof_sched *s = sh_sched(&G);
  int bs = sh_block(s, "S"), l[2], p[2], k[2];
  sh_loops(s, bs, l);
  sh_split(s, l[0], 3, p);
  sh_split(s, l[1], 32, k);
  SH_OK(G.ctx, stof_sched_bind(s, p[0], "blockIdx.x"));
  SH_OK(G.ctx, stof_sched_bind(s, k[1], "threadIdx.x"));
  expect_illegal(&G, s,
                 "cuda: block S reduces across threads: it lies under a guard (a thread index beyond a "
                 "loop's extent, or a split that does not divide), so not every thread would reach its "
                 "all-reduce over threadIdx.x");
  sh_check_numeric(&G, s); /* the C backend runs it */
  stof_sched_free(s);
  sh_done(&G);
}

static void data_parallel_loop_inside_the_reduce_loops(void **state) {
  (void)state;
  sh_graph G;
  sh_matmul(&G, 8, 8, 64);
  stof_sched *s = sh_sched(&G);
  int l[3], k[2];
  sh_loops(s, sh_block(s, "C"), l);
  sh_split(s, l[2], 32, k);
  int order[4] = {l[0], k[1], l[1], k[0]};
  SH_OK(G.ctx, stof_sched_reorder(s, 4, order));
  SH_OK(G.ctx, stof_sched_bind(s, l[0], "blockIdx.x"));
  SH_OK(G.ctx, stof_sched_bind(s, k[1], "threadIdx.x"));
  expect_illegal(&G, s, "cuda: block C reduces across threads: data-parallel loop j lies inside its reduce loops");
  stof_sched_free(s);
  sh_done(&G);
}

/* threadIdx.x = 48 threads: not a power of two up to 32 nor a multiple of 32. */
static void allreduce_over_48_threads(void **state) {
  (void)state;
  sh_graph G;
  sh_rowsum(&G, 4, 96, 0);
  stof_sched *s = sh_sched(&G);
  int l[2], k[2];
  sh_loops(s, sh_block(s, "S"), l);
  sh_split(s, l[1], 48, k);
  SH_OK(G.ctx, stof_sched_bind(s, l[0], "blockIdx.x"));
  SH_OK(G.ctx, stof_sched_bind(s, k[1], "threadIdx.x"));
  expect_illegal(&G, s, "the kernel launches threadIdx.x = 48: it must be a power of two up to 32 or a multiple of 32");
  stof_sched_free(s);
  sh_done(&G);
}

int run_cross_thread_tests(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(rowsum_over_two_warps),
      cmocka_unit_test(rowmax_within_half_a_warp),
      cmocka_unit_test(softmax_statistics_in_every_thread),
      cmocka_unit_test(layernorm_statistics_in_every_thread),
      cmocka_unit_test(softmax_vectorized_reductions),
      cmocka_unit_test(layernorm_vectorized),
      cmocka_unit_test(vectorized_reduce_not_dividing_stays_scalar),
      cmocka_unit_test(reduce_loop_bound_to_blockidx),
      cmocka_unit_test(allreduce_under_a_guard),
      cmocka_unit_test(data_parallel_loop_inside_the_reduce_loops),
      cmocka_unit_test(allreduce_over_48_threads),
  };
  return cmocka_run_group_tests_name("cross_thread", tests, NULL, NULL);
}
