/*
 * Attention from Lua: stof.attention(q, k, v, mask[, opts]) runs the sparse attention
 * kernels (GPU tensors) or the CPU implementation (CPU tensors); stof.attention_plan fixes
 * a shape and mask for repeated runs; stof.explain says which kernel the selector picks
 * and why; stof.te.attention(q, k, v, mask[, scale | opts]) puts attention into a TE graph
 * as an opaque extern op whose CPU implementation the interpreter calls. Score modifiers
 * (opts bias / buckets / max_distance / bidirectional, alibi, softcap: check_mod) reach the
 * CPU implementation and the GPU plans (compiled into their kernels).
 * A plan times itself with device events (plan:time, for stof.bench.attention and scripts
 * that measure).
 *
 * The GPU engine is one per Lua state (registry "stof.attn_engine"). Plans made by
 * stof.attention are cached per mask handle (a weak-keyed table), per dims and options.
 * Masks used inside a graph are kept alive by the graph (weak-keyed table graph -> masks).
 */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lua_int.h"

#define SLUA_ENGINE "stof.AttnEngine"
#define SLUA_PLAN "stof.AttnPlan"
#define REG_ENGINE "stof.attn_engine"
#define REG_PLANS "stof.attn_plans"     /* mask handle -> {key -> plan}, weak keys */
#define REG_GRAPH_MASKS "stof.graph_masks" /* graph handle -> {masks}, weak keys */

typedef struct slua_engine {
  stof_attn_engine *e;
  slua_ctx *lc;
} slua_engine;

typedef struct slua_plan { /* user value 1: the engine handle; 2: the mask handle */
  stof_attn_plan *p;
  slua_ctx *lc;
} slua_plan;

static int engine_gc(lua_State *L) {
  slua_engine *h = slua_checkudata(L, 1, SLUA_ENGINE, "AttnEngine:__gc");
  if (h->e) stof_attn_engine_free(h->e);
  h->e = NULL;
  if (h->lc) slua_ctx_unref(h->lc);
  h->lc = NULL;
  return 0;
}

static int plan_gc(lua_State *L) {
  slua_plan *h = slua_checkudata(L, 1, SLUA_PLAN, "AttnPlan:close");
  if (h->p) stof_attn_plan_free(h->p);
  h->p = NULL;
  if (h->lc) slua_ctx_unref(h->lc);
  h->lc = NULL;
  return 0;
}

/* Pushes the state's engine handle (created on first use: needs a GPU). */
static slua_engine *push_engine(lua_State *L, const char *fname) {
  if (lua_getfield(L, LUA_REGISTRYINDEX, REG_ENGINE) == LUA_TUSERDATA) return lua_touserdata(L, -1);
  lua_pop(L, 1);
  slua_ctx *lc = slua_state_ctx(L);
  slua_engine *h = lua_newuserdatauv(L, sizeof *h, 0);
  h->e = NULL;
  h->lc = NULL;
  luaL_setmetatable(L, SLUA_ENGINE);
  stof_status st = stof_attn_engine_new(lc->ctx, &h->e);
  if (st) return slua_raise(L, lc->ctx, st, fname), NULL;
  h->lc = slua_ctx_ref(lc);
  lua_pushvalue(L, -1);
  lua_setfield(L, LUA_REGISTRYINDEX, REG_ENGINE);
  return h;
}

static const char *const opt_keys[] = {"kernel", "tile", "warps", "stages", "portable", "scale", "split", "order", "order_group", "key64", "qshift", "lazy", NULL};
static const char *const explain_opt_keys[] = {"kernel", "tile", "warps", "stages", "portable", "scale", "split", "order", "order_group", "key64", "qshift", "lazy", "gpu",
                                               "mod", "softcap", "buckets", "max_distance", "bidirectional", NULL};
/* stof.attention's options: opt_keys and the score modifiers'; te.attention's */
static const char *const attn_opt_keys[] = {"kernel", "tile", "warps", "stages", "portable", "scale", "split", "order", "order_group", "key64", "qshift", "lazy", "bias",
                                            "buckets", "max_distance", "bidirectional", "alibi", "softcap", NULL};
static const char *const te_opt_keys[] = {"scale", "bias", "buckets", "max_distance", "bidirectional", "alibi",
                                          "softcap", NULL};

/* The bias table or slopes at idx: a te tensor (te 1) or a stof.Tensor; raises otherwise. */
static void check_bias_value(lua_State *L, int idx, const char *fname, const char *key, int te) {
  if (te ? slua_test_teop(L, idx) != NULL : luaL_testudata(L, idx, SLUA_TENSOR) != NULL) return;
  slua_error(L, "TypeError", "%s: option %s must be a %s, got %s", fname, key, te ? "te tensor" : "stof.Tensor",
             slua_typename(L, idx));
}

/* The score modifier of the options table at idx (absent or nil: none): {bias = table [H,
 * buckets], buckets =, max_distance = (128), bidirectional = (true), alibi = slopes [H] or
 * true, softcap =}. Returns the stack index of the bias table or slopes (0: none). */
static int check_mod(lua_State *L, int idx, const char *fname, int te, stof_attn_mod *m) {
  memset(m, 0, sizeof *m);
  if (!lua_istable(L, idx)) return 0;
  idx = lua_absindex(L, idx);
  int bias = 0;
  int has_bias = lua_getfield(L, idx, "bias") != LUA_TNIL;
  int has_alibi = lua_getfield(L, idx, "alibi") != LUA_TNIL && !(lua_isboolean(L, -1) && !lua_toboolean(L, -1));
  if (has_bias && has_alibi) slua_error(L, "ValueError", "%s: options bias and alibi exclude each other", fname);
  if (has_bias) {
    check_bias_value(L, -2, fname, "bias", te);
    m->kind = STOF_ATTN_MOD_T5_BIAS;
    bias = lua_absindex(L, -2);
  } else if (has_alibi) {
    m->kind = STOF_ATTN_MOD_ALIBI;
    if (!lua_isboolean(L, -1)) {
      check_bias_value(L, -1, fname, "alibi", te);
      bias = lua_absindex(L, -1);
    }
  }
  /* the two values stay on the stack (bias refers to one of them) */
  static const char *const t5_keys[] = {"buckets", "max_distance", "bidirectional"};
  m->bidirectional = 1;
  m->max_distance = 128;
  for (int i = 0; i < 3; i++) {
    int t = lua_getfield(L, idx, t5_keys[i]);
    if (t != LUA_TNIL && !has_bias)
      slua_error(L, "ValueError", "%s: option %s is for the T5 bias (give bias = its [H, buckets] table)", fname,
                 t5_keys[i]);
    if (t != LUA_TNIL && i < 2 && (!lua_isinteger(L, -1) || lua_tointeger(L, -1) <= 0 || lua_tointeger(L, -1) > INT32_MAX))
      slua_error(L, "ValueError", "%s: option %s must be a positive integer", fname, t5_keys[i]);
    if (t != LUA_TNIL && i == 2 && t != LUA_TBOOLEAN)
      slua_error(L, "TypeError", "%s: option bidirectional must be a boolean", fname);
    if (t != LUA_TNIL) {
      if (i == 0) m->num_buckets = (int)lua_tointeger(L, -1);
      else if (i == 1) m->max_distance = (int)lua_tointeger(L, -1);
      else m->bidirectional = lua_toboolean(L, -1);
    }
    lua_pop(L, 1);
  }
  if (has_bias && !m->num_buckets) { /* the table's columns */
    int64_t nb = 0;
    if (te) {
      const stof_op *op = slua_test_teop(L, bias)->op;
      nb = op->ndim == 2 ? op->shape[1] : 0;
    } else {
      const stof_tensor *t = slua_check_tensor(L, bias, fname);
      nb = t->ndim == 2 ? t->shape[1] : 0;
    }
    if (nb <= 0 || nb > INT32_MAX)
      slua_error(L, "ShapeError", "%s: option bias must be the [H, buckets] table of the T5 bias", fname);
    m->num_buckets = (int)nb;
  }
  if (lua_getfield(L, idx, "softcap") != LUA_TNIL) {
    if (!lua_isnumber(L, -1) || !(lua_tonumber(L, -1) > 0) || isinf(lua_tonumber(L, -1)))
      slua_error(L, "ValueError", "%s: option softcap must be a positive number", fname);
    m->softcap = (float)lua_tonumber(L, -1);
  }
  lua_pop(L, 1);
  return bias;
}

/* Reads the options table at idx (absent or nil: defaults); known lists its keys. */
static stof_attn_opts check_opts(lua_State *L, int idx, const char *fname, const char *const *known) {
  stof_attn_opts o = {0};
  if (lua_isnoneornil(L, idx)) return o;
  if (!lua_istable(L, idx)) return slua_typeerror(L, idx, fname, "options table"), o;
  slua_check_keys(L, idx, fname, "option", known);
  if (lua_getfield(L, idx, "kernel") != LUA_TNIL) {
    const char *k = lua_tostring(L, -1);
    int found = 0;
    for (int i = 0; k && i < STOF_ATTN_KERNEL_COUNT; i++)
      if (strcmp(k, stof_attn_kernel_name((stof_attn_kernel)i)) == 0) o.kernel = (stof_attn_kernel)i, found = 1;
    if (!found) slua_error(L, "ValueError", "%s: kernel must be \"auto\", \"block\" or \"row\"", fname);
  }
  lua_pop(L, 1);
  static const char *const ints[] = {"tile", "warps", "stages", "split", "order", "order_group", "key64", "qshift", "lazy"};
  int *dst[] = {&o.tile, &o.warps, &o.stages, &o.split, &o.order, &o.order_group, &o.key64, &o.qshift, &o.lazy};
  for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
    if (lua_getfield(L, idx, ints[i]) != LUA_TNIL) {
      if (!lua_isinteger(L, -1)) slua_error(L, "TypeError", "%s: option %s must be an integer", fname, ints[i]);
      lua_Integer v = lua_tointeger(L, -1);
      if (v < INT_MIN || v > INT_MAX)
        slua_error(L, "ValueError", "%s: option %s = %I is out of range", fname, ints[i], v);
      *dst[i] = (int)v;
    }
    lua_pop(L, 1);
  }
  if (lua_getfield(L, idx, "portable") != LUA_TNIL) o.portable = lua_toboolean(L, -1);
  lua_pop(L, 1);
  if (lua_getfield(L, idx, "scale") != LUA_TNIL) {
    if (!lua_isnumber(L, -1) || lua_tonumber(L, -1) <= 0)
      slua_error(L, "ValueError", "%s: option scale must be a positive number", fname);
    o.scale = (float)lua_tonumber(L, -1);
  }
  lua_pop(L, 1);
  return o;
}

/* Makes a plan for (mask at midx, dims); pushes its handle. */
static slua_plan *push_plan(lua_State *L, int midx, const int64_t d[6], stof_dtype dtype,
                            const stof_attn_opts *o, const char *fname) {
  stof_mask *m = slua_check_mask(L, midx, fname);
  slua_engine *eh = push_engine(L, fname);
  int eidx = lua_gettop(L);
  slua_plan *h = lua_newuserdatauv(L, sizeof *h, 2);
  h->p = NULL;
  h->lc = NULL;
  luaL_setmetatable(L, SLUA_PLAN);
  lua_pushvalue(L, eidx);
  lua_setiuservalue(L, -2, 1);
  lua_pushvalue(L, midx);
  lua_setiuservalue(L, -2, 2);
  slua_pred_call c;
  slua_pred_begin(L, &c);
  stof_ctx *ctx = eh->lc->ctx;
  stof_status st = stof_attn_plan_new(eh->e, m, d[0], d[1], d[2], d[3], d[4], d[5], dtype, o, &h->p);
  slua_pred_end(&c);
  lua_pop(L, 1); /* the predicate table */
  if (st && c.failed) return slua_pred_raise(L, ctx, fname, m, &c), NULL;
  if (st) return slua_raise(L, ctx, st, fname), NULL;
  h->lc = slua_ctx_ref(eh->lc);
  lua_remove(L, eidx);
  return h;
}

static void dims_of(const stof_tensor *q, const stof_tensor *k, int64_t d[6]) {
  d[0] = q->shape[0], d[1] = q->shape[1], d[2] = k->shape[1];
  d[3] = q->shape[2], d[4] = k->shape[2], d[5] = q->shape[3];
}

static void check_rank4(lua_State *L, const stof_tensor *t, int arg, const char *fname) {
  if (t->ndim != 4)
    slua_error(L, "ShapeError", "%s: argument #%d has %d dimensions, [B, H, S, D] expected", fname, arg, t->ndim);
}

/* stof.attention(q, k, v, mask[, opts]) -> out */
static int l_attention(lua_State *L) {
  const char *fname = "stof.attention";
  stof_tensor *q = slua_check_tensor(L, 1, fname), *k = slua_check_tensor(L, 2, fname),
              *v = slua_check_tensor(L, 3, fname);
  stof_mask *m = slua_check_mask(L, 4, fname);
  stof_attn_opts o = check_opts(L, 5, fname, attn_opt_keys);
  int bidx = check_mod(L, 5, fname, 0, &o.mod);
  const stof_tensor *bias = bidx ? slua_check_tensor(L, bidx, fname) : NULL;
  for (int i = 1; i <= 3; i++) check_rank4(L, i == 1 ? q : i == 2 ? k : v, i, fname);
  int64_t d[6];
  dims_of(q, k, d);
  slua_ctx *lc = slua_state_ctx(L);
  slua_tensor *out = slua_new_tensor(L);
  int oidx = lua_gettop(L);
  stof_status st = stof_tensor_new(lc->ctx, q->dtype, 4, q->shape, q->device, &out->t);
  if (st) return slua_raise(L, lc->ctx, st, fname);
  if (q->device == STOF_DEVICE_CPU) {
    /* the GPU plans' tiles, so that a script that runs here runs there (the other options
     * only steer the GPU kernels) */
    if (o.tile != 0 && o.tile != 32 && o.tile != 64 && o.tile != 128)
      return slua_error(L, "ValueError", "%s: tile %d (32, 64 or 128, on the CPU as on the GPU)", fname, o.tile);
    if (o.tile == 32 && o.kernel == STOF_ATTN_ROW)
      return slua_error(L, "UnsupportedError", "%s: tile 32 is the block-wise kernel's (row-wise asked for; "
                        "refused on the GPU too)", fname);
    /* a mask that keeps no pair gives zeros (DESIGN.md: rows with no valid key give zeros) */
    stof_mask_format *f = NULL;
    slua_pred_call c;
    slua_pred_begin(L, &c);
    st = stof_mask_format_build(lc->ctx, m, d[0], d[1], d[3], d[4], o.tile ? o.tile : 64, &f);
    if (!st) st = stof_attention_cpu_mod(lc->ctx, q, k, v, f, o.scale, &o.mod, bias, out->t);
    slua_pred_end(&c);
    stof_mask_format_free(f);
    if (st && c.failed) return slua_pred_raise(L, lc->ctx, fname, m, &c);
    if (st) return slua_raise(L, lc->ctx, st, fname);
    lua_settop(L, oidx);
    return 1;
  }
  /* GPU: a plan per (mask handle, dims, dtype, options), cached */
  if (bias) o.bias_dtype = bias->dtype;
  char key[256]; /* the modifier too: a plan never runs without the modifier it was asked with */
  snprintf(key, sizeof key, "%lld %lld %lld %lld %lld %lld %d %d %d %d %d %d %g s%d o%d g%d k%d q%d l%d m%d %d %d %d %g %d",
           (long long)d[0], (long long)d[1], (long long)d[2], (long long)d[3], (long long)d[4], (long long)d[5],
           (int)q->dtype, (int)o.kernel, o.tile, o.warps, o.stages, o.portable, (double)o.scale, o.split, o.order,
           o.order_group, o.key64, o.qshift, o.lazy, (int)o.mod.kind, o.mod.bidirectional, o.mod.num_buckets, o.mod.max_distance, (double)o.mod.softcap,
           (int)o.bias_dtype);
  slua_registry_table(L, REG_PLANS, "k");
  int pidx = lua_gettop(L);
  lua_pushvalue(L, 4);
  if (lua_rawget(L, pidx) != LUA_TTABLE) {
    lua_pop(L, 1);
    lua_newtable(L);
    lua_pushvalue(L, 4);
    lua_pushvalue(L, -2);
    lua_rawset(L, pidx);
  }
  int tidx = lua_gettop(L);
  slua_plan *ph;
  if (lua_getfield(L, tidx, key) == LUA_TUSERDATA) {
    ph = lua_touserdata(L, -1);
  } else {
    lua_pop(L, 1);
    ph = push_plan(L, 4, d, q->dtype, &o, fname);
    lua_pushvalue(L, -1);
    lua_setfield(L, tidx, key);
  }
  st = stof_attn_plan_run_bias(ph->p, q, k, v, bias, out->t);
  if (st) return slua_raise(L, lc->ctx, st, fname);
  lua_settop(L, oidx);
  return 1;
}

/* stof.attention_plan(mask, {B=, H=, Hkv=, S= | Sq=, Sk=, D=, dtype=}, opts) -> plan */
static int l_attention_plan(lua_State *L) {
  const char *fname = "stof.attention_plan";
  slua_check_mask(L, 1, fname);
  if (!lua_istable(L, 2)) return slua_typeerror(L, 2, fname, "table {B=, H=, Hkv=, S= | Sq=, Sk=, D=, dtype=}");
  static const char *const dim_keys[] = {"B", "H", "Hkv", "S", "Sq", "Sk", "D", "dtype", NULL};
  slua_check_keys(L, 2, fname, "dims key", dim_keys);
  stof_attn_opts o = check_opts(L, 3, fname, opt_keys);
  int64_t d[6] = {1, 1, 0, 0, 0, 64};
  static const char *const names[] = {"B", "H", "Hkv", "Sq", "Sk", "D"};
  int64_t S = 0;
  if (lua_getfield(L, 2, "S") != LUA_TNIL) S = lua_tointeger(L, -1);
  lua_pop(L, 1);
  for (int i = 0; i < 6; i++) {
    if (lua_getfield(L, 2, names[i]) != LUA_TNIL) {
      if (!lua_isinteger(L, -1)) return slua_error(L, "TypeError", "%s: %s must be an integer", fname, names[i]);
      d[i] = lua_tointeger(L, -1);
    }
    lua_pop(L, 1);
  }
  if (!d[3]) d[3] = S;
  if (!d[4]) d[4] = S;
  if (!d[2]) d[2] = d[1];
  if (d[3] <= 0 || d[4] <= 0) return slua_error(L, "ValueError", "%s: give S (or Sq and Sk)", fname);
  lua_getfield(L, 2, "dtype");
  stof_dtype dt = (stof_dtype)slua_opt_dtype(L, lua_gettop(L), fname, STOF_DTYPE_F16);
  lua_pop(L, 1);
  push_plan(L, 1, d, dt, &o, fname);
  return 1;
}

static slua_plan *check_plan(lua_State *L, int idx, const char *fname) {
  slua_plan *h = slua_checkudata(L, idx, SLUA_PLAN, fname);
  if (!h->p) slua_error(L, "ValueError", "%s: the plan is closed", fname);
  return h;
}

/* plan:run(q, k, v[, out]) -> out */
static int plan_run(lua_State *L) {
  const char *fname = "AttnPlan:run";
  slua_plan *h = check_plan(L, 1, fname);
  stof_tensor *q = slua_check_tensor(L, 2, fname), *k = slua_check_tensor(L, 3, fname),
              *v = slua_check_tensor(L, 4, fname), *out;
  stof_ctx *ctx = h->lc->ctx;
  if (lua_isnoneornil(L, 5)) {
    check_rank4(L, q, 2, fname);
    slua_tensor *o = slua_new_tensor(L);
    stof_status st = stof_tensor_new(ctx, q->dtype, 4, q->shape, q->device, &o->t);
    if (st) return slua_raise(L, ctx, st, fname);
    out = o->t;
  } else {
    out = slua_check_tensor(L, 5, fname);
    lua_pushvalue(L, 5);
  }
  stof_status st = stof_attn_plan_run(h->p, q, k, v, out);
  if (st) return slua_raise(L, ctx, st, fname);
  return 1;
}

/* The tensor, or the tensors of the sequence, at arg into ts[max]; returns their count. */
static int check_tensor_set(lua_State *L, int arg, const char *fname, stof_tensor **ts, int max) {
  if (!lua_istable(L, arg)) return ts[0] = slua_check_tensor(L, arg, fname), 1;
  int n = (int)luaL_len(L, arg);
  if (n < 1 || n > max)
    return slua_error(L, "ValueError", "%s: argument #%d: a tensor or a list of 1 to %d tensors, got a table of %d", fname,
                      arg - 1, max, n);
  for (int i = 0; i < n; i++) {
    lua_geti(L, arg, i + 1);
    ts[i] = slua_check_tensor(L, -1, fname);
    lua_pop(L, 1); /* the table keeps it alive */
  }
  return n;
}

/* plan:time(q, k, v, out[, reps = 30[, warmup_ms = 0]]) -> median ms, {ms of each run}.
 * q, k, v: CUDA tensors, or lists of n of them: run r reads set r % n (rotating the inputs,
 * so that caches do not flatter). A first run, checked (a wrong tensor fails here, naming
 * it), then stof_attn_plan_time, as bench/bench_attention.c measures (5 warm-up launches,
 * then more for about warmup_ms, then reps runs between device events); the median is the
 * upper one for an even count. */
static int plan_time(lua_State *L) {
  const char *fname = "AttnPlan:time";
  slua_plan *h = check_plan(L, 1, fname);
  enum { NSET = STOF_ATTN_TIME_MAX_SETS };
  stof_tensor *q[NSET], *k[NSET], *v[NSET];
  int nq = check_tensor_set(L, 2, fname, q, NSET), nk = check_tensor_set(L, 3, fname, k, NSET),
      nv = check_tensor_set(L, 4, fname, v, NSET);
  if (nq != nk || nq != nv)
    return slua_error(L, "ValueError", "%s: %d q, %d k and %d v tensors (as many of each)", fname, nq, nk, nv);
  stof_tensor *out = slua_check_tensor(L, 5, fname);
  lua_Integer reps = lua_isnoneornil(L, 6) ? 30 : slua_check_integer(L, 6, fname, "reps");
  double warm_ms = slua_opt_number(L, 7, fname, "warmup_ms", 0);
  /* checked before the first run (stof_attn_plan_time checks the same, after it) */
  if (reps < 1 || reps > STOF_ATTN_TIME_MAX_REPS)
    return slua_error(L, "ValueError", "%s: reps = %I (1 to %d)", fname, reps, STOF_ATTN_TIME_MAX_REPS);
  if (!(warm_ms >= 0 && warm_ms <= STOF_ATTN_TIME_MAX_WARMUP_MS))
    return slua_error(L, "ValueError", "%s: warmup_ms = %f (0 to %d)", fname, warm_ms, STOF_ATTN_TIME_MAX_WARMUP_MS);
  float *ts = slua_scratch(L, sizeof *ts * (size_t)reps);
  float median = 0;
  stof_ctx *ctx = h->lc->ctx;
  stof_status st = stof_attn_plan_run(h->p, q[0], k[0], v[0], out);
  if (!st) st = stof_attn_plan_time(h->p, q, k, v, nq, out, (int64_t)reps, warm_ms, ts, &median);
  if (st) return slua_raise(L, ctx, st, fname);
  lua_pushnumber(L, median);
  lua_createtable(L, (int)reps, 0);
  for (lua_Integer r = 0; r < reps; r++) {
    lua_pushnumber(L, ts[r]);
    lua_rawseti(L, -2, r + 1);
  }
  return 2;
}

static void push_choice(lua_State *L, const stof_attn_choice *c) {
  lua_createtable(L, 0, 14);
  lua_pushstring(L, stof_attn_kernel_name(c->kernel));
  lua_setfield(L, -2, "kernel");
  lua_pushinteger(L, c->tile);
  lua_setfield(L, -2, "tile");
  lua_pushinteger(L, c->warps);
  lua_setfield(L, -2, "warps");
  lua_pushinteger(L, c->stages);
  lua_setfield(L, -2, "stages");
  lua_pushboolean(L, c->hopper);
  lua_setfield(L, -2, "hopper");
  lua_pushboolean(L, c->tma);
  lua_setfield(L, -2, "tma");
  lua_pushboolean(L, c->rowmask);
  lua_setfield(L, -2, "rowmask");
  lua_pushboolean(L, c->halfskip);
  lua_setfield(L, -2, "halfskip");
  lua_pushboolean(L, c->nopartial);
  lua_setfield(L, -2, "nopartial");
  lua_pushboolean(L, c->key64);
  lua_setfield(L, -2, "key64");
  lua_pushinteger(L, c->qshift);
  lua_setfield(L, -2, "qshift");
  lua_pushboolean(L, c->lazy);
  lua_setfield(L, -2, "lazy");
  lua_pushinteger(L, (lua_Integer)c->heavy_rows);
  lua_setfield(L, -2, "heavy_rows");
  lua_pushinteger(L, (lua_Integer)(c->order_group > 1 ? c->order_group : 1));
  lua_setfield(L, -2, "order_group");
  lua_pushinteger(L, (lua_Integer)c->split_rows);
  lua_setfield(L, -2, "split_rows");
  lua_pushinteger(L, (lua_Integer)c->split_chunks);
  lua_setfield(L, -2, "split_chunks");
  lua_pushnumber(L, c->frac16);
  lua_setfield(L, -2, "frac16");
  lua_pushnumber(L, c->threshold);
  lua_setfield(L, -2, "threshold");
  lua_pushstring(L, c->why);
  lua_setfield(L, -2, "why");
}

static int plan_index(lua_State *L) {
  slua_plan *h = check_plan(L, 1, "AttnPlan");
  if (lua_type(L, 2) != LUA_TSTRING) return lua_pushnil(L), 1; /* no such field */
  const char *key = lua_tostring(L, 2);
  if (strcmp(key, "choice") == 0) {
    push_choice(L, stof_attn_plan_choice(h->p));
  } else if (strcmp(key, "prepare_ms") == 0) {
    lua_pushnumber(L, stof_attn_plan_prepare_ms(h->p));
  } else if (strcmp(key, "nvalid") == 0) {
    lua_pushinteger(L, (lua_Integer)stof_attn_plan_nvalid(h->p));
  } else if (strcmp(key, "gpu") == 0) {
    stof_cuda_props props;
    stof_ctx *ctx = stof_attn_plan_ctx(h->p);
    if (stof_cuda_props_get(ctx, &props)) {
      stof_ctx_clear_error(ctx);
      lua_pushnil(L);
    } else {
      lua_pushstring(L, props.name);
    }
  } else if (strcmp(key, "run") == 0) {
    lua_pushcfunction(L, plan_run);
  } else if (strcmp(key, "time") == 0) {
    lua_pushcfunction(L, plan_time);
  } else if (strcmp(key, "close") == 0) {
    lua_pushcfunction(L, plan_gc);
  } else {
    lua_pushnil(L);
  }
  return 1;
}

static int plan_tostring(lua_State *L) {
  slua_plan *h = slua_checkudata(L, 1, SLUA_PLAN, "AttnPlan:__tostring");
  if (!h->p) return lua_pushliteral(L, "stof.AttnPlan (closed)"), 1;
  lua_pushfstring(L, "stof.AttnPlan: %s", stof_attn_plan_choice(h->p)->why);
  return 1;
}

/* GPUs that stof.explain can answer for without one (opts.gpu): compute capability, SMs,
 * opt-in shared memory per block (the CUDA programming guide's tables). */
static const struct {
  const char *name, *full;
  int cc_major, cc_minor, sms;
  size_t smem;
} explain_gpus[] = {
    {"h100", "NVIDIA H100 SXM (as given)", 9, 0, 132, 232448},
    {"h200", "NVIDIA H200 (as given)", 9, 0, 132, 232448},
    {"a100", "NVIDIA A100 (as given)", 8, 0, 108, 166912},
    {"l40s", "NVIDIA L40S (as given)", 8, 9, 142, 101376},
    {"rtx4090", "NVIDIA GeForce RTX 4090 (as given)", 8, 9, 128, 101376},
};

/* opts.gpu at idx (a table), if given: fills *props and returns 1; "none": the CPU's view
 * (returns 1 with sm_count 0); absent: 0. */
static int explain_gpu_opt(lua_State *L, int idx, const char *fname, stof_cuda_props *props) {
  if (!lua_istable(L, idx)) return 0;
  int found = lua_getfield(L, idx, "gpu") != LUA_TNIL;
  const char *g = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL; /* stays on the stack */
  if (!found) return lua_pop(L, 1), 0;
  memset(props, 0, sizeof *props);
  if (!g) return slua_error(L, "TypeError", "%s: option gpu must be a string (a GPU's name), got %s", fname,
                            slua_typename(L, -1));
  if (strcmp(g, "none") == 0) return lua_pop(L, 1), 1;
  for (size_t i = 0; i < sizeof explain_gpus / sizeof explain_gpus[0]; i++)
    if (strcmp(g, explain_gpus[i].name) == 0) {
      snprintf(props->name, sizeof props->name, "%s", explain_gpus[i].full);
      props->cc_major = explain_gpus[i].cc_major, props->cc_minor = explain_gpus[i].cc_minor;
      props->sm_count = explain_gpus[i].sms;
      props->smem_per_block_optin = explain_gpus[i].smem;
      lua_pop(L, 1);
      return 1;
    }
  char names[160] = "";
  for (size_t i = 0, n = 0; i < sizeof explain_gpus / sizeof explain_gpus[0]; i++)
    n += (size_t)snprintf(names + n, sizeof names - n, "%s\"%s\"", i ? ", " : "", explain_gpus[i].name);
  return slua_error(L, "ValueError", "%s: unknown gpu \"%s\" (one of %s, or \"none\" for no GPU)", fname, g,
                    names);
}

/* The explain line on the MMA work: the kept pairs over the pairs the chosen kernel computes
 * at the format's tile (T x T a non-empty tile, T x T / 2 a tile whose empty key half is
 * skipped), into buf. A query-shifted plan runs other tiles (fewer) than f's: the line then
 * gives f's, without the half skip (decided for the shifted tiles), and says so. */
static void explain_mma_work(const stof_mask_format *f, const stof_attn_choice *ch, char *buf, size_t n) {
  if (ch->kernel == STOF_ATTN_ROW) { /* it skips by 16 x 16 tile (frac16 of them non-empty) */
    double n16 = (double)((f->Sq + 15) / 16) * (double)((f->Sk + 15) / 16) * (double)f->nmask;
    double computed = 256 * f->frac16 * n16;
    snprintf(buf, n, "\n  MMA work: %.1f%% of the pairs computed are kept (16 x 16 tiles, the row-wise kernel)",
             computed > 0 ? 100 * (double)f->nvalid / computed : 0.0);
    return;
  }
  double t2 = (double)f->T * (double)f->T;
  double computed = t2 * (double)(f->ntile_full + f->ntile_partial);
  int half = ch->halfskip && f->T == 64 && !ch->qshift;
  if (half) computed -= t2 / 2 * (double)f->ntile_halfempty;
  snprintf(buf, n, "\n  MMA work: %.1f%% of the pairs computed are kept (tile %d%s%s)",
           computed > 0 ? 100 * (double)f->nvalid / computed : 0.0, f->T, half ? ", empty key halves skipped" : "",
           ch->qshift ? "; counted on the unshifted tiles: the plan runs the query-shifted ones, fewer" : "");
}

/* stof.explain(mask, {S=, Sq=, Sk=, B=, H=, D=}, opts) -> text, choice table. CPU only: the
 * selector answers for the GPU present, or for opts.gpu (a name of explain_gpus, or
 * "none"). */
static int l_explain(lua_State *L) {
  const char *fname = "stof.explain";
  stof_mask *m = slua_check_mask(L, 1, fname);
  if (!lua_istable(L, 2)) return slua_typeerror(L, 2, fname, "table {S=, B=, H=, D=}");
  static const char *const dim_keys[] = {"S", "Sq", "Sk", "B", "H", "D", NULL};
  slua_check_keys(L, 2, fname, "dims key", dim_keys);
  stof_attn_opts o = check_opts(L, 3, fname, explain_opt_keys);
  int64_t S = 0, Sq = 0, Sk = 0, B = 1, H = 1, D = 64;
  static const char *const names[] = {"S", "Sq", "Sk", "B", "H", "D"};
  int64_t *dst[] = {&S, &Sq, &Sk, &B, &H, &D};
  for (int i = 0; i < 6; i++) {
    if (lua_getfield(L, 2, names[i]) != LUA_TNIL) {
      if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) <= 0)
        return slua_error(L, "ValueError", "%s: %s must be a positive integer", fname, names[i]);
      *dst[i] = lua_tointeger(L, -1);
    }
    lua_pop(L, 1);
  }
  if (!Sq) Sq = S;
  if (!Sk) Sk = S;
  if (!Sq || !Sk) return slua_error(L, "ValueError", "%s: give S (or Sq and Sk)", fname);
  slua_ctx *lc = slua_state_ctx(L);
  stof_ctx *ctx = lc->ctx;
  stof_cuda_props props = {0};
  if (!explain_gpu_opt(L, 3, fname, &props) && stof_cuda_init(ctx) == STOF_OK) stof_cuda_props_get(ctx, &props);
  stof_ctx_clear_error(ctx);
  /* (before the format is built: an error below raises, and must leak nothing) the score
   * modifier a plan would compile in: {mod = "t5" | "alibi", softcap =, buckets =,
   * max_distance =, bidirectional =} (no table needed to explain) */
  stof_attn_mod mod = {.bidirectional = 1, .num_buckets = 32, .max_distance = 128};
  if (lua_istable(L, 3)) {
    if (lua_getfield(L, 3, "mod") != LUA_TNIL) {
      const char *k = lua_tostring(L, -1);
      if (!k || (strcmp(k, "t5") && strcmp(k, "alibi") && strcmp(k, "none")))
        return slua_error(L, "ValueError", "%s: option mod must be \"t5\", \"alibi\" or \"none\"", fname);
      mod.kind = !strcmp(k, "t5") ? STOF_ATTN_MOD_T5_BIAS : !strcmp(k, "alibi") ? STOF_ATTN_MOD_ALIBI : STOF_ATTN_MOD_NONE;
    }
    lua_pop(L, 1);
    static const char *const ints[] = {"buckets", "max_distance"};
    int *idst[] = {&mod.num_buckets, &mod.max_distance};
    for (int i = 0; i < 2; i++) {
      if (lua_getfield(L, 3, ints[i]) != LUA_TNIL) {
        if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) <= 0 || lua_tointeger(L, -1) > INT32_MAX)
          return slua_error(L, "ValueError", "%s: option %s must be a positive integer", fname, ints[i]);
        *idst[i] = (int)lua_tointeger(L, -1);
      }
      lua_pop(L, 1);
    }
    if (lua_getfield(L, 3, "bidirectional") != LUA_TNIL) mod.bidirectional = lua_toboolean(L, -1);
    lua_pop(L, 1);
    if (lua_getfield(L, 3, "softcap") != LUA_TNIL) {
      if (!lua_isnumber(L, -1) || !(lua_tonumber(L, -1) > 0))
        return slua_error(L, "ValueError", "%s: option softcap must be a positive number", fname);
      mod.softcap = (float)lua_tonumber(L, -1);
    }
    lua_pop(L, 1);
  }
  stof_status mst = stof_attn_mod_check(ctx, fname, &mod);
  if (mst) return slua_raise(L, ctx, mst, fname);
  o.mod = mod; /* the selector's rules read it (tile 128 in 64-key steps, three CTAs an SM) */
  stof_mask_format *f = NULL;
  slua_pred_call c;
  slua_pred_begin(L, &c);
  stof_status st = stof_mask_format_build(ctx, m, B, H, Sq, Sk, o.tile ? o.tile : 64, &f);
  slua_pred_end(&c);
  if (st && c.failed) return slua_pred_raise(L, ctx, fname, m, &c);
  if (st) return slua_raise(L, ctx, st, fname);
  char moddesc[320];
  stof_attn_mod_describe(&mod, moddesc, sizeof moddesc);
  stof_attn_choice ch;
  st = stof_attention_select(ctx, f, B, H, D, props.sm_count ? &props : NULL, &o, &ch);
  /* the format at the chosen tile (as the plan builds it): the split a plan would make is
   * decided from it, and the text shows its tiles after those the selector read */
  stof_mask_format *fs = NULL;
  if (!st && ch.tile != f->T) {
    slua_pred_begin(L, &c);
    st = stof_mask_format_build(ctx, m, B, H, Sq, Sk, ch.tile, &fs);
    slua_pred_end(&c);
  }
  if (!st) st = stof_attention_select_split(ctx, fs ? fs : f, B, H, D, props.sm_count ? &props : NULL, &o, &ch);
  if (st) {
    stof_mask_format_free(fs);
    stof_mask_format_free(f);
    if (c.failed) return slua_pred_raise(L, ctx, fname, m, &c);
    return slua_raise(L, ctx, st, fname);
  }
  if (fs)
    lua_pushfstring(L, "\n  tiles of %d (the plan's): %I full, %I partial, %I empty", fs->T,
                    (lua_Integer)fs->ntile_full, (lua_Integer)fs->ntile_partial, (lua_Integer)fs->ntile_empty);
  else
    lua_pushliteral(L, "");
  /* the share of the MMA work that is kept pairs, at the plan's tile: a kernel's fraction of
   * the roofline on this mask is at most that times its fraction on dense (docs/PERFORMANCE.md,
   * twenty-fifth session) */
  char work[200];
  explain_mma_work(fs ? fs : f, &ch, work, sizeof work);
  lua_pushstring(L, work);
  lua_concat(L, 2);
  stof_mask_format_free(fs);
  lua_pushfstring(L,
                  "mask %s at Sq %I, Sk %I (B %I, H %I, D %I)%s%s\n"
                  "  density %f, kept pairs %I per instance on average\n"
                  "  tiles of %d: %I full, %I partial, %I empty; non-empty 16x16 tiles %f%%",
                  f->desc, (lua_Integer)Sq, (lua_Integer)Sk, (lua_Integer)B, (lua_Integer)H, (lua_Integer)D,
                  props.sm_count ? " on " : "", props.sm_count ? props.name : "", f->density,
                  (lua_Integer)(f->nvalid / (f->nmask ? f->nmask : 1)), f->T, (lua_Integer)f->ntile_full,
                  (lua_Integer)f->ntile_partial, (lua_Integer)f->ntile_empty, 100 * f->frac16);
  lua_insert(L, -2); /* the plan's tiles after the selector's */
  lua_pushfstring(L, "\n  choice: %s\n  score modifier: %s", ch.why, moddesc);
  lua_concat(L, 3);
  stof_mask_format_free(f);
  push_choice(L, &ch);
  return 2;
}

/* stof.te.attention(q, k, v, mask[, scale]) -> TE tensor [B, H, Sq, D] */
static int te_attention(lua_State *L) {
  const char *fname = "te.attention";
  slua_teop *t[3];
  for (int i = 0; i < 3; i++) {
    t[i] = slua_test_teop(L, i + 1);
    if (!t[i]) return slua_typeerror(L, i + 1, fname, "te tensor");
    if (t[i]->op->ndim != 4)
      return slua_error(L, "ShapeError", "%s: %s has %d dimensions, [B, H, S, D] expected", fname,
                        t[i]->op->name, t[i]->op->ndim);
    if (t[i]->g != t[0]->g) return slua_error(L, "ValueError", "%s: tensors from different graphs", fname);
  }
  slua_check_mask(L, 4, fname);
  /* the 5th argument: the scale, or the options {scale =, bias =, alibi =, softcap = ...} */
  double scale = 0;
  stof_attn_mod mod = {0};
  const stof_op *bias = NULL;
  if (lua_istable(L, 5)) {
    slua_check_keys(L, 5, fname, "option", te_opt_keys);
    if (lua_getfield(L, 5, "scale") != LUA_TNIL && lua_type(L, -1) != LUA_TNUMBER)
      return slua_error(L, "TypeError", "%s: option scale must be a number, got %s", fname, slua_typename(L, -1));
    scale = lua_tonumber(L, -1);
    lua_pop(L, 1);
    int bidx = check_mod(L, 5, fname, 1, &mod);
    if (bidx) {
      slua_teop *b = slua_test_teop(L, bidx);
      if (b->g != t[0]->g) return slua_error(L, "ValueError", "%s: the bias and q are tensors of different graphs", fname);
      bias = b->op;
    }
  } else {
    scale = slua_opt_number(L, 5, fname, "scale", 0);
  }
  const stof_op *q = t[0]->op, *k = t[1]->op, *v = t[2]->op;
  const stof_mask *mask = slua_check_mask(L, 4, fname);
  stof_graph *g = t[0]->g;
  const stof_op *op;
  stof_status st = stof_attention_op_ex(g, q, k, v, bias, mask, (float)scale, &mod, &op);
  if (st) return slua_raise(L, stof_graph_ctx(g), st, fname);
  lua_getiuservalue(L, 1, 1); /* the graph handle */
  int gidx = lua_gettop(L);
  /* the graph borrows the mask: keep it alive with the graph */
  slua_registry_table(L, REG_GRAPH_MASKS, "k");
  lua_pushvalue(L, gidx);
  if (lua_rawget(L, -2) != LUA_TTABLE) {
    lua_pop(L, 1);
    lua_newtable(L);
    lua_pushvalue(L, gidx);
    lua_pushvalue(L, -2);
    lua_rawset(L, -4);
  }
  lua_pushvalue(L, 4);
  lua_rawseti(L, -2, (lua_Integer)lua_rawlen(L, -2) + 1);
  lua_pop(L, 2);
  slua_push_teop(L, op, gidx);
  return 1;
}

void slua_open_attention(lua_State *L, int idx) {
  idx = lua_absindex(L, idx);
  luaL_newmetatable(L, SLUA_ENGINE);
  lua_pushcfunction(L, engine_gc);
  lua_setfield(L, -2, "__gc");
  lua_pop(L, 1);
  luaL_newmetatable(L, SLUA_PLAN);
  lua_pushcfunction(L, plan_gc);
  lua_setfield(L, -2, "__gc");
  lua_pushcfunction(L, plan_gc);
  lua_setfield(L, -2, "__close");
  lua_pushcfunction(L, plan_index);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, plan_tostring);
  lua_setfield(L, -2, "__tostring");
  lua_pop(L, 1);
  lua_pushcfunction(L, l_attention);
  lua_setfield(L, idx, "attention");
  lua_pushcfunction(L, l_attention_plan);
  lua_setfield(L, idx, "attention_plan");
  lua_pushcfunction(L, l_explain);
  lua_setfield(L, idx, "explain");
  /* the timing limits (stof_attn_plan_time), for the Lua front ends' own checks */
  lua_createtable(L, 0, 3);
  lua_pushinteger(L, STOF_ATTN_TIME_MAX_REPS);
  lua_setfield(L, -2, "max_reps");
  lua_pushinteger(L, STOF_ATTN_TIME_MAX_WARMUP_MS);
  lua_setfield(L, -2, "max_warmup_ms");
  lua_pushinteger(L, STOF_ATTN_TIME_MAX_SETS);
  lua_setfield(L, -2, "max_sets");
  lua_setfield(L, idx, "attention_time_limits");
  if (lua_getfield(L, idx, "te") == LUA_TTABLE) {
    lua_pushcfunction(L, te_attention);
    lua_setfield(L, -2, "attention");
  }
  lua_pop(L, 1);
}
