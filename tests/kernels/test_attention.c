/*
 * The attention intrinsic without a GPU: stof_attention_cpu against a reference written
 * here (stof_mask_eval element by element, masked softmax in double, rows with no key
 * exactly 0) on every suite mask and more (dilated, fully masked rows, per-batch and
 * per-head masks), odd lengths, Sq != Sk, grouped-query heads, f32 and f16, tiles 16, 64
 * and 128; against the reference interpreter running the same attention as a TE graph;
 * the selector's rule, forced choices and explanations; bad arguments (status and
 * message); out of memory; and the GPU engine's answer on a machine without a GPU.
 * Outputs are poisoned with NaN before every call. Inputs are random and never zero.
 */
#include "helpers.h"
#include "../core/testutil.h"
#include "kernels_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct dims {
  int64_t B, H, Hkv, Sq, Sk, D;
} dims;

/* ---------------------------------------------------------------- the reference */

/*
 * want[B, H, Sq, D] = softmax(scale * q k^T masked by stof_mask_eval) v, in double, from
 * q [B, H, Sq, D], k and v [B, Hkv, Sk, D] (head h reads kv head h / (H / Hkv)); a row
 * with no kept key is exactly 0 and marked in empty[B, H, Sq]. Returns the number of
 * such rows.
 */
static int64_t reference(const stof_mask *m, dims d, const double *q, const double *k,
                         const double *v, double scale, double *want, uint8_t *empty) {
  double *s = malloc(sizeof *s * (size_t)d.Sk);
  uint8_t *keep = malloc((size_t)d.Sk);
  assert_non_null(s);
  assert_non_null(keep);
  int64_t nempty = 0, group = d.H / d.Hkv;
  for (int64_t b = 0; b < d.B; b++)
    for (int64_t h = 0; h < d.H; h++) {
      const double *kh = k + (b * d.Hkv + h / group) * d.Sk * d.D;
      const double *vh = v + (b * d.Hkv + h / group) * d.Sk * d.D;
      for (int64_t i = 0; i < d.Sq; i++) {
        int64_t row = (b * d.H + h) * d.Sq + i;
        const double *qi = q + row * d.D;
        double *o = want + row * d.D, mx = -INFINITY, sum = 0;
        int any = 0;
        for (int64_t j = 0; j < d.Sk; j++) {
          int e = stof_mask_eval(m, b, h, i, j);
          if (e != 0 && e != 1)
            fail_msg("mask_eval(%lld, %lld, %lld, %lld) = %d", (long long)b, (long long)h,
                     (long long)i, (long long)j, e);
          keep[j] = (uint8_t)e;
          if (!e) continue;
          double dot = 0;
          for (int64_t x = 0; x < d.D; x++) dot += qi[x] * kh[j * d.D + x];
          s[j] = dot * scale;
          if (s[j] > mx) mx = s[j];
          any = 1;
        }
        for (int64_t x = 0; x < d.D; x++) o[x] = 0;
        empty[row] = (uint8_t)!any;
        if (!any) {
          nempty++;
          continue;
        }
        for (int64_t j = 0; j < d.Sk; j++)
          if (keep[j]) sum += exp(s[j] - mx);
        for (int64_t j = 0; j < d.Sk; j++) {
          if (!keep[j]) continue;
          double p = exp(s[j] - mx) / sum;
          for (int64_t x = 0; x < d.D; x++) o[x] += p * vh[j * d.D + x];
        }
      }
    }
  free(s);
  free(keep);
  return nempty;
}

/*
 * got (contiguous [B, H, Sq, D]) against want: no NaN anywhere, rows marked empty exactly
 * 0, every element within abs_tol (so one wrong row cannot hide in the global norm), and
 * relative L2 below tol.
 */
static void check_output(const stof_tensor *got, const double *want, const uint8_t *empty,
                         int64_t nrow, int64_t D, double tol, double abs_tol, const char *what) {
  assert_int_equal(stof_tensor_numel(got), nrow * D);
  double *g = tu_values(got);
  double maxerr = 0;
  for (int64_t r = 0; r < nrow; r++)
    for (int64_t x = 0; x < D; x++) {
      double a = g[r * D + x], w = want[r * D + x];
      if (isnan(a))
        fail_msg("%s: NaN at row %lld, d %lld (want %g)", what, (long long)r, (long long)x, w);
      if (empty[r] && a != 0)
        fail_msg("%s: row %lld has no key but out[%lld] = %g (want exactly 0)", what, (long long)r,
                 (long long)x, a);
      double e = fabs(a - w);
      if (e > maxerr) maxerr = e;
      if (!(e <= abs_tol))
        fail_msg("%s: row %lld, d %lld: %.9g, want %.9g", what, (long long)r, (long long)x, a, w);
    }
  double rel = tu_rel_l2(g, want, (size_t)(nrow * D));
  free(g);
  if (!(rel < tol)) fail_msg("%s: relative L2 error %g >= %g (max abs %g)", what, rel, tol, maxerr);
}

/* ---------------------------------------------------------------- CPU vs the reference */

static stof_tensor *uniform4(stof_ctx *ctx, stof_dtype dt, int64_t a, int64_t b, int64_t c,
                             int64_t d, uint64_t *seed, double lo, double hi) {
  return tu_tensor_uniform(ctx, dt, 4, TU_SHAPE(a, b, c, d), seed, lo, hi);
}

/* Runs stof_attention_cpu on random q, k, v of dtypes qt/kt/vt with out of dtype ot,
 * format tile T, and checks it against the reference. Returns the empty rows. */
static int64_t check_cpu_case(stof_ctx *ctx, const stof_mask *m, dims d, int T, stof_dtype qt,
                              stof_dtype kt, stof_dtype vt, stof_dtype ot, float scale,
                              uint64_t seed) {
  stof_tensor *q = uniform4(ctx, qt, d.B, d.H, d.Sq, d.D, &seed, -2, 2);
  stof_tensor *k = uniform4(ctx, kt, d.B, d.Hkv, d.Sk, d.D, &seed, -2, 2);
  stof_tensor *v = uniform4(ctx, vt, d.B, d.Hkv, d.Sk, d.D, &seed, -1, 1);
  stof_tensor *out = NULL;
  TU_OK(ctx, stof_tensor_new(ctx, ot, 4, TU_SHAPE(d.B, d.H, d.Sq, d.D), STOF_DEVICE_CPU, &out));
  stof_tensor_fill(out, NAN);
  stof_mask_format *f = NULL;
  TU_OK(ctx, stof_mask_format_build(ctx, m, d.B, d.H, d.Sq, d.Sk, T, &f));
  TU_OK(ctx, stof_attention_cpu(ctx, q, k, v, f, scale, out));

  int64_t nrow = d.B * d.H * d.Sq;
  double *qd = tu_values(q), *kd = tu_values(k), *vd = tu_values(v);
  double *want = malloc(sizeof *want * (size_t)(nrow * d.D));
  uint8_t *empty = malloc((size_t)nrow);
  assert_non_null(want);
  assert_non_null(empty);
  double sc = scale > 0 ? scale : 1 / sqrt((double)d.D);
  int64_t nempty = reference(m, d, qd, kd, vd, sc, want, empty);
  char what[256];
  snprintf(what, sizeof what, "%s B=%lld H=%lld Hkv=%lld Sq=%lld Sk=%lld D=%lld T=%d %s->%s",
           stof_mask_description(m), (long long)d.B, (long long)d.H, (long long)d.Hkv,
           (long long)d.Sq, (long long)d.Sk, (long long)d.D, T, stof_dtype_name(qt),
           stof_dtype_name(ot));
  int half = ot == STOF_DTYPE_F16 || ot == STOF_DTYPE_BF16;
  /* |out| <= 1 (a convex combination of v): f16 rounding is at most 2^-11 */
  check_output(out, want, empty, nrow, d.D, half ? 1e-2 : 1e-5, half ? 2e-3 : 1e-5, what);

  free(qd);
  free(kd);
  free(vd);
  free(want);
  free(empty);
  stof_mask_format_free(f);
  stof_tensor_free(q);
  stof_tensor_free(k);
  stof_tensor_free(v);
  stof_tensor_free(out);
  return nempty;
}

/* Keeps a band whose width grows with h; head 1 loses every row i = 3 (mod 7) entirely. */
static int per_head_band(void *ud, int64_t b, int64_t h, int64_t i, int64_t j) {
  (void)ud;
  (void)b;
  if (h == 1 && i % 7 == 3) return 0;
  return j <= i + 2 * h && i - j <= 5 + 4 * h;
}

enum { NEXTRA = 6 };

/* The masks beyond the suite, for query/key lengths up to S; extra[i] is named in
 * names[i]. Every one of them is freed by the caller. */
static void extra_masks(stof_ctx *ctx, int64_t S, stof_mask **extra, const char **names) {
  stof_mask *a, *b;
  names[0] = "dilated";
  TU_OK(ctx, stof_mask_dilated(ctx, 6, 2, &extra[0]));
  /* causal() - window(3, 0): keys j < i - 3 only, so rows 0..3 have none */
  names[1] = "difference (rows 0..3 empty)";
  TU_OK(ctx, stof_mask_causal(ctx, &a));
  TU_OK(ctx, stof_mask_window(ctx, 3, 0, &b));
  TU_OK(ctx, stof_mask_difference(a, b, &extra[1]));
  stof_mask_free(a);
  stof_mask_free(b);
  /* two documents of 20 and 30: positions from 50 see nothing */
  names[2] = "document (past the end empty)";
  TU_OK(ctx, stof_mask_document(ctx, 2, (const int64_t[]){20, 30}, &extra[2]));
  /* one document mask per batch element (B = 2); batch 1 leaves its last 18 out */
  names[3] = "document_batched";
  int64_t half = S / 2;
  TU_OK(ctx,
        stof_mask_document_batched(ctx, 2, (const int64_t[]){2, 3},
                                   (const int64_t[]){half, S - half, 5, 17, S - 40}, &extra[3]));
  names[4] = "fn per head";
  TU_OK(ctx, stof_mask_fn(ctx, per_head_band, NULL, "per_head_band", 0, 1, &extra[4]));
  /* sliding(9) & random_blocks(8, 0.5): empty rows scattered in the middle */
  names[5] = "sliding & random_blocks";
  TU_OK(ctx, stof_mask_sliding(ctx, 9, &a));
  TU_OK(ctx, stof_mask_random_blocks(ctx, 8, 0.5, 11, &b));
  TU_OK(ctx, stof_mask_intersection(a, b, &extra[5]));
  stof_mask_free(a);
  stof_mask_free(b);
}

static void cpu_attention_matches_reference_on_every_mask(void **state) {
  (void)state;
  tu_heap heap;
  stof_ctx *ctx = tu_ctx_new(&heap);
  static const int64_t shapes[][2] = {{77, 77}, {50, 90}};
  static const int tiles[] = {16, 64, 128};
  int nsuite = 0;
  while (stof_mask_suite_name(nsuite)) nsuite++;
  assert_int_equal(nsuite, 7);
  int c = 0;
  int64_t empty_of[NEXTRA] = {0};
  for (int s = 0; s < 2; s++) {
    int64_t Sq = shapes[s][0], Sk = shapes[s][1], S = Sq > Sk ? Sq : Sk;
    stof_mask *extra[NEXTRA];
    const char *names[NEXTRA];
    extra_masks(ctx, S, extra, names);
    for (int mi = 0; mi < nsuite + NEXTRA; mi++) {
      stof_mask *suite = NULL;
      if (mi < nsuite) TU_OK(ctx, stof_mask_suite(ctx, stof_mask_suite_name(mi), S, &suite));
      const stof_mask *m = mi < nsuite ? suite : extra[mi - nsuite];
      for (int t = 0; t < 3; t++, c++) {
        /* dtype, kv heads, head dim and scale cycle at different rates, so every mask
         * meets each of them */
        dims d = {2, 3, (c / 2) % 2 ? 1 : 3, Sq, Sk, (c / 4) % 2 ? 16 : 8};
        stof_dtype dt = c % 2 ? STOF_DTYPE_F16 : STOF_DTYPE_F32;
        float scale = c % 5 == 4 ? 0.3f : 0.0f;
        int64_t ne = check_cpu_case(ctx, m, d, tiles[t], dt, dt, dt, dt, scale, 1000 + (uint64_t)c);
        if (mi >= nsuite) empty_of[mi - nsuite] += ne;
      }
      stof_mask_free(suite);
    }
    for (int i = 0; i < NEXTRA; i++) stof_mask_free(extra[i]);
  }
  /* the masks meant to empty rows did */
  assert_true(empty_of[1] > 0);
  assert_true(empty_of[2] > 0);
  assert_true(empty_of[3] > 0);
  assert_true(empty_of[4] > 0);
  assert_true(empty_of[5] > 0);
  tu_ctx_free(ctx, &heap);
}

static void cpu_attention_mixes_dtypes_heads_and_scales(void **state) {
  (void)state;
  tu_heap heap;
  stof_ctx *ctx = tu_ctx_new(&heap);
  stof_mask *m;
  TU_OK(ctx, stof_mask_suite(ctx, "bigbird", 61, &m));
  dims d = {1, 2, 2, 61, 61, 5}; /* a head dim no GPU kernel has */
  check_cpu_case(ctx, m, d, 32, STOF_DTYPE_BF16, STOF_DTYPE_F32, STOF_DTYPE_F64, STOF_DTYPE_F32, 0,
                 7);
  check_cpu_case(ctx, m, d, 48, STOF_DTYPE_F16, STOF_DTYPE_BF16, STOF_DTYPE_F16, STOF_DTYPE_F64,
                 0.5f, 8);
  d.D = 1;
  check_cpu_case(ctx, m, d, 16, STOF_DTYPE_F32, STOF_DTYPE_F32, STOF_DTYPE_F32, STOF_DTYPE_F32, 0,
                 9);
  /* grouped-query with H / Hkv = 2 heads per kv head (h / 2, not h % 2) */
  dims g = {2, 4, 2, 61, 61, 8};
  check_cpu_case(ctx, m, g, 64, STOF_DTYPE_F32, STOF_DTYPE_F32, STOF_DTYPE_F32, STOF_DTYPE_F32, 0,
                 10);
  /* scores in the thousands: exp overflows unless the row max is subtracted first */
  check_cpu_case(ctx, m, g, 16, STOF_DTYPE_F32, STOF_DTYPE_F32, STOF_DTYPE_F32, STOF_DTYPE_F32,
                 300.0f, 11);
  stof_mask_free(m);
  tu_ctx_free(ctx, &heap);
}

/* ---------------------------------------------------------------- CPU vs the interpreter */

/*
 * The same attention as a TE graph over [B, H, Sq, Sk] with the mask as a bool
 * placeholder [Sq, Sk]: scores = sum_d Q K; masked = mask ? scale * scores : -inf; row max;
 * e = mask ? exp(masked - max) : 0; row sum; p = e / (sum > 0 ? sum : 1); O = sum_j p V.
 * Head h reads K/V head h // (H / Hkv).
 */
static const stof_op *attention_graph(stof_graph *g, dims d, double scale, const stof_op **ph) {
  const stof_op *Q = tu_ph(g, "Q", STOF_DTYPE_F32, 4, TU_SHAPE(d.B, d.H, d.Sq, d.D));
  const stof_op *K = tu_ph(g, "K", STOF_DTYPE_F32, 4, TU_SHAPE(d.B, d.Hkv, d.Sk, d.D));
  const stof_op *V = tu_ph(g, "V", STOF_DTYPE_F32, 4, TU_SHAPE(d.B, d.Hkv, d.Sk, d.D));
  const stof_op *M = tu_ph(g, "mask", STOF_DTYPE_BOOL, 2, TU_SHAPE(d.Sq, d.Sk));
  ph[0] = Q, ph[1] = K, ph[2] = V, ph[3] = M;
  const stof_expr *a[4], *r;
  const int64_t *sh4 = TU_SHAPE(d.B, d.H, d.Sq, d.Sk), *sh3 = TU_SHAPE(d.B, d.H, d.Sq);

  tu_axes(g, 4, sh4, a);
  r = tu_raxis(g, d.D, "d");
  const stof_expr *hk = tu_bin(g, STOF_EXPR_FLOORDIV, a[1], tu_int(g, d.H / d.Hkv));
  const stof_op *SC =
      tu_compute(g, "scores", 4, a,
                 tu_reduce(g, STOF_REDUCE_SUM,
                           tu_bin(g, STOF_EXPR_MUL, tu_load(g, Q, 4, a[0], a[1], a[2], r),
                                  tu_load(g, K, 4, a[0], hk, a[3], r)),
                           1, r));
  tu_axes(g, 4, sh4, a);
  const stof_op *MS = tu_compute(
      g, "masked", 4, a,
      tu_sel(g, tu_load(g, M, 2, a[2], a[3]),
             tu_bin(g, STOF_EXPR_MUL, tu_load(g, SC, 4, a[0], a[1], a[2], a[3]), tu_f32(g, scale)),
             tu_f32(g, -INFINITY)));
  tu_axes(g, 3, sh3, a);
  r = tu_raxis(g, d.Sk, "jm");
  const stof_op *MX =
      tu_compute(g, "row_max", 3, a,
                 tu_reduce(g, STOF_REDUCE_MAX, tu_load(g, MS, 4, a[0], a[1], a[2], r), 1, r));
  tu_axes(g, 4, sh4, a);
  const stof_expr *e = tu_un(g, STOF_EXPR_EXP,
                             tu_bin(g, STOF_EXPR_SUB, tu_load(g, MS, 4, a[0], a[1], a[2], a[3]),
                                    tu_load(g, MX, 3, a[0], a[1], a[2])));
  const stof_op *E =
      tu_compute(g, "exp", 4, a, tu_sel(g, tu_load(g, M, 2, a[2], a[3]), e, tu_f32(g, 0)));
  tu_axes(g, 3, sh3, a);
  r = tu_raxis(g, d.Sk, "js");
  const stof_op *SUM =
      tu_compute(g, "row_sum", 3, a,
                 tu_reduce(g, STOF_REDUCE_SUM, tu_load(g, E, 4, a[0], a[1], a[2], r), 1, r));
  tu_axes(g, 4, sh4, a);
  const stof_expr *sum = tu_load(g, SUM, 3, a[0], a[1], a[2]);
  const stof_expr *den = tu_sel(g, tu_bin(g, STOF_EXPR_GT, sum, tu_f32(g, 0)), sum, tu_f32(g, 1));
  const stof_op *P = tu_compute(
      g, "probs", 4, a, tu_bin(g, STOF_EXPR_DIV, tu_load(g, E, 4, a[0], a[1], a[2], a[3]), den));
  tu_axes(g, 4, TU_SHAPE(d.B, d.H, d.Sq, d.D), a);
  r = tu_raxis(g, d.Sk, "jv");
  hk = tu_bin(g, STOF_EXPR_FLOORDIV, a[1], tu_int(g, d.H / d.Hkv));
  return tu_compute(g, "attention", 4, a,
                    tu_reduce(g, STOF_REDUCE_SUM,
                              tu_bin(g, STOF_EXPR_MUL, tu_load(g, P, 4, a[0], a[1], a[2], r),
                                     tu_load(g, V, 4, a[0], hk, r, a[3])),
                              1, r));
}

static void cpu_attention_matches_interpreter(void **state) {
  (void)state;
  tu_heap heap;
  stof_ctx *ctx = tu_ctx_new(&heap);
  dims d = {2, 4, 2, 19, 23, 8};
  /* causal() - window(3, 0): rows 0..3 keep no key; Sq, Sk odd and across 16-tiles */
  stof_mask *a, *b, *m;
  TU_OK(ctx, stof_mask_causal(ctx, &a));
  TU_OK(ctx, stof_mask_window(ctx, 3, 0, &b));
  TU_OK(ctx, stof_mask_difference(a, b, &m));
  stof_mask_free(a);
  stof_mask_free(b);
  stof_mask_format *f = NULL;
  TU_OK(ctx, stof_mask_format_build(ctx, m, d.B, d.H, d.Sq, d.Sk, 16, &f));

  uint64_t seed = 77;
  stof_tensor *q = uniform4(ctx, STOF_DTYPE_F32, d.B, d.H, d.Sq, d.D, &seed, -2, 2);
  stof_tensor *k = uniform4(ctx, STOF_DTYPE_F32, d.B, d.Hkv, d.Sk, d.D, &seed, -2, 2);
  stof_tensor *v = uniform4(ctx, STOF_DTYPE_F32, d.B, d.Hkv, d.Sk, d.D, &seed, -1, 1);
  stof_tensor *mt = NULL, *out = NULL;
  TU_OK(ctx, stof_tensor_new(ctx, STOF_DTYPE_BOOL, 2, TU_SHAPE(d.Sq, d.Sk), STOF_DEVICE_CPU, &mt));
  TU_OK(ctx, stof_mask_format_expand(f, 0, 0, mt));
  TU_OK(ctx, stof_tensor_new(ctx, STOF_DTYPE_F32, 4, TU_SHAPE(d.B, d.H, d.Sq, d.D), STOF_DEVICE_CPU,
                             &out));
  stof_tensor_fill(out, NAN);
  const float scale = 0.4f;
  TU_OK(ctx, stof_attention_cpu(ctx, q, k, v, f, scale, out));

  stof_graph *g = NULL;
  TU_OK(ctx, stof_graph_new(ctx, &g));
  const stof_op *ph[4];
  const stof_op *O = attention_graph(g, d, scale, ph);
  stof_tensor *res = NULL;
  TU_OK(ctx, stof_interp_eval(g, 1, &O, 4, ph, (const stof_tensor *[]){q, k, v, mt}, &res));
  assert_non_null(res);

  int64_t nrow = d.B * d.H * d.Sq;
  uint8_t *empty = calloc((size_t)nrow, 1);
  assert_non_null(empty);
  int64_t nempty = 0;
  for (int64_t r = 0; r < nrow; r++) {
    int64_t i = r % d.Sq, any = 0;
    for (int64_t j = 0; j < d.Sk; j++) any |= stof_tensor_load(mt, i * d.Sk + j) != 0;
    empty[r] = (uint8_t)!any;
    nempty += !any;
  }
  assert_int_equal(nempty, d.B * d.H * 4);
  double *want = tu_values(res);
  for (int64_t r = 0; r < nrow; r++)
    for (int64_t x = 0; x < d.D; x++)
      if (empty[r] && want[r * d.D + x] != 0)
        fail_msg("interpreter: empty row %lld gives %g", (long long)r, want[r * d.D + x]);
  check_output(out, want, empty, nrow, d.D, 1e-5, 1e-5, "cpu vs interpreter");

  free(want);
  free(empty);
  stof_tensor_free(res);
  stof_graph_free(g);
  stof_tensor_free(q);
  stof_tensor_free(k);
  stof_tensor_free(v);
  stof_tensor_free(mt);
  stof_tensor_free(out);
  stof_mask_format_free(f);
  stof_mask_free(m);
  tu_ctx_free(ctx, &heap);
}

/* ---------------------------------------------------------------- the selector */

static stof_mask_format *format_of(stof_ctx *ctx, const stof_mask *m, int64_t Sq, int64_t Sk) {
  stof_mask_format *f = NULL;
  TU_OK(ctx, stof_mask_format_build(ctx, m, 1, 1, Sq, Sk, 64, &f));
  return f;
}

/* The rule's threshold, in the paper's form with the calibrated constant of kernels.h. */
static double rule_threshold(int64_t Sq, int64_t Sk) {
  double l = log2((double)(Sq > Sk ? Sq : Sk) / 16.0);
  return STOF_ATTN_SELECT_C / (l * l);
}

static void expect_in_why(const stof_attn_choice *c, const char *s) {
  if (!strstr(c->why, s)) fail_msg("why \"%s\" lacks \"%s\"", c->why, s);
}

/* why names the kernel and gives the fraction of valid tiles as a percentage. */
static void expect_explained(const stof_attn_choice *c, double frac16) {
  expect_in_why(c, stof_attn_kernel_name(c->kernel));
  char p1[32], p2[32];
  snprintf(p1, sizeof p1, "%.1f%%", 100 * frac16);
  snprintf(p2, sizeof p2, "%.2f%%", 100 * frac16);
  if (!strstr(c->why, p1) && !strstr(c->why, p2))
    fail_msg("why \"%s\" lacks the percentage of valid tiles (%s)", c->why, p1);
}

static void select_follows_the_papers_rule(void **state) {
  (void)state;
  tu_heap heap;
  stof_ctx *ctx = tu_ctx_new(&heap);
  stof_attn_choice c;
  stof_mask *m;
  /* the paper's constant is 1.2; ours is calibrated, but stays positive and at most it */
  assert_true(STOF_ATTN_SELECT_C > 0 && STOF_ATTN_SELECT_C <= 1.2);

  /* dense at S = 1024: every tile is valid: block-wise, threshold C / 36 */
  TU_OK(ctx, stof_mask_dense(ctx, &m));
  stof_mask_format *f = format_of(ctx, m, 1024, 1024);
  TU_OK(ctx, stof_attention_select(ctx, f, 2, 8, 64, NULL, NULL, &c));
  assert_int_equal(c.kernel, STOF_ATTN_BLOCK);
  assert_true(c.frac16 == 1.0);
  assert_true(fabs(c.threshold - STOF_ATTN_SELECT_C / 36.0) < 1e-15);
  assert_true(c.tile == 64 || c.tile == 128);
  assert_true(c.warps > 0 && c.stages >= 2);
  expect_explained(&c, 1.0);
  expect_in_why(&c, "100.0%");
  stof_mask_format_free(f);
  stof_mask_free(m);

  /* sliding(8) at S = 4096: 16-tiles (I, J) with |I - J| <= 1, 766 of 65536 = 1.17%,
   * against C / 64 (row-wise with the paper's 1.2, block-wise with a constant below
   * 0.75) */
  TU_OK(ctx, stof_mask_sliding(ctx, 8, &m));
  f = format_of(ctx, m, 4096, 4096);
  assert_true(fabs(f->frac16 - 766.0 / 65536.0) < 1e-15);
  TU_OK(ctx, stof_attention_select(ctx, f, 1, 16, 128, NULL, NULL, &c));
  assert_true(fabs(c.frac16 - 766.0 / 65536.0) < 1e-15);
  assert_true(fabs(c.threshold - STOF_ATTN_SELECT_C / 64.0) < 1e-15);
  assert_int_equal(c.kernel,
                   766.0 / 65536.0 >= STOF_ATTN_SELECT_C / 64.0 ? STOF_ATTN_BLOCK : STOF_ATTN_ROW);
  expect_explained(&c, 766.0 / 65536.0);
  stof_mask_format_free(f);
  stof_mask_free(m);

  /* one document of 40 at S = 4096: 9 valid 16-tiles of 65536 (0.014%), under C / 64 for
   * any C above 0.009: row-wise */
  TU_OK(ctx, stof_mask_document(ctx, 1, (const int64_t[]){40}, &m));
  f = format_of(ctx, m, 4096, 4096);
  assert_true(fabs(f->frac16 - 9.0 / 65536.0) < 1e-15);
  TU_OK(ctx, stof_attention_select(ctx, f, 1, 16, 64, NULL, NULL, &c));
  assert_int_equal(c.kernel, STOF_ATTN_ROW);
  expect_explained(&c, 9.0 / 65536.0);
  expect_in_why(&c, "row");
  stof_mask_format_free(f);
  stof_mask_free(m);

  /* the rule on every suite mask and the short document at a few lengths, Sq != Sk
   * included (S = max(Sq, Sk)) */
  static const int64_t shapes[][2] = {
      {256, 256}, {1000, 1000}, {2048, 2048}, {100, 3000}, {3000, 700}};
  int nblock = 0, nrow = 0;
  for (int s = 0; s < 5; s++)
    for (int i = 0; i < 8; i++) {
      int64_t Sq = shapes[s][0], Sk = shapes[s][1];
      if (stof_mask_suite_name(i))
        TU_OK(ctx, stof_mask_suite(ctx, stof_mask_suite_name(i), Sq > Sk ? Sq : Sk, &m));
      else
        TU_OK(ctx, stof_mask_document(ctx, 1, (const int64_t[]){40}, &m));
      f = format_of(ctx, m, Sq, Sk);
      TU_OK(ctx, stof_attention_select(ctx, f, 1, 4, 64, NULL, NULL, &c));
      double thr = rule_threshold(Sq, Sk);
      stof_attn_kernel want = f->frac16 >= thr ? STOF_ATTN_BLOCK : STOF_ATTN_ROW;
      if (c.kernel != want || fabs(c.threshold - thr) > 1e-15)
        fail_msg("%s at %lld x %lld: frac16 %g, threshold %g (want %g): %s, want %s",
                 stof_mask_description(m), (long long)Sq, (long long)Sk, f->frac16, c.threshold,
                 thr, stof_attn_kernel_name(c.kernel), stof_attn_kernel_name(want));
      expect_explained(&c, f->frac16);
      assert_true(c.tile == 64 || c.tile == 128);
      if (c.kernel == STOF_ATTN_BLOCK)
        assert_true(c.tile / c.warps == 16 || c.tile / c.warps == 32);
      nblock += want == STOF_ATTN_BLOCK;
      nrow += want == STOF_ATTN_ROW;
      stof_mask_format_free(f);
      stof_mask_free(m);
    }
  assert_true(nblock > 0 && nrow > 0); /* both sides of the rule were exercised */
  tu_ctx_free(ctx, &heap);
}

/* Devices the selector tests answer for (no GPU needed): compute capability, SMs, the
 * per-block shared memory a kernel may opt into. */
static const stof_cuda_props h100 = {.cc_major = 9, .cc_minor = 0, .sm_count = 132, .smem_per_block_optin = 232448};
static const stof_cuda_props a100 = {.cc_major = 8, .cc_minor = 0, .sm_count = 108, .smem_per_block_optin = 166912};

/* The tile rule: on the Hopper kernel, tile 128 at D = 128, S >= 1024 and at least 25%
 * of the 16x16 tiles non-empty, and at D = 64 in 64-key steps (key64) for dense; the portable
 * kernel keeps its own rule (dense at S = 4096: tile 128). Each case names its reason in `why`. */
static void select_picks_the_tile_per_kernel_path(void **state) {
  (void)state;
  tu_heap heap;
  stof_ctx *ctx = tu_ctx_new(&heap);
  static const struct {
    int dense; /* 1: dense mask, 0: sliding(64) (about 5% of the 16x16 tiles at S = 4096) */
    int64_t S, D;
    int sm90, want;
  } cases[] = {
      {1, 4096, 64, 1, 128},  {1, 4096, 128, 1, 128}, {1, 1024, 128, 1, 128}, {1, 512, 128, 1, 64},
      {0, 4096, 128, 1, 64},  {1, 4096, 64, 0, 128},  {0, 4096, 64, 0, 64}, {0, 4096, 64, 1, 64},
      {1, 4096, 128, 0, 64}, /* the rule says 128, but 164 KB of shared memory do not fit an A100 */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    stof_mask *m;
    if (cases[i].dense)
      TU_OK(ctx, stof_mask_dense(ctx, &m));
    else
      TU_OK(ctx, stof_mask_sliding(ctx, 64, &m));
    stof_mask_format *f = format_of(ctx, m, cases[i].S, cases[i].S);
    stof_attn_choice c;
    TU_OK(ctx, stof_attention_select(ctx, f, 1, 8, cases[i].D, cases[i].sm90 ? &h100 : &a100, NULL, &c));
    if (c.kernel != STOF_ATTN_BLOCK || c.tile != cases[i].want || c.hopper != cases[i].sm90)
      fail_msg("case %zu (%s, S %lld, D %lld, %s): %s-wise, tile %d, hopper %d; want block-wise, tile %d: %s", i,
               cases[i].dense ? "dense" : "sliding", (long long)cases[i].S, (long long)cases[i].D,
               cases[i].sm90 ? "cc 9.0" : "cc 8.0", stof_attn_kernel_name(c.kernel), c.tile, c.hopper,
               cases[i].want, c.why);
    int too_big = !cases[i].sm90 && cases[i].D == 128 && cases[i].dense;
    if (too_big) {
      expect_in_why(&c, "128 would need 167936 bytes of shared memory, the device allows 166912");
    } else {
      expect_in_why(&c, cases[i].sm90 ? "Hopper: 128" : "45% non-empty at S >= 2048");
      int key64 = cases[i].sm90 && cases[i].D == 64 && cases[i].want == 128;
      expect_in_why(&c, key64 ? "128 in 64-key steps at" : cases[i].want == 128 ? "128 at" : "128 needs");
      assert_int_equal(c.key64, key64);
    }
    stof_mask_format_free(f);
    stof_mask_free(m);
  }
  /* forced warps the Hopper kernel cannot take at its tile: the portable kernel with its
   * own tile rule (dense D 64 at S 4096: Hopper would take tile 64 = 4 warps; 8 warps ->
   * portable, whose rule says tile 128) */
  {
    stof_mask *dm;
    TU_OK(ctx, stof_mask_dense(ctx, &dm));
    stof_mask_format *df = format_of(ctx, dm, 4096, 4096);
    stof_attn_choice dc;
    TU_OK(ctx, stof_attention_select(ctx, df, 1, 8, 64, &h100, &(stof_attn_opts){.warps = 8}, &dc));
    assert_false(dc.hopper);
    assert_int_equal(dc.tile, 128);
    assert_int_equal(dc.warps, 8);
    expect_in_why(&dc, "128 at >= 45% non-empty");
    TU_OK(ctx, stof_attention_select(ctx, df, 1, 8, 64, &h100, &(stof_attn_opts){.warps = 4}, &dc));
    assert_true(dc.hopper && dc.tile == 64 && dc.warps == 4);
    stof_mask_format_free(df);
    stof_mask_free(dm);
  }
  /* asked for and too big for the device: an error naming the shared memory */
  stof_mask *m;
  TU_OK(ctx, stof_mask_dense(ctx, &m));
  stof_mask_format *f = format_of(ctx, m, 1024, 1024);
  stof_attn_choice c;
  TU_ERR(ctx,
         stof_attention_select(ctx, f, 1, 8, 128, &a100, &(stof_attn_opts){.kernel = STOF_ATTN_BLOCK, .tile = 128}, &c),
         STOF_ERR_UNSUPPORTED, "needs 167936 bytes of shared memory, the device allows 166912");
  stof_cuda_props ada = {.cc_major = 8, .cc_minor = 9, .sm_count = 128, .smem_per_block_optin = 101376};
  TU_ERR(ctx, stof_attention_select(ctx, f, 1, 8, 128, &ada, &(stof_attn_opts){.tile = 64, .stages = 4}, &c),
         STOF_ERR_UNSUPPORTED, "needs 149504 bytes of shared memory, the device allows 101376");
  TU_OK(ctx, stof_attention_select(ctx, f, 1, 8, 128, &ada, &(stof_attn_opts){.tile = 64, .stages = 2}, &c));
  assert_int_equal(c.tile, 64);
  stof_cuda_props big = a100;
  big.smem_per_block_optin = 232448;
  TU_OK(ctx, stof_attention_select(ctx, f, 1, 8, 128, &big, &(stof_attn_opts){.kernel = STOF_ATTN_BLOCK, .tile = 128}, &c));
  assert_int_equal(c.tile, 128);
  stof_mask_format_free(f);
  stof_mask_free(m);
  tu_ctx_free(ctx, &heap);
}

/* Tile 128 in 64-key steps (key64) on the Hopper kernel at D = 64: where the 128-tiles cost at
 * most 1.03x the 64-tiles' MMA work, under 10% of the tiles are partial and there is no score
 * modifier: dense and causal at S = 4096 (causal 1.015x), not causal at 1024 (1.06x), document
 * (1.04x), nor the masks of partial tiles; never at D = 128 or on the portable kernel; off with
 * key64 = -1; forced with 1 (then no per-lane masking; with a modifier too, and 8 warps), refused
 * where it cannot run. */
static void select_picks_key64_for_dense_and_causal(void **state) {
  (void)state;
  tu_heap heap;
  stof_ctx *ctx = tu_ctx_new(&heap);
  static const struct {
    const char *mask;
    int64_t S, D;
    int want;
  } cases[] = {{"dense", 4096, 64, 1},      {"causal", 4096, 64, 1},    {"causal", 1024, 64, 0},
               {"document", 4096, 64, 0},   {"sliding", 4096, 64, 0},   {"longformer", 4096, 64, 0},
               {"causal_sliding", 4096, 64, 0}, {"dense", 4096, 128, 0}, {"causal", 4096, 128, 0}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    stof_mask *m;
    TU_OK(ctx, stof_mask_suite(ctx, cases[i].mask, cases[i].S, &m));
    stof_mask_format *f = format_of(ctx, m, cases[i].S, cases[i].S);
    stof_attn_choice c;
    TU_OK(ctx, stof_attention_select(ctx, f, 1, 8, cases[i].D, &h100, NULL, &c));
    if (c.key64 != cases[i].want || !c.hopper || (c.key64 && (c.tile != 128 || c.stages != 2 || !c.tma || c.rowmask)))
      fail_msg("%s S %lld D %lld: key64 %d tile %d stages %d, want key64 %d: %s", cases[i].mask, (long long)cases[i].S,
               (long long)cases[i].D, c.key64, c.tile, c.stages, cases[i].want, c.why);
    if (c.key64) expect_in_why(&c, "in 64-key steps at <= 1.03x the 64-tiles' work");
    else assert_null(strstr(c.why, "64-key steps"));
    TU_OK(ctx, stof_attention_select(ctx, f, 1, 8, cases[i].D, &a100, NULL, &c));
    assert_false(c.key64);
    if (cases[i].want) {
      TU_OK(ctx, stof_attention_select(ctx, f, 1, 8, cases[i].D, &h100, &(stof_attn_opts){.key64 = -1}, &c));
      assert_true(c.hopper && !c.key64 && c.tile == 64);
    }
    /* the format's columns on the device (a long sequence's): causal unknown, so not; dense
     * (every 64-tile non-empty) still */
    stof_mask_format g = *f;
    g.col_idx = NULL;
    TU_OK(ctx, stof_attention_select(ctx, &g, 1, 8, cases[i].D, &h100, NULL, &c));
    assert_int_equal(c.key64, cases[i].want && !strcmp(cases[i].mask, "dense"));
    stof_mask_free(m);
    /* forced: also where the rule says no (at D 64), with cp.async too */
    if (cases[i].D == 64) {
      TU_OK(ctx, stof_attention_select(ctx, f, 1, 8, 64, &h100, &(stof_attn_opts){.key64 = 1, .tma = -1}, &c));
      assert_true(c.hopper && c.key64 && c.tile == 128 && c.warps == 8 && !c.tma && !c.rowmask && !c.halfskip);
      expect_in_why(&c, "in 64-key steps, asked for");
    }
    stof_mask_format_free(f);
  }
  stof_mask *m;
  TU_OK(ctx, stof_mask_dense(ctx, &m));
  stof_mask_format *f = format_of(ctx, m, 4096, 4096);
  stof_attn_choice c;
  TU_ERR(ctx, stof_attention_select(ctx, f, 1, 8, 128, &h100, &(stof_attn_opts){.key64 = 1}, &c),
         STOF_ERR_UNSUPPORTED, "key64 asked for");
  TU_ERR(ctx, stof_attention_select(ctx, f, 1, 8, 64, &h100, &(stof_attn_opts){.key64 = 1, .tile = 64}, &c),
         STOF_ERR_UNSUPPORTED, "key64 asked for");
  TU_ERR(ctx, stof_attention_select(ctx, f, 1, 8, 64, &h100, &(stof_attn_opts){.key64 = 1, .stages = 3}, &c),
         STOF_ERR_UNSUPPORTED, "key64 asked for");
  TU_ERR(ctx, stof_attention_select(ctx, f, 1, 8, 64, &a100, &(stof_attn_opts){.key64 = 1}, &c),
         STOF_ERR_UNSUPPORTED, "not the Hopper kernel");
  TU_ERR(ctx, stof_attention_select(ctx, f, 1, 8, 64, &h100, &(stof_attn_opts){.key64 = 2}, &c), STOF_ERR_ARG,
         "key64 2");
  TU_OK(ctx, stof_attention_select(ctx, f, 1, 8, 64, &h100, &(stof_attn_opts){.key64 = 1, .tile = 128}, &c));
  assert_true(c.key64 && c.tile == 128 && c.stages == 2);
  /* with a score modifier the rule stays at tile 64 (not measured there); forced still runs */
  TU_OK(ctx, stof_attention_select(ctx, f, 1, 8, 64, &h100, &(stof_attn_opts){.mod = {.softcap = 30}}, &c));
  assert_true(c.hopper && !c.key64 && c.tile == 64);
  TU_OK(ctx, stof_attention_select(ctx, f, 1, 8, 64, &h100, &(stof_attn_opts){.mod = {.kind = STOF_ATTN_MOD_ALIBI}}, &c));
  assert_true(c.hopper && !c.key64 && c.tile == 64);
  TU_OK(ctx, stof_attention_select(ctx, f, 1, 8, 64, &h100, &(stof_attn_opts){.key64 = 1, .mod = {.softcap = 30}}, &c));
  assert_true(c.key64 && c.tile == 128);
  TU_OK(ctx, stof_attention_select(ctx, f, 1, 8, 64, &h100, &(stof_attn_opts){.key64 = 1, .tile = 128, .warps = 8}, &c));
  assert_true(c.key64 && c.tile == 128 && c.warps == 8);
  TU_ERR(ctx, stof_attention_select(ctx, f, 1, 8, 64, &h100, &(stof_attn_opts){.key64 = 1, .tile = 128, .warps = 4}, &c),
         STOF_ERR_UNSUPPORTED, "key64 asked for");
  stof_mask_format_free(f);
  stof_mask_free(m);
  tu_ctx_free(ctx, &heap);
}

/* The Hopper kernel without mask code (STOF_SM90_NOPARTIAL) exactly where the format at the
 * plan's tile has no partial tile: dense at tile 64 and 128, not dense at 1000 (its last key
 * tile is partial), not causal (its diagonal), never on the portable kernel, never from a
 * format at another tile; the selector alone leaves it 0. */
static void select_split_marks_formats_without_partial_tiles(void **state) {
  (void)state;
  tu_heap heap;
  stof_ctx *ctx = tu_ctx_new(&heap);
  stof_mask *dense, *causal;
  TU_OK(ctx, stof_mask_dense(ctx, &dense));
  TU_OK(ctx, stof_mask_suite(ctx, "causal", 4096, &causal));
  static const struct {
    int causal;
    int64_t S, D;
    int tile, want;
  } cases[] = {{0, 4096, 64, 128, 1}, {0, 4096, 128, 128, 1}, {0, 1000, 64, 64, 0}, {1, 4096, 64, 128, 0}, {1, 4096, 128, 128, 0}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const stof_mask *m = cases[i].causal ? causal : dense;
    int64_t S = cases[i].S;
    stof_mask_format *f64 = format_of(ctx, m, S, S), *f = NULL;
    stof_attn_choice c;
    TU_OK(ctx, stof_attention_select(ctx, f64, 1, 8, cases[i].D, &h100, NULL, &c));
    assert_int_equal(c.tile, cases[i].tile);
    assert_true(c.hopper);
    assert_int_equal(c.nopartial, 0); /* the selector alone reads the tile-64 format only */
    TU_OK(ctx, stof_mask_format_build(ctx, m, 1, 1, S, S, c.tile, &f));
    TU_OK(ctx, stof_attention_select_split(ctx, f, 1, 8, cases[i].D, &h100, NULL, &c));
    if (c.nopartial != cases[i].want)
      fail_msg("%s S %lld D %lld tile %d (%lld partial tiles): nopartial %d, want %d: %s", cases[i].causal ? "causal" : "dense",
               (long long)S, (long long)cases[i].D, c.tile, (long long)f->ntile_partial, c.nopartial, cases[i].want, c.why);
    if (c.nopartial) expect_in_why(&c, "no partial tile at tile");
    else assert_null(strstr(c.why, "no partial tile"));
    /* the portable kernel: never (its own tile; not Hopper, so f's tile is not read) */
    TU_OK(ctx, stof_attention_select(ctx, f64, 1, 8, cases[i].D, &a100, NULL, &c));
    TU_OK(ctx, stof_attention_select_split(ctx, f, 1, 8, cases[i].D, &a100, NULL, &c));
    assert_false(c.hopper || c.nopartial);
    stof_mask_format_free(f);
    stof_mask_format_free(f64);
  }
  /* a format at another tile than the choice's: not marked (and the split refuses it) */
  stof_mask_format *f64 = format_of(ctx, dense, 4096, 4096);
  stof_attn_choice c;
  TU_OK(ctx, stof_attention_select(ctx, f64, 1, 8, 128, &h100, NULL, &c));
  assert_int_equal(c.tile, 128);
  TU_ERR(ctx, stof_attention_select_split(ctx, f64, 1, 8, 128, &h100, NULL, &c), STOF_ERR_INTERNAL,
         "split from a tile-64 format for tile 128");
  assert_int_equal(c.nopartial, 0);
  stof_mask_format_free(f64);
  stof_mask_free(causal);
  stof_mask_free(dense);
  tu_ctx_free(ctx, &heap);
}

/* D = 128 at tile 64 with cp.async and no score modifier: three CTAs an SM
 * (hopper_min_blocks: STOF_MIN_BLOCKS=3), named in why and counted by the split rule's launch
 * balance, whose threshold is a slot's share of the launch, ceil(tiles / (SMs x CTAs an SM));
 * under a score modifier, with TMA and at D = 64, not. */
static void select_three_ctas_at_d128_tile64(void **state) {
  (void)state;
  tu_heap heap;
  stof_ctx *ctx = tu_ctx_new(&heap);
  stof_mask *m;
  TU_OK(ctx, stof_mask_longformer(ctx, 32, 32, &m));
  stof_mask_format *f = format_of(ctx, m, 8192, 8192);
  int64_t B = 16, H = 12, tiles = 0, longest = 0;
  for (int32_t r = 0; r < f->nrow; r++) {
    int64_t n = f->row_ptr[r + 1] - f->row_ptr[r];
    tiles += n;
    if (n > longest) longest = n;
  }
  tiles *= B * H;
  static const struct {
    int64_t D;
    stof_attn_opts o;
    int ctas; /* 3, else 0: not named in why */
  } cases[] = {
      /* unshifted: the shares below are counted from the tile-64 format's rows */
      {128, {.qshift = -1}, 3},
      {128, {.qshift = -1, .mod = {.softcap = 30}}, 0},
      {128, {.qshift = -1, .mod = {.kind = STOF_ATTN_MOD_ALIBI}}, 0},
      {128, {.qshift = -1, .tma = 1}, 0},
      {128, {.qshift = -1, .stages = 3}, 0}, /* 100 KB of shared memory a CTA: two fit */
      {64, {.qshift = -1}, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    stof_attn_choice c;
    TU_OK(ctx, stof_attention_select(ctx, f, B, H, cases[i].D, &h100, &cases[i].o, &c));
    TU_OK(ctx, stof_attention_select_split(ctx, f, B, H, cases[i].D, &h100, &cases[i].o, &c));
    if (!c.hopper || c.tile != 64) fail_msg("case %zu: hopper %d, tile %d: %s", i, c.hopper, c.tile, c.why);
    int named = strstr(c.why, "three CTAs an SM (168 registers)") != NULL;
    if (named != (cases[i].ctas == 3)) fail_msg("case %zu: why \"%s\"", i, c.why);
    if (cases[i].D == 128 && !cases[i].o.tma && !cases[i].o.stages) {
      /* the share of a slot at 3 or 2 CTAs an SM: above every row, so nothing is split */
      int64_t slots = (int64_t)h100.sm_count * (cases[i].ctas == 3 ? 3 : 2), share = (tiles + slots - 1) / slots;
      assert_true(share > longest);
      char want[96];
      snprintf(want, sizeof want, "no split (no tile-row has %lld tiles or more)", (long long)share);
      expect_in_why(&c, want);
    }
  }
  stof_mask_format_free(f);
  stof_mask_free(m);
  tu_ctx_free(ctx, &heap);
}

/* The query shift's rule (choose_qshift, through stof_attention_select_split as explain and
 * the plan run it) at S = 4096 on an H100-sized device: taken for sliding (128 tiles an
 * instance against 190) and longformer, whose masking is then decided from the shifted tiles
 * (no half skip: 25% of them have an empty half, against 59% unshifted at D 64); not for
 * causal_sliding (128 against 127) nor with qshift -1; forced on BigBird (otherwise tile 32
 * there: qshift 1 keeps the Hopper kernel at tile 64); refused with tile 128 and without the
 * Hopper kernel; an empty mask is not shifted. */
static void select_split_shifts_window_masks(void **state) {
  (void)state;
  tu_heap heap;
  stof_ctx *ctx = tu_ctx_new(&heap);
  static const struct {
    const char *name;
    int64_t D;
    stof_attn_opts o;
    int shifted;
    const char *why;
  } cases[] = {
      {"sliding", 128, {0}, 1, "; queries shifted by 32 (128 tiles an instance against 190, <= 85%), then partial tiles "
                               "masked per lane (100% partial, >= 10%), no half skip (0% with an empty key half"},
      {"longformer", 64, {0}, 1, "then partial tiles masked per lane (100% partial, >= 10%), no half skip (25% with an "
                                 "empty key half, < 45%)"},
      {"longformer", 128, {0}, 1, "then partial tiles masked per lane (100% partial, >= 10%), empty halves skipped (25% "
                                  "with an empty key half, >= 20%)"},
      {"causal_sliding", 64, {0}, 0, "; queries not shifted (128 tiles an instance against 127, > 85%)"},
      {"sliding", 64, {.qshift = -1}, 0, "empty halves skipped"},
      {"bigbird", 64, {.qshift = 1}, 1, "against 1634, asked for), then"},
      {"document", 128, {.qshift = 1, .tile = 64, .halfskip = -1, .rowmask = -1}, 1, "then partial tiles masked from the bitmap"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    stof_mask *m;
    TU_OK(ctx, stof_mask_suite(ctx, cases[i].name, 4096, &m));
    stof_mask_format *f = format_of(ctx, m, 4096, 4096);
    stof_attn_choice c;
    TU_OK(ctx, stof_attention_select(ctx, f, 16, 12, cases[i].D, &h100, &cases[i].o, &c));
    TU_OK(ctx, stof_attention_select_split(ctx, f, 16, 12, cases[i].D, &h100, &cases[i].o, &c));
    if (c.qshift != (cases[i].shifted ? 32 : 0) || !c.hopper || c.tile != 64)
      fail_msg("%s: qshift %d, tile %d: %s", cases[i].name, c.qshift, c.tile, c.why);
    expect_in_why(&c, cases[i].why);
    if (!cases[i].shifted && cases[i].o.qshift < 0 && strstr(c.why, "shifted")) fail_msg("%s: %s", cases[i].name, c.why);
    if (!strcmp(cases[i].name, "longformer")) assert_int_equal(c.halfskip, cases[i].D == 128); /* 25%: D 128 only */
    stof_mask_format_free(f);
    stof_mask_free(m);
  }
  /* refused where it cannot run */
  stof_mask *d, *none;
  TU_OK(ctx, stof_mask_dense(ctx, &d));
  stof_mask_format *f = format_of(ctx, d, 4096, 4096);
  stof_attn_choice c;
  stof_attn_opts o = {.qshift = 1, .tile = 128};
  stof_status st = stof_attention_select(ctx, f, 1, 1, 128, &h100, &o, &c);
  if (!st) st = stof_attention_select_split(ctx, f, 1, 1, 128, &h100, &o, &c);
  kt_expect_error(ctx, st, STOF_ERR_UNSUPPORTED, "qshift asked for, but it needs the Hopper kernel at tile 64");
  o = (stof_attn_opts){.qshift = 1, .portable = 1};
  st = stof_attention_select(ctx, f, 1, 1, 64, &h100, &o, &c);
  if (!st) st = stof_attention_select_split(ctx, f, 1, 1, 64, &h100, &o, &c);
  kt_expect_error(ctx, st, STOF_ERR_UNSUPPORTED, "not the Hopper kernel");
  stof_mask_format_free(f);
  TU_OK(ctx, stof_mask_window(ctx, 0, 0, &none));
  stof_mask *empty;
  TU_OK(ctx, stof_mask_difference(none, none, &empty));
  f = format_of(ctx, empty, 1024, 1024);
  o = (stof_attn_opts){.tile = 64, .kernel = STOF_ATTN_BLOCK};
  TU_OK(ctx, stof_attention_select(ctx, f, 1, 1, 64, &h100, &o, &c));
  TU_OK(ctx, stof_attention_select_split(ctx, f, 1, 1, 64, &h100, &o, &c));
  assert_int_equal(c.qshift, 0);
  stof_mask_format_free(f);
  stof_mask_free(empty);
  stof_mask_free(none);
  stof_mask_free(d);
  tu_ctx_free(ctx, &heap);
}

/* The options the engine compiles a choice's kernel with (kernels_attn_variant_options, as
 * get_variant) against what the selector says and the split rule counts
 * (kernels_attn_ctas_per_sm), over masks, head dims, lengths, score modifiers and forced
 * options on an H100-sized device: -DSTOF_MIN_BLOCKS=N only on the Hopper kernel, 3 exactly
 * where why says "three CTAs an SM" and the count is 3 (no modifier, D 128, tile 64, 2
 * stages, cp.async), the count never above the minimum asked for (query-shifted choices
 * among them); the TMA twin (tma 0) of a
 * forced TMA choice is compiled as a cp.async choice; each option once; the cache key
 * (kind and options, split kernels too) fits KERNELS_ATTN_KEY_LEN. */
static void variant_options_agree_with_the_selector(void **state) {
  (void)state;
  tu_heap heap;
  stof_ctx *ctx = tu_ctx_new(&heap);
  static const char *const masks[] = {"dense", "causal", "sliding", "longformer", "bigbird", "document"};
  static const stof_attn_opts forced[] = {{0}, {.tma = 1}, {.tma = -1}, {.stages = 3}, {.tile = 64}, {.tile = 128},
                                                  {.lazy = 1}, {.lazy = -1}};
  const stof_attn_mod mods[] = {{0}, {.softcap = 30}, {.kind = STOF_ATTN_MOD_ALIBI}, {.kind = STOF_ATTN_MOD_T5_BIAS,
                                                                                    .num_buckets = 32,
                                                                                    .max_distance = 128}};
  int nthree = 0, nchecked = 0, nshift = 0, norder = 0, nlazy = 0;
  for (size_t mi = 0; mi < sizeof masks / sizeof masks[0]; mi++)
    for (int64_t S = 1024; S <= 4096; S *= 4) {
      stof_mask *m;
      TU_OK(ctx, stof_mask_suite(ctx, masks[mi], S, &m));
      stof_mask_format *f = format_of(ctx, m, S, S);
      for (int64_t D = 64; D <= 128; D *= 2)
        for (size_t fi = 0; fi < sizeof forced / sizeof forced[0]; fi++)
          for (size_t di = 0; di < sizeof mods / sizeof mods[0]; di++) {
            stof_attn_opts o = forced[fi];
            o.mod = mods[di];
            stof_attn_choice c;
            /* the selector, then the plan's other decisions (the query shift, the order): all
             * the options a plan compiles with */
            if (stof_attention_select(ctx, f, 1, 8, D, &h100, &o, &c)) { /* e.g. TMA at a tile without it */
              stof_ctx_clear_error(ctx);
              continue;
            }
            stof_mask_format *ft = NULL; /* the format at the choice's tile, as a plan's */
            if (c.tile != f->T) TU_OK(ctx, stof_mask_format_build(ctx, m, 1, 8, S, S, c.tile, &ft));
            TU_OK(ctx, stof_attention_select_split(ctx, ft ? ft : f, 1, 8, D, &h100, &o, &c));
            stof_mask_format_free(ft);
            nshift += c.qshift != 0;
            char opt[KERNELS_ATTN_MAX_OPTS][KERNELS_ATTN_OPT_LEN];
            int n = kernels_attn_variant_options(&c, D, STOF_DTYPE_F16, &o.mod, STOF_DTYPE_F32, 0, opt);
            assert_true(n > 0 && n <= KERNELS_ATTN_MAX_OPTS);
            /* the launch order's macro exactly where the launch passes its table (uses_order,
             * no split): 2 with groups, 1 without */
            int order_opt = 0;
            for (int i = 0; i < n; i++)
              if (!strncmp(opt[i], "-DSTOF_SM90_ORDER=", 18) || !strncmp(opt[i], "-DSTOF_ORDER=", 13))
                order_opt = atoi(strchr(opt[i], '=') + 1);
            int want_order = c.split_rows ? 0 : c.order_group > 1 ? 2 : c.heavy_rows > 0 ? 1 : 0;
            if (order_opt != want_order)
              fail_msg("%s S %lld D %lld: order option %d, want %d (heavy %d, group %d): %s", masks[mi], (long long)S,
                       (long long)D, order_opt, want_order, c.heavy_rows, c.order_group, c.why);
            norder += order_opt > 0;
            /* the lazy rescale's macro exactly where the choice has it; the rule (an H100-sized
             * device, compute capability 9.0): D 128, no modifier, the Hopper kernel without
             * ping-pong or the tile-32 kernel */
            int lazy_opt = 0;
            for (int i = 0; i < n; i++) lazy_opt |= !strcmp(opt[i], "-DSTOF_LAZY_RESCALE=1");
            int plain_mod = o.mod.kind == STOF_ATTN_MOD_NONE && !(o.mod.softcap > 0);
            int want_lazy = o.lazy == 1    ? c.kernel == STOF_ATTN_BLOCK
                            : o.lazy == -1 ? 0
                                           : c.kernel == STOF_ATTN_BLOCK && D == 128 && plain_mod &&
                                                 (c.hopper ? !(c.tile == 128 && c.stages >= 3) : c.tile == 32);
            /* the reason among the kernel's, before the "(B*H = ..., D = ...)" trailer */
            const char *lazy_at = strstr(c.why, "O rescaled lazily"), *trailer = strstr(c.why, " (B*H = ");
            if (lazy_opt != c.lazy || c.lazy != want_lazy || (lazy_at != NULL) != want_lazy ||
                (lazy_at && (!trailer || lazy_at > trailer)))
              fail_msg("%s S %lld D %lld forced %zu mod %zu: lazy option %d, choice %d, want %d: %s", masks[mi],
                       (long long)S, (long long)D, fi, di, lazy_opt, c.lazy, want_lazy, c.why);
            nlazy += want_lazy;
            for (int split = 0; split <= 2; split++) { /* get_variant's key fits, split kernels too */
              char sopt[KERNELS_ATTN_MAX_OPTS][KERNELS_ATTN_OPT_LEN];
              int sn = kernels_attn_variant_options(&c, D, STOF_DTYPE_F16, &o.mod, STOF_DTYPE_F32, split, sopt);
              size_t keylen = strlen("block_sm90");
              for (int i = 0; i < sn; i++) keylen += 1 + strlen(sopt[i]);
              assert_true(sn > 0 && sn <= KERNELS_ATTN_MAX_OPTS && keylen < KERNELS_ATTN_KEY_LEN);
            }
            int mb = 0;
            for (int i = 0; i < n; i++) {
              for (int j = 0; j < i; j++)
                if (!strncmp(opt[i], opt[j], (size_t)(strchr(opt[j], '=') - opt[j])))
                  fail_msg("%s S %lld D %lld: %s twice", masks[mi], (long long)S, (long long)D, opt[i]);
              if (!strncmp(opt[i], "-DSTOF_MIN_BLOCKS=", 18)) mb = atoi(opt[i] + 18);
            }
            int named = strstr(c.why, "three CTAs an SM") != NULL;
            nchecked++;
            if (!c.hopper) {
              assert_int_equal(mb, 0);
              assert_false(named);
              continue;
            }
            int64_t ctas = kernels_attn_ctas_per_sm(&h100, &c, D, &o.mod);
            int plain = o.mod.kind == STOF_ATTN_MOD_NONE && !(o.mod.softcap > 0);
            int want3 = plain && D == 128 && c.tile == 64 && c.stages == 2 && !c.tma;
            if ((mb == 3) != want3 || named != want3 || (want3 && ctas != 3))
              fail_msg("%s S %lld D %lld forced %zu mod %zu: MIN_BLOCKS %d, why %d, %lld CTAs: %s", masks[mi],
                       (long long)S, (long long)D, fi, di, mb, named, (long long)ctas, c.why);
            assert_true(ctas >= 1 && (mb == 0 ? ctas <= 2 : ctas <= mb));
            nthree += want3;
            if (c.tma) { /* the cp.async twin, as plan_new compiles it */
              stof_attn_choice twin = c;
              twin.tma = 0;
              int tn = kernels_attn_variant_options(&twin, D, STOF_DTYPE_F16, &o.mod, STOF_DTYPE_F32, 0, opt), tmb = 0;
              for (int i = 0; i < tn; i++)
                if (!strncmp(opt[i], "-DSTOF_MIN_BLOCKS=", 18)) tmb = atoi(opt[i] + 18);
              int twin3 = plain && D == 128 && c.tile == 64 && c.stages == 2;
              assert_int_equal(tmb == 3, twin3);
            }
          }
      stof_mask_format_free(f);
      stof_mask_free(m);
    }
  print_message("     %d choices checked, %d with three CTAs an SM, %d query-shifted, %d with a launch order, "
                "%d rescaled lazily\n", nchecked, nthree, nshift, norder, nlazy);
  assert_true(nthree > 0 && nshift > 0 && norder > 0 && nlazy > 0 && nchecked > 100);
  tu_ctx_free(ctx, &heap);
}

/* The lazy rescale (stof_attn_opts.lazy): the rule takes it on a Hopper GPU at D 128 without a
 * modifier, for the tile-32 kernel (BigBird) and the Hopper kernel without ping-pong (sliding
 * at tile 64), not for the ping-pong (dense at tile 128), D 64, another GPU or a modifier;
 * forced on, it is taken on any block-wise kernel and refused for the row-wise one; forced
 * off, it is never taken; out-of-range values are refused. */
static void select_lazy_rescale_rule(void **state) {
  (void)state;
  tu_heap heap;
  stof_ctx *ctx = tu_ctx_new(&heap);
  static const char *const names[] = {"bigbird", "sliding", "dense"};
  static const int rule128[] = {1, 1, 0};
  stof_attn_choice c;
  for (int i = 0; i < 3; i++) {
    stof_mask *m;
    TU_OK(ctx, stof_mask_suite(ctx, names[i], 4096, &m));
    stof_mask_format *f = format_of(ctx, m, 4096, 4096);
    TU_OK(ctx, stof_attention_select(ctx, f, 16, 12, 128, &h100, NULL, &c));
    assert_int_equal(c.lazy, rule128[i]);
    if (rule128[i]) expect_in_why(&c, "O rescaled lazily (Hopper GPU, D = 128, no ping-pong)");
    else assert_null(strstr(c.why, "lazily"));
    assert_int_equal(c.tile, i == 0 ? 32 : i == 1 ? 64 : 128);
    TU_OK(ctx, stof_attention_select(ctx, f, 16, 12, 64, &h100, NULL, &c));
    assert_int_equal(c.lazy, 0); /* D 64 */
    TU_OK(ctx, stof_attention_select(ctx, f, 16, 12, 128, &a100, NULL, &c));
    assert_int_equal(c.lazy, 0); /* not a Hopper GPU */
    stof_attn_opts o = {.mod = {.kind = STOF_ATTN_MOD_ALIBI}};
    TU_OK(ctx, stof_attention_select(ctx, f, 16, 12, 128, &h100, &o, &c));
    assert_int_equal(c.lazy, 0); /* a modifier: not measured */
    o = (stof_attn_opts){.lazy = -1};
    TU_OK(ctx, stof_attention_select(ctx, f, 16, 12, 128, &h100, &o, &c));
    assert_int_equal(c.lazy, 0);
    o = (stof_attn_opts){.lazy = 1};
    TU_OK(ctx, stof_attention_select(ctx, f, 16, 12, 64, &a100, &o, &c));
    assert_int_equal(c.lazy, 1);
    expect_in_why(&c, "O rescaled lazily (asked for)");
    stof_mask_format_free(f);
    stof_mask_free(m);
  }
  stof_mask *m;
  TU_OK(ctx, stof_mask_sliding(ctx, 32, &m));
  stof_mask_format *f = format_of(ctx, m, 4096, 4096);
  stof_attn_opts o = {.lazy = 1, .kernel = STOF_ATTN_ROW};
  kt_expect_error(ctx, stof_attention_select(ctx, f, 1, 1, 128, &h100, &o, &c), STOF_ERR_UNSUPPORTED,
                  "block-wise kernels'");
  o = (stof_attn_opts){.lazy = 2};
  kt_expect_error(ctx, stof_attention_select(ctx, f, 1, 1, 128, &h100, &o, &c), STOF_ERR_ARG, "lazy 2");
  o = (stof_attn_opts){.lazy = -2};
  kt_expect_error(ctx, stof_attention_select(ctx, f, 1, 1, 128, &h100, &o, &c), STOF_ERR_ARG, "lazy -2");
  stof_mask_format_free(f);
  stof_mask_free(m);
  tu_ctx_free(ctx, &heap);
}

/* The launch order a plan would take (stof_attention_select_split): longformer's global
 * tile-row first on the Hopper kernel, unless asked not to; nothing on the portable kernel,
 * nor where a row is split (a forced split). */
static void select_split_orders_long_rows_first(void **state) {
  (void)state;
  tu_heap heap;
  stof_ctx *ctx = tu_ctx_new(&heap);
  stof_mask *m;
  TU_OK(ctx, stof_mask_longformer(ctx, 32, 32, &m));
  stof_mask_format *f64 = format_of(ctx, m, 4096, 4096);
  stof_attn_choice c;
  TU_OK(ctx, stof_attention_select(ctx, f64, 16, 12, 64, &h100, NULL, &c));
  assert_true(c.hopper);
  assert_int_equal(c.tile, 64);
  assert_int_equal(c.heavy_rows, 0); /* the selector alone does not decide it */
  /* 16 x 12 (the grid's shape): a CTA slot's share of the launch (116 tiles on an H100) is
   * more than the global row's 64, so it is not split (at 1 x 8 it would be) */
  TU_OK(ctx, stof_attention_select_split(ctx, f64, 16, 12, 64, &h100, NULL, &c));
  assert_int_equal(c.heavy_rows, 1);
  expect_in_why(&c, "1 long tile-row a (b, h) launched first");
  stof_attn_opts o = {0};
  o.order = -1;
  TU_OK(ctx, stof_attention_select(ctx, f64, 16, 12, 64, &h100, &o, &c));
  TU_OK(ctx, stof_attention_select_split(ctx, f64, 16, 12, 64, &h100, &o, &c));
  assert_int_equal(c.heavy_rows, 0);
  expect_in_why(&c, "last tile-row first (asked for)");
  o.order = 0;
  o.split = 16; /* every row of more than 16 tiles split: the default order */
  TU_OK(ctx, stof_attention_select(ctx, f64, 16, 12, 64, &h100, &o, &c));
  TU_OK(ctx, stof_attention_select_split(ctx, f64, 16, 12, 64, &h100, &o, &c));
  assert_true(c.split_rows > 0);
  assert_int_equal(c.heavy_rows, 0);
  assert_null(strstr(c.why, "launched first"));
  TU_OK(ctx, stof_attention_select(ctx, f64, 16, 12, 64, &a100, NULL, &c));
  TU_OK(ctx, stof_attention_select_split(ctx, f64, 16, 12, 64, &a100, NULL, &c));
  assert_false(c.hopper || c.heavy_rows);
  /* groups asked for: taken with the long rows first, refused where no order runs (a split
   * plan, order -1, the portable kernel, another GPU), negative ones refused */
  o = (stof_attn_opts){.order_group = 5};
  TU_OK(ctx, stof_attention_select(ctx, f64, 16, 12, 64, &h100, &o, &c));
  TU_OK(ctx, stof_attention_select_split(ctx, f64, 16, 12, 64, &h100, &o, &c));
  assert_int_equal(c.heavy_rows, 1);
  assert_int_equal(c.order_group, 5);
  expect_in_why(&c, "then the others longest first, 5 (b, h) at a time (");
  static const stof_attn_opts refused[] = {{.order_group = 5, .split = 16}, {.order_group = 5, .order = -1},
                                           {.order_group = 5, .portable = 1}};
  static const char *const because[] = {"the plan splits its long tile-rows", "order -1 asks for the default order",
                                        "needs the Hopper kernel, or the block kernel at tile 32"};
  for (int i = 0; i < 3; i++) {
    TU_OK(ctx, stof_attention_select(ctx, f64, 16, 12, 64, &h100, &refused[i], &c));
    TU_ERR(ctx, stof_attention_select_split(ctx, f64, 16, 12, 64, &h100, &refused[i], &c), STOF_ERR_UNSUPPORTED,
           because[i]);
  }
  TU_ERR(ctx, stof_attention_select(ctx, f64, 16, 12, 64, &h100, &(stof_attn_opts){.order_group = -1}, &c),
         STOF_ERR_ARG, "order_group -1");
  /* past the groups' 32-bit walk (B x H x tile-rows over 2^31 - 1): refused where asked for,
   * none by the rule */
  stof_mask *cm;
  TU_OK(ctx, stof_mask_causal(ctx, &cm));
  stof_mask_format *fc = format_of(ctx, cm, 4096, 4096);
  o = (stof_attn_opts){.tile = 64, .order_group = 5};
  TU_OK(ctx, stof_attention_select(ctx, fc, 33554432, 1, 64, &h100, &o, &c));
  TU_ERR(ctx, stof_attention_select_split(ctx, fc, 33554432, 1, 64, &h100, &o, &c), STOF_ERR_UNSUPPORTED,
         "past the groups' 2^31 - 1");
  o.order_group = 0;
  TU_OK(ctx, stof_attention_select(ctx, fc, 33554432, 1, 64, &h100, &o, &c));
  TU_OK(ctx, stof_attention_select_split(ctx, fc, 33554432, 1, 64, &h100, &o, &c));
  assert_int_equal(c.order_group, 0);
  TU_OK(ctx, stof_attention_select_split(ctx, fc, 16, 12, 64, &h100, &o, &c));
  assert_int_equal(c.order_group, 24);
  stof_mask_format_free(fc);
  stof_mask_free(cm);
  stof_mask_format_free(f64);
  /* the block kernel at tile 32 (BigBird's on Hopper): its global rows first and groups on a
   * Hopper GPU; no order on another (refused where asked for) */
  stof_mask *bb;
  TU_OK(ctx, stof_mask_suite(ctx, "bigbird", 4096, &bb));
  stof_mask_format *f32 = NULL;
  TU_OK(ctx, stof_mask_format_build(ctx, bb, 16, 12, 4096, 4096, 32, &f32));
  o = (stof_attn_opts){.tile = 32};
  TU_OK(ctx, stof_attention_select(ctx, f32, 16, 12, 64, &h100, &o, &c));
  TU_OK(ctx, stof_attention_select_split(ctx, f32, 16, 12, 64, &h100, &o, &c));
  assert_false(c.hopper);
  assert_int_equal(c.heavy_rows, 1);
  assert_int_equal(c.order_group, 24); /* 24 MB / (4096 x 64 x 4 bytes) */
  TU_OK(ctx, stof_attention_select(ctx, f32, 16, 12, 64, &a100, &o, &c));
  TU_OK(ctx, stof_attention_select_split(ctx, f32, 16, 12, 64, &a100, &o, &c));
  assert_int_equal(c.heavy_rows, 0);
  assert_int_equal(c.order_group, 0);
  o.order_group = 3;
  TU_OK(ctx, stof_attention_select(ctx, f32, 16, 12, 64, &a100, &o, &c));
  TU_ERR(ctx, stof_attention_select_split(ctx, f32, 16, 12, 64, &a100, &o, &c), STOF_ERR_UNSUPPORTED,
         "order_group 3 asked for");
  stof_mask_format_free(f32);
  stof_mask_free(bb);
  stof_mask_free(m);
  tu_ctx_free(ctx, &heap);
}

/* How the Hopper kernel masks partial tiles (the thirteenth session's rule): per lane from
 * 10% partial tiles, the empty key half skipped from 45% (D 64) or 20% (D 128; both the
 * twenty-fifth session's) of the non-empty tiles having one (tile 64 only): longformer's 59%
 * and causal_sliding's 50% at both, document's 4% at neither; never on the portable kernel;
 * forced either way; refused where it cannot
 * run. The shares come from the format's counts (bigbird at 4096: 1,343 of 1,634). Bigbird
 * runs at tile 32 on Hopper by itself (select_picks_tile_32_for_32_wide_blocks), so its cases
 * ask for tile 64. */
static void select_picks_the_partial_tile_masking(void **state) {
  (void)state;
  tu_heap heap;
  stof_ctx *ctx = tu_ctx_new(&heap);
  static const struct {
    const char *mask;
    int64_t D;
    int rowmask, halfskip, tile;
  } cases[] = {
      {"dense", 64, 0, 0, 0},    {"causal", 64, 0, 0, 0},     {"bigbird", 64, 1, 1, 64}, {"bigbird", 128, 1, 1, 64},
      {"sliding", 64, 1, 1, 0},  {"longformer", 64, 1, 1, 0}, {"longformer", 128, 1, 1, 0},
      {"causal_sliding", 64, 1, 1, 0}, {"causal_sliding", 128, 1, 1, 0},
      {"document", 64, 1, 0, 0}, {"document", 128, 1, 0, 0}, /* tile 128 at D 128: no half skip */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    stof_mask *m;
    TU_OK(ctx, stof_mask_suite(ctx, cases[i].mask, 4096, &m));
    stof_mask_format *f = format_of(ctx, m, 4096, 4096);
    double nonempty = (double)(f->ntile_full + f->ntile_partial);
    stof_attn_choice c;
    TU_OK(ctx, stof_attention_select(ctx, f, 1, 8, cases[i].D, &h100, &(stof_attn_opts){.tile = cases[i].tile}, &c));
    if (!c.hopper || c.rowmask != cases[i].rowmask || c.halfskip != cases[i].halfskip)
      fail_msg("%s D %lld (%.0f%% partial, %.0f%% half empty): hopper %d rowmask %d halfskip %d; want %d %d: %s",
               cases[i].mask, (long long)cases[i].D, 100 * f->ntile_partial / nonempty,
               100 * f->ntile_halfempty / nonempty, c.hopper, c.rowmask, c.halfskip, cases[i].rowmask,
               cases[i].halfskip, c.why);
    expect_in_why(&c, c.rowmask ? "masked per lane" : "masked from the bitmap");
    expect_in_why(&c, c.halfskip ? "empty halves skipped" : "no half skip");
    /* the portable kernel has neither */
    TU_OK(ctx, stof_attention_select(ctx, f, 1, 8, cases[i].D, &a100, NULL, &c));
    assert_false(c.rowmask || c.halfskip);
    stof_mask_format_free(f);
    stof_mask_free(m);
  }
  stof_mask *m;
  TU_OK(ctx, stof_mask_suite(ctx, "bigbird", 4096, &m));
  stof_mask_format *f = format_of(ctx, m, 4096, 4096);
  stof_attn_choice c;
  TU_OK(ctx, stof_attention_select(ctx, f, 1, 8, 64, &h100, &(stof_attn_opts){.tile = 64, .rowmask = -1, .halfskip = -1}, &c));
  assert_true(c.hopper && !c.rowmask && !c.halfskip);
  expect_in_why(&c, "asked for");
  TU_OK(ctx, stof_attention_select(ctx, f, 1, 8, 64, &h100, &(stof_attn_opts){.tile = 64, .halfskip = -1}, &c));
  assert_true(c.rowmask && !c.halfskip);
  TU_ERR(ctx, stof_attention_select(ctx, f, 1, 8, 64, &a100, &(stof_attn_opts){.halfskip = 1}, &c),
         STOF_ERR_UNSUPPORTED, "halfskip asked for, but it needs the Hopper kernel at tile 64");
  TU_ERR(ctx, stof_attention_select(ctx, f, 1, 8, 64, &a100, &(stof_attn_opts){.rowmask = 1}, &c),
         STOF_ERR_UNSUPPORTED, "rowmask asked for, but the Hopper kernel is not chosen");
  TU_ERR(ctx, stof_attention_select(ctx, f, 1, 8, 64, &h100, &(stof_attn_opts){.rowmask = 2}, &c), STOF_ERR_ARG,
         "rowmask 2");
  TU_ERR(ctx, stof_attention_select(ctx, f, 1, 8, 64, &h100, &(stof_attn_opts){.split = -2}, &c), STOF_ERR_ARG,
         "split -2");
  stof_mask_format_free(f);
  /* tile 128 has no half skip: asked for, an error */
  TU_OK(ctx, stof_mask_format_build(ctx, m, 1, 1, 4096, 4096, 128, &f));
  TU_ERR(ctx, stof_attention_select(ctx, f, 1, 8, 64, &h100, &(stof_attn_opts){.tile = 128, .halfskip = 1}, &c),
         STOF_ERR_UNSUPPORTED, "halfskip asked for, but it needs the Hopper kernel at tile 64 (block-wise, tile 128)");
  stof_mask_format_free(f);
  stof_mask_free(m);
  TU_OK(ctx, stof_mask_dense(ctx, &m));
  f = format_of(ctx, m, 4096, 4096);
  TU_OK(ctx, stof_attention_select(ctx, f, 1, 8, 64, &h100, &(stof_attn_opts){.rowmask = 1}, &c));
  assert_true(c.rowmask && !c.halfskip); /* forced on where the rule says no */
  stof_mask_format_free(f);
  stof_mask_free(m);
  tu_ctx_free(ctx, &heap);
}

static void select_respects_forced_kernel_tile_and_pipeline(void **state) {
  (void)state;
  tu_heap heap;
  stof_ctx *ctx = tu_ctx_new(&heap);
  stof_attn_choice c;
  stof_mask *dense, *sparse;
  TU_OK(ctx, stof_mask_dense(ctx, &dense));
  TU_OK(ctx, stof_mask_document(ctx, 1, (const int64_t[]){40}, &sparse));
  stof_mask_format *fd = format_of(ctx, dense, 1024, 1024),
                   *fs = format_of(ctx, sparse, 4096, 4096);

  /* the rule's choices (block, row) turned around by force; the statistics are still
   * reported */
  TU_OK(ctx, stof_attention_select(ctx, fd, 1, 8, 64, NULL,
                                   &(stof_attn_opts){.kernel = STOF_ATTN_ROW}, &c));
  assert_int_equal(c.kernel, STOF_ATTN_ROW);
  assert_true(c.frac16 == 1.0);
  expect_in_why(&c, "row");
  TU_OK(ctx, stof_attention_select(ctx, fs, 1, 8, 64, NULL,
                                   &(stof_attn_opts){.kernel = STOF_ATTN_BLOCK}, &c));
  assert_int_equal(c.kernel, STOF_ATTN_BLOCK);
  assert_true(fabs(c.threshold - STOF_ATTN_SELECT_C / 64.0) < 1e-15);
  expect_in_why(&c, "block");

  /* tiles: forced 64 and 128 kept; 0 is the selector's (one the kernels have) */
  static const stof_attn_kernel kernels[] = {STOF_ATTN_AUTO, STOF_ATTN_BLOCK, STOF_ATTN_ROW};
  for (int kk = 0; kk < 3; kk++) {
    for (int tile = 0; tile <= 128; tile += 64) {
      stof_attn_opts o = {.kernel = kernels[kk], .tile = tile};
      TU_OK(ctx, stof_attention_select(ctx, fd, 1, 8, 128, NULL, &o, &c));
      if (tile)
        assert_int_equal(c.tile, tile);
      else
        assert_true(c.tile == 64 || c.tile == 128);
      if (kernels[kk] != STOF_ATTN_AUTO) assert_int_equal(c.kernel, kernels[kk]);
      assert_true(c.kernel == STOF_ATTN_BLOCK || c.kernel == STOF_ATTN_ROW);
      /* the block kernel needs tile / warps query rows per warp of 16 or 32 */
      if (c.kernel == STOF_ATTN_BLOCK)
        assert_true(c.warps > 0 && (c.tile / c.warps == 16 || c.tile / c.warps == 32));
      assert_true(c.warps >= 1 && c.warps <= 32);
      assert_true(c.stages >= 2 && c.stages <= 4);
      char t[32];
      snprintf(t, sizeof t, "tile %d", c.tile);
      expect_in_why(&c, t);
    }
  }
  /* warps and stages forced */
  TU_OK(ctx,
        stof_attention_select(
            ctx, fd, 1, 8, 64, NULL,
            &(stof_attn_opts){.kernel = STOF_ATTN_BLOCK, .tile = 64, .warps = 2, .stages = 3}, &c));
  assert_int_equal(c.warps, 2);
  assert_int_equal(c.stages, 3);
  expect_in_why(&c, "2 warps");
  expect_in_why(&c, "3 stages");
  /* NULL opts are the zero opts */
  stof_attn_choice c2;
  TU_OK(ctx, stof_attention_select(ctx, fs, 1, 8, 64, NULL, NULL, &c));
  TU_OK(ctx, stof_attention_select(ctx, fs, 1, 8, 64, NULL, &(stof_attn_opts){0}, &c2));
  assert_int_equal(c.kernel, c2.kernel);
  assert_int_equal(c.tile, c2.tile);
  assert_int_equal(c.warps, c2.warps);
  assert_string_equal(c.why, c2.why);

  stof_mask_format_free(fd);
  stof_mask_format_free(fs);
  stof_mask_free(dense);
  stof_mask_free(sparse);
  tu_ctx_free(ctx, &heap);
}

/* opts.tma: 1 takes the Hopper kernel's TMA variant (and says so), -1 and 0 its cp.async
 * one; 1 where the Hopper kernel is not chosen is an error, as is a value out of range. */
static void select_takes_tma_only_on_the_hopper_kernel(void **state) {
  (void)state;
  tu_heap heap;
  stof_ctx *ctx = tu_ctx_new(&heap);
  stof_mask *m;
  TU_OK(ctx, stof_mask_causal(ctx, &m));
  stof_mask_format *f = format_of(ctx, m, 1024, 1024);
  const stof_cuda_props h200 = h100;
  stof_attn_choice c;
  for (int tile = 64; tile <= 128; tile += 64)
    for (int D = 64; D <= 128; D += 64) {
      TU_OK(ctx, stof_attention_select(ctx, f, 1, 8, D, &h200,
                                       &(stof_attn_opts){.kernel = STOF_ATTN_BLOCK, .tile = tile, .tma = 1}, &c));
      assert_true(c.hopper && c.tma);
      assert_int_equal(c.warps, tile / 16); /* consumer warps; the producer is the kernel's */
      expect_in_why(&c, "TMA");
      TU_OK(ctx, stof_attention_select(ctx, f, 1, 8, D, &h200,
                                       &(stof_attn_opts){.kernel = STOF_ATTN_BLOCK, .tile = tile, .tma = -1}, &c));
      assert_true(c.hopper && !c.tma);
      assert_null(strstr(c.why, "TMA"));
      /* the default: TMA where it measured faster (D 128 at tile 128, D 64 at tile 64) */
      int want = (D == 128 && tile == 128) || (D == 64 && tile == 64);
      TU_OK(ctx, stof_attention_select(ctx, f, 1, 8, D, &h200,
                                       &(stof_attn_opts){.kernel = STOF_ATTN_BLOCK, .tile = tile}, &c));
      assert_true(c.hopper);
      assert_int_equal(c.tma, want);
      assert_int_equal(strstr(c.why, "TMA") != NULL, want);
    }
  TU_ERR(ctx, stof_attention_select(ctx, f, 1, 8, 64, &a100, &(stof_attn_opts){.kernel = STOF_ATTN_BLOCK, .tma = 1}, &c),
         STOF_ERR_UNSUPPORTED, "compute capability 9.0");
  TU_ERR(ctx, stof_attention_select(ctx, f, 1, 8, 64, NULL, &(stof_attn_opts){.tma = 1}, &c),
         STOF_ERR_UNSUPPORTED, "TMA");
  TU_ERR(ctx,
         stof_attention_select(ctx, f, 1, 8, 64, &h200,
                               &(stof_attn_opts){.kernel = STOF_ATTN_BLOCK, .portable = 1, .tma = 1}, &c),
         STOF_ERR_UNSUPPORTED, "portable");
  TU_ERR(ctx, stof_attention_select(ctx, f, 1, 8, 64, &h200, &(stof_attn_opts){.tma = 2}, &c),
         STOF_ERR_ARG, "tma 2");
  stof_mask_format_free(f);
  stof_mask_free(m);
  tu_ctx_free(ctx, &heap);
}

/* The Hopper kernel compiles with NVRTC for sm_90a (no GPU needed) with its K/V loads by
 * cp.async and by TMA, at both head dims, both tiles and both element types, with Q in
 * shared memory at 4 CTAs per SM (the default at D = 64, tile 64, TMA), with a partial
 * tile's dead 32-key half skipped (STOF_SM90_HALFSKIP, tile 64), at 3 CTAs per SM (D = 128,
 * tile 64, cp.async: STOF_MIN_BLOCKS=3), with a partial tile's mask bits transposed per lane
 * (STOF_SM90_ROWMASK: by the TMA producer at tile 64, by the consumers with cp.async at tile
 * 128), both as the selector picks them, the variants of a plan that splits heavy
 * tile-rows (STOF_SM90_SPLIT 1 and 2), with and without those, and the query shift
 * (STOF_SM90_QSHIFT=32). */
static void hopper_kernel_compiles_for_sm90a_with_and_without_tma(void **state) {
  (void)state;
  tu_heap heap;
  stof_ctx *ctx = tu_ctx_new(&heap);
  const char *src = stof_kernels_source("attention_block_sm90.cu");
  const char *hname[1] = {"attention_common.cuh"};
  const char *hsrc[1] = {stof_kernels_source("attention_common.cuh")};
  assert_non_null(src);
  assert_non_null(hsrc[0]);
  assert_non_null(strstr(src, "stof_attn_block_fwd_sm90"));
  static const char *const cases[][11] = {
      {"-DSTOF_HEAD_DIM=64", "-DSTOF_TILE_M=128", "-DSTOF_BF16=0", "-DSTOF_SM90_TMA=0", "", ""},
      {"-DSTOF_HEAD_DIM=64", "-DSTOF_TILE_M=128", "-DSTOF_BF16=0", "-DSTOF_SM90_TMA=1", "", ""},
      {"-DSTOF_HEAD_DIM=128", "-DSTOF_TILE_M=128", "-DSTOF_BF16=1", "-DSTOF_SM90_TMA=1", "", ""},
      {"-DSTOF_HEAD_DIM=128", "-DSTOF_TILE_M=64", "-DSTOF_BF16=1", "-DSTOF_SM90_TMA=1", "", ""},
      {"-DSTOF_HEAD_DIM=64", "-DSTOF_TILE_M=64", "-DSTOF_BF16=0", "-DSTOF_SM90_TMA=1", "", ""},
      {"-DSTOF_HEAD_DIM=64", "-DSTOF_TILE_M=64", "-DSTOF_BF16=1", "-DSTOF_SM90_TMA=1", "-DSTOF_SM90_QREG=0",
       "-DSTOF_MIN_BLOCKS=4"},
      {"-DSTOF_HEAD_DIM=64", "-DSTOF_TILE_M=64", "-DSTOF_BF16=0", "-DSTOF_SM90_TMA=1", "-DSTOF_SM90_HALFSKIP=1", ""},
      {"-DSTOF_HEAD_DIM=128", "-DSTOF_TILE_M=64", "-DSTOF_BF16=1", "-DSTOF_SM90_TMA=0", "-DSTOF_SM90_HALFSKIP=1",
       "-DSTOF_MIN_BLOCKS=3"},
      {"-DSTOF_HEAD_DIM=64", "-DSTOF_TILE_M=64", "-DSTOF_BF16=0", "-DSTOF_SM90_TMA=1", "-DSTOF_SM90_ROWMASK=1",
       "-DSTOF_SM90_QREG=0", "-DSTOF_MIN_BLOCKS=4"},
      {"-DSTOF_HEAD_DIM=64", "-DSTOF_TILE_M=64", "-DSTOF_BF16=0", "-DSTOF_SM90_TMA=1", "-DSTOF_SM90_HALFSKIP=1",
       "-DSTOF_SM90_ROWMASK=1", ""},
      {"-DSTOF_HEAD_DIM=128", "-DSTOF_TILE_M=128", "-DSTOF_BF16=1", "-DSTOF_SM90_TMA=0", "-DSTOF_SM90_ROWMASK=1", ""},
      /* the launch order (longformer's global rows first), with and without TMA */
      {"-DSTOF_HEAD_DIM=64", "-DSTOF_TILE_M=64", "-DSTOF_BF16=0", "-DSTOF_SM90_TMA=1", "-DSTOF_SM90_QREG=0",
       "-DSTOF_MIN_BLOCKS=4", "-DSTOF_SM90_ROWMASK=1", "-DSTOF_SM90_HALFSKIP=1", "-DSTOF_SM90_ORDER=1"},
      {"-DSTOF_HEAD_DIM=128", "-DSTOF_TILE_M=128", "-DSTOF_BF16=1", "-DSTOF_SM90_TMA=0", "-DSTOF_SM90_ORDER=1", ""},
      /* split plans: the main kernel that skips split rows (1), the chunk kernel and the
       * combine (2), as the engine compiles them beside each default variant */
      {"-DSTOF_HEAD_DIM=64", "-DSTOF_TILE_M=64", "-DSTOF_BF16=0", "-DSTOF_SM90_TMA=1", "-DSTOF_SM90_QREG=0",
       "-DSTOF_MIN_BLOCKS=4", "-DSTOF_SM90_SPLIT=1"},
      {"-DSTOF_HEAD_DIM=64", "-DSTOF_TILE_M=64", "-DSTOF_BF16=0", "-DSTOF_SM90_TMA=1", "-DSTOF_SM90_QREG=0",
       "-DSTOF_MIN_BLOCKS=4", "-DSTOF_SM90_SPLIT=2"},
      {"-DSTOF_HEAD_DIM=128", "-DSTOF_TILE_M=128", "-DSTOF_BF16=1", "-DSTOF_SM90_TMA=1", "-DSTOF_SM90_SPLIT=2", ""},
      {"-DSTOF_HEAD_DIM=128", "-DSTOF_TILE_M=64", "-DSTOF_BF16=0", "-DSTOF_SM90_TMA=0", "-DSTOF_SM90_SPLIT=2",
       "-DSTOF_SCORE_MOD=1", "-DSTOF_SOFTCAP=1"},
      {"-DSTOF_HEAD_DIM=64", "-DSTOF_TILE_M=128", "-DSTOF_BF16=1", "-DSTOF_SM90_TMA=0", "-DSTOF_SM90_SPLIT=1",
       "-DSTOF_SCORE_MOD=2", ""},
      /* split plans of masks that get the per-lane masking and the half skip (longformer,
       * bigbird with global rows) */
      {"-DSTOF_HEAD_DIM=64", "-DSTOF_TILE_M=64", "-DSTOF_BF16=0", "-DSTOF_SM90_TMA=1", "-DSTOF_SM90_QREG=0",
       "-DSTOF_MIN_BLOCKS=4", "-DSTOF_SM90_ROWMASK=1", "-DSTOF_SM90_SPLIT=2"},
      {"-DSTOF_HEAD_DIM=64", "-DSTOF_TILE_M=64", "-DSTOF_BF16=1", "-DSTOF_SM90_TMA=1", "-DSTOF_SM90_QREG=0",
       "-DSTOF_MIN_BLOCKS=4", "-DSTOF_SM90_ROWMASK=1", "-DSTOF_SM90_HALFSKIP=1", "-DSTOF_SM90_SPLIT=2"},
      {"-DSTOF_HEAD_DIM=128", "-DSTOF_TILE_M=64", "-DSTOF_BF16=0", "-DSTOF_SM90_TMA=0", "-DSTOF_SM90_ROWMASK=1",
       "-DSTOF_SM90_HALFSKIP=1", "-DSTOF_MIN_BLOCKS=3", "-DSTOF_SM90_SPLIT=1"},
      {"-DSTOF_HEAD_DIM=128", "-DSTOF_TILE_M=64", "-DSTOF_BF16=0", "-DSTOF_SM90_TMA=0", "-DSTOF_SM90_ROWMASK=1",
       "-DSTOF_SM90_HALFSKIP=1", "-DSTOF_MIN_BLOCKS=3", "-DSTOF_SM90_SPLIT=2"},
      /* D = 128, tile 64, cp.async, no modifier: three CTAs an SM (hopper_min_blocks) */
      {"-DSTOF_HEAD_DIM=128", "-DSTOF_TILE_M=64", "-DSTOF_BF16=0", "-DSTOF_SM90_TMA=0", "-DSTOF_SM90_ROWMASK=1",
       "-DSTOF_MIN_BLOCKS=3", "-DSTOF_SM90_ORDER=1"},
      {"-DSTOF_HEAD_DIM=128", "-DSTOF_TILE_M=128", "-DSTOF_BF16=1", "-DSTOF_SM90_TMA=1", "-DSTOF_SM90_ROWMASK=1",
       "-DSTOF_SM90_SPLIT=2", ""},
      /* the query shift (sliding, longformer) as the engine compiles it: D 64 with TMA and the
       * launch order, D 128 with cp.async at three CTAs, split (the combine shifted too) */
      {"-DSTOF_HEAD_DIM=64", "-DSTOF_TILE_M=64", "-DSTOF_BF16=0", "-DSTOF_SM90_TMA=1", "-DSTOF_SM90_QREG=0",
       "-DSTOF_MIN_BLOCKS=4", "-DSTOF_SM90_ROWMASK=1", "-DSTOF_SM90_QSHIFT=32", "-DSTOF_SM90_ORDER=1"},
      {"-DSTOF_HEAD_DIM=128", "-DSTOF_TILE_M=64", "-DSTOF_BF16=1", "-DSTOF_SM90_TMA=0", "-DSTOF_SM90_ROWMASK=1",
       "-DSTOF_MIN_BLOCKS=3", "-DSTOF_SM90_QSHIFT=32", "-DSTOF_SM90_SPLIT=2"},
      /* the grouped launch order (ORDER 2) as the engine compiles it: causal and document at
       * tile 64 (TMA), and where asked for (order_group) the D 128 ping-pong at tile 128 and D 64
       * at tile 128 in 64-key steps */
      {"-DSTOF_HEAD_DIM=64", "-DSTOF_BF16=0", "-DSTOF_TILE_M=64", "-DSTOF_STAGES=2", "-DSTOF_SM90_PINGPONG=0",
       "-DSTOF_SM90_TMA=1", "-DSTOF_SM90_ROWMASK=1", "-DSTOF_SM90_QREG=0", "-DSTOF_MIN_BLOCKS=4",
       "-DSTOF_SM90_ORDER=2"},
      {"-DSTOF_HEAD_DIM=128", "-DSTOF_BF16=0", "-DSTOF_TILE_M=128", "-DSTOF_STAGES=3", "-DSTOF_SM90_PINGPONG=1",
       "-DSTOF_SM90_TMA=1", "-DSTOF_SM90_ROWMASK=1", "-DSTOF_SM90_ORDER=2"},
      {"-DSTOF_HEAD_DIM=64", "-DSTOF_BF16=0", "-DSTOF_TILE_M=128", "-DSTOF_STAGES=2", "-DSTOF_SM90_PINGPONG=0",
       "-DSTOF_SM90_TMA=1", "-DSTOF_SM90_QREG=0", "-DSTOF_MIN_BLOCKS=2", "-DSTOF_SM90_KEY64=1", "-DSTOF_SM90_ORDER=2"},
      /* the lazy rescale as the rule takes it (D 128, tile 64, cp.async, three CTAs, shifted or
       * split), and forced where the rule does not (the ping-pong, D 64 with TMA, in 64-key steps) */
      {"-DSTOF_HEAD_DIM=128", "-DSTOF_BF16=0", "-DSTOF_TILE_M=64", "-DSTOF_SM90_TMA=0", "-DSTOF_SM90_ROWMASK=1",
       "-DSTOF_MIN_BLOCKS=3", "-DSTOF_SM90_QSHIFT=32", "-DSTOF_SM90_ORDER=1", "-DSTOF_LAZY_RESCALE=1"},
      {"-DSTOF_HEAD_DIM=128", "-DSTOF_BF16=1", "-DSTOF_TILE_M=64", "-DSTOF_SM90_TMA=0", "-DSTOF_SM90_HALFSKIP=1",
       "-DSTOF_MIN_BLOCKS=3", "-DSTOF_SM90_SPLIT=2", "-DSTOF_LAZY_RESCALE=1"},
      {"-DSTOF_HEAD_DIM=128", "-DSTOF_BF16=0", "-DSTOF_TILE_M=128", "-DSTOF_STAGES=3", "-DSTOF_SM90_PINGPONG=1",
       "-DSTOF_SM90_TMA=1", "-DSTOF_LAZY_RESCALE=1"},
      {"-DSTOF_HEAD_DIM=64", "-DSTOF_BF16=1", "-DSTOF_TILE_M=64", "-DSTOF_SM90_TMA=1", "-DSTOF_SM90_QREG=0",
       "-DSTOF_MIN_BLOCKS=4", "-DSTOF_SM90_ROWMASK=1", "-DSTOF_LAZY_RESCALE=1"},
      {"-DSTOF_HEAD_DIM=64", "-DSTOF_BF16=0", "-DSTOF_TILE_M=128", "-DSTOF_STAGES=2", "-DSTOF_SM90_PINGPONG=0",
       "-DSTOF_SM90_TMA=1", "-DSTOF_SM90_QREG=0", "-DSTOF_MIN_BLOCKS=2", "-DSTOF_SM90_KEY64=1", "-DSTOF_LAZY_RESCALE=1"},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    void *cubin = NULL;
    size_t size = 0;
    int nopt = 0;
    while (nopt < 11 && cases[k][nopt] && cases[k][nopt][0]) nopt++;
    stof_status st = stof_cuda_compile_ex(ctx, src, "attention_block_sm90.cu", "sm_90a", nopt, cases[k], 1,
                                          hname, hsrc, &cubin, &size);
    if (st) fail_msg("%s %s %s %s %s %s: %s", cases[k][0], cases[k][1], cases[k][2], cases[k][3], cases[k][4],
                     cases[k][5], stof_ctx_message(ctx));
    assert_true(size > 4);
    assert_memory_equal(cubin, "\177ELF", 4);
    /* a chunk module holds the combine too */
    static const char combine[] = "stof_attn_split_combine_sm90";
    int has_combine = 0;
    for (size_t i = 0; i + sizeof combine - 1 <= size && !has_combine; i++)
      has_combine = !memcmp((const char *)cubin + i, combine, sizeof combine - 1);
    int split2 = 0;
    for (int i = 0; i < nopt; i++) split2 |= !strcmp(cases[k][i], "-DSTOF_SM90_SPLIT=2");
    assert_int_equal(has_combine, split2);
    stof_ctx_dealloc(ctx, cubin, size);
  }
  tu_ctx_free(ctx, &heap);
}

/* Tile 32 (the engine's tile for bigbird on Hopper) compiles with NVRTC, no GPU needed: the
 * portable block kernel at both head dims and element types, 2 warps (the selector's) and 1
 * (32 rows a warp, which the selector accepts), with a score modifier, with the launch order
 * (STOF_ORDER), for sm_90 and sm_80;
 * the Hopper kernel refuses it at compile time, naming why. */
static void tile_32_compiles_on_the_block_kernel_only(void **state) {
  (void)state;
  tu_heap heap;
  stof_ctx *ctx = tu_ctx_new(&heap);
  const char *hname[1] = {"attention_common.cuh"};
  const char *hsrc[1] = {stof_kernels_source("attention_common.cuh")};
  const char *src = stof_kernels_source("attention_block.cu");
  assert_non_null(src);
  static const char *const cases[][6] = {
      {"-DSTOF_HEAD_DIM=64", "-DSTOF_BF16=0", "-DSTOF_TILE_M=32", "-DSTOF_WARPS=2", "-DSTOF_STAGES=2", ""},
      {"-DSTOF_HEAD_DIM=128", "-DSTOF_BF16=1", "-DSTOF_TILE_M=32", "-DSTOF_WARPS=2", "-DSTOF_STAGES=2", ""},
      {"-DSTOF_HEAD_DIM=64", "-DSTOF_BF16=1", "-DSTOF_TILE_M=32", "-DSTOF_WARPS=1", "-DSTOF_STAGES=3", ""},
      {"-DSTOF_HEAD_DIM=128", "-DSTOF_BF16=0", "-DSTOF_TILE_M=32", "-DSTOF_WARPS=2", "-DSTOF_STAGES=2",
       "-DSTOF_SCORE_MOD=2"},
      /* the launch order from a table (BigBird's global rows first, then the others longest
       * first over groups of (b, h) pairs) */
      {"-DSTOF_HEAD_DIM=64", "-DSTOF_BF16=0", "-DSTOF_TILE_M=32", "-DSTOF_WARPS=2", "-DSTOF_STAGES=2",
       "-DSTOF_ORDER=1"},
      {"-DSTOF_HEAD_DIM=128", "-DSTOF_BF16=1", "-DSTOF_TILE_M=32", "-DSTOF_WARPS=2", "-DSTOF_STAGES=2",
       "-DSTOF_ORDER=2"},
      /* the lazy rescale (the rule's at D 128; forced at D 64, 32 rows a warp) */
      {"-DSTOF_HEAD_DIM=128", "-DSTOF_BF16=0", "-DSTOF_TILE_M=32", "-DSTOF_WARPS=2", "-DSTOF_STAGES=2",
       "-DSTOF_LAZY_RESCALE=1"},
      {"-DSTOF_HEAD_DIM=64", "-DSTOF_BF16=1", "-DSTOF_TILE_M=32", "-DSTOF_WARPS=1", "-DSTOF_STAGES=2",
       "-DSTOF_LAZY_RESCALE=1"},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
    for (int a = 0; a < 2; a++) {
      void *cubin = NULL;
      size_t size = 0;
      int nopt = cases[k][5][0] ? 6 : 5;
      stof_status st = stof_cuda_compile_ex(ctx, src, "attention_block.cu", a ? "sm_80" : "sm_90", nopt, cases[k], 1,
                                            hname, hsrc, &cubin, &size);
      if (st) fail_msg("%s %s %s %s: %s", cases[k][0], cases[k][1], cases[k][3], a ? "sm_80" : "sm_90",
                       stof_ctx_message(ctx));
      assert_true(size > 4);
      assert_memory_equal(cubin, "\177ELF", 4);
      stof_ctx_dealloc(ctx, cubin, size);
    }
  const char *sm90 = stof_kernels_source("attention_block_sm90.cu");
  const char *o90[] = {"-DSTOF_HEAD_DIM=64", "-DSTOF_TILE_M=32"};
  void *cubin = NULL;
  size_t size = 0;
  stof_status st = stof_cuda_compile_ex(ctx, sm90, "attention_block_sm90.cu", "sm_90a", 2, o90, 1, hname, hsrc,
                                        &cubin, &size);
  assert_int_not_equal(st, STOF_OK);
  assert_null(cubin);
  assert_non_null(strstr(stof_ctx_message(ctx), "the Hopper kernel takes STOF_TILE_M 64 or 128"));
  stof_ctx_clear_error(ctx);
  tu_ctx_free(ctx, &heap);
}

/* Tile 32 on Hopper (the fifteenth session's rule): from 72% of the non-empty 64-tiles with
 * an empty key half at S >= 2048, the mma.sync kernel with 2 warps; bigbird has 76-86% at
 * S 2048-8192 and 67% at 1024, sliding 66%, longformer 58-60%. Never on another GPU, nor where
 * warps, an option of the Hopper kernel or the portable kernel are asked for; asked for, tile
 * 32 is block-wise (the row kernel does not take it). */
static void select_picks_tile_32_for_32_wide_blocks(void **state) {
  (void)state;
  tu_heap heap;
  stof_ctx *ctx = tu_ctx_new(&heap);
  static const struct {
    const char *mask;
    int64_t S, D;
    int tile; /* the selector's tile on an H100 */
  } cases[] = {
      {"bigbird", 2048, 64, 32},   {"bigbird", 4096, 64, 32},   {"bigbird", 8192, 128, 32},
      {"bigbird", 1024, 64, 64},   {"sliding", 4096, 64, 64},   {"longformer", 4096, 64, 64},
      {"document", 4096, 64, 64},  {"causal_sliding", 4096, 64, 64},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    stof_mask *m;
    TU_OK(ctx, stof_mask_suite(ctx, cases[i].mask, cases[i].S, &m));
    stof_mask_format *f = format_of(ctx, m, cases[i].S, cases[i].S);
    double nonempty = (double)(f->ntile_full + f->ntile_partial), half = f->ntile_halfempty / nonempty;
    stof_attn_choice c;
    TU_OK(ctx, stof_attention_select(ctx, f, 1, 8, cases[i].D, &h100, NULL, &c));
    if (c.tile != cases[i].tile || (c.tile == 32) != (half >= 0.72))
      fail_msg("%s S %lld D %lld (%.0f%% half empty): tile %d, want %d: %s", cases[i].mask, (long long)cases[i].S,
               (long long)cases[i].D, 100 * half, c.tile, cases[i].tile, c.why);
    if (c.tile == 32) {
      assert_true(c.kernel == STOF_ATTN_BLOCK && !c.hopper && !c.tma && !c.rowmask && !c.halfskip);
      assert_int_equal(c.warps, 2);
      assert_int_equal(c.stages, 2);
      expect_in_why(&c, "tile 32 (Hopper: 32 at >= 72% of the non-empty 64-tiles with an empty key half");
      expect_in_why(&c, "mma.sync");
      /* an A100 keeps tile 64 (the rule is the H100's measurement); so do the portable
       * kernel, forced warps, and the options only the Hopper kernel has */
      TU_OK(ctx, stof_attention_select(ctx, f, 1, 8, cases[i].D, &a100, NULL, &c));
      assert_int_equal(c.tile, 64);
      static const stof_attn_opts keep64[] = {{.portable = 1}, {.warps = 4}, {.warps = 2}, {.halfskip = 1},
                                              {.rowmask = 1}, {.tma = 1}, {.split = 8}};
      for (size_t k = 0; k < sizeof keep64 / sizeof keep64[0]; k++) {
        TU_OK(ctx, stof_attention_select(ctx, f, 1, 8, cases[i].D, &h100, &keep64[k], &c));
        assert_int_equal(c.tile, 64);
      }
    }
    stof_mask_format_free(f);
    stof_mask_free(m);
  }
  /* asked for: block-wise, 2 warps (or 1: 32 rows a warp), on any GPU, even where the
   * selector would run row-wise (one document of 40 at S = 4096: 0.014% of the 16-tiles);
   * the row kernel refuses */
  stof_mask *m;
  TU_OK(ctx, stof_mask_document(ctx, 1, (const int64_t[]){40}, &m));
  stof_mask_format *f;
  TU_OK(ctx, stof_mask_format_build(ctx, m, 1, 1, 4096, 4096, 32, &f));
  stof_attn_choice c;
  TU_OK(ctx, stof_attention_select(ctx, f, 1, 8, 64, &a100, &(stof_attn_opts){.tile = 32}, &c));
  assert_true(c.kernel == STOF_ATTN_BLOCK && c.tile == 32 && c.warps == 2 && !c.hopper);
  expect_in_why(&c, "block-wise: tile 32 asked for (the row-wise kernel takes 64 or 128");
  TU_OK(ctx, stof_attention_select(ctx, f, 1, 8, 128, &h100, &(stof_attn_opts){.tile = 32, .warps = 1}, &c));
  assert_true(c.tile == 32 && c.warps == 1 && !c.hopper);
  TU_ERR(ctx, stof_attention_select(ctx, f, 1, 8, 64, &h100, &(stof_attn_opts){.tile = 32, .kernel = STOF_ATTN_ROW}, &c),
         STOF_ERR_UNSUPPORTED, "tile 32 is the block-wise kernel's (row-wise asked for)");
  TU_ERR(ctx, stof_attention_select(ctx, f, 1, 8, 64, &h100, &(stof_attn_opts){.tile = 32, .warps = 4}, &c),
         STOF_ERR_ARG, "4 warps for tile 32");
  TU_ERR(ctx, stof_attention_select(ctx, f, 1, 8, 64, &h100, &(stof_attn_opts){.tile = 32, .halfskip = 1}, &c),
         STOF_ERR_UNSUPPORTED, "halfskip asked for, but it needs the Hopper kernel at tile 64");
  stof_mask_format_free(f);
  stof_mask_free(m);
  tu_ctx_free(ctx, &heap);
}

static void select_rejects_bad_tiles_and_kernels(void **state) {
  (void)state;
  tu_heap heap;
  stof_ctx *ctx = tu_ctx_new(&heap);
  stof_mask *m;
  TU_OK(ctx, stof_mask_causal(ctx, &m));
  stof_mask_format *f = format_of(ctx, m, 300, 300);
  stof_attn_choice c;
  TU_ERR(ctx, stof_attention_select(ctx, f, 1, 1, 64, NULL, &(stof_attn_opts){.tile = 96}, &c),
         STOF_ERR_ARG, "tile 96");
  TU_ERR(ctx, stof_attention_select(ctx, f, 1, 1, 64, NULL, &(stof_attn_opts){.tile = 48}, &c),
         STOF_ERR_ARG, "tile 48 (32, 64 or 128)");
  TU_ERR(ctx, stof_attention_select(ctx, f, 1, 1, 64, NULL, &(stof_attn_opts){.tile = 16}, &c),
         STOF_ERR_ARG, "tile 16");
  TU_ERR(ctx,
         stof_attention_select(ctx, f, 1, 1, 64, NULL,
                               &(stof_attn_opts){.kernel = STOF_ATTN_BLOCK, .tile = -64}, &c),
         STOF_ERR_ARG, "tile -64");
  TU_ERR(ctx,
         stof_attention_select(ctx, f, 1, 1, 64, NULL,
                               &(stof_attn_opts){.kernel = (stof_attn_kernel)7}, &c),
         STOF_ERR_ARG, "kernel");
  /* the kernel names */
  assert_string_equal(stof_attn_kernel_name(STOF_ATTN_AUTO), "auto");
  assert_string_equal(stof_attn_kernel_name(STOF_ATTN_BLOCK), "block");
  assert_string_equal(stof_attn_kernel_name(STOF_ATTN_ROW), "row");
  assert_string_equal(stof_attn_kernel_name(STOF_ATTN_KERNEL_COUNT), "?");
  stof_mask_format_free(f);
  stof_mask_free(m);
  tu_ctx_free(ctx, &heap);
}

/* ---------------------------------------------------------------- bad arguments */

static void assert_all_nan(const stof_tensor *t) {
  for (int64_t i = 0; i < stof_tensor_numel(t); i++)
    if (!isnan(stof_tensor_load(t, i))) fail_msg("a failed call wrote out[%lld]", (long long)i);
}

static void cpu_attention_rejects_bad_arguments(void **state) {
  (void)state;
  tu_heap heap;
  stof_ctx *ctx = tu_ctx_new(&heap);
  dims d = {2, 3, 3, 20, 30, 8};
  uint64_t seed = 3;
  stof_mask *m;
  TU_OK(ctx, stof_mask_causal(ctx, &m));
  stof_mask_format *f = NULL, *other = NULL;
  TU_OK(ctx, stof_mask_format_build(ctx, m, d.B, d.H, d.Sq, d.Sk, 16, &f));
  stof_tensor *q = uniform4(ctx, STOF_DTYPE_F32, d.B, d.H, d.Sq, d.D, &seed, -1, 1);
  stof_tensor *k = uniform4(ctx, STOF_DTYPE_F32, d.B, d.Hkv, d.Sk, d.D, &seed, -1, 1);
  stof_tensor *v = uniform4(ctx, STOF_DTYPE_F32, d.B, d.Hkv, d.Sk, d.D, &seed, -1, 1);
  stof_tensor *out = NULL;
  TU_OK(ctx, stof_tensor_new(ctx, STOF_DTYPE_F32, 4, TU_SHAPE(d.B, d.H, d.Sq, d.D), STOF_DEVICE_CPU,
                             &out));
  stof_tensor_fill(out, NAN);

  /* q with 3 dimensions */
  stof_tensor *q3 =
      tu_tensor_uniform(ctx, STOF_DTYPE_F32, 3, TU_SHAPE(d.B * d.H, d.Sq, d.D), &seed, -1, 1);
  TU_ERR(ctx, stof_attention_cpu(ctx, q3, k, v, f, 0, out), STOF_ERR_SHAPE, "q has 3 dimensions");
  /* k with another head dim */
  stof_tensor *k16 = uniform4(ctx, STOF_DTYPE_F32, d.B, d.Hkv, d.Sk, 16, &seed, -1, 1);
  TU_ERR(ctx, stof_attention_cpu(ctx, q, k16, v, f, 0, out), STOF_ERR_SHAPE, "head dim");
  /* k with another batch */
  stof_tensor *k1 = uniform4(ctx, STOF_DTYPE_F32, 1, d.Hkv, d.Sk, d.D, &seed, -1, 1);
  TU_ERR(ctx, stof_attention_cpu(ctx, q, k1, v, f, 0, out), STOF_ERR_SHAPE, "batch");
  /* v of another shape than k */
  stof_tensor *v29 = uniform4(ctx, STOF_DTYPE_F32, d.B, d.Hkv, d.Sk - 1, d.D, &seed, -1, 1);
  TU_ERR(ctx, stof_attention_cpu(ctx, q, k, v29, f, 0, out), STOF_ERR_SHAPE,
         "v must have k's shape");
  /* out of another shape than q */
  stof_tensor *o2 = NULL;
  TU_OK(ctx, stof_tensor_new(ctx, STOF_DTYPE_F32, 4, TU_SHAPE(d.B, d.H, d.Sq + 1, d.D),
                             STOF_DEVICE_CPU, &o2));
  TU_ERR(ctx, stof_attention_cpu(ctx, q, k, v, f, 0, o2), STOF_ERR_SHAPE,
         "out must have q's shape");
  /* H = 3 query heads over 2 kv heads */
  stof_tensor *k2 = uniform4(ctx, STOF_DTYPE_F32, d.B, 2, d.Sk, d.D, &seed, -1, 1);
  stof_tensor *v2 = uniform4(ctx, STOF_DTYPE_F32, d.B, 2, d.Sk, d.D, &seed, -1, 1);
  TU_ERR(ctx, stof_attention_cpu(ctx, q, k2, v2, f, 0, out), STOF_ERR_SHAPE,
         "3 query heads is not a multiple of 2 key/value heads");
  /* no kv head at all */
  stof_tensor *k0 = NULL, *v0 = NULL;
  TU_OK(ctx,
        stof_tensor_new(ctx, STOF_DTYPE_F32, 4, TU_SHAPE(d.B, 0, d.Sk, d.D), STOF_DEVICE_CPU, &k0));
  TU_OK(ctx,
        stof_tensor_new(ctx, STOF_DTYPE_F32, 4, TU_SHAPE(d.B, 0, d.Sk, d.D), STOF_DEVICE_CPU, &v0));
  TU_ERR(ctx, stof_attention_cpu(ctx, q, k0, v0, f, 0, out), STOF_ERR_SHAPE, "not a multiple");
  /* formats built for other dims: Sq, Sk, H, B */
  static const int64_t other_dims[][4] = {
      {2, 3, 21, 30}, {2, 3, 20, 29}, {2, 1, 20, 30}, {1, 3, 20, 30}};
  for (int i = 0; i < 4; i++) {
    TU_OK(ctx, stof_mask_format_build(ctx, m, other_dims[i][0], other_dims[i][1], other_dims[i][2],
                                      other_dims[i][3], 16, &other));
    TU_ERR(ctx, stof_attention_cpu(ctx, q, k, v, other, 0, out), STOF_ERR_SHAPE,
           "built for other dims");
    stof_mask_format_free(other);
  }
  TU_ERR(ctx, stof_attention_cpu(ctx, q, k, v, NULL, 0, out), STOF_ERR_SHAPE, "format");
  /* missing tensors */
  TU_ERR(ctx, stof_attention_cpu(ctx, NULL, k, v, f, 0, out), STOF_ERR_ARG, "missing tensor q");
  TU_ERR(ctx, stof_attention_cpu(ctx, q, k, v, f, 0, NULL), STOF_ERR_ARG, "missing tensor out");
  /* a GPU tensor: the CPU path wants CPU ones (strided views are fine: see
   * cpu_attention_honours_strided_views) */
  stof_tensor *qs = NULL, *vg = NULL;
  TU_OK(ctx, stof_tensor_wrap(ctx, STOF_DTYPE_F32, 4, TU_SHAPE(d.B, d.Hkv, d.Sk, d.D), NULL,
                              (void *)(uintptr_t)0x1000, STOF_DEVICE_CUDA, &vg));
  TU_ERR(ctx, stof_attention_cpu(ctx, q, k, vg, f, 0, out), STOF_ERR_ARG, "CPU");
  /* none of the failures wrote anything */
  assert_all_nan(out);
  /* and the same call with good arguments works */
  TU_OK(ctx, stof_attention_cpu(ctx, q, k, v, f, 0, out));
  for (int64_t i = 0; i < stof_tensor_numel(out); i++)
    assert_false(isnan(stof_tensor_load(out, i)));

  stof_tensor *ts[] = {q3, k16, k1, v29, o2, k2, v2, k0, v0, qs, vg, q, k, v, out};
  for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) stof_tensor_free(ts[i]);
  stof_mask_format_free(f);
  stof_mask_free(m);
  tu_ctx_free(ctx, &heap);
}

/* Q, K, V read from a fused [B, S, H + 2 Hkv, D] buffer and O written into [B, S, H + 1, D]
 * (a gap head per row) give exactly the contiguous result, and the gaps stay NaN. */
static void cpu_attention_honours_strided_views(void **state) {
  (void)state;
  tu_heap heap;
  stof_ctx *ctx = tu_ctx_new(&heap);
  const int64_t B = 2, H = 4, Hkv = 2, S = 77, D = 16, NH = H + 2 * Hkv;
  stof_mask *m = NULL;
  TU_OK(ctx, stof_mask_suite(ctx, "bigbird", S, &m));
  stof_mask_format *f = NULL;
  TU_OK(ctx, stof_mask_format_build(ctx, m, B, H, S, S, 64, &f));
  stof_tensor *q = NULL, *k = NULL, *v = NULL, *want = NULL, *fused = NULL, *obuf = NULL;
  TU_OK(ctx, stof_tensor_rand(ctx, STOF_DTYPE_F32, 4, TU_SHAPE(B, H, S, D), 11, &q));
  TU_OK(ctx, stof_tensor_rand(ctx, STOF_DTYPE_F32, 4, TU_SHAPE(B, Hkv, S, D), 12, &k));
  TU_OK(ctx, stof_tensor_rand(ctx, STOF_DTYPE_F32, 4, TU_SHAPE(B, Hkv, S, D), 13, &v));
  TU_OK(ctx, stof_tensor_new(ctx, STOF_DTYPE_F64, 4, TU_SHAPE(B, H, S, D), STOF_DEVICE_CPU, &want));
  TU_OK(ctx, stof_attention_cpu(ctx, q, k, v, f, 0, want));

  TU_OK(ctx, stof_tensor_new(ctx, STOF_DTYPE_F32, 4, TU_SHAPE(B, S, NH, D), STOF_DEVICE_CPU, &fused));
  TU_OK(ctx, stof_tensor_new(ctx, STOF_DTYPE_F64, 4, TU_SHAPE(B, S, H + 1, D), STOF_DEVICE_CPU, &obuf));
  stof_tensor_fill(fused, NAN);
  stof_tensor_fill(obuf, NAN);
  float *fb = fused->data;
  const stof_tensor *src[3] = {q, k, v};
  int64_t first[3] = {0, H, H + Hkv}, nh[3] = {H, Hkv, Hkv};
  stof_tensor *view[4];
  for (int t = 0; t < 3; t++) {
    for (int64_t b = 0; b < B; b++)
      for (int64_t h = 0; h < nh[t]; h++)
        for (int64_t i = 0; i < S; i++)
          for (int64_t x = 0; x < D; x++)
            fb[((b * S + i) * NH + first[t] + h) * D + x] =
                (float)stof_tensor_load(src[t], ((b * nh[t] + h) * S + i) * D + x);
    TU_OK(ctx, stof_tensor_wrap(ctx, STOF_DTYPE_F32, 4, TU_SHAPE(B, nh[t], S, D), TU_SHAPE(S * NH * D, D, NH * D, 1),
                                fb + first[t] * D, STOF_DEVICE_CPU, &view[t]));
  }
  TU_OK(ctx, stof_tensor_wrap(ctx, STOF_DTYPE_F64, 4, TU_SHAPE(B, H, S, D), TU_SHAPE(S * (H + 1) * D, D, (H + 1) * D, 1),
                              obuf->data, STOF_DEVICE_CPU, &view[3]));
  TU_OK(ctx, stof_attention_cpu(ctx, view[0], view[1], view[2], f, 0, view[3]));
  const double *ob = obuf->data, *wb = want->data;
  for (int64_t b = 0; b < B; b++)
    for (int64_t i = 0; i < S; i++)
      for (int64_t h = 0; h <= H; h++)
        for (int64_t x = 0; x < D; x++) {
          double g = ob[((b * S + i) * (H + 1) + h) * D + x];
          if (h == H) {
            if (!isnan(g)) fail_msg("the gap at (b %lld, s %lld, d %lld) was written", (long long)b, (long long)i, (long long)x);
          } else if (g != wb[((b * H + h) * S + i) * D + x]) {
            fail_msg("(b %lld, h %lld, i %lld, d %lld): %g, contiguous gives %g", (long long)b, (long long)h,
                     (long long)i, (long long)x, g, wb[((b * H + h) * S + i) * D + x]);
          }
        }
  stof_tensor *ts[] = {q, k, v, want, fused, obuf, view[0], view[1], view[2], view[3]};
  for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) stof_tensor_free(ts[i]);
  stof_mask_format_free(f);
  stof_mask_free(m);
  tu_ctx_free(ctx, &heap);
}

static void cpu_attention_out_of_memory_is_clean(void **state) {
  (void)state;
  tu_heap heap;
  stof_ctx *ctx = tu_ctx_new(&heap);
  dims d = {1, 2, 1, 33, 40, 4};
  uint64_t seed = 5;
  stof_mask *m;
  TU_OK(ctx, stof_mask_suite(ctx, "longformer", 40, &m));
  stof_mask_format *f = NULL;
  TU_OK(ctx, stof_mask_format_build(ctx, m, d.B, d.H, d.Sq, d.Sk, 16, &f));
  stof_tensor *q = uniform4(ctx, STOF_DTYPE_F32, d.B, d.H, d.Sq, d.D, &seed, -1, 1);
  stof_tensor *k = uniform4(ctx, STOF_DTYPE_F32, d.B, d.Hkv, d.Sk, d.D, &seed, -1, 1);
  stof_tensor *v = uniform4(ctx, STOF_DTYPE_F32, d.B, d.Hkv, d.Sk, d.D, &seed, -1, 1);
  stof_tensor *out = NULL;
  TU_OK(ctx, stof_tensor_new(ctx, STOF_DTYPE_F32, 4, TU_SHAPE(d.B, d.H, d.Sq, d.D), STOF_DEVICE_CPU,
                             &out));
  size_t before = stof_ctx_bytes_in_use(ctx);
  int done = 0;
  for (long n = 1; n < 100 && !done; n++) {
    heap.fail_at = heap.nalloc + n;
    heap.failed = 0;
    stof_status st = stof_attention_cpu(ctx, q, k, v, f, 0, out);
    heap.fail_at = 0;
    if (heap.failed) {
      if (st != STOF_ERR_NOMEM)
        fail_msg("allocation %ld failed, status %s", n, stof_status_name(st));
      assert_int_equal(stof_ctx_status(ctx), STOF_ERR_NOMEM);
      stof_ctx_clear_error(ctx);
    } else {
      TU_OK(ctx, st);
      done = 1;
    }
    assert_int_equal(stof_ctx_bytes_in_use(ctx), before);
  }
  assert_true(done);
  stof_tensor_free(q);
  stof_tensor_free(k);
  stof_tensor_free(v);
  stof_tensor_free(out);
  stof_mask_format_free(f);
  stof_mask_free(m);
  tu_ctx_free(ctx, &heap);
}

/* Keeps (i, j) unless i + j is a multiple of 3: an fn mask (the slow path). */
static int pred_thirds(void *ud, int64_t b, int64_t h, int64_t i, int64_t j) {
  (void)ud, (void)b, (void)h;
  return (i + j) % 3 != 0;
}

/* fn masks, the format, the selector, the mask's SVG and attention on the CPU with the Nth
 * allocation failing, for every N: NOMEM each time, nothing left once freed. */
static void masks_selector_and_svg_out_of_memory_are_clean(void **state) {
  (void)state;
  char dir[] = "/tmp/stof-attn-nomem-XXXXXX", path[128];
  assert_non_null(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/mask.svg", dir);
  int done = 0, nfail = 0;
  for (long n = 1; !done && n < 20000; n++) {
    tu_heap heap;
    stof_ctx *ctx = tu_ctx_new(&heap);
    uint64_t seed = 9;
    stof_tensor *q = uniform4(ctx, STOF_DTYPE_F32, 1, 2, 40, 8, &seed, -1, 1), *out = NULL;
    heap.fail_at = heap.nalloc + n;
    stof_mask *c = NULL, *fm = NULL, *d = NULL;
    stof_mask_format *f = NULL;
    stof_attn_choice ch;
    stof_status st = stof_mask_causal(ctx, &c);
    if (!st) st = stof_mask_fn(ctx, pred_thirds, NULL, "thirds", 0, 0, &fm);
    if (!st) st = stof_mask_difference(c, fm, &d);
    if (!st) st = stof_mask_format_build(ctx, d, 1, 2, 40, 40, 16, &f);
    if (!st) st = stof_attention_select(ctx, f, 1, 2, 64, NULL, NULL, &ch);
    if (!st) st = stof_mask_format_svg(f, 0, 1, path);
    if (!st) st = stof_tensor_new(ctx, STOF_DTYPE_F32, 4, TU_SHAPE(1, 2, 40, 8), STOF_DEVICE_CPU, &out);
    if (!st) st = stof_attention_cpu(ctx, q, q, q, f, 0, out);
    heap.fail_at = 0;
    if (heap.failed) {
      if (st != STOF_ERR_NOMEM)
        fail_msg("allocation %ld failed: %s (%s)", n, stof_status_name(st), stof_ctx_message(ctx));
      assert_int_equal(stof_ctx_status(ctx), STOF_ERR_NOMEM);
      stof_ctx_clear_error(ctx);
      nfail++;
    } else {
      TU_OK(ctx, st);
      done = 1;
    }
    stof_tensor_free(out);
    stof_tensor_free(q);
    stof_mask_format_free(f);
    stof_mask_free(d);
    stof_mask_free(fm);
    stof_mask_free(c);
    tu_ctx_free(ctx, &heap);
  }
  assert_true(done && nfail > 3);
  unlink(path);
  rmdir(dir);
}

/* One rule for a mask that keeps nothing (DESIGN.md: rows with no valid key give zeros):
 * the CPU implementation and the runtime's intrinsic give zeros everywhere. */
static void empty_mask_gives_zeros(void **state) {
  (void)state;
  tu_heap heap;
  stof_ctx *ctx = tu_ctx_new(&heap);
  uint64_t seed = 4;
  stof_mask *c, *none;
  TU_OK(ctx, stof_mask_causal(ctx, &c));
  TU_OK(ctx, stof_mask_difference(c, c, &none));
  stof_mask_format *f;
  TU_OK(ctx, stof_mask_format_build(ctx, none, 1, 2, 24, 24, 64, &f));
  assert_int_equal(f->nvalid, 0);
  stof_tensor *q = uniform4(ctx, STOF_DTYPE_F32, 1, 2, 24, 8, &seed, -1, 1), *out;
  TU_OK(ctx, stof_tensor_new(ctx, STOF_DTYPE_F32, 4, TU_SHAPE(1, 2, 24, 8), STOF_DEVICE_CPU, &out));
  TU_OK(ctx, stof_attention_cpu(ctx, q, q, q, f, 0, out));
  for (int64_t i = 0; i < stof_tensor_numel(out); i++) assert_true(stof_tensor_load(out, i) == 0.0);
  /* the selector answers for it too (row-wise: no tile is non-empty) */
  stof_attn_choice ch;
  TU_OK(ctx, stof_attention_select(ctx, f, 1, 2, 64, NULL, NULL, &ch));
  /* the intrinsic, through the interpreter */
  stof_graph *g;
  TU_OK(ctx, stof_graph_new(ctx, &g));
  const stof_op *Q = tu_ph(g, "Q", STOF_DTYPE_F32, 4, TU_SHAPE(1, 2, 24, 8)), *O;
  TU_OK(ctx, stof_attention_op(g, Q, Q, Q, none, 0, &O));
  stof_tensor *got = NULL;
  const stof_op *const ins[1] = {Q};
  const stof_tensor *const vals[1] = {q};
  TU_OK(ctx, stof_interp_eval(g, 1, &O, 1, ins, vals, &got));
  for (int64_t i = 0; i < stof_tensor_numel(got); i++) assert_true(stof_tensor_load(got, i) == 0.0);
  stof_tensor_free(got);
  stof_graph_free(g);
  stof_tensor_free(out);
  stof_tensor_free(q);
  stof_mask_format_free(f);
  stof_mask_free(none);
  stof_mask_free(c);
  tu_ctx_free(ctx, &heap);
}

/* The selector refuses the head dims the GPU plans refuse, with the plans' message (stof
 * explain --dim 96 said block-wise). */
static void selector_refuses_unsupported_head_dims(void **state) {
  (void)state;
  tu_heap heap;
  stof_ctx *ctx = tu_ctx_new(&heap);
  stof_mask *m;
  TU_OK(ctx, stof_mask_causal(ctx, &m));
  stof_mask_format *f;
  TU_OK(ctx, stof_mask_format_build(ctx, m, 1, 1, 128, 128, 64, &f));
  stof_attn_choice c;
  static const stof_cuda_props h100 = {.name = "H100", .cc_major = 9, .cc_minor = 0, .sm_count = 132,
                                       .smem_per_block_optin = 232448};
  TU_ERR(ctx, stof_attention_select(ctx, f, 1, 1, 96, NULL, NULL, &c), STOF_ERR_UNSUPPORTED,
         "attention: head dim 96 is not supported (64 or 128)");
  TU_ERR(ctx, stof_attention_select(ctx, f, 1, 1, 32, &h100, NULL, &c), STOF_ERR_UNSUPPORTED,
         "attention: head dim 32 is not supported (64 or 128)");
  TU_OK(ctx, stof_attention_select(ctx, f, 1, 1, 128, &h100, NULL, &c));
  stof_mask_format_free(f);
  stof_mask_free(m);
  tu_ctx_free(ctx, &heap);
}

/* ---------------------------------------------------------------- the GPU engine */

static void engine_needs_a_gpu(void **state) {
  (void)state;
  tu_heap heap;
  stof_ctx *ctx = tu_ctx_new(&heap);
  stof_attn_engine *e = (stof_attn_engine *)&heap; /* overwritten either way */
  stof_status st = stof_attn_engine_new(ctx, &e);
  if (st == STOF_OK) {
    /* a GPU is present: the engine must come up */
    assert_non_null(e);
    stof_attn_engine_free(e);
  } else {
    assert_null(e);
    TU_ERR(ctx, st, STOF_ERR_NO_DEVICE, "no GPU");
  }
  stof_attn_engine_free(NULL);
  /* the kernels are embedded whether or not there is a GPU */
  const char *block = stof_kernels_source("attention_block.cu");
  const char *row = stof_kernels_source("attention_row.cu");
  assert_non_null(block);
  assert_non_null(row);
  assert_non_null(stof_kernels_source("attention_common.cuh"));
  assert_non_null(strstr(block, "stof_attn_block_fwd"));
  assert_non_null(strstr(row, "stof_attn_row_fwd"));
  assert_null(stof_kernels_source("no_such_kernel.cu"));
  tu_ctx_free(ctx, &heap);
}

int run_attention_tests(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(cpu_attention_matches_reference_on_every_mask),
      cmocka_unit_test(cpu_attention_mixes_dtypes_heads_and_scales),
      cmocka_unit_test(cpu_attention_matches_interpreter),
      cmocka_unit_test(select_follows_the_papers_rule),
      cmocka_unit_test(select_respects_forced_kernel_tile_and_pipeline),
      cmocka_unit_test(select_picks_the_tile_per_kernel_path),
      cmocka_unit_test(select_picks_the_partial_tile_masking),
      cmocka_unit_test(select_split_marks_formats_without_partial_tiles),
      cmocka_unit_test(select_picks_key64_for_dense_and_causal),
      cmocka_unit_test(select_split_orders_long_rows_first),
      cmocka_unit_test(select_lazy_rescale_rule),
      cmocka_unit_test(select_three_ctas_at_d128_tile64),
      cmocka_unit_test(select_split_shifts_window_masks),
      cmocka_unit_test(variant_options_agree_with_the_selector),
      cmocka_unit_test(select_picks_tile_32_for_32_wide_blocks),
      cmocka_unit_test(tile_32_compiles_on_the_block_kernel_only),
      cmocka_unit_test(select_rejects_bad_tiles_and_kernels),
      cmocka_unit_test(select_takes_tma_only_on_the_hopper_kernel),
      cmocka_unit_test(hopper_kernel_compiles_for_sm90a_with_and_without_tma),
      cmocka_unit_test(cpu_attention_rejects_bad_arguments),
      cmocka_unit_test(cpu_attention_honours_strided_views),
      cmocka_unit_test(cpu_attention_out_of_memory_is_clean),
      cmocka_unit_test(masks_selector_and_svg_out_of_memory_are_clean),
      cmocka_unit_test(empty_mask_gives_zeros),
      cmocka_unit_test(selector_refuses_unsupported_head_dims),
      cmocka_unit_test(engine_needs_a_gpu),
  };
  return cmocka_run_group_tests_name("attention", tests, NULL, NULL);
}
