/*
 * A candidate of the search (search_int.h): its plan built through exec/'s hooks (a
 * template applied to a clone of each generated segment's fresh schedule, its trace given
 * the configuration's decisions and replayed), measured, checked against the reference when
 * it would win or runs a template on a segment for the first time, and recorded; compiling
 * a round's candidates ahead on several threads; the progress display.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "search_int.h"

double search_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

double search_elapsed(const tuner *t) { return search_now() - t->t0; }

int search_out_of_budget(const tuner *t) {
  return search_elapsed(t) + t->trial_s >= t->budget || (t->o->max_trials > 0 && t->res.trials >= t->o->max_trials);
}

int search_fit(const tuner *t, int n, int trials) {
  double left = t->budget - search_elapsed(t), each = t->prep_s + trials * t->trial_s;
  if (left <= 0) return 0;
  if (each <= 0 || left >= each * n) return n;
  return (int)(left / each);
}

static const char *tmpl_name(const tuner *t, int k) {
  return k == VENDOR ? "vendor" : k == DEFAULT ? "default" : t->t[k].name;
}

/* ---------------------------------------------------------------- progress */

void search_progress(tuner *t) {
  stof_tune_progress p = {t->stage, t->res.trials, t->res.failed, t->res.rejected, search_elapsed(t), t->budget,
                          t->res.default_ms, t->best_ms, t->what};
  if (t->o->progress) {
    t->o->progress(t->o->progress_ud, &p);
    return;
  }
  if (!t->o->verbose) return;
  int tty = isatty(fileno(stderr));
  if (t->res.from_db) {
    fprintf(stderr, "stof tune: %s: the best record of the database, %.4f ms (nothing measured)\n", t->workload,
            t->best_ms);
    return;
  }
  if (!tty && t->stage && t->res.trials - t->last_bar < 10) return;
  t->last_bar = t->res.trials;
  char bar[21];
  int fill = t->budget > 0 ? (int)(20 * fmin(1, p.elapsed_s / t->budget)) : 20;
  for (int i = 0; i < 20; i++) bar[i] = i < fill ? '#' : '.';
  bar[20] = 0;
  fprintf(stderr, "%sstof tune: %s [%s] %d trials (%d failed, %d rejected), best %.4f ms (default %.4f, %.2fx), %.0f s left%s",
          tty ? "\r" : "", t->stage == 1 ? "stage 1 fusion" : t->stage == 2 ? "stage 2 knobs " : "done          ", bar,
          p.trials, p.failed, p.rejected, p.best_ms, p.default_ms, p.best_ms > 0 ? p.default_ms / p.best_ms : 0,
          fmax(0, t->budget - p.elapsed_s), tty && t->stage ? "  " : "\n");
  fflush(stderr);
}

/* ---------------------------------------------------------------- hooks */

static int tmpl_matches(tuner *t, int k, const stof_plan_seg_req *r) {
  return !t->t[k].matches || t->t[k].matches(t->t[k].ud, r);
}

/* The choices of segment r->index, the first time a hook sees it. */
static void see(tuner *t, const stof_plan_seg_req *r, int gemm) {
  seg *s = &t->segs[r->index];
  if (s->seen) return;
  s->seen = 1;
  s->gemm = gemm;
  s->nchoice = 0;
  if (gemm) s->tmpl[s->nchoice++] = VENDOR;
  /* pruned: "auto" for a GEMM on the GPU (a reduction kernel without tensor cores, never
   * near cuBLASLt); the user's templates may still take it */
  for (int k = 0; k < t->nt && s->nchoice < MAXC; k++)
    if (!(k == 0 && gemm && t->cuda) && tmpl_matches(t, k, r)) s->tmpl[s->nchoice++] = k;
}

/* The template of a segment left at DEFAULT: the vendor GEMM where it can run; a GEMM in
 * generated code on the GPU (a segment the vendor GEMM cannot run: a GEMM with a row
 * normalisation, say) the first built-in tensor-core template that takes it; else "auto". */
static int default_tmpl(const tuner *t, const seg *s) {
  if (s->gemm) return VENDOR;
  if (t->cuda && !t->o->plan.no_vendor_gemm)
    for (int ch = 0; ch < s->nchoice; ch++)
      if (s->tmpl[ch] > 0 && s->tmpl[ch] < NBUILTIN) return s->tmpl[ch];
  return 0;
}

static int hook_generate_gemm(void *ud, const stof_plan_seg_req *r) {
  tuner *t = ud;
  if (r->index >= t->nslot) return 0;
  see(t, r, 1);
  int k = t->cur[r->index].tmpl;
  return k >= 0;
}

/* Whether segment r is one of the default scheme's (the same ops): the default plan runs it
 * as it is, so the pruning rule below leaves it alone. */
static int default_segment(const tuner *t, const stof_plan_seg_req *r) {
  int v = -1;
  for (int i = 0; i < r->nop; i++) {
    int id = r->op[i]->id, k = id >= 0 && id < t->nid ? t->op_index[id] : -1;
    if (k < 0) return 0;
    if (i == 0) v = t->def_code[k];
    else if (t->def_code[k] != v) return 0;
  }
  return v >= 0 && v < t->nop && t->def_count[v] == r->nop;
}

static int choice_of(const seg *s, int tmpl) {
  for (int c = 0; c < s->nchoice; c++)
    if (s->tmpl[c] == tmpl) return c;
  return -1;
}

static stof_status hook_schedule(void *ud, stof_plan_seg_req *r, stof_sched *s) {
  tuner *t = ud;
  stof_ctx *ctx = t->ctx;
  if (r->index >= t->nslot) return stof_ctx_error(ctx, STOF_ERR_INTERNAL, "tune: segment %d past the scheme's", r->index);
  see(t, r, 0);
  seg *sg = &t->segs[r->index];
  const cfg *c = &t->cur[r->index];
  int k = c->tmpl == DEFAULT ? default_tmpl(t, sg) : c->tmpl;
  if (k < 0) k = 0;
  if (k == 0 && t->cuda && !t->o->plan.no_vendor_gemm) /* pruned before anything compiles: see see() */
    for (int i = 0; i < r->nop; i++)
      if (stof_plan_op_is_gemm(r->op[i])) {
        t->pruning = 1;
        return stof_ctx_error(ctx, STOF_ERR_UNSUPPORTED,
                              "tune: pruned: segment %d (%s) puts GEMM %s in generated code, which template auto "
                              "would run without tensor cores; only a user template may take it",
                              r->index, r->name, r->op[i]->name);
      }
  int ch = choice_of(sg, k);
  if (ch < 0)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "tune: template %s does not match segment %d (%s)", t->t[k].name,
                          r->index, r->name);
  stof_sched *clone = NULL;
  stof_trace *tr = NULL;
  stof_status st = stof_sched_clone(s, &clone);
  if (st) return st;
  if ((st = t->t[k].schedule(t->t[k].ud, r, clone))) {
    if (st != STOF_ERR_NOMEM) {
      char msg[512];
      snprintf(msg, sizeof msg, "%s", stof_ctx_message(ctx));
      stof_ctx_error(ctx, st, "template %s: %s", t->t[k].name, msg);
    }
    goto done;
  }
  dom *d = &sg->d[ch];
  if (!d->known) {
    d->known = 1;
    d->n = 0;
    for (int i = 0; i < stof_sched_nknob(clone) && d->n < MAXK; i++) {
      const char *name;
      int ncand;
      if (stof_sched_knob_info(clone, i, &name, &ncand, NULL, NULL) || strlen(name) >= NAMEL) continue;
      snprintf(d->name[d->n], NAMEL, "%s", name);
      d->ncand[d->n++] = ncand;
    }
  }
  if ((st = stof_sched_trace(clone, &tr))) goto done;
  for (int i = 0; i < c->n && !st; i++) st = stof_trace_set_decision(tr, c->name[i], c->dec[i]);
  if (!st) st = stof_sched_replay(tr, s);
  if (!st && t->cuda && t->def_code && !(k == default_tmpl(t, sg) && default_segment(t, r))) {
    int64_t iters;
    char blk[NAMEL];
    st = stof_sched_serial_nest(s, &iters, blk, sizeof blk);
    if (!st && iters > SERIAL_MAX) {
      t->pruning = 1;
      st = stof_ctx_error(ctx, STOF_ERR_UNSUPPORTED,
                          "tune: pruned: segment %d (%s): template %s leaves block %s serial on the GPU (%lld "
                          "iterations on one thread)",
                          r->index, r->name, t->t[k].name, blk, (long long)iters);
    }
  }
  snprintf(t->label, sizeof t->label, "template %s", t->t[k].name);
  r->label = t->label;
done:
  if (tr) stof_trace_free(tr);
  stof_sched_free(clone);
  return st;
}

/* ---------------------------------------------------------------- the built-in template */

stof_status search_auto_schedule(void *ud, const stof_plan_seg_req *r, stof_sched *s) {
  (void)ud;
  return stof_sched_auto(s, r->target, NULL);
}

/* ---------------------------------------------------------------- building and measuring */

static stof_status code_text(tuner *t, const int *code, char **out) {
  stof_buf b;
  stof_buf_init(&b, t->ctx);
  for (int i = 0; i < t->nop; i++) stof_buf_printf(&b, "%s%d", i ? " " : "", code[i]);
  return stof_buf_finish(&b, out);
}

void search_free_text(tuner *t, char *s) {
  if (s) stof_ctx_dealloc(t->ctx, s, strlen(s) + 1);
}

/* The intrinsics' knob values as plan options ("attention.tile=128,..."); NULL for none. */
static stof_status intrin_text(tuner *t, int (*val)[STOF_INTRIN_MAX_KNOBS], char **out) {
  *out = NULL;
  if (!t->cuda || !t->nin) return STOF_OK;
  stof_buf b;
  stof_buf_init(&b, t->ctx);
  for (int i = 0; i < t->nin; i++)
    for (int k = 0; k < t->in[i]->nknob; k++)
      if (val[i][k]) stof_buf_printf(&b, "%s%s.%s=%d", b.len ? "," : "", t->in[i]->name, t->in[i]->knob[k].name, val[i][k]);
  if (!b.len) {
    stof_buf_finish(&b, out);
    search_free_text(t, *out);
    *out = NULL;
    return STOF_OK;
  }
  return stof_buf_finish(&b, out);
}

/* Binds the feed to the plan's inputs. */
stof_status search_bind_feed(tuner *t, stof_plan *p) {
  for (int i = 0; i < stof_plan_ninput(p); i++) {
    const stof_op *ph = stof_plan_input(p, i);
    int k;
    for (k = 0; k < t->o->nfeed && t->o->feed_ops[k] != ph; k++) {}
    if (k == t->o->nfeed) return stof_ctx_error(t->ctx, STOF_ERR_ARG, "tune: no input given for placeholder %s", ph->name);
    stof_status st = stof_plan_bind(p, ph, t->dfeed && t->dfeed[k] ? t->dfeed[k] : t->o->feed[k]);
    if (st) return st;
  }
  return STOF_OK;
}

/* The plan options of the current candidate (code, t->cur, t->inval): *text and *knobs to
 * free with free_text after use; hooks must outlive the use. */
static stof_status cand_opts(tuner *t, const int *code, stof_plan_hooks *hooks, stof_plan_opts *po, char **text,
                             char **knobs) {
  *text = *knobs = NULL;
  stof_status st = code_text(t, code, text);
  if (!st) st = intrin_text(t, t->inval, knobs);
  if (st) {
    search_free_text(t, *text);
    *text = NULL;
    return st;
  }
  *hooks = (stof_plan_hooks){hook_generate_gemm, hook_schedule, t};
  *po = t->o->plan;
  po->target = t->cuda ? "cuda" : "c";
  po->scheme = *text;
  po->hooks = hooks;
  po->knobs = *knobs;
  po->verbose = 0;
  return STOF_OK;
}

/* Builds the plan of code with t->cur; segment facts refreshed from it. */
stof_status search_build(tuner *t, const int *code, stof_plan **out) {
  char *text = NULL, *knobs = NULL;
  *out = NULL;
  stof_plan_hooks hooks;
  stof_plan_opts po;
  stof_status st = cand_opts(t, code, &hooks, &po, &text, &knobs);
  if (st) return st;
  stof_plan *p = NULL;
  st = stof_plan_new(t->g, t->nout, t->outputs, &po, &p);
  search_free_text(t, text);
  search_free_text(t, knobs);
  if (!st) st = search_bind_feed(t, p);
  if (st) {
    stof_plan_free(p);
    return st;
  }
  *out = p;
  return STOF_OK;
}

/* After a build: the scheme in run order, each segment's owner, kind and compute-intensive
 * ops; members of a class take their owner's template. */
stof_status search_learn(tuner *t, stof_plan *p) {
  const char *sc = stof_plan_scheme(p);
  for (int i = 0; i < t->nop; i++) {
    char *end;
    t->code[i] = (int)strtol(sc, &end, 10);
    sc = end;
  }
  t->nseg = stof_plan_nsegment(p);
  for (int i = 0; i < t->nseg && i < t->nslot; i++) {
    stof_seg_info info;
    stof_status st = stof_plan_segment(p, i, &info);
    if (st) return st;
    seg *s = &t->segs[i];
    s->owner = info.shared_with >= 0 ? info.shared_with : i;
    while (t->segs[s->owner].owner != s->owner) s->owner = t->segs[s->owner].owner;
    s->kind = info.kind;
    s->nci = 0;
  }
  for (int i = 0; i < t->nop; i++) {
    const stof_op *op = t->ops[i];
    if (op->kind == STOF_OP_EXTERN || stof_plan_op_is_gemm(op)) t->segs[t->code[i]].nci++;
  }
  return STOF_OK;
}

/* The knobs of the configuration, for the record: every segment's template when not the
 * default ("s3@auto"), the owners' decisions ("s3.threads"), the intrinsics' values. */
static stof_status cfg_record(tuner *t, int *n, int *ncap, char ***names, int64_t **values) {
  const cfg *c = t->cur;
  int nseg = t->nseg, (*val)[STOF_INTRIN_MAX_KNOBS] = t->inval;
  int cap = 0;
  for (int i = 0; i < nseg; i++) cap += 1 + c[i].n;
  for (int i = 0; i < t->nin; i++) cap += t->in[i]->nknob;
  char **nm = stof_ctx_alloc(t->ctx, sizeof *nm * (size_t)(cap ? cap : 1));
  int64_t *v = stof_ctx_alloc(t->ctx, sizeof *v * (size_t)(cap ? cap : 1));
  if (!nm || !v) {
    stof_ctx_dealloc(t->ctx, nm, sizeof *nm * (size_t)(cap ? cap : 1));
    stof_ctx_dealloc(t->ctx, v, sizeof *v * (size_t)(cap ? cap : 1));
    return STOF_ERR_NOMEM;
  }
  int k = 0;
  char buf[NAMEL + 96];
  for (int i = 0; i < nseg; i++) {
    if (c[i].tmpl != DEFAULT) {
      snprintf(buf, sizeof buf, "s%d@%s", i, tmpl_name(t, c[i].tmpl));
      if (!(nm[k] = stof_ctx_strdup(t->ctx, buf))) goto nomem;
      v[k++] = 1;
    }
    if (t->segs[i].owner != i) continue;
    for (int j = 0; j < c[i].n; j++) {
      snprintf(buf, sizeof buf, "s%d.%s", i, c[i].name[j]);
      if (!(nm[k] = stof_ctx_strdup(t->ctx, buf))) goto nomem;
      v[k++] = c[i].dec[j];
    }
  }
  for (int i = 0; i < t->nin; i++)
    for (int j = 0; j < t->in[i]->nknob; j++)
      if (val[i][j]) {
        snprintf(buf, sizeof buf, "intrin.%s.%s", t->in[i]->name, t->in[i]->knob[j].name);
        if (!(nm[k] = stof_ctx_strdup(t->ctx, buf))) goto nomem;
        v[k++] = val[i][j];
      }
  *n = k;
  *ncap = cap;
  *names = nm;
  *values = v;
  return STOF_OK;
nomem:
  for (int j = 0; j < k; j++) stof_ctx_dealloc(t->ctx, nm[j], strlen(nm[j]) + 1);
  stof_ctx_dealloc(t->ctx, nm, sizeof *nm * (size_t)(cap ? cap : 1));
  stof_ctx_dealloc(t->ctx, v, sizeof *v * (size_t)(cap ? cap : 1));
  return STOF_ERR_NOMEM;
}

/* Appends a record of the current candidate (no database: nothing). A failure to write
 * is reported on stderr once and the search goes on. */
static void record(tuner *t, const int *code, double ms, stof_status status, const char *message) {
  if (!t->o->db) return;
  char *text = NULL, **names = NULL;
  int64_t *values = NULL;
  int n = 0, cap = 0;
  if (code_text(t, code, &text) || cfg_record(t, &n, &cap, &names, &values)) {
    search_free_text(t, text);
    stof_ctx_clear_error(t->ctx);
    return;
  }
  stof_db_record r = {0};
  r.workload = t->workload;
  r.device = t->device;
  r.scheme = text;
  r.nknob = n;
  r.knob_name = (const char *const *)names;
  r.knob_value = values;
  r.ntime = status == STOF_OK ? 1 : 0;
  r.time_ms = &ms;
  r.status = status;
  r.message = message;
  if (stof_db_append(t->o->db, &r) != STOF_OK) {
    static int warned;
    if (!warned++) fprintf(stderr, "stof tune: cannot append to the tuning database: %s\n", stof_ctx_message(t->ctx));
    stof_ctx_clear_error(t->ctx);
  }
  for (int j = 0; j < n; j++) stof_ctx_dealloc(t->ctx, names[j], strlen(names[j]) + 1);
  stof_ctx_dealloc(t->ctx, names, sizeof *names * (size_t)(cap ? cap : 1));
  stof_ctx_dealloc(t->ctx, values, sizeof *values * (size_t)(cap ? cap : 1));
  search_free_text(t, text);
}

/* Whether the configuration uses the template named name. */
static int uses_template(const tuner *t, const char *name) {
  if (!name) return 0;
  for (int i = 0; i < t->nseg; i++)
    if (t->cur[i].tmpl >= 0 && !strcmp(t->t[t->cur[i].tmpl].name, name)) return 1;
  return 0;
}

/* Runs p with its memory poisoned and compares every output with the reference: 1 when it
 * matches, 0 when it does not (why says how), -1 when it could not run (*fail: the status). */
static int check(tuner *t, stof_plan *p, char *why, size_t n, stof_status *fail) {
  stof_status st = stof_plan_poison(p);
  if (!st) st = stof_plan_run(p);
  if (st) {
    snprintf(why, n, "run: %s", st == STOF_ERR_NOMEM ? "out of memory" : stof_ctx_message(t->ctx));
    stof_ctx_clear_error(t->ctx);
    *fail = st;
    return -1;
  }
  for (int i = 0; i < t->nout; i++) {
    stof_tensor *got = NULL;
    if ((st = stof_plan_output(p, i, &got))) {
      snprintf(why, n, "output %d: %s", i, st == STOF_ERR_NOMEM ? "out of memory" : stof_ctx_message(t->ctx));
      stof_ctx_clear_error(t->ctx);
      *fail = st;
      return -1;
    }
    const stof_tensor *want = t->ref[i];
    int64_t ne = stof_tensor_numel(got);
    if (i == 0 && ne > 0 && uses_template(t, t->o->inject_wrong))
      stof_tensor_store(got, 0, stof_tensor_load(got, 0) * 1.5 + 1.0); /* fault injection (tests) */
    double num = 0, den = 0;
    int64_t nan_at = -1;
    for (int64_t e = 0; e < ne; e++) {
      double a = stof_tensor_load(got, e), b = stof_tensor_load(want, e);
      if (isnan(a) && !isnan(b) && nan_at < 0) nan_at = e;
      if (isnan(a) || isnan(b) || isinf(a) || isinf(b)) continue;
      num += (a - b) * (a - b);
      den += b * b;
    }
    stof_tensor_free(got);
    double rel = den > 0 ? sqrt(num / den) : sqrt(num);
    double tol = t->outputs[i]->dtype == STOF_DTYPE_F32 || t->outputs[i]->dtype == STOF_DTYPE_F64 ? 1e-5 : 1e-2;
    if (nan_at >= 0) {
      snprintf(why, n, "output %s: NaN at element %lld where the reference has a number", t->outputs[i]->name,
               (long long)nan_at);
      return 0;
    }
    if (!(rel <= tol)) {
      snprintf(why, n, "output %s: relative L2 error %.3g against the reference (at most %g)", t->outputs[i]->name, rel,
               tol);
      return 0;
    }
  }
  return 1;
}

void search_copy_cfg(cfg *dst, const cfg *src, int n) { memcpy(dst, src, sizeof *dst * (size_t)n); }

/* The choice segment i runs with in the current configuration (-1: no hook saw it). */
int search_cur_choice(const tuner *t, int i) {
  const seg *s = &t->segs[i];
  if (!s->seen) return -1;
  int k = t->cur[i].tmpl;
  if (k == DEFAULT) k = default_tmpl(t, s);
  return choice_of(s, k);
}

/* Whether a segment runs a choice no candidate has been checked with yet. */
static int has_unverified(const tuner *t) {
  for (int i = 0; i < t->nseg; i++) {
    int ch = t->segs[i].owner == i ? search_cur_choice(t, i) : -1;
    if (ch >= 0 && !t->segs[i].verified[ch]) return 1;
  }
  return 0;
}

/* After a check: the choices of the candidate are verified, or the unverified ones bad. */
static void mark_checked(tuner *t, int ok) {
  for (int i = 0; i < t->nseg; i++) {
    int ch = t->segs[i].owner == i ? search_cur_choice(t, i) : -1;
    if (ch < 0 || t->segs[i].verified[ch]) continue;
    if (ok) t->segs[i].verified[ch] = 1;
    else t->segs[i].bad[ch] = 1;
  }
}

/* Makes the current candidate the best (its plan kept). */
static void take_best(tuner *t, stof_plan *p, double ms) {
  if (t->best_plan) stof_plan_free(t->best_plan);
  t->best_plan = p;
  t->best_ms = ms;
  memcpy(t->best_code, t->code, sizeof *t->code * (size_t)t->nop);
  search_copy_cfg(t->best_cfg, t->cur, t->nslot);
  memcpy(t->best_inval, t->inval, sizeof t->inval);
}

static int seen_before(tuner *t);

/* The current candidate failed with status st (why: the message): counted, recorded, its
 * untried templates not sampled again (this scheme); p (may be NULL) freed. Returns -1. */
static int failed(tuner *t, stof_plan *p, const int *code, stof_status st, const char *why) {
  mark_checked(t, 0);
  t->last_fail = st;
  t->res.failed++;
  t->res.pruned += t->pruning;
  snprintf(t->what, sizeof t->what, "failed: %.200s", why);
  record(t, code, 0, st, why);
  stof_plan_free(p);
  search_progress(t);
  return -1;
}

static int uses_template(const tuner *t, const char *name);

/* The trial of search_trial (below), without its clock. */
static int trial(tuner *t, double *ms_out) {
  stof_plan *p = NULL;
  double ms = 0;
  int reps = t->o->reps > 0 ? t->o->reps : 10, warmup = t->o->warmup > 0 ? t->o->warmup : 2;
  int *code = t->code;
  *ms_out = 0;
  if (seen_before(t)) return -2; /* measured already: not again */
  t->res.trials++;
  t->pruning = 0;
  t->tr_build = t->tr_time = t->tr_check = 0;
  t->outcome = TRIAL_RAN;
  double c0 = search_now();
  stof_status st = search_build(t, code, &p);
  if (!st) st = search_learn(t, p);
  t->tr_build = search_now() - c0;
  c0 = search_now();
  for (int i = 0; !st && i < t->nseg; i++) {
    int ch = t->segs[i].owner == i ? search_cur_choice(t, i) : -1;
    if (ch >= 0) t->segs[i].tried[ch] = 1;
  }
  if (!st && t->best_plan && t->best_ms > 0) {
    /* far slower than the best so far (a generated GEMM where cuBLASLt runs, a fused
     * segment whose generated kernel recomputes its producers, at a large shape: seconds,
     * even minutes, a run): a first run segment by segment is abandoned past twice the cut
     * (it costs one slow segment, not a whole forward); then two timed runs say so, and
     * the budget is not spent on more */
    double probe = 0, again = 0, wall = 0;
    int complete = 0;
    c0 = search_now();
    if (!uses_template(t, t->o->inject_hang)) /* injected: abandoned before anything runs */
      st = stof_plan_run_bounded(p, 2 * SLOW_FACTOR * t->best_ms + PROBE_SLACK_MS, &wall, &complete);
    if (!st && !complete) {
      /* recorded with a lower bound of its time: the run had taken over twice the cut */
      *ms_out = fmax(wall, 2 * SLOW_FACTOR * t->best_ms);
      t->tr_time = search_now() - c0;
      snprintf(t->what, sizeof t->what, "abandoned after %.1f ms of its first run (best %.4f ms): at least %.4f ms",
               wall, t->best_ms, *ms_out);
      t->res.cut_slow++;
      t->res.abandoned++;
      t->outcome = TRIAL_ABANDONED;
      record(t, code, *ms_out, STOF_OK, t->what);
      stof_plan_free(p);
      search_progress(t);
      return 0;
    }
    /* one untimed run first: on the GPU it captures the CUDA graph, which the bounded run
     * (kernel by kernel) did not, and a timed run that captured would count the capture */
    if (!st) st = stof_plan_time(p, 1, 1, &probe);
    warmup = warmup > 3 ? warmup - 3 : 0; /* those three runs were part of the warm-up */
    if (!st && uses_template(t, t->o->inject_slow)) probe *= 10;
    if (!st && probe > SLOW_FACTOR * t->best_ms) { /* once more, so one noisy run cuts nothing */
      st = stof_plan_time(p, 1, 0, &again);
      if (!st && uses_template(t, t->o->inject_slow)) again *= 10;
      if (again < probe) probe = again;
    }
    if (!st && probe > SLOW_FACTOR * t->best_ms) {
      *ms_out = probe;
      t->tr_time = search_now() - c0;
      snprintf(t->what, sizeof t->what, "cut: %.4f ms, over %dx the best", probe, SLOW_FACTOR);
      t->res.cut_slow++;
      t->outcome = TRIAL_CUT;
      record(t, code, probe, STOF_OK, NULL);
      stof_plan_free(p);
      search_progress(t);
      return 0;
    }
  }
  if (!st) st = stof_plan_time(p, reps, warmup, &ms);
  if (!st && uses_template(t, t->o->inject_slow)) ms *= 10;
  t->tr_time = search_now() - c0;
  if (st) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", st == STOF_ERR_NOMEM ? "out of memory" : stof_ctx_message(t->ctx));
    stof_ctx_clear_error(t->ctx);
    return failed(t, p, code, st, msg);
  }
  int better = !t->best_plan || ms < t->best_ms;
  if (better && t->best_plan) {
    /* a would-be best is timed a second time and keeps the slower median: among many
     * candidates within the noise of each other, the luckiest sample would win otherwise */
    double again = 0;
    if (stof_plan_time(p, reps, 0, &again) == STOF_OK && again > ms) ms = again;
    stof_ctx_clear_error(t->ctx);
    better = ms < t->best_ms;
  }
  *ms_out = ms;
  /* checked: a candidate that would become the best, and one that runs a template on a
   * segment for the first time (a wrong template is then dropped at once) */
  if (!better && !has_unverified(t)) {
    record(t, code, ms, STOF_OK, NULL);
    stof_plan_free(p);
    search_progress(t);
    return 0;
  }
  char why[512];
  stof_status cst = STOF_OK;
  c0 = search_now();
  int ok = check(t, p, why, sizeof why, &cst);
  t->tr_check = search_now() - c0;
  if (ok < 0) { /* it could not run: a failed candidate, not a wrong one */
    *ms_out = 0;
    return failed(t, p, code, cst, why);
  }
  mark_checked(t, ok);
  if (!ok) {
    t->res.rejected++;
    t->outcome = TRIAL_REJECTED;
    snprintf(t->what, sizeof t->what, "rejected: %.200s", why);
    record(t, code, ms, STOF_ERR_CHECK, why);
    stof_plan_free(p);
    search_progress(t);
    return 0;
  }
  record(t, code, ms, STOF_OK, NULL);
  if (!better) {
    stof_plan_free(p);
    search_progress(t);
    return 0;
  }
  take_best(t, p, ms);
  snprintf(t->what, sizeof t->what, "new best %.4f ms", ms);
  search_progress(t);
  return 1;
}

static const char *const outcome_names[] = {"ran", "cut", "abandoned, at least", "rejected"};

/* The trace's line for the trial just made (r and ms: search_trial's). */
static void trace_trial(const tuner *t, int r, double ms, double secs) {
  char cfgs[512];
  size_t n = 0;
  cfgs[0] = 0;
  for (int i = 0; i < t->nseg && n + 64 < sizeof cfgs; i++) { /* the classes off their default */
    const cfg *c = &t->cur[i];
    if (t->segs[i].owner != i || (c->tmpl == DEFAULT && !c->n)) continue;
    n += (size_t)snprintf(cfgs + n, sizeof cfgs - n, " %d:%s", i, tmpl_name(t, c->tmpl));
    for (int k = 0; k < c->n && n + 32 < sizeof cfgs; k++)
      n += (size_t)snprintf(cfgs + n, sizeof cfgs - n, "%s%.20s=%d", k ? "," : "(", c->name[k], c->dec[k]);
    if (c->n && n + 2 < sizeof cfgs) n += (size_t)snprintf(cfgs + n, sizeof cfgs - n, ")");
  }
  fprintf(stderr, "stof tune: trace: %6.2f s stage %d trial %d: %s %.4f ms; %.2f s (build %.2f, time %.2f, check %.2f)%s%s\n",
          search_elapsed(t), t->stage, t->res.trials,
          r == 1 ? "best" : r < 0 ? "failed" : outcome_names[t->outcome], ms, secs, t->tr_build, t->tr_time,
          t->tr_check, cfgs[0] ? "; off default:" : "", cfgs);
  if (r < 0) fprintf(stderr, "stof tune: trace:   %s\n", t->what);
}

/* Builds, measures and records the candidate (t->code / t->cur / t->inval); when faster
 * than the best (or the first), checks it and takes it. Returns 1 when it became the best,
 * 0 when not, -1 when it failed, -2 when it was measured before (then nothing is done);
 * *ms_out gets its time (0 when it failed or was skipped). */
int search_trial(tuner *t, double *ms_out) {
  double start = search_now();
  int r = trial(t, ms_out);
  if (r != -2) t->trial_s = fmax(t->trial_s, search_now() - start);
  if (r != -2 && t->o->trace) trace_trial(t, r, *ms_out, search_now() - start);
  return r;
}

/* ---------------------------------------------------------------- compiling ahead */

/* Adds the compile jobs of the current candidate to t->jobs (failures are the candidate's,
 * found again when it is built). */
void search_collect_jobs(tuner *t) {
  char *text = NULL, *knobs = NULL;
  stof_plan_hooks hooks;
  stof_plan_opts po;
  if (cand_opts(t, t->code, &hooks, &po, &text, &knobs)) {
    stof_ctx_clear_error(t->ctx);
    return;
  }
  int n = 0;
  stof_compile_job **j = NULL;
  if (stof_plan_jobs(t->g, t->nout, t->outputs, &po, &n, &j) == STOF_OK && n) {
    if (t->njob + n > t->capjob) {
      int ncap = (t->njob + n) * 2;
      stof_compile_job **g = stof_ctx_realloc(t->ctx, t->jobs, sizeof *g * (size_t)t->capjob, sizeof *g * (size_t)ncap);
      if (g) {
        t->jobs = g;
        t->capjob = ncap;
      }
    }
    for (int i = 0; i < n; i++) {
      if (t->njob < t->capjob) t->jobs[t->njob++] = j[i];
      else stof_compile_job_free(j[i]);
    }
  }
  stof_ctx_clear_error(t->ctx);
  if (j) stof_ctx_dealloc(t->ctx, j, sizeof *j * (size_t)n);
  search_free_text(t, text);
  search_free_text(t, knobs);
}

/* Compiles the collected jobs on the compiling threads, then drops them. */
void search_compile_jobs(tuner *t) {
  if (t->njob) {
    int nthread = t->o->threads > 0 ? t->o->threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (nthread < 1) nthread = 1;
    if (nthread > 16) nthread = 16;
    double t0 = search_now();
    if (stof_compile_jobs(t->ctx, t->njob, t->jobs, nthread, NULL) != STOF_OK) stof_ctx_clear_error(t->ctx);
    t->res.compile_s += search_now() - t0;
    t->res.compiled += t->njob;
    if (t->o->trace)
      fprintf(stderr, "stof tune: trace: %6.2f s stage %d: %d kernels compiled ahead on %d threads in %.2f s\n",
              search_elapsed(t), t->stage, t->njob, nthread, search_now() - t0);
  }
  for (int i = 0; i < t->njob; i++) stof_compile_job_free(t->jobs[i]);
  t->njob = 0;
}

/* A hash of the current candidate (scheme, configuration, intrinsic knobs). */
uint64_t search_cand_hash(const tuner *t) {
  uint64_t h = stof_hash_bytes(STOF_HASH_INIT, t->code, sizeof *t->code * (size_t)t->nop);
  for (int i = 0; i < t->nslot; i++) {
    const cfg *c = &t->cur[i];
    /* the default named (the vendor GEMM where it runs the segment, the first tensor-core
     * template that takes a generated GEMM on the GPU, else auto) is the default: the same
     * plan (templates' first decisions are fixed, not drawn) */
    int k = c->tmpl;
    if (i < t->nseg && t->segs[i].seen && k == default_tmpl(t, &t->segs[i])) k = DEFAULT;
    if (k == DEFAULT && !c->n) continue;
    h = stof_hash_bytes(h, &i, sizeof i);
    h = stof_hash_bytes(h, &k, sizeof k);
    for (int k = 0; k < c->n; k++) {
      h = stof_hash_bytes(h, c->name[k], strlen(c->name[k]) + 1);
      h = stof_hash_bytes(h, &c->dec[k], sizeof c->dec[k]);
    }
  }
  return stof_hash_bytes(h, t->inval, sizeof t->inval);
}

/* Whether the candidate was measured already (then not again); remembers it otherwise. */
static int seen_before(tuner *t) {
  uint64_t h = search_cand_hash(t);
  for (int i = 0; i < t->nseen; i++)
    if (t->seen[i] == h) return 1;
  if (t->nseen == t->capseen) {
    int ncap = t->capseen ? t->capseen * 2 : 64;
    uint64_t *g = stof_ctx_realloc(t->ctx, t->seen, sizeof *g * (size_t)t->capseen, sizeof *g * (size_t)ncap);
    if (!g) return 0;
    t->seen = g;
    t->capseen = ncap;
  }
  t->seen[t->nseen++] = h;
  return 0;
}
