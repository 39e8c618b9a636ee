/*
 * The reference interpreter: evaluates a TE graph on the CPU, naively, as ground truth
 * for every schedule and kernel. Values are float64 throughout; each op's results are
 * rounded to its dtype when stored; reductions accumulate in float64. Every load is
 * range-checked. Evaluation is a tree walk per output element: slow, simple, obvious.
 */
#include <math.h>
#include <string.h>

#include "core_int.h"

/* Floored modulo of floats (the result takes b's sign, as Python's %): fmod is exact, then
 * one correction; a - floor(a / b) * b loses the result when a / b is large or underflows. */
static double float_mod(double a, double b) {
  double r = fmod(a, b);
  if (r != 0 && (r < 0) != (b < 0)) r += b;
  return r;
}

typedef struct interp {
  stof_graph *g;
  stof_ctx *ctx;
  double **val;     /* per op id: its values (NULL when not needed) */
  int64_t *env;     /* per var id: the current value */
  const stof_op *cur;
  stof_status st;
} interp;

static double eval(interp *in, const stof_expr *e);

static double int_div(interp *in, double a, double b, int mod) {
  if (b == 0) {
    if (!in->st)
      in->st = stof_ctx_error(in->ctx, STOF_ERR_ARG, "compute %s: integer division by zero", in->cur->name);
    return 0;
  }
  double q = floor(a / b);
  return mod ? a - q * b : q;
}

static double eval_binary(interp *in, const stof_expr *e) {
  double a = eval(in, e->u.op.a), b = eval(in, e->u.op.b);
  int isint = !stof_dtype_is_float(e->dtype);
  switch (e->kind) {
  case STOF_EXPR_ADD: return a + b;
  case STOF_EXPR_SUB: return a - b;
  case STOF_EXPR_MUL: return a * b;
  case STOF_EXPR_DIV: return isint ? int_div(in, a, b, 0) : a / b;
  case STOF_EXPR_FLOORDIV: return isint ? int_div(in, a, b, 0) : floor(a / b);
  case STOF_EXPR_MOD: return isint ? int_div(in, a, b, 1) : float_mod(a, b);
  case STOF_EXPR_MIN: return a < b ? a : b;
  case STOF_EXPR_MAX: return a > b ? a : b;
  case STOF_EXPR_POW: return pow(a, b);
  case STOF_EXPR_LT: return a < b;
  case STOF_EXPR_LE: return a <= b;
  case STOF_EXPR_GT: return a > b;
  case STOF_EXPR_GE: return a >= b;
  case STOF_EXPR_EQ: return a == b;
  case STOF_EXPR_NE: return a != b;
  case STOF_EXPR_AND: return a != 0 && b != 0;
  case STOF_EXPR_OR: return a != 0 || b != 0;
  default: return NAN;
  }
}

static double eval_unary(interp *in, const stof_expr *e) {
  double a = eval(in, e->u.op.a);
  switch (e->kind) {
  case STOF_EXPR_NEG: return -a;
  case STOF_EXPR_NOT: return a == 0;
  case STOF_EXPR_EXP: return exp(a);
  case STOF_EXPR_LOG: return log(a);
  case STOF_EXPR_SQRT: return sqrt(a);
  case STOF_EXPR_RSQRT: return 1.0 / sqrt(a);
  case STOF_EXPR_TANH: return tanh(a);
  case STOF_EXPR_ERF: return erf(a);
  case STOF_EXPR_SIGMOID: return 1.0 / (1.0 + exp(-a));
  case STOF_EXPR_ABS: return fabs(a);
  case STOF_EXPR_SIN: return sin(a);
  case STOF_EXPR_COS: return cos(a);
  case STOF_EXPR_FLOOR: return floor(a);
  default: return NAN;
  }
}

static double eval_load(interp *in, const stof_expr *e) {
  const stof_op *t = e->u.load.tensor;
  int64_t off = 0;
  for (int d = 0; d < e->u.load.nidx; d++) {
    double v = eval(in, e->u.load.idx[d]);
    int64_t ix = (int64_t)v;
    if (ix < 0 || ix >= t->shape[d]) {
      if (!in->st)
        in->st = stof_ctx_error(in->ctx, STOF_ERR_RANGE,
                                "compute %s: load %s: index %lld out of range for dim %d of extent %lld",
                                in->cur->name, t->name, (long long)ix, d, (long long)t->shape[d]);
      return 0;
    }
    off = off * t->shape[d] + ix;
  }
  return in->val[t->id][off];
}

static double eval_reduce(interp *in, const stof_expr *e) {
  int n = e->u.reduce.naxis;
  const stof_var *const *ax = e->u.reduce.axis;
  stof_reduce_kind c = e->u.reduce.combiner;
  double acc = c == STOF_REDUCE_SUM ? 0.0 : c == STOF_REDUCE_MAX ? -INFINITY : INFINITY;
  for (int i = 0; i < n; i++) in->env[ax[i]->id] = 0;
  for (;;) {
    double v = eval(in, e->u.reduce.src);
    if (in->st) return 0;
    if (c == STOF_REDUCE_SUM) acc += v;
    else if (c == STOF_REDUCE_MAX ? v > acc : v < acc) acc = v;
    else if (isnan(v)) acc = v;
    int i = n - 1;
    while (i >= 0 && ++in->env[ax[i]->id] == ax[i]->extent) in->env[ax[i--]->id] = 0;
    if (i < 0) break;
  }
  return acc;
}

static double eval(interp *in, const stof_expr *e) {
  switch (e->kind) {
  case STOF_EXPR_INT: return (double)e->u.ival;
  case STOF_EXPR_FLOAT: return e->u.fval;
  case STOF_EXPR_VAR: return (double)in->env[e->u.var->id];
  case STOF_EXPR_CAST: return stof_dtype_round(e->dtype, eval(in, e->u.op.a));
  case STOF_EXPR_SELECT: return eval(in, e->u.op.c) != 0 ? eval(in, e->u.op.a) : eval(in, e->u.op.b);
  case STOF_EXPR_LOAD: return eval_load(in, e);
  case STOF_EXPR_REDUCE: return eval_reduce(in, e);
  default:
    if (stof_expr_kind_is_binary(e->kind)) return eval_binary(in, e);
    return eval_unary(in, e);
  }
}

static stof_status run_compute(interp *in, const stof_op *op, double *out) {
  int64_t n = stof_shape_numel(op->ndim, op->shape);
  for (int d = 0; d < op->ndim; d++) in->env[op->axis[d]->id] = 0;
  in->cur = op;
  for (int64_t k = 0; k < n; k++) {
    out[k] = stof_dtype_round(op->dtype, eval(in, op->body));
    if (in->st) return in->st;
    for (int d = op->ndim - 1; d >= 0; d--) {
      if (++in->env[op->axis[d]->id] < op->shape[d]) break;
      in->env[op->axis[d]->id] = 0;
    }
  }
  return STOF_OK;
}

static stof_status run_extern(interp *in, const stof_op *op, double *out) {
  int64_t n = stof_shape_numel(op->ndim, op->shape);
  if (!op->cpu_fn) {
    memcpy(out, in->val[op->semantics->id], sizeof *out * (size_t)n);
  } else {
    stof_tensor *tin[64] = {0}, *tout = NULL;
    if (op->ninput > 64)
      return stof_ctx_error(in->ctx, STOF_ERR_UNSUPPORTED, "extern %s: more than 64 inputs", op->name);
    stof_status st = STOF_OK;
    for (int i = 0; i < op->ninput && !st; i++)
      st = stof_tensor_wrap(in->ctx, STOF_DTYPE_F64, op->input[i]->ndim, op->input[i]->shape, NULL,
                            in->val[op->input[i]->id], STOF_DEVICE_CPU, &tin[i]);
    if (!st) st = stof_tensor_wrap(in->ctx, STOF_DTYPE_F64, op->ndim, op->shape, NULL, out, STOF_DEVICE_CPU, &tout);
    if (!st) st = op->cpu_fn(in->ctx, op->ninput, (const stof_tensor *const *)tin, tout, op->cpu_ud);
    for (int i = 0; i < op->ninput; i++) stof_tensor_free(tin[i]);
    stof_tensor_free(tout);
    if (st) return st;
  }
  for (int64_t k = 0; k < n; k++) out[k] = stof_dtype_round(op->dtype, out[k]);
  return STOF_OK;
}

static stof_status load_feed(interp *in, const stof_op *op, const stof_tensor *t, double *out) {
  char a[128], b[128];
  if (t->device != STOF_DEVICE_CPU)
    return stof_ctx_error(in->ctx, STOF_ERR_ARG, "feed for placeholder %s: the tensor is on the GPU", op->name);
  if (t->ndim != op->ndim || memcmp(t->shape, op->shape, sizeof(int64_t) * (size_t)op->ndim))
    return stof_ctx_error(in->ctx, STOF_ERR_SHAPE, "feed for placeholder %s: shape %s given, %s expected",
                          op->name, core_shape_str(a, sizeof a, t->ndim, t->shape),
                          core_shape_str(b, sizeof b, op->ndim, op->shape));
  int64_t n = stof_shape_numel(op->ndim, op->shape);
  int64_t idx[STOF_MAX_DIMS] = {0};
  for (int64_t k = 0; k < n; k++) {
    int64_t off = 0;
    for (int d = 0; d < op->ndim; d++) off += idx[d] * t->strides[d];
    out[k] = stof_dtype_round(op->dtype, stof_tensor_load(t, off));
    for (int d = op->ndim - 1; d >= 0; d--) {
      if (++idx[d] < op->shape[d]) break;
      idx[d] = 0;
    }
  }
  return STOF_OK;
}

/* The values of op, allocated (NULL: out of memory, recorded). */
static double *alloc_values(interp *in, const stof_op *op) {
  int64_t n = stof_shape_numel(op->ndim, op->shape);
  in->val[op->id] = stof_ctx_alloc(in->ctx, sizeof(double) * (size_t)(n ? n : 1));
  return in->val[op->id];
}

static void free_values(interp *in, const stof_op *op) {
  int64_t n = stof_shape_numel(op->ndim, op->shape);
  stof_ctx_dealloc(in->ctx, in->val[op->id], sizeof(double) * (size_t)(n ? n : 1));
  in->val[op->id] = NULL;
}

/* A placeholder's values from the feed. */
static stof_status load_placeholder(interp *in, const stof_op *op, int nfeed, const stof_op *const *feed_ops,
                                    const stof_tensor *const *feed) {
  int f = -1;
  for (int j = 0; j < nfeed; j++)
    if (feed_ops[j] == op) f = j;
  if (f < 0) return stof_ctx_error(in->ctx, STOF_ERR_ARG, "placeholder %s has no value in the feed", op->name);
  double *v = alloc_values(in, op);
  return v ? load_feed(in, op, feed[f], v) : STOF_ERR_NOMEM;
}

stof_status stof_interp_eval(stof_graph *g, int nout, const stof_op *const *outputs,
                             int nfeed, const stof_op *const *feed_ops,
                             const stof_tensor *const *feed, stof_tensor **results) {
  stof_ctx *ctx = g->ctx;
  const stof_op **ops = NULL;
  int nops = 0;
  for (int i = 0; i < nout; i++) results[i] = NULL;
  for (int i = 0; i < nfeed; i++)
    if (!feed_ops[i] || feed_ops[i]->kind != STOF_OP_PLACEHOLDER || !feed[i])
      return stof_ctx_error(ctx, STOF_ERR_ARG, "feed %d: %s", i,
                            !feed_ops[i] || !feed[i] ? "missing op or tensor" : "not a placeholder");
  stof_status st = core_graph_collect(g, nout, outputs, 1, &ops, &nops);
  if (st) return st;
  interp in = {.g = g, .ctx = ctx};
  size_t nval = (size_t)g->nop, nenv = (size_t)(g->nvar ? g->nvar : 1);
  in.val = stof_ctx_alloc(ctx, sizeof *in.val * (nval ? nval : 1));
  in.env = stof_ctx_alloc(ctx, sizeof *in.env * nenv);
  /* last[id]: the position in ops of the last op that reads op id (nops: an output, kept);
   * an op's values are freed after it, and a placeholder is loaded just before its first
   * reader, so the values alive are those still to be read (a model's weights one layer at
   * a time), not every op's at once */
  int *last = stof_ctx_alloc(ctx, sizeof *last * (nval ? nval : 1));
  if (!in.val || !in.env || !last) {
    st = STOF_ERR_NOMEM;
    goto done;
  }
  for (size_t i = 0; i < nval; i++) last[i] = -1; /* -1: nothing reads it */
  for (int i = 0; i < nops; i++) {
    const stof_op *op = ops[i];
    for (int k = 0; k < op->ninput; k++) last[op->input[k]->id] = i;
    if (op->kind == STOF_OP_EXTERN && !op->cpu_fn && op->semantics) last[op->semantics->id] = i;
  }
  for (int i = 0; i < nout; i++) last[outputs[i]->id] = nops;
  for (int i = 0; i < nops && !st; i++) {
    const stof_op *op = ops[i];
    if (op->kind == STOF_OP_PLACEHOLDER) { /* an output now; else loaded by its first reader */
      if (last[op->id] == nops) st = load_placeholder(&in, op, nfeed, feed_ops, feed);
      continue;
    }
    for (int k = 0; k < op->ninput && !st; k++)
      if (op->input[k]->kind == STOF_OP_PLACEHOLDER && !in.val[op->input[k]->id])
        st = load_placeholder(&in, op->input[k], nfeed, feed_ops, feed);
    if (st) break;
    double *v = alloc_values(&in, op);
    if (!v) {
      st = STOF_ERR_NOMEM;
      break;
    }
    st = op->kind == STOF_OP_COMPUTE ? run_compute(&in, op, v) : run_extern(&in, op, v);
    /* what no later op reads */
    for (int k = 0; k < op->ninput; k++)
      if (last[op->input[k]->id] == i) free_values(&in, op->input[k]);
    if (op->kind == STOF_OP_EXTERN && !op->cpu_fn && op->semantics && last[op->semantics->id] == i)
      free_values(&in, op->semantics);
    if (last[op->id] < 0) free_values(&in, op); /* read by none (an extern's unused semantics) */
  }
  for (int i = 0; i < nout && !st; i++) {
    const stof_op *op = outputs[i];
    st = stof_tensor_new(ctx, op->dtype, op->ndim, op->shape, STOF_DEVICE_CPU, &results[i]);
    int64_t n = stof_shape_numel(op->ndim, op->shape);
    for (int64_t k = 0; k < n && !st; k++) stof_tensor_store(results[i], k, in.val[op->id][k]);
  }
  if (st)
    for (int i = 0; i < nout; i++) {
      stof_tensor_free(results[i]);
      results[i] = NULL;
    }
done:
  if (in.val)
    for (int i = 0; i < nops; i++)
      if (in.val[ops[i]->id]) free_values(&in, ops[i]);
  stof_ctx_dealloc(ctx, last, sizeof *last * (nval ? nval : 1));
  stof_ctx_dealloc(ctx, in.val, sizeof *in.val * (nval ? nval : 1));
  stof_ctx_dealloc(ctx, in.env, sizeof *in.env * nenv);
  stof_ctx_dealloc(ctx, ops, sizeof *ops * (size_t)(nops ? nops : 1));
  return st;
}
