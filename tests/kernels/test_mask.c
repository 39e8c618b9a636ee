/* Masks: constructors against predicates written here, combination, descriptions,
 * random and document masks, tensor and fn masks, argument checks. */
#include "helpers.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---------------------------------------------------------------- direct predicates */

typedef enum { P_DENSE, P_CAUSAL, P_WINDOW, P_SLIDING, P_CAUSAL_SLIDING, P_GLOBAL,
               P_LONGFORMER, P_DILATED, P_DOCUMENT } pkind;

typedef struct spec {
  pkind kind;
  int64_t a, b;          /* l/r, w/g, w/d */
  int64_t n;             /* document */
  const int64_t *len;
} spec;

static int direct(const spec *s, int64_t i, int64_t j) {
  switch (s->kind) {
  case P_DENSE: return 1;
  case P_CAUSAL: return j <= i;
  case P_WINDOW: return i - s->a <= j && j <= i + s->b;
  case P_SLIDING: return llabs(i - j) <= s->a;
  case P_CAUSAL_SLIDING: return j <= i && j > i - s->a;
  case P_GLOBAL: return i < s->a || j < s->a;
  case P_LONGFORMER: return llabs(i - j) <= s->a || i < s->b || j < s->b;
  case P_DILATED: {
    for (int64_t k = 0; k < s->a; k++)
      if (j == i - k * (s->b + 1)) return 1;
    return 0;
  }
  case P_DOCUMENT: {
    int64_t start = 0;
    for (int64_t k = 0; k < s->n; k++) {
      int64_t end = start + s->len[k];
      if (i >= start && i < end) return j >= start && j < end;
      start = end;
    }
    return 0; /* past the lengths: no sequence */
  }
  }
  return -1;
}

static stof_mask *make(stof_ctx *ctx, const spec *s) {
  stof_mask *m = NULL;
  switch (s->kind) {
  case P_DENSE: KT_OK(ctx, stof_mask_dense(ctx, &m)); break;
  case P_CAUSAL: KT_OK(ctx, stof_mask_causal(ctx, &m)); break;
  case P_WINDOW: KT_OK(ctx, stof_mask_window(ctx, s->a, s->b, &m)); break;
  case P_SLIDING: KT_OK(ctx, stof_mask_sliding(ctx, s->a, &m)); break;
  case P_CAUSAL_SLIDING: KT_OK(ctx, stof_mask_causal_sliding(ctx, s->a, &m)); break;
  case P_GLOBAL: KT_OK(ctx, stof_mask_global(ctx, s->a, &m)); break;
  case P_LONGFORMER: KT_OK(ctx, stof_mask_longformer(ctx, s->a, s->b, &m)); break;
  case P_DILATED: KT_OK(ctx, stof_mask_dilated(ctx, s->a, s->b, &m)); break;
  case P_DOCUMENT: KT_OK(ctx, stof_mask_document(ctx, s->n, s->len, &m)); break;
  }
  return m;
}

static void eval_matches_direct_predicates(void **state) {
  stof_ctx *ctx = kt_ctx();
  static const int64_t len[] = {5, 100, 37};
  const spec specs[] = {
      {P_DENSE, 0, 0, 0, NULL},         {P_CAUSAL, 0, 0, 0, NULL},
      {P_WINDOW, 3, 5, 0, NULL},        {P_WINDOW, 0, 0, 0, NULL},
      {P_WINDOW, 40, 0, 0, NULL},       {P_SLIDING, 32, 0, 0, NULL},
      {P_SLIDING, 0, 0, 0, NULL},       {P_CAUSAL_SLIDING, 32, 0, 0, NULL},
      {P_CAUSAL_SLIDING, 1, 0, 0, NULL}, {P_GLOBAL, 4, 0, 0, NULL},
      {P_GLOBAL, 0, 0, 0, NULL},        {P_LONGFORMER, 32, 32, 0, NULL},
      {P_LONGFORMER, 3, 17, 0, NULL},   {P_DILATED, 4, 2, 0, NULL},
      {P_DILATED, 3, 0, 0, NULL},       {P_DILATED, 1, 5, 0, NULL},
      {P_DOCUMENT, 0, 0, 3, len},
  };
  const int64_t S = 300;
  for (size_t k = 0; k < sizeof specs / sizeof specs[0]; k++) {
    stof_mask *m = make(ctx, &specs[k]);
    assert_int_equal(stof_mask_varies_b(m), 0);
    assert_int_equal(stof_mask_varies_h(m), 0);
    for (int64_t i = 0; i < S; i++)
      for (int64_t j = 0; j < S; j++) {
        int want = direct(&specs[k], i, j);
        int got = stof_mask_eval(m, 0, 0, i, j);
        if (got != want || stof_mask_eval(m, 3, 5, i, j) != want)
          fail_msg("%s at (%lld, %lld): %d, expected %d", stof_mask_description(m),
                   (long long)i, (long long)j, got, want);
      }
    stof_mask_free(m);
  }
  kt_ctx_done(ctx);
}

static void bigbird_is_longformer_or_random_blocks(void **state) {
  stof_ctx *ctx = kt_ctx();
  stof_mask *bb, *lf, *rb;
  KT_OK(ctx, stof_mask_bigbird(ctx, 8, 4, 16, 0.3, 7, &bb));
  KT_OK(ctx, stof_mask_longformer(ctx, 8, 4, &lf));
  KT_OK(ctx, stof_mask_random_blocks(ctx, 16, 0.3, 7, &rb));
  for (int64_t i = 0; i < 300; i++)
    for (int64_t j = 0; j < 300; j++)
      assert_int_equal(stof_mask_eval(bb, 0, 0, i, j),
                       stof_mask_eval(lf, 0, 0, i, j) | stof_mask_eval(rb, 0, 0, i, j));
  stof_mask_free(bb);
  stof_mask_free(lf);
  stof_mask_free(rb);
  kt_ctx_done(ctx);
}

static void combinations_follow_set_algebra_and_outlive_operands(void **state) {
  stof_ctx *ctx = kt_ctx();
  stof_mask *a, *b, *c, *u, *x, *d, *nested;
  KT_OK(ctx, stof_mask_causal(ctx, &a));
  KT_OK(ctx, stof_mask_sliding(ctx, 16, &b));
  KT_OK(ctx, stof_mask_global(ctx, 4, &c));
  KT_OK(ctx, stof_mask_union(a, c, &u));
  KT_OK(ctx, stof_mask_intersection(a, b, &x));
  KT_OK(ctx, stof_mask_difference(b, a, &d));
  KT_OK(ctx, stof_mask_difference(u, x, &nested));
  for (int64_t i = 0; i < 120; i++)
    for (int64_t j = 0; j < 120; j++) {
      int ea = stof_mask_eval(a, 0, 0, i, j), eb = stof_mask_eval(b, 0, 0, i, j);
      int ec = stof_mask_eval(c, 0, 0, i, j);
      assert_int_equal(stof_mask_eval(u, 0, 0, i, j), ea | ec);
      assert_int_equal(stof_mask_eval(x, 0, 0, i, j), ea & eb);
      assert_int_equal(stof_mask_eval(d, 0, 0, i, j), eb & !ea);
    }
  /* operands freed: the combinations keep their own copies */
  stof_mask_free(a);
  stof_mask_free(b);
  stof_mask_free(c);
  stof_mask_free(u);
  stof_mask_free(x);
  for (int64_t i = 0; i < 120; i++)
    for (int64_t j = 0; j < 120; j++) {
      int ea = j <= i, eb = llabs(i - j) <= 16, ec = i < 4 || j < 4;
      assert_int_equal(stof_mask_eval(nested, 0, 0, i, j), (ea | ec) & !(ea & eb));
      assert_int_equal(stof_mask_eval(d, 0, 0, i, j), eb & !ea);
    }
  stof_mask_free(d);
  stof_mask_free(nested);
  kt_ctx_done(ctx);
}

static void describe_names_masks_and_combinations(void **state) {
  stof_ctx *ctx = kt_ctx();
  stof_mask *m[12], *u, *x, *d, *d2;
  static const int64_t len[] = {3, 5, 2};
  KT_OK(ctx, stof_mask_longformer(ctx, 32, 32, &m[0]));
  KT_OK(ctx, stof_mask_causal(ctx, &m[1]));
  KT_OK(ctx, stof_mask_window(ctx, 3, 0, &m[2]));
  KT_OK(ctx, stof_mask_global(ctx, 4, &m[3]));
  KT_OK(ctx, stof_mask_bigbird(ctx, 32, 32, 32, 0.1, 0, &m[4]));
  KT_OK(ctx, stof_mask_document(ctx, 3, len, &m[5]));
  KT_OK(ctx, stof_mask_random_blocks(ctx, 64, 0.25, 42, &m[6]));
  KT_OK(ctx, stof_mask_causal_sliding(ctx, 32, &m[7]));
  KT_OK(ctx, stof_mask_dilated(ctx, 8, 1, &m[8]));
  KT_OK(ctx, stof_mask_dense(ctx, &m[9]));
  KT_OK(ctx, stof_mask_sliding(ctx, 32, &m[10]));
  KT_OK(ctx, stof_mask_random_blocks(ctx, 64, 0.1 + 1e-17 + 1e-16, 0, &m[11]));
  assert_string_equal(stof_mask_description(m[0]), "longformer(32, 32)");
  assert_string_equal(stof_mask_description(m[4]), "bigbird(32, 32, 32, 0.1, 0)");
  assert_string_equal(stof_mask_description(m[5]), "document(3, 5, 2)");
  assert_string_equal(stof_mask_description(m[6]), "random_blocks(64, 0.25, 42)");
  assert_string_equal(stof_mask_description(m[7]), "causal_sliding(32)");
  assert_string_equal(stof_mask_description(m[8]), "dilated(8, 1)");
  assert_string_equal(stof_mask_description(m[9]), "dense()");
  assert_string_equal(stof_mask_description(m[10]), "sliding(32)");
  /* p that prints short but is not 0.1 keeps every digit (descriptions key caches) */
  assert_string_not_equal(stof_mask_description(m[11]), "random_blocks(64, 0.1, 0)");
  KT_OK(ctx, stof_mask_union(m[1], m[2], &u));
  assert_string_equal(stof_mask_description(u), "causal() | window(3, 0)");
  KT_OK(ctx, stof_mask_intersection(u, m[3], &x));
  assert_string_equal(stof_mask_description(x), "(causal() | window(3, 0)) & global(4)");
  KT_OK(ctx, stof_mask_difference(m[9], x, &d));
  assert_string_equal(stof_mask_description(d),
                      "dense() - ((causal() | window(3, 0)) & global(4))");
  KT_OK(ctx, stof_mask_difference(d, m[0], &d2));
  assert_string_equal(stof_mask_description(d2),
                      "dense() - ((causal() | window(3, 0)) & global(4)) - longformer(32, 32)");
  char *s = NULL;
  KT_OK(ctx, stof_mask_describe(u, &s));
  assert_string_equal(s, "causal() | window(3, 0)");
  stof_ctx_dealloc(ctx, s, strlen(s) + 1);
  /* long length lists print as counts and a hash that tells them apart */
  int64_t many[40], many2[40];
  for (int k = 0; k < 40; k++) many[k] = many2[k] = 10 + k;
  many2[39]++;
  stof_mask *l1, *l2;
  KT_OK(ctx, stof_mask_document(ctx, 40, many, &l1));
  KT_OK(ctx, stof_mask_document(ctx, 40, many2, &l2));
  assert_non_null(strstr(stof_mask_description(l1), "document(n=40, total=1180, #"));
  assert_string_not_equal(stof_mask_description(l1), stof_mask_description(l2));
  stof_mask_free(l1);
  stof_mask_free(l2);
  for (int k = 0; k < 12; k++) stof_mask_free(m[k]);
  stof_mask_free(u);
  stof_mask_free(x);
  stof_mask_free(d);
  stof_mask_free(d2);
  kt_ctx_done(ctx);
}

static void random_blocks_are_reproducible_and_near_p(void **state) {
  stof_ctx *ctx = kt_ctx();
  stof_mask *a, *b, *c, *zero, *one;
  KT_OK(ctx, stof_mask_random_blocks(ctx, 4, 0.3, 11, &a));
  KT_OK(ctx, stof_mask_random_blocks(ctx, 4, 0.3, 11, &b));
  KT_OK(ctx, stof_mask_random_blocks(ctx, 4, 0.3, 12, &c));
  KT_OK(ctx, stof_mask_random_blocks(ctx, 4, 0.0, 11, &zero));
  KT_OK(ctx, stof_mask_random_blocks(ctx, 4, 1.0, 11, &one));
  int64_t kept = 0, differ = 0, nblk = 200;
  for (int64_t bi = 0; bi < nblk; bi++)
    for (int64_t bj = 0; bj < nblk; bj++) {
      int v = stof_mask_eval(a, 0, 0, bi * 4, bj * 4);
      /* same seed, same blocks; constant within a block; any b, h */
      assert_int_equal(stof_mask_eval(b, 2, 3, bi * 4 + 3, bj * 4 + 1), v);
      assert_int_equal(stof_mask_eval(a, 0, 0, bi * 4 + 2, bj * 4 + 3), v);
      differ += stof_mask_eval(c, 0, 0, bi * 4, bj * 4) != v;
      kept += v;
      assert_int_equal(stof_mask_eval(zero, 0, 0, bi * 4, bj * 4), 0);
      assert_int_equal(stof_mask_eval(one, 0, 0, bi * 4, bj * 4), 1);
    }
  double p = (double)kept / (double)(nblk * nblk);
  assert_true(fabs(p - 0.3) < 0.01); /* 4.3 sigma at 40000 blocks */
  assert_true(differ > nblk * nblk / 4); /* another seed draws other blocks */
  stof_mask_free(a);
  stof_mask_free(b);
  stof_mask_free(c);
  stof_mask_free(zero);
  stof_mask_free(one);
  kt_ctx_done(ctx);
}

static void document_batched_varies_with_b(void **state) {
  stof_ctx *ctx = kt_ctx();
  static const int64_t nseq[] = {2, 3}, len[] = {10, 20, 5, 5, 5};
  stof_mask *m, *one;
  KT_OK(ctx, stof_mask_document_batched(ctx, 2, nseq, len, &m));
  assert_int_equal(stof_mask_varies_b(m), 1);
  assert_int_equal(stof_mask_varies_h(m), 0);
  spec s0 = {P_DOCUMENT, 0, 0, 2, len}, s1 = {P_DOCUMENT, 0, 0, 3, len + 2};
  for (int64_t i = 0; i < 40; i++)
    for (int64_t j = 0; j < 40; j++) {
      assert_int_equal(stof_mask_eval(m, 0, 7, i, j), direct(&s0, i, j));
      assert_int_equal(stof_mask_eval(m, 1, 0, i, j), direct(&s1, i, j));
      assert_int_equal(stof_mask_eval(m, 2, 0, i, j), 0); /* no such batch */
    }
  assert_string_equal(stof_mask_description(m), "document_batched({10, 20}, {5, 5, 5})");
  KT_OK(ctx, stof_mask_document_batched(ctx, 1, nseq, len, &one));
  assert_int_equal(stof_mask_varies_b(one), 0);
  assert_int_equal(stof_mask_eval(one, 5, 0, 12, 29), 1);
  stof_mask_free(m);
  stof_mask_free(one);
  kt_ctx_done(ctx);
}

static void document_random_lengths_sum_to_S_within_range(void **state) {
  stof_ctx *ctx = kt_ctx();
  const int64_t S = 1000, lo = S / 16, hi = S / 2;
  stof_mask *m, *again, *suite;
  KT_OK(ctx, stof_mask_document_random(ctx, S, lo, hi, 1, &m));
  KT_OK(ctx, stof_mask_document_random(ctx, S, lo, hi, 1, &again));
  KT_OK(ctx, stof_mask_suite(ctx, "document", S, &suite));
  assert_string_equal(stof_mask_description(m), stof_mask_description(again));
  assert_string_equal(stof_mask_description(m), stof_mask_description(suite));
  /* sequence starts: i sees nothing before it */
  int64_t start = 0, nseq = 0;
  for (int64_t i = 1; i <= S; i++) {
    if (i < S && stof_mask_eval(m, 0, 0, i, i - 1)) continue;
    int64_t l = i - start;
    assert_true(l <= hi);
    if (i < S) assert_true(l >= lo); /* only the last is cut */
    assert_int_equal(stof_mask_eval(m, 0, 0, i - 1, start), 1);
    start = i;
    nseq++;
  }
  assert_true(nseq >= 2);
  assert_int_equal(stof_mask_eval(m, 0, 0, S - 1, S - 1), 1); /* sums to exactly S */
  assert_int_equal(stof_mask_eval(m, 0, 0, S, S), 0);
  stof_mask_free(m);
  stof_mask_free(again);
  stof_mask_free(suite);
  kt_ctx_done(ctx);
}

static void from_tensor_copies_and_matches_the_tensor(void **state) {
  stof_ctx *ctx = kt_ctx();
  const int64_t S = 70;
  /* [S, S] bool */
  stof_tensor *t;
  int64_t sh2[2] = {S, S};
  KT_OK(ctx, stof_tensor_rand(ctx, STOF_DTYPE_BOOL, 2, sh2, 3, &t));
  uint8_t *copy = malloc((size_t)(S * S));
  for (int64_t k = 0; k < S * S; k++) copy[k] = stof_tensor_load(t, k) != 0;
  stof_mask *m2;
  KT_OK(ctx, stof_mask_from_tensor(ctx, t, &m2));
  stof_tensor_fill(t, 0);
  stof_tensor_free(t); /* copied */
  assert_int_equal(stof_mask_varies_b(m2) | stof_mask_varies_h(m2), 0);
  for (int64_t i = 0; i < S; i++)
    for (int64_t j = 0; j < S; j++) assert_int_equal(stof_mask_eval(m2, 1, 1, i, j), copy[i * S + j]);
  assert_int_equal(stof_mask_eval(m2, 0, 0, S, 0), 0);
  assert_int_equal(stof_mask_eval(m2, 0, 0, 0, S), 0);
  free(copy);

  /* [2, 3, S, S] int32 (values 0..99: nonzero = kept) */
  int64_t sh4[4] = {2, 3, S, S};
  KT_OK(ctx, stof_tensor_rand(ctx, STOF_DTYPE_I32, 4, sh4, 5, &t));
  for (int64_t k = 0; k < 2 * 3 * S * S; k++)
    stof_tensor_store(t, k, stof_tensor_load(t, k) < 50 ? 0 : stof_tensor_load(t, k));
  stof_mask *m4;
  KT_OK(ctx, stof_mask_from_tensor(ctx, t, &m4));
  assert_int_equal(stof_mask_varies_b(m4), 1);
  assert_int_equal(stof_mask_varies_h(m4), 1);
  for (int64_t b = 0; b < 2; b++)
    for (int64_t h = 0; h < 3; h++)
      for (int64_t i = 0; i < S; i++)
        for (int64_t j = 0; j < S; j++) {
          int64_t idx[4] = {b, h, i, j};
          double v;
          KT_OK(ctx, stof_tensor_get(t, idx, &v));
          assert_int_equal(stof_mask_eval(m4, b, h, i, j), v != 0);
        }
  stof_tensor_free(t);

  /* [1, 3, S, S] int64, read through a transposed (strided) view */
  int64_t sh13[4] = {1, 3, S, S};
  KT_OK(ctx, stof_tensor_rand(ctx, STOF_DTYPE_I64, 4, sh13, 9, &t));
  int64_t strides[4] = {3 * S * S, S * S, 1, S};
  stof_tensor *view;
  KT_OK(ctx, stof_tensor_wrap(ctx, STOF_DTYPE_I64, 4, sh13, strides, t->data, STOF_DEVICE_CPU, &view));
  stof_mask *mt;
  KT_OK(ctx, stof_mask_from_tensor(ctx, view, &mt));
  assert_int_equal(stof_mask_varies_b(mt), 0);
  assert_int_equal(stof_mask_varies_h(mt), 1);
  for (int64_t h = 0; h < 3; h++)
    for (int64_t i = 0; i < S; i++)
      for (int64_t j = 0; j < S; j++) {
        double v = stof_tensor_load(t, h * S * S + j * S + i);
        assert_int_equal(stof_mask_eval(mt, 4, h, i, j), v != 0);
      }
  assert_non_null(strstr(stof_mask_description(mt), "from_tensor(1x3x70x70, #"));
  stof_tensor_free(view);
  stof_tensor_free(t);
  stof_mask_free(m2);
  stof_mask_free(m4);
  stof_mask_free(mt);
  kt_ctx_done(ctx);
}

typedef struct pred_state {
  int64_t calls;
  int64_t fail_at; /* i at which the predicate fails, or -1 */
} pred_state;

static int pred(void *ud, int64_t b, int64_t h, int64_t i, int64_t j) {
  pred_state *s = ud;
  s->calls++;
  if (i == s->fail_at) return -1;
  return (i + j + b + 2 * h) % 3 == 0 ? 7 : 0;
}

static void fn_masks_call_the_predicate(void **state) {
  stof_ctx *ctx = kt_ctx();
  pred_state ps = {0, -1};
  stof_mask *m, *mh, *c, *u;
  KT_OK(ctx, stof_mask_fn(ctx, pred, &ps, "mod3", 1, 1, &m));
  KT_OK(ctx, stof_mask_fn(ctx, pred, &ps, NULL, 0, 1, &mh));
  assert_string_equal(stof_mask_description(m), "fn(mod3)");
  assert_int_equal(stof_mask_varies_b(m), 1);
  assert_int_equal(stof_mask_varies_b(mh), 0);
  assert_int_equal(stof_mask_varies_h(mh), 1);
  for (int64_t i = 0; i < 20; i++)
    for (int64_t j = 0; j < 20; j++)
      assert_int_equal(stof_mask_eval(m, 1, 2, i, j), (i + j + 1 + 4) % 3 == 0);
  assert_true(ps.calls >= 400);
  /* a combination with a tensor-free mask keeps varying */
  KT_OK(ctx, stof_mask_causal(ctx, &c));
  KT_OK(ctx, stof_mask_union(c, mh, &u));
  assert_int_equal(stof_mask_varies_b(u), 0);
  assert_int_equal(stof_mask_varies_h(u), 1);
  assert_string_equal(stof_mask_description(u), "causal() | fn(?)");
  ps.fail_at = 3;
  assert_int_equal(stof_mask_eval(m, 0, 0, 3, 1), -1);
  assert_int_equal(stof_mask_eval(u, 0, 0, 3, 4), -1);
  assert_int_equal(stof_mask_eval(u, 0, 0, 3, 1), 1); /* causal decides first */
  stof_mask_free(m);
  stof_mask_free(mh);
  stof_mask_free(c);
  stof_mask_free(u);
  kt_ctx_done(ctx);
}

static void constructors_reject_bad_arguments(void **state) {
  stof_ctx *ctx = kt_ctx();
  stof_mask *m = NULL;
  kt_expect_error(ctx, stof_mask_sliding(ctx, -1, &m), STOF_ERR_ARG, "sliding: w = -1 is negative");
  kt_expect_error(ctx, stof_mask_window(ctx, -2, 0, &m), STOF_ERR_ARG, "window: l = -2");
  kt_expect_error(ctx, stof_mask_window(ctx, 0, -3, &m), STOF_ERR_ARG, "window: r = -3");
  kt_expect_error(ctx, stof_mask_causal_sliding(ctx, 0, &m), STOF_ERR_ARG,
                  "causal_sliding: w = 0 must be >= 1");
  kt_expect_error(ctx, stof_mask_global(ctx, -1, &m), STOF_ERR_ARG, "global: g = -1");
  kt_expect_error(ctx, stof_mask_longformer(ctx, -5, 3, &m), STOF_ERR_ARG, "longformer: w = -5");
  kt_expect_error(ctx, stof_mask_longformer(ctx, 5, -3, &m), STOF_ERR_ARG, "longformer: g = -3");
  kt_expect_error(ctx, stof_mask_dilated(ctx, 0, 1, &m), STOF_ERR_ARG, "dilated: w = 0");
  kt_expect_error(ctx, stof_mask_dilated(ctx, 2, -1, &m), STOF_ERR_ARG, "dilated: d = -1");
  kt_expect_error(ctx, stof_mask_random_blocks(ctx, 32, 1.5, 0, &m), STOF_ERR_ARG,
                  "random_blocks: probability p = 1.5 is outside [0, 1]");
  kt_expect_error(ctx, stof_mask_random_blocks(ctx, 32, -0.1, 0, &m), STOF_ERR_ARG,
                  "random_blocks: probability p = -0.1");
  kt_expect_error(ctx, stof_mask_random_blocks(ctx, 32, NAN, 0, &m), STOF_ERR_ARG,
                  "random_blocks: probability p = nan");
  kt_expect_error(ctx, stof_mask_random_blocks(ctx, 0, 0.5, 0, &m), STOF_ERR_ARG,
                  "random_blocks: block size b = 0 must be >= 1");
  kt_expect_error(ctx, stof_mask_bigbird(ctx, 32, 32, 32, 1.5, 0, &m), STOF_ERR_ARG,
                  "bigbird: probability p = 1.5");
  kt_expect_error(ctx, stof_mask_bigbird(ctx, 32, 32, -4, 0.1, 0, &m), STOF_ERR_ARG,
                  "bigbird: block size b = -4");
  kt_expect_error(ctx, stof_mask_bigbird(ctx, -32, 32, 32, 0.1, 0, &m), STOF_ERR_ARG,
                  "bigbird: w = -32");
  static const int64_t len[] = {10, 0, 5}, neg[] = {-3}, nseq[] = {1, 0};
  kt_expect_error(ctx, stof_mask_document(ctx, 0, len, &m), STOF_ERR_ARG,
                  "document: empty lengths");
  kt_expect_error(ctx, stof_mask_document(ctx, 3, len, &m), STOF_ERR_ARG,
                  "document: lengths[1] = 0 must be > 0");
  kt_expect_error(ctx, stof_mask_document(ctx, 1, neg, &m), STOF_ERR_ARG,
                  "document: lengths[0] = -3");
  kt_expect_error(ctx, stof_mask_document_batched(ctx, 2, nseq, len, &m), STOF_ERR_ARG,
                  "document_batched: empty lengths for batch 1");
  kt_expect_error(ctx, stof_mask_document_batched(ctx, 0, nseq, len, &m), STOF_ERR_ARG,
                  "document_batched: no batches");
  kt_expect_error(ctx, stof_mask_document_random(ctx, 100, 0, 10, 1, &m), STOF_ERR_ARG,
                  "document_random: lengths range [0, 10]");
  kt_expect_error(ctx, stof_mask_fn(ctx, NULL, NULL, "f", 1, 1, &m), STOF_ERR_ARG,
                  "fn: predicate is NULL");
  kt_expect_error(ctx, stof_mask_suite(ctx, "nope", 128, &m), STOF_ERR_NOT_FOUND,
                  "no mask named 'nope'");

  /* tensors: wrong rank, float, empty ([4, 5] is accepted: from_tensor_takes_...) */
  stof_tensor *t3, *ns, *fl;
  int64_t s3[3] = {2, 8, 8}, s2[2] = {4, 5}, sq[2] = {8, 8};
  KT_OK(ctx, stof_tensor_new(ctx, STOF_DTYPE_BOOL, 3, s3, STOF_DEVICE_CPU, &t3));
  KT_OK(ctx, stof_tensor_new(ctx, STOF_DTYPE_BOOL, 2, s2, STOF_DEVICE_CPU, &ns));
  KT_OK(ctx, stof_tensor_new(ctx, STOF_DTYPE_F32, 2, sq, STOF_DEVICE_CPU, &fl));
  kt_expect_error(ctx, stof_mask_from_tensor(ctx, t3, &m), STOF_ERR_SHAPE,
                  "from_tensor: rank 3 tensor; a mask is [Sq, Sk] or [B, H, Sq, Sk]");
  kt_expect_error(ctx, stof_mask_from_tensor(ctx, fl, &m), STOF_ERR_TYPE,
                  "from_tensor: dtype float32");
  kt_expect_error(ctx, stof_mask_from_tensor(ctx, NULL, &m), STOF_ERR_ARG,
                  "from_tensor: tensor is NULL");
  stof_tensor_free(t3);
  stof_tensor_free(ns);
  stof_tensor_free(fl);
  assert_null(m); /* no failing call wrote a mask */

  /* operands from two contexts */
  stof_ctx *other = kt_ctx();
  stof_mask *a, *b;
  KT_OK(ctx, stof_mask_causal(ctx, &a));
  KT_OK(other, stof_mask_dense(other, &b));
  kt_expect_error(ctx, stof_mask_union(a, b, &m), STOF_ERR_ARG,
                  "union: operands come from different contexts");
  stof_mask_free(a);
  stof_mask_free(b);
  kt_ctx_done(other);
  kt_ctx_done(ctx);
}

static void suite_builds_every_canonical_mask(void **state) {
  stof_ctx *ctx = kt_ctx();
  static const char *const want[] = {"dense()", "causal()", "sliding(32)", "causal_sliding(32)",
                                     "longformer(32, 32)", "bigbird(32, 32, 32, 0.1, 0)",
                                     "document("};
  int n = 0;
  for (const char *name; (name = stof_mask_suite_name(n)); n++) {
    stof_mask *m;
    KT_OK(ctx, stof_mask_suite(ctx, name, 1024, &m));
    assert_non_null(strstr(stof_mask_description(m), want[n]));
    stof_mask_free(m);
  }
  assert_int_equal(n, 7);
  kt_ctx_done(ctx);
}

/* Issue 12: parameters past STOF_MASK_MAX_EXTENT overflowed the fill arithmetic (dilated
 * wrote out of its tile, window cut the band wrongly, document kept nothing, the suite's
 * document overflowed its buffer); now they are refused when the mask is built. */
static void constructors_refuse_parameters_past_the_limit(void **state) {
  stof_ctx *ctx = kt_ctx();
  stof_mask *m = NULL;
  const int64_t big = INT64_MAX - 1, lim = STOF_MASK_MAX_EXTENT;
  kt_expect_error(ctx, stof_mask_dilated(ctx, 3, big, &m), STOF_ERR_ARG,
                  "dilated: d = 9223372036854775806 is too large (at most 2^40 = 1099511627776)");
  kt_expect_error(ctx, stof_mask_dilated(ctx, 2, INT64_MAX, &m), STOF_ERR_ARG,
                  "dilated: d = 9223372036854775807 is too large");
  kt_expect_error(ctx, stof_mask_dilated(ctx, lim + 1, 0, &m), STOF_ERR_ARG,
                  "dilated: w = 1099511627777 is too large");
  kt_expect_error(ctx, stof_mask_window(ctx, 5, INT64_MAX, &m), STOF_ERR_ARG,
                  "window: r = 9223372036854775807 is too large");
  kt_expect_error(ctx, stof_mask_window(ctx, lim + 1, 0, &m), STOF_ERR_ARG, "window: l = ");
  kt_expect_error(ctx, stof_mask_sliding(ctx, big, &m), STOF_ERR_ARG, "sliding: w = ");
  kt_expect_error(ctx, stof_mask_causal_sliding(ctx, big, &m), STOF_ERR_ARG,
                  "causal_sliding: w = ");
  kt_expect_error(ctx, stof_mask_global(ctx, big, &m), STOF_ERR_ARG, "global: g = ");
  kt_expect_error(ctx, stof_mask_longformer(ctx, 3, big, &m), STOF_ERR_ARG,
                  "longformer: g = ");
  kt_expect_error(ctx, stof_mask_random_blocks(ctx, big, 0.5, 0, &m), STOF_ERR_ARG,
                  "random_blocks: block size b = 9223372036854775806 is too large");
  kt_expect_error(ctx, stof_mask_bigbird(ctx, 3, 3, big, 0.5, 0, &m), STOF_ERR_ARG,
                  "bigbird: block size b = ");
  static const int64_t len[] = {1, INT64_MAX, 5}, len2[] = {(int64_t)1 << 39, (int64_t)1 << 39, 1};
  kt_expect_error(ctx, stof_mask_document(ctx, 3, len, &m), STOF_ERR_ARG,
                  "document: lengths[1] = 9223372036854775807: the lengths sum past 2^40");
  kt_expect_error(ctx, stof_mask_document(ctx, 3, len2, &m), STOF_ERR_ARG,
                  "document: lengths[2] = 1: the lengths sum past 2^40");
  kt_expect_error(ctx, stof_mask_document_random(ctx, big, big / 16, big / 2, 1, &m),
                  STOF_ERR_ARG, "document_random: S = 9223372036854775806 is too large");
  kt_expect_error(ctx, stof_mask_document_random(ctx, lim, 1, 2, 1, &m), STOF_ERR_ARG,
                  "sequences (at most 2^24");
  kt_expect_error(ctx, stof_mask_suite(ctx, "document", big, &m), STOF_ERR_ARG,
                  "mask suite: document: S = 9223372036854775806 must be in [1, 2^40");
  assert_null(m);
  /* at the limit: built, and the suite's document sums to S exactly */
  KT_OK(ctx, stof_mask_suite(ctx, "document", lim, &m));
  assert_int_equal(stof_mask_eval(m, 0, 0, lim - 1, lim - 1), 1);
  assert_int_equal(stof_mask_eval(m, 0, 0, lim, lim), 0); /* past the lengths' sum */
  stof_mask_free(m);
  kt_ctx_done(ctx);
}

/* Masks at the edges of the limits: the format equals eval element by element, and a
 * window wider than the sequence is the same mask as any other wider one (issue 12:
 * window(5, 2^63 - 1) | global(1) gave another format than window(5, 100000) | global(1)). */
static void masks_at_the_limits_format_exactly(void **state) {
  stof_ctx *ctx = kt_ctx();
  const int64_t lim = STOF_MASK_MAX_EXTENT;
  stof_mask *w1, *w2, *g, *u1, *u2, *d1, *d2, *d3, *wl, *doc;
  KT_OK(ctx, stof_mask_window(ctx, 5, lim, &w1));
  KT_OK(ctx, stof_mask_window(ctx, 5, 100000, &w2));
  KT_OK(ctx, stof_mask_global(ctx, 1, &g));
  KT_OK(ctx, stof_mask_union(w1, g, &u1));
  KT_OK(ctx, stof_mask_union(w2, g, &u2));
  KT_OK(ctx, stof_mask_dilated(ctx, 3, lim, &d1));
  KT_OK(ctx, stof_mask_dilated(ctx, lim, lim, &d2));
  KT_OK(ctx, stof_mask_dilated(ctx, lim, 0, &d3));
  KT_OK(ctx, stof_mask_window(ctx, lim, lim, &wl));
  static const int64_t len[] = {1, (int64_t)1 << 39, 5};
  KT_OK(ctx, stof_mask_document(ctx, 3, len, &doc));
  const stof_mask *ms[] = {u1, u2, d1, d2, d3, wl, doc};
  for (int k = 0; k < 7; k++) {
    kt_build_and_check(ctx, ms[k], 1, 1, 200, 200, 64);
    kt_build_and_check(ctx, ms[k], 1, 1, 77, 130, 16);
  }
  stof_mask_format *f1, *f2;
  KT_OK(ctx, stof_mask_format_build(ctx, u1, 1, 1, 300, 300, 64, &f1));
  KT_OK(ctx, stof_mask_format_build(ctx, u2, 1, 1, 300, 300, 64, &f2));
  assert_int_equal(f1->nentry, f2->nentry);
  assert_int_equal(f1->nword, f2->nword);
  assert_int_equal(f1->nvalid, f2->nvalid);
  assert_memory_equal(f1->row_ptr, f2->row_ptr, sizeof(int32_t) * (size_t)(f1->nrow + 1));
  assert_memory_equal(f1->col_idx, f2->col_idx, sizeof(int32_t) * (size_t)f1->nentry);
  assert_memory_equal(f1->bitmap, f2->bitmap, sizeof(uint64_t) * (size_t)f1->nword);
  stof_mask_format_free(f1);
  stof_mask_format_free(f2);
  /* dilated(3, 2^40) at S = 100 is causal's diagonal; document(1, 2^39, 5) keeps (0, 0) */
  assert_int_equal(stof_mask_eval(d1, 0, 0, 50, 50), 1);
  assert_int_equal(stof_mask_eval(d1, 0, 0, 50, 49), 0);
  assert_int_equal(stof_mask_eval(doc, 0, 0, 0, 0), 1);
  assert_int_equal(stof_mask_eval(doc, 0, 0, 5, 3), 1);
  stof_mask *all[] = {w1, w2, g, u1, u2, d1, d2, d3, wl, doc};
  for (int k = 0; k < 10; k++) stof_mask_free(all[k]);
  kt_ctx_done(ctx);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Issue 12: m = m | global(k % 7) for k = 1..N deep-copied both operands (and their
 * descriptions) at each step: 17 GB and 48 s at N = 2000. Combinations now share their
 * operands: memory linear in N, descriptions short. */
static void combining_many_masks_costs_linear_memory(void **state) {
  stof_ctx *ctx = kt_ctx();
  enum { N = 5000 };
  stof_mask **ms = calloc(N + 1, sizeof *ms);
  assert_non_null(ms);
  double t0 = now_s();
  size_t before = stof_ctx_bytes_in_use(ctx);
  KT_OK(ctx, stof_mask_global(ctx, 0, &ms[0]));
  for (int k = 1; k <= N; k++) {
    stof_mask *g;
    KT_OK(ctx, stof_mask_global(ctx, k % 7, &g));
    KT_OK(ctx, stof_mask_union(ms[k - 1], g, &ms[k]));
    stof_mask_free(g); /* the union keeps what it needs */
  }
  size_t used = stof_ctx_bytes_in_use(ctx) - before;
  double dt = now_s() - t0;
  printf("# %d unions: %zu bytes (%.0f per union), %.3f s\n", N, used, (double)used / N, dt);
  assert_true(used < (size_t)N * 1024); /* O(N): a node, a handle, a short description */
  assert_true(dt < 5.0);
  const char *d = stof_mask_description(ms[N]);
  assert_true(strlen(d) <= 256);
  assert_non_null(strstr(d, "global(0) | global(1) | global(2)"));
  assert_non_null(strstr(d, " ... #"));
  /* the same union built again has the same description; one more term changes it */
  assert_string_not_equal(d, stof_mask_description(ms[N - 1]));
  /* the mask is global(6) */
  for (int64_t i = 0; i < 20; i++)
    for (int64_t j = 0; j < 20; j++)
      assert_int_equal(stof_mask_eval(ms[N], 0, 0, i, j), i < 6 || j < 6);
  kt_build_and_check(ctx, ms[N], 1, 1, 100, 90, 32);
  /* the cache keys on the exact text: two masks whose short descriptions agree on the
   * head are told apart, one mask built twice is found again */
  stof_mask_cache *c;
  const stof_mask_format *f1, *f2, *f3;
  KT_OK(ctx, stof_mask_cache_new(ctx, 4, &c));
  KT_OK(ctx, stof_mask_cache_get(c, ms[N], 1, 1, 64, 64, 16, &f1));
  KT_OK(ctx, stof_mask_cache_get(c, ms[N - 1], 1, 1, 64, 64, 16, &f2));
  KT_OK(ctx, stof_mask_cache_get(c, ms[N], 1, 1, 64, 64, 16, &f3));
  assert_ptr_not_equal(f1, f2);
  assert_ptr_equal(f1, f3);
  stof_mask_cache_free(c);
  /* freed in any order: every other one first, then the rest backwards */
  for (int k = 0; k <= N; k += 2) stof_mask_free(ms[k]);
  for (int k = N - (N % 2 ? 0 : 1); k >= 1; k -= 2) stof_mask_free(ms[k]);
  free(ms);
  kt_ctx_done(ctx);
}

/* A combination deeper than STOF_MASK_MAX_DEPTH is refused (the evaluators recurse). */
static void combinations_past_the_depth_limit_are_refused(void **state) {
  stof_ctx *ctx = kt_ctx();
  stof_mask *m, *g;
  KT_OK(ctx, stof_mask_causal(ctx, &m));
  KT_OK(ctx, stof_mask_global(ctx, 2, &g));
  for (int k = 1; k < STOF_MASK_MAX_DEPTH; k++) {
    stof_mask *n;
    KT_OK(ctx, stof_mask_difference(m, g, &n));
    stof_mask_free(m);
    m = n;
  }
  stof_mask *n = NULL;
  kt_expect_error(ctx, stof_mask_union(g, m, &n), STOF_ERR_ARG,
                  "union: the result would be 8192 combinations deep (at most 8191)");
  assert_null(n);
  /* the deepest mask still builds formats and evaluates (it is causal - global(2)) */
  assert_int_equal(stof_mask_eval(m, 0, 0, 10, 5), 1);
  assert_int_equal(stof_mask_eval(m, 0, 0, 10, 1), 0);
  kt_build_and_check(ctx, m, 1, 1, 40, 40, 16);
  stof_mask_free(m);
  stof_mask_free(g);
  kt_ctx_done(ctx);
}

/* Issue 12, item 14: f:expand() gives [Sq, Sk] tensors that from_tensor refused. */
static void from_tensor_takes_masks_of_unequal_lengths(void **state) {
  stof_ctx *ctx = kt_ctx();
  stof_tensor *t;
  int64_t sh[4] = {2, 1, 70, 130};
  KT_OK(ctx, stof_tensor_rand(ctx, STOF_DTYPE_BOOL, 4, sh, 3, &t));
  stof_mask *m;
  KT_OK(ctx, stof_mask_from_tensor(ctx, t, &m));
  assert_non_null(strstr(stof_mask_description(m), "from_tensor(2x1x70x130, #"));
  for (int64_t b = 0; b < 2; b++)
    for (int64_t i = 0; i < 70; i++)
      for (int64_t j = 0; j < 130; j++)
        assert_int_equal(stof_mask_eval(m, b, 0, i, j),
                         stof_tensor_load(t, b * t->strides[0] + i * t->strides[2] +
                                                 j * t->strides[3]) != 0);
  assert_int_equal(stof_mask_eval(m, 0, 0, 70, 0), 0);
  assert_int_equal(stof_mask_eval(m, 0, 0, 0, 130), 0);
  kt_build_and_check(ctx, m, 2, 3, 70, 130, 32);
  stof_mask_format *f = NULL;
  kt_expect_error(ctx, stof_mask_format_build(ctx, m, 2, 1, 130, 70, 64, &f), STOF_ERR_ARG,
                  "is 70 x 130, the format 130 x 70");
  /* the format's expansion goes back through from_tensor */
  stof_mask_format *g;
  KT_OK(ctx, stof_mask_format_build(ctx, m, 2, 1, 70, 130, 64, &g));
  stof_tensor *e;
  int64_t es[2] = {70, 130};
  KT_OK(ctx, stof_tensor_new(ctx, STOF_DTYPE_BOOL, 2, es, STOF_DEVICE_CPU, &e));
  KT_OK(ctx, stof_mask_format_expand(g, 1, 0, e));
  stof_mask *back;
  KT_OK(ctx, stof_mask_from_tensor(ctx, e, &back));
  for (int64_t i = 0; i < 70; i++)
    for (int64_t j = 0; j < 130; j++)
      assert_int_equal(stof_mask_eval(back, 0, 0, i, j), stof_mask_eval(m, 1, 0, i, j));
  stof_mask_free(back);
  stof_tensor_free(e);
  stof_mask_format_free(g);
  stof_mask_free(m);
  stof_tensor_free(t);
  kt_ctx_done(ctx);
}

int run_mask_tests(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(eval_matches_direct_predicates),
      cmocka_unit_test(bigbird_is_longformer_or_random_blocks),
      cmocka_unit_test(combinations_follow_set_algebra_and_outlive_operands),
      cmocka_unit_test(describe_names_masks_and_combinations),
      cmocka_unit_test(random_blocks_are_reproducible_and_near_p),
      cmocka_unit_test(document_batched_varies_with_b),
      cmocka_unit_test(document_random_lengths_sum_to_S_within_range),
      cmocka_unit_test(from_tensor_copies_and_matches_the_tensor),
      cmocka_unit_test(fn_masks_call_the_predicate),
      cmocka_unit_test(constructors_reject_bad_arguments),
      cmocka_unit_test(suite_builds_every_canonical_mask),
      cmocka_unit_test(constructors_refuse_parameters_past_the_limit),
      cmocka_unit_test(masks_at_the_limits_format_exactly),
      cmocka_unit_test(combining_many_masks_costs_linear_memory),
      cmocka_unit_test(combinations_past_the_depth_limit_are_refused),
      cmocka_unit_test(from_tensor_takes_masks_of_unequal_lengths),
  };
  return cmocka_run_group_tests_name("mask", tests, NULL, NULL);
}
