/*
 * The memory plan: which values live in memory (an op's output read by another segment or
 * by the caller), how long (from the segment that writes it to the last that reads it; the
 * outputs to the end), and where: one arena, each value at an offset such that values whose
 * lifetimes overlap never share bytes (greedy, largest first, lowest free offset), so the
 * arena is the peak of the live values rather than their sum. A generated segment's own
 * intermediates live for that segment only.
 */
#include <stdlib.h>
#include <string.h>

#include "exec_int.h"

/* An interval to place: bytes over segments [first, last]. */
typedef struct slot {
  size_t bytes, off;
  int first, last;
  size_t *where; /* receives the offset */
} slot;

static int by_size_desc(const void *a, const void *b) {
  const slot *x = a, *y = b;
  if (x->bytes != y->bytes) return x->bytes < y->bytes ? 1 : -1;
  return x->first - y->first;
}

static int by_off(const void *a, const void *b) {
  const slot *const *x = a, *const *y = b;
  return (*x)->off < (*y)->off ? -1 : (*x)->off > (*y)->off;
}

static stof_status value_bytes(stof_plan *p, const stof_op *op, size_t *out) {
  size_t n = stof_dtype_size(op->dtype);
  for (int d = 0; d < op->ndim; d++)
    if (__builtin_mul_overflow(n, (size_t)op->shape[d], &n))
      return stof_ctx_error(p->ctx, STOF_ERR_ARG, "plan: %s is too large to address", op->name);
  if (n > SIZE_MAX - EXEC_ALIGN) return stof_ctx_error(p->ctx, STOF_ERR_ARG, "plan: %s is too large", op->name);
  *out = (n + EXEC_ALIGN - 1) / EXEC_ALIGN * EXEC_ALIGN;
  return STOF_OK;
}

/* Marks the values that live in memory and their lifetimes (before the segments are built:
 * a generated segment's outputs are its values). */
stof_status exec_mark_values(stof_plan *p) {
  for (int i = 0; i < p->nops; i++) {
    const stof_op *op = p->ops[i];
    exec_value *v = &p->val[op->id];
    v->first = op->kind == STOF_OP_PLACEHOLDER ? -1 : p->seg_of[op->id];
    v->last = v->first;
    if (op->kind == STOF_OP_PLACEHOLDER) v->used = v->input = 1;
    if (p->is_out[op->id]) {
      v->used = 1;
      v->last = p->nseg;
    }
  }
  for (int i = 0; i < p->nops; i++) {
    const stof_op *op = p->ops[i];
    if (op->kind == STOF_OP_PLACEHOLDER) continue;
    int s = p->seg_of[op->id];
    for (int k = 0; k < op->ninput; k++) {
      const stof_op *in = op->input[k];
      exec_value *v = &p->val[in->id];
      if (in->kind != STOF_OP_PLACEHOLDER && p->seg_of[in->id] == s) continue;
      v->used = 1;
      if (s > v->last) v->last = s;
    }
  }
  /* a GEMM or intrinsic segment writes its last op; its inner ops (epilogue) are not values */
  for (int i = 0; i < p->nseg; i++) {
    const exec_seg *s = &p->seg[i];
    if (s->kind == STOF_SEG_GENERIC) continue;
    for (int k = 0; k < s->nop; k++)
      if (s->op[k] != s->last && p->val[s->op[k]->id].used)
        return stof_ctx_error(p->ctx, STOF_ERR_INTERNAL, "plan: %s inside segment %d is read outside it",
                              s->op[k]->name, i);
    p->val[s->last->id].used = 1;
  }
  stof_status st = STOF_OK;
  for (int i = 0; i < p->nops && !st; i++) {
    exec_value *v = &p->val[p->ops[i]->id];
    if (v->used) st = value_bytes(p, p->ops[i], &v->bytes);
  }
  return st;
}

stof_status exec_plan_memory(stof_plan *p) {
  stof_ctx *ctx = p->ctx;
  int n = 0;
  for (int i = 0; i < p->nops; i++)
    if (p->val[p->ops[i]->id].used && !p->val[p->ops[i]->id].input) n++;
  for (int i = 0; i < p->nseg; i++) {
    exec_seg *s = &p->seg[i];
    if (s->kind != STOF_SEG_GENERIC || !s->gen.func) continue;
    int nt = stof_func_ntemp(s->gen.func);
    if (!nt) continue;
    s->gen.ntemp = nt;
    s->gen.temp_off = stof_ctx_alloc(ctx, sizeof *s->gen.temp_off * (size_t)nt);
    s->gen.temp_bytes = stof_ctx_alloc(ctx, sizeof *s->gen.temp_bytes * (size_t)nt);
    if (!s->gen.temp_off || !s->gen.temp_bytes) return STOF_ERR_NOMEM;
    n += nt;
  }
  slot *sl = stof_ctx_alloc(ctx, sizeof *sl * (size_t)(n ? n : 1));
  slot **placed = stof_ctx_alloc(ctx, sizeof *placed * (size_t)(n ? n : 1));
  if (!sl || !placed) {
    stof_ctx_dealloc(ctx, sl, sizeof *sl * (size_t)(n ? n : 1));
    stof_ctx_dealloc(ctx, placed, sizeof *placed * (size_t)(n ? n : 1));
    return STOF_ERR_NOMEM;
  }
  int k = 0;
  p->values_bytes = 0;
  for (int i = 0; i < p->nops; i++) {
    exec_value *v = &p->val[p->ops[i]->id];
    if (!v->used || v->input) continue;
    sl[k++] = (slot){v->bytes, 0, v->first, v->last, &v->off};
    p->values_bytes += v->bytes;
  }
  for (int i = 0; i < p->nseg; i++) {
    exec_seg *s = &p->seg[i];
    for (int t = 0; t < s->gen.ntemp; t++) {
      size_t b = stof_func_temp_bytes(s->gen.func, t);
      b = (b + EXEC_ALIGN - 1) / EXEC_ALIGN * EXEC_ALIGN;
      s->gen.temp_bytes[t] = b;
      sl[k++] = (slot){b, 0, i, i, &s->gen.temp_off[t]};
      p->values_bytes += b;
    }
  }
  qsort(sl, (size_t)n, sizeof *sl, by_size_desc);
  size_t top = 0;
  for (int i = 0; i < n; i++) {
    /* the slots placed so far whose lifetimes overlap this one, by offset: the first gap
     * that fits */
    int nc = 0;
    for (int j = 0; j < i; j++)
      if (sl[j].first <= sl[i].last && sl[i].first <= sl[j].last) placed[nc++] = &sl[j];
    qsort(placed, (size_t)nc, sizeof *placed, by_off);
    size_t off = 0;
    for (int j = 0; j < nc; j++) {
      if (placed[j]->off >= off + sl[i].bytes) break;
      size_t end = placed[j]->off + placed[j]->bytes;
      if (end > off) off = end;
    }
    sl[i].off = off;
    *sl[i].where = off;
    if (off + sl[i].bytes > top) top = off + sl[i].bytes;
  }
  p->arena_bytes = top;
  stof_ctx_dealloc(ctx, sl, sizeof *sl * (size_t)(n ? n : 1));
  stof_ctx_dealloc(ctx, placed, sizeof *placed * (size_t)(n ? n : 1));
  return STOF_OK;
}

uint64_t exec_addr(const stof_plan *p, const stof_op *op) {
  const exec_value *v = &p->val[op->id];
  if (v->input) return v->addr;
  return (p->cuda ? p->arena_dev : (uint64_t)(uintptr_t)p->arena_host) + v->off;
}
