/*
 * Printing and structural hashing of TE expressions and graphs. The hash ignores names:
 * vars hash by their role (axis position in their compute, or position in their
 * reduction) and ops by their position in the collected topological order.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core_int.h"

static void print_expr(stof_buf *b, const stof_expr *e) {
  stof_expr_kind k = e->kind;
  switch (k) {
  case STOF_EXPR_INT: stof_buf_printf(b, "%lld", (long long)e->u.ival); return;
  case STOF_EXPR_FLOAT: {
    char t[64];
    /* a constant holds its dtype's value (stof_te_float rounds it): print the shortest text
     * that reads back as that value in the dtype (1e-05, not 9.99999975e-06, for float32) */
    snprintf(t, sizeof t, "%.9g", e->u.fval);
    if (e->dtype != STOF_DTYPE_F64)
      for (int p = 1; p < 9; p++) {
        char u[64];
        snprintf(u, sizeof u, "%.*g", p, e->u.fval);
        if (stof_dtype_round(e->dtype, strtod(u, NULL)) == e->u.fval) {
          memcpy(t, u, sizeof t);
          break;
        }
      }
    if (!strpbrk(t, ".eEn")) strcat(t, ".0");
    stof_buf_puts(b, t);
    if (e->dtype != STOF_DTYPE_F32) stof_buf_printf(b, "%s", e->dtype == STOF_DTYPE_F16 ? "h" : e->dtype == STOF_DTYPE_BF16 ? "bf" : "d");
    return;
  }
  case STOF_EXPR_VAR: stof_buf_puts(b, e->u.var->name); return;
  case STOF_EXPR_MIN:
  case STOF_EXPR_MAX:
  case STOF_EXPR_POW:
    stof_buf_printf(b, "%s(", stof_expr_kind_name(k));
    print_expr(b, e->u.op.a);
    stof_buf_puts(b, ", ");
    print_expr(b, e->u.op.b);
    stof_buf_puts(b, ")");
    return;
  case STOF_EXPR_NEG:
  case STOF_EXPR_NOT:
    stof_buf_puts(b, k == STOF_EXPR_NEG ? "-" : "!");
    print_expr(b, e->u.op.a);
    return;
  case STOF_EXPR_CAST:
    stof_buf_printf(b, "%s(", stof_dtype_name(e->dtype));
    print_expr(b, e->u.op.a);
    stof_buf_puts(b, ")");
    return;
  case STOF_EXPR_SELECT:
    stof_buf_puts(b, "select(");
    print_expr(b, e->u.op.c);
    stof_buf_puts(b, ", ");
    print_expr(b, e->u.op.a);
    stof_buf_puts(b, ", ");
    print_expr(b, e->u.op.b);
    stof_buf_puts(b, ")");
    return;
  case STOF_EXPR_LOAD:
    stof_buf_printf(b, "%s[", e->u.load.tensor->name);
    for (int d = 0; d < e->u.load.nidx; d++) {
      if (d) stof_buf_puts(b, ", ");
      print_expr(b, e->u.load.idx[d]);
    }
    stof_buf_puts(b, "]");
    return;
  case STOF_EXPR_REDUCE:
    stof_buf_printf(b, "%s(", stof_reduce_kind_name(e->u.reduce.combiner));
    print_expr(b, e->u.reduce.src);
    stof_buf_puts(b, ", axis=[");
    for (int i = 0; i < e->u.reduce.naxis; i++)
      stof_buf_printf(b, "%s%s:%lld", i ? ", " : "", e->u.reduce.axis[i]->name,
                      (long long)e->u.reduce.axis[i]->extent);
    stof_buf_puts(b, "])");
    return;
  default:
    if (stof_expr_kind_is_unary(k)) {
      stof_buf_printf(b, "%s(", stof_expr_kind_name(k));
      print_expr(b, e->u.op.a);
      stof_buf_puts(b, ")");
    } else {
      stof_buf_puts(b, "(");
      print_expr(b, e->u.op.a);
      stof_buf_printf(b, " %s ", stof_expr_kind_name(k));
      print_expr(b, e->u.op.b);
      stof_buf_puts(b, ")");
    }
  }
}

stof_status stof_expr_print(stof_ctx *ctx, const stof_expr *e, char **out) {
  if (!e) return stof_ctx_error(ctx, STOF_ERR_ARG, "print: missing expression");
  stof_buf b;
  stof_buf_init(&b, ctx);
  print_expr(&b, e);
  return stof_buf_finish(&b, out) ? stof_ctx_error(ctx, STOF_ERR_NOMEM, "out of memory printing") : STOF_OK;
}

static void print_shape(stof_buf *b, const stof_op *op) {
  char s[256];
  stof_buf_puts(b, core_shape_str(s, sizeof s, op->ndim, op->shape));
}

stof_status stof_te_print(stof_graph *g, int nout, const stof_op *const *outputs, char **out) {
  const stof_op **ops;
  int n;
  *out = NULL;
  stof_status st = core_graph_collect(g, nout, outputs, 1, &ops, &n);
  if (st) return st;
  stof_buf b;
  stof_buf_init(&b, g->ctx);
  for (int i = 0; i < n; i++) {
    const stof_op *op = ops[i];
    stof_buf_printf(&b, "%s = ", op->name);
    switch (op->kind) {
    case STOF_OP_PLACEHOLDER:
      stof_buf_puts(&b, "placeholder(");
      print_shape(&b, op);
      stof_buf_printf(&b, ", %s)\n", stof_dtype_name(op->dtype));
      break;
    case STOF_OP_COMPUTE:
      stof_buf_puts(&b, "compute(");
      print_shape(&b, op);
      stof_buf_printf(&b, ", %s, axes=[", stof_dtype_name(op->dtype));
      for (int d = 0; d < op->ndim; d++)
        stof_buf_printf(&b, "%s%s:%lld", d ? ", " : "", op->axis[d]->name, (long long)op->axis[d]->extent);
      stof_buf_printf(&b, "], %s, %s):\n  ", stof_pattern_name(op->pattern), op->compute_intensive ? "CI" : "MI");
      print_expr(&b, op->body);
      stof_buf_puts(&b, "\n");
      break;
    case STOF_OP_EXTERN:
      stof_buf_puts(&b, "extern(");
      print_shape(&b, op);
      stof_buf_printf(&b, ", %s, inputs=[", stof_dtype_name(op->dtype));
      for (int j = 0; j < op->ninput; j++) stof_buf_printf(&b, "%s%s", j ? ", " : "", op->input[j]->name);
      stof_buf_printf(&b, "], %s, %s", stof_pattern_name(op->pattern), op->compute_intensive ? "CI" : "MI");
      if (op->semantics) stof_buf_printf(&b, ", semantics=%s", op->semantics->name);
      stof_buf_puts(&b, ")\n");
      break;
    default: break;
    }
  }
  stof_ctx_dealloc(g->ctx, ops, sizeof *ops * (size_t)(n ? n : 1));
  if (stof_buf_finish(&b, out)) return stof_ctx_error(g->ctx, STOF_ERR_NOMEM, "out of memory printing");
  return STOF_OK;
}

/* ---------------------------------------------------------------- hashing */

static uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  h *= 0xff51afd7ed558ccdull;
  return h ^ (h >> 33);
}

typedef struct hash_state {
  const int *pos; /* op id -> position in the collected order */
  const stof_expr *reduce;
} hash_state;

static uint64_t hash_expr(hash_state *hs, const stof_expr *e) {
  if (!e) return 0x51ed;
  uint64_t h = mix((uint64_t)e->kind * 31 + 7, (uint64_t)e->dtype);
  switch (e->kind) {
  case STOF_EXPR_INT: return mix(h, (uint64_t)e->u.ival);
  case STOF_EXPR_FLOAT: {
    uint64_t bits;
    double v = e->u.fval == 0 ? 0.0 : e->u.fval;
    memcpy(&bits, &v, 8);
    return mix(h, bits);
  }
  case STOF_EXPR_VAR: {
    const stof_var *v = e->u.var;
    int role = -1;
    if (v->kind == STOF_VAR_AXIS && v->owner) {
      for (int d = 0; d < v->owner->ndim; d++)
        if (v->owner->axis[d] == v) role = d;
    } else if (hs->reduce) {
      for (int i = 0; i < hs->reduce->u.reduce.naxis; i++)
        if (hs->reduce->u.reduce.axis[i] == v) role = 100 + i;
    }
    return mix(mix(h, (uint64_t)role), (uint64_t)v->extent);
  }
  case STOF_EXPR_LOAD:
    h = mix(h, (uint64_t)hs->pos[e->u.load.tensor->id]);
    for (int d = 0; d < e->u.load.nidx; d++) h = mix(h, hash_expr(hs, e->u.load.idx[d]));
    return h;
  case STOF_EXPR_REDUCE: {
    const stof_expr *outer = hs->reduce;
    hs->reduce = e;
    h = mix(h, (uint64_t)e->u.reduce.combiner);
    for (int i = 0; i < e->u.reduce.naxis; i++) h = mix(h, (uint64_t)e->u.reduce.axis[i]->extent);
    h = mix(h, hash_expr(hs, e->u.reduce.src));
    hs->reduce = outer;
    return h;
  }
  default:
    h = mix(h, hash_expr(hs, e->u.op.a));
    h = mix(h, hash_expr(hs, e->u.op.b));
    return mix(h, hash_expr(hs, e->u.op.c));
  }
}

stof_status stof_te_hash(stof_graph *g, int nout, const stof_op *const *outputs, uint64_t *out) {
  const stof_op **ops;
  int n;
  stof_status st = core_graph_collect(g, nout, outputs, 1, &ops, &n);
  if (st) return st;
  size_t npos = (size_t)(g->nop ? g->nop : 1);
  int *pos = stof_ctx_alloc(g->ctx, sizeof *pos * npos);
  if (!pos) {
    stof_ctx_dealloc(g->ctx, ops, sizeof *ops * (size_t)(n ? n : 1));
    return STOF_ERR_NOMEM;
  }
  for (int i = 0; i < n; i++) pos[ops[i]->id] = i;
  hash_state hs = {pos, NULL};
  uint64_t h = 0x5707;
  for (int i = 0; i < n; i++) {
    const stof_op *op = ops[i];
    h = mix(h, (uint64_t)op->kind);
    h = mix(h, (uint64_t)op->dtype);
    h = mix(h, (uint64_t)op->ndim);
    for (int d = 0; d < op->ndim; d++) h = mix(h, (uint64_t)op->shape[d]);
    if (op->kind == STOF_OP_COMPUTE) h = mix(h, hash_expr(&hs, op->body));
    if (op->kind == STOF_OP_EXTERN) {
      for (const char *c = op->name; *c; c++) h = mix(h, (uint64_t)(unsigned char)*c);
      for (int j = 0; j < op->ninput; j++) h = mix(h, (uint64_t)pos[op->input[j]->id]);
      h = mix(h, op->semantics ? (uint64_t)pos[op->semantics->id] : 0xffffull);
      h = mix(h, (uint64_t)op->compute_intensive);
    }
  }
  for (int i = 0; i < nout; i++) h = mix(h, (uint64_t)pos[outputs[i]->id]);
  stof_ctx_dealloc(g->ctx, pos, sizeof *pos * npos);
  stof_ctx_dealloc(g->ctx, ops, sizeof *ops * (size_t)(n ? n : 1));
  *out = h;
  return STOF_OK;
}
