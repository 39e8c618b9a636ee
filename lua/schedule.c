/*
 * Schedules in Lua (stof.schedule, stof.build, stof.INFER), over include/stof/schedule.h.
 *
 *   local s = stof.schedule({C})                 -- stof.Schedule; keeps C's graph alive
 *   local b = s:get_block("C")                   -- stof.Block
 *   local i, j, k = table.unpack(s:get_loops(b)) -- stof.Loop handles
 *   local io, ii = s:split(i, {stof.INFER, s:knob("tile_i", {4, 8, 16})})
 *   s:fuse(a, b) s:reorder(...) s:tile(x, y, fx, fy) s:bind(l, "threadIdx.x")
 *   s:vectorize(l) s:unroll(l) s:parallel(l) s:annotate(l_or_b, key, value)
 *   s:knob(name, {cands}[, decision]) s:sample_categorical(name, {cands}, {probs}[, decision])
 *   s:sample_perfect_tile(l, n, max_innermost) -> n knobs   s:sample_compute_location(b) -> knob
 *   (s:compute_at(b, knob) applies a location knob)
 *   s:compute_at(b, l) s:reverse_compute_at(b, l) s:compute_inline(b) s:reverse_compute_inline(b)
 *   s:cache_read(b, i, scope) -> block   s:cache_write(b, scope) -> block   s:rfactor(l, axis) -> block
 *   s:group({A, B}) -> id   s:ungroup(id)
 *   s:auto(target[, {threads = n, vec = n}]) (a fresh schedule of a segment: stof_sched_auto)
 *   s:trace() (Lua text) s:trace_json() s:replay(json) s:with_decisions({name = index})
 *   s:print_loop_nest() s:clone()
 *   local f = stof.build(s, {A, B, C}, {target = "c"}); f(a, b, c); f:source()
 *   f:time(a, b, c, {reps = 50, warmup = 5}) -> mean ms of one call ("cuda" builds only)
 *
 * Decisions are 0-based indices into a knob's candidates, as in the C API and the traces.
 * Handles (blocks, loops, knobs) keep their schedule alive through user value 1 and are
 * valid only with it (a clone has handles of its own). A schedule lent to a template by the
 * search (slua_sched_push_lent) is the search's: closed when the template returns, never
 * cloned, copied or built from Lua. Errors from the core are raised as
 * "file:line: ScheduleError: split: factor 0 for loop i".
 */
#include <string.h>

#include <stof/schedule.h>

#include "lua_int.h"

#define MT_SCHED "stof.Schedule"
#define MT_BLOCK "stof.Block"
#define MT_LOOP "stof.Loop"
#define MT_KNOB "stof.Knob"
#define MT_FUNC "stof.Func"

typedef struct slua_sched { /* stof.Schedule: owns s unless lent; user value 1: the graph
                                userdata (nil when lent: the graph is the lender's) */
  stof_sched *s;
  slua_ctx *lc;
  int lent; /* s is borrowed (a template's schedule in the search): never freed here */
} lsched;

typedef struct lhandle { /* stof.Block / Loop / Knob: user value 1: the schedule userdata */
  int id;
} lhandle;

typedef struct lfunc { /* stof.Func: owns f */
  stof_func *f;
  slua_ctx *lc;
} lfunc;

/* ---------------------------------------------------------------- helpers */

/* A method's TypeError: argument idx (the receiver is 1) is reported as #idx-1. */
static int method_typeerror(lua_State *L, int idx, const char *fname, const char *expected) {
  return slua_argerror(L, idx - 1, fname, "%s expected, got %s", expected,
                       lua_isnone(L, idx) ? "no value" : slua_typename(L, idx));
}

static lsched *check_sched(lua_State *L, int idx, const char *fname) {
  lsched *ls = slua_checkudata(L, idx, MT_SCHED, fname);
  if (!ls->s && ls->lent)
    slua_error(L, "ValueError",
               "%s: the schedule is closed (a template's schedule is valid only while its schedule function runs)",
               fname);
  if (!ls->s) slua_error(L, "ValueError", "%s: the schedule is closed", fname);
  return ls;
}

/* Refuses a lent schedule for what would make an object outlive the schedule it was lent. */
static void check_owned(lua_State *L, lsched *ls, const char *fname, const char *what) {
  if (ls->lent)
    slua_error(L, "ValueError", "%s: a template's schedule cannot be %s (it lives only while the template's "
               "schedule function runs; apply the primitives to it and the search builds it)", fname, what);
}

static int raise_core(lua_State *L, lsched *ls, stof_status st) {
  return slua_raise(L, ls->lc->ctx, st, NULL);
}

/* Pushes a handle of kind mt for id, tied to the schedule at sidx. */
static void push_handle(lua_State *L, int sidx, const char *mt, int id) {
  sidx = lua_absindex(L, sidx);
  lhandle *h = lua_newuserdatauv(L, sizeof *h, 1);
  h->id = id;
  luaL_setmetatable(L, mt);
  lua_pushvalue(L, sidx);
  lua_setiuservalue(L, -2, 1);
}

/* The id of the handle of kind mt at idx, which must belong to the schedule at sidx. */
static int check_handle(lua_State *L, int sidx, int idx, const char *mt, const char *fname,
                        const char *what) {
  lhandle *h = luaL_testudata(L, idx, mt);
  if (!h) {
    slua_argerror(L, idx - 1, fname, "%s expected, got %s", what,
                  lua_isnone(L, idx) ? "no value" : slua_typename(L, idx));
    return -1;
  }
  lua_getiuservalue(L, idx, 1);
  int same = lua_rawequal(L, -1, sidx);
  lua_pop(L, 1);
  if (!same) slua_error(L, "ValueError", "%s: the %s belongs to another schedule", fname, what);
  return h->id;
}

/* The schedule behind a handle at idx (for its own metamethods). */
static stof_sched *handle_sched(lua_State *L, int idx) {
  lua_getiuservalue(L, idx, 1);
  lsched *ls = luaL_testudata(L, -1, MT_SCHED);
  lua_pop(L, 1); /* the handle keeps it alive */
  if (!ls || !ls->s) slua_error(L, "ValueError", "the schedule of this handle is closed");
  return ls->s;
}

/* A factor at idx: an integer (stof.INFER allowed) or a knob of the schedule at sidx. */
static stof_factor check_factor(lua_State *L, int sidx, int idx, int argn, const char *fname,
                                int n) {
  if (luaL_testudata(L, idx, MT_KNOB)) {
    lhandle *h = lua_touserdata(L, idx);
    lua_getiuservalue(L, idx, 1);
    int same = lua_rawequal(L, -1, sidx);
    lua_pop(L, 1);
    if (!same) slua_error(L, "ValueError", "%s: the knob belongs to another schedule", fname);
    return stof_factor_knob(h->id);
  }
  int isnum = 0;
  lua_Integer v = lua_type(L, idx) == LUA_TNUMBER ? lua_tointegerx(L, idx, &isnum) : 0;
  char got[32];
  if (!isnum)
    slua_argerror(L, argn, fname, "factor %d must be an integer or a knob, got %s", n,
                  slua_intname(L, idx, got, sizeof got));
  return stof_factor_const((int64_t)v);
}

/* The integers of the list at idx, in scratch memory (pushed on the stack). */
static int64_t *check_ints(lua_State *L, int idx, const char *fname, const char *what, int *n) {
  if (!lua_istable(L, idx)) {
    method_typeerror(L, idx, fname, "table of integers");
    return NULL;
  }
  lua_Integer len = (lua_Integer)lua_rawlen(L, idx);
  if (len > 1024) slua_argerror(L, idx - 1, fname, "%I %s, at most 1024", len, what);
  int64_t *v = slua_scratch(L, sizeof *v * (size_t)(len ? len : 1));
  for (int i = 0; i < (int)len; i++) {
    lua_rawgeti(L, idx, i + 1);
    int isnum = 0;
    lua_Integer x = lua_type(L, -1) == LUA_TNUMBER ? lua_tointegerx(L, -1, &isnum) : 0;
    if (!isnum)
      slua_argerror(L, idx - 1, fname, "%s %d must be an integer, got %s", what, i + 1,
                    slua_typename(L, -1));
    v[i] = (int64_t)x;
    lua_pop(L, 1);
  }
  *n = (int)len;
  return v;
}

/* Loop handles from the arguments [first, top] or from one table there. */
static int check_loops(lua_State *L, int first, const char *fname, int *ids) {
  int top = lua_gettop(L);
  if (top == first && lua_istable(L, first)) {
    lua_Integer n = (lua_Integer)lua_rawlen(L, first);
    if (n > STOF_SCHED_MAX_LOOPS) slua_argerror(L, 1, fname, "%I loops, at most %d", n, STOF_SCHED_MAX_LOOPS);
    luaL_checkstack(L, (int)n + 4, fname);
    for (int i = 1; i <= (int)n; i++) lua_rawgeti(L, first, i);
    lua_remove(L, first);
    top = lua_gettop(L);
  }
  int n = top - first + 1;
  if (n > STOF_SCHED_MAX_LOOPS) slua_argerror(L, 1, fname, "%d loops, at most %d", n, STOF_SCHED_MAX_LOOPS);
  for (int i = 0; i < n; i++) ids[i] = check_handle(L, 1, first + i, MT_LOOP, fname, "loop");
  return n;
}

/* Pushes the text of an owned core string, freeing it. */
static int push_owned(lua_State *L, stof_ctx *ctx, char *s) {
  lua_pushstring(L, s);
  stof_ctx_dealloc(ctx, s, strlen(s) + 1);
  return 1;
}

/* ---------------------------------------------------------------- schedules */

static int sched_gc(lua_State *L) {
  lsched *ls = slua_checkudata(L, 1, MT_SCHED, "Schedule:close");
  if (ls->s) {
    if (!ls->lent) stof_sched_free(ls->s);
    ls->s = NULL;
  }
  if (ls->lc) {
    slua_ctx_unref(ls->lc);
    ls->lc = NULL;
  }
  return 0;
}

/* Pushes a new, empty schedule userdata whose graph is the user value at gidx. */
static lsched *new_sched(lua_State *L, int gidx) {
  gidx = lua_absindex(L, gidx);
  slua_ctx *lc = slua_state_ctx(L);
  lsched *ls = lua_newuserdatauv(L, sizeof *ls, 1);
  ls->s = NULL;
  ls->lc = NULL;
  ls->lent = 0;
  luaL_setmetatable(L, MT_SCHED);
  lua_pushvalue(L, gidx);
  lua_setiuservalue(L, -2, 1);
  ls->lc = slua_ctx_ref(lc);
  return ls;
}

slua_sched *slua_sched_push_lent(lua_State *L, stof_sched *s) {
  lua_pushnil(L); /* no graph userdata: the lender keeps the graph */
  lsched *ls = new_sched(L, -1);
  lua_remove(L, -2);
  ls->lent = 1;
  ls->s = s;
  return ls;
}

void slua_sched_release(slua_sched *h) { h->s = NULL; }

/* stof.schedule(outputs): outputs a TE tensor or a list of them (compute ops, one graph). */
static int l_schedule(lua_State *L) {
  const char *fname = "stof.schedule";
  lua_settop(L, 1);
  int nout;
  stof_graph *g;
  const stof_op **outs = slua_check_outputs(L, 1, fname, &nout, &g); /* slot 2 */
  if (slua_test_teop(L, 1))
    lua_getiuservalue(L, 1, 1); /* the graph userdata, slot 3 */
  else {
    lua_rawgeti(L, 1, 1);
    lua_getiuservalue(L, -1, 1);
    lua_remove(L, -2);
  }
  lsched *ls = new_sched(L, 3);
  stof_status st = stof_sched_new(g, nout, outs, &ls->s);
  if (st) return raise_core(L, ls, st);
  return 1;
}

static int m_get_block(lua_State *L) {
  const char *fname = "get_block";
  lsched *ls = check_sched(L, 1, fname);
  const char *name;
  slua_teop *t = slua_test_teop(L, 2);
  if (t)
    name = t->op->name;
  else if (lua_type(L, 2) == LUA_TSTRING)
    name = lua_tostring(L, 2);
  else
    return method_typeerror(L, 2, fname, "block name or te tensor");
  int b;
  stof_status st = stof_sched_get_block(ls->s, name, &b);
  if (st) return raise_core(L, ls, st);
  push_handle(L, 1, MT_BLOCK, b);
  return 1;
}

static int m_get_loops(lua_State *L) {
  const char *fname = "get_loops";
  lsched *ls = check_sched(L, 1, fname);
  int b = check_handle(L, 1, 2, MT_BLOCK, fname, "block");
  int loops[STOF_SCHED_MAX_LOOPS], n = 0;
  stof_status st = stof_sched_get_loops(ls->s, b, STOF_SCHED_MAX_LOOPS, loops, &n);
  if (st) return raise_core(L, ls, st);
  lua_createtable(L, n, 0);
  for (int i = 0; i < n; i++) {
    push_handle(L, 1, MT_LOOP, loops[i]);
    lua_rawseti(L, -2, i + 1);
  }
  return 1;
}

static int m_split(lua_State *L) {
  const char *fname = "split";
  lsched *ls = check_sched(L, 1, fname);
  int loop = check_handle(L, 1, 2, MT_LOOP, fname, "loop");
  if (!lua_istable(L, 3)) return method_typeerror(L, 3, fname, "table of factors");
  lua_Integer n = (lua_Integer)lua_rawlen(L, 3);
  if (n > STOF_SCHED_MAX_LOOPS) return slua_argerror(L, 2, fname, "%I factors, at most %d", n, STOF_SCHED_MAX_LOOPS);
  stof_factor f[STOF_SCHED_MAX_LOOPS];
  for (int i = 0; i < (int)n; i++) {
    lua_rawgeti(L, 3, i + 1);
    f[i] = check_factor(L, 1, lua_gettop(L), 2, fname, i + 1);
    lua_pop(L, 1);
  }
  int parts[STOF_SCHED_MAX_LOOPS];
  stof_status st = stof_sched_split(ls->s, loop, (int)n, f, parts);
  if (st) return raise_core(L, ls, st);
  luaL_checkstack(L, (int)n + 2, fname);
  for (int i = 0; i < (int)n; i++) push_handle(L, 1, MT_LOOP, parts[i]);
  return (int)n;
}

static int m_fuse(lua_State *L) {
  const char *fname = "fuse";
  lsched *ls = check_sched(L, 1, fname);
  int ids[STOF_SCHED_MAX_LOOPS];
  int n = check_loops(L, 2, fname, ids);
  int fused;
  stof_status st = stof_sched_fuse(ls->s, n, ids, &fused);
  if (st) return raise_core(L, ls, st);
  push_handle(L, 1, MT_LOOP, fused);
  return 1;
}

static int m_reorder(lua_State *L) {
  const char *fname = "reorder";
  lsched *ls = check_sched(L, 1, fname);
  int ids[STOF_SCHED_MAX_LOOPS];
  int n = check_loops(L, 2, fname, ids);
  stof_status st = stof_sched_reorder(ls->s, n, ids);
  if (st) return raise_core(L, ls, st);
  return 0;
}

static int m_tile(lua_State *L) {
  const char *fname = "tile";
  lsched *ls = check_sched(L, 1, fname);
  int x = check_handle(L, 1, 2, MT_LOOP, fname, "loop");
  int y = check_handle(L, 1, 3, MT_LOOP, fname, "loop");
  stof_factor fx = check_factor(L, 1, 4, 3, fname, 1), fy = check_factor(L, 1, 5, 4, fname, 2);
  int out[4];
  stof_status st = stof_sched_tile(ls->s, x, y, fx, fy, out);
  if (st) return raise_core(L, ls, st);
  for (int i = 0; i < 4; i++) push_handle(L, 1, MT_LOOP, out[i]);
  return 4;
}

static int m_bind(lua_State *L) {
  const char *fname = "bind";
  lsched *ls = check_sched(L, 1, fname);
  int loop = check_handle(L, 1, 2, MT_LOOP, fname, "loop");
  if (lua_type(L, 3) != LUA_TSTRING) return method_typeerror(L, 3, fname, "thread tag string");
  stof_status st = stof_sched_bind(ls->s, loop, lua_tostring(L, 3));
  if (st) return raise_core(L, ls, st);
  return 0;
}

static int m_tensorize(lua_State *L) {
  const char *fname = "tensorize";
  lsched *ls = check_sched(L, 1, fname);
  int loop = check_handle(L, 1, 2, MT_LOOP, fname, "loop");
  if (lua_type(L, 3) != LUA_TSTRING) return method_typeerror(L, 3, fname, "intrinsic name string");
  stof_status st = stof_sched_tensorize(ls->s, loop, lua_tostring(L, 3));
  if (st) return raise_core(L, ls, st);
  return 0;
}

/* vectorize / unroll / parallel: upvalue 1 says which. */
static int m_mark(lua_State *L) {
  int which = (int)lua_tointeger(L, lua_upvalueindex(1));
  static const char *const names[] = {"vectorize", "unroll", "parallel"};
  const char *fname = names[which];
  lsched *ls = check_sched(L, 1, fname);
  int loop = check_handle(L, 1, 2, MT_LOOP, fname, "loop");
  stof_status st = which == 0 ? stof_sched_vectorize(ls->s, loop)
                 : which == 1 ? stof_sched_unroll(ls->s, loop)
                              : stof_sched_parallel(ls->s, loop);
  if (st) return raise_core(L, ls, st);
  return 0;
}

static int m_annotate(lua_State *L) {
  const char *fname = "annotate";
  lsched *ls = check_sched(L, 1, fname);
  lua_settop(L, 4);
  if (lua_type(L, 3) != LUA_TSTRING) return method_typeerror(L, 3, fname, "key string");
  int t = lua_type(L, 4);
  if (t != LUA_TSTRING && t != LUA_TNUMBER && t != LUA_TBOOLEAN)
    return method_typeerror(L, 4, fname, "string, number or boolean value");
  const char *value = luaL_tolstring(L, 4, NULL);
  stof_status st;
  if (luaL_testudata(L, 2, MT_BLOCK))
    st = stof_sched_annotate_block(ls->s, check_handle(L, 1, 2, MT_BLOCK, fname, "block"),
                                   lua_tostring(L, 3), value);
  else
    st = stof_sched_annotate_loop(ls->s, check_handle(L, 1, 2, MT_LOOP, fname, "loop or block"),
                                  lua_tostring(L, 3), value);
  if (st) return raise_core(L, ls, st);
  return 0;
}

static int opt_decision(lua_State *L, int idx, const char *fname, int def) {
  if (lua_isnoneornil(L, idx)) return def;
  lua_Integer d = slua_check_integer(L, idx, fname, "decision");
  if (d < -1 || d > 1 << 20) return slua_argerror(L, idx - 1, fname, "decision %I out of range", d);
  return (int)d;
}

static int m_knob(lua_State *L) {
  const char *fname = "knob";
  lsched *ls = check_sched(L, 1, fname);
  if (lua_type(L, 2) != LUA_TSTRING) return method_typeerror(L, 2, fname, "knob name");
  int decision = opt_decision(L, 4, fname, 0);
  int n;
  int64_t *cand = check_ints(L, 3, fname, "candidate", &n);
  int k;
  stof_status st = stof_sched_knob(ls->s, lua_tostring(L, 2), n, cand, decision, &k);
  if (st) return raise_core(L, ls, st);
  push_handle(L, 1, MT_KNOB, k);
  return 1;
}

static int m_sample_categorical(lua_State *L) {
  const char *fname = "sample_categorical";
  lsched *ls = check_sched(L, 1, fname);
  if (lua_type(L, 2) != LUA_TSTRING) return method_typeerror(L, 2, fname, "knob name");
  int decision = opt_decision(L, 5, fname, -1);
  int n;
  int64_t *cand = check_ints(L, 3, fname, "candidate", &n);
  if (!lua_istable(L, 4)) return method_typeerror(L, 4, fname, "table of probabilities");
  if ((int)lua_rawlen(L, 4) != n)
    return slua_argerror(L, 3, fname, "%d probabilities for %d candidates", (int)lua_rawlen(L, 4), n);
  double *probs = slua_scratch(L, sizeof *probs * (size_t)(n ? n : 1));
  for (int i = 0; i < n; i++) {
    lua_rawgeti(L, 4, i + 1);
    if (lua_type(L, -1) != LUA_TNUMBER)
      return slua_argerror(L, 3, fname, "probability %d must be a number, got %s", i + 1,
                           slua_typename(L, -1));
    probs[i] = (double)lua_tonumber(L, -1);
    lua_pop(L, 1);
  }
  int k;
  stof_status st = stof_sched_sample_categorical(ls->s, lua_tostring(L, 2), n, cand, probs, decision, &k);
  if (st) return raise_core(L, ls, st);
  push_handle(L, 1, MT_KNOB, k);
  return 1;
}

/* s:sample_perfect_tile(loop, n, max_innermost[, {factors}[, {names}]]) -> n knobs. The
 * factors impose the decisions and the names the knobs' names (traces pass both). */
static int m_sample_perfect_tile(lua_State *L) {
  const char *fname = "sample_perfect_tile";
  lsched *ls = check_sched(L, 1, fname);
  lua_settop(L, 6); /* scratch memory goes above the arguments */
  int l = check_handle(L, 1, 2, MT_LOOP, fname, "loop");
  lua_Integer n = slua_check_integer(L, 3, fname, "n");
  lua_Integer m = lua_isnoneornil(L, 4) ? 0 : slua_check_integer(L, 4, fname, "max_innermost");
  int nn = n < -1 || n > 1 << 20 ? -1 : (int)n;
  int mm = m < -1 || m > INT32_MAX ? -1 : (int)m;
  int64_t *dec = NULL;
  const char **names = NULL;
  int nd;
  if (!lua_isnoneornil(L, 5)) {
    dec = check_ints(L, 5, fname, "factor", &nd);
    if (nd != nn) return slua_argerror(L, 4, fname, "%d factors for n = %d", nd, nn);
  }
  if (!lua_isnoneornil(L, 6)) {
    if (!lua_istable(L, 6)) return method_typeerror(L, 6, fname, "table of knob names");
    if ((lua_Integer)lua_rawlen(L, 6) != n || nn < 1 || nn > STOF_SCHED_MAX_LOOPS)
      return slua_argerror(L, 5, fname, "%d names for n = %d", (int)lua_rawlen(L, 6), nn);
    names = slua_scratch(L, sizeof *names * (size_t)nn);
    for (int i = 0; i < nn; i++) {
      lua_rawgeti(L, 6, i + 1);
      if (lua_type(L, -1) != LUA_TSTRING)
        return slua_argerror(L, 5, fname, "name %d must be a string, got %s", i + 1, slua_typename(L, -1));
      names[i] = lua_tostring(L, -1);
      lua_pop(L, 1); /* the table keeps the string */
    }
  }
  int knobs[STOF_SCHED_MAX_LOOPS];
  stof_status st = stof_sched_sample_perfect_tile(ls->s, l, nn, mm, dec, names, knobs);
  if (st) return raise_core(L, ls, st);
  luaL_checkstack(L, nn + 2, fname);
  for (int i = 0; i < nn; i++) push_handle(L, 1, MT_KNOB, knobs[i]);
  return nn;
}

/* s:sample_compute_location(block[, decision[, name]]) -> knob. */
static int m_sample_compute_location(lua_State *L) {
  const char *fname = "sample_compute_location";
  lsched *ls = check_sched(L, 1, fname);
  int b = check_handle(L, 1, 2, MT_BLOCK, fname, "block");
  int decision = opt_decision(L, 3, fname, -1);
  if (!lua_isnoneornil(L, 4) && lua_type(L, 4) != LUA_TSTRING) return method_typeerror(L, 4, fname, "knob name");
  int k;
  stof_status st = stof_sched_sample_compute_location(ls->s, b, decision, lua_tostring(L, 4), &k);
  if (st) return raise_core(L, ls, st);
  push_handle(L, 1, MT_KNOB, k);
  return 1;
}

/* s:group({A, B, ...}): TE tensors, blocks or op names. */
static int m_group(lua_State *L) {
  const char *fname = "group";
  lsched *ls = check_sched(L, 1, fname);
  if (!lua_istable(L, 2)) return method_typeerror(L, 2, fname, "list of ops (te tensors, blocks or names)");
  lua_Integer n = (lua_Integer)lua_rawlen(L, 2);
  if (n > 4096) return slua_argerror(L, 1, fname, "%I ops, at most 4096", n);
  const stof_op **ops = slua_scratch(L, sizeof *ops * (size_t)(n ? n : 1));
  for (int i = 0; i < (int)n; i++) {
    lua_rawgeti(L, 2, i + 1);
    slua_teop *t = slua_test_teop(L, -1);
    if (t) {
      if (t->g != stof_sched_graph(ls->s))
        return slua_error(L, "ValueError", "%s: op %s is from another graph", fname, t->op->name);
      ops[i] = t->op;
    } else if (luaL_testudata(L, -1, MT_BLOCK)) {
      ops[i] = stof_sched_block_op(ls->s, check_handle(L, 1, lua_gettop(L), MT_BLOCK, fname, "block"));
    } else if (lua_type(L, -1) == LUA_TSTRING) {
      const char *name = lua_tostring(L, -1);
      int found = -1, count = 0;
      for (int b = 0; b < stof_sched_nblock(ls->s); b++)
        if (strcmp(stof_sched_block_name(ls->s, b), name) == 0) found = b, count++;
      if (count != 1) { /* get_block explains (and records nothing when it fails) */
        int b;
        stof_status st = stof_sched_get_block(ls->s, name, &b);
        return raise_core(L, ls, st ? st : STOF_ERR_INTERNAL);
      }
      ops[i] = stof_sched_block_op(ls->s, found);
    } else {
      return slua_argerror(L, 1, fname, "op %d: te tensor, block or name expected, got %s", i + 1,
                           slua_typename(L, -1));
    }
    lua_pop(L, 1);
  }
  int g;
  stof_status st = stof_sched_group(ls->s, (int)n, ops, &g);
  if (st) return raise_core(L, ls, st);
  lua_pushinteger(L, g);
  return 1;
}

static int m_ungroup(lua_State *L) {
  const char *fname = "ungroup";
  lsched *ls = check_sched(L, 1, fname);
  lua_Integer g = slua_check_integer(L, 2, fname, "group id");
  stof_status st = stof_sched_ungroup(ls->s, g < 0 || g > 1 << 30 ? -1 : (int)g);
  if (st) return raise_core(L, ls, st);
  return 0;
}

/* s:compute_at(b, l) / s:reverse_compute_at(b, l): upvalue 1 is 1 for reverse. */
static int m_compute_at(lua_State *L) {
  int rev = (int)lua_tointeger(L, lua_upvalueindex(1));
  const char *fname = rev ? "reverse_compute_at" : "compute_at";
  lsched *ls = check_sched(L, 1, fname);
  int b = check_handle(L, 1, 2, MT_BLOCK, fname, "block");
  if (!rev && luaL_testudata(L, 3, MT_KNOB)) { /* a location knob (sample_compute_location) */
    stof_status st = stof_sched_compute_at_knob(ls->s, b, check_handle(L, 1, 3, MT_KNOB, fname, "knob"));
    if (st) return raise_core(L, ls, st);
    return 0;
  }
  int l = check_handle(L, 1, 3, MT_LOOP, fname, rev ? "loop" : "loop or location knob");
  stof_status st = rev ? stof_sched_reverse_compute_at(ls->s, b, l) : stof_sched_compute_at(ls->s, b, l);
  if (st) return raise_core(L, ls, st);
  return 0;
}

/* s:compute_inline(b) / s:reverse_compute_inline(b): upvalue 1 is 1 for reverse. */
static int m_compute_inline(lua_State *L) {
  int rev = (int)lua_tointeger(L, lua_upvalueindex(1));
  const char *fname = rev ? "reverse_compute_inline" : "compute_inline";
  lsched *ls = check_sched(L, 1, fname);
  int b = check_handle(L, 1, 2, MT_BLOCK, fname, "block");
  stof_status st = rev ? stof_sched_reverse_compute_inline(ls->s, b) : stof_sched_compute_inline(ls->s, b);
  if (st) return raise_core(L, ls, st);
  return 0;
}

/* s:cache_read(b, input_index, scope) -> block (input_index 0-based, as in TVM) */
static int m_cache_read(lua_State *L) {
  const char *fname = "cache_read";
  lsched *ls = check_sched(L, 1, fname);
  int b = check_handle(L, 1, 2, MT_BLOCK, fname, "block");
  lua_Integer i = slua_check_integer(L, 3, fname, "input index");
  if (lua_type(L, 4) != LUA_TSTRING) return method_typeerror(L, 4, fname, "scope string");
  int c;
  stof_status st = stof_sched_cache_read(ls->s, b, i < -1 || i > 1 << 20 ? -1 : (int)i, lua_tostring(L, 4), &c);
  if (st) return raise_core(L, ls, st);
  push_handle(L, 1, MT_BLOCK, c);
  return 1;
}

/* s:cache_write(b, scope) -> block (the copy back into b's buffer) */
static int m_cache_write(lua_State *L) {
  const char *fname = "cache_write";
  lsched *ls = check_sched(L, 1, fname);
  int b = check_handle(L, 1, 2, MT_BLOCK, fname, "block");
  if (lua_type(L, 3) != LUA_TSTRING) return method_typeerror(L, 3, fname, "scope string");
  int c;
  stof_status st = stof_sched_cache_write(ls->s, b, lua_tostring(L, 3), &c);
  if (st) return raise_core(L, ls, st);
  push_handle(L, 1, MT_BLOCK, c);
  return 1;
}

/* s:rfactor(l, factor_axis) -> block (the partial reduction) */
static int m_rfactor(lua_State *L) {
  const char *fname = "rfactor";
  lsched *ls = check_sched(L, 1, fname);
  int l = check_handle(L, 1, 2, MT_LOOP, fname, "loop");
  lua_Integer f = slua_check_integer(L, 3, fname, "factor_axis");
  int rf;
  stof_status st = stof_sched_rfactor(ls->s, l, f < -1 || f > 1 << 20 ? -1 : (int)f, &rf);
  if (st) return raise_core(L, ls, st);
  push_handle(L, 1, MT_BLOCK, rf);
  return 1;
}

/* s:trace() / s:trace_json(): upvalue 1 is 1 for JSON. */
static int m_trace(lua_State *L) {
  int json = (int)lua_tointeger(L, lua_upvalueindex(1));
  lsched *ls = check_sched(L, 1, json ? "trace_json" : "trace");
  stof_ctx *ctx = ls->lc->ctx;
  stof_trace *t = NULL;
  char *text = NULL;
  stof_status st = stof_sched_trace(ls->s, &t);
  if (!st) st = json ? stof_trace_to_json(t, &text) : stof_trace_to_lua(t, &text);
  stof_trace_free(t);
  if (st) return raise_core(L, ls, st);
  return push_owned(L, ctx, text);
}

static int m_print_loop_nest(lua_State *L) {
  lsched *ls = check_sched(L, 1, "print_loop_nest");
  char *text = NULL;
  stof_status st = stof_sched_print_loop_nest(ls->s, &text);
  if (st) return raise_core(L, ls, st);
  size_t n = strlen(text);
  while (n > 0 && text[n - 1] == '\n') n--;
  lua_pushlstring(L, text, n);
  stof_ctx_dealloc(ls->lc->ctx, text, strlen(text) + 1);
  return 1;
}

static int m_clone(lua_State *L) {
  lsched *ls = check_sched(L, 1, "clone");
  check_owned(L, ls, "clone", "cloned");
  lua_getiuservalue(L, 1, 1);
  lsched *c = new_sched(L, -1);
  stof_status st = stof_sched_clone(ls->s, &c->s);
  if (st) return raise_core(L, ls, st);
  return 1;
}

/* s:replay(json): applies a JSON trace to s. */
static int m_replay(lua_State *L) {
  const char *fname = "replay";
  lsched *ls = check_sched(L, 1, fname);
  if (lua_type(L, 2) != LUA_TSTRING) return method_typeerror(L, 2, fname, "JSON trace string");
  stof_trace *t = NULL;
  stof_status st = stof_trace_from_json(ls->lc->ctx, lua_tostring(L, 2), &t);
  if (!st) st = stof_sched_replay(t, ls->s);
  stof_trace_free(t);
  if (st) return raise_core(L, ls, st);
  lua_settop(L, 1);
  return 1;
}

/* s:with_decisions({name = index, ...}): a fresh schedule of the same outputs rebuilt from
 * s's trace with those decisions. */
static int m_with_decisions(lua_State *L) {
  const char *fname = "with_decisions";
  lsched *ls = check_sched(L, 1, fname);
  check_owned(L, ls, fname, "copied");
  if (!lua_istable(L, 2)) return method_typeerror(L, 2, fname, "table of decisions (knob name -> index)");
  lua_settop(L, 2);
  lua_getiuservalue(L, 1, 1);
  lsched *c = new_sched(L, 3);
  stof_trace *t = NULL;
  stof_status st = stof_sched_trace(ls->s, &t);
  lua_pushnil(L);
  while (!st && lua_next(L, 2)) {
    int isnum = 0;
    lua_Integer d = lua_tointegerx(L, -1, &isnum);
    if (lua_type(L, -2) != LUA_TSTRING || !isnum) {
      stof_trace_free(t);
      return slua_argerror(L, 1, fname, "decisions map knob names to integers");
    }
    st = stof_trace_set_decision(t, lua_tostring(L, -2), d < 0 || d > 1 << 20 ? -1 : (int)d);
    lua_pop(L, 1);
  }
  if (!st) st = stof_sched_fresh(ls->s, &c->s);
  if (!st) st = stof_sched_replay(t, c->s);
  stof_trace_free(t);
  if (st) return raise_core(L, ls, st);
  lua_settop(L, 4);
  return 1;
}

static int sched_tostring(lua_State *L) {
  lsched *ls = slua_checkudata(L, 1, MT_SCHED, "Schedule:__tostring");
  if (!ls->s) return lua_pushliteral(L, "stof.Schedule (closed)"), 1;
  return m_print_loop_nest(L);
}

/* ---------------------------------------------------------------- handles */

static int loop_index(lua_State *L) {
  lhandle *h = slua_checkudata(L, 1, MT_LOOP, "Loop:__index");
  stof_sched *s = handle_sched(L, 1);
  stof_loop_info info;
  if (stof_sched_loop_info(s, h->id, &info)) return 0;
  const char *k = lua_tostring(L, 2);
  if (lua_type(L, 2) != LUA_TSTRING) return 0;
  if (!strcmp(k, "name")) lua_pushstring(L, info.name);
  else if (!strcmp(k, "extent")) lua_pushinteger(L, (lua_Integer)info.extent);
  else if (!strcmp(k, "kind")) lua_pushstring(L, stof_iter_kind_name(info.iter));
  else if (!strcmp(k, "derive")) lua_pushstring(L, stof_derive_kind_name(info.derive));
  else if (!strcmp(k, "annotation"))
    lua_pushstring(L, info.ann == STOF_ANN_THREAD ? stof_thread_tag_name(info.thread) : stof_ann_kind_name(info.ann));
  else if (!strcmp(k, "alive")) lua_pushboolean(L, info.alive);
  else return 0;
  return 1;
}

static int loop_tostring(lua_State *L) {
  lhandle *h = slua_checkudata(L, 1, MT_LOOP, "Loop:__tostring");
  stof_loop_info info;
  if (stof_sched_loop_info(handle_sched(L, 1), h->id, &info)) return 0;
  lua_pushstring(L, info.name);
  return 1;
}

static int block_index(lua_State *L) {
  lhandle *h = slua_checkudata(L, 1, MT_BLOCK, "Block:__index");
  stof_sched *s = handle_sched(L, 1);
  const char *name = stof_sched_block_name(s, h->id);
  const char *k = lua_tostring(L, 2);
  if (lua_type(L, 2) != LUA_TSTRING) return 0;
  if (!name || !k) return 0;
  if (!strcmp(k, "name")) lua_pushstring(L, name);
  else if (!strcmp(k, "alive")) lua_pushboolean(L, stof_sched_block_alive(s, h->id));
  else return 0;
  return 1;
}

static int block_tostring(lua_State *L) {
  lhandle *h = slua_checkudata(L, 1, MT_BLOCK, "Block:__tostring");
  const char *name = stof_sched_block_name(handle_sched(L, 1), h->id);
  lua_pushfstring(L, "block %s", name ? name : "?");
  return 1;
}

static int knob_index(lua_State *L) {
  lhandle *h = slua_checkudata(L, 1, MT_KNOB, "Knob:__index");
  stof_sched *s = handle_sched(L, 1);
  const char *name;
  int ncand, decision;
  int64_t value;
  if (stof_sched_knob_info(s, h->id, &name, &ncand, &decision, &value)) return 0;
  const char *k = lua_tostring(L, 2);
  if (lua_type(L, 2) != LUA_TSTRING) return 0;
  if (!strcmp(k, "name")) lua_pushstring(L, name);
  else if (!strcmp(k, "value")) lua_pushinteger(L, (lua_Integer)value);
  else if (!strcmp(k, "decision")) lua_pushinteger(L, decision);
  else if (!strcmp(k, "candidates")) {
    lua_createtable(L, ncand, 0);
    for (int i = 0; i < ncand; i++) {
      int64_t c = 0;
      stof_sched_knob_candidate(s, h->id, i, &c);
      lua_pushinteger(L, (lua_Integer)c);
      lua_rawseti(L, -2, i + 1);
    }
  } else return 0;
  return 1;
}

static int knob_tostring(lua_State *L) {
  lhandle *h = slua_checkudata(L, 1, MT_KNOB, "Knob:__tostring");
  const char *name;
  int64_t value;
  if (stof_sched_knob_info(handle_sched(L, 1), h->id, &name, NULL, NULL, &value)) return 0;
  lua_pushfstring(L, "knob %s = %I", name, (lua_Integer)value);
  return 1;
}

/* Handles are equal when they name the same object of the same schedule. */
static int handle_eq(lua_State *L) {
  lhandle *a = lua_touserdata(L, 1), *b = lua_touserdata(L, 2);
  int same_mt = lua_getmetatable(L, 1) && lua_getmetatable(L, 2) && lua_rawequal(L, -1, -2);
  lua_settop(L, 2);
  if (!a || !b || !same_mt || a->id != b->id) {
    lua_pushboolean(L, 0);
    return 1;
  }
  lua_getiuservalue(L, 1, 1);
  lua_getiuservalue(L, 2, 1);
  lua_pushboolean(L, lua_rawequal(L, -1, -2));
  return 1;
}

/* ---------------------------------------------------------------- build and call */

static int func_gc(lua_State *L) {
  lfunc *lf = slua_checkudata(L, 1, MT_FUNC, "Func:close");
  if (lf->f) {
    stof_func_free(lf->f);
    lf->f = NULL;
  }
  if (lf->lc) {
    slua_ctx_unref(lf->lc);
    lf->lc = NULL;
  }
  return 0;
}

static lfunc *check_func(lua_State *L, int idx, const char *fname) {
  lfunc *lf = slua_checkudata(L, idx, MT_FUNC, fname);
  if (!lf->f) slua_error(L, "ValueError", "%s: the function is closed", fname);
  return lf;
}

/* The arguments of stof.build and stof.build_source: the list of te tensors at 2 (into
 * scratch memory) and the target of the options at 3 ("c" when absent). */
static const stof_op **build_args(lua_State *L, lsched *ls, const char *fname, int *nargs,
                                  const char **target) {
  check_owned(L, ls, fname, "built here");
  if (!lua_istable(L, 2)) {
    slua_typeerror(L, 2, fname, "list of arguments (te tensors)");
    return NULL;
  }
  *target = "c";
  if (!lua_isnoneornil(L, 3)) {
    if (!lua_istable(L, 3)) {
      slua_typeerror(L, 3, fname, "options table");
      return NULL;
    }
    static const char *const known[] = {"target", NULL};
    slua_check_keys(L, 3, fname, "option", known);
    lua_getfield(L, 3, "target");
    if (!lua_isnil(L, -1)) {
      if (lua_type(L, -1) != LUA_TSTRING) {
        slua_argerror(L, 3, fname, "target must be a string, got %s", slua_typename(L, -1));
        return NULL;
      }
      *target = lua_tostring(L, -1); /* stays on the stack, so the string stays alive */
    }
  }
  lua_Integer n = (lua_Integer)lua_rawlen(L, 2);
  if (n > 256) {
    slua_argerror(L, 2, fname, "%I arguments, at most 256", n);
    return NULL;
  }
  const stof_op **args = slua_scratch(L, sizeof *args * (size_t)(n ? n : 1));
  for (int i = 0; i < (int)n; i++) {
    lua_rawgeti(L, 2, i + 1);
    slua_teop *t = slua_test_teop(L, -1);
    if (!t) {
      slua_argerror(L, 2, fname, "argument %d: te tensor expected, got %s", i + 1, slua_typename(L, -1));
      return NULL;
    }
    if (t->g != stof_sched_graph(ls->s)) {
      slua_error(L, "ValueError", "%s: argument %s is from another graph", fname, t->op->name);
      return NULL;
    }
    args[i] = t->op;
    lua_pop(L, 1);
  }
  *nargs = (int)n;
  return args;
}

/* stof.build(s, {A, B, C}[, {target = "c" | "cuda"}]) */
static int l_build(lua_State *L) {
  const char *fname = "stof.build";
  lsched *ls = check_sched(L, 1, fname);
  const char *target;
  int n;
  const stof_op **args = build_args(L, ls, fname, &n, &target);
  lfunc *lf = lua_newuserdatauv(L, sizeof *lf, 0);
  lf->f = NULL;
  lf->lc = NULL;
  luaL_setmetatable(L, MT_FUNC);
  lf->lc = slua_ctx_ref(ls->lc);
  stof_status st = stof_build(ls->s, n, args, target, &lf->f);
  if (st) return raise_core(L, ls, st);
  return 1;
}

/* stof.build_source(s, {A, B, C}[, {target = "c" | "cuda"}]): the generated source, not
 * compiled. */
static int l_build_source(lua_State *L) {
  const char *fname = "stof.build_source";
  lsched *ls = check_sched(L, 1, fname);
  const char *target;
  int n;
  const stof_op **args = build_args(L, ls, fname, &n, &target);
  char *src = NULL;
  stof_status st = stof_build_source(ls->s, n, args, target, &src);
  if (st) return raise_core(L, ls, st);
  lua_pushstring(L, src);
  stof_ctx_dealloc(ls->lc->ctx, src, strlen(src) + 1);
  return 1;
}

static int func_call(lua_State *L) {
  const char *fname = "stof.Func";
  lfunc *lf = check_func(L, 1, fname);
  int n = lua_gettop(L) - 1, want = stof_func_nargs(lf->f);
  if (n != want)
    return slua_error(L, "ValueError", "%s: %d tensors given, %d expected", fname, n, want);
  stof_tensor **ts = slua_scratch(L, sizeof *ts * (size_t)(n ? n : 1));
  for (int i = 0; i < n; i++) ts[i] = slua_check_tensor(L, i + 2, fname);
  stof_status st = stof_func_call(lf->f, n, ts);
  if (st) return slua_raise(L, lf->lc->ctx, st, NULL);
  return 0;
}

/* Reads integer option key of the options table at idx (def when absent). */
static int opt_count(lua_State *L, int idx, const char *fname, const char *key, int def) {
  lua_getfield(L, idx, key);
  int v = def;
  if (!lua_isnil(L, -1)) {
    char got[32];
    if (!lua_isinteger(L, -1))
      return slua_argerror(L, idx - 1, fname, "%s must be an integer, got %s", key, slua_intname(L, -1, got, sizeof got));
    lua_Integer i = lua_tointeger(L, -1);
    v = i < -1000000000 ? -1000000000 : i > 1000000000 ? 1000000000 : (int)i; /* the core checks it */
  }
  lua_pop(L, 1);
  return v;
}

/* f:time(a, b, c[, {reps = 50, warmup = 5}]): the mean milliseconds of one call of a
 * "cuda" build, over reps launches between CUDA events (stof_func_time). */
static int func_time(lua_State *L) {
  const char *fname = "Func:time";
  lfunc *lf = check_func(L, 1, fname);
  int top = lua_gettop(L), reps = 50, warmup = 5;
  if (top >= 2 && lua_istable(L, top)) {
    reps = opt_count(L, top, fname, "reps", reps);
    warmup = opt_count(L, top, fname, "warmup", warmup);
    top--;
  }
  int n = top - 1, want = stof_func_nargs(lf->f);
  if (n != want)
    return slua_error(L, "ValueError", "%s: %d tensors given, %d expected", fname, n, want);
  stof_tensor **ts = slua_scratch(L, sizeof *ts * (size_t)(n ? n : 1));
  for (int i = 0; i < n; i++) ts[i] = slua_check_tensor(L, i + 2, fname);
  double ms = 0;
  stof_status st = stof_func_time(lf->f, n, ts, reps, warmup, &ms);
  if (st) return slua_raise(L, lf->lc->ctx, st, NULL);
  lua_pushnumber(L, ms);
  return 1;
}

static int func_source(lua_State *L) {
  lfunc *lf = check_func(L, 1, "Func:source");
  lua_pushstring(L, stof_func_source(lf->f));
  return 1;
}

static int func_library(lua_State *L) {
  lfunc *lf = check_func(L, 1, "Func:library");
  lua_pushstring(L, stof_func_library(lf->f));
  return 1;
}

static int func_tostring(lua_State *L) {
  lfunc *lf = slua_checkudata(L, 1, MT_FUNC, "Func:__tostring");
  lua_pushfstring(L, "stof.Func(%d arguments)", lf->f ? stof_func_nargs(lf->f) : 0);
  return 1;
}

/* s:auto(target[, {threads = n, vec = n}]): the default schedule of a segment
 * (stof_sched_auto) on a fresh schedule. */
static int m_auto(lua_State *L) {
  const char *fname = "auto";
  lsched *ls = check_sched(L, 1, fname);
  if (lua_type(L, 2) != LUA_TSTRING) return method_typeerror(L, 2, fname, "target string");
  stof_sched_auto_opts o = {0, 0};
  if (!lua_isnoneornil(L, 3)) {
    if (!lua_istable(L, 3)) return method_typeerror(L, 3, fname, "options table");
    o.threads = opt_count(L, 3, fname, "threads", 0);
    o.vec = opt_count(L, 3, fname, "vec", 0);
  }
  stof_status st = stof_sched_auto(ls->s, lua_tostring(L, 2), &o);
  if (st) return raise_core(L, ls, st);
  return 0;
}

/* ---------------------------------------------------------------- registration */

static void new_handle_mt(lua_State *L, const char *mt, lua_CFunction index, lua_CFunction tostring) {
  if (luaL_newmetatable(L, mt)) {
    lua_pushcfunction(L, index);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, tostring);
    lua_setfield(L, -2, "__tostring");
    lua_pushcfunction(L, handle_eq);
    lua_setfield(L, -2, "__eq");
  }
  lua_pop(L, 1);
}

void slua_open_schedule(lua_State *L, int idx) {
  idx = lua_absindex(L, idx);
  if (luaL_newmetatable(L, MT_SCHED)) {
    static const luaL_Reg methods[] = {
        {"get_block", m_get_block},
        {"get_loops", m_get_loops},
        {"split", m_split},
        {"fuse", m_fuse},
        {"reorder", m_reorder},
        {"tile", m_tile},
        {"bind", m_bind},
        {"tensorize", m_tensorize},
        {"annotate", m_annotate},
        {"knob", m_knob},
        {"sample_categorical", m_sample_categorical},
        {"sample_perfect_tile", m_sample_perfect_tile},
        {"sample_compute_location", m_sample_compute_location},
        {"cache_read", m_cache_read},
        {"cache_write", m_cache_write},
        {"rfactor", m_rfactor},
        {"group", m_group},
        {"ungroup", m_ungroup},
        {"print_loop_nest", m_print_loop_nest},
        {"clone", m_clone},
        {"replay", m_replay},
        {"with_decisions", m_with_decisions},
        {"auto", m_auto},
        {NULL, NULL},
    };
    luaL_newlib(L, methods);
    static const char *const marks[] = {"vectorize", "unroll", "parallel"};
    for (int i = 0; i < 3; i++) {
      lua_pushinteger(L, i);
      lua_pushcclosure(L, m_mark, 1);
      lua_setfield(L, -2, marks[i]);
    }
    static const char *const moves[] = {"compute_at", "reverse_compute_at"};
    static const char *const inlines[] = {"compute_inline", "reverse_compute_inline"};
    for (int i = 0; i < 2; i++) {
      lua_pushinteger(L, i);
      lua_pushcclosure(L, m_compute_at, 1);
      lua_setfield(L, -2, moves[i]);
      lua_pushinteger(L, i);
      lua_pushcclosure(L, m_compute_inline, 1);
      lua_setfield(L, -2, inlines[i]);
    }
    lua_pushinteger(L, 0);
    lua_pushcclosure(L, m_trace, 1);
    lua_setfield(L, -2, "trace");
    lua_pushinteger(L, 1);
    lua_pushcclosure(L, m_trace, 1);
    lua_setfield(L, -2, "trace_json");
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, sched_gc);
    lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, sched_gc);
    lua_setfield(L, -2, "__close");
    lua_pushcfunction(L, sched_tostring);
    lua_setfield(L, -2, "__tostring");
  }
  lua_pop(L, 1);
  new_handle_mt(L, MT_BLOCK, block_index, block_tostring);
  new_handle_mt(L, MT_LOOP, loop_index, loop_tostring);
  new_handle_mt(L, MT_KNOB, knob_index, knob_tostring);
  if (luaL_newmetatable(L, MT_FUNC)) {
    lua_createtable(L, 0, 3);
    lua_pushcfunction(L, func_source);
    lua_setfield(L, -2, "source");
    lua_pushcfunction(L, func_library);
    lua_setfield(L, -2, "library");
    lua_pushcfunction(L, func_time);
    lua_setfield(L, -2, "time");
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, func_call);
    lua_setfield(L, -2, "__call");
    lua_pushcfunction(L, func_gc);
    lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, func_gc);
    lua_setfield(L, -2, "__close");
    lua_pushcfunction(L, func_tostring);
    lua_setfield(L, -2, "__tostring");
  }
  lua_pop(L, 1);
  lua_pushcfunction(L, l_schedule);
  lua_setfield(L, idx, "schedule");
  lua_pushcfunction(L, l_build);
  lua_setfield(L, idx, "build");
  lua_pushcfunction(L, l_build_source);
  lua_setfield(L, idx, "build_source");
  lua_pushinteger(L, STOF_INFER);
  lua_setfield(L, idx, "INFER");
}
