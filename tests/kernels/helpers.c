/* Helpers of test_kernels (see helpers.h). */
#include "helpers.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

stof_ctx *kt_ctx(void) {
  stof_ctx *ctx = stof_ctx_new(NULL, NULL);
  assert_non_null(ctx);
  return ctx;
}

void kt_ctx_done(stof_ctx *ctx) {
  assert_int_equal(stof_ctx_bytes_in_use(ctx), 0);
  stof_ctx_free(ctx);
}

void kt_expect_error(stof_ctx *ctx, stof_status got, stof_status want, const char *substr) {
  if (got != want)
    fail_msg("expected %s, got %s (%s)", stof_status_name(want), stof_status_name(got),
             stof_ctx_message(ctx));
  const char *msg = stof_ctx_message(ctx);
  if (!msg || !strstr(msg, substr))
    fail_msg("message '%s' lacks '%s'", msg ? msg : "(null)", substr);
  stof_ctx_clear_error(ctx);
}

uint8_t *kt_reference(const stof_mask *m, int64_t b, int64_t h, int64_t Sq, int64_t Sk) {
  uint8_t *ref = malloc((size_t)(Sq * Sk));
  assert_non_null(ref);
  for (int64_t i = 0; i < Sq; i++)
    for (int64_t j = 0; j < Sk; j++) {
      int v = stof_mask_eval(m, b, h, i, j);
      assert_true(v == 0 || v == 1);
      ref[i * Sk + j] = (uint8_t)v;
    }
  return ref;
}

uint8_t *kt_decode(const stof_mask_format *f, int32_t m) {
  int64_t Sq = f->Sq, Sk = f->Sk, T = f->T, nb8 = T / 8, q0 = -(int64_t)f->qshift; /* row r's first query r T + q0 */
  uint8_t *out = calloc((size_t)(Sq * Sk), 1);
  assert_non_null(out);
  const int32_t *rp = f->row_ptr + (int64_t)m * (f->nrow + 1);
  for (int64_t r = 0; r < f->nrow; r++) {
    assert_true(rp[r] <= rp[r + 1]);
    assert_true(rp[r] >= 0 && rp[r + 1] <= f->nentry);
    for (int32_t e = rp[r]; e < rp[r + 1]; e++) {
      int64_t c = f->col_idx[e];
      assert_true(c >= 0 && c < f->ncol);
      if (e > rp[r]) assert_true(f->col_idx[e - 1] < c);
      int32_t off = f->bmp_off[e];
      if (off == -1) {
        /* full: inside the domain, all ones */
        assert_true(r * T + q0 >= 0 && r * T + q0 + T <= Sq && c * T + T <= Sk);
        for (int64_t ii = 0; ii < T; ii++) memset(out + (r * T + q0 + ii) * Sk + c * T, 1, (size_t)T);
        continue;
      }
      assert_true(off >= 0 && off + nb8 * nb8 <= f->nword);
      int64_t ones = 0;
      for (int64_t ii = 0; ii < T; ii++)
        for (int64_t jj = 0; jj < T; jj++) {
          uint64_t word = f->bitmap[off + (jj / 8) * nb8 + ii / 8];
          int bit = (int)((word >> ((ii % 8) * 8 + (jj % 8))) & 1);
          int64_t i = r * T + q0 + ii, j = c * T + jj;
          if (i < 0 || i >= Sq || j >= Sk) {
            if (bit) fail_msg("bit set outside the domain at (%lld, %lld)", (long long)i, (long long)j);
            continue;
          }
          ones += bit;
          out[i * Sk + j] = (uint8_t)bit;
        }
      if (ones == 0) fail_msg("partial tile (%lld, %lld) has no bit set", (long long)r, (long long)c);
      if (ones == T * T) fail_msg("partial tile (%lld, %lld) is all ones", (long long)r, (long long)c);
    }
  }
  return out;
}

static void compare(const uint8_t *got, const uint8_t *want, int64_t Sq, int64_t Sk,
                    const char *what, const char *desc, int T, int32_t m) {
  if (memcmp(got, want, (size_t)(Sq * Sk)) == 0) return;
  for (int64_t k = 0; k < Sq * Sk; k++)
    if (got[k] != want[k])
      fail_msg("%s: %s, Sq=%lld Sk=%lld T=%d instance %d: (%lld, %lld) is %d, expected %d", what,
               desc, (long long)Sq, (long long)Sk, T, m, (long long)(k / Sk),
               (long long)(k % Sk), got[k], want[k]);
}

void kt_check_format(const stof_mask_format *f, const stof_mask *mask) {
  kt_check_format_refs(f, mask, NULL);
}

void kt_check_format_refs(const stof_mask_format *f, const stof_mask *mask,
                          uint8_t *const *refs) {
  int64_t Sq = f->Sq, Sk = f->Sk, T = f->T, sh = f->qshift; /* row r: queries [r T - sh, ..) */
  assert_string_equal(f->desc, stof_mask_description(mask));
  assert_int_equal(f->nrow, (Sq + sh + T - 1) / T);
  assert_int_equal(f->ncol, (Sk + T - 1) / T);
  assert_int_equal(f->mask_b, stof_mask_varies_b(mask) ? f->B : 1);
  assert_int_equal(f->mask_h, stof_mask_varies_h(mask) ? f->H : 1);
  assert_int_equal(f->nmask, f->mask_b * f->mask_h);
  assert_int_equal(f->row_ptr[0], 0);
  assert_int_equal(f->row_ptr[(int64_t)f->nmask * (f->nrow + 1) - 1], f->nentry);

  int64_t nvalid = 0, nfull = 0, npart = 0, nhalf = 0, n16 = 0;
  int64_t wpt = (T / 8) * (T / 8);
  for (int64_t b = 0; b < f->B; b++)
    for (int64_t h = 0; h < f->H; h++) {
      int32_t m = stof_mask_format_instance(f, b, h);
      assert_int_equal(m, (f->mask_b > 1 ? b : 0) * f->mask_h + (f->mask_h > 1 ? h : 0));
      /* every (b, h) of an instance reads the same matrix; check each instance once,
       * at its first (b, h) */
      if ((f->mask_b > 1 ? b : 0) != b || (f->mask_h > 1 ? h : 0) != h) continue;
      if (m > 0) {
        /* instances follow each other */
        assert_int_equal(f->row_ptr[(int64_t)m * (f->nrow + 1)],
                         f->row_ptr[(int64_t)m * (f->nrow + 1) - 1]);
      }
      uint8_t *ref = refs ? refs[m] : kt_reference(mask, b, h, Sq, Sk);
      uint8_t *dec = kt_decode(f, m);
      compare(dec, ref, Sq, Sk, "decoded format", f->desc, (int)T, m);
      /* format_get on every element, or on a sample of large ones */
      int64_t step = Sq * Sk <= 300000 ? 1 : 7;
      for (int64_t k = 0; k < Sq * Sk; k += step) {
        int v = stof_mask_format_get(f, b, h, k / Sk, k % Sk);
        if (v != ref[k])
          fail_msg("format_get: %s T=%d (%lld, %lld) is %d, expected %d", f->desc, (int)T,
                   (long long)(k / Sk), (long long)(k % Sk), v, ref[k]);
      }
      /* statistics from the decoded matrix */
      int64_t cnt = 0;
      for (int64_t k = 0; k < Sq * Sk; k++) cnt += dec[k];
      assert_int_equal(stof_mask_format_count(f, b, h), cnt);
      nvalid += cnt;
      for (int64_t r = 0; r < f->nrow; r++) {
        int64_t rf = 0, rpart = 0;
        for (int64_t c = 0; c < f->ncol; c++) {
          int64_t ones = 0, lo = 0, hi = 0;
          for (int64_t i = r * T - sh < 0 ? 0 : r * T - sh; i < r * T - sh + T && i < Sq; i++)
            for (int64_t j = c * T; j < c * T + T && j < Sk; j++) {
              ones += dec[i * Sk + j];
              *(j - c * T < T / 2 ? &lo : &hi) += dec[i * Sk + j];
            }
          if (ones == 0) continue;
          if (ones == T * T) rf++;
          else rpart++, nhalf += T % 32 == 0 && (!lo || !hi);
        }
        assert_int_equal(f->nfull[(int64_t)m * f->nrow + r], rf);
        assert_int_equal(f->npartial[(int64_t)m * f->nrow + r], rpart);
        assert_int_equal(f->row_ptr[(int64_t)m * (f->nrow + 1) + r + 1] -
                             f->row_ptr[(int64_t)m * (f->nrow + 1) + r],
                         rf + rpart);
        nfull += rf;
        npart += rpart;
      }
      for (int64_t i0 = 0; i0 < Sq; i0 += 16)
        for (int64_t j0 = 0; j0 < Sk; j0 += 16) {
          int any = 0;
          for (int64_t i = i0; i < i0 + 16 && i < Sq && !any; i++)
            for (int64_t j = j0; j < j0 + 16 && j < Sk; j++)
              if (dec[i * Sk + j]) {
                any = 1;
                break;
              }
          n16 += any;
        }
      if (!refs) free(ref);
      free(dec);
    }
  int64_t ntile16 = (int64_t)f->nmask * ((Sq + 15) / 16) * ((Sk + 15) / 16);
  assert_int_equal(f->nvalid, nvalid);
  assert_int_equal(f->ntile_full, nfull);
  assert_int_equal(f->ntile_partial, npart);
  assert_int_equal(f->ntile_halfempty, nhalf);
  assert_int_equal(f->ntile_empty, (int64_t)f->nmask * f->nrow * f->ncol - nfull - npart);
  assert_int_equal(f->nentry, nfull + npart);
  assert_int_equal(f->nword, npart * wpt);
  assert_true(fabs(f->density - (double)nvalid / ((double)f->nmask * Sq * Sk)) < 1e-12);
  assert_true(fabs(f->frac16 - (double)n16 / (double)ntile16) < 1e-12);
  assert_int_equal(f->bytes, (size_t)f->nmask * (f->nrow + 1) * 4 + (size_t)f->nentry * 8 +
                                 (size_t)f->nword * 8);
}

void kt_build_and_check(stof_ctx *ctx, const stof_mask *mask, int64_t B, int64_t H,
                        int64_t Sq, int64_t Sk, int T) {
  stof_mask_format *f = NULL;
  KT_OK(ctx, stof_mask_format_build(ctx, mask, B, H, Sq, Sk, T, &f));
  kt_check_format(f, mask);
  stof_mask_format_free(f);
}
