/* compute_inline and reverse_compute_inline: golden loop nests, numbers against the
 * interpreter, trace round trips, the inlined block's handle afterwards, and the illegal
 * cases (the schedule stays as it was). */
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

static void compute_inline_an_elementwise_producer(void **state) {
  sh_graph G;
  sh_chain(&G, 37);
  stof_sched *s = sh_sched(&G);
  int bb = sh_block(s, "B"), l[4], p[2];
  sh_loops(s, sh_block(s, "C"), l);
  sh_split(s, l[0], 8, p);
  SH_OK(G.ctx, stof_sched_compute_inline(s, bb));
  sh_check_all(&G, s,
               "for i.outer in 0..5:\n"
               "  for i.inner in 0..8:\n"
               "    let i = i.outer * 8 + i.inner\n"
               "    if i < 37:\n"
               "      C[i] = (A[i] * 2.0) + 1.0\n");
  assert_false(stof_sched_block_alive(s, bb));
  sh_expect_error(G.ctx, stof_sched_get_loops(s, bb, 4, l, p), STOF_ERR_SCHEDULE,
                  "get_loops: block B was inlined into its consumers (compute_inline)");
  int other;
  sh_expect_error(G.ctx, stof_sched_get_block(s, "B", &other), STOF_ERR_SCHEDULE,
                  "get_block: block B was inlined");
  stof_func *f;
  const stof_op *args[3] = {G.in[0], sh_op(&G, "B"), G.out[0]};
  sh_expect_error(G.ctx, stof_build(s, 3, args, "c", &f), STOF_ERR_ARG,
                  "build: argument 2 (B) has no buffer in this schedule");
  stof_sched_free(s);
  sh_done(&G);
}

/* Every load of the producer becomes its expression at that load's index. */
static void compute_inline_into_a_stencil(void **state) {
  sh_graph G;
  sh_stencil(&G, 20);
  stof_sched *s = sh_sched(&G);
  SH_OK(G.ctx, stof_sched_compute_inline(s, sh_block(s, "B")));
  sh_check_all(&G, s,
               "for i in 0..20:\n"
               "  C[i] = ((A[i] * 2.0) + (A[(i + 1)] * 2.0)) + (A[(i + 2)] * 2.0)\n");
  stof_sched_free(s);
  sh_done(&G);
}

/* A producer with two consumers, one of them a reduction. */
static void compute_inline_into_two_consumers(void **state) {
  sh_graph G;
  sh_softmax(&G, 5, 7);
  stof_sched *s = sh_sched(&G);
  SH_OK(G.ctx, stof_sched_compute_inline(s, sh_block(s, "e")));
  sh_check_all(&G, s,
               "alloc mx: float32[5]\n"
               "alloc sm: float32[5]\n"
               "for i in 0..5:\n"
               "  mx[i] = -inf\n"
               "  for r in 0..7:\n"
               "    mx[i] = max(mx[i], X[i, r])\n"
               "for i in 0..5:\n"
               "  sm[i] = 0.0\n"
               "  for c in 0..7:\n"
               "    sm[i] = sm[i] + exp((X[i, c] - mx[i]))\n"
               "for i in 0..5:\n"
               "  for j in 0..7:\n"
               "    P[i, j] = exp((X[i, j] - mx[i])) / sm[i]\n");
  stof_sched_free(s);
  sh_done(&G);
}

/* The epilogue E folds into D's store; D keeps its loops (split by 4). */
static void reverse_compute_inline_an_epilogue(void **state) {
  sh_graph G;
  sh_matmul_bias_relu(&G, 10, 6, 3);
  stof_sched *s = sh_sched(&G);
  int be = sh_block(s, "E"), l[4], p[2];
  sh_loops(s, sh_block(s, "D"), l);
  sh_split(s, l[0], 4, p);
  SH_OK(G.ctx, stof_sched_reverse_compute_inline(s, be));
  sh_check_all(&G, s,
               "alloc C: float32[10, 6]\n"
               "for i in 0..10:\n"
               "  for j in 0..6:\n"
               "    C[i, j] = 0.0\n"
               "    for k in 0..3:\n"
               "      C[i, j] = C[i, j] + (A[i, k] * W[k, j])\n"
               "for i.outer in 0..3:\n"
               "  for i.inner in 0..4:\n"
               "    let i = i.outer * 4 + i.inner\n"
               "    if i < 10:\n"
               "      for j in 0..6:\n"
               "        E[i, j] = max((C[i, j] + bias[j]), 0.0)\n");
  assert_false(stof_sched_block_alive(s, be));
  stof_sched_free(s);
  sh_done(&G);
}

/* ---------------------------------------------------------------- illegal */

static void compute_inline_of_a_reduction(void **state) {
  sh_graph G;
  sh_matmul_bias_relu(&G, 4, 4, 4);
  stof_sched *s = sh_sched(&G);
  int bc = sh_block(s, "C");
  sh_snapshot sn = sh_take(s);
  sh_expect_error(G.ctx, stof_sched_compute_inline(s, bc), STOF_ERR_SCHEDULE,
                  "compute_inline: block C is a reduction (only injective blocks inline)");
  sh_expect_same(s, &sn);
  stof_sched_free(s);
  sh_done(&G);
}

static void compute_inline_of_an_output(void **state) {
  sh_graph G;
  sh_matmul_bias_relu(&G, 4, 4, 4);
  stof_sched *s = sh_sched(&G);
  int be = sh_block(s, "E");
  sh_snapshot sn = sh_take(s);
  sh_expect_error(G.ctx, stof_sched_compute_inline(s, be), STOF_ERR_SCHEDULE,
                  "compute_inline: block E is an output (its buffer must be written)");
  sh_expect_same(s, &sn);
  stof_sched_free(s);
  sh_done(&G);
}

static void reverse_compute_inline_refusals(void **state) {
  sh_graph G;
  sh_matmul_bias_relu(&G, 4, 4, 4);
  stof_sched *s = sh_sched(&G);
  int bd = sh_block(s, "D"), bc = sh_block(s, "C");
  sh_snapshot sn = sh_take(s);
  sh_expect_error(G.ctx, stof_sched_reverse_compute_inline(s, bd), STOF_ERR_SCHEDULE,
                  "reverse_compute_inline: producer C of block D is a reduction (cache_write it, then "
                  "inline into the copy)");
  sh_expect_error(G.ctx, stof_sched_reverse_compute_inline(s, bc), STOF_ERR_SCHEDULE,
                  "reverse_compute_inline: block C is a reduction");
  sh_expect_same(s, &sn);
  stof_sched_free(s);
  sh_done(&G);

  sh_softmax(&G, 4, 4);
  s = sh_sched(&G);
  int bp = sh_block(s, "P");
  sn = sh_take(s);
  sh_expect_error(G.ctx, stof_sched_reverse_compute_inline(s, bp), STOF_ERR_SCHEDULE,
                  "reverse_compute_inline: block P reads 2 blocks (e, sm); it must read exactly one");
  sh_expect_same(s, &sn);
  stof_sched_free(s);
  sh_done(&G);

  sh_stencil(&G, 8);
  s = sh_sched(&G);
  int cc = sh_block(s, "C");
  sn = sh_take(s);
  sh_expect_error(G.ctx, stof_sched_reverse_compute_inline(s, cc), STOF_ERR_SCHEDULE,
                  "reverse_compute_inline: block C reads B other than at its own index");
  sh_expect_same(s, &sn);
  stof_sched_free(s);
  sh_done(&G);
}

int run_compute_inline_tests(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(compute_inline_an_elementwise_producer),
      cmocka_unit_test(compute_inline_into_a_stencil),
      cmocka_unit_test(compute_inline_into_two_consumers),
      cmocka_unit_test(reverse_compute_inline_an_epilogue),
      cmocka_unit_test(compute_inline_of_a_reduction),
      cmocka_unit_test(compute_inline_of_an_output),
      cmocka_unit_test(reverse_compute_inline_refusals),
  };
  return cmocka_run_group_tests_name("compute_inline", tests, NULL, NULL);
}
