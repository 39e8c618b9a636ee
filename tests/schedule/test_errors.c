/* Illegal schedules: each primitive refuses bad arguments with STOF_ERR_SCHEDULE (or _ARG
 * for ids it never handed out), a message naming the loop or block and the cause, and
 * leaves the schedule unchanged (same loop nest, same trace). */
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

typedef struct snapshot {
  char *nest, *lua;
} snapshot;

static snapshot take(stof_sched *s) {
  snapshot sn = {sh_nest(s), sh_trace_lua(s)};
  return sn;
}

static void expect_same(stof_sched *s, snapshot *before) {
  snapshot now = take(s);
  assert_string_equal(before->nest, now.nest);
  assert_string_equal(before->lua, now.lua);
  free(now.nest);
  free(now.lua);
  free(before->nest);
  free(before->lua);
}

/* The matmul C = A @ B, 16 x 12 x 8, with its loops i, j, k in l[]. */
static stof_sched *matmul(sh_graph *G, int *l) {
  sh_matmul(G, 16, 12, 8);
  stof_sched *s = sh_sched(G);
  sh_loops(s, sh_block(s, "C"), l);
  return s;
}

static void bind_a_loop_twice(void **state) {
  sh_graph G;
  int l[4];
  stof_sched *s = matmul(&G, l);
  SH_OK(G.ctx, stof_sched_bind(s, l[0], "blockIdx.x"));
  snapshot sn = take(s);
  sh_expect_error(G.ctx, stof_sched_bind(s, l[0], "threadIdx.x"), STOF_ERR_SCHEDULE,
                  "bind: loop i is already bound to blockIdx.x");
  sh_expect_error(G.ctx, stof_sched_bind(s, l[1], "blockIdx.x"), STOF_ERR_SCHEDULE,
                  "bind: blockIdx.x is already bound to loop i in block C");
  sh_expect_error(G.ctx, stof_sched_vectorize(s, l[0]), STOF_ERR_SCHEDULE,
                  "vectorize: loop i is already bound to blockIdx.x");
  expect_same(s, &sn);
  stof_sched_free(s);
  sh_done(&G);
}

static void split_by_zero(void **state) {
  sh_graph G;
  int l[4], p[2];
  stof_sched *s = matmul(&G, l);
  snapshot sn = take(s);
  stof_factor f[2] = {stof_factor_const(0), stof_factor_const(4)};
  sh_expect_error(G.ctx, stof_sched_split(s, l[0], 2, f, p), STOF_ERR_SCHEDULE, "split: factor 0 for loop i");
  expect_same(s, &sn);
  stof_sched_free(s);
  sh_done(&G);
}

static void split_by_a_negative_factor(void **state) {
  sh_graph G;
  int l[4], p[2];
  stof_sched *s = matmul(&G, l);
  snapshot sn = take(s);
  stof_factor f[2] = {stof_factor_const(STOF_INFER), stof_factor_const(-4)};
  sh_expect_error(G.ctx, stof_sched_split(s, l[1], 2, f, p), STOF_ERR_SCHEDULE,
                  "split: negative factor -4 for loop j");
  expect_same(s, &sn);
  stof_sched_free(s);
  sh_done(&G);
}

static void split_other_bad_factors(void **state) {
  sh_graph G;
  int l[4], p[3];
  stof_sched *s = matmul(&G, l);
  snapshot sn = take(s);
  stof_factor two_infer[2] = {stof_factor_const(STOF_INFER), stof_factor_const(STOF_INFER)};
  sh_expect_error(G.ctx, stof_sched_split(s, l[0], 2, two_infer, p), STOF_ERR_SCHEDULE,
                  "split: more than one factor for loop i is STOF_INFER");
  stof_factor short_[2] = {stof_factor_const(3), stof_factor_const(5)};
  sh_expect_error(G.ctx, stof_sched_split(s, l[0], 2, short_, p), STOF_ERR_SCHEDULE,
                  "split: factors with product 15 do not cover loop i of extent 16");
  sh_expect_error(G.ctx, stof_sched_split(s, l[0], 1, short_, p), STOF_ERR_SCHEDULE,
                  "split: loop i needs at least 2 factors, got 1");
  stof_factor huge[3] = {stof_factor_const(1 << 30), stof_factor_const(1 << 30), stof_factor_const(STOF_INFER)};
  sh_expect_error(G.ctx, stof_sched_split(s, l[0], 3, huge, p), STOF_ERR_SCHEDULE,
                  "split: the factors of loop i are too large");
  expect_same(s, &sn);
  stof_sched_free(s);
  sh_done(&G);
}

static void reorder_with_a_loop_of_another_block(void **state) {
  sh_graph G;
  sh_matmul_bias_relu(&G, 4, 6, 5);
  stof_sched *s = sh_sched(&G);
  int lc[4], ld[4];
  sh_loops(s, sh_block(s, "C"), lc);
  sh_loops(s, sh_block(s, "D"), ld);
  snapshot sn = take(s);
  int order[2] = {lc[1], ld[0]};
  sh_expect_error(G.ctx, stof_sched_reorder(s, 2, order), STOF_ERR_SCHEDULE,
                  "reorder: loop j is in block C, loop i in block D");
  int twice[2] = {lc[1], lc[1]};
  sh_expect_error(G.ctx, stof_sched_reorder(s, 2, twice), STOF_ERR_SCHEDULE, "reorder: loop j is given twice");
  expect_same(s, &sn);
  stof_sched_free(s);
  sh_done(&G);
}

static void fuse_loops_that_are_not_adjacent(void **state) {
  sh_graph G;
  sh_sum2(&G, 3, 4, 5);
  stof_sched *s = sh_sched(&G);
  int l[4];
  sh_loops(s, sh_block(s, "S"), l);
  int order[3] = {l[0], l[2], l[1]}; /* i, c, r */
  SH_OK(G.ctx, stof_sched_reorder(s, 3, order));
  snapshot sn = take(s);
  int f, rc[2] = {l[1], l[2]};
  sh_expect_error(G.ctx, stof_sched_fuse(s, 2, rc, &f), STOF_ERR_SCHEDULE,
                  "fuse: loops r and c are not in order (give them outermost first)");
  int ic[2] = {l[0], l[2]};
  sh_expect_error(G.ctx, stof_sched_fuse(s, 2, ic, &f), STOF_ERR_SCHEDULE,
                  "fuse: loop i is data-parallel and loop c is reduce (fuse loops of one kind)");
  expect_same(s, &sn);
  stof_sched_free(s);
  sh_done(&G);
  /* i and j with k between them */
  s = matmul(&G, l);
  int ikj[3] = {l[0], l[2], l[1]};
  SH_OK(G.ctx, stof_sched_reorder(s, 3, ikj));
  sn = take(s);
  int ij[2] = {l[0], l[1]};
  sh_expect_error(G.ctx, stof_sched_fuse(s, 2, ij, &f), STOF_ERR_SCHEDULE,
                  "fuse: loops i and j are not adjacent in block C (k lies between them)");
  expect_same(s, &sn);
  stof_sched_free(s);
  sh_done(&G);
}

static void group_that_is_not_legal(void **state) {
  sh_graph G;
  sh_softmax(&G, 3, 5);
  stof_sched *s = sh_sched(&G);
  snapshot sn = take(s);
  const stof_op *ops[2] = {sh_op(&G, "mx"), sh_op(&G, "sm")};
  int g;
  sh_expect_error(G.ctx, stof_sched_group(s, 2, ops, &g), STOF_ERR_SCHEDULE,
                  "group {mx, sm}: mx (reduction) and sm (reduction) are both reductions");
  expect_same(s, &sn);
  stof_sched_free(s);
  sh_done(&G);
}

static void use_of_a_replaced_loop(void **state) {
  sh_graph G;
  int l[4], p[2], f;
  stof_sched *s = matmul(&G, l);
  stof_factor fs[2] = {stof_factor_const(STOF_INFER), stof_factor_const(4)};
  SH_OK(G.ctx, stof_sched_split(s, l[0], 2, fs, p));
  int ij[2] = {p[1], l[1]};
  SH_OK(G.ctx, stof_sched_fuse(s, 2, ij, &f));
  snapshot sn = take(s);
  sh_expect_error(G.ctx, stof_sched_split(s, l[0], 2, fs, p), STOF_ERR_SCHEDULE,
                  "split: loop i was split (use the loops the split returned)");
  sh_expect_error(G.ctx, stof_sched_parallel(s, l[1]), STOF_ERR_SCHEDULE,
                  "parallel: loop j was fused into i.inner_j_fused (use the fused loop)");
  sh_expect_error(G.ctx, stof_sched_unroll(s, 999), STOF_ERR_ARG, "unroll: no loop 999 in this schedule");
  expect_same(s, &sn);
  stof_sched_free(s);
  sh_done(&G);
}

static void ids_never_handed_out(void **state) {
  sh_graph G;
  sh_matmul(&G, 4, 4, 4);
  stof_sched *s = sh_sched(&G);
  int p[2];
  stof_factor fs[2] = {stof_factor_const(STOF_INFER), stof_factor_const(2)};
  sh_expect_error(G.ctx, stof_sched_split(s, 0, 2, fs, p), STOF_ERR_ARG,
                  "split: loop 0 (i) was never handed out (get loops with get_loops)");
  sh_expect_error(G.ctx, stof_sched_annotate_block(s, 0, "k", "v"), STOF_ERR_ARG,
                  "annotate: block 0 (C) was never handed out (get it with get_block)");
  stof_sched_free(s);
  sh_done(&G);
}

static void annotations_that_do_not_fit(void **state) {
  sh_graph G;
  int l[4], p[2], f;
  stof_sched *s = matmul(&G, l);
  SH_OK(G.ctx, stof_sched_parallel(s, l[0]));
  snapshot sn = take(s);
  sh_expect_error(G.ctx, stof_sched_bind(s, l[2], "blockIdx.x"), STOF_ERR_SCHEDULE,
                  "bind: loop k is a reduce loop: it cannot be bound to blockIdx.x");
  sh_expect_error(G.ctx, stof_sched_bind(s, l[1], "warp.x"), STOF_ERR_SCHEDULE,
                  "bind: unknown thread tag 'warp.x' for loop j");
  sh_expect_error(G.ctx, stof_sched_parallel(s, l[2]), STOF_ERR_SCHEDULE, "parallel: loop k is a reduce loop");
  sh_expect_error(G.ctx, stof_sched_parallel(s, l[0]), STOF_ERR_SCHEDULE, "parallel: loop i is already parallel");
  stof_factor fs[2] = {stof_factor_const(STOF_INFER), stof_factor_const(4)};
  sh_expect_error(G.ctx, stof_sched_split(s, l[0], 2, fs, p), STOF_ERR_SCHEDULE,
                  "split: loop i is parallel (split it before annotating it)");
  sh_expect_error(G.ctx, stof_sched_fuse(s, 2, l, &f), STOF_ERR_SCHEDULE,
                  "fuse: loop i is parallel (fuse before annotating)");
  sh_expect_error(G.ctx, stof_sched_annotate_loop(s, l[1], "", "v"), STOF_ERR_SCHEDULE, "annotate: empty key for loop j");
  int t[4];
  sh_expect_error(G.ctx, stof_sched_tile(s, l[1], l[1], stof_factor_const(2), stof_factor_const(2), t),
                  STOF_ERR_SCHEDULE, "tile: x and y are the same loop j");
  sh_expect_error(G.ctx, stof_sched_tile(s, l[1], l[2], stof_factor_const(0), stof_factor_const(2), t),
                  STOF_ERR_SCHEDULE, "tile: factor 0 for loop j");
  expect_same(s, &sn);
  SH_OK(G.ctx, stof_sched_annotate_loop(s, l[1], "pragma", "x"));
  sh_expect_error(G.ctx, stof_sched_split(s, l[1], 2, fs, p), STOF_ERR_SCHEDULE,
                  "split: loop j is annotated with pragma (split it before annotating it)");
  stof_sched_free(s);
  sh_done(&G);
}

int run_errors_tests(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(bind_a_loop_twice),
      cmocka_unit_test(split_by_zero),
      cmocka_unit_test(split_by_a_negative_factor),
      cmocka_unit_test(split_other_bad_factors),
      cmocka_unit_test(reorder_with_a_loop_of_another_block),
      cmocka_unit_test(fuse_loops_that_are_not_adjacent),
      cmocka_unit_test(group_that_is_not_legal),
      cmocka_unit_test(use_of_a_replaced_loop),
      cmocka_unit_test(ids_never_handed_out),
      cmocka_unit_test(annotations_that_do_not_fit),
  };
  return cmocka_run_group_tests_name("errors", tests, NULL, NULL);
}
