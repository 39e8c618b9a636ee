/*
 * The vendor GEMM (kernels/gemm.c, cuBLASLt) on a real GPU, against stof_gemm_cpu on the
 * same (rounded) inputs with a float64 output. Run by test_kernels_gpu (main.c, label gpu);
 * every test skips when stof_cuda_init says STOF_ERR_NO_DEVICE.
 *
 * Every run poisons its output and a guard zone past it with NaN first, then checks: no
 * NaN, relative L2 error below 1e-2 (float16, bfloat16) or 1e-5 (float32), guard zone
 * untouched. Shapes too large for a quick CPU reference are checked on a sample of rows
 * (the first, middle and last 16). A failing run prints why and the test goes on, failing
 * at the end, so one log shows every broken configuration.
 */
#include "../core/testutil.h"

#include <stdio.h>

#include <stof/kernels.h>

#include "gemm_gpu.h"

typedef struct gfix {
  tu_heap heap;
  stof_ctx *ctx;
  uint64_t ws; /* STOF_GEMM_MAX_WORKSPACE bytes of workspace */
  int nrun, nfail;
} gfix;

int gemm_gpu_setup(void **state) {
  gfix *f = calloc(1, sizeof *f);
  if (!f) return -1;
  f->ctx = tu_ctx_new(&f->heap);
  *state = f;
  return 0;
}

int gemm_gpu_teardown(void **state) {
  gfix *f = *state;
  stof_cuda_set_stream(f->ctx, NULL);
  stof_cuda_mem_free(f->ctx, f->ws);
  stof_ctx_clear_error(f->ctx);
  tu_ctx_free(f->ctx, &f->heap);
  free(f);
  return 0;
}

/* The fixture with the GPU ready and a workspace; skips the test without a GPU. */
static gfix *gpu(void **state) {
  gfix *f = *state;
  stof_status st = stof_cuda_init(f->ctx);
  if (st == STOF_ERR_NO_DEVICE) {
    print_message("skipping: %s\n", stof_ctx_message(f->ctx));
    stof_ctx_clear_error(f->ctx);
    skip();
  }
  TU_OK(f->ctx, st);
  TU_OK(f->ctx, stof_cuda_malloc(f->ctx, STOF_GEMM_MAX_WORKSPACE, &f->ws));
  return f;
}

static void finish(gfix *f) {
  print_message("%d of %d runs failed\n", f->nfail, f->nrun);
  if (f->nfail) fail_msg("%d of %d runs failed (see the lines marked FAIL above)", f->nfail, f->nrun);
}

enum { GUARD = 1024 }; /* poisoned elements past the output's end */

static size_t esize(stof_dtype dt) { return stof_dtype_size(dt); }

/* NaN bit patterns, and a poison of n elements at p (on the current stream). */
static uint32_t nan_bits(stof_dtype dt) {
  return dt == STOF_DTYPE_F32 ? 0x7fc00000u : dt == STOF_DTYPE_BF16 ? 0x7fc0u : 0x7e00u;
}
static void poison(stof_ctx *ctx, uint64_t p, stof_dtype dt, size_t n) {
  if (dt == STOF_DTYPE_F32)
    TU_OK(ctx, stof_cuda_memset32(ctx, p, nan_bits(dt), n));
  else
    TU_OK(ctx, stof_cuda_memset16(ctx, p, (uint16_t)nan_bits(dt), n));
}

/* Element i of raw device data copied to the host, as a double; its bits for the guard. */
static double raw_value(const void *h, stof_dtype dt, size_t i) {
  if (dt == STOF_DTYPE_F32) return ((const float *)h)[i];
  uint16_t x = ((const uint16_t *)h)[i];
  return dt == STOF_DTYPE_BF16 ? stof_bf16_to_f32(x) : stof_f16_to_f32(x);
}
static uint32_t raw_bits(const void *h, stof_dtype dt, size_t i) {
  if (dt == STOF_DTYPE_F32) return ((const uint32_t *)h)[i];
  return ((const uint16_t *)h)[i];
}

/* A device copy of a contiguous CPU tensor (its raw bytes). */
static uint64_t upload(stof_ctx *ctx, const stof_tensor *t) {
  size_t bytes = (size_t)stof_tensor_numel(t) * esize(t->dtype);
  uint64_t d = 0;
  TU_OK(ctx, stof_cuda_malloc(ctx, bytes, &d));
  TU_OK(ctx, stof_cuda_htod(ctx, d, t->data, bytes));
  return d;
}

/* A CPU tensor of dtype with uniform values in [-1, 1) (rounded to dtype). */
static stof_tensor *rand_tensor(stof_ctx *ctx, stof_dtype dt, int ndim, const int64_t *shape,
                                uint64_t *seed) {
  return tu_tensor_uniform(ctx, dt, ndim, shape, seed, -1, 1);
}

/* rows[0..n): the rows checked: all when the reference is cheap, else 16 at the start,
 * the middle and the end. Returns n. */
static int64_t pick_rows(int64_t M, int64_t N, int64_t K, int64_t *rows) {
  if (M * N * K <= ((int64_t)1 << 27) || M <= 48) {
    for (int64_t m = 0; m < M; m++) rows[m] = m;
    return M;
  }
  int64_t n = 0;
  for (int64_t i = 0; i < 16; i++) rows[n++] = i;
  for (int64_t i = 0; i < 16; i++) rows[n++] = M / 2 - 8 + i;
  for (int64_t i = 0; i < 16; i++) rows[n++] = M - 16 + i;
  return n;
}

/* The rows of a contiguous [M, cols] tensor as a new [nrow, cols] tensor (same dtype). */
static stof_tensor *take_rows(stof_ctx *ctx, const stof_tensor *t, int64_t cols,
                              const int64_t *rows, int64_t nrow) {
  stof_tensor *r = NULL;
  TU_OK(ctx, stof_tensor_new(ctx, t->dtype, 2, TU_SHAPE(nrow, cols), STOF_DEVICE_CPU, &r));
  size_t es = esize(t->dtype);
  for (int64_t i = 0; i < nrow; i++)
    memcpy((char *)r->data + (size_t)(i * cols) * es, (const char *)t->data + (size_t)(rows[i] * cols) * es,
           (size_t)cols * es);
  return r;
}

/* One problem's inputs (trans_a 0, batch 1) on both sides. */
typedef struct inputs {
  int64_t M, N, K;
  stof_dtype dt;
  int trans_b;
  stof_tensor *a, *b, *c, *bias; /* CPU, of dt */
  uint64_t da, db, dc, dbias;
  int64_t *rows, nrow;           /* rows checked */
  stof_tensor *a_rows, *c_rows;  /* a and c at those rows */
} inputs;

static void inputs_make(stof_ctx *ctx, inputs *in, int64_t M, int64_t N, int64_t K, stof_dtype dt,
                        int trans_b, uint64_t seed) {
  memset(in, 0, sizeof *in);
  in->M = M, in->N = N, in->K = K, in->dt = dt, in->trans_b = trans_b;
  in->a = rand_tensor(ctx, dt, 2, TU_SHAPE(M, K), &seed);
  in->b = trans_b ? rand_tensor(ctx, dt, 2, TU_SHAPE(N, K), &seed)
                  : rand_tensor(ctx, dt, 2, TU_SHAPE(K, N), &seed);
  in->c = rand_tensor(ctx, dt, 2, TU_SHAPE(M, N), &seed);
  in->bias = rand_tensor(ctx, dt, 1, TU_SHAPE(N), &seed);
  in->da = upload(ctx, in->a), in->db = upload(ctx, in->b);
  in->dc = upload(ctx, in->c), in->dbias = upload(ctx, in->bias);
  in->rows = malloc(sizeof *in->rows * (size_t)M);
  assert_non_null(in->rows);
  in->nrow = pick_rows(M, N, K, in->rows);
  in->a_rows = take_rows(ctx, in->a, K, in->rows, in->nrow);
  in->c_rows = take_rows(ctx, in->c, N, in->rows, in->nrow);
}

static void inputs_free(stof_ctx *ctx, inputs *in) {
  stof_tensor *ts[] = {in->a, in->b, in->c, in->bias, in->a_rows, in->c_rows};
  for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) stof_tensor_free(ts[i]);
  uint64_t ds[] = {in->da, in->db, in->dc, in->dbias};
  for (size_t i = 0; i < sizeof ds / sizeof ds[0]; i++) stof_cuda_mem_free(ctx, ds[i]);
  free(in->rows);
}

/* stof_gemm_cpu on the checked rows: want[nrow * N]. */
static double *reference(stof_ctx *ctx, const inputs *in, const stof_gemm_desc *d) {
  stof_gemm_desc r = *d;
  r.M = in->nrow;
  stof_tensor *out = NULL;
  TU_OK(ctx, stof_tensor_new(ctx, STOF_DTYPE_F64, 2, TU_SHAPE(in->nrow, in->N), STOF_DEVICE_CPU, &out));
  stof_tensor_fill(out, NAN);
  TU_OK(ctx, stof_gemm_cpu(ctx, &r, in->a_rows, in->b, in->c_rows, in->bias, out));
  double *want = tu_values(out);
  stof_tensor_free(out);
  return want;
}

static double tolerance(stof_dtype dt) { return dt == STOF_DTYPE_F32 ? 1e-5 : 1e-2; }

/* Plans and runs d on in (output in a poisoned buffer with a guard zone), checks the
 * checked rows against want; prints one line. */
static void run_one(gfix *f, const inputs *in, const stof_gemm_desc *d, const double *want) {
  stof_ctx *ctx = f->ctx;
  char head[256];
  snprintf(head, sizeof head, "%4lld x %4lld x %4lld %-8s trans_b %d beta %g %-9s", (long long)d->M,
           (long long)d->N, (long long)d->K, stof_dtype_name(d->dtype), d->trans_b, (double)d->beta,
           stof_gemm_epilogue_name(d->epi));
  f->nrun++;
  stof_gemm_plan *p = NULL;
  stof_status st = stof_gemm_plan_new(ctx, d, 0, &p);
  if (st) {
    print_message("FAIL %s | plan_new: %s: %s\n", head, stof_status_name(st), stof_ctx_message(ctx));
    f->nfail++;
    stof_ctx_clear_error(ctx);
    return;
  }
  size_t n = (size_t)(d->M * d->N), es = esize(d->dtype), bytes = (n + GUARD) * es;
  uint64_t dd = 0;
  void *host = malloc(bytes);
  assert_non_null(host);
  TU_OK(ctx, stof_cuda_malloc(ctx, bytes, &dd));
  poison(ctx, dd, d->dtype, n + GUARD);
  if ((st = stof_gemm_plan_run(p, NULL, in->da, in->db, d->beta != 0 ? in->dc : 0,
                               stof_gemm_epilogue_has_bias(d->epi) ? in->dbias : 0, dd, f->ws,
                               STOF_GEMM_MAX_WORKSPACE)) ||
      (st = stof_cuda_synchronize(ctx)) || (st = stof_cuda_dtoh(ctx, host, dd, bytes))) {
    print_message("FAIL %s | run: %s: %s\n", head, stof_status_name(st), stof_ctx_message(ctx));
    f->nfail++;
    stof_ctx_clear_error(ctx);
    goto done;
  }
  int64_t nnan = 0, guard_bad = -1, worst = -1;
  double num = 0, den = 0, maxerr = 0;
  for (int64_t i = 0; i < in->nrow; i++)
    for (int64_t j = 0; j < d->N; j++) {
      double g = raw_value(host, d->dtype, (size_t)(in->rows[i] * d->N + j)), w = want[i * d->N + j];
      if (isnan(g)) {
        nnan++;
        continue;
      }
      double e = fabs(g - w);
      if (worst < 0 || e > maxerr) maxerr = e, worst = i * d->N + j;
      num += (g - w) * (g - w);
      den += w * w;
    }
  for (size_t i = 0; i < n && !nnan; i++) /* rows not checked must still be written */
    if (isnan(raw_value(host, d->dtype, i))) nnan++;
  for (size_t i = n; i < n + GUARD && guard_bad < 0; i++)
    if (raw_bits(host, d->dtype, i) != nan_bits(d->dtype)) guard_bad = (int64_t)(i - n);
  double rel = nnan ? INFINITY : den > 0 ? sqrt(num / den) : (num > 0 ? INFINITY : 0);
  int ok = !nnan && guard_bad < 0 && rel < tolerance(d->dtype);
  print_message("%s %s | algo 0 of %d, %zu B workspace | rel %.1e max %.1e (%lld rows)\n",
                ok ? "ok  " : "FAIL", head, stof_gemm_plan_nalgo(p), stof_gemm_plan_workspace(p), rel,
                maxerr, (long long)in->nrow);
  if (!ok) {
    f->nfail++;
    if (nnan) print_message("     %lld NaN in the output\n", (long long)nnan);
    if (guard_bad >= 0)
      print_message("     written past the end of the output (element %lld after it)\n", (long long)guard_bad);
    if (worst >= 0)
      print_message("     worst at row %lld, column %lld: want %.6g\n", (long long)in->rows[worst / d->N],
                    (long long)(worst % d->N), want[worst]);
  }
done:
  stof_cuda_mem_free(ctx, dd);
  free(host);
  stof_gemm_plan_free(p);
}

/* Every epilogue x beta {0, 1} on one problem. */
static void run_problem(gfix *f, int64_t M, int64_t N, int64_t K, stof_dtype dt, int trans_b,
                        uint64_t seed) {
  inputs in;
  inputs_make(f->ctx, &in, M, N, K, dt, trans_b, seed);
  for (int beta = 0; beta <= 1; beta++)
    for (int e = 0; e < STOF_GEMM_EPI_COUNT; e++) {
      stof_gemm_desc d = {.M = M, .N = N, .K = K, .batch = 1, .trans_b = trans_b, .dtype = dt,
                          .epi = (stof_gemm_epilogue)e, .alpha = 0.75f, .beta = (float)beta};
      double *want = reference(f->ctx, &in, &d);
      run_one(f, &in, &d, want);
      free(want);
    }
  inputs_free(f->ctx, &in);
}

static const int64_t shapes[][3] = {{128, 768, 768}, {1, 3072, 768}, {33, 100, 64}, {4096, 3072, 768}};
static const stof_dtype dtypes[] = {STOF_DTYPE_F16, STOF_DTYPE_BF16, STOF_DTYPE_F32};

static void gemm_shapes_for(void **state, stof_dtype dt) {
  gfix *f = gpu(state);
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
    for (int tb = 0; tb <= 1; tb++)
      run_problem(f, shapes[s][0], shapes[s][1], shapes[s][2], dt, tb, 1000 + 10 * s + (uint64_t)tb);
  finish(f);
}

void gemm_f16_every_epilogue_matches_cpu(void **state) { gemm_shapes_for(state, dtypes[0]); }
void gemm_bf16_every_epilogue_matches_cpu(void **state) { gemm_shapes_for(state, dtypes[1]); }
void gemm_f32_every_epilogue_matches_cpu(void **state) { gemm_shapes_for(state, dtypes[2]); }

/* trans_a, a batch with padded strides (16- or 32-byte aligned products), B shared
 * (stride 0), C in place (c == d). */
void gemm_batched_transposed_in_place_matches_cpu(void **state) {
  gfix *f = gpu(state);
  stof_ctx *ctx = f->ctx;
  for (size_t t = 0; t < sizeof dtypes / sizeof dtypes[0]; t++) {
    stof_dtype dt = dtypes[t];
    const int64_t M = 64, N = 96, K = 80, batch = 3, sa = K * M + 8, sc = M * N + 8;
    stof_gemm_desc d = {.M = M, .N = N, .K = K, .batch = batch, .trans_a = 1, .trans_b = 0,
                        .dtype = dt, .epi = STOF_GEMM_EPI_RELU_BIAS, .alpha = 0.5f, .beta = 1.0f,
                        .stride_a = sa, .stride_b = 0, .stride_c = sc};
    TU_OK(ctx, stof_gemm_check(ctx, &d));
    uint64_t seed = 77 + t;
    /* whole [K, M] and [M, N] slices covering what the strides reach (padding random) */
    int64_t areach = (batch - 1) * sa + K * M, creach = (batch - 1) * sc + M * N;
    int64_t na = (areach + K * M - 1) / (K * M), nc = (creach + M * N - 1) / (M * N);
    stof_tensor *a = rand_tensor(ctx, dt, 3, TU_SHAPE(na, K, M), &seed);
    stof_tensor *b = rand_tensor(ctx, dt, 2, TU_SHAPE(K, N), &seed);
    stof_tensor *c = rand_tensor(ctx, dt, 3, TU_SHAPE(nc, M, N), &seed);
    stof_tensor *bias = rand_tensor(ctx, dt, 1, TU_SHAPE(N), &seed);
    stof_tensor *want = NULL;
    TU_OK(ctx, stof_tensor_new(ctx, STOF_DTYPE_F64, 3, TU_SHAPE(nc, M, N), STOF_DEVICE_CPU, &want));
    stof_tensor_fill(want, NAN);
    TU_OK(ctx, stof_gemm_cpu(ctx, &d, a, b, c, bias, want));

    /* the GPU: C uploaded into the output buffer (in place), a guard zone poisoned */
    size_t es = esize(dt), bytes = (size_t)(creach + GUARD) * es;
    uint64_t da = upload(ctx, a), db = upload(ctx, b), dbias = upload(ctx, bias), dd = 0;
    TU_OK(ctx, stof_cuda_malloc(ctx, bytes, &dd));
    poison(ctx, dd, dt, (size_t)(creach + GUARD));
    TU_OK(ctx, stof_cuda_htod(ctx, dd, c->data, (size_t)creach * es));
    stof_gemm_plan *p = NULL;
    TU_OK(ctx, stof_gemm_plan_new(ctx, &d, 0, &p));
    TU_OK(ctx, stof_gemm_plan_run(p, NULL, da, db, dd, dbias, dd, f->ws, STOF_GEMM_MAX_WORKSPACE));
    void *host = malloc(bytes);
    assert_non_null(host);
    TU_OK(ctx, stof_cuda_dtoh(ctx, host, dd, bytes));
    double num = 0, den = 0;
    int64_t nnan = 0, stray = -1;
    for (int64_t i = 0; i < batch; i++)
      for (int64_t e = 0; e < M * N; e++) {
        int64_t at = i * sc + e;
        double g = raw_value(host, dt, (size_t)at), w = stof_tensor_load(want, at);
        if (isnan(g)) nnan++;
        num += (g - w) * (g - w);
        den += w * w;
      }
    /* the padding between outputs keeps C's values, the guard zone its poison */
    for (int64_t i = 0; i + 1 < batch && stray < 0; i++)
      for (int64_t e = M * N; e < sc && stray < 0; e++)
        if (raw_value(host, dt, (size_t)(i * sc + e)) != stof_tensor_load(c, i * sc + e)) stray = i * sc + e;
    for (int64_t e = creach; e < creach + GUARD && stray < 0; e++)
      if (raw_bits(host, dt, (size_t)e) != nan_bits(dt)) stray = e;
    double rel = nnan ? INFINITY : sqrt(num / den);
    print_message("%s batch %lld of %lld x %lld x %lld %s trans_a 1, B shared, in place, relu_bias | rel %.1e\n",
                  !nnan && stray < 0 && rel < tolerance(dt) ? "ok  " : "FAIL", (long long)batch,
                  (long long)M, (long long)N, (long long)K, stof_dtype_name(dt), rel);
    if (nnan) fail_msg("%lld NaN in the batched output (%s)", (long long)nnan, stof_dtype_name(dt));
    if (stray >= 0)
      fail_msg("element %lld outside the outputs was written (%s)", (long long)stray, stof_dtype_name(dt));
    if (!(rel < tolerance(dt))) fail_msg("batched %s: rel L2 %g", stof_dtype_name(dt), rel);
    free(host);
    stof_gemm_plan_free(p);
    uint64_t ds[] = {da, db, dbias, dd};
    for (size_t i = 0; i < 4; i++) stof_cuda_mem_free(ctx, ds[i]);
    stof_tensor *ts[] = {a, b, c, bias, want};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) stof_tensor_free(ts[i]);
  }
}

/* A plan captured into a CUDA graph on a stream, replayed on three inputs written into the
 * same buffer between replays. */
void gemm_plan_replays_in_a_cuda_graph(void **state) {
  gfix *f = gpu(state);
  stof_ctx *ctx = f->ctx;
  const int64_t M = 128, N = 768, K = 768;
  const stof_dtype dt = STOF_DTYPE_F16;
  stof_gemm_desc d = {.M = M, .N = N, .K = K, .batch = 1, .trans_b = 1, .dtype = dt,
                      .epi = STOF_GEMM_EPI_GELU_BIAS, .alpha = 1.0f, .beta = 1.0f};
  inputs in;
  inputs_make(ctx, &in, M, N, K, dt, 1, 4242);
  stof_cuda_stream *s = NULL;
  TU_OK(ctx, stof_cuda_stream_new(ctx, &s));
  stof_cuda_set_stream(ctx, s); /* copies and memsets below are ordered on s */
  stof_gemm_plan *p = NULL;
  TU_OK(ctx, stof_gemm_plan_new(ctx, &d, 0, &p));
  size_t n = (size_t)(M * N), bytes = n * 2;
  uint64_t dd = 0;
  TU_OK(ctx, stof_cuda_malloc(ctx, bytes, &dd));
  uint16_t *host = malloc(bytes);
  assert_non_null(host);
  poison(ctx, dd, dt, n);
  TU_OK(ctx, stof_cuda_stream_synchronize(s));

  stof_cuda_graph *g = NULL;
  TU_OK(ctx, stof_cuda_capture_begin(ctx, s));
  TU_OK(ctx, stof_gemm_plan_run(p, s, in.da, in.db, in.dc, in.dbias, dd, f->ws, STOF_GEMM_MAX_WORKSPACE));
  TU_OK(ctx, stof_cuda_capture_end(ctx, s, &g));
  assert_non_null(g);
  TU_OK(ctx, stof_cuda_dtoh(ctx, host, dd, bytes));
  for (size_t i = 0; i < n; i++)
    if (host[i] != 0x7e00) fail_msg("the capture ran the GEMM (element %zu written)", i);

  uint64_t seed = 99;
  for (int r = 0; r < 3; r++) {
    stof_tensor *a = rand_tensor(ctx, dt, 2, TU_SHAPE(M, K), &seed);
    TU_OK(ctx, stof_cuda_htod(ctx, in.da, a->data, (size_t)(M * K) * 2));
    poison(ctx, dd, dt, n);
    TU_OK(ctx, stof_cuda_graph_launch(g, s));
    TU_OK(ctx, stof_cuda_dtoh(ctx, host, dd, bytes));
    stof_tensor *out = NULL;
    TU_OK(ctx, stof_tensor_new(ctx, STOF_DTYPE_F64, 2, TU_SHAPE(M, N), STOF_DEVICE_CPU, &out));
    stof_tensor_fill(out, NAN);
    TU_OK(ctx, stof_gemm_cpu(ctx, &d, a, in.b, in.c, in.bias, out));
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
      double gv = stof_f16_to_f32(host[i]), w = stof_tensor_load(out, (int64_t)i);
      if (isnan(gv)) fail_msg("replay %d: NaN at %zu", r, i);
      num += (gv - w) * (gv - w);
      den += w * w;
    }
    double rel = sqrt(num / den);
    print_message("replay %d: rel %.1e\n", r, rel);
    if (!(rel < 1e-2)) fail_msg("replay %d: rel L2 %g", r, rel);
    stof_tensor_free(out);
    stof_tensor_free(a);
  }
  stof_cuda_graph_free(g);
  stof_cuda_set_stream(ctx, NULL);
  stof_cuda_stream_free(s);
  stof_cuda_mem_free(ctx, dd);
  free(host);
  stof_gemm_plan_free(p);
  inputs_free(ctx, &in);
}

/* Bad arguments at plan and run time; the error for a problem cuBLASLt has no algorithm
 * for, when one of the candidates provokes it on this device. */
void gemm_plan_and_run_errors(void **state) {
  gfix *f = gpu(state);
  stof_ctx *ctx = f->ctx;
  stof_gemm_desc d = {.M = 64, .N = 64, .K = 64, .batch = 1, .dtype = STOF_DTYPE_F16,
                      .epi = STOF_GEMM_EPI_BIAS, .alpha = 1.0f};
  stof_gemm_plan *p = (stof_gemm_plan *)1;
  TU_ERR(ctx, stof_gemm_plan_new(ctx, &d, STOF_GEMM_MAX_ALGO, &p), STOF_ERR_ARG, "algo");
  assert_null(p);
  stof_gemm_desc bad = d;
  bad.dtype = STOF_DTYPE_F64;
  TU_ERR(ctx, stof_gemm_plan_new(ctx, &bad, 0, &p), STOF_ERR_UNSUPPORTED, "float64");
  TU_OK(ctx, stof_gemm_plan_new(ctx, &d, 0, &p));
  int n = stof_gemm_plan_nalgo(p);
  assert_true(n >= 1 && n <= STOF_GEMM_MAX_ALGO);
  if (n < STOF_GEMM_MAX_ALGO) {
    stof_gemm_plan *q = NULL;
    TU_ERR(ctx, stof_gemm_plan_new(ctx, &d, n, &q), STOF_ERR_ARG, "heuristic gave");
    assert_null(q);
  }
  uint64_t buf = 0;
  TU_OK(ctx, stof_cuda_malloc(ctx, 4 * 64 * 64 * 2, &buf));
  uint64_t a = buf, b = buf + 64 * 64 * 2, bias = buf + 2 * 64 * 64 * 2, dd = buf + 3 * 64 * 64 * 2;
  TU_ERR(ctx, stof_gemm_plan_run(p, NULL, a + 2, b, 0, bias, dd, f->ws, STOF_GEMM_MAX_WORKSPACE),
         STOF_ERR_ARG, "a at 0x");
  TU_ERR(ctx, stof_gemm_plan_run(p, NULL, a, b, 0, 0, dd, f->ws, STOF_GEMM_MAX_WORKSPACE),
         STOF_ERR_ARG, "bias");
  TU_ERR(ctx, stof_gemm_plan_run(p, NULL, a, 0, 0, bias, dd, f->ws, STOF_GEMM_MAX_WORKSPACE),
         STOF_ERR_ARG, "b is a null");
  if (stof_gemm_plan_workspace(p) > 0)
    TU_ERR(ctx, stof_gemm_plan_run(p, NULL, a, b, 0, bias, dd, 0, 0), STOF_ERR_ARG, "workspace");
  TU_OK(ctx, stof_cuda_memset16(ctx, buf, 0x3c00, 4 * 64 * 64)); /* 1.0 everywhere */
  TU_OK(ctx, stof_gemm_plan_run(p, NULL, a, b, 0, bias, dd, f->ws, STOF_GEMM_MAX_WORKSPACE));
  uint16_t h[64 * 64];
  TU_OK(ctx, stof_cuda_dtoh(ctx, h, dd, sizeof h));
  for (int i = 0; i < 64 * 64; i++)
    if (stof_f16_to_f32(h[i]) != 65.0f) fail_msg("ones: element %d = %g, want 65", i, stof_f16_to_f32(h[i]));
  stof_gemm_plan_free(p);
  stof_cuda_mem_free(ctx, buf);

  /* candidates for "no algorithm": odd batch strides (2-byte aligned products) with
   * epilogues, odd leading dimensions in bf16 */
  static const stof_gemm_desc cand[] = {
      {.M = 7, .N = 9, .K = 13, .batch = 3, .dtype = STOF_DTYPE_BF16, .epi = STOF_GEMM_EPI_GELU_BIAS,
       .alpha = 1, .stride_a = 7 * 13 + 1, .stride_b = 13 * 9 + 1, .stride_c = 7 * 9 + 1},
      {.M = 1, .N = 1, .K = 1, .batch = 1, .dtype = STOF_DTYPE_F16, .epi = STOF_GEMM_EPI_GELU_BIAS, .alpha = 1},
      {.M = 3, .N = 5, .K = 100001, .batch = 1, .trans_a = 1, .dtype = STOF_DTYPE_BF16,
       .epi = STOF_GEMM_EPI_RELU_BIAS, .alpha = 1},
  };
  int provoked = 0;
  for (size_t i = 0; i < sizeof cand / sizeof cand[0]; i++) {
    stof_gemm_plan *q = NULL;
    stof_status st = stof_gemm_plan_new(ctx, &cand[i], 0, &q);
    if (st == STOF_ERR_UNSUPPORTED) {
      print_message("no algorithm, as expected of some: %s\n", stof_ctx_message(ctx));
      TU_MSG(ctx, "no algorithm for M=");
      TU_MSG(ctx, stof_dtype_name(cand[i].dtype));
      stof_ctx_clear_error(ctx);
      provoked++;
    } else {
      TU_OK(ctx, st);
      print_message("candidate %zu has %d algorithms\n", i, stof_gemm_plan_nalgo(q));
      stof_gemm_plan_free(q);
    }
  }
  if (!provoked) print_message("no candidate lacked an algorithm on this device\n");
}

/* The f16 (4096, 3072, 768) GEMM timed with events (informational). */
void gemm_f16_large_throughput(void **state) {
  gfix *f = gpu(state);
  stof_ctx *ctx = f->ctx;
  const int64_t M = 4096, N = 3072, K = 768;
  stof_gemm_desc d = {.M = M, .N = N, .K = K, .batch = 1, .trans_b = 1, .dtype = STOF_DTYPE_F16,
                      .epi = STOF_GEMM_EPI_NONE, .alpha = 1.0f};
  uint64_t da = 0, db = 0, dd = 0;
  TU_OK(ctx, stof_cuda_malloc(ctx, (size_t)(M * K) * 2, &da));
  TU_OK(ctx, stof_cuda_malloc(ctx, (size_t)(N * K) * 2, &db));
  TU_OK(ctx, stof_cuda_malloc(ctx, (size_t)(M * N) * 2, &dd));
  TU_OK(ctx, stof_cuda_memset16(ctx, da, 0x2e66, (size_t)(M * K))); /* 0.1 */
  TU_OK(ctx, stof_cuda_memset16(ctx, db, 0xae66, (size_t)(N * K))); /* -0.1 */
  stof_gemm_plan *p = NULL;
  TU_OK(ctx, stof_gemm_plan_new(ctx, &d, 0, &p));
  stof_cuda_timer *t = NULL;
  TU_OK(ctx, stof_cuda_timer_new(ctx, &t));
  for (int i = 0; i < 10; i++)
    TU_OK(ctx, stof_gemm_plan_run(p, NULL, da, db, 0, 0, dd, f->ws, STOF_GEMM_MAX_WORKSPACE));
  enum { SAMPLES = 15, REPS = 20 };
  float ms[SAMPLES];
  for (int s = 0; s < SAMPLES; s++) {
    TU_OK(ctx, stof_cuda_timer_start(t));
    for (int i = 0; i < REPS; i++)
      TU_OK(ctx, stof_gemm_plan_run(p, NULL, da, db, 0, 0, dd, f->ws, STOF_GEMM_MAX_WORKSPACE));
    TU_OK(ctx, stof_cuda_timer_stop(t, &ms[s]));
    ms[s] /= REPS;
  }
  for (int i = 1; i < SAMPLES; i++) /* insertion sort for the median */
    for (int j = i; j > 0 && ms[j] < ms[j - 1]; j--) {
      float x = ms[j];
      ms[j] = ms[j - 1];
      ms[j - 1] = x;
    }
  double med = ms[SAMPLES / 2], flops = 2.0 * (double)M * (double)N * (double)K;
  print_message("cuBLASLt f16 %lld x %lld x %lld (B as [N, K]): median %.4f ms, %.1f TFLOP/s "
                "(min %.4f ms), %d algorithms, %zu B workspace\n",
                (long long)M, (long long)N, (long long)K, med, flops / (med * 1e-3) / 1e12, ms[0],
                stof_gemm_plan_nalgo(p), stof_gemm_plan_workspace(p));
  uint16_t h[4];
  TU_OK(ctx, stof_cuda_dtoh(ctx, h, dd, sizeof h));
  for (int i = 0; i < 4; i++) /* 768 * 0.1 * -0.1 (inputs rounded to f16) */
    if (fabs(stof_f16_to_f32(h[i]) + 768 * 0.0999755859375 * 0.0999755859375) > 0.02)
      fail_msg("element %d = %g", i, stof_f16_to_f32(h[i]));
  stof_cuda_timer_free(t);
  stof_gemm_plan_free(p);
  stof_cuda_mem_free(ctx, da);
  stof_cuda_mem_free(ctx, db);
  stof_cuda_mem_free(ctx, dd);
}
