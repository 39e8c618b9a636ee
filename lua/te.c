/*
 * stof.te: tensor expressions in Lua, as TVM's te: placeholder, compute, reduce_axis,
 * sum/max/min, math functions, casts, comparisons (functions, since Lua's < and == give
 * booleans), select, and operators on expressions.
 *
 * Every te call builds into one graph: that of its expression or TE-tensor arguments, or
 * the state's current graph when it has none (te.reset() starts a new current graph).
 * Arguments from two graphs are an error. An Expr or TeTensor userdata keeps its graph's
 * userdata alive through user value 1; the graph userdata caches one TeTensor per op (a
 * weak table in its user value), so an op always has the same handle: feed tables and ==
 * work as expected.
 *
 * Numbers mixed with expressions become constants of the expression's dtype when that is a
 * float (so f16 * 0.5 stays f16) or when both are integers; otherwise int32 for Lua
 * integers (int64 when out of range), float32 for Lua floats, bool for Lua booleans.
 *
 * te.max / te.min reduce when their second argument is a table (of reduce axes) or a
 * reduce axis made by te.reduce_axis, as te.sum does; with any other arguments they are
 * the elementwise maximum / minimum of two or more expressions (te.maximum / te.minimum
 * always are).
 */
#include <stdint.h>
#include <string.h>

#include "lua_int.h"

#define REG_GRAPH "stof.graph" /* registry: the current graph's userdata */

/* ---------------------------------------------------------------- graphs */

static int graph_gc(lua_State *L) {
  slua_graph *sg = slua_checkudata(L, 1, SLUA_GRAPH, "Graph:__gc");
  if (sg->g) {
    stof_graph_free(sg->g);
    sg->g = NULL;
  }
  if (sg->lc) {
    slua_ctx_unref(sg->lc);
    sg->lc = NULL;
  }
  return 0;
}

/* Pushes a new graph userdata. */
static slua_graph *new_graph(lua_State *L) {
  slua_ctx *lc = slua_state_ctx(L);
  slua_graph *sg = lua_newuserdatauv(L, sizeof *sg, 1);
  sg->g = NULL;
  sg->lc = NULL;
  luaL_setmetatable(L, SLUA_GRAPH);
  lua_newtable(L); /* op -> TeTensor, weak values */
  lua_createtable(L, 0, 1);
  lua_pushliteral(L, "v");
  lua_setfield(L, -2, "__mode");
  lua_setmetatable(L, -2);
  lua_setiuservalue(L, -2, 1);
  stof_status st = stof_graph_new(lc->ctx, &sg->g);
  if (st) slua_raise(L, lc->ctx, st, "te");
  sg->lc = slua_ctx_ref(lc);
  return sg;
}

slua_graph *slua_current_graph(lua_State *L) {
  if (lua_getfield(L, LUA_REGISTRYINDEX, REG_GRAPH) == LUA_TUSERDATA) {
    slua_graph *sg = lua_touserdata(L, -1);
    if (sg->g) return sg;
  }
  lua_pop(L, 1);
  slua_graph *sg = new_graph(L);
  lua_pushvalue(L, -1);
  lua_setfield(L, LUA_REGISTRYINDEX, REG_GRAPH);
  return sg;
}

/* te.reset(): later te calls without expression arguments build into a new graph. */
static int te_reset(lua_State *L) {
  new_graph(L);
  lua_setfield(L, LUA_REGISTRYINDEX, REG_GRAPH);
  return 0;
}

static slua_expr *test_expr(lua_State *L, int idx) { return luaL_testudata(L, idx, SLUA_EXPR); }

slua_teop *slua_test_teop(lua_State *L, int idx) { return luaL_testudata(L, idx, SLUA_TETENSOR); }

static int different_graphs(lua_State *L, const char *fname) {
  return slua_error(L, "ValueError",
                    "%s: expressions from different graphs (te.reset() was called between "
                    "building them)",
                    fname);
}

/* Pushes the userdata of the graph that the arguments [first, last] live in and returns
 * the graph: that of the first Expr or TeTensor among them, else the current graph. */
static stof_graph *args_graph(lua_State *L, int first, int last, const char *fname) {
  stof_graph *g = NULL;
  int src = 0;
  for (int i = first; i <= last; i++) {
    stof_graph *gi = NULL;
    slua_expr *x = test_expr(L, i);
    slua_teop *t = x ? NULL : slua_test_teop(L, i);
    if (x) gi = x->g;
    if (t) gi = t->g;
    if (!gi) continue;
    if (!g) {
      g = gi;
      src = i;
    } else if (gi != g) {
      different_graphs(L, fname);
    }
  }
  if (!g) return slua_current_graph(L)->g;
  lua_getiuservalue(L, src, 1);
  return g;
}

static stof_ctx *graph_ctx(stof_graph *g) { return stof_graph_ctx(g); }

static void push_expr(lua_State *L, const stof_expr *e, stof_graph *g, int gidx) {
  gidx = lua_absindex(L, gidx);
  slua_expr *x = lua_newuserdatauv(L, sizeof *x, 1);
  x->e = e;
  x->g = g;
  luaL_setmetatable(L, SLUA_EXPR);
  lua_pushvalue(L, gidx);
  lua_setiuservalue(L, -2, 1);
}

void slua_push_teop(lua_State *L, const stof_op *op, int gidx) {
  gidx = lua_absindex(L, gidx);
  slua_graph *sg = luaL_checkudata(L, gidx, SLUA_GRAPH);
  lua_getiuservalue(L, gidx, 1);
  if (lua_rawgetp(L, -1, op) == LUA_TUSERDATA) {
    lua_remove(L, -2);
    return;
  }
  lua_pop(L, 1);
  slua_teop *t = lua_newuserdatauv(L, sizeof *t, 1);
  t->op = op;
  t->g = sg->g;
  luaL_setmetatable(L, SLUA_TETENSOR);
  lua_pushvalue(L, gidx);
  lua_setiuservalue(L, -2, 1);
  lua_pushvalue(L, -1);
  lua_rawsetp(L, -3, op);
  lua_remove(L, -2);
}

/* ---------------------------------------------------------------- values to expressions */

static int is_int_dtype(stof_dtype d) { return d == STOF_DTYPE_I32 || d == STOF_DTYPE_I64; }

/* The constant for the number at idx, typed after like (may be NULL). */
static const stof_expr *number_const(lua_State *L, int idx, stof_graph *g, const stof_expr *like) {
  const stof_expr *out = NULL;
  stof_status st;
  if (lua_isinteger(L, idx)) {
    lua_Integer v = lua_tointeger(L, idx);
    if (like && stof_dtype_is_float(like->dtype)) {
      st = stof_te_float(g, (double)v, like->dtype, &out);
    } else {
      stof_dtype d = like && is_int_dtype(like->dtype) ? like->dtype : STOF_DTYPE_I32;
      if (d == STOF_DTYPE_I32 && (v > INT32_MAX || v < INT32_MIN)) d = STOF_DTYPE_I64;
      st = stof_te_int(g, (int64_t)v, d, &out);
    }
  } else {
    double v = (double)lua_tonumber(L, idx);
    stof_dtype d = like && stof_dtype_is_float(like->dtype) ? like->dtype : STOF_DTYPE_F32;
    st = stof_te_float(g, v, d, &out);
  }
  if (st) slua_raise(L, graph_ctx(g), st, NULL);
  return out;
}

/* The expression for the value at idx (argument argn of fname): an Expr of graph g, a
 * number or a boolean. */
static const stof_expr *to_expr(lua_State *L, int idx, stof_graph *g, const stof_expr *like,
                                const char *fname, int argn) {
  slua_expr *x = test_expr(L, idx);
  if (x) {
    if (x->g != g) different_graphs(L, fname);
    return x->e;
  }
  switch (lua_type(L, idx)) {
  case LUA_TNUMBER: return number_const(L, idx, g, like);
  case LUA_TBOOLEAN: {
    const stof_expr *out = NULL;
    stof_status st = stof_te_int(g, lua_toboolean(L, idx), STOF_DTYPE_BOOL, &out);
    if (st) slua_raise(L, graph_ctx(g), st, fname);
    return out;
  }
  default: break;
  }
  if (slua_test_teop(L, idx))
    slua_argerror(L, argn, fname,
                  "a te tensor is not an expression: index it, as in A[{i, j}]");
  slua_typeerror(L, argn, fname, "expression or number");
  return NULL;
}

/* The Expr of the first argument in [first, last] that is one, or NULL. */
static const stof_expr *first_expr(lua_State *L, int first, int last) {
  for (int i = first; i <= last; i++) {
    slua_expr *x = test_expr(L, i);
    if (x) return x->e;
  }
  return NULL;
}

static int is_reduce_axis(const stof_expr *e) {
  return e->kind == STOF_EXPR_VAR && e->u.var->kind == STOF_VAR_REDUCE;
}

/* ---------------------------------------------------------------- builders */

/* Raises for a missing argument among the first n (before lua_settop hides it as nil). */
static void need_args(lua_State *L, int n, const char *fname) {
  for (int i = 1; i <= n; i++)
    if (lua_isnone(L, i)) slua_typeerror(L, i, fname, "expression or number");
}

static void push_binary(lua_State *L, stof_graph *g, int gidx, stof_expr_kind kind,
                        const stof_expr *a, const stof_expr *b) {
  const stof_expr *out = NULL;
  stof_status st = stof_te_binary(g, kind, a, b, &out);
  if (st) slua_raise(L, graph_ctx(g), st, NULL);
  push_expr(L, out, g, gidx);
}

/* Binary operator or function: upvalue 1 the kind, upvalue 2 the name for messages. */
static int te_binary(lua_State *L) {
  stof_expr_kind kind = (stof_expr_kind)lua_tointeger(L, lua_upvalueindex(1));
  const char *fname = lua_tostring(L, lua_upvalueindex(2));
  need_args(L, 2, fname);
  lua_settop(L, 2);
  stof_graph *g = args_graph(L, 1, 2, fname);
  int gidx = lua_gettop(L);
  slua_expr *xa = test_expr(L, 1), *xb = test_expr(L, 2);
  const stof_expr *a = to_expr(L, 1, g, xb ? xb->e : NULL, fname, 1);
  const stof_expr *b = to_expr(L, 2, g, xa ? xa->e : a, fname, 2);
  push_binary(L, g, gidx, kind, a, b);
  return 1;
}

/* Unary operator or function: upvalue 1 the kind, upvalue 2 the name. */
static int te_unary(lua_State *L) {
  stof_expr_kind kind = (stof_expr_kind)lua_tointeger(L, lua_upvalueindex(1));
  const char *fname = lua_tostring(L, lua_upvalueindex(2));
  need_args(L, 1, fname);
  lua_settop(L, 1);
  stof_graph *g = args_graph(L, 1, 1, fname);
  int gidx = lua_gettop(L);
  const stof_expr *a = to_expr(L, 1, g, NULL, fname, 1);
  const stof_expr *out = NULL;
  stof_status st = stof_te_unary(g, kind, a, &out);
  if (st) slua_raise(L, graph_ctx(g), st, NULL);
  push_expr(L, out, g, gidx);
  return 1;
}

/* Folds kind over the arguments [1, n] (n >= 2) from the left. */
static int fold(lua_State *L, stof_expr_kind kind, const char *fname, int n) {
  stof_graph *g = args_graph(L, 1, n, fname);
  int gidx = lua_gettop(L);
  const stof_expr *like = first_expr(L, 1, n);
  const stof_expr *acc = to_expr(L, 1, g, like, fname, 1);
  for (int i = 2; i <= n; i++) {
    const stof_expr *b = to_expr(L, i, g, like ? like : acc, fname, i);
    const stof_expr *out = NULL;
    stof_status st = stof_te_binary(g, kind, acc, b, &out);
    if (st) slua_raise(L, graph_ctx(g), st, NULL);
    acc = out;
  }
  push_expr(L, acc, g, gidx);
  return 1;
}

/* te.sum / te.max / te.min as reductions: (expr, axis) or (expr, {axis, ...}). */
static int reduce(lua_State *L, stof_reduce_kind combiner, const char *fname) {
  need_args(L, 1, fname);
  if (lua_isnone(L, 2)) return slua_typeerror(L, 2, fname, "reduce axis or table of reduce axes");
  lua_settop(L, 2);
  stof_graph *g = args_graph(L, 1, 2, fname);
  int gidx = lua_gettop(L);
  const stof_expr *src = to_expr(L, 1, g, NULL, fname, 1);
  int naxis;
  const stof_expr **axes;
  slua_expr *x1 = test_expr(L, 2);
  if (x1) {
    naxis = 1;
    axes = slua_scratch(L, sizeof *axes);
    axes[0] = x1->e;
    if (x1->g != g) different_graphs(L, fname);
  } else if (lua_istable(L, 2)) {
    lua_Integer n = (lua_Integer)lua_rawlen(L, 2);
    if (n > 64) return slua_argerror(L, 2, fname, "%I reduce axes, at most 64", n);
    naxis = (int)n;
    axes = slua_scratch(L, (size_t)(naxis ? naxis : 1) * sizeof *axes);
    for (int i = 0; i < naxis; i++) {
      lua_rawgeti(L, 2, i + 1);
      slua_expr *x = test_expr(L, -1);
      if (!x)
        return slua_argerror(L, 2, fname, "axis %d: reduce axis expected, got %s", i + 1,
                             slua_typename(L, -1));
      if (x->g != g) different_graphs(L, fname);
      axes[i] = x->e;
      lua_pop(L, 1);
    }
  } else {
    return slua_typeerror(L, 2, fname, "reduce axis or table of reduce axes");
  }
  for (int i = 0; i < naxis; i++)
    if (!is_reduce_axis(axes[i]))
      return slua_argerror(L, 2, fname,
                           "axis %d is not a reduce axis: make it with te.reduce_axis", i + 1);
  const stof_expr *out = NULL;
  stof_status st = stof_te_reduce(g, combiner, src, naxis, (const stof_expr *const *)axes, &out);
  if (st) slua_raise(L, graph_ctx(g), st, NULL);
  push_expr(L, out, g, gidx);
  return 1;
}

static int te_sum(lua_State *L) { return reduce(L, STOF_REDUCE_SUM, "te.sum"); }

/* Is argument idx what makes te.max / te.min a reduction? */
static int reduces_over(lua_State *L, int idx) {
  if (lua_istable(L, idx)) return 1;
  slua_expr *x = test_expr(L, idx);
  return x && is_reduce_axis(x->e);
}

static int max_min(lua_State *L, int ismax) {
  const char *fname = ismax ? "te.max" : "te.min";
  int n = lua_gettop(L);
  if (n == 2 && reduces_over(L, 2))
    return reduce(L, ismax ? STOF_REDUCE_MAX : STOF_REDUCE_MIN, fname);
  if (n < 2)
    return slua_error(L, "TypeError",
                      "%s: expected (expr, axes) to reduce or (a, b, ...) for the elementwise "
                      "%s, got %d argument%s",
                      fname, ismax ? "maximum" : "minimum", n, n == 1 ? "" : "s");
  return fold(L, ismax ? STOF_EXPR_MAX : STOF_EXPR_MIN, fname, n);
}

static int te_max(lua_State *L) { return max_min(L, 1); }
static int te_min(lua_State *L) { return max_min(L, 0); }

static int elementwise_max_min(lua_State *L, int ismax) {
  const char *fname = ismax ? "te.maximum" : "te.minimum";
  int n = lua_gettop(L);
  if (n < 2)
    return slua_error(L, "TypeError", "%s: expected at least 2 arguments, got %d", fname, n);
  return fold(L, ismax ? STOF_EXPR_MAX : STOF_EXPR_MIN, fname, n);
}

static int te_maximum(lua_State *L) { return elementwise_max_min(L, 1); }
static int te_minimum(lua_State *L) { return elementwise_max_min(L, 0); }

/* te.all / te.any: n-ary and / or over bools, given as arguments or as one table. */
static int all_any(lua_State *L, int isall) {
  const char *fname = isall ? "te.all" : "te.any";
  int n = lua_gettop(L);
  if (n == 1 && lua_istable(L, 1)) {
    lua_Integer len = (lua_Integer)lua_rawlen(L, 1);
    if (len > 1000) return slua_argerror(L, 1, fname, "%I conditions, at most 1000", len);
    luaL_checkstack(L, (int)len + 8, fname);
    for (lua_Integer i = 1; i <= len; i++) lua_rawgeti(L, 1, i);
    lua_remove(L, 1);
    n = (int)len;
  }
  if (n == 0) {
    stof_graph *g = args_graph(L, 1, 0, fname);
    int gidx = lua_gettop(L);
    const stof_expr *out = NULL;
    stof_status st = stof_te_int(g, isall, STOF_DTYPE_BOOL, &out);
    if (st) slua_raise(L, graph_ctx(g), st, fname);
    push_expr(L, out, g, gidx);
    return 1;
  }
  if (n == 1) {
    stof_graph *g = args_graph(L, 1, 1, fname);
    int gidx = lua_gettop(L);
    const stof_expr *a = to_expr(L, 1, g, NULL, fname, 1);
    if (a->dtype != STOF_DTYPE_BOOL)
      return slua_error(L, "TypeError", "%s: condition 1 is %s, expected bool", fname,
                        stof_dtype_name(a->dtype));
    push_expr(L, a, g, gidx);
    return 1;
  }
  return fold(L, isall ? STOF_EXPR_AND : STOF_EXPR_OR, fname, n);
}

static int te_all(lua_State *L) { return all_any(L, 1); }
static int te_any(lua_State *L) { return all_any(L, 0); }

/* te.select(cond, a, b): cond ? a : b. */
static int te_select(lua_State *L) {
  const char *fname = "te.select";
  need_args(L, 3, fname);
  lua_settop(L, 3);
  stof_graph *g = args_graph(L, 1, 3, fname);
  int gidx = lua_gettop(L);
  slua_expr *xb = test_expr(L, 3);
  const stof_expr *c = to_expr(L, 1, g, NULL, fname, 1);
  const stof_expr *a = to_expr(L, 2, g, xb ? xb->e : NULL, fname, 2);
  const stof_expr *b = to_expr(L, 3, g, a, fname, 3);
  const stof_expr *out = NULL;
  stof_status st = stof_te_select(g, c, a, b, &out);
  if (st) slua_raise(L, graph_ctx(g), st, NULL);
  push_expr(L, out, g, gidx);
  return 1;
}

/* te.const(v[, dtype]): v a number or boolean. */
static int te_const(lua_State *L) {
  const char *fname = "te.const";
  int t = lua_type(L, 1);
  if (t != LUA_TNUMBER && t != LUA_TBOOLEAN) return slua_typeerror(L, 1, fname, "number or boolean");
  int dt = slua_opt_dtype(L, 2, fname, -1);
  lua_settop(L, 2);
  stof_graph *g = slua_current_graph(L)->g;
  int gidx = lua_gettop(L);
  const stof_expr *out = NULL;
  stof_status st;
  if (dt < 0) {
    if (t == LUA_TBOOLEAN) {
      st = stof_te_int(g, lua_toboolean(L, 1), STOF_DTYPE_BOOL, &out);
    } else {
      out = number_const(L, 1, g, NULL);
      st = STOF_OK;
    }
  } else {
    stof_dtype d = (stof_dtype)dt;
    double v = t == LUA_TBOOLEAN ? lua_toboolean(L, 1) : (double)lua_tonumber(L, 1);
    if (stof_dtype_is_float(d)) {
      st = stof_te_float(g, v, d, &out);
    } else {
      int isint = t == LUA_TBOOLEAN;
      lua_Integer iv = isint ? lua_toboolean(L, 1) : lua_tointegerx(L, 1, &isint);
      if (!isint)
        return slua_error(L, "ValueError", "%s: %f is not an integer (dtype %s)", fname,
                          (double)lua_tonumber(L, 1), stof_dtype_name(d));
      if (d == STOF_DTYPE_BOOL) iv = iv != 0;
      if (d == STOF_DTYPE_I32 && (iv > INT32_MAX || iv < INT32_MIN))
        return slua_error(L, "ValueError", "%s: %I does not fit in int32", fname, iv);
      st = stof_te_int(g, (int64_t)iv, d, &out);
    }
  }
  if (st) slua_raise(L, graph_ctx(g), st, NULL);
  push_expr(L, out, g, gidx);
  return 1;
}

static int cast(lua_State *L, int eidx, int didx, const char *fname) {
  stof_dtype d = slua_check_dtype(L, didx, fname);
  stof_graph *g = args_graph(L, eidx, eidx, fname);
  int gidx = lua_gettop(L);
  const stof_expr *a = to_expr(L, eidx, g, NULL, fname, eidx);
  const stof_expr *out = NULL;
  stof_status st = stof_te_cast(g, d, a, &out);
  if (st) slua_raise(L, graph_ctx(g), st, NULL);
  push_expr(L, out, g, gidx);
  return 1;
}

/* te.cast(e, dtype) */
static int te_cast(lua_State *L) {
  need_args(L, 1, "te.cast");
  lua_settop(L, 2);
  return cast(L, 1, 2, "te.cast");
}

/* te.placeholder(shape[, dtype][, name]) */
static int te_placeholder(lua_State *L) {
  const char *fname = "te.placeholder";
  int64_t shape[STOF_MAX_DIMS];
  int ndim = slua_check_shape(L, 1, fname, shape);
  stof_dtype d = (stof_dtype)slua_opt_dtype(L, 2, fname, STOF_DTYPE_F32);
  const char *name = slua_opt_string(L, 3, fname, "name", "placeholder");
  lua_settop(L, 3);
  slua_graph *sg = slua_current_graph(L);
  int gidx = lua_gettop(L);
  const stof_op *op = NULL;
  stof_status st = stof_te_placeholder(sg->g, ndim, shape, d, name, &op);
  if (st) slua_raise(L, sg->lc->ctx, st, NULL);
  slua_push_teop(L, op, gidx);
  return 1;
}

/* te.reduce_axis(extent[, name]) or te.reduce_axis({0, extent}[, name]) */
static int te_reduce_axis(lua_State *L) {
  const char *fname = "te.reduce_axis";
  lua_Integer extent;
  if (lua_istable(L, 1)) {
    lua_rawgeti(L, 1, 1);
    lua_rawgeti(L, 1, 2);
    int ok0 = 0, ok1 = 0;
    lua_Integer lo = lua_type(L, -2) == LUA_TNUMBER ? lua_tointegerx(L, -2, &ok0) : 0;
    lua_Integer hi = lua_type(L, -1) == LUA_TNUMBER ? lua_tointegerx(L, -1, &ok1) : 0;
    if (!ok0 || !ok1 || lua_rawlen(L, 1) != 2)
      return slua_argerror(L, 1, fname, "a range must be {0, extent} with integers");
    if (lo != 0)
      return slua_argerror(L, 1, fname, "a range must start at 0, got {%I, %I}", lo, hi);
    extent = hi;
    lua_pop(L, 2);
  } else if (lua_type(L, 1) == LUA_TNUMBER) {
    extent = slua_check_integer(L, 1, fname, "extent");
  } else {
    return slua_typeerror(L, 1, fname, "extent (integer)");
  }
  if (extent < 0) return slua_error(L, "ShapeError", "%s: negative extent %I", fname, extent);
  const char *name = slua_opt_string(L, 2, fname, "name", "rv");
  lua_settop(L, 2);
  slua_graph *sg = slua_current_graph(L);
  int gidx = lua_gettop(L);
  const stof_expr *out = NULL;
  stof_status st = stof_te_reduce_axis(sg->g, (int64_t)extent, name, &out);
  if (st) slua_raise(L, sg->lc->ctx, st, NULL);
  push_expr(L, out, sg->g, gidx);
  return 1;
}

/* te.compute(shape, fn[, name][, dtype][, tag]): fn receives one axis per dim (named after
 * fn's parameters) and returns the body, an expression or a number; tag names the layer
 * that built it ("gemm", "gelu", ...: metadata the runtime's templates read, as TVM's). */
static int te_compute(lua_State *L) {
  const char *fname = "te.compute";
  int64_t shape[STOF_MAX_DIMS];
  int ndim = slua_check_shape(L, 1, fname, shape);
  if (!lua_isfunction(L, 2)) return slua_typeerror(L, 2, fname, "function");
  const char *name = slua_opt_string(L, 3, fname, "name", "compute");
  int dt = slua_opt_dtype(L, 4, fname, -1);
  const char *tag = slua_opt_string(L, 5, fname, "tag", NULL);
  lua_settop(L, 5);
  slua_graph *sg = slua_current_graph(L);
  int gidx = lua_gettop(L);
  stof_graph *g = sg->g;

  /* The axes take the names of fn's parameters when it has enough of them. */
  const char *names[STOF_MAX_DIMS];
  int named = 1;
  lua_pushvalue(L, 2);
  for (int d = 0; d < ndim; d++) {
    names[d] = lua_getlocal(L, NULL, d + 1);
    if (!names[d] || names[d][0] == '(') named = 0;
  }
  lua_pop(L, 1);

  const stof_expr *axes[STOF_MAX_DIMS];
  stof_status st = stof_te_compute_axes(g, ndim, shape, named ? names : NULL, axes);
  if (st) slua_raise(L, sg->lc->ctx, st, NULL);
  luaL_checkstack(L, ndim + 4, fname);
  lua_pushvalue(L, 2);
  for (int d = 0; d < ndim; d++) push_expr(L, axes[d], g, gidx);
  lua_call(L, ndim, 1);
  int r = lua_gettop(L);
  slua_expr *x = test_expr(L, r);
  const stof_expr *body;
  if (x) {
    if (x->g != g) different_graphs(L, fname);
    body = x->e;
  } else if (lua_type(L, r) == LUA_TNUMBER || lua_type(L, r) == LUA_TBOOLEAN) {
    body = to_expr(L, r, g, NULL, fname, 2);
  } else {
    return slua_error(L, "TypeError",
                      "%s: the function must return an expression or a number, got %s%s", fname,
                      lua_isnone(L, r) ? "no value" : slua_typename(L, r),
                      slua_test_teop(L, r) ? " (index the tensor, as in A[{i, j}])" : "");
  }
  const stof_op *op = NULL;
  st = stof_te_compute(g, name, ndim, axes, body, dt, &op);
  if (!st && tag) st = stof_te_set_tag(g, op, tag);
  if (st) slua_raise(L, sg->lc->ctx, st, NULL);
  slua_push_teop(L, op, gidx);
  return 1;
}

/* ---------------------------------------------------------------- Expr methods */

static int expr_tostring(lua_State *L) {
  slua_expr *x = slua_checkudata(L, 1, SLUA_EXPR, "Expr:__tostring");
  char **slot = slua_owned_new(L);
  int h = lua_gettop(L);
  stof_ctx *ctx = graph_ctx(x->g);
  stof_status st = stof_expr_print(ctx, x->e, slot);
  if (st) slua_raise(L, ctx, st, "tostring");
  slua_owned_push(L, h);
  return 1;
}

static int expr_astype(lua_State *L) {
  if (!test_expr(L, 1)) return slua_typeerror(L, 1, "Expr:astype", "stof.Expr");
  lua_settop(L, 2);
  return cast(L, 1, 2, "Expr:astype");
}

static int expr_index(lua_State *L) {
  slua_expr *x = slua_checkudata(L, 1, SLUA_EXPR, "Expr:__index");
  if (lua_type(L, 2) != LUA_TSTRING) return 0;
  const char *k = lua_tostring(L, 2);
  const stof_expr *e = x->e;
  if (strcmp(k, "dtype") == 0) {
    lua_pushstring(L, stof_dtype_name(e->dtype));
  } else if (strcmp(k, "kind") == 0) {
    lua_pushstring(L, stof_expr_kind_name(e->kind));
  } else if (strcmp(k, "name") == 0 && e->kind == STOF_EXPR_VAR) {
    lua_pushstring(L, e->u.var->name);
  } else if (strcmp(k, "extent") == 0 && e->kind == STOF_EXPR_VAR) {
    lua_pushinteger(L, (lua_Integer)e->u.var->extent);
  } else if (strcmp(k, "is_reduce_axis") == 0) {
    lua_pushboolean(L, is_reduce_axis(e));
  } else if (strcmp(k, "value") == 0 && e->kind == STOF_EXPR_INT) {
    lua_pushinteger(L, (lua_Integer)e->u.ival);
  } else if (strcmp(k, "value") == 0 && e->kind == STOF_EXPR_FLOAT) {
    lua_pushnumber(L, (lua_Number)e->u.fval);
  } else if (strcmp(k, "astype") == 0) {
    lua_pushcfunction(L, expr_astype);
  } else {
    return 0;
  }
  return 1;
}

static int expr_compare(lua_State *L) {
  return slua_error(L, "TypeError",
                    "Lua's comparison operators cannot build expressions: use te.lt(a, b), "
                    "te.le, te.gt, te.ge, te.eq or te.ne");
}

/* ---------------------------------------------------------------- TeTensor methods */

static slua_teop *check_teop(lua_State *L, int idx) {
  return slua_checkudata(L, idx, SLUA_TETENSOR, "TeTensor method");
}

/* The index expression for dim d from the value at idx. */
static const stof_expr *index_expr(lua_State *L, int idx, stof_graph *g, const char *tname, int d) {
  slua_expr *x = test_expr(L, idx);
  if (x) {
    if (x->g != g) different_graphs(L, "te load");
    if (!is_int_dtype(x->e->dtype))
      slua_error(L, "TypeError", "%s[...]: the index for dim %d is %s, expected an integer expression",
                 tname, d, stof_dtype_name(x->e->dtype));
    return x->e;
  }
  if (lua_type(L, idx) == LUA_TNUMBER) {
    int isint = 0;
    lua_Integer v = lua_tointegerx(L, idx, &isint);
    if (!isint)
      slua_error(L, "TypeError", "%s[...]: the index for dim %d must be an integer, got %f", tname,
                 d, (double)lua_tonumber(L, idx));
    const stof_expr *out = NULL;
    stof_dtype dt = v > INT32_MAX || v < INT32_MIN ? STOF_DTYPE_I64 : STOF_DTYPE_I32;
    stof_status st = stof_te_int(g, (int64_t)v, dt, &out);
    if (st) slua_raise(L, graph_ctx(g), st, NULL);
    return out;
  }
  slua_error(L, "TypeError", "%s[...]: the index for dim %d must be an integer or an expression, got %s",
             tname, d, slua_typename(L, idx));
  return NULL;
}

/* A[{i, j}] (or A[i] for a 1-D tensor): a load expression. */
static int teop_load(lua_State *L, slua_teop *t, int kidx) {
  const stof_op *op = t->op;
  const char *tname = op->name ? op->name : "tensor";
  const stof_expr *idx[STOF_MAX_DIMS];
  lua_getiuservalue(L, 1, 1);
  int gidx = lua_gettop(L);
  int n;
  if (lua_istable(L, kidx)) {
    lua_Integer len = (lua_Integer)lua_rawlen(L, kidx);
    if (len != op->ndim)
      return slua_error(L, "IndexError", "%s[...]: %I ind%s for a %d-D tensor", tname, len,
                        len == 1 ? "ex" : "ices", op->ndim);
    n = (int)len;
    for (int d = 0; d < n; d++) {
      lua_rawgeti(L, kidx, d + 1);
      idx[d] = index_expr(L, lua_gettop(L), t->g, tname, d);
      lua_pop(L, 1);
    }
  } else {
    if (op->ndim != 1)
      return slua_error(L, "IndexError", "%s[...]: 1 index for a %d-D tensor (use %s[{i, j, ...}])",
                        tname, op->ndim, tname);
    n = 1;
    idx[0] = index_expr(L, kidx, t->g, tname, 0);
  }
  const stof_expr *out = NULL;
  stof_status st = stof_te_load(t->g, op, n, idx, &out);
  if (st) slua_raise(L, graph_ctx(t->g), st, NULL);
  push_expr(L, out, t->g, gidx);
  return 1;
}

static int teop_index(lua_State *L) {
  slua_teop *t = check_teop(L, 1);
  const stof_op *op = t->op;
  int kt = lua_type(L, 2);
  if (kt == LUA_TTABLE || kt == LUA_TNUMBER || test_expr(L, 2)) return teop_load(L, t, 2);
  if (kt != LUA_TSTRING)
    return slua_error(L, "TypeError", "%s[...]: index with a table of indices, as in %s[{i, j}], got %s",
                      op->name, op->name, slua_typename(L, 2));
  const char *k = lua_tostring(L, 2);
  if (strcmp(k, "shape") == 0) {
    slua_push_shape(L, op->ndim, op->shape);
  } else if (strcmp(k, "dtype") == 0) {
    lua_pushstring(L, stof_dtype_name(op->dtype));
  } else if (strcmp(k, "name") == 0) {
    lua_pushstring(L, op->name ? op->name : "");
  } else if (strcmp(k, "op") == 0) {
    static const char *const kinds[] = {
#define STOF_X(name, text) text,
        STOF_OP_KIND_LIST(STOF_X)
#undef STOF_X
    };
    lua_pushstring(L, (unsigned)op->kind < STOF_OP_KIND_COUNT ? kinds[op->kind] : "?");
  } else if (strcmp(k, "ndim") == 0) {
    lua_pushinteger(L, op->ndim);
  } else if (strcmp(k, "pattern") == 0) {
    lua_pushstring(L, stof_pattern_name(op->pattern));
  } else if (strcmp(k, "compute_intensive") == 0) {
    lua_pushboolean(L, op->compute_intensive);
  } else if (strcmp(k, "tag") == 0) {
    if (!op->tag) return 0;
    lua_pushstring(L, op->tag);
  } else if (strcmp(k, "intrin") == 0) {
    if (!op->intrin) return 0;
    lua_pushstring(L, op->intrin);
  } else if (strcmp(k, "id") == 0) {
    lua_pushinteger(L, op->id);
  } else if (strcmp(k, "axis") == 0 && op->kind == STOF_OP_COMPUTE && op->axis) {
    /* {{name = "i", extent = 4}, ...}: the data-parallel axes */
    lua_createtable(L, op->ndim, 0);
    for (int d = 0; d < op->ndim; d++) {
      lua_createtable(L, 0, 2);
      lua_pushstring(L, op->axis[d]->name ? op->axis[d]->name : "");
      lua_setfield(L, -2, "name");
      lua_pushinteger(L, (lua_Integer)op->axis[d]->extent);
      lua_setfield(L, -2, "extent");
      lua_rawseti(L, -2, d + 1);
    }
  } else if (strcmp(k, "body") == 0 && op->kind == STOF_OP_COMPUTE && op->body) {
    lua_getiuservalue(L, 1, 1);
    push_expr(L, op->body, t->g, -1);
  } else {
    return 0;
  }
  return 1;
}

static int teop_newindex(lua_State *L) {
  slua_teop *t = check_teop(L, 1);
  return slua_error(L, "TypeError", "te tensor %s is immutable: build a new one with te.compute",
                    t->op->name);
}

static int teop_tostring(lua_State *L) {
  slua_teop *t = check_teop(L, 1);
  char **slot = slua_owned_new(L);
  int h = lua_gettop(L);
  stof_ctx *ctx = graph_ctx(t->g);
  const stof_op *ops[1] = {t->op};
  stof_status st = stof_te_print(t->g, 1, ops, slot);
  if (st) slua_raise(L, ctx, st, "tostring");
  slua_owned_push(L, h);
  return 1;
}

/* ---------------------------------------------------------------- registration */

static void set_op(lua_State *L, const char *field, lua_CFunction f, int kind, const char *name) {
  lua_pushinteger(L, kind);
  lua_pushstring(L, name);
  lua_pushcclosure(L, f, 2);
  lua_setfield(L, -2, field);
}

/* The arithmetic and bitwise metamethods, into the table on top. */
static void set_metamethods(lua_State *L) {
  static const struct {
    const char *mm;
    int kind;
    const char *name;
  } bin[] = {
      {"__add", STOF_EXPR_ADD, "operator +"},       {"__sub", STOF_EXPR_SUB, "operator -"},
      {"__mul", STOF_EXPR_MUL, "operator *"},       {"__div", STOF_EXPR_DIV, "operator /"},
      {"__idiv", STOF_EXPR_FLOORDIV, "operator //"}, {"__mod", STOF_EXPR_MOD, "operator %"},
      {"__pow", STOF_EXPR_POW, "operator ^"},       {"__band", STOF_EXPR_AND, "operator &"},
      {"__bor", STOF_EXPR_OR, "operator |"},
  };
  for (size_t i = 0; i < sizeof bin / sizeof *bin; i++)
    set_op(L, bin[i].mm, te_binary, bin[i].kind, bin[i].name);
  set_op(L, "__unm", te_unary, STOF_EXPR_NEG, "operator -");
  set_op(L, "__bnot", te_unary, STOF_EXPR_NOT, "operator ~");
  lua_pushcfunction(L, expr_compare);
  lua_setfield(L, -2, "__lt");
  lua_pushcfunction(L, expr_compare);
  lua_setfield(L, -2, "__le");
}

int slua_open_te(lua_State *L) {
  if (luaL_newmetatable(L, SLUA_GRAPH)) {
    lua_pushcfunction(L, graph_gc);
    lua_setfield(L, -2, "__gc");
    lua_pushliteral(L, "stof.Graph");
    lua_setfield(L, -2, "__metatable");
  }
  lua_pop(L, 1);
  if (luaL_newmetatable(L, SLUA_EXPR)) {
    set_metamethods(L);
    lua_pushcfunction(L, expr_index);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, expr_tostring);
    lua_setfield(L, -2, "__tostring");
  }
  lua_pop(L, 1);
  if (luaL_newmetatable(L, SLUA_TETENSOR)) {
    set_metamethods(L); /* they explain that a tensor must be indexed first */
    lua_pushcfunction(L, teop_index);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, teop_newindex);
    lua_setfield(L, -2, "__newindex");
    lua_pushcfunction(L, teop_tostring);
    lua_setfield(L, -2, "__tostring");
  }
  lua_pop(L, 1);

  static const luaL_Reg fns[] = {
      {"placeholder", te_placeholder}, {"compute", te_compute}, {"reduce_axis", te_reduce_axis},
      {"sum", te_sum},                 {"max", te_max},         {"min", te_min},
      {"maximum", te_maximum},         {"minimum", te_minimum}, {"all", te_all},
      {"any", te_any},                 {"select", te_select},   {"const", te_const},
      {"cast", te_cast},               {"reset", te_reset},     {NULL, NULL},
  };
  luaL_newlib(L, fns);
  static const struct {
    const char *name;
    int kind;
  } un[] = {
      {"exp", STOF_EXPR_EXP},     {"log", STOF_EXPR_LOG},         {"sqrt", STOF_EXPR_SQRT},
      {"rsqrt", STOF_EXPR_RSQRT}, {"tanh", STOF_EXPR_TANH},       {"erf", STOF_EXPR_ERF},
      {"sigmoid", STOF_EXPR_SIGMOID}, {"abs", STOF_EXPR_ABS},     {"sin", STOF_EXPR_SIN},
      {"cos", STOF_EXPR_COS},     {"floor", STOF_EXPR_FLOOR},     {"not_", STOF_EXPR_NOT},
      {"neg", STOF_EXPR_NEG},
  };
  char buf[32];
  for (size_t i = 0; i < sizeof un / sizeof *un; i++) {
    snprintf(buf, sizeof buf, "te.%s", un[i].name);
    set_op(L, un[i].name, te_unary, un[i].kind, buf);
  }
  static const struct {
    const char *name;
    int kind;
  } bin[] = {
      {"lt", STOF_EXPR_LT}, {"le", STOF_EXPR_LE}, {"gt", STOF_EXPR_GT},
      {"ge", STOF_EXPR_GE}, {"eq", STOF_EXPR_EQ}, {"ne", STOF_EXPR_NE},
      {"pow", STOF_EXPR_POW}, {"floordiv", STOF_EXPR_FLOORDIV}, {"floormod", STOF_EXPR_MOD},
  };
  for (size_t i = 0; i < sizeof bin / sizeof *bin; i++) {
    snprintf(buf, sizeof buf, "te.%s", bin[i].name);
    set_op(L, bin[i].name, te_binary, bin[i].kind, buf);
  }
  return 1;
}

const stof_op **slua_check_outputs(lua_State *L, int arg, const char *fname, int *n,
                                   stof_graph **g) {
  arg = lua_absindex(L, arg);
  int single = slua_test_teop(L, arg) != NULL;
  lua_Integer count = 1;
  if (!single) {
    if (!lua_istable(L, arg)) return slua_typeerror(L, arg, fname, "te tensor or list of te tensors"), NULL;
    count = (lua_Integer)lua_rawlen(L, arg);
    if (count == 0) return slua_argerror(L, arg, fname, "the list of outputs is empty"), NULL;
    if (count > 4096) return slua_argerror(L, arg, fname, "%I outputs, at most 4096", count), NULL;
  }
  const stof_op **outs = slua_scratch(L, sizeof *outs * (size_t)count);
  *g = NULL;
  for (int i = 0; i < (int)count; i++) {
    if (single)
      lua_pushvalue(L, arg);
    else
      lua_rawgeti(L, arg, i + 1);
    slua_teop *t = slua_test_teop(L, -1);
    if (!t)
      return slua_argerror(L, arg, fname, "output %d: te tensor expected, got %s", i + 1,
                           slua_typename(L, -1)), NULL;
    if (*g && t->g != *g)
      return slua_error(L, "ValueError", "%s: outputs from different graphs (te.reset() was called "
                        "between building them)", fname), NULL;
    *g = t->g;
    outs[i] = t->op;
    lua_pop(L, 1);
  }
  *n = (int)count;
  return outs;
}
