/*
 * The default fusion scheme (rule-based, the search's starting point): walking the ops in
 * id order (a topological order),
 *  - an extern run by a registered intrinsic is a segment of its own (attention);
 *  - a GEMM (sum(x[..., k] * w[k, j] or w[j, k])) starts a vendor-GEMM segment that takes
 *    in its epilogue, while each value has exactly one reader: a bias add (tag "bias_add"),
 *    an activation (tags "relu", "gelu_tanh", and "gelu" on the GPU unless exact_gelu: the
 *    epilogue computes GELU in its tanh form), and a residual add (tag "residual_add", when
 *    no activation came before);
 *  - every other compute joins the latest segment among its producers when that one is a
 *    generated segment (so elementwise chains, residual adds and the statistics and output of
 *    a layer norm become one segment, which the default schedule makes one kernel), or starts
 *    a new generated segment.
 * Joining only the latest producer's segment keeps the segment order a topological order.
 * Tags are read, and the structure of every absorbed op is checked (a bias or residual add
 * by its loads, an activation by its values as a function of its one input), so a wrong tag
 * never changes a result; a GEMM's loads must cover its operands' storage exactly.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "exec_int.h"

static int is_var(const stof_expr *e, const stof_var *v) { return e && e->kind == STOF_EXPR_VAR && e->u.var == v; }

/* e loads t at exactly op's axes, in order. */
static int load_at_axes(const stof_expr *e, const stof_op *t, const stof_op *op) {
  if (!e || e->kind != STOF_EXPR_LOAD || e->u.load.tensor != t || e->u.load.nidx != op->ndim) return 0;
  for (int d = 0; d < op->ndim; d++)
    if (!is_var(e->u.load.idx[d], op->axis[d])) return 0;
  return 1;
}

/* e loads the 1-D t at op's last axis. */
static int load_at_last(const stof_expr *e, const stof_op *t, const stof_op *op) {
  return e && e->kind == STOF_EXPR_LOAD && e->u.load.tensor == t && e->u.load.nidx == 1 &&
         is_var(e->u.load.idx[0], op->axis[op->ndim - 1]);
}

/* x: loads at (axes[0..nd-2], k); w: (k, j) or (j, k). */
static int match_operands(const stof_op *op, const stof_expr *xe, const stof_expr *we, const stof_var *k,
                          exec_gemm *g) {
  int nd = op->ndim;
  if (xe->kind != STOF_EXPR_LOAD || we->kind != STOF_EXPR_LOAD) return 0;
  const stof_op *x = xe->u.load.tensor, *w = we->u.load.tensor;
  if (xe->u.load.nidx != nd || x->ndim != nd || we->u.load.nidx != 2) return 0;
  for (int d = 0; d < nd - 1; d++)
    if (!is_var(xe->u.load.idx[d], op->axis[d])) return 0;
  if (!is_var(xe->u.load.idx[nd - 1], k)) return 0;
  const stof_var *j = op->axis[nd - 1];
  int tb;
  if (is_var(we->u.load.idx[0], k) && is_var(we->u.load.idx[1], j)) tb = 0;
  else if (is_var(we->u.load.idx[0], j) && is_var(we->u.load.idx[1], k)) tb = 1;
  else return 0;
  if (x->dtype != op->dtype || w->dtype != op->dtype) return 0;
  /* the loads cover the operands exactly (a body that reads part of x or w is not a GEMM
   * of their storage) */
  for (int d = 0; d < nd - 1; d++)
    if (x->shape[d] != op->shape[d]) return 0;
  if (x->shape[nd - 1] != k->extent || w->shape[tb] != k->extent || w->shape[1 - tb] != op->shape[nd - 1]) return 0;
  memset(g, 0, sizeof *g);
  g->gemm = op;
  g->x = x;
  g->w = w;
  g->trans_b = tb;
  g->M = 1;
  for (int d = 0; d < nd - 1; d++) g->M *= op->shape[d];
  g->N = op->shape[nd - 1];
  g->K = k->extent;
  return 1;
}

int exec_match_gemm(const stof_op *op, exec_gemm *g) {
  if (op->kind != STOF_OP_COMPUTE || op->ndim < 2 || !op->body) return 0;
  const stof_expr *b = op->body;
  if (b->kind != STOF_EXPR_REDUCE || b->u.reduce.combiner != STOF_REDUCE_SUM || b->u.reduce.naxis != 1) return 0;
  const stof_expr *m = b->u.reduce.src;
  if (m->kind != STOF_EXPR_MUL) return 0;
  if (op->dtype != STOF_DTYPE_F16 && op->dtype != STOF_DTYPE_BF16 && op->dtype != STOF_DTYPE_F32) return 0;
  const stof_var *k = b->u.reduce.axis[0];
  return match_operands(op, m->u.op.a, m->u.op.b, k, g) || match_operands(op, m->u.op.b, m->u.op.a, k, g);
}

int stof_plan_op_is_gemm(const stof_op *op) {
  exec_gemm g;
  return op && exec_match_gemm(op, &g);
}

static stof_status new_seg(stof_plan *p, stof_seg_kind kind, int *out) {
  if (p->nseg == p->capseg) {
    int ncap = p->capseg ? p->capseg * 2 : 32;
    exec_seg *s = stof_ctx_realloc(p->ctx, p->seg, sizeof *s * (size_t)p->capseg, sizeof *s * (size_t)ncap);
    if (!s) return STOF_ERR_NOMEM;
    memset(s + p->capseg, 0, sizeof *s * (size_t)(ncap - p->capseg));
    p->seg = s;
    p->capseg = ncap;
  }
  exec_seg *s = &p->seg[p->nseg];
  memset(s, 0, sizeof *s);
  s->kind = kind;
  s->shared_with = -1;
  *out = p->nseg++;
  return STOF_OK;
}

static stof_status seg_add(stof_plan *p, int si, const stof_op *op) {
  exec_seg *s = &p->seg[si];
  if (s->nop == s->capop) {
    int ncap = s->capop ? s->capop * 2 : 8;
    const stof_op **o = stof_ctx_realloc(p->ctx, s->op, sizeof *o * (size_t)s->capop, sizeof *o * (size_t)ncap);
    if (!o) return STOF_ERR_NOMEM;
    s->op = o;
    s->capop = ncap;
  }
  s->op[s->nop++] = op;
  p->seg_of[op->id] = si;
  return STOF_OK;
}

/* A value is available to a segment created now when it is an input or already produced. */
static int available(const stof_plan *p, const stof_op *t) {
  return t->kind == STOF_OP_PLACEHOLDER || p->seg_of[t->id] >= 0;
}

/* The one reader of t among the plan's ops (NULL when t is an output or has another count). */
static const stof_op *sole_reader(const stof_plan *p, const stof_op *t) {
  if (p->is_out[t->id] || p->nconsumer[t->id] != 1) return NULL;
  for (int i = 0; i < p->nops; i++) {
    const stof_op *c = p->ops[i];
    if (c->id <= t->id) continue;
    for (int k = 0; k < c->ninput; k++)
      if (c->input[k] == t) return c;
  }
  return NULL;
}

static const stof_op *other_input(const stof_op *c, const stof_op *t) {
  if (c->ninput != 2) return NULL;
  return c->input[0] == t ? c->input[1] : c->input[1] == t ? c->input[0] : NULL;
}

static int tag_is(const stof_op *op, const char *tag) { return op->tag && strcmp(op->tag, tag) == 0; }

/* e's value when t loaded at op's axes is v, in *out; 0 when e is not a function of that
 * one value (another load, an index, a reduction) or nests deeper than a few levels. */
static int eval_of_one(const stof_expr *e, const stof_op *t, const stof_op *op, double v, int depth, double *out) {
  double a = 0, b = 0, c = 0;
  if (!e || depth > 64) return 0;
  switch (e->kind) {
  case STOF_EXPR_INT: *out = (double)e->u.ival; return 1;
  case STOF_EXPR_FLOAT: *out = e->u.fval; return 1;
  case STOF_EXPR_LOAD:
    if (!load_at_axes(e, t, op)) return 0;
    *out = v;
    return 1;
  case STOF_EXPR_CAST:
    if (!stof_dtype_is_float(e->dtype) || !eval_of_one(e->u.op.a, t, op, v, depth + 1, &a)) return 0;
    *out = stof_dtype_round(e->dtype, a);
    return 1;
  case STOF_EXPR_SELECT:
    if (!eval_of_one(e->u.op.c, t, op, v, depth + 1, &c)) return 0;
    return eval_of_one(c != 0 ? e->u.op.a : e->u.op.b, t, op, v, depth + 1, out);
  default: break;
  }
  if (stof_expr_kind_is_unary(e->kind)) {
    if (!eval_of_one(e->u.op.a, t, op, v, depth + 1, &a)) return 0;
    switch (e->kind) {
    case STOF_EXPR_NEG: *out = -a; return 1;
    case STOF_EXPR_EXP: *out = exp(a); return 1;
    case STOF_EXPR_LOG: *out = log(a); return 1;
    case STOF_EXPR_SQRT: *out = sqrt(a); return 1;
    case STOF_EXPR_RSQRT: *out = 1.0 / sqrt(a); return 1;
    case STOF_EXPR_TANH: *out = tanh(a); return 1;
    case STOF_EXPR_ERF: *out = erf(a); return 1;
    case STOF_EXPR_SIGMOID: *out = 1.0 / (1.0 + exp(-a)); return 1;
    case STOF_EXPR_ABS: *out = fabs(a); return 1;
    default: return 0;
    }
  }
  if (!stof_expr_kind_is_binary(e->kind) || !eval_of_one(e->u.op.a, t, op, v, depth + 1, &a) ||
      !eval_of_one(e->u.op.b, t, op, v, depth + 1, &b))
    return 0;
  switch (e->kind) {
  case STOF_EXPR_ADD: *out = a + b; return 1;
  case STOF_EXPR_SUB: *out = a - b; return 1;
  case STOF_EXPR_MUL: *out = a * b; return 1;
  case STOF_EXPR_DIV: *out = a / b; return 1;
  case STOF_EXPR_MIN: *out = a < b ? a : b; return 1;
  case STOF_EXPR_MAX: *out = a > b ? a : b; return 1;
  case STOF_EXPR_POW: *out = pow(a, b); return 1;
  case STOF_EXPR_LT: *out = a < b; return 1;
  case STOF_EXPR_LE: *out = a <= b; return 1;
  case STOF_EXPR_GT: *out = a > b; return 1;
  case STOF_EXPR_GE: *out = a >= b; return 1;
  default: return 0;
  }
}

/* c's body is the activation act (1 relu, 2 the tanh GELU, 3 the erf GELU) of t at c's
 * axes: a function of that one value that agrees with act at points spread over [-5, 5]
 * (to 1e-5 in float32; to the rounding of c's dtype otherwise, where the two GELU forms
 * round alike). A tag is a claim; this checks it. */
static int is_activation(const stof_op *c, const stof_op *t, int act) {
  static const double pts[] = {-5.3, -3.1, -2.05, -1.37, -0.93, -0.51, -0.27, -0.09, 0.013,
                               0.11, 0.34,  0.62,  0.88,  1.21,  1.73,  2.4,   3.3,   4.7};
  double tol = c->dtype == STOF_DTYPE_F32 ? 1e-5 : c->dtype == STOF_DTYPE_F16 ? 0x1p-9 : 0x1p-6;
  for (size_t i = 0; i < sizeof pts / sizeof pts[0]; i++) {
    double v = stof_dtype_round(t->dtype, pts[i]), got, want;
    if (!eval_of_one(c->body, t, c, v, 0, &got)) return 0;
    if (act == 1) want = v > 0 ? v : 0;
    else if (act == 2) want = 0.5 * v * (1 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)) /* sqrt(2 / pi) */);
    else want = 0.5 * v * (1 + erf(v / sqrt(2.0)));
    if (!(fabs(got - want) <= tol * fmax(1, fabs(want)))) return 0;
  }
  return 1;
}

/* Grows a GEMM segment by its epilogue ops; with a given scheme (grp: group by op id) only
 * by ops of the GEMM's own group gid. */
static stof_status absorb_epilogue(stof_plan *p, int si, const int *grp, int gid) {
  exec_seg *s = &p->seg[si];
  exec_gemm *g = &s->g;
  const stof_op *t = g->gemm;
  for (;;) {
    const stof_op *c = sole_reader(p, t);
    if (c && grp && grp[c->id] != gid) break;
    if (!c || c->kind != STOF_OP_COMPUTE || c->dtype != t->dtype || c->ndim != t->ndim ||
        memcmp(c->shape, t->shape, sizeof c->shape[0] * (size_t)c->ndim))
      break;
    const stof_expr *b = c->body;
    if (tag_is(c, "bias_add") && !g->bias && !g->act) {
      const stof_op *o = other_input(c, t);
      if (!o || o->ndim != 1 || o->shape[0] != g->N || o->dtype != t->dtype || !available(p, o)) break;
      if (b->kind != STOF_EXPR_ADD ||
          !((load_at_axes(b->u.op.a, t, c) && load_at_last(b->u.op.b, o, c)) ||
            (load_at_axes(b->u.op.b, t, c) && load_at_last(b->u.op.a, o, c))))
        break;
      g->bias = o;
    } else if (tag_is(c, "residual_add") && !g->res && !g->act) {
      const stof_op *o = other_input(c, t);
      if (!o || o->dtype != t->dtype || o->ndim != t->ndim || memcmp(o->shape, t->shape, sizeof o->shape[0] * (size_t)o->ndim) ||
          !available(p, o))
        break;
      if (b->kind != STOF_EXPR_ADD ||
          !((load_at_axes(b->u.op.a, t, c) && load_at_axes(b->u.op.b, o, c)) ||
            (load_at_axes(b->u.op.b, t, c) && load_at_axes(b->u.op.a, o, c))))
        break;
      g->res = o;
    } else if (!g->act && !g->res && c->ninput == 1 &&
               ((tag_is(c, "relu") && is_activation(c, t, 1)) || (tag_is(c, "gelu_tanh") && is_activation(c, t, 2)) ||
                (tag_is(c, "gelu") && p->cuda && !p->opts.exact_gelu && is_activation(c, t, 3)))) {
      g->act = tag_is(c, "relu") ? 1 : 2;
      g->exact_act = tag_is(c, "gelu");
    } else {
      break;
    }
    stof_status st = seg_add(p, si, c);
    if (st) return st;
    t = c;
  }
  s->last = t;
  snprintf(s->tmpl, sizeof s->tmpl, "gemm%s%s%s", g->bias ? "+bias" : "",
           g->act == 1 ? "+relu" : g->act == 2 ? (g->exact_act ? "+gelu(tanh form)" : "+gelu_tanh") : "",
           g->res ? "+residual" : "");
  return STOF_OK;
}

/* A generated segment's name: the distinct tags of its ops (or "elementwise"). */
static void name_generic(exec_seg *s) {
  s->tmpl[0] = 0;
  int n = 0;
  for (int i = 0; i < s->nop; i++) {
    const char *t = s->op[i]->tag;
    if (!t || strstr(t, "_stat")) continue;
    if (strstr(s->tmpl, t)) continue;
    size_t len = strlen(s->tmpl);
    if (n == 4) {
      if (len + 5 < sizeof s->tmpl) strcat(s->tmpl, "+...");
      break;
    }
    snprintf(s->tmpl + len, sizeof s->tmpl - len, "%s%s", n ? "+" : "", t);
    n++;
  }
  if (!s->tmpl[0]) snprintf(s->tmpl, sizeof s->tmpl, "%s", s->nop == 1 ? s->op[0]->name : "elementwise");
}

/* ---------------------------------------------------------------- views */

static const stof_expr *peel_int_cast(const stof_expr *e) {
  while (e && e->kind == STOF_EXPR_CAST && !stof_dtype_is_float(e->dtype) && e->u.op.a &&
         !stof_dtype_is_float(e->u.op.a->dtype) && e->u.op.a->dtype != STOF_DTYPE_BOOL)
    e = e->u.op.a;
  return e;
}

/* e = *c + sum coef[a] * axis a of op (an integer expression of op's axes), proven by its
 * structure: constants, axes, +, -, and products with a constant. */
static int affine(const stof_expr *e, const stof_op *op, int64_t *c, int64_t *coef, int depth) {
  e = peel_int_cast(e);
  if (!e || depth > 64) return 0;
  for (int a = 0; a < op->ndim; a++) coef[a] = 0;
  *c = 0;
  switch (e->kind) {
  case STOF_EXPR_INT: *c = e->u.ival; return 1;
  case STOF_EXPR_VAR:
    for (int a = 0; a < op->ndim; a++)
      if (op->axis[a] == e->u.var) {
        coef[a] = 1;
        return 1;
      }
    return 0;
  case STOF_EXPR_ADD:
  case STOF_EXPR_SUB:
  case STOF_EXPR_MUL: {
    int64_t ca, cb, fa[STOF_MAX_DIMS], fb[STOF_MAX_DIMS];
    if (!affine(e->u.op.a, op, &ca, fa, depth + 1) || !affine(e->u.op.b, op, &cb, fb, depth + 1)) return 0;
    int a_const = 1, b_const = 1;
    for (int a = 0; a < op->ndim; a++) a_const &= fa[a] == 0, b_const &= fb[a] == 0;
    if (e->kind == STOF_EXPR_MUL) {
      if (!a_const && !b_const) return 0;
      int64_t k = a_const ? ca : cb, base = a_const ? cb : ca;
      const int64_t *f = a_const ? fb : fa;
      if (__builtin_mul_overflow(base, k, c)) return 0;
      for (int a = 0; a < op->ndim; a++)
        if (__builtin_mul_overflow(f[a], k, &coef[a])) return 0;
      return 1;
    }
    int sgn = e->kind == STOF_EXPR_ADD ? 1 : -1;
    if (__builtin_add_overflow(ca, sgn * cb, c)) return 0;
    for (int a = 0; a < op->ndim; a++)
      if (__builtin_add_overflow(fa[a], sgn * fb[a], &coef[a])) return 0;
    return 1;
  }
  default: return 0;
  }
}

/* v = X[affine indices of v's axes], every index proven within X's extent: v is a view of
 * X's contiguous storage at element offset *off with strides[a] per axis of v. */
static int input_view(const stof_op *v, const stof_op **src, int64_t *off, int64_t *strides) {
  if (v->kind != STOF_OP_COMPUTE || !v->body || v->body->kind != STOF_EXPR_LOAD) return 0;
  const stof_op *x = v->body->u.load.tensor;
  if (x->dtype != v->dtype || v->body->u.load.nidx != x->ndim) return 0;
  int64_t cs[STOF_MAX_DIMS], run = 1;
  for (int k = x->ndim - 1; k >= 0; k--) {
    cs[k] = run;
    run *= x->shape[k];
  }
  *off = 0;
  for (int a = 0; a < v->ndim; a++) strides[a] = 0;
  for (int k = 0; k < x->ndim; k++) {
    int64_t c, coef[STOF_MAX_DIMS], lo, hi;
    if (!affine(v->body->u.load.idx[k], v, &c, coef, 0)) return 0;
    lo = hi = c;
    for (int a = 0; a < v->ndim; a++) {
      int64_t span = coef[a] * (v->shape[a] - 1); /* |coef| <= extents: no overflow in practice */
      if (span < 0) lo += span;
      else hi += span;
      strides[a] += coef[a] * cs[k];
    }
    if (lo < 0 || hi >= x->shape[k]) return 0;
    *off += c * cs[k];
  }
  *src = x;
  return 1;
}

static int is_axis(const stof_expr *e, const stof_op *op, int a) {
  e = peel_int_cast(e);
  return e && e->kind == STOF_EXPR_VAR && e->u.var == op->axis[a];
}

static int is_axis_op_const(const stof_expr *e, stof_expr_kind kind, const stof_op *op, int a, int64_t k) {
  e = peel_int_cast(e);
  if (!e || e->kind != kind) return 0;
  const stof_expr *b = peel_int_cast(e->u.op.b);
  return is_axis(e->u.op.a, op, a) && b && b->kind == STOF_EXPR_INT && b->u.ival == k;
}

/* m[b, s, c] = A[b, c // D, s, c % D] (the head merge of A [B, H, S, D] into [B, S, H*D]):
 * A can be written straight into m's storage, element (b, h, s, d) at strides. */
static int output_view(const stof_op *m, const stof_op *A, int64_t *strides) {
  if (m->kind != STOF_OP_COMPUTE || !m->body || m->ndim != 3 || A->ndim != 4 || m->dtype != A->dtype) return 0;
  const stof_expr *l = m->body;
  if (l->kind != STOF_EXPR_LOAD || l->u.load.tensor != A || l->u.load.nidx != 4) return 0;
  int64_t B = A->shape[0], H = A->shape[1], S = A->shape[2], D = A->shape[3];
  if (m->shape[0] != B || m->shape[1] != S || m->shape[2] != H * D) return 0;
  if (!is_axis(l->u.load.idx[0], m, 0) || !is_axis_op_const(l->u.load.idx[1], STOF_EXPR_FLOORDIV, m, 2, D) ||
      !is_axis(l->u.load.idx[2], m, 1) || !is_axis_op_const(l->u.load.idx[3], STOF_EXPR_MOD, m, 2, D))
    return 0;
  strides[0] = S * H * D, strides[1] = D, strides[2] = H * D, strides[3] = 1;
  return 1;
}

/* Marks, for every intrinsic that takes strided views, the inputs it can read as views and
 * the reader whose layout it can write (each read by nothing else). */
static void find_views(stof_plan *p) {
  for (int i = 0; i < p->nops; i++) {
    const stof_op *op = p->ops[i];
    const stof_intrin *in = op->kind == STOF_OP_EXTERN && op->intrin ? stof_intrin_find(op->intrin) : NULL;
    if (!in || !in->gpu_launch_strided || op->ninput > EXEC_MAX_INTRIN_IN) continue;
    for (int k = 0; k < op->ninput; k++) {
      const stof_op *v = op->input[k], *src;
      int64_t off, st[STOF_MAX_DIMS];
      if (sole_reader(p, v) == op && input_view(v, &src, &off, st) && st[v->ndim - 1] == 1) p->view_of[v->id] = op;
    }
    const stof_op *m = sole_reader(p, op);
    int64_t st[STOF_MAX_DIMS];
    if (m && output_view(m, op, st)) p->view_of[m->id] = op;
  }
}

/* An intrinsic's segment: its input views, the op, its output view. */
static stof_status intrin_segment(stof_plan *p, const stof_op *op, const stof_intrin *in) {
  int si;
  stof_status st = new_seg(p, STOF_SEG_INTRIN, &si);
  if (st) return st;
  exec_seg *s = &p->seg[si];
  exec_intrin *x = &s->x;
  x->in = in;
  x->dst = op;
  for (int k = 0; k < op->ninput && k < EXEC_MAX_INTRIN_IN; k++) {
    const stof_op *v = op->input[k];
    x->src[k] = v;
    x->off[k] = 0;
    int64_t run = 1;
    for (int a = v->ndim - 1; a >= 0; a--) x->stride[k][a] = run, run *= v->shape[a];
    if (p->view_of[v->id] == op && p->seg_of[v->id] < 0) {
      input_view(v, &x->src[k], &x->off[k], x->stride[k]);
      x->strided = 1;
      if ((st = seg_add(p, si, v))) return st;
    }
  }
  if ((st = seg_add(p, si, op))) return st;
  s = &p->seg[si];
  int64_t run = 1, *os = s->x.stride[op->ninput];
  for (int a = op->ndim - 1; a >= 0; a--) os[a] = run, run *= op->shape[a];
  s->last = op;
  const stof_op *m = sole_reader(p, op);
  if (m && p->view_of[m->id] == op) {
    output_view(m, op, os);
    s->x.dst = m;
    s->x.strided = 1;
    s->last = m;
    if ((st = seg_add(p, si, m))) return st;
  }
  snprintf(p->seg[si].tmpl, sizeof p->seg[si].tmpl, "%s%s", in->name, p->seg[si].x.strided ? " (views)" : "");
  return STOF_OK;
}

static stof_status finish_scheme(stof_plan *p);

stof_status exec_scheme_default(stof_plan *p) {
  stof_status st = STOF_OK;
  find_views(p);
  for (int i = 0; i < p->nops && !st; i++) {
    const stof_op *op = p->ops[i];
    if (op->kind == STOF_OP_PLACEHOLDER || p->seg_of[op->id] >= 0 || p->view_of[op->id]) continue;
    int si;
    if (op->kind == STOF_OP_EXTERN) {
      const stof_intrin *in = op->intrin ? stof_intrin_find(op->intrin) : NULL;
      if (!in)
        return stof_ctx_error(p->ctx, STOF_ERR_UNSUPPORTED,
                              "plan: extern op %s is not run by a registered intrinsic (%s), so only stof.eval can "
                              "compute it",
                              op->name, op->intrin ? op->intrin : "none");
      st = intrin_segment(p, op, in);
      continue;
    }
    exec_gemm g;
    if (!p->opts.no_vendor_gemm && exec_match_gemm(op, &g)) {
      if ((st = new_seg(p, STOF_SEG_GEMM, &si)) || (st = seg_add(p, si, op))) break;
      p->seg[si].g = g;
      st = absorb_epilogue(p, si, NULL, 0);
      continue;
    }
    int latest = -1;
    for (int k = 0; k < op->ninput; k++) {
      int sk = p->seg_of[op->input[k]->id];
      if (sk > latest) latest = sk;
    }
    /* an op that reads only inputs (a gather, a position table) may run anywhere: it joins
     * the newest segment when that is a generated one (the embedding sums and their layer
     * norm become one segment) */
    if (latest < 0 && p->nseg > 0 && p->seg[p->nseg - 1].kind == STOF_SEG_GENERIC) latest = p->nseg - 1;
    if (latest >= 0 && p->seg[latest].kind == STOF_SEG_GENERIC) {
      si = latest;
    } else if ((st = new_seg(p, STOF_SEG_GENERIC, &si))) {
      break;
    }
    st = seg_add(p, si, op);
  }
  if (st) return st;
  return finish_scheme(p);
}

/* Names the generated segments and writes the scheme's code: each op's segment, id order. */
static stof_status finish_scheme(stof_plan *p) {
  for (int i = 0; i < p->nseg; i++)
    if (p->seg[i].kind == STOF_SEG_GENERIC) name_generic(&p->seg[i]);
  stof_buf b;
  stof_buf_init(&b, p->ctx);
  for (int i = 0; i < p->nops; i++)
    if (p->ops[i]->kind != STOF_OP_PLACEHOLDER) stof_buf_printf(&b, "%s%d", b.len ? " " : "", p->seg_of[p->ops[i]->id]);
  return stof_buf_finish(&b, &p->scheme);
}

/* ---------------------------------------------------------------- a given scheme */

/* Parses code into grp (by op id: the group number; -1 for placeholders). */
static stof_status parse_scheme(stof_plan *p, const char *code, int *grp, int *ngrp) {
  int n = 0, maxg = -1;
  const char *c = code;
  for (int i = 0; i < p->nops; i++) {
    const stof_op *op = p->ops[i];
    grp[op->id] = -1;
    if (op->kind == STOF_OP_PLACEHOLDER) continue;
    while (*c == ' ' || *c == ',') c++;
    if (*c < '0' || *c > '9') {
      int nop = 0;
      for (int k = 0; k < p->nops; k++) nop += p->ops[k]->kind != STOF_OP_PLACEHOLDER;
      return stof_ctx_error(p->ctx, STOF_ERR_ARG,
                            *c ? "plan: scheme: \"%.20s\" where the segment of op %s (the %d-th of %d) was expected"
                               : "plan: scheme: %sthe code ends at op %s (the %d-th of %d ops)",
                            c, op->name, n + 1, nop);
    }
    long v = 0;
    while (*c >= '0' && *c <= '9') {
      v = v * 10 + (*c++ - '0');
      if (v >= p->nops) return stof_ctx_error(p->ctx, STOF_ERR_ARG, "plan: scheme: segment number too large at op %s (at most %d)", op->name, p->nops - 1);
    }
    grp[op->id] = (int)v;
    if (v > maxg) maxg = (int)v;
    n++;
  }
  while (*c == ' ' || *c == ',') c++;
  if (*c) return stof_ctx_error(p->ctx, STOF_ERR_ARG, "plan: scheme: more numbers than the plan's %d ops (\"%.20s\" left)", n, c);
  *ngrp = maxg + 1;
  return STOF_OK;
}

/* Builds the segments of a given scheme (opts.scheme): groups ordered topologically, each
 * an intrinsic, a vendor GEMM or a generated segment. */
stof_status exec_scheme_given(stof_plan *p, const char *code) {
  stof_ctx *ctx = p->ctx;
  size_t nall = (size_t)(p->nall ? p->nall : 1);
  int ngrp = 0;
  stof_status st = STOF_OK;
  int *grp = stof_ctx_alloc(ctx, sizeof *grp * nall);
  if (!grp) return STOF_ERR_NOMEM;
  if ((st = parse_scheme(p, code, grp, &ngrp))) goto done;
  find_views(p);
  {
    size_t ng = (size_t)(ngrp ? ngrp : 1);
    int *indeg = stof_ctx_alloc(ctx, sizeof *indeg * ng), *order = stof_ctx_alloc(ctx, sizeof *order * ng);
    unsigned char *edge = stof_ctx_alloc(ctx, ng * ng), *live = stof_ctx_alloc(ctx, ng);
    if (!indeg || !order || !edge || !live) {
      st = STOF_ERR_NOMEM;
      goto free_graph;
    }
    memset(indeg, 0, sizeof *indeg * ng);
    memset(edge, 0, ng * ng);
    memset(live, 0, ng);
    for (int i = 0; i < p->nops; i++) {
      const stof_op *op = p->ops[i];
      if (grp[op->id] < 0) continue;
      live[grp[op->id]] = 1;
      for (int k = 0; k < op->ninput; k++) {
        int a = grp[op->input[k]->id], b = grp[op->id];
        if (a >= 0 && a != b && !edge[(size_t)a * ng + (size_t)b]) {
          edge[(size_t)a * ng + (size_t)b] = 1;
          indeg[b]++;
        }
      }
    }
    /* Kahn's algorithm, the group whose first op comes first among the ready ones */
    int norder = 0, nlive = 0;
    for (int g = 0; g < ngrp; g++) nlive += live[g];
    while (norder < nlive) {
      int pick = -1;
      for (int i = 0; i < p->nops && pick < 0; i++) {
        int g = grp[p->ops[i]->id];
        if (g >= 0 && live[g] == 1 && indeg[g] == 0) pick = g;
      }
      if (pick < 0) {
        /* every group left reads a value of another group left: walk back along those
         * reads until a group comes again, and name that cycle */
        int g = -1;
        for (int k = 0; k < ngrp && g < 0; k++)
          if (live[k] == 1) g = k;
        for (int k = 0; k < ngrp; k++) indeg[k] = -1; /* reused: the step a group was met at */
        int step = 0;
        while (indeg[g] < 0) {
          indeg[g] = step;
          order[step++] = g; /* reused: the walk */
          int h;
          for (h = 0; h < ngrp && !(live[h] == 1 && edge[(size_t)h * ng + (size_t)g]); h++) {}
          g = h;
        }
        stof_buf b;
        stof_buf_init(&b, ctx);
        for (int k = step - 1; k >= indeg[g]; k--) stof_buf_printf(&b, "%d -> ", order[k]);
        stof_buf_printf(&b, "%d", order[step - 1]);
        char *cyc = NULL;
        if ((st = stof_buf_finish(&b, &cyc))) goto free_graph;
        st = stof_ctx_error(ctx, STOF_ERR_ARG,
                            "plan: scheme: segments read each other's values in a cycle (%s: each reads a value "
                            "of the one before it)",
                            cyc);
        stof_ctx_dealloc(ctx, cyc, strlen(cyc) + 1);
        goto free_graph;
      }
      live[pick] = 2;
      order[norder++] = pick;
      for (int h = 0; h < ngrp; h++)
        if (edge[(size_t)pick * ng + (size_t)h]) indeg[h]--;
    }
    for (int oi = 0; oi < norder && !st; oi++) {
      int gid = order[oi], nop = 0, si;
      const stof_op *ext = NULL, *first = NULL;
      for (int i = 0; i < p->nops; i++) {
        const stof_op *op = p->ops[i];
        if (grp[op->id] != gid) continue;
        if (!first) first = op;
        nop++;
        if (op->kind == STOF_OP_EXTERN) {
          if (ext) {
            st = stof_ctx_error(ctx, STOF_ERR_ARG, "plan: scheme: segment %d holds two intrinsic ops, %s and %s", gid, ext->name, op->name);
            break;
          }
          ext = op;
        }
      }
      if (st) break;
      if (ext) {
        const stof_intrin *in = ext->intrin ? stof_intrin_find(ext->intrin) : NULL;
        if (!in) {
          st = stof_ctx_error(ctx, STOF_ERR_UNSUPPORTED, "plan: extern op %s is not run by a registered intrinsic (%s), so only stof.eval can compute it",
                              ext->name, ext->intrin ? ext->intrin : "none");
          break;
        }
        /* exactly the op and its views */
        for (int i = 0; i < p->nops && !st; i++) {
          const stof_op *op = p->ops[i];
          int mine = op == ext || p->view_of[op->id] == ext;
          if (mine && grp[op->id] != gid)
            st = stof_ctx_error(ctx, STOF_ERR_ARG,
                                "plan: scheme: op %s is a view that intrinsic op %s reads or writes in place: it belongs in "
                                "segment %d with it",
                                op->name, ext->name, gid);
          else if (!mine && grp[op->id] == gid)
            st = stof_ctx_error(ctx, STOF_ERR_ARG,
                                "plan: scheme: op %s cannot share segment %d with intrinsic op %s (an intrinsic's segment "
                                "holds the op and its views only)",
                                op->name, gid, ext->name);
        }
        if (!st) st = intrin_segment(p, ext, in);
        continue;
      }
      for (int i = 0; i < p->nops; i++)
        if (grp[p->ops[i]->id] == gid && p->view_of[p->ops[i]->id]) {
          st = stof_ctx_error(ctx, STOF_ERR_ARG, "plan: scheme: op %s is a view of intrinsic op %s: it belongs in that op's segment",
                              p->ops[i]->name, p->view_of[p->ops[i]->id]->name);
          break;
        }
      if (st) break;
      exec_gemm g;
      int vendor = !p->opts.no_vendor_gemm && exec_match_gemm(first, &g);
      if (vendor) {
        if ((st = new_seg(p, STOF_SEG_GEMM, &si)) || (st = seg_add(p, si, first))) break;
        p->seg[si].g = g;
        if ((st = absorb_epilogue(p, si, grp, gid))) break;
        exec_seg *s = &p->seg[si];
        int ask_generated = 0;
        if (s->nop == nop && p->opts.hooks && p->opts.hooks->generate_gemm) {
          stof_plan_seg_req r = {si, p->cuda ? "cuda" : "c", s->tmpl, s->nop, s->op, NULL};
          ask_generated = p->opts.hooks->generate_gemm(p->opts.hooks->ud, &r) != 0;
        }
        if (s->nop == nop && !ask_generated) continue;
        /* not a GEMM and epilogue only (or asked so): generated code */
        for (int k = 0; k < s->nop; k++) p->seg_of[s->op[k]->id] = -1;
        stof_ctx_dealloc(ctx, s->op, sizeof *s->op * (size_t)s->capop);
        p->nseg--;
      }
      if ((st = new_seg(p, STOF_SEG_GENERIC, &si))) break;
      for (int i = 0; i < p->nops && !st; i++)
        if (grp[p->ops[i]->id] == gid) st = seg_add(p, si, p->ops[i]);
    }
  free_graph:
    stof_ctx_dealloc(ctx, indeg, sizeof *indeg * ng);
    stof_ctx_dealloc(ctx, order, sizeof *order * ng);
    stof_ctx_dealloc(ctx, edge, ng * ng);
    stof_ctx_dealloc(ctx, live, ng);
  }
  if (!st) st = finish_scheme(p);
done:
  stof_ctx_dealloc(ctx, grp, sizeof *grp * nall);
  return st;
}
