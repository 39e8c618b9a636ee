/*
 * stof_sched_auto: a default schedule for a segment of a model graph (everything that is not
 * a GEMM or attention: elementwise chains, broadcasts, reshapes and transposes, gathers, row
 * reductions and what uses them), built only from the public primitives, so that its trace
 * replays and its knobs ("threads", "vec") can be searched.
 *
 *  1. Every injective block that is not an output is inlined (compute_inline), except one a
 *     reduction reads without one of its own data-parallel axes (the GEMM of gelu(fc1) would
 *     recompute each gelu per output column): each output
 *     and each remaining reduction is one root nest.
 *  2. A reduction R (not an output) whose consumers are one output O, or reductions that go
 *     under O, and that read R only at their own leading axes (R[i], R[b, h, s]) is planned
 *     under O's row loop: the fusion of O's first rank(R) axes.
 *  3. "c": each planned R is computed at O's row loop (compute_at), nothing else.
 *     "cuda": per root nest, on a clone that must pass the CUDA code generator:
 *      - row kernel (an output with planned reductions): rows on blockIdx.x; the remaining
 *        (column) axes split (serial, threads on threadIdx.x, vec vectorized); each R at the
 *        row loop with its reduce loops split the same way: a cross-thread all-reduce;
 *      - elementwise kernel (any other injective root): the last axis split by vec, the
 *        rest fused with its outer part and split (blockIdx.x, threadIdx.x);
 *      - reduction kernel (a reduction left at the root): its data-parallel axes fused on
 *        blockIdx.x, its reduce axes fused and split over threadIdx.x (all-reduce).
 *     A nest whose schedule fails is left as it was (serial: slower, still correct); a row
 *     kernel that fails is retried with its reductions as kernels of their own.
 * Works on a clone: on error s is unchanged.
 */
#include <stdio.h>
#include <string.h>

#include "schedule_int.h"

#define ROW_THREADS 512 /* default target of threads per row (capped by the row's work) */
#define ELEM_THREADS 256 /* default threads per CUDA block of an elementwise kernel */
#define MAX_READERS 256

typedef struct auto_ctx {
  stof_sched *c;          /* the schedule being built (a clone of the caller's) */
  int cuda;
  int threads, vec;       /* opts: 0 = default */
  int nb;                 /* blocks */
  int *anchor;            /* per block: the output a planned reduction goes under (-1) */
  int *rowk;              /* per output: rank of its row (0: no planned reduction) */
  unsigned char *done;    /* per block: scheduled as a kernel (or under one) */
  int plain_names;        /* one kernel: knobs "threads" and "vec" */
} auto_ctx;

/* ---------------------------------------------------------------- expression analysis */

/* Does e mention var v (in an index of a load too)? */
static int mentions(const stof_expr *e, const stof_var *v) {
  if (!e) return 0;
  switch (e->kind) {
  case STOF_EXPR_INT:
  case STOF_EXPR_FLOAT: return 0;
  case STOF_EXPR_VAR: return e->u.var == v;
  case STOF_EXPR_LOAD:
    for (int d = 0; d < e->u.load.nidx; d++)
      if (mentions(e->u.load.idx[d], v)) return 1;
    return 0;
  case STOF_EXPR_REDUCE: return mentions(e->u.reduce.src, v);
  default: return mentions(e->u.op.a, v) || mentions(e->u.op.b, v) || mentions(e->u.op.c, v);
  }
}

/* Do all loads of t in e read it at the first k axes of block x, in order (t[i], t[b, h])? */
static int reads_by_rows(const stof_expr *e, const stof_op *t, const sched_block *x, int k) {
  if (!e) return 1;
  switch (e->kind) {
  case STOF_EXPR_INT:
  case STOF_EXPR_FLOAT:
  case STOF_EXPR_VAR: return 1;
  case STOF_EXPR_LOAD:
    for (int d = 0; d < e->u.load.nidx; d++)
      if (!reads_by_rows(e->u.load.idx[d], t, x, k)) return 0;
    if (e->u.load.tensor != t) return 1;
    if (e->u.load.nidx != k || x->op->ndim < k) return 0;
    for (int d = 0; d < k; d++) {
      const stof_expr *ix = e->u.load.idx[d];
      if (ix->kind != STOF_EXPR_VAR || ix->u.var != x->op->axis[d] || t->shape[d] != x->op->axis[d]->extent)
        return 0;
    }
    return 1;
  case STOF_EXPR_REDUCE: return reads_by_rows(e->u.reduce.src, t, x, k);
  default:
    return reads_by_rows(e->u.op.a, t, x, k) && reads_by_rows(e->u.op.b, t, x, k) &&
           reads_by_rows(e->u.op.c, t, x, k);
  }
}

/* The vector widths a vectorized loop over var v (stepping the last index of what it
 * touches) allows for the loads in e: *esize gets the widest element read along v (float
 * tensors only: the others are never vector accesses); *ok is cleared when some such tensor
 * has a last extent that vec does not divide (a multiple of every width kept: *mod). */
static void vec_scan(const stof_expr *e, const stof_var *v, int *esize, int64_t *ext, int *next, int cap) {
  if (!e) return;
  switch (e->kind) {
  case STOF_EXPR_INT:
  case STOF_EXPR_FLOAT:
  case STOF_EXPR_VAR: return;
  case STOF_EXPR_LOAD: {
    const stof_op *t = e->u.load.tensor;
    for (int d = 0; d < e->u.load.nidx; d++) vec_scan(e->u.load.idx[d], v, esize, ext, next, cap);
    if (!stof_dtype_is_float(t->dtype) || t->ndim < 1 || !mentions(e->u.load.idx[t->ndim - 1], v)) return;
    int sz = (int)stof_dtype_size(t->dtype);
    if (sz > *esize) *esize = sz;
    if (*next < cap) ext[(*next)++] = t->shape[t->ndim - 1];
    return;
  }
  case STOF_EXPR_REDUCE: vec_scan(e->u.reduce.src, v, esize, ext, next, cap); return;
  default:
    vec_scan(e->u.op.a, v, esize, ext, next, cap);
    vec_scan(e->u.op.b, v, esize, ext, next, cap);
    vec_scan(e->u.op.c, v, esize, ext, next, cap);
  }
}

/* What a vectorized loop may take: the widths (2, 4, 8, 16 elements) that keep every access
 * at most 16 bytes and divide every extent in ext[0..n); *esize is the widest element. */
typedef struct vec_req {
  int esize;
  int n;
  int64_t ext[64];
} vec_req;

static void vec_req_add_block(vec_req *r, const sched_block *x, const stof_var *v, int64_t loop_extent) {
  const stof_expr *red = sched_block_reduce(x);
  vec_scan(red ? red->u.reduce.src : x->op->body, v, &r->esize, r->ext, &r->n, 64);
  if (r->n < 64) r->ext[r->n++] = loop_extent;
}

static void vec_req_add_store(vec_req *r, const stof_op *out) {
  if (stof_dtype_is_float(out->dtype) && (int)stof_dtype_size(out->dtype) > r->esize)
    r->esize = (int)stof_dtype_size(out->dtype);
  if (out->ndim >= 1 && r->n < 64) r->ext[r->n++] = out->shape[out->ndim - 1];
}

/* Candidates of the vec knob: 1 and the widths r allows, ascending; their number. */
static int vec_cands(const vec_req *r, int64_t *cand) {
  int n = 0;
  cand[n++] = 1;
  int es = r->esize ? r->esize : 4;
  for (int64_t w = 2; w * es <= 16; w *= 2) {
    int ok = 1;
    for (int i = 0; i < r->n && ok; i++) ok = r->ext[i] % w == 0;
    if (ok) cand[n++] = w;
  }
  return n;
}

/* ---------------------------------------------------------------- knobs */

static int64_t pow2_ceil(int64_t x) {
  int64_t p = 1;
  while (p < x && p < ((int64_t)1 << 40)) p *= 2;
  return p;
}

/* Can a thread count take part in an all-reduce (a power of two up to 32 or a multiple of
 * 32, at most 1024)? */
static int threads_legal(int64_t t) {
  return t >= 1 && t <= 1024 && (t % 32 == 0 || (t <= 32 && (t & (t - 1)) == 0));
}

/* Inserts v into the ascending list cand[0..*n) unless it is there; returns its index. */
static int cand_insert(int64_t *cand, int *n, int64_t v) {
  int i = 0;
  while (i < *n && cand[i] < v) i++;
  if (i < *n && cand[i] == v) return i;
  memmove(&cand[i + 1], &cand[i], sizeof *cand * (size_t)(*n - i));
  cand[i] = v;
  (*n)++;
  return i;
}

/* The knob name for kernel block b: "what" alone for a lone kernel, else "<b>.what". */
static void knob_name(const auto_ctx *a, int b, const char *what, char *buf, size_t cap) {
  if (a->plain_names)
    snprintf(buf, cap, "%s", what);
  else
    snprintf(buf, cap, "%s.%s", sched_block_name(a->c, b), what);
}

/* The threads knob of kernel b on k: useful = the threads that have work; rows (1: an
 * all-reduce may span them: legal counts only) picks the candidates and the default. */
static stof_status threads_knob(const auto_ctx *a, stof_sched *k, int b, int64_t useful, int rows, int *knob) {
  int64_t cand[32];
  int n = 0, dec = -1;
  int64_t P = pow2_ceil(useful < 1 ? 1 : useful);
  int64_t lo = P < 32 ? P : 32, hi = P < 1024 ? P : 1024;
  if (!rows) lo = 32, hi = P < 32 ? 32 : hi;
  for (int64_t p = lo; p <= hi; p *= 2) cand[n++] = p;
  if (rows && threads_legal(useful) && useful > 32) cand_insert(cand, &n, useful);
  int64_t target = rows ? (useful < ROW_THREADS ? useful : ROW_THREADS) : (useful < ELEM_THREADS ? useful : ELEM_THREADS);
  if (a->threads)
    dec = cand_insert(cand, &n, a->threads);
  else {
    dec = n - 1;
    for (int i = n - 1; i >= 0; i--)
      if (cand[i] >= target) dec = i;
  }
  char name[96];
  knob_name(a, b, "threads", name, sizeof name);
  return stof_sched_knob(k, name, n, cand, dec, knob);
}

/* The vec knob of kernel b on k (*knob = -1, nothing made, when only 1 is possible). */
static stof_status vec_knob(const auto_ctx *a, stof_sched *k, int b, const vec_req *r, int *knob) {
  int64_t cand[8];
  int n = vec_cands(r, cand), dec = n - 1;
  *knob = -1;
  if (n < 2) return STOF_OK;
  if (a->vec)
    while (dec > 0 && cand[dec] > a->vec) dec--;
  char name[96];
  knob_name(a, b, "vec", name, sizeof name);
  return stof_sched_knob(k, name, n, cand, dec, knob);
}

static int64_t knob_value(const stof_sched *k, int knob) {
  int64_t v = 1;
  if (knob >= 0) stof_sched_knob_info(k, knob, NULL, NULL, NULL, &v);
  return v;
}

/* ---------------------------------------------------------------- primitives on a clone */

static int64_t extent(const stof_sched *k, int loop) { return sched_loop_at(k, loop)->extent; }

/* Fuses loops[0..n) (n >= 1; one loop is returned as it is) into *out. */
static stof_status fuse_n(stof_sched *k, int n, const int *loops, int *out) {
  if (n == 1) {
    *out = loops[0];
    return STOF_OK;
  }
  return stof_sched_fuse(k, n, loops, out);
}

/* Splits loop into (serial, threads[, vec]), binds the threads to threadIdx.x, unrolls the
 * serial part and vectorizes the vec part (vknob < 0: no vec part). */
static stof_status spread(stof_sched *k, int loop, int tknob, int vknob) {
  /* split by vec first, then the runs by threads: the guard of a split that does not divide
   * tests the run, outside the vectorized loop (a guard inside it keeps accesses scalar) */
  stof_factor f[2] = {stof_factor_const(STOF_INFER), stof_factor_knob(vknob)};
  int v[2], p[2];
  stof_status st = STOF_OK;
  if (vknob >= 0) {
    if ((st = stof_sched_split(k, loop, 2, f, v))) return st;
    loop = v[0];
  }
  f[1] = stof_factor_knob(tknob);
  if (!st) st = stof_sched_split(k, loop, 2, f, p);
  if (!st) st = stof_sched_bind(k, p[1], "threadIdx.x");
  if (!st) st = stof_sched_unroll(k, p[0]);
  if (!st && vknob >= 0) st = stof_sched_vectorize(k, v[1]);
  return st;
}

/* Does the CUDA code generator take k? */
static stof_status cuda_ok(stof_sched *k) {
  char *src = NULL;
  stof_status st = sched_codegen_cuda(k, 0, NULL, &src, NULL);
  if (src) stof_ctx_dealloc(k->ctx, src, strlen(src) + 1);
  return st;
}

/* Row kernel of output o on k: rows (o's first rowk axes) on blockIdx.x, columns over the
 * threads, the planned reductions at the row loop as all-reduces. */
static stof_status row_kernel(auto_ctx *a, stof_sched *k, int o) {
  int rk = a->rowk[o], b, loops[STOF_SCHED_MAX_LOOPS], n, row, cols = -1;
  stof_status st = stof_sched_get_block(k, sched_block_name(k, o), &b);
  if (!st) st = stof_sched_get_loops(k, b, STOF_SCHED_MAX_LOOPS, loops, &n);
  if (st) return st;
  if (rk > n) return STOF_ERR_SCHEDULE;
  const sched_block *ob = sched_block_at(k, o);
  int64_t rows = 1, ncol = 1;
  for (int d = 0; d < n; d++) {
    if (d < rk)
      rows *= extent(k, loops[d]);
    else
      ncol *= extent(k, loops[d]);
  }
  if (rows > INT32_MAX) return stof_ctx_error(k->ctx, STOF_ERR_SCHEDULE, "auto: %lld rows", (long long)rows);

  /* the work per row: the columns and each reduction's reduce loops */
  vec_req vr = {0};
  int64_t work = ncol;
  int vec_possible = n - rk == 1;
  if (vec_possible) {
    vec_req_add_block(&vr, ob, ob->op->axis[n - 1], ncol);
    vec_req_add_store(&vr, ob->out);
  }
  for (int r = a->nb - 1; r >= 0; r--) {
    if (a->anchor[r] != o) continue;
    const sched_block *rb = sched_block_at(k, r);
    const stof_expr *red = sched_block_reduce(rb);
    int64_t rext = 1;
    for (int q = 0; q < red->u.reduce.naxis; q++) rext *= red->u.reduce.axis[q]->extent;
    if (rext > work) work = rext;
    if (red->u.reduce.naxis == 1)
      vec_req_add_block(&vr, rb, red->u.reduce.axis[0], rext);
    else
      vec_possible = 0;
  }
  int vknob = -1, tknob;
  if (vec_possible && (st = vec_knob(a, k, o, &vr, &vknob))) return st;
  int64_t v = knob_value(k, vknob);
  if ((st = threads_knob(a, k, o, (work + v - 1) / v, 1, &tknob))) return st;

  if (n > rk) {
    if ((st = fuse_n(k, n - rk, loops + rk, &cols))) return st;
    if ((st = spread(k, cols, tknob, vknob))) return st;
  } else { /* no columns: a unit loop on threadIdx.x (thread 0 stores the row's element) */
    stof_factor f[2] = {stof_factor_const(STOF_INFER), stof_factor_const(1)};
    int p[2];
    if ((st = stof_sched_split(k, loops[rk - 1], 2, f, p))) return st;
    if ((st = stof_sched_bind(k, p[1], "threadIdx.x"))) return st;
    loops[rk - 1] = p[0];
  }
  if ((st = fuse_n(k, rk, loops, &row))) return st;
  if ((st = stof_sched_bind(k, row, "blockIdx.x"))) return st;

  for (int r = a->nb - 1; r >= 0; r--) { /* consumers first */
    if (a->anchor[r] != o) continue;
    int hr;
    if ((st = stof_sched_get_block(k, sched_block_name(k, r), &hr))) return st;
    if ((st = stof_sched_compute_at(k, hr, row))) return st;
  }
  for (int r = a->nb - 1; r >= 0; r--) {
    if (a->anchor[r] != o) continue;
    int rl[STOF_SCHED_MAX_LOOPS], nr, red[STOF_SCHED_MAX_LOOPS], nred = 0, fused;
    if ((st = stof_sched_get_loops(k, r, STOF_SCHED_MAX_LOOPS, rl, &nr))) return st;
    for (int q = 0; q < nr; q++) {
      const sched_loop *lp = sched_loop_at(k, rl[q]);
      if (lp->iter == STOF_ITER_REDUCE)
        red[nred++] = rl[q];
      else if (lp->extent != 1) /* more than the row's element: not a row reduction */
        return stof_ctx_error(k->ctx, STOF_ERR_SCHEDULE, "auto: block %s needs %lld elements per row",
                              sched_block_name(k, r), (long long)lp->extent);
    }
    if (!nred) return STOF_ERR_SCHEDULE;
    if ((st = fuse_n(k, nred, red, &fused))) return st;
    if ((st = spread(k, fused, tknob, nred == 1 ? vknob : -1))) return st;
    a->done[r] = 1;
  }
  return STOF_OK;
}

/* Elementwise (injective) kernel of block b: the last axis split by vec, everything else
 * fused with its outer part over (blockIdx.x, threadIdx.x). */
static stof_status elem_kernel(auto_ctx *a, stof_sched *k, int b) {
  int h, loops[STOF_SCHED_MAX_LOOPS], n, fused, vknob = -1, tknob;
  stof_status st = stof_sched_get_block(k, sched_block_name(k, b), &h);
  if (!st) st = stof_sched_get_loops(k, h, STOF_SCHED_MAX_LOOPS, loops, &n);
  if (st || n == 0) return st; /* a scalar: one thread */
  const sched_block *x = sched_block_at(k, b);
  vec_req vr = {0};
  vec_req_add_block(&vr, x, x->op->axis[n - 1], extent(k, loops[n - 1]));
  vec_req_add_store(&vr, x->out);
  if ((st = vec_knob(a, k, b, &vr, &vknob))) return st;
  int64_t total = 1;
  for (int d = 0; d < n; d++) total *= extent(k, loops[d]);
  if ((st = threads_knob(a, k, b, total / knob_value(k, vknob), 0, &tknob))) return st;
  if (vknob >= 0) {
    stof_factor f[2] = {stof_factor_const(STOF_INFER), stof_factor_knob(vknob)};
    int p[2];
    if ((st = stof_sched_split(k, loops[n - 1], 2, f, p))) return st;
    if ((st = stof_sched_vectorize(k, p[1]))) return st;
    loops[n - 1] = p[0];
  }
  if ((st = fuse_n(k, n, loops, &fused))) return st;
  int64_t blocks = (extent(k, fused) + 31) / 32; /* with the fewest threads */
  int p[3];
  if (blocks <= INT32_MAX) {
    stof_factor f[2] = {stof_factor_const(STOF_INFER), stof_factor_knob(tknob)};
    if ((st = stof_sched_split(k, fused, 2, f, p))) return st;
    if (!(st = stof_sched_bind(k, p[0], "blockIdx.x"))) st = stof_sched_bind(k, p[1], "threadIdx.x");
  } else { /* a serial loop around a grid of 2^30 blocks */
    stof_factor f[3] = {stof_factor_const(STOF_INFER), stof_factor_const((int64_t)1 << 30), stof_factor_knob(tknob)};
    if ((st = stof_sched_split(k, fused, 3, f, p))) return st;
    if (!(st = stof_sched_bind(k, p[1], "blockIdx.x"))) st = stof_sched_bind(k, p[2], "threadIdx.x");
  }
  return st;
}

/* Reduction kernel of block b (left at the root): its data-parallel axes on blockIdx.x, its
 * reduce axes over threadIdx.x (an all-reduce per output element). */
static stof_status reduce_kernel(auto_ctx *a, stof_sched *k, int b) {
  int h, loops[STOF_SCHED_MAX_LOOPS], n, dp[STOF_SCHED_MAX_LOOPS], ndp = 0, rd[STOF_SCHED_MAX_LOOPS], nrd = 0;
  stof_status st = stof_sched_get_block(k, sched_block_name(k, b), &h);
  if (!st) st = stof_sched_get_loops(k, h, STOF_SCHED_MAX_LOOPS, loops, &n);
  if (st) return st;
  int64_t rows = 1, rext = 1;
  for (int q = 0; q < n; q++) {
    if (sched_loop_at(k, loops[q])->iter == STOF_ITER_REDUCE) {
      rd[nrd++] = loops[q];
      rext *= extent(k, loops[q]);
    } else {
      if (nrd) return STOF_ERR_SCHEDULE; /* a data-parallel loop inside the reduce loops */
      dp[ndp++] = loops[q];
      rows *= extent(k, loops[q]);
    }
  }
  if (!nrd || rows > INT32_MAX) return STOF_ERR_SCHEDULE;
  const sched_block *x = sched_block_at(k, b);
  const stof_expr *red = sched_block_reduce(x);
  int vknob = -1, tknob, row, fused;
  if (nrd == 1) {
    vec_req vr = {0};
    vec_req_add_block(&vr, x, red->u.reduce.axis[0], rext);
    if ((st = vec_knob(a, k, b, &vr, &vknob))) return st;
  }
  int64_t v = knob_value(k, vknob);
  if ((st = threads_knob(a, k, b, (rext + v - 1) / v, 1, &tknob))) return st;
  if ((st = fuse_n(k, nrd, rd, &fused))) return st;
  if ((st = spread(k, fused, tknob, vknob))) return st;
  if (ndp) {
    if ((st = fuse_n(k, ndp, dp, &row))) return st;
    if ((st = stof_sched_bind(k, row, "blockIdx.x"))) return st;
  }
  return STOF_OK;
}

/* Runs kernel (row_kernel, elem_kernel, reduce_kernel) for block b on a clone of a->c; keeps
 * the clone when every primitive succeeded (and, on CUDA, the code generator takes it).
 * Returns 1 when kept, 0 when not (errors cleared), -1 on out-of-memory. */
static int attempt(auto_ctx *a, stof_status (*kernel)(auto_ctx *, stof_sched *, int), int b) {
  stof_sched *k;
  if (stof_sched_clone(a->c, &k)) return -1;
  stof_sched *keep = a->c;
  unsigned char *done = a->done, *mark = stof_ctx_alloc(keep->ctx, (size_t)a->nb);
  if (!mark) {
    stof_sched_free(k);
    return -1;
  }
  memcpy(mark, done, (size_t)a->nb);
  a->done = mark;
  a->c = k;
  stof_status st = kernel(a, k, b);
  if (!st && a->cuda) st = cuda_ok(k);
  a->c = keep;
  a->done = done;
  if (st == STOF_ERR_NOMEM) {
    stof_ctx_dealloc(keep->ctx, mark, (size_t)a->nb);
    stof_sched_free(k);
    return -1;
  }
  stof_ctx_clear_error(keep->ctx);
  if (st) {
    stof_ctx_dealloc(keep->ctx, mark, (size_t)a->nb);
    stof_sched_free(k);
    return 0;
  }
  memcpy(done, mark, (size_t)a->nb);
  done[b] = 1;
  stof_ctx_dealloc(keep->ctx, mark, (size_t)a->nb);
  stof_sched tmp = *keep;
  *keep = *k;
  *k = tmp;
  stof_sched_free(k);
  return 1;
}

/* ---------------------------------------------------------------- the plan */

static int unique_name(const stof_sched *c, int b) {
  for (int i = 0; i < c->blocks.len; i++)
    if (i != b && strcmp(sched_block_name(c, i), sched_block_name(c, b)) == 0) return 0;
  return 1;
}

/* Does some load of t in e leave out a data-parallel axis of block r (so that inlining t
 * into r would compute each of t's elements again for every value of that axis)? */
static int loads_skip_an_axis(const stof_expr *e, const stof_op *t, const sched_block *r) {
  if (!e) return 0;
  switch (e->kind) {
  case STOF_EXPR_INT:
  case STOF_EXPR_FLOAT:
  case STOF_EXPR_VAR: return 0;
  case STOF_EXPR_LOAD:
    if (e->u.load.tensor == t)
      for (int d = 0; d < r->op->ndim; d++) {
        int seen = 0;
        for (int k = 0; k < e->u.load.nidx && !seen; k++) seen = mentions(e->u.load.idx[k], r->op->axis[d]);
        if (!seen) return 1;
      }
    for (int k = 0; k < e->u.load.nidx; k++)
      if (loads_skip_an_axis(e->u.load.idx[k], t, r)) return 1;
    return 0;
  case STOF_EXPR_REDUCE: return loads_skip_an_axis(e->u.reduce.src, t, r);
  default:
    return loads_skip_an_axis(e->u.op.a, t, r) || loads_skip_an_axis(e->u.op.b, t, r) ||
           loads_skip_an_axis(e->u.op.c, t, r);
  }
}

/* Whether a reduction reads block x's value without one of its own data-parallel axes (a
 * GEMM reading gelu(fc1)[i, k] for every j): x inlined there would be recomputed per j. */
static int recomputed_by_a_reduction(const stof_sched *c, int b) {
  const sched_block *x = sched_block_at(c, b);
  int rd[MAX_READERS], nr = sched_readers(c, x->out, b, rd, MAX_READERS);
  for (int i = 0; i < nr && i < MAX_READERS; i++) {
    const sched_block *r = sched_block_at(c, rd[i]);
    if (sched_block_reduce(r) && loads_skip_an_axis(r->op->body, x->out, r)) return 1;
  }
  return 0;
}

/* Step 1: inline every injective block that is not an output, unless a reduction would
 * compute it again for each value of one of its axes. */
static stof_status inline_all(auto_ctx *a) {
  stof_sched *c = a->c;
  for (int b = 0; b < a->nb; b++) {
    const sched_block *x = sched_block_at(c, b);
    if (x->state != SCHED_B_LIVE || sched_is_output(c, b) || sched_block_reduce(x) || !unique_name(c, b) ||
        recomputed_by_a_reduction(c, b))
      continue;
    int h;
    stof_status st = stof_sched_get_block(c, sched_block_name(c, b), &h);
    if (!st) st = stof_sched_compute_inline(c, h);
    if (st == STOF_ERR_NOMEM) return st;
    stof_ctx_clear_error(c->ctx);
  }
  return STOF_OK;
}

/* Step 2: which reductions go under which output's row loop. */
static void plan_rows(auto_ctx *a) {
  stof_sched *c = a->c;
  for (int b = a->nb - 1; b >= 0; b--) {
    const sched_block *x = sched_block_at(c, b);
    a->anchor[b] = -1;
    if (x->state != SCHED_B_LIVE || sched_is_output(c, b) || !sched_block_reduce(x) || !unique_name(c, b)) continue;
    int k = x->op->ndim, rd[MAX_READERS], nr = sched_readers(c, x->out, b, rd, MAX_READERS), o = -1, ok = k >= 1;
    if (nr < 1 || nr > MAX_READERS) ok = 0;
    for (int i = 0; i < nr && ok; i++) {
      const sched_block *r = sched_block_at(c, rd[i]);
      int to = sched_is_output(c, rd[i]) ? rd[i] : a->anchor[rd[i]];
      if (to < 0 || (o >= 0 && to != o) || !reads_by_rows(r->op->body, x->out, r, k)) ok = 0;
      o = to;
    }
    if (ok && sched_block_reduce(sched_block_at(c, o))) ok = 0; /* under an output that reduces */
    if (ok && a->rowk[o] && a->rowk[o] != k) ok = 0;
    if (!ok) continue;
    a->anchor[b] = o;
    a->rowk[o] = k;
  }
}

/* "c": the planned reductions at their output's row loop (the innermost row axis). */
static stof_status attach_c(auto_ctx *a) {
  stof_sched *c = a->c;
  for (int b = a->nb - 1; b >= 0; b--) {
    int o = a->anchor[b], h, loops[STOF_SCHED_MAX_LOOPS], n;
    if (o < 0) continue;
    stof_status st = stof_sched_get_block(c, sched_block_name(c, o), &h);
    if (!st) st = stof_sched_get_loops(c, h, STOF_SCHED_MAX_LOOPS, loops, &n);
    if (!st) st = stof_sched_get_block(c, sched_block_name(c, b), &h);
    if (!st) st = stof_sched_compute_at(c, h, loops[a->rowk[o] - 1]);
    if (st == STOF_ERR_NOMEM) return st;
    stof_ctx_clear_error(c->ctx);
  }
  return STOF_OK;
}

static int live_root(const stof_sched *c, int b) {
  const sched_block *x = sched_block_at(c, b);
  return x->state == SCHED_B_LIVE && x->attach < 0;
}

/* "cuda": a kernel per root nest. */
static stof_status kernels_cuda(auto_ctx *a) {
  int roots = 0;
  for (int b = 0; b < a->nb; b++)
    roots += live_root(a->c, b) && a->anchor[b] < 0;
  a->plain_names = roots == 1;
  for (int o = 0; o < a->nb; o++) {
    if (!a->rowk[o] || !live_root(a->c, o)) continue;
    int r = attempt(a, row_kernel, o);
    if (r < 0) return STOF_ERR_NOMEM;
    if (r == 0) { /* the reductions become kernels of their own */
      a->plain_names = 0;
      for (int b = 0; b < a->nb; b++)
        if (a->anchor[b] == o) a->anchor[b] = -1;
    }
  }
  for (int b = 0; b < a->nb; b++) {
    if (a->done[b] || !live_root(a->c, b) || !unique_name(a->c, b)) continue;
    int r = attempt(a, sched_block_reduce(sched_block_at(a->c, b)) ? reduce_kernel : elem_kernel, b);
    if (r < 0) return STOF_ERR_NOMEM;
  }
  return STOF_OK;
}

stof_status stof_sched_auto(stof_sched *s, const char *target, const stof_sched_auto_opts *opts) {
  if (!s) return STOF_ERR_ARG;
  stof_ctx *ctx = s->ctx;
  int cuda;
  if (target && strcmp(target, "c") == 0)
    cuda = 0;
  else if (target && strcmp(target, "cuda") == 0)
    cuda = 1;
  else
    return stof_ctx_error(ctx, STOF_ERR_ARG, "auto: unknown target \"%s\" (\"c\" or \"cuda\")", target ? target : "(null)");
  int threads = opts ? opts->threads : 0, vec = opts ? opts->vec : 0;
  if (threads && !threads_legal(threads))
    return stof_ctx_error(ctx, STOF_ERR_ARG,
                          "auto: threads = %d: it must be a power of two up to 32 or a multiple of 32, at most "
                          "1024 (0: the default)",
                          threads);
  if (vec < 0 || vec > 16 || (vec & (vec - 1)))
    return stof_ctx_error(ctx, STOF_ERR_ARG, "auto: vec = %d: it must be 1, 2, 4, 8 or 16 (0: the default)", vec);
  if (s->trace.insts.len)
    return stof_ctx_error(ctx, STOF_ERR_SCHEDULE,
                          "auto: the schedule is not fresh (its trace has %d instructions): apply auto to a "
                          "new schedule (stof_sched_fresh)",
                          s->trace.insts.len);
  auto_ctx a = {0};
  a.cuda = cuda;
  a.threads = threads;
  a.vec = vec;
  a.nb = s->blocks.len;
  size_t nb = (size_t)(a.nb ? a.nb : 1);
  a.anchor = stof_ctx_alloc(ctx, sizeof *a.anchor * nb);
  a.rowk = stof_ctx_alloc(ctx, sizeof *a.rowk * nb);
  a.done = stof_ctx_alloc(ctx, nb);
  stof_status st = (a.anchor && a.rowk && a.done) ? stof_sched_clone(s, &a.c) : STOF_ERR_NOMEM;
  if (!st) {
    memset(a.rowk, 0, sizeof *a.rowk * nb);
    memset(a.done, 0, nb);
    st = inline_all(&a);
  }
  if (!st) {
    plan_rows(&a);
    st = cuda ? kernels_cuda(&a) : attach_c(&a);
  }
  if (a.anchor) stof_ctx_dealloc(ctx, a.anchor, sizeof *a.anchor * nb);
  if (a.rowk) stof_ctx_dealloc(ctx, a.rowk, sizeof *a.rowk * nb);
  if (a.done) stof_ctx_dealloc(ctx, a.done, nb);
  if (st) {
    stof_sched_free(a.c);
    return st;
  }
  stof_sched tmp = *s;
  *s = *a.c;
  *a.c = tmp;
  stof_sched_free(a.c);
  return STOF_OK;
}
