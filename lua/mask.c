/*
 * stof.mask: attention masks (stof.Mask) and their two-level format (stof.MaskFormat).
 *
 *   stof.mask.dense() causal() window(l, r) sliding(w) causal_sliding(w) global(g)
 *   longformer(w, g) random_blocks(b, p[, seed]) bigbird(w, g, b, p[, seed])
 *   document(lengths)        a list of lengths, or a list of lists (one per batch element)
 *   dilated(w, d) from_tensor(t) fn(f[, {name=, varies_b=, varies_h=}]) suite(name, S)
 *   suite_names()
 *   a | b, a & b, a - b      union, intersection, difference (new masks)
 *   m:eval(b, h, i, j) or m:eval(i, j) -> boolean     m:varies() -> varies_b, varies_h
 *   m:format(S | {Sq, Sk}[, {tile = 64, batch = 1, heads = 1}]) -> stof.MaskFormat
 *   tostring(m)              the description
 *
 *   f.stats (a table) f.Sq f.Sk f.T f.B f.H f.nrow f.ncol f.mask_b f.mask_h f.nmask
 *   f.nentry f.nword f.description f.mask    f:get(b, h, i, j) f:tile(b, h, r, c) f:count(b, h)
 *   f:expand(b, h) -> bool stof.Tensor [Sq, Sk]   f:svg(path[, b, h])   f:map([b, h])
 *   tostring(f)              a header of stats and the text tile map of instance (0, 0)
 *
 * Lifetimes: a Mask owns its stof_mask (the core shares operands' nodes when combining and
 * counts references on them, so masks are independent in C); its user values keep alive what its predicates call back into:
 * the Lua function of an fn mask (user value 1), the operands of a combined mask (user
 * values 1 and 2), so that a predicate never outlives its function. A MaskFormat owns its
 * stof_mask_format and keeps its mask alive (user value 1).
 *
 * Predicates: the C predicate of an fn mask gets an id (no pointer); the function is found
 * in a registry table with weak values (id -> function). A binding that may evaluate
 * predicates (eval, format) opens a slua_pred_call record first (a thread-local stack of them,
 * for predicates that evaluate masks themselves); the C predicate calls the function with
 * lua_pcall on that record's thread and, on failure, stashes the message there and
 * returns -1. The core call then fails cleanly and the binding raises the stashed message:
 * no longjmp ever crosses the core.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <stof/kernels.h>

#include "lua_int.h"

#define SLUA_MASK "stof.Mask"
#define SLUA_MASK_FORMAT "stof.MaskFormat"
#define REG_FNS "stof.mask.fns" /* registry: id -> predicate function, weak values */

#define MAP_MAX_ROWS 64 /* the text tile map shows at most this many tile rows ... */
#define MAP_MAX_COLS 96 /* ... and tile columns */

typedef struct slua_mask { /* stof.Mask: owns m (NULL once closed) */
  stof_mask *m;
  slua_ctx *lc;
  int busy; /* evaluations in progress: its predicates may not close it */
} slua_mask;

typedef struct slua_mask_format { /* stof.MaskFormat: owns f; user value 1: the mask */
  stof_mask_format *f;
  slua_ctx *lc;
} slua_mask_format;

/* ---------------------------------------------------------------- predicate calls */


static _Thread_local slua_pred_call *current_call;

/* Pushes the table of predicate functions (created on first use). */
static void push_fns(lua_State *L) { slua_registry_table(L, REG_FNS, "v"); }

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Seconds between progress lines of a long predicate evaluation: $STOF_PROGRESS_S (a number
 * >= 0; 0: at every check) or 10. */
static double progress_every(void) {
  const char *e = getenv("STOF_PROGRESS_S");
  char *end;
  double v = e && *e ? strtod(e, &end) : -1;
  return e && *e && !*end && v >= 0 && v < 1e9 ? v : 10.0;
}

/* Pushes the table of predicates and opens a record; nothing may raise until call_end. */
void slua_pred_begin(lua_State *L, slua_pred_call *c) {
  push_fns(L);
  c->L = L;
  c->fns = lua_gettop(L);
  c->failed = 0;
  c->b = c->h = c->i = c->j = 0;
  c->msg[0] = 0;
  c->ncall = 0;
  c->every = progress_every();
  c->t0 = now_s();
  c->t_next = c->t0 + c->every;
  c->prev = current_call;
  current_call = c;
}

/* Closes the record (its table stays on the stack). */
void slua_pred_end(slua_pred_call *c) { current_call = c->prev; }

static int call_fail(slua_pred_call *c, int64_t b, int64_t h, int64_t i, int64_t j,
                     const char *msg) {
  if (!c->failed) {
    c->failed = 1;
    c->b = b, c->h = h, c->i = i, c->j = j;
    snprintf(c->msg, sizeof c->msg, "%s", msg);
  }
  return -1;
}

/* The C predicate of every fn mask: ud is the id of its function. Calls only API functions
 * that cannot raise (the stack room is checked first; lua_pcall catches the rest). */
static int pred_trampoline(void *ud, int64_t b, int64_t h, int64_t i, int64_t j) {
  slua_pred_call *c = current_call;
  if (!c) return -1; /* evaluated outside a binding: there is no Lua thread to call */
  if (c->failed) return -1;
  lua_State *L = c->L;
  if (!lua_checkstack(L, 8)) return call_fail(c, b, h, i, j, "Lua stack overflow");
  int top = lua_gettop(L);
  if (lua_rawgeti(L, c->fns, (lua_Integer)(intptr_t)ud) != LUA_TFUNCTION) {
    lua_settop(L, top);
    return call_fail(c, b, h, i, j, "the predicate's function was collected");
  }
  lua_pushinteger(L, (lua_Integer)b);
  lua_pushinteger(L, (lua_Integer)h);
  lua_pushinteger(L, (lua_Integer)i);
  lua_pushinteger(L, (lua_Integer)j);
  int st = lua_pcall(L, 4, 1, 0);
  if (st != LUA_OK) {
    char buf[1024];
    if (lua_type(L, -1) == LUA_TSTRING)
      snprintf(buf, sizeof buf, "%s", lua_tostring(L, -1));
    else if (st == LUA_ERRMEM)
      snprintf(buf, sizeof buf, "not enough memory");
    else
      snprintf(buf, sizeof buf, "(error object is a %s value)", luaL_typename(L, -1));
    lua_settop(L, top);
    return call_fail(c, b, h, i, j, buf);
  }
  int t = lua_type(L, -1);
  if (t != LUA_TBOOLEAN) {
    char buf[160];
    snprintf(buf, sizeof buf, "the predicate returned %s, a boolean was expected",
             t == LUA_TNONE ? "nothing" : lua_typename(L, t));
    lua_settop(L, top);
    return call_fail(c, b, h, i, j, buf);
  }
  int v = lua_toboolean(L, -1);
  lua_settop(L, top);
  /* a trivial predicate costs ~35 ns a call, a real one more: a mask of S = 32768 is 10^9
   * calls, a minute or more; say where the evaluation is every c->every seconds (the clock
   * read every 2^20 calls) */
  if ((++c->ncall & 0xfffffu) == 0) {
    double t = now_s();
    if (t >= c->t_next) {
      fprintf(stderr, "stof: evaluating an fn mask's predicate: %llu calls in %.0f s, now at (b %lld, h %lld, i %lld)\n",
              (unsigned long long)c->ncall, t - c->t0, (long long)b, (long long)h, (long long)i);
      c->t_next = t + c->every;
    }
  }
  return v;
}

/* Raises the failure of a predicate (after a core call that failed, or an eval of -1),
 * clearing the core's message: "<where>: predicate failed in mask <desc> at (b, h, i, j):
 * <the predicate's error>". */
int slua_pred_raise(lua_State *L, stof_ctx *ctx, const char *where, const stof_mask *m,
                      const slua_pred_call *c) {
  if (ctx) stof_ctx_clear_error(ctx);
  if (!c->failed)
    return slua_error(L, "ValueError", "%s: predicate failed in mask %s", where,
                      m ? stof_mask_description(m) : "fn");
  return slua_error(L, "ValueError",
                    "%s: predicate failed in mask %s at (b %I, h %I, i %I, j %I): %s", where,
                    m ? stof_mask_description(m) : "fn", (lua_Integer)c->b, (lua_Integer)c->h,
                    (lua_Integer)c->i, (lua_Integer)c->j, c->msg);
}

/* ---------------------------------------------------------------- handles */

static int mask_gc(lua_State *L) {
  slua_mask *h = slua_checkudata(L, 1, SLUA_MASK, "Mask:close");
  if (h->m) {
    stof_mask_free(h->m);
    h->m = NULL;
  }
  if (h->lc) {
    slua_ctx_unref(h->lc);
    h->lc = NULL;
  }
  return 0;
}

/* Pushes a new, empty mask handle (m NULL) with two user values. */
static slua_mask *new_mask(lua_State *L) {
  slua_ctx *lc = slua_state_ctx(L);
  slua_mask *h = lua_newuserdatauv(L, sizeof *h, 2);
  h->m = NULL;
  h->lc = NULL;
  h->busy = 0;
  luaL_setmetatable(L, SLUA_MASK);
  h->lc = slua_ctx_ref(lc);
  return h;
}

stof_mask *slua_check_mask(lua_State *L, int arg, const char *fname) {
  slua_mask *h = luaL_testudata(L, arg, SLUA_MASK);
  if (!h) return slua_typeerror(L, arg, fname, SLUA_MASK), NULL;
  if (!h->m)
    return slua_error(L, "ValueError", "%s: bad argument #%d (the mask is closed)", fname, arg),
           NULL;
  return h->m;
}

/* Completes a constructor: the handle on top of the stack gets m, or raises (the core's
 * messages name the constructor). */
static int finish(lua_State *L, slua_mask *h, stof_status st, stof_mask *m) {
  if (st) return slua_raise(L, h->lc->ctx, st, NULL);
  h->m = m;
  return 1;
}

static int64_t check_int(lua_State *L, int arg, const char *fname, const char *what) {
  return (int64_t)slua_check_integer(L, arg, fname, what);
}

static double check_prob(lua_State *L, int arg, const char *fname) {
  if (lua_type(L, arg) != LUA_TNUMBER)
    return slua_argerror(L, arg, fname, "p must be a number, got %s",
                         lua_isnone(L, arg) ? "no value" : slua_typename(L, arg));
  return (double)lua_tonumber(L, arg);
}

static uint64_t opt_seed(lua_State *L, int arg, const char *fname) {
  if (lua_isnoneornil(L, arg)) return 0;
  int64_t s = check_int(L, arg, fname, "seed");
  if (s < 0)
    return slua_error(L, "ValueError", "%s: seed = %I must be >= 0", fname, (lua_Integer)s);
  return (uint64_t)s;
}

/* ---------------------------------------------------------------- constructors */

static int l_dense(lua_State *L) {
  slua_mask *h = new_mask(L);
  stof_mask *m = NULL;
  stof_status st = stof_mask_dense(h->lc->ctx, &m);
  return finish(L, h, st, m);
}

static int l_causal(lua_State *L) {
  slua_mask *h = new_mask(L);
  stof_mask *m = NULL;
  stof_status st = stof_mask_causal(h->lc->ctx, &m);
  return finish(L, h, st, m);
}

static int l_window(lua_State *L) {
  const char *fname = "stof.mask.window";
  int64_t l = check_int(L, 1, fname, "l"), r = check_int(L, 2, fname, "r");
  slua_mask *h = new_mask(L);
  stof_mask *m = NULL;
  stof_status st = stof_mask_window(h->lc->ctx, l, r, &m);
  return finish(L, h, st, m);
}

static int l_sliding(lua_State *L) {
  const char *fname = "stof.mask.sliding";
  int64_t w = check_int(L, 1, fname, "w");
  slua_mask *h = new_mask(L);
  stof_mask *m = NULL;
  stof_status st = stof_mask_sliding(h->lc->ctx, w, &m);
  return finish(L, h, st, m);
}

static int l_causal_sliding(lua_State *L) {
  const char *fname = "stof.mask.causal_sliding";
  int64_t w = check_int(L, 1, fname, "w");
  slua_mask *h = new_mask(L);
  stof_mask *m = NULL;
  stof_status st = stof_mask_causal_sliding(h->lc->ctx, w, &m);
  return finish(L, h, st, m);
}

static int l_global(lua_State *L) {
  const char *fname = "stof.mask.global";
  int64_t g = check_int(L, 1, fname, "g");
  slua_mask *h = new_mask(L);
  stof_mask *m = NULL;
  stof_status st = stof_mask_global(h->lc->ctx, g, &m);
  return finish(L, h, st, m);
}

static int l_longformer(lua_State *L) {
  const char *fname = "stof.mask.longformer";
  int64_t w = check_int(L, 1, fname, "w"), g = check_int(L, 2, fname, "g");
  slua_mask *h = new_mask(L);
  stof_mask *m = NULL;
  stof_status st = stof_mask_longformer(h->lc->ctx, w, g, &m);
  return finish(L, h, st, m);
}

static int l_random_blocks(lua_State *L) {
  const char *fname = "stof.mask.random_blocks";
  int64_t b = check_int(L, 1, fname, "b");
  double p = check_prob(L, 2, fname);
  uint64_t seed = opt_seed(L, 3, fname);
  slua_mask *h = new_mask(L);
  stof_mask *m = NULL;
  stof_status st = stof_mask_random_blocks(h->lc->ctx, b, p, seed, &m);
  return finish(L, h, st, m);
}

static int l_bigbird(lua_State *L) {
  const char *fname = "stof.mask.bigbird";
  int64_t w = check_int(L, 1, fname, "w"), g = check_int(L, 2, fname, "g");
  int64_t b = check_int(L, 3, fname, "b");
  double p = check_prob(L, 4, fname);
  uint64_t seed = opt_seed(L, 5, fname);
  slua_mask *h = new_mask(L);
  stof_mask *m = NULL;
  stof_status st = stof_mask_bigbird(h->lc->ctx, w, g, b, p, seed, &m);
  return finish(L, h, st, m);
}

static int l_dilated(lua_State *L) {
  const char *fname = "stof.mask.dilated";
  int64_t w = check_int(L, 1, fname, "w"), d = check_int(L, 2, fname, "d");
  slua_mask *h = new_mask(L);
  stof_mask *m = NULL;
  stof_status st = stof_mask_dilated(h->lc->ctx, w, d, &m);
  return finish(L, h, st, m);
}

/* Element k (1-based) of the list at idx (argument arg), an integer (raises otherwise);
 * what names it in messages. */
static int64_t list_int(lua_State *L, int arg, int idx, lua_Integer k, const char *fname,
                        const char *what) {
  lua_rawgeti(L, idx, k);
  int isint = 0;
  lua_Integer v = lua_type(L, -1) == LUA_TNUMBER ? lua_tointegerx(L, -1, &isint) : 0;
  char got[32];
  if (!isint)
    return slua_argerror(L, arg, fname, "%s %I must be an integer, got %s", what, k,
                         slua_intname(L, -1, got, sizeof got));
  lua_pop(L, 1);
  return (int64_t)v;
}

static int l_document(lua_State *L) {
  const char *fname = "stof.mask.document";
  if (!lua_istable(L, 1)) return slua_typeerror(L, 1, fname, "list of lengths");
  lua_settop(L, 1);
  lua_Integer n = (lua_Integer)lua_rawlen(L, 1);
  if (n == 0)
    return slua_error(L, "ValueError", "%s: the list of lengths is empty", fname);
  lua_rawgeti(L, 1, 1);
  int batched = lua_istable(L, -1);
  lua_pop(L, 1);
  if (!batched) {
    int64_t *len = slua_scratch(L, sizeof *len * (size_t)n);
    for (lua_Integer k = 1; k <= n; k++) len[k - 1] = list_int(L, 1, 1, k, fname, "length");
    slua_mask *h = new_mask(L);
    stof_mask *m = NULL;
    stof_status st = stof_mask_document(h->lc->ctx, (int64_t)n, len, &m);
    return finish(L, h, st, m);
  }
  /* A list of lists: batch element b has the lengths of list b + 1. */
  int64_t *nseq = slua_scratch(L, sizeof *nseq * (size_t)n); /* slot 2 */
  lua_Integer total = 0;
  for (lua_Integer b = 1; b <= n; b++) {
    lua_rawgeti(L, 1, b);
    if (!lua_istable(L, -1))
      return slua_argerror(L, 1, fname, "batch %I: list of lengths expected, got %s", b - 1,
                           slua_typename(L, -1));
    nseq[b - 1] = (int64_t)lua_rawlen(L, -1);
    total += (lua_Integer)nseq[b - 1];
    lua_pop(L, 1);
  }
  int64_t *len = slua_scratch(L, sizeof *len * (size_t)(total ? total : 1)); /* slot 3 */
  lua_Integer k = 0;
  for (lua_Integer b = 1; b <= n; b++) {
    lua_rawgeti(L, 1, b);
    int li = lua_gettop(L);
    char what[48];
    snprintf(what, sizeof what, "batch %lld: length", (long long)(b - 1));
    for (lua_Integer q = 1; q <= (lua_Integer)nseq[b - 1]; q++)
      len[k++] = list_int(L, 1, li, q, fname, what);
    lua_pop(L, 1);
  }
  slua_mask *h = new_mask(L);
  stof_mask *m = NULL;
  stof_status st = n == 1 ? stof_mask_document(h->lc->ctx, nseq[0], len, &m)
                          : stof_mask_document_batched(h->lc->ctx, (int64_t)n, nseq, len, &m);
  return finish(L, h, st, m);
}

static int l_from_tensor(lua_State *L) {
  const char *fname = "stof.mask.from_tensor";
  stof_tensor *t = slua_check_tensor(L, 1, fname);
  slua_mask *h = new_mask(L);
  stof_mask *m = NULL;
  stof_status st = stof_mask_from_tensor(h->lc->ctx, t, &m);
  return finish(L, h, st, m);
}

/* An optional boolean field of the options table at idx. */
static int opt_bool_field(lua_State *L, int idx, const char *key, int def, const char *fname) {
  int t = lua_getfield(L, idx, key);
  int v = def;
  if (t == LUA_TBOOLEAN) v = lua_toboolean(L, -1);
  else if (t != LUA_TNIL)
    return slua_argerror(L, idx, fname, "option %s must be a boolean, got %s", key,
                         slua_typename(L, -1));
  lua_pop(L, 1);
  return v;
}

/* Raises for a key of the options table at idx that is not among keys (NULL-terminated). */
static void check_option_keys(lua_State *L, int idx, const char *const *keys, const char *fname) {
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    lua_pop(L, 1);
    int known = 0;
    if (lua_type(L, -1) == LUA_TSTRING)
      for (const char *const *k = keys; *k && !known; k++) known = !strcmp(*k, lua_tostring(L, -1));
    if (!known) {
      const char *name =
          lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : slua_typename(L, -1);
      luaL_Buffer b;
      luaL_buffinit(L, &b);
      for (const char *const *k = keys; *k; k++) {
        if (k != keys) luaL_addstring(&b, ", ");
        luaL_addstring(&b, *k);
      }
      luaL_pushresult(&b);
      slua_error(L, "ValueError", "%s: unknown option '%s' (known: %s)", fname, name,
                 lua_tostring(L, -1));
    }
  }
}

static int l_fn(lua_State *L) {
  const char *fname = "stof.mask.fn";
  if (lua_type(L, 1) != LUA_TFUNCTION)
    return slua_typeerror(L, 1, fname, "predicate function f(b, h, i, j)");
  if (!lua_isnoneornil(L, 2) && !lua_istable(L, 2))
    return slua_typeerror(L, 2, fname, "options table");
  lua_settop(L, 2);
  char name[200];
  int vb = 1, vh = 1;
  name[0] = 0;
  if (lua_istable(L, 2)) {
    static const char *const keys[] = {"name", "varies_b", "varies_h", NULL};
    check_option_keys(L, 2, keys, fname);
    vb = opt_bool_field(L, 2, "varies_b", 1, fname);
    vh = opt_bool_field(L, 2, "varies_h", 1, fname);
    int t = lua_getfield(L, 2, "name");
    if (t == LUA_TSTRING) snprintf(name, sizeof name, "%s", lua_tostring(L, -1));
    else if (t != LUA_TNIL)
      return slua_argerror(L, 2, fname, "option name must be a string, got %s",
                           slua_typename(L, -1));
    lua_pop(L, 1);
  }
  if (!name[0]) { /* where the function was written: "file.lua:12" */
    lua_Debug ar;
    lua_pushvalue(L, 1);
    if (lua_getinfo(L, ">S", &ar) && ar.linedefined > 0) {
      const char *src = strrchr(ar.short_src, '/');
      snprintf(name, sizeof name, "%s:%d", src ? src + 1 : ar.short_src, ar.linedefined);
    } else {
      snprintf(name, sizeof name, "?");
    }
  }
  /* The function under a fresh id; the mask's user value 1 keeps it alive. */
  push_fns(L); /* 3 */
  lua_Integer id = lua_getfield(L, 3, "n") == LUA_TNUMBER ? lua_tointeger(L, -1) + 1 : 1;
  lua_pop(L, 1);
  lua_pushinteger(L, id);
  lua_setfield(L, 3, "n");
  lua_pushvalue(L, 1);
  lua_rawseti(L, 3, id);
  slua_mask *h = new_mask(L);
  lua_pushvalue(L, 1);
  lua_setiuservalue(L, -2, 1);
  stof_mask *m = NULL;
  stof_status st =
      stof_mask_fn(h->lc->ctx, pred_trampoline, (void *)(intptr_t)id, name, vb, vh, &m);
  return finish(L, h, st, m);
}

static int l_suite(lua_State *L) {
  const char *fname = "stof.mask.suite";
  if (lua_type(L, 1) != LUA_TSTRING) return slua_typeerror(L, 1, fname, "suite name");
  int64_t S = check_int(L, 2, fname, "S");
  if (S < 1) return slua_error(L, "ValueError", "%s: S = %I must be >= 1", fname, (lua_Integer)S);
  slua_mask *h = new_mask(L);
  stof_mask *m = NULL;
  stof_status st = stof_mask_suite(h->lc->ctx, lua_tostring(L, 1), S, &m);
  return finish(L, h, st, m);
}

static int l_suite_names(lua_State *L) {
  lua_newtable(L);
  for (int i = 0; stof_mask_suite_name(i); i++) {
    lua_pushstring(L, stof_mask_suite_name(i));
    lua_rawseti(L, -2, i + 1);
  }
  return 1;
}

/* ---------------------------------------------------------------- algebra */

static int combine(lua_State *L, const char *op,
                   stof_status (*f)(const stof_mask *, const stof_mask *, stof_mask **)) {
  char fname[32];
  snprintf(fname, sizeof fname, "Mask %s", op);
  for (int k = 1; k <= 2; k++)
    if (!luaL_testudata(L, k, SLUA_MASK))
      return slua_error(L, "TypeError", "%s: the %s operand must be a stof.Mask, got %s", fname,
                        k == 1 ? "left" : "right", slua_typename(L, k));
  stof_mask *a = slua_check_mask(L, 1, fname), *b = slua_check_mask(L, 2, fname);
  lua_settop(L, 2);
  slua_mask *h = new_mask(L);
  lua_pushvalue(L, 1); /* the operands' predicates must stay callable */
  lua_setiuservalue(L, 3, 1);
  lua_pushvalue(L, 2);
  lua_setiuservalue(L, 3, 2);
  stof_mask *m = NULL;
  stof_status st = f(a, b, &m);
  return finish(L, h, st, m);
}

static int mask_bor(lua_State *L) { return combine(L, "|", stof_mask_union); }
static int mask_band(lua_State *L) { return combine(L, "&", stof_mask_intersection); }
static int mask_sub(lua_State *L) { return combine(L, "-", stof_mask_difference); }

/* ---------------------------------------------------------------- mask methods */

static int mask_tostring(lua_State *L) {
  slua_mask *h = slua_checkudata(L, 1, SLUA_MASK, "Mask:__tostring");
  if (!h->m) lua_pushliteral(L, "stof.Mask (closed)");
  else lua_pushstring(L, stof_mask_description(h->m));
  return 1;
}

static int m_eval(lua_State *L) {
  const char *fname = "Mask:eval";
  stof_mask *m = slua_check_mask(L, 1, fname);
  int64_t b = 0, hh = 0, i, j;
  if (lua_gettop(L) <= 3) { /* m:eval(i, j) */
    i = check_int(L, 2, fname, "i");
    j = check_int(L, 3, fname, "j");
  } else {
    b = check_int(L, 2, fname, "b");
    hh = check_int(L, 3, fname, "h");
    i = check_int(L, 4, fname, "i");
    j = check_int(L, 5, fname, "j");
  }
  slua_mask *self = lua_touserdata(L, 1);
  slua_pred_call c;
  self->busy++;
  slua_pred_begin(L, &c);
  int v = stof_mask_eval(m, b, hh, i, j);
  slua_pred_end(&c);
  self->busy--;
  if (v < 0) return slua_pred_raise(L, NULL, fname, m, &c);
  lua_pushboolean(L, v);
  return 1;
}

static int m_varies(lua_State *L) {
  stof_mask *m = slua_check_mask(L, 1, "Mask:varies");
  lua_pushboolean(L, stof_mask_varies_b(m));
  lua_pushboolean(L, stof_mask_varies_h(m));
  return 2;
}

/* Mask:close() and __close: as __gc (which never meets a busy mask: a mask being evaluated
 * is on the stack), but refused while a predicate runs inside an evaluation of the mask. */
static int m_close(lua_State *L) {
  slua_mask *h = slua_checkudata(L, 1, SLUA_MASK, "Mask:close");
  if (h->busy)
    return slua_error(L, "ValueError", "Mask:close: the mask %s is being evaluated (closed "
                      "from its own predicate)", h->m ? stof_mask_description(h->m) : "");
  return mask_gc(L);
}

/* An optional positive integer field of the options table at idx. */
static int64_t opt_int_field(lua_State *L, int idx, const char *key, int64_t def,
                             const char *fname) {
  int t = lua_getfield(L, idx, key);
  int64_t v = def;
  if (t == LUA_TNUMBER) {
    int isint = 0;
    v = (int64_t)lua_tointegerx(L, -1, &isint);
    if (!isint)
      return slua_argerror(L, idx, fname, "option %s must be an integer, got %f", key,
                           (double)lua_tonumber(L, -1));
  } else if (t != LUA_TNIL) {
    return slua_argerror(L, idx, fname, "option %s must be an integer, got %s", key,
                         slua_typename(L, -1));
  }
  lua_pop(L, 1);
  return v;
}

static int m_format(lua_State *L) {
  const char *fname = "Mask:format";
  stof_mask *m = slua_check_mask(L, 1, fname);
  int64_t Sq, Sk;
  if (lua_type(L, 2) == LUA_TNUMBER) {
    Sq = Sk = check_int(L, 2, fname, "S");
  } else if (lua_istable(L, 2)) {
    if (lua_rawlen(L, 2) != 2)
      return slua_argerror(L, 2, fname, "{Sq, Sk} expected, got a table of %I",
                           (lua_Integer)lua_rawlen(L, 2));
    Sq = list_int(L, 2, 2, 1, fname, "extent");
    Sk = list_int(L, 2, 2, 2, fname, "extent");
  } else {
    return slua_typeerror(L, 2, fname, "sequence length S or {Sq, Sk}");
  }
  if (Sq < 1 || Sk < 1)
    return slua_error(L, "ValueError", "%s: sequence lengths must be >= 1, got Sq = %I, Sk = %I",
                      fname, (lua_Integer)Sq, (lua_Integer)Sk);
  int64_t T = 64, B = 1, H = 1;
  if (!lua_isnoneornil(L, 3)) {
    if (!lua_istable(L, 3)) return slua_typeerror(L, 3, fname, "options table");
    static const char *const keys[] = {"tile", "batch", "heads", NULL};
    check_option_keys(L, 3, keys, fname);
    T = opt_int_field(L, 3, "tile", 64, fname);
    B = opt_int_field(L, 3, "batch", 1, fname);
    H = opt_int_field(L, 3, "heads", 1, fname);
  }
  if (T < 16 || T > 128 || T % 16)
    return slua_error(L, "ValueError", "%s: tile = %I must be a multiple of 16 in [16, 128]", fname,
                      (lua_Integer)T);
  if (B < 1 || H < 1)
    return slua_error(L, "ValueError", "%s: batch = %I and heads = %I must be >= 1", fname,
                      (lua_Integer)B, (lua_Integer)H);
  lua_settop(L, 3);
  slua_ctx *lc = slua_state_ctx(L);
  slua_mask_format *h = lua_newuserdatauv(L, sizeof *h, 1); /* 4 */
  h->f = NULL;
  h->lc = NULL;
  luaL_setmetatable(L, SLUA_MASK_FORMAT);
  h->lc = slua_ctx_ref(lc);
  lua_pushvalue(L, 1);
  lua_setiuservalue(L, 4, 1);
  slua_mask *self = lua_touserdata(L, 1);
  slua_pred_call c;
  self->busy++;
  slua_pred_begin(L, &c); /* 5 */
  stof_status st = stof_mask_format_build(lc->ctx, m, B, H, Sq, Sk, (int)T, &h->f);
  slua_pred_end(&c);
  self->busy--;
  if (st && c.failed) return slua_pred_raise(L, lc->ctx, fname, m, &c);
  if (st) return slua_raise(L, lc->ctx, st, NULL);
  lua_settop(L, 4);
  return 1;
}

/* ---------------------------------------------------------------- formats */

static int format_gc(lua_State *L) {
  slua_mask_format *h = slua_checkudata(L, 1, SLUA_MASK_FORMAT, "MaskFormat:close");
  if (h->f) {
    stof_mask_format_free(h->f);
    h->f = NULL;
  }
  if (h->lc) {
    slua_ctx_unref(h->lc);
    h->lc = NULL;
  }
  return 0;
}

static const stof_mask_format *check_format(lua_State *L, int arg, const char *fname) {
  slua_mask_format *h = luaL_testudata(L, arg, SLUA_MASK_FORMAT);
  if (!h) return slua_typeerror(L, arg, fname, SLUA_MASK_FORMAT), NULL;
  if (!h->f)
    return slua_error(L, "ValueError", "%s: bad argument #%d (the format is closed)", fname, arg),
           NULL;
  return h->f;
}

/* The instance of the optional (b, h) at args arg, arg + 1 (default 0, 0); raises an
 * IndexError outside B x H. */
static int32_t check_instance(lua_State *L, const stof_mask_format *f, int arg,
                              const char *fname, int64_t *pb, int64_t *ph) {
  int64_t b = lua_isnoneornil(L, arg) ? 0 : check_int(L, arg, fname, "b");
  int64_t h = lua_isnoneornil(L, arg + 1) ? 0 : check_int(L, arg + 1, fname, "h");
  int32_t m = stof_mask_format_instance(f, b, h);
  if (m < 0)
    return slua_error(L, "IndexError", "%s: (b, h) = (%I, %I) outside B x H = %I x %I", fname,
                      (lua_Integer)b, (lua_Integer)h, (lua_Integer)f->B, (lua_Integer)f->H);
  if (pb) *pb = b;
  if (ph) *ph = h;
  return m;
}

/* The kind of tile (r, c) of instance m: '.' empty, '+' partial, '#' full. */
static char tile_char(const stof_mask_format *f, int32_t m, int64_t r, int64_t c) {
  const int32_t *rp = f->row_ptr + (int64_t)m * (f->nrow + 1) + r;
  int32_t lo = rp[0], hi = rp[1] - 1;
  while (lo <= hi) {
    int32_t mid = lo + (hi - lo) / 2;
    if (f->col_idx[mid] < c) lo = mid + 1;
    else if (f->col_idx[mid] > c) hi = mid - 1;
    else return f->bmp_off[mid] < 0 ? '#' : '+';
  }
  return '.';
}

static void add_bytes(luaL_Buffer *b, size_t n) {
  char s[48];
  if (n < 10 * 1024) snprintf(s, sizeof s, "%zu B", n);
  else if (n < 10 * 1024 * 1024) snprintf(s, sizeof s, "%.1f KiB", (double)n / 1024);
  else snprintf(s, sizeof s, "%.1f MiB", (double)n / (1024 * 1024));
  luaL_addstring(b, s);
}

/* Adds the header: the description, the dims, and the stats over all instances. */
static void add_header(luaL_Buffer *b, const stof_mask_format *f) {
  char s[512];
  luaL_addstring(b, "stof.MaskFormat ");
  luaL_addstring(b, f->desc);
  snprintf(s, sizeof s,
           ": Sq %lld x Sk %lld, tile %d (%d x %d tiles), B %lld x H %lld (%d instance%s)\n",
           (long long)f->Sq, (long long)f->Sk, f->T, f->nrow, f->ncol, (long long)f->B,
           (long long)f->H, f->nmask, f->nmask == 1 ? "" : "s");
  luaL_addstring(b, s);
  snprintf(s, sizeof s, "density %.4f  frac16 %.4f  tiles %lld full, %lld partial, %lld empty  "
           "nvalid %lld  ",
           f->density, f->frac16, (long long)f->ntile_full, (long long)f->ntile_partial,
           (long long)f->ntile_empty, (long long)f->nvalid);
  luaL_addstring(b, s);
  add_bytes(b, f->bytes);
  snprintf(s, sizeof s, "  built in %.3f ms", f->build_ms);
  luaL_addstring(b, s);
}

/* Adds the text tile map of instance m (b, h) (no trailing newline). */
static void add_map(luaL_Buffer *b, const stof_mask_format *f, int32_t m, int64_t bb, int64_t hh) {
  char s[160];
  if (f->nmask > 1) {
    snprintf(s, sizeof s, "instance (b %lld, h %lld): density %.4f\n", (long long)bb,
             (long long)hh,
             (double)stof_mask_format_count(f, bb, hh) / ((double)f->Sq * (double)f->Sk));
    luaL_addstring(b, s);
  }
  int64_t nr = f->nrow < MAP_MAX_ROWS ? f->nrow : MAP_MAX_ROWS;
  int64_t nc = f->ncol < MAP_MAX_COLS ? f->ncol : MAP_MAX_COLS;
  for (int64_t r = 0; r < nr; r++) {
    for (int64_t c = 0; c < nc; c++) luaL_addchar(b, tile_char(f, m, r, c));
    if (nc < f->ncol) {
      snprintf(s, sizeof s, " ... (%lld more)", (long long)(f->ncol - nc));
      luaL_addstring(b, s);
    }
    if (r + 1 < nr) luaL_addchar(b, '\n');
  }
  if (nr < f->nrow) {
    snprintf(s, sizeof s, "\n... (%lld more tile rows)", (long long)(f->nrow - nr));
    luaL_addstring(b, s);
  }
}

static int format_tostring(lua_State *L) {
  slua_mask_format *h = slua_checkudata(L, 1, SLUA_MASK_FORMAT, "MaskFormat:__tostring");
  if (!h->f) {
    lua_pushliteral(L, "stof.MaskFormat (closed)");
    return 1;
  }
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  add_header(&b, h->f);
  luaL_addchar(&b, '\n');
  add_map(&b, h->f, 0, 0, 0);
  luaL_pushresult(&b);
  return 1;
}

static int f_map(lua_State *L) {
  const char *fname = "MaskFormat:map";
  const stof_mask_format *f = check_format(L, 1, fname);
  int64_t bb = 0, hh = 0;
  int32_t m = check_instance(L, f, 2, fname, &bb, &hh);
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  add_map(&b, f, m, bb, hh);
  luaL_pushresult(&b);
  return 1;
}

static int f_get(lua_State *L) {
  const char *fname = "MaskFormat:get";
  const stof_mask_format *f = check_format(L, 1, fname);
  int64_t b = 0, hh = 0, i, j;
  if (lua_gettop(L) <= 3) {
    i = check_int(L, 2, fname, "i");
    j = check_int(L, 3, fname, "j");
  } else {
    b = check_int(L, 2, fname, "b");
    hh = check_int(L, 3, fname, "h");
    i = check_int(L, 4, fname, "i");
    j = check_int(L, 5, fname, "j");
  }
  lua_pushboolean(L, stof_mask_format_get(f, b, hh, i, j));
  return 1;
}

static int f_tile(lua_State *L) {
  const char *fname = "MaskFormat:tile";
  const stof_mask_format *f = check_format(L, 1, fname);
  int32_t m = check_instance(L, f, 2, fname, NULL, NULL);
  int64_t r = check_int(L, 4, fname, "r"), c = check_int(L, 5, fname, "c");
  if (r < 0 || r >= f->nrow || c < 0 || c >= f->ncol)
    return slua_error(L, "IndexError", "%s: tile (%I, %I) outside %d x %d tiles", fname,
                      (lua_Integer)r, (lua_Integer)c, f->nrow, f->ncol);
  char k = tile_char(f, m, r, c);
  lua_pushstring(L, k == '#' ? "full" : k == '+' ? "partial" : "empty");
  return 1;
}

static int f_count(lua_State *L) {
  const char *fname = "MaskFormat:count";
  const stof_mask_format *f = check_format(L, 1, fname);
  int64_t b = 0, hh = 0;
  check_instance(L, f, 2, fname, &b, &hh);
  lua_pushinteger(L, (lua_Integer)stof_mask_format_count(f, b, hh));
  return 1;
}

static int f_expand(lua_State *L) {
  const char *fname = "MaskFormat:expand";
  const stof_mask_format *f = check_format(L, 1, fname);
  int64_t b, hh;
  check_instance(L, f, 2, fname, &b, &hh);
  lua_settop(L, 3);
  slua_tensor *t = slua_new_tensor(L);
  int64_t shape[2] = {f->Sq, f->Sk};
  stof_status st = stof_tensor_new(t->lc->ctx, STOF_DTYPE_BOOL, 2, shape, STOF_DEVICE_CPU, &t->t);
  if (!st) st = stof_mask_format_expand(f, b, hh, t->t);
  if (st) return slua_raise(L, t->lc->ctx, st, NULL);
  return 1;
}

static int f_svg(lua_State *L) {
  const char *fname = "MaskFormat:svg";
  const stof_mask_format *f = check_format(L, 1, fname);
  if (lua_type(L, 2) != LUA_TSTRING) return slua_typeerror(L, 2, fname, "path string");
  int64_t b, hh;
  check_instance(L, f, 3, fname, &b, &hh);
  stof_status st = stof_mask_format_svg(f, b, hh, lua_tostring(L, 2));
  if (st) return slua_raise(L, f->ctx, st, NULL);
  lua_settop(L, 1);
  return 1;
}

static int f_close(lua_State *L) { return format_gc(L); }

static void push_stats(lua_State *L, const stof_mask_format *f) {
  lua_createtable(L, 0, 16);
#define SET_INT(k, v) (lua_pushinteger(L, (lua_Integer)(v)), lua_setfield(L, -2, k))
#define SET_NUM(k, v) (lua_pushnumber(L, (lua_Number)(v)), lua_setfield(L, -2, k))
  SET_NUM("density", f->density);
  SET_NUM("frac16", f->frac16);
  SET_INT("full", f->ntile_full);
  SET_INT("partial", f->ntile_partial);
  SET_INT("empty", f->ntile_empty);
  SET_INT("halfempty", f->ntile_halfempty);
  SET_INT("tiles", f->ntile_full + f->ntile_partial + f->ntile_empty);
  SET_INT("nvalid", f->nvalid);
  SET_INT("bytes", f->bytes);
  SET_NUM("build_ms", f->build_ms);
  SET_INT("nentry", f->nentry);
  SET_INT("nword", f->nword);
  SET_INT("nmask", f->nmask);
#undef SET_INT
#undef SET_NUM
}

static const luaL_Reg format_methods[] = {
    {"get", f_get},     {"tile", f_tile}, {"count", f_count}, {"expand", f_expand},
    {"svg", f_svg},     {"map", f_map},   {"close", f_close}, {NULL, NULL},
};

static int format_index(lua_State *L) {
  slua_mask_format *h = slua_checkudata(L, 1, SLUA_MASK_FORMAT, "MaskFormat");
  if (lua_type(L, 2) != LUA_TSTRING) return 0;
  const char *k = lua_tostring(L, 2);
  if (lua_getfield(L, lua_upvalueindex(1), k) != LUA_TNIL) return 1;
  lua_pop(L, 1);
  if (!strcmp(k, "mask")) {
    lua_getiuservalue(L, 1, 1);
    return 1;
  }
  const stof_mask_format *f = h->f;
  if (!f) return slua_error(L, "ValueError", "MaskFormat.%s: the format is closed", k);
  if (!strcmp(k, "stats")) push_stats(L, f);
  else if (!strcmp(k, "description")) lua_pushstring(L, f->desc);
  else if (!strcmp(k, "Sq")) lua_pushinteger(L, (lua_Integer)f->Sq);
  else if (!strcmp(k, "Sk")) lua_pushinteger(L, (lua_Integer)f->Sk);
  else if (!strcmp(k, "T")) lua_pushinteger(L, f->T);
  else if (!strcmp(k, "B")) lua_pushinteger(L, (lua_Integer)f->B);
  else if (!strcmp(k, "H")) lua_pushinteger(L, (lua_Integer)f->H);
  else if (!strcmp(k, "nrow")) lua_pushinteger(L, f->nrow);
  else if (!strcmp(k, "ncol")) lua_pushinteger(L, f->ncol);
  else if (!strcmp(k, "nmask")) lua_pushinteger(L, f->nmask);
  else if (!strcmp(k, "mask_b")) lua_pushinteger(L, f->mask_b);
  else if (!strcmp(k, "mask_h")) lua_pushinteger(L, f->mask_h);
  else if (!strcmp(k, "nentry")) lua_pushinteger(L, f->nentry);
  else if (!strcmp(k, "nword")) lua_pushinteger(L, (lua_Integer)f->nword);
  else return 0;
  return 1;
}

/* ---------------------------------------------------------------- registration */

static const luaL_Reg mask_methods[] = {
    {"eval", m_eval}, {"format", m_format}, {"varies", m_varies}, {"close", m_close},
    {NULL, NULL},
};

void slua_open_mask(lua_State *L, int idx) {
  idx = lua_absindex(L, idx);
  if (luaL_newmetatable(L, SLUA_MASK)) {
    luaL_newlib(L, mask_methods);
    lua_setfield(L, -2, "__index");
    static const luaL_Reg meta[] = {
        {"__bor", mask_bor},   {"__band", mask_band}, {"__sub", mask_sub},
        {"__tostring", mask_tostring}, {"__gc", mask_gc}, {"__close", m_close},
        {NULL, NULL},
    };
    luaL_setfuncs(L, meta, 0);
  }
  lua_pop(L, 1);
  if (luaL_newmetatable(L, SLUA_MASK_FORMAT)) {
    luaL_newlib(L, format_methods);
    lua_pushcclosure(L, format_index, 1);
    lua_setfield(L, -2, "__index");
    static const luaL_Reg meta[] = {
        {"__tostring", format_tostring}, {"__gc", format_gc}, {"__close", format_gc},
        {NULL, NULL},
    };
    luaL_setfuncs(L, meta, 0);
  }
  lua_pop(L, 1);

  static const luaL_Reg fns[] = {
      {"dense", l_dense},
      {"causal", l_causal},
      {"window", l_window},
      {"sliding", l_sliding},
      {"causal_sliding", l_causal_sliding},
      {"global", l_global},
      {"longformer", l_longformer},
      {"random_blocks", l_random_blocks},
      {"bigbird", l_bigbird},
      {"document", l_document},
      {"dilated", l_dilated},
      {"from_tensor", l_from_tensor},
      {"fn", l_fn},
      {"suite", l_suite},
      {"suite_names", l_suite_names},
      {NULL, NULL},
  };
  luaL_newlib(L, fns);
  luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
  lua_pushvalue(L, -2);
  lua_setfield(L, -2, "stof.mask");
  lua_pop(L, 1);
  lua_setfield(L, idx, "mask");
}
