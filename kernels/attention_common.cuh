/*
 * Device helpers shared by the sparse attention kernels (attention_block.cu,
 * attention_row.cu): the element type, inline PTX wrappers (cp.async, ldmatrix,
 * mma.sync m16n8k16, ex2) and the swizzled shared-memory layout.
 *
 * Compiled by NVRTC at run time (and by nvcc in bench/attn_dev.cu): no host headers, no
 * C++ standard library; only <cuda_fp16.h> and <cuda_bf16.h>. The loader must give this
 * file to NVRTC as a header named "attention_common.cuh".
 *
 * Macros (each has a default):
 *   STOF_HEAD_DIM  64 or 128 (anything else is a compile error)
 *   STOF_BF16      0 = half, 1 = bfloat16
 *   STOF_TILE_M    outer mask tile T (64 or 128; 32 for the block kernel of
 *                  attention_block.cu, and the row kernel in bench/attn_dev.cu only; the
 *                  Hopper kernel refuses it); STOF_TILE_N must equal it
 *   STOF_SCORE_MOD 0 = no additive score modifier, 1 = T5 relative position bias from a
 *                  bucket table, 2 = ALiBi (mod_t below; DESIGN.md section 6)
 *   STOF_SOFTCAP   0 = none, 1 = tanh soft cap of the scaled score
 *   STOF_MOD_F32   the bias table / slopes are float32 (1) or of the element type (0)
 *   With neither modifier (the default) the kernels compile exactly as before: the mod_t
 *   argument is passed but never read.
 *
 * The include guard may be #undef'd by a harness that includes the kernels several times
 * under different macros, each time inside its own namespace.
 */
#ifndef STOF_ATTENTION_COMMON_CUH
#define STOF_ATTENTION_COMMON_CUH

#include <cuda_fp16.h>
#include <cuda_bf16.h>

#ifndef STOF_HEAD_DIM
#define STOF_HEAD_DIM 64
#endif
#if STOF_HEAD_DIM != 64 && STOF_HEAD_DIM != 128
#error "stof attention: STOF_HEAD_DIM must be 64 or 128 (other head dims are not supported yet)"
#endif

#ifndef STOF_BF16
#define STOF_BF16 0
#endif
#if STOF_BF16 != 0 && STOF_BF16 != 1
#error "stof attention: STOF_BF16 must be 0 (half) or 1 (bfloat16)"
#endif

#ifndef STOF_TILE_M
#define STOF_TILE_M 64
#endif
#ifndef STOF_TILE_N
#define STOF_TILE_N STOF_TILE_M
#endif
#if STOF_TILE_M != 32 && STOF_TILE_M != 64 && STOF_TILE_M != 128
#error "stof attention: STOF_TILE_M must be 32, 64 or 128"
#endif
#if STOF_TILE_N != STOF_TILE_M
#error "stof attention: the mask format uses square outer tiles: STOF_TILE_N must equal STOF_TILE_M"
#endif

#ifndef STOF_SCORE_MOD
#define STOF_SCORE_MOD 0
#endif
#if STOF_SCORE_MOD < 0 || STOF_SCORE_MOD > 2
#error "stof attention: STOF_SCORE_MOD must be 0 (none), 1 (T5 bucket bias) or 2 (ALiBi)"
#endif
#ifndef STOF_SOFTCAP
#define STOF_SOFTCAP 0
#endif
#ifndef STOF_MOD_F32
#define STOF_MOD_F32 1
#endif
#define STOF_HAS_MOD (STOF_SCORE_MOD != 0 || STOF_SOFTCAP != 0)
/* STOF_LAZY_RESCALE=1: a warp moves its rows' running maxima (and rescales O and l) only when
 * one of them grows by more than kLazyMargin in log2 units; otherwise the exponentials are
 * taken against the old max, each at most 2^kLazyMargin (in range in f16 and bf16, far from
 * f32's range; the rounding differs: about 1.7x the plain error measured, session 24), and the D / 2 multiplies of O a row pair are skipped. O and l always share
 * the max they were summed against, so the result is the same up to rounding. */
#ifndef STOF_LAZY_RESCALE
#define STOF_LAZY_RESCALE 0
#endif

namespace stof_attn {

#if STOF_BF16
typedef __nv_bfloat16 elem_t;
#else
typedef __half elem_t;
#endif

#if STOF_LAZY_RESCALE
constexpr float kLazyMargin = 8.f;

/* The lazy rescale's row step, both block kernels: mx, the thread's max of its row's scores
 * (the running max mold folded in), becomes the quad's (a quad shares a row), and grow is set
 * where it passed mold by more than kLazyMargin. -inf > -inf + margin is false: no valid key
 * yet keeps the stand-in; a first valid key is always growth. */
__device__ __forceinline__ float lazy_row_max(float mx, float mold, float sl2, bool &grow)
{
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
  grow |= mx * sl2 > mold * sl2 + kLazyMargin;
  return mx;
}
#endif

constexpr int kD = STOF_HEAD_DIM;  /* head dim */
constexpr int kT = STOF_TILE_M;    /* outer mask tile */
constexpr int kT8 = kT / 8;        /* inner 8x8 tiles per outer tile side */
constexpr int kBmpWords = kT8 * kT8; /* bitmap words of one partial tile */
constexpr int kCpr = kD / 8;       /* 16-byte chunks per row of Q/K/V */

/* Strides in elements of (batch, head, row) of Q, K, V and O (d is contiguous): element
 * (b, h, s, d) of Q is Q[b * q[0] + h * q[1] + s * q[2] + d]; K and V by their head
 * hk = h / (H / Hkv). The host's stof_attn_layout, passed by value (96 bytes). The kernels
 * take row strides as 32-bit (the launcher checks 0 <= row stride < 2^24, so that a tile's
 * T rows span < 2^31 elements) and form the 64-bit base of each (b, h) slice and each
 * K/V tile once. */
struct layout_t {
  long long q[3], k[3], v[3], o[3];
};

/* The score modifier's data (the host's kernels_attn_mod_args, by value, 32 bytes): each kept
 * score x = scale * q.k of query row i, key j, query head h becomes
 *   x = softcap * tanh(x / softcap)                      (STOF_SOFTCAP)
 *   x += bias[h * bias_hs + bucket[side(j - i) + min(|j - i|, maxd)]]   (STOF_SCORE_MOD 1)
 *   x += bias[h * bias_hs] * (j - i)                     (STOF_SCORE_MOD 2: the slope)
 * bucket: the T5 bucket of every offset, host-built from stof_attn_t5_bucket (exact as the
 * CPU reference): [n] for j - i = -n (n = 0 .. maxd), [maxd + 1 + n] for j - i = n > 0;
 * maxd is the smallest offset from which the bucket no longer changes (or past every offset
 * of the shape), so that clamping is exact. Unused fields are 0. */
struct mod_t {
  const void *bias;
  const int *bucket;
  long long bias_hs;
  int maxd;
  float softcap;
};

/* The CTA's (batch, head) pair, bh = blockIdx.y + gridDim.y * blockIdx.z, read again from the
 * special registers (volatile, so not merged with the kernel's first read): the block
 * kernels' epilogues form O's address from it instead of keeping b and h live across the
 * tile loop (which spilled at 96 registers: the Hopper kernel at D = 64, tile 64, TMA). */
__device__ __forceinline__ int cta_bh_again()
{
  unsigned y, z;
  asm volatile("mov.u32 %0, %%ctaid.y;" : "=r"(y));
  asm volatile("mov.u32 %0, %%ctaid.z;" : "=r"(z));
  return (int)(y + gridDim.y * z);
}

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

__device__ __forceinline__ unsigned smem_addr(const void *p)
{
  unsigned r;
  asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(r) : "l"(p));
  return r;
}

/* 16-byte asynchronous copy; src_bytes = 0 zero-fills the destination (src must still be a
 * valid address). */
__device__ __forceinline__ void cp_async16(unsigned dst, const void *src, int src_bytes)
{
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes));
}

__device__ __forceinline__ void cp_async8(unsigned dst, const void *src)
{
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(dst), "l"(src));
}

__device__ __forceinline__ void cp_async4(unsigned dst, const void *src)
{
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(src));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int N> __device__ __forceinline__ void cp_async_wait()
{
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldsm_x4(unsigned addr, unsigned &r0, unsigned &r1, unsigned &r2,
                                        unsigned &r3)
{
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}

__device__ __forceinline__ void ldsm_x4_t(unsigned addr, unsigned &r0, unsigned &r1, unsigned &r2,
                                          unsigned &r3)
{
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}

/* d += a * b on tensor cores, f32 accumulate; a: 16x16 (4 regs), b: 16x8 (2 regs). */
__device__ __forceinline__ void mma16816(float *d, const unsigned *a, unsigned b0, unsigned b1)
{
#if STOF_BF16
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
               "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
               "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

/* 2^x (approximate, flush to zero; ex2(-inf) = +0). */
__device__ __forceinline__ float ex2(float x)
{
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

/* Two floats to a packed pair of elements: lo in the low 16 bits. */
__device__ __forceinline__ unsigned pack2(float lo, float hi)
{
#if STOF_BF16
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
#else
  __half2 v = __floats2half2_rn(lo, hi);
#endif
  return *reinterpret_cast<unsigned *>(&v);
}

/* Eight floats times inv as eight packed elements (one 16-byte store): a row's normalised
 * output (the row-wise kernel, the split rows' combine). */
__device__ __forceinline__ uint4 pack8_scaled(const float (&v)[8], float inv)
{
  uint4 r;
  r.x = pack2(v[0] * inv, v[1] * inv);
  r.y = pack2(v[2] * inv, v[3] * inv);
  r.z = pack2(v[4] * inv, v[5] * inv);
  r.w = pack2(v[6] * inv, v[7] * inv);
  return r;
}

/* A packed pair of elements to two floats. */
__device__ __forceinline__ float2 unpack2(unsigned u)
{
#if STOF_BF16
  __nv_bfloat162 v = *reinterpret_cast<__nv_bfloat162 *>(&u);
  return __bfloat1622float2(v);
#else
  __half2 v = *reinterpret_cast<__half2 *>(&u);
  return __half22float2(v);
#endif
}

#if STOF_MOD_F32
typedef float mod_bias_t;
__device__ __forceinline__ float mod_load(const mod_bias_t *p) { return __ldg(p); }
#else
typedef elem_t mod_bias_t;
__device__ __forceinline__ float mod_load(const mod_bias_t *p)
{
  const unsigned short u = __ldg(reinterpret_cast<const unsigned short *>(p));
#if STOF_BF16
  return __uint_as_float((unsigned)u << 16);
#else
  return __half2float(__ushort_as_half(u));
#endif
}
#endif

#if STOF_HAS_MOD
/* tanh (approximate: the MUFU instruction of sm_75 and newer, relative error ~2^-11). */
__device__ __forceinline__ float tanh_approx(float x)
{
  float y;
  asm("tanh.approx.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
#endif

/* The modifier's per-CTA state: a head's bias row (T5) or slope (ALiBi); empty without a
 * modifier (the kernels pass it along unread). */
struct mod_cta {
#if STOF_SCORE_MOD == 1
  const mod_bias_t *row;
  const int *bucket;
  int maxd;
#elif STOF_SCORE_MOD == 2
  float slope;
#endif
#if STOF_SOFTCAP
  float cap, icap;
#endif
};

__device__ __forceinline__ mod_cta mod_begin(const mod_t &M, int h)
{
  mod_cta c;
#if STOF_SCORE_MOD == 1
  c.row = reinterpret_cast<const mod_bias_t *>(M.bias) + (long long)h * M.bias_hs;
  c.bucket = M.bucket;
  c.maxd = M.maxd;
#elif STOF_SCORE_MOD == 2
  c.slope = mod_load(reinterpret_cast<const mod_bias_t *>(M.bias) + (long long)h * M.bias_hs);
#endif
#if STOF_SOFTCAP
  c.cap = M.softcap;
  c.icap = 1.f / M.softcap;
#endif
  return c;
}

#if STOF_HAS_MOD
/* The modified score of a scaled score x at offset rel = j - i. */
__device__ __forceinline__ float mod_score(float x, int rel, const mod_cta &c)
{
#if STOF_SOFTCAP
  x = c.cap * tanh_approx(x * c.icap);
#endif
#if STOF_SCORE_MOD == 1
  const int n = min(rel < 0 ? -rel : rel, c.maxd);
  x += mod_load(c.row + __ldg(c.bucket + (rel > 0 ? c.maxd + 1 + n : n)));
#elif STOF_SCORE_MOD == 2
  x = fmaf(c.slope, (float)rel, x);
#endif
  return x;
}
#endif /* STOF_HAS_MOD */

/* Byte offset of 16-byte chunk c of row r in a [rows][kD] tile of elements, XOR-swizzled so
 * that ldmatrix on 8 consecutive rows at one logical chunk touches 8 distinct bank groups. */
__device__ __forceinline__ unsigned swz(int r, int c)
{
  return (unsigned)((r * kCpr + (c ^ (r & 7))) * 16);
}

/* The launch order (kernels/attention.c's attn_order_args, by value; STOF_SM90_ORDER in the
 * Hopper kernel, STOF_ORDER in the block kernel): per instance m, its nrow tile-rows
 * in launch order at row[m * nrow], the first nheavy of each instance (its long rows, then
 * others where it has fewer) launched before any other row of any (b, h); the others `group`
 * (b, h) at a time (>= 1). */
struct order_t {
  const int *row;
  int nheavy, group;
};
/* This CTA's (b, h) (BH for the last z slice's spare CTAs) and its place k in the order:
 * CTA lin of the launch (x fastest) runs heavy row k = lin % nheavy of (b, h) = lin / nheavy
 * while lin < BH x nheavy; then, with L = lin - BH x nheavy and rest = nrow - nheavy, group
 * gi = L / (group x rest) of (b, h) pairs g0 = gi x group .. g0 + G - 1 (G = group, fewer in
 * the last), whose rank-kk rows run pair by pair before rank kk + 1: place w = L - gi x group x
 * rest is row k = nheavy + w / G of pair g0 + w % G (group 1: pair by pair, each its rows in
 * order); 0 <= nheavy < nrow (a heavy row is longer than its instance's mean). kGroups false
 * (ORDER 1): group is 1, and the walk is the one before groups, instruction for instruction
 * (session 23: with the groups' code in, longformer's kernels took 4-8% more time on the
 * grid); true (ORDER 2): groups, in 32-bit arithmetic (the host groups only where BH x nrow
 * <= 2^31 - 1: kernels/attention.c, choose_order). */
template <bool kGroups>
__device__ __forceinline__ int order_cta(int BH, int nrow, int nheavy, int group, int &k)
{
  unsigned y, z;
  asm volatile("mov.u32 %0, %%ctaid.y;" : "=r"(y));
  asm volatile("mov.u32 %0, %%ctaid.z;" : "=r"(z));
  const long long lin = (long long)blockIdx.x + (long long)gridDim.x * ((long long)y + (long long)gridDim.y * z);
  const long long heavy = (long long)BH * nheavy;
  long long q;
  if (lin < heavy) {
    q = lin / nheavy;
    k = (int)(lin - q * nheavy);
  } else if (!kGroups) {
    (void)group;
    q = (lin - heavy) / (nrow - nheavy);
    k = nheavy + (int)(lin - heavy - q * (nrow - nheavy));
  } else {
    if (lin >= (long long)BH * nrow) return BH; /* the last z slice's spare CTAs */
    const unsigned rest = (unsigned)(nrow - nheavy), L = (unsigned)(lin - heavy), per = (unsigned)group * rest;
    const unsigned gi = L / per, w = L - gi * per, g0 = gi * (unsigned)group;
    const unsigned G = min((unsigned)group, (unsigned)BH - g0), kk = w / G;
    q = g0 + (w - kk * G);
    k = nheavy + (int)kk;
  }
  return q < BH ? (int)q : BH;
}

} /* namespace stof_attn */

#endif /* STOF_ATTENTION_COMMON_CUH */
