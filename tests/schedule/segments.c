/* Segments of model graphs for the auto-schedule tests (see segments.h). */
#include <string.h>

#include "segments.h"

typedef const stof_expr *E;

static void init(sh_graph *G) {
  memset(G, 0, sizeof *G);
  G->ctx = sh_ctx();
  SH_OK(G->ctx, stof_graph_new(G->ctx, &G->g));
}

static const stof_op *ph(sh_graph *G, int ndim, const int64_t *shape, stof_dtype d, const char *name) {
  const stof_op *op;
  SH_OK(G->ctx, stof_te_placeholder(G->g, ndim, shape, d, name, &op));
  G->in[G->nin++] = op;
  return op;
}

static E bin(sh_graph *G, stof_expr_kind k, E a, E b) {
  E e;
  SH_OK(G->ctx, stof_te_binary(G->g, k, a, b, &e));
  return e;
}

static E un(sh_graph *G, stof_expr_kind k, E a) {
  E e;
  SH_OK(G->ctx, stof_te_unary(G->g, k, a, &e));
  return e;
}

static E fc(sh_graph *G, double v) {
  E e;
  SH_OK(G->ctx, stof_te_float(G->g, v, STOF_DTYPE_F32, &e));
  return e;
}

static E ic(sh_graph *G, int64_t v) {
  E e;
  SH_OK(G->ctx, stof_te_int(G->g, v, STOF_DTYPE_I32, &e));
  return e;
}

static E cast(sh_graph *G, stof_dtype d, E a) {
  if (a->dtype == d) return a;
  E e;
  SH_OK(G->ctx, stof_te_cast(G->g, d, a, &e));
  return e;
}

/* t[idx...] as float32. */
static E ld(sh_graph *G, const stof_op *t, int n, E i0, E i1, E i2, E i3) {
  E idx[4] = {i0, i1, i2, i3}, e;
  SH_OK(G->ctx, stof_te_load(G->g, t, n, idx, &e));
  return stof_dtype_is_float(t->dtype) ? cast(G, STOF_DTYPE_F32, e) : e;
}

static void axes(sh_graph *G, int n, const int64_t *shape, E *ax) {
  SH_OK(G->ctx, stof_te_compute_axes(G->g, n, shape, NULL, ax));
}

static const stof_op *compute(sh_graph *G, const char *name, int n, E *ax, E body, stof_dtype d) {
  const stof_op *op;
  SH_OK(G->ctx, stof_te_compute(G->g, name, n, ax, cast(G, d, body), -1, &op));
  return op;
}

static const stof_op *output(sh_graph *G, const stof_op *op) { return G->out[G->nout++] = op; }

static E raxis(sh_graph *G, int64_t n, const char *name) {
  E e;
  SH_OK(G->ctx, stof_te_reduce_axis(G->g, n, name, &e));
  return e;
}

static E sum(sh_graph *G, E src, E axis) {
  E e;
  SH_OK(G->ctx, stof_te_reduce(G->g, STOF_REDUCE_SUM, src, 1, &axis, &e));
  return e;
}

static E rmax(sh_graph *G, E src, E axis) {
  E e;
  SH_OK(G->ctx, stof_te_reduce(G->g, STOF_REDUCE_MAX, src, 1, &axis, &e));
  return e;
}

#define ADD(a, b) bin(G, STOF_EXPR_ADD, a, b)
#define SUB(a, b) bin(G, STOF_EXPR_SUB, a, b)
#define MUL(a, b) bin(G, STOF_EXPR_MUL, a, b)
#define DIV(a, b) bin(G, STOF_EXPR_DIV, a, b)
#define FDIV(a, b) bin(G, STOF_EXPR_FLOORDIV, a, b)
#define MOD(a, b) bin(G, STOF_EXPR_MOD, a, b)

void sh_seg_bias_gelu(sh_graph *G, int64_t M, int64_t N, stof_dtype d, int tanh) {
  init(G);
  int64_t sx[2] = {M, N};
  const stof_op *X = ph(G, 2, sx, d, "X"), *b = ph(G, 1, &N, d, "bias");
  E a1[2], a2[2];
  axes(G, 2, sx, a1);
  const stof_op *h = compute(G, "h", 2, a1, ADD(ld(G, X, 2, a1[0], a1[1], NULL, NULL), ld(G, b, 1, a1[1], NULL, NULL, NULL)),
                             STOF_DTYPE_F32);
  axes(G, 2, sx, a2);
  E x = ld(G, h, 2, a2[0], a2[1], NULL, NULL), cdf;
  if (tanh) {
    E inner = MUL(fc(G, 0.7978845608028654), ADD(x, MUL(fc(G, 0.044715), MUL(x, MUL(x, x)))));
    cdf = ADD(fc(G, 1), un(G, STOF_EXPR_TANH, inner));
  } else {
    cdf = ADD(fc(G, 1), un(G, STOF_EXPR_ERF, MUL(x, fc(G, 0.7071067811865476))));
  }
  output(G, compute(G, "Y", 2, a2, MUL(MUL(fc(G, 0.5), x), cdf), d));
}

void sh_seg_swiglu(sh_graph *G, int64_t M, int64_t N, stof_dtype d) {
  init(G);
  int64_t sx[2] = {M, N};
  const stof_op *Gt = ph(G, 2, sx, d, "G"), *U = ph(G, 2, sx, d, "U"), *R = ph(G, 2, sx, d, "R");
  E a1[2], a2[2];
  axes(G, 2, sx, a1);
  E g = ld(G, Gt, 2, a1[0], a1[1], NULL, NULL);
  const stof_op *act = compute(G, "act", 2, a1, MUL(MUL(g, un(G, STOF_EXPR_SIGMOID, g)), ld(G, U, 2, a1[0], a1[1], NULL, NULL)), d);
  axes(G, 2, sx, a2);
  output(G, compute(G, "Y", 2, a2, ADD(ld(G, act, 2, a2[0], a2[1], NULL, NULL), ld(G, R, 2, a2[0], a2[1], NULL, NULL)), d));
}

void sh_seg_split_heads(sh_graph *G, int64_t B, int64_t S, int64_t H, int64_t D, stof_dtype d) {
  init(G);
  int64_t sx[2] = {B * S, H * D}, sy[4] = {B, H, S, D};
  const stof_op *X = ph(G, 2, sx, d, "X");
  E a[4];
  axes(G, 4, sy, a);
  E row = ADD(MUL(a[0], ic(G, S)), a[2]), col = ADD(MUL(a[1], ic(G, D)), a[3]);
  output(G, compute(G, "Y", 4, a, ld(G, X, 2, row, col, NULL, NULL), d));
}

void sh_seg_merge_heads(sh_graph *G, int64_t B, int64_t S, int64_t H, int64_t D, stof_dtype d) {
  init(G);
  int64_t sx[4] = {B, H, S, D}, sy[2] = {B * S, H * D};
  const stof_op *X = ph(G, 4, sx, d, "X");
  E a[2];
  axes(G, 2, sy, a);
  E s = ic(G, S), dd = ic(G, D);
  output(G, compute(G, "Y", 2, a, ld(G, X, 4, FDIV(a[0], s), FDIV(a[1], dd), MOD(a[0], s), MOD(a[1], dd)), d));
}

void sh_seg_qkv_split(sh_graph *G, int64_t B, int64_t S, int64_t H, int64_t D, stof_dtype d) {
  init(G);
  int64_t sx[2] = {B * S, 3 * H * D}, sy[4] = {B, H, S, D};
  const stof_op *X = ph(G, 2, sx, d, "X");
  static const char *const names[3] = {"Q", "K", "V"};
  for (int p = 0; p < 3; p++) {
    E a[4];
    axes(G, 4, sy, a);
    E row = ADD(MUL(a[0], ic(G, S)), a[2]);
    E col = ADD(ADD(MUL(a[1], ic(G, D)), a[3]), ic(G, p * H * D));
    output(G, compute(G, names[p], 4, a, ld(G, X, 2, row, col, NULL, NULL), d));
  }
}

void sh_seg_rotary(sh_graph *G, int64_t B, int64_t H, int64_t S, int64_t D, stof_dtype d) {
  init(G);
  int64_t sx[4] = {B, H, S, D}, sc[2] = {S, D};
  const stof_op *X = ph(G, 4, sx, d, "X"), *cs = ph(G, 2, sc, d, "cos"), *sn = ph(G, 2, sc, d, "sin");
  E a[4];
  axes(G, 4, sx, a);
  E x = ld(G, X, 4, a[0], a[1], a[2], a[3]);
  E rot = ld(G, X, 4, a[0], a[1], a[2], MOD(ADD(a[3], ic(G, D / 2)), ic(G, D)));
  E sign;
  SH_OK(G->ctx, stof_te_select(G->g, bin(G, STOF_EXPR_LT, a[3], ic(G, D / 2)), fc(G, -1), fc(G, 1), &sign));
  E y = ADD(MUL(x, ld(G, cs, 2, a[2], a[3], NULL, NULL)), MUL(MUL(sign, rot), ld(G, sn, 2, a[2], a[3], NULL, NULL)));
  output(G, compute(G, "Y", 4, a, y, d));
}

void sh_seg_patches(sh_graph *G, int64_t B, int64_t C, int64_t Hi, int64_t Wi, int64_t P, stof_dtype d) {
  init(G);
  int64_t sx[4] = {B, C, Hi, Wi}, sy[3] = {B, (Hi / P) * (Wi / P), C * P * P};
  const stof_op *X = ph(G, 4, sx, d, "X");
  E a[3];
  axes(G, 3, sy, a);
  E np = ic(G, Wi / P), pp = ic(G, P * P), p = ic(G, P);
  E c = FDIV(a[2], pp);
  E y = ADD(MUL(FDIV(a[1], np), p), MOD(FDIV(a[2], p), p));
  E x = ADD(MUL(MOD(a[1], np), p), MOD(a[2], p));
  output(G, compute(G, "Y", 3, a, ld(G, X, 4, a[0], c, y, x), d));
}

void sh_seg_embedding(sh_graph *G, int64_t T, int64_t V, int64_t N, stof_dtype d) {
  init(G);
  int64_t sw[2] = {V, N}, sp[2] = {T, N};
  const stof_op *ids = ph(G, 1, &T, STOF_DTYPE_I32, "ids"), *W = ph(G, 2, sw, d, "W"), *Pos = ph(G, 2, sp, d, "Pos");
  E a[2];
  axes(G, 2, sp, a);
  E id = ld(G, ids, 1, a[0], NULL, NULL, NULL);
  id = bin(G, STOF_EXPR_MIN, bin(G, STOF_EXPR_MAX, id, ic(G, 0)), ic(G, V - 1));
  output(G, compute(G, "Y", 2, a, ADD(ld(G, W, 2, id, a[1], NULL, NULL), ld(G, Pos, 2, a[0], a[1], NULL, NULL)), d));
}

void sh_seg_layernorm(sh_graph *G, int64_t M, int64_t N, stof_dtype d, int residual) {
  init(G);
  int64_t sx[2] = {M, N};
  const stof_op *X = ph(G, 2, sx, d, "X"), *Rs = residual ? ph(G, 2, sx, d, "Rs") : NULL;
  const stof_op *gamma = ph(G, 1, &N, d, "gamma"), *beta = ph(G, 1, &N, d, "beta");
  const stof_op *src = X;
  if (residual) {
    E a[2];
    axes(G, 2, sx, a);
    src = compute(G, "H", 2, a, ADD(ld(G, X, 2, a[0], a[1], NULL, NULL), ld(G, Rs, 2, a[0], a[1], NULL, NULL)),
                  residual == 2 ? d : STOF_DTYPE_F32);
    if (residual == 2) output(G, src);
  }
  E a1[1], a2[1], a3[2];
  E inv = fc(G, 1.0 / (double)N);
  axes(G, 1, &M, a1);
  E r = raxis(G, N, "r");
  const stof_op *mean = compute(G, "mean", 1, a1, sum(G, MUL(ld(G, src, 2, a1[0], r, NULL, NULL), inv), r), STOF_DTYPE_F32);
  axes(G, 1, &M, a2);
  E c = raxis(G, N, "c");
  E dev = SUB(ld(G, src, 2, a2[0], c, NULL, NULL), ld(G, mean, 1, a2[0], NULL, NULL, NULL));
  const stof_op *var = compute(G, "var", 1, a2, sum(G, MUL(MUL(dev, dev), inv), c), STOF_DTYPE_F32);
  axes(G, 2, sx, a3);
  E i = a3[0], j = a3[1];
  E norm = MUL(SUB(ld(G, src, 2, i, j, NULL, NULL), ld(G, mean, 1, i, NULL, NULL, NULL)),
               un(G, STOF_EXPR_RSQRT, ADD(ld(G, var, 1, i, NULL, NULL, NULL), fc(G, 1e-5))));
  output(G, compute(G, "Y", 2, a3, ADD(MUL(norm, ld(G, gamma, 1, j, NULL, NULL, NULL)), ld(G, beta, 1, j, NULL, NULL, NULL)), d));
}

void sh_seg_rmsnorm(sh_graph *G, int64_t M, int64_t N, stof_dtype d) {
  init(G);
  int64_t sx[2] = {M, N};
  const stof_op *X = ph(G, 2, sx, d, "X"), *w = ph(G, 1, &N, d, "w");
  E a1[1], a2[2];
  axes(G, 1, &M, a1);
  E r = raxis(G, N, "r");
  E x = ld(G, X, 2, a1[0], r, NULL, NULL);
  const stof_op *ms = compute(G, "ms", 1, a1, sum(G, MUL(MUL(x, x), fc(G, 1.0 / (double)N)), r), STOF_DTYPE_F32);
  axes(G, 2, sx, a2);
  E y = MUL(MUL(ld(G, X, 2, a2[0], a2[1], NULL, NULL), un(G, STOF_EXPR_RSQRT, ADD(ld(G, ms, 1, a2[0], NULL, NULL, NULL), fc(G, 1e-6)))),
            ld(G, w, 1, a2[1], NULL, NULL, NULL));
  output(G, compute(G, "Y", 2, a2, y, d));
}

void sh_seg_softmax(sh_graph *G, int64_t A, int64_t M, int64_t N, stof_dtype d) {
  init(G);
  int64_t sx[3] = {A, M, N}, sr[2] = {A, M};
  const stof_op *X = ph(G, 3, sx, d, "X");
  E a1[2], a2[3], a3[2], a4[2], a5[3];
  axes(G, 2, sr, a1);
  E r = raxis(G, N, "r");
  const stof_op *mx = compute(G, "mx", 2, a1, rmax(G, ld(G, X, 3, a1[0], a1[1], r, NULL), r), STOF_DTYPE_F32);
  axes(G, 3, sx, a2);
  E ex = un(G, STOF_EXPR_EXP, SUB(ld(G, X, 3, a2[0], a2[1], a2[2], NULL), ld(G, mx, 2, a2[0], a2[1], NULL, NULL)));
  const stof_op *e = compute(G, "e", 3, a2, ex, STOF_DTYPE_F32);
  axes(G, 2, sr, a3);
  E c = raxis(G, N, "c");
  const stof_op *sm = compute(G, "sm", 2, a3, sum(G, ld(G, e, 3, a3[0], a3[1], c, NULL), c), STOF_DTYPE_F32);
  axes(G, 2, sr, a4);
  const stof_op *inv = compute(G, "inv", 2, a4, DIV(fc(G, 1), ld(G, sm, 2, a4[0], a4[1], NULL, NULL)), STOF_DTYPE_F32);
  axes(G, 3, sx, a5);
  output(G, compute(G, "P", 3, a5, MUL(ld(G, e, 3, a5[0], a5[1], a5[2], NULL), ld(G, inv, 2, a5[0], a5[1], NULL, NULL)), d));
}

void sh_seg_mirrored_rowsum(sh_graph *G, int64_t M, int64_t N) {
  init(G);
  int64_t sx[2] = {M, N};
  const stof_op *X = ph(G, 2, sx, STOF_DTYPE_F32, "X");
  E a1[1], a2[2];
  axes(G, 1, &M, a1);
  E k = raxis(G, N, "k");
  const stof_op *S = compute(G, "S", 1, a1, sum(G, ld(G, X, 2, a1[0], k, NULL, NULL), k), STOF_DTYPE_F32);
  axes(G, 2, sx, a2);
  E mirror = SUB(ic(G, M - 1), a2[0]);
  output(G, compute(G, "Y", 2, a2, MUL(ld(G, X, 2, a2[0], a2[1], NULL, NULL), ld(G, S, 1, mirror, NULL, NULL, NULL)),
                    STOF_DTYPE_F32));
}

void sh_seg_row_norm(sh_graph *G, int64_t M, int64_t N, stof_dtype d) {
  init(G);
  int64_t sx[2] = {M, N};
  const stof_op *X = ph(G, 2, sx, d, "X");
  E a1[1], a2[1];
  axes(G, 1, &M, a1);
  E k = raxis(G, N, "k");
  E x = ld(G, X, 2, a1[0], k, NULL, NULL);
  const stof_op *n2 = compute(G, "n2", 1, a1, sum(G, MUL(x, x), k), STOF_DTYPE_F32);
  axes(G, 1, &M, a2);
  output(G, compute(G, "Y", 1, a2, MUL(un(G, STOF_EXPR_SQRT, ld(G, n2, 1, a2[0], NULL, NULL, NULL)), fc(G, 2)), d));
}

stof_sched *sh_auto(sh_graph *G, const char *target) {
  stof_sched *s = sh_sched(G);
  SH_OK(G->ctx, stof_sched_auto(s, target, NULL));
  return s;
}
