/*
 * attn_dev: development harness for the sparse attention kernels (kernels/attention_*.cu).
 *
 * Built with nvcc (bench/attn_dev.sh); it includes the kernel sources directly, once per
 * configuration of macros, each inside its own namespace with the entry points renamed, so
 * one binary holds every variant. The library compiles the same files with NVRTC; `--nvrtc`
 * checks that too (no GPU needed).
 *
 * It builds the canonical masks of DESIGN.md section 4 as element predicates, the BSR +
 * bitmap format on the CPU, random inputs (never zeros), poisons the output with NaN, checks
 * against a float64 CPU reference (sampled rows for large shapes, always first and last
 * rows; fully masked rows must be exact zeros) and times with CUDA events (warm-up, median,
 * input sets rotated). Ends with a short table; --json writes one line per measurement.
 *
 *   attn_dev --suite                 the protocol grid (DESIGN.md section 9), both block
 *                                    configurations per head dim (T=64 and T=128)
 *   attn_dev --odd                   odd lengths, Sq != Sk, holes, per-head masks (check only)
 *   attn_dev --cfg NAME[,..] --masks causal,.. --shapes 8x1024,2x1000x1500 --heads 12
 *   attn_dev --list                  the configurations
 *   attn_dev --nvrtc                 compile every configuration with NVRTC (no GPU)
 * The g* configurations are the sm_90a wgmma kernel (kernels/attention_block_sm90.cu); the
 * binary is built for sm_90a (bench/attn_dev.sh: -gencode=arch=compute_90a,code=sm_90a).
 * Other flags: --kernels block,row  --nocheck  --notime  --reps N  --json FILE
 *   --quiet (print only failing checks and the summary, no table)
 *   --bitcmp (with --odd: the outputs of the 2nd, 4th, .. --cfg entries compared bit for bit with
 *     those of the entry before each, same inputs; e.g. a kernel option against its absence)
 *   --rowcheck N (rows sampled per (b,h) above the exhaustive limit)
 */
#if defined(ATTN_DEV_INSTANTIATE_SM90)
/* ---- one sm_90a (wgmma) block-wise configuration: kernels/attention_block_sm90.cu only. */
namespace ATTN_NS {
#include "../kernels/attention_block_sm90.cu"
}
#undef ATTN_NS
#undef STOF_ATTENTION_COMMON_CUH
#undef STOF_HEAD_DIM
#undef STOF_BF16
#undef STOF_TILE_M
#undef STOF_TILE_N
#undef STOF_STAGES
#undef STOF_MIN_BLOCKS
#undef STOF_WG_AB
#undef STOF_SM90_QREG
#undef STOF_SM90_PV_SPLIT
#undef STOF_SM90_OVERLAP
#undef STOF_SM90_PINGPONG
#undef STOF_SM90_TMA
#undef STOF_SM90_HALFSKIP
#undef STOF_SM90_ROWMASK
#undef STOF_SM90_NOPARTIAL
#undef STOF_SM90_KEY64
#undef STOF_SM90_PEEL
#undef STOF_LAZY_RESCALE
#undef stof_attn_block_fwd_sm90
#elif defined(ATTN_DEV_INSTANTIATE)
/* ---- one kernel configuration: the includer sets ATTN_NS, the STOF_* macros and the
 * entry-point renames. */
namespace ATTN_NS {
#include "../kernels/attention_block.cu"
#include "../kernels/attention_row.cu"
}
#undef ATTN_NS
#undef STOF_ATTENTION_COMMON_CUH
#undef STOF_HEAD_DIM
#undef STOF_BF16
#undef STOF_TILE_M
#undef STOF_TILE_N
#undef STOF_WARPS
#undef STOF_STAGES
#undef STOF_SUB_N
#undef STOF_ROW_WARPS
#undef STOF_ROW_KEYS
#undef STOF_KV_SPLIT
#undef STOF_SUB_UNROLL
#undef STOF_MIN_BLOCKS
#undef STOF_LAZY_RESCALE
#undef stof_attn_block_fwd
#undef stof_attn_row_fwd
#else /* the harness */

#include <cuda.h> /* cuTensorMapEncodeTiled (the _tma configurations); link -lcuda */
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <nvrtc.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>

/* the kernels' layout_t and mod_t, as the host passes them (by value) */
struct stof_attn_layout_dev {
  long long q[3], k[3], v[3], o[3];
};
struct stof_attn_mod_dev {
  const void *bias;
  const int *bucket;
  long long bias_hs;
  int maxd;
  float softcap;
};
#include <thread>
#include <vector>

/* ------------------------------------------------------------------ configurations */
/* name: h<D>_t<T>_w<warps>_s<stages>, the kernel's defaults otherwise, except
 * [_m4: STOF_MIN_BLOCKS=4] [_s: STOF_KV_SPLIT=1] [_u: STOF_SUB_UNROLL=1]
 * [_r: STOF_SUB_UNROLL=0] [_bf: bfloat16]; each also carries a row-wise kernel
 * (STOF_ROW_WARPS, STOF_ROW_KEYS listed in g_cfgs). -1 in g_cfgs: the kernel's default. */
#define ATTN_DEV_INSTANTIATE

#define ATTN_NS h64_t64_w4_s2
#define STOF_HEAD_DIM 64
#define STOF_BF16 0
#define STOF_TILE_M 64
#define STOF_WARPS 4
#define STOF_STAGES 2
#define STOF_KV_SPLIT 0
#define STOF_ROW_WARPS 4
#define STOF_ROW_KEYS 4
#define stof_attn_block_fwd h64_t64_w4_s2_block
#define stof_attn_row_fwd h64_t64_w4_s2_row
#include "attn_dev.cu"

#define ATTN_NS h64_t64_w4_s2_m4
#define STOF_HEAD_DIM 64
#define STOF_BF16 0
#define STOF_TILE_M 64
#define STOF_WARPS 4
#define STOF_STAGES 2
#define STOF_KV_SPLIT 0
#define STOF_MIN_BLOCKS 4
#define STOF_ROW_WARPS 8
#define STOF_ROW_KEYS 2
#define stof_attn_block_fwd h64_t64_w4_s2_m4_block
#define stof_attn_row_fwd h64_t64_w4_s2_m4_row
#include "attn_dev.cu"

#define ATTN_NS h64_t64_w4_s2_s
#define STOF_HEAD_DIM 64
#define STOF_BF16 0
#define STOF_TILE_M 64
#define STOF_WARPS 4
#define STOF_STAGES 2
#define STOF_KV_SPLIT 1
#define STOF_ROW_WARPS 8
#define STOF_ROW_KEYS 4
#define stof_attn_block_fwd h64_t64_w4_s2_s_block
#define stof_attn_row_fwd h64_t64_w4_s2_s_row
#include "attn_dev.cu"

#define ATTN_NS h64_t64_w2_s2
#define STOF_HEAD_DIM 64
#define STOF_BF16 0
#define STOF_TILE_M 64
#define STOF_WARPS 2
#define STOF_STAGES 2
#define STOF_KV_SPLIT 0
#define STOF_ROW_WARPS 4
#define STOF_ROW_KEYS 8
#define stof_attn_block_fwd h64_t64_w2_s2_block
#define stof_attn_row_fwd h64_t64_w2_s2_row
#include "attn_dev.cu"

#define ATTN_NS h64_t128_w4_s2
#define STOF_HEAD_DIM 64
#define STOF_BF16 0
#define STOF_TILE_M 128
#define STOF_WARPS 4
#define STOF_STAGES 2
#define STOF_KV_SPLIT 0
#define STOF_ROW_WARPS 4
#define STOF_ROW_KEYS 4
#define stof_attn_block_fwd h64_t128_w4_s2_block
#define stof_attn_row_fwd h64_t128_w4_s2_row
#include "attn_dev.cu"

#define ATTN_NS h64_t128_w4_s2_u
#define STOF_HEAD_DIM 64
#define STOF_BF16 0
#define STOF_TILE_M 128
#define STOF_WARPS 4
#define STOF_STAGES 2
#define STOF_KV_SPLIT 0
#define STOF_SUB_UNROLL 1
#define STOF_ROW_WARPS 4
#define STOF_ROW_KEYS 4
#define stof_attn_block_fwd h64_t128_w4_s2_u_block
#define stof_attn_row_fwd h64_t128_w4_s2_u_row
#include "attn_dev.cu"

#define ATTN_NS h128_t64_w4_s2
#define STOF_HEAD_DIM 128
#define STOF_BF16 0
#define STOF_TILE_M 64
#define STOF_WARPS 4
#define STOF_STAGES 2
#define STOF_KV_SPLIT 0
#define STOF_ROW_WARPS 4
#define STOF_ROW_KEYS 4
#define stof_attn_block_fwd h128_t64_w4_s2_block
#define stof_attn_row_fwd h128_t64_w4_s2_row
#include "attn_dev.cu"

#define ATTN_NS h128_t128_w8_s2
#define STOF_HEAD_DIM 128
#define STOF_BF16 0
#define STOF_TILE_M 128
#define STOF_WARPS 8
#define STOF_STAGES 2
#define STOF_KV_SPLIT 0
#define STOF_ROW_WARPS 4
#define STOF_ROW_KEYS 4
#define stof_attn_block_fwd h128_t128_w8_s2_block
#define stof_attn_row_fwd h128_t128_w8_s2_row
#include "attn_dev.cu"

#define ATTN_NS h128_t128_w8_s2_r
#define STOF_HEAD_DIM 128
#define STOF_BF16 0
#define STOF_TILE_M 128
#define STOF_WARPS 8
#define STOF_STAGES 2
#define STOF_KV_SPLIT 0
#define STOF_SUB_UNROLL 0
#define STOF_ROW_WARPS 8
#define STOF_ROW_KEYS 4
#define stof_attn_block_fwd h128_t128_w8_s2_r_block
#define stof_attn_row_fwd h128_t128_w8_s2_r_row
#include "attn_dev.cu"

#define ATTN_NS h64_t64_w4_s2_bf
#define STOF_HEAD_DIM 64
#define STOF_BF16 1
#define STOF_TILE_M 64
#define STOF_WARPS 4
#define STOF_STAGES 2
#define STOF_KV_SPLIT 0
#define STOF_ROW_WARPS 4
#define STOF_ROW_KEYS 4
#define stof_attn_block_fwd h64_t64_w4_s2_bf_block
#define stof_attn_row_fwd h64_t64_w4_s2_bf_row
#include "attn_dev.cu"

#define ATTN_NS h128_t128_w8_s2_bf
#define STOF_HEAD_DIM 128
#define STOF_BF16 1
#define STOF_TILE_M 128
#define STOF_WARPS 8
#define STOF_STAGES 2
#define STOF_KV_SPLIT 0
#define STOF_ROW_WARPS 4
#define STOF_ROW_KEYS 4
#define stof_attn_block_fwd h128_t128_w8_s2_bf_block
#define stof_attn_row_fwd h128_t128_w8_s2_bf_row
#include "attn_dev.cu"

/* tile 32, mma.sync, 2 warps (16 query rows each), for bigbird, whose useful share of the MMA
 * work is 0.93-0.97 at tile 32 against 0.54-0.59 at tile 64 with the half skip
 * (NOTES-attention.md, sessions 14 and 15; the engine runs h64_t32_w2_s2 / h128_t32_w2_s2 on
 * Hopper since session 15) */
#define ATTN_NS h64_t32_w2_s2
#define STOF_HEAD_DIM 64
#define STOF_BF16 0
#define STOF_TILE_M 32
#define STOF_WARPS 2
#define STOF_STAGES 2
#define STOF_SUB_N 32
#define STOF_KV_SPLIT 0
#define STOF_ROW_WARPS 4
#define STOF_ROW_KEYS 4
#define stof_attn_block_fwd h64_t32_w2_s2_block
#define stof_attn_row_fwd h64_t32_w2_s2_row
#include "attn_dev.cu"

#define ATTN_NS h64_t32_w2_s3
#define STOF_HEAD_DIM 64
#define STOF_BF16 0
#define STOF_TILE_M 32
#define STOF_WARPS 2
#define STOF_STAGES 3
#define STOF_SUB_N 32
#define STOF_KV_SPLIT 0
#define STOF_ROW_WARPS 4
#define STOF_ROW_KEYS 4
#define stof_attn_block_fwd h64_t32_w2_s3_block
#define stof_attn_row_fwd h64_t32_w2_s3_row
#include "attn_dev.cu"

#define ATTN_NS h64_t32_w2_s2_m8
#define STOF_HEAD_DIM 64
#define STOF_BF16 0
#define STOF_TILE_M 32
#define STOF_WARPS 2
#define STOF_STAGES 2
#define STOF_SUB_N 32
#define STOF_KV_SPLIT 0
#define STOF_MIN_BLOCKS 8
#define STOF_ROW_WARPS 4
#define STOF_ROW_KEYS 4
#define stof_attn_block_fwd h64_t32_w2_s2_m8_block
#define stof_attn_row_fwd h64_t32_w2_s2_m8_row
#include "attn_dev.cu"

#define ATTN_NS h128_t32_w2_s2
#define STOF_HEAD_DIM 128
#define STOF_BF16 0
#define STOF_TILE_M 32
#define STOF_WARPS 2
#define STOF_STAGES 2
#define STOF_SUB_N 32
#define STOF_KV_SPLIT 0
#define STOF_ROW_WARPS 4
#define STOF_ROW_KEYS 4
#define stof_attn_block_fwd h128_t32_w2_s2_block
#define stof_attn_row_fwd h128_t32_w2_s2_row
#include "attn_dev.cu"

/* _m5: BigBird's D 128 kernel (tile 32, mma.sync; 214 registers x 64 threads: four CTAs an SM)
 * held to five by STOF_MIN_BLOCKS=5 (41 KB of shared memory each); bench/attn_ab_m3.sh */
#define ATTN_NS h128_t32_w2_s2_m5
#define STOF_HEAD_DIM 128
#define STOF_BF16 0
#define STOF_TILE_M 32
#define STOF_WARPS 2
#define STOF_STAGES 2
#define STOF_SUB_N 32
#define STOF_KV_SPLIT 0
#define STOF_MIN_BLOCKS 5
#define STOF_ROW_WARPS 4
#define STOF_ROW_KEYS 4
#define stof_attn_block_fwd h128_t32_w2_s2_m5_block
#define stof_attn_row_fwd h128_t32_w2_s2_m5_row
#include "attn_dev.cu"

/* tile 32 variants (session 24): _lz STOF_LAZY_RESCALE=1 (O rescaled only when a row's max
 * grows by more than 2^8), w1: one warp of 32 query rows */
#define ATTN_NS h64_t32_w2_s2_lz
#define STOF_HEAD_DIM 64
#define STOF_BF16 0
#define STOF_TILE_M 32
#define STOF_WARPS 2
#define STOF_STAGES 2
#define STOF_SUB_N 32
#define STOF_KV_SPLIT 0
#define STOF_LAZY_RESCALE 1
#define STOF_ROW_WARPS 4
#define STOF_ROW_KEYS 4
#define stof_attn_block_fwd h64_t32_w2_s2_lz_block
#define stof_attn_row_fwd h64_t32_w2_s2_lz_row
#include "attn_dev.cu"

#define ATTN_NS h64_t32_w1_s2
#define STOF_HEAD_DIM 64
#define STOF_BF16 0
#define STOF_TILE_M 32
#define STOF_WARPS 1
#define STOF_STAGES 2
#define STOF_SUB_N 32
#define STOF_KV_SPLIT 0
#define STOF_LAZY_RESCALE 0
#define STOF_ROW_WARPS 4
#define STOF_ROW_KEYS 4
#define stof_attn_block_fwd h64_t32_w1_s2_block
#define stof_attn_row_fwd h64_t32_w1_s2_row
#include "attn_dev.cu"

#define ATTN_NS h128_t32_w2_s2_lz
#define STOF_HEAD_DIM 128
#define STOF_BF16 0
#define STOF_TILE_M 32
#define STOF_WARPS 2
#define STOF_STAGES 2
#define STOF_SUB_N 32
#define STOF_KV_SPLIT 0
#define STOF_LAZY_RESCALE 1
#define STOF_ROW_WARPS 4
#define STOF_ROW_KEYS 4
#define stof_attn_block_fwd h128_t32_w2_s2_lz_block
#define stof_attn_row_fwd h128_t32_w2_s2_lz_row
#include "attn_dev.cu"

#undef ATTN_DEV_INSTANTIATE

/* sm_90a (wgmma) block-wise configurations, kernels/attention_block_sm90.cu: name
 * g<D>_t<T>_s<stages>[_m<min CTAs/SM>][_k: Q read from shared memory by each wgmma, not
 * held in registers][_p: STOF_SM90_PV_SPLIT=1][_o: STOF_SM90_OVERLAP=1][_pp: STOF_SM90_PINGPONG=1]
 * [_tma: STOF_SM90_TMA=1][_bf]; T/64 consumer warpgroups (+ the TMA producer); no row-wise kernel. */
#define ATTN_DEV_INSTANTIATE_SM90

#define ATTN_NS g64_t128_s3_pp
#define STOF_HEAD_DIM 64
#define STOF_BF16 0
#define STOF_TILE_M 128
#define STOF_STAGES 3
#define STOF_MIN_BLOCKS 1
#define STOF_SM90_QREG 1
#define STOF_SM90_PV_SPLIT 0
#define STOF_SM90_OVERLAP 0
#define STOF_SM90_PINGPONG 1
#define stof_attn_block_fwd_sm90 g64_t128_s3_pp_block
#include "attn_dev.cu"

#define ATTN_NS g64_t128_s3_o
#define STOF_HEAD_DIM 64
#define STOF_BF16 0
#define STOF_TILE_M 128
#define STOF_STAGES 3
#define STOF_MIN_BLOCKS 1
#define STOF_SM90_QREG 1
#define STOF_SM90_PV_SPLIT 0
#define STOF_SM90_OVERLAP 1
#define STOF_SM90_PINGPONG 0
#define stof_attn_block_fwd_sm90 g64_t128_s3_o_block
#include "attn_dev.cu"

#define ATTN_NS g64_t128_s2
#define STOF_HEAD_DIM 64
#define STOF_BF16 0
#define STOF_TILE_M 128
#define STOF_STAGES 2
#define STOF_MIN_BLOCKS 1
#define STOF_SM90_QREG 1
#define STOF_SM90_PV_SPLIT 0
#define STOF_SM90_OVERLAP 0
#define STOF_SM90_PINGPONG 0
#define stof_attn_block_fwd_sm90 g64_t128_s2_block
#include "attn_dev.cu"

#define ATTN_NS g64_t128_s2_k
#define STOF_HEAD_DIM 64
#define STOF_BF16 0
#define STOF_TILE_M 128
#define STOF_STAGES 2
#define STOF_MIN_BLOCKS 1
#define STOF_SM90_QREG 0
#define STOF_SM90_PV_SPLIT 0
#define STOF_SM90_OVERLAP 0
#define STOF_SM90_PINGPONG 0
#define stof_attn_block_fwd_sm90 g64_t128_s2_k_block
#include "attn_dev.cu"

#define ATTN_NS g64_t64_s2
#define STOF_HEAD_DIM 64
#define STOF_BF16 0
#define STOF_TILE_M 64
#define STOF_STAGES 2
#define STOF_MIN_BLOCKS 1
#define STOF_SM90_QREG 1
#define STOF_SM90_PV_SPLIT 0
#define STOF_SM90_OVERLAP 0
#define STOF_SM90_PINGPONG 0
#define stof_attn_block_fwd_sm90 g64_t64_s2_block
#include "attn_dev.cu"

#define ATTN_NS g64_t64_s3_o
#define STOF_HEAD_DIM 64
#define STOF_BF16 0
#define STOF_TILE_M 64
#define STOF_STAGES 3
#define STOF_MIN_BLOCKS 1
#define STOF_SM90_QREG 1
#define STOF_SM90_PV_SPLIT 0
#define STOF_SM90_OVERLAP 1
#define STOF_SM90_PINGPONG 0
#define stof_attn_block_fwd_sm90 g64_t64_s3_o_block
#include "attn_dev.cu"

#define ATTN_NS g64_t64_s2_k
#define STOF_HEAD_DIM 64
#define STOF_BF16 0
#define STOF_TILE_M 64
#define STOF_STAGES 2
#define STOF_MIN_BLOCKS 1
#define STOF_SM90_QREG 0
#define STOF_SM90_PV_SPLIT 0
#define STOF_SM90_OVERLAP 0
#define STOF_SM90_PINGPONG 0
#define stof_attn_block_fwd_sm90 g64_t64_s2_k_block
#include "attn_dev.cu"

#define ATTN_NS g128_t128_s3_pp
#define STOF_HEAD_DIM 128
#define STOF_BF16 0
#define STOF_TILE_M 128
#define STOF_STAGES 3
#define STOF_MIN_BLOCKS 1
#define STOF_SM90_QREG 1
#define STOF_SM90_PV_SPLIT 0
#define STOF_SM90_OVERLAP 0
#define STOF_SM90_PINGPONG 1
#define stof_attn_block_fwd_sm90 g128_t128_s3_pp_block
#include "attn_dev.cu"

#define ATTN_NS g128_t128_s3_o
#define STOF_HEAD_DIM 128
#define STOF_BF16 0
#define STOF_TILE_M 128
#define STOF_STAGES 3
#define STOF_MIN_BLOCKS 1
#define STOF_SM90_QREG 1
#define STOF_SM90_PV_SPLIT 0
#define STOF_SM90_OVERLAP 1
#define STOF_SM90_PINGPONG 0
#define stof_attn_block_fwd_sm90 g128_t128_s3_o_block
#include "attn_dev.cu"

#define ATTN_NS g128_t128_s2
#define STOF_HEAD_DIM 128
#define STOF_BF16 0
#define STOF_TILE_M 128
#define STOF_STAGES 2
#define STOF_MIN_BLOCKS 1
#define STOF_SM90_QREG 1
#define STOF_SM90_PV_SPLIT 0
#define STOF_SM90_OVERLAP 0
#define STOF_SM90_PINGPONG 0
#define stof_attn_block_fwd_sm90 g128_t128_s2_block
#include "attn_dev.cu"

#define ATTN_NS g128_t128_s2_p
#define STOF_HEAD_DIM 128
#define STOF_BF16 0
#define STOF_TILE_M 128
#define STOF_STAGES 2
#define STOF_MIN_BLOCKS 1
#define STOF_SM90_QREG 1
#define STOF_SM90_PV_SPLIT 1
#define STOF_SM90_OVERLAP 0
#define STOF_SM90_PINGPONG 0
#define stof_attn_block_fwd_sm90 g128_t128_s2_p_block
#include "attn_dev.cu"

#define ATTN_NS g128_t128_s2_k
#define STOF_HEAD_DIM 128
#define STOF_BF16 0
#define STOF_TILE_M 128
#define STOF_STAGES 2
#define STOF_MIN_BLOCKS 1
#define STOF_SM90_QREG 0
#define STOF_SM90_PV_SPLIT 0
#define STOF_SM90_OVERLAP 0
#define STOF_SM90_PINGPONG 0
#define stof_attn_block_fwd_sm90 g128_t128_s2_k_block
#include "attn_dev.cu"

#define ATTN_NS g128_t64_s2
#define STOF_HEAD_DIM 128
#define STOF_BF16 0
#define STOF_TILE_M 64
#define STOF_STAGES 2
#define STOF_MIN_BLOCKS 1
#define STOF_SM90_QREG 1
#define STOF_SM90_PV_SPLIT 0
#define STOF_SM90_OVERLAP 0
#define STOF_SM90_PINGPONG 0
#define stof_attn_block_fwd_sm90 g128_t64_s2_block
#include "attn_dev.cu"

#define ATTN_NS g128_t64_s3_o
#define STOF_HEAD_DIM 128
#define STOF_BF16 0
#define STOF_TILE_M 64
#define STOF_STAGES 3
#define STOF_MIN_BLOCKS 1
#define STOF_SM90_QREG 1
#define STOF_SM90_PV_SPLIT 0
#define STOF_SM90_OVERLAP 1
#define STOF_SM90_PINGPONG 0
#define stof_attn_block_fwd_sm90 g128_t64_s3_o_block
#include "attn_dev.cu"

#define ATTN_NS g64_t128_s3_pp_bf
#define STOF_HEAD_DIM 64
#define STOF_BF16 1
#define STOF_TILE_M 128
#define STOF_STAGES 3
#define STOF_MIN_BLOCKS 1
#define STOF_SM90_QREG 1
#define STOF_SM90_PV_SPLIT 0
#define STOF_SM90_OVERLAP 0
#define STOF_SM90_PINGPONG 1
#define stof_attn_block_fwd_sm90 g64_t128_s3_pp_bf_block
#include "attn_dev.cu"

#define ATTN_NS g128_t128_s3_pp_bf
#define STOF_HEAD_DIM 128
#define STOF_BF16 1
#define STOF_TILE_M 128
#define STOF_STAGES 3
#define STOF_MIN_BLOCKS 1
#define STOF_SM90_QREG 1
#define STOF_SM90_PV_SPLIT 0
#define STOF_SM90_OVERLAP 0
#define STOF_SM90_PINGPONG 1
#define stof_attn_block_fwd_sm90 g128_t128_s3_pp_bf_block
#include "attn_dev.cu"

#define ATTN_NS g64_t64_s2_bf
#define STOF_HEAD_DIM 64
#define STOF_BF16 1
#define STOF_TILE_M 64
#define STOF_STAGES 2
#define STOF_MIN_BLOCKS 1
#define STOF_SM90_QREG 1
#define STOF_SM90_PV_SPLIT 0
#define STOF_SM90_OVERLAP 0
#define STOF_SM90_PINGPONG 0
#define stof_attn_block_fwd_sm90 g64_t64_s2_bf_block
#include "attn_dev.cu"

#define ATTN_NS g128_t128_s2_bf
#define STOF_HEAD_DIM 128
#define STOF_BF16 1
#define STOF_TILE_M 128
#define STOF_STAGES 2
#define STOF_MIN_BLOCKS 1
#define STOF_SM90_QREG 1
#define STOF_SM90_PV_SPLIT 0
#define STOF_SM90_OVERLAP 0
#define STOF_SM90_PINGPONG 0
#define stof_attn_block_fwd_sm90 g128_t128_s2_bf_block
#include "attn_dev.cu"

/* _tma: STOF_SM90_TMA=1 (K/V by the TMA producer warp; the launch adds the two tensor maps) */
#define ATTN_NS g64_t128_s3_pp_tma
#define STOF_HEAD_DIM 64
#define STOF_BF16 0
#define STOF_TILE_M 128
#define STOF_STAGES 3
#define STOF_SM90_TMA 1
#define stof_attn_block_fwd_sm90 g64_t128_s3_pp_tma_block
#include "attn_dev.cu"

#define ATTN_NS g128_t128_s3_pp_tma
#define STOF_HEAD_DIM 128
#define STOF_BF16 0
#define STOF_TILE_M 128
#define STOF_STAGES 3
#define STOF_SM90_TMA 1
#define stof_attn_block_fwd_sm90 g128_t128_s3_pp_tma_block
#include "attn_dev.cu"

#define ATTN_NS g64_t64_s2_tma
#define STOF_HEAD_DIM 64
#define STOF_BF16 0
#define STOF_TILE_M 64
#define STOF_STAGES 2
#define STOF_SM90_TMA 1
#define stof_attn_block_fwd_sm90 g64_t64_s2_tma_block
#include "attn_dev.cu"

#define ATTN_NS g128_t64_s2_tma
#define STOF_HEAD_DIM 128
#define STOF_BF16 0
#define STOF_TILE_M 64
#define STOF_STAGES 2
#define STOF_SM90_TMA 1
#define stof_attn_block_fwd_sm90 g128_t64_s2_tma_block
#include "attn_dev.cu"

#define ATTN_NS g64_t128_s3_o_tma
#define STOF_HEAD_DIM 64
#define STOF_BF16 0
#define STOF_TILE_M 128
#define STOF_STAGES 3
#define STOF_SM90_OVERLAP 1
#define STOF_SM90_PINGPONG 0
#define STOF_SM90_TMA 1
#define stof_attn_block_fwd_sm90 g64_t128_s3_o_tma_block
#include "attn_dev.cu"

#define ATTN_NS g64_t128_s2_k_tma
#define STOF_HEAD_DIM 64
#define STOF_BF16 0
#define STOF_TILE_M 128
#define STOF_STAGES 2
#define STOF_SM90_QREG 0
#define STOF_SM90_PINGPONG 0
#define STOF_SM90_TMA 1
#define stof_attn_block_fwd_sm90 g64_t128_s2_k_tma_block
#include "attn_dev.cu"

#define ATTN_NS g64_t128_s3_pp_tma_bf
#define STOF_HEAD_DIM 64
#define STOF_BF16 1
#define STOF_TILE_M 128
#define STOF_STAGES 3
#define STOF_SM90_TMA 1
#define stof_attn_block_fwd_sm90 g64_t128_s3_pp_tma_bf_block
#include "attn_dev.cu"
#define ATTN_NS g64_t64_s3_o_tma
#define STOF_HEAD_DIM 64
#define STOF_BF16 0
#define STOF_TILE_M 64
#define STOF_STAGES 3
#define STOF_SM90_OVERLAP 1
#define STOF_SM90_PINGPONG 0
#define STOF_SM90_TMA 1
#define stof_attn_block_fwd_sm90 g64_t64_s3_o_tma_block
#include "attn_dev.cu"

#define ATTN_NS g64_t64_s2_m4_tma
#define STOF_HEAD_DIM 64
#define STOF_BF16 0
#define STOF_TILE_M 64
#define STOF_STAGES 2
#define STOF_MIN_BLOCKS 4
#define STOF_SM90_TMA 1
#define stof_attn_block_fwd_sm90 g64_t64_s2_m4_tma_block
#include "attn_dev.cu"

#define ATTN_NS g64_t64_s2_k_m4_tma
#define STOF_HEAD_DIM 64
#define STOF_BF16 0
#define STOF_TILE_M 64
#define STOF_STAGES 2
#define STOF_MIN_BLOCKS 4
#define STOF_SM90_QREG 0
#define STOF_SM90_TMA 1
#define stof_attn_block_fwd_sm90 g64_t64_s2_k_m4_tma_block
#include "attn_dev.cu"

/* _hs: STOF_SM90_HALFSKIP=1 (a partial tile's dead 32-key half skipped; T = 64 only) */
#define ATTN_NS g64_t64_s2_tma_hs
#define STOF_HEAD_DIM 64
#define STOF_BF16 0
#define STOF_TILE_M 64
#define STOF_STAGES 2
#define STOF_SM90_TMA 1
#define STOF_SM90_HALFSKIP 1
#define stof_attn_block_fwd_sm90 g64_t64_s2_tma_hs_block
#include "attn_dev.cu"

#define ATTN_NS g128_t64_s2_tma_hs
#define STOF_HEAD_DIM 128
#define STOF_BF16 0
#define STOF_TILE_M 64
#define STOF_STAGES 2
#define STOF_SM90_TMA 1
#define STOF_SM90_HALFSKIP 1
#define stof_attn_block_fwd_sm90 g128_t64_s2_tma_hs_block
#include "attn_dev.cu"

#define ATTN_NS g64_t64_s2_k_m4_tma_hs
#define STOF_HEAD_DIM 64
#define STOF_BF16 0
#define STOF_TILE_M 64
#define STOF_STAGES 2
#define STOF_MIN_BLOCKS 4
#define STOF_SM90_QREG 0
#define STOF_SM90_TMA 1
#define STOF_SM90_HALFSKIP 1
#define stof_attn_block_fwd_sm90 g64_t64_s2_k_m4_tma_hs_block
#include "attn_dev.cu"

#define ATTN_NS g64_t64_s2_hs
#define STOF_HEAD_DIM 64
#define STOF_BF16 0
#define STOF_TILE_M 64
#define STOF_STAGES 2
#define STOF_MIN_BLOCKS 1
#define STOF_SM90_QREG 1
#define STOF_SM90_PV_SPLIT 0
#define STOF_SM90_OVERLAP 0
#define STOF_SM90_PINGPONG 0
#define STOF_SM90_HALFSKIP 1
#define stof_attn_block_fwd_sm90 g64_t64_s2_hs_block
#include "attn_dev.cu"

#define ATTN_NS g64_t64_s2_tma_hs_bf
#define STOF_HEAD_DIM 64
#define STOF_BF16 1
#define STOF_TILE_M 64
#define STOF_STAGES 2
#define STOF_SM90_TMA 1
#define STOF_SM90_HALFSKIP 1
#define stof_attn_block_fwd_sm90 g64_t64_s2_tma_hs_bf_block
#include "attn_dev.cu"

/* _rm: STOF_SM90_ROWMASK=1 (a partial tile's mask bits transposed per lane, one select per
 * score); the first four for the A/B against their plain twins, the others cover the other
 * ways to the bits (overlap with the producer's words; ping-pong at T = 128 and cp.async,
 * where each consumer warp transposes) */
#define ATTN_NS g64_t64_s2_tma_rm
#define STOF_HEAD_DIM 64
#define STOF_BF16 0
#define STOF_TILE_M 64
#define STOF_STAGES 2
#define STOF_SM90_TMA 1
#define STOF_SM90_ROWMASK 1
#define stof_attn_block_fwd_sm90 g64_t64_s2_tma_rm_block
#include "attn_dev.cu"

#define ATTN_NS g64_t64_s2_k_m4_tma_rm
#define STOF_HEAD_DIM 64
#define STOF_BF16 0
#define STOF_TILE_M 64
#define STOF_STAGES 2
#define STOF_MIN_BLOCKS 4
#define STOF_SM90_QREG 0
#define STOF_SM90_TMA 1
#define STOF_SM90_ROWMASK 1
#define stof_attn_block_fwd_sm90 g64_t64_s2_k_m4_tma_rm_block
#include "attn_dev.cu"

#define ATTN_NS g128_t64_s2_tma_rm
#define STOF_HEAD_DIM 128
#define STOF_BF16 0
#define STOF_TILE_M 64
#define STOF_STAGES 2
#define STOF_SM90_TMA 1
#define STOF_SM90_ROWMASK 1
#define stof_attn_block_fwd_sm90 g128_t64_s2_tma_rm_block
#include "attn_dev.cu"

#define ATTN_NS g64_t64_s2_tma_hs_rm
#define STOF_HEAD_DIM 64
#define STOF_BF16 0
#define STOF_TILE_M 64
#define STOF_STAGES 2
#define STOF_SM90_TMA 1
#define STOF_SM90_HALFSKIP 1
#define STOF_SM90_ROWMASK 1
#define stof_attn_block_fwd_sm90 g64_t64_s2_tma_hs_rm_block
#include "attn_dev.cu"

#define ATTN_NS g64_t64_s3_o_tma_rm
#define STOF_HEAD_DIM 64
#define STOF_BF16 0
#define STOF_TILE_M 64
#define STOF_STAGES 3
#define STOF_SM90_OVERLAP 1
#define STOF_SM90_PINGPONG 0
#define STOF_SM90_TMA 1
#define STOF_SM90_ROWMASK 1
#define stof_attn_block_fwd_sm90 g64_t64_s3_o_tma_rm_block
#include "attn_dev.cu"

#define ATTN_NS g64_t128_s3_pp_tma_rm
#define STOF_HEAD_DIM 64
#define STOF_BF16 0
#define STOF_TILE_M 128
#define STOF_STAGES 3
#define STOF_SM90_TMA 1
#define STOF_SM90_ROWMASK 1
#define stof_attn_block_fwd_sm90 g64_t128_s3_pp_tma_rm_block
#include "attn_dev.cu"

#define ATTN_NS g64_t64_s2_rm
#define STOF_HEAD_DIM 64
#define STOF_BF16 0
#define STOF_TILE_M 64
#define STOF_STAGES 2
#define STOF_MIN_BLOCKS 1
#define STOF_SM90_QREG 1
#define STOF_SM90_PV_SPLIT 0
#define STOF_SM90_OVERLAP 0
#define STOF_SM90_PINGPONG 0
#define STOF_SM90_ROWMASK 1
#define stof_attn_block_fwd_sm90 g64_t64_s2_rm_block
#include "attn_dev.cu"

#define ATTN_NS g64_t64_s2_hs_rm
#define STOF_HEAD_DIM 64
#define STOF_BF16 0
#define STOF_TILE_M 64
#define STOF_STAGES 2
#define STOF_MIN_BLOCKS 1
#define STOF_SM90_QREG 1
#define STOF_SM90_PV_SPLIT 0
#define STOF_SM90_OVERLAP 0
#define STOF_SM90_PINGPONG 0
#define STOF_SM90_HALFSKIP 1
#define STOF_SM90_ROWMASK 1
#define stof_attn_block_fwd_sm90 g64_t64_s2_hs_rm_block
#include "attn_dev.cu"

/* session 13: the engine's configurations with ROWMASK (and HALFSKIP) for the selector's
 * calibration: D 64 tile 64 (Q in shared memory, 4 CTAs, TMA), D 128 tile 64 (cp.async),
 * D 128 tile 128 (ping-pong, TMA) */
#define ATTN_NS g64_t64_s2_k_m4_tma_hs_rm
#define STOF_HEAD_DIM 64
#define STOF_BF16 0
#define STOF_TILE_M 64
#define STOF_STAGES 2
#define STOF_MIN_BLOCKS 4
#define STOF_SM90_QREG 0
#define STOF_SM90_TMA 1
#define STOF_SM90_HALFSKIP 1
#define STOF_SM90_ROWMASK 1
#define stof_attn_block_fwd_sm90 g64_t64_s2_k_m4_tma_hs_rm_block
#include "attn_dev.cu"

#define ATTN_NS g128_t64_s2_rm
#define STOF_HEAD_DIM 128
#define STOF_BF16 0
#define STOF_TILE_M 64
#define STOF_STAGES 2
#define STOF_MIN_BLOCKS 1
#define STOF_SM90_QREG 1
#define STOF_SM90_PV_SPLIT 0
#define STOF_SM90_OVERLAP 0
#define STOF_SM90_PINGPONG 0
#define STOF_SM90_ROWMASK 1
#define stof_attn_block_fwd_sm90 g128_t64_s2_rm_block
#include "attn_dev.cu"

#define ATTN_NS g128_t64_s2_hs_rm
#define STOF_HEAD_DIM 128
#define STOF_BF16 0
#define STOF_TILE_M 64
#define STOF_STAGES 2
#define STOF_MIN_BLOCKS 1
#define STOF_SM90_QREG 1
#define STOF_SM90_PV_SPLIT 0
#define STOF_SM90_OVERLAP 0
#define STOF_SM90_PINGPONG 0
#define STOF_SM90_HALFSKIP 1
#define STOF_SM90_ROWMASK 1
#define stof_attn_block_fwd_sm90 g128_t64_s2_hs_rm_block
#include "attn_dev.cu"

/* _m3: the engine's D 128 tile-64 kernels (cp.async, Q in registers, 2 stages: 184-195
 * registers, so two CTAs an SM) held to 168 registers by STOF_MIN_BLOCKS=3, for a third CTA an
 * SM (67.6 KB of shared memory each). nvcc 13.0: 8 bytes of spill (none with the half skip,
 * up to 16 in the engine's other variants) without a score modifier (148 under the T5 bias,
 * 40 under the soft cap). Session 20's grid puts ~2 us per tile-row and SM of fixed cost on
 * the window masks at two CTAs (bench/NOTES-attention.md, "Session 20"); bench/attn_ab_m3.sh.
 * (attn_dev's NVRTC check compiles them with their STOF_MIN_BLOCKS; the _nopeel ones it
 * compiles with PEEL's default, as it passes no STOF_SM90_PEEL.) */
#define ATTN_NS g128_t64_s2_rm_m3
#define STOF_HEAD_DIM 128
#define STOF_BF16 0
#define STOF_TILE_M 64
#define STOF_STAGES 2
#define STOF_MIN_BLOCKS 3
#define STOF_SM90_QREG 1
#define STOF_SM90_PV_SPLIT 0
#define STOF_SM90_OVERLAP 0
#define STOF_SM90_PINGPONG 0
#define STOF_SM90_ROWMASK 1
#define stof_attn_block_fwd_sm90 g128_t64_s2_rm_m3_block
#include "attn_dev.cu"

#define ATTN_NS g128_t64_s2_hs_rm_m3
#define STOF_HEAD_DIM 128
#define STOF_BF16 0
#define STOF_TILE_M 64
#define STOF_STAGES 2
#define STOF_MIN_BLOCKS 3
#define STOF_SM90_QREG 1
#define STOF_SM90_PV_SPLIT 0
#define STOF_SM90_OVERLAP 0
#define STOF_SM90_PINGPONG 0
#define STOF_SM90_HALFSKIP 1
#define STOF_SM90_ROWMASK 1
#define stof_attn_block_fwd_sm90 g128_t64_s2_hs_rm_m3_block
#include "attn_dev.cu"

#define ATTN_NS g128_t128_s3_pp_tma_rm
#define STOF_HEAD_DIM 128
#define STOF_BF16 0
#define STOF_TILE_M 128
#define STOF_STAGES 3
#define STOF_SM90_TMA 1
#define STOF_SM90_ROWMASK 1
#define stof_attn_block_fwd_sm90 g128_t128_s3_pp_tma_rm_block
#include "attn_dev.cu"

/* _np: STOF_SM90_NOPARTIAL=1 (no mask code: correct only on formats without partial tiles,
 * e.g. dense at multiples of the tile; the engine's choice there since session 17).
 * bench/attn_ab_nopartial.sh. */
#define ATTN_NS g64_t64_s2_k_m4_tma_np
#define STOF_HEAD_DIM 64
#define STOF_BF16 0
#define STOF_TILE_M 64
#define STOF_STAGES 2
#define STOF_MIN_BLOCKS 4
#define STOF_SM90_QREG 0
#define STOF_SM90_TMA 1
#define STOF_SM90_NOPARTIAL 1
#define stof_attn_block_fwd_sm90 g64_t64_s2_k_m4_tma_np_block
#include "attn_dev.cu"

#define ATTN_NS g128_t128_s3_pp_tma_np
#define STOF_HEAD_DIM 128
#define STOF_BF16 0
#define STOF_TILE_M 128
#define STOF_STAGES 3
#define STOF_SM90_TMA 1
#define STOF_SM90_NOPARTIAL 1
#define stof_attn_block_fwd_sm90 g128_t128_s3_pp_tma_np_block
#include "attn_dev.cu"

/* _nopeel: STOF_SM90_PEEL=0 (the TMA ping-pong's first tile through the loop, with a P V of
 * P = 0; the default until session 20; bench/attn_ab_peel.sh) */
#define ATTN_NS g128_t128_s3_pp_tma_np_nopeel
#define STOF_HEAD_DIM 128
#define STOF_BF16 0
#define STOF_TILE_M 128
#define STOF_STAGES 3
#define STOF_SM90_TMA 1
#define STOF_SM90_NOPARTIAL 1
#define STOF_SM90_PEEL 0
#define stof_attn_block_fwd_sm90 g128_t128_s3_pp_tma_np_nopeel_block
#include "attn_dev.cu"

#define ATTN_NS g128_t128_s3_pp_tma_nopeel
#define STOF_HEAD_DIM 128
#define STOF_BF16 0
#define STOF_TILE_M 128
#define STOF_STAGES 3
#define STOF_SM90_TMA 1
#define STOF_SM90_PEEL 0
#define stof_attn_block_fwd_sm90 g128_t128_s3_pp_tma_nopeel_block
#include "attn_dev.cu"

/* _k64: STOF_SM90_KEY64=1 (T = 128, two warpgroups sharing each K/V tile, computed as two
 * 64-key steps; the producer one warp; 2 CTAs an SM). */
#define ATTN_NS g64_t128_s2_k_m2_tma_k64
#define STOF_HEAD_DIM 64
#define STOF_BF16 0
#define STOF_TILE_M 128
#define STOF_STAGES 2
#define STOF_MIN_BLOCKS 2
#define STOF_SM90_QREG 0
#define STOF_SM90_PINGPONG 0
#define STOF_SM90_TMA 1
#define STOF_SM90_KEY64 1
#define stof_attn_block_fwd_sm90 g64_t128_s2_k_m2_tma_k64_block
#include "attn_dev.cu"

#define ATTN_NS g64_t128_s2_k_m2_tma_k64_np
#define STOF_HEAD_DIM 64
#define STOF_BF16 0
#define STOF_TILE_M 128
#define STOF_STAGES 2
#define STOF_MIN_BLOCKS 2
#define STOF_SM90_QREG 0
#define STOF_SM90_PINGPONG 0
#define STOF_SM90_TMA 1
#define STOF_SM90_KEY64 1
#define STOF_SM90_NOPARTIAL 1
#define stof_attn_block_fwd_sm90 g64_t128_s2_k_m2_tma_k64_np_block
#include "attn_dev.cu"

#define ATTN_NS g128_t128_s2_k_tma_k64_np
#define STOF_HEAD_DIM 128
#define STOF_BF16 0
#define STOF_TILE_M 128
#define STOF_STAGES 2
#define STOF_MIN_BLOCKS 1
#define STOF_SM90_QREG 0
#define STOF_SM90_PINGPONG 0
#define STOF_SM90_TMA 1
#define STOF_SM90_KEY64 1
#define STOF_SM90_NOPARTIAL 1
#define stof_attn_block_fwd_sm90 g128_t128_s2_k_tma_k64_np_block
#include "attn_dev.cu"

/* _lz: the same with STOF_LAZY_RESCALE=1 (session 24) */
#define ATTN_NS g64_t64_s2_k_m4_tma_rm_lz
#define STOF_HEAD_DIM 64
#define STOF_BF16 0
#define STOF_TILE_M 64
#define STOF_STAGES 2
#define STOF_MIN_BLOCKS 4
#define STOF_SM90_QREG 0
#define STOF_SM90_TMA 1
#define STOF_SM90_ROWMASK 1
#define stof_attn_block_fwd_sm90 g64_t64_s2_k_m4_tma_rm_lz_block
#define STOF_LAZY_RESCALE 1
#include "attn_dev.cu"

#define ATTN_NS g64_t64_s2_k_m4_tma_hs_rm_lz
#define STOF_HEAD_DIM 64
#define STOF_BF16 0
#define STOF_TILE_M 64
#define STOF_STAGES 2
#define STOF_MIN_BLOCKS 4
#define STOF_SM90_QREG 0
#define STOF_SM90_TMA 1
#define STOF_SM90_HALFSKIP 1
#define STOF_SM90_ROWMASK 1
#define stof_attn_block_fwd_sm90 g64_t64_s2_k_m4_tma_hs_rm_lz_block
#define STOF_LAZY_RESCALE 1
#include "attn_dev.cu"

#define ATTN_NS g128_t64_s2_rm_m3_lz
#define STOF_HEAD_DIM 128
#define STOF_BF16 0
#define STOF_TILE_M 64
#define STOF_STAGES 2
#define STOF_MIN_BLOCKS 3
#define STOF_SM90_QREG 1
#define STOF_SM90_PV_SPLIT 0
#define STOF_SM90_OVERLAP 0
#define STOF_SM90_PINGPONG 0
#define STOF_SM90_ROWMASK 1
#define stof_attn_block_fwd_sm90 g128_t64_s2_rm_m3_lz_block
#define STOF_LAZY_RESCALE 1
#include "attn_dev.cu"

#define ATTN_NS g128_t128_s3_pp_tma_rm_lz
#define STOF_HEAD_DIM 128
#define STOF_BF16 0
#define STOF_TILE_M 128
#define STOF_STAGES 3
#define STOF_SM90_TMA 1
#define STOF_SM90_ROWMASK 1
#define stof_attn_block_fwd_sm90 g128_t128_s3_pp_tma_rm_lz_block
#define STOF_LAZY_RESCALE 1
#include "attn_dev.cu"

#undef ATTN_DEV_INSTANTIATE_SM90

struct Cfg {
  const char *name;
  int D, T, bf16, warps, stages, split, unroll, minb, row_warps, row_keys, smem;
  const void *blk, *row;
  int sm90; /* 1: kernels/attention_block_sm90.cu (stof_attn_block_fwd_sm90), no row kernel */
  int qreg, pvsplit, overlap, pingpong; /* sm90 only: STOF_SM90_QREG, _PV_SPLIT, _OVERLAP, _PINGPONG */
  int tma, threads; /* sm90 only: STOF_SM90_TMA; threads per CTA (kBlockThreads: the producer too) */
  int halfskip;     /* sm90 only: STOF_SM90_HALFSKIP */
  int rowmask;      /* sm90 only: STOF_SM90_ROWMASK */
  int nopartial, key64; /* sm90 only: STOF_SM90_NOPARTIAL, STOF_SM90_KEY64 */
};

#define CFG(ns, D, T, BF, W, S, SP, UN, MB, RW, RK)                                         \
  {                                                                                        \
    #ns, D, T, BF, W, S, SP, UN, MB, RW, RK, ns::stof_attn::blk::kSmemBytes,               \
        (const void *)&ns::ns##_block, (const void *)&ns::ns##_row, 0, 0, 0, 0, 0, 0, W * 32 \
  }
#define CFG90(ns, D, T, BF, S, MB, QR, PS, OV, PP)                                          \
  {                                                                                        \
    #ns, D, T, BF, T / 16, S, 0, -1, MB, 0, 0, ns::stof_attn::sm90::kSmemBytes,            \
        (const void *)&ns::ns##_block, nullptr, 1, QR, PS, OV, PP,                         \
        ns::stof_attn::sm90::kTma, ns::stof_attn::sm90::kBlockThreads,                     \
        ns::stof_attn::sm90::kHalfskip, ns::stof_attn::sm90::kRowmask,                    \
        ns::stof_attn::sm90::kNoPartial, (int)ns::stof_attn::sm90::kKey64                       \
  }

static const Cfg g_cfgs[] = {
    CFG(h64_t64_w4_s2, 64, 64, 0, 4, 2, 0, -1, -1, 4, 4),
    CFG(h64_t32_w2_s2, 64, 32, 0, 2, 2, 0, -1, -1, 4, 4),
    CFG(h64_t32_w2_s3, 64, 32, 0, 2, 3, 0, -1, -1, 4, 4),
    CFG(h64_t32_w2_s2_m8, 64, 32, 0, 2, 2, 0, -1, 8, 4, 4),
    CFG(h128_t32_w2_s2, 128, 32, 0, 2, 2, 0, -1, -1, 4, 4),
    CFG(h128_t32_w2_s2_m5, 128, 32, 0, 2, 2, 0, -1, 5, 4, 4),
    CFG(h64_t32_w2_s2_lz, 64, 32, 0, 2, 2, 0, -1, -1, 4, 4),
    CFG(h64_t32_w1_s2, 64, 32, 0, 1, 2, 0, -1, -1, 4, 4),
    CFG(h128_t32_w2_s2_lz, 128, 32, 0, 2, 2, 0, -1, -1, 4, 4),
    CFG(h64_t64_w4_s2_m4, 64, 64, 0, 4, 2, 0, -1, 4, 8, 2),
    CFG(h64_t64_w4_s2_s, 64, 64, 0, 4, 2, 1, -1, -1, 8, 4),
    CFG(h64_t64_w2_s2, 64, 64, 0, 2, 2, 0, -1, -1, 4, 8),
    CFG(h64_t128_w4_s2, 64, 128, 0, 4, 2, 0, -1, -1, 4, 4),
    CFG(h64_t128_w4_s2_u, 64, 128, 0, 4, 2, 0, 1, -1, 4, 4),
    CFG(h128_t64_w4_s2, 128, 64, 0, 4, 2, 0, -1, -1, 4, 4),
    CFG(h128_t128_w8_s2, 128, 128, 0, 8, 2, 0, -1, -1, 4, 4),
    CFG(h128_t128_w8_s2_r, 128, 128, 0, 8, 2, 0, 0, -1, 8, 4),
    CFG(h64_t64_w4_s2_bf, 64, 64, 1, 4, 2, 0, -1, -1, 4, 4),
    CFG(h128_t128_w8_s2_bf, 128, 128, 1, 8, 2, 0, -1, -1, 4, 4),
    CFG90(g64_t128_s3_pp, 64, 128, 0, 3, 1, 1, 0, 0, 1),
    CFG90(g64_t128_s3_o, 64, 128, 0, 3, 1, 1, 0, 1, 0),
    CFG90(g64_t128_s2, 64, 128, 0, 2, 1, 1, 0, 0, 0),
    CFG90(g64_t128_s2_k, 64, 128, 0, 2, 1, 0, 0, 0, 0),
    CFG90(g64_t64_s2, 64, 64, 0, 2, 1, 1, 0, 0, 0),
    CFG90(g64_t64_s3_o, 64, 64, 0, 3, 1, 1, 0, 1, 0),
    CFG90(g64_t64_s2_k, 64, 64, 0, 2, 1, 0, 0, 0, 0),
    CFG90(g128_t128_s3_pp, 128, 128, 0, 3, 1, 1, 0, 0, 1),
    CFG90(g128_t128_s3_o, 128, 128, 0, 3, 1, 1, 0, 1, 0),
    CFG90(g128_t128_s2, 128, 128, 0, 2, 1, 1, 0, 0, 0),
    CFG90(g128_t128_s2_p, 128, 128, 0, 2, 1, 1, 1, 0, 0),
    CFG90(g128_t128_s2_k, 128, 128, 0, 2, 1, 0, 0, 0, 0),
    CFG90(g128_t64_s2, 128, 64, 0, 2, 1, 1, 0, 0, 0),
    CFG90(g128_t64_s3_o, 128, 64, 0, 3, 1, 1, 0, 1, 0),
    CFG90(g64_t128_s3_pp_bf, 64, 128, 1, 3, 1, 1, 0, 0, 1),
    CFG90(g128_t128_s3_pp_bf, 128, 128, 1, 3, 1, 1, 0, 0, 1),
    CFG90(g64_t64_s2_bf, 64, 64, 1, 2, 1, 1, 0, 0, 0),
    CFG90(g128_t128_s2_bf, 128, 128, 1, 2, 1, 1, 0, 0, 0),
    CFG90(g64_t128_s3_pp_tma, 64, 128, 0, 3, 1, 1, 0, 0, 1),
    CFG90(g128_t128_s3_pp_tma, 128, 128, 0, 3, 1, 1, 0, 0, 1),
    CFG90(g64_t64_s2_tma, 64, 64, 0, 2, 1, 1, 0, 0, 0),
    CFG90(g64_t64_s3_o_tma, 64, 64, 0, 3, 1, 1, 0, 1, 0),
    CFG90(g64_t64_s2_m4_tma, 64, 64, 0, 2, 4, 1, 0, 0, 0),
    CFG90(g64_t64_s2_k_m4_tma, 64, 64, 0, 2, 4, 0, 0, 0, 0),
    CFG90(g128_t64_s2_tma, 128, 64, 0, 2, 1, 1, 0, 0, 0),
    CFG90(g64_t128_s3_o_tma, 64, 128, 0, 3, 1, 1, 0, 1, 0),
    CFG90(g64_t128_s2_k_tma, 64, 128, 0, 2, 1, 0, 0, 0, 0),
    CFG90(g64_t128_s3_pp_tma_bf, 64, 128, 1, 3, 1, 1, 0, 0, 1),
    CFG90(g64_t64_s2_tma_hs, 64, 64, 0, 2, 1, 1, 0, 0, 0),
    CFG90(g128_t64_s2_tma_hs, 128, 64, 0, 2, 1, 1, 0, 0, 0),
    CFG90(g64_t64_s2_k_m4_tma_hs, 64, 64, 0, 2, 4, 0, 0, 0, 0),
    CFG90(g64_t64_s2_hs, 64, 64, 0, 2, 1, 1, 0, 0, 0),
    CFG90(g64_t64_s2_tma_hs_bf, 64, 64, 1, 2, 1, 1, 0, 0, 0),
    CFG90(g64_t64_s2_tma_rm, 64, 64, 0, 2, 1, 1, 0, 0, 0),
    CFG90(g64_t64_s2_k_m4_tma_rm, 64, 64, 0, 2, 4, 0, 0, 0, 0),
    CFG90(g128_t64_s2_tma_rm, 128, 64, 0, 2, 1, 1, 0, 0, 0),
    CFG90(g64_t64_s2_tma_hs_rm, 64, 64, 0, 2, 1, 1, 0, 0, 0),
    CFG90(g64_t64_s3_o_tma_rm, 64, 64, 0, 3, 1, 1, 0, 1, 0),
    CFG90(g64_t128_s3_pp_tma_rm, 64, 128, 0, 3, 1, 1, 0, 0, 1),
    CFG90(g64_t64_s2_rm, 64, 64, 0, 2, 1, 1, 0, 0, 0),
    CFG90(g64_t64_s2_hs_rm, 64, 64, 0, 2, 1, 1, 0, 0, 0),
    CFG90(g64_t64_s2_k_m4_tma_hs_rm, 64, 64, 0, 2, 4, 0, 0, 0, 0),
    CFG90(g128_t64_s2_rm, 128, 64, 0, 2, 1, 1, 0, 0, 0),
    CFG90(g128_t64_s2_hs_rm, 128, 64, 0, 2, 1, 1, 0, 0, 0),
    CFG90(g128_t64_s2_rm_m3, 128, 64, 0, 2, 3, 1, 0, 0, 0),
    CFG90(g128_t64_s2_hs_rm_m3, 128, 64, 0, 2, 3, 1, 0, 0, 0),
    CFG90(g128_t128_s3_pp_tma_rm, 128, 128, 0, 3, 1, 1, 0, 0, 1),
    CFG90(g64_t64_s2_k_m4_tma_np, 64, 64, 0, 2, 4, 0, 0, 0, 0),
    CFG90(g128_t128_s3_pp_tma_np, 128, 128, 0, 3, 1, 1, 0, 0, 1),
    CFG90(g128_t128_s3_pp_tma_np_nopeel, 128, 128, 0, 3, 1, 1, 0, 0, 1),
    CFG90(g128_t128_s3_pp_tma_nopeel, 128, 128, 0, 3, 1, 1, 0, 0, 1),
    CFG90(g64_t128_s2_k_m2_tma_k64, 64, 128, 0, 2, 2, 0, 0, 0, 0),
    CFG90(g64_t128_s2_k_m2_tma_k64_np, 64, 128, 0, 2, 2, 0, 0, 0, 0),
    CFG90(g128_t128_s2_k_tma_k64_np, 128, 128, 0, 2, 1, 0, 0, 0, 0),
    CFG90(g64_t64_s2_k_m4_tma_rm_lz, 64, 64, 0, 2, 4, 0, 0, 0, 0),
    CFG90(g64_t64_s2_k_m4_tma_hs_rm_lz, 64, 64, 0, 2, 4, 0, 0, 0, 0),
    CFG90(g128_t64_s2_rm_m3_lz, 128, 64, 0, 2, 3, 1, 0, 0, 0),
    CFG90(g128_t128_s3_pp_tma_rm_lz, 128, 128, 0, 3, 1, 1, 0, 0, 1),
};
static const int g_ncfg = sizeof(g_cfgs) / sizeof(g_cfgs[0]);

/* ------------------------------------------------------------------ utilities */
#define CK(x)                                                                              \
  do {                                                                                     \
    cudaError_t e_ = (x);                                                                  \
    if (e_ != cudaSuccess) {                                                               \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));  \
      exit(2);                                                                             \
    }                                                                                      \
  } while (0)

static std::vector<std::string> split(const std::string &s, char c)
{
  std::vector<std::string> v;
  std::string cur;
  std::stringstream ss(s);
  while (std::getline(ss, cur, c))
    if (!cur.empty()) v.push_back(cur);
  return v;
}

static inline uint64_t mix64(uint64_t x)
{
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed) {}
  uint64_t next() { return s = mix64(s); }
  int range(int lo, int hi) { return lo + (int)(next() % (uint64_t)(hi - lo + 1)); } /* [lo, hi] */
  double unit() { return (next() >> 11) * (1.0 / 9007199254740992.0); }
};

/* ------------------------------------------------------------------ masks */
/* Beyond the suite: hole (causal with fully masked rows), perhead (a different mask per
 * (b, h)), dilated = dilated(64, 63) of DESIGN.md section 4 (j = i - 64k, k < 64: at most 64
 * keys per row, each in its own 64-tile: the case the row-wise kernel is for). */
enum { M_DENSE, M_CAUSAL, M_SLIDING, M_CSLIDING, M_LONGFORMER, M_BIGBIRD, M_DOCUMENT, M_HOLE, M_PERHEAD, M_DILATED };
static const char *g_mask_names[] = {"dense", "causal", "sliding", "causal_sliding", "longformer",
                                     "bigbird", "document", "hole", "perhead", "dilated"};
static const int g_nmask_kinds = 10;

struct Mask {
  int kind = 0;
  int Sq = 0, Sk = 0, mask_b = 1, mask_h = 1, T = 64;
  std::vector<int> doc;               /* document id per position */
  int nrb = 0;                        /* random 32-blocks per side (bigbird) */
  std::vector<unsigned char> rnd;     /* kept random blocks */
  static const int W = 32, G = 32, RB = 32;

  bool base(int k, int i, int j, int w) const
  {
    switch (k) {
    case M_DENSE: return true;
    case M_CAUSAL: return j <= i;
    case M_SLIDING: return std::abs(i - j) <= w;
    case M_CSLIDING: return j <= i && i - j < w;
    case M_LONGFORMER: return std::abs(i - j) <= w || i < G || j < G;
    case M_BIGBIRD:
      return std::abs(i - j) <= w || i < G || j < G || rnd[(size_t)(i / RB) * nrb + j / RB];
    case M_DOCUMENT: return doc[i] == doc[j];
    case M_HOLE: return j <= i && !(i < 3 || i % 97 == 5);
    case M_DILATED: return j <= i && (i - j) % 64 == 0 && (i - j) / 64 < 64;
    }
    return false;
  }
  /* Instance `inst` (see the format's rule), element (i, j). */
  bool pred(int inst, int i, int j) const
  {
    if (kind != M_PERHEAD) return base(kind, i, j, W);
    switch (inst % 4) {
    case 0: return j <= i && i >= T + 3;                 /* first tile-row and then some: empty */
    case 1: return base(M_SLIDING, i, j, 8 + inst);      /* a different width per instance */
    case 2: return base(M_BIGBIRD, i, j, W);
    default: return doc[i] == doc[j] && i % 50 != 7;
    }
  }
};

static Mask make_mask(int kind, int Sq, int Sk, int B, int H, int T)
{
  Mask m;
  m.kind = kind;
  m.Sq = Sq;
  m.Sk = Sk;
  m.T = T;
  if (kind == M_PERHEAD) {
    m.mask_b = B;
    m.mask_h = H;
  }
  const int S = std::max(Sq, Sk);
  m.nrb = (S + Mask::RB - 1) / Mask::RB;
  m.rnd.resize((size_t)m.nrb * m.nrb);
  for (int a = 0; a < m.nrb; ++a)
    for (int c = 0; c < m.nrb; ++c) /* seed 0, p = 0.1, reproducible hash */
      m.rnd[(size_t)a * m.nrb + c] =
          (mix64(mix64(0) ^ ((uint64_t)a << 32 | (uint64_t)c)) >> 11) * (1.0 / 9007199254740992.0) < 0.1;
  m.doc.resize(S);
  Rng r(1); /* lengths between S/16 and S/2, seed 1 */
  int pos = 0, d = 0;
  while (pos < S) {
    const int L = r.range(std::max(1, S / 16), std::max(1, S / 2));
    for (int k = 0; k < L && pos < S; ++k) m.doc[pos++] = d;
    ++d;
  }
  return m;
}

/* ------------------------------------------------------------------ the format */
struct Fmt {
  int T = 64, nrow = 0, ncol = 0, nmask = 0;
  std::vector<int> row_ptr, col_idx, bmp_off;
  std::vector<unsigned long long> bitmap;
  std::vector<long long> valid; /* valid pairs per instance */
  long long nfull = 0, npart = 0;
  long long nhalf = 0; /* partial tiles with keys 0..T/2-1 or T/2..T-1 masked in every row */
};

/* The BSR + bitmap format (DESIGN.md section 5; the contract in kernels/attention_block.cu). */
static Fmt build_fmt(const Mask &mk, int T)
{
  Fmt f;
  f.T = T;
  f.nrow = (mk.Sq + T - 1) / T;
  f.ncol = (mk.Sk + T - 1) / T;
  f.nmask = mk.mask_b * mk.mask_h;
  const int T8 = T / 8;
  f.row_ptr.resize((size_t)f.nmask * (f.nrow + 1));
  f.valid.assign(f.nmask, 0);
  std::vector<unsigned long long> w(T8 * T8);
  for (int m = 0; m < f.nmask; ++m)
    for (int r = 0; r < f.nrow; ++r) {
      f.row_ptr[(size_t)m * (f.nrow + 1) + r] = (int)f.col_idx.size();
      for (int c = 0; c < f.ncol; ++c) {
        long long cnt = 0;
        for (int ci = 0; ci < T8; ++ci)
          for (int ri = 0; ri < T8; ++ri) {
            unsigned long long word = 0;
            for (int rr = 0; rr < 8; ++rr) {
              const int i = r * T + ri * 8 + rr;
              if (i >= mk.Sq) break;
              for (int cc = 0; cc < 8; ++cc) {
                const int j = c * T + ci * 8 + cc;
                if (j >= mk.Sk) break;
                if (mk.pred(m, i, j)) word |= 1ull << (rr * 8 + cc);
              }
            }
            w[ci * T8 + ri] = word;
            cnt += __builtin_popcountll(word);
          }
        if (cnt == 0) continue;
        f.valid[m] += cnt;
        f.col_idx.push_back(c);
        if (cnt == (long long)T * T) {
          f.bmp_off.push_back(-1);
          ++f.nfull;
        } else {
          f.bmp_off.push_back((int)f.bitmap.size());
          f.bitmap.insert(f.bitmap.end(), w.begin(), w.end());
          ++f.npart;
          unsigned long long lo = 0, hi = 0; /* words of key blocks 0..T8/2-1, then the rest */
          for (int k = 0; k < T8 * T8 / 2; ++k) lo |= w[k], hi |= w[T8 * T8 / 2 + k];
          f.nhalf += !lo || !hi;
        }
      }
      if (r == f.nrow - 1) f.row_ptr[(size_t)m * (f.nrow + 1) + f.nrow] = (int)f.col_idx.size();
    }
  if (f.bitmap.empty()) f.bitmap.push_back(0);
  return f;
}

/* ------------------------------------------------------------------ device buffers */
__global__ void fill_kernel(void *p, size_t n, unsigned long long seed, float amp, int bf16)
{
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    unsigned long long x = seed ^ (i * 0x9e3779b97f4a7c15ull);
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    x ^= x >> 31;
    float u = ((x >> 40) * (1.0f / 16777216.0f)) * 2.f - 1.f; /* [-1, 1) */
    if (u == 0.f) u = 0.5f;                                      /* never zero */
    if (bf16)
      ((__nv_bfloat16 *)p)[i] = __float2bfloat16(u * amp);
    else
      ((__half *)p)[i] = __float2half(u * amp);
  }
}

static float to_f(const uint16_t v, int bf16)
{
  if (bf16) {
    uint32_t u = (uint32_t)v << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
  }
  __half_raw r;
  r.x = v;
  return __half2float(__half(r));
}

/* ------------------------------------------------------------------ reference check */
struct CheckResult {
  double relerr = 0;
  long long nan = 0, masked_nonzero = 0, masked_rows = 0, rows = 0;
  bool ok = false;
};

static CheckResult check(const Mask &mk, const std::vector<uint16_t> &hQ, const std::vector<uint16_t> &hK,
                         const std::vector<uint16_t> &hV, const std::vector<uint16_t> &hO, int B, int H,
                         int D, float scale, int bf16, int rows_per_pair)
{
  CheckResult cr;
  const int Sq = mk.Sq, Sk = mk.Sk;
  for (size_t k = 0; k < hO.size(); ++k) {
    const float f = to_f(hO[k], bf16);
    if (!std::isfinite(f)) ++cr.nan;
  }
  /* Which (b, h) pairs and rows. */
  std::vector<std::pair<int, int>> pairs;
  std::vector<int> rows;
  const bool all = (long long)B * H * Sq <= 8192;
  if (all) {
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < H; ++h) pairs.push_back({b, h});
    for (int i = 0; i < Sq; ++i) rows.push_back(i);
  } else {
    pairs.push_back({0, 0});
    pairs.push_back({B - 1, H - 1});
    if (B * H > 2) pairs.push_back({B / 2, H / 2});
    if (mk.kind == M_PERHEAD)
      for (int k = 0; k < 4 && k < B * H; ++k) pairs.push_back({k / H, k % H});
    Rng rg(7);
    for (int i = 0; i < std::min(Sq, 40); ++i) rows.push_back(i);
    for (int i = std::max(40, Sq - 40); i < Sq; ++i) rows.push_back(i);
    for (int k = 0; k < rows_per_pair; ++k) rows.push_back(rg.range(0, Sq - 1));
    std::sort(rows.begin(), rows.end());
    rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  }
  double num = 0, den = 0;
  std::atomic<long long> masked_nz(0), masked_rows(0);
  for (auto bh : pairs) {
    const int b = bh.first, h = bh.second;
    const int inst = (mk.mask_b > 1 ? b : 0) * mk.mask_h + (mk.mask_h > 1 ? h : 0);
    const size_t qoff = ((size_t)b * H + h) * Sq * D, koff = ((size_t)b * H + h) * Sk * D;
    std::vector<float> K(Sk * (size_t)D), V(Sk * (size_t)D);
    for (size_t k = 0; k < K.size(); ++k) {
      K[k] = to_f(hK[koff + k], bf16);
      V[k] = to_f(hV[koff + k], bf16);
    }
    const int nth = std::max(1u, std::min(32u, std::thread::hardware_concurrency()));
    std::vector<double> tn(nth, 0), td(nth, 0);
    std::vector<std::thread> th;
    for (int t = 0; t < nth; ++t)
      th.emplace_back([&, t]() {
        std::vector<double> s(Sk), q(D), out(D);
        std::vector<int> js(Sk);
        for (size_t ri = t; ri < rows.size(); ri += nth) {
          const int i = rows[ri];
          for (int d = 0; d < D; ++d) q[d] = to_f(hQ[qoff + (size_t)i * D + d], bf16);
          int nj = 0;
          double mx = -1e300;
          for (int j = 0; j < Sk; ++j) {
            if (!mk.pred(inst, i, j)) continue;
            double acc = 0;
            const float *kr = &K[(size_t)j * D];
            for (int d = 0; d < D; ++d) acc += q[d] * kr[d];
            acc *= scale;
            js[nj] = j;
            s[nj++] = acc;
            mx = std::max(mx, acc);
          }
          for (int d = 0; d < D; ++d) out[d] = 0;
          if (nj == 0) {
            ++masked_rows;
            for (int d = 0; d < D; ++d)
              if (to_f(hO[qoff + (size_t)i * D + d], bf16) != 0.f) {
                ++masked_nz;
                break;
              }
            continue;
          }
          double sum = 0;
          for (int k = 0; k < nj; ++k) {
            const double p = std::exp(s[k] - mx);
            sum += p;
            const float *vr = &V[(size_t)js[k] * D];
            for (int d = 0; d < D; ++d) out[d] += p * vr[d];
          }
          for (int d = 0; d < D; ++d) {
            const double ref = out[d] / sum;
            const double got = to_f(hO[qoff + (size_t)i * D + d], bf16);
            if (std::isfinite(got)) tn[t] += (got - ref) * (got - ref);
            else tn[t] += 1e30;
            td[t] += ref * ref;
          }
        }
      });
    for (auto &x : th) x.join();
    for (int t = 0; t < nth; ++t) {
      num += tn[t];
      den += td[t];
    }
    cr.rows += rows.size();
  }
  cr.masked_nonzero = masked_nz;
  cr.masked_rows = masked_rows;
  cr.relerr = den > 0 ? std::sqrt(num / den) : (num > 0 ? 1.0 : 0.0);
  cr.ok = cr.relerr < 1e-2 && cr.nan == 0 && cr.masked_nonzero == 0;
  return cr;
}

/* ------------------------------------------------------------------ running */
struct Opts {
  std::vector<std::string> cfgs, masks, shapes, kernels = {"block", "row"};
  int heads = 12, dim = 64, reps = 30, rowcheck = 160;
  bool check = true, time = true, suite = false, odd = false, quiet = false;
  bool bitcmp = false; /* --odd: entries 2k+1 of --cfg checked bit for bit against entry 2k */
  std::string json;
};

struct Row {
  std::string cfg, mask, kernel;
  int B, H, Sq, Sk, D;
  double ms = -1, tflops = 0, err = -1, density = 0, floor_ms = 0;
  bool ok = true;
  long long full = 0, part = 0;
};

static std::vector<Row> g_rows;
static FILE *g_json = nullptr;
/* --bitcmp: each checked output of a reference configuration by (mask, kernel, shape), and
 * whether the configuration being run is a reference (else it is compared); counts */
static std::map<std::string, std::vector<uint16_t>> g_bitref;
static bool g_bitref_now = true;
static int g_bit_same = 0, g_bit_diff = 0;
static double g_bw = 3.0e12, g_peak = 790e12; /* bytes/s measured at start; fp16 tensor peak */

/* Median of `reps` launches, each between its own pair of events, input sets rotated.
 * Warm-up is time-based (>= 100 ms of launches, at least 5): after a CPU-bound reference
 * check the GPU idles at low clocks, and 5 launches of a 3 ms kernel did not bring them back
 * (dense 16x4096 read 2.94 ms after a check and 2.58 ms in a timing-only run, same SASS). */
static double time_launches(const std::function<void(int)> &launch, int reps)
{
  cudaEvent_t w0, w1;
  CK(cudaEventCreate(&w0));
  CK(cudaEventCreate(&w1));
  CK(cudaEventRecord(w0));
  for (int k = 0; k < 5; ++k) launch(k % 3);
  CK(cudaEventRecord(w1));
  CK(cudaEventSynchronize(w1));
  float wt = 0.f;
  CK(cudaEventElapsedTime(&wt, w0, w1));
  const int more = std::min(2000, (int)std::ceil(100.0 / std::max(1e-3, (double)wt / 5)));
  for (int k = 0; k < more; ++k) launch(k % 3);
  CK(cudaEventDestroy(w0));
  CK(cudaEventDestroy(w1));
  CK(cudaDeviceSynchronize());
  std::vector<cudaEvent_t> ev(2 * reps);
  for (auto &e : ev) CK(cudaEventCreate(&e));
  for (int k = 0; k < reps; ++k) {
    CK(cudaEventRecord(ev[2 * k]));
    launch(k % 3);
    CK(cudaEventRecord(ev[2 * k + 1]));
  }
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  std::vector<float> t(reps);
  for (int k = 0; k < reps; ++k) CK(cudaEventElapsedTime(&t[k], ev[2 * k], ev[2 * k + 1]));
  for (auto &e : ev) CK(cudaEventDestroy(e));
  std::sort(t.begin(), t.end());
  return t[reps / 2];
}

static const Cfg *find_cfg(const std::string &n)
{
  for (int k = 0; k < g_ncfg; ++k)
    if (n == g_cfgs[k].name) return &g_cfgs[k];
  return nullptr;
}

static int mask_kind(const std::string &n)
{
  for (int k = 0; k < g_nmask_kinds; ++k)
    if (n == g_mask_names[k]) return k;
  fprintf(stderr, "unknown mask %s\n", n.c_str());
  exit(1);
}

/* One configuration on one shape: every mask, both kernels, check then time. */
static void run_shape(const Cfg &cf, int B, int H, int Sq, int Sk, const std::vector<std::string> &masks,
                      const Opts &o, bool do_check, bool do_time)
{
  const int D = cf.D, bf = cf.bf16;
  const size_t nq = (size_t)B * H * Sq * D, nk = (size_t)B * H * Sk * D;
  const int nset = do_time ? 3 : 1;
  void *dQ[3], *dK[3], *dV[3], *dO;
  for (int s = 0; s < nset; ++s) {
    CK(cudaMalloc(&dQ[s], nq * 2));
    CK(cudaMalloc(&dK[s], nk * 2));
    CK(cudaMalloc(&dV[s], nk * 2));
    const unsigned long long seed = mix64(1000 + s * 3 + (unsigned)Sq * 7919ull + B * 31 + H);
    fill_kernel<<<1024, 256>>>(dQ[s], nq, seed, 2.0f, bf);
    fill_kernel<<<1024, 256>>>(dK[s], nk, mix64(seed + 1), 2.0f, bf);
    fill_kernel<<<1024, 256>>>(dV[s], nk, mix64(seed + 2), 1.0f, bf);
  }
  CK(cudaGetLastError());
  CK(cudaMalloc(&dO, nq * 2));
  /* TMA configurations: K and V of each input set as [B][H][Sk][D] walked {D, Sk, H, B}, box
   * {64, T, 1, 1}, 128-byte swizzle (the kernel header's contract: 4-D maps, box coordinates
   * (d, key row, hk, b); kernels/attention.c encodes the same) */
  CUtensorMap tmaps[3][2];
  memset(tmaps, 0, sizeof tmaps);
  if (cf.tma)
    for (int s = 0; s < nset; ++s)
      for (int t = 0; t < 2; ++t) {
        cuuint64_t dims[4] = {(cuuint64_t)D, (cuuint64_t)Sk, (cuuint64_t)H, (cuuint64_t)B};
        cuuint64_t strides[3] = {(cuuint64_t)D * 2, (cuuint64_t)Sk * D * 2, (cuuint64_t)H * Sk * D * 2};
        cuuint32_t box[4] = {64, (cuuint32_t)cf.T, 1, 1}, estr[4] = {1, 1, 1, 1};
        const CUresult r = cuTensorMapEncodeTiled(
            &tmaps[s][t], bf ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4,
            t ? dV[s] : dK[s], dims, strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
        if (r != CUDA_SUCCESS) {
          fprintf(stderr, "cuTensorMapEncodeTiled failed (%d) for %s\n", (int)r, cf.name);
          exit(1);
        }
      }
  std::vector<uint16_t> hQ, hK, hV, hO(nq);
  if (do_check) {
    hQ.resize(nq);
    hK.resize(nk);
    hV.resize(nk);
    CK(cudaMemcpy(hQ.data(), dQ[0], nq * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hK.data(), dK[0], nk * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hV.data(), dV[0], nk * 2, cudaMemcpyDeviceToHost));
  }
  const float scale = 1.0f / std::sqrt((float)D);
  for (const auto &mname : masks) {
    const int kind = mask_kind(mname);
    const Mask mk = make_mask(kind, Sq, Sk, B, H, cf.T);
    auto t0 = std::chrono::steady_clock::now();
    const Fmt f = build_fmt(mk, cf.T);
    const double build_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    long long valid = 0;
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < H; ++h)
        valid += f.valid[(mk.mask_b > 1 ? b : 0) * mk.mask_h + (mk.mask_h > 1 ? h : 0)];
    int *drp, *dci, *dbo;
    unsigned long long *dbm;
    CK(cudaMalloc(&drp, f.row_ptr.size() * 4));
    CK(cudaMalloc(&dci, std::max<size_t>(1, f.col_idx.size()) * 4));
    CK(cudaMalloc(&dbo, std::max<size_t>(1, f.bmp_off.size()) * 4));
    CK(cudaMalloc(&dbm, f.bitmap.size() * 8));
    CK(cudaMemcpy(drp, f.row_ptr.data(), f.row_ptr.size() * 4, cudaMemcpyHostToDevice));
    if (!f.col_idx.empty()) {
      CK(cudaMemcpy(dci, f.col_idx.data(), f.col_idx.size() * 4, cudaMemcpyHostToDevice));
      CK(cudaMemcpy(dbo, f.bmp_off.data(), f.bmp_off.size() * 4, cudaMemcpyHostToDevice));
    }
    CK(cudaMemcpy(dbm, f.bitmap.data(), f.bitmap.size() * 8, cudaMemcpyHostToDevice));
    const double density = (double)valid / ((double)B * H * Sq * Sk);
    const double flops = 4.0 * D * (double)valid;
    const double bytes = 2.0 * (2.0 * nq + 2.0 * nk);
    const double floor_ms = 1e3 * std::max(flops / g_peak, bytes / g_bw);
    int Bv = B, Hv = H, Hkv = H, Sqv = Sq, Skv = Sk, mb = mk.mask_b, mh = mk.mask_h;
    float sc = scale;
    /* contiguous [B, H, S, D] (the kernels take strides); no score modifier */
    stof_attn_layout_dev lay = {{(long long)H * Sq * D, (long long)Sq * D, D}, {(long long)H * Sk * D, (long long)Sk * D, D},
                                {(long long)H * Sk * D, (long long)Sk * D, D}, {(long long)H * Sq * D, (long long)Sq * D, D}};
    stof_attn_mod_dev nomod = {};
    for (const auto &kname : o.kernels) {
      const bool isblk = kname == "block";
      const void *fn = isblk ? cf.blk : cf.row;
      if (!fn) continue; /* sm90 configurations carry no row-wise kernel */
      dim3 grid, block;
      size_t smem = 0;
      if (isblk) {
        grid = dim3((Sq + cf.T - 1) / cf.T, B * H);
        block = dim3(cf.threads);
        smem = cf.smem;
      } else {
        grid = dim3((Sq + cf.row_warps - 1) / cf.row_warps, B * H);
        block = dim3(cf.row_warps * 32);
      }
      auto launch = [&](int s) {
        void *args[] = {&dQ[s], &dK[s], &dV[s], &dO, &drp, &dci, &dbo, &dbm, &Bv, &Hv,
                        &Hkv, &Sqv, &Skv, &mb, &mh, &sc, &lay, &nomod, &tmaps[s][0], &tmaps[s][1]};
        CK(cudaLaunchKernel(fn, grid, block, args, smem, 0));
      };
      Row row;
      row.cfg = cf.name;
      row.mask = mname;
      row.kernel = kname;
      row.B = B;
      row.H = H;
      row.Sq = Sq;
      row.Sk = Sk;
      row.D = D;
      row.density = density;
      row.full = f.nfull;
      row.part = f.npart;
      row.floor_ms = floor_ms;
      if (do_check) {
        CK(cudaMemset(dO, 0xff, nq * 2)); /* NaN in half and bfloat16 */
        launch(0);
        CK(cudaGetLastError());
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(hO.data(), dO, nq * 2, cudaMemcpyDeviceToHost));
        const CheckResult cr = check(mk, hQ, hK, hV, hO, B, H, D, scale, bf, o.rowcheck);
        if (o.bitcmp) {
          char key[160];
          snprintf(key, sizeof key, "%s %s B=%d H=%d Sq=%d Sk=%d D=%d bf=%d", mname.c_str(), kname.c_str(), B, H, Sq,
                   Sk, D, bf);
          if (g_bitref_now) {
            g_bitref[key] = hO;
          } else if (g_bitref.count(key)) {
            const std::vector<uint16_t> &ref = g_bitref[key];
            long long nd = 0;
            double md = 0;
            for (size_t k = 0; k < hO.size(); ++k)
              if (hO[k] != ref[k]) {
                ++nd;
                md = std::max(md, (double)std::fabs(to_f(hO[k], bf) - to_f(ref[k], bf)));
              }
            nd ? ++g_bit_diff : ++g_bit_same;
            if (!o.quiet || nd)
              printf("BITCMP %-20s %s: %s (%lld of %zu elements differ, max |diff| %.3e)\n", cf.name, key,
                     nd ? "DIFFERENT" : "identical", nd, hO.size(), md);
          }
        }
        row.err = cr.relerr;
        row.ok = cr.ok;
        if (!o.quiet || !cr.ok)
          printf("CHECK %-20s %-14s %-5s B=%d H=%d Sq=%d Sk=%d D=%d  relerr=%.3e nan=%lld "
               "masked_rows=%lld masked_nonzero=%lld rows=%lld  %s\n",
               cf.name, mname.c_str(), kname.c_str(), B, H, Sq, Sk, D, cr.relerr, cr.nan,
               cr.masked_rows, cr.masked_nonzero, cr.rows, cr.ok ? "PASS" : "FAIL");
        fflush(stdout);
      }
      if (do_time) {
        row.ms = time_launches(launch, o.reps);
        row.tflops = flops / (row.ms * 1e-3) / 1e12;
        printf("TIME  %-20s %-14s %-5s B=%d H=%d S=%d D=%d  %.4f ms  %.1f TFLOP/s  floor %.4f ms "
               "(%.0f%%)  density %.4f  tiles full %lld partial %lld (half-empty %lld)  fmt %.2fs\n",
               cf.name, mname.c_str(), kname.c_str(), B, H, Sq, D, row.ms, row.tflops, floor_ms,
               100.0 * floor_ms / row.ms, density, f.nfull, f.npart, f.nhalf, build_s);
        fflush(stdout);
      }
      if (g_json)
        fprintf(g_json,
                "{\"cfg\":\"%s\",\"mask\":\"%s\",\"kernel\":\"%s\",\"B\":%d,\"H\":%d,\"Sq\":%d,"
                "\"Sk\":%d,\"D\":%d,\"dtype\":\"%s\",\"ms\":%.5f,\"tflops\":%.2f,\"relerr\":%.3e,"
                "\"ok\":%s,\"density\":%.5f,\"tiles_full\":%lld,\"tiles_partial\":%lld,"
                "\"tiles_halfempty\":%lld,\"floor_ms\":%.5f}\n",
                cf.name, mname.c_str(), kname.c_str(), B, H, Sq, Sk, D, bf ? "bfloat16" : "float16",
                row.ms, row.tflops, row.err, row.ok ? "true" : "false", density, f.nfull, f.npart,
                f.nhalf, floor_ms);
      g_rows.push_back(row);
    }
    CK(cudaFree(drp));
    CK(cudaFree(dci));
    CK(cudaFree(dbo));
    CK(cudaFree(dbm));
  }
  for (int s = 0; s < nset; ++s) {
    CK(cudaFree(dQ[s]));
    CK(cudaFree(dK[s]));
    CK(cudaFree(dV[s]));
  }
  CK(cudaFree(dO));
}

/* ------------------------------------------------------------------ NVRTC check */
static std::string read_file(const std::string &p)
{
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

static bool nvrtc_one(const std::string &dir, const char *file, const std::vector<std::string> &defs,
                      bool expect_fail, const char *arch = "sm_90")
{
  const std::string src = read_file(dir + "/" + file), hdr = read_file(dir + "/attention_common.cuh");
  if (src.empty() || hdr.empty()) {
    printf("NVRTC cannot read %s/%s\n", dir.c_str(), file);
    return false;
  }
  const char *hs[] = {hdr.c_str()}, *hn[] = {"attention_common.cuh"};
  nvrtcProgram p;
  nvrtcCreateProgram(&p, src.c_str(), file, 1, hs, hn);
  std::vector<std::string> opts = {std::string("--gpu-architecture=") + arch, "-std=c++17", "-I/usr/local/cuda/include"};
  for (auto &d : defs) opts.push_back(d);
  std::vector<const char *> op;
  for (auto &s : opts) op.push_back(s.c_str());
  const nvrtcResult r = nvrtcCompileProgram(p, (int)op.size(), op.data());
  size_t n;
  nvrtcGetProgramLogSize(p, &n);
  std::string log(n, 0);
  nvrtcGetProgramLog(p, &log[0]);
  std::string all;
  for (auto &d : defs) all += d + " ";
  const bool ok = expect_fail ? r != NVRTC_SUCCESS : r == NVRTC_SUCCESS;
  printf("NVRTC %-20s %s%s -> %s\n", file, all.c_str(), expect_fail ? "(expect error)" : "",
         ok ? "ok" : "FAILED");
  if (!ok || expect_fail) {
    std::string first = log.substr(0, log.find('\n', log.find("error")));
    printf("   %s\n", (r == NVRTC_SUCCESS ? log : first).c_str());
  }
  nvrtcDestroyProgram(&p);
  return ok;
}

static int nvrtc_check(const std::string &dir)
{
  int bad = 0;
  for (int k = 0; k < g_ncfg; ++k) {
    const Cfg &c = g_cfgs[k];
    if (c.sm90) {
      bad += !nvrtc_one(dir, "attention_block_sm90.cu",
                        {"-DSTOF_HEAD_DIM=" + std::to_string(c.D), "-DSTOF_BF16=" + std::to_string(c.bf16),
                         "-DSTOF_TILE_M=" + std::to_string(c.T), "-DSTOF_TILE_N=" + std::to_string(c.T),
                         "-DSTOF_STAGES=" + std::to_string(c.stages), "-DSTOF_MIN_BLOCKS=" + std::to_string(c.minb),
                         "-DSTOF_SM90_QREG=" + std::to_string(c.qreg), "-DSTOF_SM90_PV_SPLIT=" + std::to_string(c.pvsplit),
                         "-DSTOF_SM90_OVERLAP=" + std::to_string(c.overlap), "-DSTOF_SM90_PINGPONG=" + std::to_string(c.pingpong),
                         "-DSTOF_SM90_TMA=" + std::to_string(c.tma), "-DSTOF_SM90_HALFSKIP=" + std::to_string(c.halfskip),
                         "-DSTOF_SM90_ROWMASK=" + std::to_string(c.rowmask),
                         "-DSTOF_SM90_NOPARTIAL=" + std::to_string(c.nopartial), "-DSTOF_SM90_KEY64=" + std::to_string(c.key64)},
                        false, "sm_90a");
      continue;
    }
    std::vector<std::string> d = {"-DSTOF_HEAD_DIM=" + std::to_string(c.D), "-DSTOF_BF16=" + std::to_string(c.bf16),
                                  "-DSTOF_TILE_M=" + std::to_string(c.T), "-DSTOF_TILE_N=" + std::to_string(c.T),
                                  "-DSTOF_WARPS=" + std::to_string(c.warps), "-DSTOF_STAGES=" + std::to_string(c.stages),
                                  "-DSTOF_KV_SPLIT=" + std::to_string(c.split)};
    if (c.unroll >= 0) d.push_back("-DSTOF_SUB_UNROLL=" + std::to_string(c.unroll));
    if (c.minb >= 0) d.push_back("-DSTOF_MIN_BLOCKS=" + std::to_string(c.minb));
    if (c.T == 32) d.push_back("-DSTOF_SUB_N=32");
    bad += !nvrtc_one(dir, "attention_block.cu", d, false);
    std::vector<std::string> dr = {"-DSTOF_HEAD_DIM=" + std::to_string(c.D), "-DSTOF_BF16=" + std::to_string(c.bf16),
                                   "-DSTOF_TILE_M=" + std::to_string(c.T), "-DSTOF_ROW_WARPS=" + std::to_string(c.row_warps),
                                   "-DSTOF_ROW_KEYS=" + std::to_string(c.row_keys)};
    bad += !nvrtc_one(dir, "attention_row.cu", dr, false);
  }
  bad += !nvrtc_one(dir, "attention_block.cu", {}, false); /* defaults */
  bad += !nvrtc_one(dir, "attention_row.cu", {}, false);
  bad += !nvrtc_one(dir, "attention_block_sm90.cu", {}, false, "sm_90a");
  bad += !nvrtc_one(dir, "attention_block_sm90.cu", {"-DSTOF_TILE_M=128", "-DSTOF_TILE_N=128"}, false, "sm_90a");
  bad += !nvrtc_one(dir, "attention_block_sm90.cu", {"-DSTOF_HEAD_DIM=128", "-DSTOF_TILE_M=128", "-DSTOF_TILE_N=128"}, false, "sm_90a");
  bad += !nvrtc_one(dir, "attention_block_sm90.cu", {"-DSTOF_HEAD_DIM=128", "-DSTOF_TILE_M=128", "-DSTOF_TILE_N=128", "-DSTOF_STAGES=4"}, true, "sm_90a");
  bad += !nvrtc_one(dir, "attention_block_sm90.cu", {"-DSTOF_TILE_M=128", "-DSTOF_TILE_N=128", "-DSTOF_SM90_HALFSKIP=1"}, true, "sm_90a");
  bad += !nvrtc_one(dir, "attention_block_sm90.cu", {"-DSTOF_STAGES=3", "-DSTOF_SM90_OVERLAP=1", "-DSTOF_SM90_HALFSKIP=1"}, true, "sm_90a");
  /* STOF_SM90_ROWMASK where no configuration above takes it: T = 128 with cp.async (the
   * defaults: ping-pong), D = 128 at T = 128 with TMA, and with score modifiers */
  bad += !nvrtc_one(dir, "attention_block_sm90.cu", {"-DSTOF_SM90_ROWMASK=1"}, false, "sm_90a");
  bad += !nvrtc_one(dir, "attention_block_sm90.cu", {"-DSTOF_HEAD_DIM=128", "-DSTOF_TILE_M=128", "-DSTOF_TILE_N=128", "-DSTOF_SM90_TMA=1", "-DSTOF_SM90_ROWMASK=1"}, false, "sm_90a");
  bad += !nvrtc_one(dir, "attention_block_sm90.cu", {"-DSTOF_TILE_M=64", "-DSTOF_TILE_N=64", "-DSTOF_STAGES=2", "-DSTOF_SM90_TMA=1", "-DSTOF_SM90_HALFSKIP=1", "-DSTOF_SM90_ROWMASK=1", "-DSTOF_SCORE_MOD=1", "-DSTOF_SOFTCAP=1"}, false, "sm_90a");
  bad += !nvrtc_one(dir, "attention_block.cu", {"-DSTOF_HEAD_DIM=96"}, true);
  bad += !nvrtc_one(dir, "attention_row.cu", {"-DSTOF_HEAD_DIM=80"}, true);
  bad += !nvrtc_one(dir, "attention_block.cu", {"-DSTOF_TILE_M=64", "-DSTOF_TILE_N=128"}, true);
  printf("NVRTC %s\n", bad ? "FAILED" : "all ok");
  return bad ? 1 : 0;
}

/* ------------------------------------------------------------------ main */
static void parse_shape(const std::string &s, int &B, int &Sq, int &Sk)
{
  auto v = split(s, 'x');
  B = std::atoi(v.at(0).c_str());
  Sq = std::atoi(v.at(1).c_str());
  Sk = v.size() > 2 ? std::atoi(v[2].c_str()) : Sq;
}

/* The final short table: one line per case (mask, shape), the fastest block-wise and
 * row-wise configurations, useful TFLOP/s of the faster, the largest checked error. */
static void print_table()
{
  struct Case {
    std::string mask;
    int B, H, Sq, Sk, D;
    double blk = -1, row = -1, err = -1, density = 0, floor_ms = 0, flops = 0;
    std::string blk_cfg, row_cfg;
    bool ok = true;
  };
  std::vector<Case> cs;
  for (const Row &r : g_rows) {
    Case *c = nullptr;
    for (auto &x : cs)
      if (x.mask == r.mask && x.B == r.B && x.H == r.H && x.Sq == r.Sq && x.Sk == r.Sk && x.D == r.D) c = &x;
    if (!c) {
      cs.push_back(Case());
      c = &cs.back();
      c->mask = r.mask;
      c->B = r.B;
      c->H = r.H;
      c->Sq = r.Sq;
      c->Sk = r.Sk;
      c->D = r.D;
      c->density = r.density;
      c->floor_ms = r.floor_ms;
    }
    c->ok = c->ok && r.ok;
    c->err = std::max(c->err, r.err);
    if (r.ms > 0) {
      const double f = r.tflops * r.ms; /* useful TFLOP x ms, the same for every kernel */
      c->flops = f;
      if (r.kernel == "block" && (c->blk < 0 || r.ms < c->blk)) c->blk = r.ms, c->blk_cfg = r.cfg;
      if (r.kernel == "row" && (c->row < 0 || r.ms < c->row)) c->row = r.ms, c->row_cfg = r.cfg;
    }
  }
  printf("\n%-14s %3s %5s %5s %3s %3s %9s %-19s %9s %7s %8s %9s %8s %4s\n", "mask", "B", "Sq", "Sk",
         "H", "D", "block_ms", "(block cfg)", "row_ms", "TFLOP/s", "floor_ms", "max_err", "density", "ok");
  for (const Case &c : cs) {
    char bm[32] = "-", rm[32] = "-", er[32] = "-", tf[32] = "-";
    if (c.blk > 0) snprintf(bm, sizeof bm, "%.4f", c.blk);
    if (c.row > 0) snprintf(rm, sizeof rm, "%.4f", c.row);
    if (c.err >= 0) snprintf(er, sizeof er, "%.2e", c.err);
    const double best = c.blk > 0 && (c.row < 0 || c.blk < c.row) ? c.blk : c.row;
    if (best > 0) snprintf(tf, sizeof tf, "%.1f", c.flops / best);
    printf("%-14s %3d %5d %5d %3d %3d %9s %-19s %9s %7s %8.4f %9s %8.4f %4s\n", c.mask.c_str(), c.B, c.Sq,
           c.Sk, c.H, c.D, bm, c.blk_cfg.c_str(), rm, tf, c.floor_ms, er, c.density, c.ok ? "ok" : "FAIL");
  }
}

int main(int argc, char **argv)
{
  Opts o;
  bool list = false;
  std::string nvrtc_dir;
  for (int k = 1; k < argc; ++k) {
    const std::string a = argv[k];
    auto val = [&]() -> std::string {
      if (k + 1 >= argc) {
        fprintf(stderr, "%s needs a value\n", a.c_str());
        exit(1);
      }
      return argv[++k];
    };
    if (a == "--cfg") o.cfgs = split(val(), ',');
    else if (a == "--masks") o.masks = split(val(), ',');
    else if (a == "--shapes") o.shapes = split(val(), ',');
    else if (a == "--kernels") o.kernels = split(val(), ',');
    else if (a == "--heads") o.heads = std::atoi(val().c_str());
    else if (a == "--reps") o.reps = std::max(20, std::atoi(val().c_str()));
    else if (a == "--rowcheck") o.rowcheck = std::atoi(val().c_str());
    else if (a == "--json") o.json = val();
    else if (a == "--nocheck") o.check = false;
    else if (a == "--notime") o.time = false;
    else if (a == "--suite") o.suite = true;
    else if (a == "--odd") o.odd = true;
    else if (a == "--quiet") o.quiet = true;
    else if (a == "--bitcmp") o.bitcmp = true;
    else if (a == "--list") list = true;
    else if (a == "--nvrtc") nvrtc_dir = k + 1 < argc && argv[k + 1][0] != '-' ? argv[++k] : "kernels";
    else {
      fprintf(stderr, "unknown argument %s (see the comment at the top of bench/attn_dev.cu)\n", a.c_str());
      return 1;
    }
  }
  if (list) {
    for (int k = 0; k < g_ncfg; ++k)
      printf("%-22s D=%d T=%d %s warps=%d stages=%d kv_split=%d sub_unroll=%d min_blocks=%d smem=%d | "
             "row: warps=%d keys=%d  (-1: default)\n",
             g_cfgs[k].name, g_cfgs[k].D, g_cfgs[k].T, g_cfgs[k].bf16 ? "bf16" : "f16", g_cfgs[k].warps,
             g_cfgs[k].stages, g_cfgs[k].split, g_cfgs[k].unroll, g_cfgs[k].minb, g_cfgs[k].smem,
             g_cfgs[k].row_warps, g_cfgs[k].row_keys);
    return 0;
  }
  if (!nvrtc_dir.empty()) return nvrtc_check(nvrtc_dir);

  int dev = 0;
  CK(cudaSetDevice(dev));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, dev));
  g_peak = strstr(prop.name, "H200") ? 768e12 : 798e12; /* measured bf16/fp16 GEMM (KINDS.md, DESIGN 12) */
  {
    const size_t n = (size_t)1 << 30;
    void *a, *b;
    CK(cudaMalloc(&a, n));
    CK(cudaMalloc(&b, n));
    CK(cudaMemset(a, 1, n));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    CK(cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice));
    float best = 1e30f;
    for (int k = 0; k < 5; ++k) {
      CK(cudaEventRecord(e0));
      CK(cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice));
      CK(cudaEventRecord(e1));
      CK(cudaEventSynchronize(e1));
      float t;
      CK(cudaEventElapsedTime(&t, e0, e1));
      best = std::min(best, t);
    }
    g_bw = 2.0 * n / (best * 1e-3);
    CK(cudaFree(a));
    CK(cudaFree(b));
  }
  printf("device %s, %d SMs, L2 %d MB, smem/block optin %zu KB; copy %.2f TB/s (read+write); "
         "tensor peak used %.0f TFLOP/s\n",
         prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20, prop.sharedMemPerBlockOptin >> 10,
         g_bw / 1e12, g_peak / 1e12);
  for (int k = 0; k < g_ncfg; ++k) {
    const Cfg &c = g_cfgs[k];
    CK(cudaFuncSetAttribute(c.blk, cudaFuncAttributeMaxDynamicSharedMemorySize, c.smem));
    cudaFuncAttributes fa, fr;
    CK(cudaFuncGetAttributes(&fa, c.blk));
    fr.numRegs = 0;
    fr.localSizeBytes = 0;
    if (c.row) CK(cudaFuncGetAttributes(&fr, c.row));
    int occ = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, c.blk, c.threads, c.smem));
    printf("cfg %-22s block: %3d regs, %4zu B local, smem %6d, %d CTA/SM | row: %3d regs, %zu B local\n",
           c.name, fa.numRegs, fa.localSizeBytes, c.smem, occ, fr.numRegs, fr.localSizeBytes);
  }
  if (!o.json.empty()) g_json = fopen(o.json.c_str(), "a");

  const std::vector<std::string> suite_masks = {"dense", "causal", "sliding", "causal_sliding",
                                                "longformer", "bigbird", "document"};
  /* Without --cfg: the configurations measured best (bench/NOTES-attention.md): T=64 for the
   * sparse masks and T=128 for dense-like ones, both run, the table keeps the faster. */
  auto cfgs_for = [&](int D, std::vector<const char *> dflt) {
    std::vector<const Cfg *> v;
    for (auto &n : o.cfgs) {
      const Cfg *c = find_cfg(n);
      if (!c) {
        fprintf(stderr, "unknown cfg %s (--list)\n", n.c_str());
        exit(1);
      }
      if (c->D == D) v.push_back(c);
    }
    if (o.cfgs.empty())
      for (const char *n : dflt) v.push_back(find_cfg(n));
    return v;
  };
  const std::vector<std::string> masks = o.masks.empty() ? suite_masks : o.masks;
  if (o.odd) {
    /* odd lengths, Sq != Sk, fully masked rows and tile-rows, per-(b, h) masks */
    std::vector<std::string> om = masks;
    if (o.masks.empty()) {
      om.push_back("hole");
      om.push_back("perhead");
      om.push_back("dilated");
    }
    std::vector<const Cfg *> cs;
    if (o.cfgs.empty())
      for (int k = 0; k < g_ncfg; ++k) cs.push_back(&g_cfgs[k]);
    else
      for (auto &n : o.cfgs) cs.push_back(find_cfg(n));
    const char *shapes[] = {"1x1000", "1x3000", "2x1000x1500", "2x200x77", "1x128"};
    for (size_t ci = 0; ci < cs.size(); ++ci) {
      g_bitref_now = ci % 2 == 0;
      for (const char *s : shapes) {
        int B, Sq, Sk;
        parse_shape(s, B, Sq, Sk);
        run_shape(*cs[ci], B, 3, Sq, Sk, om, o, true, false);
      }
    }
  }
  if (o.suite) {
    const char *grid[] = {"1x128", "8x512", "8x1024", "16x2048", "16x4096"};
    for (const Cfg *c : cfgs_for(64, {"h64_t64_w4_s2", "h64_t128_w4_s2"}))
      for (const char *s : grid) {
        int B, Sq, Sk;
        parse_shape(s, B, Sq, Sk);
        run_shape(*c, B, 12, Sq, Sk, masks, o, o.check, o.time);
      }
    for (const Cfg *c : cfgs_for(128, {"h128_t64_w4_s2", "h128_t128_w8_s2"}))
      run_shape(*c, 1, 32, 8192, 8192, masks, o, o.check, o.time);
  }
  if (!o.shapes.empty()) {
    std::vector<const Cfg *> cs;
    if (o.cfgs.empty()) cs.push_back(find_cfg("h64_t64_w4_s2"));
    for (auto &n : o.cfgs) {
      const Cfg *c = find_cfg(n);
      if (!c) {
        fprintf(stderr, "unknown cfg %s (--list)\n", n.c_str());
        return 1;
      }
      cs.push_back(c);
    }
    for (const Cfg *c : cs)
      for (auto &s : o.shapes) {
        int B, Sq, Sk;
        parse_shape(s, B, Sq, Sk);
        run_shape(*c, B, o.heads, Sq, Sk, masks, o, o.check, o.time);
      }
  }
  if (!o.quiet) print_table();
  int fails = 0;
  double maxerr = 0;
  for (auto &r : g_rows) {
    fails += !r.ok;
    maxerr = std::max(maxerr, r.err);
  }
  printf("\n%s: %d of %zu results failed; max relative L2 error %.3e\n", fails ? "FAILED" : "ALL PASS",
         fails, g_rows.size(), maxerr);
  if (o.bitcmp)
    printf("BITCMP: %d of %d compared outputs bit-identical to their reference's\n", g_bit_same,
           g_bit_same + g_bit_diff);
  if (g_json) fclose(g_json);
  return fails ? 3 : 0;
}

#endif /* ATTN_DEV_INSTANTIATE */
