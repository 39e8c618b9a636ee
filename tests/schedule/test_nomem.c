/* Out of memory: schedule scripts (the loop transforms and the sample_* primitives; the block
 * primitives) run with the
 * Nth allocation failing, for every N. Each
 * failing step reports STOF_ERR_NOMEM and leaves the schedule as the previous step left it;
 * nothing leaks, and every free gives back the size that was allocated. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

typedef struct heap {
  size_t live;
  long nalloc, fail_at;
  int bad_size;
} heap;

#define HDR 16

static void *heap_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  heap *h = ud;
  size_t old = 0;
  unsigned char *base = NULL;
  if (ptr) {
    base = (unsigned char *)ptr - HDR;
    memcpy(&old, base, sizeof old);
    if (old != osize) h->bad_size = 1;
  }
  if (nsize == 0) {
    if (ptr) {
      free(base);
      h->live -= old;
    }
    return NULL;
  }
  if (nsize > old && h->fail_at > 0 && ++h->nalloc == h->fail_at) return NULL;
  unsigned char *nb = realloc(base, HDR + nsize);
  if (!nb) return NULL;
  memcpy(nb, &nsize, sizeof nsize);
  h->live += nsize - old;
  return nb + HDR;
}

#define NSTEP 17

/* Runs the script; nests[k] (malloc'd) gets the loop nest after step k when record is set;
 * returns the step that failed (NSTEP when none did). */
static int script(heap *h, long fail_at, char **nests, int record) {
  h->fail_at = 0;
  h->nalloc = 0;
  stof_ctx *ctx = stof_ctx_new(heap_alloc, h);
  assert_non_null(ctx);
  stof_graph *g;
  SH_OK(ctx, stof_graph_new(ctx, &g));
  int64_t sa[2] = {12, 6}, sb[2] = {6, 10}, sc[2] = {12, 10};
  const stof_op *A, *B, *C, *D;
  SH_OK(ctx, stof_te_placeholder(g, 2, sa, STOF_DTYPE_F32, "A", &A));
  SH_OK(ctx, stof_te_placeholder(g, 2, sb, STOF_DTYPE_F32, "B", &B));
  const stof_expr *ax[2], *bx[2], *k, *la, *lb, *m, *r, *lc, *two, *mul;
  SH_OK(ctx, stof_te_compute_axes(g, 2, sc, NULL, ax));
  SH_OK(ctx, stof_te_reduce_axis(g, 6, "k", &k));
  const stof_expr *ia[2] = {ax[0], k}, *ib[2] = {k, ax[1]};
  SH_OK(ctx, stof_te_load(g, A, 2, ia, &la));
  SH_OK(ctx, stof_te_load(g, B, 2, ib, &lb));
  SH_OK(ctx, stof_te_binary(g, STOF_EXPR_MUL, la, lb, &m));
  SH_OK(ctx, stof_te_reduce(g, STOF_REDUCE_SUM, m, 1, &k, &r));
  SH_OK(ctx, stof_te_compute(g, "C", 2, ax, r, -1, &C));
  SH_OK(ctx, stof_te_compute_axes(g, 2, sc, NULL, bx));
  SH_OK(ctx, stof_te_load(g, C, 2, bx, &lc));
  SH_OK(ctx, stof_te_float(g, 2, STOF_DTYPE_F32, &two));
  SH_OK(ctx, stof_te_binary(g, STOF_EXPR_MUL, lc, two, &mul));
  SH_OK(ctx, stof_te_compute(g, "D", 2, bx, mul, -1, &D));

  h->fail_at = fail_at;
  stof_sched *s = NULL, *c = NULL, *fresh = NULL;
  stof_trace *t = NULL, *back = NULL;
  char *text = NULL;
  int b = -1, l[8], n, kn, p[2], f, grp, step, tk[2], loc = -1;
  int64_t cand[2] = {4, 5};
  stof_status st = STOF_OK;
  for (step = 0; step < NSTEP && !st; step++) {
    switch (step) {
    case 0: st = stof_sched_new(g, 1, &D, &s); break;
    case 1: st = stof_sched_get_block(s, "C", &b); break;
    case 2: st = stof_sched_get_loops(s, b, 8, l, &n); break;
    case 3: st = stof_sched_knob(s, "t", 2, cand, 1, &kn); break;
    case 4: {
      stof_factor fs[2] = {stof_factor_const(STOF_INFER), stof_factor_knob(kn)};
      st = stof_sched_split(s, l[0], 2, fs, p);
      break;
    }
    case 5: {
      int two_loops[2] = {p[1], l[1]};
      st = stof_sched_fuse(s, 2, two_loops, &f);
      break;
    }
    case 6: {
      int order[2] = {l[2], p[0]};
      st = stof_sched_reorder(s, 2, order);
      break;
    }
    case 7: st = stof_sched_annotate_loop(s, f, "note", "v"); break;
    case 8: {
      const stof_op *both[2] = {C, D};
      st = stof_sched_group(s, 2, both, &grp);
      break;
    }
    case 9: st = stof_sched_bind(s, p[0], "blockIdx.x"); break;
    case 10: st = stof_sched_sample_perfect_tile(s, l[2], 2, 3, NULL, NULL, tk); break;
    case 11: st = stof_sched_sample_compute_location(s, b, 0, NULL, &loc); break;
    case 12: st = stof_sched_compute_at_knob(s, b, loc); break;
    case 13: st = stof_sched_clone(s, &c); break;
    case 14:
      st = stof_sched_trace(s, &t);
      if (!st) st = stof_trace_to_json(t, &text);
      if (!st) st = stof_trace_from_json(ctx, text, &back);
      if (!st) st = stof_sched_fresh(s, &fresh);
      if (!st) st = stof_sched_replay(back, fresh);
      break;
    case 15:
      if (text) stof_ctx_dealloc(ctx, text, strlen(text) + 1);
      text = NULL;
      st = stof_sched_print_loop_nest(fresh, &text);
      break;
    case 16:
      if (text) stof_ctx_dealloc(ctx, text, strlen(text) + 1);
      text = NULL;
      st = stof_trace_to_lua(t, &text);
      break;
    }
    if (st) break;
    if (record) {
      long saved = h->fail_at;
      h->fail_at = 0;
      char *nest;
      SH_OK(ctx, stof_sched_print_loop_nest(s, &nest));
      nests[step] = strdup(nest);
      stof_ctx_dealloc(ctx, nest, strlen(nest) + 1);
      h->fail_at = saved;
    }
  }
  h->fail_at = 0;
  if (st) {
    assert_int_equal(st, STOF_ERR_NOMEM);
    stof_ctx_clear_error(ctx);
    if (s && step > 0) { /* the failed step changed nothing */
      char *nest;
      SH_OK(ctx, stof_sched_print_loop_nest(s, &nest));
      assert_string_equal(nest, nests[step - 1]);
      stof_ctx_dealloc(ctx, nest, strlen(nest) + 1);
    }
  }
  if (text) stof_ctx_dealloc(ctx, text, strlen(text) + 1);
  stof_trace_free(t);
  stof_trace_free(back);
  stof_sched_free(fresh);
  stof_sched_free(c);
  stof_sched_free(s);
  stof_graph_free(g);
  assert_int_equal(stof_ctx_bytes_in_use(ctx), 0);
  stof_ctx_free(ctx);
  assert_int_equal(h->live, 0);
  assert_false(h->bad_size);
  return st ? step : NSTEP;
}

static void every_allocation_may_fail(void **state) {
  heap h = {0};
  char *nests[NSTEP] = {0};
  assert_int_equal(script(&h, 0, nests, 1), NSTEP);
  int failures = 0;
  for (long n = 1;; n++) {
    int step = script(&h, n, nests, 0);
    if (step == NSTEP) break;
    failures++;
    assert_true(n < 100000);
  }
  assert_true(failures > 20);
  for (int i = 0; i < NSTEP; i++) free(nests[i]);
}

#define NSTEP2 16

/* The block primitives: C = A @ B, D = C * 2, E = D + 1; k split, rfactor, cache_read and
 * compute_at of the copy, cache_write, compute_inline(D), reverse_compute_inline(E),
 * reverse_compute_at of the write-back; then a JSON replay. As script. */
static int script2(heap *h, long fail_at, char **nests, int record) {
  h->fail_at = 0;
  h->nalloc = 0;
  stof_ctx *ctx = stof_ctx_new(heap_alloc, h);
  assert_non_null(ctx);
  stof_graph *g;
  SH_OK(ctx, stof_graph_new(ctx, &g));
  int64_t sa[2] = {6, 8}, sb[2] = {8, 5}, sc[2] = {6, 5};
  const stof_op *A, *B, *C, *D, *E;
  SH_OK(ctx, stof_te_placeholder(g, 2, sa, STOF_DTYPE_F32, "A", &A));
  SH_OK(ctx, stof_te_placeholder(g, 2, sb, STOF_DTYPE_F32, "B", &B));
  const stof_expr *ax[2], *bx[2], *cx[2], *k, *la, *lb, *m, *r, *lc, *ld, *two, *one, *mul, *add;
  SH_OK(ctx, stof_te_compute_axes(g, 2, sc, NULL, ax));
  SH_OK(ctx, stof_te_reduce_axis(g, 8, "k", &k));
  const stof_expr *ia[2] = {ax[0], k}, *ib[2] = {k, ax[1]};
  SH_OK(ctx, stof_te_load(g, A, 2, ia, &la));
  SH_OK(ctx, stof_te_load(g, B, 2, ib, &lb));
  SH_OK(ctx, stof_te_binary(g, STOF_EXPR_MUL, la, lb, &m));
  SH_OK(ctx, stof_te_reduce(g, STOF_REDUCE_SUM, m, 1, &k, &r));
  SH_OK(ctx, stof_te_compute(g, "C", 2, ax, r, -1, &C));
  SH_OK(ctx, stof_te_compute_axes(g, 2, sc, NULL, bx));
  SH_OK(ctx, stof_te_load(g, C, 2, bx, &lc));
  SH_OK(ctx, stof_te_float(g, 2, STOF_DTYPE_F32, &two));
  SH_OK(ctx, stof_te_binary(g, STOF_EXPR_MUL, lc, two, &mul));
  SH_OK(ctx, stof_te_compute(g, "D", 2, bx, mul, -1, &D));
  SH_OK(ctx, stof_te_compute_axes(g, 2, sc, NULL, cx));
  SH_OK(ctx, stof_te_load(g, D, 2, cx, &ld));
  SH_OK(ctx, stof_te_float(g, 1, STOF_DTYPE_F32, &one));
  SH_OK(ctx, stof_te_binary(g, STOF_EXPR_ADD, ld, one, &add));
  SH_OK(ctx, stof_te_compute(g, "E", 2, cx, add, -1, &E));

  h->fail_at = fail_at;
  stof_sched *s = NULL, *fresh = NULL;
  stof_trace *t = NULL, *back = NULL;
  char *text = NULL;
  int b = -1, l[8], lc2[8], n, p[2], rf, as, cw, bd, be, step;
  stof_status st = STOF_OK;
  for (step = 0; step < NSTEP2 && !st; step++) {
    switch (step) {
    case 0: st = stof_sched_new(g, 1, &E, &s); break;
    case 1: st = stof_sched_get_block(s, "C", &b); break;
    case 2: st = stof_sched_get_loops(s, b, 8, l, &n); break;
    case 3: {
      stof_factor fs[2] = {stof_factor_const(STOF_INFER), stof_factor_const(2)};
      st = stof_sched_split(s, l[2], 2, fs, p);
      break;
    }
    case 4: st = stof_sched_rfactor(s, p[1], 1, &rf); break;
    case 5: st = stof_sched_cache_read(s, rf, 0, "shared", &as); break;
    case 6: st = stof_sched_compute_at(s, as, p[0]); break;
    case 7: st = stof_sched_cache_write(s, b, "local", &cw); break;
    case 8: st = stof_sched_get_block(s, "D", &bd); break;
    case 9: st = stof_sched_compute_inline(s, bd); break;
    case 10: st = stof_sched_get_block(s, "E", &be); break;
    case 11: st = stof_sched_reverse_compute_inline(s, be); break;
    case 12: st = stof_sched_get_loops(s, b, 8, lc2, &n); break;
    case 13: st = stof_sched_reverse_compute_at(s, cw, lc2[0]); break;
    case 14:
      st = stof_sched_trace(s, &t);
      if (!st) st = stof_trace_to_json(t, &text);
      if (!st) st = stof_trace_from_json(ctx, text, &back);
      if (!st) st = stof_sched_fresh(s, &fresh);
      if (!st) st = stof_sched_replay(back, fresh);
      break;
    case 15:
      if (text) stof_ctx_dealloc(ctx, text, strlen(text) + 1);
      text = NULL;
      st = stof_sched_print_loop_nest(fresh, &text);
      break;
    }
    if (st) break;
    if (record) {
      long saved = h->fail_at;
      h->fail_at = 0;
      char *nest;
      SH_OK(ctx, stof_sched_print_loop_nest(s, &nest));
      nests[step] = strdup(nest);
      stof_ctx_dealloc(ctx, nest, strlen(nest) + 1);
      h->fail_at = saved;
    }
  }
  h->fail_at = 0;
  if (st) {
    assert_int_equal(st, STOF_ERR_NOMEM);
    stof_ctx_clear_error(ctx);
    if (s && step > 0) {
      char *nest;
      SH_OK(ctx, stof_sched_print_loop_nest(s, &nest));
      assert_string_equal(nest, nests[step - 1]);
      stof_ctx_dealloc(ctx, nest, strlen(nest) + 1);
    }
  } else if (!record) {
    assert_string_equal(text, nests[NSTEP2 - 2]);
  }
  if (text) stof_ctx_dealloc(ctx, text, strlen(text) + 1);
  stof_trace_free(t);
  stof_trace_free(back);
  stof_sched_free(fresh);
  stof_sched_free(s);
  stof_graph_free(g);
  assert_int_equal(stof_ctx_bytes_in_use(ctx), 0);
  stof_ctx_free(ctx);
  assert_int_equal(h->live, 0);
  assert_false(h->bad_size);
  return st ? step : NSTEP2;
}

static void block_primitives_may_fail(void **state) {
  heap h = {0};
  char *nests[NSTEP2] = {0};
  assert_int_equal(script2(&h, 0, nests, 1), NSTEP2);
  int failures = 0;
  for (long n = 1;; n++) {
    int step = script2(&h, n, nests, 0);
    if (step == NSTEP2) break;
    failures++;
    assert_true(n < 200000);
  }
  assert_true(failures > 100);
  for (int i = 0; i < NSTEP2; i++) free(nests[i]);
}

/* Code generation and the runtimes: C = A @ B, D = C * 2 (the k loop split, the rows
 * bound for CUDA); stof_build_source and stof_build for "c", a call of the built function
 * (checked against the sums), then the "cuda" source and build: without a GPU the build
 * stops at STOF_ERR_NO_DEVICE, which ends the scenario as success does. Returns the status
 * of the first failing call, STOF_OK when the scenario ran through; frees everything and
 * checks the heap. */
static stof_status build_scenario(heap *h, long fail_at, long *nalloc) {
  h->fail_at = 0;
  h->nalloc = 0;
  stof_ctx *ctx = stof_ctx_new(heap_alloc, h);
  assert_non_null(ctx);
  stof_graph *g;
  SH_OK(ctx, stof_graph_new(ctx, &g));
  int64_t sa[2] = {8, 6}, sb[2] = {6, 4}, sc[2] = {8, 4};
  const stof_op *A, *B, *C, *D;
  SH_OK(ctx, stof_te_placeholder(g, 2, sa, STOF_DTYPE_F32, "A", &A));
  SH_OK(ctx, stof_te_placeholder(g, 2, sb, STOF_DTYPE_F32, "B", &B));
  const stof_expr *ax[2], *bx[2], *k, *la, *lb, *m, *r, *lc, *two, *mul;
  SH_OK(ctx, stof_te_compute_axes(g, 2, sc, NULL, ax));
  SH_OK(ctx, stof_te_reduce_axis(g, 6, "k", &k));
  const stof_expr *ia[2] = {ax[0], k}, *ib[2] = {k, ax[1]};
  SH_OK(ctx, stof_te_load(g, A, 2, ia, &la));
  SH_OK(ctx, stof_te_load(g, B, 2, ib, &lb));
  SH_OK(ctx, stof_te_binary(g, STOF_EXPR_MUL, la, lb, &m));
  SH_OK(ctx, stof_te_reduce(g, STOF_REDUCE_SUM, m, 1, &k, &r));
  SH_OK(ctx, stof_te_compute(g, "C", 2, ax, r, -1, &C));
  SH_OK(ctx, stof_te_compute_axes(g, 2, sc, NULL, bx));
  SH_OK(ctx, stof_te_load(g, C, 2, bx, &lc));
  SH_OK(ctx, stof_te_float(g, 2, STOF_DTYPE_F32, &two));
  SH_OK(ctx, stof_te_binary(g, STOF_EXPR_MUL, lc, two, &mul));
  SH_OK(ctx, stof_te_compute(g, "D", 2, bx, mul, -1, &D));
  stof_tensor *t[3] = {NULL, NULL, NULL};
  const int64_t *shapes[3] = {sa, sb, sc};
  for (int i = 0; i < 3; i++) {
    SH_OK(ctx, stof_tensor_new(ctx, STOF_DTYPE_F32, 2, shapes[i], STOF_DEVICE_CPU, &t[i]));
    for (int64_t e = 0; e < stof_tensor_numel(t[i]); e++) stof_tensor_store(t[i], e, i < 2 ? (double)(e % 5) - 2 : NAN);
  }
  const stof_op *args[3] = {A, B, D};

  h->fail_at = fail_at;
  stof_sched *s = NULL, *sc_cuda = NULL;
  stof_func *f = NULL, *fc = NULL;
  char *src = NULL, *csrc = NULL;
  int b, l[4], n, p[2];
  stof_status st = stof_sched_new(g, 1, &D, &s);
  if (!st) st = stof_sched_get_block(s, "C", &b);
  if (!st) st = stof_sched_get_loops(s, b, 4, l, &n);
  if (!st) {
    stof_factor fs[2] = {stof_factor_const(STOF_INFER), stof_factor_const(3)};
    st = stof_sched_split(s, l[2], 2, fs, p);
  }
  if (!st) st = stof_build_source(s, 3, args, "c", &src);
  if (!st) st = stof_build(s, 3, args, "c", &f);
  if (!st) st = stof_func_call(f, 3, t);
  if (!st) st = stof_sched_new(g, 1, &D, &sc_cuda);
  if (!st) st = stof_sched_get_block(sc_cuda, "C", &b);
  if (!st) st = stof_sched_get_loops(sc_cuda, b, 4, l, &n);
  if (!st) st = stof_sched_bind(sc_cuda, l[0], "blockIdx.x");
  if (!st) st = stof_sched_bind(sc_cuda, l[1], "threadIdx.x");
  if (!st) st = stof_sched_get_block(sc_cuda, "D", &b);
  if (!st) st = stof_sched_get_loops(sc_cuda, b, 4, l, &n);
  if (!st) st = stof_sched_bind(sc_cuda, l[0], "blockIdx.x");
  if (!st) st = stof_sched_bind(sc_cuda, l[1], "threadIdx.x");
  if (!st) st = stof_build_source(sc_cuda, 3, args, "cuda", &csrc);
  if (!st) {
    st = stof_build(sc_cuda, 3, args, "cuda", &fc);
    if (st == STOF_ERR_NO_DEVICE || st == STOF_ERR_CUDA) { /* no GPU: the end of the path */
      if (h->fail_at && h->nalloc >= h->fail_at) fail_msg("allocation %ld failed, the cuda build said %s: %s", fail_at, stof_status_name(st), stof_ctx_message(ctx));
      stof_ctx_clear_error(ctx);
      st = STOF_OK;
    }
  }
  long seen = h->nalloc;
  h->fail_at = 0;
  if (st) {
    if (st != STOF_ERR_NOMEM)
      fail_msg("allocation %ld failed: %s (%s)", fail_at, stof_status_name(st), stof_ctx_message(ctx));
    assert_int_equal(stof_ctx_status(ctx), STOF_ERR_NOMEM);
    stof_ctx_clear_error(ctx);
  } else { /* D = 2 * (A @ B) */
    for (int64_t i = 0; i < sc[0]; i++)
      for (int64_t j = 0; j < sc[1]; j++) {
        double want = 0;
        for (int64_t q = 0; q < sa[1]; q++) want += ((i * sa[1] + q) % 5 - 2.0) * ((q * sb[1] + j) % 5 - 2.0);
        assert_true(stof_tensor_load(t[2], i * sc[1] + j) == 2 * want);
      }
  }
  if (src) stof_ctx_dealloc(ctx, src, strlen(src) + 1);
  if (csrc) stof_ctx_dealloc(ctx, csrc, strlen(csrc) + 1);
  stof_func_free(fc);
  stof_func_free(f);
  stof_sched_free(sc_cuda);
  stof_sched_free(s);
  for (int i = 0; i < 3; i++) stof_tensor_free(t[i]);
  stof_graph_free(g);
  assert_int_equal(stof_ctx_bytes_in_use(ctx), 0);
  stof_ctx_free(ctx);
  assert_int_equal(h->live, 0);
  assert_false(h->bad_size);
  if (nalloc) *nalloc = seen;
  return st;
}

static void build_and_call_may_fail(void **state) {
  (void)state;
  heap h = {0};
  assert_int_equal(build_scenario(&h, 0, NULL), STOF_OK);
  int failures = 0;
  for (long n = 1;; n++) {
    long seen = 0;
    stof_status st = build_scenario(&h, n, &seen);
    if (st == STOF_OK && seen < n) break; /* ran through without reaching allocation n */
    failures += st != STOF_OK;
    assert_true(n < 100000);
  }
  printf("build / call failure injection: %d allocations, each failed in turn\n", failures);
  assert_true(failures > 20);
}

int run_nomem_tests(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(every_allocation_may_fail),
      cmocka_unit_test(block_primitives_may_fail),
      cmocka_unit_test(build_and_call_may_fail),
  };
  return cmocka_run_group_tests_name("nomem", tests, NULL, NULL);
}
