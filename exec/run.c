/*
 * Running a plan: binding inputs, launching the segments in order (on the GPU on the plan's
 * stream, captured once into a CUDA graph and replayed), reading outputs, timing.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "exec_int.h"

/* ---------------------------------------------------------------- launching */

/* A CPU tensor over plan memory (contiguous), for the CPU implementations. */
static stof_status wrap(stof_plan *p, const stof_op *op, int ndim, const int64_t *shape, stof_tensor **out) {
  return stof_tensor_wrap(p->ctx, op->dtype, ndim, shape, NULL, (void *)(uintptr_t)exec_addr(p, op),
                          STOF_DEVICE_CPU, out);
}

static stof_status run_gemm_cpu(stof_plan *p, exec_seg *s) {
  exec_gemm *g = &s->g;
  int64_t xs[2] = {g->M, g->K}, ws[2] = {g->trans_b ? g->N : g->K, g->trans_b ? g->K : g->N},
          ds[2] = {g->M, g->N}, bs[1] = {g->N};
  stof_tensor *a = NULL, *b = NULL, *c = NULL, *bias = NULL, *d = NULL;
  stof_status st = wrap(p, g->x, 2, xs, &a);
  if (!st) st = wrap(p, g->w, 2, ws, &b);
  if (!st && g->res) st = wrap(p, g->res, 2, ds, &c);
  if (!st && g->bias) st = wrap(p, g->bias, 1, bs, &bias);
  if (!st) st = wrap(p, s->last, 2, ds, &d);
  if (!st) st = stof_gemm_cpu(p->ctx, &g->desc, a, b, c, bias, d);
  stof_tensor_free(a);
  stof_tensor_free(b);
  stof_tensor_free(c);
  stof_tensor_free(bias);
  stof_tensor_free(d);
  return st;
}

/* A CPU tensor over plan memory: the view shape of op at src's storage + off elements with
 * the given strides. */
static stof_status wrap_view(stof_plan *p, const stof_op *op, const stof_op *src, int64_t off,
                             const int64_t *strides, stof_tensor **out) {
  char *base = (char *)(uintptr_t)exec_addr(p, src) + off * (int64_t)stof_dtype_size(op->dtype);
  return stof_tensor_wrap(p->ctx, op->dtype, op->ndim, op->shape, strides, base, STOF_DEVICE_CPU, out);
}

static stof_status run_intrin_cpu(stof_plan *p, exec_seg *s) {
  exec_intrin *x = &s->x;
  const stof_op *op = exec_intrin_op(s);
  stof_tensor *in[EXEC_MAX_INTRIN_IN] = {0}, *out = NULL;
  if (op->ninput > EXEC_MAX_INTRIN_IN)
    return stof_ctx_error(p->ctx, STOF_ERR_UNSUPPORTED, "plan: %s has more than %d inputs", op->name, EXEC_MAX_INTRIN_IN);
  stof_status st = STOF_OK;
  for (int i = 0; i < op->ninput && !st; i++) st = wrap_view(p, op->input[i], x->src[i], x->off[i], x->stride[i], &in[i]);
  if (!st) st = wrap_view(p, op, x->dst, 0, x->stride[op->ninput], &out);
  if (!st) st = x->in->cpu(p->ctx, op, (const stof_tensor *const *)in, out);
  for (int i = 0; i < op->ninput; i++) stof_tensor_free(in[i]);
  stof_tensor_free(out);
  return st;
}

stof_status exec_launch_segment(stof_plan *p, int i) {
  exec_seg *s = &p->seg[i];
  switch (s->kind) {
  case STOF_SEG_GEMM: {
    exec_gemm *g = &s->g;
    if (!p->cuda) return run_gemm_cpu(p, s);
    return stof_gemm_plan_run(g->plan, p->stream, exec_addr(p, g->x), exec_addr(p, g->w),
                              g->res ? exec_addr(p, g->res) : 0, g->bias ? exec_addr(p, g->bias) : 0,
                              exec_addr(p, s->last), p->ws_dev, p->ws_bytes);
  }
  case STOF_SEG_INTRIN: {
    if (!p->cuda) return run_intrin_cpu(p, s);
    exec_intrin *x = &s->x;
    const stof_op *op = exec_intrin_op(s);
    uint64_t in[EXEC_MAX_INTRIN_IN];
    const int64_t *strides[EXEC_MAX_INTRIN_IN + 1];
    for (int k = 0; k < op->ninput; k++) {
      in[k] = exec_addr(p, x->src[k]) + (uint64_t)(x->off[k] * (int64_t)stof_dtype_size(op->input[k]->dtype));
      strides[k] = x->stride[k];
    }
    strides[op->ninput] = x->stride[op->ninput];
    if (x->strided) return x->in->gpu_launch_strided(x->inst, in, exec_addr(p, x->dst), strides);
    return x->in->gpu_launch(x->inst, in, exec_addr(p, op));
  }
  default: {
    exec_generic *gen = &s->gen;
    int n = gen->nin + gen->nout + gen->ntemp;
    uint64_t stackbuf[64], *a = n <= 64 ? stackbuf : stof_ctx_alloc(p->ctx, sizeof *a * (size_t)n);
    if (!a) return STOF_ERR_NOMEM;
    for (int k = 0; k < gen->nin; k++) a[k] = exec_addr(p, gen->in[k]);
    for (int k = 0; k < gen->nout; k++) a[gen->nin + k] = exec_addr(p, gen->out[k]);
    uint64_t base = p->cuda ? p->arena_dev : (uint64_t)(uintptr_t)p->arena_host;
    for (int k = 0; k < gen->ntemp; k++) a[gen->nin + gen->nout + k] = base + gen->temp_off[k];
    stof_status st = stof_func_launch(gen->func, a);
    if (a != stackbuf) stof_ctx_dealloc(p->ctx, a, sizeof *a * (size_t)n);
    return st;
  }
  }
}

/* Segment i's failure st, named ("plan: segment 3 (layer_norm, op ln.mean): ..."). */
static stof_status segment_error(stof_plan *p, int i, stof_status st) {
  if (st == STOF_ERR_NOMEM) return st;
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", stof_ctx_message(p->ctx));
  return stof_ctx_error(p->ctx, st, "plan: segment %d (%s, op %s): %s", i, p->seg[i].tmpl, p->seg[i].op[0]->name, msg);
}

stof_status exec_launch_all(stof_plan *p) {
  stof_status st = STOF_OK;
  for (int i = 0; i < p->nseg && !st; i++)
    if ((st = exec_launch_segment(p, i))) st = segment_error(p, i, st);
  return st;
}

/* ---------------------------------------------------------------- binding */

int stof_plan_ninput(const stof_plan *p) {
  int n = 0;
  for (int i = 0; i < p->nops; i++) n += p->ops[i]->kind == STOF_OP_PLACEHOLDER;
  return n;
}

const stof_op *stof_plan_input(const stof_plan *p, int k) {
  for (int i = 0; i < p->nops; i++)
    if (p->ops[i]->kind == STOF_OP_PLACEHOLDER && k-- == 0) return p->ops[i];
  return NULL;
}

stof_status stof_plan_bind(stof_plan *p, const stof_op *ph, const stof_tensor *t) {
  stof_ctx *ctx = p->ctx;
  if (!ph || ph->kind != STOF_OP_PLACEHOLDER || ph->id >= p->nall || stof_graph_op(p->g, ph->id) != ph)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "bind: not a placeholder of the plan's graph");
  exec_value *v = &p->val[ph->id];
  if (!v->input) return stof_ctx_error(ctx, STOF_ERR_ARG, "bind: the plan does not read %s", ph->name);
  if (!t) return stof_ctx_error(ctx, STOF_ERR_ARG, "bind %s: missing tensor", ph->name);
  if (t->dtype != ph->dtype)
    return stof_ctx_error(ctx, STOF_ERR_TYPE, "bind %s: the tensor is %s, the placeholder %s", ph->name,
                          stof_dtype_name(t->dtype), stof_dtype_name(ph->dtype));
  if (t->ndim != ph->ndim || memcmp(t->shape, ph->shape, sizeof t->shape[0] * (size_t)t->ndim)) {
    char a[128] = "[", b[128] = "[";
    for (int d = 0; d < t->ndim; d++) snprintf(a + strlen(a), sizeof a - strlen(a), "%s%lld", d ? ", " : "", (long long)t->shape[d]);
    for (int d = 0; d < ph->ndim; d++) snprintf(b + strlen(b), sizeof b - strlen(b), "%s%lld", d ? ", " : "", (long long)ph->shape[d]);
    return stof_ctx_error(ctx, STOF_ERR_SHAPE, "bind %s: the tensor is %s], the placeholder %s]", ph->name, a, b);
  }
  stof_device dev = p->cuda ? STOF_DEVICE_CUDA : STOF_DEVICE_CPU;
  size_t bytes = (size_t)stof_tensor_numel(t) * stof_dtype_size(t->dtype);
  if (t->device == dev && stof_tensor_is_contiguous(t)) {
    uint64_t a = (uint64_t)(uintptr_t)t->data;
    if (a != v->addr) p->graph_valid = 0;
    v->addr = a;
    return STOF_OK;
  }
  /* copied into storage the plan owns (the same storage on every bind: a captured graph
   * stays valid) */
  stof_tensor *host = NULL;
  const stof_tensor *src = t;
  stof_status st = STOF_OK;
  if (t->device != STOF_DEVICE_CPU || !stof_tensor_is_contiguous(t)) {
    if ((st = stof_tensor_to(t, STOF_DEVICE_CPU, &host))) return st;
    src = host;
  }
  if (v->owned_bytes != bytes) {
    if (v->owned) stof_ctx_dealloc(ctx, v->owned, v->owned_bytes);
    if (v->owned_dev) stof_cuda_mem_free(ctx, v->owned_dev);
    p->owned_bytes -= v->owned_bytes;
    v->owned = NULL;
    v->owned_dev = 0;
    v->owned_bytes = 0;
    if (p->cuda) st = stof_cuda_malloc(ctx, bytes ? bytes : 16, &v->owned_dev);
    else if (!(v->owned = stof_ctx_alloc(ctx, bytes ? bytes : 16))) st = STOF_ERR_NOMEM;
    if (!st) {
      v->owned_bytes = bytes;
      p->owned_bytes += bytes;
    }
  }
  if (!st && p->cuda) {
    if (p->stream) st = stof_cuda_stream_synchronize(p->stream);
    if (!st && bytes) st = stof_cuda_htod(ctx, v->owned_dev, src->data, bytes);
  } else if (!st && bytes) {
    memcpy(v->owned, src->data, bytes);
  }
  stof_tensor_free(host);
  if (st) return st;
  uint64_t a = p->cuda ? v->owned_dev : (uint64_t)(uintptr_t)v->owned;
  if (a != v->addr) p->graph_valid = 0;
  v->addr = a;
  return STOF_OK;
}

/* ---------------------------------------------------------------- running */

static stof_status check_bound(stof_plan *p) {
  for (int i = 0; i < p->nops; i++) {
    const stof_op *op = p->ops[i];
    if (op->kind == STOF_OP_PLACEHOLDER && !p->val[op->id].addr)
      return stof_ctx_error(p->ctx, STOF_ERR_ARG, "run: input %s is not bound (plan:bind)", op->name);
  }
  return STOF_OK;
}

/* Queues one run on the plan's stream (GPU) or runs it (CPU). */
static stof_status run_once(stof_plan *p) {
  if (!p->cuda) return exec_launch_all(p);
  stof_ctx *ctx = p->ctx;
  stof_cuda_stream *prev = stof_cuda_current_stream(ctx);
  stof_cuda_set_stream(ctx, p->stream);
  stof_status st = STOF_OK;
  if (p->opts.no_graph) {
    st = exec_launch_all(p);
  } else {
    if (!p->graph_valid) {
      if (p->graph) stof_cuda_graph_free(p->graph);
      p->graph = NULL;
      st = stof_cuda_capture_begin(ctx, p->stream);
      if (!st) {
        stof_status lst = exec_launch_all(p);
        char msg[1024] = "";
        if (lst) snprintf(msg, sizeof msg, "%s", stof_ctx_message(ctx));
        st = stof_cuda_capture_end(ctx, p->stream, &p->graph);
        if (lst) st = stof_ctx_error(ctx, lst, "%s", msg);
      }
      if (!st) p->graph_valid = 1;
    }
    if (!st) st = stof_cuda_graph_launch(p->graph, p->stream);
  }
  stof_cuda_set_stream(ctx, prev);
  return st;
}

stof_status stof_plan_run(stof_plan *p) {
  stof_status st = check_bound(p);
  if (!st) st = run_once(p);
  if (!st) p->ran = 1;
  return st;
}

stof_status stof_plan_sync(stof_plan *p) {
  return p->cuda && p->stream ? stof_cuda_stream_synchronize(p->stream) : STOF_OK;
}

static stof_status output_check(stof_plan *p, int i) {
  if (i < 0 || i >= p->nout)
    return stof_ctx_error(p->ctx, STOF_ERR_ARG, "output: index %d out of range (the plan has %d)", i, p->nout);
  if (!p->ran) return stof_ctx_error(p->ctx, STOF_ERR_ARG, "output: the plan has not run yet");
  return STOF_OK;
}

stof_status stof_plan_output(stof_plan *p, int i, stof_tensor **out) {
  *out = NULL;
  stof_status st = output_check(p, i);
  if (!st) st = stof_plan_sync(p);
  if (st) return st;
  const stof_op *op = p->out[i];
  stof_tensor *t;
  if ((st = stof_tensor_new(p->ctx, op->dtype, op->ndim, op->shape, STOF_DEVICE_CPU, &t))) return st;
  size_t bytes = (size_t)stof_tensor_numel(t) * stof_dtype_size(op->dtype);
  uint64_t a = exec_addr(p, op);
  if (bytes) {
    if (p->cuda) st = stof_cuda_dtoh(p->ctx, t->data, a, bytes);
    else memcpy(t->data, (void *)(uintptr_t)a, bytes);
  }
  if (st) {
    stof_tensor_free(t);
    return st;
  }
  *out = t;
  return STOF_OK;
}

stof_status stof_plan_output_view(stof_plan *p, int i, stof_tensor **out) {
  *out = NULL;
  stof_status st = output_check(p, i);
  if (!st) st = stof_plan_sync(p);
  if (st) return st;
  const stof_op *op = p->out[i];
  return stof_tensor_wrap(p->ctx, op->dtype, op->ndim, op->shape, NULL, (void *)(uintptr_t)exec_addr(p, op),
                          p->cuda ? STOF_DEVICE_CUDA : STOF_DEVICE_CPU, out);
}

/* ---------------------------------------------------------------- timing */

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Timing on the plan's stream: a device timer (GPU) or the monotonic clock (CPU). */
typedef struct exec_timing {
  stof_plan *p;
  stof_cuda_timer *timer;
  stof_cuda_stream *prev;
  double t0;
} exec_timing;

static stof_status timing_begin(stof_plan *p, exec_timing *t) {
  memset(t, 0, sizeof *t);
  t->p = p;
  if (!p->cuda) return STOF_OK;
  t->prev = stof_cuda_current_stream(p->ctx);
  stof_cuda_set_stream(p->ctx, p->stream);
  return stof_cuda_timer_new(p->ctx, &t->timer);
}

static stof_status timing_start(exec_timing *t) {
  t->t0 = now_ms();
  return t->timer ? stof_cuda_timer_start(t->timer) : STOF_OK;
}

/* Milliseconds since timing_start (waits for the GPU). */
static stof_status timing_stop(exec_timing *t, double *ms) {
  if (!t->timer) {
    *ms = now_ms() - t->t0;
    return STOF_OK;
  }
  float dev = 0;
  stof_cuda_set_stream(t->p->ctx, t->p->stream);
  stof_status st = stof_cuda_timer_stop(t->timer, &dev);
  *ms = dev;
  return st;
}

static void timing_end(exec_timing *t) {
  if (t->timer) stof_cuda_timer_free(t->timer);
  if (t->p->cuda) stof_cuda_set_stream(t->p->ctx, t->prev);
}

stof_status stof_plan_time(stof_plan *p, int reps, int warmup, double *ms) {
  stof_ctx *ctx = p->ctx;
  *ms = 0;
  if (reps < 1 || reps > 100000 || warmup < 0)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "time: reps = %d, warmup = %d (1 <= reps <= 100000, warmup >= 0)", reps, warmup);
  stof_status st = check_bound(p);
  for (int w = 0; w < warmup && !st; w++) st = run_once(p);
  if (!st) st = stof_plan_sync(p);
  if (st) return st;
  if (warmup) p->ran = 1;
  int each = reps <= 200; /* each run timed on its own (a median); else one mean */
  int n = each ? reps : 1, per = each ? 1 : reps;
  double *t = stof_ctx_alloc(ctx, sizeof *t * (size_t)n);
  if (!t) return STOF_ERR_NOMEM;
  exec_timing tm;
  st = timing_begin(p, &tm);
  for (int r = 0; r < n && !st; r++) {
    st = timing_start(&tm);
    for (int k = 0; k < per && !st; k++) st = run_once(p);
    if (!st) st = timing_stop(&tm, &t[r]);
    t[r] /= per;
  }
  timing_end(&tm);
  if (!st) {
    p->ran = 1;
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    *ms = n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
  }
  stof_ctx_dealloc(ctx, t, sizeof *t * (size_t)n);
  return st;
}

stof_status stof_plan_run_bounded(stof_plan *p, double limit_ms, double *ms, int *complete) {
  *ms = 0;
  *complete = 0;
  if (!(limit_ms > 0)) return stof_ctx_error(p->ctx, STOF_ERR_ARG, "run_bounded: limit %g ms (> 0)", limit_ms);
  stof_status st = check_bound(p);
  if (!st) st = stof_plan_sync(p);
  if (st) return st;
  stof_ctx *ctx = p->ctx;
  stof_cuda_stream *prev = p->cuda ? stof_cuda_current_stream(ctx) : NULL;
  if (p->cuda) stof_cuda_set_stream(ctx, p->stream);
  double t0 = now_ms();
  int i = 0;
  for (; i < p->nseg && !st && now_ms() - t0 <= limit_ms; i++) {
    st = exec_launch_segment(p, i);
    if (!st) st = stof_plan_sync(p);
    if (st) st = segment_error(p, i, st);
  }
  if (p->cuda) stof_cuda_set_stream(ctx, prev);
  *ms = now_ms() - t0;
  if (!st && i == p->nseg) {
    *complete = 1;
    p->ran = 1;
  }
  return st;
}

stof_status stof_plan_time_segments(stof_plan *p, int reps, double *ms) {
  if (reps < 1 || reps > 100000) return stof_ctx_error(p->ctx, STOF_ERR_ARG, "time_segments: reps = %d", reps);
  stof_status st = check_bound(p);
  if (!st) st = run_once(p);
  if (!st) st = stof_plan_sync(p);
  if (st) return st;
  p->ran = 1;
  exec_timing tm;
  st = timing_begin(p, &tm);
  for (int i = 0; i < p->nseg && !st; i++) {
    st = timing_start(&tm);
    for (int r = 0; r < reps && !st; r++) st = exec_launch_segment(p, i);
    if (!st) st = timing_stop(&tm, &ms[i]);
    ms[i] /= reps;
  }
  timing_end(&tm);
  return st;
}
