/*
 * Groups at code generation: the ops of a group become one kernel (one nest on the C
 * backend). What the primitives already fused stays as it is: a member computed at a loop of
 * another member is in its kernel. Each member that is still a root block of its own is
 * folded into the group's anchor (its reduction or GEMM-like op, else its last op), on a
 * clone, trying in turn: compute_inline (an injective producer into its consumers),
 * reverse_compute_inline (an injective consumer into its producer), then compute_at /
 * reverse_compute_at at the anchor's outermost loop. A member none of these can fold is a
 * ScheduleError naming the group and the block. The user's schedule and its trace are not
 * changed: the folding is part of building, not of the schedule.
 */
#include <string.h>

#include "schedule_int.h"

/* Is block b (live) a root: not computed at any loop? */
static int live_root(const stof_sched *s, int b) {
  const sched_block *x = sched_block_at(s, b);
  return x->state == SCHED_B_LIVE && x->attach < 0;
}

/* The member blocks of group g that are live roots (blocks computing one of its ops now:
 * after a cache_write, a new block computes the op too), into out; their number. */
static int member_roots(const stof_sched *s, const sched_group *g, int *out, int cap) {
  int n = 0;
  for (int i = 0; i < s->blocks.len && n < cap; i++) {
    if (!live_root(s, i)) continue;
    const stof_op *orig = sched_block_at(s, i)->orig;
    for (int k = 0; k < g->nop; k++)
      if (stof_graph_op(s->g, (int)sched_num(s, g->first)[k]) == orig) {
        out[n++] = i;
        break;
      }
  }
  return n;
}

/* Is block b's op (its orig) one of group g's? */
static int member(const stof_sched *s, const sched_group *g, int b) {
  const stof_op *orig = sched_block_at(s, b)->orig;
  for (int k = 0; k < g->nop; k++)
    if (stof_graph_op(s->g, (int)sched_num(s, g->first)[k]) == orig) return 1;
  return 0;
}

/* Are every block reading b's buffer, and every block b reads that some block writes, (want
 * readers: 1, producers: 0) members of g? */
static int within(const stof_sched *s, const sched_group *g, int b, int readers) {
  int bl[256], n = 0;
  if (readers) {
    n = sched_readers(s, sched_block_at(s, b)->out, b, bl, 256);
  } else {
    const stof_op *ts[64];
    int nt = sched_expr_loads(sched_block_at(s, b)->op->body, ts, 64);
    for (int k = 0; k < nt && k < 64; k++)
      if ((bl[n] = sched_writer(s, ts[k])) >= 0 && bl[n] != b) n++;
  }
  if (n > 256) return 0;
  for (int i = 0; i < n; i++)
    if (!member(s, g, bl[i])) return 0;
  return 1;
}

/* Folds member b into the kernel of anchor a; 0 on success (errors cleared either way). The
 * primitives take handles handed out by get_block / get_loops, so they are asked for first
 * (on the clone, whose trace is thrown away). */
static int fold(stof_sched *c, const sched_group *g, int b, int a) {
  stof_ctx *ctx = c->ctx;
  int hb, ha, loops[STOF_SCHED_MAX_LOOPS], nl = 0;
  if (stof_sched_get_block(c, sched_block_name(c, b), &hb) || stof_sched_get_block(c, sched_block_name(c, a), &ha) ||
      stof_sched_get_loops(c, ha, STOF_SCHED_MAX_LOOPS, loops, &nl)) {
    stof_ctx_clear_error(ctx);
    return 1;
  }
  b = hb;
  a = ha;
  /* inlining moves b's work into its consumers (producer): only into the group's */
  if (!sched_block_reduce(sched_block_at(c, b))) {
    if (within(c, g, b, 1) && stof_sched_compute_inline(c, b) == STOF_OK) return 0;
    stof_ctx_clear_error(ctx);
    if (within(c, g, b, 0) && stof_sched_reverse_compute_inline(c, b) == STOF_OK) return 0;
    stof_ctx_clear_error(ctx);
  }
  const sched_block *x = sched_block_at(c, a);
  if (x->nloop == 0 || sched_loop_at(c, x->loop[0])->iter != STOF_ITER_DATA_PAR) return 1;
  int outer = x->loop[0];
  if (stof_sched_compute_at(c, b, outer) == STOF_OK) return 0;
  stof_ctx_clear_error(ctx);
  if (stof_sched_reverse_compute_at(c, b, outer) == STOF_OK) return 0;
  stof_ctx_clear_error(ctx);
  return 1;
}

stof_status sched_fuse_groups(const stof_sched *s, stof_sched **out) {
  *out = NULL;
  int live = 0;
  for (int g = 0; g < s->groups.len; g++) live += sched_group_at(s, g)->alive;
  if (!live) return STOF_OK;
  stof_sched *c = NULL;
  stof_status st = stof_sched_clone(s, &c);
  if (st) return st;
  for (int g = 0; g < c->groups.len && !st; g++) {
    const sched_group *gr = sched_group_at(c, g);
    if (!gr->alive) continue;
    for (int round = 0; round < 64; round++) {
      int roots[64], n = member_roots(c, sched_group_at(c, g), roots, 64);
      if (n <= 1) break;
      int anchor = roots[n - 1];
      for (int k = 0; k < n; k++)
        if (sched_block_reduce(sched_block_at(c, roots[k]))) anchor = roots[k];
      int progress = 0, stuck = -1;
      for (int k = 0; k < n && !progress; k++) {
        if (roots[k] == anchor) continue;
        if (fold(c, sched_group_at(c, g), roots[k], anchor) == 0) progress = 1;
        else stuck = roots[k];
      }
      if (!progress) {
        st = stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                            "group %d: block %s stays a kernel apart from block %s: it can be neither "
                            "inlined nor computed at %s's outer loop (compute it at a loop of the group "
                            "yourself, or ungroup it)",
                            g, sched_block_name(c, stuck), sched_block_name(c, anchor), sched_block_name(c, anchor));
        break;
      }
    }
  }
  if (st) {
    stof_sched_free(c);
    return st;
  }
  *out = c;
  return STOF_OK;
}
