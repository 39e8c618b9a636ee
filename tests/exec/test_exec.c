/*
 * test_exec: the runtime (exec/) on the CPU backend (target "c"). Every plan runs on random
 * inputs after its arena is poisoned with NaN bytes, and every output is compared with the
 * reference interpreter (relative L2 below 1e-5 in float32, 1e-2 in float16). Beside the
 * numbers: which ops the default scheme fuses (GEMM epilogues taken only when their structure
 * is right, never on a tag alone), which segments share an implementation, that the arena
 * packs values by liveness without overlapping live ones, the binding and argument errors,
 * and that allocation failures while planning and running are clean and leak nothing.
 */
#include "graphs.h"

#include <stdlib.h>
#include <unistd.h>

#include <stdio.h>

#include <stof/exec.h>
#include <stof/kernels.h>

/* ---------------------------------------------------------------- plans */

typedef struct fx {
  tu_heap heap;
  stof_ctx *ctx;
  stof_graph *g;
} fx;

static void fx_new(fx *f) {
  f->ctx = tu_ctx_new(&f->heap);
  TU_OK(f->ctx, stof_graph_new(f->ctx, &f->g));
}

static void fx_free(fx *f) {
  stof_graph_free(f->g);
  tu_ctx_free(f->ctx, &f->heap);
}

static stof_plan *plan_opts(stof_graph *g, int nout, const stof_op *const *outs, stof_plan_opts o) {
  stof_plan *p = NULL;
  o.target = "c";
  TU_OK(TU_G(g), stof_plan_new(g, nout, outs, &o, &p));
  assert_non_null(p);
  assert_string_equal(stof_plan_target(p), "c");
  return p;
}

static stof_plan *plan_c(stof_graph *g, int nout, const stof_op *const *outs) {
  return plan_opts(g, nout, outs, (stof_plan_opts){0});
}

/* The plan's inputs bound to random tensors (seeded by seed + input index). */
typedef struct feed {
  int n;
  const stof_op *op[32];
  stof_tensor *t[32];
} feed;

/* The plan's inputs, checked to come in id order. */
static void feed_inputs(stof_plan *p, feed *fd) {
  fd->n = stof_plan_ninput(p);
  assert_true(fd->n <= 32);
  for (int i = 0; i < fd->n; i++) {
    const stof_op *ph = stof_plan_input(p, i);
    assert_non_null(ph);
    assert_int_equal(ph->kind, STOF_OP_PLACEHOLDER);
    if (i) assert_true(stof_plan_input(p, i - 1)->id < ph->id);
    fd->op[i] = ph;
    fd->t[i] = NULL;
  }
}

static void feed_rand(stof_ctx *ctx, stof_plan *p, feed *fd, uint64_t seed) {
  feed_inputs(p, fd);
  for (int i = 0; i < fd->n; i++) {
    const stof_op *ph = fd->op[i];
    TU_OK(ctx, stof_tensor_rand(ctx, ph->dtype, ph->ndim, ph->shape, seed * 101 + (uint64_t)i + 1, &fd->t[i]));
    TU_OK(ctx, stof_plan_bind(p, ph, fd->t[i]));
  }
}

static void feed_free(feed *fd) {
  for (int i = 0; i < fd->n; i++) stof_tensor_free(fd->t[i]);
  fd->n = 0;
}

static double tol_of(stof_dtype d) { return d == STOF_DTYPE_F32 ? 1e-5 : 1e-2; }

/* Poisons, runs, and compares every output with the interpreter on the same feed. */
static void run_and_check(stof_ctx *ctx, stof_graph *g, stof_plan *p, int nout, const stof_op *const *outs,
                          const feed *fd) {
  TU_OK(ctx, stof_plan_poison(p));
  TU_OK(ctx, stof_plan_run(p));
  stof_tensor *want[16] = {0};
  assert_true(nout <= 16);
  TU_OK(ctx, stof_interp_eval(g, nout, outs, fd->n, fd->op, (const stof_tensor *const *)fd->t, want));
  for (int i = 0; i < nout; i++) {
    stof_tensor *got = NULL;
    TU_OK(ctx, stof_plan_output(p, i, &got));
    assert_int_equal(got->dtype, outs[i]->dtype);
    assert_int_equal(got->ndim, outs[i]->ndim);
    double e = INFINITY;
    TU_OK(ctx, stof_tensor_rel_l2(got, want[i], &e));
    if (!(e < tol_of(outs[i]->dtype)))
      fail_msg("output %d (%s, %s): relative L2 error %g (tolerance %g)", i, outs[i]->name,
               stof_dtype_name(outs[i]->dtype), e, tol_of(outs[i]->dtype));
    stof_tensor_free(got);
    stof_tensor_free(want[i]);
  }
}

/* Plans outs, runs it on random inputs and checks it against the interpreter; the plan is
 * returned for more assertions (caller frees). */
static stof_plan *plan_run_check_opts(stof_graph *g, int nout, const stof_op *const *outs, uint64_t seed,
                                      stof_plan_opts o) {
  stof_ctx *ctx = TU_G(g);
  stof_plan *p = plan_opts(g, nout, outs, o);
  feed fd;
  feed_rand(ctx, p, &fd, seed);
  run_and_check(ctx, g, p, nout, outs, &fd);
  feed_free(&fd);
  return p;
}

static stof_plan *plan_run_check(stof_graph *g, int nout, const stof_op *const *outs, uint64_t seed) {
  return plan_run_check_opts(g, nout, outs, seed, (stof_plan_opts){0});
}

static stof_seg_info seg(const stof_plan *p, int i) {
  stof_seg_info s;
  memset(&s, 0, sizeof s);
  assert_int_equal(stof_plan_segment(p, i, &s), STOF_OK);
  return s;
}

static void assert_seg(const stof_plan *p, int i, stof_seg_kind kind, const char *tmpl, int nop) {
  stof_seg_info s = seg(p, i);
  if (s.kind != kind || strcmp(s.template_name, tmpl) || s.nop != nop)
    fail_msg("segment %d is %s \"%s\" with %d ops, expected %s \"%s\" with %d", i, stof_seg_kind_name(s.kind),
             s.template_name, s.nop, stof_seg_kind_name(kind), tmpl, nop);
}

/* The number of segments of kind whose template is tmpl (NULL: any). */
static int count_segs(const stof_plan *p, stof_seg_kind kind, const char *tmpl) {
  int n = 0;
  for (int i = 0; i < stof_plan_nsegment(p); i++) {
    stof_seg_info s = seg(p, i);
    if (s.kind == kind && (!tmpl || !strcmp(s.template_name, tmpl))) n++;
  }
  return n;
}

/* ---------------------------------------------------------------- fusion */

/* out = layer_norm(relu(x @ w + b)), x [8, 16], w [16, 32], float32: two segments. */
static const stof_op *gemm_relu_ln(stof_graph *g) {
  const stof_op *x = tu_ph(g, "x", STOF_DTYPE_F32, 2, TU_SHAPE(8, 16));
  const stof_op *w = tu_ph(g, "w", STOF_DTYPE_F32, 2, TU_SHAPE(16, 32));
  const stof_op *b = tu_ph(g, "b", STOF_DTYPE_F32, 1, TU_SHAPE(32));
  const stof_op *y = act(g, "fc.relu", ACT_RELU, bias_add(g, "fc.bias", gemm(g, "fc", x, w, 0), b));
  const stof_op *gamma = tu_ph(g, "gamma", STOF_DTYPE_F32, 1, TU_SHAPE(32));
  const stof_op *beta = tu_ph(g, "beta", STOF_DTYPE_F32, 1, TU_SHAPE(32));
  const stof_op *out = layer_norm(g, "ln", y, gamma, beta);
  return out;
}

static void gemm_bias_relu_then_layer_norm(void **state) {
  (void)state;
  fx f;
  fx_new(&f);
  stof_graph *g = f.g;
  const stof_op *out = gemm_relu_ln(g);
  stof_plan *p = plan_run_check(g, 1, &out, 1);
  assert_int_equal(stof_plan_nsegment(p), 2);
  assert_seg(p, 0, STOF_SEG_GEMM, "gemm+bias+relu", 3);
  assert_seg(p, 1, STOF_SEG_GENERIC, "layer_norm", 3);
  stof_seg_info s0 = seg(p, 0), s1 = seg(p, 1);
  assert_string_equal(s0.first->name, "fc");
  assert_string_equal(s0.last->name, "fc.relu");
  assert_non_null(strstr(s0.detail, "epilogue relu_bias"));
  assert_non_null(strstr(s0.detail, "M 8, N 32, K 16"));
  assert_int_equal(s0.shared_with, -1);
  assert_string_equal(s1.first->name, "ln.mean");
  assert_string_equal(s1.last->name, "ln");
  /* one code per op that runs, in id order: fc, fc.bias, fc.relu, ln.mean, ln.var, ln */
  assert_string_equal(stof_plan_scheme(p), "0 0 0 1 1 1");
  assert_int_equal(stof_plan_ninput(p), 5);
  assert_int_equal(stof_plan_noutput(p), 1);
  char *d = NULL;
  TU_OK(f.ctx, stof_plan_describe(p, &d));
  assert_non_null(strstr(d, "plan for c: 2 segments"));
  assert_non_null(strstr(d, "gemm+bias+relu"));
  assert_non_null(strstr(d, "layer_norm"));
  stof_ctx_dealloc(f.ctx, d, strlen(d) + 1);
  stof_plan_free(p);
  /* without the vendor GEMM: everything generated, the same numbers */
  p = plan_run_check_opts(g, 1, &out, 2, (stof_plan_opts){.no_vendor_gemm = 1});
  assert_int_equal(count_segs(p, STOF_SEG_GEMM, NULL), 0);
  assert_int_equal(stof_plan_nsegment(p), count_segs(p, STOF_SEG_GENERIC, NULL));
  stof_plan_free(p);
  fx_free(&f);
}

static void gemm_weight_layouts(void **state) {
  (void)state;
  const stof_dtype dts[2] = {STOF_DTYPE_F32, STOF_DTYPE_F16};
  for (int di = 0; di < 2; di++)
    for (int trans = 0; trans < 2; trans++) {
      fx f;
      fx_new(&f);
      stof_graph *g = f.g;
      stof_dtype dt = dts[di];
      const stof_op *x = tu_ph(g, "x", dt, 3, TU_SHAPE(2, 3, 16));
      const stof_op *w = trans ? tu_ph(g, "w", dt, 2, TU_SHAPE(24, 16)) : tu_ph(g, "w", dt, 2, TU_SHAPE(16, 24));
      const stof_op *b = tu_ph(g, "b", dt, 1, TU_SHAPE(24));
      /* bias and an activation as stof.nn builds them (float32 inside, stored in dt) */
      act_kind a = trans ? ACT_GELU_TANH : ACT_RELU;
      const stof_op *outs[2] = {act(g, "fc.act", a, bias_add(g, "fc.bias", gemm(g, "fc", x, w, trans), b)), NULL};
      /* and the bare GEMM of the same operands, as a second output */
      outs[1] = gemm(g, "fc2", x, w, trans);
      stof_plan *p = plan_run_check(g, 2, outs, 10 + (uint64_t)(2 * di + trans));
      assert_int_equal(stof_plan_nsegment(p), 2);
      assert_seg(p, 0, STOF_SEG_GEMM, trans ? "gemm+bias+gelu_tanh" : "gemm+bias+relu", 3);
      assert_seg(p, 1, STOF_SEG_GEMM, "gemm", 1);
      stof_seg_info s = seg(p, 0);
      assert_non_null(strstr(s.detail, "M 6, N 24, K 16"));
      assert_non_null(strstr(s.detail, trans ? "w [N, K]" : "w [K, N]"));
      assert_non_null(strstr(s.detail, stof_dtype_name(dt)));
      stof_plan_free(p);
      fx_free(&f);
    }
}

/* A GEMM-shaped body that reads only part of its operands (a slice of w, a prefix of x's
 * last axis, part of x's rows) is not a dense GEMM of the operands' storage: it runs as
 * generated code, right. */
static void gemm_over_part_of_operands_is_generated(void **state) {
  (void)state;
  for (int c = 0; c < 3; c++) {
    fx f;
    fx_new(&f);
    stof_graph *g = f.g;
    const stof_op *x = c == 2 ? tu_ph(g, "x", STOF_DTYPE_F32, 3, TU_SHAPE(2, 5, 16))
                              : tu_ph(g, "x", STOF_DTYPE_F32, 2, TU_SHAPE(6, c == 1 ? 20 : 16));
    const stof_op *w = tu_ph(g, "w", STOF_DTYPE_F32, 2, c == 0 ? TU_SHAPE(16, 28) : TU_SHAPE(16, 24));
    int nd = x->ndim;
    int64_t shape[3] = {2, 3, 24};
    if (nd == 2) shape[0] = 6, shape[1] = 24;
    const stof_expr *axes[3];
    tu_axes(g, nd, shape, axes);
    const stof_expr *k = tu_raxis(g, 16, "k");
    const stof_expr *body = tu_reduce(
        g, STOF_REDUCE_SUM, tu_bin(g, STOF_EXPR_MUL, load_rows(g, x, axes, k), tu_load(g, w, 2, k, axes[nd - 1])), 1, k);
    const stof_op *y = compute_as(g, "part", nd, axes, body, -1, "gemm");
    stof_plan *p = plan_run_check(g, 1, &y, 20 + (uint64_t)c);
    if (count_segs(p, STOF_SEG_GEMM, NULL) != 0) fail_msg("case %d: a GEMM over part of its operands ran as a dense GEMM", c);
    stof_plan_free(p);
    fx_free(&f);
  }
}

static void residual_epilogue(void **state) {
  (void)state;
  /* absorbed: r is an input */
  {
    fx f;
    fx_new(&f);
    stof_graph *g = f.g;
    const stof_op *x = tu_ph(g, "x", STOF_DTYPE_F32, 2, TU_SHAPE(6, 16));
    const stof_op *w = tu_ph(g, "w", STOF_DTYPE_F32, 2, TU_SHAPE(16, 16));
    const stof_op *b = tu_ph(g, "b", STOF_DTYPE_F32, 1, TU_SHAPE(16));
    const stof_op *r = tu_ph(g, "r", STOF_DTYPE_F32, 2, TU_SHAPE(6, 16));
    const stof_op *y = residual_add(g, "res", bias_add(g, "fc.bias", gemm(g, "fc", x, w, 0), b), r);
    stof_plan *p = plan_run_check(g, 1, &y, 30);
    assert_int_equal(stof_plan_nsegment(p), 1);
    assert_seg(p, 0, STOF_SEG_GEMM, "gemm+bias+residual", 3);
    assert_non_null(strstr(seg(p, 0).detail, "+ residual"));
    stof_plan_free(p);
    fx_free(&f);
  }
  /* the residual is produced after the GEMM (a later id): a generated segment adds it */
  {
    fx f;
    fx_new(&f);
    stof_graph *g = f.g;
    const stof_op *x = tu_ph(g, "x", STOF_DTYPE_F32, 2, TU_SHAPE(6, 16));
    const stof_op *w = tu_ph(g, "w", STOF_DTYPE_F32, 2, TU_SHAPE(16, 16));
    const stof_op *b = tu_ph(g, "b", STOF_DTYPE_F32, 1, TU_SHAPE(16));
    const stof_op *r = tu_ph(g, "r", STOF_DTYPE_F32, 2, TU_SHAPE(6, 16));
    const stof_op *yb = bias_add(g, "fc.bias", gemm(g, "fc", x, w, 0), b);
    const stof_op *r2 = elem_op(g, "r2", STOF_EXPR_MUL, r, r, NULL);
    const stof_op *y = residual_add(g, "res", yb, r2);
    stof_plan *p = plan_run_check(g, 1, &y, 31);
    assert_int_equal(stof_plan_nsegment(p), 2);
    assert_seg(p, 0, STOF_SEG_GEMM, "gemm+bias", 2);
    assert_seg(p, 1, STOF_SEG_GENERIC, "residual_add", 2);
    stof_plan_free(p);
    fx_free(&f);
  }
  /* the GEMM's output has two readers: nothing is absorbed */
  {
    fx f;
    fx_new(&f);
    stof_graph *g = f.g;
    const stof_op *x = tu_ph(g, "x", STOF_DTYPE_F32, 2, TU_SHAPE(6, 16));
    const stof_op *w = tu_ph(g, "w", STOF_DTYPE_F32, 2, TU_SHAPE(16, 16));
    const stof_op *r = tu_ph(g, "r", STOF_DTYPE_F32, 2, TU_SHAPE(6, 16));
    const stof_op *y = gemm(g, "fc", x, w, 0);
    const stof_op *a = residual_add(g, "res", y, r);
    const stof_op *twice = elem_op(g, "twice", STOF_EXPR_ADD, y, y, NULL);
    const stof_op *out = elem_op(g, "out", STOF_EXPR_MUL, a, twice, NULL);
    stof_plan *p = plan_run_check(g, 1, &out, 32);
    assert_seg(p, 0, STOF_SEG_GEMM, "gemm", 1);
    assert_int_equal(count_segs(p, STOF_SEG_GEMM, NULL), 1);
    stof_plan_free(p);
    fx_free(&f);
  }
}

/* Ops tagged as epilogues whose bodies are something else run as generated code. */
static void wrong_tag_is_not_trusted(void **state) {
  (void)state;
  for (int c = 0; c < 6; c++) {
    fx f;
    fx_new(&f);
    stof_graph *g = f.g;
    const stof_op *x = tu_ph(g, "x", STOF_DTYPE_F32, 2, TU_SHAPE(8, 16));
    const stof_op *w = tu_ph(g, "w", STOF_DTYPE_F32, 2, TU_SHAPE(16, 8));
    const stof_op *b = tu_ph(g, "b", STOF_DTYPE_F32, 1, TU_SHAPE(8));
    const stof_op *r = tu_ph(g, "r", STOF_DTYPE_F32, 2, TU_SHAPE(8, 8));
    const stof_op *y = gemm(g, "fc", x, w, 0), *out = NULL;
    const stof_expr *axes[2];
    switch (c) {
    case 0: /* "bias_add" that multiplies */
      out = vec_op(g, "fake_bias", STOF_EXPR_MUL, y, b, "bias_add");
      break;
    case 1: /* "bias_add" reading the bias along the rows (M = N, so the shapes agree) */
      tu_axes(g, 2, y->shape, axes);
      out = compute_as(g, "row_bias", 2, axes,
                       tu_bin(g, STOF_EXPR_ADD, load_all(g, y, axes), tu_load(g, b, 1, axes[0])), -1, "bias_add");
      break;
    case 2: /* "residual_add" that subtracts */
      out = elem_op(g, "fake_res", STOF_EXPR_SUB, y, r, "residual_add");
      break;
    case 3: /* "residual_add" reading the residual transposed */
      tu_axes(g, 2, y->shape, axes);
      out = compute_as(g, "res_t", 2, axes,
                       tu_bin(g, STOF_EXPR_ADD, load_all(g, y, axes), tu_load(g, r, 2, axes[1], axes[0])), -1,
                       "residual_add");
      break;
    case 4: /* "relu" that is exp */
      tu_axes(g, 2, y->shape, axes);
      out = compute_as(g, "fake_relu", 2, axes, tu_un(g, STOF_EXPR_EXP, load_all(g, y, axes)), -1, "relu");
      break;
    default: /* "gelu_tanh" that is the erf GELU */
      out = act_tagged(g, "erf_as_tanh", ACT_GELU_ERF, y, "gelu_tanh");
      break;
    }
    stof_plan *p = plan_run_check(g, 1, &out, 40 + (uint64_t)c);
    stof_seg_info s = seg(p, 0);
    if (s.kind != STOF_SEG_GEMM || strcmp(s.template_name, "gemm") || s.nop != 1)
      fail_msg("case %d (%s): the GEMM segment is \"%s\" with %d ops: the wrong tag was trusted", c, out->name,
               s.template_name, s.nop);
    assert_int_equal(stof_plan_nsegment(p), 2);
    assert_int_equal(seg(p, 1).kind, STOF_SEG_GENERIC);
    stof_plan_free(p);
    fx_free(&f);
  }
}

/* The erf GELU is not the epilogue's tanh form: on the CPU it stays a generated op, exact. */
static void erf_gelu_stays_exact_on_cpu(void **state) {
  (void)state;
  fx f;
  fx_new(&f);
  stof_graph *g = f.g;
  const stof_op *x = tu_ph(g, "x", STOF_DTYPE_F32, 2, TU_SHAPE(16, 32));
  const stof_op *w = tu_ph(g, "w", STOF_DTYPE_F32, 2, TU_SHAPE(32, 32));
  const stof_op *b = tu_ph(g, "b", STOF_DTYPE_F32, 1, TU_SHAPE(32));
  /* scaled up so the two GELU forms differ well above 1e-5 */
  const stof_op *y = act(g, "fc.gelu", ACT_GELU_ERF, bias_add(g, "fc.bias", gemm(g, "fc", x, w, 0), b));
  stof_plan *p = plan_run_check(g, 1, &y, 50);
  assert_int_equal(stof_plan_nsegment(p), 2);
  assert_seg(p, 0, STOF_SEG_GEMM, "gemm+bias", 2);
  assert_seg(p, 1, STOF_SEG_GENERIC, "gelu", 1);
  stof_plan_free(p);
  /* the same with the tanh form: absorbed */
  const stof_op *yt = act(g, "fc.gelu_tanh", ACT_GELU_TANH, bias_add(g, "fc.bias2", gemm(g, "fc2", x, w, 0), b));
  p = plan_run_check(g, 1, &yt, 51);
  assert_int_equal(stof_plan_nsegment(p), 1);
  assert_seg(p, 0, STOF_SEG_GEMM, "gemm+bias+gelu_tanh", 3);
  assert_non_null(strstr(seg(p, 0).detail, "epilogue gelu_bias"));
  stof_plan_free(p);
  fx_free(&f);
}

/* ---------------------------------------------------------------- attention */

/* out[b, h, s, d] = y[b, s, off + h * D + d] */
static const stof_op *split_heads(stof_graph *g, const char *name, const stof_op *y, int64_t H, int64_t D, int64_t off) {
  int64_t B = y->shape[0], S = y->shape[1];
  const stof_expr *ax[4];
  tu_axes(g, 4, TU_SHAPE(B, H, S, D), ax);
  const stof_expr *col = tu_bin(g, STOF_EXPR_ADD, tu_bin(g, STOF_EXPR_ADD, tu_int(g, off), tu_bin(g, STOF_EXPR_MUL, ax[1], tu_int(g, D))), ax[3]);
  return compute_as(g, name, 4, ax, tu_load(g, y, 3, ax[0], ax[2], col), -1, NULL);
}

static void attention_in_a_graph(void **state) {
  (void)state;
  fx f;
  fx_new(&f);
  stof_graph *g = f.g;
  stof_mask *causal = NULL, *bigbird = NULL;
  TU_OK(f.ctx, stof_mask_causal(f.ctx, &causal));
  TU_OK(f.ctx, stof_mask_bigbird(f.ctx, 2, 1, 4, 0.3, 0, &bigbird));
  int64_t B = 2, S = 64, H = 2, D = 16, E = 32;
  const stof_op *x = tu_ph(g, "x", STOF_DTYPE_F32, 3, TU_SHAPE(B, S, E));
  const stof_op *w = tu_ph(g, "w", STOF_DTYPE_F32, 2, TU_SHAPE(E, 3 * H * D));
  const stof_op *y = gemm(g, "qkv", x, w, 0);
  const stof_op *q = split_heads(g, "q", y, H, D, 0);
  const stof_op *k = split_heads(g, "k", y, H, D, H * D);
  const stof_op *v = split_heads(g, "v", y, H, D, 2 * H * D);
  const stof_op *a1 = NULL, *a2 = NULL, *a3 = NULL;
  TU_OK(f.ctx, stof_attention_op(g, q, k, v, causal, 0, &a1));
  TU_OK(f.ctx, stof_attention_op(g, k, q, v, causal, 0, &a2)); /* same shapes, mask and scale */
  TU_OK(f.ctx, stof_attention_op(g, q, k, v, bigbird, 0, &a3));
  /* merged heads: out[b, s, h * D + d] = a1 + a2 + a3 */
  const stof_expr *ax[3];
  tu_axes(g, 3, TU_SHAPE(B, S, H * D), ax);
  const stof_expr *h = tu_bin(g, STOF_EXPR_FLOORDIV, ax[2], tu_int(g, D)), *d = tu_bin(g, STOF_EXPR_MOD, ax[2], tu_int(g, D));
  const stof_expr *sum = tu_bin(g, STOF_EXPR_ADD,
                                tu_bin(g, STOF_EXPR_ADD, tu_load(g, a1, 4, ax[0], h, ax[1], d), tu_load(g, a2, 4, ax[0], h, ax[1], d)),
                                tu_load(g, a3, 4, ax[0], h, ax[1], d));
  const stof_op *out = compute_as(g, "merge", 3, ax, sum, -1, NULL);
  const stof_op *outs[2] = {out, a3};
  stof_plan *p = plan_run_check(g, 2, outs, 60);
  assert_seg(p, 0, STOF_SEG_GEMM, "gemm", 1);
  int idx[3], n = 0;
  for (int i = 0; i < stof_plan_nsegment(p); i++)
    if (seg(p, i).kind == STOF_SEG_INTRIN) {
      assert_true(n < 3);
      idx[n++] = i;
      assert_string_equal(seg(p, i).template_name, "attention");
      assert_int_equal(seg(p, i).nop, 1);
    }
  assert_int_equal(n, 3);
  assert_int_equal(seg(p, idx[0]).shared_with, -1);
  assert_int_equal(seg(p, idx[1]).shared_with, idx[0]); /* same intrinsic, shapes, mask */
  assert_int_equal(seg(p, idx[2]).shared_with, -1);     /* another mask */
  stof_seg_info last = seg(p, stof_plan_nsegment(p) - 1);
  assert_int_equal(last.kind, STOF_SEG_GENERIC);
  assert_string_equal(last.last->name, "merge");
  stof_plan_free(p);
  stof_graph_free(g);
  f.g = NULL;
  stof_mask_free(causal);
  stof_mask_free(bigbird);
  tu_ctx_free(f.ctx, &f.heap);
}

/* ---------------------------------------------------------------- layers */

/* One MLP layer: ln(gelu_tanh(x w1 + b1) w2 + b2 + x); placeholders named with the layer. */
static const stof_op *mlp_layer(stof_graph *g, int l, const stof_op *x, int64_t E, int64_t F, const stof_op **hidden) {
  char n[8][32];
  const char *what[8] = {"w1", "b1", "w2", "b2", "gamma", "beta", "fc1", "fc2"};
  for (int i = 0; i < 8; i++) snprintf(n[i], sizeof n[i], "l%d.%s", l, what[i]);
  const stof_op *w1 = tu_ph(g, n[0], STOF_DTYPE_F32, 2, TU_SHAPE(E, F));
  const stof_op *b1 = tu_ph(g, n[1], STOF_DTYPE_F32, 1, TU_SHAPE(F));
  const stof_op *w2 = tu_ph(g, n[2], STOF_DTYPE_F32, 2, TU_SHAPE(F, E));
  const stof_op *b2 = tu_ph(g, n[3], STOF_DTYPE_F32, 1, TU_SHAPE(E));
  const stof_op *gamma = tu_ph(g, n[4], STOF_DTYPE_F32, 1, TU_SHAPE(E));
  const stof_op *beta = tu_ph(g, n[5], STOF_DTYPE_F32, 1, TU_SHAPE(E));
  char nb[48], na[48], nr[32], nl[32];
  snprintf(nb, sizeof nb, "%s.bias", n[6]);
  snprintf(na, sizeof na, "%s.gelu", n[6]);
  const stof_op *h = act(g, na, ACT_GELU_TANH, bias_add(g, nb, gemm(g, n[6], x, w1, 0), b1));
  if (hidden) *hidden = h;
  snprintf(nb, sizeof nb, "%s.bias", n[7]);
  snprintf(nr, sizeof nr, "l%d.res", l);
  snprintf(nl, sizeof nl, "l%d.ln", l);
  const stof_op *y = residual_add(g, nr, bias_add(g, nb, gemm(g, n[7], h, w2, 0), b2), x);
  return layer_norm(g, nl, y, gamma, beta);
}

static void identical_layers_share(void **state) {
  (void)state;
  fx f;
  fx_new(&f);
  stof_graph *g = f.g;
  const stof_op *x = tu_ph(g, "x", STOF_DTYPE_F32, 2, TU_SHAPE(8, 16));
  for (int l = 0; l < 3; l++) x = mlp_layer(g, l, x, 16, 32, NULL);
  stof_plan *p = plan_run_check(g, 1, &x, 70);
  assert_int_equal(stof_plan_nsegment(p), 9);
  for (int l = 0; l < 3; l++) {
    assert_seg(p, 3 * l, STOF_SEG_GEMM, "gemm+bias+gelu_tanh", 3);
    assert_seg(p, 3 * l + 1, STOF_SEG_GEMM, "gemm+bias+residual", 3);
    assert_seg(p, 3 * l + 2, STOF_SEG_GENERIC, "layer_norm", 3);
    for (int k = 0; k < 3; k++) {
      int sw = seg(p, 3 * l + k).shared_with;
      if (sw != (l ? k : -1)) fail_msg("layer %d, segment %d: shared_with %d, expected %d", l, 3 * l + k, sw, l ? k : -1);
    }
  }
  assert_string_equal(stof_plan_scheme(p), "0 0 0 1 1 1 2 2 2 3 3 3 4 4 4 5 5 5 6 6 6 7 7 7 8 8 8");
  char *d = NULL;
  TU_OK(f.ctx, stof_plan_describe(p, &d));
  assert_non_null(strstr(d, "(as segment 0)"));
  stof_ctx_dealloc(f.ctx, d, strlen(d) + 1);
  stof_plan_free(p);
  fx_free(&f);
}

static void memory_is_shared(void **state) {
  (void)state;
  fx f;
  fx_new(&f);
  stof_graph *g = f.g;
  const stof_op *x = tu_ph(g, "x", STOF_DTYPE_F32, 2, TU_SHAPE(32, 32));
  const stof_op *h1 = NULL, *h2 = NULL;
  const stof_op *l1 = mlp_layer(g, 1, x, 32, 128, &h1);
  const stof_op *l2 = mlp_layer(g, 2, l1, 32, 128, &h2);
  const stof_op *outs[4] = {l2, h1, l1, h2};
  stof_plan *p = plan_c(g, 4, outs);
  stof_plan_memory m;
  stof_plan_memory_get(p, &m);
  if (!(m.arena < m.values)) fail_msg("arena %zu bytes, values %zu: nothing shared", m.arena, m.values);
  /* the outputs alone need this much */
  size_t outb = 0;
  for (int i = 0; i < 4; i++) outb += (size_t)stof_shape_numel(outs[i]->ndim, outs[i]->shape) * 4;
  assert_true(m.arena >= outb);
  assert_int_equal(m.workspace, 0);
  assert_int_equal(m.owned_inputs, 0);
  feed fd;
  feed_rand(f.ctx, p, &fd, 80);
  run_and_check(f.ctx, g, p, 4, outs, &fd);
  /* outputs never overlap each other */
  uintptr_t lo[4], hi[4];
  for (int i = 0; i < 4; i++) {
    stof_tensor *t = NULL;
    TU_OK(f.ctx, stof_plan_output_view(p, i, &t));
    assert_int_equal(t->device, STOF_DEVICE_CPU);
    lo[i] = (uintptr_t)t->data;
    hi[i] = lo[i] + (size_t)stof_tensor_numel(t) * 4;
    assert_int_equal(lo[i] % 16, 0);
    stof_tensor_free(t);
  }
  for (int i = 0; i < 4; i++)
    for (int j = i + 1; j < 4; j++)
      if (lo[i] < hi[j] && lo[j] < hi[i]) fail_msg("outputs %d and %d overlap", i, j);
  /* a second run on the same plan, new values: still right */
  feed_free(&fd);
  feed_rand(f.ctx, p, &fd, 81);
  run_and_check(f.ctx, g, p, 4, outs, &fd);
  feed_free(&fd);
  stof_plan_free(p);
  fx_free(&f);
}

/* ---------------------------------------------------------------- binding and errors */

static void bind_and_argument_errors(void **state) {
  (void)state;
  fx f;
  fx_new(&f);
  stof_graph *g = f.g;
  stof_ctx *ctx = f.ctx;
  const stof_op *x = tu_ph(g, "x", STOF_DTYPE_F32, 2, TU_SHAPE(4, 16));
  const stof_op *w = tu_ph(g, "w", STOF_DTYPE_F32, 2, TU_SHAPE(16, 8));
  const stof_op *unused = tu_ph(g, "unused", STOF_DTYPE_F32, 1, TU_SHAPE(3));
  const stof_op *y = gemm(g, "fc", x, w, 0);
  stof_plan *p = plan_c(g, 1, &y);
  stof_tensor *tx = NULL, *tw = NULL, *t16 = NULL, *tshape = NULL, *tu = NULL, *out = NULL;
  TU_OK(ctx, stof_tensor_rand(ctx, STOF_DTYPE_F32, 2, TU_SHAPE(4, 16), 1, &tx));
  TU_OK(ctx, stof_tensor_rand(ctx, STOF_DTYPE_F32, 2, TU_SHAPE(16, 8), 2, &tw));
  TU_OK(ctx, stof_tensor_rand(ctx, STOF_DTYPE_F16, 2, TU_SHAPE(4, 16), 3, &t16));
  TU_OK(ctx, stof_tensor_rand(ctx, STOF_DTYPE_F32, 2, TU_SHAPE(4, 15), 4, &tshape));
  TU_OK(ctx, stof_tensor_rand(ctx, STOF_DTYPE_F32, 1, TU_SHAPE(3), 5, &tu));
  /* nothing ran yet */
  TU_ERR(ctx, stof_plan_output(p, 0, &out), STOF_ERR_ARG, "has not run yet");
  assert_null(out);
  TU_ERR(ctx, stof_plan_output_view(p, 0, &out), STOF_ERR_ARG, "has not run yet");
  /* unbound inputs, named */
  TU_ERR(ctx, stof_plan_run(p), STOF_ERR_ARG, "input x is not bound");
  TU_OK(ctx, stof_plan_bind(p, x, tx));
  TU_ERR(ctx, stof_plan_run(p), STOF_ERR_ARG, "input w is not bound");
  double ms = -1;
  TU_ERR(ctx, stof_plan_time(p, 3, 1, &ms), STOF_ERR_ARG, "input w is not bound");
  /* wrong dtype, wrong shape (both shapes in the message) */
  TU_ERR(ctx, stof_plan_bind(p, x, t16), STOF_ERR_TYPE, "bind x: the tensor is float16, the placeholder float32");
  TU_ERR(ctx, stof_plan_bind(p, x, tshape), STOF_ERR_SHAPE, "[4, 15]");
  TU_OK(ctx, stof_plan_bind(p, x, tx));
  TU_ERR(ctx, stof_plan_bind(p, x, tshape), STOF_ERR_SHAPE, "[4, 16]");
  TU_ERR(ctx, stof_plan_bind(p, x, NULL), STOF_ERR_ARG, "missing tensor");
  /* a placeholder of another graph (the same id), an op that is not a placeholder, one the
   * plan does not read */
  stof_graph *g2 = NULL;
  TU_OK(ctx, stof_graph_new(ctx, &g2));
  const stof_op *x2 = tu_ph(g2, "x", STOF_DTYPE_F32, 2, TU_SHAPE(4, 16));
  assert_int_equal(x2->id, x->id);
  TU_ERR(ctx, stof_plan_bind(p, x2, tx), STOF_ERR_ARG, "not a placeholder of the plan's graph");
  TU_ERR(ctx, stof_plan_bind(p, y, tx), STOF_ERR_ARG, "placeholder");
  TU_ERR(ctx, stof_plan_bind(p, NULL, tx), STOF_ERR_ARG, "placeholder");
  TU_ERR(ctx, stof_plan_bind(p, unused, tu), STOF_ERR_ARG, "does not read unused");
  stof_graph_free(g2);
  /* segments and outputs out of range */
  stof_seg_info si;
  TU_ERR(ctx, stof_plan_segment(p, 1, &si), STOF_ERR_ARG, "index 1 out of range");
  TU_ERR(ctx, stof_plan_segment(p, -1, &si), STOF_ERR_ARG, "index -1 out of range");
  TU_OK(ctx, stof_plan_bind(p, w, tw));
  TU_OK(ctx, stof_plan_run(p));
  TU_ERR(ctx, stof_plan_output(p, 1, &out), STOF_ERR_ARG, "index 1 out of range (the plan has 1)");
  TU_ERR(ctx, stof_plan_output(p, -1, &out), STOF_ERR_ARG, "index -1 out of range");
  assert_null(out);
  TU_ERR(ctx, stof_plan_time(p, 0, 1, &ms), STOF_ERR_ARG, "reps = 0");
  TU_OK(ctx, stof_plan_time(p, 3, 1, &ms));
  assert_true(ms > 0);
  double seg_ms[1] = {-1};
  TU_OK(ctx, stof_plan_time_segments(p, 2, seg_ms));
  assert_true(seg_ms[0] >= 0);
  TU_OK(ctx, stof_plan_output(p, 0, &out));
  stof_tensor_free(out);
  stof_plan_free(p);
  /* plan-time errors: no outputs, a target that does not exist, CUDA without a GPU */
  stof_plan_opts o = {.target = "tpu"};
  p = (stof_plan *)&o; /* must be reset to NULL on error */
  TU_ERR(ctx, stof_plan_new(g, 1, &y, &o, &p), STOF_ERR_ARG, "target \"tpu\"");
  assert_null(p);
  o.target = "c";
  TU_ERR(ctx, stof_plan_new(g, 0, &y, &o, &p), STOF_ERR_ARG, "no outputs");
  if (stof_cuda_init(ctx) != STOF_OK) {
    stof_ctx_clear_error(ctx);
    o.target = "cuda";
    stof_status st = stof_plan_new(g, 1, &y, &o, &p);
    assert_int_equal(st, STOF_ERR_NO_DEVICE);
    assert_null(p);
    stof_ctx_clear_error(ctx);
    /* no target named: the CPU */
    TU_OK(ctx, stof_plan_new(g, 1, &y, NULL, &p));
    assert_string_equal(stof_plan_target(p), "c");
    stof_plan_free(p);
  } else {
    stof_ctx_clear_error(ctx);
  }
  stof_tensor_free(tx);
  stof_tensor_free(tw);
  stof_tensor_free(t16);
  stof_tensor_free(tshape);
  stof_tensor_free(tu);
  fx_free(&f);
}

static stof_status twice_cpu(stof_ctx *ctx, int n, const stof_tensor *const *in, stof_tensor *out, void *ud) {
  (void)ctx, (void)n, (void)ud;
  for (int64_t i = 0; i < stof_tensor_numel(out); i++) stof_tensor_store(out, i, 2 * stof_tensor_load(in[0], i));
  return STOF_OK;
}

/* A run segment by segment that stops launching past its wall-clock limit (the search's
 * first run of a candidate): past the limit at once, the layer norm (the second segment,
 * which writes the output) never runs (the poisoned output stays NaN) and it says so; with room, every segment runs and the output
 * is the interpreter's; a limit that is not positive is refused. */
static void bounded_run_stops_past_its_limit(void **state) {
  (void)state;
  fx f;
  fx_new(&f);
  stof_graph *g = f.g;
  const stof_op *out = gemm_relu_ln(g);
  stof_plan *p = plan_run_check(g, 1, &out, 3); /* ran once: its output can be read */
  assert_int_equal(stof_plan_nsegment(p), 2);
  feed fd = {0};
  feed_rand(f.ctx, p, &fd, 4); /* bound to tensors this test holds */
  stof_tensor *want = NULL;
  TU_OK(f.ctx, stof_interp_eval(g, 1, &out, fd.n, fd.op, (const stof_tensor *const *)fd.t, &want));
  double ms = -1;
  int complete = -1;
  TU_ERR(f.ctx, stof_plan_run_bounded(p, 0, &ms, &complete), STOF_ERR_ARG, "limit 0 ms");
  TU_OK(f.ctx, stof_plan_poison(p));
  TU_OK(f.ctx, stof_plan_run_bounded(p, 1e-12, &ms, &complete));
  assert_int_equal(complete, 0);
  assert_true(ms >= 0);
  stof_tensor *got = NULL;
  TU_OK(f.ctx, stof_plan_output(p, 0, &got));
  for (int64_t i = 0; i < stof_tensor_numel(got); i++) assert_true(isnan(stof_tensor_load(got, i)));
  stof_tensor_free(got);
  TU_OK(f.ctx, stof_plan_run_bounded(p, 1e9, &ms, &complete));
  assert_int_equal(complete, 1);
  TU_OK(f.ctx, stof_plan_output(p, 0, &got));
  double e = INFINITY;
  TU_OK(f.ctx, stof_tensor_rel_l2(got, want, &e));
  assert_true(e < 1e-5);
  stof_tensor_free(got);
  stof_tensor_free(want);
  feed_free(&fd);
  stof_plan_free(p);
  fx_free(&f);
}

/* GPU only (else it says so and passes): the cuBLASLt algorithm measured for a GEMM by the
 * first plan is the one every later plan of the process takes for the same description
 * (its detail says so), so two builds of one configuration are one plan. */
static void gemm_algorithm_is_kept_for_the_process(void **state) {
  (void)state;
  fx f;
  fx_new(&f);
  if (stof_cuda_init(f.ctx) != STOF_OK) {
    stof_ctx_clear_error(f.ctx);
    print_message("no GPU: the algorithm memo is not exercised\n");
    fx_free(&f);
    return;
  }
  const stof_op *x = tu_ph(f.g, "x", STOF_DTYPE_F16, 2, TU_SHAPE(1024, 768));
  const stof_op *w = tu_ph(f.g, "w", STOF_DTYPE_F16, 2, TU_SHAPE(3072, 768));
  const stof_op *y = gemm(f.g, "fc", x, w, 1);
  stof_plan_opts o = {.target = "cuda"};
  int64_t algo[2] = {-1, -1};
  const char *detail[2] = {NULL, NULL};
  stof_plan *p[2];
  for (int k = 0; k < 2; k++) {
    TU_OK(f.ctx, stof_plan_new(f.g, 1, &y, &o, &p[k]));
    stof_seg_info si = seg(p[k], 0);
    assert_int_equal(si.kind, STOF_SEG_GEMM);
    for (int i = 0; i < si.nknob; i++)
      if (!strcmp(si.knob_name[i], "algo")) algo[k] = si.knob_value[i];
    detail[k] = si.detail;
  }
  assert_true(algo[0] >= 0);
  assert_int_equal(algo[0], algo[1]);
  if (strstr(detail[0], "measured")) assert_non_null(strstr(detail[1], "by an earlier plan of this process"));
  for (int k = 0; k < 2; k++) stof_plan_free(p[k]);
  fx_free(&f);
}

static void extern_without_intrinsic_is_refused(void **state) {
  (void)state;
  fx f;
  fx_new(&f);
  stof_graph *g = f.g;
  const stof_op *x = tu_ph(g, "x", STOF_DTYPE_F32, 1, TU_SHAPE(8));
  const stof_op *e = NULL;
  TU_OK(f.ctx, stof_te_extern(g, "my_twice", 1, &x, 1, TU_SHAPE(8), STOF_DTYPE_F32, twice_cpu, NULL, NULL, 0, &e));
  const stof_op *y = elem_op(g, "y", STOF_EXPR_ADD, e, x, NULL);
  stof_plan *p = NULL;
  stof_plan_opts o = {.target = "c"};
  TU_ERR(f.ctx, stof_plan_new(g, 1, &y, &o, &p), STOF_ERR_UNSUPPORTED, "extern op my_twice");
  assert_null(p);
  /* an unknown intrinsic name is named too */
  TU_OK(f.ctx, stof_te_set_intrin(g, e, "no_such_intrinsic", NULL));
  TU_ERR(f.ctx, stof_plan_new(g, 1, &y, &o, &p), STOF_ERR_UNSUPPORTED, "no_such_intrinsic");
  fx_free(&f);
}

/* A CPU input is borrowed: a new tensor bound between runs, or the bound tensor changed in
 * place, gives new results; a strided tensor is copied into storage the plan owns. */
static void rebinding_cpu_input_gives_new_results(void **state) {
  (void)state;
  fx f;
  fx_new(&f);
  stof_graph *g = f.g;
  stof_ctx *ctx = f.ctx;
  const stof_op *x = tu_ph(g, "x", STOF_DTYPE_F32, 2, TU_SHAPE(4, 16));
  const stof_op *w = tu_ph(g, "w", STOF_DTYPE_F32, 2, TU_SHAPE(16, 8));
  const stof_op *b = tu_ph(g, "b", STOF_DTYPE_F32, 1, TU_SHAPE(8));
  const stof_op *y = act(g, "relu", ACT_RELU, bias_add(g, "fc.bias", gemm(g, "fc", x, w, 0), b));
  const stof_op *z = elem_op(g, "z", STOF_EXPR_MUL, y, y, NULL);
  const stof_op *outs[2] = {y, z};
  stof_plan *p = plan_c(g, 2, outs);
  feed fd;
  feed_rand(ctx, p, &fd, 90);
  run_and_check(ctx, g, p, 2, outs, &fd);
  stof_tensor *first = NULL, *second = NULL;
  TU_OK(ctx, stof_plan_output(p, 1, &first));
  /* another tensor for x */
  assert_ptr_equal(fd.op[0], x);
  stof_tensor_free(fd.t[0]);
  TU_OK(ctx, stof_tensor_rand(ctx, STOF_DTYPE_F32, 2, TU_SHAPE(4, 16), 1234, &fd.t[0]));
  TU_OK(ctx, stof_plan_bind(p, x, fd.t[0]));
  run_and_check(ctx, g, p, 2, outs, &fd);
  TU_OK(ctx, stof_plan_output(p, 1, &second));
  int same = 0;
  TU_OK(ctx, stof_tensor_allclose(first, second, 0, 0, &same));
  assert_false(same);
  /* the bound tensor changed in place: seen by the next run */
  for (int64_t i = 0; i < stof_tensor_numel(fd.t[0]); i++) stof_tensor_store(fd.t[0], i, -stof_tensor_load(fd.t[0], i));
  run_and_check(ctx, g, p, 2, outs, &fd);
  /* a strided view (w transposed twice is w: a [8, 16] tensor read through swapped strides) */
  stof_tensor *wt = NULL, *view = NULL;
  TU_OK(ctx, stof_tensor_rand(ctx, STOF_DTYPE_F32, 2, TU_SHAPE(8, 16), 77, &wt));
  TU_OK(ctx, stof_tensor_wrap(ctx, STOF_DTYPE_F32, 2, TU_SHAPE(16, 8), TU_SHAPE(1, 16), wt->data, STOF_DEVICE_CPU, &view));
  assert_false(stof_tensor_is_contiguous(view));
  TU_OK(ctx, stof_plan_bind(p, w, view));
  stof_plan_memory m;
  stof_plan_memory_get(p, &m);
  assert_int_equal(m.owned_inputs, 16 * 8 * 4);
  /* the interpreter reads the same view */
  stof_tensor *keep = fd.t[1];
  assert_ptr_equal(fd.op[1], w);
  fd.t[1] = view;
  run_and_check(ctx, g, p, 2, outs, &fd);
  /* rebinding copies again into the same storage */
  TU_OK(ctx, stof_plan_bind(p, w, view));
  stof_plan_memory_get(p, &m);
  assert_int_equal(m.owned_inputs, 16 * 8 * 4);
  fd.t[1] = keep;
  stof_tensor_free(view);
  stof_tensor_free(wt);
  stof_tensor_free(first);
  stof_tensor_free(second);
  feed_free(&fd);
  stof_plan_free(p);
  fx_free(&f);
}

/* ---------------------------------------------------------------- allocation failures */

static void allocation_failures_are_clean(void **state) {
  (void)state;
  fx f;
  fx_new(&f);
  stof_graph *g = f.g;
  stof_ctx *ctx = f.ctx;
  stof_mask *causal = NULL;
  TU_OK(ctx, stof_mask_causal(ctx, &causal));
  const stof_op *x = tu_ph(g, "x", STOF_DTYPE_F32, 2, TU_SHAPE(8, 16));
  const stof_op *h = NULL;
  const stof_op *y = mlp_layer(g, 0, x, 16, 32, &h);
  const stof_op *q = NULL, *a = NULL;
  {
    const stof_expr *ax[4];
    tu_axes(g, 4, TU_SHAPE(1, 2, 8, 8), ax);
    const stof_expr *col = tu_bin(g, STOF_EXPR_ADD, tu_bin(g, STOF_EXPR_MUL, ax[1], tu_int(g, 8)), ax[3]);
    q = compute_as(g, "heads", 4, ax, tu_load(g, y, 2, ax[2], col), -1, NULL);
  }
  TU_OK(ctx, stof_attention_op(g, q, q, q, causal, 0, &a));
  const stof_op *outs[3] = {a, y, h};
  /* warm the compile cache */
  stof_plan *p = plan_c(g, 3, outs);
  stof_plan_free(p);
  size_t base = stof_ctx_bytes_in_use(ctx);
  stof_plan_opts o = {.target = "c"};
  int n, nomem = 0;
  for (n = 1; n <= 400; n++) {
    f.heap.nalloc = 0;
    f.heap.failed = 0;
    f.heap.fail_at = n;
    p = NULL;
    stof_status st = stof_plan_new(g, 3, outs, &o, &p);
    f.heap.fail_at = 0;
    if (st == STOF_OK) {
      assert_non_null(p);
      stof_plan_free(p);
      if (!f.heap.failed) break;
      continue; /* the failure was absorbed (a cache miss path, say) */
    }
    assert_null(p);
    assert_true(f.heap.failed);
    if (stof_ctx_status(ctx) == STOF_OK) fail_msg("allocation %d: status %s but no error recorded", n, stof_status_name(st));
    if (st == STOF_ERR_NOMEM) nomem++;
    else fail_msg("allocation %d failed: %s (%s), not ERR_NOMEM", n, stof_status_name(st), stof_ctx_message(ctx));
    stof_ctx_clear_error(ctx);
    if (stof_ctx_bytes_in_use(ctx) != base)
      fail_msg("allocation %d failed: %zu bytes in use, %zu before", n, stof_ctx_bytes_in_use(ctx), base);
  }
  if (n > 400) fail_msg("stof_plan_new still failing after 400 allocations");
  assert_true(nomem >= 10);
  /* running: a failing allocation is a clean error, and the plan runs right afterwards */
  p = plan_c(g, 3, outs);
  feed fd;
  feed_rand(ctx, p, &fd, 99);
  size_t planned = stof_ctx_bytes_in_use(ctx);
  for (n = 1; n <= 100; n++) {
    f.heap.nalloc = 0;
    f.heap.failed = 0;
    f.heap.fail_at = n;
    stof_status st = stof_plan_run(p);
    f.heap.fail_at = 0;
    if (!f.heap.failed) {
      TU_OK(ctx, st);
      break;
    }
    if (st != STOF_OK) assert_int_equal(st, STOF_ERR_NOMEM);
    stof_ctx_clear_error(ctx);
    assert_int_equal(stof_ctx_bytes_in_use(ctx), planned);
  }
  assert_true(n <= 100);
  run_and_check(ctx, g, p, 3, outs, &fd);
  feed_free(&fd);
  stof_plan_free(p);
  /* timing without warmup that fails on its first run: the plan has not run */
  p = plan_c(g, 3, outs);
  feed_rand(ctx, p, &fd, 98);
  f.heap.nalloc = 0;
  f.heap.fail_at = 1;
  double ms = 0;
  stof_status st = stof_plan_time(p, 1, 0, &ms);
  f.heap.fail_at = 0;
  assert_true(f.heap.failed);
  assert_int_equal(st, STOF_ERR_NOMEM);
  stof_ctx_clear_error(ctx);
  stof_tensor *t = NULL;
  TU_ERR(ctx, stof_plan_output(p, 0, &t), STOF_ERR_ARG, "has not run yet");
  TU_OK(ctx, stof_plan_time(p, 1, 0, &ms));
  TU_OK(ctx, stof_plan_output(p, 0, &t));
  stof_tensor_free(t);
  feed_free(&fd);
  stof_plan_free(p);
  assert_int_equal(stof_ctx_bytes_in_use(ctx), base);
  stof_graph_free(g);
  f.g = NULL;
  stof_mask_free(causal);
  tu_ctx_free(ctx, &f.heap);
}


/* ---------------------------------------------------------------- given schemes and hooks */

/* x -> fc (gemm + bias + relu) -> ln (layer norm), f32: the scheme ops in id order are
 * fc, fc.bias, fc.relu, ln.mean, ln.var, ln. */
static const stof_op *fc_ln(stof_graph *g) {
  const stof_op *x = tu_ph(g, "x", STOF_DTYPE_F32, 2, TU_SHAPE(8, 16));
  const stof_op *w = tu_ph(g, "w", STOF_DTYPE_F32, 2, TU_SHAPE(16, 32));
  const stof_op *b = tu_ph(g, "b", STOF_DTYPE_F32, 1, TU_SHAPE(32));
  const stof_op *y = act(g, "fc.relu", ACT_RELU, bias_add(g, "fc.bias", gemm(g, "fc", x, w, 0), b));
  const stof_op *gamma = tu_ph(g, "gamma", STOF_DTYPE_F32, 1, TU_SHAPE(32));
  const stof_op *beta = tu_ph(g, "beta", STOF_DTYPE_F32, 1, TU_SHAPE(32));
  return layer_norm(g, "ln", y, gamma, beta);
}

static void given_schemes_run_and_match(void **state) {
  (void)state;
  fx f;
  fx_new(&f);
  const stof_op *out = fc_ln(f.g);
  /* the default scheme's own code gives the same plan */
  stof_plan *p = plan_run_check_opts(f.g, 1, &out, 3, (stof_plan_opts){.scheme = "0 0 0 1 1 1"});
  assert_string_equal(stof_plan_scheme(p), "0 0 0 1 1 1");
  assert_seg(p, 0, STOF_SEG_GEMM, "gemm+bias+relu", 3);
  stof_plan_free(p);
  /* the GEMM alone, its epilogue with the layer norm: the numbers need not be in order */
  p = plan_run_check_opts(f.g, 1, &out, 4, (stof_plan_opts){.scheme = "7 3 3 3 3 3"});
  assert_string_equal(stof_plan_scheme(p), "0 1 1 1 1 1");
  assert_seg(p, 0, STOF_SEG_GEMM, "gemm", 1);
  assert_int_equal(seg(p, 1).kind, STOF_SEG_GENERIC);
  stof_plan_free(p);
  /* everything one segment: a GEMM with a layer norm is generated code */
  p = plan_run_check_opts(f.g, 1, &out, 5, (stof_plan_opts){.scheme = "0 0 0 0 0 0"});
  assert_int_equal(stof_plan_nsegment(p), 1);
  assert_int_equal(seg(p, 0).kind, STOF_SEG_GENERIC);
  stof_plan_free(p);
  /* one segment per op */
  p = plan_run_check_opts(f.g, 1, &out, 6, (stof_plan_opts){.scheme = "0 1 2 3 4 5"});
  assert_int_equal(stof_plan_nsegment(p), 6);
  assert_seg(p, 0, STOF_SEG_GEMM, "gemm", 1);
  stof_plan_free(p);
  fx_free(&f);
}

static void illegal_schemes_are_refused(void **state) {
  (void)state;
  fx f;
  fx_new(&f);
  const stof_op *out = fc_ln(f.g);
  stof_plan *p = NULL;
  stof_plan_opts o = {.target = "c"};
  o.scheme = "0 0 0 1 1";
  TU_ERR(f.ctx, stof_plan_new(f.g, 1, &out, &o, &p), STOF_ERR_ARG, "the code ends at op ln");
  o.scheme = "0 0 0 1 1 1 2";
  TU_ERR(f.ctx, stof_plan_new(f.g, 1, &out, &o, &p), STOF_ERR_ARG, "more numbers than");
  o.scheme = "0 0 x 1 1 1";
  TU_ERR(f.ctx, stof_plan_new(f.g, 1, &out, &o, &p), STOF_ERR_ARG, "where the segment of op fc.relu");
  /* fc and ln.var in one segment, fc.bias .. ln.mean in another: each reads the other's */
  o.scheme = "0 1 1 1 0 2";
  TU_ERR(f.ctx, stof_plan_new(f.g, 1, &out, &o, &p), STOF_ERR_ARG, "read each other's values");
  assert_null(p);
  fx_free(&f);
}

typedef struct hook_log {
  int ngemm, nsched, generate;
  char names[8][64];
} hook_log;

static int log_generate_gemm(void *ud, const stof_plan_seg_req *r) {
  hook_log *h = ud;
  assert_string_equal(r->target, "c");
  assert_true(r->nop >= 1);
  assert_string_equal(r->op[0]->name, "fc");
  h->ngemm++;
  return h->generate;
}

/* The default schedule, then a knob of its own (decision 2: the value 4). */
static stof_status log_schedule(void *ud, stof_plan_seg_req *r, stof_sched *s) {
  hook_log *h = ud;
  if (h->nsched < 8) snprintf(h->names[h->nsched], sizeof h->names[0], "%s", r->name);
  h->nsched++;
  r->label = "the test's hook";
  int k = 0;
  stof_status st = stof_sched_auto(s, r->target, NULL);
  if (st) return st;
  return stof_sched_knob(s, "tile", 3, (const int64_t[]){1, 2, 4}, 2, &k);
}

static void hooks_choose_implementations(void **state) {
  (void)state;
  fx f;
  fx_new(&f);
  const stof_op *out = fc_ln(f.g);
  hook_log h = {0};
  stof_plan_hooks hooks = {log_generate_gemm, log_schedule, &h};
  /* the vendor GEMM kept: the hook schedules the layer norm only */
  stof_plan *p = plan_run_check_opts(f.g, 1, &out, 7, (stof_plan_opts){.hooks = &hooks});
  assert_int_equal(h.ngemm, 0); /* the default scheme asks nothing */
  assert_int_equal(h.nsched, 1);
  assert_int_equal(seg(p, 1).nknob, 1);
  assert_string_equal(seg(p, 1).knob_name[0], "tile");
  assert_int_equal(seg(p, 1).knob_value[0], 4);
  assert_non_null(strstr(seg(p, 1).detail, "the test's hook"));
  stof_plan_free(p);
  /* with a given scheme the GEMM segment is offered; generated when the hook says so */
  memset(&h, 0, sizeof h);
  h.generate = 1;
  p = plan_run_check_opts(f.g, 1, &out, 8, (stof_plan_opts){.hooks = &hooks, .scheme = "0 0 0 1 1 1"});
  assert_int_equal(h.ngemm, 1);
  assert_int_equal(h.nsched, 2);
  assert_string_equal(h.names[0], "gemm+bias_add+relu"); /* named by its tags as generated code */
  assert_int_equal(seg(p, 0).kind, STOF_SEG_GENERIC);
  stof_plan_free(p);
  fx_free(&f);
}

/* The number of files in dir (0 when it does not exist). */
static int count_files(const char *dir) {
  char cmd[512];
  snprintf(cmd, sizeof cmd, "ls -1 %s 2>/dev/null | wc -l", dir);
  FILE *f = popen(cmd, "r");
  int n = 0;
  if (f) {
    if (fscanf(f, "%d", &n) != 1) n = 0;
    pclose(f);
  }
  return n;
}

static void compile_jobs_fill_the_cache_ahead(void **state) {
  (void)state;
  fx f;
  fx_new(&f);
  const stof_op *out = fc_ln(f.g);
  char dir[64] = "/tmp/stof-jobs-XXXXXX", so[96], saved[256] = "";
  assert_non_null(mkdtemp(dir));
  const char *old = getenv("STOF_CACHE_DIR");
  if (old) snprintf(saved, sizeof saved, "%s", old);
  setenv("STOF_CACHE_DIR", dir, 1);
  snprintf(so, sizeof so, "%s/so", dir);
  /* one generated segment per op: six sources, the GEMM's too */
  stof_plan_opts o = {.target = "c", .scheme = "0 1 2 3 4 5", .no_vendor_gemm = 1};
  int n = 0, nfail = -1;
  stof_compile_job **jobs = NULL;
  TU_OK(f.ctx, stof_plan_jobs(f.g, 1, &out, &o, &n, &jobs));
  assert_int_equal(n, 6);
  assert_int_equal(count_files(so), 0); /* nothing compiled yet */
  TU_OK(f.ctx, stof_compile_jobs(f.ctx, n, jobs, 3, &nfail));
  assert_int_equal(nfail, 0);
  assert_int_equal(count_files(so), 6);
  /* the plan finds every library there: nothing new compiled, and it computes right */
  stof_plan *p = plan_run_check_opts(f.g, 1, &out, 9, o);
  assert_int_equal(count_files(so), 6);
  stof_plan_free(p);
  /* compiling again costs nothing; a compiler that fails is counted, not fatal */
  TU_OK(f.ctx, stof_compile_jobs(f.ctx, n, jobs, 2, &nfail));
  assert_int_equal(nfail, 0);
  for (int i = 0; i < n; i++) stof_compile_job_free(jobs[i]);
  stof_ctx_dealloc(f.ctx, jobs, sizeof *jobs * (size_t)n);
  o.scheme = "0 0 0 1 1 1";
  TU_OK(f.ctx, stof_plan_jobs(f.g, 1, &out, &o, &n, &jobs));
  assert_int_equal(n, 2);
  setenv("CC", "false", 1);
  TU_OK(f.ctx, stof_compile_jobs(f.ctx, n, jobs, 2, &nfail));
  unsetenv("CC");
  assert_int_equal(nfail, 2);
  for (int i = 0; i < n; i++) stof_compile_job_free(jobs[i]);
  stof_ctx_dealloc(f.ctx, jobs, sizeof *jobs * (size_t)n);
  /* with the vendor GEMM and the default scheme: the layer norm only */
  o = (stof_plan_opts){.target = "c"};
  TU_OK(f.ctx, stof_plan_jobs(f.g, 1, &out, &o, &n, &jobs));
  assert_int_equal(n, 1);
  stof_compile_job_free(jobs[0]);
  stof_ctx_dealloc(f.ctx, jobs, sizeof *jobs * (size_t)n);
  if (saved[0]) setenv("STOF_CACHE_DIR", saved, 1);
  else unsetenv("STOF_CACHE_DIR");
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  assert_int_equal(system(cmd), 0);
  fx_free(&f);
}

/* Random schemes over x -> fc -> ln: each is refused with a message (a cycle) or builds a
 * plan that matches the interpreter, whatever the grouping. */
static void random_schemes_are_refused_or_correct(void **state) {
  (void)state;
  fx f;
  fx_new(&f);
  const stof_op *out = fc_ln(f.g);
  uint64_t rng = 12345;
  int built = 0, refused = 0;
  for (int trial = 0; trial < 48; trial++) {
    char code[64];
    int n = 0;
    /* half of them contiguous runs (always legal) under permuted numbers, half anything */
    int perm[6] = {0, 1, 2, 3, 4, 5}, g = 0;
    for (int k = 5; k > 0; k--) {
      int r = (int)(tu_splitmix(&rng) % (uint64_t)(k + 1)), x = perm[k];
      perm[k] = perm[r], perm[r] = x;
    }
    for (int op = 0; op < 6; op++) {
      if (op && tu_splitmix(&rng) % 2) g++;
      int v = trial % 2 ? (int)(tu_splitmix(&rng) % 4) : perm[g];
      n += snprintf(code + n, sizeof code - (size_t)n, "%s%d", op ? " " : "", v);
    }
    stof_plan_opts o = {.target = "c", .scheme = code, .no_vendor_gemm = (int)(tu_splitmix(&rng) & 1)};
    stof_plan *p = NULL;
    stof_status st = stof_plan_new(f.g, 1, &out, &o, &p);
    if (st) {
      assert_int_equal(st, STOF_ERR_ARG);
      TU_MSG(f.ctx, "read each other's values");
      stof_ctx_clear_error(f.ctx);
      refused++;
      continue;
    }
    stof_plan_free(p);
    p = plan_run_check_opts(f.g, 1, &out, (uint64_t)trial + 20, o);
    stof_plan_free(p);
    built++;
  }
  print_message("  %d random schemes built and matched, %d refused\n", built, refused);
  assert_true(built >= 24 && refused >= 5);
  fx_free(&f);
}

/* Every allocation of a given scheme's plan with hooks, and of its compile jobs, failing in
 * turn: STOF_ERR_NOMEM (or a plan, when the failure was absorbed), nothing leaked. */
static void given_scheme_allocation_failures_are_clean(void **state) {
  (void)state;
  fx f;
  fx_new(&f);
  const stof_op *out = fc_ln(f.g);
  hook_log h = {0};
  h.generate = 1;
  stof_plan_hooks hooks = {log_generate_gemm, log_schedule, &h};
  stof_plan_opts o = {.target = "c", .scheme = "0 0 0 1 1 1", .hooks = &hooks};
  stof_plan *p = plan_opts(f.g, 1, &out, o); /* warms the compile cache */
  stof_plan_free(p);
  size_t base = stof_ctx_bytes_in_use(f.ctx);
  for (int jobs = 0; jobs < 2; jobs++) {
    int n, nomem = 0;
    for (n = 1; n <= 2000; n++) {
      f.heap.nalloc = 0;
      f.heap.failed = 0;
      f.heap.fail_at = n;
      p = NULL;
      int nj = 0;
      stof_compile_job **j = NULL;
      stof_status st = jobs ? stof_plan_jobs(f.g, 1, &out, &o, &nj, &j) : stof_plan_new(f.g, 1, &out, &o, &p);
      f.heap.fail_at = 0;
      if (st == STOF_OK) {
        stof_plan_free(p);
        for (int i = 0; i < nj; i++) stof_compile_job_free(j[i]);
        if (j) stof_ctx_dealloc(f.ctx, j, sizeof *j * (size_t)nj);
        if (!f.heap.failed) break;
        continue;
      }
      assert_true(f.heap.failed);
      assert_int_equal(st, STOF_ERR_NOMEM);
      assert_null(p);
      assert_null(j);
      stof_ctx_clear_error(f.ctx);
      nomem++;
      assert_int_equal(stof_ctx_bytes_in_use(f.ctx), base);
    }
    assert_true(n <= 2000 && nomem > 10);
    assert_int_equal(stof_ctx_bytes_in_use(f.ctx), base);
  }
  assert_false(f.heap.bad_size);
  fx_free(&f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(gemm_bias_relu_then_layer_norm),
      cmocka_unit_test(gemm_weight_layouts),
      cmocka_unit_test(gemm_over_part_of_operands_is_generated),
      cmocka_unit_test(residual_epilogue),
      cmocka_unit_test(wrong_tag_is_not_trusted),
      cmocka_unit_test(erf_gelu_stays_exact_on_cpu),
      cmocka_unit_test(attention_in_a_graph),
      cmocka_unit_test(identical_layers_share),
      cmocka_unit_test(memory_is_shared),
      cmocka_unit_test(bind_and_argument_errors),
      cmocka_unit_test(bounded_run_stops_past_its_limit),
      cmocka_unit_test(gemm_algorithm_is_kept_for_the_process),
      cmocka_unit_test(extern_without_intrinsic_is_refused),
      cmocka_unit_test(rebinding_cpu_input_gives_new_results),
      cmocka_unit_test(allocation_failures_are_clean),
      cmocka_unit_test(given_schemes_run_and_match),
      cmocka_unit_test(illegal_schemes_are_refused),
      cmocka_unit_test(hooks_choose_implementations),
      cmocka_unit_test(compile_jobs_fill_the_cache_ahead),
      cmocka_unit_test(random_schemes_are_refused_or_correct),
      cmocka_unit_test(given_scheme_allocation_failures_are_clean),
  };
  return cmocka_run_group_tests_name("exec", tests, NULL, NULL);
}
