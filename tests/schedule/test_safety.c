/* Reliability of the schedule module on hostile input (issue 12): deep expressions end to
 * end, loads that leave their tensor (refused, or clamped into it), 64-bit index
 * arithmetic, split factors far above the extent, and a group after compute_inline
 * replayed from its JSON trace. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "helpers.h"

/* A graph of its own: A (shape n, dtype d), B[i] = body(i) over [m], float32. */
typedef struct mini {
  sh_graph G;
  const stof_op *A;
  const stof_expr *i;
} mini;

static void mini_init(mini *m, int64_t n, stof_dtype d, int64_t out) {
  memset(m, 0, sizeof *m);
  m->G.ctx = sh_ctx();
  SH_OK(m->G.ctx, stof_graph_new(m->G.ctx, &m->G.g));
  SH_OK(m->G.ctx, stof_te_placeholder(m->G.g, 1, &n, d, "A", &m->A));
  m->G.in[m->G.nin++] = m->A;
  SH_OK(m->G.ctx, stof_te_compute_axes(m->G.g, 1, &out, NULL, &m->i));
}

static const stof_expr *ci(mini *m, int64_t v) {
  const stof_expr *e;
  SH_OK(m->G.ctx, stof_te_int(m->G.g, v, STOF_DTYPE_I32, &e));
  return e;
}
static const stof_expr *bin(mini *m, stof_expr_kind k, const stof_expr *a, const stof_expr *b) {
  const stof_expr *e;
  SH_OK(m->G.ctx, stof_te_binary(m->G.g, k, a, b, &e));
  return e;
}
static const stof_expr *ld(mini *m, const stof_op *t, const stof_expr *ix) {
  const stof_expr *e;
  SH_OK(m->G.ctx, stof_te_load(m->G.g, t, 1, &ix, &e));
  return e;
}
static void mini_out(mini *m, const stof_expr *body) {
  const stof_op *B;
  SH_OK(m->G.ctx, stof_te_compute(m->G.g, "B", 1, &m->i, body, STOF_DTYPE_F32, &B));
  m->G.out[m->G.nout++] = B;
}

/* The C source of s (malloc'd), or NULL with the error left in the context. */
static char *c_source(sh_graph *G, stof_sched *s, stof_status *st) {
  const stof_op *args[16];
  int n = sh_args(G, args);
  char *src = NULL;
  *st = stof_build_source(s, n, args, "c", &src);
  if (*st) return NULL;
  char *copy = strdup(src);
  stof_ctx_dealloc(G->ctx, src, strlen(src) + 1);
  return copy;
}

/* ---------------------------------------------------------------- deep expressions */

/* A chain 9,000 deep (below STOF_TE_MAX_DEPTH): the interpreter, the loop nest, the C
 * build and the CUDA source all walk it without running out of stack. */
static void deep_chain_works_end_to_end(void **state) {
  (void)state;
  mini m;
  mini_init(&m, 4, STOF_DTYPE_F32, 4);
  const stof_expr *e = ld(&m, m.A, m.i), *one;
  SH_OK(m.G.ctx, stof_te_float(m.G.g, 1, STOF_DTYPE_F32, &one));
  for (int k = 0; k < 9000; k++) e = bin(&m, STOF_EXPR_ADD, e, one);
  mini_out(&m, e);
  stof_sched *s = sh_sched(&m.G);
  char *nest = sh_nest(s);
  assert_non_null(strstr(nest, "B[i] = "));
  free(nest);
  char *cuda = sh_cuda_source(&m.G, s);
  free(cuda);
  sh_check_numeric(&m.G, s); /* C build and run against the interpreter */
  stof_sched_free(s);
  sh_done(&m.G);
}

/* ---------------------------------------------------------------- loads out of range */

/* B[i] = A[i + 1000000] on a 4-element A reads outside A at every i: refused by name,
 * on both backends (it used to segfault when called). */
static void affine_load_outside_the_tensor_is_refused(void **state) {
  (void)state;
  mini m;
  mini_init(&m, 4, STOF_DTYPE_F32, 4);
  mini_out(&m, ld(&m, m.A, bin(&m, STOF_EXPR_ADD, m.i, ci(&m, 1000000))));
  stof_sched *s = sh_sched(&m.G);
  stof_status st;
  assert_null(c_source(&m.G, s, &st));
  sh_expect_error(m.G.ctx, st, STOF_ERR_SCHEDULE,
                  "build: load A[i + 1000000] may read index 1000000 of dim 0 (extent 4)");
  const stof_op *args[2] = {m.A, m.G.out[0]};
  stof_func *f = NULL;
  sh_expect_error(m.G.ctx, stof_build(s, 2, args, "c", &f), STOF_ERR_SCHEDULE, "may read index 1000000");
  sh_expect_error(m.G.ctx, stof_sched_cuda_check(s, 2, args, "sm_80", NULL), STOF_ERR_SCHEDULE,
                  "build: load A[i + 1000000] may read index 1000000 of dim 0 (extent 4)");
  stof_sched_free(s);
  sh_done(&m.G);
}

/* Runs s (inputs given) and returns output 0 (owned). */
static stof_tensor *run_with(sh_graph *G, stof_sched *s, stof_tensor *const *in) {
  const stof_op *args[16];
  int n = sh_args(G, args);
  stof_func *f;
  SH_OK(G->ctx, stof_build(s, n, args, "c", &f));
  stof_tensor *t[16];
  for (int k = 0; k < G->nin; k++) t[k] = in[k];
  SH_OK(G->ctx, stof_tensor_new(G->ctx, G->out[0]->dtype, G->out[0]->ndim, G->out[0]->shape, STOF_DEVICE_CPU,
                                &t[G->nin]));
  stof_tensor_fill(t[G->nin], NAN);
  SH_OK(G->ctx, stof_func_call(f, G->nin + 1, t));
  stof_func_free(f);
  return t[G->nin];
}

/* B[i] = A[i + 1] on a 4-element A leaves A at i = 3 only: an affine index that leaves the
 * tensor at any iteration is refused at build time (the interpreter raises IndexError on the
 * same program), never clamped into a silent answer. A non-affine index (i * i) that may
 * leave the tensor is clamped instead: it reads the edge element. */
static void shifted_load_past_the_end_is_refused(void **state) {
  (void)state;
  mini m;
  mini_init(&m, 4, STOF_DTYPE_F32, 4);
  mini_out(&m, ld(&m, m.A, bin(&m, STOF_EXPR_ADD, m.i, ci(&m, 1))));
  stof_sched *s = sh_sched(&m.G);
  const stof_op *args[16];
  int n = sh_args(&m.G, args);
  stof_func *f = NULL;
  sh_expect_error(m.G.ctx, stof_build(s, n, args, "c", &f), STOF_ERR_SCHEDULE,
                  "build: load A[i + 1] may read index 4 of dim 0 (extent 4)");
  sh_expect_error(m.G.ctx, stof_sched_cuda_check(s, n, args, "sm_80", NULL), STOF_ERR_SCHEDULE,
                  "may read index 4 of dim 0");
  stof_sched_free(s);
  sh_done(&m.G);

  mini_init(&m, 4, STOF_DTYPE_F32, 4);
  mini_out(&m, ld(&m, m.A, bin(&m, STOF_EXPR_MUL, m.i, m.i)));
  s = sh_sched(&m.G);
  stof_status st;
  char *src = c_source(&m.G, s, &st);
  assert_non_null(src);
  assert_non_null(strstr(src, "stof_min_i64(stof_max_i64("));
  free(src);
  stof_tensor *a;
  int64_t four = 4;
  SH_OK(m.G.ctx, stof_tensor_new(m.G.ctx, STOF_DTYPE_F32, 1, &four, STOF_DEVICE_CPU, &a));
  for (int64_t k = 0; k < 4; k++) stof_tensor_store(a, k, 10 + (double)k);
  stof_tensor *b = run_with(&m.G, s, &a);
  const double want[4] = {10, 11, 13, 13}; /* A[0], A[1], A[4 -> 3], A[9 -> 3] */
  for (int64_t k = 0; k < 4; k++) assert_true(stof_tensor_load(b, k) == want[k]);
  stof_tensor_free(a);
  stof_tensor_free(b);
  stof_sched_free(s);
  sh_done(&m.G);
}

/* B[i] = select(i > 0, A[i - 1], 0): the condition keeps the index in range, so the load
 * stays as it was (no clamp), and the numbers are the interpreter's. */
static void select_guarded_load_stays_unclamped(void **state) {
  (void)state;
  mini m;
  mini_init(&m, 6, STOF_DTYPE_F32, 6);
  const stof_expr *cond = bin(&m, STOF_EXPR_GT, m.i, ci(&m, 0)), *zero, *e;
  SH_OK(m.G.ctx, stof_te_float(m.G.g, 0, STOF_DTYPE_F32, &zero));
  SH_OK(m.G.ctx, stof_te_select(m.G.g, cond, ld(&m, m.A, bin(&m, STOF_EXPR_SUB, m.i, ci(&m, 1))), zero, &e));
  mini_out(&m, e);
  stof_sched *s = sh_sched(&m.G);
  assert_false(sh_source_contains(&m.G, s, "stof_max_i64(("));
  sh_check_numeric(&m.G, s);
  stof_sched_free(s);
  sh_done(&m.G);
}

/* B[t] = W[ids[t]] with ids read from memory (a gather): the index is clamped, so an id
 * below 0 reads W[0] and one past the end reads the last row. */
static void gather_clamps_out_of_range_ids(void **state) {
  (void)state;
  mini m;
  mini_init(&m, 5, STOF_DTYPE_I32, 5); /* A: the ids */
  const stof_op *W;
  int64_t nw = 3;
  SH_OK(m.G.ctx, stof_te_placeholder(m.G.g, 1, &nw, STOF_DTYPE_F32, "W", &W));
  m.G.in[m.G.nin++] = W;
  mini_out(&m, ld(&m, W, ld(&m, m.A, m.i)));
  stof_sched *s = sh_sched(&m.G);
  assert_true(sh_source_contains(&m.G, s, "stof_min_i64(stof_max_i64("));
  stof_tensor *in[2];
  int64_t n = 5;
  SH_OK(m.G.ctx, stof_tensor_new(m.G.ctx, STOF_DTYPE_I32, 1, &n, STOF_DEVICE_CPU, &in[0]));
  SH_OK(m.G.ctx, stof_tensor_new(m.G.ctx, STOF_DTYPE_F32, 1, &nw, STOF_DEVICE_CPU, &in[1]));
  const double ids[5] = {1, -5, 2, 1000000000, 0};
  for (int k = 0; k < 5; k++) stof_tensor_store(in[0], k, ids[k]);
  for (int k = 0; k < 3; k++) stof_tensor_store(in[1], k, 100 + (double)k);
  stof_tensor *b = run_with(&m.G, s, in);
  const double want[5] = {101, 100, 102, 102, 100};
  for (int k = 0; k < 5; k++) assert_true(stof_tensor_load(b, k) == want[k]);
  /* the interpreter refuses the same ids */
  stof_tensor *r = NULL;
  sh_expect_error(m.G.ctx, stof_interp_eval(m.G.g, 1, m.G.out, 2, m.G.in, (const stof_tensor *const *)in, &r),
                  STOF_ERR_RANGE, "load W: index -5 out of range");
  stof_tensor_free(in[0]);
  stof_tensor_free(in[1]);
  stof_tensor_free(b);
  stof_sched_free(s);
  sh_done(&m.G);
}

/* B[i] = A[(i * 10^9 // 1) // 10^9]: the inner value reaches 3 * 10^9 > 2^31. Index
 * arithmetic is 64-bit in the generated code (it used to wrap through int32_t and read
 * A[-2]); the index is proven in range, so it is not clamped. */
static void index_arithmetic_is_64_bit(void **state) {
  (void)state;
  mini m;
  mini_init(&m, 4, STOF_DTYPE_F32, 4);
  const stof_expr *big = ci(&m, 1000000000);
  const stof_expr *x = bin(&m, STOF_EXPR_FLOORDIV, bin(&m, STOF_EXPR_MUL, m.i, big), ci(&m, 1));
  mini_out(&m, ld(&m, m.A, bin(&m, STOF_EXPR_FLOORDIV, x, big)));
  stof_sched *s = sh_sched(&m.G);
  assert_false(sh_source_contains(&m.G, s, "(int32_t)stof_floordiv"));
  assert_true(sh_source_contains(&m.G, s, "((int64_t)stof_floordiv((int64_t)(((int64_t)stof_floordiv("));
  assert_false(sh_source_contains(&m.G, s, "stof_max_i64(("));
  sh_check_numeric(&m.G, s);
  stof_sched_free(s);
  sh_done(&m.G);
}

/* ---------------------------------------------------------------- split factors */

/* split(i, {INFER, 2^40}) on a loop of 3: the inner loop runs 3 iterations, guard-free
 * (it used to run 2^40 guarded-off ones); the trace keeps the factor and replays. */
static void split_far_above_the_extent_runs_the_extent(void **state) {
  (void)state;
  sh_graph G;
  sh_vec(&G, 3, STOF_DTYPE_F32);
  stof_sched *s = sh_sched(&G);
  int l[4], p[2];
  sh_loops(s, sh_block(s, "B"), l);
  stof_factor f[2] = {stof_factor_const(STOF_INFER), stof_factor_const(INT64_C(1) << 40)};
  SH_OK(G.ctx, stof_sched_split(s, l[0], 2, f, p));
  sh_expect_nest(s,
                 "for i.outer in 0..1:\n"
                 "  for i.inner in 0..3:\n"
                 "    let i = i.outer * 1099511627776 + i.inner\n"
                 "    B[i] = (A[i] * 3.0) - 1.0\n");
  assert_true(sh_source_contains(&G, s, " < INT64_C(3); ++l"));
  assert_false(sh_source_contains(&G, s, " < INT64_C(1099511627776)"));
  assert_false(sh_source_contains(&G, s, "< INT64_C(3)) {")); /* no guard */
  char *lua = sh_trace_lua(s);
  assert_non_null(strstr(lua, "{stof.INFER, 1099511627776}"));
  free(lua);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  sh_check_numeric(&G, s);
  sh_round_trip(&G, s);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  assert_true((double)(t1.tv_sec - t0.tv_sec) < 60.0); /* compiles included; the run itself is instant */
  stof_sched_free(s);
  sh_done(&G);
}

/* ---------------------------------------------------------------- traces */

/* D = A * 2, E = D + 1, F = E * 3; compute_inline(E), then group {E, F}: the Lua and the
 * JSON traces both replay it (the JSON replay used to fail: "block E was inlined"). */
static void group_after_inline_replays_from_json(void **state) {
  (void)state;
  sh_graph G;
  sh_chain(&G, 8); /* B = A * 2, C = B + 1 */
  stof_sched *s = sh_sched(&G);
  SH_OK(G.ctx, stof_sched_compute_inline(s, sh_block(s, "B")));
  const stof_op *ops[2] = {sh_op(&G, "B"), sh_op(&G, "C")};
  int g;
  SH_OK(G.ctx, stof_sched_group(s, 2, ops, &g));
  char *lua = sh_trace_lua(s);
  assert_non_null(strstr(lua, "s:group({\"B\", \"C\"})"));
  free(lua);
  sh_round_trip(&G, s); /* through JSON text */
  stof_sched_free(s);
  sh_done(&G);
}

int run_safety_tests(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(deep_chain_works_end_to_end),
      cmocka_unit_test(affine_load_outside_the_tensor_is_refused),
      cmocka_unit_test(shifted_load_past_the_end_is_refused),
      cmocka_unit_test(select_guarded_load_stays_unclamped),
      cmocka_unit_test(gather_clamps_out_of_range_ids),
      cmocka_unit_test(index_arithmetic_is_64_bit),
      cmocka_unit_test(split_far_above_the_extent_runs_the_extent),
      cmocka_unit_test(group_after_inline_replays_from_json),
  };
  return cmocka_run_group_tests_name("safety", tests, NULL, NULL);
}
