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
  int dead;               /* its block's loops were regenerated (compute_at): unusable */
  int elide;              /* a unit loop made by compute_at: no loop in the code (value 0) */
} sched_loop;

/* Block states. */
enum { SCHED_B_LIVE, SCHED_B_INLINED, SCHED_B_REV_INLINED };
/* Storage scopes of the buffer a block writes (the C backend: all are plain memory). */
#define SCHED_SCOPE_LIST(X) X(GLOBAL, "global") X(SHARED, "shared") X(LOCAL, "local") X(WARP, "warp")
enum {
#define STOF_X(name, text) SCHED_SCOPE_##name,
  SCHED_SCOPE_LIST(STOF_X)
#undef STOF_X
  SCHED_SCOPE_COUNT
};
const char *sched_scope_name(int scope);
/* The scope named name, or -1. */
int sched_scope_parse(const char *name);

/* A block: a compute evaluated over its loops and stored into a buffer. op is the compute
 * it evaluates now: its axes (op->axis, then the reduce axes of op->body) and its body;
 * primitives that rewrite a body build a new op in the graph (fresh axes, same names and
 * extents) so that root loop root + a stays axis a. out is the buffer it writes at its
 * axes in order (an rfactor block inserts loop rf_loop's value at index rf_pos). */
typedef struct sched_block {
  const stof_op *op;      /* what it computes now (graph memory) */
  const stof_op *orig;    /* the op it was made for: groups, stof_sched_block_op */
  const stof_op *out;     /* the buffer it writes: op, a cache, an rfactor buffer, or its
                             consumer's after reverse_compute_inline */
  int name;               /* offset in chars */
  int state;              /* SCHED_B_* */
  int attach;             /* loop it is computed at (-1: the root) */
  int attach_rev;         /* reverse_compute_at: after the loop's body, not before */
  int scope;              /* SCHED_SCOPE_* of out */
  int rf_loop, rf_pos;    /* rfactor block (rf_loop >= 0) */
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
static inline const char *sched_block_name(const stof_sched *s, int block) {
  return sched_str(s, sched_block_at(s, block)->name);
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
/* As sched_find_block, but a block that is gone (inlined) is found too: group names the
 * ops of a block whatever became of it (the Lua binding's s:group resolves names alike). */
stof_status sched_find_block_any(const stof_sched *s, const char *what, const char *name, int *block);

/* Checks an id handed out by the schedule: a loop still in its block's nest. what names
 * the primitive in messages. */
stof_status sched_check_loop(stof_sched *s, const char *what, int loop);
stof_status sched_check_block(stof_sched *s, const char *what, int block);
/* The value of factor f for messages and arithmetic (knob decisions resolved). */
stof_status sched_factor_value(stof_sched *s, const char *what, stof_factor f, int64_t *v);

/* Appends a block (fields from proto, name from name) with root loops for the axes of
 * proto->op (named after them, or ax_names[a] when given); returns its id (-1 on NOMEM). */
int sched_add_block(stof_sched *s, const sched_block *proto, const char *name);
/* Gives block new root loops over its op's axes (extents ext[a], or the axes' own when ext
 * is NULL); the old loops are marked dead. elide_units marks unit loops elided. names[a]
 * names loop a when not NULL. Returns STOF_ERR_NOMEM or STOF_OK. */
stof_status sched_regen_loops(stof_sched *s, int block, const int64_t *ext, const char *const *names,
                              int elide_units);
/* A block name not used by any block of s: base, else base_1, base_2, ... into buf. */
const char *sched_unique_name(const stof_sched *s, const char *base, char *buf, size_t cap);
/* Is the block's loop nest under loop (attached at it, inside it, or its own block)? */
int sched_under_loop(const stof_sched *s, int block, int loop);
/* Is block a descendant of anc in the attachment tree (computed at a loop of anc, or of
 * a block that is)? */
int sched_attached_under(const stof_sched *s, int block, int anc);
/* Does block b's body load buffer t? */
int sched_reads(const stof_sched *s, int b, const stof_op *t);
/* The blocks (live, other than except) whose bodies load buffer t, into out[0..cap);
 * returns their number. */
int sched_readers(const stof_sched *s, const stof_op *t, int except, int *out, int cap);
/* The live block that writes buffer t, or -1. */
int sched_writer(const stof_sched *s, const stof_op *t);
/* The first block (by id) computed at a loop of block b, or -1. */
int sched_first_attached(const stof_sched *s, int b);

/* Transactional primitives that rewrite much of the state work on a clone: sched_try
 * makes it; sched_commit validates the clone (a trial lowering, whose errors are prefixed
 * with what) and, when it is sound, moves it into s. Either way the clone is freed. */
stof_status sched_try(stof_sched *s, stof_sched **c);
stof_status sched_commit(stof_sched *s, stof_sched *c, const char *what);

/* A tensorized mma nest (annotate.c): operands, the tile it covers (m x n x k) and its
 * three loops (rows, columns, reduction). */
typedef struct sched_mma {
  const stof_op *a, *b;
  const stof_expr *la, *lb;   /* their loads */
  int b_nk;                   /* B is read as B[j, k] (a weight stored [N, K]), not B[k, j] */
  int64_t m, n, k;
  int loops[3];
} sched_mma;
/* Checks that loop can be tensorized with intrin (STOF_ERR_SCHEDULE naming why not); m (may
 * be NULL) gets the match. */
stof_status sched_tensorize_match(const stof_sched *s, int loop, const char *intrin, sched_mma *m);

/* ---------------------------------------------------------------- rewriting (rewrite.c) */

/* What to do with the loads of one buffer while rewriting a body. */
enum { SCHED_LOADS_KEEP, SCHED_LOADS_REDIRECT, SCHED_LOADS_INLINE };
typedef struct sched_load_rule {
  int kind;
  const stof_op *tensor;  /* the buffer whose loads change */
  const stof_op *to;      /* REDIRECT: loads read this buffer instead (same indices) */
  const stof_op *op;      /* INLINE: loads become op's body at the load's indices */
} sched_load_rule;

/* A new compute op in s's graph named name: fresh axes with the names and extents of
 * from's axes (from->axis; ndim from->ndim), whose body is body (an expression over the
 * vars vars[0..ndim) and its own reduce axes) with vars[d] replaced by the fresh axis d,
 * reduce axes by fresh ones, and loads rewritten by rule. The result is cast to dtype. */
stof_status sched_rebuild(stof_sched *s, const char *name, const stof_op *from,
                          const stof_var *const *vars, const stof_expr *body, stof_dtype dtype,
                          const sched_load_rule *rule, const stof_op **out);
/* from (a SUM reduction) rebuilt to accumulate in acc: the factors of its product (or its
 * source) cast to acc, the reduction and the result in acc (fresh axes as sched_rebuild). */
stof_status sched_rebuild_widened(stof_sched *s, const char *name, const stof_op *from, stof_dtype acc,
                                  const stof_op **out);
/* The distinct buffers that e loads, in first-use order, into out[0..cap); returns their
 * number (may exceed cap). */
int sched_expr_loads(const stof_expr *e, const stof_op **out, int cap);

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

/* ---------------------------------------------------------------- sampling (state.c) */

/* The most divisors sched_divisors lists (every extent below 2^31 has fewer than 1600). */
#define SCHED_MAX_DIVISORS 2048
/* The largest extent sample_perfect_tile tiles. */
#define SCHED_MAX_TILE_EXTENT INT64_C(2147483647)
/* The divisors of e (1 <= e <= SCHED_MAX_TILE_EXTENT), ascending, into out[0..
 * SCHED_MAX_DIVISORS); returns their number. */
int sched_divisors(int64_t e, int64_t *out);
/* stof_sched_sample_perfect_tile. */
stof_status sched_sample_perfect_tile(stof_sched *s, int loop, int n, int max_innermost,
                                      const int64_t *decision, const char *const *names,
                                      int *knobs);
/* stof_sched_sample_compute_location and, when cand is not NULL, the candidates the trace expects (replay: they must be the ones found). */
stof_status sched_sample_compute_location(stof_sched *s, int block, int decision,
                                          const char *name, int ncand, const int64_t *cand,
                                          int *knob);
/* compute_at.c: the loops a location knob's depths count: those enclosing the nest of
 * block's first consumer (by id), then its own, outermost first, into out[0..cap); returns
 * their number, 0 when block has no consumer (or is gone), -1 when there are more than cap.
 * *consumer (may be NULL) gets the consumer. */
int sched_location_chain(const stof_sched *s, int block, int *out, int cap, int *consumer);

/* ---------------------------------------------------------------- groups (state.c) */

/* group with the op list given by block ids (replay passes names resolved to blocks). */
stof_status sched_group_blocks(stof_sched *s, int nblock, const int *blocks, int *group);

/* The schedule code is generated from (fuse_groups.c): *out NULL when s has no live group
 * (use s), else a clone in which every group's members that were kernels of their own are
 * inlined into, or computed at, the group's anchor (STOF_ERR_SCHEDULE when one cannot be). */
stof_status sched_fuse_groups(const stof_sched *s, stof_sched **out);

/* ---------------------------------------------------------------- bounds (bound.c) */

/* An affine form: c + sum k[i] * value(loop[i]). A term's loop is a leaf loop, or the
 * source of a fuse (a non-affine function of the fused loop, ranging over [0, extent)).
 * Terms are sorted by loop id; bad marks an expression that is not affine. */
#define SCHED_AFF_MAX 24
typedef struct sched_aff {
  int n, bad;
  int loop[SCHED_AFF_MAX];
  int64_t k[SCHED_AFF_MAX];
  int64_t c;
} sched_aff;

/* An interval of a tensor dimension: [lo, lo + ext), lo affine in the fixed loops. */
typedef struct sched_range {
  sched_aff lo;
  int64_t ext;
  int full;               /* the whole dimension (lo = 0) */
} sched_range;

/* Bound inference over a schedule: the region of its axes each attached block computes
 * (base[a] + [0, loop extent)), worked out from its consumers (compute_at) or its
 * producer (reverse_compute_at), and the loops that enclose each block. */
typedef struct sched_bounds {
  const stof_sched *s;
  stof_ctx *ctx;
  int nblock;
  unsigned char *state;   /* per block: 0 unknown, 1 in progress, 2 done */
  sched_aff *base;        /* per block, STOF_MAX_DIMS data-parallel axes */
  int64_t *need;          /* per block and axis: the extent its region needs */
  unsigned char *fixed;   /* scratch: per loop */
  int check;              /* an extent a region needs beyond its loop's is an error (1) */
} sched_bounds;

stof_status sched_bounds_init(sched_bounds *bd, const stof_sched *s);
void sched_bounds_free(sched_bounds *bd);
/* Works out the regions of every attached block (errors: STOF_ERR_SCHEDULE). */
stof_status sched_bounds_infer(sched_bounds *bd);
/* The loops enclosing block b's nest, outermost first, into out[0..cap); returns their
 * number or -1 when there are more than cap. */
int sched_enclosing(const stof_sched *s, int b, int *out, int cap);
/* The value of axis a of block b (its base included) as an affine form; a split loop that
 * overshoots its extent and reads no loop marked in bd->fixed is one term (its guard keeps
 * it below its extent). _full expands every split into its parts. */
void sched_axis_aff(const sched_bounds *bd, int b, int a, sched_aff *out);
void sched_axis_aff_full(const sched_bounds *bd, int b, int a, sched_aff *out);
/* The value of loop (any loop of a block) as an affine form. */
void sched_loop_aff(const stof_sched *s, int loop, sched_aff *out);
/* An integer expression over block b's axes as an affine form (bad when it is not). */
void sched_expr_aff(const sched_bounds *bd, int b, const stof_expr *e, sched_aff *out);
/* The interval of x when the loops marked in bd->fixed are fixed and the others range
 * over their extents, within a dimension of extent dim. */
void sched_aff_range(const sched_bounds *bd, const sched_aff *x, int64_t dim, sched_range *out);
/* r = r U x (a full dimension when their fixed parts differ). */
void sched_range_union(sched_range *r, const sched_range *x, int64_t dim);
/* Marks the loops of list[0..n) in bd->fixed (clearing the others). */
void sched_bounds_fix(sched_bounds *bd, const int *list, int n);
/* As sched_bounds_fix for a buffer of storage scope scope: for shared memory the loops bound
 * to threadIdx stay free (the buffer holds what every thread of the CUDA block needs). */
void sched_bounds_fix_scope(sched_bounds *bd, const int *list, int n, int scope);
/* The store indices of block b into its buffer, as affine forms (rank of b->out). */
void sched_store_aff(const sched_bounds *bd, int b, sched_aff *out);
/* The ranges of buffer t that block b reads, with the loops in bd->fixed fixed, united
 * into range[0..rank of t) (start them with ext 0: empty). */
void sched_read_ranges(const sched_bounds *bd, int b, const stof_op *t, sched_range *range);
/* Per data-parallel axis a of block b: the dimension of t that b reads with that axis as
 * the whole index, at every load of t (-1: none; -2: several). */
void sched_axis_map(const stof_sched *s, int b, const stof_op *t, int *map);
/* A reverse-attached block's producer under its loop: the writer of the first buffer it
 * reads that lies under the loop it is attached at (-1: none). Its region follows it. */
int sched_rev_source(const stof_sched *s, int b);
/* The least and greatest values of x over the extents of all its loops. */
void sched_aff_minmax(const stof_sched *s, const sched_aff *x, int64_t *lo, int64_t *hi);

/* ---------------------------------------------------------------- loop IR (lower.c) */

enum { LIR_FOR, LIR_LET, LIR_IF, LIR_STORE, LIR_BLOCK };
enum { LIR_STORE_PLAIN, LIR_STORE_INIT, LIR_STORE_UPDATE, LIR_STORE_FINAL };
enum {
  LIR_E_CONST, LIR_E_LOOP, LIR_E_AXIS, LIR_E_ADD, LIR_E_SUB, LIR_E_MUL, LIR_E_DIV, LIR_E_MOD,
  LIR_E_LT, LIR_E_GE
};

/* A statement: FOR (loop, body), LET (axis = value), IF (cond, body), STORE (the block's
 * op at its axes into its buffer: the body, the reduction's identity or its update; for a
 * block with a float32 accumulator (lir_blk.acc) the identity and the update go into the
 * accumulator and FINAL stores it, rounded, into the buffer), BLOCK (one block's nest;
 * block -1 is the root of everything). Children are first .. next links. */
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
 * statement's block. */
typedef struct lir_expr {
  int kind;
  int a, b;
  int64_t c;              /* CONST */
  int loop;               /* LOOP */
  int axis;               /* AXIS */
} lir_expr;

/* A buffer of the lowered schedule. An external one (an input or a caller's tensor) is
 * full-size and indexed absolutely; an internal one written and read only under loop at
 * holds that loop iteration's region: extents ext, indices less min[d]. */
typedef struct lir_buf {
  const stof_op *op;
  int writer;             /* the block writing it (-1: an input) */
  int external;
  int at;                 /* loop it is allocated per iteration of (-1: the function) */
  int scope;
  int64_t ext[STOF_MAX_DIMS];
  int min[STOF_MAX_DIMS]; /* exprs (-1: 0) */
} lir_buf;

/* Per block: the store's index exprs into its buffer. A float16 or bfloat16 reduction
 * accumulates in float32 (acc): the init and update nests write an accumulator with one
 * element per iteration of the data-parallel loops inside its outermost reduce loop
 * (acc_loop[0..nacc), outermost first, elided loops left out; none: a scalar), and a final
 * nest over those loops rounds it into the buffer once. */
typedef struct lir_blk {
  int store[STOF_MAX_DIMS];
  int acc;
  int nacc;
  int acc_loop[STOF_SCHED_MAX_LOOPS];
} lir_blk;

typedef struct sched_lir {
  const stof_sched *s;
  stof_ctx *ctx;
  sched_vec stmts;        /* lir_stmt */
  sched_vec exprs;        /* lir_expr */
  sched_vec bufs;         /* lir_buf */
  lir_blk *blk;           /* per block id */
  int nblk;
  int root;               /* the BLOCK statement holding everything */
  int first;              /* its first child (the root blocks, in order) */
} sched_lir;

/* Lowers s. args[0..nargs) are the caller's tensors (NULL: the outputs and inputs only):
 * other buffers are internal and compacted where they can be. */
stof_status sched_lower(const stof_sched *s, int nargs, const stof_op *const *args,
                        sched_lir *out);
void sched_lir_free(sched_lir *l);
/* A bound on loop's valid values: at or above it, the root loop it comes from would leave
 * its extent, so no iteration needs them. A root loop: its extent; a part of a split:
 * ceil(the source's bound / stride), at most its extent; a fused loop: the product of its
 * sources' bounds (it runs compact, taking only their valid values: lower.c), or, bound to
 * a thread or vectorized (decoded by the extents), one past the largest value whose sources
 * are all below their bounds. */
int64_t sched_loop_valid_bound(const stof_sched *s, int loop);
/* The iterations loop runs in the lowered code: its valid bound, or its extent when it is
 * bound to a thread or vectorized (the C backend runs a vectorized loop to its valid bound
 * too). A factor far above the extent (2^40 on a loop of 3) thus makes a loop of 3,
 * guard-free, not 2^40 idle turns, also when its parts are split again or fused. */
int64_t sched_loop_run_extent(const stof_sched *s, int loop);
static inline lir_stmt *lir_stmt_at(const sched_lir *l, int i) {
  return (lir_stmt *)l->stmts.data + i;
}
static inline lir_expr *lir_expr_at(const sched_lir *l, int i) {
  return (lir_expr *)l->exprs.data + i;
}
/* The buffer entry of op, or NULL. */
const lir_buf *lir_find_buf(const sched_lir *l, const stof_op *op);
/* Is the buffer block b writes an output of the schedule? */
int sched_is_output(const stof_sched *s, int block);
/* Is op an output of the schedule? */
int sched_is_output_op(const stof_sched *s, const stof_op *op);

/* ---------------------------------------------------------------- memory safety (access.c) */

/* A load whose indices in the dims of mask are clamped into its buffer when emitted. */
typedef struct sched_clamp {
  const stof_expr *load;
  unsigned mask;
} sched_clamp;
typedef struct sched_access {
  int n, cap;
  sched_clamp *clamp;     /* ctx memory */
} sched_access;
/* Checks every load of s's live blocks against its tensor's extents (see access.c): an
 * affine index that leaves the tensor is STOF_ERR_SCHEDULE ("build: load A[i + 1] may read
 * index 4 of dim 0 (extent 4)"); the loads whose other indices may leave it go into *out,
 * to be clamped (free with sched_access_free). */
stof_status sched_access_check(const stof_sched *s, sched_access *out);
void sched_access_free(stof_ctx *ctx, sched_access *a);
/* The dims of load to clamp (0: none). */
unsigned sched_access_clamp(const sched_access *a, const stof_expr *load);

/* ---------------------------------------------------------------- C code (codegen_c.c) */

/* The C source of s: int stof_kernel(void *arg0, ...), returning 0 or 1 (out of memory).
 * Owned string. */
stof_status sched_codegen_c(const stof_sched *s, int nargs, const stof_op *const *args,
                            char **out);

/* ---------------------------------------------------------------- runtime (runtime_c.c) */

/* Compiles src (or finds it in the cache) and loads it: *dl the handle, *fn stof_kernel,
 * *path (owned string) the library. */
/* Compiles src into the library cache unless it is there (no load): compiling ahead. */
stof_status sched_runtime_compile(stof_ctx *ctx, const char *src);
stof_status sched_runtime_load(stof_ctx *ctx, const char *src, void **dl, void **fn,
                               char **path);

/* ---------------------------------------------------------------- CUDA code (codegen_cuda.c) */

/* A kernel of the CUDA source and its launch. */
typedef struct sched_cuda_kernel {
  char name[64];
  unsigned grid[3], block[3];
  size_t smem;               /* dynamic shared memory, bytes */
} sched_cuda_kernel;

/* What launching the CUDA source needs: its kernels in launch order, and the sizes of the
 * intermediates in global memory, which every kernel takes after the build's tensors. */
typedef struct sched_cuda_info {
  int nkernel;
  sched_cuda_kernel *kernel; /* ctx memory */
  int sm90a;                 /* the source uses wgmma: compile for sm_90a */
  int ntemp;
  size_t *temp_bytes;        /* ctx memory */
} sched_cuda_info;

/* The CUDA source of s (owned string) and, when info is not NULL, its launch plan (free it
 * with sched_cuda_info_free). A schedule that CUDA cannot run is STOF_ERR_SCHEDULE. */
stof_status sched_codegen_cuda(const stof_sched *s, int nargs, const stof_op *const *args,
                               char **out, sched_cuda_info *info);
void sched_cuda_info_free(stof_ctx *ctx, sched_cuda_info *info);

/* ---------------------------------------------------------------- build (runtime_c.c, runtime_cuda.c) */

/* stof_build's argument checks (STOF_ERR_ARG naming the argument). */
stof_status sched_build_check_args(const stof_sched *s, int nargs, const stof_op *const *args);

/* A CUDA build: the loaded module, its kernels and launch plan. */
typedef struct sched_cuda_func sched_cuda_func;
/* Generates the CUDA source of s (*source, owned), compiles it for the GPU (or sm_80 when
 * there is none: then STOF_ERR_NO_DEVICE once it compiled) and loads it. Owned *out. */
stof_status sched_cuda_build(const stof_sched *s, int nargs, const stof_op *const *args,
                             char **source, sched_cuda_func **out);
/* Launches the kernels in order on device pointers ptrs[0..nargs) and waits for them. */
/* Launches on the context's current stream: ptrs = the arguments, then the intermediates. */
stof_status sched_cuda_launch(sched_cuda_func *f, const uint64_t *ptrs);
int sched_cuda_ntemp(const sched_cuda_func *f);
size_t sched_cuda_temp_bytes(const sched_cuda_func *f, int i);
stof_status sched_cuda_call(sched_cuda_func *f, const uint64_t *ptrs);
/* Launches the kernels warmup times, waits, then reps (>= 1) times back to back between two
 * CUDA events on the default stream; *ms gets the mean time of one launch of them all. */
stof_status sched_cuda_time(sched_cuda_func *f, const uint64_t *ptrs, int reps, int warmup,
                            double *ms);
void sched_cuda_func_free(sched_cuda_func *f);


/* ---------------------------------------------------------------- codegen_common.c */

/* Where a buffer of a CUDA kernel lives (cgen.place, per lowered buffer). */
enum { PLACE_GLOBAL, PLACE_LOCAL, PLACE_SHARED, PLACE_WARP };

/* The most loads of one vectorized loop read through vector registers (cgen.vload). */
#define SCHED_VLOAD_MAX 8

/* The layout of a buffer in shared memory: rows (row-major, padded or not), or the 128-byte
 * swizzled tiles the wgmma instructions read: SW128_K for an operand read along its rows
 * (A: 64 elements per row, chunk c of row r at c ^ (r % 8)), SW128_MN for one read along its
 * columns (B[k][n]: blocks of 64 columns, each rows x 64, swizzled the same way); WGACC
 * marks a warp buffer holding a warpgroup's wgmma accumulators (not a shared layout). */
enum { SCHED_LAYOUT_ROWS, SCHED_LAYOUT_SW128_K, SCHED_LAYOUT_SW128_MN, SCHED_LAYOUT_WGACC };

/* The state of emitting one lowered schedule as C or CUDA C. */
typedef struct cgen {
  const stof_sched *s;
  const sched_lir *l;
  stof_buf *b;
  stof_status st;
  int cuda;                       /* 1: CUDA kernels (codegen_cuda.c), 0: C (codegen_c.c) */
  int64_t dim[STOF_THREAD_COUNT]; /* CUDA: the current kernel's launch extent per tag */
  const unsigned char *place;     /* CUDA: per lowered buffer, where it lives (codegen_cuda.c) */
  int diverge;                    /* CUDA: depth of guards around the statement being emitted */
  const int *stages;              /* CUDA: per lowered buffer, copies kept (pipelining; 1: one) */
  const size_t *size;             /* CUDA: per lowered buffer, elements in one copy */
  const struct sched_bounds *bd;  /* CUDA: the schedule's bounds (asynchronous copies) */
  int in_pipeline;                /* CUDA: emitting the copies of a pipelined loop */
  int cur_loop;                   /* the innermost loop around the statement emitted (-1) */
  const unsigned char *layout;    /* CUDA: per lowered buffer, SCHED_LAYOUT_* (NULL: rows) */
  int wgmma;                      /* CUDA: the kernels use wgmma (async-proxy fences) */
  /* CUDA, inside a loop whose accesses codegen_cuda.c vectorized (0 elsewhere and on the C
   * backend): load vload[k] reads element vloop of register stof_vl<k>; with vstore, the
   * store of the loop's block writes element vloop of register stof_vs. */
  int nvload;
  const stof_expr *vload[SCHED_VLOAD_MAX];
  int vloop;
  int vstore;
  const sched_access *acc;        /* the loads to clamp (NULL: none) */
  int idx64;                      /* emitting a load's index: integers are int64_t */
} cgen;

/* The storage type of a dtype in emitted code. */
const char *sched_cg_stype(int cuda, stof_dtype d);
/* The suffix of the helpers (stof_min_f32, ...) for a compute type: f32, f64, i32 or i64. */
const char *sched_cg_suffix(stof_dtype d);
/* The C identifier of a buffer. */
void sched_cg_buf_name(stof_buf *b, const stof_op *op);
/* Text safe inside a C comment. */
void sched_cg_comment(stof_buf *b, const char *s);
/* The statements of the IR list starting at first, indented by depth. */
void sched_cg_stmts(cgen *g, int first, int depth);
/* a as an expression of the compute type of dt; "elem = conv(" for a store of block (close
 * with ");"). */
void sched_cg_expr_as(cgen *g, const stof_expr *a, stof_dtype dt);
void sched_cg_store_open(cgen *g, int block);
/* Does block combine in a float32 accumulator here (lir_blk.acc; on CUDA not a cross-thread
 * reduction, which keeps its own)? */
int sched_cg_acc(const cgen *g, int block);
/* The number of dimensions of block's accumulator in this backend (0: a scalar) and its
 * elements (*numel): on CUDA, loops bound to thread indices are not dimensions of it. */
int sched_cg_acc_dims(const cgen *g, int block, int64_t *numel);
/* The C identifier of block's accumulator. */
void sched_cg_acc_name(stof_buf *b, int block);

/* ---------------------------------------------------------------- codegen_cuda_reduce.c */

/* The thread tag (threadIdx.x/y/z) a reduce loop of block is bound to: on CUDA the block
 * reduces across the threads of that tag (an all-reduce); -1 when it does not. */
int sched_cuda_xr_tag(const stof_sched *s, int block);
/* Does block reduce across threads with no data-parallel loop bound to a thread (so every
 * thread ends with the whole result: its buffer may be a private copy per thread)? */
int sched_cuda_xr_replicated(const stof_sched *s, int block);
/* The device helpers of the all-reduce, when s has a cross-thread reduction. */
void sched_cuda_xr_prelude(const stof_sched *s, stof_buf *b);
/* CUDA: emits an init or update store of a cross-thread reduction (into the thread's
 * accumulator) and returns 1; 0 for any other store. */
int sched_cuda_xr_store(cgen *g, int block, const lir_stmt *st, int depth);
/* CUDA: after statement stmt; when it is the update nest of a cross-thread reduction, emits
 * the all-reduce and the store of the result. Errors go to g->st. */
void sched_cuda_xr_after(cgen *g, int stmt, int depth);
/* Statement i alone. */
void sched_cg_stmt(cgen *g, int i, int depth);
/* CUDA: does block write a buffer in shared memory? */
int sched_cg_shared_writer(const cgen *g, int block);
/* CUDA: a barrier of the CUDA block (an error when a guard encloses it). */
void sched_cg_sync(cgen *g, int block, int depth, const char *why);
/* Pieces of the emitter for codegen_cuda.c: an index expression, a loop's variable, block's
 * buffer element at its store indices ("name[flat]"), a load's element ("name[flat]"). */
void sched_cg_iexpr(cgen *g, const sched_block *b, int e);
void sched_cg_loop_name(cgen *g, int loop);
void sched_cg_elem(cgen *g, int block);
void sched_cg_load_elem(cgen *g, const stof_expr *load);
/* codegen_cuda.c: emits statement stmt when CUDA needs it done differently (a tensorized
 * nest, a warp accumulator's init or write-back, an asynchronous copy, a pipelined loop);
 * returns 0 when the common emitter should. */
int sched_cuda_stmt(cgen *g, int stmt, int depth);

#endif
