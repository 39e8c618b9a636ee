/*
 * Loop transforms: split, fuse, reorder, tile (split + split + reorder).
 *
 * Each is a check (every argument, with the message naming the loop and the cause), then a
 * reservation of everything it appends, then an apply that cannot fail and records the
 * instruction. A split or fused loop stays in the loop array, marked replaced, with what
 * the lowering needs to express it through the new loops:
 *   split:  source = sum over parts of part * stride   (stride = product of inner extents)
 *   fuse:   source_k = fused / stride_k % extent_k     (no modulo for the outermost)
 */
#include <stdio.h>
#include <string.h>

#include "schedule_int.h"

/* "bound to blockIdx.x", "vectorized", ... for messages; NULL when the loop carries no
 * annotation at all (pragmas included). */
static const char *annotated(const stof_sched *s, int loop, char *buf, size_t cap) {
  const sched_loop *l = sched_loop_at(s, loop);
  if (l->ann == STOF_ANN_THREAD) {
    snprintf(buf, cap, "bound to %s", stof_thread_tag_name(l->thread));
    return buf;
  }
  if (l->ann != STOF_ANN_NONE) return stof_ann_kind_name(l->ann);
  for (int i = 0; i < s->annots.len; i++) {
    const sched_annot *a = sched_annot_at(s, i);
    if (!a->is_block && a->id == loop) {
      snprintf(buf, cap, "annotated with %s", sched_str(s, a->key));
      return buf;
    }
  }
  return NULL;
}

/* The first live block computed at loop (before or after its body), or -1. */
static int attached_at(const stof_sched *s, int loop) {
  for (int b = 0; b < s->blocks.len; b++) {
    const sched_block *x = sched_block_at(s, b);
    if (x->state == SCHED_B_LIVE && x->attach == loop) return b;
  }
  return -1;
}

/* The blocks computed at loop move to loop to (which encloses the same iterations). */
static void move_attached(stof_sched *s, int loop, int to) {
  for (int b = 0; b < s->blocks.len; b++)
    if (sched_block_at(s, b)->attach == loop) sched_block_at(s, b)->attach = to;
}

static int mul_overflows(int64_t a, int64_t b, int64_t *out) {
  return __builtin_mul_overflow(a, b, out) || *out > ((int64_t)1 << 48);
}

/* ---------------------------------------------------------------- split */

/* Checks split(loop, factors) and resolves the factor values into v (inferred included). */
static stof_status split_check(stof_sched *s, const char *what, int loop, int nfactor,
                               const stof_factor *factors, int extra_loops, int64_t *v) {
  stof_status st = sched_check_loop(s, what, loop);
  if (st) return st;
  const sched_loop *l = sched_loop_at(s, loop);
  const char *name = sched_loop_name(s, loop);
  if (nfactor < 2 || !factors)
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE, "%s: loop %s needs at least 2 factors, got %d",
                          what, name, factors ? nfactor : 0);
  if (nfactor > STOF_SCHED_MAX_LOOPS)
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE, "%s: %d factors for loop %s, at most %d", what,
                          nfactor, name, STOF_SCHED_MAX_LOOPS);
  const sched_block *b = sched_block_at(s, l->block);
  if (b->nloop + nfactor - 1 + extra_loops > STOF_SCHED_MAX_LOOPS)
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE, "%s: block %s would have %d loops, at most %d",
                          what, sched_block_name(s, l->block), b->nloop + nfactor - 1 + extra_loops,
                          STOF_SCHED_MAX_LOOPS);
  char buf[64];
  const char *ann = annotated(s, loop, buf, sizeof buf);
  if (ann)
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE, "%s: loop %s is %s (split it before annotating it)",
                          what, name, ann);
  int infer = -1;
  int64_t prod = 1;
  for (int k = 0; k < nfactor; k++) {
    if ((st = sched_factor_value(s, what, factors[k], &v[k]))) return st;
    char via[96] = "";
    if (factors[k].knob >= 0)
      snprintf(via, sizeof via, " (knob %s)", sched_str(s, sched_knob_at(s, factors[k].knob)->name));
    if (v[k] == STOF_INFER) {
      if (infer >= 0)
        return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                              "%s: more than one factor for loop %s is STOF_INFER", what, name);
      infer = k;
    } else if (v[k] == 0) {
      return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE, "%s: factor 0 for loop %s%s", what, name, via);
    } else if (v[k] < 0) {
      return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE, "%s: negative factor %lld for loop %s%s", what,
                            (long long)v[k], name, via);
    } else if (mul_overflows(prod, v[k], &prod)) {
      return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE, "%s: the factors of loop %s are too large",
                            what, name);
    }
  }
  if (infer >= 0) {
    v[infer] = (l->extent + prod - 1) / prod;
  } else if (prod < l->extent) {
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                          "%s: factors with product %lld do not cover loop %s of extent %lld", what,
                          (long long)prod, name, (long long)l->extent);
  }
  return STOF_OK;
}

static void split_need(const stof_sched *s, int loop, int nfactor, sched_need *n) {
  n->loops += nfactor;
  n->chars += nfactor * ((int)strlen(sched_loop_name(s, loop)) + 24);
  trace_need(n, 1 + nfactor, nfactor, 0, 0, 0, nfactor);
}

/* Applies a checked split (space reserved): parts get the new loop ids. */
static void split_apply(stof_sched *s, int loop, int nfactor, const stof_factor *factors,
                        const int64_t *v, int *parts) {
  sched_loop parent = *sched_loop_at(s, loop);
  char base[256];
  snprintf(base, sizeof base, "%s", sched_str(s, parent.name));
  int first = s->loops.len;
  for (int k = 0; k < nfactor; k++) {
    sched_loop l;
    memset(&l, 0, sizeof l);
    l.block = parent.block;
    l.extent = v[k];
    l.iter = parent.iter;
    l.derive = STOF_DERIVE_SPLIT;
    l.source = loop;
    l.part = k;
    l.nparts = nfactor;
    l.stride = 1;
    for (int j = k + 1; j < nfactor; j++) l.stride *= v[j];
    l.repl = SCHED_LEAF;
    l.ann = STOF_ANN_NONE;
    l.tv = -1;
    char name[300];
    if (nfactor == 2)
      snprintf(name, sizeof name, "%s.%s", base, k == 0 ? "outer" : "inner");
    else
      snprintf(name, sizeof name, "%s.%d", base, k);
    parts[k] = sched_add_loop(s, &l, name);
  }
  sched_loop *p = sched_loop_at(s, loop);
  p->repl = SCHED_REPL_SPLIT;
  p->repl_first = first;
  p->repl_n = nfactor;
  sched_block *b = sched_block_at(s, parent.block);
  int pos = sched_loop_pos(s, loop);
  memmove(&b->loop[pos + nfactor], &b->loop[pos + 1], sizeof(int) * (size_t)(b->nloop - pos - 1));
  for (int k = 0; k < nfactor; k++) b->loop[pos + k] = parts[k];
  b->nloop += nfactor - 1;
  move_attached(s, loop, parts[nfactor - 1]);

  int in[1 + STOF_SCHED_MAX_LOOPS];
  int64_t num[STOF_SCHED_MAX_LOOPS];
  in[0] = parent.tv;
  for (int k = 0; k < nfactor; k++) {
    in[1 + k] = factors[k].knob >= 0 ? sched_knob_at(s, factors[k].knob)->tv : -1;
    num[k] = factors[k].knob >= 0 ? 0 : factors[k].value;
  }
  int tv = trace_record(&s->trace, STOF_INST_SPLIT, 1 + nfactor, in, nfactor, num, 0, NULL, 0, NULL,
                        -1, nfactor, SCHED_V_LOOP);
  for (int k = 0; k < nfactor; k++) sched_loop_at(s, parts[k])->tv = tv + k;
}

stof_status stof_sched_split(stof_sched *s, int loop, int nfactor, const stof_factor *factors,
                             int *parts) {
  int64_t v[STOF_SCHED_MAX_LOOPS];
  stof_status st = split_check(s, "split", loop, nfactor, factors, 0, v);
  if (st) return st;
  sched_need n = {0};
  split_need(s, loop, nfactor, &n);
  if ((st = sched_reserve(s, &n))) return st;
  split_apply(s, loop, nfactor, factors, v, parts);
  return STOF_OK;
}

/* ---------------------------------------------------------------- fuse */

stof_status stof_sched_fuse(stof_sched *s, int nloop, const int *loops, int *fused) {
  const char *what = "fuse";
  if (nloop < 2 || !loops)
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE, "fuse: needs at least 2 loops, got %d",
                          loops ? nloop : 0);
  if (nloop > STOF_SCHED_MAX_LOOPS)
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE, "fuse: %d loops, at most %d", nloop,
                          STOF_SCHED_MAX_LOOPS);
  stof_status st;
  int pos[STOF_SCHED_MAX_LOOPS];
  int64_t prod = 1;
  size_t namelen = 8;
  char buf[64];
  for (int k = 0; k < nloop; k++) {
    if ((st = sched_check_loop(s, what, loops[k]))) return st;
    const sched_loop *l = sched_loop_at(s, loops[k]), *l0 = sched_loop_at(s, loops[0]);
    const char *name = sched_loop_name(s, loops[k]);
    for (int j = 0; j < k; j++)
      if (loops[j] == loops[k])
        return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE, "fuse: loop %s is given twice", name);
    if (l->block != l0->block)
      return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                            "fuse: loop %s is in block %s, loop %s in block %s",
                            sched_loop_name(s, loops[0]), sched_block_name(s, l0->block), name,
                            sched_block_name(s, l->block));
    if (l->iter != l0->iter)
      return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                            "fuse: loop %s is %s and loop %s is %s (fuse loops of one kind)",
                            sched_loop_name(s, loops[0]), stof_iter_kind_name(l0->iter), name,
                            stof_iter_kind_name(l->iter));
    const char *ann = annotated(s, loops[k], buf, sizeof buf);
    if (ann)
      return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE, "fuse: loop %s is %s (fuse before annotating)",
                            name, ann);
    if (mul_overflows(prod, l->extent, &prod))
      return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE, "fuse: the fused extent is too large");
    pos[k] = sched_loop_pos(s, loops[k]);
    namelen += strlen(name) + 1;
  }
  const sched_block *b = sched_block_at(s, sched_loop_at(s, loops[0])->block);
  for (int k = 0; k + 1 < nloop; k++) {
    int at = attached_at(s, loops[k]);
    if (at >= 0)
      return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                            "fuse: block %s is computed at loop %s, between the loops fused (fuse "
                            "before compute_at)",
                            sched_block_name(s, at), sched_loop_name(s, loops[k]));
  }
  for (int k = 0; k + 1 < nloop; k++) {
    const char *a = sched_loop_name(s, loops[k]), *c = sched_loop_name(s, loops[k + 1]);
    if (pos[k + 1] < pos[k])
      return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                            "fuse: loops %s and %s are not in order (give them outermost first)", a, c);
    if (pos[k + 1] > pos[k] + 1)
      return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                            "fuse: loops %s and %s are not adjacent in block %s (%s lies between them)",
                            a, c, sched_block_name(s, sched_loop_at(s, loops[0])->block),
                            sched_loop_name(s, b->loop[pos[k] + 1]));
  }
  sched_need n = {0};
  n.loops = 1;
  n.chars = (int)namelen;
  trace_need(&n, nloop, 0, 0, 0, 0, 1);
  if ((st = sched_reserve(s, &n))) return st;

  stof_buf nb;
  stof_buf_init(&nb, s->ctx);
  for (int k = 0; k < nloop; k++) stof_buf_printf(&nb, "%s_", sched_loop_name(s, loops[k]));
  stof_buf_puts(&nb, "fused");
  char *name = NULL;
  if ((st = stof_buf_finish(&nb, &name))) return st;

  const sched_loop *l0 = sched_loop_at(s, loops[0]);
  sched_loop f;
  memset(&f, 0, sizeof f);
  f.block = l0->block;
  f.extent = prod;
  f.iter = l0->iter;
  f.derive = STOF_DERIVE_FUSE;
  f.source = loops[0];
  f.nparts = nloop;
  f.repl = SCHED_LEAF;
  f.ann = STOF_ANN_NONE;
  f.tv = -1;
  int id = sched_add_loop(s, &f, name);
  stof_ctx_dealloc(s->ctx, name, strlen(name) + 1);
  int64_t stride = 1;
  int in[STOF_SCHED_MAX_LOOPS];
  for (int k = nloop - 1; k >= 0; k--) {
    sched_loop *l = sched_loop_at(s, loops[k]);
    l->repl = SCHED_REPL_FUSE;
    l->repl_first = id;
    l->repl_stride = stride;
    l->repl_outer = k == 0;
    stride *= l->extent;
    in[k] = l->tv;
  }
  sched_block *bw = sched_block_at(s, f.block);
  bw->loop[pos[0]] = id;
  memmove(&bw->loop[pos[0] + 1], &bw->loop[pos[0] + nloop],
          sizeof(int) * (size_t)(bw->nloop - pos[0] - nloop));
  bw->nloop -= nloop - 1;
  move_attached(s, loops[nloop - 1], id);
  sched_loop_at(s, id)->tv = trace_record(&s->trace, STOF_INST_FUSE, nloop, in, 0, NULL, 0, NULL, 0,
                                          NULL, -1, 1, SCHED_V_LOOP);
  *fused = id;
  return STOF_OK;
}

/* ---------------------------------------------------------------- reorder */

static stof_status reorder_check(stof_sched *s, const char *what, int nloop, const int *loops) {
  if (nloop < 1 || !loops)
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE, "%s: no loops given", what);
  if (nloop > STOF_SCHED_MAX_LOOPS)
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE, "%s: %d loops, at most %d", what, nloop,
                          STOF_SCHED_MAX_LOOPS);
  for (int k = 0; k < nloop; k++) {
    stof_status st = sched_check_loop(s, what, loops[k]);
    if (st) return st;
    const sched_loop *l = sched_loop_at(s, loops[k]), *l0 = sched_loop_at(s, loops[0]);
    for (int j = 0; j < k; j++)
      if (loops[j] == loops[k])
        return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE, "%s: loop %s is given twice", what,
                              sched_loop_name(s, loops[k]));
    if (l->block != l0->block)
      return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                            "%s: loop %s is in block %s, loop %s in block %s", what,
                            sched_loop_name(s, loops[0]), sched_block_name(s, l0->block),
                            sched_loop_name(s, loops[k]), sched_block_name(s, l->block));
  }
  /* a block computed at a loop between the reordered ones would see other iterations */
  int lo = STOF_SCHED_MAX_LOOPS, hi = -1;
  for (int k = 0; k < nloop; k++) {
    int p = sched_loop_pos(s, loops[k]);
    if (p < lo) lo = p;
    if (p > hi) hi = p;
  }
  const sched_block *b = sched_block_at(s, sched_loop_at(s, loops[0])->block);
  for (int p = lo; p < hi; p++) {
    int at = attached_at(s, b->loop[p]);
    if (at >= 0)
      return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                            "%s: block %s is computed at loop %s, among the loops reordered (reorder "
                            "before compute_at)",
                            what, sched_block_name(s, at), sched_loop_name(s, b->loop[p]));
  }
  return STOF_OK;
}

static void reorder_apply(stof_sched *s, int nloop, const int *loops) {
  int pos[STOF_SCHED_MAX_LOOPS], in[STOF_SCHED_MAX_LOOPS];
  for (int k = 0; k < nloop; k++) {
    pos[k] = sched_loop_pos(s, loops[k]);
    in[k] = sched_loop_at(s, loops[k])->tv;
  }
  for (int i = 1; i < nloop; i++) /* insertion sort of the positions */
    for (int j = i; j > 0 && pos[j - 1] > pos[j]; j--) {
      int t = pos[j];
      pos[j] = pos[j - 1];
      pos[j - 1] = t;
    }
  sched_block *b = sched_block_at(s, sched_loop_at(s, loops[0])->block);
  int last = b->loop[pos[nloop - 1]];
  for (int k = 0; k < nloop; k++) b->loop[pos[k]] = loops[k];
  /* what was computed in the innermost loop's body stays in the body of the chain */
  if (last != b->loop[pos[nloop - 1]]) {
    int tmp = -2;
    move_attached(s, last, tmp);
    move_attached(s, b->loop[pos[nloop - 1]], last);
    move_attached(s, tmp, b->loop[pos[nloop - 1]]);
  }
  trace_record(&s->trace, STOF_INST_REORDER, nloop, in, 0, NULL, 0, NULL, 0, NULL, -1, 0, 0);
}

stof_status stof_sched_reorder(stof_sched *s, int nloop, const int *loops) {
  stof_status st = reorder_check(s, "reorder", nloop, loops);
  if (st) return st;
  sched_need n = {0};
  trace_need(&n, nloop, 0, 0, 0, 0, 0);
  if ((st = sched_reserve(s, &n))) return st;
  reorder_apply(s, nloop, loops);
  return STOF_OK;
}

/* ---------------------------------------------------------------- tile */

stof_status stof_sched_tile(stof_sched *s, int x, int y, stof_factor fx, stof_factor fy,
                            int out[4]) {
  const char *what = "tile";
  stof_status st;
  if ((st = sched_check_loop(s, what, x)) || (st = sched_check_loop(s, what, y))) return st;
  const sched_loop *lx = sched_loop_at(s, x), *ly = sched_loop_at(s, y);
  if (x == y)
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE, "tile: x and y are the same loop %s",
                          sched_loop_name(s, x));
  if (lx->block != ly->block)
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE, "tile: loop %s is in block %s, loop %s in block %s",
                          sched_loop_name(s, x), sched_block_name(s, lx->block),
                          sched_loop_name(s, y), sched_block_name(s, ly->block));
  stof_factor fxs[2] = {stof_factor_const(STOF_INFER), fx}, fys[2] = {stof_factor_const(STOF_INFER), fy};
  if (fx.value == STOF_INFER && fx.knob < 0)
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE, "tile: the factor for loop %s cannot be inferred",
                          sched_loop_name(s, x));
  if (fy.value == STOF_INFER && fy.knob < 0)
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE, "tile: the factor for loop %s cannot be inferred",
                          sched_loop_name(s, y));
  int64_t vx[2], vy[2];
  if ((st = split_check(s, what, x, 2, fxs, 1, vx))) return st;
  if ((st = split_check(s, what, y, 2, fys, 1, vy))) return st;
  /* as the reorder that tile ends with: nothing computed at the loops from the outer of the
   * two down to (not including) the inner one */
  int posx = sched_loop_pos(s, x), posy = sched_loop_pos(s, y);
  const sched_block *b = sched_block_at(s, lx->block);
  for (int p = posx < posy ? posx : posy; p < (posx < posy ? posy : posx); p++) {
    int at = attached_at(s, b->loop[p]);
    if (at >= 0)
      return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                            "tile: block %s is computed at loop %s, among the loops tiled (tile before "
                            "compute_at)",
                            sched_block_name(s, at), sched_loop_name(s, b->loop[p]));
  }
  sched_need n = {0};
  split_need(s, x, 2, &n);
  split_need(s, y, 2, &n);
  trace_need(&n, 4, 0, 0, 0, 0, 0);
  if ((st = sched_reserve(s, &n))) return st;
  int px[2], py[2];
  split_apply(s, x, 2, fxs, vx, px);
  split_apply(s, y, 2, fys, vy, py);
  out[0] = px[0];
  out[1] = py[0];
  out[2] = px[1];
  out[3] = py[1];
  reorder_apply(s, 4, out);
  return STOF_OK;
}
