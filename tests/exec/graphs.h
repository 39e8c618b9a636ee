/*
 * Graph builders shared by the runtime's and the search's tests: ops as stof.nn builds them
 * (GEMMs tagged "gemm", bias and residual adds, activations computed in float32, layer
 * norm with its statistics), through tests/core/testutil.h. Included by one file per test
 * executable; every function is static and may go unused.
 */
#ifndef STOF_TESTS_EXEC_GRAPHS_H
#define STOF_TESTS_EXEC_GRAPHS_H

#include "../core/testutil.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"

/* A compute over axes, stored as dtype (-1: the body's), tagged (NULL: no tag). */
static const stof_op *compute_as(stof_graph *g, const char *name, int ndim, const stof_expr *const *axes,
                                 const stof_expr *body, int dtype, const char *tag) {
  const stof_op *op = NULL;
  TU_OK(TU_G(g), stof_te_compute(g, name, ndim, axes, body, dtype, &op));
  if (tag) TU_OK(TU_G(g), stof_te_set_tag(g, op, tag));
  return op;
}

/* x[..., k] for axes[0..nd-1) and k. */
static const stof_expr *load_rows(stof_graph *g, const stof_op *x, const stof_expr *const *axes, const stof_expr *k) {
  const stof_expr *idx[STOF_MAX_DIMS];
  for (int d = 0; d < x->ndim - 1; d++) idx[d] = axes[d];
  idx[x->ndim - 1] = k;
  const stof_expr *e = NULL;
  TU_OK(TU_G(g), stof_te_load(g, x, x->ndim, idx, &e));
  return e;
}

static const stof_expr *load_all(stof_graph *g, const stof_op *x, const stof_expr *const *axes) {
  const stof_expr *e = NULL;
  TU_OK(TU_G(g), stof_te_load(g, x, x->ndim, axes, &e));
  return e;
}

/* y[..., j] = sum_k x[..., k] * w[k, j] (trans 0: w [K, N]) or w[j, k] (trans 1: w [N, K]),
 * tagged "gemm" as stof.nn's linear does. */
static const stof_op *gemm(stof_graph *g, const char *name, const stof_op *x, const stof_op *w, int trans) {
  int nd = x->ndim;
  int64_t shape[STOF_MAX_DIMS];
  memcpy(shape, x->shape, sizeof shape[0] * (size_t)nd);
  shape[nd - 1] = trans ? w->shape[0] : w->shape[1];
  const stof_expr *axes[STOF_MAX_DIMS];
  tu_axes(g, nd, shape, axes);
  const stof_expr *k = tu_raxis(g, x->shape[nd - 1], "k");
  const stof_expr *wl = trans ? tu_load(g, w, 2, axes[nd - 1], k) : tu_load(g, w, 2, k, axes[nd - 1]);
  const stof_expr *body = tu_reduce(g, STOF_REDUCE_SUM, tu_bin(g, STOF_EXPR_MUL, load_rows(g, x, axes, k), wl), 1, k);
  return compute_as(g, name, nd, axes, body, -1, "gemm");
}

/* y[..., j] = a[...] <kind> b[j] (b a vector over the last axis), tagged. */
static const stof_op *vec_op(stof_graph *g, const char *name, stof_expr_kind kind, const stof_op *a, const stof_op *b,
                             const char *tag) {
  const stof_expr *axes[STOF_MAX_DIMS];
  tu_axes(g, a->ndim, a->shape, axes);
  const stof_expr *body = tu_bin(g, kind, load_all(g, a, axes), tu_load(g, b, 1, axes[a->ndim - 1]));
  return compute_as(g, name, a->ndim, axes, body, -1, tag);
}

/* y = a <kind> b elementwise (same shapes), tagged. */
static const stof_op *elem_op(stof_graph *g, const char *name, stof_expr_kind kind, const stof_op *a, const stof_op *b,
                              const char *tag) {
  const stof_expr *axes[STOF_MAX_DIMS];
  tu_axes(g, a->ndim, a->shape, axes);
  const stof_expr *body = tu_bin(g, kind, load_all(g, a, axes), load_all(g, b, axes));
  return compute_as(g, name, a->ndim, axes, body, -1, tag);
}

static const stof_op *bias_add(stof_graph *g, const char *name, const stof_op *y, const stof_op *b) {
  return vec_op(g, name, STOF_EXPR_ADD, y, b, "bias_add");
}
static const stof_op *residual_add(stof_graph *g, const char *name, const stof_op *a, const stof_op *b) {
  return elem_op(g, name, STOF_EXPR_ADD, a, b, "residual_add");
}

/* v as float32 (no cast when it is). */
static const stof_expr *f32(stof_graph *g, const stof_expr *v) {
  if (v->dtype == STOF_DTYPE_F32) return v;
  const stof_expr *e = NULL;
  TU_OK(TU_G(g), stof_te_cast(g, STOF_DTYPE_F32, v, &e));
  return e;
}

typedef enum act_kind { ACT_RELU, ACT_GELU_TANH, ACT_GELU_ERF } act_kind;

/* An activation as stof.nn builds it: computed in float32, stored in x's dtype, tagged. */
static const stof_op *act_tagged(stof_graph *g, const char *name, act_kind a, const stof_op *x, const char *tag) {
  const stof_expr *axes[STOF_MAX_DIMS];
  tu_axes(g, x->ndim, x->shape, axes);
  const stof_expr *v = f32(g, load_all(g, x, axes)), *body;
  if (a == ACT_RELU) {
    body = tu_bin(g, STOF_EXPR_MAX, v, tu_f32(g, 0.0));
  } else if (a == ACT_GELU_TANH) {
    const stof_expr *v3 = tu_bin(g, STOF_EXPR_MUL, tu_bin(g, STOF_EXPR_MUL, v, v), v);
    const stof_expr *in = tu_bin(g, STOF_EXPR_ADD, v, tu_bin(g, STOF_EXPR_MUL, tu_f32(g, 0.044715), v3));
    const stof_expr *th = tu_un(g, STOF_EXPR_TANH, tu_bin(g, STOF_EXPR_MUL, tu_f32(g, sqrt(2 / M_PI)), in));
    body = tu_bin(g, STOF_EXPR_MUL, tu_bin(g, STOF_EXPR_MUL, tu_f32(g, 0.5), v),
                  tu_bin(g, STOF_EXPR_ADD, tu_f32(g, 1.0), th));
  } else {
    const stof_expr *e = tu_un(g, STOF_EXPR_ERF, tu_bin(g, STOF_EXPR_MUL, v, tu_f32(g, sqrt(0.5))));
    body = tu_bin(g, STOF_EXPR_MUL, tu_bin(g, STOF_EXPR_MUL, tu_f32(g, 0.5), v),
                  tu_bin(g, STOF_EXPR_ADD, tu_f32(g, 1.0), e));
  }
  return compute_as(g, name, x->ndim, axes, body, (int)x->dtype, tag);
}

static const stof_op *act(stof_graph *g, const char *name, act_kind a, const stof_op *x) {
  static const char *const tags[] = {"relu", "gelu_tanh", "gelu"};
  return act_tagged(g, name, a, x, tags[a]);
}

/* Layer norm over the last axis of the 2-D x (float32), as stof.nn builds it: mean and var
 * (tag "layer_norm_stat"), then the normalised output (tag "layer_norm"). */
static const stof_op *layer_norm(stof_graph *g, const char *name, const stof_op *x, const stof_op *gamma,
                                 const stof_op *beta) {
  char n[64];
  int64_t R = x->shape[0], D = x->shape[1];
  const stof_expr *ax[2];
  tu_axes(g, 1, TU_SHAPE(R), ax);
  const stof_expr *r1 = tu_raxis(g, D, "r1");
  const stof_expr *mb = tu_reduce(g, STOF_REDUCE_SUM, tu_bin(g, STOF_EXPR_MUL, tu_load(g, x, 2, ax[0], r1), tu_f32(g, 1.0 / D)), 1, r1);
  snprintf(n, sizeof n, "%s.mean", name);
  const stof_op *mean = compute_as(g, n, 1, ax, mb, -1, "layer_norm_stat");
  tu_axes(g, 1, TU_SHAPE(R), ax);
  const stof_expr *r2 = tu_raxis(g, D, "r2");
  const stof_expr *c = tu_bin(g, STOF_EXPR_SUB, tu_load(g, x, 2, ax[0], r2), tu_load(g, mean, 1, ax[0]));
  const stof_expr *vb = tu_reduce(g, STOF_REDUCE_SUM, tu_bin(g, STOF_EXPR_MUL, tu_bin(g, STOF_EXPR_MUL, c, c), tu_f32(g, 1.0 / D)), 1, r2);
  snprintf(n, sizeof n, "%s.var", name);
  const stof_op *var = compute_as(g, n, 1, ax, vb, -1, "layer_norm_stat");
  tu_axes(g, 2, x->shape, ax);
  const stof_expr *xc = tu_bin(g, STOF_EXPR_SUB, tu_load(g, x, 2, ax[0], ax[1]), tu_load(g, mean, 1, ax[0]));
  const stof_expr *rs = tu_un(g, STOF_EXPR_RSQRT, tu_bin(g, STOF_EXPR_ADD, tu_load(g, var, 1, ax[0]), tu_f32(g, 1e-5)));
  const stof_expr *y = tu_bin(g, STOF_EXPR_ADD, tu_bin(g, STOF_EXPR_MUL, tu_bin(g, STOF_EXPR_MUL, xc, rs), tu_load(g, gamma, 1, ax[1])),
                              tu_load(g, beta, 1, ax[1]));
  return compute_as(g, name, 2, ax, y, -1, "layer_norm");
}

#pragma GCC diagnostic pop

#endif
