/*
 * test_schedule_gpu (CTest label gpu): every schedule of the CUDA test table
 * (tests/schedule/cuda_cases.c, which test_schedule compiles with NVRTC) built with
 * stof_build(..., "cuda") and run on the GPU against the reference interpreter, one test per
 * case ("matches/<case>"). Inputs are random and never zero (magnitudes in [0.1, 1), either
 * sign), outputs are poisoned with NaN before the run; each output must be within
 * sh_tolerance of its dtype (the C backend's tolerance) in relative L2, and every element
 * within that tolerance times max(1, the largest |reference|), so neither an unwritten
 * element nor one wrong row hides. stof_func_time is exercised on one schedule (a positive,
 * finite mean; the outputs hold a correct result after it) and on its argument checks.
 *
 * Without a GPU (stof_cuda_init says STOF_ERR_NO_DEVICE) every test skips and the
 * executable passes; with one, any build error or mismatch fails its test (a driver that is
 * present but broken fails too). Adding a schedule to the table adds a test here.
 * STOF_TEST_CASES="gemm_*,rowsum_allreduce" runs only the cases it names (fnmatch patterns).
 */
#include <fnmatch.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_cases.h"

static stof_status gpu_status = STOF_OK;
static char gpu_why[512];

/* Skips the test without a GPU; fails it when the driver is there but broken. */
static void need_gpu(void) {
  if (gpu_status == STOF_ERR_NO_DEVICE) skip();
  if (gpu_status != STOF_OK) fail_msg("CUDA init: %s: %s", stof_status_name(gpu_status), gpu_why);
}

/* ---------------------------------------------------------------- tensors */

static uint64_t splitmix(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* A CPU tensor of op's dtype and shape, values +-[0.1, 1) (never 0, in any dtype). */
static stof_tensor *nonzero_rand(stof_ctx *ctx, const stof_op *op, uint64_t seed) {
  stof_tensor *t;
  SH_OK(ctx, stof_tensor_new(ctx, op->dtype, op->ndim, op->shape, STOF_DEVICE_CPU, &t));
  for (int64_t i = 0; i < stof_tensor_numel(t); i++) {
    uint64_t r = splitmix(&seed);
    double u = (double)(r >> 11) * 0x1.0p-53;
    stof_tensor_store(t, i, (r & 1 ? -1 : 1) * (0.1 + 0.9 * u));
  }
  return t;
}

static stof_tensor *to_device(stof_ctx *ctx, const stof_tensor *t, stof_device d) {
  stof_tensor *r;
  SH_OK(ctx, stof_tensor_to(t, d, &r));
  return r;
}

/* Fails unless got (CPU) matches want within the output's tolerance; prints one line. */
static void expect_close(const char *name, const stof_op *out, const stof_tensor *got,
                         const stof_tensor *want, stof_ctx *ctx) {
  double tol = sh_tolerance(out->dtype), err = 0, wmax = 0, emax = 0;
  SH_OK(ctx, stof_tensor_rel_l2(got, want, &err));
  int64_t n = stof_tensor_numel(want), bad = 0, first = -1;
  for (int64_t i = 0; i < n; i++) wmax = fmax(wmax, fabs(stof_tensor_load(want, i)));
  double bound = tol * fmax(1.0, wmax);
  for (int64_t i = 0; i < n; i++) {
    double g = stof_tensor_load(got, i), w = stof_tensor_load(want, i), e = fabs(g - w);
    if (!(e <= bound)) {
      if (bad++ < 5)
        print_message("  %s: %s[%lld] = %.9g, the interpreter's %.9g\n", name, out->name, (long long)i, g, w);
      if (first < 0) first = i;
    }
    if (e > emax || isnan(e)) emax = isnan(e) ? NAN : e;
  }
  print_message("  %-32s %-4s %s: relative L2 %.3g, max |error| %.3g (tolerance %.3g, per element %.3g)\n", name,
                out->name, stof_dtype_name(out->dtype), err, emax, tol, bound);
  if (bad || !(err <= tol))
    fail_msg("%s: output %s: %lld of %lld elements off (first at %lld), relative L2 %g (tolerance %g)", name,
             out->name, (long long)bad, (long long)n, (long long)first, err, tol);
}

/* ---------------------------------------------------------------- a run */

/* Builds s for CUDA, runs it (a call, or stof_func_time with reps when reps > 0: *ms gets
 * the mean) on random inputs with NaN-poisoned outputs, and checks every output against the
 * interpreter on the same inputs. */
static void run_and_check(const char *name, sh_graph *G, stof_sched *s, uint64_t seed, int reps,
                          double *ms) {
  stof_ctx *ctx = G->ctx;
  const stof_op *args[16];
  int n = sh_args(G, args);
  stof_func *f = NULL;
  stof_status st = stof_build(s, n, args, "cuda", &f);
  if (st) fail_msg("%s: build: %s: %s", name, stof_status_name(st), stof_ctx_message(ctx));
  stof_tensor *in[8], *want[8], *dev[16];
  for (int i = 0; i < G->nin; i++) {
    in[i] = nonzero_rand(ctx, G->in[i], seed * 1000 + (uint64_t)i);
    dev[i] = to_device(ctx, in[i], STOF_DEVICE_CUDA);
  }
  SH_OK(ctx, stof_interp_eval(G->g, G->nout, G->out, G->nin, G->in, (const stof_tensor *const *)in, want));
  for (int i = 0; i < G->nout; i++) {
    stof_tensor *poison = NULL;
    SH_OK(ctx, stof_tensor_new(ctx, G->out[i]->dtype, G->out[i]->ndim, G->out[i]->shape, STOF_DEVICE_CPU, &poison));
    stof_tensor_fill(poison, NAN);
    dev[G->nin + i] = to_device(ctx, poison, STOF_DEVICE_CUDA);
    stof_tensor_free(poison);
  }
  if (reps > 0)
    st = stof_func_time(f, n, dev, reps, 2, ms);
  else
    st = stof_func_call(f, n, dev);
  if (st) fail_msg("%s: %s: %s: %s", name, reps > 0 ? "time" : "call", stof_status_name(st), stof_ctx_message(ctx));
  for (int i = 0; i < G->nout; i++) {
    stof_tensor *got = to_device(ctx, dev[G->nin + i], STOF_DEVICE_CPU);
    expect_close(name, G->out[i], got, want[i], ctx);
    stof_tensor_free(got);
  }
  for (int i = 0; i < G->nin; i++) stof_tensor_free(in[i]);
  for (int i = 0; i < G->nout; i++) stof_tensor_free(want[i]);
  for (int i = 0; i < n; i++) stof_tensor_free(dev[i]);
  stof_func_free(f);
}

/* ---------------------------------------------------------------- tests */

static void case_matches_interpreter(void **state) {
  const sh_cuda_case *c = *state;
  need_gpu();
  sh_graph G;
  stof_sched *s = c->make(&G);
  run_and_check(c->name, &G, s, 1, 0, NULL);
  stof_sched_free(s);
  sh_done(&G);
}

/* stof_func_time on the tiled matmul: a positive, finite mean, and the outputs it leaves
 * are right; then its argument checks on a CUDA build. */
static void time_gives_a_positive_mean(void **state) {
  (void)state;
  need_gpu();
  sh_graph G;
  const sh_cuda_case *c = sh_cuda_case_find("tiled_matmul_bound");
  stof_sched *s = c->make(&G);
  double ms = -1;
  run_and_check(c->name, &G, s, 2, 20, &ms);
  print_message("  %s: %.4f ms per call (mean of 20)\n", c->name, ms);
  assert_true(ms > 0 && isfinite(ms));

  const stof_op *args[16];
  int n = sh_args(&G, args);
  stof_func *f = NULL;
  SH_OK(G.ctx, stof_build(s, n, args, "cuda", &f));
  stof_tensor *cpu[3], *dev[3];
  for (int i = 0; i < n; i++) {
    cpu[i] = nonzero_rand(G.ctx, args[i], 5 + (uint64_t)i);
    dev[i] = to_device(G.ctx, cpu[i], STOF_DEVICE_CUDA);
  }
  sh_expect_error(G.ctx, stof_func_time(f, n, dev, 0, 0, &ms), STOF_ERR_ARG, "time: reps = 0");
  sh_expect_error(G.ctx, stof_func_time(f, n - 1, dev, 5, 0, &ms), STOF_ERR_ARG,
                  "time: 2 tensors given for 3 arguments");
  sh_expect_error(G.ctx, stof_func_time(f, n, cpu, 5, 0, &ms), STOF_ERR_ARG,
                  "time: argument 1 (A) is on the CPU; the CUDA backend takes CUDA tensors");
  SH_OK(G.ctx, stof_func_time(f, n, dev, 1, 0, &ms)); /* no warm-up, one rep */
  assert_true(ms > 0 && isfinite(ms));
  for (int i = 0; i < n; i++) {
    stof_tensor_free(cpu[i]);
    stof_tensor_free(dev[i]);
  }
  stof_func_free(f);
  stof_sched_free(s);
  sh_done(&G);
}

/* Whether name matches one of the comma-separated fnmatch patterns of list. */
static int case_listed(const char *list, const char *name) {
  char pat[128];
  for (const char *p = list; *p;) {
    size_t len = strcspn(p, ",");
    if (len < sizeof pat) {
      memcpy(pat, p, len);
      pat[len] = 0;
      if (len && fnmatch(pat, name, 0) == 0) return 1;
    }
    p += len + (p[len] == ',');
  }
  return 0;
}

int main(void) {
  stof_ctx *ctx = stof_ctx_new(NULL, NULL);
  if (!ctx) return 1;
  gpu_status = stof_cuda_init(ctx);
  snprintf(gpu_why, sizeof gpu_why, "%s", stof_ctx_message(ctx));
  stof_ctx_free(ctx);
  if (gpu_status == STOF_ERR_NO_DEVICE) printf("%s: every test skips\n", gpu_why);

  /* one test per case of the shared table: its length is known at run time, so the group
   * runs through _cmocka_run_group_tests (what cmocka_run_group_tests_name expands to) */
  struct CMUnitTest *per_case = calloc((size_t)sh_cuda_ncase, sizeof *per_case);
  char (*names)[96] = calloc((size_t)sh_cuda_ncase, sizeof *names);
  if (!per_case || !names) return 1;
  sh_cuda_case_tests(per_case, names, "matches", case_matches_interpreter);
  /* STOF_TEST_CASES="a,b*,...": only the cases whose names match one of these patterns
   * (fnmatch), and no timing test (scripts/gpu-sanitize.sh runs a sample this way) */
  const char *only = getenv("STOF_TEST_CASES");
  size_t n = 0;
  for (int i = 0; i < sh_cuda_ncase; i++)
    if (!only || case_listed(only, sh_cuda_cases[i].name)) per_case[n++] = per_case[i];
  if (only) printf("STOF_TEST_CASES: %zu of %d cases\n", n, sh_cuda_ncase);
  int failed = n ? _cmocka_run_group_tests("schedule_gpu", per_case, n, NULL, NULL) : 1;
  free(per_case);
  free(names);

  const struct CMUnitTest tests[] = {
      cmocka_unit_test(time_gives_a_positive_mean),
  };
  if (!only) failed += cmocka_run_group_tests_name("schedule_gpu_time", tests, NULL, NULL);
  return failed ? 1 : 0;
}
