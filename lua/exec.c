/*
 * stof.plan: the runtime (exec/) from Lua. A Plan keeps its graph alive (user value 1) and
 * every tensor bound to it (user value 2, placeholder id -> tensor), so the storage a plan
 * borrows outlives it. Plans built elsewhere (stof.tune, lua/search.c) are wrapped by the
 * same constructor (slua_plan_new) and keep their bound tensors the same way.
 *
 *   local p = stof.plan(outputs, {target = "cuda", graph = true, verbose = true})
 *   p:bind({[X] = x, [W] = w})         -- or p:bind(X, x)
 *   local y = p:run({[X] = x2})        -- binds, runs, returns the outputs (CPU tensors)
 *   print(p:describe())                -- the segments
 */
#include <string.h>

#include "lua_int.h"
#include <stof/exec.h>

#define SLUA_PLAN_RT "stof.Plan"

typedef struct slua_plan {
  stof_plan *p;
  slua_ctx *lc;
} slua_plan;

static slua_plan *check_plan(lua_State *L, int idx, const char *fname) {
  slua_plan *h = slua_checkudata(L, idx, SLUA_PLAN_RT, fname);
  if (!h->p) slua_error(L, "ValueError", "%s: the plan is closed", fname);
  return h;
}

static int plan_gc(lua_State *L) {
  slua_plan *h = slua_checkudata(L, 1, SLUA_PLAN_RT, "Plan:close");
  if (h->p) {
    stof_plan_free(h->p);
    h->p = NULL;
  }
  if (h->lc) {
    slua_ctx_unref(h->lc);
    h->lc = NULL;
  }
  return 0;
}

/* stof.plan(outputs[, opts]) */
static int l_plan(lua_State *L) {
  const char *fname = "stof.plan";
  lua_settop(L, 2);
  int nout;
  stof_graph *g;
  const stof_op **outs = slua_check_outputs(L, 1, fname, &nout, &g);
  stof_plan_opts o = {0};
  if (!lua_isnil(L, 2)) {
    if (!lua_istable(L, 2)) return slua_typeerror(L, 2, fname, "options table");
    static const char *const known[] = {"target", "graph", "exact_gelu", "vendor_gemm", "knobs",
                                        "gemm_tune", "verbose", "scheme", NULL};
    slua_check_keys(L, 2, fname, "option", known);
    if (lua_getfield(L, 2, "target") != LUA_TNIL) {
      if (lua_type(L, -1) != LUA_TSTRING) return slua_argerror(L, 2, fname, "target must be \"c\" or \"cuda\"");
      o.target = lua_tostring(L, -1); /* stays on the stack while the plan is built */
    }
    lua_getfield(L, 2, "graph");
    if (!lua_isnil(L, -1)) o.no_graph = !lua_toboolean(L, -1);
    lua_pop(L, 1);
    lua_getfield(L, 2, "exact_gelu");
    o.exact_gelu = lua_toboolean(L, -1);
    lua_pop(L, 1);
    lua_getfield(L, 2, "vendor_gemm");
    if (!lua_isnil(L, -1)) o.no_vendor_gemm = !lua_toboolean(L, -1);
    lua_pop(L, 1);
    if (lua_getfield(L, 2, "knobs") != LUA_TNIL) {
      if (lua_type(L, -1) != LUA_TSTRING)
        return slua_argerror(L, 2, fname, "knobs must be a string \"NAME.KNOB=VALUE,...\"");
      o.knobs = lua_tostring(L, -1); /* stays on the stack while the plan is built */
    }
    if (lua_getfield(L, 2, "scheme") != LUA_TNIL) {
      if (lua_type(L, -1) != LUA_TSTRING)
        return slua_argerror(L, 2, fname, "scheme must be a string of segment numbers, one per op (Plan.scheme)");
      o.scheme = lua_tostring(L, -1); /* stays on the stack while the plan is built */
    }
    lua_getfield(L, 2, "gemm_tune");
    if (!lua_isnil(L, -1)) o.no_gemm_tune = !lua_toboolean(L, -1);
    lua_pop(L, 1);
    lua_getfield(L, 2, "verbose");
    o.verbose = lua_toboolean(L, -1);
    lua_pop(L, 1);
  }
  /* the graph handle of the first output */
  if (slua_test_teop(L, 1)) lua_pushvalue(L, 1);
  else lua_rawgeti(L, 1, 1);
  lua_getiuservalue(L, -1, 1);
  stof_plan **slot = slua_plan_new(L, -1);
  stof_status st = stof_plan_new(g, nout, outs, &o, slot);
  if (st) return slua_raise(L, stof_graph_ctx(g), st, fname);
  return 1;
}

stof_plan **slua_plan_new(lua_State *L, int gidx) {
  gidx = lua_absindex(L, gidx);
  slua_ctx *lc = slua_state_ctx(L);
  slua_plan *h = lua_newuserdatauv(L, sizeof *h, 2);
  h->p = NULL;
  h->lc = NULL;
  luaL_setmetatable(L, SLUA_PLAN_RT);
  lua_pushvalue(L, gidx);
  lua_setiuservalue(L, -2, 1);
  lua_newtable(L);
  lua_setiuservalue(L, -2, 2);
  h->lc = slua_ctx_ref(lc);
  return &h->p;
}

void slua_plan_keep(lua_State *L, int pidx, const stof_op *ph, int tidx) {
  pidx = lua_absindex(L, pidx);
  tidx = lua_absindex(L, tidx);
  lua_getiuservalue(L, pidx, 2);
  lua_pushvalue(L, tidx);
  lua_rawseti(L, -2, ph->id);
  lua_pop(L, 1);
}

/* Binds placeholder (at pidx) to tensor (at tidx), keeping the tensor alive with the plan. */
static void bind_one(lua_State *L, slua_plan *h, int pidx, int tidx, const char *fname) {
  slua_teop *k = slua_test_teop(L, pidx);
  if (!k) {
    slua_argerror(L, 2, fname, "placeholder expected, got %s", slua_typename(L, pidx));
    return;
  }
  stof_tensor *t = slua_check_tensor(L, tidx, fname);
  stof_status st = stof_plan_bind(h->p, k->op, t);
  if (st) {
    slua_raise(L, h->lc->ctx, st, fname);
    return;
  }
  slua_plan_keep(L, 1, k->op, tidx);
}

/* Binds every placeholder -> tensor pair of the table at idx. */
static void bind_table(lua_State *L, slua_plan *h, int idx, const char *fname) {
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    int top = lua_gettop(L);
    bind_one(L, h, top - 1, top, fname);
    lua_pop(L, 1);
  }
}

/* p:bind(placeholder, tensor) or p:bind({[placeholder] = tensor, ...}) */
static int plan_bind(lua_State *L) {
  const char *fname = "Plan:bind";
  slua_plan *h = check_plan(L, 1, fname);
  if (lua_istable(L, 2) && !slua_test_teop(L, 2)) {
    bind_table(L, h, 2, fname);
  } else {
    bind_one(L, h, 2, 3, fname);
  }
  lua_settop(L, 1);
  return 1;
}

static void push_outputs(lua_State *L, slua_plan *h, const char *fname) {
  int n = stof_plan_noutput(h->p);
  luaL_checkstack(L, n + 2, fname);
  for (int i = 0; i < n; i++) {
    stof_tensor *t;
    stof_status st = stof_plan_output(h->p, i, &t);
    if (st) {
      slua_raise(L, h->lc->ctx, st, fname);
      return;
    }
    slua_tensor *u = slua_new_tensor(L);
    u->t = t;
  }
}

/* p:run([feed]) -> the outputs (CPU tensors) */
static int plan_run(lua_State *L) {
  const char *fname = "Plan:run";
  slua_plan *h = check_plan(L, 1, fname);
  lua_settop(L, 2);
  if (lua_istable(L, 2)) {
    bind_table(L, h, 2, fname);
  } else if (!lua_isnil(L, 2)) {
    return slua_typeerror(L, 2, fname, "feed table (placeholder -> tensor)");
  }
  stof_status st = stof_plan_run(h->p);
  if (st) return slua_raise(L, h->lc->ctx, st, fname);
  int top = lua_gettop(L);
  push_outputs(L, h, fname);
  return lua_gettop(L) - top;
}

/* p:launch(): runs without reading the outputs back (asynchronous on the GPU) */
static int plan_launch(lua_State *L) {
  slua_plan *h = check_plan(L, 1, "Plan:launch");
  stof_status st = stof_plan_run(h->p);
  if (st) return slua_raise(L, h->lc->ctx, st, "Plan:launch");
  return 0;
}

/* p:output(i) -> output i (1-based) as a CPU tensor */
static int plan_output(lua_State *L) {
  const char *fname = "Plan:output";
  slua_plan *h = check_plan(L, 1, fname);
  lua_Integer i = slua_check_integer(L, 2, fname, "index");
  int n = stof_plan_noutput(h->p);
  if (i < 1 || i > n) return slua_error(L, "IndexError", "%s: index %I out of range (the plan has %d outputs)", fname, i, n);
  stof_tensor *t;
  stof_status st = stof_plan_output(h->p, (int)(i - 1), &t);
  if (st) return slua_raise(L, h->lc->ctx, st, fname);
  slua_tensor *u = slua_new_tensor(L);
  u->t = t;
  return 1;
}

/* p:time([reps[, warmup]]) -> median ms per run */
static int plan_time(lua_State *L) {
  const char *fname = "Plan:time";
  slua_plan *h = check_plan(L, 1, fname);
  int reps = lua_isnoneornil(L, 2) ? 20 : (int)slua_check_integer(L, 2, fname, "reps");
  int warmup = lua_isnoneornil(L, 3) ? 3 : (int)slua_check_integer(L, 3, fname, "warmup");
  double ms;
  stof_status st = stof_plan_time(h->p, reps, warmup, &ms);
  if (st) return slua_raise(L, h->lc->ctx, st, fname);
  lua_pushnumber(L, ms);
  return 1;
}

static void push_segment(lua_State *L, const stof_seg_info *s) {
  lua_createtable(L, 0, 7);
  lua_pushstring(L, stof_seg_kind_name(s->kind));
  lua_setfield(L, -2, "kind");
  lua_pushstring(L, s->template_name);
  lua_setfield(L, -2, "template");
  lua_pushinteger(L, s->nop);
  lua_setfield(L, -2, "nop");
  lua_pushstring(L, s->first->name);
  lua_setfield(L, -2, "first");
  lua_pushstring(L, s->last->name);
  lua_setfield(L, -2, "last");
  lua_pushinteger(L, s->shared_with + 1);
  lua_setfield(L, -2, "shared_with");
  lua_pushstring(L, s->detail);
  lua_setfield(L, -2, "detail");
  if (s->nknob) {
    lua_createtable(L, 0, s->nknob);
    for (int k = 0; k < s->nknob; k++) {
      lua_pushinteger(L, (lua_Integer)s->knob_value[k]);
      lua_setfield(L, -2, s->knob_name[k]);
    }
    lua_setfield(L, -2, "knobs");
  }
  if (s->trace) {
    lua_pushstring(L, s->trace);
    lua_setfield(L, -2, "trace");
  }
}

/* p:segments() -> {{kind, template, nop, first, last, shared_with, detail[, knobs][, trace]}, ...} */
static int plan_segments(lua_State *L) {
  slua_plan *h = check_plan(L, 1, "Plan:segments");
  int n = stof_plan_nsegment(h->p);
  lua_createtable(L, n, 0);
  for (int i = 0; i < n; i++) {
    stof_seg_info s;
    stof_plan_segment(h->p, i, &s);
    push_segment(L, &s);
    lua_rawseti(L, -2, i + 1);
  }
  return 1;
}

/* p:time_segments([reps]) -> the segments, each with its ms */
static int plan_time_segments(lua_State *L) {
  const char *fname = "Plan:time_segments";
  slua_plan *h = check_plan(L, 1, fname);
  int reps = lua_isnoneornil(L, 2) ? 10 : (int)slua_check_integer(L, 2, fname, "reps");
  int n = stof_plan_nsegment(h->p);
  double *ms = slua_scratch(L, sizeof *ms * (size_t)(n ? n : 1));
  stof_status st = stof_plan_time_segments(h->p, reps, ms);
  if (st) return slua_raise(L, h->lc->ctx, st, fname);
  lua_createtable(L, n, 0);
  for (int i = 0; i < n; i++) {
    stof_seg_info s;
    stof_plan_segment(h->p, i, &s);
    push_segment(L, &s);
    lua_pushnumber(L, ms[i]);
    lua_setfield(L, -2, "ms");
    lua_rawseti(L, -2, i + 1);
  }
  return 1;
}

/* p:knobs() -> {["<segment>.<knob>"] = decision, ...}: every decision the plan took (for
 * the segments that own their implementation; 0-based segment numbers, as describe shows
 * them), the knobs of a tuning record (stof.db) */
static int plan_knobs(lua_State *L) {
  slua_plan *h = check_plan(L, 1, "Plan:knobs");
  int n = stof_plan_nsegment(h->p);
  lua_newtable(L);
  for (int i = 0; i < n; i++) {
    stof_seg_info s;
    stof_plan_segment(h->p, i, &s);
    if (s.shared_with >= 0) continue;
    for (int k = 0; k < s.nknob; k++) {
      lua_pushfstring(L, "%d.%s", i, s.knob_name[k]);
      lua_pushinteger(L, (lua_Integer)s.knob_value[k]);
      lua_rawset(L, -3);
    }
  }
  return 1;
}

static int plan_describe(lua_State *L) {
  slua_plan *h = check_plan(L, 1, "Plan:describe");
  char **slot = slua_owned_new(L);
  stof_status st = stof_plan_describe(h->p, slot);
  if (st) return slua_raise(L, h->lc->ctx, st, "Plan:describe");
  lua_pushstring(L, *slot);
  return 1;
}

static int plan_memory(lua_State *L) {
  slua_plan *h = check_plan(L, 1, "Plan:memory");
  stof_plan_memory m;
  stof_plan_memory_get(h->p, &m);
  lua_createtable(L, 0, 4);
  lua_pushinteger(L, (lua_Integer)m.arena);
  lua_setfield(L, -2, "arena");
  lua_pushinteger(L, (lua_Integer)m.values);
  lua_setfield(L, -2, "values");
  lua_pushinteger(L, (lua_Integer)m.owned_inputs);
  lua_setfield(L, -2, "owned_inputs");
  lua_pushinteger(L, (lua_Integer)m.workspace);
  lua_setfield(L, -2, "workspace");
  return 1;
}

static int plan_poison(lua_State *L) {
  slua_plan *h = check_plan(L, 1, "Plan:poison");
  stof_status st = stof_plan_poison(h->p);
  if (st) return slua_raise(L, h->lc->ctx, st, "Plan:poison");
  lua_settop(L, 1);
  return 1;
}

/* p:inputs() -> the placeholders the plan reads */
static int plan_inputs(lua_State *L) {
  slua_plan *h = check_plan(L, 1, "Plan:inputs");
  lua_getiuservalue(L, 1, 1);
  int gidx = lua_gettop(L);
  int n = stof_plan_ninput(h->p);
  lua_createtable(L, n, 0);
  for (int i = 0; i < n; i++) {
    slua_push_teop(L, stof_plan_input(h->p, i), gidx);
    lua_rawseti(L, -2, i + 1);
  }
  return 1;
}

static int plan_index(lua_State *L) {
  slua_plan *h = check_plan(L, 1, "Plan");
  if (lua_type(L, 2) != LUA_TSTRING) return lua_pushnil(L), 1; /* no such field */
  const char *k = lua_tostring(L, 2);
  if (strcmp(k, "target") == 0) {
    lua_pushstring(L, stof_plan_target(h->p));
    return 1;
  }
  if (strcmp(k, "scheme") == 0) {
    lua_pushstring(L, stof_plan_scheme(h->p));
    return 1;
  }
  if (strcmp(k, "nsegment") == 0) {
    lua_pushinteger(L, stof_plan_nsegment(h->p));
    return 1;
  }
  luaL_getmetatable(L, SLUA_PLAN_RT);
  lua_getfield(L, -1, k);
  return 1;
}

static int plan_tostring(lua_State *L) {
  slua_plan *h = slua_checkudata(L, 1, SLUA_PLAN_RT, "Plan:__tostring");
  if (!h->p) {
    lua_pushstring(L, "stof.Plan (closed)");
    return 1;
  }
  lua_pushfstring(L, "stof.Plan(%s, %d segments)", stof_plan_target(h->p), stof_plan_nsegment(h->p));
  return 1;
}

/* stof.cuda_mem_info() -> free, total bytes of device memory (nil, the reason without a GPU) */
static int l_cuda_mem_info(lua_State *L) {
  slua_ctx *lc = slua_state_ctx(L);
  size_t free_b = 0, total = 0;
  stof_status st = stof_cuda_init(lc->ctx);
  if (!st) st = stof_cuda_mem_get_info(lc->ctx, &free_b, &total);
  if (st) {
    lua_pushnil(L);
    lua_pushstring(L, stof_ctx_message(lc->ctx));
    stof_ctx_clear_error(lc->ctx);
    return 2;
  }
  lua_pushinteger(L, (lua_Integer)free_b);
  lua_pushinteger(L, (lua_Integer)total);
  return 2;
}

void slua_open_exec(lua_State *L, int idx) {
  idx = lua_absindex(L, idx);
  static const luaL_Reg methods[] = {
      {"bind", plan_bind},         {"run", plan_run},           {"launch", plan_launch},
      {"output", plan_output},     {"time", plan_time},         {"time_segments", plan_time_segments},
      {"segments", plan_segments}, {"describe", plan_describe}, {"memory", plan_memory},
      {"poison", plan_poison},     {"inputs", plan_inputs},     {"knobs", plan_knobs},
      {NULL, NULL}};
  luaL_newmetatable(L, SLUA_PLAN_RT);
  luaL_setfuncs(L, methods, 0);
  lua_pushcfunction(L, plan_gc);
  lua_setfield(L, -2, "__gc");
  lua_pushcfunction(L, plan_gc);
  lua_setfield(L, -2, "__close");
  lua_pushcfunction(L, plan_index);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, plan_tostring);
  lua_setfield(L, -2, "__tostring");
  lua_pop(L, 1);
  lua_pushcfunction(L, l_plan);
  lua_setfield(L, idx, "plan");
  lua_pushcfunction(L, l_cuda_mem_info);
  lua_setfield(L, idx, "cuda_mem_info");
}
