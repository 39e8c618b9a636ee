/* The GPU format builder, checked without a GPU: its kernels compile with NVRTC for sm_75, sm_80
 * and sm_90; the program a mask becomes, run by the device's own evaluator compiled for
 * the host, agrees with stof_mask_eval element by element, word by word (the words the
 * kernels take from their class, mf_word_fast, too) and tile class by tile class; the GPU
 * algorithm (items of a tile-row: classify, count; scan rows; place), replayed here on the
 * host with that evaluator, gives exactly the CPU builder's format; tensor and fn masks and
 * oversized programs are refused (STOF_ERR_UNSUPPORTED); without a GPU the builder says
 * STOF_ERR_NO_DEVICE and leaves nothing behind. */
#include "helpers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels_int.h"

/* ---------------------------------------------------------------- masks */

enum { MAXM = 48 };

typedef struct named {
  stof_mask *m;
  int64_t B; /* the batch a format of it needs (per-batch documents), else 1 */
} named;

static int64_t rng_next(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return (int64_t)(*s >> 33);
}

/* The suite at S, extra kinds, combinations, per-batch documents and edge parameters. */
static int many_masks(stof_ctx *ctx, int64_t S, named *out) {
  int n = 0;
  for (int k = 0; stof_mask_suite_name(k); k++)
    KT_OK(ctx, stof_mask_suite(ctx, stof_mask_suite_name(k), S, &out[n++].m));
  stof_mask *a, *b, *c;
  KT_OK(ctx, stof_mask_dilated(ctx, 8, 3, &out[n++].m));
  KT_OK(ctx, stof_mask_dilated(ctx, 40, 0, &out[n++].m));
  KT_OK(ctx, stof_mask_dilated(ctx, 3, STOF_MASK_MAX_EXTENT, &out[n++].m)); /* only j = i */
  KT_OK(ctx, stof_mask_dilated(ctx, STOF_MASK_MAX_EXTENT, 1, &out[n++].m));
  KT_OK(ctx, stof_mask_window(ctx, 3, 70, &out[n++].m));
  KT_OK(ctx, stof_mask_window(ctx, STOF_MASK_MAX_EXTENT, STOF_MASK_MAX_EXTENT, &out[n++].m));
  KT_OK(ctx, stof_mask_global(ctx, 20, &out[n++].m));
  KT_OK(ctx, stof_mask_global(ctx, STOF_MASK_MAX_EXTENT, &out[n++].m));
  KT_OK(ctx, stof_mask_random_blocks(ctx, 16, 0.4, 5, &out[n++].m));
  KT_OK(ctx, stof_mask_random_blocks(ctx, 5, 0.5, 77, &out[n++].m));  /* blocks < 8 */
  KT_OK(ctx, stof_mask_random_blocks(ctx, 3, 1.0, 1, &out[n++].m));
  KT_OK(ctx, stof_mask_random_blocks(ctx, 3, 0.0, 1, &out[n++].m));
  KT_OK(ctx, stof_mask_random_blocks(ctx, STOF_MASK_MAX_EXTENT, 0.5, 9, &out[n++].m));
  KT_OK(ctx, stof_mask_random_blocks(ctx, 1, 0.3, 11, &out[n++].m));
  KT_OK(ctx, stof_mask_bigbird(ctx, 5, 3, 24, 0.25, 42, &out[n++].m));
  KT_OK(ctx, stof_mask_longformer(ctx, 0, 0, &out[n++].m));
  KT_OK(ctx, stof_mask_document(ctx, 3, (const int64_t[]){S / 3 + 1, 7, 1}, &out[n++].m));
  /* causal & bigbird, causal - sliding(4), (global | dilated) & window */
  KT_OK(ctx, stof_mask_causal(ctx, &a));
  KT_OK(ctx, stof_mask_bigbird(ctx, 8, 8, 16, 0.3, 2, &b));
  KT_OK(ctx, stof_mask_intersection(a, b, &out[n++].m));
  stof_mask_free(b);
  KT_OK(ctx, stof_mask_sliding(ctx, 4, &b));
  KT_OK(ctx, stof_mask_difference(a, b, &out[n++].m));
  stof_mask_free(b);
  KT_OK(ctx, stof_mask_global(ctx, 9, &b));
  KT_OK(ctx, stof_mask_dilated(ctx, 30, 2, &c));
  stof_mask *u;
  KT_OK(ctx, stof_mask_union(b, c, &u));
  stof_mask_free(b);
  stof_mask_free(c);
  KT_OK(ctx, stof_mask_window(ctx, 50, 10, &b));
  KT_OK(ctx, stof_mask_intersection(u, b, &out[n++].m));
  /* dense - (document - causal): two levels of difference, right-nested */
  KT_OK(ctx, stof_mask_document(ctx, 2, (const int64_t[]){S / 2 + 3, S}, &c));
  stof_mask *dc, *dn;
  KT_OK(ctx, stof_mask_difference(c, a, &dc));
  KT_OK(ctx, stof_mask_dense(ctx, &dn));
  KT_OK(ctx, stof_mask_difference(dn, dc, &out[n++].m));
  stof_mask_free(dc);
  stof_mask_free(dn);
  stof_mask_free(c);
  stof_mask_free(u);
  stof_mask_free(b);
  stof_mask_free(a);
  /* per-batch documents, alone and in combinations */
  static const int64_t nseq[3] = {2, 1, 3};
  int64_t lens[6] = {S / 2 + 1, S / 2 + 5, S, S / 5 + 1, S / 5 + 1, 2};
  KT_OK(ctx, stof_mask_document_batched(ctx, 3, nseq, lens, &a));
  out[n].B = 3;
  KT_OK(ctx, stof_mask_document_batched(ctx, 3, nseq, lens, &out[n++].m));
  KT_OK(ctx, stof_mask_causal_sliding(ctx, 17, &b));
  out[n].B = 3;
  KT_OK(ctx, stof_mask_union(a, b, &out[n++].m));
  out[n].B = 3;
  KT_OK(ctx, stof_mask_difference(b, a, &out[n++].m));
  stof_mask_free(a);
  stof_mask_free(b);
  for (int k = 0; k < n; k++)
    if (out[k].B == 0) out[k].B = 1;
  assert_true(n <= MAXM);
  return n;
}

static void free_masks(named *ms, int n) {
  for (int k = 0; k < n; k++) stof_mask_free(ms[k].m);
  memset(ms, 0, sizeof *ms * (size_t)n);
}

/* ---------------------------------------------------------------- compilation */

static void gpu_format_kernels_compile_for_sm80_and_sm90(void **state) {
  stof_ctx *ctx = kt_ctx();
  const char *src = stof_kernels_source("mask_format.cu");
  assert_non_null(src);
  /* sm_75 too: the attention engine needs 8.0, but the builder alone (and its public entry)
   * has no such floor, so nothing in it may need sm_80 (__reduce_*_sync, ...) */
  static const char *const archs[] = {"sm_75", "sm_80", "sm_90"};
  for (int a = 0; a < 3; a++) {
    void *cubin = NULL;
    size_t size = 0;
    KT_OK(ctx, stof_cuda_compile_ex(ctx, src, "mask_format.cu", archs[a], 0, NULL, 0, NULL,
                                    NULL, &cubin, &size));
    assert_non_null(cubin);
    assert_true(size > 4);
    assert_memory_equal(cubin, "\177ELF", 4);
    stof_ctx_dealloc(ctx, cubin, size);
  }
  kt_ctx_done(ctx);
}

/* ---------------------------------------------------------------- the program */

/* The word of the 8 x 8 inner tile at (i0, j0) read from stof_mask_eval. */
static uint64_t word_by_eval(const stof_mask *m, int64_t b, int64_t h, int64_t Sq, int64_t Sk,
                             int64_t i0, int64_t j0) {
  uint64_t w = 0;
  for (int r = 0; r < 8; r++)
    for (int c = 0; c < 8; c++) {
      int64_t i = i0 + r, j = j0 + c;
      if (i < Sq && j < Sk && stof_mask_eval(m, b, h, i, j) == 1)
        w |= (uint64_t)1 << (r * 8 + c);
    }
  return w;
}

/* Elements, words and tile classes of the program against the mask, at random. */
static void check_program(stof_ctx *ctx, const stof_mask *m, int64_t B, int64_t S,
                          uint64_t *seed) {
  kernels_format_prog *p = NULL;
  KT_OK(ctx, kernels_format_prog_new(ctx, m, &p));
  assert_true(kernels_format_prog_nnode(p) >= 1);
  assert_true(kernels_format_prog_depth(p) >= 1 && kernels_format_prog_depth(p) <= 16);
  const char *d = stof_mask_description(m);
  for (int k = 0; k < 3000; k++) {
    int64_t b = rng_next(seed) % B, h = rng_next(seed) % 3;
    int64_t i = rng_next(seed) % (S + 40), j = rng_next(seed) % (S + 40);
    if (k % 4 == 0) j = i + rng_next(seed) % 80 - 40; /* near the diagonal */
    if (j < 0) j = 0;
    int want = stof_mask_eval(m, b, h, i, j), got = kernels_format_prog_eval(p, b, i, j);
    if (got != want)
      fail_msg("%s: (b %lld, i %lld, j %lld): program %d, mask %d", d, (long long)b,
               (long long)i, (long long)j, got, want);
  }
  /* far positions (the arithmetic near 2^31) */
  for (int k = 0; k < 200; k++) {
    int64_t i = INT32_MAX - 1 - rng_next(seed) % 100000, j = i - rng_next(seed) % 200;
    if (k % 2) j = rng_next(seed) % INT32_MAX;
    int want = stof_mask_eval(m, 0, 0, i, j), got = kernels_format_prog_eval(p, 0, i, j);
    if (got != want)
      fail_msg("%s: far (i %lld, j %lld): program %d, mask %d", d, (long long)i, (long long)j,
               got, want);
  }
  for (int k = 0; k < 300; k++) {
    int64_t b = rng_next(seed) % B, Sq = S - rng_next(seed) % 8, Sk = S - rng_next(seed) % 13;
    if (Sq < 1) Sq = 1;
    if (Sk < 1) Sk = 1;
    int64_t i0 = 8 * (rng_next(seed) % (S / 8 + 2)), j0 = 8 * (rng_next(seed) % (S / 8 + 2));
    uint64_t want = word_by_eval(m, b, 0, Sq, Sk, i0, j0);
    uint64_t got = kernels_format_prog_word(p, b, Sq, Sk, i0, j0);
    uint64_t fast = kernels_format_prog_word_fast(p, b, Sq, Sk, i0, j0);
    if (got != want || fast != want)
      fail_msg("%s: word at (%lld, %lld) of %lld x %lld: program %016llx, from its class "
               "%016llx, mask %016llx", d, (long long)i0, (long long)j0, (long long)Sq,
               (long long)Sk, (unsigned long long)got, (unsigned long long)fast,
               (unsigned long long)want);
  }
  /* the word from its class, against the evaluated word, densely: the first 40 x 40 words
   * (the parameters' edges), words along the diagonal and at the far corner (clipped) */
  for (int k = 0; k < 4000; k++) {
    int64_t b = rng_next(seed) % B, Sq = S - rng_next(seed) % 8, Sk = S - rng_next(seed) % 13;
    if (Sq < 1) Sq = 1;
    if (Sk < 1) Sk = 1;
    int64_t i0, j0;
    if (k < 1600) i0 = 8 * (k / 40), j0 = 8 * (k % 40);
    else if (k < 3200) i0 = 8 * (rng_next(seed) % (S / 8 + 1)), j0 = i0 + 8 * (rng_next(seed) % 9 - 4);
    else i0 = S - 8 * (rng_next(seed) % 4) - 1 - rng_next(seed) % 8, j0 = S - 8 * (rng_next(seed) % 4) - 8;
    if (i0 < 0) i0 = 0;
    if (j0 < 0) j0 = 0;
    uint64_t want = kernels_format_prog_word(p, b, Sq, Sk, i0, j0);
    uint64_t fast = kernels_format_prog_word_fast(p, b, Sq, Sk, i0, j0);
    if (fast != want)
      fail_msg("%s: word at (%lld, %lld) of %lld x %lld: from its class %016llx, evaluated "
               "%016llx", d, (long long)i0, (long long)j0, (long long)Sq, (long long)Sk,
               (unsigned long long)fast, (unsigned long long)want);
  }
  /* tile classes: exactly the CPU's, and sound (small tiles near the origin, where the
   * parameters of the masks put their edges, and anywhere) */
  for (int k = 0; k < 1000; k++) {
    int small = k % 2 == 0;
    int64_t b = rng_next(seed) % B, i0 = rng_next(seed) % (small ? 80 : S),
            j0 = rng_next(seed) % (small ? 80 : S);
    int64_t i1 = i0 + 1 + rng_next(seed) % (small ? 40 : 128),
            j1 = j0 + 1 + rng_next(seed) % (small ? 40 : 128);
    int want = kernels_mask_classify(m->root, b, 0, i0, i1, j0, j1);
    int got = kernels_format_prog_classify(p, b, i0, i1, j0, j1);
    if (got != want)
      fail_msg("%s: class of [%lld, %lld) x [%lld, %lld): program %d, mask %d", d,
               (long long)i0, (long long)i1, (long long)j0, (long long)j1, got, want);
    if (small && got != KERNELS_TILE_MIXED)
      for (int64_t i = i0; i < i1; i++)
        for (int64_t j = j0; j < j1; j++)
          if (stof_mask_eval(m, b, 0, i, j) != got)
            fail_msg("%s: class %d of [%lld, %lld) x [%lld, %lld) is wrong at (%lld, %lld)", d,
                     got, (long long)i0, (long long)i1, (long long)j0, (long long)j1,
                     (long long)i, (long long)j);
  }
  kernels_format_prog_free(p);
}

static void gpu_program_matches_mask_eval(void **state) {
  stof_ctx *ctx = kt_ctx();
  uint64_t seed = 1234;
  static const int64_t sizes[] = {300, 3000};
  for (int s = 0; s < 2; s++) {
    named ms[MAXM] = {{0}};
    int n = many_masks(ctx, sizes[s], ms);
    for (int k = 0; k < n; k++) check_program(ctx, ms[k].m, ms[k].B, sizes[s], &seed);
    free_masks(ms, n);
  }
  kt_ctx_done(ctx);
}

/* ---------------------------------------------------------------- the algorithm, on the host */

/* The GPU builder's algorithm with the device's evaluator and its words (from their class
 * where it settles them): items (a chunk of a tile-row each) class their tiles and count
 * the bits of mixed ones, adding to their row's counts; rows are scanned; then each item
 * places its entries and words from its row's offsets plus its row's earlier items'
 * counts, and must end where the next item begins. */
static stof_mask_format *emulate(stof_ctx *ctx, const stof_mask *mask, int64_t B, int64_t H,
                                 int64_t Sq, int64_t Sk, int T) {
  kernels_format_prog *p = NULL;
  KT_OK(ctx, kernels_format_prog_new(ctx, mask, &p));
  int64_t nrow = (Sq + T - 1) / T, ncol = (Sk + T - 1) / T;
  int64_t mask_b = stof_mask_varies_b(mask) ? B : 1, mask_h = stof_mask_varies_h(mask) ? H : 1;
  int64_t nmask = mask_b * mask_h, nb8 = T / 8, wpt = nb8 * nb8, n16 = T / 16;
  int64_t chunk = kernels_format_chunk_cols(ncol, T), nchunk = (ncol + chunk - 1) / chunk;
  int64_t unit = kernels_format_chunk_unit(T);
  assert_true(unit == (T <= 64 ? 32 : 2048 / (nb8 * nb8)));
  assert_true(chunk % unit == 0 && chunk >= unit && nchunk >= 1 && nchunk <= 256);
  assert_true((nchunk - 1) * chunk < ncol);
  uint8_t *state = malloc((size_t)(nmask * nrow * ncol));
  uint64_t *count = calloc((size_t)(nmask * nrow * nchunk), sizeof *count);
  int64_t *part_ptr = calloc((size_t)(nmask * nrow), sizeof *part_ptr);
  assert_non_null(state);
  assert_non_null(count);
  assert_non_null(part_ptr);
  stof_mask_format *f = stof_ctx_alloc(ctx, sizeof *f);
  assert_non_null(f);
  memset(f, 0, sizeof *f);
  f->nfull = stof_ctx_alloc(ctx, (size_t)(nmask * nrow) * 4);
  f->npartial = stof_ctx_alloc(ctx, (size_t)(nmask * nrow) * 4);
  memset(f->nfull, 0, (size_t)(nmask * nrow) * 4);
  memset(f->npartial, 0, (size_t)(nmask * nrow) * 4);
  int64_t nvalid = 0, v16 = 0, nfull = 0, npart = 0, nhalf = 0;
  /* 1. the tile pass, item by item */
  for (int64_t k = 0; k < nmask * nrow * nchunk; k++) {
    int64_t row = k / nchunk, q = k % nchunk, m = row / nrow, r = row % nrow;
    int64_t b = mask_b > 1 ? m / mask_h : 0;
    int64_t i0 = r * T, nr = Sq - i0 < T ? Sq - i0 : T;
    int64_t cend = (q + 1) * chunk < ncol ? (q + 1) * chunk : ncol;
    for (int64_t c = q * chunk; c < cend; c++) {
      int64_t j0 = c * T, nc = Sk - j0 < T ? Sk - j0 : T;
      int edge = nr < T || nc < T;
      int cls = kernels_format_prog_classify(p, b, i0, i0 + nr, j0, j0 + nc);
      int64_t cnt = 0;
      uint64_t sub = 0;
      if (cls == KERNELS_TILE_ONE) {
        cnt = nr * nc;
      } else if (cls == KERNELS_TILE_MIXED) {
        for (int64_t w = 0; w < wpt; w++) {
          int64_t ci = w / nb8, ri = w % nb8;
          uint64_t word = kernels_format_prog_word_fast(p, b, Sq, Sk, i0 + ri * 8, j0 + ci * 8);
          cnt += __builtin_popcountll(word);
          if (word) sub |= (uint64_t)1 << ((ri >> 1) * n16 + (ci >> 1));
        }
      }
      uint8_t s = cnt == 0 ? 0 : cnt == (int64_t)T * T && !edge ? 1 : 2;
      state[row * ncol + c] = s;
      nvalid += cnt;
      if (s) count[k] += 1;
      if (s == 1) nfull++, v16 += n16 * n16, f->nfull[row]++;
      if (s == 2) {
        npart++;
        count[k] += (uint64_t)1 << 32;
        f->npartial[row]++;
        v16 += cls == KERNELS_TILE_ONE ? ((nr + 15) / 16) * ((nc + 15) / 16)
                                       : __builtin_popcountll(sub);
      }
    }
  }
  f->ctx = ctx;
  f->B = B, f->H = H, f->Sq = Sq, f->Sk = Sk, f->T = T;
  f->nrow = (int32_t)nrow, f->ncol = (int32_t)ncol;
  f->mask_b = (int32_t)mask_b, f->mask_h = (int32_t)mask_h, f->nmask = (int32_t)nmask;
  f->desc = stof_ctx_strdup(ctx, stof_mask_description(mask));
  f->nentry = (int32_t)(nfull + npart);
  f->nword = npart * wpt;
  f->row_ptr = stof_ctx_alloc(ctx, (size_t)(nmask * (nrow + 1)) * 4);
  if (f->nentry) {
    f->col_idx = stof_ctx_alloc(ctx, (size_t)f->nentry * 4);
    f->bmp_off = stof_ctx_alloc(ctx, (size_t)f->nentry * 4);
  }
  if (f->nword) f->bitmap = stof_ctx_alloc(ctx, (size_t)f->nword * 8);
  /* 2. the scan over rows */
  for (int64_t m = 0, e = 0, pi = 0; m < nmask; m++) {
    for (int64_t r = 0; r < nrow; r++) {
      f->row_ptr[m * (nrow + 1) + r] = (int32_t)e;
      part_ptr[m * nrow + r] = pi;
      e += f->nfull[m * nrow + r] + f->npartial[m * nrow + r];
      pi += f->npartial[m * nrow + r];
    }
    f->row_ptr[m * (nrow + 1) + nrow] = (int32_t)e;
  }
  /* 3. the write pass, item by item, in any order */
  int64_t e_end = 0, p_end = 0; /* where the previous item ended */
  for (int64_t k = 0; k < nmask * nrow * nchunk; k++) {
    int64_t row = k / nchunk, q = k % nchunk, m = row / nrow, r = row % nrow;
    int64_t b = mask_b > 1 ? m / mask_h : 0;
    uint64_t before = 0;
    for (int64_t x = 0; x < q; x++) before += count[row * nchunk + x];
    int64_t e = f->row_ptr[m * (nrow + 1) + r] + (int64_t)(before & 0xffffffffu);
    int64_t pi = part_ptr[row] + (int64_t)(before >> 32);
    assert_int_equal(e, e_end);
    assert_int_equal(pi, p_end);
    int64_t cend = (q + 1) * chunk < ncol ? (q + 1) * chunk : ncol;
    for (int64_t c = q * chunk; c < cend; c++) {
      uint8_t s = state[row * ncol + c];
      if (!s) continue;
      f->col_idx[e] = (int32_t)c;
      f->bmp_off[e] = s == 1 ? -1 : (int32_t)(pi * wpt);
      if (s == 2) {
        uint64_t lo = 0, hi = 0; /* words of inner column ci at w / nb8 */
        for (int64_t w = 0; w < wpt; w++) {
          f->bitmap[pi * wpt + w] = kernels_format_prog_word_fast(
              p, b, Sq, Sk, r * T + (w % nb8) * 8, c * T + (w / nb8) * 8);
          *(w / nb8 < nb8 / 2 ? &lo : &hi) |= f->bitmap[pi * wpt + w];
        }
        nhalf += T % 32 == 0 && (!lo || !hi);
        pi++;
      }
      e++;
    }
    e_end = e, p_end = pi;
  }
  assert_int_equal(e_end, f->nentry);
  assert_int_equal(p_end, npart);
  int64_t ntile16 = nmask * ((Sq + 15) / 16) * ((Sk + 15) / 16);
  f->nvalid = nvalid;
  f->density = (double)nvalid / ((double)nmask * (double)Sq * (double)Sk);
  f->frac16 = (double)v16 / (double)ntile16;
  f->ntile_full = nfull;
  f->ntile_partial = npart;
  f->ntile_halfempty = nhalf;
  f->ntile_empty = nmask * nrow * ncol - nfull - npart;
  f->bytes = (size_t)(nmask * (nrow + 1)) * 4 + (size_t)f->nentry * 8 + (size_t)f->nword * 8;
  free(state);
  free(count);
  free(part_ptr);
  kernels_format_prog_free(p);
  return f;
}

/* Asserts that two formats are identical but for build_ms (the first difference named,
 * g's value first). */
static void assert_same_format(const stof_mask_format *g, const stof_mask_format *c,
                               const char *what) {
  char why[512];
  if (stof_mask_format_compare(g, c, why, sizeof why)) fail_msg("%s: %s", what, why);
}

static void gpu_algorithm_on_the_host_gives_the_cpu_format(void **state) {
  stof_ctx *ctx = kt_ctx();
  /* the order the kernels deal a listed tile's words in covers each word once (the emulation
   * below takes them in order: the format cannot depend on it) */
  for (int T = 16; T <= 128; T += 16)
    for (int t = 0; t < 32; t++) {
      int wpt = (T / 8) * (T / 8);
      unsigned char seen[256] = {0};
      for (int x = 0; x < wpt; x++) {
        int w = kernels_format_word_index(x, t, wpt);
        assert_true(w >= 0 && w < wpt && !seen[w]);
        seen[w] = 1;
      }
    }
  /* 300 x 2100 cuts tile-rows of 132 tiles (T = 16) into 5 items, the last one short, and
   * of 17 tiles (T = 128) into 3 items of 8, of 19 tiles (T = 112) into 2 items of 10; 7 x
   * 140000 rows of 8750 tiles (T = 16) into 137 items of 64 columns, of 1094 (T = 128) into
   * 137 of 8; 7 x 300000 rows of 2344 tiles (T = 128) into 147 items of 16 (two units, the
   * second pass of a chunk short of 32 lanes) */
  static const int64_t dims[][2] = {{1, 1},     {7, 300},     {65, 65},    {300, 300},
                                    {300, 129}, {1000, 1000}, {300, 2100}, {7, 140000},
                                    {7, 300000}};
  static const int tiles[] = {16, 32, 48, 64, 112, 128}; /* 32: bigbird's tile on Hopper */
  for (int s = 0; s < 9; s++) {
    int64_t Sq = dims[s][0], Sk = dims[s][1];
    named ms[MAXM] = {{0}};
    int n = many_masks(ctx, Sq > Sk ? Sq : Sk, ms);
    for (int k = 0; k < n; k++)
      for (int t = 0; t < 6; t++) {
        if ((Sq == 1000 && tiles[t] != 64) || (Sk == 300000 && tiles[t] != 128)) continue;
        stof_mask_format *cpu = NULL;
        KT_OK(ctx, stof_mask_format_build(ctx, ms[k].m, ms[k].B, 2, Sq, Sk, tiles[t], &cpu));
        stof_mask_format *emu = emulate(ctx, ms[k].m, ms[k].B, 2, Sq, Sk, tiles[t]);
        char what[256];
        snprintf(what, sizeof what, "%s at %lld x %lld, T = %d", stof_mask_description(ms[k].m),
                 (long long)Sq, (long long)Sk, tiles[t]);
        assert_same_format(emu, cpu, what);
        stof_mask_format_free(emu);
        stof_mask_format_free(cpu);
      }
    free_masks(ms, n);
  }
  kt_ctx_done(ctx);
}

/* ---------------------------------------------------------------- refusals */

static int diagonal(void *ud, int64_t b, int64_t h, int64_t i, int64_t j) {
  (void)ud, (void)b, (void)h;
  return i == j;
}

static void gpu_builder_refuses_tensor_and_fn_masks(void **state) {
  stof_ctx *ctx = kt_ctx();
  stof_tensor *t;
  int64_t sh[2] = {64, 64};
  KT_OK(ctx, stof_tensor_rand(ctx, STOF_DTYPE_BOOL, 2, sh, 3, &t));
  stof_mask *tm, *fm, *causal, *mix, *mix2;
  KT_OK(ctx, stof_mask_from_tensor(ctx, t, &tm));
  KT_OK(ctx, stof_mask_fn(ctx, diagonal, NULL, "diagonal", 0, 0, &fm));
  KT_OK(ctx, stof_mask_causal(ctx, &causal));
  KT_OK(ctx, stof_mask_union(causal, tm, &mix));
  KT_OK(ctx, stof_mask_difference(causal, fm, &mix2));
  assert_true(stof_mask_format_gpu_supported(causal));
  const stof_mask *bad[4] = {tm, fm, mix, mix2};
  static const char *const why[4] = {"from_tensor(64x64", "fn(diagonal)", "from_tensor(64x64",
                                     "fn(diagonal)"};
  for (int k = 0; k < 4; k++) {
    assert_false(stof_mask_format_gpu_supported(bad[k]));
    stof_mask_format *f = NULL;
    kt_expect_error(ctx, stof_mask_format_build_gpu(ctx, bad[k], 1, 1, 64, 64, 64, &f),
                    STOF_ERR_UNSUPPORTED, why[k]);
    assert_null(f);
    kernels_format_prog *p = NULL;
    kt_expect_error(ctx, kernels_format_prog_new(ctx, bad[k], &p), STOF_ERR_UNSUPPORTED,
                    "only the CPU builder");
    assert_null(p);
  }
  assert_false(stof_mask_format_gpu_supported(NULL));
  stof_mask_free(tm);
  stof_mask_free(fm);
  stof_mask_free(mix);
  stof_mask_free(mix2);
  stof_mask_free(causal);
  stof_tensor_free(t);
  kt_ctx_done(ctx);
}

static void gpu_program_limits_are_refused_and_unions_kept_shallow(void **state) {
  stof_ctx *ctx = kt_ctx();
  /* w0 - (w1 - (w2 - ...)): each difference needs one more stack slot */
  stof_mask *deep;
  KT_OK(ctx, stof_mask_window(ctx, 0, 0, &deep));
  for (int k = 1; k <= 20; k++) {
    stof_mask *w, *d;
    KT_OK(ctx, stof_mask_window(ctx, k, 0, &w));
    KT_OK(ctx, stof_mask_difference(w, deep, &d));
    stof_mask_free(w);
    stof_mask_free(deep);
    deep = d;
    kernels_format_prog *p = NULL;
    if (k < 16) {
      assert_true(stof_mask_format_gpu_supported(deep));
      KT_OK(ctx, kernels_format_prog_new(ctx, deep, &p));
      assert_int_equal(kernels_format_prog_depth(p), k + 1);
      uint64_t seed = 99;
      check_program(ctx, deep, 1, 200, &seed);
      kernels_format_prog_free(p);
    } else {
      assert_false(stof_mask_format_gpu_supported(deep));
      kt_expect_error(ctx, kernels_format_prog_new(ctx, deep, &p), STOF_ERR_UNSUPPORTED,
                      "at most 256 nodes of depth 16");
    }
  }
  stof_mask_free(deep);
  /* w0 | (w1 | (w2 | ...)) nests as deeply, but unions commute: two slots suffice */
  stof_mask *u;
  KT_OK(ctx, stof_mask_window(ctx, 0, 0, &u));
  for (int k = 1; k < 40; k++) {
    stof_mask *w, *d;
    KT_OK(ctx, stof_mask_window(ctx, 0, 3 * k, &w));
    KT_OK(ctx, (k % 2 ? stof_mask_union : stof_mask_intersection)(w, u, &d));
    stof_mask_free(w);
    stof_mask_free(u);
    u = d;
  }
  kernels_format_prog *p = NULL;
  KT_OK(ctx, kernels_format_prog_new(ctx, u, &p));
  assert_int_equal(kernels_format_prog_nnode(p), 79);
  assert_int_equal(kernels_format_prog_depth(p), 2);
  kernels_format_prog_free(p);
  uint64_t seed = 7;
  check_program(ctx, u, 1, 300, &seed);
  stof_mask_free(u);
  /* more than 256 nodes */
  stof_mask *chain;
  KT_OK(ctx, stof_mask_global(ctx, 1, &chain));
  for (int k = 0; k < 130; k++) {
    stof_mask *g, *d;
    KT_OK(ctx, stof_mask_global(ctx, k + 2, &g));
    KT_OK(ctx, stof_mask_union(chain, g, &d));
    stof_mask_free(g);
    stof_mask_free(chain);
    chain = d;
  }
  assert_false(stof_mask_format_gpu_supported(chain));
  stof_mask_format *f = NULL;
  kt_expect_error(ctx, stof_mask_format_build_gpu(ctx, chain, 1, 1, 100, 100, 64, &f),
                  STOF_ERR_UNSUPPORTED, "a program of 261 nodes");
  assert_null(f);
  stof_mask_free(chain);
  kt_ctx_done(ctx);
}

/* ---------------------------------------------------------------- without a GPU */

static void gpu_builder_checks_arguments_then_reports_no_device(void **state) {
  stof_ctx *ctx = kt_ctx();
  stof_mask *m, *docs;
  KT_OK(ctx, stof_mask_suite(ctx, "bigbird", 500, &m));
  static const int64_t nseq[2] = {1, 2}, lens[3] = {100, 30, 40};
  KT_OK(ctx, stof_mask_document_batched(ctx, 2, nseq, lens, &docs));
  stof_mask_format *f = NULL;
  /* the CPU builder's argument errors come first, device or not */
  kt_expect_error(ctx, stof_mask_format_build_gpu(ctx, m, 1, 1, 500, 500, 24, &f), STOF_ERR_ARG,
                  "tile size T = 24");
  kt_expect_error(ctx, stof_mask_format_build_gpu(ctx, m, 0, 1, 500, 500, 64, &f), STOF_ERR_ARG,
                  "extents must be >= 1");
  kt_expect_error(ctx, stof_mask_format_build_gpu(ctx, docs, 3, 1, 500, 500, 64, &f),
                  STOF_ERR_ARG, "2 batches, the format B = 3");
  kt_expect_error(ctx, stof_mask_format_build_gpu(ctx, NULL, 1, 1, 500, 500, 64, &f),
                  STOF_ERR_ARG, "mask or out is NULL");
  /* the size limits are the CPU builder's, with the same messages (2^31 positions are
   * past them at every tile size) */
  kt_expect_error(ctx, stof_mask_format_build_gpu(ctx, m, 1, 1, (int64_t)1 << 31, 500, 64, &f),
                  STOF_ERR_UNSUPPORTED,
                  "mask_format_build_gpu: 1 instance of 33554432 x 8 tiles of 64 x 64 is "
                  "2.68e+08 tiles, more than a format may have");
  kt_expect_error(ctx, stof_mask_format_build_gpu(ctx, m, 1, 1, 1, INT64_MAX - 5, 64, &f),
                  STOF_ERR_ARG, "Sk = 9223372036854775802 is too large (at most 2^40");
  kt_expect_error(ctx, stof_mask_format_build_gpu(ctx, m, 1, 1, 1000000, 1000000, 128, &f),
                  STOF_ERR_UNSUPPORTED, "(every tile partial), more than the limit of 8.0 GiB");
  assert_null(f);
  stof_status dev = stof_cuda_init(ctx);
  stof_ctx_clear_error(ctx);
  stof_status st = stof_mask_format_build_gpu(ctx, m, 2, 3, 500, 700, 64, &f);
  if (dev == STOF_ERR_NO_DEVICE) {
    assert_int_equal(st, STOF_ERR_NO_DEVICE);
    assert_null(f);
    assert_int_equal(stof_ctx_status(ctx), STOF_ERR_NO_DEVICE);
    stof_ctx_clear_error(ctx);
  } else {
    /* a GPU here: the format must be the CPU's */
    KT_OK(ctx, st);
    stof_mask_format *cpu = NULL;
    KT_OK(ctx, stof_mask_format_build(ctx, m, 2, 3, 500, 700, 64, &cpu));
    assert_same_format(f, cpu, "bigbird at 500 x 700 on this machine's GPU");
    stof_mask_format_free(cpu);
    stof_mask_format_free(f);
  }
  stof_mask_free(m);
  stof_mask_free(docs);
  kt_ctx_done(ctx);
}

/* ---------------------------------------------------------------- out of memory */

typedef struct failing {
  int64_t count, fail_at;
} failing;

static void *failing_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  failing *fa = ud;
  if (nsize == 0) {
    free(ptr);
    return NULL;
  }
  if (nsize > osize && ++fa->count == fa->fail_at) return NULL;
  return realloc(ptr, nsize);
}

static void gpu_program_survives_every_allocation_failure(void **state) {
  int64_t n;
  for (n = 1; n < 1000; n++) {
    failing fa = {0, 0};
    stof_ctx *ctx = stof_ctx_new(failing_alloc, &fa);
    assert_non_null(ctx);
    stof_mask *m = NULL;
    int64_t lens[3] = {100, 200, 300};
    KT_OK(ctx, stof_mask_document(ctx, 3, lens, &m));
    fa.fail_at = fa.count + n;
    kernels_format_prog *p = NULL;
    stof_status st = kernels_format_prog_new(ctx, m, &p);
    stof_mask_free(m);
    if (st == STOF_OK) {
      kernels_format_prog_free(p);
      assert_int_equal(stof_ctx_bytes_in_use(ctx), 0);
      stof_ctx_free(ctx);
      break;
    }
    assert_int_equal(st, STOF_ERR_NOMEM);
    assert_null(p);
    assert_int_equal(stof_ctx_bytes_in_use(ctx), 0);
    stof_ctx_free(ctx);
  }
  assert_true(n > 1 && n < 1000);
}

/* The builder's choice of kernels (kernels_format_kernels_choice): the row kernels for masks of
 * only dense, window and dilated terms, the chunked ones as soon as a global, random or
 * document term appears anywhere in the program (a union or a difference included). */
static void gpu_builder_picks_rows_or_chunks_by_the_terms(void **state) {
  (void)state;
  stof_ctx *ctx = kt_ctx();
  static const struct { const char *name; int chunks; } suite[] = {
      {"dense", 0},      {"causal", 0},  {"sliding", 0}, {"causal_sliding", 0},
      {"longformer", 1}, {"bigbird", 1}, {"document", 1}};
  for (size_t k = 0; k < sizeof suite / sizeof suite[0]; k++) {
    stof_mask *m = NULL;
    kernels_format_prog *p = NULL;
    KT_OK(ctx, stof_mask_suite(ctx, suite[k].name, 4096, &m));
    KT_OK(ctx, kernels_format_prog_new(ctx, m, &p));
    if (kernels_format_prog_wants_chunks(p) != suite[k].chunks)
      fail_msg("%s: expected the %s kernels", suite[k].name, suite[k].chunks ? "chunked" : "row");
    kernels_format_prog_free(p);
    stof_mask_free(m);
  }
  /* a window-only combination, and a global term under a difference */
  stof_mask *a, *b, *u;
  kernels_format_prog *p = NULL;
  KT_OK(ctx, stof_mask_causal(ctx, &a));
  KT_OK(ctx, stof_mask_dilated(ctx, 8, 3, &b));
  KT_OK(ctx, stof_mask_union(a, b, &u));
  KT_OK(ctx, kernels_format_prog_new(ctx, u, &p));
  assert_int_equal(kernels_format_prog_wants_chunks(p), 0);
  kernels_format_prog_free(p);
  stof_mask_free(u);
  stof_mask_free(b);
  KT_OK(ctx, stof_mask_global(ctx, 16, &b));
  KT_OK(ctx, stof_mask_difference(a, b, &u));
  KT_OK(ctx, kernels_format_prog_new(ctx, u, &p));
  assert_int_equal(kernels_format_prog_wants_chunks(p), 1);
  /* STOF_FORMAT_GPU_KERNELS over the automatic choice (chunks here), and a bad value named */
  int rows = -1;
  unsetenv("STOF_FORMAT_GPU_KERNELS");
  KT_OK(ctx, kernels_format_kernels_choice(ctx, "t", p, 100, &rows));
  assert_int_equal(rows, 0);
  setenv("STOF_FORMAT_GPU_KERNELS", "rows", 1);
  KT_OK(ctx, kernels_format_kernels_choice(ctx, "t", p, 100, &rows));
  assert_int_equal(rows, 1);
  setenv("STOF_FORMAT_GPU_KERNELS", "chunks", 1);
  KT_OK(ctx, kernels_format_kernels_choice(ctx, "t", p, 100, &rows));
  assert_int_equal(rows, 0);
  setenv("STOF_FORMAT_GPU_KERNELS", "rowz", 1);
  stof_status st = kernels_format_kernels_choice(ctx, "t", p, 100, &rows);
  unsetenv("STOF_FORMAT_GPU_KERNELS");
  kt_expect_error(ctx, st, STOF_ERR_ARG, "STOF_FORMAT_GPU_KERNELS=rowz: expected rows or chunks");
  kernels_format_prog_free(p);
  stof_mask_free(u);
  stof_mask_free(b);
  stof_mask_free(a);
  kt_ctx_done(ctx);
}

int run_mask_format_gpu_tests(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(gpu_format_kernels_compile_for_sm80_and_sm90),
      cmocka_unit_test(gpu_program_matches_mask_eval),
      cmocka_unit_test(gpu_algorithm_on_the_host_gives_the_cpu_format),
      cmocka_unit_test(gpu_builder_refuses_tensor_and_fn_masks),
      cmocka_unit_test(gpu_builder_picks_rows_or_chunks_by_the_terms),
      cmocka_unit_test(gpu_program_limits_are_refused_and_unions_kept_shallow),
      cmocka_unit_test(gpu_builder_checks_arguments_then_reports_no_device),
      cmocka_unit_test(gpu_program_survives_every_allocation_failure),
  };
  return cmocka_run_group_tests_name("mask_format_gpu", tests, NULL, NULL);
}
