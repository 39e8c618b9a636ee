/* split: golden loop nests, numbers against the interpreter, trace round trips; inferred
 * factors on either side, non-divisible splits (guards), nested and reduce-loop splits. */
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

static void split2(stof_sched *s, int loop, int64_t a, int64_t b, int *parts) {
  stof_factor f[2] = {stof_factor_const(a), stof_factor_const(b)};
  SH_OK(stof_sched_ctx(s), stof_sched_split(s, loop, 2, f, parts));
}

static void split_infers_outer(void **state) {
  sh_graph G;
  sh_vec(&G, 64, STOF_DTYPE_F32);
  stof_sched *s = sh_sched(&G);
  int l[4], p[2];
  sh_loops(s, sh_block(s, "B"), l);
  split2(s, l[0], STOF_INFER, 16, p);
  sh_check_all(&G, s,
               "for i.outer in 0..4:\n"
               "  for i.inner in 0..16:\n"
               "    let i = i.outer * 16 + i.inner\n"
               "    B[i] = (A[i] * 3.0) - 1.0\n");
  stof_loop_info info;
  SH_OK(G.ctx, stof_sched_loop_info(s, p[0], &info));
  assert_string_equal(info.name, "i.outer");
  assert_int_equal(info.extent, 4);
  assert_int_equal(info.derive, STOF_DERIVE_SPLIT);
  assert_int_equal(info.source, l[0]);
  assert_int_equal(info.part, 0);
  assert_int_equal(info.nparts, 2);
  SH_OK(G.ctx, stof_sched_loop_info(s, l[0], &info));
  assert_false(info.alive);
  stof_sched_free(s);
  sh_done(&G);
}

static void split_infers_inner(void **state) {
  sh_graph G;
  sh_vec(&G, 64, STOF_DTYPE_F32);
  stof_sched *s = sh_sched(&G);
  int l[4], p[2];
  sh_loops(s, sh_block(s, "B"), l);
  split2(s, l[0], 4, STOF_INFER, p);
  sh_check_all(&G, s,
               "for i.outer in 0..4:\n"
               "  for i.inner in 0..16:\n"
               "    let i = i.outer * 16 + i.inner\n"
               "    B[i] = (A[i] * 3.0) - 1.0\n");
  stof_sched_free(s);
  sh_done(&G);
}

static void split_non_divisible_guards(void **state) {
  sh_graph G;
  sh_vec(&G, 37, STOF_DTYPE_F32);
  stof_sched *s = sh_sched(&G);
  int l[4], p[2];
  sh_loops(s, sh_block(s, "B"), l);
  split2(s, l[0], STOF_INFER, 8, p);
  sh_check_all(&G, s,
               "for i.outer in 0..5:\n"
               "  for i.inner in 0..8:\n"
               "    let i = i.outer * 8 + i.inner\n"
               "    if i < 37:\n"
               "      B[i] = (A[i] * 3.0) - 1.0\n");
  stof_sched_free(s);
  sh_done(&G);
}

static void split_factor_larger_than_extent(void **state) {
  sh_graph G;
  sh_vec(&G, 10, STOF_DTYPE_F32);
  stof_sched *s = sh_sched(&G);
  int l[4], p[2];
  sh_loops(s, sh_block(s, "B"), l);
  split2(s, l[0], STOF_INFER, 16, p);
  /* the inner loop keeps its extent 16 but runs the 10 iterations that matter, unguarded */
  stof_loop_info info;
  SH_OK(G.ctx, stof_sched_loop_info(s, p[1], &info));
  assert_int_equal(info.extent, 16);
  sh_check_all(&G, s,
               "for i.outer in 0..1:\n"
               "  for i.inner in 0..10:\n"
               "    let i = i.outer * 16 + i.inner\n"
               "    B[i] = (A[i] * 3.0) - 1.0\n");
  stof_sched_free(s);
  sh_done(&G);
}

static void split_given_factors_may_overshoot(void **state) {
  sh_graph G;
  sh_vec(&G, 37, STOF_DTYPE_F32);
  stof_sched *s = sh_sched(&G);
  int l[4], p[2];
  sh_loops(s, sh_block(s, "B"), l);
  split2(s, l[0], 5, 8, p);
  sh_check_all(&G, s,
               "for i.outer in 0..5:\n"
               "  for i.inner in 0..8:\n"
               "    let i = i.outer * 8 + i.inner\n"
               "    if i < 37:\n"
               "      B[i] = (A[i] * 3.0) - 1.0\n");
  stof_sched_free(s);
  sh_done(&G);
}

static void split_three_factors(void **state) {
  sh_graph G;
  sh_vec(&G, 60, STOF_DTYPE_F32);
  stof_sched *s = sh_sched(&G);
  int l[4], p[3];
  sh_loops(s, sh_block(s, "B"), l);
  stof_factor f[3] = {stof_factor_const(3), stof_factor_const(STOF_INFER), stof_factor_const(4)};
  SH_OK(G.ctx, stof_sched_split(s, l[0], 3, f, p));
  sh_check_all(&G, s,
               "for i.0 in 0..3:\n"
               "  for i.1 in 0..5:\n"
               "    for i.2 in 0..4:\n"
               "      let i = i.0 * 20 + i.1 * 4 + i.2\n"
               "      B[i] = (A[i] * 3.0) - 1.0\n");
  stof_sched_free(s);
  sh_done(&G);
}

static void split_nested_non_divisible(void **state) {
  sh_graph G;
  sh_vec(&G, 37, STOF_DTYPE_F32);
  stof_sched *s = sh_sched(&G);
  int l[4], p[2], q[2];
  sh_loops(s, sh_block(s, "B"), l);
  split2(s, l[0], STOF_INFER, 8, p);
  split2(s, p[1], STOF_INFER, 3, q);
  sh_check_all(&G, s,
               "for i.outer in 0..5:\n"
               "  for i.inner.outer in 0..3:\n"
               "    for i.inner.inner in 0..3:\n"
               "      let i = i.outer * 8 + (i.inner.outer * 3 + i.inner.inner)\n"
               "      if i < 37:\n"
               "        if i.inner.outer * 3 + i.inner.inner < 8:\n"
               "          B[i] = (A[i] * 3.0) - 1.0\n");
  stof_sched_free(s);
  sh_done(&G);
}

static void split_reduce_loop(void **state) {
  sh_graph G;
  sh_matmul(&G, 6, 5, 20);
  stof_sched *s = sh_sched(&G);
  int l[4], p[2];
  sh_loops(s, sh_block(s, "C"), l);
  split2(s, l[2], STOF_INFER, 8, p);
  sh_check_all(&G, s,
               "for i in 0..6:\n"
               "  for j in 0..5:\n"
               "    C[i, j] = 0.0\n"
               "    for k.outer in 0..3:\n"
               "      for k.inner in 0..8:\n"
               "        let k = k.outer * 8 + k.inner\n"
               "        if k < 20:\n"
               "          C[i, j] = C[i, j] + (A[i, k] * B[k, j])\n");
  stof_loop_info info;
  SH_OK(G.ctx, stof_sched_loop_info(s, p[1], &info));
  assert_int_equal(info.iter, STOF_ITER_REDUCE);
  stof_sched_free(s);
  sh_done(&G);
}

static void split_matmul_rows_non_divisible(void **state) {
  sh_graph G;
  sh_matmul(&G, 37, 9, 11);
  stof_sched *s = sh_sched(&G);
  int l[4], p[2];
  sh_loops(s, sh_block(s, "C"), l);
  split2(s, l[0], STOF_INFER, 8, p);
  sh_check_all(&G, s,
               "for i.outer in 0..5:\n"
               "  for i.inner in 0..8:\n"
               "    let i = i.outer * 8 + i.inner\n"
               "    if i < 37:\n"
               "      for j in 0..9:\n"
               "        C[i, j] = 0.0\n"
               "        for k in 0..11:\n"
               "          C[i, j] = C[i, j] + (A[i, k] * B[k, j])\n");
  stof_sched_free(s);
  sh_done(&G);
}

static void split_by_knob(void **state) {
  sh_graph G;
  sh_vec(&G, 40, STOF_DTYPE_F32);
  stof_sched *s = sh_sched(&G);
  int l[4], p[2], k;
  sh_loops(s, sh_block(s, "B"), l);
  int64_t cand[3] = {4, 8, 16};
  SH_OK(G.ctx, stof_sched_knob(s, "tile", 3, cand, 2, &k));
  stof_factor f[2] = {stof_factor_const(STOF_INFER), stof_factor_knob(k)};
  SH_OK(G.ctx, stof_sched_split(s, l[0], 2, f, p));
  sh_check_all(&G, s,
               "for i.outer in 0..3:\n"
               "  for i.inner in 0..16:\n"
               "    let i = i.outer * 16 + i.inner\n"
               "    if i < 40:\n"
               "      B[i] = (A[i] * 3.0) - 1.0\n");
  char *lua = sh_trace_lua(s);
  assert_non_null(strstr(lua, "  local k2 = s:knob(\"tile\", {4, 8, 16}, 2)\n"));
  assert_non_null(strstr(lua, "  local l3, l4 = s:split(l1, {stof.INFER, k2})\n"));
  free(lua);
  stof_sched_free(s);
  sh_done(&G);
}

int run_split_tests(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(split_infers_outer),
      cmocka_unit_test(split_infers_inner),
      cmocka_unit_test(split_non_divisible_guards),
      cmocka_unit_test(split_factor_larger_than_extent),
      cmocka_unit_test(split_given_factors_may_overshoot),
      cmocka_unit_test(split_three_factors),
      cmocka_unit_test(split_nested_non_divisible),
      cmocka_unit_test(split_reduce_loop),
      cmocka_unit_test(split_matmul_rows_non_divisible),
      cmocka_unit_test(split_by_knob),
  };
  return cmocka_run_group_tests_name("split", tests, NULL, NULL);
}
