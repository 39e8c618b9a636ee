/* fuse, reorder and tile: golden loop nests, numbers against the interpreter, trace round
 * trips; fusing split loops and splitting fused ones, reduce loops moved outward. */
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

static void split2(stof_sched *s, int loop, int64_t a, int64_t b, int *parts) {
  stof_factor f[2] = {stof_factor_const(a), stof_factor_const(b)};
  SH_OK(stof_sched_ctx(s), stof_sched_split(s, loop, 2, f, parts));
}

static void fuse_two_loops(void **state) {
  sh_graph G;
  sh_elem2(&G, 4, 8);
  stof_sched *s = sh_sched(&G);
  int l[4], f;
  sh_loops(s, sh_block(s, "B"), l);
  SH_OK(G.ctx, stof_sched_fuse(s, 2, l, &f));
  sh_check_all(&G, s,
               "for i_j_fused in 0..32:\n"
               "  let i = i_j_fused / 8\n"
               "  let j = i_j_fused % 8\n"
               "  B[i, j] = (A[i, j] * 2.0) + 1.0\n");
  stof_loop_info info;
  SH_OK(G.ctx, stof_sched_loop_info(s, f, &info));
  assert_int_equal(info.derive, STOF_DERIVE_FUSE);
  assert_int_equal(info.source, l[0]);
  assert_int_equal(info.nparts, 2);
  assert_int_equal(info.extent, 32);
  stof_sched_free(s);
  sh_done(&G);
}

static void fuse_three_loops(void **state) {
  sh_graph G;
  sh_elem2(&G, 6, 8);
  stof_sched *s = sh_sched(&G);
  int l[4], p[2], f;
  sh_loops(s, sh_block(s, "B"), l);
  split2(s, l[1], STOF_INFER, 4, p);
  int three[3] = {l[0], p[0], p[1]};
  SH_OK(G.ctx, stof_sched_fuse(s, 3, three, &f));
  sh_check_all(&G, s,
               "for i_j.outer_j.inner_fused in 0..48:\n"
               "  let i = i_j.outer_j.inner_fused / 8\n"
               "  let j = i_j.outer_j.inner_fused / 4 % 2 * 4 + i_j.outer_j.inner_fused % 4\n"
               "  B[i, j] = (A[i, j] * 2.0) + 1.0\n");
  stof_sched_free(s);
  sh_done(&G);
}

static void fuse_reduce_loops(void **state) {
  sh_graph G;
  sh_sum2(&G, 3, 4, 5);
  stof_sched *s = sh_sched(&G);
  int l[4], f;
  sh_loops(s, sh_block(s, "S"), l);
  SH_OK(G.ctx, stof_sched_fuse(s, 2, l + 1, &f));
  sh_check_all(&G, s,
               "for i in 0..3:\n"
               "  S[i] = 0.0\n"
               "  for r_c_fused in 0..20:\n"
               "    let r = r_c_fused / 5\n"
               "    let c = r_c_fused % 5\n"
               "    S[i] = S[i] + X[i, r, c]\n");
  stof_sched_free(s);
  sh_done(&G);
}

static void fuse_a_non_divisible_split(void **state) {
  sh_graph G;
  sh_vec(&G, 37, STOF_DTYPE_F32);
  stof_sched *s = sh_sched(&G);
  int l[4], p[2], f;
  sh_loops(s, sh_block(s, "B"), l);
  split2(s, l[0], STOF_INFER, 8, p);
  SH_OK(G.ctx, stof_sched_fuse(s, 2, p, &f));
  sh_check_all(&G, s,
               "for i.outer_i.inner_fused in 0..40:\n"
               "  let i = i.outer_i.inner_fused / 8 * 8 + i.outer_i.inner_fused % 8\n"
               "  if i < 37:\n"
               "    B[i] = (A[i] * 3.0) - 1.0\n");
  stof_sched_free(s);
  sh_done(&G);
}

static void split_a_fused_loop(void **state) {
  sh_graph G;
  sh_elem2(&G, 4, 8);
  stof_sched *s = sh_sched(&G);
  int l[4], p[2], f;
  sh_loops(s, sh_block(s, "B"), l);
  SH_OK(G.ctx, stof_sched_fuse(s, 2, l, &f));
  split2(s, f, STOF_INFER, 5, p);
  sh_check_all(&G, s,
               "for i_j_fused.outer in 0..7:\n"
               "  for i_j_fused.inner in 0..5:\n"
               "    let i = (i_j_fused.outer * 5 + i_j_fused.inner) / 8\n"
               "    let j = (i_j_fused.outer * 5 + i_j_fused.inner) % 8\n"
               "    if i_j_fused.outer * 5 + i_j_fused.inner < 32:\n"
               "      B[i, j] = (A[i, j] * 2.0) + 1.0\n");
  stof_sched_free(s);
  sh_done(&G);
}

static void reorder_swaps_two_loops(void **state) {
  sh_graph G;
  sh_elem2(&G, 4, 8);
  stof_sched *s = sh_sched(&G);
  int l[4];
  sh_loops(s, sh_block(s, "B"), l);
  int order[2] = {l[1], l[0]};
  SH_OK(G.ctx, stof_sched_reorder(s, 2, order));
  sh_check_all(&G, s,
               "for j in 0..8:\n"
               "  for i in 0..4:\n"
               "    B[i, j] = (A[i, j] * 2.0) + 1.0\n");
  stof_sched_free(s);
  sh_done(&G);
}

static void reorder_reduce_loop_outermost(void **state) {
  sh_graph G;
  sh_matmul(&G, 6, 5, 7);
  stof_sched *s = sh_sched(&G);
  int l[4];
  sh_loops(s, sh_block(s, "C"), l);
  int order[2] = {l[2], l[0]}; /* k takes i's place, i takes k's: k, j, i */
  SH_OK(G.ctx, stof_sched_reorder(s, 2, order));
  sh_check_all(&G, s,
               "for j in 0..5:\n"
               "  for i in 0..6:\n"
               "    C[i, j] = 0.0\n"
               "for k in 0..7:\n"
               "  for j in 0..5:\n"
               "    for i in 0..6:\n"
               "      C[i, j] = C[i, j] + (A[i, k] * B[k, j])\n");
  stof_sched_free(s);
  sh_done(&G);
}

static void reorder_reduce_loop_between(void **state) {
  sh_graph G;
  sh_matmul(&G, 6, 5, 7);
  stof_sched *s = sh_sched(&G);
  int l[4];
  sh_loops(s, sh_block(s, "C"), l);
  int order[3] = {l[0], l[2], l[1]};
  SH_OK(G.ctx, stof_sched_reorder(s, 3, order));
  sh_check_all(&G, s,
               "for i in 0..6:\n"
               "  for j in 0..5:\n"
               "    C[i, j] = 0.0\n"
               "  for k in 0..7:\n"
               "    for j in 0..5:\n"
               "      C[i, j] = C[i, j] + (A[i, k] * B[k, j])\n");
  stof_sched_free(s);
  sh_done(&G);
}

static void reorder_split_reduction_with_guards(void **state) {
  sh_graph G;
  sh_matmul(&G, 13, 6, 10);
  stof_sched *s = sh_sched(&G);
  int l[4], pi[2], pk[2];
  sh_loops(s, sh_block(s, "C"), l);
  split2(s, l[0], STOF_INFER, 4, pi);
  split2(s, l[2], STOF_INFER, 4, pk);
  int order[5] = {pk[0], pi[0], l[1], pk[1], pi[1]};
  SH_OK(G.ctx, stof_sched_reorder(s, 5, order));
  sh_check_all(&G, s,
               "for i.outer in 0..4:\n"
               "  for j in 0..6:\n"
               "    for i.inner in 0..4:\n"
               "      let i = i.outer * 4 + i.inner\n"
               "      if i < 13:\n"
               "        C[i, j] = 0.0\n"
               "for k.outer in 0..3:\n"
               "  for i.outer in 0..4:\n"
               "    for j in 0..6:\n"
               "      for k.inner in 0..4:\n"
               "        let k = k.outer * 4 + k.inner\n"
               "        if k < 10:\n"
               "          for i.inner in 0..4:\n"
               "            let i = i.outer * 4 + i.inner\n"
               "            if i < 13:\n"
               "              C[i, j] = C[i, j] + (A[i, k] * B[k, j])\n");
  stof_sched_free(s);
  sh_done(&G);
}

static void tile_two_loops(void **state) {
  sh_graph G;
  sh_elem2(&G, 64, 64);
  stof_sched *s = sh_sched(&G);
  int l[4], t[4];
  sh_loops(s, sh_block(s, "B"), l);
  SH_OK(G.ctx, stof_sched_tile(s, l[0], l[1], stof_factor_const(8), stof_factor_const(16), t));
  sh_check_all(&G, s,
               "for i.outer in 0..8:\n"
               "  for j.outer in 0..4:\n"
               "    for i.inner in 0..8:\n"
               "      let i = i.outer * 8 + i.inner\n"
               "      for j.inner in 0..16:\n"
               "        let j = j.outer * 16 + j.inner\n"
               "        B[i, j] = (A[i, j] * 2.0) + 1.0\n");
  char *lua = sh_trace_lua(s);
  assert_non_null(strstr(lua, "  local l3, l4 = s:split(l1, {stof.INFER, 8})\n"
                              "  local l5, l6 = s:split(l2, {stof.INFER, 16})\n"
                              "  s:reorder(l3, l5, l4, l6)\n"));
  free(lua);
  stof_sched_free(s);
  sh_done(&G);
}

static void tile_non_divisible_matmul(void **state) {
  sh_graph G;
  sh_matmul(&G, 37, 50, 13);
  stof_sched *s = sh_sched(&G);
  int l[4], t[4];
  sh_loops(s, sh_block(s, "C"), l);
  SH_OK(G.ctx, stof_sched_tile(s, l[0], l[1], stof_factor_const(8), stof_factor_const(16), t));
  sh_check_all(&G, s,
               "for i.outer in 0..5:\n"
               "  for j.outer in 0..4:\n"
               "    for i.inner in 0..8:\n"
               "      let i = i.outer * 8 + i.inner\n"
               "      if i < 37:\n"
               "        for j.inner in 0..16:\n"
               "          let j = j.outer * 16 + j.inner\n"
               "          if j < 50:\n"
               "            C[i, j] = 0.0\n"
               "            for k in 0..13:\n"
               "              C[i, j] = C[i, j] + (A[i, k] * B[k, j])\n");
  stof_sched_free(s);
  sh_done(&G);
}

static void tile_with_knobs(void **state) {
  sh_graph G;
  sh_elem2(&G, 20, 12);
  stof_sched *s = sh_sched(&G);
  int l[4], t[4], kx, ky;
  sh_loops(s, sh_block(s, "B"), l);
  int64_t cx[2] = {4, 8}, cy[2] = {3, 5};
  SH_OK(G.ctx, stof_sched_knob(s, "tx", 2, cx, 1, &kx));
  SH_OK(G.ctx, stof_sched_knob(s, "ty", 2, cy, 1, &ky));
  SH_OK(G.ctx, stof_sched_tile(s, l[0], l[1], stof_factor_knob(kx), stof_factor_knob(ky), t));
  sh_check_all(&G, s,
               "for i.outer in 0..3:\n"
               "  for j.outer in 0..3:\n"
               "    for i.inner in 0..8:\n"
               "      let i = i.outer * 8 + i.inner\n"
               "      if i < 20:\n"
               "        for j.inner in 0..5:\n"
               "          let j = j.outer * 5 + j.inner\n"
               "          if j < 12:\n"
               "            B[i, j] = (A[i, j] * 2.0) + 1.0\n");
  stof_sched_free(s);
  sh_done(&G);
}

int run_fuse_reorder_tile_tests(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(fuse_two_loops),
      cmocka_unit_test(fuse_three_loops),
      cmocka_unit_test(fuse_reduce_loops),
      cmocka_unit_test(fuse_a_non_divisible_split),
      cmocka_unit_test(split_a_fused_loop),
      cmocka_unit_test(reorder_swaps_two_loops),
      cmocka_unit_test(reorder_reduce_loop_outermost),
      cmocka_unit_test(reorder_reduce_loop_between),
      cmocka_unit_test(reorder_split_reduction_with_guards),
      cmocka_unit_test(tile_two_loops),
      cmocka_unit_test(tile_non_divisible_matmul),
      cmocka_unit_test(tile_with_knobs),
  };
  return cmocka_run_group_tests_name("fuse_reorder_tile", tests, NULL, NULL);
}
