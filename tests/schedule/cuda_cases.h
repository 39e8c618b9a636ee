/*
 * The schedules the CUDA backend is tested with, in one table shared by two suites:
 * test_schedule compiles each with NVRTC for sm_80 and sm_90 (test_codegen_cuda.c, no GPU
 * needed) and test_schedule_gpu runs each on the GPU against the reference interpreter.
 * Adding a schedule is a builder and one line in the table (cuda_cases.c); both suites pick
 * it up. A case's build arguments are its graph's inputs, then its outputs (sh_args).
 */
#ifndef STOF_TEST_SCHEDULE_CUDA_CASES_H
#define STOF_TEST_SCHEDULE_CUDA_CASES_H

#include "helpers.h"

typedef struct sh_cuda_case {
  const char *name;
  /* Builds the case's graph into G (a new context: free with sh_done) and returns its
   * schedule (owned: stof_sched_free, before sh_done). */
  stof_sched *(*make)(sh_graph *G);
} sh_cuda_case;

extern const sh_cuda_case sh_cuda_cases[];
extern const int sh_cuda_ncase;

/* The case named name; fails the test when there is none. */
const sh_cuda_case *sh_cuda_case_find(const char *name);
/* The table as cmocka tests: tests[i] runs fn with state &sh_cuda_cases[i], named
 * "prefix/<case name>" (names live in names[0..sh_cuda_ncase), 96 bytes each). */
void sh_cuda_case_tests(struct CMUnitTest *tests, char (*names)[96], const char *prefix,
                        CMUnitTestFunction fn);

/* Binds loop 0 of every live block to blockIdx.x when it is data-parallel and then loop 1
 * to threadIdx.x when it is data-parallel too. */
void sh_bind_rows(stof_sched *s);

/* The tensor-core GEMM of examples/schedule_gemm_tensorcore.lua: CUDA blocks of 128 x 128
 * (blockIdx.y, x), 2 x 4 warps of 64 x 32 (threadIdx.z, y) accumulating in cache_write
 * "warp", k split 32 = 2 x 16 with the inner 16 x ... nest tensorized (mma_m16n8k16), A and B
 * tiles cache_read "shared" at k.0 and fetched by all threads with 8-element vectorized
 * copies. */
typedef struct sh_tensorcore {
  int64_t M, N, K;   /* multiples of 128, 128, 32 */
  stof_dtype dtype;  /* of A and B: float16 or bfloat16 */
  int epilogue;      /* 1: sh_matmul_f16_bias, D computed at the warps' loop; 0: sh_matmul_f16 */
  int stages;        /* the pragma pipeline_stages of k.0 (none when below 2) */
  int pad;           /* the pragma pad of the shared tiles (none when 0) */
  /* variations for the tests of what CUDA refuses (all 0 / NULL: as above) */
  unsigned unstaged;      /* bit i: input i is read from global memory (no shared tile) */
  const char *acc_scope;  /* the cache_write scope of C (NULL: "warp") */
  const char *warp_n_tag; /* the tag of the warps' column loop (NULL: "threadIdx.y") */
  int b_nk;               /* B stored [N, K] and read B[j, k] (with the epilogue only) */
} sh_tensorcore;
/* Builds t's graph into G (a new context) and returns its schedule (owned). */
stof_sched *sh_tensorcore_schedule(sh_graph *G, const sh_tensorcore *t);
/* D = f16(A @ B + bias) through wgmma (M a multiple of 128, N of 128, K of 64), the k loop
 * pipelined over `stages` buffers (none below 2): examples/schedule_gemm_tensorcore.lua's
 * STOF_GEMM_INTRIN=wgmma schedule. Owned. */
stof_sched *sh_wgmma_schedule(sh_graph *G, int64_t M, int64_t N, int64_t K, int stages);

#endif
