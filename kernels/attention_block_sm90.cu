/*
 * Block-wise sparse attention, forward (inference), Hopper path (sm_90a): warpgroup MMA.
 *
 * Same contract as stof_attn_block_fwd (kernels/attention_block.cu): the same arguments, the
 * same BSR + bitmap format with square T x T outer tiles, the same semantics (a row with no
 * valid key writes zeros, never NaN; rows past Sq are not written). Only the grid/block and
 * shared-memory sizes differ:
 *   extern "C" __global__ void stof_attn_block_fwd_sm90(
 *       const elem *Q, const elem *K, const elem *V, elem *O,
 *       const int *row_ptr, const int *col_idx, const int *bmp_off,
 *       const unsigned long long *bitmap,
 *       int B, int H, int Hkv, int Sq, int Sk, int mask_b, int mask_h, float scale,
 *       stof_attn::layout_t L, stof_attn::mod_t M)
 *   the same strided layouts as stof_attn_block_fwd (attention_common.cuh)
 *   grid  = (ceil(Sq / T), min(B * H, 65535), ceil(B * H / 65535)): as stof_attn_block_fwd
 *           (ceil((Sq + 32) / T) rows with STOF_SM90_QSHIFT=32)
 *   block = 128 * (T / 64) threads: one warpgroup (4 warps) per 64 query rows
 *           (STOF_SM90_TMA=1: plus the producer, 128 threads at T = 128, 32 at T = 64;
 *           stof_attn::sm90::kBlockThreads)
 *   dynamic shared memory = stof_attn::sm90::kSmemBytes
 *           = 1024 + T*D*2 * ((QREG ? 0 : 1) + 2*STOF_STAGES) + STOF_STAGES * (T/8)^2 * 8 bytes
 *             (+ 128 bytes of mbarriers with STOF_SM90_TMA=1 or STOF_SM90_PINGPONG=1)
 *           (the launcher must raise CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)
 * With STOF_SM90_TMA=1 the entry point takes two more arguments, the TMA descriptors
 * (CUtensorMap, 128 bytes, by value) of K and V:
 *       ..., mod_t M, const __grid_constant__ tmap_t tmK, const __grid_constant__ tmap_t tmV)
 *   each a 4-D tiled map of the tensor as L strides it (dims innermost first
 *   {D, Sk, Hkv, B}, byte strides 2 * {L.k[2], L.k[1], L.k[0]} (L.v for V)), box
 *   {64, T, 1, 1}, CU_TENSOR_MAP_SWIZZLE_128B, out-of-bounds elements zero (OOB_FILL_NONE),
 *   f16 or bf16 as STOF_BF16; box coordinates (d, key row, hk, b).
 * Must be compiled for sm_90a (wgmma): NVRTC --gpu-architecture=sm_90a.
 *
 * Structure (FA2-like pipeline, FA3-like math): all threads load Q and the row's non-empty
 * K/V tiles with cp.async into a STOF_STAGES-deep ring (the copy issued while tile i is
 * computed is that of the (i + distance)-th NON-EMPTY tile), one barrier per tile (a CTA
 * barrier; with ping-pong an mbarrier of the consumers); no producer warp, no TMA. Each warpgroup computes S = Q K^T for its 64 rows with
 * wgmma m64nTk16 (K from shared memory through a matrix descriptor, 128-byte swizzle,
 * K-major; Q from registers, or from shared memory with STOF_SM90_QREG=0), then the online
 * softmax in f32 registers (the accumulator layout of wgmma is, per warp, the mma.sync
 * m16n8 layout), then O += P V with wgmma m64nDk16, P from registers (RS variant), V from
 * shared memory as an MN-major (transposed) operand. Partial tiles run the same code and set
 * the scores of masked keys to -inf from their bitmap (finer skipping only with
 * STOF_SM90_HALFSKIP, below). Scheduling
 * variants: plain (S, wait, softmax, P V, wait), STOF_SM90_OVERLAP (P V of the previous tile
 * under the softmax), STOF_SM90_PINGPONG (two warpgroups taking turns with their MMAs).
 *
 * STOF_SM90_TMA=1 (FA3-style producer/consumer): the Q copy, the math and the three schedules
 * stay; the K/V ring is filled by a producer instead: one extra warp (T = 64) or warpgroup
 * (T = 128: setmaxnreg gives its registers to the consumers, 24 / 240) whose first warp walks
 * the same non-empty tiles of the row and, per tile, lane 0 issues cp.async.bulk.tensor (TMA)
 * copies of K and V (D/64 boxes each) on the stage's `full` mbarrier (expect_tx = 2 tiles of
 * bytes) while the lanes copy a partial tile's bitmap with cp.async and arrive on the same
 * barrier when it has landed (cp.async.mbarrier.arrive.noinc; 32 arrivals per phase;
 * STOF_SM90_ROWMASK at T = 64: they store its transposition instead, then arrive); lane 0
 * also puts the tile's bmp_off entry in the stage's word of the mbarrier area (kOffFlags), from
 * which the consumers learn whether the tile is partial. The consumers wait on `full`
 * (try_wait.parity; parity = use count of the stage & 1) instead of cp.async groups and a
 * CTA barrier, and each consumer thread arrives on the stage's `empty`
 * barrier once every wgmma reading the stage has been waited for; the producer waits on
 * `empty` before it refills a stage, so the ring is STOF_STAGES deep whatever the schedule
 * (the overlapped and ping-pong schedules hold a stage one tile longer). With Q in registers
 * the Q tile sits in the last stage's K slot: the producer's first copy into that stage waits
 * on a third barrier (`qfree`) that every consumer thread arrives on once it holds Q. Ping-pong
 * with TMA is not the cp.async path's schedule: both warpgroups overlap their softmax with
 * their own P V and take turns to issue through two mbarriers (see the schedule's comment in
 * the kernel). Rows past Sk are zero-filled by TMA (out-of-bounds box rows; their keys are
 * masked by the bitmap as before).
 *
 * Shared-memory tiles: [D/64][T rows][128 bytes]; 16-byte chunk c (0..7) of row r inside a
 * 64-column block sits at chunk c ^ (r & 7): the 128-byte swizzle atom of wgmma (8 rows x
 * 128 B, 1024-byte aligned). Bases are 1024-byte aligned. This is also the layout that TMA's
 * CU_TENSOR_MAP_SWIZZLE_128B writes for a box of 64 16-bit columns (128-byte rows) into a
 * 1024-byte aligned destination (address bits [4:6] ^= bits [7:9]).
 *
 * Macros: STOF_HEAD_DIM (64|128), STOF_BF16 (0|1), STOF_TILE_M = STOF_TILE_N (64|128),
 *   STOF_STAGES (default 3 with ping-pong, else 2; 2..4 within 227 KB), STOF_MIN_BLOCKS
 *   (default 1), STOF_LAZY_RESCALE (1: O rescaled only when a row's max grows past 2^8,
 *   attention_common.cuh; default 0),
 *   STOF_SM90_QREG (1: Q as A fragments in registers, S via the RS variant, loaded once with
 *   ldmatrix; 0: Q read from shared memory by every S wgmma; default 1; the engine passes 0
 *   with STOF_MIN_BLOCKS=4 at D = 64, T = 64 with TMA: 96 registers, 4 CTAs per SM),
 *   STOF_SM90_PV_SPLIT (1: O += P V as one m64n64 wgmma per 64-column block of D instead of
 *   one m64nD; only differs at D = 128; default 0),
 *   STOF_SM90_OVERLAP (1: FA3-style intra-warpgroup overlap: P V of tile i-1 is issued right
 *   after S of tile i and runs under the softmax of tile i; needs STOF_STAGES >= 3, as V of
 *   tile i-1 must stay resident while tile i+1 loads; default 0),
 *   STOF_SM90_PINGPONG (1: T = 128 only, STOF_STAGES >= 3: the two warpgroups' MMAs and
 *   softmaxes interleaved, so that one's softmax overlaps the other's MMAs: with TMA, each
 *   warpgroup's softmax also under its own P V, the two taking turns to issue; with cp.async,
 *   warpgroup 1 half a tile behind warpgroup 0 around one per-tile barrier; default 1 for
 *   T = 128, 0 for T = 64),
 *   STOF_SM90_TMA (1: K/V (and bitmaps) loaded by a producer (a warp at T = 64 and with
 *   STOF_SM90_KEY64, a warpgroup otherwise) with TMA and mbarriers, as
 *   above; 0: every thread copies them with cp.async, one CTA barrier per tile; default 0),
 *   STOF_SM90_HALFSKIP (1: T = 64 only, plain schedule (no overlap), TMA or cp.async: a
 *   partial tile whose keys 0-31 or 32-63 are masked for all 64 rows (its bitmap words 32-63
 *   or 0-31 all zero) is computed over its live 32-key half only: S with wgmma m64n32k16
 *   (K's descriptor 32 rows = 4096 bytes on for keys 32-63, a whole number of swizzle
 *   atoms), the mask and softmax over that half's 16 accumulators, P V over its 2 k-steps of
 *   16 keys; exact, as the skipped keys' P is 0. Every warp reads the whole bitmap after the
 *   tile landed and votes, so the choice is the same in the 4 warps of the warpgroup;
 *   default 0),
 *   STOF_SM90_ROWMASK (1: every schedule, tile and copy path: a partial tile's mask bits
 *   of a consumer lane's 32 (T = 64) scores come as one register per 64 keys, and each score
 *   takes one select on a predicate that ptxas moves from it with R2P (rm_apply), instead of
 *   a shared load, shift and two bit tests per 8-key block and row half. The register is
 *   the lane's column of a 16 x 32 matrix of 2-bit pairs (its warp's 16 bitmap words per 64
 *   keys), transposed from one 32-bit half per lane in four shuffle stages (rm_transpose):
 *   with TMA at T = 64 by the producer warp, which loads the tile's bitmap a tile ahead
 *   (ld.global) and stores the four consumer warps' 128 words in the stage's bitmap area
 *   before it arrives on the stage's full barrier (and, with STOF_SM90_HALFSKIP, the vote on
 *   the dead half in the mbarrier area's spare bytes); otherwise (cp.async, T = 128) by each
 *   consumer warp from the raw bitmap. The consumer's load is issued while S's wgmma runs;
 *   default 0),
 *   STOF_SM90_NOPARTIAL (1: the format has no partial tile (the selector's plan decides,
 *   kernels/attention.c): every tile is taken as full, the mask code is not compiled, the
 *   producer writes no partial flags; wrong on a format with partial tiles; default 0),
 *   STOF_SM90_ORDER (1 or 2: the launch order of tile-rows from a table: the first
 *   ORD.nheavy x B x H CTAs run the heavy rows of every (b, h) (instance m's rows
 *   ORD.row[m nrow] .. ORD.row[m nrow + nheavy - 1]), the others the remaining rows in the
 *   table's order (ORD.row[m nrow + nheavy] ..), (b, h) by (b, h) (1), or ORD.group (b, h) at
 *   a time (2): the group's rank-k rows pair by pair, then rank k + 1 (order_cta,
 *   attention_common.cuh). kernels/attention_split.c decides it: for tile-rows far longer
 *   than their instance's mean (longformer's global rows), which would otherwise start when
 *   their (b, h) comes up and run alone at the launch's end, and for rows of unequal lengths
 *   (causal, document), longest first over groups of pairs whose K and V fit in L2. Adds an
 *   argument after M (order_t, attention_common.cuh), not with STOF_SM90_SPLIT; default 0),
 *   STOF_SM90_KEY64 (1: T = 128, the plain schedule, Q in shared memory, not with
 *   STOF_SM90_ROWMASK: each 128-key tile computed as two steps of 64 keys, S with m64n64 (32
 *   accumulators, as at T = 64), so that the two warpgroups of a 128-row tile share its K/V
 *   copies at about the tile-64 kernel's registers; with TMA the producer is one warp (no
 *   setmaxnreg), and with STOF_MIN_BLOCKS = 2 two CTAs fit an SM (the engine's key64 at
 *   D = 64). The softmax of one half under the other's P V needs ~112 registers: measured
 *   slower at 1 CTA an SM, without a producer warp, and with a producer warpgroup and
 *   setmaxnreg 24 / 104 at 2 CTAs (sessions 18-19, bench/NOTES-attention.md; that code is in
 *   the tree of 86655a8); default 0),
 *   STOF_SM90_PEEL (1: the TMA ping-pong's first tile of a row on its own, without the loop's
 *   P V of P = 0 (half a warpgroup's MMA work of a tile, once a row); bit for bit the result
 *   without it, 0.988-1.000x its time on an H200 (document 0.988, causal 0.997, dense
 *   0.997-1.000: bench/attn_ab_peel.sh, session 20, without a score modifier); nvcc 13.0
 *   spills 40 bytes with it under an f32 T5 bias (52 without; f16 28 and 32), 8 under the
 *   soft cap (none without), none without a modifier; default 1 for the TMA ping-pong
 *   without a score modifier (the one measured), 0 elsewhere),
 *   STOF_SM90_QSHIFT (0 or 32, T = 64 only: the format is query-shifted
 *   (kernels_format_qshift): tile-row r holds queries [64 r - 32, 64 r + 32), so the grid has
 *   ceil((Sq + 32) / 64) rows; the rows before 0 and from Sq on are neither loaded nor
 *   written. A window of 32 each side then takes two key tiles a row instead of three (half,
 *   full, half); default 0),
 *   STOF_SM90_SPLIT (heavy tile-rows split across CTAs, a log-sum-exp combine after; default
 *   0: none of this code). Both non-zero values add one argument after M, before the TMA maps:
 *       ..., mod_t M, const split_t S [, tmK, tmV]
 *   (split_t below; the host's kernels_attn_split table, kernels/attention_split.c).
 *   1: the main launch as above, but a CTA whose tile-row is split (S.row_nchunk[inst * nrow
 *   + r] > 0) returns at once: its chunks run in the other module.
 *   2: the chunk launch, grid (S.nchunk_max, as above): CTA x of (b, h) runs chunk
 *   S.chunk_ptr[inst] + x of its instance (none past S.chunk_ptr[inst + 1]): the same tile
 *   loop over the chunk's entries [e_begin, e_end) of its row instead of the whole row, and
 *   instead of O it writes the unnormalised f32 accumulator, the row max (log2 units:
 *   max score * the kernel's scale to log2) and the row sum into workspace slot
 *   bh * S.nchunk_max + x (kSplitFloats floats: O [T][D], then m [T], then l [T]). The same
 *   module holds stof_attn_split_combine_sm90 (end of this file), which merges a split row's
 *   chunks into O after both launches.
 */
#include "attention_common.cuh"
#if STOF_TILE_M == 32
#error "stof attention: the Hopper kernel takes STOF_TILE_M 64 or 128 (wgmma's M is 64 rows a warpgroup)"
#endif

/* Defaults = the fastest measured on an H200 (bench/NOTES-attention.md): T = 128, ping-pong
 * with 3 stages (dense, causal, document; D = 64 and 128); T = 64, 2 stages, no overlap
 * (sliding, longformer, bigbird). */
#ifndef STOF_SM90_PINGPONG
#if STOF_TILE_M == 128
#define STOF_SM90_PINGPONG 1
#else
#define STOF_SM90_PINGPONG 0
#endif
#endif
#ifndef STOF_STAGES
#if STOF_SM90_PINGPONG
#define STOF_STAGES 3
#else
#define STOF_STAGES 2
#endif
#endif
#ifndef STOF_MIN_BLOCKS
#define STOF_MIN_BLOCKS 1
#endif
#ifndef STOF_SM90_QREG
#define STOF_SM90_QREG 1
#endif
#ifndef STOF_SM90_OVERLAP
#define STOF_SM90_OVERLAP 0
#endif
#ifndef STOF_SM90_PV_SPLIT
#define STOF_SM90_PV_SPLIT 0
#endif
#ifndef STOF_SM90_TMA
#define STOF_SM90_TMA 0
#endif
#ifndef STOF_SM90_HALFSKIP
#define STOF_SM90_HALFSKIP 0
#endif
#ifndef STOF_SM90_ROWMASK
#define STOF_SM90_ROWMASK 0
#endif
#ifndef STOF_SM90_SPLIT
#define STOF_SM90_SPLIT 0
#endif
#ifndef STOF_SM90_NOPARTIAL
#define STOF_SM90_NOPARTIAL 0
#endif
#ifndef STOF_SM90_ORDER
#define STOF_SM90_ORDER 0
#endif
#ifndef STOF_SM90_KEY64
#define STOF_SM90_KEY64 0
#endif
#ifndef STOF_SM90_QSHIFT
#define STOF_SM90_QSHIFT 0
#endif
#if STOF_SM90_QSHIFT != 0 && !(STOF_SM90_QSHIFT == 32 && STOF_TILE_M == 64)
#error "stof attention: STOF_SM90_QSHIFT is 0, or 32 at STOF_TILE_M=64"
#endif
#ifndef STOF_SM90_PEEL
#define STOF_SM90_PEEL (STOF_SM90_PINGPONG && STOF_SM90_TMA && !STOF_HAS_MOD)
#endif
#if STOF_SM90_PEEL && !(STOF_SM90_PINGPONG && STOF_SM90_TMA)
#error "stof attention: STOF_SM90_PEEL is the TMA ping-pong's first tile on its own (STOF_SM90_PINGPONG and STOF_SM90_TMA)"
#endif
#if STOF_SM90_ORDER && STOF_SM90_SPLIT
#error "stof attention: STOF_SM90_ORDER and STOF_SM90_SPLIT are exclusive (a split plan keeps the default order)"
#endif
#if STOF_SM90_SPLIT < 0 || STOF_SM90_SPLIT > 2
#error "stof attention: STOF_SM90_SPLIT must be 0 (no split), 1 (the main launch) or 2 (the chunk launch and combine)"
#endif
#if STOF_SM90_HALFSKIP && (STOF_TILE_M != 64 || STOF_SM90_OVERLAP)
#error "stof attention: STOF_SM90_HALFSKIP needs STOF_TILE_M=64 (one warpgroup over the tile's 64 rows) and no STOF_SM90_OVERLAP"
#endif
#if STOF_STAGES < 2 || STOF_STAGES > 4
#error "stof attention: STOF_STAGES must be 2, 3 or 4"
#endif

#if STOF_BF16
#define STOF_WG_AB ".bf16.bf16"
#else
#define STOF_WG_AB ".f16.f16"
#endif

namespace stof_attn {
namespace sm90 {

constexpr int kWG = kT / 64;            /* consumer warpgroups = 64-row slices */
constexpr int kThreads = 128 * kWG;
constexpr int kStages = STOF_STAGES;
constexpr int kTileBytes = kT * kD * 2; /* one Q, K or V tile */
constexpr int kBlkBytes = kT * 128;     /* one 64-column block of a tile */
constexpr int kBmpBytes = kBmpWords * 8;
constexpr int kNS = kT / 2;             /* S accumulators per thread (64 x T per warpgroup) */
static_assert(kNS * 2 == kT, "S accumulators"); /* (unreferenced with STOF_SM90_KEY64) */
constexpr int kNO = kD / 2;             /* O accumulators per thread (64 x D per warpgroup) */
constexpr bool kOverlap = STOF_SM90_OVERLAP != 0;
/* Prefetch distance (tiles in flight ahead of the current one); overlapped, the previous
 * tile's V is still read while tile i is computed, so one stage less. */
constexpr bool kPingpong = STOF_SM90_PINGPONG != 0;
constexpr int kDist = (kPingpong || kOverlap) ? kStages - 2 : kStages - 1;
static_assert(!kPingpong || (kWG == 2 && !kOverlap), "stof attention (sm90): ping-pong needs T = 128 (two warpgroups), no STOF_SM90_OVERLAP");
/* A partial tile's dead 32-key half skipped: one warpgroup over the tile's 64 rows. */
constexpr bool kHalfskip = STOF_SM90_HALFSKIP != 0;
static_assert(!kHalfskip || (kT == 64 && kWG == 1 && !kOverlap), "stof attention (sm90): STOF_SM90_HALFSKIP needs T = 64 and the plain schedule");
constexpr bool kRowmask = STOF_SM90_ROWMASK != 0; /* a partial tile's mask bits per lane (rm_apply) */
constexpr int kQBytes = STOF_SM90_QREG ? 0 : kTileBytes; /* a Q tile of its own (Q not in registers) */
/* TMA: the producer (a warpgroup at T = 128, so that setmaxnreg can move registers; one warp
 * at T = 64) and the mbarriers (full[stages], empty[stages], qfree, and with ping-pong its
 * two turn barriers). */
constexpr bool kTma = STOF_SM90_TMA != 0;
/* STOF_SM90_KEY64: a 128-key tile computed as two steps of 64 keys (S m64n64), so that two
 * warpgroups share each K/V tile at the registers of the tile-64 kernel: 2 CTAs of 288
 * threads an SM, the producer one warp (no setmaxnreg). */
constexpr bool kKey64 = STOF_SM90_KEY64 != 0;
static_assert(!kKey64 || (kT == 128 && !kPingpong && !kOverlap && !kRowmask && !STOF_SM90_QREG), "stof attention (sm90): STOF_SM90_KEY64 needs T = 128, Q in shared memory and the plain schedule without STOF_SM90_ROWMASK");
[[maybe_unused]] constexpr unsigned kHalfBytes = 64 * 128; /* STOF_SM90_KEY64: the second 64 key rows of a K or V block */
static_assert(STOF_SM90_KEY64 == 0 || STOF_SM90_KEY64 == 1, "stof attention (sm90): STOF_SM90_KEY64 is 0 or 1");
constexpr int kProdThreads = !kTma ? 0 : kWG == 2 && !kKey64 ? 128 : 32;
constexpr int kBlockThreads = kThreads + kProdThreads;
constexpr int kProdRegs = kProdThreads == 128 ? 24 : 0;   /* setmaxnreg.dec of the producer */
constexpr int kConsRegs = kProdThreads != 128 ? 0 : 240; /* setmaxnreg.inc of the consumers */
/* setmaxnreg moves registers within the CTA's allocation only (PTX ISA, setmaxnreg): the split
 * must fit what the launch allocates (a thread's share of 64 K over the CTAs of
 * __launch_bounds__, in steps of 8), or .inc waits for ever */
static_assert(kProdRegs * 128 + kConsRegs * kThreads <=
                  ((65536 / (kBlockThreads * STOF_MIN_BLOCKS)) & ~7) * kBlockThreads,
              "stof attention (sm90): register split over the CTA's allocation");
constexpr int kBarBytes = kTma || kPingpong ? 128 : 0; /* mbarriers */
constexpr int kSmemBytes = 1024 + kQBytes + 2 * kStages * kTileBytes + kStages * kBmpBytes + kBarBytes;
/* With TMA: stage s's tile's bmp_off entry (>= 0: partial) in the mbarrier area's spare
 * bytes, 4 a stage from byte 112 (after STOF_SM90_ROWMASK's votes at 96), written by the
 * producer with the fill and read by the consumers after their wait on the stage's full
 * barrier. Each consumer thread used to load it from global memory a tile ahead: session 16
 * measured 0.97-0.98x the time at D 64, 0.97-0.99x at D 128 without that, outputs
 * bit-identical (bench/NOTES-attention.md). */
constexpr int kOffFlags = 112;
constexpr bool kNoPartial = STOF_SM90_NOPARTIAL != 0;
/* STOF_SM90_QSHIFT: tile-row r's first query is r T - kQShift; the rows of a length-Sq grid */
constexpr int kQShift = STOF_SM90_QSHIFT;
__host__ __device__ constexpr int tile_rows(int Sq) { return (Sq + kQShift + kT - 1) / kT; }
static_assert(!kTma || (kOffFlags >= 96 + 4 * kStages && kOffFlags + 4 * kStages <= kBarBytes), "partial flags");
/* the mbarriers (full, empty, qfree, with TMA; ping-pong's per-tile or two turn barriers)
 * below byte 96 of the area, where STOF_SM90_ROWMASK's votes start */
static_assert(8 * (kTma ? 2 * kStages + 1 : 0) + (kPingpong ? (kTma ? 16 : 8) : 0) <= 96, "mbarriers below the flags");
static_assert(kDist >= 1, "stof attention (sm90): STOF_SM90_OVERLAP needs STOF_STAGES >= 3, STOF_SM90_PINGPONG >= 3");
static_assert(kSmemBytes <= 227 * 1024, "stof attention (sm90): shared memory over 227 KB; use fewer stages");

#if STOF_SM90_SPLIT
/* The split table (the host's attn_split_args, by value): per instance m of nmask and tile
 * row r of nrow, row_nchunk[m * nrow + r] chunks (0: not split); instance m's chunks are
 * chunk_ptr[m] .. chunk_ptr[m + 1] - 1, chunk c = {row, first entry, end entry} at
 * chunk[3 c]; its split rows srow_ptr[m] .. srow_ptr[m + 1] - 1, split row s = {row, its
 * first chunk counted from chunk_ptr[m], chunks} at srow[3 s]; ws the workspace (slot
 * bh * nchunk_max + chunk - chunk_ptr[m] of kSplitFloats floats). */
struct split_t {
  const int *row_nchunk, *chunk_ptr, *chunk, *srow_ptr, *srow;
  float *ws;
  int nchunk_max;
};
constexpr int kSplitFloats = kT * (kD + 2); /* one chunk's O [T][D], m [T], l [T] */
#endif

/* Byte offset of 16-byte chunk ch (0 .. D/8-1) of row r in a tile. */
__device__ __forceinline__ unsigned toff(int r, int ch)
{
  return (unsigned)((ch >> 3) * kBlkBytes + r * 128 + (((ch & 7) ^ (r & 7)) << 4));
}

/* wgmma shared-memory matrix descriptor, 128-byte swizzle. */
__device__ __forceinline__ unsigned long long mdesc(unsigned addr, unsigned lbo, unsigned sbo)
{
  return (unsigned long long)((addr & 0x3FFFFu) >> 4) | ((unsigned long long)(lbo >> 4) << 16) |
         ((unsigned long long)(sbo >> 4) << 32) | (1ull << 62);
}

/* The descriptor of addr + off (off a multiple of 16): addr's descriptor (one for every
 * offset from the same addr) plus off >> 4 in the low word, whose bits 0-13 are the start
 * address addr >> 4. Every shared address here is 16-byte aligned and below 2^18 (at most
 * 227 KB of shared memory), so the sum stays inside that field: mdesc(addr + off) bit for bit,
 * with one 32-bit add before a wgmma instead of the add, mask, shift and or in a dependent
 * chain that mdesc(addr + off) took (session 16: SASS profile of the D 64 dense kernel, then
 * 0.94-0.99x the time, outputs bit-identical; bench/NOTES-attention.md). */
__device__ __forceinline__ unsigned long long mdesc_at(unsigned addr, unsigned off, unsigned lbo, unsigned sbo)
{
  const unsigned long long d = mdesc(addr, lbo, sbo);
  return (d & 0xFFFFFFFF00000000ull) | (unsigned)((unsigned)d + (off >> 4));
}

__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void wg_wait()
{
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/* Keeps the compiler from moving accesses of accumulator registers across the async MMA. */
template <int N> __device__ __forceinline__ void reg_fence(float (&d)[N])
{
#pragma unroll
  for (int k = 0; k < N; ++k) asm volatile("" : "+f"(d[k])::"memory");
}
/* Generic-proxy writes (cp.async, st.shared) made visible to the async proxy (wgmma). */
__device__ __forceinline__ void fence_async_smem() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

/* mbarrier wrappers (PTX ISA 8.0, sm_90; the TMA ring and ping-pong's barriers). Waits spin on try_wait (acquire); arrivals
 * release; a phase completes after `count` arrivals and the expected transaction bytes. */
__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count)
{
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity)
{
  asm volatile("{\n.reg .pred p;\nSTOF_MBAR_WAIT:\n"
               "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
               "@!p bra STOF_MBAR_WAIT;\n}\n" ::"r"(bar), "r"(parity) : "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned bar)
{
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
#if STOF_SM90_TMA
/* TMA wrappers (PTX ISA 8.0, sm_90); the mbarrier ones above. */
/* A CUtensorMap (NVRTC cannot include cuda.h): 128 opaque bytes, 64-byte aligned. */
struct alignas(64) tmap_t {
  unsigned long long opaque[16];
};

__device__ __forceinline__ void mbar_expect_tx(unsigned bar, unsigned bytes)
{
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
/* This thread's arrival on bar, made when its earlier cp.async copies have landed. */
__device__ __forceinline__ void cp_async_mbar_arrive(unsigned bar)
{
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void tma_prefetch_map(const tmap_t *map)
{
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<unsigned long long>(map)) : "memory");
}
/* One box of a 4-D tensor map at coordinates (c0 innermost, .., c3) to dst; completes
 * (box bytes, zero-filled out of bounds included) on bar. */
__device__ __forceinline__ void tma_load_4d(unsigned dst, const tmap_t *map, int c0, int c1, int c2, int c3,
                                            unsigned bar)
{
  asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
               "[%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(dst),
               "l"(reinterpret_cast<unsigned long long>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
               : "memory");
}
/* Barrier of the consumer warpgroups only (named barrier 1; the producer never joins it). */
__device__ __forceinline__ void consumer_sync() { asm volatile("bar.sync 1, %0;\n" ::"n"(kThreads) : "memory"); }
template <int N> __device__ __forceinline__ void setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N)); }
template <int N> __device__ __forceinline__ void setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N)); }
#endif

/* Generated wrappers: S (+)= A B^T with A, B from shared memory (both K-major); O += P V with
 * P (A) from registers and V (B) MN-major. `acc` = 0 overwrites the accumulators. */
__device__ __forceinline__ void wg_ss_n64(float (&d)[32], unsigned long long da, unsigned long long db, int acc)
{
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k16.f32" STOF_WG_AB " "
               "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
               : "l"(da), "l"(db), "r"(acc));
}

__device__ __forceinline__ void wg_rs_n64(float (&d)[32], const unsigned (&a)[4], unsigned long long db)
{
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k16.f32" STOF_WG_AB " "
               "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, {%32,%33,%34,%35}, %36, p, 1, 1, 1;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}

__device__ __forceinline__ void wg_ss_n128(float (&d)[64], unsigned long long da, unsigned long long db, int acc)
{
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k16.f32" STOF_WG_AB " "
               "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
               : "l"(da), "l"(db), "r"(acc));
}

__device__ __forceinline__ void wg_rs_n128(float (&d)[64], const unsigned (&a)[4], unsigned long long db)
{
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k16.f32" STOF_WG_AB " "
               "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, {%64,%65,%66,%67}, %68, p, 1, 1, 1;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}

__device__ __forceinline__ void wg_rsk_n64(float (&d)[32], const unsigned (&a)[4], unsigned long long db, int acc)
{
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k16.f32" STOF_WG_AB " "
               "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, {%32,%33,%34,%35}, %36, p, 1, 1, 0;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc));
}

__device__ __forceinline__ void wg_rsk_n128(float (&d)[64], const unsigned (&a)[4], unsigned long long db, int acc)
{
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k16.f32" STOF_WG_AB " "
               "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, {%64,%65,%66,%67}, %68, p, 1, 1, 0;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc));
}

#if STOF_SM90_HALFSKIP
/* S over 32 keys (STOF_SM90_HALFSKIP): m64n32k16, 16 accumulators per thread, laid out as
 * the first 16 of m64n64's. */
__device__ __forceinline__ void wg_ss_n32(float (&d)[16], unsigned long long da, unsigned long long db, int acc)
{
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n32k16.f32" STOF_WG_AB " "
               "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, %16, %17, p, 1, 1, 0, 0;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
               : "l"(da), "l"(db), "r"(acc));
}

__device__ __forceinline__ void wg_rsk_n32(float (&d)[16], const unsigned (&a)[4], unsigned long long db, int acc)
{
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n32k16.f32" STOF_WG_AB " "
               "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, {%16,%17,%18,%19}, %20, p, 1, 1, 0;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc));
}
#endif

template <int N> __device__ __forceinline__ void wg_ss(float (&d)[N / 2], unsigned long long da, unsigned long long db, int acc);
template <> __device__ __forceinline__ void wg_ss<64>(float (&d)[32], unsigned long long da, unsigned long long db, int acc) { wg_ss_n64(d, da, db, acc); }
template <> __device__ __forceinline__ void wg_ss<128>(float (&d)[64], unsigned long long da, unsigned long long db, int acc) { wg_ss_n128(d, da, db, acc); }
template <int N> __device__ __forceinline__ void wg_rsk(float (&d)[N / 2], const unsigned (&a)[4], unsigned long long db, int acc);
template <> __device__ __forceinline__ void wg_rsk<64>(float (&d)[32], const unsigned (&a)[4], unsigned long long db, int acc) { wg_rsk_n64(d, a, db, acc); }
template <> __device__ __forceinline__ void wg_rsk<128>(float (&d)[64], const unsigned (&a)[4], unsigned long long db, int acc) { wg_rsk_n128(d, a, db, acc); }
template <int N> __device__ __forceinline__ void wg_rs(float (&d)[N / 2], const unsigned (&a)[4], unsigned long long db);
template <> __device__ __forceinline__ void wg_rs<64>(float (&d)[32], const unsigned (&a)[4], unsigned long long db) { wg_rs_n64(d, a, db); }
template <> __device__ __forceinline__ void wg_rs<128>(float (&d)[64], const unsigned (&a)[4], unsigned long long db) { wg_rs_n128(d, a, db); }

/* Copies of one K or V tile (tile column `col`, rows rs elements apart) to `dst`; rows past Sk
 * are zero-filled from the slice's first row (their keys are masked by the partial tile's
 * bitmap). One 64-bit row address per tile, advanced by the row step: offsets it * step kept
 * apart would be loop-invariant registers (they were: 24 more at D = 64, tile 64). */
constexpr int kCprT = kD / 8;               /* 16-byte chunks per row */
constexpr int kRowStep = kThreads / kCprT;  /* rows per pass */
__device__ __forceinline__ void load_tile(unsigned dst, const elem_t *G, int rs, int Sk, int col, int tid)
{
  const int k0 = col * kT;
  const int nrows = min(kT, Sk - k0);
  const int r0 = tid / kCprT, ch = tid % kCprT;
  const unsigned d0 = dst + toff(r0, ch);
  if (rs == kD) { /* dense rows (uniform branch): immediate offsets from the tile's base */
    const elem_t *Gt = G + (long long)k0 * kD;
    const unsigned goff = (unsigned)r0 * kD + ch * 8;
#pragma unroll
    for (int it = 0; it < kT / kRowStep; ++it) {
      const bool ok = r0 + it * kRowStep < nrows;
      cp_async16(d0 + it * kRowStep * 128, Gt + (ok ? goff + it * kRowStep * kD : 0u), ok ? 16 : 0);
    }
    return;
  }
  const elem_t *Gr = G + (long long)(k0 + r0) * rs + ch * 8; /* advanced by a row step */
#pragma unroll
  for (int it = 0; it < kT / kRowStep; ++it) {
    const bool ok = r0 + it * kRowStep < nrows;
    cp_async16(d0 + it * kRowStep * 128, ok ? Gr : G, ok ? 16 : 0);
    Gr += kRowStep * rs;
  }
}
static_assert(kRowStep % 8 == 0, "row step must keep the swizzle phase");

/* O += P V over the first N k-steps of 16 keys from vs: V MN-major; 16 keys (two 8-row groups,
 * 1024 B apart) per k-step; the two 64-column blocks of D = 128 are kBlkBytes apart (LBO).
 * Caller fences and commits. pv: the whole tile; STOF_SM90_HALFSKIP's 32-key half: N = 2, vs
 * at the half's first V row. */
template <int N>
__device__ __forceinline__ void pv_steps(float (&o)[kNO], const unsigned (&p)[kT / 16][4], unsigned vs)
{
#pragma unroll
  for (int kk = 0; kk < N; ++kk) {
#if STOF_SM90_PV_SPLIT && STOF_HEAD_DIM == 128
    float(&o0)[32] = *reinterpret_cast<float(*)[32]>(&o[0]);
    float(&o1)[32] = *reinterpret_cast<float(*)[32]>(&o[32]);
    wg_rs<64>(o0, p[kk], mdesc_at(vs, kk * 2048, 16, 1024));
    wg_rs<64>(o1, p[kk], mdesc_at(vs, kBlkBytes + kk * 2048, 16, 1024));
#else
    wg_rs<kD>(o, p[kk], mdesc_at(vs, kk * 2048, kBlkBytes, 1024));
#endif
  }
}
__device__ __forceinline__ void pv(float (&o)[kNO], const unsigned (&p)[kT / 16][4], unsigned vs)
{
  pv_steps<kT / 16>(o, p, vs);
}

#if STOF_SM90_ROWMASK
/* STOF_SM90_ROWMASK: a partial tile's mask bits of one lane's scores in kT / 64 registers.
 * Lane L = 4 g + t4 of warp w holds the scores of rows 16 w + 8 hh + g and keys
 * 8 nb + 2 t4 + e (s[4 nb + 2 hh + e]); their bit is bit 8 g + 2 t4 + e = 2 L + e of the
 * 64-bit word nb * kT8 + 2 w + hh (kernels/mask_format.c: bit 8 row + key of an 8 x 8
 * block). So per 64 keys (key blocks 8 c .. 8 c + 7) the 16 words j = nb % 8 + 8 hh of a
 * warp's rows are a 16 x 32 matrix of 2-bit pairs, and lane L wants its column L: the
 * pairs L of the 16 words, which rm_transpose gathers from one 32-bit half per lane.
 * Afterwards bit 16 hh + 2 (nb % 8) + e of m[nb / 8] is score s[4 nb + 2 hh + e]'s. */

/* Lane 16 hf + j passes half hf of word j (its pairs 16 hf + q at bits 2 q, 2 q + 1) and
 * gets the pairs 16 hf + (lane & 15) of words 0..15 (word j at bits 2 j, 2 j + 1). Stage k
 * (k = 0..3) swaps lane bit k with bit k of q: a lane keeps the pairs whose q has bit k
 * equal to its own lane bit k and takes the others from lane ^ 2^k, moved by 2^(k+1) bits
 * (stages 0 and 1 with a funnel shift and a LOP3, stages 2 and 3, whole bytes, with one
 * PRMT); lane bit 4 (hf) stays. 4 shuffles and 6 ALU instructions once the lane's
 * selectors are in registers. Warp-uniform calls only (shuffles over the full warp). */
__device__ __forceinline__ unsigned rm_transpose(unsigned x, int lane)
{
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    const unsigned hi = k == 0 ? 0xccccccccu : 0xf0f0f0f0u; /* pairs whose q has bit k */
    const int sh = 2 << k;
    const bool up = (lane >> k) & 1;
    const unsigned y = __shfl_xor_sync(0xffffffffu, x, 1 << k);
    /* up: the partner's pairs q | 2^k moved down to q; else its pairs q moved up to q | 2^k */
    const unsigned r = __funnelshift_l(y, y, up ? 32 - sh : sh);
    /* up ? hi : ~hi, as a rotation of hi: one register, so that the merge is one LOP3 (as a
     * select between constants ptxas split it into three) */
    const unsigned keep = __funnelshift_l(hi, hi, up ? 0 : sh);
    x = (x & keep) | (r & ~keep);
  }
  /* bytes (k = 2), then half-words (k = 3): byte i of __byte_perm is byte s_i of {y, x} */
  unsigned y = __shfl_xor_sync(0xffffffffu, x, 4);
  x = __byte_perm(x, y, (lane & 4) ? 0x3715 : 0x6240);
  y = __shfl_xor_sync(0xffffffffu, x, 8);
  x = __byte_perm(x, y, (lane & 8) ? 0x3276 : 0x5410);
  return x;
}

/* The bitmap's half that lane `lane` passes to rm_transpose for group c of warp wq's rows:
 * its 32-bit index in the tile's bitmap. */
__device__ __forceinline__ int rm_src(int c, int wq, int lane)
{
  return 2 * ((8 * c + (lane & 7)) * kT8 + 2 * wq + ((lane >> 3) & 1)) + (lane >> 4);
}

/* Where the bits come from: with TMA at T = 64 the producer warp, otherwise idle between
 * its copies, transposes a partial tile's bitmap for the four consumer warps and stores
 * the stage's words in the bitmap's place (word 32 w + lane for lane `lane` of warp w:
 * 128 words, the 512 bytes of the raw bitmap), so a consumer lane loads its word; with
 * cp.async (no producer) and at T = 128 (the producer warpgroup holds 24 registers) each
 * consumer warp transposes the raw bitmap itself. */
constexpr bool kRmProducer = kTma && kProdThreads == 32;
static_assert(!kRmProducer || (kT == 64 && kThreads == 128 && kBmpBytes == 4 * kThreads), "rowmask layout");
/* With STOF_SM90_HALFSKIP, the producer's vote per stage (bit 0: keys 0-31 live, bit 1:
 * keys 32-63) in the mbarrier area's spare bytes: 4 bytes a stage from byte 96 (the
 * barriers take 8 * (2 * stages + 1) <= 72 bytes at T = 64). */
constexpr int kRmFlags = 96;
static_assert(!kRmProducer || (kRmFlags >= 8 * (2 * kStages + 1) && kRmFlags + 4 * kStages <= kBarBytes), "rowmask flags");

/* This lane's bits of the stage's partial tile (bmp: the stage's bitmap area). */
__device__ __forceinline__ void rm_load(unsigned (&m)[kT / 64], const unsigned *bmp, int wrow, int lane)
{
  if constexpr (kRmProducer) {
    m[0] = bmp[(wrow >> 4) * 32 + lane];
  } else {
#pragma unroll
    for (int c = 0; c < kT / 64; ++c) m[c] = rm_transpose(bmp[rm_src(c, wrow >> 4, lane)], lane);
  }
}

/* Scores of masked keys (bit clear in rm_load's m) to -inf over key blocks 0 .. NB - 1:
 * one FSEL each, on predicates that ptxas moves from m with R2P. */
template <int NB, int N>
__device__ __forceinline__ void rm_apply(float (&s)[N], const unsigned (&m)[kT / 64])
{
#pragma unroll
  for (int hh = 0; hh < 2; ++hh)
#pragma unroll
    for (int nb = 0; nb < NB; ++nb) {
      const unsigned w = m[nb >> 3] >> (16 * hh + 2 * (nb & 7));
      if (!(w & 1u)) s[4 * nb + 2 * hh] = neg_inf();
      if (!(w & 2u)) s[4 * nb + 2 * hh + 1] = neg_inf();
    }
}
#endif

/* A partial tile's bitmap applied to this thread's scores of kNb key blocks of 8 (rows g
 * and g + 8 of its warp's 16 at wrow, bsh / bhi its place in the words): a masked score
 * becomes -inf. The plain schedule, the overlapped / ping-pong ones and hs_tile. */
template <int kNb, int kN>
__device__ __forceinline__ void mask_scores(float (&s)[kN], const unsigned *bmp, int wrow, int bhi, int bsh)
{
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const int rb = (wrow + hh * 8) >> 3;
#pragma unroll
    for (int nb = 0; nb < kNb; ++nb) {
      const unsigned w = bmp[2 * (nb * kT8 + rb) + bhi] >> bsh;
      if (!(w & 1u)) s[4 * nb + 2 * hh] = neg_inf();
      if (!(w & 2u)) s[4 * nb + 2 * hh + 1] = neg_inf();
    }
  }
}

/* Online softmax of this thread's scores of kNb key blocks (rows g (hh = 0) and g + 8
 * (hh = 1) of its warp's 16; a quad shares a row): s becomes exp, mrow / lrow move on, alpha
 * is what O must be scaled by. While no valid key has been seen the max is -inf: 0 stands
 * in for it. */
template <int kNb, int kN>
__device__ __forceinline__ void online_softmax(float (&s)[kN], float (&mrow)[2], float (&lrow)[2], float (&alpha)[2],
                                               float sl2)
{
#if STOF_LAZY_RESCALE
  /* both rows' maxima first; the warp moves them only if one grew too far (alpha is then 1
   * exactly for all, and rescale_pack skips O) */
  float mxr[2];
  bool grow = false;
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    float mx = mrow[hh];
#pragma unroll
    for (int nb = 0; nb < kNb; ++nb) mx = fmaxf(mx, fmaxf(s[4 * nb + 2 * hh], s[4 * nb + 2 * hh + 1]));
    mxr[hh] = lazy_row_max(mx, mrow[hh], sl2, grow);
  }
  const bool upd = __any_sync(0xffffffffu, grow);
#endif
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
#if STOF_LAZY_RESCALE
    const float mx = upd ? mxr[hh] : mrow[hh];
#else
    float mx = mrow[hh];
#pragma unroll
    for (int nb = 0; nb < kNb; ++nb) mx = fmaxf(mx, fmaxf(s[4 * nb + 2 * hh], s[4 * nb + 2 * hh + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
#endif
    const float ms = (mx == neg_inf() ? 0.f : mx) * sl2;
#if STOF_LAZY_RESCALE
    alpha[hh] = upd ? ex2(mrow[hh] * sl2 - ms) : 1.f;
#else
    alpha[hh] = ex2(mrow[hh] * sl2 - ms);
#endif
    mrow[hh] = mx;
    float sum = 0.f;
#pragma unroll
    for (int nb = 0; nb < kNb; ++nb) {
      const float p0 = ex2(fmaf(s[4 * nb + 2 * hh], sl2, -ms));
      const float p1 = ex2(fmaf(s[4 * nb + 2 * hh + 1], sl2, -ms));
      s[4 * nb + 2 * hh] = p0;
      s[4 * nb + 2 * hh + 1] = p1;
      sum += p0 + p1;
    }
    lrow[hh] = lrow[hh] * alpha[hh] + sum;
  }
}

/* O *= alpha (rows g and g + 8 of the thread's warp; O must not be in flight), then the
 * exponentials of kSteps k-steps of 16 keys packed as P's A fragments (per warp: the
 * m16n8k16 A layout). */
template <int kSteps, int kN>
__device__ __forceinline__ void rescale_pack(float (&o)[kNO], unsigned (&p)[kT / 16][4], const float (&s)[kN],
                                             const float (&alpha)[2])
{
#if STOF_LAZY_RESCALE
  if (__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f))
#endif
#pragma unroll
  for (int db = 0; db < kD / 8; ++db) {
    o[4 * db + 0] *= alpha[0];
    o[4 * db + 1] *= alpha[0];
    o[4 * db + 2] *= alpha[1];
    o[4 * db + 3] *= alpha[1];
  }
#pragma unroll
  for (int kk = 0; kk < kSteps; ++kk) {
    p[kk][0] = pack2(s[8 * kk + 0], s[8 * kk + 1]);
    p[kk][1] = pack2(s[8 * kk + 2], s[8 * kk + 3]);
    p[kk][2] = pack2(s[8 * kk + 4], s[8 * kk + 5]);
    p[kk][3] = pack2(s[8 * kk + 6], s[8 * kk + 7]);
  }
}

#if STOF_SM90_HALFSKIP
/* One tile of the plain schedule with STOF_SM90_HALFSKIP: S = Q K^T, the mask (partial), the
 * online softmax, O += P V, each wgmma group issued and waited for here (none is in flight
 * across the caller's branch between the two forms or the loop's back edge: C7515). kHalf:
 * the 32 keys whose K rows start at ks, V rows at vs and bitmap words (key blocks of 8) at
 * bmp (for keys 32-63: K and V 4096 bytes on, whole 1024-byte swizzle atoms, so the row
 * phase r & 7 is kept; words 32 on; with STOF_SM90_ROWMASK bmp is the stage's area and kh
 * the half), S with m64n32 (its 16 accumulators are laid out as
 * m64n64's first 16), P V over 2 k-steps of 16 keys; else all 64 keys, as the plain loop.
 * Key block nb of the computed ones is s[4 nb .. 4 nb + 3], P V's k-step kk is
 * p[kk] = s[8 kk .. 8 kk + 7]. q: Q's fragments (STOF_SM90_QREG) or its warpgroup's slice in
 * shared memory. rel0: the modifier's offset j - i of the lane's first score (STOF_HAS_MOD). */
template <bool kHalf>
__device__ __forceinline__ void hs_tile(float (&o)[kNO], float (&mrow)[2], float (&lrow)[2], unsigned (&p)[kT / 16][4],
#if STOF_SM90_QREG
                                        const unsigned (&q)[kD / 16][4],
#else
                                        unsigned q,
#endif
                                        unsigned ks, unsigned vs, const unsigned *bmp, bool partial, int wrow,
                                        int bsh, int bhi, float sl2, const mod_cta &mc, int rel0, float scale,
                                        int lane, int kh)
{
  constexpr int kNb = kHalf ? kT / 16 : kT / 8; /* key blocks of 8 computed */
  float s[kHalf ? kNS / 2 : kNS];

  wg_fence();
#pragma unroll
  for (int kk = 0; kk < kD / 16; ++kk) {
    const unsigned koff = (kk >> 2) * kBlkBytes + (kk & 3) * 32;
    const unsigned long long kd = mdesc_at(ks, koff, 16, 1024);
    if constexpr (!kHalf) {
#if STOF_SM90_QREG
      wg_rsk<kT>(s, q[kk], kd, kk > 0);
#else
      wg_ss<kT>(s, mdesc_at(q, koff, 16, 1024), kd, kk > 0);
#endif
    } else {
#if STOF_SM90_QREG
      wg_rsk_n32(s, q[kk], kd, kk > 0);
#else
      wg_ss_n32(s, mdesc_at(q, koff, 16, 1024), kd, kk > 0);
#endif
    }
  }
  wg_commit();
#if STOF_SM90_ROWMASK
  /* the mask's bits gathered while S runs; the half's key blocks 4 kh .. 4 kh + 3 moved to
   * 0 .. 3 (bits 16 hh + 2 nb + e, nb < 4) */
  unsigned rm[kT / 64];
  if (partial) {
    rm_load(rm, bmp, wrow, lane);
    if (kHalf) rm[0] >>= 8 * kh;
  }
#endif
  wg_wait<0>();
  reg_fence(s);
#if STOF_HAS_MOD
#pragma unroll
  for (int hh = 0; hh < 2; ++hh)
#pragma unroll
    for (int nb = 0; nb < kNb; ++nb) {
      const int rel = rel0 + nb * 8 - hh * 8;
      s[4 * nb + 2 * hh] = mod_score(s[4 * nb + 2 * hh] * scale, rel, mc);
      s[4 * nb + 2 * hh + 1] = mod_score(s[4 * nb + 2 * hh + 1] * scale, rel + 1, mc);
    }
#endif

  if (partial) {
#if STOF_SM90_ROWMASK
    rm_apply<kNb>(s, rm);
#else
    mask_scores<kNb>(s, bmp, wrow, bhi, bsh);
#endif
  }

  /* Online softmax over the computed keys (a skipped one would add exp(-inf) = 0). */
  float alpha[2];
  online_softmax<kNb>(s, mrow, lrow, alpha, sl2);
  rescale_pack<kNb / 2>(o, p, s, alpha);

  reg_fence(o);
  wg_fence();
  pv_steps<kNb / 2>(o, p, vs);
  wg_commit();
  wg_wait<0>();
  reg_fence(o);
}
#endif

} /* namespace sm90 */
} /* namespace stof_attn */

extern "C" __global__ void __launch_bounds__(stof_attn::sm90::kBlockThreads, STOF_MIN_BLOCKS)
stof_attn_block_fwd_sm90(const stof_attn::elem_t *__restrict__ Q, const stof_attn::elem_t *__restrict__ K,
                         const stof_attn::elem_t *__restrict__ V, stof_attn::elem_t *__restrict__ O,
                         const int *__restrict__ row_ptr, const int *__restrict__ col_idx,
                         const int *__restrict__ bmp_off, const unsigned long long *__restrict__ bitmap,
                         int B, int H, int Hkv, int Sq, int Sk, int mask_b, int mask_h, float scale,
                         const stof_attn::layout_t L, const stof_attn::mod_t M
#if STOF_SM90_SPLIT
                         , const stof_attn::sm90::split_t S
#endif
#if STOF_SM90_ORDER
                         , const stof_attn::order_t ORD
#endif
#if STOF_SM90_TMA
                         , const __grid_constant__ stof_attn::sm90::tmap_t tmK,
                         const __grid_constant__ stof_attn::sm90::tmap_t tmV
#endif
                         )
{
  using namespace stof_attn;
  using namespace stof_attn::sm90;
  extern __shared__ __align__(1024) unsigned char smem_raw[];

  const unsigned sraw = smem_addr(smem_raw);
  const unsigned sbase = (sraw + 1023u) & ~1023u; /* swizzle atoms need 1024-byte alignment */
  unsigned char *smem = smem_raw + (sbase - sraw);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t4 = lane & 3;
#if STOF_SM90_ORDER
  int ord_k;
  const int bh = order_cta<STOF_SM90_ORDER == 2>(B * H, tile_rows(Sq), ORD.nheavy, ORD.group, ord_k);
#else
  const int bh = blockIdx.y + gridDim.y * blockIdx.z; /* B * H may exceed 65535 (grid y) */
#endif
  if (bh >= B * H) return;                            /* the last z slice's spare CTAs */
  const int b = bh / H, h = bh - b * H;
  const int nrow = tile_rows(Sq);
#if STOF_SM90_SPLIT == 2
  /* this CTA's chunk: a run of consecutive entries of one tile-row */
  const int inst = (mask_b > 1 ? b : 0) * mask_h + (mask_h > 1 ? h : 0);
  const int ci = __ldg(S.chunk_ptr + inst) + (int)blockIdx.x;
  if (ci >= __ldg(S.chunk_ptr + inst + 1)) return; /* instances with fewer chunks */
  const int r = __ldg(S.chunk + 3 * ci);
  const int e0 = __ldg(S.chunk + 3 * ci + 1), n = __ldg(S.chunk + 3 * ci + 2) - e0;
  (void)row_ptr;
  (void)nrow;
#else
  const int inst = (mask_b > 1 ? b : 0) * mask_h + (mask_h > 1 ? h : 0);
#if STOF_SM90_ORDER
  const int r = __ldg(ORD.row + (long long)inst * nrow + ord_k);
#else
  const int r = nrow - 1 - (int)blockIdx.x;
#endif
#if STOF_SM90_SPLIT == 1
  if (__ldg(S.row_nchunk + (unsigned long long)inst * nrow + r) > 0) return; /* the chunk launch's */
#endif
  const int *rp = row_ptr + (unsigned long long)inst * (nrow + 1) + r;
  const int e0 = __ldg(rp), n = __ldg(rp + 1) - e0;
#endif
  const int hk = h / (H / Hkv);
  /* the tile's queries q0 + [qlo, qrows): qlo > 0 only for a shifted format's first row */
  const int q0 = r * kT - kQShift;
  const int qlo = kQShift && q0 < 0 ? -q0 : 0;
  const int qrows = min(kT, Sq - q0);
  const elem_t *Qg = Q + (long long)b * L.q[0] + (long long)h * L.q[1] + (long long)(q0 + qlo) * L.q[2];
  const int qs = (int)L.q[2];
#if !STOF_SM90_TMA
  const elem_t *Kg = K + (long long)b * L.k[0] + (long long)hk * L.k[1];
  const elem_t *Vg = V + (long long)b * L.v[0] + (long long)hk * L.v[1];
  const int ksr = (int)L.k[2], vsr = (int)L.v[2];
#endif
  /* scores to log2 units: the scale folded in, or (modifier) applied before it */
  const float sl2 = STOF_HAS_MOD ? 1.4426950408889634f : scale * 1.4426950408889634f;
  const unsigned kvbase = sbase + kQBytes;                        /* stage s: K at + 2s tiles, V after */
  const unsigned bmbase = kvbase + 2 * kStages * kTileBytes;      /* stage s bitmap */
  /* Q: its own tile, or (Q in registers) the K slot of the last stage, which no copy touches
   * before the loop's first prefetch, issued after every thread read Q. Also the epilogue's
   * staging buffer. */
  const unsigned qbase = kQBytes ? sbase : kvbase + (kStages - 1) * 2 * kTileBytes;

#if !STOF_SM90_TMA && STOF_SM90_PINGPONG
  const unsigned bar_pp = bmbase + kStages * kBmpBytes; /* ping-pong's per-tile barrier */
  if (tid == 0) {
    mbar_init(bar_pp, kThreads); /* every thread, once per tile */
    mbar_init_fence();
  }
  __syncthreads();
#endif
#if STOF_SM90_TMA
  const unsigned bar_full = bmbase + kStages * kBmpBytes; /* stage s: + 8 s */
  const unsigned bar_empty = bar_full + 8 * kStages;      /* stage s: + 8 s */
  const unsigned bar_qfree = bar_empty + 8 * kStages;
#if STOF_SM90_PINGPONG
  const unsigned bar_pp = bar_qfree + 8; /* ping-pong's turns to issue: two mbarriers */
#endif
  if (tid == 0) {
#pragma unroll
    for (int st = 0; st < kStages; ++st) {
      mbar_init(bar_full + 8 * st, 32);     /* every producer lane, once per fill */
      mbar_init(bar_empty + 8 * st, kWG * 128); /* every consumer thread, once per tile */
    }
    mbar_init(bar_qfree, kWG * 128);
#if STOF_SM90_PINGPONG
    mbar_init(bar_pp, 128);     /* warpgroup 1 issued its MMAs of a tile: warpgroup 0's turn */
    mbar_init(bar_pp + 8, 128); /* and the other way round */
#endif
    mbar_init_fence();
  }
  __syncthreads(); /* the last CTA-wide barrier: the producer and the consumers part here */

  if (warp >= kWG * 4) {
    /* Producer. Tile j goes to stage j % kStages, the stage's (j / kStages)-th fill; before
     * it, the consumers' release of tile j - kStages (empty phase j / kStages - 1). */
    if (kProdRegs) setmaxnreg_dec<kProdRegs>();
    if (warp != kWG * 4) return;
    if (lane == 0) {
      tma_prefetch_map(&tmK);
      tma_prefetch_map(&tmV);
    }
    int col = 0, off = -1;
    if (n > 0) {
      col = __ldg(col_idx + e0);
      off = __ldg(bmp_off + e0);
    }
#if STOF_SM90_ROWMASK
    /* kRmProducer: this lane's halves of the next partial tile's bitmap, one per consumer
     * warp (rm_src), loaded a tile ahead of their transposition */
    unsigned bw[4];
    auto rm_fetch = [&](int o) {
      const unsigned *src = reinterpret_cast<const unsigned *>(bitmap + (unsigned)o);
#pragma unroll
      for (int w = 0; w < 4; ++w) bw[w] = __ldg(src + rm_src(0, w, lane));
    };
    if (kRmProducer && off >= 0) rm_fetch(off);
#endif
    for (int j = 0; j < n; ++j) {
      const int st = j % kStages;
      const unsigned full = bar_full + 8 * st;
      if (j >= kStages) mbar_wait(bar_empty + 8 * st, (unsigned)(j / kStages - 1) & 1u);
      if (kQBytes == 0 && j == kStages - 1) mbar_wait(bar_qfree, 0); /* Q sits in this K slot */
      if (lane == 0) {
        const unsigned ks = kvbase + st * 2 * kTileBytes;
        mbar_expect_tx(full, 2 * kTileBytes);
#pragma unroll
        for (int c = 0; c < kD / 64; ++c) {
          tma_load_4d(ks + c * kBlkBytes, &tmK, c * 64, col * kT, hk, b, full);
          tma_load_4d(ks + kTileBytes + c * kBlkBytes, &tmV, c * 64, col * kT, hk, b, full);
        }
      }
#if STOF_SM90_ROWMASK
      if (kRmProducer) {
        if (off >= 0) { /* the consumers' words (rm_load) in the bitmap's place */
          unsigned *rw = reinterpret_cast<unsigned *>(smem + (bmbase - sbase) + st * kBmpBytes);
#pragma unroll
          for (int w = 0; w < 4; ++w) rw[32 * w + lane] = rm_transpose(bw[w], lane);
#if STOF_SM90_HALFSKIP
          /* the consumers' choice of half: bit 0, a bit among keys 0-31 (key blocks 0-3: the
           * lanes with lane & 7 < 4), bit 1, among keys 32-63 */
          const bool any = (bw[0] | bw[1] | bw[2] | bw[3]) != 0u;
          const unsigned lo = __ballot_sync(0xffffffffu, any && (lane & 7) < 4) != 0u;
          const unsigned hi = __ballot_sync(0xffffffffu, any && (lane & 7) >= 4) != 0u;
          if (lane == 0)
            *reinterpret_cast<unsigned *>(smem + (bar_full - sbase) + kRmFlags + 4 * st) = lo | hi << 1;
#endif
        }
        if (!kNoPartial && lane == 0) *reinterpret_cast<int *>(smem + (bar_full - sbase) + kOffFlags + 4 * st) = off;
        mbar_arrive(full); /* release: the stores above are seen after the consumers' wait */
      } else {
#endif
      if (off >= 0) { /* 8-byte copies: the format does not promise 16-byte aligned bitmaps */
        const unsigned bs = bmbase + st * kBmpBytes;
#pragma unroll
        for (int it = 0; it < (kBmpWords + 31) / 32; ++it) {
          const int w = lane + it * 32;
          if (kBmpWords % 32 == 0 || w < kBmpWords) cp_async8(bs + w * 8, bitmap + (unsigned)off + w);
        }
      }
      /* the tile's bmp_off entry, landed with the bitmap before this lane's arrival */
      if (!kNoPartial && lane == 0) cp_async4(bar_full + kOffFlags + 4 * st, bmp_off + e0 + j);
      cp_async_mbar_arrive(full);
#if STOF_SM90_ROWMASK
      }
#endif
      if (j + 1 < n) {
        col = __ldg(col_idx + e0 + j + 1);
        off = __ldg(bmp_off + e0 + j + 1);
#if STOF_SM90_ROWMASK
        if (kRmProducer && off >= 0) rm_fetch(off);
#endif
      }
    }
    cp_async_commit(); /* wait_group waits for committed groups only */
    cp_async_wait<0>();
    return;
  }
  if (kConsRegs) setmaxnreg_inc<kConsRegs>();
#endif

  /* Q tile (rows past Sq zero-filled): its own group, first. */
#pragma unroll
  for (int it = 0; it < kT * kCprT / kThreads; ++it) {
    const int c = tid + it * kThreads;
    const int rr = c / kCprT, ch = c % kCprT;
    const bool ok = (!kQShift || rr >= qlo) && rr < qrows;
    cp_async16(qbase + toff(rr, ch), Qg + (ok ? (unsigned)(rr - qlo) * qs : 0u) + ch * 8, ok ? 16 : 0);
  }
  cp_async_commit();

#if STOF_SM90_TMA
  /* Whether tile i is partial: the producer's copy of its bmp_off entry in the stage. */
  auto tma_ready = [&](int i) -> bool {
    const int st = i % kStages;
    mbar_wait(bar_full + 8 * st, (unsigned)(i / kStages) & 1u);
    return !kNoPartial && *reinterpret_cast<const volatile int *>(smem + (bar_full - sbase) + kOffFlags + 4 * st) >= 0;
  };
  /* This thread is done with tile i's stage (every wgmma reading it waited for, its own
   * bitmap reads done): each thread's arrive releases its own reads (one lane's arrive after
   * __syncwarp left the other lanes' reads unordered for compute-sanitizer's racecheck). */
  auto tma_release = [&](int i) { mbar_arrive(bar_empty + 8 * (i % kStages)); };
#else
  auto issue = [&](int st, int col, int off) {
    const unsigned ks = kvbase + st * 2 * kTileBytes;
    load_tile(ks, Kg, ksr, Sk, col, tid);
    load_tile(ks + kTileBytes, Vg, vsr, Sk, col, tid);
    if (off >= 0) { /* 8-byte copies: the format does not promise 16-byte aligned bitmaps */
      const unsigned bs = bmbase + st * kBmpBytes;
#pragma unroll
      for (int it = 0; it < (kBmpWords + kThreads - 1) / kThreads; ++it) {
        const int w = tid + it * kThreads;
        if (kBmpWords % kThreads == 0 || w < kBmpWords) cp_async8(bs + w * 8, bitmap + (unsigned)off + w);
      }
    }
  };

  /* Prologue: the first kDist non-empty tiles, one group each. */
  unsigned pend = 0; /* bit k: the k-th tile from the current one is partial */
#pragma unroll
  for (int s = 0; s < kDist; ++s) {
    if (s < n) {
      const int col = __ldg(col_idx + e0 + s), off = __ldg(bmp_off + e0 + s);
      issue(s, col, off);
      pend |= (off >= 0 ? 1u : 0u) << s;
    }
    cp_async_commit();
  }
  int nx_col = 0, nx_off = -1;
  if (kDist < n) {
    nx_col = __ldg(col_idx + e0 + kDist);
    nx_off = __ldg(bmp_off + e0 + kDist);
  }
  /* Once tile i landed for every thread (each schedule's own wait and barrier before it):
   * the copies of tile i + kDist (one group, empty past the end), and whether tile i is
   * partial. */
  auto prefetch_next = [&](int i) -> bool {
    const int j = i + kDist;
    if (j < n) {
      issue(j % kStages, nx_col, nx_off);
      pend |= (nx_off >= 0 ? 1u : 0u) << kDist;
      if (j + 1 < n) {
        nx_col = __ldg(col_idx + e0 + j + 1);
        nx_off = __ldg(bmp_off + e0 + j + 1);
      }
    }
    cp_async_commit();
    const bool partial = !kNoPartial && (pend & 1u);
    pend >>= 1;
    return partial;
  };
#endif

  float o[kNO];
#pragma unroll
  for (int k = 0; k < kNO; ++k) o[k] = 0.f;
  float mrow[2] = {neg_inf(), neg_inf()}, lrow[2] = {0.f, 0.f};

  const int wrow = warp * 16; /* this warp's first row (warpgroup w: rows 64w .. 64w+63) */
  const int bsh = (g & 3) * 8 + 2 * t4, bhi = g >> 2;
#if STOF_SM90_ROWMASK
  (void)bsh; /* the old mask's shift and half, read only by hs_tile's old form */
  (void)bhi;
#endif
#if STOF_HAS_MOD
  const mod_cta mc = mod_begin(M, h);
#if !STOF_SM90_HALFSKIP && !STOF_SM90_KEY64 /* hs_tile and the 64-key steps have their own */
  /* The score modifier on tile ti's scaled scores (sl2 is then log2 e alone): this lane's
   * offset j - i at (row g, column 2 t4) of its warp's rows, from the tile's column. */
  auto apply_mod = [&](float (&s)[kNS], int ti) {
    const int rel0 = __ldg(col_idx + e0 + ti) * kT + 2 * t4 - (q0 + wrow + g);
#pragma unroll
    for (int hh = 0; hh < 2; ++hh)
#pragma unroll
      for (int nb = 0; nb < kT / 8; ++nb) {
        const int rel = rel0 + nb * 8 - hh * 8;
        s[4 * nb + 2 * hh] = mod_score(s[4 * nb + 2 * hh] * scale, rel, mc);
        s[4 * nb + 2 * hh + 1] = mod_score(s[4 * nb + 2 * hh + 1] * scale, rel + 1, mc);
      }
  };
#endif
#endif

#if STOF_SM90_QREG
  /* Q fragments of this warp's 16 rows (m16n8k16 A layout per k-step of 16 along D). */
  unsigned qf[kD / 16][4];
#if STOF_SM90_TMA
  cp_async_wait<0>();
  consumer_sync();
#else
  cp_async_wait<kDist>(); /* the Q group, committed first */
  __syncthreads();
#endif
#pragma unroll
  for (int kk = 0; kk < kD / 16; ++kk) {
    const int q = lane >> 3, rr = wrow + (q & 1) * 8 + (lane & 7);
    ldsm_x4(qbase + toff(rr, 2 * kk + (q >> 1)), qf[kk][0], qf[kk][1], qf[kk][2], qf[kk][3]);
  }
#if STOF_SM90_TMA
  mbar_arrive(bar_qfree); /* the producer may fill the last stage's K slot once all hold Q */
#endif
#else
  /* this warpgroup's 64 rows of Q; with one warpgroup the CTA's, written so (not warp >> 2,
   * 0 there but per thread to ptxas) that it stays in uniform registers: otherwise each of
   * S's wgmma moved Q's descriptor through R2UR (bit-identical; 16 fewer instructions at D 64,
   * no measured time change: session 17) */
  const unsigned qslice = qbase + (kWG == 1 ? 0 : warp >> 2) * 64 * 128;
#if STOF_SM90_TMA
  cp_async_wait<0>();
  fence_async_smem(); /* Q is read by wgmma (async proxy) */
  consumer_sync();
#endif
#endif

  unsigned qkeep = 0u;     /* see the end of the loop */
  unsigned p[kT / 16][4]; /* P of the current (or, overlapped, the previous) tile */
#pragma unroll
  for (int kk = 0; kk < kT / 16; ++kk) p[kk][0] = p[kk][1] = p[kk][2] = p[kk][3] = 0u;
#if !STOF_SM90_HALFSKIP && !STOF_SM90_KEY64
  unsigned vs_prev = 0;   /* overlapped: V of the previous tile */
#endif
#if !STOF_SM90_PINGPONG
  /* The one-barrier schedules (plain, overlapped, half-skip): tile i landed for all threads
   * (with cp.async: every warpgroup's wgmma reading the stage that the prefetch overwrites,
   * tile i - kStages + kDist, has been waited for), the next copies issued; whether tile i is
   * partial. */
  auto plain_ready = [&](int i) -> bool {
#if STOF_SM90_TMA
    return tma_ready(i);
#else
    cp_async_wait<kDist - 1>();
    fence_async_smem();
    __syncthreads();
    return prefetch_next(i);
#endif
  };
#endif

#if STOF_SM90_PINGPONG
  /* Ping-pong (two warpgroups, T = 128). With TMA: both warpgroups run the overlapped loop
   * (S_i and P V_{i-1} issued together, softmax_i under P V_{i-1}), and their turns to issue
   * alternate (FA3's scheduler barrier): warpgroup 0 issues tile i once warpgroup 1 issued
   * tile i - 1, warpgroup 1 tile i once warpgroup 0 issued it, so that one's softmax runs under
   * the other's MMAs. With cp.async: the same per-tile barrier for both, but warpgroup 1 runs
   * half a tile behind. Between barriers i and i+1, warpgroup 0 issues S_i and P V_{i-1}, then
   * runs softmax_i; warpgroup 1 first runs softmax_{i-1} (its S_{i-1} was waited before
   * barrier i), then issues S_i and P V_{i-1} and waits for them. Both schedules read V_{i-1}
   * while tile i + 1 loads: prefetch distance STAGES - 2, as with STOF_SM90_OVERLAP. (Session
   * 19, D 128 with TMA, dense H 12 x 16 x 4096 and H 32 x 1 x 8192, causal and document
   * H 12 x 16 x 4096: the alternating turns took 0.94-0.96x the time of the half-tile barrier,
   * which this path used before; arriving on that barrier as soon as warpgroup 1's MMAs were
   * issued, or once its S was done, 1.01-1.04x; bench/NOTES-attention.md.) */
  const int wgi = warp >> 2;
#if !STOF_SM90_TMA
  /* The per-tile barrier of the two warpgroups: phase i of an mbarrier that every consumer
   * thread arrives on (release) and waits for (acquire). Not bar.sync: that is
   * barrier.sync.aligned, one instruction for every thread, while the warpgroups reach this
   * barrier from their own loops (compute-sanitizer's synccheck: divergent threads); one
   * loop for both, or the non-aligned barrier.sync, made the kernels 9-15% slower. */
  auto pp_sync = [&](int i) {
    mbar_arrive(bar_pp);
    mbar_wait(bar_pp, (unsigned)i & 1u);
  };
  auto barrier_prefetch = [&](int i) -> bool {
    cp_async_wait<kDist - 1>();
    fence_async_smem();
    pp_sync(i); /* every thread's copies of tile i landed (release / acquire) */
    return prefetch_next(i);
  };
#endif
  auto issue_s = [&](float (&s)[kNS], int st) {
    const unsigned ks_base = kvbase + st * 2 * kTileBytes;
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk) {
      const unsigned koff = (kk >> 2) * kBlkBytes + (kk & 3) * 32;
#if STOF_SM90_QREG
      wg_rsk<kT>(s, qf[kk], mdesc_at(ks_base, koff, 16, 1024), kk > 0);
#else
      wg_ss<kT>(s, mdesc_at(qslice, koff, 16, 1024), mdesc_at(ks_base, koff, 16, 1024), kk > 0);
#endif
    }
  };
  /* Mask (partial tiles) and online softmax in place (s becomes exp); alpha kept for O. */
  float alpha[2];
  auto softmax_part = [&](float (&s)[kNS], bool partial, int st, int ti) {
#if STOF_HAS_MOD
    apply_mod(s, ti);
#endif
    if (partial) {
      const unsigned *bmp = reinterpret_cast<const unsigned *>(smem + (bmbase - sbase) + st * kBmpBytes);
#if STOF_SM90_ROWMASK
      unsigned rm[kT / 64];
      rm_load(rm, bmp, wrow, lane);
      rm_apply<kT / 8>(s, rm);
#else
      mask_scores<kT / 8>(s, bmp, wrow, bhi, bsh);
#endif
    }
    online_softmax<kT / 8>(s, mrow, lrow, alpha, sl2);
  };
  auto keep = [&]() { /* real reads of Q's registers (see the note on qkeep below) */
#if STOF_SM90_QREG
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk) {
      asm volatile("lop3.b32 %0, %0, %1, %2, 0x96;\n" : "+r"(qkeep) : "r"(qf[kk][0]), "r"(qf[kk][1]));
      asm volatile("lop3.b32 %0, %0, %1, %2, 0x96;\n" : "+r"(qkeep) : "r"(qf[kk][2]), "r"(qf[kk][3]));
    }
#endif
  };
  /* Every wgmma group is issued and waited inside one iteration (a group in flight across
   * the loop's back edge made ptxas serialise every wgmma, C7515). */
  float s[kNS];
  /* The overlapped loop: with TMA both warpgroups, taking turns to issue (bar_pp's phase i
   * completes when warpgroup 1 has issued tile i, and warpgroup 0 then issues tile i + 1;
   * bar_pp + 8's when warpgroup 0 has issued tile i), tile i - 1's stage released once
   * P V_{i-1} is done (both warpgroups' releases complete it); with cp.async warpgroup 0 only,
   * behind the per-tile barrier. */
  if (kTma ? n > 0 : wgi == 0) {
#if STOF_SM90_PEEL
    { /* tile 0 on its own: S_0 without the P V of P = 0 that the loop's first pass issues */
      const bool partial = tma_ready(0);
      if (wgi == 1) mbar_wait(bar_pp + 8, 0u);
      wg_fence();
      issue_s(s, 0);
      wg_commit();
      mbar_arrive(wgi == 0 ? bar_pp + 8 : bar_pp);
      wg_wait<0>();
      reg_fence(s);
      softmax_part(s, partial, 0, 0);
      rescale_pack<kT / 16>(o, p, s, alpha);
      vs_prev = kvbase + kTileBytes;
      keep();
    }
#endif
    for (int i = STOF_SM90_PEEL ? 1 : 0; i < n; ++i) {
      const int st = i % kStages;
#if STOF_SM90_TMA
      const bool partial = tma_ready(i);
      if (wgi == 0) {
        if (i > 0) mbar_wait(bar_pp, (unsigned)(i - 1) & 1u);
      } else {
        mbar_wait(bar_pp + 8, (unsigned)i & 1u);
      }
#else
      const bool partial = barrier_prefetch(i);
#endif
      wg_fence();
      issue_s(s, st);
      wg_commit();
      /* P V_{i-1} behind S_i; at i = 0 (without PEEL, or on cp.async), P = 0 against tile 0's V
       * (branch-free). */
      pv(o, p, i > 0 ? vs_prev : kvbase + st * 2 * kTileBytes + kTileBytes);
      wg_commit();
#if STOF_SM90_TMA
      mbar_arrive(wgi == 0 ? bar_pp + 8 : bar_pp); /* the other warpgroup's turn */
#endif
      wg_wait<1>();
      reg_fence(s);
      softmax_part(s, partial, st, i);
      wg_wait<0>();
      reg_fence(o);
#if STOF_SM90_TMA
      if (i > 0) tma_release(i - 1); /* S_i and P V_{i-1} done; V_i is read next time */
#endif
      rescale_pack<kT / 16>(o, p, s, alpha);
      vs_prev = kvbase + st * 2 * kTileBytes + kTileBytes;
      keep();
    }
    if (kTma || n > 0) { /* (with TMA n > 0 already) */
      reg_fence(o);
      wg_fence();
      pv(o, p, vs_prev);
      wg_commit();
      wg_wait<0>();
      reg_fence(o);
#if STOF_SM90_TMA
      tma_release(n - 1);
#endif
    }
  }
#if !STOF_SM90_TMA
  /* cp.async: warpgroup 1 half a tile behind */
  else if (n > 0) {
    bool part_prev = barrier_prefetch(0);
    wg_fence();
    issue_s(s, 0);
    wg_commit();
    wg_wait<0>();
    reg_fence(s);
    for (int i = 1; i < n; ++i) {
      const bool partial = barrier_prefetch(i);
      const int sp = (i - 1) % kStages;
      softmax_part(s, part_prev, sp, i - 1);
      rescale_pack<kT / 16>(o, p, s, alpha);
      reg_fence(o);
      wg_fence();
      issue_s(s, i % kStages);
      pv(o, p, kvbase + sp * 2 * kTileBytes + kTileBytes);
      wg_commit();
      wg_wait<0>();
      reg_fence(s);
      reg_fence(o);
      part_prev = partial;
      keep();
    }
    const int sp = (n - 1) % kStages;
    softmax_part(s, part_prev, sp, n - 1);
    rescale_pack<kT / 16>(o, p, s, alpha);
    reg_fence(o);
    wg_fence();
    pv(o, p, kvbase + sp * 2 * kTileBytes + kTileBytes);
    wg_commit();
    wg_wait<0>();
    reg_fence(o);
  }
#endif /* !STOF_SM90_TMA */
#elif STOF_SM90_HALFSKIP
  /* The plain schedule, one warpgroup, a tile at a time through hs_tile: all 64 keys, or one
   * 32-key half kh (keys 32 kh .. 32 kh + 31) of a partial tile whose other half is masked in
   * all 64 rows. */
#if !STOF_HAS_MOD
  const mod_cta mc = {}; /* read by nothing */
#endif
#if STOF_SM90_QREG
  const auto &qop = qf; /* Q for S: its fragments, or its slice in shared memory */
#else
  const unsigned qop = qslice;
#endif
  for (int i = 0; i < n; ++i) {
    const int st = i % kStages;
    const bool partial = plain_ready(i);
    /* A dead half: none of its 32 bitmap words (key blocks 0-3: words 0-31, 4-7: 32-63) has a
     * bit. Every warp reads all 64 words and votes, so all four take the same branch (wgmma
     * is .sync.aligned over the warpgroup); with STOF_SM90_ROWMASK and TMA the producer has
     * voted and every warp reads its word. */
    const unsigned *bmp = reinterpret_cast<const unsigned *>(smem + (bmbase - sbase) + st * kBmpBytes);
    bool lo = true, hi = true;
    if (partial) {
#if STOF_SM90_ROWMASK && STOF_SM90_TMA
      /* the producer's vote (kRmProducer: the stage holds the consumers' words instead) */
      const unsigned f = *reinterpret_cast<const unsigned *>(smem + (bar_full - sbase) + kRmFlags + 4 * st);
      lo = f & 1u;
      hi = f & 2u;
#else
      const unsigned long long *bw = reinterpret_cast<const unsigned long long *>(bmp);
      lo = __any_sync(0xffffffffu, bw[lane] != 0ull);
      hi = __any_sync(0xffffffffu, bw[lane + 32] != 0ull);
#endif
    }
    const int kh = lo ? 0 : 1; /* the computed half when one is skipped; 0 for a whole tile */
    const unsigned ks = kvbase + st * 2 * kTileBytes + kh * (kT / 2) * 128;
    const int rel0 = STOF_HAS_MOD ? __ldg(col_idx + e0 + i) * kT + kh * (kT / 2) + 2 * t4 - (q0 + wrow + g) : 0;
    /* the half's bitmap words; with STOF_SM90_ROWMASK the stage's, the half picked from the
     * gathered bits */
    const unsigned *hbmp = STOF_SM90_ROWMASK ? bmp : bmp + kh * (kT / 16) * kT8 * 2;
    if (lo && hi)
      hs_tile<false>(o, mrow, lrow, p, qop, ks, ks + kTileBytes, bmp, partial, wrow, bsh, bhi, sl2, mc, rel0, scale,
                     lane, 0);
    else
      hs_tile<true>(o, mrow, lrow, p, qop, ks, ks + kTileBytes, hbmp, true, wrow, bsh, bhi, sl2, mc, rel0, scale,
                    lane, kh);
#if STOF_SM90_TMA
    tma_release(i); /* S and P V waited for, the bitmap read */
#endif
#if STOF_SM90_QREG
    /* Q's fragments kept live with real reads, as in the plain loop below. */
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk) {
      asm volatile("lop3.b32 %0, %0, %1, %2, 0x96;\n" : "+r"(qkeep) : "r"(qf[kk][0]), "r"(qf[kk][1]));
      asm volatile("lop3.b32 %0, %0, %1, %2, 0x96;\n" : "+r"(qkeep) : "r"(qf[kk][2]), "r"(qf[kk][3]));
    }
#endif
  }
#elif STOF_SM90_KEY64
  /* Each tile as two 64-key halves kh (K and V rows 64 kh on: kHalfBytes, whole swizzle
   * atoms; bitmap key blocks 8 kh on): S, mask, softmax and P V of a half before the next, the
   * stage released after both. */
  auto k64_s = [&](float (&s)[32], unsigned ks, int kh) {
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk) {
      const unsigned koff = (kk >> 2) * kBlkBytes + (kk & 3) * 32;
      wg_ss<64>(s, mdesc_at(qslice, koff, 16, 1024), mdesc_at(ks, koff + kh * kHalfBytes, 16, 1024), kk > 0);
    }
  };
  /* the modifier, the mask (partial tiles) and the online softmax of half kh of tile i */
  auto k64_softmax = [&](float (&s)[32], bool partial, int st, int i, int kh, float (&alpha)[2]) {
#if STOF_HAS_MOD
    const int rel0 = __ldg(col_idx + e0 + i) * kT + kh * 64 + 2 * t4 - (q0 + wrow + g);
#pragma unroll
    for (int hh = 0; hh < 2; ++hh)
#pragma unroll
      for (int nb = 0; nb < 8; ++nb) {
        const int rel = rel0 + nb * 8 - hh * 8;
        s[4 * nb + 2 * hh] = mod_score(s[4 * nb + 2 * hh] * scale, rel, mc);
        s[4 * nb + 2 * hh + 1] = mod_score(s[4 * nb + 2 * hh + 1] * scale, rel + 1, mc);
      }
#else
    (void)i;
#endif
    if (partial) {
      const unsigned *bmp = reinterpret_cast<const unsigned *>(smem + (bmbase - sbase) + st * kBmpBytes);
      mask_scores<8>(s, bmp + kh * 16 * kT8, wrow, bhi, bsh);
    }
    online_softmax<8>(s, mrow, lrow, alpha, sl2);
  };
  for (int i = 0; i < n; ++i) {
    const int st = i % kStages;
    const bool partial = plain_ready(i);
    const unsigned ks_base = kvbase + st * 2 * kTileBytes;
    const unsigned vs_base = ks_base + kTileBytes;
#pragma unroll 1
    for (int kh = 0; kh < 2; ++kh) {
      float s[32], alpha[2];
      wg_fence();
      k64_s(s, ks_base, kh);
      wg_commit();
      wg_wait<0>();
      reg_fence(s);
      k64_softmax(s, partial, st, i, kh, alpha);
      rescale_pack<4>(o, p, s, alpha);
      reg_fence(o);
      wg_fence();
      pv_steps<4>(o, p, vs_base + kh * kHalfBytes);
      wg_commit();
      wg_wait<0>();
      reg_fence(o);
    }
#if STOF_SM90_TMA
    tma_release(i);
#endif
  }
#else
  for (int i = 0; i < n; ++i) {
    const int st = i % kStages;
    const bool partial = plain_ready(i);

    const unsigned ks_base = kvbase + st * 2 * kTileBytes;
    const unsigned vs_base = ks_base + kTileBytes;

    /* S = Q K^T: 64 x T per warpgroup, k-steps of 16 along D. */
    float s[kNS];
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk) {
      const unsigned koff = (kk >> 2) * kBlkBytes + (kk & 3) * 32;
#if STOF_SM90_QREG
      wg_rsk<kT>(s, qf[kk], mdesc_at(ks_base, koff, 16, 1024), kk > 0);
#else
      wg_ss<kT>(s, mdesc_at(qslice, koff, 16, 1024), mdesc_at(ks_base, koff, 16, 1024), kk > 0);
#endif
    }
    wg_commit();
#if STOF_SM90_ROWMASK
    if (kOverlap) {
      pv(o, p, i > 0 ? vs_prev : vs_base); /* as below */
      wg_commit();
    }
    /* the mask's bits gathered while S (and P V) run */
    unsigned rm[kT / 64];
    if (partial) rm_load(rm, reinterpret_cast<const unsigned *>(smem + (bmbase - sbase) + st * kBmpBytes), wrow, lane);
    if (kOverlap)
      wg_wait<1>();
    else
      wg_wait<0>();
#else
    if (kOverlap) {
      /* O += P V of the previous tile, behind S of this one. At i = 0, P = 0 and V is this
       * tile's (finite) V: a no-op that keeps the wgmma sequence free of branches, which
       * ptxas needs to leave the two groups asynchronous. */
      pv(o, p, i > 0 ? vs_prev : vs_base);
      wg_commit();
      wg_wait<1>();
    } else {
      wg_wait<0>();
    }
#endif
    reg_fence(s);
#if STOF_HAS_MOD
    apply_mod(s, i);
#endif

#if STOF_SM90_ROWMASK
    if (partial) rm_apply<kT / 8>(s, rm);
#else
    if (partial) {
      const unsigned *bmp = reinterpret_cast<const unsigned *>(smem + (bmbase - sbase) + st * kBmpBytes);
      mask_scores<kT / 8>(s, bmp, wrow, bhi, bsh);
    }
#endif

    float alpha[2]; /* O's scale */
    online_softmax<kT / 8>(s, mrow, lrow, alpha, sl2);

    if (kOverlap) {
      wg_wait<0>(); /* P V of the previous tile: O and P are free again */
      reg_fence(o);
#if STOF_SM90_TMA
      if (i > 0) tma_release(i - 1);
#endif
    }
    rescale_pack<kT / 16>(o, p, s, alpha);

    if (kOverlap) {
      vs_prev = vs_base;
    } else {
      reg_fence(o);
      wg_fence();
      pv(o, p, vs_base);
      wg_commit();
      wg_wait<0>();
      reg_fence(o);
#if STOF_SM90_TMA
      tma_release(i);
#endif
    }
#if STOF_SM90_QREG
    /* Keep Q's fragments live across P V with real reads. ptxas 13.0 does not carry the
     * register operands of an asynchronous wgmma (here Q, the A operand of S) live around
     * the loop's back edge: with D = T, where P and Q are register groups of the same size,
     * it gave P Q's registers, and S of the second tile read P as Q (wrong results from the
     * second tile on, seen on the device; the SASS showed both HGMMAs reading R88..R103).
     * A `mov r, r` was optimised away with the fix; a lop3 into a value used (in a branch
     * never taken) by the epilogue is not. 8 (D=64) or 16 (D=128) lop3 per tile. */
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk) {
      asm volatile("lop3.b32 %0, %0, %1, %2, 0x96;\n" : "+r"(qkeep) : "r"(qf[kk][0]), "r"(qf[kk][1]));
      asm volatile("lop3.b32 %0, %0, %1, %2, 0x96;\n" : "+r"(qkeep) : "r"(qf[kk][2]), "r"(qf[kk][3]));
    }
#endif
  }
  if (kOverlap && n > 0) {
    reg_fence(o);
    wg_fence();
    pv(o, p, vs_prev);
    wg_commit();
    wg_wait<0>();
    reg_fence(o);
#if STOF_SM90_TMA
    tma_release(n - 1);
#endif
  }

#endif

  /* Epilogue: O / l (0 for a row with no valid key), staged through the Q buffer (after every
   * warpgroup's last wgmma and every copy) for 16-byte stores. */
#if STOF_SM90_TMA
  consumer_sync(); /* every copy landed: the consumers waited for all of them */
#else
  cp_async_wait<0>();
  __syncthreads();
#endif
  unsigned char *stg = smem + (qbase - sbase);
  if (n < 0 && qkeep == 0x9e3779b9u) lrow[0] = 0.f; /* never: only keeps qkeep (and Q) alive */
#if STOF_SM90_SPLIT == 2
  /* The chunk's partial result, unnormalised, for the combine: O as accumulated (f32), and
   * per row the max in log2 units (the exponents' offset: -inf when the chunk kept no key of
   * the row, whose O and l are then 0) and the sum. Rows past Sq are written too (the slot
   * has T rows); the combine reads only rows below Sq. */
  (void)stg;
  float *W = S.ws + ((long long)cta_bh_again() * S.nchunk_max + (int)blockIdx.x) * kSplitFloats;
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    float l = lrow[hh];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const int rr = wrow + hh * 8 + g;
#pragma unroll
    for (int db = 0; db < kD / 8; ++db)
      *reinterpret_cast<float2 *>(W + rr * kD + db * 8 + 2 * t4) =
          make_float2(o[4 * db + 2 * hh], o[4 * db + 2 * hh + 1]);
    if (t4 == 0) {
      W[kT * kD + rr] = mrow[hh] * sl2;
      W[kT * kD + kT + rr] = l;
    }
  }
  return;
#endif
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    float l = lrow[hh];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const float inv = l > 0.f ? 1.f / l : 0.f;
    const int rr = wrow + hh * 8 + g;
#pragma unroll
    for (int db = 0; db < kD / 8; ++db) {
      const unsigned v = pack2(o[4 * db + 2 * hh] * inv, o[4 * db + 2 * hh + 1] * inv);
      *reinterpret_cast<unsigned *>(stg + toff(rr, db) + t4 * 4) = v;
    }
  }
  __syncwarp();
  /* (b, h) formed again here from the block index (and the order), not kept live across the
   * tile loop */
#if STOF_SM90_ORDER
  int ord_k2;
  const int bh2 = order_cta<STOF_SM90_ORDER == 2>(B * H, nrow, ORD.nheavy, ORD.group, ord_k2);
  const int bo = bh2 / H, ho = bh2 - bo * H;
#else
  const int bo = cta_bh_again() / H, ho = cta_bh_again() - bo * H;
#endif
  elem_t *Og = O + (long long)bo * L.o[0] + (long long)ho * L.o[1] + (long long)(q0 + qlo) * L.o[2];
#pragma unroll
  for (int c = lane; c < 16 * kCprT; c += 32) {
    const int rr = wrow + c / kCprT, ch = c % kCprT;
    if ((!kQShift || rr >= qlo) && rr < qrows)
      *reinterpret_cast<uint4 *>(Og + (unsigned)(rr - qlo) * (unsigned)L.o[2] + ch * 8) =
          *reinterpret_cast<const uint4 *>(stg + toff(rr, ch));
  }
}

#if STOF_SM90_SPLIT == 2
/* The combine of split rows, after the chunk and main launches: grid (most split rows of an
 * instance, then (b, h) as the main launch), 256 threads. CTA x of (b, h) merges split row
 * S.srow_ptr[inst] + x of its instance (none past srow_ptr[inst + 1]): for each query row,
 * over its chunks c with max m_c (log2 units), sum l_c and accumulator O_c,
 *   M = max_c m_c, L = sum_c l_c 2^(m_c - M), O = sum_c 2^(m_c - M) O_c / L,
 * stored as the main kernel stores O. A row no chunk kept a key of has every m_c = -inf:
 * M stands in as 0 (as in the kernel's softmax), every weight is 0, L = 0 and the row is
 * written as +0, bit for bit what the unsplit kernel writes. */
extern "C" __global__ void __launch_bounds__(256)
stof_attn_split_combine_sm90(stof_attn::elem_t *__restrict__ O, int B, int H, int Sq, int mask_b, int mask_h,
                             const stof_attn::layout_t L, const stof_attn::sm90::split_t S)
{
  using namespace stof_attn;
  using namespace stof_attn::sm90;
  const int bh = blockIdx.y + gridDim.y * blockIdx.z;
  if (bh >= B * H) return;
  const int b = bh / H, h = bh - b * H;
  const int inst = (mask_b > 1 ? b : 0) * mask_h + (mask_h > 1 ? h : 0);
  const int si = __ldg(S.srow_ptr + inst) + (int)blockIdx.x;
  if (si >= __ldg(S.srow_ptr + inst + 1)) return;
  const int r = __ldg(S.srow + 3 * si), c0 = __ldg(S.srow + 3 * si + 1), nc = __ldg(S.srow + 3 * si + 2);
  const int q0 = r * kT - kQShift, qlo = kQShift && q0 < 0 ? -q0 : 0, qrows = min(kT, Sq - q0);
  const float *W = S.ws + ((long long)bh * S.nchunk_max + c0) * kSplitFloats;
  elem_t *Og = O + (long long)b * L.o[0] + (long long)h * L.o[1] + (long long)(q0 + qlo) * L.o[2];
  for (int it = threadIdx.x + qlo * kCprT; it < qrows * kCprT; it += blockDim.x) {
    const int rr = it / kCprT, ch = it - rr * kCprT;
    float mx = neg_inf();
    for (int c = 0; c < nc; ++c) mx = fmaxf(mx, W[(long long)c * kSplitFloats + kT * kD + rr]);
    const float ms = mx == neg_inf() ? 0.f : mx;
    float l = 0.f, acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    for (int c = 0; c < nc; ++c) {
      const float *Wc = W + (long long)c * kSplitFloats;
      const float w = exp2f(Wc[kT * kD + rr] - ms);
      l += w * Wc[kT * kD + kT + rr];
      const float4 a = *reinterpret_cast<const float4 *>(Wc + rr * kD + ch * 8);
      const float4 z = *reinterpret_cast<const float4 *>(Wc + rr * kD + ch * 8 + 4);
      acc[0] += w * a.x, acc[1] += w * a.y, acc[2] += w * a.z, acc[3] += w * a.w;
      acc[4] += w * z.x, acc[5] += w * z.y, acc[6] += w * z.z, acc[7] += w * z.w;
    }
    const float inv = l > 0.f ? 1.f / l : 0.f;
    *reinterpret_cast<uint4 *>(Og + (unsigned)(rr - qlo) * (unsigned)L.o[2] + ch * 8) = pack8_scaled(acc, inv);
  }
}
#endif
