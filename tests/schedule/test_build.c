/* The C backend: every dtype (f32, f64, f16, bf16, i32, i64, bool), the math functions and
 * casts against the interpreter, argument and call checks, intermediates passed as
 * arguments, float16 and bfloat16 sums in float32 accumulators, the on-disk cache, and
 * compiler failures. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

/* ---------------------------------------------------------------- builders */

static const stof_expr *B2(sh_graph *G, stof_expr_kind k, const stof_expr *a, const stof_expr *b) {
  const stof_expr *e;
  SH_OK(G->ctx, stof_te_binary(G->g, k, a, b, &e));
  return e;
}
static const stof_expr *U1(sh_graph *G, stof_expr_kind k, const stof_expr *a) {
  const stof_expr *e;
  SH_OK(G->ctx, stof_te_unary(G->g, k, a, &e));
  return e;
}
static const stof_expr *F(sh_graph *G, double v, stof_dtype d) {
  const stof_expr *e;
  SH_OK(G->ctx, stof_te_float(G->g, v, d, &e));
  return e;
}
static const stof_expr *I(sh_graph *G, int64_t v, stof_dtype d) {
  const stof_expr *e;
  SH_OK(G->ctx, stof_te_int(G->g, v, d, &e));
  return e;
}
static const stof_expr *CAST(sh_graph *G, stof_dtype d, const stof_expr *a) {
  const stof_expr *e;
  SH_OK(G->ctx, stof_te_cast(G->g, d, a, &e));
  return e;
}
static const stof_expr *LD(sh_graph *G, const stof_op *t, const stof_expr *i) {
  const stof_expr *e;
  SH_OK(G->ctx, stof_te_load(G->g, t, 1, &i, &e));
  return e;
}

/* A 1-D graph with input A [n] of dtype d; the caller adds outputs with vec_out. */
static const stof_expr *vec_start(sh_graph *G, int64_t n, stof_dtype d) {
  memset(G, 0, sizeof *G);
  G->ctx = sh_ctx();
  SH_OK(G->ctx, stof_graph_new(G->ctx, &G->g));
  SH_OK(G->ctx, stof_te_placeholder(G->g, 1, &n, d, "A", &G->in[0]));
  G->nin = 1;
  return NULL;
}

/* Adds output name = body(i) over [n]; body built by fn from the axis. */
typedef const stof_expr *(*body_fn)(sh_graph *G, const stof_expr *i);
static const stof_op *vec_out(sh_graph *G, const char *name, body_fn fn) {
  int64_t n = G->in[0]->shape[0];
  const stof_expr *ax;
  SH_OK(G->ctx, stof_te_compute_axes(G->g, 1, &n, NULL, &ax));
  const stof_op *op;
  SH_OK(G->ctx, stof_te_compute(G->g, name, 1, &ax, fn(G, ax), -1, &op));
  G->out[G->nout++] = op;
  return op;
}

static stof_sched *split_by(sh_graph *G, int64_t factor) {
  stof_sched *s = sh_sched(G);
  for (int o = 0; o < G->nout; o++) {
    int l[4], p[2];
    sh_loops(s, sh_block(s, G->out[o]->name), l);
    stof_factor f[2] = {stof_factor_const(STOF_INFER), stof_factor_const(factor)};
    SH_OK(G->ctx, stof_sched_split(s, l[0], 2, f, p));
  }
  return s;
}

/* ---------------------------------------------------------------- dtypes */

static void float_dtypes(void **state) {
  stof_dtype ds[3] = {STOF_DTYPE_F64, STOF_DTYPE_F16, STOF_DTYPE_BF16};
  for (int i = 0; i < 3; i++) {
    sh_graph G;
    sh_vec(&G, 45, ds[i]);
    stof_sched *s = split_by(&G, 8);
    sh_check_numeric(&G, s);
    sh_round_trip(&G, s);
    stof_sched_free(s);
    sh_done(&G);
  }
}

static const stof_expr *int_body(sh_graph *G, const stof_expr *i) {
  const stof_expr *a = LD(G, G->in[0], i);
  const stof_expr *t = B2(G, STOF_EXPR_ADD, B2(G, STOF_EXPR_FLOORDIV, a, I(G, 3, STOF_DTYPE_I32)),
                          B2(G, STOF_EXPR_MUL, B2(G, STOF_EXPR_MOD, B2(G, STOF_EXPR_SUB, a, I(G, 50, STOF_DTYPE_I32)),
                                                  I(G, 7, STOF_DTYPE_I32)),
                             I(G, 2, STOF_DTYPE_I32)));
  t = B2(G, STOF_EXPR_SUB, t, B2(G, STOF_EXPR_MIN, a, I(G, 50, STOF_DTYPE_I32)));
  t = B2(G, STOF_EXPR_ADD, t, U1(G, STOF_EXPR_ABS, B2(G, STOF_EXPR_SUB, a, I(G, 60, STOF_DTYPE_I32))));
  return B2(G, STOF_EXPR_ADD, t, B2(G, STOF_EXPR_DIV, B2(G, STOF_EXPR_SUB, I(G, 20, STOF_DTYPE_I32), a),
                                     I(G, 6, STOF_DTYPE_I32)));
}

static const stof_expr *i64_body(sh_graph *G, const stof_expr *i) {
  const stof_expr *a = CAST(G, STOF_DTYPE_I64, LD(G, G->in[0], i));
  return B2(G, STOF_EXPR_MUL, B2(G, STOF_EXPR_MAX, a, I(G, 30, STOF_DTYPE_I64)), I(G, 100000000000LL, STOF_DTYPE_I64));
}

static void integer_dtypes(void **state) {
  sh_graph G;
  vec_start(&G, 37, STOF_DTYPE_I32);
  vec_out(&G, "R", int_body);
  vec_out(&G, "Q", i64_body);
  assert_int_equal(G.out[0]->dtype, STOF_DTYPE_I32);
  assert_int_equal(G.out[1]->dtype, STOF_DTYPE_I64);
  stof_sched *s = split_by(&G, 8);
  sh_check_numeric(&G, s);
  sh_round_trip(&G, s);
  stof_sched_free(s);
  sh_done(&G);
}

static const stof_expr *mask_body(sh_graph *G, const stof_expr *i) {
  return B2(G, STOF_EXPR_GT, LD(G, G->in[0], i), F(G, 0.25, STOF_DTYPE_F32));
}

static const stof_expr *select_body(sh_graph *G, const stof_expr *i) {
  const stof_expr *m = LD(G, G->out[0], i), *a = LD(G, G->in[0], i), *e;
  const stof_expr *both = B2(G, STOF_EXPR_AND, m, B2(G, STOF_EXPR_LT, a, F(G, 0.75, STOF_DTYPE_F32)));
  SH_OK(G->ctx, stof_te_select(G->g, both, a, U1(G, STOF_EXPR_NEG, a), &e));
  return e;
}

static void bool_outputs_and_select(void **state) {
  sh_graph G;
  vec_start(&G, 29, STOF_DTYPE_F32);
  vec_out(&G, "M", mask_body);
  vec_out(&G, "S", select_body);
  assert_int_equal(G.out[0]->dtype, STOF_DTYPE_BOOL);
  stof_sched *s = split_by(&G, 4);
  sh_check_numeric(&G, s);
  sh_round_trip(&G, s);
  stof_sched_free(s);
  sh_done(&G);
}

static const stof_expr *math_body(sh_graph *G, const stof_expr *i) {
  const stof_expr *x = LD(G, G->in[0], i), *ax = U1(G, STOF_EXPR_ABS, x);
  const stof_expr *one = F(G, 1, STOF_DTYPE_F32);
  const stof_expr *terms[] = {
      U1(G, STOF_EXPR_EXP, x),
      U1(G, STOF_EXPR_LOG, B2(G, STOF_EXPR_ADD, ax, one)),
      U1(G, STOF_EXPR_SQRT, ax),
      U1(G, STOF_EXPR_RSQRT, B2(G, STOF_EXPR_ADD, ax, F(G, 0.5, STOF_DTYPE_F32))),
      U1(G, STOF_EXPR_TANH, x),
      U1(G, STOF_EXPR_ERF, x),
      U1(G, STOF_EXPR_SIGMOID, x),
      U1(G, STOF_EXPR_SIN, x),
      U1(G, STOF_EXPR_COS, x),
      U1(G, STOF_EXPR_FLOOR, B2(G, STOF_EXPR_MUL, x, F(G, 4, STOF_DTYPE_F32))),
      B2(G, STOF_EXPR_POW, ax, F(G, 1.5, STOF_DTYPE_F32)),
      B2(G, STOF_EXPR_MAX, x, F(G, 0.1, STOF_DTYPE_F32)),
      B2(G, STOF_EXPR_MIN, x, F(G, -0.1, STOF_DTYPE_F32)),
      B2(G, STOF_EXPR_MOD, x, F(G, 0.3, STOF_DTYPE_F32)),
      B2(G, STOF_EXPR_FLOORDIV, x, F(G, 0.25, STOF_DTYPE_F32)),
      B2(G, STOF_EXPR_DIV, x, F(G, 3, STOF_DTYPE_F32)),
      U1(G, STOF_EXPR_NEG, x),
  };
  const stof_expr *acc = terms[0];
  for (size_t k = 1; k < sizeof terms / sizeof *terms; k++) acc = B2(G, STOF_EXPR_ADD, acc, terms[k]);
  return acc;
}

static const stof_expr *cast_body(sh_graph *G, const stof_expr *i) {
  const stof_expr *x = LD(G, G->in[0], i);
  const stof_expr *big = CAST(G, STOF_DTYPE_I32, B2(G, STOF_EXPR_MUL, x, F(G, 1e10, STOF_DTYPE_F32)));
  const stof_expr *small = CAST(G, STOF_DTYPE_I32, B2(G, STOF_EXPR_MUL, x, F(G, 100, STOF_DTYPE_F32)));
  const stof_expr *h = CAST(G, STOF_DTYPE_F32, CAST(G, STOF_DTYPE_F16, B2(G, STOF_EXPR_MUL, x, F(G, 1000, STOF_DTYPE_F32))));
  const stof_expr *bf = CAST(G, STOF_DTYPE_F32, CAST(G, STOF_DTYPE_BF16, x));
  const stof_expr *d = CAST(G, STOF_DTYPE_F32, B2(G, STOF_EXPR_MUL, CAST(G, STOF_DTYPE_F64, x), F(G, 0.5, STOF_DTYPE_F64)));
  const stof_expr *s = B2(G, STOF_EXPR_ADD, CAST(G, STOF_DTYPE_F32, big), CAST(G, STOF_DTYPE_F32, small));
  return B2(G, STOF_EXPR_ADD, B2(G, STOF_EXPR_ADD, s, h), B2(G, STOF_EXPR_ADD, bf, d));
}

static void math_functions_and_casts(void **state) {
  sh_graph G;
  vec_start(&G, 50, STOF_DTYPE_F32);
  vec_out(&G, "Y", math_body);
  vec_out(&G, "Z", cast_body);
  stof_sched *s = split_by(&G, 16);
  sh_check_numeric(&G, s);
  stof_sched_free(s);
  sh_done(&G);
}

static void zero_dim_output(void **state) {
  sh_graph G;
  vec_start(&G, 7, STOF_DTYPE_F32);
  const stof_expr *k, *ld, *r;
  SH_OK(G.ctx, stof_te_reduce_axis(G.g, 7, "k", &k));
  SH_OK(G.ctx, stof_te_load(G.g, G.in[0], 1, &k, &ld));
  SH_OK(G.ctx, stof_te_reduce(G.g, STOF_REDUCE_SUM, ld, 1, &k, &r));
  SH_OK(G.ctx, stof_te_compute(G.g, "S", 0, NULL, r, -1, &G.out[0]));
  G.nout = 1;
  stof_sched *s = sh_sched(&G);
  int l[2];
  assert_int_equal(sh_loops(s, sh_block(s, "S"), l), 1);
  SH_OK(G.ctx, stof_sched_unroll(s, l[0]));
  sh_check_all(&G, s, "S[] = 0.0\nfor k in 0..7 [unrolled]:\n  S[] = S[] + A[k]\n");
  stof_sched_free(s);
  sh_done(&G);
}

/* ---------------------------------------------------------------- arguments and calls */

static void targets_and_arguments(void **state) {
  sh_graph G;
  sh_matmul_bias_relu(&G, 3, 4, 5);
  const stof_op *stray;
  int64_t n = 3;
  SH_OK(G.ctx, stof_te_placeholder(G.g, 1, &n, STOF_DTYPE_F32, "stray", &stray));
  stof_sched *s = sh_sched(&G);
  stof_func *f = NULL;
  const stof_op *ok[4] = {G.in[0], G.in[1], G.in[2], G.out[0]};
  if (stof_cuda_init(G.ctx) != STOF_OK) /* with a GPU it builds: test_codegen_cuda.c */
    sh_expect_error(G.ctx, stof_build(s, 4, ok, "cuda", &f), STOF_ERR_NO_DEVICE, "the CUDA source compiled");
  stof_ctx_clear_error(G.ctx);
  sh_expect_error(G.ctx, stof_build(s, 4, ok, "opencl", &f), STOF_ERR_ARG, "unknown target \"opencl\"");
  const stof_op *no_bias[3] = {G.in[0], G.in[1], G.out[0]};
  sh_expect_error(G.ctx, stof_build(s, 3, no_bias, "c", &f), STOF_ERR_ARG, "placeholder bias is read but not among the arguments");
  const stof_op *no_out[3] = {G.in[0], G.in[1], G.in[2]};
  sh_expect_error(G.ctx, stof_build(s, 3, no_out, "c", &f), STOF_ERR_ARG, "output E is not among the arguments");
  const stof_op *twice[5] = {G.in[0], G.in[1], G.in[2], G.out[0], G.in[1]};
  sh_expect_error(G.ctx, stof_build(s, 5, twice, "c", &f), STOF_ERR_ARG, "argument W is given twice");
  const stof_op *foreign[5] = {G.in[0], G.in[1], G.in[2], G.out[0], stray};
  sh_expect_error(G.ctx, stof_build(s, 5, foreign, "c", &f), STOF_ERR_ARG, "argument 5 (stray) is not an op of this schedule");
  assert_null(f);

  SH_OK(G.ctx, stof_build(s, 4, ok, NULL, &f)); /* NULL is "c" */
  assert_int_equal(stof_func_nargs(f), 4);
  assert_non_null(strstr(stof_func_source(f), "int stof_kernel(void *arg0, void *arg1, void *arg2, void *arg3) {"));
  stof_tensor *a, *w, *b, *e, *wrong;
  int64_t sa[2] = {3, 5}, sw[2] = {5, 4}, sb[1] = {4}, se[2] = {3, 4}, sx[2] = {4, 3};
  SH_OK(G.ctx, stof_tensor_rand(G.ctx, STOF_DTYPE_F32, 2, sa, 1, &a));
  SH_OK(G.ctx, stof_tensor_rand(G.ctx, STOF_DTYPE_F32, 2, sw, 2, &w));
  SH_OK(G.ctx, stof_tensor_rand(G.ctx, STOF_DTYPE_F32, 1, sb, 3, &b));
  SH_OK(G.ctx, stof_tensor_new(G.ctx, STOF_DTYPE_F32, 2, se, STOF_DEVICE_CPU, &e));
  stof_tensor *args[4] = {a, w, b, e};
  sh_expect_error(G.ctx, stof_func_call(f, 3, args), STOF_ERR_ARG, "call: 3 tensors given for 4 arguments");
  SH_OK(G.ctx, stof_tensor_new(G.ctx, STOF_DTYPE_F64, 1, sb, STOF_DEVICE_CPU, &wrong));
  args[2] = wrong;
  sh_expect_error(G.ctx, stof_func_call(f, 4, args), STOF_ERR_TYPE, "call: argument 3 (bias): dtype float64 given, float32 expected");
  stof_tensor_free(wrong);
  SH_OK(G.ctx, stof_tensor_new(G.ctx, STOF_DTYPE_F32, 2, sx, STOF_DEVICE_CPU, &wrong));
  args[2] = b;
  args[3] = wrong;
  sh_expect_error(G.ctx, stof_func_call(f, 4, args), STOF_ERR_SHAPE, "call: argument 4 (E): shape [4, 3] given, [3, 4] expected");
  stof_tensor *strided;
  int64_t strides[2] = {1, 3};
  SH_OK(G.ctx, stof_tensor_wrap(G.ctx, STOF_DTYPE_F32, 2, se, strides, wrong->data, STOF_DEVICE_CPU, &strided));
  args[3] = strided;
  sh_expect_error(G.ctx, stof_func_call(f, 4, args), STOF_ERR_ARG, "call: argument 4 (E) is not contiguous");
  args[3] = NULL;
  sh_expect_error(G.ctx, stof_func_call(f, 4, args), STOF_ERR_ARG, "call: argument 4 (E) is missing");
  args[3] = e;
  SH_OK(G.ctx, stof_func_call(f, 4, args));
  stof_tensor_free(strided);
  stof_tensor_free(wrong);
  stof_tensor_free(a);
  stof_tensor_free(w);
  stof_tensor_free(b);
  stof_tensor_free(e);
  stof_func_free(f);
  stof_sched_free(s);
  sh_done(&G);
}

static void intermediate_as_argument(void **state) {
  sh_graph G;
  sh_matmul_bias_relu(&G, 5, 3, 4);
  G.out[G.nout++] = sh_op(&G, "D"); /* D is written to the caller's tensor */
  stof_sched *s = sh_sched(&G);
  sh_check_numeric(&G, s);
  char *t = sh_nest(s);
  assert_non_null(strstr(t, "alloc C: float32[5, 3]\n"));
  assert_null(strstr(t, "alloc D"));
  free(t);
  stof_sched_free(s);
  sh_done(&G);
}

/* ---------------------------------------------------------------- float16 sums */

/* A float16 or bfloat16 sum accumulates in float32 and is rounded once, at the store. The
 * error bounds are a few times one rounding's; rounding every partial sum (what the code
 * did before) is 10 to 50 times over them at K = 4096. */
static double half_sum_tolerance(stof_dtype d) { return d == STOF_DTYPE_F16 ? 5e-4 : 4e-3; }

/* Unscheduled: the reduce loop innermost, a scalar accumulator per (i, j). */
static void half_sum_scalar_accumulator(void **state) {
  (void)state;
  stof_dtype ds[2] = {STOF_DTYPE_F16, STOF_DTYPE_BF16};
  for (int i = 0; i < 2; i++) {
    sh_graph G;
    sh_matmul_dtype(&G, 8, 16, 4096, ds[i]);
    stof_sched *s = sh_sched(&G);
    if (ds[i] == STOF_DTYPE_F16)
      sh_expect_nest(s, "alloc C.acc: float32[] local at j\n"
                        "for i in 0..8:\n"
                        "  for j in 0..16:\n"
                        "    C.acc = 0.0\n"
                        "    for k in 0..4096:\n"
                        "      C.acc = C.acc + (A[i, k] * B[k, j])\n"
                        "    C[i, j] = float16(C.acc)\n");
    sh_check_numeric_within(&G, s, half_sum_tolerance(ds[i]));
    assert_true(sh_source_contains(&G, s, "  float stof_facc0; /* float32 accumulator of C */\n"));
    assert_true(sh_source_contains(&G, s, "stof_facc0 += (stof_"));
    const char *round = ds[i] == STOF_DTYPE_F16 ? "] = stof_f2h(stof_facc0);" : "] = stof_f2bf(stof_facc0);";
    assert_true(sh_source_contains(&G, s, round));
    stof_sched_free(s);
    sh_done(&G);
  }
}

/* k split and k.outer reordered outside j.inner: the accumulator is an array over j.inner,
 * zeroed before k.outer and rounded into C after it. */
static void half_sum_reordered_accumulator(void **state) {
  (void)state;
  stof_dtype ds[2] = {STOF_DTYPE_F16, STOF_DTYPE_BF16};
  for (int d = 0; d < 2; d++) {
    sh_graph G;
    sh_matmul_dtype(&G, 8, 10, 4096, ds[d]);
    stof_sched *s = sh_sched(&G);
    int l[3], jp[2], kp[2];
    sh_loops(s, sh_block(s, "C"), l);
    sh_split(s, l[1], 4, jp);
    sh_split(s, l[2], 16, kp);
    int order[5] = {l[0], jp[0], kp[0], jp[1], kp[1]};
    SH_OK(G.ctx, stof_sched_reorder(s, 5, order));
    if (ds[d] == STOF_DTYPE_F16)
      sh_expect_nest(s, "alloc C.acc: float32[4] local at j.outer\n"
                        "for i in 0..8:\n"
                        "  for j.outer in 0..3:\n"
                        "    for j.inner in 0..4:\n"
                        "      let j = j.outer * 4 + j.inner\n"
                        "      if j < 10:\n"
                        "        C.acc[j.inner] = 0.0\n"
                        "    for k.outer in 0..256:\n"
                        "      for j.inner in 0..4:\n"
                        "        let j = j.outer * 4 + j.inner\n"
                        "        if j < 10:\n"
                        "          for k.inner in 0..16:\n"
                        "            let k = k.outer * 16 + k.inner\n"
                        "            C.acc[j.inner] = C.acc[j.inner] + (A[i, k] * B[k, j])\n"
                        "    for j.inner in 0..4:\n"
                        "      let j = j.outer * 4 + j.inner\n"
                        "      if j < 10:\n"
                        "        C[i, j] = float16(C.acc[j.inner])\n");
    sh_check_numeric_within(&G, s, half_sum_tolerance(ds[d]));
    sh_round_trip(&G, s);
    assert_true(sh_source_contains(&G, s, "  float stof_facc0[4]; /* float32 accumulator of C */\n"));
    assert_true(sh_source_contains(&G, s, "stof_facc0[l4_j_inner * INT64_C(1)] += (stof_"));
    stof_sched_free(s);
    sh_done(&G);
  }
}

/* k outside every data-parallel loop: the accumulator covers all of C, 128 KiB, malloc'd
 * (and freed) rather than on the stack. */
static void half_sum_accumulator_on_the_heap(void **state) {
  (void)state;
  sh_graph G;
  sh_matmul_dtype(&G, 64, 512, 64, STOF_DTYPE_F16);
  stof_sched *s = sh_sched(&G);
  int l[3];
  sh_loops(s, sh_block(s, "C"), l);
  int order[3] = {l[2], l[0], l[1]};
  SH_OK(G.ctx, stof_sched_reorder(s, 3, order));
  char *t = sh_nest(s);
  assert_non_null(strstr(t, "alloc C.acc: float32[64, 512] local\n"));
  free(t);
  sh_check_numeric_within(&G, s, half_sum_tolerance(STOF_DTYPE_F16));
  assert_true(sh_source_contains(&G, s, "  stof_facc0 = (float *)malloc(sizeof(float) * (size_t)32768);\n"));
  assert_true(sh_source_contains(&G, s, "  free(stof_facc0);\n"));
  stof_sched_free(s);
  sh_done(&G);
}

/* ---------------------------------------------------------------- the cache */

static int count_files(const char *dir) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n;
}

static void cache_reuses_libraries(void **state) {
  sh_graph G;
  sh_vec(&G, 23, STOF_DTYPE_F32);
  stof_sched *s = split_by(&G, 5);
  char dir[4096];
  assert_non_null(getenv("STOF_CACHE_DIR"));
  snprintf(dir, sizeof dir, "%s/so", getenv("STOF_CACHE_DIR"));
  const stof_op *args[2] = {G.in[0], G.out[0]};
  stof_func *f1, *f2;
  SH_OK(G.ctx, stof_build(s, 2, args, "c", &f1));
  int n1 = count_files(dir);
  SH_OK(G.ctx, stof_build(s, 2, args, "c", &f2));
  assert_int_equal(count_files(dir), n1);
  assert_string_equal(stof_func_library(f1), stof_func_library(f2));
  assert_true(strncmp(stof_func_library(f1), dir, strlen(dir)) == 0);
  char path[4096];
  snprintf(path, sizeof path, "%s", stof_func_library(f1));
  stof_func_free(f1);
  stof_func_free(f2);
  /* a corrupt library in the cache is compiled again */
  FILE *fp = fopen(path, "w");
  assert_non_null(fp);
  fputs("not a shared object", fp);
  fclose(fp);
  sh_check_numeric(&G, s);
  stof_sched_free(s);
  sh_done(&G);
}

static void compiler_failures_are_reported(void **state) {
  sh_graph G;
  sh_vec(&G, 9, STOF_DTYPE_F32);
  stof_sched *s = sh_sched(&G);
  const char *old = getenv("CC");
  char *saved = old ? strdup(old) : NULL;
  setenv("CC", "stof-no-such-compiler", 1);
  const stof_op *args[2] = {G.in[0], G.out[0]};
  stof_func *f = NULL;
  stof_status st = stof_build(s, 2, args, "c", &f);
  if (saved) {
    setenv("CC", saved, 1);
    free(saved);
  } else {
    unsetenv("CC");
  }
  sh_expect_error(G.ctx, st, STOF_ERR_COMPILE, "stof-no-such-compiler");
  assert_null(f);
  /* and the next build works */
  sh_check_numeric(&G, s);
  stof_sched_free(s);
  sh_done(&G);
}

int run_build_tests(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(float_dtypes),
      cmocka_unit_test(integer_dtypes),
      cmocka_unit_test(bool_outputs_and_select),
      cmocka_unit_test(math_functions_and_casts),
      cmocka_unit_test(zero_dim_output),
      cmocka_unit_test(targets_and_arguments),
      cmocka_unit_test(intermediate_as_argument),
      cmocka_unit_test(half_sum_scalar_accumulator),
      cmocka_unit_test(half_sum_reordered_accumulator),
      cmocka_unit_test(half_sum_accumulator_on_the_heap),
      cmocka_unit_test(cache_reuses_libraries),
      cmocka_unit_test(compiler_failures_are_reported),
  };
  return cmocka_run_group_tests_name("build", tests, NULL, NULL);
}
