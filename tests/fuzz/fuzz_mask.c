/*
 * libFuzzer target: masks and their two-level format (kernels/mask.c, mask_format.c). The
 * input decodes into dims (B, H <= 2, Sq, Sk <= 200, T in 16..128 step 16; now and then
 * dims the builder must refuse) and a mask expression: every constructor, with parameters
 * drawn from the bytes (small, edge and huge values), a tensor mask, an fn predicate (one
 * that may fail at one element), and union / intersection / difference up to depth 5.
 * A constructor or build either succeeds or fails with a status and a message, leaving its
 * output untouched. A format that builds matches stof_mask_eval at EVERY element of every
 * (b, h), its per-instance counts match, and its arrays keep the documented layout. All
 * masks are freed in creation order (operands before what shares them), without leaks.
 */
#include "fuzz_util.h"

#include <stof/kernels.h>

#define MAXMASK 64

typedef struct fn_ud {
  int64_t a, c, eb, eh, m, d;
  int64_t fail_i, fail_j; /* the predicate fails there (-1: never) */
} fn_ud;

typedef struct state {
  stof_ctx *ctx;
  fz_in in;
  int64_t B, H, Sq, Sk;
  int T;
  int dims_ok;     /* dims the builder must take */
  int may_fail;    /* a leaf that may make the build fail: dims it does not fit, a failing fn */
  int fn_fails;    /* an fn leaf may fail: eval may give -1 */
  int nmask;
  stof_mask *mask[MAXMASK];
  int nfn;
  fn_ud fn[MAXMASK];
  int budget;      /* nodes left */
} state;

static int pred(void *ud, int64_t b, int64_t h, int64_t i, int64_t j) {
  const fn_ud *f = ud;
  if (i == f->fail_i && j == f->fail_j) return -1;
  return (i * f->a + j * f->c + b * f->eb + h * f->eh) % f->m < f->d;
}

static char sentinel;
#define UNTOUCHED ((stof_mask *)&sentinel)

/* Records the result of a constructor: a new mask, or a checked failure (NULL). */
static stof_mask *took(state *s, stof_status st, stof_mask *m, const char *who) {
  if (st) {
    fz_check_error(s->ctx, st, who);
    if (m != UNTOUCHED) fz_fail("%s failed (%s) but wrote its output", who, stof_status_name(st));
    return NULL;
  }
  if (!m || m == UNTOUCHED) fz_fail("%s succeeded without a mask", who);
  if (!stof_mask_description(m)) fz_fail("%s: no description", who);
  s->mask[s->nmask++] = m;
  return m;
}

static double prob(fz_in *in) {
  unsigned k = fz_u8(in);
  if (k < 240) return (k % 11) / 10.0;
  static const double odd[] = {-0.5, 1.5, -0.0, 1e-300, 1.0 - 1e-16};
  return k < 250 ? odd[k % 5] : 0.0 / 0.0; /* NaN too */
}

static stof_mask *leaf(state *s) {
  stof_ctx *ctx = s->ctx;
  fz_in *in = &s->in;
  stof_mask *m = UNTOUCHED;
  stof_status st;
  switch (fz_below(in, 16)) {
  case 0: return took(s, stof_mask_dense(ctx, &m), m, "dense");
  case 1: return took(s, stof_mask_causal(ctx, &m), m, "causal");
  case 2: {
    int64_t l = fz_param(in), r = fz_param(in);
    return took(s, stof_mask_window(ctx, l, r, &m), m, "window");
  }
  case 3: return took(s, stof_mask_sliding(ctx, fz_param(in), &m), m, "sliding");
  case 4: return took(s, stof_mask_causal_sliding(ctx, fz_param(in), &m), m, "causal_sliding");
  case 5: return took(s, stof_mask_global(ctx, fz_param(in), &m), m, "global");
  case 6: {
    int64_t w = fz_param(in), g = fz_param(in);
    return took(s, stof_mask_longformer(ctx, w, g, &m), m, "longformer");
  }
  case 7: {
    int64_t b = fz_param(in);
    double p = prob(in);
    return took(s, stof_mask_random_blocks(ctx, b, p, fz_u64(in), &m), m, "random_blocks");
  }
  case 8: {
    int64_t w = fz_param(in), g = fz_param(in), b = fz_param(in);
    double p = prob(in);
    return took(s, stof_mask_bigbird(ctx, w, g, b, p, fz_u64(in), &m), m, "bigbird");
  }
  case 9: {
    int64_t len[8];
    int64_t n = (int64_t)fz_below(in, 9); /* 0 is refused */
    for (int k = 0; k < n; k++) len[k] = fz_param(in);
    if (fz_below(in, 8) == 0) n = fz_param(in) > 0 ? -1 : 0; /* a bad count, never read */
    return took(s, stof_mask_document(ctx, n, len, &m), m, "document");
  }
  case 10: {
    int64_t nseq[3], len[12], nb = 1 + fz_below(in, 3), total = 0;
    for (int b = 0; b < nb; b++) total += nseq[b] = fz_below(in, 5); /* 0 is refused */
    for (int k = 0; k < total; k++) len[k] = fz_param(in);
    if (nb != s->B && nb > 1) s->may_fail = 1;
    return took(s, stof_mask_document_batched(ctx, nb, nseq, len, &m), m, "document_batched");
  }
  case 11: {
    int64_t S = fz_param(in), lo = fz_param(in), hi = fz_param(in);
    /* keep the number of sequences small: a slow input finds nothing more */
    if (S > 0 && lo > 0 && S / lo > 4096) S = 4096 * lo;
    return took(s, stof_mask_document_random(ctx, S, lo, hi, fz_u64(in), &m), m, "document_random");
  }
  case 12: {
    int64_t w = fz_param(in), d = fz_param(in);
    return took(s, stof_mask_dilated(ctx, w, d, &m), m, "dilated");
  }
  case 13: {
    /* [Sq, Sk] or [B', H', Sq, Sk] of bool / int32 / int64 (float: refused), mostly the
     * format's size */
    static const stof_dtype dt[] = {STOF_DTYPE_BOOL, STOF_DTYPE_I32, STOF_DTYPE_I64, STOF_DTYPE_F32};
    stof_dtype d = dt[fz_below(in, 4)];
    int four = fz_below(in, 2);
    unsigned how = fz_u8(in);
    int fits = s->Sq >= 1 && s->Sq <= 200 && s->Sk >= 1 && s->Sk <= 200; /* not so with bad dims */
    int64_t sq = how < 200 && fits ? s->Sq : 1 + fz_below(in, 200), sk = how < 200 && fits ? s->Sk : 1 + fz_below(in, 200);
    int64_t shape[4] = {1 + fz_below(in, 2), 1 + fz_below(in, 2), sq, sk};
    if (how % 50 == 7) shape[3] = 0; /* empty: refused */
    int ndim = four ? 4 : 2;
    const int64_t *sh = four ? shape : shape + 2;
    if (sq != s->Sq || sk != s->Sk || (four && ((shape[0] > 1 && shape[0] != s->B) || (shape[1] > 1 && shape[1] != s->H))))
      s->may_fail = 1;
    stof_tensor *t = NULL;
    if (stof_tensor_rand(ctx, d, ndim, sh, fz_u64(in), &t)) fz_fail("tensor_rand: %s", stof_ctx_message(ctx));
    if (d == STOF_DTYPE_I32 || d == STOF_DTYPE_I64) { /* values in [0, 100): keep about half */
      int64_t n = stof_tensor_numel(t);
      for (int64_t k = 0; k < n; k++) stof_tensor_store(t, k, stof_tensor_load(t, k) >= 50 ? 7 : 0);
    }
    st = stof_mask_from_tensor(ctx, t, &m);
    stof_tensor_free(t);
    return took(s, st, m, "from_tensor");
  }
  default: {
    if (s->nfn >= MAXMASK) return NULL;
    fn_ud *f = &s->fn[s->nfn++];
    f->a = fz_below(in, 16), f->c = fz_below(in, 16), f->m = 1 + fz_below(in, 16), f->d = fz_below(in, 17);
    int vb = fz_below(in, 2), vh = fz_below(in, 2);
    f->eb = vb ? 1 + fz_below(in, 7) : 0, f->eh = vh ? 1 + fz_below(in, 7) : 0;
    f->fail_i = f->fail_j = -1;
    if (fz_below(in, 8) == 0) {
      f->fail_i = fz_below(in, 200), f->fail_j = fz_below(in, 200);
      s->may_fail = s->fn_fails = 1;
    }
    return took(s, stof_mask_fn(ctx, pred, f, fz_below(in, 4) ? "fz" : NULL, vb, vh, &m), m, "fn");
  }
  }
}

static stof_mask *expr(state *s, int depth) {
  unsigned k = fz_below(&s->in, 8);
  if (depth >= 5 || s->budget <= 0 || k < 4) {
    s->budget--;
    return leaf(s);
  }
  s->budget--;
  stof_mask *a = expr(s, depth + 1), *b = expr(s, depth + 1);
  if (!a || !b) return a ? a : b;
  stof_mask *m = UNTOUCHED;
  if (s->nmask >= MAXMASK) return a;
  if (k < 6) return took(s, stof_mask_union(a, b, &m), m, "union");
  if (k < 7) return took(s, stof_mask_intersection(a, b, &m), m, "intersection");
  return took(s, stof_mask_difference(a, b, &m), m, "difference");
}

static void check_layout(const stof_mask_format *f) {
  int32_t words = (f->T / 8) * (f->T / 8);
  if (f->nrow != (f->Sq + f->T - 1) / f->T || f->ncol != (f->Sk + f->T - 1) / f->T) fz_fail("nrow/ncol");
  if (f->nmask != f->mask_b * f->mask_h || f->mask_b < 1 || f->mask_h < 1) fz_fail("nmask");
  for (int32_t m = 0; m < f->nmask; m++) {
    const int32_t *rp = f->row_ptr + (size_t)m * (size_t)(f->nrow + 1);
    for (int32_t r = 0; r < f->nrow; r++) {
      if (rp[r] < 0 || rp[r] > rp[r + 1] || rp[r + 1] > f->nentry) fz_fail("row_ptr of %d, %d", m, r);
      int32_t nfull = 0, npart = 0;
      for (int32_t e = rp[r]; e < rp[r + 1]; e++) {
        if (f->col_idx[e] < 0 || f->col_idx[e] >= f->ncol || (e > rp[r] && f->col_idx[e] <= f->col_idx[e - 1]))
          fz_fail("col_idx[%d] = %d", e, f->col_idx[e]);
        if (f->bmp_off[e] == -1) nfull++;
        else if (f->bmp_off[e] < 0 || f->bmp_off[e] + (int64_t)words > f->nword) fz_fail("bmp_off[%d] = %d", e, f->bmp_off[e]);
        else npart++;
      }
      if (f->nfull[m * f->nrow + r] != nfull || f->npartial[m * f->nrow + r] != npart)
        fz_fail("nfull/npartial of instance %d row %d", m, r);
    }
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  state *s = calloc(1, sizeof *s);
  s->ctx = stof_ctx_new(NULL, NULL);
  s->in = (fz_in){data, size, 0};
  fz_in *in = &s->in;
  s->B = 1 + fz_below(in, 2), s->H = 1 + fz_below(in, 2);
  s->Sq = 1 + fz_below(in, 200), s->Sk = 1 + fz_below(in, 200);
  s->T = 16 * (1 + (int)fz_below(in, 8));
  s->dims_ok = 1;
  unsigned bad = fz_u8(in);
  if (bad >= 240) { /* dims the builder must refuse */
    static const int64_t ext[] = {0, -1, ((int64_t)1 << 40) + 1, INT64_MAX, INT64_MIN};
    switch (bad % 5) {
    case 0: s->T = (int)fz_param(in); if (s->T % 16 == 0 && s->T >= 16 && s->T <= 128) s->T += 1; break;
    case 1: s->Sq = ext[fz_below(in, 5)]; break;
    case 2: s->Sk = ext[fz_below(in, 5)]; break;
    case 3: s->B = ext[fz_below(in, 2)]; break;
    default: s->Sq = s->Sk = (int64_t)1 << 40; break; /* too many tiles */
    }
    s->dims_ok = 0;
  }
  s->budget = 1 + fz_below(in, 16);
  stof_mask *m = expr(s, 0);
  if (m) {
    stof_mask_format *f = NULL;
    stof_status st = stof_mask_format_build(s->ctx, m, s->B, s->H, s->Sq, s->Sk, s->T, &f);
    if (st) {
      fz_check_error(s->ctx, st, "format_build");
      if (f) fz_fail("format_build failed but returned a format");
      if (s->dims_ok && !s->may_fail)
        fz_fail("format_build of %s failed: %s", stof_mask_description(m), stof_ctx_message(s->ctx));
    } else {
      if (!s->dims_ok) fz_fail("format_build took bad dims %lld %lld %lld %lld %d", (long long)s->B,
                               (long long)s->H, (long long)s->Sq, (long long)s->Sk, s->T);
      check_layout(f);
      for (int64_t b = 0; b < s->B; b++)
        for (int64_t h = 0; h < s->H; h++) {
          int64_t count = 0;
          for (int64_t i = 0; i < s->Sq; i++)
            for (int64_t j = 0; j < s->Sk; j++) {
              int want = stof_mask_eval(m, b, h, i, j), got = stof_mask_format_get(f, b, h, i, j);
              count += got;
              if (want < 0 && s->fn_fails) continue; /* the build may not have called it there */
              if (want != got)
                fz_fail("%s, B %lld H %lld Sq %lld Sk %lld T %d: element (%lld, %lld, %lld, %lld): eval %d, "
                        "format %d", stof_mask_description(m), (long long)s->B, (long long)s->H,
                        (long long)s->Sq, (long long)s->Sk, s->T, (long long)b, (long long)h, (long long)i,
                        (long long)j, want, got);
            }
          if (stof_mask_format_count(f, b, h) != count)
            fz_fail("%s, B %lld H %lld Sq %lld Sk %lld T %d: format_count(%lld, %lld) = %lld, %lld kept",
                    stof_mask_description(m), (long long)s->B, (long long)s->H, (long long)s->Sq,
                    (long long)s->Sk, s->T, (long long)b, (long long)h,
                    (long long)stof_mask_format_count(f, b, h), (long long)count);
        }
      stof_mask_format_free(f);
    }
  }
  for (int i = 0; i < s->nmask; i++) stof_mask_free(s->mask[i]);
  if (stof_ctx_bytes_in_use(s->ctx) != 0) fz_fail("%zu bytes leaked", stof_ctx_bytes_in_use(s->ctx));
  stof_ctx_free(s->ctx);
  free(s);
  return 0;
}
