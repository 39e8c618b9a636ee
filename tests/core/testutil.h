/*
 * Shared helpers of the core unit tests (private to tests/core).
 *
 * - tu_heap: an allocator hook that tracks live bytes behind a size header (so a dealloc
 *   with a wrong size is caught), poisons fresh and freed memory with 0xFF bytes (NaN for
 *   floats, so "zeroed" and "written" are checked for real) and can fail the Nth growing
 *   allocation (nsize > 0 and osize < nsize) for failure injection.
 * - TU_OK / TU_ERR: status checks that print the context's message.
 * - Builders that assert success, to keep TE construction in tests short.
 * - Independent references: IEEE rounding to f16/bf16/f32 and f16 decoding, in double.
 * Everything is static: each test file gets its own copy.
 */
#ifndef STOF_TESTS_CORE_TESTUTIL_H
#define STOF_TESTS_CORE_TESTUTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "stof/core.h"

/* ---------------------------------------------------------------- tracking allocator */

typedef struct tu_heap {
  size_t live;     /* bytes currently allocated through the hook */
  size_t peak;     /* the most bytes live at once */
  long nalloc;     /* growing allocations seen (nsize > 0, osize < nsize) */
  long fail_at;    /* fail the fail_at-th growing allocation (0: never) */
  int failed;      /* the injected failure happened */
  int bad_size;    /* a free/realloc passed an osize different from the allocated size */
} tu_heap;

#define TU_HDR 16
#define TU_POISON 0xFF

static inline void *tu_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  tu_heap *h = (tu_heap *)ud;
  size_t old = 0;
  unsigned char *base = NULL;
  if (ptr) {
    base = (unsigned char *)ptr - TU_HDR;
    memcpy(&old, base, sizeof old);
    if (old != osize) h->bad_size = 1;
  }
  if (nsize == 0) {
    if (ptr) {
      memset(base, TU_POISON, TU_HDR + old);
      free(base);
      h->live -= old;
    }
    return NULL;
  }
  if (nsize > old) {
    h->nalloc++;
    if (h->fail_at > 0 && h->nalloc == h->fail_at) {
      h->failed = 1;
      return NULL;
    }
  }
  unsigned char *nb = (unsigned char *)malloc(TU_HDR + nsize);
  if (!nb) return NULL;
  memset(nb, TU_POISON, TU_HDR + nsize);
  memcpy(nb, &nsize, sizeof nsize);
  if (ptr) {
    memcpy(nb + TU_HDR, ptr, old < nsize ? old : nsize);
    memset(base, TU_POISON, TU_HDR + old);
    free(base);
  }
  h->live += nsize;
  h->live -= old;
  if (h->live > h->peak) h->peak = h->live;
  return nb + TU_HDR;
}

/* ---------------------------------------------------------------- status checks */

#define TU_OK(ctx, call)                                                               \
  do {                                                                                 \
    stof_status tu_s_ = (call);                                                        \
    if (tu_s_ != STOF_OK)                                                              \
      fail_msg("%s returned %s: %s", #call, stof_status_name(tu_s_),                   \
               stof_ctx_message(ctx) ? stof_ctx_message(ctx) : "(null)");              \
  } while (0)

/* Message of ctx contains substr. */
static inline void tu_assert_msg(const char *file, int line, stof_ctx *ctx, const char *substr) {
  const char *m = stof_ctx_message(ctx);
  if (!m || !strstr(m, substr))
    fail_msg("%s:%d: message \"%s\" lacks \"%s\"", file, line, m ? m : "(null)", substr);
}
#define TU_MSG(ctx, substr) tu_assert_msg(__FILE__, __LINE__, (ctx), (substr))

/* Message contains at least one of the NULL-terminated list of substrings. */
static inline void tu_assert_msg_any(const char *file, int line, stof_ctx *ctx, ...) {
  const char *m = stof_ctx_message(ctx);
  va_list ap;
  va_start(ap, ctx);
  const char *s;
  int found = 0;
  char want[512] = "";
  while ((s = va_arg(ap, const char *)) != NULL) {
    if (m && strstr(m, s)) found = 1;
    if (strlen(want) + strlen(s) + 4 < sizeof want) {
      strcat(want, "\"");
      strcat(want, s);
      strcat(want, "\" ");
    }
  }
  va_end(ap);
  if (!found)
    fail_msg("%s:%d: message \"%s\" lacks all of %s", file, line, m ? m : "(null)", want);
}
#define TU_MSG_ANY(ctx, ...) tu_assert_msg_any(__FILE__, __LINE__, (ctx), __VA_ARGS__, NULL)

/* call returns status, ctx records it, and the message names substr. */
#define TU_ERR(ctx, call, status, substr)                                              \
  do {                                                                                 \
    stof_status tu_s_ = (call);                                                        \
    if (tu_s_ != (status))                                                             \
      fail_msg("%s returned %s, expected %s (message: %s)", #call,                     \
               stof_status_name(tu_s_), stof_status_name(status),                      \
               stof_ctx_message(ctx) ? stof_ctx_message(ctx) : "(null)");              \
    assert_int_equal(stof_ctx_status(ctx), (status));                                  \
    TU_MSG(ctx, substr);                                                               \
    stof_ctx_clear_error(ctx);                                                         \
  } while (0)

/* ---------------------------------------------------------------- contexts */

/* A context on a tracking heap. */
static inline stof_ctx *tu_ctx_new(tu_heap *h) {
  memset(h, 0, sizeof *h);
  stof_ctx *ctx = stof_ctx_new(tu_alloc, h);
  assert_non_null(ctx);
  assert_int_equal(stof_ctx_status(ctx), STOF_OK);
  return ctx;
}

/* Leak check: nothing left in the context, and after freeing it nothing in the heap. */
static inline void tu_ctx_free(stof_ctx *ctx, tu_heap *h) {
  assert_int_equal(stof_ctx_bytes_in_use(ctx), 0);
  stof_ctx_free(ctx);
  assert_int_equal(h->live, 0);
  assert_int_equal(h->bad_size, 0);
}

/* ---------------------------------------------------------------- test-side RNG */

/* splitmix64: the tests' own random numbers, independent of the library's RNG. */
static inline uint64_t tu_splitmix(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
/* Uniform in [lo, hi), never exactly 0 for a symmetric range (0 is bumped). */
static inline double tu_uniform(uint64_t *s, double lo, double hi) {
  double u = (double)(tu_splitmix(s) >> 11) * 0x1.0p-53;
  double v = lo + (hi - lo) * u;
  if (v == 0) v = (hi - lo) * 1e-3;
  return v;
}

/* ---------------------------------------------------------------- references */

/* v rounded to nearest-even with p significant bits, minimum normal exponent emin,
 * largest finite maxv (beyond which it overflows to inf). Independent of the library. */
static inline double tu_round_ieee(double v, int p, int emin, double maxv) {
  if (isnan(v) || isinf(v) || v == 0) return v;
  double a = fabs(v);
  int e = ilogb(a);
  if (e < emin) e = emin;
  double ulp = ldexp(1.0, e - (p - 1));
  double r = nearbyint(a / ulp) * ulp;
  if (r > maxv) r = INFINITY;
  return copysign(r, v);
}
static inline double tu_round_f16(double v) { return tu_round_ieee(v, 11, -14, 65504.0); }
static inline double tu_round_bf16(double v) {
  return tu_round_ieee(v, 8, -126, ldexp(255.0, 120)); /* (2 - 2^-7) * 2^127 */
}
static inline double tu_round_f32(double v) { return tu_round_ieee(v, 24, -126, 0x1.fffffep127); }

/* The value of an f16 bit pattern, decoded by hand. */
static inline double tu_f16_value(uint16_t h) {
  int sign = h >> 15, exp = (h >> 10) & 31, man = h & 1023;
  double v;
  if (exp == 31) v = man ? NAN : INFINITY;
  else if (exp == 0) v = ldexp((double)man, -24);
  else v = ldexp(1024.0 + man, exp - 25);
  return sign ? -v : v;
}

/* Relative L2 error ||got - want|| / ||want|| computed here, in double. */
static inline double tu_rel_l2(const double *got, const double *want, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    double d = got[i] - want[i];
    num += d * d;
    den += want[i] * want[i];
  }
  if (den == 0) return num == 0 ? 0 : INFINITY;
  return sqrt(num / den);
}

/* ---------------------------------------------------------------- tensors */

/* A contiguous CPU tensor of dtype with values from the test RNG in [lo, hi). */
static inline stof_tensor *tu_tensor_uniform(stof_ctx *ctx, stof_dtype dt, int ndim,
                                      const int64_t *shape, uint64_t *seed, double lo,
                                      double hi) {
  stof_tensor *t = NULL;
  TU_OK(ctx, stof_tensor_new(ctx, dt, ndim, shape, STOF_DEVICE_CPU, &t));
  int64_t n = stof_tensor_numel(t);
  for (int64_t i = 0; i < n; i++) stof_tensor_store(t, i, tu_uniform(seed, lo, hi));
  return t;
}

/* All elements of a contiguous tensor, as doubles (caller frees with free()). */
static inline double *tu_values(const stof_tensor *t) {
  assert_true(stof_tensor_is_contiguous(t));
  int64_t n = stof_tensor_numel(t);
  double *v = (double *)malloc(sizeof(double) * (size_t)(n ? n : 1));
  assert_non_null(v);
  for (int64_t i = 0; i < n; i++) v[i] = stof_tensor_load(t, i);
  return v;
}

/* got (a contiguous tensor) matches want: no NaN, rel L2 below tol. */
static inline void tu_check_close(const stof_tensor *got, const double *want, size_t n, double tol) {
  assert_int_equal(stof_tensor_numel(got), (int64_t)n);
  double *g = tu_values(got);
  for (size_t i = 0; i < n; i++)
    if (isnan(g[i])) fail_msg("NaN at flat index %zu (want %g)", i, want[i]);
  double e = tu_rel_l2(g, want, n);
  free(g);
  if (!(e < tol)) fail_msg("relative L2 error %g >= %g", e, tol);
}

/* ---------------------------------------------------------------- TE builders */

#define TU_G(g) stof_graph_ctx(g)

static inline const stof_expr *tu_int(stof_graph *g, int64_t v) {
  const stof_expr *e = NULL;
  TU_OK(TU_G(g), stof_te_int(g, v, STOF_DTYPE_I32, &e));
  return e;
}
static inline const stof_expr *tu_f32(stof_graph *g, double v) {
  const stof_expr *e = NULL;
  TU_OK(TU_G(g), stof_te_float(g, v, STOF_DTYPE_F32, &e));
  return e;
}
static inline const stof_expr *tu_bin(stof_graph *g, stof_expr_kind k, const stof_expr *a,
                               const stof_expr *b) {
  const stof_expr *e = NULL;
  TU_OK(TU_G(g), stof_te_binary(g, k, a, b, &e));
  return e;
}
static inline const stof_expr *tu_un(stof_graph *g, stof_expr_kind k, const stof_expr *a) {
  const stof_expr *e = NULL;
  TU_OK(TU_G(g), stof_te_unary(g, k, a, &e));
  return e;
}
static inline const stof_expr *tu_sel(stof_graph *g, const stof_expr *c, const stof_expr *a,
                               const stof_expr *b) {
  const stof_expr *e = NULL;
  TU_OK(TU_G(g), stof_te_select(g, c, a, b, &e));
  return e;
}
/* op[idx0, idx1, ...] with nidx indices. */
static inline const stof_expr *tu_load(stof_graph *g, const stof_op *op, int nidx, ...) {
  const stof_expr *idx[STOF_MAX_DIMS];
  va_list ap;
  va_start(ap, nidx);
  for (int i = 0; i < nidx; i++) idx[i] = va_arg(ap, const stof_expr *);
  va_end(ap);
  const stof_expr *e = NULL;
  TU_OK(TU_G(g), stof_te_load(g, op, nidx, idx, &e));
  return e;
}
static inline const stof_expr *tu_raxis(stof_graph *g, int64_t extent, const char *name) {
  const stof_expr *e = NULL;
  TU_OK(TU_G(g), stof_te_reduce_axis(g, extent, name, &e));
  return e;
}
static inline const stof_expr *tu_reduce(stof_graph *g, stof_reduce_kind c, const stof_expr *src,
                                  int naxis, ...) {
  const stof_expr *ax[STOF_MAX_DIMS];
  va_list ap;
  va_start(ap, naxis);
  for (int i = 0; i < naxis; i++) ax[i] = va_arg(ap, const stof_expr *);
  va_end(ap);
  const stof_expr *e = NULL;
  TU_OK(TU_G(g), stof_te_reduce(g, c, src, naxis, ax, &e));
  return e;
}
static inline const stof_op *tu_ph(stof_graph *g, const char *name, stof_dtype dt, int ndim,
                            const int64_t *shape) {
  const stof_op *op = NULL;
  TU_OK(TU_G(g), stof_te_placeholder(g, ndim, shape, dt, name, &op));
  return op;
}
static inline void tu_axes(stof_graph *g, int ndim, const int64_t *shape, const stof_expr **axes) {
  TU_OK(TU_G(g), stof_te_compute_axes(g, ndim, shape, NULL, axes));
}
static inline const stof_op *tu_compute(stof_graph *g, const char *name, int ndim,
                                 const stof_expr *const *axes, const stof_expr *body) {
  const stof_op *op = NULL;
  TU_OK(TU_G(g), stof_te_compute(g, name, ndim, axes, body, -1, &op));
  return op;
}

#define TU_SHAPE(...) ((const int64_t[]){__VA_ARGS__})

#endif
