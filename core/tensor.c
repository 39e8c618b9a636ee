/*
 * Tensors: strided views over owned or borrowed storage, on the CPU or a GPU. Element
 * access converts through double; f16/bf16 go through the dtype conversions.
 */
#include <math.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "core_int.h"

int64_t stof_shape_numel(int ndim, const int64_t *shape) {
  int64_t n = 1;
  for (int d = 0; d < ndim; d++) n *= shape[d];
  return n;
}

stof_status stof_shape_check(stof_ctx *ctx, const char *what, int ndim, const int64_t *shape) {
  if (ndim < 0 || ndim > STOF_MAX_DIMS)
    return stof_ctx_error(ctx, STOF_ERR_SHAPE, "%s: %d dimensions (at most %d allowed)", what,
                          ndim, STOF_MAX_DIMS);
  /* the product of the nonzero extents: an empty tensor's strides still multiply the others
   * (a shape {0, 2^62, 2^62} overflowed them) */
  int64_t n = 1;
  for (int d = 0; d < ndim; d++) {
    if (shape[d] < 0)
      return stof_ctx_error(ctx, STOF_ERR_SHAPE, "%s: extent %lld of dim %d is negative", what,
                            (long long)shape[d], d);
    if (shape[d] > 0 && n > (INT64_MAX / 16) / shape[d])
      return stof_ctx_error(ctx, STOF_ERR_SHAPE, "%s: shape too large", what);
    if (shape[d] > 0) n *= shape[d];
  }
  return STOF_OK;
}

static void contiguous_strides(int ndim, const int64_t *shape, int64_t *strides) {
  int64_t s = 1;
  for (int d = ndim - 1; d >= 0; d--) {
    strides[d] = s;
    s *= shape[d];
  }
}

static stof_status tensor_header(stof_ctx *ctx, stof_dtype dtype, int ndim, const int64_t *shape,
                                 stof_device device, stof_tensor **out) {
  *out = NULL;
  if ((unsigned)dtype >= STOF_DTYPE_COUNT)
    return stof_ctx_error(ctx, STOF_ERR_TYPE, "tensor: unknown dtype %d", (int)dtype);
  stof_status st = stof_shape_check(ctx, "tensor", ndim, shape);
  if (st) return st;
  stof_tensor *t = stof_ctx_alloc(ctx, sizeof *t);
  if (!t) return STOF_ERR_NOMEM;
  t->ctx = ctx;
  t->dtype = dtype;
  t->device = device;
  t->ndim = ndim;
  if (ndim) memcpy(t->shape, shape, sizeof(int64_t) * (size_t)ndim);
  contiguous_strides(ndim, shape, t->strides);
  *out = t;
  return STOF_OK;
}

stof_status stof_tensor_new(stof_ctx *ctx, stof_dtype dtype, int ndim, const int64_t *shape,
                            stof_device device, stof_tensor **out) {
  stof_tensor *t;
  stof_status st = tensor_header(ctx, dtype, ndim, shape, device, &t);
  if (st) return st;
  size_t nbytes = (size_t)stof_shape_numel(ndim, shape) * stof_dtype_size(dtype);
  if (device == STOF_DEVICE_CUDA) {
    uint64_t p = 0;
    st = stof_cuda_malloc(ctx, nbytes ? nbytes : 1, &p);
    if (st) {
      stof_ctx_dealloc(ctx, t, sizeof *t);
      return st;
    }
    t->data = (void *)(uintptr_t)p;
  } else {
    t->data = stof_ctx_alloc(ctx, nbytes ? nbytes : 1);
    if (!t->data) {
      stof_ctx_dealloc(ctx, t, sizeof *t);
      return STOF_ERR_NOMEM;
    }
  }
  t->nbytes = nbytes ? nbytes : 1;
  t->owned = 1;
  *out = t;
  return STOF_OK;
}

stof_status stof_tensor_wrap(stof_ctx *ctx, stof_dtype dtype, int ndim, const int64_t *shape,
                             const int64_t *strides, void *data, stof_device device,
                             stof_tensor **out) {
  stof_status st = tensor_header(ctx, dtype, ndim, shape, device, out);
  if (st) return st;
  if (strides && ndim) memcpy((*out)->strides, strides, sizeof(int64_t) * (size_t)ndim);
  (*out)->data = data;
  return STOF_OK;
}

void stof_tensor_free(stof_tensor *t) {
  if (!t) return;
  if (t->owned) {
    if (t->device == STOF_DEVICE_CUDA)
      stof_cuda_mem_free(t->ctx, (uint64_t)(uintptr_t)t->data);
    else
      stof_ctx_dealloc(t->ctx, t->data, t->nbytes);
  }
  stof_ctx_dealloc(t->ctx, t, sizeof *t);
}

int64_t stof_tensor_numel(const stof_tensor *t) { return stof_shape_numel(t->ndim, t->shape); }

int stof_tensor_is_contiguous(const stof_tensor *t) {
  int64_t s = 1;
  for (int d = t->ndim - 1; d >= 0; d--) {
    if (t->shape[d] != 1 && t->strides[d] != s) return 0;
    s *= t->shape[d];
  }
  return 1;
}

double stof_tensor_load(const stof_tensor *t, int64_t off) {
  const void *p = t->data;
  switch (t->dtype) {
  case STOF_DTYPE_F32: return ((const float *)p)[off];
  case STOF_DTYPE_F16: return stof_f16_to_f32(((const uint16_t *)p)[off]);
  case STOF_DTYPE_BF16: return stof_bf16_to_f32(((const uint16_t *)p)[off]);
  case STOF_DTYPE_F64: return ((const double *)p)[off];
  case STOF_DTYPE_I32: return ((const int32_t *)p)[off];
  case STOF_DTYPE_I64: return (double)((const int64_t *)p)[off];
  case STOF_DTYPE_BOOL: return ((const uint8_t *)p)[off] != 0;
  default: return NAN;
  }
}

void stof_tensor_store(stof_tensor *t, int64_t off, double v) {
  void *p = t->data;
  v = stof_dtype_round(t->dtype, v);
  switch (t->dtype) {
  case STOF_DTYPE_F32: ((float *)p)[off] = (float)v; break;
  case STOF_DTYPE_F16: ((uint16_t *)p)[off] = stof_f32_to_f16((float)v); break;
  case STOF_DTYPE_BF16: ((uint16_t *)p)[off] = stof_f32_to_bf16((float)v); break;
  case STOF_DTYPE_F64: ((double *)p)[off] = v; break;
  case STOF_DTYPE_I32: ((int32_t *)p)[off] = (int32_t)v; break;
  case STOF_DTYPE_I64: ((int64_t *)p)[off] = (int64_t)v; break;
  case STOF_DTYPE_BOOL: ((uint8_t *)p)[off] = v != 0; break;
  default: break;
  }
}

/* The storage offset of the n-th element in row-major order of the shape. */
static int64_t nth_offset(const stof_tensor *t, int64_t n) {
  int64_t off = 0;
  for (int d = t->ndim - 1; d >= 0; d--) {
    if (t->shape[d] == 0) return 0;
    off += (n % t->shape[d]) * t->strides[d];
    n /= t->shape[d];
  }
  return off;
}

static stof_status check_cpu(const stof_tensor *t, const char *what) {
  if (t->device != STOF_DEVICE_CPU)
    return stof_ctx_error(t->ctx, STOF_ERR_ARG, "%s: the tensor is on the GPU (copy it to the CPU first)",
                          what);
  return STOF_OK;
}

static stof_status index_offset(const stof_tensor *t, const int64_t *idx, const char *what,
                                int64_t *off) {
  *off = 0;
  for (int d = 0; d < t->ndim; d++) {
    if (idx[d] < 0 || idx[d] >= t->shape[d])
      return stof_ctx_error(t->ctx, STOF_ERR_RANGE,
                            "%s: index %lld out of range for dim %d of extent %lld", what,
                            (long long)idx[d], d, (long long)t->shape[d]);
    *off += idx[d] * t->strides[d];
  }
  return STOF_OK;
}

stof_status stof_tensor_get(const stof_tensor *t, const int64_t *idx, double *out) {
  int64_t off;
  stof_status st = check_cpu(t, "tensor get");
  if (!st) st = index_offset(t, idx, "tensor get", &off);
  if (st) return st;
  *out = stof_tensor_load(t, off);
  return STOF_OK;
}

stof_status stof_tensor_set(stof_tensor *t, const int64_t *idx, double v) {
  int64_t off;
  stof_status st = check_cpu(t, "tensor set");
  if (!st) st = index_offset(t, idx, "tensor set", &off);
  if (st) return st;
  stof_tensor_store(t, off, v);
  return STOF_OK;
}

void stof_tensor_fill(stof_tensor *t, double v) {
  int64_t n = stof_tensor_numel(t);
  for (int64_t i = 0; i < n; i++) stof_tensor_store(t, nth_offset(t, i), v);
}

static uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Element i of stof_tensor_rand(dtype, ..., seed), before it is stored: a counter-based
 * draw (the device's copy in core/tensor_gpu.c computes the same). */
static double rand_at(stof_dtype dtype, uint64_t state0, int64_t i) {
  uint64_t r = mix64(state0 + (uint64_t)(i + 1) * 0x9e3779b97f4a7c15ull);
  double u = (double)(r >> 11) * (1.0 / 9007199254740992.0);
  return stof_dtype_is_float(dtype) ? 2.0 * u - 1.0 : dtype == STOF_DTYPE_BOOL ? (double)(r >> 63) : floor(u * 100.0);
}

uint64_t core_rand_state(uint64_t seed) { return mix64(seed ^ 0x243f6a8885a308d3ull); }

stof_status stof_tensor_rand(stof_ctx *ctx, stof_dtype dtype, int ndim, const int64_t *shape,
                             uint64_t seed, stof_tensor **out) {
  stof_status st = stof_tensor_new(ctx, dtype, ndim, shape, STOF_DEVICE_CPU, out);
  if (st) return st;
  int64_t n = stof_tensor_numel(*out);
  uint64_t state = core_rand_state(seed);
  for (int64_t i = 0; i < n; i++) stof_tensor_store(*out, i, rand_at(dtype, state, i));
  return STOF_OK;
}

/* One thread's share of stof_tensor_uniform: elements [begin, end). */
typedef struct uniform_job {
  stof_tensor *t;
  uint64_t state;
  double mid, half;
  int64_t begin, end;
} uniform_job;

static void *uniform_fill(void *arg) {
  const uniform_job *j = arg;
  /* stof_tensor_rand's u in [-1, 1) (the same draw for every float dtype) -> [lo, hi) */
  for (int64_t i = j->begin; i < j->end; i++)
    stof_tensor_store(j->t, i, j->mid + j->half * rand_at(STOF_DTYPE_F64, j->state, i));
  return NULL;
}

stof_status stof_tensor_uniform(stof_ctx *ctx, stof_dtype dtype, int ndim, const int64_t *shape, uint64_t seed,
                                double lo, double hi, stof_tensor **out) {
  *out = NULL;
  if (!stof_dtype_is_float(dtype))
    return stof_ctx_error(ctx, STOF_ERR_TYPE, "tensor uniform: dtype %s is not a float dtype", stof_dtype_name(dtype));
  if (!isfinite(lo) || !isfinite(hi) || !(lo < hi) || !isfinite(hi - lo))
    return stof_ctx_error(ctx, STOF_ERR_ARG, "tensor uniform: the range [%g, %g) is empty or not finite", lo, hi);
  if (!isfinite(stof_dtype_round(dtype, lo)) || !isfinite(stof_dtype_round(dtype, hi)))
    return stof_ctx_error(ctx, STOF_ERR_ARG, "tensor uniform: the range [%g, %g) overflows %s", lo, hi,
                          stof_dtype_name(dtype));
  stof_status st = stof_tensor_new(ctx, dtype, ndim, shape, STOF_DEVICE_CPU, out);
  if (st) return st;
  int64_t n = stof_tensor_numel(*out);
  /* each element is a function of its index alone: large tensors are split over threads
   * (LLaMA's 1.2 G weights), the values do not depend on how */
  enum { MAXT = 16, MIN_SHARE = 1 << 20 };
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  int64_t shares = n / MIN_SHARE; /* threads with at least MIN_SHARE elements each */
  int nt = ncpu < 1 ? 1 : ncpu > MAXT ? MAXT : (int)ncpu;
  if (shares < nt) nt = shares > 1 ? (int)shares : 1;
  uniform_job job[MAXT];
  pthread_t tid[MAXT];
  int started[MAXT] = {0};
  for (int k = 0; k < nt; k++)
    job[k] = (uniform_job){*out, core_rand_state(seed), lo + 0.5 * (hi - lo), 0.5 * (hi - lo), n / nt * k,
                           k == nt - 1 ? n : n / nt * (k + 1)};
  for (int k = 1; k < nt; k++) started[k] = pthread_create(&tid[k], NULL, uniform_fill, &job[k]) == 0;
  uniform_fill(&job[0]);
  for (int k = 1; k < nt; k++) {
    if (started[k])
      pthread_join(tid[k], NULL);
    else
      uniform_fill(&job[k]); /* no thread: this one does that share too */
  }
  return STOF_OK;
}

stof_status stof_tensor_rand_range(stof_ctx *ctx, stof_dtype dtype, uint64_t seed, int64_t first, int64_t count,
                                   stof_tensor **out) {
  *out = NULL;
  if (first < 0 || count < 0 || first > INT64_MAX - count)
    return stof_ctx_error(ctx, STOF_ERR_RANGE, "tensor rand range: elements [%lld, %lld + %lld) out of range",
                          (long long)first, (long long)first, (long long)count);
  stof_status st = stof_tensor_new(ctx, dtype, 1, &count, STOF_DEVICE_CPU, out);
  if (st) return st;
  uint64_t state = core_rand_state(seed);
  for (int64_t i = 0; i < count; i++) stof_tensor_store(*out, i, rand_at(dtype, state, first + i));
  return STOF_OK;
}

stof_status stof_tensor_to(const stof_tensor *t, stof_device device, stof_tensor **out) {
  stof_ctx *ctx = t->ctx;
  stof_tensor *r = NULL;
  *out = NULL;
  if (t->device == STOF_DEVICE_CUDA && !stof_tensor_is_contiguous(t))
    return stof_ctx_error(ctx, STOF_ERR_UNSUPPORTED, "tensor to: a strided GPU tensor cannot be copied");
  stof_status st = stof_tensor_new(ctx, t->dtype, t->ndim, t->shape, device, &r);
  if (st) return st;
  size_t esz = stof_dtype_size(t->dtype), nbytes = (size_t)stof_tensor_numel(t) * esz;
  const stof_tensor *src = t;
  stof_tensor *tmp = NULL;
  if (t->device == STOF_DEVICE_CPU && !stof_tensor_is_contiguous(t)) {
    st = stof_tensor_cast(t, t->dtype, &tmp); /* a contiguous host copy */
    if (st) goto fail;
    src = tmp;
  }
  if (nbytes == 0) {
  } else if (src->device == STOF_DEVICE_CPU && device == STOF_DEVICE_CPU) {
    memcpy(r->data, src->data, nbytes);
  } else if (src->device == STOF_DEVICE_CPU) {
    st = stof_cuda_htod(ctx, (uint64_t)(uintptr_t)r->data, src->data, nbytes);
  } else if (device == STOF_DEVICE_CPU) {
    st = stof_cuda_dtoh(ctx, r->data, (uint64_t)(uintptr_t)src->data, nbytes);
  } else {
    st = stof_cuda_dtod(ctx, (uint64_t)(uintptr_t)r->data, (uint64_t)(uintptr_t)src->data, nbytes);
  }
fail:
  stof_tensor_free(tmp);
  if (st) {
    stof_tensor_free(r);
    return st;
  }
  *out = r;
  return STOF_OK;
}

stof_status stof_tensor_cast(const stof_tensor *t, stof_dtype dtype, stof_tensor **out) {
  stof_status st = check_cpu(t, "tensor cast");
  if (!st) st = stof_tensor_new(t->ctx, dtype, t->ndim, t->shape, STOF_DEVICE_CPU, out);
  if (st) return st;
  int64_t n = stof_tensor_numel(t);
  if (dtype == t->dtype && stof_tensor_is_contiguous(t)) {
    memcpy((*out)->data, t->data, (size_t)n * stof_dtype_size(dtype));
    return STOF_OK;
  }
  for (int64_t i = 0; i < n; i++) stof_tensor_store(*out, i, stof_tensor_load(t, nth_offset(t, i)));
  return STOF_OK;
}

static stof_status check_pair(const stof_tensor *a, const stof_tensor *b, const char *what) {
  stof_status st = check_cpu(a, what);
  if (!st) st = check_cpu(b, what);
  if (st) return st;
  if (a->ndim != b->ndim || memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->ndim)) {
    char sa[128], sb[128];
    return stof_ctx_error(a->ctx, STOF_ERR_SHAPE, "%s: shapes differ: %s vs %s", what,
                          core_shape_str(sa, sizeof sa, a->ndim, a->shape),
                          core_shape_str(sb, sizeof sb, b->ndim, b->shape));
  }
  return STOF_OK;
}

stof_status stof_tensor_allclose(const stof_tensor *a, const stof_tensor *b, double rtol,
                                 double atol, int *out) {
  stof_status st = check_pair(a, b, "allclose");
  if (st) return st;
  int64_t n = stof_tensor_numel(a);
  *out = 1;
  for (int64_t i = 0; i < n; i++) {
    double x = stof_tensor_load(a, nth_offset(a, i)), y = stof_tensor_load(b, nth_offset(b, i));
    if (!(fabs(x - y) <= atol + rtol * fabs(y))) {
      if (x == y) continue; /* equal infinities */
      *out = 0;
      return STOF_OK;
    }
  }
  return STOF_OK;
}

stof_status stof_tensor_rel_l2(const stof_tensor *a, const stof_tensor *b, double *out) {
  stof_status st = check_pair(a, b, "rel_l2");
  if (st) return st;
  int64_t n = stof_tensor_numel(a);
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; i++) {
    double x = stof_tensor_load(a, nth_offset(a, i)), y = stof_tensor_load(b, nth_offset(b, i));
    if (isnan(x) || isnan(y)) {
      *out = INFINITY;
      return STOF_OK;
    }
    num += (x - y) * (x - y);
    den += y * y;
  }
  *out = den > 0 ? sqrt(num / den) : (num > 0 ? INFINITY : 0.0);
  return STOF_OK;
}
