/* sample_perfect_tile and sample_compute_location: seeded and deterministic, perfect
 * tilings for many extents, split by the sampled knobs as by constants, the trace round
 * trip (Lua and JSON), decisions changed in the trace, errors that leave the schedule
 * unchanged, and location knobs applied with compute_at. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

/* The factors of knobs[0..n). */
static void factors(stof_sched *s, int n, const int *knobs, int64_t *f) {
  for (int k = 0; k < n; k++)
    assert_int_equal(stof_sched_knob_info(s, knobs[k], NULL, NULL, NULL, &f[k]), STOF_OK);
}

static void perfect_tile_is_seeded(void **state) {
  sh_graph G;
  sh_vec(&G, 360, STOF_DTYPE_F32);
  int64_t first[4];
  for (int round = 0; round < 2; round++) {
    stof_ctx_seed(G.ctx, 99);
    stof_sched *s = sh_sched(&G);
    int l[1], kn[4];
    int64_t f[4];
    sh_loops(s, sh_block(s, "B"), l);
    SH_OK(G.ctx, stof_sched_sample_perfect_tile(s, l[0], 4, 0, NULL, NULL, kn));
    factors(s, 4, kn, f);
    if (round == 0) memcpy(first, f, sizeof f);
    for (int k = 0; k < 4; k++) assert_int_equal(f[k], first[k]);
    stof_sched_free(s);
  }
  /* other seeds give other tilings (some of them) */
  int differ = 0;
  for (uint64_t seed = 1; seed <= 20; seed++) {
    stof_ctx_seed(G.ctx, seed);
    stof_sched *s = sh_sched(&G);
    int l[1], kn[4];
    int64_t f[4];
    sh_loops(s, sh_block(s, "B"), l);
    SH_OK(G.ctx, stof_sched_sample_perfect_tile(s, l[0], 4, 0, NULL, NULL, kn));
    factors(s, 4, kn, f);
    differ += memcmp(f, first, sizeof f) != 0;
    stof_sched_free(s);
  }
  assert_true(differ > 0);
  sh_done(&G);
}

static void perfect_tile_multiplies_to_the_extent(void **state) {
  static const int64_t extents[] = {1, 2, 7, 12, 13, 64, 97, 360, 1024, 1000003, 2147483647};
  for (size_t e = 0; e < sizeof extents / sizeof *extents; e++) {
    sh_graph G;
    sh_vec(&G, extents[e], STOF_DTYPE_F32);
    stof_sched *s = sh_sched(&G);
    int l[1];
    sh_loops(s, sh_block(s, "B"), l);
    for (int seed = 0; seed < 24; seed++) {
      stof_ctx_seed(G.ctx, (uint64_t)seed * 7919 + 1);
      int n = 1 + seed % 4, maxi = (seed / 4) % 3 == 0 ? 0 : 1 + seed % 9, kn[4];
      if (n == 1 && maxi && extents[e] > maxi) maxi = 0;
      int64_t f[4], prod = 1;
      SH_OK(G.ctx, stof_sched_sample_perfect_tile(s, l[0], n, maxi, NULL, NULL, kn));
      factors(s, n, kn, f);
      for (int k = 0; k < n; k++) {
        assert_true(f[k] >= 1);
        prod *= f[k];
        int ncand;
        SH_OK(G.ctx, stof_sched_knob_info(s, kn[k], NULL, &ncand, NULL, NULL));
        int64_t last;
        SH_OK(G.ctx, stof_sched_knob_candidate(s, kn[k], ncand - 1, &last));
        assert_int_equal(last, extents[e]); /* the divisors, the extent last */
      }
      assert_int_equal(prod, extents[e]);
      if (maxi) assert_true(f[n - 1] <= maxi);
    }
    /* the names follow the loop; taken ones get a suffix */
    const char *name;
    int k0;
    SH_OK(G.ctx, stof_sched_find_knob(s, "i.tile0", &k0));
    SH_OK(G.ctx, stof_sched_find_knob(s, "i_1.tile0", &k0));
    SH_OK(G.ctx, stof_sched_knob_info(s, k0, &name, NULL, NULL, NULL));
    assert_string_equal(name, "i_1.tile0");
    stof_sched_free(s);
    sh_done(&G);
  }
}

static void split_by_sampled_knobs(void **state) {
  sh_graph G;
  sh_matmul(&G, 24, 20, 12);
  stof_sched *s = sh_sched(&G), *c = sh_sched(&G);
  int l[3], lc[3], ki[3], kj[2], pi[3], pj[2], ci[3], cj[2];
  sh_loops(s, sh_block(s, "C"), l);
  sh_loops(c, sh_block(c, "C"), lc);
  int64_t di[3] = {2, 3, 4};
  stof_ctx_seed(G.ctx, 5);
  SH_OK(G.ctx, stof_sched_sample_perfect_tile(s, l[0], 3, 4, di, NULL, ki));
  SH_OK(G.ctx, stof_sched_sample_perfect_tile(s, l[1], 2, 0, NULL, NULL, kj));
  int64_t fj[2];
  factors(s, 2, kj, fj);
  stof_factor f3[3], f2[2], c3[3], c2[2];
  for (int k = 0; k < 3; k++) f3[k] = stof_factor_knob(ki[k]), c3[k] = stof_factor_const(di[k]);
  for (int k = 0; k < 2; k++) f2[k] = stof_factor_knob(kj[k]), c2[k] = stof_factor_const(fj[k]);
  SH_OK(G.ctx, stof_sched_split(s, l[0], 3, f3, pi));
  SH_OK(G.ctx, stof_sched_split(s, l[1], 2, f2, pj));
  SH_OK(G.ctx, stof_sched_split(c, lc[0], 3, c3, ci));
  SH_OK(G.ctx, stof_sched_split(c, lc[1], 2, c2, cj));
  int order[5] = {pi[0], pj[0], pi[1], pj[1], pi[2]}, corder[5] = {ci[0], cj[0], ci[1], cj[1], ci[2]};
  SH_OK(G.ctx, stof_sched_reorder(s, 5, order));
  SH_OK(G.ctx, stof_sched_reorder(c, 5, corder));
  char *want = sh_nest(c);
  assert_null(strstr(want, "if ")); /* a perfect tiling: no guard */
  sh_check_all(&G, s, want);
  free(want);
  char *lua = sh_trace_lua(s);
  assert_non_null(strstr(lua, "  local k4, k5, k6 = s:sample_perfect_tile(l1, 3, 4, {2, 3, 4}, "
                              "{\"i.tile0\", \"i.tile1\", \"i.tile2\"})\n"));
  assert_non_null(strstr(lua, "s:split(l1, {k4, k5, k6})"));
  free(lua);
  stof_sched_free(c);
  stof_sched_free(s);
  sh_done(&G);
}

static void perfect_tile_json_and_decisions(void **state) {
  sh_graph G;
  sh_vec(&G, 48, STOF_DTYPE_F32);
  stof_sched *s = sh_sched(&G);
  int l[1], kn[2], p[2];
  sh_loops(s, sh_block(s, "B"), l);
  int64_t d[2] = {6, 8};
  SH_OK(G.ctx, stof_sched_sample_perfect_tile(s, l[0], 2, 8, d, NULL, kn));
  stof_factor f[2] = {stof_factor_knob(kn[0]), stof_factor_knob(kn[1])};
  SH_OK(G.ctx, stof_sched_split(s, l[0], 2, f, p));
  stof_trace *t;
  char *json;
  SH_OK(G.ctx, stof_sched_trace(s, &t));
  SH_OK(G.ctx, stof_trace_to_json(t, &json));
  assert_non_null(strstr(json, "{\"kind\":\"SamplePerfectTile\",\"loop\":1,\"n\":2,\"max_innermost\":8,"
                               "\"extent\":48,\"decisions\":[6,8],\"names\":[\"i.tile0\",\"i.tile1\"],"
                               "\"outputs\":[2,3]}"));
  stof_ctx_dealloc(G.ctx, json, strlen(json) + 1);
  /* decisions index the divisors 1, 2, 3, 4, 6, 8, 12, 16, 24, 48; both changed: 12 x 4 */
  SH_OK(G.ctx, stof_trace_set_decision(t, "i.tile0", 6));
  SH_OK(G.ctx, stof_trace_set_decision(t, "i.tile1", 3));
  stof_sched *r;
  SH_OK(G.ctx, stof_sched_fresh(s, &r));
  SH_OK(G.ctx, stof_sched_replay(t, r));
  sh_expect_nest(r,
                 "for i.outer in 0..12:\n"
                 "  for i.inner in 0..4:\n"
                 "    let i = i.outer * 4 + i.inner\n"
                 "    B[i] = (A[i] * 3.0) - 1.0\n");
  sh_check_numeric(&G, r);
  stof_sched_free(r);
  /* one changed alone breaks the product: the replay refuses it, naming the knobs */
  SH_OK(G.ctx, stof_trace_set_decision(t, "i.tile1", 5));
  SH_OK(G.ctx, stof_sched_fresh(s, &r));
  sh_snapshot before = sh_take(r);
  sh_expect_error(G.ctx, stof_sched_replay(t, r), STOF_ERR_SCHEDULE,
                  "replay: instruction 2 (SamplePerfectTile): sample_perfect_tile: factors {12, 8} "
                  "(knobs i.tile0, i.tile1) do not multiply to the extent 48 of loop i");
  sh_expect_same(r, &before);
  stof_sched_free(r);
  /* the innermost bound holds on replay too */
  SH_OK(G.ctx, stof_trace_set_decision(t, "i.tile0", 3));
  SH_OK(G.ctx, stof_trace_set_decision(t, "i.tile1", 6));
  SH_OK(G.ctx, stof_sched_fresh(s, &r));
  sh_expect_error(G.ctx, stof_sched_replay(t, r), STOF_ERR_SCHEDULE,
                  "innermost factor 12 (knob i.tile1) of loop i exceeds max_innermost 8");
  stof_sched_free(r);
  sh_expect_error(G.ctx, stof_trace_set_decision(t, "i.tile1", 10), STOF_ERR_ARG,
                  "decision 10 for knob i.tile1 out of range (10 candidates)");
  stof_trace_free(t);
  stof_sched_free(s);
  sh_done(&G);
}

static void perfect_tile_errors_change_nothing(void **state) {
  sh_graph G;
  sh_matmul(&G, 12, 10, 7);
  stof_sched *s = sh_sched(&G);
  int l[3], kn[STOF_SCHED_MAX_LOOPS + 1];
  sh_loops(s, sh_block(s, "C"), l);
  sh_snapshot before = sh_take(s);
  int64_t bad[2] = {5, 2}, big[2] = {2, 6}, zero[2] = {0, 12};
  const char *dup[2] = {"a", "a"};
  sh_expect_error(G.ctx, stof_sched_sample_perfect_tile(s, l[0], 0, 0, NULL, NULL, kn), STOF_ERR_SCHEDULE,
                  "sample_perfect_tile: 0 factors for loop i, must be 1..64");
  sh_expect_error(G.ctx, stof_sched_sample_perfect_tile(s, l[0], 65, 0, NULL, NULL, kn), STOF_ERR_SCHEDULE,
                  "65 factors for loop i");
  sh_expect_error(G.ctx, stof_sched_sample_perfect_tile(s, l[0], 2, -1, NULL, NULL, kn), STOF_ERR_SCHEDULE,
                  "max_innermost -1 for loop i must be >= 0");
  sh_expect_error(G.ctx, stof_sched_sample_perfect_tile(s, l[2], 1, 4, NULL, NULL, kn), STOF_ERR_SCHEDULE,
                  "loop k of extent 7 cannot be one factor of at most 4");
  sh_expect_error(G.ctx, stof_sched_sample_perfect_tile(s, l[0], 2, 0, bad, NULL, kn), STOF_ERR_SCHEDULE,
                  "factors {5, 2} (knobs i.tile0, i.tile1) do not multiply to the extent 12 of loop i");
  sh_expect_error(G.ctx, stof_sched_sample_perfect_tile(s, l[0], 2, 0, zero, NULL, kn), STOF_ERR_SCHEDULE,
                  "do not multiply to the extent 12");
  sh_expect_error(G.ctx, stof_sched_sample_perfect_tile(s, l[0], 2, 4, big, NULL, kn), STOF_ERR_SCHEDULE,
                  "innermost factor 6 (knob i.tile1) of loop i exceeds max_innermost 4");
  sh_expect_error(G.ctx, stof_sched_sample_perfect_tile(s, l[0], 2, 0, NULL, dup, kn), STOF_ERR_SCHEDULE,
                  "two knobs named a");
  sh_expect_error(G.ctx, stof_sched_sample_perfect_tile(s, 999, 2, 0, NULL, NULL, kn), STOF_ERR_ARG,
                  "sample_perfect_tile: no loop 999");
  sh_expect_same(s, &before);
  /* a loop never handed out, a loop split */
  stof_sched *f = sh_sched(&G);
  int b = sh_block(f, "C");
  (void)b;
  sh_expect_error(G.ctx, stof_sched_sample_perfect_tile(f, 0, 2, 0, NULL, NULL, kn), STOF_ERR_ARG,
                  "sample_perfect_tile: loop 0 (i) was never handed out");
  stof_sched_free(f);
  int p[2];
  sh_split(s, l[0], 4, p);
  sh_expect_error(G.ctx, stof_sched_sample_perfect_tile(s, l[0], 2, 0, NULL, NULL, kn), STOF_ERR_SCHEDULE,
                  "loop i was split");
  int64_t cand[1] = {1};
  SH_OK(G.ctx, stof_sched_knob(s, "j.tile1", 1, cand, 0, &kn[0]));
  SH_OK(G.ctx, stof_sched_sample_perfect_tile(s, l[1], 2, 0, NULL, NULL, kn));
  const char *name;
  SH_OK(G.ctx, stof_sched_knob_info(s, kn[1], &name, NULL, NULL, NULL));
  assert_string_equal(name, "j_1.tile1");
  stof_sched_free(s);
  sh_done(&G);
}

static void perfect_tile_json_reader_checks(void **state) {
  stof_ctx *ctx = sh_ctx();
  static const char head[] = "{\"format\":\"stof.trace\",\"version\":1,\"insts\":[{\"kind\":\"GetBlock\","
                             "\"name\":\"B\",\"outputs\":[0]},{\"kind\":\"GetLoops\",\"block\":0,\"outputs\":[1]},";
  static const struct {
    const char *inst, *msg;
  } cases[] = {
      {"{\"kind\":\"SamplePerfectTile\",\"loop\":0,\"n\":2,\"max_innermost\":0,\"extent\":8,\"decisions\":[2,4],"
       "\"names\":[\"a\",\"b\"],\"outputs\":[2,3]}", "instruction 2 (SamplePerfectTile): loop must be a loop value"},
      {"{\"kind\":\"SamplePerfectTile\",\"loop\":1,\"n\":0,\"max_innermost\":0,\"extent\":8,\"decisions\":[],"
       "\"names\":[],\"outputs\":[]}", "n must be an integer in 1..64"},
      {"{\"kind\":\"SamplePerfectTile\",\"loop\":1,\"n\":2,\"max_innermost\":-2,\"extent\":8,\"decisions\":[2,4],"
       "\"names\":[\"a\",\"b\"],\"outputs\":[2,3]}", "max_innermost must be an integer >= 0"},
      {"{\"kind\":\"SamplePerfectTile\",\"loop\":1,\"n\":2,\"max_innermost\":0,\"decisions\":[2,4],"
       "\"names\":[\"a\",\"b\"],\"outputs\":[2,3]}", "extent must be an integer in 1..2^31-1"},
      {"{\"kind\":\"SamplePerfectTile\",\"loop\":1,\"n\":3,\"max_innermost\":0,\"extent\":8,\"decisions\":[2,4],"
       "\"names\":[\"a\",\"b\"],\"outputs\":[2,3]}", "decisions must hold n factors"},
      {"{\"kind\":\"SamplePerfectTile\",\"loop\":1,\"n\":2,\"max_innermost\":0,\"extent\":8,\"decisions\":[2,4],"
       "\"names\":[\"a\"],\"outputs\":[2,3]}", "names must hold n knob names"},
      {"{\"kind\":\"SamplePerfectTile\",\"loop\":1,\"n\":2,\"max_innermost\":0,\"extent\":8,\"decisions\":[3,4],"
       "\"names\":[\"a\",\"b\"],\"outputs\":[2,3]}", "decisions must be divisors of the extent"},
      {"{\"kind\":\"SamplePerfectTile\",\"loop\":1,\"n\":2,\"max_innermost\":0,\"extent\":8,\"decisions\":[2,2],"
       "\"names\":[\"a\",\"b\"],\"outputs\":[2,3]}", "decisions must multiply to the extent"},
      {"{\"kind\":\"SamplePerfectTile\",\"loop\":1,\"n\":2,\"max_innermost\":2,\"extent\":8,\"decisions\":[2,4],"
       "\"names\":[\"a\",\"b\"],\"outputs\":[2,3]}", "the innermost exceeds max_innermost"},
      {"{\"kind\":\"SamplePerfectTile\",\"loop\":1,\"n\":2,\"max_innermost\":0,\"extent\":8,\"decisions\":[2,4],"
       "\"names\":[\"a\",\"\"],\"outputs\":[2,3]}", "names must be non-empty strings"},
      {"{\"kind\":\"SamplePerfectTile\",\"loop\":1,\"n\":2,\"max_innermost\":0,\"extent\":8,\"decisions\":[2,4],"
       "\"names\":[\"a\",\"b\"],\"outputs\":[2]}", "outputs: wrong number of values"},
      {"{\"kind\":\"SampleComputeLocation\",\"block\":0,\"name\":\"x\",\"candidates\":[0,1],\"decision\":0,"
       "\"outputs\":[2]}", "candidates must be -1 (the root), then loop depths"},
      {"{\"kind\":\"SampleComputeLocation\",\"block\":0,\"name\":\"x\",\"candidates\":[-1,0],\"decision\":2,"
       "\"outputs\":[2]}", "decision must index the candidates"},
      {"{\"kind\":\"SampleComputeLocation\",\"block\":1,\"name\":\"x\",\"candidates\":[-1],\"decision\":0,"
       "\"outputs\":[2]}", "block must be a block value"},
      {"{\"kind\":\"ComputeAt\",\"block\":0,\"loop\":{\"knob\":1}}", "loop.knob must be a knob value"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    char text[1024];
    snprintf(text, sizeof text, "%s%s]}", head, cases[i].inst);
    stof_trace *t = NULL;
    sh_expect_error(ctx, stof_trace_from_json(ctx, text, &t), STOF_ERR_PARSE, cases[i].msg);
    assert_null(t);
  }
  sh_ctx_done(ctx);
}

/* B = A * 2 computed by location knob under C's tiles: decisions -1 (root) .. deepest. */
static void compute_location_knob(void **state) {
  sh_graph G;
  sh_chain(&G, 37);
  stof_sched *s = sh_sched(&G);
  int l[1], p[2], bb = sh_block(s, "B"), kn, d, n;
  sh_loops(s, sh_block(s, "C"), l);
  sh_split(s, l[0], 8, p);
  stof_ctx_seed(G.ctx, 3);
  SH_OK(G.ctx, stof_sched_sample_compute_location(s, bb, 1, NULL, &kn));
  const char *name;
  SH_OK(G.ctx, stof_sched_knob_info(s, kn, &name, &n, &d, NULL));
  assert_string_equal(name, "B.location");
  assert_int_equal(n, 3); /* root, i.outer, i.inner */
  int64_t c;
  SH_OK(G.ctx, stof_sched_knob_candidate(s, kn, 0, &c));
  assert_int_equal(c, -1);
  SH_OK(G.ctx, stof_sched_compute_at_knob(s, bb, kn));
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
  char *lua = sh_trace_lua(s);
  assert_non_null(strstr(lua, "  local k5 = s:sample_compute_location(b0, 1, \"B.location\")\n"
                              "  s:compute_at(b0, k5)\n"));
  free(lua);
  /* the same as compute_at at the loop itself */
  stof_sched *direct = sh_sched(&G);
  int ld[1], pd[2];
  sh_loops(direct, sh_block(direct, "C"), ld);
  sh_split(direct, ld[0], 8, pd);
  SH_OK(G.ctx, stof_sched_compute_at(direct, sh_block(direct, "B"), pd[0]));
  char *want = sh_nest(direct);
  sh_expect_nest(s, want);
  free(want);
  stof_sched_free(direct);
  /* every decision replays to a legal schedule with the same numbers; root leaves B */
  stof_trace *t;
  SH_OK(G.ctx, stof_sched_trace(s, &t));
  for (int dec = 0; dec < 3; dec++) {
    SH_OK(G.ctx, stof_trace_set_decision(t, "B.location", dec));
    stof_sched *r;
    SH_OK(G.ctx, stof_sched_fresh(s, &r));
    SH_OK(G.ctx, stof_sched_replay(t, r));
    char *nest = sh_nest(r);
    assert_true((strstr(nest, "alloc B: float32[37]\n") != NULL) == (dec == 0));
    free(nest);
    sh_check_numeric(&G, r);
    stof_sched_free(r);
  }
  stof_trace_free(t);
  /* seeded: the same seed, the same location */
  int first = -1;
  for (int round = 0; round < 2; round++) {
    stof_ctx_seed(G.ctx, 17);
    stof_sched *r = sh_sched(&G);
    int lr[1], pr[2], k;
    sh_loops(r, sh_block(r, "C"), lr);
    sh_split(r, lr[0], 8, pr);
    SH_OK(G.ctx, stof_sched_sample_compute_location(r, sh_block(r, "B"), -1, NULL, &k));
    SH_OK(G.ctx, stof_sched_knob_info(r, k, NULL, NULL, &d, NULL));
    if (round == 0) first = d;
    assert_int_equal(d, first);
    stof_sched_free(r);
  }
  stof_sched_free(s);
  sh_done(&G);
}

static void compute_location_errors(void **state) {
  sh_graph G;
  sh_chain(&G, 16);
  stof_sched *s = sh_sched(&G);
  int bb = sh_block(s, "B"), bc = sh_block(s, "C"), kn, k2, n;
  /* an output has only the root */
  SH_OK(G.ctx, stof_sched_sample_compute_location(s, bc, -1, NULL, &kn));
  SH_OK(G.ctx, stof_sched_knob_info(s, kn, NULL, &n, NULL, NULL));
  assert_int_equal(n, 1);
  sh_snapshot before = sh_take(s);
  sh_expect_error(G.ctx, stof_sched_sample_compute_location(s, bb, 5, NULL, &k2), STOF_ERR_SCHEDULE,
                  "sample_compute_location B.location: decision 5 out of range (2 candidates)");
  sh_expect_error(G.ctx, stof_sched_sample_compute_location(s, bb, 0, "C.location", &k2), STOF_ERR_SCHEDULE,
                  "a knob named C.location exists already");
  sh_expect_error(G.ctx, stof_sched_sample_compute_location(s, 9, 0, NULL, &k2), STOF_ERR_ARG,
                  "sample_compute_location: no block 9");
  sh_expect_same(s, &before);
  int64_t cand[1] = {4};
  SH_OK(G.ctx, stof_sched_knob(s, "far", 1, cand, 0, &k2));
  sh_snapshot before2 = sh_take(s);
  sh_expect_error(G.ctx, stof_sched_compute_at_knob(s, bb, k2), STOF_ERR_SCHEDULE,
                  "compute_at: knob far = 4 names no location of block B (the nest of its consumer C has 1 loops)");
  sh_expect_error(G.ctx, stof_sched_compute_at_knob(s, bb, 77), STOF_ERR_ARG, "compute_at: no knob 77");
  sh_expect_same(s, &before2);
  stof_sched_free(s);
  sh_done(&G);
}

int run_sample_tests(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(perfect_tile_is_seeded),
      cmocka_unit_test(perfect_tile_multiplies_to_the_extent),
      cmocka_unit_test(split_by_sampled_knobs),
      cmocka_unit_test(perfect_tile_json_and_decisions),
      cmocka_unit_test(perfect_tile_errors_change_nothing),
      cmocka_unit_test(perfect_tile_json_reader_checks),
      cmocka_unit_test(compute_location_knob),
      cmocka_unit_test(compute_location_errors),
  };
  return cmocka_run_group_tests_name("sample", tests, NULL, NULL);
}
