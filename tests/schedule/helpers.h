/*
 * Shared helpers of test_schedule: contexts with a leak check, expected errors, small TE
 * graphs (matmul, elementwise chains, bias + ReLU, softmax), and the three checks every
 * primitive gets: a golden loop nest, numbers against the reference interpreter on the C
 * backend (random inputs, outputs poisoned with NaN first), and a trace round trip.
 */
#ifndef STOF_TEST_SCHEDULE_HELPERS_H
#define STOF_TEST_SCHEDULE_HELPERS_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stof/core.h>
#include <stof/schedule.h>

/* ---------------------------------------------------------------- contexts and errors */

stof_ctx *sh_ctx(void);
/* Asserts nothing is left allocated, then frees ctx. */
void sh_ctx_done(stof_ctx *ctx);
/* Asserts got == want and that the context's message contains substr; clears the error. */
void sh_expect_error(stof_ctx *ctx, stof_status got, stof_status want, const char *substr);
#define SH_OK(ctx, call)                                                               \
  do {                                                                                 \
    stof_status sh_st_ = (call);                                                       \
    if (sh_st_ != STOF_OK) fail_msg("%s -> %s: %s", #call, stof_status_name(sh_st_),   \
                                    stof_ctx_message(ctx));                            \
  } while (0)

/* ---------------------------------------------------------------- graphs */

typedef struct sh_graph {
  stof_ctx *ctx;
  stof_graph *g;
  int nin, nout;
  const stof_op *in[8];   /* placeholders, in argument order */
  const stof_op *out[8];  /* outputs */
} sh_graph;

/* Each builder makes a new context and graph. */
/* C[i, j] = sum_k A[i, k] * B[k, j]; A [M, K], B [K, N], float32. */
void sh_matmul(sh_graph *G, int64_t M, int64_t N, int64_t K);
/* The same in dtype d throughout (A, B and C; a float16 C sums float16 products). */
void sh_matmul_dtype(sh_graph *G, int64_t M, int64_t N, int64_t K, stof_dtype d);
/* B[i] = A[i] * 3 - 1 over [n], of dtype d. */
void sh_vec(sh_graph *G, int64_t n, stof_dtype d);
/* B[i, j] = A[i, j] * 2 + 1 over [M, N], float32. */
void sh_elem2(sh_graph *G, int64_t M, int64_t N);
/* C = A @ W ([M, K] x [K, N]); D[i, j] = C[i, j] + bias[j]; E = max(D, 0). */
void sh_matmul_bias_relu(sh_graph *G, int64_t M, int64_t N, int64_t K);
/* Row softmax of X [M, N]: mx (max), e = exp(X - mx), sm (sum), P = e / sm. */
void sh_softmax(sh_graph *G, int64_t M, int64_t N);
/* S[i] = sum_{r, c} X[i, r, c] over [M, R, C]: two reduce axes. */
void sh_sum2(sh_graph *G, int64_t M, int64_t R, int64_t C);
/* B[i] = A[i] * 2; C[i] = B[i] + 1 over [n], float32. */
void sh_chain(sh_graph *G, int64_t n);
/* B[i] = A[i] * 2 over [n + 2]; C[i] = B[i] + B[i + 1] + B[i + 2] over [n] (a stencil). */
void sh_stencil(sh_graph *G, int64_t n);
/* S[i] = sum_k X[i, k] over [M, K] (sum), or max when max is set. */
void sh_rowsum(sh_graph *G, int64_t M, int64_t K, int max);
/* Layer norm of X [M, N] with gamma, beta [N]: mean (sum of X / N), var (sum of the
 * squared deviation / N), Y = (X - mean) * rsqrt(var + 1e-5) * gamma + beta. */
void sh_layernorm(sh_graph *G, int64_t M, int64_t N);
/* C = A @ W ([M, K] x [K, N]); D[i, j] = C[i, j] + bias[j]; E = GELU(D) (erf form). */
void sh_gemm_bias_gelu(sh_graph *G, int64_t M, int64_t N, int64_t K);
/* C[i, j] = sum_k float32(A[i, k]) * float32(B[k, j]); A [M, K], B [K, N] of dtype in
 * (float16 or bfloat16), C float32: what tensorize "mma_m16n8k16" matches. */
void sh_matmul_f16(sh_graph *G, int64_t M, int64_t N, int64_t K, stof_dtype in);
/* sh_matmul_f16, then D[i, j] = in(C[i, j] + float32(bias[j])) with bias [N] of dtype in;
 * inputs A, B, bias. */
void sh_matmul_f16_bias(sh_graph *G, int64_t M, int64_t N, int64_t K, stof_dtype in);
/* The same with B stored [N, K] and read B[j, k] when nk (torch's Linear weight layout). */
void sh_matmul_f16_bias_layout(sh_graph *G, int64_t M, int64_t N, int64_t K, stof_dtype in, int nk);
/* A batched Linear: D[b, s, n] = in(sum_k f32(A[b, s, k]) * f32(B[n, k]) + f32(bias[n])), A
 * [B, S, K], B [N, K] (torch's weight layout), bias [N]; C the sum. */
void sh_batched_matmul_f16_bias_nk(sh_graph *G, int64_t B, int64_t S, int64_t N, int64_t K, stof_dtype in);
/* Frees the graph, then checks for leaks and frees the context. */
void sh_done(sh_graph *G);
/* The op named name among the graph's ops. */
const stof_op *sh_op(sh_graph *G, const char *name);
/* The build arguments of G: its inputs, then its outputs, into args (16 at most); returns
 * their number. */
int sh_args(const sh_graph *G, const stof_op **args);

/* ---------------------------------------------------------------- schedules */

stof_sched *sh_sched(sh_graph *G);
int sh_block(stof_sched *s, const char *name);
/* get_loops into loops[]; returns their number. */
int sh_loops(stof_sched *s, int block, int *loops);
/* The loop nest text (malloc'd). */
char *sh_nest(stof_sched *s);
/* Asserts the loop nest is golden (prints both on a mismatch). */
void sh_expect_nest(stof_sched *s, const char *golden);
/* The CUDA source of s for its graph's arguments (sh_args), malloc'd. */
char *sh_cuda_source(sh_graph *G, stof_sched *s);
/* Fails naming the first of golden[0..n) that src lacks (src printed whole to stderr). */
void sh_expect_snippets(const char *src, const char *const *golden, size_t n);
/* CUDA code generation refuses s (stof_sched_cuda_check for sm_80 and stof_build_source
 * alike) with STOF_ERR_SCHEDULE and substr; extra (may be NULL) is one more argument. */
void sh_expect_cuda_illegal(sh_graph *G, stof_sched *s, const stof_op *extra, const char *substr);
/* Builds s for the C backend with the graph's inputs then outputs as arguments, runs it on
 * random inputs (seed) with NaN-poisoned outputs; out[i] gets output i (owned). */
void sh_run(sh_graph *G, stof_sched *s, uint64_t seed, stof_tensor **out);
/* The relative L2 error allowed against the interpreter for an output of dtype d: 1e-5
 * (f32), 1e-12 (f64), 1e-2 (f16/bf16), 1e-12 (integers: exact). */
double sh_tolerance(stof_dtype d);
/* sh_run against the reference interpreter: relative L2 below sh_tolerance; no NaN. */
void sh_check_numeric(sh_graph *G, stof_sched *s);
/* The same with relative L2 below tol for every output (tol <= 0: sh_tolerance). */
void sh_check_numeric_within(sh_graph *G, stof_sched *s, double tol);
/* Trace round trip: the Lua text looks right, and the JSON trace replayed into a fresh
 * schedule of the same outputs gives the same loop nest and the same numbers. */
void sh_round_trip(sh_graph *G, stof_sched *s);
/* All three: golden nest, numbers, round trip. */
void sh_check_all(sh_graph *G, stof_sched *s, const char *golden);
/* The Lua trace text (malloc'd). */
char *sh_trace_lua(stof_sched *s);
/* Does the C source built for s contain needle? */
int sh_source_contains(sh_graph *G, stof_sched *s, const char *needle);

/* The loop nest and the Lua trace of s, to check a failing primitive left it unchanged. */
typedef struct sh_snapshot {
  char *nest, *lua;
} sh_snapshot;
sh_snapshot sh_take(stof_sched *s);
/* Asserts s still has the snapshot's nest and trace; frees the snapshot. */
void sh_expect_same(stof_sched *s, sh_snapshot *before);
/* Splits loop into {INFER, factor}; parts[0..2) get the new loops. */
void sh_split(stof_sched *s, int loop, int64_t factor, int *parts);

#endif
