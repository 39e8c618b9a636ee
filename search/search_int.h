/*
 * search/ internals shared by tune.c (the stages, sampling, resuming, set-up) and
 * candidate.c (a candidate's plan through the hooks, its measurement, the check, the
 * record, compiling ahead): the tuner's state and the types it keeps per segment.
 */
#ifndef STOF_SEARCH_INT_H
#define STOF_SEARCH_INT_H

#include <stof/exec.h>
#include <stof/kernels.h>
#include <stof/search.h>

#define MAXK 16      /* knobs remembered per (segment, template) */
#define MAXC 8       /* templates tried per segment */
#define NAMEL 64
#define MAXIN 4      /* distinct intrinsics tuned */
#define NBUILTIN 4   /* templates[0] "auto", [1] "tensorcore", [2] "tensorcore_norm", [3] "tensorcore_ffn", then the user's */
#define DEFAULT (-2) /* the template: the vendor GEMM where it can run, else "auto" */
#define VENDOR (-1)
#define SLOW_FACTOR 3 /* a candidate this many times slower than the best, timed once: it is not measured further */
#define SERIAL_MAX 16384 /* GPU: a new segment whose template leaves a nest of more iterations
                            serial (one thread) is pruned before compiling */
#define PROBE_SLACK_MS 20.0 /* a candidate's first run, segment by segment, is abandoned past
                               2 * SLOW_FACTOR * best + this (launch and wait overheads) */

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

/* How a trial that ran ended, besides its time (search_trial's return value says best or
 * failed): measured in full, cut after two timed runs, abandoned during its first run
 * (stof_plan_run_bounded), or rejected by the check. */
typedef enum trial_outcome { TRIAL_RAN, TRIAL_CUT, TRIAL_ABANDONED, TRIAL_REJECTED } trial_outcome;

typedef struct tuner {
  stof_ctx *ctx;
  stof_graph *g;
  int nout;
  const stof_op *const *outputs;
  const stof_tune_opts *o;
  int cuda;
  int nt;                  /* templates: [0] "auto", [1] "tensorcore", [2] "tensorcore_norm", [3] "tensorcore_ffn", then the user's */
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
  double trial_s;          /* wall seconds of the slowest candidate measured (a would-be best
                              is timed twice and checked): none starts that would end after
                              the budget */
  double prep_s;           /* seconds per candidate of the last round compiled ahead */
  int stage;
  char what[256];
  double tr_build, tr_time, tr_check; /* the last trial's seconds (the trace) */
  trial_outcome outcome;   /* of the last trial that ran (the trace; stage 1's sampling) */
  char workload[128], device[256];
  int last_bar;
  char label[NAMEL + 16];
  stof_status last_fail;   /* the status of the last candidate that failed */
  int pruning;             /* a hook refused the candidate by a pruning rule */
  int njob, capjob;        /* compile jobs collected ahead of a round */
  stof_compile_job **jobs;
  /* the default scheme's segments (GPU): a segment of it may keep a serial nest (the default
   * plan has it anyway); a segment a move made may not (the pruning rule of hook_schedule) */
  int *def_code;           /* per op (t->ops order): its segment in the default scheme */
  int *def_count;          /* per default segment: its ops */
  int *op_index;           /* per graph op id: its index in t->ops (-1: not one) */
  int nid;                 /* entries of op_index */
  int nseen, capseen;      /* hashes of the candidates measured */
  uint64_t *seen;
} tuner;

/* candidate.c */
double search_now(void);
double search_elapsed(const tuner *t);
int search_out_of_budget(const tuner *t);
/* How many of n candidates, each compiled ahead and then measured `trials` times, fit in
 * what is left of the budget at the last ones' costs. */
int search_fit(const tuner *t, int n, int trials);
/* a progress display (the caller's callback, or a bar on stderr when verbose) */
void search_progress(tuner *t);
/* the built-in template "auto": stof_sched_auto */
stof_status search_auto_schedule(void *ud, const stof_plan_seg_req *r, stof_sched *s);

/* tensorcore.c: the built-in template "tensorcore" (a GEMM and its injective epilogue on
 * the tensor cores, CUDA only) */
const char *search_tc_name(void);
int search_tc_matches(void *ud, const stof_plan_seg_req *r);
stof_status search_tc_schedule(void *ud, const stof_plan_seg_req *r, stof_sched *s);
/* the built-in template "tensorcore_norm" (the same GEMM, its epilogue and a row
 * normalisation of the result: layer norm, RMS norm; rows complete in each CUDA block) */
const char *search_tcn_name(void);
int search_tcn_matches(void *ud, const stof_plan_seg_req *r);
stof_status search_tcn_schedule(void *ud, const stof_plan_seg_req *r, stof_sched *s);
/* the built-in template "tensorcore_ffn" (two GEMMs, the intermediate on chip) */
const char *search_tgg_name(void);
int search_tgg_matches(void *ud, const stof_plan_seg_req *r);
stof_status search_tgg_schedule(void *ud, const stof_plan_seg_req *r, stof_sched *s);
void search_free_text(tuner *t, char *s);
stof_status search_bind_feed(tuner *t, stof_plan *p);
/* the plan of code with t->cur and t->inval, bound to the feed */
stof_status search_build(tuner *t, const int *code, stof_plan **out);
/* the facts of a built plan: the scheme in run order, owners, kinds, compute-intensive ops */
stof_status search_learn(tuner *t, stof_plan *p);
void search_copy_cfg(cfg *dst, const cfg *src, int n);
/* the choice segment i runs with in t->cur (-1: no hook saw it) */
int search_cur_choice(const tuner *t, int i);
/* builds, measures, records and (when it would win or runs a template for the first time)
 * checks the current candidate: 1 the new best, 0 not, -1 failed, -2 measured before */
int search_trial(tuner *t, double *ms_out);
/* the current candidate's compile jobs collected; all collected ones compiled in parallel */
void search_collect_jobs(tuner *t);
void search_compile_jobs(tuner *t);
uint64_t search_cand_hash(const tuner *t);

#endif
