/* rfactor: golden loop nests (the partial reduction over the factored loop, the final
 * reduction over its results), numbers against the interpreter (sum and max), trace round
 * trips, and the illegal cases (the schedule stays as it was). */
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

/* k split by 8; k.inner factored out as the last dimension of S.rf. */
static void rfactor_a_split_sum(void **state) {
  sh_graph G;
  sh_rowsum(&G, 4, 30, 0);
  stof_sched *s = sh_sched(&G);
  int bs = sh_block(s, "S"), l[4], k[2], rf;
  sh_loops(s, bs, l);
  sh_split(s, l[1], 8, k);
  SH_OK(G.ctx, stof_sched_rfactor(s, k[1], 1, &rf));
  assert_string_equal(stof_sched_block_name(s, rf), "S.rf");
  sh_check_all(&G, s,
               "alloc S.rf: float32[4, 8]\n"
               "for i in 0..4:\n"
               "  for k.inner in 0..8:\n"
               "    S.rf[i, k.inner] = 0.0\n"
               "  for k.outer in 0..4:\n"
               "    for k.inner in 0..8:\n"
               "      let k = k.outer * 8 + k.inner\n"
               "      if k < 30:\n"
               "        S.rf[i, k.inner] = S.rf[i, k.inner] + X[i, k]\n"
               "for i in 0..4:\n"
               "  S[i] = 0.0\n"
               "  for k.inner in 0..8:\n"
               "    S[i] = S[i] + S.rf[i, k.inner]\n");
  /* the loops handed out before stay valid: they are the rfactor block's now */
  stof_loop_info info;
  SH_OK(G.ctx, stof_sched_loop_info(s, k[1], &info));
  assert_int_equal(info.block, rf);
  assert_int_equal(info.iter, STOF_ITER_DATA_PAR);
  assert_true(info.alive);
  int n = sh_loops(s, bs, l);
  assert_int_equal(n, 2);
  stof_sched_free(s);
  sh_done(&G);
}

/* The factored loop outermost (factor_axis 0), then made parallel: the partial sums are
 * independent. */
static void rfactor_outermost_and_parallel(void **state) {
  sh_graph G;
  sh_rowsum(&G, 4, 30, 0);
  stof_sched *s = sh_sched(&G);
  int bs = sh_block(s, "S"), l[4], k[2], rf;
  sh_loops(s, bs, l);
  sh_split(s, l[1], 8, k);
  int order[3] = {k[1], l[0], k[0]};
  SH_OK(G.ctx, stof_sched_reorder(s, 3, order));
  SH_OK(G.ctx, stof_sched_rfactor(s, k[1], 0, &rf));
  SH_OK(G.ctx, stof_sched_parallel(s, k[1]));
  sh_check_all(&G, s,
               "alloc S.rf: float32[8, 4]\n"
               "for k.inner in 0..8 [parallel]:\n"
               "  for i in 0..4:\n"
               "    S.rf[k.inner, i] = 0.0\n"
               "    for k.outer in 0..4:\n"
               "      let k = k.outer * 8 + k.inner\n"
               "      if k < 30:\n"
               "        S.rf[k.inner, i] = S.rf[k.inner, i] + X[i, k]\n"
               "for i in 0..4:\n"
               "  S[i] = 0.0\n"
               "  for k.inner in 0..8:\n"
               "    S[i] = S[i] + S.rf[k.inner, i]\n");
  stof_sched_free(s);
  sh_done(&G);
}

/* A max reduction factored over k.outer; NaN-free random inputs, so the result is exact. */
static void rfactor_a_max(void **state) {
  sh_graph G;
  sh_rowsum(&G, 3, 20, 1);
  stof_sched *s = sh_sched(&G);
  int bs = sh_block(s, "S"), l[4], k[2], rf;
  sh_loops(s, bs, l);
  sh_split(s, l[1], 8, k);
  SH_OK(G.ctx, stof_sched_rfactor(s, k[0], 1, &rf));
  sh_check_all(&G, s,
               "alloc S.rf: float32[3, 3]\n"
               "for i in 0..3:\n"
               "  for k.outer in 0..3:\n"
               "    S.rf[i, k.outer] = -inf\n"
               "    for k.inner in 0..8:\n"
               "      let k = k.outer * 8 + k.inner\n"
               "      if k < 20:\n"
               "        S.rf[i, k.outer] = max(S.rf[i, k.outer], X[i, k])\n"
               "for i in 0..3:\n"
               "  S[i] = -inf\n"
               "  for k.outer in 0..3:\n"
               "    S[i] = max(S[i], S.rf[i, k.outer])\n");
  stof_sched_free(s);
  sh_done(&G);
}

/* Two reduce axes: factor one of them, the other stays a reduction of S.rf. */
static void rfactor_one_of_two_reduce_axes(void **state) {
  sh_graph G;
  sh_sum2(&G, 3, 4, 5);
  stof_sched *s = sh_sched(&G);
  int bs = sh_block(s, "S"), l[4], rf;
  sh_loops(s, bs, l);
  SH_OK(G.ctx, stof_sched_rfactor(s, l[2], 1, &rf));
  sh_check_all(&G, s,
               "alloc S.rf: float32[3, 5]\n"
               "for i in 0..3:\n"
               "  for c in 0..5:\n"
               "    S.rf[i, c] = 0.0\n"
               "  for r in 0..4:\n"
               "    for c in 0..5:\n"
               "      S.rf[i, c] = S.rf[i, c] + X[i, r, c]\n"
               "for i in 0..3:\n"
               "  S[i] = 0.0\n"
               "  for c in 0..5:\n"
               "    S[i] = S[i] + S.rf[i, c]\n");
  stof_sched_free(s);
  sh_done(&G);
}

/* ---------------------------------------------------------------- illegal */

static void rfactor_of_a_data_parallel_loop(void **state) {
  sh_graph G;
  sh_rowsum(&G, 4, 8, 0);
  stof_sched *s = sh_sched(&G);
  int l[4], rf = -1;
  sh_loops(s, sh_block(s, "S"), l);
  sh_snapshot sn = sh_take(s);
  sh_expect_error(G.ctx, stof_sched_rfactor(s, l[0], 0, &rf), STOF_ERR_SCHEDULE,
                  "rfactor: loop i of block S is data-parallel (rfactor takes a reduce loop)");
  sh_expect_error(G.ctx, stof_sched_rfactor(s, l[1], 2, &rf), STOF_ERR_SCHEDULE,
                  "rfactor: factor_axis 2 is out of range for block S of rank 1 (0..1)");
  assert_int_equal(rf, -1);
  sh_expect_same(s, &sn);
  stof_sched_free(s);
  sh_done(&G);
}

int run_rfactor_tests(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(rfactor_a_split_sum),
      cmocka_unit_test(rfactor_outermost_and_parallel),
      cmocka_unit_test(rfactor_a_max),
      cmocka_unit_test(rfactor_one_of_two_reduce_axes),
      cmocka_unit_test(rfactor_of_a_data_parallel_loop),
  };
  return cmocka_run_group_tests_name("rfactor", tests, NULL, NULL);
}
