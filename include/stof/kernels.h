/*
 * stof kernels: attention masks, the two-level mask format (BSR + bitmap) that the
 * attention kernels read, and pictures of it.
 *
 * Invariants:
 *  - A stof_mask is an immutable value. Combining masks shares the operands' trees
 *    (reference-counted immutable nodes): combining N masks costs O(N) memory, and every
 *    mask is still freed on its own with stof_mask_free, in any order (what a combination
 *    needs of its operands lives until the combination is freed).
 *  - Positions are 0-based; i is a query, j a key, b a batch element, h a head.
 *  - A stof_mask_format is built from a mask and (B, H, Sq, Sk, T) on the CPU, or on the
 *    GPU with the identical result; its arrays follow the layout documented at struct
 *    stof_mask_format exactly (the GPU kernels read them as they are).
 */
#ifndef STOF_KERNELS_H
#define STOF_KERNELS_H

#include <stof/core.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- masks */

typedef struct stof_mask stof_mask;

/* Limits (docs/MASKS.md, "Limits"), checked with overflow-safe arithmetic where a user's
 * number enters: every constructor parameter (widths, offsets, block sizes, dilations,
 * lengths and their sums) and every sequence length S, Sq, Sk is at most
 * STOF_MASK_MAX_EXTENT; a combination is at most STOF_MASK_MAX_DEPTH levels deep; a
 * document mask has at most STOF_MASK_MAX_SEQS sequences. A format has at most
 * STOF_MASK_FORMAT_MAX_TILES outer tiles (all instances) and its worst case (every tile
 * partial) at most STOF_MASK_FORMAT_MAX_BYTES; a mask holding an fn predicate is evaluated
 * on at most STOF_MASK_FN_MAX_EVALS elements (instances x Sq x Sk) per format. */
#define STOF_MASK_MAX_EXTENT ((int64_t)1 << 40)
#define STOF_MASK_MAX_DEPTH 8192
#define STOF_MASK_MAX_SEQS ((int64_t)1 << 24)
#define STOF_MASK_FORMAT_MAX_TILES ((int64_t)1 << 26)
#define STOF_MASK_FORMAT_MAX_BYTES ((int64_t)1 << 33)
#define STOF_MASK_FN_MAX_EVALS ((int64_t)1 << 26)

/*
 * Constructors. Each returns STOF_OK and an owned mask in *out (stof_mask_free), or an
 * error (STOF_ERR_ARG with a message naming the constructor and the argument) and leaves
 * *out untouched.
 */
/** dense(): every (i, j). */
stof_status stof_mask_dense(stof_ctx *ctx, stof_mask **out);
/** causal(): j <= i. */
stof_status stof_mask_causal(stof_ctx *ctx, stof_mask **out);
/** window(l, r): i - l <= j <= i + r; l, r >= 0. */
stof_status stof_mask_window(stof_ctx *ctx, int64_t l, int64_t r, stof_mask **out);
/** sliding(w): |i - j| <= w; w >= 0. */
stof_status stof_mask_sliding(stof_ctx *ctx, int64_t w, stof_mask **out);
/** causal_sliding(w): i - w < j <= i (the last w keys); w >= 1. */
stof_status stof_mask_causal_sliding(stof_ctx *ctx, int64_t w, stof_mask **out);
/** global(g): i < g or j < g; g >= 0. */
stof_status stof_mask_global(stof_ctx *ctx, int64_t g, stof_mask **out);
/** longformer(w, g): sliding(w) | global(g). */
stof_status stof_mask_longformer(stof_ctx *ctx, int64_t w, int64_t g, stof_mask **out);
/** random_blocks(b, p, seed): block (i / b, j / b) kept with probability p in [0, 1],
 *  decided by a hash of (seed, i / b, j / b): reproducible and independent of S; b >= 1. */
stof_status stof_mask_random_blocks(stof_ctx *ctx, int64_t b, double p, uint64_t seed,
                                    stof_mask **out);
/** bigbird(w, g, b, p, seed): longformer(w, g) | random_blocks(b, p, seed). */
stof_status stof_mask_bigbird(stof_ctx *ctx, int64_t w, int64_t g, int64_t b, double p,
                              uint64_t seed, stof_mask **out);
/** document(lengths): i and j in the same packed sequence. n >= 1 sequences of lengths
 *  > 0 (copied). Positions past the sum of lengths belong to no sequence and see
 *  nothing. */
stof_status stof_mask_document(stof_ctx *ctx, int64_t n, const int64_t *lengths,
                               stof_mask **out);
/** A document mask per batch element: batch b has nseq[b] >= 1 sequences whose lengths
 *  follow those of batches 0..b-1 in lengths (copied). Varies with b when nbatch > 1;
 *  a format for it needs B == nbatch. */
stof_status stof_mask_document_batched(stof_ctx *ctx, int64_t nbatch, const int64_t *nseq,
                                       const int64_t *lengths, stof_mask **out);
/** The document mask of the canonical suite: lengths drawn uniformly in [lo, hi]
 *  (1 <= lo <= hi) from a generator seeded with seed (independent of the context's RNG),
 *  the last one cut so that they sum to exactly S. */
stof_status stof_mask_document_random(stof_ctx *ctx, int64_t S, int64_t lo, int64_t hi,
                                      uint64_t seed, stof_mask **out);
/** dilated(w, d): causal, j = i - k(d + 1) for 0 <= k < w; w >= 1, d >= 0. */
stof_status stof_mask_dilated(stof_ctx *ctx, int64_t w, int64_t d, stof_mask **out);
/** from_tensor(t): t is a CPU tensor of dtype bool, int32 or int64 (non-zero = kept) of
 *  shape [Sq, Sk] or [B, H, Sq, Sk] (B or H may be 1: the mask is then the same for every b
 *  or h; Sq, Sk at most 2^20). Copied: t may be freed afterwards. STOF_ERR_SHAPE for
 *  another rank or an empty tensor, STOF_ERR_TYPE for a float dtype. A format for it needs
 *  the same Sq and Sk. */
stof_status stof_mask_from_tensor(stof_ctx *ctx, const stof_tensor *t, stof_mask **out);

/** A predicate: > 0 keeps (i, j), 0 drops it, < 0 reports a failure (the build or eval
 *  that called it fails). */
typedef int (*stof_mask_pred)(void *ud, int64_t b, int64_t h, int64_t i, int64_t j);
/** fn(f): any predicate, evaluated element by element (the slow path). ud is borrowed:
 *  it must outlive this mask and every mask combined from it. name (may be NULL) appears
 *  in the description, "fn(name)". varies_b / varies_h say whether f depends on b / h
 *  (pass 1, 1 when unknown). Formats of fn masks are never cached. */
stof_status stof_mask_fn(stof_ctx *ctx, stof_mask_pred f, void *ud, const char *name,
                         int varies_b, int varies_h, stof_mask **out);

/** a | b, a & b, a - b (a and not b). The operands are shared, not copied (still owned by
 *  the caller, who may free them at once); both must come from the same context.
 *  STOF_ERR_ARG when the result would be more than STOF_MASK_MAX_DEPTH levels deep. */
stof_status stof_mask_union(const stof_mask *a, const stof_mask *b, stof_mask **out);
stof_status stof_mask_intersection(const stof_mask *a, const stof_mask *b, stof_mask **out);
stof_status stof_mask_difference(const stof_mask *a, const stof_mask *b, stof_mask **out);

/** The canonical suite of DESIGN.md section 4 by name: "dense", "causal", "sliding"
 *  (32), "causal_sliding" (32), "longformer" (32, 32), "bigbird" (32, 32, 32, 0.1, seed
 *  0), "document" (lengths with seed 1 in [S/16, S/2], summing to S). STOF_ERR_NOT_FOUND
 *  for another name. Owned. */
stof_status stof_mask_suite(stof_ctx *ctx, const char *name, int64_t S, stof_mask **out);
/** The suite's names in order, then NULL. Borrowed, static. */
const char *stof_mask_suite_name(int i);

void stof_mask_free(stof_mask *m);
stof_ctx *stof_mask_ctx(const stof_mask *m);

/** 1 when (i, j) is kept for batch element b and head h, 0 when not (and for positions
 *  outside the mask's domain: negative, or past a tensor mask's size); -1 when an fn
 *  predicate failed. */
int stof_mask_eval(const stof_mask *m, int64_t b, int64_t h, int64_t i, int64_t j);
/** Whether the mask depends on b / on h. */
int stof_mask_varies_b(const stof_mask *m);
int stof_mask_varies_h(const stof_mask *m);
/** The description ("longformer(32, 32)", "causal() | window(3, 0)"): exact for every
 *  kind but fn (long length lists and tensors appear as a hash) up to 256 characters; a
 *  longer combination shows its first characters and ends with " ... #" and a 64-bit hash
 *  of the whole tree. Format caches key on the exact text, however long. Borrowed: lives
 *  as long as the mask. */
const char *stof_mask_description(const stof_mask *m);
/** The same, as an owned copy: stof_ctx_dealloc(ctx, *out, strlen(*out) + 1). */
stof_status stof_mask_describe(const stof_mask *m, char **out);

/* ---------------------------------------------------------------- two-level format */

/*
 * The S_q x S_k mask of each (b, h) instance cut into outer tiles of T x T (T a multiple
 * of 16 in [16, 128]). Tiles are empty (absent), full (all T x T elements kept: computed
 * without masking) or partial (with a bitmap).
 *
 *  nrow = ceil(Sq / T), ncol = ceil(Sk / T) (a query-shifted format, qshift below:
 *  nrow = ceil((Sq + qshift) / T), tile-row r from query r T - qshift).
 *  mask_b = B if the mask varies with b else 1; mask_h likewise; nmask = mask_b * mask_h.
 *  The instance of (b, h) is (mask_b > 1 ? b : 0) * mask_h + (mask_h > 1 ? h : 0).
 *  row_ptr[nmask * (nrow + 1)]: the entries of instance m, tile row r, are
 *    e in [row_ptr[m * (nrow + 1) + r], row_ptr[m * (nrow + 1) + r + 1]) (global offsets
 *    into col_idx and bmp_off; instances follow each other).
 *  col_idx[nentry]: the non-empty tiles' column indices, ascending within a row.
 *  bmp_off[nentry]: -1 for a full tile, else the index (in uint64 words) in bitmap of the
 *    tile's (T/8) * (T/8) words.
 *  bitmap[nword]: the word of inner 8 x 8 tile (ri, ci) of a partial tile (ri the inner
 *    row-tile index, ci the inner column-tile index) is bitmap[bmp_off + ci * (T/8) + ri]
 *    (column-major); its bit r * 8 + c is element (ri * 8 + r, ci * 8 + c) of the tile.
 *  Elements outside [0, Sq) x [0, Sk) are 0 bits: a tile that crosses the edge is never
 *  full. A partial tile has at least one bit set and is not all ones.
 */
typedef struct stof_mask_format {
  stof_ctx *ctx;
  char *desc; /* the mask's description (owned by the format) */
  int64_t B, H, Sq, Sk;
  int32_t T;
  int32_t qshift;   /* 0, or T / 2 in a query-shifted format (kernels_format_qshift, for the
                       Hopper kernel only): tile-row r holds queries [r T - qshift,
                       (r + 1) T - qshift), so nrow = ceil((Sq + qshift) / T) */
  int32_t nrow, ncol;
  int32_t mask_b, mask_h, nmask;
  int32_t nentry;
  int64_t nword;
  int32_t *row_ptr;  /* [nmask * (nrow + 1)] */
  int32_t *col_idx;  /* [nentry] */
  int32_t *bmp_off;  /* [nentry] */
  uint64_t *bitmap;  /* [nword] */
  int32_t *nfull;    /* [nmask * nrow]: full tiles of instance m, row r at m * nrow + r */
  int32_t *npartial; /* [nmask * nrow]: partial tiles, likewise */
  /* Statistics over all instances. */
  int64_t nvalid;          /* kept elements */
  double density;          /* nvalid / (Sq * Sk) per instance, averaged */
  double frac16;           /* non-empty 16 x 16 tiles / all 16 x 16 tiles (any T) */
  int64_t ntile_full, ntile_partial, ntile_empty;
  int64_t ntile_halfempty; /* partial tiles with key columns [0, T/2) or [T/2, T) empty in
                              every row (counted where T is a multiple of 32; else 0) */
  size_t bytes;            /* bytes of row_ptr, col_idx, bmp_off and bitmap */
  double build_ms;         /* wall time of the build */
  double copy_ms;          /* of build_ms, the copies of the arrays back to the host (GPU
                              builds; 0 on the CPU) */
} stof_mask_format;

/**
 * Builds the format of mask for B batch elements, H heads, Sq queries, Sk keys and outer
 * tile T. Tiles are classified analytically where the mask kind allows it and evaluated
 * element by element only where they must be. Owned: stof_mask_format_free.
 * STOF_ERR_ARG: T not a multiple of 16 in [16, 128], a non-positive extent or one past
 * STOF_MASK_MAX_EXTENT, or dims the mask does not fit (a tensor mask of another size, a
 * batched document mask with another B); STOF_ERR_UNSUPPORTED, before anything is
 * allocated: more than STOF_MASK_FORMAT_MAX_TILES tiles, a worst case past
 * STOF_MASK_FORMAT_MAX_BYTES, an fn mask on more than STOF_MASK_FN_MAX_EVALS elements
 * (each message names the sizes); later, more than 2^31 - 1 entries or bitmap words;
 * STOF_ERR_ARG when an fn predicate fails.
 */
stof_status stof_mask_format_build(stof_ctx *ctx, const stof_mask *mask, int64_t B, int64_t H,
                                   int64_t Sq, int64_t Sk, int T, stof_mask_format **out);
void stof_mask_format_free(stof_mask_format *f);
/** The instance index of (b, h) (see above); -1 when b or h is out of range. */
int32_t stof_mask_format_instance(const stof_mask_format *f, int64_t b, int64_t h);
/** Decodes element (i, j) of instance (b, h): 0 or 1 (0 out of range). */
int stof_mask_format_get(const stof_mask_format *f, int64_t b, int64_t h, int64_t i,
                         int64_t j);
/** Writes instance (b, h) into out, a CPU tensor [Sq, Sk] of any dtype (1 = kept). */
stof_status stof_mask_format_expand(const stof_mask_format *f, int64_t b, int64_t h,
                                    stof_tensor *out);
/** Kept elements of instance (b, h) (-1 when out of range). */
int64_t stof_mask_format_count(const stof_mask_format *f, int64_t b, int64_t h);
/**
 * Compares two formats field by field, then array by array: the dims and counts (B, H,
 * Sq, Sk, T, qshift, nrow, ncol, mask_b, mask_h, nmask, nentry, nword), the statistics (nvalid,
 * ntile_*, bytes, density and frac16 exactly), desc, then row_ptr, nfull and npartial,
 * col_idx and bmp_off, bitmap. Not compared: ctx, build_ms, copy_ms. Both formats' arrays
 * must be on the host (a format kept on the device has none). Returns 0 when identical
 * (why, if not NULL, set to ""); else 1, with the first difference described in one line
 * in why (n bytes, truncated; may be NULL): the field, or the array, the element and its
 * (instance, row) or (partial tile, word), and both values, a's first ("ntile_partial 12
 * against 13", "col_idx[7] (instance 0, row 2) = 5 against 6").
 */
int stof_mask_format_compare(const stof_mask_format *a, const stof_mask_format *b, char *why,
                             size_t n);
/**
 * Draws the tile map of instance (b, h) as an SVG file: empty tiles white, partial light,
 * full dark; the bits of partial tiles as small cells when Sq and Sk are at most 1024; a
 * title with the description, the dims and the densities. STOF_ERR_IO names the path.
 */
stof_status stof_mask_format_svg(const stof_mask_format *f, int64_t b, int64_t h,
                                 const char *path);

/* ---------------------------------------------------------------- the format on the GPU */

/* The attention engine builds formats on the GPU when max(Sq, Sk) is at least this and
 * the mask allows it (stof_mask_format_gpu_supported), on the CPU otherwise. */
#define STOF_FORMAT_GPU_MIN_S 8192

/** Whether stof_mask_format_build_gpu can build formats of mask: every kind but
 *  from_tensor and fn, in any combination short of 256 nodes (and 16 stack slots). */
int stof_mask_format_gpu_supported(const stof_mask *mask);
/**
 * stof_mask_format_build on the GPU: the same format (identical arrays and statistics),
 * copied back to the host, so everything downstream is unchanged. build_ms counts the
 * build proper (program upload, kernels, copies back), not the one-time compilation and
 * loading of the kernels (which this call also does: a builder that keeps them lives
 * behind the attention engine). Owned: stof_mask_format_free. Errors as
 * stof_mask_format_build, and STOF_ERR_UNSUPPORTED for a mask holding from_tensor or fn
 * (or too large a combination, or Sq, Sk >= 2^31: build those on the CPU),
 * STOF_ERR_NO_DEVICE without a GPU, STOF_ERR_CUDA / _COMPILE when the device fails.
 */
stof_status stof_mask_format_build_gpu(stof_ctx *ctx, const stof_mask *mask, int64_t B,
                                       int64_t H, int64_t Sq, int64_t Sk, int T,
                                       stof_mask_format **out);

/**
 * Times the GPU build of mask's format kept on the device, as the attention engine builds it
 * at long lengths (only the statistics and the tile-row arrays cross to the host; a plan
 * copies the rest device to device): after one build that also compiles and loads the
 * builder, the median build_ms of reps (>= 1) more, in *ms; *bytes is the format's device
 * bytes. Errors as stof_mask_format_build_gpu.
 */
stof_status stof_mask_format_time_gpu(stof_ctx *ctx, const stof_mask *mask, int64_t B, int64_t H,
                                      int64_t Sq, int64_t Sk, int T, int reps, double *ms,
                                      size_t *bytes);

/* ---------------------------------------------------------------- format cache */

/* Formats keyed by (mask description, B, H, Sq, Sk, T), least recently used evicted.
 * Not thread-safe: one cache per thread, or a lock around it. */
typedef struct stof_mask_cache stof_mask_cache;

/** A cache of at most capacity >= 1 formats. Owned: stof_mask_cache_free. */
stof_status stof_mask_cache_new(stof_ctx *ctx, int capacity, stof_mask_cache **out);
/** Frees the cache and every format in it. */
void stof_mask_cache_free(stof_mask_cache *c);
/** The format of (mask, B, H, Sq, Sk, T), built on a miss (errors as
 *  stof_mask_format_build). Borrowed: valid until capacity further misses evict it or the
 *  cache is freed. fn masks always miss. */
stof_status stof_mask_cache_get(stof_mask_cache *c, const stof_mask *mask, int64_t B,
                                int64_t H, int64_t Sq, int64_t Sk, int T,
                                const stof_mask_format **out);
/** Removes the format of (mask, B, H, Sq, Sk, T) and frees it, if the cache holds it (else
 *  nothing, and STOF_OK: an fn mask's formats, never reused, wait for eviction). A later get
 *  builds it again; hits and misses are unchanged. The pointers get returned for it are
 *  invalid afterwards. STOF_ERR_NOMEM (nothing removed) if its key cannot be built. */
stof_status stof_mask_cache_drop(stof_mask_cache *c, const stof_mask *mask, int64_t B, int64_t H,
                                 int64_t Sq, int64_t Sk, int T);
/** Hits and misses so far. */
void stof_mask_cache_stats(const stof_mask_cache *c, int64_t *hits, int64_t *misses);

/* ---------------------------------------------------------------- attention */

/*
 * Sparse attention, forward: O = softmax(scale * Q K^T, masked) V per (b, h), softmax in
 * f32 (f64 on the CPU); rows with no kept key give zeros. Q, O [B, H, Sq, D]; K, V
 * [B, Hkv, Sk, D] (head h reads K/V head h / (H / Hkv)); each strided as it likes with d
 * contiguous (stof_attn_layout), so that Q/K/V can be read straight from a GEMM's
 * [B, S, H*D] or [B, S, 3*H*D] output and O written into [B, S, H*D].
 */
#define STOF_ATTN_KERNEL_LIST(X) X(AUTO, "auto") X(BLOCK, "block") X(ROW, "row")
typedef enum stof_attn_kernel {
#define STOF_X(name, text) STOF_ATTN_##name,
  STOF_ATTN_KERNEL_LIST(STOF_X)
#undef STOF_X
  STOF_ATTN_KERNEL_COUNT
} stof_attn_kernel;
const char *stof_attn_kernel_name(stof_attn_kernel k);

/*
 * Score modifiers (FlexAttention's score_mod as data): each kept score s = scale * q.k of
 * query i, key j, head h becomes
 *
 *   s' = cap * tanh(s / cap)    when softcap = cap > 0 (Gemma-2's attention soft cap: on the
 *                               scaled logits, before any bias and the mask)
 *   s' += table[h, bucket(j - i)]           kind T5_BIAS (a [H, num_buckets] table)
 *   s' += slope[h] * (j - i)                kind ALIBI (a [H] slopes tensor, or the standard
 *                                           geometric slopes, stof_attn_alibi_slope)
 *
 * then the mask drops what it drops and the softmax runs over what is left. The modifier is
 * computed on the fly (never an Sq x Sk tensor). h is the query head.
 */
#define STOF_ATTN_MOD_LIST(X) X(NONE, "none") X(T5_BIAS, "t5_bias") X(ALIBI, "alibi")
typedef enum stof_attn_mod_kind {
#define STOF_X(name, text) STOF_ATTN_MOD_##name,
  STOF_ATTN_MOD_LIST(STOF_X)
#undef STOF_X
  STOF_ATTN_MOD_COUNT
} stof_attn_mod_kind;
/** "none", "t5_bias", "alibi"; "?" out of range. Borrowed, static. */
const char *stof_attn_mod_name(stof_attn_mod_kind k);

typedef struct stof_attn_mod {
  stof_attn_mod_kind kind; /* the additive bias, NONE for none */
  int bidirectional;       /* T5: 1 for an encoder, 0 for a decoder's self-attention */
  int num_buckets;         /* T5: the table's columns (>= 2; >= 4 when bidirectional) */
  int max_distance;        /* T5: offsets from here on share the last bucket */
  float softcap;           /* > 0: cap * tanh(s / cap) on the scaled score; 0: none */
} stof_attn_mod;

/**
 * Hugging Face's T5Attention._relative_position_bucket of rel = j - i (key minus query):
 * bidirectional: half the buckets for rel > 0 (offset by num_buckets / 2), |rel| in the
 * rest; else only rel <= 0 counts (n = max(-rel, 0)), in all the buckets. With nb the
 * buckets that remain and max_exact = nb / 2: n < max_exact is its own bucket; larger n
 * max_exact + (int)(log(n / max_exact) / log(max_distance / max_exact) * (nb - max_exact)),
 * at most nb - 1. The logarithm is computed in float32 as PyTorch computes it there, so
 * that offsets on a bucket edge (16, 32, 64 at 32 buckets, 128) land where Hugging Face
 * puts them. -1 for parameters out of range (see stof_attn_mod).
 */
int64_t stof_attn_t5_bucket(int64_t rel, int bidirectional, int num_buckets, int max_distance);
/** The standard ALiBi slope of head h of H (Press et al.; Hugging Face's
 *  build_alibi_tensor): for H a power of two 2^(-8 (h + 1) / H); otherwise the slopes of
 *  the largest power of two P <= H, then every other slope of 2P for the remaining heads. */
double stof_attn_alibi_slope(int64_t H, int64_t h);
/** One line naming the modifier and how the kernels compute it ("none" without one), into
 *  buf (n bytes, truncated). Returns buf. */
const char *stof_attn_mod_describe(const stof_attn_mod *mod, char *buf, size_t n);
/** Checks a modifier (kind, bucket parameters, a finite softcap >= 0): STOF_ERR_ARG naming
 *  the field, prefixed by who. */
stof_status stof_attn_mod_check(stof_ctx *ctx, const char *who, const stof_attn_mod *mod);

typedef struct stof_attn_opts {
  stof_attn_kernel kernel; /* AUTO: the selector decides */
  int tile;                /* outer tile of the mask format, 32, 64 or 128 (32: block-wise,
                              the mma.sync kernel); 0: the selector's */
  float scale;             /* 0: 1 / sqrt(D) */
  int warps;               /* 0: the kernel's default */
  int stages;              /* block-wise pipeline depth, 0: default */
  int portable;            /* 1: never the Hopper (wgmma) block-wise kernel */
  int tma;                 /* Hopper kernel's K/V loads: 0: the default (TMA where it measured
                              faster: D 128 at tile 128, D 64 at tile 64; else cp.async),
                              1: TMA + mbarrier producer warp (an error where the Hopper
                              kernel is not chosen), -1: cp.async */
  int rowmask;             /* Hopper kernel's masking of partial tiles: 0 the selector's rule,
                              1 mask bits transposed per lane (STOF_SM90_ROWMASK), -1 not */
  int halfskip;            /* Hopper kernel at tile 64: 0 the selector's rule, 1 a partial
                              tile's empty 32-key half skipped (STOF_SM90_HALFSKIP), -1 not */
  stof_attn_mod mod;       /* a score modifier (zero: none): a GPU plan compiles it into its
                              kernel (a kernel without one is the plain kernel) */
  stof_dtype bias_dtype;   /* the GPU dtype of the T5 table / ALiBi slopes given at launch:
                              float32 (the default, 0) or the plan's dtype */
  int split;               /* heavy tile-rows over several CTAs, log-sum-exp combined (Hopper
                              kernel only): 0 the automatic rule (kernels/attention_split.c),
                              -1 never, N > 0 every tile-row of more than N tiles in chunks
                              of at most N (an error where the Hopper kernel is not chosen) */
  int order;               /* Hopper kernel, no split, or the block kernel at tile 32: 0 the
                              automatic rule (tile-rows of >= 3x their mask's mean tiles
                              launched before all others, the other rows longest first over
                              groups of (b, h) pairs where their lengths differ, at tile 64 or
                              less; kernels/attention_split.c), -1 the default order (last row
                              of each (b, h) first) */
  int order_group;         /* with order 0: 0 the rule's groups, N > 0 groups of N (b, h)
                              pairs (N above B x H taken as B x H), 1 (b, h) by (b, h), each
                              its rows last first; an error where no launch order is taken
                              (order -1, a split plan, another kernel) */
  int qshift;              /* Hopper kernel at tile 64: 0 the rule (kernels/attention.c,
                              choose_qshift), 1 the query tiles moved up by 32 rows
                              (STOF_SM90_QSHIFT; an error where it cannot run), -1 not */
  int key64;               /* Hopper kernel at D 64: 0 the selector's rule (dense- and
                              causal-like masks), 1 tile 128 computed 64 keys a step, its two
                              warpgroups sharing each K/V tile (STOF_SM90_KEY64; an error
                              where it cannot run), -1 not */
  int lazy;                /* block-wise kernels: 0 the selector's rule (D 128 on a Hopper GPU,
                              no score modifier: the tile-32 kernel and the Hopper kernel
                              without ping-pong), 1 O rescaled only when a row's running max
                              grows by more than 2^8 (STOF_LAZY_RESCALE; an error for the
                              row-wise kernel), -1 never */
} stof_attn_opts;

/** The CPU implementation (the intrinsic's, and a reference): walks only the kept
 *  entries of fmt, f64 accumulation, two-pass softmax. q, k, v, out: CPU tensors of any
 *  float dtype with the shapes above and any strides (views; out's elements must not
 *  overlap); fmt built for (B, H, Sq, Sk). stof_attention_cpu_mod with no modifier. */
stof_status stof_attention_cpu(stof_ctx *ctx, const stof_tensor *q, const stof_tensor *k,
                               const stof_tensor *v, const stof_mask_format *fmt, float scale,
                               stof_tensor *out);

/**
 * stof_attention_cpu with a score modifier (mod NULL or kind NONE with softcap 0: none).
 * bias: for T5_BIAS the [H, num_buckets] table, for ALIBI the [H] slopes or NULL for the
 * standard ones, else NULL; a CPU tensor of any float dtype and any strides. STOF_ERR_SHAPE
 * / _ARG name the tensor or field.
 */
stof_status stof_attention_cpu_mod(stof_ctx *ctx, const stof_tensor *q, const stof_tensor *k,
                                   const stof_tensor *v, const stof_mask_format *fmt,
                                   float scale, const stof_attn_mod *mod,
                                   const stof_tensor *bias, stof_tensor *out);

/* What the selector decided, and why. */
typedef struct stof_attn_choice {
  stof_attn_kernel kernel;
  int tile, warps, stages;
  int hopper;        /* block-wise on the sm_90a kernel (wgmma; attention_block_sm90.cu) */
  int tma;           /* hopper with STOF_SM90_TMA=1 (K/V by a TMA producer warp) */
  int rowmask;       /* hopper with STOF_SM90_ROWMASK=1 (a partial tile's mask bits per lane) */
  int halfskip;      /* hopper with STOF_SM90_HALFSKIP=1 (a partial tile's empty key half
                        skipped; tile 64) */
  int nopartial;     /* hopper with STOF_SM90_NOPARTIAL=1 (the plan's format has no partial
                        tile: no mask code); set with the split, from the format at the
                        plan's tile, not by stof_attention_select */
  int key64;         /* hopper with STOF_SM90_KEY64=1: tile 128 computed 64 keys a step (D 64) */
  int qshift;        /* hopper with STOF_SM90_QSHIFT=32: the plan's format is query-shifted
                        (tile-row r holds queries [64 r - 32, 64 r + 32)); set with the
                        split, not by stof_attention_select */
  int heavy_rows;    /* the launch order (hopper with STOF_SM90_ORDER=1, or the block kernel
                        at tile 32 with STOF_ORDER=1): tile-rows a (b, h) launched before all
                        others (long ones); set with the split, not by stof_attention_select */
  int order_group;   /* the launch order, likewise: the other tile-rows launched longest
                        first over groups of this many (b, h) pairs (where rows differ in
                        length); 0 or 1: (b, h) by (b, h), each its rows last first; set
                        with the split, not by stof_attention_select */
  int lazy;          /* block-wise with STOF_LAZY_RESCALE=1: O rescaled only when a row's
                        running max grows by more than 2^8 */
  double frac16;     /* the format statistic the rule reads */
  double threshold;  /* block-wise iff frac16 >= threshold (or forced) */
  /* Heavy tile-rows split (a plan's decision; the selector leaves them 0): tile-rows over all
   * (b, h) of at least split_min_tiles tiles run as split_chunks chunks of at most
   * split_chunk_tiles, in split_ws bytes of workspace (0 when none is split) */
  int64_t split_rows, split_chunks, split_min_tiles, split_chunk_tiles;
  size_t split_ws;
  char why[768];
} stof_attn_choice;

/* The selector's rule (the paper's form): block-wise iff frac16 >= STOF_ATTN_SELECT_C /
 * log2(max(Sq, Sk) / 16)^2. The paper's constant is 1.2; ours is calibrated on an H200
 * (kernels/attention.c says from what). */
#define STOF_ATTN_SELECT_C 0.05

/** The selector: kernel and tile from the mask's statistics at tile 64, the shape and the
 *  device (dev NULL when unknown: then the portable kernels are assumed; on compute
 *  capability 9.0 block-wise runs the wgmma kernel unless opts->portable or a forced
 *  warps/stages setting it cannot take, or the mask has 32-wide blocks: from 72% of the
 *  non-empty 64-tiles with an empty key half at S >= 2048, tile 32 on the portable kernel,
 *  when neither warps nor a Hopper-only option is asked for). Respects whatever opts
 *  fixes. Tile 32 is block-wise only: asked for with kernel row, STOF_ERR_UNSUPPORTED. */
stof_status stof_attention_select(stof_ctx *ctx, const stof_mask_format *fmt64, int64_t B,
                                  int64_t H, int64_t D, const stof_cuda_props *dev,
                                  const stof_attn_opts *opts, stof_attn_choice *out);

/** The rest of a plan's decisions for choice c (from stof_attention_select; f the format at
 *  c->tile, dev the device): first the query shift (a Hopper choice at tile 64: c->qshift 32
 *  where the shifted format has at most 85% of the tiles or opts->qshift is 1, and then
 *  c->rowmask and c->halfskip decided again from the shifted tiles), then, from the format
 *  the plan runs, c's split_* fields, c->nopartial (the Hopper kernel without mask code where
 *  it has no partial tile) and, where nothing is split, c->heavy_rows (the launch order); the
 *  reasons appended to c->why (kernels/attention.c choose_qshift, kernels/attention_split.c).
 *  What stof_attn_plan_new does after the selector (which refuses split < -1); stof.explain
 *  shows it without a GPU. Errors (STOF_ERR_UNSUPPORTED): a forced split where the Hopper
 *  kernel is not chosen or whose workspace is past 1 GiB; qshift 1 where the Hopper kernel
 *  is not at tile 64 (or takes key64) or the format is past 64 MB. */
stof_status stof_attention_select_split(stof_ctx *ctx, const stof_mask_format *f, int64_t B, int64_t H, int64_t D,
                                        const stof_cuda_props *dev, const stof_attn_opts *opts,
                                        stof_attn_choice *c);

/* The GPU engine: compiled kernel variants (NVRTC, cubins cached on disk), formats. */
typedef struct stof_attn_engine stof_attn_engine;
typedef struct stof_attn_plan stof_attn_plan;

/** Owned: stof_attn_engine_free. Needs a GPU (STOF_ERR_NO_DEVICE otherwise). */
stof_status stof_attn_engine_new(stof_ctx *ctx, stof_attn_engine **out);
void stof_attn_engine_free(stof_attn_engine *e);

/**
 * Prepares attention of one shape and mask: builds the format (on the CPU; on the GPU
 * when max(Sq, Sk) >= STOF_FORMAT_GPU_MIN_S and the mask allows it), picks the kernel,
 * compiles it and copies the format to the GPU. Errors: a head dim other than 64 or 128
 * and dtypes other than f16/bf16 (STOF_ERR_UNSUPPORTED), H not a multiple of Hkv or
 * non-positive sizes (STOF_ERR_SHAPE). A mask that keeps nothing is no error: the
 * output is zeros. On the Hopper kernel, tile-rows far longer than the rest are split over
 * CTAs (opts->split; the choice's split_* fields): the plan then owns a device workspace of
 * choice.split_ws bytes, so one plan must not run on two streams at once. The engine
 * caches the format at the plan's tile for later plans; the tile-64 one the selector reads
 * is not kept on the device where the plan chose another tile.
 * Owned: stof_attn_plan_free (before the engine).
 */
stof_status stof_attn_plan_new(stof_attn_engine *e, const stof_mask *mask, int64_t B, int64_t H,
                               int64_t Hkv, int64_t Sq, int64_t Sk, int64_t D, stof_dtype dtype,
                               const stof_attn_opts *opts, stof_attn_plan **out);
/** Launches on the context's current stream (asynchronous). The tensors must be CUDA tensors of the
 *  plan's shapes and dtype (STOF_ERR_SHAPE / _TYPE / _ARG naming the argument), strided views
 *  allowed as stof_attn_plan_launch_strided takes them (t->strides: the layout). */
stof_status stof_attn_plan_run(stof_attn_plan *p, const stof_tensor *q, const stof_tensor *k,
                               const stof_tensor *v, stof_tensor *out);
/** stof_attn_plan_run with the modifier's tensor: the [H, num_buckets] table of T5_BIAS
 *  (required), the [H] slopes of ALIBI (NULL: the standard slopes, on a plan whose
 *  bias_dtype is float32), NULL otherwise; a CUDA tensor of the plan's bias_dtype, its last
 *  dim contiguous. */
stof_status stof_attn_plan_run_bias(stof_attn_plan *p, const stof_tensor *q, const stof_tensor *k,
                                    const stof_tensor *v, const stof_tensor *bias, stof_tensor *out);

/* Where element (b, h, s, d) of each tensor lives: Q at q + b * q[0] + h * q[1] + s * q[2] + d
 * (elements; d contiguous), K and V at their own strides with h their head (h / (H / Hkv) for
 * Q's head h), O like Q. Contiguous [B, H, S, D] is {H*S*D, S*D, D}; a head's view of a
 * [B, S, H*D] buffer is {S*H*D, D, H*D}; of a fused [B, S, 3, H, D] one (a GPT-2 c_attn
 * output; k and v at + H*D and + 2*H*D elements) {3*S*H*D, D, 3*H*D}. */
typedef struct stof_attn_layout {
  int64_t q[3], k[3], v[3], o[3]; /* {batch, head, row} strides in elements */
} stof_attn_layout;

/** Launches the plan on raw device addresses of tensors of its shapes and dtype laid out as l
 *  says (NULL: contiguous), on the context's current stream: no allocation, no
 *  synchronisation (capturable in a CUDA graph). Checked, since cheap: every address 16-byte
 *  aligned, every stride >= 0 and a multiple of 8 elements (16 bytes), row strides under
 *  2^24 elements (strides of dims of extent 1 are ignored); STOF_ERR_ARG naming the tensor
 *  otherwise. O's elements must not overlap each other or Q/K/V; nothing outside them is
 *  written (gaps between rows stay as they were). On a TMA plan the K/V tensor maps are
 *  encoded again only when the addresses or K/V strides change; where the driver refuses a
 *  layout (e.g. a zero stride) the plan's cp.async twin runs instead (compiled with it). */
stof_status stof_attn_plan_launch_strided(stof_attn_plan *p, uint64_t q, uint64_t k, uint64_t v,
                                          uint64_t out, const stof_attn_layout *l);
/** stof_attn_plan_launch_strided with the modifier's table or slopes at device address bias
 *  (0: none; see stof_attn_plan_run_bias), head h's at bias + h * bias_hs elements (a table
 *  row's buckets contiguous). A plan without a modifier ignores them. */
stof_status stof_attn_plan_launch_bias(stof_attn_plan *p, uint64_t q, uint64_t k, uint64_t v,
                                       uint64_t out, const stof_attn_layout *l, uint64_t bias,
                                       int64_t bias_hs);
/** stof_attn_plan_launch_strided with contiguous [B, H, S, D] tensors (l NULL). */
stof_status stof_attn_plan_launch(stof_attn_plan *p, uint64_t q, uint64_t k, uint64_t v,
                                  uint64_t out);
/** The context the plan's engine was made with. Borrowed. */
stof_ctx *stof_attn_plan_ctx(const stof_attn_plan *p);
/** The choice and its reasons. Borrowed. */
const stof_attn_choice *stof_attn_plan_choice(const stof_attn_plan *p);
/** The (query, key) pairs the mask keeps over all B x H: the useful work is
 *  4 * D * nvalid FLOPs. */
int64_t stof_attn_plan_nvalid(const stof_attn_plan *p);
/** Milliseconds spent building the format, compiling and uploading (reported apart from
 *  attention time). */
double stof_attn_plan_prepare_ms(const stof_attn_plan *p);
/** Device bytes of the plan's own copy of the mask format (row pointers, column indices,
 *  bitmap offsets, bitmaps): the query-shifted format's where the plan took the shift. */
size_t stof_attn_plan_format_bytes(const stof_attn_plan *p);
#define STOF_ATTN_TIME_MAX_SETS 8 /* input sets stof_attn_plan_time rotates over, at most */
#define STOF_ATTN_TIME_MAX_REPS 1000000   /* timed runs, at most */
#define STOF_ATTN_TIME_MAX_WARMUP_MS 60000 /* warm-up, at most (ms) */
/** Times the plan as stof's benchmarks do (DESIGN.md section 9; bench/bench_attention.c,
 *  AttnPlan:time, `stof bench attention`): 5 warm-up launches (the peers' scripts' warm-up),
 *  then more for about warmup_ms (0 to STOF_ATTN_TIME_MAX_WARMUP_MS; at most 10^6 launches: a
 *  few hundred ms bring an H200 to its power cap), then reps (1 to STOF_ATTN_TIME_MAX_REPS)
 *  runs, each between two device events on the context's current stream, their ms in
 *  ts[0 .. reps-1] in run order, and their median (the upper one for an even count) in
 *  *median_ms where median_ms is not NULL. Run r (and warm-up launch r) reads input set r %
 *  nset of q[], k[], v[] (1 to 8 sets: rotating the inputs, so that caches do not flatter);
 *  every run writes out. Synchronises. STOF_ERR_ARG for counts out of range; STOF_ERR_NOMEM
 *  where the median's sorted copy cannot be allocated (before any run); whatever
 *  stof_attn_plan_run returns (naming a wrong tensor) otherwise. Runs without a modifier's
 *  tensor: a T5-bias plan (which needs its table) fails with that error. */
stof_status stof_attn_plan_time(stof_attn_plan *p, stof_tensor *const *q, stof_tensor *const *k,
                                stof_tensor *const *v, int nset, stof_tensor *out, int64_t reps,
                                double warmup_ms, float *ts, float *median_ms);
void stof_attn_plan_free(stof_attn_plan *p);

/* ---------------------------------------------------------------- intrinsics */

/*
 * An intrinsic is an opaque kernel registered once (by name) with everything the rest of
 * stof needs to put it into a graph and run it: its CPU implementation (the CPU backend and
 * the reference), its GPU implementation (prepared once per op and knob setting, then
 * launched on raw device addresses: capturable, no allocation), and its knobs (tunable
 * parameters whose default decision the intrinsic's own selector makes). An extern op is
 * run by intrinsic op->intrin with parameters op->intrin_attrs (core/). Built in:
 * "attention" (kernels/intrinsic_attention.c).
 */
#define STOF_INTRIN_MAX_KNOBS 8
#define STOF_INTRIN_MAX_CAND 8
typedef struct stof_intrin_knob {
  const char *name;              /* "tile", "warps", ... */
  int ncand;
  int cand[STOF_INTRIN_MAX_CAND]; /* the values a search may try; 0 = "the selector's" */
} stof_intrin_knob;

typedef struct stof_intrin {
  const char *name;
  int nknob;
  stof_intrin_knob knob[STOF_INTRIN_MAX_KNOBS];
  /** CPU implementation: in[0..op->ninput) contiguous CPU tensors of the inputs' dtypes,
   *  out a contiguous CPU tensor of op's shape and dtype (poisoned by the caller). */
  stof_status (*cpu)(stof_ctx *ctx, const stof_op *op, const stof_tensor *const *in,
                     stof_tensor *out);
  /** A GPU instance for op. knobs[0..nknob): decisions, 0 for the selector's; on return
   *  they hold the decisions taken (the selector's filled in). *shared is the intrinsic's
   *  state shared by every instance of one runtime plan (created here when NULL, freed with
   *  shared_free after the instances). Owned: gpu_free. */
  stof_status (*gpu_new)(stof_ctx *ctx, const stof_op *op, int *knobs, void **shared,
                         void **inst);
  /** Launches on the context's current stream: in[i] the device address of input i, out the
   *  output's (contiguous). */
  stof_status (*gpu_launch)(void *inst, const uint64_t *in, uint64_t out);
  /** Optional: gpu_launch on strided views, strides[i] (elements, one per dim) for input i
   *  and strides[ninput] for the output; the runtime then reads inputs straight from the
   *  tensors they are views of (a head split of a GEMM's output) and writes the output into
   *  its reader's layout. NULL: the intrinsic takes contiguous tensors only. Its CPU
   *  implementation then takes strided tensors too. */
  stof_status (*gpu_launch_strided)(void *inst, const uint64_t *in, uint64_t out,
                                    const int64_t *const *strides);
  void (*gpu_free)(void *inst);
  void (*shared_free)(void *shared);
  /** What the instance chose and why, one line (borrowed from the instance). */
  const char *(*gpu_describe)(void *inst);
} stof_intrin;

/** The registered intrinsic name, or NULL. Borrowed, process-wide. */
const stof_intrin *stof_intrin_find(const char *name);
/** Registers an intrinsic (borrowed: it must outlive the process's use of it), process-wide.
 *  STOF_ERR_ARG when the name is taken or a required function is missing. Thread-safe. */
stof_status stof_intrin_register(stof_ctx *ctx, const stof_intrin *in);

/* The attention intrinsic's parameters (op->intrin_attrs). */
typedef struct stof_attn_attrs {
  const stof_mask *mask; /* borrowed: must outlive the graph */
  float scale;           /* 0: 1 / sqrt(D) */
  stof_attn_mod mod;     /* the score modifier (kind NONE, softcap 0: none); its table or
                            slopes, when it has one, are the op's 4th input */
} stof_attn_attrs;

/**
 * Puts sparse attention into graph g as an extern op run by the "attention" intrinsic:
 * q [B, H, Sq, D], k and v [B, Hkv, Sk, D] (H a multiple of Hkv), float dtypes, output
 * [B, H, Sq, D] of q's dtype; mask borrowed (must outlive g); scale 0 for 1/sqrt(D). The
 * interpreter evaluates it through the CPU implementation. STOF_ERR_SHAPE / _TYPE name the
 * argument. Borrowed op.
 */
stof_status stof_attention_op(stof_graph *g, const stof_op *q, const stof_op *k,
                              const stof_op *v, const stof_mask *mask, float scale,
                              const stof_op **out);
/**
 * stof_attention_op with a score modifier mod (copied; NULL: none): bias is the op's 4th
 * input, the [H, num_buckets] table of T5_BIAS (required) or the [H] slopes of ALIBI (NULL:
 * the standard slopes), a float op; NULL for other kinds. The GPU kernels do not have the
 * modifiers yet: a plan for the GPU refuses such an op (STOF_ERR_UNSUPPORTED); the CPU
 * backend and the interpreter run it. STOF_ERR_ARG / _SHAPE / _TYPE name the argument.
 * Borrowed op.
 */
stof_status stof_attention_op_ex(stof_graph *g, const stof_op *q, const stof_op *k,
                                 const stof_op *v, const stof_op *bias, const stof_mask *mask,
                                 float scale, const stof_attn_mod *mod, const stof_op **out);

/* ---------------------------------------------------------------- GEMM (cuBLASLt) */

/*
 * Dense GEMM as an intrinsic: the vendor library on the GPU (cuBLASLt, opened with dlopen
 * when the first plan is made), an f64-accumulating CPU implementation beside it. Row-major,
 * as Transformer Engine states it:
 *
 *   D[m, n] = act(alpha * sum_k A[m, k] B[k, n] + bias[n] + beta * C[m, n])
 *
 * A is stored [M, K] (trans_a 0) or [K, M] (trans_a 1); B is stored [K, N] (trans_b 0) or
 * [N, K] (trans_b 1: PyTorch's nn.Linear weight, [out, in]); C (the residual) and D are
 * [M, N]; bias has N elements. Every matrix is contiguous (its leading dimension is its
 * stored row length). batch (0 or 1: one product) products run at once, product i reading
 * A + i * stride_a, B + i * stride_b, C + i * stride_c and writing D + i * stride_c
 * (elements; a stride of 0 shares A or B across the batch; stride_c >= M * N); the bias is
 * shared. dtypes float16 and bfloat16 (f32 accumulation, alpha and beta in f32) and
 * float32 (true f32: never TF32); C, D and bias have the dtype of A and B.
 * GELU is the tanh approximation 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))), which
 * is what cuBLASLt computes; the CPU implementation computes the same (not the erf form).
 * X(name, text, adds bias, activation: 0 none, 1 relu, 2 gelu).
 */
#define STOF_GEMM_EPI_LIST(X)           \
  X(NONE, "none", 0, 0)                 \
  X(BIAS, "bias", 1, 0)                 \
  X(RELU, "relu", 0, 1)                 \
  X(RELU_BIAS, "relu_bias", 1, 1)       \
  X(GELU, "gelu", 0, 2)                 \
  X(GELU_BIAS, "gelu_bias", 1, 2)
typedef enum stof_gemm_epilogue {
#define STOF_X(name, text, bias, act) STOF_GEMM_EPI_##name,
  STOF_GEMM_EPI_LIST(STOF_X)
#undef STOF_X
  STOF_GEMM_EPI_COUNT
} stof_gemm_epilogue;
/** "relu_bias", ...; "?" out of range. Borrowed, static. */
const char *stof_gemm_epilogue_name(stof_gemm_epilogue e);
/** Whether the epilogue adds the bias vector. */
int stof_gemm_epilogue_has_bias(stof_gemm_epilogue e);

typedef struct stof_gemm_desc {
  int64_t M, N, K, batch;
  int trans_a, trans_b;
  stof_dtype dtype;
  stof_gemm_epilogue epi;
  float alpha, beta;
  int64_t stride_a, stride_b, stride_c; /* elements; read only when batch > 1 */
} stof_gemm_desc;

/** Checks a description: positive sizes, batch >= 0, trans flags 0 or 1, a known epilogue,
 *  finite alpha and beta, non-negative strides with stride_c >= M * N (STOF_ERR_ARG);
 *  float16, bfloat16 or float32 (STOF_ERR_UNSUPPORTED); every extent and byte count within
 *  int64 (STOF_ERR_ARG). The message names the field and its value. */
stof_status stof_gemm_check(stof_ctx *ctx, const stof_gemm_desc *d);

/**
 * The CPU implementation (the intrinsic's, and the reference the GPU is tested against):
 * f64 accumulation, the epilogue in f64, one rounding when storing into out. a, b, c, bias,
 * out: contiguous CPU tensors of any float dtype (read as their values: d->dtype does not
 * round them); a, b, c and out have the stored matrix's [rows, cols] as their last two
 * dims and hold the elements the batch strides reach ((batch - 1) * stride + rows * cols);
 * c may be NULL when beta is 0 (it is not read then); bias (N elements) may be NULL when
 * the epilogue adds none. out may not alias a, b or bias. STOF_ERR_ARG / _SHAPE / _TYPE
 * name the tensor.
 */
stof_status stof_gemm_cpu(stof_ctx *ctx, const stof_gemm_desc *d, const stof_tensor *a,
                          const stof_tensor *b, const stof_tensor *c, const stof_tensor *bias,
                          stof_tensor *out);

/* A GEMM planned on the GPU: cuBLASLt's descriptors and its heuristic's algorithms for one
 * description. Used by one thread at a time. */
typedef struct stof_gemm_plan stof_gemm_plan;
/** The most algorithms a plan keeps from cuBLASLt's heuristic, and the largest workspace
 *  it lets them ask for. */
#define STOF_GEMM_MAX_ALGO 8
#define STOF_GEMM_MAX_WORKSPACE ((size_t)32 << 20)

/**
 * Plans d on the GPU: checks it (stof_gemm_check), loads cuBLASLt (libcublasLt.so.13 / .12
 * from the library path, /usr/local/cuda/lib64, $CUDA_HOME/lib64 and the folder of the
 * loaded libnvrtc; one handle per process, created on first use), asks the heuristic for up
 * to STOF_GEMM_MAX_ALGO algorithms and takes the algo-th (0: the heuristic's best; a knob
 * for a search). Device pointers are promised 256-byte aligned (cuMemAlloc's alignment;
 * with a batch, the alignment the strides leave): the plan tells cuBLASLt so and the run
 * checks it. Owned: stof_gemm_plan_free.
 * STOF_ERR_NO_DEVICE without a GPU; STOF_ERR_UNSUPPORTED when cuBLASLt cannot be loaded
 * (the message lists what was tried) or has no algorithm for the shape (the message names
 * M, N, K, batch, the dtype, transposes and epilogue: run it with generated code then);
 * STOF_ERR_ARG for algo outside [0, stof_gemm_plan_nalgo); STOF_ERR_CUDA when cuBLASLt fails.
 */
stof_status stof_gemm_plan_new(stof_ctx *ctx, const stof_gemm_desc *d, int algo,
                               stof_gemm_plan **out);
/** The algorithms the heuristic returned (>= 1). */
int stof_gemm_plan_nalgo(const stof_gemm_plan *p);
/** Workspace bytes the plan's algorithm needs (<= STOF_GEMM_MAX_WORKSPACE); the caller
 *  provides it (exec/ shares one workspace between plans run on one stream). */
size_t stof_gemm_plan_workspace(const stof_gemm_plan *p);
/** The description planned. Borrowed. */
const stof_gemm_desc *stof_gemm_plan_desc(const stof_gemm_plan *p);
/**
 * Queues the GEMM on stream (NULL: the context's current stream) on device addresses a, b,
 * c (0 when beta is 0), bias (0 when the epilogue adds none), d (may equal c), workspace
 * (ws_bytes >= stof_gemm_plan_workspace; 0 when that is 0). No allocation, no
 * synchronisation: capturable in a CUDA graph. STOF_ERR_ARG names a missing or misaligned
 * pointer or a short workspace; STOF_ERR_CUDA when cuBLASLt refuses to launch.
 */
stof_status stof_gemm_plan_run(stof_gemm_plan *p, stof_cuda_stream *stream, uint64_t a,
                               uint64_t b, uint64_t c, uint64_t bias, uint64_t d,
                               uint64_t workspace, size_t ws_bytes);
void stof_gemm_plan_free(stof_gemm_plan *p);

/** The embedded text of a source under kernels/ (e.g. "attention_block.cu"), or NULL. */
const char *stof_kernels_source(const char *name);

#ifdef __cplusplus
}
#endif
#endif
