/* stof_sched_auto on the segments of model graphs (segments.c): for each, target "c" against
 * the interpreter and a trace round trip; target "cuda" compiled by NVRTC for sm_90 with the
 * expected number of kernels and no intermediate in global memory where the reductions go
 * under their output's rows, the C backend running that schedule against the interpreter,
 * and its trace replayed to the same CUDA source. Then the knobs (defaults, options, other
 * decisions replayed), the fallbacks (a reduction read off its rows, a GEMM-like block) and
 * the errors. STOF_AUTO_PRINT=1 prints every CUDA source. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "segments.h"

typedef struct auto_case {
  const char *name;
  void (*build)(sh_graph *G);
  int kernels;                  /* CUDA kernels expected */
  int temps;                    /* intermediates in global memory expected */
  const char *snippets[4];      /* in the CUDA source */
} auto_case;

static void bias_gelu_f32_odd(sh_graph *G) { sh_seg_bias_gelu(G, 7, 1000, STOF_DTYPE_F32, 0); }
static void bias_gelu_tanh_f16(sh_graph *G) { sh_seg_bias_gelu(G, 8, 64, STOF_DTYPE_F16, 1); }
static void bias_gelu_rows_of_3(sh_graph *G) { sh_seg_bias_gelu(G, 7, 3, STOF_DTYPE_F16, 0); }
static void swiglu_f16(sh_graph *G) { sh_seg_swiglu(G, 5, 48, STOF_DTYPE_F16); }
static void split_heads_f16(sh_graph *G) { sh_seg_split_heads(G, 2, 3, 4, 8, STOF_DTYPE_F16); }
static void merge_heads_f32(sh_graph *G) { sh_seg_merge_heads(G, 2, 3, 4, 8, STOF_DTYPE_F32); }
static void qkv_split_f16(sh_graph *G) { sh_seg_qkv_split(G, 2, 5, 2, 8, STOF_DTYPE_F16); }
static void rotary_f16(sh_graph *G) { sh_seg_rotary(G, 1, 2, 7, 16, STOF_DTYPE_F16); }
static void patches_f32(sh_graph *G) { sh_seg_patches(G, 2, 3, 8, 8, 4, STOF_DTYPE_F32); }
static void embedding_f16(sh_graph *G) { sh_seg_embedding(G, 7, 100, 64, STOF_DTYPE_F16); }
static void embedding_clamped_f32(sh_graph *G) { sh_seg_embedding(G, 7, 37, 24, STOF_DTYPE_F32); }
static void layernorm_f32_odd(sh_graph *G) { sh_seg_layernorm(G, 7, 1000, STOF_DTYPE_F32, 0); }
static void layernorm_rows_of_3(sh_graph *G) { sh_seg_layernorm(G, 7, 3, STOF_DTYPE_F32, 0); }
static void layernorm_residual_f16(sh_graph *G) { sh_seg_layernorm(G, 8, 64, STOF_DTYPE_F16, 1); }
static void layernorm_residual_out_f16(sh_graph *G) { sh_seg_layernorm(G, 5, 48, STOF_DTYPE_F16, 2); }
static void rmsnorm_f16(sh_graph *G) { sh_seg_rmsnorm(G, 7, 64, STOF_DTYPE_F16); }
static void softmax_f32_odd(sh_graph *G) { sh_seg_softmax(G, 2, 7, 1000, STOF_DTYPE_F32); }
static void softmax_f16_rows_of_3(sh_graph *G) { sh_seg_softmax(G, 1, 7, 3, STOF_DTYPE_F16); }
static void row_norm_f16(sh_graph *G) { sh_seg_row_norm(G, 7, 64, STOF_DTYPE_F16); }
static void mirrored_rowsum(sh_graph *G) { sh_seg_mirrored_rowsum(G, 7, 40); }
static void rowsum_output(sh_graph *G) { sh_rowsum(G, 7, 100, 0); }
static void matmul_bias_relu(sh_graph *G) { sh_matmul_bias_relu(G, 8, 16, 4); }

#define VEC16 "= *(const uint4 *)&"
#define XR(op, b) "all-reduce (" op ") of " b " over threadIdx.x"

static const auto_case cases[] = {
    {"bias_gelu_f32_odd", bias_gelu_f32_odd, 1, 0, {VEC16, "*(uint4 *)&"}},
    {"bias_gelu_tanh_f16", bias_gelu_tanh_f16, 1, 0, {VEC16, "*(uint4 *)&"}},
    {"bias_gelu_rows_of_3", bias_gelu_rows_of_3, 1, 0, {"stof_k0_Y"}},
    {"swiglu_f16", swiglu_f16, 1, 0, {VEC16}},
    {"split_heads_f16", split_heads_f16, 1, 0, {VEC16, "*(uint4 *)&"}},
    {"merge_heads_f32", merge_heads_f32, 1, 0, {"*(uint4 *)&"}},
    {"qkv_split_f16", qkv_split_f16, 3, 0, {"stof_k0_Q", "stof_k1_K", "stof_k2_V"}},
    {"rotary_f16", rotary_f16, 1, 0, {"*(uint4 *)&"}},
    {"patches_f32", patches_f32, 1, 0, {"stof_k0_Y"}},
    {"embedding_f16", embedding_f16, 1, 0, {"*(uint4 *)&"}},
    {"embedding_clamped_f32", embedding_clamped_f32, 1, 0, {"*(uint4 *)&"}},
    {"layernorm_f32_odd", layernorm_f32_odd, 1, 0, {XR("sum", "mean"), XR("sum", "var"), VEC16}},
    {"layernorm_rows_of_3", layernorm_rows_of_3, 1, 0, {XR("sum", "mean"), XR("sum", "var")}},
    {"layernorm_residual_f16", layernorm_residual_f16, 1, 0, {XR("sum", "mean"), XR("sum", "var"), VEC16}},
    {"layernorm_residual_out_f16", layernorm_residual_out_f16, 2, 0, {XR("sum", "mean"), "stof_k0_H", "stof_k1_Y"}},
    {"rmsnorm_f16", rmsnorm_f16, 1, 0, {XR("sum", "ms"), VEC16}},
    {"softmax_f32_odd", softmax_f32_odd, 1, 0, {XR("max", "mx"), XR("sum", "sm"), VEC16}},
    {"softmax_f16_rows_of_3", softmax_f16_rows_of_3, 1, 0, {XR("max", "mx"), XR("sum", "sm")}},
    {"row_norm_f16", row_norm_f16, 1, 0, {XR("sum", "n2")}},
    {"mirrored_rowsum", mirrored_rowsum, 2, 1, {XR("sum", "S"), "stof_k1_Y"}},
    {"rowsum_output", rowsum_output, 1, 0, {XR("sum", "S")}},
    {"matmul_bias_relu", matmul_bias_relu, 1, 0, {XR("sum", "C")}},
};
#define NCASE ((int)(sizeof cases / sizeof cases[0]))

static int count(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle)) n++;
  return n;
}

/* Intermediates in global memory: "alloc" lines of the loop nest not compacted "at" a loop. */
static int global_temps(stof_sched *s) {
  char *nest = sh_nest(s);
  int n = 0;
  for (char *line = strtok(nest, "\n"); line; line = strtok(NULL, "\n"))
    if (strncmp(line, "alloc ", 6) == 0 && !strstr(line, " at ")) n++;
  free(nest);
  return n;
}

static char *cuda_source(sh_graph *G, stof_sched *s) {
  const stof_op *args[16];
  int n = sh_args(G, args);
  size_t size = 0;
  SH_OK(G->ctx, stof_sched_cuda_check(s, n, args, "sm_90", &size));
  assert_true(size > 0);
  return sh_cuda_source(G, s);
}

/* src with the ids of axis variables dropped (v12_i -> v_i): a replay inlines again, making
 * new ops with new axes. Malloc'd. */
static char *without_var_ids(const char *src) {
  char *out = malloc(strlen(src) + 1), *o = out;
  for (const char *p = src; *p;) {
    int start = p == src || !(p[-1] == '_' || (p[-1] >= 'a' && p[-1] <= 'z') || (p[-1] >= 'A' && p[-1] <= 'Z') ||
                              (p[-1] >= '0' && p[-1] <= '9'));
    const char *q = p + 1;
    while (*q >= '0' && *q <= '9') q++;
    if (start && *p == 'v' && q > p + 1 && *q == '_') {
      *o++ = 'v';
      p = q;
      continue;
    }
    *o++ = *p++;
  }
  *o = 0;
  return out;
}

/* The trace of s replayed into a fresh schedule gives the same CUDA source (up to the ids of
 * axis variables). */
static void replays_to_same_source(sh_graph *G, stof_sched *s, const char *src0) {
  char *src = without_var_ids(src0);
  stof_trace *t;
  stof_sched *fresh;
  SH_OK(G->ctx, stof_sched_trace(s, &t));
  SH_OK(G->ctx, stof_sched_fresh(s, &fresh));
  SH_OK(G->ctx, stof_sched_replay(t, fresh));
  char *again0 = sh_cuda_source(G, fresh), *again = without_var_ids(again0);
  free(again0);
  if (strcmp(src, again) != 0) {
    FILE *f = fopen("/tmp/auto_a.cu", "w"), *g = fopen("/tmp/auto_b.cu", "w");
    if (f) fputs(src, f), fclose(f);
    if (g) fputs(again, g), fclose(g);
    fail_msg("the replayed trace gives another CUDA source (/tmp/auto_a.cu, /tmp/auto_b.cu)");
  }
  free(again);
  free(src);
  stof_sched_free(fresh);
  stof_trace_free(t);
}

static void segment_on_c(void **state) {
  const auto_case *c = *state;
  sh_graph G;
  c->build(&G);
  stof_sched *s = sh_auto(&G, "c");
  assert_int_equal(global_temps(s), c->temps);
  sh_check_numeric(&G, s);
  sh_round_trip(&G, s);
  stof_sched_free(s);
  sh_done(&G);
}

static void segment_on_cuda(void **state) {
  const auto_case *c = *state;
  sh_graph G;
  c->build(&G);
  stof_sched *s = sh_auto(&G, "cuda");
  char *src = cuda_source(&G, s);
  if (getenv("STOF_AUTO_PRINT")) {
    char *nest = sh_nest(s);
    fprintf(stderr, "==== %s\n%s\n%s\n", c->name, nest, src);
    free(nest);
  }
  if (count(src, "extern \"C\" __global__") != c->kernels) {
    fprintf(stderr, "%s\n", src);
    fail_msg("%s: %d kernels, expected %d", c->name, count(src, "extern \"C\" __global__"), c->kernels);
  }
  assert_int_equal(global_temps(s), c->temps);
  /* every root nest on the GPU's threads: none left serial (one thread) */
  int64_t iters = -1;
  char serial[64];
  SH_OK(G.ctx, stof_sched_serial_nest(s, &iters, serial, sizeof serial));
  if (iters != 0) fail_msg("%s: block %s left serial (%lld iterations)", c->name, serial, (long long)iters);
  for (int i = 0; i < 4 && c->snippets[i]; i++) sh_expect_snippets(src, &c->snippets[i], 1);
  sh_check_numeric(&G, s); /* the C backend runs the CUDA schedule serially */
  replays_to_same_source(&G, s, src);
  free(src);
  stof_sched_free(s);
  sh_done(&G);
}

/* ---------------------------------------------------------------- knobs */

static int64_t knob(stof_sched *s, const char *name) {
  int k;
  int64_t v;
  SH_OK(stof_sched_ctx(s), stof_sched_find_knob(s, name, &k));
  SH_OK(stof_sched_ctx(s), stof_sched_knob_info(s, k, NULL, NULL, NULL, &v));
  return v;
}

/* BERT's layer norm: rows of 768 halves are 96 runs of 8, one per thread. */
static void layernorm_768_defaults(void **state) {
  (void)state;
  sh_graph G;
  sh_seg_layernorm(&G, 4096, 768, STOF_DTYPE_F16, 0);
  stof_sched *s = sh_auto(&G, "cuda");
  assert_int_equal(knob(s, "threads"), 96);
  assert_int_equal(knob(s, "vec"), 8);
  char *src = cuda_source(&G, s);
  static const char *const golden[] = {" *   stof_k0_Y (4096, 1, 1; 96, 1, 1)\n", XR("sum", "mean"), VEC16,
                                       "*(uint4 *)&"};
  sh_expect_snippets(src, golden, 4);
  assert_int_equal(count(src, "extern \"C\" __global__"), 1);
  assert_int_equal(global_temps(s), 0);
  free(src);
  stof_sched_free(s);
  sh_done(&G);
}

/* opts override the default decisions; a vec that does not divide falls to one that does. */
static void options_override_defaults(void **state) {
  (void)state;
  sh_graph G;
  sh_seg_layernorm(&G, 64, 768, STOF_DTYPE_F16, 0);
  stof_sched *s = sh_sched(&G);
  stof_sched_auto_opts o = {128, 16};
  SH_OK(G.ctx, stof_sched_auto(s, "cuda", &o));
  assert_int_equal(knob(s, "threads"), 128);
  assert_int_equal(knob(s, "vec"), 8);
  char *src = cuda_source(&G, s);
  sh_expect_snippets(src, (const char *const[]){" *   stof_k0_Y (64, 1, 1; 128, 1, 1)\n"}, 1);
  free(src);
  stof_sched_free(s);
  sh_done(&G);
}

/* Another decision of each knob, replayed: still compiles, still right. */
static void other_decisions_replay(void **state) {
  (void)state;
  sh_graph G;
  sh_seg_softmax(&G, 1, 6, 512, STOF_DTYPE_F16);
  stof_sched *s = sh_auto(&G, "cuda");
  stof_trace *t;
  SH_OK(G.ctx, stof_sched_trace(s, &t));
  int kt, kv, nt, nv;
  SH_OK(G.ctx, stof_sched_find_knob(s, "threads", &kt));
  SH_OK(G.ctx, stof_sched_find_knob(s, "vec", &kv));
  SH_OK(G.ctx, stof_sched_knob_info(s, kt, NULL, &nt, NULL, NULL));
  SH_OK(G.ctx, stof_sched_knob_info(s, kv, NULL, &nv, NULL, NULL));
  for (int dt = 0; dt < nt; dt += nt > 2 ? nt - 1 : 1)
    for (int dv = 0; dv < nv; dv++) {
      SH_OK(G.ctx, stof_trace_set_decision(t, "threads", dt));
      SH_OK(G.ctx, stof_trace_set_decision(t, "vec", dv));
      stof_sched *r;
      SH_OK(G.ctx, stof_sched_fresh(s, &r));
      SH_OK(G.ctx, stof_sched_replay(t, r));
      free(cuda_source(&G, r));
      sh_check_numeric(&G, r);
      stof_sched_free(r);
    }
  stof_trace_free(t);
  stof_sched_free(s);
  sh_done(&G);
}

/* Several kernels: knobs named after their blocks. */
static void knobs_per_kernel(void **state) {
  (void)state;
  sh_graph G;
  sh_seg_qkv_split(&G, 2, 5, 2, 8, STOF_DTYPE_F16);
  stof_sched *s = sh_auto(&G, "cuda");
  assert_int_equal(knob(s, "Q.vec"), 8);
  assert_int_equal(knob(s, "V.threads"), 32);
  stof_sched_free(s);
  sh_done(&G);
}

/* ---------------------------------------------------------------- errors */

static void errors_leave_schedule_unchanged(void **state) {
  (void)state;
  sh_graph G;
  sh_seg_rmsnorm(&G, 4, 32, STOF_DTYPE_F32);
  stof_sched *s = sh_sched(&G);
  sh_snapshot before = sh_take(s);
  sh_expect_error(G.ctx, stof_sched_auto(s, "opencl", NULL), STOF_ERR_ARG, "auto: unknown target \"opencl\"");
  stof_sched_auto_opts bad = {48, 0};
  sh_expect_error(G.ctx, stof_sched_auto(s, "cuda", &bad), STOF_ERR_ARG, "auto: threads = 48");
  stof_sched_auto_opts badv = {0, 3};
  sh_expect_error(G.ctx, stof_sched_auto(s, "cuda", &badv), STOF_ERR_ARG, "auto: vec = 3");
  sh_expect_same(s, &before);
  SH_OK(G.ctx, stof_sched_auto(s, "c", NULL));
  sh_expect_error(G.ctx, stof_sched_auto(s, "cuda", NULL), STOF_ERR_SCHEDULE, "auto: the schedule is not fresh");
  stof_sched_free(s);
  sh_done(&G);
}

static int64_t serial_iters(sh_graph *G, stof_sched *s, char *name) {
  int64_t n = -1;
  SH_OK(G->ctx, stof_sched_serial_nest(s, &n, name, 64));
  return n;
}

static int loop_of(sh_graph *G, stof_sched *s, const char *block, int i, int *blk) {
  int loops[STOF_SCHED_MAX_LOOPS], nl;
  SH_OK(G->ctx, stof_sched_get_block(s, block, blk));
  SH_OK(G->ctx, stof_sched_get_loops(s, *blk, STOF_SCHED_MAX_LOOPS, loops, &nl));
  assert_true(i < nl);
  return loops[i];
}

/* stof_sched_serial_nest: a fresh RMS norm's nests are serial (the largest: 8 x 32); one
 * bound to a block index is not; the C target's auto leaves them serial, CUDA's binds them.
 * A block computed at a serial nest's loop adds its work there (C = A @ W at D's row loop:
 * 64 x 512 x 512 iterations, not D's 64 x 512); a group member folds into its anchor at
 * code generation, so a bound anchor makes it parallel (review: it was reported serial). */
static void serial_nests_are_reported(void **state) {
  (void)state;
  sh_graph G;
  char name[64];
  sh_seg_rmsnorm(&G, 8, 32, STOF_DTYPE_F32);
  stof_sched *s = sh_sched(&G);
  assert_int_equal(serial_iters(&G, s, name), 8 * 32);
  int blk, l = loop_of(&G, s, name, 0, &blk);
  SH_OK(G.ctx, stof_sched_bind(s, l, "blockIdx.x"));
  char name2[64];
  int64_t n2 = serial_iters(&G, s, name2);
  assert_true(strcmp(name, name2) != 0 && n2 <= 8 * 32); /* that one is parallel now */
  stof_sched_free(s);
  s = sh_auto(&G, "c");
  assert_true(serial_iters(&G, s, name) >= 32);
  stof_sched_free(s);
  s = sh_auto(&G, "cuda");
  assert_int_equal(serial_iters(&G, s, name), 0);
  assert_string_equal(name, "");
  stof_sched_free(s);
  sh_done(&G);

  sh_matmul_bias_relu(&G, 64, 512, 512);
  s = sh_sched(&G);
  int e, c, row = loop_of(&G, s, "D", 0, &e);
  loop_of(&G, s, "C", 0, &c);
  SH_OK(G.ctx, stof_sched_compute_at(s, c, row));
  assert_true(serial_iters(&G, s, name) >= (int64_t)64 * 512 * 512);
  assert_string_equal(name, "D");
  stof_sched_free(s);
  /* D (bias) and E (relu) grouped; E's and C's loops bound: D folds into E's kernel */
  s = sh_sched(&G);
  int d;
  SH_OK(G.ctx, stof_sched_get_block(s, "D", &d));
  const stof_op *ops[2] = {stof_sched_block_op(s, d), NULL};
  SH_OK(G.ctx, stof_sched_get_block(s, "E", &e));
  ops[1] = stof_sched_block_op(s, e);
  assert_int_equal(serial_iters(&G, s, name), (int64_t)64 * 512 * 512); /* C, unbound */
  int g;
  SH_OK(G.ctx, stof_sched_group(s, 2, ops, &g));
  for (int k = 0; k < 2; k++) {
    const char *b = k ? "C" : "E";
    SH_OK(G.ctx, stof_sched_bind(s, loop_of(&G, s, b, 0, &blk), "blockIdx.x"));
    SH_OK(G.ctx, stof_sched_bind(s, loop_of(&G, s, b, 1, &blk), "threadIdx.x"));
  }
  assert_int_equal(serial_iters(&G, s, name), 0);
  stof_sched_free(s);
  sh_done(&G);
}

/* The C build of a 64 x 64 layer norm runs in well under a few milliseconds. */
static void c_target_is_quick(void **state) {
  (void)state;
  sh_graph G;
  sh_seg_layernorm(&G, 64, 64, STOF_DTYPE_F32, 1);
  stof_sched *s = sh_auto(&G, "c");
  const stof_op *args[16];
  int n = sh_args(&G, args);
  stof_func *f;
  SH_OK(G.ctx, stof_build(s, n, args, "c", &f));
  stof_tensor *ts[16];
  for (int i = 0; i < n; i++)
    SH_OK(G.ctx, stof_tensor_rand(G.ctx, args[i]->dtype, args[i]->ndim, args[i]->shape, 1 + (uint64_t)i, &ts[i]));
  struct timespec t0, t1;
  SH_OK(G.ctx, stof_func_call(f, n, ts));
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int r = 0; r < 10; r++) SH_OK(G.ctx, stof_func_call(f, n, ts));
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double ms = ((double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-6) / 10;
  print_message("  layer norm 64 x 64 (C backend): %.3f ms per call\n", ms);
  assert_true(ms < 50); /* generous: sanitizer builds */
  for (int i = 0; i < n; i++) stof_tensor_free(ts[i]);
  stof_func_free(f);
  stof_sched_free(s);
  sh_done(&G);
}

int run_auto_tests(void) {
  struct CMUnitTest per_case[2 * NCASE];
  static char names[2 * NCASE][96];
  for (int i = 0; i < NCASE; i++) {
    snprintf(names[2 * i], sizeof names[0], "auto_c/%s", cases[i].name);
    snprintf(names[2 * i + 1], sizeof names[0], "auto_cuda/%s", cases[i].name);
    struct CMUnitTest tc = {names[2 * i], segment_on_c, NULL, NULL, (void *)&cases[i]};
    struct CMUnitTest tg = {names[2 * i + 1], segment_on_cuda, NULL, NULL, (void *)&cases[i]};
    per_case[2 * i] = tc;
    per_case[2 * i + 1] = tg;
  }
  int failed = _cmocka_run_group_tests("auto_segments", per_case, (size_t)(2 * NCASE), NULL, NULL);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(layernorm_768_defaults),
      cmocka_unit_test(options_override_defaults),
      cmocka_unit_test(other_decisions_replay),
      cmocka_unit_test(knobs_per_kernel),
      cmocka_unit_test(serial_nests_are_reported),
      cmocka_unit_test(errors_leave_schedule_unchanged),
      cmocka_unit_test(c_target_is_quick),
  };
  return failed + cmocka_run_group_tests_name("auto", tests, NULL, NULL);
}
