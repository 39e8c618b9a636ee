/*
 * Heavy tile-rows split across CTAs, without a GPU: the rule and table of
 * kernels_attn_split_plan (which rows, chunk boundaries, the workspace size, overflow and
 * size errors, out of memory) on real formats (longformer's global rows at long context,
 * causal, dense, per-batch documents) and on made-up row pointers; and the combine's
 * arithmetic (attention_block_sm90.cu, stof_attn_split_combine_sm90, mirrored here in C)
 * against a one-pass softmax in double, including chunks and rows that keep no key.
 */
#include "helpers.h"
#include "../core/testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels_int.h"

/* Every invariant of a split table against the row pointers it was made from: a split row
 * is cut into k = row_nchunk >= 2 consecutive chunks covering its entries in order, sizes
 * differing by at most 1 and at most chunk_tiles; the other rows are below min_tiles (or
 * would make one chunk); the per-instance lists and maxima agree. */
static void check_table(const kernels_attn_split *s, const int32_t *row_ptr, int32_t nmask, int32_t nrow,
                        int64_t BH, int T, int64_t D) {
  assert_non_null(s->table);
  const int32_t *row_nchunk = s->table + s->off_row_nchunk, *chunk_ptr = s->table + s->off_chunk_ptr,
                *chunk = s->table + s->off_chunk, *srow_ptr = s->table + s->off_srow_ptr,
                *srow = s->table + s->off_srow;
  assert_int_equal(s->ntable, (size_t)nmask * nrow + 2 * (nmask + 1) + 3 * (size_t)(s->nchunk + s->nsplit));
  int32_t nsplit_max = 0, nchunk_max = 0;
  assert_int_equal(chunk_ptr[0], 0);
  assert_int_equal(srow_ptr[0], 0);
  for (int32_t m = 0; m < nmask; m++) {
    const int32_t *rp = row_ptr + (int64_t)m * (nrow + 1);
    int32_t s_i = srow_ptr[m], c = chunk_ptr[m];
    for (int32_t r = 0; r < nrow; r++) {
      int32_t n = rp[r + 1] - rp[r], k = row_nchunk[(int64_t)m * nrow + r];
      if (!k) {
        assert_true(n < s->min_tiles || (n + s->chunk_tiles - 1) / s->chunk_tiles < 2);
        continue;
      }
      assert_true(k >= 2 && n >= s->min_tiles);
      assert_int_equal(k, (n + s->chunk_tiles - 1) / s->chunk_tiles);
      assert_int_equal(srow[3 * s_i], r);
      assert_int_equal(srow[3 * s_i + 1], c - chunk_ptr[m]);
      assert_int_equal(srow[3 * s_i + 2], k);
      s_i++;
      int32_t e = rp[r];
      for (int32_t i = 0; i < k; i++, c++) {
        int32_t size = chunk[3 * c + 2] - chunk[3 * c + 1];
        assert_int_equal(chunk[3 * c], r);
        assert_int_equal(chunk[3 * c + 1], e);
        assert_true(size >= n / k && size <= (n + k - 1) / k && size <= s->chunk_tiles && size > 0);
        e = chunk[3 * c + 2];
      }
      assert_int_equal(e, rp[r + 1]);
    }
    assert_int_equal(srow_ptr[m + 1], s_i);
    assert_int_equal(chunk_ptr[m + 1], c);
    if (s_i - srow_ptr[m] > nsplit_max) nsplit_max = s_i - srow_ptr[m];
    if (c - chunk_ptr[m] > nchunk_max) nchunk_max = c - chunk_ptr[m];
  }
  assert_int_equal(srow_ptr[nmask], s->nsplit);
  assert_int_equal(chunk_ptr[nmask], s->nchunk);
  assert_int_equal(s->nsplit_max, nsplit_max);
  assert_int_equal(s->nchunk_max, nchunk_max);
  assert_int_equal(s->rows, (int64_t)s->nsplit * (BH / nmask));
  assert_int_equal(s->chunks, (int64_t)s->nchunk * (BH / nmask));
  assert_int_equal(s->ws_bytes, (size_t)(BH * nchunk_max * T * (D + 2) * 4));
}

/* longformer(32, 32) at 1 x 32 x 131072, tile 64, D 128 with 264 slots (132 SMs, 2 CTAs each;
 * the engine counts 3 there since session 21, tests/lua/test_attention.lua has that case): the
 * global tile-row 0 (all 2,048 key tiles) is split, nothing else; chunks of about
 * ceil(32 * 2048 / 264) = 249 tiles, floor(2048 / 249) = 8 of 256 per row, so that the 256
 * chunks fit the 264 slots in one wave. */
static void split_rule_splits_longformer_global_rows(void **state) {
  (void)state;
  tu_heap heap;
  stof_ctx *ctx = tu_ctx_new(&heap);
  stof_mask *m = NULL;
  stof_mask_format *f = NULL;
  TU_OK(ctx, stof_mask_longformer(ctx, 32, 32, &m));
  TU_OK(ctx, stof_mask_format_build(ctx, m, 1, 32, 131072, 131072, 64, &f));
  assert_int_equal(f->row_ptr[1] - f->row_ptr[0], 2048);
  kernels_attn_split s;
  TU_OK(ctx, kernels_attn_split_plan(ctx, f->row_ptr, f->nmask, f->nrow, 32, 64, 128, 264, 0, &s));
  assert_int_equal(s.nsplit, 1);
  assert_int_equal(s.chunk_tiles, 256);
  assert_int_equal(s.nchunk, 8);
  assert_int_equal(s.rows, 32);
  assert_int_equal(s.chunks, 256);
  check_table(&s, f->row_ptr, f->nmask, f->nrow, 32, 64, 128);
  assert_non_null(strstr(s.why, "split 32 tile-rows of >= "));
  assert_non_null(strstr(s.why, "into 256 chunks of <= 256 tiles (automatic"));
  kernels_attn_split_free(ctx, &s);
  assert_null(s.table);
  /* never, and no device size known: nothing split */
  TU_OK(ctx, kernels_attn_split_plan(ctx, f->row_ptr, f->nmask, f->nrow, 32, 64, 128, 264, -1, &s));
  assert_int_equal(s.nsplit, 0);
  assert_null(s.table);
  assert_non_null(strstr(s.why, "no split (asked for)"));
  TU_OK(ctx, kernels_attn_split_plan(ctx, f->row_ptr, f->nmask, f->nrow, 32, 64, 128, 0, 0, &s));
  assert_int_equal(s.nsplit, 0);
  assert_non_null(strstr(s.why, "unknown"));
  stof_mask_format_free(f);
  /* at a grid shape (8 x 32 x 4096, 528 slots) the global row (64 tiles) is under a slot's
   * share of the launch's ~80,000 tiles: not split; likewise at 16 x 12 x 4096, where a
   * split measured slower (0.307 against 0.286 ms, H100) */
  TU_OK(ctx, stof_mask_format_build(ctx, m, 8, 32, 4096, 4096, 64, &f));
  TU_OK(ctx, kernels_attn_split_plan(ctx, f->row_ptr, f->nmask, f->nrow, 256, 64, 64, 528, 0, &s));
  assert_int_equal(s.nsplit, 0);
  assert_non_null(strstr(s.why, "no split (no tile-row has"));
  stof_mask_format_free(f);
  TU_OK(ctx, stof_mask_format_build(ctx, m, 16, 12, 4096, 4096, 64, &f));
  TU_OK(ctx, kernels_attn_split_plan(ctx, f->row_ptr, f->nmask, f->nrow, 192, 64, 64, 528, 0, &s));
  assert_int_equal(s.nsplit, 0);
  stof_mask_format_free(f);
  stof_mask_free(m);
  assert_int_equal(stof_ctx_bytes_in_use(ctx), 0);
  tu_ctx_free(ctx, &heap);
}

/* Causal's and dense's rows are never split automatically, at any device size. */
static void split_rule_leaves_causal_and_dense_alone(void **state) {
  (void)state;
  tu_heap heap;
  stof_ctx *ctx = tu_ctx_new(&heap);
  static const char *const names[] = {"causal", "dense", "document"};
  for (int i = 0; i < 3; i++) {
    stof_mask *m = NULL;
    stof_mask_format *f = NULL;
    TU_OK(ctx, stof_mask_suite(ctx, names[i], 16384, &m));
    TU_OK(ctx, stof_mask_format_build(ctx, m, 1, 1, 16384, 16384, 64, &f));
    for (int64_t slots = 1; slots <= 4096; slots *= 8) {
      kernels_attn_split s;
      TU_OK(ctx, kernels_attn_split_plan(ctx, f->row_ptr, f->nmask, f->nrow, 1, 64, 64, slots, 0, &s));
      if (s.nsplit) fail_msg("%s split at %lld slots: %s", names[i], (long long)slots, s.why);
    }
    stof_mask_format_free(f);
    stof_mask_free(m);
  }
  tu_ctx_free(ctx, &heap);
}

/* split N: every row of more than N tiles in chunks of at most N, per instance (per-batch
 * documents & causal: 2 instances; bigbird at an odd length), tile 64 and 128. */
static void forced_split_cuts_every_long_row(void **state) {
  (void)state;
  tu_heap heap;
  stof_ctx *ctx = tu_ctx_new(&heap);
  stof_mask *doc, *causal, *m[2];
  TU_OK(ctx, stof_mask_document_batched(ctx, 2, (const int64_t[]){2, 4},
                                        (const int64_t[]){333, 666, 10, 500, 89, 400}, &doc));
  TU_OK(ctx, stof_mask_causal(ctx, &causal));
  TU_OK(ctx, stof_mask_intersection(doc, causal, &m[0]));
  TU_OK(ctx, stof_mask_suite(ctx, "bigbird", 999, &m[1]));
  for (int i = 0; i < 2; i++)
    for (int T = 64; T <= 128; T += 64)
      for (int N = 1; N <= 7; N += 3) {
        stof_mask_format *f = NULL;
        TU_OK(ctx, stof_mask_format_build(ctx, m[i], 2, 3, 999, 999, T, &f));
        kernels_attn_split s;
        TU_OK(ctx, kernels_attn_split_plan(ctx, f->row_ptr, f->nmask, f->nrow, 6, T, 64, 132, N, &s));
        int64_t want = 0;
        for (int64_t r = 0; r < (int64_t)f->nmask * f->nrow; r++) {
          int64_t mm = r / f->nrow, rr = r % f->nrow;
          want += f->row_ptr[mm * (f->nrow + 1) + rr + 1] - f->row_ptr[mm * (f->nrow + 1) + rr] > N;
        }
        assert_int_equal(s.nsplit, want);
        assert_true(want > 0 || (T == 128 && N == 7)); /* 8 tiles a row at most there */
        if (!want) {
          assert_null(s.table);
          assert_non_null(strstr(s.why, "no split (no tile-row has 8 tiles or more)"));
          stof_mask_format_free(f);
          continue;
        }
        assert_int_equal(s.min_tiles, N + 1);
        assert_int_equal(s.chunk_tiles, N);
        check_table(&s, f->row_ptr, f->nmask, f->nrow, 6, T, 64);
        assert_non_null(strstr(s.why, "asked for"));
        kernels_attn_split_free(ctx, &s);
        stof_mask_format_free(f);
      }
  stof_mask_free(doc);
  stof_mask_free(causal);
  stof_mask_free(m[0]);
  stof_mask_free(m[1]);
  assert_int_equal(stof_ctx_bytes_in_use(ctx), 0);
  tu_ctx_free(ctx, &heap);
}

/* Bad split values, a forced split whose workspace is past 1 GiB or overflows int64 (the
 * automatic rule then does not split and says why), and out of memory for the table. */
static void split_rejects_bad_values_and_oversized_workspaces(void **state) {
  (void)state;
  tu_heap heap;
  stof_ctx *ctx = tu_ctx_new(&heap);
  int32_t rp[3] = {0, 1000000, 1000001}; /* one instance: a row of 10^6 tiles, one of 1 */
  kernels_attn_split s;
  TU_ERR(ctx, kernels_attn_split_plan(ctx, rp, 1, 2, 1, 64, 64, 132, -2, &s), STOF_ERR_ARG, "split -2");
  /* 1024 (b, h) x 10^6 chunks x 64 x 66 x 4 bytes */
  TU_ERR(ctx, kernels_attn_split_plan(ctx, rp, 1, 2, 1024, 64, 64, 132, 1, &s), STOF_ERR_UNSUPPORTED,
         "bytes of workspace");
  TU_ERR(ctx, kernels_attn_split_plan(ctx, rp, 1, 2, (int64_t)1 << 31, 128, 128, 132, 1, &s),
         STOF_ERR_UNSUPPORTED, "overflows");
  /* the automatic rule, 2^20 (b, h) over 2^30 slots, a row of 10^6 tiles among 999 of 1:
   * chunks of about 977, floor(10^6 / 977) = 1,023 per (b, h): 17 TB of workspace, so no
   * split, and why says so */
  int32_t *rp2 = malloc(sizeof *rp2 * 1001);
  assert_non_null(rp2);
  rp2[0] = 0;
  for (int r = 0; r < 1000; r++) rp2[r + 1] = rp2[r] + (r ? 1 : 1000000);
  TU_OK(ctx, kernels_attn_split_plan(ctx, rp2, 1, 1000, 1 << 20, 64, 64, (int64_t)1 << 30, 0, &s));
  assert_int_equal(s.nsplit, 0);
  assert_null(s.table);
  if (!strstr(s.why, "1023 chunks of 1048576 (b, h) pairs would need over 1 GiB")) fail_msg("why: %s", s.why);
  /* with room for it, the same row is split */
  TU_OK(ctx, kernels_attn_split_plan(ctx, rp2, 1, 1000, 1, 64, 64, 1024, 0, &s));
  assert_int_equal(s.nsplit, 1);
  check_table(&s, rp2, 1, 1000, 1, 64, 64);
  kernels_attn_split_free(ctx, &s);
  free(rp2);
  /* a table allocation that fails: STOF_ERR_NOMEM, nothing kept */
  heap.fail_at = heap.nalloc + 1;
  assert_int_equal(kernels_attn_split_plan(ctx, rp, 1, 2, 1, 64, 64, 132, 1000, &s), STOF_ERR_NOMEM);
  assert_null(s.table);
  stof_ctx_clear_error(ctx);
  heap.fail_at = 0;
  TU_OK(ctx, kernels_attn_split_plan(ctx, rp, 1, 2, 1, 64, 64, 132, 1000, &s));
  assert_int_equal(s.nchunk, 1000);
  check_table(&s, rp, 1, 2, 1, 64, 64);
  kernels_attn_split_free(ctx, &s);
  assert_int_equal(stof_ctx_bytes_in_use(ctx), 0);
  tu_ctx_free(ctx, &heap);
}

/* ---------------------------------------------------------------- the combine */

/* One chunk's partial result of one query row as the chunk kernel leaves it: the softmax in
 * base 2 over its keys (scores s, the kernel's scale to log2 sl2) with its running max m
 * (-inf while no key is kept; 0 stands in for it), the sum l and the unnormalised O. */
static void chunk_partial(const float *s, const float *v, int n, int D, float sl2, float *m2, float *l,
                          float *o) {
  float mx = -INFINITY, sum = 0;
  for (int j = 0; j < n; j++) mx = fmaxf(mx, s[j]);
  float ms = (mx == -INFINITY ? 0.f : mx) * sl2;
  for (int x = 0; x < D; x++) o[x] = 0;
  for (int j = 0; j < n; j++) {
    float p = exp2f(fmaf(s[j], sl2, -ms));
    sum += p;
    for (int x = 0; x < D; x++) o[x] += p * v[j * D + x];
  }
  *m2 = mx * sl2, *l = sum;
}

/* stof_attn_split_combine_sm90's arithmetic for one row and 8 columns (here all D). */
static void combine(int nc, const float *m2, const float *l, const float *o, int D, float *out) {
  float mx = -INFINITY;
  for (int c = 0; c < nc; c++) mx = fmaxf(mx, m2[c]);
  float ms = mx == -INFINITY ? 0.f : mx, L = 0;
  for (int x = 0; x < D; x++) out[x] = 0;
  for (int c = 0; c < nc; c++) {
    float w = exp2f(m2[c] - ms);
    L += w * l[c];
    for (int x = 0; x < D; x++) out[x] += w * o[c * D + x];
  }
  float inv = L > 0 ? 1.f / L : 0.f;
  for (int x = 0; x < D; x++) out[x] *= inv;
}

/* Random rows of up to 600 keys (some masked: -inf), cut into up to 9 chunks at random
 * (some chunks all masked, some rows all masked), scales from 0.05 to 2 and scores up to
 * +-40: the combined row equals the softmax in double within f32 rounding, and a row with
 * no kept key is exactly +0. */
static void combine_matches_the_unsplit_softmax(void **state) {
  (void)state;
  enum { D = 16, NMAX = 600, CMAX = 9 };
  static float s[NMAX], v[NMAX * D], m2[CMAX], l[CMAX], o[CMAX * D], got[D];
  uint64_t seed = 4242;
  for (int trial = 0; trial < 400; trial++) {
    int n = 1 + (int)(tu_splitmix(&seed) % NMAX), nc = 1 + (int)(tu_splitmix(&seed) % CMAX);
    float scale = (float)tu_uniform(&seed, 0.05, 2), sl2 = scale * 1.4426950408889634f;
    int pmask = (int)(tu_splitmix(&seed) % 4) * 30, all_masked = trial % 17 == 0;
    for (int j = 0; j < n; j++) {
      s[j] = (float)tu_uniform(&seed, -40, 40);
      if (all_masked || (int)(tu_splitmix(&seed) % 100) < pmask) s[j] = -INFINITY;
      for (int x = 0; x < D; x++) v[j * D + x] = (float)tu_uniform(&seed, -1, 1);
    }
    /* chunk boundaries: nc - 1 cut points, possibly repeated (empty chunks) */
    int cut[CMAX + 1];
    cut[0] = 0, cut[nc] = n;
    for (int c = 1; c < nc; c++) cut[c] = (int)(tu_splitmix(&seed) % (uint64_t)(n + 1));
    for (int c = 1; c < nc; c++) /* sort */
      for (int d = c; d > 1 && cut[d] < cut[d - 1]; d--) {
        int t = cut[d];
        cut[d] = cut[d - 1], cut[d - 1] = t;
      }
    for (int c = 0; c < nc; c++)
      chunk_partial(s + cut[c], v + cut[c] * D, cut[c + 1] - cut[c], D, sl2, &m2[c], &l[c], o + c * D);
    combine(nc, m2, l, o, D, got);
    double mx = -INFINITY, sum = 0, want[D] = {0};
    for (int j = 0; j < n; j++) mx = fmax(mx, (double)s[j] * scale);
    for (int j = 0; j < n; j++) {
      if (s[j] == -INFINITY) continue;
      double p = exp((double)s[j] * scale - mx);
      sum += p;
      for (int x = 0; x < D; x++) want[x] += p * v[j * D + x];
    }
    for (int x = 0; x < D; x++) {
      if (sum == 0) {
        if (got[x] != 0 || signbit(got[x])) fail_msg("trial %d: a row without keys gave %g, not +0", trial, got[x]);
        continue;
      }
      double w = want[x] / sum;
      if (!(fabs(got[x] - w) <= 1e-5 + 1e-4 * fabs(w)))
        fail_msg("trial %d (n %d, %d chunks, scale %g), column %d: %.8g, want %.8g", trial, n, nc, scale, x,
                 got[x], w);
    }
  }
}

/* The launch order (kernels_attn_order_plan): every row once per instance, the heavy ones
 * (>= 3x the instance's mean tiles and >= 8) first, longest first, ties by row; the others
 * last first, or longest first (ties the higher row first) where they are grouped. */
/* Whether row r of an instance (rp its row pointers) is long: >= 8 tiles and 3x the mean. */
static int long_row(const int32_t *rp, int32_t nrow, int32_t r) {
  int64_t n = rp[r + 1] - rp[r], total = rp[nrow] - rp[0];
  return n >= 8 && n * nrow >= 3 * total;
}

static void check_order(const kernels_attn_order *o, const int32_t *row_ptr, int32_t nmask, int32_t nrow) {
  for (int32_t m = 0; m < nmask; m++) {
    const int32_t *rp = row_ptr + (int64_t)m * (nrow + 1), *row = o->table + (int64_t)m * nrow;
    char *seen = calloc((size_t)nrow, 1);
    assert_non_null(seen);
    for (int32_t k = 0; k < nrow; k++) {
      int32_t r = row[k];
      assert_true(r >= 0 && r < nrow && !seen[r]);
      seen[r] = 1;
      /* an instance's long rows first (the others may fill the rest of its first nheavy) */
      if (long_row(rp, nrow, r)) assert_true(k < o->nheavy);
      if (k == 0) continue;
      int32_t p = row[k - 1];
      int64_t n = rp[r + 1] - rp[r], np = rp[p + 1] - rp[p];
      if (long_row(rp, nrow, r)) /* after long rows only, longest first, ties by row */
        assert_true(long_row(rp, nrow, p) && (np > n || (np == n && p < r)));
      else if (!long_row(rp, nrow, p) && o->group > 1) /* grouped: longest first, ties the higher row */
        assert_true(np > n || (np == n && p > r));
      else if (!long_row(rp, nrow, p)) /* the others last first */
        assert_true(p > r);
    }
    free(seen);
  }
}

static void order_rule_puts_longformer_global_rows_first(void **state) {
  (void)state;
  tu_heap heap;
  stof_ctx *ctx = tu_ctx_new(&heap);
  stof_mask *m = NULL;
  stof_mask_format *f = NULL;
  /* longformer(32, 32) at 4096, tile 64: tile-row 0 has all 64 tiles, the others 3-4 */
  TU_OK(ctx, stof_mask_longformer(ctx, 32, 32, &m));
  TU_OK(ctx, stof_mask_format_build(ctx, m, 1, 1, 4096, 4096, 64, &f));
  kernels_attn_order o;
  TU_OK(ctx, kernels_attn_order_plan(ctx, f->row_ptr, f->nmask, f->nrow, 1, 0, &o));
  assert_int_equal(o.nheavy, 1);
  assert_int_equal(o.ntable, 64);
  assert_int_equal(o.table[0], 0);
  assert_int_equal(o.table[1], 63);
  assert_int_equal(o.table[63], 1);
  check_order(&o, f->row_ptr, f->nmask, f->nrow);
  assert_non_null(strstr(o.why, "1 long tile-row a (b, h) launched first"));
  assert_non_null(strstr(o.why, "the longest 64"));
  kernels_attn_order_free(ctx, &o);
  assert_null(o.table);
  stof_mask_format_free(f);
  stof_mask_free(m);
  /* causal: its longest row is under twice its mean; dense: all equal */
  static const char *const none[] = {"causal", "dense", "sliding"};
  for (size_t i = 0; i < sizeof none / sizeof none[0]; i++) {
    TU_OK(ctx, stof_mask_suite(ctx, none[i], 4096, &m));
    TU_OK(ctx, stof_mask_format_build(ctx, m, 1, 1, 4096, 4096, 64, &f));
    TU_OK(ctx, kernels_attn_order_plan(ctx, f->row_ptr, f->nmask, f->nrow, 1, 0, &o));
    if (o.nheavy || o.table) fail_msg("%s: %d rows first", none[i], o.nheavy);
    assert_non_null(strstr(o.why, "last tile-row first (none has 3x its mean tiles"));
    stof_mask_format_free(f);
    stof_mask_free(m);
  }
  tu_ctx_free(ctx, &heap);
}

static void order_rule_on_made_up_rows(void **state) {
  (void)state;
  tu_heap heap;
  stof_ctx *ctx = tu_ctx_new(&heap);
  kernels_attn_order o;
  /* 16 rows: 60 tiles at row 12, 40 at rows 2 and 9, 1 elsewhere (153 in all, 3x the mean
   * 28.7): 12, 2, 9 first, then 15 .. 0 without them */
  int32_t rp[17] = {0};
  for (int r = 0; r < 16; r++) rp[r + 1] = rp[r] + (r == 12 ? 60 : r == 2 || r == 9 ? 40 : 1);
  TU_OK(ctx, kernels_attn_order_plan(ctx, rp, 1, 16, 1, 0, &o));
  static const int32_t want[16] = {12, 2, 9, 15, 14, 13, 11, 10, 8, 7, 6, 5, 4, 3, 1, 0};
  assert_int_equal(o.nheavy, 3);
  for (int k = 0; k < 16; k++) assert_int_equal(o.table[k], want[k]);
  check_order(&o, rp, 1, 16);
  kernels_attn_order_free(ctx, &o);
  /* two instances with different counts of long rows (3 and 1): 3 launched first of each, the
   * second's long row 5 then its next rows in the default order (15, 14) */
  int32_t rp2[34];
  memcpy(rp2, rp, sizeof rp);
  rp2[17] = rp[16];
  for (int r = 0; r < 16; r++) rp2[17 + r + 1] = rp2[17 + r] + (r == 5 ? 60 : 1);
  TU_OK(ctx, kernels_attn_order_plan(ctx, rp2, 2, 16, 1, 0, &o));
  assert_int_equal(o.nheavy, 3);
  for (int k = 0; k < 16; k++) assert_int_equal(o.table[k], want[k]);
  static const int32_t want2[16] = {5, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 4, 3, 2, 1, 0};
  for (int k = 0; k < 16; k++) assert_int_equal(o.table[16 + k], want2[k]);
  check_order(&o, rp2, 2, 16);
  kernels_attn_order_free(ctx, &o);
  /* the same two counts: both instances ordered, each by its own rows */
  for (int r = 0; r < 16; r++) rp2[17 + r + 1] = rp2[17 + r] + (r == 5 ? 60 : r == 0 || r == 7 ? 45 : 1);
  TU_OK(ctx, kernels_attn_order_plan(ctx, rp2, 2, 16, 1, 0, &o));
  assert_int_equal(o.nheavy, 3);
  assert_int_equal(o.table[16], 5);
  assert_int_equal(o.table[17], 0);
  assert_int_equal(o.table[18], 7);
  check_order(&o, rp2, 2, 16);
  kernels_attn_order_free(ctx, &o);
  /* under the floor of 8 tiles: a lone row of 7 in 16 empty ones is not moved */
  int32_t rp3[17] = {0};
  for (int r = 0; r < 16; r++) rp3[r + 1] = rp3[r] + (r == 3 ? 7 : 0);
  TU_OK(ctx, kernels_attn_order_plan(ctx, rp3, 1, 16, 1, 0, &o));
  assert_int_equal(o.nheavy, 0);
  /* an allocation that fails: STOF_ERR_NOMEM, nothing kept (tu_ctx_free checks for leaks) */
  for (int k = 1; k <= 2; k++) { /* the table, then the sort's keys */
    heap.fail_at = heap.nalloc + k;
    assert_int_equal(kernels_attn_order_plan(ctx, rp, 1, 16, 1, 0, &o), STOF_ERR_NOMEM);
    assert_null(o.table);
    assert_int_equal(o.nheavy, 0);
    stof_ctx_clear_error(ctx);
    heap.fail_at = 0;
  }
  tu_ctx_free(ctx, &heap);
}

/* The grouped order's table (kernels_attn_order_plan with group > 1): check_order's, the
 * others longest first, ties the higher row first. */
static void check_grouped(const kernels_attn_order *o, const int32_t *row_ptr, int32_t nmask, int32_t nrow) {
  assert_true(o->group > 1);
  check_order(o, row_ptr, nmask, nrow);
}

/* The grouped order's rule: the most (b, h) whose K and V fit 24 MB, at tile 64 or less
 * (kernels_attn_order_group_max); causal's and document's rows grouped longest first, with
 * the why naming the group and the span; dense, sliding and longformer's window rows (spans
 * under 4 tiles) not grouped unless asked for; longformer's global row first, then grouped
 * rows where the others differ; a group bound of 1 (a long sequence) leaves the order as
 * before. */
static void order_rule_groups_rows_of_unequal_length(void **state) {
  (void)state;
  tu_heap heap;
  stof_ctx *ctx = tu_ctx_new(&heap);
  /* 24 MB over K + V of Sk x D x 2 bytes each */
  assert_int_equal(kernels_attn_order_group_max(96, 1024, 64, 64), 96);   /* 256 KB a pair */
  assert_int_equal(kernels_attn_order_group_max(192, 2048, 64, 64), 48);  /* 512 KB */
  assert_int_equal(kernels_attn_order_group_max(192, 4096, 128, 64), 12); /* 2 MB */
  assert_int_equal(kernels_attn_order_group_max(32, 32768, 128, 64), 1);  /* 16 MB */
  assert_int_equal(kernels_attn_order_group_max(5, 16, 16, 32), 5);       /* all of B x H */
  assert_int_equal(kernels_attn_order_group_max(0, 1024, 64, 64), 1);
  assert_int_equal(kernels_attn_order_group_max(8, INT64_MAX / 2, 64, 64), 1); /* overflow: 1 */
  assert_int_equal(kernels_attn_order_group_max(96, 1024, 64, 128), 1);     /* tile 128: none */
  kernels_attn_order o;
  stof_mask *m = NULL;
  stof_mask_format *f = NULL;
  /* causal at 1024, tile 64: rows of 1 .. 16 tiles, longest (the last) first */
  TU_OK(ctx, stof_mask_causal(ctx, &m));
  TU_OK(ctx, stof_mask_format_build(ctx, m, 1, 1, 1024, 1024, 64, &f));
  TU_OK(ctx, kernels_attn_order_plan(ctx, f->row_ptr, f->nmask, f->nrow, 96, 0, &o));
  assert_int_equal(o.nheavy, 0);
  assert_int_equal(o.group, 96);
  for (int k = 0; k < 16; k++) assert_int_equal(o.table[k], 15 - k);
  check_grouped(&o, f->row_ptr, f->nmask, f->nrow);
  assert_string_equal(o.why, "tile-rows longest first, 96 (b, h) at a time (1 .. 16 tiles)");
  kernels_attn_order_free(ctx, &o);
  /* the same with a bound of 1: the default order, the why saying why */
  TU_OK(ctx, kernels_attn_order_plan(ctx, f->row_ptr, f->nmask, f->nrow, 1, 0, &o));
  assert_null(o.table);
  assert_int_equal(o.group, 1);
  assert_non_null(strstr(o.why, "; one (b, h) at a time: no group (they need tile 64 or less, more than one (b, h) "
                                "and a pair's K and V within 24 MB))"));
  stof_mask_format_free(f);
  stof_mask_free(m);
  /* document at 2048: ties among a document's rows, the higher row first */
  TU_OK(ctx, stof_mask_suite(ctx, "document", 2048, &m));
  TU_OK(ctx, stof_mask_format_build(ctx, m, 1, 1, 2048, 2048, 64, &f));
  TU_OK(ctx, kernels_attn_order_plan(ctx, f->row_ptr, f->nmask, f->nrow, 48, 0, &o));
  assert_int_equal(o.nheavy, 0);
  assert_int_equal(o.group, 48);
  check_grouped(&o, f->row_ptr, f->nmask, f->nrow);
  assert_non_null(strstr(o.why, "tile-rows longest first, 48 (b, h) at a time ("));
  kernels_attn_order_free(ctx, &o);
  stof_mask_format_free(f);
  stof_mask_free(m);
  /* rows of about equal length: no table, unless asked for (then grouped all the same) */
  static const char *const equal[] = {"dense", "sliding", "causal_sliding"};
  for (size_t i = 0; i < sizeof equal / sizeof equal[0]; i++) {
    TU_OK(ctx, stof_mask_suite(ctx, equal[i], 4096, &m));
    TU_OK(ctx, stof_mask_format_build(ctx, m, 1, 1, 4096, 4096, 64, &f));
    TU_OK(ctx, kernels_attn_order_plan(ctx, f->row_ptr, f->nmask, f->nrow, 24, 0, &o));
    if (o.table || o.group != 1) fail_msg("%s: grouped by %d", equal[i], o.group);
    assert_non_null(strstr(o.why, "rows of about equal length"));
    TU_OK(ctx, kernels_attn_order_plan(ctx, f->row_ptr, f->nmask, f->nrow, 5, 1, &o));
    assert_int_equal(o.group, 5);
    check_grouped(&o, f->row_ptr, f->nmask, f->nrow);
    assert_non_null(strstr(o.why, " tiles, asked for)"));
    kernels_attn_order_free(ctx, &o);
    stof_mask_format_free(f);
    stof_mask_free(m);
  }
  /* longformer: its global row first; its window rows (3-4 tiles) not grouped */
  TU_OK(ctx, stof_mask_longformer(ctx, 32, 32, &m));
  TU_OK(ctx, stof_mask_format_build(ctx, m, 1, 1, 4096, 4096, 64, &f));
  TU_OK(ctx, kernels_attn_order_plan(ctx, f->row_ptr, f->nmask, f->nrow, 24, 0, &o));
  assert_int_equal(o.nheavy, 1);
  assert_int_equal(o.group, 1);
  check_order(&o, f->row_ptr, f->nmask, f->nrow);
  kernels_attn_order_free(ctx, &o);
  stof_mask_format_free(f);
  stof_mask_free(m);
  /* made up: 60 tiles at row 12, 40 at rows 2 and 9 (long), the others r % 7 + 1 (1 .. 7):
   * the long ones first, then the others longest first */
  int32_t rp[17] = {0};
  for (int r = 0; r < 16; r++) rp[r + 1] = rp[r] + (r == 12 ? 60 : r == 2 || r == 9 ? 40 : r % 7 + 1);
  TU_OK(ctx, kernels_attn_order_plan(ctx, rp, 1, 16, 8, 0, &o));
  static const int32_t want[16] = {12, 2, 9, 13, 6, 5, 11, 4, 10, 3, 15, 8, 1, 14, 7, 0};
  assert_int_equal(o.nheavy, 3);
  assert_int_equal(o.group, 8);
  for (int k = 0; k < 16; k++) assert_int_equal(o.table[k], want[k]);
  check_grouped(&o, rp, 1, 16);
  assert_string_equal(o.why, "3 long tile-rows a (b, h) launched first (>= 3x the mean tiles; the longest 60), then "
                             "the others longest first, 8 (b, h) at a time (1 .. 7 tiles)");
  kernels_attn_order_free(ctx, &o);
  /* two instances, each of equal rows (2 tiles, and 9): no group (the span is within an
   * instance: the groups reorder each pair's own rows) */
  int32_t rq[34] = {0};
  for (int r = 0; r < 16; r++) rq[r + 1] = rq[r] + 2;
  rq[17] = rq[16];
  for (int r = 0; r < 16; r++) rq[17 + r + 1] = rq[17 + r] + 9;
  TU_OK(ctx, kernels_attn_order_plan(ctx, rq, 2, 16, 8, 0, &o));
  assert_null(o.table);
  assert_int_equal(o.group, 1);
  assert_non_null(strstr(o.why, "rows of about equal length"));
  /* allocations that fail: STOF_ERR_NOMEM, nothing kept */
  for (int k = 1; k <= 2; k++) {
    heap.fail_at = heap.nalloc + k;
    assert_int_equal(kernels_attn_order_plan(ctx, rp, 1, 16, 8, 0, &o), STOF_ERR_NOMEM);
    assert_null(o.table);
    stof_ctx_clear_error(ctx);
    heap.fail_at = 0;
  }
  tu_ctx_free(ctx, &heap);
}

/* The kernel's walk of the launch (order_cta in attention_common.cuh, copied here with its
 * two forms, ORDER 1 for group 1 and ORDER 2 for groups; the GPU test grouped_order_matches_cpu
 * runs the kernel's own): for BH pairs, nrow rows, nheavy and group, CTA lin (0 .. spare CTAs
 * past BH x nrow) gets its pair (BH: none) and place k. */
static int64_t walk(int64_t BH, int64_t nrow, int64_t nheavy, int64_t group, int64_t lin, int64_t *k) {
  int64_t heavy = BH * nheavy, q;
  if (lin < heavy) {
    q = lin / nheavy;
    *k = lin - q * nheavy;
  } else if (group <= 1) {
    q = (lin - heavy) / (nrow - nheavy);
    *k = nheavy + (lin - heavy - q * (nrow - nheavy));
  } else {
    if (lin >= BH * nrow) return BH;
    uint32_t rest = (uint32_t)(nrow - nheavy), L = (uint32_t)(lin - heavy), per = (uint32_t)group * rest;
    uint32_t gi = L / per, w = L - gi * per, g0 = gi * (uint32_t)group;
    uint32_t G = (uint32_t)group < (uint32_t)BH - g0 ? (uint32_t)group : (uint32_t)BH - g0, kk = w / G;
    q = g0 + (w - kk * G);
    *k = nheavy + kk;
  }
  return q < BH ? q : BH;
}

/* Every (pair, place) once, the spare CTAs none; heavy places first for every pair; within a
 * group, place k of every pair before place k + 1; group 1 the walk before groups (pair by
 * pair). */
static void order_walk_covers_every_row_once(void **state) {
  (void)state;
  static const int64_t bhs[] = {1, 7, 24, 25}, nrows[] = {1, 5, 16}, groups[] = {1, 2, 5, 24, 100};
  for (size_t a = 0; a < 4; a++)
    for (size_t b = 0; b < 3; b++)
      for (int64_t nheavy = 0; nheavy < nrows[b] && nheavy <= 2; nheavy++)
        for (size_t c = 0; c < 5; c++) {
          int64_t BH = bhs[a], nrow = nrows[b], g = groups[c] < BH ? groups[c] : BH;
          char *seen = calloc((size_t)(BH * nrow), 1);
          int64_t *when = calloc((size_t)(BH * nrow), sizeof *when);
          assert_non_null(seen);
          assert_non_null(when);
          int64_t total = nrow * (BH + 3); /* 3 pairs' worth of spare CTAs, as a z slice leaves */
          for (int64_t lin = 0; lin < total; lin++) {
            int64_t k = -1, q = walk(BH, nrow, nheavy, g, lin, &k);
            if (q == BH) {
              assert_true(lin >= BH * nrow);
              continue;
            }
            assert_true(lin < BH * nrow && q >= 0 && k >= 0 && k < nrow && !seen[q * nrow + k]);
            seen[q * nrow + k] = 1;
            when[q * nrow + k] = lin;
            if (g == 1 && lin >= BH * nheavy) { /* the walk before groups */
              int64_t q1 = (lin - BH * nheavy) / (nrow - nheavy);
              assert_int_equal(q, q1);
              assert_int_equal(k, nheavy + (lin - BH * nheavy - q1 * (nrow - nheavy)));
            }
          }
          for (int64_t q = 0; q < BH; q++)
            for (int64_t k = 0; k < nrow; k++) {
              assert_true(seen[q * nrow + k]);
              if (k < nheavy) assert_true(when[q * nrow + k] < BH * nheavy);
              /* within q's group, every pair's place k before any pair's place k + 1 */
              int64_t g0 = q / g * g, g1 = g0 + g < BH ? g0 + g : BH;
              if (k >= nheavy && k + 1 < nrow)
                for (int64_t p = g0; p < g1; p++) assert_true(when[q * nrow + k] < when[p * nrow + k + 1]);
            }
          free(seen);
          free(when);
        }
}

/* A window of 40 on each side, plus whole rows 0-31 in heads h = 1 (mod 3) and none in the
 * others: instances that differ. */
static int per_head_rows(void *ud, int64_t b, int64_t h, int64_t i, int64_t j) {
  (void)ud;
  (void)b;
  return (i - j <= 40 && j - i <= 40) || (h % 3 == 1 && i < 32);
}

/* key64's count of 128-tiles from a tile-64 format (kernels_attn_tiles128) is the entry count
 * of the same mask's tile-128 format: every suite mask at 1000 (an odd number of tile-rows,
 * partial last tiles) and 4096, per-head and per-batch instances, Sq != Sk; -1 where the
 * columns are not on the host, unless every 64-tile is non-empty; -1 for another tile. */
static void tiles128_counts_the_tile_128_format(void **state) {
  (void)state;
  tu_heap heap;
  stof_ctx *ctx = tu_ctx_new(&heap);
  stof_mask *ms[16];
  int nm = 0;
  for (int i = 0; stof_mask_suite_name(i); i++) TU_OK(ctx, stof_mask_suite(ctx, stof_mask_suite_name(i), 1000, &ms[nm++]));
  TU_OK(ctx, stof_mask_fn(ctx, per_head_rows, NULL, "per_head_rows", 0, 1, &ms[nm++]));
  TU_OK(ctx, stof_mask_document_batched(ctx, 2, (const int64_t[]){2, 3}, (const int64_t[]){450, 550, 300, 300, 400},
                                        &ms[nm++]));
  static const int64_t dims[][4] = {{1, 1, 1000, 1000}, {2, 3, 1000, 1000}, {1, 3, 777, 1000}, {1, 1, 4096, 4096}};
  int nchecked = 0;
  for (int i = 0; i < nm; i++)
    for (int d = 0; d < 4; d++) {
      stof_mask_format *f64 = NULL, *f128 = NULL;
      if (stof_mask_format_build(ctx, ms[i], dims[d][0], dims[d][1], dims[d][2], dims[d][3], 64, &f64)) {
        stof_ctx_clear_error(ctx); /* a batched document mask takes B = 2 only */
        continue;
      }
      TU_OK(ctx, stof_mask_format_build(ctx, ms[i], dims[d][0], dims[d][1], dims[d][2], dims[d][3], 128, &f128));
      int64_t n = kernels_attn_tiles128(f64);
      if (n != f128->nentry)
        fail_msg("%s at %lld x %lld x %lld x %lld: %lld 128-tiles from the tile-64 format, the tile-128 format has %d",
                 stof_mask_description(ms[i]), (long long)dims[d][0], (long long)dims[d][1], (long long)dims[d][2],
                 (long long)dims[d][3], (long long)n, f128->nentry);
      stof_mask_format g = *f64;
      g.col_idx = NULL;
      int all = f64->ntile_full + f64->ntile_partial == (int64_t)f64->nmask * f64->nrow * f64->ncol;
      assert_int_equal(kernels_attn_tiles128(&g), all ? n : -1);
      assert_int_equal(kernels_attn_tiles128(f128), -1);
      nchecked++;
      stof_mask_format_free(f64);
      stof_mask_format_free(f128);
    }
  assert_true(nchecked >= 4 * (nm - 1));
  for (int i = 0; i < nm; i++) stof_mask_free(ms[i]);
  tu_ctx_free(ctx, &heap);
}

int run_attention_split_tests(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(split_rule_splits_longformer_global_rows),
      cmocka_unit_test(split_rule_leaves_causal_and_dense_alone),
      cmocka_unit_test(forced_split_cuts_every_long_row),
      cmocka_unit_test(split_rejects_bad_values_and_oversized_workspaces),
      cmocka_unit_test(combine_matches_the_unsplit_softmax),
      cmocka_unit_test(order_rule_puts_longformer_global_rows_first),
      cmocka_unit_test(order_rule_on_made_up_rows),
      cmocka_unit_test(order_rule_groups_rows_of_unequal_length),
      cmocka_unit_test(order_walk_covers_every_row_once),
      cmocka_unit_test(tiles128_counts_the_tile_128_format),
  };
  return cmocka_run_group_tests_name("attention_split", tests, NULL, NULL);
}
