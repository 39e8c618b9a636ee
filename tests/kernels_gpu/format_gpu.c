/*
 * The two-level format built on the GPU against the CPU builder: every suite mask, other
 * kinds, combinations, per-batch documents, square and unequal lengths, tiles 16, 32, 64 and
 * 128: the GPU's format must be IDENTICAL to the CPU's (every array, every statistic but
 * build_ms). Each build pair prints one line (with both build times from S = 8192 up, so
 * the speedup shows in the log); a mismatch prints the first differing field or element
 * (stof_mask_format_compare, the GPU's value first) and the test goes on, failing at the
 * end. Every test skips without a GPU.
 */
#include "../core/testutil.h"

#include <stdio.h>

#include <stof/kernels.h>

#include "format_gpu.h"
#include "kernels_int.h"

typedef struct fg_fixture {
  tu_heap heap;
  stof_ctx *ctx;
  kernels_format_gpu *g;
  stof_attn_engine *e;
  int nrun, nfail;
} fg_fixture;

int format_gpu_setup(void **state) {
  fg_fixture *f = calloc(1, sizeof *f);
  if (!f) return -1;
  f->ctx = tu_ctx_new(&f->heap);
  *state = f;
  unsetenv("STOF_FORMAT_GPU_KERNELS"); /* a failed check_build_with may have left it set */
  return 0;
}

int format_gpu_teardown(void **state) {
  fg_fixture *f = *state;
  unsetenv("STOF_FORMAT_GPU_KERNELS");
  stof_attn_engine_free(f->e);
  kernels_format_gpu_free(f->g);
  tu_ctx_free(f->ctx, &f->heap);
  free(f);
  return 0;
}

/* The fixture with a builder; skips the test without a GPU. */
static fg_fixture *fg_gpu(void **state) {
  fg_fixture *f = *state;
  stof_status st = kernels_format_gpu_new(f->ctx, &f->g);
  if (st == STOF_ERR_NO_DEVICE) {
    print_message("skipping: %s\n", stof_ctx_message(f->ctx));
    stof_ctx_clear_error(f->ctx);
    skip();
  }
  TU_OK(f->ctx, st);
  print_message("     GPU format builder ready in %.1f ms (compile or cubin cache, load)\n",
                kernels_format_gpu_setup_ms(f->g));
  return f;
}

static void fg_finish(fg_fixture *f) {
  print_message("%d of %d GPU builds differ from the CPU's\n", f->nfail, f->nrun);
  if (f->nfail)
    fail_msg("%d of %d GPU builds differ from the CPU's (lines marked FAIL above)", f->nfail,
             f->nrun);
}

/* Builds mask on both sides with the GPU builder's kernels forced to `kernels` ("rows" or
 * "chunks", STOF_FORMAT_GPU_KERNELS) and compares; prints a line (with times from S = 8192
 * on, or always when verbose). */
static void check_build_with(fg_fixture *f, const stof_mask *mask, int64_t B, int64_t H,
                             int64_t Sq, int64_t Sk, int T, int verbose, const char *kernels) {
  stof_ctx *ctx = f->ctx;
  char head[200];
  snprintf(head, sizeof head, "%-34.34s B=%lld H=%lld %6lldx%-6lld T=%3d %-6s",
           stof_mask_description(mask), (long long)B, (long long)H, (long long)Sq,
           (long long)Sk, T, kernels);
  setenv("STOF_FORMAT_GPU_KERNELS", kernels, 1);
  f->nrun++;
  stof_mask_format *cpu = NULL, *gpu = NULL;
  stof_status st = stof_mask_format_build(ctx, mask, B, H, Sq, Sk, T, &cpu);
  if (st) fail_msg("%s: CPU build: %s: %s", head, stof_status_name(st), stof_ctx_message(ctx));
  st = kernels_format_gpu_build(f->g, mask, B, H, Sq, Sk, T, &gpu);
  char why[512] = "";
  if (st) {
    snprintf(why, sizeof why, "GPU build: %s: %.300s", stof_status_name(st), stof_ctx_message(ctx));
    stof_ctx_clear_error(ctx);
  } else if (strcmp(kernels_format_gpu_last_kernels(f->g), kernels)) {
    snprintf(why, sizeof why, "GPU build ran the %s kernels, not the %s ones asked for",
             kernels_format_gpu_last_kernels(f->g), kernels);
  } else {
    stof_mask_format_compare(gpu, cpu, why, sizeof why);
  }
  if (!why[0]) { /* the same kept on the device (what the attention engine uses): fetched, identical */
    stof_mask_format *dv = NULL;
    uint64_t dev[4];
    st = kernels_format_gpu_build_dev(f->g, mask, B, H, Sq, Sk, T, &dv, dev);
    if (st) {
      snprintf(why, sizeof why, "GPU build kept on the device: %s: %.300s", stof_status_name(st), stof_ctx_message(ctx));
      stof_ctx_clear_error(ctx);
    } else {
      size_t ne = (size_t)dv->nentry, nw = (size_t)dv->nword;
      if (dv->col_idx || dv->bmp_off || dv->bitmap) {
        snprintf(why, sizeof why, "GPU build kept on the device: host arrays present");
      } else {
        dv->col_idx = stof_ctx_alloc(ctx, ne * 4 + 4);
        dv->bmp_off = stof_ctx_alloc(ctx, ne * 4 + 4);
        dv->bitmap = stof_ctx_alloc(ctx, nw * 8 + 8);
        int32_t *rp = stof_ctx_alloc(ctx, (size_t)dv->nmask * (size_t)(dv->nrow + 1) * 4);
        if (!dv->col_idx || !dv->bmp_off || !dv->bitmap || !rp ||
            stof_cuda_dtoh(ctx, dv->col_idx, dev[1], ne * 4) || stof_cuda_dtoh(ctx, dv->bmp_off, dev[2], ne * 4) ||
            stof_cuda_dtoh(ctx, dv->bitmap, dev[3], nw * 8) ||
            stof_cuda_dtoh(ctx, rp, dev[0], (size_t)dv->nmask * (size_t)(dv->nrow + 1) * 4))
          fail_msg("%s: fetching the on-device format: %s", head, stof_ctx_message(ctx));
        if (memcmp(rp, dv->row_ptr, (size_t)dv->nmask * (size_t)(dv->nrow + 1) * 4))
          snprintf(why, sizeof why, "GPU build kept on the device: row_ptr on the device differs from the host's");
        else
          stof_mask_format_compare(dv, cpu, why, sizeof why);
        stof_ctx_dealloc(ctx, rp, (size_t)dv->nmask * (size_t)(dv->nrow + 1) * 4);
        /* stof_mask_format_free frees arrays of the format's own sizes: give back the slack */
        stof_ctx_dealloc(ctx, dv->col_idx, ne * 4 + 4), dv->col_idx = NULL;
        stof_ctx_dealloc(ctx, dv->bmp_off, ne * 4 + 4), dv->bmp_off = NULL;
        stof_ctx_dealloc(ctx, dv->bitmap, nw * 8 + 8), dv->bitmap = NULL;
      }
      stof_mask_format_free(dv);
      for (int k = 0; k < 4; k++) stof_cuda_mem_free(ctx, dev[k]);
    }
  }
  if (why[0]) {
    print_message("FAIL %s | %s\n", head, why);
    f->nfail++;
  } else if (verbose || (Sq > Sk ? Sq : Sk) >= 8192) {
    print_message("     %s | same: %d entries, %lld words | cpu %8.2f ms, gpu %7.2f ms (x%.1f)\n",
                  head, cpu->nentry, (long long)cpu->nword, cpu->build_ms, gpu->build_ms,
                  gpu->build_ms > 0 ? cpu->build_ms / gpu->build_ms : 0.0);
  }
  stof_mask_format_free(cpu);
  stof_mask_format_free(gpu);
  unsetenv("STOF_FORMAT_GPU_KERNELS");
}

/* check_build_with for both kinds of kernels: whichever the builder picks for a mask, the
 * other must give the same format. */
static void check_build(fg_fixture *f, const stof_mask *mask, int64_t B, int64_t H, int64_t Sq,
                        int64_t Sk, int T, int verbose) {
  check_build_with(f, mask, B, H, Sq, Sk, T, verbose, "rows");
  check_build_with(f, mask, B, H, Sq, Sk, T, verbose, "chunks");
}

static const int tiles[] = {16, 32, 64, 128}; /* 32: the engine's tile for bigbird on Hopper */
#define NTILE 4

/* ---------------------------------------------------------------- masks */

enum { MAXM = 24 };

/* Masks beyond the suite for length S (returns how many). */
static int other_masks(stof_ctx *ctx, int64_t S, stof_mask **out) {
  int n = 0;
  stof_mask *a, *b, *c;
  TU_OK(ctx, stof_mask_dilated(ctx, 64, 3, &out[n++]));
  TU_OK(ctx, stof_mask_dilated(ctx, 200, 0, &out[n++]));
  TU_OK(ctx, stof_mask_window(ctx, 100, 5, &out[n++]));
  TU_OK(ctx, stof_mask_global(ctx, 48, &out[n++]));
  TU_OK(ctx, stof_mask_random_blocks(ctx, 48, 0.3, 7, &out[n++]));
  TU_OK(ctx, stof_mask_random_blocks(ctx, 5, 0.5, 8, &out[n++]));
  TU_OK(ctx, stof_mask_bigbird(ctx, 64, 16, 128, 0.05, 3, &out[n++]));
  TU_OK(ctx, stof_mask_causal(ctx, &a));
  TU_OK(ctx, stof_mask_suite(ctx, "bigbird", S, &b));
  TU_OK(ctx, stof_mask_intersection(a, b, &out[n++])); /* causal & bigbird (decoders) */
  stof_mask_free(b);
  TU_OK(ctx, stof_mask_sliding(ctx, 8, &b));
  TU_OK(ctx, stof_mask_difference(a, b, &out[n++])); /* causal - sliding(8) */
  stof_mask_free(b);
  TU_OK(ctx, stof_mask_suite(ctx, "document", S, &b));
  TU_OK(ctx, stof_mask_intersection(b, a, &out[n++])); /* causal documents */
  TU_OK(ctx, stof_mask_global(ctx, 16, &c));
  stof_mask *u;
  TU_OK(ctx, stof_mask_union(b, c, &u));
  TU_OK(ctx, stof_mask_difference(u, a, &out[n++])); /* (document | global) - causal */
  stof_mask_free(u);
  stof_mask_free(c);
  stof_mask_free(b);
  stof_mask_free(a);
  return n;
}

static void free_all(stof_mask **m, int n) {
  for (int k = 0; k < n; k++) stof_mask_free(m[k]);
}

/* ---------------------------------------------------------------- tests */

static const int64_t sizes[] = {1000, 3000, 8192, 16384};
#define NSIZE 4

void gpu_format_matches_cpu_on_suite_masks(void **state) {
  fg_fixture *f = fg_gpu(state);
  for (int s = 0; s < NSIZE; s++)
    for (int k = 0; stof_mask_suite_name(k); k++) {
      stof_mask *m = NULL;
      TU_OK(f->ctx, stof_mask_suite(f->ctx, stof_mask_suite_name(k), sizes[s], &m));
      for (int t = 0; t < NTILE; t++) check_build(f, m, 1, 2, sizes[s], sizes[s], tiles[t], 0);
      stof_mask_free(m);
    }
  fg_finish(f);
}

void gpu_format_matches_cpu_on_other_kinds_and_combinations(void **state) {
  fg_fixture *f = fg_gpu(state);
  for (int s = 0; s < NSIZE; s++) {
    stof_mask *m[MAXM];
    int n = other_masks(f->ctx, sizes[s], m);
    for (int k = 0; k < n; k++)
      for (int t = 0; t < NTILE; t++) check_build(f, m[k], 2, 1, sizes[s], sizes[s], tiles[t], 0);
    free_all(m, n);
  }
  fg_finish(f);
}

void gpu_format_matches_cpu_with_unequal_lengths(void **state) {
  fg_fixture *f = fg_gpu(state);
  /* 100 x 140000: at tile 16 8750 tiles a row, in 137 items (warps) of 64 columns; at tile
   * 128 1094 tiles, in 137 items of 8 */
  static const int64_t dims[][2] = {{3000, 8192}, {8192, 1000}, {16384, 3001}, {1, 9000},
                                    {777, 1},     {8193, 8191}, {100, 140000}};
  for (int s = 0; s < 7; s++) {
    int64_t Sq = dims[s][0], Sk = dims[s][1], S = Sq > Sk ? Sq : Sk;
    stof_mask *m[MAXM + 8];
    int n = 0;
    for (int k = 0; stof_mask_suite_name(k); k++)
      TU_OK(f->ctx, stof_mask_suite(f->ctx, stof_mask_suite_name(k), S, &m[n++]));
    n += other_masks(f->ctx, S, m + n);
    for (int k = 0; k < n; k++)
      for (int t = 0; t < NTILE; t++) check_build(f, m[k], 1, 1, Sq, Sk, tiles[t], 0);
    free_all(m, n);
  }
  /* 4,194,306 tile-rows of 3 tiles at tile 16: one item each, more than the 2^20 blocks of 4
   * warps a launch gets (MAX_GRID), so some warps take a second item (the grid-stride step of
   * both passes); global(16) makes column 0 of every row full (4.2 M entries placed, the
   * last row's partial: 5 rows) and the scan runs over 4.2 M rows (CPU build ~0.2 s) */
  stof_mask *g16;
  TU_OK(f->ctx, stof_mask_global(f->ctx, 16, &g16));
  check_build(f, g16, 1, 1, 67108885, 40, 16, 1);
  stof_mask_free(g16);
  fg_finish(f);
}

/* Per-batch documents at length S: four batch elements of 3, 1, 5 and 2 sequences (the last
 * leaving a tail with no sequence), alone and combined with causal and BigBird. */
static void check_per_batch_documents(fg_fixture *f, int64_t S) {
  stof_ctx *ctx = f->ctx;
  static const int64_t nseq[4] = {3, 1, 5, 2};
  int64_t lens[11] = {S / 3, S / 3, S - 2 * (S / 3), S,        S / 7 + 1, S / 5, S / 9 + 2,
                      S / 4, S / 6, S / 2,           S / 3 + 11};
  stof_mask *docs, *causal, *bb, *m[4];
  TU_OK(ctx, stof_mask_document_batched(ctx, 4, nseq, lens, &docs));
  TU_OK(ctx, stof_mask_causal(ctx, &causal));
  TU_OK(ctx, stof_mask_suite(ctx, "bigbird", S, &bb));
  TU_OK(ctx, stof_mask_intersection(docs, causal, &m[0]));
  TU_OK(ctx, stof_mask_union(bb, docs, &m[1]));
  TU_OK(ctx, stof_mask_difference(bb, docs, &m[2]));
  m[3] = docs;
  for (int k = 0; k < 4; k++)
    for (int t = 0; t < NTILE; t++) check_build(f, m[k], 4, 2, S, S, tiles[t], 0);
  /* and unequal lengths */
  check_build(f, m[3], 4, 1, S, S / 2 + 1, 64, 0);
  check_build(f, m[0], 4, 3, S / 3 + 5, S, 128, 0);
  free_all(m, 3);
  stof_mask_free(docs);
  stof_mask_free(causal);
  stof_mask_free(bb);
}

void gpu_format_matches_cpu_on_per_batch_documents(void **state) {
  fg_fixture *f = fg_gpu(state);
  for (int s = 0; s < NSIZE; s++) check_per_batch_documents(f, sizes[s]);
  fg_finish(f);
}

/* Small sizes, for compute-sanitizer (scripts/gpu-sanitize.sh runs this test alone:
 * STOF_TEST_FILTER=gpu_format_matches_cpu_at_small_sizes): every suite mask and the other
 * kinds and combinations at S = 200 on every tile, the suite masks at unequal and odd
 * lengths on tile 64 and at 600 x 1100 on tiles 16 and 128 (3 and 2 items a row), per-batch
 * documents at S = 129. */
void gpu_format_matches_cpu_at_small_sizes(void **state) {
  fg_fixture *f = fg_gpu(state);
  stof_mask *m[MAXM + 8];
  int n = 0;
  for (int k = 0; stof_mask_suite_name(k); k++)
    TU_OK(f->ctx, stof_mask_suite(f->ctx, stof_mask_suite_name(k), 200, &m[n++]));
  int nsuite = n;
  n += other_masks(f->ctx, 200, m + n);
  for (int k = 0; k < n; k++)
    for (int t = 0; t < NTILE; t++) check_build(f, m[k], 2, 2, 200, 200, tiles[t], 0);
  static const int64_t dims[][2] = {{77, 200}, {200, 77}, {129, 129}, {1, 129}};
  for (int d = 0; d < 4; d++)
    for (int k = 0; k < nsuite; k++) check_build(f, m[k], 1, 2, dims[d][0], dims[d][1], 64, 0);
  free_all(m, n);
  /* tile-rows of 69 tiles at tile 16: 3 items (warps) a row, the last of 5 columns, and of 9
   * tiles at tile 128: 2 items of 8 and 1 columns, so that the tools see several warps add to
   * one row's counts and read their row's earlier items' (every case above has at most 32
   * tiles a row at tiles up to 64: one item) */
  for (int k = 0; stof_mask_suite_name(k); k++) {
    stof_mask *w;
    TU_OK(f->ctx, stof_mask_suite(f->ctx, stof_mask_suite_name(k), 1100, &w));
    check_build(f, w, 1, 1, 600, 1100, 16, 0);
    check_build(f, w, 1, 1, 600, 1100, 128, 0);
    stof_mask_free(w);
  }
  check_per_batch_documents(f, 129);
  fg_finish(f);
}

void gpu_format_build_times_against_cpu(void **state) {
  fg_fixture *f = fg_gpu(state);
  stof_ctx *ctx = f->ctx;
  static const char *const names[] = {"causal", "sliding", "bigbird", "document"};
  static const int64_t S[] = {8192, 16384, 32768};
  print_message("     build times at tile 64 (B = 1, H = 12), then tiles 16 and 128 at S = 32768\n");
  for (int s = 0; s < 3; s++)
    for (int k = 0; k < 4; k++) {
      stof_mask *m = NULL;
      TU_OK(ctx, stof_mask_suite(ctx, names[k], S[s], &m));
      check_build(f, m, 1, 12, S[s], S[s], 64, 1);
      if (S[s] == 32768) {
        check_build(f, m, 1, 12, S[s], S[s], 16, 1);
        check_build(f, m, 1, 12, S[s], S[s], 128, 1);
      }
      stof_mask_free(m);
    }
  fg_finish(f);
}

static int diagonal(void *ud, int64_t b, int64_t h, int64_t i, int64_t j) {
  (void)ud, (void)b, (void)h;
  return i == j;
}

void gpu_format_public_entry_cache_and_refusals(void **state) {
  fg_fixture *f = fg_gpu(state);
  stof_ctx *ctx = f->ctx;
  stof_mask *m = NULL, *fm = NULL, *mix = NULL;
  TU_OK(ctx, stof_mask_suite(ctx, "longformer", 9000, &m));
  /* the one-shot public entry */
  stof_mask_format *g = NULL, *c = NULL;
  TU_OK(ctx, stof_mask_format_build_gpu(ctx, m, 2, 3, 9000, 9000, 64, &g));
  TU_OK(ctx, stof_mask_format_build(ctx, m, 2, 3, 9000, 9000, 64, &c));
  char why[512];
  if (stof_mask_format_compare(g, c, why, sizeof why))
    fail_msg("stof_mask_format_build_gpu against the CPU's: %s", why);
  assert_true(g->build_ms >= 0);
  stof_mask_format_free(g);
  stof_mask_format_free(c);
  /* the builder's cache: one format per (mask, dims) */
  const stof_mask_format *a = NULL, *b = NULL, *d = NULL;
  TU_OK(ctx, kernels_format_gpu_get(f->g, m, 1, 1, 9000, 9000, 64, &a));
  TU_OK(ctx, kernels_format_gpu_get(f->g, m, 1, 1, 9000, 9000, 128, &b));
  TU_OK(ctx, kernels_format_gpu_get(f->g, m, 1, 1, 9000, 9000, 64, &d));
  assert_ptr_equal(a, d);
  assert_ptr_not_equal(a, b);
  assert_int_equal(b->T, 128);
  /* on-device entries apart from host ones; their device arrays with them */
  const stof_mask_format *dv1 = NULL, *dv2 = NULL;
  const uint64_t *d1 = NULL, *d2 = NULL;
  TU_OK(ctx, kernels_format_gpu_get_dev(f->g, m, 1, 1, 9000, 9000, 64, &dv1, &d1));
  TU_OK(ctx, kernels_format_gpu_get_dev(f->g, m, 1, 1, 9000, 9000, 64, &dv2, &d2));
  assert_ptr_equal(dv1, dv2);
  assert_ptr_equal(d1, d2);
  assert_ptr_not_equal(dv1, a);
  assert_null(dv1->bitmap);
  assert_int_equal(dv1->nentry, a->nentry);
  assert_true(d1[0] && d1[1]);
  /* refusals */
  TU_OK(ctx, stof_mask_fn(ctx, diagonal, NULL, "diagonal", 0, 0, &fm));
  TU_OK(ctx, stof_mask_union(m, fm, &mix));
  TU_ERR(ctx, stof_mask_format_build_gpu(ctx, mix, 1, 1, 9000, 9000, 64, &g), STOF_ERR_UNSUPPORTED,
         "fn(diagonal)");
  TU_ERR(ctx, kernels_format_gpu_get(f->g, mix, 1, 1, 9000, 9000, 64, &a), STOF_ERR_UNSUPPORTED,
         "only the CPU builder");
  TU_ERR(ctx, kernels_format_gpu_build(f->g, m, 1, 1, 9000, 9000, 72, &g), STOF_ERR_ARG,
         "tile size T = 72");
  setenv("STOF_FORMAT_GPU_KERNELS", "fast", 1);
  stof_status st = kernels_format_gpu_build(f->g, m, 1, 1, 9000, 9000, 64, &g);
  unsetenv("STOF_FORMAT_GPU_KERNELS");
  TU_ERR(ctx, st, STOF_ERR_ARG, "STOF_FORMAT_GPU_KERNELS=fast: expected rows or chunks");
  stof_mask_free(m);
  stof_mask_free(fm);
  stof_mask_free(mix);
}

/* Runs plan (mask m, B x H x S x S, D, f16, Hkv = H) on seeded inputs and checks its output
 * against the CPU implementation on a CPU-built format. */
static void plan_matches_cpu(stof_ctx *ctx, stof_attn_plan *plan, const stof_mask *m, int64_t B, int64_t H,
                             int64_t S, int64_t D, uint64_t seed) {
  stof_tensor *q = tu_tensor_uniform(ctx, STOF_DTYPE_F16, 4, TU_SHAPE(B, H, S, D), &seed, -2, 2);
  stof_tensor *k = tu_tensor_uniform(ctx, STOF_DTYPE_F16, 4, TU_SHAPE(B, H, S, D), &seed, -2, 2);
  stof_tensor *v = tu_tensor_uniform(ctx, STOF_DTYPE_F16, 4, TU_SHAPE(B, H, S, D), &seed, -1, 1);
  stof_tensor *q64, *k64, *v64, *o64, *dq, *dk, *dv, *dout, *hout;
  TU_OK(ctx, stof_tensor_cast(q, STOF_DTYPE_F64, &q64));
  TU_OK(ctx, stof_tensor_cast(k, STOF_DTYPE_F64, &k64));
  TU_OK(ctx, stof_tensor_cast(v, STOF_DTYPE_F64, &v64));
  TU_OK(ctx, stof_tensor_new(ctx, STOF_DTYPE_F64, 4, TU_SHAPE(B, H, S, D), STOF_DEVICE_CPU, &o64));
  stof_mask_format *fmt = NULL;
  TU_OK(ctx, stof_mask_format_build(ctx, m, B, H, S, S, 64, &fmt));
  TU_OK(ctx, stof_attention_cpu(ctx, q64, k64, v64, fmt, 0, o64));
  int64_t nvalid = 0;
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < H; h++) nvalid += stof_mask_format_count(fmt, b, h);
  assert_int_equal(stof_attn_plan_nvalid(plan), nvalid);
  TU_OK(ctx, stof_tensor_to(q, STOF_DEVICE_CUDA, &dq));
  TU_OK(ctx, stof_tensor_to(k, STOF_DEVICE_CUDA, &dk));
  TU_OK(ctx, stof_tensor_to(v, STOF_DEVICE_CUDA, &dv));
  TU_OK(ctx, stof_tensor_new(ctx, STOF_DTYPE_F16, 4, TU_SHAPE(B, H, S, D), STOF_DEVICE_CUDA, &dout));
  TU_OK(ctx, stof_cuda_memset16(ctx, (uint64_t)(uintptr_t)dout->data, 0x7e00, (size_t)stof_tensor_numel(dout)));
  TU_OK(ctx, stof_attn_plan_run(plan, dq, dk, dv, dout));
  TU_OK(ctx, stof_cuda_synchronize(ctx));
  TU_OK(ctx, stof_tensor_to(dout, STOF_DEVICE_CPU, &hout));
  double *want = tu_values(o64);
  tu_check_close(hout, want, (size_t)stof_tensor_numel(hout), 1e-2);
  free(want);
  stof_mask_format_free(fmt);
  stof_tensor *ts[] = {q, k, v, q64, k64, v64, o64, dq, dk, dv, dout, hout};
  for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) stof_tensor_free(ts[i]);
}

/* A plan at S = 8192 (its format built on the GPU) against the CPU implementation on a
 * CPU-built format. */
void engine_builds_long_sequence_formats_on_the_gpu(void **state) {
  fg_fixture *f = fg_gpu(state);
  stof_ctx *ctx = f->ctx;
  TU_OK(ctx, stof_attn_engine_new(ctx, &f->e));
  stof_attn_engine *e = f->e;
  static const char *const names[] = {"sliding", "causal_sliding"};
  const int64_t B = 1, H = 2, S = 8192, D = 64;
  for (int k = 0; k < 2; k++) {
    stof_mask *m = NULL;
    TU_OK(ctx, stof_mask_suite(ctx, names[k], S, &m));
    assert_true(stof_mask_format_gpu_supported(m));
    stof_attn_plan *plan = NULL;
    TU_OK(ctx, stof_attn_plan_new(e, m, B, H, H, S, S, D, STOF_DTYPE_F16, NULL, &plan));
    print_message("     %s at S = %lld through the engine: prepare %.2f ms\n", stof_mask_description(m),
                  (long long)S, stof_attn_plan_prepare_ms(plan));
    plan_matches_cpu(ctx, plan, m, B, H, S, D, 4200 + (uint64_t)k);
    stof_attn_plan_free(plan);
    stof_mask_free(m);
  }
}

/* The device bytes of a format's 4 arrays (row_ptr, col_idx, bmp_off, bitmap). */
static size_t format_device_bytes(const stof_mask_format *f) {
  return (size_t)f->nmask * (size_t)(f->nrow + 1) * 4 + (size_t)f->nentry * 8 + (size_t)f->nword * 8;
}

/* BigBird on Hopper: the selector reads the tile-64 format and the plan runs at tile 32. The
 * engine then keeps the tile-32 format only in its GPU cache at S = 8192 (device bytes those
 * of the tile-32 format); a plan forced to tile 64 builds that format again; its CPU cache at
 * S = 2048 keeps both (a second plan hits both); every plan's output matches the CPU's. Skips
 * where the GPU is not compute capability 9.0. */
void engine_drops_the_selectors_format_for_another_tile(void **state) {
  fg_fixture *f = fg_gpu(state);
  stof_ctx *ctx = f->ctx;
  stof_cuda_props props;
  TU_OK(ctx, stof_cuda_props_get(ctx, &props));
  if (props.cc_major != 9 || props.cc_minor != 0) {
    print_message("skipping: compute capability %d.%d, the tile-32 rule is Hopper's (9.0)\n", props.cc_major,
                  props.cc_minor);
    skip();
  }
  TU_OK(ctx, stof_attn_engine_new(ctx, &f->e));
  stof_attn_engine *e = f->e;
  const int64_t B = 1, H = 2, D = 64;
  stof_mask_cache *cpu = NULL;
  kernels_format_gpu *gpu = NULL;

  /* S = 8192: the formats are built and kept on the GPU */
  int64_t S = 8192;
  stof_mask *m = NULL;
  TU_OK(ctx, stof_mask_suite(ctx, "bigbird", S, &m));
  assert_true(stof_mask_format_gpu_supported(m));
  stof_mask_format *f32 = NULL, *f64 = NULL;
  TU_OK(ctx, stof_mask_format_build(ctx, m, B, H, S, S, 32, &f32));
  TU_OK(ctx, stof_mask_format_build(ctx, m, B, H, S, S, 64, &f64));
  size_t b32 = format_device_bytes(f32), b64 = format_device_bytes(f64);
  stof_attn_plan *plan = NULL, *p64 = NULL;
  TU_OK(ctx, stof_attn_plan_new(e, m, B, H, H, S, S, D, STOF_DTYPE_F16, NULL, &plan));
  assert_int_equal(stof_attn_plan_choice(plan)->tile, 32);
  kernels_attn_engine_caches(e, &cpu, &gpu);
  assert_non_null(gpu);
  print_message("     %s at S = %lld: the engine's GPU cache holds %d format(s), %zu device bytes (tile 32: %zu, "
                "tile 64: %zu)\n", stof_mask_description(m), (long long)S, kernels_format_gpu_count(gpu),
                kernels_format_gpu_device_bytes(gpu), b32, b64);
  assert_int_equal(kernels_format_gpu_count(gpu), 1);
  assert_int_equal(kernels_format_gpu_device_bytes(gpu), b32);
  plan_matches_cpu(ctx, plan, m, B, H, S, D, 4300);
  /* forced to tile 64: built again and kept (the plan's own tile) */
  TU_OK(ctx, stof_attn_plan_new(e, m, B, H, H, S, S, D, STOF_DTYPE_F16, &(stof_attn_opts){.tile = 64}, &p64));
  assert_int_equal(stof_attn_plan_choice(p64)->tile, 64);
  assert_int_equal(kernels_format_gpu_count(gpu), 2);
  assert_int_equal(kernels_format_gpu_device_bytes(gpu), b32 + b64);
  plan_matches_cpu(ctx, p64, m, B, H, S, D, 4301);
  stof_attn_plan_free(p64);
  /* the automatic plan again: tile 64 read (a hit), dropped, tile 32 a hit */
  stof_attn_plan_free(plan);
  TU_OK(ctx, stof_attn_plan_new(e, m, B, H, H, S, S, D, STOF_DTYPE_F16, NULL, &plan));
  assert_int_equal(kernels_format_gpu_count(gpu), 1);
  assert_int_equal(kernels_format_gpu_device_bytes(gpu), b32);
  stof_attn_plan_free(plan);
  stof_mask_format_free(f32);
  stof_mask_format_free(f64);
  stof_mask_free(m);

  /* S = 2048: the formats are built on the CPU, in the engine's CPU cache, which keeps both
   * (host memory; the drop is for the device's) */
  S = 2048;
  TU_OK(ctx, stof_mask_suite(ctx, "bigbird", S, &m));
  int64_t hits0, misses0, hits, misses;
  stof_mask_cache_stats(cpu, &hits0, &misses0);
  TU_OK(ctx, stof_attn_plan_new(e, m, B, H, H, S, S, D, STOF_DTYPE_F16, NULL, &plan));
  assert_int_equal(stof_attn_plan_choice(plan)->tile, 32);
  plan_matches_cpu(ctx, plan, m, B, H, S, D, 4302);
  stof_attn_plan_free(plan);
  TU_OK(ctx, stof_attn_plan_new(e, m, B, H, H, S, S, D, STOF_DTYPE_F16, NULL, &plan));
  stof_mask_cache_stats(cpu, &hits, &misses);
  assert_int_equal(misses - misses0, 2); /* tile 64, tile 32 */
  assert_int_equal(hits - hits0, 2);     /* both again: host formats are not dropped */
  plan_matches_cpu(ctx, plan, m, B, H, S, D, 4303);
  stof_attn_plan_free(plan);
  stof_mask_free(m);
}

/* Sliding on Hopper at S = 8192: the plan takes the query shift (its own, shifted copy of the
 * format, made from the tile-64 format the engine built on the GPU), and the engine's GPU cache
 * then holds nothing (the unshifted format dropped, as for another tile); a plan without the
 * shift builds it again and keeps it. Both plans' outputs match the CPU's. Skips where the GPU
 * is not compute capability 9.0. */
void engine_drops_the_unshifted_format(void **state) {
  fg_fixture *f = fg_gpu(state);
  stof_ctx *ctx = f->ctx;
  stof_cuda_props props;
  TU_OK(ctx, stof_cuda_props_get(ctx, &props));
  if (props.cc_major != 9 || props.cc_minor != 0) {
    print_message("skipping: compute capability %d.%d, the query shift is Hopper's (9.0)\n", props.cc_major,
                  props.cc_minor);
    skip();
  }
  TU_OK(ctx, stof_attn_engine_new(ctx, &f->e));
  stof_attn_engine *e = f->e;
  const int64_t B = 1, H = 2, D = 64, S = 8192;
  stof_mask_cache *cpu = NULL;
  kernels_format_gpu *gpu = NULL;
  stof_mask *m = NULL;
  TU_OK(ctx, stof_mask_suite(ctx, "sliding", S, &m));
  assert_true(stof_mask_format_gpu_supported(m));
  stof_mask_format *f64 = NULL;
  TU_OK(ctx, stof_mask_format_build(ctx, m, B, H, S, S, 64, &f64));
  size_t b64 = format_device_bytes(f64);
  stof_attn_plan *plan = NULL, *plain = NULL;
  TU_OK(ctx, stof_attn_plan_new(e, m, B, H, H, S, S, D, STOF_DTYPE_F16, NULL, &plan));
  assert_int_equal(stof_attn_plan_choice(plan)->tile, 64);
  assert_int_equal(stof_attn_plan_choice(plan)->qshift, 32);
  kernels_attn_engine_caches(e, &cpu, &gpu);
  assert_non_null(gpu);
  print_message("     %s at S = %lld, shifted: the engine's GPU cache holds %d format(s), %zu device bytes\n",
                stof_mask_description(m), (long long)S, kernels_format_gpu_count(gpu),
                kernels_format_gpu_device_bytes(gpu));
  assert_int_equal(kernels_format_gpu_count(gpu), 0);
  assert_int_equal(kernels_format_gpu_device_bytes(gpu), 0);
  plan_matches_cpu(ctx, plan, m, B, H, S, D, 4400);
  /* without the shift: the format built again and kept (the plan's own) */
  TU_OK(ctx, stof_attn_plan_new(e, m, B, H, H, S, S, D, STOF_DTYPE_F16, &(stof_attn_opts){.qshift = -1}, &plain));
  assert_int_equal(stof_attn_plan_choice(plain)->qshift, 0);
  assert_int_equal(kernels_format_gpu_count(gpu), 1);
  assert_int_equal(kernels_format_gpu_device_bytes(gpu), b64);
  plan_matches_cpu(ctx, plain, m, B, H, S, D, 4401);
  stof_attn_plan_free(plain);
  stof_attn_plan_free(plan);
  stof_mask_format_free(f64);
  stof_mask_free(m);
}
