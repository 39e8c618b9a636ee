/*
 * A plan's life: collecting the ops the outputs need, the default fusion scheme
 * (scheme.c), the values and their implementations (memory.c, build.c), the arena and the
 * vendor GEMM's workspace, the stream; what the plan says about itself.
 */
#include <stdio.h>
#include <string.h>

#include "exec_int.h"

static const char *const seg_kind_names[] = {
#define STOF_X(name, text) text,
    STOF_SEG_KIND_LIST(STOF_X)
#undef STOF_X
};

const char *stof_seg_kind_name(stof_seg_kind k) {
  return (unsigned)k < STOF_SEG_KIND_COUNT ? seg_kind_names[k] : "?";
}

static stof_status pick_target(stof_ctx *ctx, const stof_plan_opts *o, int *cuda) {
  if (o->target && strcmp(o->target, "c") != 0 && strcmp(o->target, "cuda") != 0)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "plan: target \"%s\" (\"c\" or \"cuda\")", o->target);
  if (o->target && strcmp(o->target, "c") == 0) {
    *cuda = 0;
    return STOF_OK;
  }
  stof_status st = stof_cuda_init(ctx);
  if (st == STOF_OK) {
    *cuda = 1;
    return STOF_OK;
  }
  if (o->target) return st; /* "cuda" asked for: say why there is none */
  stof_ctx_clear_error(ctx);
  *cuda = 0;
  return STOF_OK;
}

static stof_status check_fits(stof_plan *p) {
  size_t free_b = 0, total = 0;
  stof_status st = stof_cuda_mem_get_info(p->ctx, &free_b, &total);
  if (st) return st;
  size_t need = p->arena_bytes + p->ws_bytes;
  if (need > free_b)
    return stof_ctx_error(p->ctx, STOF_ERR_NOMEM,
                          "plan: the arena (%.1f MiB) and the GEMM workspace (%.1f MiB) need %.1f MiB of device "
                          "memory, %.1f MiB of %.1f MiB are free",
                          p->arena_bytes / 1048576.0, p->ws_bytes / 1048576.0, need / 1048576.0, free_b / 1048576.0,
                          total / 1048576.0);
  return STOF_OK;
}

static stof_status plan_new(stof_graph *g, int nout, const stof_op *const *outputs, const stof_plan_opts *opts,
                            int jobs_only, stof_plan **out) {
  stof_ctx *ctx = stof_graph_ctx(g);
  *out = NULL;
  if (nout < 1) return stof_ctx_error(ctx, STOF_ERR_ARG, "plan: no outputs");
  stof_plan_opts o = opts ? *opts : (stof_plan_opts){0};
  int cuda = 0;
  stof_status st = pick_target(ctx, &o, &cuda);
  if (st) return st;
  stof_plan *p = stof_ctx_alloc(ctx, sizeof *p);
  if (!p) return STOF_ERR_NOMEM;
  p->ctx = ctx;
  p->g = g;
  p->cuda = cuda;
  p->jobs_only = jobs_only;
  p->opts = o;
  p->opts.target = NULL; /* not kept: the caller's strings */
  p->opts.knobs = NULL;
  p->opts.scheme = NULL; /* used while the plan is made only */
  if (o.knobs && !(p->knobs_text = stof_ctx_strdup(ctx, o.knobs))) {
    stof_ctx_dealloc(ctx, p, sizeof *p);
    return STOF_ERR_NOMEM;
  }
  size_t nall = (size_t)stof_graph_nop(g);
  p->nall = (int)nall;
  p->nout = nout;
  p->out = stof_ctx_alloc(ctx, sizeof *p->out * (size_t)nout);
  p->seg_of = stof_ctx_alloc(ctx, sizeof *p->seg_of * (nall ? nall : 1));
  p->nconsumer = stof_ctx_alloc(ctx, sizeof *p->nconsumer * (nall ? nall : 1));
  p->is_out = stof_ctx_alloc(ctx, nall ? nall : 1);
  p->view_of = stof_ctx_alloc(ctx, sizeof *p->view_of * (nall ? nall : 1));
  p->val = stof_ctx_alloc(ctx, sizeof *p->val * (nall ? nall : 1));
  if (!p->out || !p->seg_of || !p->nconsumer || !p->is_out || !p->val || !p->view_of) {
    st = STOF_ERR_NOMEM;
    goto fail;
  }
  memcpy(p->out, outputs, sizeof *p->out * (size_t)nout);
  if ((st = stof_graph_collect(g, nout, outputs, &p->ops, &p->nops))) goto fail;
  for (size_t i = 0; i < nall; i++) p->seg_of[i] = -1;
  for (int i = 0; i < nout; i++) p->is_out[outputs[i]->id] = 1;
  for (int i = 0; i < p->nops; i++)
    for (int k = 0; k < p->ops[i]->ninput; k++) p->nconsumer[p->ops[i]->input[k]->id]++;
  int knob_check[STOF_INTRIN_MAX_KNOBS];
  if ((st = exec_forced_knobs(p, NULL, knob_check))) goto fail;
  if ((st = o.scheme ? exec_scheme_given(p, o.scheme) : exec_scheme_default(p))) goto fail;
  if ((st = exec_mark_values(p))) goto fail;
  if ((st = exec_build_segments(p))) goto fail;
  if (jobs_only) {
    *out = p;
    return STOF_OK;
  }
  if ((st = exec_plan_memory(p))) goto fail;
  p->opts.hooks = NULL; /* borrowed while the plan is made only */
  if (cuda) {
    if ((st = check_fits(p))) goto fail;
    if ((st = stof_cuda_malloc(ctx, p->arena_bytes ? p->arena_bytes : 256, &p->arena_dev))) goto fail;
    if (p->ws_bytes && (st = stof_cuda_malloc(ctx, p->ws_bytes, &p->ws_dev))) goto fail;
    if ((st = stof_cuda_stream_new(ctx, &p->stream))) goto fail;
  } else if (!(p->arena_host = stof_ctx_alloc(ctx, p->arena_bytes ? p->arena_bytes : 256))) {
    st = STOF_ERR_NOMEM;
    goto fail;
  }
  *out = p;
  return STOF_OK;
fail:
  stof_plan_free(p);
  return st;
}

stof_status stof_plan_new(stof_graph *g, int nout, const stof_op *const *outputs,
                          const stof_plan_opts *opts, stof_plan **out) {
  return plan_new(g, nout, outputs, opts, 0, out);
}

stof_status stof_plan_jobs(stof_graph *g, int nout, const stof_op *const *outputs, const stof_plan_opts *opts,
                           int *njob, stof_compile_job ***jobs) {
  stof_plan *p = NULL;
  *njob = 0;
  *jobs = NULL;
  stof_status st = plan_new(g, nout, outputs, opts, 1, &p);
  if (st) return st;
  stof_ctx *ctx = p->ctx;
  stof_compile_job **j = NULL;
  if (p->njob) {
    j = stof_ctx_alloc(ctx, sizeof *j * (size_t)p->njob);
    if (!j) {
      stof_plan_free(p);
      return STOF_ERR_NOMEM;
    }
    memcpy(j, p->jobs, sizeof *j * (size_t)p->njob);
    *njob = p->njob;
    p->njob = 0; /* transferred */
  }
  *jobs = j;
  stof_plan_free(p);
  return STOF_OK;
}

void stof_plan_free(stof_plan *p) {
  if (!p) return;
  stof_ctx *ctx = p->ctx;
  size_t nall = (size_t)p->nall;
  if (p->stream) stof_cuda_stream_synchronize(p->stream);
  if (p->graph) stof_cuda_graph_free(p->graph);
  if (p->stream) stof_cuda_stream_free(p->stream);
  exec_free_segments(p);
  for (int i = 0; i < p->njob; i++) stof_compile_job_free(p->jobs[i]);
  if (p->jobs) stof_ctx_dealloc(ctx, p->jobs, sizeof *p->jobs * (size_t)p->capjob);
  if (p->val)
    for (size_t i = 0; i < nall; i++) {
      exec_value *v = &p->val[i];
      if (v->owned) stof_ctx_dealloc(ctx, v->owned, v->owned_bytes);
      if (v->owned_dev) stof_cuda_mem_free(ctx, v->owned_dev);
    }
  if (p->arena_dev) stof_cuda_mem_free(ctx, p->arena_dev);
  if (p->ws_dev) stof_cuda_mem_free(ctx, p->ws_dev);
  if (p->arena_host) stof_ctx_dealloc(ctx, p->arena_host, p->arena_bytes ? p->arena_bytes : 256);
  if (p->scheme) stof_ctx_dealloc(ctx, p->scheme, strlen(p->scheme) + 1);
  if (p->knobs_text) stof_ctx_dealloc(ctx, p->knobs_text, strlen(p->knobs_text) + 1);
  if (p->ops) stof_ctx_dealloc(ctx, p->ops, sizeof *p->ops * (size_t)p->nops);
  stof_ctx_dealloc(ctx, p->out, sizeof *p->out * (size_t)p->nout);
  stof_ctx_dealloc(ctx, p->seg_of, sizeof *p->seg_of * (nall ? nall : 1));
  stof_ctx_dealloc(ctx, p->nconsumer, sizeof *p->nconsumer * (nall ? nall : 1));
  stof_ctx_dealloc(ctx, p->is_out, nall ? nall : 1);
  stof_ctx_dealloc(ctx, p->view_of, sizeof *p->view_of * (nall ? nall : 1));
  stof_ctx_dealloc(ctx, p->val, sizeof *p->val * (nall ? nall : 1));
  stof_ctx_dealloc(ctx, p, sizeof *p);
}

const char *stof_plan_target(const stof_plan *p) { return p->cuda ? "cuda" : "c"; }
int stof_plan_nsegment(const stof_plan *p) { return p->nseg; }
int stof_plan_noutput(const stof_plan *p) { return p->nout; }
const char *stof_plan_scheme(const stof_plan *p) { return p->scheme; }

stof_status stof_plan_segment(const stof_plan *p, int i, stof_seg_info *out) {
  if (i < 0 || i >= p->nseg)
    return stof_ctx_error(p->ctx, STOF_ERR_ARG, "segment: index %d out of range (the plan has %d)", i, p->nseg);
  const exec_seg *s = &p->seg[i];
  out->kind = s->kind;
  out->template_name = s->tmpl;
  out->nop = s->nop;
  out->first = s->op[0];
  out->last = s->op[s->nop - 1];
  out->shared_with = s->shared_with;
  out->detail = s->detail;
  out->nknob = s->nknob;
  for (int k = 0; k < s->nknob; k++) {
    out->knob_name[k] = s->knob_name[k];
    out->knob_value[k] = s->knob_value[k];
  }
  out->trace = NULL;
  if (s->kind == STOF_SEG_GENERIC) {
    const exec_seg *o = s->shared_with >= 0 ? &p->seg[s->shared_with] : s;
    out->trace = o->gen.trace;
  }
  return STOF_OK;
}

void stof_plan_memory_get(const stof_plan *p, stof_plan_memory *out) {
  out->arena = p->arena_bytes;
  out->values = p->values_bytes;
  out->owned_inputs = p->owned_bytes;
  out->workspace = p->ws_bytes;
}

stof_status stof_plan_poison(stof_plan *p) {
  stof_status st = stof_plan_sync(p);
  if (st || !p->arena_bytes) return st;
  if (!p->cuda) {
    memset(p->arena_host, 0xff, p->arena_bytes);
    return STOF_OK;
  }
  stof_cuda_stream *prev = stof_cuda_current_stream(p->ctx);
  stof_cuda_set_stream(p->ctx, p->stream);
  st = stof_cuda_memset8(p->ctx, p->arena_dev, 0xff, p->arena_bytes);
  if (!st) st = stof_cuda_stream_synchronize(p->stream);
  stof_cuda_set_stream(p->ctx, prev);
  return st;
}

stof_status stof_plan_describe(const stof_plan *p, char **out) {
  stof_buf b;
  stof_buf_init(&b, p->ctx);
  stof_buf_printf(&b, "plan for %s: %d segments, arena %.2f MiB (values %.2f MiB unshared), workspace %.2f MiB\n",
                  p->cuda ? "cuda" : "c", p->nseg, p->arena_bytes / 1048576.0, p->values_bytes / 1048576.0,
                  p->ws_bytes / 1048576.0);
  for (int i = 0; i < p->nseg; i++) {
    const exec_seg *s = &p->seg[i];
    stof_buf_printf(&b, "%4d  %-9s %-28s %3d ops  %s .. %s", i, stof_seg_kind_name(s->kind), s->tmpl, s->nop,
                    s->op[0]->name, s->op[s->nop - 1]->name);
    if (s->shared_with >= 0) stof_buf_printf(&b, "  (as segment %d)", s->shared_with);
    else if (s->detail[0]) stof_buf_printf(&b, "  [%s]", s->detail);
    stof_buf_puts(&b, "\n");
  }
  return stof_buf_finish(&b, out);
}
