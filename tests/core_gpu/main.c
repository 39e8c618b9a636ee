/*
 * test_core_gpu: the CUDA runtime on a real GPU (CTest label gpu). Every test skips when
 * stof_cuda_init says STOF_ERR_NO_DEVICE, so the executable passes on machines without
 * one. Kernels are compiled by NVRTC for the device's own arch; results are compared with
 * CPU references on random inputs, with outputs poisoned first.
 */
#include "../core/testutil.h"

#include <stdio.h>

typedef struct fixture {
  tu_heap heap;
  stof_ctx *ctx;
  stof_cuda_props props;
  char arch[32];
} fixture;

static int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  if (!f) return -1;
  f->ctx = tu_ctx_new(&f->heap);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  tu_ctx_free(f->ctx, &f->heap);
  free(f);
  return 0;
}

/* The fixture with the GPU ready and its props read; skips the test without a GPU. */
static fixture *gpu(void **state) {
  fixture *f = *state;
  stof_status st = stof_cuda_init(f->ctx);
  if (st == STOF_ERR_NO_DEVICE) {
    print_message("skipping: %s\n", stof_ctx_message(f->ctx));
    stof_ctx_clear_error(f->ctx);
    skip();
  }
  TU_OK(f->ctx, st);
  TU_OK(f->ctx, stof_cuda_props_get(f->ctx, &f->props));
  snprintf(f->arch, sizeof f->arch, "sm_%d%d", f->props.cc_major, f->props.cc_minor);
  return f;
}

/* Compiles src for the device and loads it. Owned module. */
static stof_cuda_module *load(fixture *f, const char *src, const char *name) {
  void *cubin = NULL;
  size_t size = 0;
  TU_OK(f->ctx, stof_cuda_compile(f->ctx, src, name, f->arch, 0, NULL, &cubin, &size));
  stof_cuda_module *m = NULL;
  stof_status st = stof_cuda_module_load(f->ctx, cubin, size, &m);
  stof_ctx_dealloc(f->ctx, cubin, size);
  TU_OK(f->ctx, st);
  assert_non_null(m);
  return m;
}

static void props_are_sane(void **state) {
  fixture *f = gpu(state);
  print_message("device: %s, sm_%d%d, %d SMs, %zu B smem/block opt-in, %zu MiB\n",
                f->props.name, f->props.cc_major, f->props.cc_minor, f->props.sm_count,
                f->props.smem_per_block_optin, f->props.total_mem >> 20);
  assert_true(f->props.sm_count > 0);
  assert_true(f->props.cc_major >= 7);
  assert_true(f->props.cc_minor >= 0 && f->props.cc_minor < 10);
  assert_true(f->props.name[0] != 0);
  assert_true(f->props.smem_per_block_optin >= 48 * 1024);
  assert_true(f->props.total_mem >= (size_t)1 << 30);
}

static void htod_dtoh_round_trip(void **state) {
  fixture *f = gpu(state);
  stof_ctx *ctx = f->ctx;
  const size_t n = (1u << 20) + 13; /* odd on purpose */
  unsigned char *src = malloc(n), *dst = malloc(n);
  assert_non_null(src);
  assert_non_null(dst);
  uint64_t seed = 42;
  for (size_t i = 0; i < n; i++) src[i] = (unsigned char)tu_splitmix(&seed);
  memset(dst, 0xA5, n);

  uint64_t a = 0, b = 0;
  TU_OK(ctx, stof_cuda_malloc(ctx, n, &a));
  TU_OK(ctx, stof_cuda_malloc(ctx, n, &b));
  assert_true(a != 0 && b != 0 && a != b);
  TU_OK(ctx, stof_cuda_htod(ctx, a, src, n));
  TU_OK(ctx, stof_cuda_dtod(ctx, b, a, n));
  TU_OK(ctx, stof_cuda_dtoh(ctx, dst, b, n));
  TU_OK(ctx, stof_cuda_synchronize(ctx));
  assert_memory_equal(src, dst, n);

  /* size 0 allocates nothing and copies of 0 bytes do nothing */
  uint64_t z = 1;
  TU_OK(ctx, stof_cuda_malloc(ctx, 0, &z));
  assert_true(z == 0);
  TU_OK(ctx, stof_cuda_htod(ctx, a, src, 0));

  stof_cuda_mem_free(ctx, a);
  stof_cuda_mem_free(ctx, b);
  stof_cuda_mem_free(ctx, z);
  free(src);
  free(dst);
}

static const char saxpy_src[] =
    "extern \"C\" __global__ void saxpy(float a, const float *x, float *y, int n) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n) y[i] = a * x[i] + y[i];\n"
    "}\n";

static void saxpy_matches_cpu(void **state) {
  fixture *f = gpu(state);
  stof_ctx *ctx = f->ctx;
  const int n = 1000003, pad = 64; /* odd size; pad sentinels catch writes past n */
  const float a = 1.7f, sentinel = 12345.0f;
  float *x = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * (n + pad));
  float *out = malloc(sizeof(float) * (n + pad));
  assert_non_null(x);
  assert_non_null(y);
  assert_non_null(out);
  uint64_t seed = 7;
  for (int i = 0; i < n; i++) {
    x[i] = (float)tu_uniform(&seed, -1, 1);
    y[i] = (float)tu_uniform(&seed, -1, 1);
  }
  for (int i = n; i < n + pad; i++) y[i] = sentinel;

  stof_cuda_module *m = load(f, saxpy_src, "saxpy.cu");
  stof_cuda_kernel *k = NULL, *k2 = NULL;
  TU_OK(ctx, stof_cuda_module_kernel(m, "saxpy", &k));
  TU_OK(ctx, stof_cuda_module_kernel(m, "saxpy", &k2));
  assert_ptr_equal(k, k2); /* looked up once */

  uint64_t dx = 0, dy = 0;
  TU_OK(ctx, stof_cuda_malloc(ctx, sizeof(float) * n, &dx));
  TU_OK(ctx, stof_cuda_malloc(ctx, sizeof(float) * (n + pad), &dy));
  TU_OK(ctx, stof_cuda_htod(ctx, dx, x, sizeof(float) * n));
  TU_OK(ctx, stof_cuda_htod(ctx, dy, y, sizeof(float) * (n + pad)));

  float av = a;
  int nv = n;
  void *args[] = {&av, &dx, &dy, &nv};
  unsigned grid[3] = {(unsigned)(n + 255) / 256, 1, 1}, block[3] = {256, 1, 1};
  TU_OK(ctx, stof_cuda_launch(ctx, k, grid, block, 0, args));
  TU_OK(ctx, stof_cuda_synchronize(ctx));

  for (int i = 0; i < n + pad; i++) out[i] = NAN; /* poison */
  TU_OK(ctx, stof_cuda_dtoh(ctx, out, dy, sizeof(float) * (n + pad)));
  for (int i = 0; i < n; i++) {
    float want = fmaf(a, x[i], y[i]);
    double tol = 1e-6 * (fabs((double)a * x[i]) + fabs((double)y[i]));
    if (isnan(out[i]) || fabs((double)out[i] - want) > tol)
      fail_msg("y[%d] = %.9g, want %.9g (x %.9g, y %.9g)", i, out[i], want, x[i], y[i]);
  }
  for (int i = n; i < n + pad; i++)
    if (out[i] != sentinel) fail_msg("write past the end: y[%d] = %g", i, out[i]);

  stof_cuda_mem_free(ctx, dx);
  stof_cuda_mem_free(ctx, dy);
  stof_cuda_module_free(m);
  free(x);
  free(y);
  free(out);
}

/* Each block fills its dynamic shared memory, then writes it out reversed. */
static const char smem_src[] =
    "extern \"C\" __global__ void smem_reverse(float *out, int nfloat) {\n"
    "  extern __shared__ float buf[];\n"
    "  for (int i = threadIdx.x; i < nfloat; i += blockDim.x)\n"
    "    buf[i] = (float)(blockIdx.x * nfloat + i);\n"
    "  __syncthreads();\n"
    "  for (int i = threadIdx.x; i < nfloat; i += blockDim.x)\n"
    "    out[blockIdx.x * nfloat + i] = buf[nfloat - 1 - i];\n"
    "}\n";

static void launch_with_100k_dynamic_smem(void **state) {
  fixture *f = gpu(state);
  stof_ctx *ctx = f->ctx;
  const unsigned smem = 100 * 1024, nblock = 4;
  if (f->props.smem_per_block_optin < smem) {
    print_message("skipping: %zu B opt-in shared memory\n", f->props.smem_per_block_optin);
    skip();
  }
  const int nfloat = (int)(smem / sizeof(float));
  const size_t total = (size_t)nfloat * nblock;
  float *out = malloc(sizeof(float) * total);
  assert_non_null(out);

  stof_cuda_module *m = load(f, smem_src, "smem_reverse.cu");
  stof_cuda_kernel *k = NULL;
  TU_OK(ctx, stof_cuda_module_kernel(m, "smem_reverse", &k));
  uint64_t d = 0;
  TU_OK(ctx, stof_cuda_malloc(ctx, sizeof(float) * total, &d));
  int nv = nfloat;
  void *args[] = {&d, &nv};
  unsigned grid[3] = {nblock, 1, 1}, block[3] = {256, 1, 1};

  /* more than the device allows: a CUDA error naming the kernel, and no harm done */
  TU_ERR(ctx,
         stof_cuda_launch(ctx, k, grid, block, (unsigned)f->props.smem_per_block_optin + 4096,
                          args),
         STOF_ERR_CUDA, "smem_reverse");

  TU_OK(ctx, stof_cuda_launch(ctx, k, grid, block, smem, args));
  TU_OK(ctx, stof_cuda_synchronize(ctx));
  for (size_t i = 0; i < total; i++) out[i] = NAN;
  TU_OK(ctx, stof_cuda_dtoh(ctx, out, d, sizeof(float) * total));
  for (unsigned b = 0; b < nblock; b++)
    for (int i = 0; i < nfloat; i++) {
      float want = (float)(b * nfloat + (nfloat - 1 - i));
      if (out[(size_t)b * nfloat + i] != want)
        fail_msg("block %u, out[%d] = %g, want %g", b, i, out[(size_t)b * nfloat + i], want);
    }

  stof_cuda_mem_free(ctx, d);
  stof_cuda_module_free(m);
  free(out);
}

static void missing_kernel_is_not_found(void **state) {
  fixture *f = gpu(state);
  stof_ctx *ctx = f->ctx;
  stof_cuda_module *m = load(f, saxpy_src, "saxpy.cu");
  stof_cuda_kernel *k = (stof_cuda_kernel *)1;
  stof_status st = stof_cuda_module_kernel(m, "no_such_kernel", &k);
  assert_true(st == STOF_ERR_NOT_FOUND || st == STOF_ERR_CUDA);
  TU_MSG(ctx, "no_such_kernel");
  assert_null(k);
  stof_ctx_clear_error(ctx);
  stof_cuda_module_free(m);
}

static void bad_image_is_a_cuda_error(void **state) {
  fixture *f = gpu(state);
  stof_ctx *ctx = f->ctx;
  static const char junk[] = "this is neither a cubin nor PTX";
  stof_cuda_module *m = (stof_cuda_module *)1;
  TU_ERR(ctx, stof_cuda_module_load(ctx, junk, sizeof junk - 1, &m), STOF_ERR_CUDA,
         "cuModuleLoadData");
  assert_null(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(props_are_sane, setup, teardown),
      cmocka_unit_test_setup_teardown(htod_dtoh_round_trip, setup, teardown),
      cmocka_unit_test_setup_teardown(saxpy_matches_cpu, setup, teardown),
      cmocka_unit_test_setup_teardown(launch_with_100k_dynamic_smem, setup, teardown),
      cmocka_unit_test_setup_teardown(missing_kernel_is_not_found, setup, teardown),
      cmocka_unit_test_setup_teardown(bad_image_is_a_cuda_error, setup, teardown),
  };
  return cmocka_run_group_tests_name("core_gpu", tests, NULL, NULL) ? 1 : 0;
}
