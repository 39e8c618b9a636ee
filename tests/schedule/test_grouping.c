/* Groups (which ops become one kernel): TVM's fusion rule, printed and replayed; every
 * illegal group is refused with the reason and leaves the schedule unchanged. */
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

/* Asserts that group(ops) fails with substr and changes nothing. */
static void expect_illegal(sh_graph *G, stof_sched *s, int n, const char *const *names, const char *substr) {
  const stof_op *ops[8];
  for (int i = 0; i < n; i++) ops[i] = sh_op(G, names[i]);
  char *before = sh_nest(s);
  stof_trace *t;
  SH_OK(G->ctx, stof_sched_trace(s, &t));
  int ninst = stof_trace_ninst(t), ngroup = stof_sched_ngroup(s), g = -7;
  stof_trace_free(t);
  sh_expect_error(G->ctx, stof_sched_group(s, n, ops, &g), STOF_ERR_SCHEDULE, substr);
  assert_int_equal(g, -7);
  assert_int_equal(stof_sched_ngroup(s), ngroup);
  SH_OK(G->ctx, stof_sched_trace(s, &t));
  assert_int_equal(stof_trace_ninst(t), ninst);
  stof_trace_free(t);
  char *after = sh_nest(s);
  assert_string_equal(before, after);
  free(before);
  free(after);
}

static void group_gemm_bias_relu(void **state) {
  sh_graph G;
  sh_matmul_bias_relu(&G, 4, 6, 5);
  stof_sched *s = sh_sched(&G);
  const stof_op *ops[3] = {sh_op(&G, "C"), sh_op(&G, "D"), sh_op(&G, "E")};
  int g;
  SH_OK(G.ctx, stof_sched_group(s, 3, ops, &g));
  assert_int_equal(g, 0);
  const stof_op *got[4];
  int n, alive;
  SH_OK(G.ctx, stof_sched_group_ops(s, g, 4, got, &n, &alive));
  assert_int_equal(n, 3);
  assert_true(alive);
  assert_ptr_equal(got[1], ops[1]);
  sh_check_all(&G, s,
               "group 0: C, D, E\n"
               "alloc C: float32[4, 6]\n"
               "alloc D: float32[4, 6]\n"
               "for i in 0..4:\n"
               "  for j in 0..6:\n"
               "    C[i, j] = 0.0\n"
               "    for k in 0..5:\n"
               "      C[i, j] = C[i, j] + (A[i, k] * W[k, j])\n"
               "for i in 0..4:\n"
               "  for j in 0..6:\n"
               "    D[i, j] = C[i, j] + bias[j]\n"
               "for i in 0..4:\n"
               "  for j in 0..6:\n"
               "    E[i, j] = max(D[i, j], 0.0)\n");
  char *lua = sh_trace_lua(s);
  assert_non_null(strstr(lua, "  local g0 = s:group({\"C\", \"D\", \"E\"})\n"));
  free(lua);
  stof_sched_free(s);
  sh_done(&G);
}

static void group_softmax_reduction_with_neighbours(void **state) {
  sh_graph G;
  sh_softmax(&G, 3, 5);
  stof_sched *s = sh_sched(&G);
  const stof_op *a[2] = {sh_op(&G, "mx"), sh_op(&G, "e")}, *b[3] = {sh_op(&G, "sm"), sh_op(&G, "P")};
  int g0, g1;
  SH_OK(G.ctx, stof_sched_group(s, 2, a, &g0));
  SH_OK(G.ctx, stof_sched_group(s, 2, b, &g1));
  char *t = sh_nest(s);
  assert_non_null(strstr(t, "group 0: mx, e\ngroup 1: sm, P\n"));
  free(t);
  sh_check_numeric(&G, s);
  sh_round_trip(&G, s);
  stof_sched_free(s);
  sh_done(&G);
}

static void ungroup_removes_a_group(void **state) {
  sh_graph G;
  sh_matmul_bias_relu(&G, 2, 3, 4);
  stof_sched *s = sh_sched(&G);
  const stof_op *ops[2] = {sh_op(&G, "D"), sh_op(&G, "E")};
  int g, g2;
  SH_OK(G.ctx, stof_sched_group(s, 2, ops, &g));
  SH_OK(G.ctx, stof_sched_ungroup(s, g));
  SH_OK(G.ctx, stof_sched_group(s, 1, ops, &g2)); /* D is free again */
  assert_int_equal(g2, 1);
  int n, alive;
  const stof_op *got[2];
  SH_OK(G.ctx, stof_sched_group_ops(s, g, 2, got, &n, &alive));
  assert_false(alive);
  char *t = sh_nest(s);
  assert_non_null(strstr(t, "group 1: D\nalloc"));
  assert_null(strstr(t, "group 0"));
  free(t);
  char *lua = sh_trace_lua(s);
  assert_non_null(strstr(lua, "  s:ungroup(g0)\n"));
  free(lua);
  sh_round_trip(&G, s);
  sh_expect_error(G.ctx, stof_sched_ungroup(s, g), STOF_ERR_SCHEDULE, "ungroup: group 0 was already removed");
  sh_expect_error(G.ctx, stof_sched_ungroup(s, 9), STOF_ERR_SCHEDULE, "ungroup: no group 9");
  stof_sched_free(s);
  sh_done(&G);
}

static void group_two_reductions_is_illegal(void **state) {
  sh_graph G;
  sh_softmax(&G, 3, 5);
  stof_sched *s = sh_sched(&G);
  const char *names[4] = {"mx", "e", "sm", "P"};
  expect_illegal(&G, s, 4, names,
                 "group {mx, e, sm, P}: mx (reduction) and sm (reduction) are both reductions or "
                 "GEMM-like; a group holds at most one");
  stof_sched_free(s);
  sh_done(&G);
}

static void group_not_connected_is_illegal(void **state) {
  sh_graph G;
  sh_softmax(&G, 3, 5);
  stof_sched *s = sh_sched(&G);
  const char *names[2] = {"mx", "P"};
  expect_illegal(&G, s, 2, names, "group {mx, P}: the ops are not connected (P neither reads nor feeds the others)");
  stof_sched_free(s);
  sh_done(&G);
}

static void group_with_an_op_between_outside_is_illegal(void **state) {
  sh_graph G;
  sh_softmax(&G, 3, 5);
  stof_sched *s = sh_sched(&G);
  const char *names[2] = {"e", "P"};
  expect_illegal(&G, s, 2, names, "group {e, P}: sm, outside the group, lies on a path between two of its ops");
  stof_sched_free(s);
  sh_done(&G);
}

static void group_injective_after_gemm_is_illegal(void **state) {
  sh_graph G;
  sh_matmul(&G, 4, 4, 3);
  int64_t shape[2] = {4, 4};
  const stof_expr *ax[2], *ld;
  SH_OK(G.ctx, stof_te_compute_axes(G.g, 2, shape, NULL, ax));
  const stof_expr *idx[2] = {ax[1], ax[0]};
  SH_OK(G.ctx, stof_te_load(G.g, G.out[0], 2, idx, &ld));
  const stof_op *T;
  SH_OK(G.ctx, stof_te_compute(G.g, "T", 2, ax, ld, -1, &T));
  assert_int_equal(T->pattern, STOF_PATTERN_INJECTIVE);
  G.out[0] = T;
  stof_sched *s = sh_sched(&G);
  const char *names[2] = {"C", "T"};
  expect_illegal(&G, s, 2, names,
                 "group {C, T}: T (injective) follows the out-elementwise-fusable op C; only "
                 "elementwise and broadcast ops may follow it");
  stof_sched_free(s);
  sh_done(&G);
}

static void group_membership_errors(void **state) {
  sh_graph G;
  sh_matmul_bias_relu(&G, 2, 3, 4);
  stof_sched *s = sh_sched(&G);
  const stof_op *cd[2] = {sh_op(&G, "C"), sh_op(&G, "D")};
  int g;
  SH_OK(G.ctx, stof_sched_group(s, 2, cd, &g));
  const char *de[2] = {"D", "E"}, *dd[2] = {"E", "E"};
  expect_illegal(&G, s, 2, de, "group {D, E}: op D is already in group 0");
  expect_illegal(&G, s, 2, dd, "group {E, E}: op E is given twice");
  const char *ae[2] = {"A", "E"};
  expect_illegal(&G, s, 2, ae, "group: A is a placeholder (an input), not a block");
  sh_expect_error(G.ctx, stof_sched_group(s, 0, cd, &g), STOF_ERR_SCHEDULE, "group: no ops given");
  stof_sched_free(s);
  sh_done(&G);
}

/* ---------------------------------------------------------------- groups at code generation */

/* The CUDA source of s and its number of kernels. */
static int kernels_of(sh_graph *G, stof_sched *s) {
  const stof_op *args[16];
  int n = sh_args(G, args), k = 0;
  char *src = NULL;
  SH_OK(G->ctx, stof_build_source(s, n, args, "cuda", &src));
  for (const char *p = src; (p = strstr(p, "__global__")) != NULL; p++) k++;
  stof_ctx_dealloc(G->ctx, src, strlen(src) + 1);
  return k;
}

/* A group's ops become one kernel: C, D, E (GEMM, bias, ReLU) are three kernels ungrouped,
 * one grouped (D inlined into E, E computed at C's row loop), with the same numbers. */
static void group_is_one_kernel(void **state) {
  (void)state;
  sh_graph G;
  sh_matmul_bias_relu(&G, 4, 6, 5);
  stof_sched *s = sh_sched(&G);
  assert_int_equal(kernels_of(&G, s), 3);
  const stof_op *ops[3] = {sh_op(&G, "C"), sh_op(&G, "D"), sh_op(&G, "E")};
  int g;
  SH_OK(G.ctx, stof_sched_group(s, 3, ops, &g));
  char *before = sh_nest(s);
  assert_int_equal(kernels_of(&G, s), 1);
  char *after = sh_nest(s); /* folding is part of building: the schedule is unchanged */
  assert_string_equal(before, after);
  free(before);
  free(after);
  sh_check_numeric(&G, s);
  stof_sched_free(s);
  sh_done(&G);
}

/* Only the group's ops fold together: {C, D} is one kernel (D after C's row loop, not
 * inlined into E outside the group), E another. */
static void group_folds_only_its_members(void **state) {
  (void)state;
  sh_graph G;
  sh_matmul_bias_relu(&G, 4, 6, 5);
  stof_sched *s = sh_sched(&G);
  const stof_op *ops[2] = {sh_op(&G, "C"), sh_op(&G, "D")};
  int g;
  SH_OK(G.ctx, stof_sched_group(s, 2, ops, &g));
  assert_int_equal(kernels_of(&G, s), 2);
  sh_check_numeric(&G, s);
  stof_sched_free(s);
  sh_done(&G);
}

/* A member that cannot be folded into the group's kernel is an error naming it: C's outer
 * loop is its reduce loop, so D can go neither under it nor into it. */
static void group_that_cannot_be_one_kernel(void **state) {
  (void)state;
  sh_graph G;
  sh_matmul_bias_relu(&G, 4, 6, 5);
  stof_sched *s = sh_sched(&G);
  int l[3];
  sh_loops(s, sh_block(s, "C"), l);
  int order[3] = {l[2], l[0], l[1]};
  SH_OK(G.ctx, stof_sched_reorder(s, 3, order));
  const stof_op *ops[2] = {sh_op(&G, "C"), sh_op(&G, "D")};
  int g;
  SH_OK(G.ctx, stof_sched_group(s, 2, ops, &g));
  const stof_op *args[16];
  int n = sh_args(&G, args);
  char *src = NULL;
  sh_expect_error(G.ctx, stof_build_source(s, n, args, "cuda", &src), STOF_ERR_SCHEDULE,
                  "group 0: block D stays a kernel apart from block C");
  sh_expect_error(G.ctx, stof_build_source(s, n, args, "c", &src), STOF_ERR_SCHEDULE,
                  "group 0: block D stays a kernel apart from block C");
  stof_sched_free(s);
  sh_done(&G);
}

int run_grouping_tests(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(group_gemm_bias_relu),
      cmocka_unit_test(group_softmax_reduction_with_neighbours),
      cmocka_unit_test(ungroup_removes_a_group),
      cmocka_unit_test(group_two_reductions_is_illegal),
      cmocka_unit_test(group_is_one_kernel),
      cmocka_unit_test(group_folds_only_its_members),
      cmocka_unit_test(group_that_cannot_be_one_kernel),
      cmocka_unit_test(group_not_connected_is_illegal),
      cmocka_unit_test(group_with_an_op_between_outside_is_illegal),
      cmocka_unit_test(group_injective_after_gemm_is_illegal),
      cmocka_unit_test(group_membership_errors),
  };
  return cmocka_run_group_tests_name("grouping", tests, NULL, NULL);
}
