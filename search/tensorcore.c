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
 *
 * The file also holds two templates built from the same pieces (the staged tiles, stage;
 * the matching helpers): tensorcore_norm (the GEMM, its epilogue and a row normalisation,
 * whole rows per CUDA block; the same mma nest, mma_nest) and tensorcore_ffn (two GEMMs with
 * the intermediate in shared memory); each has its own section below. All three match only where every knob value they would offer is legal.
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
  /* the ops after the GEMM: its shape, reading it (and each other) at their own axes; an op
   * that does not read it (a prologue: a layer norm's last op before the GEMM) is not taken:
   * the schedule would leave it a nest of its own on one GPU thread (seconds a forward) */
  const stof_op *dep[64];
  int ndep = 0;
  dep[ndep++] = g;
  for (int i = 0; i < r->nop; i++) {
    const stof_op *o = r->op[i];
    if (o == g) continue;
    if (!reads(o, g, r->op, r->nop, 0)) return 0;
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

/* The segment's blocks handed out by name (ids a trace replays) and their ops; at most 60. */
static stof_status seg_blocks(stof_sched *s, const char *tmpl, int *nb, int id[64], const stof_op *ops[64]) {
  stof_status st;
  *nb = stof_sched_nblock(s);
  if (*nb > 60) return stof_ctx_error(stof_sched_ctx(s), STOF_ERR_UNSUPPORTED, "%s: a segment of %d blocks", tmpl, *nb);
  for (int b = 0; b < *nb; b++) {
    char name[256];
    snprintf(name, sizeof name, "%s", stof_sched_block_name(s, b));
    TRY(stof_sched_get_block(s, name, &id[b]));
    ops[b] = stof_sched_block_op(s, b);
  }
  return STOF_OK;
}

/* What one write-back of GEMM g's accumulator (block cb) cannot hold: g leaving the segment
 * while another op of it reads g too, or an output reading g only through another output. */
static stof_status writeback_outputs(stof_sched *s, const char *tmpl, int nb, const int *id, int cb, const stof_op *g) {
  stof_ctx *ctx = stof_sched_ctx(s);
  int gemm_out = is_output(s, g);
  for (int b = 0; b < nb; b++) {
    const stof_op *op = stof_sched_block_op(s, b);
    if (id[b] == cb || !reads(op, g, NULL, 0, 0)) continue;
    if (gemm_out)
      return stof_ctx_error(ctx, STOF_ERR_UNSUPPORTED,
                            "%s: GEMM %s leaves the segment and %s reads it inside too (one write-back per "
                            "accumulator)",
                            tmpl, g->name, op->name);
    if (is_output(s, op) && !through_inner(s, op, g, 0))
      return stof_ctx_error(ctx, STOF_ERR_UNSUPPORTED,
                            "%s: output %s reads GEMM %s only through another output of the segment", tmpl, op->name,
                            g->name);
  }
  return STOF_OK;
}

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
  return stof_sched_sample_categorical(s, name, m, ok, p, 0, knob); /* fixed first decision (see pick_knob) */
}

/* The shared tile of input `input` of block cb at loop at, fetched by all the threads
 * (wm x wn warps; kwm < 0: wn warps only) 16 bytes per copy, rows padded by 8 elements. */
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
  /* (serial, [wm warps on threadIdx.z,] wn warps on threadIdx.y, 32 lanes) */
  int z = kwm >= 0, np = 3 + z;
  stof_factor fp[4] = {stof_factor_const(STOF_INFER), stof_factor_knob(z ? kwm : kwn), stof_factor_knob(kwn),
                       stof_factor_const(32)};
  if (!z) fp[2] = stof_factor_const(32);
  TRY(stof_sched_split(s, f, np, fp, p));
  if (z) TRY(stof_sched_bind(s, p[1], "threadIdx.z"));
  TRY(stof_sched_bind(s, p[np - 2], "threadIdx.y"));
  TRY(stof_sched_bind(s, p[np - 1], "threadIdx.x"));
  TRY(stof_sched_vectorize(s, c[1]));
  return stof_sched_annotate_block(s, sh, "pad", "8");
}

/* The GEMM block cb (nd loops + its reduce loop) on the tensor cores: rows split (CUDA block,
 * wm warps, rows per warp `tile_rows`), columns (CUDA block or serial chunks, wn warps, 32),
 * depth (32 per stage, in 16-steps); warps on threadIdx.z/.y, the warp's nest tensorized, both
 * operand tiles staged through a 3-stage pipeline. cols_on_block: the column chunks on
 * blockIdx.x, else a serial loop in each CUDA block (whole rows per block). i, j, k get the
 * parts (outermost first). */
static stof_status mma_nest(stof_sched *s, int cb, int nd, stof_factor tile_rows, int kwm, int kwn, int cols_on_block,
                            int i[3], int j[3], int k[3]) {
  stof_status st;
  int l[5], n;
  TRY(stof_sched_get_loops(s, cb, 5, l, &n));
  if (n != nd + 1)
    return stof_ctx_error(stof_sched_ctx(s), STOF_ERR_UNSUPPORTED, "tensorcore: GEMM block with %d loops", n);
  int lead = nd - 2;
  stof_factor fi[3] = {stof_factor_const(STOF_INFER), stof_factor_knob(kwm), tile_rows};
  stof_factor fj[3] = {stof_factor_const(STOF_INFER), stof_factor_knob(kwn), stof_factor_const(32)};
  stof_factor fk[3] = {stof_factor_const(STOF_INFER), stof_factor_const(TC_BK / 16), stof_factor_const(16)};
  TRY(stof_sched_split(s, l[lead], 3, fi, i));
  TRY(stof_sched_split(s, l[lead + 1], 3, fj, j));
  TRY(stof_sched_split(s, l[lead + 2], 3, fk, k));
  int order[10], no = 0;
  if (lead) order[no++] = l[0];
  int rest[9] = {i[0], j[0], i[1], j[1], k[0], k[1], i[2], j[2], k[2]};
  for (int q = 0; q < 9; q++) order[no++] = rest[q];
  TRY(stof_sched_reorder(s, no, order));
  if (lead) TRY(stof_sched_bind(s, l[0], "blockIdx.z"));
  TRY(stof_sched_bind(s, i[0], "blockIdx.y"));
  if (cols_on_block) TRY(stof_sched_bind(s, j[0], "blockIdx.x"));
  TRY(stof_sched_bind(s, i[1], "threadIdx.z"));
  TRY(stof_sched_bind(s, j[1], "threadIdx.y"));
  TRY(stof_sched_unroll(s, k[1]));
  TRY(stof_sched_tensorize(s, i[2], "mma_m16n8k16"));
  for (int input = 0; input < 2; input++) TRY(stage(s, cb, input, k[0], kwm, kwn));
  return stof_sched_annotate_loop(s, k[0], "pipeline_stages", "3");
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
  TRY(writeback_outputs(s, tc_name, nb, id, cb, g));
  if (!gemm_out) TRY(stof_sched_compute_inline(s, copy));
  for (int b = 0; b < nb; b++) { /* every injective op after the GEMM folds into the write-back */
    const stof_op *op = stof_sched_block_op(s, b);
    if (id[b] != cb && stof_sched_block_alive(s, id[b]) && !is_output(s, op) && reads(op, g, NULL, 0, 0))
      TRY(stof_sched_compute_inline(s, id[b]));
  }
  int kwm, kwn, i[3], j[3], k[3];
  static const int64_t wm[2] = {1, 2}, wn[2] = {2, 4};
  TRY(divisor_knob(s, "tc.wm", wm, 2, g->shape[nd - 2], 64, &kwm));
  TRY(divisor_knob(s, "tc.wn", wn, 2, g->shape[nd - 1], 32, &kwn));
  TRY(mma_nest(s, cb, nd, stof_factor_const(64), kwm, kwn, 1, i, j, k));
  /* the write-back: the copy when the GEMM itself is an output, and each output after it */
  if (gemm_out) TRY(stof_sched_reverse_compute_at(s, copy, j[1]));
  for (int b = 0; b < nb; b++) {
    const stof_op *op = stof_sched_block_op(s, b);
    if (id[b] != cb && stof_sched_block_alive(s, id[b]) && is_output(s, op) && reads(op, g, NULL, 0, 0))
      TRY(stof_sched_reverse_compute_at(s, id[b], j[1]));
  }
  return STOF_OK;
}

/* ---------------------------------------------------------------- tensorcore_norm
 *
 * A GEMM, its injective epilogue (bias, residual add) and a row normalisation of the result
 * h (layer norm: mean and variance; RMS norm: the mean square) in one kernel. A CUDA block
 * owns R whole rows of h: its warps run the GEMM over the rows' columns in chunks of 32 * wn
 * (mma.sync, the operand tiles staged as in "tensorcore"), each lane writing its fragments
 * of h (epilogue applied, rounded to h's dtype as the unfused plan stores it) into a shared
 * R x N tile; then each warp takes R / (wm * wn) of the rows and reduces them across its 32
 * lanes (the statistics, in registers), and writes the normalised rows (and h itself when h
 * leaves the segment) 4, 8 or 16 bytes per access. h never goes to global memory unless it
 * is an output.
 *
 * Knobs tcn.wm (warps along the rows, 1 or 2), tcn.tm (rows per warp, 32 or 64) and tcn.wn
 * (warps along the columns, 2 or 4), R = wm * tm: each offers only values for which every
 * combination with the others divides the GEMM and fits shared memory (R x N of h plus three
 * stages of operand tiles under 227 KB), so no candidate is refused after sampling.
 */

static const char *tcn_name = "tensorcore_norm";

const char *search_tcn_name(void) { return tcn_name; }

#define TCN_SMEM (227 * 1024)

/* Shared bytes of a tile of R rows: h's R x N, and three stages of the operands' tiles
 * (R x 32 of x, (32 * wn) x 32 of W, rows padded by 8). */
static int64_t tcn_smem(int64_t R, int64_t wn, int64_t cols, int64_t es) {
  return R * cols * es + 3 * (R + 32 * wn + 8) * (TC_BK + 8) * es;
}

/* Does every load of a segment op in e (other than the loads of `h` at (rows..., reduce
 * var), and of stats at the rows) read at op's own row axes? Used for the statistics:
 * op has h's leading axes (nd - 1 of them). */
static int row_loads(const stof_op *op, const stof_expr *e, const stof_op *h, const stof_op *const *seg, int nseg,
                     int depth) {
  if (!e || depth > STOF_TE_MAX_DEPTH + 8) return !e;
  switch (e->kind) {
  case STOF_EXPR_INT:
  case STOF_EXPR_FLOAT:
  case STOF_EXPR_VAR: return 1;
  case STOF_EXPR_REDUCE: return row_loads(op, e->u.reduce.src, h, seg, nseg, depth + 1);
  case STOF_EXPR_LOAD: {
    const stof_op *t = e->u.load.tensor;
    if (in_list(t, seg, nseg)) {
      int nrow = t == h ? e->u.load.nidx - 1 : e->u.load.nidx;
      if (nrow != op->ndim - (op->ndim == h->ndim)) return 0;
      for (int d = 0; d < nrow; d++)
        if (e->u.load.idx[d]->kind != STOF_EXPR_VAR || e->u.load.idx[d]->u.var != op->axis[d]) return 0;
      if (t == h && e->u.load.idx[nrow]->kind != STOF_EXPR_VAR) return 0;
      if (t == h && op->ndim == h->ndim && e->u.load.idx[nrow]->u.var != op->axis[nrow]) return 0;
    }
    for (int d = 0; d < e->u.load.nidx; d++)
      if (!row_loads(op, e->u.load.idx[d], h, seg, nseg, depth + 1)) return 0;
    return 1;
  }
  default:
    return row_loads(op, e->u.op.a, h, seg, nseg, depth + 1) && row_loads(op, e->u.op.b, h, seg, nseg, depth + 1) &&
           row_loads(op, e->u.op.c, h, seg, nseg, depth + 1);
  }
}

/* The segment's parts: the GEMM, h (the epilogue's last op, which the statistics read), the
 * statistics and the normalised outputs; 0 when the segment is not of this form. */
typedef struct tcn_parts {
  const stof_op *g, *h;
  int nstat, nnorm;
} tcn_parts;

static int tcn_split(int nop, const stof_op *const *ops, tcn_parts *p) {
  memset(p, 0, sizeof *p);
  const stof_op *g = NULL;
  for (int i = 0; i < nop; i++) {
    if (ops[i]->kind != STOF_OP_COMPUTE) return 0;
    if (stof_plan_op_is_gemm(ops[i])) {
      if (g) return 0;
      g = ops[i];
    }
  }
  if (!g || g->ndim < 2 || g->ndim > 3) return 0;
  int nd = g->ndim;
  int64_t cols = g->shape[nd - 1];
  /* the statistics: reductions over h's last axis, h's rows' shape; all read one h */
  const stof_op *h = NULL;
  for (int i = 0; i < nop; i++) {
    const stof_op *o = ops[i];
    if (o == g || !o->body || o->body->kind != STOF_EXPR_REDUCE) continue;
    if (o->ndim != nd - 1 || memcmp(o->shape, g->shape, sizeof *o->shape * (size_t)(nd - 1)) ||
        o->body->u.reduce.naxis != 1 || o->body->u.reduce.axis[0]->extent != cols)
      return 0;
    for (int k = 0; k < o->ninput; k++) {
      const stof_op *x = o->input[k];
      if (!in_list(x, ops, nop) || x->ndim != nd) continue;
      if (h && h != x) return 0;
      h = x;
    }
    if (!h) return 0;
    p->nstat++;
  }
  if (!h || h == g || !p->nstat) return 0;
  /* the epilogue: ops reading g at their own axes, g's shape, up to h; the normalised ops:
   * g's shape, reading h and the statistics (rows) and nothing else of the segment */
  const stof_op *dep[64];
  int ndep = 0;
  dep[ndep++] = g;
  for (int i = 0; i < nop; i++) {
    const stof_op *o = ops[i];
    if (o == g || o->body->kind == STOF_EXPR_REDUCE) continue;
    if (o->ndim != nd || memcmp(o->shape, g->shape, sizeof *o->shape * (size_t)nd)) return 0;
    int after_h = o != h && reads(o, h, ops, nop, 0);
    if (!after_h) {
      if (ndep == 64 || !reads(o, g, ops, nop, 0) || !own_axes(o, o->body, dep, ndep, 0)) return 0;
      dep[ndep++] = o;
    } else {
      for (int k = 0; k < o->ninput; k++) /* nothing of the segment but h and the statistics */
        if (in_list(o->input[k], ops, nop) && o->input[k] != h && o->input[k]->ndim != nd - 1) return 0;
      if (!row_loads(o, o->body, h, ops, nop, 0)) return 0;
      p->nnorm++;
    }
  }
  for (int i = 0; i < nop; i++) /* the statistics read h and each other by rows */
    if (ops[i] != g && ops[i]->body->kind == STOF_EXPR_REDUCE && !row_loads(ops[i], ops[i]->body, h, ops, nop, 0))
      return 0;
  if (!p->nnorm || !in_list(h, dep, ndep)) return 0;
  p->g = g;
  p->h = h;
  return 1;
}

/* The knobs' values (wm: 1, 2; tm: 32, 64; wn: 2, 4) for which every combination with the
 * others divides the GEMM and fits shared memory; 1 when each has one. The largest
 * combination is (max wm, tm, max wn): the domains are built from the largest legal values. */
static const int64_t wmc[2] = {1, 2}, tmc[2] = {32, 64}, wnc[2] = {2, 4};
static int tcn_domains(int64_t rows, int64_t cols, int64_t es, int okm[2], int okt[2], int okn[2]) {
  int64_t wn_max = 0, wm_max = 0;
  for (int i = 0; i < 2; i++)
    if ((okn[i] = cols % (32 * wnc[i]) == 0 && tcn_smem(32, wnc[i], cols, es) <= TCN_SMEM)) wn_max = wnc[i];
  for (int i = 0; i < 2; i++)
    if ((okm[i] = wn_max && rows % (32 * wmc[i]) == 0 && tcn_smem(32 * wmc[i], wn_max, cols, es) <= TCN_SMEM))
      wm_max = wmc[i];
  int any = 0;
  for (int i = 0; i < 2; i++)
    any |= okt[i] = wm_max && rows % (wm_max * tmc[i]) == 0 && tcn_smem(wm_max * tmc[i], wn_max, cols, es) <= TCN_SMEM;
  return any;
}

int search_tcn_matches(void *ud, const stof_plan_seg_req *r) {
  (void)ud;
  tcn_parts p;
  if (strcmp(r->target, "cuda") != 0 || !tcn_split(r->nop, r->op, &p)) return 0;
  const stof_op *g = p.g;
  int dt = tensorizable(g);
  if (dt != STOF_DTYPE_F16 && dt != STOF_DTYPE_BF16) return 0;
  int64_t rows = g->shape[g->ndim - 2], cols = g->shape[g->ndim - 1], depth = g->body->u.reduce.axis[0]->extent;
  int okm[2], okt[2], okn[2];
  return depth % TC_BK == 0 && tcn_domains(rows, cols, stof_dtype_size(p.h->dtype), okm, okt, okn);
}

/* A categorical knob over the values of cand[0..n) with ok[i] set (n at most 8); its first
 * decision the smallest value, or the largest (last: 1): fixed, so that a default
 * configuration replays the same plan (the search sets the others). */
static stof_status pick_knob(stof_sched *s, const char *name, const int64_t *cand, const int *ok, int n, int last,
                             int *knob) {
  int64_t v[8];
  double pr[8];
  int m = 0;
  for (int i = 0; i < n && i < 8; i++)
    if (ok[i]) {
      v[m] = cand[i];
      pr[m++] = 1;
    }
  if (!m) return stof_ctx_error(stof_sched_ctx(s), STOF_ERR_UNSUPPORTED, "%s: no value divides the GEMM and fits", name);
  return stof_sched_sample_categorical(s, name, m, v, pr, last ? m - 1 : 0, knob);
}

/* Splits the last two loops of block b (placed at the row tile) into warps over rows and
 * lanes x vector over columns; returns the serial row loop. */
static stof_status tcn_rows(stof_sched *s, int b, int kwm, int kwn, int64_t vec, int *row_loop) {
  stof_status st;
  int l[5], n, i[3], j[3];
  TRY(stof_sched_get_loops(s, b, 5, l, &n));
  if (n < 2) return stof_ctx_error(stof_sched_ctx(s), STOF_ERR_UNSUPPORTED, "tensorcore_norm: block with %d loops", n);
  stof_factor fi[3] = {stof_factor_knob(kwm), stof_factor_knob(kwn), stof_factor_const(STOF_INFER)};
  stof_factor fj[3] = {stof_factor_const(STOF_INFER), stof_factor_const(32), stof_factor_const(vec)};
  TRY(stof_sched_split(s, l[n - 2], 3, fi, i));
  TRY(stof_sched_split(s, l[n - 1], 3, fj, j));
  TRY(stof_sched_bind(s, i[0], "threadIdx.z"));
  TRY(stof_sched_bind(s, i[1], "threadIdx.y"));
  TRY(stof_sched_bind(s, j[1], "threadIdx.x"));
  TRY(stof_sched_unroll(s, j[0]));
  TRY(stof_sched_vectorize(s, j[2]));
  *row_loop = i[2];
  return STOF_OK;
}

stof_status search_tcn_schedule(void *ud, const stof_plan_seg_req *r, stof_sched *s) {
  (void)ud;
  (void)r;
  stof_ctx *ctx = stof_sched_ctx(s);
  stof_status st;
  int nb, id[64];
  const stof_op *ops[64] = {0};
  TRY(seg_blocks(s, tcn_name, &nb, id, ops));
  tcn_parts p;
  if (!tcn_split(nb, ops, &p))
    return stof_ctx_error(ctx, STOF_ERR_UNSUPPORTED, "tensorcore_norm: the segment is not a GEMM, its epilogue and a row normalisation");
  const stof_op *g = p.g, *h = p.h;
  int nd = g->ndim, cb = -1, hb = -1, copy, hcopy = -1;
  for (int b = 0; b < nb; b++) {
    if (ops[b] == g) cb = id[b];
    if (ops[b] == h) hb = id[b];
  }
  if (is_output(s, g))
    return stof_ctx_error(ctx, STOF_ERR_UNSUPPORTED, "tensorcore_norm: GEMM %s leaves the segment", g->name);
  int64_t rows = g->shape[nd - 2], cols = g->shape[nd - 1], es = (int64_t)stof_dtype_size(h->dtype);
  int64_t vec = cols % 256 == 0 ? 8 : cols % 128 == 0 ? 4 : 2;
  if (vec * (int64_t)es > 16) vec = 16 / es;
  /* the knobs: every combination divides and fits */
  int okm[2], okt[2], okn[2];
  tcn_domains(rows, cols, es, okm, okt, okn);
  int kwm, ktm, kwn;
  TRY(pick_knob(s, "tcn.wm", wmc, okm, 2, 0, &kwm));
  TRY(pick_knob(s, "tcn.tm", tmc, okt, 2, 0, &ktm));
  TRY(pick_knob(s, "tcn.wn", wnc, okn, 2, 0, &kwn));
  /* the accumulator in the warps' registers; the epilogue up to h folds into its write-back,
   * which fills h's tile in shared memory */
  TRY(stof_sched_cache_write(s, cb, "warp", &copy));
  TRY(stof_sched_compute_inline(s, copy));
  for (int b = 0; b < nb; b++)
    if (id[b] != cb && id[b] != hb && ops[b]->body->kind != STOF_EXPR_REDUCE && !reads(ops[b], h, NULL, 0, 0) &&
        ops[b] != h) {
      if (is_output(s, ops[b]))
        return stof_ctx_error(ctx, STOF_ERR_UNSUPPORTED, "tensorcore_norm: %s leaves the segment inside the epilogue",
                              ops[b]->name);
      TRY(stof_sched_compute_inline(s, id[b]));
    }
  TRY(stof_sched_cache_write(s, hb, "shared", &hcopy));
  if (!is_output(s, h)) {
    TRY(stof_sched_compute_inline(s, hcopy));
    hcopy = -1;
  }
  /* the GEMM over the tile's rows, column chunk by column chunk */
  int lead = nd - 2, i[3], j[3], k[3];
  TRY(mma_nest(s, cb, nd, stof_factor_knob(ktm), kwm, kwn, 0, i, j, k));
  TRY(stof_sched_reverse_compute_at(s, hb, j[1]));
  /* after the GEMM, at the row tile: the statistics and the outputs in dependence order
   * (block order), h's copy when h leaves the segment */
  int first_out = -1, row_loop = -1, tile, gl[12], ng;
  /* (a move renumbers loops: the row tile's loop is found again each time) */
  if (hcopy >= 0) { /* h leaves the segment: its copy first; the rest read what it wrote */
    TRY(stof_sched_get_loops(s, cb, 12, gl, &ng));
    tile = gl[lead];
    TRY(stof_sched_reverse_compute_at(s, hcopy, tile));
    TRY(tcn_rows(s, hcopy, kwm, kwn, vec, &row_loop));
  }
  for (int b = 0; b < nb; b++) {
    if (id[b] == cb || id[b] == hb || !stof_sched_block_alive(s, id[b])) continue;
    TRY(stof_sched_get_loops(s, cb, 12, gl, &ng));
    tile = gl[lead];
    TRY(stof_sched_reverse_compute_at(s, id[b], tile));
  }
  for (int b = 0; b < nb; b++)
    if (id[b] != cb && id[b] != hb && stof_sched_block_alive(s, id[b]) && ops[b]->body->kind != STOF_EXPR_REDUCE) {
      int rl;
      TRY(tcn_rows(s, id[b], kwm, kwn, vec, &rl));
      if (first_out < 0) {
        first_out = id[b];
        row_loop = rl;
      }
    }
  /* the statistics per row, in each warp, reduced across its lanes: computed at the first
   * normalised output's row loop, last first (each at the start of the loop's body) */
  for (int b = nb - 1; b >= 0; b--) {
    if (id[b] == cb || ops[b]->body->kind != STOF_EXPR_REDUCE) continue;
    int sl[5], sn, rr[3];
    TRY(stof_sched_compute_at(s, id[b], row_loop));
    TRY(stof_sched_get_loops(s, id[b], 5, sl, &sn));
    stof_factor fr[3] = {stof_factor_const(STOF_INFER), stof_factor_const(32), stof_factor_const(vec)};
    TRY(stof_sched_split(s, sl[sn - 1], 3, fr, rr));
    TRY(stof_sched_bind(s, rr[1], "threadIdx.x"));
    TRY(stof_sched_unroll(s, rr[0]));
    TRY(stof_sched_vectorize(s, rr[2]));
  }
  return STOF_OK;
}

/* ---------------------------------------------------------------- tensorcore_ffn
 *
 * Two GEMMs with the intermediate on chip: y = a(x @ W1) @ W2, a the injective ops between
 * them (bias, activation), then the second GEMM's injective epilogue (bias, residual add). A
 * CUDA block owns R rows and P columns of y; its wn warps keep y's R x (P / wn) tiles in
 * registers across the whole intermediate dimension F, which they walk in chunks of 64: per
 * chunk the same warps first compute the intermediate's R x 64 tile (x's R rows staged in
 * shared memory once per CUDA block, W1's chunk staged per step of 32), apply a on the write-
 * back into a shared R x 64 tile, then multiply it by W2's staged P x 64 tile. The
 * intermediate never goes to global memory; the first GEMM is computed once per column block
 * of y (H / P times: a larger P costs registers, a smaller one recomputation).
 *
 * Knobs tgg.rows (R: 16 or 32), tgg.wn (4 or 8 warps) and tgg.tn (each warp's columns of y:
 * 16 to 128), P = wn * tn; each offers only values for which every combination divides and
 * fits (shared memory under 227 KB). With 8 warps of 96 columns a CUDA block holds BERT-base's
 * whole rows (768): the first GEMM is then computed once.
 */

static const char *tgg_name = "tensorcore_ffn";

const char *search_tgg_name(void) { return tgg_name; }

#define TGG_FC 64 /* the intermediate's columns per chunk */

/* The segment's parts: g1, the last op between the GEMMs (what g2 reads), g2. */
typedef struct tgg_parts {
  const stof_op *g1, *mid, *g2;
} tgg_parts;

/* The op g's first factor loads (its A operand), or NULL. */
static const stof_op *a_operand(const stof_op *g) {
  const stof_expr *src = g->body->u.reduce.src;
  if (src->kind != STOF_EXPR_MUL) return NULL;
  const stof_expr *a = uncast(src->u.op.a);
  return a && a->kind == STOF_EXPR_LOAD ? a->u.load.tensor : NULL;
}

static int tgg_split(int nop, const stof_op *const *ops, tgg_parts *p) {
  memset(p, 0, sizeof *p);
  const stof_op *g[2] = {NULL, NULL};
  int ng = 0;
  for (int i = 0; i < nop; i++) {
    if (ops[i]->kind != STOF_OP_COMPUTE) return 0;
    if (stof_plan_op_is_gemm(ops[i])) {
      if (ng == 2) return 0;
      g[ng++] = ops[i];
    } else if (ops[i]->body->kind == STOF_EXPR_REDUCE) {
      return 0;
    }
  }
  if (ng != 2) return 0;
  const stof_op *g1 = g[0], *g2 = g[1];
  if (reads(g1, g2, ops, nop, 0)) g1 = g[1], g2 = g[0];
  if (!reads(g2, g1, ops, nop, 0) || g1->ndim != g2->ndim || g1->ndim < 2 || g1->ndim > 3) return 0;
  const stof_op *mid = a_operand(g2);
  if (!mid || !in_list(mid, ops, nop) || (mid != g1 && !reads(mid, g1, ops, nop, 0))) return 0;
  if (tensorizable(g2) < 0 || tensorizable(g1) < 0) return 0;
  /* g2's other operand is no op of the segment (a weight); between the GEMMs and after g2
   * only injective ops at their own axes */
  for (int k = 0; k < g2->ninput; k++)
    if (g2->input[k] != mid && in_list(g2->input[k], ops, nop)) return 0;
  const stof_op *dep1[64], *dep2[64];
  int n1 = 0, n2 = 0;
  dep1[n1++] = g1;
  dep2[n2++] = g2;
  for (int i = 0; i < nop; i++) {
    const stof_op *o = ops[i];
    if (o == g1 || o == g2) continue;
    int after2 = reads(o, g2, ops, nop, 0);
    if (o->ndim != g1->ndim) return 0;
    if (!after2) { /* between the GEMMs: g1's shape, reading g1's chain at own axes */
      if (memcmp(o->shape, g1->shape, sizeof *o->shape * (size_t)o->ndim) || !reads(o, g1, ops, nop, 0) || n1 == 64 ||
          !own_axes(o, o->body, dep1, n1, 0))
        return 0;
      dep1[n1++] = o;
    } else { /* after g2: its shape, at own axes, nothing of the first chain */
      if (memcmp(o->shape, g2->shape, sizeof *o->shape * (size_t)o->ndim) || n2 == 64 ||
          !own_axes(o, o->body, dep2, n2, 0))
        return 0;
      for (int k = 0; k < o->ninput; k++)
        if (in_list(o->input[k], dep1, n1)) return 0;
      dep2[n2++] = o;
    }
  }
  if (!in_list(mid, dep1, n1)) return 0;
  /* nothing between the GEMMs but the chain to mid (each read by the next) */
  for (int i = 1; i < n1; i++)
    if (dep1[i] != mid && !reads(mid, dep1[i], ops, nop, 0)) return 0;
  p->g1 = g1;
  p->mid = mid;
  p->g2 = g2;
  return 1;
}

/* Shared bytes: x's R rows (depth K1, padded), the intermediate's R x 64 tile, W1's 64 x 32
 * step and W2's P x 64 tile (padded). */
static int64_t tgg_smem(int64_t R, int64_t P, int64_t k1, int64_t es) {
  return (R * (k1 + 8) + R * TGG_FC + TGG_FC * (TC_BK + 8) + P * (TGG_FC + 8)) * es;
}

/* The knobs' values (rows: 16, 32; wn: 4, 8; tn: 16 .. 128) for which every combination
 * divides and fits (P = wn * tn at most 8 * tn, which dividing the columns divides them for
 * wn = 4 too; shared memory at the largest rows); 1 when each has one. */
static const int64_t tgg_rc[2] = {16, 32}, tgg_wc[2] = {4, 8}, tgg_tc[6] = {16, 32, 48, 64, 96, 128};
static int tgg_domains(int64_t rows, int64_t cols, int64_t k1, int64_t es, int okr[2], int okw[2], int okt[6]) {
  int64_t r_max = 0;
  for (int i = 0; i < 2; i++)
    if ((okr[i] = rows % tgg_rc[i] == 0 && tgg_smem(tgg_rc[i], 8 * 16, k1, es) <= TCN_SMEM)) r_max = tgg_rc[i];
  okw[0] = okw[1] = 1;
  int any = 0;
  for (int i = 0; i < 6; i++)
    any |= okt[i] = r_max && cols % (8 * tgg_tc[i]) == 0 && tgg_smem(r_max, 8 * tgg_tc[i], k1, es) <= TCN_SMEM;
  return any;
}

int search_tgg_matches(void *ud, const stof_plan_seg_req *r) {
  (void)ud;
  tgg_parts p;
  if (strcmp(r->target, "cuda") != 0 || !tgg_split(r->nop, r->op, &p)) return 0;
  int dt = tensorizable(p.g1);
  if ((dt != STOF_DTYPE_F16 && dt != STOF_DTYPE_BF16) || tensorizable(p.g2) != dt || (int)p.mid->dtype != dt) return 0;
  int nd = p.g2->ndim;
  int64_t rows = p.g2->shape[nd - 2], cols = p.g2->shape[nd - 1], f = p.g1->shape[nd - 1],
          k1 = p.g1->body->u.reduce.axis[0]->extent;
  int okr[2], okw[2], okt[6];
  return f % TGG_FC == 0 && k1 % TC_BK == 0 && tgg_domains(rows, cols, k1, stof_dtype_size((stof_dtype)dt), okr, okw, okt);
}

stof_status search_tgg_schedule(void *ud, const stof_plan_seg_req *r, stof_sched *s) {
  (void)ud;
  (void)r;
  stof_ctx *ctx = stof_sched_ctx(s);
  stof_status st;
  int nb, id[64];
  const stof_op *ops[64] = {0};
  TRY(seg_blocks(s, tgg_name, &nb, id, ops));
  tgg_parts p;
  if (!tgg_split(nb, ops, &p))
    return stof_ctx_error(ctx, STOF_ERR_UNSUPPORTED, "tensorcore_ffn: the segment is not two GEMMs with injective ops between and after");
  int c1 = -1, c2 = -1, mb = -1, copy;
  for (int b = 0; b < nb; b++) {
    if (ops[b] == p.g1) c1 = id[b];
    if (ops[b] == p.g2) c2 = id[b];
    if (ops[b] == p.mid) mb = id[b];
    if (ops[b] != p.g2 && is_output(s, ops[b]) && !reads(ops[b], p.g2, NULL, 0, 0))
      return stof_ctx_error(ctx, STOF_ERR_UNSUPPORTED, "tensorcore_ffn: %s (before the second GEMM) leaves the segment",
                            ops[b]->name);
  }
  if (mb == c1)
    return stof_ctx_error(ctx, STOF_ERR_UNSUPPORTED, "tensorcore_ffn: the second GEMM reads the first directly (no op between)");
  TRY(writeback_outputs(s, tgg_name, nb, id, c2, p.g2));
  int nd = p.g2->ndim;
  int64_t rows = p.g2->shape[nd - 2], cols = p.g2->shape[nd - 1], k1 = p.g1->body->u.reduce.axis[0]->extent,
          es = (int64_t)stof_dtype_size(p.mid->dtype);
  /* the knobs: every combination divides and fits (P = wn * tn columns per CUDA block) */
  int okr[2], okw[2], okt[6];
  tgg_domains(rows, cols, k1, es, okr, okw, okt);
  int krow, kwn, ktn;
  /* first: the largest tile (the first GEMM computed the fewest times) */
  TRY(pick_knob(s, "tgg.rows", tgg_rc, okr, 2, 1, &krow));
  TRY(pick_knob(s, "tgg.wn", tgg_wc, okw, 2, 1, &kwn));
  TRY(pick_knob(s, "tgg.tn", tgg_tc, okt, 6, 1, &ktn));
  /* accumulators in the warps' registers; the second GEMM's epilogue in its write-back, the
   * ops between the GEMMs in the first's, which fills the intermediate's shared tile */
  TRY(stof_sched_cache_write(s, c2, "warp", &copy));
  int g2_out = is_output(s, p.g2);
  if (!g2_out) TRY(stof_sched_compute_inline(s, copy));
  for (int b = 0; b < nb; b++) {
    const stof_op *op = ops[b];
    if (id[b] == c1 || id[b] == c2 || id[b] == mb || !stof_sched_block_alive(s, id[b]) || is_output(s, op)) continue;
    TRY(stof_sched_compute_inline(s, id[b]));
  }
  int mcopy;
  TRY(stof_sched_cache_write(s, mb, "shared", &mcopy));
  TRY(stof_sched_compute_inline(s, mcopy));
  int c1copy;
  TRY(stof_sched_cache_write(s, c1, "warp", &c1copy));
  TRY(stof_sched_compute_inline(s, c1copy));
  /* the second GEMM: rows on blockIdx.y, columns (P per CUDA block) on blockIdx.x and wn warps,
   * the intermediate dimension in chunks */
  int l[5], n;
  TRY(stof_sched_get_loops(s, c2, 5, l, &n));
  if (n != nd + 1) return stof_ctx_error(ctx, STOF_ERR_UNSUPPORTED, "tensorcore_ffn: GEMM block with %d loops", n);
  int lead = nd - 2, i[2], j[3], k[3];
  stof_factor fi[2] = {stof_factor_const(STOF_INFER), stof_factor_knob(krow)};
  stof_factor fj[3] = {stof_factor_const(STOF_INFER), stof_factor_knob(kwn), stof_factor_knob(ktn)};
  stof_factor fk[3] = {stof_factor_const(STOF_INFER), stof_factor_const(TGG_FC / 16), stof_factor_const(16)};
  TRY(stof_sched_split(s, l[lead], 2, fi, i));
  TRY(stof_sched_split(s, l[lead + 1], 3, fj, j));
  TRY(stof_sched_split(s, l[lead + 2], 3, fk, k));
  int jw[2] = {j[1], j[2]};
  int order[9], no = 0;
  if (lead) order[no++] = l[0];
  int rest[8] = {i[0], j[0], jw[0], k[0], k[1], i[1], jw[1], k[2]};
  for (int q = 0; q < 8; q++) order[no++] = rest[q];
  TRY(stof_sched_reorder(s, no, order));
  if (lead) TRY(stof_sched_bind(s, l[0], "blockIdx.z"));
  TRY(stof_sched_bind(s, i[0], "blockIdx.y"));
  TRY(stof_sched_bind(s, j[0], "blockIdx.x"));
  TRY(stof_sched_bind(s, jw[0], "threadIdx.y"));
  TRY(stof_sched_unroll(s, k[1]));
  TRY(stof_sched_tensorize(s, i[1], "mma_m16n8k16"));
  TRY(stage(s, c2, 1, k[0], -1, kwn));
  /* the intermediate's chunk at each step, computed by the same warps */
  TRY(stof_sched_compute_at(s, mb, k[0]));
  TRY(stof_sched_compute_at(s, c1, k[0]));
  int gl[6], gn, gc[2], gk[3];
  TRY(stof_sched_get_loops(s, c1, 6, gl, &gn));
  if (gn < 3) return stof_ctx_error(ctx, STOF_ERR_UNSUPPORTED, "tensorcore_ffn: first GEMM with %d loops", gn);
  int gr = gl[gn - 3];
  stof_factor fgc[2] = {stof_factor_knob(kwn), stof_factor_const(STOF_INFER)};
  stof_factor fgk[3] = {stof_factor_const(STOF_INFER), stof_factor_const(TC_BK / 16), stof_factor_const(16)};
  TRY(stof_sched_split(s, gl[gn - 2], 2, fgc, gc));
  TRY(stof_sched_split(s, gl[gn - 1], 3, fgk, gk));
  int gorder[6] = {gc[0], gk[0], gk[1], gr, gc[1], gk[2]};
  TRY(stof_sched_reorder(s, 6, gorder));
  TRY(stof_sched_bind(s, gc[0], "threadIdx.y"));
  TRY(stof_sched_unroll(s, gk[1]));
  TRY(stof_sched_tensorize(s, gr, "mma_m16n8k16"));
  TRY(stage(s, c1, 0, j[0], -1, kwn)); /* x's rows once per CUDA block */
  TRY(stage(s, c1, 1, gk[0], -1, kwn));
  TRY(stof_sched_reverse_compute_at(s, mb, gc[0]));
  /* the write-back of the second GEMM (after its warp loop): its copy when it leaves the
   * segment, each output (a move renumbers loops: the warp loop is found again each time) */
  int wl[12], wn_;
  if (g2_out) {
    TRY(stof_sched_get_loops(s, c2, 12, wl, &wn_));
    TRY(stof_sched_reverse_compute_at(s, copy, wl[lead + 2]));
  }
  for (int b = 0; b < nb; b++)
    if (id[b] != c2 && stof_sched_block_alive(s, id[b]) && is_output(s, ops[b]) && reads(ops[b], p.g2, NULL, 0, 0)) {
      TRY(stof_sched_get_loops(s, c2, 12, wl, &wn_));
      TRY(stof_sched_reverse_compute_at(s, id[b], wl[lead + 2]));
    }
  return STOF_OK;
}
