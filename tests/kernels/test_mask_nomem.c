/* Out of memory: every allocation of a mask / format / cache scenario fails in turn; each
 * failure surfaces as STOF_ERR_NOMEM and leaves nothing allocated. */
#include "helpers.h"

#include <stdlib.h>
#include <string.h>

typedef struct failing {
  int64_t count;   /* allocations so far */
  int64_t fail_at; /* the allocation that fails (1-based), 0 = none */
} failing;

static void *failing_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  failing *fa = ud;
  if (nsize == 0) {
    free(ptr);
    return NULL;
  }
  if (nsize > osize && ++fa->count == fa->fail_at) return NULL;
  return realloc(ptr, nsize);
}

/* Builds and frees a bit of everything; returns the first failing status. */
static stof_status scenario(stof_ctx *ctx) {
  static const int64_t len[] = {50, 120, 30, 70};
  stof_mask *a = NULL, *b = NULL, *u = NULL, *t = NULL, *x = NULL;
  stof_mask_format *f = NULL;
  stof_mask_cache *c = NULL;
  stof_tensor *tt = NULL;
  const stof_mask_format *cf;
  char *s = NULL;
  int64_t sh[2] = {300, 300};
  stof_status st;
  if ((st = stof_mask_document(ctx, 4, len, &a))) goto done;
  if ((st = stof_mask_bigbird(ctx, 8, 8, 16, 0.3, 1, &b))) goto done;
  if ((st = stof_mask_union(a, b, &u))) goto done;
  if ((st = stof_mask_describe(u, &s))) goto done;
  if ((st = stof_tensor_rand(ctx, STOF_DTYPE_BOOL, 2, sh, 3, &tt))) goto done;
  if ((st = stof_mask_from_tensor(ctx, tt, &t))) goto done;
  if ((st = stof_mask_intersection(t, u, &x))) goto done;
  if ((st = stof_mask_format_build(ctx, x, 1, 1, 300, 300, 16, &f))) goto done;
  if ((st = stof_mask_cache_new(ctx, 1, &c))) goto done;
  if ((st = stof_mask_cache_get(c, u, 1, 1, 300, 300, 32, &cf))) goto done;
  if ((st = stof_mask_cache_get(c, a, 1, 1, 300, 300, 32, &cf))) goto done;
done:
  if (s) stof_ctx_dealloc(ctx, s, strlen(s) + 1);
  stof_mask_cache_free(c);
  stof_mask_format_free(f);
  stof_tensor_free(tt);
  stof_mask_free(a);
  stof_mask_free(b);
  stof_mask_free(u);
  stof_mask_free(t);
  stof_mask_free(x);
  return st;
}

static void every_allocation_failure_is_clean(void **state) {
  int64_t n;
  for (n = 1; n < 10000; n++) {
    failing fa = {0, 0};
    stof_ctx *ctx = stof_ctx_new(failing_alloc, &fa);
    assert_non_null(ctx);
    fa.fail_at = fa.count + n;
    stof_status st = scenario(ctx);
    assert_int_equal(stof_ctx_bytes_in_use(ctx), 0);
    stof_ctx_free(ctx);
    if (st == STOF_OK) break;
    if (st != STOF_ERR_NOMEM) fail_msg("allocation %lld: %s", (long long)n, stof_status_name(st));
  }
  assert_true(n > 20 && n < 10000); /* it ran out of failures to inject */
}

int run_mask_nomem_tests(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(every_allocation_failure_is_clean),
  };
  return cmocka_run_group_tests_name("mask_nomem", tests, NULL, NULL);
}
