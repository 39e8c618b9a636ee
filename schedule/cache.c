/*
 * cache_read and cache_write: new blocks that copy a buffer into another of a given scope.
 *
 * cache_read(B, i, scope): a block "<T>.<scope>" copies T, the i-th buffer B reads
 * (0-based, in first-use order of B's body), and B reads the copy. cache_write(B, scope):
 * B writes a new buffer "<B>.<scope>", and a block of that name copies it into B's old
 * buffer (TensorIR's semantics: B keeps its loops and its handle; the copy is returned).
 * The new blocks start at the root with loops v0, v1, ... over the whole tensor; moved
 * under a loop (compute_at, reverse_compute_at), their buffers hold a region only (bound
 * inference). On the C backend "shared" and "local" are arrays on the stack when small.
 *
 * The copies are new compute ops in the schedule's graph; both primitives work on a clone
 * that a trial lowering checks (sched_commit).
 */
#include <stdio.h>
#include <string.h>

#include "schedule_int.h"

/* "v0", "v1", ... axes over shape, and the copy op name[v] = t[v] (cast to dtype when >= 0). */
static stof_status copy_op(stof_sched *c, const char *name, const stof_op *t, int dtype, const stof_op **out) {
  static const char *const names[STOF_MAX_DIMS] = {"v0", "v1", "v2", "v3", "v4", "v5", "v6", "v7"};
  const stof_expr *axes[STOF_MAX_DIMS], *load;
  stof_status st = stof_te_compute_axes(c->g, t->ndim, t->shape, names, axes);
  if (!st) st = stof_te_load(c->g, t, t->ndim, axes, &load);
  if (!st) st = stof_te_compute(c->g, name, t->ndim, axes, load, dtype, out);
  return st;
}

static stof_status check_scope(stof_sched *s, const char *what, const char *scope, int *sc) {
  *sc = sched_scope_parse(scope);
  if (*sc < 0)
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                          "%s: unknown scope '%s' (expected global, shared, local or warp)", what,
                          scope ? scope : "(null)");
  return STOF_OK;
}

/* Records kind with block's value, nnum numbers and the scope; the new block gets the
 * output value. */
static stof_status record(stof_sched *c, stof_inst_kind kind, int block, int nnum, int64_t num,
                          const char *scope, int made) {
  sched_need n = {0};
  trace_need(&n, 1, nnum, 0, 1, (int)strlen(scope) + 1, 1);
  stof_status st = sched_reserve(c, &n);
  if (st) return st;
  sched_block_at(c, made)->tv = trace_record(&c->trace, kind, 1, &sched_block_at(c, block)->tv, nnum,
                                             &num, 0, NULL, 1, &scope, -1, 1, SCHED_V_BLOCK);
  return STOF_OK;
}

stof_status stof_sched_cache_read(stof_sched *s, int block, int input_index, const char *scope,
                                  int *cache) {
  const char *what = "cache_read";
  int sc;
  stof_status st = sched_check_block(s, what, block);
  if (!st) st = check_scope(s, what, scope, &sc);
  if (st) return st;
  const sched_block *b = sched_block_at(s, block);
  const stof_op *ts[64];
  int nt = sched_expr_loads(b->op->body, ts, 64);
  if (nt > 64) nt = 64;
  if (input_index < 0 || input_index >= nt) {
    char list[256] = "";
    for (int k = 0; k < nt; k++) {
      size_t len = strlen(list);
      snprintf(list + len, sizeof list - len, "%s%s", k ? ", " : "", ts[k]->name);
    }
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                          "cache_read: input index %d is out of range: block %s reads %d tensor%s%s%s%s",
                          input_index, sched_block_name(s, block), nt, nt == 1 ? "" : "s",
                          nt ? " (" : "", list, nt ? ")" : "");
  }
  const stof_op *t = ts[input_index];
  char base[300], name[320];
  snprintf(base, sizeof base, "%s.%s", t->name, scope);
  sched_unique_name(s, base, name, sizeof name);
  stof_sched *c;
  if ((st = sched_try(s, &c))) return st;
  const stof_op *copy, *op;
  int id = -1;
  st = copy_op(c, name, t, -1, &copy);
  if (!st) {
    const sched_block *cb = sched_block_at(c, block);
    sched_load_rule rule = {SCHED_LOADS_REDIRECT, t, copy, NULL};
    st = sched_rebuild(c, sched_block_name(c, block), cb->op, cb->op->axis, cb->op->body, cb->op->dtype,
                       &rule, &op);
  }
  if (!st) {
    sched_block_at(c, block)->op = op;
    sched_block proto;
    memset(&proto, 0, sizeof proto);
    proto.op = proto.orig = proto.out = copy;
    proto.scope = sc;
    id = sched_add_block(c, &proto, name);
    if (id < 0) st = STOF_ERR_NOMEM;
  }
  if (!st) st = record(c, STOF_INST_CACHE_READ, block, 1, input_index, scope, id);
  if (st) {
    stof_sched_free(c);
    return st;
  }
  if ((st = sched_commit(s, c, what))) return st;
  *cache = id;
  return STOF_OK;
}

stof_status stof_sched_cache_write(stof_sched *s, int block, const char *scope, int *cache) {
  const char *what = "cache_write";
  int sc;
  stof_status st = sched_check_block(s, what, block);
  if (!st) st = check_scope(s, what, scope, &sc);
  if (st) return st;
  const sched_block *b = sched_block_at(s, block);
  const char *bname = sched_block_name(s, block);
  if (b->rf_loop >= 0)
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                          "cache_write: block %s stores through its rfactor loop %s", bname,
                          sched_loop_name(s, b->rf_loop));
  if (b->attach >= 0)
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                          "cache_write: block %s is computed at loop %s (cache_write it before moving it)",
                          bname, sched_loop_name(s, b->attach));
  char base[300], name[320];
  snprintf(base, sizeof base, "%s.%s", bname, scope);
  sched_unique_name(s, base, name, sizeof name);
  stof_sched *c;
  if ((st = sched_try(s, &c))) return st;
  const stof_op *old = sched_block_at(c, block)->out, *buf, *copy;
  int id = -1;
  /* a warp accumulator of a float16 / bfloat16 sum is float32 (the tensor cores' and
   * CUDA's accumulators are): the block then sums float32 products of its factors and the
   * copy rounds once */
  const stof_op *op = sched_block_at(c, block)->op;
  int widen = sc == SCHED_SCOPE_WARP && (old->dtype == STOF_DTYPE_F16 || old->dtype == STOF_DTYPE_BF16) &&
              op->body->kind == STOF_EXPR_REDUCE && op->body->u.reduce.combiner == STOF_REDUCE_SUM;
  st = stof_te_placeholder(c->g, old->ndim, old->shape, widen ? STOF_DTYPE_F32 : old->dtype, name, &buf);
  if (!st) st = copy_op(c, name, buf, widen ? (int)old->dtype : -1, &copy);
  if (!st && widen) {
    const stof_op *wide;
    if (!(st = sched_rebuild_widened(c, sched_block_name(c, block), op, STOF_DTYPE_F32, &wide)))
      sched_block_at(c, block)->op = wide;
  }
  if (!st) {
    sched_block proto;
    memset(&proto, 0, sizeof proto);
    proto.op = proto.orig = copy;
    proto.out = old;
    proto.scope = sched_block_at(c, block)->scope;
    id = sched_add_block(c, &proto, name);
    if (id < 0) st = STOF_ERR_NOMEM;
  }
  if (!st) {
    sched_block *w = sched_block_at(c, block);
    w->out = buf;
    w->scope = sc;
    st = record(c, STOF_INST_CACHE_WRITE, block, 0, 0, scope, id);
  }
  if (st) {
    stof_sched_free(c);
    return st;
  }
  if ((st = sched_commit(s, c, what))) return st;
  *cache = id;
  return STOF_OK;
}
