/*
 * The GEMM intrinsic without a GPU: stof_gemm_cpu against a naive loop written here from
 * the header's definition (D = act(alpha A B + bias + beta C), stored layouts, batch
 * strides, GELU in its tanh form) on random inputs, for every epilogue, both transposes of
 * both operands, float32 and float16 inputs, a batch with padded and shared operands, and
 * outputs in float64 (compared tightly) and float16 (one rounding); stof_gemm_check's
 * refusals (status and message); the CPU implementation's argument errors and out of
 * memory; the plan's answer on a machine without a GPU.
 */
#include "helpers.h"
#include "../core/testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- the reference */

static double ref_gelu(double x) {
  return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

/* want[i * stride_c + m * N + n] for every product i, naively, reading the operands as the
 * header lays them out. Elements between products are left as they are. */
static void reference(const stof_gemm_desc *d, const stof_tensor *a, const stof_tensor *b,
                      const stof_tensor *c, const stof_tensor *bias, double *want) {
  int64_t nb = d->batch > 1 ? d->batch : 1;
  int relu = d->epi == STOF_GEMM_EPI_RELU || d->epi == STOF_GEMM_EPI_RELU_BIAS;
  int gelu = d->epi == STOF_GEMM_EPI_GELU || d->epi == STOF_GEMM_EPI_GELU_BIAS;
  int addb = d->epi == STOF_GEMM_EPI_BIAS || d->epi == STOF_GEMM_EPI_RELU_BIAS ||
             d->epi == STOF_GEMM_EPI_GELU_BIAS;
  for (int64_t i = 0; i < nb; i++)
    for (int64_t m = 0; m < d->M; m++)
      for (int64_t n = 0; n < d->N; n++) {
        double s = 0;
        for (int64_t k = 0; k < d->K; k++) {
          int64_t ai = i * d->stride_a + (d->trans_a ? k * d->M + m : m * d->K + k);
          int64_t bi = i * d->stride_b + (d->trans_b ? n * d->K + k : k * d->N + n);
          s += stof_tensor_load(a, ai) * stof_tensor_load(b, bi);
        }
        int64_t o = i * d->stride_c + m * d->N + n;
        double v = d->alpha * s;
        if (addb) v += stof_tensor_load(bias, n);
        if (d->beta != 0) v += d->beta * stof_tensor_load(c, o);
        if (relu) v = v > 0 ? v : 0;
        if (gelu) v = ref_gelu(v);
        want[o] = v;
      }
}

static stof_tensor *rnd(stof_ctx *ctx, stof_dtype dt, int ndim, const int64_t *shape, uint64_t *seed) {
  return tu_tensor_uniform(ctx, dt, ndim, shape, seed, -1, 1);
}

/* ---------------------------------------------------------------- CPU against the loop */

static void cpu_matches_naive_loop_for_every_epilogue_and_layout(void **state) {
  (void)state;
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  const int64_t M = 5, N = 7, K = 9;
  const stof_dtype dts[] = {STOF_DTYPE_F32, STOF_DTYPE_F16};
  uint64_t seed = 2024;
  int ncase = 0;
  for (int t = 0; t < 2; t++)
    for (int ta = 0; ta <= 1; ta++)
      for (int tb = 0; tb <= 1; tb++)
        for (int e = 0; e < STOF_GEMM_EPI_COUNT; e++)
          for (int withc = 0; withc <= 1; withc++) {
            stof_dtype dt = dts[t];
            stof_gemm_desc d = {.M = M, .N = N, .K = K, .batch = 1, .trans_a = ta, .trans_b = tb,
                                .dtype = dt, .epi = (stof_gemm_epilogue)e, .alpha = 1.25f,
                                .beta = withc ? -0.5f : 0.0f};
            stof_tensor *a = rnd(ctx, dt, 2, ta ? TU_SHAPE(K, M) : TU_SHAPE(M, K), &seed);
            stof_tensor *b = rnd(ctx, dt, 2, tb ? TU_SHAPE(N, K) : TU_SHAPE(K, N), &seed);
            stof_tensor *c = rnd(ctx, dt, 2, TU_SHAPE(M, N), &seed);
            stof_tensor *bias = rnd(ctx, dt, 1, TU_SHAPE(N), &seed);
            stof_tensor *out = NULL, *out16 = NULL;
            TU_OK(ctx, stof_tensor_new(ctx, STOF_DTYPE_F64, 2, TU_SHAPE(M, N), STOF_DEVICE_CPU, &out));
            TU_OK(ctx, stof_tensor_new(ctx, STOF_DTYPE_F16, 2, TU_SHAPE(M, N), STOF_DEVICE_CPU, &out16));
            stof_tensor_fill(out, NAN);
            stof_tensor_fill(out16, NAN);
            /* without the residual, c is not read: NULL, or NaN that must not leak in */
            const stof_tensor *cin = c;
            if (!withc) {
              if (e % 2) stof_tensor_fill(c, NAN);
              else cin = NULL;
            }
            const stof_tensor *bin = stof_gemm_epilogue_has_bias(d.epi) ? bias : NULL;
            TU_OK(ctx, stof_gemm_cpu(ctx, &d, a, b, cin, bin, out));
            TU_OK(ctx, stof_gemm_cpu(ctx, &d, a, b, cin, bin, out16));
            double want[64];
            reference(&d, a, b, c, bias, want);
            for (int64_t i = 0; i < M * N; i++) {
              double g = stof_tensor_load(out, i), g16 = stof_tensor_load(out16, i);
              if (!(fabs(g - want[i]) <= 1e-12 * (1 + fabs(want[i]))))
                fail_msg("%s trans_a %d trans_b %d %s beta %g: out[%lld] = %.17g, want %.17g",
                         stof_dtype_name(dt), ta, tb, stof_gemm_epilogue_name(d.epi), (double)d.beta,
                         (long long)i, g, want[i]);
              /* one rounding to f16: the nearest f16 of want (ties aside) */
              double r = tu_round_f16(want[i]);
              if (!(fabs(g16 - r) <= ldexp(fabs(r), -10) + 1e-7))
                fail_msg("%s %s: f16 out[%lld] = %.9g, want %.9g", stof_dtype_name(dt),
                         stof_gemm_epilogue_name(d.epi), (long long)i, g16, r);
            }
            stof_tensor *ts[] = {a, b, c, bias, out, out16};
            for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) stof_tensor_free(ts[i]);
            ncase++;
          }
  assert_int_equal(ncase, 2 * 2 * 2 * STOF_GEMM_EPI_COUNT * 2);
  tu_ctx_free(ctx, &h);
}

/* The activations at chosen points: relu clips, gelu is the tanh form (not erf's). */
static void cpu_epilogues_are_relu_and_tanh_gelu(void **state) {
  (void)state;
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  /* D = A (1 x K=1) times B (1 x N): D[0, n] = alpha * B[0, n] */
  const double xs[] = {-3.0, -1.0, -0.25, 0.0, 0.5, 1.0, 2.0, 4.0};
  const int64_t N = 8;
  stof_tensor *a = NULL, *b = NULL, *out = NULL;
  TU_OK(ctx, stof_tensor_new(ctx, STOF_DTYPE_F32, 2, TU_SHAPE(1, 1), STOF_DEVICE_CPU, &a));
  TU_OK(ctx, stof_tensor_new(ctx, STOF_DTYPE_F32, 2, TU_SHAPE(1, N), STOF_DEVICE_CPU, &b));
  TU_OK(ctx, stof_tensor_new(ctx, STOF_DTYPE_F64, 2, TU_SHAPE(1, N), STOF_DEVICE_CPU, &out));
  stof_tensor_store(a, 0, 1.0);
  for (int64_t n = 0; n < N; n++) stof_tensor_store(b, n, xs[n]);
  stof_gemm_desc d = {.M = 1, .N = N, .K = 1, .dtype = STOF_DTYPE_F32, .epi = STOF_GEMM_EPI_RELU, .alpha = 1};
  TU_OK(ctx, stof_gemm_cpu(ctx, &d, a, b, NULL, NULL, out));
  for (int64_t n = 0; n < N; n++) assert_true(stof_tensor_load(out, n) == (xs[n] > 0 ? xs[n] : 0));
  d.epi = STOF_GEMM_EPI_GELU;
  TU_OK(ctx, stof_gemm_cpu(ctx, &d, a, b, NULL, NULL, out));
  for (int64_t n = 0; n < N; n++) {
    double x = xs[n], g = stof_tensor_load(out, n), erf_form = 0.5 * x * (1 + erf(x / sqrt(2.0)));
    assert_true(fabs(g - ref_gelu(x)) < 1e-15);
    if (x == 1.0) assert_true(fabs(g - erf_form) > 1e-5); /* 0.8411920 vs 0.8413447 */
  }
  stof_tensor_free(a);
  stof_tensor_free(b);
  stof_tensor_free(out);
  tu_ctx_free(ctx, &h);
}

/* batch 3: A transposed with a padded stride, B shared (stride 0), C with a padded stride;
 * the padding between outputs is not written. */
static void cpu_batch_with_padded_and_shared_operands(void **state) {
  (void)state;
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  const int64_t M = 4, N = 6, K = 3, B = 3, sa = K * M + 5, sc = M * N + 7;
  stof_gemm_desc d = {.M = M, .N = N, .K = K, .batch = B, .trans_a = 1, .trans_b = 1,
                      .dtype = STOF_DTYPE_F32, .epi = STOF_GEMM_EPI_GELU_BIAS, .alpha = 0.5f,
                      .beta = 2.0f, .stride_a = sa, .stride_b = 0, .stride_c = sc};
  uint64_t seed = 5;
  int64_t na = ((B - 1) * sa + K * M + K * M - 1) / (K * M), nc = ((B - 1) * sc + M * N + M * N - 1) / (M * N);
  stof_tensor *a = rnd(ctx, STOF_DTYPE_F32, 3, TU_SHAPE(na, K, M), &seed);
  stof_tensor *b = rnd(ctx, STOF_DTYPE_F32, 2, TU_SHAPE(N, K), &seed);
  stof_tensor *c = rnd(ctx, STOF_DTYPE_F32, 3, TU_SHAPE(nc, M, N), &seed);
  stof_tensor *bias = rnd(ctx, STOF_DTYPE_F32, 1, TU_SHAPE(N), &seed);
  stof_tensor *out = NULL;
  TU_OK(ctx, stof_tensor_new(ctx, STOF_DTYPE_F64, 3, TU_SHAPE(nc, M, N), STOF_DEVICE_CPU, &out));
  stof_tensor_fill(out, -777.0);
  TU_OK(ctx, stof_gemm_cpu(ctx, &d, a, b, c, bias, out));
  int64_t n = stof_tensor_numel(out);
  double *want = malloc(sizeof *want * (size_t)n);
  assert_non_null(want);
  for (int64_t i = 0; i < n; i++) want[i] = -777.0;
  reference(&d, a, b, c, bias, want);
  for (int64_t i = 0; i < n; i++)
    if (!(fabs(stof_tensor_load(out, i) - want[i]) <= 1e-12 * (1 + fabs(want[i]))))
      fail_msg("batched out[%lld] = %.17g, want %.17g", (long long)i, stof_tensor_load(out, i), want[i]);
  /* a tensor too small for the strides is refused */
  stof_tensor *small = rnd(ctx, STOF_DTYPE_F32, 2, TU_SHAPE(K, M), &seed);
  TU_ERR(ctx, stof_gemm_cpu(ctx, &d, small, b, c, bias, out), STOF_ERR_SHAPE, "strides reach");
  free(want);
  stof_tensor *ts[] = {a, b, c, bias, out, small};
  for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) stof_tensor_free(ts[i]);
  tu_ctx_free(ctx, &h);
}

/* ---------------------------------------------------------------- errors */

static void check_rejects_bad_descriptions(void **state) {
  (void)state;
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  const stof_gemm_desc ok = {.M = 8, .N = 16, .K = 4, .batch = 1, .dtype = STOF_DTYPE_BF16,
                             .epi = STOF_GEMM_EPI_RELU_BIAS, .alpha = 1, .beta = 0};
  TU_OK(ctx, stof_gemm_check(ctx, &ok));
  stof_gemm_desc d;
#define BAD(field, value, status, substr) \
  d = ok;                                 \
  d.field = value;                        \
  TU_ERR(ctx, stof_gemm_check(ctx, &d), status, substr)
  BAD(M, -1, STOF_ERR_ARG, "M = -1 (sizes must be positive)");
  BAD(N, 0, STOF_ERR_ARG, "N = 0");
  BAD(K, -7, STOF_ERR_ARG, "K = -7");
  BAD(batch, -2, STOF_ERR_ARG, "batch = -2");
  BAD(batch, (int64_t)1 << 31, STOF_ERR_ARG, "batch = 2147483648");
  BAD(trans_a, 2, STOF_ERR_ARG, "trans_a = 2");
  BAD(trans_b, -1, STOF_ERR_ARG, "trans_b = -1");
  BAD(epi, (stof_gemm_epilogue)99, STOF_ERR_ARG, "unknown epilogue 99");
  BAD(alpha, NAN, STOF_ERR_ARG, "alpha");
  BAD(beta, INFINITY, STOF_ERR_ARG, "beta = inf");
  BAD(dtype, STOF_DTYPE_F64, STOF_ERR_UNSUPPORTED, "dtype float64");
  BAD(dtype, STOF_DTYPE_I32, STOF_ERR_UNSUPPORTED, "dtype int32");
  BAD(M, (int64_t)1 << 62, STOF_ERR_ARG, "A of 4611686018427387904 x 4 (batch 1, stride 0) overflows");
  d = ok;
  d.M = d.N = d.K = (int64_t)1 << 31; /* each [2^31, 2^31] matrix: 2^62 elements, 2^63 bytes */
  TU_ERR(ctx, stof_gemm_check(ctx, &d), STOF_ERR_ARG, "overflows 64-bit sizes");
  d = ok;
  d.batch = 4, d.stride_a = 32, d.stride_b = 64, d.stride_c = 127;
  TU_ERR(ctx, stof_gemm_check(ctx, &d), STOF_ERR_ARG, "stride_c = 127 < M * N = 128");
  d.stride_c = 128, d.stride_b = -64;
  TU_ERR(ctx, stof_gemm_check(ctx, &d), STOF_ERR_ARG, "stride_b = -64");
  d.stride_b = (int64_t)1 << 62;
  TU_ERR(ctx, stof_gemm_check(ctx, &d), STOF_ERR_ARG, "B of 4 x 16 (batch 4");
  d = ok;
  d.batch = 1, d.stride_c = -5; /* strides are not read for one product */
  TU_OK(ctx, stof_gemm_check(ctx, &d));
  TU_ERR(ctx, stof_gemm_check(ctx, NULL), STOF_ERR_ARG, "NULL");
#undef BAD
  assert_string_equal(stof_gemm_epilogue_name(STOF_GEMM_EPI_GELU_BIAS), "gelu_bias");
  assert_string_equal(stof_gemm_epilogue_name(STOF_GEMM_EPI_NONE), "none");
  assert_string_equal(stof_gemm_epilogue_name((stof_gemm_epilogue)42), "?");
  assert_true(stof_gemm_epilogue_has_bias(STOF_GEMM_EPI_RELU_BIAS));
  assert_false(stof_gemm_epilogue_has_bias(STOF_GEMM_EPI_GELU));
  tu_ctx_free(ctx, &h);
}

static void cpu_rejects_bad_tensors(void **state) {
  (void)state;
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  stof_gemm_desc d = {.M = 2, .N = 3, .K = 4, .batch = 1, .dtype = STOF_DTYPE_F32,
                      .epi = STOF_GEMM_EPI_BIAS, .alpha = 1, .beta = 1};
  uint64_t seed = 1;
  stof_tensor *a = rnd(ctx, STOF_DTYPE_F32, 2, TU_SHAPE(2, 4), &seed);
  stof_tensor *at = rnd(ctx, STOF_DTYPE_F32, 2, TU_SHAPE(4, 2), &seed);
  stof_tensor *b = rnd(ctx, STOF_DTYPE_F32, 2, TU_SHAPE(4, 3), &seed);
  stof_tensor *c = rnd(ctx, STOF_DTYPE_F32, 2, TU_SHAPE(2, 3), &seed);
  stof_tensor *bias = rnd(ctx, STOF_DTYPE_F32, 1, TU_SHAPE(3), &seed);
  stof_tensor *bias4 = rnd(ctx, STOF_DTYPE_F32, 1, TU_SHAPE(4), &seed);
  stof_tensor *ints = NULL, *out = NULL;
  TU_OK(ctx, stof_tensor_new(ctx, STOF_DTYPE_I32, 2, TU_SHAPE(2, 4), STOF_DEVICE_CPU, &ints));
  TU_OK(ctx, stof_tensor_new(ctx, STOF_DTYPE_F32, 2, TU_SHAPE(2, 3), STOF_DEVICE_CPU, &out));
  TU_OK(ctx, stof_gemm_cpu(ctx, &d, a, b, c, bias, out));
  TU_ERR(ctx, stof_gemm_cpu(ctx, &d, a, b, NULL, bias, out), STOF_ERR_ARG, "missing c (beta is not 0)");
  TU_ERR(ctx, stof_gemm_cpu(ctx, &d, a, b, c, NULL, out), STOF_ERR_ARG, "missing bias");
  TU_ERR(ctx, stof_gemm_cpu(ctx, &d, NULL, b, c, bias, out), STOF_ERR_ARG, "missing a");
  TU_ERR(ctx, stof_gemm_cpu(ctx, &d, at, b, c, bias, out), STOF_ERR_SHAPE, "a must end in the stored shape [2, 4]");
  TU_ERR(ctx, stof_gemm_cpu(ctx, &d, a, b, c, bias4, out), STOF_ERR_SHAPE, "bias has 4 elements, N = 3");
  TU_ERR(ctx, stof_gemm_cpu(ctx, &d, ints, b, c, bias, out), STOF_ERR_TYPE, "a is int32");
  TU_OK(ctx, stof_gemm_cpu(ctx, &d, a, b, c, bias, c)); /* in place: out may be c */
  d.trans_a = 1; /* now at is right and a is not */
  TU_OK(ctx, stof_gemm_cpu(ctx, &d, at, b, c, bias, out));
  TU_ERR(ctx, stof_gemm_cpu(ctx, &d, a, b, c, bias, out), STOF_ERR_SHAPE, "[4, 2]");
  d.M = -2;
  TU_ERR(ctx, stof_gemm_cpu(ctx, &d, at, b, c, bias, out), STOF_ERR_ARG, "M = -2");
  stof_tensor *ts[] = {a, at, b, c, bias, bias4, ints, out};
  for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) stof_tensor_free(ts[i]);
  tu_ctx_free(ctx, &h);
}

/* Failing each allocation of the CPU implementation in turn: NOMEM, nothing leaked. */
static void cpu_out_of_memory_is_clean(void **state) {
  (void)state;
  int succeeded = 0;
  for (long n = 1; n < 8 && !succeeded; n++) {
    tu_heap h;
    stof_ctx *ctx = tu_ctx_new(&h);
    uint64_t seed = 3;
    stof_tensor *a = rnd(ctx, STOF_DTYPE_F32, 2, TU_SHAPE(3, 5), &seed);
    stof_tensor *b = rnd(ctx, STOF_DTYPE_F32, 2, TU_SHAPE(5, 4), &seed);
    stof_tensor *out = NULL;
    TU_OK(ctx, stof_tensor_new(ctx, STOF_DTYPE_F32, 2, TU_SHAPE(3, 4), STOF_DEVICE_CPU, &out));
    stof_gemm_desc d = {.M = 3, .N = 4, .K = 5, .dtype = STOF_DTYPE_F32, .alpha = 1};
    h.fail_at = h.nalloc + n;
    stof_status st = stof_gemm_cpu(ctx, &d, a, b, NULL, NULL, out);
    h.fail_at = 0;
    if (st == STOF_OK) {
      assert_false(h.failed);
      succeeded = 1;
    } else {
      assert_int_equal(st, STOF_ERR_NOMEM);
      assert_true(h.failed);
    }
    stof_ctx_clear_error(ctx);
    stof_tensor_free(a);
    stof_tensor_free(b);
    stof_tensor_free(out);
    tu_ctx_free(ctx, &h);
  }
  assert_true(succeeded);
}

/* Without a GPU a plan is NO_DEVICE (cuBLASLt is not even looked for); a bad description
 * is refused first, anywhere. */
static void plan_needs_a_gpu(void **state) {
  (void)state;
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  stof_gemm_desc d = {.M = 64, .N = 64, .K = 64, .batch = 1, .dtype = STOF_DTYPE_F16, .alpha = 1};
  stof_gemm_plan *p = (stof_gemm_plan *)1;
  stof_gemm_desc bad = d;
  bad.K = 0;
  TU_ERR(ctx, stof_gemm_plan_new(ctx, &bad, 0, &p), STOF_ERR_ARG, "K = 0");
  assert_null(p);
  TU_ERR(ctx, stof_gemm_plan_new(ctx, &d, -1, &p), STOF_ERR_ARG, "algo -1");
  stof_status st = stof_cuda_init(ctx);
  stof_ctx_clear_error(ctx);
  if (st == STOF_ERR_NO_DEVICE) {
    TU_ERR(ctx, stof_gemm_plan_new(ctx, &d, 0, &p), STOF_ERR_NO_DEVICE, "no GPU");
    assert_null(p);
  }
  assert_int_equal(stof_gemm_plan_nalgo(NULL), 0);
  assert_int_equal(stof_gemm_plan_workspace(NULL), 0);
  assert_int_equal(stof_gemm_plan_run(NULL, NULL, 0, 0, 0, 0, 0, 0, 0), STOF_ERR_ARG);
  stof_gemm_plan_free(NULL);
  tu_ctx_free(ctx, &h);
}

int run_gemm_tests(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(cpu_matches_naive_loop_for_every_epilogue_and_layout),
      cmocka_unit_test(cpu_epilogues_are_relu_and_tanh_gelu),
      cmocka_unit_test(cpu_batch_with_padded_and_shared_operands),
      cmocka_unit_test(check_rejects_bad_descriptions),
      cmocka_unit_test(cpu_rejects_bad_tensors),
      cmocka_unit_test(cpu_out_of_memory_is_clean),
      cmocka_unit_test(plan_needs_a_gpu),
  };
  return cmocka_run_group_tests_name("gemm", tests, NULL, NULL);
}
