/*
 * compute_at and reverse_compute_at: a block moves under a loop of another block.
 *
 * compute_at(B, l): producer B is computed at the start of the body of loop l (of a
 * consumer), for the region of its axes its consumers read per iteration of l; every
 * consumer of B must lie under l. reverse_compute_at(D, l): consumer D is computed at the
 * end of the body of loop l (of its producer), over the region the producer wrote in that
 * iteration; every producer of D must lie under l.
 *
 * Both give the block new loops (TensorIR's compute_at): one per axis, over the region's
 * extent (bound.c), named ax0, ax1, ... or the axis' own name when the region is the whole
 * axis; unit loops are elided in the nest. The region's start is worked out again at each
 * lowering; its extent is fixed here. The primitives work on a clone, which a trial
 * lowering checks before it replaces the schedule (schedule_int.h: sched_commit).
 *
 * compute_at_knob applies a location knob of sample_compute_location: a depth in the nest
 * of the block's first consumer (sched_location_chain), or -1 for the root.
 */
#include <stdio.h>
#include <string.h>

#include "schedule_int.h"

/* Checks shared by both: ids, distinct blocks, nothing attached to the block, no rfactor
 * store. */
static stof_status check_move(stof_sched *s, const char *what, int block, int loop) {
  stof_status st = sched_check_block(s, what, block);
  if (!st) st = sched_check_loop(s, what, loop);
  if (st) return st;
  const sched_block *b = sched_block_at(s, block);
  int q = sched_loop_at(s, loop)->block;
  const char *name = sched_block_name(s, block);
  if (q == block)
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE, "%s: loop %s belongs to block %s itself", what,
                          sched_loop_name(s, loop), name);
  int child = sched_first_attached(s, block);
  if (child >= 0)
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                          "%s: block %s is computed at a loop of block %s; move %s first", what,
                          sched_block_name(s, child), name, name);
  if (sched_attached_under(s, q, block))
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE, "%s: block %s lies under block %s", what,
                          sched_block_name(s, q), name);
  if (b->rf_loop >= 0)
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                          "%s: block %s stores through its rfactor loop %s; it cannot move", what, name,
                          sched_loop_name(s, b->rf_loop));
  return STOF_OK;
}

/* On the clone c: attaches block at loop and gives it loops over the region it needs. */
static stof_status move(stof_sched *c, int block, int loop, int rev, stof_inst_kind kind,
                        const char *what) {
  sched_block *b = sched_block_at(c, block);
  b->attach = loop;
  b->attach_rev = rev;
  sched_bounds bd;
  stof_status st = sched_bounds_init(&bd, c);
  if (st) return st;
  bd.check = 0;
  st = sched_bounds_infer(&bd);
  int64_t ext[STOF_SCHED_MAX_LOOPS];
  char names[STOF_MAX_DIMS][16];
  const char *np[STOF_SCHED_MAX_LOOPS] = {0};
  b = sched_block_at(c, block);
  for (int a = 0; a < b->naxis; a++) {
    const stof_var *v = sched_block_axis(b, a);
    ext[a] = v->extent;
    if (a < b->op->ndim && !st) {
      ext[a] = bd.need[block * STOF_MAX_DIMS + a];
      if (ext[a] != v->extent) {
        snprintf(names[a], sizeof names[a], "ax%d", a);
        np[a] = names[a];
      }
    }
  }
  sched_bounds_free(&bd);
  if (!st) st = sched_regen_loops(c, block, ext, np, 1);
  sched_need n = {0};
  trace_need(&n, 2, 0, 0, 0, 0, 0);
  if (!st) st = sched_reserve(c, &n);
  if (st) {
    if (st != STOF_ERR_NOMEM && strncmp(stof_ctx_message(c->ctx), "lower: ", 7) == 0) {
      char msg[900];
      snprintf(msg, sizeof msg, "%s", stof_ctx_message(c->ctx) + 7);
      stof_ctx_error(c->ctx, st, "%s: %s", what, msg);
    }
    return st;
  }
  int in[2] = {sched_block_at(c, block)->tv, sched_loop_at(c, loop)->tv};
  trace_record(&c->trace, kind, 2, in, 0, NULL, 0, NULL, 0, NULL, -1, 0, 0);
  return STOF_OK;
}

stof_status stof_sched_compute_at(stof_sched *s, int block, int loop) {
  const char *what = "compute_at";
  stof_status st = check_move(s, what, block, loop);
  if (st) return st;
  const sched_block *b = sched_block_at(s, block);
  const char *name = sched_block_name(s, block);
  int q = sched_loop_at(s, loop)->block;
  if (sched_is_output(s, block))
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                          "compute_at: block %s is an output (all of it is needed, not a region)", name);
  int readers[256], nr = sched_readers(s, b->out, block, readers, 256);
  if (nr == 0)
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE, "compute_at: block %s has no consumers", name);
  if (nr > 256) return stof_ctx_error(s->ctx, STOF_ERR_UNSUPPORTED, "compute_at: block %s has too many consumers", name);
  for (int i = 0; i < nr; i++)
    if (!sched_under_loop(s, readers[i], loop))
      return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                            "compute_at: loop %s of block %s does not enclose consumer %s of block %s",
                            sched_loop_name(s, loop), sched_block_name(s, q),
                            sched_block_name(s, readers[i]), name);
  stof_sched *c;
  if ((st = sched_try(s, &c))) return st;
  if ((st = move(c, block, loop, 0, STOF_INST_COMPUTE_AT, what))) {
    stof_sched_free(c);
    return st;
  }
  return sched_commit(s, c, what);
}

/* The root block whose nest holds block b. */
static int nest_root(const stof_sched *s, int b) {
  while (sched_block_at(s, b)->attach >= 0) b = sched_loop_at(s, sched_block_at(s, b)->attach)->block;
  return b;
}

stof_status stof_sched_reverse_compute_at(stof_sched *s, int block, int loop) {
  const char *what = "reverse_compute_at";
  stof_status st = check_move(s, what, block, loop);
  if (st) return st;
  const sched_block *b = sched_block_at(s, block);
  const char *name = sched_block_name(s, block);
  int q = sched_loop_at(s, loop)->block, p = -1, other = -1;
  const sched_block *qb = sched_block_at(s, q);
  const stof_op *ts[64];
  int nt = sched_expr_loads(b->op->body, ts, 64);
  for (int k = 0; k < nt && k < 64; k++) {
    int w = sched_writer(s, ts[k]);
    if (w < 0 || w == block) continue;
    /* a producer in another root nest is complete before the loop's nest runs (the lowering
     * orders root nests by their dependences): it need not lie under the loop */
    if (!sched_under_loop(s, w, loop) && nest_root(s, w) != nest_root(s, q)) {
      if (other < 0) other = w;
      continue;
    }
    if (!sched_under_loop(s, w, loop))
      return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                            "reverse_compute_at: loop %s of block %s does not enclose producer %s of "
                            "block %s",
                            sched_loop_name(s, loop), sched_block_name(s, q), sched_block_name(s, w), name);
    if (p < 0) p = w;
  }
  if (p < 0 && other >= 0)
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                          "reverse_compute_at: loop %s of block %s does not enclose producer %s of "
                          "block %s (nor any other producer of it)",
                          sched_loop_name(s, loop), sched_block_name(s, q), sched_block_name(s, other), name);
  if (p < 0)
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                          "reverse_compute_at: block %s reads no block (it goes under a loop of its "
                          "producer)",
                          name);
  const sched_block *pb = sched_block_at(s, p);
  if (sched_block_reduce(qb)) {
    int pos = sched_loop_pos(s, loop);
    for (int k = 0; k <= pos; k++)
      if (sched_loop_at(s, qb->loop[k])->iter == STOF_ITER_REDUCE)
        return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                              "reverse_compute_at: loop %s of block %s lies inside its reduce loop %s: "
                              "the values are not final there",
                              sched_loop_name(s, loop), sched_block_name(s, q),
                              sched_loop_name(s, qb->loop[k]));
  }
  int map[STOF_MAX_DIMS];
  sched_axis_map(s, block, pb->out, map);
  for (int a = 0; a < b->op->ndim; a++)
    if (map[a] == -2)
      return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                            "reverse_compute_at: block %s reads %s along several dimensions with its "
                            "axis %s",
                            name, pb->out->name, b->op->axis[a]->name);
  stof_sched *c;
  if ((st = sched_try(s, &c))) return st;
  if ((st = move(c, block, loop, 1, STOF_INST_REVERSE_COMPUTE_AT, what))) {
    stof_sched_free(c);
    return st;
  }
  return sched_commit(s, c, what);
}

/* ---------------------------------------------------------------- location knobs */

int sched_location_chain(const stof_sched *s, int block, int *out, int cap, int *consumer) {
  if (block < 0 || block >= s->blocks.len || sched_block_at(s, block)->state != SCHED_B_LIVE) return 0;
  int r[1];
  if (sched_readers(s, sched_block_at(s, block)->out, block, r, 1) == 0) return 0;
  if (consumer) *consumer = r[0];
  int n = sched_enclosing(s, r[0], out, cap);
  const sched_block *q = sched_block_at(s, r[0]);
  if (n < 0 || n + q->nloop > cap) return -1;
  for (int k = 0; k < q->nloop; k++) out[n++] = q->loop[k];
  return n;
}

stof_status stof_sched_compute_at_knob(stof_sched *s, int block, int knob) {
  const char *what = "compute_at";
  int64_t d;
  stof_status st = sched_check_block(s, what, block);
  if (!st) st = sched_factor_value(s, what, stof_factor_knob(knob), &d);
  if (st) return st;
  const char *kname = sched_str(s, sched_knob_at(s, knob)->name);
  int in[2] = {sched_block_at(s, block)->tv, sched_knob_at(s, knob)->tv};
  if (d == -1) { /* the root: the block stays where it is */
    sched_need n = {0};
    trace_need(&n, 2, 0, 0, 0, 0, 0);
    if ((st = sched_reserve(s, &n))) return st;
    trace_record(&s->trace, STOF_INST_COMPUTE_AT, 2, in, 0, NULL, 0, NULL, 0, NULL, -1, 0, 0);
    return STOF_OK;
  }
  int chain[512], consumer = -1, nchain = sched_location_chain(s, block, chain, 512, &consumer);
  if (d < 0 || d >= nchain)
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                          "compute_at: knob %s = %lld names no location of block %s (the nest of its "
                          "consumer %s has %d loops)",
                          kname, (long long)d, sched_block_name(s, block),
                          consumer >= 0 ? sched_block_name(s, consumer) : "(none)", nchain < 0 ? 0 : nchain);
  /* compute_at on a clone, its loop handed out there for the call; then the instruction
   * names the knob instead of the loop */
  stof_sched *c;
  if ((st = sched_try(s, &c))) return st;
  int loop = chain[d], tv = sched_loop_at(c, loop)->tv;
  if (tv < 0) sched_loop_at(c, loop)->tv = 0;
  st = stof_sched_compute_at(c, block, loop);
  if (st) {
    stof_sched_free(c);
    return st;
  }
  sched_loop_at(c, loop)->tv = tv;
  sched_inst *I = trace_inst_at(&c->trace, c->trace.insts.len - 1);
  trace_int(&c->trace, I->in)[1] = in[1];
  stof_sched tmp = *s;
  *s = *c;
  *c = tmp;
  stof_sched_free(c);
  return STOF_OK;
}
