/*
 * Lowering: the schedule's blocks become nests of the loop IR (schedule_int.h), and the
 * loop nest printer (the golden-test text).
 *
 * Placement. A block at the root is one nest; the root nests come in an order where every
 * block follows the blocks whose buffers it reads (ties: block ids). A block computed at a
 * loop (compute_at) is nested at the start of that loop's body, after the lets and guards
 * of that level; one computed after a loop (reverse_compute_at) at the end of its body.
 * Several blocks at one place come in dependence order too.
 *
 * For a block with leaf loops L0..Ln-1 (outermost first):
 *  - every axis of its op (compute axes, then reduce axes) is let-bound to its value
 *    through the leaves (a split loop is the sum of part * stride over its parts, a fused
 *    source is fused / stride % extent), plus, for an attached block, the base of its
 *    region (bound.c); a let goes right inside the innermost loop it reads;
 *  - every non-divisible split gets a guard "value < extent", and an attached block a
 *    guard at each edge of the tensor its region may cross; guards go as high as the lets
 *    they read (after them);
 *  - unit loops made by compute_at are elided (their value is 0);
 *  - a plain block stores its body at the innermost level into its buffer at its axes (an
 *    rfactor block: with its rfactor loop's value inserted);
 *  - a reduction is decomposed at p, the position of its outermost reduce loop: the loops
 *    before p are shared; inside them an init nest (the data-parallel loops after p)
 *    stores the combiner's identity, then the update nest (all loops after p) combines.
 *    A float16 or bfloat16 reduction combines in a float32 accumulator instead of its
 *    buffer (an element per iteration of the init nest's loops: a scalar when there are
 *    none), and a final nest over the same loops as the init nest rounds it into the
 *    buffer, once per element. No block reads the buffer between the init and the final
 *    nest (reverse_compute_at refuses loops inside reduce loops), so the buffer holds the
 *    whole result wherever it is read.
 *
 * Buffers. Inputs and the caller's tensors (outputs, arguments) are external: whole and
 * indexed absolutely. Every other buffer is written by one block; when all its accesses
 * (the writer's stores, every reader's loads) lie under a common loop, it holds only the
 * region that one iteration of the innermost such loop touches (bound inference with the
 * loops enclosing it fixed, except loops bound to threadIdx for a "shared" buffer, which
 * holds what all the threads of a CUDA block touch), and is indexed relative to the
 * region's start. The block pragma "pad" = n adds n elements to the last dimension of
 * such a buffer (shared-memory bank conflicts); indices do not change.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "schedule_int.h"

#define MAX_ENCL 512

/* ---------------------------------------------------------------- building */

static int new_stmt(sched_lir *l, int kind, int block) {
  lir_stmt st;
  memset(&st, 0, sizeof st);
  st.kind = kind;
  st.block = block;
  st.loop = st.axis = st.expr = -1;
  st.first = st.last = st.next = -1;
  return sched_vec_push(l->ctx, &l->stmts, &st, 1);
}

static void append(sched_lir *l, int parent, int child) {
  lir_stmt *p = lir_stmt_at(l, parent);
  if (p->last < 0)
    p->first = child;
  else
    lir_stmt_at(l, p->last)->next = child;
  p->last = child;
}

static int new_expr(sched_lir *l, int kind, int a, int b, int64_t c) {
  lir_expr e = {kind, a, b, c, -1, -1};
  return sched_vec_push(l->ctx, &l->exprs, &e, 1);
}

static int const_expr(sched_lir *l, int64_t c) { return new_expr(l, LIR_E_CONST, -1, -1, c); }

static int is_zero(const sched_lir *l, int e) {
  return lir_expr_at(l, e)->kind == LIR_E_CONST && lir_expr_at(l, e)->c == 0;
}

/* a + b, folding zeros (-1 on NOMEM). */
static int add_expr(sched_lir *l, int a, int b) {
  if (a < 0 || b < 0) return -1;
  if (is_zero(l, a)) return b;
  if (is_zero(l, b)) return a;
  return new_expr(l, LIR_E_ADD, a, b, 0);
}

/* A fused loop runs compact unless it is bound to a thread or vectorized: it takes only the
 * combinations of its sources' valid values (those below their bounds,
 * sched_loop_valid_bound), source k being fused / (the product of the bounds of the sources
 * inside it) % its bound, rather than fused / (the product of their extents) % its extent.
 * The two are the same code unless a source comes from a split that does not divide; then
 * the compact loop skips the gaps (a loop of 4 fused with a 2^40 part of a loop of 8 runs
 * 4 x 8 turns, not 4 x 2^40). A bound or vectorized loop keeps its extent (the launch, a
 * vector's width), so it is decoded by the extents. */
static int fused_compact(const stof_sched *s, int fused) {
  const sched_loop *f = sched_loop_at(s, fused);
  return f->derive == STOF_DERIVE_FUSE && f->ann != STOF_ANN_THREAD && f->ann != STOF_ANN_VECTORIZE;
}

/* Source loop's divisor and modulus in its compact fused loop. */
static void fused_source_place(const stof_sched *s, int loop, int64_t *stride, int64_t *modulus) {
  const sched_loop *lp = sched_loop_at(s, loop);
  *stride = 1;
  *modulus = sched_loop_valid_bound(s, loop);
  for (int id = 0; id < s->loops.len; id++) {
    const sched_loop *o = sched_loop_at(s, id);
    if (o->repl == SCHED_REPL_FUSE && o->repl_first == lp->repl_first && o->repl_stride < lp->repl_stride)
      *stride *= sched_loop_valid_bound(s, id); /* at most repl_stride: no overflow */
  }
}

/* The value of loop through the current leaves; mask gets the positions (in its block's
 * nest) it reads. Returns -1 on NOMEM. */
static int value_of(sched_lir *l, int loop, uint64_t *mask) {
  const stof_sched *s = l->s;
  const sched_loop *lp = sched_loop_at(s, loop);
  if (lp->repl == SCHED_LEAF) {
    if (lp->elide) return const_expr(l, 0);
    int e = new_expr(l, LIR_E_LOOP, -1, -1, 0);
    if (e < 0) return -1;
    lir_expr_at(l, e)->loop = loop;
    int pos = sched_loop_pos(s, loop);
    if (pos >= 0) *mask |= (uint64_t)1 << pos;
    return e;
  }
  if (lp->repl == SCHED_REPL_SPLIT) {
    int acc = -1;
    for (int k = 0; k < lp->repl_n; k++) {
      int part = lp->repl_first + k;
      int e = value_of(l, part, mask);
      if (e < 0) return -1;
      int64_t stride = sched_loop_at(s, part)->stride;
      if (stride != 1 && !is_zero(l, e)) {
        int c = const_expr(l, stride);
        if (c < 0 || (e = new_expr(l, LIR_E_MUL, e, c, 0)) < 0) return -1;
      }
      acc = acc < 0 ? e : add_expr(l, acc, e);
      if (acc < 0) return -1;
    }
    return acc;
  }
  int64_t stride = lp->repl_stride, extent = lp->extent;
  if (fused_compact(s, lp->repl_first)) fused_source_place(s, loop, &stride, &extent);
  int outer = lp->repl_outer;
  int e = value_of(l, lp->repl_first, mask);
  if (e < 0) return -1;
  if (stride != 1) {
    int c = const_expr(l, stride);
    if (c < 0 || (e = new_expr(l, LIR_E_DIV, e, c, 0)) < 0) return -1;
  }
  if (!outer) {
    int c = const_expr(l, extent);
    if (c < 0 || (e = new_expr(l, LIR_E_MOD, e, c, 0)) < 0) return -1;
  }
  return e;
}

/* An affine form as an expression (-1 on NOMEM). */
static int aff_expr(sched_lir *l, const sched_aff *x) {
  int e = -1;
  for (int i = 0; i < x->n; i++) {
    uint64_t ignore = 0;
    int t = value_of(l, x->loop[i], &ignore);
    int64_t k = x->k[i] < 0 ? -x->k[i] : x->k[i];
    if (t < 0) return -1;
    if (k != 1) {
      int c = const_expr(l, k);
      if (c < 0 || (t = new_expr(l, LIR_E_MUL, t, c, 0)) < 0) return -1;
    }
    if (e < 0 && x->k[i] < 0) {
      int z = const_expr(l, 0);
      if (z < 0 || (e = new_expr(l, LIR_E_SUB, z, t, 0)) < 0) return -1;
    } else if (e < 0) {
      e = t;
    } else if ((e = new_expr(l, x->k[i] < 0 ? LIR_E_SUB : LIR_E_ADD, e, t, 0)) < 0) {
      return -1;
    }
  }
  if (e < 0) return const_expr(l, x->c);
  if (x->c == 0) return e;
  int c = const_expr(l, x->c < 0 ? -x->c : x->c);
  return c < 0 ? -1 : new_expr(l, x->c < 0 ? LIR_E_SUB : LIR_E_ADD, e, c, 0);
}

/* ---------------------------------------------------------------- order */

/* The block attached at loop at (-1: the root) that b is or descends from, else -1. */
static int ancestor_at(const stof_sched *s, int b, int at) {
  for (int depth = 0; depth <= s->blocks.len; depth++) {
    const sched_block *x = sched_block_at(s, b);
    if (x->attach == at) return b;
    if (x->attach < 0) return -1;
    b = sched_loop_at(s, x->attach)->block;
  }
  return -1;
}

typedef struct lower_ctx {
  sched_lir *l;
  sched_bounds *bd;
} lower_ctx;

/* The live blocks attached at loop at (-1: the root; rev: after the loop), in an order
 * where each follows what it (or a block nested in it) reads; out has room for every block. */
static stof_status attached(lower_ctx *lc, int at, int rev, int *out, int *nout) {
  const stof_sched *s = lc->l->s;
  int nb = s->blocks.len, n = 0;
  for (int b = 0; b < nb; b++) {
    const sched_block *x = sched_block_at(s, b);
    if (x->state == SCHED_B_LIVE && x->attach == at && (at < 0 || x->attach_rev == rev)) out[n++] = b;
  }
  *nout = n;
  if (n < 2) return STOF_OK;
  /* deps[i * n + j]: out[i] must come before out[j] */
  unsigned char *deps = stof_ctx_alloc(lc->l->ctx, (size_t)n * (size_t)n + (size_t)n);
  if (!deps) return STOF_ERR_NOMEM;
  unsigned char *done = deps + (size_t)n * (size_t)n;
  for (int r = 0; r < nb; r++) {
    const sched_block *x = sched_block_at(s, r);
    if (x->state != SCHED_B_LIVE) continue;
    int c = ancestor_at(s, r, at);
    if (c < 0) continue;
    const stof_op *ts[64];
    int nt = sched_expr_loads(x->op->body, ts, 64);
    for (int k = 0; k < nt && k < 64; k++) {
      int w = sched_writer(s, ts[k]);
      int a = w >= 0 ? ancestor_at(s, w, at) : -1;
      if (a < 0 || a == c) continue;
      int ia = -1, ic = -1;
      for (int i = 0; i < n; i++) {
        if (out[i] == a) ia = i;
        if (out[i] == c) ic = i;
      }
      if (ia >= 0 && ic >= 0) deps[ia * n + ic] = 1;
    }
  }
  int sorted[STOF_SCHED_MAX_LOOPS * 4], *res = n <= (int)(sizeof sorted / sizeof *sorted) ? sorted : NULL;
  if (!res) {
    stof_ctx_dealloc(lc->l->ctx, deps, (size_t)n * (size_t)n + (size_t)n);
    return stof_ctx_error(lc->l->ctx, STOF_ERR_UNSUPPORTED, "lower: too many blocks at one place");
  }
  stof_status st = STOF_OK;
  for (int k = 0; k < n && !st; k++) {
    int pick = -1;
    for (int j = 0; j < n && pick < 0; j++) {
      if (done[j]) continue;
      int ready = 1;
      for (int i = 0; i < n && ready; i++) ready = done[i] || !deps[i * n + j];
      if (ready) pick = j;
    }
    if (pick < 0) {
      int a = -1, b = -1;
      for (int i = 0; i < n && b < 0; i++)
        for (int j = 0; j < n && b < 0; j++)
          if (!done[i] && !done[j] && deps[i * n + j]) a = i, b = j;
      st = stof_ctx_error(lc->l->ctx, STOF_ERR_SCHEDULE,
                          "lower: blocks %s and %s each need the other first (their nests cannot be "
                          "ordered)",
                          sched_block_name(s, out[a]), sched_block_name(s, out[b]));
      break;
    }
    done[pick] = 1;
    res[k] = out[pick];
  }
  if (!st) memcpy(out, res, sizeof *out * (size_t)n);
  stof_ctx_dealloc(lc->l->ctx, deps, (size_t)n * (size_t)n + (size_t)n);
  return st;
}

/* ---------------------------------------------------------------- one block */

/* A let or a guard, placed once the loops it reads are open. */
typedef struct lower_item {
  int is_guard;
  int axis;       /* let */
  int expr;       /* let: value; guard: condition */
  uint64_t mask;  /* leaf positions read */
  int reduce;     /* reads a reduce loop */
  int known;      /* guard: "value < bound" (ge: "value >= bound") with value below */
  int ge;
  int64_t bound;
  sched_aff value;
} lower_item;

#define MAX_ITEMS (3 * STOF_SCHED_MAX_LOOPS + 2 * STOF_MAX_DIMS + 8)
#define MAX_SCOPE 64

/* The guards in force where a block is nested: an edge guard of the block that one of them
 * implies is left out. */
typedef struct guard_scope {
  int n;
  const lower_item *g[MAX_SCOPE];
} guard_scope;

typedef struct block_ctx {
  lower_ctx *lc;
  int block;
  int p;          /* position of the outermost reduce loop (nloop when none) */
  const guard_scope *outer;
  lower_item items[MAX_ITEMS];
  int nitem;
} block_ctx;

enum { MODE_SHARED, MODE_INIT, MODE_UPDATE, MODE_FINAL };

static stof_status lower_block(lower_ctx *lc, int block, int parent, const guard_scope *outer);

static int same_aff(const sched_aff *a, const sched_aff *b) {
  if (a->bad || b->bad || a->n != b->n || a->c != b->c) return 0;
  for (int i = 0; i < a->n; i++)
    if (a->loop[i] != b->loop[i] || a->k[i] != b->k[i]) return 0;
  return 1;
}

/* Does a guard in scope imply "value < bound" (ge: "value >= bound")? */
static int implied(const guard_scope *sc, const sched_aff *value, int ge, int64_t bound) {
  for (int i = 0; sc && i < sc->n; i++) {
    const lower_item *g = sc->g[i];
    if (g->ge == ge && same_aff(&g->value, value) && (ge ? g->bound >= bound : g->bound <= bound)) return 1;
  }
  return 0;
}

/* Emits, into *container, the items not done yet whose loops are all open; a guard
 * becomes an IF that the following statements nest in. */
static stof_status place_items(block_ctx *c, int *container, uint64_t open, unsigned char *done,
                               int dp_only) {
  sched_lir *l = c->lc->l;
  for (int pass = 0; pass < 2; pass++) /* lets first, then guards */
    for (int i = 0; i < c->nitem; i++) {
      lower_item *it = &c->items[i];
      if (done[i] || it->is_guard != pass || (it->mask & ~open) || (dp_only && it->reduce)) continue;
      done[i] = 1;
      int st = new_stmt(l, it->is_guard ? LIR_IF : LIR_LET, c->block);
      if (st < 0) return STOF_ERR_NOMEM;
      lir_stmt_at(l, st)->axis = it->axis;
      lir_stmt_at(l, st)->expr = it->expr;
      append(l, *container, st);
      if (it->is_guard) *container = st;
    }
  return STOF_OK;
}

static stof_status add_store(block_ctx *c, int container, int kind) {
  int st = new_stmt(c->lc->l, LIR_STORE, c->block);
  if (st < 0) return STOF_ERR_NOMEM;
  lir_stmt_at(c->lc->l, st)->store = kind;
  append(c->lc->l, container, st);
  return STOF_OK;
}

/* The blocks attached at loop (before its body, or after when rev), nested into container;
 * the guards of c placed so far (done) are in force there. */
static stof_status place_attached(block_ctx *c, int loop, int rev, int container,
                                  const unsigned char *done) {
  lower_ctx *lc = c->lc;
  int nb = lc->l->s->blocks.len;
  int list_buf[64], *list = nb <= 64 ? list_buf : stof_ctx_alloc(lc->l->ctx, sizeof(int) * (size_t)nb);
  if (!list) return STOF_ERR_NOMEM;
  int n = 0;
  stof_status st = attached(lc, loop, rev, list, &n);
  guard_scope *sc = n ? stof_ctx_alloc(lc->l->ctx, sizeof *sc) : NULL;
  if (n && !sc) st = STOF_ERR_NOMEM;
  if (sc) {
    if (c->outer) *sc = *c->outer;
    for (int i = 0; i < c->nitem && sc->n < MAX_SCOPE; i++)
      if (done[i] && c->items[i].is_guard && c->items[i].known) sc->g[sc->n++] = &c->items[i];
  }
  for (int i = 0; i < n && !st; i++) st = lower_block(lc, list[i], container, sc);
  if (sc) stof_ctx_dealloc(lc->l->ctx, sc, sizeof *sc);
  if (list != list_buf) stof_ctx_dealloc(lc->l->ctx, list, sizeof(int) * (size_t)nb);
  return st;
}

static stof_status finish(block_ctx *c, int container, uint64_t open, unsigned char *done, int mode);

/* Level i of a nest over the positions list[0..n): the loops list[0..i) are open. */
static stof_status level(block_ctx *c, const int *list, int i, int n, int container, uint64_t open,
                         unsigned char *done, int mode) {
  const stof_sched *s = c->lc->l->s;
  const sched_block *b = sched_block_at(s, c->block);
  int dp_only = mode == MODE_INIT || mode == MODE_FINAL;
  stof_status st = place_items(c, &container, open, done, dp_only);
  if (st) return st;
  int here = i > 0 && !dp_only ? b->loop[list[i - 1]] : -1;
  if (here >= 0 && (st = place_attached(c, here, 0, container, done))) return st;
  if (i == n) {
    st = finish(c, container, open, done, mode);
  } else {
    int loop = b->loop[list[i]], inner = container;
    if (!sched_loop_at(s, loop)->elide) {
      int f = new_stmt(c->lc->l, LIR_FOR, c->block);
      if (f < 0) return STOF_ERR_NOMEM;
      lir_stmt_at(c->lc->l, f)->loop = loop;
      append(c->lc->l, container, f);
      inner = f;
    }
    st = level(c, list, i + 1, n, inner, open | (uint64_t)1 << list[i], done, mode);
  }
  if (!st && here >= 0) st = place_attached(c, here, 1, container, done);
  return st;
}

static stof_status finish(block_ctx *c, int container, uint64_t open, unsigned char *done, int mode) {
  const stof_sched *s = c->lc->l->s;
  const sched_block *b = sched_block_at(s, c->block);
  if (mode == MODE_INIT) return add_store(c, container, LIR_STORE_INIT);
  if (mode == MODE_UPDATE) return add_store(c, container, LIR_STORE_UPDATE);
  if (mode == MODE_FINAL) return add_store(c, container, LIR_STORE_FINAL);
  if (!sched_block_reduce(b)) return add_store(c, container, LIR_STORE_PLAIN);
  int list[STOF_SCHED_MAX_LOOPS], dp[STOF_SCHED_MAX_LOOPS], m = 0, ndp = 0;
  unsigned char done2[MAX_ITEMS], done3[MAX_ITEMS];
  memcpy(done2, done, sizeof done2);
  memcpy(done3, done, sizeof done3);
  for (int k = c->p; k < b->nloop; k++)
    if (sched_loop_at(s, b->loop[k])->iter == STOF_ITER_DATA_PAR) dp[ndp++] = k;
  stof_status st = level(c, dp, 0, ndp, container, open, done2, MODE_INIT);
  if (st) return st;
  for (int k = c->p; k < b->nloop; k++) list[m++] = k;
  st = level(c, list, 0, m, container, open, done, MODE_UPDATE);
  if (st || !c->lc->l->blk[c->block].acc) return st;
  return level(c, dp, 0, ndp, container, open, done3, MODE_FINAL);
}

/* Does block b's reduction accumulate in float32 (lir_blk.acc)? Its buffer is float16 or
 * bfloat16: summing there would round every partial result. */
static int float_acc(const sched_block *b) {
  return sched_block_reduce(b) && (b->out->dtype == STOF_DTYPE_F16 || b->out->dtype == STOF_DTYPE_BF16);
}

static lower_item *new_item(block_ctx *c) {
  if (c->nitem >= MAX_ITEMS) return NULL;
  lower_item *it = &c->items[c->nitem++];
  memset(it, 0, sizeof *it);
  it->axis = -1;
  return it;
}

/* A guard "a < bound" (ge: "a >= bound") on axis a (of value x) of the block, unless one
 * in force implies it. */
static stof_status axis_guard(block_ctx *c, int a, int ge, int64_t bound, uint64_t mask, const sched_aff *x) {
  sched_lir *l = c->lc->l;
  if (implied(c->outer, x, ge, bound)) return STOF_OK;
  lower_item *it = new_item(c);
  if (!it) return stof_ctx_error(l->ctx, STOF_ERR_UNSUPPORTED, "lower: block %s has too many guards",
                                 sched_block_name(l->s, c->block));
  it->is_guard = 1;
  it->mask = mask;
  it->known = 1;
  it->ge = ge;
  it->bound = bound;
  it->value = *x;
  int v = new_expr(l, LIR_E_AXIS, -1, -1, 0), k = const_expr(l, bound);
  if (v < 0 || k < 0) return STOF_ERR_NOMEM;
  lir_expr_at(l, v)->axis = a;
  if ((it->expr = new_expr(l, ge ? LIR_E_GE : LIR_E_LT, v, k, 0)) < 0) return STOF_ERR_NOMEM;
  return STOF_OK;
}

int64_t sched_loop_valid_bound(const stof_sched *s, int loop) {
  const sched_loop *lp = sched_loop_at(s, loop);
  if (lp->derive == STOF_DERIVE_SPLIT) {
    int64_t src = sched_loop_valid_bound(s, lp->source);
    int64_t need = src / lp->stride + (src % lp->stride != 0);
    return need < lp->extent ? need : lp->extent;
  }
  if (lp->derive == STOF_DERIVE_FUSE) {
    /* compact: the product of the sources' bounds; else one past the largest value whose
     * sources are all below their bounds. Both at most the extent (each bound is at most
     * its source's extent). */
    int compact = fused_compact(s, loop);
    int64_t n = compact ? 1 : 0;
    for (int id = 0; id < s->loops.len; id++) {
      const sched_loop *src = sched_loop_at(s, id);
      if (src->repl == SCHED_REPL_FUSE && src->repl_first == loop) {
        int64_t b = sched_loop_valid_bound(s, id);
        n = compact ? n * b : n + (b - 1) * src->repl_stride;
      }
    }
    return compact ? n : n + 1;
  }
  return lp->extent;
}

int64_t sched_loop_run_extent(const stof_sched *s, int loop) {
  const sched_loop *lp = sched_loop_at(s, loop);
  if (lp->ann == STOF_ANN_THREAD || lp->ann == STOF_ANN_VECTORIZE) return lp->extent;
  return sched_loop_valid_bound(s, loop);
}

/* Whether the split of loop needs its guard "loop < its valid bound b": whether the code's
 * iterations of its parts may reach b. A part that is a loop of the code takes its run
 * extent's values, a part split again only values below its own bound (its own guard, or
 * this same reasoning, keeps it there), a fused part every value below its extent. With
 * n_k those counts and s_k the parts' strides, the largest value reached is below b when
 * the product of the n_k is at most b: the last part short of its extent has
 * n_m = ceil(b / s_m), the parts after it run in full (their product is s_m), so
 * n_m * s_m >= b, and a product at most b leaves each part before it at 0: the largest
 * value is n_m * s_m - 1 < b (with no part short, it is the product - 1). */
static int split_needs_guard(const stof_sched *s, int loop) {
  const sched_loop *lp = sched_loop_at(s, loop);
  int64_t bound = sched_loop_valid_bound(s, loop), cover = 1;
  for (int k = 0; k < lp->repl_n; k++) {
    int id = lp->repl_first + k;
    const sched_loop *part = sched_loop_at(s, id);
    int64_t n = part->repl == SCHED_LEAF         ? sched_loop_run_extent(s, id)
                : part->repl == SCHED_REPL_SPLIT ? sched_loop_valid_bound(s, id)
                                                 : part->extent;
    if (__builtin_mul_overflow(cover, n, &cover) || cover > bound) return 1;
  }
  return 0;
}

static stof_status lower_block(lower_ctx *lc, int block, int parent, const guard_scope *outer) {
  sched_lir *l = lc->l;
  const stof_sched *s = l->s;
  const sched_block *b = sched_block_at(s, block);
  int attached_block = b->attach >= 0;
  block_ctx *c = stof_ctx_alloc(l->ctx, sizeof *c);
  if (!c) return STOF_ERR_NOMEM;
  c->lc = lc;
  c->block = block;
  c->outer = outer;
  stof_status st = STOF_OK;
  int bs = new_stmt(l, LIR_BLOCK, block);
  if (bs < 0) st = STOF_ERR_NOMEM;
  else append(l, parent, bs);
  /* lets */
  for (int a = 0; !st && a < b->naxis; a++) {
    lower_item *it = new_item(c);
    it->axis = a;
    it->reduce = sched_loop_at(s, b->root + a)->iter == STOF_ITER_REDUCE;
    int v = value_of(l, b->root + a, &it->mask);
    if (v >= 0 && attached_block && a < b->op->ndim)
      v = add_expr(l, aff_expr(l, &lc->bd->base[block * STOF_MAX_DIMS + a]), v);
    if ((it->expr = v) < 0) st = STOF_ERR_NOMEM;
  }
  /* guards of non-divisible splits */
  for (int id = 0; !st && id < s->loops.len; id++) {
    const sched_loop *lp = sched_loop_at(s, id);
    if (lp->block != block || lp->dead || lp->repl != SCHED_REPL_SPLIT) continue;
    if (!split_needs_guard(s, id)) continue;
    lower_item *it = new_item(c);
    if (!it) {
      st = stof_ctx_error(l->ctx, STOF_ERR_UNSUPPORTED, "lower: block %s has too many guards",
                          sched_block_name(s, block));
      break;
    }
    it->is_guard = 1;
    int v;
    if (lp->derive == STOF_DERIVE_ROOT && !(attached_block && lp->axis < b->op->ndim)) {
      v = value_of(l, id, &it->mask); /* for the mask; the condition reads the let */
      if (v >= 0 && (v = new_expr(l, LIR_E_AXIS, -1, -1, 0)) >= 0) lir_expr_at(l, v)->axis = lp->axis;
      it->known = 1; /* "axis < extent" */
      it->bound = lp->extent;
      sched_axis_aff_full(lc->bd, block, lp->axis, &it->value);
    } else {
      v = value_of(l, id, &it->mask);
    }
    int k = const_expr(l, sched_loop_valid_bound(s, id));
    if (v < 0 || k < 0 || (it->expr = new_expr(l, LIR_E_LT, v, k, 0)) < 0) st = STOF_ERR_NOMEM;
    it->reduce = lp->iter == STOF_ITER_REDUCE;
  }
  /* guards at the tensor's edges for an attached block's region */
  for (int a = 0; !st && attached_block && a < b->op->ndim; a++) {
    sched_aff x;
    int64_t lo, hi, ext = b->op->axis[a]->extent;
    sched_axis_aff_full(lc->bd, block, a, &x);
    sched_aff_minmax(s, &x, &lo, &hi);
    uint64_t mask = 0;
    if (x.bad || lo < 0 || hi >= ext) {
      int v = value_of(l, b->root + a, &mask);
      if (v < 0) st = STOF_ERR_NOMEM;
    }
    if (!st && (x.bad || lo < 0)) st = axis_guard(c, a, 1, 0, mask, &x);
    if (!st && (x.bad || hi >= ext)) st = axis_guard(c, a, 0, ext, mask, &x);
  }
  /* the store's indices */
  lir_blk *lb = &l->blk[block];
  for (int d = 0; !st && d < b->out->ndim; d++) {
    int e;
    if (b->rf_loop >= 0 && d == b->rf_pos) {
      uint64_t ignore = 0;
      e = value_of(l, b->rf_loop, &ignore);
    } else {
      e = new_expr(l, LIR_E_AXIS, -1, -1, 0);
      if (e >= 0) lir_expr_at(l, e)->axis = b->rf_loop >= 0 && d > b->rf_pos ? d - 1 : d;
    }
    if ((lb->store[d] = e) < 0) st = STOF_ERR_NOMEM;
  }
  if (!st) {
    c->p = b->nloop;
    if (sched_block_reduce(b))
      for (int k = b->nloop - 1; k >= 0; k--)
        if (sched_loop_at(s, b->loop[k])->iter == STOF_ITER_REDUCE) c->p = k;
    lb->acc = float_acc(b);
    lb->nacc = 0;
    for (int k = c->p; lb->acc && k < b->nloop; k++) {
      const sched_loop *lp = sched_loop_at(s, b->loop[k]);
      if (lp->iter == STOF_ITER_DATA_PAR && !lp->elide) lb->acc_loop[lb->nacc++] = b->loop[k];
    }
    int list[STOF_SCHED_MAX_LOOPS], n = sched_block_reduce(b) ? c->p : b->nloop;
    for (int k = 0; k < n; k++) list[k] = k;
    unsigned char done[MAX_ITEMS];
    memset(done, 0, sizeof done);
    st = level(c, list, 0, n, bs, 0, done, MODE_SHARED);
  }
  stof_ctx_dealloc(l->ctx, c, sizeof *c);
  return st;
}

/* ---------------------------------------------------------------- buffers */

const lir_buf *lir_find_buf(const sched_lir *l, const stof_op *op) {
  for (int i = 0; i < l->bufs.len; i++) {
    const lir_buf *b = (const lir_buf *)l->bufs.data + i;
    if (b->op == op) return b;
  }
  return NULL;
}

/* The loops over which block b accesses its buffers: where it stores (the shared loops of
 * a reduction: its init and update nests part there) or loads (all of them). */
static int access_path(const stof_sched *s, int b, int store, int *out, int cap) {
  const sched_block *x = sched_block_at(s, b);
  int n = sched_enclosing(s, b, out, cap);
  if (n < 0 || n + x->nloop > cap) return -1;
  int upto = x->nloop;
  if (store && sched_block_reduce(x))
    for (int k = x->nloop - 1; k >= 0; k--)
      if (sched_loop_at(s, x->loop[k])->iter == STOF_ITER_REDUCE) upto = k;
  for (int k = 0; k < upto; k++) out[n++] = x->loop[k];
  return n;
}

/* The region of internal buffer buf that one iteration of the innermost loop enclosing all
 * its accesses touches. */
static stof_status compact(lower_ctx *lc, lir_buf *buf) {
  sched_lir *l = lc->l;
  const stof_sched *s = l->s;
  const stof_op *t = buf->op;
  int *common = stof_ctx_alloc(l->ctx, sizeof(int) * 2 * MAX_ENCL);
  if (!common) return STOF_ERR_NOMEM;
  int *path = common + MAX_ENCL;
  int nc = access_path(s, buf->writer, 1, common, MAX_ENCL);
  int readers[256], nr = sched_readers(s, t, buf->writer, readers, 256);
  stof_status st = STOF_OK;
  if (nc < 0 || nr > 256) nc = 0; /* too deep or too many: keep it whole */
  for (int i = 0; i < nr && nc > 0; i++) {
    int np = access_path(s, readers[i], 0, path, MAX_ENCL);
    int k = 0;
    while (k < nc && k < np && common[k] == path[k]) k++;
    nc = np < 0 ? 0 : k;
  }
  if (nc > 0) {
    sched_range range[STOF_MAX_DIMS];
    memset(range, 0, sizeof range);
    sched_bounds_fix_scope(lc->bd, common, nc, buf->scope);
    sched_aff store[STOF_MAX_DIMS];
    sched_store_aff(lc->bd, buf->writer, store);
    for (int d = 0; d < t->ndim; d++) sched_aff_range(lc->bd, &store[d], t->shape[d], &range[d]);
    for (int i = 0; i < nr; i++) sched_read_ranges(lc->bd, readers[i], t, range);
    int whole = 1;
    for (int d = 0; d < t->ndim; d++) whole &= range[d].full;
    /* a shared buffer is placed at that loop even when its region is the whole tensor (one
     * CUDA block covers it all): it is the CUDA block's copy */
    if (!whole || buf->scope == SCHED_SCOPE_SHARED) {
      buf->at = common[nc - 1];
      for (int d = 0; d < t->ndim && !st; d++) {
        buf->ext[d] = range[d].ext;
        if (!range[d].full && (buf->min[d] = aff_expr(l, &range[d].lo)) < 0) st = STOF_ERR_NOMEM;
      }
    }
  }
  stof_ctx_dealloc(l->ctx, common, sizeof(int) * 2 * MAX_ENCL);
  return st;
}

/* The pragma "pad" = n of block (0 when none): its buffer's rows get n more elements, so
 * that rows read together fall in different shared-memory banks. */
static int block_pad(const stof_sched *s, int block) {
  for (int i = 0; block >= 0 && i < s->annots.len; i++) {
    const sched_annot *a = sched_annot_at(s, i);
    if (!a->is_block || a->id != block || strcmp(sched_str(s, a->key), "pad") != 0) continue;
    int n = atoi(sched_str(s, a->value));
    return n > 0 && n <= 64 ? n : 0;
  }
  return 0;
}

static int is_arg(const stof_op *op, int nargs, const stof_op *const *args) {
  for (int i = 0; i < nargs; i++)
    if (args[i] == op) return 1;
  return 0;
}

static stof_status add_buf(lower_ctx *lc, const stof_op *op, int writer, int nargs,
                           const stof_op *const *args) {
  sched_lir *l = lc->l;
  if (lir_find_buf(l, op)) return STOF_OK;
  lir_buf b;
  memset(&b, 0, sizeof b);
  b.op = op;
  b.writer = writer;
  b.at = -1;
  b.scope = writer >= 0 ? sched_block_at(l->s, writer)->scope : SCHED_SCOPE_GLOBAL;
  b.external = writer < 0 || sched_is_output_op(l->s, op) || is_arg(op, nargs, args);
  for (int d = 0; d < op->ndim; d++) {
    b.ext[d] = op->shape[d];
    b.min[d] = -1;
  }
  if (!b.external) {
    stof_status st = compact(lc, &b);
    if (st) return st;
    int pad = block_pad(l->s, writer);
    if (pad > 0 && op->ndim > 0) b.ext[op->ndim - 1] += pad;
  }
  return sched_vec_push(l->ctx, &l->bufs, &b, 1) < 0 ? STOF_ERR_NOMEM : STOF_OK;
}

/* ---------------------------------------------------------------- the whole schedule */

stof_status sched_lower(const stof_sched *s, int nargs, const stof_op *const *args,
                        sched_lir *out) {
  memset(out, 0, sizeof *out);
  out->s = s;
  out->ctx = s->ctx;
  out->first = -1;
  sched_vec_init(&out->stmts, sizeof(lir_stmt));
  sched_vec_init(&out->exprs, sizeof(lir_expr));
  sched_vec_init(&out->bufs, sizeof(lir_buf));
  int nb = s->blocks.len;
  out->nblk = nb;
  out->blk = stof_ctx_alloc(s->ctx, sizeof *out->blk * (size_t)(nb ? nb : 1));
  if (out->blk) memset(out->blk, 0, sizeof *out->blk * (size_t)(nb ? nb : 1));
  sched_bounds bd;
  stof_status st = out->blk ? sched_bounds_init(&bd, s) : STOF_ERR_NOMEM;
  if (st) {
    sched_lir_free(out);
    return st;
  }
  lower_ctx lc = {out, &bd};
  st = sched_bounds_infer(&bd);
  /* buffers: what live blocks write, then the inputs they read */
  for (int b = 0; !st && b < nb; b++)
    if (sched_block_at(s, b)->state == SCHED_B_LIVE) st = add_buf(&lc, sched_block_at(s, b)->out, b, nargs, args);
  for (int b = 0; !st && b < nb; b++) {
    if (sched_block_at(s, b)->state != SCHED_B_LIVE) continue;
    const stof_op *ts[64];
    int nt = sched_expr_loads(sched_block_at(s, b)->op->body, ts, 64);
    if (nt > 64) st = stof_ctx_error(s->ctx, STOF_ERR_UNSUPPORTED, "lower: block %s reads more than 64 tensors",
                                     sched_block_name(s, b));
    for (int k = 0; !st && k < nt; k++)
      if (sched_writer(s, ts[k]) < 0) st = add_buf(&lc, ts[k], -1, nargs, args);
  }
  if (!st) {
    out->root = new_stmt(out, LIR_BLOCK, -1);
    if (out->root < 0) st = STOF_ERR_NOMEM;
  }
  if (!st) {
    int list_buf[64], *list = nb <= 64 ? list_buf : stof_ctx_alloc(s->ctx, sizeof(int) * (size_t)nb);
    int n = 0;
    if (!list) st = STOF_ERR_NOMEM;
    if (!st) st = attached(&lc, -1, 0, list, &n);
    for (int i = 0; i < n && !st; i++) st = lower_block(&lc, list[i], out->root, NULL);
    if (list && list != list_buf) stof_ctx_dealloc(s->ctx, list, sizeof(int) * (size_t)nb);
  }
  sched_bounds_free(&bd);
  if (st) {
    sched_lir_free(out);
    return st;
  }
  out->first = lir_stmt_at(out, out->root)->first;
  return STOF_OK;
}

void sched_lir_free(sched_lir *l) {
  sched_vec_free(l->ctx, &l->stmts);
  sched_vec_free(l->ctx, &l->exprs);
  sched_vec_free(l->ctx, &l->bufs);
  if (l->blk) stof_ctx_dealloc(l->ctx, l->blk, sizeof *l->blk * (size_t)(l->nblk ? l->nblk : 1));
  l->blk = NULL;
}

/* ---------------------------------------------------------------- printing */

static int expr_prec(int kind) {
  switch (kind) {
  case LIR_E_LT:
  case LIR_E_GE: return 1;
  case LIR_E_ADD:
  case LIR_E_SUB: return 2;
  case LIR_E_MUL:
  case LIR_E_DIV:
  case LIR_E_MOD: return 3;
  default: return 4;
  }
}

static void print_iexpr(stof_buf *buf, const sched_lir *l, const sched_block *b, int e, int min_prec) {
  const lir_expr *x = lir_expr_at(l, e);
  int prec = expr_prec(x->kind);
  if (prec < min_prec) stof_buf_puts(buf, "(");
  switch (x->kind) {
  case LIR_E_CONST: stof_buf_printf(buf, "%lld", (long long)x->c); break;
  case LIR_E_LOOP: stof_buf_puts(buf, sched_loop_name(l->s, x->loop)); break;
  case LIR_E_AXIS: stof_buf_puts(buf, sched_block_axis(b, x->axis)->name); break;
  default: {
    static const char *const ops[] = {[LIR_E_ADD] = " + ", [LIR_E_SUB] = " - ", [LIR_E_MUL] = " * ",
                                      [LIR_E_DIV] = " / ", [LIR_E_MOD] = " % ", [LIR_E_LT] = " < ",
                                      [LIR_E_GE] = " >= "};
    print_iexpr(buf, l, b, x->a, prec);
    stof_buf_puts(buf, ops[x->kind]);
    print_iexpr(buf, l, b, x->b, prec + 1); /* left-associative */
  }
  }
  if (prec < min_prec) stof_buf_puts(buf, ")");
}

/* Is this let "axis = a loop of the same name" (nothing to print)? */
static int trivial_let(const sched_lir *l, const sched_block *b, const lir_stmt *st) {
  const lir_expr *x = lir_expr_at(l, st->expr);
  return x->kind == LIR_E_LOOP &&
         strcmp(sched_loop_name(l->s, x->loop), sched_block_axis(b, st->axis)->name) == 0;
}

/* "C[i, j]": block b's buffer at its store indices. */
static void print_access(stof_buf *buf, const sched_lir *l, int block) {
  const sched_block *b = sched_block_at(l->s, block);
  stof_buf_printf(buf, "%s[", b->out->name);
  for (int d = 0; d < b->out->ndim; d++) {
    if (d) stof_buf_puts(buf, ", ");
    print_iexpr(buf, l, b, l->blk[block].store[d], 0);
  }
  stof_buf_puts(buf, "]");
}

/* "C.acc" or "C.acc[i.inner, j.inner]": block's float32 accumulator at its loops. */
static void print_acc(stof_buf *buf, const sched_lir *l, int block) {
  const lir_blk *lb = &l->blk[block];
  stof_buf_printf(buf, "%s.acc", sched_block_at(l->s, block)->out->name);
  for (int k = 0; k < lb->nacc; k++)
    stof_buf_printf(buf, "%s%s", k ? ", " : "[", sched_loop_name(l->s, lb->acc_loop[k]));
  if (lb->nacc) stof_buf_puts(buf, "]");
}

/* The loop block's accumulator lives per iteration of: the innermost loop around its init
 * nest (-1: the function). */
static int acc_at(const stof_sched *s, int block) {
  const sched_block *b = sched_block_at(s, block);
  int p = 0;
  while (p < b->nloop && sched_loop_at(s, b->loop[p])->iter != STOF_ITER_REDUCE) p++;
  for (int k = p - 1; k >= 0; k--)
    if (!sched_loop_at(s, b->loop[k])->elide) return b->loop[k];
  return b->attach;
}

/* The identity of a reduction as text. */
static const char *identity_text(stof_reduce_kind c, stof_dtype d) {
  int isf = stof_dtype_is_float(d), i64 = d == STOF_DTYPE_I64;
  if (c == STOF_REDUCE_SUM) return isf ? "0.0" : "0";
  if (c == STOF_REDUCE_MAX) return isf ? "-inf" : i64 ? "-9223372036854775808" : "-2147483648";
  return isf ? "inf" : i64 ? "9223372036854775807" : "2147483647";
}

/* Appends stof_expr_print's text of e; strip drops one pair of outer parentheses. */
static stof_status print_te(stof_buf *buf, stof_ctx *ctx, const stof_expr *e, int strip) {
  char *t = NULL;
  stof_status st = stof_expr_print(ctx, e, &t);
  if (st) return st;
  size_t n = strlen(t);
  int depth = 0, outer = strip && n >= 2 && t[0] == '(' && t[n - 1] == ')';
  for (size_t i = 0; outer && i + 1 < n; i++) {
    depth += t[i] == '(' ? 1 : t[i] == ')' ? -1 : 0;
    if (depth == 0) outer = 0; /* the first '(' closes before the end */
  }
  if (outer) {
    t[n - 1] = 0;
    stof_buf_puts(buf, t + 1);
  } else {
    stof_buf_puts(buf, t);
  }
  stof_ctx_dealloc(ctx, t, n + 1);
  return STOF_OK;
}

/* " [parallel, key=value]" */
static void print_loop_ann(stof_buf *buf, const stof_sched *s, int loop) {
  const sched_loop *lp = sched_loop_at(s, loop);
  int n = 0;
  if (lp->ann == STOF_ANN_THREAD)
    stof_buf_printf(buf, " [%s", stof_thread_tag_name(lp->thread)), n++;
  else if (lp->ann != STOF_ANN_NONE)
    stof_buf_printf(buf, " [%s", stof_ann_kind_name(lp->ann)), n++;
  for (int i = 0; i < s->annots.len; i++) {
    const sched_annot *a = sched_annot_at(s, i);
    if (a->is_block || a->id != loop) continue;
    stof_buf_printf(buf, "%s%s=%s", n++ ? ", " : " [", sched_str(s, a->key), sched_str(s, a->value));
  }
  if (n) stof_buf_puts(buf, "]");
}

/* "# block D: key=value, ..." when the block has annotations. */
static void print_block_annots(stof_buf *buf, const stof_sched *s, int block, int depth) {
  int n = 0;
  for (int i = 0; i < s->annots.len; i++) {
    const sched_annot *a = sched_annot_at(s, i);
    if (!a->is_block || a->id != block) continue;
    if (!n++) {
      sched_indent(buf, depth);
      stof_buf_printf(buf, "# block %s:", sched_block_name(s, block));
    }
    stof_buf_printf(buf, "%s %s=%s", n > 1 ? "," : "", sched_str(s, a->key), sched_str(s, a->value));
  }
  if (n) stof_buf_puts(buf, "\n");
}

static stof_status print_stmts(stof_buf *buf, const sched_lir *l, int first, int depth) {
  const stof_sched *s = l->s;
  for (int i = first; i >= 0; i = lir_stmt_at(l, i)->next) {
    const lir_stmt *st = lir_stmt_at(l, i);
    const sched_block *b = sched_block_at(s, st->block);
    const stof_op *op = b->op;
    switch (st->kind) {
    case LIR_BLOCK: print_block_annots(buf, s, st->block, depth); break;
    case LIR_FOR:
      sched_indent(buf, depth);
      stof_buf_printf(buf, "for %s in 0..%lld", sched_loop_name(s, st->loop),
                       (long long)sched_loop_run_extent(s, st->loop));
      print_loop_ann(buf, s, st->loop);
      stof_buf_puts(buf, ":\n");
      break;
    case LIR_LET:
      if (trivial_let(l, b, st)) break;
      sched_indent(buf, depth);
      stof_buf_printf(buf, "let %s = ", sched_block_axis(b, st->axis)->name);
      print_iexpr(buf, l, b, st->expr, 0);
      stof_buf_puts(buf, "\n");
      break;
    case LIR_IF:
      sched_indent(buf, depth);
      stof_buf_puts(buf, "if ");
      print_iexpr(buf, l, b, st->expr, 0);
      stof_buf_puts(buf, ":\n");
      break;
    case LIR_STORE: {
      /* the element combined into: the buffer's, or the float32 accumulator's */
      int acc = l->blk[st->block].acc && st->store != LIR_STORE_PLAIN && st->store != LIR_STORE_FINAL;
      sched_indent(buf, depth);
      if (acc)
        print_acc(buf, l, st->block);
      else
        print_access(buf, l, st->block);
      stof_buf_puts(buf, " = ");
      const stof_expr *red = sched_block_reduce(b);
      stof_status rc = STOF_OK;
      if (st->store == LIR_STORE_PLAIN) {
        rc = print_te(buf, s->ctx, op->body, 1);
      } else if (st->store == LIR_STORE_FINAL) {
        stof_buf_printf(buf, "%s(", stof_dtype_name(b->out->dtype));
        print_acc(buf, l, st->block);
        stof_buf_puts(buf, ")");
      } else if (st->store == LIR_STORE_INIT) {
        stof_buf_puts(buf, identity_text(red->u.reduce.combiner, op->dtype));
      } else if (red->u.reduce.combiner == STOF_REDUCE_SUM) {
        if (acc)
          print_acc(buf, l, st->block);
        else
          print_access(buf, l, st->block);
        stof_buf_puts(buf, " + ");
        rc = print_te(buf, s->ctx, red->u.reduce.src, 0);
      } else {
        stof_buf_printf(buf, "%s(", stof_reduce_kind_name(red->u.reduce.combiner));
        if (acc)
          print_acc(buf, l, st->block);
        else
          print_access(buf, l, st->block);
        stof_buf_puts(buf, ", ");
        rc = print_te(buf, s->ctx, red->u.reduce.src, 1);
        stof_buf_puts(buf, ")");
      }
      if (rc) return rc;
      stof_buf_puts(buf, "\n");
      break;
    }
    default: break;
    }
    int inner = depth + (st->kind == LIR_FOR || st->kind == LIR_IF);
    if (st->first >= 0) {
      stof_status rc = print_stmts(buf, l, st->first, inner);
      if (rc) return rc;
    }
  }
  return STOF_OK;
}

stof_status stof_sched_print_loop_nest(const stof_sched *s, char **out) {
  *out = NULL;
  sched_lir l;
  stof_status st = sched_lower(s, 0, NULL, &l);
  if (st) return st;
  stof_buf buf;
  stof_buf_init(&buf, s->ctx);
  for (int g = 0; g < s->groups.len; g++) {
    const sched_group *gr = sched_group_at(s, g);
    if (!gr->alive) continue;
    stof_buf_printf(&buf, "group %d:", g);
    for (int k = 0; k < gr->nop; k++)
      stof_buf_printf(&buf, "%s %s", k ? "," : "", stof_graph_op(s->g, (int)sched_num(s, gr->first)[k])->name);
    stof_buf_puts(&buf, "\n");
  }
  for (int i = 0; i < l.bufs.len; i++) {
    const lir_buf *lb = (const lir_buf *)l.bufs.data + i;
    if (lb->external) continue;
    const stof_op *op = lb->op;
    stof_buf_printf(&buf, "alloc %s: %s[", op->name, stof_dtype_name(op->dtype));
    for (int d = 0; d < op->ndim; d++) stof_buf_printf(&buf, "%s%lld", d ? ", " : "", (long long)lb->ext[d]);
    stof_buf_puts(&buf, "]");
    if (lb->scope != SCHED_SCOPE_GLOBAL) stof_buf_printf(&buf, " %s", sched_scope_name(lb->scope));
    if (lb->at >= 0) stof_buf_printf(&buf, " at %s", sched_loop_name(s, lb->at));
    stof_buf_puts(&buf, "\n");
  }
  for (int b = 0; b < l.nblk; b++) { /* float32 accumulators of float16 reductions */
    const lir_blk *lb = &l.blk[b];
    if (sched_block_at(s, b)->state != SCHED_B_LIVE || !lb->acc) continue;
    stof_buf_printf(&buf, "alloc %s.acc: float32[", sched_block_at(s, b)->out->name);
    for (int k = 0; k < lb->nacc; k++)
      stof_buf_printf(&buf, "%s%lld", k ? ", " : "", (long long)sched_loop_run_extent(s, lb->acc_loop[k]));
    stof_buf_puts(&buf, "] local");
    int at = acc_at(s, b);
    if (at >= 0) stof_buf_printf(&buf, " at %s", sched_loop_name(s, at));
    stof_buf_puts(&buf, "\n");
  }
  st = print_stmts(&buf, &l, l.first, 0);
  sched_lir_free(&l);
  if (st) {
    stof_buf_free(&buf);
    return st;
  }
  return stof_buf_finish(&buf, out);
}
