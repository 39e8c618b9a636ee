/*
 * The CUDA backend's run time: stof_build(..., "cuda") generates CUDA C (codegen_cuda.c),
 * compiles it with NVRTC through the cubin cache for the current GPU's architecture and
 * loads it; a call launches the kernels in order on the default stream, with the
 * intermediates in global memory allocated for the call, then waits and frees them. A
 * timing (stof_func_time) allocates them once and launches the kernels reps times back to
 * back between two CUDA events.
 * Without a GPU the source is still compiled (for sm_80), and the build then fails with
 * STOF_ERR_NO_DEVICE: a build that reports a missing GPU has proved its source compiles.
 *
 * stof_sched_cuda_check compiles the source without the cache and without a GPU (what CI
 * runs for every schedule).
 */
#include <stdio.h>
#include <string.h>

#include "schedule_int.h"

#define MAX_PARAMS 512

struct sched_cuda_func {
  stof_ctx *ctx;
  stof_cuda_module *mod;
  stof_cuda_kernel **fn;   /* per kernel, borrowed from mod */
  sched_cuda_info info;
  int nargs;
};

void sched_cuda_func_free(sched_cuda_func *f) {
  if (!f) return;
  stof_ctx *ctx = f->ctx;
  if (f->mod) stof_cuda_module_free(f->mod);
  if (f->fn) stof_ctx_dealloc(ctx, f->fn, sizeof *f->fn * (size_t)(f->info.nkernel ? f->info.nkernel : 1));
  sched_cuda_info_free(ctx, &f->info);
  stof_ctx_dealloc(ctx, f, sizeof *f);
}

stof_status sched_cuda_build(const stof_sched *s, int nargs, const stof_op *const *args,
                             char **source, sched_cuda_func **out) {
  stof_ctx *ctx = s->ctx;
  *out = NULL;
  *source = NULL;
  sched_cuda_func *f = stof_ctx_alloc(ctx, sizeof *f);
  if (!f) return STOF_ERR_NOMEM;
  memset(f, 0, sizeof *f);
  f->ctx = ctx;
  f->nargs = nargs;
  stof_status st = sched_codegen_cuda(s, nargs, args, source, &f->info);
  if (st) goto fail;
  if (nargs + f->info.ntemp > MAX_PARAMS) {
    st = stof_ctx_error(ctx, STOF_ERR_UNSUPPORTED, "build: %d kernel parameters, at most %d",
                        nargs + f->info.ntemp, MAX_PARAMS);
    goto fail;
  }
  char arch[32] = "sm_80";
  stof_status dev = stof_cuda_init(ctx);
  char why[512] = "";
  if (dev == STOF_OK) {
    stof_cuda_props p;
    if ((st = stof_cuda_props_get(ctx, &p))) goto fail;
    snprintf(arch, sizeof arch, "sm_%d%d", p.cc_major, p.cc_minor);
    if (f->info.sm90a && !(p.cc_major == 9 && p.cc_minor == 0)) {
      st = stof_ctx_error(ctx, STOF_ERR_UNSUPPORTED,
                          "build: the schedule uses wgmma, which needs compute capability 9.0 (sm_90a); "
                          "this GPU is %d.%d",
                          p.cc_major, p.cc_minor);
      goto fail;
    }
  } else {
    snprintf(why, sizeof why, "%s", stof_ctx_message(ctx));
    stof_ctx_clear_error(ctx);
  }
  if (f->info.sm90a) snprintf(arch, sizeof arch, "sm_90a"); /* wgmma */
  void *cubin = NULL;
  size_t size = 0;
  st = stof_cuda_compile_cached(ctx, *source, "stof_schedule.cu", arch, 0, NULL, 0, NULL, NULL, &cubin, &size);
  if (st) goto fail;
  if (dev != STOF_OK) {
    stof_ctx_dealloc(ctx, cubin, size);
    st = stof_ctx_error(ctx, STOF_ERR_NO_DEVICE,
                        "build: the CUDA source compiled (%s, %d kernels) but no GPU is present: %s", arch,
                        f->info.nkernel, why[0] ? why : "no device");
    goto fail;
  }
  st = stof_cuda_module_load(ctx, cubin, size, &f->mod);
  stof_ctx_dealloc(ctx, cubin, size);
  if (st) goto fail;
  f->fn = stof_ctx_alloc(ctx, sizeof *f->fn * (size_t)(f->info.nkernel ? f->info.nkernel : 1));
  if (!f->fn) {
    st = STOF_ERR_NOMEM;
    goto fail;
  }
  for (int i = 0; i < f->info.nkernel; i++)
    if ((st = stof_cuda_module_kernel(f->mod, f->info.kernel[i].name, &f->fn[i]))) goto fail;
  *out = f;
  return STOF_OK;
fail:
  sched_cuda_func_free(f);
  return st;
}

/* The intermediates of one call (or one timing) in global memory, after the n arguments
 * in dptr; *made gets how many were allocated (free them with free_temps even on error). */
static stof_status alloc_temps(sched_cuda_func *f, uint64_t *dptr, int *made) {
  stof_status st = STOF_OK;
  for (*made = 0; *made < f->info.ntemp; (*made)++)
    if ((st = stof_cuda_malloc(f->ctx, f->info.temp_bytes[*made], &dptr[f->nargs + *made]))) break;
  return st;
}

static void free_temps(sched_cuda_func *f, const uint64_t *dptr, int made) {
  for (int i = 0; i < made; i++) stof_cuda_mem_free(f->ctx, dptr[f->nargs + i]);
}

/* Launches every kernel once, in order, on the default stream (no synchronisation), each
 * with the dynamic shared memory its plan asks for. */
static stof_status launch_all(sched_cuda_func *f, void **params) {
  stof_status st = STOF_OK;
  for (int k = 0; k < f->info.nkernel && !st; k++) {
    const sched_cuda_kernel *kk = &f->info.kernel[k];
    st = stof_cuda_launch(f->ctx, f->fn[k], kk->grid, kk->block, (unsigned)kk->smem, params);
  }
  return st;
}

stof_status sched_cuda_call(sched_cuda_func *f, const uint64_t *ptrs) {
  uint64_t dptr[MAX_PARAMS];
  void *params[MAX_PARAMS];
  int n = f->nargs, made = 0;
  for (int i = 0; i < n; i++) dptr[i] = ptrs[i];
  stof_status st = alloc_temps(f, dptr, &made);
  for (int i = 0; i < n + made; i++) params[i] = &dptr[i];
  if (!st) st = launch_all(f, params);
  if (!st) st = stof_cuda_synchronize(f->ctx);
  free_temps(f, dptr, made);
  return st;
}

stof_status sched_cuda_launch(sched_cuda_func *f, const uint64_t *ptrs) {
  uint64_t dptr[MAX_PARAMS];
  void *params[MAX_PARAMS];
  int n = f->nargs + f->info.ntemp;
  for (int i = 0; i < n; i++) {
    dptr[i] = ptrs[i];
    params[i] = &dptr[i];
  }
  return launch_all(f, params);
}

int sched_cuda_ntemp(const sched_cuda_func *f) { return f->info.ntemp; }
size_t sched_cuda_temp_bytes(const sched_cuda_func *f, int i) { return (size_t)f->info.temp_bytes[i]; }

stof_status sched_cuda_time(sched_cuda_func *f, const uint64_t *ptrs, int reps, int warmup,
                            double *ms) {
  stof_ctx *ctx = f->ctx;
  uint64_t dptr[MAX_PARAMS];
  void *params[MAX_PARAMS];
  int n = f->nargs, made = 0;
  stof_cuda_timer *timer = NULL;
  float total = 0;
  *ms = 0;
  for (int i = 0; i < n; i++) dptr[i] = ptrs[i];
  stof_status st = alloc_temps(f, dptr, &made);
  for (int i = 0; i < n + made; i++) params[i] = &dptr[i];
  for (int w = 0; w < warmup && !st; w++) st = launch_all(f, params);
  if (!st) st = stof_cuda_synchronize(ctx);
  if (!st) st = stof_cuda_timer_new(ctx, &timer);
  if (!st) st = stof_cuda_timer_start(timer);
  for (int r = 0; r < reps && !st; r++) st = launch_all(f, params);
  if (!st) st = stof_cuda_timer_stop(timer, &total);
  stof_cuda_timer_free(timer);
  free_temps(f, dptr, made);
  if (!st) *ms = (double)total / reps;
  return st;
}

stof_status stof_sched_cuda_check(const stof_sched *s, int nargs, const stof_op *const *args,
                                  const char *arch, size_t *cubin_size) {
  stof_ctx *ctx = s->ctx;
  if (cubin_size) *cubin_size = 0;
  if (!arch || strncmp(arch, "sm_", 3) != 0)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "cuda_check: arch \"%s\" is not sm_XY", arch ? arch : "(null)");
  stof_status st = sched_build_check_args(s, nargs, args);
  if (st) return st;
  char *src = NULL;
  sched_cuda_info info;
  if ((st = sched_codegen_cuda(s, nargs, args, &src, &info))) return st;
  int sm90a = info.sm90a;
  sched_cuda_info_free(ctx, &info);
  if (sm90a && strcmp(arch, "sm_90") != 0 && strcmp(arch, "sm_90a") != 0) {
    stof_ctx_dealloc(ctx, src, strlen(src) + 1);
    return stof_ctx_error(ctx, STOF_ERR_UNSUPPORTED, "cuda_check: the schedule uses wgmma, which needs sm_90a, not %s",
                          arch);
  }
  void *cubin = NULL;
  size_t size = 0;
  st = stof_cuda_compile(ctx, src, "stof_schedule.cu", sm90a ? "sm_90a" : arch, 0, NULL, &cubin, &size);
  stof_ctx_dealloc(ctx, src, strlen(src) + 1);
  if (st) return st;
  stof_ctx_dealloc(ctx, cubin, size);
  if (size == 0) return stof_ctx_error(ctx, STOF_ERR_COMPILE, "cuda_check: NVRTC gave an empty cubin for %s", arch);
  if (cubin_size) *cubin_size = size;
  return STOF_OK;
}
