/*
 * Lowering: each block's loops, in their current order, become a loop nest of the loop IR
 * (schedule_int.h), and the loop nest printer (the golden-test text).
 *
 * For a block with leaf loops L0..Ln-1 (outermost first):
 *  - every axis of the op (compute axes, then reduce axes) is let-bound to its value
 *    through the leaves: a split loop is the sum of part * stride over its parts, a fused
 *    source is fused / stride % extent; a let goes right inside the innermost loop it
 *    reads, so it is computed once per iteration of that loop;
 *  - every non-divisible split (its parts cover more than its extent) gets a guard
 *    "value < extent", placed as high as the lets it reads (after them);
 *  - a plain compute stores its body at the innermost level;
 *  - a reduction is decomposed at p, the position of its outermost reduce loop: the loops
 *    before p are shared; inside them an init nest (the data-parallel loops after p)
 *    stores the combiner's identity, then the update nest (all loops after p) combines.
 * Bounds: every block writes its whole output, and intermediates are full-size buffers.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "schedule_int.h"

/* ---------------------------------------------------------------- building */

static int new_stmt(sched_lir *l, int kind, int block) {
  lir_stmt st;
  memset(&st, 0, sizeof st);
  st.kind = kind;
  st.block = block;
  st.loop = st.axis = st.expr = -1;
  st.first = st.last = st.next = -1;
  return sched_vec_push(l->ctx, &l->stmts, &st, 1);
}

static void append(sched_lir *l, int parent, int child) {
  lir_stmt *p = lir_stmt_at(l, parent);
  if (p->last < 0)
    p->first = child;
  else
    lir_stmt_at(l, p->last)->next = child;
  p->last = child;
}

static int new_expr(sched_lir *l, int kind, int a, int b, int64_t c) {
  lir_expr e = {kind, a, b, c, -1, -1};
  return sched_vec_push(l->ctx, &l->exprs, &e, 1);
}

/* The value of loop through the current leaves; mask gets the positions it reads. Returns
 * -1 on NOMEM. */
static int value_of(sched_lir *l, int loop, uint64_t *mask) {
  const stof_sched *s = l->s;
  const sched_loop *lp = sched_loop_at(s, loop);
  if (lp->repl == SCHED_LEAF) {
    int e = new_expr(l, LIR_E_LOOP, -1, -1, 0);
    if (e < 0) return -1;
    lir_expr_at(l, e)->loop = loop;
    *mask |= (uint64_t)1 << sched_loop_pos(s, loop);
    return e;
  }
  if (lp->repl == SCHED_REPL_SPLIT) {
    int acc = -1;
    for (int k = 0; k < lp->repl_n; k++) {
      int part = lp->repl_first + k;
      int e = value_of(l, part, mask);
      if (e < 0) return -1;
      int64_t stride = sched_loop_at(s, part)->stride;
      if (stride != 1) {
        int c = new_expr(l, LIR_E_CONST, -1, -1, stride);
        if (c < 0 || (e = new_expr(l, LIR_E_MUL, e, c, 0)) < 0) return -1;
      }
      if (acc >= 0 && (e = new_expr(l, LIR_E_ADD, acc, e, 0)) < 0) return -1;
      acc = e;
    }
    return acc;
  }
  int64_t stride = lp->repl_stride, extent = lp->extent;
  int outer = lp->repl_outer;
  int e = value_of(l, lp->repl_first, mask);
  if (e < 0) return -1;
  if (stride != 1) {
    int c = new_expr(l, LIR_E_CONST, -1, -1, stride);
    if (c < 0 || (e = new_expr(l, LIR_E_DIV, e, c, 0)) < 0) return -1;
  }
  if (!outer) {
    int c = new_expr(l, LIR_E_CONST, -1, -1, extent);
    if (c < 0 || (e = new_expr(l, LIR_E_MOD, e, c, 0)) < 0) return -1;
  }
  return e;
}

/* A let or a guard, placed once the loops it reads are open. */
typedef struct lower_item {
  int is_guard;
  int axis;       /* let */
  int expr;       /* let: value; guard: condition */
  uint64_t mask;  /* leaf positions read */
  int reduce;     /* reads a reduce loop */
} lower_item;

typedef struct lower_ctx {
  sched_lir *l;
  int block;
  lower_item *items;
  int nitem;
} lower_ctx;

/* Emits, into *container, the items not done yet whose loops are all open; a guard
 * becomes an IF that the following statements nest in. */
static stof_status place_items(lower_ctx *c, int *container, uint64_t open, unsigned char *done,
                               int dp_only) {
  for (int pass = 0; pass < 2; pass++) /* lets first, then guards */
    for (int i = 0; i < c->nitem; i++) {
      lower_item *it = &c->items[i];
      if (done[i] || it->is_guard != pass || (it->mask & ~open) || (dp_only && it->reduce)) continue;
      done[i] = 1;
      int st = new_stmt(c->l, it->is_guard ? LIR_IF : LIR_LET, c->block);
      if (st < 0) return STOF_ERR_NOMEM;
      lir_stmt_at(c->l, st)->axis = it->axis;
      lir_stmt_at(c->l, st)->expr = it->expr;
      append(c->l, *container, st);
      if (it->is_guard) *container = st;
    }
  return STOF_OK;
}

/* Opens the loops at positions list[0..n) inside *container, placing items as they become
 * ready; *container ends as the innermost statement. */
static stof_status open_loops(lower_ctx *c, int *container, const int *list, int n, uint64_t *open,
                              unsigned char *done, int dp_only) {
  const sched_block *b = sched_block_at(c->l->s, c->block);
  stof_status st = place_items(c, container, *open, done, dp_only);
  for (int k = 0; k < n && !st; k++) {
    int f = new_stmt(c->l, LIR_FOR, c->block);
    if (f < 0) return STOF_ERR_NOMEM;
    lir_stmt_at(c->l, f)->loop = b->loop[list[k]];
    append(c->l, *container, f);
    *container = f;
    *open |= (uint64_t)1 << list[k];
    st = place_items(c, container, *open, done, dp_only);
  }
  return st;
}

static stof_status add_store(lower_ctx *c, int container, int kind) {
  int st = new_stmt(c->l, LIR_STORE, c->block);
  if (st < 0) return STOF_ERR_NOMEM;
  lir_stmt_at(c->l, st)->store = kind;
  append(c->l, container, st);
  return STOF_OK;
}

static stof_status lower_block(sched_lir *l, int block, int bstmt) {
  const stof_sched *s = l->s;
  const sched_block *b = sched_block_at(s, block);
  const stof_expr *red = sched_block_reduce(b);
  lower_item items[2 * STOF_SCHED_MAX_LOOPS + 8];
  int nitem = 0;
  unsigned char done[2 * STOF_SCHED_MAX_LOOPS + 8];
  for (int a = 0; a < b->naxis; a++) {
    lower_item *it = &items[nitem++];
    memset(it, 0, sizeof *it);
    it->axis = a;
    if ((it->expr = value_of(l, b->root + a, &it->mask)) < 0) return STOF_ERR_NOMEM;
    it->reduce = sched_loop_at(s, b->root + a)->iter == STOF_ITER_REDUCE;
  }
  for (int id = 0; id < s->loops.len; id++) {
    const sched_loop *lp = sched_loop_at(s, id);
    if (lp->block != block || lp->repl != SCHED_REPL_SPLIT) continue;
    int64_t cover = 1;
    for (int k = 0; k < lp->repl_n; k++) cover *= sched_loop_at(s, lp->repl_first + k)->extent;
    if (cover <= lp->extent) continue;
    if (nitem >= (int)(sizeof items / sizeof *items))
      return stof_ctx_error(l->ctx, STOF_ERR_UNSUPPORTED, "lower: block %s has too many guards",
                            b->op->name);
    lower_item *it = &items[nitem++];
    memset(it, 0, sizeof *it);
    it->is_guard = 1;
    it->axis = -1;
    int v;
    if (lp->derive == STOF_DERIVE_ROOT) {
      v = value_of(l, id, &it->mask); /* for the mask; the condition reads the let */
      if (v < 0 || (v = new_expr(l, LIR_E_AXIS, -1, -1, 0)) < 0) return STOF_ERR_NOMEM;
      lir_expr_at(l, v)->axis = lp->axis;
    } else if ((v = value_of(l, id, &it->mask)) < 0) {
      return STOF_ERR_NOMEM;
    }
    int c = new_expr(l, LIR_E_CONST, -1, -1, lp->extent);
    if (c < 0 || (it->expr = new_expr(l, LIR_E_LT, v, c, 0)) < 0) return STOF_ERR_NOMEM;
    it->reduce = lp->iter == STOF_ITER_REDUCE;
  }
  lower_ctx c = {l, block, items, nitem};
  memset(done, 0, sizeof done);
  int n = b->nloop, p = n;
  if (red)
    for (int k = n - 1; k >= 0; k--)
      if (sched_loop_at(s, b->loop[k])->iter == STOF_ITER_REDUCE) p = k;
  int list[STOF_SCHED_MAX_LOOPS];
  for (int k = 0; k < p; k++) list[k] = k;
  int container = bstmt;
  uint64_t open = 0;
  stof_status st = open_loops(&c, &container, list, p, &open, done, 0);
  if (st) return st;
  if (!red) return add_store(&c, container, LIR_STORE_PLAIN);
  /* init nest: the data-parallel loops after p */
  unsigned char done2[sizeof done];
  memcpy(done2, done, sizeof done);
  int m = 0, inner = container;
  uint64_t open2 = open;
  for (int k = p; k < n; k++)
    if (sched_loop_at(s, b->loop[k])->iter == STOF_ITER_DATA_PAR) list[m++] = k;
  if ((st = open_loops(&c, &inner, list, m, &open2, done2, 1))) return st;
  if ((st = add_store(&c, inner, LIR_STORE_INIT))) return st;
  /* update nest: every loop after p */
  m = 0;
  for (int k = p; k < n; k++) list[m++] = k;
  inner = container;
  if ((st = open_loops(&c, &inner, list, m, &open, done, 0))) return st;
  return add_store(&c, inner, LIR_STORE_UPDATE);
}

stof_status sched_lower(const stof_sched *s, sched_lir *out) {
  memset(out, 0, sizeof *out);
  out->s = s;
  out->ctx = s->ctx;
  out->first = -1;
  sched_vec_init(&out->stmts, sizeof(lir_stmt));
  sched_vec_init(&out->exprs, sizeof(lir_expr));
  int prev = -1;
  for (int b = 0; b < s->blocks.len; b++) {
    int bs = new_stmt(out, LIR_BLOCK, b);
    if (bs < 0) {
      sched_lir_free(out);
      return STOF_ERR_NOMEM;
    }
    if (prev < 0)
      out->first = bs;
    else
      lir_stmt_at(out, prev)->next = bs;
    prev = bs;
    stof_status st = lower_block(out, b, bs);
    if (st) {
      sched_lir_free(out);
      return st;
    }
  }
  return STOF_OK;
}

void sched_lir_free(sched_lir *l) {
  sched_vec_free(l->ctx, &l->stmts);
  sched_vec_free(l->ctx, &l->exprs);
}

/* ---------------------------------------------------------------- printing */

static int expr_prec(int kind) {
  switch (kind) {
  case LIR_E_LT: return 1;
  case LIR_E_ADD: return 2;
  case LIR_E_MUL:
  case LIR_E_DIV:
  case LIR_E_MOD: return 3;
  default: return 4;
  }
}

static void print_iexpr(stof_buf *buf, const sched_lir *l, const sched_block *b, int e, int min_prec) {
  const lir_expr *x = lir_expr_at(l, e);
  int prec = expr_prec(x->kind);
  if (prec < min_prec) stof_buf_puts(buf, "(");
  switch (x->kind) {
  case LIR_E_CONST: stof_buf_printf(buf, "%lld", (long long)x->c); break;
  case LIR_E_LOOP: stof_buf_puts(buf, sched_loop_name(l->s, x->loop)); break;
  case LIR_E_AXIS: stof_buf_puts(buf, sched_block_axis(b, x->axis)->name); break;
  default: {
    static const char *const ops[] = {[LIR_E_ADD] = " + ", [LIR_E_MUL] = " * ", [LIR_E_DIV] = " / ",
                                      [LIR_E_MOD] = " % ", [LIR_E_LT] = " < "};
    print_iexpr(buf, l, b, x->a, prec);
    stof_buf_puts(buf, ops[x->kind]);
    print_iexpr(buf, l, b, x->b, prec + 1); /* left-associative */
  }
  }
  if (prec < min_prec) stof_buf_puts(buf, ")");
}

/* Is this let "axis = its own root loop" (nothing to print)? */
static int trivial_let(const sched_lir *l, const sched_block *b, const lir_stmt *st) {
  const lir_expr *x = lir_expr_at(l, st->expr);
  return x->kind == LIR_E_LOOP && x->loop == b->root + st->axis;
}

static void print_access(stof_buf *buf, const stof_op *op) {
  stof_buf_printf(buf, "%s[", op->name);
  for (int d = 0; d < op->ndim; d++) stof_buf_printf(buf, "%s%s", d ? ", " : "", op->axis[d]->name);
  stof_buf_puts(buf, "]");
}

/* The identity of a reduction as text. */
static const char *identity_text(stof_reduce_kind c, stof_dtype d) {
  int isf = stof_dtype_is_float(d), i64 = d == STOF_DTYPE_I64;
  if (c == STOF_REDUCE_SUM) return isf ? "0.0" : "0";
  if (c == STOF_REDUCE_MAX) return isf ? "-inf" : i64 ? "-9223372036854775808" : "-2147483648";
  return isf ? "inf" : i64 ? "9223372036854775807" : "2147483647";
}

/* Appends stof_expr_print's text of e; strip drops one pair of outer parentheses. */
static stof_status print_te(stof_buf *buf, stof_ctx *ctx, const stof_expr *e, int strip) {
  char *t = NULL;
  stof_status st = stof_expr_print(ctx, e, &t);
  if (st) return st;
  size_t n = strlen(t);
  int depth = 0, outer = strip && n >= 2 && t[0] == '(' && t[n - 1] == ')';
  for (size_t i = 0; outer && i + 1 < n; i++) {
    depth += t[i] == '(' ? 1 : t[i] == ')' ? -1 : 0;
    if (depth == 0) outer = 0; /* the first '(' closes before the end */
  }
  if (outer) {
    t[n - 1] = 0;
    stof_buf_puts(buf, t + 1);
  } else {
    stof_buf_puts(buf, t);
  }
  stof_ctx_dealloc(ctx, t, n + 1);
  return STOF_OK;
}

/* " [parallel, key=value]" */
static void print_loop_ann(stof_buf *buf, const stof_sched *s, int loop) {
  const sched_loop *lp = sched_loop_at(s, loop);
  int n = 0;
  if (lp->ann == STOF_ANN_THREAD)
    stof_buf_printf(buf, " [%s", stof_thread_tag_name(lp->thread)), n++;
  else if (lp->ann != STOF_ANN_NONE)
    stof_buf_printf(buf, " [%s", stof_ann_kind_name(lp->ann)), n++;
  for (int i = 0; i < s->annots.len; i++) {
    const sched_annot *a = sched_annot_at(s, i);
    if (a->is_block || a->id != loop) continue;
    stof_buf_printf(buf, "%s%s=%s", n++ ? ", " : " [", sched_str(s, a->key), sched_str(s, a->value));
  }
  if (n) stof_buf_puts(buf, "]");
}

static stof_status print_stmts(stof_buf *buf, const sched_lir *l, int first, int depth) {
  const stof_sched *s = l->s;
  for (int i = first; i >= 0; i = lir_stmt_at(l, i)->next) {
    const lir_stmt *st = lir_stmt_at(l, i);
    const sched_block *b = sched_block_at(s, st->block);
    const stof_op *op = b->op;
    switch (st->kind) {
    case LIR_FOR:
      sched_indent(buf, depth);
      stof_buf_printf(buf, "for %s in 0..%lld", sched_loop_name(s, st->loop),
                       (long long)sched_loop_at(s, st->loop)->extent);
      print_loop_ann(buf, s, st->loop);
      stof_buf_puts(buf, ":\n");
      break;
    case LIR_LET:
      if (trivial_let(l, b, st)) break;
      sched_indent(buf, depth);
      stof_buf_printf(buf, "let %s = ", sched_block_axis(b, st->axis)->name);
      print_iexpr(buf, l, b, st->expr, 0);
      stof_buf_puts(buf, "\n");
      break;
    case LIR_IF:
      sched_indent(buf, depth);
      stof_buf_puts(buf, "if ");
      print_iexpr(buf, l, b, st->expr, 0);
      stof_buf_puts(buf, ":\n");
      break;
    case LIR_STORE: {
      sched_indent(buf, depth);
      print_access(buf, op);
      stof_buf_puts(buf, " = ");
      const stof_expr *red = sched_block_reduce(b);
      stof_status rc = STOF_OK;
      if (st->store == LIR_STORE_PLAIN) {
        rc = print_te(buf, s->ctx, op->body, 1);
      } else if (st->store == LIR_STORE_INIT) {
        stof_buf_puts(buf, identity_text(red->u.reduce.combiner, op->dtype));
      } else if (red->u.reduce.combiner == STOF_REDUCE_SUM) {
        print_access(buf, op);
        stof_buf_puts(buf, " + ");
        rc = print_te(buf, s->ctx, red->u.reduce.src, 0);
      } else {
        stof_buf_printf(buf, "%s(", stof_reduce_kind_name(red->u.reduce.combiner));
        print_access(buf, op);
        stof_buf_puts(buf, ", ");
        rc = print_te(buf, s->ctx, red->u.reduce.src, 1);
        stof_buf_puts(buf, ")");
      }
      if (rc) return rc;
      stof_buf_puts(buf, "\n");
      break;
    }
    default: break;
    }
    int inner = depth + (st->kind == LIR_FOR || st->kind == LIR_IF);
    if (st->kind != LIR_BLOCK && st->first >= 0) {
      stof_status rc = print_stmts(buf, l, st->first, inner);
      if (rc) return rc;
    }
  }
  return STOF_OK;
}

stof_status stof_sched_print_loop_nest(const stof_sched *s, char **out) {
  *out = NULL;
  sched_lir l;
  stof_status st = sched_lower(s, &l);
  if (st) return st;
  stof_buf buf;
  stof_buf_init(&buf, s->ctx);
  for (int g = 0; g < s->groups.len; g++) {
    const sched_group *gr = sched_group_at(s, g);
    if (!gr->alive) continue;
    stof_buf_printf(&buf, "group %d:", g);
    for (int k = 0; k < gr->nop; k++)
      stof_buf_printf(&buf, "%s %s", k ? "," : "", stof_graph_op(s->g, (int)sched_num(s, gr->first)[k])->name);
    stof_buf_puts(&buf, "\n");
  }
  char shape[256];
  for (int b = 0; b < s->blocks.len; b++) {
    if (sched_is_output(s, b)) continue;
    const stof_op *op = sched_block_at(s, b)->op;
    size_t n = 0;
    shape[0] = 0;
    for (int d = 0; d < op->ndim && n < sizeof shape - 32; d++)
      n += (size_t)snprintf(shape + n, sizeof shape - n, "%s%lld", d ? ", " : "", (long long)op->shape[d]);
    stof_buf_printf(&buf, "alloc %s: %s[%s]\n", op->name, stof_dtype_name(op->dtype), shape);
  }
  for (int bs = l.first; bs >= 0 && !st; bs = lir_stmt_at(&l, bs)->next) {
    int b = lir_stmt_at(&l, bs)->block;
    int n = 0;
    for (int i = 0; i < s->annots.len; i++) {
      const sched_annot *a = sched_annot_at(s, i);
      if (!a->is_block || a->id != b) continue;
      if (!n++) stof_buf_printf(&buf, "# block %s:", sched_block_at(s, b)->op->name);
      stof_buf_printf(&buf, "%s %s=%s", n > 1 ? "," : "", sched_str(s, a->key), sched_str(s, a->value));
    }
    if (n) stof_buf_puts(&buf, "\n");
    st = print_stmts(&buf, &l, lir_stmt_at(&l, bs)->first, 0);
  }
  sched_lir_free(&l);
  if (st) {
    stof_buf_free(&buf);
    return st;
  }
  return stof_buf_finish(&buf, out);
}
