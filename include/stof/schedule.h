/*
 * stof schedule: TVM-style schedules of a TE graph, their traces, lowering to a loop IR,
 * and code generation (C for the CPU; CUDA C compiled by NVRTC).
 *
 * A schedule covers the ops that a set of outputs needs. Every compute op among them is a
 * block (a stage); placeholders are inputs. A block's loops start as its compute axes then
 * its reduce axes (reduce axes innermost, in order); primitives (split, fuse, reorder,
 * tile, bind, vectorize, unroll, parallel, annotate, tensorize) transform them; others move, merge
 * and add blocks (compute_at, reverse_compute_at, compute_inline, reverse_compute_inline,
 * cache_read, cache_write, rfactor). Groups say which ops
 * become one kernel. Knobs are named tunable integers (candidates and a decision) that
 * primitives take wherever they take a factor; sample_categorical, sample_perfect_tile and
 * sample_compute_location make knobs with decisions drawn from the context's RNG.
 *
 * Invariants:
 *  - State is index-based: blocks, loops, knobs and groups are small integers valid for
 *    the schedule that returned them and for its clones; stof_sched_clone is a deep copy.
 *  - Every primitive validates its arguments first: on error the schedule is unchanged,
 *    the status is STOF_ERR_SCHEDULE (or _ARG for ids that were never handed out, _NOMEM)
 *    and the context's message names the primitive, the loop or block and the cause
 *    ("split: factor 0 for loop i").
 *  - Every successful primitive appends one instruction to the schedule's trace (tile
 *    appends Split, Split, Reorder). Replaying the trace into a fresh schedule of the same
 *    graph rebuilds the same loop nests; a changed knob decision gives the new nests.
 *  - Loop and block ids are handed out by get_block, get_loops, split, fuse, tile,
 *    cache_read, cache_write and rfactor; a primitive given an id that none of them
 *    returned fails with STOF_ERR_ARG.
 *  - The schedule borrows its graph: the graph must outlive it. Primitives that rewrite
 *    a block's expression (compute_inline, cache_read, ...) add ops to the graph (the
 *    outputs' ops never change, so the graph's meaning does not).
 */
#ifndef STOF_SCHEDULE_H
#define STOF_SCHEDULE_H

#include <stof/core.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The factor of a split that is inferred (ceil division: a non-divisible split gets a
 * guard). */
#define STOF_INFER (-1)
/* Loops per block, at any time. */
#define STOF_SCHED_MAX_LOOPS 64

typedef struct stof_sched stof_sched;
typedef struct stof_trace stof_trace;
typedef struct stof_func stof_func;

/* How a loop iterates. */
#define STOF_ITER_LIST(X) X(DATA_PAR, "data-parallel") X(REDUCE, "reduce")
typedef enum stof_iter_kind {
#define STOF_X(name, text) STOF_ITER_##name,
  STOF_ITER_LIST(STOF_X)
#undef STOF_X
  STOF_ITER_COUNT
} stof_iter_kind;

/* How a loop came to be. */
#define STOF_DERIVE_LIST(X) X(ROOT, "root") X(SPLIT, "split") X(FUSE, "fuse")
typedef enum stof_derive_kind {
#define STOF_X(name, text) STOF_DERIVE_##name,
  STOF_DERIVE_LIST(STOF_X)
#undef STOF_X
  STOF_DERIVE_COUNT
} stof_derive_kind;

/* A loop's annotation (at most one; pragmas from annotate are separate). */
#define STOF_ANN_LIST(X)                                                                  \
  X(NONE, "none") X(THREAD, "thread") X(VECTORIZE, "vectorized") X(UNROLL, "unrolled")    \
  X(PARALLEL, "parallel") X(TENSORIZE, "tensorized")
typedef enum stof_ann_kind {
#define STOF_X(name, text) STOF_ANN_##name,
  STOF_ANN_LIST(STOF_X)
#undef STOF_X
  STOF_ANN_COUNT
} stof_ann_kind;

/* Thread tags of bind. */
#define STOF_THREAD_LIST(X)                                                               \
  X(BLOCK_X, "blockIdx.x") X(BLOCK_Y, "blockIdx.y") X(BLOCK_Z, "blockIdx.z")              \
  X(THREAD_X, "threadIdx.x") X(THREAD_Y, "threadIdx.y") X(THREAD_Z, "threadIdx.z")
typedef enum stof_thread_tag {
#define STOF_X(name, text) STOF_THREAD_##name,
  STOF_THREAD_LIST(STOF_X)
#undef STOF_X
  STOF_THREAD_COUNT
} stof_thread_tag;

/* Trace instruction kinds: the name (as TVM's) and the Lua method that replays it. */
#define STOF_INST_LIST(X)                                                                 \
  X(GET_BLOCK, "GetBlock", "get_block")                                                   \
  X(GET_LOOPS, "GetLoops", "get_loops")                                                   \
  X(SPLIT, "Split", "split")                                                              \
  X(FUSE, "Fuse", "fuse")                                                                 \
  X(REORDER, "Reorder", "reorder")                                                        \
  X(BIND, "Bind", "bind")                                                                 \
  X(VECTORIZE, "Vectorize", "vectorize")                                                  \
  X(UNROLL, "Unroll", "unroll")                                                           \
  X(PARALLEL, "Parallel", "parallel")                                                     \
  X(ANNOTATE, "Annotate", "annotate")                                                     \
  X(COMPUTE_AT, "ComputeAt", "compute_at")                                                \
  X(REVERSE_COMPUTE_AT, "ReverseComputeAt", "reverse_compute_at")                         \
  X(COMPUTE_INLINE, "ComputeInline", "compute_inline")                                    \
  X(REVERSE_COMPUTE_INLINE, "ReverseComputeInline", "reverse_compute_inline")             \
  X(CACHE_READ, "CacheRead", "cache_read")                                                \
  X(CACHE_WRITE, "CacheWrite", "cache_write")                                             \
  X(RFACTOR, "RFactor", "rfactor")                                                        \
  X(KNOB, "Knob", "knob")                                                                 \
  X(SAMPLE_CATEGORICAL, "SampleCategorical", "sample_categorical")                        \
  X(GROUP, "Group", "group")                                                              \
  X(UNGROUP, "Ungroup", "ungroup")                                                        \
  X(TENSORIZE, "Tensorize", "tensorize")                                                  \
  X(SAMPLE_PERFECT_TILE, "SamplePerfectTile", "sample_perfect_tile")                      \
  X(SAMPLE_COMPUTE_LOCATION, "SampleComputeLocation", "sample_compute_location")
typedef enum stof_inst_kind {
#define STOF_X(name, text, method) STOF_INST_##name,
  STOF_INST_LIST(STOF_X)
#undef STOF_X
  STOF_INST_COUNT
} stof_inst_kind;

const char *stof_iter_kind_name(stof_iter_kind k);
const char *stof_derive_kind_name(stof_derive_kind k);
const char *stof_ann_kind_name(stof_ann_kind k);
const char *stof_thread_tag_name(stof_thread_tag t);
/** "GetBlock", "Split", ... Borrowed, static. */
const char *stof_inst_kind_name(stof_inst_kind k);

/* A factor: a constant (STOF_INFER allowed where the primitive says so) or, when knob >= 0,
 * the current value of that knob. */
typedef struct stof_factor {
  int64_t value;
  int knob;
} stof_factor;

static inline stof_factor stof_factor_const(int64_t v) {
  stof_factor f = {v, -1};
  return f;
}
static inline stof_factor stof_factor_knob(int knob) {
  stof_factor f = {0, knob};
  return f;
}

/* What a loop is. name is borrowed from the schedule: valid until its next change. */
typedef struct stof_loop_info {
  const char *name;
  int block;
  int64_t extent;
  stof_iter_kind iter;
  stof_derive_kind derive;
  int source;          /* SPLIT: the loop split; FUSE: the outermost loop fused; ROOT: -1 */
  int part, nparts;    /* SPLIT: position among the parts; FUSE: nparts loops were fused */
  stof_ann_kind ann;
  stof_thread_tag thread; /* when ann is THREAD */
  int alive;           /* still in its block's nest (not replaced by a split or a fuse) */
} stof_loop_info;

/* ---------------------------------------------------------------- state */

/**
 * A schedule of what outputs[0..nout) need, in graph g. Each compute op they reach is a
 * block (topological order); placeholders are inputs; an extern op reached is
 * STOF_ERR_UNSUPPORTED (not in this slice); an output that is not a compute op is
 * STOF_ERR_ARG. Owned: stof_sched_free. The graph is borrowed and must outlive it.
 */
stof_status stof_sched_new(stof_graph *g, int nout, const stof_op *const *outputs,
                           stof_sched **out);
void stof_sched_free(stof_sched *s);
/** A deep copy (trace included). Owned. */
stof_status stof_sched_clone(const stof_sched *s, stof_sched **out);
/** A fresh schedule of the same graph and outputs, with no transformation. Owned. */
stof_status stof_sched_fresh(const stof_sched *s, stof_sched **out);
stof_ctx *stof_sched_ctx(const stof_sched *s);
/** Borrowed. */
stof_graph *stof_sched_graph(const stof_sched *s);
int stof_sched_nout(const stof_sched *s);
/** Output i. Borrowed from the graph. */
const stof_op *stof_sched_output(const stof_sched *s, int i);
int stof_sched_nblock(const stof_sched *s);
/** The op block b was made for: a compute of the graph, or the op a primitive made for a
 *  new block (cache_read, cache_write, rfactor); NULL when b is out of range. Borrowed
 *  from the graph. */
const stof_op *stof_sched_block_op(const stof_sched *s, int b);
/** Block b's name ("C", "A.shared", "C.rf"); NULL when b is out of range. Borrowed:
 *  valid until the schedule's next change. */
const char *stof_sched_block_name(const stof_sched *s, int b);
/** Is block b still in the schedule (not inlined)? */
int stof_sched_block_alive(const stof_sched *s, int b);

/**
 * get_block: the block of the compute op named name. STOF_ERR_SCHEDULE when no block or
 * several blocks have that name, or when it names a placeholder.
 */
stof_status stof_sched_get_block(stof_sched *s, const char *name, int *block);
/**
 * get_loops: the loops of block, outermost first, into loops[0..cap); *nloop gets their
 * number (STOF_ERR_ARG when cap is too small; nothing is recorded then).
 */
stof_status stof_sched_get_loops(stof_sched *s, int block, int cap, int *loops, int *nloop);
/** Describes loop. STOF_ERR_ARG for an id out of range. */
stof_status stof_sched_loop_info(const stof_sched *s, int loop, stof_loop_info *out);
/**
 * The largest serial root nest of s as code generation sees it (groups folded into their
 * anchors first): a root block such that no loop of it, nor of any block computed under it,
 * is bound to a GPU block or thread index (on CUDA its kernel runs on one thread). *iters gets
 * its work: the iterations of every block's body in the nest (each block's loops times the
 * loops around where it is computed; saturating at INT64_MAX), 0 when every nest is bound;
 * its block's name goes to name[0..cap) ("" when none). What the search's pruning rule reads:
 * a template that leaves a large nest serial on the GPU makes a kernel thousands of times
 * slower than a parallel one. STOF_ERR_NOMEM only.
 */
stof_status stof_sched_serial_nest(const stof_sched *s, int64_t *iters, char *name, size_t cap);

/* ---------------------------------------------------------------- loop transforms */

/**
 * split: loop into nfactor >= 2 nested loops of extents factors (outermost first); at most
 * one factor may be STOF_INFER (it is ceil(extent / product of the others)); the others
 * are >= 1 (a knob's value included). When the product exceeds the extent, the lowering
 * guards the body; a part (not bound to a thread, not vectorized) runs at most the
 * iterations that reach the extent, ceil(extent / product of the parts inside it), so a
 * factor far above the extent (2^40 on a loop of 3) runs 3 iterations, guard-free; the
 * part's extent (stof_sched_loop_info) and the trace keep the factor as given.
 * parts[0..nfactor) get the new loops. The loop must not be annotated.
 *
 *   for i in 0..37:            split(i, {INFER, 8})      for i.outer in 0..5:
 *     B[i] = A[i]                                          for i.inner in 0..8:
 *                                                            let i = i.outer * 8 + i.inner
 *                                                            if i < 37:
 *                                                              B[i] = A[i]
 */
stof_status stof_sched_split(stof_sched *s, int loop, int nfactor, const stof_factor *factors,
                             int *parts);
/**
 * fuse: nloop >= 2 loops of one block, adjacent and given outermost first, all data-parallel
 * or all reduce, none annotated, into one loop of the product extent (named
 * "i_j_fused"); *fused gets it.
 *
 *   for i in 0..4:             fuse(i, j)                for i_j_fused in 0..32:
 *     for j in 0..8:                                       let i = i_j_fused / 8
 *       B[i, j] = ...                                      let j = i_j_fused % 8
 *                                                          B[i, j] = ...
 */
stof_status stof_sched_fuse(stof_sched *s, int nloop, const int *loops, int *fused);
/**
 * reorder: loops of one block (no repeats) take the positions that they occupy, in the
 * order given; other loops stay. Reduce loops may move anywhere: the lowering initializes
 * the accumulator just before the outermost reduce loop.
 *
 *   for i, for j, for k        reorder(k, i)             for k, for j, for i
 */
stof_status stof_sched_reorder(stof_sched *s, int nloop, const int *loops);
/**
 * tile: split(x, {INFER, fx}), split(y, {INFER, fy}), reorder(xo, yo, xi, yi). out gets
 * xo, yo, xi, yi. x and y are distinct loops of one block.
 *
 *   for i in 0..64:            tile(i, j, 8, 16)         for i.outer in 0..8:
 *     for j in 0..64:                                      for j.outer in 0..4:
 *                                                            for i.inner in 0..8:
 *                                                              for j.inner in 0..16:
 */
stof_status stof_sched_tile(stof_sched *s, int x, int y, stof_factor fx, stof_factor fy,
                            int out[4]);

/* ---------------------------------------------------------------- block placement
 *
 * These primitives move, merge and add blocks. They are transactional as the others: on
 * error (STOF_ERR_SCHEDULE with a message naming the blocks and loops) the schedule is
 * unchanged. Intermediate buffers are compacted when lowering: a buffer written and read
 * only under some loop holds one iteration's region of it (bound inference: interval
 * arithmetic over the index expressions, affine with constant coefficients; anything else
 * falls back to the whole dimension). */

/**
 * compute_at: block (a producer, not an output) is computed under loop (of a consumer),
 * for the region its consumers need per iteration of that loop. Every consumer must lie
 * under the loop. The block gets new loops over that region, named ax0, ax1, ... (or the
 * axis name when the region is the whole axis; unit loops vanish), with guards at the
 * tensor's edges; get them again with get_loops.
 *
 *   for i in 0..37:            compute_at(B, i.outer)    for i.outer in 0..5:
 *     B[i] = A[i] * 2.0        (C split by 8)              for ax0 in 0..8:
 *   for i.outer in 0..5:                                     let i = i.outer * 8 + ax0
 *     for i.inner in 0..8:                                   if i < 37:
 *       let i = ...                                            B[i] = A[i] * 2.0
 *       if i < 37:                                         for i.inner in 0..8:
 *         C[i] = B[i] + 1.0                                  ... C[i] = B[i] + 1.0
 */
stof_status stof_sched_compute_at(stof_sched *s, int block, int loop);
/**
 * reverse_compute_at: block (a consumer) is computed under loop (of its producer), after
 * the loop's body, over the region the producer has written in that iteration. Every
 * producer of the block must lie under the loop; the block must read the producer at its
 * own axes (D[i, j] reads C[i, j], C[j], ...) and the loop must not be a reduce loop of
 * the producer (nor lie inside one).
 */
stof_status stof_sched_reverse_compute_at(stof_sched *s, int block, int loop);
/**
 * compute_inline: block (injective: no reduction; not an output; no block computed at its
 * loops) disappears; its consumers evaluate its expression where they read it.
 *
 *   B[i] = A[i] * 2.0          compute_inline(B)         C[i] = (A[i] * 2.0) + 1.0
 *   C[i] = B[i] + 1.0
 */
stof_status stof_sched_compute_inline(stof_sched *s, int block);
/**
 * reverse_compute_inline: block (injective) reads exactly one block, its producer, at its
 * own index (E[i, j] reads D[i, j] and nothing else of D); the producer (injective, not an
 * output, read by nothing else) then stores the block's expression into the block's
 * buffer, and the block disappears.
 *
 *   D[i, j] = C[i, j] + b[j]   reverse_compute_inline(E) E[i, j] = max(C[i, j] + b[j], 0.0)
 *   E[i, j] = max(D[i, j], 0.0)                          (block D, writing E)
 */
stof_status stof_sched_reverse_compute_inline(stof_sched *s, int block);
/**
 * cache_read: a new block named "<tensor>.<scope>" copies the input_index-th buffer block
 * reads (0-based, in first-use order of its body) into a new buffer of scope ("global",
 * "shared", "local" or "warp"; on CUDA "shared" is one copy per CUDA block and "warp" is
 * registers of a warp (tensorize's accumulator); on the C backend all are memory, sized by bound inference when the
 * copy is computed at a loop, else the whole tensor); block reads the copy instead.
 * *cache gets the new block (it starts at the root, before block).
 *
 *   C[i, j] += A[i, k] * B[k, j]   cache_read(C, 0, "shared")   A.shared[v0, v1] = A[v0, v1]
 *                                                               C[i, j] += A.shared[i, k] * ...
 */
stof_status stof_sched_cache_read(stof_sched *s, int block, int input_index, const char *scope,
                                  int *cache);
/**
 * cache_write: block writes a new buffer "<name>.<scope>" instead of its own, and a new
 * block of that name copies it back (TensorIR's semantics: block keeps its loops and
 * handle; *cache gets the copy, which starts at the root, right after block; put it under
 * one of block's loops with reverse_compute_at).
 *
 *   C[i, j] += A[i, k] * B[k, j]   cache_write(C, "local")   C.local[i, j] += A[i, k] * ...
 *                                                            C[v0, v1] = C.local[v0, v1]
 */
stof_status stof_sched_cache_write(stof_sched *s, int block, const char *scope, int *cache);
/**
 * rfactor: loop, a reduce loop of a reduction block B, becomes data-parallel: a new block
 * "B.rf" takes over B's loops (loop included) and reduces into a buffer with one more
 * dimension (loop's extent, inserted at factor_axis in 0..rank), and B, with new loops,
 * reduces that buffer over the new dimension (TVM's rfactor). *rf gets the new block.
 *
 *   for i in 0..4:             split k by 8, rfactor(k.inner, 1)
 *     S[i] = 0.0               for i: for k.inner in 0..8: S.rf[i, k.inner] = 0.0
 *     for k in 0..64:            for k.outer in 0..8: for k.inner in 0..8:
 *       S[i] += X[i, k]            S.rf[i, k.inner] += X[i, k.outer * 8 + k.inner]
 *                              for i: S[i] = 0.0; for k.inner: S[i] += S.rf[i, k.inner]
 */
stof_status stof_sched_rfactor(stof_sched *s, int loop, int factor_axis, int *rf);

/* ---------------------------------------------------------------- annotations */

/**
 * bind: loop to a thread tag ("blockIdx.x" ... "threadIdx.z"). A loop is bound once, a tag
 * once per block. A reduce loop may be bound to threadIdx.x/y/z (on CUDA a reduction across
 * the threads of a block, its result in every thread), not to blockIdx.x/y/z.
 * The C backend runs bound loops serially.
 */
stof_status stof_sched_bind(stof_sched *s, int loop, const char *tag);

/**
 * tensorize: the three innermost loops of a block, starting at loop, become one tensor-core
 * intrinsic, for a block C[.., i, j] = sum(float32(A[i, k]) * float32(B[k, j])) (A and B both
 * f16 or both bf16, C f32) whose three loops are the innermost stride-1 parts of i, j and k.
 * On CUDA the block must write a buffer of scope "warp" (cache_write(C, "warp")) and read A
 * and B from shared memory; no loop of the block is bound to threadIdx.x, which is the lane.
 *  - "mma_m16n8k16": mma.sync m16n8k16 (sm_80+), loop extents 16a, 8b, 16c (a, b <= 8,
 *    c <= 4); threadIdx.x is a warp's lane (32); each warp holds the whole 16a x 8b tile; the
 *    fragments of the next k-step are loaded (ldmatrix) before the current step's mma. B may
 *    also be read as B[j, k] (a weight stored [N, K]).
 *  - "wgmma_m64nNk16": Hopper warpgroup MMA (sm_90a), extents 64, N = 64 or 128, and 64;
 *    threadIdx.x is a warpgroup's lane (128); A's shared tile is 64 columns wide and B's has
 *    as many rows as k: both are stored in the 128-byte swizzled layout wgmma reads (no pad).
 * The C backend runs the loops as they are.
 */
stof_status stof_sched_tensorize(stof_sched *s, int loop, const char *intrin);
/** vectorize: a data-parallel loop, not otherwise annotated (C: #pragma GCC ivdep). */
stof_status stof_sched_vectorize(stof_sched *s, int loop);
/** unroll: any loop not otherwise annotated (C: #pragma GCC unroll). */
stof_status stof_sched_unroll(stof_sched *s, int loop);
/** parallel: a data-parallel loop, not otherwise annotated (C: serial, marked). */
stof_status stof_sched_parallel(stof_sched *s, int loop);
/** annotate: a key/value pragma on a loop or a block (a second value for a key replaces
 *  the first). Printed in the loop nest and as a comment in generated code. */
stof_status stof_sched_annotate_loop(stof_sched *s, int loop, const char *key, const char *value);
stof_status stof_sched_annotate_block(stof_sched *s, int block, const char *key,
                                      const char *value);

/* ---------------------------------------------------------------- knobs */

/**
 * knob: a named tunable integer with ncand >= 1 candidates and a decision (an index into
 * them). Names are unique in a schedule. *knob gets its id.
 */
stof_status stof_sched_knob(stof_sched *s, const char *name, int ncand, const int64_t *cand,
                            int decision, int *knob);
/**
 * sample_categorical: a knob whose decision is drawn with probabilities probs[0..ncand)
 * (>= 0, not all 0) from the context's RNG; decision >= 0 imposes it instead (replay).
 */
stof_status stof_sched_sample_categorical(stof_sched *s, const char *name, int ncand,
                                          const int64_t *cand, const double *probs,
                                          int decision, int *knob);
/**
 * sample_perfect_tile: samples a perfect tiling of loop's extent into n factors (1 <= n <=
 * STOF_SCHED_MAX_LOOPS; their product is the extent; the innermost is at most max_innermost,
 * 0 = no limit) from the context's RNG, as TVM's: the innermost uniformly among the divisors
 * allowed, then each prime factor of the rest to one of the n - 1 outer factors uniformly.
 * decision[0..n), when not NULL, imposes the factors instead (replay). knobs[0..n) get n
 * new knobs named names[0..n) or, when names is NULL, "<loop>.tile0" .. "<loop>.tile<n-1>"
 * ("<loop>_1.tile0" ... when those names are taken), each with the divisors of the extent (ascending) as candidates and its
 * factor as decision: split(loop, {k0, ..., k<n-1>}) tiles the loop exactly (no INFER, no
 * guard). The extent must be below 2^31. Records one SamplePerfectTile instruction.
 *
 *   for i in 0..32:    sample_perfect_tile(i, 3, 4) -> knobs 2, 4, 4 (say)
 *                      split(i, {k0, k1, k2})        for i.0 in 0..2: for i.1 in 0..4: for i.2 in 0..4:
 */
stof_status stof_sched_sample_perfect_tile(stof_sched *s, int loop, int n, int max_innermost,
                                           const int64_t *decision, const char *const *names,
                                           int *knobs);
/**
 * sample_compute_location: samples where block may be computed (TVM's): a knob named name
 * (NULL: "<block>.location", or "<block>_1.location" ... when that is taken) whose candidates are -1 (the root: leave the block where it is) and
 * the depths d (0 = outermost) of the loops, in the nest of block's first consumer (by
 * block id; the loops enclosing it, then its own), at which compute_at(block, loop) is legal
 * now; the decision is drawn uniformly, or imposed by decision >= 0 (an index into the
 * candidates: replay). Apply it with stof_sched_compute_at_knob. Records one
 * SampleComputeLocation instruction.
 */
stof_status stof_sched_sample_compute_location(stof_sched *s, int block, int decision,
                                               const char *name, int *knob);
/**
 * compute_at with a location knob: the knob's value -1 leaves block where it is, a depth d
 * computes it at the loop at depth d of its first consumer's nest (as counted by
 * sample_compute_location). Records ComputeAt with the knob as its loop, so that a replay
 * with another decision of the knob computes the block at that location.
 */
stof_status stof_sched_compute_at_knob(stof_sched *s, int block, int knob);
int stof_sched_nknob(const stof_sched *s);
/** Knob k: name (borrowed, valid until the next change), candidate count, decision and
 *  value. Any out-parameter may be NULL. */
stof_status stof_sched_knob_info(const stof_sched *s, int knob, const char **name, int *ncand,
                                 int *decision, int64_t *value);
/** Candidate i of knob k. */
stof_status stof_sched_knob_candidate(const stof_sched *s, int knob, int i, int64_t *value);
/** The knob named name (STOF_ERR_NOT_FOUND). */
stof_status stof_sched_find_knob(const stof_sched *s, const char *name, int *knob);

/* ---------------------------------------------------------------- groups */

/**
 * group: ops[0..nop) (compute ops of this schedule) become one kernel. Legal when they are
 * connected, no op outside the group lies on a path between two of them, no op is in
 * another group, at most one of them is a reduction or out-elementwise-fusable op, and
 * after an out-elementwise-fusable op come only elementwise and broadcast ops (TVM's
 * fusion rule). *group gets its id. The C backend still emits one loop nest per block.
 */
stof_status stof_sched_group(stof_sched *s, int nop, const stof_op *const *ops, int *group);
/** ungroup: removes group g (ids are not reused). */
stof_status stof_sched_ungroup(stof_sched *s, int group);
/** Group ids ever made (removed ones included). */
int stof_sched_ngroup(const stof_sched *s);
/** Group g: whether it is alive, and its ops into ops[0..cap) (*nop gets the count). */
stof_status stof_sched_group_ops(const stof_sched *s, int group, int cap, const stof_op **ops,
                                 int *nop, int *alive);

/* ---------------------------------------------------------------- default schedules */

/* Options of stof_sched_auto: the default decisions of its knobs (0: its own default). */
typedef struct stof_sched_auto_opts {
  int threads; /* threads per CUDA block: a power of two up to 32 or a multiple of 32, <= 1024 */
  int vec;     /* elements per vector access: 1, 2, 4, 8 or 16 (the largest legal one <= it) */
} stof_sched_auto_opts;

/**
 * auto: applies a default schedule to s, a fresh schedule (empty trace) of a segment (every
 * op that is not a placeholder belongs to it), for target "c" or "cuda" (opts may be NULL):
 *  - every injective block that is not an output is inlined (compute_inline), unless a
 *    reduction reads it without one of its own data-parallel axes (a GEMM over gelu(fc1):
 *    each value would be computed again for every output column), which keeps it a block;
 *  - a reduction read only by one output (or by reductions that go under it) at its leading
 *    axes (mean[i], mx[b, h, s]) is computed at that output's row loop (compute_at): per row,
 *    inside the output's kernel, never as a global intermediate;
 *  - "cuda": an output with such reductions is a row kernel: rows on blockIdx.x, the
 *    columns split (serial, threads on threadIdx.x, vec vectorized) and each reduction's
 *    reduce loops the same (a cross-thread all-reduce); any other injective block is an
 *    elementwise kernel (its last axis split by vec, the rest fused, on blockIdx.x and
 *    threadIdx.x); a reduction left at the root is a kernel of its own (output elements on
 *    blockIdx.x, its reduce loops over threadIdx.x). Knobs "threads" and "vec" ("<block>.threads",
 *    "<block>.vec" when there are several kernels) hold the factors; vec's candidates are the
 *    widths that keep accesses at most 16 bytes and divide every extent involved.
 * What cannot be scheduled so is left as it is (a kernel of its own, serial if need be):
 * slower, still correct. Records every primitive in the trace. STOF_ERR_ARG for a bad target
 * or option, STOF_ERR_SCHEDULE when s is not fresh. Transactional (on error s is unchanged).
 */
stof_status stof_sched_auto(stof_sched *s, const char *target, const stof_sched_auto_opts *opts);

/* ---------------------------------------------------------------- traces */

/** The schedule's trace (a copy). Owned: stof_trace_free. */
stof_status stof_sched_trace(const stof_sched *s, stof_trace **out);
void stof_trace_free(stof_trace *t);
int stof_trace_ninst(const stof_trace *t);
/** Kind of instruction i (STOF_INST_COUNT when out of range). */
stof_inst_kind stof_trace_inst_kind(const stof_trace *t, int i);
/**
 * The trace as a Lua script that rebuilds the schedule from the same graph:
 *   return function(s, stof) local b0 = s:get_block("C") ... end
 * Owned string: stof_ctx_dealloc(ctx, str, strlen(str) + 1).
 */
stof_status stof_trace_to_lua(const stof_trace *t, char **out);
/** The trace as JSON ({"format": "stof.trace", "version": 1, "insts": [...]}), for the
 *  tuning database. Owned string, as above. */
stof_status stof_trace_to_json(const stof_trace *t, char **out);
/** Parses a JSON trace (STOF_ERR_PARSE names what is wrong). Owned. */
stof_status stof_trace_from_json(stof_ctx *ctx, const char *json, stof_trace **out);
/** Sets the decision of the knob named knob of a Knob, SampleCategorical,
 *  SampleComputeLocation or SamplePerfectTile instruction (STOF_ERR_NOT_FOUND; STOF_ERR_ARG
 *  when decision is out of range). For a knob of SamplePerfectTile the decision indexes the
 *  divisors of the extent and sets that one factor: the product of the instruction's
 *  factors must be the extent again when the trace is replayed (change the other knobs of
 *  the instruction too), else the replay fails with STOF_ERR_SCHEDULE naming the knobs. */
stof_status stof_trace_set_decision(stof_trace *t, const char *knob, int decision);
/**
 * Re-applies trace t to s (normally fresh, of the same graph): the same primitives with the
 * trace's decisions. Transactional: when an instruction fails, s is unchanged and the
 * message says which instruction failed and why.
 */
stof_status stof_sched_replay(const stof_trace *t, stof_sched *s);

/* ---------------------------------------------------------------- lowering and build */

/**
 * The lowered loop nests as text (golden-test format, see docs/SCHEDULE.md): groups, the
 * intermediate buffers, then each block's nest in topological order:
 *   for i.outer in 0..16:
 *     for i.inner in 0..4:
 *       let i = i.outer * 4 + i.inner
 *       for j in 0..64:
 *         C[i, j] = 0.0
 *         for k in 0..64:
 *           C[i, j] = C[i, j] + (A[i, k] * B[k, j])
 * Owned string: stof_ctx_dealloc(ctx, str, strlen(str) + 1).
 */
stof_status stof_sched_print_loop_nest(const stof_sched *s, char **out);

/**
 * Compiles s for target "c" (generated C, built by the system compiler into a cached .so,
 * called through libffi) or "cuda" (generated CUDA C, one kernel per root block, compiled
 * by NVRTC for the current GPU through the cubin cache and loaded; without a GPU the
 * source is compiled for sm_80 and the result is STOF_ERR_NO_DEVICE; a schedule CUDA
 * cannot run is STOF_ERR_SCHEDULE). args[0..nargs) are
 * the function's parameters in order: every placeholder the schedule reads and every output
 * must be among them; other blocks listed are written to the caller's tensors, the rest
 * live in temporary buffers. A compiler failure is STOF_ERR_COMPILE with its output.
 * Owned: stof_func_free. The function keeps nothing of s or its graph.
 */
stof_status stof_build(const stof_sched *s, int nargs, const stof_op *const *args,
                       const char *target, stof_func **out);
/**
 * The source stof_build would compile for target ("c" or "cuda"), without compiling it.
 * Owned string: stof_ctx_dealloc(ctx, str, strlen(str) + 1).
 */
stof_status stof_build_source(const stof_sched *s, int nargs, const stof_op *const *args,
                              const char *target, char **source);
/* Compiling ahead (schedule/compile_ahead.c): a job is what stof_build(s, nargs, args,
 * target) will compile (its source, target and GPU architecture), made without compiling;
 * stof_compile_jobs compiles jobs on several threads into the on-disk caches (the C
 * backend's libraries; the cubins for the current GPU, nothing without one), and the
 * stof_build calls that follow find them there. */
typedef struct stof_compile_job stof_compile_job;
/** A job for stof_build(s, nargs, args, target): the same checks and code generation, no
 *  compiler. Owned: stof_compile_job_free (before s's context goes). */
stof_status stof_build_job(const stof_sched *s, int nargs, const stof_op *const *args,
                           const char *target, stof_compile_job **out);
void stof_compile_job_free(stof_compile_job *j);
/** Compiles one job into the cache (nothing when it is there), with ctx for the errors
 *  (any context: a thread's own). STOF_ERR_COMPILE carries the compiler's output. */
stof_status stof_compile_job_run(stof_ctx *ctx, const stof_compile_job *j);
/** Compiles jobs[0..n) on up to nthread threads, this one included, each with a context of
 *  its own; *nfail (may be NULL) gets how many failed (a failed job's build fails again and
 *  says why). STOF_ERR_NOMEM when no thread could make its context. */
stof_status stof_compile_jobs(stof_ctx *ctx, int n, stof_compile_job *const *jobs, int nthread, int *nfail);

/**
 * Compiles the CUDA source of s with NVRTC for arch ("sm_80", "sm_90", ...), without the
 * cache and without a GPU: STOF_OK (*cubin_size, may be NULL, gets the cubin's size),
 * STOF_ERR_SCHEDULE when CUDA cannot run the schedule, or STOF_ERR_COMPILE with the log.
 */
stof_status stof_sched_cuda_check(const stof_sched *s, int nargs, const stof_op *const *args,
                                  const char *arch, size_t *cubin_size);
/**
 * Runs f on tensors[0..ntensor) (CPU tensors for target "c", CUDA ones for "cuda"; contiguous, of each argument's dtype and shape:
 * STOF_ERR_ARG / _TYPE / _SHAPE name the argument otherwise).
 */
stof_status stof_func_call(stof_func *f, int ntensor, stof_tensor *const *tensors);
/**
 * Times f, a "cuda" build, on tensors[0..ntensor) (CUDA tensors, checked as stof_func_call
 * checks them): warmup untimed launches of its kernels and a wait, then reps launches back
 * to back on the default stream between two CUDA events (no host synchronisation between
 * them); *ms gets the mean milliseconds of one launch of all its kernels. The intermediates
 * are allocated once, outside the timed region; the outputs hold a call's result after.
 * STOF_ERR_ARG when reps < 1 or warmup < 0, or when f was built for target "c" (it cannot
 * be timed: without a GPU no "cuda" build exists, stof_build reports STOF_ERR_NO_DEVICE);
 * STOF_ERR_CUDA when a launch fails.
 */
stof_status stof_func_time(stof_func *f, int ntensor, stof_tensor *const *tensors, int reps,
                           int warmup, double *ms);
/**
 * Runs f on raw addresses (the runtime's hot path: no checks, no allocation, no
 * synchronisation): addrs[0..nargs) the arguments' storage (contiguous, of their dtypes and
 * shapes: host addresses for "c", device addresses for "cuda"), then for "cuda" the
 * stof_func_ntemp intermediates (device buffers of stof_func_temp_bytes each). "cuda"
 * launches on the context's current stream.
 */
stof_status stof_func_launch(stof_func *f, const uint64_t *addrs);
int stof_func_ntemp(const stof_func *f);
size_t stof_func_temp_bytes(const stof_func *f, int i);
int stof_func_nargs(const stof_func *f);
/** The generated source. Borrowed from f. */
const char *stof_func_source(const stof_func *f);
/** The compiled library's path in the cache. Borrowed from f. */
const char *stof_func_library(const stof_func *f);
void stof_func_free(stof_func *f);

#ifdef __cplusplus
}
#endif
#endif
