/* Shared helpers of test_schedule (see helpers.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

/* ---------------------------------------------------------------- contexts and errors */

stof_ctx *sh_ctx(void) {
  stof_ctx *ctx = stof_ctx_new(NULL, NULL);
  assert_non_null(ctx);
  return ctx;
}

void sh_ctx_done(stof_ctx *ctx) {
  assert_int_equal(stof_ctx_bytes_in_use(ctx), 0);
  stof_ctx_free(ctx);
}

void sh_expect_error(stof_ctx *ctx, stof_status got, stof_status want, const char *substr) {
  if (got != want)
    fail_msg("expected %s, got %s: %s", stof_status_name(want), stof_status_name(got),
             stof_ctx_message(ctx));
  if (!strstr(stof_ctx_message(ctx), substr))
    fail_msg("message \"%s\" lacks \"%s\"", stof_ctx_message(ctx), substr);
  stof_ctx_clear_error(ctx);
}

/* ---------------------------------------------------------------- graph building */

static void init(sh_graph *G) {
  memset(G, 0, sizeof *G);
  G->ctx = sh_ctx();
  SH_OK(G->ctx, stof_graph_new(G->ctx, &G->g));
}

static const stof_op *placeholder(sh_graph *G, int ndim, const int64_t *shape, stof_dtype d,
                                  const char *name) {
  const stof_op *op;
  SH_OK(G->ctx, stof_te_placeholder(G->g, ndim, shape, d, name, &op));
  G->in[G->nin++] = op;
  return op;
}

static const stof_expr *bin(sh_graph *G, stof_expr_kind k, const stof_expr *a, const stof_expr *b) {
  const stof_expr *e;
  SH_OK(G->ctx, stof_te_binary(G->g, k, a, b, &e));
  return e;
}

static const stof_expr *flt(sh_graph *G, double v, stof_dtype d) {
  const stof_expr *e;
  SH_OK(G->ctx, stof_te_float(G->g, v, d, &e));
  return e;
}

static const stof_expr *load(sh_graph *G, const stof_op *t, int n, const stof_expr *i0,
                             const stof_expr *i1, const stof_expr *i2) {
  const stof_expr *idx[3] = {i0, i1, i2}, *e;
  SH_OK(G->ctx, stof_te_load(G->g, t, n, idx, &e));
  return e;
}

static const stof_expr *raxis(sh_graph *G, int64_t n, const char *name) {
  const stof_expr *e;
  SH_OK(G->ctx, stof_te_reduce_axis(G->g, n, name, &e));
  return e;
}

static const stof_expr *reduce(sh_graph *G, stof_reduce_kind c, const stof_expr *src, int n,
                               const stof_expr *a0, const stof_expr *a1) {
  const stof_expr *ax[2] = {a0, a1}, *e;
  SH_OK(G->ctx, stof_te_reduce(G->g, c, src, n, ax, &e));
  return e;
}

static void axes(sh_graph *G, int ndim, const int64_t *shape, const stof_expr **ax) {
  static const char *const names[] = {"i", "j", "l"};
  SH_OK(G->ctx, stof_te_compute_axes(G->g, ndim, shape, names, ax));
}

static const stof_op *compute(sh_graph *G, const char *name, int ndim, const stof_expr **ax,
                              const stof_expr *body) {
  const stof_op *op;
  SH_OK(G->ctx, stof_te_compute(G->g, name, ndim, ax, body, -1, &op));
  return op;
}

void sh_matmul(sh_graph *G, int64_t M, int64_t N, int64_t K) { sh_matmul_dtype(G, M, N, K, STOF_DTYPE_F32); }

void sh_matmul_dtype(sh_graph *G, int64_t M, int64_t N, int64_t K, stof_dtype d) {
  init(G);
  int64_t sa[2] = {M, K}, sb[2] = {K, N}, sc[2] = {M, N};
  const stof_op *A = placeholder(G, 2, sa, d, "A");
  const stof_op *B = placeholder(G, 2, sb, d, "B");
  const stof_expr *ax[2];
  axes(G, 2, sc, ax);
  const stof_expr *k = raxis(G, K, "k");
  const stof_expr *prod = bin(G, STOF_EXPR_MUL, load(G, A, 2, ax[0], k, NULL), load(G, B, 2, k, ax[1], NULL));
  G->out[G->nout++] = compute(G, "C", 2, ax, reduce(G, STOF_REDUCE_SUM, prod, 1, k, NULL));
}

void sh_vec(sh_graph *G, int64_t n, stof_dtype d) {
  init(G);
  const stof_op *A = placeholder(G, 1, &n, d, "A");
  const stof_expr *ax[1];
  axes(G, 1, &n, ax);
  const stof_expr *body = bin(G, STOF_EXPR_SUB, bin(G, STOF_EXPR_MUL, load(G, A, 1, ax[0], NULL, NULL),
                                                    flt(G, 3, stof_dtype_is_float(d) ? d : STOF_DTYPE_F32)),
                              flt(G, 1, stof_dtype_is_float(d) ? d : STOF_DTYPE_F32));
  G->out[G->nout++] = compute(G, "B", 1, ax, body);
}

void sh_elem2(sh_graph *G, int64_t M, int64_t N) {
  init(G);
  int64_t sh[2] = {M, N};
  const stof_op *A = placeholder(G, 2, sh, STOF_DTYPE_F32, "A");
  const stof_expr *ax[2];
  axes(G, 2, sh, ax);
  const stof_expr *body = bin(G, STOF_EXPR_ADD, bin(G, STOF_EXPR_MUL, load(G, A, 2, ax[0], ax[1], NULL),
                                                    flt(G, 2, STOF_DTYPE_F32)),
                              flt(G, 1, STOF_DTYPE_F32));
  G->out[G->nout++] = compute(G, "B", 2, ax, body);
}

void sh_matmul_bias_relu(sh_graph *G, int64_t M, int64_t N, int64_t K) {
  init(G);
  int64_t sa[2] = {M, K}, sw[2] = {K, N}, sc[2] = {M, N};
  const stof_op *A = placeholder(G, 2, sa, STOF_DTYPE_F32, "A");
  const stof_op *W = placeholder(G, 2, sw, STOF_DTYPE_F32, "W");
  const stof_op *bias = placeholder(G, 1, &N, STOF_DTYPE_F32, "bias");
  const stof_expr *ax[2], *bx[2], *cx[2];
  axes(G, 2, sc, ax);
  const stof_expr *k = raxis(G, K, "k");
  const stof_expr *prod = bin(G, STOF_EXPR_MUL, load(G, A, 2, ax[0], k, NULL), load(G, W, 2, k, ax[1], NULL));
  const stof_op *C = compute(G, "C", 2, ax, reduce(G, STOF_REDUCE_SUM, prod, 1, k, NULL));
  axes(G, 2, sc, bx);
  const stof_op *D = compute(G, "D", 2, bx,
                             bin(G, STOF_EXPR_ADD, load(G, C, 2, bx[0], bx[1], NULL), load(G, bias, 1, bx[1], NULL, NULL)));
  axes(G, 2, sc, cx);
  G->out[G->nout++] = compute(G, "E", 2, cx,
                              bin(G, STOF_EXPR_MAX, load(G, D, 2, cx[0], cx[1], NULL), flt(G, 0, STOF_DTYPE_F32)));
}

void sh_softmax(sh_graph *G, int64_t M, int64_t N) {
  init(G);
  int64_t sx[2] = {M, N};
  const stof_op *X = placeholder(G, 2, sx, STOF_DTYPE_F32, "X");
  const stof_expr *a1[1], *a2[2], *a3[1], *a4[2];
  axes(G, 1, &M, a1);
  const stof_expr *j1 = raxis(G, N, "r");
  const stof_op *mx = compute(G, "mx", 1, a1, reduce(G, STOF_REDUCE_MAX, load(G, X, 2, a1[0], j1, NULL), 1, j1, NULL));
  axes(G, 2, sx, a2);
  const stof_expr *ex;
  SH_OK(G->ctx, stof_te_unary(G->g, STOF_EXPR_EXP,
                              bin(G, STOF_EXPR_SUB, load(G, X, 2, a2[0], a2[1], NULL), load(G, mx, 1, a2[0], NULL, NULL)),
                              &ex));
  const stof_op *e = compute(G, "e", 2, a2, ex);
  axes(G, 1, &M, a3);
  const stof_expr *j2 = raxis(G, N, "c");
  const stof_op *sm = compute(G, "sm", 1, a3, reduce(G, STOF_REDUCE_SUM, load(G, e, 2, a3[0], j2, NULL), 1, j2, NULL));
  axes(G, 2, sx, a4);
  G->out[G->nout++] = compute(G, "P", 2, a4,
                              bin(G, STOF_EXPR_DIV, load(G, e, 2, a4[0], a4[1], NULL), load(G, sm, 1, a4[0], NULL, NULL)));
}

void sh_sum2(sh_graph *G, int64_t M, int64_t R, int64_t C) {
  init(G);
  int64_t sx[3] = {M, R, C};
  const stof_op *X = placeholder(G, 3, sx, STOF_DTYPE_F32, "X");
  const stof_expr *ax[1];
  axes(G, 1, &M, ax);
  const stof_expr *r = raxis(G, R, "r"), *c = raxis(G, C, "c");
  G->out[G->nout++] = compute(G, "S", 1, ax, reduce(G, STOF_REDUCE_SUM, load(G, X, 3, ax[0], r, c), 2, r, c));
}

static const stof_expr *un(sh_graph *G, stof_expr_kind k, const stof_expr *a) {
  const stof_expr *e;
  SH_OK(G->ctx, stof_te_unary(G->g, k, a, &e));
  return e;
}

static const stof_expr *ival(sh_graph *G, int64_t v) {
  const stof_expr *e;
  SH_OK(G->ctx, stof_te_int(G->g, v, STOF_DTYPE_I32, &e));
  return e;
}

void sh_chain(sh_graph *G, int64_t n) {
  init(G);
  const stof_op *A = placeholder(G, 1, &n, STOF_DTYPE_F32, "A");
  const stof_expr *a1[1], *a2[1];
  axes(G, 1, &n, a1);
  const stof_op *B = compute(G, "B", 1, a1, bin(G, STOF_EXPR_MUL, load(G, A, 1, a1[0], NULL, NULL), flt(G, 2, STOF_DTYPE_F32)));
  axes(G, 1, &n, a2);
  G->out[G->nout++] = compute(G, "C", 1, a2, bin(G, STOF_EXPR_ADD, load(G, B, 1, a2[0], NULL, NULL), flt(G, 1, STOF_DTYPE_F32)));
}

void sh_stencil(sh_graph *G, int64_t n) {
  init(G);
  int64_t n2 = n + 2;
  const stof_op *A = placeholder(G, 1, &n2, STOF_DTYPE_F32, "A");
  const stof_expr *a1[1], *a2[1];
  axes(G, 1, &n2, a1);
  const stof_op *B = compute(G, "B", 1, a1, bin(G, STOF_EXPR_MUL, load(G, A, 1, a1[0], NULL, NULL), flt(G, 2, STOF_DTYPE_F32)));
  axes(G, 1, &n, a2);
  const stof_expr *i = a2[0];
  const stof_expr *sum = bin(G, STOF_EXPR_ADD, load(G, B, 1, i, NULL, NULL), load(G, B, 1, bin(G, STOF_EXPR_ADD, i, ival(G, 1)), NULL, NULL));
  sum = bin(G, STOF_EXPR_ADD, sum, load(G, B, 1, bin(G, STOF_EXPR_ADD, i, ival(G, 2)), NULL, NULL));
  G->out[G->nout++] = compute(G, "C", 1, a2, sum);
}

void sh_rowsum(sh_graph *G, int64_t M, int64_t K, int max) {
  init(G);
  int64_t sx[2] = {M, K};
  const stof_op *X = placeholder(G, 2, sx, STOF_DTYPE_F32, "X");
  const stof_expr *ax[1];
  axes(G, 1, &M, ax);
  const stof_expr *k = raxis(G, K, "k");
  G->out[G->nout++] = compute(G, "S", 1, ax,
                              reduce(G, max ? STOF_REDUCE_MAX : STOF_REDUCE_SUM, load(G, X, 2, ax[0], k, NULL), 1, k, NULL));
}

void sh_layernorm(sh_graph *G, int64_t M, int64_t N) {
  init(G);
  int64_t sx[2] = {M, N};
  const stof_op *X = placeholder(G, 2, sx, STOF_DTYPE_F32, "X");
  const stof_op *gamma = placeholder(G, 1, &N, STOF_DTYPE_F32, "gamma");
  const stof_op *beta = placeholder(G, 1, &N, STOF_DTYPE_F32, "beta");
  const stof_expr *a1[1], *a2[1], *a3[2];
  const stof_expr *inv = flt(G, 1.0 / (double)N, STOF_DTYPE_F32);
  axes(G, 1, &M, a1);
  const stof_expr *j1 = raxis(G, N, "r");
  const stof_op *mean = compute(G, "mean", 1, a1,
                                reduce(G, STOF_REDUCE_SUM, bin(G, STOF_EXPR_MUL, load(G, X, 2, a1[0], j1, NULL), inv), 1, j1, NULL));
  axes(G, 1, &M, a2);
  const stof_expr *j2 = raxis(G, N, "c");
  const stof_expr *dev = bin(G, STOF_EXPR_SUB, load(G, X, 2, a2[0], j2, NULL), load(G, mean, 1, a2[0], NULL, NULL));
  const stof_op *var = compute(G, "var", 1, a2,
                               reduce(G, STOF_REDUCE_SUM, bin(G, STOF_EXPR_MUL, bin(G, STOF_EXPR_MUL, dev, dev), inv), 1, j2, NULL));
  axes(G, 2, sx, a3);
  const stof_expr *i = a3[0], *j = a3[1];
  const stof_expr *norm = bin(G, STOF_EXPR_MUL, bin(G, STOF_EXPR_SUB, load(G, X, 2, i, j, NULL), load(G, mean, 1, i, NULL, NULL)),
                              un(G, STOF_EXPR_RSQRT, bin(G, STOF_EXPR_ADD, load(G, var, 1, i, NULL, NULL), flt(G, 1e-5, STOF_DTYPE_F32))));
  G->out[G->nout++] = compute(G, "Y", 2, a3,
                              bin(G, STOF_EXPR_ADD, bin(G, STOF_EXPR_MUL, norm, load(G, gamma, 1, j, NULL, NULL)),
                                  load(G, beta, 1, j, NULL, NULL)));
}

void sh_gemm_bias_gelu(sh_graph *G, int64_t M, int64_t N, int64_t K) {
  init(G);
  int64_t sa[2] = {M, K}, sw[2] = {K, N}, sc[2] = {M, N};
  const stof_op *A = placeholder(G, 2, sa, STOF_DTYPE_F32, "A");
  const stof_op *W = placeholder(G, 2, sw, STOF_DTYPE_F32, "W");
  const stof_op *bias = placeholder(G, 1, &N, STOF_DTYPE_F32, "bias");
  const stof_expr *ax[2], *bx[2], *cx[2];
  axes(G, 2, sc, ax);
  const stof_expr *k = raxis(G, K, "k");
  const stof_expr *prod = bin(G, STOF_EXPR_MUL, load(G, A, 2, ax[0], k, NULL), load(G, W, 2, k, ax[1], NULL));
  const stof_op *C = compute(G, "C", 2, ax, reduce(G, STOF_REDUCE_SUM, prod, 1, k, NULL));
  axes(G, 2, sc, bx);
  const stof_op *D = compute(G, "D", 2, bx,
                             bin(G, STOF_EXPR_ADD, load(G, C, 2, bx[0], bx[1], NULL), load(G, bias, 1, bx[1], NULL, NULL)));
  axes(G, 2, sc, cx);
  const stof_expr *d = load(G, D, 2, cx[0], cx[1], NULL);
  const stof_expr *cdf = bin(G, STOF_EXPR_ADD, flt(G, 1, STOF_DTYPE_F32),
                             un(G, STOF_EXPR_ERF, bin(G, STOF_EXPR_MUL, d, flt(G, 0.7071067811865476, STOF_DTYPE_F32))));
  G->out[G->nout++] = compute(G, "E", 2, cx, bin(G, STOF_EXPR_MUL, bin(G, STOF_EXPR_MUL, d, flt(G, 0.5, STOF_DTYPE_F32)), cdf));
}

static const stof_expr *cast(sh_graph *G, stof_dtype d, const stof_expr *a) {
  const stof_expr *e;
  SH_OK(G->ctx, stof_te_cast(G->g, d, a, &e));
  return e;
}

/* C = sum_k f32(A[i, k]) * f32(B[k, j]) with A, B of dtype in; returns C. */
/* C = A @ B in float32 of half operands; nk: B stored [N, K] and read B[j, k] (a weight as
 * torch's Linear keeps it), else [K, N]. */
static const stof_op *matmul_half_layout(sh_graph *G, int64_t M, int64_t N, int64_t K, stof_dtype in, int nk) {
  int64_t sa[2] = {M, K}, sb[2] = {K, N}, sbt[2] = {N, K}, sc[2] = {M, N};
  const stof_op *A = placeholder(G, 2, sa, in, "A");
  const stof_op *B = placeholder(G, 2, nk ? sbt : sb, in, "B");
  const stof_expr *ax[2];
  axes(G, 2, sc, ax);
  const stof_expr *k = raxis(G, K, "k");
  const stof_expr *prod = bin(G, STOF_EXPR_MUL, cast(G, STOF_DTYPE_F32, load(G, A, 2, ax[0], k, NULL)),
                              cast(G, STOF_DTYPE_F32, nk ? load(G, B, 2, ax[1], k, NULL) : load(G, B, 2, k, ax[1], NULL)));
  return compute(G, "C", 2, ax, reduce(G, STOF_REDUCE_SUM, prod, 1, k, NULL));
}

static const stof_op *matmul_half(sh_graph *G, int64_t M, int64_t N, int64_t K, stof_dtype in) {
  return matmul_half_layout(G, M, N, K, in, 0);
}

void sh_matmul_f16(sh_graph *G, int64_t M, int64_t N, int64_t K, stof_dtype in) {
  init(G);
  G->out[G->nout++] = matmul_half(G, M, N, K, in);
}

void sh_matmul_f16_bias(sh_graph *G, int64_t M, int64_t N, int64_t K, stof_dtype in) {
  sh_matmul_f16_bias_layout(G, M, N, K, in, 0);
}

void sh_matmul_f16_bias_layout(sh_graph *G, int64_t M, int64_t N, int64_t K, stof_dtype in, int nk) {
  init(G);
  const stof_op *C = matmul_half_layout(G, M, N, K, in, nk);
  const stof_op *bias = placeholder(G, 1, &N, in, "bias");
  int64_t sc[2] = {M, N};
  const stof_expr *ax[2];
  axes(G, 2, sc, ax);
  const stof_expr *sum = bin(G, STOF_EXPR_ADD, load(G, C, 2, ax[0], ax[1], NULL),
                             cast(G, STOF_DTYPE_F32, load(G, bias, 1, ax[1], NULL, NULL)));
  G->out[G->nout++] = compute(G, "D", 2, ax, cast(G, in, sum));
}

void sh_batched_matmul_f16_bias_nk(sh_graph *G, int64_t B, int64_t S, int64_t N, int64_t K, stof_dtype in) {
  init(G);
  int64_t sa[3] = {B, S, K}, sw[2] = {N, K}, sc[3] = {B, S, N};
  const stof_op *A = placeholder(G, 3, sa, in, "A");
  const stof_op *W = placeholder(G, 2, sw, in, "B");
  const stof_expr *ax[3];
  axes(G, 3, sc, ax);
  const stof_expr *k = raxis(G, K, "k");
  const stof_expr *prod = bin(G, STOF_EXPR_MUL, cast(G, STOF_DTYPE_F32, load(G, A, 3, ax[0], ax[1], k)),
                              cast(G, STOF_DTYPE_F32, load(G, W, 2, ax[2], k, NULL)));
  const stof_op *C = compute(G, "C", 3, ax, reduce(G, STOF_REDUCE_SUM, prod, 1, k, NULL));
  const stof_op *bias = placeholder(G, 1, &N, in, "bias");
  const stof_expr *bx[3];
  axes(G, 3, sc, bx);
  const stof_expr *sum = bin(G, STOF_EXPR_ADD, load(G, C, 3, bx[0], bx[1], bx[2]),
                             cast(G, STOF_DTYPE_F32, load(G, bias, 1, bx[2], NULL, NULL)));
  G->out[G->nout++] = compute(G, "D", 3, bx, cast(G, in, sum));
}

void sh_done(sh_graph *G) {
  stof_graph_free(G->g);
  sh_ctx_done(G->ctx);
}

const stof_op *sh_op(sh_graph *G, const char *name) {
  for (int i = 0; i < stof_graph_nop(G->g); i++)
    if (strcmp(stof_graph_op(G->g, i)->name, name) == 0) return stof_graph_op(G->g, i);
  fail_msg("no op named %s", name);
  return NULL;
}

int sh_args(const sh_graph *G, const stof_op **args) {
  int n = 0;
  assert_true(G->nin + G->nout <= 16);
  for (int i = 0; i < G->nin; i++) args[n++] = G->in[i];
  for (int i = 0; i < G->nout; i++) args[n++] = G->out[i];
  return n;
}

/* ---------------------------------------------------------------- schedules */

stof_sched *sh_sched(sh_graph *G) {
  stof_sched *s;
  SH_OK(G->ctx, stof_sched_new(G->g, G->nout, G->out, &s));
  return s;
}

int sh_block(stof_sched *s, const char *name) {
  int b;
  SH_OK(stof_sched_ctx(s), stof_sched_get_block(s, name, &b));
  return b;
}

int sh_loops(stof_sched *s, int block, int *loops) {
  int n;
  SH_OK(stof_sched_ctx(s), stof_sched_get_loops(s, block, STOF_SCHED_MAX_LOOPS, loops, &n));
  return n;
}

char *sh_nest(stof_sched *s) {
  stof_ctx *ctx = stof_sched_ctx(s);
  char *t;
  SH_OK(ctx, stof_sched_print_loop_nest(s, &t));
  char *copy = strdup(t);
  stof_ctx_dealloc(ctx, t, strlen(t) + 1);
  return copy;
}

void sh_expect_nest(stof_sched *s, const char *golden) {
  char *t = sh_nest(s);
  if (strcmp(t, golden) != 0) {
    print_error("loop nest:\n%s\nexpected:\n%s\n", t, golden);
    free(t);
    fail_msg("loop nest differs from the golden text");
  }
  free(t);
}

double sh_tolerance(stof_dtype d) {
  switch (d) {
  case STOF_DTYPE_F32: return 1e-5;
  case STOF_DTYPE_F64: return 1e-12;
  case STOF_DTYPE_F16:
  case STOF_DTYPE_BF16: return 1e-2;
  default: return 1e-12;
  }
}

void sh_run(sh_graph *G, stof_sched *s, uint64_t seed, stof_tensor **out) {
  stof_ctx *ctx = G->ctx;
  const stof_op *args[16];
  stof_tensor *ts[16];
  int n = 0;
  for (int i = 0; i < G->nin; i++) args[n++] = G->in[i];
  for (int i = 0; i < G->nout; i++) args[n++] = G->out[i];
  stof_func *f;
  SH_OK(ctx, stof_build(s, n, args, "c", &f));
  for (int i = 0; i < G->nin; i++)
    SH_OK(ctx, stof_tensor_rand(ctx, G->in[i]->dtype, G->in[i]->ndim, G->in[i]->shape, seed + (uint64_t)i, &ts[i]));
  for (int i = 0; i < G->nout; i++) {
    const stof_op *o = G->out[i];
    SH_OK(ctx, stof_tensor_new(ctx, o->dtype, o->ndim, o->shape, STOF_DEVICE_CPU, &ts[G->nin + i]));
    stof_tensor_fill(ts[G->nin + i], NAN);
  }
  SH_OK(ctx, stof_func_call(f, n, ts));
  stof_func_free(f);
  for (int i = 0; i < G->nin; i++) stof_tensor_free(ts[i]);
  for (int i = 0; i < G->nout; i++) out[i] = ts[G->nin + i];
}

void sh_check_numeric(sh_graph *G, stof_sched *s) { sh_check_numeric_within(G, s, 0); }

void sh_check_numeric_within(sh_graph *G, stof_sched *s, double tol) {
  stof_ctx *ctx = G->ctx;
  stof_tensor *got[8], *want[8], *in[8];
  sh_run(G, s, 7, got);
  for (int i = 0; i < G->nin; i++)
    SH_OK(ctx, stof_tensor_rand(ctx, G->in[i]->dtype, G->in[i]->ndim, G->in[i]->shape, 7 + (uint64_t)i, &in[i]));
  SH_OK(ctx, stof_interp_eval(G->g, G->nout, G->out, G->nin, G->in, (const stof_tensor *const *)in, want));
  for (int i = 0; i < G->nout; i++) {
    double err = 0, bound = tol > 0 ? tol : sh_tolerance(G->out[i]->dtype);
    SH_OK(ctx, stof_tensor_rel_l2(got[i], want[i], &err));
    if (!(err <= bound)) fail_msg("output %s: relative L2 error %g (tolerance %g)", G->out[i]->name, err, bound);
    stof_tensor_free(got[i]);
    stof_tensor_free(want[i]);
  }
  for (int i = 0; i < G->nin; i++) stof_tensor_free(in[i]);
}

char *sh_trace_lua(stof_sched *s) {
  stof_ctx *ctx = stof_sched_ctx(s);
  stof_trace *t;
  char *text;
  SH_OK(ctx, stof_sched_trace(s, &t));
  SH_OK(ctx, stof_trace_to_lua(t, &text));
  stof_trace_free(t);
  char *copy = strdup(text);
  stof_ctx_dealloc(ctx, text, strlen(text) + 1);
  return copy;
}

void sh_round_trip(sh_graph *G, stof_sched *s) {
  stof_ctx *ctx = G->ctx;
  char *lua = sh_trace_lua(s);
  assert_non_null(strstr(lua, "return function(s, stof)\n"));
  assert_non_null(strstr(lua, "\nend\n"));
  free(lua);
  stof_trace *t, *back;
  char *json;
  SH_OK(ctx, stof_sched_trace(s, &t));
  SH_OK(ctx, stof_trace_to_json(t, &json));
  SH_OK(ctx, stof_trace_from_json(ctx, json, &back));
  char *json2;
  SH_OK(ctx, stof_trace_to_json(back, &json2));
  assert_string_equal(json, json2);
  stof_sched *fresh;
  SH_OK(ctx, stof_sched_fresh(s, &fresh));
  SH_OK(ctx, stof_sched_replay(back, fresh));
  char *a = sh_nest(s), *b = sh_nest(fresh);
  assert_string_equal(a, b);
  free(a);
  free(b);
  stof_tensor *x[8], *y[8];
  sh_run(G, s, 3, x);
  sh_run(G, fresh, 3, y);
  for (int i = 0; i < G->nout; i++) {
    int same = 0;
    SH_OK(ctx, stof_tensor_allclose(x[i], y[i], 0, 0, &same));
    assert_true(same);
    stof_tensor_free(x[i]);
    stof_tensor_free(y[i]);
  }
  stof_sched_free(fresh);
  stof_trace_free(t);
  stof_trace_free(back);
  stof_ctx_dealloc(ctx, json, strlen(json) + 1);
  stof_ctx_dealloc(ctx, json2, strlen(json2) + 1);
}

void sh_check_all(sh_graph *G, stof_sched *s, const char *golden) {
  sh_expect_nest(s, golden);
  sh_check_numeric(G, s);
  sh_round_trip(G, s);
}

int sh_source_contains(sh_graph *G, stof_sched *s, const char *needle) {
  const stof_op *args[16];
  int n = 0;
  for (int i = 0; i < G->nin; i++) args[n++] = G->in[i];
  for (int i = 0; i < G->nout; i++) args[n++] = G->out[i];
  stof_func *f;
  SH_OK(G->ctx, stof_build(s, n, args, "c", &f));
  int found = strstr(stof_func_source(f), needle) != NULL;
  stof_func_free(f);
  return found;
}

sh_snapshot sh_take(stof_sched *s) {
  sh_snapshot sn = {sh_nest(s), sh_trace_lua(s)};
  return sn;
}

void sh_expect_same(stof_sched *s, sh_snapshot *before) {
  sh_snapshot now = sh_take(s);
  assert_string_equal(before->nest, now.nest);
  assert_string_equal(before->lua, now.lua);
  free(now.nest);
  free(now.lua);
  free(before->nest);
  free(before->lua);
}

void sh_split(stof_sched *s, int loop, int64_t factor, int *parts) {
  stof_factor f[2] = {stof_factor_const(STOF_INFER), stof_factor_const(factor)};
  SH_OK(stof_sched_ctx(s), stof_sched_split(s, loop, 2, f, parts));
}

/* ---------------------------------------------------------------- CUDA source */

char *sh_cuda_source(sh_graph *G, stof_sched *s) {
  const stof_op *args[16];
  int n = sh_args(G, args);
  char *src;
  SH_OK(G->ctx, stof_build_source(s, n, args, "cuda", &src));
  char *copy = strdup(src);
  stof_ctx_dealloc(G->ctx, src, strlen(src) + 1);
  return copy;
}

void sh_expect_snippets(const char *src, const char *const *golden, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!strstr(src, golden[i])) {
      fprintf(stderr, "%s\n", src); /* whole: fail_msg truncates */
      fail_msg("missing\n%s", golden[i]);
    }
}

void sh_expect_cuda_illegal(sh_graph *G, stof_sched *s, const stof_op *extra, const char *substr) {
  const stof_op *args[16];
  int n = sh_args(G, args);
  if (extra) args[n++] = extra;
  sh_expect_error(G->ctx, stof_sched_cuda_check(s, n, args, "sm_80", NULL), STOF_ERR_SCHEDULE, substr);
  char *src = NULL;
  sh_expect_error(G->ctx, stof_build_source(s, n, args, "cuda", &src), STOF_ERR_SCHEDULE, substr);
  assert_null(src);
}
