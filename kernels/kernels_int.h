/*
 * kernels module internals shared by mask.c, mask_format.c and mask_svg.c: the mask tree,
 * tile classification and tile filling, and a small string builder.
 *
 * A mask is a handle on the root of a tree of immutable mask nodes. Nodes are shared: a
 * combination points at its operands' roots and counts a reference on each (an atomic
 * count per node, so masks are freed in any order, from any thread), which makes combining
 * N masks cost O(N) memory. Leaves are the primitive kinds; named composites (longformer,
 * bigbird) are UNION nodes whose description is their name (atom = 1). sliding,
 * causal_sliding and causal are WINDOW nodes.
 *
 * Descriptions: a node's desc is exact while it is at most KERNELS_DESC_MAX characters;
 * a longer combination keeps the head of the exact text and ends with its structural hash
 * ("... #0123456789abcdef"), so that it stays short and distinct. Caches key on the exact
 * text, which kernels_mask_key writes out of the tree (linear in its size).
 */
#ifndef STOF_KERNELS_INT_H
#define STOF_KERNELS_INT_H

#include <stdatomic.h>

#include <stof/kernels.h>

/* Mask node kinds: X(name, text); the last three combine two masks. */
#define KERNELS_MASK_KIND_LIST(X)     \
  X(DENSE, "dense")                   \
  X(WINDOW, "window")                 \
  X(GLOBAL, "global")                 \
  X(RANDOM_BLOCKS, "random_blocks")   \
  X(DOCUMENT, "document")             \
  X(DILATED, "dilated")               \
  X(TENSOR, "from_tensor")            \
  X(FN, "fn")                         \
  X(UNION, "|")                       \
  X(INTERSECT, "&")                   \
  X(DIFF, "-")

typedef enum kernels_mask_kind {
#define KERNELS_X(name, text) KERNELS_MASK_##name,
  KERNELS_MASK_KIND_LIST(KERNELS_X)
#undef KERNELS_X
  KERNELS_MASK_KIND_COUNT
} kernels_mask_kind;

/* "causal" as a window: l this large never cuts a position. */
#define KERNELS_WINDOW_INF ((int64_t)1 << 60)

/* The longest description a node stores (then cut, with the node's hash). */
#define KERNELS_DESC_MAX 256

typedef struct kernels_mask_node kernels_mask_node;
struct kernels_mask_node {
  kernels_mask_kind kind;
  const char *desc; /* owned by the node (strlen + 1 bytes) */
  int atom;         /* printed without parentheses inside a combination */
  int varies_b, varies_h;
  int cacheable;    /* no fn node inside */
  int fill_need;    /* scratch tiles kernels_mask_fill needs below this node */
  int64_t depth;    /* 1 for a leaf, else 1 + the deeper operand's */
  uint64_t hash;    /* structural: equal for equal exact descriptions */
  stof_ctx *ctx;
  int cut;          /* desc is cut (binary nodes): the exact text is longer */
  atomic_long refs; /* the masks and nodes that point here */
  kernels_mask_node *next_dead; /* used while freeing */
  union {
    struct { int64_t l, r; } window;
    struct { int64_t g; } global;
    struct { int64_t b; double p; uint64_t seed; } rnd;
    struct {
      int64_t nbatch;
      const int64_t *seq_begin; /* [nbatch + 1]: batch b has sequences
                                   seq_begin[b] .. seq_begin[b + 1] */
      const int64_t *pos;       /* batch b's sequence k spans
                                   [pos[seq_begin[b] + b + k], pos[seq_begin[b] + b + k + 1]) */
      int64_t npos;             /* seq_begin[nbatch] + nbatch */
    } doc;
    struct { int64_t w, d; } dilated;
    struct {
      int64_t nb, nh, Sq, Sk, wpr; /* wpr: 64-bit words per row (of Sk bits) */
      const uint64_t *bits;        /* row (bb, hh, i) at ((bb * nh + hh) * Sq + i) * wpr */
    } tensor;
    struct { stof_mask_pred f; void *ud; } fn;
    struct { const kernels_mask_node *a, *b; } bin;
  } u;
};

struct stof_mask {
  stof_ctx *ctx;
  const kernels_mask_node *root; /* one reference counted on it */
  int cacheable;                 /* no fn node inside (root->cacheable) */
};

/* Writes the exact description of m (the cache key's mask part) into b. */
void kernels_mask_key(const stof_mask *m, stof_buf *b);

/* Tile classification: every element 0, every element 1, or unknown / mixed. */
enum { KERNELS_TILE_ZERO = 0, KERNELS_TILE_ONE = 1, KERNELS_TILE_MIXED = 2 };

/* A tile row of up to 128 columns: bit c of column c at [c >> 6] >> (c & 63). */
#define KERNELS_TILE_MAX 128
typedef uint64_t kernels_tile_row[2];

/* Element value (0/1, -1 when an fn predicate failed). */
int kernels_mask_node_eval(const kernels_mask_node *n, int64_t b, int64_t h, int64_t i,
                           int64_t j);
/* Classifies rows [i0, i1) x columns [j0, j1) (non-empty, inside the domain). */
int kernels_mask_classify(const kernels_mask_node *n, int64_t b, int64_t h, int64_t i0,
                          int64_t i1, int64_t j0, int64_t j1);
/* Exact bits of rows [i0, i0 + nrows) x columns [j0, j0 + ncols), nrows, ncols <= 128,
 * into rows[0 .. nrows) (bits past ncols are 0). 0, -1 when an fn predicate failed, -2
 * when the scratch of a deeply nested combination could not be allocated. */
int kernels_mask_fill(const kernels_mask_node *n, int64_t b, int64_t h, int64_t i0,
                      int nrows, int64_t j0, int ncols, kernels_tile_row *rows);
/* Checks that the mask fits a format of these dims; records the error (naming "who"). */
stof_status kernels_mask_check_dims(stof_ctx *ctx, const char *who, const stof_mask *m,
                                    int64_t B, int64_t H, int64_t Sq, int64_t Sk);

/* Sets columns [a, b) of a tile row (0 <= a <= b <= 128). */
static inline void kernels_row_set(uint64_t *row, int64_t a, int64_t b) {
  for (int w = 0; w < 2; w++) {
    int64_t lo = a > 64 * w ? a : 64 * w, hi = b < 64 * w + 64 ? b : 64 * w + 64;
    if (lo >= hi) continue;
    int n = (int)(hi - lo), s = (int)(lo - 64 * w);
    uint64_t m = n == 64 ? ~(uint64_t)0 : (((uint64_t)1 << n) - 1);
    row[w] |= m << s;
  }
}

/* The tile-64 format f with its query tiles moved up by 32 rows (its qshift 32): new tile-row
 * r holds queries [64 r - 32, 64 r + 32), from the lower half of f's row r - 1 and the upper
 * half of its row r, over the union of their key tiles (a tile full only where both halves
 * were). A mask whose rows need keys 32 off the tile grid (a window of 32 each side) takes
 * fewer 64-key steps so. f's arrays must be on the host; nvalid, density and frac16 are f's.
 * The tiles are counted first (*ntiles, where not NULL): past max_tiles (>= 0) nothing is
 * built and *out is NULL (no error). With max_tiles >= 0 a bound from the full tiles alone
 * comes first: where it is already past max_tiles, *ntiles is that bound and *counted (where
 * not NULL) 0, else 1 and *ntiles the count. Owned: stof_mask_format_free. For the Hopper
 * kernel's STOF_SM90_QSHIFT only (the CPU attention refuses it). */
stof_status kernels_format_qshift(stof_ctx *ctx, const stof_mask_format *f, int64_t max_tiles, int64_t *ntiles,
                                  int *counted, stof_mask_format **out);

/* ---------------------------------------------------------------- the format on the GPU */

/* The mask as the GPU evaluates it (mask_format_gpu.c, kernels in mask_format.cu): a flat
 * postfix program of leaves (dense, window, global, random_blocks, document, dilated)
 * and set operations. Owned: kernels_format_prog_free. STOF_ERR_UNSUPPORTED (with the
 * reason) for a mask holding a tensor or fn node, or a program past the device's limits. */
typedef struct kernels_format_prog kernels_format_prog;
stof_status kernels_format_prog_new(stof_ctx *ctx, const stof_mask *mask,
                                    kernels_format_prog **out);
void kernels_format_prog_free(kernels_format_prog *p);
int kernels_format_prog_nnode(const kernels_format_prog *p);
/* Stack slots the program needs. */
int kernels_format_prog_depth(const kernels_format_prog *p);
/* Whether the GPU builder's automatic choice for this program is its chunked kernels (a
 * global, random or document term: rows of many mixed tiles) rather than its row kernels
 * (only dense, window and dilated terms); kernels_format_kernels_choice. */
int kernels_format_prog_wants_chunks(const kernels_format_prog *p);
/* The device's own evaluator, compiled for the host: element (i, j) of batch element b
 * (0 or 1, as stof_mask_eval); the format word of the 8 x 8 inner tile at (i0, j0)
 * (bits outside [0, Sq) x [0, Sk) are 0); the class (KERNELS_TILE_*) of rows [i0, i1) x
 * columns [j0, j1). */
int kernels_format_prog_eval(const kernels_format_prog *p, int64_t b, int64_t i, int64_t j);
uint64_t kernels_format_prog_word(const kernels_format_prog *p, int64_t b, int64_t Sq,
                                  int64_t Sk, int64_t i0, int64_t j0);
int kernels_format_prog_classify(const kernels_format_prog *p, int64_t b, int64_t i0,
                                 int64_t i1, int64_t j0, int64_t j1);
/* The same word as kernels_format_prog_word, as the kernels get it: from the class of its
 * 8 x 8 elements where that settles it (mf_word_fast). */
uint64_t kernels_format_prog_word_fast(const kernels_format_prog *p, int64_t b, int64_t Sq,
                                       int64_t Sk, int64_t i0, int64_t j0);
/* Columns per item (a warp's chunk of a tile-row) of the kernels, for ncol >= 1 tiles of
 * tile T: a multiple of kernels_format_chunk_unit(T) = min(32, 2048 / (T/8)^2) (32 up to
 * tile 64, 8 at tile 128), at most MF_MAX_CHUNKS (256) items a row. */
int64_t kernels_format_chunk_cols(int64_t ncol, int T);
int64_t kernels_format_chunk_unit(int T);
/* Which of a tile's wpt words the kernels' word x of the t-th listed tile is
 * (mf_word_index). */
int kernels_format_word_index(int x, int t, int wpt);

/* A GPU format builder: the kernels compiled (cubin cache) and loaded once, and a small
 * LRU of the formats it built. Needs a GPU (STOF_ERR_NO_DEVICE). Owned:
 * kernels_format_gpu_free (frees the cached formats too). */
typedef struct kernels_format_gpu kernels_format_gpu;
stof_status kernels_format_gpu_new(stof_ctx *ctx, kernels_format_gpu **out);
void kernels_format_gpu_free(kernels_format_gpu *g);
/* Milliseconds the builder took to compile (or read from the cubin cache) and load. */
double kernels_format_gpu_setup_ms(const kernels_format_gpu *g);
/* The kernels the builder's last build ran: "rows" or "chunks". */
const char *kernels_format_gpu_last_kernels(const kernels_format_gpu *g);
/* Which kernels build the format of p with nrows tile-rows (*rows: 1 the row kernels, 0 the
 * chunked ones): STOF_FORMAT_GPU_KERNELS=rows or =chunks when set (anything else:
 * STOF_ERR_ARG naming it), else kernels_format_prog_wants_chunks; the chunked ones past 2^31
 * tile-rows (a grid's x), an error if rows were asked for. who names the caller. */
stof_status kernels_format_kernels_choice(stof_ctx *ctx, const char *who, const kernels_format_prog *p,
                                          int64_t nrows, int *rows);
/* As stof_mask_format_build_gpu, on this builder. Owned. */
stof_status kernels_format_gpu_build(kernels_format_gpu *g, const stof_mask *mask, int64_t B,
                                     int64_t H, int64_t Sq, int64_t Sk, int T,
                                     stof_mask_format **out);
/* The same through the builder's cache. Borrowed: valid until 8 further misses, its drop or
 * kernels_format_gpu_free. */
stof_status kernels_format_gpu_get(kernels_format_gpu *g, const stof_mask *mask, int64_t B,
                                   int64_t H, int64_t Sq, int64_t Sk, int T,
                                   const stof_mask_format **out);

/* The same kept on the device: *out holds the statistics and the tile-row arrays (row_ptr,
 * nfull, npartial) on the host, col_idx, bmp_off and bitmap NULL there; dev gets the device
 * addresses of row_ptr, col_idx, bmp_off and bitmap (owned: stof_cuda_mem_free each). The
 * arrays are the host build's, element for element. So a plan copies them device to device,
 * and a long-context format (BigBird at 128k: 719 MiB of bitmaps) never crosses the bus. */
stof_status kernels_format_gpu_build_dev(kernels_format_gpu *g, const stof_mask *mask, int64_t B,
                                         int64_t H, int64_t Sq, int64_t Sk, int T,
                                         stof_mask_format **out, uint64_t dev[4]);
/* The same through the builder's cache (entries apart from the host builds'). Borrowed, the
 * format and its 4 device addresses: valid until 8 further misses, its drop or
 * kernels_format_gpu_free. */
stof_status kernels_format_gpu_get_dev(kernels_format_gpu *g, const stof_mask *mask, int64_t B,
                                       int64_t H, int64_t Sq, int64_t Sk, int T,
                                       const stof_mask_format **out, const uint64_t **dev);
/* The format caches' key of (mask, B, H, Sq, Sk, T), with "|side" appended where side is not
 * NULL (the GPU cache's "host" / "device"), in *key (owned: strlen + 1 bytes); NULL for a
 * mask never cached (an fn mask). STOF_ERR_NOMEM if it cannot be built. */
stof_status kernels_format_cache_key(stof_ctx *ctx, const stof_mask *mask, int64_t B, int64_t H, int64_t Sq,
                                     int64_t Sk, int T, const char *side, char **key);
/* Removes and frees the cached formats of (mask, B, H, Sq, Sk, T), the host build's and the
 * on-device one's, where the cache holds them (else nothing, STOF_OK); a later get builds
 * them again. Pointers a get returned for them are invalid afterwards. STOF_ERR_NOMEM
 * (nothing removed) if the key cannot be built. */
stof_status kernels_format_gpu_drop(kernels_format_gpu *g, const stof_mask *mask, int64_t B, int64_t H,
                                    int64_t Sq, int64_t Sk, int T);
/* The formats the cache holds, and the device bytes of its on-device ones' 4 arrays. */
int kernels_format_gpu_count(const kernels_format_gpu *g);
size_t kernels_format_gpu_device_bytes(const kernels_format_gpu *g);

/* The tile grid of a format: tile rows and columns, and the mask instances. */
typedef struct kernels_format_dims {
  int64_t nrow, ncol, mask_b, mask_h, nmask;
} kernels_format_dims;

/* The format builders' argument checks (the CPU and the GPU builder report the same
 * statuses and messages, naming who), then the tile grid of (B, H, Sq, Sk, T), and the
 * size limits checked before anything is allocated: extents at most STOF_MASK_MAX_EXTENT,
 * at most STOF_MASK_FORMAT_MAX_TILES tiles, a worst case (every tile partial) of at most
 * STOF_MASK_FORMAT_MAX_BYTES, and for a mask holding an fn predicate at most
 * STOF_MASK_FN_MAX_EVALS elements. All in checked arithmetic. */
stof_status kernels_format_dims_check(stof_ctx *ctx, const char *who, const stof_mask *mask,
                                      const void *out, int64_t B, int64_t H, int64_t Sq,
                                      int64_t Sk, int T, kernels_format_dims *d);

/* The built-in intrinsics (kernels/intrinsic_*.c). */
extern const stof_intrin kernels_intrin_attention;
/* Checks a score modifier for the GPU kernels (m NULL: none): stof_attn_mod_check, and the
 * dtype of its table or slopes (float32 or the attention's dtype; STOF_ERR_TYPE). The same
 * with or without a GPU. */
stof_status kernels_attn_mod_gpu_check(stof_ctx *ctx, const stof_attn_mod *m, stof_dtype bias_dtype,
                                       stof_dtype dtype);

/* The attention engine's format caches (borrowed; *gpu NULL until a long sequence's format
 * was built on the GPU): the CPU's, and the GPU's (kernels/attention.c), for tests. */
void kernels_attn_engine_caches(const stof_attn_engine *e, stof_mask_cache **cpu, kernels_format_gpu **gpu);

/* A monotonic clock in milliseconds, for build and preparation times. */
double kernels_now_ms(void);

/* Heavy tile-rows of the Hopper kernel split across CTAs (kernels/attention_split.c; the
 * rule is documented there). The table the kernels read (split_t in
 * attention_block_sm90.cu), int32, at the offsets below:
 *   row_nchunk[nmask * nrow]: chunks of instance m's tile-row r at m * nrow + r (0: whole);
 *   chunk_ptr[nmask + 1]: instance m's chunks are chunk_ptr[m] .. chunk_ptr[m + 1] - 1;
 *   chunk[3 * nchunk]: chunk c = {tile-row, first entry, end entry} (global entry offsets
 *     as row_ptr's), the chunks of a row consecutive and in entry order;
 *   srow_ptr[nmask + 1], srow[3 * nsplit]: instance m's split rows, split row s = {tile-row,
 *     its first chunk counted from chunk_ptr[m], its chunks}.
 * The workspace holds a T x (D + 2) f32 partial per chunk slot and (b, h): ws_bytes =
 * B * H * nchunk_max * T * (D + 2) * 4. */
typedef struct kernels_attn_split {
  int32_t nsplit, nchunk;         /* split rows and chunks over all instances */
  int32_t nsplit_max, nchunk_max; /* the most of one instance: the grids' x */
  int64_t rows, chunks;           /* over all (b, h): what the choice reports */
  int64_t min_tiles, chunk_tiles; /* rows of >= min_tiles split into chunks of <= chunk_tiles */
  size_t ws_bytes;
  int32_t *table;                 /* owned (kernels_attn_split_free); NULL when nothing split */
  size_t ntable;
  int64_t off_row_nchunk, off_chunk_ptr, off_chunk, off_srow_ptr, off_srow;
  char why[256];                  /* "split 32 tile-rows of >= ...", or why not */
} kernels_attn_split;

/* Decides the split of a format's tile-rows (row_ptr of nmask instances x nrow rows, as
 * stof_mask_format) for B * H = BH pairs, tile T, head dim D, `slots` CTAs resident at once
 * on the device (<= 0: unknown, no automatic split), and split as stof_attn_opts.split
 * (-1 never, 0 the automatic rule, N > 0 every row of more than N tiles into chunks of at
 * most N). *out: nsplit == 0 when nothing is split (why says why). STOF_ERR_ARG for split
 * < -1; STOF_ERR_UNSUPPORTED when a forced split's workspace is past 1 GiB or overflows, or
 * its table past 2^31 - 1 entries (the automatic rule does not split then). Owned table. */
stof_status kernels_attn_split_plan(stof_ctx *ctx, const int32_t *row_ptr, int32_t nmask, int32_t nrow,
                                    int64_t BH, int T, int64_t D, int64_t slots, int split,
                                    kernels_attn_split *out);
void kernels_attn_split_free(stof_ctx *ctx, kernels_attn_split *s);

/* The NVRTC options the engine compiles a choice's kernel with (kernels/attention.c's
 * get_variant: D, dtype, the score modifier and its table's dtype, split 0 / 1 / 2 as there),
 * into o; returns their count (at most KERNELS_ATTN_MAX_OPTS; -1 if they would not fit). Exposed so that tests check
 * them against the selector's view without compiling, e.g. -DSTOF_MIN_BLOCKS=3 exactly where
 * kernels_attn_ctas_per_sm counts three. */
#define KERNELS_ATTN_MAX_OPTS 20 /* 18 at most today (a Hopper split plan with a modifier) */
#define KERNELS_ATTN_OPT_LEN 48
#define KERNELS_ATTN_KEY_LEN 448 /* the engine's cache key: the kernel's kind and its options */
int kernels_attn_variant_options(const stof_attn_choice *c, int64_t D, stof_dtype dtype, const stof_attn_mod *mod,
                                 stof_dtype bias_dtype, int split, char (*o)[KERNELS_ATTN_OPT_LEN]);
/* K / V layouts whose TMA maps a plan has encoded so far (its cache keeps the last 64: a run
 * over a layout it holds encodes nothing). Exposed for tests. */
int64_t kernels_attn_plan_tmap_encodes(const stof_attn_plan *p);
/* CTAs of a Hopper choice's kernel resident on one SM, as the split rule's launch balance
 * counts them (shared memory, and the registers its options allow), under score modifier mod. */
int64_t kernels_attn_ctas_per_sm(const stof_cuda_props *dev, const stof_attn_choice *c, int64_t D,
                                 const stof_attn_mod *mod);

/* The launch order of a plan's tile-rows (STOF_SM90_ORDER in the Hopper kernel, STOF_ORDER in
 * the block kernel at tile 32; the walk, order_cta, in attention_common.cuh; the rule in
 * kernels/attention_split.c): per instance m its nrow rows at table[m * nrow]:
 * its rows of at least 3x the instance's mean tiles (and 8), longest first, then its other
 * rows last first (the default order), or longest first where they are grouped. The first
 * nheavy of every instance (nheavy: the most heavy rows of one instance) are launched before
 * any other row of any (b, h); then the others `group` (b, h) pairs at a time: the group's
 * rank-k rows pair by pair, then rank k + 1 (group 1: pair by pair, each its rows in table
 * order). Grouped (group = group_max) where group_max > 1 and the other rows' tile counts span
 * at least 4 or group_forced (group_max: kernels_attn_order_group_max, the pairs whose K and
 * V fit 24 MB of L2, or what stof_attn_opts.order_group asks for).
 * nheavy == 0, group 1 and no table: the default order (why says why). Owned table. */
typedef struct kernels_attn_order {
  int32_t nheavy, group;
  int32_t *table;
  size_t ntable;
  char why[256];
} kernels_attn_order;
stof_status kernels_attn_order_plan(stof_ctx *ctx, const int32_t *row_ptr, int32_t nmask, int32_t nrow,
                                    int64_t group_max, int group_forced, kernels_attn_order *out);
/* The most (b, h) pairs of B x H = BH whose K and V (Sk x D each, 2-byte elements, as if no
 * pair shared them) fit 24 MB: 1 .. BH; 1 at tiles above 64 (measured slower there). */
int64_t kernels_attn_order_group_max(int64_t BH, int64_t Sk, int64_t D, int T);
void kernels_attn_order_free(stof_ctx *ctx, kernels_attn_order *o);

/* The non-empty 128-tiles of a tile-64 format (the work of key64, kernels/attention.c): from
 * its columns, or from its sizes where every 64-tile is non-empty; -1 where that is not known
 * (the columns stayed on the device, as a long sequence's format built there keeps them) or
 * the format is not at tile 64. Equals the nentry of the same mask's tile-128 format. */
int64_t kernels_attn_tiles128(const stof_mask_format *f);

#endif
