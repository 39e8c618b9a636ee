/*
 * stof exec: the runtime. A plan turns the graph of a model into a fixed sequence of
 * kernels: the graph's ops are cut into segments by a fusion scheme (one digit code per
 * op, DESIGN.md section 7), each segment gets an implementation (an intrinsic such as
 * attention, a vendor GEMM with its epilogue, or a generated kernel from schedule/), the
 * values that cross segments get offsets in one arena (liveness: values whose lifetimes do
 * not overlap share bytes), and the sequence runs on one stream: on the GPU captured once
 * as a CUDA graph and replayed, on the CPU backend (C code, the intrinsics' CPU
 * implementations) in the same order.
 *
 * Invariants:
 *  - A plan borrows its graph (the graph must outlive it) and the storage of tensors bound
 *    on the plan's device (weights are never copied); tensors bound from the other device
 *    are copied once into storage the plan owns.
 *  - On the GPU, running allocates nothing and does not synchronise until the results are
 *    read (the CPU backend wraps its buffers in tensor handles per launch).
 */
#ifndef STOF_EXEC_H
#define STOF_EXEC_H

#include <stof/core.h>
#include <stof/schedule.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What implements a segment. */
#define STOF_SEG_KIND_LIST(X)                                                            \
  X(INTRIN, "intrinsic") X(GEMM, "gemm") X(GENERIC, "generated")
typedef enum stof_seg_kind {
#define STOF_X(name, text) STOF_SEG_##name,
  STOF_SEG_KIND_LIST(STOF_X)
#undef STOF_X
  STOF_SEG_KIND_COUNT
} stof_seg_kind;
const char *stof_seg_kind_name(stof_seg_kind k);

typedef struct stof_plan stof_plan;

/* A segment as a plan's hooks see it, before its implementation is built. */
typedef struct stof_plan_seg_req {
  int index;                 /* the segment's index, in the order the plan runs them */
  const char *target;        /* "c" or "cuda" */
  const char *name;          /* what the ops are ("gemm+bias", "layer_norm", "elementwise") */
  int nop;                   /* its ops in the plan's graph, ascending ids (borrowed) */
  const stof_op *const *op;
  const char *label;         /* out (schedule hook): what scheduled it, for the segment's
                                detail ("template auto"; copied; NULL: nothing said) */
} stof_plan_seg_req;

/* Hooks through which a caller (the search) chooses how segments are implemented. */
typedef struct stof_plan_hooks {
  /* A segment the vendor GEMM could run (a GEMM and its epilogue): return 1 to have it
   * generated (scheduled by `schedule`) instead. NULL: the vendor GEMM. */
  int (*generate_gemm)(void *ud, const stof_plan_seg_req *r);
  /* Schedules a generated segment: s is a fresh schedule of the segment's own graph (its
   * blocks are named as the segment's ops); apply primitives to it. NULL: stof_sched_auto
   * with its default knobs. An error fails the plan, naming the segment. A segment
   * structurally equal to an earlier one shares the earlier one's function: the hook is
   * called once per distinct segment. */
  stof_status (*schedule)(void *ud, stof_plan_seg_req *r, stof_sched *s);
  void *ud;
} stof_plan_hooks;

typedef struct stof_plan_opts {
  const char *target; /* "cuda" or "c"; NULL: "cuda" when a GPU is present, else "c" */
  int no_graph;       /* 1: launch kernel by kernel instead of replaying a CUDA graph */
  int exact_gelu;     /* 1: never run the erf GELU as cuBLASLt's tanh-form epilogue */
  int no_vendor_gemm; /* 1: GEMMs as generated code, not cuBLASLt */
  int no_gemm_tune;   /* 1: take cuBLASLt's heuristic's first algorithm without measuring the
                         others it proposes (by default each distinct GEMM times them once) */
  int verbose;        /* progress lines on stderr while compiling */
  /* decisions forced on intrinsic knobs, "NAME.KNOB=VALUE[,...]" ("attention.tile=128,
   * attention.tma=2"): every segment of intrinsic NAME takes them; the others keep the
   * selector's. An unknown intrinsic or knob, or a value outside the knob's candidates, is
   * STOF_ERR_ARG naming it. NULL: none. */
  const char *knobs;
  /* the fusion scheme (NULL: the default, rule-based scheme): a code as stof_plan_scheme
   * prints it, one segment number per op the plan runs (placeholders left out) in id order,
   * equal numbers forming one segment (the numbers need not be in order; the plan runs the
   * segments in a topological order). Legal when the segments depend on one another without
   * a cycle and every segment that holds an intrinsic op (attention) holds it with exactly
   * the views the default scheme gives it and nothing else; a segment that holds a GEMM and
   * only ops its vendor epilogue can take runs on the vendor GEMM (unless the hooks say
   * otherwise), any other segment is generated code. STOF_ERR_ARG names what is illegal. */
  const char *scheme;
  const stof_plan_hooks *hooks; /* NULL: none (borrowed for the duration of stof_plan_new) */
} stof_plan_opts;

/**
 * Builds a plan that computes outputs[0..nout) of g: the default fusion scheme, one
 * implementation per segment (compiled here: NVRTC for CUDA, cc for C; identical segments
 * share one), the memory plan. Placeholders are bound afterwards (stof_plan_bind).
 * Errors name the segment and op. Owned: stof_plan_free.
 */
stof_status stof_plan_new(stof_graph *g, int nout, const stof_op *const *outputs,
                          const stof_plan_opts *opts, stof_plan **out);
void stof_plan_free(stof_plan *p);

/**
 * What stof_plan_new(g, nout, outputs, opts) would compile for its generated segments (one
 * job per distinct segment; the hooks are called as by stof_plan_new), made without
 * compiling anything, planning memory or building GEMM and intrinsic implementations: run
 * the jobs (stof_compile_jobs, on several threads) and the plan built next finds its code
 * in the caches. Owned: each job with stof_compile_job_free, the array with
 * stof_ctx_dealloc(ctx, jobs, njob * sizeof *jobs) (NULL when there is none).
 */
stof_status stof_plan_jobs(stof_graph *g, int nout, const stof_op *const *outputs, const stof_plan_opts *opts,
                           int *njob, stof_compile_job ***jobs);

/** The plan's target: "c" or "cuda". Borrowed, static. */
const char *stof_plan_target(const stof_plan *p);

/** The number of outputs. */
int stof_plan_noutput(const stof_plan *p);
/** The placeholders the plan reads, in id order. Borrowed. */
int stof_plan_ninput(const stof_plan *p);
const stof_op *stof_plan_input(const stof_plan *p, int i);

/**
 * Binds placeholder ph to t (same shape and dtype; STOF_ERR_SHAPE / _TYPE name it): a
 * contiguous tensor on the plan's device is borrowed (it must outlive the runs that read
 * it); any other is copied into storage the plan owns (on the GPU, a later bind of the same
 * placeholder copies into the same storage, so a captured graph stays valid).
 */
stof_status stof_plan_bind(stof_plan *p, const stof_op *ph, const stof_tensor *t);

/** Runs the plan (every placeholder bound: STOF_ERR_ARG names the first that is not). On
 *  the GPU the first run captures a CUDA graph, later runs replay it; asynchronous. */
stof_status stof_plan_run(stof_plan *p);
/** Waits for the last run. */
stof_status stof_plan_sync(stof_plan *p);

/** Output i as a new contiguous CPU tensor (waits for the run). Owned. */
stof_status stof_plan_output(stof_plan *p, int i, stof_tensor **out);
/** Output i in the plan's storage, as a borrowed view on the plan's device (valid until the
 *  next run or the plan's end). Owned handle, borrowed data. */
stof_status stof_plan_output_view(stof_plan *p, int i, stof_tensor **out);

/** Fills the arena (every intermediate and output) with NaN bytes (0xff), so a test sees
 *  any value a run fails to write. Waits for the last run. */
stof_status stof_plan_poison(stof_plan *p);

/** Times runs: warmup runs, then reps runs between device events (GPU) or a monotonic clock
 *  (CPU); *ms gets the median of per-run times when reps <= 200 (each run timed on its own),
 *  so noise does not flatter. */
stof_status stof_plan_time(stof_plan *p, int reps, int warmup, double *ms);
/** Runs the plan once, segment by segment, waiting for each (a kernel cannot be stopped
 *  once launched): launches no further segment once limit_ms of wall time have passed since
 *  the start. *complete gets 1 when every segment ran (the outputs hold a run's result),
 *  0 when it stopped early (the outputs then hold what the segments that ran wrote, over
 *  the previous run's values or the poison: read none); *ms the wall milliseconds spent.
 *  For the search: a candidate thousands of times slower than the best costs one segment's
 *  run, not a whole forward. */
stof_status stof_plan_run_bounded(stof_plan *p, double limit_ms, double *ms, int *complete);
/** Times each segment on its own (kernel by kernel, after one run): ms[i] for segment i
 *  (median of reps), for the time split by kind. ms has stof_plan_nsegment entries. */
stof_status stof_plan_time_segments(stof_plan *p, int reps, double *ms);

/* Segments, in execution order. */
int stof_plan_nsegment(const stof_plan *p);
#define STOF_PLAN_MAX_SEG_KNOBS 16
typedef struct stof_seg_info {
  stof_seg_kind kind;
  const char *template_name; /* "attention", "gemm+bias+gelu", "layer_norm", ... */
  int nop;                   /* ops of the graph in the segment */
  const stof_op *first, *last;
  int shared_with;           /* an earlier segment with the same implementation, or -1 */
  const char *detail;        /* knobs and choices, one line (borrowed) */
  /* the segment's knobs and the decisions taken: an intrinsic's (the selector's, unless
   * forced), a GEMM's "algo" (the cuBLASLt algorithm, GPU only), a generated segment's
   * schedule knobs ("threads", "vec", ...); knob_name[i] = knob_value[i] (names borrowed) */
  int nknob;
  const char *knob_name[STOF_PLAN_MAX_SEG_KNOBS];
  int64_t knob_value[STOF_PLAN_MAX_SEG_KNOBS];
  /* a generated segment's schedule as a Lua script (stof_trace_to_lua: the default
   * schedule's primitives with its knobs threads / vec), borrowed; NULL for the others */
  const char *trace;
} stof_seg_info;
stof_status stof_plan_segment(const stof_plan *p, int i, stof_seg_info *out);

/** The fusion scheme as a code: the segment index of every op the plan runs (placeholders
 *  left out), in id order, separated by spaces ("0 0 1 1 1 2"); DESIGN.md section 7's digit
 *  code generalised to more than ten segments and to segments whose ops are not adjacent
 *  (head splits read as views by a later attention). Borrowed. */
const char *stof_plan_scheme(const stof_plan *p);

/* Memory: the arena (bytes of the values that cross segments, after sharing), the sum of
 * those values without sharing, storage the plan owns for bound copies, the vendor GEMM's
 * workspace. */
typedef struct stof_plan_memory {
  size_t arena, values, owned_inputs, workspace;
} stof_plan_memory;
void stof_plan_memory_get(const stof_plan *p, stof_plan_memory *out);

/** Whether op is a GEMM (a sum over k of x[..., k] * w[k, j] or w[j, k] covering both
 *  operands) that a vendor-GEMM segment could run: a compute-intensive op for the search. */
int stof_plan_op_is_gemm(const stof_op *op);

/** A table of the segments (index, kind, template, ops, decisions), one per line. Owned
 *  string: stof_ctx_dealloc(ctx, s, strlen(s) + 1). */
stof_status stof_plan_describe(const stof_plan *p, char **out);

#ifdef __cplusplus
}
#endif
#endif
