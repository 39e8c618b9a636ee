/*
 * One implementation per segment: a vendor GEMM plan (GPU; the CPU runs the GEMM
 * intrinsic's CPU implementation), an intrinsic's instance (GPU; its CPU implementation
 * otherwise), or a generated function (the segment as a graph of its own, the default
 * schedule, stof_build for "c" or "cuda"). Identical segments (same GEMM description, same
 * intrinsic on the same shapes and parameters, structurally equal subgraphs) share one
 * implementation: the first owns it, the others point at it (shared_with).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "exec_int.h"

/* On a terminal one line rewritten per segment; into a log (not a terminal) one line per
 * quarter of the segments, so that logs stay short. */
static void progress(stof_plan *p, int i, const char *what) {
  if (!p->opts.verbose) return;
  if (isatty(fileno(stderr))) {
    fprintf(stderr, "\rstof: building segment %d/%d (%s)%-24s", i + 1, p->nseg, what, "");
    if (i + 1 == p->nseg) fputc('\n', stderr);
  } else if (i == 0 || (int64_t)(i + 1) * 4 / p->nseg != (int64_t)i * 4 / p->nseg) {
    fprintf(stderr, "stof: building segment %d/%d (%s)\n", i + 1, p->nseg, what);
  }
  fflush(stderr);
}

static int same_shape(const stof_op *a, const stof_op *b) {
  return a->dtype == b->dtype && a->ndim == b->ndim && !memcmp(a->shape, b->shape, sizeof a->shape[0] * (size_t)a->ndim);
}

stof_status exec_seg_knob(stof_plan *p, exec_seg *s, const char *name, int64_t value) {
  if (s->nknob == STOF_PLAN_MAX_SEG_KNOBS) return STOF_OK;
  char *n = stof_ctx_strdup(p->ctx, name);
  if (!n) return STOF_ERR_NOMEM;
  s->knob_name[s->nknob] = n;
  s->knob_value[s->nknob++] = value;
  return STOF_OK;
}

/* A shared segment reports its owner's decisions. */
static stof_status copy_knobs(stof_plan *p, exec_seg *s, const exec_seg *owner) {
  stof_status st = STOF_OK;
  for (int k = 0; k < owner->nknob && !st; k++) st = exec_seg_knob(p, s, owner->knob_name[k], owner->knob_value[k]);
  return st;
}

/* ---------------------------------------------------------------- GEMM */

/* Times each algorithm cuBLASLt's heuristic proposed for d on scratch operands (median of
 * a few runs after a warm-up) and gives the fastest: the GEMM's algorithm knob decided by
 * measurement rather than by the heuristic's order. Best effort: any failure keeps
 * algorithm 0 (the heuristic's first) and clears the error. */
static void measure_algos(stof_plan *p, const stof_gemm_desc *d, int nalgo, int *best, double *t_best,
                          double *t_first) {
  stof_ctx *ctx = p->ctx;
  size_t es = stof_dtype_size(d->dtype);
  size_t na = (size_t)(d->M * d->K) * es, nb = (size_t)(d->N * d->K) * es, nd = (size_t)(d->M * d->N) * es;
  size_t nbias = (size_t)d->N * es, ws = STOF_GEMM_MAX_WORKSPACE;
  uint64_t a = 0, b = 0, c = 0, dd = 0, bias = 0, w = 0;
  stof_cuda_timer *timer = NULL;
  stof_status st = stof_cuda_malloc(ctx, na, &a);
  if (!st) st = stof_cuda_malloc(ctx, nb, &b);
  if (!st) st = stof_cuda_malloc(ctx, nd, &c);
  if (!st) st = stof_cuda_malloc(ctx, nd, &dd);
  if (!st) st = stof_cuda_malloc(ctx, nbias, &bias);
  if (!st) st = stof_cuda_malloc(ctx, ws, &w);
  /* small values (0x2020 is 0.0079 in f16, 2.2e-19 in bf16, tiny in f32): no overflow */
  if (!st) st = stof_cuda_memset8(ctx, a, 0x20, na);
  if (!st) st = stof_cuda_memset8(ctx, b, 0x20, nb);
  if (!st) st = stof_cuda_memset8(ctx, c, 0x20, nd);
  if (!st) st = stof_cuda_memset8(ctx, bias, 0x20, nbias);
  if (!st) st = stof_cuda_timer_new(ctx, &timer);
  for (int k = 0; k < nalgo && !st; k++) {
    stof_gemm_plan *q = NULL;
    if (stof_gemm_plan_new(ctx, d, k, &q) != STOF_OK) {
      stof_ctx_clear_error(ctx);
      continue;
    }
    double t[7];
    int ok = 1;
    for (int r = -2; r < 7 && ok; r++) {
      float ms = 0;
      ok = stof_cuda_timer_start(timer) == STOF_OK &&
           stof_gemm_plan_run(q, NULL, a, b, d->beta != 0 ? c : 0, stof_gemm_epilogue_has_bias(d->epi) ? bias : 0, dd,
                              w, ws) == STOF_OK &&
           stof_cuda_timer_stop(timer, &ms) == STOF_OK;
      if (r >= 0) t[r] = ms;
    }
    stof_gemm_plan_free(q);
    if (!ok) {
      stof_ctx_clear_error(ctx);
      continue;
    }
    for (int i = 1; i < 7; i++) /* insertion sort: the median of 7 */
      for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
        double x = t[j];
        t[j] = t[j - 1];
        t[j - 1] = x;
      }
    if (k == 0) *t_first = t[3];
    if (*t_best < 0 || t[3] < *t_best * 0.98) { /* another algorithm must win by 2% */
      *t_best = t[3];
      *best = k;
    }
  }
  if (st) {
    stof_ctx_clear_error(ctx);
    *best = 0;
    *t_best = -1;
  }
  stof_cuda_timer_free(timer);
  uint64_t bufs[] = {a, b, c, dd, bias, w};
  for (int i = 0; i < 6; i++)
    if (bufs[i]) stof_cuda_mem_free(ctx, bufs[i]);
  (void)stof_cuda_synchronize(ctx);
}

/* The algorithm measured for each GEMM description on each kind of GPU, kept for the
 * process: every later plan (a search's candidates, a default plan built beside them) takes
 * the same one, so that two plans of the same configuration are the same plan and the
 * search's candidates differ only in what it changed, not in a build's timing noise (the
 * tenth session's acceptance run: the search's default-configuration plan 0-3.5% slower than
 * the default plan built before it). Full: measured each time, as before. */
#define ALGO_MEMO 256
typedef struct algo_memo {
  stof_gemm_desc d;
  char dev[64];
  int nalgo, best;
  double t_best, t_first;
} algo_memo;
static algo_memo memo[ALGO_MEMO];
static int nmemo;
static pthread_mutex_t memo_lock = PTHREAD_MUTEX_INITIALIZER;

static int memo_find(const stof_gemm_desc *d, const char *dev, int nalgo, algo_memo *out) {
  int found = 0;
  pthread_mutex_lock(&memo_lock);
  for (int i = 0; i < nmemo && !found; i++)
    if (memo[i].nalgo == nalgo && !memcmp(&memo[i].d, d, sizeof *d) && !strcmp(memo[i].dev, dev)) {
      *out = memo[i];
      found = 1;
    }
  pthread_mutex_unlock(&memo_lock);
  return found;
}

static void memo_add(const algo_memo *m) {
  pthread_mutex_lock(&memo_lock);
  if (nmemo < ALGO_MEMO) memo[nmemo++] = *m;
  pthread_mutex_unlock(&memo_lock);
}

static stof_status build_gemm(stof_plan *p, int si) {
  exec_seg *s = &p->seg[si];
  exec_gemm *g = &s->g;
  stof_gemm_desc *d = &g->desc;
  memset(d, 0, sizeof *d);
  d->M = g->M, d->N = g->N, d->K = g->K, d->batch = 1;
  d->trans_b = g->trans_b;
  d->dtype = g->gemm->dtype;
  d->alpha = 1;
  d->beta = g->res ? 1 : 0;
  static const stof_gemm_epilogue epi[2][3] = {{STOF_GEMM_EPI_NONE, STOF_GEMM_EPI_RELU, STOF_GEMM_EPI_GELU},
                                               {STOF_GEMM_EPI_BIAS, STOF_GEMM_EPI_RELU_BIAS, STOF_GEMM_EPI_GELU_BIAS}};
  d->epi = epi[g->bias != NULL][g->act];
  stof_status st = stof_gemm_check(p->ctx, d);
  if (st) return st;
  snprintf(s->detail, sizeof s->detail, "M %lld, N %lld, K %lld, %s, w %s, epilogue %s%s", (long long)d->M,
           (long long)d->N, (long long)d->K, stof_dtype_name(d->dtype), g->trans_b ? "[N, K]" : "[K, N]",
           stof_gemm_epilogue_name(d->epi), g->res ? " + residual" : "");
  for (int j = 0; j < si; j++) {
    const exec_seg *o = &p->seg[j];
    if (o->kind == STOF_SEG_GEMM && o->shared_with < 0 && !memcmp(&o->g.desc, d, sizeof *d)) {
      s->shared_with = j;
      g->plan = o->g.plan;
      return copy_knobs(p, s, o);
    }
  }
  if (!p->cuda) return STOF_OK;
  st = stof_gemm_plan_new(p->ctx, d, 0, &g->plan);
  if (st) return st;
  int nalgo = stof_gemm_plan_nalgo(g->plan), best = 0, memoed = 0;
  double t_best = -1, t_first = -1;
  if (nalgo > 1 && !p->opts.no_gemm_tune) {
    algo_memo m = {.d = *d, .nalgo = nalgo};
    stof_cuda_props pr;
    if (stof_cuda_props_get(p->ctx, &pr) == STOF_OK)
      snprintf(m.dev, sizeof m.dev, "%.63s", pr.name);
    else
      stof_ctx_clear_error(p->ctx);
    if (m.dev[0] && memo_find(d, m.dev, nalgo, &m)) {
      best = m.best, t_best = m.t_best, t_first = m.t_first, memoed = 1;
    } else {
      measure_algos(p, d, nalgo, &best, &t_best, &t_first);
      m.best = best, m.t_best = t_best, m.t_first = t_first;
      if (m.dev[0] && t_best > 0) memo_add(&m);
    }
  }
  if (best != 0) {
    stof_gemm_plan *q;
    if (stof_gemm_plan_new(p->ctx, d, best, &q) == STOF_OK) {
      stof_gemm_plan_free(g->plan);
      g->plan = q;
    } else {
      stof_ctx_clear_error(p->ctx);
      best = 0;
    }
  }
  size_t ws = stof_gemm_plan_workspace(g->plan);
  if (ws > p->ws_bytes) p->ws_bytes = ws;
  if ((st = exec_seg_knob(p, s, "algo", best))) return st;
  size_t len = strlen(s->detail);
  if (t_best > 0)
    snprintf(s->detail + len, sizeof s->detail - len,
             "; cuBLASLt algorithm %d of %d the heuristic proposed, measured %.4f ms (its first: %.4f ms)%s", best,
             nalgo, t_best, t_first, memoed ? " by an earlier plan of this process" : "");
  else
    snprintf(s->detail + len, sizeof s->detail - len, "; cuBLASLt algorithm 0 of %d", nalgo);
  return STOF_OK;
}

/* ---------------------------------------------------------------- intrinsics */

static int same_intrin_op(const stof_op *a, const stof_op *b) {
  if (!same_shape(a, b) || a->ninput != b->ninput || strcmp(a->intrin, b->intrin)) return 0;
  for (int i = 0; i < a->ninput; i++)
    if (!same_shape(a->input[i], b->input[i])) return 0;
  if (a->intrin_attrs == b->intrin_attrs) return 1;
  if (!strcmp(a->intrin, "attention") && a->intrin_attrs && b->intrin_attrs)
    return !memcmp(a->intrin_attrs, b->intrin_attrs, sizeof(stof_attn_attrs));
  return 0;
}

/* Applies opts.knobs ("NAME.KNOB=VALUE,...") to the knobs of intrinsic in. Every entry is
 * checked, also those for other intrinsics (a typo is an error wherever it is). */
stof_status exec_forced_knobs(stof_plan *p, const stof_intrin *in, int *knob) {
  const char *s = p->knobs_text;
  while (s && *s) {
    const char *end = strchr(s, ',');
    size_t len = end ? (size_t)(end - s) : strlen(s);
    char item[128];
    if (len >= sizeof item) return stof_ctx_error(p->ctx, STOF_ERR_ARG, "plan: knobs: entry too long: %.40s...", s);
    memcpy(item, s, len);
    item[len] = 0;
    char *dot = strchr(item, '.'), *eq = strchr(item, '=');
    if (!dot || !eq || eq < dot)
      return stof_ctx_error(p->ctx, STOF_ERR_ARG, "plan: knobs: \"%s\" is not NAME.KNOB=VALUE", item);
    *dot = *eq = 0;
    char *num_end;
    long v = strtol(eq + 1, &num_end, 10);
    if (*num_end || num_end == eq + 1)
      return stof_ctx_error(p->ctx, STOF_ERR_ARG, "plan: knobs: %s.%s: \"%s\" is not an integer", item, dot + 1, eq + 1);
    const stof_intrin *target = stof_intrin_find(item);
    if (!target) return stof_ctx_error(p->ctx, STOF_ERR_ARG, "plan: knobs: no intrinsic named %s", item);
    int found = -1;
    for (int k = 0; k < target->nknob; k++)
      if (!strcmp(target->knob[k].name, dot + 1)) found = k;
    if (found < 0) {
      char names[256] = "";
      for (int k = 0; k < target->nknob; k++)
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", k ? ", " : "", target->knob[k].name);
      return stof_ctx_error(p->ctx, STOF_ERR_ARG, "plan: knobs: intrinsic %s has no knob %s (%s)", item, dot + 1, names);
    }
    const stof_intrin_knob *kn = &target->knob[found];
    int ok = 0;
    for (int c = 0; c < kn->ncand; c++) ok |= kn->cand[c] == v;
    if (!ok) return stof_ctx_error(p->ctx, STOF_ERR_ARG, "plan: knobs: %s.%s = %ld is not one of its candidates", item, kn->name, v);
    if (target == in) knob[found] = (int)v;
    s = end ? end + 1 : NULL;
  }
  return STOF_OK;
}

static stof_status build_intrin(stof_plan *p, int si) {
  exec_seg *s = &p->seg[si];
  exec_intrin *x = &s->x;
  const stof_op *op = exec_intrin_op(s);
  if (p->cuda && !x->in->gpu_new)
    return stof_ctx_error(p->ctx, STOF_ERR_UNSUPPORTED, "plan: intrinsic %s (op %s) has no GPU implementation",
                          x->in->name, op->name);
  for (int j = 0; j < si; j++) {
    const exec_seg *o = &p->seg[j];
    if (o->kind == STOF_SEG_INTRIN && o->shared_with < 0 && o->x.in == x->in && same_intrin_op(exec_intrin_op(o), op)) {
      s->shared_with = j;
      x->inst = o->x.inst;
      memcpy(x->knob, o->x.knob, sizeof x->knob);
      snprintf(s->detail, sizeof s->detail, "%s", o->detail);
      return copy_knobs(p, s, o);
    }
  }
  if (!p->cuda) {
    snprintf(s->detail, sizeof s->detail, "CPU implementation");
    return STOF_OK;
  }
  int k;
  for (k = 0; k < p->nshared && p->shared_in[k] != x->in; k++) {}
  if (k == p->nshared) {
    if (k == (int)(sizeof p->shared / sizeof p->shared[0]))
      return stof_ctx_error(p->ctx, STOF_ERR_UNSUPPORTED, "plan: more than %d distinct intrinsics", k);
    p->shared_in[p->nshared++] = x->in;
  }
  x->intrin_index = k;
  memset(x->knob, 0, sizeof x->knob);
  stof_status st = exec_forced_knobs(p, x->in, x->knob);
  if (st) return st;
  if ((st = x->in->gpu_new(p->ctx, op, x->knob, &p->shared[k], &x->inst))) return st;
  for (int i = 0; i < x->in->nknob && !st; i++) st = exec_seg_knob(p, s, x->in->knob[i].name, x->knob[i]);
  if (st) return st;
  stof_buf b;
  stof_buf_init(&b, p->ctx);
  for (int i = 0; i < x->in->nknob; i++) stof_buf_printf(&b, "%s%s=%d", i ? " " : "", x->in->knob[i].name, x->knob[i]);
  if (x->in->gpu_describe) stof_buf_printf(&b, "; %s", x->in->gpu_describe(x->inst));
  char *text;
  if ((st = stof_buf_finish(&b, &text))) return st;
  snprintf(s->detail, sizeof s->detail, "%s", text);
  stof_ctx_dealloc(p->ctx, text, strlen(text) + 1);
  return STOF_OK;
}

/* ---------------------------------------------------------------- generated */

static stof_status build_generic(stof_plan *p, int si) {
  stof_ctx *ctx = p->ctx;
  exec_seg *s = &p->seg[si];
  exec_generic *gen = &s->gen;
  int nall = p->nall;
  const stof_op **map = stof_ctx_alloc(ctx, sizeof *map * (size_t)(nall ? nall : 1));
  if (!map) return STOF_ERR_NOMEM;
  stof_graph *sub = NULL;
  stof_sched *sched = NULL;
  const stof_op **args = NULL;
  stof_status st = stof_graph_extract(p->g, s->nop, s->op, &sub, map);
  if (st) goto done;
  /* inputs: the subgraph's placeholders in its own order (structural); outputs: the
   * segment's ops that live in memory */
  int nsub = stof_graph_nop(sub);
  const stof_op **back = stof_ctx_alloc(ctx, sizeof *back * (size_t)nsub);
  if (!back) {
    st = STOF_ERR_NOMEM;
    goto done;
  }
  for (int id = 0; id < nall; id++)
    if (map[id]) back[map[id]->id] = stof_graph_op(p->g, id);
  gen->nin = gen->nout = 0;
  for (int i = 0; i < nsub; i++)
    if (stof_graph_op(sub, i)->kind == STOF_OP_PLACEHOLDER) gen->nin++;
  for (int i = 0; i < s->nop; i++)
    if (p->val[s->op[i]->id].used) gen->nout++;
  gen->in = stof_ctx_alloc(ctx, sizeof *gen->in * (size_t)(gen->nin ? gen->nin : 1));
  gen->out = stof_ctx_alloc(ctx, sizeof *gen->out * (size_t)(gen->nout ? gen->nout : 1));
  args = stof_ctx_alloc(ctx, sizeof *args * (size_t)(gen->nin + gen->nout));
  if (!gen->in || !gen->out || !args) {
    stof_ctx_dealloc(ctx, back, sizeof *back * (size_t)nsub);
    st = STOF_ERR_NOMEM;
    goto done;
  }
  int ni = 0, no = 0;
  for (int i = 0; i < nsub; i++) {
    const stof_op *o = stof_graph_op(sub, i);
    if (o->kind == STOF_OP_PLACEHOLDER) {
      gen->in[ni] = back[i];
      args[ni++] = o;
    }
  }
  for (int i = 0; i < s->nop; i++)
    if (p->val[s->op[i]->id].used) {
      gen->out[no] = s->op[i];
      args[gen->nin + no++] = map[s->op[i]->id];
    }
  stof_ctx_dealloc(ctx, back, sizeof *back * (size_t)nsub);
  if (gen->nout == 0) {
    st = stof_ctx_error(ctx, STOF_ERR_INTERNAL, "plan: segment %d (%s) writes nothing", si, s->tmpl);
    goto done;
  }
  uint64_t h;
  if ((st = stof_te_hash(sub, gen->nout, args + gen->nin, &h))) goto done;
  for (int i = 0; i < gen->nin + gen->nout; i++) {
    h = stof_hash_bytes(h, &args[i]->dtype, sizeof args[i]->dtype);
    h = stof_hash_bytes(h, args[i]->shape, sizeof args[i]->shape[0] * (size_t)args[i]->ndim);
  }
  gen->key = h;
  for (int j = 0; j < si; j++) {
    exec_seg *o = &p->seg[j];
    if (o->kind == STOF_SEG_GENERIC && o->shared_with < 0 && o->gen.key == h && o->gen.nin == gen->nin &&
        o->gen.nout == gen->nout) {
      s->shared_with = j;
      gen->func = o->gen.func;
      snprintf(s->detail, sizeof s->detail, "%s", o->detail);
      st = copy_knobs(p, s, o);
      goto done;
    }
  }
  const char *target = p->cuda ? "cuda" : "c";
  if ((st = stof_sched_new(sub, gen->nout, args + gen->nin, &sched))) goto done;
  char label[96] = "";
  if (p->opts.hooks && p->opts.hooks->schedule) {
    stof_plan_seg_req r = {si, target, s->tmpl, s->nop, s->op, NULL};
    st = p->opts.hooks->schedule(p->opts.hooks->ud, &r, sched);
    snprintf(label, sizeof label, "%s", r.label ? r.label : "the caller's schedule");
  } else {
    st = stof_sched_auto(sched, target, NULL);
  }
  if (st) goto done;
  if (p->jobs_only) { /* stof_plan_jobs: what the build would compile, no more */
    if (p->njob == p->capjob) {
      int ncap = p->capjob ? p->capjob * 2 : 16;
      stof_compile_job **j = stof_ctx_realloc(ctx, p->jobs, sizeof *j * (size_t)p->capjob, sizeof *j * (size_t)ncap);
      if (!j) {
        st = STOF_ERR_NOMEM;
        goto done;
      }
      p->jobs = j;
      p->capjob = ncap;
    }
    st = stof_build_job(sched, gen->nin + gen->nout, args, target, &p->jobs[p->njob]);
    if (!st) p->njob++;
    goto done;
  }
  if ((st = stof_build(sched, gen->nin + gen->nout, args, target, &gen->func))) goto done;
  for (int k = 0; k < stof_sched_nknob(sched) && !st; k++) {
    const char *name;
    int64_t value;
    if (!(st = stof_sched_knob_info(sched, k, &name, NULL, NULL, &value))) st = exec_seg_knob(p, s, name, value);
  }
  if (st) goto done;
  stof_trace *tr = NULL;
  if (!(st = stof_sched_trace(sched, &tr))) {
    st = stof_trace_to_lua(tr, &gen->trace);
    stof_trace_free(tr);
  }
  if (st) goto done;
  snprintf(s->detail, sizeof s->detail, "%d ops, %d inputs, %d outputs, %s", s->nop, gen->nin, gen->nout,
           label[0] ? label : "default schedule");
done:
  if (st && s->op && s->nop) {
    /* name the segment in the message */
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", stof_ctx_message(ctx));
    if (st != STOF_ERR_NOMEM)
      stof_ctx_error(ctx, st, "plan: segment %d (%s, ops %s .. %s): %s", si, s->tmpl, s->op[0]->name,
                     s->op[s->nop - 1]->name, msg);
  }
  if (sched) stof_sched_free(sched);
  if (sub) stof_graph_free(sub);
  if (args) stof_ctx_dealloc(ctx, args, sizeof *args * (size_t)(gen->nin + gen->nout));
  stof_ctx_dealloc(ctx, map, sizeof *map * (size_t)(nall ? nall : 1));
  return st;
}

stof_status exec_build_segments(stof_plan *p) {
  stof_status st = STOF_OK;
  for (int i = 0; i < p->nseg && !st; i++) {
    exec_seg *s = &p->seg[i];
    if (p->jobs_only && s->kind != STOF_SEG_GENERIC) continue; /* nothing generated to compile */
    progress(p, i, s->tmpl);
    switch (s->kind) {
    case STOF_SEG_GEMM: st = build_gemm(p, i); break;
    case STOF_SEG_INTRIN: st = build_intrin(p, i); break;
    default: st = build_generic(p, i); break;
    }
  }
  return st;
}

void exec_free_segments(stof_plan *p) {
  stof_ctx *ctx = p->ctx;
  for (int i = 0; i < p->nseg; i++) {
    exec_seg *s = &p->seg[i];
    if (s->shared_with < 0) {
      if (s->kind == STOF_SEG_GEMM && s->g.plan) stof_gemm_plan_free(s->g.plan);
      if (s->kind == STOF_SEG_INTRIN && s->x.inst) s->x.in->gpu_free(s->x.inst);
      if (s->kind == STOF_SEG_GENERIC && s->gen.func) stof_func_free(s->gen.func);
      if (s->gen.trace) stof_ctx_dealloc(ctx, s->gen.trace, strlen(s->gen.trace) + 1);
    }
    stof_ctx_dealloc(ctx, s->gen.in, sizeof *s->gen.in * (size_t)(s->gen.nin ? s->gen.nin : 1));
    stof_ctx_dealloc(ctx, s->gen.out, sizeof *s->gen.out * (size_t)(s->gen.nout ? s->gen.nout : 1));
    stof_ctx_dealloc(ctx, s->gen.temp_off, sizeof *s->gen.temp_off * (size_t)s->gen.ntemp);
    stof_ctx_dealloc(ctx, s->gen.temp_bytes, sizeof *s->gen.temp_bytes * (size_t)s->gen.ntemp);
    stof_ctx_dealloc(ctx, s->op, sizeof *s->op * (size_t)s->capop);
    for (int k = 0; k < s->nknob; k++) stof_ctx_dealloc(ctx, s->knob_name[k], strlen(s->knob_name[k]) + 1);
  }
  for (int k = 0; k < p->nshared; k++)
    if (p->shared[k] && p->shared_in[k]->shared_free) p->shared_in[k]->shared_free(p->shared[k]);
  stof_ctx_dealloc(ctx, p->seg, sizeof *p->seg * (size_t)p->capseg);
  p->seg = NULL;
  p->nseg = p->capseg = 0;
  p->nshared = 0;
}
