/*
 * Memory safety of generated code: before C or CUDA code is emitted, every load of every
 * block body is checked against the extents of the tensor it reads, by interval arithmetic
 * over the values the block's axes take. The lowering keeps each axis of a block in [0,
 * extent) wherever the block stores (guards of non-divisible splits, guards at the tensor's
 * edges for attached regions), so the loads see exactly those values.
 *
 *  - An index proven in range is emitted as it is: no guard, no cost.
 *  - An affine index (constants, axes, +, -, * by a constant, each axis at most once, so
 *    that its interval is exact), outside any select, that reads outside the tensor at
 *    every iteration is a user error: the build is refused ("build: load A[i + 1000000]
 *    may read index 1000000 of dim 0 (extent 4)"), as the interpreter would raise it.
 *  - Any other index that may leave the tensor is clamped into the buffer, so that an
 *    out-of-range index reads the edge element: a gather W[ids[t], j] whose index is a
 *    loaded value, a non-affine index, one in a branch of a select whose condition the
 *    analysis does not prove keeps it in range, and an affine index that leaves the tensor
 *    at some iterations only (A[i + 1] over i in 0..4: the interpreter raises an
 *    IndexError; the built code reads A[3] at i = 3). Graphs that read a shifted window on
 *    purpose (a view of a runtime segment) keep building.
 *
 * A select's condition narrows the axes' ranges in its branches when it compares an axis
 * (plus a constant) with anything of known range; conjunctions and negations included.
 */
#include <stdio.h>
#include <string.h>

#include "schedule_int.h"

#define ACC_MAX_VARS (2 * STOF_SCHED_MAX_LOOPS + STOF_MAX_DIMS)
#define ACC_MAX_UNDO 256

enum { ACC_DATA = 1, ACC_NONAFFINE = 2 };

typedef struct acc_walk {
  const stof_sched *s;
  int nvar;
  const stof_var *var[ACC_MAX_VARS];
  int64_t lo[ACC_MAX_VARS], hi[ACC_MAX_VARS];
  int uses[ACC_MAX_VARS];  /* occurrences of each axis in the index being ranged */
  int nocount;             /* ranging a condition: uses stays as it is */
  int empty;               /* axes with lo > hi: the branch never runs */
  int nundo;
  struct { int v; int64_t lo, hi; } undo[ACC_MAX_UNDO];
  int in_select;           /* depth of select branches around the node walked */
  sched_access *out;
  stof_status st;
} acc_walk;

/* ---------------------------------------------------------------- intervals */

static int64_t sat_add(int64_t a, int64_t b, int *ovf) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) *ovf = 1;
  return r;
}
static int64_t sat_mul(int64_t a, int64_t b, int *ovf) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) *ovf = 1;
  return r;
}
static int64_t floordiv64(int64_t a, int64_t c) { /* c > 0 */
  int64_t q = a / c;
  return (a % c != 0 && a < 0) ? q - 1 : q;
}

static int var_slot(const acc_walk *w, const stof_var *v) {
  for (int i = 0; i < w->nvar; i++)
    if (w->var[i] == v) return i;
  return -1;
}

static void full(int64_t *lo, int64_t *hi) {
  *lo = INT64_MIN;
  *hi = INT64_MAX;
}

static void refine(acc_walk *w, const stof_expr *c, int positive);
static void restore(acc_walk *w, int mark);

/* The interval [lo, hi] of integer expression e with the axes in their current ranges;
 * returns ACC_* flags. A constant subexpression has lo == hi and no axis. */
static int range(acc_walk *w, const stof_expr *e, int64_t *lo, int64_t *hi) {
  int64_t alo, ahi, blo, bhi;
  int fa, fb, ovf = 0;
  switch (e->kind) {
  case STOF_EXPR_INT: *lo = *hi = e->u.ival; return 0;
  case STOF_EXPR_VAR: {
    int k = var_slot(w, e->u.var);
    if (k < 0) {
      full(lo, hi);
      return ACC_NONAFFINE;
    }
    if (!w->nocount) w->uses[k]++;
    *lo = w->lo[k];
    *hi = w->hi[k];
    return 0;
  }
  case STOF_EXPR_LOAD:
    if (e->dtype == STOF_DTYPE_BOOL) {
      *lo = 0;
      *hi = 1;
    } else {
      full(lo, hi);
    }
    return ACC_DATA | ACC_NONAFFINE;
  case STOF_EXPR_CAST:
    if (stof_dtype_is_float(e->dtype) || stof_dtype_is_float(e->u.op.a->dtype) ||
        e->dtype == STOF_DTYPE_BOOL || e->u.op.a->dtype == STOF_DTYPE_BOOL) {
      fa = range(w, e->u.op.a, lo, hi); /* for the flags of what it reads */
      full(lo, hi);
      return fa | ACC_NONAFFINE;
    }
    fa = range(w, e->u.op.a, lo, hi);
    if (e->dtype == STOF_DTYPE_I32 && (*lo < INT32_MIN || *hi > INT32_MAX)) { /* wraps */
      full(lo, hi);
      return fa | ACC_NONAFFINE;
    }
    return fa;
  case STOF_EXPR_NEG:
    fa = range(w, e->u.op.a, &alo, &ahi);
    if (alo == INT64_MIN) full(lo, hi);
    else *lo = -ahi, *hi = -alo;
    return fa;
  case STOF_EXPR_SELECT: {
    int64_t clo, chi;
    int f = range(w, e->u.op.c, &clo, &chi) | ACC_NONAFFINE;
    int mark = w->nundo, empty;
    refine(w, e->u.op.c, 1);
    empty = w->empty;
    f |= range(w, e->u.op.a, &alo, &ahi);
    restore(w, mark);
    if (empty) alo = INT64_MAX, ahi = INT64_MIN;
    refine(w, e->u.op.c, 0);
    empty = w->empty;
    f |= range(w, e->u.op.b, &blo, &bhi);
    restore(w, mark);
    if (empty) blo = INT64_MAX, bhi = INT64_MIN;
    *lo = alo < blo ? alo : blo;
    *hi = ahi > bhi ? ahi : bhi;
    if (*lo > *hi) *lo = *hi = 0;
    return f;
  }
  default: break;
  }
  if (e->kind >= STOF_EXPR_LT && e->kind <= STOF_EXPR_OR) {
    fa = range(w, e->u.op.a, &alo, &ahi) | range(w, e->u.op.b, &blo, &bhi);
    *lo = 0;
    *hi = 1;
    return fa | ACC_NONAFFINE;
  }
  if (!stof_expr_kind_is_binary(e->kind) || stof_dtype_is_float(e->dtype)) {
    fa = e->u.op.a ? range(w, e->u.op.a, &alo, &ahi) : 0;
    fb = e->u.op.b ? range(w, e->u.op.b, &blo, &bhi) : 0;
    full(lo, hi);
    if (e->kind == STOF_EXPR_ABS && !stof_dtype_is_float(e->dtype) && alo != INT64_MIN) {
      *lo = alo >= 0 ? alo : ahi <= 0 ? -ahi : 0;
      *hi = -alo > ahi ? -alo : ahi;
    }
    return fa | fb | ACC_NONAFFINE;
  }
  fa = range(w, e->u.op.a, &alo, &ahi);
  fb = range(w, e->u.op.b, &blo, &bhi);
  int f = fa | fb;
  int bconst = blo == bhi && !(fb & (ACC_DATA | ACC_NONAFFINE)) && blo != INT64_MIN;
  int aconst = alo == ahi && !(fa & (ACC_DATA | ACC_NONAFFINE)) && alo != INT64_MIN;
  int aknown = alo != INT64_MIN && ahi != INT64_MAX, bknown = blo != INT64_MIN && bhi != INT64_MAX;
  switch (e->kind) {
  case STOF_EXPR_ADD:
  case STOF_EXPR_SUB:
    if (!aknown || !bknown) break;
    if (e->kind == STOF_EXPR_ADD) *lo = sat_add(alo, blo, &ovf), *hi = sat_add(ahi, bhi, &ovf);
    else *lo = sat_add(alo, -bhi, &ovf), *hi = sat_add(ahi, -blo, &ovf);
    if (ovf) break;
    return f;
  case STOF_EXPR_MUL: {
    if (!aknown || !bknown) break;
    int64_t p[4] = {sat_mul(alo, blo, &ovf), sat_mul(alo, bhi, &ovf), sat_mul(ahi, blo, &ovf),
                    sat_mul(ahi, bhi, &ovf)};
    if (ovf) break;
    *lo = *hi = p[0];
    for (int i = 1; i < 4; i++) {
      if (p[i] < *lo) *lo = p[i];
      if (p[i] > *hi) *hi = p[i];
    }
    return f | (aconst || bconst ? 0 : ACC_NONAFFINE);
  }
  case STOF_EXPR_DIV:
  case STOF_EXPR_FLOORDIV:
    if (!aknown || !bconst || blo <= 0) break;
    *lo = floordiv64(alo, blo);
    *hi = floordiv64(ahi, blo);
    return f | ACC_NONAFFINE;
  case STOF_EXPR_MOD:
    if (!bconst || blo <= 0) break;
    if (aknown && alo >= 0 && ahi < blo) *lo = alo, *hi = ahi;
    else *lo = 0, *hi = blo - 1;
    return f | ACC_NONAFFINE;
  case STOF_EXPR_MIN:
    *lo = alo < blo ? alo : blo;
    *hi = ahi < bhi ? ahi : bhi;
    return f | ACC_NONAFFINE;
  case STOF_EXPR_MAX:
    *lo = alo > blo ? alo : blo;
    *hi = ahi > bhi ? ahi : bhi;
    return f | ACC_NONAFFINE;
  default: break;
  }
  full(lo, hi);
  return f | ACC_NONAFFINE;
}

/* ---------------------------------------------------------------- select conditions */

static void narrow(acc_walk *w, int k, int64_t lo, int64_t hi) {
  if (w->nundo == ACC_MAX_UNDO) return; /* no room to undo: keep the wider range */
  w->undo[w->nundo].v = k;
  w->undo[w->nundo].lo = w->lo[k];
  w->undo[w->nundo].hi = w->hi[k];
  w->nundo++;
  int was = w->lo[k] > w->hi[k];
  if (lo > w->lo[k]) w->lo[k] = lo;
  if (hi < w->hi[k]) w->hi[k] = hi;
  if (!was && w->lo[k] > w->hi[k]) w->empty++;
}

static void restore(acc_walk *w, int mark) {
  while (w->nundo > mark) {
    w->nundo--;
    int k = w->undo[w->nundo].v;
    int was = w->lo[k] > w->hi[k];
    w->lo[k] = w->undo[w->nundo].lo;
    w->hi[k] = w->undo[w->nundo].hi;
    if (was && w->lo[k] <= w->hi[k]) w->empty--;
  }
}

/* e as "axis + off" (returns the axis' slot, -1 when e is not of that form). */
static int axis_plus(const acc_walk *w, const stof_expr *e, int64_t *off) {
  *off = 0;
  if ((e->kind == STOF_EXPR_ADD || e->kind == STOF_EXPR_SUB) && e->u.op.b->kind == STOF_EXPR_INT) {
    *off = e->kind == STOF_EXPR_ADD ? e->u.op.b->u.ival : -e->u.op.b->u.ival;
    e = e->u.op.a;
  }
  while (e->kind == STOF_EXPR_CAST && !stof_dtype_is_float(e->dtype) && e->dtype != STOF_DTYPE_BOOL)
    e = e->u.op.a;
  return e->kind == STOF_EXPR_VAR ? var_slot(w, e->u.var) : -1;
}

/* "axis + off  kind  [xlo, xhi]" holds: narrows the axis. */
static void narrow_cmp(acc_walk *w, int k, int64_t off, stof_expr_kind kind, int64_t xlo, int64_t xhi) {
  int ovf = 0;
  int64_t lo = INT64_MIN, hi = INT64_MAX;
  switch (kind) {
  case STOF_EXPR_LT: if (xhi != INT64_MAX) hi = sat_add(sat_add(xhi, -1, &ovf), -off, &ovf); break;
  case STOF_EXPR_LE: if (xhi != INT64_MAX) hi = sat_add(xhi, -off, &ovf); break;
  case STOF_EXPR_GT: if (xlo != INT64_MIN) lo = sat_add(sat_add(xlo, 1, &ovf), -off, &ovf); break;
  case STOF_EXPR_GE: if (xlo != INT64_MIN) lo = sat_add(xlo, -off, &ovf); break;
  case STOF_EXPR_EQ:
    if (xhi != INT64_MAX) hi = sat_add(xhi, -off, &ovf);
    if (xlo != INT64_MIN) lo = sat_add(xlo, -off, &ovf);
    break;
  default: return;
  }
  if (!ovf) narrow(w, k, lo, hi);
}

/* Narrows the axes by condition c (positive) or by its negation (undone by restore). */
static void refine(acc_walk *w, const stof_expr *c, int positive) {
  static const stof_expr_kind neg[] = {[STOF_EXPR_LT] = STOF_EXPR_GE, [STOF_EXPR_LE] = STOF_EXPR_GT,
                                       [STOF_EXPR_GT] = STOF_EXPR_LE, [STOF_EXPR_GE] = STOF_EXPR_LT,
                                       [STOF_EXPR_EQ] = STOF_EXPR_NE, [STOF_EXPR_NE] = STOF_EXPR_EQ};
  static const stof_expr_kind mirror[] = {[STOF_EXPR_LT] = STOF_EXPR_GT, [STOF_EXPR_LE] = STOF_EXPR_GE,
                                          [STOF_EXPR_GT] = STOF_EXPR_LT, [STOF_EXPR_GE] = STOF_EXPR_LE,
                                          [STOF_EXPR_EQ] = STOF_EXPR_EQ, [STOF_EXPR_NE] = STOF_EXPR_NE};
  if (c->kind == STOF_EXPR_NOT) {
    refine(w, c->u.op.a, !positive);
    return;
  }
  if ((c->kind == STOF_EXPR_AND && positive) || (c->kind == STOF_EXPR_OR && !positive)) {
    refine(w, c->u.op.a, positive);
    refine(w, c->u.op.b, positive);
    return;
  }
  if (c->kind < STOF_EXPR_LT || c->kind > STOF_EXPR_NE) return;
  if (stof_dtype_is_float(c->u.op.a->dtype) || stof_dtype_is_float(c->u.op.b->dtype)) return;
  stof_expr_kind kind = positive ? c->kind : neg[c->kind];
  int64_t off, xlo, xhi;
  w->nocount++;
  int k = axis_plus(w, c->u.op.a, &off);
  if (k >= 0) {
    range(w, c->u.op.b, &xlo, &xhi);
    narrow_cmp(w, k, off, kind, xlo, xhi);
  }
  k = axis_plus(w, c->u.op.b, &off);
  if (k >= 0) {
    range(w, c->u.op.a, &xlo, &xhi);
    narrow_cmp(w, k, off, mirror[kind], xlo, xhi);
  }
  w->nocount--;
}

/* ---------------------------------------------------------------- the walk */

/* Index text for messages: "i + 1" rather than "(i + 1)". */
static void index_text(stof_ctx *ctx, const stof_expr *e, char *buf, size_t cap) {
  char *t = NULL;
  buf[0] = 0;
  if (stof_expr_print(ctx, e, &t)) {
    stof_ctx_clear_error(ctx);
    snprintf(buf, cap, "?");
    return;
  }
  size_t n = strlen(t);
  int strip = n >= 2 && t[0] == '(' && t[n - 1] == ')';
  for (size_t i = 0, d = 0; strip && i + 1 < n; i++) { /* the first '(' closes at the end? */
    d += t[i] == '(';
    d -= t[i] == ')';
    if (d == 0) strip = 0;
  }
  if (strip) snprintf(buf, cap, "%.*s", (int)(n - 2), t + 1);
  else snprintf(buf, cap, "%s", t);
  stof_ctx_dealloc(ctx, t, n + 1);
}

static void add_clamp(acc_walk *w, const stof_expr *load, int d) {
  sched_access *a = w->out;
  for (int i = 0; i < a->n; i++)
    if (a->clamp[i].load == load) {
      a->clamp[i].mask |= 1u << d;
      return;
    }
  if (a->n == a->cap) {
    int ncap = a->cap ? 2 * a->cap : 8;
    sched_clamp *p = stof_ctx_realloc(w->s->ctx, a->clamp, sizeof *p * (size_t)a->cap, sizeof *p * (size_t)ncap);
    if (!p) {
      w->st = STOF_ERR_NOMEM;
      return;
    }
    a->clamp = p;
    a->cap = ncap;
  }
  a->clamp[a->n].load = load;
  a->clamp[a->n].mask = 1u << d;
  a->n++;
}

static void check_load(acc_walk *w, const stof_expr *e) {
  const stof_op *t = e->u.load.tensor;
  for (int d = 0; d < e->u.load.nidx && !w->st; d++) {
    int64_t lo, hi;
    memset(w->uses, 0, sizeof(int) * (size_t)w->nvar);
    int f = range(w, e->u.load.idx[d], &lo, &hi);
    if (lo >= 0 && hi < t->shape[d]) continue;
    int exact = !(f & (ACC_DATA | ACC_NONAFFINE));
    for (int k = 0; k < w->nvar; k++) exact &= w->uses[k] <= 1;
    /* an affine index that leaves the tensor at any iteration is an ill-formed program (the
     * interpreter raises IndexError on it): refused, never clamped into a silent answer */
    if (exact && !w->in_select) {
      char text[512] = "", ix[160];
      size_t n = 0;
      for (int k = 0; k < e->u.load.nidx && n < sizeof text - 1; k++) {
        index_text(w->s->ctx, e->u.load.idx[k], ix, sizeof ix);
        int m = snprintf(text + n, sizeof text - n, "%s%s", k ? ", " : "", ix);
        if (m < 0) break;
        n += (size_t)m;
        if (n >= sizeof text) n = sizeof text - 1;
      }
      w->st = stof_ctx_error(w->s->ctx, STOF_ERR_SCHEDULE,
                             "build: load %s[%s] may read index %lld of dim %d (extent %lld)", t->name,
                             text, (long long)(lo < 0 ? lo : lo > t->shape[d] ? lo : t->shape[d]), d,
                             (long long)t->shape[d]);
      return;
    }
    add_clamp(w, e, d);
  }
}

static void walk(acc_walk *w, const stof_expr *e) {
  if (!e || w->st) return;
  switch (e->kind) {
  case STOF_EXPR_INT:
  case STOF_EXPR_FLOAT:
  case STOF_EXPR_VAR: return;
  case STOF_EXPR_LOAD:
    if (!w->empty) check_load(w, e);
    for (int d = 0; d < e->u.load.nidx; d++) walk(w, e->u.load.idx[d]);
    return;
  case STOF_EXPR_REDUCE: walk(w, e->u.reduce.src); return;
  case STOF_EXPR_SELECT: {
    walk(w, e->u.op.c);
    int mark = w->nundo;
    w->in_select++;
    refine(w, e->u.op.c, 1);
    walk(w, e->u.op.a);
    restore(w, mark);
    refine(w, e->u.op.c, 0);
    walk(w, e->u.op.b);
    restore(w, mark);
    w->in_select--;
    return;
  }
  default:
    walk(w, e->u.op.a);
    walk(w, e->u.op.b);
    walk(w, e->u.op.c);
  }
}

stof_status sched_access_check(const stof_sched *s, sched_access *out) {
  memset(out, 0, sizeof *out);
  acc_walk *w = stof_ctx_alloc(s->ctx, sizeof *w);
  if (!w) return STOF_ERR_NOMEM;
  w->s = s;
  w->out = out;
  for (int b = 0; b < s->blocks.len && !w->st; b++) {
    const sched_block *x = sched_block_at(s, b);
    if (x->state != SCHED_B_LIVE) continue;
    w->nvar = 0;
    for (int a = 0; a < x->naxis && w->nvar < ACC_MAX_VARS; a++) {
      const stof_var *v = sched_block_axis(x, a);
      w->var[w->nvar] = v;
      w->lo[w->nvar] = 0;
      w->hi[w->nvar] = v->extent - 1;
      w->nvar++;
    }
    w->empty = w->nundo = w->in_select = 0;
    walk(w, x->op->body);
  }
  stof_status st = w->st;
  stof_ctx_dealloc(s->ctx, w, sizeof *w);
  if (st) sched_access_free(s->ctx, out);
  return st;
}

void sched_access_free(stof_ctx *ctx, sched_access *a) {
  stof_ctx_dealloc(ctx, a->clamp, sizeof *a->clamp * (size_t)a->cap);
  memset(a, 0, sizeof *a);
}

unsigned sched_access_clamp(const sched_access *a, const stof_expr *load) {
  for (int i = 0; a && i < a->n; i++)
    if (a->clamp[i].load == load) return a->clamp[i].mask;
  return 0;
}
