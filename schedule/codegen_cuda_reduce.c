/*
 * Cross-thread reductions on the CUDA backend: a reduce block whose reduce loop is bound to
 * threadIdx.x (or .y / .z) is a reduction across the threads of that tag.
 *
 * The lowering decomposes such a block as any other (schedule/lower.c): the loops before its
 * outermost reduce loop are shared, an init store of the identity, then the update nest over
 * the reduce loops. On CUDA, for a block whose loops after that point are all reduce loops:
 *  - the init store declares a private accumulator (the block's compute type: float for
 *    f16/bf16/f32, double, int32_t, int64_t) holding the identity;
 *  - each update folds into it: a thread folds its share (the bound loop fixed to its index,
 *    the others serial);
 *  - right after the update nest, every thread of the CUDA block takes part in an all-reduce
 *    over the threads of the tag (xor shuffles within a warp, then, when the tag spans more
 *    than one warp, one partial per warp through a __shared__ array and a second round of
 *    shuffles in every warp), and stores the result into the block's buffer (so the final
 *    store the lowering adds for an f16/bf16 reduction emits nothing here).
 * The result is replicated: every thread holds (and stores) the same value, bitwise (every
 * lane of a butterfly combines the same pairs, and every warp folds the same partials in
 * the same order). So a buffer that such a block writes at a loop outside the thread
 * bindings is legal as a private copy in every thread (codegen_cuda.c, plan_kernel), and a
 * store into memory other threads see is legal outside the loops bound to that tag (every
 * thread writes the same value).
 *
 * Rules (STOF_ERR_SCHEDULE, naming the block): one tag per block; no data-parallel loop
 * inside its reduce loops; the tag's launch extent is a power of two up to 32 or a multiple
 * of 32, and the lower tags are launched once (the threads of one reduction are consecutive
 * lanes); no guard around the block (every thread must reach the barriers and shuffles).
 * max and min propagate NaN as the C backend does; sums are reassociated (a tree), so they
 * differ from the serial order in the last bits; f16/bf16 results are rounded once, at the
 * store.
 */
#include <stdio.h>
#include <string.h>

#include "schedule_int.h"

/* The device helpers (after the prelude, when the source has a cross-thread reduction):
 * combiners with the C backend's NaN rule, and a butterfly over w lanes (a power of two,
 * at most 32) of the lanes in mask m. */
static const char helpers[] =
    "\n/* cross-thread reductions (codegen_cuda_reduce.c) */\n"
    "STOF_D unsigned stof_warp_mask(int lin, int total) {\n"
    "  int n = total - (lin & ~31);\n"
    "  return n >= 32 ? 0xffffffffu : (1u << n) - 1u;\n"
    "}\n"
    "#define STOF_XR(T, S) \\\n"
    "  STOF_D T stof_xr_sum_##S(T a, T b) { return a + b; } \\\n"
    "  STOF_D T stof_xr_max_##S(T a, T b) { return (b > a || b != b) ? b : a; } \\\n"
    "  STOF_D T stof_xr_min_##S(T a, T b) { return (b < a || b != b) ? b : a; } \\\n"
    "  STOF_D T stof_warp_sum_##S(T v, unsigned m, int w) { \\\n"
    "    for (int o = w >> 1; o > 0; o >>= 1) v = stof_xr_sum_##S(v, __shfl_xor_sync(m, v, o)); \\\n"
    "    return v; \\\n"
    "  } \\\n"
    "  STOF_D T stof_warp_max_##S(T v, unsigned m, int w) { \\\n"
    "    for (int o = w >> 1; o > 0; o >>= 1) v = stof_xr_max_##S(v, __shfl_xor_sync(m, v, o)); \\\n"
    "    return v; \\\n"
    "  } \\\n"
    "  STOF_D T stof_warp_min_##S(T v, unsigned m, int w) { \\\n"
    "    for (int o = w >> 1; o > 0; o >>= 1) v = stof_xr_min_##S(v, __shfl_xor_sync(m, v, o)); \\\n"
    "    return v; \\\n"
    "  }\n"
    "STOF_XR(float, f32)\n"
    "STOF_XR(double, f64)\n"
    "STOF_XR(int32_t, i32)\n"
    "STOF_XR(int64_t, i64)\n";

static int is_thread_tag(int tag) {
  return tag == STOF_THREAD_THREAD_X || tag == STOF_THREAD_THREAD_Y || tag == STOF_THREAD_THREAD_Z;
}

int sched_cuda_xr_tag(const stof_sched *s, int block) {
  const sched_block *b = sched_block_at(s, block);
  if (b->state != SCHED_B_LIVE || !sched_block_reduce(b)) return -1;
  for (int k = 0; k < b->nloop; k++) {
    const sched_loop *lp = sched_loop_at(s, b->loop[k]);
    if (lp->iter == STOF_ITER_REDUCE && lp->ann == STOF_ANN_THREAD && is_thread_tag(lp->thread))
      return (int)lp->thread;
  }
  return -1;
}

int sched_cuda_xr_replicated(const stof_sched *s, int block) {
  if (sched_cuda_xr_tag(s, block) < 0) return 0;
  const sched_block *b = sched_block_at(s, block);
  for (int k = 0; k < b->nloop; k++) {
    const sched_loop *lp = sched_loop_at(s, b->loop[k]);
    if (lp->iter == STOF_ITER_DATA_PAR && lp->ann == STOF_ANN_THREAD) return 0;
  }
  return 1;
}

void sched_cuda_xr_prelude(const stof_sched *s, stof_buf *b) {
  for (int k = 0; k < s->blocks.len; k++)
    if (sched_cuda_xr_tag(s, k) >= 0) {
      stof_buf_puts(b, helpers);
      return;
    }
}

/* The compute type of the accumulator and its helper suffix. */
static const char *acc_type(stof_dtype d) {
  switch (d) {
  case STOF_DTYPE_F64: return "double";
  case STOF_DTYPE_I32:
  case STOF_DTYPE_BOOL: return "int32_t";
  case STOF_DTYPE_I64: return "int64_t";
  default: return "float";
  }
}

static const char *combiner_name(stof_reduce_kind c) {
  return c == STOF_REDUCE_SUM ? "sum" : c == STOF_REDUCE_MAX ? "max" : "min";
}

static void identity(stof_buf *o, stof_reduce_kind c, stof_dtype d) {
  const char *t = acc_type(d);
  if (c == STOF_REDUCE_SUM)
    stof_buf_printf(o, "(%s)0", t);
  else if (stof_dtype_is_float(d))
    stof_buf_printf(o, "(%s)%sINFINITY", t, c == STOF_REDUCE_MAX ? "-" : "");
  else if (d == STOF_DTYPE_I64)
    stof_buf_puts(o, c == STOF_REDUCE_MAX ? "INT64_MIN" : "INT64_MAX");
  else
    stof_buf_puts(o, c == STOF_REDUCE_MAX ? "INT32_MIN" : "INT32_MAX");
}

/* The accumulator of block: "stof_acc<id>". */
static void acc_name(stof_buf *o, int block) { stof_buf_printf(o, "stof_acc%d", block); }

/* Position of the outermost reduce loop of block b. */
static int first_reduce(const stof_sched *s, const sched_block *b) {
  for (int k = 0; k < b->nloop; k++)
    if (sched_loop_at(s, b->loop[k])->iter == STOF_ITER_REDUCE) return k;
  return b->nloop;
}

static void fail(cgen *g, int block, const char *why) {
  if (!g->st)
    g->st = stof_ctx_error(g->s->ctx, STOF_ERR_SCHEDULE, "cuda: block %s reduces across threads: %s",
                           sched_block_name(g->s, block), why);
}

/* The block's shape is one the all-reduce handles (else an error in g). */
static int check_shape(cgen *g, int block) {
  const stof_sched *s = g->s;
  const sched_block *b = sched_block_at(s, block);
  int ntag = 0;
  for (int k = first_reduce(s, b); k < b->nloop; k++) {
    const sched_loop *lp = sched_loop_at(s, b->loop[k]);
    if (lp->iter != STOF_ITER_REDUCE) {
      char why[200];
      snprintf(why, sizeof why,
               "data-parallel loop %s lies inside its reduce loops (reorder the reduce loops "
               "innermost)",
               sched_loop_name(s, b->loop[k]));
      fail(g, block, why);
      return 0;
    }
    if (lp->ann == STOF_ANN_THREAD) ntag++;
  }
  if (ntag > 1) {
    fail(g, block, "more than one of its reduce loops is bound to a thread index (bind one, or fuse them first)");
    return 0;
  }
  return 1;
}

int sched_cuda_xr_store(cgen *g, int block, const lir_stmt *st, int depth) {
  if (!g->cuda || sched_cuda_xr_tag(g->s, block) < 0 || st->store == LIR_STORE_PLAIN) return 0;
  const sched_block *b = sched_block_at(g->s, block);
  const stof_expr *red = sched_block_reduce(b);
  stof_reduce_kind c = red->u.reduce.combiner;
  stof_dtype dt = b->op->dtype;
  stof_buf *o = g->b;
  if (st->store == LIR_STORE_FINAL) return 1; /* its store follows the all-reduce */
  if (st->store == LIR_STORE_INIT && !check_shape(g, block)) return 1;
  sched_indent(o, depth);
  if (st->store == LIR_STORE_INIT) {
    stof_buf_printf(o, "%s ", acc_type(dt));
    acc_name(o, block);
    stof_buf_puts(o, " = ");
    identity(o, c, dt);
    stof_buf_puts(o, "; /* this thread's share of ");
    sched_cg_comment(o, sched_block_name(g->s, block));
    stof_buf_puts(o, " */\n");
    return 1;
  }
  acc_name(o, block);
  stof_buf_printf(o, " = stof_xr_%s_%s(", combiner_name(c), sched_cg_suffix(dt));
  acc_name(o, block);
  stof_buf_puts(o, ", ");
  sched_cg_expr_as(g, red->u.reduce.src, dt);
  stof_buf_puts(o, ");\n");
  return 1;
}

void sched_cuda_xr_after(cgen *g, int stmt, int depth) {
  const lir_stmt *st = lir_stmt_at(g->l, stmt);
  const stof_sched *s = g->s;
  if (!g->cuda || st->kind != LIR_FOR || st->block < 0) return;
  int block = st->block, tag = sched_cuda_xr_tag(s, block);
  if (tag < 0) return;
  const sched_block *b = sched_block_at(s, block);
  int p = first_reduce(s, b);
  if (p >= b->nloop || b->loop[p] != st->loop) return; /* not the top of the update nest */
  if (g->st) return;
  const char *tname = stof_thread_tag_name((stof_thread_tag)tag);
  char why[256];
  if (g->diverge) {
    snprintf(why, sizeof why,
             "it lies under a guard (a thread index beyond a loop's extent, or a split that does not "
             "divide), so not every thread would reach its all-reduce over %s (make the bound loops' "
             "extents equal and the splits divide)",
             tname);
    fail(g, block, why);
    return;
  }
  int64_t dx = g->dim[STOF_THREAD_THREAD_X], dy = g->dim[STOF_THREAD_THREAD_Y], dz = g->dim[STOF_THREAD_THREAD_Z];
  int64_t n = g->dim[tag], total = dx * dy * dz;
  if ((tag != STOF_THREAD_THREAD_X && dx > 1) || (tag == STOF_THREAD_THREAD_Z && dy > 1)) {
    snprintf(why, sizeof why,
             "over %s, while the kernel launches threadIdx.x = %lld, threadIdx.y = %lld (reduce over "
             "threadIdx.x, or launch the lower indices once)",
             tname, (long long)dx, (long long)dy);
    fail(g, block, why);
    return;
  }
  if (n > 32 ? n % 32 != 0 : (n & (n - 1)) != 0) {
    snprintf(why, sizeof why,
             "the kernel launches %s = %lld: it must be a power of two up to 32 or a multiple of 32",
             tname, (long long)n);
    fail(g, block, why);
    return;
  }
  const sched_block *bk = b;
  stof_reduce_kind c = sched_block_reduce(bk)->u.reduce.combiner;
  stof_dtype dt = bk->op->dtype;
  const char *t = acc_type(dt), *sfx = sched_cg_suffix(dt), *cn = combiner_name(c);
  stof_buf *o = g->b;
  int64_t lanes = n < 32 ? n : 32, warps = n / 32;
  sched_indent(o, depth);
  stof_buf_printf(o, "{ /* all-reduce (%s) of ", cn);
  sched_cg_comment(o, sched_block_name(s, block));
  stof_buf_printf(o, " over %s: %lld threads", tname, (long long)n);
  if (warps > 1) stof_buf_printf(o, ", %lld warps", (long long)warps);
  stof_buf_puts(o, " */\n");
  sched_indent(o, depth + 1);
  stof_buf_printf(o, "const int stof_lin = (int)(threadIdx.x + %lldu * (threadIdx.y + %lldu * threadIdx.z));\n",
                  (long long)dx, (long long)dy);
  sched_indent(o, depth + 1);
  stof_buf_printf(o, "%s stof_v = ", t);
  acc_name(o, block);
  stof_buf_puts(o, ";\n");
  sched_indent(o, depth + 1);
  if (total % 32 == 0)
    stof_buf_printf(o, "stof_v = stof_warp_%s_%s(stof_v, 0xffffffffu, %lld);\n", cn, sfx, (long long)lanes);
  else
    stof_buf_printf(o, "stof_v = stof_warp_%s_%s(stof_v, stof_warp_mask(stof_lin, %lld), %lld);\n", cn, sfx,
                    (long long)total, (long long)lanes);
  if (warps > 1) {
    /* one partial per warp, then every warp folds its group's partials */
    sched_indent(o, depth + 1);
    stof_buf_printf(o, "__shared__ %s stof_part[%lld];\n", t, (long long)(total / 32));
    sched_indent(o, depth + 1);
    stof_buf_puts(o, "if ((stof_lin & 31) == 0) stof_part[stof_lin >> 5] = stof_v;\n");
    sched_indent(o, depth + 1);
    stof_buf_puts(o, "__syncthreads(); /* every warp's partial is written */\n");
    sched_indent(o, depth + 1);
    stof_buf_printf(o, "stof_v = (stof_lin & 31) < %lld ? stof_part[stof_lin / %lld * %lld + (stof_lin & 31)] : ",
                    (long long)warps, (long long)n, (long long)warps);
    identity(o, c, dt);
    stof_buf_puts(o, ";\n");
    sched_indent(o, depth + 1);
    stof_buf_printf(o, "stof_v = stof_warp_%s_%s(stof_v, 0xffffffffu, 32);\n", cn, sfx);
    sched_indent(o, depth + 1);
    stof_buf_puts(o, "__syncthreads(); /* every warp has read the partials */\n");
  }
  sched_indent(o, depth + 1);
  acc_name(o, block);
  stof_buf_puts(o, " = stof_v;\n");
  sched_indent(o, depth);
  stof_buf_puts(o, "}\n");
  sched_indent(o, depth);
  sched_cg_store_open(g, block);
  acc_name(o, block);
  stof_buf_puts(o, ");\n");
}
