/*
 * The tensor-expression IR: graphs own every expr, var and op in an arena; builders
 * check operands and never leave a half-built node visible (a failed call adds nothing
 * to the graph's op list). Ops get ids in creation order, which is topological since an
 * op can only read ops built before it.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core_int.h"

static const char *const expr_kind_names[] = {
#define STOF_X(name, text) text,
    STOF_EXPR_KIND_LIST(STOF_X)
#undef STOF_X
};
static const char *const reduce_names[] = {
#define STOF_X(name, text) text,
    STOF_REDUCE_LIST(STOF_X)
#undef STOF_X
};
static const char *const pattern_names[] = {
#define STOF_X(name, text) text,
    STOF_PATTERN_LIST(STOF_X)
#undef STOF_X
};

const char *stof_expr_kind_name(stof_expr_kind k) {
  return (unsigned)k < STOF_EXPR_KIND_COUNT ? expr_kind_names[k] : "?";
}
int stof_expr_kind_is_binary(stof_expr_kind k) { return k >= STOF_EXPR_ADD && k <= STOF_EXPR_OR; }
int stof_expr_kind_is_unary(stof_expr_kind k) { return k >= STOF_EXPR_NEG && k <= STOF_EXPR_FLOOR; }
const char *stof_reduce_kind_name(stof_reduce_kind k) {
  return (unsigned)k < STOF_REDUCE_COUNT ? reduce_names[k] : "?";
}
const char *stof_pattern_name(stof_pattern p) {
  return (unsigned)p < STOF_PATTERN_COUNT ? pattern_names[p] : "?";
}

/* ---------------------------------------------------------------- graph */

stof_status stof_graph_new(stof_ctx *ctx, stof_graph **out) {
  *out = stof_ctx_alloc(ctx, sizeof **out);
  if (!*out) return STOF_ERR_NOMEM;
  (*out)->ctx = ctx;
  stof_arena_init(&(*out)->arena, ctx);
  return STOF_OK;
}

void stof_graph_free(stof_graph *g) {
  if (!g) return;
  stof_ctx_dealloc(g->ctx, g->ops, sizeof *g->ops * (size_t)g->capop);
  stof_arena_release(&g->arena);
  stof_ctx_dealloc(g->ctx, g, sizeof *g);
}

stof_ctx *stof_graph_ctx(const stof_graph *g) { return g->ctx; }
int stof_graph_nop(const stof_graph *g) { return g->nop; }
const stof_op *stof_graph_op(const stof_graph *g, int i) {
  return i >= 0 && i < g->nop ? g->ops[i] : NULL;
}

void *stof_graph_alloc(stof_graph *g, size_t size) { return stof_arena_alloc(&g->arena, size); }

/* Reserves room for one more op, so that adding it cannot fail afterwards. */
static stof_status reserve_op(stof_graph *g) {
  if (g->nop < g->capop) return STOF_OK;
  int ncap = g->capop ? g->capop * 2 : 16;
  stof_op **p = stof_ctx_realloc(g->ctx, g->ops, sizeof *p * (size_t)g->capop, sizeof *p * (size_t)ncap);
  if (!p) return STOF_ERR_NOMEM;
  g->ops = p;
  g->capop = ncap;
  return STOF_OK;
}

static void add_op(stof_graph *g, stof_op *op) {
  op->id = g->nop;
  g->ops[g->nop++] = op;
}

static stof_expr *new_expr(stof_graph *g, stof_expr_kind kind, stof_dtype dtype) {
  stof_expr *e = stof_arena_alloc(&g->arena, sizeof *e);
  if (e) {
    e->kind = kind;
    e->dtype = dtype;
    e->depth = 1;
  }
  return e;
}

/* The depth of a node over operands of depth d (the deepest), refused past the limit so
 * that no later walk over the expression can run out of stack. */
static stof_status check_depth(stof_graph *g, int d, int *out) {
  if (d >= STOF_TE_MAX_DEPTH)
    return stof_ctx_error(g->ctx, STOF_ERR_UNSUPPORTED,
                          "expression nested deeper than %d levels (build it as several computes)",
                          STOF_TE_MAX_DEPTH);
  *out = d + 1;
  return STOF_OK;
}

static int max_depth(const stof_expr *a, const stof_expr *b) {
  int da = a ? a->depth : 0, db = b ? b->depth : 0;
  return da > db ? da : db;
}

static stof_status check_expr(stof_graph *g, const stof_expr *e, const char *what) {
  if (!e) return stof_ctx_error(g->ctx, STOF_ERR_ARG, "%s: missing operand", what);
  return STOF_OK;
}

/* ---------------------------------------------------------------- expressions */

stof_status stof_te_int(stof_graph *g, int64_t v, stof_dtype dtype, const stof_expr **out) {
  if (stof_dtype_is_float(dtype)) return stof_te_float(g, (double)v, dtype, out);
  stof_expr *e = new_expr(g, STOF_EXPR_INT, dtype);
  if (!e) return STOF_ERR_NOMEM;
  e->u.ival = v;
  *out = e;
  return STOF_OK;
}

stof_status stof_te_float(stof_graph *g, double v, stof_dtype dtype, const stof_expr **out) {
  if (!stof_dtype_is_float(dtype))
    return stof_ctx_error(g->ctx, STOF_ERR_TYPE, "float constant %g with non-float dtype %s", v,
                          stof_dtype_name(dtype));
  stof_expr *e = new_expr(g, STOF_EXPR_FLOAT, dtype);
  if (!e) return STOF_ERR_NOMEM;
  /* the value its dtype holds, as the generated code's literal does (1e30 as float32 is
   * 1.0000000150e30: the interpreter and the backends must agree under cancellation) */
  e->u.fval = stof_dtype_round(dtype, v);
  *out = e;
  return STOF_OK;
}

static int is_imm(const stof_expr *e) { return e->kind == STOF_EXPR_INT || e->kind == STOF_EXPR_FLOAT; }

static int dtype_rank(stof_dtype d) {
  switch (d) {
  case STOF_DTYPE_BOOL: return 0;
  case STOF_DTYPE_I32: return 1;
  case STOF_DTYPE_I64: return 2;
  case STOF_DTYPE_F16:
  case STOF_DTYPE_BF16: return 3;
  case STOF_DTYPE_F32: return 4;
  default: return 5;
  }
}

/* The common dtype of two operands. An immediate adopts the other side's dtype when the
 * class allows (1.5 * half_expr stays half). */
static stof_dtype promote(const stof_expr *a, const stof_expr *b) {
  stof_dtype x = a->dtype, y = b->dtype;
  if (x == y) return x;
  int fx = stof_dtype_is_float(x), fy = stof_dtype_is_float(y);
  if (is_imm(a) && !is_imm(b) && (fy || !fx)) return y;
  if (is_imm(b) && !is_imm(a) && (fx || !fy)) return x;
  if (fx != fy) return fx ? x : y;
  if (dtype_rank(x) == dtype_rank(y)) return STOF_DTYPE_F32; /* f16 with bf16 */
  return dtype_rank(x) > dtype_rank(y) ? x : y;
}

stof_status stof_te_binary(stof_graph *g, stof_expr_kind kind, const stof_expr *a,
                           const stof_expr *b, const stof_expr **out) {
  const char *name = stof_expr_kind_name(kind);
  if (!stof_expr_kind_is_binary(kind))
    return stof_ctx_error(g->ctx, STOF_ERR_ARG, "binary: '%s' is not a binary operation", name);
  stof_status st = check_expr(g, a, name);
  if (!st) st = check_expr(g, b, name);
  if (st) return st;
  stof_dtype dt;
  if (kind == STOF_EXPR_AND || kind == STOF_EXPR_OR) {
    if (a->dtype != STOF_DTYPE_BOOL || b->dtype != STOF_DTYPE_BOOL)
      return stof_ctx_error(g->ctx, STOF_ERR_TYPE,
                            "'%s' takes bool operands, got %s and %s (use a comparison)", name,
                            stof_dtype_name(a->dtype), stof_dtype_name(b->dtype));
    dt = STOF_DTYPE_BOOL;
  } else if (kind >= STOF_EXPR_LT && kind <= STOF_EXPR_NE) {
    dt = STOF_DTYPE_BOOL;
  } else {
    if (a->dtype == STOF_DTYPE_BOOL || b->dtype == STOF_DTYPE_BOOL)
      return stof_ctx_error(g->ctx, STOF_ERR_TYPE,
                            "'%s' on a bool operand (use te.select to turn a condition into a value)",
                            name);
    dt = promote(a, b);
  }
  int depth = 0;
  if ((st = check_depth(g, max_depth(a, b), &depth))) return st;
  stof_expr *e = new_expr(g, kind, dt);
  if (!e) return STOF_ERR_NOMEM;
  e->depth = depth;
  e->u.op.a = a;
  e->u.op.b = b;
  *out = e;
  return STOF_OK;
}

stof_status stof_te_unary(stof_graph *g, stof_expr_kind kind, const stof_expr *a,
                          const stof_expr **out) {
  const char *name = stof_expr_kind_name(kind);
  if (!stof_expr_kind_is_unary(kind))
    return stof_ctx_error(g->ctx, STOF_ERR_ARG, "unary: '%s' is not a unary operation", name);
  stof_status st = check_expr(g, a, name);
  if (st) return st;
  stof_dtype dt = a->dtype;
  if (kind == STOF_EXPR_NOT) {
    if (dt != STOF_DTYPE_BOOL)
      return stof_ctx_error(g->ctx, STOF_ERR_TYPE, "'not' takes a bool operand, got %s",
                            stof_dtype_name(dt));
  } else if (dt == STOF_DTYPE_BOOL) {
    return stof_ctx_error(g->ctx, STOF_ERR_TYPE, "'%s' on a bool operand", name);
  } else if (kind != STOF_EXPR_NEG && kind != STOF_EXPR_ABS && !stof_dtype_is_float(dt)) {
    st = stof_te_cast(g, STOF_DTYPE_F32, a, &a);
    if (st) return st;
    dt = STOF_DTYPE_F32;
  }
  int depth = 0;
  if ((st = check_depth(g, a->depth, &depth))) return st;
  stof_expr *e = new_expr(g, kind, dt);
  if (!e) return STOF_ERR_NOMEM;
  e->depth = depth;
  e->u.op.a = a;
  *out = e;
  return STOF_OK;
}

stof_status stof_te_cast(stof_graph *g, stof_dtype dtype, const stof_expr *a,
                         const stof_expr **out) {
  stof_status st = check_expr(g, a, "cast");
  if (st) return st;
  if ((unsigned)dtype >= STOF_DTYPE_COUNT)
    return stof_ctx_error(g->ctx, STOF_ERR_TYPE, "cast: unknown dtype %d", (int)dtype);
  if (a->dtype == dtype) {
    *out = a;
    return STOF_OK;
  }
  int depth = 0;
  if ((st = check_depth(g, a->depth, &depth))) return st;
  stof_expr *e = new_expr(g, STOF_EXPR_CAST, dtype);
  if (!e) return STOF_ERR_NOMEM;
  e->depth = depth;
  e->u.op.a = a;
  *out = e;
  return STOF_OK;
}

stof_status stof_te_select(stof_graph *g, const stof_expr *cond, const stof_expr *a,
                           const stof_expr *b, const stof_expr **out) {
  stof_status st = check_expr(g, cond, "select");
  if (!st) st = check_expr(g, a, "select");
  if (!st) st = check_expr(g, b, "select");
  if (st) return st;
  if (cond->dtype != STOF_DTYPE_BOOL)
    return stof_ctx_error(g->ctx, STOF_ERR_TYPE,
                          "select: the condition must be bool, got %s (use te.lt, te.eq, ...)",
                          stof_dtype_name(cond->dtype));
  stof_dtype dt = a->dtype == b->dtype ? a->dtype : promote(a, b);
  if (a->dtype != dt && (st = stof_te_cast(g, dt, a, &a))) return st;
  if (b->dtype != dt && (st = stof_te_cast(g, dt, b, &b))) return st;
  int depth = 0, dc = cond->depth, dab = max_depth(a, b);
  if ((st = check_depth(g, dc > dab ? dc : dab, &depth))) return st;
  stof_expr *e = new_expr(g, STOF_EXPR_SELECT, dt);
  if (!e) return STOF_ERR_NOMEM;
  e->depth = depth;
  e->u.op.a = a;
  e->u.op.b = b;
  e->u.op.c = cond;
  *out = e;
  return STOF_OK;
}

stof_status stof_te_load(stof_graph *g, const stof_op *tensor, int nidx,
                         const stof_expr *const *idx, const stof_expr **out) {
  if (!tensor) return stof_ctx_error(g->ctx, STOF_ERR_ARG, "load: missing tensor");
  if (nidx != tensor->ndim)
    return stof_ctx_error(g->ctx, STOF_ERR_ARG, "load %s: %d indices for a tensor of rank %d",
                          tensor->name, nidx, tensor->ndim);
  for (int d = 0; d < nidx; d++) {
    stof_status st = check_expr(g, idx[d], "load");
    if (st) return st;
    if (idx[d]->dtype != STOF_DTYPE_I32 && idx[d]->dtype != STOF_DTYPE_I64)
      return stof_ctx_error(g->ctx, STOF_ERR_TYPE, "load %s: index %d has dtype %s (an integer is needed)",
                            tensor->name, d, stof_dtype_name(idx[d]->dtype));
    if (idx[d]->kind == STOF_EXPR_INT && (idx[d]->u.ival < 0 || idx[d]->u.ival >= tensor->shape[d]))
      return stof_ctx_error(g->ctx, STOF_ERR_RANGE,
                            "load %s: index %lld out of range for dim %d of extent %lld",
                            tensor->name, (long long)idx[d]->u.ival, d, (long long)tensor->shape[d]);
  }
  int depth = 0;
  for (int d = 0; d < nidx; d++)
    if (idx[d]->depth > depth) depth = idx[d]->depth;
  stof_status st = check_depth(g, depth, &depth);
  if (st) return st;
  stof_expr *e = new_expr(g, STOF_EXPR_LOAD, tensor->dtype);
  const stof_expr **copy = stof_arena_alloc(&g->arena, sizeof *copy * (size_t)(nidx ? nidx : 1));
  if (!e || !copy) return STOF_ERR_NOMEM;
  e->depth = depth;
  memcpy(copy, idx, sizeof *copy * (size_t)nidx);
  e->u.load.tensor = tensor;
  e->u.load.nidx = nidx;
  e->u.load.idx = copy;
  *out = e;
  return STOF_OK;
}

static stof_status new_var(stof_graph *g, int64_t extent, const char *name, stof_var_kind kind,
                           const char *what, const stof_expr **out) {
  if (extent <= 0)
    return stof_ctx_error(g->ctx, STOF_ERR_SHAPE, "%s %s: extent %lld must be positive", what,
                          name, (long long)extent);
  stof_var *v = stof_arena_alloc(&g->arena, sizeof *v);
  stof_expr *e = new_expr(g, STOF_EXPR_VAR, STOF_DTYPE_I32);
  char *nm = stof_arena_strdup(&g->arena, name);
  if (!v || !e || !nm) return STOF_ERR_NOMEM;
  v->name = nm;
  v->extent = extent;
  v->kind = kind;
  v->id = g->nvar++;
  e->u.var = v;
  *out = e;
  return STOF_OK;
}

stof_status stof_te_reduce_axis(stof_graph *g, int64_t extent, const char *name,
                                const stof_expr **out) {
  return new_var(g, extent, name ? name : "k", STOF_VAR_REDUCE, "reduce_axis", out);
}

stof_status stof_te_reduce(stof_graph *g, stof_reduce_kind combiner, const stof_expr *src,
                           int naxis, const stof_expr *const *axes, const stof_expr **out) {
  const char *name = stof_reduce_kind_name(combiner);
  if ((unsigned)combiner >= STOF_REDUCE_COUNT)
    return stof_ctx_error(g->ctx, STOF_ERR_ARG, "reduce: unknown combiner %d", (int)combiner);
  stof_status st = check_expr(g, src, name);
  if (st) return st;
  if (naxis <= 0) return stof_ctx_error(g->ctx, STOF_ERR_ARG, "%s: no reduce axis given", name);
  if (src->dtype == STOF_DTYPE_BOOL)
    return stof_ctx_error(g->ctx, STOF_ERR_TYPE, "%s: cannot reduce a bool expression", name);
  const stof_var **copy = stof_arena_alloc(&g->arena, sizeof *copy * (size_t)naxis);
  if (!copy) return STOF_ERR_NOMEM;
  for (int i = 0; i < naxis; i++) {
    if (!axes[i] || axes[i]->kind != STOF_EXPR_VAR || axes[i]->u.var->kind != STOF_VAR_REDUCE)
      return stof_ctx_error(g->ctx, STOF_ERR_ARG, "%s: axis %d is not a reduce axis (use te.reduce_axis)",
                            name, i + 1);
    for (int j = 0; j < i; j++)
      if (copy[j] == axes[i]->u.var)
        return stof_ctx_error(g->ctx, STOF_ERR_ARG, "%s: reduce axis %s given twice", name,
                              copy[j]->name);
    copy[i] = axes[i]->u.var;
  }
  int depth = 0;
  if ((st = check_depth(g, src->depth, &depth))) return st;
  stof_expr *e = new_expr(g, STOF_EXPR_REDUCE, src->dtype);
  if (!e) return STOF_ERR_NOMEM;
  e->depth = depth;
  e->u.reduce.combiner = combiner;
  e->u.reduce.src = src;
  e->u.reduce.naxis = naxis;
  e->u.reduce.axis = copy;
  *out = e;
  return STOF_OK;
}

/* ---------------------------------------------------------------- ops */

static stof_op *new_op(stof_graph *g, stof_op_kind kind, const char *name, stof_dtype dtype,
                       int ndim, const int64_t *shape) {
  stof_op *op = stof_arena_alloc(&g->arena, sizeof *op);
  char *nm = stof_arena_strdup(&g->arena, name ? name : "T");
  if (!op || !nm) return NULL;
  op->kind = kind;
  op->name = nm;
  op->dtype = dtype;
  op->ndim = ndim;
  memcpy(op->shape, shape, sizeof(int64_t) * (size_t)ndim);
  return op;
}

stof_status stof_te_placeholder(stof_graph *g, int ndim, const int64_t *shape,
                                stof_dtype dtype, const char *name, const stof_op **out) {
  char what[160];
  snprintf(what, sizeof what, "placeholder %s", name ? name : "");
  stof_status st = stof_shape_check(g->ctx, what, ndim, shape);
  if (st) return st;
  if ((unsigned)dtype >= STOF_DTYPE_COUNT)
    return stof_ctx_error(g->ctx, STOF_ERR_TYPE, "%s: unknown dtype %d", what, (int)dtype);
  if ((st = reserve_op(g))) return st;
  stof_op *op = new_op(g, STOF_OP_PLACEHOLDER, name ? name : "placeholder", dtype, ndim, shape);
  if (!op) return STOF_ERR_NOMEM;
  op->pattern = STOF_PATTERN_INPUT;
  add_op(g, op);
  *out = op;
  return STOF_OK;
}

stof_status stof_te_compute_axes(stof_graph *g, int ndim, const int64_t *shape,
                                 const char *const *names, const stof_expr **axes) {
  static const char *const dflt[STOF_MAX_DIMS] = {"i", "j", "k", "l", "m", "n", "o", "p"};
  stof_status st = stof_shape_check(g->ctx, "compute", ndim, shape);
  if (st) return st;
  for (int d = 0; d < ndim; d++) {
    st = new_var(g, shape[d], names && names[d] ? names[d] : dflt[d], STOF_VAR_AXIS,
                 "compute axis", &axes[d]);
    if (st) return st;
  }
  return STOF_OK;
}

/* Walks e: counts REDUCE nodes not at the top, checks vars and gathers loaded ops. */
typedef struct walk_state {
  stof_graph *g;
  const char *name;
  int ndim;
  const stof_var *const *axis;
  const stof_expr *reduce; /* the top REDUCE, or NULL */
  const stof_op **inputs;  /* arena array, grown by doubling */
  int ninput, capinput;
  stof_status st;
} walk_state;

static int var_allowed(walk_state *w, const stof_var *v, int in_reduce) {
  for (int d = 0; d < w->ndim; d++)
    if (w->axis[d] == v) return 1;
  if (in_reduce && w->reduce)
    for (int i = 0; i < w->reduce->u.reduce.naxis; i++)
      if (w->reduce->u.reduce.axis[i] == v) return 1;
  return 0;
}

static void walk(walk_state *w, const stof_expr *e, int in_reduce) {
  if (w->st || !e) return;
  switch (e->kind) {
  case STOF_EXPR_INT:
  case STOF_EXPR_FLOAT: return;
  case STOF_EXPR_VAR:
    if (!var_allowed(w, e->u.var, in_reduce)) {
      const stof_var *v = e->u.var;
      w->st = stof_ctx_error(
          w->g->ctx, STOF_ERR_ARG, "compute %s: uses %s %s, which is %s", w->name,
          v->kind == STOF_VAR_REDUCE ? "reduce axis" : "axis", v->name,
          v->kind == STOF_VAR_REDUCE ? "not reduced over at that point"
          : v->owner                 ? "an axis of another compute"
                                     : "not one of this compute's axes");
    }
    return;
  case STOF_EXPR_LOAD: {
    const stof_op *t = e->u.load.tensor;
    int seen = 0;
    for (int i = 0; i < w->ninput; i++) seen |= w->inputs[i] == t;
    if (!seen) {
      if (w->ninput == w->capinput) {
        int ncap = w->capinput ? w->capinput * 2 : 4;
        const stof_op **p = stof_arena_alloc(&w->g->arena, sizeof *p * (size_t)ncap);
        if (!p) {
          w->st = STOF_ERR_NOMEM;
          return;
        }
        if (w->ninput) memcpy(p, w->inputs, sizeof *p * (size_t)w->ninput);
        w->inputs = p;
        w->capinput = ncap;
      }
      w->inputs[w->ninput++] = t;
    }
    for (int d = 0; d < e->u.load.nidx; d++) walk(w, e->u.load.idx[d], in_reduce);
    return;
  }
  case STOF_EXPR_REDUCE:
    if (e != w->reduce) {
      w->st = stof_ctx_error(w->g->ctx, STOF_ERR_ARG,
                             "compute %s: a reduction must be the whole body of a compute "
                             "(split it into two computes)",
                             w->name);
      return;
    }
    walk(w, e->u.reduce.src, 1);
    return;
  default:
    walk(w, e->u.op.a, in_reduce);
    walk(w, e->u.op.b, in_reduce);
    walk(w, e->u.op.c, in_reduce);
  }
}

static const stof_expr *peel_cast(const stof_expr *e) {
  while (e->kind == STOF_EXPR_CAST) e = e->u.op.a;
  return e;
}

static int uses_any_var(const stof_expr *e, int nvar, const stof_var *const *vars) {
  if (!e) return 0;
  if (e->kind == STOF_EXPR_VAR) {
    for (int i = 0; i < nvar; i++)
      if (vars[i] == e->u.var) return 1;
    return 0;
  }
  if (e->kind == STOF_EXPR_LOAD) {
    for (int d = 0; d < e->u.load.nidx; d++)
      if (uses_any_var(e->u.load.idx[d], nvar, vars)) return 1;
    return 0;
  }
  if (e->kind == STOF_EXPR_REDUCE) return uses_any_var(e->u.reduce.src, nvar, vars);
  if (e->kind == STOF_EXPR_INT || e->kind == STOF_EXPR_FLOAT) return 0;
  return uses_any_var(e->u.op.a, nvar, vars) || uses_any_var(e->u.op.b, nvar, vars) ||
         uses_any_var(e->u.op.c, nvar, vars);
}

/* A load indexed by the reduce axes, possibly cast: one GEMM operand. */
static int is_reduced_load(const stof_expr *e, const stof_expr *reduce) {
  e = peel_cast(e);
  return e->kind == STOF_EXPR_LOAD &&
         uses_any_var(e, reduce->u.reduce.naxis, reduce->u.reduce.axis);
}

/* Some output axis indexes a but not b: the operands meet in an outer product, as in
 * A[i, k] * B[k, j], and unlike X[i, k] * X[i, k] (a norm) or X[i, k] * Y[i, k]. */
static int misses_an_axis(const stof_op *op, const stof_expr *a, const stof_expr *b) {
  for (int d = 0; d < op->ndim; d++)
    if (uses_any_var(a, 1, &op->axis[d]) && !uses_any_var(b, 1, &op->axis[d])) return 1;
  return 0;
}

/* How a load's indices relate to the compute's axes: 0 same axes in order (elementwise),
 * 1 a subsequence of axes or constants (broadcast), 2 anything else (injective). */
static int load_class(const stof_expr *load, int ndim, const stof_var *const *axis) {
  const stof_op *t = load->u.load.tensor;
  int n = load->u.load.nidx, same = n == ndim, next = 0;
  for (int d = 0; d < n; d++) {
    const stof_expr *ix = load->u.load.idx[d];
    if (ix->kind == STOF_EXPR_INT) {
      same = 0;
      continue;
    }
    if (ix->kind != STOF_EXPR_VAR) return 2;
    int pos = -1;
    for (int a = 0; a < ndim; a++)
      if (axis[a] == ix->u.var) pos = a;
    if (pos < next) return 2;
    if (pos != d || t->shape[d] != axis[pos]->extent) same = 0;
    next = pos + 1;
  }
  return same ? 0 : 1;
}

static int classify_loads(const stof_expr *e, int ndim, const stof_var *const *axis) {
  if (!e || e->kind == STOF_EXPR_INT || e->kind == STOF_EXPR_FLOAT || e->kind == STOF_EXPR_VAR)
    return 0;
  if (e->kind == STOF_EXPR_LOAD) {
    int c = load_class(e, ndim, axis);
    for (int d = 0; d < e->u.load.nidx; d++) {
      int ci = classify_loads(e->u.load.idx[d], ndim, axis);
      if (ci > c) c = ci;
    }
    if (c == 0 && e->u.load.nidx == 0) c = 1;
    return c;
  }
  int c = classify_loads(e->u.op.a, ndim, axis), cb = classify_loads(e->u.op.b, ndim, axis),
      cc = classify_loads(e->u.op.c, ndim, axis);
  if (cb > c) c = cb;
  if (cc > c) c = cc;
  return c;
}

static void classify(stof_op *op) {
  const stof_expr *body = op->body;
  if (body->kind == STOF_EXPR_REDUCE) {
    const stof_expr *src = peel_cast(body->u.reduce.src);
    op->compute_intensive = body->u.reduce.combiner == STOF_REDUCE_SUM && src->kind == STOF_EXPR_MUL &&
                            is_reduced_load(src->u.op.a, body) && is_reduced_load(src->u.op.b, body) &&
                            misses_an_axis(op, src->u.op.a, src->u.op.b) &&
                            misses_an_axis(op, src->u.op.b, src->u.op.a);
    op->pattern = op->compute_intensive ? STOF_PATTERN_OUT_FUSABLE : STOF_PATTERN_REDUCTION;
    return;
  }
  static const stof_pattern by_class[] = {STOF_PATTERN_ELEMWISE, STOF_PATTERN_BROADCAST,
                                          STOF_PATTERN_INJECTIVE};
  op->pattern = by_class[classify_loads(body, op->ndim, op->axis)];
}

stof_status stof_te_compute(stof_graph *g, const char *name, int ndim,
                            const stof_expr *const *axes, const stof_expr *body, int dtype,
                            const stof_op **out) {
  if (!name) name = "compute";
  if (!body) return stof_ctx_error(g->ctx, STOF_ERR_ARG, "compute %s: missing body", name);
  if (ndim < 0 || ndim > STOF_MAX_DIMS)
    return stof_ctx_error(g->ctx, STOF_ERR_SHAPE, "compute %s: %d dimensions (at most %d)", name,
                          ndim, STOF_MAX_DIMS);
  if (dtype >= STOF_DTYPE_COUNT)
    return stof_ctx_error(g->ctx, STOF_ERR_TYPE, "compute %s: unknown dtype %d", name, dtype);
  int64_t shape[STOF_MAX_DIMS];
  const stof_var **axis = stof_arena_alloc(&g->arena, sizeof *axis * (size_t)(ndim ? ndim : 1));
  if (!axis) return STOF_ERR_NOMEM;
  for (int d = 0; d < ndim; d++) {
    if (!axes[d] || axes[d]->kind != STOF_EXPR_VAR || axes[d]->u.var->kind != STOF_VAR_AXIS)
      return stof_ctx_error(g->ctx, STOF_ERR_ARG, "compute %s: axis %d is not a compute axis", name, d);
    if (axes[d]->u.var->owner)
      return stof_ctx_error(g->ctx, STOF_ERR_ARG, "compute %s: axis %s already belongs to compute %s",
                            name, axes[d]->u.var->name, axes[d]->u.var->owner->name);
    axis[d] = axes[d]->u.var;
    shape[d] = axis[d]->extent;
  }
  walk_state w = {.g = g, .name = name, .ndim = ndim, .axis = axis,
                  .reduce = body->kind == STOF_EXPR_REDUCE ? body : NULL};
  walk(&w, body, 0);
  if (w.st) return w.st;
  stof_status st = STOF_OK;
  if (dtype >= 0 && (stof_dtype)dtype != body->dtype) {
    if (body->kind == STOF_EXPR_REDUCE) {
      /* cast inside the reduction so the reduction stays at the top */
      const stof_expr *src, *axv[64];
      int n = body->u.reduce.naxis;
      if (n > 64) return stof_ctx_error(g->ctx, STOF_ERR_ARG, "compute %s: too many reduce axes", name);
      for (int i = 0; i < n; i++) {
        stof_expr *v = new_expr(g, STOF_EXPR_VAR, STOF_DTYPE_I32);
        if (!v) return STOF_ERR_NOMEM;
        v->u.var = body->u.reduce.axis[i];
        axv[i] = v;
      }
      if ((st = stof_te_cast(g, (stof_dtype)dtype, body->u.reduce.src, &src))) return st;
      if ((st = stof_te_reduce(g, body->u.reduce.combiner, src, n, axv, &body))) return st;
    } else if ((st = stof_te_cast(g, (stof_dtype)dtype, body, &body))) {
      return st;
    }
  }
  if ((st = reserve_op(g))) return st;
  stof_op *op = new_op(g, STOF_OP_COMPUTE, name, body->dtype, ndim, shape);
  if (!op) return STOF_ERR_NOMEM;
  op->axis = axis;
  op->body = body;
  op->ninput = w.ninput;
  op->input = w.inputs;
  classify(op);
  for (int d = 0; d < ndim; d++) ((stof_var *)axis[d])->owner = op;
  add_op(g, op);
  *out = op;
  return STOF_OK;
}

stof_status stof_te_extern(stof_graph *g, const char *name, int ninput,
                           const stof_op *const *inputs, int ndim, const int64_t *shape,
                           stof_dtype dtype, stof_extern_cpu_fn cpu_fn, void *cpu_ud,
                           const stof_op *semantics, int compute_intensive,
                           const stof_op **out) {
  if (!name) name = "extern";
  char what[160];
  snprintf(what, sizeof what, "extern %s", name);
  stof_status st = stof_shape_check(g->ctx, what, ndim, shape);
  if (st) return st;
  if (ninput < 0) return stof_ctx_error(g->ctx, STOF_ERR_ARG, "%s: negative input count", what);
  for (int i = 0; i < ninput; i++)
    if (!inputs[i]) return stof_ctx_error(g->ctx, STOF_ERR_ARG, "%s: input %d is missing", what, i);
  if (!cpu_fn && !semantics)
    return stof_ctx_error(g->ctx, STOF_ERR_ARG, "%s: needs a CPU implementation or semantics", what);
  if (semantics && (semantics->ndim != ndim ||
                    memcmp(semantics->shape, shape, sizeof(int64_t) * (size_t)ndim)))
    return stof_ctx_error(g->ctx, STOF_ERR_SHAPE, "%s: semantics %s has another shape", what,
                          semantics->name);
  const stof_op **in = stof_arena_alloc(&g->arena, sizeof *in * (size_t)(ninput ? ninput : 1));
  if (!in) return STOF_ERR_NOMEM;
  memcpy(in, inputs, sizeof *in * (size_t)ninput);
  if ((st = reserve_op(g))) return st;
  stof_op *op = new_op(g, STOF_OP_EXTERN, name, dtype, ndim, shape);
  if (!op) return STOF_ERR_NOMEM;
  op->ninput = ninput;
  op->input = in;
  op->cpu_fn = cpu_fn;
  op->cpu_ud = cpu_ud;
  op->semantics = semantics;
  op->pattern = STOF_PATTERN_OPAQUE;
  op->compute_intensive = compute_intensive != 0;
  add_op(g, op);
  *out = op;
  return STOF_OK;
}

/* ---------------------------------------------------------------- collection */

stof_status core_graph_collect(stof_graph *g, int nout, const stof_op *const *outputs,
                               int with_semantics, const stof_op ***ops, int *nops) {
  *ops = NULL;
  *nops = 0;
  for (int i = 0; i < nout; i++)
    if (!outputs[i] || outputs[i]->id >= g->nop || g->ops[outputs[i]->id] != outputs[i])
      return stof_ctx_error(g->ctx, STOF_ERR_ARG, "output %d is not an op of this graph", i);
  size_t n = (size_t)g->nop;
  unsigned char *mark = stof_ctx_alloc(g->ctx, n ? n : 1);
  const stof_op **stack = stof_ctx_alloc(g->ctx, sizeof *stack * (n ? n : 1));
  if (!mark || !stack) {
    stof_ctx_dealloc(g->ctx, mark, n ? n : 1);
    stof_ctx_dealloc(g->ctx, stack, sizeof *stack * (n ? n : 1));
    return STOF_ERR_NOMEM;
  }
  int top = 0, count = 0;
  for (int i = 0; i < nout; i++)
    if (!mark[outputs[i]->id]) {
      mark[outputs[i]->id] = 1;
      stack[top++] = outputs[i];
    }
  while (top > 0) {
    const stof_op *op = stack[--top];
    count++;
    for (int i = 0; i <= op->ninput; i++) {
      const stof_op *in = i < op->ninput ? op->input[i] : with_semantics ? op->semantics : NULL;
      if (in && !mark[in->id]) {
        mark[in->id] = 1;
        stack[top++] = in;
      }
    }
  }
  stof_ctx_dealloc(g->ctx, stack, sizeof *stack * (n ? n : 1));
  const stof_op **list = stof_ctx_alloc(g->ctx, sizeof *list * (size_t)(count ? count : 1));
  if (!list) {
    stof_ctx_dealloc(g->ctx, mark, n ? n : 1);
    return STOF_ERR_NOMEM;
  }
  int k = 0;
  for (size_t i = 0; i < n; i++)
    if (mark[i]) list[k++] = g->ops[i];
  stof_ctx_dealloc(g->ctx, mark, n ? n : 1);
  *ops = list;
  *nops = count;
  return STOF_OK;
}

stof_status stof_graph_collect(stof_graph *g, int nout, const stof_op *const *outputs,
                               const stof_op ***ops, int *nops) {
  return core_graph_collect(g, nout, outputs, 0, ops, nops);
}

/* ---------------------------------------------------------------- metadata */

stof_status stof_te_set_tag(stof_graph *g, const stof_op *op, const char *tag) {
  if (!op || op->id >= g->nop || g->ops[op->id] != op)
    return stof_ctx_error(g->ctx, STOF_ERR_ARG, "set_tag: not an op of this graph");
  char *t = NULL;
  if (tag && !(t = stof_arena_strdup(&g->arena, tag))) return STOF_ERR_NOMEM;
  g->ops[op->id]->tag = t;
  return STOF_OK;
}

stof_status stof_te_set_intrin(stof_graph *g, const stof_op *op, const char *name,
                               const void *attrs) {
  if (!op || op->id >= g->nop || g->ops[op->id] != op)
    return stof_ctx_error(g->ctx, STOF_ERR_ARG, "set_intrin: not an op of this graph");
  if (op->kind != STOF_OP_EXTERN)
    return stof_ctx_error(g->ctx, STOF_ERR_ARG, "set_intrin: %s is not an extern op", op->name);
  char *n = NULL;
  if (name && !(n = stof_arena_strdup(&g->arena, name))) return STOF_ERR_NOMEM;
  g->ops[op->id]->intrin = n;
  g->ops[op->id]->intrin_attrs = attrs;
  return STOF_OK;
}

/* ---------------------------------------------------------------- extraction */

/* Copies expressions of g into another graph node by node (kinds and dtypes exactly as
 * they are), loads redirected through the op map and vars through the var map; shared
 * subexpressions stay shared (a pointer-keyed memo). */
typedef struct extract_state {
  stof_graph *src, *dst;
  const stof_op **opmap;   /* by src op id */
  const stof_var **varmap; /* by src var id */
  const stof_expr **memo_key, **memo_val;
  size_t memo_cap, memo_n;
  stof_status st;
} extract_state;

static size_t memo_slot(const extract_state *x, const stof_expr *e) {
  size_t h = (size_t)((uintptr_t)e >> 4) * 0x9e3779b97f4a7c15ull;
  size_t i = h & (x->memo_cap - 1);
  while (x->memo_key[i] && x->memo_key[i] != e) i = (i + 1) & (x->memo_cap - 1);
  return i;
}

static stof_status memo_grow(extract_state *x) {
  size_t ncap = x->memo_cap ? x->memo_cap * 2 : 256;
  stof_ctx *ctx = x->src->ctx;
  const stof_expr **k = stof_ctx_alloc(ctx, sizeof *k * ncap), **v = stof_ctx_alloc(ctx, sizeof *v * ncap);
  if (!k || !v) {
    stof_ctx_dealloc(ctx, k, sizeof *k * ncap);
    stof_ctx_dealloc(ctx, v, sizeof *v * ncap);
    return STOF_ERR_NOMEM;
  }
  const stof_expr **ok = x->memo_key, **ov = x->memo_val;
  size_t ocap = x->memo_cap;
  x->memo_key = k;
  x->memo_val = v;
  x->memo_cap = ncap;
  for (size_t i = 0; i < ocap; i++)
    if (ok[i]) {
      size_t s = memo_slot(x, ok[i]);
      k[s] = ok[i];
      v[s] = ov[i];
    }
  stof_ctx_dealloc(ctx, ok, sizeof *ok * ocap);
  stof_ctx_dealloc(ctx, ov, sizeof *ov * ocap);
  return STOF_OK;
}

static const stof_var *extract_var(extract_state *x, const stof_var *v) {
  if (x->varmap[v->id]) return x->varmap[v->id];
  stof_var *nv = stof_arena_alloc(&x->dst->arena, sizeof *nv);
  char *nm = stof_arena_strdup(&x->dst->arena, v->name ? v->name : "v");
  if (!nv || !nm) {
    x->st = STOF_ERR_NOMEM;
    return NULL;
  }
  nv->name = nm;
  nv->extent = v->extent;
  nv->kind = v->kind;
  nv->id = x->dst->nvar++;
  x->varmap[v->id] = nv;
  return nv;
}

static const stof_expr *extract_expr(extract_state *x, const stof_expr *e, int depth) {
  if (x->st || !e) return NULL;
  if (depth > STOF_TE_MAX_DEPTH) {
    x->st = stof_ctx_error(x->src->ctx, STOF_ERR_UNSUPPORTED,
                           "extract: an expression is nested deeper than %d levels", STOF_TE_MAX_DEPTH);
    return NULL;
  }
  if (x->memo_cap) {
    size_t s = memo_slot(x, e);
    if (x->memo_key[s]) return x->memo_val[s];
  }
  stof_expr *n = new_expr(x->dst, e->kind, e->dtype);
  if (!n) {
    x->st = STOF_ERR_NOMEM;
    return NULL;
  }
  n->u = e->u;
  n->depth = e->depth;
  switch (e->kind) {
  case STOF_EXPR_INT:
  case STOF_EXPR_FLOAT: break;
  case STOF_EXPR_VAR: n->u.var = extract_var(x, e->u.var); break;
  case STOF_EXPR_LOAD: {
    int k = e->u.load.nidx;
    const stof_expr **idx = stof_arena_alloc(&x->dst->arena, sizeof *idx * (size_t)(k ? k : 1));
    if (!idx) {
      x->st = STOF_ERR_NOMEM;
      return NULL;
    }
    for (int d = 0; d < k; d++) idx[d] = extract_expr(x, e->u.load.idx[d], depth + 1);
    n->u.load.idx = idx;
    n->u.load.tensor = x->opmap[e->u.load.tensor->id];
    if (!n->u.load.tensor && !x->st)
      x->st = stof_ctx_error(x->src->ctx, STOF_ERR_INTERNAL, "extract: %s has no copy", e->u.load.tensor->name);
    break;
  }
  case STOF_EXPR_REDUCE: {
    int k = e->u.reduce.naxis;
    const stof_var **ax = stof_arena_alloc(&x->dst->arena, sizeof *ax * (size_t)k);
    if (!ax) {
      x->st = STOF_ERR_NOMEM;
      return NULL;
    }
    for (int i = 0; i < k; i++) ax[i] = extract_var(x, e->u.reduce.axis[i]);
    n->u.reduce.axis = ax;
    n->u.reduce.src = extract_expr(x, e->u.reduce.src, depth + 1);
    break;
  }
  default:
    n->u.op.a = extract_expr(x, e->u.op.a, depth + 1);
    n->u.op.b = extract_expr(x, e->u.op.b, depth + 1);
    n->u.op.c = extract_expr(x, e->u.op.c, depth + 1);
  }
  if (x->st) return NULL;
  if (2 * (x->memo_n + 1) > x->memo_cap && (x->st = memo_grow(x))) return NULL;
  size_t s = memo_slot(x, e);
  x->memo_key[s] = e;
  x->memo_val[s] = n;
  x->memo_n++;
  return n;
}

static stof_status extract_op(extract_state *x, const stof_op *op) {
  stof_graph *d = x->dst;
  stof_status st = reserve_op(d);
  if (st) return st;
  stof_op *n = new_op(d, op->kind, op->name, op->dtype, op->ndim, op->shape);
  if (!n) return STOF_ERR_NOMEM;
  n->pattern = op->pattern;
  n->compute_intensive = op->compute_intensive;
  n->cpu_fn = op->cpu_fn;
  n->cpu_ud = op->cpu_ud;
  n->intrin = op->intrin ? stof_arena_strdup(&d->arena, op->intrin) : NULL;
  n->intrin_attrs = op->intrin_attrs;
  n->tag = op->tag ? stof_arena_strdup(&d->arena, op->tag) : NULL;
  if ((op->intrin && !n->intrin) || (op->tag && !n->tag)) return STOF_ERR_NOMEM;
  if (op->kind == STOF_OP_EXTERN && op->semantics)
    return stof_ctx_error(x->src->ctx, STOF_ERR_UNSUPPORTED,
                          "extract: extern %s is defined by semantics; extract its semantics' ops too", op->name);
  if (op->ninput) {
    const stof_op **in = stof_arena_alloc(&d->arena, sizeof *in * (size_t)op->ninput);
    if (!in) return STOF_ERR_NOMEM;
    for (int i = 0; i < op->ninput; i++) in[i] = x->opmap[op->input[i]->id];
    n->input = in;
    n->ninput = op->ninput;
  }
  if (op->kind == STOF_OP_COMPUTE) {
    const stof_var **axis = stof_arena_alloc(&d->arena, sizeof *axis * (size_t)(op->ndim ? op->ndim : 1));
    if (!axis) return STOF_ERR_NOMEM;
    for (int k = 0; k < op->ndim; k++) axis[k] = extract_var(x, op->axis[k]);
    n->axis = axis;
    n->body = extract_expr(x, op->body, 0);
    if (x->st) return x->st;
    for (int k = 0; k < op->ndim; k++) ((stof_var *)axis[k])->owner = n;
  }
  add_op(d, n);
  x->opmap[op->id] = n;
  return STOF_OK;
}

stof_status stof_graph_extract(stof_graph *g, int nop, const stof_op *const *ops,
                               stof_graph **out, const stof_op **map) {
  stof_ctx *ctx = g->ctx;
  *out = NULL;
  size_t nall = (size_t)(g->nop ? g->nop : 1);
  unsigned char *in_set = stof_ctx_alloc(ctx, nall);
  extract_state x = {.src = g};
  x.opmap = stof_ctx_alloc(ctx, sizeof *x.opmap * nall);
  x.varmap = stof_ctx_alloc(ctx, sizeof *x.varmap * (size_t)(g->nvar ? g->nvar : 1));
  stof_status st = STOF_OK;
  if (!in_set || !x.opmap || !x.varmap) st = STOF_ERR_NOMEM;
  for (int i = 0; i < nop && !st; i++) {
    const stof_op *op = ops[i];
    if (!op || op->id >= g->nop || g->ops[op->id] != op)
      st = stof_ctx_error(ctx, STOF_ERR_ARG, "extract: op %d is not an op of this graph", i);
    else if (op->kind == STOF_OP_PLACEHOLDER)
      st = stof_ctx_error(ctx, STOF_ERR_ARG, "extract: %s is a placeholder (its readers bring it along)", op->name);
    else
      in_set[op->id] = 1;
  }
  if (!st) st = stof_graph_new(ctx, &x.dst);
  /* ids ascending: producers before readers; outside inputs become placeholders first */
  for (int id = 0; id < g->nop && !st; id++) {
    if (!in_set[id]) continue;
    const stof_op *op = g->ops[id];
    for (int i = 0; i < op->ninput && !st; i++) {
      const stof_op *in = op->input[i];
      if (in_set[in->id] || x.opmap[in->id]) continue;
      const stof_op *ph;
      st = stof_te_placeholder(x.dst, in->ndim, in->shape, in->dtype, in->name, &ph);
      if (!st) x.opmap[in->id] = ph;
    }
    if (!st) st = extract_op(&x, op);
  }
  if (!st && x.st) st = x.st;
  if (!st && map) memcpy(map, x.opmap, sizeof *map * (size_t)g->nop);
  stof_ctx_dealloc(ctx, in_set, nall);
  stof_ctx_dealloc(ctx, x.opmap, sizeof *x.opmap * nall);
  stof_ctx_dealloc(ctx, x.varmap, sizeof *x.varmap * (size_t)(g->nvar ? g->nvar : 1));
  stof_ctx_dealloc(ctx, x.memo_key, sizeof *x.memo_key * x.memo_cap);
  stof_ctx_dealloc(ctx, x.memo_val, sizeof *x.memo_val * x.memo_cap);
  if (st) {
    stof_graph_free(x.dst);
    return st;
  }
  *out = x.dst;
  return STOF_OK;
}
