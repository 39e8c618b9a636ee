/*
 * test_kernels_gpu: the attention kernels on a real GPU (CTest label gpu), checked against
 * stof_attention_cpu with a float64 output on the same (f16 / bf16) inputs. Every test
 * skips when stof_attn_engine_new says STOF_ERR_NO_DEVICE, so the executable passes on
 * machines without one.
 *
 * Each case (mask, shape, dtype, seed) gets random inputs (seeded, different per case,
 * never zero) and one CPU reference, then runs on the GPU once per kernel choice (block at
 * tiles 32, 64 and 128, row at 64 and 128, and auto). Before every run the output and a guard zone
 * past its end are poisoned with NaN; after it: no NaN, rows with no kept key exactly 0,
 * every element within a small absolute error (one wrong row cannot hide in the norm),
 * relative L2 below 1e-2, and the guard zone untouched. Every run prints one line (mask,
 * shape, kernel asked and chosen, errors); a failing run prints where it went wrong and
 * the test goes on with the next run, failing at the end, so one log shows every broken
 * configuration.
 */
#include "../core/testutil.h"

#include <stdio.h>
#include <time.h>

#include <stof/kernels.h>

#include "format_gpu.h"
#include "gemm_gpu.h"
#include "kernels_int.h"

typedef struct fixture {
  tu_heap heap;
  stof_ctx *ctx;
  stof_attn_engine *e;
  stof_cuda_props props;
  int nrun, nfail;
} fixture;

static int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  if (!f) return -1;
  f->ctx = tu_ctx_new(&f->heap);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  stof_attn_engine_free(f->e);
  tu_ctx_free(f->ctx, &f->heap);
  free(f);
  return 0;
}

/* The fixture with an engine; skips the test without a GPU. */
static fixture *gpu(void **state) {
  fixture *f = *state;
  stof_status st = stof_attn_engine_new(f->ctx, &f->e);
  if (st == STOF_ERR_NO_DEVICE) {
    print_message("skipping: %s\n", stof_ctx_message(f->ctx));
    stof_ctx_clear_error(f->ctx);
    skip();
  }
  TU_OK(f->ctx, st);
  assert_non_null(f->e);
  TU_OK(f->ctx, stof_cuda_props_get(f->ctx, &f->props));
  return f;
}

/* Fails the test when any run of it failed (each printed its own reasons). */
static void finish(fixture *f) {
  print_message("%d of %d runs failed\n", f->nfail, f->nrun);
  if (f->nfail)
    fail_msg("%d of %d runs failed (see the lines marked FAIL above)", f->nfail, f->nrun);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---------------------------------------------------------------- cases */

typedef struct run_spec {
  stof_attn_kernel kernel;
  int tile, warps, stages; /* 0: the selector's */
  int portable, tma;       /* stof_attn_opts' (0: the selector's) */
  int split;               /* stof_attn_opts.split (0: the automatic rule) */
  int order;               /* stof_attn_opts.order (0: the automatic rule) */
  int key64;               /* stof_attn_opts.key64 (0: the selector's rule) */
  int qshift;              /* stof_attn_opts.qshift (0: the rule) */
  int rowmask, halfskip;   /* stof_attn_opts' (0: the selector's) */
  int order_group;         /* stof_attn_opts.order_group (0: the rule's) */
  int lazy;                /* stof_attn_opts.lazy (0: the selector's rule) */
} run_spec;

static const run_spec all_runs[] = {
    {STOF_ATTN_BLOCK, 32, 0, 0}, {STOF_ATTN_BLOCK, 64, 0, 0}, {STOF_ATTN_BLOCK, 128, 0, 0},
    {STOF_ATTN_ROW, 64, 0, 0},   {STOF_ATTN_ROW, 128, 0, 0},  {STOF_ATTN_AUTO, 0, 0, 0},
};
#define NALL ((int)(sizeof all_runs / sizeof all_runs[0]))

typedef struct gcase {
  const stof_mask *mask;
  int64_t B, H, Hkv, Sq, Sk, D;
  stof_dtype dtype;
  float scale; /* 0: 1 / sqrt(D) */
  uint64_t seed;
} gcase;

/* Inputs on both sides and the reference. */
typedef struct prepared {
  stof_tensor *dq, *dk, *dv; /* device copies of the inputs */
  stof_mask_format *fmt64;   /* the CPU format at tile 64 (the selector's input) */
  double *want;              /* [B, H, Sq, D] */
  uint8_t *empty;            /* [B, H, Sq]: 1 where the row keeps no key */
  int64_t nempty, nvalid;
  double ref_s;
} prepared;

/* A CPU tensor of uniform values in [lo, hi), none closer to 0 than 1e-3 (so none is 0
 * after rounding to 16 bits). */
static stof_tensor *nonzero_uniform(stof_ctx *ctx, stof_dtype dt, int64_t a, int64_t b, int64_t c,
                                    int64_t d, uint64_t *seed, double lo, double hi) {
  stof_tensor *t = NULL;
  TU_OK(ctx, stof_tensor_new(ctx, dt, 4, TU_SHAPE(a, b, c, d), STOF_DEVICE_CPU, &t));
  for (int64_t i = 0; i < stof_tensor_numel(t); i++) {
    double x = tu_uniform(seed, lo, hi);
    if (fabs(x) < 1e-3) x = copysign(1e-3, x);
    stof_tensor_store(t, i, x);
  }
  return t;
}

static stof_tensor *to_f64(stof_ctx *ctx, const stof_tensor *t) {
  stof_tensor *r = NULL;
  TU_OK(ctx, stof_tensor_cast(t, STOF_DTYPE_F64, &r));
  return r;
}

static stof_tensor *to_gpu(stof_ctx *ctx, const stof_tensor *t) {
  stof_tensor *r = NULL;
  TU_OK(ctx, stof_tensor_to(t, STOF_DEVICE_CUDA, &r));
  return r;
}

static void prepare(fixture *f, const gcase *c, prepared *p) {
  stof_ctx *ctx = f->ctx;
  memset(p, 0, sizeof *p);
  uint64_t seed = c->seed;
  stof_tensor *q = nonzero_uniform(ctx, c->dtype, c->B, c->H, c->Sq, c->D, &seed, -2, 2);
  stof_tensor *k = nonzero_uniform(ctx, c->dtype, c->B, c->Hkv, c->Sk, c->D, &seed, -2, 2);
  stof_tensor *v = nonzero_uniform(ctx, c->dtype, c->B, c->Hkv, c->Sk, c->D, &seed, -1, 1);
  p->dq = to_gpu(ctx, q), p->dk = to_gpu(ctx, k), p->dv = to_gpu(ctx, v);

  /* the reference: the same (rounded) inputs in f64, a f64 output poisoned first */
  double t0 = now_s();
  TU_OK(ctx, stof_mask_format_build(ctx, c->mask, c->B, c->H, c->Sq, c->Sk, 64, &p->fmt64));
  stof_tensor *q64 = to_f64(ctx, q), *k64 = to_f64(ctx, k), *v64 = to_f64(ctx, v), *o64 = NULL;
  TU_OK(ctx, stof_tensor_new(ctx, STOF_DTYPE_F64, 4, TU_SHAPE(c->B, c->H, c->Sq, c->D),
                             STOF_DEVICE_CPU, &o64));
  stof_tensor_fill(o64, NAN);
  TU_OK(ctx, stof_attention_cpu(ctx, q64, k64, v64, p->fmt64, c->scale, o64));
  p->want = tu_values(o64);
  p->ref_s = now_s() - t0;
  for (int64_t b = 0; b < c->B; b++)
    for (int64_t h = 0; h < c->H; h++) p->nvalid += stof_mask_format_count(p->fmt64, b, h);

  /* rows with no key, from the mask itself */
  int64_t nrow = c->B * c->H * c->Sq;
  p->empty = malloc((size_t)nrow);
  assert_non_null(p->empty);
  for (int64_t r = 0; r < nrow; r++) {
    int64_t b = r / (c->H * c->Sq), h = r / c->Sq % c->H, i = r % c->Sq, any = 0;
    for (int64_t j = 0; j < c->Sk && !any; j++) any = stof_mask_eval(c->mask, b, h, i, j) == 1;
    p->empty[r] = (uint8_t)!any;
    p->nempty += !any;
    for (int64_t x = 0; x < c->D; x++)
      if (!any && p->want[r * c->D + x] != 0)
        fail_msg("CPU reference: empty row %lld is not 0", (long long)r);
  }
  stof_tensor *ts[] = {q, k, v, q64, k64, v64, o64};
  for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) stof_tensor_free(ts[i]);
}

static void release(prepared *p) {
  stof_tensor_free(p->dq);
  stof_tensor_free(p->dk);
  stof_tensor_free(p->dv);
  stof_mask_format_free(p->fmt64);
  free(p->want);
  free(p->empty);
}

enum { GUARD = 4096 }; /* poisoned elements before the output's start and past its end */

static uint16_t nan16(stof_dtype dt) { return dt == STOF_DTYPE_BF16 ? 0x7fc0 : 0x7e00; }

static double value16(stof_dtype dt, uint16_t x) {
  return dt == STOF_DTYPE_BF16 ? stof_bf16_to_f32(x) : stof_f16_to_f32(x);
}

/* The case as text: "causal() B=1 H=2/2 1000x1000 D=64 float16". */
static void case_text(const gcase *c, char *buf, size_t n) {
  snprintf(buf, n, "%-30.30s B=%lld H=%lld/%lld %lldx%lld D=%lld %s",
           stof_mask_description(c->mask), (long long)c->B, (long long)c->H, (long long)c->Hkv,
           (long long)c->Sq, (long long)c->Sk, (long long)c->D, stof_dtype_name(c->dtype));
}

/* Flat index i of the output as "(b 0, h 1, i 2, d 3)", written into buf. */
static const char *where(const gcase *c, int64_t i, char *buf, size_t n) {
  snprintf(buf, n, "(b %lld, h %lld, i %lld, d %lld)", (long long)(i / c->D / c->Sq / c->H),
           (long long)(i / c->D / c->Sq % c->H), (long long)(i / c->D % c->Sq),
           (long long)(i % c->D));
  return buf;
}

/* Records a failed run: prints why. */
static void run_failed(fixture *f, const char *head, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  print_message("FAIL %s | %s\n", head, msg);
  f->nfail++;
  stof_ctx_clear_error(f->ctx);
}

/* One plan and one run for spec: checks the plan's choice and output. */
static void run_case(fixture *f, const gcase *c, const prepared *p, const run_spec *rs) {
  stof_ctx *ctx = f->ctx;
  char head[256], ct[160];
  case_text(c, ct, sizeof ct);
  snprintf(head, sizeof head, "%s | %s/%d", ct, stof_attn_kernel_name(rs->kernel), rs->tile);
  f->nrun++;

  stof_attn_opts o = {.kernel = rs->kernel,
                      .tile = rs->tile,
                      .scale = c->scale,
                      .warps = rs->warps,
                      .stages = rs->stages,
                      .portable = rs->portable,
                      .tma = rs->tma,
                      .split = rs->split,
                      .order = rs->order,
                      .key64 = rs->key64,
                      .qshift = rs->qshift,
                      .rowmask = rs->rowmask,
                      .halfskip = rs->halfskip,
                      .order_group = rs->order_group,
                      .lazy = rs->lazy};
  stof_attn_plan *plan = NULL;
  stof_status st = stof_attn_plan_new(f->e, c->mask, c->B, c->H, c->Hkv, c->Sq, c->Sk, c->D,
                                      c->dtype, &o, &plan);
  if (st) {
    run_failed(f, head, "plan_new: %s: %s", stof_status_name(st), stof_ctx_message(ctx));
    return;
  }
  const stof_attn_choice *ch = stof_attn_plan_choice(plan);
  char split[64] = "";
  if (ch->split_rows)
    snprintf(split, sizeof split, " split %lld rows/%lld chunks", (long long)ch->split_rows,
             (long long)ch->split_chunks);
  snprintf(head, sizeof head, "%s | %s/%d -> %s/%d %dw %ds%s%s%s%s", ct, stof_attn_kernel_name(rs->kernel),
           rs->tile, stof_attn_kernel_name(ch->kernel), ch->tile, ch->warps, ch->stages,
           ch->kernel != STOF_ATTN_BLOCK ? "" : !ch->hopper ? " mma.sync" : ch->tma ? " wgmma+tma" : " wgmma",
           ch->key64 ? " key64" : "", ch->qshift ? " qshift" : "", split);
  if (ch->lazy) {
    size_t hn = strlen(head);
    snprintf(head + hn, sizeof head - hn, " lazy");
  }
  if (ch->order_group > 1) {
    size_t hn = strlen(head);
    snprintf(head + hn, sizeof head - hn, " order groups of %d", ch->order_group);
  }

  /* the choice: what was forced is kept; auto is the selector's answer for this device */
  char bad[512] = "";
  stof_attn_choice want;
  TU_OK(ctx, stof_attention_select(ctx, p->fmt64, c->B, c->H, c->D, &f->props, &o, &want));
  if (ch->kernel != want.kernel || ch->tile != want.tile || ch->warps != want.warps ||
      ch->stages != want.stages)
    snprintf(bad, sizeof bad, "plan chose %s/%d %dw %ds, the selector says %s/%d %dw %ds",
             stof_attn_kernel_name(ch->kernel), ch->tile, ch->warps, ch->stages,
             stof_attn_kernel_name(want.kernel), want.tile, want.warps, want.stages);
  else if ((rs->kernel != STOF_ATTN_AUTO && ch->kernel != rs->kernel) ||
           (rs->tile && ch->tile != rs->tile) || (rs->warps && ch->warps != rs->warps) ||
           (rs->stages && ch->stages != rs->stages) || (rs->portable && ch->hopper) ||
           (rs->tma > 0 && !ch->tma) || (rs->tma < 0 && (!ch->hopper || ch->tma)) ||
           (rs->split < 0 && ch->split_rows) || (rs->split > 0 && !ch->hopper) ||
           (rs->key64 && ch->key64 != (rs->key64 > 0)) || ch->key64 != want.key64 ||
           (rs->qshift && (ch->qshift != 0) != (rs->qshift > 0)) || (rs->rowmask && ch->rowmask != (rs->rowmask > 0)) ||
           (rs->halfskip && ch->halfskip != (rs->halfskip > 0)) ||
           (rs->lazy && ch->lazy != (rs->lazy > 0)) || ch->lazy != want.lazy ||
           (rs->order_group > 1 && ch->kernel == STOF_ATTN_BLOCK && (ch->hopper || ch->tile == 32) &&
            !ch->split_rows && rs->order >= 0 &&
            ch->order_group != (rs->order_group < c->B * c->H ? rs->order_group : c->B * c->H)))
    snprintf(bad, sizeof bad, "forced options not kept");
  else if (stof_attn_plan_nvalid(plan) != p->nvalid)
    snprintf(bad, sizeof bad, "plan_nvalid %lld, the mask keeps %lld",
             (long long)stof_attn_plan_nvalid(plan), (long long)p->nvalid);
  else if (!(stof_attn_plan_prepare_ms(plan) >= 0))
    snprintf(bad, sizeof bad, "prepare_ms %g", stof_attn_plan_prepare_ms(plan));
  if (bad[0]) {
    run_failed(f, head, "%s", bad);
    stof_attn_plan_free(plan);
    return;
  }

  /* the output in a buffer with guard zones on both sides (a shifted plan's first tile-row
   * starts 32 rows before the output), all poisoned; host[GUARD + i] is element i */
  int64_t n = c->B * c->H * c->Sq * c->D;
  size_t bytes = (size_t)(n + 2 * GUARD) * 2;
  uint64_t buf = 0;
  stof_tensor *out = NULL;
  uint16_t *host_all = malloc(bytes), *host = host_all + GUARD;
  assert_non_null(host_all);
  TU_OK(ctx, stof_cuda_malloc(ctx, bytes, &buf));
  TU_OK(ctx, stof_tensor_wrap(ctx, c->dtype, 4, TU_SHAPE(c->B, c->H, c->Sq, c->D), NULL,
                              (void *)(uintptr_t)(buf + 2 * GUARD), STOF_DEVICE_CUDA, &out));
  TU_OK(ctx, stof_cuda_memset16(ctx, buf, nan16(c->dtype), (size_t)(n + 2 * GUARD)));
  if ((st = stof_attn_plan_run(plan, p->dq, p->dk, p->dv, out)) ||
      (st = stof_cuda_synchronize(ctx)) || (st = stof_cuda_dtoh(ctx, host_all, buf, bytes))) {
    run_failed(f, head, "run: %s: %s", stof_status_name(st), stof_ctx_message(ctx));
    goto done;
  }

  int64_t nnan = 0, first_nan = -1, nbad_empty = 0, first_bad_empty = -1, worst = -1,
          guard_bad = -1;
  double num = 0, den = 0, maxerr = 0;
  for (int64_t i = 0; i < n; i++) {
    double g = value16(c->dtype, host[i]), w = p->want[i];
    if (isnan(g)) {
      if (!nnan++) first_nan = i;
      continue;
    }
    if (p->empty[i / c->D] && g != 0) {
      if (!nbad_empty++) first_bad_empty = i;
    }
    double e = fabs(g - w);
    if (e > maxerr || worst < 0) maxerr = e, worst = i;
    num += (g - w) * (g - w);
    den += w * w;
  }
  for (int64_t i = n; i < n + GUARD && guard_bad < 0; i++)
    if (host[i] != nan16(c->dtype)) guard_bad = i - n;
  int64_t front_bad = -1;
  for (int64_t i = 1; i <= GUARD && front_bad < 0; i++)
    if (host[-i] != nan16(c->dtype)) front_bad = i;
  double rel = nnan ? INFINITY : den > 0 ? sqrt(num / den) : (num > 0 ? INFINITY : 0);
  double abs_tol = c->dtype == STOF_DTYPE_BF16 ? 2e-2 : 1e-2;
  int ok = !nnan && !nbad_empty && maxerr <= abs_tol && rel < 1e-2 && guard_bad < 0 && front_bad < 0;
  print_message("%s %s | rel %.1e max %.1e | empty rows %lld\n", ok ? "ok  " : "FAIL", head, rel,
                maxerr, (long long)p->nempty);
  if (!ok) {
    f->nfail++;
    char at[96];
    if (nnan)
      print_message("     %lld NaN, the first at %s\n", (long long)nnan,
                    where(c, first_nan, at, sizeof at));
    if (nbad_empty)
      print_message("     %lld non-zero elements in rows without keys, the first at %s: %g\n",
                    (long long)nbad_empty, where(c, first_bad_empty, at, sizeof at),
                    value16(c->dtype, host[first_bad_empty]));
    if (worst >= 0 && maxerr > abs_tol)
      print_message("     worst at %s: %.6g, want %.6g (tolerance %g)\n",
                    where(c, worst, at, sizeof at), value16(c->dtype, host[worst]), p->want[worst],
                    abs_tol);
    if (guard_bad >= 0)
      print_message("     written past the end of the output (element %lld after it)\n",
                    (long long)guard_bad);
    if (front_bad >= 0)
      print_message("     written before the start of the output (element %lld before it)\n",
                    (long long)front_bad);
  }
done:
  stof_tensor_free(out);
  stof_cuda_mem_free(ctx, buf);
  free(host_all);
  stof_attn_plan_free(plan);
}

/* Prepares the case and runs it under each spec. */
static void check_case(fixture *f, const gcase *c, const run_spec *runs, int nrun) {
  prepared p;
  prepare(f, c, &p);
  if (p.ref_s > 1) print_message("     (CPU reference %.1f s)\n", p.ref_s);
  for (int i = 0; i < nrun; i++) run_case(f, c, &p, &runs[i]);
  release(&p);
}

static stof_mask *suite_mask(fixture *f, int i, int64_t S) {
  stof_mask *m = NULL;
  TU_OK(f->ctx, stof_mask_suite(f->ctx, stof_mask_suite_name(i), S, &m));
  return m;
}

/* ---------------------------------------------------------------- the suite */

/* Every suite mask at (B, S) with H heads, f16, D = 64, all five kernel choices. */
static void suite_at(void **state, int64_t B, int64_t S, int64_t H, float scale, uint64_t seed) {
  fixture *f = gpu(state);
  for (int i = 0; stof_mask_suite_name(i); i++) {
    stof_mask *m = suite_mask(f, i, S);
    gcase c = {m, B, H, H, S, S, 64, STOF_DTYPE_F16, scale, seed + (uint64_t)i};
    check_case(f, &c, all_runs, NALL);
    stof_mask_free(m);
  }
  finish(f);
}

/* scale 0 is 1/sqrt(D): with q, k in [-2, 2) the scores spread about 1.3, a flat softmax
 * over many keys; a larger scale makes each row peak on a few keys, so that a key leaking
 * through the mask shows (a leak of one key among hundreds hides in a flat softmax). */
static void suite_masks_at_1x128(void **state) { suite_at(state, 1, 128, 4, 0, 100); }
static void suite_masks_at_2x512(void **state) { suite_at(state, 2, 512, 3, 1.0f, 200); }
static void suite_masks_at_1x1000(void **state) { suite_at(state, 1, 1000, 3, 0.5f, 300); }
static void suite_masks_at_1x3000(void **state) { suite_at(state, 1, 3000, 2, 0.35f, 400); }

/* ---------------------------------------------------------------- variants */

static void head_dim_128_matches_cpu(void **state) {
  fixture *f = gpu(state);
  static const char *const names[] = {"causal", "longformer", "document"};
  for (int i = 0; i < 3; i++) {
    stof_mask *m = NULL;
    TU_OK(f->ctx, stof_mask_suite(f->ctx, names[i], 1000, &m));
    gcase c = {m, 1, 2, 2, 1000, 1000, 128, STOF_DTYPE_F16, i == 1 ? 0.5f : 0, 500 + (uint64_t)i};
    check_case(f, &c, all_runs, NALL);
    stof_mask_free(m);
  }
  finish(f);
}

static void bf16_matches_cpu(void **state) {
  fixture *f = gpu(state);
  static const char *const names[] = {"dense", "causal_sliding", "bigbird"};
  for (int i = 0; i < 3; i++) {
    stof_mask *m = NULL;
    TU_OK(f->ctx, stof_mask_suite(f->ctx, names[i], 1000, &m));
    gcase c = {m, 1, 2, 2, 1000, 1000, 64, STOF_DTYPE_BF16, i == 2 ? 1.0f : 0, 600 + (uint64_t)i};
    check_case(f, &c, all_runs, NALL);
    stof_mask_free(m);
  }
  /* bf16 with D = 128 */
  stof_mask *m = suite_mask(f, 1, 512);
  gcase c = {m, 2, 2, 2, 512, 512, 128, STOF_DTYPE_BF16, 0, 610};
  static const run_spec runs[] = {{STOF_ATTN_BLOCK, 64, 0, 0},
                                  {STOF_ATTN_BLOCK, 128, 0, 0},
                                  {STOF_ATTN_ROW, 64, 0, 0},
                                  {STOF_ATTN_AUTO, 0, 0, 0}};
  check_case(f, &c, runs, 4);
  stof_mask_free(m);
  finish(f);
}

static void grouped_query_matches_cpu(void **state) {
  fixture *f = gpu(state);
  stof_mask *causal = suite_mask(f, 1, 512), *bigbird = NULL, *sliding = NULL, *longformer = NULL;
  TU_OK(f->ctx, stof_mask_suite(f->ctx, "bigbird", 512, &bigbird));
  TU_OK(f->ctx, stof_mask_suite(f->ctx, "sliding", 1000, &sliding));
  TU_OK(f->ctx, stof_mask_suite(f->ctx, "longformer", 1000, &longformer));
  gcase cases[] = {
      {causal, 2, 4, 2, 512, 512, 64, STOF_DTYPE_F16, 0, 700},
      {bigbird, 2, 4, 2, 512, 512, 64, STOF_DTYPE_F16, 1.0f, 701},
      {sliding, 1, 4, 2, 1000, 1000, 128, STOF_DTYPE_F16, 0, 702},
      {longformer, 1, 4, 1, 1000, 1000, 64, STOF_DTYPE_F16, 1.0f, 703}, /* one kv head for all */
  };
  for (int i = 0; i < 4; i++) check_case(f, &cases[i], all_runs, NALL);
  stof_mask_free(causal);
  stof_mask_free(bigbird);
  stof_mask_free(sliding);
  stof_mask_free(longformer);
  finish(f);
}

static void different_query_and_key_lengths_match_cpu(void **state) {
  fixture *f = gpu(state);
  static const char *const names[] = {"dense", "causal", "sliding", "bigbird"};
  for (int i = 0; i < 4; i++) {
    stof_mask *m = NULL;
    TU_OK(f->ctx, stof_mask_suite(f->ctx, names[i], 1000, &m));
    gcase c = {m, 1, 2, 2, 384, 1000, 64, STOF_DTYPE_F16, i % 2 ? 1.0f : 0, 800 + (uint64_t)i};
    check_case(f, &c, all_runs, NALL);
    if (i == 1 || i == 3) { /* and more queries than keys */
      gcase d = {m, 1, 2, 2, 1000, 384, 64, STOF_DTYPE_F16, 0, 810 + (uint64_t)i};
      check_case(f, &d, all_runs, NALL);
    }
    stof_mask_free(m);
  }
  finish(f);
}

/* Keeps j <= i, except in rows 50..99, 200..249, ... (i / 50 = 1 mod 3): none. */
static int causal_with_empty_bands(void *ud, int64_t b, int64_t h, int64_t i, int64_t j) {
  (void)ud;
  (void)b;
  (void)h;
  return j <= i && (i / 50) % 3 != 1;
}

static void fully_masked_rows_give_exact_zeros(void **state) {
  fixture *f = gpu(state);
  stof_ctx *ctx = f->ctx;
  stof_mask *a, *b, *m[3];
  /* causal() - window(100, 0): rows 0..100 keep nothing (tile row 0 entirely empty) */
  TU_OK(ctx, stof_mask_causal(ctx, &a));
  TU_OK(ctx, stof_mask_window(ctx, 100, 0, &b));
  TU_OK(ctx, stof_mask_difference(a, b, &m[0]));
  stof_mask_free(a);
  stof_mask_free(b);
  /* two documents of 300 and 400: rows 700..999 see nothing */
  TU_OK(ctx, stof_mask_document(ctx, 2, (const int64_t[]){300, 400}, &m[1]));
  /* bands of empty rows inside tiles */
  TU_OK(ctx,
        stof_mask_fn(ctx, causal_with_empty_bands, NULL, "causal_with_empty_bands", 0, 0, &m[2]));
  static const int64_t S[3] = {1000, 1000, 777};
  for (int i = 0; i < 3; i++) {
    gcase c = {m[i], 1, 2, 2, S[i], S[i], 64, STOF_DTYPE_F16, i == 1 ? 0 : 1.0f, 900 + (uint64_t)i};
    check_case(f, &c, all_runs, NALL);
    stof_mask_free(m[i]);
  }
  finish(f);
}

static void per_batch_document_mask_matches_cpu(void **state) {
  fixture *f = gpu(state);
  stof_ctx *ctx = f->ctx;
  stof_mask *doc, *causal, *both;
  /* batch 0: 100 + 250 + 162 = 512; batch 1: 64 + 64 + 300 = 428, rows 428.. empty */
  TU_OK(ctx, stof_mask_document_batched(ctx, 2, (const int64_t[]){3, 3},
                                        (const int64_t[]){100, 250, 162, 64, 64, 300}, &doc));
  gcase c = {doc, 2, 2, 2, 512, 512, 64, STOF_DTYPE_F16, 1.0f, 1000};
  check_case(f, &c, all_runs, NALL);
  stof_mask_free(doc);
  /* per-batch documents & causal at an odd length */
  TU_OK(ctx, stof_mask_document_batched(ctx, 2, (const int64_t[]){2, 4},
                                        (const int64_t[]){333, 666, 10, 500, 89, 400}, &doc));
  TU_OK(ctx, stof_mask_causal(ctx, &causal));
  TU_OK(ctx, stof_mask_intersection(doc, causal, &both));
  gcase d = {both, 2, 2, 2, 999, 999, 64, STOF_DTYPE_F16, 0, 1001};
  check_case(f, &d, all_runs, NALL);
  stof_mask_free(doc);
  stof_mask_free(causal);
  stof_mask_free(both);
  finish(f);
}

/* A window whose width depends on the head: 8, 40, 100, then causal for h >= 3. */
static int per_head_window(void *ud, int64_t b, int64_t h, int64_t i, int64_t j) {
  (void)ud;
  (void)b;
  static const int64_t w[3] = {8, 40, 100};
  if (h >= 3) return j <= i;
  return j <= i + w[h] / 4 && i - j <= w[h];
}

static void per_head_masks_match_cpu(void **state) {
  fixture *f = gpu(state);
  stof_ctx *ctx = f->ctx;
  /* a tensor [1, 3, 300, 300]: head 0 random 15% plus the diagonal, head 1 random 8x8
   * blocks (some rows empty), head 2 causal without the rows i = 5 (mod 13) */
  const int64_t S = 300, H = 3;
  stof_tensor *t = NULL;
  TU_OK(ctx, stof_tensor_new(ctx, STOF_DTYPE_BOOL, 4, TU_SHAPE(1, H, S, S), STOF_DEVICE_CPU, &t));
  uint64_t seed = 1100;
  uint8_t blocks[(300 / 8 + 1) * (300 / 8 + 1)];
  for (size_t i = 0; i < sizeof blocks; i++) blocks[i] = tu_splitmix(&seed) % 100 < 30;
  for (int64_t i = 0; i < S; i++)
    for (int64_t j = 0; j < S; j++) {
      stof_tensor_store(t, (0 * S + i) * S + j, i == j || tu_splitmix(&seed) % 100 < 15);
      stof_tensor_store(t, (1 * S + i) * S + j, blocks[(i / 8) * (S / 8 + 1) + j / 8]);
      stof_tensor_store(t, (2 * S + i) * S + j, j <= i && i % 13 != 5);
    }
  stof_mask *m = NULL;
  TU_OK(ctx, stof_mask_from_tensor(ctx, t, &m));
  stof_tensor_free(t);
  assert_true(stof_mask_varies_h(m));
  gcase c = {m, 2, H, H, S, S, 64, STOF_DTYPE_F16, 1.0f, 1101};
  check_case(f, &c, all_runs, NALL);
  stof_mask_free(m);

  TU_OK(ctx, stof_mask_fn(ctx, per_head_window, NULL, "per_head_window", 0, 1, &m));
  gcase d = {m, 1, 4, 2, 1000, 1000, 64, STOF_DTYPE_F16, 0, 1102};
  check_case(f, &d, all_runs, NALL);
  stof_mask_free(m);
  finish(f);
}

/* Every kernel variant the selector can pick, forced one by one, on small shapes: block-wise
 * portable (mma.sync; tiles 32, 64 and 128), block-wise Hopper (wgmma) with K/V by cp.async
 * and by TMA (compute capability 9.0 only), row-wise; tiles 64 and 128; D 64 and 128; f16 and bf16; odd and
 * unequal lengths, a per-head mask with grouped-query heads, rows with no key, per-batch
 * documents. Small enough to run under compute-sanitizer (scripts/gpu-sanitize.sh runs it
 * alone: STOF_TEST_FILTER=every_kernel_variant_at_small_shapes), where kernels run 10-100x
 * slower. */
static void every_kernel_variant_at_small_shapes(void **state) {
  fixture *f = gpu(state);
  stof_ctx *ctx = f->ctx;
  static const run_spec variants[] = {
      {STOF_ATTN_BLOCK, 32, 0, 0, 1, 0},                                       /* portable */
      {STOF_ATTN_BLOCK, 64, 0, 0, 1, 0},  {STOF_ATTN_BLOCK, 128, 0, 0, 1, 0},
      {STOF_ATTN_BLOCK, 64, 0, 0, 0, -1}, {STOF_ATTN_BLOCK, 128, 0, 0, 0, -1}, /* wgmma */
      {STOF_ATTN_BLOCK, 64, 0, 0, 0, 1},  {STOF_ATTN_BLOCK, 128, 0, 0, 0, 1},  /* wgmma+tma */
      {STOF_ATTN_ROW, 64, 0, 0, 0, 0},    {STOF_ATTN_ROW, 128, 0, 0, 0, 0},
      /* wgmma with every tile-row of more than 2 tiles split over CTAs, cp.async and TMA */
      {STOF_ATTN_BLOCK, 64, 0, 0, 0, -1, 2}, {STOF_ATTN_BLOCK, 128, 0, 0, 0, -1, 2},
      {STOF_ATTN_BLOCK, 64, 0, 0, 0, 1, 2},  {STOF_ATTN_BLOCK, 128, 0, 0, 0, 1, 2},
  };
  enum { NVARIANT = sizeof variants / sizeof variants[0] };
  run_spec runs[NVARIANT];
  int nrun = 0, hopper = f->props.cc_major == 9 && f->props.cc_minor == 0;
  for (int i = 0; i < NVARIANT; i++)
    if (hopper || variants[i].kernel != STOF_ATTN_BLOCK || variants[i].portable) runs[nrun++] = variants[i];

  stof_mask *m[8], *a, *b;
  TU_OK(ctx, stof_mask_causal(ctx, &m[0]));
  TU_OK(ctx, stof_mask_suite(ctx, "bigbird", 129, &m[1]));
  TU_OK(ctx, stof_mask_fn(ctx, per_head_window, NULL, "per_head_window", 0, 1, &m[2]));
  TU_OK(ctx, stof_mask_causal(ctx, &a)); /* causal() - window(100, 0): rows 0..100 keep nothing */
  TU_OK(ctx, stof_mask_window(ctx, 100, 0, &b));
  TU_OK(ctx, stof_mask_difference(a, b, &m[3]));
  stof_mask_free(a);
  stof_mask_free(b);
  TU_OK(ctx, stof_mask_document(ctx, 2, (const int64_t[]){60, 80}, &m[4])); /* rows 140.. none */
  TU_OK(ctx, stof_mask_suite(ctx, "sliding", 200, &m[5]));
  TU_OK(ctx, stof_mask_document_batched(ctx, 2, (const int64_t[]){2, 3},
                                        (const int64_t[]){50, 79, 30, 30, 40}, &m[6]));
  TU_OK(ctx, stof_mask_fn(ctx, causal_with_empty_bands, NULL, "causal_with_empty_bands", 0, 0, &m[7]));
  const gcase cases[] = {
      /* mask, B, H, Hkv, Sq, Sk, D, dtype, scale, seed */
      {m[0], 1, 2, 2, 200, 200, 64, STOF_DTYPE_F16, 0, 2000},
      {m[1], 1, 2, 2, 129, 129, 128, STOF_DTYPE_BF16, 1.0f, 2001},
      {m[2], 1, 4, 2, 200, 200, 64, STOF_DTYPE_F16, 0, 2002},     /* per head, GQA */
      {m[3], 1, 2, 2, 200, 200, 128, STOF_DTYPE_F16, 1.0f, 2003}, /* empty rows */
      {m[4], 1, 2, 1, 200, 200, 64, STOF_DTYPE_BF16, 0, 2004},    /* empty rows, one kv head */
      {m[0], 1, 2, 2, 77, 200, 64, STOF_DTYPE_BF16, 0, 2005},     /* Sq < Sk */
      {m[5], 1, 2, 2, 200, 77, 128, STOF_DTYPE_F16, 0, 2006},     /* Sq > Sk */
      {m[6], 2, 2, 2, 129, 129, 64, STOF_DTYPE_F16, 1.0f, 2007},  /* per-batch documents */
      {m[7], 1, 2, 2, 150, 150, 128, STOF_DTYPE_BF16, 1.0f, 2008}, /* empty bands inside tiles */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_case(f, &cases[i], runs, nrun);
  for (int i = 0; i < 8; i++) stof_mask_free(m[i]);
  finish(f);
}

/* Heavy tile-rows split over CTAs (Hopper only; stof_attn_opts.split): longformer's global
 * rows at a length where the automatic rule splits them (asserted from the plan's choice),
 * D 64 and 128, f16 and bf16, against split off; then split 4 (every tile-row of more than 4
 * tiles in chunks of at most 4) on every suite mask at an odd length, tiles 64 and 128, K/V
 * by cp.async and by TMA; grouped-query heads. (Per-head masks, fully masked rows, Sq != Sk
 * and per-batch documents with split 2: every_kernel_variant_at_small_shapes; T5 / ALiBi /
 * soft cap with split 2: tests/gpu/attention_mod.lua.) */
static void split_rows_match_cpu(void **state) {
  fixture *f = gpu(state);
  stof_ctx *ctx = f->ctx;
  if (f->props.cc_major != 9 || f->props.cc_minor != 0) {
    print_message("skipping: the split is the Hopper kernel's (compute capability 9.0)\n");
    skip();
  }
  stof_mask *lf = NULL;
  TU_OK(ctx, stof_mask_longformer(ctx, 32, 32, &lf));
  static const run_spec auto_off[] = {{STOF_ATTN_BLOCK, 64, 0, 0, 0, 0, 0}, {STOF_ATTN_BLOCK, 64, 0, 0, 0, 0, -1},
                                      {STOF_ATTN_BLOCK, 64, 0, 0, 0, -1, 0}};
  for (int i = 0; i < 2; i++) {
    /* B 1, H 4 at 8192: row 0 holds 128 tiles, the others 3-4, the launch 2,544 */
    gcase c = {lf, 1, 4, 2, 8192, 8192, i ? 128 : 64, i ? STOF_DTYPE_BF16 : STOF_DTYPE_F16, 0.5f, 3000 + (uint64_t)i};
    stof_attn_plan *plan = NULL;
    stof_attn_opts o = {.kernel = STOF_ATTN_BLOCK, .tile = 64};
    TU_OK(ctx, stof_attn_plan_new(f->e, lf, c.B, c.H, c.Hkv, c.Sq, c.Sk, c.D, c.dtype, &o, &plan));
    const stof_attn_choice *ch = stof_attn_plan_choice(plan);
    print_message("     %s\n", ch->why);
    assert_int_equal(ch->split_rows, 4);
    assert_true(ch->split_chunks >= 8 && ch->split_ws > 0);
    assert_non_null(strstr(ch->why, "split 4 tile-rows of >= "));
    stof_attn_plan_free(plan);
    check_case(f, &c, auto_off, 3);
  }
  static const run_spec forced[] = {{STOF_ATTN_BLOCK, 64, 0, 0, 0, -1, 4}, {STOF_ATTN_BLOCK, 128, 0, 0, 0, -1, 4},
                                    {STOF_ATTN_BLOCK, 64, 0, 0, 0, 1, 4},  {STOF_ATTN_BLOCK, 128, 0, 0, 0, 1, 4}};
  for (int i = 0; stof_mask_suite_name(i); i++) {
    stof_mask *m = suite_mask(f, i, 1000);
    gcase c = {m, 1, 3, 3, 1000, 1000, i % 2 ? 128 : 64, i % 3 ? STOF_DTYPE_F16 : STOF_DTYPE_BF16, 0.5f,
               3100 + (uint64_t)i};
    check_case(f, &c, forced, 4);
    stof_mask_free(m);
  }
  gcase g = {lf, 2, 4, 1, 777, 777, 64, STOF_DTYPE_F16, 1.0f, 3200}; /* one kv head for four */
  check_case(f, &g, forced, 4);
  stof_mask_free(lf);
  finish(f);
}

/* A window of 32 keys on each side for every head; whole rows besides: rows 0-31 in heads
 * h = 0 (mod 3), rows 0-31 and 512-543 in heads h = 1 (mod 3), none in the others. At tile 64
 * and length 1000 the instances have 1, 2 and 0 long tile-rows (16 tiles against 2-3). */
static int per_head_long_rows(void *ud, int64_t b, int64_t h, int64_t i, int64_t j) {
  (void)ud;
  (void)b;
  if (i - j <= 32 && j - i <= 32) return 1;
  if (h % 3 == 2) return 0;
  return i < 32 || (h % 3 == 1 && i >= 512 && i < 544);
}

/* The launch order (STOF_SM90_ORDER): longformer's global tile-row launched before every
 * other row, at B x H = 24 (not split there: a CTA slot's share of the launch is more than
 * the row's tiles), D 64 tile 64 and D 128 tile 128, an odd length, one key/value head for
 * three; then a per-head mask whose instances have 1, 2 and 0 long rows (each (b, h) launches
 * 2 first, filling with its next rows); against the CPU, and against the default order. */
static void launch_order_matches_cpu(void **state) {
  fixture *f = gpu(state);
  stof_ctx *ctx = f->ctx;
  if (f->props.cc_major != 9 || f->props.cc_minor != 0) {
    print_message("skipping: the launch order is the Hopper kernel's (compute capability 9.0)\n");
    skip();
  }
  stof_mask *lf = NULL;
  TU_OK(ctx, stof_mask_longformer(ctx, 32, 32, &lf));
  static const run_spec runs[] = {{STOF_ATTN_AUTO, 0, 0, 0, 0, 0, 0, 0}, {STOF_ATTN_AUTO, 0, 0, 0, 0, 0, 0, -1},
                                  {STOF_ATTN_BLOCK, 64, 0, 0, 0, -1, 0, 0}};
  static const struct {
    int64_t B, H, Hkv, S, D;
    int tile;
    stof_dtype dt;
  } cases[] = {{2, 12, 12, 1000, 64, 64, STOF_DTYPE_F16},
               {2, 12, 4, 1024, 64, 64, STOF_DTYPE_BF16},
               {1, 24, 24, 2048, 128, 128, STOF_DTYPE_F16}};
  for (int i = 0; i < 3; i++) {
    stof_attn_plan *plan = NULL;
    stof_attn_opts o = {.tile = cases[i].tile};
    TU_OK(ctx, stof_attn_plan_new(f->e, lf, cases[i].B, cases[i].H, cases[i].Hkv, cases[i].S, cases[i].S, cases[i].D,
                                  cases[i].dt, &o, &plan));
    const stof_attn_choice *ch = stof_attn_plan_choice(plan);
    print_message("     %s\n", ch->why);
    assert_int_equal(ch->split_rows, 0);
    assert_int_equal(ch->heavy_rows, 1);
    assert_non_null(strstr(ch->why, "1 long tile-row a (b, h) launched first"));
    stof_attn_plan_free(plan);
    gcase c = {lf, cases[i].B, cases[i].H, cases[i].Hkv, cases[i].S, cases[i].S, cases[i].D, cases[i].dt, 0.5f,
               3300 + (uint64_t)i};
    check_case(f, &c, runs, 3);
  }
  stof_mask *ph = NULL;
  TU_OK(ctx, stof_mask_fn(ctx, per_head_long_rows, NULL, "per_head_long_rows", 0, 1, &ph));
  stof_attn_plan *plan = NULL;
  TU_OK(ctx, stof_attn_plan_new(f->e, ph, 2, 12, 4, 1000, 1000, 64, STOF_DTYPE_F16, &(stof_attn_opts){.tile = 64},
                                &plan));
  const stof_attn_choice *ch = stof_attn_plan_choice(plan);
  print_message("     %s\n", ch->why);
  assert_int_equal(ch->split_rows, 0);
  assert_int_equal(ch->heavy_rows, 2);
  assert_non_null(strstr(ch->why, "2 long tile-rows a (b, h) launched first"));
  stof_attn_plan_free(plan);
  gcase c = {ph, 2, 12, 4, 1000, 1000, 64, STOF_DTYPE_F16, 0.5f, 3310};
  check_case(f, &c, runs, 3);
  stof_mask_free(ph);
  stof_mask_free(lf);
  finish(f);
}

/* The grouped launch order (stof_attn_opts.order_group; STOF_SM90_ORDER's groups of (b, h)
 * pairs, their rows longest first): the rule's choice on causal and document (every pair in
 * one group at these sizes), then forced groups of 5 and 7 over B x H = 24 (the last group
 * of 4 or 3 pairs), of 1 (pair by pair, the rule before), and on longformer (its global rows
 * first, then the groups); D 64 at tile 64 (TMA and cp.async) and tile 128 in 64-key steps,
 * D 128 at tile 128 (the ping-pong) and 64; BigBird on the block kernel at tile 32
 * (STOF_ORDER: its global row first, then the groups); f16 and bf16, one key/value head for
 * three; against the CPU, the output poisoned before each run (a row never run shows as
 * poison; one run twice in place of another shows as the other's rows wrong). */
static void grouped_order_matches_cpu(void **state) {
  fixture *f = gpu(state);
  stof_ctx *ctx = f->ctx;
  if (f->props.cc_major != 9 || f->props.cc_minor != 0) {
    print_message("skipping: the launch order is the Hopper kernel's (compute capability 9.0)\n");
    skip();
  }
  static const run_spec runs[] = {{.kernel = STOF_ATTN_AUTO},
                                  {.kernel = STOF_ATTN_AUTO, .order_group = 5},
                                  {.kernel = STOF_ATTN_AUTO, .order_group = 7, .tma = -1},
                                  {.kernel = STOF_ATTN_AUTO, .order_group = 1},
                                  {.kernel = STOF_ATTN_BLOCK, .tile = 128, .key64 = 1, .order_group = 5}};
  static const run_spec runs128[] = {{.kernel = STOF_ATTN_AUTO},
                                     {.kernel = STOF_ATTN_BLOCK, .tile = 128, .order_group = 5},
                                     {.kernel = STOF_ATTN_BLOCK, .tile = 64, .order_group = 7}};
  /* BigBird on the block kernel at tile 32 (STOF_ORDER): its global row first, then the
   * groups; forced groups; groups of 1; no order at all */
  static const run_spec runs32[] = {{.kernel = STOF_ATTN_BLOCK, .tile = 32},
                                    {.kernel = STOF_ATTN_BLOCK, .tile = 32, .order_group = 5},
                                    {.kernel = STOF_ATTN_BLOCK, .tile = 32, .order_group = 1},
                                    {.kernel = STOF_ATTN_BLOCK, .tile = 32, .order = -1}};
  stof_mask *bb = NULL;
  TU_OK(ctx, stof_mask_suite(ctx, "bigbird", 1000, &bb));
  stof_attn_plan *p32 = NULL;
  TU_OK(ctx, stof_attn_plan_new(f->e, bb, 2, 12, 12, 1000, 1000, 64, STOF_DTYPE_F16, &(stof_attn_opts){.tile = 32},
                                &p32));
  const stof_attn_choice *c32 = stof_attn_plan_choice(p32);
  print_message("     bigbird, tile 32: %s\n", strrchr(c32->why, ';') ? strrchr(c32->why, ';') + 2 : c32->why);
  assert_int_equal(c32->heavy_rows, 1);
  assert_int_equal(c32->order_group, 24);
  stof_attn_plan_free(p32);
  gcase cb = {bb, 2, 12, 12, 1000, 1000, 64, STOF_DTYPE_F16, 0.5f, 3430};
  check_case(f, &cb, runs32, 4);
  gcase cb2 = {bb, 2, 12, 4, 1000, 1000, 128, STOF_DTYPE_BF16, 0.5f, 3431};
  check_case(f, &cb2, runs32, 2);
  stof_mask_free(bb);
  static const char *const names[] = {"causal", "document", "longformer"};
  for (int i = 0; i < 3; i++) {
    stof_mask *m = NULL;
    TU_OK(ctx, stof_mask_suite(ctx, names[i], 1000, &m));
    if (i < 2) { /* the rule groups them: rows of 1 .. 16 tiles, and the documents' */
      stof_attn_plan *plan = NULL;
      TU_OK(ctx, stof_attn_plan_new(f->e, m, 2, 12, 12, 1000, 1000, 64, STOF_DTYPE_F16, NULL, &plan));
      const stof_attn_choice *ch = stof_attn_plan_choice(plan);
      print_message("     %s: %s\n", names[i], strrchr(ch->why, ';') ? strrchr(ch->why, ';') + 2 : ch->why);
      assert_int_equal(ch->order_group, 24);
      assert_non_null(strstr(ch->why, "tile-rows longest first, 24 (b, h) at a time"));
      stof_attn_plan_free(plan);
    }
    gcase c = {m, 2, 12, 12, 1000, 1000, 64, STOF_DTYPE_F16, 0.5f, 3400 + (uint64_t)i};
    check_case(f, &c, runs, i == 2 ? 4 : 5);
    gcase g = {m, 2, 12, 4, 1000, 1000, 64, STOF_DTYPE_BF16, 0.5f, 3410 + (uint64_t)i};
    check_case(f, &g, runs, 2);
    gcase d = {m, 2, 12, 12, 1000, 1000, 128, STOF_DTYPE_F16, 0.5f, 3420 + (uint64_t)i};
    check_case(f, &d, runs128, 3);
    stof_mask_free(m);
  }
  finish(f);
}

/* Tile 128 in 64-key steps (stof_attn_opts.key64, STOF_SM90_KEY64; Hopper, D 64): the rule's
 * choice on dense (no partial tile: the kernel without mask code) and causal at 4096 (its
 * diagonal tiles masked), against key64 off; then forced on every suite mask at an odd length
 * (partial tiles), K/V by TMA and by cp.async, and with every tile-row of more than 2 tiles split
 * (STOF_SM90_SPLIT with KEY64), f16 and bf16, one key/value head for three, and Sq != Sk;
 * against the CPU. */
static void key64_matches_cpu(void **state) {
  fixture *f = gpu(state);
  stof_ctx *ctx = f->ctx;
  if (f->props.cc_major != 9 || f->props.cc_minor != 0) {
    print_message("skipping: key64 is the Hopper kernel's (compute capability 9.0)\n");
    skip();
  }
  static const run_spec rule[] = {{.kernel = STOF_ATTN_AUTO}, {.kernel = STOF_ATTN_AUTO, .key64 = -1},
                                  {.kernel = STOF_ATTN_AUTO, .key64 = 1, .tma = -1}};
  stof_mask *dense = NULL, *causal = NULL;
  TU_OK(ctx, stof_mask_dense(ctx, &dense));
  TU_OK(ctx, stof_mask_causal(ctx, &causal));
  static const struct {
    int causal;
    int64_t B, H, Hkv, S;
    stof_dtype dt;
  } auto_cases[] = {{0, 2, 4, 4, 2048, STOF_DTYPE_F16}, {0, 1, 6, 2, 1024, STOF_DTYPE_BF16},
                    {1, 1, 2, 2, 4096, STOF_DTYPE_F16}};
  for (int i = 0; i < 3; i++) {
    stof_mask *m = auto_cases[i].causal ? causal : dense;
    stof_attn_plan *plan = NULL;
    TU_OK(ctx, stof_attn_plan_new(f->e, m, auto_cases[i].B, auto_cases[i].H, auto_cases[i].Hkv, auto_cases[i].S,
                                  auto_cases[i].S, 64, auto_cases[i].dt, NULL, &plan));
    const stof_attn_choice *ch = stof_attn_plan_choice(plan);
    print_message("     %s\n", ch->why);
    assert_true(ch->hopper && ch->key64 && ch->tile == 128 && ch->nopartial == !auto_cases[i].causal);
    stof_attn_plan_free(plan);
    gcase c = {m, auto_cases[i].B, auto_cases[i].H, auto_cases[i].Hkv, auto_cases[i].S, auto_cases[i].S, 64,
               auto_cases[i].dt, 0, 3400 + (uint64_t)i};
    check_case(f, &c, rule, 3);
  }
  static const run_spec forced[] = {{.kernel = STOF_ATTN_AUTO, .key64 = 1},
                                    {.kernel = STOF_ATTN_AUTO, .key64 = 1, .tma = -1},
                                    {.kernel = STOF_ATTN_AUTO, .key64 = 1, .split = 2}};
  for (int i = 0; stof_mask_suite_name(i); i++) {
    stof_mask *m = suite_mask(f, i, 1000);
    gcase c = {m, 1, 3, 1, 1000, 1000, 64, i % 2 ? STOF_DTYPE_BF16 : STOF_DTYPE_F16, 0.5f, 3410 + (uint64_t)i};
    check_case(f, &c, forced, 3);
    stof_mask_free(m);
  }
  gcase g = {causal, 2, 2, 2, 777, 1000, 64, STOF_DTYPE_F16, 1.0f, 3430}; /* Sq < Sk */
  check_case(f, &g, forced, 3);
  stof_mask_free(dense);
  stof_mask_free(causal);
  finish(f);
}

/* The query shift (stof_attn_opts.qshift, STOF_SM90_QSHIFT; Hopper, tile 64): the rule's
 * choice on sliding and longformer (asserted from the plan), against the shift off, also from
 * a format the engine keeps on the device (S >= 8192); then forced on every suite mask at odd
 * lengths, K/V by TMA and by cp.async, with every tile-row of more than 2 tiles split (the
 * chunk launch and the combine shifted too), masked from the bitmap and with the half skip,
 * D 64 and 128, f16 and bf16, one key/value head for three, Sq != Sk both ways, Sq 1 and 33
 * (the first tile-row's queries start at -32), per-head masks and fully masked rows; against
 * the CPU. */
static void qshift_matches_cpu(void **state) {
  fixture *f = gpu(state);
  stof_ctx *ctx = f->ctx;
  if (f->props.cc_major != 9 || f->props.cc_minor != 0) {
    print_message("skipping: the query shift is the Hopper kernel's (compute capability 9.0)\n");
    skip();
  }
  static const run_spec rule[] = {{.kernel = STOF_ATTN_AUTO}, {.kernel = STOF_ATTN_AUTO, .qshift = -1}};
  static const char *const ruled[] = {"sliding", "longformer"};
  for (int i = 0; i < 4; i++) {
    stof_mask *m = NULL;
    TU_OK(ctx, stof_mask_suite(ctx, ruled[i % 2], 2048, &m));
    int64_t D = i < 2 ? 64 : 128;
    stof_attn_plan *plan = NULL;
    TU_OK(ctx, stof_attn_plan_new(f->e, m, 2, 4, 4, 2048, 2048, D, STOF_DTYPE_F16, NULL, &plan));
    const stof_attn_choice *ch = stof_attn_plan_choice(plan);
    print_message("     %s\n", ch->why);
    assert_true(ch->hopper && ch->tile == 64 && ch->qshift == 32);
    assert_non_null(strstr(ch->why, "queries shifted by 32"));
    stof_attn_plan_free(plan);
    gcase c = {m, 2, 4, 4, 2048, 2048, D, i % 2 ? STOF_DTYPE_BF16 : STOF_DTYPE_F16, 0.5f, 3500 + (uint64_t)i};
    check_case(f, &c, rule, 2);
    stof_mask_free(m);
  }
  /* a format the engine keeps on the device (S >= STOF_FORMAT_GPU_MIN_S): fetched, shifted */
  stof_mask *lfl = NULL;
  TU_OK(ctx, stof_mask_longformer(ctx, 32, 32, &lfl));
  stof_attn_plan *plan = NULL;
  TU_OK(ctx, stof_attn_plan_new(f->e, lfl, 1, 2, 2, STOF_FORMAT_GPU_MIN_S, STOF_FORMAT_GPU_MIN_S, 128,
                                STOF_DTYPE_F16, NULL, &plan));
  const stof_attn_choice *lch = stof_attn_plan_choice(plan);
  print_message("     %s\n", lch->why);
  assert_true(lch->hopper && lch->tile == 64 && lch->qshift == 32);
  stof_attn_plan_free(plan);
  gcase lc = {lfl, 1, 2, 2, STOF_FORMAT_GPU_MIN_S + 77, STOF_FORMAT_GPU_MIN_S + 77, 128, STOF_DTYPE_BF16, 0.5f, 3505};
  check_case(f, &lc, rule, 2);
  stof_mask_free(lfl);
  static const run_spec forced[] = {{.kernel = STOF_ATTN_BLOCK, .tile = 64, .qshift = 1},
                                    {.kernel = STOF_ATTN_BLOCK, .tile = 64, .qshift = 1, .tma = -1},
                                    {.kernel = STOF_ATTN_BLOCK, .tile = 64, .qshift = 1, .tma = 1},
                                    {.kernel = STOF_ATTN_BLOCK, .tile = 64, .qshift = 1, .split = 2},
                                    {.kernel = STOF_ATTN_BLOCK, .tile = 64, .qshift = 1, .split = 2, .tma = -1},
                                    /* masked from the bitmap, and with the half skip */
                                    {.kernel = STOF_ATTN_BLOCK, .tile = 64, .qshift = 1, .rowmask = -1, .halfskip = -1},
                                    {.kernel = STOF_ATTN_BLOCK, .tile = 64, .qshift = 1, .halfskip = 1, .tma = -1}};
  enum { NFORCED = sizeof forced / sizeof forced[0] };
  for (int i = 0; stof_mask_suite_name(i); i++) {
    stof_mask *m = suite_mask(f, i, 1000);
    gcase c = {m, 1, 3, 1, 1000, 1000, i % 2 ? 128 : 64, i % 3 ? STOF_DTYPE_F16 : STOF_DTYPE_BF16, 0.5f,
               3510 + (uint64_t)i};
    check_case(f, &c, forced, NFORCED);
    stof_mask_free(m);
  }
  stof_mask *lf = NULL, *cs = NULL, *ph = NULL, *a = NULL, *b = NULL, *holes = NULL;
  TU_OK(ctx, stof_mask_longformer(ctx, 32, 32, &lf));
  TU_OK(ctx, stof_mask_causal_sliding(ctx, 32, &cs));
  TU_OK(ctx, stof_mask_fn(ctx, per_head_window, NULL, "per_head_window", 0, 1, &ph));
  TU_OK(ctx, stof_mask_causal(ctx, &a)); /* causal() - window(100, 0): rows 0..100 keep nothing */
  TU_OK(ctx, stof_mask_window(ctx, 100, 0, &b));
  TU_OK(ctx, stof_mask_difference(a, b, &holes));
  const gcase cases[] = {
      {lf, 2, 2, 2, 1, 300, 64, STOF_DTYPE_F16, 0, 3530},       /* one query */
      {lf, 1, 2, 2, 33, 33, 128, STOF_DTYPE_BF16, 1.0f, 3531},  /* one tile-row */
      {cs, 1, 2, 2, 300, 129, 64, STOF_DTYPE_F16, 0, 3532},     /* Sq > Sk */
      {lf, 1, 2, 2, 129, 700, 128, STOF_DTYPE_F16, 0.5f, 3533}, /* Sq < Sk */
      {ph, 1, 4, 2, 200, 200, 64, STOF_DTYPE_F16, 0, 3534},     /* per head, GQA */
      {holes, 1, 2, 2, 200, 200, 128, STOF_DTYPE_BF16, 1.0f, 3535}, /* fully masked rows */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_case(f, &cases[i], forced, NFORCED);
  stof_mask_free(lf);
  stof_mask_free(cs);
  stof_mask_free(ph);
  stof_mask_free(a);
  stof_mask_free(b);
  stof_mask_free(holes);
  finish(f);
}

/* The lazy rescale (STOF_LAZY_RESCALE): O and l moved to a new max only when a row's max grows
 * by more than 2^8, else the exponentials taken against the old one. Scales 0.5 and 1 at
 * D 128 (score spreads of about 11 and 22 in log2 units) make rows grow past the margin at later
 * tiles as well as not, so both branches run; the default scale mostly takes the old max.
 * Forced on and off, and the rule's choice, on every suite mask at S 1000 and 2048 (BigBird
 * on the tile-32 kernel there), the kernels the rule takes it on (tile 64 without ping-pong,
 * cp.async and TMA, split, shifted) and forced where it does not (the ping-pong, D 64, tile 32
 * with 1 warp of 32 rows), f16 and bf16, GQA, Sq != Sk, fully masked rows (with score modifiers:
 * tests/gpu/attention_mod.lua). */
static void lazy_rescale_matches_cpu(void **state) {
  fixture *f = gpu(state);
  stof_ctx *ctx = f->ctx;
  if (f->props.cc_major != 9 || f->props.cc_minor != 0) {
    print_message("skipping: the lazy rescale's rule is the Hopper GPU's (compute capability 9.0)\n");
    skip();
  }
  static const run_spec runs[] = {
      {.kernel = STOF_ATTN_AUTO},
      {.kernel = STOF_ATTN_AUTO, .lazy = 1},
      {.kernel = STOF_ATTN_AUTO, .lazy = -1},
      {.kernel = STOF_ATTN_BLOCK, .tile = 64, .lazy = 1, .tma = -1},
      {.kernel = STOF_ATTN_BLOCK, .tile = 64, .lazy = 1, .tma = 1},
      {.kernel = STOF_ATTN_BLOCK, .tile = 64, .lazy = 1, .split = 2},
      {.kernel = STOF_ATTN_BLOCK, .tile = 64, .lazy = 1, .qshift = 1},
      {.kernel = STOF_ATTN_BLOCK, .tile = 128, .lazy = 1},
      {.kernel = STOF_ATTN_BLOCK, .tile = 32, .lazy = 1},
      {.kernel = STOF_ATTN_BLOCK, .tile = 32, .warps = 1, .lazy = 1}};
  enum { NRUNS = sizeof runs / sizeof runs[0] };
  for (int i = 0; stof_mask_suite_name(i); i++)
    for (int si = 0; si < 2; si++) {
      int64_t S = si ? 2048 : 1000;
      stof_mask *m = suite_mask(f, i, S);
      gcase c = {m, 1, 4, 2, S, S, si || i % 2 ? 128 : 64, (i + si) % 2 ? STOF_DTYPE_BF16 : STOF_DTYPE_F16,
                 si ? 1.0f : 0.5f, 3700 + 10 * (uint64_t)si + (uint64_t)i};
      check_case(f, &c, runs, NRUNS);
      stof_mask_free(m);
    }
  stof_mask *lf = NULL, *a = NULL, *b = NULL, *holes = NULL;
  TU_OK(ctx, stof_mask_longformer(ctx, 32, 32, &lf));
  TU_OK(ctx, stof_mask_causal(ctx, &a)); /* causal() - window(100, 0): rows 0..100 keep nothing */
  TU_OK(ctx, stof_mask_window(ctx, 100, 0, &b));
  TU_OK(ctx, stof_mask_difference(a, b, &holes));
  const gcase cases[] = {
      {lf, 1, 2, 2, 129, 700, 128, STOF_DTYPE_F16, 1.0f, 3730},     /* Sq < Sk */
      {lf, 1, 2, 2, 700, 129, 128, STOF_DTYPE_BF16, 0.5f, 3731},    /* Sq > Sk */
      {holes, 1, 2, 2, 300, 300, 128, STOF_DTYPE_F16, 1.0f, 3732},  /* fully masked rows */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_case(f, &cases[i], runs, NRUNS);
  stof_mask_free(lf);
  stof_mask_free(a);
  stof_mask_free(b);
  stof_mask_free(holes);
  finish(f);
}

/* The launch order's walk (order_cta) over grid z: B x H = 65600 pairs (grid y 65535, so z 2
 * and 65470 spare pairs' CTAs in the last slice), on the Hopper kernel at tile 64 with the
 * rule's groups (ORDER 2; causal, 5 tile-rows of 1-5 tiles), forced groups of 7 (a last group
 * of 3), the long rows first (ORDER 1; longformer at 1024: its global row, with the query
 * shift), and the block kernel at tile 32 (STOF_ORDER 2). Inputs made on the GPU; the output
 * poisoned with NaN, guard zones on both sides: every element written (its NaN count on the
 * device is 0), nothing outside, and sampled pairs (the first, either side of 65535, the last
 * and some between) against the CPU reference made from the same random streams. */
static void ordered_walk_over_grid_z_matches_cpu(void **state) {
  fixture *f = gpu(state);
  stof_ctx *ctx = f->ctx;
  if (f->props.cc_major != 9 || f->props.cc_minor != 0) {
    print_message("skipping: the launch order is the Hopper GPU's (compute capability 9.0)\n");
    skip();
  }
  const int64_t B = 2, H = 32800, BH = B * H, D = 64;
  const uint64_t seed_q = 4101, seed_k = 4102, seed_v = 4103;
  stof_mask *causal = NULL, *lf = NULL;
  TU_OK(ctx, stof_mask_causal(ctx, &causal));
  TU_OK(ctx, stof_mask_longformer(ctx, 32, 32, &lf));
  struct {
    const stof_mask *m;
    int64_t S;
    stof_attn_opts o;
    int tile, heavy, group; /* expected: the tile, long rows first, group size (0: > 1, any) */
  } cases[] = {
      {causal, 320, {.tile = 64}, 64, 0, 0},
      {causal, 320, {.tile = 64, .order_group = 7}, 64, 0, 7},
      {causal, 320, {.tile = 32, .kernel = STOF_ATTN_BLOCK}, 32, 0, 0},
      {lf, 1024, {0}, 64, 1, -1},
  };
  const int64_t sample[] = {0, 1, 32799, 32800, 65534, 65535, 65536, 65599, 12345, 50001};
  for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
    const int64_t S = cases[ci].S, n = BH * S * D;
    f->nrun++;
    stof_tensor *q = NULL, *k = NULL, *v = NULL, *out = NULL;
    TU_OK(ctx, stof_tensor_rand_on(ctx, STOF_DTYPE_F16, 4, TU_SHAPE(B, H, S, D), seed_q, STOF_DEVICE_CUDA, &q));
    TU_OK(ctx, stof_tensor_rand_on(ctx, STOF_DTYPE_F16, 4, TU_SHAPE(B, H, S, D), seed_k, STOF_DEVICE_CUDA, &k));
    TU_OK(ctx, stof_tensor_rand_on(ctx, STOF_DTYPE_F16, 4, TU_SHAPE(B, H, S, D), seed_v, STOF_DEVICE_CUDA, &v));
    stof_attn_plan *plan = NULL;
    TU_OK(ctx, stof_attn_plan_new(f->e, cases[ci].m, B, H, H, S, S, D, STOF_DTYPE_F16, &cases[ci].o, &plan));
    const stof_attn_choice *ch = stof_attn_plan_choice(plan);
    print_message("     %s S %lld: %s\n", stof_mask_description(cases[ci].m), (long long)S, ch->why);
    assert_int_equal(ch->tile, cases[ci].tile);
    assert_int_equal(ch->heavy_rows > 0, cases[ci].heavy);
    if (cases[ci].group > 0) assert_int_equal(ch->order_group, cases[ci].group);
    else if (cases[ci].group == 0) assert_true(ch->order_group > 1);
    else assert_true(ch->order_group <= 1);
    assert_int_equal(ch->split_rows, 0);
    /* the output between two poisoned guard zones */
    size_t bytes = (size_t)(n + 2 * GUARD) * 2;
    uint64_t buf = 0;
    TU_OK(ctx, stof_cuda_malloc(ctx, bytes, &buf));
    TU_OK(ctx, stof_cuda_memset16(ctx, buf, nan16(STOF_DTYPE_F16), (size_t)(n + 2 * GUARD)));
    TU_OK(ctx, stof_tensor_wrap(ctx, STOF_DTYPE_F16, 4, TU_SHAPE(B, H, S, D), NULL, (void *)(uintptr_t)(buf + 2 * GUARD),
                                STOF_DEVICE_CUDA, &out));
    TU_OK(ctx, stof_attn_plan_run(plan, q, k, v, out));
    TU_OK(ctx, stof_cuda_synchronize(ctx));
    int64_t nnan = -1;
    TU_OK(ctx, stof_tensor_count_nan(out, &nnan));
    if (nnan) fail_msg("case %zu: %lld output elements never written (NaN)", ci, (long long)nnan);
    uint16_t guard[2][GUARD];
    TU_OK(ctx, stof_cuda_dtoh(ctx, guard[0], buf, sizeof guard[0]));
    TU_OK(ctx, stof_cuda_dtoh(ctx, guard[1], buf + 2 * (GUARD + (uint64_t)n), sizeof guard[1]));
    for (int g = 0; g < GUARD; g++)
      if (guard[0][g] != nan16(STOF_DTYPE_F16) || guard[1][g] != nan16(STOF_DTYPE_F16))
        fail_msg("case %zu: written outside the output (guard element %d)", ci, g);
    /* sampled (b, h) pairs against the CPU, from the same random streams */
    stof_mask_format *fmt = NULL;
    TU_OK(ctx, stof_mask_format_build(ctx, cases[ci].m, 1, 1, S, S, 64, &fmt));
    uint16_t *got = malloc((size_t)(S * D) * 2);
    assert_non_null(got);
    double worst = 0;
    for (size_t si = 0; si < sizeof sample / sizeof sample[0]; si++) {
      const int64_t bh = sample[si], first = bh * S * D;
      stof_tensor *part[3] = {NULL, NULL, NULL}, *full[3] = {NULL, NULL, NULL}, *ref = NULL;
      const uint64_t seeds[3] = {seed_q, seed_k, seed_v};
      for (int t = 0; t < 3; t++) {
        TU_OK(ctx, stof_tensor_rand_range(ctx, STOF_DTYPE_F16, seeds[t], first, S * D, &part[t]));
        TU_OK(ctx, stof_tensor_new(ctx, STOF_DTYPE_F64, 4, TU_SHAPE(1, 1, S, D), STOF_DEVICE_CPU, &full[t]));
        for (int64_t i = 0; i < S * D; i++) stof_tensor_store(full[t], i, stof_tensor_load(part[t], i));
      }
      TU_OK(ctx, stof_tensor_new(ctx, STOF_DTYPE_F64, 4, TU_SHAPE(1, 1, S, D), STOF_DEVICE_CPU, &ref));
      stof_tensor_fill(ref, NAN);
      TU_OK(ctx, stof_attention_cpu(ctx, full[0], full[1], full[2], fmt, 0, ref));
      TU_OK(ctx, stof_cuda_dtoh(ctx, got, buf + 2 * (GUARD + (uint64_t)first), (size_t)(S * D) * 2));
      for (int64_t i = 0; i < S * D; i++) {
        double e = fabs(value16(STOF_DTYPE_F16, got[i]) - stof_tensor_load(ref, i));
        if (!(e <= 1e-2))
          fail_msg("case %zu: (b %lld, h %lld) row %lld d %lld: %g, want %g", ci, (long long)(bh / H),
                   (long long)(bh % H), (long long)(i / D), (long long)(i % D), value16(STOF_DTYPE_F16, got[i]),
                   stof_tensor_load(ref, i));
        if (e > worst) worst = e;
      }
      for (int t = 0; t < 3; t++) stof_tensor_free(part[t]), stof_tensor_free(full[t]);
      stof_tensor_free(ref);
    }
    print_message("ok   case %zu: %lld pairs, every element written, %zu pairs against the CPU: max abs error %.1e\n",
                  ci, (long long)BH, sizeof sample / sizeof sample[0], worst);
    free(got);
    stof_mask_format_free(fmt);
    stof_tensor_free(out);
    stof_cuda_mem_free(ctx, buf);
    stof_attn_plan_free(plan);
    stof_tensor_free(q), stof_tensor_free(k), stof_tensor_free(v);
  }
  stof_mask_free(causal);
  stof_mask_free(lf);
  finish(f);
}

/* Forced pipeline options: each plan either fails at once with an error, or runs
 * correctly (a plan that cannot run is a bug). Shapes the kernels reject must fail. */
static void forced_pipeline_options_run_or_fail_cleanly(void **state) {
  fixture *f = gpu(state);
  stof_ctx *ctx = f->ctx;
  stof_mask *m = NULL;
  TU_OK(ctx, stof_mask_suite(ctx, "longformer", 1000, &m));
  static const run_spec runs[] = {
      {STOF_ATTN_BLOCK, 128, 0, 3}, {STOF_ATTN_BLOCK, 64, 2, 4}, {STOF_ATTN_BLOCK, 128, 4, 2},
      {STOF_ATTN_BLOCK, 64, 4, 4},  {STOF_ATTN_ROW, 64, 8, 0},   {STOF_ATTN_ROW, 128, 1, 0},
  };
  for (int D = 64; D <= 128; D += 64) {
    gcase c = {m, 1, 2, 2, 1000, 1000, D, STOF_DTYPE_F16, 1.0f, 1200 + (uint64_t)D};
    prepared p;
    prepare(f, &c, &p);
    for (int i = 0; i < (int)(sizeof runs / sizeof runs[0]); i++) {
      stof_attn_opts o = {runs[i].kernel, runs[i].tile, 0, runs[i].warps, runs[i].stages};
      stof_attn_plan *plan = NULL;
      stof_status st =
          stof_attn_plan_new(f->e, m, 1, 2, 2, 1000, 1000, D, STOF_DTYPE_F16, &o, &plan);
      if (st) {
        /* refused up front: fine, if it says why */
        print_message("     D=%d %s/%d %dw %ds refused: %s: %.200s\n", D,
                      stof_attn_kernel_name(runs[i].kernel), runs[i].tile, runs[i].warps,
                      runs[i].stages, stof_status_name(st), stof_ctx_message(ctx));
        assert_null(plan);
        assert_true(strlen(stof_ctx_message(ctx)) > 0);
        stof_ctx_clear_error(ctx);
        continue;
      }
      stof_attn_plan_free(plan);
      run_case(f, &c, &p, &runs[i]);
    }
    release(&p);
  }
  /* 3 warps for a 64-row tile: the block kernel cannot do it: an error, no crash */
  stof_attn_plan *plan = (stof_attn_plan *)f;
  stof_status st = stof_attn_plan_new(f->e, m, 1, 2, 2, 1000, 1000, 64, STOF_DTYPE_F16,
                                      &(stof_attn_opts){STOF_ATTN_BLOCK, 64, 0, 3, 0}, &plan);
  assert_int_not_equal(st, STOF_OK);
  assert_null(plan);
  print_message("     block/64 with 3 warps: %s: %.200s\n", stof_status_name(st),
                stof_ctx_message(ctx));
  stof_ctx_clear_error(ctx);
  stof_mask_free(m);
  finish(f);
}

/* ---------------------------------------------------------------- errors */

static void plan_new_rejects_bad_arguments(void **state) {
  fixture *f = gpu(state);
  stof_ctx *ctx = f->ctx;
  stof_mask *causal, *empty;
  TU_OK(ctx, stof_mask_causal(ctx, &causal));
  TU_OK(ctx, stof_mask_difference(causal, causal, &empty));
  stof_attn_plan *p = NULL;
  const stof_attn_opts *o = NULL;
#define PLAN(mask, B, H, Hkv, Sq, Sk, D, dt, opts) \
  stof_attn_plan_new(f->e, mask, B, H, Hkv, Sq, Sk, D, dt, opts, &p)
  TU_ERR(ctx, PLAN(causal, 1, 2, 2, 128, 128, 96, STOF_DTYPE_F16, o), STOF_ERR_UNSUPPORTED,
         "head dim 96");
  assert_null(p);
  TU_ERR(ctx, PLAN(causal, 1, 2, 2, 128, 128, 32, STOF_DTYPE_BF16, o), STOF_ERR_UNSUPPORTED,
         "head dim 32");
  TU_ERR(ctx, PLAN(causal, 1, 2, 2, 128, 128, 64, STOF_DTYPE_F32, o), STOF_ERR_UNSUPPORTED,
         "float32");
  assert_null(p);
  TU_ERR(ctx, PLAN(causal, 1, 2, 2, 128, 128, 64, STOF_DTYPE_F64, o), STOF_ERR_UNSUPPORTED,
         "float64");
  /* a mask that keeps no pair is no error: every row gives zeros (docs/ATTENTION.md) */
  TU_OK(ctx, PLAN(empty, 1, 2, 2, 128, 128, 64, STOF_DTYPE_F16, o));
  assert_non_null(p);
  {
    uint64_t seed = 611;
    stof_tensor *hq = nonzero_uniform(ctx, STOF_DTYPE_F16, 1, 2, 128, 64, &seed, -1, 1);
    stof_tensor *dq = to_gpu(ctx, hq), *out = NULL;
    TU_OK(ctx, stof_tensor_new(ctx, STOF_DTYPE_F16, 4, TU_SHAPE(1, 2, 128, 64), STOF_DEVICE_CUDA,
                               &out));
    int64_t n = stof_tensor_numel(out);
    TU_OK(ctx, stof_cuda_memset16(ctx, (uint64_t)(uintptr_t)out->data, 0x7e00, (size_t)n));
    TU_OK(ctx, stof_attn_plan_run(p, dq, dq, dq, out));
    TU_OK(ctx, stof_cuda_synchronize(ctx));
    uint16_t *host = malloc(sizeof *host * (size_t)n);
    assert_non_null(host);
    TU_OK(ctx, stof_cuda_dtoh(ctx, host, (uint64_t)(uintptr_t)out->data, sizeof *host * (size_t)n));
    for (int64_t i = 0; i < n; i++)
      if (host[i] != 0) fail_msg("empty mask: out[%lld] = 0x%04x, not zero", (long long)i, host[i]);
    free(host);
    stof_tensor_free(hq);
    stof_tensor_free(dq);
    stof_tensor_free(out);
    stof_attn_plan_free(p);
    p = NULL;
  }
  TU_ERR(ctx, PLAN(causal, 1, 3, 2, 128, 128, 64, STOF_DTYPE_F16, o), STOF_ERR_SHAPE,
         "not a multiple");
  TU_ERR(ctx, PLAN(causal, 1, 2, 2, 0, 128, 64, STOF_DTYPE_F16, o), STOF_ERR_SHAPE, "positive");
  TU_ERR(ctx, PLAN(causal, 0, 2, 2, 128, 128, 64, STOF_DTYPE_F16, o), STOF_ERR_SHAPE, "positive");
  TU_ERR(ctx, PLAN(NULL, 1, 2, 2, 128, 128, 64, STOF_DTYPE_F16, o), STOF_ERR_ARG, "mask");
  TU_ERR(ctx, PLAN(causal, 1, 2, 2, 128, 128, 64, STOF_DTYPE_F16, &(stof_attn_opts){.tile = 96}),
         STOF_ERR_ARG, "tile 96");
  assert_null(p);
#undef PLAN
  stof_mask_free(causal);
  stof_mask_free(empty);
}

/* Copies a f16 device output back and checks it against want: no NaN, rel L2 < 1e-2. */
static void fetch_and_check(stof_ctx *ctx, const stof_tensor *out, const double *want,
                            const char *what) {
  int64_t n = stof_tensor_numel(out);
  uint16_t *host = malloc(sizeof *host * (size_t)n);
  double *got = malloc(sizeof *got * (size_t)n);
  assert_non_null(host);
  assert_non_null(got);
  TU_OK(ctx, stof_cuda_dtoh(ctx, host, (uint64_t)(uintptr_t)out->data, sizeof *host * (size_t)n));
  for (int64_t i = 0; i < n; i++) got[i] = stof_f16_to_f32(host[i]);
  for (int64_t i = 0; i < n; i++)
    if (isnan(got[i])) fail_msg("%s: out[%lld] is NaN", what, (long long)i);
  double rel = tu_rel_l2(got, want, (size_t)n);
  print_message("     %s: rel %.1e\n", what, rel);
  if (!(rel < 1e-2)) fail_msg("%s: relative L2 %g", what, rel);
  free(host);
  free(got);
}

/* Fails the test where any element of the f16 device tensor out is not the poison 0x7e00
 * (after every queued launch finished): what rejected calls must leave it. */
static void expect_still_poison(stof_ctx *ctx, const stof_tensor *out, const char *what) {
  int64_t n = stof_tensor_numel(out);
  uint16_t *host = malloc(sizeof *host * (size_t)n);
  assert_non_null(host);
  TU_OK(ctx, stof_cuda_synchronize(ctx));
  TU_OK(ctx, stof_cuda_dtoh(ctx, host, (uint64_t)(uintptr_t)out->data, sizeof *host * (size_t)n));
  for (int64_t i = 0; i < n; i++)
    if (host[i] != 0x7e00) fail_msg("%s wrote out[%lld]", what, (long long)i);
  free(host);
}

static void plan_run_rejects_bad_tensors(void **state) {
  fixture *f = gpu(state);
  stof_ctx *ctx = f->ctx;
  stof_mask *m = NULL;
  TU_OK(ctx, stof_mask_suite(ctx, "bigbird", 200, &m));
  gcase c = {m, 1, 2, 2, 200, 200, 64, STOF_DTYPE_F16, 0, 1300};
  prepared p;
  prepare(f, &c, &p);
  stof_attn_plan *plan = NULL;
  TU_OK(ctx, stof_attn_plan_new(f->e, m, 1, 2, 2, 200, 200, 64, STOF_DTYPE_F16, NULL, &plan));
  uint64_t seed = 1301;
  stof_tensor *hq = nonzero_uniform(ctx, STOF_DTYPE_F16, 1, 2, 200, 64, &seed, -1, 1);
  stof_tensor *q400 = NULL, *o400 = NULL, *k100 = NULL, *qb = NULL, *ob = NULL, *q3 = NULL,
              *ot = NULL, *out = NULL;
  TU_OK(ctx,
        stof_tensor_new(ctx, STOF_DTYPE_F16, 4, TU_SHAPE(1, 2, 400, 64), STOF_DEVICE_CUDA, &q400));
  TU_OK(ctx,
        stof_tensor_new(ctx, STOF_DTYPE_F16, 4, TU_SHAPE(1, 2, 400, 64), STOF_DEVICE_CUDA, &o400));
  TU_OK(ctx,
        stof_tensor_new(ctx, STOF_DTYPE_F16, 4, TU_SHAPE(1, 2, 100, 64), STOF_DEVICE_CUDA, &k100));
  TU_OK(ctx,
        stof_tensor_new(ctx, STOF_DTYPE_BF16, 4, TU_SHAPE(1, 2, 200, 64), STOF_DEVICE_CUDA, &qb));
  TU_OK(ctx,
        stof_tensor_new(ctx, STOF_DTYPE_BF16, 4, TU_SHAPE(1, 2, 200, 64), STOF_DEVICE_CUDA, &ob));
  TU_OK(ctx, stof_tensor_new(ctx, STOF_DTYPE_F16, 3, TU_SHAPE(2, 200, 64), STOF_DEVICE_CUDA, &q3));
  TU_OK(ctx,
        stof_tensor_new(ctx, STOF_DTYPE_F16, 4, TU_SHAPE(1, 2, 200, 64), STOF_DEVICE_CUDA, &out));
  int64_t n = stof_tensor_numel(out);
  /* out viewed with its last two dims transposed: d is not contiguous */
  TU_OK(ctx, stof_tensor_wrap(ctx, STOF_DTYPE_F16, 4, TU_SHAPE(1, 2, 200, 64),
                              TU_SHAPE(2 * 200 * 64, 200 * 64, 1, 200), out->data, STOF_DEVICE_CUDA,
                              &ot));
  TU_OK(ctx, stof_cuda_memset16(ctx, (uint64_t)(uintptr_t)out->data, 0x7e00, (size_t)n));

  TU_ERR(ctx, stof_attn_plan_run(plan, q400, p.dk, p.dv, o400), STOF_ERR_SHAPE, "the plan is for");
  TU_ERR(ctx, stof_attn_plan_run(plan, p.dq, k100, k100, out), STOF_ERR_SHAPE, "the plan is for");
  TU_ERR(ctx, stof_attn_plan_run(plan, q3, p.dk, p.dv, out), STOF_ERR_SHAPE, "q has 3 dimensions");
  TU_ERR(ctx, stof_attn_plan_run(plan, hq, p.dk, p.dv, out), STOF_ERR_ARG, "q is on the CPU");
  TU_ERR(ctx, stof_attn_plan_run(plan, qb, p.dk, p.dv, out), STOF_ERR_TYPE, "q is bfloat16");
  TU_ERR(ctx, stof_attn_plan_run(plan, p.dq, p.dk, p.dv, ob), STOF_ERR_TYPE, "out is bfloat16");
  TU_ERR(ctx, stof_attn_plan_run(plan, p.dq, p.dk, p.dv, ot), STOF_ERR_ARG, "head dim is strided");
  TU_ERR(ctx, stof_attn_plan_run(plan, p.dq, p.dk, NULL, out), STOF_ERR_ARG, "missing tensor v");

  /* nothing was launched: out is still poison; then a good run matches the reference */
  expect_still_poison(ctx, out, "a rejected run");
  TU_OK(ctx, stof_attn_plan_run(plan, p.dq, p.dk, p.dv, out));
  TU_OK(ctx, stof_cuda_synchronize(ctx));
  fetch_and_check(ctx, out, p.want, "a good run after the rejected ones");

  stof_tensor *ts[] = {hq, q400, o400, k100, qb, ob, q3, ot, out};
  for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) stof_tensor_free(ts[i]);
  stof_attn_plan_free(plan);
  release(&p);
  stof_mask_free(m);
}

/* stof_attn_plan_time (the benchmarks' timing: warm-up, then reps runs between events):
 * counts out of range are STOF_ERR_ARG before anything runs; a wrong tensor fails naming it;
 * a good call over two input sets (other addresses, the same values) fills every time with a
 * positive number, the warm-up launches come first (a call with 200 ms of warm-up takes at
 * least 100 ms longer than one without), and out is the plan's result. */
static void plan_time_times_and_rejects_bad_counts(void **state) {
  fixture *f = gpu(state);
  stof_ctx *ctx = f->ctx;
  stof_mask *m = NULL;
  TU_OK(ctx, stof_mask_suite(ctx, "longformer", 512, &m));
  gcase c = {m, 2, 4, 4, 512, 512, 64, STOF_DTYPE_F16, 0, 1400};
  prepared p;
  prepare(f, &c, &p);
  stof_attn_plan *plan = NULL;
  TU_OK(ctx, stof_attn_plan_new(f->e, m, 2, 4, 4, 512, 512, 64, STOF_DTYPE_F16, NULL, &plan));
  stof_tensor *out = NULL, *k100 = NULL;
  TU_OK(ctx, stof_tensor_new(ctx, STOF_DTYPE_F16, 4, TU_SHAPE(2, 4, 512, 64), STOF_DEVICE_CUDA, &out));
  TU_OK(ctx, stof_tensor_new(ctx, STOF_DTYPE_F16, 4, TU_SHAPE(2, 4, 100, 64), STOF_DEVICE_CUDA, &k100));
  int64_t n = stof_tensor_numel(out);
  TU_OK(ctx, stof_cuda_memset16(ctx, (uint64_t)(uintptr_t)out->data, 0x7e00, (size_t)n));
  /* a second input set at other addresses, the same values (so that out is the plan's result
   * whichever set ran last) */
  stof_tensor *q2 = NULL, *k2 = NULL, *v2 = NULL;
  TU_OK(ctx, stof_tensor_new(ctx, STOF_DTYPE_F16, 4, TU_SHAPE(2, 4, 512, 64), STOF_DEVICE_CUDA, &q2));
  TU_OK(ctx, stof_tensor_new(ctx, STOF_DTYPE_F16, 4, TU_SHAPE(2, 4, 512, 64), STOF_DEVICE_CUDA, &k2));
  TU_OK(ctx, stof_tensor_new(ctx, STOF_DTYPE_F16, 4, TU_SHAPE(2, 4, 512, 64), STOF_DEVICE_CUDA, &v2));
  TU_OK(ctx, stof_cuda_dtod(ctx, (uint64_t)(uintptr_t)q2->data, (uint64_t)(uintptr_t)p.dq->data, 2 * (size_t)n));
  TU_OK(ctx, stof_cuda_dtod(ctx, (uint64_t)(uintptr_t)k2->data, (uint64_t)(uintptr_t)p.dk->data, 2 * (size_t)n));
  TU_OK(ctx, stof_cuda_dtod(ctx, (uint64_t)(uintptr_t)v2->data, (uint64_t)(uintptr_t)p.dv->data, 2 * (size_t)n));
  stof_tensor *q[2] = {p.dq, q2}, *k[2] = {p.dk, k2}, *v[2] = {p.dv, v2};
  stof_tensor *kb[2] = {p.dk, k100}, *vb[2] = {p.dv, k100};
  float ts[8];
  TU_ERR(ctx, stof_attn_plan_time(plan, q, k, v, 0, out, 4, 0, ts, NULL), STOF_ERR_ARG, "0 input sets (1 to 8)");
  TU_ERR(ctx, stof_attn_plan_time(plan, q, k, v, 9, out, 4, 0, ts, NULL), STOF_ERR_ARG, "9 input sets");
  TU_ERR(ctx, stof_attn_plan_time(plan, q, k, v, 2, out, 0, 0, ts, NULL), STOF_ERR_ARG, "reps = 0 (1 to 1000000)");
  TU_ERR(ctx, stof_attn_plan_time(plan, q, k, v, 2, out, 4, -1, ts, NULL), STOF_ERR_ARG, "warmup_ms = -1");
  TU_ERR(ctx, stof_attn_plan_time(plan, q, k, v, 2, out, 4, 60001, ts, NULL), STOF_ERR_ARG, "warmup_ms = 60001");
  TU_ERR(ctx, stof_attn_plan_time(plan, q, k, v, 2, out, 4, 0, NULL, NULL), STOF_ERR_ARG, "no times array");
  /* nothing ran: out is still poison */
  expect_still_poison(ctx, out, "a rejected call");
  /* the second set's k and v are the wrong shape: the warm-up's second launch fails */
  TU_ERR(ctx, stof_attn_plan_time(plan, q, kb, vb, 2, out, 4, 0, ts, NULL), STOF_ERR_SHAPE, "the plan is for");
  for (int i = 0; i < 8; i++) ts[i] = -1.0f;
  struct timespec t0, t1, t2;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  float median = -1.0f;
  TU_OK(ctx, stof_attn_plan_time(plan, q, k, v, 2, out, 8, 0, ts, &median));
  clock_gettime(CLOCK_MONOTONIC, &t1);
  for (int i = 0; i < 8; i++)
    if (!(ts[i] > 0.0f && ts[i] < 1000.0f)) fail_msg("run %d: %g ms", i, (double)ts[i]);
  /* the median: the upper middle of the 8 runs, ts left in run order */
  int below = 0, above = 0, equal = 0;
  for (int i = 0; i < 8; i++) below += ts[i] < median, above += ts[i] > median, equal += ts[i] == median;
  if (!equal || below > 4 || above > 3) fail_msg("median %g: %d runs below, %d above", (double)median, below, above);
  TU_OK(ctx, stof_attn_plan_time(plan, q, k, v, 2, out, 8, 200, ts, NULL));
  clock_gettime(CLOCK_MONOTONIC, &t2);
  double plain = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-6;
  double warm = (double)(t2.tv_sec - t1.tv_sec) * 1e3 + (double)(t2.tv_nsec - t1.tv_nsec) * 1e-6;
  print_message("     8 runs: %.2f ms of wall time; with 200 ms of warm-up: %.2f ms\n", plain, warm);
  if (!(warm > plain + 100.0)) fail_msg("warmup_ms 200 took %.2f ms, without %.2f ms", warm, plain);
  fetch_and_check(ctx, out, p.want, "out after the timed runs");
  stof_tensor_free(out);
  stof_tensor_free(k100);
  stof_tensor_free(q2);
  stof_tensor_free(k2);
  stof_tensor_free(v2);
  stof_attn_plan_free(plan);
  release(&p);
  stof_mask_free(m);
}

/* The TMA plan's cache of K / V maps (Hopper only): two input sets with different values
 * run alternately, each run into a poisoned output checked against its own set's reference,
 * encode two layouts and no more; 70 other K / V addresses (more than the cache's 64) evict
 * the first set's maps, which a later run encodes again, still matching its reference. */
static void tma_map_cache_keeps_each_layout_apart(void **state) {
  fixture *f = gpu(state);
  stof_ctx *ctx = f->ctx;
  if (f->props.cc_major != 9 || f->props.cc_minor != 0) {
    print_message("skipping: TMA is the Hopper kernel's (compute capability 9.0)\n");
    skip();
  }
  stof_mask *m = NULL;
  TU_OK(ctx, stof_mask_suite(ctx, "sliding", 1000, &m));
  gcase ca = {m, 2, 3, 3, 1000, 1000, 64, STOF_DTYPE_F16, 0, 4100}, cb = ca;
  cb.seed = 4200;
  prepared pa, pb;
  prepare(f, &ca, &pa);
  prepare(f, &cb, &pb);
  stof_attn_plan *plan = NULL;
  stof_attn_opts o = {.kernel = STOF_ATTN_BLOCK, .tile = 64, .tma = 1};
  TU_OK(ctx, stof_attn_plan_new(f->e, m, 2, 3, 3, 1000, 1000, 64, STOF_DTYPE_F16, &o, &plan));
  assert_true(stof_attn_plan_choice(plan)->tma);
  assert_int_equal(kernels_attn_plan_tmap_encodes(plan), 0);
  stof_tensor *out = NULL;
  TU_OK(ctx, stof_tensor_new(ctx, STOF_DTYPE_F16, 4, TU_SHAPE(2, 3, 1000, 64), STOF_DEVICE_CUDA, &out));
  int64_t n = stof_tensor_numel(out);
  for (int r = 0; r < 6; r++) {
    prepared *p = r % 2 ? &pb : &pa;
    TU_OK(ctx, stof_cuda_memset16(ctx, (uint64_t)(uintptr_t)out->data, 0x7e00, (size_t)n));
    TU_OK(ctx, stof_attn_plan_run(plan, p->dq, p->dk, p->dv, out));
    TU_OK(ctx, stof_cuda_synchronize(ctx));
    char what[64];
    snprintf(what, sizeof what, "run %d (set %c)", r, r % 2 ? 'b' : 'a');
    fetch_and_check(ctx, out, p->want, what);
  }
  assert_int_equal(kernels_attn_plan_tmap_encodes(plan), 2);
  /* 70 more layouts: K and V at 16-byte steps into a scratch buffer (values not checked) */
  stof_tensor *scratch = NULL;
  TU_OK(ctx, stof_tensor_new(ctx, STOF_DTYPE_F16, 1, TU_SHAPE(n + 70 * 8), STOF_DEVICE_CUDA, &scratch));
  TU_OK(ctx, stof_cuda_memset16(ctx, (uint64_t)(uintptr_t)scratch->data, 0x3c00, (size_t)(n + 70 * 8)));
  for (int i = 1; i <= 70; i++) {
    uint64_t kv = (uint64_t)(uintptr_t)scratch->data + 16 * (uint64_t)i;
    TU_OK(ctx, stof_attn_plan_launch(plan, (uint64_t)(uintptr_t)pa.dq->data, kv, kv, (uint64_t)(uintptr_t)out->data));
  }
  TU_OK(ctx, stof_cuda_synchronize(ctx));
  assert_int_equal(kernels_attn_plan_tmap_encodes(plan), 72);
  TU_OK(ctx, stof_cuda_memset16(ctx, (uint64_t)(uintptr_t)out->data, 0x7e00, (size_t)n));
  TU_OK(ctx, stof_attn_plan_run(plan, pa.dq, pa.dk, pa.dv, out));
  TU_OK(ctx, stof_cuda_synchronize(ctx));
  assert_int_equal(kernels_attn_plan_tmap_encodes(plan), 73); /* evicted, encoded again */
  fetch_and_check(ctx, out, pa.want, "set a after 70 other layouts");
  stof_tensor_free(scratch);
  stof_tensor_free(out);
  stof_attn_plan_free(plan);
  release(&pa);
  release(&pb);
  stof_mask_free(m);
}

/* ---------------------------------------------------------------- strided layouts */

/* The kernel variants, each forced: portable mma.sync (tiles 32, 64, 128), Hopper wgmma with
 * cp.async and with TMA K/V loads (tiles 64, 128; skipped off compute capability 9.0), and
 * row-wise. */
typedef struct layout_variant {
  const char *name;
  stof_attn_kernel kernel;
  int tile, portable, tma, hopper;
} layout_variant;

static const layout_variant layout_variants[] = {
    {"portable/32", STOF_ATTN_BLOCK, 32, 1, 0, 0},
    {"portable/64", STOF_ATTN_BLOCK, 64, 1, 0, 0},   {"portable/128", STOF_ATTN_BLOCK, 128, 1, 0, 0},
    {"cp.async/64", STOF_ATTN_BLOCK, 64, 0, -1, 1},  {"cp.async/128", STOF_ATTN_BLOCK, 128, 0, -1, 1},
    {"tma/64", STOF_ATTN_BLOCK, 64, 0, 1, 1},        {"tma/128", STOF_ATTN_BLOCK, 128, 0, 1, 1},
    {"row/64", STOF_ATTN_ROW, 64, 0, 0, 0},
};

/* Copies a contiguous [B, n, S, D] host array of 16-bit elements into buf (elements) at the
 * strides st {batch, head, row}. */
static void scatter16(uint16_t *buf, const uint16_t *src, int64_t B, int64_t n, int64_t S, int64_t D,
                      const int64_t st[3]) {
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < n; h++)
      for (int64_t i = 0; i < S; i++)
        memcpy(buf + b * st[0] + h * st[1] + i * st[2], src + ((b * n + h) * S + i) * D,
               sizeof *buf * (size_t)D);
}

static uint16_t *fetch16(fixture *f, const stof_tensor *t) {
  size_t n = (size_t)stof_tensor_numel(t);
  uint16_t *h = malloc(sizeof *h * n);
  assert_non_null(h);
  TU_OK(f->ctx, stof_cuda_dtoh(f->ctx, h, (uint64_t)(uintptr_t)t->data, sizeof *h * n));
  return h;
}

/* One case in two layouts under every variant:
 *   "bshd":  Q, K, V each a head view of its own [B, S, heads * D] buffer, O written into
 *            [B, Sq, H + 1, D] (the last head slot of every row is a gap), by
 *            stof_attn_plan_launch_strided;
 *   "fused": Q, K, V views of one [B, S, H + 2 Hkv, D] buffer (q heads, then k, then v: a
 *            c_attn output), O into [B, Sq, H, D], by stof_attn_plan_run on strided views.
 * Input gaps are NaN too (a read outside the elements would show in the output); after the
 * run every element of O matches the reference and every other element of O's buffer (gaps,
 * a guard zone after it) is still NaN. */
static void check_layouts(fixture *f, const gcase *c) {
  stof_ctx *ctx = f->ctx;
  prepared p;
  prepare(f, c, &p);
  int64_t B = c->B, H = c->H, Hkv = c->Hkv, Sq = c->Sq, Sk = c->Sk, D = c->D;
  assert_int_equal(Sq, Sk); /* the fused layout has one S */
  uint16_t *hq = fetch16(f, p.dq), *hk = fetch16(f, p.dk), *hv = fetch16(f, p.dv);
  uint16_t nan = nan16(c->dtype);
  int hopper = f->props.cc_major == 9 && f->props.cc_minor == 0;
  char ct[160];
  case_text(c, ct, sizeof ct);

  for (int lay = 0; lay < 2; lay++) {
    /* input buffers (one for fused) and their layout */
    int64_t NH = H + 2 * Hkv;
    stof_attn_layout l;
    size_t nin[3];
    int64_t obytes_rows = lay == 0 ? H + 1 : H, nout = B * Sq * obytes_rows * D + GUARD;
    if (lay == 0) {
      l = (stof_attn_layout){{Sq * H * D, D, H * D}, {Sk * Hkv * D, D, Hkv * D}, {Sk * Hkv * D, D, Hkv * D},
                             {Sq * (H + 1) * D, D, (H + 1) * D}};
      nin[0] = (size_t)(B * Sq * H * D), nin[1] = nin[2] = (size_t)(B * Sk * Hkv * D);
    } else {
      l = (stof_attn_layout){{Sq * NH * D, D, NH * D}, {Sq * NH * D, D, NH * D}, {Sq * NH * D, D, NH * D},
                             {Sq * H * D, D, H * D}};
      nin[0] = (size_t)(B * Sq * NH * D), nin[1] = nin[2] = 0;
    }
    uint64_t dbuf[3] = {0, 0, 0}, dout = 0, addr[3];
    for (int t = 0; t < 3; t++) {
      if (!nin[t]) continue;
      uint16_t *hb = malloc(sizeof *hb * nin[t]);
      assert_non_null(hb);
      for (size_t i = 0; i < nin[t]; i++) hb[i] = nan;
      if (lay == 0) {
        scatter16(hb, t == 0 ? hq : t == 1 ? hk : hv, B, t ? Hkv : H, t ? Sk : Sq, D, t == 0 ? l.q : t == 1 ? l.k : l.v);
      } else {
        scatter16(hb, hq, B, H, Sq, D, l.q);
        scatter16(hb + H * D, hk, B, Hkv, Sk, D, l.k);
        scatter16(hb + (H + Hkv) * D, hv, B, Hkv, Sk, D, l.v);
      }
      TU_OK(ctx, stof_cuda_malloc(ctx, sizeof *hb * nin[t], &dbuf[t]));
      TU_OK(ctx, stof_cuda_htod(ctx, dbuf[t], hb, sizeof *hb * nin[t]));
      free(hb);
    }
    if (lay == 0) addr[0] = dbuf[0], addr[1] = dbuf[1], addr[2] = dbuf[2];
    else addr[0] = dbuf[0], addr[1] = dbuf[0] + (uint64_t)(H * D * 2), addr[2] = dbuf[0] + (uint64_t)((H + Hkv) * D * 2);
    TU_OK(ctx, stof_cuda_malloc(ctx, sizeof(uint16_t) * (size_t)nout, &dout));
    uint16_t *host = malloc(sizeof *host * (size_t)nout);
    assert_non_null(host);

    for (size_t vi = 0; vi < sizeof layout_variants / sizeof layout_variants[0]; vi++) {
      const layout_variant *lv = &layout_variants[vi];
      if (lv->hopper && !hopper) continue;
      char head[256];
      snprintf(head, sizeof head, "%s | %s %s", ct, lay ? "fused" : "bshd ", lv->name);
      f->nrun++;
      stof_attn_opts o = {.kernel = lv->kernel, .tile = lv->tile, .scale = c->scale, .portable = lv->portable,
                          .tma = lv->tma};
      stof_attn_plan *plan = NULL;
      stof_status st = stof_attn_plan_new(f->e, c->mask, B, H, Hkv, Sq, Sk, D, c->dtype, &o, &plan);
      if (st) {
        run_failed(f, head, "plan_new: %s: %s", stof_status_name(st), stof_ctx_message(ctx));
        continue;
      }
      const stof_attn_choice *ch = stof_attn_plan_choice(plan);
      if (ch->kernel != lv->kernel || ch->tile != lv->tile || ch->hopper != lv->hopper ||
          ch->tma != (lv->tma > 0)) {
        run_failed(f, head, "chose %s/%d hopper %d tma %d", stof_attn_kernel_name(ch->kernel), ch->tile,
                   ch->hopper, ch->tma);
        stof_attn_plan_free(plan);
        continue;
      }
      TU_OK(ctx, stof_cuda_memset16(ctx, dout, nan, (size_t)nout));
      if (lay == 0) {
        st = stof_attn_plan_launch_strided(plan, addr[0], addr[1], addr[2], dout, &l);
      } else {
        stof_tensor *tq = NULL, *tk = NULL, *tv = NULL, *to = NULL;
        TU_OK(ctx, stof_tensor_wrap(ctx, c->dtype, 4, TU_SHAPE(B, H, Sq, D), TU_SHAPE(l.q[0], l.q[1], l.q[2], 1),
                                    (void *)(uintptr_t)addr[0], STOF_DEVICE_CUDA, &tq));
        TU_OK(ctx, stof_tensor_wrap(ctx, c->dtype, 4, TU_SHAPE(B, Hkv, Sk, D), TU_SHAPE(l.k[0], l.k[1], l.k[2], 1),
                                    (void *)(uintptr_t)addr[1], STOF_DEVICE_CUDA, &tk));
        TU_OK(ctx, stof_tensor_wrap(ctx, c->dtype, 4, TU_SHAPE(B, Hkv, Sk, D), TU_SHAPE(l.v[0], l.v[1], l.v[2], 1),
                                    (void *)(uintptr_t)addr[2], STOF_DEVICE_CUDA, &tv));
        TU_OK(ctx, stof_tensor_wrap(ctx, c->dtype, 4, TU_SHAPE(B, H, Sq, D), TU_SHAPE(l.o[0], l.o[1], l.o[2], 1),
                                    (void *)(uintptr_t)dout, STOF_DEVICE_CUDA, &to));
        st = stof_attn_plan_run(plan, tq, tk, tv, to);
        stof_tensor_free(tq), stof_tensor_free(tk), stof_tensor_free(tv), stof_tensor_free(to);
      }
      if (st || (st = stof_cuda_synchronize(ctx)) ||
          (st = stof_cuda_dtoh(ctx, host, dout, sizeof *host * (size_t)nout))) {
        run_failed(f, head, "run: %s: %s", stof_status_name(st), stof_ctx_message(ctx));
        stof_attn_plan_free(plan);
        continue;
      }
      /* every element of O against the reference; everything else of the buffer still NaN */
      int64_t nnan = 0, gap_written = -1;
      double num = 0, den = 0, maxerr = 0;
      char *isout = calloc((size_t)nout, 1);
      assert_non_null(isout);
      for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
          for (int64_t i = 0; i < Sq; i++)
            for (int64_t x = 0; x < D; x++) {
              int64_t at = b * l.o[0] + h * l.o[1] + i * l.o[2] + x;
              isout[at] = 1;
              double g = value16(c->dtype, host[at]), w = p.want[((b * H + h) * Sq + i) * D + x];
              if (isnan(g)) {
                nnan++;
                continue;
              }
              double e = fabs(g - w);
              if (e > maxerr) maxerr = e;
              num += (g - w) * (g - w), den += w * w;
            }
      for (int64_t i = 0; i < nout && gap_written < 0; i++)
        if (!isout[i] && host[i] != nan) gap_written = i;
      free(isout);
      double rel = nnan ? INFINITY : den > 0 ? sqrt(num / den) : (num > 0 ? INFINITY : 0);
      double abs_tol = c->dtype == STOF_DTYPE_BF16 ? 2e-2 : 1e-2;
      int ok = !nnan && maxerr <= abs_tol && rel < 1e-2 && gap_written < 0;
      print_message("%s %s | rel %.1e max %.1e\n", ok ? "ok  " : "FAIL", head, rel, maxerr);
      if (!ok) {
        f->nfail++;
        if (nnan) print_message("     %lld NaN in O\n", (long long)nnan);
        if (gap_written >= 0)
          print_message("     element %lld of O's buffer is outside O and was written\n", (long long)gap_written);
      }
      stof_attn_plan_free(plan);
    }
    free(host);
    stof_cuda_mem_free(ctx, dout);
    for (int t = 0; t < 3; t++)
      if (dbuf[t]) stof_cuda_mem_free(ctx, dbuf[t]);
  }
  free(hq), free(hk), free(hv);
  release(&p);
}

/* Every kernel variant on Q/K/V read from [B, S, H, D] and fused [B, S, 3, H, D] buffers and
 * O written into [B, S, H, D] (with gaps): f16 and bf16, D 64 and 128, Hkv 4 and 2, four
 * masks at S = 77, a rotating subset at S = 1000 (the CPU reference's time). */
static void strided_layouts_match_cpu(void **state) {
  fixture *f = gpu(state);
  static const char *const masks[] = {"dense", "causal", "bigbird", "document"};
  uint64_t seed = 5000;
  for (int si = 0; si < 2; si++) {
    int64_t S = si ? 1000 : 77;
    for (int mi = 0; mi < 4; mi++) {
      stof_mask *m = NULL;
      TU_OK(f->ctx, stof_mask_suite(f->ctx, masks[mi], S, &m));
      for (int combo = 0; combo < 8; combo++) {
        if (si && combo != mi && combo != 7 - mi) continue; /* S = 1000: two combos per mask */
        int64_t D = combo & 1 ? 128 : 64, Hkv = combo & 4 ? 2 : 4;
        stof_dtype dt = combo & 2 ? STOF_DTYPE_BF16 : STOF_DTYPE_F16;
        gcase c = {m, 2, 4, Hkv, S, S, D, dt, 0, seed++};
        check_layouts(f, &c);
      }
      stof_mask_free(m);
    }
  }
  finish(f);
}

/* Layouts the kernels cannot take are refused before anything runs. */
static void launch_strided_rejects_bad_layouts(void **state) {
  fixture *f = gpu(state);
  stof_ctx *ctx = f->ctx;
  stof_mask *m = NULL;
  TU_OK(ctx, stof_mask_suite(ctx, "causal", 128, &m));
  stof_attn_plan *plan = NULL;
  TU_OK(ctx, stof_attn_plan_new(f->e, m, 1, 2, 2, 128, 128, 64, STOF_DTYPE_F16, NULL, &plan));
  uint64_t buf = 0;
  TU_OK(ctx, stof_cuda_malloc(ctx, 4 * 2 * 128 * 64 * 2, &buf));
  uint64_t q = buf, k = buf + 2 * 128 * 64 * 2, v = k + 2 * 128 * 64 * 2, o = v + 2 * 128 * 64 * 2;
  stof_attn_layout l = {{0, 128 * 64, 64}, {0, 128 * 64, 64}, {0, 128 * 64, 64}, {0, 128 * 64, 64}};
  TU_OK(ctx, stof_attn_plan_launch_strided(plan, q, k, v, o, &l));
  TU_ERR(ctx, stof_attn_plan_launch_strided(plan, q + 2, k, v, o, &l), STOF_ERR_ARG, "q at 0x");
  l.k[2] = 68;
  TU_ERR(ctx, stof_attn_plan_launch_strided(plan, q, k, v, o, &l), STOF_ERR_ARG, "k's row stride 68");
  l.k[2] = 64, l.o[1] = -8;
  TU_ERR(ctx, stof_attn_plan_launch_strided(plan, q, k, v, o, &l), STOF_ERR_ARG, "out's head stride -8");
  l.o[1] = 128 * 64, l.v[2] = (int64_t)1 << 24;
  TU_ERR(ctx, stof_attn_plan_launch_strided(plan, q, k, v, o, &l), STOF_ERR_ARG, "under 2^24");
  TU_OK(ctx, stof_cuda_synchronize(ctx));
  stof_cuda_mem_free(ctx, buf);
  stof_attn_plan_free(plan);
  stof_mask_free(m);
}

/* A plan runs again on new inputs (and its format comes from the engine's cache). */
static void plan_runs_again_on_new_inputs(void **state) {
  fixture *f = gpu(state);
  stof_mask *m = suite_mask(f, 3, 640); /* causal_sliding */
  for (int rep = 0; rep < 3; rep++) {
    gcase c = {m, 2, 2, 1, 640, 640, 64, STOF_DTYPE_F16, 0, 1400 + (uint64_t)rep};
    static const run_spec runs[] = {{STOF_ATTN_AUTO, 0, 0, 0}};
    check_case(f, &c, runs, 1);
  }
  stof_mask_free(m);
  finish(f);
}

/* A live plan keeps working while later plans compile more kernel variants than the
 * engine keeps (it holds 32); two plans of one engine, alive together, run one after
 * the other. */
static void plan_outlives_many_other_variants(void **state) {
  fixture *f = gpu(state);
  stof_ctx *ctx = f->ctx;
  stof_mask *m = suite_mask(f, 2, 300); /* sliding(32) */
  gcase c = {m, 1, 2, 2, 300, 300, 64, STOF_DTYPE_F16, 1.0f, 1500};
  stof_attn_plan *first = NULL, *second = NULL;
  TU_OK(ctx, stof_attn_plan_new(f->e, m, 1, 2, 2, 300, 300, 64, STOF_DTYPE_F16,
                                &(stof_attn_opts){STOF_ATTN_ROW, 64, c.scale, 1, 0}, &first));
  /* other variants (kernel, tile, warps, stages, head dim, dtype), until 40 compiled;
   * those the kernels refuse (an error at plan time) do not count */
  int nvariant = 1;
  for (int dd = 0; dd < 4 && nvariant < 40; dd++)
    for (int kind = 0; kind < 2 && nvariant < 40; kind++)
      for (int tile = 64; tile <= 128 && nvariant < 40; tile += 64)
        for (int w = 1; w <= 32 && nvariant < 40; w++)
          for (int stages = 2; stages <= (kind ? 4 : 2) && nvariant < 40; stages++) {
            if (dd == 0 && kind == 0 && tile == 64 && w == 1) continue;
            if (kind == 1 && tile / w != 16 && tile / w != 32) continue;
            stof_attn_opts o = {kind ? STOF_ATTN_BLOCK : STOF_ATTN_ROW, tile, 0, w,
                                kind ? stages : 0};
            stof_attn_plan *other = NULL;
            stof_status st =
                stof_attn_plan_new(f->e, m, 1, 2, 2, 300, 300, dd % 2 ? 128 : 64,
                                   dd / 2 ? STOF_DTYPE_BF16 : STOF_DTYPE_F16, &o, &other);
            if (st) {
              assert_null(other);
              stof_ctx_clear_error(ctx);
              continue;
            }
            nvariant++;
            stof_attn_plan_free(other);
          }
  print_message("     %d kernel variants compiled in one engine\n", nvariant);
  assert_true(nvariant > 32);
  TU_OK(ctx, stof_attn_plan_new(f->e, m, 1, 2, 2, 300, 300, 64, STOF_DTYPE_F16,
                                &(stof_attn_opts){STOF_ATTN_BLOCK, 64, c.scale, 0, 0}, &second));
  prepared p;
  prepare(f, &c, &p);
  int64_t n = c.B * c.H * c.Sq * c.D;
  stof_tensor *o1 = NULL, *o2 = NULL;
  TU_OK(ctx,
        stof_tensor_new(ctx, STOF_DTYPE_F16, 4, TU_SHAPE(1, 2, 300, 64), STOF_DEVICE_CUDA, &o1));
  TU_OK(ctx,
        stof_tensor_new(ctx, STOF_DTYPE_F16, 4, TU_SHAPE(1, 2, 300, 64), STOF_DEVICE_CUDA, &o2));
  TU_OK(ctx, stof_cuda_memset16(ctx, (uint64_t)(uintptr_t)o1->data, 0x7e00, (size_t)n));
  TU_OK(ctx, stof_cuda_memset16(ctx, (uint64_t)(uintptr_t)o2->data, 0x7e00, (size_t)n));
  stof_status st = stof_attn_plan_run(first, p.dq, p.dk, p.dv, o1);
  if (!st) st = stof_attn_plan_run(second, p.dq, p.dk, p.dv, o2);
  if (!st) st = stof_cuda_synchronize(ctx);
  if (st) fail_msg("the plans no longer run: %s: %s", stof_status_name(st), stof_ctx_message(ctx));
  fetch_and_check(ctx, o1, p.want, "the first plan (row/64, 1 warp) after the others");
  fetch_and_check(ctx, o2, p.want, "a second plan (block/64) alive beside it");
  stof_tensor_free(o1);
  stof_tensor_free(o2);
  stof_attn_plan_free(first);
  stof_attn_plan_free(second);
  release(&p);
  stof_mask_free(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(plan_new_rejects_bad_arguments, setup, teardown),
      cmocka_unit_test_setup_teardown(plan_run_rejects_bad_tensors, setup, teardown),
      cmocka_unit_test_setup_teardown(plan_time_times_and_rejects_bad_counts, setup, teardown),
      cmocka_unit_test_setup_teardown(tma_map_cache_keeps_each_layout_apart, setup, teardown),
      cmocka_unit_test_setup_teardown(suite_masks_at_1x128, setup, teardown),
      cmocka_unit_test_setup_teardown(suite_masks_at_2x512, setup, teardown),
      cmocka_unit_test_setup_teardown(suite_masks_at_1x1000, setup, teardown),
      cmocka_unit_test_setup_teardown(suite_masks_at_1x3000, setup, teardown),
      cmocka_unit_test_setup_teardown(head_dim_128_matches_cpu, setup, teardown),
      cmocka_unit_test_setup_teardown(bf16_matches_cpu, setup, teardown),
      cmocka_unit_test_setup_teardown(grouped_query_matches_cpu, setup, teardown),
      cmocka_unit_test_setup_teardown(different_query_and_key_lengths_match_cpu, setup, teardown),
      cmocka_unit_test_setup_teardown(fully_masked_rows_give_exact_zeros, setup, teardown),
      cmocka_unit_test_setup_teardown(per_batch_document_mask_matches_cpu, setup, teardown),
      cmocka_unit_test_setup_teardown(per_head_masks_match_cpu, setup, teardown),
      cmocka_unit_test_setup_teardown(forced_pipeline_options_run_or_fail_cleanly, setup, teardown),
      cmocka_unit_test_setup_teardown(every_kernel_variant_at_small_shapes, setup, teardown),
      cmocka_unit_test_setup_teardown(split_rows_match_cpu, setup, teardown),
      cmocka_unit_test_setup_teardown(launch_order_matches_cpu, setup, teardown),
      cmocka_unit_test_setup_teardown(grouped_order_matches_cpu, setup, teardown),
      cmocka_unit_test_setup_teardown(key64_matches_cpu, setup, teardown),
      cmocka_unit_test_setup_teardown(qshift_matches_cpu, setup, teardown),
      cmocka_unit_test_setup_teardown(lazy_rescale_matches_cpu, setup, teardown),
      cmocka_unit_test_setup_teardown(ordered_walk_over_grid_z_matches_cpu, setup, teardown),
      cmocka_unit_test_setup_teardown(plan_runs_again_on_new_inputs, setup, teardown),
      cmocka_unit_test_setup_teardown(strided_layouts_match_cpu, setup, teardown),
      cmocka_unit_test_setup_teardown(launch_strided_rejects_bad_layouts, setup, teardown),
      cmocka_unit_test_setup_teardown(plan_outlives_many_other_variants, setup, teardown),
#define FORMAT_GPU_TEST(name) cmocka_unit_test_setup_teardown(name, format_gpu_setup, format_gpu_teardown)
      FORMAT_GPU_TEST(gpu_format_matches_cpu_on_suite_masks),
      FORMAT_GPU_TEST(gpu_format_matches_cpu_on_other_kinds_and_combinations),
      FORMAT_GPU_TEST(gpu_format_matches_cpu_with_unequal_lengths),
      FORMAT_GPU_TEST(gpu_format_matches_cpu_on_per_batch_documents),
      FORMAT_GPU_TEST(gpu_format_matches_cpu_at_small_sizes),
      FORMAT_GPU_TEST(gpu_format_build_times_against_cpu),
      FORMAT_GPU_TEST(gpu_format_public_entry_cache_and_refusals),
      FORMAT_GPU_TEST(engine_builds_long_sequence_formats_on_the_gpu),
      FORMAT_GPU_TEST(engine_drops_the_selectors_format_for_another_tile),
      FORMAT_GPU_TEST(engine_drops_the_unshifted_format),
#undef FORMAT_GPU_TEST
#define GEMM_GPU_TEST(name) cmocka_unit_test_setup_teardown(name, gemm_gpu_setup, gemm_gpu_teardown)
      GEMM_GPU_TEST(gemm_plan_and_run_errors),
      GEMM_GPU_TEST(gemm_f16_every_epilogue_matches_cpu),
      GEMM_GPU_TEST(gemm_bf16_every_epilogue_matches_cpu),
      GEMM_GPU_TEST(gemm_f32_every_epilogue_matches_cpu),
      GEMM_GPU_TEST(gemm_batched_transposed_in_place_matches_cpu),
      GEMM_GPU_TEST(gemm_plan_replays_in_a_cuda_graph),
      GEMM_GPU_TEST(gemm_f16_large_throughput),
#undef GEMM_GPU_TEST
  };
  /* STOF_TEST_FILTER / STOF_TEST_SKIP: one cmocka pattern each (e.g. "*strided*") */
  if (getenv("STOF_TEST_FILTER")) cmocka_set_test_filter(getenv("STOF_TEST_FILTER"));
  if (getenv("STOF_TEST_SKIP")) cmocka_set_skip_filter(getenv("STOF_TEST_SKIP"));
  return cmocka_run_group_tests_name("kernels_gpu", tests, NULL, NULL) ? 1 : 0;
}
