/* The two-level mask format: exact reproduction of every mask at every tile size, the
 * instances of per-batch and per-head masks, statistics, long sequences (timed), bad
 * arguments, expansion, comparison and the cache. */
#include "helpers.h"
#include "kernels_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const int tile_sizes[] = {16, 32, 48, 64, 128};
#define NTILE ((int)(sizeof tile_sizes / sizeof tile_sizes[0]))

/* Checks mask (one instance) at every tile size, with one reference for all of them. */
static void check_all_tiles(stof_ctx *ctx, const stof_mask *mask, int64_t Sq, int64_t Sk) {
  uint8_t *ref = kt_reference(mask, 0, 0, Sq, Sk);
  for (int t = 0; t < NTILE; t++) {
    stof_mask_format *f;
    KT_OK(ctx, stof_mask_format_build(ctx, mask, 1, 1, Sq, Sk, tile_sizes[t], &f));
    kt_check_format_refs(f, mask, &ref);
    stof_mask_format_free(f);
  }
  free(ref);
}

/* A tensor mask [S, S] equal to another mask (structured: full and empty tiles). */
static stof_mask *tensor_copy_of(stof_ctx *ctx, const stof_mask *m, int64_t S) {
  stof_tensor *t;
  int64_t sh[2] = {S, S};
  KT_OK(ctx, stof_tensor_new(ctx, STOF_DTYPE_BOOL, 2, sh, STOF_DEVICE_CPU, &t));
  for (int64_t i = 0; i < S; i++)
    for (int64_t j = 0; j < S; j++) stof_tensor_store(t, i * S + j, stof_mask_eval(m, 0, 0, i, j));
  stof_mask *out;
  KT_OK(ctx, stof_mask_from_tensor(ctx, t, &out));
  stof_tensor_free(t);
  return out;
}

static void format_reproduces_canonical_masks_exactly(void **state) {
  stof_ctx *ctx = kt_ctx();
  static const int64_t sizes[] = {1000, 256, 65};
  for (int s = 0; s < 3; s++)
    for (int k = 0; stof_mask_suite_name(k); k++) {
      stof_mask *m;
      KT_OK(ctx, stof_mask_suite(ctx, stof_mask_suite_name(k), sizes[s], &m));
      check_all_tiles(ctx, m, sizes[s], sizes[s]);
      stof_mask_free(m);
    }
  kt_ctx_done(ctx);
}

/* Masks beyond the suite, built for sequence length S (NULL-terminated into out). */
static int extra_masks(stof_ctx *ctx, int64_t S, stof_mask **out) {
  int n = 0;
  stof_mask *a, *b;
  KT_OK(ctx, stof_mask_dilated(ctx, 8, 3, &out[n++]));
  KT_OK(ctx, stof_mask_dilated(ctx, 40, 0, &out[n++]));
  KT_OK(ctx, stof_mask_window(ctx, 3, 70, &out[n++]));
  KT_OK(ctx, stof_mask_global(ctx, 20, &out[n++]));
  KT_OK(ctx, stof_mask_random_blocks(ctx, 16, 0.4, 5, &out[n++]));
  KT_OK(ctx, stof_mask_random_blocks(ctx, 7, 0.5, 3, &out[n++]));
  /* causal_sliding(20) | global(9) */
  KT_OK(ctx, stof_mask_causal_sliding(ctx, 20, &a));
  KT_OK(ctx, stof_mask_global(ctx, 9, &b));
  KT_OK(ctx, stof_mask_union(a, b, &out[n++]));
  stof_mask_free(a);
  stof_mask_free(b);
  /* document & causal */
  KT_OK(ctx, stof_mask_suite(ctx, "document", S, &a));
  KT_OK(ctx, stof_mask_causal(ctx, &b));
  KT_OK(ctx, stof_mask_intersection(a, b, &out[n++]));
  stof_mask_free(a);
  stof_mask_free(b);
  /* sliding(50) - sliding(10): a band with a hole */
  KT_OK(ctx, stof_mask_sliding(ctx, 50, &a));
  KT_OK(ctx, stof_mask_sliding(ctx, 10, &b));
  KT_OK(ctx, stof_mask_difference(a, b, &out[n++]));
  stof_mask_free(a);
  stof_mask_free(b);
  /* dense - random_blocks(24, 0.5, 2) */
  KT_OK(ctx, stof_mask_dense(ctx, &a));
  KT_OK(ctx, stof_mask_random_blocks(ctx, 24, 0.5, 2, &b));
  KT_OK(ctx, stof_mask_difference(a, b, &out[n++]));
  stof_mask_free(a);
  stof_mask_free(b);
  /* a document that ends before S: the positions past it see nothing */
  int64_t len[2] = {S / 3, 5};
  KT_OK(ctx, stof_mask_document(ctx, 2, len, &out[n++]));
  /* tensors: random bits, and a copy of bigbird (full, partial and empty tiles) */
  stof_tensor *t;
  int64_t sh[2] = {S, S};
  KT_OK(ctx, stof_tensor_rand(ctx, STOF_DTYPE_BOOL, 2, sh, 17, &t));
  KT_OK(ctx, stof_mask_from_tensor(ctx, t, &out[n++]));
  stof_tensor_free(t);
  KT_OK(ctx, stof_mask_bigbird(ctx, 16, 8, 32, 0.2, 4, &a));
  out[n++] = tensor_copy_of(ctx, a, S);
  stof_mask_free(a);
  /* a union of a tensor and an analytic mask */
  KT_OK(ctx, stof_mask_causal_sliding(ctx, 5, &a));
  b = tensor_copy_of(ctx, out[4], S);
  KT_OK(ctx, stof_mask_union(a, b, &out[n++]));
  stof_mask_free(a);
  stof_mask_free(b);
  out[n] = NULL;
  return n;
}

static void format_reproduces_other_masks_and_combinations_exactly(void **state) {
  stof_ctx *ctx = kt_ctx();
  static const int64_t sizes[] = {1000, 256, 65};
  for (int s = 0; s < 3; s++) {
    stof_mask *m[20];
    int n = extra_masks(ctx, sizes[s], m);
    for (int k = 0; k < n; k++) {
      check_all_tiles(ctx, m[k], sizes[s], sizes[s]);
      stof_mask_free(m[k]);
    }
  }
  kt_ctx_done(ctx);
}

static void format_reproduces_masks_at_S_3000_exactly(void **state) {
  stof_ctx *ctx = kt_ctx();
  /* one tile size per mask, in turn: every mask and every tile size at least once */
  for (int k = 0; stof_mask_suite_name(k); k++) {
    stof_mask *m;
    KT_OK(ctx, stof_mask_suite(ctx, stof_mask_suite_name(k), 3000, &m));
    kt_build_and_check(ctx, m, 1, 1, 3000, 3000, tile_sizes[(k + 3) % NTILE]);
    stof_mask_free(m);
  }
  kt_ctx_done(ctx);
}

static void format_handles_unequal_query_and_key_lengths(void **state) {
  stof_ctx *ctx = kt_ctx();
  static const int64_t dims[][2] = {{300, 1000}, {1000, 65}, {129, 47}};
  for (int d = 0; d < 3; d++) {
    int64_t Sq = dims[d][0], Sk = dims[d][1], S = Sq > Sk ? Sq : Sk;
    stof_mask *m[5];
    KT_OK(ctx, stof_mask_causal(ctx, &m[0]));
    KT_OK(ctx, stof_mask_suite(ctx, "bigbird", S, &m[1]));
    KT_OK(ctx, stof_mask_suite(ctx, "document", S, &m[2]));
    KT_OK(ctx, stof_mask_dilated(ctx, 6, 2, &m[3]));
    KT_OK(ctx, stof_mask_window(ctx, 0, 40, &m[4]));
    for (int k = 0; k < 5; k++) {
      check_all_tiles(ctx, m[k], Sq, Sk);
      stof_mask_free(m[k]);
    }
  }
  kt_ctx_done(ctx);
}

static int pred_bh(void *ud, int64_t b, int64_t h, int64_t i, int64_t j) {
  (void)ud;
  return j <= i && (i - j) % (b + h + 2) == 0;
}

static void format_instances_follow_batch_and_head(void **state) {
  stof_ctx *ctx = kt_ctx();
  const int64_t S = 100;
  stof_tensor *t;
  stof_mask *m;
  stof_mask_format *f;
  /* [2, 3, S, S]: one instance per (b, h) */
  int64_t sh[4] = {2, 3, S, S};
  KT_OK(ctx, stof_tensor_rand(ctx, STOF_DTYPE_BOOL, 4, sh, 23, &t));
  KT_OK(ctx, stof_mask_from_tensor(ctx, t, &m));
  KT_OK(ctx, stof_mask_format_build(ctx, m, 2, 3, S, S, 32, &f));
  assert_int_equal(f->nmask, 6);
  assert_int_equal(stof_mask_format_instance(f, 1, 2), 5);
  assert_int_equal(stof_mask_format_instance(f, 2, 0), -1);
  kt_check_format(f, m);
  stof_mask_format_free(f);
  stof_mask_free(m);
  stof_tensor_free(t);
  /* [1, 3, S, S] with B = 4: instances per head only */
  int64_t sh1[4] = {1, 3, S, S};
  KT_OK(ctx, stof_tensor_rand(ctx, STOF_DTYPE_BOOL, 4, sh1, 29, &t));
  KT_OK(ctx, stof_mask_from_tensor(ctx, t, &m));
  KT_OK(ctx, stof_mask_format_build(ctx, m, 4, 3, S, S, 48, &f));
  assert_int_equal(f->mask_b, 1);
  assert_int_equal(f->mask_h, 3);
  assert_int_equal(stof_mask_format_instance(f, 3, 2), 2);
  kt_check_format(f, m);
  for (int64_t b = 0; b < 4; b++)
    for (int64_t i = 0; i < S; i += 3)
      for (int64_t j = 0; j < S; j += 5)
        assert_int_equal(stof_mask_format_get(f, b, 1, i, j), stof_mask_eval(m, 0, 1, i, j));
  stof_mask_format_free(f);
  stof_mask_free(m);
  stof_tensor_free(t);
  /* a document mask per batch element, with heads */
  static const int64_t nseq[] = {2, 1, 3}, len[] = {40, 60, 77, 10, 20, 30};
  KT_OK(ctx, stof_mask_document_batched(ctx, 3, nseq, len, &m));
  for (int t2 = 0; t2 < NTILE; t2++) {
    KT_OK(ctx, stof_mask_format_build(ctx, m, 3, 2, S, S, tile_sizes[t2], &f));
    assert_int_equal(f->mask_b, 3);
    assert_int_equal(f->mask_h, 1);
    assert_int_equal(stof_mask_format_instance(f, 2, 1), 2);
    kt_check_format(f, m);
    stof_mask_format_free(f);
  }
  stof_mask_free(m);
  /* fn masks vary with both */
  KT_OK(ctx, stof_mask_fn(ctx, pred_bh, NULL, "bh", 1, 1, &m));
  KT_OK(ctx, stof_mask_format_build(ctx, m, 2, 2, 70, 90, 16, &f));
  assert_int_equal(f->nmask, 4);
  kt_check_format(f, m);
  stof_mask_format_free(f);
  stof_mask_free(m);
  kt_ctx_done(ctx);
}

static void format_statistics_match_known_counts(void **state) {
  stof_ctx *ctx = kt_ctx();
  stof_mask *m;
  stof_mask_format *f;
  /* dense, 256 x 256, T = 64: 16 full tiles, no bitmap */
  KT_OK(ctx, stof_mask_dense(ctx, &m));
  KT_OK(ctx, stof_mask_format_build(ctx, m, 2, 12, 256, 256, 64, &f));
  assert_int_equal(f->nmask, 1);
  assert_int_equal(f->ntile_full, 16);
  assert_int_equal(f->ntile_partial, 0);
  assert_int_equal(f->nword, 0);
  assert_int_equal(f->nvalid, 256 * 256);
  assert_true(f->density == 1.0 && f->frac16 == 1.0);
  assert_int_equal(f->bytes, 5 * 4 + 16 * 8);
  stof_mask_format_free(f);
  /* dense, 65 x 65, T = 64: one full tile, three edge tiles are partial */
  KT_OK(ctx, stof_mask_format_build(ctx, m, 1, 1, 65, 65, 64, &f));
  assert_int_equal(f->ntile_full, 1);
  assert_int_equal(f->ntile_partial, 3);
  assert_int_equal(f->bmp_off[0], -1);
  assert_int_equal(f->nvalid, 65 * 65);
  stof_mask_format_free(f);
  stof_mask_free(m);
  /* causal, 1000 x 1000, T = 16: S(S+1)/2 kept; the 63 diagonal tiles and the 62 others
   * of the last row (8 rows: it crosses the edge) are partial, 61 * 62 / 2 full */
  KT_OK(ctx, stof_mask_causal(ctx, &m));
  KT_OK(ctx, stof_mask_format_build(ctx, m, 1, 1, 1000, 1000, 16, &f));
  assert_int_equal(f->nvalid, 1000 * 1001 / 2);
  assert_int_equal(f->ntile_partial, 63 + 62);
  assert_int_equal(f->ntile_full, 61 * 62 / 2);
  assert_int_equal(f->ntile_empty, 63 * 63 - 125 - 61 * 62 / 2);
  assert_int_equal(f->nword, 125 * 4);
  assert_int_equal(f->npartial[62], 63);
  assert_int_equal(f->nfull[62], 0);
  assert_int_equal(f->nfull[61], 61);
  /* bitmap of the first diagonal tile: inner (0,0) lower triangle, (0,1) empty,
   * (1,0) full, (1,1) lower triangle (words column-major: (ri, ci) at ci * 2 + ri) */
  const uint64_t tri = 0xff7f3f1f0f070301ull; /* row r: columns 0..r */
  assert_int_equal(f->bmp_off[0], 0);
  assert_true(f->bitmap[0] == tri);          /* (ri 0, ci 0) */
  assert_true(f->bitmap[1] == ~(uint64_t)0); /* (ri 1, ci 0) */
  assert_true(f->bitmap[2] == 0);            /* (ri 0, ci 1) */
  assert_true(f->bitmap[3] == tri);          /* (ri 1, ci 1) */
  stof_mask_format_free(f);
  stof_mask_free(m);
  kt_ctx_done(ctx);
}

/* Analytic counts for long sequences. */
static int64_t count_expected(const char *name, int64_t S, const stof_mask *m) {
  int64_t n = 0;
  if (!strcmp(name, "dense")) return S * S;
  if (!strcmp(name, "causal")) return S * (S + 1) / 2;
  for (int64_t i = 0; i < S; i++) {
    int64_t lo = i - 32 > 0 ? i - 32 : 0, hi = i + 32 < S - 1 ? i + 32 : S - 1;
    if (!strcmp(name, "sliding")) n += hi - lo + 1;
    else if (!strcmp(name, "causal_sliding")) n += i + 1 < 32 ? i + 1 : 32;
    else if (!strcmp(name, "longformer")) {
      if (i < 32) n += S;
      else n += (hi - lo + 1) + 32 - (lo < 32 ? 32 - lo : 0);
    }
  }
  if (!strcmp(name, "document")) {
    int64_t start = 0;
    for (int64_t i = 1; i <= S; i++)
      if (i == S || !stof_mask_eval(m, 0, 0, i, i - 1)) {
        n += (i - start) * (i - start);
        start = i;
      }
  }
  return n;
}

static void format_builds_long_sequences_fast(void **state) {
  stof_ctx *ctx = kt_ctx();
  static const int64_t sizes[] = {4096, 8192};
  static const int tiles[] = {16, 64, 128};
  printf("# mask format build times (ms), one instance\n");
  printf("# %-16s %6s %4s %10s %8s %8s %8s %9s\n", "mask", "S", "T", "build_ms", "density",
         "frac16", "partial", "bytes");
  for (int s = 0; s < 2; s++) {
    int64_t S = sizes[s];
    for (int k = 0; stof_mask_suite_name(k); k++) {
      const char *name = stof_mask_suite_name(k);
      stof_mask *m;
      KT_OK(ctx, stof_mask_suite(ctx, name, S, &m));
      int64_t want = count_expected(name, S, m);
      double lf_density = (double)count_expected("longformer", S, m) / ((double)S * S);
      for (int t = 0; t < 3; t++) {
        stof_mask_format *f;
        KT_OK(ctx, stof_mask_format_build(ctx, m, 16, 12, S, S, tiles[t], &f));
        printf("# %-16s %6lld %4d %10.2f %8.4f %8.4f %8lld %9zu\n", name, (long long)S,
               tiles[t], f->build_ms, f->density, f->frac16, (long long)f->ntile_partial,
               f->bytes);
        if (strcmp(name, "bigbird") != 0) assert_int_equal(f->nvalid, want);
        else assert_true(fabs(f->density - (lf_density + 0.1 * (1 - lf_density))) < 0.02);
        /* a sample of elements against eval */
        uint64_t x = 12345;
        for (int q = 0; q < 20000; q++) {
          x = x * 6364136223846793005ull + 1442695040888963407ull;
          int64_t i = (int64_t)((x >> 20) % (uint64_t)S), j = (int64_t)((x >> 40) % (uint64_t)S);
          if (q & 1) j = i + (int64_t)((x >> 8) % 97) - 48; /* near the diagonal */
          if (j < 0 || j >= S) continue;
          assert_int_equal(stof_mask_format_get(f, 0, 0, i, j), stof_mask_eval(m, 0, 0, i, j));
        }
        stof_mask_format_free(f);
      }
      stof_mask_free(m);
    }
  }
  kt_ctx_done(ctx);
}

static int pred_fails(void *ud, int64_t b, int64_t h, int64_t i, int64_t j) {
  return i == 40 && j == 3 ? -1 : 1;
}

static void format_rejects_bad_arguments(void **state) {
  stof_ctx *ctx = kt_ctx();
  stof_mask *m;
  stof_mask_format *f = NULL;
  KT_OK(ctx, stof_mask_causal(ctx, &m));
  kt_expect_error(ctx, stof_mask_format_build(ctx, m, 1, 1, 128, 128, 20, &f), STOF_ERR_ARG,
                  "mask_format_build: tile size T = 20 must be a multiple of 16 in [16, 128]");
  kt_expect_error(ctx, stof_mask_format_build(ctx, m, 1, 1, 128, 128, 256, &f), STOF_ERR_ARG,
                  "tile size T = 256");
  kt_expect_error(ctx, stof_mask_format_build(ctx, m, 1, 1, 128, 128, 8, &f), STOF_ERR_ARG,
                  "tile size T = 8");
  kt_expect_error(ctx, stof_mask_format_build(ctx, m, 1, 1, 128, 128, 0, &f), STOF_ERR_ARG,
                  "tile size T = 0");
  kt_expect_error(ctx, stof_mask_format_build(ctx, m, 1, 1, 0, 128, 64, &f), STOF_ERR_ARG,
                  "extents must be >= 1 (B = 1, H = 1, Sq = 0, Sk = 128)");
  kt_expect_error(ctx, stof_mask_format_build(ctx, m, 0, 1, 10, 10, 64, &f), STOF_ERR_ARG,
                  "B = 0");
  stof_mask_free(m);
  /* a tensor mask of another size or batch */
  stof_tensor *t;
  int64_t sh[4] = {2, 1, 64, 64};
  KT_OK(ctx, stof_tensor_rand(ctx, STOF_DTYPE_BOOL, 4, sh, 1, &t));
  KT_OK(ctx, stof_mask_from_tensor(ctx, t, &m));
  stof_tensor_free(t);
  kt_expect_error(ctx, stof_mask_format_build(ctx, m, 2, 1, 65, 65, 64, &f), STOF_ERR_ARG,
                  "is 64 x 64, the format 65 x 65");
  kt_expect_error(ctx, stof_mask_format_build(ctx, m, 3, 1, 64, 64, 64, &f), STOF_ERR_ARG,
                  "has B = 2, the format B = 3");
  stof_mask *c, *u;
  KT_OK(ctx, stof_mask_causal(ctx, &c));
  KT_OK(ctx, stof_mask_intersection(c, m, &u));
  kt_expect_error(ctx, stof_mask_format_build(ctx, u, 2, 1, 64, 32, 64, &f), STOF_ERR_ARG,
                  "the format 64 x 32");
  stof_mask_free(m);
  stof_mask_free(c);
  stof_mask_free(u);
  /* a batched document mask with another B */
  static const int64_t nseq[] = {1, 1}, len[] = {5, 6};
  KT_OK(ctx, stof_mask_document_batched(ctx, 2, nseq, len, &m));
  kt_expect_error(ctx, stof_mask_format_build(ctx, m, 4, 1, 16, 16, 16, &f), STOF_ERR_ARG,
                  "has 2 batches, the format B = 4");
  stof_mask_free(m);
  /* a failing predicate */
  KT_OK(ctx, stof_mask_fn(ctx, pred_fails, NULL, "f", 0, 0, &m));
  kt_expect_error(ctx, stof_mask_format_build(ctx, m, 1, 1, 100, 100, 32, &f), STOF_ERR_ARG,
                  "the predicate of mask fn(f) failed in tile (1, 0)");
  stof_mask_free(m);
  assert_null(f);
  kt_ctx_done(ctx);
}

static int pred_all(void *ud, int64_t b, int64_t h, int64_t i, int64_t j);

/* Issue 12: sizes are checked before anything is allocated or evaluated. Before, dense at
 * Sq = 1, Sk = 2^63 - 6 gave negative tile counts, dense at S = 10^6 took minutes and
 * gigabytes, and an fn mask at S = 2^31 ran (practically) forever. */
static void format_sizes_are_checked_before_building(void **state) {
  stof_ctx *ctx = kt_ctx();
  stof_mask *d, *fn, *doc;
  stof_mask_format *f = NULL;
  KT_OK(ctx, stof_mask_dense(ctx, &d));
  KT_OK(ctx, stof_mask_fn(ctx, pred_all, NULL, "all", 0, 0, &fn));
  static const int64_t nseq[] = {1, 1}, len[] = {5, 6};
  KT_OK(ctx, stof_mask_document_batched(ctx, 2, nseq, len, &doc));
  size_t before = stof_ctx_bytes_in_use(ctx);
  kt_expect_error(ctx, stof_mask_format_build(ctx, d, 1, 1, 1, INT64_MAX - 5, 64, &f),
                  STOF_ERR_ARG,
                  "mask_format_build: Sk = 9223372036854775802 is too large (at most 2^40");
  kt_expect_error(ctx, stof_mask_format_build(ctx, d, 1, 1, INT64_MAX, 1, 64, &f),
                  STOF_ERR_ARG, "Sq = 9223372036854775807 is too large");
  kt_expect_error(ctx, stof_mask_format_build(ctx, d, 1, 1, 1000000, 1000000, 64, &f),
                  STOF_ERR_UNSUPPORTED,
                  "mask_format_build: 1 instance of 15625 x 15625 tiles of 64 x 64 is "
                  "2.44e+08 tiles, more than a format may have (2^26 = 67108864)");
  kt_expect_error(ctx, stof_mask_format_build(ctx, d, 1, 1, 1000000, 1000000, 128, &f),
                  STOF_ERR_UNSUPPORTED,
                  "a format of 1 instance of 7813 x 7813 tiles of 128 x 128 may take up to ");
  kt_expect_error(ctx, stof_mask_format_build(ctx, d, 1, 1, 1000000, 1000000, 128, &f),
                  STOF_ERR_UNSUPPORTED, "GiB (every tile partial), more than the limit of 8.0 GiB");
  kt_expect_error(ctx, stof_mask_format_build(ctx, d, 1, 1, 1000000000, 1000000000, 64, &f),
                  STOF_ERR_UNSUPPORTED, "more than a format may have");
  /* B x H past int64 where the mask varies with b */
  kt_expect_error(ctx, stof_mask_format_build(ctx, doc, INT64_MAX, 1, 16, 16, 16, &f),
                  STOF_ERR_ARG, "has 2 batches");
  stof_mask *fnbh;
  KT_OK(ctx, stof_mask_fn(ctx, pred_all, NULL, "all", 1, 1, &fnbh));
  kt_expect_error(ctx, stof_mask_format_build(ctx, fnbh, (int64_t)1 << 40, (int64_t)1 << 40,
                                              16, 16, 16, &f),
                  STOF_ERR_UNSUPPORTED, "over 9.2e+18 tiles");
  stof_mask_free(fnbh);
  /* fn masks: Sq x Sk x instances predicate calls */
  kt_expect_error(ctx, stof_mask_format_build(ctx, fn, 1, 1, (int64_t)1 << 31,
                                              (int64_t)1 << 31, 128, &f),
                  STOF_ERR_UNSUPPORTED, "more than a format may have");
  kt_expect_error(ctx, stof_mask_format_build(ctx, fn, 1, 1, 8193, 8192, 128, &f),
                  STOF_ERR_UNSUPPORTED,
                  "mask fn(all) calls a predicate for each element: 1 instance x 8193 x 8192 = "
                  "6.71e+07 calls, more than the limit of 2^26 = 67108864");
  assert_null(f);
  assert_int_equal(stof_ctx_bytes_in_use(ctx), before);
  /* at the edges: an fn mask on exactly 2^26 elements builds */
  KT_OK(ctx, stof_mask_format_build(ctx, fn, 1, 1, 8192, 8192, 128, &f));
  assert_int_equal(f->nvalid, STOF_MASK_FN_MAX_EVALS);
  stof_mask_format_free(f);
  /* ... and: the largest single-instance grid that passes builds, exactly */
  KT_OK(ctx, stof_mask_format_build(ctx, d, 1, 1, 1, STOF_MASK_MAX_EXTENT / 4096, 16, &f));
  assert_int_equal(f->nvalid, STOF_MASK_MAX_EXTENT / 4096);
  assert_int_equal(stof_mask_format_get(f, 0, 0, 0, STOF_MASK_MAX_EXTENT / 4096 - 1), 1);
  stof_mask_format_free(f);
  stof_mask_free(d);
  stof_mask_free(fn);
  stof_mask_free(doc);
  kt_ctx_done(ctx);
}

static void format_expand_matches_get(void **state) {
  stof_ctx *ctx = kt_ctx();
  stof_mask *m;
  stof_mask_format *f;
  KT_OK(ctx, stof_mask_suite(ctx, "bigbird", 200, &m));
  KT_OK(ctx, stof_mask_format_build(ctx, m, 1, 1, 200, 150, 48, &f));
  stof_tensor *ob, *oi, *bad;
  int64_t sh[2] = {200, 150}, shb[2] = {150, 200};
  KT_OK(ctx, stof_tensor_new(ctx, STOF_DTYPE_BOOL, 2, sh, STOF_DEVICE_CPU, &ob));
  KT_OK(ctx, stof_tensor_new(ctx, STOF_DTYPE_I32, 2, sh, STOF_DEVICE_CPU, &oi));
  KT_OK(ctx, stof_tensor_new(ctx, STOF_DTYPE_BOOL, 2, shb, STOF_DEVICE_CPU, &bad));
  stof_tensor_fill(oi, 7);
  KT_OK(ctx, stof_mask_format_expand(f, 0, 0, ob));
  KT_OK(ctx, stof_mask_format_expand(f, 0, 0, oi));
  for (int64_t i = 0; i < 200; i++)
    for (int64_t j = 0; j < 150; j++) {
      int v = stof_mask_format_get(f, 0, 0, i, j);
      assert_int_equal(v, stof_mask_eval(m, 0, 0, i, j));
      assert_int_equal((int)stof_tensor_load(ob, i * 150 + j), v);
      assert_int_equal((int)stof_tensor_load(oi, i * 150 + j), v);
    }
  kt_expect_error(ctx, stof_mask_format_expand(f, 0, 0, bad), STOF_ERR_SHAPE,
                  "output must be a CPU tensor [200, 150]");
  kt_expect_error(ctx, stof_mask_format_expand(f, 1, 0, ob), STOF_ERR_RANGE,
                  "(b, h) = (1, 0) outside B x H = 1 x 1");
  stof_tensor_free(ob);
  stof_tensor_free(oi);
  stof_tensor_free(bad);
  stof_mask_format_free(f);
  stof_mask_free(m);
  kt_ctx_done(ctx);
}

/* A window of 40 keys that moves with the head, and rows 0-31 empty in odd heads: one
 * instance per head. */
static int qshift_per_head(void *ud, int64_t b, int64_t h, int64_t i, int64_t j) {
  (void)ud;
  (void)b;
  if (h % 2 && i < 32) return 0;
  int64_t d = i - j + 8 * h;
  return d >= -40 && d <= 40;
}

/* kernels_format_qshift: the tile-64 format with its query tiles 32 rows up. Checked element
 * by element against the mask (kt_check_format reads row r as queries [64 r - 32, ..), its
 * counts and per-instance rows too), at lengths around the shift (1, 31, 32, 33, 96, 97: Sq
 * = 32 mod 64 ends a row exactly), Sq > Sk and Sq < Sk, several instances; expand reads it
 * as the mask; the window of 32 each side takes two tiles a row instead of three; the tile
 * limit builds nothing; the CPU attention and a second shift refuse it. */
static void format_query_shift_matches_the_mask(void **state) {
  (void)state;
  stof_ctx *ctx = kt_ctx();
  static const char *const names[] = {"sliding", "causal_sliding", "longformer", "bigbird", "document", "causal", "dense"};
  static const int64_t lens[][2] = {{1, 1}, {31, 40}, {32, 32}, {33, 33}, {96, 70}, {97, 300}, {200, 200}, {1000, 1000}};
  for (size_t n = 0; n < sizeof names / sizeof names[0]; n++)
    for (size_t l = 0; l < sizeof lens / sizeof lens[0]; l++) {
      int64_t Sq = lens[l][0], Sk = lens[l][1];
      if (!strcmp(names[n], "document") && Sq != Sk) continue; /* its lengths sum to S */
      stof_mask *m;
      KT_OK(ctx, stof_mask_suite(ctx, names[n], Sq, &m));
      stof_mask_format *f, *g;
      int64_t nt = -1;
      KT_OK(ctx, stof_mask_format_build(ctx, m, 1, 2, Sq, Sk, 64, &f));
      KT_OK(ctx, kernels_format_qshift(ctx, f, -1, &nt, NULL, &g));
      assert_non_null(g);
      assert_int_equal(g->qshift, 32);
      assert_int_equal(nt, g->ntile_full + g->ntile_partial);
      /* the bound from full tiles (limit 0): never above the count; where it passes the
       * limit, nothing is built */
      int64_t lb = -1;
      int counted = -1;
      stof_mask_format *g0 = (stof_mask_format *)(uintptr_t)1;
      KT_OK(ctx, kernels_format_qshift(ctx, f, 0, &lb, &counted, &g0));
      assert_true(counted == 0 || counted == 1);
      assert_true(lb >= 0 && lb <= nt);
      if (!counted) assert_true(lb > 0 && !g0);
      if (counted) assert_int_equal(lb, nt);
      if (g0) stof_mask_format_free(g0);
      kt_check_format(g, m);
      assert_int_equal(g->nvalid, f->nvalid);
      stof_mask_format_free(g);
      stof_mask_format_free(f);
      stof_mask_free(m);
    }
  /* one instance per head (B 2 x H 4: 4 instances), Sq > Sk and Sq = 32 (mod 64) */
  stof_mask *ph;
  KT_OK(ctx, stof_mask_fn(ctx, qshift_per_head, NULL, "qshift_per_head", 0, 1, &ph));
  stof_mask_format *f, *g;
  KT_OK(ctx, stof_mask_format_build(ctx, ph, 2, 4, 352, 200, 64, &f));
  assert_int_equal(f->nmask, 4);
  KT_OK(ctx, kernels_format_qshift(ctx, f, -1, NULL, NULL, &g));
  kt_check_format(g, ph);
  assert_int_equal(g->nrow, 6);
  stof_tensor *ex;
  int64_t sh2[2] = {352, 200};
  KT_OK(ctx, stof_tensor_new(ctx, STOF_DTYPE_BOOL, 2, sh2, STOF_DEVICE_CPU, &ex));
  for (int64_t h = 0; h < 4; h++) {
    KT_OK(ctx, stof_mask_format_expand(g, 1, h, ex));
    for (int64_t i = 0; i < 352; i++)
      for (int64_t j = 0; j < 200; j++)
        if ((int)stof_tensor_load(ex, i * 200 + j) != stof_mask_eval(ph, 1, h, i, j))
          fail_msg("expand of the shifted format: h %lld (%lld, %lld)", (long long)h, (long long)i, (long long)j);
  }
  stof_tensor_free(ex);
  stof_mask_format_free(g);
  stof_mask_format_free(f);
  stof_mask_free(ph);
  /* document and dense at 4096: the full tiles alone pass 85% of the tiles (the rule's limit),
   * so the bitmaps are not counted; sliding has no full tile there, and is counted */
  static const char *const blocky[] = {"document", "dense", "sliding"};
  stof_mask_format *g2 = NULL;
  for (int i = 0; i < 3; i++) {
    stof_mask *bm;
    KT_OK(ctx, stof_mask_suite(ctx, blocky[i], 4096, &bm));
    KT_OK(ctx, stof_mask_format_build(ctx, bm, 1, 1, 4096, 4096, 64, &f));
    int64_t n0 = f->ntile_full + f->ntile_partial, lb = -1, exact = -1;
    int counted = -1;
    g = (stof_mask_format *)(uintptr_t)1;
    KT_OK(ctx, kernels_format_qshift(ctx, f, (int64_t)(0.85 * (double)n0), &lb, &counted, &g));
    KT_OK(ctx, kernels_format_qshift(ctx, f, -1, &exact, NULL, &g2));
    assert_int_equal(counted, i == 2);
    assert_true(lb <= exact && (i == 2 ? lb == exact : lb > (int64_t)(0.85 * (double)n0)));
    if (i < 2) assert_null(g);
    if (i == 2) stof_mask_format_free(g);
    stof_mask_format_free(g2);
    stof_mask_format_free(f);
    stof_mask_free(bm);
  }
  /* sliding(32) at S = 4096: 64 rows of 3 tiles (2 at the ends) against 65 of at most 2 */
  stof_mask *sl;
  KT_OK(ctx, stof_mask_suite(ctx, "sliding", 4096, &sl));
  KT_OK(ctx, stof_mask_format_build(ctx, sl, 1, 1, 4096, 4096, 64, &f));
  int64_t nt = 0;
  g2 = (stof_mask_format *)(uintptr_t)1;
  KT_OK(ctx, kernels_format_qshift(ctx, f, 127, &nt, NULL, &g2)); /* over the limit: counted, not built */
  assert_null(g2);
  assert_int_equal(nt, 128);
  KT_OK(ctx, kernels_format_qshift(ctx, f, 128, &nt, NULL, &g));
  assert_non_null(g);
  assert_int_equal(f->ntile_full + f->ntile_partial, 190);
  assert_int_equal(g->nrow, 65);
  assert_int_equal(g->ntile_full + g->ntile_partial, 128);
  for (int32_t r = 0; r < g->nrow; r++) assert_true(g->row_ptr[r + 1] - g->row_ptr[r] <= 2);
  /* not the CPU attention's, and not shifted twice */
  g2 = (stof_mask_format *)(uintptr_t)1;
  kt_expect_error(ctx, kernels_format_qshift(ctx, g, -1, NULL, NULL, &g2), STOF_ERR_INTERNAL,
                  "needs an unshifted tile-64 format");
  assert_null(g2);
  int64_t sh[4] = {1, 1, 4096, 64};
  stof_tensor *t;
  KT_OK(ctx, stof_tensor_new(ctx, STOF_DTYPE_F32, 4, sh, STOF_DEVICE_CPU, &t));
  kt_expect_error(ctx, stof_attention_cpu(ctx, t, t, t, g, 0.125f, t), STOF_ERR_ARG, "query-shifted format");
  stof_tensor_free(t);
  stof_mask_format_free(g);
  /* only from tile 64 */
  stof_mask_format *f32;
  KT_OK(ctx, stof_mask_format_build(ctx, sl, 1, 1, 256, 256, 32, &f32));
  kt_expect_error(ctx, kernels_format_qshift(ctx, f32, -1, NULL, NULL, &g2), STOF_ERR_INTERNAL, "tile-64");
  stof_mask_format_free(f32);
  stof_mask_format_free(f);
  stof_mask_free(sl);
  kt_ctx_done(ctx);
}

/* Asserts that a and b differ and that the description names what. */
static void expect_difference(const stof_mask_format *a, const stof_mask_format *b,
                              const char *what) {
  char why[256] = "";
  assert_int_equal(stof_mask_format_compare(a, b, why, sizeof why), 1);
  if (!strstr(why, what)) fail_msg("\"%s\" does not name %s", why, what);
  assert_int_equal(stof_mask_format_compare(a, b, NULL, 0), 1);
}

static void format_compare_names_the_first_difference(void **state) {
  stof_ctx *ctx = kt_ctx();
  /* two instances (per-batch documents), full and partial tiles (boundaries off the tile) */
  stof_mask *m;
  KT_OK(ctx, stof_mask_document_batched(ctx, 2, (const int64_t[]){2, 1},
                                        (const int64_t[]){150, 150, 300}, &m));
  stof_mask_format *a, *b, *t32;
  KT_OK(ctx, stof_mask_format_build(ctx, m, 2, 3, 300, 300, 64, &a));
  KT_OK(ctx, stof_mask_format_build(ctx, m, 2, 3, 300, 300, 64, &b));
  assert_int_equal(a->nmask, 2);
  assert_true(a->ntile_full > 0 && a->ntile_partial > 0);
  char why[256] = "stale";
  assert_int_equal(stof_mask_format_compare(a, b, why, sizeof why), 0);
  assert_string_equal(why, "");
  assert_int_equal(stof_mask_format_compare(a, b, NULL, 0), 0);
  /* timings are not compared */
  b->build_ms = a->build_ms + 100, b->copy_ms = 5;
  assert_int_equal(stof_mask_format_compare(a, b, why, sizeof why), 0);
  /* one change at a time, undone after */
  b->ntile_partial++;
  assert_int_equal(stof_mask_format_compare(a, b, why, sizeof why), 1);
  char want[256];
  snprintf(want, sizeof want, "ntile_partial %lld against %lld", (long long)a->ntile_partial,
           (long long)b->ntile_partial);
  assert_string_equal(why, want);
  assert_int_equal(stof_mask_format_compare(a, b, why, 8), 1); /* truncated */
  assert_string_equal(why, "ntile_p");
  b->ntile_partial--;
  b->density += 1e-12;
  expect_difference(a, b, "density");
  b->density = a->density;
  char *desc = b->desc;
  b->desc = "another mask";
  expect_difference(a, b, "desc \"");
  b->desc = NULL;
  expect_difference(a, b, "desc");
  b->desc = desc;
  int64_t k = (int64_t)a->nrow + 1 + 2; /* instance 1, row 2 */
  b->row_ptr[k]++;
  expect_difference(a, b, "row_ptr[");
  expect_difference(a, b, "(instance 1, row 2)");
  b->row_ptr[k]--;
  k = (int64_t)a->nrow + 3;
  b->nfull[k]++;
  expect_difference(a, b, "nfull[");
  b->nfull[k]--;
  b->npartial[k]++;
  expect_difference(a, b, "npartial[");
  b->npartial[k]--;
  int32_t e = a->row_ptr[a->nrow + 1 + 1]; /* the first entry of instance 1, row 1 */
  b->col_idx[e] += 1;
  expect_difference(a, b, "col_idx[");
  expect_difference(a, b, "(instance 1, row 1)");
  b->col_idx[e] -= 1;
  int32_t p = 0;
  while (a->bmp_off[p] < 0) p++;
  b->bmp_off[p] = -1;
  expect_difference(a, b, "bmp_off[");
  b->bmp_off[p] = a->bmp_off[p];
  int64_t w = a->nword - 1;
  b->bitmap[w] ^= 1;
  assert_int_equal(stof_mask_format_compare(a, b, why, sizeof why), 1);
  snprintf(want, sizeof want, "bitmap[%lld] (partial tile %lld, word %lld) = %016llx against "
           "%016llx", (long long)w, (long long)(a->nword / 64 - 1), 63LL,
           (unsigned long long)a->bitmap[w], (unsigned long long)b->bitmap[w]);
  assert_string_equal(why, want);
  b->bitmap[w] ^= 1;
  assert_int_equal(stof_mask_format_compare(a, b, why, sizeof why), 0);
  /* a format without host arrays (kept on the device) is a difference, not a crash */
  uint64_t *bits = b->bitmap;
  b->bitmap = NULL;
  expect_difference(a, b, "the second format's arrays are not on the host");
  expect_difference(b, a, "the first format's arrays are not on the host");
  b->bitmap = bits;
  /* another tile: the first differing field is T */
  KT_OK(ctx, stof_mask_format_build(ctx, m, 2, 3, 300, 300, 32, &t32));
  expect_difference(a, t32, "T 64 against 32");
  expect_difference(t32, a, "T 32 against 64");
  stof_mask_format_free(t32);
  stof_mask_format_free(a);
  stof_mask_format_free(b);
  stof_mask_free(m);
  kt_ctx_done(ctx);
}

static void cache_returns_one_format_per_mask_and_dims(void **state) {
  stof_ctx *ctx = kt_ctx();
  stof_mask_cache *c;
  stof_mask *a, *a2, *b;
  const stof_mask_format *f1, *f2, *f3;
  KT_OK(ctx, stof_mask_cache_new(ctx, 4, &c));
  KT_OK(ctx, stof_mask_longformer(ctx, 32, 32, &a));
  KT_OK(ctx, stof_mask_longformer(ctx, 32, 32, &a2)); /* equal, built apart */
  KT_OK(ctx, stof_mask_longformer(ctx, 32, 16, &b));
  KT_OK(ctx, stof_mask_cache_get(c, a, 1, 1, 512, 512, 64, &f1));
  KT_OK(ctx, stof_mask_cache_get(c, a2, 1, 1, 512, 512, 64, &f2));
  assert_ptr_equal(f1, f2);
  KT_OK(ctx, stof_mask_cache_get(c, a, 1, 1, 512, 512, 32, &f3));
  assert_ptr_not_equal(f1, f3);
  assert_int_equal(f3->T, 32);
  KT_OK(ctx, stof_mask_cache_get(c, b, 1, 1, 512, 512, 64, &f3));
  assert_ptr_not_equal(f1, f3);
  kt_check_format(f3, b);
  int64_t hits, misses;
  stof_mask_cache_stats(c, &hits, &misses);
  assert_int_equal(hits, 1);
  assert_int_equal(misses, 3);
  kt_expect_error(ctx, stof_mask_cache_get(c, a, 1, 1, 512, 512, 20, &f3), STOF_ERR_ARG,
                  "tile size T = 20");
  stof_mask_cache_free(c);
  kt_expect_error(ctx, stof_mask_cache_new(ctx, 0, &c), STOF_ERR_ARG, "capacity 0");
  stof_mask_free(a);
  stof_mask_free(a2);
  stof_mask_free(b);
  kt_ctx_done(ctx);
}

static void cache_evicts_the_least_recently_used(void **state) {
  stof_ctx *ctx = kt_ctx();
  stof_mask_cache *c;
  stof_mask *m;
  const stof_mask_format *f;
  KT_OK(ctx, stof_mask_cache_new(ctx, 2, &c));
  KT_OK(ctx, stof_mask_causal(ctx, &m));
  KT_OK(ctx, stof_mask_cache_get(c, m, 1, 1, 100, 100, 16, &f)); /* A: miss */
  KT_OK(ctx, stof_mask_cache_get(c, m, 1, 1, 200, 200, 16, &f)); /* B: miss */
  KT_OK(ctx, stof_mask_cache_get(c, m, 1, 1, 100, 100, 16, &f)); /* A: hit */
  KT_OK(ctx, stof_mask_cache_get(c, m, 1, 1, 300, 300, 16, &f)); /* C: miss, evicts B */
  KT_OK(ctx, stof_mask_cache_get(c, m, 1, 1, 100, 100, 16, &f)); /* A: hit */
  assert_int_equal(f->Sq, 100);
  KT_OK(ctx, stof_mask_cache_get(c, m, 1, 1, 200, 200, 16, &f)); /* B: miss */
  int64_t hits, misses;
  stof_mask_cache_stats(c, &hits, &misses);
  assert_int_equal(hits, 2);
  assert_int_equal(misses, 4);
  stof_mask_cache_free(c);
  stof_mask_free(m);
  kt_ctx_done(ctx);
}

static int pred_all(void *ud, int64_t b, int64_t h, int64_t i, int64_t j) { return 1; }

static void cache_never_reuses_fn_masks(void **state) {
  stof_ctx *ctx = kt_ctx();
  stof_mask_cache *c;
  stof_mask *m;
  const stof_mask_format *f1, *f2;
  KT_OK(ctx, stof_mask_cache_new(ctx, 3, &c));
  KT_OK(ctx, stof_mask_fn(ctx, pred_all, NULL, "all", 0, 0, &m));
  KT_OK(ctx, stof_mask_cache_get(c, m, 1, 1, 64, 64, 64, &f1));
  KT_OK(ctx, stof_mask_cache_get(c, m, 1, 1, 64, 64, 64, &f2));
  assert_ptr_not_equal(f1, f2);
  assert_int_equal(f2->ntile_full, 1);
  int64_t hits, misses;
  stof_mask_cache_stats(c, &hits, &misses);
  assert_int_equal(hits, 0);
  assert_int_equal(misses, 2);
  stof_mask_cache_free(c);
  stof_mask_free(m);
  kt_ctx_done(ctx);
}

static void cache_drop_frees_one_entry_and_get_rebuilds_it(void **state) {
  stof_ctx *ctx = kt_ctx();
  stof_mask_cache *c;
  stof_mask *m, *fm;
  const stof_mask_format *f64, *f32, *again;
  KT_OK(ctx, stof_mask_cache_new(ctx, 4, &c));
  KT_OK(ctx, stof_mask_bigbird(ctx, 64, 32, 32, 0.1, 7, &m));
  KT_OK(ctx, stof_mask_fn(ctx, pred_all, NULL, "all", 0, 0, &fm));
  size_t empty = stof_ctx_bytes_in_use(ctx);
  KT_OK(ctx, stof_mask_cache_get(c, m, 1, 2, 1024, 1024, 32, &f32));
  size_t with32 = stof_ctx_bytes_in_use(ctx);
  KT_OK(ctx, stof_mask_cache_get(c, m, 1, 2, 1024, 1024, 64, &f64));
  assert_true(stof_ctx_bytes_in_use(ctx) > with32);
  /* present: freed, the other entry untouched */
  KT_OK(ctx, stof_mask_cache_drop(c, m, 1, 2, 1024, 1024, 64));
  assert_int_equal(stof_ctx_bytes_in_use(ctx), with32);
  int64_t hits, misses;
  KT_OK(ctx, stof_mask_cache_get(c, m, 1, 2, 1024, 1024, 32, &again));
  assert_ptr_equal(again, f32);
  stof_mask_cache_stats(c, &hits, &misses);
  assert_int_equal(hits, 1);
  assert_int_equal(misses, 2);
  /* get again: rebuilt, equal to a fresh build */
  KT_OK(ctx, stof_mask_cache_get(c, m, 1, 2, 1024, 1024, 64, &again));
  stof_mask_cache_stats(c, &hits, &misses);
  assert_int_equal(misses, 3);
  stof_mask_format *fresh;
  KT_OK(ctx, stof_mask_format_build(ctx, m, 1, 2, 1024, 1024, 64, &fresh));
  char why[256];
  if (stof_mask_format_compare(again, fresh, why, sizeof why)) fail_msg("rebuilt after drop: %s", why);
  stof_mask_format_free(fresh);
  /* absent (another tile, other dims, an fn mask): nothing changes */
  size_t before = stof_ctx_bytes_in_use(ctx);
  KT_OK(ctx, stof_mask_cache_drop(c, m, 1, 2, 1024, 1024, 128));
  KT_OK(ctx, stof_mask_cache_drop(c, m, 1, 1, 1024, 1024, 64));
  KT_OK(ctx, stof_mask_cache_drop(c, fm, 1, 2, 1024, 1024, 64));
  assert_int_equal(stof_ctx_bytes_in_use(ctx), before);
  KT_OK(ctx, stof_mask_cache_get(c, m, 1, 2, 1024, 1024, 64, &f64));
  assert_ptr_equal(f64, again);
  kt_expect_error(ctx, stof_mask_cache_drop(c, NULL, 1, 2, 1024, 1024, 64), STOF_ERR_ARG, "mask is NULL");
  /* both dropped: the cache holds nothing */
  KT_OK(ctx, stof_mask_cache_drop(c, m, 1, 2, 1024, 1024, 64));
  KT_OK(ctx, stof_mask_cache_drop(c, m, 1, 2, 1024, 1024, 32));
  assert_int_equal(stof_ctx_bytes_in_use(ctx), empty);
  stof_mask_cache_free(c);
  stof_mask_free(m);
  stof_mask_free(fm);
  kt_ctx_done(ctx);
}

int run_mask_format_tests(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(format_reproduces_canonical_masks_exactly),
      cmocka_unit_test(format_reproduces_other_masks_and_combinations_exactly),
      cmocka_unit_test(format_reproduces_masks_at_S_3000_exactly),
      cmocka_unit_test(format_handles_unequal_query_and_key_lengths),
      cmocka_unit_test(format_instances_follow_batch_and_head),
      cmocka_unit_test(format_statistics_match_known_counts),
      cmocka_unit_test(format_builds_long_sequences_fast),
      cmocka_unit_test(format_rejects_bad_arguments),
      cmocka_unit_test(format_sizes_are_checked_before_building),
      cmocka_unit_test(format_expand_matches_get),
      cmocka_unit_test(format_query_shift_matches_the_mask),
      cmocka_unit_test(format_compare_names_the_first_difference),
      cmocka_unit_test(cache_returns_one_format_per_mask_and_dims),
      cmocka_unit_test(cache_evicts_the_least_recently_used),
      cmocka_unit_test(cache_never_reuses_fn_masks),
      cmocka_unit_test(cache_drop_frees_one_entry_and_get_rebuilds_it),
  };
  return cmocka_run_group_tests_name("mask_format", tests, NULL, NULL);
}
