/*
 * Tests of tensors: shapes and strides, checked element access, random fill, strided
 * views over caller storage, casts, comparisons (allclose, rel_l2) and the CUDA copy
 * without a GPU. Memory comes from a hook that poisons it with 0xFF (NaN), so "zero-filled"
 * and "copied" are checked for real.
 */
#include "testutil.h"

/* ---------------------------------------------------------------- shapes */

static void tensor_new_has_contiguous_strides_and_zeros(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  stof_dtype dts[] = {STOF_DTYPE_F32, STOF_DTYPE_F16, STOF_DTYPE_BF16, STOF_DTYPE_F64,
                      STOF_DTYPE_I32, STOF_DTYPE_I64, STOF_DTYPE_BOOL};
  for (size_t n = 0; n < sizeof dts / sizeof *dts; n++) {
    stof_tensor *t = NULL;
    TU_OK(ctx, stof_tensor_new(ctx, dts[n], 3, TU_SHAPE(2, 3, 5), STOF_DEVICE_CPU, &t));
    assert_non_null(t);
    assert_int_equal(t->dtype, dts[n]);
    assert_int_equal(t->device, STOF_DEVICE_CPU);
    assert_int_equal(t->ndim, 3);
    assert_int_equal(t->shape[0], 2);
    assert_int_equal(t->shape[1], 3);
    assert_int_equal(t->shape[2], 5);
    assert_int_equal(t->strides[0], 15);
    assert_int_equal(t->strides[1], 5);
    assert_int_equal(t->strides[2], 1);
    assert_int_equal(stof_tensor_numel(t), 30);
    assert_true(stof_tensor_is_contiguous(t));
    assert_true(t->owned);
    assert_non_null(t->data);
    assert_true(t->nbytes >= 30 * stof_dtype_size(dts[n]));
    const unsigned char *bytes = t->data;
    for (size_t b = 0; b < 30 * stof_dtype_size(dts[n]); b++) assert_int_equal(bytes[b], 0);
    for (int64_t i = 0; i < 30; i++) assert_true(stof_tensor_load(t, i) == 0.0);
    stof_tensor_free(t);
  }
  tu_ctx_free(ctx, &h);
}

static void tensor_new_scalar_and_empty_shapes(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  stof_tensor *s = NULL, *e = NULL;
  TU_OK(ctx, stof_tensor_new(ctx, STOF_DTYPE_F32, 0, NULL, STOF_DEVICE_CPU, &s));
  assert_int_equal(s->ndim, 0);
  assert_int_equal(stof_tensor_numel(s), 1);
  double v = -1;
  TU_OK(ctx, stof_tensor_set(s, NULL, 2.5));
  TU_OK(ctx, stof_tensor_get(s, NULL, &v));
  assert_true(v == 2.5);
  TU_OK(ctx, stof_tensor_new(ctx, STOF_DTYPE_F32, 2, TU_SHAPE(0, 7), STOF_DEVICE_CPU, &e));
  assert_int_equal(stof_tensor_numel(e), 0);
  assert_int_equal(e->shape[1], 7);
  assert_int_equal(stof_shape_numel(3, TU_SHAPE(4, 0, 9)), 0);
  assert_int_equal(stof_shape_numel(3, TU_SHAPE(4, 6, 9)), 216);
  assert_int_equal(stof_shape_numel(0, NULL), 1);
  stof_tensor_free(s);
  stof_tensor_free(e);
  tu_ctx_free(ctx, &h);
}

static void shape_check_rejects_negative_extent_and_too_many_dims(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  TU_OK(ctx, stof_shape_check(ctx, "weights", 2, TU_SHAPE(3, 0)));
  TU_OK(ctx, stof_shape_check(ctx, "weights", STOF_MAX_DIMS,
                              TU_SHAPE(1, 2, 1, 2, 1, 2, 1, 2)));
  TU_ERR(ctx, stof_shape_check(ctx, "weights", 2, TU_SHAPE(3, -1)), STOF_ERR_SHAPE, "weights");
  TU_ERR(ctx, stof_shape_check(ctx, "weights", 2, TU_SHAPE(3, -1)), STOF_ERR_SHAPE, "-1");
  TU_ERR(ctx, stof_shape_check(ctx, "kv_cache", 9, TU_SHAPE(1, 1, 1, 1, 1, 1, 1, 1, 1)),
         STOF_ERR_SHAPE, "kv_cache");
  TU_ERR(ctx, stof_shape_check(ctx, "kv_cache", -1, TU_SHAPE(1)), STOF_ERR_SHAPE, "kv_cache");
  /* an empty tensor whose other extents overflow its strides: refused (it was let through
   * once one extent was 0; UBSan caught the strides' overflow) */
  TU_ERR(ctx, stof_shape_check(ctx, "x", 3, TU_SHAPE(0, (int64_t)1 << 62, (int64_t)1 << 62)), STOF_ERR_SHAPE,
         "shape too large");
  tu_ctx_free(ctx, &h);
}

static void tensor_new_with_bad_shape_fails_with_shape_error(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  stof_tensor *t = NULL;
  TU_ERR(ctx, stof_tensor_new(ctx, STOF_DTYPE_F32, 3, TU_SHAPE(4, -3, 2), STOF_DEVICE_CPU, &t),
         STOF_ERR_SHAPE, "-3");
  assert_null(t);
  TU_ERR(ctx,
         stof_tensor_new(ctx, STOF_DTYPE_F32, 9, TU_SHAPE(1, 1, 1, 1, 1, 1, 1, 1, 1),
                         STOF_DEVICE_CPU, &t),
         STOF_ERR_SHAPE, "9");
  assert_null(t);
  TU_ERR(ctx, stof_tensor_rand(ctx, STOF_DTYPE_F32, 2, TU_SHAPE(-5, 2), 1, &t), STOF_ERR_SHAPE,
         "-5");
  assert_null(t);
  int dummy[4];
  TU_ERR(ctx,
         stof_tensor_wrap(ctx, STOF_DTYPE_I32, 1, TU_SHAPE(-4), NULL, dummy, STOF_DEVICE_CPU, &t),
         STOF_ERR_SHAPE, "-4");
  assert_null(t);
  tu_ctx_free(ctx, &h);
}

/* ---------------------------------------------------------------- element access */

static void tensor_set_get_round_trip_and_store_row_major(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  stof_tensor *t = NULL;
  TU_OK(ctx, stof_tensor_new(ctx, STOF_DTYPE_F64, 3, TU_SHAPE(3, 4, 5), STOF_DEVICE_CPU, &t));
  uint64_t seed = 3;
  double want[60];
  for (int64_t i = 0; i < 3; i++)
    for (int64_t j = 0; j < 4; j++)
      for (int64_t k = 0; k < 5; k++) {
        double v = tu_uniform(&seed, -10, 10);
        want[(i * 4 + j) * 5 + k] = v;
        TU_OK(ctx, stof_tensor_set(t, TU_SHAPE(i, j, k), v));
      }
  const double *raw = t->data;
  for (int n = 0; n < 60; n++) {
    assert_true(raw[n] == want[n]);
    assert_true(stof_tensor_load(t, n) == want[n]);
  }
  double v = NAN;
  TU_OK(ctx, stof_tensor_get(t, TU_SHAPE(2, 1, 3), &v));
  assert_true(v == want[(2 * 4 + 1) * 5 + 3]);
  stof_tensor_free(t);
  tu_ctx_free(ctx, &h);
}

static void tensor_set_rounds_to_its_dtype(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  stof_tensor *f16 = NULL, *bf = NULL, *i32 = NULL, *f32 = NULL;
  TU_OK(ctx, stof_tensor_new(ctx, STOF_DTYPE_F16, 1, TU_SHAPE(4), STOF_DEVICE_CPU, &f16));
  TU_OK(ctx, stof_tensor_new(ctx, STOF_DTYPE_BF16, 1, TU_SHAPE(4), STOF_DEVICE_CPU, &bf));
  TU_OK(ctx, stof_tensor_new(ctx, STOF_DTYPE_I32, 1, TU_SHAPE(4), STOF_DEVICE_CPU, &i32));
  TU_OK(ctx, stof_tensor_new(ctx, STOF_DTYPE_F32, 1, TU_SHAPE(4), STOF_DEVICE_CPU, &f32));
  double vals[4] = {1.0 / 3.0, -2.718281828, 1234.5678, 0.1};
  for (int64_t i = 0; i < 4; i++) {
    double g;
    TU_OK(ctx, stof_tensor_set(f16, &i, vals[i]));
    TU_OK(ctx, stof_tensor_get(f16, &i, &g));
    assert_true(g == tu_round_f16(vals[i]));
    assert_int_equal(((uint16_t *)f16->data)[i], stof_f32_to_f16((float)tu_round_f16(vals[i])));
    TU_OK(ctx, stof_tensor_set(bf, &i, vals[i]));
    TU_OK(ctx, stof_tensor_get(bf, &i, &g));
    assert_true(g == tu_round_bf16(vals[i]));
    TU_OK(ctx, stof_tensor_set(i32, &i, vals[i]));
    TU_OK(ctx, stof_tensor_get(i32, &i, &g));
    assert_true(g == (double)(int32_t)vals[i]);
    assert_int_equal(((int32_t *)i32->data)[i], (int32_t)vals[i]);
    TU_OK(ctx, stof_tensor_set(f32, &i, vals[i]));
    TU_OK(ctx, stof_tensor_get(f32, &i, &g));
    assert_true(g == (double)(float)vals[i]);
  }
  stof_tensor_free(f16);
  stof_tensor_free(bf);
  stof_tensor_free(i32);
  stof_tensor_free(f32);
  tu_ctx_free(ctx, &h);
}

static void tensor_get_set_out_of_range_fails_naming_the_dim(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  stof_tensor *t = NULL;
  TU_OK(ctx, stof_tensor_new(ctx, STOF_DTYPE_F32, 3, TU_SHAPE(5, 6, 7), STOF_DEVICE_CPU, &t));
  double v = 42;
  /* dim 2 has extent 7: index 9 is out of range */
  TU_ERR(ctx, stof_tensor_get(t, TU_SHAPE(1, 3, 9), &v), STOF_ERR_RANGE, "2");
  TU_ERR(ctx, stof_tensor_get(t, TU_SHAPE(1, 3, 9), &v), STOF_ERR_RANGE, "9");
  assert_true(v == 42);
  TU_ERR(ctx, stof_tensor_set(t, TU_SHAPE(5, 0, 0), 1.0), STOF_ERR_RANGE, "5");
  TU_ERR(ctx, stof_tensor_set(t, TU_SHAPE(0, -1, 0), 1.0), STOF_ERR_RANGE, "-1");
  TU_ERR(ctx, stof_tensor_get(t, TU_SHAPE(0, 6, 0), &v), STOF_ERR_RANGE, "6");
  /* nothing was written */
  for (int64_t i = 0; i < 5 * 6 * 7; i++) assert_true(stof_tensor_load(t, i) == 0.0);
  stof_tensor_free(t);
  tu_ctx_free(ctx, &h);
}

/* ---------------------------------------------------------------- rand */

static void tensor_rand_is_reproducible_in_range_and_varied(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  const int64_t shape[2] = {37, 29};
  stof_tensor *a = NULL, *b = NULL, *c = NULL;
  TU_OK(ctx, stof_tensor_rand(ctx, STOF_DTYPE_F32, 2, shape, 11, &a));
  TU_OK(ctx, stof_tensor_rand(ctx, STOF_DTYPE_F32, 2, shape, 11, &b));
  TU_OK(ctx, stof_tensor_rand(ctx, STOF_DTYPE_F32, 2, shape, 12, &c));
  assert_int_equal(a->ndim, 2);
  assert_int_equal(a->shape[0], 37);
  assert_int_equal(a->shape[1], 29);
  assert_true(stof_tensor_is_contiguous(a));
  int64_t n = stof_tensor_numel(a);
  assert_int_equal(n, 37 * 29);
  assert_memory_equal(a->data, b->data, (size_t)n * 4);
  double sum = 0, lo = 1, hi = -1;
  int same_as_c = 0, repeats = 0;
  for (int64_t i = 0; i < n; i++) {
    double v = stof_tensor_load(a, i);
    assert_false(isnan(v));
    assert_true(v >= -1.0 && v < 1.0);
    sum += v;
    if (v < lo) lo = v;
    if (v > hi) hi = v;
    same_as_c += v == stof_tensor_load(c, i);
    if (i > 0) repeats += v == stof_tensor_load(a, i - 1);
  }
  assert_true(lo < -0.9 && hi > 0.9);
  assert_true(fabs(sum / (double)n) < 0.1);
  assert_true(same_as_c < 5);
  assert_true(repeats < 5);
  stof_tensor_free(a);
  stof_tensor_free(b);
  stof_tensor_free(c);
  tu_ctx_free(ctx, &h);
}

/* stof_tensor_rand_range: any slice of the flat order is the same elements as the whole
 * tensor's, for every dtype (so a CPU reference can make the rows it checks alone) */
static void tensor_rand_range_is_a_slice_of_rand(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  const stof_dtype dts[] = {STOF_DTYPE_F16, STOF_DTYPE_BF16, STOF_DTYPE_F32, STOF_DTYPE_F64,
                            STOF_DTYPE_I32, STOF_DTYPE_I64, STOF_DTYPE_BOOL};
  for (size_t d = 0; d < sizeof dts / sizeof *dts; d++) {
    stof_tensor *a = NULL, *r = NULL;
    TU_OK(ctx, stof_tensor_rand(ctx, dts[d], 3, TU_SHAPE(3, 7, 11), 41, &a));
    const int64_t cuts[][2] = {{0, 231}, {5, 17}, {100, 1}, {230, 1}, {77, 0}};
    for (int c = 0; c < 5; c++) {
      TU_OK(ctx, stof_tensor_rand_range(ctx, dts[d], 41, cuts[c][0], cuts[c][1], &r));
      assert_int_equal(r->ndim, 1);
      assert_int_equal(r->shape[0], cuts[c][1]);
      size_t es = stof_dtype_size(dts[d]);
      if (cuts[c][1]) assert_memory_equal(r->data, (const char *)a->data + es * (size_t)cuts[c][0], es * (size_t)cuts[c][1]);
      stof_tensor_free(r);
    }
    stof_tensor_free(a);
  }
  stof_tensor *r = NULL;
  TU_ERR(ctx, stof_tensor_rand_range(ctx, STOF_DTYPE_F32, 1, -1, 4, &r), STOF_ERR_RANGE, "out of range");
  assert_null(r);
  TU_ERR(ctx, stof_tensor_rand_range(ctx, STOF_DTYPE_F32, 1, INT64_MAX - 2, 4, &r), STOF_ERR_RANGE, "out of range");
  assert_null(r);
  tu_ctx_free(ctx, &h);
}

/* stof_tensor_count_nan on the CPU; on the GPU (where there is one) stof_tensor_rand_on gives
 * stof_tensor_rand's bits and the count is made on the device; without one, NO_DEVICE */
static void tensor_count_nan_and_rand_on_the_gpu(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  stof_tensor *a = NULL, *g = NULL, *back = NULL;
  int64_t n = -1;
  TU_OK(ctx, stof_tensor_rand(ctx, STOF_DTYPE_F16, 2, TU_SHAPE(33, 65), 9, &a));
  TU_OK(ctx, stof_tensor_count_nan(a, &n));
  assert_int_equal(n, 0);
  stof_tensor_store(a, 0, NAN), stof_tensor_store(a, 1000, NAN), stof_tensor_store(a, 33 * 65 - 1, NAN);
  TU_OK(ctx, stof_tensor_count_nan(a, &n));
  assert_int_equal(n, 3);
  stof_tensor *ti = NULL;
  TU_OK(ctx, stof_tensor_rand(ctx, STOF_DTYPE_I32, 1, TU_SHAPE(4), 1, &ti));
  TU_ERR(ctx, stof_tensor_count_nan(ti, &n), STOF_ERR_TYPE, "not a float type");
  stof_tensor_free(ti);
  stof_tensor_free(a);
  stof_status init = stof_cuda_init(ctx);
  stof_ctx_clear_error(ctx);
  const stof_dtype dts[] = {STOF_DTYPE_F16, STOF_DTYPE_BF16, STOF_DTYPE_F32, STOF_DTYPE_F64};
  for (size_t d = 0; d < 4; d++) {
    stof_status st = stof_tensor_rand_on(ctx, dts[d], 3, TU_SHAPE(5, 300, 129), 77, STOF_DEVICE_CUDA, &g);
    if (init != STOF_OK) {
      assert_int_equal(st, init);
      assert_null(g);
      stof_ctx_clear_error(ctx);
      continue;
    }
    assert_int_equal(st, STOF_OK);
    assert_int_equal(g->device, STOF_DEVICE_CUDA);
    TU_OK(ctx, stof_tensor_rand(ctx, dts[d], 3, TU_SHAPE(5, 300, 129), 77, &a));
    TU_OK(ctx, stof_tensor_to(g, STOF_DEVICE_CPU, &back));
    assert_memory_equal(back->data, a->data, stof_dtype_size(dts[d]) * 5 * 300 * 129);
    TU_OK(ctx, stof_tensor_count_nan(g, &n));
    assert_int_equal(n, 0);
    if (dts[d] == STOF_DTYPE_F16 || dts[d] == STOF_DTYPE_BF16) { /* poisoned: every element NaN */
      TU_OK(ctx, stof_cuda_memset16(ctx, (uint64_t)(uintptr_t)g->data, dts[d] == STOF_DTYPE_F16 ? 0x7e00 : 0x7fc0,
                                    5 * 300 * 129));
      TU_OK(ctx, stof_tensor_count_nan(g, &n));
      assert_int_equal(n, 5 * 300 * 129);
    }
    stof_tensor_free(back);
    stof_tensor_free(a);
    stof_tensor_free(g);
    back = a = g = NULL;
  }
  if (init == STOF_OK)
    TU_ERR(ctx, stof_tensor_rand_on(ctx, STOF_DTYPE_I32, 1, TU_SHAPE(4), 1, STOF_DEVICE_CUDA, &g), STOF_ERR_UNSUPPORTED,
           "float16, bfloat16, float32 or float64");
  tu_ctx_free(ctx, &h);
}

static void tensor_rand_ints_and_bools_in_range(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  stof_tensor *ti = NULL, *tl = NULL, *tb = NULL, *th = NULL;
  TU_OK(ctx, stof_tensor_rand(ctx, STOF_DTYPE_I32, 1, TU_SHAPE(2000), 5, &ti));
  TU_OK(ctx, stof_tensor_rand(ctx, STOF_DTYPE_I64, 1, TU_SHAPE(2000), 5, &tl));
  TU_OK(ctx, stof_tensor_rand(ctx, STOF_DTYPE_BOOL, 1, TU_SHAPE(2000), 5, &tb));
  TU_OK(ctx, stof_tensor_rand(ctx, STOF_DTYPE_F16, 1, TU_SHAPE(2000), 5, &th));
  int seen[100] = {0}, ones = 0, zeros = 0;
  for (int64_t i = 0; i < 2000; i++) {
    double v = stof_tensor_load(ti, i);
    assert_true(v >= 0 && v < 100 && v == floor(v));
    seen[(int)v] = 1;
    double w = stof_tensor_load(tl, i);
    assert_true(w >= 0 && w < 100 && w == floor(w));
    double b = stof_tensor_load(tb, i);
    assert_true(b == 0 || b == 1);
    ones += b == 1;
    zeros += b == 0;
    double f = stof_tensor_load(th, i);
    assert_true(f >= -1 && f <= 1); /* a value just under 1 may round up to 1 in f16 */
    assert_true(f == tu_round_f16(f));
  }
  int distinct = 0;
  for (int i = 0; i < 100; i++) distinct += seen[i];
  assert_true(distinct > 90);
  assert_true(ones > 800 && zeros > 800);
  stof_tensor_free(ti);
  stof_tensor_free(tl);
  stof_tensor_free(tb);
  stof_tensor_free(th);
  tu_ctx_free(ctx, &h);
}

/* ---------------------------------------------------------------- wrap and views */

static void tensor_wrap_transposed_view_reads_right_elements(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  float base[3 * 4];
  uint64_t seed = 8;
  for (int n = 0; n < 12; n++) base[n] = (float)tu_uniform(&seed, -5, 5);
  stof_tensor *t = NULL;
  /* base is 3x4 row-major; the view is its 4x3 transpose */
  TU_OK(ctx, stof_tensor_wrap(ctx, STOF_DTYPE_F32, 2, TU_SHAPE(4, 3), TU_SHAPE(1, 4), base,
                              STOF_DEVICE_CPU, &t));
  assert_false(t->owned);
  assert_ptr_equal(t->data, base);
  assert_false(stof_tensor_is_contiguous(t));
  assert_int_equal(stof_tensor_numel(t), 12);
  for (int64_t i = 0; i < 4; i++)
    for (int64_t j = 0; j < 3; j++) {
      double v = NAN;
      TU_OK(ctx, stof_tensor_get(t, TU_SHAPE(i, j), &v));
      assert_true(v == base[j * 4 + i]);
      assert_true(stof_tensor_load(t, i * 1 + j * 4) == base[j * 4 + i]);
    }
  TU_OK(ctx, stof_tensor_set(t, TU_SHAPE(3, 1), 0.75));
  assert_true(base[1 * 4 + 3] == 0.75f);
  /* a contiguous copy of the view */
  stof_tensor *c = NULL;
  TU_OK(ctx, stof_tensor_to(t, STOF_DEVICE_CPU, &c));
  assert_true(stof_tensor_is_contiguous(c));
  assert_ptr_not_equal(c->data, base);
  assert_int_equal(c->shape[0], 4);
  assert_int_equal(c->shape[1], 3);
  for (int64_t i = 0; i < 4; i++)
    for (int64_t j = 0; j < 3; j++) assert_true(stof_tensor_load(c, i * 3 + j) == base[j * 4 + i]);
  stof_tensor_free(c);
  stof_tensor_free(t); /* must not free base (the hook would see a foreign pointer) */
  assert_int_equal(h.bad_size, 0);
  /* contiguous wrap with NULL strides */
  TU_OK(ctx, stof_tensor_wrap(ctx, STOF_DTYPE_F32, 2, TU_SHAPE(3, 4), NULL, base,
                              STOF_DEVICE_CPU, &t));
  assert_true(stof_tensor_is_contiguous(t));
  assert_int_equal(t->strides[0], 4);
  assert_int_equal(t->strides[1], 1);
  stof_tensor_free(t);
  tu_ctx_free(ctx, &h);
}

static void tensor_fill_and_store_touch_only_view_elements(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  double base[3 * 4];
  for (int n = 0; n < 12; n++) base[n] = n + 0.5;
  stof_tensor *v = NULL;
  /* columns 0 and 2 of the 3x4 matrix */
  TU_OK(ctx, stof_tensor_wrap(ctx, STOF_DTYPE_F64, 2, TU_SHAPE(3, 2), TU_SHAPE(4, 2), base,
                              STOF_DEVICE_CPU, &v));
  stof_tensor_fill(v, NAN);
  for (int r = 0; r < 3; r++)
    for (int c = 0; c < 4; c++) {
      if (c % 2 == 0) assert_true(isnan(base[r * 4 + c]));
      else assert_true(base[r * 4 + c] == r * 4 + c + 0.5);
    }
  stof_tensor_store(v, 2 * 4 + 1 * 2, -9.0); /* element (2, 1) of the view */
  assert_true(base[2 * 4 + 2] == -9.0);
  stof_tensor_free(v);
  tu_ctx_free(ctx, &h);
}

/* ---------------------------------------------------------------- cast */

static void tensor_cast_f32_to_f16_and_back_rounds_to_half(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  uint64_t seed = 21;
  stof_tensor *a = tu_tensor_uniform(ctx, STOF_DTYPE_F32, 2, TU_SHAPE(9, 11), &seed, -300, 300);
  stof_tensor *hf = NULL, *back = NULL;
  TU_OK(ctx, stof_tensor_cast(a, STOF_DTYPE_F16, &hf));
  assert_int_equal(hf->dtype, STOF_DTYPE_F16);
  assert_int_equal(hf->shape[0], 9);
  assert_int_equal(hf->shape[1], 11);
  TU_OK(ctx, stof_tensor_cast(hf, STOF_DTYPE_F32, &back));
  assert_int_equal(back->dtype, STOF_DTYPE_F32);
  int changed = 0;
  for (int64_t i = 0; i < 99; i++) {
    double x = stof_tensor_load(a, i), y = stof_tensor_load(back, i);
    assert_true(y == tu_round_f16(x));
    assert_true(fabs(y - x) <= fabs(x) * 0x1.0p-11);
    changed += y != x;
  }
  assert_true(changed > 50);
  stof_tensor_free(a);
  stof_tensor_free(hf);
  stof_tensor_free(back);
  tu_ctx_free(ctx, &h);
}

static void tensor_cast_of_strided_view_to_int_truncates(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  float base[6] = {2.7f, -2.7f, 0.5f, -0.5f, 99.99f, -7.0f};
  stof_tensor *v = NULL, *c = NULL;
  /* 2x3 base viewed as its 3x2 transpose */
  TU_OK(ctx, stof_tensor_wrap(ctx, STOF_DTYPE_F32, 2, TU_SHAPE(3, 2), TU_SHAPE(1, 3), base,
                              STOF_DEVICE_CPU, &v));
  TU_OK(ctx, stof_tensor_cast(v, STOF_DTYPE_I32, &c));
  assert_int_equal(c->dtype, STOF_DTYPE_I32);
  assert_true(stof_tensor_is_contiguous(c));
  const int32_t *d = c->data;
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 2; j++) assert_int_equal(d[i * 2 + j], (int32_t)base[j * 3 + i]);
  stof_tensor_free(v);
  stof_tensor_free(c);
  tu_ctx_free(ctx, &h);
}

/* ---------------------------------------------------------------- comparisons */

static void tensor_allclose_accepts_within_tolerance_and_rejects_beyond(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  uint64_t seed = 31;
  stof_tensor *a = tu_tensor_uniform(ctx, STOF_DTYPE_F64, 2, TU_SHAPE(5, 7), &seed, -1, 1);
  stof_tensor *b = NULL;
  TU_OK(ctx, stof_tensor_to(a, STOF_DEVICE_CPU, &b));
  const double rtol = 1e-3, atol = 1e-6;
  for (int64_t i = 0; i < 35; i++) {
    double bv = stof_tensor_load(b, i);
    stof_tensor_store(a, i, bv + 0.5 * (atol + rtol * fabs(bv)) * (i % 2 ? 1 : -1));
  }
  int ok = -1;
  TU_OK(ctx, stof_tensor_allclose(a, b, rtol, atol, &ok));
  assert_int_equal(ok, 1);
  double b17 = stof_tensor_load(b, 17);
  stof_tensor_store(a, 17, b17 + 2 * (atol + rtol * fabs(b17)));
  ok = -1;
  TU_OK(ctx, stof_tensor_allclose(a, b, rtol, atol, &ok));
  assert_int_equal(ok, 0);
  stof_tensor_store(a, 17, b17);
  /* NaN is never close, not even to NaN */
  stof_tensor_store(a, 3, NAN);
  stof_tensor_store(b, 3, NAN);
  ok = -1;
  TU_OK(ctx, stof_tensor_allclose(a, b, 1, 1, &ok));
  assert_int_equal(ok, 0);
  stof_tensor_free(a);
  stof_tensor_free(b);
  tu_ctx_free(ctx, &h);
}

static void tensor_allclose_is_relative_to_b(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  stof_tensor *one = NULL, *two = NULL;
  TU_OK(ctx, stof_tensor_new(ctx, STOF_DTYPE_F32, 1, TU_SHAPE(3), STOF_DEVICE_CPU, &one));
  TU_OK(ctx, stof_tensor_new(ctx, STOF_DTYPE_F32, 1, TU_SHAPE(3), STOF_DEVICE_CPU, &two));
  stof_tensor_fill(one, 1.0);
  stof_tensor_fill(two, 2.0);
  int ok = -1;
  /* |1 - 2| = 1 <= 0.5 * |2| */
  TU_OK(ctx, stof_tensor_allclose(one, two, 0.5, 0, &ok));
  assert_int_equal(ok, 1);
  /* |2 - 1| = 1 > 0.5 * |1| */
  TU_OK(ctx, stof_tensor_allclose(two, one, 0.5, 0, &ok));
  assert_int_equal(ok, 0);
  /* atol alone */
  TU_OK(ctx, stof_tensor_allclose(two, one, 0, 1.0, &ok));
  assert_int_equal(ok, 1);
  TU_OK(ctx, stof_tensor_allclose(two, one, 0, 0.999, &ok));
  assert_int_equal(ok, 0);
  stof_tensor_free(one);
  stof_tensor_free(two);
  tu_ctx_free(ctx, &h);
}

static void tensor_allclose_and_rel_l2_reject_shape_mismatch(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  stof_tensor *a = NULL, *b = NULL;
  TU_OK(ctx, stof_tensor_rand(ctx, STOF_DTYPE_F32, 2, TU_SHAPE(3, 4), 1, &a));
  TU_OK(ctx, stof_tensor_rand(ctx, STOF_DTYPE_F32, 2, TU_SHAPE(3, 5), 2, &b));
  int ok = 7;
  double e = 7;
  stof_status s = stof_tensor_allclose(a, b, 1e-3, 1e-3, &ok);
  assert_int_equal(s, STOF_ERR_SHAPE);
  assert_int_equal(stof_ctx_status(ctx), STOF_ERR_SHAPE);
  TU_MSG_ANY(ctx, "shape", "allclose", "5");
  stof_ctx_clear_error(ctx);
  s = stof_tensor_rel_l2(a, b, &e);
  assert_int_equal(s, STOF_ERR_SHAPE);
  TU_MSG_ANY(ctx, "shape", "rel_l2", "5");
  stof_ctx_clear_error(ctx);
  stof_tensor_free(a);
  stof_tensor_free(b);
  tu_ctx_free(ctx, &h);
}

static void tensor_allclose_and_rel_l2_follow_strides(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  float base[5 * 5];
  uint64_t seed = 51;
  for (int n = 0; n < 25; n++) base[n] = (float)tu_uniform(&seed, -1, 1);
  stof_tensor *plain = NULL, *tr = NULL, *copy = NULL;
  TU_OK(ctx, stof_tensor_wrap(ctx, STOF_DTYPE_F32, 2, TU_SHAPE(5, 5), NULL, base, STOF_DEVICE_CPU, &plain));
  TU_OK(ctx, stof_tensor_wrap(ctx, STOF_DTYPE_F32, 2, TU_SHAPE(5, 5), TU_SHAPE(1, 5), base,
                              STOF_DEVICE_CPU, &tr));
  TU_OK(ctx, stof_tensor_to(tr, STOF_DEVICE_CPU, &copy));
  int ok = -1;
  double e = -1;
  TU_OK(ctx, stof_tensor_allclose(tr, copy, 0, 0, &ok));
  assert_int_equal(ok, 1);
  TU_OK(ctx, stof_tensor_rel_l2(tr, copy, &e));
  assert_true(e == 0);
  /* the transpose is not the matrix itself */
  TU_OK(ctx, stof_tensor_allclose(plain, copy, 1e-3, 1e-3, &ok));
  assert_int_equal(ok, 0);
  double g[25], w[25];
  for (int i = 0; i < 5; i++)
    for (int j = 0; j < 5; j++) {
      g[i * 5 + j] = base[i * 5 + j];
      w[i * 5 + j] = base[j * 5 + i];
    }
  TU_OK(ctx, stof_tensor_rel_l2(plain, tr, &e));
  assert_true(fabs(e - tu_rel_l2(g, w, 25)) < 1e-12);
  stof_tensor_free(plain);
  stof_tensor_free(tr);
  stof_tensor_free(copy);
  tu_ctx_free(ctx, &h);
}

static void tensor_rel_l2_matches_reference(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  uint64_t seed = 41;
  stof_tensor *a = tu_tensor_uniform(ctx, STOF_DTYPE_F32, 2, TU_SHAPE(13, 17), &seed, -2, 2);
  stof_tensor *b = tu_tensor_uniform(ctx, STOF_DTYPE_F32, 2, TU_SHAPE(13, 17), &seed, -2, 2);
  double *va = tu_values(a), *vb = tu_values(b);
  double want = tu_rel_l2(va, vb, 13 * 17);
  double got = -1;
  TU_OK(ctx, stof_tensor_rel_l2(a, b, &got));
  assert_true(fabs(got - want) <= 1e-12 * want);
  assert_true(got > 0.1); /* two independent random tensors are far apart */
  /* a small perturbation */
  for (int64_t i = 0; i < 13 * 17; i++) stof_tensor_store(a, i, vb[i] * (1 + 1e-4));
  free(va);
  va = tu_values(a);
  want = tu_rel_l2(va, vb, 13 * 17);
  TU_OK(ctx, stof_tensor_rel_l2(a, b, &got));
  assert_true(fabs(got - want) <= 1e-9 * want);
  assert_true(got < 2e-4 && got > 5e-5);
  /* both zero gives 0, a NaN gives +inf */
  stof_tensor_fill(a, 0);
  stof_tensor_fill(b, 0);
  got = -1;
  TU_OK(ctx, stof_tensor_rel_l2(a, b, &got));
  assert_true(got == 0);
  stof_tensor_fill(b, 1);
  stof_tensor_store(a, 4, NAN);
  TU_OK(ctx, stof_tensor_rel_l2(a, b, &got));
  assert_true(isinf(got) && got > 0);
  free(va);
  free(vb);
  stof_tensor_free(a);
  stof_tensor_free(b);
  tu_ctx_free(ctx, &h);
}

/* ---------------------------------------------------------------- devices */

static void tensor_to_cuda_fails_with_no_device_or_round_trips_on_gpu(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  stof_tensor *a = NULL, *d = NULL;
  TU_OK(ctx, stof_tensor_rand(ctx, STOF_DTYPE_F32, 1, TU_SHAPE(16), 3, &a));
  stof_status init = stof_cuda_init(ctx);
  stof_ctx_clear_error(ctx);
  if (init == STOF_OK) {
    /* a GPU is there: the copy must round-trip */
    TU_OK(ctx, stof_tensor_to(a, STOF_DEVICE_CUDA, &d));
    assert_int_equal(d->device, STOF_DEVICE_CUDA);
    stof_tensor *back = NULL;
    TU_OK(ctx, stof_tensor_to(d, STOF_DEVICE_CPU, &back));
    assert_memory_equal(back->data, a->data, 16 * 4);
    stof_tensor_free(back);
    stof_tensor_free(d);
  } else {
    assert_true(init == STOF_ERR_NO_DEVICE || init == STOF_ERR_CUDA);
    stof_status s = stof_tensor_to(a, STOF_DEVICE_CUDA, &d);
    assert_int_equal(s, init);
    assert_int_equal(stof_ctx_status(ctx), init);
    assert_null(d);
    TU_MSG_ANY(ctx, "GPU", "CUDA", "cuda", "device");
    stof_ctx_clear_error(ctx);
    s = stof_tensor_new(ctx, STOF_DTYPE_F32, 1, TU_SHAPE(4), STOF_DEVICE_CUDA, &d);
    assert_int_equal(s, init);
    TU_MSG_ANY(ctx, "GPU", "CUDA", "cuda", "device");
    assert_null(d);
    stof_ctx_clear_error(ctx);
  }
  stof_tensor_free(a);
  tu_ctx_free(ctx, &h);
}

int run_tensor_tests(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(tensor_new_has_contiguous_strides_and_zeros),
      cmocka_unit_test(tensor_new_scalar_and_empty_shapes),
      cmocka_unit_test(shape_check_rejects_negative_extent_and_too_many_dims),
      cmocka_unit_test(tensor_new_with_bad_shape_fails_with_shape_error),
      cmocka_unit_test(tensor_set_get_round_trip_and_store_row_major),
      cmocka_unit_test(tensor_set_rounds_to_its_dtype),
      cmocka_unit_test(tensor_get_set_out_of_range_fails_naming_the_dim),
      cmocka_unit_test(tensor_rand_is_reproducible_in_range_and_varied),
      cmocka_unit_test(tensor_rand_ints_and_bools_in_range),
      cmocka_unit_test(tensor_rand_range_is_a_slice_of_rand),
      cmocka_unit_test(tensor_count_nan_and_rand_on_the_gpu),
      cmocka_unit_test(tensor_wrap_transposed_view_reads_right_elements),
      cmocka_unit_test(tensor_fill_and_store_touch_only_view_elements),
      cmocka_unit_test(tensor_cast_f32_to_f16_and_back_rounds_to_half),
      cmocka_unit_test(tensor_cast_of_strided_view_to_int_truncates),
      cmocka_unit_test(tensor_allclose_accepts_within_tolerance_and_rejects_beyond),
      cmocka_unit_test(tensor_allclose_is_relative_to_b),
      cmocka_unit_test(tensor_allclose_and_rel_l2_reject_shape_mismatch),
      cmocka_unit_test(tensor_allclose_and_rel_l2_follow_strides),
      cmocka_unit_test(tensor_rel_l2_matches_reference),
      cmocka_unit_test(tensor_to_cuda_fails_with_no_device_or_round_trips_on_gpu),
  };
  return cmocka_run_group_tests_name("tensor", tests, NULL, NULL);
}
