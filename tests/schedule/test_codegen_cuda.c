/* The CUDA backend, compile-only: every schedule of the shared table (cuda_cases.c, which
 * test_schedule_gpu runs on a GPU) generates CUDA C that NVRTC compiles for sm_80 and sm_90
 * (a non-empty cubin), one test per schedule ("compiles/<case>"); golden snippets of some
 * of their sources (signature, bound indices, guard, launch); schedules CUDA cannot run fail
 * with STOF_ERR_SCHEDULE and a message; stof_build(..., "cuda") without a GPU compiles, then
 * reports STOF_ERR_NO_DEVICE; stof_func_time refuses what it cannot time. Nothing here runs
 * on a GPU. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_cases.h"

/* NVRTC compiles the CUDA source of s for sm_80 and sm_90. */
static void expect_compiles(sh_graph *G, stof_sched *s) {
  const stof_op *args[16];
  int n = sh_args(G, args);
  static const char *const arch[] = {"sm_80", "sm_90"};
  for (int i = 0; i < 2; i++) {
    size_t size = 0;
    stof_status st = stof_sched_cuda_check(s, n, args, arch[i], &size);
    if (st == STOF_ERR_UNSUPPORTED && i == 0 && strstr(stof_ctx_message(G->ctx), "uses wgmma, which needs sm_90a")) {
      stof_ctx_clear_error(G->ctx); /* a wgmma schedule compiles for sm_90a only (sm_90 below) */
      continue;
    }
    if (st) {
      char *src = sh_cuda_source(G, s);
      fprintf(stderr, "%s\n", src);
      free(src);
      fail_msg("%s: %s: %s", arch[i], stof_status_name(st), stof_ctx_message(G->ctx));
    }
    assert_true(size > 0);
  }
}

static void expect_illegal(sh_graph *G, stof_sched *s, const char *substr) {
  sh_expect_cuda_illegal(G, s, NULL, substr);
}

/* ---------------------------------------------------------------- compiles */

/* One case of the table compiles for sm_80 and sm_90. */
static void case_compiles(void **state) {
  const sh_cuda_case *c = *state;
  sh_graph G;
  stof_sched *s = c->make(&G);
  expect_compiles(&G, s);
  stof_sched_free(s);
  sh_done(&G);
}

/* The CUDA source of the table's case name (malloc'd). */
static char *case_source(const char *name) {
  sh_graph G;
  stof_sched *s = sh_cuda_case_find(name)->make(&G);
  char *src = sh_cuda_source(&G, s);
  stof_sched_free(s);
  sh_done(&G);
  return src;
}

static void plain_matmul_and_rows_bound(void **state) {
  (void)state;
  char *src = case_source("matmul_rows_bound");
  assert_non_null(strstr(src, "grid (32, 1, 1), block (64, 1, 1)"));
  free(src);
}

static void tiled_matmul_bound_to_blocks_and_threads(void **state) {
  (void)state;
  char *src = case_source("tiled_matmul_bound");
  assert_non_null(strstr(src, "stof_k0_C (4, 4, 1; 16, 16, 1)"));
  assert_non_null(strstr(src, "(int64_t)blockIdx.y;"));
  assert_non_null(strstr(src, "(int64_t)threadIdx.x;"));
  assert_non_null(strstr(src, "#pragma unroll 8"));
  free(src);
}

/* The golden snippets: a non-divisible split bound to blocks and threads. */
static void non_divisible_split_golden_snippets(void **state) {
  (void)state;
  char *src = case_source("non_divisible_split_bound");
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
}

static void softmax_rows_bound(void **state) {
  (void)state;
  char *src = case_source("softmax_rows_bound");
  assert_non_null(strstr(src, "stof_k3_P (8, 1, 1; 128, 1, 1)"));
  free(src);
}

/* B computed per thread (compute_at the threadIdx loop): a private array. */
static void elementwise_chain_per_thread(void **state) {
  (void)state;
  char *src = case_source("chain_per_thread");
  assert_non_null(strstr(src, "private to the thread"));
  free(src);
}

static void elementwise_chain_inlined_and_f16(void **state) {
  (void)state;
  char *src = case_source("vec_f16_bound");
  assert_non_null(strstr(src, "const __half *"));
  assert_non_null(strstr(src, "stof_f2h("));
  free(src);
}

/* ---------------------------------------------------------------- vector loads and stores */

static void expect_in(const char *src, const char *const *golden, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!strstr(src, golden[i])) {
      fprintf(stderr, "%s\n", src); /* whole: fail_msg truncates */
      fail_msg("missing\n%s", golden[i]);
    }
}

/* The source of case name (malloc'd), checked on the C backend against the interpreter. */
static char *case_source_checked(const char *name) {
  sh_graph G;
  stof_sched *s = sh_cuda_case_find(name)->make(&G);
  char *src = sh_cuda_source(&G, s);
  sh_check_numeric(&G, s);
  stof_sched_free(s);
  sh_done(&G);
  return src;
}

/* 8 halves per thread: one 16-byte load of A before the loop, the elements from the
 * register, one 16-byte store of B after it. */
static void vectorized_f16_load_and_store(void **state) {
  (void)state;
  char *src = case_source_checked("vec_f16_vec8");
  static const char *const golden[] = {
      "      { /* loop i.2 vectorized: 1 vector loads, 1 vector stores */\n"
      "        uint4 stof_vl0;\n"
      "        uint4 stof_vs;\n"
      "        {\n"
      "          const int64_t l3_i_2 = 0;\n"
      "          const int64_t v0_i = (((l1_i_0 * INT64_C(256)) + (l2_i_1 * INT64_C(8))) + l3_i_2);\n"
      "          stof_vl0 = *(const uint4 *)&b0_A[((int64_t)(v0_i)) * INT64_C(1)];\n"
      "        }\n"
      "        #pragma unroll\n"
      "        for (int64_t l3_i_2 = 0; l3_i_2 < INT64_C(8); ++l3_i_2) {\n"
      "          const int64_t v0_i = (((l1_i_0 * INT64_C(256)) + (l2_i_1 * INT64_C(8))) + l3_i_2);\n"
      "          ((__half *)&stof_vs)[l3_i_2] = stof_f2h(((stof_h2f(((const __half *)&stof_vl0)[l3_i_2]) * ((float)3)) - ((float)1)));\n"
      "        }\n"
      "        {\n"
      "          const int64_t l3_i_2 = 0;\n"
      "          const int64_t v0_i = (((l1_i_0 * INT64_C(256)) + (l2_i_1 * INT64_C(8))) + l3_i_2);\n"
      "          *(uint4 *)&b1_B[(v0_i) * INT64_C(1)] = stof_vs;\n"
      "        }\n"
      "      }\n",
  };
  expect_in(src, golden, sizeof golden / sizeof *golden);
  free(src);
}

/* A float16 matmul summed per thread in float32: the thread's accumulator has the serial
 * pair loop as its one dimension (2 floats; the loops bound to threads are the thread's
 * own), the update adds float products, and the final nest rounds each element once, as one
 * 4-byte store of the pair. Checked on the C backend with the tolerance of one rounding. */
static void half_sum_accumulates_in_float_per_thread(void **state) {
  (void)state;
  sh_graph G;
  stof_sched *s = sh_cuda_case_find("matmul_f16_k_outer_bound")->make(&G);
  char *src = sh_cuda_source(&G, s);
  sh_check_numeric_within(&G, s, 5e-4); /* K = 256: rounding every partial sum gives 2e-3 */
  stof_sched_free(s);
  sh_done(&G);
  static const char *const golden[] = {
      "  float stof_facc0[2]; /* float32 accumulator of C, private to the thread */\n",
      "            stof_facc0[l8_j_inner_inner * INT64_C(1)] = 0.0f;\n",
      "                  stof_facc0[l8_j_inner_inner * INT64_C(1)] += (stof_h2f(b0_A[",
      "          { /* loop j.inner.inner vectorized: 0 vector loads, 1 vector stores */\n"
      "            unsigned stof_vs;\n"
      "            #pragma unroll\n"
      "            for (int64_t l8_j_inner_inner = 0; l8_j_inner_inner < INT64_C(2); ++l8_j_inner_inner) {\n"
      "              const int64_t v1_j = ((l5_j_outer * INT64_C(32)) + ((l7_j_inner_outer * INT64_C(2)) + l8_j_inner_inner));\n"
      "              ((__half *)&stof_vs)[l8_j_inner_inner] = stof_f2h(stof_facc0[l8_j_inner_inner * INT64_C(1)]);\n"
      "            }\n",
  };
  expect_in(src, golden, sizeof golden / sizeof *golden);
  assert_null(strstr(src, "stof_h2f(b2_C[")); /* C is never read back */
  free(src);
}

/* A[i + 1] starts off a pair of floats: scalar, beside the 8-byte loads of A[i], A[i + 2]. */
static void vectorized_misaligned_load_stays_scalar(void **state) {
  (void)state;
  char *src = case_source_checked("stencil_vec2_misaligned");
  static const char *const golden[] = {
      "{ /* loop i.2 vectorized: 2 vector loads, 1 vector stores */\n"
      "        uint2 stof_vl0;\n"
      "        uint2 stof_vl1;\n"
      "        uint2 stof_vs;\n",
      "          stof_vl0 = *(const uint2 *)&b0_A[((int64_t)(v2_i)) * INT64_C(1)];\n"
      "          stof_vl1 = *(const uint2 *)&b0_A[((int64_t)((v2_i + ((int32_t)2)))) * INT64_C(1)];\n",
      "(((const float *)&stof_vl0)[l4_i_2]) * ((float)2)) + ((b0_A[((int64_t)((v2_i + ((int32_t)1)))) * INT64_C(1)]) * "
      "((float)2))) + ((((const float *)&stof_vl1)[l4_i_2]) * ((float)2))));\n",
      "          *(uint2 *)&b2_C[(v2_i) * INT64_C(1)] = stof_vs;\n",
  };
  expect_in(src, golden, sizeof golden / sizeof *golden);
  free(src);
}

/* Rows of 100 split by 8: the vectorized loop has a guard, so its accesses stay scalar. */
static void vectorized_not_dividing_stays_scalar(void **state) {
  (void)state;
  char *src = case_source_checked("elem2_vec8_not_dividing");
  assert_null(strstr(src, "stof_vl"));
  assert_null(strstr(src, "stof_vs"));
  assert_non_null(strstr(src, "#pragma unroll 8 /* vectorize */\n"));
  free(src);
}

/* ---------------------------------------------------------------- illegal for CUDA */

static void reduce_loop_bound_to_a_thread(void **state) {
  (void)state;
  sh_graph G;
  sh_matmul(&G, 8, 8, 8);
  stof_sched *s = sh_sched(&G);
  int l[3];
  sh_loops(s, sh_block(s, "C"), l);
  sh_expect_error(G.ctx, stof_sched_bind(s, l[2], "blockIdx.x"), STOF_ERR_SCHEDULE, "reduce");
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
  expect_illegal(&G, s, "cuda: buffer B is allocated per iteration of loop i.outer, outside the loop bound to threadIdx.x in kernel stof_k0_C: threads would share it");
  stof_sched_free(s);
  sh_done(&G);
}

/* B computed at the block loop with none of its loops bound: every thread computes all of
 * it into its own copy (legal, if redundant); its numbers are right on the C backend. */
static void unbound_intermediate_is_per_thread(void **state) {
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
  expect_compiles(&G, s);
  char *src = sh_cuda_source(&G, s);
  assert_non_null(strstr(src, "[16]; /* global, private to the thread */"));
  free(src);
  sh_check_numeric(&G, s);
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
  sh_expect_cuda_illegal(&G, s, sh_op(&G, "B"), "block C stores into C outside any loop bound to threadIdx.x");
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
  int n = sh_args(&G, args);
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

/* stof_func_time: what it refuses without a GPU (a "c" build, reps < 1). */
static void time_refuses_a_c_build(void **state) {
  (void)state;
  sh_graph G;
  sh_vec(&G, 37, STOF_DTYPE_F32);
  stof_sched *s = sh_sched(&G);
  const stof_op *args[4];
  int n = sh_args(&G, args);
  stof_func *f = NULL;
  SH_OK(G.ctx, stof_build(s, n, args, "c", &f));
  stof_tensor *t[2];
  SH_OK(G.ctx, stof_tensor_rand(G.ctx, STOF_DTYPE_F32, 1, G.in[0]->shape, 1, &t[0]));
  SH_OK(G.ctx, stof_tensor_new(G.ctx, STOF_DTYPE_F32, 1, G.out[0]->shape, STOF_DEVICE_CPU, &t[1]));
  double ms = -1;
  sh_expect_error(G.ctx, stof_func_time(f, 2, t, 10, 2, &ms), STOF_ERR_ARG,
                  "time: the function was built for target \"c\"; only \"cuda\" builds are timed");
  assert_true(ms == 0);
  sh_expect_error(G.ctx, stof_func_time(f, 2, t, 0, 2, &ms), STOF_ERR_ARG, "time: reps = 0 and warmup = 2");
  sh_expect_error(G.ctx, stof_func_time(f, 2, t, 5, -1, &ms), STOF_ERR_ARG, "warmup = -1 (reps >= 1, warmup >= 0)");
  SH_OK(G.ctx, stof_func_call(f, 2, t)); /* the function is still usable */
  stof_tensor_free(t[0]);
  stof_tensor_free(t[1]);
  stof_func_free(f);
  stof_sched_free(s);
  sh_done(&G);
}

int run_codegen_cuda_tests(void) {
  /* one test per case of the shared table: its length is known at run time, so the group
   * runs through _cmocka_run_group_tests (what cmocka_run_group_tests_name expands to) */
  struct CMUnitTest *per_case = calloc((size_t)sh_cuda_ncase, sizeof *per_case);
  char (*names)[96] = calloc((size_t)sh_cuda_ncase, sizeof *names);
  if (!per_case || !names) return 1;
  sh_cuda_case_tests(per_case, names, "compiles", case_compiles);
  int failed = _cmocka_run_group_tests("codegen_cuda_compiles", per_case, (size_t)sh_cuda_ncase, NULL, NULL);
  free(per_case);
  free(names);

  const struct CMUnitTest tests[] = {
      cmocka_unit_test(plain_matmul_and_rows_bound),
      cmocka_unit_test(tiled_matmul_bound_to_blocks_and_threads),
      cmocka_unit_test(non_divisible_split_golden_snippets),
      cmocka_unit_test(softmax_rows_bound),
      cmocka_unit_test(elementwise_chain_per_thread),
      cmocka_unit_test(elementwise_chain_inlined_and_f16),
      cmocka_unit_test(vectorized_f16_load_and_store),
      cmocka_unit_test(vectorized_misaligned_load_stays_scalar),
      cmocka_unit_test(half_sum_accumulates_in_float_per_thread),
      cmocka_unit_test(vectorized_not_dividing_stays_scalar),
      cmocka_unit_test(reduce_loop_bound_to_a_thread),
      cmocka_unit_test(too_many_threads),
      cmocka_unit_test(one_tag_twice_in_a_kernel),
      cmocka_unit_test(unbound_intermediate_is_per_thread),
      cmocka_unit_test(output_written_by_every_thread),
      cmocka_unit_test(build_without_gpu_compiles_then_reports),
      cmocka_unit_test(time_refuses_a_c_build),
  };
  return failed + cmocka_run_group_tests_name("codegen_cuda", tests, NULL, NULL);
}
