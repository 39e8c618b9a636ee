/*
 * Compiling ahead: what stof_build would compile for a schedule, made into a job (its source,
 * target and architecture) without compiling, so that many jobs compile on several threads
 * into the on-disk caches (the C backend's libraries, the cubins) and the builds that follow
 * find them there. The search compiles a round of candidates this way while nothing runs on
 * the GPU, then builds and measures them one at a time.
 *
 * Threads: a job is read-only once made; each thread runs jobs with a context of its own
 * (a context's error state and allocator are not for concurrent use); NVRTC is thread-safe
 * across programs, the C compiler runs as a process, and both caches publish a file by
 * renaming a private temporary, so threads and processes never see half a file. A job
 * that fails is only counted: its build will fail again and say why.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "schedule_int.h"

struct stof_compile_job {
  stof_ctx *ctx;   /* the context that made it (its memory) */
  int cuda;
  char arch[16];   /* cuda: "sm_90", "sm_90a"; "" when there is no GPU to compile for */
  char *source;
};

void stof_compile_job_free(stof_compile_job *j) {
  if (!j) return;
  if (j->source) stof_ctx_dealloc(j->ctx, j->source, strlen(j->source) + 1);
  stof_ctx_dealloc(j->ctx, j, sizeof *j);
}

stof_status stof_build_job(const stof_sched *s, int nargs, const stof_op *const *args, const char *target,
                           stof_compile_job **out) {
  stof_ctx *ctx = s->ctx;
  *out = NULL;
  if (!target) target = "c";
  int cuda = strcmp(target, "cuda") == 0;
  if (!cuda && strcmp(target, "c") != 0)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "build_job: unknown target \"%s\" (expected \"c\" or \"cuda\")", target);
  stof_status st = sched_build_check_args(s, nargs, args);
  if (st) return st;
  stof_compile_job *j = stof_ctx_alloc(ctx, sizeof *j);
  if (!j) return STOF_ERR_NOMEM;
  memset(j, 0, sizeof *j);
  j->ctx = ctx;
  j->cuda = cuda;
  if (!cuda) {
    st = sched_codegen_c(s, nargs, args, &j->source);
  } else {
    sched_cuda_info info;
    memset(&info, 0, sizeof info);
    st = sched_codegen_cuda(s, nargs, args, &j->source, &info);
    int sm90a = info.sm90a;
    sched_cuda_info_free(ctx, &info);
    if (!st && stof_cuda_init(ctx) == STOF_OK) {
      stof_cuda_props p;
      if (!(st = stof_cuda_props_get(ctx, &p))) snprintf(j->arch, sizeof j->arch, "sm_%d%d", p.cc_major, p.cc_minor);
      if (!st && sm90a) snprintf(j->arch, sizeof j->arch, "sm_90a"); /* as stof_build: wgmma */
    } else if (!st) {
      stof_ctx_clear_error(ctx); /* no GPU: nothing to compile for */
    }
  }
  if (st) {
    stof_compile_job_free(j);
    return st;
  }
  *out = j;
  return STOF_OK;
}

stof_status stof_compile_job_run(stof_ctx *ctx, const stof_compile_job *j) {
  if (!j->cuda) return sched_runtime_compile(ctx, j->source);
  if (!j->arch[0]) return STOF_OK;
  void *cubin = NULL;
  size_t size = 0;
  stof_status st =
      stof_cuda_compile_cached(ctx, j->source, "stof_schedule.cu", j->arch, 0, NULL, 0, NULL, NULL, &cubin, &size);
  if (!st) stof_ctx_dealloc(ctx, cubin, size);
  return st;
}

typedef struct pool {
  stof_compile_job *const *jobs;
  int n;
  int next;    /* atomic */
  int nfail;   /* atomic */
  int nomem;   /* a thread could not make its context */
} pool;

static void *worker(void *arg) {
  pool *P = arg;
  stof_ctx *ctx = stof_ctx_new(NULL, NULL);
  if (!ctx) {
    __atomic_store_n(&P->nomem, 1, __ATOMIC_RELAXED);
    return NULL;
  }
  for (;;) {
    int i = __atomic_fetch_add(&P->next, 1, __ATOMIC_RELAXED);
    if (i >= P->n) break;
    if (stof_compile_job_run(ctx, P->jobs[i]) != STOF_OK) {
      __atomic_fetch_add(&P->nfail, 1, __ATOMIC_RELAXED);
      stof_ctx_clear_error(ctx);
    }
  }
  stof_ctx_free(ctx);
  return NULL;
}

stof_status stof_compile_jobs(stof_ctx *ctx, int n, stof_compile_job *const *jobs, int nthread, int *nfail) {
  if (nfail) *nfail = 0;
  if (n < 0 || (n > 0 && !jobs)) return stof_ctx_error(ctx, STOF_ERR_ARG, "compile_jobs: %d jobs", n);
  if (n == 0) return STOF_OK;
  if (nthread < 1) nthread = 1;
  if (nthread > n) nthread = n;
  if (nthread > 64) nthread = 64;
  pool P = {jobs, n, 0, 0, 0};
  pthread_t th[64];
  int started = 0;
  for (int i = 1; i < nthread; i++) {
    if (pthread_create(&th[started], NULL, worker, &P) != 0) break;
    started++;
  }
  worker(&P); /* this thread too */
  for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
  if (P.nomem && P.next < n) /* no thread could take the jobs */
    return stof_ctx_error(ctx, STOF_ERR_NOMEM, "compile_jobs: no context for a compiling thread");
  if (nfail) *nfail = P.nfail;
  return STOF_OK;
}
