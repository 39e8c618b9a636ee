/*
 * Tensor utilities that run where the tensor lives: stof_tensor_rand_on (stof_tensor_rand's
 * values generated on the GPU, for benchmark inputs of gigabytes) and stof_tensor_count_nan
 * (the NaN scan of a poisoned output, on the device when the output is there).
 *
 * The device code is a small CUDA source compiled with NVRTC for the current device on first
 * use (stof_cuda_compile_cached: the on-disk cubin cache makes later processes skip NVRTC)
 * and loaded for each call; each call synchronizes the context before it unloads the module
 * (the utilities are for benchmarks and tests, not for a stream of other work). The
 * generator is the counter-based one of stof_tensor_rand (core/tensor.c, rand_at): element
 * i is mix64(state0 + (i + 1) * golden), converted as stof_tensor_store converts: to f16 /
 * bf16 with one correct rounding (to float rounding to odd, then to nearest even, in integer
 * code as core/dtype.c's), so both give the same bits (tests/core: the GPU tensor against the
 * CPU one, bit for bit, on the GPU machine; a float rounded to nearest first gave 14 of
 * 193,500 f16 elements 1 ulp off there, where the float lands on a half-way point).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core_int.h"

static const char device_src[] =
    /* the headers are not needed by the integer conversions; kept: this is the source that ran on the H200 */
    "#include <cuda_fp16.h>\n"
    "#include <cuda_bf16.h>\n"
    "__device__ unsigned long long mix64(unsigned long long z) {\n"
    "  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;\n"
    "  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;\n"
    "  return z ^ (z >> 31);\n"
    "}\n"
    "/* float -> f16 / bf16 bits, round to nearest even, in integer arithmetic as stof_f32_to_f16\n"
    " * and stof_f32_to_bf16 (core/dtype.c) do it (finite values in (-1, 1) only come here) */\n"
    "__device__ unsigned short f32_to_f16(unsigned x) {\n"
    "  unsigned sign = (x >> 16) & 0x8000u, exp = (x >> 23) & 0xffu, man = x & 0x7fffffu;\n"
    "  int e = (int)exp - 127 + 15;\n"
    "  if (e <= 0) {\n"
    "    if (e < -10) return (unsigned short)sign;\n"
    "    unsigned m = man | 0x800000u; int shift = 14 - e;\n"
    "    unsigned h = m >> shift, rem = m & ((1u << shift) - 1), mid = 1u << (shift - 1);\n"
    "    if (rem > mid || (rem == mid && (h & 1))) h++;\n"
    "    return (unsigned short)(sign | h);\n"
    "  }\n"
    "  unsigned h = sign | ((unsigned)e << 10) | (man >> 13), rem = man & 0x1fffu;\n"
    "  if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) h++;\n"
    "  return (unsigned short)h;\n"
    "}\n"
    "__device__ unsigned short f32_to_bf16(unsigned x) { return (unsigned short)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16); }\n"
    "/* kind: 0 f16, 1 bf16, 2 f32, 3 f64 */\n"
    "extern \"C\" __global__ void stof_rand_fill(void *out, int kind, long long n, unsigned long long state) {\n"
    "  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;\n"
    "       i += (long long)gridDim.x * blockDim.x) {\n"
    "    unsigned long long r = mix64(state + (unsigned long long)(i + 1) * 0x9e3779b97f4a7c15ull);\n"
    "    double v = 2.0 * ((double)(r >> 11) * (1.0 / 9007199254740992.0)) - 1.0;\n"
    "    /* to float rounding to odd (toward zero, the last bit set when inexact), then to\n"
    "     * f16 / bf16 to nearest even: one correct rounding of v, as stof_tensor_store */\n"
    "    float z = __double2float_rz(v);\n"
    "    unsigned odd = __float_as_uint(z) | ((double)z != v);\n"
    "    if (kind == 0) ((unsigned short *)out)[i] = f32_to_f16(odd);\n"
    "    else if (kind == 1) ((unsigned short *)out)[i] = f32_to_bf16(odd);\n"
    "    else if (kind == 2) ((float *)out)[i] = __double2float_rn(v);\n"
    "    else ((double *)out)[i] = v;\n"
    "  }\n"
    "}\n"
    "extern \"C\" __global__ void stof_count_nan(const void *in, int kind, long long n, unsigned long long *count) {\n"
    "  unsigned long long c = 0;\n"
    "  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;\n"
    "       i += (long long)gridDim.x * blockDim.x) {\n"
    "    if (kind == 0) { unsigned short b = ((const unsigned short *)in)[i]; c += (b & 0x7c00u) == 0x7c00u && (b & 0x3ffu); }\n"
    "    else if (kind == 1) { unsigned short b = ((const unsigned short *)in)[i]; c += (b & 0x7f80u) == 0x7f80u && (b & 0x7fu); }\n"
    "    else if (kind == 2) c += isnan(((const float *)in)[i]);\n"
    "    else c += isnan(((const double *)in)[i]);\n"
    "  }\n"
    "  for (int o = 16; o > 0; o >>= 1) c += __shfl_xor_sync(0xffffffffu, c, o);\n"
    "  if ((threadIdx.x & 31) == 0 && c) atomicAdd(count, c);\n"
    "}\n";

/* The kernel's element kind of dtype, or -1. */
static int kind_of(stof_dtype d) {
  switch (d) {
  case STOF_DTYPE_F16: return 0;
  case STOF_DTYPE_BF16: return 1;
  case STOF_DTYPE_F32: return 2;
  case STOF_DTYPE_F64: return 3;
  default: return -1;
  }
}

/* Loads the device code and the kernel `name` (a module the caller frees). */
static stof_status load(stof_ctx *ctx, const char *name, stof_cuda_module **mod, stof_cuda_kernel **k) {
  stof_cuda_props props;
  stof_status st = stof_cuda_init(ctx);
  if (st || (st = stof_cuda_props_get(ctx, &props))) return st;
  char arch[32];
  snprintf(arch, sizeof arch, "sm_%d%d", props.cc_major, props.cc_minor);
  void *cubin = NULL;
  size_t size = 0;
  st = stof_cuda_compile_cached(ctx, device_src, "tensor_gpu.cu", arch, 0, NULL, 0, NULL, NULL, &cubin, &size);
  if (st) return st;
  st = stof_cuda_module_load(ctx, cubin, size, mod);
  stof_ctx_dealloc(ctx, cubin, size);
  if (!st && (st = stof_cuda_module_kernel(*mod, name, k))) {
    stof_cuda_module_free(*mod);
    *mod = NULL;
  }
  return st;
}

/* Grid of the grid-stride loops: enough blocks to fill the device, no more. */
static unsigned blocks_for(int64_t n) {
  int64_t b = (n + 255) / 256;
  return (unsigned)(b < 1 ? 1 : b > 65536 ? 65536 : b);
}

stof_status stof_tensor_rand_on(stof_ctx *ctx, stof_dtype dtype, int ndim, const int64_t *shape, uint64_t seed,
                                stof_device device, stof_tensor **out) {
  *out = NULL;
  if (device == STOF_DEVICE_CPU) return stof_tensor_rand(ctx, dtype, ndim, shape, seed, out);
  int kind = kind_of(dtype);
  if (kind < 0)
    return stof_ctx_error(ctx, STOF_ERR_UNSUPPORTED,
                          "tensor rand on the GPU: dtype %s (float16, bfloat16, float32 or float64 there)",
                          stof_dtype_name(dtype));
  stof_tensor *t;
  stof_status st = stof_tensor_new(ctx, dtype, ndim, shape, STOF_DEVICE_CUDA, &t);
  if (st) return st;
  long long n = (long long)stof_tensor_numel(t);
  if (n == 0) {
    *out = t;
    return STOF_OK;
  }
  stof_cuda_module *mod = NULL;
  stof_cuda_kernel *k;
  if (!(st = load(ctx, "stof_rand_fill", &mod, &k))) {
    void *data = t->data;
    unsigned long long state = core_rand_state(seed);
    void *args[] = {&data, &kind, &n, &state};
    unsigned grid[3] = {blocks_for(n), 1, 1}, block[3] = {256, 1, 1};
    st = stof_cuda_launch(ctx, k, grid, block, 0, args);
    if (!st) st = stof_cuda_synchronize(ctx); /* done before the module goes (nothing queued if the launch failed) */
    stof_cuda_module_free(mod);
  }
  if (st) {
    stof_tensor_free(t);
    return st;
  }
  *out = t;
  return STOF_OK;
}

stof_status stof_tensor_count_nan(const stof_tensor *t, int64_t *count) {
  stof_ctx *ctx = t->ctx;
  *count = 0;
  int kind = kind_of(t->dtype);
  if (kind < 0)
    return stof_ctx_error(ctx, STOF_ERR_TYPE, "tensor count nan: dtype %s is not a float type",
                          stof_dtype_name(t->dtype));
  if (!stof_tensor_is_contiguous(t))
    return stof_ctx_error(ctx, STOF_ERR_UNSUPPORTED, "tensor count nan: a strided tensor (contiguous only)");
  long long n = (long long)stof_tensor_numel(t);
  if (t->device == STOF_DEVICE_CPU) {
    int64_t c = 0;
    for (long long i = 0; i < n; i++) c += isnan(stof_tensor_load(t, i)) != 0;
    *count = c;
    return STOF_OK;
  }
  if (n == 0) return STOF_OK;
  stof_cuda_module *mod = NULL;
  stof_cuda_kernel *k;
  uint64_t dcount = 0;
  stof_status st = load(ctx, "stof_count_nan", &mod, &k);
  if (st) return st;
  if (!(st = stof_cuda_malloc(ctx, sizeof(unsigned long long), &dcount)) &&
      !(st = stof_cuda_memset32(ctx, dcount, 0, 2))) {
    const void *data = t->data;
    unsigned long long *pc = (unsigned long long *)(uintptr_t)dcount;
    void *args[] = {&data, &kind, &n, &pc};
    unsigned grid[3] = {blocks_for(n), 1, 1}, block[3] = {256, 1, 1};
    st = stof_cuda_launch(ctx, k, grid, block, 0, args);
    if (!st) st = stof_cuda_synchronize(ctx);
    unsigned long long c = 0;
    if (!st) st = stof_cuda_dtoh(ctx, &c, dcount, sizeof c);
    *count = (int64_t)c;
  }
  if (dcount) stof_cuda_mem_free(ctx, dcount); /* after the synchronize above (or a failed launch) */
  stof_cuda_module_free(mod);
  return st;
}
