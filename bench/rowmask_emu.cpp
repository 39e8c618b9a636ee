/*
 * rowmask_emu: STOF_SM90_ROWMASK's device helpers (kernels/attention_block_sm90.cu:
 * rm_transpose, rm_src, rm_load, rm_apply) run on the CPU, one thread per lane for the
 * shuffles, against the bitmap format bit for bit. No GPU: bench/rowmask_emu.sh cuts the
 * helpers' block out of the kernel source (the text the GPU compiles) into rowmask_block.inc
 * and builds this file once per tile (64, 128) and producer path (TMA or not).
 *
 * Per random 64 x 64 (128 x 128) tile (dense, sparse, mostly kept, one half empty): the
 * 8 x 8 block words as kernels/mask_format.c builds them; with TMA at T = 64 the producer
 * warp's words (rm_src halves through rm_transpose into the stage, word 32 w + lane) and its
 * vote on the dead half; then every consumer lane's rm_load and rm_apply on scores of 1 and
 * the (row, key) of each score kept or set to -inf compared with the mask; at T = 64 also
 * the half form of STOF_SM90_HALFSKIP (bits shifted by 8 kh, key blocks 0..3 of the half).
 */
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cstdint>
#include <thread>
#include <barrier>
#include <vector>
#include <random>
#include <cmath>
#ifndef TILE
#define TILE 64
#endif
#define __device__
#define __forceinline__ inline
constexpr int kT = TILE, kT8 = kT / 8;
constexpr bool kTma = EMU_TMA;
constexpr int kWG = kT / 64, kThreads = 128 * kWG;
constexpr int kProdThreads = !kTma ? 0 : kWG == 2 ? 128 : 32;
constexpr int kBmpBytes = kT8 * kT8 * 8;
constexpr int kStages = 2, kBarBytes = 128;
static inline float neg_inf() { return -INFINITY; }
static inline unsigned __funnelshift_l(unsigned lo, unsigned hi, unsigned sh) {
  sh &= 31; unsigned long long v = ((unsigned long long)hi << 32) | lo; return (unsigned)((v << sh) >> 32);
}
static inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
  unsigned long long v = ((unsigned long long)y << 32) | x; unsigned r = 0;
  for (int i = 0; i < 4; ++i) r |= (unsigned)((v >> (8 * ((s >> (4 * i)) & 7))) & 0xff) << (8 * i);
  return r;
}
static std::barrier<> *g_bar; static unsigned g_slot[32]; static thread_local int t_lane;
static unsigned __shfl_xor_sync(unsigned, unsigned v, int m) {
  g_slot[t_lane] = v; g_bar->arrive_and_wait(); unsigned r = g_slot[t_lane ^ m]; g_bar->arrive_and_wait(); return r;
}
#include "rowmask_block.inc"

int main() {
  std::mt19937_64 rng(12345);
  long bad = 0, checked = 0;
  for (int trial = 0; trial < 300; ++trial) {
    // random masks: half kept, 1/8 kept, 7/8 kept, keys 0..T/2-1 empty, keys T/2.. empty, one bit
    std::vector<std::vector<int>> M(kT, std::vector<int>(kT));
    const int mode = trial % 6;
    const unsigned long long one = rng() % (kT * kT);
    for (int r = 0; r < kT; ++r) for (int k = 0; k < kT; ++k) {
      unsigned long long z = rng();
      M[r][k] = mode == 0 ? (z & 1) : mode == 1 ? ((z & 7) == 0) : mode == 2 ? ((z & 7) != 0)
              : mode == 3 ? (k < kT / 2 ? 0 : (z & 1)) : mode == 4 ? (k >= kT / 2 ? 0 : (z & 1))
              : (unsigned long long)(r * kT + k) == one;
    }
    std::vector<unsigned long long> W(kT8 * kT8, 0);   // kernels/mask_format.c: word (key/8)*kT8 + row/8, bit (row%8)*8 + key%8
    for (int r = 0; r < kT; ++r) for (int k = 0; k < kT; ++k) if (M[r][k]) W[(k / 8) * kT8 + r / 8] |= 1ull << ((r % 8) * 8 + k % 8);
    const unsigned *bmp32 = reinterpret_cast<const unsigned *>(W.data()); // little-endian halves
    std::vector<unsigned> stage(kBmpBytes / 4);
    unsigned flags = 0;
    int nwarp = kThreads / 32;
    std::vector<std::vector<unsigned>> got(nwarp, std::vector<unsigned>(32 * (kT / 64)));
    std::barrier bar(32); g_bar = &bar;
    if (kRmProducer) {
      // the producer warp: bw[w] = bitmap + rm_src(0, w, lane); transposed words to word 32 w + lane; vote
      std::vector<std::thread> th;
      unsigned lo_any = 0, hi_any = 0;
      for (int lane = 0; lane < 32; ++lane) th.emplace_back([&, lane] {
        t_lane = lane; unsigned bw[4];
        for (int w = 0; w < 4; ++w) bw[w] = bmp32[rm_src(0, w, lane)];
        for (int w = 0; w < 4; ++w) stage[32 * w + lane] = rm_transpose(bw[w], lane);
        const bool any = (bw[0] | bw[1] | bw[2] | bw[3]) != 0u;
        if (any && (lane & 7) < 4) __atomic_fetch_or(&lo_any, 1u, __ATOMIC_SEQ_CST);
        if (any && (lane & 7) >= 4) __atomic_fetch_or(&hi_any, 1u, __ATOMIC_SEQ_CST);
      });
      for (auto &t : th) t.join();
      flags = lo_any | hi_any << 1;
      unsigned long long lo = 0, hi = 0;
      for (int i = 0; i < 32; ++i) lo |= W[i], hi |= W[32 + i];
      if (flags != ((lo != 0) | (hi != 0) << 1)) { printf("flags mismatch trial %d\n", trial); ++bad; }
    } else {
      memcpy(stage.data(), bmp32, kBmpBytes);
    }
    for (int w = 0; w < nwarp; ++w) {
      std::vector<std::thread> th;
      for (int lane = 0; lane < 32; ++lane) th.emplace_back([&, w, lane] {
        t_lane = lane; unsigned m[kT / 64];
        rm_load(m, stage.data(), 16 * w, lane);
        for (int c = 0; c < kT / 64; ++c) got[w][32 * c + lane] = m[c];
      });
      for (auto &t : th) t.join();
    }
    for (int w = 0; w < nwarp; ++w) for (int lane = 0; lane < 32; ++lane) {
      int g = lane >> 2, t4 = lane & 3;
      unsigned m[kT / 64]; for (int c = 0; c < kT / 64; ++c) m[c] = got[w][32 * c + lane];
      float s[kT / 2]; for (int i = 0; i < kT / 2; ++i) s[i] = 1.0f;
      rm_apply<kT / 8>(s, m);
      for (int hh = 0; hh < 2; ++hh) for (int nb = 0; nb < kT8; ++nb) for (int e = 0; e < 2; ++e) {
        int row = 16 * w + 8 * hh + g, key = 8 * nb + 2 * t4 + e;
        int keep = s[4 * nb + 2 * hh + e] == 1.0f;
        ++checked; if (keep != M[row][key]) { if (bad < 10) printf("mismatch trial %d w %d lane %d row %d key %d\n", trial, w, lane, row, key); ++bad; }
      }
      if constexpr (kT == 64) for (int kh = 0; kh < 2; ++kh) { // hs_tile<true>: m >> 8 kh, key blocks 0..3 of the half
        unsigned mh[kT / 64] = {m[0] >> (8 * kh)};
        float sh[16]; for (int i = 0; i < 16; ++i) sh[i] = 1.0f;
        rm_apply<4>(sh, mh);
        for (int hh = 0; hh < 2; ++hh) for (int nb = 0; nb < 4; ++nb) for (int e = 0; e < 2; ++e) {
          int row = 16 * w + 8 * hh + g, key = 32 * kh + 8 * nb + 2 * t4 + e;
          ++checked; if ((sh[4 * nb + 2 * hh + e] == 1.0f) != M[row][key]) { if (bad < 10) printf("half mismatch\n"); ++bad; }
        }
      }
    }
  }
  printf("T=%d tma=%d producer=%d: %ld checked, %ld bad\n", kT, (int)kTma, (int)kRmProducer, checked, bad);
  return bad != 0;
}
