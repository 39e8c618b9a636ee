/*
 * A picture of one instance of a two-level mask format, as SVG: the tile map (empty white,
 * partial light, full dark), the bits of partial tiles when the mask is small enough to
 * see them, and a title with the description, the dims and the densities.
 *
 * The map is drawn in element units (one unit per query row / key column) inside a scaled
 * group, so tile and bit rectangles are exact; horizontal runs are merged into one
 * rectangle to keep files small.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "kernels_int.h"

#define SVG_MAP_PX 800.0     /* the longer side of the map */
#define SVG_BITS_MAX 1024    /* bits drawn when Sq and Sk are at most this */
#define SVG_GRID_MAX 64      /* tile grid drawn when nrow and ncol are at most this */
#define COLOR_PARTIAL "#c6dbef"
#define COLOR_FULL "#08306b"
#define COLOR_BIT "#3182bd"

static void put_escaped(FILE *fp, const char *s) {
  for (; *s; s++) {
    switch (*s) {
    case '&': fputs("&amp;", fp); break;
    case '<': fputs("&lt;", fp); break;
    case '>': fputs("&gt;", fp); break;
    case '"': fputs("&quot;", fp); break;
    default: fputc(*s, fp);
    }
  }
}

static void rect(FILE *fp, int64_t x, int64_t y, int64_t w, int64_t h, const char *fill) {
  fprintf(fp, "<rect x=\"%lld\" y=\"%lld\" width=\"%lld\" height=\"%lld\" fill=\"%s\"/>\n",
          (long long)x, (long long)y, (long long)w, (long long)h, fill);
}

/* The tiles of one row: runs of equal kind (full or partial) in adjacent columns. */
static void draw_tiles(FILE *fp, const stof_mask_format *f, int64_t r, int32_t e0, int32_t e1) {
  int64_t T = f->T, y = r * T, hgt = f->Sq - y < T ? f->Sq - y : T;
  for (int32_t e = e0; e < e1;) {
    int full = f->bmp_off[e] < 0;
    int32_t q = e + 1;
    while (q < e1 && (f->bmp_off[q] < 0) == full && f->col_idx[q] == f->col_idx[q - 1] + 1) q++;
    int64_t x = (int64_t)f->col_idx[e] * T, xe = ((int64_t)f->col_idx[q - 1] + 1) * T;
    if (xe > f->Sk) xe = f->Sk;
    rect(fp, x, y, xe - x, hgt, full ? COLOR_FULL : COLOR_PARTIAL);
    e = q;
  }
}

/* The set bits of a partial tile, one rectangle per horizontal run. */
static void draw_bits(FILE *fp, const stof_mask_format *f, int64_t r, int32_t e) {
  int64_t T = f->T, nb8 = T / 8, i0 = r * T, j0 = (int64_t)f->col_idx[e] * T;
  int64_t nr = f->Sq - i0 < T ? f->Sq - i0 : T, nc = f->Sk - j0 < T ? f->Sk - j0 : T;
  const uint64_t *w = f->bitmap + f->bmp_off[e];
  for (int64_t ii = 0; ii < nr; ii++) {
    for (int64_t jj = 0; jj < nc;) {
      if (!((w[(jj / 8) * nb8 + ii / 8] >> ((ii % 8) * 8 + jj % 8)) & 1)) {
        jj++;
        continue;
      }
      int64_t k = jj + 1;
      while (k < nc && ((w[(k / 8) * nb8 + ii / 8] >> ((ii % 8) * 8 + k % 8)) & 1)) k++;
      rect(fp, j0 + jj, i0 + ii, k - jj, 1, COLOR_BIT);
      jj = k;
    }
  }
}

stof_status stof_mask_format_svg(const stof_mask_format *f, int64_t b, int64_t h,
                                 const char *path) {
  stof_ctx *ctx = f->ctx;
  int32_t m = stof_mask_format_instance(f, b, h);
  if (m < 0)
    return stof_ctx_error(ctx, STOF_ERR_RANGE,
                          "mask_format_svg: (b, h) = (%lld, %lld) outside B x H = %lld x %lld",
                          (long long)b, (long long)h, (long long)f->B, (long long)f->H);
  if (!path) return stof_ctx_error(ctx, STOF_ERR_ARG, "mask_format_svg: path is NULL");
  FILE *fp = fopen(path, "w");
  if (!fp)
    return stof_ctx_error(ctx, STOF_ERR_IO, "mask_format_svg: cannot open %s: %s", path,
                          strerror(errno));

  const int32_t *rp = f->row_ptr + (int64_t)m * (f->nrow + 1);
  int64_t nfull = 0, npart = 0;
  for (int64_t r = 0; r < f->nrow; r++) {
    nfull += f->nfull[m * f->nrow + r];
    npart += f->npartial[m * f->nrow + r];
  }
  int64_t nempty = (int64_t)f->nrow * f->ncol - nfull - npart;
  double dens = (double)stof_mask_format_count(f, b, h) / ((double)f->Sq * (double)f->Sk);
  int64_t side = f->Sq > f->Sk ? f->Sq : f->Sk;
  double scale = SVG_MAP_PX / (double)side;
  double mw = (double)f->Sk * scale, mh = (double)f->Sq * scale;
  double top = 88, width = (mw > 640 ? mw : 640) + 20, height = top + mh + 10;

  fprintf(fp,
          "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
          "viewBox=\"0 0 %.0f %.0f\" font-family=\"monospace\" font-size=\"13\">\n",
          width, height, width, height);
  fprintf(fp, "<rect width=\"100%%\" height=\"100%%\" fill=\"#ffffff\"/>\n");
  fprintf(fp, "<title>");
  put_escaped(fp, f->desc);
  fprintf(fp, "</title>\n<text x=\"10\" y=\"20\" font-size=\"15\" font-weight=\"bold\">");
  put_escaped(fp, f->desc);
  fprintf(fp, "</text>\n");
  fprintf(fp,
          "<text x=\"10\" y=\"40\">Sq=%lld Sk=%lld T=%d  B=%lld H=%lld  instance (b=%lld, "
          "h=%lld) of %d</text>\n",
          (long long)f->Sq, (long long)f->Sk, f->T, (long long)f->B, (long long)f->H,
          (long long)b, (long long)h, f->nmask);
  fprintf(fp,
          "<text x=\"10\" y=\"58\">density %.2f%% (all instances %.2f%%)  16x16 tiles "
          "non-empty %.1f%%</text>\n",
          100 * dens, 100 * f->density, 100 * f->frac16);
  int bits = f->Sq <= SVG_BITS_MAX && f->Sk <= SVG_BITS_MAX;
  fprintf(fp,
          "<text x=\"10\" y=\"74\">tiles: %lld full (dark), %lld partial (light; %s), "
          "%lld empty (white)</text>\n",
          (long long)nfull, (long long)npart,
          bits ? "its kept elements mid blue" : "kept elements not drawn past 1024 x 1024",
          (long long)nempty);

  fprintf(fp, "<g transform=\"translate(10 %.0f) scale(%.6g)\" shape-rendering=\"crispEdges\">\n",
          top, scale);
  fprintf(fp, "<rect x=\"0\" y=\"0\" width=\"%lld\" height=\"%lld\" fill=\"#ffffff\"/>\n",
          (long long)f->Sk, (long long)f->Sq);
  for (int64_t r = 0; r < f->nrow; r++) draw_tiles(fp, f, r, rp[r], rp[r + 1]);
  if (bits)
    for (int64_t r = 0; r < f->nrow; r++)
      for (int32_t e = rp[r]; e < rp[r + 1]; e++)
        if (f->bmp_off[e] >= 0) draw_bits(fp, f, r, e);
  /* strokes in element units: 1/scale is one pixel */
  if (f->nrow <= SVG_GRID_MAX && f->ncol <= SVG_GRID_MAX) {
    fprintf(fp, "<g stroke=\"#bbbbbb\" stroke-width=\"%.6g\">\n", 1.0 / scale);
    for (int64_t r = 1; r < f->nrow; r++)
      fprintf(fp, "<line x1=\"0\" y1=\"%lld\" x2=\"%lld\" y2=\"%lld\"/>\n",
              (long long)(r * f->T), (long long)f->Sk, (long long)(r * f->T));
    for (int64_t c = 1; c < f->ncol; c++)
      fprintf(fp, "<line x1=\"%lld\" y1=\"0\" x2=\"%lld\" y2=\"%lld\"/>\n",
              (long long)(c * f->T), (long long)(c * f->T), (long long)f->Sq);
    fprintf(fp, "</g>\n");
  }
  fprintf(fp,
          "<rect x=\"0\" y=\"0\" width=\"%lld\" height=\"%lld\" fill=\"none\" "
          "stroke=\"#666666\" stroke-width=\"%.6g\"/>\n",
          (long long)f->Sk, (long long)f->Sq, 1.5 / scale);
  fprintf(fp, "</g>\n</svg>\n");
  int bad = ferror(fp);
  if (fclose(fp) != 0) bad = 1;
  if (bad)
    return stof_ctx_error(ctx, STOF_ERR_IO, "mask_format_svg: cannot write %s", path);
  return STOF_OK;
}
