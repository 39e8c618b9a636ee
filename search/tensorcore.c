/*
 * The built-in template "tensorcore" (CUDA): a generated segment that holds one GEMM,
 * x[b, i, k] @ W (W [N, K] or [K, N]), and injective ops after it (bias, activation,
 * residual add, casts) runs as one kernel on the tensor cores: mma.sync m16n8k16 over warp
 * tiles of 64 x 32, operand tiles of 32 along k staged in shared memory by cp.async through
 * a 3-stage pipeline, the accumulators in float32 in the warps' registers, and the
 * epilogue applied while each lane writes its own elements back. b (when the GEMM is
 * batched) is bound to blockIdx.z so that a tile holds one b.
 *
 * Knobs: tc.wm (warps along the rows: tiles of 64 * wm rows) and tc.wn (along the columns:
 * 32 * wn), each offering only values that divide the GEMM's extents, so that no
 * candidate needs a guard in the tensorized nest (the pruning rule: a segment whose rows,
 * columns or depth are not multiples of 64, 64 and 32 does not match at all).
 */
#include <stdio.h>
#include <string.h>

#include "search_int.h"

#define TC_BK 32

static const char *tc_name = "tensorcore";

const char *search_tc_name(void) { return tc_name; }

/* The GEMM op among ops (NULL when none, or more than one), and whether every other op is
 * injective (no reduction). */
static const stof_op *the_gemm(int nop, const stof_op *const *ops, int *injective) {
  const stof_op *g = NULL;
  *injective = 1;
  for (int i = 0; i < nop; i++) {
    const stof_op *o = ops[i];
    if (o->kind != STOF_OP_COMPUTE) {
      *injective = 0;
      continue;
    }
    if (stof_plan_op_is_gemm(o)) {
      if (g) return NULL;
      g = o;
    } else if (o->body && o->body->kind == STOF_EXPR_REDUCE) {
      *injective = 0;
    }
  }
  return g;
}

static const stof_expr *uncast(const stof_expr *e) {
  while (e && e->kind == STOF_EXPR_CAST) e = e->u.op.a;
  return e;
}

/* The GEMM in the form tensorize takes: sum(x[.., i, k] * W[..]) with x's load the first
 * factor (2-D, or indexed like the GEMM), W's the second (2-D); x's dtype, or -1. */
static int tensorizable(const stof_op *g) {
  const stof_expr *src = g->body->u.reduce.src;
  if (src->kind != STOF_EXPR_MUL) return -1;
  const stof_expr *a = uncast(src->u.op.a), *b = uncast(src->u.op.b);
  if (!a || !b || a->kind != STOF_EXPR_LOAD || b->kind != STOF_EXPR_LOAD || b->u.load.nidx != 2 ||
      (a->u.load.nidx != 2 && a->u.load.nidx != g->ndim))
    return -1;
  const stof_expr *k = a->u.load.idx[a->u.load.nidx - 1];
  if (k->kind != STOF_EXPR_VAR || k->u.var != g->body->u.reduce.axis[0]) return -1;
  return (int)a->u.load.tensor->dtype;
}

static int in_list(const stof_op *t, const stof_op *const *list, int n) {
  for (int i = 0; i < n; i++)
    if (list[i] == t) return 1;
  return 0;
}

/* Does e read the tensors of dep[0..ndep) at op's own axes only (each lane writes back
 * the elements its fragments hold: an epilogue cannot read a neighbour's)? */
static int own_axes(const stof_op *op, const stof_expr *e, const stof_op *const *dep, int ndep, int depth) {
  if (!e || depth > STOF_TE_MAX_DEPTH + 8) return !e;
  switch (e->kind) {
  case STOF_EXPR_INT:
  case STOF_EXPR_FLOAT:
  case STOF_EXPR_VAR: return 1;
  case STOF_EXPR_REDUCE: return own_axes(op, e->u.reduce.src, dep, ndep, depth + 1);
  case STOF_EXPR_LOAD:
    if (in_list(e->u.load.tensor, dep, ndep)) {
      if (e->u.load.nidx != op->ndim) return 0;
      for (int d = 0; d < op->ndim; d++)
        if (e->u.load.idx[d]->kind != STOF_EXPR_VAR || e->u.load.idx[d]->u.var != op->axis[d]) return 0;
    }
    for (int d = 0; d < e->u.load.nidx; d++)
      if (!own_axes(op, e->u.load.idx[d], dep, ndep, depth + 1)) return 0;
    return 1;
  default:
    return own_axes(op, e->u.op.a, dep, ndep, depth + 1) && own_axes(op, e->u.op.b, dep, ndep, depth + 1) &&
           own_axes(op, e->u.op.c, dep, ndep, depth + 1);
  }
}

/* Does op read g, directly or through other ops of within[0..n) (NULL: any op; the
 * segment's own graph, whose inputs are placeholders)? Only ops of the segment are walked:
 * the plan's graph upstream of it is not. */
static int reads(const stof_op *op, const stof_op *g, const stof_op *const *within, int n, int depth) {
  if (depth > 64) return 0;
  for (int k = 0; k < op->ninput; k++) {
    const stof_op *x = op->input[k];
    if (x == g) return 1;
    if (within && !in_list(x, within, n)) continue;
    if (reads(x, g, within, n, depth + 1)) return 1;
  }
  return 0;
}

int search_tc_matches(void *ud, const stof_plan_seg_req *r) {
  (void)ud;
  int injective;
  const stof_op *g = the_gemm(r->nop, r->op, &injective);
  if (!g || !injective || strcmp(r->target, "cuda") != 0 || g->ndim < 2 || g->ndim > 3) return 0;
  int dt = tensorizable(g);
  if (dt != STOF_DTYPE_F16 && dt != STOF_DTYPE_BF16) return 0;
  int64_t rows = g->shape[g->ndim - 2], cols = g->shape[g->ndim - 1], depth = g->body->u.reduce.axis[0]->extent;
  if (rows % 64 || cols % 64 || depth % TC_BK) return 0;
  /* the ops after the GEMM: its shape, reading it (and each other) at their own axes */
  const stof_op *dep[64];
  int ndep = 0;
  dep[ndep++] = g;
  for (int i = 0; i < r->nop; i++) {
    const stof_op *o = r->op[i];
    if (o == g || !reads(o, g, r->op, r->nop, 0)) continue;
    if (ndep == 64 || o->ndim != g->ndim || memcmp(o->shape, g->shape, sizeof *o->shape * (size_t)o->ndim) ||
        !own_axes(o, o->body, dep, ndep, 0))
      return 0;
    dep[ndep++] = o;
  }
  return 1;
}

static int is_output(const stof_sched *s, const stof_op *op) {
  for (int i = 0; i < stof_sched_nout(s); i++)
    if (stof_sched_output(s, i) == op) return 1;
  return 0;
}

/* Does op read g through ops that are not outputs (inlined into it: it reads the warp
 * buffer then)? */
static int through_inner(const stof_sched *s, const stof_op *op, const stof_op *g, int depth) {
  if (depth > 64) return 0;
  for (int k = 0; k < op->ninput; k++) {
    const stof_op *x = op->input[k];
    if (x == g || (x->kind == STOF_OP_COMPUTE && !is_output(s, x) && through_inner(s, x, g, depth + 1))) return 1;
  }
  return 0;
}

#define TRY(x)                                                                                                         \
  do {                                                                                                                 \
    if ((st = (x))) return st;                                                                                         \
  } while (0)

/* A categorical knob over the candidates of cand[0..n) that divide extent (by unit * c). */
static stof_status divisor_knob(stof_sched *s, const char *name, const int64_t *cand, int n, int64_t extent,
                                int64_t unit, int *knob) {
  int64_t ok[4];
  double p[4];
  int m = 0;
  for (int i = 0; i < n; i++)
    if (extent % (unit * cand[i]) == 0) {
      ok[m] = cand[i];
      p[m++] = 1;
    }
  if (!m) return stof_ctx_error(stof_sched_ctx(s), STOF_ERR_UNSUPPORTED, "tensorcore: no tile of %s divides %lld", name,
                                (long long)extent);
  return stof_sched_sample_categorical(s, name, m, ok, p, -1, knob);
}

/* The shared tile of input `input` of block cb at loop at, fetched by all the threads
 * (wm x wn warps) 16 bytes per copy, rows padded by 8 elements. */
static stof_status stage(stof_sched *s, int cb, int input, int at, int kwm, int kwn) {
  stof_status st;
  int sh, l[4], n, c[2], f, p[4];
  TRY(stof_sched_cache_read(s, cb, input, "shared", &sh));
  TRY(stof_sched_compute_at(s, sh, at));
  TRY(stof_sched_get_loops(s, sh, 4, l, &n));
  if (n < 2 || n > 3)
    return stof_ctx_error(stof_sched_ctx(s), STOF_ERR_UNSUPPORTED, "tensorcore: a staged tile with %d loops", n);
  stof_factor fc[2] = {stof_factor_const(STOF_INFER), stof_factor_const(8)};
  TRY(stof_sched_split(s, l[n - 1], 2, fc, c));
  int fl[3] = {l[0], n == 3 ? l[1] : c[0], c[0]};
  TRY(stof_sched_fuse(s, n, fl, &f));
  stof_factor fp[4] = {stof_factor_const(STOF_INFER), stof_factor_knob(kwm), stof_factor_knob(kwn),
                       stof_factor_const(32)};
  TRY(stof_sched_split(s, f, 4, fp, p));
  TRY(stof_sched_bind(s, p[1], "threadIdx.z"));
  TRY(stof_sched_bind(s, p[2], "threadIdx.y"));
  TRY(stof_sched_bind(s, p[3], "threadIdx.x"));
  TRY(stof_sched_vectorize(s, c[1]));
  return stof_sched_annotate_block(s, sh, "pad", "8");
}

stof_status search_tc_schedule(void *ud, const stof_plan_seg_req *r, stof_sched *s) {
  (void)ud;
  (void)r;
  stof_ctx *ctx = stof_sched_ctx(s);
  stof_status st;
  /* the segment's blocks, handed out by name (ids a trace replays) */
  int nb = stof_sched_nblock(s), cb = -1, id[64];
  if (nb > 64) return stof_ctx_error(ctx, STOF_ERR_UNSUPPORTED, "tensorcore: a segment of %d blocks", nb);
  const stof_op *g = NULL;
  for (int b = 0; b < nb; b++) {
    char name[256];
    snprintf(name, sizeof name, "%s", stof_sched_block_name(s, b));
    TRY(stof_sched_get_block(s, name, &id[b]));
    if (stof_plan_op_is_gemm(stof_sched_block_op(s, b))) {
      cb = id[b];
      g = stof_sched_block_op(s, b);
    }
  }
  if (cb < 0) return stof_ctx_error(ctx, STOF_ERR_UNSUPPORTED, "tensorcore: the segment holds no GEMM");
  int nd = g->ndim, copy;
  /* the accumulator in the warps' registers (float32); the epilogue reads it */
  TRY(stof_sched_cache_write(s, cb, "warp", &copy));
  int gemm_out = is_output(s, g);
  for (int b = 0; b < nb; b++) { /* what the write-back cannot hold */
    const stof_op *op = stof_sched_block_op(s, b);
    if (id[b] == cb || !reads(op, g, NULL, 0, 0)) continue;
    if (gemm_out)
      return stof_ctx_error(ctx, STOF_ERR_UNSUPPORTED,
                            "tensorcore: GEMM %s leaves the segment and %s reads it inside too (one write-back "
                            "per accumulator)",
                            g->name, op->name);
    if (is_output(s, op) && !through_inner(s, op, g, 0))
      return stof_ctx_error(ctx, STOF_ERR_UNSUPPORTED,
                            "tensorcore: output %s reads GEMM %s only through another output of the segment",
                            op->name, g->name);
  }
  if (!gemm_out) TRY(stof_sched_compute_inline(s, copy));
  for (int b = 0; b < nb; b++) { /* every injective op after the GEMM folds into the write-back */
    const stof_op *op = stof_sched_block_op(s, b);
    if (id[b] != cb && stof_sched_block_alive(s, id[b]) && !is_output(s, op) && reads(op, g, NULL, 0, 0))
      TRY(stof_sched_compute_inline(s, id[b]));
  }
  int l[5], n;
  TRY(stof_sched_get_loops(s, cb, 5, l, &n));
  if (n != nd + 1) return stof_ctx_error(ctx, STOF_ERR_UNSUPPORTED, "tensorcore: GEMM block with %d loops", n);
  int lead = nd - 2, li = l[lead], lj = l[lead + 1], lk = l[lead + 2];
  int kwm, kwn, i[3], j[3], k[3];
  static const int64_t wm[2] = {1, 2}, wn[2] = {2, 4};
  TRY(divisor_knob(s, "tc.wm", wm, 2, g->shape[nd - 2], 64, &kwm));
  TRY(divisor_knob(s, "tc.wn", wn, 2, g->shape[nd - 1], 32, &kwn));
  stof_factor fi[3] = {stof_factor_const(STOF_INFER), stof_factor_knob(kwm), stof_factor_const(64)};
  stof_factor fj[3] = {stof_factor_const(STOF_INFER), stof_factor_knob(kwn), stof_factor_const(32)};
  stof_factor fk[3] = {stof_factor_const(STOF_INFER), stof_factor_const(TC_BK / 16), stof_factor_const(16)};
  TRY(stof_sched_split(s, li, 3, fi, i));
  TRY(stof_sched_split(s, lj, 3, fj, j));
  TRY(stof_sched_split(s, lk, 3, fk, k));
  int order[10], no = 0;
  if (lead) order[no++] = l[0];
  int rest[9] = {i[0], j[0], i[1], j[1], k[0], k[1], i[2], j[2], k[2]};
  for (int q = 0; q < 9; q++) order[no++] = rest[q];
  TRY(stof_sched_reorder(s, no, order));
  if (lead) TRY(stof_sched_bind(s, l[0], "blockIdx.z"));
  TRY(stof_sched_bind(s, i[0], "blockIdx.y"));
  TRY(stof_sched_bind(s, j[0], "blockIdx.x"));
  TRY(stof_sched_bind(s, i[1], "threadIdx.z"));
  TRY(stof_sched_bind(s, j[1], "threadIdx.y"));
  TRY(stof_sched_unroll(s, k[1]));
  TRY(stof_sched_tensorize(s, i[2], "mma_m16n8k16"));
  for (int input = 0; input < 2; input++) TRY(stage(s, cb, input, k[0], kwm, kwn));
  TRY(stof_sched_annotate_loop(s, k[0], "pipeline_stages", "3"));
  /* the write-back: the copy when the GEMM itself is an output, and each output after it */
  if (gemm_out) TRY(stof_sched_reverse_compute_at(s, copy, j[1]));
  for (int b = 0; b < nb; b++) {
    const stof_op *op = stof_sched_block_op(s, b);
    if (id[b] != cb && stof_sched_block_alive(s, id[b]) && is_output(s, op) && reads(op, g, NULL, 0, 0))
      TRY(stof_sched_reverse_compute_at(s, id[b], j[1]));
  }
  return STOF_OK;
}
