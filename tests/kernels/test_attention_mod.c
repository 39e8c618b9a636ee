/*
 * Score modifiers of the attention intrinsic without a GPU: the T5 bucket function against
 * values derived by hand from Hugging Face's formula, the standard ALiBi slopes, and
 * stof_attention_cpu_mod against a direct computation written here (stof_mask_eval element
 * by element, the modifier from its formula, masked softmax in double) on every suite mask
 * x every modifier, odd lengths, Sq != Sk, grouped-query heads, float64 and float32; the
 * interpreter on a graph with the bias table as an input; the GPU refusal; bad arguments.
 * Inputs are random and never zero; outputs are poisoned with NaN before every call.
 */
#include "helpers.h"
#include "../core/testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- T5 buckets, ALiBi slopes */

/*
 * By hand from the formula (relative_position = key - query; bidirectional: buckets halved,
 * + half for positive offsets, n = |rel|; else n = max(-rel, 0); max_exact = buckets / 2;
 * n >= max_exact: max_exact + floor(log(n / max_exact) / log(max_distance / max_exact) *
 * (buckets - max_exact)), at most buckets - 1):
 *   32 buckets, 128, bidirectional (16 a side, max_exact 8, log(16) = 2.7726):
 *     0 -> 0; -1 -> 1; 1 -> 17; -7 -> 7; 7 -> 23; -8 -> 8 + 0 = 8; 8 -> 24;
 *     -12 -> 8 + floor(0.4055 / 2.7726 * 8 = 1.17) = 9; -16 -> 8 + floor(0.25 * 8 = 2) = 10;
 *     -32 -> 8 + 4 = 12; 32 -> 28; -100 -> 8 + floor(2.5257 / 2.7726 * 8 = 7.29) = 15;
 *     -200 -> 8 + 9 = 17, clamped to 15; 200 -> 31
 *   32 buckets, 128, unidirectional (max_exact 16, log(8) = 2.0794):
 *     5 -> 0 (a future key); -1 -> 1; -15 -> 15; -16 -> 16; -20 -> 16 + floor(0.2231 /
 *     2.0794 * 16 = 1.72) = 17; -64 -> 16 + floor(1.3863 / 2.0794 * 16 = 10.67) = 26;
 *     -127 -> 16 + floor(15.94) = 31; -500 -> 31 (clamped)
 *   8 buckets, 20, bidirectional (4 a side, max_exact 2, log(10) = 2.3026):
 *     -1 -> 1; 1 -> 5; -2 -> 2; -6 -> 2 + floor(1.0986 / 2.3026 * 2 = 0.95) = 2;
 *     -7 -> 2 + floor(1.2528 / 2.3026 * 2 = 1.09) = 3; 7 -> 7; -19 -> 3; -40 -> 3
 *   8 buckets, 20, unidirectional (max_exact 4, log(5) = 1.6094):
 *     3 -> 0; -3 -> 3; -4 -> 4; -9 -> 4 + floor(0.8109 / 1.6094 * 4 = 2.02) = 6; -19 -> 7
 */
static void t5_bucket_matches_hand_derived_values(void **state) {
  (void)state;
  static const struct {
    int bidir, nb, maxd;
    int64_t rel, want;
  } cases[] = {
      {1, 32, 128, 0, 0},     {1, 32, 128, -1, 1},    {1, 32, 128, 1, 17},    {1, 32, 128, -7, 7},
      {1, 32, 128, 7, 23},    {1, 32, 128, -8, 8},    {1, 32, 128, 8, 24},    {1, 32, 128, -12, 9},
      {1, 32, 128, -16, 10},  {1, 32, 128, -32, 12},  {1, 32, 128, 32, 28},   {1, 32, 128, -100, 15},
      {1, 32, 128, -200, 15}, {1, 32, 128, 200, 31},  {0, 32, 128, 5, 0},     {0, 32, 128, -1, 1},
      {0, 32, 128, -15, 15},  {0, 32, 128, -16, 16},  {0, 32, 128, -20, 17},  {0, 32, 128, -64, 26},
      {0, 32, 128, -127, 31}, {0, 32, 128, -500, 31}, {1, 8, 20, -1, 1},      {1, 8, 20, 1, 5},
      {1, 8, 20, -2, 2},      {1, 8, 20, -6, 2},      {1, 8, 20, -7, 3},      {1, 8, 20, 7, 7},
      {1, 8, 20, -19, 3},     {1, 8, 20, -40, 3},     {0, 8, 20, 3, 0},       {0, 8, 20, -3, 3},
      {0, 8, 20, -4, 4},      {0, 8, 20, -9, 6},      {0, 8, 20, -19, 7},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int64_t got = stof_attn_t5_bucket(cases[i].rel, cases[i].bidir, cases[i].nb, cases[i].maxd);
    if (got != cases[i].want)
      fail_msg("bucket(%lld, %s, %d, %d) = %lld, want %lld", (long long)cases[i].rel,
               cases[i].bidir ? "bidirectional" : "unidirectional", cases[i].nb, cases[i].maxd, (long long)got,
               (long long)cases[i].want);
  }
  /* monotone in |rel| on each side, within range */
  for (int bidir = 0; bidir < 2; bidir++)
    for (int64_t r = 1; r < 300; r++) {
      int64_t a = stof_attn_t5_bucket(-r, bidir, 32, 128), b = stof_attn_t5_bucket(-(r + 1), bidir, 32, 128);
      assert_true(a >= 0 && b >= a && b < (bidir ? 16 : 32));
    }
  /* parameters out of range */
  assert_int_equal(stof_attn_t5_bucket(-3, 1, 2, 20), -1);
  assert_int_equal(stof_attn_t5_bucket(-3, 0, 8, 4), -1);
}

static void alibi_slopes_are_the_standard_ones(void **state) {
  (void)state;
  for (int h = 0; h < 8; h++) assert_true(stof_attn_alibi_slope(8, h) == pow(2.0, -(h + 1)));
  /* 12 heads: the 8 of 8 heads, then 16 heads' slopes 1, 3, 5, 7 (2^-0.5, 2^-1.5, ...) */
  for (int h = 0; h < 8; h++) assert_true(stof_attn_alibi_slope(12, h) == pow(2.0, -(h + 1)));
  for (int h = 8; h < 12; h++) assert_true(fabs(stof_attn_alibi_slope(12, h) - pow(2.0, -0.5 - (h - 8))) < 1e-15);
  assert_true(stof_attn_alibi_slope(1, 0) == 1.0 / 256);
  assert_true(stof_attn_alibi_slope(3, 2) == pow(2.0, -2));
  assert_true(stof_attn_alibi_slope(4, 4) == 0);
  assert_string_equal(stof_attn_mod_name(STOF_ATTN_MOD_T5_BIAS), "t5_bias");
  assert_string_equal(stof_attn_mod_name(STOF_ATTN_MOD_ALIBI), "alibi");
  assert_string_equal(stof_attn_mod_name((stof_attn_mod_kind)9), "?");
}

/* ---------------------------------------------------------------- the direct computation */

typedef struct dims {
  int64_t B, H, Hkv, Sq, Sk, D;
} dims;

/* The bucket, written again from the formula (float32 logarithm, as PyTorch). */
static int64_t ref_bucket(int64_t rel, int bidir, int nb, int maxd) {
  int64_t base = 0, n;
  if (bidir) {
    nb /= 2;
    base = rel > 0 ? nb : 0;
    n = llabs(rel);
  } else {
    n = rel < 0 ? -rel : 0;
  }
  int64_t me = nb / 2;
  if (n < me) return base + n;
  float l = logf((float)n / (float)me) / (float)log((double)maxd / me) * (float)(nb - me);
  int64_t large = me + (int64_t)l;
  return base + (large > nb - 1 ? nb - 1 : large);
}

/* out[B, H, Sq, D] in double, straight from the definition; tbl [H, nb] or slopes [H]. */
static void direct(const stof_mask *m, dims d, const double *q, const double *k, const double *v, double scale,
                   const stof_attn_mod *mod, const double *tbl, double *out, uint8_t *empty) {
  double *s = malloc(sizeof *s * (size_t)d.Sk);
  assert_non_null(s);
  for (int64_t b = 0; b < d.B; b++)
    for (int64_t h = 0; h < d.H; h++) {
      int64_t hk = h / (d.H / d.Hkv);
      for (int64_t i = 0; i < d.Sq; i++) {
        int64_t row = (b * d.H + h) * d.Sq + i;
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j < d.Sk; j++) {
          s[j] = NAN;
          if (!stof_mask_eval(m, b, h, i, j)) continue;
          double dot = 0;
          for (int64_t x = 0; x < d.D; x++) dot += q[row * d.D + x] * k[((b * d.Hkv + hk) * d.Sk + j) * d.D + x];
          double sc = dot * scale;
          if (mod->softcap > 0) sc = mod->softcap * tanh(sc / mod->softcap);
          if (mod->kind == STOF_ATTN_MOD_T5_BIAS)
            sc += tbl[h * mod->num_buckets + ref_bucket(j - i, mod->bidirectional, mod->num_buckets, mod->max_distance)];
          else if (mod->kind == STOF_ATTN_MOD_ALIBI)
            sc += (tbl ? tbl[h] : stof_attn_alibi_slope(d.H, h)) * (double)(j - i);
          s[j] = sc;
          if (sc > mx) mx = sc;
        }
        empty[row] = mx == -INFINITY;
        for (int64_t x = 0; x < d.D; x++) out[row * d.D + x] = 0;
        for (int64_t j = 0; j < d.Sk; j++)
          if (!isnan(s[j])) sum += exp(s[j] - mx);
        for (int64_t j = 0; j < d.Sk; j++) {
          if (isnan(s[j])) continue;
          double p = exp(s[j] - mx) / sum;
          for (int64_t x = 0; x < d.D; x++) out[row * d.D + x] += p * v[((b * d.Hkv + hk) * d.Sk + j) * d.D + x];
        }
      }
    }
  free(s);
}

enum { NMOD = 7 };

/* The modifiers tried on every mask: T5 both ways (32 buckets / 128 reach the logarithmic
 * buckets at these lengths; 8 / 20 clamp), ALiBi with slopes and standard, the soft cap
 * alone and with a T5 bias. */
static stof_attn_mod mod_case(int i, const char **name) {
  static const char *const names[NMOD] = {"t5 bidirectional 32/128", "t5 unidirectional 32/128",
                                          "t5 bidirectional 8/20",   "alibi slopes",
                                          "alibi standard",          "softcap 1.5",
                                          "softcap 2 + t5 unidirectional 8/20"};
  static const stof_attn_mod mods[NMOD] = {
      {STOF_ATTN_MOD_T5_BIAS, 1, 32, 128, 0}, {STOF_ATTN_MOD_T5_BIAS, 0, 32, 128, 0},
      {STOF_ATTN_MOD_T5_BIAS, 1, 8, 20, 0},   {STOF_ATTN_MOD_ALIBI, 0, 0, 0, 0},
      {STOF_ATTN_MOD_ALIBI, 0, 0, 0, 0},      {STOF_ATTN_MOD_NONE, 0, 0, 0, 1.5f},
      {STOF_ATTN_MOD_T5_BIAS, 0, 8, 20, 2.0f},
  };
  *name = names[i];
  return mods[i];
}

static void check_rows(const stof_tensor *got, const double *want, const uint8_t *empty, int64_t nrow, int64_t D,
                       double tol, const char *what) {
  double *g = tu_values(got);
  for (int64_t r = 0; r < nrow; r++)
    for (int64_t x = 0; x < D; x++) {
      if (isnan(g[r * D + x])) fail_msg("%s: NaN at row %lld", what, (long long)r);
      if (empty[r] && g[r * D + x] != 0) fail_msg("%s: empty row %lld is not 0", what, (long long)r);
    }
  double rel = tu_rel_l2(g, want, (size_t)(nrow * D));
  free(g);
  if (!(rel < tol)) fail_msg("%s: relative L2 error %g >= %g", what, rel, tol);
}

static void cpu_modifiers_match_direct_computation_on_every_mask(void **state) {
  (void)state;
  tu_heap heap;
  stof_ctx *ctx = tu_ctx_new(&heap);
  static const int64_t shapes[][2] = {{37, 37}, {23, 41}, {45, 19}};
  int nsuite = 0;
  while (stof_mask_suite_name(nsuite)) nsuite++;
  assert_int_equal(nsuite, 7);
  int c = 0;
  for (int sh = 0; sh < 3; sh++)
    for (int mi = 0; mi < nsuite; mi++) {
      int64_t Sq = shapes[sh][0], Sk = shapes[sh][1];
      stof_mask *m = NULL;
      TU_OK(ctx, stof_mask_suite(ctx, stof_mask_suite_name(mi), Sq > Sk ? Sq : Sk, &m));
      for (int k = 0; k < NMOD; k++, c++) {
        const char *mname;
        stof_attn_mod mod = mod_case(k, &mname);
        stof_dtype dt = c % 2 ? STOF_DTYPE_F32 : STOF_DTYPE_F64;
        dims d = {2, 4, c % 3 == 0 ? 2 : 4, Sq, Sk, 8};
        uint64_t seed = 500 + (uint64_t)c;
        stof_tensor *q = tu_tensor_uniform(ctx, dt, 4, TU_SHAPE(d.B, d.H, d.Sq, d.D), &seed, 0.1, 1.5);
        stof_tensor *kt = tu_tensor_uniform(ctx, dt, 4, TU_SHAPE(d.B, d.Hkv, d.Sk, d.D), &seed, -1.5, -0.1);
        stof_tensor *v = tu_tensor_uniform(ctx, dt, 4, TU_SHAPE(d.B, d.Hkv, d.Sk, d.D), &seed, 0.2, 1);
        /* keys negative, queries positive: never zero, scores of both signs after the bias */
        stof_tensor *bias = NULL;
        if (mod.kind == STOF_ATTN_MOD_T5_BIAS)
          bias = tu_tensor_uniform(ctx, dt, 2, TU_SHAPE(d.H, mod.num_buckets), &seed, -3, 3);
        else if (mod.kind == STOF_ATTN_MOD_ALIBI && k == 3)
          bias = tu_tensor_uniform(ctx, dt, 1, TU_SHAPE(d.H), &seed, 0.05, 0.6);
        stof_tensor *out = NULL;
        TU_OK(ctx, stof_tensor_new(ctx, dt, 4, TU_SHAPE(d.B, d.H, d.Sq, d.D), STOF_DEVICE_CPU, &out));
        stof_tensor_fill(out, NAN);
        stof_mask_format *f = NULL;
        TU_OK(ctx, stof_mask_format_build(ctx, m, d.B, d.H, d.Sq, d.Sk, c % 4 < 2 ? 64 : 16, &f));
        float scale = k % 2 ? 1.0f : 0.0f;
        TU_OK(ctx, stof_attention_cpu_mod(ctx, q, kt, v, f, scale, &mod, bias, out));
        int64_t nrow = d.B * d.H * d.Sq;
        double *qd = tu_values(q), *kd = tu_values(kt), *vd = tu_values(v), *bd = bias ? tu_values(bias) : NULL;
        double *want = malloc(sizeof *want * (size_t)(nrow * d.D));
        uint8_t *empty = malloc((size_t)nrow);
        assert_non_null(want);
        assert_non_null(empty);
        direct(m, d, qd, kd, vd, scale > 0 ? scale : 1 / sqrt((double)d.D), &mod, bd, want, empty);
        char what[200];
        snprintf(what, sizeof what, "%s, %s, Sq %lld, Sk %lld, %s", stof_mask_description(m), mname, (long long)Sq,
                 (long long)Sk, stof_dtype_name(dt));
        check_rows(out, want, empty, nrow, d.D, dt == STOF_DTYPE_F64 ? 1e-10 : 1e-5, what);
        /* the modifier changed something: the same attention without it differs */
        stof_tensor_fill(out, NAN);
        TU_OK(ctx, stof_attention_cpu(ctx, q, kt, v, f, scale, out));
        double *plain = tu_values(out);
        double diff = tu_rel_l2(plain, want, (size_t)(nrow * d.D));
        if (!(diff > 1e-4)) fail_msg("%s: the modifier changed nothing (%g)", what, diff);
        free(plain);
        free(qd);
        free(kd);
        free(vd);
        free(bd);
        free(want);
        free(empty);
        stof_mask_format_free(f);
        stof_tensor_free(q);
        stof_tensor_free(kt);
        stof_tensor_free(v);
        stof_tensor_free(bias);
        stof_tensor_free(out);
      }
      stof_mask_free(m);
    }
  tu_ctx_free(ctx, &heap);
}

/* A strided (transposed) table gives what its contiguous copy gives. */
static void cpu_modifier_reads_a_strided_table(void **state) {
  (void)state;
  tu_heap heap;
  stof_ctx *ctx = tu_ctx_new(&heap);
  uint64_t seed = 9;
  int64_t H = 3, NB = 8, S = 21, D = 4;
  stof_tensor *q = tu_tensor_uniform(ctx, STOF_DTYPE_F64, 4, TU_SHAPE(1, H, S, D), &seed, -1, 1);
  stof_tensor *tbl = tu_tensor_uniform(ctx, STOF_DTYPE_F64, 2, TU_SHAPE(NB, H), &seed, -2, 2); /* [buckets, H] */
  stof_tensor *view = NULL, *copy = NULL, *o1 = NULL, *o2 = NULL;
  TU_OK(ctx, stof_tensor_wrap(ctx, STOF_DTYPE_F64, 2, TU_SHAPE(H, NB), TU_SHAPE(1, H), tbl->data, STOF_DEVICE_CPU,
                              &view));
  TU_OK(ctx, stof_tensor_new(ctx, STOF_DTYPE_F64, 2, TU_SHAPE(H, NB), STOF_DEVICE_CPU, &copy));
  for (int64_t h = 0; h < H; h++)
    for (int64_t b = 0; b < NB; b++) stof_tensor_store(copy, h * NB + b, stof_tensor_load(tbl, b * H + h));
  TU_OK(ctx, stof_tensor_new(ctx, STOF_DTYPE_F64, 4, TU_SHAPE(1, H, S, D), STOF_DEVICE_CPU, &o1));
  TU_OK(ctx, stof_tensor_new(ctx, STOF_DTYPE_F64, 4, TU_SHAPE(1, H, S, D), STOF_DEVICE_CPU, &o2));
  stof_mask *m = NULL;
  TU_OK(ctx, stof_mask_causal(ctx, &m));
  stof_mask_format *f = NULL;
  TU_OK(ctx, stof_mask_format_build(ctx, m, 1, H, S, S, 16, &f));
  stof_attn_mod mod = {STOF_ATTN_MOD_T5_BIAS, 0, (int)NB, 20, 0};
  TU_OK(ctx, stof_attention_cpu_mod(ctx, q, q, q, f, 1, &mod, view, o1));
  TU_OK(ctx, stof_attention_cpu_mod(ctx, q, q, q, f, 1, &mod, copy, o2));
  double *a = tu_values(o1), *b = tu_values(o2);
  assert_true(tu_rel_l2(a, b, (size_t)(H * S * D)) == 0);
  free(a);
  free(b);
  stof_mask_format_free(f);
  stof_mask_free(m);
  stof_tensor_free(q);
  stof_tensor_free(tbl);
  stof_tensor_free(view);
  stof_tensor_free(copy);
  stof_tensor_free(o1);
  stof_tensor_free(o2);
  tu_ctx_free(ctx, &heap);
}

/* ---------------------------------------------------------------- in a graph */

static void modifier_op_matches_in_the_interpreter(void **state) {
  (void)state;
  tu_heap heap;
  stof_ctx *ctx = tu_ctx_new(&heap);
  dims d = {2, 4, 2, 13, 19, 8};
  stof_mask *m = NULL;
  TU_OK(ctx, stof_mask_suite(ctx, "bigbird", 19, &m));
  for (int k = 0; k < NMOD; k++) {
    const char *mname;
    stof_attn_mod mod = mod_case(k, &mname);
    uint64_t seed = 40 + (uint64_t)k;
    stof_tensor *q = tu_tensor_uniform(ctx, STOF_DTYPE_F32, 4, TU_SHAPE(d.B, d.H, d.Sq, d.D), &seed, -2, 2);
    stof_tensor *kt = tu_tensor_uniform(ctx, STOF_DTYPE_F32, 4, TU_SHAPE(d.B, d.Hkv, d.Sk, d.D), &seed, -2, 2);
    stof_tensor *v = tu_tensor_uniform(ctx, STOF_DTYPE_F32, 4, TU_SHAPE(d.B, d.Hkv, d.Sk, d.D), &seed, -1, 1);
    int has_tbl = mod.kind == STOF_ATTN_MOD_T5_BIAS || k == 3;
    stof_tensor *bias = !has_tbl ? NULL
                        : mod.kind == STOF_ATTN_MOD_T5_BIAS
                            ? tu_tensor_uniform(ctx, STOF_DTYPE_F32, 2, TU_SHAPE(d.H, mod.num_buckets), &seed, -3, 3)
                            : tu_tensor_uniform(ctx, STOF_DTYPE_F32, 1, TU_SHAPE(d.H), &seed, 0.05, 0.6);
    stof_tensor *out = NULL, *res = NULL;
    TU_OK(ctx, stof_tensor_new(ctx, STOF_DTYPE_F32, 4, TU_SHAPE(d.B, d.H, d.Sq, d.D), STOF_DEVICE_CPU, &out));
    stof_tensor_fill(out, NAN);
    stof_mask_format *f = NULL;
    TU_OK(ctx, stof_mask_format_build(ctx, m, d.B, d.H, d.Sq, d.Sk, 64, &f));
    TU_OK(ctx, stof_attention_cpu_mod(ctx, q, kt, v, f, 0.7f, &mod, bias, out));

    stof_graph *g = NULL;
    TU_OK(ctx, stof_graph_new(ctx, &g));
    const stof_op *ph[4], *A;
    ph[0] = tu_ph(g, "q", STOF_DTYPE_F32, 4, TU_SHAPE(d.B, d.H, d.Sq, d.D));
    ph[1] = tu_ph(g, "k", STOF_DTYPE_F32, 4, TU_SHAPE(d.B, d.Hkv, d.Sk, d.D));
    ph[2] = tu_ph(g, "v", STOF_DTYPE_F32, 4, TU_SHAPE(d.B, d.Hkv, d.Sk, d.D));
    ph[3] = !has_tbl ? NULL
            : mod.kind == STOF_ATTN_MOD_T5_BIAS ? tu_ph(g, "tbl", STOF_DTYPE_F32, 2, TU_SHAPE(d.H, mod.num_buckets))
                                                : tu_ph(g, "slopes", STOF_DTYPE_F32, 1, TU_SHAPE(d.H));
    TU_OK(ctx, stof_attention_op_ex(g, ph[0], ph[1], ph[2], ph[3], m, 0.7f, &mod, &A));
    assert_int_equal(A->ninput, has_tbl ? 4 : 3);
    const stof_attn_attrs *at = A->intrin_attrs;
    assert_int_equal(at->mod.kind, mod.kind);
    TU_OK(ctx, stof_interp_eval(g, 1, &A, has_tbl ? 4 : 3, ph, (const stof_tensor *[]){q, kt, v, bias}, &res));
    double *want = tu_values(res), *got = tu_values(out);
    double rel = tu_rel_l2(got, want, (size_t)(d.B * d.H * d.Sq * d.D));
    if (!(rel < 1e-6)) fail_msg("%s: cpu vs interpreter %g", mname, rel);

    /* the GPU path takes a table or slopes of float32 or the attention's dtype: a float64
     * one is refused before the engine (so with or without a GPU) */
    if (has_tbl) {
      const stof_op *b64 = mod.kind == STOF_ATTN_MOD_T5_BIAS
                               ? tu_ph(g, "tbl64", STOF_DTYPE_F64, 2, TU_SHAPE(d.H, mod.num_buckets))
                               : tu_ph(g, "slopes64", STOF_DTYPE_F64, 1, TU_SHAPE(d.H));
      const stof_op *A64;
      TU_OK(ctx, stof_attention_op_ex(g, ph[0], ph[1], ph[2], b64, m, 0.7f, &mod, &A64));
      const stof_intrin *in = stof_intrin_find("attention");
      assert_non_null(in);
      int knobs[STOF_INTRIN_MAX_KNOBS] = {0};
      void *shared = NULL, *inst = NULL;
      TU_ERR(ctx, in->gpu_new(ctx, A64, knobs, &shared, &inst), STOF_ERR_TYPE,
             "is float64 on the GPU: float32 or the attention's float32");
      assert_null(inst);
      assert_null(shared);
    }

    free(want);
    free(got);
    stof_tensor_free(res);
    stof_graph_free(g);
    stof_mask_format_free(f);
    stof_tensor_free(q);
    stof_tensor_free(kt);
    stof_tensor_free(v);
    stof_tensor_free(bias);
    stof_tensor_free(out);
  }
  stof_mask_free(m);
  tu_ctx_free(ctx, &heap);
}

/* ---------------------------------------------------------------- errors */

static void modifier_rejects_bad_arguments(void **state) {
  (void)state;
  tu_heap heap;
  stof_ctx *ctx = tu_ctx_new(&heap);
  stof_graph *g = NULL;
  TU_OK(ctx, stof_graph_new(ctx, &g));
  stof_mask *m = NULL;
  TU_OK(ctx, stof_mask_causal(ctx, &m));
  const stof_op *q = tu_ph(g, "q", STOF_DTYPE_F32, 4, TU_SHAPE(1, 2, 9, 4));
  const stof_op *tbl = tu_ph(g, "tbl", STOF_DTYPE_F32, 2, TU_SHAPE(2, 8));
  const stof_op *tbl_t = tu_ph(g, "tbl_t", STOF_DTYPE_F32, 2, TU_SHAPE(8, 2));
  const stof_op *slopes = tu_ph(g, "slopes", STOF_DTYPE_F32, 1, TU_SHAPE(3));
  const stof_op *ids = tu_ph(g, "ids", STOF_DTYPE_I64, 2, TU_SHAPE(2, 8));
  const stof_op *A = NULL;
  stof_attn_mod t5 = {STOF_ATTN_MOD_T5_BIAS, 1, 8, 20, 0};
  TU_ERR(ctx, stof_attention_op_ex(g, q, q, q, NULL, m, 1, &t5, &A), STOF_ERR_ARG, "needs its [H, buckets] table");
  TU_ERR(ctx, stof_attention_op_ex(g, q, q, q, tbl_t, m, 1, &t5, &A), STOF_ERR_SHAPE, "must be [H, buckets] = [2, 8]");
  TU_ERR(ctx, stof_attention_op_ex(g, q, q, q, ids, m, 1, &t5, &A), STOF_ERR_TYPE, "float dtype");
  TU_ERR(ctx, stof_attention_op_ex(g, q, q, q, tbl, m, 1, NULL, &A), STOF_ERR_ARG, "without a modifier");
  stof_attn_mod al = {STOF_ATTN_MOD_ALIBI, 0, 0, 0, 0};
  TU_ERR(ctx, stof_attention_op_ex(g, q, q, q, slopes, m, 1, &al, &A), STOF_ERR_SHAPE, "ALiBi slopes (slopes) must be [H] = [2]");
  stof_attn_mod bad = t5;
  bad.num_buckets = 2;
  TU_ERR(ctx, stof_attention_op_ex(g, q, q, q, tbl, m, 1, &bad, &A), STOF_ERR_ARG, "2 buckets: a bidirectional T5 bias needs at least 4");
  bad = t5;
  bad.max_distance = 2;
  TU_ERR(ctx, stof_attention_op_ex(g, q, q, q, tbl, m, 1, &bad, &A), STOF_ERR_ARG, "max_distance 2 must exceed");
  bad = t5;
  bad.softcap = -1;
  TU_ERR(ctx, stof_attention_op_ex(g, q, q, q, tbl, m, 1, &bad, &A), STOF_ERR_ARG, "softcap -1");
  bad.softcap = 0;
  bad.kind = (stof_attn_mod_kind)7;
  TU_ERR(ctx, stof_attention_op_ex(g, q, q, q, NULL, m, 1, &bad, &A), STOF_ERR_ARG, "unknown score modifier kind 7");
  assert_null(A);
  TU_OK(ctx, stof_attention_op_ex(g, q, q, q, tbl, m, 1, &t5, &A));

  /* the CPU implementation checks the same */
  uint64_t seed = 3;
  stof_tensor *tq = tu_tensor_uniform(ctx, STOF_DTYPE_F32, 4, TU_SHAPE(1, 2, 9, 4), &seed, -1, 1);
  stof_tensor *tt = tu_tensor_uniform(ctx, STOF_DTYPE_F32, 2, TU_SHAPE(2, 6), &seed, -1, 1);
  stof_tensor *out = NULL;
  TU_OK(ctx, stof_tensor_new(ctx, STOF_DTYPE_F32, 4, TU_SHAPE(1, 2, 9, 4), STOF_DEVICE_CPU, &out));
  stof_mask_format *f = NULL;
  TU_OK(ctx, stof_mask_format_build(ctx, m, 1, 2, 9, 9, 16, &f));
  TU_ERR(ctx, stof_attention_cpu_mod(ctx, tq, tq, tq, f, 1, &t5, tt, out), STOF_ERR_SHAPE, "[H, buckets] = [2, 8]");
  TU_ERR(ctx, stof_attention_cpu_mod(ctx, tq, tq, tq, f, 1, &t5, NULL, out), STOF_ERR_ARG, "needs its [H, buckets] table");
  TU_ERR(ctx, stof_attention_cpu_mod(ctx, tq, tq, tq, f, 1, NULL, tt, out), STOF_ERR_ARG, "without a modifier");
  TU_ERR(ctx, stof_attention_cpu_mod(ctx, tq, tq, tq, f, 1, &al, tt, out), STOF_ERR_SHAPE, "ALiBi slopes must be [H] = [2]");
  stof_mask_format_free(f);
  stof_tensor_free(tq);
  stof_tensor_free(tt);
  stof_tensor_free(out);
  stof_graph_free(g);
  stof_mask_free(m);
  tu_ctx_free(ctx, &heap);
}

/* Every allocation of the CPU implementation with a T5 bias fails in turn: a clean
 * STOF_ERR_NOMEM and nothing leaked. */
static void cpu_modifier_out_of_memory_is_clean(void **state) {
  (void)state;
  tu_heap heap;
  stof_ctx *ctx = tu_ctx_new(&heap);
  uint64_t seed = 5;
  stof_tensor *q = tu_tensor_uniform(ctx, STOF_DTYPE_F32, 4, TU_SHAPE(1, 2, 9, 4), &seed, -1, 1);
  stof_tensor *tt = tu_tensor_uniform(ctx, STOF_DTYPE_F32, 2, TU_SHAPE(2, 8), &seed, -1, 1);
  stof_tensor *out = NULL;
  TU_OK(ctx, stof_tensor_new(ctx, STOF_DTYPE_F32, 4, TU_SHAPE(1, 2, 9, 4), STOF_DEVICE_CPU, &out));
  stof_mask *m = NULL;
  TU_OK(ctx, stof_mask_causal(ctx, &m));
  stof_mask_format *f = NULL;
  TU_OK(ctx, stof_mask_format_build(ctx, m, 1, 2, 9, 9, 16, &f));
  stof_attn_mod t5 = {STOF_ATTN_MOD_T5_BIAS, 0, 8, 20, 0};
  size_t before = stof_ctx_bytes_in_use(ctx);
  int failed = 0, done = 0;
  for (long n = 1; n < 32 && !done; n++) {
    heap.fail_at = heap.nalloc + n;
    heap.failed = 0;
    stof_status st = stof_attention_cpu_mod(ctx, q, q, q, f, 1, &t5, tt, out);
    heap.fail_at = 0;
    if (heap.failed) {
      assert_int_equal(st, STOF_ERR_NOMEM);
      stof_ctx_clear_error(ctx);
      failed++;
    } else {
      TU_OK(ctx, st);
      done = 1;
    }
    assert_int_equal(stof_ctx_bytes_in_use(ctx), before);
  }
  assert_true(done && failed >= 4); /* the offset table, scores, accumulator, keys */
  stof_mask_format_free(f);
  stof_mask_free(m);
  stof_tensor_free(q);
  stof_tensor_free(tt);
  stof_tensor_free(out);
  tu_ctx_free(ctx, &heap);
}

int run_attention_mod_tests(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(t5_bucket_matches_hand_derived_values),
      cmocka_unit_test(alibi_slopes_are_the_standard_ones),
      cmocka_unit_test(cpu_modifiers_match_direct_computation_on_every_mask),
      cmocka_unit_test(cpu_modifier_reads_a_strided_table),
      cmocka_unit_test(modifier_op_matches_in_the_interpreter),
      cmocka_unit_test(modifier_rejects_bad_arguments),
      cmocka_unit_test(cpu_modifier_out_of_memory_is_clean),
  };
  return cmocka_run_group_tests_name("attention_mod", tests, NULL, NULL);
}
