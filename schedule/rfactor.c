/*
 * rfactor (TVM's): a reduce loop of a reduction becomes data-parallel in a partial
 * reduction, and a final reduction combines the partial results.
 *
 * rfactor(l, f) on block B, where l is a reduce loop of B: a new block "B.rf" takes over
 * B's op and loops (l included, now data-parallel) and reduces into a new buffer B.rf whose
 * shape is B's with l's valid bound (its extent, or fewer when l is the outer part of a split
 * that overshoots) inserted at position f; its store index f is l's value (l may be split
 * or fused later: the index follows). B keeps its handle and gets a new op and new loops:
 * B[i..] = combiner over r in 0..bound(l) of B.rf[i.. with r at f].
 * Works on a clone that a trial lowering checks (sched_commit).
 */
#include <stdio.h>
#include <string.h>

#include "schedule_int.h"

stof_status stof_sched_rfactor(stof_sched *s, int loop, int factor_axis, int *rf) {
  const char *what = "rfactor";
  stof_status st = sched_check_loop(s, what, loop);
  if (st) return st;
  const sched_loop *l = sched_loop_at(s, loop);
  int block = l->block;
  const sched_block *b = sched_block_at(s, block);
  const char *bname = sched_block_name(s, block), *lname = sched_loop_name(s, loop);
  if (l->iter != STOF_ITER_REDUCE)
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                          "rfactor: loop %s of block %s is data-parallel (rfactor takes a reduce loop)",
                          lname, bname);
  if (b->rf_loop >= 0)
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE, "rfactor: block %s is an rfactor block already", bname);
  if (b->attach >= 0)
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                          "rfactor: block %s is computed at loop %s (rfactor it before moving it)", bname,
                          sched_loop_name(s, b->attach));
  int child = sched_first_attached(s, block);
  if (child >= 0)
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                          "rfactor: block %s is computed at a loop of block %s (rfactor first)",
                          sched_block_name(s, child), bname);
  int ndim = b->op->ndim;
  if (factor_axis < 0 || factor_axis > ndim)
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                          "rfactor: factor_axis %d is out of range for block %s of rank %d (0..%d)",
                          factor_axis, bname, ndim, ndim);
  if (ndim + 1 > STOF_MAX_DIMS)
    return stof_ctx_error(s->ctx, STOF_ERR_UNSUPPORTED,
                          "rfactor: block %s has rank %d; its rfactor buffer would exceed %d dimensions",
                          bname, ndim, STOF_MAX_DIMS);
  char base[300], name[320];
  snprintf(base, sizeof base, "%s.rf", bname);
  sched_unique_name(s, base, name, sizeof name);

  stof_sched *c;
  if ((st = sched_try(s, &c))) return st;
  stof_graph *g = c->g;
  const sched_block *cb = sched_block_at(c, block);
  const stof_expr *red = sched_block_reduce(cb);
  /* the values the loop takes where its block does work: its valid bound (a split that
   * overshoots runs fewer outer iterations than its factor: a slot per factor would leave
   * some never written, and the final reduction would read them) */
  int64_t ext = sched_loop_valid_bound(c, loop), shape[STOF_MAX_DIMS];
  for (int d = 0, k = 0; d <= ndim; d++) shape[d] = d == factor_axis ? ext : cb->op->shape[k++];
  const stof_op *buf, *op = NULL;
  st = stof_te_placeholder(g, ndim + 1, shape, cb->op->dtype, name, &buf);
  /* B's new op: combiner over r of B.rf[axes with r at factor_axis] */
  const stof_expr *axes[STOF_MAX_DIMS], *idx[STOF_MAX_DIMS], *r = NULL, *load, *body;
  const char *names[STOF_MAX_DIMS] = {0};
  for (int d = 0; d < ndim; d++) names[d] = cb->op->axis[d]->name;
  if (!st) st = stof_te_compute_axes(g, ndim, cb->op->shape, names, axes);
  if (!st) st = stof_te_reduce_axis(g, ext, sched_loop_name(c, loop), &r);
  for (int d = 0, k = 0; !st && d <= ndim; d++) idx[d] = d == factor_axis ? r : axes[k++];
  if (!st) st = stof_te_load(g, buf, ndim + 1, idx, &load);
  if (!st) st = stof_te_reduce(g, red->u.reduce.combiner, load, 1, &r, &body);
  if (!st) st = stof_te_compute(g, bname, ndim, axes, body, (int)cb->op->dtype, &op);
  /* B.rf takes B's op and loops */
  int id = -1;
  if (!st) {
    sched_block rb = *sched_block_at(c, block);
    rb.orig = rb.op;
    rb.out = buf;
    rb.scope = SCHED_SCOPE_GLOBAL;
    rb.rf_loop = loop;
    rb.rf_pos = factor_axis;
    rb.tv = -1;
    rb.name = sched_add_str(c, name);
    id = rb.name < 0 ? -1 : sched_vec_push(c->ctx, &c->blocks, &rb, 1);
    if (id < 0) st = STOF_ERR_NOMEM;
  }
  if (!st) {
    for (int i = 0; i < c->loops.len; i++)
      if (sched_loop_at(c, i)->block == block) sched_loop_at(c, i)->block = id;
    sched_loop_at(c, loop)->iter = STOF_ITER_DATA_PAR;
    sched_block_at(c, block)->op = op;
    st = sched_regen_loops(c, block, NULL, NULL, 0);
  }
  sched_need n = {0};
  trace_need(&n, 1, 1, 0, 0, 0, 1);
  if (!st) st = sched_reserve(c, &n);
  if (!st) {
    int64_t fa = factor_axis;
    sched_block_at(c, id)->tv = trace_record(&c->trace, STOF_INST_RFACTOR, 1, &sched_loop_at(c, loop)->tv, 1,
                                             &fa, 0, NULL, 0, NULL, -1, 1, SCHED_V_BLOCK);
  }
  if (st) {
    stof_sched_free(c);
    return st;
  }
  if ((st = sched_commit(s, c, what))) return st;
  *rf = id;
  return STOF_OK;
}
