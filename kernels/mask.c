/*
 * Masks: constructors, combination, element evaluation, tile classification and tile
 * filling (the analytic fast paths the format builder relies on).
 *
 * Invariants: a mask is a handle on an immutable tree of reference-counted nodes; a
 * combination shares its operands' nodes (one reference on each), so combining N masks
 * costs O(N) memory and masks are freed in any order. Every user number is checked against
 * STOF_MASK_MAX_EXTENT when the mask is built, so that the arithmetic below (positions and
 * parameters below 2^40, sums of two of them) never overflows. kernels_mask_classify only
 * answers ZERO or ONE when that holds for every element of the tile; kernels_mask_fill is
 * exact, and agrees with kernels_mask_node_eval everywhere.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels_int.h"

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

/* ---------------------------------------------------------------- nodes */

static kernels_mask_node *node_new(stof_ctx *ctx, kernels_mask_kind kind) {
  kernels_mask_node *n = stof_ctx_alloc(ctx, sizeof *n);
  if (!n) return NULL;
  n->kind = kind;
  n->atom = 1;
  n->cacheable = 1;
  n->depth = 1;
  n->ctx = ctx;
  atomic_init(&n->refs, 1);
  return n;
}

static void node_ref(const kernels_mask_node *n) {
  atomic_fetch_add_explicit(&((kernels_mask_node *)n)->refs, 1, memory_order_relaxed);
}

/* Frees n's own memory (not its operands). */
static void node_destroy(kernels_mask_node *n) {
  stof_ctx *ctx = n->ctx;
  if (n->desc) stof_ctx_dealloc(ctx, (char *)n->desc, strlen(n->desc) + 1);
  if (n->kind == KERNELS_MASK_DOCUMENT) {
    if (n->u.doc.seq_begin)
      stof_ctx_dealloc(ctx, (void *)n->u.doc.seq_begin,
                       (size_t)(n->u.doc.nbatch + 1) * sizeof(int64_t));
    if (n->u.doc.pos)
      stof_ctx_dealloc(ctx, (void *)n->u.doc.pos, (size_t)n->u.doc.npos * sizeof(int64_t));
  } else if (n->kind == KERNELS_MASK_TENSOR && n->u.tensor.bits) {
    stof_ctx_dealloc(ctx, (void *)n->u.tensor.bits,
                     (size_t)(n->u.tensor.nb * n->u.tensor.nh * n->u.tensor.Sq *
                              n->u.tensor.wpr) * sizeof(uint64_t));
  }
  stof_ctx_dealloc(ctx, n, sizeof *n);
}

static int is_binary(const kernels_mask_node *n) {
  return n->kind == KERNELS_MASK_UNION || n->kind == KERNELS_MASK_INTERSECT ||
         n->kind == KERNELS_MASK_DIFF;
}

/* Drops one reference on n; a node no longer referenced goes on *dead. */
static void release(const kernels_mask_node *n, kernels_mask_node **dead) {
  kernels_mask_node *d = (kernels_mask_node *)n;
  if (d && atomic_fetch_sub_explicit(&d->refs, 1, memory_order_acq_rel) == 1) {
    d->next_dead = *dead;
    *dead = d;
  }
}

/* Drops one reference and frees what is no longer referenced, without recursion (a chain
 * of combinations may be thousands deep). */
static void node_unref(const kernels_mask_node *n) {
  kernels_mask_node *dead = NULL;
  release(n, &dead);
  while (dead) {
    kernels_mask_node *d = dead;
    dead = d->next_dead;
    if (is_binary(d)) {
      release(d->u.bin.a, &dead);
      release(d->u.bin.b, &dead);
    }
    node_destroy(d);
  }
}

/* Sets n's description (printf-style); returns n, or NULL (n freed) on NOMEM. */
__attribute__((format(printf, 2, 3)))
static kernels_mask_node *node_desc(kernels_mask_node *n, const char *fmt, ...) {
  if (!n) return NULL;
  va_list ap;
  va_start(ap, fmt);
  int len = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  char *d = len < 0 ? NULL : stof_ctx_alloc(n->ctx, (size_t)len + 1);
  if (!d) {
    node_unref(n);
    return NULL;
  }
  va_start(ap, fmt);
  vsnprintf(d, (size_t)len + 1, fmt, ap);
  va_end(ap);
  if (n->desc) stof_ctx_dealloc(n->ctx, (char *)n->desc, strlen(n->desc) + 1);
  n->desc = d;
  if (!is_binary(n)) n->hash = fnv1a(FNV_BASIS, d, (size_t)len);
  return n;
}

/* p printed short when that reads back exactly, else with every digit. */
static void fmt_double(char *buf, size_t size, double p) {
  snprintf(buf, size, "%.15g", p);
  if (strtod(buf, NULL) != p) snprintf(buf, size, "%.17g", p);
}

static kernels_mask_node *window_node(stof_ctx *ctx, int64_t l, int64_t r) {
  kernels_mask_node *n = node_new(ctx, KERNELS_MASK_WINDOW);
  if (n) {
    n->u.window.l = l;
    n->u.window.r = r;
  }
  return n;
}

static kernels_mask_node *global_node(stof_ctx *ctx, int64_t g) {
  kernels_mask_node *n = node_new(ctx, KERNELS_MASK_GLOBAL);
  if (n) n->u.global.g = g;
  return node_desc(n, "global(%lld)", (long long)g);
}

/* Whether child needs parentheses as operand (left or right) of a parent of kind k. */
static int needs_parens(kernels_mask_kind k, const kernels_mask_node *child, int right) {
  if (child->atom) return 0;
  if (child->kind == k && (k != KERNELS_MASK_DIFF || !right)) return 0;
  return 1;
}

static const char *op_text(kernels_mask_kind k) {
  return k == KERNELS_MASK_UNION ? "|" : k == KERNELS_MASK_INTERSECT ? "&" : "-";
}

/* A combination of a and b, taking over one reference on each (both dropped on failure).
 * Its description is "a op b" with the operands' (short) descriptions, cut past
 * KERNELS_DESC_MAX characters and completed by the node's structural hash. */
static kernels_mask_node *binary_node(stof_ctx *ctx, kernels_mask_kind kind,
                                      const kernels_mask_node *a,
                                      const kernels_mask_node *b) {
  kernels_mask_node *n = a && b ? node_new(ctx, kind) : NULL;
  if (!n) {
    if (a) node_unref(a);
    if (b) node_unref(b);
    return NULL;
  }
  n->atom = 0;
  n->u.bin.a = a;
  n->u.bin.b = b;
  n->varies_b = a->varies_b || b->varies_b;
  n->varies_h = a->varies_h || b->varies_h;
  n->cacheable = a->cacheable && b->cacheable;
  n->depth = 1 + (a->depth > b->depth ? a->depth : b->depth);
  /* kernels_mask_fill: a into the caller's rows, then b into one scratch tile; union and
   * intersection may take the operand that needs more first */
  int na = a->fill_need, nb = b->fill_need;
  int ab = na > nb + 1 ? na : nb + 1, ba = nb > na + 1 ? nb : na + 1;
  n->fill_need = kind != KERNELS_MASK_DIFF && ba < ab ? ba : ab;
  n->hash = mix64(mix64(mix64((uint64_t)kind) ^ a->hash) + b->hash);
  int pa = needs_parens(kind, a, 0), pb = needs_parens(kind, b, 1);
  size_t la = strlen(a->desc), lb = strlen(b->desc);
  size_t len = la + lb + 3 + 2 * (size_t)pa + 2 * (size_t)pb;
  n->cut = len > KERNELS_DESC_MAX || (a->cut && !a->atom) || (b->cut && !b->atom);
  if (len <= KERNELS_DESC_MAX)
    return node_desc(n, "%s%s%s %s %s%s%s", pa ? "(" : "", a->desc, pa ? ")" : "",
                     op_text(kind), pb ? "(" : "", b->desc, pb ? ")" : "");
  /* the head of the text, then the hash: short and still distinct */
  char head[KERNELS_DESC_MAX + 1];
  snprintf(head, sizeof head, "%s%s%s %s %s%s%s", pa ? "(" : "", a->desc, pa ? ")" : "",
           op_text(kind), pb ? "(" : "", b->desc, pb ? ")" : "");
  head[KERNELS_DESC_MAX - 24] = 0;
  return node_desc(n, "%s ... #%016llx", head, (unsigned long long)n->hash);
}

/* ---------------------------------------------------------------- construction */

/* Completes a construction: wraps root (a reference taken over) in a handle. */
static stof_status mask_end(stof_ctx *ctx, const kernels_mask_node *root, stof_mask **out) {
  if (!root) return STOF_ERR_NOMEM;
  stof_mask *m = stof_ctx_alloc(ctx, sizeof *m);
  if (!m) {
    node_unref(root);
    return STOF_ERR_NOMEM;
  }
  m->ctx = ctx;
  m->root = root;
  m->cacheable = root->cacheable;
  *out = m;
  return STOF_OK;
}

void stof_mask_free(stof_mask *m) {
  if (!m) return;
  node_unref(m->root);
  stof_ctx_dealloc(m->ctx, m, sizeof *m);
}

static kernels_mask_node *longformer_node(stof_ctx *ctx, int64_t w, int64_t g) {
  kernels_mask_node *win = node_desc(window_node(ctx, w, w), "sliding(%lld)", (long long)w);
  kernels_mask_node *n = binary_node(ctx, KERNELS_MASK_UNION, win, global_node(ctx, g));
  if (n) n->atom = 1;
  return node_desc(n, "longformer(%lld, %lld)", (long long)w, (long long)g);
}

static kernels_mask_node *random_node(stof_ctx *ctx, int64_t b, double p, uint64_t seed) {
  kernels_mask_node *n = node_new(ctx, KERNELS_MASK_RANDOM_BLOCKS);
  if (!n) return NULL;
  n->u.rnd.b = b;
  n->u.rnd.p = p;
  n->u.rnd.seed = seed;
  char ps[40];
  fmt_double(ps, sizeof ps, p);
  return node_desc(n, "random_blocks(%lld, %s, %llu)", (long long)b, ps,
                   (unsigned long long)seed);
}

/* A parameter in [lo, STOF_MASK_MAX_EXTENT]: "window: r = 9223372036854775807 is too
 * large (at most 2^40)". */
static stof_status check_param(stof_ctx *ctx, const char *who, const char *what, int64_t v,
                               int64_t lo) {
  if (v < lo) {
    if (lo == 0)
      return stof_ctx_error(ctx, STOF_ERR_ARG, "%s: %s = %lld is negative", who, what,
                            (long long)v);
    return stof_ctx_error(ctx, STOF_ERR_ARG, "%s: %s = %lld must be >= %lld", who, what,
                          (long long)v, (long long)lo);
  }
  if (v > STOF_MASK_MAX_EXTENT)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "%s: %s = %lld is too large (at most 2^40 = %lld)",
                          who, what, (long long)v, (long long)STOF_MASK_MAX_EXTENT);
  return STOF_OK;
}

static stof_status check_nonneg(stof_ctx *ctx, const char *who, const char *what, int64_t v) {
  return check_param(ctx, who, what, v, 0);
}

static stof_status check_block(stof_ctx *ctx, const char *who, int64_t b, double p) {
  if (b <= 0)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "%s: block size b = %lld must be >= 1", who,
                          (long long)b);
  stof_status st = check_param(ctx, who, "block size b", b, 1);
  if (st) return st;
  if (!(p >= 0 && p <= 1))
    return stof_ctx_error(ctx, STOF_ERR_ARG, "%s: probability p = %g is outside [0, 1]", who,
                          p);
  return STOF_OK;
}

stof_status stof_mask_dense(stof_ctx *ctx, stof_mask **out) {
  return mask_end(ctx, node_desc(node_new(ctx, KERNELS_MASK_DENSE), "dense()"), out);
}

stof_status stof_mask_causal(stof_ctx *ctx, stof_mask **out) {
  return mask_end(ctx, node_desc(window_node(ctx, KERNELS_WINDOW_INF, 0), "causal()"), out);
}

stof_status stof_mask_window(stof_ctx *ctx, int64_t l, int64_t r, stof_mask **out) {
  stof_status st;
  if ((st = check_nonneg(ctx, "window", "l", l)) || (st = check_nonneg(ctx, "window", "r", r)))
    return st;
  return mask_end(ctx, node_desc(window_node(ctx, l, r), "window(%lld, %lld)", (long long)l,
                                 (long long)r), out);
}

stof_status stof_mask_sliding(stof_ctx *ctx, int64_t w, stof_mask **out) {
  stof_status st;
  if ((st = check_nonneg(ctx, "sliding", "w", w))) return st;
  return mask_end(ctx, node_desc(window_node(ctx, w, w), "sliding(%lld)", (long long)w), out);
}

stof_status stof_mask_causal_sliding(stof_ctx *ctx, int64_t w, stof_mask **out) {
  if (w < 1)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "causal_sliding: w = %lld must be >= 1",
                          (long long)w);
  stof_status st;
  if ((st = check_param(ctx, "causal_sliding", "w", w, 1))) return st;
  return mask_end(ctx, node_desc(window_node(ctx, w - 1, 0), "causal_sliding(%lld)",
                                 (long long)w), out);
}

stof_status stof_mask_global(stof_ctx *ctx, int64_t g, stof_mask **out) {
  stof_status st;
  if ((st = check_nonneg(ctx, "global", "g", g))) return st;
  return mask_end(ctx, global_node(ctx, g), out);
}

stof_status stof_mask_longformer(stof_ctx *ctx, int64_t w, int64_t g, stof_mask **out) {
  stof_status st;
  if ((st = check_nonneg(ctx, "longformer", "w", w)) ||
      (st = check_nonneg(ctx, "longformer", "g", g)))
    return st;
  return mask_end(ctx, longformer_node(ctx, w, g), out);
}

stof_status stof_mask_random_blocks(stof_ctx *ctx, int64_t b, double p, uint64_t seed,
                                    stof_mask **out) {
  stof_status st;
  if ((st = check_block(ctx, "random_blocks", b, p))) return st;
  return mask_end(ctx, random_node(ctx, b, p, seed), out);
}

stof_status stof_mask_bigbird(stof_ctx *ctx, int64_t w, int64_t g, int64_t b, double p,
                              uint64_t seed, stof_mask **out) {
  stof_status st;
  if ((st = check_nonneg(ctx, "bigbird", "w", w)) ||
      (st = check_nonneg(ctx, "bigbird", "g", g)) || (st = check_block(ctx, "bigbird", b, p)))
    return st;
  kernels_mask_node *n = binary_node(ctx, KERNELS_MASK_UNION, longformer_node(ctx, w, g),
                                     random_node(ctx, b, p, seed));
  if (n) n->atom = 1;
  char ps[40];
  fmt_double(ps, sizeof ps, p);
  return mask_end(ctx, node_desc(n, "bigbird(%lld, %lld, %lld, %s, %llu)", (long long)w,
                                 (long long)g, (long long)b, ps, (unsigned long long)seed),
                  out);
}

stof_status stof_mask_dilated(stof_ctx *ctx, int64_t w, int64_t d, stof_mask **out) {
  if (w < 1)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "dilated: w = %lld must be >= 1", (long long)w);
  stof_status st;
  if ((st = check_param(ctx, "dilated", "w", w, 1)) || (st = check_nonneg(ctx, "dilated", "d", d)))
    return st;
  kernels_mask_node *n = node_new(ctx, KERNELS_MASK_DILATED);
  if (n) {
    n->u.dilated.w = w;
    n->u.dilated.d = d;
  }
  return mask_end(ctx, node_desc(n, "dilated(%lld, %lld)", (long long)w, (long long)d), out);
}

/* Document masks: one path for both constructors. */
static stof_status document_new(stof_ctx *ctx, const char *who, int64_t nbatch,
                                const int64_t *nseq, const int64_t *lengths,
                                stof_mask **out) {
  if (nbatch < 1)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "%s: no batches (nbatch = %lld)", who,
                          (long long)nbatch);
  if (nbatch > STOF_MASK_MAX_SEQS)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "%s: %lld batches (at most 2^24 = %lld)", who,
                          (long long)nbatch, (long long)STOF_MASK_MAX_SEQS);
  int64_t total = 0;
  for (int64_t bb = 0; bb < nbatch; bb++) {
    if (nseq[bb] < 1)
      return stof_ctx_error(ctx, STOF_ERR_ARG,
                            "%s: empty lengths for batch %lld (nseq[%lld] = %lld)", who,
                            (long long)bb, (long long)bb, (long long)nseq[bb]);
    if (nseq[bb] > STOF_MASK_MAX_SEQS || (total += nseq[bb]) > STOF_MASK_MAX_SEQS)
      return stof_ctx_error(ctx, STOF_ERR_ARG, "%s: more than 2^24 = %lld sequences", who,
                            (long long)STOF_MASK_MAX_SEQS);
  }
  if (!lengths)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "%s: lengths is NULL", who);
  for (int64_t bb = 0, k = 0; bb < nbatch; bb++) {
    int64_t sum = 0;
    for (int64_t q = 0; q < nseq[bb]; q++, k++) {
      if (lengths[k] <= 0)
        return stof_ctx_error(ctx, STOF_ERR_ARG, "%s: lengths[%lld] = %lld must be > 0", who,
                              (long long)k, (long long)lengths[k]);
      /* sum and lengths[k] are both at most 2^40 here: the sum cannot overflow */
      if (lengths[k] > STOF_MASK_MAX_EXTENT || (sum += lengths[k]) > STOF_MASK_MAX_EXTENT)
        return stof_ctx_error(ctx, STOF_ERR_ARG,
                              "%s: lengths[%lld] = %lld: the lengths%s sum past 2^40 = %lld",
                              who, (long long)k, (long long)lengths[k],
                              nbatch > 1 ? " of a batch" : "", (long long)STOF_MASK_MAX_EXTENT);
    }
  }

  kernels_mask_node *n = node_new(ctx, KERNELS_MASK_DOCUMENT);
  if (!n) return STOF_ERR_NOMEM;
  int64_t *seq_begin = stof_ctx_alloc(ctx, (size_t)(nbatch + 1) * sizeof *seq_begin);
  int64_t *pos = seq_begin ? stof_ctx_alloc(ctx, (size_t)(total + nbatch) * sizeof *pos) : NULL;
  n->u.doc.nbatch = nbatch;
  n->u.doc.seq_begin = seq_begin;
  n->u.doc.pos = pos;
  n->u.doc.npos = total + nbatch;
  if (!pos) {
    node_unref(n);
    return STOF_ERR_NOMEM;
  }
  uint64_t h = FNV_BASIS;
  for (int64_t bb = 0, k = 0; bb < nbatch; bb++) {
    seq_begin[bb + 1] = seq_begin[bb] + nseq[bb];
    int64_t *p = pos + seq_begin[bb] + bb;
    p[0] = 0;
    for (int64_t q = 0; q < nseq[bb]; q++, k++) p[q + 1] = p[q] + lengths[k];
    h = fnv1a(h, &nseq[bb], sizeof nseq[bb]);
  }
  h = fnv1a(h, lengths, (size_t)total * sizeof *lengths);
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
  if (stof_buf_finish(&s, &d)) {
    node_unref(n);
    return STOF_ERR_NOMEM;
  }
  n = node_desc(n, "%s", d);
  stof_ctx_dealloc(ctx, d, strlen(d) + 1);
  return mask_end(ctx, n, out);
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
  if (S > STOF_MASK_MAX_EXTENT)
    return stof_ctx_error(ctx, STOF_ERR_ARG,
                          "document_random: S = %lld is too large (at most 2^40 = %lld)",
                          (long long)S, (long long)STOF_MASK_MAX_EXTENT);
  if (lo < 1 || hi < lo)
    return stof_ctx_error(ctx, STOF_ERR_ARG,
                          "document_random: lengths range [%lld, %lld] is empty or below 1",
                          (long long)lo, (long long)hi);
  /* every length but the last is >= lo: at most S / lo + 1 of them */
  int64_t cap = S / lo + 1, n = 0, sum = 0;
  if (cap > STOF_MASK_MAX_SEQS)
    return stof_ctx_error(ctx, STOF_ERR_ARG,
                          "document_random: S = %lld with lengths from %lld gives up to %lld "
                          "sequences (at most 2^24 = %lld)",
                          (long long)S, (long long)lo, (long long)cap,
                          (long long)STOF_MASK_MAX_SEQS);
  int64_t *len = stof_ctx_alloc(ctx, (size_t)cap * sizeof *len);
  if (!len) return STOF_ERR_NOMEM;
  uint64_t state = seed, span = (uint64_t)hi - (uint64_t)lo + 1; /* <= 2^63 */
  while (sum < S && n < cap) {
    state += 0x9e3779b97f4a7c15ull;
    uint64_t r = mix64(state) % span;
    int64_t rest = S - sum; /* lo + r may pass it (or int64): then the last length is rest */
    int64_t l = lo >= rest || r >= (uint64_t)(rest - lo) ? rest : lo + (int64_t)r;
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
                          "from_tensor: rank %d tensor; a mask is [Sq, Sk] or [B, H, Sq, Sk]",
                          t->ndim);
  int r = t->ndim;
  int64_t nb = r == 4 ? t->shape[0] : 1, nh = r == 4 ? t->shape[1] : 1;
  int64_t Sq = t->shape[r - 2], Sk = t->shape[r - 1];
  if (nb < 1 || nh < 1 || Sq < 1 || Sk < 1)
    return stof_ctx_error(ctx, STOF_ERR_SHAPE, "from_tensor: empty tensor (an extent is 0)");
  int64_t wpr = (Sk + 63) / 64, nbh, rows, words;
  if (Sq > ((int64_t)1 << 20) || Sk > ((int64_t)1 << 20) ||
      __builtin_mul_overflow(nb, nh, &nbh) || nbh > ((int64_t)1 << 20) ||
      __builtin_mul_overflow(nbh, Sq, &rows) || __builtin_mul_overflow(rows, wpr, &words) ||
      words > ((int64_t)1 << 30))
    return stof_ctx_error(ctx, STOF_ERR_ARG,
                          "from_tensor: tensor too large for a mask (Sq, Sk at most 2^20, "
                          "B x H at most 2^20, B x H x Sq x Sk at most 2^36 bits)");

  kernels_mask_node *n = node_new(ctx, KERNELS_MASK_TENSOR);
  if (!n) return STOF_ERR_NOMEM;
  uint64_t *bits = stof_ctx_alloc(ctx, (size_t)words * sizeof *bits);
  if (!bits) {
    node_unref(n);
    return STOF_ERR_NOMEM;
  }
  int64_t s0 = r == 4 ? t->strides[0] : 0, s1 = r == 4 ? t->strides[1] : 0;
  int64_t si = t->strides[r - 2], sj = t->strides[r - 1];
  size_t es = stof_dtype_size(t->dtype);
  const char *base = t->data;
  for (int64_t bb = 0; bb < nb; bb++)
    for (int64_t hh = 0; hh < nh; hh++)
      for (int64_t i = 0; i < Sq; i++) {
        uint64_t *row = bits + ((bb * nh + hh) * Sq + i) * wpr;
        const char *src = base + (bb * s0 + hh * s1 + i * si) * (int64_t)es;
        for (int64_t j = 0; j < Sk; j++) {
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
  n->u.tensor.Sq = Sq;
  n->u.tensor.Sk = Sk;
  n->u.tensor.wpr = wpr;
  n->u.tensor.bits = bits;
  n->varies_b = nb > 1;
  n->varies_h = nh > 1;
  uint64_t h = fnv1a(FNV_BASIS, t->shape, (size_t)r * sizeof t->shape[0]);
  h = fnv1a(h, bits, (size_t)words * sizeof *bits);
  if (r == 4)
    n = node_desc(n, "from_tensor(%lldx%lldx%lldx%lld, #%016llx)", (long long)nb,
                  (long long)nh, (long long)Sq, (long long)Sk, (unsigned long long)h);
  else
    n = node_desc(n, "from_tensor(%lldx%lld, #%016llx)", (long long)Sq, (long long)Sk,
                  (unsigned long long)h);
  return mask_end(ctx, n, out);
}

stof_status stof_mask_fn(stof_ctx *ctx, stof_mask_pred f, void *ud, const char *name,
                         int varies_b, int varies_h, stof_mask **out) {
  if (!f) return stof_ctx_error(ctx, STOF_ERR_ARG, "fn: predicate is NULL");
  kernels_mask_node *n = node_new(ctx, KERNELS_MASK_FN);
  if (n) {
    n->u.fn.f = f;
    n->u.fn.ud = ud;
    n->varies_b = varies_b != 0;
    n->varies_h = varies_h != 0;
    n->cacheable = 0;
  }
  return mask_end(ctx, node_desc(n, "fn(%s)", name ? name : "?"), out);
}

/* ---------------------------------------------------------------- combination */

static stof_status combine(const char *who, kernels_mask_kind kind, const stof_mask *a,
                           const stof_mask *b, stof_mask **out) {
  if (!a || !b) {
    stof_ctx *ctx = a ? a->ctx : b ? b->ctx : NULL;
    if (ctx) return stof_ctx_error(ctx, STOF_ERR_ARG, "%s: operand is NULL", who);
    return STOF_ERR_ARG;
  }
  if (a->ctx != b->ctx)
    return stof_ctx_error(a->ctx, STOF_ERR_ARG, "%s: operands come from different contexts",
                          who);
  int64_t da = a->root->depth, db = b->root->depth, depth = 1 + (da > db ? da : db);
  if (depth > STOF_MASK_MAX_DEPTH)
    return stof_ctx_error(a->ctx, STOF_ERR_ARG,
                          "%s: the result would be %lld combinations deep (at most %d): "
                          "combine many masks as a balanced tree, (a | b) | (c | d)",
                          who, (long long)depth - 1, STOF_MASK_MAX_DEPTH - 1);
  node_ref(a->root);
  node_ref(b->root);
  return mask_end(a->ctx, binary_node(a->ctx, kind, a->root, b->root), out);
}

stof_status stof_mask_union(const stof_mask *a, const stof_mask *b, stof_mask **out) {
  return combine("union", KERNELS_MASK_UNION, a, b, out);
}

stof_status stof_mask_intersection(const stof_mask *a, const stof_mask *b, stof_mask **out) {
  return combine("intersection", KERNELS_MASK_INTERSECT, a, b, out);
}

stof_status stof_mask_difference(const stof_mask *a, const stof_mask *b, stof_mask **out) {
  return combine("difference", KERNELS_MASK_DIFF, a, b, out);
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
    if (S < 1 || S > STOF_MASK_MAX_EXTENT)
      return stof_ctx_error(ctx, STOF_ERR_ARG,
                            "mask suite: document: S = %lld must be in [1, 2^40 = %lld]",
                            (long long)S, (long long)STOF_MASK_MAX_EXTENT);
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

/* The exact text of n: its stored description unless that was cut. */
static void node_key(const kernels_mask_node *n, stof_buf *b) {
  if (!is_binary(n) || n->atom || !n->cut) {
    stof_buf_puts(b, n->desc);
    return;
  }
  int pa = needs_parens(n->kind, n->u.bin.a, 0), pb = needs_parens(n->kind, n->u.bin.b, 1);
  if (pa) stof_buf_puts(b, "(");
  node_key(n->u.bin.a, b);
  stof_buf_printf(b, "%s %s %s", pa ? ")" : "", op_text(n->kind), pb ? "(" : "");
  node_key(n->u.bin.b, b);
  if (pb) stof_buf_puts(b, ")");
}

void kernels_mask_key(const stof_mask *m, stof_buf *b) { node_key(m->root, b); }

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
  if (bb < 0 || bb >= nb || hh < 0 || hh >= nh || i < 0 || i >= n->u.tensor.Sq) return NULL;
  return n->u.tensor.bits + ((bb * nh + hh) * n->u.tensor.Sq + i) * n->u.tensor.wpr;
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
    if (!row || j >= n->u.tensor.Sk) return 0;
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
    if (bb < 0 || bb >= nb || hh < 0 || hh >= nh || i0 >= n->u.tensor.Sq ||
        j0 >= n->u.tensor.Sk)
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

static int fill_rec(const kernels_mask_node *n, int64_t b, int64_t h, int64_t i0, int nrows,
                    int64_t j0, int ncols, kernels_tile_row *rows, kernels_tile_row *scratch);

/* Fills a leaf via classification first (constant tiles cost nothing); a combination
 * directly (classifying it would walk its whole tree once more at every level). */
static int fill_child(const kernels_mask_node *n, int64_t b, int64_t h, int64_t i0, int nrows,
                      int64_t j0, int ncols, kernels_tile_row *rows,
                      kernels_tile_row *scratch) {
  if (!is_binary(n)) {
    int k = kernels_mask_classify(n, b, h, i0, i0 + nrows, j0, j0 + ncols);
    if (k != KERNELS_TILE_MIXED) {
      rows_const(rows, nrows, ncols, k == KERNELS_TILE_ONE);
      return 0;
    }
  }
  return fill_rec(n, b, h, i0, nrows, j0, ncols, rows, scratch);
}

/* Whether every row is all zeros (want 0) or all ones over ncols columns (want 1). */
static int rows_are(const kernels_tile_row *rows, int nrows, int ncols, int want) {
  uint64_t full[2] = {0, 0};
  kernels_row_set(full, 0, ncols);
  for (int r = 0; r < nrows; r++)
    for (int w = 0; w < 2; w++)
      if (rows[r][w] != (want ? full[w] : 0)) return 0;
  return 1;
}

/* A combination: the operand that needs more scratch fills the caller's rows (union and
 * intersection commute), the other one the first scratch tile, its own scratch after it.
 * Operands that cannot change the result are skipped. */
static int fill_binary(const kernels_mask_node *n, int64_t b, int64_t h, int64_t i0,
                       int nrows, int64_t j0, int ncols, kernels_tile_row *rows,
                       kernels_tile_row *scratch) {
  const kernels_mask_node *first = n->u.bin.a, *second = n->u.bin.b;
  if (n->kind != KERNELS_MASK_DIFF && second->fill_need > first->fill_need) {
    first = n->u.bin.b;
    second = n->u.bin.a;
  }
  if (fill_child(first, b, h, i0, nrows, j0, ncols, rows, scratch)) return -1;
  if (n->kind == KERNELS_MASK_UNION ? rows_are(rows, nrows, ncols, 1)
                                    : rows_are(rows, nrows, ncols, 0))
    return 0;
  kernels_tile_row *tmp = scratch;
  int st = fill_child(second, b, h, i0, nrows, j0, ncols, tmp, scratch + KERNELS_TILE_MAX);
  if (st) return st;
  for (int r = 0; r < nrows; r++)
    for (int w = 0; w < 2; w++) {
      if (n->kind == KERNELS_MASK_UNION) rows[r][w] |= tmp[r][w];
      else if (n->kind == KERNELS_MASK_INTERSECT) rows[r][w] &= tmp[r][w];
      else rows[r][w] &= ~tmp[r][w];
    }
  return 0;
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

/* Scratch tiles a fill may keep on the stack; deeper combinations allocate theirs. */
#define FILL_STACK_TILES 4

int kernels_mask_fill(const kernels_mask_node *n, int64_t b, int64_t h, int64_t i0,
                      int nrows, int64_t j0, int ncols, kernels_tile_row *rows) {
  if (n->fill_need <= FILL_STACK_TILES) {
    kernels_tile_row scratch[FILL_STACK_TILES * KERNELS_TILE_MAX];
    return fill_rec(n, b, h, i0, nrows, j0, ncols, rows, scratch);
  }
  size_t size = (size_t)n->fill_need * KERNELS_TILE_MAX * sizeof(kernels_tile_row);
  kernels_tile_row *scratch = stof_ctx_alloc(n->ctx, size);
  if (!scratch) return -2;
  int st = fill_rec(n, b, h, i0, nrows, j0, ncols, rows, scratch);
  stof_ctx_dealloc(n->ctx, scratch, size);
  return st;
}

static int fill_rec(const kernels_mask_node *n, int64_t b, int64_t h, int64_t i0, int nrows,
                    int64_t j0, int ncols, kernels_tile_row *rows, kernels_tile_row *scratch) {
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
        if (pos >= n->u.tensor.Sk) break;
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
  case KERNELS_MASK_DIFF:
    return fill_binary(n, b, h, i0, nrows, j0, ncols, rows, scratch);
  default:
    return 0;
  }
}

/* ---------------------------------------------------------------- dims */

static stof_status check_dims(stof_ctx *ctx, const char *who, const kernels_mask_node *n,
                              int64_t B, int64_t H, int64_t Sq, int64_t Sk) {
  switch (n->kind) {
  case KERNELS_MASK_TENSOR: {
    if (n->u.tensor.Sq != Sq || n->u.tensor.Sk != Sk)
      return stof_ctx_error(ctx, STOF_ERR_ARG,
                            "%s: mask %s is %lld x %lld, the format %lld x %lld", who,
                            n->desc, (long long)n->u.tensor.Sq, (long long)n->u.tensor.Sk,
                            (long long)Sq, (long long)Sk);
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
