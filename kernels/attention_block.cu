/*
 * Block-wise sparse attention, forward (inference), FlashAttention-2 style.
 *
 * One CTA owns one tile-row (T query rows) of one (batch, head). Q fragments live in
 * registers; the row's non-empty mask tiles (listed by the BSR + bitmap format, column
 * indices ascending and not contiguous) stream their K and V tiles through shared memory
 * with cp.async, STOF_STAGES deep: the copy issued while tile i is computed is the one of
 * the (i + STAGES - 1)-th NON-EMPTY tile of the row, never column + 1. S = Q K^T and
 * O += P V run on tensor cores (mma.sync m16n8k16 fed by ldmatrix). Softmax is online, in
 * f32, with the running max; the scale is folded into exp2 (log2 e). Partial tiles apply
 * their bitmap (its words copied into shared memory with the K tile); full tiles take a
 * path with no mask work. A row with no valid key writes zeros, never NaN: the running max
 * starts at -inf and every step uses a finite stand-in for it while it is still -inf, so
 * the first valid tile needs no flag.
 *
 * Entry point (grid, block and shared memory are fixed by the macros below):
 *   extern "C" __global__ void stof_attn_block_fwd(
 *       const elem *Q, const elem *K, const elem *V, elem *O,
 *       const int *row_ptr, const int *col_idx, const int *bmp_off,
 *       const unsigned long long *bitmap,
 *       int B, int H, int Hkv, int Sq, int Sk, int mask_b, int mask_h, float scale,
 *       stof_attn::layout_t L, stof_attn::mod_t M)
 *   Q, O [B, H, Sq, D]; K, V [B, Hkv, Sk, D], strided as L says (attention_common.cuh: d
 *   contiguous, base addresses 16-byte aligned, strides multiples of 8 elements, row strides
 *   under 2^24); elem = half or bfloat16 (STOF_BF16). Head h reads K/V head h / (H / Hkv)
 *   (Hkv = H for plain multi-head). Only the elements of O are written, never the gaps.
 *   scale > 0 (usually 1/sqrt(D)). M: the score modifier's data (attention_common.cuh;
 *   read only when compiled with STOF_SCORE_MOD or STOF_SOFTCAP). The mask instance of (b, h) is
 *   (mask_b > 1 ? b : 0) * mask_h + (mask_h > 1 ? h : 0).
 *   grid  = (ceil(Sq / T), min(B * H, 65535), ceil(B * H / 65535)); blockIdx.x = x owns
 *           tile-row ceil(Sq/T) - 1 - x of head bh = blockIdx.y + gridDim.y * blockIdx.z
 *           (heavier rows of causal-like masks are scheduled first; a head's tile-rows run
 *           together, so that its K and V stay in L2); CTAs with bh >= B * H return. With
 *           STOF_ORDER=1 or 2, a last parameter `const stof_attn::order_t ORD` (after M) sets
 *           which (b, h) and tile-row each CTA runs instead (order_cta, attention_common.cuh:
 *           long rows first, the others longest first over groups of (b, h) pairs)
 *   block = 32 * STOF_WARPS threads
 *   dynamic shared memory = T*D*2 + STOF_STAGES * (2*T*D*2 + (T/8)^2 * 8) bytes
 *           (stof_attn::blk::kSmemBytes; above 48 KB the launcher must raise
 *           CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)
 *
 * Macros: STOF_HEAD_DIM (64|128), STOF_BF16 (0|1), STOF_TILE_M = STOF_TILE_N (32|64|128),
 *   STOF_WARPS (default 4; T / STOF_WARPS query rows per warp must be 16 or 32),
 *   STOF_STAGES (default 2; 2..4), STOF_SUB_N (default min(T, 64); the key columns whose
 *   scores are held in registers at once, divides T), STOF_KV_SPLIT (default 0: K and V of a tile
 *   in one cp.async group, one CTA barrier per tile; 1: separate groups, S = QK^T starts
 *   before V lands, two barriers per tile), STOF_SUB_UNROLL (1: unroll the sub-tile loop;
 *   0: keep it rolled, fewer registers; default 0 for D=64, 1 for D=128), STOF_MIN_BLOCKS
 *   (CTAs per SM promised to the register allocator; default 3 for D=64 with 16 rows per
 *   warp, else 1), STOF_ORDER (1: the launch order from a table, as above, (b, h) by (b, h);
 *   2: in groups of (b, h) pairs; default 0), STOF_LAZY_RESCALE (1: O rescaled only when a row's
 *   max grows past 2^8, attention_common.cuh; default 0).
 * Measured best on an H200 (bench/NOTES-attention.md): for dense, causal and document
 * masks T=128 with 4 warps at D=64 (S >= 1024) and T=128 with 8 warps at D=128; for the
 * sparse masks (sliding, longformer, bigbird) T=64 with 4 warps. T=32 with 2 warps (16 query
 * rows each, sub-tiles of 32 keys) is what the engine runs on Hopper for masks of 32-wide
 * blocks (bigbird), where wgmma's 64-row tile would waste half its MMA work (H100, session
 * 15: 0.73-0.95x the time of the tile-64 wgmma kernel on bigbird; kernels/attention.c).
 */
#include "attention_common.cuh"

#ifndef STOF_WARPS
#define STOF_WARPS 4
#endif
#ifndef STOF_STAGES
#define STOF_STAGES 2
#endif
#ifndef STOF_SUB_N
#if STOF_TILE_M == 32
#define STOF_SUB_N 32
#else
#define STOF_SUB_N 64
#endif
#endif
#ifndef STOF_KV_SPLIT
#define STOF_KV_SPLIT 0
#endif
#ifndef STOF_ORDER
#define STOF_ORDER 0
#endif
#ifndef STOF_SUB_UNROLL /* H200: rolled 6-16% faster at D=64; unrolled only weakly ahead at D=128 */
#if STOF_HEAD_DIM == 64
#define STOF_SUB_UNROLL 0
#else
#define STOF_SUB_UNROLL 1
#endif
#endif
/* measured (H200): 3 (168 registers, no spill) beats 4 (128, spills); at T = 32 (64 threads
 * a CTA) 3 binds nothing (137 registers at D = 64), and 8 (128) measured within +-1.5% of it
 * on the H100 (session 15, bench/results/s15-h100/t32_table.txt) */
#ifndef STOF_MIN_BLOCKS
#if STOF_HEAD_DIM == 64 && STOF_TILE_M / STOF_WARPS == 16
#define STOF_MIN_BLOCKS 3
#else
#define STOF_MIN_BLOCKS 1
#endif
#endif
#if STOF_STAGES < 2 || STOF_STAGES > 4
#error "stof attention: STOF_STAGES must be 2, 3 or 4"
#endif
#if (STOF_TILE_M / STOF_WARPS) != 16 && (STOF_TILE_M / STOF_WARPS) != 32
#error "stof attention: STOF_TILE_M / STOF_WARPS (query rows per warp) must be 16 or 32"
#endif
#if (STOF_SUB_N != 32 && STOF_SUB_N != 64 && STOF_SUB_N != 128) || STOF_SUB_N > STOF_TILE_M
#error "stof attention: STOF_SUB_N must be 32, 64 or 128 and at most STOF_TILE_M"
#endif

namespace stof_attn {
namespace blk {

constexpr int kWarps = STOF_WARPS;
constexpr int kThreads = kWarps * 32;
constexpr int kStages = STOF_STAGES;
constexpr int kWRows = kT / kWarps;   /* query rows per warp */
constexpr int kMF = kWRows / 16;      /* 16-row mma fragments per warp */
constexpr int kNS = STOF_SUB_N;       /* score columns in registers at once */
constexpr int kNSub = kT / kNS;       /* sub-tiles per outer tile */
constexpr int kSubUnroll = STOF_SUB_UNROLL ? kNSub : 1;
constexpr int kNB = kNS / 8;          /* 8-column n-blocks of S per sub-tile */
constexpr int kKD = kD / 16;          /* k-steps of Q K^T */
constexpr int kDB = kD / 8;           /* 8-column n-blocks of O */
constexpr bool kSplit = STOF_KV_SPLIT != 0; /* K and V in separate cp.async groups */
constexpr int kGroups = kSplit ? 2 : 1;      /* cp.async groups per tile */
constexpr int kTileBytes = kT * kD * 2;
constexpr int kStageBytes = 2 * kTileBytes + kBmpWords * 8;
constexpr int kSmemBytes = kTileBytes + kStages * kStageBytes;
static_assert(kSmemBytes <= 227 * 1024, "stof attention: shared memory over the sm_90 limit of 227 KB");

/* Issue the copies of one K or V tile (tile column `col`) into shared memory at `dst`.
 * Thread tid copies 16-byte chunk tid % kCpr of rows tid / kCpr + it * kRowStep; rows past
 * Sk are zero-filled (from the slice's first row, a valid address). Rows are rs elements
 * apart: one 64-bit row address per tile, advanced by the row step, so that no per-thread
 * address or offset is loop-invariant (ptxas kept such values live and spilled: with
 * separate offsets it * step, 20 bytes of spills at D = 64, tile 64; a second, immediate-offset
 * branch for rows of stride D spilled 40 bytes, as did a kernel body instanced for both). */
constexpr int kRowStep = kThreads / kCpr;
__device__ __forceinline__ void load_tile(unsigned dst, const elem_t *G, int rs, int Sk, int col, int tid)
{
  const int k0 = col * kT;
  const int nrows = min(kT, Sk - k0);
  const int r0 = tid / kCpr, ch = tid % kCpr;
  const elem_t *Gr = G + (long long)(k0 + r0) * rs + ch * 8;
  const unsigned d0 = dst + swz(r0, ch);
#pragma unroll
  for (int it = 0; it < kT / kRowStep; ++it) {
    const bool ok = r0 + it * kRowStep < nrows;
    /* A row step that is a multiple of 8 keeps the swizzle phase (r & 7): a constant offset. */
    const unsigned d = kRowStep % 8 == 0 ? d0 + it * kRowStep * kCpr * 16 : dst + swz(r0 + it * kRowStep, ch);
    cp_async16(d, ok ? Gr : G, ok ? 16 : 0);
    Gr += kRowStep * rs;
  }
}

__device__ __forceinline__ void load_k(unsigned sbase, int st, const elem_t *Kg, int rs, int Sk, int col,
                                       int off, const unsigned long long *bitmap, int tid)
{
  const unsigned ks = sbase + kTileBytes + st * kStageBytes;
  load_tile(ks, Kg, rs, Sk, col, tid);
  if (off >= 0) { /* 8-byte copies: the format does not promise 16-byte aligned bitmaps */
    const unsigned bs = ks + 2 * kTileBytes;
#pragma unroll
    for (int it = 0; it < (kBmpWords + kThreads - 1) / kThreads; ++it) {
      const int w = tid + it * kThreads;
      if (kBmpWords % kThreads == 0 || w < kBmpWords)
        cp_async8(bs + w * 8, bitmap + (unsigned)off + w);
    }
  }
}

__device__ __forceinline__ void load_v(unsigned sbase, int st, const elem_t *Vg, int rs, int Sk, int col,
                                       int tid)
{
  load_tile(sbase + kTileBytes + st * kStageBytes + kTileBytes, Vg, rs, Sk, col, tid);
}

/* S = Q K^T over sub-tile `sub`'s kNS keys (K tile at ks_base), into s. */
__device__ __forceinline__ void qk_sub(float (&s)[kMF][kNB][4], unsigned ks_base, int sub,
                                       const unsigned (&qf)[kMF][kKD][4], int lane)
{
#pragma unroll
  for (int mf = 0; mf < kMF; ++mf)
#pragma unroll
    for (int nb = 0; nb < kNB; ++nb)
#pragma unroll
      for (int k = 0; k < 4; ++k) s[mf][nb][k] = 0.f;
#pragma unroll
  for (int ks = 0; ks < kKD; ++ks)
#pragma unroll
    for (int np = 0; np < kNB / 2; ++np) {
      const int q = lane >> 3;
      const int kr = sub * kNS + np * 16 + (q >> 1) * 8 + (lane & 7);
      unsigned b0, b1, b2, b3;
      ldsm_x4(ks_base + swz(kr, 2 * ks + (q & 1)), b0, b1, b2, b3);
#pragma unroll
      for (int mf = 0; mf < kMF; ++mf) {
        mma16816(s[mf][2 * np], qf[mf][ks], b0, b1);
        mma16816(s[mf][2 * np + 1], qf[mf][ks], b2, b3);
      }
    }
}

/* The score modifier, the mask (kPartial: keys whose bit is 0 get -inf) and the online
 * softmax of sub-tile `sub`'s scores s, which become exponentials; O is rescaled (with
 * STOF_LAZY_RESCALE only when a row's max grew too far: attention_common.cuh). */
template <bool kPartial>
__device__ __forceinline__ void softmax_sub(float (&s)[kMF][kNB][4], const unsigned *bmp, int sub,
                                            float (&o)[kMF][kDB][4], float (&mrow)[kMF][2],
                                            float (&lrow)[kMF][2], int wrow, int bsh, int bhi, float sl2,
                                            const mod_cta &mc, int rel0, float scale)
{
#if STOF_HAS_MOD
  /* The score modifier on the scaled scores (sl2 is then log2 e alone); rel0 is this
   * lane's offset j - i at (row g, column 2 t4) of the tile. */
#pragma unroll
  for (int mf = 0; mf < kMF; ++mf)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh)
#pragma unroll
      for (int nb = 0; nb < kNB; ++nb) {
        const int rel = rel0 + sub * kNS + nb * 8 - mf * 16 - hh * 8;
        s[mf][nb][2 * hh] = mod_score(s[mf][nb][2 * hh] * scale, rel, mc);
        s[mf][nb][2 * hh + 1] = mod_score(s[mf][nb][2 * hh + 1] * scale, rel + 1, mc);
      }
#endif

  if (kPartial) {
#pragma unroll
    for (int mf = 0; mf < kMF; ++mf)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int rb = (wrow + mf * 16 + hh * 8) >> 3;
#pragma unroll
        for (int nb = 0; nb < kNB; ++nb) {
          const int cb = sub * kNB + nb;
          const unsigned w = bmp[2 * (cb * kT8 + rb) + bhi] >> bsh;
          if (!(w & 1u)) s[mf][nb][2 * hh] = neg_inf();
          if (!(w & 2u)) s[mf][nb][2 * hh + 1] = neg_inf();
        }
      }
  }

#if STOF_LAZY_RESCALE
  /* Every row's max first; the warp moves its maxima only if one of them grew too far. */
  float mxr[kMF][2];
  bool grow = false;
#pragma unroll
  for (int mf = 0; mf < kMF; ++mf)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      float mx = mrow[mf][hh];
#pragma unroll
      for (int nb = 0; nb < kNB; ++nb)
        mx = fmaxf(mx, fmaxf(s[mf][nb][2 * hh], s[mf][nb][2 * hh + 1]));
      mxr[mf][hh] = lazy_row_max(mx, mrow[mf][hh], sl2, grow);
    }
  const bool upd = __any_sync(0xffffffffu, grow);
#endif
  /* Online softmax: rows g and g+8 of each fragment; a quad shares a row. */
#pragma unroll
  for (int mf = 0; mf < kMF; ++mf)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
#if STOF_LAZY_RESCALE
      const float mx = upd ? mxr[mf][hh] : mrow[mf][hh];
#else
      float mx = mrow[mf][hh];
#pragma unroll
      for (int nb = 0; nb < kNB; ++nb)
        mx = fmaxf(mx, fmaxf(s[mf][nb][2 * hh], s[mf][nb][2 * hh + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
#endif
      /* While no valid key has been seen the max is -inf: use 0 as its stand-in, so that
       * exp2(-inf - 0) = 0 and the (empty) accumulators are scaled by 0. */
      const float ms = (mx == neg_inf() ? 0.f : mx) * sl2;
#if STOF_LAZY_RESCALE
      const float alpha = upd ? ex2(mrow[mf][hh] * sl2 - ms) : 1.f;
#else
      const float alpha = ex2(mrow[mf][hh] * sl2 - ms);
#endif
      mrow[mf][hh] = mx;
      float sum = 0.f;
#pragma unroll
      for (int nb = 0; nb < kNB; ++nb) {
        const float p0 = ex2(fmaf(s[mf][nb][2 * hh], sl2, -ms));
        const float p1 = ex2(fmaf(s[mf][nb][2 * hh + 1], sl2, -ms));
        s[mf][nb][2 * hh] = p0;
        s[mf][nb][2 * hh + 1] = p1;
        sum += p0 + p1;
      }
      lrow[mf][hh] = lrow[mf][hh] * alpha + sum;
#if STOF_LAZY_RESCALE
      if (upd) /* warp-uniform: alpha is 1 for every row otherwise */
#endif
#pragma unroll
        for (int db = 0; db < kDB; ++db) {
          o[mf][db][2 * hh] *= alpha;
          o[mf][db][2 * hh + 1] *= alpha;
        }
    }
}

/* O += P V over sub-tile `sub`'s keys (V tile at vs_base; s holds P's exponentials). */
__device__ __forceinline__ void pv_sub(const float (&s)[kMF][kNB][4], unsigned vs_base, int sub,
                                       float (&o)[kMF][kDB][4], int lane)
{
#pragma unroll
  for (int kk = 0; kk < kNS / 16; ++kk) {
    unsigned a[kMF][4];
#pragma unroll
    for (int mf = 0; mf < kMF; ++mf) {
      a[mf][0] = pack2(s[mf][2 * kk][0], s[mf][2 * kk][1]);
      a[mf][1] = pack2(s[mf][2 * kk][2], s[mf][2 * kk][3]);
      a[mf][2] = pack2(s[mf][2 * kk + 1][0], s[mf][2 * kk + 1][1]);
      a[mf][3] = pack2(s[mf][2 * kk + 1][2], s[mf][2 * kk + 1][3]);
    }
#pragma unroll
    for (int dp = 0; dp < kDB / 2; ++dp) {
      const int q = lane >> 3;
      const int vr = sub * kNS + kk * 16 + (q & 1) * 8 + (lane & 7);
      unsigned b0, b1, b2, b3;
      ldsm_x4_t(vs_base + swz(vr, 2 * dp + (q >> 1)), b0, b1, b2, b3);
#pragma unroll
      for (int mf = 0; mf < kMF; ++mf) {
        mma16816(o[mf][2 * dp], a[mf], b0, b1);
        mma16816(o[mf][2 * dp + 1], a[mf], b2, b3);
      }
    }
  }
}

/* One K/V tile for one warp: S = Q K^T, mask (partial tiles), online softmax, O += P V.
 * kPartial = false: no mask work. kPartial = true: the bitmap sets invalid scores to -inf,
 * and a sub-tile with no valid key for any of this warp's rows (its bits in gm, one per 16
 * keys, all 0) is skipped whole. Finer skipping (per 16 keys) was measured slower: branches
 * between the ldmatrix and mma instructions cost ptxas its scheduling. With STOF_KV_SPLIT
 * the CTA-wide wait for V sits between the softmax and P V of the first sub-tile, so every
 * warp reaches it. */
template <bool kPartial>
__device__ __forceinline__ void tile_body(unsigned ks_base, unsigned vs_base, const unsigned *bmp,
                                          unsigned gm, const unsigned (&qf)[kMF][kKD][4],
                                          float (&o)[kMF][kDB][4], float (&mrow)[kMF][2],
                                          float (&lrow)[kMF][2], int lane, int wrow, int bsh,
                                          int bhi, float sl2, const mod_cta &mc, int rel0,
                                          float scale)
{
#pragma unroll kSubUnroll
  for (int sub = 0; sub < kNSub; ++sub) {
    const unsigned gs = kPartial ? (gm >> (sub * (kNS / 16))) & ((1u << (kNS / 16)) - 1u) : 1u;
    float s[kMF][kNB][4];
    if (!kPartial || gs) {
      qk_sub(s, ks_base, sub, qf, lane);
      softmax_sub<kPartial>(s, bmp, sub, o, mrow, lrow, wrow, bsh, bhi, sl2, mc, rel0, scale);
    }

    if (kSplit && sub == 0) {
      cp_async_wait<kGroups * kStages - 2>(); /* V of the tile landed */
      __syncthreads();
    }

    if (!kPartial || gs) pv_sub(s, vs_base, sub, o, lane);
  }
}

} /* namespace blk */
} /* namespace stof_attn */

extern "C" __global__ void __launch_bounds__(STOF_WARPS * 32, STOF_MIN_BLOCKS)
stof_attn_block_fwd(const stof_attn::elem_t *__restrict__ Q, const stof_attn::elem_t *__restrict__ K,
                    const stof_attn::elem_t *__restrict__ V, stof_attn::elem_t *__restrict__ O,
                    const int *__restrict__ row_ptr, const int *__restrict__ col_idx,
                    const int *__restrict__ bmp_off, const unsigned long long *__restrict__ bitmap,
                    int B, int H, int Hkv, int Sq, int Sk, int mask_b, int mask_h, float scale,
                    const stof_attn::layout_t L, const stof_attn::mod_t M
#if STOF_ORDER
                    , const stof_attn::order_t ORD
#endif
                    )
{
  using namespace stof_attn;
  using namespace stof_attn::blk;
  extern __shared__ __align__(128) unsigned char smem[];

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t4 = lane & 3;
#if STOF_ORDER
  const int nrow = (Sq + kT - 1) / kT;
  int ord_k;
  const int bh = order_cta<STOF_ORDER == 2>(B * H, nrow, ORD.nheavy, ORD.group, ord_k);
  if (bh >= B * H) return; /* the last z slice's spare CTAs */
  const int b = bh / H, h = bh - b * H;
  const int inst = (mask_b > 1 ? b : 0) * mask_h + (mask_h > 1 ? h : 0);
  const int r = __ldg(ORD.row + (long long)inst * nrow + ord_k);
#else
  const int bh = blockIdx.y + gridDim.y * blockIdx.z; /* B * H may exceed 65535 (grid y) */
  if (bh >= B * H) return;                            /* the last z slice's spare CTAs */
  const int b = bh / H, h = bh - b * H;
  const int nrow = (Sq + kT - 1) / kT;
  const int r = nrow - 1 - (int)blockIdx.x;
  const int inst = (mask_b > 1 ? b : 0) * mask_h + (mask_h > 1 ? h : 0);
#endif
  const int *rp = row_ptr + (unsigned long long)inst * (nrow + 1) + r;
  const int e0 = __ldg(rp), n = __ldg(rp + 1) - e0;
  const int hk = h / (H / Hkv);
  const int q0 = r * kT;
  const int qrows = min(kT, Sq - q0);
  const elem_t *Qg = Q + (long long)b * L.q[0] + (long long)h * L.q[1] + (long long)q0 * L.q[2];
  const elem_t *Kg = K + (long long)b * L.k[0] + (long long)hk * L.k[1];
  const elem_t *Vg = V + (long long)b * L.v[0] + (long long)hk * L.v[1];
  elem_t *Og = O + (long long)b * L.o[0] + (long long)h * L.o[1] + (long long)q0 * L.o[2];
  const int qs = (int)L.q[2], ksr = (int)L.k[2], vsr = (int)L.v[2], os = (int)L.o[2];
  const unsigned sbase = smem_addr(smem);
  /* scores to log2 units: the scale folded in, or (modifier) applied before it */
  const float sl2 = STOF_HAS_MOD ? 1.4426950408889634f : scale * 1.4426950408889634f;
  const mod_cta mc = mod_begin(M, h);

  /* Q tile (rows past Sq zero-filled): its own group, first. */
#pragma unroll
  for (int it = 0; it < kT * kCpr / kThreads; ++it) {
    const int c = tid + it * kThreads;
    const int rr = c / kCpr, ch = c % kCpr;
    const bool ok = rr < qrows;
    cp_async16(sbase + swz(rr, ch), Qg + (ok ? (unsigned)rr * qs : 0u) + ch * 8, ok ? 16 : 0);
  }
  cp_async_commit();

  /* Prologue: the first STAGES-1 non-empty tiles, K (+bitmap) and V as separate groups.
   * `pend` bit k says whether the k-th tile from the current one is partial. */
  unsigned pend = 0;
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < n) {
      const int col = __ldg(col_idx + e0 + s), off = __ldg(bmp_off + e0 + s);
      load_k(sbase, s, Kg, ksr, Sk, col, off, bitmap, tid);
      if (kSplit) cp_async_commit();
      load_v(sbase, s, Vg, vsr, Sk, col, tid);
      cp_async_commit();
      pend |= (off >= 0 ? 1u : 0u) << s;
    } else {
      if (kSplit) cp_async_commit();
      cp_async_commit();
    }
  }
  /* The column and bitmap offset of the next tile to prefetch, read one iteration early. */
  int nx_col = 0, nx_off = -1;
  if (kStages - 1 < n) {
    nx_col = __ldg(col_idx + e0 + kStages - 1);
    nx_off = __ldg(bmp_off + e0 + kStages - 1);
  }

  cp_async_wait<kGroups * (kStages - 1)>();
  __syncthreads();

  const int wrow = warp * kWRows;
  unsigned qf[kMF][kKD][4];
#pragma unroll
  for (int mf = 0; mf < kMF; ++mf)
#pragma unroll
    for (int ks = 0; ks < kKD; ++ks) {
      const int q = lane >> 3, rr = wrow + mf * 16 + (q & 1) * 8 + (lane & 7);
      ldsm_x4(sbase + swz(rr, 2 * ks + (q >> 1)), qf[mf][ks][0], qf[mf][ks][1], qf[mf][ks][2],
              qf[mf][ks][3]);
    }

  float o[kMF][kDB][4];
  float mrow[kMF][2], lrow[kMF][2];
#pragma unroll
  for (int mf = 0; mf < kMF; ++mf) {
#pragma unroll
    for (int db = 0; db < kDB; ++db)
#pragma unroll
      for (int k = 0; k < 4; ++k) o[mf][db][k] = 0.f;
    mrow[mf][0] = mrow[mf][1] = neg_inf();
    lrow[mf][0] = lrow[mf][1] = 0.f;
  }

  /* Per-lane bit position of element (row g, column 2*t4) inside a 32-bit half of an 8x8
   * inner-tile word. */
  const int bsh = (g & 3) * 8 + 2 * t4, bhi = g >> 2;

  const unsigned long long *bmp64_all =
      reinterpret_cast<const unsigned long long *>(smem + kTileBytes + 2 * kTileBytes);
  for (int i = 0; i < n; ++i) {
    const int st = i % kStages;
    /* K (+bitmap) of tile i landed (and V too unless split) for all threads; everyone is done
     * with tile i-1, whose buffer the prefetch below overwrites. */
    cp_async_wait<kGroups * kStages - kGroups - 1>();
    __syncthreads();

    const int j = i + kStages - 1;
    if (j < n) {
      load_k(sbase, j % kStages, Kg, ksr, Sk, nx_col, nx_off, bitmap, tid);
      if (kSplit) cp_async_commit();
      load_v(sbase, j % kStages, Vg, vsr, Sk, nx_col, tid);
      cp_async_commit();
      pend |= (nx_off >= 0 ? 1u : 0u) << (kStages - 1);
      if (j + 1 < n) {
        nx_col = __ldg(col_idx + e0 + j + 1);
        nx_off = __ldg(bmp_off + e0 + j + 1);
      }
    } else {
      if (kSplit) cp_async_commit();
      cp_async_commit();
    }
    const bool partial = pend & 1u;
    pend >>= 1;

    const unsigned ks_base = sbase + kTileBytes + st * kStageBytes;
    const unsigned vs_base = ks_base + kTileBytes;
    const unsigned *bmp = reinterpret_cast<const unsigned *>(smem + kTileBytes + st * kStageBytes +
                                                             2 * kTileBytes);

    /* Which 16-column groups of this partial tile hold a valid key for one of this warp's
     * rows (bit per group): a sub-tile whose groups are all empty is skipped. */
    unsigned gm = 0u;
    if (partial) {
      constexpr int kWpg = 4 * kMF; /* bitmap words per (warp, 16-column group) */
      constexpr int kW = kT8 * 2 * kMF;
      const unsigned long long *bmp64 =
          reinterpret_cast<const unsigned long long *>(reinterpret_cast<const unsigned char *>(bmp64_all) +
                                                       st * kStageBytes);
#pragma unroll
      for (int w0 = 0; w0 < kW; w0 += 32) {
        const int w = w0 + lane;
        bool nz = false;
        if (w < kW) nz = bmp64[(w / (2 * kMF)) * kT8 + (wrow >> 3) + w % (2 * kMF)] != 0ull;
        const unsigned bal = __ballot_sync(0xffffffffu, nz);
#pragma unroll
        for (int gq = 0; gq < 32 / kWpg; ++gq)
          if (w0 + gq * kWpg < kW && ((bal >> (gq * kWpg)) & ((1u << kWpg) - 1u)))
            gm |= 1u << (w0 / kWpg + gq);
      }
    }

    const int rel0 = STOF_HAS_MOD ? __ldg(col_idx + e0 + i) * kT + 2 * t4 - (q0 + wrow + g) : 0;
    if (partial)
      tile_body<true>(ks_base, vs_base, bmp, gm, qf, o, mrow, lrow, lane, wrow, bsh, bhi, sl2, mc, rel0,
                      scale);
    else
      tile_body<false>(ks_base, vs_base, bmp, gm, qf, o, mrow, lrow, lane, wrow, bsh, bhi, sl2, mc, rel0,
                       scale);
  }

  /* Epilogue: O / l (0 for a row with no valid key), staged through this warp's own rows of
   * the Q buffer for 16-byte stores. The warp's lanes read those rows with ldmatrix (Q); the
   * __syncwarp orders every lane's reads before any lane's writes (compute-sanitizer's
   * racecheck reported the unordered pair as a warp-level WAR hazard). */
  __syncwarp();
#pragma unroll
  for (int mf = 0; mf < kMF; ++mf)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      float l = lrow[mf][hh];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const float inv = l > 0.f ? 1.f / l : 0.f;
      const int rr = wrow + mf * 16 + hh * 8 + g;
#pragma unroll
      for (int db = 0; db < kDB; ++db) {
        const unsigned v = pack2(o[mf][db][2 * hh] * inv, o[mf][db][2 * hh + 1] * inv);
        *reinterpret_cast<unsigned *>(smem + swz(rr, db) + t4 * 4) = v;
      }
    }
  __syncwarp();
#pragma unroll
  for (int c = lane; c < kWRows * kCpr; c += 32) {
    const int rr = wrow + c / kCpr, ch = c % kCpr;
    if (rr < qrows)
      *reinterpret_cast<uint4 *>(Og + (unsigned)rr * os + ch * 8) =
          *reinterpret_cast<const uint4 *>(smem + swz(rr, ch));
  }
}
