/* bind, vectorize, unroll, parallel, annotate: golden loop nests, numbers on the C backend
 * (bound and parallel loops run serially there), what the generated C carries, and trace
 * round trips. */
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

static void split16(stof_sched *s, int loop, int *parts) {
  stof_factor f[2] = {stof_factor_const(STOF_INFER), stof_factor_const(16)};
  SH_OK(stof_sched_ctx(s), stof_sched_split(s, loop, 2, f, parts));
}

static void bind_block_and_thread(void **state) {
  sh_graph G;
  sh_vec(&G, 64, STOF_DTYPE_F32);
  stof_sched *s = sh_sched(&G);
  int l[4], p[2];
  sh_loops(s, sh_block(s, "B"), l);
  split16(s, l[0], p);
  SH_OK(G.ctx, stof_sched_bind(s, p[0], "blockIdx.x"));
  SH_OK(G.ctx, stof_sched_bind(s, p[1], "threadIdx.x"));
  sh_check_all(&G, s,
               "for i.outer in 0..4 [blockIdx.x]:\n"
               "  for i.inner in 0..16 [threadIdx.x]:\n"
               "    let i = i.outer * 16 + i.inner\n"
               "    B[i] = (A[i] * 3.0) - 1.0\n");
  stof_loop_info info;
  SH_OK(G.ctx, stof_sched_loop_info(s, p[1], &info));
  assert_int_equal(info.ann, STOF_ANN_THREAD);
  assert_int_equal(info.thread, STOF_THREAD_THREAD_X);
  assert_true(sh_source_contains(&G, s, "/* threadIdx.x (serial on the CPU) */"));
  stof_sched_free(s);
  sh_done(&G);
}

static void bind_matmul_2d(void **state) {
  sh_graph G;
  sh_matmul(&G, 20, 12, 9);
  stof_sched *s = sh_sched(&G);
  int l[4], t[4];
  sh_loops(s, sh_block(s, "C"), l);
  SH_OK(G.ctx, stof_sched_tile(s, l[0], l[1], stof_factor_const(8), stof_factor_const(4), t));
  SH_OK(G.ctx, stof_sched_bind(s, t[0], "blockIdx.y"));
  SH_OK(G.ctx, stof_sched_bind(s, t[1], "blockIdx.x"));
  SH_OK(G.ctx, stof_sched_bind(s, t[2], "threadIdx.y"));
  SH_OK(G.ctx, stof_sched_bind(s, t[3], "threadIdx.x"));
  sh_check_all(&G, s,
               "for i.outer in 0..3 [blockIdx.y]:\n"
               "  for j.outer in 0..3 [blockIdx.x]:\n"
               "    for i.inner in 0..8 [threadIdx.y]:\n"
               "      let i = i.outer * 8 + i.inner\n"
               "      if i < 20:\n"
               "        for j.inner in 0..4 [threadIdx.x]:\n"
               "          let j = j.outer * 4 + j.inner\n"
               "          C[i, j] = 0.0\n"
               "          for k in 0..9:\n"
               "            C[i, j] = C[i, j] + (A[i, k] * B[k, j])\n");
  stof_sched_free(s);
  sh_done(&G);
}

static void vectorize_inner_loop(void **state) {
  sh_graph G;
  sh_elem2(&G, 4, 8);
  stof_sched *s = sh_sched(&G);
  int l[4];
  sh_loops(s, sh_block(s, "B"), l);
  SH_OK(G.ctx, stof_sched_vectorize(s, l[1]));
  sh_check_all(&G, s,
               "for i in 0..4:\n"
               "  for j in 0..8 [vectorized]:\n"
               "    B[i, j] = (A[i, j] * 2.0) + 1.0\n");
  assert_true(sh_source_contains(&G, s, "#pragma GCC ivdep\n"));
  stof_sched_free(s);
  sh_done(&G);
}

static void unroll_inner_loop(void **state) {
  sh_graph G;
  sh_vec(&G, 40, STOF_DTYPE_F32);
  stof_sched *s = sh_sched(&G);
  int l[4], p[2];
  sh_loops(s, sh_block(s, "B"), l);
  split16(s, l[0], p);
  SH_OK(G.ctx, stof_sched_unroll(s, p[1]));
  sh_check_all(&G, s,
               "for i.outer in 0..3:\n"
               "  for i.inner in 0..16 [unrolled]:\n"
               "    let i = i.outer * 16 + i.inner\n"
               "    if i < 40:\n"
               "      B[i] = (A[i] * 3.0) - 1.0\n");
  assert_true(sh_source_contains(&G, s, "#pragma GCC unroll 16\n"));
  stof_sched_free(s);
  sh_done(&G);
}

static void unroll_reduce_loop(void **state) {
  sh_graph G;
  sh_matmul(&G, 5, 6, 4);
  stof_sched *s = sh_sched(&G);
  int l[4];
  sh_loops(s, sh_block(s, "C"), l);
  SH_OK(G.ctx, stof_sched_unroll(s, l[2]));
  sh_check_all(&G, s,
               "for i in 0..5:\n"
               "  for j in 0..6:\n"
               "    C[i, j] = 0.0\n"
               "    for k in 0..4 [unrolled]:\n"
               "      C[i, j] = C[i, j] + (A[i, k] * B[k, j])\n");
  stof_sched_free(s);
  sh_done(&G);
}

static void parallel_outer_loop(void **state) {
  sh_graph G;
  sh_matmul(&G, 7, 6, 5);
  stof_sched *s = sh_sched(&G);
  int l[4];
  sh_loops(s, sh_block(s, "C"), l);
  SH_OK(G.ctx, stof_sched_parallel(s, l[0]));
  sh_check_all(&G, s,
               "for i in 0..7 [parallel]:\n"
               "  for j in 0..6:\n"
               "    C[i, j] = 0.0\n"
               "    for k in 0..5:\n"
               "      C[i, j] = C[i, j] + (A[i, k] * B[k, j])\n");
  assert_true(sh_source_contains(&G, s, "/* parallel (serial without OpenMP) */"));
  stof_sched_free(s);
  sh_done(&G);
}

static void annotate_loops_and_blocks(void **state) {
  sh_graph G;
  sh_elem2(&G, 3, 5);
  stof_sched *s = sh_sched(&G);
  int l[4], b = sh_block(s, "B");
  sh_loops(s, b, l);
  SH_OK(G.ctx, stof_sched_vectorize(s, l[1]));
  SH_OK(G.ctx, stof_sched_annotate_loop(s, l[1], "align", "16"));
  SH_OK(G.ctx, stof_sched_annotate_loop(s, l[0], "note", "first"));
  SH_OK(G.ctx, stof_sched_annotate_loop(s, l[0], "note", "outer")); /* replaces the value */
  SH_OK(G.ctx, stof_sched_annotate_block(s, b, "stage", "epilogue"));
  SH_OK(G.ctx, stof_sched_annotate_block(s, b, "cost", "cheap */ x"));
  sh_check_all(&G, s,
               "# block B: stage=epilogue, cost=cheap */ x\n"
               "for i in 0..3 [note=outer]:\n"
               "  for j in 0..5 [vectorized, align=16]:\n"
               "    B[i, j] = (A[i, j] * 2.0) + 1.0\n");
  assert_true(sh_source_contains(&G, s, "/* pragma align=16 */"));
  assert_true(sh_source_contains(&G, s, "pragma cost=cheap  / x"));
  char *lua = sh_trace_lua(s);
  assert_non_null(strstr(lua, "  s:annotate(b0, \"cost\", \"cheap */ x\")\n"));
  free(lua);
  stof_sched_free(s);
  sh_done(&G);
}

int run_annotate_tests(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(bind_block_and_thread),
      cmocka_unit_test(bind_matmul_2d),
      cmocka_unit_test(vectorize_inner_loop),
      cmocka_unit_test(unroll_inner_loop),
      cmocka_unit_test(unroll_reduce_loop),
      cmocka_unit_test(parallel_outer_loop),
      cmocka_unit_test(annotate_loops_and_blocks),
  };
  return cmocka_run_group_tests_name("annotate", tests, NULL, NULL);
}
