/*
 * The two-level mask format (BSR of outer tiles + bitmaps of 8 x 8 inner tiles), built on
 * the CPU, decoded and compared for tests, and cached per (mask, dims, tile size).
 *
 * Invariants: the arrays follow the layout documented in include/stof/kernels.h exactly;
 * a tile is "full" only when it lies inside [0, Sq) x [0, Sk) and every element is kept,
 * "partial" when some but not all of its elements are kept (edge tiles included), absent
 * when none is. Every array is allocated to its exact size (freed from the counts).
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "kernels_int.h"

/* ---------------------------------------------------------------- building */

typedef struct builder {
  stof_ctx *ctx;
  int32_t *col, *off;
  int64_t ne, ccap, ocap; /* entries; capacities of col and of off */
  uint64_t *bits;
  int64_t nw, wcap;
} builder;

static stof_status push_entry(builder *bd, int32_t col, int32_t off) {
  if (bd->ne == bd->ccap || bd->ne == bd->ocap) {
    if (bd->ne >= INT32_MAX)
      return stof_ctx_error(bd->ctx, STOF_ERR_UNSUPPORTED,
                            "mask_format_build: more than 2^31 - 1 non-empty tiles");
    int64_t cap = bd->ne ? bd->ne * 2 : 1024;
    if (cap > INT32_MAX) cap = INT32_MAX;
    if (bd->ccap < cap) {
      int32_t *c = stof_ctx_realloc(bd->ctx, bd->col, (size_t)bd->ccap * 4, (size_t)cap * 4);
      if (!c) return STOF_ERR_NOMEM;
      bd->col = c;
      bd->ccap = cap;
    }
    if (bd->ocap < cap) {
      int32_t *o = stof_ctx_realloc(bd->ctx, bd->off, (size_t)bd->ocap * 4, (size_t)cap * 4);
      if (!o) return STOF_ERR_NOMEM;
      bd->off = o;
      bd->ocap = cap;
    }
  }
  bd->col[bd->ne] = col;
  bd->off[bd->ne] = off;
  bd->ne++;
  return STOF_OK;
}

/* Room for n more words; their index in *at. */
static stof_status reserve_words(builder *bd, int64_t n, int64_t *at) {
  if (bd->nw + n > INT32_MAX)
    return stof_ctx_error(bd->ctx, STOF_ERR_UNSUPPORTED,
                          "mask_format_build: bitmap past 2^31 - 1 words (too many partial "
                          "tiles)");
  if (bd->nw + n > bd->wcap) {
    int64_t cap = bd->wcap ? bd->wcap : 4096;
    while (cap < bd->nw + n) cap *= 2;
    uint64_t *b = stof_ctx_realloc(bd->ctx, bd->bits, (size_t)bd->wcap * 8, (size_t)cap * 8);
    if (!b) return STOF_ERR_NOMEM;
    bd->bits = b;
    bd->wcap = cap;
  }
  *at = bd->nw;
  bd->nw += n;
  return STOF_OK;
}

/* Shrinks *p from cap to n elements of size es (NULL when n == 0). */
static stof_status shrink(stof_ctx *ctx, void **p, int64_t cap, int64_t n, size_t es) {
  if (cap == n) return STOF_OK;
  if (n == 0) {
    stof_ctx_dealloc(ctx, *p, (size_t)cap * es);
    *p = NULL;
    return STOF_OK;
  }
  void *q = stof_ctx_realloc(ctx, *p, (size_t)cap * es, (size_t)n * es);
  if (!q) return STOF_ERR_NOMEM;
  *p = q;
  return STOF_OK;
}

double kernels_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* Bytes as "125.0 GiB". */
static void fmt_bytes(char *buf, size_t size, double n) {
  if (n >= 1024.0 * 1024 * 1024) snprintf(buf, size, "%.1f GiB", n / (1024.0 * 1024 * 1024));
  else snprintf(buf, size, "%.1f MiB", n / (1024.0 * 1024));
}

stof_status kernels_format_dims_check(stof_ctx *ctx, const char *who, const stof_mask *mask,
                                      const void *out, int64_t B, int64_t H, int64_t Sq,
                                      int64_t Sk, int T, kernels_format_dims *d) {
  if (!mask || !out) return stof_ctx_error(ctx, STOF_ERR_ARG, "%s: mask or out is NULL", who);
  if (T < 16 || T > KERNELS_TILE_MAX || T % 16)
    return stof_ctx_error(ctx, STOF_ERR_ARG,
                          "%s: tile size T = %d must be a multiple of 16 in [16, 128]", who, T);
  if (B < 1 || H < 1 || Sq < 1 || Sk < 1)
    return stof_ctx_error(ctx, STOF_ERR_ARG,
                          "%s: extents must be >= 1 (B = %lld, H = %lld, Sq = %lld, Sk = %lld)",
                          who, (long long)B, (long long)H, (long long)Sq, (long long)Sk);
  const char *big = Sq > STOF_MASK_MAX_EXTENT ? "Sq" : Sk > STOF_MASK_MAX_EXTENT ? "Sk" : NULL;
  if (big)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "%s: %s = %lld is too large (at most 2^40 = %lld)",
                          who, big, (long long)(Sq > STOF_MASK_MAX_EXTENT ? Sq : Sk),
                          (long long)STOF_MASK_MAX_EXTENT);
  stof_status st = kernels_mask_check_dims(ctx, who, mask, B, H, Sq, Sk);
  if (st) return st;
  /* Sq, Sk <= 2^40: the tile counts fit; the products below are checked */
  d->nrow = (Sq + T - 1) / T, d->ncol = (Sk + T - 1) / T;
  d->mask_b = stof_mask_varies_b(mask) ? B : 1, d->mask_h = stof_mask_varies_h(mask) ? H : 1;
  int64_t nmask, ntile, grid, rowptr;
  int over = __builtin_mul_overflow(d->mask_b, d->mask_h, &nmask) ||
             __builtin_mul_overflow(d->nrow, d->ncol, &grid) ||
             __builtin_mul_overflow(nmask, grid, &ntile);
  if (over || ntile > STOF_MASK_FORMAT_MAX_TILES)
    return stof_ctx_error(ctx, STOF_ERR_UNSUPPORTED,
                          "%s: %lld instance%s of %lld x %lld tiles of %d x %d is %s%.3g tiles, "
                          "more than a format may have (2^26 = %lld): use a larger tile, a "
                          "shorter sequence, or fewer batches / heads where the mask varies",
                          who, (long long)nmask, nmask == 1 ? "" : "s", (long long)d->nrow,
                          (long long)d->ncol, T, T, over ? "over " : "",
                          over ? 9.2e18 : (double)ntile, (long long)STOF_MASK_FORMAT_MAX_TILES);
  if (__builtin_mul_overflow(nmask, d->nrow + 1, &rowptr) || rowptr > INT32_MAX)
    return stof_ctx_error(ctx, STOF_ERR_UNSUPPORTED,
                          "%s: %lld instances of %lld x %lld tiles is too large", who,
                          (long long)nmask, (long long)d->nrow, (long long)d->ncol);
  /* the worst case: every tile partial (an entry and (T/8)^2 bitmap words each) */
  int64_t wpt = (int64_t)(T / 8) * (T / 8);
  int64_t worst = rowptr * 4 + 2 * nmask * d->nrow * 4 + ntile * (8 + wpt * 8);
  if (worst > STOF_MASK_FORMAT_MAX_BYTES) {
    char have[32], lim[32];
    fmt_bytes(have, sizeof have, (double)worst);
    fmt_bytes(lim, sizeof lim, (double)STOF_MASK_FORMAT_MAX_BYTES);
    return stof_ctx_error(ctx, STOF_ERR_UNSUPPORTED,
                          "%s: a format of %lld instance%s of %lld x %lld tiles of %d x %d may "
                          "take up to %s (every tile partial), more than the limit of %s: use a "
                          "shorter sequence, fewer batches / heads where the mask varies, or a "
                          "smaller tile",
                          who, (long long)nmask, nmask == 1 ? "" : "s", (long long)d->nrow,
                          (long long)d->ncol, T, T, have, lim);
  }
  /* an fn predicate is called for every element of the tiles it decides */
  int64_t elems;
  if (!mask->cacheable &&
      (__builtin_mul_overflow(Sq, Sk, &elems) || __builtin_mul_overflow(elems, nmask, &elems) ||
       elems > STOF_MASK_FN_MAX_EVALS))
    return stof_ctx_error(ctx, STOF_ERR_UNSUPPORTED,
                          "%s: mask %s calls a predicate for each element: %lld instance%s x "
                          "%lld x %lld = %.3g calls, more than the limit of 2^26 = %lld (about "
                          "10 s at 0.15 us a call from Lua): use a shorter sequence, or build "
                          "the mask from the analytic constructors or from_tensor",
                          who, stof_mask_description(mask), (long long)nmask,
                          nmask == 1 ? "" : "s", (long long)Sq, (long long)Sk,
                          (double)nmask * (double)Sq * (double)Sk,
                          (long long)STOF_MASK_FN_MAX_EVALS);
  d->nmask = nmask;
  return STOF_OK;
}

void stof_mask_format_free(stof_mask_format *f) {
  if (!f) return;
  stof_ctx *ctx = f->ctx;
  size_t nrp = (size_t)f->nmask * (size_t)(f->nrow + 1), nr = (size_t)f->nmask * f->nrow;
  if (f->desc) stof_ctx_dealloc(ctx, f->desc, strlen(f->desc) + 1);
  if (f->row_ptr) stof_ctx_dealloc(ctx, f->row_ptr, nrp * 4);
  if (f->col_idx) stof_ctx_dealloc(ctx, f->col_idx, (size_t)f->nentry * 4);
  if (f->bmp_off) stof_ctx_dealloc(ctx, f->bmp_off, (size_t)f->nentry * 4);
  if (f->bitmap) stof_ctx_dealloc(ctx, f->bitmap, (size_t)f->nword * 8);
  if (f->nfull) stof_ctx_dealloc(ctx, f->nfull, nr * 4);
  if (f->npartial) stof_ctx_dealloc(ctx, f->npartial, nr * 4);
  stof_ctx_dealloc(ctx, f, sizeof *f);
}

/* Inner-tile words of a T x T tile from its rows (rows past nr are 0). */
static void tile_words(const kernels_tile_row *rows, int nr, int T, uint64_t *out) {
  int nb8 = T / 8;
  for (int ci = 0; ci < nb8; ci++) {
    int w = (ci * 8) >> 6, s = (ci * 8) & 63;
    for (int ri = 0; ri < nb8; ri++) {
      uint64_t word = 0;
      for (int r = 0; r < 8 && ri * 8 + r < nr; r++)
        word |= ((rows[ri * 8 + r][w] >> s) & 0xff) << (8 * r);
      out[ci * nb8 + ri] = word;
    }
  }
}

/* Non-empty 16 x 16 sub-tiles of a tile of nr x nc from its rows. */
static int64_t count16(const kernels_tile_row *rows, int nr, int nc) {
  int64_t n = 0;
  for (int si = 0; si * 16 < nr; si++)
    for (int sj = 0; sj * 16 < nc; sj++) {
      int w = (sj * 16) >> 6, s = (sj * 16) & 63;
      uint64_t any = 0;
      for (int r = si * 16; r < si * 16 + 16 && r < nr; r++) any |= (rows[r][w] >> s) & 0xffff;
      n += any != 0;
    }
  return n;
}

/* The n <= 64 bits of a row from column a on (a + n <= 128). */
static uint64_t row_bits(const uint64_t *row, int a, int n) {
  int w = a >> 6, s = a & 63;
  uint64_t v = row[w] >> s;
  if (s && w == 0 && a + n > 64) v |= row[1] << (64 - s);
  return n == 64 ? v : v & ((1ull << n) - 1);
}

/* Whether one key half of a T x T tile, columns [0, T/2) or [T/2, T), has no bit in any of
 * its nr rows. Counted for T a multiple of 32 only: there the halves are whole 16-column
 * sub-tiles, which is what the GPU builder sees. */
static int half_empty(const kernels_tile_row *rows, int nr, int T) {
  if (T % 32) return 0;
  uint64_t lo = 0, hi = 0;
  for (int r = 0; r < nr; r++) lo |= row_bits(rows[r], 0, T / 2), hi |= row_bits(rows[r], T / 2, T / 2);
  return !lo || !hi;
}

stof_status stof_mask_format_build(stof_ctx *ctx, const stof_mask *mask, int64_t B, int64_t H,
                                   int64_t Sq, int64_t Sk, int T, stof_mask_format **out) {
  const char *who = "mask_format_build";
  kernels_format_dims d;
  stof_status st = kernels_format_dims_check(ctx, who, mask, out, B, H, Sq, Sk, T, &d);
  if (st) return st;
  int64_t nrow = d.nrow, ncol = d.ncol, mask_b = d.mask_b, mask_h = d.mask_h, nmask = d.nmask;
  double t0 = kernels_now_ms();

  stof_mask_format *f = stof_ctx_alloc(ctx, sizeof *f);
  if (!f) return STOF_ERR_NOMEM;
  f->ctx = ctx;
  f->copy_ms = 0;
  f->qshift = 0;
  f->B = B, f->H = H, f->Sq = Sq, f->Sk = Sk, f->T = T;
  f->nrow = (int32_t)nrow, f->ncol = (int32_t)ncol;
  f->mask_b = (int32_t)mask_b, f->mask_h = (int32_t)mask_h, f->nmask = (int32_t)nmask;
  f->desc = stof_ctx_strdup(ctx, stof_mask_description(mask));
  f->row_ptr = stof_ctx_alloc(ctx, (size_t)(nmask * (nrow + 1)) * 4);
  f->nfull = stof_ctx_alloc(ctx, (size_t)(nmask * nrow) * 4);
  f->npartial = stof_ctx_alloc(ctx, (size_t)(nmask * nrow) * 4);
  if (!f->desc || !f->row_ptr || !f->nfull || !f->npartial) {
    stof_mask_format_free(f);
    return STOF_ERR_NOMEM;
  }

  builder bd = {ctx, NULL, NULL, 0, 0, 0, NULL, 0, 0};
  kernels_tile_row rows[KERNELS_TILE_MAX];
  const kernels_mask_node *root = mask->root;
  int wpt = (T / 8) * (T / 8), n16 = T / 16;
  int64_t nvalid = 0, nfull = 0, npartial = 0, nhalf = 0, valid16 = 0;
  for (int64_t m = 0; m < nmask && !st; m++) {
    int64_t bb = mask_b > 1 ? m / mask_h : 0, hh = mask_h > 1 ? m % mask_h : 0;
    int32_t *rp = f->row_ptr + m * (nrow + 1);
    for (int64_t r = 0; r < nrow && !st; r++) {
      int64_t i0 = r * T;
      int nr = (int)(Sq - i0 < T ? Sq - i0 : T);
      rp[r] = (int32_t)bd.ne;
      int32_t *rf = f->nfull + m * nrow + r, *rpart = f->npartial + m * nrow + r;
      for (int64_t c = 0; c < ncol; c++) {
        int64_t j0 = c * T;
        int nc = (int)(Sk - j0 < T ? Sk - j0 : T);
        int edge = nr < T || nc < T;
        int k = kernels_mask_classify(root, bb, hh, i0, i0 + nr, j0, j0 + nc);
        if (k == KERNELS_TILE_ZERO) continue;
        int64_t count = (int64_t)nr * nc;
        if (k == KERNELS_TILE_ONE) {
          for (int q = 0; q < nr; q++) {
            rows[q][0] = rows[q][1] = 0;
            kernels_row_set(rows[q], 0, nc);
          }
        } else {
          int fs = kernels_mask_fill(root, bb, hh, i0, nr, j0, nc, rows);
          if (fs == -2) {
            st = STOF_ERR_NOMEM;
            break;
          }
          if (fs) {
            st = stof_ctx_error(ctx, STOF_ERR_ARG,
                                "%s: the predicate of mask %s failed in tile (%lld, %lld) of "
                                "instance (b %lld, h %lld)",
                                who, f->desc, (long long)r, (long long)c, (long long)bb,
                                (long long)hh);
            break;
          }
          count = 0;
          for (int q = 0; q < nr; q++)
            count += __builtin_popcountll(rows[q][0]) + __builtin_popcountll(rows[q][1]);
          if (count == 0) continue;
        }
        if (!edge && count == (int64_t)T * T) {
          if ((st = push_entry(&bd, (int32_t)c, -1))) break;
          (*rf)++;
          nfull++;
          nvalid += count;
          valid16 += n16 * n16;
          continue;
        }
        int64_t at = 0;
        if ((st = reserve_words(&bd, wpt, &at)) || (st = push_entry(&bd, (int32_t)c, (int32_t)at)))
          break;
        tile_words(rows, nr, T, bd.bits + at);
        (*rpart)++;
        npartial++;
        nhalf += half_empty(rows, nr, T);
        nvalid += count;
        valid16 += count16(rows, nr, nc);
      }
    }
    rp[nrow] = (int32_t)bd.ne;
  }
  if (!st && !(st = shrink(ctx, (void **)&bd.col, bd.ccap, bd.ne, 4))) bd.ccap = bd.ne;
  if (!st && !(st = shrink(ctx, (void **)&bd.off, bd.ocap, bd.ne, 4))) bd.ocap = bd.ne;
  if (!st && !(st = shrink(ctx, (void **)&bd.bits, bd.wcap, bd.nw, 8))) bd.wcap = bd.nw;
  if (st) {
    if (bd.col) stof_ctx_dealloc(ctx, bd.col, (size_t)bd.ccap * 4);
    if (bd.off) stof_ctx_dealloc(ctx, bd.off, (size_t)bd.ocap * 4);
    if (bd.bits) stof_ctx_dealloc(ctx, bd.bits, (size_t)bd.wcap * 8);
    stof_mask_format_free(f);
    return st;
  }
  f->col_idx = bd.col;
  f->bmp_off = bd.off;
  f->nentry = (int32_t)bd.ne;
  f->bitmap = bd.bits;
  f->nword = bd.nw;

  int64_t ntile = nmask * nrow * ncol;
  int64_t ntile16 = nmask * ((Sq + 15) / 16) * ((Sk + 15) / 16);
  f->nvalid = nvalid;
  f->density = (double)nvalid / ((double)nmask * (double)Sq * (double)Sk);
  f->frac16 = (double)valid16 / (double)ntile16;
  f->ntile_full = nfull;
  f->ntile_partial = npartial;
  f->ntile_empty = ntile - nfull - npartial;
  f->ntile_halfempty = nhalf;
  f->bytes = (size_t)(nmask * (nrow + 1)) * 4 + (size_t)bd.ne * 8 + (size_t)bd.nw * 8;
  f->build_ms = kernels_now_ms() - t0;
  *out = f;
  return STOF_OK;
}

/* ---------------------------------------------------------------- query shift */

/* The 64 inner words of tile column c of a row (entries [e, e1) of f, ascending columns):
 * ~0 each for a full tile, the bitmap for a partial one, NULL when the row has no such tile
 * (then *pos has moved past the columns before c). */
static const uint64_t *shift_words(const stof_mask_format *f, int32_t *pos, int32_t e1, int32_t c,
                                   const uint64_t *ones) {
  while (*pos < e1 && f->col_idx[*pos] < c) (*pos)++;
  if (*pos >= e1 || f->col_idx[*pos] != c) return NULL;
  int32_t off = f->bmp_off[*pos];
  return off < 0 ? ones : f->bitmap + off;
}

/* The shifted tiles of one pass over f (kernels_format_qshift): counting (g NULL: *ne and
 * *nw only), or filling g's arrays, sized by the counting pass, and its statistics. */
static void qshift_pass(const stof_mask_format *f, int64_t nrow, stof_mask_format *g, int64_t *ne_out,
                        int64_t *nw_out) {
  enum { NB = 8, WPT = 64 };
  uint64_t ones[WPT], w[WPT];
  for (int k = 0; k < WPT; k++) ones[k] = ~(uint64_t)0;
  int64_t ne = 0, nw = 0, nfull = 0, nhalf = 0;
  for (int64_t m = 0; m < f->nmask; m++) {
    const int32_t *rp = f->row_ptr + m * (f->nrow + 1);
    for (int64_t r = 0; r < nrow; r++) {
      /* old row r - 1 gives the new rows 0-31 (its rows 32-63), old row r the new rows 32-63 */
      int has_a = r >= 1 && r - 1 < f->nrow, has_b = r < f->nrow;
      int32_t pa = has_a ? rp[r - 1] : 0, ea1 = has_a ? rp[r] : 0;
      int32_t pb = has_b ? rp[r] : 0, eb1 = has_b ? rp[r + 1] : 0;
      int32_t rf = 0, rpart = 0;
      if (g) g->row_ptr[m * (nrow + 1) + r] = (int32_t)ne;
      for (;;) { /* the union of both rows' columns, ascending */
        int32_t ca = pa < ea1 ? f->col_idx[pa] : INT32_MAX, cb = pb < eb1 ? f->col_idx[pb] : INT32_MAX;
        int32_t c = ca < cb ? ca : cb;
        if (c == INT32_MAX) break;
        const uint64_t *wa = shift_words(f, &pa, ea1, c, ones), *wb = shift_words(f, &pb, eb1, c, ones);
        uint64_t any = 0, all = ~(uint64_t)0, lo = 0, hi = 0;
        for (int ci = 0; ci < NB; ci++)
          for (int ri = 0; ri < NB; ri++) {
            const uint64_t *src = ri < NB / 2 ? wa : wb;
            uint64_t v = src ? src[ci * NB + (ri < NB / 2 ? ri + NB / 2 : ri - NB / 2)] : 0;
            w[ci * NB + ri] = v;
            any |= v, all &= v;
            if (ci < NB / 2) lo |= v; else hi |= v;
          }
        if (wa) pa++;
        if (wb) pb++;
        if (!any) continue;
        int full = all == ~(uint64_t)0; /* every word set: both halves were full tiles' */
        if (g) {
          g->col_idx[ne] = c;
          g->bmp_off[ne] = full ? -1 : (int32_t)nw;
          if (!full) memcpy(g->bitmap + nw, w, sizeof w);
        }
        ne++;
        if (full) {
          rf++, nfull++;
        } else {
          nw += WPT, rpart++;
          nhalf += !lo || !hi;
        }
      }
      if (g) g->nfull[m * nrow + r] = rf, g->npartial[m * nrow + r] = rpart;
    }
    if (g) g->row_ptr[m * (nrow + 1) + nrow] = (int32_t)ne;
  }
  if (g) {
    g->ntile_full = nfull, g->ntile_partial = ne - nfull, g->ntile_halfempty = nhalf;
    g->ntile_empty = f->nmask * nrow * (int64_t)g->ncol - ne;
  }
  *ne_out = ne, *nw_out = nw;
}

/* A lower bound on the shifted format's tiles from f's full tiles alone (no bitmap read): a
 * full tile (r, c) puts key tile c in new rows r (its upper half) and r + 1 (its lower half;
 * qshift_pass counts both, inside its nrow rows); a column's run of full rows r0 .. r1 gives
 * r1 - r0 + 2 new tiles. -1 where the scratch cannot be allocated. */
static int64_t qshift_full_bound(stof_ctx *ctx, const stof_mask_format *f, int64_t nrow) {
  int32_t *last = stof_ctx_alloc(ctx, sizeof *last * (size_t)(f->ncol ? f->ncol : 1));
  if (!last) return -1;
  int64_t n = 0;
  for (int64_t m = 0; m < f->nmask; m++) {
    const int32_t *rp = f->row_ptr + m * (f->nrow + 1);
    for (int32_t c = 0; c < f->ncol; c++) last[c] = -2;
    for (int64_t r = 0; r < f->nrow; r++)
      for (int32_t e = rp[r]; e < rp[r + 1]; e++) {
        if (f->bmp_off[e] >= 0) continue; /* partial */
        int32_t c = f->col_idx[e];
        /* new row r, unless row r - 1 gave it; new row r + 1 */
        n += (last[c] == r - 1 ? 0 : 1) + (r + 1 < nrow);
        last[c] = (int32_t)r;
      }
  }
  stof_ctx_dealloc(ctx, last, sizeof *last * (size_t)(f->ncol ? f->ncol : 1));
  return n;
}

stof_status kernels_format_qshift(stof_ctx *ctx, const stof_mask_format *f, int64_t max_tiles, int64_t *ntiles,
                                  int *counted, stof_mask_format **out) {
  const char *who = "mask format query shift";
  *out = NULL;
  if (ntiles) *ntiles = 0;
  if (counted) *counted = 1;
  if (!f || f->T != 64 || f->qshift || (f->nentry && (!f->col_idx || !f->bmp_off)) || !f->row_ptr ||
      (f->nword && !f->bitmap))
    return stof_ctx_error(ctx, STOF_ERR_INTERNAL, "%s: needs an unshifted tile-64 format with its arrays on the host", who);
  enum { T = 64, SH = 32 };
  double t0 = kernels_now_ms();
  int64_t nrow = (f->Sq + SH + T - 1) / T, nmask = f->nmask, ne = 0, nw = 0;
  /* past the limit by the full tiles alone (document's blocks of full tiles, dense): no
   * counting pass over the bitmaps */
  if (max_tiles >= 0) {
    int64_t lb = qshift_full_bound(ctx, f, nrow);
    if (lb < 0) return STOF_ERR_NOMEM;
    if (lb > max_tiles) {
      if (ntiles) *ntiles = lb;
      if (counted) *counted = 0;
      return STOF_OK;
    }
  }
  /* the counting pass: at most every old entry twice (a new tile takes the lower half of an
   * old one and the upper half of the next row's), so ne <= 2^32, nw <= 2^38 */
  qshift_pass(f, nrow, NULL, &ne, &nw);
  if (ntiles) *ntiles = ne;
  if (max_tiles >= 0 && ne > max_tiles) return STOF_OK;
  if (ne > INT32_MAX || nw > INT32_MAX || nmask * (nrow + 1) > INT32_MAX)
    return stof_ctx_error(ctx, STOF_ERR_UNSUPPORTED, "%s: %lld tiles, %lld bitmap words: past 2^31 - 1", who,
                          (long long)ne, (long long)nw);
  stof_mask_format *g = stof_ctx_alloc(ctx, sizeof *g);
  if (!g) return STOF_ERR_NOMEM;
  memset(g, 0, sizeof *g);
  g->ctx = ctx;
  g->B = f->B, g->H = f->H, g->Sq = f->Sq, g->Sk = f->Sk, g->T = T, g->qshift = SH;
  g->nrow = (int32_t)nrow, g->ncol = f->ncol;
  g->mask_b = f->mask_b, g->mask_h = f->mask_h, g->nmask = f->nmask;
  g->desc = stof_ctx_strdup(ctx, f->desc ? f->desc : "");
  g->row_ptr = stof_ctx_alloc(ctx, (size_t)(nmask * (nrow + 1)) * 4);
  g->nfull = stof_ctx_alloc(ctx, (size_t)(nmask * nrow) * 4);
  g->npartial = stof_ctx_alloc(ctx, (size_t)(nmask * nrow) * 4);
  /* sizes set before the arrays: stof_mask_format_free frees what was allocated */
  g->nentry = (int32_t)ne, g->nword = nw;
  if (ne) g->col_idx = stof_ctx_alloc(ctx, (size_t)ne * 4), g->bmp_off = stof_ctx_alloc(ctx, (size_t)ne * 4);
  if (nw) g->bitmap = stof_ctx_alloc(ctx, (size_t)nw * 8);
  if (!g->desc || !g->row_ptr || !g->nfull || !g->npartial || (ne && (!g->col_idx || !g->bmp_off)) ||
      (nw && !g->bitmap)) {
    stof_mask_format_free(g);
    return STOF_ERR_NOMEM;
  }
  qshift_pass(f, nrow, g, &ne, &nw);
  g->nvalid = f->nvalid, g->density = f->density, g->frac16 = f->frac16;
  g->bytes = (size_t)(nmask * (nrow + 1)) * 4 + (size_t)ne * 8 + (size_t)nw * 8;
  g->build_ms = kernels_now_ms() - t0;
  *out = g;
  return STOF_OK;
}

/* ---------------------------------------------------------------- decoding */

int32_t stof_mask_format_instance(const stof_mask_format *f, int64_t b, int64_t h) {
  if (b < 0 || b >= f->B || h < 0 || h >= f->H) return -1;
  return (int32_t)((f->mask_b > 1 ? b : 0) * f->mask_h + (f->mask_h > 1 ? h : 0));
}

int stof_mask_format_get(const stof_mask_format *f, int64_t b, int64_t h, int64_t i,
                         int64_t j) {
  int32_t m = stof_mask_format_instance(f, b, h);
  if (m < 0 || i < 0 || j < 0 || i >= f->Sq || j >= f->Sk) return 0;
  int64_t r = (i + f->qshift) / f->T, c = j / f->T; /* a shifted format's rows start qshift early */
  const int32_t *rp = f->row_ptr + (int64_t)m * (f->nrow + 1) + r;
  int32_t lo = rp[0], hi = rp[1] - 1;
  while (lo <= hi) {
    int32_t mid = lo + (hi - lo) / 2;
    if (f->col_idx[mid] < c) lo = mid + 1;
    else if (f->col_idx[mid] > c) hi = mid - 1;
    else {
      int32_t off = f->bmp_off[mid];
      if (off < 0) return 1;
      int64_t ii = i + f->qshift - r * f->T, jj = j - c * f->T;
      uint64_t w = f->bitmap[off + (jj / 8) * (f->T / 8) + ii / 8];
      return (int)((w >> ((ii % 8) * 8 + jj % 8)) & 1);
    }
  }
  return 0;
}

int64_t stof_mask_format_count(const stof_mask_format *f, int64_t b, int64_t h) {
  int32_t m = stof_mask_format_instance(f, b, h);
  if (m < 0) return -1;
  const int32_t *rp = f->row_ptr + (int64_t)m * (f->nrow + 1);
  int wpt = (f->T / 8) * (f->T / 8);
  int64_t n = 0;
  for (int32_t e = rp[0]; e < rp[f->nrow]; e++) {
    if (f->bmp_off[e] < 0) {
      n += (int64_t)f->T * f->T;
      continue;
    }
    for (int w = 0; w < wpt; w++) n += __builtin_popcountll(f->bitmap[f->bmp_off[e] + w]);
  }
  return n;
}

stof_status stof_mask_format_expand(const stof_mask_format *f, int64_t b, int64_t h,
                                    stof_tensor *out) {
  stof_ctx *ctx = f->ctx;
  int32_t m = stof_mask_format_instance(f, b, h);
  if (m < 0)
    return stof_ctx_error(ctx, STOF_ERR_RANGE,
                          "mask_format_expand: (b, h) = (%lld, %lld) outside B x H = %lld x %lld",
                          (long long)b, (long long)h, (long long)f->B, (long long)f->H);
  if (!out || out->device != STOF_DEVICE_CPU || out->ndim != 2 || out->shape[0] != f->Sq ||
      out->shape[1] != f->Sk)
    return stof_ctx_error(ctx, STOF_ERR_SHAPE,
                          "mask_format_expand: output must be a CPU tensor [%lld, %lld]",
                          (long long)f->Sq, (long long)f->Sk);
  stof_tensor_fill(out, 0);
  int64_t s0 = out->strides[0], s1 = out->strides[1];
  int T = f->T, nb8 = T / 8;
  const int32_t *rp = f->row_ptr + (int64_t)m * (f->nrow + 1);
  for (int64_t r = 0; r < f->nrow; r++) {
    /* rows [lo, nr) of the tile are queries i0 + ii (a shifted format's first row starts at
     * -qshift) */
    int64_t i0 = r * T - f->qshift, nr = f->Sq - i0 < T ? f->Sq - i0 : T, lo = i0 < 0 ? -i0 : 0;
    for (int32_t e = rp[r]; e < rp[r + 1]; e++) {
      int64_t j0 = (int64_t)f->col_idx[e] * T, nc = f->Sk - j0 < T ? f->Sk - j0 : T;
      int32_t off = f->bmp_off[e];
      for (int64_t ii = lo; ii < nr; ii++)
        for (int64_t jj = 0; jj < nc; jj++) {
          int v = off < 0 || ((f->bitmap[off + (jj / 8) * nb8 + ii / 8] >>
                               ((ii % 8) * 8 + jj % 8)) & 1);
          if (v) stof_tensor_store(out, (i0 + ii) * s0 + (j0 + jj) * s1, 1.0);
        }
    }
  }
  return STOF_OK;
}

/* ---------------------------------------------------------------- comparing */

/* Writes a difference into why (n bytes, truncated; nothing when why is NULL); returns 1. */
static int differs(char *why, size_t n, const char *fmt, ...) {
  if (why && n) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, n, fmt, ap);
    va_end(ap);
  }
  return 1;
}

/* The same for element k, in instance m and tile row r, of an int32 array. */
static int differs_at(char *why, size_t n, const char *array, int64_t k, int64_t m, int64_t r,
                      int32_t x, int32_t y) {
  return differs(why, n, "%s[%lld] (instance %lld, row %lld) = %d against %d", array,
                 (long long)k, (long long)m, (long long)r, x, y);
}

/* The instance and tile row holding entry e of f; -1 and -1 when none does. */
static void entry_row(const stof_mask_format *f, int64_t e, int64_t *m, int64_t *r) {
  *m = *r = -1;
  for (int64_t i = 0; i < f->nmask; i++)
    for (int64_t j = 0; j < f->nrow; j++) {
      int64_t k = i * (f->nrow + 1) + j;
      if (e >= f->row_ptr[k] && e < f->row_ptr[k + 1]) {
        *m = i, *r = j;
        return;
      }
    }
}

int stof_mask_format_compare(const stof_mask_format *a, const stof_mask_format *b, char *why,
                             size_t n) {
#define FIELD(x)                                                                         \
  if (a->x != b->x)                                                                      \
    return differs(why, n, #x " %lld against %lld", (long long)a->x, (long long)b->x);
  FIELD(B) FIELD(H) FIELD(Sq) FIELD(Sk) FIELD(T) FIELD(qshift) FIELD(nrow) FIELD(ncol) FIELD(mask_b)
  FIELD(mask_h) FIELD(nmask) FIELD(nentry) FIELD(nword) FIELD(nvalid) FIELD(ntile_full)
  FIELD(ntile_partial) FIELD(ntile_empty) FIELD(ntile_halfempty) FIELD(bytes)
#undef FIELD
  if (a->density != b->density)
    return differs(why, n, "density %.17g against %.17g", a->density, b->density);
  if (a->frac16 != b->frac16)
    return differs(why, n, "frac16 %.17g against %.17g", a->frac16, b->frac16);
  if (!a->desc != !b->desc || (a->desc && strcmp(a->desc, b->desc)))
    return differs(why, n, "desc \"%s\" against \"%s\"", a->desc ? a->desc : "(none)",
                   b->desc ? b->desc : "(none)");
  /* the dims agree: every array has the same length in both; a format kept on the device
   * has no host arrays to compare */
  int64_t nrp = (int64_t)a->nmask * (a->nrow + 1), nr = (int64_t)a->nmask * a->nrow;
  const stof_mask_format *ab[2] = {a, b};
  for (int i = 0; i < 2; i++)
    if ((nrp && !ab[i]->row_ptr) || (nr && (!ab[i]->nfull || !ab[i]->npartial)) ||
        (ab[i]->nentry && (!ab[i]->col_idx || !ab[i]->bmp_off)) || (ab[i]->nword && !ab[i]->bitmap))
      return differs(why, n, "the %s format's arrays are not on the host", i ? "second" : "first");
  for (int64_t k = 0; k < nrp; k++)
    if (a->row_ptr[k] != b->row_ptr[k])
      return differs_at(why, n, "row_ptr", k, k / (a->nrow + 1), k % (a->nrow + 1),
                        a->row_ptr[k], b->row_ptr[k]);
  for (int64_t k = 0; k < nr; k++) {
    if (a->nfull[k] != b->nfull[k])
      return differs_at(why, n, "nfull", k, k / a->nrow, k % a->nrow, a->nfull[k], b->nfull[k]);
    if (a->npartial[k] != b->npartial[k])
      return differs_at(why, n, "npartial", k, k / a->nrow, k % a->nrow, a->npartial[k],
                        b->npartial[k]);
  }
  for (int64_t e = 0; e < a->nentry; e++) {
    if (a->col_idx[e] == b->col_idx[e] && a->bmp_off[e] == b->bmp_off[e]) continue;
    int64_t m, r;
    entry_row(a, e, &m, &r);
    if (a->col_idx[e] != b->col_idx[e])
      return differs_at(why, n, "col_idx", e, m, r, a->col_idx[e], b->col_idx[e]);
    return differs_at(why, n, "bmp_off", e, m, r, a->bmp_off[e], b->bmp_off[e]);
  }
  int64_t wpt = (int64_t)(a->T / 8) * (a->T / 8);
  for (int64_t w = 0; w < a->nword; w++)
    if (a->bitmap[w] != b->bitmap[w])
      return differs(why, n,
                     "bitmap[%lld] (partial tile %lld, word %lld) = %016llx against %016llx",
                     (long long)w, (long long)(w / wpt), (long long)(w % wpt),
                     (unsigned long long)a->bitmap[w], (unsigned long long)b->bitmap[w]);
  if (why && n) why[0] = 0;
  return 0;
}

/* ---------------------------------------------------------------- cache */

typedef struct cache_entry {
  char *key;      /* NULL: never matches (fn masks) */
  stof_mask_format *fmt;
  uint64_t used;  /* clock of the last use */
} cache_entry;

struct stof_mask_cache {
  stof_ctx *ctx;
  int cap, n;
  cache_entry *e;
  uint64_t clock;
  int64_t hits, misses;
};

stof_status stof_mask_cache_new(stof_ctx *ctx, int capacity, stof_mask_cache **out) {
  if (capacity < 1)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "mask_cache_new: capacity %d must be >= 1",
                          capacity);
  stof_mask_cache *c = stof_ctx_alloc(ctx, sizeof *c);
  if (!c) return STOF_ERR_NOMEM;
  c->e = stof_ctx_alloc(ctx, (size_t)capacity * sizeof *c->e);
  if (!c->e) {
    stof_ctx_dealloc(ctx, c, sizeof *c);
    return STOF_ERR_NOMEM;
  }
  c->ctx = ctx;
  c->cap = capacity;
  *out = c;
  return STOF_OK;
}

static void entry_clear(stof_ctx *ctx, cache_entry *e) {
  if (e->key) stof_ctx_dealloc(ctx, e->key, strlen(e->key) + 1);
  stof_mask_format_free(e->fmt);
  e->key = NULL;
  e->fmt = NULL;
}

void stof_mask_cache_free(stof_mask_cache *c) {
  if (!c) return;
  for (int k = 0; k < c->n; k++) entry_clear(c->ctx, &c->e[k]);
  stof_ctx_dealloc(c->ctx, c->e, (size_t)c->cap * sizeof *c->e);
  stof_ctx_dealloc(c->ctx, c, sizeof *c);
}

stof_status kernels_format_cache_key(stof_ctx *ctx, const stof_mask *mask, int64_t B, int64_t H, int64_t Sq,
                                     int64_t Sk, int T, const char *side, char **key) {
  *key = NULL;
  if (!mask->cacheable) return STOF_OK;
  stof_buf s;
  stof_buf_init(&s, ctx);
  kernels_mask_key(mask, &s); /* exact, however long the description */
  stof_buf_printf(&s, "|B=%lld|H=%lld|Sq=%lld|Sk=%lld|T=%d%s%s", (long long)B, (long long)H,
                  (long long)Sq, (long long)Sk, T, side ? "|" : "", side ? side : "");
  return stof_buf_finish(&s, key) ? STOF_ERR_NOMEM : STOF_OK;
}

stof_status stof_mask_cache_get(stof_mask_cache *c, const stof_mask *mask, int64_t B,
                                int64_t H, int64_t Sq, int64_t Sk, int T,
                                const stof_mask_format **out) {
  stof_ctx *ctx = c->ctx;
  if (!mask) return stof_ctx_error(ctx, STOF_ERR_ARG, "mask_cache_get: mask is NULL");
  char *key = NULL;
  if (kernels_format_cache_key(ctx, mask, B, H, Sq, Sk, T, NULL, &key)) return STOF_ERR_NOMEM;
  if (key) {
    for (int k = 0; k < c->n; k++)
      if (c->e[k].key && !strcmp(c->e[k].key, key)) {
        stof_ctx_dealloc(ctx, key, strlen(key) + 1);
        c->e[k].used = ++c->clock;
        c->hits++;
        *out = c->e[k].fmt;
        return STOF_OK;
      }
  }
  stof_mask_format *f;
  stof_status st = stof_mask_format_build(ctx, mask, B, H, Sq, Sk, T, &f);
  if (st) {
    if (key) stof_ctx_dealloc(ctx, key, strlen(key) + 1);
    return st;
  }
  c->misses++;
  int slot = c->n;
  if (c->n == c->cap) {
    slot = 0;
    for (int k = 1; k < c->n; k++)
      if (c->e[k].used < c->e[slot].used) slot = k;
    entry_clear(ctx, &c->e[slot]);
  } else {
    c->n++;
  }
  c->e[slot].key = key;
  c->e[slot].fmt = f;
  c->e[slot].used = ++c->clock;
  *out = f;
  return STOF_OK;
}

stof_status stof_mask_cache_drop(stof_mask_cache *c, const stof_mask *mask, int64_t B, int64_t H,
                                 int64_t Sq, int64_t Sk, int T) {
  if (!mask) return stof_ctx_error(c->ctx, STOF_ERR_ARG, "mask_cache_drop: mask is NULL");
  char *key = NULL;
  if (kernels_format_cache_key(c->ctx, mask, B, H, Sq, Sk, T, NULL, &key)) return STOF_ERR_NOMEM;
  if (!key) return STOF_OK;
  int k = 0;
  while (k < c->n && !(c->e[k].key && !strcmp(c->e[k].key, key))) k++;
  stof_ctx_dealloc(c->ctx, key, strlen(key) + 1);
  if (k < c->n) {
    entry_clear(c->ctx, &c->e[k]);
    c->e[k] = c->e[--c->n]; /* the order is free: eviction goes by the clock */
  }
  return STOF_OK;
}

void stof_mask_cache_stats(const stof_mask_cache *c, int64_t *hits, int64_t *misses) {
  if (hits) *hits = c->hits;
  if (misses) *misses = c->misses;
}
