/*
 * Masks: constructors, combination, element evaluation, tile classification and tile
 * filling (the analytic fast paths the format builder relies on).
 *
 * Invariants: a mask owns its tree in its own arena and never changes after
 * construction; combining copies the operands' trees into the new mask's arena.
 * kernels_mask_classify only answers ZERO or ONE when that holds for every element of the
 * tile; kernels_mask_fill is exact, and agrees with kernels_mask_node_eval everywhere.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels_int.h"

/* ---------------------------------------------------------------- string builder */


/* ---------------------------------------------------------------- hashing */

static uint64_t mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
  const unsigned char *c = p;
  for (size_t k = 0; k < n; k++) h = (h ^ c[k]) * 0x100000001b3ull;
  return h;
}
#define FNV_BASIS 0xcbf29ce484222325ull

/* Whether block (bi, bj) of random_blocks(.., p, seed) is kept. */
static int block_kept(uint64_t seed, int64_t bi, int64_t bj, double p) {
  if (p >= 1) return 1;
  if (p <= 0) return 0;
  uint64_t h = mix64(mix64(mix64(seed) ^ (uint64_t)bi) ^ (uint64_t)bj);
  return (double)(h >> 11) * 0x1p-53 < p;
}

/* ---------------------------------------------------------------- construction */

static stof_status mask_begin(stof_ctx *ctx, stof_mask **out) {
  stof_mask *m = stof_ctx_alloc(ctx, sizeof *m);
  if (!m) return STOF_ERR_NOMEM;
  m->ctx = ctx;
  stof_arena_init(&m->arena, ctx);
  m->cacheable = 1;
  *out = m;
  return STOF_OK;
}

void stof_mask_free(stof_mask *m) {
  if (!m) return;
  stof_ctx *ctx = m->ctx;
  stof_arena_release(&m->arena);
  stof_ctx_dealloc(ctx, m, sizeof *m);
}

/* Completes a construction: on success hands m out, else frees it. */
static stof_status mask_end(stof_mask *m, const kernels_mask_node *root, stof_mask **out) {
  if (!root) {
    stof_mask_free(m);
    return STOF_ERR_NOMEM;
  }
  m->root = root;
  *out = m;
  return STOF_OK;
}

static kernels_mask_node *node_new(stof_mask *m, kernels_mask_kind kind) {
  kernels_mask_node *n = stof_arena_alloc(&m->arena, sizeof *n);
  if (!n) return NULL;
  n->kind = kind;
  n->atom = 1;
  return n;
}

/* Sets n's description (printf-style, in the arena); returns n, or NULL on NOMEM. */
__attribute__((format(printf, 3, 4)))
static kernels_mask_node *node_desc(stof_mask *m, kernels_mask_node *n, const char *fmt, ...) {
  if (!n) return NULL;
  va_list ap;
  va_start(ap, fmt);
  int len = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  char *d = stof_arena_alloc(&m->arena, (size_t)len + 1);
  if (!d) return NULL;
  va_start(ap, fmt);
  vsnprintf(d, (size_t)len + 1, fmt, ap);
  va_end(ap);
  n->desc = d;
  return n;
}

/* p printed short when that reads back exactly, else with every digit. */
static void fmt_double(char *buf, size_t size, double p) {
  snprintf(buf, size, "%.15g", p);
  if (strtod(buf, NULL) != p) snprintf(buf, size, "%.17g", p);
}

static kernels_mask_node *window_node(stof_mask *m, int64_t l, int64_t r) {
  kernels_mask_node *n = node_new(m, KERNELS_MASK_WINDOW);
  if (n) {
    n->u.window.l = l;
    n->u.window.r = r;
  }
  return n;
}

static kernels_mask_node *global_node(stof_mask *m, int64_t g) {
  kernels_mask_node *n = node_new(m, KERNELS_MASK_GLOBAL);
  if (n) n->u.global.g = g;
  return node_desc(m, n, "global(%lld)", (long long)g);
}

static kernels_mask_node *binary_node(stof_mask *m, kernels_mask_kind kind,
                                      const kernels_mask_node *a,
                                      const kernels_mask_node *b) {
  if (!a || !b) return NULL;
  kernels_mask_node *n = node_new(m, kind);
  if (!n) return NULL;
  n->u.bin.a = a;
  n->u.bin.b = b;
  n->varies_b = a->varies_b || b->varies_b;
  n->varies_h = a->varies_h || b->varies_h;
  return n;
}

static kernels_mask_node *longformer_node(stof_mask *m, int64_t w, int64_t g) {
  kernels_mask_node *win = node_desc(m, window_node(m, w, w), "sliding(%lld)", (long long)w);
  kernels_mask_node *n = binary_node(m, KERNELS_MASK_UNION, win, global_node(m, g));
  return node_desc(m, n, "longformer(%lld, %lld)", (long long)w, (long long)g);
}

static kernels_mask_node *random_node(stof_mask *m, int64_t b, double p, uint64_t seed) {
  kernels_mask_node *n = node_new(m, KERNELS_MASK_RANDOM_BLOCKS);
  if (!n) return NULL;
  n->u.rnd.b = b;
  n->u.rnd.p = p;
  n->u.rnd.seed = seed;
  char ps[40];
  fmt_double(ps, sizeof ps, p);
  return node_desc(m, n, "random_blocks(%lld, %s, %llu)", (long long)b, ps,
                   (unsigned long long)seed);
}

static stof_status check_nonneg(stof_ctx *ctx, const char *who, const char *what, int64_t v) {
  if (v < 0)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "%s: %s = %lld is negative", who, what,
                          (long long)v);
  return STOF_OK;
}

static stof_status check_block(stof_ctx *ctx, const char *who, int64_t b, double p) {
  if (b <= 0)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "%s: block size b = %lld must be >= 1", who,
                          (long long)b);
  if (!(p >= 0 && p <= 1))
    return stof_ctx_error(ctx, STOF_ERR_ARG, "%s: probability p = %g is outside [0, 1]", who,
                          p);
  return STOF_OK;
}

stof_status stof_mask_dense(stof_ctx *ctx, stof_mask **out) {
  stof_mask *m;
  if (mask_begin(ctx, &m)) return STOF_ERR_NOMEM;
  return mask_end(m, node_desc(m, node_new(m, KERNELS_MASK_DENSE), "dense()"), out);
}

stof_status stof_mask_causal(stof_ctx *ctx, stof_mask **out) {
  stof_mask *m;
  if (mask_begin(ctx, &m)) return STOF_ERR_NOMEM;
  return mask_end(m, node_desc(m, window_node(m, KERNELS_WINDOW_INF, 0), "causal()"), out);
}

stof_status stof_mask_window(stof_ctx *ctx, int64_t l, int64_t r, stof_mask **out) {
  stof_status st;
  if ((st = check_nonneg(ctx, "window", "l", l)) || (st = check_nonneg(ctx, "window", "r", r)))
    return st;
  stof_mask *m;
  if (mask_begin(ctx, &m)) return STOF_ERR_NOMEM;
  return mask_end(m, node_desc(m, window_node(m, l, r), "window(%lld, %lld)", (long long)l,
                               (long long)r), out);
}

stof_status stof_mask_sliding(stof_ctx *ctx, int64_t w, stof_mask **out) {
  stof_status st;
  if ((st = check_nonneg(ctx, "sliding", "w", w))) return st;
  stof_mask *m;
  if (mask_begin(ctx, &m)) return STOF_ERR_NOMEM;
  return mask_end(m, node_desc(m, window_node(m, w, w), "sliding(%lld)", (long long)w), out);
}

stof_status stof_mask_causal_sliding(stof_ctx *ctx, int64_t w, stof_mask **out) {
  if (w < 1)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "causal_sliding: w = %lld must be >= 1",
                          (long long)w);
  stof_mask *m;
  if (mask_begin(ctx, &m)) return STOF_ERR_NOMEM;
  return mask_end(m, node_desc(m, window_node(m, w - 1, 0), "causal_sliding(%lld)",
                               (long long)w), out);
}

stof_status stof_mask_global(stof_ctx *ctx, int64_t g, stof_mask **out) {
  stof_status st;
  if ((st = check_nonneg(ctx, "global", "g", g))) return st;
  stof_mask *m;
  if (mask_begin(ctx, &m)) return STOF_ERR_NOMEM;
  return mask_end(m, global_node(m, g), out);
}

stof_status stof_mask_longformer(stof_ctx *ctx, int64_t w, int64_t g, stof_mask **out) {
  stof_status st;
  if ((st = check_nonneg(ctx, "longformer", "w", w)) ||
      (st = check_nonneg(ctx, "longformer", "g", g)))
    return st;
  stof_mask *m;
  if (mask_begin(ctx, &m)) return STOF_ERR_NOMEM;
  return mask_end(m, longformer_node(m, w, g), out);
}

stof_status stof_mask_random_blocks(stof_ctx *ctx, int64_t b, double p, uint64_t seed,
                                    stof_mask **out) {
  stof_status st;
  if ((st = check_block(ctx, "random_blocks", b, p))) return st;
  stof_mask *m;
  if (mask_begin(ctx, &m)) return STOF_ERR_NOMEM;
  return mask_end(m, random_node(m, b, p, seed), out);
}

stof_status stof_mask_bigbird(stof_ctx *ctx, int64_t w, int64_t g, int64_t b, double p,
                              uint64_t seed, stof_mask **out) {
  stof_status st;
  if ((st = check_nonneg(ctx, "bigbird", "w", w)) ||
      (st = check_nonneg(ctx, "bigbird", "g", g)) || (st = check_block(ctx, "bigbird", b, p)))
    return st;
  stof_mask *m;
  if (mask_begin(ctx, &m)) return STOF_ERR_NOMEM;
  kernels_mask_node *n = binary_node(m, KERNELS_MASK_UNION, longformer_node(m, w, g),
                                     random_node(m, b, p, seed));
  char ps[40];
  fmt_double(ps, sizeof ps, p);
  return mask_end(m, node_desc(m, n, "bigbird(%lld, %lld, %lld, %s, %llu)", (long long)w,
                               (long long)g, (long long)b, ps, (unsigned long long)seed),
                  out);
}

stof_status stof_mask_dilated(stof_ctx *ctx, int64_t w, int64_t d, stof_mask **out) {
  if (w < 1)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "dilated: w = %lld must be >= 1", (long long)w);
  stof_status st;
  if ((st = check_nonneg(ctx, "dilated", "d", d))) return st;
  stof_mask *m;
  if (mask_begin(ctx, &m)) return STOF_ERR_NOMEM;
  kernels_mask_node *n = node_new(m, KERNELS_MASK_DILATED);
  if (n) {
    n->u.dilated.w = w;
    n->u.dilated.d = d;
  }
  return mask_end(m, node_desc(m, n, "dilated(%lld, %lld)", (long long)w, (long long)d), out);
}

/* Document masks: one path for both constructors. */
static stof_status document_new(stof_ctx *ctx, const char *who, int64_t nbatch,
                                const int64_t *nseq, const int64_t *lengths,
                                stof_mask **out) {
  if (nbatch < 1)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "%s: no batches (nbatch = %lld)", who,
                          (long long)nbatch);
  int64_t total = 0;
  for (int64_t bb = 0; bb < nbatch; bb++) {
    if (nseq[bb] < 1)
      return stof_ctx_error(ctx, STOF_ERR_ARG,
                            "%s: empty lengths for batch %lld (nseq[%lld] = %lld)", who,
                            (long long)bb, (long long)bb, (long long)nseq[bb]);
    if (nseq[bb] > ((int64_t)1 << 40))
      return stof_ctx_error(ctx, STOF_ERR_ARG, "%s: %lld sequences in batch %lld", who,
                            (long long)nseq[bb], (long long)bb);
    total += nseq[bb];
  }
  if (!lengths)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "%s: lengths is NULL", who);
  for (int64_t bb = 0, k = 0; bb < nbatch; bb++) {
    int64_t sum = 0;
    for (int64_t q = 0; q < nseq[bb]; q++, k++) {
      if (lengths[k] <= 0)
        return stof_ctx_error(ctx, STOF_ERR_ARG, "%s: lengths[%lld] = %lld must be > 0", who,
                              (long long)k, (long long)lengths[k]);
      sum += lengths[k];
      if (sum > ((int64_t)1 << 50))
        return stof_ctx_error(ctx, STOF_ERR_ARG, "%s: lengths sum past 2^50", who);
    }
  }

  stof_mask *m;
  if (mask_begin(ctx, &m)) return STOF_ERR_NOMEM;
  kernels_mask_node *n = node_new(m, KERNELS_MASK_DOCUMENT);
  int64_t *seq_begin = stof_arena_alloc(&m->arena, (size_t)(nbatch + 1) * sizeof *seq_begin);
  int64_t *pos = stof_arena_alloc(&m->arena, (size_t)(total + nbatch) * sizeof *pos);
  if (!n || !seq_begin || !pos) return mask_end(m, NULL, out);
  uint64_t h = FNV_BASIS;
  for (int64_t bb = 0, k = 0; bb < nbatch; bb++) {
    seq_begin[bb + 1] = seq_begin[bb] + nseq[bb];
    int64_t *p = pos + seq_begin[bb] + bb;
    p[0] = 0;
    for (int64_t q = 0; q < nseq[bb]; q++, k++) p[q + 1] = p[q] + lengths[k];
    h = fnv1a(h, &nseq[bb], sizeof nseq[bb]);
  }
  h = fnv1a(h, lengths, (size_t)total * sizeof *lengths);
  n->u.doc.nbatch = nbatch;
  n->u.doc.seq_begin = seq_begin;
  n->u.doc.pos = pos;
  n->u.doc.npos = total + nbatch;
  n->varies_b = nbatch > 1;

  /* Short lists print in full; long ones as counts and a hash (still a unique key). */
  stof_buf s;
  stof_buf_init(&s, ctx);
  if (total <= 16) {
    stof_buf_printf(&s, "%s(", who);
    for (int64_t bb = 0, k = 0; bb < nbatch; bb++) {
      if (nbatch > 1) stof_buf_printf(&s, "%s{", bb ? ", " : "");
      for (int64_t q = 0; q < nseq[bb]; q++, k++)
        stof_buf_printf(&s, "%s%lld", q ? ", " : "", (long long)lengths[k]);
      if (nbatch > 1) stof_buf_printf(&s, "}");
    }
    stof_buf_printf(&s, ")");
  } else if (nbatch == 1) {
    stof_buf_printf(&s, "%s(n=%lld, total=%lld, #%016llx)", who, (long long)total,
                       (long long)pos[total], (unsigned long long)h);
  } else {
    stof_buf_printf(&s, "%s(B=%lld, n=%lld, #%016llx)", who, (long long)nbatch,
                       (long long)total, (unsigned long long)h);
  }
  char *d;
  if (stof_buf_finish(&s, &d)) return mask_end(m, NULL, out);
  n->desc = stof_arena_strdup(&m->arena, d);
  stof_ctx_dealloc(ctx, d, strlen(d) + 1);
  return mask_end(m, n->desc ? n : NULL, out);
}

stof_status stof_mask_document(stof_ctx *ctx, int64_t n, const int64_t *lengths,
                               stof_mask **out) {
  if (n < 1)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "document: empty lengths (n = %lld)",
                          (long long)n);
  return document_new(ctx, "document", 1, &n, lengths, out);
}

stof_status stof_mask_document_batched(stof_ctx *ctx, int64_t nbatch, const int64_t *nseq,
                                       const int64_t *lengths, stof_mask **out) {
  if (nbatch >= 1 && !nseq)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "document_batched: nseq is NULL");
  return document_new(ctx, "document_batched", nbatch, nseq, lengths, out);
}

stof_status stof_mask_document_random(stof_ctx *ctx, int64_t S, int64_t lo, int64_t hi,
                                      uint64_t seed, stof_mask **out) {
  if (S < 1)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "document_random: S = %lld must be >= 1",
                          (long long)S);
  if (lo < 1 || hi < lo)
    return stof_ctx_error(ctx, STOF_ERR_ARG,
                          "document_random: lengths range [%lld, %lld] is empty or below 1",
                          (long long)lo, (long long)hi);
  int64_t cap = S / lo + 1, n = 0, sum = 0;
  int64_t *len = stof_ctx_alloc(ctx, (size_t)cap * sizeof *len);
  if (!len) return STOF_ERR_NOMEM;
  uint64_t state = seed;
  while (sum < S) {
    state += 0x9e3779b97f4a7c15ull;
    int64_t l = lo + (int64_t)(mix64(state) % (uint64_t)(hi - lo + 1));
    if (sum + l > S) l = S - sum;
    len[n++] = l;
    sum += l;
  }
  stof_status st = stof_mask_document(ctx, n, len, out);
  stof_ctx_dealloc(ctx, len, (size_t)cap * sizeof *len);
  return st;
}

stof_status stof_mask_from_tensor(stof_ctx *ctx, const stof_tensor *t, stof_mask **out) {
  if (!t) return stof_ctx_error(ctx, STOF_ERR_ARG, "from_tensor: tensor is NULL");
  if (t->device != STOF_DEVICE_CPU)
    return stof_ctx_error(ctx, STOF_ERR_ARG,
                          "from_tensor: the tensor is on the GPU; copy it to the CPU first");
  if (t->dtype != STOF_DTYPE_BOOL && t->dtype != STOF_DTYPE_I32 && t->dtype != STOF_DTYPE_I64)
    return stof_ctx_error(ctx, STOF_ERR_TYPE,
                          "from_tensor: dtype %s; a mask tensor is bool, int32 or int64",
                          stof_dtype_name(t->dtype));
  if (t->ndim != 2 && t->ndim != 4)
    return stof_ctx_error(ctx, STOF_ERR_SHAPE,
                          "from_tensor: rank %d tensor; a mask is [S, S] or [B, H, S, S]",
                          t->ndim);
  int r = t->ndim;
  int64_t nb = r == 4 ? t->shape[0] : 1, nh = r == 4 ? t->shape[1] : 1;
  int64_t sq = t->shape[r - 2], sk = t->shape[r - 1];
  if (sq != sk)
    return stof_ctx_error(ctx, STOF_ERR_SHAPE,
                          "from_tensor: mask is not square (%lld queries x %lld keys)",
                          (long long)sq, (long long)sk);
  if (nb < 1 || nh < 1 || sq < 1)
    return stof_ctx_error(ctx, STOF_ERR_SHAPE, "from_tensor: empty tensor (an extent is 0)");
  int64_t S = sq, wpr = (S + 63) / 64;
  if (nb * nh > ((int64_t)1 << 20) || S > ((int64_t)1 << 20) ||
      nb * nh * S * wpr > ((int64_t)1 << 33))
    return stof_ctx_error(ctx, STOF_ERR_ARG, "from_tensor: tensor too large for a mask");

  stof_mask *m;
  if (mask_begin(ctx, &m)) return STOF_ERR_NOMEM;
  kernels_mask_node *n = node_new(m, KERNELS_MASK_TENSOR);
  uint64_t *bits = stof_arena_alloc(&m->arena, (size_t)(nb * nh * S * wpr) * sizeof *bits);
  if (!n || !bits) return mask_end(m, NULL, out);
  int64_t s0 = r == 4 ? t->strides[0] : 0, s1 = r == 4 ? t->strides[1] : 0;
  int64_t si = t->strides[r - 2], sj = t->strides[r - 1];
  size_t es = stof_dtype_size(t->dtype);
  const char *base = t->data;
  for (int64_t bb = 0; bb < nb; bb++)
    for (int64_t hh = 0; hh < nh; hh++)
      for (int64_t i = 0; i < S; i++) {
        uint64_t *row = bits + ((bb * nh + hh) * S + i) * wpr;
        const char *src = base + (bb * s0 + hh * s1 + i * si) * (int64_t)es;
        for (int64_t j = 0; j < S; j++) {
          const char *e = src + j * sj * (int64_t)es;
          int v;
          if (t->dtype == STOF_DTYPE_BOOL) v = *(const uint8_t *)e != 0;
          else if (t->dtype == STOF_DTYPE_I32) v = *(const int32_t *)e != 0;
          else v = *(const int64_t *)e != 0;
          if (v) row[j >> 6] |= (uint64_t)1 << (j & 63);
        }
      }
  n->u.tensor.nb = nb;
  n->u.tensor.nh = nh;
  n->u.tensor.S = S;
  n->u.tensor.wpr = wpr;
  n->u.tensor.bits = bits;
  n->varies_b = nb > 1;
  n->varies_h = nh > 1;
  uint64_t h = fnv1a(FNV_BASIS, t->shape, (size_t)r * sizeof t->shape[0]);
  h = fnv1a(h, bits, (size_t)(nb * nh * S * wpr) * sizeof *bits);
  if (r == 4)
    n = node_desc(m, n, "from_tensor(%lldx%lldx%lldx%lld, #%016llx)", (long long)nb,
                  (long long)nh, (long long)S, (long long)S, (unsigned long long)h);
  else
    n = node_desc(m, n, "from_tensor(%lldx%lld, #%016llx)", (long long)S, (long long)S,
                  (unsigned long long)h);
  return mask_end(m, n, out);
}

stof_status stof_mask_fn(stof_ctx *ctx, stof_mask_pred f, void *ud, const char *name,
                         int varies_b, int varies_h, stof_mask **out) {
  if (!f) return stof_ctx_error(ctx, STOF_ERR_ARG, "fn: predicate is NULL");
  stof_mask *m;
  if (mask_begin(ctx, &m)) return STOF_ERR_NOMEM;
  kernels_mask_node *n = node_new(m, KERNELS_MASK_FN);
  if (n) {
    n->u.fn.f = f;
    n->u.fn.ud = ud;
    n->varies_b = varies_b != 0;
    n->varies_h = varies_h != 0;
  }
  m->cacheable = 0;
  return mask_end(m, node_desc(m, n, "fn(%s)", name ? name : "?"), out);
}

/* ---------------------------------------------------------------- combination */

/* A deep copy of n into m's arena (NULL on NOMEM). */
static const kernels_mask_node *node_copy(stof_mask *m, const kernels_mask_node *n) {
  kernels_mask_node *c = stof_arena_alloc(&m->arena, sizeof *c);
  if (!c) return NULL;
  *c = *n;
  c->desc = stof_arena_strdup(&m->arena, n->desc);
  if (!c->desc) return NULL;
  switch (n->kind) {
  case KERNELS_MASK_DOCUMENT: {
    size_t sb = (size_t)(n->u.doc.nbatch + 1) * sizeof(int64_t);
    size_t sp = (size_t)n->u.doc.npos * sizeof(int64_t);
    int64_t *a = stof_arena_alloc(&m->arena, sb), *p = stof_arena_alloc(&m->arena, sp);
    if (!a || !p) return NULL;
    memcpy(a, n->u.doc.seq_begin, sb);
    memcpy(p, n->u.doc.pos, sp);
    c->u.doc.seq_begin = a;
    c->u.doc.pos = p;
    break;
  }
  case KERNELS_MASK_TENSOR: {
    size_t sz = (size_t)(n->u.tensor.nb * n->u.tensor.nh * n->u.tensor.S * n->u.tensor.wpr) *
                sizeof(uint64_t);
    uint64_t *bits = stof_arena_alloc(&m->arena, sz);
    if (!bits) return NULL;
    memcpy(bits, n->u.tensor.bits, sz);
    c->u.tensor.bits = bits;
    break;
  }
  case KERNELS_MASK_UNION:
  case KERNELS_MASK_INTERSECT:
  case KERNELS_MASK_DIFF:
    c->u.bin.a = node_copy(m, n->u.bin.a);
    c->u.bin.b = c->u.bin.a ? node_copy(m, n->u.bin.b) : NULL;
    if (!c->u.bin.b) return NULL;
    break;
  default:
    break;
  }
  return c;
}

/* Whether child needs parentheses as operand (left or right) of a parent of kind k. */
static int needs_parens(kernels_mask_kind k, const kernels_mask_node *child, int right) {
  if (child->atom) return 0;
  if (child->kind == k && (k != KERNELS_MASK_DIFF || !right)) return 0;
  return 1;
}

static stof_status combine(const char *who, kernels_mask_kind kind, const char *op,
                           const stof_mask *a, const stof_mask *b, stof_mask **out) {
  if (!a || !b) {
    stof_ctx *ctx = a ? a->ctx : b ? b->ctx : NULL;
    if (ctx) return stof_ctx_error(ctx, STOF_ERR_ARG, "%s: operand is NULL", who);
    return STOF_ERR_ARG;
  }
  if (a->ctx != b->ctx)
    return stof_ctx_error(a->ctx, STOF_ERR_ARG, "%s: operands come from different contexts",
                          who);
  stof_mask *m;
  if (mask_begin(a->ctx, &m)) return STOF_ERR_NOMEM;
  const kernels_mask_node *ca = node_copy(m, a->root);
  const kernels_mask_node *cb = ca ? node_copy(m, b->root) : NULL;
  kernels_mask_node *n = binary_node(m, kind, ca, cb);
  if (n) n->atom = 0;
  m->cacheable = a->cacheable && b->cacheable;
  int pa = n && needs_parens(kind, ca, 0), pb = n && needs_parens(kind, cb, 1);
  if (n)
    n = node_desc(m, n, "%s%s%s %s %s%s%s", pa ? "(" : "", ca->desc, pa ? ")" : "", op,
                  pb ? "(" : "", cb->desc, pb ? ")" : "");
  return mask_end(m, n, out);
}

stof_status stof_mask_union(const stof_mask *a, const stof_mask *b, stof_mask **out) {
  return combine("union", KERNELS_MASK_UNION, "|", a, b, out);
}

stof_status stof_mask_intersection(const stof_mask *a, const stof_mask *b, stof_mask **out) {
  return combine("intersection", KERNELS_MASK_INTERSECT, "&", a, b, out);
}

stof_status stof_mask_difference(const stof_mask *a, const stof_mask *b, stof_mask **out) {
  return combine("difference", KERNELS_MASK_DIFF, "-", a, b, out);
}

/* ---------------------------------------------------------------- suite */

static const char *const suite_names[] = {"dense",      "causal",  "sliding", "causal_sliding",
                                          "longformer", "bigbird", "document", NULL};

const char *stof_mask_suite_name(int i) {
  if (i < 0 || i >= (int)(sizeof suite_names / sizeof suite_names[0])) return NULL;
  return suite_names[i];
}

stof_status stof_mask_suite(stof_ctx *ctx, const char *name, int64_t S, stof_mask **out) {
  if (!name) return stof_ctx_error(ctx, STOF_ERR_ARG, "mask suite: name is NULL");
  if (!strcmp(name, "dense")) return stof_mask_dense(ctx, out);
  if (!strcmp(name, "causal")) return stof_mask_causal(ctx, out);
  if (!strcmp(name, "sliding")) return stof_mask_sliding(ctx, 32, out);
  if (!strcmp(name, "causal_sliding")) return stof_mask_causal_sliding(ctx, 32, out);
  if (!strcmp(name, "longformer")) return stof_mask_longformer(ctx, 32, 32, out);
  if (!strcmp(name, "bigbird")) return stof_mask_bigbird(ctx, 32, 32, 32, 0.1, 0, out);
  if (!strcmp(name, "document")) {
    int64_t lo = S / 16 > 1 ? S / 16 : 1, hi = S / 2 > lo ? S / 2 : lo;
    return stof_mask_document_random(ctx, S, lo, hi, 1, out);
  }
  return stof_ctx_error(ctx, STOF_ERR_NOT_FOUND,
                        "mask suite: no mask named '%s' (dense, causal, sliding, "
                        "causal_sliding, longformer, bigbird, document)",
                        name);
}

/* ---------------------------------------------------------------- queries */

stof_ctx *stof_mask_ctx(const stof_mask *m) { return m->ctx; }
int stof_mask_varies_b(const stof_mask *m) { return m->root->varies_b; }
int stof_mask_varies_h(const stof_mask *m) { return m->root->varies_h; }
const char *stof_mask_description(const stof_mask *m) { return m->root->desc; }

stof_status stof_mask_describe(const stof_mask *m, char **out) {
  char *s = stof_ctx_strdup(m->ctx, m->root->desc);
  if (!s) return STOF_ERR_NOMEM;
  *out = s;
  return STOF_OK;
}

/* ---------------------------------------------------------------- evaluation */

/* The sequence of position x in batch b's documents: 0 .. n-1, or n when x lies past
 * them; *np gets n and *p the batch's prefix array. -1 when b has no documents. */
static int64_t doc_of(const kernels_mask_node *n, int64_t b, int64_t x, int64_t *np,
                      const int64_t **pp) {
  int64_t nb = n->u.doc.nbatch, bb = nb > 1 ? b : 0;
  if (bb < 0 || bb >= nb) return -1;
  int64_t ns = n->u.doc.seq_begin[bb + 1] - n->u.doc.seq_begin[bb];
  const int64_t *p = n->u.doc.pos + n->u.doc.seq_begin[bb] + bb;
  *np = ns;
  *pp = p;
  if (x >= p[ns]) return ns;
  int64_t lo = 0, hi = ns - 1; /* largest k with p[k] <= x */
  while (lo < hi) {
    int64_t mid = (lo + hi + 1) / 2;
    if (p[mid] <= x) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

static int64_t dilated_span(const kernels_mask_node *n) {
  int64_t w1 = n->u.dilated.w - 1, d1 = n->u.dilated.d + 1;
  if (w1 > KERNELS_WINDOW_INF / d1) return KERNELS_WINDOW_INF;
  return w1 * d1;
}

static const uint64_t *tensor_row(const kernels_mask_node *n, int64_t b, int64_t h,
                                  int64_t i) {
  int64_t nb = n->u.tensor.nb, nh = n->u.tensor.nh;
  int64_t bb = nb > 1 ? b : 0, hh = nh > 1 ? h : 0;
  if (bb < 0 || bb >= nb || hh < 0 || hh >= nh || i < 0 || i >= n->u.tensor.S) return NULL;
  return n->u.tensor.bits + ((bb * nh + hh) * n->u.tensor.S + i) * n->u.tensor.wpr;
}

int kernels_mask_node_eval(const kernels_mask_node *n, int64_t b, int64_t h, int64_t i,
                           int64_t j) {
  switch (n->kind) {
  case KERNELS_MASK_DENSE:
    return 1;
  case KERNELS_MASK_WINDOW:
    return j - i >= -n->u.window.l && j - i <= n->u.window.r;
  case KERNELS_MASK_GLOBAL:
    return i < n->u.global.g || j < n->u.global.g;
  case KERNELS_MASK_RANDOM_BLOCKS:
    return block_kept(n->u.rnd.seed, i / n->u.rnd.b, j / n->u.rnd.b, n->u.rnd.p);
  case KERNELS_MASK_DOCUMENT: {
    int64_t ns;
    const int64_t *p;
    int64_t di = doc_of(n, b, i, &ns, &p);
    if (di < 0 || di >= ns) return 0;
    return j >= p[di] && j < p[di + 1];
  }
  case KERNELS_MASK_DILATED: {
    int64_t k = i - j;
    return k >= 0 && k % (n->u.dilated.d + 1) == 0 && k <= dilated_span(n);
  }
  case KERNELS_MASK_TENSOR: {
    const uint64_t *row = tensor_row(n, b, h, i);
    if (!row || j >= n->u.tensor.S) return 0;
    return (int)((row[j >> 6] >> (j & 63)) & 1);
  }
  case KERNELS_MASK_FN: {
    int r = n->u.fn.f(n->u.fn.ud, b, h, i, j);
    return r < 0 ? -1 : r > 0;
  }
  case KERNELS_MASK_UNION: {
    int a = kernels_mask_node_eval(n->u.bin.a, b, h, i, j);
    return a != 0 ? a : kernels_mask_node_eval(n->u.bin.b, b, h, i, j);
  }
  case KERNELS_MASK_INTERSECT: {
    int a = kernels_mask_node_eval(n->u.bin.a, b, h, i, j);
    return a != 1 ? a : kernels_mask_node_eval(n->u.bin.b, b, h, i, j);
  }
  case KERNELS_MASK_DIFF: {
    int a = kernels_mask_node_eval(n->u.bin.a, b, h, i, j);
    if (a != 1) return a;
    int c = kernels_mask_node_eval(n->u.bin.b, b, h, i, j);
    return c < 0 ? -1 : !c;
  }
  default:
    return 0;
  }
}

int stof_mask_eval(const stof_mask *m, int64_t b, int64_t h, int64_t i, int64_t j) {
  if (i < 0 || j < 0) return 0;
  return kernels_mask_node_eval(m->root, b, h, i, j);
}

/* ---------------------------------------------------------------- classification */

/* A band lo <= j - i <= hi against the tile's range of j - i. */
static int classify_band(int64_t lo, int64_t hi, int64_t i0, int64_t i1, int64_t j0,
                         int64_t j1) {
  int64_t dmin = j0 - (i1 - 1), dmax = (j1 - 1) - i0;
  if (dmax < lo || dmin > hi) return KERNELS_TILE_ZERO;
  if (dmin >= lo && dmax <= hi) return KERNELS_TILE_ONE;
  return KERNELS_TILE_MIXED;
}

int kernels_mask_classify(const kernels_mask_node *n, int64_t b, int64_t h, int64_t i0,
                          int64_t i1, int64_t j0, int64_t j1) {
  switch (n->kind) {
  case KERNELS_MASK_DENSE:
    return KERNELS_TILE_ONE;
  case KERNELS_MASK_WINDOW:
    return classify_band(-n->u.window.l, n->u.window.r, i0, i1, j0, j1);
  case KERNELS_MASK_GLOBAL: {
    int64_t g = n->u.global.g;
    if (i1 - 1 < g || j1 - 1 < g) return KERNELS_TILE_ONE;
    if (i0 >= g && j0 >= g) return KERNELS_TILE_ZERO;
    return KERNELS_TILE_MIXED;
  }
  case KERNELS_MASK_RANDOM_BLOCKS: {
    double p = n->u.rnd.p;
    if (p <= 0) return KERNELS_TILE_ZERO;
    if (p >= 1) return KERNELS_TILE_ONE;
    int64_t bs = n->u.rnd.b;
    int64_t bi0 = i0 / bs, bi1 = (i1 - 1) / bs, bj0 = j0 / bs, bj1 = (j1 - 1) / bs;
    if ((bi1 - bi0 + 1) * (bj1 - bj0 + 1) > 64) return KERNELS_TILE_MIXED;
    int kept = 0, all = 0;
    for (int64_t bi = bi0; bi <= bi1; bi++)
      for (int64_t bj = bj0; bj <= bj1; bj++, all++)
        kept += block_kept(n->u.rnd.seed, bi, bj, p);
    return kept == 0 ? KERNELS_TILE_ZERO : kept == all ? KERNELS_TILE_ONE : KERNELS_TILE_MIXED;
  }
  case KERNELS_MASK_DOCUMENT: {
    int64_t ns;
    const int64_t *p;
    int64_t di0 = doc_of(n, b, i0, &ns, &p);
    if (di0 < 0) return KERNELS_TILE_ZERO;
    int64_t di1 = doc_of(n, b, i1 - 1, &ns, &p);
    int64_t dj0 = doc_of(n, b, j0, &ns, &p), dj1 = doc_of(n, b, j1 - 1, &ns, &p);
    if (di0 == di1 && dj0 == dj1)
      return di0 == dj0 && di0 < ns ? KERNELS_TILE_ONE : KERNELS_TILE_ZERO;
    int64_t lo = di0 > dj0 ? di0 : dj0, hi = di1 < dj1 ? di1 : dj1;
    return lo <= hi && lo < ns ? KERNELS_TILE_MIXED : KERNELS_TILE_ZERO;
  }
  case KERNELS_MASK_DILATED: {
    int k = classify_band(-dilated_span(n), 0, i0, i1, j0, j1);
    return k == KERNELS_TILE_ONE && n->u.dilated.d > 0 ? KERNELS_TILE_MIXED : k;
  }
  case KERNELS_MASK_TENSOR: {
    int64_t nb = n->u.tensor.nb, nh = n->u.tensor.nh;
    int64_t bb = nb > 1 ? b : 0, hh = nh > 1 ? h : 0;
    if (bb < 0 || bb >= nb || hh < 0 || hh >= nh || i0 >= n->u.tensor.S ||
        j0 >= n->u.tensor.S)
      return KERNELS_TILE_ZERO;
    return KERNELS_TILE_MIXED;
  }
  case KERNELS_MASK_FN:
    return KERNELS_TILE_MIXED;
  case KERNELS_MASK_UNION: {
    int a = kernels_mask_classify(n->u.bin.a, b, h, i0, i1, j0, j1);
    if (a == KERNELS_TILE_ONE) return a;
    int c = kernels_mask_classify(n->u.bin.b, b, h, i0, i1, j0, j1);
    if (c == KERNELS_TILE_ONE) return c;
    return a == KERNELS_TILE_ZERO && c == KERNELS_TILE_ZERO ? KERNELS_TILE_ZERO
                                                            : KERNELS_TILE_MIXED;
  }
  case KERNELS_MASK_INTERSECT: {
    int a = kernels_mask_classify(n->u.bin.a, b, h, i0, i1, j0, j1);
    if (a == KERNELS_TILE_ZERO) return a;
    int c = kernels_mask_classify(n->u.bin.b, b, h, i0, i1, j0, j1);
    if (c == KERNELS_TILE_ZERO) return c;
    return a == KERNELS_TILE_ONE && c == KERNELS_TILE_ONE ? KERNELS_TILE_ONE
                                                          : KERNELS_TILE_MIXED;
  }
  case KERNELS_MASK_DIFF: {
    int a = kernels_mask_classify(n->u.bin.a, b, h, i0, i1, j0, j1);
    if (a == KERNELS_TILE_ZERO) return a;
    int c = kernels_mask_classify(n->u.bin.b, b, h, i0, i1, j0, j1);
    if (c == KERNELS_TILE_ONE) return KERNELS_TILE_ZERO;
    return a == KERNELS_TILE_ONE && c == KERNELS_TILE_ZERO ? KERNELS_TILE_ONE
                                                           : KERNELS_TILE_MIXED;
  }
  default:
    return KERNELS_TILE_MIXED;
  }
}

/* ---------------------------------------------------------------- filling */

static void rows_const(kernels_tile_row *rows, int nrows, int ncols, int one) {
  for (int r = 0; r < nrows; r++) {
    rows[r][0] = rows[r][1] = 0;
    if (one) kernels_row_set(rows[r], 0, ncols);
  }
}

/* Fills via classification first: constant tiles cost nothing. */
static int fill_child(const kernels_mask_node *n, int64_t b, int64_t h, int64_t i0, int nrows,
                      int64_t j0, int ncols, kernels_tile_row *rows) {
  int k = kernels_mask_classify(n, b, h, i0, i0 + nrows, j0, j0 + ncols);
  if (k != KERNELS_TILE_MIXED) {
    rows_const(rows, nrows, ncols, k == KERNELS_TILE_ONE);
    return 0;
  }
  return kernels_mask_fill(n, b, h, i0, nrows, j0, ncols, rows);
}

/* Bits [pos, pos + n) (n <= 64) of a bit row of wpr words. */
static uint64_t bits_at(const uint64_t *src, int64_t wpr, int64_t pos, int n) {
  int64_t w = pos >> 6;
  int s = (int)(pos & 63);
  if (w >= wpr) return 0;
  uint64_t v = src[w] >> s;
  if (s && w + 1 < wpr) v |= src[w + 1] << (64 - s);
  return n == 64 ? v : v & (((uint64_t)1 << n) - 1);
}

int kernels_mask_fill(const kernels_mask_node *n, int64_t b, int64_t h, int64_t i0,
                      int nrows, int64_t j0, int ncols, kernels_tile_row *rows) {
  int64_t j1 = j0 + ncols;
  rows_const(rows, nrows, ncols, 0);
  switch (n->kind) {
  case KERNELS_MASK_DENSE:
    rows_const(rows, nrows, ncols, 1);
    return 0;
  case KERNELS_MASK_WINDOW:
    for (int r = 0; r < nrows; r++) {
      int64_t x = i0 + r;
      int64_t a = x - n->u.window.l, e = x + n->u.window.r + 1;
      if (a < j0) a = j0;
      if (e > j1) e = j1;
      if (a < e) kernels_row_set(rows[r], a - j0, e - j0);
    }
    return 0;
  case KERNELS_MASK_GLOBAL: {
    int64_t g = n->u.global.g;
    for (int r = 0; r < nrows; r++) {
      if (i0 + r < g) kernels_row_set(rows[r], 0, ncols);
      else if (g > j0) kernels_row_set(rows[r], 0, g - j0 < ncols ? g - j0 : ncols);
    }
    return 0;
  }
  case KERNELS_MASK_RANDOM_BLOCKS: {
    int64_t bs = n->u.rnd.b;
    for (int r = 0; r < nrows;) {
      int64_t bi = (i0 + r) / bs, rend = (bi + 1) * bs - i0;
      if (rend > nrows) rend = nrows;
      for (int64_t bj = j0 / bs; bj * bs < j1; bj++) {
        if (!block_kept(n->u.rnd.seed, bi, bj, n->u.rnd.p)) continue;
        int64_t a = bj * bs > j0 ? bj * bs : j0, e = (bj + 1) * bs < j1 ? (bj + 1) * bs : j1;
        kernels_row_set(rows[r], a - j0, e - j0);
      }
      for (int q = r + 1; q < rend; q++) {
        rows[q][0] = rows[r][0];
        rows[q][1] = rows[r][1];
      }
      r = (int)rend;
    }
    return 0;
  }
  case KERNELS_MASK_DOCUMENT: {
    int64_t ns;
    const int64_t *p;
    int64_t k = doc_of(n, b, i0, &ns, &p);
    if (k < 0) return 0;
    for (int r = 0; r < nrows; r++) {
      int64_t x = i0 + r;
      while (k < ns && p[k + 1] <= x) k++;
      if (k >= ns) break;
      int64_t a = p[k] > j0 ? p[k] : j0, e = p[k + 1] < j1 ? p[k + 1] : j1;
      if (a < e) kernels_row_set(rows[r], a - j0, e - j0);
    }
    return 0;
  }
  case KERNELS_MASK_DILATED: {
    int64_t d1 = n->u.dilated.d + 1, kmax_all = n->u.dilated.w - 1;
    for (int r = 0; r < nrows; r++) {
      int64_t x = i0 + r;
      if (x < j0) continue;
      int64_t kmax = (x - j0) / d1, num = x - (j1 - 1);
      int64_t kmin = num <= 0 ? 0 : (num + d1 - 1) / d1;
      if (kmax > kmax_all) kmax = kmax_all;
      if (d1 == 1) {
        if (kmin <= kmax) kernels_row_set(rows[r], x - kmax - j0, x - kmin - j0 + 1);
        continue;
      }
      for (int64_t k = kmin; k <= kmax; k++) {
        int64_t c = x - k * d1 - j0;
        rows[r][c >> 6] |= (uint64_t)1 << (c & 63);
      }
    }
    return 0;
  }
  case KERNELS_MASK_TENSOR:
    for (int r = 0; r < nrows; r++) {
      const uint64_t *src = tensor_row(n, b, h, i0 + r);
      if (!src) continue;
      for (int k = 0; k < ncols; k += 64) {
        int64_t pos = j0 + k;
        if (pos >= n->u.tensor.S) break;
        rows[r][k >> 6] = bits_at(src, n->u.tensor.wpr, pos, ncols - k < 64 ? ncols - k : 64);
      }
    }
    return 0;
  case KERNELS_MASK_FN:
    for (int r = 0; r < nrows; r++)
      for (int c = 0; c < ncols; c++) {
        int v = n->u.fn.f(n->u.fn.ud, b, h, i0 + r, j0 + c);
        if (v < 0) return -1;
        if (v) rows[r][c >> 6] |= (uint64_t)1 << (c & 63);
      }
    return 0;
  case KERNELS_MASK_UNION:
  case KERNELS_MASK_INTERSECT:
  case KERNELS_MASK_DIFF: {
    kernels_tile_row tmp[KERNELS_TILE_MAX];
    if (fill_child(n->u.bin.a, b, h, i0, nrows, j0, ncols, rows) ||
        fill_child(n->u.bin.b, b, h, i0, nrows, j0, ncols, tmp))
      return -1;
    for (int r = 0; r < nrows; r++)
      for (int w = 0; w < 2; w++) {
        if (n->kind == KERNELS_MASK_UNION) rows[r][w] |= tmp[r][w];
        else if (n->kind == KERNELS_MASK_INTERSECT) rows[r][w] &= tmp[r][w];
        else rows[r][w] &= ~tmp[r][w];
      }
    return 0;
  }
  default:
    return 0;
  }
}

/* ---------------------------------------------------------------- dims */

static stof_status check_dims(stof_ctx *ctx, const char *who, const kernels_mask_node *n,
                              int64_t B, int64_t H, int64_t Sq, int64_t Sk) {
  switch (n->kind) {
  case KERNELS_MASK_TENSOR: {
    int64_t S = n->u.tensor.S;
    if (S != Sq || S != Sk)
      return stof_ctx_error(ctx, STOF_ERR_ARG,
                            "%s: mask %s is %lld x %lld, the format %lld x %lld", who,
                            n->desc, (long long)S, (long long)S, (long long)Sq,
                            (long long)Sk);
    if (n->u.tensor.nb > 1 && n->u.tensor.nb != B)
      return stof_ctx_error(ctx, STOF_ERR_ARG, "%s: mask %s has B = %lld, the format B = %lld",
                            who, n->desc, (long long)n->u.tensor.nb, (long long)B);
    if (n->u.tensor.nh > 1 && n->u.tensor.nh != H)
      return stof_ctx_error(ctx, STOF_ERR_ARG, "%s: mask %s has H = %lld, the format H = %lld",
                            who, n->desc, (long long)n->u.tensor.nh, (long long)H);
    return STOF_OK;
  }
  case KERNELS_MASK_DOCUMENT:
    if (n->u.doc.nbatch > 1 && n->u.doc.nbatch != B)
      return stof_ctx_error(ctx, STOF_ERR_ARG,
                            "%s: mask %s has %lld batches, the format B = %lld", who, n->desc,
                            (long long)n->u.doc.nbatch, (long long)B);
    return STOF_OK;
  case KERNELS_MASK_UNION:
  case KERNELS_MASK_INTERSECT:
  case KERNELS_MASK_DIFF: {
    stof_status st = check_dims(ctx, who, n->u.bin.a, B, H, Sq, Sk);
    return st ? st : check_dims(ctx, who, n->u.bin.b, B, H, Sq, Sk);
  }
  default:
    return STOF_OK;
  }
}

stof_status kernels_mask_check_dims(stof_ctx *ctx, const char *who, const stof_mask *m,
                                    int64_t B, int64_t H, int64_t Sq, int64_t Sk) {
  return check_dims(ctx, who, m->root, B, H, Sq, Sk);
}
