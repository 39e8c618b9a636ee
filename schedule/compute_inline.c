/*
 * compute_inline and reverse_compute_inline: a block disappears into its neighbours.
 *
 * compute_inline(B): B (injective: no reduction; not an output) is substituted into every
 * consumer: a load B[idx] becomes B's expression with B's axes replaced by idx.
 * reverse_compute_inline(E): E (injective) reads exactly one block D, at E's own index and
 * nothing else of it; D (injective, not an output, read by E alone) then stores E's
 * expression, with E's load of D replaced by D's expression, into E's buffer, at D's axes.
 *
 * Rewritten bodies are new compute ops (rewrite.c); the blocks keep their loops. Both work
 * on a clone that a trial lowering checks (sched_commit).
 */
#include <stdio.h>
#include <string.h>

#include "schedule_int.h"

/* "X" when a block is computed at a loop of block b, with the error for what. */
static stof_status check_no_children(stof_sched *s, const char *what, int b) {
  int child = sched_first_attached(s, b);
  if (child < 0) return STOF_OK;
  return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                        "%s: block %s is computed at a loop of block %s (move or inline it first)", what,
                        sched_block_name(s, child), sched_block_name(s, b));
}

static stof_status record(stof_sched *c, stof_inst_kind kind, int block) {
  sched_need n = {0};
  trace_need(&n, 1, 0, 0, 0, 0, 0);
  stof_status st = sched_reserve(c, &n);
  if (st) return st;
  trace_record(&c->trace, kind, 1, &sched_block_at(c, block)->tv, 0, NULL, 0, NULL, 0, NULL, -1, 0, 0);
  return STOF_OK;
}

stof_status stof_sched_compute_inline(stof_sched *s, int block) {
  const char *what = "compute_inline";
  stof_status st = sched_check_block(s, what, block);
  if (st) return st;
  const sched_block *b = sched_block_at(s, block);
  const char *name = sched_block_name(s, block);
  if (sched_is_output(s, block))
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                          "compute_inline: block %s is an output (its buffer must be written)", name);
  if (sched_block_reduce(b))
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                          "compute_inline: block %s is a reduction (only injective blocks inline)", name);
  if ((st = check_no_children(s, what, block))) return st;
  int readers[256], nr = sched_readers(s, b->out, block, readers, 256);
  if (nr > 256) return stof_ctx_error(s->ctx, STOF_ERR_UNSUPPORTED, "compute_inline: block %s has too many consumers", name);
  stof_sched *c;
  if ((st = sched_try(s, &c))) return st;
  const sched_block *cb = sched_block_at(c, block);
  sched_load_rule rule = {SCHED_LOADS_INLINE, cb->out, NULL, cb->op};
  for (int i = 0; i < nr && !st; i++) {
    sched_block *r = sched_block_at(c, readers[i]);
    const stof_op *op;
    st = sched_rebuild(c, sched_block_name(c, readers[i]), r->op, r->op->axis, r->op->body, r->op->dtype,
                       &rule, &op);
    if (!st) sched_block_at(c, readers[i])->op = op;
  }
  if (!st) {
    sched_block *w = sched_block_at(c, block);
    w->state = SCHED_B_INLINED;
    w->attach = -1;
    st = record(c, STOF_INST_COMPUTE_INLINE, block);
  }
  if (st) {
    stof_sched_free(c);
    return st;
  }
  return sched_commit(s, c, what);
}

/* Do all loads of t in e index it by exactly the axes axis[0..ndim)? */
static int own_index(const stof_expr *e, const stof_op *t, int ndim, const stof_var *const *axis) {
  if (!e) return 1;
  switch (e->kind) {
  case STOF_EXPR_INT:
  case STOF_EXPR_FLOAT:
  case STOF_EXPR_VAR: return 1;
  case STOF_EXPR_LOAD:
    for (int d = 0; d < e->u.load.nidx; d++)
      if (!own_index(e->u.load.idx[d], t, ndim, axis)) return 0;
    if (e->u.load.tensor != t) return 1;
    if (e->u.load.nidx != ndim) return 0;
    for (int d = 0; d < ndim; d++) {
      const stof_expr *ix = e->u.load.idx[d];
      if (ix->kind != STOF_EXPR_VAR || ix->u.var != axis[d] || t->shape[d] != axis[d]->extent) return 0;
    }
    return 1;
  case STOF_EXPR_REDUCE: return own_index(e->u.reduce.src, t, ndim, axis);
  default:
    return own_index(e->u.op.a, t, ndim, axis) && own_index(e->u.op.b, t, ndim, axis) &&
           own_index(e->u.op.c, t, ndim, axis);
  }
}

stof_status stof_sched_reverse_compute_inline(stof_sched *s, int block) {
  const char *what = "reverse_compute_inline";
  stof_status st = sched_check_block(s, what, block);
  if (st) return st;
  const sched_block *e = sched_block_at(s, block);
  const char *name = sched_block_name(s, block);
  if (sched_block_reduce(e))
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                          "reverse_compute_inline: block %s is a reduction (only injective blocks inline)",
                          name);
  if ((st = check_no_children(s, what, block))) return st;
  const stof_op *ts[64];
  int nt = sched_expr_loads(e->op->body, ts, 64), np = 0, d = -1;
  char list[256] = "";
  for (int k = 0; k < nt && k < 64; k++) {
    int w = sched_writer(s, ts[k]);
    if (w < 0) continue;
    size_t len = strlen(list);
    snprintf(list + len, sizeof list - len, "%s%s", np ? ", " : "", sched_block_name(s, w));
    np++;
    d = w;
  }
  if (np != 1)
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                          "reverse_compute_inline: block %s reads %d blocks%s%s%s; it must read exactly one",
                          name, np, np ? " (" : "", list, np ? ")" : "");
  const sched_block *p = sched_block_at(s, d);
  const char *pname = sched_block_name(s, d);
  const stof_op *t = p->out;
  if (!own_index(e->op->body, t, e->op->ndim, e->op->axis) || t->ndim != e->op->ndim)
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                          "reverse_compute_inline: block %s reads %s other than at its own index (each "
                          "load must be %s[%s%s])",
                          name, t->name, t->name, e->op->ndim ? e->op->axis[0]->name : "",
                          e->op->ndim > 1 ? ", ..." : "");
  if (sched_block_reduce(p))
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                          "reverse_compute_inline: producer %s of block %s is a reduction (cache_write "
                          "it, then inline into the copy)",
                          pname, name);
  if (sched_is_output(s, d))
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                          "reverse_compute_inline: producer %s of block %s is an output (its values "
                          "are needed)",
                          pname, name);
  int others[2], no = sched_readers(s, t, block, others, 2);
  for (int i = 0; i < no && i < 2; i++)
    if (others[i] != d)
      return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                            "reverse_compute_inline: producer %s of block %s is also read by %s", pname,
                            name, sched_block_name(s, others[i]));
  if ((st = check_no_children(s, what, d))) return st;
  if (p->attach >= 0)
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                          "reverse_compute_inline: producer %s of block %s is computed at loop %s "
                          "(inline before compute_at)",
                          pname, name, sched_loop_name(s, p->attach));
  for (int k = 0; k < p->op->ndim; k++)
    if (p->op->shape[k] != e->op->shape[k])
      return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                            "reverse_compute_inline: producer %s of block %s iterates another shape", pname,
                            name);
  stof_sched *c;
  if ((st = sched_try(s, &c))) return st;
  const sched_block *ce = sched_block_at(c, block), *cp = sched_block_at(c, d);
  sched_load_rule rule = {SCHED_LOADS_INLINE, cp->out, NULL, cp->op};
  const stof_op *op;
  st = sched_rebuild(c, sched_block_name(c, d), cp->op, ce->op->axis, ce->op->body, ce->op->dtype, &rule, &op);
  if (!st) {
    sched_block *wp = sched_block_at(c, d), *we = sched_block_at(c, block);
    wp->op = op;
    wp->out = we->out;
    wp->scope = we->scope;
    we->state = SCHED_B_REV_INLINED;
    we->attach = -1;
    st = record(c, STOF_INST_REVERSE_COMPUTE_INLINE, block);
  }
  if (st) {
    stof_sched_free(c);
    return st;
  }
  return sched_commit(s, c, what);
}
