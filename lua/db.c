/*
 * stof.db: the tuning database from Lua (include/stof/search.h).
 *
 *   local db <close> = stof.db.open("tune.jsonl")
 *   db:append{workload = "w", device = "cpu", scheme = "001", knobs = {["C.tile_i"] = 2},
 *             times_ms = {0.5, 0.52}}                  -- status "OK" by default
 *   local best = db:best("w", "cpu")                  -- a record table, or nil and why
 *   print(#db, db:get(1).median_ms, db:skipped())
 *
 * A record table has the fields of stof_db_record: workload, device, scheme, knobs (name ->
 * decision), times_ms, status (a status name: "OK", "ERR_COMPILE", ...), message, version,
 * median_ms, and index (1-based). The handle owns the database; __close and __gc free it.
 */
#include <stdio.h>
#include <string.h>

#include <stof/search.h>

#include "lua_int.h"

#define SLUA_DB "stof.Db"
/* At most this many knobs or times in a record: what the database reads back (search/db.c
 * skips a line with more). */
#define MAX_ITEMS 1000000

typedef struct slua_db {
  stof_db *db;
  slua_ctx *lc;
} slua_db;

static int db_gc(lua_State *L) {
  slua_db *h = slua_checkudata(L, 1, SLUA_DB, "Db:close");
  if (h->db) stof_db_free(h->db);
  h->db = NULL;
  if (h->lc) slua_ctx_unref(h->lc);
  h->lc = NULL;
  return 0;
}

static slua_db *check_db(lua_State *L, const char *fname) {
  slua_db *h = slua_checkudata(L, 1, SLUA_DB, fname);
  if (!h->db) slua_error(L, "ValueError", "%s: the database is closed", fname);
  return h;
}

/* The string argument arg, refused when it holds a NUL byte (the core takes C strings:
 * "bert\0-large" would be read as "bert"). */
static const char *check_string(lua_State *L, int arg, const char *fname, const char *what) {
  if (lua_type(L, arg) != LUA_TSTRING) return slua_typeerror(L, arg, fname, what), NULL;
  size_t len;
  const char *s = lua_tolstring(L, arg, &len);
  if (strlen(s) != len)
    slua_error(L, "ValueError", "%s: argument #%d (%s) holds a NUL byte at byte %d", fname, arg, what,
               (int)strlen(s) + 1);
  return s;
}

stof_db *slua_db_open(lua_State *L, const char *path) {
  slua_ctx *lc = slua_state_ctx(L);
  slua_db *h = lua_newuserdatauv(L, sizeof *h, 0);
  h->db = NULL;
  h->lc = NULL;
  luaL_setmetatable(L, SLUA_DB);
  stof_status st = stof_db_open(lc->ctx, path, &h->db);
  if (st) return slua_raise(L, lc->ctx, st, NULL), NULL;
  h->lc = slua_ctx_ref(lc);
  return h->db;
}

stof_db *slua_test_db(lua_State *L, int idx, const char *fname) {
  slua_db *h = luaL_testudata(L, idx, SLUA_DB);
  if (!h) return NULL;
  if (!h->db) slua_error(L, "ValueError", "%s: the database is closed", fname);
  return h->db;
}

/* stof.db.open(path) -> stof.Db */
static int l_open(lua_State *L) {
  const char *path = check_string(L, 1, "stof.db.open", "string (the database's path)");
  slua_db_open(L, path);
  return 1;
}

static void push_record(lua_State *L, const stof_db_record *r, int index) {
  lua_createtable(L, 0, 11);
  lua_pushstring(L, r->workload);
  lua_setfield(L, -2, "workload");
  lua_pushstring(L, r->device);
  lua_setfield(L, -2, "device");
  lua_pushstring(L, r->scheme);
  lua_setfield(L, -2, "scheme");
  lua_createtable(L, 0, r->nknob);
  for (int k = 0; k < r->nknob; k++) {
    lua_pushinteger(L, (lua_Integer)r->knob_value[k]);
    lua_setfield(L, -2, r->knob_name[k]);
  }
  lua_setfield(L, -2, "knobs");
  lua_createtable(L, r->ntime, 0);
  for (int i = 0; i < r->ntime; i++) {
    lua_pushnumber(L, r->time_ms[i]);
    lua_rawseti(L, -2, i + 1);
  }
  lua_setfield(L, -2, "times_ms");
  lua_pushstring(L, stof_status_name(r->status));
  lua_setfield(L, -2, "status");
  if (r->message) {
    lua_pushstring(L, r->message);
    lua_setfield(L, -2, "message");
  }
  lua_pushstring(L, r->version);
  lua_setfield(L, -2, "version");
  lua_pushnumber(L, r->median_ms);
  lua_setfield(L, -2, "median_ms");
  lua_pushinteger(L, index + 1);
  lua_setfield(L, -2, "index");
}

/* The string at the top of the stack, refused when it holds a NUL byte (named what). */
static const char *nul_free(lua_State *L, const char *fname, const char *what) {
  size_t len;
  const char *s = lua_tolstring(L, -1, &len);
  if (strlen(s) != len)
    slua_error(L, "ValueError", "%s: %s holds a NUL byte at byte %d (the database's strings end at one)", fname,
               what, (int)strlen(s) + 1);
  return s;
}

/* A string field of the record table at idx (required unless def). */
static const char *field_string(lua_State *L, int idx, const char *fname, const char *key, const char *def) {
  int t = lua_getfield(L, idx, key);
  if (t == LUA_TNIL && def) return lua_pop(L, 1), def;
  if (t != LUA_TSTRING)
    return slua_error(L, "TypeError", "%s: field %s must be a string, got %s", fname, key, slua_typename(L, -1)),
           NULL;
  char what[64];
  snprintf(what, sizeof what, "field %s", key);
  const char *s = nul_free(L, fname, what);
  lua_pop(L, 1); /* the table keeps the string alive */
  return s;
}

/* db:append(record) -> the record as stored (version and median filled in) */
static int l_append(lua_State *L) {
  const char *fname = "Db:append";
  slua_db *h = check_db(L, fname);
  if (!lua_istable(L, 2)) return slua_typeerror(L, 2, fname, "record table");
  static const char *const known[] = {"workload", "device", "scheme", "status", "message", "knobs", "times_ms", NULL};
  slua_check_keys(L, 2, fname, "record field", known);
  stof_db_record r = {0};
  r.workload = field_string(L, 2, fname, "workload", NULL);
  r.device = field_string(L, 2, fname, "device", NULL);
  r.scheme = field_string(L, 2, fname, "scheme", "");
  const char *status = field_string(L, 2, fname, "status", "OK");
  r.status = STOF_STATUS_COUNT;
  for (int i = 0; i < STOF_STATUS_COUNT; i++)
    if (strcmp(status, stof_status_name((stof_status)i)) == 0) r.status = (stof_status)i;
  if (r.status == STOF_STATUS_COUNT)
    return slua_error(L, "ValueError", "%s: unknown status \"%s\" (\"OK\", \"ERR_COMPILE\", \"ERR_CUDA\", ...)", fname,
                      status);
  int t = lua_getfield(L, 2, "message");
  if (t != LUA_TNIL && t != LUA_TSTRING)
    return slua_error(L, "TypeError", "%s: field message must be a string, got %s", fname, lua_typename(L, t));
  r.message = t == LUA_TSTRING ? nul_free(L, fname, "field message") : NULL;
  lua_pop(L, 1);
  /* knobs: name -> integer, in sorted order so that a record's text does not depend on
   * the table's traversal order */
  int nk = 0;
  if (lua_getfield(L, 2, "knobs") != LUA_TNIL) {
    if (!lua_istable(L, -1)) return slua_error(L, "TypeError", "%s: field knobs must be a table", fname);
    lua_pushnil(L);
    while (lua_next(L, -2)) {
      if (lua_type(L, -2) != LUA_TSTRING || !lua_isinteger(L, -1))
        return slua_error(L, "TypeError", "%s: knobs maps names to integer decisions (got %s = %s)", fname,
                          slua_typename(L, -2), slua_typename(L, -1));
      if (nk >= MAX_ITEMS)
        return slua_error(L, "ValueError", "%s: field knobs has more than %d entries", fname, MAX_ITEMS);
      lua_pushvalue(L, -2);
      nul_free(L, fname, "a knob name");
      lua_pop(L, 1);
      nk++;
      lua_pop(L, 1);
    }
  }
  int kidx = lua_gettop(L);
  const char **names = slua_scratch(L, sizeof *names * (size_t)(nk + 1));
  int64_t *vals = slua_scratch(L, sizeof *vals * (size_t)(nk + 1));
  if (nk) {
    int k = 0;
    lua_pushnil(L);
    while (lua_next(L, kidx)) {
      const char *name = lua_tostring(L, -2);
      int64_t v = (int64_t)lua_tointeger(L, -1);
      int j = k++;
      while (j > 0 && strcmp(names[j - 1], name) > 0) names[j] = names[j - 1], vals[j] = vals[j - 1], j--;
      names[j] = name, vals[j] = v;
      lua_pop(L, 1);
    }
  }
  int nt = 0;
  double *times = NULL;
  if (lua_getfield(L, 2, "times_ms") != LUA_TNIL) {
    if (!lua_istable(L, -1)) return slua_error(L, "TypeError", "%s: field times_ms must be a list of numbers", fname);
    /* the list as stored: a __len or __index metamethod would make the length (and the
     * allocation) whatever it says */
    if (luaL_getmetafield(L, -1, "__len") != LUA_TNIL || luaL_getmetafield(L, -1, "__index") != LUA_TNIL)
      return slua_error(L, "TypeError", "%s: field times_ms must be a plain list of numbers (it has a metatable with "
                        "__len or __index)", fname);
    size_t len = lua_rawlen(L, -1);
    if (len > MAX_ITEMS)
      return slua_error(L, "ValueError", "%s: field times_ms has %I entries, at most %d", fname, (lua_Integer)len,
                        MAX_ITEMS);
    nt = (int)len;
    times = slua_scratch(L, sizeof *times * (size_t)(nt + 1));
    for (int i = 0; i < nt; i++) {
      lua_rawgeti(L, -2, i + 1);
      if (!lua_isnumber(L, -1))
        return slua_error(L, "TypeError", "%s: times_ms[%d] is %s, not a number", fname, i + 1, slua_typename(L, -1));
      times[i] = lua_tonumber(L, -1);
      lua_pop(L, 1);
    }
  }
  r.nknob = nk, r.knob_name = names, r.knob_value = vals;
  r.ntime = nt, r.time_ms = times;
  stof_ctx *ctx = h->lc->ctx;
  stof_status st = stof_db_append(h->db, &r);
  if (st) return slua_raise(L, ctx, st, NULL);
  stof_db_record got;
  int last = stof_db_count(h->db) - 1;
  if ((st = stof_db_get(h->db, last, &got))) return slua_raise(L, ctx, st, NULL);
  push_record(L, &got, last);
  return 1;
}

/* db:best(workload, device) -> record, or nil and the reason */
static int l_best(lua_State *L) {
  const char *fname = "Db:best";
  slua_db *h = check_db(L, fname);
  const char *w = check_string(L, 2, fname, "workload string"), *d = check_string(L, 3, fname, "device string");
  stof_ctx *ctx = h->lc->ctx;
  int i;
  stof_status st = stof_db_best(h->db, w, d, &i);
  if (st == STOF_ERR_NOT_FOUND) {
    lua_pushnil(L);
    lua_pushstring(L, stof_ctx_message(ctx));
    stof_ctx_clear_error(ctx);
    return 2;
  }
  stof_db_record r;
  if (st || (st = stof_db_get(h->db, i, &r))) return slua_raise(L, ctx, st, NULL);
  push_record(L, &r, i);
  return 1;
}

/* db:get(i) -> record i (1-based) */
static int l_get(lua_State *L) {
  const char *fname = "Db:get";
  slua_db *h = check_db(L, fname);
  lua_Integer i = slua_check_integer(L, 2, fname, "index");
  stof_db_record r;
  if (i < 1 || i > stof_db_count(h->db))
    return slua_error(L, "IndexError", "%s: index %I out of 1..%d", fname, i, stof_db_count(h->db));
  stof_status st = stof_db_get(h->db, (int)(i - 1), &r);
  if (st) return slua_raise(L, h->lc->ctx, st, NULL);
  push_record(L, &r, (int)(i - 1));
  return 1;
}

/* db:refresh() -> records that came in from other processes */
static int l_refresh(lua_State *L) {
  slua_db *h = check_db(L, "Db:refresh");
  int n = 0;
  stof_status st = stof_db_refresh(h->db, &n);
  if (st) return slua_raise(L, h->lc->ctx, st, NULL);
  lua_pushinteger(L, n);
  return 1;
}

/* db:skipped() -> lines skipped, and why the last one was */
static int l_skipped(lua_State *L) {
  slua_db *h = check_db(L, "Db:skipped");
  lua_pushinteger(L, stof_db_nskipped(h->db));
  lua_pushstring(L, stof_db_skip_note(h->db));
  return 2;
}

static int db_len(lua_State *L) {
  slua_db *h = check_db(L, "Db:__len");
  lua_pushinteger(L, stof_db_count(h->db));
  return 1;
}

static int db_tostring(lua_State *L) {
  slua_db *h = slua_checkudata(L, 1, SLUA_DB, "Db:__tostring");
  if (!h->db) return lua_pushliteral(L, "stof.Db (closed)"), 1;
  lua_pushfstring(L, "stof.Db: %d records, %d lines skipped", stof_db_count(h->db), stof_db_nskipped(h->db));
  return 1;
}

void slua_open_db(lua_State *L, int idx) {
  idx = lua_absindex(L, idx);
  static const luaL_Reg methods[] = {{"append", l_append}, {"best", l_best},       {"get", l_get},
                                     {"refresh", l_refresh}, {"skipped", l_skipped}, {"close", db_gc},
                                     {NULL, NULL}};
  luaL_newmetatable(L, SLUA_DB);
  lua_pushcfunction(L, db_gc);
  lua_setfield(L, -2, "__gc");
  lua_pushcfunction(L, db_gc);
  lua_setfield(L, -2, "__close");
  lua_pushcfunction(L, db_len);
  lua_setfield(L, -2, "__len");
  lua_pushcfunction(L, db_tostring);
  lua_setfield(L, -2, "__tostring");
  luaL_newlib(L, methods);
  lua_setfield(L, -2, "__index");
  lua_pop(L, 1);
  lua_createtable(L, 0, 1);
  lua_pushcfunction(L, l_open);
  lua_setfield(L, -2, "open");
  lua_setfield(L, idx, "db");
}
