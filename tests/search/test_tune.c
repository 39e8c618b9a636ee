/*
 * test_tune: the two-stage search (search/tune.c) on the C backend, with real measurements:
 * a small MLP block (GEMM + bias + tanh GELU, GEMM + bias, residual, layer norm; float32).
 * The tuned plan must match the interpreter; every measured candidate must be a record;
 * the budget holds; a second search of the same workload loads its best record without
 * measuring; a template that computes a wrong value is rejected by the check and never
 * chosen; a candidate whose compiler fails is recorded and the search goes on; two
 * processes tuning into one database lose no record; bad options are refused.
 */
#include "../exec/graphs.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <stof/exec.h>
#include <stof/search.h>

int run_tune_tests(void);

typedef struct mlp {
  tu_heap heap;
  stof_ctx *ctx;
  stof_graph *g;
  const stof_op *out;
  int nfeed;
  const stof_op *ph[8];
  stof_tensor *t[8];
  char dir[64], db[96];
} mlp;

static const stof_op *ph(mlp *m, const char *name, int ndim, const int64_t *shape) {
  const stof_op *p = tu_ph(m->g, name, STOF_DTYPE_F32, ndim, shape);
  m->ph[m->nfeed] = p;
  TU_OK(m->ctx, stof_tensor_rand(m->ctx, STOF_DTYPE_F32, ndim, shape, 77 + (uint64_t)m->nfeed, &m->t[m->nfeed]));
  m->nfeed++;
  return p;
}

/* x [R, E] -> gelu(x w1^T + b1) w2^T + b2 + x -> layer norm; weights [out, in] as torch's. */
static void mlp_new(mlp *m, int64_t R, int64_t E, int64_t F) {
  memset(m, 0, sizeof *m);
  m->ctx = tu_ctx_new(&m->heap);
  TU_OK(m->ctx, stof_graph_new(m->ctx, &m->g));
  const stof_op *x = ph(m, "x", 2, TU_SHAPE(R, E));
  const stof_op *w1 = ph(m, "w1", 2, TU_SHAPE(F, E)), *b1 = ph(m, "b1", 1, TU_SHAPE(F));
  const stof_op *w2 = ph(m, "w2", 2, TU_SHAPE(E, F)), *b2 = ph(m, "b2", 1, TU_SHAPE(E));
  const stof_op *gamma = ph(m, "gamma", 1, TU_SHAPE(E)), *beta = ph(m, "beta", 1, TU_SHAPE(E));
  const stof_op *h = act(m->g, "fc1.gelu", ACT_GELU_TANH, bias_add(m->g, "fc1.bias", gemm(m->g, "fc1", x, w1, 1), b1));
  const stof_op *y = residual_add(m->g, "res", bias_add(m->g, "fc2.bias", gemm(m->g, "fc2", h, w2, 1), b2), x);
  m->out = layer_norm(m->g, "ln", y, gamma, beta);
  /* a cache of compiled code of our own: a candidate's compile really happens here */
  snprintf(m->dir, sizeof m->dir, "/tmp/stof-tune-XXXXXX");
  assert_non_null(mkdtemp(m->dir));
  setenv("STOF_CACHE_DIR", m->dir, 1);
  snprintf(m->db, sizeof m->db, "%s/tune.jsonl", m->dir);
}

static void mlp_free(mlp *m) {
  for (int i = 0; i < m->nfeed; i++) stof_tensor_free(m->t[i]);
  stof_graph_free(m->g);
  tu_ctx_free(m->ctx, &m->heap);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", m->dir);
  assert_int_equal(system(cmd), 0);
}

static stof_tune_opts opts_of(mlp *m, stof_db *db) {
  stof_tune_opts o = {0};
  o.plan.target = "c";
  o.workload = "mlp";
  o.db = db;
  o.nfeed = m->nfeed;
  o.feed_ops = m->ph;
  o.feed = (const stof_tensor *const *)m->t;
  o.reps = 5;
  o.warmup = 1;
  o.seed = 3;
  o.verbose = getenv("STOF_TEST_VERBOSE") != NULL; /* the progress bar, for a reader */
  return o;
}

/* The plan's output against the interpreter (the plan is run with its memory poisoned). */
static void expect_correct(mlp *m, stof_plan *p) {
  TU_OK(m->ctx, stof_plan_poison(p));
  TU_OK(m->ctx, stof_plan_run(p));
  stof_tensor *got = NULL, *want = NULL;
  TU_OK(m->ctx, stof_plan_output(p, 0, &got));
  TU_OK(m->ctx, stof_interp_eval(m->g, 1, &m->out, m->nfeed, m->ph, (const stof_tensor *const *)m->t, &want));
  double e = INFINITY;
  TU_OK(m->ctx, stof_tensor_rel_l2(got, want, &e));
  if (!(e < 1e-5)) fail_msg("tuned plan: relative L2 error %g against the interpreter", e);
  stof_tensor_free(got);
  stof_tensor_free(want);
}

/* Records of the workload; *nstatus[s] counts them by status; *uses counts OK records
 * whose knobs name "@tmpl" (tmpl NULL: none), *uses_bad those with another status. */
static int count_records(stof_db *db, const char *workload, int *nstatus, const char *tmpl, int *uses, int *uses_bad) {
  int n = 0;
  if (uses) *uses = 0;
  if (uses_bad) *uses_bad = 0;
  if (nstatus) memset(nstatus, 0, sizeof(int) * STOF_STATUS_COUNT);
  for (int i = 0; i < stof_db_count(db); i++) {
    stof_db_record r;
    assert_int_equal(stof_db_get(db, i, &r), STOF_OK);
    if (strcmp(r.workload, workload)) continue;
    n++;
    assert_string_equal(r.device, "cpu");
    if (nstatus) nstatus[r.status]++;
    for (int k = 0; tmpl && k < r.nknob; k++) {
      const char *at = strchr(r.knob_name[k], '@');
      if (at && !strcmp(at + 1, tmpl)) {
        if (r.status == STOF_OK && uses) (*uses)++;
        if (r.status != STOF_OK && uses_bad) (*uses_bad)++;
      }
    }
  }
  return n;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void tune_finds_a_correct_plan_records_everything_and_resumes(void **state) {
  (void)state;
  mlp m;
  mlp_new(&m, 64, 64, 128);
  stof_db *db = NULL;
  TU_OK(m.ctx, stof_db_open(m.ctx, m.db, &db));
  stof_tune_opts o = opts_of(&m, db);
  o.budget_s = 6;
  stof_plan *p = NULL;
  stof_tune_result r;
  TU_OK(m.ctx, stof_tune(m.g, 1, &m.out, &o, &p, &r));
  assert_non_null(p);
  assert_false(r.from_db);
  /* the budget holds (a candidate under way finishes: a few seconds of slack) */
  assert_true(r.seconds < o.budget_s + 4);
  assert_true(r.trials >= 3);
  assert_true(r.default_ms > 0 && r.best_ms > 0 && r.best_ms <= r.default_ms);
  assert_true(r.stage1_ms >= r.best_ms && r.stage1_ms <= r.default_ms);
  assert_non_null(strstr(r.workload, "mlp/c/"));
  assert_true(r.compiled > 0); /* stage 1's schemes compiled ahead, in parallel */
  expect_correct(&m, p);
  /* every candidate is a record, and stage 1 tried other schemes than the default */
  int nst[STOF_STATUS_COUNT];
  assert_int_equal(count_records(db, r.workload, nst, NULL, NULL, NULL), r.trials);
  assert_int_equal(nst[STOF_OK] + nst[STOF_ERR_CHECK] + r.failed, r.trials);
  int other_scheme = 0;
  stof_db_record first;
  assert_int_equal(stof_db_get(db, 0, &first), STOF_OK);
  for (int i = 1; i < stof_db_count(db); i++) {
    stof_db_record rec;
    assert_int_equal(stof_db_get(db, i, &rec), STOF_OK);
    other_scheme |= strcmp(rec.scheme, first.scheme) != 0;
  }
  assert_true(other_scheme);
  int best = -1;
  TU_OK(m.ctx, stof_db_best(db, r.workload, "cpu", &best));
  stof_plan_free(p);
  /* the same workload again: its best record, no measurement, well under a second */
  double t0 = now_s();
  stof_tune_result r2;
  p = NULL;
  TU_OK(m.ctx, stof_tune(m.g, 1, &m.out, &o, &p, &r2));
  double took = now_s() - t0;
  assert_true(r2.from_db);
  assert_int_equal(r2.trials, 0);
  assert_true(took < 1.0);
  assert_int_equal(count_records(db, r.workload, NULL, NULL, NULL, NULL), r.trials);
  stof_db_record rb;
  assert_int_equal(stof_db_get(db, best, &rb), STOF_OK);
  assert_true(fabs(r2.best_ms - rb.median_ms) < 1e-9);
  expect_correct(&m, p);
  stof_plan_free(p);
  /* a best record that no longer fits (a knob its template does not make; a template this
   * search does not have; a scheme with an entry too many), faster than anything: each is
   * noted and ignored, and the search runs as if it were not there (review: the knobs it
   * had set stayed in the configuration and broke the default plan) */
  {
    stof_db_record bad = rb;
    static const char *const nm1[2] = {"s0@auto", "s0.no_such_knob"}, *const nm2[1] = {"s0@no_such_template"};
    static const int64_t val[2] = {0, 3};
    double fast = rb.median_ms;
    char longer[4096];
    snprintf(longer, sizeof longer, "%s 0", rb.scheme);
    for (int v = 0; v < 3; v++) {
      bad.nknob = v == 0 ? 2 : v == 1 ? 1 : 0;
      bad.knob_name = v == 0 ? nm1 : nm2;
      bad.knob_value = val;
      bad.scheme = v == 2 ? longer : rb.scheme;
      fast /= 100; /* each the best in turn */
      bad.ntime = 1;
      bad.time_ms = &fast;
      bad.status = STOF_OK;
      bad.message = NULL;
      TU_OK(m.ctx, stof_db_append(db, &bad));
      o.max_trials = 2;
      TU_OK(m.ctx, stof_tune(m.g, 1, &m.out, &o, &p, &r2));
      assert_false(r2.from_db);
      assert_true(r2.trials >= 1);
      expect_correct(&m, p);
      stof_plan_free(p);
    }
    o.max_trials = 0;
  }
  int nrec = count_records(db, r.workload, NULL, NULL, NULL, NULL);
  /* force: searched again, within a trial budget (it may converge before the limit) */
  o.force = 1;
  o.max_trials = 4;
  TU_OK(m.ctx, stof_tune(m.g, 1, &m.out, &o, &p, &r2));
  assert_false(r2.from_db);
  assert_true(r2.trials >= 1 && r2.trials <= 4);
  assert_int_equal(count_records(db, r.workload, NULL, NULL, NULL, NULL), nrec + r2.trials);
  stof_plan_free(p);
  stof_db_free(db);
  mlp_free(&m);
}

/* ---------------------------------------------------------------- bad templates */

static stof_status auto_sched(void *ud, const stof_plan_seg_req *r, stof_sched *s) {
  (void)ud;
  return stof_sched_auto(s, r->target, NULL);
}

static int matches_layer_norm(void *ud, const stof_plan_seg_req *r) {
  (void)ud;
  return strstr(r->name, "layer_norm") != NULL;
}

/* Tunes m with the one user template tpl (stage 2 only, at most 10 candidates): the
 * template is tried once on its segment, fails there with status (its record's message
 * holding why), is dropped, and the plan returned is correct. *res gets the figures. */
static void expect_dropped(mlp *m, const stof_template *tpl, const char *inject, stof_status status, const char *why,
                           stof_tune_result *res) {
  stof_db *db = NULL;
  TU_OK(m->ctx, stof_db_open(m->ctx, m->db, &db));
  stof_tune_opts o = opts_of(m, db);
  o.budget_s = 20;
  o.max_trials = 10;
  o.skip_stage1 = 1;
  o.ntemplate = 1;
  o.templates = tpl;
  o.inject_wrong = inject;
  stof_plan *p = NULL;
  TU_OK(m->ctx, stof_tune(m->g, 1, &m->out, &o, &p, res));
  int nst[STOF_STATUS_COUNT], ok_uses = 0, bad_uses = 0;
  count_records(db, res->workload, nst, tpl->name, &ok_uses, &bad_uses);
  assert_int_equal(nst[status], 1);
  assert_int_equal(bad_uses, 1);
  assert_int_equal(ok_uses, 0);
  for (int i = 0; i < stof_db_count(db); i++) {
    stof_db_record rec;
    assert_int_equal(stof_db_get(db, i, &rec), STOF_OK);
    if (rec.status == status) {
      assert_non_null(rec.message);
      if (!strstr(rec.message, why)) fail_msg("record %d: message \"%s\" lacks \"%s\"", i, rec.message, why);
    }
  }
  expect_correct(m, p);
  stof_plan_free(p);
  stof_db_free(db);
}

static void tune_rejects_a_wrong_candidate(void **state) {
  (void)state;
  mlp m;
  mlp_new(&m, 32, 32, 64);
  stof_template wrong = {"wrong", matches_layer_norm, auto_sched, NULL};
  stof_tune_result r;
  expect_dropped(&m, &wrong, "wrong", STOF_ERR_CHECK, "relative L2 error", &r);
  assert_int_equal(r.rejected, 1);
  mlp_free(&m);
}

/* The search with one template named name, its candidates made slow by injection
 * (inject_slow: timed 10x; hang: their first run abandoned at once): each is recorded,
 * counted as cut (and abandoned), recorded at over 3x the best (abandoned: at least 6x, with
 * a message saying so), and the plan returned does not use it. */
static void expect_cut(const char *name, int hang) {
  mlp m;
  mlp_new(&m, 32, 32, 64);
  stof_db *db = NULL;
  TU_OK(m.ctx, stof_db_open(m.ctx, m.db, &db));
  stof_template slow = {name, matches_layer_norm, auto_sched, NULL};
  stof_tune_opts o = opts_of(&m, db);
  o.budget_s = 20;
  o.max_trials = 10;
  o.skip_stage1 = 1;
  o.ntemplate = 1;
  o.templates = &slow;
  if (hang) o.inject_hang = name;
  else o.inject_slow = name;
  stof_plan *p = NULL;
  stof_tune_result r;
  TU_OK(m.ctx, stof_tune(m.g, 1, &m.out, &o, &p, &r));
  int nst[STOF_STATUS_COUNT], uses = 0, bad = 0;
  count_records(db, r.workload, nst, name, &uses, &bad);
  assert_true(uses >= 1);
  assert_int_equal(bad, 0);
  assert_int_equal(r.cut_slow, uses); /* every one of them cut */
  assert_int_equal(r.abandoned, hang ? uses : 0);
  char at[64];
  snprintf(at, sizeof at, "@%s", name);
  for (int i = 0; i < stof_db_count(db); i++) {
    stof_db_record rec;
    assert_int_equal(stof_db_get(db, i, &rec), STOF_OK);
    for (int k = 0; k < rec.nknob; k++) {
      if (!strstr(rec.knob_name[k], at)) continue;
      assert_true(rec.median_ms > 3 * r.best_ms);
      if (hang) {
        assert_true(rec.median_ms >= 2 * 3 * r.best_ms * 0.999);
        assert_non_null(rec.message);
        assert_non_null(strstr(rec.message, "abandoned"));
      }
    }
  }
  expect_correct(&m, p);
  stof_plan_free(p);
  stof_db_free(db);
  mlp_free(&m);
}

/* A candidate far slower than the best (timed 10x by injection) is timed twice only. */
static void tune_times_a_slow_candidate_once(void **state) {
  (void)state;
  expect_cut("slow", 0);
}

/* A candidate whose first run is abandoned (a hang, by injection: its run segment by segment
 * stops at once) costs no full run. */
static void tune_abandons_a_hanging_candidate(void **state) {
  (void)state;
  expect_cut("hang", 1);
}

/* A template whose segment cannot be compiled: it schedules as auto plus an annotation that
 * the C source carries (as a comment), and the test's C compiler, a wrapper around cc,
 * refuses any source that holds it. */
static stof_status nocc_sched(void *ud, const stof_plan_seg_req *r, stof_sched *s) {
  (void)ud;
  stof_status st = stof_sched_auto(s, r->target, NULL);
  if (st) return st;
  int blk = 0;
  if ((st = stof_sched_get_block(s, "ln", &blk))) return st;
  return stof_sched_annotate_block(s, blk, "pragma", "tune-test-no-compiler");
}

static void tune_survives_a_candidate_that_fails_to_compile(void **state) {
  (void)state;
  mlp m;
  mlp_new(&m, 32, 32, 64);
  char cc[128], saved[256] = "";
  if (getenv("CC")) snprintf(saved, sizeof saved, "%s", getenv("CC"));
  snprintf(cc, sizeof cc, "%s/cc.sh", m.dir);
  FILE *f = fopen(cc, "w");
  assert_non_null(f);
  fprintf(f, "#!/bin/sh\nfor a; do case $a in *.c) src=$a;; esac; done\n"
             "if grep -q tune-test-no-compiler \"$src\"; then echo \"cc.sh: refused $src\"; exit 1; fi\n"
             "exec %s \"$@\"\n", saved[0] ? saved : "cc");
  fclose(f);
  assert_int_equal(chmod(cc, 0755), 0);
  setenv("CC", cc, 1);
  stof_template nocc = {"nocc", matches_layer_norm, nocc_sched, NULL};
  stof_tune_result r;
  expect_dropped(&m, &nocc, NULL, STOF_ERR_COMPILE, "cc.sh: refused", &r);
  assert_int_equal(r.failed, 1);
  if (saved[0]) setenv("CC", saved, 1);
  else unsetenv("CC");
  mlp_free(&m);
}

/* ---------------------------------------------------------------- two processes */

static void two_processes_tuning_into_one_database_lose_nothing(void **state) {
  (void)state;
  mlp m;
  mlp_new(&m, 32, 32, 64);
  enum { NPROC = 2, TRIALS = 6 };
  pid_t pid[NPROC];
  for (int k = 0; k < NPROC; k++) {
    pid[k] = fork();
    assert_true(pid[k] >= 0);
    if (pid[k] == 0) {
      stof_db *db = NULL;
      int code = 10;
      if (stof_db_open(m.ctx, m.db, &db) == STOF_OK) {
        stof_tune_opts o = opts_of(&m, db);
        o.max_trials = TRIALS;
        o.force = 1;
        o.seed = 11 + (uint64_t)k;
        stof_plan *p = NULL;
        stof_tune_result r;
        if (stof_tune(m.g, 1, &m.out, &o, &p, &r) == STOF_OK) code = r.trials;
        stof_plan_free(p);
        stof_db_free(db);
      }
      _exit(code);
    }
  }
  int total = 0;
  for (int k = 0; k < NPROC; k++) {
    int status = 0;
    assert_int_equal(waitpid(pid[k], &status, 0), pid[k]);
    assert_true(WIFEXITED(status));
    int trials = WEXITSTATUS(status); /* the search may converge before its trial limit */
    if (trials < 2 || trials > TRIALS) fail_msg("child %d: %d trials (10: it failed)", k, trials);
    total += trials;
  }
  stof_db *db = NULL;
  TU_OK(m.ctx, stof_db_open(m.ctx, m.db, &db));
  assert_int_equal(stof_db_count(db), total);
  assert_int_equal(stof_db_nskipped(db), 0);
  stof_db_free(db);
  mlp_free(&m);
}

/* ---------------------------------------------------------------- errors */

static void bad_options_are_refused(void **state) {
  (void)state;
  mlp m;
  mlp_new(&m, 8, 8, 16);
  stof_plan *p = NULL;
  stof_tune_opts o = opts_of(&m, NULL);
  stof_template t = {"a@b", NULL, auto_sched, NULL};
  o.ntemplate = 1;
  o.templates = &t;
  TU_ERR(m.ctx, stof_tune(m.g, 1, &m.out, &o, &p, NULL), STOF_ERR_ARG, "no '@' or '.'");
  t.name = "auto";
  TU_ERR(m.ctx, stof_tune(m.g, 1, &m.out, &o, &p, NULL), STOF_ERR_ARG, "taken by a built-in");
  stof_template two[2] = {{"x", NULL, auto_sched, NULL}, {"x", NULL, auto_sched, NULL}};
  o.templates = two;
  o.ntemplate = 2;
  TU_ERR(m.ctx, stof_tune(m.g, 1, &m.out, &o, &p, NULL), STOF_ERR_ARG, "two templates named x");
  o.ntemplate = 0;
  o.nfeed = 3; /* the weights of fc2 and the layer norm missing */
  TU_ERR(m.ctx, stof_tune(m.g, 1, &m.out, &o, &p, NULL), STOF_ERR_ARG, "no input given for placeholder");
  TU_ERR(m.ctx, stof_tune(m.g, 1, &m.out, NULL, &p, NULL), STOF_ERR_ARG, "the feed is required");
  assert_null(p);
  mlp_free(&m);
}

/* Allocations of a whole search failing one at a time (every k-th of a run's, k chosen for
 * about 150 runs): STOF_ERR_NOMEM, or a correct plan when only a candidate failed; nothing
 * leaked either way. */
static void tune_allocation_failures_are_clean(void **state) {
  (void)state;
  mlp m;
  mlp_new(&m, 8, 8, 16);
  stof_tune_opts o = opts_of(&m, NULL);
  o.max_trials = 4;
  o.reps = 1;
  o.warmup = 1;
  o.threads = 1;
  stof_plan *p = NULL;
  stof_tune_result r;
  TU_OK(m.ctx, stof_tune(m.g, 1, &m.out, &o, &p, &r)); /* warms the caches, counts */
  stof_plan_free(p);
  size_t base = stof_ctx_bytes_in_use(m.ctx);
  m.heap.nalloc = 0;
  TU_OK(m.ctx, stof_tune(m.g, 1, &m.out, &o, &p, &r));
  long total = m.heap.nalloc;
  stof_plan_free(p);
  assert_int_equal(stof_ctx_bytes_in_use(m.ctx), base);
  long step = total / 150 > 1 ? total / 150 : 1;
  int nomem = 0, absorbed = 0;
  for (long n = 1; n <= total; n += step) {
    m.heap.nalloc = 0;
    m.heap.failed = 0;
    m.heap.fail_at = n;
    p = NULL;
    stof_status st = stof_tune(m.g, 1, &m.out, &o, &p, &r);
    m.heap.fail_at = 0;
    if (st == STOF_OK) {
      assert_non_null(p);
      expect_correct(&m, p);
      stof_plan_free(p);
      absorbed += m.heap.failed;
    } else {
      assert_true(m.heap.failed);
      assert_int_equal(st, STOF_ERR_NOMEM);
      assert_null(p);
      stof_ctx_clear_error(m.ctx);
      nomem++;
    }
    if (stof_ctx_bytes_in_use(m.ctx) != base)
      fail_msg("allocation %ld failing: %zu bytes left in use (%zu before)", n, stof_ctx_bytes_in_use(m.ctx), base);
  }
  print_message("  %ld allocations per search; every %ld-th failed in turn: %d searches said out of memory, %d absorbed it\n",
                total, step, nomem, absorbed);
  assert_true(nomem > 0);
  assert_false(m.heap.bad_size);
  mlp_free(&m);
}

int run_tune_tests(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(tune_finds_a_correct_plan_records_everything_and_resumes),
      cmocka_unit_test(tune_rejects_a_wrong_candidate),
      cmocka_unit_test(tune_times_a_slow_candidate_once),
      cmocka_unit_test(tune_abandons_a_hanging_candidate),
      cmocka_unit_test(tune_survives_a_candidate_that_fails_to_compile),
      cmocka_unit_test(two_processes_tuning_into_one_database_lose_nothing),
      cmocka_unit_test(bad_options_are_refused),
      cmocka_unit_test(tune_allocation_failures_are_clean),
  };
  return cmocka_run_group_tests_name("tune", tests, NULL, NULL);
}
