/*
 * The two-stage search (DESIGN.md section 7, docs/SEARCH.md): for a model graph on a
 * target, the fusion scheme (stage 1) and each segment's template and knob decisions
 * (stage 2) that run fastest, every candidate built as an exec/ plan and measured on the
 * target, every candidate that would become the best checked against the reference first.
 *
 * A candidate is a scheme (a segment number per op, the plan's code) and a configuration:
 * per segment, a template (-1 the vendor GEMM, else an index into the templates, or
 * DEFAULT: the vendor GEMM where it can run, else "auto") and knob decisions by knob name;
 * per intrinsic (GPU), knob values. The plan calls back (stof_plan_hooks): generate_gemm
 * asks whether a GEMM segment runs on the vendor GEMM, schedule applies a template to a
 * generated segment: the template runs on a clone of the fresh schedule, its trace gets
 * the configuration's decisions and is replayed into the schedule, and the knobs it made
 * (names, candidate counts) are remembered per (segment, template) for sampling.
 *
 * Segments are indexed in the order the plan runs them, which for a fixed scheme does not
 * change, so a configuration is an array by segment index. Identical segments (the plan
 * shares one implementation among them) form a class tuned once: its owner's decisions
 * rule, its members take the owner's template so that they keep sharing.
 *
 * Invariants: candidates never fail the search (a failure is a record); every OK record of
 * a run is at least as slow as a record of that run that passed the check, so the
 * database's best record has always passed it; the tuner owns every plan it builds and
 * frees all but the one returned.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <stof/kernels.h>
#include <stof/search.h>

#define MAXK 16      /* knobs remembered per (segment, template) */
#define MAXC 8       /* templates tried per segment */
#define NAMEL 64
#define MAXIN 4      /* distinct intrinsics tuned */
#define DEFAULT (-2) /* the template: the vendor GEMM where it can run, else "auto" */
#define VENDOR (-1)

typedef struct dom { /* the knobs a template made for a segment */
  int known, n;
  char name[MAXK][NAMEL];
  int ncand[MAXK];
} dom;

typedef struct seg {
  int seen;          /* a hook saw it: choices are set */
  int gemm;          /* the vendor GEMM can run it */
  int owner;         /* the first identical segment (itself when none) */
  int kind;          /* stof_seg_kind in the last build */
  int nci;           /* compute-intensive ops */
  int nchoice;
  int tmpl[MAXC];    /* per choice: VENDOR or a template index */
  dom d[MAXC];
  unsigned char tried[MAXC];    /* a candidate with this choice was measured */
  unsigned char verified[MAXC]; /* a candidate with this choice passed the check */
  unsigned char bad[MAXC];      /* ... failed it: never sampled again (this scheme) */
} seg;

typedef struct cfg {
  int tmpl;          /* DEFAULT, VENDOR or a template index */
  int n;
  char name[MAXK][NAMEL];
  int dec[MAXK];     /* decisions by knob name */
} cfg;

typedef struct tuner {
  stof_ctx *ctx;
  stof_graph *g;
  int nout;
  const stof_op *const *outputs;
  const stof_tune_opts *o;
  int cuda;
  int nt;                  /* templates: [0] "auto", then the user's */
  stof_template *t;
  int nop;                 /* the plan's ops but placeholders, id order */
  const stof_op **ops;
  int nslot;               /* segments allocated for (>= any scheme's segment count) */
  int *code;               /* the current scheme: segment per op (run order after a build) */
  int nseg;                /* segments of the current scheme (after a build) */
  seg *segs;
  cfg *cur;                /* the configuration being built */
  /* intrinsics (GPU): knob values, 0 = the selector's */
  int nin;
  const stof_intrin *in[MAXIN];
  int inval[MAXIN][STOF_INTRIN_MAX_KNOBS];
  int best_inval[MAXIN][STOF_INTRIN_MAX_KNOBS];
  stof_tensor **ref;       /* reference outputs (CPU) */
  stof_tensor **dfeed;     /* GPU: device copies of the feed's CPU tensors (candidates borrow
                              them; the plan returned is bound to the caller's tensors) */
  /* the best so far */
  double best_ms;
  int *best_code;
  cfg *best_cfg;
  stof_plan *best_plan;
  stof_tune_result res;
  double t0, budget;
  int stage;
  char what[256];
  char workload[128], device[256];
  int last_bar;
  char label[NAMEL + 16];
  stof_status last_fail;   /* the status of the last candidate that failed */
  int njob, capjob;        /* compile jobs collected ahead of a round */
  stof_compile_job **jobs;
  int nseen, capseen;      /* hashes of the candidates measured */
  uint64_t *seen;
} tuner;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double elapsed(const tuner *t) { return now_s() - t->t0; }

static int out_of_budget(const tuner *t) {
  return elapsed(t) >= t->budget || (t->o->max_trials > 0 && t->res.trials >= t->o->max_trials);
}

static const char *tmpl_name(const tuner *t, int k) {
  return k == VENDOR ? "vendor" : k == DEFAULT ? "default" : t->t[k].name;
}

/* ---------------------------------------------------------------- progress */

static void progress(tuner *t) {
  stof_tune_progress p = {t->stage, t->res.trials, t->res.failed, t->res.rejected, elapsed(t), t->budget,
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

static int hook_generate_gemm(void *ud, const stof_plan_seg_req *r) {
  tuner *t = ud;
  if (r->index >= t->nslot) return 0;
  see(t, r, 1);
  int k = t->cur[r->index].tmpl;
  return k >= 0;
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
  int k = c->tmpl >= 0 ? c->tmpl : 0;
  if (k == 0 && t->cuda) /* pruned before anything compiles: see see() */
    for (int i = 0; i < r->nop; i++)
      if (stof_plan_op_is_gemm(r->op[i]))
        return stof_ctx_error(ctx, STOF_ERR_UNSUPPORTED,
                              "tune: pruned: segment %d (%s) puts GEMM %s in generated code, which template auto "
                              "would run without tensor cores; only a user template may take it",
                              r->index, r->name, r->op[i]->name);
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
  snprintf(t->label, sizeof t->label, "template %s", t->t[k].name);
  r->label = t->label;
done:
  if (tr) stof_trace_free(tr);
  stof_sched_free(clone);
  return st;
}

/* ---------------------------------------------------------------- the built-in template */

static stof_status auto_schedule(void *ud, const stof_plan_seg_req *r, stof_sched *s) {
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

static void free_text(tuner *t, char *s) {
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
    free_text(t, *out);
    *out = NULL;
    return STOF_OK;
  }
  return stof_buf_finish(&b, out);
}

/* Binds the feed to the plan's inputs. */
static stof_status bind_feed(tuner *t, stof_plan *p) {
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
    free_text(t, *text);
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
static stof_status build(tuner *t, const int *code, stof_plan **out) {
  char *text = NULL, *knobs = NULL;
  *out = NULL;
  stof_plan_hooks hooks;
  stof_plan_opts po;
  stof_status st = cand_opts(t, code, &hooks, &po, &text, &knobs);
  if (st) return st;
  stof_plan *p = NULL;
  st = stof_plan_new(t->g, t->nout, t->outputs, &po, &p);
  free_text(t, text);
  free_text(t, knobs);
  if (!st) st = bind_feed(t, p);
  if (st) {
    stof_plan_free(p);
    return st;
  }
  *out = p;
  return STOF_OK;
}

/* After a build: the scheme in run order, each segment's owner, kind and compute-intensive
 * ops; members of a class take their owner's template. */
static stof_status learn(tuner *t, stof_plan *p) {
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
static stof_status cfg_record(tuner *t, const cfg *c, int nseg, int (*val)[STOF_INTRIN_MAX_KNOBS], int *n,
                              char ***names, int64_t **values) {
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
  int n = 0;
  int cap = 0;
  for (int i = 0; i < t->nseg; i++) cap += 1 + t->cur[i].n;
  for (int i = 0; i < t->nin; i++) cap += t->in[i]->nknob;
  if (code_text(t, code, &text) || cfg_record(t, t->cur, t->nseg, t->inval, &n, &names, &values)) {
    free_text(t, text);
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
  free_text(t, text);
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

static void copy_cfg(cfg *dst, const cfg *src, int n) { memcpy(dst, src, sizeof *dst * (size_t)n); }

/* The choice segment i runs with in the current configuration (-1: no hook saw it). */
static int cur_choice(const tuner *t, int i) {
  const seg *s = &t->segs[i];
  if (!s->seen) return -1;
  int k = t->cur[i].tmpl;
  if (k == DEFAULT) k = s->gemm ? VENDOR : 0;
  return choice_of(s, k);
}

/* Whether a segment runs a choice no candidate has been checked with yet. */
static int has_unverified(const tuner *t) {
  for (int i = 0; i < t->nseg; i++) {
    int ch = t->segs[i].owner == i ? cur_choice(t, i) : -1;
    if (ch >= 0 && !t->segs[i].verified[ch]) return 1;
  }
  return 0;
}

/* After a check: the choices of the candidate are verified, or the unverified ones bad. */
static void mark_checked(tuner *t, int ok) {
  for (int i = 0; i < t->nseg; i++) {
    int ch = t->segs[i].owner == i ? cur_choice(t, i) : -1;
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
  copy_cfg(t->best_cfg, t->cur, t->nslot);
  memcpy(t->best_inval, t->inval, sizeof t->inval);
}

static int seen_before(tuner *t);

/* Builds, measures and records the candidate (t->code / t->cur / t->inval); when faster
 * than the best (or the first), checks it and takes it. Returns 1 when it became the best,
 * 0 when not, -1 when it failed, -2 when it was measured before (then nothing is done);
 * *ms_out gets its time (0 when it failed or was skipped). */
static int trial(tuner *t, double *ms_out) {
  stof_plan *p = NULL;
  double ms = 0;
  int reps = t->o->reps > 0 ? t->o->reps : 10, warmup = t->o->warmup > 0 ? t->o->warmup : 2;
  int *code = t->code;
  *ms_out = 0;
  if (seen_before(t)) return -2; /* measured already: not again */
  t->res.trials++;
  stof_status st = build(t, code, &p);
  if (!st) st = learn(t, p);
  for (int i = 0; !st && i < t->nseg; i++) {
    int ch = t->segs[i].owner == i ? cur_choice(t, i) : -1;
    if (ch >= 0) t->segs[i].tried[ch] = 1;
  }
  if (!st) st = stof_plan_time(p, reps, warmup, &ms);
  if (st) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", stof_ctx_message(t->ctx));
    if (st == STOF_ERR_NOMEM) snprintf(msg, sizeof msg, "out of memory");
    stof_ctx_clear_error(t->ctx);
    mark_checked(t, 0); /* a template that fails is not sampled again (this scheme) */
    t->last_fail = st;
    t->res.failed++;
    snprintf(t->what, sizeof t->what, "failed: %.200s", msg);
    record(t, code, 0, st, msg);
    stof_plan_free(p);
    progress(t);
    return -1;
  }
  *ms_out = ms;
  int better = !t->best_plan || ms < t->best_ms;
  /* checked: a candidate that would become the best, and one that runs a template on a
   * segment for the first time (a wrong template is then dropped at once) */
  if (!better && !has_unverified(t)) {
    record(t, code, ms, STOF_OK, NULL);
    stof_plan_free(p);
    progress(t);
    return 0;
  }
  char why[512];
  stof_status cst = STOF_OK;
  int ok = check(t, p, why, sizeof why, &cst);
  if (ok < 0) { /* it could not run: a failed candidate, not a wrong one */
    *ms_out = 0;
    mark_checked(t, 0);
    t->last_fail = cst;
    t->res.failed++;
    snprintf(t->what, sizeof t->what, "failed: %.200s", why);
    record(t, code, 0, cst, why);
    stof_plan_free(p);
    progress(t);
    return -1;
  }
  mark_checked(t, ok);
  if (!ok) {
    t->res.rejected++;
    snprintf(t->what, sizeof t->what, "rejected: %.200s", why);
    record(t, code, ms, STOF_ERR_CHECK, why);
    stof_plan_free(p);
    progress(t);
    return 0;
  }
  record(t, code, ms, STOF_OK, NULL);
  if (!better) {
    stof_plan_free(p);
    progress(t);
    return 0;
  }
  take_best(t, p, ms);
  snprintf(t->what, sizeof t->what, "new best %.4f ms", ms);
  progress(t);
  return 1;
}

/* ---------------------------------------------------------------- compiling ahead */

/* Adds the compile jobs of the current candidate to t->jobs (failures are the candidate's,
 * found again when it is built). */
static void collect_jobs(tuner *t) {
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
  free_text(t, text);
  free_text(t, knobs);
}

/* Compiles the collected jobs on the compiling threads, then drops them. */
static void compile_jobs(tuner *t) {
  if (t->njob) {
    int nthread = t->o->threads > 0 ? t->o->threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (nthread < 1) nthread = 1;
    if (nthread > 16) nthread = 16;
    double t0 = now_s();
    if (stof_compile_jobs(t->ctx, t->njob, t->jobs, nthread, NULL) != STOF_OK) stof_ctx_clear_error(t->ctx);
    t->res.compile_s += now_s() - t0;
    t->res.compiled += t->njob;
  }
  for (int i = 0; i < t->njob; i++) stof_compile_job_free(t->jobs[i]);
  t->njob = 0;
}

/* A hash of the current candidate (scheme, configuration, intrinsic knobs). */
static uint64_t cand_hash(const tuner *t) {
  uint64_t h = stof_hash_bytes(STOF_HASH_INIT, t->code, sizeof *t->code * (size_t)t->nop);
  for (int i = 0; i < t->nslot; i++) {
    const cfg *c = &t->cur[i];
    /* the default named (auto, or the vendor GEMM where it runs the segment) is the
     * default: the same plan */
    int k = c->tmpl;
    if (i < t->nseg && t->segs[i].seen && k == (t->segs[i].gemm ? VENDOR : 0))
      k = DEFAULT;
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
  uint64_t h = cand_hash(t);
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

/* ---------------------------------------------------------------- sampling */

static uint64_t rnd(tuner *t) { return stof_ctx_rand_u64(t->ctx); }

/* A random configuration of class (owner) i: a template among its choices (one not tried
 * on the segment yet first, never one that failed), a random decision of each knob that
 * template is known to make; members take the template. */
static void sample_class(tuner *t, int i) {
  seg *s = &t->segs[i];
  cfg *c = &t->cur[i];
  if (!s->seen || s->nchoice == 0) return;
  /* a template not tried on this segment yet comes first, then any that is not bad */
  int good[MAXC], ngood = 0;
  for (int k = 0; k < s->nchoice; k++)
    if (!s->bad[k] && !s->tried[k]) good[ngood++] = k;
  if (!ngood)
    for (int k = 0; k < s->nchoice; k++)
      if (!s->bad[k]) good[ngood++] = k;
  if (!ngood) return;
  int ch = good[rnd(t) % (uint64_t)ngood];
  c->tmpl = s->tmpl[ch];
  c->n = 0;
  const dom *d = &s->d[ch];
  for (int k = 0; d->known && k < d->n; k++)
    if (d->ncand[k] > 1) {
      snprintf(c->name[c->n], NAMEL, "%s", d->name[k]);
      c->dec[c->n++] = (int)(rnd(t) % (uint64_t)d->ncand[k]);
    }
  for (int m = 0; m < t->nseg; m++)
    if (m != i && t->segs[m].owner == i) {
      t->cur[m].tmpl = c->tmpl;
      t->cur[m].n = 0;
    }
}

/* Whether class i has more than one configuration (or may have: a template not tried yet). */
static int tunable(const tuner *t, int i) {
  const seg *s = &t->segs[i];
  if (s->owner != i || !s->seen) return 0;
  if (s->nchoice > 1) return 1;
  for (int k = 0; s->nchoice == 1 && s->d[0].known && k < s->d[0].n; k++)
    if (s->d[0].ncand[k] > 1) return 1;
  return 0;
}

/* One knob of one intrinsic set to another of its candidates (a step from the best: most
 * joint settings of tile, warps and stages are illegal, and the plan refuses those before
 * compiling anything). */
static void sample_intrinsics(tuner *t) {
  if (!t->nin) return;
  int i = (int)(rnd(t) % (uint64_t)t->nin);
  if (!t->in[i]->nknob) return;
  int k = (int)(rnd(t) % (uint64_t)t->in[i]->nknob);
  const stof_intrin_knob *kn = &t->in[i]->knob[k];
  if (kn->ncand > 1) t->inval[i][k] = (int)kn->cand[rnd(t) % (uint64_t)kn->ncand];
}

static void reset_cfg(tuner *t) {
  for (int i = 0; i < t->nslot; i++) t->cur[i] = (cfg){DEFAULT, 0, {{0}}, {0}};
  memset(t->inval, 0, sizeof t->inval);
}

/* ---------------------------------------------------------------- stage 1 */

/* Measures the scheme in t->code: the default configuration, then samples-1 random ones;
 * the best time in *ms (0 when every one failed). The segments are reset for this scheme. */
static void measure_scheme(tuner *t, double *ms) {
  int samples = t->o->stage1_samples > 0 ? t->o->stage1_samples : 3;
  *ms = 0;
  memset(t->segs, 0, sizeof *t->segs * (size_t)t->nslot);
  reset_cfg(t);
  double best = 0, m;
  int *code0 = stof_ctx_alloc(t->ctx, sizeof *code0 * (size_t)t->nop);
  if (!code0) return;
  memcpy(code0, t->code, sizeof *code0 * (size_t)t->nop);
  for (int k = 0; k < samples && !out_of_budget(t); k++) {
    memcpy(t->code, code0, sizeof *code0 * (size_t)t->nop);
    if (k > 0) {
      for (int i = 0; i < t->nseg; i++)
        if (tunable(t, i)) sample_class(t, i);
      sample_intrinsics(t);
    }
    if (trial(t, &m) >= 0 && m > 0 && (best == 0 || m < best)) best = m;
    if (k == 0 && m == 0) break; /* the scheme does not build */
  }
  memcpy(t->code, code0, sizeof *code0 * (size_t)t->nop);
  stof_ctx_dealloc(t->ctx, code0, sizeof *code0 * (size_t)t->nop);
  *ms = best;
}

/* The ops of segment s of code (run order). */
static int seg_first(const tuner *t, const int *code, int s) {
  for (int i = 0; i < t->nop; i++)
    if (code[i] == s) return i;
  return -1;
}
static int seg_last(const tuner *t, const int *code, int s) {
  for (int i = t->nop - 1; i >= 0; i--)
    if (code[i] == s) return i;
  return -1;
}

typedef enum move_kind { MOVE_EXPAND, MOVE_SEIZE_NEXT, MOVE_SEIZE_PREV, MOVE_COMPETE } move_kind;

/* Applies a move at segment a (a and a + 1, or a - 1 and a + 1 for compete) and at every
 * position whose segments are of the same classes (identical layers move together): into
 * code (from base). Returns whether anything changed and the move is legal by the counts. */
static int apply_move(const tuner *t, const int *base, int *code, move_kind mk, int a) {
  memcpy(code, base, sizeof *code * (size_t)t->nop);
  const seg *S = t->segs;
  int n = t->nseg, changed = 0;
  for (int x = 0; x < n; x++) {
    int y = mk == MOVE_COMPETE ? x - 1 : x + 1, z = x + 1;
    if (y < 0 || z >= n || y >= n) continue;
    if (mk == MOVE_COMPETE) {
      if (a < 1 || a + 1 >= n) return 0;
      if (S[x].owner != S[a].owner || S[y].owner != S[a - 1].owner || S[z].owner != S[a + 1].owner) continue;
      /* x (no CI op) between y and z (CI ops, not intrinsics): to the one with fewer */
      int to = S[y].nci <= S[z].nci ? y : z;
      if (S[to].nci + S[x].nci > 2) continue;
      for (int i = 0; i < t->nop; i++)
        if (code[i] == x) code[i] = to, changed = 1;
      continue;
    }
    if (S[x].owner != S[a].owner || S[y].owner != S[a + 1].owner) continue;
    if (mk == MOVE_EXPAND) {
      if (S[x].nci + S[y].nci > 2) continue;
      for (int i = 0; i < t->nop; i++)
        if (code[i] == y) code[i] = x, changed = 1;
    } else if (mk == MOVE_SEIZE_NEXT) { /* x (CI) takes y's first op */
      int i = seg_first(t, base, y);
      if (i >= 0 && seg_last(t, base, y) != i) code[i] = x, changed = 1;
    } else { /* MOVE_SEIZE_PREV: y (CI) takes x's last op */
      int i = seg_last(t, base, x);
      if (i >= 0 && seg_first(t, base, x) != i) code[i] = y, changed = 1;
    }
  }
  return changed;
}

/* Whether the move at a is one the rules allow (kinds and compute-intensive counts). */
static int move_allowed(const tuner *t, move_kind mk, int a) {
  const seg *S = t->segs;
  int n = t->nseg;
  if (mk == MOVE_COMPETE) {
    if (a < 1 || a + 1 >= n) return 0;
    return S[a].kind != STOF_SEG_INTRIN && S[a].nci == 0 && S[a - 1].kind != STOF_SEG_INTRIN &&
           S[a + 1].kind != STOF_SEG_INTRIN && S[a - 1].nci > 0 && S[a + 1].nci > 0;
  }
  if (a + 1 >= n || S[a].kind == STOF_SEG_INTRIN || S[a + 1].kind == STOF_SEG_INTRIN) return 0;
  if (mk == MOVE_EXPAND) return S[a].nci + S[a + 1].nci <= 2;
  if (mk == MOVE_SEIZE_NEXT) return S[a].nci > 0 && S[a + 1].nci == 0;
  return S[a + 1].nci > 0 && S[a].nci == 0; /* SEIZE_PREV */
}

static const char *const move_names[] = {"expand", "seize", "seize", "compete"};

static stof_status stage1(tuner *t, double stage_budget) {
  stof_ctx *ctx = t->ctx;
  t->stage = 1;
  size_t no = (size_t)t->nop, ns = (size_t)t->nslot;
  int maxmove = 4 * t->nslot;
  int *base = stof_ctx_alloc(ctx, sizeof *base * no);
  int *codes = stof_ctx_alloc(ctx, sizeof *codes * no * (size_t)maxmove);
  int *mkind = stof_ctx_alloc(ctx, sizeof *mkind * (size_t)maxmove), *mat = stof_ctx_alloc(ctx, sizeof *mat * (size_t)maxmove);
  seg *snap = stof_ctx_alloc(ctx, sizeof *snap * ns);
  unsigned char *tried = stof_ctx_alloc(ctx, ns * 4);
  stof_status st = STOF_OK;
  if (!base || !codes || !mkind || !mat || !snap || !tried) {
    st = STOF_ERR_NOMEM;
    goto done;
  }
  int improved = 1;
  while (improved && elapsed(t) < stage_budget && !out_of_budget(t)) {
    improved = 0;
    /* the moves of the current best scheme, one position per class (the move applies to
     * every position of the same classes) */
    memcpy(base, t->best_code, sizeof *base * no);
    memcpy(snap, t->segs, sizeof *snap * ns); /* the facts of the best scheme's last build */
    int nseg = t->nseg, nmove = 0;
    memset(tried, 0, ns * 4);
    for (int mk = 0; mk < 4; mk++)
      for (int a = 0; a < nseg && nmove < maxmove; a++) {
        if (!move_allowed(t, (move_kind)mk, a) || tried[(size_t)mk * ns + (size_t)snap[a].owner]) continue;
        tried[(size_t)mk * ns + (size_t)snap[a].owner] = 1;
        if (!apply_move(t, base, codes + no * (size_t)nmove, (move_kind)mk, a)) continue;
        mkind[nmove] = mk;
        mat[nmove++] = a;
      }
    /* their code compiled ahead, on every compiling thread, with the default configuration */
    for (int m = 0; m < nmove; m++) {
      memcpy(t->code, codes + no * (size_t)m, sizeof *t->code * no);
      memset(t->segs, 0, sizeof *t->segs * ns);
      reset_cfg(t);
      collect_jobs(t);
    }
    compile_jobs(t);
    for (int m = 0; m < nmove && !improved && elapsed(t) < stage_budget && !out_of_budget(t); m++) {
      memcpy(t->code, codes + no * (size_t)m, sizeof *t->code * no);
      double ms, before = t->best_ms;
      measure_scheme(t, &ms);
      snprintf(t->what, sizeof t->what, "%s at segment %d: %.4f ms", move_names[mkind[m]], mat[m], ms);
      improved = t->best_ms < before; /* a sample became the best (checked) */
    }
    if (!improved) { /* the facts of the best scheme again, for stage 2 */
      memcpy(t->segs, snap, sizeof *snap * ns);
      t->nseg = nseg;
    }
  }
done:
  stof_ctx_dealloc(ctx, base, sizeof *base * no);
  stof_ctx_dealloc(ctx, codes, sizeof *codes * no * (size_t)maxmove);
  stof_ctx_dealloc(ctx, mkind, sizeof *mkind * (size_t)maxmove);
  stof_ctx_dealloc(ctx, mat, sizeof *mat * (size_t)maxmove);
  stof_ctx_dealloc(ctx, snap, sizeof *snap * ns);
  stof_ctx_dealloc(ctx, tried, ns * 4);
  return st;
}

/* ---------------------------------------------------------------- stage 2 */

static stof_status stage2(tuner *t) {
  stof_ctx *ctx = t->ctx;
  t->stage = 2;
  size_t ns = (size_t)t->nslot, no = (size_t)t->nop;
  /* the facts of the best scheme: rebuild it once with its configuration */
  memcpy(t->code, t->best_code, sizeof *t->code * no);
  memset(t->segs, 0, sizeof *t->segs * ns);
  copy_cfg(t->cur, t->best_cfg, t->nslot);
  memcpy(t->inval, t->best_inval, sizeof t->inval);
  stof_plan *p = NULL;
  stof_status st = build(t, t->code, &p);
  if (!st) st = learn(t, p);
  stof_plan_free(p);
  if (st) return st; /* the best scheme built before: this is not a candidate's failure */
  int n = t->nseg;
  int ncls = 0, intr = t->cuda && t->nin > 0; /* the intrinsics' knobs: one more class */
  int *cls = stof_ctx_alloc(ctx, sizeof *cls * (size_t)(n + 1));
  double *reward = stof_ctx_alloc(ctx, sizeof *reward * (size_t)(n + 1));
  if (!cls || !reward) {
    st = STOF_ERR_NOMEM;
    goto done;
  }
  for (int i = 0; i < n; i++)
    if (tunable(t, i)) cls[ncls++] = i;
  int nall = ncls + intr;
  for (int c = 0; c < nall; c++) reward[c] = 0;
  int per_round = nall < 4 ? 4 : nall;
  cfg *cand = stof_ctx_alloc(ctx, sizeof *cand * ns * (size_t)per_round);
  int (*cval)[MAXIN][STOF_INTRIN_MAX_KNOBS] = stof_ctx_alloc(ctx, sizeof *cval * (size_t)per_round);
  int *ccls = stof_ctx_alloc(ctx, sizeof *ccls * (size_t)per_round);
  uint64_t *chash = stof_ctx_alloc(ctx, sizeof *chash * (size_t)per_round);
  if (!cand || !cval || !ccls || !chash) {
    st = STOF_ERR_NOMEM;
    goto free_round;
  }
  int stale = 0;
  for (int round = 0; nall > 0 && stale < 2 && !out_of_budget(t); round++) {
    double total = 0;
    for (int c = 0; c < nall; c++) total += reward[c];
    /* the round's candidates: one class resampled from the best each (round 1 evenly,
     * later in proportion to the gain, a tenth kept for exploration), none measured before */
    int nc = 0;
    for (int k = 0; k < per_round * 4 && nc < per_round; k++) {
      int c;
      if (round == 0 || total <= 0) {
        c = k % nall;
      } else {
        double r = (double)(rnd(t) >> 11) * 0x1p-53 * total * 1.1, acc = 0;
        for (c = 0; c < nall - 1; c++) {
          acc += reward[c] + total * 0.1 / nall;
          if (r < acc) break;
        }
      }
      copy_cfg(t->cur, t->best_cfg, t->nslot);
      memcpy(t->inval, t->best_inval, sizeof t->inval);
      memcpy(t->code, t->best_code, sizeof *t->code * no);
      if (c < ncls) sample_class(t, cls[c]);
      else sample_intrinsics(t);
      uint64_t h = cand_hash(t);
      int dup = 0;
      for (int i = 0; i < t->nseen && !dup; i++) dup = t->seen[i] == h;
      for (int j = 0; j < nc && !dup; j++) dup = chash[j] == h;
      if (dup) { /* measured (or about to be): its template counts as tried */
        int ch = c < ncls ? cur_choice(t, cls[c]) : -1;
        if (ch >= 0) t->segs[cls[c]].tried[ch] = 1;
        continue;
      }
      copy_cfg(cand + ns * (size_t)nc, t->cur, t->nslot);
      memcpy(cval[nc], t->inval, sizeof t->inval);
      chash[nc] = h;
      ccls[nc++] = c;
    }
    if (!nc) { /* nothing new to try */
      stale++;
      continue;
    }
    /* compiled ahead on every compiling thread, then measured one at a time */
    for (int j = 0; j < nc; j++) {
      copy_cfg(t->cur, cand + ns * (size_t)j, t->nslot);
      memcpy(t->inval, cval[j], sizeof t->inval);
      memcpy(t->code, t->best_code, sizeof *t->code * no);
      collect_jobs(t);
    }
    compile_jobs(t);
    int gained = 0;
    for (int j = 0; j < nc && !out_of_budget(t); j++) {
      copy_cfg(t->cur, cand + ns * (size_t)j, t->nslot);
      memcpy(t->inval, cval[j], sizeof t->inval);
      memcpy(t->code, t->best_code, sizeof *t->code * no);
      double before = t->best_ms, ms;
      if (trial(t, &ms) == 1) {
        reward[ccls[j]] += before - ms;
        gained = 1;
      }
    }
    stale = gained ? 0 : stale + 1;
  }
free_round:
  stof_ctx_dealloc(ctx, cand, sizeof *cand * ns * (size_t)per_round);
  stof_ctx_dealloc(ctx, cval, sizeof *cval * (size_t)per_round);
  stof_ctx_dealloc(ctx, ccls, sizeof *ccls * (size_t)per_round);
  stof_ctx_dealloc(ctx, chash, sizeof *chash * (size_t)per_round);
done:
  stof_ctx_dealloc(ctx, reward, sizeof *reward * (size_t)(n + 1));
  stof_ctx_dealloc(ctx, cls, sizeof *cls * (size_t)(n + 1));
  return st;
}

/* ---------------------------------------------------------------- resuming */

/* Rebuilds the best record of this workload, if any: 1 when t->best_plan holds it. */
static int resume(tuner *t) {
  int idx;
  if (!t->o->db || t->o->force) return 0;
  if (stof_db_best(t->o->db, t->workload, t->device, &idx) != STOF_OK) {
    stof_ctx_clear_error(t->ctx);
    return 0;
  }
  stof_db_record r;
  if (stof_db_get(t->o->db, idx, &r) != STOF_OK) {
    stof_ctx_clear_error(t->ctx);
    return 0;
  }
  const char *sc = r.scheme;
  for (int i = 0; i < t->nop; i++) {
    char *end;
    long v = strtol(sc, &end, 10);
    if (end == sc || v < 0 || v >= t->nslot) return 0;
    t->code[i] = (int)v;
    sc = end;
  }
  reset_cfg(t);
  memset(t->segs, 0, sizeof *t->segs * (size_t)t->nslot);
  for (int k = 0; k < r.nknob; k++) {
    const char *nm = r.knob_name[k];
    if (!strncmp(nm, "intrin.", 7)) {
      const char *dot = strchr(nm + 7, '.');
      if (!dot) return 0;
      int found = 0;
      for (int i = 0; i < t->nin && !found; i++)
        if (strlen(t->in[i]->name) == (size_t)(dot - nm - 7) && !strncmp(t->in[i]->name, nm + 7, (size_t)(dot - nm - 7)))
          for (int j = 0; j < t->in[i]->nknob; j++)
            if (!strcmp(t->in[i]->knob[j].name, dot + 1)) t->inval[i][j] = (int)r.knob_value[k], found = 1;
      if (!found) return 0;
      continue;
    }
    char *end;
    long s = nm[0] == 's' ? strtol(nm + 1, &end, 10) : -1;
    if (s < 0 || s >= t->nslot || end == nm + 1) return 0;
    cfg *c = &t->cur[s];
    if (*end == '@') {
      const char *tn = end + 1;
      if (!strcmp(tn, "vendor")) {
        c->tmpl = VENDOR;
      } else {
        int found = -1;
        for (int j = 0; j < t->nt; j++)
          if (!strcmp(t->t[j].name, tn)) found = j;
        if (found < 0) {
          fprintf(stderr, "stof tune: the best record uses template %s, which this search does not have: searching again\n", tn);
          return 0;
        }
        c->tmpl = found;
      }
    } else if (*end == '.' && c->n < MAXK && strlen(end + 1) < NAMEL) {
      snprintf(c->name[c->n], NAMEL, "%s", end + 1);
      c->dec[c->n++] = (int)r.knob_value[k];
    } else {
      return 0;
    }
  }
  stof_plan *p = NULL;
  stof_status st = build(t, t->code, &p);
  if (!st) st = learn(t, p);
  if (st) {
    fprintf(stderr, "stof tune: the best record of %s no longer builds (%s): searching again\n", t->workload,
            stof_ctx_message(t->ctx));
    stof_ctx_clear_error(t->ctx);
    stof_plan_free(p);
    return 0;
  }
  t->best_plan = p;
  t->best_ms = r.median_ms;
  t->res.from_db = 1;
  memcpy(t->best_code, t->code, sizeof *t->code * (size_t)t->nop);
  copy_cfg(t->best_cfg, t->cur, t->nslot);
  return 1;
}

/* ---------------------------------------------------------------- set-up */

static stof_status reference(tuner *t, stof_plan *def) {
  stof_ctx *ctx = t->ctx;
  stof_status st = STOF_OK;
  t->ref = stof_ctx_alloc(ctx, sizeof *t->ref * (size_t)t->nout);
  if (!t->ref) return STOF_ERR_NOMEM;
  memset(t->ref, 0, sizeof *t->ref * (size_t)t->nout);
  if (t->cuda) { /* the default plan's outputs */
    if ((st = stof_plan_run(def))) return st;
    for (int i = 0; i < t->nout && !st; i++) st = stof_plan_output(def, i, &t->ref[i]);
    return st;
  }
  /* the interpreter, on CPU copies of the feed */
  int nf = t->o->nfeed;
  stof_tensor **cpu = stof_ctx_alloc(ctx, sizeof *cpu * (size_t)(nf ? nf : 1));
  if (!cpu) return STOF_ERR_NOMEM;
  memset(cpu, 0, sizeof *cpu * (size_t)(nf ? nf : 1));
  for (int i = 0; i < nf && !st; i++)
    if (t->o->feed[i]->device != STOF_DEVICE_CPU) st = stof_tensor_to(t->o->feed[i], STOF_DEVICE_CPU, &cpu[i]);
  const stof_tensor **feed = stof_ctx_alloc(ctx, sizeof *feed * (size_t)(nf ? nf : 1));
  if (!feed) st = STOF_ERR_NOMEM;
  for (int i = 0; i < nf && !st; i++) feed[i] = cpu[i] ? cpu[i] : t->o->feed[i];
  if (!st) st = stof_interp_eval(t->g, t->nout, t->outputs, nf, t->o->feed_ops, feed, t->ref);
  for (int i = 0; i < nf; i++)
    if (cpu[i]) stof_tensor_free(cpu[i]);
  stof_ctx_dealloc(ctx, cpu, sizeof *cpu * (size_t)(nf ? nf : 1));
  stof_ctx_dealloc(ctx, feed, sizeof *feed * (size_t)(nf ? nf : 1));
  return st;
}

static stof_status check_templates(tuner *t) {
  for (int i = 0; i < t->o->ntemplate; i++) {
    const stof_template *u = &t->o->templates[i];
    if (!u->name || !u->name[0] || strpbrk(u->name, "@.") || strlen(u->name) >= NAMEL || !u->schedule)
      return stof_ctx_error(t->ctx, STOF_ERR_ARG,
                            "tune: template %d: a name (no '@' or '.', under %d characters) and a schedule function are required",
                            i + 1, NAMEL);
    if (!strcmp(u->name, "auto") || !strcmp(u->name, "vendor") || !strcmp(u->name, "default"))
      return stof_ctx_error(t->ctx, STOF_ERR_ARG, "tune: template name %s is taken by a built-in one", u->name);
    for (int j = 0; j < i; j++)
      if (!strcmp(u->name, t->o->templates[j].name))
        return stof_ctx_error(t->ctx, STOF_ERR_ARG, "tune: two templates named %s", u->name);
  }
  return STOF_OK;
}

/* The workload key: the name, the target and the structural hash of the graph. */
static stof_status workload_key(tuner *t) {
  uint64_t h;
  stof_status st = stof_te_hash(t->g, t->nout, t->outputs, &h);
  if (st) return st;
  snprintf(t->workload, sizeof t->workload, "%.80s/%s/%016llx", t->o->workload ? t->o->workload : "graph",
           t->cuda ? "cuda" : "c", (unsigned long long)h);
  if (t->cuda) {
    stof_cuda_props pr;
    if ((st = stof_cuda_props_get(t->ctx, &pr))) return st;
    snprintf(t->device, sizeof t->device, "%s", pr.name);
  } else {
    snprintf(t->device, sizeof t->device, "cpu");
  }
  return STOF_OK;
}

static void free_tuner(tuner *t) {
  stof_ctx *ctx = t->ctx;
  size_t ns = (size_t)(t->nslot ? t->nslot : 1), no = (size_t)(t->nop ? t->nop : 1);
  if (t->ref)
    for (int i = 0; i < t->nout; i++)
      if (t->ref[i]) stof_tensor_free(t->ref[i]);
  if (t->ref) stof_ctx_dealloc(ctx, t->ref, sizeof *t->ref * (size_t)t->nout);
  if (t->best_plan) stof_plan_free(t->best_plan);
  if (t->dfeed) {
    for (int i = 0; i < t->o->nfeed; i++)
      if (t->dfeed[i]) stof_tensor_free(t->dfeed[i]);
    stof_ctx_dealloc(ctx, t->dfeed, sizeof *t->dfeed * (size_t)t->o->nfeed);
  }
  for (int i = 0; i < t->njob; i++) stof_compile_job_free(t->jobs[i]);
  if (t->jobs) stof_ctx_dealloc(ctx, t->jobs, sizeof *t->jobs * (size_t)t->capjob);
  if (t->seen) stof_ctx_dealloc(ctx, t->seen, sizeof *t->seen * (size_t)t->capseen);
  stof_ctx_dealloc(ctx, t->t, sizeof *t->t * (size_t)(t->nt ? t->nt : 1));
  stof_ctx_dealloc(ctx, t->ops, sizeof *t->ops * no);
  stof_ctx_dealloc(ctx, t->code, sizeof *t->code * no);
  stof_ctx_dealloc(ctx, t->best_code, sizeof *t->best_code * no);
  stof_ctx_dealloc(ctx, t->segs, sizeof *t->segs * ns);
  stof_ctx_dealloc(ctx, t->cur, sizeof *t->cur * ns);
  stof_ctx_dealloc(ctx, t->best_cfg, sizeof *t->best_cfg * ns);
}

stof_status stof_tune(stof_graph *g, int nout, const stof_op *const *outputs, const stof_tune_opts *opts,
                      stof_plan **plan, stof_tune_result *res) {
  stof_ctx *ctx = stof_graph_ctx(g);
  *plan = NULL;
  if (!opts) return stof_ctx_error(ctx, STOF_ERR_ARG, "tune: no options (the feed is required)");
  tuner T = {0}, *t = &T;
  t->ctx = ctx;
  t->g = g;
  t->nout = nout;
  t->outputs = outputs;
  t->o = opts;
  t->t0 = now_s();
  t->budget = opts->budget_s > 0 ? opts->budget_s : 30;
  stof_status st = check_templates(t);
  if (st) return st;
  if (opts->seed) stof_ctx_seed(ctx, opts->seed);
  const char *target = opts->plan.target;
  if (target && strcmp(target, "c") && strcmp(target, "cuda"))
    return stof_ctx_error(ctx, STOF_ERR_ARG, "tune: target \"%s\" (\"c\" or \"cuda\")", target);
  if (!target || !strcmp(target, "cuda")) {
    st = stof_cuda_init(ctx);
    if (st && target) return st; /* "cuda" asked for: say why there is none */
    if (st) stof_ctx_clear_error(ctx);
    t->cuda = st == STOF_OK;
  }
  stof_plan_opts po = opts->plan;
  po.target = t->cuda ? "cuda" : "c";
  po.scheme = NULL;
  po.hooks = NULL;
  po.knobs = NULL;
  stof_plan *def = NULL;
  const stof_op **all = NULL;
  int nall = 0;
  if ((st = stof_graph_collect(g, nout, outputs, &all, &nall))) return st;
  for (int i = 0; i < nall; i++) {
    t->nop += all[i]->kind != STOF_OP_PLACEHOLDER;
    int k;
    for (k = 0; all[i]->kind == STOF_OP_PLACEHOLDER && k < opts->nfeed && opts->feed_ops[k] != all[i]; k++) {}
    if (all[i]->kind == STOF_OP_PLACEHOLDER && k == opts->nfeed) {
      st = stof_ctx_error(ctx, STOF_ERR_ARG, "tune: no input given for placeholder %s", all[i]->name);
      stof_ctx_dealloc(ctx, all, sizeof *all * (size_t)nall);
      return st;
    }
  }
  t->nslot = t->nop + 1;
  size_t ns = (size_t)t->nslot, no = (size_t)(t->nop ? t->nop : 1);
  t->nt = 1 + opts->ntemplate;
  t->t = stof_ctx_alloc(ctx, sizeof *t->t * (size_t)t->nt);
  t->ops = stof_ctx_alloc(ctx, sizeof *t->ops * no);
  t->code = stof_ctx_alloc(ctx, sizeof *t->code * no);
  t->best_code = stof_ctx_alloc(ctx, sizeof *t->best_code * no);
  t->segs = stof_ctx_alloc(ctx, sizeof *t->segs * ns);
  t->cur = stof_ctx_alloc(ctx, sizeof *t->cur * ns);
  t->best_cfg = stof_ctx_alloc(ctx, sizeof *t->best_cfg * ns);
  if (!t->t || !t->ops || !t->code || !t->best_code || !t->segs || !t->cur || !t->best_cfg) {
    stof_ctx_dealloc(ctx, all, sizeof *all * (size_t)nall);
    st = STOF_ERR_NOMEM;
    goto fail;
  }
  memset(t->segs, 0, sizeof *t->segs * ns);
  t->t[0] = (stof_template){"auto", NULL, auto_schedule, NULL};
  for (int i = 0; i < opts->ntemplate; i++) t->t[1 + i] = opts->templates[i];
  for (int i = 0, k = 0; i < nall; i++)
    if (all[i]->kind != STOF_OP_PLACEHOLDER) t->ops[k++] = all[i];
  for (int i = 0; i < nall; i++) /* the distinct intrinsics, for their knobs */
    if (all[i]->kind == STOF_OP_EXTERN && all[i]->intrin) {
      const stof_intrin *in = stof_intrin_find(all[i]->intrin);
      int seen = 0;
      for (int k = 0; k < t->nin; k++) seen |= t->in[k] == in;
      if (in && !seen && t->nin < MAXIN) t->in[t->nin++] = in;
    }
  stof_ctx_dealloc(ctx, all, sizeof *all * (size_t)nall);
  reset_cfg(t);
  if ((st = workload_key(t))) goto fail;
  if (t->cuda && opts->nfeed) { /* the weights cross to the GPU once, not once per candidate */
    t->dfeed = stof_ctx_alloc(ctx, sizeof *t->dfeed * (size_t)opts->nfeed);
    if (!t->dfeed) {
      st = STOF_ERR_NOMEM;
      goto fail;
    }
    memset(t->dfeed, 0, sizeof *t->dfeed * (size_t)opts->nfeed);
    for (int i = 0; i < opts->nfeed && !st; i++)
      if (opts->feed[i]->device != STOF_DEVICE_CUDA || !stof_tensor_is_contiguous(opts->feed[i]))
        st = stof_tensor_to(opts->feed[i], STOF_DEVICE_CUDA, &t->dfeed[i]);
    if (st) goto fail;
  }
  /* a best record of this workload: rebuilt, nothing measured */
  if (resume(t)) {
    t->stage = 0;
    t->res.best_ms = t->best_ms;
    goto done;
  }
  /* the default plan: the reference (on the GPU) and the default scheme's code */
  if ((st = stof_plan_new(g, nout, outputs, &po, &def)) || (st = bind_feed(t, def)) || (st = reference(t, def)))
    goto fail_def;
  {
    /* built through the hooks with the default configuration, the code gives this plan */
    const char *sc = stof_plan_scheme(def);
    for (int i = 0; i < t->nop; i++) {
      char *end;
      t->code[i] = (int)strtol(sc, &end, 10);
      sc = end;
    }
  }
  stof_plan_free(def);
  def = NULL;
  /* the default scheme and configuration, measured and checked (it must pass) */
  t->stage = 1;
  double ms0;
  int r0 = trial(t, &ms0);
  if (r0 != 1) { /* the default plan built once already: out of memory, most likely */
    st = r0 < 0 && t->last_fail == STOF_ERR_NOMEM
             ? STOF_ERR_NOMEM
             : stof_ctx_error(ctx, r0 < 0 ? t->last_fail : STOF_ERR_CHECK, "tune: the default plan %s: %s",
                              r0 < 0 ? "failed" : "does not match the reference", t->what);
    goto fail;
  }
  t->res.default_ms = ms0;
  if (!opts->skip_stage1) {
    double share = opts->skip_stage2 ? 1.0 : 0.5;
    if ((st = stage1(t, share * t->budget))) goto fail;
  }
  t->res.stage1_ms = t->best_ms;
  if (!opts->skip_stage2 && (st = stage2(t))) goto fail;
  t->stage = 0;
  t->res.best_ms = t->best_ms;
done:
  t->res.seconds = elapsed(t);
  snprintf(t->res.workload, sizeof t->res.workload, "%.127s", t->workload);
  progress(t);
  if (t->dfeed) /* the caller's tensors: the plan copies them once into storage it owns */
    for (int i = 0; i < opts->nfeed && !st; i++)
      if (t->dfeed[i]) {
        int used = 0;
        for (int k = 0; k < stof_plan_ninput(t->best_plan); k++) used |= stof_plan_input(t->best_plan, k) == opts->feed_ops[i];
        if (used) st = stof_plan_bind(t->best_plan, opts->feed_ops[i], opts->feed[i]);
      }
  if (st) goto fail;
  *plan = t->best_plan;
  t->best_plan = NULL;
  if (res) *res = t->res;
  free_tuner(t);
  return STOF_OK;
fail_def:
  if (def) stof_plan_free(def);
fail:
  free_tuner(t);
  return st;
}
