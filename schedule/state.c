/*
 * Schedule state: creation (one block per compute op, its root loops), deep clone, blocks
 * and loops (get_block, get_loops, loop_info), knobs and the sample_* primitives
 * (sample_categorical, sample_perfect_tile, sample_compute_location), groups (TVM's fusion rule), the
 * growable arrays the module shares, the queries the block primitives share (readers,
 * writers, attachment), and the clone-and-commit of the primitives that work on a clone.
 *
 * Invariants: see schedule_int.h. Every public function here that changes the schedule
 * validates first, reserves, then applies and records; ids never move.
 */
#include <stdio.h>
#include <string.h>

#include "schedule_int.h"

/* ---------------------------------------------------------------- kind names */

static const char *const iter_names[] = {
#define STOF_X(name, text) text,
    STOF_ITER_LIST(STOF_X)
#undef STOF_X
};
static const char *const derive_names[] = {
#define STOF_X(name, text) text,
    STOF_DERIVE_LIST(STOF_X)
#undef STOF_X
};
static const char *const ann_names[] = {
#define STOF_X(name, text) text,
    STOF_ANN_LIST(STOF_X)
#undef STOF_X
};
static const char *const thread_names[] = {
#define STOF_X(name, text) text,
    STOF_THREAD_LIST(STOF_X)
#undef STOF_X
};

static const char *const scope_names[] = {
#define STOF_X(name, text) text,
    SCHED_SCOPE_LIST(STOF_X)
#undef STOF_X
};

const char *sched_scope_name(int scope) {
  return scope >= 0 && scope < SCHED_SCOPE_COUNT ? scope_names[scope] : "?";
}

int sched_scope_parse(const char *name) {
  for (int i = 0; name && i < SCHED_SCOPE_COUNT; i++)
    if (strcmp(name, scope_names[i]) == 0) return i;
  return -1;
}

const char *stof_iter_kind_name(stof_iter_kind k) {
  return (unsigned)k < STOF_ITER_COUNT ? iter_names[k] : "?";
}
const char *stof_derive_kind_name(stof_derive_kind k) {
  return (unsigned)k < STOF_DERIVE_COUNT ? derive_names[k] : "?";
}
const char *stof_ann_kind_name(stof_ann_kind k) {
  return (unsigned)k < STOF_ANN_COUNT ? ann_names[k] : "?";
}
const char *stof_thread_tag_name(stof_thread_tag t) {
  return (unsigned)t < STOF_THREAD_COUNT ? thread_names[t] : "?";
}

/* ---------------------------------------------------------------- growable arrays */

void sched_vec_init(sched_vec *v, size_t elem) {
  v->data = NULL;
  v->len = v->cap = 0;
  v->elem = elem;
}

stof_status sched_vec_reserve(stof_ctx *ctx, sched_vec *v, int extra) {
  if (extra <= 0 || v->len + extra <= v->cap) return STOF_OK;
  if (extra > (1 << 28) - v->len)
    return stof_ctx_error(ctx, STOF_ERR_NOMEM, "schedule: array of %d elements too large", v->len);
  int ncap = v->cap ? v->cap : 8;
  while (ncap < v->len + extra) ncap *= 2;
  void *p = stof_ctx_realloc(ctx, v->data, v->elem * (size_t)v->cap, v->elem * (size_t)ncap);
  if (!p) return STOF_ERR_NOMEM;
  v->data = p;
  v->cap = ncap;
  return STOF_OK;
}

int sched_vec_push(stof_ctx *ctx, sched_vec *v, const void *src, int n) {
  if (sched_vec_reserve(ctx, v, n)) return -1;
  int at = v->len;
  if (n > 0) { /* (with n == 0 the data may be NULL: no address is formed) */
    char *dst = (char *)v->data + v->elem * (size_t)at;
    if (src)
      memcpy(dst, src, v->elem * (size_t)n);
    else
      memset(dst, 0, v->elem * (size_t)n);
  }
  v->len += n;
  return at;
}

stof_status sched_vec_copy(stof_ctx *ctx, sched_vec *dst, const sched_vec *src) {
  sched_vec_init(dst, src->elem);
  if (src->len == 0) return STOF_OK;
  stof_status st = sched_vec_reserve(ctx, dst, src->len);
  if (st) return st;
  memcpy(dst->data, src->data, src->elem * (size_t)src->len);
  dst->len = src->len;
  return STOF_OK;
}

void sched_vec_free(stof_ctx *ctx, sched_vec *v) {
  if (v->data) stof_ctx_dealloc(ctx, v->data, v->elem * (size_t)v->cap);
  v->data = NULL;
  v->len = v->cap = 0;
}

void sched_indent(stof_buf *b, int depth) {
  for (int i = 0; i < depth; i++) stof_buf_puts(b, "  ");
}

/* ---------------------------------------------------------------- helpers */

stof_status sched_reserve(stof_sched *s, const sched_need *n) {
  stof_ctx *c = s->ctx;
  stof_status st;
  if ((st = sched_vec_reserve(c, &s->loops, n->loops))) return st;
  if ((st = sched_vec_reserve(c, &s->knobs, n->knobs))) return st;
  if ((st = sched_vec_reserve(c, &s->groups, n->groups))) return st;
  if ((st = sched_vec_reserve(c, &s->annots, n->annots))) return st;
  if ((st = sched_vec_reserve(c, &s->nums, n->nums))) return st;
  if ((st = sched_vec_reserve(c, &s->chars, n->chars))) return st;
  if ((st = sched_vec_reserve(c, &s->trace.insts, n->insts))) return st;
  if ((st = sched_vec_reserve(c, &s->trace.ints, n->tints))) return st;
  if ((st = sched_vec_reserve(c, &s->trace.nums, n->tnums))) return st;
  if ((st = sched_vec_reserve(c, &s->trace.dbls, n->tdbls))) return st;
  if ((st = sched_vec_reserve(c, &s->trace.chars, n->tchars))) return st;
  return sched_vec_reserve(c, &s->trace.vkinds, n->tvalues);
}

int sched_add_str(stof_sched *s, const char *str) {
  return sched_vec_push(s->ctx, &s->chars, str, (int)strlen(str) + 1);
}

int sched_add_loop(stof_sched *s, const sched_loop *proto, const char *name) {
  int off = sched_add_str(s, name);
  if (off < 0) return -1;
  int id = sched_vec_push(s->ctx, &s->loops, proto, 1);
  if (id < 0) return -1;
  sched_loop_at(s, id)->name = off;
  return id;
}

const stof_expr *sched_block_reduce(const sched_block *b) {
  const stof_expr *body = b->op->body;
  return body && body->kind == STOF_EXPR_REDUCE ? body : NULL;
}

const stof_var *sched_block_axis(const sched_block *b, int a) {
  if (a < b->op->ndim) return b->op->axis[a];
  return sched_block_reduce(b)->u.reduce.axis[a - b->op->ndim];
}

int sched_loop_pos(const stof_sched *s, int loop) {
  const sched_loop *l = sched_loop_at(s, loop);
  const sched_block *b = sched_block_at(s, l->block);
  for (int i = 0; i < b->nloop; i++)
    if (b->loop[i] == loop) return i;
  return -1;
}

int sched_block_of_op(const stof_sched *s, const stof_op *op) {
  for (int i = 0; i < s->blocks.len; i++)
    if (sched_block_at(s, i)->orig == op) return i;
  return -1;
}

int sched_is_output_op(const stof_sched *s, const stof_op *op) {
  for (int i = 0; i < s->nout; i++)
    if (s->out[i] == op) return 1;
  return 0;
}

int sched_is_output(const stof_sched *s, int block) {
  return sched_is_output_op(s, sched_block_at(s, block)->out);
}

/* ---------------------------------------------------------------- blocks and buffers */

int sched_reads(const stof_sched *s, int b, const stof_op *t) {
  const stof_op *ops[64];
  int n = sched_expr_loads(sched_block_at(s, b)->op->body, ops, 64);
  for (int i = 0; i < n && i < 64; i++)
    if (ops[i] == t) return 1;
  return n > 64; /* too many to list: assume it does */
}

int sched_readers(const stof_sched *s, const stof_op *t, int except, int *out, int cap) {
  int n = 0;
  for (int b = 0; b < s->blocks.len; b++) {
    if (b == except || sched_block_at(s, b)->state != SCHED_B_LIVE || !sched_reads(s, b, t)) continue;
    if (n < cap) out[n] = b;
    n++;
  }
  return n;
}

int sched_writer(const stof_sched *s, const stof_op *t) {
  for (int b = 0; b < s->blocks.len; b++)
    if (sched_block_at(s, b)->state == SCHED_B_LIVE && sched_block_at(s, b)->out == t) return b;
  return -1;
}

int sched_first_attached(const stof_sched *s, int b) {
  for (int i = 0; i < s->blocks.len; i++) {
    const sched_block *x = sched_block_at(s, i);
    if (x->state == SCHED_B_LIVE && x->attach >= 0 && sched_loop_at(s, x->attach)->block == b) return i;
  }
  return -1;
}

int sched_under_loop(const stof_sched *s, int block, int loop) {
  int q = sched_loop_at(s, loop)->block, pos = sched_loop_pos(s, loop);
  for (int b = block, depth = 0; depth <= s->blocks.len; depth++) {
    if (b == q) return 1;
    const sched_block *x = sched_block_at(s, b);
    if (x->attach < 0) return 0;
    int owner = sched_loop_at(s, x->attach)->block;
    if (owner == q) return sched_loop_pos(s, x->attach) >= pos;
    b = owner;
  }
  return 0;
}

int sched_attached_under(const stof_sched *s, int block, int anc) {
  int b = block;
  for (int depth = 0; depth <= s->blocks.len; depth++) {
    const sched_block *x = sched_block_at(s, b);
    if (x->attach < 0) return 0;
    b = sched_loop_at(s, x->attach)->block;
    if (b == anc) return 1;
  }
  return 0;
}

const char *sched_unique_name(const stof_sched *s, const char *base, char *buf, size_t cap) {
  for (int k = 0;; k++) {
    if (k == 0)
      snprintf(buf, cap, "%s", base);
    else
      snprintf(buf, cap, "%s_%d", base, k);
    int used = 0;
    for (int b = 0; b < s->blocks.len && !used; b++) used = strcmp(sched_block_name(s, b), buf) == 0;
    if (!used) return buf;
  }
}

stof_status sched_try(stof_sched *s, stof_sched **c) { return stof_sched_clone(s, c); }

stof_status sched_commit(stof_sched *s, stof_sched *c, const char *what) {
  sched_lir l;
  stof_status st = sched_lower(c, 0, NULL, &l);
  if (!st) sched_lir_free(&l);
  if (st && st != STOF_ERR_NOMEM) {
    char msg[900];
    const char *m = stof_ctx_message(s->ctx);
    if (strncmp(m, "lower: ", 7) == 0) m += 7;
    snprintf(msg, sizeof msg, "%s", m);
    stof_ctx_error(s->ctx, st, "%s: %s", what, msg);
  }
  if (st) {
    stof_sched_free(c);
    return st;
  }
  stof_sched tmp = *s;
  *s = *c;
  *c = tmp;
  stof_sched_free(c);
  return STOF_OK;
}

/* "was inlined into its consumers" etc. for a block that is gone, else NULL. */
static const char *gone(const sched_block *b) {
  if (b->state == SCHED_B_INLINED) return "was inlined into its consumers (compute_inline)";
  if (b->state == SCHED_B_REV_INLINED) return "was inlined into its producer (reverse_compute_inline)";
  return NULL;
}

stof_status sched_check_loop(stof_sched *s, const char *what, int loop) {
  if (loop < 0 || loop >= s->loops.len)
    return stof_ctx_error(s->ctx, STOF_ERR_ARG, "%s: no loop %d in this schedule", what, loop);
  const sched_loop *l = sched_loop_at(s, loop);
  if (l->tv < 0)
    return stof_ctx_error(s->ctx, STOF_ERR_ARG,
                          "%s: loop %d (%s) was never handed out (get loops with get_loops)", what,
                          loop, sched_loop_name(s, loop));
  if (l->repl == SCHED_REPL_SPLIT)
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                          "%s: loop %s was split (use the loops the split returned)", what,
                          sched_loop_name(s, loop));
  if (l->repl == SCHED_REPL_FUSE)
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                          "%s: loop %s was fused into %s (use the fused loop)", what,
                          sched_loop_name(s, loop), sched_loop_name(s, l->repl_first));
  const char *g = gone(sched_block_at(s, l->block));
  if (g)
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE, "%s: loop %s belongs to block %s, which %s", what,
                          sched_loop_name(s, loop), sched_block_name(s, l->block), g);
  if (l->dead)
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                          "%s: loop %s of block %s was replaced when the block moved (compute_at; get "
                          "its loops again)",
                          what, sched_loop_name(s, loop), sched_block_name(s, l->block));
  return STOF_OK;
}

stof_status sched_check_block(stof_sched *s, const char *what, int block) {
  if (block < 0 || block >= s->blocks.len)
    return stof_ctx_error(s->ctx, STOF_ERR_ARG, "%s: no block %d in this schedule", what, block);
  if (sched_block_at(s, block)->tv < 0)
    return stof_ctx_error(s->ctx, STOF_ERR_ARG,
                          "%s: block %d (%s) was never handed out (get it with get_block)", what,
                          block, sched_block_name(s, block));
  const char *g = gone(sched_block_at(s, block));
  if (g) return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE, "%s: block %s %s", what, sched_block_name(s, block), g);
  return STOF_OK;
}

static stof_status check_knob_id(stof_sched *s, const char *what, int knob) {
  if (knob < 0 || knob >= s->knobs.len)
    return stof_ctx_error(s->ctx, STOF_ERR_ARG, "%s: no knob %d in this schedule", what, knob);
  return STOF_OK;
}

stof_status sched_factor_value(stof_sched *s, const char *what, stof_factor f, int64_t *v) {
  if (f.knob < 0) {
    *v = f.value;
    return STOF_OK;
  }
  stof_status st = check_knob_id(s, what, f.knob);
  if (st) return st;
  const sched_knob *k = sched_knob_at(s, f.knob);
  *v = sched_num(s, k->cand)[k->decision];
  return STOF_OK;
}

/* ---------------------------------------------------------------- creation */

static void sched_init_arrays(stof_sched *s) {
  sched_vec_init(&s->blocks, sizeof(sched_block));
  sched_vec_init(&s->loops, sizeof(sched_loop));
  sched_vec_init(&s->knobs, sizeof(sched_knob));
  sched_vec_init(&s->groups, sizeof(sched_group));
  sched_vec_init(&s->annots, sizeof(sched_annot));
  sched_vec_init(&s->nums, sizeof(int64_t));
  sched_vec_init(&s->chars, 1);
  trace_init(&s->trace, s->ctx);
}

void stof_sched_free(stof_sched *s) {
  if (!s) return;
  stof_ctx *c = s->ctx;
  sched_vec_free(c, &s->blocks);
  sched_vec_free(c, &s->loops);
  sched_vec_free(c, &s->knobs);
  sched_vec_free(c, &s->groups);
  sched_vec_free(c, &s->annots);
  sched_vec_free(c, &s->nums);
  sched_vec_free(c, &s->chars);
  trace_free_arrays(&s->trace);
  if (s->out) stof_ctx_dealloc(c, (void *)s->out, sizeof *s->out * (size_t)s->nout);
  if (s->ops) stof_ctx_dealloc(c, (void *)s->ops, sizeof *s->ops * (size_t)(s->nop ? s->nop : 1));
  stof_ctx_dealloc(c, s, sizeof *s);
}

/* The root loops and the block of compute op op. */
static stof_status add_block(stof_sched *s, const stof_op *op) {
  const stof_expr *red = op->body->kind == STOF_EXPR_REDUCE ? op->body : NULL;
  int naxis = op->ndim + (red ? red->u.reduce.naxis : 0);
  if (naxis > STOF_SCHED_MAX_LOOPS)
    return stof_ctx_error(s->ctx, STOF_ERR_UNSUPPORTED,
                          "schedule: compute %s has %d axes, at most %d are supported", op->name,
                          naxis, STOF_SCHED_MAX_LOOPS);
  sched_block b;
  memset(&b, 0, sizeof b);
  b.op = b.orig = b.out = op;
  return sched_add_block(s, &b, op->name) < 0 ? STOF_ERR_NOMEM : STOF_OK;
}

/* Root loops for axes [0, naxis) of block id: extents ext (or the axes'), names names. */
static stof_status add_root_loops(stof_sched *s, int id, const int64_t *ext, const char *const *names,
                                  int elide_units) {
  sched_block *b = sched_block_at(s, id);
  const stof_expr *red = sched_block_reduce(b);
  int naxis = b->op->ndim + (red ? red->u.reduce.naxis : 0);
  int root = s->loops.len;
  for (int a = 0; a < naxis; a++) {
    const stof_var *v = sched_block_axis(sched_block_at(s, id), a);
    sched_loop l;
    memset(&l, 0, sizeof l);
    l.block = id;
    l.extent = ext ? ext[a] : v->extent;
    l.iter = v->kind == STOF_VAR_REDUCE ? STOF_ITER_REDUCE : STOF_ITER_DATA_PAR;
    l.derive = STOF_DERIVE_ROOT;
    l.axis = a;
    l.source = -1;
    l.repl = SCHED_LEAF;
    l.ann = STOF_ANN_NONE;
    l.tv = -1;
    l.elide = elide_units && l.extent == 1;
    int lid = sched_add_loop(s, &l, names && names[a] ? names[a] : v->name ? v->name : "v");
    if (lid < 0) return STOF_ERR_NOMEM;
  }
  b = sched_block_at(s, id);
  b->naxis = naxis;
  b->root = root;
  b->nloop = naxis;
  for (int a = 0; a < naxis; a++) b->loop[a] = root + a;
  return STOF_OK;
}

int sched_add_block(stof_sched *s, const sched_block *proto, const char *name) {
  sched_block b = *proto;
  b.name = sched_add_str(s, name);
  if (b.name < 0) return -1;
  b.state = SCHED_B_LIVE;
  b.attach = -1;
  b.attach_rev = 0;
  b.rf_loop = -1;
  b.rf_pos = 0;
  b.tv = -1;
  b.nloop = b.naxis = 0;
  int id = sched_vec_push(s->ctx, &s->blocks, &b, 1);
  if (id < 0 || add_root_loops(s, id, NULL, NULL, 0)) return -1;
  return id;
}

stof_status sched_regen_loops(stof_sched *s, int block, const int64_t *ext, const char *const *names,
                              int elide_units) {
  for (int i = 0; i < s->loops.len; i++)
    if (sched_loop_at(s, i)->block == block) sched_loop_at(s, i)->dead = 1;
  return add_root_loops(s, block, ext, names, elide_units);
}

stof_status stof_sched_new(stof_graph *g, int nout, const stof_op *const *outputs,
                           stof_sched **out) {
  stof_ctx *ctx = stof_graph_ctx(g);
  *out = NULL;
  if (nout < 1 || !outputs) return stof_ctx_error(ctx, STOF_ERR_ARG, "schedule: no outputs given");
  for (int i = 0; i < nout; i++) {
    const stof_op *op = outputs[i];
    if (!op) return stof_ctx_error(ctx, STOF_ERR_ARG, "schedule: output %d is missing", i);
    if (op->kind == STOF_OP_EXTERN)
      return stof_ctx_error(ctx, STOF_ERR_UNSUPPORTED,
                            "schedule: output %s is an extern op: not supported yet", op->name);
    if (op->kind != STOF_OP_COMPUTE)
      return stof_ctx_error(ctx, STOF_ERR_ARG,
                            "schedule: output %s is a placeholder: there is nothing to compute",
                            op->name);
    for (int j = 0; j < i; j++)
      if (outputs[j] == op)
        return stof_ctx_error(ctx, STOF_ERR_ARG, "schedule: output %s is given twice", op->name);
  }
  const stof_op **ops = NULL;
  int nops = 0;
  stof_status st = stof_graph_collect(g, nout, outputs, &ops, &nops);
  if (st) return st;
  for (int i = 0; i < nops; i++)
    if (ops[i]->kind == STOF_OP_EXTERN) {
      st = stof_ctx_error(ctx, STOF_ERR_UNSUPPORTED,
                          "schedule: extern op %s is not supported yet (externs and intrinsics "
                          "come in a later slice)",
                          ops[i]->name);
      stof_ctx_dealloc(ctx, ops, sizeof *ops * (size_t)(nops ? nops : 1));
      return st;
    }
  stof_sched *s = stof_ctx_alloc(ctx, sizeof *s);
  if (!s) {
    stof_ctx_dealloc(ctx, ops, sizeof *ops * (size_t)(nops ? nops : 1));
    return STOF_ERR_NOMEM;
  }
  s->ctx = ctx;
  s->g = g;
  s->ops = ops;
  s->nop = nops;
  sched_init_arrays(s);
  s->out = stof_ctx_alloc(ctx, sizeof *s->out * (size_t)nout);
  if (!s->out) {
    stof_sched_free(s);
    return STOF_ERR_NOMEM;
  }
  s->nout = nout;
  memcpy((void *)s->out, outputs, sizeof *s->out * (size_t)nout);
  for (int i = 0; i < nops && !st; i++)
    if (ops[i]->kind == STOF_OP_COMPUTE) st = add_block(s, ops[i]);
  if (st) {
    stof_sched_free(s);
    return st;
  }
  *out = s;
  return STOF_OK;
}

stof_status stof_sched_clone(const stof_sched *s, stof_sched **out) {
  stof_ctx *ctx = s->ctx;
  *out = NULL;
  stof_sched *c = stof_ctx_alloc(ctx, sizeof *c);
  if (!c) return STOF_ERR_NOMEM;
  c->ctx = ctx;
  c->g = s->g;
  sched_init_arrays(c);
  stof_status st = STOF_OK;
  c->out = stof_ctx_alloc(ctx, sizeof *c->out * (size_t)s->nout);
  c->ops = stof_ctx_alloc(ctx, sizeof *c->ops * (size_t)(s->nop ? s->nop : 1));
  if (c->out) c->nout = s->nout;
  if (c->ops) c->nop = s->nop;
  if (!c->out || !c->ops) st = STOF_ERR_NOMEM;
  if (!st) {
    memcpy((void *)c->out, s->out, sizeof *c->out * (size_t)s->nout);
    memcpy((void *)c->ops, s->ops, sizeof *c->ops * (size_t)s->nop);
  }
  if (!st) st = sched_vec_copy(ctx, &c->blocks, &s->blocks);
  if (!st) st = sched_vec_copy(ctx, &c->loops, &s->loops);
  if (!st) st = sched_vec_copy(ctx, &c->knobs, &s->knobs);
  if (!st) st = sched_vec_copy(ctx, &c->groups, &s->groups);
  if (!st) st = sched_vec_copy(ctx, &c->annots, &s->annots);
  if (!st) st = sched_vec_copy(ctx, &c->nums, &s->nums);
  if (!st) st = sched_vec_copy(ctx, &c->chars, &s->chars);
  if (!st) st = trace_copy(&c->trace, &s->trace);
  if (st) {
    stof_sched_free(c);
    return st;
  }
  *out = c;
  return STOF_OK;
}

stof_status stof_sched_fresh(const stof_sched *s, stof_sched **out) {
  return stof_sched_new(s->g, s->nout, s->out, out);
}

stof_ctx *stof_sched_ctx(const stof_sched *s) { return s->ctx; }
stof_graph *stof_sched_graph(const stof_sched *s) { return s->g; }
int stof_sched_nout(const stof_sched *s) { return s->nout; }
const stof_op *stof_sched_output(const stof_sched *s, int i) {
  return i >= 0 && i < s->nout ? s->out[i] : NULL;
}
int stof_sched_nblock(const stof_sched *s) { return s->blocks.len; }
const stof_op *stof_sched_block_op(const stof_sched *s, int b) {
  return b >= 0 && b < s->blocks.len ? sched_block_at(s, b)->orig : NULL;
}
const char *stof_sched_block_name(const stof_sched *s, int b) {
  return b >= 0 && b < s->blocks.len ? sched_block_name(s, b) : NULL;
}
int stof_sched_block_alive(const stof_sched *s, int b) {
  return b >= 0 && b < s->blocks.len && sched_block_at(s, b)->state == SCHED_B_LIVE;
}

/* ---------------------------------------------------------------- blocks and loops */

/* The block named name (no recording); errors name the primitive what. */
static stof_status find_block(const stof_sched *s, const char *what, const char *name, int *block) {
  if (!name) return stof_ctx_error(s->ctx, STOF_ERR_ARG, "%s: missing block name", what);
  int found = -1, count = 0;
  for (int i = 0; i < s->blocks.len; i++)
    if (strcmp(sched_block_name(s, i), name) == 0) {
      if (found < 0) found = i;
      count++;
    }
  if (count == 1) {
    const char *g = gone(sched_block_at(s, found));
    if (g) return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE, "%s: block %s %s", what, name, g);
    *block = found;
    return STOF_OK;
  }
  if (count > 1)
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                          "%s: %d blocks are named %s (give the ops distinct names)", what, count,
                          name);
  for (int i = 0; i < s->nop; i++)
    if (s->ops[i]->kind == STOF_OP_PLACEHOLDER && strcmp(s->ops[i]->name, name) == 0)
      return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE, "%s: %s is a placeholder (an input), not a block",
                            what, name);
  char list[256] = "";
  size_t n = 0;
  for (int i = 0; i < s->blocks.len && n < sizeof list - 8; i++) {
    int w = snprintf(list + n, sizeof list - n, "%s%s", i ? ", " : "", sched_block_name(s, i));
    if (w < 0) break;
    n += (size_t)w;
  }
  if (n >= sizeof list - 8) strcpy(list + sizeof list - 8, ", ...");
  return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE, "%s: no block named %s (blocks: %s)", what, name,
                        list);
}

stof_status stof_sched_get_block(stof_sched *s, const char *name, int *block) {
  int b;
  stof_status st = find_block(s, "get_block", name, &b);
  if (st) return st;
  sched_need n = {0};
  trace_need(&n, 0, 0, 0, 1, (int)strlen(name) + 1, 1);
  if ((st = sched_reserve(s, &n))) return st;
  int v = trace_record(&s->trace, STOF_INST_GET_BLOCK, 0, NULL, 0, NULL, 0, NULL, 1, &name, -1, 1,
                       SCHED_V_BLOCK);
  sched_block_at(s, b)->tv = v;
  *block = b;
  return STOF_OK;
}

stof_status stof_sched_get_loops(stof_sched *s, int block, int cap, int *loops, int *nloop) {
  stof_status st = sched_check_block(s, "get_loops", block);
  if (st) return st;
  sched_block *b = sched_block_at(s, block);
  if (cap < b->nloop)
    return stof_ctx_error(s->ctx, STOF_ERR_ARG, "get_loops: block %s has %d loops, room for %d",
                          sched_block_name(s, block), b->nloop, cap);
  sched_need n = {0};
  trace_need(&n, 1, 0, 0, 0, 0, b->nloop);
  if ((st = sched_reserve(s, &n))) return st;
  int v = trace_record(&s->trace, STOF_INST_GET_LOOPS, 1, &b->tv, 0, NULL, 0, NULL, 0, NULL, -1,
                       b->nloop, SCHED_V_LOOP);
  for (int i = 0; i < b->nloop; i++) {
    sched_loop_at(s, b->loop[i])->tv = v + i;
    loops[i] = b->loop[i];
  }
  *nloop = b->nloop;
  return STOF_OK;
}

/* a * b (b < 1 counts as 1), INT64_MAX past it */
static int64_t sat_mul(int64_t a, int64_t b) {
  int64_t r;
  return __builtin_mul_overflow(a, b > 0 ? b : 1, &r) ? INT64_MAX : r;
}

/* The product of block x's loops up to and including loop `upto` (-1: all of them); *bound
 * gets whether one of those is bound to a GPU index. */
static int64_t loops_product(const stof_sched *s, const sched_block *x, int upto, int *bound) {
  int64_t n = 1;
  for (int i = 0; i < x->nloop; i++) {
    const sched_loop *l = sched_loop_at(s, x->loop[i]);
    *bound |= l->ann == STOF_ANN_THREAD;
    n = sat_mul(n, l->extent);
    if (x->loop[i] == upto) break;
  }
  return n;
}

stof_status stof_sched_serial_nest(const stof_sched *s0, int64_t *iters, char *name, size_t cap) {
  *iters = 0;
  if (name && cap) name[0] = 0;
  stof_sched *fused = NULL;
  stof_status st = sched_fuse_groups(s0, &fused);
  if (st == STOF_ERR_NOMEM) return st;
  if (st) stof_ctx_clear_error(s0->ctx); /* the groups do not fold: the build says why */
  const stof_sched *s = fused ? fused : s0;
  size_t nb = (size_t)(s->blocks.len ? s->blocks.len : 1);
  int64_t *work = stof_ctx_alloc(s->ctx, sizeof *work * nb);
  unsigned char *bound = stof_ctx_alloc(s->ctx, nb);
  if (!work || !bound) {
    st = STOF_ERR_NOMEM;
    goto done;
  }
  memset(work, 0, sizeof *work * nb);
  memset(bound, 0, nb);
  for (int b = 0; b < s->blocks.len; b++) {
    const sched_block *x = sched_block_at(s, b);
    if (x->state != SCHED_B_LIVE) continue;
    int bnd = 0, root = b;
    int64_t n = loops_product(s, x, -1, &bnd);
    /* up the chain of blocks it is computed at (at most one step per block) */
    for (int step = 0; sched_block_at(s, root)->attach >= 0 && step < s->blocks.len; step++) {
      int at = sched_block_at(s, root)->attach, parent = sched_loop_at(s, at)->block;
      if (parent < 0 || parent >= s->blocks.len) break;
      n = sat_mul(n, loops_product(s, sched_block_at(s, parent), at, &bnd));
      root = parent;
    }
    if (__builtin_add_overflow(work[root], n, &work[root])) work[root] = INT64_MAX;
    bound[root] |= (unsigned char)bnd;
  }
  for (int b = 0; b < s->blocks.len; b++) {
    const sched_block *x = sched_block_at(s, b);
    if (x->state != SCHED_B_LIVE || x->attach >= 0 || bound[b] || work[b] <= *iters) continue;
    *iters = work[b];
    if (name && cap) snprintf(name, cap, "%s", sched_block_name(s, b));
  }
done:
  if (work) stof_ctx_dealloc(s->ctx, work, sizeof *work * nb);
  if (bound) stof_ctx_dealloc(s->ctx, bound, nb);
  if (fused) stof_sched_free(fused);
  return st;
}

stof_status stof_sched_loop_info(const stof_sched *s, int loop, stof_loop_info *out) {
  if (loop < 0 || loop >= s->loops.len)
    return stof_ctx_error(s->ctx, STOF_ERR_ARG, "loop_info: no loop %d in this schedule", loop);
  const sched_loop *l = sched_loop_at(s, loop);
  out->name = sched_str(s, l->name);
  out->block = l->block;
  out->extent = l->extent;
  out->iter = l->iter;
  out->derive = l->derive;
  out->source = l->derive == STOF_DERIVE_ROOT ? -1 : l->source;
  out->part = l->part;
  out->nparts = l->nparts;
  out->ann = l->ann;
  out->thread = l->thread;
  out->alive = l->repl == SCHED_LEAF && !l->dead && sched_block_at(s, l->block)->state == SCHED_B_LIVE;
  return STOF_OK;
}

/* ---------------------------------------------------------------- knobs */

static stof_status add_knob(stof_sched *s, stof_inst_kind kind, const char *name, int ncand,
                            const int64_t *cand, const double *probs, int decision, int *knob) {
  const char *what = kind == STOF_INST_KNOB ? "knob" : "sample_categorical";
  if (!name || !*name) return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE, "%s: the name is empty", what);
  for (int i = 0; i < s->knobs.len; i++)
    if (strcmp(sched_str(s, sched_knob_at(s, i)->name), name) == 0)
      return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE, "%s: a knob named %s exists already", what,
                            name);
  if (ncand < 1 || !cand)
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE, "%s %s: no candidates", what, name);
  if (ncand > 1024)
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE, "%s %s: %d candidates, at most 1024", what,
                          name, ncand);
  if (probs) {
    double sum = 0;
    for (int i = 0; i < ncand; i++) {
      if (!(probs[i] >= 0) || probs[i] > 1e300)
        return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                              "%s %s: probability %g of candidate %d is not a finite number >= 0",
                              what, name, probs[i], i);
      sum += probs[i];
    }
    if (!(sum > 0))
      return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE, "%s %s: the probabilities are all 0", what,
                            name);
    if (decision < 0) {
      double u = stof_ctx_rand_unit(s->ctx) * sum, acc = 0;
      decision = ncand - 1;
      for (int i = 0; i < ncand; i++) {
        acc += probs[i];
        if (u < acc && probs[i] > 0) {
          decision = i;
          break;
        }
      }
      while (decision > 0 && probs[decision] == 0) decision--;
    }
  }
  if (decision < 0 || decision >= ncand)
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                          "%s %s: decision %d out of range (%d candidates)", what, name, decision,
                          ncand);
  sched_need n = {0};
  n.knobs = 1;
  n.nums = ncand;
  n.chars = (int)strlen(name) + 1;
  trace_need(&n, 0, ncand, probs ? ncand : 0, 1, (int)strlen(name) + 1, 1);
  stof_status st = sched_reserve(s, &n);
  if (st) return st;
  sched_knob k;
  k.name = sched_add_str(s, name);
  k.cand = sched_vec_push(s->ctx, &s->nums, cand, ncand);
  k.ncand = ncand;
  k.decision = decision;
  k.tv = trace_record(&s->trace, kind, 0, NULL, ncand, cand, probs ? ncand : 0, probs, 1, &name,
                      decision, 1, SCHED_V_KNOB);
  *knob = sched_vec_push(s->ctx, &s->knobs, &k, 1);
  return STOF_OK;
}

stof_status stof_sched_knob(stof_sched *s, const char *name, int ncand, const int64_t *cand,
                            int decision, int *knob) {
  return add_knob(s, STOF_INST_KNOB, name, ncand, cand, NULL, decision, knob);
}

stof_status stof_sched_sample_categorical(stof_sched *s, const char *name, int ncand,
                                          const int64_t *cand, const double *probs,
                                          int decision, int *knob) {
  if (!probs)
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE, "sample_categorical %s: no probabilities",
                          name ? name : "?");
  return add_knob(s, STOF_INST_SAMPLE_CATEGORICAL, name, ncand, cand, probs, decision, knob);
}

/* ---------------------------------------------------------------- sampling */

int sched_divisors(int64_t e, int64_t *out) {
  int lo = 0, hi = 0;
  int64_t high[SCHED_MAX_DIVISORS];
  for (int64_t d = 1; d * d <= e && lo + hi < SCHED_MAX_DIVISORS - 1; d++) {
    if (e % d) continue;
    out[lo++] = d;
    if (d != e / d) high[hi++] = e / d;
  }
  for (int k = hi - 1; k >= 0; k--) out[lo++] = high[k];
  return lo;
}

/* A uniform integer in [0, n). */
static int rand_below(stof_ctx *ctx, int n) {
  int r = (int)(stof_ctx_rand_unit(ctx) * n);
  return r < 0 ? 0 : r >= n ? n - 1 : r;
}

static int knob_exists(const stof_sched *s, const char *name) {
  for (int i = 0; i < s->knobs.len; i++)
    if (strcmp(sched_str(s, sched_knob_at(s, i)->name), name) == 0) return 1;
  return 0;
}

/* "{4, 8}" / "i.tile0, i.tile1" for messages. */
static const char *list_text(char *buf, size_t cap, int n, const int64_t *v, const char *const *names) {
  size_t len = 0;
  buf[0] = 0;
  for (int k = 0; k < n && len + 24 < cap; k++) {
    int w = names ? snprintf(buf + len, cap - len, "%s%s", k ? ", " : "", names[k])
                  : snprintf(buf + len, cap - len, "%s%lld", k ? ", " : "", (long long)v[k]);
    if (w < 0) break;
    len += (size_t)w;
  }
  return buf;
}

#define TILE_NAME 200

stof_status sched_sample_perfect_tile(stof_sched *s, int loop, int n, int max_innermost,
                                      const int64_t *decision, const char *const *names,
                                      int *knobs) {
  const char *what = "sample_perfect_tile";
  stof_status st = sched_check_loop(s, what, loop);
  if (st) return st;
  const char *lname = sched_loop_name(s, loop);
  int64_t ext = sched_loop_at(s, loop)->extent;
  if (n < 1 || n > STOF_SCHED_MAX_LOOPS)
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE, "%s: %d factors for loop %s, must be 1..%d", what,
                          n, lname, STOF_SCHED_MAX_LOOPS);
  if (max_innermost < 0)
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                          "%s: max_innermost %d for loop %s must be >= 0 (0: no limit)", what,
                          max_innermost, lname);
  if (ext < 1 || ext > SCHED_MAX_TILE_EXTENT)
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE, "%s: loop %s of extent %lld is too long (at most %lld)",
                          what, lname, (long long)ext, (long long)SCHED_MAX_TILE_EXTENT);
  /* the knobs' names */
  char (*nb)[TILE_NAME] = stof_ctx_alloc(s->ctx, sizeof *nb * (size_t)n);
  int64_t *div = stof_ctx_alloc(s->ctx, sizeof *div * SCHED_MAX_DIVISORS);
  if (!nb || !div) {
    if (nb) stof_ctx_dealloc(s->ctx, nb, sizeof *nb * (size_t)n);
    if (div) stof_ctx_dealloc(s->ctx, div, sizeof *div * SCHED_MAX_DIVISORS);
    return STOF_ERR_NOMEM;
  }
  const char *np[STOF_SCHED_MAX_LOOPS];
  for (int m = 0; !names; m++) {
    int free_ = 1;
    for (int k = 0; k < n; k++) {
      if (m)
        snprintf(nb[k], TILE_NAME, "%s_%d.tile%d", lname, m, k);
      else
        snprintf(nb[k], TILE_NAME, "%s.tile%d", lname, k);
      np[k] = nb[k];
      free_ = free_ && !knob_exists(s, nb[k]);
    }
    if (free_) break;
  }
  for (int k = 0; names && k < n; k++) np[k] = names[k];
  for (int k = 0; k < n && !st; k++) {
    if (!np[k] || !*np[k])
      st = stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE, "%s: the name of knob %d is empty", what, k);
    else if (knob_exists(s, np[k]))
      st = stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE, "%s: a knob named %s exists already", what, np[k]);
    for (int j = 0; j < k && !st; j++)
      if (strcmp(np[j], np[k]) == 0)
        st = stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE, "%s: two knobs named %s", what, np[k]);
  }
  /* the factors */
  int64_t f[STOF_SCHED_MAX_LOOPS];
  char t1[400], t2[400];
  int ndiv = sched_divisors(ext, div);
  if (!st && decision) {
    int64_t prod = 1;
    int ok = 1;
    for (int k = 0; k < n; k++) {
      f[k] = decision[k];
      if (f[k] < 1 || ext % f[k] || prod > ext / f[k]) ok = 0;
      else prod *= f[k];
    }
    if (!ok || prod != ext)
      st = stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                          "%s: factors {%s} (knobs %s) do not multiply to the extent %lld of loop %s",
                          what, list_text(t1, sizeof t1, n, f, NULL), list_text(t2, sizeof t2, n, NULL, np),
                          (long long)ext, lname);
    else if (max_innermost > 0 && f[n - 1] > max_innermost)
      st = stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                          "%s: innermost factor %lld (knob %s) of loop %s exceeds max_innermost %d", what,
                          (long long)f[n - 1], np[n - 1], lname, max_innermost);
  } else if (!st) {
    if (n == 1 && max_innermost > 0 && ext > max_innermost)
      st = stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                          "%s: loop %s of extent %lld cannot be one factor of at most %d", what, lname,
                          (long long)ext, max_innermost);
    if (!st && n == 1) f[0] = ext;
    if (!st && n > 1) {
      int nin = 0;
      while (nin < ndiv && (max_innermost == 0 || div[nin] <= max_innermost)) nin++;
      f[n - 1] = div[rand_below(s->ctx, nin)];
      for (int k = 0; k < n - 1; k++) f[k] = 1;
      int64_t rest = ext / f[n - 1];
      for (int64_t p = 2; rest > 1; p++) {
        if (p * p > rest) p = rest;
        while (rest % p == 0) {
          f[rand_below(s->ctx, n - 1)] *= p;
          rest /= p;
        }
      }
    }
  }
  if (!st) {
    int bytes = 0;
    for (int k = 0; k < n; k++) bytes += (int)strlen(np[k]) + 1;
    sched_need need = {0};
    need.knobs = n;
    need.nums = n * ndiv;
    need.chars = bytes;
    trace_need(&need, 1, 3 + n, 0, n, bytes, n);
    st = sched_reserve(s, &need);
  }
  if (!st) {
    int64_t num[3 + STOF_SCHED_MAX_LOOPS] = {n, max_innermost, ext};
    memcpy(num + 3, f, sizeof *f * (size_t)n);
    int in = sched_loop_at(s, loop)->tv;
    int tv = trace_record(&s->trace, STOF_INST_SAMPLE_PERFECT_TILE, 1, &in, 3 + n, num, 0, NULL, n,
                          np, -1, n, SCHED_V_KNOB);
    for (int k = 0; k < n; k++) {
      sched_knob kn;
      kn.name = sched_add_str(s, np[k]);
      kn.cand = sched_vec_push(s->ctx, &s->nums, div, ndiv);
      kn.ncand = ndiv;
      kn.decision = 0;
      while (div[kn.decision] != f[k]) kn.decision++;
      kn.tv = tv + k;
      knobs[k] = sched_vec_push(s->ctx, &s->knobs, &kn, 1);
    }
  }
  stof_ctx_dealloc(s->ctx, nb, sizeof *nb * (size_t)n);
  stof_ctx_dealloc(s->ctx, div, sizeof *div * SCHED_MAX_DIVISORS);
  return st;
}

stof_status stof_sched_sample_perfect_tile(stof_sched *s, int loop, int n, int max_innermost,
                                           const int64_t *decision, const char *const *names,
                                           int *knobs) {
  return sched_sample_perfect_tile(s, loop, n, max_innermost, decision, names, knobs);
}

stof_status sched_sample_compute_location(stof_sched *s, int block, int decision,
                                          const char *name, int ncand, const int64_t *cand,
                                          int *knob) {
  const char *what = "sample_compute_location";
  stof_status st = sched_check_block(s, what, block);
  if (st) return st;
  const char *bname = sched_block_name(s, block);
  char nb[TILE_NAME];
  for (int m = 0; !name; m++) {
    if (m)
      snprintf(nb, sizeof nb, "%s_%d.location", bname, m);
    else
      snprintf(nb, sizeof nb, "%s.location", bname);
    if (!knob_exists(s, nb)) name = nb;
  }
  if (!*name) return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE, "%s: the name is empty", what);
  if (knob_exists(s, name))
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE, "%s: a knob named %s exists already", what, name);
  /* the candidates: the root, then every depth at which compute_at succeeds (on a clone) */
  int chain[512], nchain = sched_location_chain(s, block, chain, 512, NULL);
  int64_t found[513];
  int nfound = 0;
  found[nfound++] = -1;
  for (int d = 0; d < nchain && !sched_is_output(s, block); d++) {
    stof_sched *c;
    if ((st = stof_sched_clone(s, &c))) return st;
    sched_loop *l = sched_loop_at(c, chain[d]);
    if (l->tv < 0) l->tv = 0; /* the trial may use a loop never handed out */
    st = stof_sched_compute_at(c, block, chain[d]);
    stof_sched_free(c);
    if (st == STOF_ERR_NOMEM) return st;
    if (st) stof_ctx_clear_error(s->ctx);
    else found[nfound++] = d;
  }
  st = STOF_OK;
  char t1[400], t2[400];
  if (cand && (ncand != nfound || memcmp(cand, found, sizeof *cand * (size_t)nfound) != 0))
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                          "%s: block %s may be computed at depths {%s}, the trace says {%s}", what,
                          bname, list_text(t1, sizeof t1, nfound, found, NULL),
                          list_text(t2, sizeof t2, ncand, cand, NULL));
  if (decision >= nfound)
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE, "%s %s: decision %d out of range (%d candidates)",
                          what, name, decision, nfound);
  if (decision < 0) decision = rand_below(s->ctx, nfound);
  sched_need need = {0};
  need.knobs = 1;
  need.nums = nfound;
  need.chars = (int)strlen(name) + 1;
  trace_need(&need, 1, nfound, 0, 1, (int)strlen(name) + 1, 1);
  if ((st = sched_reserve(s, &need))) return st;
  sched_knob k;
  k.name = sched_add_str(s, name);
  k.cand = sched_vec_push(s->ctx, &s->nums, found, nfound);
  k.ncand = nfound;
  k.decision = decision;
  int in = sched_block_at(s, block)->tv;
  k.tv = trace_record(&s->trace, STOF_INST_SAMPLE_COMPUTE_LOCATION, 1, &in, nfound, found, 0, NULL, 1,
                      &name, decision, 1, SCHED_V_KNOB);
  *knob = sched_vec_push(s->ctx, &s->knobs, &k, 1);
  return STOF_OK;
}

stof_status stof_sched_sample_compute_location(stof_sched *s, int block, int decision,
                                               const char *name, int *knob) {
  return sched_sample_compute_location(s, block, decision, name, 0, NULL, knob);
}

int stof_sched_nknob(const stof_sched *s) { return s->knobs.len; }

stof_status stof_sched_knob_info(const stof_sched *s, int knob, const char **name, int *ncand,
                                 int *decision, int64_t *value) {
  if (knob < 0 || knob >= s->knobs.len)
    return stof_ctx_error(s->ctx, STOF_ERR_ARG, "knob_info: no knob %d in this schedule", knob);
  const sched_knob *k = sched_knob_at(s, knob);
  if (name) *name = sched_str(s, k->name);
  if (ncand) *ncand = k->ncand;
  if (decision) *decision = k->decision;
  if (value) *value = sched_num(s, k->cand)[k->decision];
  return STOF_OK;
}

stof_status stof_sched_knob_candidate(const stof_sched *s, int knob, int i, int64_t *value) {
  if (knob < 0 || knob >= s->knobs.len)
    return stof_ctx_error(s->ctx, STOF_ERR_ARG, "knob_candidate: no knob %d in this schedule", knob);
  const sched_knob *k = sched_knob_at(s, knob);
  if (i < 0 || i >= k->ncand)
    return stof_ctx_error(s->ctx, STOF_ERR_ARG, "knob %s: no candidate %d (%d candidates)",
                          sched_str(s, k->name), i, k->ncand);
  *value = sched_num(s, k->cand)[i];
  return STOF_OK;
}

stof_status stof_sched_find_knob(const stof_sched *s, const char *name, int *knob) {
  for (int i = 0; name && i < s->knobs.len; i++)
    if (strcmp(sched_str(s, sched_knob_at(s, i)->name), name) == 0) {
      *knob = i;
      return STOF_OK;
    }
  return stof_ctx_error(s->ctx, STOF_ERR_NOT_FOUND, "no knob named %s", name ? name : "(null)");
}

/* ---------------------------------------------------------------- groups */

/* "{B, C}" for messages. */
static const char *group_text(const stof_sched *s, int n, const int *blocks, char *buf, size_t cap) {
  size_t len = 0;
  buf[0] = 0;
  len += (size_t)snprintf(buf, cap, "{");
  for (int i = 0; i < n && len < cap - 8; i++) {
    int w = snprintf(buf + len, cap - len, "%s%s", i ? ", " : "", sched_block_at(s, blocks[i])->orig->name);
    if (w < 0) break;
    len += (size_t)w;
  }
  if (len >= cap - 8)
    strcpy(buf + cap - 8, ", ...}");
  else
    snprintf(buf + len, cap - len, "}");
  return buf;
}

/* Does op (transitively) read an op marked in mark? memo: 0 unknown, 1 no, 2 yes. */
static int reads_marked(const stof_op *op, const unsigned char *mark, unsigned char *memo) {
  if (memo[op->id]) return memo[op->id] == 2;
  int r = 0;
  for (int i = 0; i < op->ninput && !r; i++)
    r = mark[op->input[i]->id] || reads_marked(op->input[i], mark, memo);
  memo[op->id] = r ? 2 : 1;
  return r;
}

static stof_status check_group(stof_sched *s, int n, const int *blocks, unsigned char *in,
                               unsigned char *memo, unsigned char *need) {
  char gt[200];
  int nop = stof_graph_nop(s->g);
  const stof_op *master = NULL;
  for (int i = 0; i < n; i++) {
    const stof_op *op = sched_block_at(s, blocks[i])->orig;
    if (in[op->id])
      return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE, "group %s: op %s is given twice",
                            group_text(s, n, blocks, gt, sizeof gt), op->name);
    in[op->id] = 1;
    for (int g = 0; g < s->groups.len; g++) {
      const sched_group *gr = sched_group_at(s, g);
      for (int j = 0; gr->alive && j < gr->nop; j++)
        if (sched_num(s, gr->first)[j] == op->id)
          return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE, "group %s: op %s is already in group %d",
                                group_text(s, n, blocks, gt, sizeof gt), op->name, g);
    }
    if (op->pattern >= STOF_PATTERN_REDUCTION) {
      if (master)
        return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                              "group %s: %s (%s) and %s (%s) are both reductions or GEMM-like; a "
                              "group holds at most one",
                              group_text(s, n, blocks, gt, sizeof gt), master->name,
                              stof_pattern_name(master->pattern), op->name,
                              stof_pattern_name(op->pattern));
      master = op;
    }
  }
  /* connected: a walk along producer-consumer edges inside the group reaches everyone */
  unsigned char *seen = memo;
  memset(seen, 0, (size_t)nop);
  int first = sched_block_at(s, blocks[0])->orig->id, reached = 1;
  seen[first] = 1;
  for (int changed = 1; changed;) {
    changed = 0;
    for (int i = 0; i < n; i++) {
      const stof_op *op = sched_block_at(s, blocks[i])->orig;
      for (int j = 0; j < op->ninput; j++) {
        int a = op->id, b = op->input[j]->id;
        if (!in[b] || seen[a] == seen[b]) continue;
        seen[a] = seen[b] = 1;
        reached++;
        changed = 1;
      }
    }
  }
  if (reached < n) {
    const stof_op *lone = NULL;
    for (int i = 0; i < n && !lone; i++)
      if (!seen[sched_block_at(s, blocks[i])->orig->id]) lone = sched_block_at(s, blocks[i])->orig;
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                          "group %s: the ops are not connected (%s neither reads nor feeds "
                          "the others)",
                          group_text(s, n, blocks, gt, sizeof gt), lone->name);
  }
  /* convex: no op outside lies on a path between two members */
  memset(memo, 0, (size_t)nop);
  memset(need, 0, (size_t)nop);
  for (int i = s->nop - 1; i >= 0; i--) {
    const stof_op *op = s->ops[i];
    if (!in[op->id] && !need[op->id]) continue;
    for (int j = 0; j < op->ninput; j++) need[op->input[j]->id] = 1;
  }
  for (int i = 0; i < s->nop; i++) {
    const stof_op *op = s->ops[i];
    if (!in[op->id] && need[op->id] && reads_marked(op, in, memo))
      return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                            "group %s: %s, outside the group, lies on a path between two of its "
                            "ops (add it or split the group)",
                            group_text(s, n, blocks, gt, sizeof gt), op->name);
  }
  /* after a GEMM-like op only elementwise and broadcast ops */
  if (master && master->pattern == STOF_PATTERN_OUT_FUSABLE) {
    unsigned char *mm = need;
    memset(mm, 0, (size_t)nop);
    mm[master->id] = 1;
    memset(memo, 0, (size_t)nop);
    for (int i = 0; i < n; i++) {
      const stof_op *op = sched_block_at(s, blocks[i])->orig;
      if (op != master && op->pattern > STOF_PATTERN_BROADCAST && reads_marked(op, mm, memo))
        return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                              "group %s: %s (%s) follows the out-elementwise-fusable op %s; only "
                              "elementwise and broadcast ops may follow it",
                              group_text(s, n, blocks, gt, sizeof gt), op->name,
                              stof_pattern_name(op->pattern), master->name);
    }
  }
  return STOF_OK;
}

stof_status sched_group_blocks(stof_sched *s, int nblock, const int *blocks, int *group) {
  if (nblock < 1) return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE, "group: no ops given");
  int nop = stof_graph_nop(s->g);
  unsigned char *scratch = stof_ctx_alloc(s->ctx, (size_t)nop * 3);
  if (!scratch) return STOF_ERR_NOMEM;
  stof_status st = check_group(s, nblock, blocks, scratch, scratch + nop, scratch + 2 * nop);
  stof_ctx_dealloc(s->ctx, scratch, (size_t)nop * 3);
  if (st) return st;
  const char **names = stof_ctx_alloc(s->ctx, sizeof *names * (size_t)nblock);
  if (!names) return STOF_ERR_NOMEM;
  int bytes = 0;
  for (int i = 0; i < nblock; i++) {
    names[i] = sched_block_at(s, blocks[i])->orig->name;
    bytes += (int)strlen(names[i]) + 1;
  }
  sched_need n = {0};
  n.groups = 1;
  n.nums = nblock;
  trace_need(&n, 0, 0, 0, nblock, bytes, 1);
  st = sched_reserve(s, &n);
  if (!st) {
    sched_group g;
    g.first = s->nums.len;
    g.nop = nblock;
    g.alive = 1;
    for (int i = 0; i < nblock; i++) {
      int64_t id = sched_block_at(s, blocks[i])->orig->id;
      sched_vec_push(s->ctx, &s->nums, &id, 1);
    }
    g.tv = trace_record(&s->trace, STOF_INST_GROUP, 0, NULL, 0, NULL, 0, NULL, nblock, names, -1, 1,
                        SCHED_V_GROUP);
    *group = sched_vec_push(s->ctx, &s->groups, &g, 1);
  }
  stof_ctx_dealloc(s->ctx, (void *)names, sizeof *names * (size_t)nblock);
  return st;
}

stof_status stof_sched_group(stof_sched *s, int nop, const stof_op *const *ops, int *group) {
  if (nop < 1 || !ops) return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE, "group: no ops given");
  int *blocks = stof_ctx_alloc(s->ctx, sizeof *blocks * (size_t)nop);
  if (!blocks) return STOF_ERR_NOMEM;
  stof_status st = STOF_OK;
  for (int i = 0; i < nop && !st; i++) {
    if (!ops[i]) {
      st = stof_ctx_error(s->ctx, STOF_ERR_ARG, "group: op %d is missing", i);
      break;
    }
    blocks[i] = sched_block_of_op(s, ops[i]);
    if (blocks[i] >= 0) continue;
    if (ops[i]->kind == STOF_OP_PLACEHOLDER)
      st = stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE, "group: %s is a placeholder (an input), not a block",
                          ops[i]->name);
    else
      st = stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE, "group: op %s is not in this schedule",
                          ops[i]->name);
  }
  if (!st) st = sched_group_blocks(s, nop, blocks, group);
  stof_ctx_dealloc(s->ctx, blocks, sizeof *blocks * (size_t)nop);
  return st;
}

stof_status stof_sched_ungroup(stof_sched *s, int group) {
  if (group < 0 || group >= s->groups.len)
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE, "ungroup: no group %d", group);
  sched_group *g = sched_group_at(s, group);
  if (!g->alive)
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE, "ungroup: group %d was already removed", group);
  sched_need n = {0};
  trace_need(&n, 1, 0, 0, 0, 0, 0);
  stof_status st = sched_reserve(s, &n);
  if (st) return st;
  trace_record(&s->trace, STOF_INST_UNGROUP, 1, &g->tv, 0, NULL, 0, NULL, 0, NULL, -1, 0, 0);
  g->alive = 0;
  return STOF_OK;
}

int stof_sched_ngroup(const stof_sched *s) { return s->groups.len; }

stof_status stof_sched_group_ops(const stof_sched *s, int group, int cap, const stof_op **ops,
                                 int *nop, int *alive) {
  if (group < 0 || group >= s->groups.len)
    return stof_ctx_error(s->ctx, STOF_ERR_ARG, "group_ops: no group %d", group);
  const sched_group *g = sched_group_at(s, group);
  if (cap < g->nop)
    return stof_ctx_error(s->ctx, STOF_ERR_ARG, "group_ops: group %d has %d ops, room for %d", group,
                          g->nop, cap);
  for (int i = 0; i < g->nop; i++) ops[i] = stof_graph_op(s->g, (int)sched_num(s, g->first)[i]);
  *nop = g->nop;
  if (alive) *alive = g->alive;
  return STOF_OK;
}

stof_status sched_find_block(const stof_sched *s, const char *what, const char *name, int *block) {
  return find_block(s, what, name, block);
}

stof_status sched_find_block_any(const stof_sched *s, const char *what, const char *name, int *block) {
  int found = -1, count = 0;
  for (int i = 0; name && i < s->blocks.len; i++)
    if (strcmp(sched_block_name(s, i), name) == 0) {
      found = i;
      count++;
    }
  if (count == 1) {
    *block = found;
    return STOF_OK;
  }
  return find_block(s, what, name, block);
}
