/*
 * Loop annotations: bind (thread tags), vectorize, unroll, parallel, and key/value pragmas
 * on loops or blocks (annotate).
 *
 * A loop carries at most one of bind / vectorize / unroll / parallel; pragmas are separate
 * and any number. A reduce loop may be vectorized (its loads become vector loads on CUDA;
 * the accumulation stays in order) but not parallel. Annotations change no loop structure, so split and fuse refuse annotated
 * loops (annotate last, as in TVM).
 */
#include <string.h>

#include "schedule_int.h"

/* "bound to blockIdx.x" or "vectorized" for messages. */
static const char *ann_text(const sched_loop *l) {
  static const char *const bound[] = {
#define STOF_X(name, text) "bound to " text,
      STOF_THREAD_LIST(STOF_X)
#undef STOF_X
  };
  if (l->ann == STOF_ANN_THREAD) return bound[l->thread];
  return stof_ann_kind_name(l->ann);
}

stof_status stof_sched_bind(stof_sched *s, int loop, const char *tag) {
  stof_status st = sched_check_loop(s, "bind", loop);
  if (st) return st;
  const char *name = sched_loop_name(s, loop);
  if (!tag) return stof_ctx_error(s->ctx, STOF_ERR_ARG, "bind: missing thread tag for loop %s", name);
  int t = -1;
  for (int i = 0; i < STOF_THREAD_COUNT; i++)
    if (strcmp(tag, stof_thread_tag_name((stof_thread_tag)i)) == 0) t = i;
  if (t < 0)
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                          "bind: unknown thread tag '%s' for loop %s (expected blockIdx.x/y/z or "
                          "threadIdx.x/y/z)",
                          tag, name);
  const sched_loop *l = sched_loop_at(s, loop);
  if (l->ann != STOF_ANN_NONE)
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE, "bind: loop %s is already %s", name, ann_text(l));
  if (l->iter == STOF_ITER_REDUCE && t < STOF_THREAD_THREAD_X)
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                          "bind: loop %s is a reduce loop: it cannot be bound to %s (CUDA blocks do not "
                          "combine partial results; bind it to threadIdx.x/y/z for a reduction across "
                          "the threads of a block, or rfactor it first)",
                          name, tag);
  const sched_block *b = sched_block_at(s, l->block);
  for (int i = 0; i < b->nloop; i++) {
    const sched_loop *o = sched_loop_at(s, b->loop[i]);
    if (o->ann == STOF_ANN_THREAD && (int)o->thread == t)
      return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE, "bind: %s is already bound to loop %s in block %s",
                            tag, sched_loop_name(s, b->loop[i]), sched_block_name(s, l->block));
  }
  sched_need n = {0};
  trace_need(&n, 1, 0, 0, 1, (int)strlen(tag) + 1, 0);
  if ((st = sched_reserve(s, &n))) return st;
  sched_loop *lw = sched_loop_at(s, loop);
  lw->ann = STOF_ANN_THREAD;
  lw->thread = (stof_thread_tag)t;
  trace_record(&s->trace, STOF_INST_BIND, 1, &lw->tv, 0, NULL, 0, NULL, 1, &tag, -1, 0, 0);
  return STOF_OK;
}

/* vectorize, unroll, parallel. */
static stof_status mark(stof_sched *s, int loop, stof_ann_kind ann, stof_inst_kind kind,
                        const char *what) {
  stof_status st = sched_check_loop(s, what, loop);
  if (st) return st;
  const char *name = sched_loop_name(s, loop);
  const sched_loop *l = sched_loop_at(s, loop);
  if (l->ann != STOF_ANN_NONE)
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE, "%s: loop %s is already %s", what, name, ann_text(l));
  /* a vectorized reduce loop is unrolled around its accumulator, its loads vectorized */
  if (l->iter == STOF_ITER_REDUCE && ann == STOF_ANN_PARALLEL)
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                          "%s: loop %s is a reduce loop (its iterations depend on each other)", what,
                          name);
  sched_need n = {0};
  trace_need(&n, 1, 0, 0, 0, 0, 0);
  if ((st = sched_reserve(s, &n))) return st;
  sched_loop *lw = sched_loop_at(s, loop);
  lw->ann = ann;
  trace_record(&s->trace, kind, 1, &lw->tv, 0, NULL, 0, NULL, 0, NULL, -1, 0, 0);
  return STOF_OK;
}

stof_status stof_sched_vectorize(stof_sched *s, int loop) {
  return mark(s, loop, STOF_ANN_VECTORIZE, STOF_INST_VECTORIZE, "vectorize");
}

stof_status stof_sched_unroll(stof_sched *s, int loop) {
  return mark(s, loop, STOF_ANN_UNROLL, STOF_INST_UNROLL, "unroll");
}

stof_status stof_sched_parallel(stof_sched *s, int loop) {
  return mark(s, loop, STOF_ANN_PARALLEL, STOF_INST_PARALLEL, "parallel");
}

static stof_status annotate(stof_sched *s, int is_block, int id, const char *key,
                            const char *value) {
  stof_status st = is_block ? sched_check_block(s, "annotate", id) : sched_check_loop(s, "annotate", id);
  if (st) return st;
  const char *tname = is_block ? sched_block_name(s, id) : sched_loop_name(s, id);
  const char *tkind = is_block ? "block" : "loop";
  if (!key || !*key)
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE, "annotate: empty key for %s %s", tkind, tname);
  if (!value)
    return stof_ctx_error(s->ctx, STOF_ERR_ARG, "annotate: missing value for key %s of %s %s", key,
                          tkind, tname);
  int found = -1;
  for (int i = 0; i < s->annots.len; i++) {
    const sched_annot *a = sched_annot_at(s, i);
    if (a->is_block == is_block && a->id == id && strcmp(sched_str(s, a->key), key) == 0) found = i;
  }
  sched_need n = {0};
  n.annots = 1;
  n.chars = (int)strlen(key) + (int)strlen(value) + 2;
  const char *strs[2] = {key, value};
  trace_need(&n, 1, 0, 0, 2, n.chars, 0);
  if ((st = sched_reserve(s, &n))) return st;
  int voff = sched_add_str(s, value);
  if (found >= 0) {
    sched_annot_at(s, found)->value = voff;
  } else {
    sched_annot a = {is_block, id, sched_add_str(s, key), voff};
    sched_vec_push(s->ctx, &s->annots, &a, 1);
  }
  int tv = is_block ? sched_block_at(s, id)->tv : sched_loop_at(s, id)->tv;
  trace_record(&s->trace, STOF_INST_ANNOTATE, 1, &tv, 0, NULL, 0, NULL, 2, strs, -1, 0, 0);
  return STOF_OK;
}

stof_status stof_sched_annotate_loop(stof_sched *s, int loop, const char *key, const char *value) {
  return annotate(s, 0, loop, key, value);
}

stof_status stof_sched_annotate_block(stof_sched *s, int block, const char *key,
                                      const char *value) {
  return annotate(s, 1, block, key, value);
}

/* ---------------------------------------------------------------- tensorize */

/* The axis (of its block) loop derives from as the innermost part of splits with stride 1,
 * or -1. */
static int unit_axis(const stof_sched *s, int loop) {
  const sched_loop *l = sched_loop_at(s, loop);
  while (l->derive == STOF_DERIVE_SPLIT) {
    if (l->part != l->nparts - 1 || l->stride != 1) return -1;
    l = sched_loop_at(s, l->source);
  }
  return l->derive == STOF_DERIVE_ROOT ? l->axis : -1;
}

/* f16 or bf16 load under a cast to float32: the load, else NULL. */
static const stof_expr *half_operand(const stof_expr *e) {
  if (e->kind != STOF_EXPR_CAST || e->dtype != STOF_DTYPE_F32) return NULL;
  e = e->u.op.a;
  if (e->kind != STOF_EXPR_LOAD) return NULL;
  stof_dtype d = e->u.load.tensor->dtype;
  return d == STOF_DTYPE_F16 || d == STOF_DTYPE_BF16 ? e : NULL;
}

/* Is index expression e the variable of axis a of block b? */
static int is_axis(const sched_block *b, const stof_expr *e, int a) {
  return e->kind == STOF_EXPR_VAR && e->u.var == sched_block_axis(b, a);
}

stof_status sched_tensorize_match(const stof_sched *s, int loop, const char *intrin, sched_mma *m) {
  const char *what = "tensorize";
  const char *name = sched_loop_name(s, loop);
  int wg = strcmp(intrin, "wgmma_m64nNk16") == 0;
  if (strcmp(intrin, "mma_m16n8k16") != 0 && !wg)
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                          "%s: unknown intrinsic '%s' for loop %s (known: mma_m16n8k16, wgmma_m64nNk16)", what,
                          intrin, name);
  const sched_loop *l = sched_loop_at(s, loop);
  const sched_block *b = sched_block_at(s, l->block);
  int p = sched_loop_pos(s, loop);
  if (p != b->nloop - 3)
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                          "%s: loop %s must be the third innermost loop of block %s (rows, columns, "
                          "reduction: extents 16k, 8k and 16)",
                          what, name, sched_block_name(s, l->block));
  const int *lp = &b->loop[p];
  for (int k = 0; k < 3; k++)
    if (sched_loop_at(s, lp[k])->ann != STOF_ANN_NONE && lp[k] != loop)
      return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE, "%s: loop %s of block %s is annotated (%s)", what,
                            sched_loop_name(s, lp[k]), sched_block_name(s, l->block),
                            stof_ann_kind_name(sched_loop_at(s, lp[k])->ann));
  const stof_expr *red = sched_block_reduce(b);
  const stof_expr *src = red ? red->u.reduce.src : NULL;
  const stof_expr *ea = src && src->kind == STOF_EXPR_MUL ? half_operand(src->u.op.a) : NULL;
  const stof_expr *eb = src && src->kind == STOF_EXPR_MUL ? half_operand(src->u.op.b) : NULL;
  if (!red || red->u.reduce.combiner != STOF_REDUCE_SUM || b->op->dtype != STOF_DTYPE_F32 || !ea || !eb ||
      ea->u.load.tensor->dtype != eb->u.load.tensor->dtype ||
      (ea->u.load.nidx != 2 && ea->u.load.nidx != b->op->ndim) || eb->u.load.nidx != 2)
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                          "%s: block %s is not C[.., i, j] = sum(float32(A[.., i, k]) * float32(B[k, j])) "
                          "with A and B both float16 or both bfloat16 and C float32",
                          what, sched_block_name(s, l->block));
  int ia = unit_axis(s, lp[0]), ja = unit_axis(s, lp[1]), ka = unit_axis(s, lp[2]);
  int nd = b->op->ndim;
  /* A[b.., i, k]: its leading indices are C's own leading axes (a row block of a batched
   * activation x[b, s, k] times weights W[k, j] or W[j, k]); the tile the warps read then
   * holds one b (the code checks its staged copy has extent 1 there) */
  int lead = ea->u.load.nidx - 2;
  for (int d = 0; d < lead; d++)
    if (!is_axis(b, ea->u.load.idx[d], d))
      return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                            "%s: block %s reads %s with leading index %d not its own axis %d (A[.., i, k] "
                            "must index its leading dimensions by the block's leading axes)",
                            what, sched_block_name(s, l->block), ea->u.load.tensor->name, d, d);
  if (wg && (nd != 2 || lead))
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                          "%s: wgmma_m64nNk16 takes 2-D blocks only; block %s has %d axes (use mma_m16n8k16)",
                          what, sched_block_name(s, l->block), nd);
  if (nd < 2 || ia != nd - 2 || ja != nd - 1 || ka < nd)
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                          "%s: loops %s, %s, %s of block %s must be the innermost (stride 1) parts of "
                          "its last two axes and of a reduce axis, in that order",
                          what, name, sched_loop_name(s, lp[1]), sched_loop_name(s, lp[2]),
                          sched_block_name(s, l->block));
  int64_t e0 = sched_loop_at(s, lp[0])->extent, e1 = sched_loop_at(s, lp[1])->extent,
          e2 = sched_loop_at(s, lp[2])->extent;
  if (wg && (e0 != 64 || (e1 != 64 && e1 != 128) || e2 % 16 || e2 > 64))
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                          "%s: wgmma_m64nNk16 needs loop extents 64, 64 or 128, and 16c (<= 64); loops %s, "
                          "%s, %s have %lld, %lld, %lld",
                          what, name, sched_loop_name(s, lp[1]), sched_loop_name(s, lp[2]), (long long)e0,
                          (long long)e1, (long long)e2);
  if (!wg && (e0 % 16 || e1 % 8 || e2 % 16 || e0 > 128 || e1 > 128 || e2 > 64))
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                          "%s: mma_m16n8k16 needs loop extents 16a (<= 128), 8b (<= 128) and 16c (<= 64); loops "
                          "%s, %s, %s have %lld, %lld, %lld",
                          what, name, sched_loop_name(s, lp[1]), sched_loop_name(s, lp[2]), (long long)e0,
                          (long long)e1, (long long)e2);
  int b_nk = is_axis(b, eb->u.load.idx[0], ja) && is_axis(b, eb->u.load.idx[1], ka);
  if (!is_axis(b, ea->u.load.idx[lead], ia) || !is_axis(b, ea->u.load.idx[lead + 1], ka) ||
      !(b_nk || (is_axis(b, eb->u.load.idx[0], ka) && is_axis(b, eb->u.load.idx[1], ja))))
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                          "%s: block %s must read A[.., i, k] and B[k, j] or B[j, k] at its own axes "
                          "(row-major operands)",
                          what, sched_block_name(s, l->block));
  if (wg && b_nk)
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                          "%s: wgmma_m64nNk16 reads B as B[k, j] only; block %s reads %s[j, k] (use "
                          "mma_m16n8k16)",
                          what, sched_block_name(s, l->block), eb->u.load.tensor->name);
  if (m) {
    m->b_nk = b_nk;
    m->la = ea;
    m->lb = eb;
    m->a = ea->u.load.tensor;
    m->b = eb->u.load.tensor;
    m->m = e0;
    m->n = e1;
    m->k = e2;
    m->loops[0] = lp[0];
    m->loops[1] = lp[1];
    m->loops[2] = lp[2];
  }
  return STOF_OK;
}

stof_status stof_sched_tensorize(stof_sched *s, int loop, const char *intrin) {
  stof_status st = sched_check_loop(s, "tensorize", loop);
  if (st) return st;
  if (!intrin) return stof_ctx_error(s->ctx, STOF_ERR_ARG, "tensorize: missing intrinsic for loop %s",
                                     sched_loop_name(s, loop));
  const sched_loop *l = sched_loop_at(s, loop);
  if (l->ann != STOF_ANN_NONE)
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE, "tensorize: loop %s is already %s", sched_loop_name(s, loop),
                          ann_text(l));
  if ((st = sched_tensorize_match(s, loop, intrin, NULL))) return st;
  sched_need n = {0};
  n.annots = 1;
  n.chars = (int)strlen(intrin) + 1 + (int)sizeof "tensorize";
  trace_need(&n, 1, 0, 0, 1, (int)strlen(intrin) + 1, 0);
  if ((st = sched_reserve(s, &n))) return st;
  sched_annot a = {0, loop, sched_add_str(s, "tensorize"), sched_add_str(s, intrin)};
  sched_vec_push(s->ctx, &s->annots, &a, 1);
  sched_loop *lw = sched_loop_at(s, loop);
  lw->ann = STOF_ANN_TENSORIZE;
  trace_record(&s->trace, STOF_INST_TENSORIZE, 1, &lw->tv, 0, NULL, 0, NULL, 1, &intrin, -1, 0, 0);
  return STOF_OK;
}
