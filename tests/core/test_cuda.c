/*
 * The CUDA runtime without a GPU: NVRTC compiles to cubins (ELF), compile failures carry
 * the source name and the NVRTC log, and the driver functions report NO_DEVICE (or work,
 * where a GPU exists) without crashing or leaking.
 */
#include "testutil.h"

static const char half_kernel[] =
    "#include <cuda_fp16.h>\n"
    "extern \"C\" __global__ void scale_half(const __half *x, float *y, int n) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n) y[i] = __half2float(x[i] * __float2half(2.0f));\n"
    "}\n";

/* Each test gets a context on a tracking heap (catches leaks and wrong free sizes). */
typedef struct fixture {
  tu_heap heap;
  stof_ctx *ctx;
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

#define CTX(state) (((fixture *)*(state))->ctx)

static void assert_is_cubin(const void *cubin, size_t size) {
  assert_non_null(cubin);
  assert_true(size > 64);
  assert_memory_equal(cubin, "\x7f" "ELF", 4);
}

static void compile_half_kernel_to_cubin(void **state) {
  stof_ctx *ctx = CTX(state);
  static const char *const archs[] = {"sm_90", "sm_80"};
  for (size_t i = 0; i < sizeof archs / sizeof *archs; i++) {
    void *cubin = NULL;
    size_t size = 0;
    TU_OK(ctx, stof_cuda_compile(ctx, half_kernel, "scale_half.cu", archs[i], 0, NULL, &cubin,
                                 &size));
    assert_is_cubin(cubin, size);
    stof_ctx_dealloc(ctx, cubin, size);
  }
  assert_int_equal(stof_ctx_bytes_in_use(ctx), 0);
}

static void compile_sm90a_with_extra_options(void **state) {
  stof_ctx *ctx = CTX(state);
  static const char src[] =
      "#ifndef WIDTH\n#error WIDTH must be defined\n#endif\n"
      "extern \"C\" __global__ void fill(float *y) { y[threadIdx.x] = WIDTH; }\n";
  const char *opts[] = {"-DWIDTH=3", "-lineinfo"};
  void *cubin = NULL;
  size_t size = 0;
  TU_OK(ctx, stof_cuda_compile(ctx, src, "fill.cu", "sm_90a", 2, opts, &cubin, &size));
  assert_is_cubin(cubin, size);
  stof_ctx_dealloc(ctx, cubin, size);

  /* without the option the #error fires */
  TU_ERR(ctx, stof_cuda_compile(ctx, src, "fill.cu", "sm_90a", 0, NULL, &cubin, &size),
         STOF_ERR_COMPILE, "WIDTH must be defined");
  assert_int_equal(stof_ctx_bytes_in_use(ctx), 0);
}

static void compile_syntax_error_reports_name_and_log(void **state) {
  stof_ctx *ctx = CTX(state);
  static const char src[] =
      "extern \"C\" __global__ void broken(float *y) {\n"
      "  y[0] = ;\n"
      "}\n";
  void *cubin = (void *)1;
  size_t size = 7;
  stof_status st = stof_cuda_compile(ctx, src, "broken_kernel.cu", "sm_90", 0, NULL, &cubin,
                                     &size);
  assert_int_equal(st, STOF_ERR_COMPILE);
  assert_int_equal(stof_ctx_status(ctx), STOF_ERR_COMPILE);
  assert_null(cubin);
  assert_int_equal(size, 0);
  TU_MSG(ctx, "NVRTC: compiling broken_kernel.cu for sm_90 failed");
  TU_MSG(ctx, "broken_kernel.cu(2)"); /* the log's location */
  TU_MSG(ctx, "expected an expression");
  stof_ctx_clear_error(ctx);
  assert_int_equal(stof_ctx_bytes_in_use(ctx), 0);
}

static void compile_rejects_bad_arguments(void **state) {
  stof_ctx *ctx = CTX(state);
  void *cubin = NULL;
  size_t size = 0;
  TU_ERR(ctx, stof_cuda_compile(ctx, half_kernel, "k.cu", "compute_90", 0, NULL, &cubin, &size),
         STOF_ERR_ARG, "arch \"compute_90\"");
  TU_ERR(ctx, stof_cuda_compile(ctx, half_kernel, "k.cu", NULL, 0, NULL, &cubin, &size),
         STOF_ERR_ARG, "k.cu");
  TU_ERR(ctx, stof_cuda_compile(ctx, NULL, "k.cu", "sm_90", 0, NULL, &cubin, &size),
         STOF_ERR_ARG, "null source");
  TU_ERR(ctx, stof_cuda_compile(ctx, half_kernel, "k.cu", "sm_90", 1, NULL, &cubin, &size),
         STOF_ERR_ARG, "options");
  assert_null(cubin);
  assert_int_equal(stof_ctx_bytes_in_use(ctx), 0);
}

static void compile_unknown_option_is_a_compile_error(void **state) {
  stof_ctx *ctx = CTX(state);
  const char *opts[] = {"--no-such-option"};
  void *cubin = NULL;
  size_t size = 0;
  TU_ERR(ctx, stof_cuda_compile(ctx, half_kernel, "opt.cu", "sm_90", 1, opts, &cubin, &size),
         STOF_ERR_COMPILE, "NVRTC: compiling opt.cu for sm_90 failed");
  assert_null(cubin);
  /* an arch NVRTC does not know */
  TU_ERR(ctx, stof_cuda_compile(ctx, half_kernel, "opt.cu", "sm_999", 0, NULL, &cubin, &size),
         STOF_ERR_COMPILE, "gpu-architecture");
  assert_int_equal(stof_ctx_bytes_in_use(ctx), 0);
}

/* Failing each host allocation in turn gives NOMEM and leaks nothing; then it succeeds. */
static void compile_out_of_memory_leaks_nothing(void **state) {
  (void)state;
  int succeeded = 0;
  for (long n = 1; n < 16 && !succeeded; n++) {
    tu_heap h;
    stof_ctx *ctx = tu_ctx_new(&h);
    h.fail_at = h.nalloc + n;
    void *cubin = NULL;
    size_t size = 0;
    stof_status st = stof_cuda_compile(ctx, half_kernel, "oom.cu", "sm_90", 0, NULL, &cubin,
                                       &size);
    if (st == STOF_OK) {
      assert_false(h.failed);
      assert_is_cubin(cubin, size);
      stof_ctx_dealloc(ctx, cubin, size);
      succeeded = 1;
    } else {
      assert_true(h.failed);
      assert_int_equal(st, STOF_ERR_NOMEM);
      assert_int_equal(stof_ctx_status(ctx), STOF_ERR_NOMEM);
      assert_null(cubin);
    }
    tu_ctx_free(ctx, &h);
  }
  assert_true(succeeded);
}

static void nvrtc_version_is_positive(void **state) {
  (void)state;
  int v = stof_cuda_nvrtc_version();
  assert_true(v > 0);
  assert_true(v >= 11000); /* major * 1000 + minor * 10 */
  assert_int_equal(v % 10, 0);
}

/* Here (CI) there is no GPU: init and every device function say NO_DEVICE. Where a GPU
 * exists, the same calls work. */
static void device_functions_without_gpu_report_no_device(void **state) {
  stof_ctx *ctx = CTX(state);
  stof_status st = stof_cuda_init(ctx);
  assert_true(st == STOF_OK || st == STOF_ERR_NO_DEVICE);
  uint64_t d = 0;
  if (st == STOF_OK) {
    TU_OK(ctx, stof_cuda_malloc(ctx, 64, &d));
    assert_true(d != 0);
    stof_cuda_mem_free(ctx, d);
    assert_int_equal(stof_ctx_bytes_in_use(ctx), 0);
    return;
  }
  assert_int_equal(stof_ctx_status(ctx), STOF_ERR_NO_DEVICE);
  TU_MSG(ctx, "no GPU: ");
  stof_ctx_clear_error(ctx);

  TU_ERR(ctx, stof_cuda_malloc(ctx, 64, &d), STOF_ERR_NO_DEVICE, "no GPU: ");

  char buf[16] = {0};
  stof_cuda_props props;
  stof_cuda_module *m = NULL;
  unsigned grid[3] = {1, 1, 1}, block[3] = {1, 1, 1};
  assert_int_equal(stof_cuda_init(ctx), STOF_ERR_NO_DEVICE); /* same answer again */
  assert_int_equal(stof_cuda_props_get(ctx, &props), STOF_ERR_NO_DEVICE);
  assert_int_equal(stof_cuda_htod(ctx, 0x1000, buf, sizeof buf), STOF_ERR_NO_DEVICE);
  assert_int_equal(stof_cuda_dtoh(ctx, buf, 0x1000, sizeof buf), STOF_ERR_NO_DEVICE);
  assert_int_equal(stof_cuda_dtod(ctx, 0x1000, 0x2000, sizeof buf), STOF_ERR_NO_DEVICE);
  assert_int_equal(stof_cuda_synchronize(ctx), STOF_ERR_NO_DEVICE);
  assert_int_equal(stof_cuda_module_load(ctx, "\x7f" "ELF....", 8, &m), STOF_ERR_NO_DEVICE);
  assert_null(m);
  TU_ERR(ctx, stof_cuda_launch(ctx, NULL, grid, block, 0, NULL), STOF_ERR_NO_DEVICE, "no GPU");
  stof_cuda_mem_free(ctx, 0x1000); /* ignored, never crashes */
  stof_cuda_module_free(NULL);
  stof_ctx_clear_error(ctx);
  assert_int_equal(stof_ctx_bytes_in_use(ctx), 0);
}

/* Streams, async copies, memsets, memory info, timers and graphs without a GPU: NO_DEVICE
 * from everything that takes a context, STOF_ERR_ARG from what has none to report into,
 * and no crash or leak on NULL handles. */
static void stream_and_graph_functions_without_gpu_report_no_device(void **state) {
  stof_ctx *ctx = CTX(state);
  stof_status st = stof_cuda_init(ctx);
  assert_true(st == STOF_OK || st == STOF_ERR_NO_DEVICE);
  stof_ctx_clear_error(ctx);
  if (st == STOF_OK) return; /* test_core_gpu covers them on a GPU */
  char buf[16] = {0};
  size_t fr = 1, tot = 1;
  stof_cuda_stream *s = (stof_cuda_stream *)1;
  stof_cuda_timer *t = (stof_cuda_timer *)1;
  stof_cuda_graph *g = (stof_cuda_graph *)1;
  TU_ERR(ctx, stof_cuda_stream_new(ctx, &s), STOF_ERR_NO_DEVICE, "no GPU");
  assert_null(s);
  TU_ERR(ctx, stof_cuda_htod_async(ctx, 0x1000, buf, sizeof buf), STOF_ERR_NO_DEVICE, "no GPU");
  TU_ERR(ctx, stof_cuda_dtoh_async(ctx, buf, 0x1000, sizeof buf), STOF_ERR_NO_DEVICE, "no GPU");
  TU_ERR(ctx, stof_cuda_dtod_async(ctx, 0x1000, 0x2000, sizeof buf), STOF_ERR_NO_DEVICE, "no GPU");
  TU_ERR(ctx, stof_cuda_memset8(ctx, 0x1000, 1, 16), STOF_ERR_NO_DEVICE, "no GPU");
  TU_ERR(ctx, stof_cuda_memset16(ctx, 0x1000, 0x7e00, 8), STOF_ERR_NO_DEVICE, "no GPU");
  TU_ERR(ctx, stof_cuda_memset32(ctx, 0x1000, 0x7fc00000u, 4), STOF_ERR_NO_DEVICE, "no GPU");
  TU_ERR(ctx, stof_cuda_mem_get_info(ctx, &fr, &tot), STOF_ERR_NO_DEVICE, "no GPU");
  assert_true(fr == 1 && tot == 1); /* untouched */
  TU_ERR(ctx, stof_cuda_timer_new(ctx, &t), STOF_ERR_NO_DEVICE, "no GPU");
  assert_null(t);
  TU_ERR(ctx, stof_cuda_capture_begin(ctx, NULL), STOF_ERR_NO_DEVICE, "no GPU");
  TU_ERR(ctx, stof_cuda_capture_end(ctx, NULL, &g), STOF_ERR_NO_DEVICE, "no GPU");
  assert_null(g);
  /* no context to report into: a bare status */
  assert_int_equal(stof_cuda_graph_launch(NULL, NULL), STOF_ERR_ARG);
  assert_int_equal(stof_cuda_stream_synchronize(NULL), STOF_ERR_ARG);
  assert_null(stof_cuda_stream_handle(NULL));
  stof_cuda_set_stream(ctx, NULL);
  assert_null(stof_cuda_current_stream(ctx));
  stof_cuda_stream_free(NULL);
  stof_cuda_graph_free(NULL);
  stof_cuda_timer_free(NULL);
  assert_int_equal(stof_ctx_status(ctx), STOF_OK);
  assert_int_equal(stof_ctx_bytes_in_use(ctx), 0);
}

int run_cuda_tests(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(compile_half_kernel_to_cubin, setup, teardown),
      cmocka_unit_test_setup_teardown(compile_sm90a_with_extra_options, setup, teardown),
      cmocka_unit_test_setup_teardown(compile_syntax_error_reports_name_and_log, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(compile_rejects_bad_arguments, setup, teardown),
      cmocka_unit_test_setup_teardown(compile_unknown_option_is_a_compile_error, setup,
                                      teardown),
      cmocka_unit_test(compile_out_of_memory_leaks_nothing),
      cmocka_unit_test(nvrtc_version_is_positive),
      cmocka_unit_test_setup_teardown(device_functions_without_gpu_report_no_device, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(stream_and_graph_functions_without_gpu_report_no_device,
                                      setup, teardown),
  };
  return cmocka_run_group_tests_name("cuda", tests, NULL, NULL);
}
