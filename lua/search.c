/*
 * The search from Lua (include/stof/search.h): stof.tune and the user's templates.
 *
 *   stof.search.template("ikj", {
 *     matches = function(seg) return seg.tags[1] == "gemm" end,   -- optional
 *     schedule = function(s, seg)                                  -- s: a stof.Schedule
 *       local i, j, k = table.unpack(s:get_loops(s:get_block(seg.ops[1])))
 *       s:reorder(i, k, j)
 *     end})
 *   local plan, r = stof.tune({y}, {feed = {[x] = xs, ...}, target = "c", budget = 10,
 *                                   db = "tune.jsonl", workload = "mlp"})
 *   print(r.default_ms, r.best_ms, r.trials, r.from_db)
 *
 * Templates are kept in the registry (REG_TEMPLATES: a list of {name, matches, schedule}
 * in the order they were first registered). For one call of stof.tune each template
 * selected becomes a C stof_template whose callbacks call the Lua functions:
 *  - nothing raised in a callback crosses the C core: the callbacks run the Lua side in
 *    lua_pcall (building the segment table too) and turn an error into a status and a
 *    message on the context (the search records the candidate as failed and goes on);
 *  - `matches` has no way to fail in C: an error there makes the template match, and its
 *    schedule then fails with that error (so the record says why) without calling Lua;
 *  - the schedule handed to `schedule` is the search's (a clone it traces and replays):
 *    lent (lua/schedule.c), closed as soon as the function returns, so a handle a script
 *    keeps raises a "closed" error instead of touching freed memory.
 * The callbacks are called on the calling thread only (the search compiles on other
 * threads, never calling hooks there), while stof.tune's C function is running: its
 * stack slots (the call's templates, the deferred errors) stay valid throughout.
 */
#include <stdio.h>
#include <string.h>

#include <stof/search.h>

#include "lua_int.h"

#define REG_TEMPLATES "stof.search.templates" /* registry: list of {name=, matches=, schedule=} */
#define REG_TUNING "stof.search.tuning"       /* registry: true while stof.tune runs */
#define NAME_MAX_LEN 63                        /* search/tune.c keeps names under 64 bytes */

/* ---------------------------------------------------------------- the registry */

/* Pushes the template list (created on first use). */
static void push_registry(lua_State *L) { slua_registry_table(L, REG_TEMPLATES, NULL); }

/* The position of template name in the list at idx, or 0. */
static int find_template(lua_State *L, int idx, const char *name) {
  int n = (int)lua_rawlen(L, idx);
  for (int i = 1; i <= n; i++) {
    lua_rawgeti(L, idx, i);
    lua_getfield(L, -1, "name");
    int same = strcmp(lua_tostring(L, -1), name) == 0;
    lua_pop(L, 2);
    if (same) return i;
  }
  return 0;
}

static const char *const tmpl_keys[] = {"matches", "schedule", NULL};

/* stof.search.template(name, {matches = f, schedule = f}): registers (or replaces) a
 * template; stof.search.template(name, nil) removes it. */
static int l_template(lua_State *L) {
  const char *fname = "stof.search.template";
  lua_settop(L, 2);
  if (lua_type(L, 1) != LUA_TSTRING) return slua_typeerror(L, 1, fname, "template name string");
  size_t len;
  const char *name = lua_tolstring(L, 1, &len);
  if (len == 0 || len > NAME_MAX_LEN || strlen(name) != len || strpbrk(name, "@. \t\n"))
    return slua_error(L, "ValueError",
                      "%s: template name \"%s\": 1 to %d characters, no '@', '.', space or NUL (records "
                      "name a template as \"s3@NAME\")",
                      fname, name, NAME_MAX_LEN);
  if (stof_tune_name_reserved(name))
    return slua_error(L, "ValueError", "%s: template name \"%s\" is taken by a built-in template", fname, name);
  push_registry(L); /* 3 */
  int at = find_template(L, 3, name);
  if (lua_isnil(L, 2)) { /* removal */
    if (at) {
      int n = (int)lua_rawlen(L, 3);
      for (int i = at; i < n; i++) {
        lua_rawgeti(L, 3, i + 1);
        lua_rawseti(L, 3, i);
      }
      lua_pushnil(L);
      lua_rawseti(L, 3, n);
    }
    lua_pushboolean(L, at != 0);
    return 1;
  }
  if (!lua_istable(L, 2)) return slua_typeerror(L, 2, fname, "table {matches = function, schedule = function}");
  slua_check_keys(L, 2, fname, "template field", tmpl_keys);
  lua_createtable(L, 0, 3); /* 4: the entry */
  lua_pushvalue(L, 1);
  lua_setfield(L, 4, "name");
  if (lua_getfield(L, 2, "schedule") != LUA_TFUNCTION)
    return slua_error(L, "TypeError", "%s: template %s: schedule must be a function(s, seg), got %s", fname, name,
                      slua_typename(L, -1));
  lua_setfield(L, 4, "schedule");
  int t = lua_getfield(L, 2, "matches");
  if (t != LUA_TNIL && t != LUA_TFUNCTION)
    return slua_error(L, "TypeError", "%s: template %s: matches must be a function(seg), got %s", fname, name,
                      slua_typename(L, -1));
  lua_setfield(L, 4, "matches");
  lua_pushvalue(L, 4);
  lua_rawseti(L, 3, at ? at : (int)lua_rawlen(L, 3) + 1);
  lua_pushboolean(L, at != 0);
  return 1; /* true when it replaced one */
}

/* stof.search.templates() -> the registered names, in registration order */
static int l_templates(lua_State *L) {
  push_registry(L);
  int n = (int)lua_rawlen(L, -1);
  lua_createtable(L, n, 0);
  for (int i = 1; i <= n; i++) {
    lua_rawgeti(L, -2, i);
    lua_getfield(L, -1, "name");
    lua_rawseti(L, -3, i);
    lua_pop(L, 1);
  }
  return 1;
}

/* ---------------------------------------------------------------- callbacks */

typedef struct tune_call {
  lua_State *L;
  stof_ctx *ctx;
  /* slots of l_tune's frame (the callbacks run in it; they pass these tables on to the
   * functions they protect, whose frames have slots of their own) */
  int entries; /* the call's template entries, by template position (1-based) */
  int errs;    /* errors raised by matches, key "POS/SEGKEY" -> message */
} tune_call;

typedef struct tmpl_ud {
  tune_call *call;
  int pos; /* 1-based in call->entries */
} tmpl_ud;

/* The key of a segment for deferred errors: its template, index and ops (segment indices
 * are reused by the search's other fusion schemes). */
static void push_seg_key(lua_State *L, int pos, const stof_plan_seg_req *r) {
  lua_pushfstring(L, "%d/%d/%d/%d/%d", pos, r->index, r->nop, r->nop ? r->op[0]->id : -1,
                  r->nop ? r->op[r->nop - 1]->id : -1);
}

/* Pushes seg = {index, name, target, ops = {names}, tags = {tags ("" for none)}}. */
static void push_seg(lua_State *L, const stof_plan_seg_req *r) {
  lua_createtable(L, 0, 5);
  lua_pushinteger(L, r->index);
  lua_setfield(L, -2, "index");
  lua_pushstring(L, r->name ? r->name : "");
  lua_setfield(L, -2, "name");
  lua_pushstring(L, r->target ? r->target : "");
  lua_setfield(L, -2, "target");
  lua_createtable(L, r->nop, 0);
  lua_createtable(L, r->nop, 0);
  for (int i = 0; i < r->nop; i++) {
    lua_pushstring(L, r->op[i]->name ? r->op[i]->name : "");
    lua_rawseti(L, -3, i + 1);
    lua_pushstring(L, r->op[i]->tag ? r->op[i]->tag : "");
    lua_rawseti(L, -2, i + 1);
  }
  lua_setfield(L, -3, "tags");
  lua_setfield(L, -2, "ops");
}

/* The text of the error object at the top of the stack (not popped). */
static const char *error_text(lua_State *L) {
  if (lua_type(L, -1) == LUA_TSTRING) return lua_tostring(L, -1);
  return lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, -1));
}

/* In lua_pcall: matches(seg) of template u (1: light userdata u, 2: r, 3: entries, 4: errs)
 * -> boolean. */
static int protected_matches(lua_State *L) {
  tmpl_ud *u = lua_touserdata(L, 1);
  const stof_plan_seg_req *r = lua_touserdata(L, 2);
  lua_rawgeti(L, 3, u->pos); /* 5 */
  if (lua_getfield(L, 5, "matches") == LUA_TNIL) { /* 6 */
    lua_pushboolean(L, 1);
    return 1;
  }
  push_seg(L, r); /* 7 */
  if (lua_pcall(L, 1, 1, 0) == LUA_OK) {
    lua_pushboolean(L, lua_toboolean(L, -1));
    return 1;
  }
  /* the error waits for the schedule call, which reports it as the candidate's failure */
  const char *e = error_text(L);
  push_seg_key(L, u->pos, r);
  lua_pushfstring(L, "matches: %s", e);
  lua_rawset(L, 4);
  lua_pushboolean(L, 1);
  return 1;
}

static int cb_matches(void *ud, const stof_plan_seg_req *r) {
  tmpl_ud *u = ud;
  lua_State *L = u->call->L;
  if (!lua_checkstack(L, 6)) return 0;
  lua_pushcfunction(L, protected_matches);
  lua_pushlightuserdata(L, u);
  lua_pushlightuserdata(L, (void *)r);
  lua_pushvalue(L, u->call->entries);
  lua_pushvalue(L, u->call->errs);
  int ok = lua_pcall(L, 4, 1, 0) == LUA_OK && lua_toboolean(L, -1); /* an error here: Lua's memory */
  lua_pop(L, 1);
  return ok;
}

/* In lua_pcall: schedule(s, seg) of template u (1: u, 2: r, 3: s, 4: entries, 5: errs), s
 * lent for the call. */
static int protected_schedule(lua_State *L) {
  tmpl_ud *u = lua_touserdata(L, 1);
  const stof_plan_seg_req *r = lua_touserdata(L, 2);
  stof_sched *s = lua_touserdata(L, 3);
  push_seg_key(L, u->pos, r); /* 6 */
  if (lua_rawget(L, 5) == LUA_TSTRING) return lua_error(L);
  lua_rawgeti(L, 4, u->pos);  /* 7 */
  lua_getfield(L, 7, "schedule"); /* 8 */
  push_seg(L, r);                 /* 9 */
  slua_sched *h = slua_sched_push_lent(L, s); /* 10: nothing can raise until it is released */
  lua_pushvalue(L, 8);
  lua_pushvalue(L, 10);
  lua_pushvalue(L, 9);
  int st = lua_pcall(L, 2, 0, 0);
  slua_sched_release(h);
  if (st != LUA_OK) {
    lua_pushfstring(L, "schedule: %s", error_text(L));
    return lua_error(L);
  }
  return 0;
}

static stof_status cb_schedule(void *ud, const stof_plan_seg_req *r, stof_sched *s) {
  tmpl_ud *u = ud;
  lua_State *L = u->call->L;
  stof_ctx *ctx = u->call->ctx;
  if (!lua_checkstack(L, 8)) return stof_ctx_error(ctx, STOF_ERR_SCHEDULE, "Lua stack overflow");
  int base = lua_gettop(L);
  lua_pushcfunction(L, protected_schedule);
  lua_pushlightuserdata(L, u);
  lua_pushlightuserdata(L, (void *)r);
  lua_pushlightuserdata(L, s);
  lua_pushvalue(L, u->call->entries);
  lua_pushvalue(L, u->call->errs);
  int st = lua_pcall(L, 5, 0, 0);
  if (st == LUA_OK) return STOF_OK;
  /* a primitive that failed inside the function raised already: its message is in the
   * error, and the binding cleared the context */
  stof_ctx_clear_error(ctx);
  stof_status ret =
      stof_ctx_error(ctx, STOF_ERR_SCHEDULE, "%s", st == LUA_ERRMEM ? "Lua: not enough memory" : error_text(L));
  lua_settop(L, base);
  return ret;
}

/* ---------------------------------------------------------------- stof.tune */

static const char *const tune_keys[] = {"feed",   "target", "budget", "trials", "db",    "workload",
                                        "stage1", "stage2", "force",  "reps",   "warmup", "seed",
                                        "threads", "verbose", "trace", "templates", "inject_wrong", "inject_slow", "inject_hang", NULL};

/* An optional integer option key of the table at idx, in [lo, hi] (def when absent). */
static int opt_int(lua_State *L, int idx, const char *fname, const char *key, int def, int lo, int hi) {
  lua_getfield(L, idx, key);
  int v = def;
  if (!lua_isnil(L, -1)) {
    int isnum = 0;
    lua_Integer i = lua_type(L, -1) == LUA_TNUMBER ? lua_tointegerx(L, -1, &isnum) : 0;
    char got[32];
    if (!isnum)
      return slua_error(L, "TypeError", "%s: option %s must be an integer, got %s", fname, key,
                        slua_intname(L, -1, got, sizeof got));
    if (i < lo || i > hi)
      return slua_error(L, "ValueError", "%s: option %s = %I is out of range [%d, %d]", fname, key, i, lo, hi);
    v = (int)i;
  }
  lua_pop(L, 1);
  return v;
}

/* An optional boolean option (def when absent). */
static int opt_bool(lua_State *L, int idx, const char *fname, const char *key, int def) {
  int t = lua_getfield(L, idx, key);
  int v = def;
  if (t != LUA_TNIL) {
    if (t != LUA_TBOOLEAN)
      return slua_error(L, "TypeError", "%s: option %s must be a boolean, got %s", fname, key, slua_typename(L, -1));
    v = lua_toboolean(L, -1);
  }
  lua_pop(L, 1);
  return v;
}

/* An optional string option, left on the stack (so the string lives through the call);
 * NULL when absent. */
static const char *opt_str(lua_State *L, int idx, const char *fname, const char *key) {
  int t = lua_getfield(L, idx, key);
  if (t == LUA_TNIL) return NULL;
  if (t != LUA_TSTRING)
    return slua_error(L, "TypeError", "%s: option %s must be a string, got %s", fname, key, slua_typename(L, -1)), NULL;
  size_t len;
  const char *s = lua_tolstring(L, -1, &len);
  if (strlen(s) != len) return slua_error(L, "ValueError", "%s: option %s holds a NUL byte", fname, key), NULL;
  return s;
}

/* Pushes the list of template entries the call explores: the option templates (names) or
 * every registered one. */
static void push_entries(lua_State *L, int oidx, const char *fname) {
  push_registry(L);
  int reg = lua_gettop(L);
  int t = lua_getfield(L, oidx, "templates");
  int sel = lua_gettop(L);
  lua_newtable(L);
  int out = lua_gettop(L);
  if (t == LUA_TNIL) {
    int n = (int)lua_rawlen(L, reg);
    for (int i = 1; i <= n; i++) {
      lua_rawgeti(L, reg, i);
      lua_rawseti(L, out, i);
    }
  } else {
    if (t != LUA_TTABLE)
      slua_error(L, "TypeError", "%s: option templates must be a list of template names, got %s", fname,
                 slua_typename(L, sel));
    int n = (int)lua_rawlen(L, sel);
    for (int i = 1; i <= n; i++) {
      lua_rawgeti(L, sel, i);
      if (lua_type(L, -1) != LUA_TSTRING)
        slua_error(L, "TypeError", "%s: templates[%d] must be a template name, got %s", fname, i,
                   slua_typename(L, -1));
      int at = find_template(L, reg, lua_tostring(L, -1));
      if (!at) {
        luaL_Buffer b;
        luaL_buffinit(L, &b);
        int n = (int)lua_rawlen(L, reg);
        for (int k = 1; k <= n; k++) {
          if (k > 1) luaL_addstring(&b, ", ");
          lua_rawgeti(L, reg, k);
          lua_getfield(L, -1, "name");
          lua_remove(L, -2);
          luaL_addvalue(&b);
        }
        if (!n) luaL_addstring(&b, "none");
        luaL_pushresult(&b);
        slua_error(L, "ValueError", "%s: templates[%d]: no template named \"%s\" (registered: %s)", fname, i,
                   lua_tostring(L, -2), lua_tostring(L, -1));
      }
      lua_pop(L, 1);
      lua_rawgeti(L, reg, at);
      lua_rawseti(L, out, i);
    }
  }
  lua_replace(L, reg); /* the list where the registry was */
  lua_settop(L, reg);
}

static void push_result(lua_State *L, const stof_tune_result *r) {
  lua_createtable(L, 0, 12);
  lua_pushnumber(L, r->default_ms);
  lua_setfield(L, -2, "default_ms");
  lua_pushnumber(L, r->stage1_ms);
  lua_setfield(L, -2, "stage1_ms");
  lua_pushnumber(L, r->best_ms);
  lua_setfield(L, -2, "best_ms");
  lua_pushinteger(L, r->trials);
  lua_setfield(L, -2, "trials");
  lua_pushinteger(L, r->failed);
  lua_setfield(L, -2, "failed");
  lua_pushinteger(L, r->pruned);
  lua_setfield(L, -2, "pruned");
  lua_pushinteger(L, r->rejected);
  lua_setfield(L, -2, "rejected");
  lua_pushinteger(L, r->cut_slow);
  lua_setfield(L, -2, "cut_slow");
  lua_pushinteger(L, r->abandoned);
  lua_setfield(L, -2, "abandoned");
  lua_pushboolean(L, r->from_db);
  lua_setfield(L, -2, "from_db");
  lua_pushnumber(L, r->seconds);
  lua_setfield(L, -2, "seconds");
  lua_pushnumber(L, r->compile_s);
  lua_setfield(L, -2, "compile_s");
  lua_pushnumber(L, r->setup_s);
  lua_setfield(L, -2, "setup_s");
  lua_pushinteger(L, r->compiled);
  lua_setfield(L, -2, "compiled");
  lua_pushstring(L, r->workload);
  lua_setfield(L, -2, "workload");
}

/* stof.tune(outputs, opts) -> Plan, result */
static int l_tune(lua_State *L) {
  const char *fname = "stof.tune";
  lua_settop(L, 2);
  /* a zoo model (its name, or a config table: model_type): built and searched by
   * stof.models.run.tune, which comes back here with its outputs and feed */
  if (lua_type(L, 1) == LUA_TSTRING ||
      (lua_type(L, 1) == LUA_TTABLE && lua_getfield(L, 1, "model_type") != LUA_TNIL && (lua_pop(L, 1), 1))) {
    lua_settop(L, 2);
    if (!lua_isnoneornil(L, 2) && !lua_istable(L, 2)) return slua_typeerror(L, 2, fname, "options table");
    lua_getglobal(L, "require");
    lua_pushliteral(L, "stof.models.run");
    lua_call(L, 1, 1);
    lua_getfield(L, -1, "tune");
    lua_pushvalue(L, 1);
    lua_pushvalue(L, 2);
    if (lua_pcall(L, 2, 3, 0) != LUA_OK) {
      /* the model's own errors (an unknown name, a bad config) get a kind, as every
       * binding's do */
      const char *msg = lua_tostring(L, -1);
      if (msg && strstr(msg, "Error: ")) return lua_error(L);
      return slua_error(L, "ValueError", "%s: %s", fname, msg ? msg : "error object is not a string");
    }
    return 3;
  }
  lua_settop(L, 2);
  if (lua_getfield(L, LUA_REGISTRYINDEX, REG_TUNING) == LUA_TBOOLEAN && lua_toboolean(L, -1))
    return slua_error(L, "ValueError", "%s: called from a template while a search runs (one search at a time)", fname);
  lua_pop(L, 1);
  int nout;
  stof_graph *g;
  const stof_op **outs = slua_check_outputs(L, 1, fname, &nout, &g); /* 3: scratch */
  if (!lua_istable(L, 2)) return slua_typeerror(L, 2, fname, "options table (feed is required)");
  slua_check_keys(L, 2, fname, "option", tune_keys);
  stof_ctx *ctx = stof_graph_ctx(g);
  stof_tune_opts o = {0};

  /* the feed: placeholder -> tensor */
  if (lua_getfield(L, 2, "feed") != LUA_TTABLE) /* 4 */
    return slua_error(L, "TypeError", "%s: option feed must be a table (placeholder -> tensor), got %s", fname,
                      slua_typename(L, 4));
  int feed = 4, nfeed = 0;
  lua_pushnil(L);
  while (lua_next(L, feed)) {
    slua_teop *k = slua_test_teop(L, -2);
    if (!k || k->op->kind != STOF_OP_PLACEHOLDER)
      return slua_error(L, "TypeError", "%s: feed keys must be placeholders, got %s", fname,
                        k ? k->op->name : slua_typename(L, -2));
    if (k->g != g) return slua_error(L, "ValueError", "%s: feed: placeholder %s is from another graph", fname, k->op->name);
    slua_check_tensor(L, lua_gettop(L), fname);
    lua_pop(L, 1);
    nfeed++;
  }
  const stof_op **fops = slua_scratch(L, sizeof *fops * (size_t)(nfeed + 1)); /* 5 */
  const stof_tensor **fts = slua_scratch(L, sizeof *fts * (size_t)(nfeed + 1)); /* 6 */
  {
    int i = 0;
    lua_pushnil(L);
    while (lua_next(L, feed)) {
      fops[i] = slua_test_teop(L, -2)->op;
      fts[i++] = slua_check_tensor(L, lua_gettop(L), fname);
      lua_pop(L, 1);
    }
  }
  o.nfeed = nfeed;
  o.feed_ops = fops;
  o.feed = fts;

  /* the other options (strings stay on the stack) */
  o.plan.target = opt_str(L, 2, fname, "target");
  if (o.plan.target && strcmp(o.plan.target, "c") && strcmp(o.plan.target, "cuda"))
    return slua_error(L, "ValueError", "%s: option target must be \"c\" or \"cuda\", got \"%s\"", fname, o.plan.target);
  o.workload = opt_str(L, 2, fname, "workload");
  o.inject_wrong = opt_str(L, 2, fname, "inject_wrong");
  o.inject_slow = opt_str(L, 2, fname, "inject_slow");
  o.inject_hang = opt_str(L, 2, fname, "inject_hang");
  if (lua_getfield(L, 2, "budget") != LUA_TNIL) {
    if (lua_type(L, -1) != LUA_TNUMBER)
      return slua_error(L, "TypeError", "%s: option budget must be a number of seconds, got %s", fname,
                        slua_typename(L, -1));
    o.budget_s = lua_tonumber(L, -1);
    if (!(o.budget_s > 0 && o.budget_s <= 1e7)) {
      char num[64];
      snprintf(num, sizeof num, "%g", o.budget_s);
      return slua_error(L, "ValueError", "%s: option budget = %s seconds: it must be positive and at most 1e7 (115 days)",
                        fname, num);
    }
  }
  lua_pop(L, 1);
  o.max_trials = opt_int(L, 2, fname, "trials", 0, 0, 1 << 30);
  o.reps = opt_int(L, 2, fname, "reps", 0, 1, 1 << 20);
  o.warmup = opt_int(L, 2, fname, "warmup", 0, 0, 1 << 20);
  o.threads = opt_int(L, 2, fname, "threads", 0, 0, 1 << 10);
  lua_getfield(L, 2, "seed");
  if (!lua_isnil(L, -1)) {
    int isnum = 0;
    lua_Integer sd = lua_type(L, -1) == LUA_TNUMBER ? lua_tointegerx(L, -1, &isnum) : 0;
    char got[32];
    if (!isnum)
      return slua_error(L, "TypeError", "%s: option seed must be an integer, got %s", fname,
                        slua_intname(L, -1, got, sizeof got));
    o.seed = (uint64_t)sd;
  }
  lua_pop(L, 1);
  o.skip_stage1 = !opt_bool(L, 2, fname, "stage1", 1);
  o.skip_stage2 = !opt_bool(L, 2, fname, "stage2", 1);
  o.force = opt_bool(L, 2, fname, "force", 0);
  o.verbose = opt_bool(L, 2, fname, "verbose", 0);
  o.trace = opt_bool(L, 2, fname, "trace", 0);
  int t = lua_getfield(L, 2, "db");
  if (t == LUA_TSTRING) {
    size_t len;
    const char *path = lua_tolstring(L, -1, &len);
    if (strlen(path) != len) return slua_error(L, "ValueError", "%s: option db (a path) holds a NUL byte", fname);
    o.db = slua_db_open(L, path); /* a handle of ours, closed below */
  } else if (t != LUA_TNIL) {
    o.db = slua_test_db(L, -1, fname);
    if (!o.db)
      return slua_error(L, "TypeError", "%s: option db must be a stof.Db or a path, got %s", fname, slua_typename(L, -1));
  }
  int dbidx = t == LUA_TSTRING ? lua_gettop(L) : 0;

  /* the templates */
  push_entries(L, 2, fname);
  tune_call call = {L, ctx, lua_gettop(L), 0};
  lua_newtable(L);
  call.errs = lua_gettop(L);
  int nt = (int)lua_rawlen(L, call.entries);
  stof_template *tm = slua_scratch(L, sizeof *tm * (size_t)(nt + 1));
  tmpl_ud *ud = slua_scratch(L, sizeof *ud * (size_t)(nt + 1));
  for (int i = 0; i < nt; i++) {
    lua_rawgeti(L, call.entries, i + 1);
    lua_getfield(L, -1, "name");
    tm[i].name = lua_tostring(L, -1); /* the entry, in call.entries, keeps it */
    lua_pop(L, 2);
    ud[i] = (tmpl_ud){&call, i + 1};
    tm[i].matches = cb_matches;
    tm[i].schedule = cb_schedule;
    tm[i].ud = &ud[i];
  }
  o.ntemplate = nt;
  o.templates = tm;

  /* the graph userdata of the first output, then the Plan handle that will own the result */
  if (slua_test_teop(L, 1)) lua_pushvalue(L, 1);
  else lua_rawgeti(L, 1, 1);
  lua_getiuservalue(L, -1, 1);
  stof_plan **slot = slua_plan_new(L, -1);
  int pidx = lua_gettop(L);
  stof_tune_result res;
  memset(&res, 0, sizeof res);
  lua_pushboolean(L, 1);
  lua_setfield(L, LUA_REGISTRYINDEX, REG_TUNING);
  stof_status st = stof_tune(g, nout, outs, &o, slot, &res);
  lua_pushboolean(L, 0); /* the field exists: setting it allocates nothing, never raises */
  lua_setfield(L, LUA_REGISTRYINDEX, REG_TUNING);
  if (dbidx) { /* the database this call opened: closed now (its __close never raises) */
    lua_getfield(L, dbidx, "close");
    lua_pushvalue(L, dbidx);
    lua_call(L, 1, 0);
  }
  if (st) return slua_raise(L, ctx, st, NULL);
  /* the plan is bound to the feed: it keeps the tensors alive */
  lua_pushnil(L);
  while (lua_next(L, feed)) {
    slua_plan_keep(L, pidx, slua_test_teop(L, -2)->op, lua_gettop(L));
    lua_pop(L, 1);
  }
  lua_pushvalue(L, pidx);
  push_result(L, &res);
  return 2;
}

/* ---------------------------------------------------------------- registration */

void slua_open_search(lua_State *L, int idx) {
  idx = lua_absindex(L, idx);
  lua_pushcfunction(L, l_tune);
  lua_setfield(L, idx, "tune");
  lua_createtable(L, 0, 2);
  lua_pushcfunction(L, l_template);
  lua_setfield(L, -2, "template");
  lua_pushcfunction(L, l_templates);
  lua_setfield(L, -2, "templates");
  lua_setfield(L, idx, "search");
}
