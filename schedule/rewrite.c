/*
 * Rewriting block bodies: the expression substitution under compute_inline,
 * reverse_compute_inline and cache_read, which builds a new compute op in the schedule's
 * graph (TE ops and expressions are immutable, so a rewritten body is a new op).
 *
 * Invariants: the new op has fresh axes with the names and extents of the old ones, in the
 * same order, and fresh reduce axes likewise, so that a block's root loop root + a stays
 * its axis a; unchanged subexpressions are shared, not copied; a failure leaves only
 * unreachable nodes in the graph's arena.
 */
#include <string.h>

#include "schedule_int.h"

#define MAP_MAX (2 * STOF_SCHED_MAX_LOOPS + STOF_MAX_DIMS)

typedef struct subst {
  stof_graph *g;
  int nvar;
  const stof_var *from[MAP_MAX];
  const stof_expr *to[MAP_MAX];
  const sched_load_rule *rule;
  int level;              /* nodes from the body's root down to the one being rewritten */
} subst;

static stof_status rewrite(subst *m, const stof_expr *e, const stof_expr **out);

/* op's body at the indices idx (already rewritten): op's axes replaced by them. The body
 * lands m->level deep: when that would make the result deeper than the builders allow,
 * refuse now rather than recurse twice the limit deep (the stack holds the limit). */
static stof_status inline_at(subst *m, const stof_op *op, const stof_expr *const *idx,
                             const stof_expr **out) {
  stof_ctx *ctx = stof_graph_ctx(m->g);
  if (m->level + op->body->depth > STOF_TE_MAX_DEPTH + 1)
    return stof_ctx_error(ctx, STOF_ERR_UNSUPPORTED,
                          "expression nested deeper than %d levels (build it as several computes)",
                          STOF_TE_MAX_DEPTH);
  subst *in = stof_ctx_alloc(ctx, sizeof *in);
  if (!in) return STOF_ERR_NOMEM;
  in->g = m->g;
  in->nvar = op->ndim;
  in->rule = NULL;
  in->level = m->level - 1;
  for (int d = 0; d < op->ndim; d++) {
    in->from[d] = op->axis[d];
    in->to[d] = idx[d];
  }
  stof_status st = rewrite(in, op->body, out);
  stof_ctx_dealloc(ctx, in, sizeof *in);
  return st;
}

/* A REDUCE node: its axes mapped, its source rewritten (kept out of rewrite's frame, which
 * recursion repeats once per level). */
static __attribute__((noinline)) stof_status rewrite_reduce(subst *m, const stof_expr *e,
                                                            const stof_expr **out) {
  const stof_expr *axes[STOF_SCHED_MAX_LOOPS], *a;
  int n = e->u.reduce.naxis;
  if (n > STOF_SCHED_MAX_LOOPS) return STOF_ERR_INTERNAL;
  for (int i = 0; i < n; i++) {
    axes[i] = NULL;
    for (int k = 0; k < m->nvar; k++)
      if (m->from[k] == e->u.reduce.axis[i]) axes[i] = m->to[k];
    if (!axes[i])
      return stof_ctx_error(stof_graph_ctx(m->g), STOF_ERR_INTERNAL,
                            "rewrite: reduce axis %s has no replacement", e->u.reduce.axis[i]->name);
  }
  stof_status st = rewrite(m, e->u.reduce.src, &a);
  if (st) return st;
  return stof_te_reduce(m->g, e->u.reduce.combiner, a, n, axes, out);
}

static stof_status rewrite_node(subst *m, const stof_expr *e, const stof_expr **out);

static stof_status rewrite(subst *m, const stof_expr *e, const stof_expr **out) {
  m->level++;
  stof_status st = rewrite_node(m, e, out);
  m->level--;
  return st;
}

static stof_status rewrite_node(subst *m, const stof_expr *e, const stof_expr **out) {
  stof_status st = STOF_OK;
  const stof_expr *a = NULL, *b = NULL, *c = NULL;
  switch (e->kind) {
  case STOF_EXPR_INT:
  case STOF_EXPR_FLOAT: *out = e; return STOF_OK;
  case STOF_EXPR_VAR:
    *out = e;
    for (int i = 0; i < m->nvar; i++)
      if (m->from[i] == e->u.var) *out = m->to[i];
    return STOF_OK;
  case STOF_EXPR_LOAD: {
    const stof_expr *idx[STOF_MAX_DIMS];
    const stof_op *t = e->u.load.tensor;
    int changed = 0;
    for (int d = 0; d < e->u.load.nidx; d++) {
      if ((st = rewrite(m, e->u.load.idx[d], &idx[d]))) return st;
      changed |= idx[d] != e->u.load.idx[d];
    }
    if (m->rule && m->rule->tensor == t) {
      if (m->rule->kind == SCHED_LOADS_INLINE) {
        if ((st = inline_at(m, m->rule->op, idx, out))) return st;
        return stof_te_cast(m->g, t->dtype, *out, out);
      }
      if (m->rule->kind == SCHED_LOADS_REDIRECT) {
        t = m->rule->to;
        changed = 1;
      }
    }
    if (!changed) {
      *out = e;
      return STOF_OK;
    }
    return stof_te_load(m->g, t, e->u.load.nidx, idx, out);
  }
  case STOF_EXPR_REDUCE: return rewrite_reduce(m, e, out);
  default: break;
  }
  if (e->u.op.a && (st = rewrite(m, e->u.op.a, &a))) return st;
  if (e->u.op.b && (st = rewrite(m, e->u.op.b, &b))) return st;
  if (e->u.op.c && (st = rewrite(m, e->u.op.c, &c))) return st;
  if (a == e->u.op.a && b == e->u.op.b && c == e->u.op.c) {
    *out = e;
    return STOF_OK;
  }
  if (e->kind == STOF_EXPR_CAST) return stof_te_cast(m->g, e->dtype, a, out);
  if (e->kind == STOF_EXPR_SELECT) return stof_te_select(m->g, c, a, b, out);
  if (stof_expr_kind_is_binary(e->kind)) return stof_te_binary(m->g, e->kind, a, b, out);
  return stof_te_unary(m->g, e->kind, a, out);
}

/* The substitution of a rebuild: fresh axes (axes[]) for vars, and for body's reduce axes
 * when it is a reduction. */
static stof_status rebuild_begin(stof_sched *s, const stof_op *from, const stof_var *const *vars,
                                 const stof_expr *body, const sched_load_rule *rule, subst *m,
                                 const stof_expr **axes) {
  stof_graph *g = s->g;
  int ndim = from->ndim;
  const char *names[STOF_MAX_DIMS] = {0};
  for (int d = 0; d < ndim; d++) names[d] = from->axis[d]->name;
  stof_status st = stof_te_compute_axes(g, ndim, from->shape, names, axes);
  if (st) return st;
  m->g = g;
  m->nvar = 0;
  m->rule = rule;
  m->level = 0;
  for (int d = 0; d < ndim; d++) {
    m->from[m->nvar] = vars[d];
    m->to[m->nvar++] = axes[d];
  }
  if (body->kind == STOF_EXPR_REDUCE) {
    if (body->u.reduce.naxis > STOF_SCHED_MAX_LOOPS) return STOF_ERR_INTERNAL;
    for (int i = 0; i < body->u.reduce.naxis; i++) {
      const stof_var *v = body->u.reduce.axis[i];
      const stof_expr *x;
      if ((st = stof_te_reduce_axis(g, v->extent, v->name, &x))) return st;
      m->from[m->nvar] = v;
      m->to[m->nvar++] = x;
    }
  }
  return STOF_OK;
}

stof_status sched_rebuild(stof_sched *s, const char *name, const stof_op *from,
                          const stof_var *const *vars, const stof_expr *body, stof_dtype dtype,
                          const sched_load_rule *rule, const stof_op **out) {
  subst m;
  const stof_expr *axes[STOF_MAX_DIMS], *nb;
  stof_status st = rebuild_begin(s, from, vars, body, rule, &m, axes);
  if (!st) st = rewrite(&m, body, &nb);
  if (st) return st;
  return stof_te_compute(s->g, name, from->ndim, axes, nb, (int)dtype, out);
}

stof_status sched_rebuild_widened(stof_sched *s, const char *name, const stof_op *from, stof_dtype acc,
                                  const stof_op **out) {
  const stof_expr *body = from->body, *axes[STOF_MAX_DIMS], *src, *x, *y, *red;
  if (body->kind != STOF_EXPR_REDUCE || body->u.reduce.combiner != STOF_REDUCE_SUM) return STOF_ERR_INTERNAL;
  subst m;
  stof_status st = rebuild_begin(s, from, from->axis, body, NULL, &m, axes);
  if (!st) st = rewrite(&m, body->u.reduce.src, &src);
  if (st) return st;
  const stof_expr *raxes[STOF_SCHED_MAX_LOOPS];
  int n = body->u.reduce.naxis;
  for (int i = 0; i < n; i++) raxes[i] = m.to[from->ndim + i];
  if (src->kind == STOF_EXPR_MUL) { /* each factor widened before the product */
    if ((st = stof_te_cast(s->g, acc, src->u.op.a, &x)) || (st = stof_te_cast(s->g, acc, src->u.op.b, &y)) ||
        (st = stof_te_binary(s->g, STOF_EXPR_MUL, x, y, &src)))
      return st;
  } else if ((st = stof_te_cast(s->g, acc, src, &src))) {
    return st;
  }
  if ((st = stof_te_reduce(s->g, STOF_REDUCE_SUM, src, n, raxes, &red))) return st;
  return stof_te_compute(s->g, name, from->ndim, axes, red, (int)acc, out);
}

static int loads(const stof_expr *e, const stof_op **out, int cap, int n) {
  if (!e) return n;
  switch (e->kind) {
  case STOF_EXPR_INT:
  case STOF_EXPR_FLOAT:
  case STOF_EXPR_VAR: return n;
  case STOF_EXPR_LOAD: {
    const stof_op *t = e->u.load.tensor;
    int seen = 0;
    for (int i = 0; i < n && i < cap; i++) seen |= out[i] == t;
    if (!seen) {
      if (n < cap) out[n] = t;
      n++;
    }
    for (int d = 0; d < e->u.load.nidx; d++) n = loads(e->u.load.idx[d], out, cap, n);
    return n;
  }
  case STOF_EXPR_REDUCE: return loads(e->u.reduce.src, out, cap, n);
  default:
    n = loads(e->u.op.a, out, cap, n);
    n = loads(e->u.op.b, out, cap, n);
    return loads(e->u.op.c, out, cap, n);
  }
}

int sched_expr_loads(const stof_expr *e, const stof_op **out, int cap) { return loads(e, out, cap, 0); }
