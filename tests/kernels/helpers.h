/*
 * Shared helpers of test_kernels: contexts with a leak check, expected errors, and the
 * test's own reading of masks and formats (element-wise references and an independent
 * decoder of the two-level layout, written from the layout's specification only).
 */
#ifndef STOF_TEST_KERNELS_HELPERS_H
#define STOF_TEST_KERNELS_HELPERS_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stof/kernels.h>

/* A new context (malloc allocator). */
stof_ctx *kt_ctx(void);
/* Asserts nothing is left allocated, then frees ctx. */
void kt_ctx_done(stof_ctx *ctx);
/* Asserts got == want, and that the context's message contains substr. */
void kt_expect_error(stof_ctx *ctx, stof_status got, stof_status want, const char *substr);
/* Asserts a successful call; prints the context's message otherwise. */
#define KT_OK(ctx, call)                                                               \
  do {                                                                                 \
    stof_status kt_st_ = (call);                                                       \
    if (kt_st_ != STOF_OK) fail_msg("%s -> %s: %s", #call, stof_status_name(kt_st_),   \
                                    stof_ctx_message(ctx));                            \
  } while (0)

/* The Sq x Sk matrix of instance (b, h) by stof_mask_eval (malloc'd). */
uint8_t *kt_reference(const stof_mask *m, int64_t b, int64_t h, int64_t Sq, int64_t Sk);
/* The Sq x Sk matrix of instance m of f, decoded by walking row_ptr / col_idx / bmp_off /
 * bitmap as the layout specifies; asserts the layout's invariants on the way (ascending
 * columns, full tiles inside the domain, partial tiles neither empty nor all ones, zero
 * bits outside the domain). malloc'd. */
uint8_t *kt_decode(const stof_mask_format *f, int32_t m);
/* Checks f against mask everywhere: every instance decoded == reference, format_get on
 * every element (or a sample when large), and the statistics recounted from the decoded
 * matrices. */
void kt_check_format(const stof_mask_format *f, const stof_mask *mask);
/* The same with the reference matrix of each instance m given in refs[m]. */
void kt_check_format_refs(const stof_mask_format *f, const stof_mask *mask,
                          uint8_t *const *refs);
/* Builds the format of mask for (B, H, Sq, Sk, T) and checks it with kt_check_format. */
void kt_build_and_check(stof_ctx *ctx, const stof_mask *mask, int64_t B, int64_t H,
                        int64_t Sq, int64_t Sk, int T);

#endif
