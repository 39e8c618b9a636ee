/*
 * The two-level mask format built on the GPU (the kernels are in mask_format.cu): the
 * host side. A mask tree becomes a flat postfix program that the device evaluates; the
 * builder compiles and loads the kernels once, runs them, and copies the result back into
 * an ordinary host stof_mask_format, identical to what stof_mask_format_build gives (every
 * array and every statistic but build_ms).
 *
 * Invariants: from_tensor and fn masks are never evaluated here (STOF_ERR_UNSUPPORTED:
 * callers fall back to the CPU builder); a program has at most MF_MAX_NODES nodes and
 * needs at most MF_MAX_DEPTH stack slots; every host allocation goes through the context
 * and every device allocation is freed before a build returns.
 *
 * mask_format.cu is included below as plain C (its kernels hide behind __CUDACC__), so
 * the host-side program interpreter that tests check against stof_mask_eval is the
 * device's own evaluator.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels_int.h"

#include "mask_format.cu"

/* Past this, a window, global, block size or dilation means "never cuts" for positions
 * below 2^31 (the device's range), and arithmetic on it cannot overflow. */
#define PROG_CLAMP ((int64_t)1 << 60)

static const char *const who_build = "mask_format_build_gpu";


/* ---------------------------------------------------------------- the program */

struct kernels_format_prog {
  stof_ctx *ctx;
  int nnode, depth;
  mf_node *node;  /* [nnode], postfix */
  int64_t ndoc;
  long long *doc; /* [ndoc]: seq_begin and positions of every document node */
};

static int commutes(kernels_mask_kind k) {
  return k == KERNELS_MASK_UNION || k == KERNELS_MASK_INTERSECT;
}

/* Stack slots n's program needs (the operand that needs more goes first where the
 * operation commutes), or -1 when n holds a kind the device cannot evaluate (*bad gets
 * the first). Adds n's nodes to *nnode and its document words to *ndoc. */
static int64_t prog_measure(const kernels_mask_node *n, int64_t *nnode, int64_t *ndoc,
                            const kernels_mask_node **bad) {
  switch (n->kind) {
  case KERNELS_MASK_DENSE:
  case KERNELS_MASK_WINDOW:
  case KERNELS_MASK_GLOBAL:
  case KERNELS_MASK_RANDOM_BLOCKS:
  case KERNELS_MASK_DILATED:
    (*nnode)++;
    return 1;
  case KERNELS_MASK_DOCUMENT:
    (*nnode)++;
    *ndoc += n->u.doc.nbatch + 1 + n->u.doc.npos;
    return 1;
  case KERNELS_MASK_UNION:
  case KERNELS_MASK_INTERSECT:
  case KERNELS_MASK_DIFF: {
    int64_t a = prog_measure(n->u.bin.a, nnode, ndoc, bad);
    if (a < 0) return -1;
    int64_t c = prog_measure(n->u.bin.b, nnode, ndoc, bad);
    if (c < 0) return -1;
    (*nnode)++;
    if (!commutes(n->kind)) return a > c + 1 ? a : c + 1;
    int64_t hi = a > c ? a : c, lo = a > c ? c : a;
    return hi > lo + 1 ? hi : lo + 1;
  }
  default:
    *bad = n;
    return -1;
  }
}

static int64_t prog_need(const kernels_mask_node *n) {
  int64_t nn = 0, nd = 0;
  const kernels_mask_node *bad = NULL;
  return prog_measure(n, &nn, &nd, &bad);
}

static long long clamp60(int64_t v) { return v > PROG_CLAMP ? PROG_CLAMP : v; }

/* Appends n's program at p->node[*k], its document data at p->doc[*dk]. */
static void prog_emit(const kernels_mask_node *n, kernels_format_prog *p, int *k, int64_t *dk) {
  if (n->kind == KERNELS_MASK_UNION || n->kind == KERNELS_MASK_INTERSECT ||
      n->kind == KERNELS_MASK_DIFF) {
    const kernels_mask_node *first = n->u.bin.a, *second = n->u.bin.b;
    if (commutes(n->kind) && prog_need(second) > prog_need(first)) {
      first = n->u.bin.b;
      second = n->u.bin.a;
    }
    prog_emit(first, p, k, dk);
    prog_emit(second, p, k, dk);
  }
  mf_node *o = &p->node[(*k)++];
  memset(o, 0, sizeof *o);
  switch (n->kind) {
  case KERNELS_MASK_DENSE:
    o->kind = MF_DENSE;
    break;
  case KERNELS_MASK_WINDOW:
    o->kind = MF_WINDOW;
    o->a = -clamp60(n->u.window.l);
    o->b = clamp60(n->u.window.r);
    break;
  case KERNELS_MASK_GLOBAL:
    o->kind = MF_GLOBAL;
    o->a = clamp60(n->u.global.g);
    break;
  case KERNELS_MASK_RANDOM_BLOCKS:
    o->kind = MF_RANDOM;
    o->a = clamp60(n->u.rnd.b);
    o->seed = mf_mix64(n->u.rnd.seed);
    o->p = n->u.rnd.p;
    break;
  case KERNELS_MASK_DOCUMENT: {
    int64_t nb = n->u.doc.nbatch;
    o->kind = MF_DOC;
    o->a = *dk;
    o->b = nb;
    o->c = *dk + nb + 1;
    for (int64_t x = 0; x <= nb; x++) p->doc[(*dk)++] = n->u.doc.seq_begin[x];
    for (int64_t x = 0; x < n->u.doc.npos; x++) p->doc[(*dk)++] = n->u.doc.pos[x];
    break;
  }
  case KERNELS_MASK_DILATED: {
    /* kernels/mask.c's span, with d clamped (the same mask below 2^60) */
    int64_t d1 = clamp60(n->u.dilated.d) + 1, w1 = n->u.dilated.w - 1;
    o->kind = MF_DILATED;
    o->a = d1;
    o->b = w1 > KERNELS_WINDOW_INF / d1 ? KERNELS_WINDOW_INF : w1 * d1;
    break;
  }
  case KERNELS_MASK_UNION:
    o->kind = MF_UNION;
    break;
  case KERNELS_MASK_INTERSECT:
    o->kind = MF_INTERSECT;
    break;
  default: /* KERNELS_MASK_DIFF (prog_measure refused every other kind) */
    o->kind = MF_DIFF;
    break;
  }
}

/* Whether mask has a program; records why not (naming who) when ctx is not NULL. */
static stof_status prog_check(stof_ctx *ctx, const char *who, const stof_mask *mask,
                              int64_t *nnode, int64_t *ndoc, int64_t *depth) {
  const kernels_mask_node *bad = NULL;
  *nnode = 0, *ndoc = 0;
  *depth = prog_measure(mask->root, nnode, ndoc, &bad);
  if (*depth < 0) {
    if (!ctx) return STOF_ERR_UNSUPPORTED;
    return stof_ctx_error(ctx, STOF_ERR_UNSUPPORTED,
                          "%s: the mask holds %s, which only the CPU builder evaluates (mask "
                          "%s)", who, bad->desc ? bad->desc : "?", stof_mask_description(mask));
  }
  if (*nnode > MF_MAX_NODES || *depth > MF_MAX_DEPTH) {
    if (!ctx) return STOF_ERR_UNSUPPORTED;
    return stof_ctx_error(ctx, STOF_ERR_UNSUPPORTED,
                          "%s: a program of %lld nodes and depth %lld (the GPU evaluates "
                          "at most %d nodes of depth %d) for mask %s",
                          who, (long long)*nnode, (long long)*depth, MF_MAX_NODES,
                          MF_MAX_DEPTH, stof_mask_description(mask));
  }
  return STOF_OK;
}

int stof_mask_format_gpu_supported(const stof_mask *mask) {
  int64_t nnode, ndoc, depth;
  return mask && prog_check(NULL, NULL, mask, &nnode, &ndoc, &depth) == STOF_OK;
}

void kernels_format_prog_free(kernels_format_prog *p) {
  if (!p) return;
  stof_ctx *ctx = p->ctx;
  if (p->node) stof_ctx_dealloc(ctx, p->node, (size_t)p->nnode * sizeof *p->node);
  if (p->doc) stof_ctx_dealloc(ctx, p->doc, (size_t)p->ndoc * sizeof *p->doc);
  stof_ctx_dealloc(ctx, p, sizeof *p);
}

static stof_status prog_new(stof_ctx *ctx, const char *who, const stof_mask *mask,
                            kernels_format_prog **out) {
  int64_t nnode, ndoc, depth;
  stof_status st = prog_check(ctx, who, mask, &nnode, &ndoc, &depth);
  if (st) return st;
  kernels_format_prog *p = stof_ctx_alloc(ctx, sizeof *p);
  if (!p) return STOF_ERR_NOMEM;
  p->ctx = ctx;
  p->nnode = (int)nnode;
  p->depth = (int)depth;
  p->node = stof_ctx_alloc(ctx, (size_t)nnode * sizeof *p->node);
  if (ndoc) p->doc = stof_ctx_alloc(ctx, (size_t)ndoc * sizeof *p->doc);
  p->ndoc = ndoc;
  if (!p->node || (ndoc && !p->doc)) {
    kernels_format_prog_free(p);
    return STOF_ERR_NOMEM;
  }
  int k = 0;
  int64_t dk = 0;
  prog_emit(mask->root, p, &k, &dk);
  if (k != p->nnode || dk != p->ndoc) {
    kernels_format_prog_free(p);
    return stof_ctx_error(ctx, STOF_ERR_INTERNAL, "%s: program of %s: %d nodes written, %d "
                          "counted", who, stof_mask_description(mask), k, p->nnode);
  }
  *out = p;
  return STOF_OK;
}

stof_status kernels_format_prog_new(stof_ctx *ctx, const stof_mask *mask,
                                    kernels_format_prog **out) {
  if (!mask || !out)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "mask_format_prog: mask or out is NULL");
  return prog_new(ctx, "mask_format_prog", mask, out);
}

int kernels_format_prog_nnode(const kernels_format_prog *p) { return p->nnode; }
int kernels_format_prog_depth(const kernels_format_prog *p) { return p->depth; }

int kernels_format_prog_eval(const kernels_format_prog *p, int64_t b, int64_t i, int64_t j) {
  if (i < 0 || j < 0) return 0;
  unsigned v = mf_byte(p->node, p->nnode, p->doc, b, i, j - (j & 7));
  return (int)((v >> (j & 7)) & 1);
}

uint64_t kernels_format_prog_word(const kernels_format_prog *p, int64_t b, int64_t Sq,
                                  int64_t Sk, int64_t i0, int64_t j0) {
  return mf_word(p->node, p->nnode, p->doc, b, Sq, Sk, i0, j0);
}

int kernels_format_prog_classify(const kernels_format_prog *p, int64_t b, int64_t i0,
                                 int64_t i1, int64_t j0, int64_t j1) {
  return mf_classify(p->node, p->nnode, p->doc, b, i0, i1, j0, j1);
}

uint64_t kernels_format_prog_word_fast(const kernels_format_prog *p, int64_t b, int64_t Sq,
                                       int64_t Sk, int64_t i0, int64_t j0) {
  return mf_word_fast(p->node, p->nnode, p->doc, b, Sq, Sk, i0, j0);
}

int kernels_format_prog_wants_chunks(const kernels_format_prog *p) {
  for (int k = 0; k < p->nnode; k++) {
    long long kind = p->node[k].kind;
    if (kind == MF_GLOBAL || kind == MF_RANDOM || kind == MF_DOC) return 1;
  }
  return 0;
}

int64_t kernels_format_chunk_cols(int64_t ncol, int T) { return mf_chunk_cols(ncol, T); }

int64_t kernels_format_chunk_unit(int T) { return mf_chunk_unit(T); }

int kernels_format_word_index(int x, int t, int wpt) { return mf_word_index(x, t, wpt); }

/* ---------------------------------------------------------------- arguments */

typedef kernels_format_dims dims;

/* The CPU builder's checks (same statuses and messages), then the GPU's own limits. */
static stof_status check_args(stof_ctx *ctx, const char *who, const stof_mask *mask,
                              const void *out, int64_t B, int64_t H, int64_t Sq, int64_t Sk,
                              int T, dims *d) {
  stof_status st = kernels_format_dims_check(ctx, who, mask, out, B, H, Sq, Sk, T, d);
  if (st) return st;
  if (Sq > INT32_MAX || Sk > INT32_MAX || d->nmask * d->nrow * d->ncol > ((int64_t)1 << 34))
    return stof_ctx_error(ctx, STOF_ERR_UNSUPPORTED,
                          "%s: %lld x %lld positions in %lld instances are past the GPU "
                          "builder's range (2^31 positions, 2^34 tiles)",
                          who, (long long)Sq, (long long)Sk, (long long)d->nmask);
  return STOF_OK;
}

/* ---------------------------------------------------------------- the builder */

#define GPU_CACHE_CAP 8

typedef struct gpu_entry {
  char *key;
  stof_mask_format *fmt;
  uint64_t dev[4]; /* on-device entries: row_ptr, col_idx, bmp_off, bitmap (else 0) */
  uint64_t used;
} gpu_entry;

static void entry_free(kernels_format_gpu *g, gpu_entry *e);

struct kernels_format_gpu {
  stof_ctx *ctx;
  stof_cuda_module *mod;
  stof_cuda_kernel *k_tiles, *k_scan, *k_write, *k_tiles_rows, *k_write_rows;
  double setup_ms;
  int last_rows; /* the kernels of the last build: 1 the row kernels, 0 the chunked ones */
  /* A build's scratch on the device (the program, tile states, counts, statistics), kept
   * from one build to the next and grown when a build needs more: no allocation or free
   * (each a wait for the device) on the way. Its host twin stages the program's upload. */
  uint64_t ws;
  size_t ws_bytes;
  unsigned char *stage;
  size_t stage_bytes;
  int n;
  gpu_entry e[GPU_CACHE_CAP];
  uint64_t clock;
};

void kernels_format_gpu_free(kernels_format_gpu *g) {
  if (!g) return;
  for (int k = 0; k < g->n; k++) entry_free(g, &g->e[k]);
  stof_cuda_mem_free(g->ctx, g->ws);
  if (g->stage) stof_ctx_dealloc(g->ctx, g->stage, g->stage_bytes);
  stof_cuda_module_free(g->mod);
  stof_ctx_dealloc(g->ctx, g, sizeof *g);
}

stof_status kernels_format_gpu_new(stof_ctx *ctx, kernels_format_gpu **out) {
  *out = NULL;
  double t0 = kernels_now_ms();
  stof_cuda_props props;
  stof_status st = stof_cuda_init(ctx);
  if (st || (st = stof_cuda_props_get(ctx, &props))) return st;
  const char *src = stof_kernels_source("mask_format.cu");
  if (!src)
    return stof_ctx_error(ctx, STOF_ERR_INTERNAL,
                          "%s: mask_format.cu is not embedded in the library", who_build);
  char arch[32];
  snprintf(arch, sizeof arch, "sm_%d%d", props.cc_major, props.cc_minor);
  kernels_format_gpu *g = stof_ctx_alloc(ctx, sizeof *g);
  if (!g) return STOF_ERR_NOMEM;
  memset(g, 0, sizeof *g);
  g->ctx = ctx;
  void *cubin = NULL;
  size_t size = 0;
  st = stof_cuda_compile_cached(ctx, src, "mask_format.cu", arch, 0, NULL, 0, NULL, NULL,
                                &cubin, &size);
  if (!st) {
    st = stof_cuda_module_load(ctx, cubin, size, &g->mod);
    stof_ctx_dealloc(ctx, cubin, size);
  }
  if (!st) st = stof_cuda_module_kernel(g->mod, "stof_mf_tiles", &g->k_tiles);
  if (!st) st = stof_cuda_module_kernel(g->mod, "stof_mf_scan", &g->k_scan);
  if (!st) st = stof_cuda_module_kernel(g->mod, "stof_mf_write", &g->k_write);
  if (!st) st = stof_cuda_module_kernel(g->mod, "stof_mf_tiles_rows", &g->k_tiles_rows);
  if (!st) st = stof_cuda_module_kernel(g->mod, "stof_mf_write_rows", &g->k_write_rows);
  if (st) {
    kernels_format_gpu_free(g);
    return st;
  }
  g->setup_ms = kernels_now_ms() - t0;
  *out = g;
  return STOF_OK;
}

double kernels_format_gpu_setup_ms(const kernels_format_gpu *g) { return g->setup_ms; }

const char *kernels_format_gpu_last_kernels(const kernels_format_gpu *g) {
  return g->last_rows ? "rows" : "chunks";
}

/* Output buffers of one build (the caller's with on_device, else freed at its end). */
enum { D_ROWPTR, D_COL, D_OFF, D_BITS, D_NOUT };

/* The workspace's parts: byte offsets (multiples of 256) and the total. The statistics,
 * nfull and npartial lie together so that one memset zeroes them; nfull and npartial so
 * that one copy brings both back. */
typedef struct ws_layout {
  size_t stats, nfull, npart, count, partptr, state, prog, doc, total;
} ws_layout;

#define WS_STATS_BYTES 64 /* 5 statistics, padded */

static size_t ws_take(size_t *at, size_t bytes) {
  size_t o = *at;
  *at += (bytes + 255) / 256 * 256;
  return o;
}

/* Every size below is at most 8 * ntiles + 16 * nrows plus the program's; the host's
 * limits (check_args: at most 2^34 tiles; the program's MF_MAX_NODES and its document
 * positions, already host arrays) keep the total far from SIZE_MAX. */
static ws_layout ws_plan(int64_t nrows, int64_t nitem, int64_t ntiles, int nnode, int64_t ndoc) {
  ws_layout w;
  size_t at = 0;
  w.stats = ws_take(&at, 0);
  at += WS_STATS_BYTES;
  w.nfull = at;
  at += (size_t)nrows * 4;
  w.npart = at;
  at = (at + (size_t)nrows * 4 + 255) / 256 * 256;
  w.count = ws_take(&at, (size_t)nitem * 8);
  w.partptr = ws_take(&at, (size_t)nrows * 4);
  w.state = ws_take(&at, (size_t)ntiles);
  w.prog = ws_take(&at, (size_t)nnode * sizeof(mf_node));
  w.doc = w.prog + (size_t)nnode * sizeof(mf_node); /* uploaded with the program */
  ws_take(&at, (size_t)ndoc * sizeof(long long));
  w.total = at;
  return w;
}

/* g->ws of at least bytes, g->stage of at least stage bytes (contents not kept). */
static stof_status ws_reserve(kernels_format_gpu *g, size_t bytes, size_t stage) {
  stof_ctx *ctx = g->ctx;
  if (bytes > g->ws_bytes) {
    stof_cuda_mem_free(ctx, g->ws);
    g->ws = 0, g->ws_bytes = 0;
    size_t want = (bytes + ((size_t)1 << 21) - 1) & ~(((size_t)1 << 21) - 1); /* 2 MiB pages */
    stof_status st = stof_cuda_malloc(ctx, want, &g->ws);
    if (st) return st;
    g->ws_bytes = want;
  }
  if (stage > g->stage_bytes) {
    if (g->stage) stof_ctx_dealloc(ctx, g->stage, g->stage_bytes);
    g->stage_bytes = 0;
    if (!(g->stage = stof_ctx_alloc(ctx, stage))) return STOF_ERR_NOMEM;
    g->stage_bytes = stage;
  }
  return STOF_OK;
}

/* A host array of n elements of size es copied from the device (NULL when n == 0 or on
 * NOMEM); a failed copy sets *st but still returns the array (the caller frees it). */
static void *fetch(stof_ctx *ctx, uint64_t src, size_t n, size_t es, stof_status *st) {
  if (*st || n == 0) return NULL;
  void *p = stof_ctx_alloc(ctx, n * es);
  if (!p) *st = STOF_ERR_NOMEM;
  else *st = stof_cuda_dtoh(ctx, p, src, n * es);
  return p;
}

/* Which kernels build a format: the row kernels (a block per tile-row, every word of a
 * mixed tile evaluated) or the chunked ones (a warp per chunk of a tile-row: 32 columns up
 * to tile 64, 8 at tile 128, mf_chunk_unit; words settled from their 8 x 8 class where it
 * can). Measured on an H100 (bench/format_ab.sh,
 * bench/results/format-h100-s14/, 1 x 32 x {32k, 64k, 128k}, tile 64): the chunked kernels
 * take 1.6-3.5x less time on document, 3.9-4.9x on bigbird and 7-12.5x on longformer, whose
 * rows hold many mixed tiles (global rows, random blocks, document boundaries); the row
 * kernels 1.1-1.6x less on sliding and causal_sliding and 1.2-2.4x on causal, whose rows
 * are runs of tiles one classification settles. So: chunks when the program has a global,
 * random or document term, rows when it has only dense, window and dilated ones.
 * STOF_FORMAT_GPU_KERNELS=rows or =chunks forces either (the A/B and the tests; read at
 * every build); anything else set there is an error. */
enum { KERNELS_AUTO, KERNELS_ROWS, KERNELS_CHUNKS };

stof_status kernels_format_kernels_choice(stof_ctx *ctx, const char *who, const kernels_format_prog *p,
                                          int64_t nrows, int *rows) {
  const char *v = getenv("STOF_FORMAT_GPU_KERNELS");
  int want = KERNELS_AUTO;
  if (v && *v) {
    if (!strcmp(v, "rows")) want = KERNELS_ROWS;
    else if (!strcmp(v, "chunks")) want = KERNELS_CHUNKS;
    else
      return stof_ctx_error(ctx, STOF_ERR_ARG, "%s: STOF_FORMAT_GPU_KERNELS=%.40s: expected "
                            "rows or chunks", who, v);
  }
  if (want == KERNELS_AUTO) want = kernels_format_prog_wants_chunks(p) ? KERNELS_CHUNKS : KERNELS_ROWS;
  /* the row kernels launch a block per tile-row: a grid's x is below 2^31 */
  if (want == KERNELS_ROWS && nrows > INT32_MAX) {
    if (v && *v)
      return stof_ctx_error(ctx, STOF_ERR_UNSUPPORTED, "%s: STOF_FORMAT_GPU_KERNELS=rows: %lld "
                            "tile-rows are more blocks than a launch takes", who, (long long)nrows);
    want = KERNELS_CHUNKS;
  }
  *rows = want == KERNELS_ROWS;
  return STOF_OK;
}

/* More blocks than this walk the items in a grid-stride loop (the GPU holds far fewer). */
#define MAX_GRID ((int64_t)1 << 20)

/* The build; with on_device the large arrays (col_idx, bmp_off, bitmap) stay on the device,
 * their host pointers NULL, and dev_out gets row_ptr, col_idx, bmp_off and bitmap there
 * (owned by the caller: stof_cuda_mem_free each); only the tile-row arrays and the
 * statistics cross.
 *
 * What waits for the device, on_device (host builds add the probe and three copies back):
 * the program's upload (one copy), the statistics (sizes for the allocations that
 * follow), the four output allocations, and nfull with npartial at the end (row_ptr is
 * their prefix sum, made here). The workspace is allocated only when it must grow. */
static stof_status build(kernels_format_gpu *g, const stof_mask *mask, int64_t B, int64_t H, int64_t Sq,
                         int64_t Sk, int T, int on_device, stof_mask_format **out, uint64_t *dev_out) {
  stof_ctx *ctx = g->ctx;
  const char *who = who_build;
  dims d = {0};
  int64_t pn, pdoc, pdepth;
  /* a mask the GPU cannot evaluate is refused for that reason first (not for the CPU
   * builder's limits on fn predicates) */
  stof_status st = mask ? prog_check(ctx, who, mask, &pn, &pdoc, &pdepth) : STOF_OK;
  if (st || (st = check_args(ctx, who, mask, out, B, H, Sq, Sk, T, &d))) return st;
  double t0 = kernels_now_ms();
  kernels_format_prog *prog = NULL;
  if ((st = prog_new(ctx, who, mask, &prog))) return st;

  int rows = 0;
  int64_t nrows = d.nmask * d.nrow, ntiles = nrows * d.ncol;
  int64_t chunk = mf_chunk_cols(d.ncol, T), nchunk = (d.ncol + chunk - 1) / chunk;
  int64_t nitem = nrows * nchunk; /* <= ntiles: chunk >= 1 column */
  int wpt = (T / 8) * (T / 8);
  uint64_t dev[D_NOUT] = {0};
  unsigned long long stats[5] = {0, 0, 0, 0, 0};
  stof_mask_format *f = NULL;
  int32_t *counts = NULL; /* nfull then npartial, as copied back */
  int64_t nentry = 0, nword = 0;
  /* the kernels' scalar arguments */
  int iT = T, nnode = prog->nnode, nrow = (int)d.nrow, ncol = (int)d.ncol,
      mask_b = (int)d.mask_b, mask_h = (int)d.mask_h, nmask = (int)d.nmask,
      ichunk = (int)chunk, inchunk = (int)nchunk;
  long long lSq = Sq, lSk = Sk, lnitem = nitem;
  unsigned grid_items = (unsigned)((nitem + 3) / 4 < MAX_GRID ? (nitem + 3) / 4 : MAX_GRID);
  if ((st = kernels_format_kernels_choice(ctx, who, prog, nrows, &rows))) goto done;
  g->last_rows = rows;

  /* 1. tile states and counts */
  ws_layout w = ws_plan(nrows, nitem, ntiles, prog->nnode, prog->ndoc);
  size_t prog_bytes = (size_t)prog->nnode * sizeof(mf_node), doc_bytes = (size_t)prog->ndoc * 8;
  if ((st = ws_reserve(g, w.total, prog_bytes + doc_bytes))) goto done;
  memcpy(g->stage, prog->node, prog_bytes);
  if (doc_bytes) memcpy(g->stage + prog_bytes, prog->doc, doc_bytes);
  uint64_t ws = g->ws, d_prog = ws + w.prog, d_doc = ws + w.doc, d_state = ws + w.state,
           d_nfull = ws + w.nfull, d_npart = ws + w.npart, d_count = ws + w.count,
           d_stats = ws + w.stats, d_partptr = ws + w.partptr;
  if ((st = stof_cuda_htod(ctx, d_prog, g->stage, prog_bytes + doc_bytes)) ||
      (st = stof_cuda_memset32(ctx, d_stats, 0, (w.nfull - w.stats + (size_t)nrows * 8) / 4)))
    goto done;
  if (rows) {
    void *args[] = {&d_prog, &nnode, &d_doc, &iT, &lSq, &lSk, &nrow, &ncol, &mask_b,
                    &mask_h, &d_state, &d_nfull, &d_npart, &d_stats};
    unsigned grid[3] = {(unsigned)nrows, 1, 1}, block[3] = {MF_TILE_THREADS, 1, 1};
    st = stof_cuda_launch(ctx, g->k_tiles_rows, grid, block, 0, args);
  } else {
    void *args[] = {&d_prog, &nnode, &d_doc, &iT, &lSq, &lSk, &nrow, &ncol, &ichunk,
                    &inchunk, &mask_b, &mask_h, &lnitem, &d_state, &d_nfull, &d_npart,
                    &d_count, &d_stats};
    unsigned grid[3] = {grid_items, 1, 1}, block[3] = {MF_TILE_THREADS, 1, 1};
    st = stof_cuda_launch(ctx, g->k_tiles, grid, block, 0, args);
  }
  if (st || (st = stof_cuda_dtoh(ctx, stats, d_stats, sizeof stats))) goto done;
  nentry = (int64_t)(stats[2] + stats[3]);
  nword = (int64_t)stats[3] * wpt;
  if (nentry > INT32_MAX) {
    st = stof_ctx_error(ctx, STOF_ERR_UNSUPPORTED, "%s: more than 2^31 - 1 non-empty tiles", who);
    goto done;
  }
  if (nword > INT32_MAX) {
    st = stof_ctx_error(ctx, STOF_ERR_UNSUPPORTED,
                        "%s: bitmap past 2^31 - 1 words (too many partial tiles)", who);
    goto done;
  }

  /* 2. row pointers; 3. entries and bitmaps */
  if ((st = stof_cuda_malloc(ctx, (size_t)(d.nmask * (d.nrow + 1)) * 4, &dev[D_ROWPTR])) ||
      (st = stof_cuda_malloc(ctx, (size_t)nentry * 4, &dev[D_COL])) ||
      (st = stof_cuda_malloc(ctx, (size_t)nentry * 4, &dev[D_OFF])) ||
      (st = stof_cuda_malloc(ctx, (size_t)nword * 8, &dev[D_BITS])))
    goto done;
  {
    void *args[] = {&d_nfull, &d_npart, &nmask, &nrow, &dev[D_ROWPTR], &d_partptr};
    unsigned grid[3] = {1, 1, 1}, block[3] = {MF_SCAN_THREADS, 1, 1};
    if ((st = stof_cuda_launch(ctx, g->k_scan, grid, block, 0, args))) goto done;
  }
  if (nentry > 0 && rows) {
    void *args[] = {&d_prog, &nnode, &d_doc, &iT, &lSq, &lSk, &nrow, &ncol, &mask_b, &mask_h,
                    &d_state, &dev[D_ROWPTR], &d_partptr, &dev[D_COL], &dev[D_OFF],
                    &dev[D_BITS]};
    unsigned grid[3] = {(unsigned)nrows, 1, 1}, block[3] = {MF_ROWS_WRITE_THREADS, 1, 1};
    if ((st = stof_cuda_launch(ctx, g->k_write_rows, grid, block, 0, args))) goto done;
  } else if (nentry > 0) {
    void *args[] = {&d_prog, &nnode, &d_doc, &iT, &lSq, &lSk, &nrow, &ncol, &ichunk,
                    &inchunk, &mask_b, &mask_h, &lnitem, &d_state, &dev[D_ROWPTR],
                    &d_partptr, &d_count, &dev[D_COL], &dev[D_OFF], &dev[D_BITS]};
    unsigned grid[3] = {grid_items, 1, 1}, block[3] = {MF_WRITE_THREADS, 1, 1};
    if ((st = stof_cuda_launch(ctx, g->k_write, grid, block, 0, args))) goto done;
  }

  /* the host format, copied back; a host build times its copies apart (the kernels done
   * first: a one-byte copy waits for this stream only, not for other work on the device) */
  if (!on_device) {
    unsigned char probe;
    if ((st = stof_cuda_dtoh(ctx, &probe, d_state, 1))) goto done;
  }
  double t_copy = kernels_now_ms();
  f = stof_ctx_alloc(ctx, sizeof *f);
  if (!f) {
    st = STOF_ERR_NOMEM;
    goto done;
  }
  memset(f, 0, sizeof *f);
  f->ctx = ctx;
  f->B = B, f->H = H, f->Sq = Sq, f->Sk = Sk, f->T = T;
  f->nrow = nrow, f->ncol = ncol;
  f->mask_b = mask_b, f->mask_h = mask_h, f->nmask = nmask;
  f->desc = stof_ctx_strdup(ctx, stof_mask_description(mask));
  if (!f->desc) {
    st = STOF_ERR_NOMEM;
    goto done;
  }
  /* the sizes first: stof_mask_format_free frees any array already fetched */
  f->nentry = (int32_t)nentry;
  f->nword = nword;
  counts = fetch(ctx, d_nfull, (size_t)nrows * 2, 4, &st);
  f->row_ptr = st ? NULL : stof_ctx_alloc(ctx, (size_t)(d.nmask * (d.nrow + 1)) * 4);
  f->nfull = st ? NULL : stof_ctx_alloc(ctx, (size_t)nrows * 4);
  f->npartial = st ? NULL : stof_ctx_alloc(ctx, (size_t)nrows * 4);
  if (!st && (!f->row_ptr || !f->nfull || !f->npartial)) st = STOF_ERR_NOMEM;
  if (st) goto done;
  memcpy(f->nfull, counts, (size_t)nrows * 4);
  memcpy(f->npartial, counts + nrows, (size_t)nrows * 4);
  /* row_ptr as stof_mf_scan makes it on the device: no copy needed */
  for (int64_t m = 0, e = 0; m < d.nmask; m++) {
    for (int64_t r = 0; r < d.nrow; r++) {
      f->row_ptr[m * (d.nrow + 1) + r] = (int32_t)e;
      e += f->nfull[m * d.nrow + r] + f->npartial[m * d.nrow + r];
    }
    f->row_ptr[m * (d.nrow + 1) + d.nrow] = (int32_t)e;
  }
  if (!on_device) {
    f->col_idx = fetch(ctx, dev[D_COL], (size_t)nentry, 4, &st);
    f->bmp_off = fetch(ctx, dev[D_OFF], (size_t)nentry, 4, &st);
    f->bitmap = fetch(ctx, dev[D_BITS], (size_t)nword, 8, &st);
  }
  if (st) goto done;
  f->copy_ms = kernels_now_ms() - t_copy;

  /* the statistics, as the CPU builder computes them */
  int64_t nmask64 = d.nmask;
  int64_t ntile = nmask64 * d.nrow * d.ncol;
  int64_t ntile16 = nmask64 * ((Sq + 15) / 16) * ((Sk + 15) / 16);
  int64_t nvalid = (int64_t)stats[0], valid16 = (int64_t)stats[1];
  f->nvalid = nvalid;
  f->density = (double)nvalid / ((double)nmask64 * (double)Sq * (double)Sk);
  f->frac16 = (double)valid16 / (double)ntile16;
  f->ntile_full = (int64_t)stats[2];
  f->ntile_partial = (int64_t)stats[3];
  f->ntile_empty = ntile - f->ntile_full - f->ntile_partial;
  f->ntile_halfempty = (int64_t)stats[4];
  f->bytes = (size_t)(nmask64 * (d.nrow + 1)) * 4 + (size_t)nentry * 8 + (size_t)nword * 8;

done:
  if (!st && on_device) { /* handed over: the caller frees them */
    for (int k = 0; k < D_NOUT; k++) dev_out[k] = dev[k], dev[k] = 0;
  }
  for (int k = 0; k < D_NOUT; k++) stof_cuda_mem_free(ctx, dev[k]);
  if (counts) stof_ctx_dealloc(ctx, counts, (size_t)nrows * 8);
  kernels_format_prog_free(prog);
  if (st) {
    stof_mask_format_free(f);
    return st;
  }
  f->build_ms = kernels_now_ms() - t0;
  *out = f;
  return STOF_OK;
}

stof_status kernels_format_gpu_build(kernels_format_gpu *g, const stof_mask *mask, int64_t B,
                                     int64_t H, int64_t Sq, int64_t Sk, int T,
                                     stof_mask_format **out) {
  return build(g, mask, B, H, Sq, Sk, T, 0, out, NULL);
}

stof_status kernels_format_gpu_build_dev(kernels_format_gpu *g, const stof_mask *mask, int64_t B,
                                         int64_t H, int64_t Sq, int64_t Sk, int T,
                                         stof_mask_format **out, uint64_t dev[4]) {
  for (int k = 0; k < 4; k++) dev[k] = 0;
  return build(g, mask, B, H, Sq, Sk, T, 1, out, dev);
}

/* A small LRU of formats keyed as the CPU cache keys them (host and on-device builds of the
 * same format are separate entries). */
static void entry_free(kernels_format_gpu *g, gpu_entry *e) {
  if (e->key) stof_ctx_dealloc(g->ctx, e->key, strlen(e->key) + 1);
  stof_mask_format_free(e->fmt);
  for (int k = 0; k < 4; k++) stof_cuda_mem_free(g->ctx, e->dev[k]);
  memset(e, 0, sizeof *e);
}

/* The key of (mask, B, H, Sq, Sk, T) and the side its arrays are on (NULL for a mask never
 * cached: fn inside, which the GPU refuses anyway). */
static stof_status entry_key(stof_ctx *ctx, const stof_mask *mask, int64_t B, int64_t H, int64_t Sq,
                             int64_t Sk, int T, int on_device, char **key) {
  return kernels_format_cache_key(ctx, mask, B, H, Sq, Sk, T, on_device ? "device" : "host", key);
}

static stof_status get(kernels_format_gpu *g, const stof_mask *mask, int64_t B, int64_t H, int64_t Sq,
                       int64_t Sk, int T, int on_device, const stof_mask_format **out, const uint64_t **dev) {
  stof_ctx *ctx = g->ctx;
  if (!mask) return stof_ctx_error(ctx, STOF_ERR_ARG, "%s: mask is NULL", who_build);
  char *key = NULL;
  if (entry_key(ctx, mask, B, H, Sq, Sk, T, on_device, &key)) return STOF_ERR_NOMEM;
  if (key) {
    for (int k = 0; k < g->n; k++)
      if (g->e[k].key && !strcmp(g->e[k].key, key)) {
        stof_ctx_dealloc(ctx, key, strlen(key) + 1);
        g->e[k].used = ++g->clock;
        *out = g->e[k].fmt;
        if (dev) *dev = g->e[k].dev;
        return STOF_OK;
      }
  }
  stof_mask_format *f;
  uint64_t d[4] = {0, 0, 0, 0};
  stof_status st = build(g, mask, B, H, Sq, Sk, T, on_device, &f, d);
  if (st) {
    if (key) stof_ctx_dealloc(ctx, key, strlen(key) + 1);
    return st;
  }
  int slot = g->n;
  if (g->n == GPU_CACHE_CAP) {
    slot = 0;
    for (int k = 1; k < g->n; k++)
      if (g->e[k].used < g->e[slot].used) slot = k;
    entry_free(g, &g->e[slot]);
  } else {
    g->n++;
  }
  g->e[slot].key = key;
  g->e[slot].fmt = f;
  memcpy(g->e[slot].dev, d, sizeof d);
  g->e[slot].used = ++g->clock;
  *out = f;
  if (dev) *dev = g->e[slot].dev;
  return STOF_OK;
}

stof_status kernels_format_gpu_get(kernels_format_gpu *g, const stof_mask *mask, int64_t B,
                                   int64_t H, int64_t Sq, int64_t Sk, int T,
                                   const stof_mask_format **out) {
  return get(g, mask, B, H, Sq, Sk, T, 0, out, NULL);
}

stof_status kernels_format_gpu_get_dev(kernels_format_gpu *g, const stof_mask *mask, int64_t B,
                                       int64_t H, int64_t Sq, int64_t Sk, int T,
                                       const stof_mask_format **out, const uint64_t **dev) {
  return get(g, mask, B, H, Sq, Sk, T, 1, out, dev);
}

stof_status kernels_format_gpu_drop(kernels_format_gpu *g, const stof_mask *mask, int64_t B, int64_t H,
                                    int64_t Sq, int64_t Sk, int T) {
  if (!mask) return stof_ctx_error(g->ctx, STOF_ERR_ARG, "%s: mask is NULL", who_build);
  for (int on_device = 0; on_device < 2; on_device++) {
    char *key = NULL;
    if (entry_key(g->ctx, mask, B, H, Sq, Sk, T, on_device, &key)) return STOF_ERR_NOMEM;
    if (!key) return STOF_OK;
    int k = 0;
    while (k < g->n && !(g->e[k].key && !strcmp(g->e[k].key, key))) k++;
    stof_ctx_dealloc(g->ctx, key, strlen(key) + 1);
    if (k < g->n) {
      entry_free(g, &g->e[k]);
      g->e[k] = g->e[--g->n]; /* the order is free: eviction goes by the clock */
      memset(&g->e[g->n], 0, sizeof g->e[g->n]);
    }
  }
  return STOF_OK;
}

int kernels_format_gpu_count(const kernels_format_gpu *g) { return g->n; }

size_t kernels_format_gpu_device_bytes(const kernels_format_gpu *g) {
  size_t bytes = 0;
  for (int k = 0; k < g->n; k++) {
    const stof_mask_format *f = g->e[k].fmt;
    if (g->e[k].dev[0])
      bytes += (size_t)f->nmask * (size_t)(f->nrow + 1) * 4 + (size_t)f->nentry * 8 + (size_t)f->nword * 8;
  }
  return bytes;
}

/* ---------------------------------------------------------------- public entry */

stof_status stof_mask_format_build_gpu(stof_ctx *ctx, const stof_mask *mask, int64_t B,
                                       int64_t H, int64_t Sq, int64_t Sk, int T,
                                       stof_mask_format **out) {
  dims d;
  int64_t nnode, ndoc, depth;
  stof_status st = mask ? prog_check(ctx, who_build, mask, &nnode, &ndoc, &depth) : STOF_OK;
  if (st || (st = check_args(ctx, who_build, mask, out, B, H, Sq, Sk, T, &d))) return st;
  kernels_format_gpu *g;
  if ((st = kernels_format_gpu_new(ctx, &g))) return st;
  st = kernels_format_gpu_build(g, mask, B, H, Sq, Sk, T, out);
  kernels_format_gpu_free(g);
  return st;
}

static int cmp_ms(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

stof_status stof_mask_format_time_gpu(stof_ctx *ctx, const stof_mask *mask, int64_t B, int64_t H,
                                      int64_t Sq, int64_t Sk, int T, int reps, double *ms,
                                      size_t *bytes) {
  *ms = 0, *bytes = 0;
  if (reps < 1 || reps > 1000)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "%s: reps = %d (1 to 1000)", who_build, reps);
  kernels_format_gpu *g;
  stof_status st = kernels_format_gpu_new(ctx, &g);
  if (st) return st;
  double *t = stof_ctx_alloc(ctx, sizeof *t * (size_t)reps);
  if (!t) {
    kernels_format_gpu_free(g);
    return STOF_ERR_NOMEM;
  }
  for (int r = 0; r <= reps && !st; r++) {
    stof_mask_format *f = NULL;
    uint64_t dev[4];
    if ((st = kernels_format_gpu_build_dev(g, mask, B, H, Sq, Sk, T, &f, dev))) break;
    if (r > 0) t[r - 1] = f->build_ms;
    *bytes = f->bytes;
    stof_mask_format_free(f);
    for (int k = 0; k < 4; k++) stof_cuda_mem_free(ctx, dev[k]);
  }
  if (!st) {
    qsort(t, (size_t)reps, sizeof *t, cmp_ms);
    *ms = t[reps / 2];
  }
  stof_ctx_dealloc(ctx, t, sizeof *t * (size_t)reps);
  kernels_format_gpu_free(g);
  return st;
}
