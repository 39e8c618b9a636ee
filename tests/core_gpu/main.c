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

/* ---------------------------------------------------------------- streams and graphs */

/* x, y (and z) device buffers of n floats, with x's values on the host. */
typedef struct bufs {
  int n;
  float *x;
  uint64_t dx, dy, dz;
} bufs;

static void bufs_new(stof_ctx *ctx, bufs *b, int n, uint64_t seed) {
  b->n = n;
  b->x = malloc(sizeof(float) * (size_t)n);
  assert_non_null(b->x);
  for (int i = 0; i < n; i++) b->x[i] = (float)tu_uniform(&seed, -1, 1);
  TU_OK(ctx, stof_cuda_malloc(ctx, sizeof(float) * (size_t)n, &b->dx));
  TU_OK(ctx, stof_cuda_malloc(ctx, sizeof(float) * (size_t)n, &b->dy));
  TU_OK(ctx, stof_cuda_malloc(ctx, sizeof(float) * (size_t)n, &b->dz));
  TU_OK(ctx, stof_cuda_htod(ctx, b->dx, b->x, sizeof(float) * (size_t)n));
}

static void bufs_free(stof_ctx *ctx, bufs *b) {
  stof_cuda_mem_free(ctx, b->dx);
  stof_cuda_mem_free(ctx, b->dy);
  stof_cuda_mem_free(ctx, b->dz);
  free(b->x);
}

static uint32_t bits_of(float v) {
  uint32_t b;
  memcpy(&b, &v, sizeof b);
  return b;
}

/* Launches saxpy(a, x, y) over n elements (on the context's current stream). */
static stof_status launch_saxpy(stof_ctx *ctx, stof_cuda_kernel *k, float a, uint64_t x, uint64_t y,
                                int n) {
  void *args[] = {&a, &x, &y, &n};
  unsigned grid[3] = {(unsigned)(n + 255) / 256, 1, 1}, block[3] = {256, 1, 1};
  return stof_cuda_launch(ctx, k, grid, block, 0, args);
}

/* Checks got[i] == a * x[i] + y0 (as the GPU's fused multiply-add computes it). */
static void check_saxpy(const char *what, const float *got, const float *x, float a, float y0, int n) {
  for (int i = 0; i < n; i++) {
    float want = fmaf(a, x[i], y0);
    if (!(fabsf(got[i] - want) <= 1e-6f * (fabsf(a * x[i]) + fabsf(y0))))
      fail_msg("%s: element %d = %.9g, want %.9g", what, i, got[i], want);
  }
}

static void saxpy_on_a_created_stream(void **state) {
  fixture *f = gpu(state);
  stof_ctx *ctx = f->ctx;
  const int n = 100003;
  bufs b;
  bufs_new(ctx, &b, n, 11);
  stof_cuda_module *m = load(f, saxpy_src, "saxpy.cu");
  stof_cuda_kernel *k = NULL;
  TU_OK(ctx, stof_cuda_module_kernel(m, "saxpy", &k));
  stof_cuda_stream *s = NULL;
  TU_OK(ctx, stof_cuda_stream_new(ctx, &s));
  assert_non_null(s);
  assert_non_null(stof_cuda_stream_handle(s));
  assert_null(stof_cuda_stream_handle(NULL));
  assert_null(stof_cuda_current_stream(ctx));
  stof_cuda_set_stream(ctx, s);
  assert_ptr_equal(stof_cuda_current_stream(ctx), s);

  /* y = 0.25 by memset, then y = -1.5 x + y, a timer around it, all on s */
  float *y = malloc(sizeof(float) * (size_t)n);
  assert_non_null(y);
  for (int i = 0; i < n; i++) y[i] = NAN;
  stof_cuda_timer *t = NULL;
  TU_OK(ctx, stof_cuda_timer_new(ctx, &t));
  TU_OK(ctx, stof_cuda_timer_start(t));
  TU_OK(ctx, stof_cuda_memset32(ctx, b.dy, bits_of(0.25f), (size_t)n));
  TU_OK(ctx, launch_saxpy(ctx, k, -1.5f, b.dx, b.dy, n));
  float ms = -1;
  TU_OK(ctx, stof_cuda_timer_stop(t, &ms));
  assert_true(ms >= 0);
  TU_OK(ctx, stof_cuda_dtoh_async(ctx, y, b.dy, sizeof(float) * (size_t)n));
  TU_OK(ctx, stof_cuda_stream_synchronize(s));
  check_saxpy("saxpy on a stream", y, b.x, -1.5f, 0.25f, n);

  /* async device copy and a byte memset, then the synchronous copy back (ordered on s) */
  TU_OK(ctx, stof_cuda_memset8(ctx, b.dz, 0xff, sizeof(float) * (size_t)n));
  TU_OK(ctx, stof_cuda_dtod_async(ctx, b.dz, b.dy, sizeof(float) * (size_t)(n - 1)));
  for (int i = 0; i < n; i++) y[i] = 0;
  TU_OK(ctx, stof_cuda_dtoh(ctx, y, b.dz, sizeof(float) * (size_t)n));
  check_saxpy("copied on a stream", y, b.x, -1.5f, 0.25f, n - 1);
  assert_true(bits_of(y[n - 1]) == 0xffffffffu);

  size_t fr = 0, tot = 0;
  TU_OK(ctx, stof_cuda_mem_get_info(ctx, &fr, &tot));
  print_message("device memory: %zu MiB free of %zu MiB; saxpy of %d on a stream: %.3f ms\n",
                fr >> 20, tot >> 20, n, ms);
  assert_true(tot >= ((size_t)1 << 30) && fr > 0 && fr <= tot);

  stof_cuda_timer_free(t);
  stof_cuda_stream_free(s); /* the current stream: the context falls back to the default */
  assert_null(stof_cuda_current_stream(ctx));
  stof_cuda_module_free(m);
  bufs_free(ctx, &b);
  free(y);
}

/* A launch while the current stream is being captured is recorded, not run: so it went to
 * the current stream (a launch on the default stream would have run at once). */
static void launch_uses_the_current_stream(void **state) {
  fixture *f = gpu(state);
  stof_ctx *ctx = f->ctx;
  const int n = 4099;
  bufs b;
  bufs_new(ctx, &b, n, 12);
  stof_cuda_module *m = load(f, saxpy_src, "saxpy.cu");
  stof_cuda_kernel *k = NULL;
  TU_OK(ctx, stof_cuda_module_kernel(m, "saxpy", &k));
  float *y = malloc(sizeof(float) * (size_t)n);
  assert_non_null(y);
  TU_OK(ctx, stof_cuda_memset32(ctx, b.dy, bits_of(2.0f), (size_t)n)); /* default stream */
  TU_OK(ctx, stof_cuda_synchronize(ctx));

  stof_cuda_stream *s = NULL;
  stof_cuda_graph *g = NULL;
  TU_OK(ctx, stof_cuda_stream_new(ctx, &s));
  stof_cuda_set_stream(ctx, s);
  TU_OK(ctx, stof_cuda_capture_begin(ctx, s));
  TU_OK(ctx, launch_saxpy(ctx, k, 3.0f, b.dx, b.dy, n));
  TU_OK(ctx, stof_cuda_capture_end(ctx, s, &g));
  stof_cuda_set_stream(ctx, NULL);
  TU_OK(ctx, stof_cuda_synchronize(ctx));
  TU_OK(ctx, stof_cuda_dtoh(ctx, y, b.dy, sizeof(float) * (size_t)n));
  for (int i = 0; i < n; i++)
    if (y[i] != 2.0f) fail_msg("the launch ran outside the capture: y[%d] = %g", i, y[i]);

  /* replayed on the default stream (NULL: the current one, which is the default again) */
  TU_OK(ctx, stof_cuda_graph_launch(g, NULL));
  TU_OK(ctx, stof_cuda_dtoh(ctx, y, b.dy, sizeof(float) * (size_t)n));
  check_saxpy("the captured launch", y, b.x, 3.0f, 2.0f, n);

  stof_cuda_graph_free(g);
  stof_cuda_stream_free(s);
  stof_cuda_module_free(m);
  bufs_free(ctx, &b);
  free(y);
}

/* memset y = 1, y = 2 x + y, memset z = 0.5, z = 3 y + z: captured once, replayed on three
 * inputs copied into x between replays. */
static void graph_of_launches_and_memsets_replays(void **state) {
  fixture *f = gpu(state);
  stof_ctx *ctx = f->ctx;
  const int n = 65537;
  bufs b;
  bufs_new(ctx, &b, n, 13);
  stof_cuda_module *m = load(f, saxpy_src, "saxpy.cu");
  stof_cuda_kernel *k = NULL;
  TU_OK(ctx, stof_cuda_module_kernel(m, "saxpy", &k));
  float *z = malloc(sizeof(float) * (size_t)n);
  assert_non_null(z);
  stof_cuda_stream *s = NULL;
  TU_OK(ctx, stof_cuda_stream_new(ctx, &s));
  stof_cuda_set_stream(ctx, s);
  TU_OK(ctx, stof_cuda_memset32(ctx, b.dz, 0x7fc00000u, (size_t)n)); /* NaN */
  TU_OK(ctx, stof_cuda_stream_synchronize(s));

  stof_cuda_graph *g = NULL;
  TU_OK(ctx, stof_cuda_capture_begin(ctx, s));
  TU_OK(ctx, stof_cuda_memset32(ctx, b.dy, bits_of(1.0f), (size_t)n));
  TU_OK(ctx, launch_saxpy(ctx, k, 2.0f, b.dx, b.dy, n));
  TU_OK(ctx, stof_cuda_memset32(ctx, b.dz, bits_of(0.5f), (size_t)n));
  TU_OK(ctx, launch_saxpy(ctx, k, 3.0f, b.dy, b.dz, n));
  TU_OK(ctx, stof_cuda_capture_end(ctx, s, &g));
  assert_non_null(g);
  TU_OK(ctx, stof_cuda_dtoh(ctx, z, b.dz, sizeof(float) * (size_t)n));
  for (int i = 0; i < n; i++)
    if (!isnan(z[i])) fail_msg("the capture ran its work: z[%d] = %g", i, z[i]);

  uint64_t seed = 14;
  for (int r = 0; r < 3; r++) {
    if (r > 0) { /* new input, same buffer */
      for (int i = 0; i < n; i++) b.x[i] = (float)tu_uniform(&seed, -4, 4);
      TU_OK(ctx, stof_cuda_htod(ctx, b.dx, b.x, sizeof(float) * (size_t)n));
    }
    TU_OK(ctx, stof_cuda_memset32(ctx, b.dz, 0x7fc00000u, (size_t)n)); /* poison */
    TU_OK(ctx, stof_cuda_graph_launch(g, s));
    TU_OK(ctx, stof_cuda_dtoh(ctx, z, b.dz, sizeof(float) * (size_t)n));
    for (int i = 0; i < n; i++) {
      float y = fmaf(2.0f, b.x[i], 1.0f), want = fmaf(3.0f, y, 0.5f);
      if (!(fabsf(z[i] - want) <= 1e-6f * (fabsf(3.0f * y) + 0.5f)))
        fail_msg("replay %d: z[%d] = %.9g, want %.9g (x %.9g)", r, i, z[i], want, b.x[i]);
    }
  }
  stof_cuda_graph_free(g);
  stof_cuda_set_stream(ctx, NULL);
  stof_cuda_stream_free(s);
  stof_cuda_module_free(m);
  bufs_free(ctx, &b);
  free(z);
}

/* A synchronising call during a capture fails, capture_end reports it and frees what the
 * capture made, and the stream then works as before. */
static void illegal_operation_in_capture_is_reported(void **state) {
  fixture *f = gpu(state);
  stof_ctx *ctx = f->ctx;
  const int n = 1031;
  bufs b;
  bufs_new(ctx, &b, n, 15);
  stof_cuda_module *m = load(f, saxpy_src, "saxpy.cu");
  stof_cuda_kernel *k = NULL;
  TU_OK(ctx, stof_cuda_module_kernel(m, "saxpy", &k));
  float *y = malloc(sizeof(float) * (size_t)n);
  assert_non_null(y);
  stof_cuda_stream *s = NULL;
  TU_OK(ctx, stof_cuda_stream_new(ctx, &s));
  stof_cuda_set_stream(ctx, s);

  /* the default stream cannot be captured; nothing to end on a stream never captured */
  stof_cuda_graph *g = (stof_cuda_graph *)1;
  TU_ERR(ctx, stof_cuda_capture_begin(ctx, NULL), STOF_ERR_ARG, "default stream");
  TU_ERR(ctx, stof_cuda_capture_end(ctx, s, &g), STOF_ERR_ARG, "not being captured");
  assert_null(g);

  /* 1: cuCtxSynchronize; 2: a synchronous copy from pageable memory */
  for (int round = 0; round < 2; round++) {
    TU_OK(ctx, stof_cuda_capture_begin(ctx, s));
    TU_ERR(ctx, stof_cuda_capture_begin(ctx, s), STOF_ERR_ARG, "already");
    TU_OK(ctx, launch_saxpy(ctx, k, 1.0f, b.dx, b.dy, n));
    stof_status st = round == 0 ? stof_cuda_synchronize(ctx)
                                : stof_cuda_htod(ctx, b.dy, y, sizeof(float) * (size_t)n);
    assert_int_equal(st, STOF_ERR_CUDA);
    print_message("round %d, the illegal call: %s\n", round, stof_ctx_message(ctx));
    TU_MSG(ctx, "CAPTURE");
    stof_ctx_clear_error(ctx);
    g = (stof_cuda_graph *)1;
    st = stof_cuda_capture_end(ctx, s, &g);
    assert_int_equal(st, STOF_ERR_CUDA);
    print_message("round %d, capture_end: %s\n", round, stof_ctx_message(ctx));
    TU_MSG(ctx, "cuStreamEndCapture");
    if (round == 0)
      TU_MSG(ctx, "cuCtxSynchronize");
    else
      TU_MSG_ANY(ctx, "cuMemcpyHtoDAsync_v2", "cuStreamSynchronize");
    assert_null(g);
    stof_ctx_clear_error(ctx);

    /* the stream runs work again */
    TU_OK(ctx, stof_cuda_memset32(ctx, b.dy, bits_of(-0.5f), (size_t)n));
    TU_OK(ctx, launch_saxpy(ctx, k, 4.0f, b.dx, b.dy, n));
    TU_OK(ctx, stof_cuda_stream_synchronize(s));
    TU_OK(ctx, stof_cuda_dtoh(ctx, y, b.dy, sizeof(float) * (size_t)n));
    check_saxpy("after the failed capture", y, b.x, 4.0f, -0.5f, n);
  }

  /* a stream freed while capturing ends its capture */
  TU_OK(ctx, stof_cuda_capture_begin(ctx, s));
  TU_OK(ctx, launch_saxpy(ctx, k, 1.0f, b.dx, b.dy, n));
  stof_cuda_stream_free(s);
  assert_null(stof_cuda_current_stream(ctx));
  TU_OK(ctx, stof_cuda_synchronize(ctx)); /* no capture left open on this thread */
  stof_cuda_module_free(m);
  bufs_free(ctx, &b);
  free(y);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(props_are_sane, setup, teardown),
      cmocka_unit_test_setup_teardown(htod_dtoh_round_trip, setup, teardown),
      cmocka_unit_test_setup_teardown(saxpy_matches_cpu, setup, teardown),
      cmocka_unit_test_setup_teardown(launch_with_100k_dynamic_smem, setup, teardown),
      cmocka_unit_test_setup_teardown(missing_kernel_is_not_found, setup, teardown),
      cmocka_unit_test_setup_teardown(bad_image_is_a_cuda_error, setup, teardown),
      cmocka_unit_test_setup_teardown(saxpy_on_a_created_stream, setup, teardown),
      cmocka_unit_test_setup_teardown(launch_uses_the_current_stream, setup, teardown),
      cmocka_unit_test_setup_teardown(graph_of_launches_and_memsets_replays, setup, teardown),
      cmocka_unit_test_setup_teardown(illegal_operation_in_capture_is_reported, setup, teardown),
  };
  return cmocka_run_group_tests_name("core_gpu", tests, NULL, NULL) ? 1 : 0;
}
