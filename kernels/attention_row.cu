/*
 * Row-wise sparse attention, forward (inference): for short sequences and very sparse rows.
 *
 * A warp owns one query row. It walks the row's non-empty mask tiles (BSR + bitmap format)
 * in batches of 2048/T (lane l loads tile l's column and the row's T-bit mask in it, so a
 * batch costs one memory latency), writes the batch's valid key columns to a per-warp list
 * in shared memory and computes them in rounds:
 *   - lanes form groups of D/8 lanes; a group owns one key at a time, each lane 8 of its D
 *     elements (16-byte loads, a group reads one contiguous row), so a D=64 warp works on 4
 *     keys at once (D=128: 2) and a round is STOF_ROW_KEYS keys per group;
 *   - score = q . k with the q row in registers (f32, pre-multiplied by scale*log2 e),
 *     reduced over the group's lanes by shuffles;
 *   - each group keeps its own online-softmax state (running max, sum, 8 output elements
 *     per lane), updated once per round; the groups are merged by shuffles at the end.
 * Only valid keys are loaded or computed (a round is padded only at a batch's tail). A row
 * with no valid key writes zeros, never NaN.
 *
 * Entry point:
 *   extern "C" __global__ void stof_attn_row_fwd(
 *       const elem *Q, const elem *K, const elem *V, elem *O,
 *       const int *row_ptr, const int *col_idx, const int *bmp_off,
 *       const unsigned long long *bitmap,
 *       int B, int H, int Hkv, int Sq, int Sk, int mask_b, int mask_h, float scale,
 *       stof_attn::layout_t L, stof_attn::mod_t M)
 *   the same parameters and layouts (strides) as stof_attn_block_fwd (attention_block.cu).
 *   grid  = (ceil(Sq / STOF_ROW_WARPS), min(B * H, 65535), ceil(B * H / 65535));
 *           blockIdx.x = x owns query rows (ceil(Sq/W) - 1 - x) * W + warp of head
 *           bh = blockIdx.y + gridDim.y * blockIdx.z, W = STOF_ROW_WARPS (last rows first; a
 *           head's rows run together, so that its K and V stay in L2)
 *   block = 32 * STOF_ROW_WARPS threads; no dynamic shared memory (static: W * 4 KB)
 *
 * Registers: at most 64 (launch bounds of 32 / STOF_ROW_WARPS CTAs per SM: full occupancy, as
 * the contiguous kernel had at 63 on its own; the strided loads took ptxas to 80 without it).
 *
 * Macros: STOF_HEAD_DIM (64|128), STOF_BF16 (0|1), STOF_TILE_M = STOF_TILE_N (64|128: the
 *   tile of the mask format; 32 compiles, for bench/attn_dev.cu's tile-32 configurations,
 *   but the engine never runs it: its selector sends tile 32 to the block kernel only),
 *   STOF_ROW_WARPS (default 4: query rows per CTA), STOF_ROW_KEYS (default 4: keys per lane
 *   group per round; 2, 4 or 8).
 */
#include "attention_common.cuh"

#ifndef STOF_ROW_WARPS
#define STOF_ROW_WARPS 4
#endif
#if STOF_ROW_WARPS < 1 || STOF_ROW_WARPS > 8
#error "stof attention: STOF_ROW_WARPS must be between 1 and 8 (4 KB of key list per warp)"
#endif
#ifndef STOF_ROW_KEYS
#define STOF_ROW_KEYS 4
#endif
#if STOF_ROW_KEYS != 2 && STOF_ROW_KEYS != 4 && STOF_ROW_KEYS != 8
#error "stof attention: STOF_ROW_KEYS (keys per lane group per round) must be 2, 4 or 8"
#endif

namespace stof_attn {
namespace row {

constexpr int kRW = STOF_ROW_WARPS;
constexpr int kLPR = kD / 8;     /* lanes per key row, 8 elements each */
constexpr int kNG = 32 / kLPR;   /* key groups per warp */
constexpr int kR = STOF_ROW_KEYS; /* keys per group per round */
constexpr int kRK = kNG * kR;    /* keys per round */
/* tiles per batch: one per lane at most, 32 (T=32, 64) or 16 (T=128) */
constexpr int kBatch = kT >= 64 ? 32 * 64 / kT : 32;
constexpr int kList = kBatch * kT; /* key list capacity per warp (2048 entries; 1024 at T=32) */

__device__ __forceinline__ void unpack8(const uint4 &v, float *f)
{
  float2 t;
  t = unpack2(v.x); f[0] = t.x; f[1] = t.y;
  t = unpack2(v.y); f[2] = t.x; f[3] = t.y;
  t = unpack2(v.z); f[4] = t.x; f[5] = t.y;
  t = unpack2(v.w); f[6] = t.x; f[7] = t.y;
}

/* One round: the nk (<= kRK) keys list[0 ..] update this group's softmax state. A list
 * entry is (batch lane << 7) | column in tile; the tile's column index is in register `col`
 * of that lane. */
__device__ __forceinline__ void round_keys(const unsigned short *list, int nk, int col, int grp,
                                           int dl, const elem_t *Kg, const elem_t *Vg, int ks,
                                           int vs, const float *q, float &m, float &l, float *o,
                                           int qi, const mod_cta &mc)
{
  int idx[kR];
  uint4 kv[kR], vv[kR];
#pragma unroll
  for (int u = 0; u < kR; ++u) {
    const int k = u * kNG + grp;
    const unsigned ent = list[k < nk ? k : 0];
    const int c = __shfl_sync(0xffffffffu, col, (int)(ent >> 7));
    idx[u] = k < nk ? c * kT + (int)(ent & 127u) : -1;
  }
#pragma unroll
  for (int u = 0; u < kR; ++u) {
    if (idx[u] >= 0) {
      kv[u] = __ldg(reinterpret_cast<const uint4 *>(Kg + (unsigned long long)(unsigned)idx[u] * (unsigned)ks + dl * 8));
      vv[u] = __ldg(reinterpret_cast<const uint4 *>(Vg + (unsigned long long)(unsigned)idx[u] * (unsigned)vs + dl * 8));
    } else {
      kv[u] = make_uint4(0u, 0u, 0u, 0u);
      vv[u] = make_uint4(0u, 0u, 0u, 0u);
    }
  }
  float s[kR];
  float mx = m;
#pragma unroll
  for (int u = 0; u < kR; ++u) {
    float kf[8];
    unpack8(kv[u], kf);
    float acc = 0.f;
#pragma unroll
    for (int d = 0; d < 8; ++d) acc = fmaf(q[d], kf[d], acc);
#pragma unroll
    for (int off = 1; off < kLPR; off <<= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
#if STOF_HAS_MOD
    /* q holds scale * q: the modifier on the scaled score, then to log2 units */
    acc = mod_score(acc, idx[u] - qi, mc) * 1.4426950408889634f;
#endif
    s[u] = idx[u] >= 0 ? acc : neg_inf();
    mx = fmaxf(mx, s[u]);
  }
  const float ms = mx == neg_inf() ? 0.f : mx;
  const float alpha = ex2(m - ms);
  m = mx;
  l *= alpha;
#pragma unroll
  for (int d = 0; d < 8; ++d) o[d] *= alpha;
#pragma unroll
  for (int u = 0; u < kR; ++u) {
    const float p = ex2(s[u] - ms);
    l += p;
    float vf[8];
    unpack8(vv[u], vf);
#pragma unroll
    for (int d = 0; d < 8; ++d) o[d] = fmaf(p, vf[d], o[d]);
  }
}

} /* namespace row */
} /* namespace stof_attn */

extern "C" __global__ void __launch_bounds__(STOF_ROW_WARPS * 32, 32 / STOF_ROW_WARPS)
stof_attn_row_fwd(const stof_attn::elem_t *__restrict__ Q, const stof_attn::elem_t *__restrict__ K,
                  const stof_attn::elem_t *__restrict__ V, stof_attn::elem_t *__restrict__ O,
                  const int *__restrict__ row_ptr, const int *__restrict__ col_idx,
                  const int *__restrict__ bmp_off, const unsigned long long *__restrict__ bitmap,
                  int B, int H, int Hkv, int Sq, int Sk, int mask_b, int mask_h, float scale,
                  const stof_attn::layout_t L, const stof_attn::mod_t M)
{
  using namespace stof_attn;
  using namespace stof_attn::row;
  __shared__ unsigned short list_all[kRW][kList];

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int bh = blockIdx.y + gridDim.y * blockIdx.z; /* B * H may exceed 65535 (grid y) */
  if (bh >= B * H) return;                            /* the last z slice's spare CTAs */
  const int b = bh / H, h = bh - b * H;
  const int nyb = (Sq + kRW - 1) / kRW;
  const int i = (nyb - 1 - (int)blockIdx.x) * kRW + warp;
  if (i >= Sq) return; /* whole warp; no CTA-wide barrier below */

  const int nrow = (Sq + kT - 1) / kT;
  const int r = i / kT, lr = i - r * kT, rb = lr >> 3, rsh = (lr & 7) * 8;
  const int inst = (mask_b > 1 ? b : 0) * mask_h + (mask_h > 1 ? h : 0);
  const int *rp = row_ptr + (unsigned long long)inst * (nrow + 1) + r;
  const int e0 = __ldg(rp), e1 = __ldg(rp + 1);
  const int hk = h / (H / Hkv);
  const elem_t *Kg = K + (long long)b * L.k[0] + (long long)hk * L.k[1];
  const elem_t *Vg = V + (long long)b * L.v[0] + (long long)hk * L.v[1];
  const int ks = (int)L.k[2], vs = (int)L.v[2];
  const int grp = lane / kLPR, dl = lane % kLPR;
  /* q pre-multiplied: scores in log2 units, or (modifier) scaled ones that it modifies */
  const float sl2 = STOF_HAS_MOD ? scale : scale * 1.4426950408889634f;
  const mod_cta mc = mod_begin(M, h);

  float q[8];
  {
    const uint4 qv =
        __ldg(reinterpret_cast<const uint4 *>(Q + (long long)b * L.q[0] + (long long)h * L.q[1] +
                                              (long long)i * L.q[2] + dl * 8));
    unpack8(qv, q);
#pragma unroll
    for (int d = 0; d < 8; ++d) q[d] *= sl2;
  }

  float m = neg_inf(), l = 0.f, o[8];
#pragma unroll
  for (int d = 0; d < 8; ++d) o[d] = 0.f;

  unsigned short *list = list_all[warp];
  const unsigned lt = (1u << lane) - 1u;
  /* Tiles in batches: lane l fetches tile e + l's column and this row's T-bit mask in it
   * (independent loads: one memory latency per batch, not per tile). The batch's valid keys
   * go to a per-warp list, by tiles (a ballot-free append of each non-empty tile's mask, 32
   * columns per step) or by bits (each lane writes its own tile's set bits), whichever takes
   * fewer steps; then the list is consumed in rounds of kRK keys. */
  for (int eb = e0; eb < e1; eb += kBatch) {
    const int e = eb + lane;
    int col = 0;
    unsigned mw[kT / 32];
#pragma unroll
    for (int p = 0; p < kT / 32; ++p) mw[p] = 0u;
    if (lane < kBatch && e < e1) {
      col = __ldg(col_idx + e);
      const int off = __ldg(bmp_off + e);
      if (off < 0) {
#pragma unroll
        for (int p = 0; p < kT / 32; ++p) mw[p] = 0xffffffffu; /* full tile: every column */
      } else {
        const unsigned long long *bw = bitmap + (unsigned long long)off + rb;
#pragma unroll
        for (int ci = 0; ci < kT8; ++ci)
          mw[ci >> 2] |= (unsigned)((__ldg(bw + ci * kT8) >> rsh) & 0xffull) << (8 * (ci & 3));
      }
    }
    int cnt = 0;
#pragma unroll
    for (int p = 0; p < kT / 32; ++p) cnt += __popc(mw[p]);
    int pre = cnt; /* inclusive scan of the counts over lanes */
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
      const int v = __shfl_up_sync(0xffffffffu, pre, d);
      if (lane >= d) pre += v;
    }
    const int total = __shfl_sync(0xffffffffu, pre, 31);
    if (total == 0) continue;
    pre -= cnt; /* exclusive */
    const unsigned nonempty = __ballot_sync(0xffffffffu, cnt > 0);
    const int maxc = __reduce_max_sync(0xffffffffu, (unsigned)cnt);
    if (__popc(nonempty) * (kT / 32) * 4 <= maxc) {
      unsigned todo = nonempty;
      while (todo) {
        const int src = __ffs(todo) - 1;
        todo &= todo - 1u;
        int pos = __shfl_sync(0xffffffffu, pre, src);
#pragma unroll
        for (int p = 0; p < kT / 32; ++p) {
          const unsigned bits = __shfl_sync(0xffffffffu, mw[p], src);
          if ((bits >> lane) & 1u)
            list[pos + __popc(bits & lt)] = (unsigned short)((src << 7) | (p * 32 + lane));
          pos += __popc(bits);
        }
      }
    } else {
      int pos = pre;
#pragma unroll
      for (int p = 0; p < kT / 32; ++p) {
        unsigned bits = mw[p];
        while (bits) {
          const int bit = __ffs(bits) - 1;
          bits &= bits - 1u;
          list[pos++] = (unsigned short)((lane << 7) | (p * 32 + bit));
        }
      }
    }
    __syncwarp();
    for (int base = 0; base < total; base += kRK)
      round_keys(list + base, min(kRK, total - base), col, grp, dl, Kg, Vg, ks, vs, q, m, l, o, i, mc);
    __syncwarp(); /* the list is rewritten by the next batch */
  }

  /* Merge the groups' states (same lane position dl in each group). */
#pragma unroll
  for (int off = kLPR; off < 32; off <<= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, off);
    const float l2 = __shfl_xor_sync(0xffffffffu, l, off);
    const float mx = fmaxf(m, m2);
    const float ms = mx == neg_inf() ? 0.f : mx;
    const float a = ex2(m - ms), c2 = ex2(m2 - ms);
    l = l * a + l2 * c2;
#pragma unroll
    for (int d = 0; d < 8; ++d) {
      const float o2 = __shfl_xor_sync(0xffffffffu, o[d], off);
      o[d] = o[d] * a + o2 * c2;
    }
    m = mx;
  }
  if (grp == 0) {
    const float inv = l > 0.f ? 1.f / l : 0.f;
    *reinterpret_cast<uint4 *>(O + (long long)b * L.o[0] + (long long)h * L.o[1] + (long long)i * L.o[2] +
                               dl * 8) = pack8_scaled(o, inv);
  }
}
