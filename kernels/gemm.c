/*
 * Dense GEMM as an intrinsic: the CPU implementation (f64 accumulation) and the vendor
 * library on the GPU, cuBLASLt, opened with dlopen (never linked: binaries start where it
 * is missing, and only plan creation reports its absence).
 *
 * Invariants:
 *  - Row-major D = A B (stof's convention) is column-major D^T = B^T A^T: cuBLASLt's "A" is
 *    our B and its "B" our A, its m is our N and its n our M. D^T has N rows, so cuBLASLt's
 *    BIAS epilogue (a vector as long as D's rows, broadcast across columns) adds bias[n] to
 *    every D[m, n], which is the row-major bias we promise.
 *  - cuBLASLt is loaded and its handle created once per process (pthread_once); the
 *    outcome is kept in `lt` and re-reported into the caller's context by every plan.
 *  - A plan owns its descriptors and heuristic results; running it only sets the bias
 *    pointer on its descriptor and calls cublasLtMatmul: no allocation, no synchronisation.
 */
#define _GNU_SOURCE /* dladdr */
#include <dlfcn.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublasLt.h>
#include <nvrtc.h>

#include "kernels_int.h"

/* ---------------------------------------------------------------- epilogues */

static const struct {
  const char *name;
  int bias, act;
} epi_props[] = {
#define STOF_X(name, text, bias, act) {text, bias, act},
    STOF_GEMM_EPI_LIST(STOF_X)
#undef STOF_X
};

const char *stof_gemm_epilogue_name(stof_gemm_epilogue e) {
  return (unsigned)e < STOF_GEMM_EPI_COUNT ? epi_props[e].name : "?";
}

int stof_gemm_epilogue_has_bias(stof_gemm_epilogue e) {
  return (unsigned)e < STOF_GEMM_EPI_COUNT && epi_props[e].bias;
}

/* ---------------------------------------------------------------- checks */

static int64_t nbatch(const stof_gemm_desc *d) { return d->batch > 1 ? d->batch : 1; }

/* Elements an operand of rows x cols with batch stride reaches: (batch - 1) * stride +
 * rows * cols; -1 past int64 (the sizes are positive and were checked one by one). */
static int64_t extent(const stof_gemm_desc *d, int64_t rows, int64_t cols, int64_t stride) {
  if (rows > INT64_MAX / cols) return -1;
  int64_t one = rows * cols, n = nbatch(d);
  if (n == 1) return one;
  if (stride > 0 && n - 1 > (INT64_MAX - one) / stride) return -1;
  return (n - 1) * stride + one;
}

/* The stored shapes [rows, cols] of A and B. */
static void stored_a(const stof_gemm_desc *d, int64_t rc[2]) {
  rc[0] = d->trans_a ? d->K : d->M;
  rc[1] = d->trans_a ? d->M : d->K;
}
static void stored_b(const stof_gemm_desc *d, int64_t rc[2]) {
  rc[0] = d->trans_b ? d->N : d->K;
  rc[1] = d->trans_b ? d->K : d->N;
}

stof_status stof_gemm_check(stof_ctx *ctx, const stof_gemm_desc *d) {
  if (!d) return stof_ctx_error(ctx, STOF_ERR_ARG, "gemm: the description is NULL");
  const struct {
    const char *name;
    int64_t v;
  } sizes[3] = {{"M", d->M}, {"N", d->N}, {"K", d->K}};
  for (int i = 0; i < 3; i++)
    if (sizes[i].v <= 0)
      return stof_ctx_error(ctx, STOF_ERR_ARG, "gemm: %s = %lld (sizes must be positive)",
                            sizes[i].name, (long long)sizes[i].v);
  if (d->batch < 0 || d->batch > INT32_MAX)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "gemm: batch = %lld (0 or 1 for one product, at most %d)",
                          (long long)d->batch, INT32_MAX);
  if ((d->trans_a != 0 && d->trans_a != 1) || (d->trans_b != 0 && d->trans_b != 1))
    return stof_ctx_error(ctx, STOF_ERR_ARG, "gemm: trans_%s = %d (0 or 1)",
                          d->trans_a != 0 && d->trans_a != 1 ? "a" : "b",
                          d->trans_a != 0 && d->trans_a != 1 ? d->trans_a : d->trans_b);
  if ((unsigned)d->epi >= STOF_GEMM_EPI_COUNT)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "gemm: unknown epilogue %d", (int)d->epi);
  if (!isfinite(d->alpha) || !isfinite(d->beta))
    return stof_ctx_error(ctx, STOF_ERR_ARG, "gemm: %s = %g (must be finite)",
                          !isfinite(d->alpha) ? "alpha" : "beta",
                          !isfinite(d->alpha) ? (double)d->alpha : (double)d->beta);
  if (d->dtype != STOF_DTYPE_F16 && d->dtype != STOF_DTYPE_BF16 && d->dtype != STOF_DTYPE_F32)
    return stof_ctx_error(ctx, STOF_ERR_UNSUPPORTED,
                          "gemm: dtype %s (float16, bfloat16 or float32; cast the operands)",
                          (unsigned)d->dtype < STOF_DTYPE_COUNT ? stof_dtype_name(d->dtype) : "?");
  if (nbatch(d) > 1) {
    const struct {
      const char *name;
      int64_t v;
    } strides[3] = {{"stride_a", d->stride_a}, {"stride_b", d->stride_b}, {"stride_c", d->stride_c}};
    for (int i = 0; i < 3; i++)
      if (strides[i].v < 0)
        return stof_ctx_error(ctx, STOF_ERR_ARG, "gemm: %s = %lld (must be >= 0)", strides[i].name,
                              (long long)strides[i].v);
    if (d->M <= INT64_MAX / d->N && d->stride_c < d->M * d->N)
      return stof_ctx_error(ctx, STOF_ERR_ARG,
                            "gemm: stride_c = %lld < M * N = %lld: the batch's outputs would overlap",
                            (long long)d->stride_c, (long long)(d->M * d->N));
  }
  int64_t ra[2], rb[2];
  stored_a(d, ra);
  stored_b(d, rb);
  const struct {
    const char *name;
    int64_t rows, cols, stride;
  } ops[3] = {{"A", ra[0], ra[1], d->stride_a},
              {"B", rb[0], rb[1], d->stride_b},
              {"C/D", d->M, d->N, d->stride_c}};
  int64_t es = (int64_t)stof_dtype_size(d->dtype);
  for (int i = 0; i < 3; i++) {
    int64_t n = extent(d, ops[i].rows, ops[i].cols, ops[i].stride);
    if (n < 0 || n > INT64_MAX / es || (uint64_t)(n * es) > (uint64_t)SIZE_MAX)
      return stof_ctx_error(ctx, STOF_ERR_ARG,
                            "gemm: %s of %lld x %lld (batch %lld, stride %lld) overflows 64-bit sizes",
                            ops[i].name, (long long)ops[i].rows, (long long)ops[i].cols,
                            (long long)nbatch(d), (long long)ops[i].stride);
  }
  return STOF_OK;
}

/* ---------------------------------------------------------------- CPU */

static double gelu_tanh(double x) {
  const double k = 0.79788456080286535588; /* sqrt(2 / pi) */
  return 0.5 * x * (1.0 + tanh(k * (x + 0.044715 * x * x * x)));
}

/* A CPU operand: contiguous, float, [..., rows, cols], holding `need` elements. */
static stof_status check_operand(stof_ctx *ctx, const char *name, const stof_tensor *t,
                                 int64_t rows, int64_t cols, int64_t need) {
  if (t->device != STOF_DEVICE_CPU || !stof_tensor_is_contiguous(t))
    return stof_ctx_error(ctx, STOF_ERR_ARG, "gemm (cpu): %s must be a contiguous CPU tensor", name);
  if (!stof_dtype_is_float(t->dtype))
    return stof_ctx_error(ctx, STOF_ERR_TYPE, "gemm (cpu): %s is %s (a float dtype expected)", name,
                          stof_dtype_name(t->dtype));
  if (rows < 0) { /* a vector */
    if (stof_tensor_numel(t) != need)
      return stof_ctx_error(ctx, STOF_ERR_SHAPE, "gemm (cpu): %s has %lld elements, N = %lld expected",
                            name, (long long)stof_tensor_numel(t), (long long)need);
    return STOF_OK;
  }
  if (t->ndim < 2 || t->shape[t->ndim - 2] != rows || t->shape[t->ndim - 1] != cols)
    return stof_ctx_error(ctx, STOF_ERR_SHAPE,
                          "gemm (cpu): %s must end in the stored shape [%lld, %lld] (%d dimensions, last %lld)",
                          name, (long long)rows, (long long)cols, t->ndim,
                          t->ndim ? (long long)t->shape[t->ndim - 1] : 0LL);
  if (stof_tensor_numel(t) < need)
    return stof_ctx_error(ctx, STOF_ERR_SHAPE,
                          "gemm (cpu): %s holds %lld elements, the batch strides reach %lld", name,
                          (long long)stof_tensor_numel(t), (long long)need);
  return STOF_OK;
}

stof_status stof_gemm_cpu(stof_ctx *ctx, const stof_gemm_desc *d, const stof_tensor *a,
                          const stof_tensor *b, const stof_tensor *c, const stof_tensor *bias,
                          stof_tensor *out) {
  stof_status st = stof_gemm_check(ctx, d);
  if (st) return st;
  int has_bias = epi_props[d->epi].bias, act = epi_props[d->epi].act;
  if (!a || !b || !out || (d->beta != 0 && !c) || (has_bias && !bias))
    return stof_ctx_error(ctx, STOF_ERR_ARG, "gemm (cpu): missing %s",
                          !a ? "a" : !b ? "b" : !out ? "out"
                          : (d->beta != 0 && !c) ? "c (beta is not 0)"
                                                 : "bias (the epilogue adds one)");
  int64_t M = d->M, N = d->N, K = d->K, nb = nbatch(d);
  int64_t ra[2], rb[2];
  stored_a(d, ra);
  stored_b(d, rb);
  if ((st = check_operand(ctx, "a", a, ra[0], ra[1], extent(d, ra[0], ra[1], d->stride_a))) ||
      (st = check_operand(ctx, "b", b, rb[0], rb[1], extent(d, rb[0], rb[1], d->stride_b))) ||
      (st = check_operand(ctx, "out", out, M, N, extent(d, M, N, d->stride_c))) ||
      (d->beta != 0 && (st = check_operand(ctx, "c", c, M, N, extent(d, M, N, d->stride_c)))) ||
      (has_bias && (st = check_operand(ctx, "bias", bias, -1, -1, N))))
    return st;
  if (out->data == a->data || out->data == b->data || (has_bias && out->data == bias->data))
    return stof_ctx_error(ctx, STOF_ERR_ARG, "gemm (cpu): out may not share storage with a, b or bias");

  /* A as [M][K] and B as [N][K] in f64, so that each dot product runs along memory. */
  size_t na = (size_t)(M * K), nbv = (size_t)(N * K);
  double *ad = stof_ctx_alloc(ctx, sizeof *ad * na), *bd = stof_ctx_alloc(ctx, sizeof *bd * nbv);
  double *bv = stof_ctx_alloc(ctx, sizeof *bv * (size_t)N);
  if (!ad || !bd || !bv) {
    st = STOF_ERR_NOMEM;
    goto done;
  }
  for (int64_t n = 0; n < N; n++) bv[n] = has_bias ? stof_tensor_load(bias, n) : 0.0;
  for (int64_t i = 0; i < nb; i++) {
    int64_t oa = i * d->stride_a, ob = i * d->stride_b, oc = i * d->stride_c;
    if (i > 0 && d->stride_a == 0) oa = -1; /* shared: already loaded */
    if (oa >= 0)
      for (int64_t m = 0; m < M; m++)
        for (int64_t k = 0; k < K; k++)
          ad[m * K + k] = stof_tensor_load(a, oa + (d->trans_a ? k * M + m : m * K + k));
    if (i == 0 || d->stride_b != 0)
      for (int64_t n = 0; n < N; n++)
        for (int64_t k = 0; k < K; k++)
          bd[n * K + k] = stof_tensor_load(b, ob + (d->trans_b ? n * K + k : k * N + n));
    for (int64_t m = 0; m < M; m++) {
      const double *ar = ad + m * K;
      for (int64_t n = 0; n < N; n++) {
        const double *br = bd + n * K;
        double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        int64_t k = 0;
        for (; k + 4 <= K; k += 4) {
          s0 += ar[k] * br[k];
          s1 += ar[k + 1] * br[k + 1];
          s2 += ar[k + 2] * br[k + 2];
          s3 += ar[k + 3] * br[k + 3];
        }
        for (; k < K; k++) s0 += ar[k] * br[k];
        double v = (double)d->alpha * ((s0 + s1) + (s2 + s3)) + bv[n];
        if (d->beta != 0) v += (double)d->beta * stof_tensor_load(c, oc + m * N + n);
        if (act == 1) v = v > 0 ? v : 0.0;
        else if (act == 2) v = gelu_tanh(v);
        stof_tensor_store(out, oc + m * N + n, v);
      }
    }
  }
done:
  stof_ctx_dealloc(ctx, ad, sizeof *ad * na);
  stof_ctx_dealloc(ctx, bd, sizeof *bd * nbv);
  stof_ctx_dealloc(ctx, bv, sizeof *bv * (size_t)N);
  return st;
}

/* ---------------------------------------------------------------- cuBLASLt */

/* X(field, symbol): the cuBLASLt entry points used. */
#define LT_SYMBOLS(X)                                   \
  X(create, cublasLtCreate)                             \
  X(get_version, cublasLtGetVersion)                    \
  X(status_name, cublasLtGetStatusName)                 \
  X(status_string, cublasLtGetStatusString)             \
  X(desc_create, cublasLtMatmulDescCreate)              \
  X(desc_destroy, cublasLtMatmulDescDestroy)            \
  X(desc_set, cublasLtMatmulDescSetAttribute)           \
  X(layout_create, cublasLtMatrixLayoutCreate)          \
  X(layout_destroy, cublasLtMatrixLayoutDestroy)        \
  X(layout_set, cublasLtMatrixLayoutSetAttribute)       \
  X(pref_create, cublasLtMatmulPreferenceCreate)        \
  X(pref_destroy, cublasLtMatmulPreferenceDestroy)      \
  X(pref_set, cublasLtMatmulPreferenceSetAttribute)     \
  X(heuristic, cublasLtMatmulAlgoGetHeuristic)          \
  X(matmul, cublasLtMatmul)

static struct {
  void *lib;
  stof_status status; /* of loading and creating the handle */
  char message[1024];
  char path[512];     /* the file loaded */
  cublasLtHandle_t handle;
#define LT_FIELD(field, sym) __typeof__(sym) *field;
  LT_SYMBOLS(LT_FIELD)
#undef LT_FIELD
} lt;

static pthread_once_t lt_once = PTHREAD_ONCE_INIT;

static const char *const lt_names[] = {"libcublasLt.so.13", "libcublasLt.so.12"};
#define NLT_NAMES ((int)(sizeof lt_names / sizeof lt_names[0]))

/* dlopen of dir/name; appends what was tried to `tried`. */
static void *try_open(const char *dir, const char *name, char *tried, size_t n) {
  char path[sizeof lt.path];
  if (dir)
    snprintf(path, sizeof path, "%s/%s", dir, name);
  else
    snprintf(path, sizeof path, "%s", name);
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (h) {
    snprintf(lt.path, sizeof lt.path, "%s", path);
    return h;
  }
  size_t len = strlen(tried);
  if (len + 8 < n) snprintf(tried + len, n - len, "%s%s", len ? ", " : "", path);
  return NULL;
}

static void *open_lib(char *tried, size_t n) {
  void *h = NULL;
  for (int i = 0; i < NLT_NAMES && !h; i++) h = try_open(NULL, lt_names[i], tried, n);
  if (!h) h = try_open(NULL, "libcublasLt.so", tried, n);
  for (int i = 0; i < NLT_NAMES && !h; i++) h = try_open("/usr/local/cuda/lib64", lt_names[i], tried, n);
  const char *home = getenv("CUDA_HOME");
  if (home && home[0]) {
    char dir[400];
    snprintf(dir, sizeof dir, "%s/lib64", home);
    for (int i = 0; i < NLT_NAMES && !h; i++) h = try_open(dir, lt_names[i], tried, n);
  }
  /* beside the libnvrtc we were linked with: the toolkit's lib64, or Python's nvidia
   * packages (nvidia/cu13/lib, or nvidia/cuda_nvrtc/lib next to nvidia/cublas/lib) */
  Dl_info info;
  if (!h && dladdr((void *)nvrtcVersion, &info) && info.dli_fname && strchr(info.dli_fname, '/')) {
    char dir[400];
    snprintf(dir, sizeof dir, "%s", info.dli_fname);
    *strrchr(dir, '/') = 0;
    for (int i = 0; i < NLT_NAMES && !h; i++) h = try_open(dir, lt_names[i], tried, n);
    size_t len = strlen(dir);
    if (!h && len + 20 < sizeof dir) {
      strcat(dir, "/../../cublas/lib");
      for (int i = 0; i < NLT_NAMES && !h; i++) h = try_open(dir, lt_names[i], tried, n);
    }
  }
  return h;
}

static void lt_fail(stof_status status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void lt_fail(stof_status status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(lt.message, sizeof lt.message, fmt, ap);
  va_end(ap);
  lt.status = status;
}

/* "CUBLAS_STATUS_NOT_SUPPORTED (the functionality requested is not supported)". */
static void lt_describe(cublasStatus_t s, char *buf, size_t n) {
  const char *name = lt.status_name ? lt.status_name(s) : NULL;
  const char *text = lt.status_string ? lt.status_string(s) : NULL;
  if (name && text)
    snprintf(buf, n, "%s (%s)", name, text);
  else
    snprintf(buf, n, "cuBLAS status %d", (int)s);
}

/* Runs once, with the primary context current on the calling thread. */
static void lt_open(void) {
  char tried[700] = "";
  lt.status = STOF_ERR_INTERNAL;
  lt.lib = open_lib(tried, sizeof tried);
  if (!lt.lib) {
    lt_fail(STOF_ERR_UNSUPPORTED,
            "gemm: cuBLASLt is not available (tried %s); the vendor GEMM cannot run here: "
            "install cuBLAS or run the GEMM with generated code",
            tried);
    return;
  }
#define LT_LOAD(field, sym)                                                                   \
  lt.field = (__typeof__(sym) *)dlsym(lt.lib, #sym);                                          \
  if (!lt.field) {                                                                            \
    lt_fail(STOF_ERR_UNSUPPORTED, "gemm: %s has no %s (cuBLASLt 12 or newer needed)", lt.path, \
            #sym);                                                                            \
    return;                                                                                   \
  }
  LT_SYMBOLS(LT_LOAD)
#undef LT_LOAD
  cublasStatus_t s = lt.create(&lt.handle);
  if (s != CUBLAS_STATUS_SUCCESS) {
    char why[256];
    lt_describe(s, why, sizeof why);
    lt_fail(STOF_ERR_CUDA, "cuBLASLt: cublasLtCreate failed (%s): %s", lt.path, why);
    return;
  }
  lt.status = STOF_OK;
}

static stof_status lt_ready(stof_ctx *ctx) {
  stof_status st = stof_cuda_init(ctx); /* the driver, with the primary context current */
  if (st) return st;
  pthread_once(&lt_once, lt_open);
  if (lt.status != STOF_OK) return stof_ctx_error(ctx, lt.status, "%s", lt.message);
  return STOF_OK;
}

/* ---------------------------------------------------------------- plans */

struct stof_gemm_plan {
  stof_ctx *ctx;
  stof_gemm_desc d;
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t lay_b, lay_a, lay_cd; /* cuBLASLt's A (our B), B (our A), C = D */
  uint32_t align_a, align_b, align_cd;         /* bytes promised for our A, B, C and D */
  int nalgo, algo;
  cublasLtMatmulHeuristicResult_t heur[STOF_GEMM_MAX_ALGO];
};

#define PTR_ALIGN 256u /* what cuMemAlloc gives and exec/ promises */

/* The alignment of every product's pointer: the base's, lowered by the batch stride. */
static uint32_t batch_align(const stof_gemm_desc *d, int64_t stride) {
  if (nbatch(d) == 1 || stride == 0) return PTR_ALIGN;
  uint64_t bytes = (uint64_t)stride * stof_dtype_size(d->dtype);
  uint32_t a = PTR_ALIGN;
  while (bytes % a) a /= 2;
  return a;
}

static cudaDataType_t lt_type(stof_dtype t) {
  return t == STOF_DTYPE_F16 ? CUDA_R_16F : t == STOF_DTYPE_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

static cublasLtEpilogue_t lt_epilogue(stof_gemm_epilogue e) {
  switch (e) {
  case STOF_GEMM_EPI_BIAS: return CUBLASLT_EPILOGUE_BIAS;
  case STOF_GEMM_EPI_RELU: return CUBLASLT_EPILOGUE_RELU;
  case STOF_GEMM_EPI_RELU_BIAS: return CUBLASLT_EPILOGUE_RELU_BIAS;
  case STOF_GEMM_EPI_GELU: return CUBLASLT_EPILOGUE_GELU;
  case STOF_GEMM_EPI_GELU_BIAS: return CUBLASLT_EPILOGUE_GELU_BIAS;
  default: return CUBLASLT_EPILOGUE_DEFAULT;
  }
}

/* "M=128 N=768 K=768 batch 1 float16 trans_a 0 trans_b 1 epilogue gelu_bias" */
static void desc_str(const stof_gemm_desc *d, char *buf, size_t n) {
  snprintf(buf, n, "M=%lld N=%lld K=%lld batch %lld %s trans_a %d trans_b %d epilogue %s",
           (long long)d->M, (long long)d->N, (long long)d->K, (long long)nbatch(d),
           stof_dtype_name(d->dtype), d->trans_a, d->trans_b, stof_gemm_epilogue_name(d->epi));
}

static stof_status lt_error(stof_ctx *ctx, cublasStatus_t s, const char *fn, const stof_gemm_desc *d) {
  char why[256], what[192];
  lt_describe(s, why, sizeof why);
  desc_str(d, what, sizeof what);
  return stof_ctx_error(ctx, STOF_ERR_CUDA, "cuBLASLt: %s failed for %s: %s", fn, what, why);
}

void stof_gemm_plan_free(stof_gemm_plan *p) {
  if (!p) return;
  if (p->op) lt.desc_destroy(p->op);
  if (p->lay_a) lt.layout_destroy(p->lay_a);
  if (p->lay_b) lt.layout_destroy(p->lay_b);
  if (p->lay_cd) lt.layout_destroy(p->lay_cd);
  stof_ctx_dealloc(p->ctx, p, sizeof *p);
}

/* A column-major layout of rows x cols (leading dimension rows), batched as d says. */
static cublasStatus_t make_layout(const stof_gemm_desc *d, int64_t rows, int64_t cols,
                                  int64_t stride, cublasLtMatrixLayout_t *out) {
  cublasStatus_t s = lt.layout_create(out, lt_type(d->dtype), (uint64_t)rows, (uint64_t)cols, rows);
  if (s != CUBLAS_STATUS_SUCCESS) {
    *out = NULL;
    return s;
  }
  if (nbatch(d) > 1) {
    int32_t count = (int32_t)nbatch(d);
    int64_t off = stride;
    s = lt.layout_set(*out, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count);
    if (s == CUBLAS_STATUS_SUCCESS)
      s = lt.layout_set(*out, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &off, sizeof off);
  }
  return s;
}

stof_status stof_gemm_plan_new(stof_ctx *ctx, const stof_gemm_desc *d, int algo,
                               stof_gemm_plan **out) {
  if (out) *out = NULL;
  stof_status st = stof_gemm_check(ctx, d);
  if (st) return st;
  if (!out) return stof_ctx_error(ctx, STOF_ERR_ARG, "gemm plan: out is NULL");
  if (algo < 0 || algo >= STOF_GEMM_MAX_ALGO)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "gemm plan: algo %d (0 to %d)", algo, STOF_GEMM_MAX_ALGO - 1);
  if ((st = lt_ready(ctx))) return st;
  stof_gemm_plan *p = stof_ctx_alloc(ctx, sizeof *p);
  if (!p) return STOF_ERR_NOMEM;
  p->ctx = ctx;
  p->d = *d;
  p->align_a = batch_align(d, d->stride_a);
  p->align_b = batch_align(d, d->stride_b);
  p->align_cd = batch_align(d, d->stride_c);

  cublasLtMatmulPreference_t pref = NULL;
  const char *fn = "cublasLtMatmulDescCreate";
  cublasStatus_t s = lt.desc_create(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  if (s != CUBLAS_STATUS_SUCCESS) p->op = NULL;
  int32_t ta = d->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N; /* cuBLASLt's A is our B */
  int32_t tb = d->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  uint32_t epi = (uint32_t)lt_epilogue(d->epi);
  if (s == CUBLAS_STATUS_SUCCESS) {
    fn = "cublasLtMatmulDescSetAttribute";
    s = lt.desc_set(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
  }
  if (s == CUBLAS_STATUS_SUCCESS) s = lt.desc_set(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
  if (s == CUBLAS_STATUS_SUCCESS) s = lt.desc_set(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
  if (s == CUBLAS_STATUS_SUCCESS && epi_props[d->epi].bias) {
    /* the heuristic reads the pointer's alignment only: a stand-in with the promised one */
    const void *stand_in = (const void *)(uintptr_t)PTR_ALIGN;
    s = lt.desc_set(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &stand_in, sizeof stand_in);
  }
  /* column-major: our B is N x K (trans_b 0: ld N) or stored K x N (trans_b 1: ld K); our
   * A is K x M (trans_a 0: ld K) or stored M x K (trans_a 1: ld M); C and D are N x M. */
  if (s == CUBLAS_STATUS_SUCCESS) {
    fn = "cublasLtMatrixLayoutCreate";
    s = make_layout(d, d->trans_b ? d->K : d->N, d->trans_b ? d->N : d->K, d->stride_b, &p->lay_b);
  }
  if (s == CUBLAS_STATUS_SUCCESS)
    s = make_layout(d, d->trans_a ? d->M : d->K, d->trans_a ? d->K : d->M, d->stride_a, &p->lay_a);
  if (s == CUBLAS_STATUS_SUCCESS) s = make_layout(d, d->N, d->M, d->stride_c, &p->lay_cd);
  if (s == CUBLAS_STATUS_SUCCESS) {
    fn = "cublasLtMatmulPreferenceCreate";
    s = lt.pref_create(&pref);
    if (s != CUBLAS_STATUS_SUCCESS) pref = NULL;
  }
  uint64_t ws = STOF_GEMM_MAX_WORKSPACE;
  if (s == CUBLAS_STATUS_SUCCESS) {
    fn = "cublasLtMatmulPreferenceSetAttribute";
    s = lt.pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
  }
  /* cuBLASLt's A is our B */
  if (s == CUBLAS_STATUS_SUCCESS)
    s = lt.pref_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &p->align_b, sizeof p->align_b);
  if (s == CUBLAS_STATUS_SUCCESS)
    s = lt.pref_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &p->align_a, sizeof p->align_a);
  if (s == CUBLAS_STATUS_SUCCESS)
    s = lt.pref_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &p->align_cd, sizeof p->align_cd);
  if (s == CUBLAS_STATUS_SUCCESS)
    s = lt.pref_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &p->align_cd, sizeof p->align_cd);
  int nret = 0;
  if (s == CUBLAS_STATUS_SUCCESS) {
    fn = "cublasLtMatmulAlgoGetHeuristic";
    s = lt.heuristic(lt.handle, p->op, p->lay_b, p->lay_a, p->lay_cd, p->lay_cd, pref,
                     STOF_GEMM_MAX_ALGO, p->heur, &nret);
  }
  if (pref) lt.pref_destroy(pref);
  if (s == CUBLAS_STATUS_SUCCESS || s == CUBLAS_STATUS_NOT_SUPPORTED) {
    /* keep the usable results, in the heuristic's order */
    int n = 0;
    for (int i = 0; s == CUBLAS_STATUS_SUCCESS && i < nret && i < STOF_GEMM_MAX_ALGO; i++)
      if (p->heur[i].state == CUBLAS_STATUS_SUCCESS && p->heur[i].workspaceSize <= ws)
        p->heur[n++] = p->heur[i];
    p->nalgo = n;
    char what[192];
    desc_str(d, what, sizeof what);
    if (n == 0)
      st = stof_ctx_error(ctx, STOF_ERR_UNSUPPORTED,
                          "gemm: cuBLASLt has no algorithm for %s (leading dimensions %lld, %lld, "
                          "%lld elements); run this GEMM with generated code",
                          what, (long long)(d->trans_a ? d->M : d->K),
                          (long long)(d->trans_b ? d->K : d->N), (long long)d->N);
    else if (algo >= n)
      st = stof_ctx_error(ctx, STOF_ERR_ARG, "gemm plan: algo %d, but the heuristic gave %d for %s",
                          algo, n, what);
  } else {
    st = lt_error(ctx, s, fn, d);
  }
  if (st) {
    stof_gemm_plan_free(p);
    return st;
  }
  p->algo = algo;
  *out = p;
  return STOF_OK;
}

int stof_gemm_plan_nalgo(const stof_gemm_plan *p) { return p ? p->nalgo : 0; }

size_t stof_gemm_plan_workspace(const stof_gemm_plan *p) {
  return p ? p->heur[p->algo].workspaceSize : 0;
}

const stof_gemm_desc *stof_gemm_plan_desc(const stof_gemm_plan *p) { return p ? &p->d : NULL; }

static stof_status check_ptr(stof_ctx *ctx, const char *name, uint64_t ptr, uint32_t align) {
  if (!ptr) return stof_ctx_error(ctx, STOF_ERR_ARG, "gemm run: %s is a null device pointer", name);
  if (ptr % align)
    return stof_ctx_error(ctx, STOF_ERR_ARG,
                          "gemm run: %s at 0x%llx is not %u-byte aligned (the plan promised "
                          "cuBLASLt that alignment)",
                          name, (unsigned long long)ptr, align);
  return STOF_OK;
}

stof_status stof_gemm_plan_run(stof_gemm_plan *p, stof_cuda_stream *stream, uint64_t a,
                               uint64_t b, uint64_t c, uint64_t bias, uint64_t d,
                               uint64_t workspace, size_t ws_bytes) {
  if (!p) return STOF_ERR_ARG;
  stof_ctx *ctx = p->ctx;
  const stof_gemm_desc *g = &p->d;
  int has_bias = epi_props[g->epi].bias;
  size_t need = p->heur[p->algo].workspaceSize;
  stof_status st;
  if ((st = check_ptr(ctx, "a", a, p->align_a)) || (st = check_ptr(ctx, "b", b, p->align_b)) ||
      (st = check_ptr(ctx, "d", d, p->align_cd)) ||
      (g->beta != 0 && (st = check_ptr(ctx, "c (beta is not 0)", c, p->align_cd))) ||
      (has_bias && (st = check_ptr(ctx, "bias", bias, PTR_ALIGN))))
    return st;
  if (need > 0 && (!workspace || ws_bytes < need))
    return stof_ctx_error(ctx, STOF_ERR_ARG, "gemm run: the plan's algorithm needs %zu bytes of workspace, %s",
                          need, !workspace ? "none given" : "fewer given");
  if ((st = stof_cuda_init(ctx))) return st; /* the primary context current on this thread */
  cublasStatus_t s = CUBLAS_STATUS_SUCCESS;
  if (has_bias) {
    const void *bp = (const void *)(uintptr_t)bias;
    s = lt.desc_set(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp, sizeof bp);
    if (s != CUBLAS_STATUS_SUCCESS) return lt_error(ctx, s, "cublasLtMatmulDescSetAttribute (bias)", g);
  }
  float alpha = g->alpha, beta = g->beta;
  void *cs = stream ? stof_cuda_stream_handle(stream)
                    : stof_cuda_stream_handle(stof_cuda_current_stream(ctx));
  uint64_t cptr = g->beta != 0 ? c : d; /* not read when beta is 0 */
  s = lt.matmul(lt.handle, p->op, &alpha, (const void *)(uintptr_t)b, p->lay_b,
                (const void *)(uintptr_t)a, p->lay_a, &beta, (const void *)(uintptr_t)cptr,
                p->lay_cd, (void *)(uintptr_t)d, p->lay_cd, &p->heur[p->algo].algo,
                need ? (void *)(uintptr_t)workspace : NULL, need ? ws_bytes : 0,
                (cudaStream_t)cs);
  if (s != CUBLAS_STATUS_SUCCESS) return lt_error(ctx, s, "cublasLtMatmul", g);
  return STOF_OK;
}
