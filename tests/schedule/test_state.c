/* Schedule state: blocks and their root loops, the unscheduled nests, clones, fresh
 * schedules, what is refused at creation, and schedules of several blocks. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

static void one_block_per_compute_op(void **state) {
  sh_graph G;
  sh_matmul_bias_relu(&G, 4, 6, 5);
  stof_sched *s = sh_sched(&G);
  assert_int_equal(stof_sched_nblock(s), 3);
  assert_string_equal(stof_sched_block_op(s, 0)->name, "C");
  assert_string_equal(stof_sched_block_op(s, 1)->name, "D");
  assert_string_equal(stof_sched_block_op(s, 2)->name, "E");
  assert_null(stof_sched_block_op(s, 3));
  assert_int_equal(stof_sched_nout(s), 1);
  assert_ptr_equal(stof_sched_output(s, 0), G.out[0]);
  assert_ptr_equal(stof_sched_graph(s), G.g);
  sh_check_all(&G, s,
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
  stof_sched_free(s);
  sh_done(&G);
}

static void root_loops_are_axes_then_reduce_axes(void **state) {
  sh_graph G;
  sh_sum2(&G, 3, 4, 5);
  stof_sched *s = sh_sched(&G);
  int l[8];
  assert_int_equal(sh_loops(s, sh_block(s, "S"), l), 3);
  const char *names[3] = {"i", "r", "c"};
  int64_t ext[3] = {3, 4, 5};
  for (int i = 0; i < 3; i++) {
    stof_loop_info info;
    SH_OK(G.ctx, stof_sched_loop_info(s, l[i], &info));
    assert_string_equal(info.name, names[i]);
    assert_int_equal(info.extent, ext[i]);
    assert_int_equal(info.iter, i == 0 ? STOF_ITER_DATA_PAR : STOF_ITER_REDUCE);
    assert_int_equal(info.derive, STOF_DERIVE_ROOT);
    assert_int_equal(info.source, -1);
    assert_true(info.alive);
    assert_int_equal(info.ann, STOF_ANN_NONE);
  }
  sh_check_all(&G, s,
               "for i in 0..3:\n"
               "  S[i] = 0.0\n"
               "  for r in 0..4:\n"
               "    for c in 0..5:\n"
               "      S[i] = S[i] + X[i, r, c]\n");
  stof_sched_free(s);
  sh_done(&G);
}

static void softmax_runs_with_max_and_sum_reductions(void **state) {
  sh_graph G;
  sh_softmax(&G, 5, 7);
  stof_sched *s = sh_sched(&G);
  sh_check_all(&G, s,
               "alloc mx: float32[5]\n"
               "alloc e: float32[5, 7]\n"
               "alloc sm: float32[5]\n"
               "for i in 0..5:\n"
               "  mx[i] = -inf\n"
               "  for r in 0..7:\n"
               "    mx[i] = max(mx[i], X[i, r])\n"
               "for i in 0..5:\n"
               "  for j in 0..7:\n"
               "    e[i, j] = exp((X[i, j] - mx[i]))\n"
               "for i in 0..5:\n"
               "  sm[i] = 0.0\n"
               "  for c in 0..7:\n"
               "    sm[i] = sm[i] + e[i, c]\n"
               "for i in 0..5:\n"
               "  for j in 0..7:\n"
               "    P[i, j] = e[i, j] / sm[i]\n");
  stof_sched_free(s);
  sh_done(&G);
}

static void clone_is_deep(void **state) {
  sh_graph G;
  sh_vec(&G, 32, STOF_DTYPE_F32);
  stof_sched *s = sh_sched(&G), *c;
  int l[4], p[2];
  sh_loops(s, sh_block(s, "B"), l);
  char *before = sh_nest(s);
  SH_OK(G.ctx, stof_sched_clone(s, &c));
  stof_factor f[2] = {stof_factor_const(STOF_INFER), stof_factor_const(4)};
  SH_OK(G.ctx, stof_sched_split(c, l[0], 2, f, p)); /* ids carry over to the clone */
  char *after = sh_nest(s), *cn = sh_nest(c);
  assert_string_equal(before, after);
  assert_string_not_equal(before, cn);
  stof_trace *ts, *tc;
  SH_OK(G.ctx, stof_sched_trace(s, &ts));
  SH_OK(G.ctx, stof_sched_trace(c, &tc));
  assert_int_equal(stof_trace_ninst(ts) + 1, stof_trace_ninst(tc));
  assert_int_equal(stof_trace_inst_kind(tc, stof_trace_ninst(tc) - 1), STOF_INST_SPLIT);
  stof_trace_free(ts);
  stof_trace_free(tc);
  /* the original still splits its own way */
  SH_OK(G.ctx, stof_sched_split(s, l[0], 2, f, p));
  char *s2 = sh_nest(s);
  assert_string_equal(s2, cn);
  free(before);
  free(after);
  free(cn);
  free(s2);
  stof_sched_free(c);
  sh_check_numeric(&G, s);
  stof_sched_free(s);
  sh_done(&G);
}

static void fresh_has_no_transformations(void **state) {
  sh_graph G;
  sh_vec(&G, 32, STOF_DTYPE_F32);
  stof_sched *s = sh_sched(&G), *f;
  int l[4], p[2];
  sh_loops(s, sh_block(s, "B"), l);
  stof_factor fs[2] = {stof_factor_const(STOF_INFER), stof_factor_const(4)};
  SH_OK(G.ctx, stof_sched_split(s, l[0], 2, fs, p));
  SH_OK(G.ctx, stof_sched_fresh(s, &f));
  sh_expect_nest(f, "for i in 0..32:\n  B[i] = (A[i] * 3.0) - 1.0\n");
  stof_trace *t;
  SH_OK(G.ctx, stof_sched_trace(f, &t));
  assert_int_equal(stof_trace_ninst(t), 0);
  stof_trace_free(t);
  stof_sched_free(f);
  stof_sched_free(s);
  sh_done(&G);
}

static stof_status ext_fn(stof_ctx *ctx, int n, const stof_tensor *const *in, stof_tensor *out, void *ud) {
  (void)ctx, (void)n, (void)ud;
  for (int64_t i = 0; i < stof_tensor_numel(out); i++) stof_tensor_store(out, i, stof_tensor_load(in[0], i));
  return STOF_OK;
}

static void extern_ops_are_unsupported(void **state) {
  sh_graph G;
  sh_vec(&G, 8, STOF_DTYPE_F32);
  int64_t n = 8;
  const stof_op *X, *Y;
  SH_OK(G.ctx, stof_te_extern(G.g, "ext", 1, G.out, 1, &n, STOF_DTYPE_F32, ext_fn, NULL, NULL, 0, &X));
  const stof_expr *ax[1], *ld;
  SH_OK(G.ctx, stof_te_compute_axes(G.g, 1, &n, NULL, ax));
  SH_OK(G.ctx, stof_te_load(G.g, X, 1, ax, &ld));
  SH_OK(G.ctx, stof_te_compute(G.g, "Y", 1, ax, ld, -1, &Y));
  stof_sched *s = NULL;
  sh_expect_error(G.ctx, stof_sched_new(G.g, 1, &Y, &s), STOF_ERR_UNSUPPORTED, "extern op ext is not supported yet");
  sh_expect_error(G.ctx, stof_sched_new(G.g, 1, &X, &s), STOF_ERR_UNSUPPORTED, "output ext is an extern op");
  assert_null(s);
  sh_done(&G);
}

static void creation_refuses_bad_outputs(void **state) {
  sh_graph G;
  sh_vec(&G, 8, STOF_DTYPE_F32);
  stof_sched *s = NULL;
  sh_expect_error(G.ctx, stof_sched_new(G.g, 1, G.in, &s), STOF_ERR_ARG, "output A is a placeholder");
  sh_expect_error(G.ctx, stof_sched_new(G.g, 0, G.out, &s), STOF_ERR_ARG, "no outputs");
  const stof_op *twice[2] = {G.out[0], G.out[0]};
  sh_expect_error(G.ctx, stof_sched_new(G.g, 2, twice, &s), STOF_ERR_ARG, "output B is given twice");
  assert_null(s);
  sh_done(&G);
}

static void get_block_explains_misses(void **state) {
  sh_graph G;
  sh_matmul_bias_relu(&G, 2, 3, 4);
  stof_sched *s = sh_sched(&G);
  int b;
  sh_expect_error(G.ctx, stof_sched_get_block(s, "Z", &b), STOF_ERR_SCHEDULE, "no block named Z (blocks: C, D, E)");
  sh_expect_error(G.ctx, stof_sched_get_block(s, "W", &b), STOF_ERR_SCHEDULE, "W is a placeholder (an input), not a block");
  int loops[8], n;
  sh_expect_error(G.ctx, stof_sched_get_loops(s, 1, 8, loops, &n), STOF_ERR_ARG, "never handed out");
  b = sh_block(s, "D");
  sh_expect_error(G.ctx, stof_sched_get_loops(s, b, 1, loops, &n), STOF_ERR_ARG, "block D has 2 loops, room for 1");
  stof_trace *t;
  SH_OK(G.ctx, stof_sched_trace(s, &t));
  assert_int_equal(stof_trace_ninst(t), 1); /* failures record nothing */
  stof_trace_free(t);
  stof_sched_free(s);
  sh_done(&G);
}

static void two_outputs(void **state) {
  sh_graph G;
  sh_matmul_bias_relu(&G, 3, 4, 5);
  G.out[G.nout++] = sh_op(&G, "C"); /* C both feeds D and is an output */
  stof_sched *s = sh_sched(&G);
  char *t = sh_nest(s);
  assert_non_null(strstr(t, "alloc D: float32[3, 4]\n"));
  assert_null(strstr(t, "alloc C"));
  free(t);
  sh_check_numeric(&G, s);
  sh_round_trip(&G, s);
  stof_sched_free(s);
  sh_done(&G);
}

int run_state_tests(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(one_block_per_compute_op),
      cmocka_unit_test(root_loops_are_axes_then_reduce_axes),
      cmocka_unit_test(softmax_runs_with_max_and_sum_reductions),
      cmocka_unit_test(clone_is_deep),
      cmocka_unit_test(fresh_has_no_transformations),
      cmocka_unit_test(extern_ops_are_unsupported),
      cmocka_unit_test(creation_refuses_bad_outputs),
      cmocka_unit_test(get_block_explains_misses),
      cmocka_unit_test(two_outputs),
  };
  return cmocka_run_group_tests_name("state", tests, NULL, NULL);
}
