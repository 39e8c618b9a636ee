/*
 * The Lua bindings' cross-file internals: userdata layouts and metatable names, the
 * per-state context, argument checkers, and raising errors with a kind prefix.
 *
 * Internal cross-file functions carry the prefix slua_ (the module prefix "lua_" would read
 * as Lua's own API). The opener stof_lua_open is what the executable and the loadable
 * module share.
 *
 * Lifetimes:
 *  - One stof_ctx per Lua state, reference-counted by the handles that use it (the state
 *    record in the registry, each graph, each tensor), so that finalizers may run in any
 *    order at lua_close.
 *  - One current graph per state (registry field "stof.graph"), created lazily; te.reset()
 *    starts a new one. Expressions and TE tensors point into a graph's arena and keep its
 *    userdata alive through their user value 1.
 *  - Bindings never longjmp across the core: they call it, free their temporaries, and only
 *    then raise (slua_raise).
 */
#ifndef STOF_LUA_INT_H
#define STOF_LUA_INT_H

#include <lauxlib.h>
#include <lua.h>

#include <stof/core.h>
#include <stof/kernels.h>
#include <stof/search.h>


/* Metatable names (also the __name shown in messages). */
#define SLUA_STATE "stof.State"
#define SLUA_GRAPH "stof.Graph"
#define SLUA_TENSOR "stof.Tensor"
#define SLUA_EXPR "stof.Expr"
#define SLUA_TETENSOR "stof.TeTensor"
#define SLUA_SCRATCH "stof.Scratch"

/* The context shared by every handle of one Lua state. */
typedef struct slua_ctx {
  stof_ctx *ctx;
  int refs;
} slua_ctx;

typedef struct slua_tensor { /* stof.Tensor: owns t (NULL once closed) */
  stof_tensor *t;
  slua_ctx *lc;
} slua_tensor;

typedef struct slua_graph { /* stof.Graph: owns g; user value 1: weak op -> TeTensor cache */
  stof_graph *g;
  slua_ctx *lc;
} slua_graph;

typedef struct slua_expr { /* stof.Expr: borrowed from g; user value 1: the graph */
  const stof_expr *e;
  stof_graph *g;
} slua_expr;

typedef struct slua_teop { /* stof.TeTensor: borrowed from g; user value 1: the graph */
  const stof_op *op;
  stof_graph *g;
} slua_teop;

/* ---------------------------------------------------------------- stof_lua.c */

/** Opens the module: pushes the `stof` table (also package.loaded.stof and .te). Returns 1.
 *  Safe to call more than once per state: later calls return the same table. */
int stof_lua_open(lua_State *L);
/** Adds to package.path the lua/ folders where stof's pure-Lua modules live: relative to
 *  anchor_dir (the executable's or the module's folder; NULL for none), then the source
 *  tree (STOF_SOURCE_DIR). Entries already present are not added twice. */
void stof_lua_add_path(lua_State *L, const char *anchor_dir);

/** Test-only (fault injection): opens the module as stof_lua_open does, on a context the
 *  caller made (with its own allocator hook), which the state takes over: it is freed once
 *  the state is closed and no handle uses it. Call it before anything opens the module in
 *  L (else it frees ctx and raises). tests/core/test_nomem.c runs scripts with the Nth
 *  allocation of that context failing. */
int slua_open_with_ctx(lua_State *L, stof_ctx *ctx);
/** The state's context (created on first use). Borrowed; slua_ctx_ref to keep it. */
slua_ctx *slua_state_ctx(lua_State *L);
slua_ctx *slua_ctx_ref(slua_ctx *lc);
void slua_ctx_unref(slua_ctx *lc);

/** The error kind for a status ("TypeError", "ShapeError", ...). */
const char *slua_kind(stof_status s);
/** Raises "<file:line:> <Kind>: [<where>: ]<ctx message>" and clears the context's error.
 *  where may be NULL (core messages name their object already). */
int slua_raise(lua_State *L, stof_ctx *ctx, stof_status s, const char *where);
/** Raises "<file:line:> <kind>: <formatted>" (lua_pushfstring formats). */
int slua_error(lua_State *L, const char *kind, const char *fmt, ...);
/** Raises "TypeError: fname: bad argument #arg (<formatted>)". */
int slua_argerror(lua_State *L, int arg, const char *fname, const char *fmt, ...);
/** Raises "TypeError: fname: bad argument #arg (<expected> expected, got <type>)". */
int slua_typeerror(lua_State *L, int arg, const char *fname, const char *expected);
/** The type of a value for messages: the metatable's __name, or Lua's type name; for a
 *  number, "integer" or "number". */
const char *slua_typename(lua_State *L, int idx);
/** For an error saying an integer was expected: a non-integer number's value ("1.5", "nan")
 *  written into buf, else slua_typename. */
const char *slua_intname(lua_State *L, int idx, char *buf, size_t size);

/** The userdata of metatable tname at idx; raises a TypeError naming fname otherwise. */
void *slua_checkudata(lua_State *L, int idx, const char *tname, const char *fname);
/** An integer argument (floats with an integral value accepted). */
lua_Integer slua_check_integer(lua_State *L, int arg, const char *fname, const char *what);
/** A shape table of non-negative integers into shape[STOF_MAX_DIMS]; returns ndim. */
int slua_check_shape(lua_State *L, int arg, const char *fname, int64_t *shape);
/** A dtype name (required). */
stof_dtype slua_check_dtype(lua_State *L, int arg, const char *fname);
/** An optional dtype name: none or nil gives def (which may be -1). */
int slua_opt_dtype(lua_State *L, int arg, const char *fname, int def);
/** Refuses a key of the table at idx that is not one of known (NULL-terminated): a
 *  ValueError "fname: unknown <what> "key" (known: a, b, ...)", so that a misspelt option
 *  ({tiel = 64}) never passes for a default. */
void slua_check_keys(lua_State *L, int idx, const char *fname, const char *what, const char *const *known);
/** An optional number: none or nil gives def. */
double slua_opt_number(lua_State *L, int arg, const char *fname, const char *what, double def);
/** An optional string: none or nil gives def. */
const char *slua_opt_string(lua_State *L, int arg, const char *fname, const char *what,
                            const char *def);
/** Pushes a table {d0, d1, ...}. */
void slua_push_shape(lua_State *L, int ndim, const int64_t *shape);
/** Pushes a holder for a string a core printer will return (owned by the state's
 *  context): pass the slot to the printer, then slua_owned_push. The holder frees the
 *  string if anything raises in between. */
char **slua_owned_new(lua_State *L);
/** Pushes the string of the holder at idx, less trailing newlines, and frees it (the
 *  holder stays, empty). */
void slua_owned_push(lua_State *L, int idx);
/** Pushes registry[key], a table created on first use with the given weak mode ("k",
 *  "v", "kv" or NULL for a strong table). */
void slua_registry_table(lua_State *L, const char *key, const char *mode);
/** A scratch buffer of n bytes owned by a userdata pushed on the stack (freed by GC). */
void *slua_scratch(lua_State *L, size_t n);

/* ---------------------------------------------------------------- te.c */

/** Pushes the stof.te table (creating the Expr and TeTensor metatables). */
int slua_open_te(lua_State *L);
/** Pushes the current graph's userdata (creating the graph on first use). */
slua_graph *slua_current_graph(lua_State *L);
/** The TE tensor at idx, or NULL. */
slua_teop *slua_test_teop(lua_State *L, int idx);
/** The TE tensor or list of TE tensors at arg, all of one graph: their ops, in a scratch
 *  buffer pushed on the stack; *n their count, *g their graph. Raises on anything else. */
const stof_op **slua_check_outputs(lua_State *L, int arg, const char *fname, int *n,
                                   stof_graph **g);
/** Pushes the TE tensor handle of op (one handle per op); gidx holds its graph's userdata. */
void slua_push_teop(lua_State *L, const stof_op *op, int gidx);

/* ---------------------------------------------------------------- tensor.c */

/** Sets stof.tensor, stof.zeros, ... in the table at idx (creates the Tensor metatable). */
void slua_open_tensor(lua_State *L, int idx);
/** Pushes a new, empty tensor handle (t NULL) holding a reference on the context. */
slua_tensor *slua_new_tensor(lua_State *L);
/** slua_new_tensor for a tensor whose storage the value at owner holds (a mapped file):
 *  the handle keeps that value alive through its user value 1. */
slua_tensor *slua_new_tensor_borrowing(lua_State *L, int owner);
/** The open tensor at idx; raises a TypeError naming fname otherwise. */
stof_tensor *slua_check_tensor(lua_State *L, int arg, const char *fname);

/* ---------------------------------------------------------------- eval.c */

/** Sets stof.eval in the table at idx. */
void slua_open_eval(lua_State *L, int idx);

/* ---------------------------------------------------------------- schedule.c */

/** Sets stof.schedule, stof.build and stof.INFER in the table at idx (creates the Schedule,
 *  Block, Loop, Knob and Func metatables). */
void slua_open_schedule(lua_State *L, int idx);
/* A Schedule handle lent a schedule it does not own (a template's, during the search): it
 * never frees it, refuses what would make a schedule or function outlive it (clone,
 * with_decisions, stof.build), and is closed with slua_sched_release before the schedule
 * goes away, after which it and its loops, blocks and knobs raise "closed" errors. */
typedef struct slua_sched slua_sched;
/** Pushes a Schedule handle lent s. Raises (memory) before anything is lent. */
slua_sched *slua_sched_push_lent(lua_State *L, stof_sched *s);
/** Closes the handle (it stays a valid, closed userdata). Never raises. */
void slua_sched_release(slua_sched *h);

/* ---------------------------------------------------------------- mask.c */

/** Sets stof.mask (also package.loaded["stof.mask"]) in the table at idx (creates the Mask
 *  and MaskFormat metatables). */
void slua_open_mask(lua_State *L, int idx);
/** The open mask at arg; raises a TypeError / ValueError naming fname otherwise. */
stof_mask *slua_check_mask(lua_State *L, int arg, const char *fname);
/* A record of Lua predicate calls: open one (slua_pred_begin pushes a table: leave it on
 * the stack) around any core call that may evaluate an fn mask, close it with
 * slua_pred_end, and only then raise (slua_pred_raise when the core call failed because a
 * predicate did, c.failed). */
typedef struct slua_pred_call {
  lua_State *L;
  int fns;    /* stack index of the REG_FNS table on L */
  int failed; /* a predicate failed: msg says why */
  int64_t b, h, i, j;
  char msg[1024];
  uint64_t ncall;           /* predicate calls so far, for the progress line */
  double t0, t_next, every; /* seconds (monotonic): start, next progress line, interval */
  struct slua_pred_call *prev;
} slua_pred_call;
void slua_pred_begin(lua_State *L, slua_pred_call *c);
void slua_pred_end(slua_pred_call *c);
int slua_pred_raise(lua_State *L, stof_ctx *ctx, const char *where, const stof_mask *m,
                    const slua_pred_call *c);

/* ---------------------------------------------------------------- attention.c */

/** Sets stof.attention, stof.attention_plan, stof.explain and stof.te.attention. */
void slua_open_attention(lua_State *L, int idx);

/* ---------------------------------------------------------------- exec.c */

/** Sets stof.plan and stof.cuda_mem_info (creates the Plan metatable). */
void slua_open_exec(lua_State *L, int idx);
/** Pushes a new Plan handle that keeps the graph userdata at gidx alive and owns nothing
 *  yet: returns the slot where the caller puts the plan (transferred to the handle, freed
 *  by its __gc/__close), for plans built elsewhere than stof.plan (stof.tune). */
stof_plan **slua_plan_new(lua_State *L, int gidx);
/** Keeps the tensor at tidx alive with the Plan at pidx, as the one bound to placeholder
 *  ph (a plan borrows the storage of tensors bound on its device). */
void slua_plan_keep(lua_State *L, int pidx, const stof_op *ph, int tidx);

/* ---------------------------------------------------------------- db.c */

/** Sets module.db (stof.db.open) and the stof.Db metatable. */
void slua_open_db(lua_State *L, int idx);
/** The database of the Db handle at idx, NULL when idx holds something else; raises a
 *  ValueError naming fname for a closed one. Borrowed (the handle owns it). */
stof_db *slua_test_db(lua_State *L, int idx, const char *fname);
/** Opens the database at path as a new Db handle, pushed; raises an IOError naming the path
 *  when it cannot. Borrowed from the handle. */
stof_db *slua_db_open(lua_State *L, const char *path);

/* ---------------------------------------------------------------- search.c */

/** Sets stof.tune and stof.search (template, templates) in the table at idx. */
void slua_open_search(lua_State *L, int idx);

/* ---------------------------------------------------------------- io.c */

/** Sets stof.load, stof.save (safetensors), stof.load_json and stof.null in the table at
 *  idx (creates the SafetensorsFile metatable). */
void slua_open_io(lua_State *L, int idx);

#endif
