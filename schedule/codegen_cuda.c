/*
 * CUDA C code from the loop IR: one `extern "C" __global__` kernel per root block (a block
 * and the blocks computed at its loops), in the lowering's (topological) order; groups do
 * not fuse yet, as on the C backend. Every kernel takes the same parameters: the build's
 * tensors in the order given (placeholders const), then the intermediate buffers that live
 * in global memory (allocated by the run time), so the launcher passes one list to all.
 *
 * Threads: a loop bound to blockIdx.x/y/z or threadIdx.x/y/z is not a loop but the built-in
 * index (with a guard when the kernel launches more than its extent); the launch extent of
 * a tag is the extent of the loop bound to it (1 when none is). Every other loop runs
 * serially in each thread. A kernel is therefore each thread running the C backend's nest
 * with its bound loops fixed, which is right when (checked here, STOF_ERR_SCHEDULE):
 *  - no two loops of one kernel are bound to the same tag, and no reduce loop is bound;
 *  - threadIdx extents multiply to at most 1024 (x, y <= 1024, z <= 64), gridDim.y and z
 *    are at most 65535;
 *  - every store into memory that other threads see (an argument or a global intermediate)
 *    lies under a loop bound to every tag the kernel launches more than once (else several
 *    threads would write, or accumulate into, the same element);
 *  - an intermediate compacted under a loop is private to a thread (a local array): the
 *    loop lies under loops bound to every launched tag. Staging one in shared memory for
 *    the threads of a block is not built yet.
 *
 * Types: f16 and bf16 are stored as __half and __nv_bfloat16 (cuda_fp16.h, cuda_bf16.h)
 * and compute in float; the other rules (floor division, saturating casts, NaN-propagating
 * max/min) are the C backend's, with the same helpers written as device functions.
 * vectorize and unroll become `#pragma unroll`.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "schedule_int.h"

static const char prelude[] =
    "#include <cuda_fp16.h>\n"
    "#include <cuda_bf16.h>\n"
    "\n"
    "typedef long long stof_i64_t;\n"
    "#define int64_t stof_i64_t\n"
    "#define int32_t int\n"
    "#define uint8_t unsigned char\n"
    "#define INT64_C(x) x##LL\n"
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
    "STOF_D float stof_fmodf(float a, float b) { return a - floorf(a / b) * b; }\n"
    "STOF_D double stof_fmod(double a, double b) { return a - floor(a / b) * b; }\n"
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
    "STOF_D int64_t stof_abs_i64(int64_t a) { return a < 0 ? -a : a; }\n";


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
        if (lp->iter == STOF_ITER_REDUCE) {
          k->st = stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                                 "cuda: reduce loop %s of block %s is bound to %s (rfactor it first)",
                                 sched_loop_name(s, st->loop), sched_block_name(s, lp->block), tag);
          return;
        }
        /* Loops of different blocks may share a tag (each runs on the threads its extent
         * needs); one inside another only when the inner one fills a shared buffer (the
         * threads of the block fetch it together, TVM's cooperative fetching). */
        int prev = outer->loop[lp->thread];
        if (prev >= 0 && sched_block_at(s, lp->block)->scope != SCHED_SCOPE_SHARED) {
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

/* Every store into memory other threads see lies under loops bound to all launched tags. */
static void scan_stores(kscan *k, int first, unsigned mask, unsigned need, const unsigned char *place) {
  const stof_sched *s = k->s;
  for (int i = first; i >= 0 && !k->st; i = lir_stmt_at(k->l, i)->next) {
    const lir_stmt *st = lir_stmt_at(k->l, i);
    unsigned m = mask;
    if (st->kind == LIR_FOR && sched_loop_at(s, st->loop)->ann == STOF_ANN_THREAD)
      m |= 1u << sched_loop_at(s, st->loop)->thread;
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
                               unsigned *inside, unsigned char *place, size_t *soff, sched_cuda_kernel *kk) {
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
      soff[i] = kk->smem;
      kk->smem += shared_bytes(lb);
      continue;
    }
    if (lb->at < 0) continue;
    if (need & ~inside[lb->at])
      return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                            "cuda: buffer %s is allocated per iteration of loop %s, outside the loop "
                            "bound to %s in kernel %s: threads would share it (cache it in scope "
                            "\"shared\" to share it)",
                            lb->op->name, sched_loop_name(s, lb->at), missing_tag(need, inside[lb->at]), kname);
    place[i] = PLACE_LOCAL;
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

stof_status sched_codegen_cuda(const stof_sched *s, int nargs, const stof_op *const *args, char **out,
                               sched_cuda_info *info) {
  stof_ctx *ctx = s->ctx;
  *out = NULL;
  sched_cuda_info inf;
  memset(&inf, 0, sizeof inf);
  sched_lir l;
  stof_status st = sched_lower(s, nargs, args, &l);
  if (st) return st;
  int nk = 0;
  for (int i = l.first; i >= 0; i = lir_stmt_at(&l, i)->next) nk++;
  unsigned *inside = stof_ctx_alloc(ctx, sizeof *inside * (size_t)(s->loops.len ? s->loops.len : 1));
  unsigned char *place = stof_ctx_alloc(ctx, (size_t)(l.bufs.len ? l.bufs.len : 1));
  size_t *soff = stof_ctx_alloc(ctx, sizeof *soff * (size_t)(l.bufs.len ? l.bufs.len : 1));
  inf.nkernel = nk;
  inf.kernel = stof_ctx_alloc(ctx, sizeof *inf.kernel * (size_t)(nk ? nk : 1));
  for (int i = 0; i < l.bufs.len; i++) {
    const lir_buf *lb = (const lir_buf *)l.bufs.data + i;
    if (lb->writer >= 0 && !lb->external && lb->at < 0) inf.ntemp++;
  }
  inf.temp_bytes = stof_ctx_alloc(ctx, sizeof *inf.temp_bytes * (size_t)(inf.ntemp ? inf.ntemp : 1));
  if (!inside || !place || !soff || !inf.kernel || !inf.temp_bytes) {
    st = STOF_ERR_NOMEM;
    goto done;
  }
  memset(place, PLACE_GLOBAL, (size_t)(l.bufs.len ? l.bufs.len : 1));
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
    st = plan_kernel(s, &l, i, inf.kernel[k].name, inside, place, soff, &inf.kernel[k]);
  }
  if (st) goto done;

  stof_buf b;
  stof_buf_init(&b, ctx);
  cgen g = {s, &l, &b, STOF_OK, 1, {0}, place, 0};
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
  stof_buf_puts(&b, prelude);
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
        stof_buf_printf(&b, " = (%s *)(stof_smem + %zu); /* shared, %lld elements */\n", sched_cg_stype(1, lb->op->dtype),
                        soff[j], (long long)buf_numel(lb));
        continue;
      }
      stof_buf_printf(&b, "  %s ", sched_cg_stype(1, lb->op->dtype));
      sched_cg_buf_name(&b, lb->op);
      stof_buf_printf(&b, "[%lld]; /* %s, private to the thread */\n", (long long)buf_numel(lb),
                      sched_scope_name(lb->scope));
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
  sched_lir_free(&l);
  if (st || !info)
    sched_cuda_info_free(ctx, &inf);
  else
    *info = inf;
  return st;
}
