/*
 * Loop annotations: bind (thread tags), vectorize, unroll, parallel, and key/value pragmas
 * on loops or blocks (annotate).
 *
 * A loop carries at most one of bind / vectorize / unroll / parallel; pragmas are separate
 * and any number. Annotations change no loop structure, so split and fuse refuse annotated
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
  if (l->iter == STOF_ITER_REDUCE)
    return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                          "bind: loop %s is a reduce loop (cross-thread reduction is not supported yet)",
                          name);
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
  if (l->iter == STOF_ITER_REDUCE && ann != STOF_ANN_UNROLL)
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
