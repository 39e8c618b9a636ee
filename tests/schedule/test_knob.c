/* Knobs and sample_categorical: a changed decision replayed gives the new loop nest with
 * the same numbers; samples come from the context's RNG and replay to the same decision. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

static stof_sched *tiled_by_knob(sh_graph *G, int decision) {
  stof_sched *s = sh_sched(G);
  int l[4], t[4], k;
  sh_loops(s, sh_block(s, "C"), l);
  int64_t cand[3] = {4, 8, 16};
  SH_OK(G->ctx, stof_sched_knob(s, "ti", 3, cand, decision, &k));
  SH_OK(G->ctx, stof_sched_tile(s, l[0], l[1], stof_factor_knob(k), stof_factor_const(8), t));
  SH_OK(G->ctx, stof_sched_vectorize(s, t[3]));
  return s;
}

static void knob_decision_replay_changes_the_nest(void **state) {
  sh_graph G;
  sh_matmul(&G, 37, 20, 16);
  stof_sched *s = tiled_by_knob(&G, 0);
  stof_trace *t;
  SH_OK(G.ctx, stof_sched_trace(s, &t));
  char *nests[3];
  const char *outer[3] = {"for i.outer in 0..10:\n", "for i.outer in 0..5:\n", "for i.outer in 0..3:\n"};
  const char *inner[3] = {"for i.inner in 0..4:\n", "for i.inner in 0..8:\n", "for i.inner in 0..16:\n"};
  for (int d = 0; d < 3; d++) {
    SH_OK(G.ctx, stof_trace_set_decision(t, "ti", d));
    stof_sched *r;
    SH_OK(G.ctx, stof_sched_fresh(s, &r));
    SH_OK(G.ctx, stof_sched_replay(t, r));
    nests[d] = sh_nest(r);
    assert_non_null(strstr(nests[d], outer[d]));
    assert_non_null(strstr(nests[d], inner[d]));
    /* replaying gives what building with that decision directly gives */
    stof_sched *direct = tiled_by_knob(&G, d);
    sh_expect_nest(direct, nests[d]);
    stof_sched_free(direct);
    int k;
    int64_t v;
    SH_OK(G.ctx, stof_sched_find_knob(r, "ti", &k));
    SH_OK(G.ctx, stof_sched_knob_info(r, k, NULL, NULL, NULL, &v));
    assert_int_equal(v, 4 << d);
    sh_check_numeric(&G, r);
    stof_sched_free(r);
  }
  assert_string_not_equal(nests[0], nests[1]);
  assert_string_not_equal(nests[1], nests[2]);
  for (int d = 0; d < 3; d++) free(nests[d]);
  sh_expect_error(G.ctx, stof_trace_set_decision(t, "ti", 3), STOF_ERR_ARG, "decision 3 for knob ti out of range");
  sh_expect_error(G.ctx, stof_trace_set_decision(t, "tj", 0), STOF_ERR_NOT_FOUND, "no knob named tj");
  stof_trace_free(t);
  stof_sched_free(s);
  sh_done(&G);
}

static void knob_info_and_lookup(void **state) {
  sh_graph G;
  sh_vec(&G, 8, STOF_DTYPE_F32);
  stof_sched *s = sh_sched(&G);
  int k;
  int64_t cand[4] = {1, 2, 4, 8}, v;
  SH_OK(G.ctx, stof_sched_knob(s, "u", 4, cand, 3, &k));
  const char *name;
  int n, d;
  SH_OK(G.ctx, stof_sched_knob_info(s, k, &name, &n, &d, &v));
  assert_string_equal(name, "u");
  assert_int_equal(n, 4);
  assert_int_equal(d, 3);
  assert_int_equal(v, 8);
  SH_OK(G.ctx, stof_sched_knob_candidate(s, k, 1, &v));
  assert_int_equal(v, 2);
  assert_int_equal(stof_sched_nknob(s), 1);
  int found;
  SH_OK(G.ctx, stof_sched_find_knob(s, "u", &found));
  assert_int_equal(found, k);
  sh_expect_error(G.ctx, stof_sched_find_knob(s, "w", &found), STOF_ERR_NOT_FOUND, "no knob named w");
  sh_expect_error(G.ctx, stof_sched_knob_candidate(s, k, 4, &v), STOF_ERR_ARG, "no candidate 4");
  stof_sched_free(s);
  sh_done(&G);
}

static void knob_errors(void **state) {
  sh_graph G;
  sh_vec(&G, 8, STOF_DTYPE_F32);
  stof_sched *s = sh_sched(&G);
  int k;
  int64_t cand[2] = {2, 0};
  double probs[2] = {0.5, 0.5};
  SH_OK(G.ctx, stof_sched_knob(s, "a", 2, cand, 0, &k));
  sh_expect_error(G.ctx, stof_sched_knob(s, "a", 2, cand, 0, &k), STOF_ERR_SCHEDULE, "knob: a knob named a exists already");
  sh_expect_error(G.ctx, stof_sched_knob(s, "b", 2, cand, 2, &k), STOF_ERR_SCHEDULE, "knob b: decision 2 out of range (2 candidates)");
  sh_expect_error(G.ctx, stof_sched_knob(s, "c", 0, cand, 0, &k), STOF_ERR_SCHEDULE, "knob c: no candidates");
  sh_expect_error(G.ctx, stof_sched_knob(s, "", 2, cand, 0, &k), STOF_ERR_SCHEDULE, "knob: the name is empty");
  double zero[2] = {0, 0}, neg[2] = {1, -1}, nan2[2] = {NAN, 1};
  sh_expect_error(G.ctx, stof_sched_sample_categorical(s, "d", 2, cand, zero, -1, &k), STOF_ERR_SCHEDULE, "probabilities are all 0");
  sh_expect_error(G.ctx, stof_sched_sample_categorical(s, "d", 2, cand, neg, -1, &k), STOF_ERR_SCHEDULE, "probability -1 of candidate 1");
  sh_expect_error(G.ctx, stof_sched_sample_categorical(s, "d", 2, cand, nan2, -1, &k), STOF_ERR_SCHEDULE, "of candidate 0 is not a finite number");
  sh_expect_error(G.ctx, stof_sched_sample_categorical(s, "d", 2, cand, NULL, -1, &k), STOF_ERR_SCHEDULE, "no probabilities");
  (void)probs;
  /* a knob whose value is 0 cannot split */
  int kz, l[4], p[2];
  SH_OK(G.ctx, stof_sched_knob(s, "z", 2, cand, 1, &kz));
  sh_loops(s, sh_block(s, "B"), l);
  stof_factor f[2] = {stof_factor_const(STOF_INFER), stof_factor_knob(kz)};
  sh_expect_error(G.ctx, stof_sched_split(s, l[0], 2, f, p), STOF_ERR_SCHEDULE, "split: factor 0 for loop i (knob z)");
  stof_factor bad[2] = {stof_factor_const(STOF_INFER), stof_factor_knob(99)};
  sh_expect_error(G.ctx, stof_sched_split(s, l[0], 2, bad, p), STOF_ERR_ARG, "split: no knob 99");
  stof_sched_free(s);
  sh_done(&G);
}

static void sample_categorical_is_seeded_and_replays(void **state) {
  sh_graph G;
  sh_vec(&G, 48, STOF_DTYPE_F32);
  int64_t cand[3] = {4, 8, 16};
  double probs[3] = {0.2, 0.3, 0.5};
  int first = -1;
  for (int round = 0; round < 2; round++) { /* the same seed gives the same decision */
    stof_ctx_seed(G.ctx, 42);
    stof_sched *s = sh_sched(&G);
    int k, d;
    SH_OK(G.ctx, stof_sched_sample_categorical(s, "v", 3, cand, probs, -1, &k));
    SH_OK(G.ctx, stof_sched_knob_info(s, k, NULL, NULL, &d, NULL));
    if (round == 0) first = d;
    assert_int_equal(d, first);
    stof_sched_free(s);
  }
  /* every candidate with a probability comes up; none without */
  double skew[3] = {0.5, 0, 0.5};
  int seen[3] = {0, 0, 0};
  stof_sched *s = sh_sched(&G);
  for (int i = 0; i < 64; i++) {
    char name[16];
    int k, d;
    snprintf(name, sizeof name, "s%d", i);
    SH_OK(G.ctx, stof_sched_sample_categorical(s, name, 3, cand, skew, -1, &k));
    SH_OK(G.ctx, stof_sched_knob_info(s, k, NULL, NULL, &d, NULL));
    seen[d]++;
  }
  assert_true(seen[0] > 0 && seen[2] > 0);
  assert_int_equal(seen[1], 0);
  stof_sched_free(s);
  /* the decision is recorded: a replay under another seed reproduces it */
  stof_ctx_seed(G.ctx, 7);
  s = sh_sched(&G);
  int k, l[4], p[2], d;
  SH_OK(G.ctx, stof_sched_sample_categorical(s, "v", 3, cand, probs, 2, &k));
  sh_loops(s, sh_block(s, "B"), l);
  stof_factor f[2] = {stof_factor_const(STOF_INFER), stof_factor_knob(k)};
  SH_OK(G.ctx, stof_sched_split(s, l[0], 2, f, p));
  sh_check_all(&G, s,
               "for i.outer in 0..3:\n"
               "  for i.inner in 0..16:\n"
               "    let i = i.outer * 16 + i.inner\n"
               "    B[i] = (A[i] * 3.0) - 1.0\n");
  char *lua = sh_trace_lua(s);
  assert_non_null(strstr(lua, "  local k0 = s:sample_categorical(\"v\", {4, 8, 16}, {0.2, 0.3, 0.5}, 2)\n"));
  free(lua);
  stof_trace *t;
  SH_OK(G.ctx, stof_sched_trace(s, &t));
  stof_ctx_seed(G.ctx, 12345);
  stof_sched *r;
  SH_OK(G.ctx, stof_sched_fresh(s, &r));
  SH_OK(G.ctx, stof_sched_replay(t, r));
  SH_OK(G.ctx, stof_sched_find_knob(r, "v", &k));
  SH_OK(G.ctx, stof_sched_knob_info(r, k, NULL, NULL, &d, NULL));
  assert_int_equal(d, 2);
  stof_trace_free(t);
  stof_sched_free(r);
  stof_sched_free(s);
  sh_done(&G);
}

int run_knob_tests(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(knob_decision_replay_changes_the_nest),
      cmocka_unit_test(knob_info_and_lookup),
      cmocka_unit_test(knob_errors),
      cmocka_unit_test(sample_categorical_is_seeded_and_replays),
  };
  return cmocka_run_group_tests_name("knob", tests, NULL, NULL);
}
