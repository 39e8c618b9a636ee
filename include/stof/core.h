/*
 * stof core: context, status codes, arenas, dtypes, tensors, the tensor-expression (TE)
 * IR, the op graph, the reference interpreter and the CUDA runtime (driver opened with
 * dlopen, NVRTC linked).
 *
 * Invariants:
 *  - Every allocation goes through the context's allocator hook (Lua-style realloc).
 *  - Fallible functions return a stof_status and write results through out-parameters;
 *    the message of the last error is read with stof_ctx_message().
 *  - Expressions, vars and ops are immutable once built and owned by their graph's
 *    arena: they live exactly as long as the graph.
 */
#ifndef STOF_CORE_H
#define STOF_CORE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** The library's version (`stof --version`, the tuning database's records). */
#ifndef STOF_VERSION
#define STOF_VERSION "0.1.0"
#endif

/* ---------------------------------------------------------------- status codes */

#define STOF_STATUS_LIST(X)                                  \
  X(OK, "ok")                                                \
  X(ERR_NOMEM, "out of memory")                              \
  X(ERR_ARG, "bad argument")                                 \
  X(ERR_SHAPE, "shape mismatch")                             \
  X(ERR_TYPE, "type error")                                  \
  X(ERR_RANGE, "index out of range")                         \
  X(ERR_SCHEDULE, "illegal schedule")                        \
  X(ERR_NOT_FOUND, "not found")                              \
  X(ERR_PARSE, "parse error")                                \
  X(ERR_IO, "input/output error")                            \
  X(ERR_CUDA, "CUDA error")                                  \
  X(ERR_NO_DEVICE, "no GPU")                                 \
  X(ERR_COMPILE, "compilation failed")                       \
  X(ERR_UNSUPPORTED, "unsupported")                          \
  X(ERR_INTERNAL, "internal error")                          \
  X(ERR_CHECK, "wrong result")

typedef enum stof_status {
#define STOF_X(name, text) STOF_##name,
  STOF_STATUS_LIST(STOF_X)
#undef STOF_X
  STOF_STATUS_COUNT
} stof_status;

/** The enumerator's name without prefix ("ERR_ARG"). Borrowed, static. */
const char *stof_status_name(stof_status s);
/** A short description ("bad argument"). Borrowed, static. */
const char *stof_status_text(stof_status s);

/* ---------------------------------------------------------------- context */

/*
 * Allocator hook, as Lua's lua_Alloc: nsize == 0 frees ptr (returns NULL); otherwise
 * (re)allocates ptr from osize to nsize bytes, returning NULL on failure (ptr untouched).
 */
typedef void *(*stof_alloc_fn)(void *ud, void *ptr, size_t osize, size_t nsize);

typedef struct stof_ctx stof_ctx;

/** A new context. alloc NULL selects malloc/realloc/free. Owned: stof_ctx_free. NULL if
 *  even the context cannot be allocated. */
stof_ctx *stof_ctx_new(stof_alloc_fn alloc, void *ud);
void stof_ctx_free(stof_ctx *ctx);

/** Records an error (printf-style message) and returns status. A pending out-of-memory
 *  stays: it is sticky until stof_ctx_clear_error. */
stof_status stof_ctx_error(stof_ctx *ctx, stof_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
stof_status stof_ctx_verror(stof_ctx *ctx, stof_status status, const char *fmt, va_list ap);
/** The last error's status (STOF_OK when none). */
stof_status stof_ctx_status(const stof_ctx *ctx);
/** The last error's message. Borrowed: valid until the next error or clear. */
const char *stof_ctx_message(const stof_ctx *ctx);
void stof_ctx_clear_error(stof_ctx *ctx);

/** Memory through the hook. alloc returns zeroed memory or NULL (and records NOMEM). */
void *stof_ctx_alloc(stof_ctx *ctx, size_t size);
void *stof_ctx_realloc(stof_ctx *ctx, void *ptr, size_t osize, size_t nsize);
void stof_ctx_dealloc(stof_ctx *ctx, void *ptr, size_t size);
/** Owned copy of s (stof_ctx_dealloc with strlen + 1). */
char *stof_ctx_strdup(stof_ctx *ctx, const char *s);
/** Bytes currently allocated through this context (for leak checks). */
size_t stof_ctx_bytes_in_use(const stof_ctx *ctx);

/** The context's RNG (splitmix64-seeded xoshiro256**). */
void stof_ctx_seed(stof_ctx *ctx, uint64_t seed);
uint64_t stof_ctx_rand_u64(stof_ctx *ctx);
/** Uniform in [0, 1). */
double stof_ctx_rand_unit(stof_ctx *ctx);

/* ---------------------------------------------------------------- arena */

/* Bump allocator with coarse lifetime; memory from the context's hook. */
typedef struct stof_arena_block stof_arena_block;
typedef struct stof_arena {
  stof_ctx *ctx;
  stof_arena_block *head;
  size_t used, cap; /* in the head block */
  size_t total;     /* bytes held in all blocks */
} stof_arena;

void stof_arena_init(stof_arena *a, stof_ctx *ctx);
/** Zeroed, 16-byte aligned; NULL on NOMEM (recorded). Borrowed: lives until release. */
void *stof_arena_alloc(stof_arena *a, size_t size);
char *stof_arena_strdup(stof_arena *a, const char *s);
void stof_arena_release(stof_arena *a);

/* ---------------------------------------------------------------- dtypes */

#define STOF_DTYPE_LIST(X)          \
  X(F32, "float32", 4, 1)           \
  X(F16, "float16", 2, 1)           \
  X(BF16, "bfloat16", 2, 1)         \
  X(F64, "float64", 8, 1)           \
  X(I32, "int32", 4, 0)             \
  X(I64, "int64", 8, 0)             \
  X(BOOL, "bool", 1, 0)

typedef enum stof_dtype {
#define STOF_X(name, text, size, isfloat) STOF_DTYPE_##name,
  STOF_DTYPE_LIST(STOF_X)
#undef STOF_X
  STOF_DTYPE_COUNT
} stof_dtype;

const char *stof_dtype_name(stof_dtype d);
size_t stof_dtype_size(stof_dtype d);
int stof_dtype_is_float(stof_dtype d);
/** Parses "float32"/"f32", "float16"/"f16"/"half", "bfloat16"/"bf16", "float64"/"f64",
 *  "int32"/"i32", "int64"/"i64", "bool"/"uint8"/"u8". STOF_ERR_TYPE names an unknown one. */
stof_status stof_dtype_parse(stof_ctx *ctx, const char *name, stof_dtype *out);

/** IEEE binary16 and bfloat16 conversions, round to nearest even, NaN and Inf kept. */
uint16_t stof_f32_to_f16(float f);
float stof_f16_to_f32(uint16_t h);
uint16_t stof_f32_to_bf16(float f);
float stof_bf16_to_f32(uint16_t b);
/** Rounds v to the nearest value representable in dtype d (as C casts do for ints). */
double stof_dtype_round(stof_dtype d, double v);

/* ---------------------------------------------------------------- tensors */

#define STOF_MAX_DIMS 8

typedef enum stof_device { STOF_DEVICE_CPU, STOF_DEVICE_CUDA } stof_device;

/* A strided view on storage. Storage is owned (freed with the tensor) or borrowed. */
typedef struct stof_tensor {
  stof_ctx *ctx;
  stof_dtype dtype;
  stof_device device;
  int ndim;
  int64_t shape[STOF_MAX_DIMS];
  int64_t strides[STOF_MAX_DIMS]; /* in elements */
  void *data;                     /* host pointer, or a CUdeviceptr for CUDA */
  size_t nbytes;                  /* bytes of storage (owned storage only) */
  int owned;
} stof_tensor;

/** Checks a shape: 0 <= ndim <= STOF_MAX_DIMS, every extent >= 0. "what" names the
 *  object in the message. */
stof_status stof_shape_check(stof_ctx *ctx, const char *what, int ndim, const int64_t *shape);
int64_t stof_shape_numel(int ndim, const int64_t *shape);

/** A contiguous tensor: zero-filled on the CPU, uninitialised on the GPU. Owned:
 *  stof_tensor_free. */
stof_status stof_tensor_new(stof_ctx *ctx, stof_dtype dtype, int ndim, const int64_t *shape,
                            stof_device device, stof_tensor **out);
/** A tensor over caller storage (strides NULL = contiguous). Owned handle, borrowed data. */
stof_status stof_tensor_wrap(stof_ctx *ctx, stof_dtype dtype, int ndim, const int64_t *shape,
                             const int64_t *strides, void *data, stof_device device,
                             stof_tensor **out);
/** Uniform random values: floats in [-1, 1), ints in [0, 100), bools 0/1, reproducible
 *  from seed. Owned. */
stof_status stof_tensor_rand(stof_ctx *ctx, stof_dtype dtype, int ndim, const int64_t *shape,
                             uint64_t seed, stof_tensor **out);
/** stof_tensor_rand made on `device`: the same values for the same seed, dtype and shape (on
 *  the GPU generated there, in milliseconds for gigabytes; float dtypes only there). Owned. */
stof_status stof_tensor_rand_on(stof_ctx *ctx, stof_dtype dtype, int ndim, const int64_t *shape,
                                uint64_t seed, stof_device device, stof_tensor **out);
/** Uniform random values in [lo, hi) before rounding to dtype (a float dtype; lo < hi, both
 *  finite in dtype): lo + (hi - lo)(u + 1)/2 with u stof_tensor_rand's draw for that seed, on the CPU in
 *  one pass (model weights: no interpreter, no cast). Owned. */
stof_status stof_tensor_uniform(stof_ctx *ctx, stof_dtype dtype, int ndim, const int64_t *shape, uint64_t seed,
                                double lo, double hi, stof_tensor **out);
/** Elements [first, first + count) (row-major order) of stof_tensor_rand's tensor of that
 *  dtype and seed, whatever its shape, as a 1-D CPU tensor: a slice of a large random input
 *  without making all of it (a CPU reference for sampled rows). Owned. */
stof_status stof_tensor_rand_range(stof_ctx *ctx, stof_dtype dtype, uint64_t seed, int64_t first,
                                   int64_t count, stof_tensor **out);
/** The NaN elements of a contiguous float tensor (f16, bf16, f32, f64), counted where it
 *  lives (a GPU tensor on the device: only the count crosses). */
stof_status stof_tensor_count_nan(const stof_tensor *t, int64_t *count);
void stof_tensor_free(stof_tensor *t);

int64_t stof_tensor_numel(const stof_tensor *t);
int stof_tensor_is_contiguous(const stof_tensor *t);
/** Element at a multi-index, bounds-checked (STOF_ERR_RANGE names the dim). CPU only. */
stof_status stof_tensor_get(const stof_tensor *t, const int64_t *idx, double *out);
stof_status stof_tensor_set(stof_tensor *t, const int64_t *idx, double v);
/** Unchecked element access at a flat element offset (sum of idx*stride). CPU only. */
double stof_tensor_load(const stof_tensor *t, int64_t offset);
void stof_tensor_store(stof_tensor *t, int64_t offset, double v);
/** Fills a CPU tensor with v (poisoning outputs before a run, for example). */
void stof_tensor_fill(stof_tensor *t, double v);
/** A contiguous copy on device (converting nothing but location). Owned. */
stof_status stof_tensor_to(const stof_tensor *t, stof_device device, stof_tensor **out);
/** A contiguous copy in another dtype (CPU). Owned. */
stof_status stof_tensor_cast(const stof_tensor *t, stof_dtype dtype, stof_tensor **out);
/** |a - b| <= atol + rtol * |b| everywhere, NaN never close. Shapes must match. */
stof_status stof_tensor_allclose(const stof_tensor *a, const stof_tensor *b, double rtol,
                                 double atol, int *out);
/** ||a - b||_2 / ||b||_2 (0 when both are zero; +inf when a has NaN). */
stof_status stof_tensor_rel_l2(const stof_tensor *a, const stof_tensor *b, double *out);

/* ---------------------------------------------------------------- TE IR */

/*
 * Expression kinds: constants, vars, binary, unary, then the rest. Binary kinds lie in
 * [STOF_EXPR_ADD, STOF_EXPR_OR], unary ones in [STOF_EXPR_NEG, STOF_EXPR_FLOOR].
 */
#define STOF_EXPR_KIND_LIST(X)                                                           \
  X(INT, "int") X(FLOAT, "float") X(VAR, "var")                                          \
  X(ADD, "+") X(SUB, "-") X(MUL, "*") X(DIV, "/") X(FLOORDIV, "//") X(MOD, "%")          \
  X(MIN, "min") X(MAX, "max") X(POW, "pow")                                              \
  X(LT, "<") X(LE, "<=") X(GT, ">") X(GE, ">=") X(EQ, "==") X(NE, "!=")                  \
  X(AND, "&&") X(OR, "||")                                                               \
  X(NEG, "neg") X(NOT, "not") X(EXP, "exp") X(LOG, "log") X(SQRT, "sqrt")                \
  X(RSQRT, "rsqrt") X(TANH, "tanh") X(ERF, "erf") X(SIGMOID, "sigmoid") X(ABS, "abs")    \
  X(SIN, "sin") X(COS, "cos") X(FLOOR, "floor")                                          \
  X(CAST, "cast") X(SELECT, "select") X(LOAD, "load") X(REDUCE, "reduce")

typedef enum stof_expr_kind {
#define STOF_X(name, text) STOF_EXPR_##name,
  STOF_EXPR_KIND_LIST(STOF_X)
#undef STOF_X
  STOF_EXPR_KIND_COUNT
} stof_expr_kind;

const char *stof_expr_kind_name(stof_expr_kind k);
int stof_expr_kind_is_binary(stof_expr_kind k);
int stof_expr_kind_is_unary(stof_expr_kind k);

#define STOF_REDUCE_LIST(X) X(SUM, "sum") X(MAX, "max") X(MIN, "min")
typedef enum stof_reduce_kind {
#define STOF_X(name, text) STOF_REDUCE_##name,
  STOF_REDUCE_LIST(STOF_X)
#undef STOF_X
  STOF_REDUCE_COUNT
} stof_reduce_kind;
const char *stof_reduce_kind_name(stof_reduce_kind k);

/* Pattern kinds, ordered as TVM's: a fused group takes the max of its members. */
#define STOF_PATTERN_LIST(X)                                                             \
  X(INPUT, "input") X(ELEMWISE, "elementwise") X(BROADCAST, "broadcast")                 \
  X(INJECTIVE, "injective") X(REDUCTION, "reduction")                                    \
  X(OUT_FUSABLE, "out-elementwise-fusable") X(OPAQUE, "opaque")
typedef enum stof_pattern {
#define STOF_X(name, text) STOF_PATTERN_##name,
  STOF_PATTERN_LIST(STOF_X)
#undef STOF_X
  STOF_PATTERN_COUNT
} stof_pattern;
const char *stof_pattern_name(stof_pattern p);

#define STOF_OP_KIND_LIST(X) X(PLACEHOLDER, "placeholder") X(COMPUTE, "compute") X(EXTERN, "extern")
typedef enum stof_op_kind {
#define STOF_X(name, text) STOF_OP_##name,
  STOF_OP_KIND_LIST(STOF_X)
#undef STOF_X
  STOF_OP_KIND_COUNT
} stof_op_kind;

typedef struct stof_graph stof_graph;
typedef struct stof_op stof_op;
typedef struct stof_expr stof_expr;

/* An iteration variable: a data-parallel axis of a compute, or a reduce axis. */
typedef enum stof_var_kind { STOF_VAR_AXIS, STOF_VAR_REDUCE } stof_var_kind;
typedef struct stof_var {
  const char *name;
  int64_t extent; /* the var ranges over [0, extent) */
  stof_var_kind kind;
  int id;         /* dense index within the graph */
  const stof_op *owner; /* the compute an axis belongs to (NULL until it is built) */
} stof_var;

struct stof_expr {
  stof_expr_kind kind;
  stof_dtype dtype;
  /* 1 + the greatest depth of its operands (constants and vars: 1). The builders refuse an
   * expression deeper than STOF_TE_MAX_DEPTH, so every recursive walk over expressions
   * (checks, printers, hashes, the interpreter, the schedule's rewriting, bounds and code
   * generation) stays within a bounded stack. Not part of what the expression computes. */
  int depth;
  union {
    int64_t ival;             /* INT */
    double fval;              /* FLOAT */
    const stof_var *var;      /* VAR */
    struct {                  /* binary: a op b; unary and CAST: a; SELECT: c ? a : b */
      const stof_expr *a, *b, *c;
    } op;
    struct {                  /* LOAD: tensor[idx...] */
      const stof_op *tensor;
      int nidx;
      const stof_expr *const *idx;
    } load;
    struct {                  /* REDUCE: combiner over axes of src */
      stof_reduce_kind combiner;
      const stof_expr *src;
      int naxis;
      const stof_var *const *axis;
    } reduce;
  } u;
};

/* CPU implementation of an extern op: inputs in graph order and the output, all
 * contiguous float64 CPU tensors (the output preallocated; the interpreter rounds it to
 * the op's dtype). Returns a status and records errors in ctx. */
typedef stof_status (*stof_extern_cpu_fn)(stof_ctx *ctx, int ninput,
                                          const stof_tensor *const *inputs,
                                          stof_tensor *output, void *ud);

struct stof_op {
  stof_op_kind kind;
  const char *name;
  stof_dtype dtype;
  int ndim;
  int64_t shape[STOF_MAX_DIMS];
  int id; /* dense index within the graph, in creation order (a topological order) */
  stof_pattern pattern;
  int compute_intensive; /* GEMM-like or attention (CI); else memory-intensive (MI) */
  /* COMPUTE */
  const stof_var *const *axis; /* ndim axes */
  const stof_expr *body;
  /* COMPUTE and EXTERN: the distinct ops read, in first-use order */
  int ninput;
  const stof_op *const *input;
  /* EXTERN */
  stof_extern_cpu_fn cpu_fn;   /* may be NULL when semantics is set */
  void *cpu_ud;
  const stof_op *semantics;    /* a compute giving the same values, or NULL */
  /* Metadata that does not change what the op computes (the structural hash ignores it):
   * tag names the layer that built a compute ("gemm", "gelu", "layer_norm", ...; TVM's op
   * tag), for the runtime's templates; intrin names the registered intrinsic that runs an
   * extern op (kernels/: "attention"), intrin_attrs its parameters (owned by whoever built
   * the op, alive as long as the graph). */
  const char *tag;
  const char *intrin;
  const void *intrin_attrs;
};

/** A graph: the arena that owns every expr, var and op built in it. Owned. */
stof_status stof_graph_new(stof_ctx *ctx, stof_graph **out);
void stof_graph_free(stof_graph *g);
stof_ctx *stof_graph_ctx(const stof_graph *g);
int stof_graph_nop(const stof_graph *g);
/** The op with id i. Borrowed. */
const stof_op *stof_graph_op(const stof_graph *g, int i);
/** Zeroed memory that lives as long as the graph (parameters of its ops). NULL on NOMEM.
 *  Borrowed. */
void *stof_graph_alloc(stof_graph *g, size_t size);

/* The deepest expression the builders make (stof_expr.depth). Every walk over expressions
 * recurses at most this deep (twice this while compute_inline substitutes one body into
 * another), which the default 8 MiB stack holds, sanitizers included. */
#define STOF_TE_MAX_DEPTH 10000

/* Expression builders. Results are borrowed from the graph. They check their operands
 * (dtypes, arity) and report STOF_ERR_TYPE / _ARG with a message naming the operation; an
 * expression nested deeper than STOF_TE_MAX_DEPTH levels is STOF_ERR_UNSUPPORTED ("expression
 * nested deeper than 10000 levels (build it as several computes)"). */
stof_status stof_te_int(stof_graph *g, int64_t v, stof_dtype dtype, const stof_expr **out);
stof_status stof_te_float(stof_graph *g, double v, stof_dtype dtype, const stof_expr **out);
/** Binary op with the usual promotion: float beats int, wider beats narrower, f16 with
 *  bf16 gives f32; comparisons give bool; AND/OR take bools; integer DIV floors. */
stof_status stof_te_binary(stof_graph *g, stof_expr_kind kind, const stof_expr *a,
                           const stof_expr *b, const stof_expr **out);
/** Unary op: NEG and ABS keep the dtype, NOT takes bool, math functions take floats
 *  (an int operand is cast to float32). */
stof_status stof_te_unary(stof_graph *g, stof_expr_kind kind, const stof_expr *a,
                          const stof_expr **out);
stof_status stof_te_cast(stof_graph *g, stof_dtype dtype, const stof_expr *a,
                         const stof_expr **out);
/** cond ? a : b; cond bool, a and b promoted to a common dtype. */
stof_status stof_te_select(stof_graph *g, const stof_expr *cond, const stof_expr *a,
                           const stof_expr *b, const stof_expr **out);
/** tensor[idx...]: nidx must equal the tensor's rank, indices integer; constant indices
 *  are range-checked here, the others by whoever evaluates. */
stof_status stof_te_load(stof_graph *g, const stof_op *tensor, int nidx,
                         const stof_expr *const *idx, const stof_expr **out);
/** A reduce axis over [0, extent) as a VAR expression. */
stof_status stof_te_reduce_axis(stof_graph *g, int64_t extent, const char *name,
                                const stof_expr **out);
/** combiner over the given reduce axes (VAR expressions of reduce axes) of src. */
stof_status stof_te_reduce(stof_graph *g, stof_reduce_kind combiner, const stof_expr *src,
                           int naxis, const stof_expr *const *axes, const stof_expr **out);

/* Op builders. */
stof_status stof_te_placeholder(stof_graph *g, int ndim, const int64_t *shape,
                                stof_dtype dtype, const char *name, const stof_op **out);
/** Creates the ndim data-parallel axes of a compute about to be built (names NULL gives
 *  i, j, k, l, ...), as VAR expressions in axes[0..ndim). */
stof_status stof_te_compute_axes(stof_graph *g, int ndim, const int64_t *shape,
                                 const char *const *names, const stof_expr **axes);
/** A compute op over the given axes (from stof_te_compute_axes). body may contain a
 *  REDUCE only at its top; every var in body is one of the axes or a reduce axis of that
 *  REDUCE. Its dtype is body's unless dtype >= 0 casts it. */
stof_status stof_te_compute(stof_graph *g, const char *name, int ndim,
                            const stof_expr *const *axes, const stof_expr *body, int dtype,
                            const stof_op **out);
/** An opaque op. semantics (a compute reading the same inputs) or cpu_fn gives its
 *  values to the interpreter; compute_intensive marks attention-like kernels. */
stof_status stof_te_extern(stof_graph *g, const char *name, int ninput,
                           const stof_op *const *inputs, int ndim, const int64_t *shape,
                           stof_dtype dtype, stof_extern_cpu_fn cpu_fn, void *cpu_ud,
                           const stof_op *semantics, int compute_intensive,
                           const stof_op **out);

/** Sets op's tag (copied into the graph; NULL clears it). Tags are metadata: they never change
 *  what the graph computes. */
stof_status stof_te_set_tag(stof_graph *g, const stof_op *op, const char *tag);
/** Marks an extern op as run by the registered intrinsic name (copied), with attrs
 *  (borrowed: must live as long as the graph). */
stof_status stof_te_set_intrin(stof_graph *g, const stof_op *op, const char *name,
                               const void *attrs);

/**
 * A graph of its own for a part of g: ops[0..nop) (computes and externs of g, any order)
 * are copied into a new graph *out, and every op they read that is not among them becomes
 * a placeholder there (same name, shape and dtype). map (g's op count entries, may be NULL)
 * gets, for each op id of g, its copy in *out or NULL. Tags and intrinsic marks are kept.
 * An expression nested deeper than STOF_TE_MAX_DEPTH is STOF_ERR_UNSUPPORTED. Owned:
 * stof_graph_free.
 */
stof_status stof_graph_extract(stof_graph *g, int nop, const stof_op *const *ops,
                               stof_graph **out, const stof_op **map);

/** The ops that outputs depend on, in topological order (ids ascending). Owned array:
 *  stof_ctx_dealloc(ctx, ops, n * sizeof *ops). */
stof_status stof_graph_collect(stof_graph *g, int nout, const stof_op *const *outputs,
                               const stof_op ***ops, int *nops);

/* Printing: owned NUL-terminated strings (stof_ctx_dealloc with strlen + 1). */
stof_status stof_expr_print(stof_ctx *ctx, const stof_expr *e, char **out);
/** The ops outputs depend on, one per paragraph, as TVM's te printer does. */
stof_status stof_te_print(stof_graph *g, int nout, const stof_op *const *outputs, char **out);

/** Structural hash of what outputs compute: equal for graphs that differ only in names
 *  (of ops and vars) and in the graph they live in; different when any shape, dtype,
 *  constant, operation or wiring differs. The tuning database's workload key. */
stof_status stof_te_hash(stof_graph *g, int nout, const stof_op *const *outputs,
                         uint64_t *out);

/* ---------------------------------------------------------------- on-disk cache */

/**
 * The directory for cached artefacts of one kind (subdir: "cubin", "so", ...), created if
 * missing: $STOF_CACHE_DIR/subdir, else $XDG_CACHE_HOME/stof/subdir, else
 * $HOME/.cache/stof/subdir, else /tmp/stof-cache/subdir. Written into buf (n bytes).
 */
stof_status stof_cache_dir(stof_ctx *ctx, const char *subdir, char *buf, size_t n);
/** Reads a whole cache file. STOF_ERR_NOT_FOUND when absent. Owned: stof_ctx_dealloc. */
stof_status stof_cache_read(stof_ctx *ctx, const char *path, void **data, size_t *size);
/** Writes a cache file atomically (a temporary name in the same directory, then rename). */
stof_status stof_cache_write(stof_ctx *ctx, const char *path, const void *data, size_t size);
/** FNV-1a 64 over bytes, chained from h (start with STOF_HASH_INIT). */
#define STOF_HASH_INIT 0xcbf29ce484222325ull
uint64_t stof_hash_bytes(uint64_t h, const void *data, size_t size);

/* ---------------------------------------------------------------- string buffer */

/* A growable NUL-terminated string in context memory, for printers and messages. A failed
 * growth makes later appends no-ops and stof_buf_finish report STOF_ERR_NOMEM. */
typedef struct stof_buf {
  stof_ctx *ctx;
  char *data;
  size_t len, cap;
  int nomem;
} stof_buf;

void stof_buf_init(stof_buf *b, stof_ctx *ctx);
void stof_buf_printf(stof_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void stof_buf_puts(stof_buf *b, const char *s);
/** Hands the string over, exactly sized. Owned: stof_ctx_dealloc(ctx, s, strlen(s) + 1).
 *  STOF_ERR_NOMEM (recorded) when any growth failed; the buffer is emptied either way. */
stof_status stof_buf_finish(stof_buf *b, char **out);
/** Drops the string. */
void stof_buf_free(stof_buf *b);

/* ---------------------------------------------------------------- interpreter */

/**
 * Evaluates outputs on the CPU, naively: every value in float64, rounded to each op's
 * dtype when stored (f32 results carry f64-accumulated reductions). feed_ops[i] (a
 * placeholder) takes the values of feed[i] (CPU, any dtype convertible, same shape).
 * Every load is range-checked (STOF_ERR_RANGE names the tensor, dim and index); a
 * placeholder missing from the feed is STOF_ERR_ARG naming it; a feed of another shape
 * is STOF_ERR_SHAPE. results[i] is a new CPU tensor of outputs[i]'s dtype (owned). On
 * error nothing is returned.
 */
stof_status stof_interp_eval(stof_graph *g, int nout, const stof_op *const *outputs,
                             int nfeed, const stof_op *const *feed_ops,
                             const stof_tensor *const *feed, stof_tensor **results);

/* ---------------------------------------------------------------- CUDA runtime */

/*
 * The driver (libcuda.so.1) is opened with dlopen on first use; without it every call
 * returns STOF_ERR_NO_DEVICE with a message saying so. NVRTC is linked and works without
 * a GPU.
 */
typedef struct stof_cuda_module stof_cuda_module;
typedef struct stof_cuda_kernel stof_cuda_kernel;

/** STOF_OK when a GPU can be used; else the reason (NO_DEVICE, CUDA). */
stof_status stof_cuda_init(stof_ctx *ctx);
/** Device properties of the current device (after init). */
typedef struct stof_cuda_props {
  char name[256];
  int cc_major, cc_minor;
  int sm_count;
  size_t smem_per_block_optin;
  size_t total_mem;
} stof_cuda_props;
stof_status stof_cuda_props_get(stof_ctx *ctx, stof_cuda_props *out);

/** Streams: work is queued on the context's current stream (stof_cuda_set_stream), the
 *  legacy default stream until one is set. Owned: stof_cuda_stream_free. */
typedef struct stof_cuda_stream stof_cuda_stream;
/** A new non-blocking stream (cuStreamCreate, CU_STREAM_NON_BLOCKING: it does not wait for
 *  the legacy default stream, nor the default stream for it). Owned: stof_cuda_stream_free. */
stof_status stof_cuda_stream_new(stof_ctx *ctx, stof_cuda_stream **out);
/** Destroys the stream (work already queued on it still runs); ends a capture still open
 *  on it (the graph is dropped). A stream that is its context's current stream stops being
 *  it. NULL does nothing. */
void stof_cuda_stream_free(stof_cuda_stream *s);
/** Waits until everything queued on s has run (errors in s's context). */
stof_status stof_cuda_stream_synchronize(stof_cuda_stream *s);
/** The driver's CUstream (for libraries such as cuBLASLt); NULL for s NULL (the default
 *  stream). Borrowed. */
void *stof_cuda_stream_handle(const stof_cuda_stream *s);
/** Makes s (borrowed, from this context; NULL: the default stream) the stream that
 *  launches, memsets, async copies and timers of ctx use. */
void stof_cuda_set_stream(stof_ctx *ctx, stof_cuda_stream *s);
/** The current stream (NULL: the default stream). Borrowed. */
stof_cuda_stream *stof_cuda_current_stream(stof_ctx *ctx);

/** Device memory. */
stof_status stof_cuda_malloc(stof_ctx *ctx, size_t size, uint64_t *dptr);
void stof_cuda_mem_free(stof_ctx *ctx, uint64_t dptr);
/** Synchronous copies: ordered after the work queued on the current stream; on return the
 *  host buffer may be reused (dtoh: holds the data). On a created stream they wait for it,
 *  so they fail (and invalidate the capture) while that stream is being captured. */
stof_status stof_cuda_htod(stof_ctx *ctx, uint64_t dst, const void *src, size_t size);
stof_status stof_cuda_dtoh(stof_ctx *ctx, void *dst, uint64_t src, size_t size);
stof_status stof_cuda_dtod(stof_ctx *ctx, uint64_t dst, uint64_t src, size_t size);
/** Queued on the current stream, asynchronous to the host: host memory must stay valid
 *  (and, for dtoh, unread) until the stream has run the copy. Pageable host memory makes
 *  the driver stage the copy (the call may then block). A captured copy is replayed from
 *  the same host address, whatever it holds then: graphs are best kept to device buffers. */
stof_status stof_cuda_htod_async(stof_ctx *ctx, uint64_t dst, const void *src, size_t size);
stof_status stof_cuda_dtoh_async(stof_ctx *ctx, void *dst, uint64_t src, size_t size);
stof_status stof_cuda_dtod_async(stof_ctx *ctx, uint64_t dst, uint64_t src, size_t size);
/** Waits for all work of the device (every stream). */
stof_status stof_cuda_synchronize(stof_ctx *ctx);
/** Sets count 16-bit words at dst to value (poisoning f16 outputs with NaN: 0x7e00; bf16:
 *  0x7fc0). Queued on the current stream (cuMemsetD16Async), asynchronous to the host as
 *  the driver's memsets of device memory always are: later work on the same stream, and
 *  the synchronous copies above, see the values. memset8 and memset32 likewise (f32 NaN:
 *  0x7fc00000). */
stof_status stof_cuda_memset16(stof_ctx *ctx, uint64_t dst, uint16_t value, size_t count);
stof_status stof_cuda_memset8(stof_ctx *ctx, uint64_t dst, uint8_t value, size_t count);
stof_status stof_cuda_memset32(stof_ctx *ctx, uint64_t dst, uint32_t value, size_t count);
/** Free and total bytes of device memory (cuMemGetInfo), for peak-memory reports. */
stof_status stof_cuda_mem_get_info(stof_ctx *ctx, size_t *free_bytes, size_t *total_bytes);

/** Device-event timing. start records on the context's current stream at the time of the
 *  call, stop on that same stream (whatever is current then). Owned: stof_cuda_timer_free. */
typedef struct stof_cuda_timer stof_cuda_timer;
stof_status stof_cuda_timer_new(stof_ctx *ctx, stof_cuda_timer **out);
stof_status stof_cuda_timer_start(stof_cuda_timer *t);
/** Records the stop event, waits for it, and gives the milliseconds since start. */
stof_status stof_cuda_timer_stop(stof_cuda_timer *t, float *ms);
void stof_cuda_timer_free(stof_cuda_timer *t);

/*
 * CUDA graphs by stream capture. Between capture_begin and capture_end, work queued on the
 * stream (launches, async copies, memsets, cuBLASLt calls) is
 * recorded instead of run; capture_end instantiates it, and graph_launch replays it with
 * the same arguments (device pointers and kernel parameters are frozen; change inputs by
 * writing into the same buffers between replays). The capture is thread-local
 * (CU_STREAM_CAPTURE_MODE_THREAD_LOCAL): on the capturing thread, calls that would
 * synchronise with it or allocate (stof_cuda_synchronize, stof_cuda_stream_synchronize,
 * synchronous copies while it is the current stream, cuMemAlloc) fail and invalidate the
 * capture; other threads are not restricted. The default stream cannot be
 * captured. STOF_ERR_UNSUPPORTED when the driver lacks graph entry points.
 */
typedef struct stof_cuda_graph stof_cuda_graph;
stof_status stof_cuda_capture_begin(stof_ctx *ctx, stof_cuda_stream *s);
/** Ends the capture on s and instantiates the graph. Owned: stof_cuda_graph_free. On any
 *  failure (an operation during the capture invalidated it, instantiation failed) the
 *  capture is still ended (s usable again), what it made is freed, *out is NULL and the
 *  message names the cause (the first failure during the capture when there was one). */
stof_status stof_cuda_capture_end(stof_ctx *ctx, stof_cuda_stream *s, stof_cuda_graph **out);
/** Replays g on s (NULL: the context's current stream); asynchronous. */
stof_status stof_cuda_graph_launch(stof_cuda_graph *g, stof_cuda_stream *s);
void stof_cuda_graph_free(stof_cuda_graph *g);

/**
 * Compiles CUDA C with NVRTC for arch ("sm_90", "sm_90a", ...) to a cubin. name names the
 * source in messages; nopt extra options (and -lineinfo when the environment has
 * STOF_NVRTC_LINEINFO=1: source lines for compute-sanitizer's reports). On failure
 * STOF_ERR_COMPILE carries the NVRTC log. Owned cubin: stof_ctx_dealloc(ctx, *cubin, *size).
 */
stof_status stof_cuda_compile(stof_ctx *ctx, const char *src, const char *name,
                              const char *arch, int nopt, const char *const *opts,
                              void **cubin, size_t *size);
/** stof_cuda_compile with in-memory headers: `#include "header_names[i]"` in src finds
 *  header_srcs[i]. */
stof_status stof_cuda_compile_ex(stof_ctx *ctx, const char *src, const char *name,
                                 const char *arch, int nopt, const char *const *opts,
                                 int nheader, const char *const *header_names,
                                 const char *const *header_srcs, void **cubin, size_t *size);
/**
 * stof_cuda_compile_ex through the on-disk cubin cache (stof_cache_dir "cubin"), keyed by
 * a hash of the source, headers, options, arch and NVRTC version. A cached file is written
 * to a temporary name and renamed, so concurrent processes never read half a cubin; an
 * unreadable or corrupt entry is recompiled and replaced. Owned cubin as above.
 */
stof_status stof_cuda_compile_cached(stof_ctx *ctx, const char *src, const char *name,
                                     const char *arch, int nopt, const char *const *opts,
                                     int nheader, const char *const *header_names,
                                     const char *const *header_srcs, void **cubin,
                                     size_t *size);
/** The NVRTC version as major*1000 + minor*10. */
int stof_cuda_nvrtc_version(void);
/** Loads a cubin. Owned: stof_cuda_module_free. */
stof_status stof_cuda_module_load(stof_ctx *ctx, const void *cubin, size_t size,
                                  stof_cuda_module **out);
void stof_cuda_module_free(stof_cuda_module *m);
/** Looks up a __global__ function (extern "C" name). Borrowed from the module. */
stof_status stof_cuda_module_kernel(stof_cuda_module *m, const char *name,
                                    stof_cuda_kernel **out);
/** A TMA descriptor (the driver's CUtensorMap: 128 opaque bytes, 64-byte aligned), passed by
 *  value to a kernel parameter declared `const __grid_constant__` of the same size and
 *  alignment. */
typedef struct stof_cuda_tmap {
  uint64_t opaque[16];
} __attribute__((aligned(64))) stof_cuda_tmap;
/**
 * Encodes a tiled TMA descriptor (cuTensorMapEncodeTiled) of a 3-D tensor at device address
 * base: dims[0] elements per row (contiguous), then dims[1] and dims[2], byte strides
 * strides[0] (of dim 1) and strides[1] (of dim 2); box[0..2] elements per copy (box[0] *
 * element size at most swizzle bytes when swizzled); swizzle 0, 32, 64 or 128 bytes; elements
 * out of bounds read as zeros. dtype float16, bfloat16 or float32. STOF_ERR_UNSUPPORTED when
 * the driver has no cuTensorMapEncodeTiled (drivers before CUDA 12), STOF_ERR_ARG for a
 * dtype or swizzle it cannot take, STOF_ERR_CUDA (with the arguments) when the driver refuses
 * them (base not 16-byte aligned, strides not multiples of 16, a box too large, ...).
 */
stof_status stof_cuda_tmap_encode_3d(stof_ctx *ctx, stof_cuda_tmap *out, uint64_t base, stof_dtype dtype,
                                     const uint64_t dims[3], const uint64_t strides[2],
                                     const uint32_t box[3], int swizzle);
/** stof_cuda_tmap_encode_3d for a 4-D tensor: dims[0] contiguous, byte strides strides[0..2]
 *  of dims 1..3 (any order of magnitude: a strided view, e.g. [B][S][H][D] walked as
 *  {D, S, H, B}), box[0..3]. Same errors. */
stof_status stof_cuda_tmap_encode_4d(stof_ctx *ctx, stof_cuda_tmap *out, uint64_t base, stof_dtype dtype,
                                     const uint64_t dims[4], const uint64_t strides[3],
                                     const uint32_t box[4], int swizzle);
/** Launches on the context's current stream: args[i] points to the i-th parameter's value,
 *  as cuLaunchKernel takes them. */
stof_status stof_cuda_launch(stof_ctx *ctx, stof_cuda_kernel *k, const unsigned grid[3],
                             const unsigned block[3], unsigned smem, void **args);

/* ---------------------------------------------------------------- safetensors */

/*
 * Weights in Hugging Face's safetensors format (core/safetensors.c): an 8-byte
 * little-endian header length N, N bytes of JSON (name -> {"dtype", "shape",
 * "data_offsets"}, optional "__metadata__" of string -> string), then the data. dtypes
 * F32 F16 BF16 F64 I64 I32 BOOL, and U8 (loaded as bool).
 */
typedef struct stof_st_file stof_st_file;

/**
 * Opens and maps path, checking the whole header: STOF_ERR_IO (missing or unreadable file,
 * with the system's reason), STOF_ERR_PARSE (short file, header length past the end, bad
 * JSON with its line and column, not an object, bad or overlapping data_offsets, offsets
 * past the data section), STOF_ERR_TYPE (unknown dtype), STOF_ERR_SHAPE (shape not a list
 * of non-negative integers, too many dims, byte count not matching the shape); messages
 * name the file and the tensor. Owned: stof_st_close.
 */
stof_status stof_st_open(stof_ctx *ctx, const char *path, stof_st_file **out);
/** Tensors in the file; stof_st_name(f, i) for i in [0, count), sorted by name (borrowed,
 *  NULL out of range); stof_st_find: the index of name, or -1. */
int stof_st_count(const stof_st_file *f);
const char *stof_st_name(const stof_st_file *f, int i);
int stof_st_find(const stof_st_file *f, const char *name);
/**
 * Tensor i as a contiguous CPU tensor over the mapped bytes (no copy; one copy only for
 * a tensor whose offset is not aligned to its element size). Owned handle, borrowed
 * storage: valid while f is open. The pages are copy-on-write: writing into the tensor
 * changes this process's view only, never the file. STOF_ERR_RANGE for a bad i.
 */
stof_status stof_st_tensor(stof_st_file *f, int i, stof_tensor **out);
/** The metadata value of key, or NULL. Borrowed. Keys: stof_st_metadata_key(f, i) for i
 *  in [0, stof_st_metadata_count(f)), sorted. */
const char *stof_st_metadata(const stof_st_file *f, const char *key);
int stof_st_metadata_count(const stof_st_file *f);
const char *stof_st_metadata_key(const stof_st_file *f, int i);
/** The path the file was opened with. Borrowed. */
const char *stof_st_path(const stof_st_file *f);
/** Unmaps and frees f; tensors borrowing its storage must be gone. NULL is ignored. */
void stof_st_close(stof_st_file *f);
/**
 * Writes n tensors (names[i] -> tensors[i], any device or strides: copied to contiguous
 * host memory first when needed) and nmeta metadata entries to path, atomically (a
 * temporary file in the same folder, then rename). The header lists metadata first, then
 * the tensors in the given order; it is padded with spaces to a multiple of 8 bytes. The
 * data are contiguous, laid out by element size, largest first (the given order among
 * equals), so that every tensor is aligned and loads without a copy. STOF_ERR_ARG for an
 * empty, duplicate or reserved ("__metadata__") name, a duplicate metadata key or text
 * that is not UTF-8; STOF_ERR_IO naming the path. On failure path is untouched.
 */
stof_status stof_st_save(stof_ctx *ctx, const char *path, int n, const char *const *names,
                         const stof_tensor *const *tensors, int nmeta,
                         const char *const *meta_keys, const char *const *meta_values);

#ifdef __cplusplus
}
#endif
#endif
