/*
 * CUDA C code from the loop IR: one `extern "C" __global__` kernel per root block (a block
 * and the blocks computed at its loops), in the lowering's (topological) order; a group's
 * members are first folded into one root nest (fuse_groups.c). Every kernel takes the same
 * parameters: the build's tensors in the order given (placeholders const), then the
 * intermediate buffers that live in global memory (allocated by the run time), so the
 * launcher passes one list to all.
 *
 * Threads: a loop bound to blockIdx.x/y/z or threadIdx.x/y/z is not a loop but the built-in
 * index (with a guard when the kernel launches more than its extent); the launch extent of
 * a tag is the largest extent of the loops bound to it (1 when none is). Every other loop
 * runs serially in each thread. A kernel is therefore each thread running the C backend's
 * nest with its bound loops fixed, which is right when (checked here, STOF_ERR_SCHEDULE):
 *  - loops of different blocks may share a tag; one inside another only when the inner one
 *    fills a shared buffer (cooperative fetching); no reduce loop is bound to blockIdx (a
 *    reduce loop bound to threadIdx is a reduction across the threads of the CUDA block:
 *    codegen_cuda_reduce.c; its result is in every thread);
 *  - threadIdx extents multiply to at most 1024 (x, y <= 1024, z <= 64), gridDim.y and z
 *    are at most 65535;
 *  - every store into memory that other threads see (an argument or a global intermediate)
 *    lies under a loop bound to every tag the kernel launches more than once (else several
 *    threads would write, or accumulate into, the same element);
 *  - an intermediate compacted under a loop lives in one of: a thread's local array (the
 *    loop lies under loops bound to every launched tag, or every thread computes all of it:
 *    its block binds no loop, or it is a cross-thread reduction's replicated result); the
 *    CUDA block's dynamic shared memory (scope "shared": bound inference relaxes the
 *    threadIdx loops, barriers surround the block filling it, which no guard may enclose;
 *    pragma "pipeline_stages" keeps S copies filled ahead by cp.async); a warp's or a
 *    warpgroup's accumulator fragments (scope "warp", written by a tensorized block:
 *    mma.sync or wgmma, whose operands are in shared memory, swizzled for wgmma).
 *
 * Types: f16 and bf16 are stored as __half and __nv_bfloat16 (cuda_fp16.h, cuda_bf16.h)
 * and compute in float; the other rules (floor division, saturating casts, NaN-propagating
 * max/min) are the C backend's, with the same helpers written as device functions. An f16
 * or bf16 reduction on the per-thread path combines in a float32 accumulator private to
 * the thread (declared at the kernel's top, without the dimensions of loops bound to
 * thread indices) and rounds into its buffer once (lower.c's final nest).
 * vectorize and unroll become `#pragma unroll`; in a vectorized loop, the loads and the
 * store of arguments that move V contiguous, V-aligned elements become one 4-, 8- or
 * 16-byte access each (emit_vector_loop), the others stay scalar; a vectorized copy from
 * global into shared memory becomes cp.async.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "schedule_int.h"

/* Index and loop variables are int64_t; where every tensor has fewer than 2^30 elements and
 * no value is int64, they are 32-bit (half the integer instructions: index arithmetic is
 * much of a generated kernel's work). */
static const char prelude_idx64[] =
    "#include <cuda_fp16.h>\n"
    "#include <cuda_bf16.h>\n"
    "\n"
    "typedef long long stof_i64_t;\n"
    "#define INT64_C(x) x##LL\n";
static const char prelude_idx32[] =
    "#include <cuda_fp16.h>\n"
    "#include <cuda_bf16.h>\n"
    "\n"
    "typedef int stof_i64_t; /* 32-bit indices: every tensor has fewer than 2^30 elements */\n"
    "#define INT64_C(x) x\n";
static const char prelude[] =
    "#define int64_t stof_i64_t\n"
    "#define int32_t int\n"
    "#define uint8_t unsigned char\n"
    "#undef INT64_MIN\n#undef INT64_MAX\n#undef INT32_MIN\n#undef INT32_MAX\n#undef NAN\n#undef INFINITY\n"
    "#define INT64_MAX 9223372036854775807LL\n"
    "#define INT64_MIN (-INT64_MAX - 1LL)\n"
    "#define INT32_MAX 2147483647\n"
    "#define INT32_MIN (-INT32_MAX - 1)\n"
    "#define NAN __int_as_float(0x7fffffff)\n"
    "#define INFINITY __int_as_float(0x7f800000)\n"
    "#define STOF_D static __device__ __forceinline__\n"
    "\n"
    "STOF_D float stof_h2f(__half h) { return __half2float(h); }\n"
    "STOF_D __half stof_f2h(float f) { return __float2half_rn(f); }\n"
    "STOF_D float stof_bf2f(__nv_bfloat16 b) { return __bfloat162float(b); }\n"
    "STOF_D __nv_bfloat16 stof_f2bf(float f) { return __float2bfloat16_rn(f); }\n"
    "STOF_D float stof_round_f16(float f) { return stof_h2f(stof_f2h(f)); }\n"
    "STOF_D float stof_round_bf16(float f) { return stof_bf2f(stof_f2bf(f)); }\n"
    "STOF_D int64_t stof_floordiv(int64_t a, int64_t b) {\n"
    "  if (b == 0) return 0;\n"
    "  int64_t q = a / b;\n"
    "  if (a % b != 0 && ((a < 0) != (b < 0))) q--;\n"
    "  return q;\n"
    "}\n"
    "STOF_D int64_t stof_floormod(int64_t a, int64_t b) {\n"
    "  if (b == 0) return 0;\n"
    "  int64_t r = a % b;\n"
    "  if (r != 0 && ((r < 0) != (b < 0))) r += b;\n"
    "  return r;\n"
    "}\n"
    "STOF_D double stof_fmod(double a, double b) { double r = fmod(a, b); return r != 0 && (r < 0) != (b < 0) ? r + b : r; }\n"
    "STOF_D float stof_fmodf(float a, float b) { return (float)stof_fmod(a, b); }\n"
    "STOF_D int32_t stof_to_i32(double v) {\n"
    "  if (v != v) return 0;\n"
    "  if (v >= 2147483647.0) return INT32_MAX;\n"
    "  if (v <= -2147483648.0) return INT32_MIN;\n"
    "  return (int32_t)v;\n"
    "}\n"
    "STOF_D int64_t stof_to_i64(double v) {\n"
    "  if (v != v) return 0;\n"
    "  if (v >= 9.2233720368547758e18) return INT64_MAX;\n"
    "  if (v <= -9.2233720368547758e18) return INT64_MIN;\n"
    "  return (int64_t)v;\n"
    "}\n"
    "#define STOF_MINMAX(T, S) \\\n"
    "  STOF_D T stof_min_##S(T a, T b) { return a < b ? a : b; } \\\n"
    "  STOF_D T stof_max_##S(T a, T b) { return a > b ? a : b; }\n"
    "STOF_MINMAX(float, f32)\n"
    "STOF_MINMAX(double, f64)\n"
    "STOF_MINMAX(int32_t, i32)\n"
    "STOF_MINMAX(int64_t, i64)\n"
    "STOF_D int32_t stof_abs_i32(int32_t a) { return a < 0 ? -a : a; }\n"
    "STOF_D int64_t stof_abs_i64(int64_t a) { return a < 0 ? -a : a; }\n"
    "\n"
    "/* asynchronous copies global -> shared (sm_80+) */\n"
    "STOF_D unsigned stof_smem_u32(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }\n"
    "template <int N> STOF_D void stof_cp_async(void *dst, const void *src) {\n"
    "#if __CUDA_ARCH__ >= 800\n"
    "  if (N == 16) asm volatile(\"cp.async.cg.shared.global [%0], [%1], 16;\\n\" :: \"r\"(stof_smem_u32(dst)), \"l\"(src) : \"memory\");\n"
    "  else asm volatile(\"cp.async.ca.shared.global [%0], [%1], %2;\\n\" :: \"r\"(stof_smem_u32(dst)), \"l\"(src), \"n\"(N) : \"memory\");\n"
    "#else\n"
    "  for (int i = 0; i < N; i++) ((unsigned char *)dst)[i] = ((const unsigned char *)src)[i];\n"
    "#endif\n"
    "}\n"
    "STOF_D void stof_cp_async_commit() {\n"
    "#if __CUDA_ARCH__ >= 800\n"
    "  asm volatile(\"cp.async.commit_group;\\n\" ::: \"memory\");\n"
    "#endif\n"
    "}\n"
    "template <int N> STOF_D void stof_cp_async_wait() {\n"
    "#if __CUDA_ARCH__ >= 800\n"
    "  asm volatile(\"cp.async.wait_group %0;\\n\" :: \"n\"(N) : \"memory\");\n"
    "#endif\n"
    "}\n"
    "STOF_D void stof_cp_async_wait_all() {\n"
    "#if __CUDA_ARCH__ >= 800\n"
    "  asm volatile(\"cp.async.wait_all;\\n\" ::: \"memory\");\n"
    "#endif\n"
    "}\n"
    "\n"
    "/* tensorize mma_m16n8k16: the warp adds A[16 TM x 16 TK] B[16 TK x 8 TN] (row-major in\n"
    " * shared memory, rows 16-byte aligned; with BT, B is stored transposed, [8 TN x 16 TK]:\n"
    " * mma's column-major B operand, read by ldmatrix without .trans) into its accumulator fragments\n"
    " * acc[(m * nt + n) * 4 + e] (tile m, n of 16 x 8; element e: row lane / 4 + 8 (e / 2),\n"
    " * column 2 (lane % 4) + e % 2). threadIdx.x is the lane. The fragments of k-step kk + 1\n"
    " * are loaded (ldmatrix) before the mma of step kk are issued, so that the loads' latency\n"
    " * hides under them. */\n"
    "#define STOF_MMA(NAME, T, PTX)                                                                       \\\n"
    "  STOF_D void NAME##_frag(unsigned (*af)[4], unsigned (*bf)[2], int tm, int tn, const T *a, int64_t lda, \\\n"
    "                          const T *b, int64_t ldb, int bt) {                                         \\\n"
    "    const unsigned lane = threadIdx.x & 31u;                                                         \\\n"
    "    _Pragma(\"unroll\") for (int m = 0; m < tm; ++m) {                                                 \\\n"
    "      unsigned p = stof_smem_u32(a + (m * 16 + (lane & 15)) * lda + (lane >> 4) * 8);                \\\n"
    "      asm volatile(\"ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\\n\"                 \\\n"
    "                   : \"=r\"(af[m][0]), \"=r\"(af[m][1]), \"=r\"(af[m][2]), \"=r\"(af[m][3]) : \"r\"(p));       \\\n"
    "    }                                                                                                \\\n"
    "    if (bt) {                                                                                        \\\n"
    "      _Pragma(\"unroll\") for (int n = 0; n < tn; n += 2) {                                            \\\n"
    "        unsigned p = stof_smem_u32(b + ((n + (n + 1 < tn ? (lane >> 4) : 0)) * 8 + (lane & 7)) * ldb +   \\\n"
    "                                   ((lane >> 3) & 1) * 8);                                         \\\n"
    "        if (n + 1 < tn)                                                                              \\\n"
    "          asm volatile(\"ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\\n\"             \\\n"
    "                       : \"=r\"(bf[n][0]), \"=r\"(bf[n][1]), \"=r\"(bf[n + 1][0]), \"=r\"(bf[n + 1][1])      \\\n"
    "                       : \"r\"(p));                                                                    \\\n"
    "        else                                                                                         \\\n"
    "          asm volatile(\"ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\\n\"                   \\\n"
    "                       : \"=r\"(bf[n][0]), \"=r\"(bf[n][1]) : \"r\"(p));                                   \\\n"
    "      }                                                                                              \\\n"
    "      return;                                                                                        \\\n"
    "    }                                                                                                \\\n"
    "    _Pragma(\"unroll\") for (int n = 0; n < tn; n += 2) {                                              \\\n"
    "      if (n + 1 < tn) {                                                                              \\\n"
    "        unsigned p = stof_smem_u32(b + (lane & 15) * ldb + n * 8 + (lane >> 4) * 8);                 \\\n"
    "        asm volatile(\"ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\\n\"         \\\n"
    "                     : \"=r\"(bf[n][0]), \"=r\"(bf[n][1]), \"=r\"(bf[n + 1][0]), \"=r\"(bf[n + 1][1])        \\\n"
    "                     : \"r\"(p));                                                                      \\\n"
    "      } else {                                                                                       \\\n"
    "        unsigned p = stof_smem_u32(b + (lane & 15) * ldb + n * 8);                                   \\\n"
    "        asm volatile(\"ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\\n\"               \\\n"
    "                     : \"=r\"(bf[n][0]), \"=r\"(bf[n][1]) : \"r\"(p));                                     \\\n"
    "      }                                                                                              \\\n"
    "    }                                                                                                \\\n"
    "  }                                                                                                  \\\n"
    "  template <int TM, int TN, int TK, int BT>                                                          \\\n"
    "  STOF_D void NAME(float *acc, int nt, const T *a, int64_t lda, const T *b, int64_t ldb) {           \\\n"
    "    unsigned af[2][TM][4], bf[2][TN + 1][2];                                                         \\\n"
    "    NAME##_frag(af[0], bf[0], TM, TN, a, lda, b, ldb, BT);                                           \\\n"
    "    _Pragma(\"unroll\") for (int kk = 0; kk < TK; ++kk) {                                              \\\n"
    "      if (kk + 1 < TK)                                                                               \\\n"
    "        NAME##_frag(af[(kk + 1) & 1], bf[(kk + 1) & 1], TM, TN, a + (kk + 1) * 16, lda,              \\\n"
    "                    b + (kk + 1) * 16 * (BT ? 1 : ldb), ldb, BT);                                    \\\n"
    "      _Pragma(\"unroll\") for (int m = 0; m < TM; ++m)                                                 \\\n"
    "      _Pragma(\"unroll\") for (int n = 0; n < TN; ++n) {                                               \\\n"
    "        float *c = acc + (m * nt + n) * 4;                                                           \\\n"
    "        asm volatile(\"mma.sync.aligned.m16n8k16.row.col.f32.\" PTX \".\" PTX \".f32 \"                    \\\n"
    "                     \"{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\\n\"                       \\\n"
    "                     : \"+f\"(c[0]), \"+f\"(c[1]), \"+f\"(c[2]), \"+f\"(c[3])                                \\\n"
    "                     : \"r\"(af[kk & 1][m][0]), \"r\"(af[kk & 1][m][1]), \"r\"(af[kk & 1][m][2]),          \\\n"
    "                       \"r\"(af[kk & 1][m][3]), \"r\"(bf[kk & 1][n][0]), \"r\"(bf[kk & 1][n][1]));         \\\n"
    "      }                                                                                              \\\n"
    "    }                                                                                                \\\n"
    "  }                                                                                                 \n"
    "\n"
    "STOF_MMA(stof_mma_f16, __half, \"f16\")\n"
    "STOF_MMA(stof_mma_bf16, __nv_bfloat16, \"bf16\")\n";


/* ---------------------------------------------------------------- kernels */

static int64_t buf_numel(const lir_buf *lb) {
  int64_t n = 1;
  for (int d = 0; d < lb->op->ndim; d++) n *= lb->ext[d];
  return n ? n : 1;
}

/* The root block whose kernel runs block b. */
static int root_of(const stof_sched *s, int b) {
  while (sched_block_at(s, b)->attach >= 0) b = sched_loop_at(s, sched_block_at(s, b)->attach)->block;
  return b;
}

static int has_i64(const stof_expr *e) {
  if (!e) return 0;
  if (e->dtype == STOF_DTYPE_I64) return 1;
  switch (e->kind) {
  case STOF_EXPR_INT:
  case STOF_EXPR_FLOAT:
  case STOF_EXPR_VAR: return 0;
  case STOF_EXPR_LOAD:
    for (int d = 0; d < e->u.load.nidx; d++)
      if (has_i64(e->u.load.idx[d])) return 1;
    return 0;
  case STOF_EXPR_REDUCE: return has_i64(e->u.reduce.src);
  default: return has_i64(e->u.op.a) || has_i64(e->u.op.b) || has_i64(e->u.op.c);
  }
}

/* May the kernels index with 32-bit integers? */
static int index32(const stof_sched *s, const sched_lir *l) {
  for (int i = 0; i < l->bufs.len; i++) {
    const stof_op *op = ((const lir_buf *)l->bufs.data)[i].op;
    int64_t n = 1;
    for (int d = 0; d < op->ndim; d++) n *= op->shape[d];
    if (n >= INT32_MAX / 2 || op->dtype == STOF_DTYPE_I64) return 0;
  }
  for (int b = 0; b < s->blocks.len; b++) {
    const sched_block *x = sched_block_at(s, b);
    if (x->state == SCHED_B_LIVE && (x->op->dtype == STOF_DTYPE_I64 || has_i64(x->op->body))) return 0;
  }
  for (int i = 0; i < s->loops.len; i++)
    if (sched_loop_at(s, i)->extent >= INT32_MAX / 2) return 0;
  return 1;
}

/* One kernel's facts, gathered by walking its statements. */
typedef struct kscan {
  const stof_sched *s;
  const sched_lir *l;
  int bound[STOF_THREAD_COUNT];    /* a loop bound to each tag (-1: none) */
  int64_t dim[STOF_THREAD_COUNT];  /* launch extent per tag: the largest loop bound to it */
  unsigned *inside;                /* per loop: tags bound around and at it (bit per tag) */
  const char *kname;
  stof_status st;
} kscan;

/* The loop bound to each tag around the statements being scanned (-1: none). */
typedef struct kouter {
  int loop[STOF_THREAD_COUNT];
} kouter;

/* Is block b a warp accumulator whose write-backs all fill shared memory (a GEMM computed
 * by the CUDA block's warps together for the threads of the block: the intermediate of a
 * GEMM + GEMM)? Such a block may rebind thread indices too: its results reach the other
 * threads only through the shared buffer, behind the write-back's barriers. */
static int warp_fills_shared(const stof_sched *s, int b) {
  const sched_block *x = sched_block_at(s, b);
  if (x->scope != SCHED_SCOPE_WARP) return 0;
  int r[64], n = sched_readers(s, x->out, b, r, 64);
  if (n < 1 || n > 64) return 0;
  for (int i = 0; i < n; i++)
    if (sched_block_at(s, r[i])->scope != SCHED_SCOPE_SHARED) return 0;
  return 1;
}

static void scan_bindings(kscan *k, int first, unsigned mask, const kouter *outer) {
  const stof_sched *s = k->s;
  for (int i = first; i >= 0 && !k->st; i = lir_stmt_at(k->l, i)->next) {
    const lir_stmt *st = lir_stmt_at(k->l, i);
    unsigned m = mask;
    kouter o = *outer;
    if (st->kind == LIR_FOR) {
      const sched_loop *lp = sched_loop_at(s, st->loop);
      if (lp->ann == STOF_ANN_THREAD) {
        const char *tag = stof_thread_tag_name(lp->thread);
        if (lp->iter == STOF_ITER_REDUCE && lp->thread < STOF_THREAD_THREAD_X) {
          k->st = stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                                 "cuda: reduce loop %s of block %s is bound to %s: CUDA blocks cannot "
                                 "combine their partial results (bind it to threadIdx.x/y/z, or rfactor it)",
                                 sched_loop_name(s, st->loop), sched_block_name(s, lp->block), tag);
          return;
        }
        /* Loops of different blocks may share a tag (each runs on the threads its extent
         * needs); one inside another only when the inner one fills a shared buffer (the
         * threads of the block fetch it together, TVM's cooperative fetching). */
        int prev = outer->loop[lp->thread];
        if (prev >= 0 && sched_block_at(s, lp->block)->scope != SCHED_SCOPE_SHARED && !warp_fills_shared(s, lp->block)) {
          k->st = stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                                 "cuda: loop %s (block %s) is bound to %s inside loop %s (block %s), "
                                 "bound to it too: only a block writing shared memory may rebind a "
                                 "thread index inside a loop bound to it (cooperative fetching)",
                                 sched_loop_name(s, st->loop), sched_block_name(s, lp->block), tag,
                                 sched_loop_name(s, prev), sched_block_name(s, sched_loop_at(s, prev)->block));
          return;
        }
        if (k->bound[lp->thread] < 0 || lp->extent > k->dim[lp->thread]) {
          k->bound[lp->thread] = st->loop;
          k->dim[lp->thread] = lp->extent;
        }
        o.loop[lp->thread] = st->loop;
        m |= 1u << lp->thread;
      }
      k->inside[st->loop] = m;
    }
    scan_bindings(k, st->first, m, &o);
  }
}

/* The tags launched more than once (bit per tag). */
static unsigned launched(const int64_t *dim) {
  unsigned m = 0;
  for (int t = 0; t < STOF_THREAD_COUNT; t++)
    if (dim[t] > 1) m |= 1u << t;
  return m;
}

static const char *missing_tag(unsigned need, unsigned have) {
  for (int t = 0; t < STOF_THREAD_COUNT; t++)
    if ((need & ~have) & (1u << t)) return stof_thread_tag_name((stof_thread_tag)t);
  return "?";
}

/* Does block read a buffer placed in warp fragments? */
static int reads_warp(const stof_sched *s, const sched_lir *l, int block, const unsigned char *place) {
  const stof_op *ts[64];
  int n = sched_expr_loads(sched_block_at(s, block)->op->body, ts, 64);
  for (int k = 0; k < n && k < 64; k++) {
    const lir_buf *lb = lir_find_buf(l, ts[k]);
    if (lb && place[lb - (const lir_buf *)l->bufs.data] == PLACE_WARP) return 1;
  }
  return 0;
}

/* Every store into memory other threads see lies under loops bound to all launched tags. */
static void scan_stores(kscan *k, int first, unsigned mask, unsigned need, const unsigned char *place) {
  const stof_sched *s = k->s;
  for (int i = first; i >= 0 && !k->st; i = lir_stmt_at(k->l, i)->next) {
    const lir_stmt *st = lir_stmt_at(k->l, i);
    unsigned m = mask;
    if (st->kind == LIR_FOR && sched_loop_at(s, st->loop)->ann == STOF_ANN_THREAD)
      m |= 1u << sched_loop_at(s, st->loop)->thread;
    /* a cross-thread reduction: the threads of its tag all store the same value */
    if (st->kind == LIR_STORE && sched_cuda_xr_tag(s, st->block) >= 0) m |= 1u << sched_cuda_xr_tag(s, st->block);
    if (st->kind == LIR_STORE && reads_warp(k->s, k->l, st->block, place))
      m |= 1u << STOF_THREAD_THREAD_X; /* a write-back of warp fragments: each lane its own */
    if (st->kind == LIR_STORE && (need & ~m)) {
      const stof_op *t = sched_block_at(s, st->block)->out;
      const lir_buf *lb = lir_find_buf(k->l, t);
      int idx = lb ? (int)(lb - (const lir_buf *)k->l->bufs.data) : -1;
      if (idx < 0 || place[idx] == PLACE_GLOBAL) {
        k->st = stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                               "cuda: block %s stores into %s outside any loop bound to %s, which "
                               "kernel %s launches more than once: several threads would write the "
                               "same elements (bind one of its loops to %s, or compute it at a "
                               "bound loop)",
                               sched_block_name(s, st->block), t->name, missing_tag(need, m), k->kname,
                               missing_tag(need, m));
        return;
      }
    }
    scan_stores(k, st->first, m, need, place);
  }
}

static void kernel_name(char *out, size_t cap, int i, const char *block) {
  int n = snprintf(out, cap, "stof_k%d_", i);
  for (int j = 0; block[j] && n < (int)cap - 1 && j < 32; j++, n++) {
    char c = block[j];
    out[n] = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ? c : '_';
  }
  out[n] = 0;
}

void sched_cuda_info_free(stof_ctx *ctx, sched_cuda_info *info) {
  if (!info) return;
  if (info->kernel) stof_ctx_dealloc(ctx, info->kernel, sizeof *info->kernel * (size_t)(info->nkernel ? info->nkernel : 1));
  if (info->temp_bytes)
    stof_ctx_dealloc(ctx, info->temp_bytes, sizeof *info->temp_bytes * (size_t)(info->ntemp ? info->ntemp : 1));
  memset(info, 0, sizeof *info);
}

static stof_status too_many(const stof_sched *s, const char *kname, const char *what, long long n, long long max) {
  return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE, "cuda: kernel %s launches %s = %lld, at most %lld", kname,
                        what, n, max);
}

/* The intrinsic loop is tensorized with ("" when none). */
static const char *tensorize_intrin(const stof_sched *s, int loop) {
  for (int i = 0; i < s->annots.len; i++) {
    const sched_annot *a = sched_annot_at(s, i);
    if (!a->is_block && a->id == loop && strcmp(sched_str(s, a->key), "tensorize") == 0) return sched_str(s, a->value);
  }
  return "";
}

/* Per lowered buffer, its layout (SCHED_LAYOUT_*): the shared operands of wgmma-tensorized
 * blocks are swizzled, their warp accumulators are a warpgroup's. Returns whether there is
 * any wgmma (the source then needs sm_90a). */
static int wgmma_layouts(const stof_sched *s, const sched_lir *l, unsigned char *layout) {
  int any = 0;
  memset(layout, SCHED_LAYOUT_ROWS, (size_t)(l->bufs.len ? l->bufs.len : 1));
  for (int i = 0; i < s->loops.len; i++) {
    const sched_loop *lp = sched_loop_at(s, i);
    if (lp->ann != STOF_ANN_TENSORIZE || lp->dead || lp->repl != SCHED_LEAF) continue;
    const char *in = tensorize_intrin(s, i);
    if (strncmp(in, "wgmma", 5) != 0) continue;
    sched_mma m;
    if (sched_tensorize_match(s, i, in, &m)) { /* emit_wgmma reports it */
      stof_ctx_clear_error(s->ctx);
      continue;
    }
    const lir_buf *a = lir_find_buf(l, m.a), *b = lir_find_buf(l, m.b);
    const lir_buf *c = lir_find_buf(l, sched_block_at(s, lp->block)->out);
    const lir_buf *base = (const lir_buf *)l->bufs.data;
    if (a && a->scope == SCHED_SCOPE_SHARED) layout[a - base] = SCHED_LAYOUT_SW128_K;
    if (b && b->scope == SCHED_SCOPE_SHARED) layout[b - base] = SCHED_LAYOUT_SW128_MN;
    if (c && c->scope == SCHED_SCOPE_WARP) layout[c - base] = SCHED_LAYOUT_WGACC;
    any = 1;
  }
  return any;
}

/* A buffer as the matrix of its last two dimensions: 1 when it has two or more and every
 * leading one has extent 1 (the tile of a batched block, x[b, s, k], holds one b); *rows and
 * *cols get the last two extents. */
static int buf_matrix(const lir_buf *lb, int64_t *rows, int64_t *cols) {
  int n = lb->op->ndim;
  *rows = n >= 2 ? lb->ext[n - 2] : 1;
  *cols = n >= 1 ? lb->ext[n - 1] : 1;
  for (int d = 0; d < n - 2; d++)
    if (lb->ext[d] != 1) return 0;
  return n >= 2;
}

/* Elements of a warp buffer each thread holds. */
static int64_t warp_elems(unsigned char layout, const lir_buf *lb) {
  int64_t rows, cols;
  buf_matrix(lb, &rows, &cols);
  return rows * cols / (layout == SCHED_LAYOUT_WGACC ? 128 : 32);
}

/* The wgmma helpers the source uses: per (element type, N), m64nNk16 with both operands in
 * shared memory (A K-major, B MN-major, 128-byte swizzle), the accumulators as N / 2
 * registers of each thread of the warpgroup. */
static void wgmma_prelude(const stof_sched *s, const sched_lir *l, const unsigned char *layout, stof_buf *b) {
  (void)l;
  (void)layout;
  int done[2][3] = {{0}};
  stof_buf_puts(b, "\n/* wgmma (sm_90a): descriptors of 128-byte swizzled shared tiles, async-proxy fence */\n"
                   "STOF_D unsigned long long stof_wg_desc(unsigned addr, unsigned lbo, unsigned sbo) {\n"
                   "  return (unsigned long long)((addr & 0x3FFFFu) >> 4) | ((unsigned long long)(lbo >> 4) << 16) |\n"
                   "         ((unsigned long long)(sbo >> 4) << 32) | (1ull << 62);\n"
                   "}\n"
                   "STOF_D void stof_fence_async() { asm volatile(\"fence.proxy.async.shared::cta;\\n\" ::: \"memory\"); }\n"
                   "/* element (r, c) of a K-major tile with 64-element rows, and of an MN-major one (rows k,\n"
                   " * blocks of 64 columns of R rows each) */\n"
                   "#define stof_swz_k(r, c) ((r) * 64 + ((((c) >> 3) ^ ((r) & 7)) << 3) + ((c) & 7))\n"
                   "#define stof_swz_mn(r, c, R) (((c) >> 6) * ((R) * 64) + (r) * 64 + (((((c) & 63) >> 3) ^ ((r) & 7)) << 3) + ((c) & 7))\n");
  for (int i = 0; i < s->loops.len; i++) {
    const sched_loop *lp = sched_loop_at(s, i);
    if (lp->ann != STOF_ANN_TENSORIZE || lp->dead || lp->repl != SCHED_LEAF) continue;
    const char *in = tensorize_intrin(s, i);
    sched_mma m;
    if (strncmp(in, "wgmma", 5) != 0 || sched_tensorize_match(s, i, in, &m)) continue;
    int bf = m.a->dtype == STOF_DTYPE_BF16, ni = m.n == 64 ? 0 : m.n == 128 ? 1 : 2;
    if (done[bf][ni]) continue;
    done[bf][ni] = 1;
    int n = (int)m.n, nreg = n / 2;
    const char *ty = bf ? "__nv_bfloat16" : "__half", *ptx = bf ? "bf16" : "f16";
    stof_buf_printf(b, "STOF_D void stof_wgmma_%s_n%d(float *d, unsigned long long da, unsigned long long db) {\n", ptx, n);
    stof_buf_printf(b, "  asm volatile(\"{\\n.reg .pred p;\\nsetp.ne.b32 p, 1, 0;\\n\"\n"
                       "    \"wgmma.mma_async.sync.aligned.m64n%dk16.f32.%s.%s {", n, ptx, ptx);
    for (int r = 0; r < nreg; r++) stof_buf_printf(b, "%s%%%d", r ? "," : "", r);
    stof_buf_printf(b, "}, %%%d, %%%d, p, 1, 1, 0, 1;\\n}\\n\"\n    : ", nreg, nreg + 1);
    for (int r = 0; r < nreg; r++) stof_buf_printf(b, "%s\"+f\"(d[%d])", r ? ", " : "", r);
    stof_buf_puts(b, "\n    : \"l\"(da), \"l\"(db));\n}\n");
    stof_buf_printf(b,
                    "/* the warpgroup adds A[64 x 16 TK] (K-major tile at a) times B[16 TK x %d] (MN-major tile at\n"
                    " * b, blocks of 64 columns lbo bytes apart) into d */\n"
                    "template <int TK> STOF_D void stof_wgmma_%s_%d(float *d, const %s *a, const %s *b, unsigned lbo) {\n"
                    "  const unsigned sa = stof_smem_u32(a), sb = stof_smem_u32(b);\n"
                    "  asm volatile(\"wgmma.fence.sync.aligned;\\n\" ::: \"memory\");\n"
                    "  _Pragma(\"unroll\") for (int kk = 0; kk < TK; ++kk)\n"
                    "    stof_wgmma_%s_n%d(d, stof_wg_desc(sa + kk * 32, 16, 1024), stof_wg_desc(sb + kk * 2048, lbo, 1024));\n"
                    "  asm volatile(\"wgmma.commit_group.sync.aligned;\\n\" ::: \"memory\");\n"
                    "  asm volatile(\"wgmma.wait_group.sync.aligned 0;\\n\" ::: \"memory\");\n"
                    "  _Pragma(\"unroll\") for (int k = 0; k < %d; ++k) asm volatile(\"\" : \"+f\"(d[k])::\"memory\");\n"
                    "}\n",
                    n, ptx, n, ty, ty, ptx, n, nreg);
  }
}

/* The copies kept of the shared buffers filled at loop (its "pipeline_stages" pragma, or 1). */
static int pipeline_stages(const stof_sched *s, int loop) {
  for (int i = 0; loop >= 0 && i < s->annots.len; i++) {
    const sched_annot *a = sched_annot_at(s, i);
    if (a->is_block || a->id != loop || strcmp(sched_str(s, a->key), "pipeline_stages") != 0) continue;
    int n = atoi(sched_str(s, a->value));
    return n >= 2 && n <= 8 ? n : 1;
  }
  return 1;
}

/* Is a loop of block b bound to a thread tag? */
static int thread_bound(const stof_sched *s, int b) {
  const sched_block *x = sched_block_at(s, b);
  for (int k = 0; k < x->nloop; k++)
    if (sched_loop_at(s, x->loop[k])->ann == STOF_ANN_THREAD) return 1;
  return 0;
}

/* Bytes of shared memory a buffer takes (rounded up to 128: every buffer starts aligned for
 * vector copies and ldmatrix). */
static size_t shared_bytes(const lir_buf *lb) {
  size_t n = (size_t)buf_numel(lb) * stof_dtype_size(lb->op->dtype);
  return (n + 127) & ~(size_t)127;
}

#define BLOCK_TAGS ((1u << STOF_THREAD_BLOCK_X) | (1u << STOF_THREAD_BLOCK_Y) | (1u << STOF_THREAD_BLOCK_Z))

/* Checks kernel k (root statement stmt) and works out its launch; place[] gets where the
 * buffers of the kernel live, soff[] the offsets of its shared ones in its dynamic shared
 * memory (kk->smem bytes in all). */
static stof_status plan_kernel(const stof_sched *s, const sched_lir *l, int stmt, const char *kname,
                               unsigned *inside, unsigned char *place, size_t *soff, int *stages,
                               const unsigned char *layout, sched_cuda_kernel *kk) {
  int warp = 0, lanes = 32;
  kscan k = {s, l, {-1, -1, -1, -1, -1, -1}, {1, 1, 1, 1, 1, 1}, inside, kname, STOF_OK};
  const lir_stmt *root = lir_stmt_at(l, stmt);
  kouter none = {{-1, -1, -1, -1, -1, -1}};
  scan_bindings(&k, root->first, 0, &none);
  if (k.st) return k.st;
  const int64_t *e = k.dim;
  if (e[STOF_THREAD_THREAD_X] > 1024) return too_many(s, kname, "threadIdx.x", e[STOF_THREAD_THREAD_X], 1024);
  if (e[STOF_THREAD_THREAD_Y] > 1024) return too_many(s, kname, "threadIdx.y", e[STOF_THREAD_THREAD_Y], 1024);
  if (e[STOF_THREAD_THREAD_Z] > 64) return too_many(s, kname, "threadIdx.z", e[STOF_THREAD_THREAD_Z], 64);
  int64_t threads = e[STOF_THREAD_THREAD_X] * e[STOF_THREAD_THREAD_Y] * e[STOF_THREAD_THREAD_Z];
  if (threads > 1024) return too_many(s, kname, "threads per block (threadIdx x * y * z)", threads, 1024);
  if (e[STOF_THREAD_BLOCK_X] > 2147483647) return too_many(s, kname, "blockIdx.x", e[STOF_THREAD_BLOCK_X], 2147483647);
  if (e[STOF_THREAD_BLOCK_Y] > 65535) return too_many(s, kname, "blockIdx.y", e[STOF_THREAD_BLOCK_Y], 65535);
  if (e[STOF_THREAD_BLOCK_Z] > 65535) return too_many(s, kname, "blockIdx.z", e[STOF_THREAD_BLOCK_Z], 65535);
  for (int t = 0; t < 3; t++) {
    kk->grid[t] = (unsigned)e[STOF_THREAD_BLOCK_X + t];
    kk->block[t] = (unsigned)e[STOF_THREAD_THREAD_X + t];
  }
  unsigned need = launched(e);
  kk->smem = 0;
  /* intermediates compacted under a loop of this kernel: private to a thread, shared by
   * the threads of a CUDA block, or illegal */
  for (int i = 0; i < l->bufs.len; i++) {
    const lir_buf *lb = (const lir_buf *)l->bufs.data + i;
    if (lb->writer < 0 || lb->external || root_of(s, lb->writer) != root->block) continue;
    if (lb->scope == SCHED_SCOPE_SHARED) {
      if (lb->at < 0 || (need & BLOCK_TAGS & ~inside[lb->at]))
        return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                              "cuda: shared buffer %s must be computed at a loop inside the loops bound "
                              "to %s in kernel %s (one copy per CUDA block)",
                              lb->op->name, lb->at < 0 ? "blockIdx" : missing_tag(need & BLOCK_TAGS, inside[lb->at]),
                              kname);
      place[i] = PLACE_SHARED;
      stages[i] = pipeline_stages(s, sched_block_at(s, lb->writer)->attach);
      if (layout[i] != SCHED_LAYOUT_ROWS) kk->smem = (kk->smem + 1023) & ~(size_t)1023; /* swizzle atoms */
      soff[i] = kk->smem;
      kk->smem += shared_bytes(lb) * (size_t)stages[i];
      continue;
    }
    if (lb->scope == SCHED_SCOPE_WARP) {
      unsigned lane_tag = 1u << STOF_THREAD_THREAD_X;
      int64_t rows, cols;
      int matrix = buf_matrix(lb, &rows, &cols);
      if (lb->at < 0)
        return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                              "cuda: warp buffer %s is not computed at a loop of kernel %s (compute its "
                              "block at the warps' loop; a loop of extent 1 is elided and cannot hold it)",
                              lb->op->name, kname);
      if ((need & ~lane_tag & ~inside[lb->at]) || (inside[lb->at] & lane_tag) || !matrix || rows % 16 ||
          cols % 8 || lb->op->dtype != STOF_DTYPE_F32)
        return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                              "cuda: warp buffer %s must be a float32 matrix of 16m x 8n elements (its last "
                              "two dimensions, any before them of extent 1; it is %lld x %lld%s) computed "
                              "at a loop inside every loop bound to a thread index other than threadIdx.x, "
                              "which is the warp's lane, and outside any loop bound to threadIdx.x, in "
                              "kernel %s",
                              lb->op->name, (long long)rows, (long long)cols,
                              matrix || lb->op->ndim < 2 ? "" : ", with a leading extent above 1", kname);
      if (layout[i] == SCHED_LAYOUT_WGACC && rows != 64)
        return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                              "cuda: warp buffer %s holds a warpgroup's wgmma accumulators: it must be 64 "
                              "rows (one warpgroup's tile), it is %lld",
                              lb->op->name, (long long)rows);
      place[i] = PLACE_WARP;
      warp = 1;
      if (layout[i] == SCHED_LAYOUT_WGACC) lanes = 128;
      continue;
    }
    if (lb->at < 0) continue;
    /* every thread computes the whole of it (a cross-thread reduction's result is replicated;
     * a block none of whose loops is bound runs entirely in every thread) */
    if ((need & ~inside[lb->at]) && (sched_cuda_xr_replicated(s, lb->writer) || !thread_bound(s, lb->writer))) {
      place[i] = PLACE_LOCAL;
      continue;
    }
    if (need & ~inside[lb->at])
      return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                            "cuda: buffer %s is allocated per iteration of loop %s, outside the loop "
                            "bound to %s in kernel %s: threads would share it (cache it in scope "
                            "\"shared\" to share it)",
                            lb->op->name, sched_loop_name(s, lb->at), missing_tag(need, inside[lb->at]), kname);
    place[i] = PLACE_LOCAL;
  }
  if (warp) {
    if (e[STOF_THREAD_THREAD_X] != 1 && e[STOF_THREAD_THREAD_X] != lanes)
      return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                            "cuda: kernel %s keeps %s accumulators, so threadIdx.x is the %s's lane "
                            "(%d), but a loop bound to it has extent %lld",
                            kname, lanes == 32 ? "warp" : "warpgroup", lanes == 32 ? "warp" : "warpgroup",
                            lanes, (long long)e[STOF_THREAD_THREAD_X]);
    kk->block[0] = (unsigned)lanes;
  }
  if (kk->smem > 227 * 1024)
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                          "cuda: kernel %s needs %zu bytes of shared memory, more than the 227 KB a "
                          "CUDA block can have",
                          kname, kk->smem);
  scan_stores(&k, root->first, 0, need, place);
  return k.st;
}

static void emit_params(cgen *g, int nargs, const stof_op *const *args, const sched_lir *l) {
  stof_buf *b = g->b;
  for (int i = 0; i < nargs; i++) {
    stof_buf_printf(b, "%s%s%s *", i ? ", " : "", args[i]->kind == STOF_OP_PLACEHOLDER ? "const " : "",
                    sched_cg_stype(1, args[i]->dtype));
    sched_cg_buf_name(b, args[i]);
  }
  for (int i = 0; i < l->bufs.len; i++) {
    const lir_buf *lb = (const lir_buf *)l->bufs.data + i;
    if (lb->writer < 0 || lb->external || lb->at >= 0) continue;
    stof_buf_printf(b, ", %s *", sched_cg_stype(1, lb->op->dtype));
    sched_cg_buf_name(b, lb->op);
  }
}

static stof_status codegen_cuda(const stof_sched *s, int nargs, const stof_op *const *args, char **out,
                                sched_cuda_info *info);

stof_status sched_codegen_cuda(const stof_sched *s, int nargs, const stof_op *const *args, char **out,
                               sched_cuda_info *info) {
  *out = NULL;
  stof_sched *fused = NULL; /* groups as one kernel each */
  stof_status st = sched_fuse_groups(s, &fused);
  if (st) return st;
  st = codegen_cuda(fused ? fused : s, nargs, args, out, info);
  stof_sched_free(fused);
  return st;
}

static stof_status codegen_cuda(const stof_sched *s, int nargs, const stof_op *const *args, char **out,
                                sched_cuda_info *info) {
  stof_ctx *ctx = s->ctx;
  *out = NULL;
  sched_cuda_info inf;
  memset(&inf, 0, sizeof inf);
  sched_lir l;
  stof_status st = sched_lower(s, nargs, args, &l);
  if (st) return st;
  sched_access acc;
  if ((st = sched_access_check(s, &acc))) {
    sched_lir_free(&l);
    return st;
  }
  int nk = 0;
  for (int i = l.first; i >= 0; i = lir_stmt_at(&l, i)->next) nk++;
  unsigned *inside = stof_ctx_alloc(ctx, sizeof *inside * (size_t)(s->loops.len ? s->loops.len : 1));
  unsigned char *place = stof_ctx_alloc(ctx, (size_t)(l.bufs.len ? l.bufs.len : 1));
  size_t *soff = stof_ctx_alloc(ctx, sizeof *soff * (size_t)(l.bufs.len ? l.bufs.len : 1));
  size_t *bsize = stof_ctx_alloc(ctx, sizeof *bsize * (size_t)(l.bufs.len ? l.bufs.len : 1));
  int *stages = stof_ctx_alloc(ctx, sizeof *stages * (size_t)(l.bufs.len ? l.bufs.len : 1));
  unsigned char *layout = stof_ctx_alloc(ctx, (size_t)(l.bufs.len ? l.bufs.len : 1));
  sched_bounds bd;
  int have_bd = 0;
  inf.nkernel = nk;
  inf.kernel = stof_ctx_alloc(ctx, sizeof *inf.kernel * (size_t)(nk ? nk : 1));
  for (int i = 0; i < l.bufs.len; i++) {
    const lir_buf *lb = (const lir_buf *)l.bufs.data + i;
    if (lb->writer >= 0 && !lb->external && lb->at < 0) inf.ntemp++;
  }
  inf.temp_bytes = stof_ctx_alloc(ctx, sizeof *inf.temp_bytes * (size_t)(inf.ntemp ? inf.ntemp : 1));
  if (!inside || !place || !soff || !bsize || !stages || !layout || !inf.kernel || !inf.temp_bytes) {
    st = STOF_ERR_NOMEM;
    goto done;
  }
  memset(place, PLACE_GLOBAL, (size_t)(l.bufs.len ? l.bufs.len : 1));
  inf.sm90a = wgmma_layouts(s, &l, layout);
  for (int i = 0; i < l.bufs.len; i++) {
    const lir_buf *lb = (const lir_buf *)l.bufs.data + i;
    stages[i] = 1;
    bsize[i] = (size_t)buf_numel(lb);
    if (lb->scope == SCHED_SCOPE_SHARED) bsize[i] = shared_bytes(lb) / stof_dtype_size(lb->op->dtype);
  }
  memset(inf.kernel, 0, sizeof *inf.kernel * (size_t)(nk ? nk : 1));
  for (int i = 0, t = 0; i < l.bufs.len; i++) {
    const lir_buf *lb = (const lir_buf *)l.bufs.data + i;
    if (lb->writer >= 0 && !lb->external && lb->at < 0)
      inf.temp_bytes[t++] = (size_t)buf_numel(lb) * stof_dtype_size(lb->op->dtype);
  }
  int k = 0;
  for (int i = l.first; i >= 0 && !st; i = lir_stmt_at(&l, i)->next, k++) {
    kernel_name(inf.kernel[k].name, sizeof inf.kernel[k].name, k, sched_block_name(s, lir_stmt_at(&l, i)->block));
    memset(inside, 0, sizeof *inside * (size_t)(s->loops.len ? s->loops.len : 1));
    st = plan_kernel(s, &l, i, inf.kernel[k].name, inside, place, soff, stages, layout, &inf.kernel[k]);
  }
  if (st) goto done;
  if ((st = sched_bounds_init(&bd, s))) goto done;
  have_bd = 1;
  if ((st = sched_bounds_infer(&bd))) goto done;

  stof_buf b;
  stof_buf_init(&b, ctx);
  cgen g = {.s = s, .l = &l, .b = &b, .st = STOF_OK, .cuda = 1, .place = place, .stages = stages,
            .size = bsize, .bd = &bd, .cur_loop = -1, .layout = layout, .wgmma = inf.sm90a,
            .acc = &acc};
  stof_buf_puts(&b, "/* generated by stof (CUDA) from a schedule of");
  for (int i = 0; i < s->nout; i++) {
    stof_buf_puts(&b, " ");
    sched_cg_comment(&b, s->out[i]->name);
  }
  stof_buf_puts(&b, "\n * kernels, launched in this order (grid; block):\n");
  for (int i = 0; i < nk; i++) {
    stof_buf_printf(&b, " *   %s (%u, %u, %u; %u, %u, %u)", inf.kernel[i].name, inf.kernel[i].grid[0],
                    inf.kernel[i].grid[1], inf.kernel[i].grid[2], inf.kernel[i].block[0], inf.kernel[i].block[1],
                    inf.kernel[i].block[2]);
    if (inf.kernel[i].smem) stof_buf_printf(&b, ", %zu bytes of shared memory", inf.kernel[i].smem);
    stof_buf_puts(&b, "\n");
  }
  stof_buf_puts(&b, " */\n");
  stof_buf_puts(&b, index32(s, &l) ? prelude_idx32 : prelude_idx64);
  stof_buf_puts(&b, prelude);
  if (inf.sm90a) wgmma_prelude(s, &l, layout, &b);
  sched_cuda_xr_prelude(s, &b);
  k = 0;
  for (int i = l.first; i >= 0; i = lir_stmt_at(&l, i)->next, k++) {
    const lir_stmt *root = lir_stmt_at(&l, i);
    sched_cuda_kernel *kk = &inf.kernel[k];
    for (int t = 0; t < 3; t++) {
      g.dim[STOF_THREAD_BLOCK_X + t] = kk->grid[t];
      g.dim[STOF_THREAD_THREAD_X + t] = kk->block[t];
    }
    stof_buf_printf(&b, "\n/* block %s: grid (%u, %u, %u), block (%u, %u, %u) */\n", sched_block_name(s, root->block),
                    kk->grid[0], kk->grid[1], kk->grid[2], kk->block[0], kk->block[1], kk->block[2]);
    stof_buf_printf(&b, "extern \"C\" __global__ void __launch_bounds__(%u) %s(", kk->block[0] * kk->block[1] * kk->block[2],
                    kk->name);
    emit_params(&g, nargs, args, &l);
    stof_buf_puts(&b, ") {\n");
    if (kk->smem) stof_buf_puts(&b, "  extern __shared__ __align__(128) unsigned char stof_smem[];\n");
    for (int j = 0; j < l.bufs.len; j++) {
      const lir_buf *lb = (const lir_buf *)l.bufs.data + j;
      if (place[j] == PLACE_GLOBAL || root_of(s, lb->writer) != root->block) continue;
      if (place[j] == PLACE_SHARED) {
        stof_buf_printf(&b, "  %s *const ", sched_cg_stype(1, lb->op->dtype));
        sched_cg_buf_name(&b, lb->op);
        stof_buf_printf(&b, " = (%s *)(stof_smem + %zu); /* shared, %lld x %zu elements */\n",
                        sched_cg_stype(1, lb->op->dtype), soff[j], (long long)stages[j], bsize[j]);
        continue;
      }
      if (place[j] == PLACE_WARP) {
        int64_t rows, cols;
        buf_matrix(lb, &rows, &cols);
        stof_buf_puts(&b, "  float ");
        sched_cg_buf_name(&b, lb->op);
        stof_buf_printf(&b, "[%lld]; /* warp, %lld x %lld: each lane's accumulator fragments%s */\n",
                        (long long)warp_elems(layout[j], lb), (long long)rows, (long long)cols,
                        layout[j] == SCHED_LAYOUT_WGACC ? " (wgmma, a warpgroup's)" : "");
        continue;
      }
      stof_buf_printf(&b, "  %s ", sched_cg_stype(1, lb->op->dtype));
      sched_cg_buf_name(&b, lb->op);
      stof_buf_printf(&b, "[%lld]; /* %s, private to the thread */\n", (long long)buf_numel(lb),
                      sched_scope_name(lb->scope));
    }
    for (int j = 0; j < l.nblk; j++) { /* float32 accumulators of float16 reductions */
      int64_t n;
      if (sched_block_at(s, j)->state != SCHED_B_LIVE || root_of(s, j) != root->block || !sched_cg_acc(&g, j))
        continue;
      int nd = sched_cg_acc_dims(&g, j, &n);
      stof_buf_puts(&b, "  float ");
      sched_cg_acc_name(&b, j);
      if (nd) stof_buf_printf(&b, "[%lld]", (long long)n);
      stof_buf_puts(&b, "; /* float32 accumulator of ");
      sched_cg_comment(&b, sched_block_at(s, j)->out->name);
      stof_buf_puts(&b, ", private to the thread */\n");
    }
    sched_cg_stmts(&g, root->first, 1);
    stof_buf_puts(&b, "}\n");
  }
  if (g.st) {
    stof_buf_free(&b);
    st = g.st;
    goto done;
  }
  st = stof_buf_finish(&b, out);
done:
  if (inside) stof_ctx_dealloc(ctx, inside, sizeof *inside * (size_t)(s->loops.len ? s->loops.len : 1));
  if (place) stof_ctx_dealloc(ctx, place, (size_t)(l.bufs.len ? l.bufs.len : 1));
  if (soff) stof_ctx_dealloc(ctx, soff, sizeof *soff * (size_t)(l.bufs.len ? l.bufs.len : 1));
  if (bsize) stof_ctx_dealloc(ctx, bsize, sizeof *bsize * (size_t)(l.bufs.len ? l.bufs.len : 1));
  if (stages) stof_ctx_dealloc(ctx, stages, sizeof *stages * (size_t)(l.bufs.len ? l.bufs.len : 1));
  if (layout) stof_ctx_dealloc(ctx, layout, (size_t)(l.bufs.len ? l.bufs.len : 1));
  if (have_bd) sched_bounds_free(&bd);
  sched_access_free(ctx, &acc);
  sched_lir_free(&l);
  if (st || !info)
    sched_cuda_info_free(ctx, &inf);
  else
    *info = inf;
  return st;
}

/* ---------------------------------------------------------------- statements CUDA emits itself */

static int place_of_op(const cgen *g, const stof_op *t) {
  const lir_buf *lb = lir_find_buf(g->l, t);
  return lb ? g->place[lb - (const lir_buf *)g->l->bufs.data] : PLACE_GLOBAL;
}

static void cg_fail(cgen *g, stof_status st) {
  if (!g->st) g->st = st;
}

/* The statements of the nest at first other than its loops, in order (the loops' variables
 * are defined by the caller); skip_stores leaves the stores out. Fails on a guard. */
static void emit_flat(cgen *g, int first, int depth, int skip_stores, const char *what) {
  for (int i = first; i >= 0 && !g->st; i = lir_stmt_at(g->l, i)->next) {
    const lir_stmt *st = lir_stmt_at(g->l, i);
    if (st->kind == LIR_FOR) {
      emit_flat(g, st->first, depth, skip_stores, what);
    } else if (st->kind == LIR_IF) {
      cg_fail(g, stof_ctx_error(g->s->ctx, STOF_ERR_SCHEDULE,
                                "cuda: %s of block %s has a guard (a split that does not divide): "
                                "make its loops' splits divide",
                                what, sched_block_name(g->s, st->block)));
    } else if (!(skip_stores && st->kind == LIR_STORE)) {
      sched_cg_stmt(g, i, depth);
    }
  }
}

/* Defines the loops of the nest at stmt (a chain of nested loops) as 0. */
static void zero_loops(cgen *g, int stmt, int depth) {
  for (int i = stmt; i >= 0; i = lir_stmt_at(g->l, i)->first) {
    const lir_stmt *st = lir_stmt_at(g->l, i);
    if (st->kind != LIR_FOR) {
      int n = st->next;
      while (n >= 0 && lir_stmt_at(g->l, n)->kind != LIR_FOR) n = lir_stmt_at(g->l, n)->next;
      if (n < 0) return;
      i = n;
      st = lir_stmt_at(g->l, i);
    }
    sched_indent(g->b, depth);
    stof_buf_puts(g->b, "const int64_t ");
    sched_cg_loop_name(g, st->loop);
    stof_buf_puts(g->b, " = 0;\n");
  }
}

/* "(int64_t)((index d of block's store) - (min d))" */
static void emit_rel_index(cgen *g, int block, int d) {
  const sched_block *b = sched_block_at(g->s, block);
  const lir_buf *lb = lir_find_buf(g->l, b->out);
  stof_buf_puts(g->b, "((");
  sched_cg_iexpr(g, b, g->l->blk[block].store[d]);
  stof_buf_puts(g->b, ")");
  if (lb && lb->min[d] >= 0) {
    stof_buf_puts(g->b, " - (");
    sched_cg_iexpr(g, NULL, lb->min[d]);
    stof_buf_puts(g->b, ")");
  }
  stof_buf_puts(g->b, ")");
}

/* A tensorized nest: one call of the warp's mma over the tile. */
static void emit_wgmma(cgen *g, const lir_stmt *st, int depth);

/* Opens the scope of a tensorized nest: a comment naming its loops, the loops defined as 0
 * and the nest's lets (the intrinsic's operands are the accesses at the tile's origin). */
static void open_tensorized(cgen *g, const lir_stmt *st, const sched_mma *m, const char *what, int depth) {
  stof_buf *o = g->b;
  sched_indent(o, depth);
  stof_buf_printf(o, "{ /* tensorized: %s over ", what);
  for (int k = 0; k < 3; k++) {
    sched_cg_comment(o, sched_loop_name(g->s, m->loops[k]));
    stof_buf_puts(o, k < 2 ? " x " : " */\n");
  }
  zero_loops(g, (int)(st - (const lir_stmt *)g->l->stmts.data), depth + 1);
  emit_flat(g, st->first, depth + 1, 1, "the tensorized nest");
}

static void emit_mma(cgen *g, const lir_stmt *st, int depth) {
  const stof_sched *s = g->s;
  if (strcmp(tensorize_intrin(s, st->loop), "mma_m16n8k16") != 0) {
    emit_wgmma(g, st, depth);
    return;
  }
  sched_mma m;
  stof_status e = sched_tensorize_match(s, st->loop, "mma_m16n8k16", &m);
  if (e) {
    cg_fail(g, e);
    return;
  }
  const sched_block *b = sched_block_at(s, st->block);
  const lir_buf *cb = lir_find_buf(g->l, b->out), *ab = lir_find_buf(g->l, m.a), *bb = lir_find_buf(g->l, m.b);
  if (place_of_op(g, b->out) != PLACE_WARP) {
    cg_fail(g, stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                              "cuda: tensorized block %s must write a warp buffer (cache_write(block, "
                              "\"warp\")), not %s",
                              sched_block_name(s, st->block), b->out->name));
    return;
  }
  if (place_of_op(g, m.a) != PLACE_SHARED || place_of_op(g, m.b) != PLACE_SHARED) {
    cg_fail(g, stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                              "cuda: tensorized block %s must read its operands from shared memory "
                              "(cache_read(block, i, \"shared\")): %s is not",
                              sched_block_name(s, st->block),
                              place_of_op(g, m.a) != PLACE_SHARED ? m.a->name : m.b->name));
    return;
  }
  int64_t arows, acols, brows, bcols, crows, ccols;
  int amat = buf_matrix(ab, &arows, &acols), bmat = buf_matrix(bb, &brows, &bcols);
  if (!amat || !bmat) {
    cg_fail(g, stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                              "cuda: tensorize reads the staged tile of %s as a matrix: every dimension "
                              "before its last two must have extent 1 in shared memory (bind the "
                              "leading axes of block %s outside the tile, e.g. to blockIdx.z)",
                              amat ? m.b->name : m.a->name, sched_block_name(s, st->block)));
    return;
  }
  if (acols % 8 || bcols % 8) {
    cg_fail(g, stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                              "cuda: tensorize reads rows of %s with ldmatrix: its rows must hold a "
                              "multiple of 8 elements (it has %lld; pad it)",
                              acols % 8 ? m.a->name : m.b->name, (long long)(acols % 8 ? acols : bcols)));
    return;
  }
  buf_matrix(cb, &crows, &ccols); /* crows: the warp's rows, checked in plan_kernel */
  (void)crows;
  int cd = b->op->ndim - 2; /* the warp buffer's row dimension */
  stof_buf *o = g->b;
  open_tensorized(g, st, &m, "mma_m16n8k16", depth);
  int64_t nt = ccols / 8;
  sched_indent(o, depth + 1);
  stof_buf_printf(o, "%s<%lld, %lld, %lld, %d>(", m.a->dtype == STOF_DTYPE_BF16 ? "stof_mma_bf16" : "stof_mma_f16",
                  (long long)(m.m / 16), (long long)(m.n / 8), (long long)(m.k / 16), m.b_nk);
  sched_cg_buf_name(o, b->out);
  stof_buf_puts(o, " + (");
  emit_rel_index(g, st->block, cd);
  stof_buf_printf(o, " / 16 * %lld + ", (long long)nt);
  emit_rel_index(g, st->block, cd + 1);
  stof_buf_printf(o, " / 8) * 4, %lld, &", (long long)nt);
  sched_cg_load_elem(g, m.la);
  stof_buf_printf(o, ", %lld, &", (long long)acols);
  sched_cg_load_elem(g, m.lb);
  stof_buf_printf(o, ", %lld);\n", (long long)bcols);
  sched_indent(o, depth);
  stof_buf_puts(o, "}\n");
}

/* The block of the INIT stores under first when they are all a warp buffer's (-1: none, -2:
 * something else is there too). */
static int warp_init_block(const cgen *g, int first) {
  int found = -1;
  for (int i = first; i >= 0; i = lir_stmt_at(g->l, i)->next) {
    const lir_stmt *st = lir_stmt_at(g->l, i);
    if (st->kind == LIR_STORE) {
      if (st->store != LIR_STORE_INIT || place_of_op(g, sched_block_at(g->s, st->block)->out) != PLACE_WARP)
        return -2;
      if (found >= 0 && found != st->block) return -2;
      found = st->block;
    } else if (st->kind == LIR_FOR || st->kind == LIR_IF) {
      int r = warp_init_block(g, st->first);
      if (r == -2) return -2;
      if (r >= 0) {
        if (found >= 0 && found != r) return -2;
        found = r;
      }
    } else if (st->kind == LIR_BLOCK) {
      return -2;
    }
  }
  return found;
}

/* A warp buffer's whole init nest: every lane zeroes its fragments. */
static int emit_warp_init(cgen *g, const lir_stmt *st, int depth) {
  int blk = warp_init_block(g, st->first);
  if (blk < 0) return 0;
  const sched_block *b = sched_block_at(g->s, blk);
  const lir_buf *lb = lir_find_buf(g->l, b->out);
  if (lb->at != g->cur_loop) {
    cg_fail(g, stof_ctx_error(g->s->ctx, STOF_ERR_SCHEDULE,
                              "cuda: the initialisation of warp buffer %s must cover all of it (its "
                              "reduction's data-parallel loops start right under loop %s)",
                              b->out->name, sched_loop_name(g->s, lb->at)));
    return 1;
  }
  sched_indent(g->b, depth);
  stof_buf_printf(g->b, "#pragma unroll\n");
  sched_indent(g->b, depth);
  stof_buf_printf(g->b, "for (int stof_n = 0; stof_n < %lld; ++stof_n) ",
                  (long long)warp_elems(g->layout[lb - (const lir_buf *)g->l->bufs.data], lb));
  sched_cg_buf_name(g->b, b->out);
  stof_buf_puts(g->b, "[stof_n] = 0.0f; /* init of block ");
  sched_cg_comment(g->b, sched_block_name(g->s, blk));
  stof_buf_puts(g->b, ", the lane's fragments */\n");
  return 1;
}

/* The warp buffer block b reads (NULL: none). */
static const stof_op *warp_input(const cgen *g, int block) {
  const stof_op *ts[64];
  int n = sched_expr_loads(sched_block_at(g->s, block)->op->body, ts, 64);
  for (int k = 0; k < n && k < 64; k++)
    if (place_of_op(g, ts[k]) == PLACE_WARP) return ts[k];
  return NULL;
}

/* Does every load of warp buffer w in e read it at block b's own axes (the element a lane
 * holds is the one its fragment loop names)? */
static int warp_loads_at_axes(const sched_block *b, const stof_op *w, const stof_expr *e) {
  if (!e || e->kind == STOF_EXPR_INT || e->kind == STOF_EXPR_FLOAT || e->kind == STOF_EXPR_VAR) return 1;
  if (e->kind == STOF_EXPR_REDUCE) return warp_loads_at_axes(b, w, e->u.reduce.src);
  if (e->kind == STOF_EXPR_LOAD) {
    for (int d = 0; d < e->u.load.nidx; d++) {
      const stof_expr *ix = e->u.load.idx[d];
      if (e->u.load.tensor == w && (ix->kind != STOF_EXPR_VAR || d >= b->op->ndim || ix->u.var != b->op->axis[d]))
        return 0;
      if (!warp_loads_at_axes(b, w, ix)) return 0;
    }
    return 1;
  }
  return warp_loads_at_axes(b, w, e->u.op.a) && warp_loads_at_axes(b, w, e->u.op.b) &&
         warp_loads_at_axes(b, w, e->u.op.c);
}

/* A block reading a warp buffer (the accumulator's write-back): each lane runs the block's
 * two loops at the elements of its fragments only. */
static void emit_warp_reader(cgen *g, const lir_stmt *st, const stof_op *w, int depth) {
  const stof_sched *s = g->s;
  const sched_block *b = sched_block_at(s, st->block);
  const lir_buf *wb = lir_find_buf(g->l, w);
  int64_t rows, cols;
  /* its last two loops cover the tile; any before them are its leading axes at extent 1 */
  int n = b->op->ndim, k0 = b->nloop - 2;
  int ok = buf_matrix(wb, &rows, &cols) && n >= 2 && k0 == n - 2 && b->op->body->kind != STOF_EXPR_REDUCE &&
           warp_loads_at_axes(b, w, b->op->body);
  for (int a = 0; ok && a < b->nloop; a++) {
    const sched_loop *lp = sched_loop_at(s, b->loop[a]);
    ok = lp->derive == STOF_DERIVE_ROOT && lp->axis == a && lp->ann == STOF_ANN_NONE &&
         lp->extent == (a < k0 ? 1 : a == k0 ? rows : cols);
  }
  if (!ok) {
    cg_fail(g, stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                              "cuda: block %s reads warp buffer %s: it must read it at its own axes only, "
                              "its last two loops, unsplit and unannotated, covering the warp's tile (%lld "
                              "x %lld) and any before them of extent 1: reverse_compute_at it to the loop "
                              "the buffer is computed at",
                              sched_block_name(s, st->block), w->name, (long long)rows, (long long)cols));
    return;
  }
  stof_buf *o = g->b;
  /* a write-back into shared memory (a row-complete tile that later blocks reduce): the
   * other warps read it, so it is fenced like any block filling shared memory, inside a
   * pipelined loop too (the pipeline's barriers order its own copies, not this buffer) */
  int sync = sched_cg_shared_writer(g, st->block);
  if (sync) sched_cg_sync(g, st->block, depth, "the threads are done with the previous contents");
  int64_t nt = cols / 8, tiles = rows / 16 * nt;
  if (g->layout[wb - (const lir_buf *)g->l->bufs.data] == SCHED_LAYOUT_WGACC) tiles = nt; /* its warp's 16 rows */
  sched_indent(o, depth);
  stof_buf_puts(o, "{ /* block ");
  sched_cg_comment(o, sched_block_name(s, st->block));
  stof_buf_puts(o, ": each lane its own elements of the warp's fragments */\n");
  sched_indent(o, depth + 1);
  stof_buf_printf(o, "#pragma unroll\n");
  sched_indent(o, depth + 1);
  stof_buf_printf(o, "for (int stof_t = 0; stof_t < %lld; ++stof_t)\n", (long long)tiles);
  sched_indent(o, depth + 1);
  stof_buf_printf(o, "#pragma unroll\n");
  sched_indent(o, depth + 1);
  stof_buf_puts(o, "for (int stof_e = 0; stof_e < 4; ++stof_e) {\n");
  sched_indent(o, depth + 2);
  stof_buf_puts(o, "const int stof_frag = stof_t * 4 + stof_e;\n");
  sched_indent(o, depth + 2);
  for (int a = 0; a < k0; a++) /* the leading unit loops */
    if (!sched_loop_at(s, b->loop[a])->elide) {
      stof_buf_puts(o, "const int64_t ");
      sched_cg_loop_name(g, b->loop[a]);
      stof_buf_puts(o, " = 0;\n");
      sched_indent(o, depth + 2);
    }
  stof_buf_puts(o, "const int64_t ");
  sched_cg_loop_name(g, b->loop[k0]);
  if (g->layout[wb - (const lir_buf *)g->l->bufs.data] == SCHED_LAYOUT_WGACC) /* warp w: rows 16w.. */
    stof_buf_puts(o, " = ((threadIdx.x >> 5) & 3) * 16 + (threadIdx.x & 31) / 4 + (stof_e / 2) * 8;\n");
  else
    stof_buf_printf(o, " = (stof_t / %lld) * 16 + (threadIdx.x & 31) / 4 + (stof_e / 2) * 8;\n", (long long)nt);
  sched_indent(o, depth + 2);
  stof_buf_puts(o, "const int64_t ");
  sched_cg_loop_name(g, b->loop[k0 + 1]);
  stof_buf_printf(o, " = (stof_t %% %lld) * 8 + (threadIdx.x & 3) * 2 + (stof_e & 1);\n", (long long)nt);
  emit_flat(g, st->first, depth + 2, 0, "the write-back");
  sched_indent(o, depth + 1);
  stof_buf_puts(o, "}\n");
  sched_indent(o, depth);
  stof_buf_puts(o, "}\n");
  if (sync) sched_cg_sync(g, st->block, depth, "every warp's fragments are written");
}

/* Bytes an asynchronous copy of the vectorized loop st moves per thread, or 0 when it is not
 * one: block copies a global buffer into a shared one at its own axes, the loop is its
 * innermost, and each iteration of the loops around it starts a V-aligned run of V
 * contiguous elements in both (V: the loop's extent, 4, 8 or 16 bytes). */
static int async_copy_bytes(const cgen *g, const lir_stmt *st) {
  const stof_sched *s = g->s;
  const sched_block *b = sched_block_at(s, st->block);
  const sched_loop *lp = sched_loop_at(s, st->loop);
  const stof_expr *body = b->op->body;
  int nd = b->op->ndim;
  if (!sched_cg_shared_writer(g, st->block) || b->nloop < 1 || b->loop[b->nloop - 1] != st->loop) return 0;
  if (body->kind != STOF_EXPR_LOAD || body->u.load.tensor->dtype != b->op->dtype || body->u.load.nidx != nd || nd < 1)
    return 0;
  if (place_of_op(g, body->u.load.tensor) != PLACE_GLOBAL) return 0;
  for (int d = 0; d < nd; d++)
    if (body->u.load.idx[d]->kind != STOF_EXPR_VAR || body->u.load.idx[d]->u.var != b->op->axis[d]) return 0;
  int64_t v = lp->extent, bytes = v * (int64_t)stof_dtype_size(b->op->dtype);
  if (bytes != 4 && bytes != 8 && bytes != 16) return 0;
  const lir_buf *db = lir_find_buf(g->l, b->out);
  const stof_op *src = body->u.load.tensor;
  const lir_buf *sb = lir_find_buf(g->l, src);
  int64_t sext = sb ? sb->ext[nd - 1] : src->shape[nd - 1];
  if (db->ext[nd - 1] % v || sext % v) return 0;
  for (int a = 0; a < nd; a++) {
    sched_aff x;
    sched_axis_aff_full(g->bd, (int)(b - (const sched_block *)s->blocks.data), a, &x);
    if (x.bad) return 0;
    int64_t kv = 0;
    for (int i = 0; i < x.n; i++) {
      if (x.loop[i] == st->loop) kv = x.k[i];
      else if (a == nd - 1 && x.k[i] % v) return 0;
    }
    if (kv != (a == nd - 1 ? 1 : 0)) return 0;
    if (a == nd - 1 && x.c % v) return 0;
  }
  return (int)bytes;
}

/* The body of a nest at its loop's value 0: `const int64_t <loop> = 0;` and the nest's lets
 * (no stores), at depth: the addresses of an access that covers the loop's whole run. */
static void at_loop_zero(cgen *g, const lir_stmt *st, int depth, const char *what) {
  sched_indent(g->b, depth);
  stof_buf_puts(g->b, "const int64_t ");
  sched_cg_loop_name(g, st->loop);
  stof_buf_puts(g->b, " = 0;\n");
  emit_flat(g, st->first, depth, 1, what);
}

static void emit_async_copy(cgen *g, const lir_stmt *st, int bytes, int depth) {
  stof_buf *o = g->b;
  const sched_block *b = sched_block_at(g->s, st->block);
  sched_indent(o, depth);
  stof_buf_printf(o, "{ /* %d-byte asynchronous copy: loop ", bytes);
  sched_cg_comment(o, sched_loop_name(g->s, st->loop));
  stof_buf_puts(o, " */\n");
  at_loop_zero(g, st, depth + 1, "the asynchronous copy");
  sched_indent(o, depth + 1);
  stof_buf_printf(o, "stof_cp_async<%d>(&", bytes);
  sched_cg_elem(g, st->block);
  stof_buf_puts(o, ", &");
  sched_cg_load_elem(g, b->op->body);
  stof_buf_puts(o, ");\n");
  sched_indent(o, depth);
  stof_buf_puts(o, "}\n");
}

/* ---------------------------------------------------------------- vector loads and stores */

/* The accesses of a vectorized loop (extent V) that move V contiguous elements as one 4-, 8-
 * or 16-byte access: a load or store of an argument in global memory (a whole allocation,
 * aligned to 256 bytes) whose last index has coefficient 1 on the loop, whose other indices
 * do not depend on it, and whose run starts at a multiple of V for every value of the loops
 * around it (every other coefficient, the constant and the last extent multiples of V). */
static int vec_bytes(const cgen *g, const stof_op *t, int64_t v) {
  if (t->dtype != STOF_DTYPE_F16 && t->dtype != STOF_DTYPE_BF16 && t->dtype != STOF_DTYPE_F32) return 0;
  int64_t bytes = v * (int64_t)stof_dtype_size(t->dtype);
  if (bytes != 4 && bytes != 8 && bytes != 16) return 0;
  const lir_buf *lb = lir_find_buf(g->l, t);
  if (!lb || !lb->external || place_of_op(g, t) != PLACE_GLOBAL || t->ndim < 1 || t->shape[t->ndim - 1] % v)
    return 0;
  return (int)bytes;
}

/* Do the affine indices x[0..nd) of an access step through V-aligned runs along loop? */
static int vec_indices(const sched_aff *x, int nd, int loop, int64_t v) {
  for (int d = 0; d < nd; d++) {
    if (x[d].bad) return 0;
    int64_t kv = 0;
    for (int i = 0; i < x[d].n; i++) {
      if (x[d].loop[i] == loop) kv = x[d].k[i];
      else if (d == nd - 1 && x[d].k[i] % v) return 0;
    }
    if (kv != (d == nd - 1 ? 1 : 0)) return 0;
    if (d == nd - 1 && x[d].c % v) return 0;
  }
  return 1;
}

/* The distinct loads of e (pointers) that vec_load_ok accepts, into g->vload. */
static void vec_loads(cgen *g, int block, const stof_expr *e, int loop, int64_t v) {
  if (!e || e->kind == STOF_EXPR_INT || e->kind == STOF_EXPR_FLOAT || e->kind == STOF_EXPR_VAR) return;
  if (e->kind == STOF_EXPR_REDUCE) {
    vec_loads(g, block, e->u.reduce.src, loop, v);
    return;
  }
  if (e->kind == STOF_EXPR_SELECT) { /* a branch's loads may be out of bounds when not taken */
    vec_loads(g, block, e->u.op.c, loop, v);
    return;
  }
  if (e->kind != STOF_EXPR_LOAD) {
    vec_loads(g, block, e->u.op.a, loop, v);
    vec_loads(g, block, e->u.op.b, loop, v);
    vec_loads(g, block, e->u.op.c, loop, v);
    return;
  }
  const stof_op *t = e->u.load.tensor;
  if (g->nvload == SCHED_VLOAD_MAX || e->u.load.nidx != t->ndim || !vec_bytes(g, t, v)) return;
  if (sched_access_clamp(g->acc, e)) return; /* its indices are clamped one by one */
  for (int k = 0; k < g->nvload; k++)
    if (g->vload[k] == e) return;
  sched_aff x[STOF_MAX_DIMS];
  for (int d = 0; d < t->ndim; d++) sched_expr_aff(g->bd, block, e->u.load.idx[d], &x[d]);
  if (vec_indices(x, t->ndim, loop, v)) g->vload[g->nvload++] = e;
}

static const char *vec_type(int bytes) { return bytes == 16 ? "uint4" : bytes == 8 ? "uint2" : "unsigned"; }

/* A vectorized loop whose body is its block's lets and stores (no guard, no inner loop):
 * each qualifying load is one vector load into register stof_vl<k> before the loop (at the
 * loop's value 0), the iterations read their elements from it; a qualifying plain or final
 * store (a float32 accumulator's rounding: it loads nothing) writes its elements into
 * register stof_vs, stored after the loop. The other accesses stay scalar. Returns 0,
 * having emitted nothing, when no access qualifies. */
static int emit_vector_loop(cgen *g, int stmt, int depth) {
  const lir_stmt *st = lir_stmt_at(g->l, stmt);
  const stof_sched *s = g->s;
  const sched_loop *lp = sched_loop_at(s, st->loop);
  const sched_block *b = sched_block_at(s, st->block);
  int64_t v = lp->extent;
  if (g->nvload || g->vstore || v < 2) return 0;
  int plain = 0, final = 0;
  for (int i = st->first; i >= 0; i = lir_stmt_at(g->l, i)->next) {
    const lir_stmt *c = lir_stmt_at(g->l, i);
    if ((c->kind != LIR_LET && c->kind != LIR_STORE) || c->block != st->block) return 0;
    if (c->kind == LIR_STORE && c->store == LIR_STORE_INIT) return 0;
    if (c->kind == LIR_STORE && c->store == LIR_STORE_PLAIN) plain = 1;
    if (c->kind == LIR_STORE && c->store == LIR_STORE_FINAL) final = 1;
  }
  const stof_expr *red = sched_block_reduce(b);
  memset(g->bd->fixed, 1, (size_t)s->loops.len); /* splits as their parts (no guard inside) */
  if (!final) /* a final store reads the accumulator only */
    vec_loads(g, st->block, red ? red->u.reduce.src : b->op->body, st->loop, v);
  int sbytes = 0;
  if ((plain || final) && b->rf_loop < 0 && (sbytes = vec_bytes(g, b->out, v))) {
    sched_aff x[STOF_MAX_DIMS];
    sched_store_aff(g->bd, st->block, x);
    if (!vec_indices(x, b->out->ndim, st->loop, v)) sbytes = 0;
  }
  int nvload = g->nvload;
  g->nvload = 0;
  if (!nvload && !sbytes) return 0;

  stof_buf *o = g->b;
  sched_indent(o, depth);
  stof_buf_printf(o, "{ /* loop %s vectorized: %d vector loads, %d vector stores */\n",
                  sched_loop_name(s, st->loop), nvload, sbytes ? 1 : 0);
  for (int k = 0; k < nvload; k++) {
    sched_indent(o, depth + 1);
    stof_buf_printf(o, "%s stof_vl%d;\n", vec_type(vec_bytes(g, g->vload[k]->u.load.tensor, v)), k);
  }
  if (sbytes) {
    sched_indent(o, depth + 1);
    stof_buf_printf(o, "%s stof_vs;\n", vec_type(sbytes));
  }
  if (nvload) { /* the loads, at the loop's value 0 */
    sched_indent(o, depth + 1);
    stof_buf_puts(o, "{\n");
    at_loop_zero(g, st, depth + 2, "the vectorized loop");
    for (int k = 0; k < nvload; k++) {
      const char *ty = vec_type(vec_bytes(g, g->vload[k]->u.load.tensor, v));
      sched_indent(o, depth + 2);
      stof_buf_printf(o, "stof_vl%d = *(const %s *)&", k, ty);
      sched_cg_load_elem(g, g->vload[k]);
      stof_buf_puts(o, ";\n");
    }
    sched_indent(o, depth + 1);
    stof_buf_puts(o, "}\n");
  }
  sched_indent(o, depth + 1);
  stof_buf_printf(o, "#pragma unroll\n");
  sched_indent(o, depth + 1);
  stof_buf_puts(o, "for (int64_t ");
  sched_cg_loop_name(g, st->loop);
  stof_buf_puts(o, " = 0; ");
  sched_cg_loop_name(g, st->loop);
  stof_buf_printf(o, " < INT64_C(%lld); ++", (long long)v);
  sched_cg_loop_name(g, st->loop);
  stof_buf_puts(o, ") {\n");
  int outer = g->cur_loop;
  g->cur_loop = st->loop;
  g->nvload = nvload;
  g->vloop = st->loop;
  g->vstore = sbytes != 0;
  sched_cg_stmts(g, st->first, depth + 2);
  g->nvload = 0;
  g->vstore = 0;
  g->cur_loop = outer;
  sched_indent(o, depth + 1);
  stof_buf_puts(o, "}\n");
  if (sbytes) { /* the store, at the loop's value 0 */
    sched_indent(o, depth + 1);
    stof_buf_puts(o, "{\n");
    at_loop_zero(g, st, depth + 2, "the vectorized loop");
    sched_indent(o, depth + 2);
    stof_buf_printf(o, "*(%s *)&", vec_type(sbytes));
    sched_cg_elem(g, st->block);
    stof_buf_puts(o, " = stof_vs;\n");
    sched_indent(o, depth + 1);
    stof_buf_puts(o, "}\n");
  }
  sched_indent(o, depth);
  stof_buf_puts(o, "}\n");
  sched_cuda_xr_after(g, stmt, depth); /* when the loop is the reduction's outermost */
  return 1;
}

/* Declares, inside a scope, the shared buffers filled at loop as their copy number stage
 * (an expression), shadowing the whole allocation. */
static void emit_stage_views(cgen *g, int loop, const char *stage, int depth) {
  for (int i = 0; i < g->l->bufs.len; i++) {
    const lir_buf *lb = (const lir_buf *)g->l->bufs.data + i;
    if (g->place[i] != PLACE_SHARED || g->stages[i] < 2 || lb->writer < 0 ||
        sched_block_at(g->s, lb->writer)->attach != loop)
      continue;
    const char *ty = sched_cg_stype(1, lb->op->dtype);
    sched_indent(g->b, depth);
    stof_buf_printf(g->b, "%s *const stof_view_%d = ", ty, i);
    sched_cg_buf_name(g->b, lb->op);
    stof_buf_printf(g->b, " + (%s) %% %d * %zu;\n", stage, g->stages[i], g->size[i]);
    sched_indent(g->b, depth);
    stof_buf_printf(g->b, "%s *const ", ty);
    sched_cg_buf_name(g->b, lb->op);
    stof_buf_printf(g->b, " = stof_view_%d;\n", i);
  }
}

/* A loop with the pragma pipeline_stages = S whose body starts with the blocks filling its
 * shared buffers: the copies for iterations i + 1 .. i + S - 1 are in flight while
 * iteration i computes (S copies of each buffer). */
static void emit_pipeline(cgen *g, const lir_stmt *st, int nstage, int depth) {
  const stof_sched *s = g->s;
  stof_buf *o = g->b;
  int first_rest = st->first;
  while (first_rest >= 0 && lir_stmt_at(g->l, first_rest)->kind == LIR_BLOCK &&
         sched_cg_shared_writer(g, lir_stmt_at(g->l, first_rest)->block) &&
         sched_block_at(s, lir_stmt_at(g->l, first_rest)->block)->attach == st->loop)
    first_rest = lir_stmt_at(g->l, first_rest)->next;
  if (first_rest == st->first) {
    cg_fail(g, stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                              "cuda: loop %s is pipelined but no block filling shared memory is "
                              "computed at it",
                              sched_loop_name(s, st->loop)));
    return;
  }
  if (g->diverge) {
    cg_fail(g, stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                              "cuda: pipelined loop %s lies under a guard: not every thread would reach "
                              "its barriers",
                              sched_loop_name(s, st->loop)));
    return;
  }
  int64_t ext = sched_loop_at(s, st->loop)->extent;
  char stage[64];
  /* the copies, as loop iteration `it` (an expression), into its stage */
  #define EMIT_COPIES(IT)                                                                      \
    do {                                                                                       \
      sched_indent(o, depth + 2);                                                              \
      stof_buf_printf(o, "const int64_t stof_it = %s;\n", IT);                                \
      sched_indent(o, depth + 2);                                                              \
      stof_buf_printf(o, "if (stof_it < INT64_C(%lld)) {\n", (long long)ext);                  \
      sched_indent(o, depth + 3);                                                              \
      stof_buf_puts(o, "const int64_t ");                                                      \
      sched_cg_loop_name(g, st->loop);                                                         \
      stof_buf_puts(o, " = stof_it;\n");                                                       \
      emit_stage_views(g, st->loop, "stof_it", depth + 3);                                     \
      g->in_pipeline = 1;                                                                      \
      for (int c = st->first; c != first_rest; c = lir_stmt_at(g->l, c)->next)                 \
        sched_cg_stmt(g, c, depth + 3);                                                        \
      g->in_pipeline = 0;                                                                      \
      sched_indent(o, depth + 2);                                                              \
      stof_buf_puts(o, "}\n");                                                                 \
      sched_indent(o, depth + 2);                                                              \
      stof_buf_puts(o, "stof_cp_async_commit();\n");                                           \
    } while (0)
  sched_indent(o, depth);
  stof_buf_printf(o, "{ /* loop %s, pipelined: %d stages */\n", sched_loop_name(s, st->loop), nstage);
  sched_indent(o, depth + 1);
  stof_buf_printf(o, "for (int64_t stof_p = 0; stof_p < %d; ++stof_p) {\n", nstage - 1);
  EMIT_COPIES("stof_p");
  sched_indent(o, depth + 1);
  stof_buf_puts(o, "}\n");
  sched_indent(o, depth + 1);
  stof_buf_puts(o, "for (int64_t stof_i = 0; stof_i < INT64_C(");
  stof_buf_printf(o, "%lld); ++stof_i) {\n", (long long)ext);
  sched_indent(o, depth + 2);
  stof_buf_printf(o, "stof_cp_async_wait<%d>();%s\n", nstage - 2,
                  g->wgmma ? " stof_fence_async(); /* visible to wgmma (async proxy) */" : "");
  sched_indent(o, depth + 2);
  stof_buf_puts(o, "__syncthreads(); /* stage stof_i is in; every thread is done with stage stof_i - 1 */\n");
  sched_indent(o, depth + 2);
  stof_buf_puts(o, "{\n");
  snprintf(stage, sizeof stage, "stof_i + %d", nstage - 1);
  depth++;
  EMIT_COPIES(stage);
  depth--;
  sched_indent(o, depth + 2);
  stof_buf_puts(o, "}\n");
  #undef EMIT_COPIES
  sched_indent(o, depth + 2);
  stof_buf_puts(o, "const int64_t ");
  sched_cg_loop_name(g, st->loop);
  stof_buf_puts(o, " = stof_i;\n");
  emit_stage_views(g, st->loop, "stof_i", depth + 2);
  int outer = g->cur_loop;
  g->cur_loop = st->loop;
  for (int c = first_rest; c >= 0; c = lir_stmt_at(g->l, c)->next) sched_cg_stmt(g, c, depth + 2);
  g->cur_loop = outer;
  sched_indent(o, depth + 1);
  stof_buf_puts(o, "}\n");
  sched_indent(o, depth + 1);
  stof_buf_puts(o, "stof_cp_async_wait_all();\n");
  sched_indent(o, depth + 1);
  stof_buf_puts(o, "__syncthreads();\n");
  sched_indent(o, depth);
  stof_buf_puts(o, "}\n");
}

/* A wgmma-tensorized nest: the warpgroup's m64nN tile over the k loop, one call. */
static void emit_wgmma(cgen *g, const lir_stmt *st, int depth) {
  const stof_sched *s = g->s;
  sched_mma m;
  stof_status e = sched_tensorize_match(s, st->loop, tensorize_intrin(s, st->loop), &m);
  if (e) {
    cg_fail(g, e);
    return;
  }
  const sched_block *b = sched_block_at(s, st->block);
  const lir_buf *cb = lir_find_buf(g->l, b->out), *ab = lir_find_buf(g->l, m.a), *bb = lir_find_buf(g->l, m.b);
  const lir_buf *base = (const lir_buf *)g->l->bufs.data;
  const char *why = NULL;
  if (place_of_op(g, b->out) != PLACE_WARP || g->layout[cb - base] != SCHED_LAYOUT_WGACC)
    why = "must write a warp buffer (cache_write(block, \"warp\"))";
  else if (place_of_op(g, m.a) != PLACE_SHARED || place_of_op(g, m.b) != PLACE_SHARED)
    why = "must read its operands from shared memory (cache_read(block, i, \"shared\"))";
  else if (ab->ext[1] != 64 || bb->ext[0] != m.k || bb->ext[1] % 64)
    why = "needs A's shared tile 64 columns wide (no pad) and B's as many rows as the k loop, in "
          "columns a multiple of 64";
  else if (cb->ext[0] != 64 || cb->ext[1] != m.n)
    why = "must cover its whole warp buffer (64 rows by the n loop) in one call";
  if (why) {
    cg_fail(g, stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE, "cuda: wgmma-tensorized block %s %s",
                              sched_block_name(s, st->block), why));
    return;
  }
  stof_buf *o = g->b;
  open_tensorized(g, st, &m, "wgmma m64nNk16", depth);
  sched_indent(o, depth + 1);
  stof_buf_printf(o, "stof_wgmma_%s_%lld<%lld>(", m.a->dtype == STOF_DTYPE_BF16 ? "bf16" : "f16", (long long)m.n,
                  (long long)(m.k / 16));
  sched_cg_buf_name(o, b->out);
  stof_buf_puts(o, ", &");
  sched_cg_load_elem(g, m.la);
  stof_buf_puts(o, ", &");
  sched_cg_load_elem(g, m.lb);
  stof_buf_printf(o, ", %lldu);\n", (long long)(bb->ext[0] * 128));
  sched_indent(o, depth);
  stof_buf_puts(o, "}\n");
}

int sched_cuda_stmt(cgen *g, int stmt, int depth) {
  const lir_stmt *st = lir_stmt_at(g->l, stmt);
  if (st->kind == LIR_BLOCK && st->block >= 0) {
    const stof_op *w = warp_input(g, st->block);
    if (!w) return 0;
    emit_warp_reader(g, st, w, depth);
    return 1;
  }
  if (st->kind != LIR_FOR) return 0;
  const sched_loop *lp = sched_loop_at(g->s, st->loop);
  if (emit_warp_init(g, st, depth)) return 1; /* the init nest shares the tensorized loop */
  if (lp->ann == STOF_ANN_TENSORIZE) {
    emit_mma(g, st, depth);
    return 1;
  }
  if (lp->ann == STOF_ANN_VECTORIZE) {
    int bytes = async_copy_bytes(g, st);
    if (!bytes) return emit_vector_loop(g, stmt, depth);
    emit_async_copy(g, st, bytes, depth);
    return 1;
  }
  int ns = pipeline_stages(g->s, st->loop);
  if (ns >= 2) {
    if (lp->ann != STOF_ANN_NONE && lp->ann != STOF_ANN_UNROLL)
      cg_fail(g, stof_ctx_error(g->s->ctx, STOF_ERR_SCHEDULE,
                                "cuda: pipelined loop %s must be a serial loop, but it is %s",
                                sched_loop_name(g->s, st->loop),
                                lp->ann == STOF_ANN_THREAD ? stof_thread_tag_name(lp->thread) : stof_ann_kind_name(lp->ann)));
    else
      emit_pipeline(g, st, ns, depth);
    sched_cuda_xr_after(g, stmt, depth); /* a pipelined reduction's all-reduce and store */
    return 1;
  }
  return 0;
}
