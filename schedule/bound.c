/*
 * Bound inference: the region of its axes that an attached block computes per iteration
 * of the loop it is attached at, and the regions buffers are accessed in.
 *
 * Values are affine forms over loops (sched_aff): a block's axis is the sum over its
 * leaf loops of part * stride (a fused source is one atomic term ranging over its
 * extent), plus, for an attached block, a base affine in the loops that enclose it. An
 * index expression of a load is affine in the block's axes with constant coefficients
 * (the TE loads we meet always are); anything else is "bad" and falls back to the whole
 * dimension. An interval is taken with some loops fixed (those enclosing the point of
 * interest: symbolic) and the others ranging over [0, extent): the result is a symbolic
 * lower bound and a constant extent.
 *
 *  - compute_at (forward): the block's data-parallel axis d ranges over the union of what
 *    its consumers read of its buffer along d, the loops enclosing the block fixed;
 *  - reverse_compute_at: the block's axis a, which reads its producer's buffer along d,
 *    ranges over what the producer writes along d with the enclosing loops fixed.
 * For a block or buffer of scope "shared", loops bound to threadIdx.x/y/z are never fixed:
 * one copy serves all the threads of a CUDA block, so its region covers all of them.
 * The extents were fixed when the block moved (its loops were made then); the bases are
 * worked out again at every lowering, so later splits and fuses of the enclosing loops
 * are followed, and an extent that no longer suffices is an error.
 */
#include <stdio.h>
#include <string.h>

#include "schedule_int.h"

/* ---------------------------------------------------------------- affine forms */

static void aff_zero(sched_aff *x) { memset(x, 0, sizeof *x); }

static void aff_term(sched_aff *x, int loop, int64_t k) {
  if (x->bad || k == 0) return;
  int i = 0;
  while (i < x->n && x->loop[i] < loop) i++;
  if (i < x->n && x->loop[i] == loop) {
    if (__builtin_add_overflow(x->k[i], k, &x->k[i])) x->bad = 1;
    if (x->k[i] == 0) {
      memmove(&x->loop[i], &x->loop[i + 1], sizeof(int) * (size_t)(x->n - i - 1));
      memmove(&x->k[i], &x->k[i + 1], sizeof(int64_t) * (size_t)(x->n - i - 1));
      x->n--;
    }
    return;
  }
  if (x->n == SCHED_AFF_MAX) {
    x->bad = 1;
    return;
  }
  memmove(&x->loop[i + 1], &x->loop[i], sizeof(int) * (size_t)(x->n - i));
  memmove(&x->k[i + 1], &x->k[i], sizeof(int64_t) * (size_t)(x->n - i));
  x->loop[i] = loop;
  x->k[i] = k;
  x->n++;
}

/* x += y * scale */
static void aff_add(sched_aff *x, const sched_aff *y, int64_t scale) {
  if (y->bad) x->bad = 1;
  if (x->bad) return;
  for (int i = 0; i < y->n; i++) {
    int64_t k;
    if (__builtin_mul_overflow(y->k[i], scale, &k)) {
      x->bad = 1;
      return;
    }
    aff_term(x, y->loop[i], k);
  }
  int64_t c;
  if (__builtin_mul_overflow(y->c, scale, &c) || __builtin_add_overflow(x->c, c, &x->c)) x->bad = 1;
}

static int aff_same_terms(const sched_aff *a, const sched_aff *b) {
  if (a->n != b->n) return 0;
  for (int i = 0; i < a->n; i++)
    if (a->loop[i] != b->loop[i] || a->k[i] != b->k[i]) return 0;
  return 1;
}

/* Is loop's value fixed when the loops marked in fixed are (any: is some leaf it reads)? */
static int loop_fixed_any(const stof_sched *s, const unsigned char *fixed, int loop, int any) {
  const sched_loop *lp = sched_loop_at(s, loop);
  if (lp->repl == SCHED_LEAF) return fixed[loop];
  if (lp->repl == SCHED_REPL_FUSE) return loop_fixed_any(s, fixed, lp->repl_first, any);
  for (int k = 0; k < lp->repl_n; k++)
    if (loop_fixed_any(s, fixed, lp->repl_first + k, any) == any) return any;
  return !any;
}

static int loop_fixed(const stof_sched *s, const unsigned char *fixed, int loop) {
  return loop_fixed_any(s, fixed, loop, 0);
}

/* Do the parts of split loop lp cover more than its extent (a guard keeps it below)? */
static int overshoots(const stof_sched *s, const sched_loop *lp) {
  int64_t cover = 1;
  for (int k = 0; k < lp->repl_n; k++) cover *= sched_loop_at(s, lp->repl_first + k)->extent;
  return cover > lp->extent;
}

static void loop_aff(const stof_sched *s, const unsigned char *fixed, int loop, sched_aff *out);

/* A fused source, fused / q % extent (no modulo for the outermost), as an affine form of the
 * fused loop's terms when it is one: the terms of the fused loop whose factor q does not
 * divide must stay in [0, q) together (they vanish in the division), and the quotient's
 * terms whose factor extent does not divide in [0, extent) (the others vanish in the
 * modulo). So b = bs / S and s = bs % S of a fused (b, s) split into tiles of a multiple of
 * S are exact: each tile reads one b and a run of s, not every b and s. 0 when not affine. */
static int fused_source_aff(const stof_sched *s, const unsigned char *fixed, const sched_loop *lp, sched_aff *out) {
  sched_aff f, hi, lo, keep;
  /* a source with a gap (valid bound below its extent: a split that overshoots) makes the
   * lowering decode the fused loop compactly (lower.c), not by repl_stride and extent:
   * atomic then */
  for (int id = 0; id < s->loops.len; id++) {
    const sched_loop *o = sched_loop_at(s, id);
    if (o->repl == SCHED_REPL_FUSE && o->repl_first == lp->repl_first && sched_loop_valid_bound(s, id) != o->extent)
      return 0;
  }
  loop_aff(s, fixed, lp->repl_first, &f);
  int64_t q = lp->repl_stride, e = lp->extent, mn, mx;
  if (f.bad || f.c < 0 || q < 1 || e < 1) return 0;
  aff_zero(&hi);
  aff_zero(&lo);
  hi.c = f.c / q;
  lo.c = f.c % q;
  for (int i = 0; i < f.n; i++) {
    if (f.k[i] % q == 0) aff_term(&hi, f.loop[i], f.k[i] / q);
    else if (f.k[i] > 0 && f.k[i] < q) aff_term(&lo, f.loop[i], f.k[i]);
    else return 0;
  }
  sched_aff_minmax(s, &lo, &mn, &mx);
  if (mn < 0 || mx >= q || hi.bad || lo.bad) return 0;
  if (!lp->repl_outer) { /* % extent */
    aff_zero(&keep);
    keep.c = hi.c % e;
    for (int i = 0; i < hi.n; i++)
      if (hi.k[i] % e) aff_term(&keep, hi.loop[i], hi.k[i]);
    hi = keep;
  }
  sched_aff_minmax(s, &hi, &mn, &mx);
  if (mn < 0 || mx >= e || hi.bad) return 0;
  *out = hi;
  return 1;
}

/* As sched_loop_aff; a split loop whose parts overshoot and none of whose leaves are fixed
 * is one atomic term (its guard keeps it in [0, extent)), tighter than its parts. */
static void loop_aff(const stof_sched *s, const unsigned char *fixed, int loop, sched_aff *out) {
  aff_zero(out);
  const sched_loop *lp = sched_loop_at(s, loop);
  if (lp->repl == SCHED_LEAF) {
    if (!lp->elide) aff_term(out, loop, 1);
    return;
  }
  if (lp->repl == SCHED_REPL_SPLIT) {
    if (fixed && overshoots(s, lp) && !loop_fixed_any(s, fixed, loop, 1)) {
      aff_term(out, loop, 1);
      return;
    }
    for (int k = 0; k < lp->repl_n; k++) {
      sched_aff part;
      loop_aff(s, fixed, lp->repl_first + k, &part);
      aff_add(out, &part, sched_loop_at(s, lp->repl_first + k)->stride);
    }
    return;
  }
  if (!fused_source_aff(s, fixed, lp, out)) aff_term(out, loop, 1); /* atomic */
}

void sched_loop_aff(const stof_sched *s, int loop, sched_aff *out) { loop_aff(s, NULL, loop, out); }

void sched_aff_minmax(const stof_sched *s, const sched_aff *x, int64_t *lo, int64_t *hi) {
  *lo = *hi = x->c;
  for (int i = 0; i < x->n; i++) {
    int64_t r = (sched_loop_at(s, x->loop[i])->extent - 1) * x->k[i];
    if (r > 0) *hi += r;
    else *lo += r;
  }
}

void sched_aff_range(const sched_bounds *bd, const sched_aff *x, int64_t dim, sched_range *out) {
  aff_zero(&out->lo);
  out->full = 0;
  if (!x->bad) {
    int64_t clo = x->c, chi = x->c;
    for (int i = 0; i < x->n; i++) {
      if (loop_fixed(bd->s, bd->fixed, x->loop[i])) {
        aff_term(&out->lo, x->loop[i], x->k[i]);
        continue;
      }
      int64_t r = (sched_loop_at(bd->s, x->loop[i])->extent - 1) * x->k[i];
      if (r > 0) chi += r;
      else clo += r;
    }
    out->lo.c = clo;
    out->ext = chi - clo + 1;
    if (out->ext < dim) return;
  }
  aff_zero(&out->lo);
  out->ext = dim;
  out->full = 1;
}

void sched_range_union(sched_range *r, const sched_range *x, int64_t dim) {
  if (r->ext == 0) {
    *r = *x;
    return;
  }
  if (!r->full && !x->full && aff_same_terms(&r->lo, &x->lo)) {
    int64_t lo = r->lo.c < x->lo.c ? r->lo.c : x->lo.c;
    int64_t hi = r->lo.c + r->ext > x->lo.c + x->ext ? r->lo.c + r->ext : x->lo.c + x->ext;
    if (hi - lo < dim) {
      r->lo.c = lo;
      r->ext = hi - lo;
      return;
    }
  }
  aff_zero(&r->lo);
  r->ext = dim;
  r->full = 1;
}

/* ---------------------------------------------------------------- blocks */

int sched_enclosing(const stof_sched *s, int b, int *out, int cap) {
  const sched_block *x = sched_block_at(s, b);
  if (x->attach < 0) return 0;
  int q = sched_loop_at(s, x->attach)->block;
  int n = sched_enclosing(s, q, out, cap);
  if (n < 0) return -1;
  int pos = sched_loop_pos(s, x->attach);
  if (pos < 0 || n + pos + 1 > cap) return -1;
  const sched_block *qb = sched_block_at(s, q);
  for (int k = 0; k <= pos; k++) out[n++] = qb->loop[k];
  return n;
}

void sched_bounds_fix(sched_bounds *bd, const int *list, int n) {
  memset(bd->fixed, 0, (size_t)bd->s->loops.len);
  for (int i = 0; i < n; i++) bd->fixed[list[i]] = 1;
}

void sched_bounds_fix_scope(sched_bounds *bd, const int *list, int n, int scope) {
  sched_bounds_fix(bd, list, n);
  if (scope != SCHED_SCOPE_SHARED) return;
  for (int i = 0; i < n; i++) {
    const sched_loop *lp = sched_loop_at(bd->s, list[i]);
    if (lp->ann == STOF_ANN_THREAD && lp->thread >= STOF_THREAD_THREAD_X) bd->fixed[list[i]] = 0;
  }
}

static void axis_aff(const sched_bounds *bd, const unsigned char *fixed, int b, int a, sched_aff *out) {
  const sched_block *x = sched_block_at(bd->s, b);
  loop_aff(bd->s, fixed, x->root + a, out);
  if (a < x->op->ndim && x->attach >= 0) aff_add(out, &bd->base[b * STOF_MAX_DIMS + a], 1);
}

void sched_axis_aff(const sched_bounds *bd, int b, int a, sched_aff *out) {
  axis_aff(bd, bd->fixed, b, a, out);
}

void sched_axis_aff_full(const sched_bounds *bd, int b, int a, sched_aff *out) {
  axis_aff(bd, NULL, b, a, out);
}

void sched_expr_aff(const sched_bounds *bd, int b, const stof_expr *e, sched_aff *out) {
  const sched_block *x = sched_block_at(bd->s, b);
  sched_aff y;
  aff_zero(out);
  switch (e->kind) {
  case STOF_EXPR_VAR:
    for (int a = 0; a < x->naxis; a++)
      if (sched_block_axis(x, a) == e->u.var) {
        sched_axis_aff(bd, b, a, out);
        return;
      }
    break;
  case STOF_EXPR_INT: out->c = e->u.ival; return;
  case STOF_EXPR_ADD:
  case STOF_EXPR_SUB:
    sched_expr_aff(bd, b, e->u.op.a, out);
    sched_expr_aff(bd, b, e->u.op.b, &y);
    aff_add(out, &y, e->kind == STOF_EXPR_ADD ? 1 : -1);
    return;
  case STOF_EXPR_MUL:
    sched_expr_aff(bd, b, e->u.op.a, out);
    sched_expr_aff(bd, b, e->u.op.b, &y);
    if (!y.bad && y.n == 0) {
      sched_aff t = *out;
      aff_zero(out);
      aff_add(out, &t, y.c);
      return;
    }
    if (!out->bad && out->n == 0) {
      int64_t c = out->c;
      aff_zero(out);
      aff_add(out, &y, c);
      return;
    }
    break;
  case STOF_EXPR_NEG:
    sched_expr_aff(bd, b, e->u.op.a, &y);
    aff_add(out, &y, -1);
    return;
  case STOF_EXPR_CAST:
    if (!stof_dtype_is_float(e->dtype) && !stof_dtype_is_float(e->u.op.a->dtype) &&
        e->dtype != STOF_DTYPE_BOOL) {
      sched_expr_aff(bd, b, e->u.op.a, out);
      return;
    }
    break;
  default: break;
  }
  aff_zero(out);
  out->bad = 1;
}

void sched_store_aff(const sched_bounds *bd, int b, sched_aff *out) {
  const sched_block *x = sched_block_at(bd->s, b);
  for (int d = 0; d < x->out->ndim; d++) {
    if (x->rf_loop < 0 || d < x->rf_pos)
      sched_axis_aff(bd, b, d, &out[d]);
    else if (d == x->rf_pos)
      loop_aff(bd->s, bd->fixed, x->rf_loop, &out[d]);
    else
      sched_axis_aff(bd, b, d - 1, &out[d]);
  }
}

/* ---------------------------------------------------------------- inference */

stof_status sched_bounds_init(sched_bounds *bd, const stof_sched *s) {
  memset(bd, 0, sizeof *bd);
  bd->s = s;
  bd->ctx = s->ctx;
  bd->nblock = s->blocks.len;
  size_t nb = (size_t)(bd->nblock ? bd->nblock : 1), nl = (size_t)(s->loops.len ? s->loops.len : 1);
  bd->state = stof_ctx_alloc(s->ctx, nb);
  bd->base = stof_ctx_alloc(s->ctx, sizeof *bd->base * nb * STOF_MAX_DIMS);
  bd->need = stof_ctx_alloc(s->ctx, sizeof *bd->need * nb * STOF_MAX_DIMS);
  bd->fixed = stof_ctx_alloc(s->ctx, nl);
  bd->check = 1;
  if (!bd->state || !bd->base || !bd->need || !bd->fixed) {
    sched_bounds_free(bd);
    return STOF_ERR_NOMEM;
  }
  return STOF_OK;
}

void sched_bounds_free(sched_bounds *bd) {
  stof_ctx *c = bd->ctx;
  size_t nb = (size_t)(bd->nblock ? bd->nblock : 1), nl = (size_t)(bd->s->loops.len ? bd->s->loops.len : 1);
  if (bd->state) stof_ctx_dealloc(c, bd->state, nb);
  if (bd->base) stof_ctx_dealloc(c, bd->base, sizeof *bd->base * nb * STOF_MAX_DIMS);
  if (bd->need) stof_ctx_dealloc(c, bd->need, sizeof *bd->need * nb * STOF_MAX_DIMS);
  if (bd->fixed) stof_ctx_dealloc(c, bd->fixed, nl);
  memset(bd, 0, sizeof *bd);
}

/* Calls fn for every load of tensor t in e. */
typedef struct load_visit {
  const sched_bounds *bd;
  int block;
  const stof_op *t;
  sched_range *range;     /* per dimension of t */
  const sched_block *self; /* reverse: the block whose axes are mapped */
  int *map;               /* reverse: per axis of self, the dimension it reads (-1 none; -2 several) */
  int nload;
} load_visit;

static void visit_loads(load_visit *v, const stof_expr *e) {
  if (!e) return;
  switch (e->kind) {
  case STOF_EXPR_INT:
  case STOF_EXPR_FLOAT:
  case STOF_EXPR_VAR: return;
  case STOF_EXPR_LOAD:
    for (int d = 0; d < e->u.load.nidx; d++) visit_loads(v, e->u.load.idx[d]);
    if (e->u.load.tensor != v->t) return;
    v->nload++;
    for (int d = 0; d < e->u.load.nidx; d++) {
      const stof_expr *ix = e->u.load.idx[d];
      if (v->range) {
        sched_aff x;
        sched_range r;
        sched_expr_aff(v->bd, v->block, ix, &x);
        sched_aff_range(v->bd, &x, v->t->shape[d], &r);
        sched_range_union(&v->range[d], &r, v->t->shape[d]);
      }
      if (v->map && ix->kind == STOF_EXPR_VAR)
        for (int a = 0; a < v->self->op->ndim; a++)
          if (v->self->op->axis[a] == ix->u.var) v->map[a] = v->map[a] == -1 || v->map[a] == d ? d : -2;
    }
    return;
  case STOF_EXPR_REDUCE: visit_loads(v, e->u.reduce.src); return;
  default:
    visit_loads(v, e->u.op.a);
    visit_loads(v, e->u.op.b);
    visit_loads(v, e->u.op.c);
  }
}

/* The ranges of buffer t that block b reads, with the loops in bd->fixed fixed, united
 * into range[0..rank). */
void sched_read_ranges(const sched_bounds *bd, int b, const stof_op *t, sched_range *range) {
  load_visit v;
  memset(&v, 0, sizeof v);
  v.bd = bd;
  v.block = b;
  v.t = t;
  v.range = range;
  visit_loads(&v, sched_block_at(bd->s, b)->op->body);
}

/* Per data-parallel axis a of block b: the dimension of t it reads t along, at every load
 * (-1: none; -2: several). */
void sched_axis_map(const stof_sched *s, int b, const stof_op *t, int *map) {
  load_visit v;
  memset(&v, 0, sizeof v);
  v.t = t;
  v.self = sched_block_at(s, b);
  v.map = map;
  for (int a = 0; a < v.self->op->ndim; a++) map[a] = -1;
  visit_loads(&v, v.self->op->body);
}

static stof_status infer(sched_bounds *bd, int b);

/* The region of block b (forward-attached): what its readers need. */
static stof_status infer_forward(sched_bounds *bd, int b, sched_range *range) {
  const stof_sched *s = bd->s;
  const sched_block *x = sched_block_at(s, b);
  int readers[256], nr = sched_readers(s, x->out, b, readers, 256);
  if (nr > 256) return stof_ctx_error(bd->ctx, STOF_ERR_UNSUPPORTED, "lower: block %s has too many readers",
                                      sched_block_name(s, b));
  stof_status st;
  for (int i = 0; i < nr; i++) {
    if (sched_attached_under(s, readers[i], b)) continue;
    if (!sched_under_loop(s, readers[i], x->attach))
      return stof_ctx_error(bd->ctx, STOF_ERR_SCHEDULE,
                            "lower: block %s reads block %s outside loop %s, where %s is computed",
                            sched_block_name(s, readers[i]), sched_block_name(s, b),
                            sched_loop_name(s, x->attach), sched_block_name(s, b));
    if ((st = infer(bd, readers[i]))) return st;
  }
  int encl[512], ne = sched_enclosing(s, b, encl, 512);
  if (ne < 0) return stof_ctx_error(bd->ctx, STOF_ERR_UNSUPPORTED, "lower: block %s is nested too deeply",
                                    sched_block_name(s, b));
  sched_bounds_fix_scope(bd, encl, ne, x->scope);
  int outside = 0;
  for (int i = 0; i < nr; i++)
    if (!sched_attached_under(s, readers[i], b)) {
      sched_read_ranges(bd, readers[i], x->out, range);
      outside = 1;
    }
  if (outside) return STOF_OK;
  /* every reader lies inside b's own nest (a write-back computed after b's loops, say a warp
   * accumulator's epilogue filling a shared buffer): b computes what the readers of those
   * readers need of it, when every such reader reads b at its own axes (its element is b's),
   * is not an output, and has readers, none of them inside b; otherwise b computes all of its
   * axes (the range stays empty: the whole tensor) */
  for (int i = 0; i < nr; i++) {
    const sched_block *r = sched_block_at(s, readers[i]);
    int map[STOF_MAX_DIMS], same = r->op->ndim == x->op->ndim && !sched_is_output_op(s, r->out);
    for (int a = 0; same && a < x->op->ndim; a++) same = r->op->shape[a] == x->op->shape[a];
    if (same) sched_axis_map(s, readers[i], x->out, map);
    for (int a = 0; same && a < x->op->ndim; a++) same = map[a] == a;
    int r2[256], n2 = same ? sched_readers(s, r->out, readers[i], r2, 256) : 0;
    if (n2 > 256) return stof_ctx_error(bd->ctx, STOF_ERR_UNSUPPORTED, "lower: block %s has too many readers",
                                        sched_block_name(s, readers[i]));
    if (n2 < 1) return STOF_OK;
    for (int k = 0; k < n2; k++) {
      if (sched_attached_under(s, r2[k], b)) return STOF_OK;
      if (!sched_under_loop(s, r2[k], x->attach))
        return stof_ctx_error(bd->ctx, STOF_ERR_SCHEDULE,
                              "lower: block %s reads block %s outside loop %s, where %s (and %s, which it reads) "
                              "are computed",
                              sched_block_name(s, r2[k]), sched_block_name(s, readers[i]), sched_loop_name(s, x->attach),
                              sched_block_name(s, readers[i]), sched_block_name(s, b));
    }
  }
  for (int i = 0; i < nr; i++) {
    const sched_block *r = sched_block_at(s, readers[i]);
    int r2[256], n2 = sched_readers(s, r->out, readers[i], r2, 256);
    for (int k = 0; k < n2; k++)
      if ((st = infer(bd, r2[k]))) return st;
    sched_bounds_fix_scope(bd, encl, ne, r->scope);
    for (int k = 0; k < n2; k++) sched_read_ranges(bd, r2[k], r->out, range);
  }
  return STOF_OK;
}

int sched_rev_source(const stof_sched *s, int b) {
  const sched_block *x = sched_block_at(s, b);
  const stof_op *ts[64];
  int nt = sched_expr_loads(x->op->body, ts, 64);
  for (int k = 0; k < nt && k < 64; k++) {
    int w = sched_writer(s, ts[k]);
    if (w >= 0 && w != b && sched_under_loop(s, w, x->attach)) return w;
  }
  return -1;
}

/* A load of t in e that reads t other than along map (an axis of self as the whole index
 * of its dimension) in a dimension not written whole (whole[d] == 0), or NULL. */
static const stof_expr *stray_load(const stof_expr *e, const stof_op *t, const sched_block *self,
                                   const int *map, const int *whole) {
  if (!e) return NULL;
  switch (e->kind) {
  case STOF_EXPR_INT:
  case STOF_EXPR_FLOAT:
  case STOF_EXPR_VAR: return NULL;
  case STOF_EXPR_LOAD:
    for (int d = 0; d < e->u.load.nidx; d++) {
      const stof_expr *r = stray_load(e->u.load.idx[d], t, self, map, whole);
      if (r) return r;
    }
    if (e->u.load.tensor != t) return NULL;
    for (int d = 0; d < e->u.load.nidx; d++) {
      const stof_expr *ix = e->u.load.idx[d];
      int ok = whole[d];
      for (int a = 0; !ok && ix->kind == STOF_EXPR_VAR && a < self->op->ndim; a++)
        ok = self->op->axis[a] == ix->u.var && map[a] == d;
      if (!ok) return e;
    }
    return NULL;
  case STOF_EXPR_REDUCE: return stray_load(e->u.reduce.src, t, self, map, whole);
  default: {
    const stof_expr *r = stray_load(e->u.op.a, t, self, map, whole);
    if (!r) r = stray_load(e->u.op.b, t, self, map, whole);
    if (!r) r = stray_load(e->u.op.c, t, self, map, whole);
    return r;
  }
  }
}

/* The root block whose nest holds block b. */
static int root_block(const stof_sched *s, int b) {
  while (sched_block_at(s, b)->attach >= 0) b = sched_loop_at(s, sched_block_at(s, b)->attach)->block;
  return b;
}

/* Are the values of x over the loops not fixed in bd one interval (no holes)? The terms
 * sorted by |k|: the smallest 1, each next at most one past what those before it reach. */
static int dense(const sched_bounds *bd, const sched_aff *x) {
  if (x->bad) return 1; /* taken whole (a full range) */
  int64_t k[SCHED_AFF_MAX], e[SCHED_AFF_MAX];
  int n = 0;
  for (int i = 0; i < x->n; i++) {
    int64_t ext = sched_loop_at(bd->s, x->loop[i])->extent;
    if (loop_fixed(bd->s, bd->fixed, x->loop[i]) || ext <= 1) continue;
    int64_t v = x->k[i] < 0 ? -x->k[i] : x->k[i];
    int j = n++;
    while (j > 0 && k[j - 1] > v) {
      k[j] = k[j - 1];
      e[j] = e[j - 1];
      j--;
    }
    k[j] = v;
    e[j] = ext;
  }
  int64_t reach = 0; /* values 0 .. reach covered so far */
  for (int i = 0; i < n; i++) {
    if (k[i] > reach + 1) return 0;
    if (__builtin_mul_overflow(k[i], e[i] - 1, &k[i]) || __builtin_add_overflow(reach, k[i], &reach)) return 1;
  }
  return 1;
}

/* Block b, computed after its attach loop, would read t where its producer p has not
 * written it there, for the reason why. */
static stof_status reads_unwritten(sched_bounds *bd, int b, int p, const stof_op *t, const char *why) {
  const stof_sched *s = bd->s;
  return stof_ctx_error(bd->ctx, STOF_ERR_SCHEDULE,
                        "lower: block %s, computed after loop %s, would read %s where block %s has not written "
                        "it: %s",
                        sched_block_name(s, b), sched_loop_name(s, sched_block_at(s, b)->attach), t->name,
                        sched_block_name(s, p), why);
}

/* The region of block b (reverse-attached): what its producer wrote in one iteration. b
 * must read the producer's buffer at its own axes, or along dimensions written whole. */
static stof_status infer_reverse(sched_bounds *bd, int b, sched_range *range) {
  const stof_sched *s = bd->s;
  const sched_block *x = sched_block_at(s, b);
  const stof_op *ts[64];
  int nt = sched_expr_loads(x->op->body, ts, 64);
  for (int k = 0; k < nt && k < 64; k++) {
    int w = sched_writer(s, ts[k]);
    /* a writer in another root nest is complete before this one runs (the lowering orders
     * root nests by their dependences); in the same nest it must lie under the loop */
    if (w >= 0 && w != b && !sched_under_loop(s, w, x->attach) && root_block(s, w) == root_block(s, b))
      return stof_ctx_error(bd->ctx, STOF_ERR_SCHEDULE,
                            "lower: block %s, computed after loop %s, reads block %s, which that loop "
                            "does not enclose",
                            sched_block_name(s, b), sched_loop_name(s, x->attach), sched_block_name(s, w));
  }
  int p = sched_rev_source(s, b);
  if (p < 0) return STOF_OK; /* nothing it reads is written there: all of it */
  stof_status st = infer(bd, p);
  if (st) return st;
  const sched_block *pb = sched_block_at(s, p);
  const stof_op *t = pb->out;
  int encl[512], ne = sched_enclosing(s, b, encl, 512);
  if (ne < 0) return stof_ctx_error(bd->ctx, STOF_ERR_UNSUPPORTED, "lower: block %s is nested too deeply",
                                    sched_block_name(s, b));
  sched_bounds_fix(bd, encl, ne);
  sched_aff store[STOF_MAX_DIMS];
  sched_range written[STOF_MAX_DIMS];
  int map[STOF_MAX_DIMS], whole[STOF_MAX_DIMS];
  sched_store_aff(bd, p, store);
  char why[512];
  for (int d = 0; d < t->ndim; d++) {
    for (int i = 0; i < store[d].n; i++) {
      /* a fused loop only some of whose leaves are fixed here: the range of its source
       * (fused / q % extent, taken whole) holds values the producer did not write here, and
       * this block would read them (a tile that is not a multiple of the inner extent) */
      int l = store[d].loop[i];
      if (sched_loop_at(s, l)->repl == SCHED_REPL_FUSE && loop_fixed_any(s, bd->fixed, l, 1) &&
          !loop_fixed(s, bd->fixed, l)) {
        snprintf(why, sizeof why,
                 "loop %s is fused and split across that loop in a way that does not keep it whole (the "
                 "tiles of the fused loop must be multiples of the extents fused inside it)",
                 sched_loop_name(s, l));
        return reads_unwritten(bd, b, p, t, why);
      }
    }
    if (!dense(bd, &store[d])) {
      snprintf(why, sizeof why,
               "what block %s writes there along dimension %d has holes (a loop inside that loop steps "
               "over others: reorder them, or move %s to a loop that encloses all of them)",
               sched_block_name(s, p), d, sched_block_name(s, b));
      return reads_unwritten(bd, b, p, t, why);
    }
    sched_aff_range(bd, &store[d], t->shape[d], &written[d]);
    whole[d] = written[d].full;
  }
  sched_axis_map(s, b, t, map);
  const stof_expr *bad = stray_load(x->op->body, t, x, map, whole);
  if (bad) {
    char *text = NULL;
    stof_status pst = stof_expr_print(bd->ctx, bad, &text);
    if (pst) return pst;
    st = stof_ctx_error(bd->ctx, STOF_ERR_SCHEDULE,
                        "lower: block %s, computed after loop %s, reads %s: beyond what block %s has "
                        "written there (it must read it at its own axes)",
                        sched_block_name(s, b), sched_loop_name(s, x->attach), text, sched_block_name(s, p));
    stof_ctx_dealloc(bd->ctx, text, strlen(text) + 1);
    return st;
  }
  for (int a = 0; a < x->op->ndim; a++)
    if (map[a] >= 0) range[a] = written[map[a]];
  return STOF_OK;
}

static stof_status infer(sched_bounds *bd, int b) {
  if (bd->state[b] == 2) return STOF_OK;
  const stof_sched *s = bd->s;
  if (bd->state[b] == 1)
    return stof_ctx_error(bd->ctx, STOF_ERR_SCHEDULE,
                          "lower: the bounds of block %s depend on themselves (through the blocks "
                          "computed at its consumers' loops)",
                          sched_block_name(s, b));
  bd->state[b] = 1;
  const sched_block *x = sched_block_at(s, b);
  sched_aff *base = &bd->base[b * STOF_MAX_DIMS];
  int64_t *need = &bd->need[b * STOF_MAX_DIMS];
  sched_range range[STOF_MAX_DIMS];
  memset(range, 0, sizeof range);
  for (int a = 0; a < x->op->ndim; a++) {
    aff_zero(&base[a]);
    need[a] = x->op->shape[a];
  }
  stof_status st = STOF_OK;
  if (x->attach >= 0 && x->state == SCHED_B_LIVE) {
    st = x->attach_rev ? infer_reverse(bd, b, range) : infer_forward(bd, b, range);
    for (int a = 0; !st && a < x->op->ndim; a++) {
      if (range[a].ext == 0 || range[a].full) continue; /* no reader, or all of it */
      base[a] = range[a].lo;
      need[a] = range[a].ext;
    }
    for (int a = 0; !st && bd->check && a < x->op->ndim; a++) {
      int64_t have = sched_loop_at(s, x->root + a)->extent;
      if (need[a] > have)
        st = stof_ctx_error(bd->ctx, STOF_ERR_SCHEDULE,
                            "lower: block %s needs %lld values of axis %s per iteration of loop %s, "
                            "its loop covers %lld (compute it at the loop again)",
                            sched_block_name(s, b), (long long)need[a], x->op->axis[a]->name,
                            sched_loop_name(s, x->attach), (long long)have);
    }
  }
  bd->state[b] = 2;
  return st;
}

stof_status sched_bounds_infer(sched_bounds *bd) {
  for (int b = 0; b < bd->nblock; b++) {
    stof_status st = infer(bd, b);
    if (st) return st;
  }
  return STOF_OK;
}
