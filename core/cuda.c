/*
 * The CUDA runtime: NVRTC compilation (linked, works without a GPU) and the driver API
 * (libcuda.so.1 opened with dlopen on first use, never linked).
 *
 * Invariants:
 *  - The driver is opened, initialised and device 0's primary context retained exactly
 *    once per process (pthread_once); the outcome (OK, NO_DEVICE or CUDA, with its
 *    message) is kept in `drv` and re-reported into the caller's context by every entry
 *    point, so without a GPU every device function returns the same status.
 *  - Every device entry point makes the primary context current on the calling thread
 *    first (cuCtxSetCurrent is cheap). The primary context is never released.
 *  - Driver functions are called only through the pointers in `drv`, typed from the
 *    declarations in <cuda.h>; the _v2 names are resolved where cuda.h maps to them.
 *    Optional entry points (OPTIONAL_DRIVER_SYMBOLS, newer than the oldest driver we run
 *    on) may be NULL; their wrappers then fail with STOF_ERR_UNSUPPORTED.
 *  - A module remembers its ctx and owns its kernels (a list, each looked up once);
 *    stof_cuda_module_free releases them and unloads the module. Like the ctx, a module
 *    is used by one thread at a time.
 *  - Host memory goes through the ctx's allocator; device memory failures are
 *    STOF_ERR_CUDA (never the sticky NOMEM, which means host memory).
 *  - Streams: launches, memsets, async copies and timers go to the ctx's current stream
 *    (ctx->stream, borrowed; NULL is the legacy default stream, so code that never sets
 *    one behaves as before). Synchronous copies are ordered after that stream's work.
 *    Created streams are non-blocking: the legacy default stream does not order them.
 *  - Graphs come from thread-local stream capture; while this thread has a capture open,
 *    the first driver failure is kept (capture_cause) so that capture_end can say what
 *    invalidated the capture.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda.h>
#include <nvrtc.h>

#include <stof/core.h>

#include "core_int.h"

/* ---------------------------------------------------------------- the driver */

#define DEFAULT_DYNAMIC_SMEM (48u * 1024u) /* above this a kernel must opt in */

/* X(field, symbol): one line per driver entry point. */
#define DRIVER_SYMBOLS(X)                           \
  X(init, cuInit)                                   \
  X(device_get, cuDeviceGet)                        \
  X(device_get_count, cuDeviceGetCount)             \
  X(device_get_attribute, cuDeviceGetAttribute)     \
  X(device_get_name, cuDeviceGetName)               \
  X(device_total_mem, cuDeviceTotalMem_v2)          \
  X(primary_ctx_retain, cuDevicePrimaryCtxRetain)   \
  X(ctx_set_current, cuCtxSetCurrent)               \
  X(mem_alloc, cuMemAlloc_v2)                       \
  X(mem_free, cuMemFree_v2)                         \
  X(memcpy_htod, cuMemcpyHtoD_v2)                   \
  X(memcpy_dtoh, cuMemcpyDtoH_v2)                   \
  X(memcpy_dtod, cuMemcpyDtoD_v2)                   \
  X(ctx_synchronize, cuCtxSynchronize)              \
  X(module_load_data, cuModuleLoadData)             \
  X(module_unload, cuModuleUnload)                  \
  X(module_get_function, cuModuleGetFunction)       \
  X(launch_kernel, cuLaunchKernel)                  \
  X(func_set_attribute, cuFuncSetAttribute)         \
  X(get_error_name, cuGetErrorName)                 \
  X(get_error_string, cuGetErrorString)             \
  X(memset_d8_async, cuMemsetD8Async)               \
  X(memset_d16_async, cuMemsetD16Async)             \
  X(memset_d32_async, cuMemsetD32Async)             \
  X(memcpy_htod_async, cuMemcpyHtoDAsync_v2)        \
  X(memcpy_dtoh_async, cuMemcpyDtoHAsync_v2)        \
  X(memcpy_dtod_async, cuMemcpyDtoDAsync_v2)        \
  X(stream_create, cuStreamCreate)                  \
  X(stream_destroy, cuStreamDestroy_v2)             \
  X(stream_synchronize, cuStreamSynchronize)        \
  X(mem_get_info, cuMemGetInfo_v2)                  \
  X(event_create, cuEventCreate)                    \
  X(event_record, cuEventRecord)                    \
  X(event_synchronize, cuEventSynchronize)          \
  X(event_elapsed, cuEventElapsedTime)              \
  X(event_destroy, cuEventDestroy_v2)

/* Entry points a driver may lack: NULL then (CUDA 12 drivers have them). The versioned
 * names are spelled out: dlsym of the plain name would find the old ABI. */
#if CUDA_VERSION >= 12000
#define OPTIONAL_TMA_SYMBOLS(X) X(tensor_map_encode_tiled, cuTensorMapEncodeTiled)
#else
#define OPTIONAL_TMA_SYMBOLS(X)
#endif
#define OPTIONAL_DRIVER_SYMBOLS(X)                      \
  OPTIONAL_TMA_SYMBOLS(X)                               \
  X(stream_begin_capture, cuStreamBeginCapture_v2)      \
  X(stream_end_capture, cuStreamEndCapture)             \
  X(graph_instantiate, cuGraphInstantiateWithFlags)     \
  X(graph_launch, cuGraphLaunch)                        \
  X(graph_exec_destroy, cuGraphExecDestroy)             \
  X(graph_destroy, cuGraphDestroy)

static struct {
  void *lib;
  stof_status status; /* of opening and initialising, reported by every entry point */
  char message[512];
  CUdevice device;
  CUcontext primary;
#define DRV_FIELD(field, sym) __typeof__(sym) *field;
  DRIVER_SYMBOLS(DRV_FIELD)
  OPTIONAL_DRIVER_SYMBOLS(DRV_FIELD)
#undef DRV_FIELD
} drv;

static pthread_once_t drv_once = PTHREAD_ONCE_INIT;

/* Names of the errors cuInit gives on machines without a usable GPU, for drivers (such
 * as the toolkit's stub) whose cuGetErrorName does not answer. */
static const char *init_error_name(CUresult r) {
  switch (r) {
  case CUDA_ERROR_NOT_INITIALIZED: return "CUDA_ERROR_NOT_INITIALIZED";
  case CUDA_ERROR_STUB_LIBRARY: return "CUDA_ERROR_STUB_LIBRARY";
  case CUDA_ERROR_NO_DEVICE: return "CUDA_ERROR_NO_DEVICE";
  case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH: return "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH";
  case CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE: return "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE";
  case CUDA_ERROR_UNKNOWN: return "CUDA_ERROR_UNKNOWN";
  default: return NULL;
  }
}

/* "CUDA_ERROR_OUT_OF_MEMORY (out of memory)", or the number when the driver has no name. */
static void cu_describe(CUresult r, char *buf, size_t n) {
  const char *name = NULL, *text = NULL;
  if (drv.get_error_name && drv.get_error_name(r, &name) != CUDA_SUCCESS) name = NULL;
  if (drv.get_error_string && drv.get_error_string(r, &text) != CUDA_SUCCESS) text = NULL;
  if (!name) name = init_error_name(r);
  if (name && text)
    snprintf(buf, n, "%s (%s)", name, text);
  else if (name)
    snprintf(buf, n, "%s", name);
  else
    snprintf(buf, n, "CUDA error %d", (int)r);
}

static void drv_fail(stof_status status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void drv_fail(stof_status status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(drv.message, sizeof drv.message, fmt, ap);
  va_end(ap);
  drv.status = status;
}

static void drv_open(void) {
  char why[256];
  drv.status = STOF_ERR_INTERNAL; /* every path below sets the outcome */
  drv.lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!drv.lib) {
    const char *e = dlerror();
    drv_fail(STOF_ERR_NO_DEVICE, "no GPU: libcuda.so.1 not found (%s)", e ? e : "dlopen failed");
    return;
  }
#define DRV_LOAD(field, sym)                                                             \
  drv.field = (__typeof__(sym) *)dlsym(drv.lib, #sym);                                   \
  if (!drv.field) {                                                                      \
    drv_fail(STOF_ERR_NO_DEVICE, "no GPU: libcuda.so.1 has no %s (driver too old?)", #sym); \
    return;                                                                              \
  }
  DRIVER_SYMBOLS(DRV_LOAD)
#undef DRV_LOAD
#define DRV_LOAD_OPTIONAL(field, sym) drv.field = (__typeof__(sym) *)dlsym(drv.lib, #sym);
  OPTIONAL_DRIVER_SYMBOLS(DRV_LOAD_OPTIONAL)
#undef DRV_LOAD_OPTIONAL

  CUresult r = drv.init(0);
  if (r != CUDA_SUCCESS) {
    cu_describe(r, why, sizeof why);
    drv_fail(STOF_ERR_NO_DEVICE, "no GPU: cuInit failed: %s", why);
    return;
  }
  int count = 0;
  r = drv.device_get_count(&count);
  if (r != CUDA_SUCCESS) {
    cu_describe(r, why, sizeof why);
    drv_fail(STOF_ERR_NO_DEVICE, "no GPU: cuDeviceGetCount failed: %s", why);
    return;
  }
  if (count <= 0) {
    drv_fail(STOF_ERR_NO_DEVICE, "no GPU: the CUDA driver reports no device");
    return;
  }
  r = drv.device_get(&drv.device, 0);
  if (r != CUDA_SUCCESS) {
    cu_describe(r, why, sizeof why);
    drv_fail(STOF_ERR_CUDA, "CUDA: cuDeviceGet(0) failed: %s", why);
    return;
  }
  r = drv.primary_ctx_retain(&drv.primary, drv.device);
  if (r != CUDA_SUCCESS) {
    cu_describe(r, why, sizeof why);
    drv_fail(STOF_ERR_CUDA, "CUDA: cuDevicePrimaryCtxRetain(device 0) failed: %s", why);
    return;
  }
  drv.status = STOF_OK;
}

/* Captures open on this thread, and the first driver failure since the first began. */
static _Thread_local int capture_depth;
static _Thread_local char capture_cause[700];

/* Records a driver failure: "CUDA: <fn> failed <what>: <NAME> (<text>)". */
static stof_status cu_error(stof_ctx *ctx, CUresult r, const char *fn, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static stof_status cu_error(stof_ctx *ctx, CUresult r, const char *fn, const char *fmt, ...) {
  char what[384], why[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  cu_describe(r, why, sizeof why);
  if (capture_depth > 0 && !capture_cause[0])
    snprintf(capture_cause, sizeof capture_cause, "%s%s%s: %s", fn, what[0] ? " " : "", what,
             why);
  return stof_ctx_error(ctx, STOF_ERR_CUDA, "CUDA: %s failed%s%s: %s", fn, what[0] ? " " : "",
                        what, why);
}

/* Opens the driver on first use and makes the primary context current on this thread. */
static stof_status drv_ready(stof_ctx *ctx) {
  pthread_once(&drv_once, drv_open);
  if (drv.status != STOF_OK) return stof_ctx_error(ctx, drv.status, "%s", drv.message);
  CUresult r = drv.ctx_set_current(drv.primary);
  if (r != CUDA_SUCCESS) return cu_error(ctx, r, "cuCtxSetCurrent", "(primary context)");
  return STOF_OK;
}

stof_status stof_cuda_init(stof_ctx *ctx) { return drv_ready(ctx); }

stof_status stof_cuda_props_get(stof_ctx *ctx, stof_cuda_props *out) {
  stof_status st = drv_ready(ctx);
  if (st) return st;
  if (!out) return stof_ctx_error(ctx, STOF_ERR_ARG, "cuda props: out is NULL");
  stof_cuda_props p;
  memset(&p, 0, sizeof p);
  static const struct {
    CUdevice_attribute attr;
    const char *name;
  } attrs[] = {
      {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, "COMPUTE_CAPABILITY_MAJOR"},
      {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, "COMPUTE_CAPABILITY_MINOR"},
      {CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, "MULTIPROCESSOR_COUNT"},
      {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN"},
  };
  int val[4];
  for (int i = 0; i < 4; i++) {
    CUresult r = drv.device_get_attribute(&val[i], attrs[i].attr, drv.device);
    if (r != CUDA_SUCCESS)
      return cu_error(ctx, r, "cuDeviceGetAttribute", "(%s)", attrs[i].name);
  }
  p.cc_major = val[0];
  p.cc_minor = val[1];
  p.sm_count = val[2];
  p.smem_per_block_optin = (size_t)val[3];
  CUresult r = drv.device_get_name(p.name, (int)sizeof p.name, drv.device);
  if (r != CUDA_SUCCESS) return cu_error(ctx, r, "cuDeviceGetName", "%s", "");
  p.name[sizeof p.name - 1] = 0;
  r = drv.device_total_mem(&p.total_mem, drv.device);
  if (r != CUDA_SUCCESS) return cu_error(ctx, r, "cuDeviceTotalMem_v2", "%s", "");
  *out = p;
  return STOF_OK;
}

/* ---------------------------------------------------------------- streams */

struct stof_cuda_stream {
  stof_ctx *ctx;
  CUstream s;
  int capturing; /* between capture_begin and capture_end */
};

/* The stream work of ctx goes to (NULL: the legacy default stream). */
static CUstream cur_stream(const stof_ctx *ctx) { return ctx->stream ? ctx->stream->s : NULL; }

stof_status stof_cuda_stream_new(stof_ctx *ctx, stof_cuda_stream **out) {
  if (out) *out = NULL;
  stof_status st = drv_ready(ctx);
  if (st) return st;
  if (!out) return stof_ctx_error(ctx, STOF_ERR_ARG, "cuda stream: out is NULL");
  stof_cuda_stream *s = stof_ctx_alloc(ctx, sizeof *s);
  if (!s) return STOF_ERR_NOMEM;
  CUresult r = drv.stream_create(&s->s, CU_STREAM_NON_BLOCKING);
  if (r != CUDA_SUCCESS) {
    stof_ctx_dealloc(ctx, s, sizeof *s);
    return cu_error(ctx, r, "cuStreamCreate", "(non-blocking)");
  }
  s->ctx = ctx;
  *out = s;
  return STOF_OK;
}

/* Ends an open capture on s and drops what it recorded. */
static void capture_abandon(stof_cuda_stream *s) {
  if (!s->capturing) return;
  CUgraph g = NULL;
  if (drv.stream_end_capture(s->s, &g) == CUDA_SUCCESS && g) drv.graph_destroy(g);
  s->capturing = 0;
  if (capture_depth > 0 && --capture_depth == 0) capture_cause[0] = 0;
}

void stof_cuda_stream_free(stof_cuda_stream *s) {
  if (!s) return;
  stof_ctx *ctx = s->ctx;
  if (ctx->stream == s) ctx->stream = NULL;
  /* a stream exists only if the driver is up */
  if (drv.ctx_set_current(drv.primary) == CUDA_SUCCESS) {
    capture_abandon(s);
    drv.stream_destroy(s->s);
  }
  stof_ctx_dealloc(ctx, s, sizeof *s);
}

stof_status stof_cuda_stream_synchronize(stof_cuda_stream *s) {
  if (!s) return STOF_ERR_ARG; /* no context to tell: the default stream is
                                  stof_cuda_synchronize's */
  stof_status st = drv_ready(s->ctx);
  if (st) return st;
  CUresult r = drv.stream_synchronize(s->s);
  if (r != CUDA_SUCCESS) return cu_error(s->ctx, r, "cuStreamSynchronize", "%s", "");
  return STOF_OK;
}

void *stof_cuda_stream_handle(const stof_cuda_stream *s) { return s ? (void *)s->s : NULL; }

void stof_cuda_set_stream(stof_ctx *ctx, stof_cuda_stream *s) { ctx->stream = s; }

stof_cuda_stream *stof_cuda_current_stream(stof_ctx *ctx) { return ctx->stream; }

/* ---------------------------------------------------------------- device memory */

/* size 0 gives the null pointer (the driver refuses empty allocations). */
stof_status stof_cuda_malloc(stof_ctx *ctx, size_t size, uint64_t *dptr) {
  stof_status st = drv_ready(ctx);
  if (st) return st;
  if (!dptr) return stof_ctx_error(ctx, STOF_ERR_ARG, "cuda malloc: dptr is NULL");
  *dptr = 0;
  if (size == 0) return STOF_OK;
  CUdeviceptr p = 0;
  CUresult r = drv.mem_alloc(&p, size);
  if (r != CUDA_SUCCESS) return cu_error(ctx, r, "cuMemAlloc_v2", "(%zu bytes)", size);
  *dptr = (uint64_t)p;
  return STOF_OK;
}

/* Failures cannot be reported (void); freeing 0 does nothing. */
void stof_cuda_mem_free(stof_ctx *ctx, uint64_t dptr) {
  if (!dptr) return;
  pthread_once(&drv_once, drv_open);
  if (drv.status != STOF_OK) return;
  if (drv.ctx_set_current(drv.primary) != CUDA_SUCCESS) return;
  drv.mem_free((CUdeviceptr)dptr);
  (void)ctx;
}

stof_status stof_cuda_htod(stof_ctx *ctx, uint64_t dst, const void *src, size_t size) {
  stof_status st = drv_ready(ctx);
  if (st || size == 0) return st;
  if (!dst || !src)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "cuda htod: null %s pointer (%zu bytes)",
                          dst ? "host" : "device", size);
  CUstream cs = cur_stream(ctx);
  if (cs) {
    CUresult r = drv.memcpy_htod_async((CUdeviceptr)dst, src, size, cs);
    if (r != CUDA_SUCCESS) return cu_error(ctx, r, "cuMemcpyHtoDAsync_v2", "(%zu bytes)", size);
    r = drv.stream_synchronize(cs);
    if (r != CUDA_SUCCESS) return cu_error(ctx, r, "cuStreamSynchronize", "(after a %zu-byte copy to the device)", size);
    return STOF_OK;
  }
  CUresult r = drv.memcpy_htod((CUdeviceptr)dst, src, size);
  if (r != CUDA_SUCCESS) return cu_error(ctx, r, "cuMemcpyHtoD_v2", "(%zu bytes)", size);
  return STOF_OK;
}

stof_status stof_cuda_dtoh(stof_ctx *ctx, void *dst, uint64_t src, size_t size) {
  stof_status st = drv_ready(ctx);
  if (st || size == 0) return st;
  if (!dst || !src)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "cuda dtoh: null %s pointer (%zu bytes)",
                          dst ? "device" : "host", size);
  CUstream cs = cur_stream(ctx);
  if (cs) {
    CUresult r = drv.memcpy_dtoh_async(dst, (CUdeviceptr)src, size, cs);
    if (r != CUDA_SUCCESS) return cu_error(ctx, r, "cuMemcpyDtoHAsync_v2", "(%zu bytes)", size);
    r = drv.stream_synchronize(cs);
    if (r != CUDA_SUCCESS) return cu_error(ctx, r, "cuStreamSynchronize", "(after a %zu-byte copy to the host)", size);
    return STOF_OK;
  }
  CUresult r = drv.memcpy_dtoh(dst, (CUdeviceptr)src, size);
  if (r != CUDA_SUCCESS) return cu_error(ctx, r, "cuMemcpyDtoH_v2", "(%zu bytes)", size);
  return STOF_OK;
}

stof_status stof_cuda_dtod(stof_ctx *ctx, uint64_t dst, uint64_t src, size_t size) {
  stof_status st = drv_ready(ctx);
  if (st || size == 0) return st;
  if (!dst || !src)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "cuda dtod: null %s pointer (%zu bytes)",
                          dst ? "source" : "destination", size);
  CUstream cs = cur_stream(ctx);
  if (cs) {
    CUresult r = drv.memcpy_dtod_async((CUdeviceptr)dst, (CUdeviceptr)src, size, cs);
    if (r != CUDA_SUCCESS) return cu_error(ctx, r, "cuMemcpyDtoDAsync_v2", "(%zu bytes)", size);
    r = drv.stream_synchronize(cs);
    if (r != CUDA_SUCCESS) return cu_error(ctx, r, "cuStreamSynchronize", "(after a %zu-byte device copy)", size);
    return STOF_OK;
  }
  CUresult r = drv.memcpy_dtod((CUdeviceptr)dst, (CUdeviceptr)src, size);
  if (r != CUDA_SUCCESS) return cu_error(ctx, r, "cuMemcpyDtoD_v2", "(%zu bytes)", size);
  return STOF_OK;
}

stof_status stof_cuda_htod_async(stof_ctx *ctx, uint64_t dst, const void *src, size_t size) {
  stof_status st = drv_ready(ctx);
  if (st || size == 0) return st;
  if (!dst || !src)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "cuda htod async: null %s pointer (%zu bytes)",
                          dst ? "host" : "device", size);
  CUresult r = drv.memcpy_htod_async((CUdeviceptr)dst, src, size, cur_stream(ctx));
  if (r != CUDA_SUCCESS) return cu_error(ctx, r, "cuMemcpyHtoDAsync_v2", "(%zu bytes)", size);
  return STOF_OK;
}

stof_status stof_cuda_dtoh_async(stof_ctx *ctx, void *dst, uint64_t src, size_t size) {
  stof_status st = drv_ready(ctx);
  if (st || size == 0) return st;
  if (!dst || !src)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "cuda dtoh async: null %s pointer (%zu bytes)",
                          dst ? "device" : "host", size);
  CUresult r = drv.memcpy_dtoh_async(dst, (CUdeviceptr)src, size, cur_stream(ctx));
  if (r != CUDA_SUCCESS) return cu_error(ctx, r, "cuMemcpyDtoHAsync_v2", "(%zu bytes)", size);
  return STOF_OK;
}

stof_status stof_cuda_dtod_async(stof_ctx *ctx, uint64_t dst, uint64_t src, size_t size) {
  stof_status st = drv_ready(ctx);
  if (st || size == 0) return st;
  if (!dst || !src)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "cuda dtod async: null %s pointer (%zu bytes)",
                          dst ? "source" : "destination", size);
  CUresult r = drv.memcpy_dtod_async((CUdeviceptr)dst, (CUdeviceptr)src, size, cur_stream(ctx));
  if (r != CUDA_SUCCESS) return cu_error(ctx, r, "cuMemcpyDtoDAsync_v2", "(%zu bytes)", size);
  return STOF_OK;
}

stof_status stof_cuda_synchronize(stof_ctx *ctx) {
  stof_status st = drv_ready(ctx);
  if (st) return st;
  CUresult r = drv.ctx_synchronize();
  if (r != CUDA_SUCCESS) return cu_error(ctx, r, "cuCtxSynchronize", "%s", "");
  return STOF_OK;
}

stof_status stof_cuda_memset16(stof_ctx *ctx, uint64_t dst, uint16_t value, size_t count) {
  stof_status st = drv_ready(ctx);
  if (st || count == 0) return st;
  CUresult r = drv.memset_d16_async((CUdeviceptr)dst, value, count, cur_stream(ctx));
  if (r != CUDA_SUCCESS) return cu_error(ctx, r, "cuMemsetD16Async", "(%zu elements)", count);
  return STOF_OK;
}

stof_status stof_cuda_memset8(stof_ctx *ctx, uint64_t dst, uint8_t value, size_t count) {
  stof_status st = drv_ready(ctx);
  if (st || count == 0) return st;
  CUresult r = drv.memset_d8_async((CUdeviceptr)dst, value, count, cur_stream(ctx));
  if (r != CUDA_SUCCESS) return cu_error(ctx, r, "cuMemsetD8Async", "(%zu elements)", count);
  return STOF_OK;
}

stof_status stof_cuda_memset32(stof_ctx *ctx, uint64_t dst, uint32_t value, size_t count) {
  stof_status st = drv_ready(ctx);
  if (st || count == 0) return st;
  CUresult r = drv.memset_d32_async((CUdeviceptr)dst, value, count, cur_stream(ctx));
  if (r != CUDA_SUCCESS) return cu_error(ctx, r, "cuMemsetD32Async", "(%zu elements)", count);
  return STOF_OK;
}

stof_status stof_cuda_mem_get_info(stof_ctx *ctx, size_t *free_bytes, size_t *total_bytes) {
  stof_status st = drv_ready(ctx);
  if (st) return st;
  if (!free_bytes || !total_bytes)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "cuda mem info: null %s",
                          !free_bytes ? "free_bytes" : "total_bytes");
  size_t f = 0, t = 0;
  CUresult r = drv.mem_get_info(&f, &t);
  if (r != CUDA_SUCCESS) return cu_error(ctx, r, "cuMemGetInfo_v2", "%s", "");
  *free_bytes = f;
  *total_bytes = t;
  return STOF_OK;
}

struct stof_cuda_timer {
  stof_ctx *ctx;
  CUevent start, stop;
  CUstream stream; /* the current stream when start was recorded */
};

stof_status stof_cuda_timer_new(stof_ctx *ctx, stof_cuda_timer **out) {
  *out = NULL;
  stof_status st = drv_ready(ctx);
  if (st) return st;
  stof_cuda_timer *t = stof_ctx_alloc(ctx, sizeof *t);
  if (!t) return STOF_ERR_NOMEM;
  t->ctx = ctx;
  CUresult r = drv.event_create(&t->start, CU_EVENT_DEFAULT);
  if (r == CUDA_SUCCESS) {
    r = drv.event_create(&t->stop, CU_EVENT_DEFAULT);
    if (r != CUDA_SUCCESS) drv.event_destroy(t->start);
  }
  if (r != CUDA_SUCCESS) {
    stof_ctx_dealloc(ctx, t, sizeof *t);
    return cu_error(ctx, r, "cuEventCreate", "%s", "");
  }
  *out = t;
  return STOF_OK;
}

stof_status stof_cuda_timer_start(stof_cuda_timer *t) {
  stof_status st = drv_ready(t->ctx);
  if (st) return st;
  t->stream = cur_stream(t->ctx);
  CUresult r = drv.event_record(t->start, t->stream);
  return r == CUDA_SUCCESS ? STOF_OK : cu_error(t->ctx, r, "cuEventRecord", "%s", "");
}

stof_status stof_cuda_timer_stop(stof_cuda_timer *t, float *ms) {
  stof_status st = drv_ready(t->ctx);
  if (st) return st;
  CUresult r = drv.event_record(t->stop, t->stream);
  if (r == CUDA_SUCCESS) r = drv.event_synchronize(t->stop);
  if (r == CUDA_SUCCESS) r = drv.event_elapsed(ms, t->start, t->stop);
  return r == CUDA_SUCCESS ? STOF_OK : cu_error(t->ctx, r, "cuEventElapsedTime", "%s", "");
}

void stof_cuda_timer_free(stof_cuda_timer *t) {
  if (!t) return;
  if (drv.status == STOF_OK && drv.ctx_set_current(drv.primary) == CUDA_SUCCESS) {
    drv.event_destroy(t->start);
    drv.event_destroy(t->stop);
  }
  stof_ctx_dealloc(t->ctx, t, sizeof *t);
}

/* ---------------------------------------------------------------- NVRTC */

#define MAX_LOG_SHOWN 4096 /* bytes of NVRTC log kept in a message */

/* "-I<toolkit>/include", found once from CUDA_HOME, CUDA_PATH or the usual places; empty
 * when no directory holds cuda_fp16.h. */
static char include_opt[4200];
static pthread_once_t include_once = PTHREAD_ONCE_INIT;

static int try_include_dir(const char *dir, const char *suffix) {
  char path[4096];
  int n = snprintf(path, sizeof path, "%s%s/cuda_fp16.h", dir, suffix);
  if (n < 0 || (size_t)n >= sizeof path || access(path, R_OK) != 0) return 0;
  snprintf(include_opt, sizeof include_opt, "-I%s%s", dir, suffix);
  return 1;
}

/* STOF_NVRTC_LINEINFO=1: every compilation adds -lineinfo (source lines in the cubin, for
 * compute-sanitizer's and the profilers' reports; the code is the same). Read once. */
static int lineinfo;
static pthread_once_t lineinfo_once = PTHREAD_ONCE_INIT;

static void read_lineinfo(void) {
  const char *v = getenv("STOF_NVRTC_LINEINFO");
  lineinfo = v && *v && strcmp(v, "0") != 0;
}

static int want_lineinfo(void) {
  pthread_once(&lineinfo_once, read_lineinfo);
  return lineinfo;
}

static void find_include_dir(void) {
  static const char *const env[] = {"CUDA_HOME", "CUDA_PATH"};
  for (size_t i = 0; i < sizeof env / sizeof *env; i++) {
    const char *v = getenv(env[i]);
    if (v && *v && try_include_dir(v, "/include")) return;
  }
  if (try_include_dir("/usr/local/cuda", "/include")) return;
  if (try_include_dir("/usr", "/include")) return; /* distribution toolkits */
  include_opt[0] = 0;
}

static stof_status nvrtc_error(stof_ctx *ctx, nvrtcResult r, const char *fn, const char *name,
                               const char *arch) {
  return stof_ctx_error(ctx, STOF_ERR_COMPILE, "NVRTC: %s failed for %s (%s): %s", fn, name,
                        arch, nvrtcGetErrorString(r));
}

/* The failure message with the (capped) program log. */
static stof_status compile_failed(stof_ctx *ctx, nvrtcProgram prog, nvrtcResult r,
                                  const char *name, const char *arch) {
  size_t logsize = 0;
  char *log = NULL;
  if (nvrtcGetProgramLogSize(prog, &logsize) == NVRTC_SUCCESS && logsize > 1) {
    log = stof_ctx_alloc(ctx, logsize);
    if (!log) return STOF_ERR_NOMEM;
    if (nvrtcGetProgramLog(prog, log) != NVRTC_SUCCESS) log[0] = 0;
    log[logsize - 1] = 0;
  }
  const char *text = log ? log : "";
  size_t len = strlen(text);
  while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == ' ')) len--;
  size_t shown = len < MAX_LOG_SHOWN ? len : MAX_LOG_SHOWN;
  stof_status st = stof_ctx_error(
      ctx, STOF_ERR_COMPILE, "NVRTC: compiling %s for %s failed:\n%s%s%.*s%s", name, arch,
      r == NVRTC_ERROR_COMPILATION ? "" : nvrtcGetErrorString(r),
      r == NVRTC_ERROR_COMPILATION || !len ? "" : "\n", (int)shown, text,
      shown < len ? "\n[log truncated]" : "");
  stof_ctx_dealloc(ctx, log, logsize);
  return st;
}

stof_status stof_cuda_compile(stof_ctx *ctx, const char *src, const char *name,
                              const char *arch, int nopt, const char *const *opts,
                              void **cubin, size_t *size) {
  return stof_cuda_compile_ex(ctx, src, name, arch, nopt, opts, 0, NULL, NULL, cubin, size);
}

stof_status stof_cuda_compile_ex(stof_ctx *ctx, const char *src, const char *name,
                                 const char *arch, int nopt, const char *const *opts,
                                 int nheader, const char *const *header_names,
                                 const char *const *header_srcs, void **cubin, size_t *size) {
  if (!name) name = "<source>";
  if (nheader < 0 || (nheader > 0 && (!header_names || !header_srcs)))
    return stof_ctx_error(ctx, STOF_ERR_ARG, "cuda compile %s: bad headers (%d)", name, nheader);
  if (!src || !cubin || !size)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "cuda compile %s: null %s", name,
                          !src ? "source" : "output");
  *cubin = NULL;
  *size = 0;
  if (!arch || strncmp(arch, "sm_", 3) != 0 || arch[3] < '0' || arch[3] > '9')
    return stof_ctx_error(ctx, STOF_ERR_ARG,
                          "cuda compile %s: arch \"%s\" is not a real GPU (sm_XY, sm_XYa)",
                          name, arch ? arch : "(null)");
  if (nopt < 0 || (nopt > 0 && !opts))
    return stof_ctx_error(ctx, STOF_ERR_ARG, "cuda compile %s: bad options (%d)", name, nopt);

  pthread_once(&include_once, find_include_dir);
  char archopt[64];
  snprintf(archopt, sizeof archopt, "--gpu-architecture=%s", arch);
  int li = want_lineinfo();
  size_t noptall = 3 + (include_opt[0] ? 1 : 0) + (size_t)li + (size_t)nopt;
  const char **all = stof_ctx_alloc(ctx, noptall * sizeof *all);
  if (!all) return STOF_ERR_NOMEM;
  size_t k = 0;
  all[k++] = archopt;
  all[k++] = "-default-device";
  all[k++] = "--std=c++17";
  if (include_opt[0]) all[k++] = include_opt;
  if (li) all[k++] = "-lineinfo";
  for (int i = 0; i < nopt; i++) all[k++] = opts[i];

  stof_status st = STOF_OK;
  nvrtcProgram prog = NULL;
  nvrtcResult r = nvrtcCreateProgram(&prog, src, name, nheader, (const char **)header_srcs,
                                     (const char **)header_names);
  if (r != NVRTC_SUCCESS) {
    st = nvrtc_error(ctx, r, "nvrtcCreateProgram", name, arch);
    prog = NULL;
    goto done;
  }
  r = nvrtcCompileProgram(prog, (int)noptall, all);
  if (r != NVRTC_SUCCESS) {
    st = compile_failed(ctx, prog, r, name, arch);
    goto done;
  }
  size_t n = 0;
  r = nvrtcGetCUBINSize(prog, &n);
  if (r != NVRTC_SUCCESS) {
    st = nvrtc_error(ctx, r, "nvrtcGetCUBINSize", name, arch);
    goto done;
  }
  if (n == 0) {
    st = stof_ctx_error(ctx, STOF_ERR_COMPILE, "NVRTC: compiling %s for %s gave no cubin", name,
                        arch);
    goto done;
  }
  void *bin = stof_ctx_alloc(ctx, n);
  if (!bin) {
    st = STOF_ERR_NOMEM;
    goto done;
  }
  r = nvrtcGetCUBIN(prog, bin);
  if (r != NVRTC_SUCCESS) {
    stof_ctx_dealloc(ctx, bin, n);
    st = nvrtc_error(ctx, r, "nvrtcGetCUBIN", name, arch);
    goto done;
  }
  *cubin = bin;
  *size = n;

done:
  if (prog) nvrtcDestroyProgram(&prog);
  stof_ctx_dealloc(ctx, all, noptall * sizeof *all);
  return st;
}

int stof_cuda_nvrtc_version(void) {
  int major = 0, minor = 0;
  if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return 0;
  return major * 1000 + minor * 10;
}

/* ---------------------------------------------------------------- modules and launches */

struct stof_cuda_kernel {
  stof_cuda_module *module;
  stof_cuda_kernel *next;
  CUfunction fn;
  char *name;            /* owned: strlen + 1 */
  unsigned smem_optin;   /* the dynamic shared memory this kernel may use, once raised */
};

struct stof_cuda_module {
  stof_ctx *ctx;
  CUmodule mod;
  stof_cuda_kernel *kernels;
};

static int is_binary_image(const unsigned char *p, size_t size) {
  static const unsigned char elf[4] = {0x7f, 'E', 'L', 'F'};
  static const unsigned char fatbin[4] = {0x50, 0xed, 0x55, 0xba}; /* 0xba55ed50, LE */
  return size >= 4 && (memcmp(p, elf, 4) == 0 || memcmp(p, fatbin, 4) == 0);
}

stof_status stof_cuda_module_load(stof_ctx *ctx, const void *cubin, size_t size,
                                  stof_cuda_module **out) {
  stof_status st = drv_ready(ctx);
  if (st) return st;
  if (!out || !cubin || size == 0)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "cuda module load: %s",
                          !out ? "out is NULL" : "empty image");
  *out = NULL;
  stof_cuda_module *m = stof_ctx_alloc(ctx, sizeof *m);
  if (!m) return STOF_ERR_NOMEM;
  /* Anything but ELF or a fatbin is read by the driver as NUL-terminated PTX text: give it
   * a terminated copy so it never reads past the caller's buffer. */
  const void *image = cubin;
  char *text = NULL;
  if (!is_binary_image(cubin, size)) {
    text = stof_ctx_alloc(ctx, size + 1);
    if (!text) {
      stof_ctx_dealloc(ctx, m, sizeof *m);
      return STOF_ERR_NOMEM;
    }
    memcpy(text, cubin, size);
    image = text;
  }
  CUresult r = drv.module_load_data(&m->mod, image);
  stof_ctx_dealloc(ctx, text, size + 1);
  if (r != CUDA_SUCCESS) {
    stof_ctx_dealloc(ctx, m, sizeof *m);
    return cu_error(ctx, r, "cuModuleLoadData", "(%zu-byte image)", size);
  }
  m->ctx = ctx;
  *out = m;
  return STOF_OK;
}

void stof_cuda_module_free(stof_cuda_module *m) {
  if (!m) return;
  stof_ctx *ctx = m->ctx;
  for (stof_cuda_kernel *k = m->kernels, *next; k; k = next) {
    next = k->next;
    stof_ctx_dealloc(ctx, k->name, strlen(k->name) + 1);
    stof_ctx_dealloc(ctx, k, sizeof *k);
  }
  /* a module exists only if the driver is up */
  if (drv.ctx_set_current(drv.primary) == CUDA_SUCCESS) drv.module_unload(m->mod);
  stof_ctx_dealloc(ctx, m, sizeof *m);
}

stof_status stof_cuda_module_kernel(stof_cuda_module *m, const char *name,
                                    stof_cuda_kernel **out) {
  if (!m) return STOF_ERR_ARG;
  stof_ctx *ctx = m->ctx;
  if (!name || !out)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "cuda module kernel: null %s",
                          !name ? "name" : "out");
  *out = NULL;
  for (stof_cuda_kernel *k = m->kernels; k; k = k->next) {
    if (strcmp(k->name, name) == 0) {
      *out = k;
      return STOF_OK;
    }
  }
  stof_status st = drv_ready(ctx);
  if (st) return st;
  CUfunction fn = NULL;
  CUresult r = drv.module_get_function(&fn, m->mod, name);
  if (r == CUDA_ERROR_NOT_FOUND)
    return stof_ctx_error(ctx, STOF_ERR_NOT_FOUND,
                          "cuda module: no kernel named '%s' (is it extern \"C\" __global__?)",
                          name);
  if (r != CUDA_SUCCESS) return cu_error(ctx, r, "cuModuleGetFunction", "('%s')", name);
  stof_cuda_kernel *k = stof_ctx_alloc(ctx, sizeof *k);
  if (!k) return STOF_ERR_NOMEM;
  k->name = stof_ctx_strdup(ctx, name);
  if (!k->name) {
    stof_ctx_dealloc(ctx, k, sizeof *k);
    return STOF_ERR_NOMEM;
  }
  k->module = m;
  k->fn = fn;
  k->smem_optin = DEFAULT_DYNAMIC_SMEM;
  k->next = m->kernels;
  m->kernels = k;
  *out = k;
  return STOF_OK;
}

stof_status stof_cuda_launch(stof_ctx *ctx, stof_cuda_kernel *k, const unsigned grid[3],
                             const unsigned block[3], unsigned smem, void **args) {
  stof_status st = drv_ready(ctx);
  if (st) return st;
  if (!k || !grid || !block)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "cuda launch: null %s",
                          !k ? "kernel" : !grid ? "grid" : "block");
  CUresult r;
  if (smem > k->smem_optin) {
    r = drv.func_set_attribute(k->fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                               (int)smem);
    if (r != CUDA_SUCCESS)
      return cu_error(ctx, r, "cuFuncSetAttribute",
                      "(MAX_DYNAMIC_SHARED_SIZE_BYTES = %u) for kernel %s", smem, k->name);
    k->smem_optin = smem;
  }
  r = drv.launch_kernel(k->fn, grid[0], grid[1], grid[2], block[0], block[1], block[2], smem,
                        cur_stream(ctx), args, NULL);
  if (r != CUDA_SUCCESS)
    return cu_error(ctx, r, "cuLaunchKernel",
                    "for kernel %s (grid %u x %u x %u, block %u x %u x %u, %u bytes shared)",
                    k->name, grid[0], grid[1], grid[2], block[0], block[1], block[2], smem);
  return STOF_OK;
}

/* ---------------------------------------------------------------- graphs */

struct stof_cuda_graph {
  stof_ctx *ctx;
  CUgraphExec exec;
};

static stof_status graphs_supported(stof_ctx *ctx) {
  if (drv.stream_begin_capture && drv.stream_end_capture && drv.graph_instantiate &&
      drv.graph_launch && drv.graph_exec_destroy && drv.graph_destroy)
    return STOF_OK;
  return stof_ctx_error(ctx, STOF_ERR_UNSUPPORTED,
                        "cuda graphs: libcuda.so.1 lacks %s (graphs need a CUDA 11.4 or newer "
                        "driver); run the work on a stream without capturing it",
                        !drv.stream_begin_capture ? "cuStreamBeginCapture_v2"
                        : !drv.stream_end_capture ? "cuStreamEndCapture"
                        : !drv.graph_instantiate  ? "cuGraphInstantiateWithFlags"
                        : !drv.graph_launch       ? "cuGraphLaunch"
                        : !drv.graph_exec_destroy ? "cuGraphExecDestroy"
                                                  : "cuGraphDestroy");
}

/* Thread-local mode: this thread may not call anything that would synchronise or allocate
 * while it captures (such calls fail, and invalidate the capture, instead of silently
 * escaping the graph), while other threads (a host application's allocator, say) stay
 * unrestricted, which global mode would not allow. cuBLASLt's matmul with a caller-given
 * workspace makes no such call, so it captures in this mode; relaxed mode would let a
 * synchronous copy through unrecorded. */
stof_status stof_cuda_capture_begin(stof_ctx *ctx, stof_cuda_stream *s) {
  stof_status st = drv_ready(ctx);
  if (st) return st;
  if ((st = graphs_supported(ctx))) return st;
  if (!s)
    return stof_ctx_error(ctx, STOF_ERR_ARG,
                          "cuda capture: the default stream cannot be captured (capture a "
                          "stream from stof_cuda_stream_new)");
  if (s->capturing)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "cuda capture: the stream is already being captured");
  CUresult r = drv.stream_begin_capture(s->s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
  if (r != CUDA_SUCCESS) return cu_error(ctx, r, "cuStreamBeginCapture_v2", "(thread-local mode)");
  s->capturing = 1;
  if (capture_depth++ == 0) capture_cause[0] = 0;
  return STOF_OK;
}

stof_status stof_cuda_capture_end(stof_ctx *ctx, stof_cuda_stream *s, stof_cuda_graph **out) {
  if (out) *out = NULL;
  stof_status st = drv_ready(ctx);
  if (st) return st;
  if ((st = graphs_supported(ctx))) return st;
  if (!s || !s->capturing)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "cuda capture end: %s",
                          !s ? "the default stream is never captured"
                             : "the stream is not being captured (no capture_begin)");
  char cause[sizeof capture_cause];
  snprintf(cause, sizeof cause, "%s", capture_cause);
  CUgraph graph = NULL;
  CUresult r = drv.stream_end_capture(s->s, &graph);
  s->capturing = 0;
  if (capture_depth > 0 && --capture_depth == 0) capture_cause[0] = 0;
  if (r != CUDA_SUCCESS) {
    if (graph) drv.graph_destroy(graph);
    if (!cause[0]) return cu_error(ctx, r, "cuStreamEndCapture", "%s", "");
    char why[256];
    cu_describe(r, why, sizeof why);
    return stof_ctx_error(ctx, STOF_ERR_CUDA,
                          "CUDA: cuStreamEndCapture failed: %s; the capture was invalidated by "
                          "an earlier failure: %s",
                          why, cause);
  }
  if (!out) {
    drv.graph_destroy(graph);
    return stof_ctx_error(ctx, STOF_ERR_ARG, "cuda capture end: out is NULL (the graph is dropped)");
  }
  if (!graph)
    return stof_ctx_error(ctx, STOF_ERR_CUDA, "CUDA: cuStreamEndCapture gave no graph");
  CUgraphExec exec = NULL;
  r = drv.graph_instantiate(&exec, graph, 0);
  drv.graph_destroy(graph); /* the executable graph does not need it */
  if (r != CUDA_SUCCESS) return cu_error(ctx, r, "cuGraphInstantiateWithFlags", "%s", "");
  stof_cuda_graph *g = stof_ctx_alloc(ctx, sizeof *g);
  if (!g) {
    drv.graph_exec_destroy(exec);
    return STOF_ERR_NOMEM;
  }
  g->ctx = ctx;
  g->exec = exec;
  *out = g;
  return STOF_OK;
}

stof_status stof_cuda_graph_launch(stof_cuda_graph *g, stof_cuda_stream *s) {
  if (!g) return STOF_ERR_ARG;
  stof_status st = drv_ready(g->ctx);
  if (st) return st;
  CUresult r = drv.graph_launch(g->exec, s ? s->s : cur_stream(g->ctx));
  if (r != CUDA_SUCCESS) return cu_error(g->ctx, r, "cuGraphLaunch", "%s", "");
  return STOF_OK;
}

void stof_cuda_graph_free(stof_cuda_graph *g) {
  if (!g) return;
  /* a graph exists only if the driver is up */
  if (drv.ctx_set_current(drv.primary) == CUDA_SUCCESS) drv.graph_exec_destroy(g->exec);
  stof_ctx_dealloc(g->ctx, g, sizeof *g);
}

/* ---------------------------------------------------------------- TMA descriptors */

/* A tiled map of rank 3..5: dims[rank], strides[rank - 1] (bytes), box[rank]. */
static stof_status tmap_encode(stof_ctx *ctx, stof_cuda_tmap *out, uint64_t base, stof_dtype dtype, int rank,
                               const uint64_t *dims, const uint64_t *strides, const uint32_t *box,
                               int swizzle) {
  stof_status st = drv_ready(ctx);
  if (st) return st;
  if (!out || !dims || !strides || !box)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "cuda tensor map: null %s",
                          !out ? "out" : !dims ? "dims" : !strides ? "strides" : "box");
#if CUDA_VERSION >= 12000
  _Static_assert(sizeof(CUtensorMap) == sizeof(stof_cuda_tmap), "stof_cuda_tmap must be a CUtensorMap");
  if (!drv.tensor_map_encode_tiled)
    return stof_ctx_error(ctx, STOF_ERR_UNSUPPORTED,
                          "cuda tensor map: libcuda.so.1 has no cuTensorMapEncodeTiled (TMA needs a CUDA 12 driver)");
  CUtensorMapDataType type;
  switch (dtype) {
  case STOF_DTYPE_F16: type = CU_TENSOR_MAP_DATA_TYPE_FLOAT16; break;
  case STOF_DTYPE_BF16: type = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16; break;
  case STOF_DTYPE_F32: type = CU_TENSOR_MAP_DATA_TYPE_FLOAT32; break;
  default:
    return stof_ctx_error(ctx, STOF_ERR_ARG, "cuda tensor map: dtype %s (float16, bfloat16 or float32)",
                          stof_dtype_name(dtype));
  }
  CUtensorMapSwizzle swz;
  switch (swizzle) {
  case 0: swz = CU_TENSOR_MAP_SWIZZLE_NONE; break;
  case 32: swz = CU_TENSOR_MAP_SWIZZLE_32B; break;
  case 64: swz = CU_TENSOR_MAP_SWIZZLE_64B; break;
  case 128: swz = CU_TENSOR_MAP_SWIZZLE_128B; break;
  default:
    return stof_ctx_error(ctx, STOF_ERR_ARG, "cuda tensor map: swizzle %d (0, 32, 64 or 128 bytes)", swizzle);
  }
  cuuint64_t gdim[5], gstride[4];
  cuuint32_t bdim[5], estride[5];
  for (int i = 0; i < rank; i++) {
    gdim[i] = dims[i], bdim[i] = box[i], estride[i] = 1;
    if (i + 1 < rank) gstride[i] = strides[i];
  }
  CUtensorMap map;
  CUresult r = drv.tensor_map_encode_tiled(&map, type, (cuuint32_t)rank, (void *)(uintptr_t)base, gdim, gstride,
                                           bdim, estride, CU_TENSOR_MAP_INTERLEAVE_NONE, swz,
                                           CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                           CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    char d[128], sd[128], b[96];
    int nd = 0, ns = 0, nb = 0;
    for (int i = 0; i < rank; i++) {
      nd += snprintf(d + nd, sizeof d - (size_t)nd, "%s%llu", i ? " x " : "", (unsigned long long)dims[i]);
      nb += snprintf(b + nb, sizeof b - (size_t)nb, "%s%u", i ? " x " : "", box[i]);
      if (i + 1 < rank)
        ns += snprintf(sd + ns, sizeof sd - (size_t)ns, "%s%llu", i ? " " : "", (unsigned long long)strides[i]);
    }
    return cu_error(ctx, r, "cuTensorMapEncodeTiled",
                    "(%s at 0x%llx, dims %s, strides %s bytes, box %s, swizzle %d)", stof_dtype_name(dtype),
                    (unsigned long long)base, d, sd, b, swizzle);
  }
  memcpy(out, &map, sizeof map);
  return STOF_OK;
#else
  (void)base, (void)dtype, (void)swizzle, (void)rank;
  return stof_ctx_error(ctx, STOF_ERR_UNSUPPORTED,
                        "cuda tensor map: stof was built against a CUDA toolkit before 12.0 (no cuTensorMapEncodeTiled)");
#endif
}

stof_status stof_cuda_tmap_encode_3d(stof_ctx *ctx, stof_cuda_tmap *out, uint64_t base, stof_dtype dtype,
                                     const uint64_t dims[3], const uint64_t strides[2],
                                     const uint32_t box[3], int swizzle) {
  return tmap_encode(ctx, out, base, dtype, 3, dims, strides, box, swizzle);
}

stof_status stof_cuda_tmap_encode_4d(stof_ctx *ctx, stof_cuda_tmap *out, uint64_t base, stof_dtype dtype,
                                     const uint64_t dims[4], const uint64_t strides[3],
                                     const uint32_t box[4], int swizzle) {
  return tmap_encode(ctx, out, base, dtype, 4, dims, strides, box, swizzle);
}

/* ---------------------------------------------------------------- cubin cache */

static uint64_t hash_str(uint64_t h, const char *s) {
  return stof_hash_bytes(h, s, strlen(s) + 1); /* the NUL separates fields */
}

stof_status stof_cuda_compile_cached(stof_ctx *ctx, const char *src, const char *name,
                                     const char *arch, int nopt, const char *const *opts,
                                     int nheader, const char *const *header_names,
                                     const char *const *header_srcs, void **cubin,
                                     size_t *size) {
  *cubin = NULL;
  *size = 0;
  if (!src || !arch) return stof_cuda_compile_ex(ctx, src, name, arch, nopt, opts, nheader,
                                                 header_names, header_srcs, cubin, size);
  uint64_t h = hash_str(STOF_HASH_INIT, src);
  h = hash_str(h, arch);
  int ver = stof_cuda_nvrtc_version();
  h = stof_hash_bytes(h, &ver, sizeof ver);
  for (int i = 0; i < nopt && opts; i++) h = hash_str(h, opts[i]);
  if (want_lineinfo()) h = hash_str(h, "-lineinfo");
  for (int i = 0; i < nheader && header_names && header_srcs; i++)
    h = hash_str(hash_str(h, header_names[i]), header_srcs[i]);
  char dir[4096], path[4200];
  stof_status st = stof_cache_dir(ctx, "cubin", dir, sizeof dir);
  if (st == STOF_OK) {
    snprintf(path, sizeof path, "%s/%016llx-%s.cubin", dir, (unsigned long long)h, arch);
    void *data;
    size_t n;
    stof_status rst = stof_cache_read(ctx, path, &data, &n);
    if (rst == STOF_ERR_NOMEM) return rst; /* out of memory is sticky, not a cache miss */
    if (rst == STOF_OK) {
      if (n > 4 && memcmp(data, "\177ELF", 4) == 0) {
        *cubin = data;
        *size = n;
        return STOF_OK;
      }
      stof_ctx_dealloc(ctx, data, n); /* corrupt: compile again and replace it */
    }
    stof_ctx_clear_error(ctx);
  }
  stof_status cst = stof_cuda_compile_ex(ctx, src, name, arch, nopt, opts, nheader,
                                         header_names, header_srcs, cubin, size);
  if (cst) return cst;
  if (st == STOF_OK && stof_cache_write(ctx, path, *cubin, *size) != STOF_OK)
    stof_ctx_clear_error(ctx); /* a cache that cannot be written only costs time */
  return STOF_OK;
}
