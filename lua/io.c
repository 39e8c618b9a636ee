/*
 * Files from Lua: weights in the safetensors format and JSON configs.
 *
 *   local w, meta = stof.load("model.safetensors")  -- name -> stof.Tensor (CPU), and the
 *                                                    -- file's metadata: key -> string ({}
 *                                                    -- when it has none)
 *   stof.save("out.safetensors", {["fc.weight"] = t, ...}[, {format = "pt"}])
 *   local cfg = stof.load_json("config.json")       -- objects -> tables, arrays -> sequences
 *                                                    -- (1-based), integers -> integers, reals
 *                                                    -- -> floats, null -> stof.null
 *
 * Loaded tensors are not copied: they point into the file's mapping (copy-on-write, so
 * writing into one never changes the file). The mapping is held by a stof.SafetensorsFile
 * userdata that is each tensor's user value 1, so it stays as long as any of its tensors
 * does. stof.save writes the tensors sorted by name (the same table always gives the same
 * bytes), atomically. stof.null is a light userdata, unique, equal only to itself.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "lua_int.h"

#define SLUA_STFILE "stof.SafetensorsFile"
#define SLUA_JSON "stof.JsonDocument"

static const char json_null_tag = 0; /* stof.null is its address */

/* ---------------------------------------------------------------- safetensors */

typedef struct slua_stfile { /* stof.SafetensorsFile: owns f (NULL once closed) */
  stof_st_file *f;
  slua_ctx *lc;
} slua_stfile;

static int stfile_gc(lua_State *L) {
  slua_stfile *h = slua_checkudata(L, 1, SLUA_STFILE, "SafetensorsFile:__gc");
  if (h->f) stof_st_close(h->f);
  h->f = NULL;
  if (h->lc) slua_ctx_unref(h->lc);
  h->lc = NULL;
  return 0;
}

static int stfile_tostring(lua_State *L) {
  slua_stfile *h = slua_checkudata(L, 1, SLUA_STFILE, "SafetensorsFile:__tostring");
  if (!h->f)
    lua_pushliteral(L, "stof.SafetensorsFile (closed)");
  else
    lua_pushfstring(L, "stof.SafetensorsFile %s (%d tensors)", stof_st_path(h->f), stof_st_count(h->f));
  return 1;
}

/* stof.load(path) -> tensors, metadata */
static int l_load(lua_State *L) {
  const char *fname = "stof.load";
  if (lua_type(L, 1) != LUA_TSTRING) return slua_typeerror(L, 1, fname, "string (the file's path)");
  lua_settop(L, 1);
  const char *path = lua_tostring(L, 1);
  slua_ctx *lc = slua_state_ctx(L);
  slua_stfile *h = lua_newuserdatauv(L, sizeof *h, 0); /* 2 */
  h->f = NULL;
  h->lc = NULL;
  luaL_setmetatable(L, SLUA_STFILE);
  h->lc = slua_ctx_ref(lc);
  stof_status st = stof_st_open(lc->ctx, path, &h->f);
  if (st) return slua_raise(L, lc->ctx, st, NULL);
  int n = stof_st_count(h->f);
  lua_createtable(L, 0, n); /* 3 */
  for (int i = 0; i < n; i++) {
    slua_tensor *th = slua_new_tensor_borrowing(L, 2);
    if ((st = stof_st_tensor(h->f, i, &th->t))) return slua_raise(L, lc->ctx, st, fname);
    lua_setfield(L, 3, stof_st_name(h->f, i));
  }
  int nm = stof_st_metadata_count(h->f);
  lua_createtable(L, 0, nm);
  for (int i = 0; i < nm; i++) {
    const char *k = stof_st_metadata_key(h->f, i);
    lua_pushstring(L, stof_st_metadata(h->f, k));
    lua_setfield(L, -2, k);
  }
  return 2;
}

typedef struct named_tensor {
  const char *name;
  const stof_tensor *t;
} named_tensor;

typedef struct meta_pair {
  const char *key, *value;
} meta_pair;

static int named_cmp(const void *a, const void *b) {
  return strcmp(((const named_tensor *)a)->name, ((const named_tensor *)b)->name);
}

static int meta_cmp(const void *a, const void *b) {
  return strcmp(((const meta_pair *)a)->key, ((const meta_pair *)b)->key);
}

/* stof.save(path, tensors[, metadata]) */
static int l_save(lua_State *L) {
  const char *fname = "stof.save";
  if (lua_type(L, 1) != LUA_TSTRING) return slua_typeerror(L, 1, fname, "string (the file's path)");
  if (!lua_istable(L, 2)) return slua_typeerror(L, 2, fname, "table of name -> stof.Tensor");
  if (!lua_isnoneornil(L, 3) && !lua_istable(L, 3))
    return slua_typeerror(L, 3, fname, "table of string -> string (metadata)");
  lua_settop(L, 3);
  const char *path = lua_tostring(L, 1);
  int n = 0, nm = 0;
  lua_pushnil(L);
  while (lua_next(L, 2)) {
    if (lua_type(L, -2) != LUA_TSTRING)
      return slua_argerror(L, 2, fname, "tensor names must be strings, got a key of type %s",
                           slua_typename(L, -2));
    slua_tensor *th = luaL_testudata(L, -1, SLUA_TENSOR);
    if (!th)
      return slua_argerror(L, 2, fname, "\"%s\" is %s, not a stof.Tensor", lua_tostring(L, -2),
                           slua_typename(L, -1));
    if (!th->t) return slua_error(L, "ValueError", "%s: tensor \"%s\" is closed", fname, lua_tostring(L, -2));
    n++;
    lua_pop(L, 1);
  }
  if (!lua_isnil(L, 3)) {
    lua_pushnil(L);
    while (lua_next(L, 3)) {
      if (lua_type(L, -2) != LUA_TSTRING || lua_type(L, -1) != LUA_TSTRING)
        return slua_argerror(L, 3, fname, "metadata maps strings to strings, got %s = %s",
                             slua_typename(L, -2), slua_typename(L, -1));
      nm++;
      lua_pop(L, 1);
    }
  }
  /* the tables on the stack keep every name and tensor alive until the end */
  named_tensor *nt = slua_scratch(L, sizeof *nt * (size_t)n);
  meta_pair *mp = slua_scratch(L, sizeof *mp * (size_t)nm);
  const char **names = slua_scratch(L, sizeof *names * (size_t)n);
  const stof_tensor **ts = slua_scratch(L, sizeof *ts * (size_t)n);
  const char **keys = slua_scratch(L, sizeof *keys * (size_t)nm);
  const char **values = slua_scratch(L, sizeof *values * (size_t)nm);
  int i = 0;
  lua_pushnil(L);
  while (lua_next(L, 2)) {
    nt[i].name = lua_tostring(L, -2);
    nt[i++].t = ((slua_tensor *)lua_touserdata(L, -1))->t;
    lua_pop(L, 1);
  }
  qsort(nt, (size_t)n, sizeof *nt, named_cmp);
  for (i = 0; i < n; i++) names[i] = nt[i].name, ts[i] = nt[i].t;
  if (nm) {
    i = 0;
    lua_pushnil(L);
    while (lua_next(L, 3)) {
      mp[i].key = lua_tostring(L, -2);
      mp[i++].value = lua_tostring(L, -1);
      lua_pop(L, 1);
    }
    qsort(mp, (size_t)nm, sizeof *mp, meta_cmp);
    for (i = 0; i < nm; i++) keys[i] = mp[i].key, values[i] = mp[i].value;
  }
  slua_ctx *lc = slua_state_ctx(L);
  stof_status st = stof_st_save(lc->ctx, path, n, names, ts, nm, keys, values);
  if (st) return slua_raise(L, lc->ctx, st, NULL);
  return 0;
}

/* ---------------------------------------------------------------- JSON */

typedef struct slua_json { /* stof.JsonDocument: a parsed document, freed if anything raises */
  json_t *j;
} slua_json;

static int json_gc(lua_State *L) {
  slua_json *h = slua_checkudata(L, 1, SLUA_JSON, "JsonDocument:__gc");
  if (h->j) json_decref(h->j);
  h->j = NULL;
  return 0;
}

static void push_json(lua_State *L, json_t *v) {
  luaL_checkstack(L, 4, "stof.load_json: JSON nested too deep");
  switch (json_typeof(v)) {
  case JSON_OBJECT: {
    const char *k;
    json_t *x;
    lua_createtable(L, 0, (int)json_object_size(v));
    json_object_foreach(v, k, x) {
      push_json(L, x);
      lua_setfield(L, -2, k);
    }
    break;
  }
  case JSON_ARRAY: {
    size_t n = json_array_size(v);
    lua_createtable(L, n < (1u << 24) ? (int)n : 0, 0);
    for (size_t i = 0; i < n; i++) {
      push_json(L, json_array_get(v, i));
      lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    break;
  }
  case JSON_STRING: lua_pushlstring(L, json_string_value(v), json_string_length(v)); break;
  case JSON_INTEGER: lua_pushinteger(L, (lua_Integer)json_integer_value(v)); break;
  case JSON_REAL: lua_pushnumber(L, (lua_Number)json_real_value(v)); break;
  case JSON_TRUE: lua_pushboolean(L, 1); break;
  case JSON_FALSE: lua_pushboolean(L, 0); break;
  default: lua_pushlightuserdata(L, (void *)&json_null_tag); break;
  }
}

/* stof.load_json(path) -> value */
static int l_load_json(lua_State *L) {
  const char *fname = "stof.load_json";
  if (lua_type(L, 1) != LUA_TSTRING) return slua_typeerror(L, 1, fname, "string (the file's path)");
  lua_settop(L, 1);
  const char *path = lua_tostring(L, 1);
  slua_json *h = lua_newuserdatauv(L, sizeof *h, 0);
  h->j = NULL;
  luaL_setmetatable(L, SLUA_JSON);
  FILE *fp = fopen(path, "rb");
  if (!fp) return slua_error(L, "IOError", "%s: cannot open: %s", path, strerror(errno));
  struct stat sb;
  if (fstat(fileno(fp), &sb) == 0 && S_ISDIR(sb.st_mode)) {
    fclose(fp);
    return slua_error(L, "IOError", "%s: is a directory", path);
  }
  json_error_t err;
  h->j = json_loadf(fp, JSON_DECODE_ANY, &err);
  fclose(fp);
  if (!h->j) return slua_error(L, "ParseError", "%s:%d:%d: %s", path, err.line, err.column, err.text);
  push_json(L, h->j);
  json_decref(h->j);
  h->j = NULL;
  return 1;
}

/* ---------------------------------------------------------------- registration */

void slua_open_io(lua_State *L, int idx) {
  idx = lua_absindex(L, idx);
  if (luaL_newmetatable(L, SLUA_STFILE)) {
    lua_pushcfunction(L, stfile_gc);
    lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, stfile_tostring);
    lua_setfield(L, -2, "__tostring");
    lua_pushliteral(L, SLUA_STFILE);
    lua_setfield(L, -2, "__metatable");
  }
  lua_pop(L, 1);
  if (luaL_newmetatable(L, SLUA_JSON)) {
    lua_pushcfunction(L, json_gc);
    lua_setfield(L, -2, "__gc");
    lua_pushliteral(L, SLUA_JSON);
    lua_setfield(L, -2, "__metatable");
  }
  lua_pop(L, 1);
  static const luaL_Reg fns[] = {
      {"load", l_load}, {"save", l_save}, {"load_json", l_load_json}, {NULL, NULL},
  };
  lua_pushvalue(L, idx);
  luaL_setfuncs(L, fns, 0);
  lua_pushlightuserdata(L, (void *)&json_null_tag);
  lua_setfield(L, -2, "null");
  lua_pop(L, 1);
}
