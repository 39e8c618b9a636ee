/*
 * stof.Tensor: data tensors (stof_tensor) in Lua.
 *
 *   stof.tensor(values[, dtype])         values: a nested table (its shape inferred) or a
 *                                        number (0-D); always values, never a shape
 *   stof.zeros(shape[, dtype])           stof.full(shape, value[, dtype])
 *   stof.rand(shape[, dtype][, seed])    floats in [-1, 1), ints in [0, 100)
 *   stof.allclose(a, b[, rtol][, atol])  stof.rel_l2(a, b)
 *   t:shape() t:dtype() t:device() t:ndim() t:numel() t:to(dev) t:astype(dtype) t:clone()
 *   t:fill(v) t:totable() t:close()      t[{i, j}] and t[{i, j}] = v (0-based); t[i] in 1-D
 *   t:slice(dim, start[, length])        a contiguous copy of elements start .. start +
 *                                        length - 1 (length 1 by default) of dim (0-based)
 *
 * dtype defaults to float32. A handle owns its tensor until collected, closed (t:close(),
 * or a <close> variable) or finalized; every use of a closed handle is an error.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "lua_int.h"

/* ---------------------------------------------------------------- handles */

static int tensor_gc(lua_State *L) {
  slua_tensor *h = slua_checkudata(L, 1, SLUA_TENSOR, "Tensor:close");
  if (h->t) {
    stof_tensor_free(h->t);
    h->t = NULL;
  }
  if (h->lc) {
    slua_ctx_unref(h->lc);
    h->lc = NULL;
  }
  return 0;
}

slua_tensor *slua_new_tensor(lua_State *L) {
  slua_ctx *lc = slua_state_ctx(L);
  slua_tensor *h = lua_newuserdatauv(L, sizeof *h, 0);
  h->t = NULL;
  h->lc = NULL;
  luaL_setmetatable(L, SLUA_TENSOR);
  h->lc = slua_ctx_ref(lc);
  return h;
}

slua_tensor *slua_new_tensor_borrowing(lua_State *L, int owner) {
  owner = lua_absindex(L, owner);
  slua_ctx *lc = slua_state_ctx(L);
  slua_tensor *h = lua_newuserdatauv(L, sizeof *h, 1);
  h->t = NULL;
  h->lc = NULL;
  luaL_setmetatable(L, SLUA_TENSOR);
  lua_pushvalue(L, owner);
  lua_setiuservalue(L, -2, 1);
  h->lc = slua_ctx_ref(lc);
  return h;
}

stof_tensor *slua_check_tensor(lua_State *L, int arg, const char *fname) {
  slua_tensor *h = luaL_testudata(L, arg, SLUA_TENSOR);
  if (!h) return slua_typeerror(L, arg, fname, "stof.Tensor"), NULL;
  if (!h->t) return slua_error(L, "ValueError", "%s: bad argument #%d (the tensor is closed)", fname, arg), NULL;
  return h->t;
}


static int is_int(stof_dtype d) { return d == STOF_DTYPE_I32 || d == STOF_DTYPE_I64; }

static void push_value(lua_State *L, stof_dtype d, double v) {
  if (d == STOF_DTYPE_BOOL)
    lua_pushboolean(L, v != 0);
  else if (is_int(d))
    lua_pushinteger(L, (lua_Integer)v);
  else
    lua_pushnumber(L, (lua_Number)v);
}

static const char *device_name(stof_device d) { return d == STOF_DEVICE_CUDA ? "cuda" : "cpu"; }

static void check_cpu(lua_State *L, const stof_tensor *t, const char *fname) {
  if (t->device != STOF_DEVICE_CPU)
    slua_error(L, "ValueError", "%s: the tensor is on %s: copy it with t:to(\"cpu\") first", fname,
               device_name(t->device));
}

/* ---------------------------------------------------------------- constructors */

/* "{0, 2}" for messages. */
static const char *path_str(char *buf, size_t n, int depth, const int64_t *idx) {
  size_t len = (size_t)snprintf(buf, n, "{");
  for (int d = 0; d < depth && len < n; d++)
    len += (size_t)snprintf(buf + len, n - len, d ? ", %lld" : "%lld", (long long)idx[d]);
  if (len < n) snprintf(buf + len, n - len, "}");
  return buf;
}

/* Copies the nested table at idx (depth d) into t, contiguous, from *off on. */
static void fill_from(lua_State *L, int idx, stof_tensor *t, int d, int64_t *path, int64_t *off) {
  char where[128];
  if (d == t->ndim) {
    int ty = lua_type(L, idx);
    if (ty == LUA_TNUMBER)
      stof_tensor_store(t, (*off)++, (double)lua_tonumber(L, idx));
    else if (ty == LUA_TBOOLEAN)
      stof_tensor_store(t, (*off)++, lua_toboolean(L, idx) ? 1.0 : 0.0);
    else if (ty == LUA_TTABLE)
      slua_error(L, "ShapeError", "stof.tensor: ragged nested table: element %s is a table, a number was expected",
                 path_str(where, sizeof where, d, path));
    else
      slua_error(L, "TypeError", "stof.tensor: element %s: number expected, got %s",
                 path_str(where, sizeof where, d, path), slua_typename(L, idx));
    return;
  }
  if (!lua_istable(L, idx))
    slua_error(L, "ShapeError", "stof.tensor: ragged nested table: %s: table of %I expected, got %s",
               path_str(where, sizeof where, d, path), (lua_Integer)t->shape[d],
               slua_typename(L, idx));
  lua_Integer n = (lua_Integer)lua_rawlen(L, idx);
  if (n != t->shape[d])
    slua_error(L, "ShapeError", "stof.tensor: ragged nested table: %s has %I elements, expected %I",
               path_str(where, sizeof where, d, path), n, (lua_Integer)t->shape[d]);
  for (lua_Integer i = 0; i < n; i++) {
    lua_rawgeti(L, idx, i + 1);
    path[d] = i;
    fill_from(L, lua_gettop(L), t, d + 1, path, off);
    lua_pop(L, 1);
  }
}

static int l_tensor(lua_State *L) {
  const char *fname = "stof.tensor";
  int ty = lua_type(L, 1);
  if (ty != LUA_TTABLE && ty != LUA_TNUMBER && ty != LUA_TBOOLEAN)
    return slua_typeerror(L, 1, fname, "nested table of numbers");
  stof_dtype d = (stof_dtype)slua_opt_dtype(L, 2, fname, STOF_DTYPE_F32);
  lua_settop(L, 2);
  int64_t shape[STOF_MAX_DIMS];
  int ndim = 0;
  if (ty == LUA_TTABLE) { /* the shape follows the first element at each depth */
    lua_pushvalue(L, 1);
    while (lua_istable(L, -1)) {
      if (ndim == STOF_MAX_DIMS)
        return slua_error(L, "ShapeError", "%s: nested deeper than %d levels", fname, STOF_MAX_DIMS);
      lua_Integer n = (lua_Integer)lua_rawlen(L, -1);
      shape[ndim++] = n;
      if (n == 0) break;
      lua_rawgeti(L, -1, 1);
    }
    lua_settop(L, 2);
  }
  slua_tensor *h = slua_new_tensor(L);
  stof_ctx *ctx = h->lc->ctx;
  stof_status st = stof_tensor_new(ctx, d, ndim, shape, STOF_DEVICE_CPU, &h->t);
  if (st) return slua_raise(L, ctx, st, fname);
  int64_t path[STOF_MAX_DIMS], off = 0;
  fill_from(L, 1, h->t, 0, path, &off);
  lua_settop(L, 3);
  return 1;
}

static int l_zeros(lua_State *L) {
  const char *fname = "stof.zeros";
  int64_t shape[STOF_MAX_DIMS];
  int ndim = slua_check_shape(L, 1, fname, shape);
  stof_dtype d = (stof_dtype)slua_opt_dtype(L, 2, fname, STOF_DTYPE_F32);
  slua_tensor *h = slua_new_tensor(L);
  stof_status st = stof_tensor_new(h->lc->ctx, d, ndim, shape, STOF_DEVICE_CPU, &h->t);
  if (st) return slua_raise(L, h->lc->ctx, st, fname);
  return 1;
}

static double check_value(lua_State *L, int arg, const char *fname) {
  if (lua_type(L, arg) == LUA_TBOOLEAN) return lua_toboolean(L, arg);
  if (lua_type(L, arg) != LUA_TNUMBER) return slua_typeerror(L, arg, fname, "number");
  return (double)lua_tonumber(L, arg);
}

static int l_full(lua_State *L) {
  const char *fname = "stof.full";
  int64_t shape[STOF_MAX_DIMS];
  int ndim = slua_check_shape(L, 1, fname, shape);
  double v = check_value(L, 2, fname);
  stof_dtype d = (stof_dtype)slua_opt_dtype(L, 3, fname, STOF_DTYPE_F32);
  slua_tensor *h = slua_new_tensor(L);
  stof_status st = stof_tensor_new(h->lc->ctx, d, ndim, shape, STOF_DEVICE_CPU, &h->t);
  if (st) return slua_raise(L, h->lc->ctx, st, fname);
  stof_tensor_fill(h->t, v);
  return 1;
}

/* A device name at index i ("cpu" when absent). */
static stof_device check_device(lua_State *L, int i, const char *fname) {
  if (lua_isnoneornil(L, i)) return STOF_DEVICE_CPU;
  if (lua_type(L, i) != LUA_TSTRING) return (stof_device)slua_typeerror(L, i, fname, "device string");
  const char *dev = lua_tostring(L, i);
  if (strcmp(dev, "cpu") == 0) return STOF_DEVICE_CPU;
  if (strcmp(dev, "cuda") == 0 || strcmp(dev, "gpu") == 0) return STOF_DEVICE_CUDA;
  return (stof_device)slua_error(L, "ValueError", "%s: unknown device '%s' (expected \"cpu\" or \"cuda\")", fname, dev);
}

/* stof.rand(shape[, dtype[, seed[, device]]]): on "cuda" made there, the same values */
static int l_rand(lua_State *L) {
  const char *fname = "stof.rand";
  int64_t shape[STOF_MAX_DIMS];
  int ndim = slua_check_shape(L, 1, fname, shape);
  stof_dtype d = (stof_dtype)slua_opt_dtype(L, 2, fname, STOF_DTYPE_F32);
  lua_Integer seed = lua_isnoneornil(L, 3) ? 0 : slua_check_integer(L, 3, fname, "seed");
  stof_device dev = check_device(L, 4, fname);
  slua_tensor *h = slua_new_tensor(L);
  stof_status st = stof_tensor_rand_on(h->lc->ctx, d, ndim, shape, (uint64_t)seed, dev, &h->t);
  if (st) return slua_raise(L, h->lc->ctx, st, fname);
  return 1;
}

/* stof.uniform(shape, lo, hi[, dtype[, seed]]): uniform in [lo, hi) before rounding to the
 * dtype (float32 by default), CPU, from the draw of stof.rand(shape, dtype, seed) */
static int l_uniform(lua_State *L) {
  const char *fname = "stof.uniform";
  int64_t shape[STOF_MAX_DIMS];
  int ndim = slua_check_shape(L, 1, fname, shape);
  if (lua_type(L, 2) != LUA_TNUMBER) return slua_typeerror(L, 2, fname, "number (lo)");
  if (lua_type(L, 3) != LUA_TNUMBER) return slua_typeerror(L, 3, fname, "number (hi)");
  double lo = (double)lua_tonumber(L, 2), hi = (double)lua_tonumber(L, 3);
  stof_dtype d = (stof_dtype)slua_opt_dtype(L, 4, fname, STOF_DTYPE_F32);
  lua_Integer seed = lua_isnoneornil(L, 5) ? 0 : slua_check_integer(L, 5, fname, "seed");
  slua_tensor *h = slua_new_tensor(L);
  stof_status st = stof_tensor_uniform(h->lc->ctx, d, ndim, shape, (uint64_t)seed, lo, hi, &h->t);
  if (st) return slua_raise(L, h->lc->ctx, st, fname);
  return 1;
}

/* stof.rand_range(dtype, seed, first, count): elements [first, first + count) of
 * stof.rand(any shape, dtype, seed) as a 1-D CPU tensor */
static int l_rand_range(lua_State *L) {
  const char *fname = "stof.rand_range";
  stof_dtype d = (stof_dtype)slua_opt_dtype(L, 1, fname, STOF_DTYPE_F32);
  lua_Integer seed = slua_check_integer(L, 2, fname, "seed");
  lua_Integer first = slua_check_integer(L, 3, fname, "first");
  lua_Integer count = slua_check_integer(L, 4, fname, "count");
  slua_tensor *h = slua_new_tensor(L);
  stof_status st = stof_tensor_rand_range(h->lc->ctx, d, (uint64_t)seed, (int64_t)first, (int64_t)count, &h->t);
  if (st) return slua_raise(L, h->lc->ctx, st, fname);
  return 1;
}

static int l_allclose(lua_State *L) {
  const char *fname = "stof.allclose";
  stof_tensor *a = slua_check_tensor(L, 1, fname), *b = slua_check_tensor(L, 2, fname);
  double rtol = slua_opt_number(L, 3, fname, "rtol", 1e-5);
  double atol = slua_opt_number(L, 4, fname, "atol", 1e-8);
  check_cpu(L, a, fname);
  check_cpu(L, b, fname);
  int ok = 0;
  stof_status st = stof_tensor_allclose(a, b, rtol, atol, &ok);
  if (st) return slua_raise(L, a->ctx, st, fname);
  lua_pushboolean(L, ok);
  return 1;
}

static int l_rel_l2(lua_State *L) {
  const char *fname = "stof.rel_l2";
  stof_tensor *a = slua_check_tensor(L, 1, fname), *b = slua_check_tensor(L, 2, fname);
  check_cpu(L, a, fname);
  check_cpu(L, b, fname);
  double r = 0;
  stof_status st = stof_tensor_rel_l2(a, b, &r);
  if (st) return slua_raise(L, a->ctx, st, fname);
  lua_pushnumber(L, (lua_Number)r);
  return 1;
}

/* ---------------------------------------------------------------- elements */

/* The multi-index of key k (a table, or an integer for a 1-D tensor) into idx. */
static void check_index(lua_State *L, const stof_tensor *t, int k, int64_t *idx, const char *what) {
  if (lua_istable(L, k)) {
    lua_Integer n = (lua_Integer)lua_rawlen(L, k);
    if (n != t->ndim)
      slua_error(L, "IndexError", "%s: %I ind%s for a %d-D tensor", what, n, n == 1 ? "ex" : "ices",
                 t->ndim);
    for (int d = 0; d < t->ndim; d++) {
      lua_rawgeti(L, k, d + 1);
      int isint = 0;
      lua_Integer v = lua_type(L, -1) == LUA_TNUMBER ? lua_tointegerx(L, -1, &isint) : 0;
      if (!isint) {
        if (lua_type(L, -1) == LUA_TNUMBER)
          slua_error(L, "TypeError", "%s: the index for dim %d must be an integer, got %f", what, d,
                     (double)lua_tonumber(L, -1));
        slua_error(L, "TypeError", "%s: the index for dim %d must be an integer, got %s", what, d,
                   slua_typename(L, -1));
      }
      idx[d] = (int64_t)v;
      lua_pop(L, 1);
    }
    return;
  }
  if (lua_type(L, k) == LUA_TNUMBER) {
    if (t->ndim != 1)
      slua_error(L, "IndexError", "%s: 1 index for a %d-D tensor (use t[{i, j, ...}])", what, t->ndim);
    int isint = 0;
    lua_Integer v = lua_tointegerx(L, k, &isint);
    if (!isint)
      slua_error(L, "TypeError", "%s: the index for dim 0 must be an integer, got %f", what,
                 (double)lua_tonumber(L, k));
    idx[0] = (int64_t)v;
    return;
  }
  slua_error(L, "TypeError", "%s: index with a table of integers, as in t[{i, j}], got %s", what,
             slua_typename(L, k));
}

static int tensor_method(lua_State *L); /* looks a method up */

static int tensor_index(lua_State *L) {
  slua_tensor *h = slua_checkudata(L, 1, SLUA_TENSOR, "Tensor[...]");
  if (lua_type(L, 2) == LUA_TSTRING) return tensor_method(L);
  const char *what = "Tensor[...]";
  if (!h->t) return slua_error(L, "ValueError", "%s: the tensor is closed", what);
  int64_t idx[STOF_MAX_DIMS];
  check_index(L, h->t, 2, idx, what);
  check_cpu(L, h->t, what);
  double v = 0;
  stof_status st = stof_tensor_get(h->t, idx, &v);
  if (st) return slua_raise(L, h->t->ctx, st, what);
  push_value(L, h->t->dtype, v);
  return 1;
}

static int tensor_newindex(lua_State *L) {
  slua_tensor *h = slua_checkudata(L, 1, SLUA_TENSOR, "Tensor[...] =");
  const char *what = "Tensor[...] =";
  if (!h->t) return slua_error(L, "ValueError", "%s: the tensor is closed", what);
  if (lua_type(L, 2) == LUA_TSTRING)
    return slua_error(L, "TypeError", "%s: cannot set field '%s' of a tensor", what, lua_tostring(L, 2));
  int64_t idx[STOF_MAX_DIMS];
  check_index(L, h->t, 2, idx, what);
  int vt = lua_type(L, 3);
  if (vt != LUA_TNUMBER && vt != LUA_TBOOLEAN)
    return slua_error(L, "TypeError", "%s: the value must be a number or a boolean, got %s", what,
                      slua_typename(L, 3));
  check_cpu(L, h->t, what);
  double v = vt == LUA_TBOOLEAN ? lua_toboolean(L, 3) : (double)lua_tonumber(L, 3);
  stof_status st = stof_tensor_set(h->t, idx, v);
  if (st) return slua_raise(L, h->t->ctx, st, what);
  return 0;
}

/* ---------------------------------------------------------------- methods */

static int m_shape(lua_State *L) {
  stof_tensor *t = slua_check_tensor(L, 1, "Tensor:shape");
  slua_push_shape(L, t->ndim, t->shape);
  return 1;
}

static int m_dtype(lua_State *L) {
  lua_pushstring(L, stof_dtype_name(slua_check_tensor(L, 1, "Tensor:dtype")->dtype));
  return 1;
}

static int m_device(lua_State *L) {
  lua_pushstring(L, device_name(slua_check_tensor(L, 1, "Tensor:device")->device));
  return 1;
}

static int m_ndim(lua_State *L) {
  lua_pushinteger(L, slua_check_tensor(L, 1, "Tensor:ndim")->ndim);
  return 1;
}

static int m_numel(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)stof_tensor_numel(slua_check_tensor(L, 1, "Tensor:numel")));
  return 1;
}

static int m_to(lua_State *L) {
  const char *fname = "Tensor:to";
  stof_tensor *t = slua_check_tensor(L, 1, fname);
  if (lua_type(L, 2) != LUA_TSTRING) return slua_typeerror(L, 2, fname, "device string");
  const char *dev = lua_tostring(L, 2);
  stof_device d;
  if (strcmp(dev, "cpu") == 0)
    d = STOF_DEVICE_CPU;
  else if (strcmp(dev, "cuda") == 0 || strcmp(dev, "gpu") == 0)
    d = STOF_DEVICE_CUDA;
  else
    return slua_error(L, "ValueError", "%s: unknown device '%s' (expected \"cpu\" or \"cuda\")", fname, dev);
  lua_settop(L, 2);
  slua_tensor *h = slua_new_tensor(L);
  stof_status st = stof_tensor_to(t, d, &h->t);
  if (st) return slua_raise(L, t->ctx, st, fname);
  return 1;
}

/* t:count_nan() -> the NaN elements, counted where t lives */
static int m_count_nan(lua_State *L) {
  const char *fname = "Tensor:count_nan";
  stof_tensor *t = slua_check_tensor(L, 1, fname);
  int64_t n = 0;
  stof_status st = stof_tensor_count_nan(t, &n);
  if (st) return slua_raise(L, t->ctx, st, fname);
  lua_pushinteger(L, (lua_Integer)n);
  return 1;
}

static int m_clone(lua_State *L) {
  const char *fname = "Tensor:clone";
  stof_tensor *t = slua_check_tensor(L, 1, fname);
  lua_settop(L, 1);
  slua_tensor *h = slua_new_tensor(L);
  stof_status st = stof_tensor_to(t, t->device, &h->t);
  if (st) return slua_raise(L, t->ctx, st, fname);
  return 1;
}

static int m_astype(lua_State *L) {
  const char *fname = "Tensor:astype";
  stof_tensor *t = slua_check_tensor(L, 1, fname);
  stof_dtype d = slua_check_dtype(L, 2, fname);
  check_cpu(L, t, fname);
  lua_settop(L, 2);
  slua_tensor *h = slua_new_tensor(L);
  stof_status st = stof_tensor_cast(t, d, &h->t);
  if (st) return slua_raise(L, t->ctx, st, fname);
  return 1;
}

/* t:slice(dim, start[, length]) -> a contiguous copy (CPU) of that range of dim, the
 * other dims whole: a (b, h) slice of a [B, H, S, D] tensor is t:slice(0, b):slice(1, h). */
static int m_slice(lua_State *L) {
  const char *fname = "Tensor:slice";
  stof_tensor *t = slua_check_tensor(L, 1, fname);
  lua_Integer dim = slua_check_integer(L, 2, fname, "dim");
  lua_Integer start = slua_check_integer(L, 3, fname, "start");
  lua_Integer len = lua_isnoneornil(L, 4) ? 1 : slua_check_integer(L, 4, fname, "length");
  check_cpu(L, t, fname);
  if (dim < 0 || dim >= t->ndim)
    return slua_error(L, "IndexError", "%s: dim %I of a %d-D tensor", fname, dim, t->ndim);
  int64_t n = t->shape[dim];
  if (start < 0 || start > n || len < 0 || len > n - start)
    return slua_error(L, "IndexError", "%s: elements [%I, %I + %I) of dim %I, which has %I", fname, start, start,
                      len, dim, (lua_Integer)n);
  int64_t shape[STOF_MAX_DIMS];
  memcpy(shape, t->shape, sizeof shape);
  shape[dim] = len;
  char *data = (char *)t->data + (size_t)(start * t->strides[dim]) * stof_dtype_size(t->dtype);
  stof_tensor *view = NULL;
  lua_settop(L, 1);
  slua_tensor *h = slua_new_tensor(L);
  stof_status st = stof_tensor_wrap(t->ctx, t->dtype, t->ndim, shape, t->strides, len ? data : t->data,
                                    STOF_DEVICE_CPU, &view);
  if (!st) st = stof_tensor_cast(view, t->dtype, &h->t);
  stof_tensor_free(view);
  if (st) return slua_raise(L, t->ctx, st, fname);
  return 1;
}

static int m_fill(lua_State *L) {
  const char *fname = "Tensor:fill";
  stof_tensor *t = slua_check_tensor(L, 1, fname);
  double v = check_value(L, 2, fname);
  check_cpu(L, t, fname);
  stof_tensor_fill(t, v);
  lua_settop(L, 1);
  return 1;
}

static void to_table(lua_State *L, const stof_tensor *t, int d, int64_t off) {
  if (d == t->ndim) {
    push_value(L, t->dtype, stof_tensor_load(t, off));
    return;
  }
  luaL_checkstack(L, 4, "Tensor:totable");
  int64_t n = t->shape[d];
  lua_createtable(L, n < (1 << 24) ? (int)n : 0, 0);
  for (int64_t i = 0; i < n; i++) {
    to_table(L, t, d + 1, off + i * t->strides[d]);
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
}

static int m_totable(lua_State *L) {
  const char *fname = "Tensor:totable";
  stof_tensor *t = slua_check_tensor(L, 1, fname);
  check_cpu(L, t, fname);
  to_table(L, t, 0, 0);
  return 1;
}

static int m_close(lua_State *L) {
  return tensor_gc(L);
}

/* ---------------------------------------------------------------- printing */

#define SUMMARY_NUMEL 1000 /* larger tensors show edge items only */
#define EDGE 3

static void add_scalar(luaL_Buffer *b, stof_dtype d, double v) {
  char s[64];
  if (d == STOF_DTYPE_BOOL)
    snprintf(s, sizeof s, "%s", v != 0 ? "true" : "false");
  else if (is_int(d))
    snprintf(s, sizeof s, "%lld", (long long)v);
  else
    snprintf(s, sizeof s, "%.6g", v);
  luaL_addstring(b, s);
}

static void add_values(luaL_Buffer *b, const stof_tensor *t, int d, int64_t off, int summarize) {
  if (d == t->ndim) {
    add_scalar(b, t->dtype, stof_tensor_load(t, off));
    return;
  }
  int64_t n = t->shape[d];
  int skip = summarize && n > 2 * EDGE;
  luaL_addchar(b, '[');
  for (int64_t i = 0; i < n; i++) {
    if (skip && i == EDGE) {
      luaL_addstring(b, d + 1 < t->ndim ? ",\n" : ", ");
      if (d + 1 < t->ndim)
        for (int s = 0; s <= d; s++) luaL_addchar(b, ' ');
      luaL_addstring(b, "...");
      i = n - EDGE - 1;
      continue;
    }
    if (i > 0) {
      luaL_addchar(b, ',');
      if (d + 1 < t->ndim) {
        luaL_addchar(b, '\n');
        for (int s = 0; s <= d; s++) luaL_addchar(b, ' ');
      } else {
        luaL_addchar(b, ' ');
      }
    }
    add_values(b, t, d + 1, off + i * t->strides[d], summarize);
  }
  luaL_addchar(b, ']');
}

static int tensor_tostring(lua_State *L) {
  slua_tensor *h = slua_checkudata(L, 1, SLUA_TENSOR, "Tensor:__tostring");
  const stof_tensor *t = h->t;
  if (!t) {
    lua_pushliteral(L, "stof.Tensor (closed)");
    return 1;
  }
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  char head[64];
  snprintf(head, sizeof head, "stof.Tensor %s [", stof_dtype_name(t->dtype));
  luaL_addstring(&b, head);
  for (int d = 0; d < t->ndim; d++) {
    snprintf(head, sizeof head, d ? ", %lld" : "%lld", (long long)t->shape[d]);
    luaL_addstring(&b, head);
  }
  luaL_addstring(&b, "]");
  if (t->device != STOF_DEVICE_CPU) {
    luaL_addstring(&b, " on cuda (values on the GPU: t:to(\"cpu\") to see them)");
  } else {
    luaL_addchar(&b, '\n');
    int64_t numel = stof_tensor_numel(t);
    if (numel == 0 && t->ndim > 0)
      luaL_addstring(&b, "[]");
    else
      add_values(&b, t, 0, 0, numel > SUMMARY_NUMEL);
  }
  luaL_pushresult(&b);
  return 1;
}

/* ---------------------------------------------------------------- registration */

static const luaL_Reg methods[] = {
    {"shape", m_shape},   {"dtype", m_dtype},     {"device", m_device}, {"ndim", m_ndim},
    {"numel", m_numel},   {"to", m_to},           {"clone", m_clone},   {"astype", m_astype},
    {"fill", m_fill},     {"totable", m_totable}, {"close", m_close},   {"slice", m_slice},
    {"count_nan", m_count_nan}, {NULL, NULL},
};

static int tensor_method(lua_State *L) {
  lua_getfield(L, lua_upvalueindex(1), lua_tostring(L, 2));
  return 1;
}

void slua_open_tensor(lua_State *L, int idx) {
  idx = lua_absindex(L, idx);
  if (luaL_newmetatable(L, SLUA_TENSOR)) {
    luaL_newlib(L, methods);
    lua_pushcclosure(L, tensor_index, 1);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, tensor_newindex);
    lua_setfield(L, -2, "__newindex");
    lua_pushcfunction(L, tensor_tostring);
    lua_setfield(L, -2, "__tostring");
    lua_pushcfunction(L, tensor_gc);
    lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, tensor_gc);
    lua_setfield(L, -2, "__close");
  }
  lua_pop(L, 1);
  static const luaL_Reg fns[] = {
      {"tensor", l_tensor},     {"zeros", l_zeros},   {"full", l_full}, {"rand", l_rand},
      {"uniform", l_uniform}, {"rand_range", l_rand_range}, {"allclose", l_allclose}, {"rel_l2", l_rel_l2}, {NULL, NULL},
  };
  lua_pushvalue(L, idx);
  luaL_setfuncs(L, fns, 0);
  lua_pop(L, 1);
}
