/* cache_read and cache_write: golden loop nests (whole copies at the root, regions under a
 * loop), numbers against the interpreter, trace round trips, where the C backend puts the
 * buffers, and the illegal cases (the schedule stays as it was). */
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

static void cache_read_at_the_root(void **state) {
  sh_graph G;
  sh_matmul(&G, 6, 5, 4);
  stof_sched *s = sh_sched(&G);
  int bc = sh_block(s, "C"), cb;
  SH_OK(G.ctx, stof_sched_cache_read(s, bc, 1, "global", &cb));
  assert_string_equal(stof_sched_block_name(s, cb), "B.global");
  sh_check_all(&G, s,
               "alloc B.global: float32[4, 5]\n"
               "for v0 in 0..4:\n"
               "  for v1 in 0..5:\n"
               "    B.global[v0, v1] = B[v0, v1]\n"
               "for i in 0..6:\n"
               "  for j in 0..5:\n"
               "    C[i, j] = 0.0\n"
               "    for k in 0..4:\n"
               "      C[i, j] = C[i, j] + (A[i, k] * B.global[k, j])\n");
  /* a second cache of the same tensor gets its own name */
  int cb2;
  SH_OK(G.ctx, stof_sched_cache_read(s, bc, 1, "global", &cb2));
  assert_string_equal(stof_sched_block_name(s, cb2), "B.global.global");
  stof_sched_free(s);
  sh_done(&G);
}

/* A and B copied into "shared" per k.outer of a tiled matmul: bound inference sizes the
 * copies by the tile; the C backend keeps them on the stack. */
static void cache_read_under_a_tile(void **state) {
  sh_graph G;
  sh_matmul(&G, 37, 20, 12);
  stof_sched *s = sh_sched(&G);
  int bc = sh_block(s, "C"), l[4], t[4], k[2], as, bs;
  sh_loops(s, bc, l);
  SH_OK(G.ctx, stof_sched_tile(s, l[0], l[1], stof_factor_const(8), stof_factor_const(16), t));
  sh_split(s, l[2], 4, k);
  int order[6] = {t[0], t[1], k[0], t[2], t[3], k[1]};
  SH_OK(G.ctx, stof_sched_reorder(s, 6, order));
  SH_OK(G.ctx, stof_sched_cache_read(s, bc, 0, "shared", &as));
  SH_OK(G.ctx, stof_sched_cache_read(s, bc, 1, "shared", &bs));
  SH_OK(G.ctx, stof_sched_compute_at(s, as, k[0]));
  SH_OK(G.ctx, stof_sched_compute_at(s, bs, k[0]));
  sh_check_all(&G, s,
               "alloc A.shared: float32[8, 4] shared at k.outer\n"
               "alloc B.shared: float32[4, 16] shared at k.outer\n"
               "for i.outer in 0..5:\n"
               "  for j.outer in 0..2:\n"
               "    for i.inner in 0..8:\n"
               "      let i = i.outer * 8 + i.inner\n"
               "      if i < 37:\n"
               "        for j.inner in 0..16:\n"
               "          let j = j.outer * 16 + j.inner\n"
               "          if j < 20:\n"
               "            C[i, j] = 0.0\n"
               "    for k.outer in 0..3:\n"
               "      for ax0 in 0..8:\n"
               "        let v0 = i.outer * 8 + ax0\n"
               "        if v0 < 37:\n"
               "          for ax1 in 0..4:\n"
               "            let v1 = k.outer * 4 + ax1\n"
               "            A.shared[v0, v1] = A[v0, v1]\n"
               "      for ax0 in 0..4:\n"
               "        let v0 = k.outer * 4 + ax0\n"
               "        for ax1 in 0..16:\n"
               "          let v1 = j.outer * 16 + ax1\n"
               "          if v1 < 20:\n"
               "            B.shared[v0, v1] = B[v0, v1]\n"
               "      for i.inner in 0..8:\n"
               "        let i = i.outer * 8 + i.inner\n"
               "        if i < 37:\n"
               "          for j.inner in 0..16:\n"
               "            let j = j.outer * 16 + j.inner\n"
               "            if j < 20:\n"
               "              for k.inner in 0..4:\n"
               "                let k = k.outer * 4 + k.inner\n"
               "                C[i, j] = C[i, j] + (A.shared[i, k] * B.shared[k, j])\n");
  assert_true(sh_source_contains(&G, s, "_A_shared[32]; /* shared */"));
  assert_true(sh_source_contains(&G, s, "_B_shared[64]; /* shared */"));
  stof_sched_free(s);
  sh_done(&G);
}

/* cache_write at the root: the block accumulates in C.local, and a copy writes C. */
static void cache_write_at_the_root(void **state) {
  sh_graph G;
  sh_matmul(&G, 6, 5, 4);
  stof_sched *s = sh_sched(&G);
  int bc = sh_block(s, "C"), cw;
  SH_OK(G.ctx, stof_sched_cache_write(s, bc, "local", &cw));
  assert_string_equal(stof_sched_block_name(s, cw), "C.local");
  sh_check_all(&G, s,
               "alloc C.local: float32[6, 5] local\n"
               "for i in 0..6:\n"
               "  for j in 0..5:\n"
               "    C.local[i, j] = 0.0\n"
               "    for k in 0..4:\n"
               "      C.local[i, j] = C.local[i, j] + (A[i, k] * B[k, j])\n"
               "for v0 in 0..6:\n"
               "  for v1 in 0..5:\n"
               "    C[v0, v1] = C.local[v0, v1]\n");
  assert_true(sh_source_contains(&G, s, "_C_local[30]; /* local */"));
  stof_sched_free(s);
  sh_done(&G);
}

/* The copy moved under the tile loop: the local buffer holds one tile. */
static void cache_write_per_tile(void **state) {
  sh_graph G;
  sh_matmul(&G, 10, 12, 3);
  stof_sched *s = sh_sched(&G);
  int bc = sh_block(s, "C"), l[4], t[4], cw;
  sh_loops(s, bc, l);
  SH_OK(G.ctx, stof_sched_tile(s, l[0], l[1], stof_factor_const(4), stof_factor_const(6), t));
  SH_OK(G.ctx, stof_sched_cache_write(s, bc, "local", &cw));
  SH_OK(G.ctx, stof_sched_reverse_compute_at(s, cw, t[1]));
  sh_check_all(&G, s,
               "alloc C.local: float32[4, 6] local at j.outer\n"
               "for i.outer in 0..3:\n"
               "  for j.outer in 0..2:\n"
               "    for i.inner in 0..4:\n"
               "      let i = i.outer * 4 + i.inner\n"
               "      if i < 10:\n"
               "        for j.inner in 0..6:\n"
               "          let j = j.outer * 6 + j.inner\n"
               "          C.local[i, j] = 0.0\n"
               "          for k in 0..3:\n"
               "            C.local[i, j] = C.local[i, j] + (A[i, k] * B[k, j])\n"
               "    for ax0 in 0..4:\n"
               "      let v0 = i.outer * 4 + ax0\n"
               "      if v0 < 10:\n"
               "        for ax1 in 0..6:\n"
               "          let v1 = j.outer * 6 + ax1\n"
               "          C[v0, v1] = C.local[v0, v1]\n");
  assert_true(sh_source_contains(&G, s, "_C_local[24]; /* local */"));
  stof_sched_free(s);
  sh_done(&G);
}

/* ---------------------------------------------------------------- illegal */

static void cache_read_with_a_bad_input_index(void **state) {
  sh_graph G;
  sh_matmul(&G, 4, 4, 4);
  stof_sched *s = sh_sched(&G);
  int bc = sh_block(s, "C"), cb = -1;
  sh_snapshot sn = sh_take(s);
  sh_expect_error(G.ctx, stof_sched_cache_read(s, bc, 2, "shared", &cb), STOF_ERR_SCHEDULE,
                  "cache_read: input index 2 is out of range: block C reads 2 tensors (A, B)");
  sh_expect_error(G.ctx, stof_sched_cache_read(s, bc, -1, "shared", &cb), STOF_ERR_SCHEDULE,
                  "cache_read: input index -1 is out of range");
  sh_expect_error(G.ctx, stof_sched_cache_read(s, bc, 0, "texture", &cb), STOF_ERR_SCHEDULE,
                  "cache_read: unknown scope 'texture' (expected global, shared, local or warp)");
  sh_expect_error(G.ctx, stof_sched_cache_write(s, bc, "texture", &cb), STOF_ERR_SCHEDULE,
                  "cache_write: unknown scope 'texture'");
  assert_int_equal(cb, -1);
  sh_expect_same(s, &sn);
  stof_sched_free(s);
  sh_done(&G);
}

static void cache_write_of_a_moved_block(void **state) {
  sh_graph G;
  sh_chain(&G, 8);
  stof_sched *s = sh_sched(&G);
  int bb = sh_block(s, "B"), l[4], cw;
  sh_loops(s, sh_block(s, "C"), l);
  SH_OK(G.ctx, stof_sched_compute_at(s, bb, l[0]));
  sh_snapshot sn = sh_take(s);
  sh_expect_error(G.ctx, stof_sched_cache_write(s, bb, "local", &cw), STOF_ERR_SCHEDULE,
                  "cache_write: block B is computed at loop i (cache_write it before moving it)");
  sh_expect_same(s, &sn);
  stof_sched_free(s);
  sh_done(&G);
}

int run_cache_tests(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(cache_read_at_the_root),
      cmocka_unit_test(cache_read_under_a_tile),
      cmocka_unit_test(cache_write_at_the_root),
      cmocka_unit_test(cache_write_per_tile),
      cmocka_unit_test(cache_read_with_a_bad_input_index),
      cmocka_unit_test(cache_write_of_a_moved_block),
  };
  return cmocka_run_group_tests_name("cache", tests, NULL, NULL);
}
