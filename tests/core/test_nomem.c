/*
 * Out of memory across layers that the per-module fault loops do not reach: the TE printer
 * and the structural hash, the on-disk cache (core/cache.c), and the Lua bindings. Each
 * scenario runs with the Nth growing allocation failing, for N = 1, 2, ... until a run
 * sees no failure; every failing run reports STOF_ERR_NOMEM (a MemoryError from Lua),
 * nothing crashes, and once everything is freed the heap holds no byte and every free gave
 * back the size allocated.
 *
 * The Lua scenarios open the module with slua_open_with_ctx (lua/lua_int.h, test-only) on a
 * context whose allocator is tu_alloc; Lua's own allocations stay on malloc, so only the
 * stof side fails.
 */
#include "testutil.h"

#include <stdio.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lualib.h>

#include "lua_int.h"

/* ---------------------------------------------------------------- te_print and te_hash */

/* D = 2 * (A @ B) + 1 in a fresh graph on ctx (built before any failure is injected). */
static void matmul_graph(stof_ctx *ctx, stof_graph **g, const stof_op **D) {
  TU_OK(ctx, stof_graph_new(ctx, g));
  const stof_op *A = tu_ph(*g, "A", STOF_DTYPE_F32, 2, TU_SHAPE(6, 5));
  const stof_op *B = tu_ph(*g, "B", STOF_DTYPE_F32, 2, TU_SHAPE(5, 7));
  const stof_expr *ax[2], *bx[2];
  tu_axes(*g, 2, TU_SHAPE(6, 7), ax);
  const stof_expr *k = tu_raxis(*g, 5, "k");
  const stof_expr *prod = tu_bin(*g, STOF_EXPR_MUL, tu_load(*g, A, 2, ax[0], k), tu_load(*g, B, 2, k, ax[1]));
  const stof_op *C = tu_compute(*g, "C", 2, ax, tu_reduce(*g, STOF_REDUCE_SUM, prod, 1, k));
  tu_axes(*g, 2, TU_SHAPE(6, 7), bx);
  const stof_expr *body =
      tu_bin(*g, STOF_EXPR_ADD, tu_bin(*g, STOF_EXPR_MUL, tu_load(*g, C, 2, bx[0], bx[1]), tu_f32(*g, 2)), tu_f32(*g, 1));
  *D = tu_compute(*g, "D", 2, bx, body);
}

static void te_print_and_hash_out_of_memory_are_clean(void **state) {
  (void)state;
  int done = 0, nfail = 0;
  uint64_t want = 0;
  for (long n = 0; !done && n < 10000; n++) { /* n = 0: no failure, the expected results */
    tu_heap h;
    stof_ctx *ctx = tu_ctx_new(&h);
    stof_graph *g;
    const stof_op *D;
    matmul_graph(ctx, &g, &D);
    h.fail_at = n ? h.nalloc + n : 0;
    char *text = NULL;
    uint64_t hash = 0;
    stof_status st = stof_te_print(g, 1, &D, &text);
    if (!st) st = stof_te_hash(g, 1, &D, &hash);
    if (h.failed) {
      if (st != STOF_ERR_NOMEM) fail_msg("allocation %ld failed: %s (%s)", n, stof_status_name(st), stof_ctx_message(ctx));
      assert_int_equal(stof_ctx_status(ctx), STOF_ERR_NOMEM);
      stof_ctx_clear_error(ctx);
      nfail++;
    } else {
      TU_OK(ctx, st);
      assert_non_null(strstr(text, "D"));
      if (n == 0) want = hash;
      assert_true(hash == want);
      done = n > 0;
    }
    h.fail_at = 0;
    if (text) stof_ctx_dealloc(ctx, text, strlen(text) + 1);
    stof_graph_free(g);
    tu_ctx_free(ctx, &h);
  }
  printf("te_print + te_hash failure injection: %d allocations, each failed in turn\n", nfail);
  assert_true(done && nfail > 0);
}

/* ---------------------------------------------------------------- the on-disk cache */

static void cache_out_of_memory_is_clean(void **state) {
  (void)state;
  static const char payload[] = "cached bytes of the fault-injection test";
  char name[64];
  snprintf(name, sizeof name, "nomem-%ld", (long)getpid());
  int done = 0;
  long n;
  for (n = 1; !done && n < 10000; n++) {
    tu_heap h;
    stof_ctx *ctx = tu_ctx_new(&h);
    h.fail_at = h.nalloc + n;
    char dir[1024], path[1200];
    void *data = NULL;
    size_t size = 0;
    stof_status st = stof_cache_dir(ctx, "test", dir, sizeof dir);
    if (!st) {
      snprintf(path, sizeof path, "%s/%s.bin", dir, name);
      st = stof_cache_write(ctx, path, payload, sizeof payload);
    }
    if (!st) st = stof_cache_read(ctx, path, &data, &size);
    if (!st) {
      assert_int_equal(size, sizeof payload);
      assert_memory_equal(data, payload, sizeof payload);
      stof_ctx_dealloc(ctx, data, size);
      char absent[1300];
      snprintf(absent, sizeof absent, "%s.absent", path);
      void *none = NULL;
      size_t nsize = 0;
      st = stof_cache_read(ctx, absent, &none, &nsize);
      if (st == STOF_ERR_NOT_FOUND) stof_ctx_clear_error(ctx), st = STOF_OK;
    }
    if (h.failed) {
      if (st != STOF_ERR_NOMEM) fail_msg("allocation %ld failed: %s (%s)", n, stof_status_name(st), stof_ctx_message(ctx));
      stof_ctx_clear_error(ctx);
    } else {
      TU_OK(ctx, st);
      done = 1;
      unlink(path);
    }
    h.fail_at = 0;
    tu_ctx_free(ctx, &h);
  }
  printf("cache failure injection: %ld allocations, each failed in turn\n", n - 2);
  assert_true(done && n > 2);
}

/* ---------------------------------------------------------------- the Lua bindings */

/* Scripts that go through most bindings: tensors, TE graphs and their printer, the
 * interpreter, schedules, the C backend, the runtime, masks and their formats, attention
 * on the CPU and the selector, the tuning database, stof.nn. DB names the database file. */
static const char *const lua_scripts[] = {
    "local stof = require('stof')\n"
    "local t = stof.rand({4, 5}, 'float32', 1)\n"
    "local z = stof.zeros({4, 5}, 'float16'):fill(2)\n"
    "assert(tostring(t):find('float32') and #t:totable() == 4 and z[{1, 1}] == 2)\n",

    "local stof = require('stof'); local te = stof.te\n"
    "local A = te.placeholder({6, 5}, 'float32', 'A')\n"
    "local B = te.placeholder({5, 7}, 'float32', 'B')\n"
    "local k = te.reduce_axis(5, 'k')\n"
    "local C = te.compute({6, 7}, function(i, j) return te.sum(A[{i, k}] * B[{k, j}], {k}) end, 'C')\n"
    "assert(tostring(C):find('C'))\n"
    "local c = stof.eval(C, {[A] = stof.rand({6, 5}, 'float32', 1), [B] = stof.rand({5, 7}, 'float32', 2)})\n"
    "assert(c:shape()[2] == 7)\n",

    "local stof = require('stof'); local te = stof.te\n"
    "local A = te.placeholder({16, 8}, 'float32', 'A')\n"
    "local C = te.compute({16, 8}, function(i, j) return A[{i, j}] * 2 + 1 end, 'C')\n"
    "local s = stof.schedule(C)\n"
    "local i = s:get_loops(s:get_block('C'))[1]\n"
    "s:split(i, {stof.INFER, 4})\n"
    "assert(tostring(s):find('for'))\n"
    "local f = stof.build(s, {A, C}, {target = 'c'})\n"
    "local a, c = stof.rand({16, 8}, 'float32', 3), stof.zeros({16, 8}, 'float32')\n"
    "f(a, c)\n"
    "assert(c[{1, 1}] == a[{1, 1}] * 2 + 1)\n"
    "local p = stof.plan(C, {target = 'c'})\n"
    "local out = p:run{[A] = a}\n"
    "assert(out[{2, 3}] == c[{2, 3}])\n",

    "local stof = require('stof'); local M = stof.mask\n"
    "local m = (M.causal() & M.sliding(8)) | M.global(2)\n"
    "local fm = M.fn(function(b, h, i, j) return (i + j) % 3 ~= 0 end)\n"
    "local f = (m - fm):format(40, {tile = 16})\n"
    "assert(tostring(f):find('tile'))\n"
    "local q = stof.rand({1, 2, 40, 8}, 'float32', 1)\n"
    "local o = stof.attention(q, q, q, m - fm)\n"
    "local text = stof.explain(m, {S = 64}, {gpu = 'h100'})\n"
    "assert(text:find('choice'))\n"
    "local te = stof.te\n"
    "local Q = te.placeholder({1, 2, 40, 8}, 'float32', 'Q')\n"
    "local O = te.attention(Q, Q, Q, m)\n"
    "assert(stof.rel_l2(stof.eval(O, {[Q] = q}), stof.attention(q, q, q, m)) < 1e-5)\n",

    "local stof = require('stof')\n"
    "local db <close> = stof.db.open(DB)\n"
    "db:append{workload = 'w', device = 'cpu', scheme = '01', knobs = {t = 2, u = 1}, times_ms = {2, 1, 3}}\n"
    "db:append{workload = 'w', device = 'cpu', status = 'ERR_COMPILE', message = 'cc'}\n"
    "local best = db:best('w', 'cpu')\n"
    "assert(best and best.median_ms == 2)\n"
    "assert(db:get(1).knobs.t == 2 and db:refresh() == 0)\n",

    "local stof = require('stof'); local te, nn = stof.te, stof.nn\n"
    "local x = te.placeholder({2, 3, 8}, 'float32', 'x')\n"
    "local w = te.placeholder({8, 4}, 'float32', 'w')\n"
    "local g = te.placeholder({4}, 'float32', 'g')\n"
    "local y = nn.softmax(nn.layer_norm(nn.gelu(nn.linear(x, w, g)), g, g, 1e-5))\n"
    "local feed = {[x] = stof.rand({2, 3, 8}, 'float32', 1), [w] = stof.rand({8, 4}, 'float32', 2),\n"
    "              [g] = stof.rand({4}, 'float32', 3)}\n"
    "assert(stof.eval(y, feed):shape()[3] == 4)\n",
};

/* Runs script i in a fresh state whose stof context fails its nth allocation (0: none).
 * Returns 1 when an allocation failed; the script then raised a MemoryError. */
static int run_lua(int i, long n, const char *db, int *ran_ok) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  lua_State *L = luaL_newstate();
  assert_non_null(L);
  luaL_openlibs(L);
  slua_open_with_ctx(L, ctx); /* the state owns ctx from here */
  lua_pop(L, 1);
  stof_lua_add_path(L, NULL);
  lua_pushstring(L, db);
  lua_setglobal(L, "DB");
  h.fail_at = n ? h.nalloc + n : 0;
  int st = luaL_loadstring(L, lua_scripts[i]);
  assert_int_equal(st, LUA_OK);
  st = lua_pcall(L, 0, 0, 0);
  const char *msg = st ? lua_tostring(L, -1) : NULL;
  char copy[2048] = "";
  if (msg) snprintf(copy, sizeof copy, "%s", msg);
  lua_close(L); /* frees ctx once its last handle is collected */
  *ran_ok = st == LUA_OK;
  if (h.failed) {
    if (st == LUA_OK) {
      /* a failure the bindings recovered from (a cache that is only an optimisation) is
       * fine only if nothing says otherwise: the script's own asserts passed */
    } else if (!strstr(copy, "MemoryError")) {
      fail_msg("script %d, allocation %ld failed: %s", i, n, copy);
    }
  } else if (st != LUA_OK) {
    fail_msg("script %d without a failure: %s", i, copy);
  }
  if (h.live != 0) fail_msg("script %d, allocation %ld: %zu bytes left", i, n, h.live);
  assert_int_equal(h.bad_size, 0);
  return h.failed;
}

static void lua_bindings_out_of_memory_are_clean(void **state) {
  (void)state;
  char dir[] = "/tmp/stof-lua-nomem-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char db[128];
  for (size_t i = 0; i < sizeof lua_scripts / sizeof lua_scripts[0]; i++) {
    int ok, nfail = 0;
    long n;
    for (n = 0; n < 20000; n++) {
      snprintf(db, sizeof db, "%s/tune-%zu-%ld.jsonl", dir, i, n);
      int failed = run_lua((int)i, n, db, &ok);
      unlink(db);
      if (n > 0 && !failed) break;
      nfail += failed && !ok;
    }
    if (n == 20000) fail_msg("script %zu: still failing after %ld allocations", i, n);
    printf("lua failure injection, script %zu: %ld allocations, each failed in turn (%d raised)\n", i, n - 1, nfail);
    assert_true(nfail > 0);
  }
  rmdir(dir);
}

int run_nomem_tests(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(te_print_and_hash_out_of_memory_are_clean),
      cmocka_unit_test(cache_out_of_memory_is_clean),
      cmocka_unit_test(lua_bindings_out_of_memory_are_clean),
  };
  return cmocka_run_group_tests_name("nomem", tests, NULL, NULL);
}
