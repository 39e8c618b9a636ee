/* compute_at and reverse_compute_at: golden loop nests (regions from bound inference,
 * guards at the edges, compacted buffers), numbers against the interpreter, trace round
 * trips; how later splits, fuses and reorders treat the blocks computed at a loop; and the
 * illegal cases (the schedule stays as it was). */
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

/* B under C's i.outer: B computes the 8 values each iteration needs, guarded at 37. */
static void compute_at_under_a_split_loop(void **state) {
  sh_graph G;
  sh_chain(&G, 37);
  stof_sched *s = sh_sched(&G);
  int bb = sh_block(s, "B"), l[4], p[2];
  sh_loops(s, sh_block(s, "C"), l);
  sh_split(s, l[0], 8, p);
  SH_OK(G.ctx, stof_sched_compute_at(s, bb, p[0]));
  sh_check_all(&G, s,
               "alloc B: float32[8] at i.outer\n"
               "for i.outer in 0..5:\n"
               "  for ax0 in 0..8:\n"
               "    let i = i.outer * 8 + ax0\n"
               "    if i < 37:\n"
               "      B[i] = A[i] * 2.0\n"
               "  for i.inner in 0..8:\n"
               "    let i = i.outer * 8 + i.inner\n"
               "    if i < 37:\n"
               "      C[i] = B[i] + 1.0\n");
  /* the block has new loops; the old ones are gone */
  int nl = sh_loops(s, bb, l);
  assert_int_equal(nl, 1);
  stof_loop_info info;
  SH_OK(G.ctx, stof_sched_loop_info(s, l[0], &info));
  assert_string_equal(info.name, "ax0");
  assert_int_equal(info.extent, 8);
  assert_true(sh_source_contains(&G, s, "[8]; /*") == 0); /* a global intermediate: malloc'd */
  stof_sched_free(s);
  sh_done(&G);
}

/* A stencil: each tile of 8 outputs needs 10 values of B (a halo of 2). */
static void compute_at_with_a_halo(void **state) {
  sh_graph G;
  sh_stencil(&G, 20);
  stof_sched *s = sh_sched(&G);
  int l[4], p[2];
  sh_loops(s, sh_block(s, "C"), l);
  sh_split(s, l[0], 8, p);
  SH_OK(G.ctx, stof_sched_compute_at(s, sh_block(s, "B"), p[0]));
  sh_check_all(&G, s,
               "alloc B: float32[10] at i.outer\n"
               "for i.outer in 0..3:\n"
               "  for ax0 in 0..10:\n"
               "    let i = i.outer * 8 + ax0\n"
               "    if i < 22:\n"
               "      B[i] = A[i] * 2.0\n"
               "  for i.inner in 0..8:\n"
               "    let i = i.outer * 8 + i.inner\n"
               "    if i < 20:\n"
               "      C[i] = (B[i] + B[(i + 1)]) + B[(i + 2)]\n");
  stof_sched_free(s);
  sh_done(&G);
}

/* Under a fused loop: the region is one element (its loops vanish); the axes read the
 * fused loop through division and modulo. */
static void compute_at_under_a_fused_loop(void **state) {
  sh_graph G;
  sh_matmul_bias_relu(&G, 6, 10, 4);
  stof_sched *s = sh_sched(&G);
  int l[4], f;
  sh_loops(s, sh_block(s, "E"), l);
  SH_OK(G.ctx, stof_sched_fuse(s, 2, l, &f));
  SH_OK(G.ctx, stof_sched_compute_at(s, sh_block(s, "D"), f));
  sh_check_all(&G, s,
               "alloc C: float32[6, 10]\n"
               "alloc D: float32[1, 1] at i_j_fused\n"
               "for i in 0..6:\n"
               "  for j in 0..10:\n"
               "    C[i, j] = 0.0\n"
               "    for k in 0..4:\n"
               "      C[i, j] = C[i, j] + (A[i, k] * W[k, j])\n"
               "for i_j_fused in 0..60:\n"
               "  let i = i_j_fused / 10\n"
               "  let j = i_j_fused % 10\n"
               "  let i = i_j_fused / 10\n"
               "  let j = i_j_fused % 10\n"
               "  D[i, j] = C[i, j] + bias[j]\n"
               "  E[i, j] = max(D[i, j], 0.0)\n");
  stof_sched_free(s);
  sh_done(&G);
}

/* A reduction computed at a consumer's loop: its own reduce loop stays whole. */
static void compute_at_a_reduction(void **state) {
  sh_graph G;
  sh_matmul_bias_relu(&G, 6, 10, 4);
  stof_sched *s = sh_sched(&G);
  int l[4], p[2];
  sh_loops(s, sh_block(s, "D"), l);
  sh_split(s, l[1], 5, p);
  SH_OK(G.ctx, stof_sched_compute_at(s, sh_block(s, "C"), p[0]));
  sh_check_all(&G, s,
               "alloc C: float32[1, 5] at j.outer\n"
               "alloc D: float32[6, 10]\n"
               "for i in 0..6:\n"
               "  for j.outer in 0..2:\n"
               "    for ax1 in 0..5:\n"
               "      let j = j.outer * 5 + ax1\n"
               "      C[i, j] = 0.0\n"
               "      for k in 0..4:\n"
               "        C[i, j] = C[i, j] + (A[i, k] * W[k, j])\n"
               "    for j.inner in 0..5:\n"
               "      let j = j.outer * 5 + j.inner\n"
               "      D[i, j] = C[i, j] + bias[j]\n"
               "for i in 0..6:\n"
               "  for j in 0..10:\n"
               "    E[i, j] = max(D[i, j], 0.0)\n");
  stof_sched_free(s);
  sh_done(&G);
}

/* reverse_compute_at: C under B's i.outer, over the 8 values B wrote there. */
static void reverse_compute_at_under_a_split_loop(void **state) {
  sh_graph G;
  sh_chain(&G, 37);
  stof_sched *s = sh_sched(&G);
  int bc = sh_block(s, "C"), l[4], p[2];
  sh_loops(s, sh_block(s, "B"), l);
  sh_split(s, l[0], 8, p);
  SH_OK(G.ctx, stof_sched_reverse_compute_at(s, bc, p[0]));
  sh_check_all(&G, s,
               "alloc B: float32[8] at i.outer\n"
               "for i.outer in 0..5:\n"
               "  for i.inner in 0..8:\n"
               "    let i = i.outer * 8 + i.inner\n"
               "    if i < 37:\n"
               "      B[i] = A[i] * 2.0\n"
               "  for ax0 in 0..8:\n"
               "    let i = i.outer * 8 + ax0\n"
               "    if i < 37:\n"
               "      C[i] = B[i] + 1.0\n");
  stof_sched_free(s);
  sh_done(&G);
}

/* The epilogue of a tiled matmul, after each tile's reduction is complete. */
static void reverse_compute_at_a_matmul_epilogue(void **state) {
  sh_graph G;
  sh_matmul_bias_relu(&G, 12, 10, 3);
  stof_sched *s = sh_sched(&G);
  int l[4], t[4];
  sh_loops(s, sh_block(s, "C"), l);
  SH_OK(G.ctx, stof_sched_tile(s, l[0], l[1], stof_factor_const(4), stof_factor_const(5), t));
  SH_OK(G.ctx, stof_sched_reverse_compute_at(s, sh_block(s, "D"), t[1]));
  SH_OK(G.ctx, stof_sched_reverse_compute_at(s, sh_block(s, "E"), t[1]));
  sh_check_all(&G, s,
               "alloc C: float32[4, 5] at j.outer\n"
               "alloc D: float32[4, 5] at j.outer\n"
               "for i.outer in 0..3:\n"
               "  for j.outer in 0..2:\n"
               "    for i.inner in 0..4:\n"
               "      let i = i.outer * 4 + i.inner\n"
               "      for j.inner in 0..5:\n"
               "        let j = j.outer * 5 + j.inner\n"
               "        C[i, j] = 0.0\n"
               "        for k in 0..3:\n"
               "          C[i, j] = C[i, j] + (A[i, k] * W[k, j])\n"
               "    for ax0 in 0..4:\n"
               "      let i = i.outer * 4 + ax0\n"
               "      for ax1 in 0..5:\n"
               "        let j = j.outer * 5 + ax1\n"
               "        D[i, j] = C[i, j] + bias[j]\n"
               "    for ax0 in 0..4:\n"
               "      let i = i.outer * 4 + ax0\n"
               "      for ax1 in 0..5:\n"
               "        let j = j.outer * 5 + ax1\n"
               "        E[i, j] = max(D[i, j], 0.0)\n");
  stof_sched_free(s);
  sh_done(&G);
}

/* Splitting the loop a block is computed at moves the block to the innermost part; the
 * region follows the new loops. */
static void split_after_compute_at(void **state) {
  sh_graph G;
  sh_chain(&G, 32);
  stof_sched *s = sh_sched(&G);
  int l[4], p[2], q[2];
  sh_loops(s, sh_block(s, "C"), l);
  sh_split(s, l[0], 8, p);
  SH_OK(G.ctx, stof_sched_compute_at(s, sh_block(s, "B"), p[0]));
  sh_split(s, p[0], 2, q);
  sh_check_all(&G, s,
               "alloc B: float32[8] at i.outer.inner\n"
               "for i.outer.outer in 0..2:\n"
               "  for i.outer.inner in 0..2:\n"
               "    for ax0 in 0..8:\n"
               "      let i = i.outer.outer * 16 + i.outer.inner * 8 + ax0\n"
               "      B[i] = A[i] * 2.0\n"
               "    for i.inner in 0..8:\n"
               "      let i = (i.outer.outer * 2 + i.outer.inner) * 8 + i.inner\n"
               "      C[i] = B[i] + 1.0\n");
  stof_sched_free(s);
  sh_done(&G);
}

/* C[i] = B[i // 2]: the index is not affine, so B's region falls back to the whole axis. */
static void compute_at_falls_back_to_the_whole_axis(void **state) {
  sh_graph G;
  sh_chain(&G, 12); /* for its context, graph and A; the rest is built here */
  const stof_op *A = G.in[0], *B, *C;
  int64_t n = 12;
  const stof_expr *a1, *a2, *x, *two, *i2, *two_f, *y;
  SH_OK(G.ctx, stof_te_compute_axes(G.g, 1, &n, NULL, &a1));
  SH_OK(G.ctx, stof_te_load(G.g, A, 1, &a1, &x));
  SH_OK(G.ctx, stof_te_float(G.g, 3, STOF_DTYPE_F32, &two_f));
  SH_OK(G.ctx, stof_te_binary(G.g, STOF_EXPR_MUL, x, two_f, &x));
  SH_OK(G.ctx, stof_te_compute(G.g, "Q", 1, &a1, x, -1, &B));
  SH_OK(G.ctx, stof_te_compute_axes(G.g, 1, &n, NULL, &a2));
  SH_OK(G.ctx, stof_te_int(G.g, 2, STOF_DTYPE_I32, &two));
  SH_OK(G.ctx, stof_te_binary(G.g, STOF_EXPR_FLOORDIV, a2, two, &i2));
  SH_OK(G.ctx, stof_te_load(G.g, B, 1, &i2, &y));
  SH_OK(G.ctx, stof_te_compute(G.g, "R", 1, &a2, y, -1, &C));
  G.out[0] = C;
  stof_sched *s = sh_sched(&G);
  int l[4], p[2];
  sh_loops(s, sh_block(s, "R"), l);
  sh_split(s, l[0], 4, p);
  SH_OK(G.ctx, stof_sched_compute_at(s, sh_block(s, "Q"), p[0]));
  sh_check_all(&G, s,
               "alloc Q: float32[12]\n"
               "for i.outer in 0..3:\n"
               "  for i in 0..12:\n"
               "    Q[i] = A[i] * 3.0\n"
               "  for i.inner in 0..4:\n"
               "    let i = i.outer * 4 + i.inner\n"
               "    R[i] = Q[(i // 2)]\n");
  stof_sched_free(s);
  sh_done(&G);
}

/* ---------------------------------------------------------------- illegal */

static void compute_at_a_loop_that_misses_a_consumer(void **state) {
  sh_graph G;
  sh_softmax(&G, 4, 6);
  stof_sched *s = sh_sched(&G);
  int l[4], be = sh_block(s, "e");
  sh_loops(s, sh_block(s, "P"), l);
  sh_snapshot sn = sh_take(s);
  sh_expect_error(G.ctx, stof_sched_compute_at(s, be, l[0]), STOF_ERR_SCHEDULE,
                  "compute_at: loop i of block P does not enclose consumer sm of block e");
  sh_expect_same(s, &sn);
  stof_sched_free(s);
  sh_done(&G);
}

static void compute_at_of_an_output(void **state) {
  sh_graph G;
  sh_matmul_bias_relu(&G, 4, 4, 4);
  stof_sched *s = sh_sched(&G);
  int l[4], be = sh_block(s, "E"), bd = sh_block(s, "D");
  sh_loops(s, bd, l);
  sh_snapshot sn = sh_take(s);
  sh_expect_error(G.ctx, stof_sched_compute_at(s, be, l[0]), STOF_ERR_SCHEDULE,
                  "compute_at: block E is an output");
  sh_expect_error(G.ctx, stof_sched_compute_at(s, bd, l[1]), STOF_ERR_SCHEDULE,
                  "compute_at: loop j belongs to block D itself");
  sh_expect_same(s, &sn);
  stof_sched_free(s);
  sh_done(&G);
}

static void reverse_compute_at_inside_a_reduction(void **state) {
  sh_graph G;
  sh_matmul_bias_relu(&G, 4, 4, 4);
  stof_sched *s = sh_sched(&G);
  int l[4];
  sh_loops(s, sh_block(s, "C"), l);
  int bd = sh_block(s, "D"), be = sh_block(s, "E");
  sh_snapshot sn = sh_take(s);
  sh_expect_error(G.ctx, stof_sched_reverse_compute_at(s, bd, l[2]), STOF_ERR_SCHEDULE,
                  "reverse_compute_at: loop k of block C lies inside its reduce loop k");
  sh_expect_error(G.ctx, stof_sched_reverse_compute_at(s, be, l[0]), STOF_ERR_SCHEDULE,
                  "reverse_compute_at: loop i of block C does not enclose producer D of block E");
  sh_expect_same(s, &sn);
  stof_sched_free(s);
  sh_done(&G);
}

/* Loops of a moved block are replaced; reorders and fuses that would change the
 * iterations a block computed at a loop sees are refused. */
static void loops_around_a_computed_at_block(void **state) {
  sh_graph G;
  sh_matmul_bias_relu(&G, 6, 10, 4);
  stof_sched *s = sh_sched(&G);
  int lc[4], ld[4], f, bd = sh_block(s, "D");
  sh_loops(s, sh_block(s, "C"), lc);
  sh_loops(s, bd, ld);
  SH_OK(G.ctx, stof_sched_compute_at(s, sh_block(s, "C"), ld[0]));
  sh_snapshot sn = sh_take(s);
  sh_expect_error(G.ctx, stof_sched_unroll(s, lc[2]), STOF_ERR_SCHEDULE,
                  "unroll: loop k of block C was replaced when the block moved (compute_at; get its "
                  "loops again)");
  int swap[2] = {ld[1], ld[0]};
  sh_expect_error(G.ctx, stof_sched_reorder(s, 2, swap), STOF_ERR_SCHEDULE,
                  "reorder: block C is computed at loop i, among the loops reordered");
  sh_expect_error(G.ctx, stof_sched_fuse(s, 2, ld, &f), STOF_ERR_SCHEDULE,
                  "fuse: block C is computed at loop i, between the loops fused");
  int t[4];
  sh_expect_error(G.ctx, stof_sched_tile(s, ld[0], ld[1], stof_factor_const(2), stof_factor_const(2), t),
                  STOF_ERR_SCHEDULE, "tile: block C is computed at loop i, among the loops tiled");
  sh_expect_error(G.ctx, stof_sched_compute_inline(s, bd), STOF_ERR_SCHEDULE,
                  "compute_inline: block C is computed at a loop of block D");
  sh_expect_same(s, &sn);
  stof_sched_free(s);
  sh_done(&G);
}

int run_compute_at_tests(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(compute_at_under_a_split_loop),
      cmocka_unit_test(compute_at_with_a_halo),
      cmocka_unit_test(compute_at_under_a_fused_loop),
      cmocka_unit_test(compute_at_a_reduction),
      cmocka_unit_test(reverse_compute_at_under_a_split_loop),
      cmocka_unit_test(reverse_compute_at_a_matmul_epilogue),
      cmocka_unit_test(split_after_compute_at),
      cmocka_unit_test(compute_at_falls_back_to_the_whole_axis),
      cmocka_unit_test(compute_at_a_loop_that_misses_a_consumer),
      cmocka_unit_test(compute_at_of_an_output),
      cmocka_unit_test(reverse_compute_at_inside_a_reduction),
      cmocka_unit_test(loops_around_a_computed_at_block),
  };
  return cmocka_run_group_tests_name("compute_at", tests, NULL, NULL);
}
