/*
 * The two-level mask format (include/stof/kernels.h) built on the GPU: the same layout and
 * statistics as the CPU builder (kernels/mask_format.c), bit for bit.
 *
 * The mask arrives as a flat program (built on the host by kernels/mask_format_gpu.c from
 * the mask tree): nodes in postfix order, leaves pushing a value, UNION / INTERSECT / DIFF
 * combining the top two. It is evaluated two ways, both mirrors of kernels/mask.c:
 *  - mf_classify: a tile is ZERO, ONE or MIXED (the analytic classification; ZERO and ONE
 *    only when they hold for every element);
 *  - mf_byte / mf_word: exact bits, eight columns of one row at a time.
 *
 * Three kernels, launched in order by the host, over items: a tile-row of an instance cut
 * into chunks of mf_chunk_cols columns (at most MF_MAX_CHUNKS a row), one warp per item, so
 * that a row of many mixed tiles (the global rows of longformer and bigbird, a document
 * boundary) is spread over many warps and a short S still fills the GPU:
 *  1. stof_mf_tiles: classifies every tile, computes the words of MIXED tiles to count their
 *     bits; writes each tile's state (empty, full, partial), the item's non-empty and
 *     partial counts, adds to the row's full and partial counts and to the statistics
 *     (atomics; the host zeroes them first).
 *  2. stof_mf_scan (one block): exclusive scans over all rows of all instances of the
 *     non-empty and partial counts: row_ptr and the first partial tile of every row.
 *  3. stof_mf_write: places the item's entries (its offsets: the row's plus its earlier
 *     items' counts): col_idx, bmp_off, and the bitmap words of its partial tiles.
 * Both passes get a word from mf_word_fast: the class of its 8 x 8 elements where that
 * settles it, else mf_word (most words of BigBird's random blocks are wholly in or out).
 *
 * stof_mf_tiles_rows and stof_mf_write_rows are the row kernels (the builder before chunks
 * and mf_word_fast: a block per tile-row, every word evaluated). They are faster where rows
 * are runs of tiles one classification settles (window-only masks: causal, sliding), the
 * chunked ones where rows hold many mixed tiles; the host picks by the program's terms
 * (kernels_format_kernels_choice in kernels/mask_format_gpu.c, with the measurements).
 *
 * The part above the kernels is plain C as well: kernels/mask_format_gpu.c includes this
 * file (with __CUDACC__ undefined) to get the very same evaluator as the host-side
 * interpreter that tests check against stof_mask_eval. So that part uses no header, no
 * C++, and only long long / unsigned long long (NVRTC has no <stdint.h>).
 *
 * Index widths: positions, tile origins and array offsets are 64-bit (Sq * Sk and
 * nmask * nrow * ncol exceed 2^31); the host guarantees Sq, Sk < 2^31, nrow and ncol <
 * 2^31, and fewer than 2^31 entries and bitmap words before it launches the scan.
 */

#if defined(__CUDACC__)
#define MF_FN __device__ __forceinline__
#else
#define MF_FN static inline
#endif

/* Program node kinds. */
enum {
  MF_DENSE = 0,
  MF_WINDOW = 1,    /* a <= j - i <= b */
  MF_GLOBAL = 2,    /* i < a or j < a */
  MF_RANDOM = 3,    /* block (i / a, j / a) kept with probability p; seed = mf_mix64(the
                       mask's seed), precomputed by the host */
  MF_DOC = 4,       /* doc + a: seq_begin [b + 1]; doc + c: positions (see mf_doc_of) */
  MF_DILATED = 5,   /* k = i - j: 0 <= k <= b and k % a == 0 */
  MF_UNION = 6,
  MF_INTERSECT = 7,
  MF_DIFF = 8,
  MF_KIND_COUNT = 9
};

/* Limits of a program (the host refuses longer or deeper ones). */
#define MF_MAX_NODES 256
#define MF_MAX_DEPTH 16

/* Threads per block of the kernels (the host launches with these). */
#define MF_TILE_THREADS 128
#define MF_SCAN_THREADS 1024
#define MF_WRITE_THREADS 128
#define MF_ROWS_WRITE_THREADS 256 /* stof_mf_write_rows */

/* Blocks an SM should hold (register caps: ptxas for sm_90 gives stof_mf_tiles 96 registers
 * with 56 bytes spilled, 20 warps an SM, where unbounded it takes 114, 16 warps;
 * stof_mf_write 80 and no spill, 24 warps, where unbounded it takes 64 and spills more).
 * The word evaluator waits on its local stack and hashes: warps hide that. */
#define MF_TILE_BLOCKS_PER_SM 5
#define MF_WRITE_BLOCKS_PER_SM 6

/* At most this many items (chunks of columns) per tile-row: the write pass sums an item's
 * earlier items (a lane each 32), so their number must stay small; 256 chunks of 32 columns
 * cover S = 512k at tile 64, of 8 columns S = 256k at tile 128. */
#define MF_MAX_CHUNKS 256

/* Tile classes (the values of KERNELS_TILE_*) and tile states. */
enum { MF_ZERO = 0, MF_ONE = 1, MF_MIXED = 2 };
enum { MF_EMPTY = 0, MF_FULL = 1, MF_PARTIAL = 2 };

/* One node: the same 48-byte layout in C and in CUDA C++. */
typedef struct mf_node {
  long long kind, a, b, c;
  unsigned long long seed;
  double p;
} mf_node;

/* The hash of kernels/mask.c (splitmix64's finaliser). */
MF_FN unsigned long long mf_mix64(unsigned long long z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Whether block (bi, bj) of a random node is kept; row_hash = mf_mix64(mf_mix64(seed) ^
 * bi), so that mf_mix64(row_hash ^ bj) is mask.c's block hash. p is in (0, 1). */
MF_FN int mf_block_kept(unsigned long long row_hash, long long bj, double p) {
  unsigned long long h = mf_mix64(row_hash ^ (unsigned long long)bj);
  return (double)(h >> 11) * 0x1p-53 < p;
}

/* Bits [lo, hi) of a byte (clipped to [0, 8)). */
MF_FN unsigned mf_range8(long long lo, long long hi) {
  if (lo < 0) lo = 0;
  if (hi > 8) hi = 8;
  if (lo >= hi) return 0;
  return ((1u << (unsigned)(hi - lo)) - 1u) << (unsigned)lo;
}

/* The sequence of position x in batch b of a document node: 0 .. ns - 1, or ns past the
 * last one (*nsp gets ns, *pp the batch's positions); -1 when b has no documents. */
MF_FN long long mf_doc_of(const mf_node *n, const long long *doc, long long b, long long x,
                          long long *nsp, const long long **pp) {
  long long nb = n->b, bb = nb > 1 ? b : 0;
  if (bb < 0 || bb >= nb) return -1;
  const long long *sb = doc + n->a;
  long long ns = sb[bb + 1] - sb[bb];
  const long long *p = doc + n->c + sb[bb] + bb;
  *nsp = ns;
  *pp = p;
  if (x >= p[ns]) return ns;
  long long lo = 0, hi = ns - 1; /* the largest k with p[k] <= x */
  while (lo < hi) {
    long long mid = (lo + hi + 1) / 2;
    if (p[mid] <= x) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

/* ---------------------------------------------------------------- exact bits */

/* Bit c of the result: element (i, j0 + c) of a leaf, for c in [0, 8); i, j0 >= 0. */
MF_FN unsigned mf_leaf_byte(const mf_node *n, const long long *doc, long long b, long long i,
                            long long j0) {
  switch (n->kind) {
  case MF_DENSE:
    return 0xffu;
  case MF_WINDOW: {
    long long d0 = j0 - i; /* j - i at c = 0 */
    return mf_range8(n->a - d0, n->b - d0 + 1);
  }
  case MF_GLOBAL:
    if (i < n->a) return 0xffu;
    return mf_range8(0, n->a - j0);
  case MF_RANDOM: {
    if (n->p >= 1) return 0xffu;
    if (n->p <= 0) return 0u;
    long long bs = n->a;
    unsigned long long rh = mf_mix64(n->seed ^ (unsigned long long)(i / bs));
    unsigned v = 0;
    for (long long j = j0; j < j0 + 8;) {
      long long len = bs - j % bs; /* to the end of j's block */
      if (len > j0 + 8 - j) len = j0 + 8 - j;
      if (mf_block_kept(rh, j / bs, n->p)) v |= mf_range8(j - j0, j - j0 + len);
      j += len;
    }
    return v;
  }
  case MF_DOC: {
    long long ns;
    const long long *p;
    long long di = mf_doc_of(n, doc, b, i, &ns, &p);
    if (di < 0 || di >= ns) return 0u;
    return mf_range8(p[di] - j0, p[di + 1] - j0);
  }
  case MF_DILATED: {
    unsigned v = 0;
    for (int c = 0; c < 8; c++) {
      long long k = i - (j0 + c);
      if (k >= 0 && k <= n->b && k % n->a == 0) v |= 1u << c;
    }
    return v;
  }
  default:
    return 0u;
  }
}

/* Elements (i, j0 .. j0 + 7) of the program's mask for batch element b, as bits 0 .. 7
 * (no clipping at Sk). */
MF_FN unsigned mf_byte(const mf_node *prog, int nnode, const long long *doc, long long b,
                       long long i, long long j0) {
  unsigned char st[MF_MAX_DEPTH];
  int sp = 0;
  for (int k = 0; k < nnode; k++) {
    const mf_node *n = &prog[k];
    if (n->kind >= MF_UNION) {
      if (sp < 2) return 0u; /* malformed (the host never builds one) */
      sp--;
      if (n->kind == MF_UNION) st[sp - 1] = (unsigned char)(st[sp - 1] | st[sp]);
      else if (n->kind == MF_INTERSECT) st[sp - 1] = (unsigned char)(st[sp - 1] & st[sp]);
      else st[sp - 1] = (unsigned char)(st[sp - 1] & ~st[sp]);
    } else {
      if (sp >= MF_MAX_DEPTH) return 0u;
      st[sp++] = (unsigned char)mf_leaf_byte(n, doc, b, i, j0);
    }
  }
  return sp == 1 ? st[0] : 0u;
}

/* The 8 x 8 inner tile at (i0, j0) as a format word: bit r * 8 + c is element
 * (i0 + r, j0 + c); elements outside [0, Sq) x [0, Sk) are 0. */
MF_FN unsigned long long mf_word(const mf_node *prog, int nnode, const long long *doc,
                                 long long b, long long Sq, long long Sk, long long i0,
                                 long long j0) {
  if (j0 >= Sk) return 0ull;
  unsigned cols = Sk - j0 >= 8 ? 0xffu : (1u << (unsigned)(Sk - j0)) - 1u;
  unsigned long long w = 0;
  for (int r = 0; r < 8 && i0 + r < Sq; r++)
    w |= (unsigned long long)(mf_byte(prog, nnode, doc, b, i0 + r, j0) & cols) << (8 * r);
  return w;
}

/* ---------------------------------------------------------------- classification */

/* A band lo <= j - i <= hi against the tile's range of j - i. */
MF_FN int mf_band(long long lo, long long hi, long long i0, long long i1, long long j0,
                  long long j1) {
  long long dmin = j0 - (i1 - 1), dmax = (j1 - 1) - i0;
  if (dmax < lo || dmin > hi) return MF_ZERO;
  if (dmin >= lo && dmax <= hi) return MF_ONE;
  return MF_MIXED;
}

/* Rows [i0, i1) x columns [j0, j1) (non-empty, inside the domain) of a leaf. */
MF_FN int mf_leaf_class(const mf_node *n, const long long *doc, long long b, long long i0,
                        long long i1, long long j0, long long j1) {
  switch (n->kind) {
  case MF_DENSE:
    return MF_ONE;
  case MF_WINDOW:
    return mf_band(n->a, n->b, i0, i1, j0, j1);
  case MF_GLOBAL: {
    long long g = n->a;
    if (i1 - 1 < g || j1 - 1 < g) return MF_ONE;
    if (i0 >= g && j0 >= g) return MF_ZERO;
    return MF_MIXED;
  }
  case MF_RANDOM: {
    if (n->p <= 0) return MF_ZERO;
    if (n->p >= 1) return MF_ONE;
    long long bs = n->a;
    long long bi0 = i0 / bs, bi1 = (i1 - 1) / bs, bj0 = j0 / bs, bj1 = (j1 - 1) / bs;
    if ((bi1 - bi0 + 1) * (bj1 - bj0 + 1) > 64) return MF_MIXED;
    int kept = 0, all = 0;
    for (long long bi = bi0; bi <= bi1; bi++) {
      unsigned long long rh = mf_mix64(n->seed ^ (unsigned long long)bi);
      for (long long bj = bj0; bj <= bj1; bj++, all++) kept += mf_block_kept(rh, bj, n->p);
    }
    return kept == 0 ? MF_ZERO : kept == all ? MF_ONE : MF_MIXED;
  }
  case MF_DOC: {
    long long ns;
    const long long *p;
    long long di0 = mf_doc_of(n, doc, b, i0, &ns, &p);
    if (di0 < 0) return MF_ZERO;
    long long di1 = mf_doc_of(n, doc, b, i1 - 1, &ns, &p);
    long long dj0 = mf_doc_of(n, doc, b, j0, &ns, &p), dj1 = mf_doc_of(n, doc, b, j1 - 1, &ns, &p);
    if (di0 == di1 && dj0 == dj1) return di0 == dj0 && di0 < ns ? MF_ONE : MF_ZERO;
    long long lo = di0 > dj0 ? di0 : dj0, hi = di1 < dj1 ? di1 : dj1;
    return lo <= hi && lo < ns ? MF_MIXED : MF_ZERO;
  }
  case MF_DILATED: {
    int k = mf_band(-n->b, 0, i0, i1, j0, j1);
    return k == MF_ONE && n->a > 1 ? MF_MIXED : k;
  }
  default:
    return MF_MIXED;
  }
}

/* The class of rows [i0, i1) x columns [j0, j1) under the whole program (as
 * kernels_mask_classify combines its children). */
MF_FN int mf_classify(const mf_node *prog, int nnode, const long long *doc, long long b,
                      long long i0, long long i1, long long j0, long long j1) {
  signed char st[MF_MAX_DEPTH];
  int sp = 0;
  for (int k = 0; k < nnode; k++) {
    const mf_node *n = &prog[k];
    if (n->kind >= MF_UNION) {
      if (sp < 2) return MF_MIXED;
      sp--;
      int a = st[sp - 1], c = st[sp], r;
      if (n->kind == MF_UNION)
        r = a == MF_ONE || c == MF_ONE ? MF_ONE
            : a == MF_ZERO && c == MF_ZERO ? MF_ZERO : MF_MIXED;
      else if (n->kind == MF_INTERSECT)
        r = a == MF_ZERO || c == MF_ZERO ? MF_ZERO
            : a == MF_ONE && c == MF_ONE ? MF_ONE : MF_MIXED;
      else
        r = a == MF_ZERO || c == MF_ONE ? MF_ZERO
            : a == MF_ONE && c == MF_ZERO ? MF_ONE : MF_MIXED;
      st[sp - 1] = (signed char)r;
    } else {
      if (sp >= MF_MAX_DEPTH) return MF_MIXED;
      st[sp++] = (signed char)mf_leaf_class(n, doc, b, i0, i1, j0, j1);
    }
  }
  return sp == 1 ? st[0] : MF_MIXED;
}

/* The word at (i0, j0) exactly as mf_word gives it, from the class of its 8 x 8 elements
 * (clipped to [0, Sq) x [0, Sk)) where that settles it: ZERO and ONE hold for every element.
 * A class costs about one row of mf_word (BigBird's random leaf: 2 hashes against 16), so
 * words wholly inside or outside the mask's parts come cheap; a MIXED one costs both. */
MF_FN unsigned long long mf_word_fast(const mf_node *prog, int nnode, const long long *doc,
                                      long long b, long long Sq, long long Sk, long long i0,
                                      long long j0) {
  if (i0 >= Sq || j0 >= Sk) return 0ull;
  long long nr = Sq - i0 < 8 ? Sq - i0 : 8, nc = Sk - j0 < 8 ? Sk - j0 : 8;
  int cls = mf_classify(prog, nnode, doc, b, i0, i0 + nr, j0, j0 + nc);
  if (cls == MF_ZERO) return 0ull;
  if (cls == MF_MIXED) return mf_word(prog, nnode, doc, b, Sq, Sk, i0, j0);
  /* nc ones in each of the nr rows (bytes, so the product has no carries) */
  return ((1ull << (unsigned)nc) - 1ull) * (0x0101010101010101ull >> (8 * (unsigned)(8 - nr)));
}

/* Word x of the t-th tile a warp lists (of wpt words: inner column ci = w / (T / 8), row ri =
 * w % (T / 8)). Dealt to lane x % 32 in list order, word x would give a lane the same ri in
 * every tile (32 is a multiple of T / 8), and a lane whose 8 rows hold a document boundary
 * every word that needs mf_word; turning each tile by t spreads them over the lanes. */
MF_FN int mf_word_index(int x, int t, int wpt) { return (x + t) % wpt; }

/* Columns per item of a tile-row of ncol tiles (>= 1) of tile T: a multiple of a unit, as
 * few as keep the row within MF_MAX_CHUNKS items. The unit is min(32, 2048 / (T/8)^2)
 * tiles: 32 (a warp's lanes classify one each) up to tile 64, where a chunk of mixed tiles
 * holds 2,048 words; fewer above, so that one warp's words per lane stay at most 64 (20 at
 * tile 80, 14 at 96, 10 at 112, 8 at 128; the other lanes idle in the classification).
 * Measured on an H100 with 32 columns at tile 128: document at 32k took 3.2 ms, 1.0 at
 * tile 64 (session 14). */
MF_FN long long mf_chunk_unit(int T) {
  long long wpt = (long long)(T / 8) * (T / 8), unit = 2048 / (wpt > 0 ? wpt : 1);
  return unit > 32 ? 32 : unit < 1 ? 1 : unit;
}
MF_FN long long mf_chunk_cols(long long ncol, int T) {
  long long unit = mf_chunk_unit(T), per = (ncol + MF_MAX_CHUNKS - 1) / MF_MAX_CHUNKS;
  per = (per + unit - 1) / unit * unit;
  return per > unit ? per : unit;
}

/* ---------------------------------------------------------------- kernels */

#if defined(__CUDACC__)

#define MF_TILE_WARPS (MF_TILE_THREADS / 32)
#define MF_FULL_MASK 0xffffffffu

/* Exclusive scan of v over the block (blockDim.x a multiple of 32, at most 1024); *total
 * gets the sum. Every thread must call it; s_warp is 32 words of shared memory. Ends
 * with a barrier, so s_warp can be reused at once. */
__device__ unsigned long long mf_block_scan(unsigned long long v, unsigned long long *total,
                                            unsigned long long *s_warp) {
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarp = blockDim.x >> 5;
  unsigned long long x = v;
  for (int o = 1; o < 32; o <<= 1) {
    unsigned long long y = __shfl_up_sync(MF_FULL_MASK, x, o);
    if (lane >= o) x += y;
  }
  if (lane == 31) s_warp[warp] = x;
  __syncthreads();
  if (warp == 0) {
    unsigned long long t = lane < nwarp ? s_warp[lane] : 0ull;
    for (int o = 1; o < 32; o <<= 1) {
      unsigned long long y = __shfl_up_sync(MF_FULL_MASK, t, o);
      if (lane >= o) t += y;
    }
    __syncwarp();
    s_warp[lane] = t; /* inclusive prefixes of the warp totals */
  }
  __syncthreads();
  unsigned long long before = warp ? s_warp[warp - 1] : 0ull;
  *total = s_warp[nwarp - 1];
  __syncthreads();
  return before + x - v;
}

/* One round of the tile pass over a warp's 32 columns from c0 (those below cend) of tile-row
 * (b, rows i0 .. i0 + nr): lane l classifies tile c0 + l and settles it at once where the class
 * does; the warp then counts the words of its mixed tiles together and settles them (kFast:
 * words from mf_word_fast, a listed tile's words dealt turned by its place, mf_word_index;
 * else mf_word in order, the row kernels). Writes st[c]; adds the lane's full and partial tiles
 * to full / part and its kept elements, non-empty 16 x 16 tiles and partial tiles with an
 * empty key half to valid, v16 and half. Every lane of the warp calls it (ballots); s_lane,
 * s_cnt, s_sub are the warp's 32-entry lists in shared memory. */
template <bool kFast, typename Count>
__device__ __forceinline__ void mf_tiles_round(const mf_node *prog, int nnode, const long long *doc, int T,
                                               long long Sq, long long Sk, long long b, long long i0,
                                               int nr, int c0, int cend, unsigned char *st,
                                               unsigned char *s_lane, int *s_cnt,
                                               unsigned long long *s_sub, unsigned long long sub_lo,
                                               unsigned long long sub_hi, Count &full, Count &part,
                                               unsigned long long &valid, unsigned long long &v16,
                                               unsigned long long &half) {
  int lane = threadIdx.x & 31;
  int n16 = T / 16, nb8 = T / 8, wpt = nb8 * nb8;
  int c = c0 + lane, cls = MF_ZERO, nc = 0;
  if (c < cend) {
    long long j0 = (long long)c * T;
    nc = (int)(Sk - j0 < T ? Sk - j0 : T);
    cls = mf_classify(prog, nnode, doc, b, i0, i0 + nr, j0, j0 + nc);
  }
  int edge = nr < T || nc < T, ismixed = c < cend && cls == MF_MIXED;
  if (c < cend && !ismixed) {
    unsigned char s = MF_EMPTY;
    if (cls == MF_ONE && !edge) {
      s = MF_FULL;
      full++;
      valid += (unsigned long long)T * T;
      v16 += (unsigned long long)n16 * n16;
    } else if (cls == MF_ONE) {
      s = MF_PARTIAL;
      part++;
      half += T % 32 == 0 && nc <= T / 2;
      valid += (unsigned long long)nr * nc;
      v16 += (unsigned long long)((nr + 15) / 16) * ((nc + 15) / 16);
    }
    st[c] = s;
  }
  unsigned mixed = __ballot_sync(MF_FULL_MASK, ismixed);
  if (!mixed) return; /* warp-uniform */

  /* the warp's mixed tiles, listed; their words spread over the lanes, tile-major */
  int nmixed = __popc(mixed), pos = __popc(mixed & ((1u << lane) - 1u));
  if (ismixed) s_lane[pos] = (unsigned char)lane;
  s_cnt[lane] = 0;
  s_sub[lane] = 0;
  __syncwarp();
  int curk = -1, cnt = 0;
  unsigned long long sub = 0;
  for (int x = lane; x < nmixed * wpt; x += 32) {
    int t = x / wpt, w = kFast ? mf_word_index(x - t * wpt, t, wpt) : x - t * wpt;
    if (t != curk) {
      if (curk >= 0 && cnt) {
        atomicAdd(&s_cnt[curk], cnt);
        atomicOr(&s_sub[curk], sub);
      }
      curk = t, cnt = 0, sub = 0;
    }
    int ci = w / nb8, ri = w - ci * nb8;
    long long cc = c0 + s_lane[t];
    unsigned long long word =
        kFast ? mf_word_fast(prog, nnode, doc, b, Sq, Sk, i0 + ri * 8, cc * T + ci * 8)
              : mf_word(prog, nnode, doc, b, Sq, Sk, i0 + ri * 8, cc * T + ci * 8);
    if (word) {
      cnt += __popcll(word);
      sub |= 1ull << ((ri >> 1) * n16 + (ci >> 1));
    }
  }
  if (curk >= 0 && cnt) {
    atomicAdd(&s_cnt[curk], cnt);
    atomicOr(&s_sub[curk], sub);
  }
  __syncwarp();
  if (ismixed) {
    int cn = s_cnt[pos];
    unsigned char s = MF_EMPTY;
    if (cn == T * T && !edge) {
      s = MF_FULL;
      full++;
      valid += (unsigned long long)cn;
      v16 += (unsigned long long)n16 * n16;
    } else if (cn > 0) {
      unsigned long long sub16 = s_sub[pos];
      s = MF_PARTIAL;
      part++;
      half += T % 32 == 0 && (!(sub16 & sub_lo) || !(sub16 & sub_hi));
      valid += (unsigned long long)cn;
      v16 += (unsigned long long)__popcll(sub16);
    }
    st[c] = s;
  }
  __syncwarp(); /* the lists are rewritten by the next round */
}

/* Grid-stride over items k = (m * nrow + r) * nchunk + q, k < nitem = nmask * nrow * nchunk,
 * a warp each, MF_TILE_THREADS a block; item q covers columns [q * chunk, q * chunk + chunk)
 * of tile-row (m, r). Writes state[(m * nrow + r) * ncol + c] for its tiles and count[k]
 * (non-empty tiles in the low 32 bits, partial tiles in the high 32), and adds to nfull and
 * npartial [m * nrow + r] and to stats {nvalid, non-empty 16 x 16 tiles, full tiles, partial
 * tiles, partial tiles with a key half [0, T/2) or [T/2, T) empty (T a multiple of 32;
 * mask_format.c's half_empty)}, all of which the host zeroes first. */
extern "C" __global__ void __launch_bounds__(MF_TILE_THREADS, MF_TILE_BLOCKS_PER_SM)
stof_mf_tiles(const mf_node *prog, int nnode, const long long *doc, int T, long long Sq,
              long long Sk, int nrow, int ncol, int chunk, int nchunk, int mask_b, int mask_h,
              long long nitem, unsigned char *state, int *nfull, int *npartial,
              unsigned long long *count, unsigned long long *stats) {
  __shared__ unsigned char s_lane[MF_TILE_WARPS][32];
  __shared__ int s_cnt[MF_TILE_WARPS][32];
  __shared__ unsigned long long s_sub[MF_TILE_WARPS][32];
  __shared__ unsigned long long s_tot[5];

  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int n16 = T / 16, nb8 = T / 8, wpt = nb8 * nb8;
  unsigned long long my_valid = 0, my_v16 = 0, my_full = 0, my_part = 0, my_half = 0;
  /* the 16 x 16 sub-tiles (bit r16 * n16 + c16) of the left and right key halves */
  unsigned long long sub_lo = 0, sub_hi = 0;
  for (int k = 0; T % 32 == 0 && k < n16 * n16; k++) (k % n16 < n16 / 2 ? sub_lo : sub_hi) |= 1ull << k;

  if (threadIdx.x < 5) s_tot[threadIdx.x] = 0;
  __syncthreads();

  /* k is the same for the whole warp: every branch below on it or on a ballot is uniform */
  for (long long k = (long long)blockIdx.x * MF_TILE_WARPS + warp; k < nitem;
       k += (long long)gridDim.x * MF_TILE_WARPS) {
    long long row = k / nchunk;
    int q = (int)(k - row * nchunk);
    int m = (int)(row / nrow), r = (int)(row % nrow);
    long long b = mask_b > 1 ? m / mask_h : 0;
    long long i0 = (long long)r * T;
    int nr = (int)(Sq - i0 < T ? Sq - i0 : T);
    unsigned char *st = state + row * ncol;
    int cbeg = q * chunk, cend = (int)((long long)cbeg + chunk < ncol ? cbeg + chunk : ncol);
    unsigned it_full = 0, it_part = 0; /* this lane's tiles of item k */
    for (int c0 = cbeg; c0 < cend; c0 += 32) {
      mf_tiles_round<true>(prog, nnode, doc, T, Sq, Sk, b, i0, nr, c0, cend, st, s_lane[warp],
                           s_cnt[warp], s_sub[warp], sub_lo, sub_hi, it_full, it_part, my_valid,
                           my_v16, my_half);
    }
    /* the warp's sums, packed (full low, partial high: each < 2^31, no carry); shuffles, not
     * __reduce_add_sync, which needs sm_80 and would fail the whole module's compilation
     * (the row kernels included) on a Turing GPU, where stof_mask_format_build_gpu ran */
    unsigned long long fp = (unsigned long long)it_full | ((unsigned long long)it_part << 32);
    for (int o = 16; o; o >>= 1) fp += __shfl_xor_sync(MF_FULL_MASK, fp, o);
    unsigned f = (unsigned)(fp & 0xffffffffull), p = (unsigned)(fp >> 32);
    my_full += it_full;
    my_part += it_part;
    if (lane == 0) {
      count[k] = (unsigned long long)(f + p) | ((unsigned long long)p << 32);
      if (f) atomicAdd(&nfull[row], (int)f);
      if (p) atomicAdd(&npartial[row], (int)p);
    }
  }

  if (my_valid) atomicAdd(&s_tot[0], my_valid);
  if (my_v16) atomicAdd(&s_tot[1], my_v16);
  if (my_full) atomicAdd(&s_tot[2], my_full);
  if (my_part) atomicAdd(&s_tot[3], my_part);
  if (my_half) atomicAdd(&s_tot[4], my_half);
  __syncthreads();
  if (threadIdx.x < 5 && s_tot[threadIdx.x]) atomicAdd(&stats[threadIdx.x], s_tot[threadIdx.x]);
}

/* The row kernels' tile pass (see the top of the file: window-only masks). Grid: nmask *
 * nrow blocks of MF_TILE_THREADS, block x = m * nrow + r. Writes state[(m * nrow + r) *
 * ncol + c] for every tile, nfull and npartial [m * nrow + r], and adds to stats as
 * stof_mf_tiles does. */
extern "C" __global__ void __launch_bounds__(MF_TILE_THREADS)
stof_mf_tiles_rows(const mf_node *prog, int nnode, const long long *doc, int T, long long Sq,
              long long Sk, int nrow, int ncol, int mask_b, int mask_h, unsigned char *state,
              int *nfull, int *npartial, unsigned long long *stats) {
  __shared__ unsigned char s_lane[MF_TILE_WARPS][32];
  __shared__ int s_cnt[MF_TILE_WARPS][32];
  __shared__ unsigned long long s_sub[MF_TILE_WARPS][32];
  __shared__ unsigned long long s_tot[5];

  long long row = blockIdx.x;
  int m = (int)(row / nrow), r = (int)(row % nrow);
  long long b = mask_b > 1 ? m / mask_h : 0;
  long long i0 = (long long)r * T;
  int nr = (int)(Sq - i0 < T ? Sq - i0 : T);
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int n16 = T / 16, nb8 = T / 8, wpt = nb8 * nb8;
  unsigned char *st = state + row * ncol;
  unsigned long long my_valid = 0, my_v16 = 0, my_full = 0, my_part = 0, my_half = 0;
  /* the 16 x 16 sub-tiles (bit r16 * n16 + c16) of the left and right key halves */
  unsigned long long sub_lo = 0, sub_hi = 0;
  for (int k = 0; T % 32 == 0 && k < n16 * n16; k++) (k % n16 < n16 / 2 ? sub_lo : sub_hi) |= 1ull << k;

  if (threadIdx.x < 5) s_tot[threadIdx.x] = 0;
  __syncthreads();

  for (int c0 = warp * 32; c0 < ncol; c0 += MF_TILE_THREADS) {
    mf_tiles_round<false>(prog, nnode, doc, T, Sq, Sk, b, i0, nr, c0, ncol, st, s_lane[warp],
                          s_cnt[warp], s_sub[warp], sub_lo, sub_hi, my_full, my_part, my_valid,
                          my_v16, my_half);
  }

  if (my_valid) atomicAdd(&s_tot[0], my_valid);
  if (my_v16) atomicAdd(&s_tot[1], my_v16);
  if (my_full) atomicAdd(&s_tot[2], my_full);
  if (my_part) atomicAdd(&s_tot[3], my_part);
  if (my_half) atomicAdd(&s_tot[4], my_half);
  __syncthreads();
  if (threadIdx.x == 0) {
    nfull[row] = (int)s_tot[2];
    npartial[row] = (int)s_tot[3];
    for (int k = 0; k < 5; k++)
      if (s_tot[k]) atomicAdd(&stats[k], s_tot[k]);
  }
}

/* One block of MF_SCAN_THREADS. Over the rows k = m * nrow + r of all instances:
 * row_ptr[m * (nrow + 1) + r] = non-empty tiles before row k (all instances before m
 * included), row_ptr[m * (nrow + 1) + nrow] = the same after m's last row, part_ptr[k] =
 * partial tiles before row k. Both sums stay below 2^31 (checked by the host), so they
 * travel packed in one 64-bit value (non-empty low, partial high). */
extern "C" __global__ void __launch_bounds__(MF_SCAN_THREADS)
stof_mf_scan(const int *nfull, const int *npartial, int nmask, int nrow, int *row_ptr,
             int *part_ptr) {
  __shared__ unsigned long long s_warp[32];
  long long n = (long long)nmask * nrow;
  unsigned long long carry = 0;
  for (long long base = 0; base < n; base += blockDim.x) {
    long long k = base + threadIdx.x;
    unsigned long long v = 0;
    if (k < n)
      v = (unsigned long long)(nfull[k] + npartial[k]) |
          ((unsigned long long)npartial[k] << 32);
    unsigned long long total;
    unsigned long long ex = carry + mf_block_scan(v, &total, s_warp);
    if (k < n) {
      long long m = k / nrow, r = k % nrow;
      row_ptr[m * (nrow + 1) + r] = (int)(ex & 0xffffffffull);
      part_ptr[k] = (int)(ex >> 32);
      if (r == nrow - 1) row_ptr[m * (nrow + 1) + nrow] = (int)((ex + v) & 0xffffffffull);
    }
    carry += total;
  }
}

/* Grid-stride over the items of stof_mf_tiles (same nitem, chunk, nchunk), a warp each,
 * MF_WRITE_THREADS a block. Places the non-empty tiles of item k in column order: its first
 * entry and partial tile are its row's (row_ptr, part_ptr) plus the counts of the row's
 * earlier items (count, fewer than MF_MAX_CHUNKS of them); writes col_idx, bmp_off (-1 or
 * the first word of a partial tile), and the words of partial tiles (column-major inner
 * tiles). */
extern "C" __global__ void __launch_bounds__(MF_WRITE_THREADS, MF_WRITE_BLOCKS_PER_SM)
stof_mf_write(const mf_node *prog, int nnode, const long long *doc, int T, long long Sq,
              long long Sk, int nrow, int ncol, int chunk, int nchunk, int mask_b, int mask_h,
              long long nitem, const unsigned char *state, const int *row_ptr,
              const int *part_ptr, const unsigned long long *count, int *col_idx,
              int *bmp_off, unsigned long long *bitmap) {
  __shared__ int s_col[MF_WRITE_THREADS / 32][32];
  __shared__ long long s_off[MF_WRITE_THREADS / 32][32];

  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int nb8 = T / 8, wpt = nb8 * nb8;
  unsigned below = (1u << lane) - 1u;
  for (long long k = (long long)blockIdx.x * (MF_WRITE_THREADS / 32) + warp; k < nitem;
       k += (long long)gridDim.x * (MF_WRITE_THREADS / 32)) {
    long long row = k / nchunk;
    int q = (int)(k - row * nchunk);
    int m = (int)(row / nrow), r = (int)(row % nrow);
    long long b = mask_b > 1 ? m / mask_h : 0;
    long long i0 = (long long)r * T;
    const unsigned char *st = state + row * ncol;
    int cbeg = q * chunk, cend = (int)((long long)cbeg + chunk < ncol ? cbeg + chunk : ncol);
    /* the row's earlier items: packed sums cannot carry (a row has < 2^31 tiles) */
    unsigned long long before = 0;
    for (int x = lane; x < q; x += 32) before += count[row * nchunk + x];
    for (int o = 16; o; o >>= 1) before += __shfl_xor_sync(MF_FULL_MASK, before, o);
    long long e_next = row_ptr[(long long)m * (nrow + 1) + r] + (long long)(before & 0xffffffffull);
    long long p_next = part_ptr[row] + (long long)(before >> 32);

    for (int c0 = cbeg; c0 < cend; c0 += 32) {
      int c = c0 + lane;
      int s = c < cend ? st[c] : MF_EMPTY;
      unsigned ne = __ballot_sync(MF_FULL_MASK, s != MF_EMPTY);
      unsigned pa = __ballot_sync(MF_FULL_MASK, s == MF_PARTIAL);
      if (s != MF_EMPTY) {
        long long e = e_next + __popc(ne & below);
        col_idx[e] = c;
        if (s == MF_PARTIAL) {
          int t = __popc(pa & below);
          long long off = (p_next + t) * wpt;
          bmp_off[e] = (int)off;
          s_col[warp][t] = c;
          s_off[warp][t] = off;
        } else {
          bmp_off[e] = -1;
        }
      }
      __syncwarp();
      int np = __popc(pa);
      for (int x = lane; x < np * wpt; x += 32) {
        int t = x / wpt, w = mf_word_index(x - t * wpt, t, wpt), ci = w / nb8, ri = w - ci * nb8;
        bitmap[s_off[warp][t] + w] = mf_word_fast(prog, nnode, doc, b, Sq, Sk, i0 + ri * 8,
                                                  (long long)s_col[warp][t] * T + ci * 8);
      }
      e_next += __popc(ne);
      p_next += np;
      __syncwarp(); /* s_col / s_off are rewritten by the next round */
    }
  }
}

/* The row kernels' write pass (window-only masks). Grid: nmask * nrow blocks of
 * MF_ROWS_WRITE_THREADS. Places the non-empty tiles of row (m, r) in column order from
 * row_ptr and part_ptr, as stof_mf_write does. */
extern "C" __global__ void __launch_bounds__(MF_ROWS_WRITE_THREADS)
stof_mf_write_rows(const mf_node *prog, int nnode, const long long *doc, int T, long long Sq,
              long long Sk, int nrow, int ncol, int mask_b, int mask_h,
              const unsigned char *state, const int *row_ptr, const int *part_ptr,
              int *col_idx, int *bmp_off, unsigned long long *bitmap) {
  __shared__ unsigned long long s_warp[32];
  __shared__ int s_col[MF_ROWS_WRITE_THREADS];
  __shared__ long long s_off[MF_ROWS_WRITE_THREADS];

  long long row = blockIdx.x;
  int m = (int)(row / nrow), r = (int)(row % nrow);
  long long b = mask_b > 1 ? m / mask_h : 0;
  long long i0 = (long long)r * T;
  int nb8 = T / 8, wpt = nb8 * nb8;
  const unsigned char *st = state + row * ncol;
  long long e_next = row_ptr[(long long)m * (nrow + 1) + r], p_next = part_ptr[row];

  for (int c0 = 0; c0 < ncol; c0 += MF_ROWS_WRITE_THREADS) {
    int c = c0 + (int)threadIdx.x;
    int s = c < ncol ? st[c] : MF_EMPTY;
    /* non-empty count in the low half, partial count in the high half */
    unsigned long long v = (unsigned long long)(s != MF_EMPTY) |
                           ((unsigned long long)(s == MF_PARTIAL) << 32);
    unsigned long long total;
    unsigned long long ex = mf_block_scan(v, &total, s_warp);
    if (s != MF_EMPTY) {
      long long e = e_next + (long long)(ex & 0xffffffffull);
      col_idx[e] = c;
      if (s == MF_PARTIAL) {
        int k = (int)(ex >> 32);
        long long off = (p_next + k) * wpt;
        bmp_off[e] = (int)off;
        s_col[k] = c;
        s_off[k] = off;
      } else {
        bmp_off[e] = -1;
      }
    }
    __syncthreads();
    int np = (int)(total >> 32);
    for (int q = (int)threadIdx.x; q < np * wpt; q += MF_ROWS_WRITE_THREADS) {
      int k = q / wpt, w = q - k * wpt, ci = w / nb8, ri = w - ci * nb8;
      bitmap[s_off[k] + w] =
          mf_word(prog, nnode, doc, b, Sq, Sk, i0 + ri * 8, (long long)s_col[k] * T + ci * 8);
    }
    e_next += (long long)(total & 0xffffffffull);
    p_next += np;
    __syncthreads(); /* s_col / s_off are rewritten by the next round */
  }
}

#endif
