/*
 * The context: allocator hook (Lua-style), the error state, the RNG, and the string
 * buffer used by printers. Out-of-memory is sticky: once an allocation fails the
 * context's status stays STOF_ERR_NOMEM until stof_ctx_clear_error.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core_int.h"

static const char *const status_names[] = {
#define STOF_X(name, text) #name,
    STOF_STATUS_LIST(STOF_X)
#undef STOF_X
};
static const char *const status_texts[] = {
#define STOF_X(name, text) text,
    STOF_STATUS_LIST(STOF_X)
#undef STOF_X
};

const char *stof_status_name(stof_status s) {
  return (unsigned)s < STOF_STATUS_COUNT ? status_names[s] : "UNKNOWN";
}

const char *stof_status_text(stof_status s) {
  return (unsigned)s < STOF_STATUS_COUNT ? status_texts[s] : "unknown status";
}

static void *default_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  (void)ud;
  (void)osize;
  if (nsize == 0) {
    free(ptr);
    return NULL;
  }
  return realloc(ptr, nsize);
}

stof_ctx *stof_ctx_new(stof_alloc_fn alloc, void *ud) {
  if (!alloc) alloc = default_alloc;
  stof_ctx *ctx = alloc(ud, NULL, 0, sizeof *ctx);
  if (!ctx) return NULL;
  memset(ctx, 0, sizeof *ctx);
  ctx->alloc = alloc;
  ctx->ud = ud;
  stof_ctx_seed(ctx, 0x5eed);
  return ctx;
}

void stof_ctx_free(stof_ctx *ctx) {
  if (!ctx) return;
  ctx->alloc(ctx->ud, ctx, sizeof *ctx, 0);
}

stof_status stof_ctx_verror(stof_ctx *ctx, stof_status status, const char *fmt, va_list ap) {
  if (ctx->nomem && status != STOF_ERR_NOMEM) return STOF_ERR_NOMEM;
  ctx->status = status;
  vsnprintf(ctx->message, sizeof ctx->message, fmt, ap);
  if (status == STOF_ERR_NOMEM) ctx->nomem = 1;
  return status;
}

stof_status stof_ctx_error(stof_ctx *ctx, stof_status status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  stof_status s = stof_ctx_verror(ctx, status, fmt, ap);
  va_end(ap);
  return s;
}

stof_status stof_ctx_status(const stof_ctx *ctx) { return ctx->status; }

const char *stof_ctx_message(const stof_ctx *ctx) {
  return ctx->status == STOF_OK ? "" : ctx->message;
}

void stof_ctx_clear_error(stof_ctx *ctx) {
  ctx->status = STOF_OK;
  ctx->nomem = 0;
  ctx->message[0] = 0;
}

static void *fail_nomem(stof_ctx *ctx, size_t size) {
  ctx->nomem = 0; /* let the message through, then make it sticky */
  stof_ctx_error(ctx, STOF_ERR_NOMEM, "out of memory (allocating %zu bytes)", size);
  ctx->nomem = 1;
  return NULL;
}

void *stof_ctx_alloc(stof_ctx *ctx, size_t size) {
  if (size == 0) size = 1;
  void *p = ctx->alloc(ctx->ud, NULL, 0, size);
  if (!p) return fail_nomem(ctx, size);
  memset(p, 0, size);
  ctx->in_use += size;
  return p;
}

void *stof_ctx_realloc(stof_ctx *ctx, void *ptr, size_t osize, size_t nsize) {
  if (!ptr) return stof_ctx_alloc(ctx, nsize);
  if (nsize == 0) {
    stof_ctx_dealloc(ctx, ptr, osize);
    return NULL;
  }
  void *p = ctx->alloc(ctx->ud, ptr, osize, nsize);
  if (!p) return fail_nomem(ctx, nsize);
  ctx->in_use = ctx->in_use - osize + nsize;
  return p;
}

void stof_ctx_dealloc(stof_ctx *ctx, void *ptr, size_t size) {
  if (!ptr) return;
  if (size == 0) size = 1;
  ctx->alloc(ctx->ud, ptr, size, 0);
  ctx->in_use -= size;
}

char *stof_ctx_strdup(stof_ctx *ctx, const char *s) {
  size_t n = strlen(s) + 1;
  char *p = stof_ctx_alloc(ctx, n);
  if (p) memcpy(p, s, n);
  return p;
}

size_t stof_ctx_bytes_in_use(const stof_ctx *ctx) { return ctx->in_use; }

/* xoshiro256** seeded by splitmix64 (Blackman and Vigna's published algorithms). */
static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void stof_ctx_seed(stof_ctx *ctx, uint64_t seed) {
  for (int i = 0; i < 4; i++) ctx->rng[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t stof_ctx_rand_u64(stof_ctx *ctx) {
  uint64_t *s = ctx->rng;
  uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return r;
}

double stof_ctx_rand_unit(stof_ctx *ctx) {
  return (double)(stof_ctx_rand_u64(ctx) >> 11) * (1.0 / 9007199254740992.0);
}

/* ---------------------------------------------------------------- string buffer */

void stof_buf_init(stof_buf *b, stof_ctx *ctx) {
  memset(b, 0, sizeof *b);
  b->ctx = ctx;
}

static int buf_reserve(stof_buf *b, size_t extra) {
  if (b->nomem) return 0;
  if (b->len + extra + 1 <= b->cap) return 1;
  size_t ncap = b->cap ? b->cap * 2 : 256;
  while (ncap < b->len + extra + 1) ncap *= 2;
  char *p = stof_ctx_realloc(b->ctx, b->data, b->cap, ncap);
  if (!p) {
    b->nomem = 1;
    return 0;
  }
  b->data = p;
  b->cap = ncap;
  return 1;
}

void stof_buf_printf(stof_buf *b, const char *fmt, ...) {
  char small[256];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  if (n < 0 || !buf_reserve(b, (size_t)n)) return;
  if ((size_t)n < sizeof small) {
    memcpy(b->data + b->len, small, (size_t)n + 1);
  } else {
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
  }
  b->len += (size_t)n;
}

void stof_buf_puts(stof_buf *b, const char *s) {
  size_t n = strlen(s);
  if (!buf_reserve(b, n)) return;
  memcpy(b->data + b->len, s, n + 1);
  b->len += n;
}

stof_status stof_buf_finish(stof_buf *b, char **out) {
  *out = NULL;
  if (b->nomem || !buf_reserve(b, 0)) {
    stof_buf_free(b);
    return stof_ctx_error(b->ctx, STOF_ERR_NOMEM, "out of memory building a string");
  }
  /* shrink to strlen + 1 so the caller frees with a size it can compute */
  char *p = stof_ctx_realloc(b->ctx, b->data, b->cap, b->len + 1);
  if (!p) {
    stof_buf_free(b);
    return STOF_ERR_NOMEM;
  }
  p[b->len] = 0;
  *out = p;
  b->data = NULL;
  b->cap = b->len = 0;
  return STOF_OK;
}

void stof_buf_free(stof_buf *b) {
  stof_ctx_dealloc(b->ctx, b->data, b->cap);
  b->data = NULL;
  b->cap = b->len = 0;
}

const char *core_shape_str(char *buf, size_t n, int ndim, const int64_t *shape) {
  size_t len = 0;
  len += (size_t)snprintf(buf, n, "[");
  for (int d = 0; d < ndim && len < n; d++)
    len += (size_t)snprintf(buf + len, n - len, d ? ", %lld" : "%lld", (long long)shape[d]);
  if (len < n) snprintf(buf + len, n - len, "]");
  return buf;
}
