/*
 * The mask format built on the GPU, the chunked kernels against the row-per-block ones
 * (kernels/mask_format.cu; STOF_FORMAT_GPU_KERNELS=chunks or =rows forces either at each
 * build; unset, the builder picks by the mask's terms), for the suite masks at batch 1,
 * tile 64.
 *
 *   bench_format_ab [--masks bigbird,...] [--shapes 32768,65536,131072] [--tile 64]
 *                   [--heads 32] [--reps 5] [--rounds 2] [--out FILE] [--count]
 *
 * On a GPU: per (mask, S), --rounds rounds of the chunked kernels then the row kernels, each the median of --reps
 * warm on-device builds (stof_mask_format_time_gpu: what bench_attention reports as
 * format_ms); then one host build of each, compared array by array and statistic by
 * statistic (they must be identical; the GPU tests compare both with the CPU builder at
 * smaller sizes; stof_mask_format_compare names the first difference, the chunked build's
 * value first). One line per case on stdout (and JSON in --out); exit 1 on a difference.
 *
 * --count (no GPU): the work of each version, counted on the host with the device's
 * evaluator: tiles, MIXED tiles (their words counted in the tile pass), partial tiles
 * (their words written in the write pass), the words each pass evaluates in full (mf_word)
 * and those the new passes settle from the 8 x 8 class (mf_word_fast), and the longest
 * chain of one lane in each pass (the block or warp that finishes last; lanes dealt words
 * as the kernels deal them, mf_word_index), in byte units: a full word 8 (eight rows of the
 * program), a class 1.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <stof/core.h>
#include <stof/kernels.h>

#include "kernels_int.h"

#define MAXL 16

static int split_list(char *s, char **out, int max) {
  int n = 0;
  for (char *t = strtok(s, ","); t && n < max; t = strtok(NULL, ",")) out[n++] = t;
  return n;
}

static void die(stof_ctx *ctx, const char *what) {
  fprintf(stderr, "bench_format_ab: %s: %s\n", what, stof_ctx_message(ctx));
  exit(2);
}

/* ---------------------------------------------------------------- counting */

typedef struct counts {
  long long tiles, mixed, partial;
  long long old_words, new_class, new_full; /* both passes */
  long long old_tile_chain, old_write_chain, new_tile_chain, new_write_chain;
} counts;

/* One tile-row of one instance: the old kernels' chains (tile pass: 4 warps taking 32
 * columns in turn, a round's mixed words spread over 32 lanes; write pass: 256 columns a
 * round, its partial words over 256 threads) and the new ones' (a warp per chunk of the row,
 * words over 32 lanes in the same order, each lane paying 1 for the class and 8 more where
 * the class does not settle the word). */
static void count_row(const kernels_format_prog *p, int64_t S, int T, int64_t r, int64_t chunk,
                      unsigned char *mixed, unsigned char *partial, unsigned char *unsettled,
                      counts *c) {
  int64_t ncol = S / T, wpt = (T / 8) * (T / 8), nb8 = T / 8;
  int64_t i0 = r * T;
  for (int64_t col = 0; col < ncol; col++) {
    int64_t j0 = col * T;
    int cls = kernels_format_prog_classify(p, 0, i0, i0 + T, j0, j0 + T);
    mixed[col] = cls == KERNELS_TILE_MIXED;
    partial[col] = 0;
    c->tiles++;
    if (!mixed[col]) continue;
    c->mixed++;
    int64_t bits = 0;
    for (int64_t w = 0; w < wpt; w++) {
      int64_t ci = w / nb8, ri = w % nb8;
      int64_t wi = i0 + ri * 8, wj = j0 + ci * 8;
      int k = kernels_format_prog_classify(p, 0, wi, wi + 8, wj, wj + 8);
      unsettled[col * wpt + w] = k == KERNELS_TILE_MIXED;
      bits += __builtin_popcountll(kernels_format_prog_word_fast(p, 0, S, S, wi, wj));
    }
    partial[col] = bits > 0 && bits < (int64_t)T * T;
  }
  /* old tile pass: the slowest warp of the row's block */
  long long worst = 0;
  for (int warp = 0; warp < 4; warp++) {
    long long chain = 0;
    for (int64_t c0 = warp * 32; c0 < ncol; c0 += 128) {
      long long nm = 0;
      for (int64_t col = c0; col < c0 + 32 && col < ncol; col++) nm += mixed[col];
      chain += 8 * ((nm * wpt + 31) / 32);
    }
    if (chain > worst) worst = chain;
  }
  if (worst > c->old_tile_chain) c->old_tile_chain = worst;
  long long wchain = 0;
  for (int64_t c0 = 0; c0 < ncol; c0 += 256) {
    long long np = 0;
    for (int64_t col = c0; col < c0 + 256 && col < ncol; col++) np += partial[col];
    wchain += 8 * ((np * wpt + 255) / 256);
  }
  if (wchain > c->old_write_chain) c->old_write_chain = wchain;
  /* new passes: a warp per chunk; lane x % 32 of a round's listed words */
  for (int pass = 0; pass < 2; pass++) {
    const unsigned char *which = pass ? partial : mixed;
    for (int64_t q0 = 0; q0 < ncol; q0 += chunk) {
      long long lane[32] = {0};
      for (int64_t c0 = q0; c0 < q0 + chunk && c0 < ncol; c0 += 32) {
        int64_t x = 0, t = 0;
        for (int64_t col = c0; col < c0 + 32 && col < q0 + chunk && col < ncol; col++) {
          if (!which[col]) continue;
          for (int64_t k = 0; k < wpt; k++, x++) {
            int64_t w = kernels_format_word_index((int)k, (int)t, (int)wpt);
            lane[x % 32] += 1 + 8 * unsettled[col * wpt + w];
            c->new_class++;
            c->new_full += unsettled[col * wpt + w];
            c->old_words++;
          }
          t++;
        }
      }
      long long m = 0;
      for (int l = 0; l < 32; l++) m = lane[l] > m ? lane[l] : m;
      long long *slot = pass ? &c->new_write_chain : &c->new_tile_chain;
      if (m > *slot) *slot = m;
    }
  }
  for (int64_t col = 0; col < ncol; col++) c->partial += partial[col];
}

static void count_case(stof_ctx *ctx, const stof_mask *m, int64_t S, int T, FILE *out) {
  kernels_format_prog *p = NULL;
  if (kernels_format_prog_new(ctx, m, &p)) die(ctx, "program");
  int64_t ncol = S / T, wpt = (T / 8) * (T / 8), chunk = kernels_format_chunk_cols(ncol, T);
  unsigned char *mixed = malloc((size_t)ncol), *partial = malloc((size_t)ncol),
                *unsettled = malloc((size_t)(ncol * wpt));
  if (!mixed || !partial || !unsettled) exit(2);
  counts c = {0};
  for (int64_t r = 0; r < S / T; r++) count_row(p, S, T, r, chunk, mixed, partial, unsettled, &c);
  long long nitem = (S / T) * ((ncol + chunk - 1) / chunk);
  printf("%-46.46s S=%-6lld tiles %9lld mixed %8lld partial %8lld | words: old %10lld full; "
         "new %10lld classes + %9lld full | chains (bytes) tile %7lld -> %6lld, write %7lld -> "
         "%6lld | blocks old %lld, new %lld (%lld warps)\n",
         stof_mask_description(m), (long long)S, c.tiles, c.mixed, c.partial, c.old_words,
         c.new_class, c.new_full, c.old_tile_chain, c.new_tile_chain, c.old_write_chain,
         c.new_write_chain, (long long)(S / T), (nitem + 3) / 4, nitem);
  if (out)
    fprintf(out, "{\"mask\": \"%s\", \"S\": %lld, \"T\": %d, \"tiles\": %lld, \"mixed\": %lld, "
            "\"partial\": %lld, \"old_full_words\": %lld, \"new_class_words\": %lld, "
            "\"new_full_words\": %lld, \"old_tile_chain\": %lld, \"new_tile_chain\": %lld, "
            "\"old_write_chain\": %lld, \"new_write_chain\": %lld, \"items\": %lld}\n",
            stof_mask_description(m), (long long)S, T, c.tiles, c.mixed, c.partial, c.old_words,
            c.new_class, c.new_full, c.old_tile_chain, c.new_tile_chain, c.old_write_chain,
            c.new_write_chain, nitem);
  free(mixed), free(partial), free(unsettled);
  kernels_format_prog_free(p);
}

/* ---------------------------------------------------------------- timing */

static double timed(stof_ctx *ctx, const stof_mask *m, int64_t H, int64_t S, int T, int reps,
                    int rows) {
  setenv("STOF_FORMAT_GPU_KERNELS", rows ? "rows" : "chunks", 1);
  double ms = -1;
  size_t bytes = 0;
  if (stof_mask_format_time_gpu(ctx, m, 1, H, S, S, T, reps, &ms, &bytes)) die(ctx, "time");
  return ms;
}

static int ab_case(stof_ctx *ctx, const stof_mask *m, int64_t H, int64_t S, int T, int reps,
                   int rounds, FILE *out) {
  double ms[2][MAXL], best[2] = {1e30, 1e30};
  for (int r = 0; r < rounds; r++)
    for (int rows = 0; rows < 2; rows++) {
      ms[rows][r] = timed(ctx, m, H, S, T, reps, rows);
      if (ms[rows][r] < best[rows]) best[rows] = ms[rows][r];
    }
  stof_mask_format *f[2] = {NULL, NULL};
  for (int rows = 0; rows < 2; rows++) {
    setenv("STOF_FORMAT_GPU_KERNELS", rows ? "rows" : "chunks", 1);
    if (stof_mask_format_build_gpu(ctx, m, 1, H, S, S, T, &f[rows])) die(ctx, "host build");
  }
  unsetenv("STOF_FORMAT_GPU_KERNELS");
  char why[512];
  int differ = stof_mask_format_compare(f[0], f[1], why, sizeof why);
  printf("%-46.46s S=%-6lld format_ms chunks", stof_mask_description(m), (long long)S);
  for (int r = 0; r < rounds; r++) printf(" %.3f", ms[0][r]);
  printf(" | rows");
  for (int r = 0; r < rounds; r++) printf(" %.3f", ms[1][r]);
  printf(" | rows/chunks (best) %.2fx | %s\n", best[1] / best[0], differ ? why : "identical");
  if (out) {
    fprintf(out, "{\"mask\": \"%s\", \"S\": %lld, \"T\": %d, \"H\": %lld, \"reps\": %d, "
            "\"partial\": %lld, \"identical\": %s", stof_mask_description(m), (long long)S, T,
            (long long)H, reps, (long long)f[0]->ntile_partial, differ ? "false" : "true");
    for (int rows = 0; rows < 2; rows++) {
      fprintf(out, ", \"%s_ms\": [", rows ? "rows" : "chunks");
      for (int r = 0; r < rounds; r++) fprintf(out, "%s%.4f", r ? ", " : "", ms[rows][r]);
      fprintf(out, "]");
    }
    fprintf(out, "}\n");
  }
  stof_mask_format_free(f[0]);
  stof_mask_format_free(f[1]);
  return differ;
}

int main(int argc, char **argv) {
  char masks_s[512] = "causal,sliding,causal_sliding,longformer,bigbird,document",
       shapes_s[256] = "32768,65536,131072";
  int T = 64, reps = 5, rounds = 2, count = 0;
  long long H = 32;
  const char *out_path = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--count")) {
      count = 1;
      continue;
    }
    if (!v) {
      fprintf(stderr, "bench_format_ab: %s needs a value\n", a);
      return 2;
    }
    if (!strcmp(a, "--masks")) snprintf(masks_s, sizeof masks_s, "%s", v);
    else if (!strcmp(a, "--shapes")) snprintf(shapes_s, sizeof shapes_s, "%s", v);
    else if (!strcmp(a, "--tile")) T = atoi(v);
    else if (!strcmp(a, "--heads")) H = atoll(v);
    else if (!strcmp(a, "--reps")) reps = atoi(v);
    else if (!strcmp(a, "--rounds")) rounds = atoi(v);
    else if (!strcmp(a, "--out")) out_path = v;
    else {
      fprintf(stderr, "bench_format_ab: unknown option %s\n", a);
      return 2;
    }
    i++;
  }
  if (T < 16 || T > 128 || T % 16 || reps < 1 || rounds < 1 || rounds > MAXL || H < 1) {
    fprintf(stderr, "bench_format_ab: --tile a multiple of 16 in [16, 128], --reps and --heads "
                    ">= 1, --rounds in [1, 16]\n");
    return 2;
  }
  char *masks[MAXL], *shapes[MAXL];
  int nm = split_list(masks_s, masks, MAXL), ns = split_list(shapes_s, shapes, MAXL);
  stof_ctx *ctx = stof_ctx_new(NULL, NULL);
  FILE *out = out_path ? fopen(out_path, "a") : NULL;
  if (out_path && !out) {
    fprintf(stderr, "bench_format_ab: cannot open %s\n", out_path);
    return 2;
  }
  int bad = 0;
  for (int s = 0; s < ns; s++) {
    int64_t S = atoll(shapes[s]);
    if (S < T || S % T) {
      fprintf(stderr, "bench_format_ab: S = %s must be a multiple of the tile\n", shapes[s]);
      return 2;
    }
    for (int k = 0; k < nm; k++) {
      stof_mask *m = NULL;
      if (stof_mask_suite(ctx, masks[k], S, &m)) die(ctx, masks[k]);
      if (count) count_case(ctx, m, S, T, out);
      else bad += ab_case(ctx, m, H, S, T, reps, rounds, out);
      fflush(stdout);
      stof_mask_free(m);
    }
  }
  if (out) fclose(out);
  stof_ctx_free(ctx);
  return bad ? 1 : 0;
}
