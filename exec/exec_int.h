/*
 * exec/ internals: the plan's segments, values and memory, shared by scheme.c (the default
 * fusion scheme), build.c (implementations per segment), memory.c (the arena) and run.c
 * (running, capturing, timing).
 */
#ifndef STOF_EXEC_INT_H
#define STOF_EXEC_INT_H

#include <stof/exec.h>
#include <stof/kernels.h>
#include <stof/schedule.h>

#define EXEC_ALIGN 256
#define EXEC_MAX_INTRIN_IN 8

/* A GEMM segment: last = act(gemm(x, w) + bias) (+ res), flattened to [M, N]. */
typedef struct exec_gemm {
  const stof_op *gemm, *x, *w, *bias, *res;
  int trans_b;        /* w is [N, K] (1) or [K, N] (0) */
  int act;            /* 0 none, 1 relu, 2 gelu (tanh form on the GPU) */
  int exact_act;      /* the activation is the erf GELU (run exactly on the CPU) */
  int64_t M, N, K;
  stof_gemm_desc desc;
  stof_gemm_plan *plan; /* GPU; shared between identical segments (owner: shared_with < 0) */
} exec_gemm;

/* A generated segment: a graph of its own, built with the default schedule. */
typedef struct exec_generic {
  int nin, nout;
  const stof_op **in;  /* main-graph ops read (placeholders of the subgraph), id order */
  const stof_op **out; /* main-graph ops written */
  uint64_t key;        /* structural hash of the subgraph (sharing) */
  stof_func *func;     /* owner: shared_with < 0 */
  char *trace;         /* the default schedule as a Lua script (owner only; ctx memory) */
  int ntemp;
  size_t *temp_off;    /* arena offsets of the function's intermediates */
  size_t *temp_bytes;
} exec_generic;

typedef struct exec_intrin {
  const stof_intrin *in;
  int intrin_index;    /* into the plan's shared-state table */
  int knob[STOF_INTRIN_MAX_KNOBS];
  void *inst;          /* GPU instance; owner: shared_with < 0 */
  /* views (intrinsics with gpu_launch_strided): input i is read from src[i] at element
   * offset off[i] with strides stride[i]; the output is written into dst with strides
   * stride[ninput] (dst is the op itself, or the reader whose layout it takes) */
  int strided;
  const stof_op *src[EXEC_MAX_INTRIN_IN], *dst;
  int64_t off[EXEC_MAX_INTRIN_IN];
  int64_t stride[EXEC_MAX_INTRIN_IN + 1][STOF_MAX_DIMS];
} exec_intrin;

typedef struct exec_seg {
  stof_seg_kind kind;
  int nop, capop;
  const stof_op **op;  /* ascending ids */
  const stof_op *last; /* the op whose value the segment writes (GEMM, INTRIN) */
  int shared_with;
  char tmpl[96];
  char detail[768];
  /* knob decisions (the owner's; a shared segment copies the owner's) */
  int nknob;
  char *knob_name[STOF_PLAN_MAX_SEG_KNOBS]; /* ctx memory, owned */
  int64_t knob_value[STOF_PLAN_MAX_SEG_KNOBS];
  exec_gemm g;
  exec_generic gen;
  exec_intrin x;
} exec_seg;

/* A value: an op's output that lives in memory (a bound input, or a segment's output that
 * another segment or the caller reads). */
typedef struct exec_value {
  int used;            /* lives in memory */
  int input;           /* a placeholder: bound, not in the arena */
  size_t bytes;
  int first, last;     /* producing segment, last reading segment (nseg for outputs) */
  size_t off;          /* arena offset */
  uint64_t addr;       /* inputs: bound address (0 = unbound) */
  void *owned;         /* inputs copied: host memory (CPU plan) ... */
  uint64_t owned_dev;  /* ... or device memory (GPU plan) */
  size_t owned_bytes;
} exec_value;

struct stof_plan {
  stof_ctx *ctx;
  stof_graph *g;
  int nall;             /* the graph's op count when the plan was made (it may grow) */
  int cuda;
  stof_plan_opts opts;
  char *knobs_text;     /* opts.knobs, copied (ctx memory) */
  int nout;
  const stof_op **out;
  int nops;
  const stof_op **ops;  /* the ops the outputs need, id order */
  int *seg_of;          /* by op id: segment, -1 for placeholders */
  int *nconsumer;       /* by op id: readers among ops */
  unsigned char *is_out;/* by op id */
  const stof_op **view_of; /* by op id: the intrinsic op that reads (or writes) it as a view */
  exec_value *val;      /* by op id */
  int nseg, capseg;
  exec_seg *seg;
  char *scheme;
  /* intrinsics' shared state (one per distinct intrinsic) */
  int nshared;
  const stof_intrin *shared_in[8];
  void *shared[8];
  /* memory */
  size_t arena_bytes, values_bytes, owned_bytes, ws_bytes;
  void *arena_host;
  uint64_t arena_dev, ws_dev;
  /* stof_plan_jobs: the generated segments' compile jobs instead of builds */
  int jobs_only;
  int njob, capjob;
  stof_compile_job **jobs;
  /* GPU run state */
  stof_cuda_stream *stream;
  stof_cuda_graph *graph;
  int graph_valid;
  int ran;
};

/* scheme.c */
stof_status exec_scheme_default(stof_plan *p);
/* opts.scheme: the segments of a given code (see stof_plan_opts.scheme) */
stof_status exec_scheme_given(stof_plan *p, const char *code);
int exec_match_gemm(const stof_op *op, exec_gemm *g);
/* build.c */
stof_status exec_build_segments(stof_plan *p);
/* opts.knobs applied to intrinsic in's knobs (in NULL: only checked) */
stof_status exec_forced_knobs(stof_plan *p, const stof_intrin *in, int *knob);
void exec_free_segments(stof_plan *p);
/* memory.c */
stof_status exec_mark_values(stof_plan *p);
stof_status exec_plan_memory(stof_plan *p);
uint64_t exec_addr(const stof_plan *p, const stof_op *op);
/* the extern op of an intrinsic segment (its views around it are the other ops) */
static inline const stof_op *exec_intrin_op(const exec_seg *s) {
  for (int k = 0; k < s->nop; k++)
    if (s->op[k]->kind == STOF_OP_EXTERN) return s->op[k];
  return s->last;
}
/* records a knob decision of segment s (dropped past STOF_PLAN_MAX_SEG_KNOBS) */
stof_status exec_seg_knob(stof_plan *p, exec_seg *s, const char *name, int64_t value);
/* run.c */
stof_status exec_launch_all(stof_plan *p);
stof_status exec_launch_segment(stof_plan *p, int i);

#endif
