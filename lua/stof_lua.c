/*
 * The `stof` Lua module's opener (shared by the stof executable and the loadable stof.so),
 * the per-state context, error raising with a kind prefix, argument checkers, and the
 * package.path entries for stof's pure-Lua modules.
 *
 * Errors: every binding raises through slua_error/slua_raise, so a message reads
 * "script.lua:12: ShapeError: <cause>", the kind mapped from the core's stof_status.
 */
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lualib.h>

#include "lua_int.h"

#define REG_STATE "stof.state"   /* registry: the State userdata */
#define REG_MODULE "stof.module" /* registry: the module table */

/* ---------------------------------------------------------------- context */

static int state_gc(lua_State *L) {
  slua_ctx **p = luaL_checkudata(L, 1, SLUA_STATE);
  if (*p) {
    slua_ctx_unref(*p);
    *p = NULL;
  }
  return 0;
}

/* Creates the state record with the context given (NULL: a new one on malloc). */
static slua_ctx *state_new(lua_State *L, stof_ctx *given) {
  slua_ctx **p = lua_newuserdatauv(L, sizeof *p, 0);
  *p = NULL;
  if (luaL_newmetatable(L, SLUA_STATE)) {
    lua_pushcfunction(L, state_gc);
    lua_setfield(L, -2, "__gc");
    lua_pushliteral(L, "stof.State");
    lua_setfield(L, -2, "__metatable");
  }
  lua_setmetatable(L, -2);
  slua_ctx *lc = malloc(sizeof *lc);
  if (lc) lc->ctx = given ? given : stof_ctx_new(NULL, NULL);
  if (!lc || !lc->ctx) {
    free(lc);
    if (given) stof_ctx_free(given);
    slua_error(L, "MemoryError", "cannot create the stof context");
    return NULL;
  }
  lc->refs = 1;
  *p = lc;
  lua_setfield(L, LUA_REGISTRYINDEX, REG_STATE);
  return lc;
}

slua_ctx *slua_state_ctx(lua_State *L) {
  if (lua_getfield(L, LUA_REGISTRYINDEX, REG_STATE) == LUA_TUSERDATA) {
    slua_ctx **p = lua_touserdata(L, -1);
    lua_pop(L, 1);
    if (*p) return *p;
    slua_error(L, "InternalError", "the stof context was closed");
    return NULL;
  }
  lua_pop(L, 1);
  return state_new(L, NULL);
}

int slua_open_with_ctx(lua_State *L, stof_ctx *ctx) {
  if (lua_getfield(L, LUA_REGISTRYINDEX, REG_STATE) != LUA_TNIL) {
    stof_ctx_free(ctx);
    return slua_error(L, "InternalError", "the stof module is open in this state already");
  }
  lua_pop(L, 1);
  state_new(L, ctx);
  return stof_lua_open(L);
}

slua_ctx *slua_ctx_ref(slua_ctx *lc) {
  lc->refs++;
  return lc;
}

void slua_ctx_unref(slua_ctx *lc) {
  if (lc && --lc->refs == 0) {
    stof_ctx_free(lc->ctx);
    free(lc);
  }
}

/* ---------------------------------------------------------------- errors */

const char *slua_kind(stof_status s) {
  switch (s) {
  case STOF_OK: return "Error";
  case STOF_ERR_NOMEM: return "MemoryError";
  case STOF_ERR_ARG: return "ValueError";
  case STOF_ERR_SHAPE: return "ShapeError";
  case STOF_ERR_TYPE: return "TypeError";
  case STOF_ERR_RANGE: return "IndexError";
  case STOF_ERR_SCHEDULE: return "ScheduleError";
  case STOF_ERR_NOT_FOUND: return "NotFoundError";
  case STOF_ERR_PARSE: return "ParseError";
  case STOF_ERR_IO: return "IOError";
  case STOF_ERR_CUDA: return "CudaError";
  case STOF_ERR_NO_DEVICE: return "DeviceError";
  case STOF_ERR_COMPILE: return "CompileError";
  case STOF_ERR_UNSUPPORTED: return "UnsupportedError";
  case STOF_ERR_INTERNAL: return "InternalError";
  case STOF_ERR_CHECK: return "CheckError";
  default: return "Error";
  }
}

int slua_raise(lua_State *L, stof_ctx *ctx, stof_status s, const char *where) {
  /* Copy the message out of the context first: raising must not leave an error set. */
  char msg[1200];
  const char *m = ctx ? stof_ctx_message(ctx) : "";
  if (!m || !*m) m = stof_status_text(s);
  snprintf(msg, sizeof msg, "%s", m);
  if (ctx) stof_ctx_clear_error(ctx);
  if (where) return luaL_error(L, "%s: %s: %s", slua_kind(s), where, msg);
  return luaL_error(L, "%s: %s", slua_kind(s), msg);
}

int slua_error(lua_State *L, const char *kind, const char *fmt, ...) {
  va_list ap;
  luaL_where(L, 1);
  lua_pushstring(L, kind);
  lua_pushliteral(L, ": ");
  va_start(ap, fmt);
  lua_pushvfstring(L, fmt, ap);
  va_end(ap);
  lua_concat(L, 4);
  return lua_error(L);
}

int slua_argerror(lua_State *L, int arg, const char *fname, const char *fmt, ...) {
  va_list ap;
  luaL_where(L, 1);
  lua_pushfstring(L, "TypeError: %s: bad argument #%d (", fname, arg);
  va_start(ap, fmt);
  lua_pushvfstring(L, fmt, ap);
  va_end(ap);
  lua_pushliteral(L, ")");
  lua_concat(L, 4);
  return lua_error(L);
}

const char *slua_typename(lua_State *L, int idx) {
  if (luaL_getmetafield(L, idx, "__name") == LUA_TSTRING) return lua_tostring(L, -1);
  if (lua_type(L, idx) == LUA_TNUMBER) return lua_isinteger(L, idx) ? "integer" : "number";
  return luaL_typename(L, idx);
}

const char *slua_intname(lua_State *L, int idx, char *buf, size_t size) {
  if (lua_type(L, idx) == LUA_TNUMBER && !lua_isinteger(L, idx)) {
    /* as Lua writes it: 1.5, 3.0 (a float that looks like an integer keeps its ".0"), nan */
    int n = snprintf(buf, size, "%.14g", (double)lua_tonumber(L, idx));
    if (n > 0 && (size_t)n + 2 < size && buf[strspn(buf, "-0123456789")] == '\0') strcat(buf, ".0");
    return buf;
  }
  return slua_typename(L, idx);
}

int slua_typeerror(lua_State *L, int arg, const char *fname, const char *expected) {
  const char *got = lua_isnone(L, arg) ? "no value" : slua_typename(L, arg);
  return slua_argerror(L, arg, fname, "%s expected, got %s", expected, got);
}

/* ---------------------------------------------------------------- checkers */

void slua_check_keys(lua_State *L, int idx, const char *fname, const char *what, const char *const *known) {
  idx = lua_absindex(L, idx);
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    lua_pop(L, 1);
    int ok = 0;
    if (lua_type(L, -1) == LUA_TSTRING)
      for (const char *const *k = known; *k && !ok; k++) ok = strcmp(lua_tostring(L, -1), *k) == 0;
    if (!ok) {
      luaL_Buffer b;
      luaL_buffinit(L, &b);
      for (const char *const *k = known; *k; k++) {
        if (k != known) luaL_addstring(&b, ", ");
        luaL_addstring(&b, *k);
      }
      luaL_pushresult(&b);
      const char *key = lua_type(L, -2) == LUA_TSTRING ? lua_pushfstring(L, "\"%s\"", lua_tostring(L, -2))
                                                       : lua_pushfstring(L, "[%s]", slua_typename(L, -2));
      slua_error(L, "ValueError", "%s: unknown %s %s (known: %s)", fname, what, key, lua_tostring(L, -2));
    }
  }
}

void *slua_checkudata(lua_State *L, int idx, const char *tname, const char *fname) {
  void *p = luaL_testudata(L, idx, tname);
  if (!p) slua_typeerror(L, idx, fname, tname);
  return p;
}

lua_Integer slua_check_integer(lua_State *L, int arg, const char *fname, const char *what) {
  int isnum = 0;
  lua_Integer v = 0;
  if (lua_type(L, arg) == LUA_TNUMBER) v = lua_tointegerx(L, arg, &isnum);
  if (isnum) return v;
  if (lua_type(L, arg) == LUA_TNUMBER)
    return slua_argerror(L, arg, fname, "%s must be an integer, got %f", what,
                         (double)lua_tonumber(L, arg));
  return slua_argerror(L, arg, fname, "%s must be an integer, got %s", what,
                       lua_isnone(L, arg) ? "no value" : slua_typename(L, arg));
}

int slua_check_shape(lua_State *L, int arg, const char *fname, int64_t *shape) {
  if (!lua_istable(L, arg)) return slua_typeerror(L, arg, fname, "shape table");
  lua_Integer n = (lua_Integer)lua_rawlen(L, arg);
  if (n > STOF_MAX_DIMS)
    return slua_error(L, "ShapeError", "%s: shape has %I dims, at most %d are supported",
                      fname, n, STOF_MAX_DIMS);
  for (int d = 0; d < (int)n; d++) {
    lua_rawgeti(L, arg, d + 1);
    int isnum = 0;
    lua_Integer v = lua_type(L, -1) == LUA_TNUMBER ? lua_tointegerx(L, -1, &isnum) : 0;
    if (!isnum) {
      if (lua_type(L, -1) == LUA_TNUMBER)
        return slua_argerror(L, arg, fname, "extent of dim %d must be an integer, got %f", d,
                             (double)lua_tonumber(L, -1));
      return slua_argerror(L, arg, fname, "extent of dim %d must be an integer, got %s", d,
                           slua_typename(L, -1));
    }
    if (v < 0)
      return slua_error(L, "ShapeError", "%s: negative extent %I in dim %d", fname, v, d);
    shape[d] = (int64_t)v;
    lua_pop(L, 1);
  }
  return (int)n;
}

int slua_opt_dtype(lua_State *L, int arg, const char *fname, int def) {
  if (lua_isnoneornil(L, arg)) return def;
  if (lua_type(L, arg) != LUA_TSTRING) return slua_typeerror(L, arg, fname, "dtype string");
  slua_ctx *lc = slua_state_ctx(L);
  stof_dtype d;
  stof_status st = stof_dtype_parse(lc->ctx, lua_tostring(L, arg), &d);
  if (st) return slua_raise(L, lc->ctx, st, fname);
  return (int)d;
}

stof_dtype slua_check_dtype(lua_State *L, int arg, const char *fname) {
  if (lua_isnoneornil(L, arg)) return (stof_dtype)slua_typeerror(L, arg, fname, "dtype string");
  return (stof_dtype)slua_opt_dtype(L, arg, fname, STOF_DTYPE_F32);
}

double slua_opt_number(lua_State *L, int arg, const char *fname, const char *what, double def) {
  if (lua_isnoneornil(L, arg)) return def;
  if (lua_type(L, arg) != LUA_TNUMBER)
    return slua_argerror(L, arg, fname, "%s must be a number, got %s", what, slua_typename(L, arg));
  return (double)lua_tonumber(L, arg);
}

const char *slua_opt_string(lua_State *L, int arg, const char *fname, const char *what,
                            const char *def) {
  if (lua_isnoneornil(L, arg)) return def;
  if (lua_type(L, arg) != LUA_TSTRING) {
    slua_argerror(L, arg, fname, "%s must be a string, got %s", what, slua_typename(L, arg));
    return NULL;
  }
  return lua_tostring(L, arg);
}

void slua_push_shape(lua_State *L, int ndim, const int64_t *shape) {
  lua_createtable(L, ndim, 0);
  for (int d = 0; d < ndim; d++) {
    lua_pushinteger(L, (lua_Integer)shape[d]);
    lua_rawseti(L, -2, d + 1);
  }
}

/* ---------------------------------------------------------------- scratch memory */

typedef struct owned_str {
  slua_ctx *lc;
  char *s;
} owned_str;

static void owned_free(owned_str *o) {
  if (o->s) {
    stof_ctx_dealloc(o->lc->ctx, o->s, strlen(o->s) + 1);
    o->s = NULL;
  }
  if (o->lc) {
    slua_ctx_unref(o->lc);
    o->lc = NULL;
  }
}

static int owned_gc(lua_State *L) {
  owned_free(luaL_checkudata(L, 1, SLUA_SCRATCH));
  return 0;
}

char **slua_owned_new(lua_State *L) {
  slua_ctx *lc = slua_state_ctx(L);
  owned_str *o = lua_newuserdatauv(L, sizeof *o, 0);
  o->lc = NULL;
  o->s = NULL;
  if (luaL_newmetatable(L, SLUA_SCRATCH)) {
    lua_pushcfunction(L, owned_gc);
    lua_setfield(L, -2, "__gc");
    lua_pushliteral(L, "stof.Scratch");
    lua_setfield(L, -2, "__metatable");
  }
  lua_setmetatable(L, -2);
  o->lc = slua_ctx_ref(lc);
  return &o->s;
}

void slua_owned_push(lua_State *L, int idx) {
  owned_str *o = luaL_checkudata(L, idx, SLUA_SCRATCH);
  size_t n = o->s ? strlen(o->s) : 0;
  while (n > 0 && o->s[n - 1] == '\n') n--; /* printers end with a newline; print adds one */
  lua_pushlstring(L, o->s ? o->s : "", n);
  owned_free(o);
}

void *slua_scratch(lua_State *L, size_t n) {
  void *p = lua_newuserdatauv(L, n ? n : 1, 0);
  memset(p, 0, n ? n : 1);
  return p;
}

/* ---------------------------------------------------------------- package.path */

/* Appends "<dir>/?.lua;<dir>/?/init.lua;" to acc (of size cap) for an existing dir, unless
 * path or acc has the entries already. */
static void add_dir(char *acc, size_t cap, const char *path, const char *dir) {
  char real[PATH_MAX], entry[PATH_MAX + 32];
  if (!realpath(dir, real)) return; /* no such folder */
  const char *pats[] = {"%s/?.lua", "%s/?/init.lua"};
  for (int i = 0; i < 2; i++) {
    snprintf(entry, sizeof entry, pats[i], real);
    size_t n = strlen(entry);
    int found = 0;
    const char *hay[] = {path, acc};
    for (int h = 0; h < 2 && !found; h++)
      for (const char *p = hay[h]; (p = strstr(p, entry)) != NULL && !found; p++)
        found = (p == hay[h] || p[-1] == ';') && (p[n] == ';' || p[n] == 0);
    if (!found && strlen(acc) + n + 2 < cap) {
      strcat(acc, entry);
      strcat(acc, ";");
    }
  }
}

void stof_lua_add_path(lua_State *L, const char *anchor_dir) {
  luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
  if (lua_getfield(L, -1, LUA_LOADLIBNAME) != LUA_TTABLE) {
    lua_pop(L, 2);
    return;
  }
  lua_getfield(L, -1, "path");
  const char *old = lua_isstring(L, -1) ? lua_tostring(L, -1) : "";
  char acc[6 * PATH_MAX + 64] = "", dir[PATH_MAX];
  if (anchor_dir) {
    snprintf(dir, sizeof dir, "%s/../lua", anchor_dir);
    add_dir(acc, sizeof acc, old, dir);
    snprintf(dir, sizeof dir, "%s/../share/stof/lua", anchor_dir);
    add_dir(acc, sizeof acc, old, dir);
  }
#ifdef STOF_SOURCE_DIR
  add_dir(acc, sizeof acc, old, STOF_SOURCE_DIR "/lua");
#endif
  lua_pushfstring(L, "%s%s", acc, old);
  /* stack: loaded, package, old, new */
  lua_setfield(L, -3, "path");
  lua_pop(L, 3);
}

/* ---------------------------------------------------------------- the module */

/* stof.<name> for a pure-Lua submodule lua/stof/<name>.lua: loaded on first use. */
static int module_index(lua_State *L) {
  if (lua_type(L, 2) != LUA_TSTRING) return 0;
  const char *k = lua_tostring(L, 2);
  for (const char *p = k; *p; p++)
    if (!(*p == '_' || (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
          (*p >= '0' && *p <= '9')))
      return 0;
  luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
  if (lua_getfield(L, -1, LUA_LOADLIBNAME) != LUA_TTABLE) return 0;
  if (lua_getfield(L, -1, "searchpath") != LUA_TFUNCTION) return 0;
  lua_pushfstring(L, "stof.%s", k);
  if (lua_getfield(L, -3, "path") != LUA_TSTRING) return 0;
  lua_call(L, 2, 1);
  if (lua_isnil(L, -1)) return 0;
  if (lua_getglobal(L, "require") != LUA_TFUNCTION) return 0;
  lua_pushfstring(L, "stof.%s", k);
  lua_call(L, 1, 1);
  lua_pushvalue(L, 2);
  lua_pushvalue(L, -2);
  lua_rawset(L, 1);
  return 1;
}

int stof_lua_open(lua_State *L) {
  luaL_checkversion(L);
  if (lua_getfield(L, LUA_REGISTRYINDEX, REG_MODULE) == LUA_TTABLE) return 1;
  lua_pop(L, 1);
  slua_state_ctx(L);

  lua_newtable(L);
  int m = lua_gettop(L);
  lua_pushliteral(L, STOF_VERSION);
  lua_setfield(L, m, "version");
  lua_pushliteral(L, "stof " STOF_VERSION);
  lua_setfield(L, m, "_VERSION");

  luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
  slua_open_te(L);
  lua_pushvalue(L, -1);
  lua_setfield(L, -3, "stof.te");
  lua_setfield(L, m, "te");
  lua_pushvalue(L, m);
  lua_setfield(L, -2, "stof");
  lua_pop(L, 1);

  slua_open_tensor(L, m);
  slua_open_eval(L, m);
  slua_open_mask(L, m);
  slua_open_schedule(L, m);
  slua_open_attention(L, m);
  slua_open_exec(L, m);
  slua_open_db(L, m);
  slua_open_io(L, m);
  slua_open_search(L, m);

  lua_newtable(L);
  lua_pushcfunction(L, module_index);
  lua_setfield(L, -2, "__index");
  lua_setmetatable(L, m);

  lua_pushvalue(L, m);
  lua_setfield(L, LUA_REGISTRYINDEX, REG_MODULE);
  return 1;
}

void slua_registry_table(lua_State *L, const char *key, const char *mode) {
  if (lua_getfield(L, LUA_REGISTRYINDEX, key) == LUA_TTABLE) return;
  lua_pop(L, 1);
  lua_newtable(L);
  if (mode) {
    lua_createtable(L, 0, 1);
    lua_pushstring(L, mode);
    lua_setfield(L, -2, "__mode");
    lua_setmetatable(L, -2);
  }
  lua_pushvalue(L, -1);
  lua_setfield(L, LUA_REGISTRYINDEX, key);
}
