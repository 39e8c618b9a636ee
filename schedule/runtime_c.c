/*
 * The C backend's run time: stof_build checks the arguments, generates C
 * (codegen_c.c), compiles it with the system compiler ($CC, else "cc") into a shared
 * library cached on disk, loads it with dlopen, and stof_func_call calls it through libffi
 * with an argument list assembled at run time. Target "cuda" shares the argument checks
 * and the stof_func handle and hands the rest to runtime_cuda.c.
 *
 * The cache: stof_cache_dir's "so" folder ($STOF_CACHE_DIR/so, else
 * $XDG_CACHE_HOME/stof/so, else ~/.cache/stof/so; created on first use). A library is named
 * after a hash of the compiler command and the source (stof-<16 hex>.so). It is compiled under a name unique to this process and call, then
 * renamed into place, so two processes never load a half-written file; a cached file that
 * does not load is removed and compiled again.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ffi.h>

#include "schedule_int.h"

#define MAX_ARGS 256
#define CFLAGS "-O2 -shared -fPIC"

typedef struct func_arg {
  int name;                /* offset in names */
  stof_dtype dtype;
  int ndim;
  int64_t shape[STOF_MAX_DIMS];
} func_arg;

struct stof_func {
  stof_ctx *ctx;
  void *dl;
  void *fn;
  int nargs;
  func_arg *arg;
  char *names;
  size_t names_size;
  ffi_cif cif;
  ffi_type **types;
  char *source;
  char *path;
  sched_cuda_func *cuda;   /* target "cuda" (then dl, fn, cif are unused) */
};

/* ---------------------------------------------------------------- the cache */

/* Appends s to b single-quoted for the shell. */
static void shell_quote(stof_buf *b, const char *s) {
  stof_buf_puts(b, "'");
  for (; *s; s++) {
    if (*s == '\'')
      stof_buf_puts(b, "'\\''");
    else
      stof_buf_printf(b, "%c", *s);
  }
  stof_buf_puts(b, "'");
}

static stof_status write_file(stof_ctx *ctx, const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (!f) return stof_ctx_error(ctx, STOF_ERR_IO, "build: cannot write %s: %s", path, strerror(errno));
  size_t n = strlen(text);
  int ok = fwrite(text, 1, n, f) == n;
  ok &= fclose(f) == 0;
  if (!ok) {
    unlink(path);
    return stof_ctx_error(ctx, STOF_ERR_IO, "build: cannot write %s", path);
  }
  return STOF_OK;
}

/* Runs the compiler on src_path into so_path; STOF_ERR_COMPILE carries its output. */
static stof_status compile(stof_ctx *ctx, const char *cc, const char *src_path, const char *so_path) {
  stof_buf cmd;
  stof_buf_init(&cmd, ctx);
  stof_buf_printf(&cmd, "%s %s -o ", cc, CFLAGS);
  shell_quote(&cmd, so_path);
  stof_buf_puts(&cmd, " ");
  shell_quote(&cmd, src_path);
  stof_buf_puts(&cmd, " -lm 2>&1");
  char *line = NULL;
  stof_status st = stof_buf_finish(&cmd, &line);
  if (st) return st;
  fflush(NULL);
  FILE *p = popen(line, "r");
  if (!p) {
    st = stof_ctx_error(ctx, STOF_ERR_COMPILE, "build: cannot run the C compiler (%s): %s", cc,
                        strerror(errno));
    stof_ctx_dealloc(ctx, line, strlen(line) + 1);
    return st;
  }
  char log[2048];
  size_t n = 0, r;
  char chunk[512];
  while ((r = fread(chunk, 1, sizeof chunk, p)) > 0) {
    size_t k = r < sizeof log - 1 - n ? r : sizeof log - 1 - n;
    memcpy(log + n, chunk, k);
    n += k;
  }
  log[n] = 0;
  int status = pclose(p);
  if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    while (n > 0 && (log[n - 1] == '\n' || log[n - 1] == ' ')) log[--n] = 0;
    st = stof_ctx_error(ctx, STOF_ERR_COMPILE, "build: the C compiler failed (%s, exit status %d):\n%s",
                        cc, status == -1 ? -1 : WIFEXITED(status) ? WEXITSTATUS(status) : -1,
                        n ? log : "(no output)");
  }
  stof_ctx_dealloc(ctx, line, strlen(line) + 1);
  return st;
}

static stof_status open_lib(stof_ctx *ctx, const char *path, void **dl, void **fn) {
  dlerror();
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *e = dlerror();
    return stof_ctx_error(ctx, STOF_ERR_IO, "build: cannot load %s: %s", path, e ? e : "?");
  }
  void *f = dlsym(h, "stof_kernel");
  if (!f) {
    dlclose(h);
    return stof_ctx_error(ctx, STOF_ERR_IO, "build: %s has no stof_kernel", path);
  }
  *dl = h;
  *fn = f;
  return STOF_OK;
}

/* The cached library's path for src compiled by cc, into lib (n bytes). */
static stof_status lib_path(stof_ctx *ctx, const char *cc, const char *src, char *lib, size_t n, char *dir,
                            size_t ndir) {
  stof_status st = stof_cache_dir(ctx, "so", dir, ndir);
  if (st) return st;
  uint64_t h = stof_hash_bytes(STOF_HASH_INIT, cc, strlen(cc));
  h = stof_hash_bytes(h, " " CFLAGS "\n", strlen(" " CFLAGS "\n"));
  h = stof_hash_bytes(h, src, strlen(src));
  snprintf(lib, n, "%s/stof-%016llx.so", dir, (unsigned long long)h);
  return STOF_OK;
}

/* Compiles src into lib under a name unique to this process and call, then renames it into
 * place (two processes or threads never see a half-written file). */
static stof_status compile_into(stof_ctx *ctx, const char *cc, const char *src, const char *dir, const char *lib) {
  static unsigned counter;
  char tmp_c[4300], tmp_so[4300];
  unsigned k = __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED);
  const char *base = strrchr(lib, '/');
  snprintf(tmp_c, sizeof tmp_c, "%s/%.21s.%ld.%u.tmp.c", dir, base ? base + 1 : lib, (long)getpid(), k);
  snprintf(tmp_so, sizeof tmp_so, "%s/%.21s.%ld.%u.tmp.so", dir, base ? base + 1 : lib, (long)getpid(), k);
  stof_status st = write_file(ctx, tmp_c, src);
  if (st) return st;
  st = compile(ctx, cc, tmp_c, tmp_so);
  unlink(tmp_c);
  if (st) {
    unlink(tmp_so);
    return st;
  }
  if (rename(tmp_so, lib) != 0) {
    st = stof_ctx_error(ctx, STOF_ERR_IO, "build: cannot move the library into %s: %s", lib, strerror(errno));
    unlink(tmp_so);
  }
  return st;
}

static const char *c_compiler(void) {
  const char *cc = getenv("CC");
  return cc && *cc ? cc : "cc";
}

stof_status sched_runtime_load(stof_ctx *ctx, const char *src, void **dl, void **fn,
                               char **path) {
  *dl = *fn = NULL;
  *path = NULL;
  const char *cc = c_compiler();
  char dir[4096], lib[4200];
  stof_status st = lib_path(ctx, cc, src, lib, sizeof lib, dir, sizeof dir);
  if (st) return st;
  if (access(lib, F_OK) == 0) {
    if (!open_lib(ctx, lib, dl, fn)) goto found;
    stof_ctx_clear_error(ctx);
    unlink(lib); /* corrupt or foreign: compile it again */
  }
  if ((st = compile_into(ctx, cc, src, dir, lib))) return st;
  if ((st = open_lib(ctx, lib, dl, fn))) return st;
found:
  *path = stof_ctx_strdup(ctx, lib);
  if (!*path) {
    dlclose(*dl);
    *dl = *fn = NULL;
    return STOF_ERR_NOMEM;
  }
  return STOF_OK;
}

stof_status sched_runtime_compile(stof_ctx *ctx, const char *src) {
  const char *cc = c_compiler();
  char dir[4096], lib[4200];
  stof_status st = lib_path(ctx, cc, src, lib, sizeof lib, dir, sizeof dir);
  if (st || access(lib, F_OK) == 0) return st;
  return compile_into(ctx, cc, src, dir, lib);
}

/* ---------------------------------------------------------------- build */

void stof_func_free(stof_func *f) {
  if (!f) return;
  stof_ctx *ctx = f->ctx;
  if (f->dl) dlclose(f->dl);
  sched_cuda_func_free(f->cuda);
  if (f->arg) stof_ctx_dealloc(ctx, f->arg, sizeof *f->arg * (size_t)f->nargs);
  if (f->types) stof_ctx_dealloc(ctx, f->types, sizeof *f->types * (size_t)(f->nargs ? f->nargs : 1));
  if (f->names) stof_ctx_dealloc(ctx, f->names, f->names_size);
  if (f->source) stof_ctx_dealloc(ctx, f->source, strlen(f->source) + 1);
  if (f->path) stof_ctx_dealloc(ctx, f->path, strlen(f->path) + 1);
  stof_ctx_dealloc(ctx, f, sizeof *f);
}

stof_status sched_build_check_args(const stof_sched *s, int nargs, const stof_op *const *args) {
  stof_ctx *ctx = s->ctx;
  if (nargs < 1 || !args) return stof_ctx_error(ctx, STOF_ERR_ARG, "build: no arguments given");
  if (nargs > MAX_ARGS)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "build: %d arguments, at most %d", nargs, MAX_ARGS);
  for (int i = 0; i < nargs; i++) {
    if (!args[i]) return stof_ctx_error(ctx, STOF_ERR_ARG, "build: argument %d is missing", i + 1);
    int known = 0;
    for (int k = 0; k < s->nop; k++) known |= s->ops[k] == args[i];
    if (!known)
      return stof_ctx_error(ctx, STOF_ERR_ARG, "build: argument %d (%s) is not an op of this schedule",
                            i + 1, args[i]->name);
    for (int j = 0; j < i; j++)
      if (args[j] == args[i])
        return stof_ctx_error(ctx, STOF_ERR_ARG, "build: argument %s is given twice", args[i]->name);
    if (args[i]->kind == STOF_OP_COMPUTE && sched_writer(s, args[i]) < 0)
      return stof_ctx_error(ctx, STOF_ERR_ARG,
                            "build: argument %d (%s) has no buffer in this schedule (its block was "
                            "inlined)",
                            i + 1, args[i]->name);
  }
  for (int k = 0; k < s->nop; k++) {
    const stof_op *op = s->ops[k];
    int found = 0;
    for (int i = 0; i < nargs; i++) found |= args[i] == op;
    if (found) continue;
    if (op->kind == STOF_OP_PLACEHOLDER)
      return stof_ctx_error(ctx, STOF_ERR_ARG, "build: placeholder %s is read but not among the arguments",
                            op->name);
    for (int i = 0; i < s->nout; i++)
      if (s->out[i] == op)
        return stof_ctx_error(ctx, STOF_ERR_ARG, "build: output %s is not among the arguments", op->name);
  }
  return STOF_OK;
}

stof_status stof_build(const stof_sched *s, int nargs, const stof_op *const *args,
                       const char *target, stof_func **out) {
  stof_ctx *ctx = s->ctx;
  *out = NULL;
  if (!target) target = "c";
  int cuda = strcmp(target, "cuda") == 0;
  if (!cuda && strcmp(target, "c") != 0)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "build: unknown target \"%s\" (expected \"c\" or \"cuda\")",
                          target);
  stof_status st = sched_build_check_args(s, nargs, args);
  if (st) return st;
  stof_func *f = stof_ctx_alloc(ctx, sizeof *f);
  if (!f) return STOF_ERR_NOMEM;
  f->ctx = ctx;
  f->nargs = nargs;
  f->arg = stof_ctx_alloc(ctx, sizeof *f->arg * (size_t)nargs);
  f->types = stof_ctx_alloc(ctx, sizeof *f->types * (size_t)nargs);
  size_t names = 0;
  for (int i = 0; i < nargs; i++) names += strlen(args[i]->name) + 1;
  f->names = stof_ctx_alloc(ctx, names);
  if (f->names) f->names_size = names;
  if (!f->arg || !f->types || !f->names) {
    stof_func_free(f);
    return STOF_ERR_NOMEM;
  }
  size_t off = 0;
  for (int i = 0; i < nargs; i++) {
    func_arg *a = &f->arg[i];
    a->name = (int)off;
    strcpy(f->names + off, args[i]->name);
    off += strlen(args[i]->name) + 1;
    a->dtype = args[i]->dtype;
    a->ndim = args[i]->ndim;
    memcpy(a->shape, args[i]->shape, sizeof a->shape);
    f->types[i] = &ffi_type_pointer;
  }
  if (cuda) {
    if ((st = sched_cuda_build(s, nargs, args, &f->source, &f->cuda))) {
      stof_func_free(f);
      return st;
    }
    *out = f;
    return STOF_OK;
  }
  if (ffi_prep_cif(&f->cif, FFI_DEFAULT_ABI, (unsigned)nargs, &ffi_type_sint, f->types) != FFI_OK) {
    stof_func_free(f);
    return stof_ctx_error(ctx, STOF_ERR_INTERNAL, "build: libffi cannot describe %d pointer arguments", nargs);
  }
  if ((st = sched_codegen_c(s, nargs, args, &f->source)) ||
      (st = sched_runtime_load(ctx, f->source, &f->dl, &f->fn, &f->path))) {
    stof_func_free(f);
    return st;
  }
  *out = f;
  return STOF_OK;
}

/* ---------------------------------------------------------------- calls */

static const char *shape_text(char *buf, size_t cap, int ndim, const int64_t *shape) {
  size_t n = (size_t)snprintf(buf, cap, "[");
  for (int d = 0; d < ndim && n < cap - 24; d++)
    n += (size_t)snprintf(buf + n, cap - n, "%s%lld", d ? ", " : "", (long long)shape[d]);
  snprintf(buf + n, cap - n, "]");
  return buf;
}

/* Checks tensors[0..ntensor) against f's arguments (what names the caller in messages:
 * "call", "time") and gives their data pointers. */
static stof_status check_tensors(stof_func *f, const char *what, int ntensor,
                                 stof_tensor *const *tensors, void **ptrs, uint64_t *dptrs) {
  stof_ctx *ctx = f->ctx;
  if (ntensor != f->nargs || (!tensors && ntensor))
    return stof_ctx_error(ctx, STOF_ERR_ARG, "%s: %d tensors given for %d arguments", what, ntensor, f->nargs);
  stof_device want = f->cuda ? STOF_DEVICE_CUDA : STOF_DEVICE_CPU;
  char a[160], b[160];
  for (int i = 0; i < f->nargs; i++) {
    const func_arg *fa = &f->arg[i];
    const char *name = f->names + fa->name;
    const stof_tensor *t = tensors[i];
    if (!t) return stof_ctx_error(ctx, STOF_ERR_ARG, "%s: argument %d (%s) is missing", what, i + 1, name);
    if (t->device != want)
      return stof_ctx_error(ctx, STOF_ERR_ARG, "%s: argument %d (%s) is on %s; the %s backend takes %s tensors",
                            what, i + 1, name, t->device == STOF_DEVICE_CUDA ? "cuda" : "the CPU",
                            f->cuda ? "CUDA" : "C", f->cuda ? "CUDA" : "CPU");
    if (t->dtype != fa->dtype)
      return stof_ctx_error(ctx, STOF_ERR_TYPE, "%s: argument %d (%s): dtype %s given, %s expected", what, i + 1,
                            name, stof_dtype_name(t->dtype), stof_dtype_name(fa->dtype));
    if (t->ndim != fa->ndim || memcmp(t->shape, fa->shape, sizeof(int64_t) * (size_t)fa->ndim))
      return stof_ctx_error(ctx, STOF_ERR_SHAPE, "%s: argument %d (%s): shape %s given, %s expected", what, i + 1,
                            name, shape_text(a, sizeof a, t->ndim, t->shape),
                            shape_text(b, sizeof b, fa->ndim, fa->shape));
    if (!stof_tensor_is_contiguous(t))
      return stof_ctx_error(ctx, STOF_ERR_ARG, "%s: argument %d (%s) is not contiguous (copy it first)",
                            what, i + 1, name);
    ptrs[i] = t->data;
    dptrs[i] = (uint64_t)(uintptr_t)t->data;
  }
  return STOF_OK;
}

stof_status stof_func_call(stof_func *f, int ntensor, stof_tensor *const *tensors) {
  void *ptrs[MAX_ARGS], *values[MAX_ARGS];
  uint64_t dptrs[MAX_ARGS];
  stof_status st = check_tensors(f, "call", ntensor, tensors, ptrs, dptrs);
  if (st) return st;
  if (f->cuda) return sched_cuda_call(f->cuda, dptrs);
  for (int i = 0; i < f->nargs; i++) values[i] = &ptrs[i];
  ffi_arg rc = 0;
  ffi_call(&f->cif, FFI_FN(f->fn), &rc, values);
  if ((int)rc != 0)
    return stof_ctx_error(f->ctx, STOF_ERR_NOMEM, "call: the generated code could not allocate its temporaries");
  return STOF_OK;
}

stof_status stof_func_time(stof_func *f, int ntensor, stof_tensor *const *tensors, int reps,
                           int warmup, double *ms) {
  stof_ctx *ctx = f->ctx;
  *ms = 0;
  if (reps < 1 || warmup < 0)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "time: reps = %d and warmup = %d (reps >= 1, warmup >= 0)", reps,
                          warmup);
  if (!f->cuda)
    return stof_ctx_error(ctx, STOF_ERR_ARG,
                          "time: the function was built for target \"c\"; only \"cuda\" builds are timed "
                          "(with CUDA events, on a GPU)");
  void *ptrs[MAX_ARGS];
  uint64_t dptrs[MAX_ARGS];
  stof_status st = check_tensors(f, "time", ntensor, tensors, ptrs, dptrs);
  if (st) return st;
  return sched_cuda_time(f->cuda, dptrs, reps, warmup, ms);
}

stof_status stof_func_launch(stof_func *f, const uint64_t *addrs) {
  if (f->cuda) return sched_cuda_launch(f->cuda, addrs);
  void *ptrs[MAX_ARGS], *values[MAX_ARGS];
  for (int i = 0; i < f->nargs; i++) {
    ptrs[i] = (void *)(uintptr_t)addrs[i];
    values[i] = &ptrs[i];
  }
  ffi_arg rc = 0;
  ffi_call(&f->cif, FFI_FN(f->fn), &rc, values);
  if ((int)rc != 0)
    return stof_ctx_error(f->ctx, STOF_ERR_NOMEM, "launch: the generated code could not allocate its temporaries");
  return STOF_OK;
}

int stof_func_ntemp(const stof_func *f) { return f->cuda ? sched_cuda_ntemp(f->cuda) : 0; }
size_t stof_func_temp_bytes(const stof_func *f, int i) {
  return f->cuda && i >= 0 && i < sched_cuda_ntemp(f->cuda) ? sched_cuda_temp_bytes(f->cuda, i) : 0;
}

int stof_func_nargs(const stof_func *f) { return f->nargs; }
const char *stof_func_source(const stof_func *f) { return f->source; }
const char *stof_func_library(const stof_func *f) { return f->path; }

stof_status stof_build_source(const stof_sched *s, int nargs, const stof_op *const *args,
                              const char *target, char **source) {
  *source = NULL;
  if (!target) target = "c";
  int cuda = strcmp(target, "cuda") == 0;
  if (!cuda && strcmp(target, "c") != 0)
    return stof_ctx_error(s->ctx, STOF_ERR_ARG,
                          "build_source: unknown target \"%s\" (expected \"c\" or \"cuda\")", target);
  stof_status st = sched_build_check_args(s, nargs, args);
  if (st) return st;
  return cuda ? sched_codegen_cuda(s, nargs, args, source, NULL) : sched_codegen_c(s, nargs, args, source);
}
