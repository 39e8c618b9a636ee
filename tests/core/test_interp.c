/*
 * Tests of the reference interpreter against references written here in plain C (double)
 * on random inputs (never zeros): matmul, softmax, layer norm, GELU, causal and masked
 * attention (with fully masked rows), f16 rounding of outputs, extern ops, integer
 * semantics, and the errors of bad feeds and out-of-range loads.
 */
#include <stdio.h>

#include "testutil.h"

/* Evaluates and checks that each result is a CPU tensor of its op's dtype and shape. */
static void eval_ok(stof_graph *g, int nout, const stof_op *const *outs, int nfeed,
                    const stof_op *const *fops, const stof_tensor *const *feeds,
                    stof_tensor **res) {
  for (int i = 0; i < nout; i++) res[i] = NULL;
  TU_OK(TU_G(g), stof_interp_eval(g, nout, outs, nfeed, fops, feeds, res));
  for (int i = 0; i < nout; i++) {
    assert_non_null(res[i]);
    assert_int_equal(res[i]->device, STOF_DEVICE_CPU);
    assert_int_equal(res[i]->dtype, outs[i]->dtype);
    assert_int_equal(res[i]->ndim, outs[i]->ndim);
    for (int d = 0; d < outs[i]->ndim; d++) assert_int_equal(res[i]->shape[d], outs[i]->shape[d]);
    assert_true(stof_tensor_is_contiguous(res[i]));
  }
}

/* ---------------------------------------------------------------- matmul */

static void interp_matmul_odd_sizes_matches_reference(void **state) {
  enum { M = 17, K = 33, N = 9 };
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  stof_graph *g = NULL;
  TU_OK(ctx, stof_graph_new(ctx, &g));
  const stof_op *A = tu_ph(g, "A", STOF_DTYPE_F32, 2, TU_SHAPE(M, K));
  const stof_op *B = tu_ph(g, "B", STOF_DTYPE_F32, 2, TU_SHAPE(K, N));
  const stof_expr *ax[2];
  tu_axes(g, 2, TU_SHAPE(M, N), ax);
  const stof_expr *k = tu_raxis(g, K, "k");
  const stof_op *C = tu_compute(
      g, "C", 2, ax,
      tu_reduce(g, STOF_REDUCE_SUM,
                tu_bin(g, STOF_EXPR_MUL, tu_load(g, A, 2, ax[0], k), tu_load(g, B, 2, k, ax[1])),
                1, k));
  uint64_t seed = 1;
  stof_tensor *ta = tu_tensor_uniform(ctx, STOF_DTYPE_F32, 2, TU_SHAPE(M, K), &seed, -1, 1);
  stof_tensor *tb = tu_tensor_uniform(ctx, STOF_DTYPE_F32, 2, TU_SHAPE(K, N), &seed, -1, 1);
  stof_tensor *res[1];
  eval_ok(g, 1, &C, 2, (const stof_op *[]){A, B}, (const stof_tensor *[]){ta, tb}, res);
  double want[M * N];
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      double acc = 0, mag = 0;
      for (int kk = 0; kk < K; kk++) {
        double p = stof_tensor_load(ta, i * K + kk) * stof_tensor_load(tb, kk * N + j);
        acc += p;
        mag += fabs(p);
      }
      want[i * N + j] = acc;
      double got = stof_tensor_load(res[0], i * N + j);
      if (!(fabs(got - acc) <= 1e-6 * mag)) fail_msg("C[%d,%d] = %.9g, want %.9g", i, j, got, acc);
    }
  tu_check_close(res[0], want, M * N, 1e-5);
  stof_tensor_free(res[0]);
  stof_tensor_free(ta);
  stof_tensor_free(tb);
  stof_graph_free(g);
  tu_ctx_free(ctx, &h);
}

/* ---------------------------------------------------------------- memory */

/* A chain of L layers h[l+1] = h[l] * w[l] + 1, each w[l] a placeholder read once (a model's
 * weights): the interpreter keeps only what later ops still read and loads a placeholder at
 * its first reader, so its peak is a few arrays, not the 2L + 1 arrays of every op. Values
 * checked against the same chain in double on random inputs. */
static void interp_frees_values_no_later_op_reads(void **state) {
  enum { L = 40, N = 32768 };
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  stof_graph *g = NULL;
  TU_OK(ctx, stof_graph_new(ctx, &g));
  const stof_op *x = tu_ph(g, "x", STOF_DTYPE_F32, 1, TU_SHAPE(N)), *w[L], *cur = x;
  const stof_op *fops[L + 1];
  stof_tensor *feeds[L + 1];
  uint64_t seed = 7;
  fops[0] = x;
  feeds[0] = tu_tensor_uniform(ctx, STOF_DTYPE_F32, 1, TU_SHAPE(N), &seed, -1, 1);
  for (int l = 0; l < L; l++) {
    char name[16];
    snprintf(name, sizeof name, "w%d", l);
    w[l] = tu_ph(g, name, STOF_DTYPE_F32, 1, TU_SHAPE(N));
    fops[l + 1] = w[l];
    feeds[l + 1] = tu_tensor_uniform(ctx, STOF_DTYPE_F32, 1, TU_SHAPE(N), &seed, 0.5, 1.5);
  }
  for (int l = 0; l < L; l++) {
    const stof_expr *ax[1];
    tu_axes(g, 1, TU_SHAPE(N), ax);
    char name[16];
    snprintf(name, sizeof name, "h%d", l + 1);
    cur = tu_compute(g, name, 1, ax,
                     tu_bin(g, STOF_EXPR_ADD, tu_bin(g, STOF_EXPR_MUL, tu_load(g, cur, 1, ax[0]), tu_load(g, w[l], 1, ax[0])),
                            tu_f32(g, 1)));
  }
  size_t before = h.live;
  h.peak = before;
  stof_tensor *res[1];
  eval_ok(g, 1, &cur, L + 1, fops, (const stof_tensor *const *)feeds, res);
  size_t array = sizeof(double) * N; /* one op's values */
  if (h.peak - before > 6 * array + ((size_t)N * 4 + 4096))
    fail_msg("peak %zu bytes over the feeds for %d layers of %zu-byte arrays", h.peak - before, L, array);
  double *want = malloc(sizeof *want * N);
  assert_non_null(want);
  for (int i = 0; i < N; i++) {
    double v = stof_tensor_load(feeds[0], i);
    for (int l = 0; l < L; l++) v = tu_round_f32(v * stof_tensor_load(feeds[l + 1], i) + 1);
    want[i] = v;
  }
  tu_check_close(res[0], want, N, 1e-12);
  free(want);
  stof_tensor_free(res[0]);
  for (int l = 0; l <= L; l++) stof_tensor_free(feeds[l]);
  stof_graph_free(g);
  tu_ctx_free(ctx, &h);
}

/* ---------------------------------------------------------------- softmax */

/* Y[i, j] = exp(X[i, j] - max_r X[i, r]) / sum_r exp(X[i, r] - max), as four ops. */
static const stof_op *build_softmax(stof_graph *g, const stof_op *X) {
  int64_t m = X->shape[0], n = X->shape[1];
  const stof_expr *a1[1], *a2[2], *r;
  tu_axes(g, 1, TU_SHAPE(m), a1);
  r = tu_raxis(g, n, "r");
  const stof_op *MX = tu_compute(g, "row_max", 1, a1,
                                 tu_reduce(g, STOF_REDUCE_MAX, tu_load(g, X, 2, a1[0], r), 1, r));
  tu_axes(g, 2, TU_SHAPE(m, n), a2);
  const stof_op *E = tu_compute(
      g, "exp", 2, a2,
      tu_un(g, STOF_EXPR_EXP, tu_bin(g, STOF_EXPR_SUB, tu_load(g, X, 2, a2[0], a2[1]),
                                      tu_load(g, MX, 1, a2[0]))));
  tu_axes(g, 1, TU_SHAPE(m), a1);
  r = tu_raxis(g, n, "r2");
  const stof_op *S = tu_compute(g, "row_sum", 1, a1,
                                tu_reduce(g, STOF_REDUCE_SUM, tu_load(g, E, 2, a1[0], r), 1, r));
  tu_axes(g, 2, TU_SHAPE(m, n), a2);
  return tu_compute(g, "softmax", 2, a2,
                    tu_bin(g, STOF_EXPR_DIV, tu_load(g, E, 2, a2[0], a2[1]),
                           tu_load(g, S, 1, a2[0])));
}

static void interp_softmax_rows_matches_reference(void **state) {
  enum { M = 7, N = 13 };
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  stof_graph *g = NULL;
  TU_OK(ctx, stof_graph_new(ctx, &g));
  const stof_op *X = tu_ph(g, "X", STOF_DTYPE_F32, 2, TU_SHAPE(M, N));
  const stof_op *Y = build_softmax(g, X);
  uint64_t seed = 2;
  /* large values: without the max subtraction exp would overflow */
  stof_tensor *tx = tu_tensor_uniform(ctx, STOF_DTYPE_F32, 2, TU_SHAPE(M, N), &seed, -100, 100);
  stof_tensor_store(tx, 3 * N + 4, 95.0);
  stof_tensor_store(tx, 3 * N + 5, 94.5);
  stof_tensor *res[1];
  eval_ok(g, 1, &Y, 1, &X, (const stof_tensor *[]){tx}, res);
  double want[M * N];
  for (int i = 0; i < M; i++) {
    double mx = -INFINITY, s = 0;
    for (int j = 0; j < N; j++) mx = fmax(mx, stof_tensor_load(tx, i * N + j));
    for (int j = 0; j < N; j++) s += exp(stof_tensor_load(tx, i * N + j) - mx);
    double rowsum = 0;
    for (int j = 0; j < N; j++) {
      want[i * N + j] = exp(stof_tensor_load(tx, i * N + j) - mx) / s;
      rowsum += stof_tensor_load(res[0], i * N + j);
    }
    assert_true(fabs(rowsum - 1) < 1e-5);
  }
  tu_check_close(res[0], want, M * N, 1e-5);
  stof_tensor_free(res[0]);
  stof_tensor_free(tx);
  stof_graph_free(g);
  tu_ctx_free(ctx, &h);
}

/* ---------------------------------------------------------------- layer norm */

static void interp_layer_norm_matches_reference(void **state) {
  enum { M = 7, N = 19 };
  const double eps = 1e-5;
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  stof_graph *g = NULL;
  TU_OK(ctx, stof_graph_new(ctx, &g));
  const stof_op *X = tu_ph(g, "X", STOF_DTYPE_F32, 2, TU_SHAPE(M, N));
  const stof_op *G = tu_ph(g, "gamma", STOF_DTYPE_F32, 1, TU_SHAPE(N));
  const stof_op *Bt = tu_ph(g, "beta", STOF_DTYPE_F32, 1, TU_SHAPE(N));
  const stof_expr *a1[1], *a2[2], *r;
  const stof_expr *inv_n = tu_f32(g, 1.0 / N);
  tu_axes(g, 1, TU_SHAPE(M), a1);
  r = tu_raxis(g, N, "r");
  const stof_op *MEAN = tu_compute(
      g, "mean", 1, a1,
      tu_reduce(g, STOF_REDUCE_SUM, tu_bin(g, STOF_EXPR_MUL, tu_load(g, X, 2, a1[0], r), inv_n), 1, r));
  tu_axes(g, 1, TU_SHAPE(M), a1);
  r = tu_raxis(g, N, "r");
  const stof_expr *dev = tu_bin(g, STOF_EXPR_SUB, tu_load(g, X, 2, a1[0], r), tu_load(g, MEAN, 1, a1[0]));
  const stof_op *VAR = tu_compute(
      g, "var", 1, a1,
      tu_reduce(g, STOF_REDUCE_SUM, tu_bin(g, STOF_EXPR_MUL, tu_bin(g, STOF_EXPR_MUL, dev, dev), inv_n),
                1, r));
  tu_axes(g, 2, TU_SHAPE(M, N), a2);
  const stof_expr *norm = tu_bin(
      g, STOF_EXPR_MUL,
      tu_bin(g, STOF_EXPR_SUB, tu_load(g, X, 2, a2[0], a2[1]), tu_load(g, MEAN, 1, a2[0])),
      tu_un(g, STOF_EXPR_RSQRT, tu_bin(g, STOF_EXPR_ADD, tu_load(g, VAR, 1, a2[0]), tu_f32(g, eps))));
  const stof_op *Y = tu_compute(
      g, "layer_norm", 2, a2,
      tu_bin(g, STOF_EXPR_ADD, tu_bin(g, STOF_EXPR_MUL, norm, tu_load(g, G, 1, a2[1])),
             tu_load(g, Bt, 1, a2[1])));
  uint64_t seed = 3;
  stof_tensor *tx = tu_tensor_uniform(ctx, STOF_DTYPE_F32, 2, TU_SHAPE(M, N), &seed, -2, 3);
  stof_tensor *tg = tu_tensor_uniform(ctx, STOF_DTYPE_F32, 1, TU_SHAPE(N), &seed, 0.5, 1.5);
  stof_tensor *tbeta = tu_tensor_uniform(ctx, STOF_DTYPE_F32, 1, TU_SHAPE(N), &seed, -1, 1);
  stof_tensor *res[1];
  eval_ok(g, 1, &Y, 3, (const stof_op *[]){X, G, Bt}, (const stof_tensor *[]){tx, tg, tbeta}, res);
  double want[M * N];
  for (int i = 0; i < M; i++) {
    double mean = 0, var = 0;
    for (int j = 0; j < N; j++) mean += stof_tensor_load(tx, i * N + j);
    mean /= N;
    for (int j = 0; j < N; j++) {
      double d = stof_tensor_load(tx, i * N + j) - mean;
      var += d * d;
    }
    var /= N;
    for (int j = 0; j < N; j++)
      want[i * N + j] = (stof_tensor_load(tx, i * N + j) - mean) / sqrt(var + eps) *
                            stof_tensor_load(tg, j) + stof_tensor_load(tbeta, j);
  }
  tu_check_close(res[0], want, M * N, 1e-5);
  stof_tensor_free(res[0]);
  stof_tensor_free(tx);
  stof_tensor_free(tg);
  stof_tensor_free(tbeta);
  stof_graph_free(g);
  tu_ctx_free(ctx, &h);
}

/* ---------------------------------------------------------------- GELU */

static void interp_gelu_erf_and_tanh_forms_match_reference(void **state) {
  enum { M = 5, N = 23 };
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  stof_graph *g = NULL;
  TU_OK(ctx, stof_graph_new(ctx, &g));
  const stof_op *X = tu_ph(g, "X", STOF_DTYPE_F32, 2, TU_SHAPE(M, N));
  const stof_expr *a[2];
  tu_axes(g, 2, TU_SHAPE(M, N), a);
  const stof_expr *x = tu_load(g, X, 2, a[0], a[1]);
  /* 0.5 x (1 + erf(x / sqrt 2)) */
  const stof_op *GE = tu_compute(
      g, "gelu", 2, a,
      tu_bin(g, STOF_EXPR_MUL, tu_bin(g, STOF_EXPR_MUL, tu_f32(g, 0.5), x),
             tu_bin(g, STOF_EXPR_ADD, tu_f32(g, 1),
                    tu_un(g, STOF_EXPR_ERF, tu_bin(g, STOF_EXPR_MUL, x, tu_f32(g, M_SQRT1_2))))));
  tu_axes(g, 2, TU_SHAPE(M, N), a);
  x = tu_load(g, X, 2, a[0], a[1]);
  /* 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
  const stof_expr *x3 = tu_bin(g, STOF_EXPR_MUL, tu_bin(g, STOF_EXPR_MUL, x, x), x);
  const stof_expr *inner = tu_bin(g, STOF_EXPR_MUL, tu_f32(g, sqrt(2 / M_PI)),
                                  tu_bin(g, STOF_EXPR_ADD, x, tu_bin(g, STOF_EXPR_MUL, tu_f32(g, 0.044715), x3)));
  const stof_op *GT = tu_compute(
      g, "gelu_tanh", 2, a,
      tu_bin(g, STOF_EXPR_MUL, tu_bin(g, STOF_EXPR_MUL, tu_f32(g, 0.5), x),
             tu_bin(g, STOF_EXPR_ADD, tu_f32(g, 1), tu_un(g, STOF_EXPR_TANH, inner))));
  uint64_t seed = 4;
  stof_tensor *tx = tu_tensor_uniform(ctx, STOF_DTYPE_F32, 2, TU_SHAPE(M, N), &seed, -3, 3);
  stof_tensor *res[2];
  eval_ok(g, 2, (const stof_op *[]){GE, GT}, 1, &X, (const stof_tensor *[]){tx}, res);
  double we[M * N], wt[M * N];
  double diff = 0;
  for (int n = 0; n < M * N; n++) {
    double v = stof_tensor_load(tx, n);
    we[n] = 0.5 * v * (1 + erf(v / sqrt(2.0)));
    wt[n] = 0.5 * v * (1 + tanh(sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
    diff = fmax(diff, fabs(we[n] - wt[n]));
  }
  assert_true(diff > 1e-5); /* the two forms differ: each output is checked for its own */
  tu_check_close(res[0], we, M * N, 1e-5);
  tu_check_close(res[1], wt, M * N, 1e-5);
  stof_tensor_free(res[0]);
  stof_tensor_free(res[1]);
  stof_tensor_free(tx);
  stof_graph_free(g);
  tu_ctx_free(ctx, &h);
}

/* ---------------------------------------------------------------- attention */

enum { BH = 6, S = 13, D = 8 };

typedef struct attn {
  const stof_op *Q, *K, *V, *Mask, *O;
} attn;

/* O = softmax(mask(Q K^T / sqrt(D))) V over [BH, S, D]. With mask_tensor, the mask is a
 * bool placeholder [S, S] shared by all heads and fully masked rows give 0; otherwise the
 * mask is causal (j <= i). */
static attn build_attention(stof_graph *g, int mask_tensor) {
  attn t;
  t.Q = tu_ph(g, "Q", STOF_DTYPE_F32, 3, TU_SHAPE(BH, S, D));
  t.K = tu_ph(g, "K", STOF_DTYPE_F32, 3, TU_SHAPE(BH, S, D));
  t.V = tu_ph(g, "V", STOF_DTYPE_F32, 3, TU_SHAPE(BH, S, D));
  t.Mask = mask_tensor ? tu_ph(g, "mask", STOF_DTYPE_BOOL, 2, TU_SHAPE(S, S)) : NULL;
  const stof_expr *a[3], *a2[2], *r;
  /* scores[b, i, j] = sum_d Q[b, i, d] K[b, j, d] */
  tu_axes(g, 3, TU_SHAPE(BH, S, S), a);
  r = tu_raxis(g, D, "d");
  const stof_op *SC = tu_compute(
      g, "scores", 3, a,
      tu_reduce(g, STOF_REDUCE_SUM,
                tu_bin(g, STOF_EXPR_MUL, tu_load(g, t.Q, 3, a[0], a[1], r),
                       tu_load(g, t.K, 3, a[0], a[2], r)),
                1, r));
  /* masked = valid ? scores / sqrt(D) : -inf */
  tu_axes(g, 3, TU_SHAPE(BH, S, S), a);
  const stof_expr *valid = mask_tensor ? tu_load(g, t.Mask, 2, a[1], a[2])
                                       : tu_bin(g, STOF_EXPR_LE, a[2], a[1]);
  const stof_op *MS = tu_compute(
      g, "masked", 3, a,
      tu_sel(g, valid,
             tu_bin(g, STOF_EXPR_MUL, tu_load(g, SC, 3, a[0], a[1], a[2]), tu_f32(g, 1 / sqrt(D))),
             tu_f32(g, -INFINITY)));
  /* row max */
  tu_axes(g, 2, TU_SHAPE(BH, S), a2);
  r = tu_raxis(g, S, "jm");
  const stof_op *MX = tu_compute(
      g, "row_max", 2, a2, tu_reduce(g, STOF_REDUCE_MAX, tu_load(g, MS, 3, a2[0], a2[1], r), 1, r));
  /* e = exp(masked - max), guarded to 0 where masked out */
  tu_axes(g, 3, TU_SHAPE(BH, S, S), a);
  const stof_expr *e = tu_un(g, STOF_EXPR_EXP,
                             tu_bin(g, STOF_EXPR_SUB, tu_load(g, MS, 3, a[0], a[1], a[2]),
                                    tu_load(g, MX, 2, a[0], a[1])));
  if (mask_tensor) e = tu_sel(g, tu_load(g, t.Mask, 2, a[1], a[2]), e, tu_f32(g, 0));
  const stof_op *E = tu_compute(g, "exp", 3, a, e);
  /* row sum */
  tu_axes(g, 2, TU_SHAPE(BH, S), a2);
  r = tu_raxis(g, S, "js");
  const stof_op *SUM = tu_compute(
      g, "row_sum", 2, a2, tu_reduce(g, STOF_REDUCE_SUM, tu_load(g, E, 3, a2[0], a2[1], r), 1, r));
  /* p = e / (sum > 0 ? sum : 1) */
  tu_axes(g, 3, TU_SHAPE(BH, S, S), a);
  const stof_expr *sum = tu_load(g, SUM, 2, a[0], a[1]);
  const stof_expr *den = tu_sel(g, tu_bin(g, STOF_EXPR_GT, sum, tu_f32(g, 0)), sum, tu_f32(g, 1));
  const stof_op *P = tu_compute(g, "probs", 3, a,
                                tu_bin(g, STOF_EXPR_DIV, tu_load(g, E, 3, a[0], a[1], a[2]), den));
  /* O[b, i, d] = sum_j P[b, i, j] V[b, j, d] */
  tu_axes(g, 3, TU_SHAPE(BH, S, D), a);
  r = tu_raxis(g, S, "jv");
  t.O = tu_compute(
      g, "attn_out", 3, a,
      tu_reduce(g, STOF_REDUCE_SUM,
                tu_bin(g, STOF_EXPR_MUL, tu_load(g, P, 3, a[0], a[1], r),
                       tu_load(g, t.V, 3, a[0], r, a[2])),
                1, r));
  return t;
}

/* The reference: valid(i, j) from the mask (or causal); rows with no valid key give 0. */
static void attention_reference(const stof_tensor *q, const stof_tensor *k, const stof_tensor *v,
                                const unsigned char *mask, double *out) {
  for (int b = 0; b < BH; b++)
    for (int i = 0; i < S; i++) {
      double sc[S], mx = -INFINITY, s = 0;
      int any = 0;
      for (int j = 0; j < S; j++) {
        int ok = mask ? mask[i * S + j] : j <= i;
        sc[j] = -INFINITY;
        if (!ok) continue;
        double acc = 0;
        for (int d = 0; d < D; d++)
          acc += stof_tensor_load(q, (b * S + i) * D + d) * stof_tensor_load(k, (b * S + j) * D + d);
        sc[j] = acc / sqrt(D);
        mx = fmax(mx, sc[j]);
        any = 1;
      }
      for (int d = 0; d < D; d++) out[(b * S + i) * D + d] = 0;
      if (!any) continue;
      for (int j = 0; j < S; j++) s += isinf(sc[j]) ? 0 : exp(sc[j] - mx);
      for (int j = 0; j < S; j++) {
        if (isinf(sc[j])) continue;
        double p = exp(sc[j] - mx) / s;
        for (int d = 0; d < D; d++) out[(b * S + i) * D + d] += p * stof_tensor_load(v, (b * S + j) * D + d);
      }
    }
}

static void interp_causal_attention_matches_reference(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  stof_graph *g = NULL;
  TU_OK(ctx, stof_graph_new(ctx, &g));
  attn t = build_attention(g, 0);
  uint64_t seed = 5;
  stof_tensor *q = tu_tensor_uniform(ctx, STOF_DTYPE_F32, 3, TU_SHAPE(BH, S, D), &seed, -2, 2);
  stof_tensor *k = tu_tensor_uniform(ctx, STOF_DTYPE_F32, 3, TU_SHAPE(BH, S, D), &seed, -2, 2);
  stof_tensor *v = tu_tensor_uniform(ctx, STOF_DTYPE_F32, 3, TU_SHAPE(BH, S, D), &seed, -1, 1);
  stof_tensor *res[1];
  eval_ok(g, 1, &t.O, 3, (const stof_op *[]){t.Q, t.K, t.V}, (const stof_tensor *[]){q, k, v}, res);
  static double want[BH * S * D];
  attention_reference(q, k, v, NULL, want);
  /* row 0 of each head attends to key 0 only: it equals V[b, 0, :] */
  for (int b = 0; b < BH; b++)
    for (int d = 0; d < D; d++)
      assert_true(fabs(stof_tensor_load(res[0], (b * S) * D + d) -
                       stof_tensor_load(v, (b * S) * D + d)) < 1e-6);
  tu_check_close(res[0], want, BH * S * D, 1e-5);
  stof_tensor_free(res[0]);
  stof_tensor_free(q);
  stof_tensor_free(k);
  stof_tensor_free(v);
  stof_graph_free(g);
  tu_ctx_free(ctx, &h);
}

static void interp_fully_masked_rows_give_zeros_not_nan(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  stof_graph *g = NULL;
  TU_OK(ctx, stof_graph_new(ctx, &g));
  attn t = build_attention(g, 1);
  uint64_t seed = 6;
  stof_tensor *q = tu_tensor_uniform(ctx, STOF_DTYPE_F32, 3, TU_SHAPE(BH, S, D), &seed, -2, 2);
  stof_tensor *k = tu_tensor_uniform(ctx, STOF_DTYPE_F32, 3, TU_SHAPE(BH, S, D), &seed, -2, 2);
  stof_tensor *v = tu_tensor_uniform(ctx, STOF_DTYPE_F32, 3, TU_SHAPE(BH, S, D), &seed, -1, 1);
  stof_tensor *m = NULL;
  TU_OK(ctx, stof_tensor_new(ctx, STOF_DTYPE_BOOL, 2, TU_SHAPE(S, S), STOF_DEVICE_CPU, &m));
  unsigned char mask[S * S];
  for (int i = 0; i < S; i++)
    for (int j = 0; j < S; j++) {
      int ok = (tu_splitmix(&seed) & 1) || j == i;
      if (i == 0 || i == 7) ok = 0; /* rows 0 and 7: no valid key */
      mask[i * S + j] = (unsigned char)ok;
      TU_OK(ctx, stof_tensor_set(m, TU_SHAPE(i, j), ok));
    }
  stof_tensor *res[1];
  eval_ok(g, 1, &t.O, 4, (const stof_op *[]){t.Q, t.K, t.V, t.Mask},
          (const stof_tensor *[]){q, k, v, m}, res);
  static double want[BH * S * D];
  attention_reference(q, k, v, mask, want);
  for (int b = 0; b < BH; b++)
    for (int d = 0; d < D; d++) {
      double r0 = stof_tensor_load(res[0], (b * S + 0) * D + d);
      double r7 = stof_tensor_load(res[0], (b * S + 7) * D + d);
      if (r0 != 0 || r7 != 0) fail_msg("masked row of head %d: %g, %g (want 0)", b, r0, r7);
    }
  tu_check_close(res[0], want, BH * S * D, 1e-5);
  stof_tensor_free(res[0]);
  stof_tensor_free(q);
  stof_tensor_free(k);
  stof_tensor_free(v);
  stof_tensor_free(m);
  stof_graph_free(g);
  tu_ctx_free(ctx, &h);
}

/* ---------------------------------------------------------------- elementwise ops */

typedef struct ew_case {
  const char *name;
  stof_expr_kind kind; /* unary or binary */
  double (*ref)(double, double);
} ew_case;

static double r_neg(double a, double b) { return -a; }
static double r_exp(double a, double b) { return exp(a); }
static double r_log(double a, double b) { return log(a); }
static double r_sqrt(double a, double b) { return sqrt(a); }
static double r_rsqrt(double a, double b) { return 1 / sqrt(a); }
static double r_tanh(double a, double b) { return tanh(a); }
static double r_erf(double a, double b) { return erf(a); }
static double r_sigmoid(double a, double b) { return 1 / (1 + exp(-a)); }
static double r_abs(double a, double b) { return fabs(b); }
static double r_sin(double a, double b) { return sin(b); }
static double r_cos(double a, double b) { return cos(b); }
static double r_floor(double a, double b) { return floor(b); }
static double r_add(double a, double b) { return a + b; }
static double r_sub(double a, double b) { return a - b; }
static double r_mul(double a, double b) { return a * b; }
static double r_div(double a, double b) { return a / b; }
static double r_min(double a, double b) { return fmin(a, b); }
static double r_max(double a, double b) { return fmax(a, b); }
static double r_pow(double a, double b) { return pow(a, b); }
static double r_lt(double a, double b) { return a < b; }
static double r_le(double a, double b) { return a <= b; }
static double r_gt(double a, double b) { return a > b; }
static double r_ge(double a, double b) { return a >= b; }
static double r_eq(double a, double b) { return a == b; }
static double r_ne(double a, double b) { return a != b; }

/* Every unary and binary float op against C's math library, stored as float64 so the
 * check can be tight (the interpreter computes in double). Unary ops marked "on y" take
 * y (of both signs); the others take x > 0. */
static void interp_elementwise_ops_match_c_math_in_double(void **state) {
  enum { N = 64 };
  static const ew_case cases[] = {
      {"neg", STOF_EXPR_NEG, r_neg},     {"exp", STOF_EXPR_EXP, r_exp},
      {"log", STOF_EXPR_LOG, r_log},     {"sqrt", STOF_EXPR_SQRT, r_sqrt},
      {"rsqrt", STOF_EXPR_RSQRT, r_rsqrt}, {"tanh", STOF_EXPR_TANH, r_tanh},
      {"erf", STOF_EXPR_ERF, r_erf},     {"sigmoid", STOF_EXPR_SIGMOID, r_sigmoid},
      {"abs", STOF_EXPR_ABS, r_abs},     {"sin", STOF_EXPR_SIN, r_sin},
      {"cos", STOF_EXPR_COS, r_cos},     {"floor", STOF_EXPR_FLOOR, r_floor},
      {"add", STOF_EXPR_ADD, r_add},     {"sub", STOF_EXPR_SUB, r_sub},
      {"mul", STOF_EXPR_MUL, r_mul},     {"div", STOF_EXPR_DIV, r_div},
      {"min", STOF_EXPR_MIN, r_min},     {"max", STOF_EXPR_MAX, r_max},
      {"pow", STOF_EXPR_POW, r_pow},     {"lt", STOF_EXPR_LT, r_lt},
      {"le", STOF_EXPR_LE, r_le},        {"gt", STOF_EXPR_GT, r_gt},
      {"ge", STOF_EXPR_GE, r_ge},        {"eq", STOF_EXPR_EQ, r_eq},
      {"ne", STOF_EXPR_NE, r_ne},
  };
  enum { NC = sizeof cases / sizeof *cases };
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  stof_graph *g = NULL;
  TU_OK(ctx, stof_graph_new(ctx, &g));
  const stof_op *X = tu_ph(g, "X", STOF_DTYPE_F32, 1, TU_SHAPE(N));
  const stof_op *Y = tu_ph(g, "Y", STOF_DTYPE_F32, 1, TU_SHAPE(N));
  const stof_op *outs[NC];
  for (int c = 0; c < NC; c++) {
    const stof_expr *a[1];
    tu_axes(g, 1, TU_SHAPE(N), a);
    const stof_expr *x = tu_load(g, X, 1, a[0]), *y = tu_load(g, Y, 1, a[0]), *body;
    stof_expr_kind k = cases[c].kind;
    int on_y = k == STOF_EXPR_ABS || k == STOF_EXPR_SIN || k == STOF_EXPR_COS || k == STOF_EXPR_FLOOR;
    body = stof_expr_kind_is_unary(k) ? tu_un(g, k, on_y ? y : x) : tu_bin(g, k, x, y);
    TU_OK(ctx, stof_te_compute(g, cases[c].name, 1, a, body, STOF_DTYPE_F64, &outs[c]));
  }
  uint64_t seed = 13;
  stof_tensor *tx = tu_tensor_uniform(ctx, STOF_DTYPE_F32, 1, TU_SHAPE(N), &seed, 0.1, 3);
  stof_tensor *ty = tu_tensor_uniform(ctx, STOF_DTYPE_F32, 1, TU_SHAPE(N), &seed, -3, 3);
  stof_tensor_store(ty, 0, stof_tensor_load(tx, 0)); /* one tie for eq/le/ge */
  stof_tensor *res[NC];
  eval_ok(g, NC, outs, 2, (const stof_op *[]){X, Y}, (const stof_tensor *[]){tx, ty}, res);
  for (int c = 0; c < NC; c++)
    for (int i = 0; i < N; i++) {
      double x = stof_tensor_load(tx, i), y = stof_tensor_load(ty, i);
      double want = cases[c].ref(x, y), got = stof_tensor_load(res[c], i);
      if (!(fabs(got - want) <= 1e-12 * fmax(1, fabs(want))))
        fail_msg("%s(x=%.9g, y=%.9g) = %.17g, want %.17g", cases[c].name, x, y, got, want);
    }
  for (int c = 0; c < NC; c++) stof_tensor_free(res[c]);
  stof_tensor_free(tx);
  stof_tensor_free(ty);
  stof_graph_free(g);
  tu_ctx_free(ctx, &h);
}

static void interp_logic_ops_give_bool_values(void **state) {
  enum { N = 12 };
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  stof_graph *g = NULL;
  TU_OK(ctx, stof_graph_new(ctx, &g));
  const stof_expr *a[1];
  tu_axes(g, 1, TU_SHAPE(N), a);
  /* p = i % 2 == 0, q = i < 5 */
  const stof_expr *p = tu_bin(g, STOF_EXPR_EQ, tu_bin(g, STOF_EXPR_MOD, a[0], tu_int(g, 2)), tu_int(g, 0));
  const stof_expr *q = tu_bin(g, STOF_EXPR_LT, a[0], tu_int(g, 5));
  const stof_op *AND = tu_compute(g, "and", 1, a, tu_bin(g, STOF_EXPR_AND, p, q));
  tu_axes(g, 1, TU_SHAPE(N), a);
  p = tu_bin(g, STOF_EXPR_EQ, tu_bin(g, STOF_EXPR_MOD, a[0], tu_int(g, 2)), tu_int(g, 0));
  q = tu_bin(g, STOF_EXPR_LT, a[0], tu_int(g, 5));
  const stof_op *OR = tu_compute(g, "or", 1, a, tu_bin(g, STOF_EXPR_OR, p, q));
  tu_axes(g, 1, TU_SHAPE(N), a);
  q = tu_bin(g, STOF_EXPR_LT, a[0], tu_int(g, 5));
  const stof_op *NOT = tu_compute(g, "not", 1, a, tu_un(g, STOF_EXPR_NOT, q));
  assert_int_equal(AND->dtype, STOF_DTYPE_BOOL);
  stof_tensor *res[3];
  eval_ok(g, 3, (const stof_op *[]){AND, OR, NOT}, 0, NULL, NULL, res);
  for (int i = 0; i < N; i++) {
    assert_true(stof_tensor_load(res[0], i) == (double)(i % 2 == 0 && i < 5));
    assert_true(stof_tensor_load(res[1], i) == (double)(i % 2 == 0 || i < 5));
    assert_true(stof_tensor_load(res[2], i) == (double)!(i < 5));
  }
  for (int i = 0; i < 3; i++) stof_tensor_free(res[i]);
  stof_graph_free(g);
  tu_ctx_free(ctx, &h);
}

/* ---------------------------------------------------------------- dtypes */

static void interp_f16_output_rounds_to_f16_values(void **state) {
  enum { N = 257 };
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  stof_graph *g = NULL;
  TU_OK(ctx, stof_graph_new(ctx, &g));
  const stof_op *X = tu_ph(g, "X", STOF_DTYPE_F32, 1, TU_SHAPE(N));
  const stof_expr *a[1];
  tu_axes(g, 1, TU_SHAPE(N), a);
  /* 3x + 0.5 is exact in double for f32 x: the only rounding is the f16 store */
  const stof_op *Y = NULL;
  TU_OK(ctx, stof_te_compute(g, "y16", 1, a,
                             tu_bin(g, STOF_EXPR_ADD,
                                    tu_bin(g, STOF_EXPR_MUL, tu_load(g, X, 1, a[0]), tu_f32(g, 3)),
                                    tu_f32(g, 0.5)),
                             STOF_DTYPE_F16, &Y));
  assert_int_equal(Y->dtype, STOF_DTYPE_F16);
  uint64_t seed = 7;
  stof_tensor *tx = tu_tensor_uniform(ctx, STOF_DTYPE_F32, 1, TU_SHAPE(N), &seed, -1000, 1000);
  stof_tensor *res[1];
  eval_ok(g, 1, &Y, 1, &X, (const stof_tensor *[]){tx}, res);
  int rounded = 0;
  for (int64_t i = 0; i < N; i++) {
    double exact = 3 * stof_tensor_load(tx, i) + 0.5;
    double want = tu_round_f16(exact), got = NAN;
    TU_OK(ctx, stof_tensor_get(res[0], &i, &got));
    if (got != want) fail_msg("y16[%lld] = %.10g, want %.10g (exact %.10g)", (long long)i, got, want, exact);
    rounded += want != exact;
  }
  assert_true(rounded > N / 2);
  stof_tensor_free(res[0]);
  stof_tensor_free(tx);
  stof_graph_free(g);
  tu_ctx_free(ctx, &h);
}

static void interp_accepts_f16_feed_for_f32_placeholder(void **state) {
  enum { N = 31 };
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  stof_graph *g = NULL;
  TU_OK(ctx, stof_graph_new(ctx, &g));
  const stof_op *X = tu_ph(g, "X", STOF_DTYPE_F32, 1, TU_SHAPE(N));
  const stof_expr *a[1];
  tu_axes(g, 1, TU_SHAPE(N), a);
  const stof_op *Y = tu_compute(g, "twice", 1, a,
                                tu_bin(g, STOF_EXPR_MUL, tu_load(g, X, 1, a[0]), tu_f32(g, 2)));
  uint64_t seed = 8;
  stof_tensor *tx = tu_tensor_uniform(ctx, STOF_DTYPE_F16, 1, TU_SHAPE(N), &seed, -4, 4);
  stof_tensor *res[1];
  eval_ok(g, 1, &Y, 1, &X, (const stof_tensor *[]){tx}, res);
  double want[N];
  for (int i = 0; i < N; i++) want[i] = 2 * stof_tensor_load(tx, i);
  for (int i = 0; i < N; i++) assert_true(stof_tensor_load(res[0], i) == want[i]);
  stof_tensor_free(res[0]);
  stof_tensor_free(tx);
  stof_graph_free(g);
  tu_ctx_free(ctx, &h);
}

static void interp_accepts_strided_view_as_feed(void **state) {
  enum { M = 4, N = 6 };
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  stof_graph *g = NULL;
  TU_OK(ctx, stof_graph_new(ctx, &g));
  const stof_op *X = tu_ph(g, "X", STOF_DTYPE_F32, 2, TU_SHAPE(M, N));
  const stof_expr *a[2];
  tu_axes(g, 2, TU_SHAPE(M, N), a);
  const stof_op *Y = tu_compute(g, "Y", 2, a,
                                tu_bin(g, STOF_EXPR_ADD, tu_load(g, X, 2, a[0], a[1]), tu_f32(g, 0.5)));
  /* storage is N x M; the feed is its M x N transpose */
  float base[N * M];
  uint64_t seed = 14;
  for (int n = 0; n < N * M; n++) base[n] = (float)tu_uniform(&seed, -1, 1);
  stof_tensor *view = NULL;
  TU_OK(ctx, stof_tensor_wrap(ctx, STOF_DTYPE_F32, 2, TU_SHAPE(M, N), TU_SHAPE(1, M), base,
                              STOF_DEVICE_CPU, &view));
  stof_tensor *res[1];
  eval_ok(g, 1, &Y, 1, &X, (const stof_tensor *[]){view}, res);
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++)
      assert_true(stof_tensor_load(res[0], i * N + j) == tu_round_f32((double)base[j * M + i] + 0.5));
  stof_tensor_free(res[0]);
  stof_tensor_free(view);
  stof_graph_free(g);
  tu_ctx_free(ctx, &h);
}

static void interp_integer_division_floors_and_select_cast_work(void **state) {
  enum { N = 11 };
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  stof_graph *g = NULL;
  TU_OK(ctx, stof_graph_new(ctx, &g));
  const stof_expr *a[1];
  tu_axes(g, 1, TU_SHAPE(N), a);
  const stof_expr *im5 = tu_bin(g, STOF_EXPR_SUB, a[0], tu_int(g, 5));
  const stof_op *DIV = tu_compute(g, "idiv", 1, a, tu_bin(g, STOF_EXPR_DIV, im5, tu_int(g, 2)));
  tu_axes(g, 1, TU_SHAPE(N), a);
  im5 = tu_bin(g, STOF_EXPR_SUB, a[0], tu_int(g, 5));
  const stof_op *FDIV = tu_compute(g, "floordiv", 1, a, tu_bin(g, STOF_EXPR_FLOORDIV, im5, tu_int(g, 3)));
  tu_axes(g, 1, TU_SHAPE(N), a);
  im5 = tu_bin(g, STOF_EXPR_SUB, a[0], tu_int(g, 5));
  const stof_expr *fl = NULL;
  TU_OK(ctx, stof_te_cast(g, STOF_DTYPE_F32, im5, &fl));
  const stof_op *RDIV = tu_compute(g, "fdiv", 1, a, tu_bin(g, STOF_EXPR_DIV, fl, tu_f32(g, 2)));
  tu_axes(g, 1, TU_SHAPE(N), a);
  const stof_expr *fi = NULL;
  TU_OK(ctx, stof_te_cast(g, STOF_DTYPE_F32, a[0], &fi));
  const stof_op *SEL = tu_compute(
      g, "sel", 1, a,
      tu_sel(g, tu_bin(g, STOF_EXPR_LT, a[0], tu_int(g, 3)), tu_bin(g, STOF_EXPR_MUL, fi, tu_f32(g, 1.5)),
             tu_f32(g, -1.25)));
  tu_axes(g, 1, TU_SHAPE(N), a);
  TU_OK(ctx, stof_te_cast(g, STOF_DTYPE_I32,
                          tu_bin(g, STOF_EXPR_MUL, tu_f32(g, 0.75), tu_un(g, STOF_EXPR_NEG, a[0])), &fi));
  const stof_op *TRUNC = tu_compute(g, "trunc", 1, a, fi);
  assert_false(stof_dtype_is_float(DIV->dtype));
  assert_int_equal(TRUNC->dtype, STOF_DTYPE_I32);
  stof_tensor *res[5];
  eval_ok(g, 5, (const stof_op *[]){DIV, FDIV, RDIV, SEL, TRUNC}, 0, NULL, NULL, res);
  for (int i = 0; i < N; i++) {
    assert_true(stof_tensor_load(res[0], i) == floor((i - 5) / 2.0));
    assert_true(stof_tensor_load(res[1], i) == floor((i - 5) / 3.0));
    assert_true(stof_tensor_load(res[2], i) == (i - 5) / 2.0);
    assert_true(stof_tensor_load(res[3], i) == (i < 3 ? i * 1.5 : -1.25));
    assert_true(stof_tensor_load(res[4], i) == (double)(int)(-0.75 * i)); /* truncates */
  }
  for (int i = 0; i < 5; i++) stof_tensor_free(res[i]);
  stof_graph_free(g);
  tu_ctx_free(ctx, &h);
}

static void interp_reduce_over_two_axes_with_sum_min_max(void **state) {
  enum { A0 = 4, A1 = 5, A2 = 6 };
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  stof_graph *g = NULL;
  TU_OK(ctx, stof_graph_new(ctx, &g));
  const stof_op *X = tu_ph(g, "X", STOF_DTYPE_F32, 3, TU_SHAPE(A0, A1, A2));
  const stof_op *outs[3];
  stof_reduce_kind comb[3] = {STOF_REDUCE_SUM, STOF_REDUCE_MIN, STOF_REDUCE_MAX};
  for (int c = 0; c < 3; c++) {
    const stof_expr *a[1];
    tu_axes(g, 1, TU_SHAPE(A0), a);
    const stof_expr *r1 = tu_raxis(g, A1, "r1"), *r2 = tu_raxis(g, A2, "r2");
    outs[c] = tu_compute(g, stof_reduce_kind_name(comb[c]), 1, a,
                         tu_reduce(g, comb[c], tu_load(g, X, 3, a[0], r1, r2), 2, r1, r2));
  }
  uint64_t seed = 9;
  stof_tensor *tx = tu_tensor_uniform(ctx, STOF_DTYPE_F32, 3, TU_SHAPE(A0, A1, A2), &seed, -1, 1);
  /* row 0 all negative (its max is < 0), row 1 all positive (its min is > 0) */
  for (int n = 0; n < A1 * A2; n++) {
    stof_tensor_store(tx, n, stof_tensor_load(tx, n) - 2);
    stof_tensor_store(tx, A1 * A2 + n, stof_tensor_load(tx, A1 * A2 + n) + 2);
  }
  stof_tensor *res[3];
  eval_ok(g, 3, outs, 1, &X, (const stof_tensor *[]){tx}, res);
  double ws[A0], wmin[A0], wmax[A0];
  for (int i = 0; i < A0; i++) {
    ws[i] = 0;
    wmin[i] = INFINITY;
    wmax[i] = -INFINITY;
    for (int n = 0; n < A1 * A2; n++) {
      double v = stof_tensor_load(tx, i * A1 * A2 + n);
      ws[i] += v;
      wmin[i] = fmin(wmin[i], v);
      wmax[i] = fmax(wmax[i], v);
    }
    assert_true(stof_tensor_load(res[1], i) == wmin[i]);
    assert_true(stof_tensor_load(res[2], i) == wmax[i]);
  }
  tu_check_close(res[0], ws, A0, 1e-5);
  for (int i = 0; i < 3; i++) stof_tensor_free(res[i]);
  stof_tensor_free(tx);
  stof_graph_free(g);
  tu_ctx_free(ctx, &h);
}

/* ---------------------------------------------------------------- extern ops */

typedef struct ext_state {
  int calls;
  int ninput;
  stof_status fail;
} ext_state;

/* out = 2 x + 1, element by element, through the checked accessors */
static stof_status ext_affine(stof_ctx *ctx, int ninput, const stof_tensor *const *inputs,
                              stof_tensor *output, void *ud) {
  ext_state *s = ud;
  s->calls++;
  s->ninput = ninput;
  if (s->fail) return stof_ctx_error(ctx, s->fail, "ext_fail: head dim %d unsupported", 96);
  const stof_tensor *x = inputs[0];
  for (int64_t i = 0; i < x->shape[0]; i++)
    for (int64_t j = 0; j < x->shape[1]; j++) {
      double v;
      int64_t idx[2] = {i, j};
      stof_status st = stof_tensor_get(x, idx, &v);
      if (st) return st;
      st = stof_tensor_set(output, idx, 2 * v + 1);
      if (st) return st;
    }
  return STOF_OK;
}

static void interp_extern_cpu_fn_is_called_and_used_downstream(void **state) {
  enum { M = 5, N = 7 };
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  stof_graph *g = NULL;
  TU_OK(ctx, stof_graph_new(ctx, &g));
  const stof_op *X = tu_ph(g, "X", STOF_DTYPE_F32, 2, TU_SHAPE(M, N));
  ext_state es = {0, 0, STOF_OK};
  const stof_op *EXT = NULL;
  TU_OK(ctx, stof_te_extern(g, "affine", 1, &X, 2, TU_SHAPE(M, N), STOF_DTYPE_F32, ext_affine,
                            &es, NULL, 0, &EXT));
  const stof_expr *a[2];
  tu_axes(g, 2, TU_SHAPE(M, N), a);
  const stof_op *Y = tu_compute(g, "Y", 2, a,
                                tu_bin(g, STOF_EXPR_MUL, tu_load(g, EXT, 2, a[0], a[1]),
                                       tu_load(g, X, 2, a[0], a[1])));
  uint64_t seed = 10;
  stof_tensor *tx = tu_tensor_uniform(ctx, STOF_DTYPE_F32, 2, TU_SHAPE(M, N), &seed, -1, 1);
  stof_tensor *res[1];
  eval_ok(g, 1, &Y, 1, &X, (const stof_tensor *[]){tx}, res);
  assert_int_equal(es.calls, 1);
  assert_int_equal(es.ninput, 1);
  double want[M * N];
  for (int n = 0; n < M * N; n++) {
    double x = stof_tensor_load(tx, n);
    want[n] = (2 * x + 1) * x;
  }
  tu_check_close(res[0], want, M * N, 1e-5);
  stof_tensor_free(res[0]);
  /* an error of the cpu_fn comes back with its status and message, and nothing leaks */
  es.fail = STOF_ERR_UNSUPPORTED;
  res[0] = NULL;
  stof_status s = stof_interp_eval(g, 1, &Y, 1, &X, (const stof_tensor *[]){tx}, res);
  assert_int_equal(s, STOF_ERR_UNSUPPORTED);
  assert_int_equal(stof_ctx_status(ctx), STOF_ERR_UNSUPPORTED);
  TU_MSG(ctx, "head dim 96");
  stof_ctx_clear_error(ctx);
  assert_null(res[0]);
  stof_tensor_free(tx);
  stof_graph_free(g);
  tu_ctx_free(ctx, &h);
}

static void interp_extern_without_cpu_fn_uses_its_semantics(void **state) {
  enum { M = 3, N = 9 };
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  stof_graph *g = NULL;
  TU_OK(ctx, stof_graph_new(ctx, &g));
  const stof_op *X = tu_ph(g, "X", STOF_DTYPE_F32, 2, TU_SHAPE(M, N));
  const stof_expr *a[2];
  tu_axes(g, 2, TU_SHAPE(M, N), a);
  const stof_expr *x = tu_load(g, X, 2, a[0], a[1]);
  const stof_op *SEM = tu_compute(g, "sem", 2, a,
                                  tu_bin(g, STOF_EXPR_ADD, tu_bin(g, STOF_EXPR_MUL, x, x), tu_f32(g, 1)));
  const stof_op *EXT = NULL;
  TU_OK(ctx, stof_te_extern(g, "intrinsic", 1, &X, 2, TU_SHAPE(M, N), STOF_DTYPE_F32, NULL, NULL,
                            SEM, 1, &EXT));
  uint64_t seed = 11;
  stof_tensor *tx = tu_tensor_uniform(ctx, STOF_DTYPE_F32, 2, TU_SHAPE(M, N), &seed, -2, 2);
  stof_tensor *res[1];
  eval_ok(g, 1, &EXT, 1, &X, (const stof_tensor *[]){tx}, res);
  double want[M * N];
  for (int n = 0; n < M * N; n++) {
    double v = stof_tensor_load(tx, n);
    want[n] = v * v + 1;
  }
  tu_check_close(res[0], want, M * N, 1e-5);
  stof_tensor_free(res[0]);
  stof_tensor_free(tx);
  stof_graph_free(g);
  tu_ctx_free(ctx, &h);
}

static void interp_extern_with_no_implementation_fails_naming_it(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  stof_graph *g = NULL;
  TU_OK(ctx, stof_graph_new(ctx, &g));
  const stof_op *X = tu_ph(g, "X", STOF_DTYPE_F32, 1, TU_SHAPE(4));
  const stof_op *EXT = NULL;
  stof_status s = stof_te_extern(g, "noimpl", 1, &X, 1, TU_SHAPE(4), STOF_DTYPE_F32, NULL, NULL,
                                 NULL, 0, &EXT);
  if (s == STOF_OK) {
    /* accepted at build time: the interpreter must refuse it */
    stof_tensor *tx = NULL, *res[1] = {NULL};
    TU_OK(ctx, stof_tensor_rand(ctx, STOF_DTYPE_F32, 1, TU_SHAPE(4), 1, &tx));
    s = stof_interp_eval(g, 1, &EXT, 1, &X, (const stof_tensor *[]){tx}, res);
    assert_null(res[0]);
    stof_tensor_free(tx);
  }
  assert_true(s == STOF_ERR_ARG || s == STOF_ERR_UNSUPPORTED);
  TU_MSG(ctx, "noimpl");
  stof_ctx_clear_error(ctx);
  stof_graph_free(g);
  tu_ctx_free(ctx, &h);
}

/* ---------------------------------------------------------------- errors */

static void interp_out_of_range_dynamic_load_fails_naming_tensor(void **state) {
  enum { N = 6 };
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  stof_graph *g = NULL;
  TU_OK(ctx, stof_graph_new(ctx, &g));
  const stof_op *A = tu_ph(g, "Avec", STOF_DTYPE_F32, 1, TU_SHAPE(N));
  const stof_expr *a[1];
  tu_axes(g, 1, TU_SHAPE(N), a);
  const stof_op *NEXT = tu_compute(g, "next", 1, a,
                                   tu_load(g, A, 1, tu_bin(g, STOF_EXPR_ADD, a[0], tu_int(g, 1))));
  tu_axes(g, 1, TU_SHAPE(N), a);
  const stof_op *PREV = tu_compute(g, "prev", 1, a,
                                   tu_load(g, A, 1, tu_bin(g, STOF_EXPR_SUB, a[0], tu_int(g, 1))));
  /* a shifted load that stays in range is fine */
  tu_axes(g, 1, TU_SHAPE(N - 1), a);
  const stof_op *OK = tu_compute(g, "ok", 1, a,
                                 tu_load(g, A, 1, tu_bin(g, STOF_EXPR_ADD, a[0], tu_int(g, 1))));
  uint64_t seed = 12;
  stof_tensor *ta = tu_tensor_uniform(ctx, STOF_DTYPE_F32, 1, TU_SHAPE(N), &seed, -1, 1);
  stof_tensor *res[1] = {NULL};
  TU_ERR(ctx, stof_interp_eval(g, 1, &NEXT, 1, &A, (const stof_tensor *[]){ta}, res),
         STOF_ERR_RANGE, "Avec");
  assert_null(res[0]);
  TU_ERR(ctx, stof_interp_eval(g, 1, &PREV, 1, &A, (const stof_tensor *[]){ta}, res),
         STOF_ERR_RANGE, "Avec");
  assert_null(res[0]);
  eval_ok(g, 1, &OK, 1, &A, (const stof_tensor *[]){ta}, res);
  for (int i = 0; i < N - 1; i++) assert_true(stof_tensor_load(res[0], i) == stof_tensor_load(ta, i + 1));
  stof_tensor_free(res[0]);
  stof_tensor_free(ta);
  stof_graph_free(g);
  tu_ctx_free(ctx, &h);
}

static void interp_feed_with_wrong_shape_fails(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  stof_graph *g = NULL;
  TU_OK(ctx, stof_graph_new(ctx, &g));
  const stof_op *X = tu_ph(g, "Xin", STOF_DTYPE_F32, 2, TU_SHAPE(3, 4));
  const stof_expr *a[2];
  tu_axes(g, 2, TU_SHAPE(3, 4), a);
  const stof_op *Y = tu_compute(g, "Y", 2, a, tu_un(g, STOF_EXPR_NEG, tu_load(g, X, 2, a[0], a[1])));
  stof_tensor *t43 = NULL, *t12 = NULL, *res[1] = {NULL};
  TU_OK(ctx, stof_tensor_rand(ctx, STOF_DTYPE_F32, 2, TU_SHAPE(4, 3), 1, &t43));
  TU_OK(ctx, stof_tensor_rand(ctx, STOF_DTYPE_F32, 1, TU_SHAPE(12), 1, &t12));
  TU_ERR(ctx, stof_interp_eval(g, 1, &Y, 1, &X, (const stof_tensor *[]){t43}, res), STOF_ERR_SHAPE,
         "Xin");
  assert_null(res[0]);
  TU_ERR(ctx, stof_interp_eval(g, 1, &Y, 1, &X, (const stof_tensor *[]){t12}, res), STOF_ERR_SHAPE,
         "Xin");
  assert_null(res[0]);
  stof_tensor_free(t43);
  stof_tensor_free(t12);
  stof_graph_free(g);
  tu_ctx_free(ctx, &h);
}

static void interp_missing_feed_fails_naming_placeholder(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  stof_graph *g = NULL;
  TU_OK(ctx, stof_graph_new(ctx, &g));
  const stof_op *A = tu_ph(g, "Afed", STOF_DTYPE_F32, 1, TU_SHAPE(4));
  const stof_op *B = tu_ph(g, "Bmissing", STOF_DTYPE_F32, 1, TU_SHAPE(4));
  const stof_expr *a[1];
  tu_axes(g, 1, TU_SHAPE(4), a);
  const stof_op *C = tu_compute(g, "C", 1, a,
                                tu_bin(g, STOF_EXPR_ADD, tu_load(g, A, 1, a[0]), tu_load(g, B, 1, a[0])));
  stof_tensor *ta = NULL, *res[1] = {NULL};
  TU_OK(ctx, stof_tensor_rand(ctx, STOF_DTYPE_F32, 1, TU_SHAPE(4), 1, &ta));
  stof_status s = stof_interp_eval(g, 1, &C, 1, &A, (const stof_tensor *[]){ta}, res);
  assert_true(s == STOF_ERR_ARG || s == STOF_ERR_NOT_FOUND);
  assert_int_equal(stof_ctx_status(ctx), s);
  TU_MSG(ctx, "Bmissing");
  stof_ctx_clear_error(ctx);
  assert_null(res[0]);
  stof_tensor_free(ta);
  stof_graph_free(g);
  tu_ctx_free(ctx, &h);
}

int run_interp_tests(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(interp_matmul_odd_sizes_matches_reference),
      cmocka_unit_test(interp_softmax_rows_matches_reference),
      cmocka_unit_test(interp_layer_norm_matches_reference),
      cmocka_unit_test(interp_gelu_erf_and_tanh_forms_match_reference),
      cmocka_unit_test(interp_causal_attention_matches_reference),
      cmocka_unit_test(interp_fully_masked_rows_give_zeros_not_nan),
      cmocka_unit_test(interp_elementwise_ops_match_c_math_in_double),
      cmocka_unit_test(interp_logic_ops_give_bool_values),
      cmocka_unit_test(interp_f16_output_rounds_to_f16_values),
      cmocka_unit_test(interp_accepts_f16_feed_for_f32_placeholder),
      cmocka_unit_test(interp_accepts_strided_view_as_feed),
      cmocka_unit_test(interp_integer_division_floors_and_select_cast_work),
      cmocka_unit_test(interp_reduce_over_two_axes_with_sum_min_max),
      cmocka_unit_test(interp_extern_cpu_fn_is_called_and_used_downstream),
      cmocka_unit_test(interp_extern_without_cpu_fn_uses_its_semantics),
      cmocka_unit_test(interp_extern_with_no_implementation_fails_naming_it),
      cmocka_unit_test(interp_out_of_range_dynamic_load_fails_naming_tensor),
      cmocka_unit_test(interp_feed_with_wrong_shape_fails),
      cmocka_unit_test(interp_missing_feed_fails_naming_placeholder),
      cmocka_unit_test(interp_frees_values_no_later_op_reads),
  };
  return cmocka_run_group_tests_name("interp", tests, NULL, NULL);
}
