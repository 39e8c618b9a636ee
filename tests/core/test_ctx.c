/*
 * Tests of the context (errors, status names, allocation through the hook, RNG), the
 * arena, and out-of-memory handling: a scenario that builds and evaluates a graph is run
 * with the Nth allocation failing, for every N, checking clean failure and no leaks.
 */
#include "testutil.h"

#include <stdio.h>

/* ---------------------------------------------------------------- errors */

static void error_records_status_and_formatted_message(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  assert_int_equal(stof_ctx_status(ctx), STOF_OK);
  stof_status s = stof_ctx_error(ctx, STOF_ERR_ARG, "split: factor %d for loop %s (%.2f)",
                                 0, "i", 1.5);
  assert_int_equal(s, STOF_ERR_ARG);
  assert_int_equal(stof_ctx_status(ctx), STOF_ERR_ARG);
  TU_MSG(ctx, "split: factor 0 for loop i (1.50)");
  tu_ctx_free(ctx, &h);
}

static stof_status call_verror(stof_ctx *ctx, stof_status st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  stof_status r = stof_ctx_verror(ctx, st, fmt, ap);
  va_end(ap);
  return r;
}

static void verror_formats_va_list(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  assert_int_equal(call_verror(ctx, STOF_ERR_SHAPE, "tensor %s: extent %lld in dim %d", "Q",
                               (long long)-3, 2),
                   STOF_ERR_SHAPE);
  assert_int_equal(stof_ctx_status(ctx), STOF_ERR_SHAPE);
  TU_MSG(ctx, "tensor Q: extent -3 in dim 2");
  tu_ctx_free(ctx, &h);
}

static void later_error_replaces_earlier(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  stof_ctx_error(ctx, STOF_ERR_ARG, "first problem");
  stof_ctx_error(ctx, STOF_ERR_RANGE, "second problem %d", 7);
  assert_int_equal(stof_ctx_status(ctx), STOF_ERR_RANGE);
  TU_MSG(ctx, "second problem 7");
  assert_null(strstr(stof_ctx_message(ctx), "first"));
  tu_ctx_free(ctx, &h);
}

static void long_message_keeps_its_beginning(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  char big[3000];
  for (size_t i = 0; i < sizeof big - 1; i++) big[i] = (char)('a' + i % 26);
  big[sizeof big - 1] = 0;
  stof_ctx_error(ctx, STOF_ERR_PARSE, "long: %s", big);
  assert_int_equal(stof_ctx_status(ctx), STOF_ERR_PARSE);
  const char *m = stof_ctx_message(ctx);
  assert_non_null(m);
  assert_int_equal(strncmp(m, "long: abcdefghijklmnopqrstuvwxyzabcdefghij", 42), 0);
  tu_ctx_free(ctx, &h);
}

static void clear_error_resets_status(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  stof_ctx_error(ctx, STOF_ERR_IO, "cannot open %s", "weights.safetensors");
  assert_int_equal(stof_ctx_status(ctx), STOF_ERR_IO);
  stof_ctx_clear_error(ctx);
  assert_int_equal(stof_ctx_status(ctx), STOF_OK);
  const char *m = stof_ctx_message(ctx);
  if (m) assert_null(strstr(m, "weights.safetensors"));
  /* usable again after clearing */
  stof_ctx_error(ctx, STOF_ERR_CUDA, "again");
  assert_int_equal(stof_ctx_status(ctx), STOF_ERR_CUDA);
  TU_MSG(ctx, "again");
  tu_ctx_free(ctx, &h);
}

static void status_names_and_texts_follow_x_macro(void **state) {
  static const char *const names[] = {
#define X(name, text) #name,
      STOF_STATUS_LIST(X)
#undef X
  };
  static const char *const texts[] = {
#define X(name, text) text,
      STOF_STATUS_LIST(X)
#undef X
  };
  assert_int_equal(sizeof names / sizeof *names, STOF_STATUS_COUNT);
  assert_int_equal(STOF_OK, 0);
  for (int s = 0; s < STOF_STATUS_COUNT; s++) {
    assert_non_null(stof_status_name((stof_status)s));
    assert_string_equal(stof_status_name((stof_status)s), names[s]);
    assert_string_equal(stof_status_text((stof_status)s), texts[s]);
  }
  assert_string_equal(stof_status_name(STOF_ERR_NOMEM), "ERR_NOMEM");
  assert_string_equal(stof_status_text(STOF_ERR_NO_DEVICE), "no GPU");
}

static void nomem_is_sticky_until_clear(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  stof_ctx_error(ctx, STOF_ERR_NOMEM, "arena: out of memory");
  assert_int_equal(stof_ctx_status(ctx), STOF_ERR_NOMEM);
  stof_ctx_error(ctx, STOF_ERR_ARG, "a later, lesser error");
  assert_int_equal(stof_ctx_status(ctx), STOF_ERR_NOMEM);
  stof_ctx_error(ctx, STOF_ERR_SHAPE, "and another");
  assert_int_equal(stof_ctx_status(ctx), STOF_ERR_NOMEM);
  stof_ctx_clear_error(ctx);
  assert_int_equal(stof_ctx_status(ctx), STOF_OK);
  stof_ctx_error(ctx, STOF_ERR_ARG, "now recorded");
  assert_int_equal(stof_ctx_status(ctx), STOF_ERR_ARG);
  TU_MSG(ctx, "now recorded");
  tu_ctx_free(ctx, &h);
}

static void failed_alloc_returns_null_and_records_sticky_nomem(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  size_t before = stof_ctx_bytes_in_use(ctx);
  h.fail_at = h.nalloc + 1;
  void *p = stof_ctx_alloc(ctx, 1000);
  assert_true(h.failed);
  assert_null(p);
  assert_int_equal(stof_ctx_status(ctx), STOF_ERR_NOMEM);
  assert_non_null(stof_ctx_message(ctx));
  assert_true(strlen(stof_ctx_message(ctx)) > 0);
  assert_int_equal(stof_ctx_bytes_in_use(ctx), before);
  stof_ctx_error(ctx, STOF_ERR_ARG, "later");
  assert_int_equal(stof_ctx_status(ctx), STOF_ERR_NOMEM);
  stof_ctx_clear_error(ctx);
  assert_int_equal(stof_ctx_status(ctx), STOF_OK);
  /* a failing realloc leaves the block untouched */
  char *q = stof_ctx_alloc(ctx, 8);
  assert_non_null(q);
  memcpy(q, "abcdefg", 8);
  h.fail_at = h.nalloc + 1;
  h.failed = 0;
  char *r = stof_ctx_realloc(ctx, q, 8, 4096);
  assert_true(h.failed);
  assert_null(r);
  assert_int_equal(stof_ctx_status(ctx), STOF_ERR_NOMEM);
  assert_string_equal(q, "abcdefg");
  assert_int_equal(stof_ctx_bytes_in_use(ctx), before + 8);
  stof_ctx_dealloc(ctx, q, 8);
  stof_ctx_clear_error(ctx);
  tu_ctx_free(ctx, &h);
}

/* ---------------------------------------------------------------- context memory */

static void ctx_new_with_default_allocator_works(void **state) {
  stof_ctx *ctx = stof_ctx_new(NULL, NULL);
  assert_non_null(ctx);
  assert_int_equal(stof_ctx_bytes_in_use(ctx), 0);
  char *s = stof_ctx_strdup(ctx, "hello");
  assert_non_null(s);
  assert_string_equal(s, "hello");
  assert_int_equal(stof_ctx_bytes_in_use(ctx), 6);
  stof_ctx_dealloc(ctx, s, 6);
  assert_int_equal(stof_ctx_bytes_in_use(ctx), 0);
  stof_ctx_free(ctx);
}

static void ctx_new_returns_null_when_its_allocation_fails(void **state) {
  tu_heap h;
  memset(&h, 0, sizeof h);
  h.fail_at = 1;
  stof_ctx *ctx = stof_ctx_new(tu_alloc, &h);
  assert_true(h.failed);
  assert_null(ctx);
  assert_int_equal(h.live, 0);
}

static void ctx_alloc_is_zeroed_and_counted(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  assert_int_equal(stof_ctx_bytes_in_use(ctx), 0);
  size_t heap_before = h.live;
  unsigned char *p = stof_ctx_alloc(ctx, 333);
  assert_non_null(p);
  for (int i = 0; i < 333; i++) assert_int_equal(p[i], 0); /* the hook poisons with 0xFF */
  assert_int_equal(stof_ctx_bytes_in_use(ctx), 333);
  assert_true(h.live >= heap_before + 333);
  for (int i = 0; i < 333; i++) p[i] = (unsigned char)(i * 7);
  unsigned char *q = stof_ctx_realloc(ctx, p, 333, 5000);
  assert_non_null(q);
  for (int i = 0; i < 333; i++) assert_int_equal(q[i], (unsigned char)(i * 7));
  assert_int_equal(stof_ctx_bytes_in_use(ctx), 5000);
  q = stof_ctx_realloc(ctx, q, 5000, 100);
  assert_non_null(q);
  for (int i = 0; i < 100; i++) assert_int_equal(q[i], (unsigned char)(i * 7));
  assert_int_equal(stof_ctx_bytes_in_use(ctx), 100);
  stof_ctx_dealloc(ctx, q, 100);
  assert_int_equal(stof_ctx_bytes_in_use(ctx), 0);
  tu_ctx_free(ctx, &h);
}

static void ctx_strdup_copies_string(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  char src[] = "attention_row_wise";
  char *s = stof_ctx_strdup(ctx, src);
  assert_non_null(s);
  assert_ptr_not_equal(s, src);
  assert_string_equal(s, "attention_row_wise");
  src[0] = 'X';
  assert_int_equal(s[0], 'a');
  assert_int_equal(stof_ctx_bytes_in_use(ctx), strlen(s) + 1);
  stof_ctx_dealloc(ctx, s, strlen(s) + 1);
  char *e = stof_ctx_strdup(ctx, "");
  assert_non_null(e);
  assert_string_equal(e, "");
  stof_ctx_dealloc(ctx, e, 1);
  tu_ctx_free(ctx, &h);
}

/* ---------------------------------------------------------------- RNG */

static void rng_same_seed_gives_same_sequence(void **state) {
  tu_heap h;
  stof_ctx *a = tu_ctx_new(&h);
  tu_heap h2;
  stof_ctx *b = tu_ctx_new(&h2);
  stof_ctx_seed(a, 12345);
  stof_ctx_seed(b, 12345);
  uint64_t first[64];
  int distinct = 0;
  for (int i = 0; i < 64; i++) {
    first[i] = stof_ctx_rand_u64(a);
    assert_true(first[i] == stof_ctx_rand_u64(b));
    if (i > 0 && first[i] != first[i - 1]) distinct++;
  }
  assert_true(distinct > 60);
  /* reseeding restarts the sequence */
  stof_ctx_seed(a, 12345);
  for (int i = 0; i < 64; i++) assert_true(first[i] == stof_ctx_rand_u64(a));
  /* another seed gives another sequence */
  stof_ctx_seed(b, 12346);
  int same = 0;
  for (int i = 0; i < 64; i++) same += stof_ctx_rand_u64(b) == first[i];
  assert_true(same < 2);
  tu_ctx_free(a, &h);
  tu_ctx_free(b, &h2);
}

static uint64_t ref_rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

/* The documented generator: xoshiro256** whose state is four splitmix64 outputs. */
static void rng_is_splitmix_seeded_xoshiro256ss(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  uint64_t seeds[] = {0, 1, 42, 0xDEADBEEFCAFEull};
  for (size_t n = 0; n < sizeof seeds / sizeof *seeds; n++) {
    uint64_t x = seeds[n], s[4];
    for (int i = 0; i < 4; i++) s[i] = tu_splitmix(&x);
    stof_ctx_seed(ctx, seeds[n]);
    for (int i = 0; i < 100; i++) {
      uint64_t want = ref_rotl(s[1] * 5, 7) * 9;
      uint64_t t = s[1] << 17;
      s[2] ^= s[0];
      s[3] ^= s[1];
      s[1] ^= s[2];
      s[0] ^= s[3];
      s[2] ^= t;
      s[3] = ref_rotl(s[3], 45);
      uint64_t got = stof_ctx_rand_u64(ctx);
      if (got != want)
        fail_msg("seed %llu draw %d: got %016llx want %016llx", (unsigned long long)seeds[n],
                 i, (unsigned long long)got, (unsigned long long)want);
    }
  }
  tu_ctx_free(ctx, &h);
}

static void rand_unit_is_in_unit_interval_and_uniform(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  stof_ctx_seed(ctx, 7);
  enum { N = 100000, BINS = 10 };
  int bins[BINS] = {0};
  double sum = 0, lo = 1, hi = 0;
  for (int i = 0; i < N; i++) {
    double u = stof_ctx_rand_unit(ctx);
    assert_true(u >= 0.0 && u < 1.0);
    sum += u;
    if (u < lo) lo = u;
    if (u > hi) hi = u;
    bins[(int)(u * BINS)]++;
  }
  assert_true(fabs(sum / N - 0.5) < 0.01);
  assert_true(lo < 0.001 && hi > 0.999);
  for (int b = 0; b < BINS; b++) assert_true(abs(bins[b] - N / BINS) < N / BINS / 10);
  /* reproducible */
  stof_ctx_seed(ctx, 7);
  double a = stof_ctx_rand_unit(ctx);
  stof_ctx_seed(ctx, 7);
  assert_true(a == stof_ctx_rand_unit(ctx));
  tu_ctx_free(ctx, &h);
}

/* ---------------------------------------------------------------- arena */

static void arena_alloc_is_aligned_and_zeroed(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  stof_arena a;
  stof_arena_init(&a, ctx);
  unsigned char *ptr[200];
  size_t size[200];
  for (int i = 0; i < 200; i++) {
    size[i] = (size_t)(1 + (i * 37) % 131);
    ptr[i] = stof_arena_alloc(&a, size[i]);
    assert_non_null(ptr[i]);
    assert_int_equal((uintptr_t)ptr[i] % 16, 0);
    for (size_t b = 0; b < size[i]; b++) assert_int_equal(ptr[i][b], 0);
    memset(ptr[i], i & 0xFF, size[i]);
  }
  for (int i = 0; i < 200; i++)
    for (size_t b = 0; b < size[i]; b++) assert_int_equal(ptr[i][b], i & 0xFF);
  assert_true(stof_ctx_bytes_in_use(ctx) > 0);
  stof_arena_release(&a);
  assert_int_equal(stof_ctx_bytes_in_use(ctx), 0);
  tu_ctx_free(ctx, &h);
}

static void arena_many_allocations_larger_than_a_block(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  stof_arena a;
  stof_arena_init(&a, ctx);
  enum { N = 60 };
  unsigned char *ptr[N];
  size_t size[N], sum = 0;
  for (int i = 0; i < N; i++) {
    size[i] = (i % 3 == 0) ? (size_t)(100000 + i * 1001) : (size_t)(5 + i);
    ptr[i] = stof_arena_alloc(&a, size[i]);
    assert_non_null(ptr[i]);
    assert_int_equal((uintptr_t)ptr[i] % 16, 0);
    assert_int_equal(ptr[i][0], 0);
    assert_int_equal(ptr[i][size[i] - 1], 0);
    assert_int_equal(ptr[i][size[i] / 2], 0);
    memset(ptr[i], (i * 13 + 1) & 0xFF, size[i]);
    sum += size[i];
  }
  for (int i = 0; i < N; i++)
    for (size_t b = 0; b < size[i]; b++)
      if (ptr[i][b] != ((i * 13 + 1) & 0xFF)) fail_msg("allocation %d overwritten at %zu", i, b);
  assert_true(a.total >= sum);
  assert_true(stof_ctx_bytes_in_use(ctx) >= sum);
  stof_arena_release(&a);
  assert_int_equal(stof_ctx_bytes_in_use(ctx), 0);
  tu_ctx_free(ctx, &h);
}

static void arena_strdup_copies_into_arena(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  stof_arena a;
  stof_arena_init(&a, ctx);
  char src[] = "reduce_axis_k";
  char *s = stof_arena_strdup(&a, src);
  assert_non_null(s);
  assert_ptr_not_equal(s, src);
  assert_string_equal(s, "reduce_axis_k");
  src[0] = 'Z';
  assert_int_equal(s[0], 'r');
  char *t = stof_arena_strdup(&a, "second");
  assert_string_equal(t, "second");
  assert_string_equal(s, "reduce_axis_k");
  stof_arena_release(&a);
  assert_int_equal(stof_ctx_bytes_in_use(ctx), 0);
  tu_ctx_free(ctx, &h);
}

static void arena_release_returns_all_bytes_and_arena_is_reusable(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  size_t before = stof_ctx_bytes_in_use(ctx);
  stof_arena a;
  stof_arena_init(&a, ctx);
  stof_arena_release(&a); /* releasing an empty arena is harmless */
  assert_int_equal(stof_ctx_bytes_in_use(ctx), before);
  stof_arena_init(&a, ctx);
  for (int i = 0; i < 1000; i++) assert_non_null(stof_arena_alloc(&a, (size_t)(i % 97 + 1)));
  assert_non_null(stof_arena_alloc(&a, 1 << 20));
  assert_true(stof_ctx_bytes_in_use(ctx) > before + (1 << 20));
  stof_arena_release(&a);
  assert_int_equal(stof_ctx_bytes_in_use(ctx), before);
  stof_arena_init(&a, ctx);
  unsigned char *p = stof_arena_alloc(&a, 64);
  assert_non_null(p);
  for (int i = 0; i < 64; i++) assert_int_equal(p[i], 0);
  stof_arena_release(&a);
  assert_int_equal(stof_ctx_bytes_in_use(ctx), before);
  tu_ctx_free(ctx, &h);
}

static void arena_alloc_failure_returns_null_and_records_nomem(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  stof_arena a;
  stof_arena_init(&a, ctx);
  assert_non_null(stof_arena_alloc(&a, 10));
  h.fail_at = h.nalloc + 1;
  void *p = stof_arena_alloc(&a, 1 << 22); /* needs a new block */
  assert_true(h.failed);
  assert_null(p);
  assert_int_equal(stof_ctx_status(ctx), STOF_ERR_NOMEM);
  assert_non_null(stof_ctx_message(ctx));
  assert_true(strlen(stof_ctx_message(ctx)) > 0);
  stof_ctx_clear_error(ctx);
  /* the arena still works */
  unsigned char *q = stof_arena_alloc(&a, 100);
  assert_non_null(q);
  assert_int_equal(q[99], 0);
  stof_arena_release(&a);
  tu_ctx_free(ctx, &h);
}

/* ---------------------------------------------------------------- failure injection */

enum { FM = 4, FK = 5, FN = 6 };

/* Reference of the scenario's outputs: C = A @ B, Y = softmax(C) over rows. */
static void scenario_reference(const stof_tensor *ta, const stof_tensor *tb, double *c,
                               double *y) {
  for (int i = 0; i < FM; i++) {
    double mx = -INFINITY;
    for (int j = 0; j < FN; j++) {
      double acc = 0;
      for (int k = 0; k < FK; k++)
        acc += stof_tensor_load(ta, i * FK + k) * stof_tensor_load(tb, k * FN + j);
      c[i * FN + j] = acc;
      if (acc > mx) mx = acc;
    }
    double s = 0;
    for (int j = 0; j < FN; j++) s += exp(c[i * FN + j] - mx);
    for (int j = 0; j < FN; j++) y[i * FN + j] = exp(c[i * FN + j] - mx) / s;
  }
}

/* Runs the scenario once with the heap's fail_at; nchain extra ops (Z = Z * 1) after the
 * softmax move arena block boundaries to other builders. Returns 1 when it ran to the end
 * without an injected failure. Every failure must be a clean NOMEM without leaks. */
static int scenario(tu_heap *h, int nchain) {
  stof_ctx *ctx = stof_ctx_new(tu_alloc, h);
  if (!ctx) {
    assert_true(h->failed);
    assert_int_equal(h->live, 0);
    return 0;
  }
  stof_graph *g = NULL;
  stof_tensor *ta = NULL, *tb = NULL;
  stof_tensor *res[2] = {NULL, NULL};
  stof_status st = STOF_OK;
  const char *step = "";
  int nop_before = 0;
  const stof_expr *ax[2], *k, *r, *r2, *e1, *e2, *e3;
  const stof_op *A, *B, *C, *MX, *E, *S, *Y;
  const int64_t sa[2] = {FM, FK}, sb[2] = {FK, FN}, sc[2] = {FM, FN}, sm[1] = {FM};

#define STEP(call)                                                                     \
  do {                                                                                 \
    nop_before = g ? stof_graph_nop(g) : 0;                                            \
    step = #call;                                                                      \
    st = (call);                                                                       \
    if (h->failed && st == STOF_OK)                                                    \
      fail_msg("%s returned OK although allocation %ld failed in it", #call, h->fail_at); \
    if (st != STOF_OK) goto failed;                                                    \
  } while (0)

  STEP(stof_graph_new(ctx, &g));
  STEP(stof_te_placeholder(g, 2, sa, STOF_DTYPE_F32, "A", &A));
  STEP(stof_te_placeholder(g, 2, sb, STOF_DTYPE_F32, "B", &B));
  /* C[i, j] = sum_k A[i, k] * B[k, j] */
  STEP(stof_te_compute_axes(g, 2, sc, NULL, ax));
  STEP(stof_te_reduce_axis(g, FK, "k", &k));
  {
    const stof_expr *ia[2] = {ax[0], k}, *ib[2] = {k, ax[1]};
    STEP(stof_te_load(g, A, 2, ia, &e1));
    STEP(stof_te_load(g, B, 2, ib, &e2));
  }
  STEP(stof_te_binary(g, STOF_EXPR_MUL, e1, e2, &e3));
  STEP(stof_te_reduce(g, STOF_REDUCE_SUM, e3, 1, &k, &e3));
  STEP(stof_te_compute(g, "C", 2, ax, e3, -1, &C));
  /* MX[i] = max_r C[i, r] */
  STEP(stof_te_compute_axes(g, 1, sm, NULL, ax));
  STEP(stof_te_reduce_axis(g, FN, "r", &r));
  {
    const stof_expr *ic[2] = {ax[0], r};
    STEP(stof_te_load(g, C, 2, ic, &e1));
  }
  STEP(stof_te_reduce(g, STOF_REDUCE_MAX, e1, 1, &r, &e1));
  STEP(stof_te_compute(g, "MX", 1, ax, e1, -1, &MX));
  /* E[i, j] = exp(C[i, j] - MX[i]) */
  STEP(stof_te_compute_axes(g, 2, sc, NULL, ax));
  {
    const stof_expr *ic[2] = {ax[0], ax[1]}, *im[1] = {ax[0]};
    STEP(stof_te_load(g, C, 2, ic, &e1));
    STEP(stof_te_load(g, MX, 1, im, &e2));
  }
  STEP(stof_te_binary(g, STOF_EXPR_SUB, e1, e2, &e3));
  STEP(stof_te_unary(g, STOF_EXPR_EXP, e3, &e3));
  STEP(stof_te_compute(g, "E", 2, ax, e3, -1, &E));
  /* S[i] = sum_r2 E[i, r2] */
  STEP(stof_te_compute_axes(g, 1, sm, NULL, ax));
  STEP(stof_te_reduce_axis(g, FN, "r2", &r2));
  {
    const stof_expr *ie[2] = {ax[0], r2};
    STEP(stof_te_load(g, E, 2, ie, &e1));
  }
  STEP(stof_te_reduce(g, STOF_REDUCE_SUM, e1, 1, &r2, &e1));
  STEP(stof_te_compute(g, "S", 1, ax, e1, -1, &S));
  /* Y[i, j] = E[i, j] / S[i] */
  STEP(stof_te_compute_axes(g, 2, sc, NULL, ax));
  {
    const stof_expr *ie[2] = {ax[0], ax[1]}, *is[1] = {ax[0]};
    STEP(stof_te_load(g, E, 2, ie, &e1));
    STEP(stof_te_load(g, S, 1, is, &e2));
  }
  STEP(stof_te_binary(g, STOF_EXPR_DIV, e1, e2, &e3));
  STEP(stof_te_compute(g, "Y", 2, ax, e3, -1, &Y));
  for (int c = 0; c < nchain; c++) {
    char name[32];
    snprintf(name, sizeof name, "Z%d", c);
    STEP(stof_te_compute_axes(g, 2, sc, NULL, ax));
    {
      const stof_expr *iy[2] = {ax[0], ax[1]};
      STEP(stof_te_load(g, Y, 2, iy, &e1));
    }
    STEP(stof_te_float(g, 1.0, STOF_DTYPE_F32, &e2));
    STEP(stof_te_binary(g, STOF_EXPR_MUL, e1, e2, &e3));
    STEP(stof_te_compute(g, name, 2, ax, e3, -1, &Y));
  }
  STEP(stof_tensor_rand(ctx, STOF_DTYPE_F32, 2, sa, 1, &ta));
  STEP(stof_tensor_rand(ctx, STOF_DTYPE_F32, 2, sb, 2, &tb));
  {
    const stof_op *outs[2] = {C, Y}, *feeds[2] = {A, B};
    const stof_tensor *fv[2] = {ta, tb};
    STEP(stof_interp_eval(g, 2, outs, 2, feeds, fv, res));
  }
  {
    double c[FM * FN], y[FM * FN];
    scenario_reference(ta, tb, c, y);
    tu_check_close(res[0], c, FM * FN, 1e-5);
    tu_check_close(res[1], y, FM * FN, 1e-5);
  }
  goto cleanup;
#undef STEP

failed:
  if (st != STOF_ERR_NOMEM)
    fail_msg("allocation %ld failed: %s returned %s (%s), expected ERR_NOMEM", h->fail_at,
             step, stof_status_name(st), stof_ctx_message(ctx));
  if (!h->failed) fail_msg("%s returned ERR_NOMEM before any allocation failed", step);
  assert_int_equal(stof_ctx_status(ctx), STOF_ERR_NOMEM);
  assert_non_null(stof_ctx_message(ctx));
  assert_true(strlen(stof_ctx_message(ctx)) > 0);
  if (g && stof_graph_nop(g) != nop_before)
    fail_msg("%s failed but changed the graph's op count %d -> %d", step, nop_before,
             stof_graph_nop(g));
  assert_null(res[0]);
  assert_null(res[1]);

cleanup:
  for (int i = 0; i < 2; i++)
    if (res[i]) stof_tensor_free(res[i]);
  if (ta) stof_tensor_free(ta);
  if (tb) stof_tensor_free(tb);
  if (g) stof_graph_free(g);
  if (stof_ctx_bytes_in_use(ctx) != 0)
    fail_msg("allocation %ld failed in %s: %zu bytes leaked", h->fail_at, step,
             stof_ctx_bytes_in_use(ctx));
  stof_ctx_free(ctx);
  if (h->live != 0)
    fail_msg("allocation %ld failed in %s: heap holds %zu bytes after stof_ctx_free",
             h->fail_at, step, h->live);
  assert_int_equal(h->bad_size, 0);
  return st == STOF_OK && !h->failed;
}

static void nomem_at_every_allocation_fails_cleanly_without_leaks(void **state) {
  const int chains[] = {0, 3, 11, 40};
  for (size_t c = 0; c < sizeof chains / sizeof *chains; c++) {
    long n;
    tu_heap h;
    for (n = 1; n < 200000; n++) {
      memset(&h, 0, sizeof h);
      h.fail_at = n;
      if (scenario(&h, chains[c])) break;
    }
    assert_true(n < 200000);
    assert_true(n > 10); /* the scenario allocates a lot: the loop really injected failures */
    /* the clean run allocated exactly n - 1 times */
    assert_int_equal(h.nalloc, n - 1);
    print_message("failure injection (%d chained ops): %ld allocations, each failed in turn\n",
                  chains[c], n - 1);
  }
}

int run_ctx_tests(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(error_records_status_and_formatted_message),
      cmocka_unit_test(verror_formats_va_list),
      cmocka_unit_test(later_error_replaces_earlier),
      cmocka_unit_test(long_message_keeps_its_beginning),
      cmocka_unit_test(clear_error_resets_status),
      cmocka_unit_test(status_names_and_texts_follow_x_macro),
      cmocka_unit_test(nomem_is_sticky_until_clear),
      cmocka_unit_test(failed_alloc_returns_null_and_records_sticky_nomem),
      cmocka_unit_test(ctx_new_with_default_allocator_works),
      cmocka_unit_test(ctx_new_returns_null_when_its_allocation_fails),
      cmocka_unit_test(ctx_alloc_is_zeroed_and_counted),
      cmocka_unit_test(ctx_strdup_copies_string),
      cmocka_unit_test(rng_same_seed_gives_same_sequence),
      cmocka_unit_test(rng_is_splitmix_seeded_xoshiro256ss),
      cmocka_unit_test(rand_unit_is_in_unit_interval_and_uniform),
      cmocka_unit_test(arena_alloc_is_aligned_and_zeroed),
      cmocka_unit_test(arena_many_allocations_larger_than_a_block),
      cmocka_unit_test(arena_strdup_copies_into_arena),
      cmocka_unit_test(arena_release_returns_all_bytes_and_arena_is_reusable),
      cmocka_unit_test(arena_alloc_failure_returns_null_and_records_nomem),
      cmocka_unit_test(nomem_at_every_allocation_fails_cleanly_without_leaks),
  };
  return cmocka_run_group_tests_name("ctx", tests, NULL, NULL);
}
