/*
 * stof search (DESIGN.md section 7): the tuning database, and the two-stage search over
 * a model graph's fusion schemes (stage 1) and its segments' templates and knobs (stage 2),
 * every candidate measured on the target through an exec/ plan (docs/SEARCH.md).
 *
 * The tuning database keeps every measurement of a candidate, one JSON object per line, in
 * an append-only file:
 *
 *   {"v":1,"stof":"0.1.0","workload":"bert-base/1x128","device":"NVIDIA H100 80GB HBM3",
 *    "scheme":"0011223","knobs":{"C.tile_i":2,"C.tile_j":0},"times_ms":[0.51,0.5,0.52],
 *    "status":"OK"}
 *
 * (one line; "message" is added for a failed candidate). Invariants:
 *  - A record is never rewritten or removed; the file only grows, by whole lines.
 *  - Loading tolerates an unterminated last line (ignored until it is terminated: it may be
 *    being written; the next append terminates it and loads it, as a record if it is one)
 *    and malformed lines (skipped and counted, never fatal), so one bad line never loses
 *    the others. A line that cannot be stored for want of memory is read again next time.
 *  - Several processes may append at once: each record is one write() under an exclusive
 *    flock on the file, preceded by a newline when the file's last line is unterminated; a
 *    short write is truncated away under the lock. A handle used after fork() reopens the
 *    file in the child (flock belongs to the open file). Use a local file system. A handle
 *    is not for concurrent use by several threads.
 *  - The best record of a (workload, device) is the successful one (status OK) written by
 *    this version of stof with the smallest median time; ties go to the earliest.
 */
#ifndef STOF_SEARCH_H
#define STOF_SEARCH_H

#include <stof/core.h>
#include <stof/exec.h>
#include <stof/schedule.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- tuning database */

/** The record format written in "v". */
#define STOF_DB_FORMAT 1

typedef struct stof_db stof_db;

/** One measurement. In stof_db_get's answers every pointer is borrowed from the database
 * (valid until stof_db_free). */
typedef struct stof_db_record {
  const char *workload;  /* what was tuned: a key naming the graph and its shapes */
  const char *device;    /* "NVIDIA H100 80GB HBM3", "cpu" */
  const char *scheme;    /* fusion scheme code: one digit per op (may be "") */
  int nknob;             /* knob decisions, by knob name */
  const char *const *knob_name;
  const int64_t *knob_value;
  int ntime;             /* measured times, ms (at least one when status is STOF_OK) */
  const double *time_ms;
  stof_status status;    /* STOF_OK, or why the candidate failed (compile, launch, result) */
  const char *message;   /* the failure's message, or NULL */
  const char *version;   /* the stof version that wrote it; stof_db_append writes its own */
  double median_ms;      /* of time_ms (computed; 0 without times) */
} stof_db_record;

/**
 * Opens the database at path, creating an empty file if there is none, and loads its
 * complete lines. Owned: stof_db_free. STOF_ERR_IO (naming the path and the cause) when the
 * file cannot be created or read.
 */
stof_status stof_db_open(stof_ctx *ctx, const char *path, stof_db **out);
void stof_db_free(stof_db *db);

/**
 * Appends r as one line (its version and median are this stof's and computed) and adds it
 * to db, after loading what other processes appended since. STOF_ERR_ARG for an empty
 * workload or device, a knob name empty or given twice, a string that is not UTF-8, a
 * negative or non-finite time, or a successful record without times (nothing written);
 * STOF_ERR_NOMEM before anything is written; STOF_ERR_IO if the write fails (nothing of the
 * record stays) or, the record written and kept, if fdatasync fails.
 */
stof_status stof_db_append(stof_db *db, const stof_db_record *r);

/** Loads the lines other processes appended since the last load. *nnew (may be NULL): how
 * many records came in. */
stof_status stof_db_refresh(stof_db *db, int *nnew);

/** Records loaded (valid lines), and lines skipped as malformed or of another format. */
int stof_db_count(const stof_db *db);
int stof_db_nskipped(const stof_db *db);
/** Why the last skipped line was skipped ("PATH:LINE: not JSON (...)"), or "". Borrowed. */
const char *stof_db_skip_note(const stof_db *db);

/** Record i (0 <= i < count, in file order). Borrowed pointers. STOF_ERR_RANGE otherwise. */
stof_status stof_db_get(const stof_db *db, int i, stof_db_record *out);

/**
 * The best record of (workload, device) (see the invariants above): its index in *index.
 * STOF_ERR_NOT_FOUND, naming the workload and the device, when there is none.
 */
stof_status stof_db_best(const stof_db *db, const char *workload, const char *device, int *index);

/* ---------------------------------------------------------------- the search */

/*
 * A template turns a segment of a model graph into a schedule: it applies primitives to a
 * fresh schedule of the segment's own graph (blocks named as the segment's ops) and names
 * its tunable parameters as knobs (stof_sched_knob, sample_*); the search replays its trace
 * with other decisions. Built in: "vendor" (the vendor GEMM for a GEMM and its epilogue:
 * cuBLASLt on the GPU, the GEMM intrinsic's CPU implementation on "c") and "auto"
 * (stof_sched_auto: knobs threads and vec on "cuda"). The user's are explored beside them,
 * with the same correctness gate and records.
 */
typedef struct stof_template {
  const char *name; /* unique among the templates of a search; no '@' or '.' */
  /* 1 when the template can schedule the segment (NULL: every generated segment) */
  int (*matches)(void *ud, const stof_plan_seg_req *r);
  /* schedules s, a fresh schedule of the segment's graph; an error fails the candidate
   * (recorded with its status and message), never the search */
  stof_status (*schedule)(void *ud, const stof_plan_seg_req *r, stof_sched *s);
  void *ud;
} stof_template;

/* Where the search stands, for a progress display. */
typedef struct stof_tune_progress {
  int stage;            /* 1 fusion, 2 knobs, 0 done */
  int trials, failed, rejected;
  double elapsed_s, budget_s;
  double default_ms, best_ms;
  const char *what;     /* the last candidate, one line (borrowed) */
} stof_tune_progress;

typedef struct stof_tune_opts {
  stof_plan_opts plan;  /* the target and plan options; scheme, hooks and knobs are the search's */
  const char *workload; /* a name for the records (NULL: "graph"); the key adds a structural hash */
  stof_db *db;          /* every measurement goes here (NULL: none kept); borrowed */
  double budget_s;      /* wall-clock budget of the whole search (<= 0: 30 s) */
  int max_trials;       /* measured candidates at most (0: no limit but the budget) */
  int skip_stage1;      /* 1: keep the default fusion scheme */
  int skip_stage2;      /* 1: stop after stage 1 */
  int force;            /* 1: search even when the database holds a best record */
  int reps, warmup;     /* per measurement (0: 10 and 2) */
  int stage1_samples;   /* knob settings measured per fusion scheme, best kept (0: 3) */
  int threads;          /* compiling threads (0: one per processor, at most 16): a round's
                           candidates compile ahead, in parallel, then run one at a time */
  uint64_t seed;        /* the sampling's seed (0: 1) */
  int ntemplate;        /* the user's templates, explored beside the built-in ones */
  const stof_template *templates;
  /* inputs of the measurements and of the correctness check: every placeholder the
   * outputs read (borrowed; on the plan's device or copied once) */
  int nfeed;
  const stof_op *const *feed_ops;
  const stof_tensor *const *feed;
  /* progress: called after every candidate (NULL: a bar on stderr when verbose) */
  void (*progress)(void *ud, const stof_tune_progress *p);
  void *progress_ud;
  int verbose;
  /* one line per candidate on stderr (where the budget goes): its stage, seconds building
   * (compiling included), timing and checking, its result and the templates it ran beside
   * the defaults; and one per batch compiled ahead */
  int trace;
  /* fault injection for tests: candidates that use the template of this name compute a
   * wrong value (output 0's first element), as a miscompiled kernel would */
  const char *inject_wrong;
  /* ... and candidates that use the template of this name are timed 10 times slower than
   * they run (a slow candidate without waiting for one) */
  const char *inject_slow;
  /* ... and candidates that use the template of this name have their first run abandoned
   * at once, as one far past the slow cut is (a hang without waiting for one) */
  const char *inject_hang;
} stof_tune_opts;

typedef struct stof_tune_result {
  double default_ms;   /* the default scheme with default knobs (0 when loaded) */
  double stage1_ms;    /* after stage 1 */
  double best_ms;      /* the plan returned (its measured median) */
  int trials;          /* candidates measured (failed ones included) */
  int failed;          /* candidates that failed to build or run (pruned ones included) */
  int pruned;          /* of which refused by a pruning rule before compiling (a GEMM in
                          generated code on the GPU without a template that takes it) */
  int rejected;        /* candidates faster than the best that failed the correctness check */
  int cut_slow;        /* candidates measured no further: two timed runs both over 3x the
                          best so far, or their first run abandoned (below) */
  int abandoned;       /* of which abandoned during their first run (segment by segment):
                          past twice the cut before it ended; recorded with a lower bound */
  int from_db;         /* 1: the plan was rebuilt from the database's best record */
  double seconds;      /* wall time of the search */
  double compile_s;    /* of which compiling ahead (rounds' candidates, in parallel) */
  double setup_s;      /* of which the reference and the default plan (built, measured,
                          checked): what no budget can cut; the search proper follows */
  int compiled;        /* compile jobs run ahead (generated kernels; cached ones cost nothing) */
  char workload[128];  /* the records' workload key */
} stof_tune_result;

/** 1 when name is taken by the search itself ("auto", "tensorcore", "tensorcore_norm",
 *  "tensorcore_ffn", "vendor", "default"):
 *  no user template may have it. */
int stof_tune_name_reserved(const char *name);

/**
 * Searches the fastest correct plan for outputs[0..nout) of g on opts->plan.target: stage 1
 * starts from the default fusion scheme and keeps a move (expand: merge two neighbouring
 * segments; seize: a segment with a GEMM takes an op of a neighbouring segment without one;
 * compete: an op between two such segments goes to the one with fewer compute-intensive
 * ops; never more than two compute-intensive ops in a segment) only when its measured time
 * (the best of a few knob settings) improves; stage 2 samples templates and knob decisions
 * per distinct segment (identical segments are tuned once), the first round evenly, later
 * rounds weighted by the gain each segment's samples brought. Every candidate that would
 * become the best is first run with its memory poisoned and its outputs compared with the
 * reference (the interpreter on "c", the default plan on "cuda"): relative L2 at most 1e-5
 * (float32) or 1e-2 (float16, bfloat16), no NaN where the reference has none; one that
 * fails is recorded as ERR_CHECK and never chosen. Candidates that fail to build or run
 * are recorded with their status. With a database holding a best record of this workload,
 * device and version (and not force), the plan is rebuilt from it without measuring.
 * *plan gets the best plan with the feed bound (owned: stof_plan_free); *res (may be
 * NULL) the figures. Errors: the default plan failing, a feed missing or wrong, the
 * reference failing; candidates never fail the search.
 */
stof_status stof_tune(stof_graph *g, int nout, const stof_op *const *outputs, const stof_tune_opts *opts,
                      stof_plan **plan, stof_tune_result *res);

#ifdef __cplusplus
}
#endif

#endif /* STOF_SEARCH_H */
