/*
 * The schedule module's cross-file internals: the index-based state (growable arrays of
 * loops, blocks, knobs, groups, annotations, trace instructions; strings and numbers in
 * pools addressed by offset), the trace recorder, and the loop IR.
 *
 * Invariants:
 *  - No pointer points into a schedule's own arrays (only into the graph), so a clone is
 *    a copy of each array.
 *  - A primitive validates, then reserves every array it will append to (sched_reserve),
 *    then applies its change and records it: nothing after validation can fail, so a
 *    failing primitive leaves the schedule as it was.
 *  - Loops are never deleted: a split or fused loop stays in the array, marked replaced,
 *    so that the lowering can express every original axis through the current loops.
 */
#ifndef STOF_SCHEDULE_INT_H
#define STOF_SCHEDULE_INT_H

#include <stdint.h>

#include <stof/schedule.h>

/* ---------------------------------------------------------------- growable arrays */

typedef struct sched_vec {
  void *data;
  int len, cap;
  size_t elem;
} sched_vec;

void sched_vec_init(sched_vec *v, size_t elem);
/* Room for extra more elements (STOF_ERR_NOMEM recorded in ctx on failure). */
stof_status sched_vec_reserve(stof_ctx *ctx, sched_vec *v, int extra);
/* Appends n elements (copied from src, or zeroed when src is NULL); returns the index of
 * the first, or -1 on NOMEM. */
int sched_vec_push(stof_ctx *ctx, sched_vec *v, const void *src, int n);
stof_status sched_vec_copy(stof_ctx *ctx, sched_vec *dst, const sched_vec *src);
void sched_vec_free(stof_ctx *ctx, sched_vec *v);

/* Appends 2 * depth spaces. */
void sched_indent(stof_buf *b, int depth);

/* ---------------------------------------------------------------- state */

/* How a loop left its block's nest. */
enum { SCHED_LEAF, SCHED_REPL_SPLIT, SCHED_REPL_FUSE };

typedef struct sched_loop {
  int name;               /* offset in chars */
  int block;
  int64_t extent;
  stof_iter_kind iter;
  stof_derive_kind derive;
  int axis;               /* ROOT: index in the block's axes (compute axes, then reduce) */
  int source;             /* SPLIT: the loop split; FUSE: the outermost source */
  int part, nparts;       /* SPLIT: position among the parts; FUSE: sources fused */
  int64_t stride;         /* SPLIT: source = sum over parts of part * stride */
  int repl;               /* SCHED_LEAF, or how it was replaced */
  int repl_first;         /* REPL_SPLIT: its first part (parts have consecutive ids);
                             REPL_FUSE: the fused loop */
  int repl_n;             /* REPL_SPLIT: number of parts */
  int64_t repl_stride;    /* REPL_FUSE: this loop = fused / repl_stride % extent */
  int repl_outer;         /* REPL_FUSE: outermost source (no modulo) */
  stof_ann_kind ann;
  stof_thread_tag thread;
  int tv;                 /* trace value that last named it (-1: never handed out) */
} sched_loop;

typedef struct sched_block {
  const stof_op *op;
  int naxis;              /* compute axes then reduce axes */
  int root;               /* loop id of axis 0: axis a is root loop root + a */
  int nloop;
  int loop[STOF_SCHED_MAX_LOOPS];
  int tv;
} sched_block;

typedef struct sched_knob {
  int name;               /* offset in chars */
  int cand, ncand;        /* offset in nums */
  int decision;
  int tv;
} sched_knob;

typedef struct sched_group {
  int first, nop;         /* op ids at nums[first ..] */
  int alive;
  int tv;
} sched_group;

typedef struct sched_annot {
  int is_block, id;
  int key, value;         /* offsets in chars */
} sched_annot;

/* Trace value kinds. */
enum { SCHED_V_BLOCK, SCHED_V_LOOP, SCHED_V_KNOB, SCHED_V_GROUP };

typedef struct sched_inst {
  stof_inst_kind kind;
  int in, nin;            /* ints[in ..]: input values (-1: none, as for a constant factor) */
  int num, nnum;          /* nums[num ..]: factors, candidates */
  int dbl, ndbl;          /* dbls[dbl ..]: probabilities */
  int str, nstr;          /* ints[str ..]: offsets of strings in chars */
  int out, nout;          /* values out .. out + nout - 1 */
  int decision;           /* Knob, SampleCategorical */
} sched_inst;

struct stof_trace {
  stof_ctx *ctx;
  sched_vec insts;        /* sched_inst */
  sched_vec ints;         /* int */
  sched_vec nums;         /* int64_t */
  sched_vec dbls;         /* double */
  sched_vec chars;        /* char */
  sched_vec vkinds;       /* unsigned char: SCHED_V_* of each value */
};

struct stof_sched {
  stof_ctx *ctx;
  stof_graph *g;
  int nout;
  const stof_op **out;    /* ctx memory; ops borrowed from the graph */
  int nop;
  const stof_op **ops;    /* what the outputs need, topological (ids ascending) */
  sched_vec blocks;       /* sched_block */
  sched_vec loops;        /* sched_loop */
  sched_vec knobs;        /* sched_knob */
  sched_vec groups;       /* sched_group */
  sched_vec annots;       /* sched_annot */
  sched_vec nums;         /* int64_t */
  sched_vec chars;        /* char */
  stof_trace trace;
};

static inline sched_loop *sched_loop_at(const stof_sched *s, int i) {
  return (sched_loop *)s->loops.data + i;
}
static inline sched_block *sched_block_at(const stof_sched *s, int i) {
  return (sched_block *)s->blocks.data + i;
}
static inline sched_knob *sched_knob_at(const stof_sched *s, int i) {
  return (sched_knob *)s->knobs.data + i;
}
static inline sched_group *sched_group_at(const stof_sched *s, int i) {
  return (sched_group *)s->groups.data + i;
}
static inline sched_annot *sched_annot_at(const stof_sched *s, int i) {
  return (sched_annot *)s->annots.data + i;
}
static inline const char *sched_str(const stof_sched *s, int off) {
  return (const char *)s->chars.data + off;
}
static inline int64_t *sched_num(const stof_sched *s, int off) {
  return (int64_t *)s->nums.data + off;
}
static inline const char *sched_loop_name(const stof_sched *s, int loop) {
  return sched_str(s, sched_loop_at(s, loop)->name);
}
static inline sched_inst *trace_inst_at(const stof_trace *t, int i) {
  return (sched_inst *)t->insts.data + i;
}
static inline int *trace_int(const stof_trace *t, int off) { return (int *)t->ints.data + off; }
static inline int64_t *trace_num(const stof_trace *t, int off) {
  return (int64_t *)t->nums.data + off;
}
static inline double *trace_dbl(const stof_trace *t, int off) {
  return (double *)t->dbls.data + off;
}
static inline const char *trace_str(const stof_trace *t, int off) {
  return (const char *)t->chars.data + off;
}

/* What a primitive will append, reserved in one go before it changes anything. */
typedef struct sched_need {
  int loops, knobs, groups, annots, nums, chars;
  int insts, tints, tnums, tdbls, tchars, tvalues;
} sched_need;

stof_status sched_reserve(stof_sched *s, const sched_need *n);
/* Adds a NUL-terminated string to the pool; returns its offset (-1 on NOMEM). */
int sched_add_str(stof_sched *s, const char *str);
/* Appends a new loop (fields from proto, name from name); returns its id. */
int sched_add_loop(stof_sched *s, const sched_loop *proto, const char *name);
/* The axis var of axis a of block b (compute axes, then the reduce axes). */
const stof_var *sched_block_axis(const sched_block *b, int a);
/* The REDUCE expression at the top of a block's body, or NULL. */
const stof_expr *sched_block_reduce(const sched_block *b);
/* Position of loop in its block's nest, or -1 when it is not a leaf. */
int sched_loop_pos(const stof_sched *s, int loop);
/* The block of op, or -1. */
int sched_block_of_op(const stof_sched *s, const stof_op *op);
/* The block named name, with get_block's errors (what names the primitive); no recording. */
stof_status sched_find_block(const stof_sched *s, const char *what, const char *name, int *block);

/* Checks an id handed out by the schedule: a loop still in its block's nest. what names
 * the primitive in messages. */
stof_status sched_check_loop(stof_sched *s, const char *what, int loop);
stof_status sched_check_block(stof_sched *s, const char *what, int block);
/* The value of factor f for messages and arithmetic (knob decisions resolved). */
stof_status sched_factor_value(stof_sched *s, const char *what, stof_factor f, int64_t *v);

/* ---------------------------------------------------------------- trace recording */

void trace_init(stof_trace *t, stof_ctx *ctx);
void trace_free_arrays(stof_trace *t);
stof_status trace_copy(stof_trace *dst, const stof_trace *src);
/* Reserve amounts for recording an instruction with these sizes. */
void trace_need(sched_need *n, int nin, int nnum, int ndbl, int nstr, int strbytes, int nout);
/* Appends an instruction (space reserved beforehand); out values get kind vkind. Returns
 * the first output value (or the instruction index when nout is 0). */
int trace_record(stof_trace *t, stof_inst_kind kind, int nin, const int *in, int nnum,
                 const int64_t *num, int ndbl, const double *dbl, int nstr,
                 const char *const *str, int decision, int nout, int vkind);

/* ---------------------------------------------------------------- groups (state.c) */

/* group with the op list given by block ids (replay passes names resolved to blocks). */
stof_status sched_group_blocks(stof_sched *s, int nblock, const int *blocks, int *group);

/* ---------------------------------------------------------------- loop IR (lower.c) */

enum { LIR_FOR, LIR_LET, LIR_IF, LIR_STORE, LIR_BLOCK };
enum { LIR_STORE_PLAIN, LIR_STORE_INIT, LIR_STORE_UPDATE };
enum { LIR_E_CONST, LIR_E_LOOP, LIR_E_AXIS, LIR_E_ADD, LIR_E_MUL, LIR_E_DIV, LIR_E_MOD, LIR_E_LT };

/* A statement: FOR (loop, body), LET (axis = value), IF (cond, body), STORE (the block's
 * op at its axes: the body, the reduction's identity or its update), BLOCK (one block's
 * nest). Children are first .. next links. */
typedef struct lir_stmt {
  int kind;
  int block;
  int loop;               /* FOR */
  int axis;               /* LET */
  int expr;               /* LET: value; IF: condition */
  int store;              /* STORE: LIR_STORE_* */
  int first, last, next;  /* children, sibling */
} lir_stmt;

/* An index expression (int64). LOOP: a loop's variable; AXIS: a let-bound axis of the
 * block. */
typedef struct lir_expr {
  int kind;
  int a, b;
  int64_t c;              /* CONST */
  int loop;               /* LOOP */
  int axis;               /* AXIS */
} lir_expr;

typedef struct sched_lir {
  const stof_sched *s;
  stof_ctx *ctx;
  sched_vec stmts;        /* lir_stmt */
  sched_vec exprs;        /* lir_expr */
  int first;              /* the BLOCK statements, in topological order */
} sched_lir;

stof_status sched_lower(const stof_sched *s, sched_lir *out);
void sched_lir_free(sched_lir *l);
static inline lir_stmt *lir_stmt_at(const sched_lir *l, int i) {
  return (lir_stmt *)l->stmts.data + i;
}
static inline lir_expr *lir_expr_at(const sched_lir *l, int i) {
  return (lir_expr *)l->exprs.data + i;
}
/* Is block b's op an output of the schedule? */
int sched_is_output(const stof_sched *s, int block);

/* ---------------------------------------------------------------- C code (codegen_c.c) */

/* The C source of s: int stof_kernel(void *arg0, ...), returning 0 or 1 (out of memory).
 * Owned string. */
stof_status sched_codegen_c(const stof_sched *s, int nargs, const stof_op *const *args,
                            char **out);

/* ---------------------------------------------------------------- runtime (runtime_c.c) */

/* Compiles src (or finds it in the cache) and loads it: *dl the handle, *fn stof_kernel,
 * *path (owned string) the library. */
stof_status sched_runtime_load(stof_ctx *ctx, const char *src, void **dl, void **fn,
                               char **path);

#endif
