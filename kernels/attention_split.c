/*
 * Heavy tile-rows of the Hopper attention kernel split across CTAs (DESIGN.md section 6):
 * which tile-rows of a mask format run as chunks of consecutive entries, each on a CTA of
 * its own (STOF_SM90_SPLIT=2 in attention_block_sm90.cu), their partial results merged by a
 * log-sum-exp combine, and the table the kernels read. Host code only, so that the rule is
 * tested on the CPU; kernels/attention.c uploads the table and launches.
 *
 * Invariants: a chunk is a non-empty run of consecutive entries of one tile-row; a split
 * row's chunks cover its entries exactly, in order; a row is split into 2 chunks or more;
 * every count, offset and byte size is computed in int64 and checked before it is narrowed.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels_int.h"

/* The automatic rule (split 0). A launch of many short tile-rows and a few long ones ends
 * with the long ones running alone (longformer(w, g) at 1 x 32 x 131072, tile 64: 32 rows of
 * 2,048 tiles, the rest 3-5 each; bench/NOTES-attention.md, session 8). With `slots` CTAs
 * resident at once, every slot does about share = (all tiles of the launch) / slots tiles;
 * a row that alone holds that much or more decides when the launch ends. So a tile-row of
 * n tiles is split when
 *     n >= max(KERNELS_SPLIT_MIN_TILES, KERNELS_SPLIT_MEAN_FACTOR * mean row, share)
 * (the first two keep ordinary imbalance, such as causal's 1..nrow, where it is: every row
 * of causal is below 4x its mean of nrow / 2), into floor(n / C) chunks (2 at least) of
 * about
 *     C = max(KERNELS_SPLIT_MIN_CHUNK, (all tiles of the split rows) / slots)
 * tiles, so that the chunk launch, which runs first and alone, is at most one wave of the
 * whole GPU. The chunk's fixed cost (Q load, prologue, a T x (D + 2) f32 partial written and
 * read back by the combine) is a few tiles' time, hence the floor of 16.
 * Measured on an H100 (thirteenth session, bench/results/split-h100-s13/): longformer at
 * 1 x 32 x 131072 D 128 4.34 -> 3.14 ms and at 1 x 32 x 32768 1.11 -> 0.86 ms; with half a
 * share as the threshold (the first version) longformer at 16 x 12 x 4096 D 64 split its
 * 64-tile global rows (a slot's share: 116 tiles) and took 0.307 ms against 0.286 unsplit,
 * hence a whole share. */
#define KERNELS_SPLIT_MIN_TILES 32
#define KERNELS_SPLIT_MEAN_FACTOR 4
#define KERNELS_SPLIT_MIN_CHUNK 16
/* The most workspace the automatic rule takes (a forced split past it is an error). */
#define KERNELS_SPLIT_MAX_WS ((int64_t)1 << 30)

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* a * b into *out; 0 when it overflows or either is negative. */
static int mul_ok(int64_t a, int64_t b, int64_t *out) {
  return a >= 0 && b >= 0 && !__builtin_mul_overflow(a, b, out);
}

/* Chunks of a row of n tiles (0: not split): a forced split (at_most) ceil(n / C), chunks
 * of at most C tiles; the automatic rule max(2, floor(n / C)), chunks of about C; none
 * below min_tiles or where that makes one chunk. */
static int64_t row_chunks(int64_t n, int64_t min_tiles, int64_t C, int at_most) {
  if (n < min_tiles) return 0;
  int64_t nc = at_most ? ceil_div(n, C) : n / C < 2 ? 2 : n / C;
  return nc >= 2 && nc <= n ? nc : 0;
}

void kernels_attn_split_free(stof_ctx *ctx, kernels_attn_split *s) {
  if (!s) return;
  stof_ctx_dealloc(ctx, s->table, sizeof *s->table * s->ntable);
  s->table = NULL;
  s->ntable = 0;
}

stof_status kernels_attn_split_plan(stof_ctx *ctx, const int32_t *row_ptr, int32_t nmask, int32_t nrow,
                                    int64_t BH, int T, int64_t D, int64_t slots, int split,
                                    kernels_attn_split *out) {
  memset(out, 0, sizeof *out);
  if (split < -1)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "attention: split %d (-1 never, 0 automatic, N > 0 chunks of at "
                          "most N tiles)", split);
  if (nmask <= 0 || nrow <= 0 || BH <= 0 || BH % nmask || T <= 0 || D <= 0)
    return stof_ctx_error(ctx, STOF_ERR_INTERNAL, "attention: split of %d instances x %d rows over %lld (b, h)",
                          nmask, nrow, (long long)BH);
  if (split < 0) {
    snprintf(out->why, sizeof out->why, "no split (asked for)");
    return STOF_OK;
  }
  int64_t reps = BH / nmask; /* (b, h) pairs per instance */
  int64_t sum = 0;           /* tiles of all instances */
  for (int32_t m = 0; m < nmask; m++) {
    const int32_t *rp = row_ptr + (int64_t)m * (nrow + 1);
    sum += (int64_t)rp[nrow] - rp[0];
  }
  int64_t min_tiles, C;
  if (split > 0) {
    min_tiles = (int64_t)split + 1, C = split;
  } else {
    if (slots <= 0) {
      snprintf(out->why, sizeof out->why, "no split (the device's size is unknown)");
      return STOF_OK;
    }
    int64_t total = reps * sum; /* < 2^31 * 2^31 */
    double mean = (double)sum / ((double)nmask * nrow);
    int64_t share = ceil_div(total, slots);
    min_tiles = KERNELS_SPLIT_MIN_TILES;
    if ((int64_t)ceil(KERNELS_SPLIT_MEAN_FACTOR * mean) > min_tiles)
      min_tiles = (int64_t)ceil(KERNELS_SPLIT_MEAN_FACTOR * mean);
    if (share > min_tiles) min_tiles = share;
    int64_t heavy = 0;
    for (int32_t m = 0; m < nmask; m++)
      for (int32_t r = 0; r < nrow; r++) {
        int64_t n = (int64_t)row_ptr[(int64_t)m * (nrow + 1) + r + 1] - row_ptr[(int64_t)m * (nrow + 1) + r];
        if (n >= min_tiles) heavy += n;
      }
    C = ceil_div(heavy * reps, slots);
    if (C < KERNELS_SPLIT_MIN_CHUNK) C = KERNELS_SPLIT_MIN_CHUNK;
  }
  /* count */
  int64_t nsplit = 0, nchunk = 0, split_max = 0, chunk_max = 0, longest = 0;
  for (int32_t m = 0; m < nmask; m++) {
    int64_t ns = 0, nc = 0;
    for (int32_t r = 0; r < nrow; r++) {
      int64_t n = (int64_t)row_ptr[(int64_t)m * (nrow + 1) + r + 1] - row_ptr[(int64_t)m * (nrow + 1) + r];
      int64_t k = row_chunks(n, min_tiles, C, split > 0);
      ns += k > 0, nc += k;
      if (k && ceil_div(n, k) > longest) longest = ceil_div(n, k);
    }
    nsplit += ns, nchunk += nc;
    if (ns > split_max) split_max = ns;
    if (nc > chunk_max) chunk_max = nc;
  }
  if (split > 0) longest = C; /* the limit asked for */
  out->min_tiles = min_tiles, out->chunk_tiles = longest;
  if (!nsplit) {
    snprintf(out->why, sizeof out->why, "no split (no tile-row has %lld tiles or more)", (long long)min_tiles);
    out->min_tiles = out->chunk_tiles = 0;
    return STOF_OK;
  }
  /* the workspace: a T x (D + 2) f32 partial per chunk and (b, h) */
  int64_t ws = 0, per = 0, slots_ws = 0;
  int ok = nchunk <= INT32_MAX && mul_ok(T, D + 2, &per) && mul_ok(per, 4, &per) &&
           mul_ok(BH, chunk_max, &slots_ws) && mul_ok(slots_ws, per, &ws) && (uint64_t)ws <= SIZE_MAX;
  if (!ok || ws > KERNELS_SPLIT_MAX_WS) {
    if (split == 0) {
      snprintf(out->why, sizeof out->why, "no split (%lld chunks of %lld (b, h) pairs would need %s workspace)",
               (long long)chunk_max, (long long)BH, ok ? "over 1 GiB of" : "past 2^63 bytes of");
      out->min_tiles = out->chunk_tiles = 0;
      return STOF_OK;
    }
    if (!ok)
      return stof_ctx_error(ctx, STOF_ERR_UNSUPPORTED, "attention: split %d: %lld chunks per instance over %lld (b, h) "
                            "pairs at tile %d, D %lld: the workspace size overflows", split, (long long)chunk_max,
                            (long long)BH, T, (long long)D);
    return stof_ctx_error(ctx, STOF_ERR_UNSUPPORTED, "attention: split %d needs %lld bytes of workspace (%lld chunks "
                          "per instance x %lld (b, h) pairs x %lld bytes), at most %lld: ask for longer chunks",
                          split, (long long)ws, (long long)chunk_max, (long long)BH, (long long)per,
                          (long long)KERNELS_SPLIT_MAX_WS);
  }
  /* the table (layout in kernels_int.h) */
  int64_t ntable = (int64_t)nmask * nrow + 2 * ((int64_t)nmask + 1) + 3 * nchunk + 3 * nsplit;
  if (ntable > INT32_MAX)
    return stof_ctx_error(ctx, STOF_ERR_UNSUPPORTED, "attention: split table of %lld entries (at most 2^31 - 1)",
                          (long long)ntable);
  int32_t *t = stof_ctx_alloc(ctx, sizeof *t * (size_t)ntable);
  if (!t) return STOF_ERR_NOMEM;
  out->table = t, out->ntable = (size_t)ntable;
  out->off_row_nchunk = 0;
  out->off_chunk_ptr = (int64_t)nmask * nrow;
  out->off_chunk = out->off_chunk_ptr + nmask + 1;
  out->off_srow_ptr = out->off_chunk + 3 * nchunk;
  out->off_srow = out->off_srow_ptr + nmask + 1;
  int32_t *row_nchunk = t + out->off_row_nchunk, *chunk_ptr = t + out->off_chunk_ptr, *chunk = t + out->off_chunk,
          *srow_ptr = t + out->off_srow_ptr, *srow = t + out->off_srow;
  int32_t c = 0, s = 0;
  for (int32_t m = 0; m < nmask; m++) {
    const int32_t *rp = row_ptr + (int64_t)m * (nrow + 1);
    chunk_ptr[m] = c, srow_ptr[m] = s;
    for (int32_t r = 0; r < nrow; r++) {
      int64_t e = rp[r], n = (int64_t)rp[r + 1] - rp[r], k = row_chunks(n, min_tiles, C, split > 0);
      row_nchunk[(int64_t)m * nrow + r] = (int32_t)k;
      if (!k) continue;
      srow[3 * s] = r, srow[3 * s + 1] = c - chunk_ptr[m], srow[3 * s + 2] = (int32_t)k;
      s++;
      for (int64_t i = 0; i < k; i++, c++) { /* as even as possible: sizes differ by at most 1 */
        chunk[3 * c] = r;
        chunk[3 * c + 1] = (int32_t)(e + n * i / k);
        chunk[3 * c + 2] = (int32_t)(e + n * (i + 1) / k);
      }
    }
  }
  chunk_ptr[nmask] = c, srow_ptr[nmask] = s;
  out->nsplit = (int32_t)nsplit, out->nchunk = (int32_t)nchunk;
  out->nsplit_max = (int32_t)split_max, out->nchunk_max = (int32_t)chunk_max;
  out->rows = nsplit * reps, out->chunks = nchunk * reps;
  out->ws_bytes = (size_t)ws;
  snprintf(out->why, sizeof out->why,
           "split %lld tile-rows of >= %lld tiles into %lld chunks of <= %lld tiles (%s; %.1f MB of workspace)",
           (long long)out->rows, (long long)min_tiles, (long long)out->chunks, (long long)longest,
           split > 0 ? "asked for" : "automatic", (double)ws / 1e6);
  return STOF_OK;
}

/* The launch order (STOF_SM90_ORDER; session 17, H100, attn_dev with every head's tile-row 0
 * launched first, bench/results/s17-h100/): the grid runs (b, h) by (b, h), each pair's rows
 * last first, so a row far longer than the others (longformer's global query rows: all S / T
 * tiles, against 4 for a window row) starts only when its (b, h) comes up, and the last
 * pairs' run alone at the end of the launch. Launched before every other row, longformer at
 * 16 x 12 x 4096 (D 64) took 0.937x the time (half skip 0.929x), 0.87x at 8 x 12 x 1024 and
 * 0.95x at 16 x 12 x 2048; document at 16 x 12 x 4096 1.006x (a control: no row of it reaches
 * 3x its mean, nor of causal, sliding, causal_sliding or bigbird there: tests/lua/
 * test_attention.lua). So a row goes first when it has at least KERNELS_ORDER_MEAN_FACTOR times its
 * instance's mean tiles and KERNELS_ORDER_MIN_TILES. */
#define KERNELS_ORDER_MEAN_FACTOR 3
#define KERNELS_ORDER_MIN_TILES 8
/* The other rows, head by head and last first, leave the launch's last (b, h) pairs running
 * their long rows after every other pair is done where rows differ in length (causal:
 * 1 .. nrow tiles; document: its documents' lengths; BigBird's random blocks). Launched
 * longest first over a group of G pairs at a time (their rank-k rows, pair by pair, then rank
 * k + 1: list scheduling, longest first), the long rows start early and the short ones fill
 * the end. A group's K and V should stay in L2 while its rows run (every row of a causal
 * head reads its prefix of them), hence G pairs whose K and V take at most
 * KERNELS_ORDER_L2_BYTES (half the 50 MB L2 of an H100 or H200). A simulation of the launch
 * (528 slots, a tile-row costing its tiles plus 2, bench/NOTES-attention.md session 23)
 * gave causal at 8 x 12 x 1024, tile 64, 42 -> 33 units and document 35 -> 28; at 16 x 12 x
 * 2048 237 -> 217 and 173 -> 161. Measured on an H200 (bench/results/s23/call3, against
 * groups of 1 in one process): at tile 64 causal D 64 0.90x (8 x 1024) and 0.97x (16 x 2048),
 * BigBird at 8 x 1024 0.95x (D 64) and 0.92x (D 128), document D 64 0.99-1.00x; at tile 128
 * (the D 128 ping-pong, one CTA an SM, and key64) causal 1.02-1.06x and document 1.03-1.07x
 * at D 128, causal D 64 key64 0.99x: so tile 64 or less (the rows of a (b, h) running together
 * there keep its K and V hot better than the group does; at tile 32, BigBird's on the block
 * kernel, the groups gave 0.98-1.00x on top of its long rows first, call 4). Taken where the
 * other rows' tile counts span at least KERNELS_ORDER_GROUP_SPREAD within an instance (so
 * not for dense, sliding or longformer's window rows). */
#define KERNELS_ORDER_GROUP_SPREAD 4
#define KERNELS_ORDER_L2_BYTES ((int64_t)24 << 20)

int64_t kernels_attn_order_group_max(int64_t BH, int64_t Sk, int64_t D, int T) {
  if (BH < 1 || Sk < 1 || D < 1 || T > 64) return 1;
  /* K and V of one pair, 2-byte elements (as if every query head had its own: GQA shares) */
  int64_t kv;
  if (!mul_ok(Sk, D, &kv) || !mul_ok(kv, 4, &kv)) return 1;
  int64_t g = KERNELS_ORDER_L2_BYTES / kv;
  return g < 1 ? 1 : g > BH ? BH : g;
}

void kernels_attn_order_free(stof_ctx *ctx, kernels_attn_order *o) {
  if (!o) return;
  stof_ctx_dealloc(ctx, o->table, sizeof *o->table * o->ntable);
  o->table = NULL;
  o->ntable = 0;
}

/* Heavy row of an instance: n tiles with n * nrow >= factor * total (n >= factor x mean). */
static int order_heavy(int64_t n, int64_t total, int32_t nrow) {
  return n >= KERNELS_ORDER_MIN_TILES && n * (int64_t)nrow >= KERNELS_ORDER_MEAN_FACTOR * total;
}

static int key_down(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? 1 : x > y ? -1 : 0;
}

stof_status kernels_attn_order_plan(stof_ctx *ctx, const int32_t *row_ptr, int32_t nmask, int32_t nrow,
                                    int64_t group_max, int group_forced, kernels_attn_order *out) {
  memset(out, 0, sizeof *out);
  out->group = 1;
  if (nmask <= 0 || nrow <= 0)
    return stof_ctx_error(ctx, STOF_ERR_INTERNAL, "attention: launch order of %d instances x %d rows", nmask, nrow);
  /* the most heavy rows of an instance: the kernel launches that many rows of every (b, h)
   * first; an instance with fewer fills the rest with its other rows, in their order. The
   * other rows' tile counts decide the grouping: the widest span within one instance (lo ..
   * hi, that instance's), since the groups reorder rows within each pair only. */
  int64_t nh = 0, most = 0, lo = 0, hi = 0;
  for (int32_t m = 0; m < nmask; m++) {
    const int32_t *rp = row_ptr + (int64_t)m * (nrow + 1);
    int64_t total = (int64_t)rp[nrow] - rp[0], k = 0, mlo = INT64_MAX, mhi = -1;
    for (int32_t r = 0; r < nrow; r++) {
      int64_t n = (int64_t)rp[r + 1] - rp[r];
      if (n > most) most = n;
      if (order_heavy(n, total, nrow)) {
        k++;
      } else {
        if (n < mlo) mlo = n;
        if (n > mhi) mhi = n;
      }
    }
    if (k > nh) nh = k;
    if (mhi >= mlo && mhi - mlo > hi - lo) lo = mlo, hi = mhi;
  }
  int spread = hi - lo >= KERNELS_ORDER_GROUP_SPREAD;
  int64_t group = group_max > 1 && (spread || group_forced) ? group_max : 1;
  if (group > INT32_MAX) group = INT32_MAX;
  char gwhy[112] = "";
  if (group > 1)
    snprintf(gwhy, sizeof gwhy, "longest first, %lld (b, h) at a time (%lld .. %lld tiles%s)", (long long)group,
             (long long)lo, (long long)hi, group_forced ? ", asked for" : "");
  if (nh == 0 && group == 1) {
    snprintf(out->why, sizeof out->why, "last tile-row first (none has %dx its mean tiles and >= %d; %s)",
             KERNELS_ORDER_MEAN_FACTOR, KERNELS_ORDER_MIN_TILES,
             group_forced ? "one (b, h) at a time, asked for"
             : spread     ? "one (b, h) at a time: no group (they need tile 64 or less, more than one (b, h) and "
                            "a pair's K and V within 24 MB)"
                          : "rows of about equal length");
    return STOF_OK;
  }
  int64_t nt;
  if (!mul_ok(nmask, nrow, &nt) || (uint64_t)nt > SIZE_MAX / sizeof *out->table)
    return stof_ctx_error(ctx, STOF_ERR_UNSUPPORTED, "attention: launch order of %d x %d tile-rows", nmask, nrow);
  int32_t *t = stof_ctx_alloc(ctx, sizeof *t * (size_t)nt);
  int64_t *key = stof_ctx_alloc(ctx, sizeof *key * (size_t)nrow);
  if (!t || !key) {
    stof_ctx_dealloc(ctx, t, t ? sizeof *t * (size_t)nt : 0);
    stof_ctx_dealloc(ctx, key, key ? sizeof *key * (size_t)nrow : 0);
    return STOF_ERR_NOMEM;
  }
  for (int32_t m = 0; m < nmask; m++) {
    const int32_t *rp = row_ptr + (int64_t)m * (nrow + 1);
    int32_t *row = t + (int64_t)m * nrow;
    int64_t total = (int64_t)rp[nrow] - rp[0], h = 0;
    /* heavy rows longest first, ties the lower row first: keys n 2^31 + (2^31 - 1 - r) (n and r
     * below 2^31), sorted down */
    for (int32_t r = 0; r < nrow; r++) {
      int64_t n = (int64_t)rp[r + 1] - rp[r];
      if (order_heavy(n, total, nrow)) key[h++] = n * ((int64_t)1 << 31) + (INT32_MAX - r);
    }
    qsort(key, (size_t)h, sizeof *key, key_down);
    for (int64_t i = 0; i < h; i++) row[i] = INT32_MAX - (int32_t)(key[i] & INT32_MAX);
    int64_t l = h;
    if (group > 1) {
      /* the others longest first, ties the higher row first (the default order's): keys
       * n 2^31 + r, sorted down */
      int64_t o = 0;
      for (int32_t r = 0; r < nrow; r++) {
        int64_t n = (int64_t)rp[r + 1] - rp[r];
        if (!order_heavy(n, total, nrow)) key[o++] = n * ((int64_t)1 << 31) + r;
      }
      qsort(key, (size_t)o, sizeof *key, key_down);
      for (int64_t i = 0; i < o; i++) row[l++] = (int32_t)(key[i] & INT32_MAX);
    } else {
      /* the others as before: last first */
      for (int32_t r = nrow - 1; r >= 0; r--)
        if (!order_heavy((int64_t)rp[r + 1] - rp[r], total, nrow)) row[l++] = r;
    }
  }
  stof_ctx_dealloc(ctx, key, sizeof *key * (size_t)nrow);
  out->table = t;
  out->ntable = (size_t)nt;
  out->nheavy = (int32_t)nh;
  out->group = (int32_t)group;
  if (nh && group > 1)
    snprintf(out->why, sizeof out->why, "%lld long tile-row%s a (b, h) launched first (>= %dx the mean tiles; the "
             "longest %lld), then the others %s", (long long)nh, nh > 1 ? "s" : "", KERNELS_ORDER_MEAN_FACTOR,
             (long long)most, gwhy);
  else if (nh)
    snprintf(out->why, sizeof out->why, "%lld long tile-row%s a (b, h) launched first (>= %dx the mean tiles; the "
             "longest %lld)", (long long)nh, nh > 1 ? "s" : "", KERNELS_ORDER_MEAN_FACTOR, (long long)most);
  else
    snprintf(out->why, sizeof out->why, "tile-rows %s", gwhy);
  return STOF_OK;
}
