/*
 * Sparse attention as an intrinsic: the CPU implementation (walks the two-level format),
 * the selector (block-wise vs row-wise, tile size), and the GPU engine that compiles the
 * hand-written kernels (kernels/attention_*.cu, embedded) with NVRTC and launches them on
 * a format copied to the GPU. A plan fixes one shape and mask, so the format build,
 * compilation and upload (reported apart) stay out of the timed launch.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels_int.h"

static const char *const kernel_names[] = {
#define STOF_X(name, text) text,
    STOF_ATTN_KERNEL_LIST(STOF_X)
#undef STOF_X
};

const char *stof_attn_kernel_name(stof_attn_kernel k) {
  return (unsigned)k < STOF_ATTN_KERNEL_COUNT ? kernel_names[k] : "?";
}

extern const struct stof_embedded_source {
  const char *name;
  const char *text;
} stof_embedded_sources[];

const char *stof_kernels_source(const char *name) {
  for (const struct stof_embedded_source *s = stof_embedded_sources; s->name; s++)
    if (strcmp(s->name, name) == 0) return s->text;
  return NULL;
}


/* ---------------------------------------------------------------- shapes */

/* Checks q [B, H, Sq, D], k and v [B, Hkv, Sk, D], out like q; fills dims[6] =
 * {B, H, Hkv, Sq, Sk, D}. */
static stof_status check_shapes(stof_ctx *ctx, const char *who, const stof_tensor *q,
                                const stof_tensor *k, const stof_tensor *v,
                                const stof_tensor *out, int64_t dims[6]) {
  const stof_tensor *t[4] = {q, k, v, out};
  static const char *const names[4] = {"q", "k", "v", "out"};
  for (int i = 0; i < 4; i++) {
    if (!t[i]) return stof_ctx_error(ctx, STOF_ERR_ARG, "%s: missing tensor %s", who, names[i]);
    if (t[i]->ndim != 4)
      return stof_ctx_error(ctx, STOF_ERR_SHAPE, "%s: %s has %d dimensions, [B, H, S, D] expected",
                            who, names[i], t[i]->ndim);
  }
  int64_t B = q->shape[0], H = q->shape[1], Sq = q->shape[2], D = q->shape[3];
  int64_t Hkv = k->shape[1], Sk = k->shape[2];
  if (k->shape[0] != B || k->shape[3] != D)
    return stof_ctx_error(ctx, STOF_ERR_SHAPE, "%s: k is [%lld, %lld, %lld, %lld], q is [%lld, %lld, %lld, %lld]: batch and head dim must agree",
                          who, (long long)k->shape[0], (long long)k->shape[1], (long long)k->shape[2],
                          (long long)k->shape[3], (long long)B, (long long)H, (long long)Sq, (long long)D);
  if (memcmp(v->shape, k->shape, sizeof k->shape[0] * 4))
    return stof_ctx_error(ctx, STOF_ERR_SHAPE, "%s: v must have k's shape", who);
  if (memcmp(out->shape, q->shape, sizeof q->shape[0] * 4))
    return stof_ctx_error(ctx, STOF_ERR_SHAPE, "%s: out must have q's shape", who);
  if (Hkv <= 0 || H % Hkv != 0)
    return stof_ctx_error(ctx, STOF_ERR_SHAPE, "%s: %lld query heads is not a multiple of %lld key/value heads",
                          who, (long long)H, (long long)Hkv);
  dims[0] = B, dims[1] = H, dims[2] = Hkv, dims[3] = Sq, dims[4] = Sk, dims[5] = D;
  return STOF_OK;
}

/* ---------------------------------------------------------------- CPU */

static int format_bit(const stof_mask_format *f, int32_t e, int64_t ii, int64_t jj) {
  if (f->bmp_off[e] < 0) return 1;
  int64_t nt = f->T / 8;
  uint64_t w = f->bitmap[f->bmp_off[e] + (jj / 8) * nt + ii / 8];
  return (int)((w >> ((ii % 8) * 8 + jj % 8)) & 1);
}

/* ---------------------------------------------------------------- score modifiers */

static const char *const mod_names[] = {
#define STOF_X(name, text) text,
    STOF_ATTN_MOD_LIST(STOF_X)
#undef STOF_X
};

const char *stof_attn_mod_name(stof_attn_mod_kind k) {
  return (unsigned)k < STOF_ATTN_MOD_COUNT ? mod_names[k] : "?";
}

int64_t stof_attn_t5_bucket(int64_t rel, int bidirectional, int num_buckets, int max_distance) {
  int64_t nb = num_buckets, bucket = 0, n;
  if (bidirectional) {
    nb /= 2;
    if (rel > 0) bucket = nb;
    n = rel < 0 ? -rel : rel;
  } else {
    n = rel < 0 ? -rel : 0;
  }
  int64_t max_exact = nb / 2;
  if (max_exact < 1 || max_distance <= max_exact) return -1;
  if (n < max_exact) return bucket + n;
  /* PyTorch's float32 steps: log(n.float() / max_exact) / log(max_distance / max_exact)
   * (the double constant rounded to float32) * (nb - max_exact), truncated */
  float x = (float)n / (float)max_exact;
  float r = logf(x) / (float)log((double)max_distance / (double)max_exact);
  r = r * (float)(nb - max_exact);
  int64_t large = max_exact + (int64_t)r;
  return bucket + (large < nb - 1 ? large : nb - 1);
}

double stof_attn_alibi_slope(int64_t H, int64_t h) {
  if (H <= 0 || h < 0 || h >= H) return 0;
  int64_t P = 1;
  while (P * 2 <= H) P *= 2;
  if (h < P) return pow(2.0, -8.0 * (double)(h + 1) / (double)P);
  return pow(2.0, -4.0 * (double)(2 * (h - P) + 1) / (double)P); /* 2P's slopes 1, 3, 5, ... */
}

stof_status stof_attn_mod_check(stof_ctx *ctx, const char *who, const stof_attn_mod *m) {
  if (!m) return STOF_OK;
  if ((unsigned)m->kind >= STOF_ATTN_MOD_COUNT)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "%s: unknown score modifier kind %d", who, (int)m->kind);
  if (!(m->softcap >= 0) || isinf(m->softcap))
    return stof_ctx_error(ctx, STOF_ERR_ARG, "%s: softcap %g (a positive number, or 0 for none)", who,
                          (double)m->softcap);
  if (m->kind == STOF_ATTN_MOD_T5_BIAS) {
    int min = m->bidirectional ? 4 : 2;
    if (m->num_buckets < min)
      return stof_ctx_error(ctx, STOF_ERR_ARG, "%s: %d buckets: a %s T5 bias needs at least %d", who, m->num_buckets,
                            m->bidirectional ? "bidirectional" : "unidirectional", min);
    int max_exact = (m->bidirectional ? m->num_buckets / 2 : m->num_buckets) / 2;
    if (m->max_distance <= max_exact)
      return stof_ctx_error(ctx, STOF_ERR_ARG, "%s: max_distance %d must exceed the exact buckets (%d at %d buckets)",
                            who, m->max_distance, max_exact, m->num_buckets);
  }
  return STOF_OK;
}

/* Whether a score modifier is absent: no table, no ALiBi, no soft cap. */
static int mod_plain(const stof_attn_mod *m) { return m->kind == STOF_ATTN_MOD_NONE && !(m->softcap > 0); }

const char *stof_attn_mod_describe(const stof_attn_mod *m, char *buf, size_t n) {
  if (!n) return buf;
  buf[0] = 0;
  size_t len = 0;
#define ADD(...)                                                                      \
  do {                                                                                \
    if (len < n) len += (size_t)snprintf(buf + len, n - len, __VA_ARGS__);            \
  } while (0)
  if (!m || mod_plain(m)) {
    ADD("none");
    return buf;
  }
  if (m->softcap > 0) ADD("tanh soft cap %g on the scaled scores", (double)m->softcap);
  if (m->kind == STOF_ATTN_MOD_T5_BIAS)
    ADD("%sT5 relative position bias (%s, %d buckets, max distance %d) looked up in the kernel from the "
        "[H, %d] table by offset j - i", m->softcap > 0 ? ", then " : "",
        m->bidirectional ? "bidirectional" : "unidirectional", m->num_buckets, m->max_distance, m->num_buckets);
  else if (m->kind == STOF_ATTN_MOD_ALIBI)
    ADD("%sALiBi: slope[h] * (j - i) added in the kernel", m->softcap > 0 ? ", then " : "");
  ADD("; compiled into the kernel (a kernel without a modifier has none of this code)");
#undef ADD
  return buf;
}

/* The bias each (query head h, offset j - i) gets, for every offset of [-(Sq - 1), Sk - 1]:
 * rel[h * nrel + (j - i) + Sq - 1]. O(H (Sq + Sk)), never Sq x Sk. */
static stof_status bias_by_offset(stof_ctx *ctx, const stof_attn_mod *m, const stof_tensor *bias, int64_t H,
                                  int64_t Sq, int64_t Sk, double **out, size_t *bytes) {
  const char *who = "attention (cpu)";
  *out = NULL;
  *bytes = 0;
  if (m->kind == STOF_ATTN_MOD_NONE) {
    if (bias) return stof_ctx_error(ctx, STOF_ERR_ARG, "%s: a bias tensor without a modifier that reads one", who);
    return STOF_OK;
  }
  if (bias && bias->device != STOF_DEVICE_CPU)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "%s: the bias is a CUDA tensor: the CPU implementation takes CPU tensors", who);
  if (bias && !stof_dtype_is_float(bias->dtype))
    return stof_ctx_error(ctx, STOF_ERR_TYPE, "%s: the bias is %s, a float dtype is needed", who,
                          stof_dtype_name(bias->dtype));
  if (m->kind == STOF_ATTN_MOD_T5_BIAS) {
    if (!bias) return stof_ctx_error(ctx, STOF_ERR_ARG, "%s: the T5 bias needs its [H, buckets] table", who);
    if (bias->ndim != 2 || bias->shape[0] != H || bias->shape[1] != m->num_buckets)
      return stof_ctx_error(ctx, STOF_ERR_SHAPE, "%s: the T5 bias table must be [H, buckets] = [%lld, %d]", who,
                            (long long)H, m->num_buckets);
  } else if (bias && (bias->ndim != 1 || bias->shape[0] != H)) {
    return stof_ctx_error(ctx, STOF_ERR_SHAPE, "%s: the ALiBi slopes must be [H] = [%lld]", who, (long long)H);
  }
  int64_t nrel = Sq + Sk - 1;
  size_t n = (size_t)(H * nrel);
  double *rel = stof_ctx_alloc(ctx, sizeof *rel * n);
  if (!rel) return STOF_ERR_NOMEM;
  for (int64_t h = 0; h < H; h++)
    for (int64_t r = 0; r < nrel; r++) {
      int64_t off = r - (Sq - 1);
      double v;
      if (m->kind == STOF_ATTN_MOD_T5_BIAS) {
        int64_t bk = stof_attn_t5_bucket(off, m->bidirectional, m->num_buckets, m->max_distance);
        v = stof_tensor_load(bias, h * bias->strides[0] + bk * bias->strides[1]);
      } else {
        double slope = bias ? stof_tensor_load(bias, h * bias->strides[0]) : stof_attn_alibi_slope(H, h);
        v = slope * (double)off;
      }
      rel[h * nrel + r] = v;
    }
  *out = rel;
  *bytes = sizeof *rel * n;
  return STOF_OK;
}

stof_status stof_attention_cpu_mod(stof_ctx *ctx, const stof_tensor *q, const stof_tensor *k,
                                   const stof_tensor *v, const stof_mask_format *f, float scale,
                                   const stof_attn_mod *mod, const stof_tensor *bias, stof_tensor *out) {
  int64_t d[6];
  stof_status st = check_shapes(ctx, "attention (cpu)", q, k, v, out, d);
  if (st) return st;
  if (f && f->qshift)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "attention (cpu): a query-shifted format (the Hopper kernel's) is not "
                          "the CPU's");
  int64_t B = d[0], H = d[1], Hkv = d[2], Sq = d[3], Sk = d[4], D = d[5];
  const stof_tensor *t[4] = {q, k, v, out};
  static const char *const names[4] = {"q", "k", "v", "out"};
  for (int i = 0; i < 4; i++)
    if (t[i]->device != STOF_DEVICE_CPU)
      return stof_ctx_error(ctx, STOF_ERR_ARG, "attention (cpu): %s is a CUDA tensor: the CPU implementation takes CPU tensors",
                            names[i]);
  /* any strides: element (b, h, s, x) at b*st[0] + h*st[1] + s*st[2] + x*st[3] */
  const int64_t *qs = q->strides, *ks = k->strides, *vs = v->strides, *os = out->strides;
  if (!f || f->B != B || f->H != H || f->Sq != Sq || f->Sk != Sk)
    return stof_ctx_error(ctx, STOF_ERR_SHAPE, "attention (cpu): the mask format was built for other dims");
  stof_attn_mod m = mod ? *mod : (stof_attn_mod){0};
  if ((st = stof_attn_mod_check(ctx, "attention (cpu)", &m))) return st;
  double sc = scale > 0 ? scale : 1.0 / sqrt((double)D), cap = m.softcap;
  double *rel = NULL;
  size_t rel_bytes = 0;
  if ((st = bias_by_offset(ctx, &m, bias, H, Sq, Sk, &rel, &rel_bytes))) return st;
  int64_t nrel = Sq + Sk - 1;
  size_t nkey = (size_t)(Sk ? Sk : 1);
  double *s = stof_ctx_alloc(ctx, sizeof *s * nkey), *acc = stof_ctx_alloc(ctx, sizeof *acc * (size_t)D);
  int64_t *keys = stof_ctx_alloc(ctx, sizeof *keys * nkey);
  if (!s || !acc || !keys) {
    st = STOF_ERR_NOMEM;
    goto done;
  }
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < H; h++) {
      int32_t mi = stof_mask_format_instance(f, b, h);
      int64_t hk = h / (H / Hkv);
      int64_t qo = b * qs[0] + h * qs[1], ko = b * ks[0] + hk * ks[1], vo = b * vs[0] + hk * vs[1],
              oo = b * os[0] + h * os[1];
      const double *hrel = rel ? rel + h * nrel + (Sq - 1) : NULL; /* hrel[j - i] */
      for (int64_t i = 0; i < Sq; i++) {
        int64_t r = i / f->T, n = 0;
        const int32_t *rp = f->row_ptr + (int64_t)mi * (f->nrow + 1);
        double mx = -INFINITY;
        for (int32_t e = rp[r]; e < rp[r + 1]; e++)
          for (int64_t jj = 0; jj < f->T; jj++) {
            int64_t j = (int64_t)f->col_idx[e] * f->T + jj;
            if (j >= Sk) break;
            if (!format_bit(f, e, i - r * f->T, jj)) continue;
            double dot = 0;
            for (int64_t x = 0; x < D; x++)
              dot += stof_tensor_load(q, qo + i * qs[2] + x * qs[3]) * stof_tensor_load(k, ko + j * ks[2] + x * ks[3]);
            double sv = dot * sc;
            if (cap > 0) sv = cap * tanh(sv / cap);
            if (hrel) sv += hrel[j - i];
            s[n] = sv;
            if (sv > mx) mx = sv;
            keys[n++] = j;
          }
        double sum = 0;
        for (int64_t x = 0; x < D; x++) acc[x] = 0;
        for (int64_t a = 0; a < n; a++) {
          double p = exp(s[a] - mx);
          sum += p;
          for (int64_t x = 0; x < D; x++) acc[x] += p * stof_tensor_load(v, vo + keys[a] * vs[2] + x * vs[3]);
        }
        for (int64_t x = 0; x < D; x++) stof_tensor_store(out, oo + i * os[2] + x * os[3], n ? acc[x] / sum : 0.0);
      }
    }
done:
  stof_ctx_dealloc(ctx, rel, rel_bytes);
  stof_ctx_dealloc(ctx, s, sizeof *s * nkey);
  stof_ctx_dealloc(ctx, acc, sizeof *acc * (size_t)D);
  stof_ctx_dealloc(ctx, keys, sizeof *keys * nkey);
  return st;
}

stof_status kernels_attn_mod_gpu_check(stof_ctx *ctx, const stof_attn_mod *m, stof_dtype bias_dtype,
                                       stof_dtype dtype) {
  if (!m) return STOF_OK;
  stof_status st = stof_attn_mod_check(ctx, "attention", m);
  if (st || m->kind == STOF_ATTN_MOD_NONE) return st;
  if (bias_dtype != STOF_DTYPE_F32 && bias_dtype != dtype)
    return stof_ctx_error(ctx, STOF_ERR_TYPE, "attention: the %s is %s on the GPU: float32 or the attention's %s",
                          m->kind == STOF_ATTN_MOD_T5_BIAS ? "T5 bias table" : "ALiBi slopes",
                          stof_dtype_name(bias_dtype), stof_dtype_name(dtype));
  return STOF_OK;
}

stof_status stof_attention_cpu(stof_ctx *ctx, const stof_tensor *q, const stof_tensor *k,
                               const stof_tensor *v, const stof_mask_format *f, float scale,
                               stof_tensor *out) {
  return stof_attention_cpu_mod(ctx, q, k, v, f, scale, NULL, NULL, out);
}

/* ---------------------------------------------------------------- selector */

/* The paper's rule, block-wise iff the fraction of non-empty 16 x 16 tiles is at least
 * STOF_ATTN_SELECT_C / log2(S / 16)^2, with STOF_ATTN_SELECT_C calibrated on an H200 (bench/NOTES-attention.md):
 * the paper's 1.2 would send sliding(32) at S = 4096 to the row-wise kernel, which measured
 * 9x slower there; block-wise won on every mask of the suite at every grid shape, row-wise
 * only on dilated(64, 63) at S = 128 (frac16 well under 1%). */
/* Tile 128 pays for dense-like rows (fewer K/V reloads per query), tile 64 for sparse
 * ones (less masked work): measured best per (mask, S) on the grid.
 * Hopper (wgmma) kernel, measured on an H100 (2026-11-22, session 3) once a head's tile-rows
 * run together (K/V served from L2): at D = 64 tile 64 won or tied on every mask and shape
 * (dense 16x4096 1.00x, causal 1.01-1.24x, document 1.12-1.37x, the sparse ones 1.3-2.2x);
 * at D = 128 tile 128 won from document up (frac16 >= 0.30: 0.75-0.87x the time of tile 64
 * at S = 4096 and 8192) and lost on bigbird (0.13) and sparser (1.3-1.6x). Session 19 (H200,
 * after the alternating-turn ping-pong; bench_attention --tiles 64,128, H 12, D 128): tile 128
 * also at S = 1024 (dense 0.74x, causal 0.83x, document 0.90x the time of tile 64; 0.70-0.85x
 * at 2048), not causal_sliding (frac16 0.03-0.06: 1.28-1.32x), so from S = 1024.
 * The portable (mma.sync) kernel keeps the H200 calibration of session 2: document (30-38%
 * of 16x16 tiles non-empty) faster at tile 64 at S = 2048 and 4096, causal (~50%) at tile
 * 128 from S = 4096. */
#define TILE128_MIN_S_LOOSE 2048
#define TILE128_MIN_FRAC_LOOSE 0.45
#define TILE128_MIN_S_DENSE 1024
#define TILE128_MIN_FRAC_DENSE 0.75
#define TILE128_SM90_MIN_D 128
#define TILE128_SM90_MIN_S 1024
#define TILE128_SM90_MIN_FRAC 0.25
/* Hopper, how a partial tile is masked (H100, thirteenth session, bench/attn_dev.cu A/B of
 * the engine's three configurations on the seven suite masks at 8x1024 .. 16x4096 and
 * 1x8192 H 32, bench/results/ab-h100-s13/): STOF_SM90_ROWMASK (the mask bits transposed per
 * lane, one select a score) took 0.89-1.01x the time where partial tiles are common
 * (bigbird 0.89-0.97x, longformer 0.91-0.99x, sliding 0.94-1.0x, document 0.94-1.0x,
 * causal_sliding 0.99-1.01x) and 0.97-1.01x on causal; on dense, which has none,
 * 0.99-1.035x (code placement): so it is used from 10% partial tiles of the non-empty ones.
 * STOF_SM90_HALFSKIP on top (a partial tile whose keys 0-31 or 32-63 are masked in every row
 * computes the other half only; tile 64), against ROWMASK alone: bigbird 0.88-0.92x where
 * 72-85% of the non-empty tiles have such a half and 1.04x at 8x1024 (64%), sliding
 * 0.94-0.97x (65-67%), longformer 0.95-1.06x (57-60%), causal_sliding 0.99-1.0x (48-50%),
 * document, causal and dense 1.0-1.16x (0-13%): used from 65%. At D 64 from 55% since the
 * seventeenth session (H100, bench_attention in one process, bench/results/s17-h100/): with
 * the launch order (longformer's global rows first) the half skip took longformer (59% of
 * its non-empty tiles with an empty half) to 0.95x at 8 x 12 x 1024, 0.94x at 16 x 12 x 2048
 * and 0.92x at 16 x 12 x 4096 (attn_dev without the order: 1.01x, 0.95x, 0.94x);
 * causal_sliding (48-50%) stayed out. Re-measured on the H200 in the twenty-fifth session
 * (bench_attention --kernels auto,halfskip,noqshift,auto in one process, 8 x 1024 .. 16 x 4096,
 * bench/results/s25/call2), with the query shift, the lazy rescale and three CTAs an SM at
 * D 128: causal_sliding (48-50%) 0.970-0.981x at D 64 and 0.974-0.99x at D 128; longformer,
 * shifted (24-25%), 0.974-0.981x at D 128 but 0.993-1.006x at D 64; sliding, shifted (0%),
 * 0.99-1.04x; document at D 64 (4-7%) 1.02-1.05x. So from 45% at D 64 and from 20% at D 128. */
#define SM90_ROWMASK_MIN_PARTIAL 0.10
#define SM90_HALFSKIP_MIN_HALF 0.20
#define SM90_HALFSKIP_MIN_HALF_D64 0.45
/* Hopper, tile 32 (H100, fifteenth session, bench/attn_ab_tile32.sh, bench/results/s15-h100/):
 * wgmma runs 64 query rows a warpgroup, so a mask of 32-wide blocks wastes MMA work at tile
 * 64 even with the half skip (bigbird's useful share 0.54-0.59 at tile 64, 0.93-0.97 at tile
 * 32). The mma.sync block kernel at tile 32 (2 warps of 16 rows, sub-tiles of 32 keys) took
 * against the engine's tile-64 wgmma configuration: bigbird 0.93-0.95x at 8 x 2048, 0.78-0.79x
 * at 16 x 4096 (D 64), 0.73x at 1 x 8192 H 32 (D 128), where 76-86% of its non-empty
 * 64-tiles have an empty key half; longformer 1.06-1.12x (58-60%), sliding 0.96-1.08x
 * (66%), document and dense 1.5-1.7x (its rate per MMA FLOP is ~0.6 of wgmma's). So tile 32
 * from 72% half-empty tiles at S >= 2048 (bigbird at S = 1024 has 67%). */
#define TILE32_SM90_MIN_HALF 0.72
#define TILE32_SM90_MIN_S 2048

/* Dynamic shared memory of the kernels (the formulas of their file headers). */
static unsigned smem_portable(int T, int64_t D, int stages) {
  return (unsigned)(T * D * 2 + stages * (2 * T * D * 2 + (T / 8) * (T / 8) * 8));
}
/* Hopper, D = 64, tile 64, TMA: Q is read from shared memory by each S wgmma
 * (STOF_SM90_QREG=0) instead of held in registers, which leaves 96 registers a thread and
 * so a 4th CTA per SM (STOF_MIN_BLOCKS=4, no spills): 1-3% faster on dense, causal,
 * document and bigbird at 16x2048 and 16x4096 (H100, session 3, two rounds of
 * bench/attn_dev.sh g64_t64_s2_k_m4_tma against g64_t64_s2_tma). Elsewhere Q stays in
 * registers. */
static int hopper_q_in_smem(int T, int64_t D, int tma, int key64) {
  return (T == 64 && D == 64 && tma) || key64;
}
/* Hopper, D = 128, tile 64, 2 stages, cp.async (no TMA), no score modifier: a third CTA an SM
 * (STOF_MIN_BLOCKS=3: 168 registers instead of 186-195, 0-16 bytes of spill by variant, none
 * with the half skip or without mask code; 67.6 KB of shared memory each; 3 or 4 stages fit
 * two CTAs or one). The row's prologue and epilogue (Q, the first K/V tiles, O's store) are a fixed
 * ~2 us a tile-row and SM, 60-68% of the window masks' time at two CTAs (session 20); a third
 * resident CTA hides more of it. H200, session 21 (bench/results/s21/call1/, bench/attn_ab_m3.sh,
 * attn_dev alternations in one process, H 12, 8 x 1024 .. 16 x 4096), with the half skip /
 * without: sliding 0.91-0.92x / 0.92-0.94x the time, causal_sliding 0.89-0.93x / 0.91-0.94x,
 * longformer 0.92-0.94x / 0.95-0.98x, document 0.92-0.94x / 0.93-0.98x, bigbird 0.91-0.93x /
 * 0.96-0.97x, dense 0.93-0.95x / 0.93-0.97x; outputs bit-identical (150 of 150, --odd). Under
 * a score modifier the kernel keeps two (T5's bias would spill 148 bytes at 168 registers).
 * Elsewhere: key64 2, Q in shared memory 4 (hopper_q_in_smem), else the compiler's choice (0). */
static int hopper_min_blocks(int T, int64_t D, int stages, int tma, int key64, int plain) {
  if (key64) return 2;
  if (hopper_q_in_smem(T, D, tma, 0)) return 4;
  return T == 64 && D == 128 && stages == 2 && !tma && plain ? 3 : 0;
}
/* Hopper, D = 64: tile 128 with the two warpgroups sharing each K/V tile, computed 64 keys a
 * step (STOF_SM90_KEY64: S with m64n64 as at tile 64, Q in shared memory, the TMA producer one
 * warp: 93-95 registers, 2 CTAs of 288 threads an SM; 256 threads with cp.async), where the
 * 128-tiles cost at most KEY64_MAX_WORK times the MMA work of the 64-tiles and partial tiles
 * are below the per-lane masking's share (it and the half skip are tile 64's). H200, session 18
 * (bench/results/s18/), attn_dev against the engine's tile-64 kernel in one process, 2-4
 * alternations in each of three calls: dense 0.978-0.998x the time at 8 x 1024 .. 16 x 4096
 * (H 12), causal 0.970-0.981x at 16 x 4096 and 0.976-1.007x at 16 x 2048; document (1.04x the
 * work at 16 x 4096) 1.02-1.15x, sliding 1.6x slower; the engine (call 5) dense 0.975-0.995x,
 * causal 16 x 4096 0.967x. */
#define KEY64_MAX_WORK 1.03
/* Whether the Hopper kernel's two warpgroups ping-pong (STOF_SM90_PINGPONG). */
static int hopper_pingpong(int T, int stages) { return T == 128 && stages >= 3; }
static unsigned smem_hopper(int T, int64_t D, int stages, int tma, int key64) {
  return (unsigned)(1024 + (hopper_q_in_smem(T, D, tma, key64) ? T * D * 2 : 0) + T * D * 2 * (2 * stages) +
                    stages * (T / 8) * (T / 8) * 8 + (tma || hopper_pingpong(T, stages) ? 128 : 0));
}
/* Threads of the Hopper kernel: a warpgroup per 64 query rows, plus the TMA producer (a
 * warpgroup at T = 128 without STOF_SM90_KEY64, else a warp; kBlockThreads in
 * attention_block_sm90.cu). */
static unsigned threads_hopper(int T, int tma, int key64) {
  return (unsigned)(2 * T + (!tma ? 0 : T == 128 && !key64 ? 128 : 32));
}

/* kernels_int.h. For each instance and pair of tile-rows, the distinct col / 2 of both rows
 * (each row's columns ascending, as the builders write them). */
int64_t kernels_attn_tiles128(const stof_mask_format *f) {
  if (f->T != 64) return -1;
  if (f->ntile_full + f->ntile_partial == (int64_t)f->nmask * f->nrow * f->ncol)
    return (int64_t)f->nmask * ((f->nrow + 1) / 2) * ((f->ncol + 1) / 2);
  if (!f->col_idx) return -1;
  int64_t n = 0;
  for (int32_t m = 0; m < f->nmask; m++) {
    const int32_t *rp = f->row_ptr + (int64_t)m * (f->nrow + 1);
    for (int32_t r = 0; r < f->nrow; r += 2) {
      int32_t a = rp[r], ae = rp[r + 1], b = r + 1 < f->nrow ? rp[r + 1] : ae, be = r + 1 < f->nrow ? rp[r + 2] : ae;
      int32_t last = -1;
      while (a < ae || b < be) {
        int32_t c;
        if (b >= be || (a < ae && f->col_idx[a] <= f->col_idx[b])) c = f->col_idx[a++] / 2;
        else c = f->col_idx[b++] / 2;
        if (c != last) n++, last = c;
      }
    }
  }
  return n;
}

/* The head dims the GPU kernels are compiled for: the plan and the selector say the same. */
static stof_status head_dim_check(stof_ctx *ctx, int64_t D) {
  if (D != 64 && D != 128)
    return stof_ctx_error(ctx, STOF_ERR_UNSUPPORTED, "attention: head dim %lld is not supported (64 or 128)", (long long)D);
  return STOF_OK;
}

/* How the Hopper kernel masks partial tiles (out->rowmask, out->halfskip), from f's counts
 * (the format the selector reads: tile 64 unless a tile is asked for, also where the plan then
 * runs at tile 128, as the calibration timed it; the half skip needs tile 64), and the text
 * for why ("; partial tiles ..."). Also for a query-shifted format (choose_qshift). */
static void hopper_masking(const stof_mask_format *f, int64_t D, const stof_attn_opts *o, stof_attn_choice *out,
                           char *why, size_t n) {
  double nonempty = (double)(f->ntile_full + f->ntile_partial);
  double part = nonempty > 0 ? f->ntile_partial / nonempty : 0, half = nonempty > 0 ? f->ntile_halfempty / nonempty : 0;
  out->rowmask = !out->key64 && (o->rowmask ? o->rowmask == 1 : part >= SM90_ROWMASK_MIN_PARTIAL);
  double half_min = D == 64 ? SM90_HALFSKIP_MIN_HALF_D64 : SM90_HALFSKIP_MIN_HALF;
  out->halfskip = out->tile == 64 && f->T == 64 && (o->halfskip ? o->halfskip == 1 : half >= half_min);
  char half_why[32];
  if (o->halfskip || out->tile != 64)
    snprintf(half_why, sizeof half_why, "%s", o->halfskip ? ", asked for" : ", tile 64 only");
  else
    snprintf(half_why, sizeof half_why, ", %s %.0f%%", out->halfskip ? ">=" : "<", 100 * half_min);
  snprintf(why, n, "; partial tiles %s (%.0f%% partial%s), %s (%.0f%% with an empty key half%s)",
           out->rowmask ? "masked per lane" : "masked from the bitmap", 100 * part,
           o->rowmask ? ", asked for" : out->key64 ? ", 64-key steps" : out->rowmask ? ", >= 10%" : ", < 10%",
           out->halfskip ? "empty halves skipped" : "no half skip", 100 * half, half_why);
}

stof_status stof_attention_select(stof_ctx *ctx, const stof_mask_format *f, int64_t B,
                                  int64_t H, int64_t D, const stof_cuda_props *dev,
                                  const stof_attn_opts *opts, stof_attn_choice *out) {
  int sm_count = dev ? dev->sm_count : 0;
  stof_attn_opts o = opts ? *opts : (stof_attn_opts){0};
  memset(out, 0, sizeof *out);
  stof_status st = head_dim_check(ctx, D);
  if (st) return st;
  if ((unsigned)o.kernel >= STOF_ATTN_KERNEL_COUNT)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "attention: unknown kernel %d", (int)o.kernel);
  if (o.tile != 0 && o.tile != 32 && o.tile != 64 && o.tile != 128)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "attention: tile %d (32, 64 or 128)", o.tile);
  if (o.stages != 0 && (o.stages < 2 || o.stages > 4))
    return stof_ctx_error(ctx, STOF_ERR_ARG, "attention: %d stages (2, 3 or 4)", o.stages);
  if (o.tma < -1 || o.tma > 1)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "attention: tma %d (1 TMA, -1 cp.async, 0 the default)", o.tma);
  if (o.rowmask < -1 || o.rowmask > 1)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "attention: rowmask %d (1 on, -1 off, 0 the selector's)", o.rowmask);
  if (o.order < -1 || o.order > 0)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "attention: order %d (-1 the default launch order, 0 the rule)", o.order);
  if (o.order_group < 0)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "attention: order_group %d (0 the rule's, N > 0 groups of N (b, h))",
                          o.order_group);
  if (o.halfskip < -1 || o.halfskip > 1)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "attention: halfskip %d (1 on, -1 off, 0 the selector's)", o.halfskip);
  if (o.key64 < -1 || o.key64 > 1)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "attention: key64 %d (1 on, -1 off, 0 the selector's)", o.key64);
  if (o.qshift < -1 || o.qshift > 1)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "attention: qshift %d (1 on, -1 off, 0 the rule)", o.qshift);
  if (o.lazy < -1 || o.lazy > 1)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "attention: lazy %d (1 on, -1 off, 0 the selector's)", o.lazy);
  if (o.split < -1)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "attention: split %d (-1 never, 0 automatic, N > 0 chunks of at "
                          "most N tiles)", o.split);
  if (o.warps < 0 || o.warps > 32)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "attention: %d warps", o.warps);
  if (!(o.scale >= 0) || isinf(o.scale))
    return stof_ctx_error(ctx, STOF_ERR_ARG, "attention: scale %g (a positive number, or 0 for 1/sqrt(D))",
                          (double)o.scale);
  double S = (double)(f->Sk > f->Sq ? f->Sk : f->Sq);
  double l = S > 32 ? log2(S / 16.0) : 1.0;
  /* the format's shares of partial and half-empty tiles, which the Hopper rules read */
  double nonempty = (double)(f->ntile_full + f->ntile_partial);
  double part = nonempty > 0 ? f->ntile_partial / nonempty : 0, half = nonempty > 0 ? f->ntile_halfempty / nonempty : 0;
  out->frac16 = f->frac16;
  out->threshold = STOF_ATTN_SELECT_C / (l * l);
  int n = 0;
  if (o.kernel != STOF_ATTN_AUTO) {
    out->kernel = o.kernel;
    n = snprintf(out->why, sizeof out->why, "%s-wise: asked for", stof_attn_kernel_name(o.kernel));
  } else {
    out->kernel = f->frac16 >= out->threshold ? STOF_ATTN_BLOCK : STOF_ATTN_ROW;
    n = snprintf(out->why, sizeof out->why,
                 "%s-wise: %.1f%% of the 16x16 tiles are non-empty, %s the threshold "
                 "%.2f / log2(S/16)^2 = %.2f%% at S = %.0f",
                 stof_attn_kernel_name(out->kernel), 100 * f->frac16,
                 out->kernel == STOF_ATTN_BLOCK ? "at or above" : "below", STOF_ATTN_SELECT_C,
                 100 * out->threshold, S);
    if (o.tile == 32 && out->kernel == STOF_ATTN_ROW) {
      out->kernel = STOF_ATTN_BLOCK;
      n = snprintf(out->why, sizeof out->why, "block-wise: tile 32 asked for (the row-wise kernel takes 64 or 128; "
                   "%.1f%% of the 16x16 tiles are non-empty)", 100 * f->frac16);
    }
  }
  /* the Hopper kernel runs block-wise on compute capability 9.0 unless asked otherwise */
  int sm90 = out->kernel == STOF_ATTN_BLOCK && dev && dev->cc_major == 9 && dev->cc_minor == 0 && !o.portable;
  char tile_why[128] = "asked for";
  out->tile = o.tile;
  /* the tile rule of the kernel that will run; forced warps that the Hopper kernel cannot
   * take at its tile (a warpgroup per 64 rows) send it to the portable kernel and rule */
  for (int pass = 0; !o.tile && pass < 2; pass++) {
    int dense_like = sm90 ? D >= TILE128_SM90_MIN_D && S >= TILE128_SM90_MIN_S && f->frac16 >= TILE128_SM90_MIN_FRAC
                          : (S >= TILE128_MIN_S_LOOSE && f->frac16 >= TILE128_MIN_FRAC_LOOSE) ||
                                (S >= TILE128_MIN_S_DENSE && f->frac16 >= TILE128_MIN_FRAC_DENSE);
    out->tile = out->kernel == STOF_ATTN_BLOCK && dense_like ? 128 : 64;
    if (out->kernel != STOF_ATTN_BLOCK)
      snprintf(tile_why, sizeof tile_why, "the format's");
    else if (sm90)
      snprintf(tile_why, sizeof tile_why, "Hopper: 128 %s D = %d, S >= %d, >= %.0f%% non-empty",
               dense_like ? "at" : "needs", TILE128_SM90_MIN_D, TILE128_SM90_MIN_S, 100 * TILE128_SM90_MIN_FRAC);
    else
      snprintf(tile_why, sizeof tile_why, "128 %s >= %.0f%% non-empty at S >= %d or >= %.0f%% at S >= %d",
               dense_like ? "at" : "needs", 100 * TILE128_MIN_FRAC_LOOSE, TILE128_MIN_S_LOOSE,
               100 * TILE128_MIN_FRAC_DENSE, TILE128_MIN_S_DENSE);
    if (!sm90 || !o.warps || o.warps == out->tile / 16) break;
    sm90 = 0;
  }
  /* Hopper, a mask of 32-wide blocks (the counts of the tile-64 format): tile 32 on the
   * mma.sync kernel, 2 warps; not where warps or an option only the Hopper kernel has are asked
   * for */
  int wants_hopper = o.tma == 1 || o.rowmask == 1 || o.halfskip == 1 || o.split > 0 || o.key64 == 1 || o.qshift == 1;
  if (!o.tile && sm90 && !wants_hopper && out->tile == 64 && f->T == 64 && !o.warps &&
      S >= TILE32_SM90_MIN_S) {
    if (half >= TILE32_SM90_MIN_HALF) {
      out->tile = 32;
      sm90 = 0;
      snprintf(tile_why, sizeof tile_why, "Hopper: 32 at >= %.0f%% of the non-empty 64-tiles with an empty key half "
               "(%.0f%%), S >= %d", 100 * TILE32_SM90_MIN_HALF, 100 * half, TILE32_SM90_MIN_S);
    }
  }
  if (out->tile == 32 && out->kernel != STOF_ATTN_BLOCK)
    return stof_ctx_error(ctx, STOF_ERR_UNSUPPORTED, "attention: tile 32 is the block-wise kernel's (%s-wise asked for)",
                          stof_attn_kernel_name(out->kernel));
  /* block-wise: 16 query rows per warp at tiles 32 and 64; at tile 128, 32 rows per warp for
   * D = 64 (4 warps: measured 1.5x faster than 8) and 16 for D = 128 (8 warps) */
  out->warps = o.warps                          ? o.warps
               : out->kernel != STOF_ATTN_BLOCK ? 4
               : out->tile == 128 && D == 128   ? 8
               : out->tile == 32                ? 2
                                                : 4;
  out->stages = o.stages ? o.stages : 2;
  /* Hopper: the wgmma kernel, one warpgroup per 64 query rows; at tile 128 its two
   * warpgroups ping-pong over 3 stages (measured fastest, bench/NOTES-attention.md) */
  if (sm90 && out->tile != 32 && (!o.warps || o.warps == out->tile / 16)) {
    int stages = o.stages ? o.stages : out->tile == 128 ? 3 : 2;
    /* K/V by TMA where it measured faster on the H200 (bench/NOTES-attention.md, TMA):
     * D = 128 at tile 128 (0.93-0.95x the time) and D = 64 at tile 64 (0.95x); slower at
     * D = 128, tile 64 (1.10x), even at D = 64, tile 128; the same on an H100 after the
     * grid reorder (session 3: 0.90-0.92x at D 128 / tile 128, 0.93-1.03x at D 64 / tile 64,
     * 1.1-1.3x slower at D 128 / tile 64) */
    int tma = o.tma == 1 || (o.tma == 0 && ((D == 128 && out->tile == 128) || (D == 64 && out->tile == 64)));
    if (smem_hopper(out->tile, D, stages, tma, 0) <= dev->smem_per_block_optin) {
      out->hopper = 1;
      out->tma = tma;
      out->warps = out->tile / 16;
      out->stages = stages;
    }
  }
  /* The portable kernel's shared memory must fit the device (an A100 allows 163 KB, sm_89
   * 99 KB; tile 128 at D = 128 needs 164 KB): an automatic tile 128 falls back to 64, and
   * what was asked for and does not fit is an error, not a failed launch. */
  if (out->kernel == STOF_ATTN_BLOCK && !out->hopper && dev && dev->smem_per_block_optin) {
    unsigned need = smem_portable(out->tile, D, out->stages);
    if (need > dev->smem_per_block_optin && out->tile == 128 && !o.tile && !o.warps) {
      snprintf(tile_why, sizeof tile_why, "128 would need %u bytes of shared memory, the device allows %zu",
               need, (size_t)dev->smem_per_block_optin);
      out->tile = 64;
      out->warps = 4;
      need = smem_portable(out->tile, D, out->stages);
    }
    if (need > dev->smem_per_block_optin)
      return stof_ctx_error(ctx, STOF_ERR_UNSUPPORTED,
                            "attention: block-wise tile %d at D = %lld with %d stages needs %u bytes of shared "
                            "memory, the device allows %zu (ask for tile 64 or fewer stages)",
                            out->tile, (long long)D, out->stages, need, (size_t)dev->smem_per_block_optin);
  }
  /* Hopper, D = 64: tile 128 computed 64 keys a step (KEY64_MAX_WORK), or asked for */
  if (out->hopper && D == 64 && o.key64 >= 0 && (!o.warps || o.warps == 8) && (!o.stages || o.stages == 2) && o.rowmask != 1 &&
      o.halfskip != 1 && (o.tile ? o.tile == 128 && o.key64 == 1 : out->tile == 64)) {
    int64_t t128 = nonempty > 0 && part < SM90_ROWMASK_MIN_PARTIAL ? kernels_attn_tiles128(f) : -1;
    double work = t128 >= 0 ? 4.0 * (double)t128 / nonempty : 0;
    /* measured without score modifiers (nvcc 13.0: with the T5 table or ALiBi mode 1 spills 32-76
     * bytes and ptxas serialises its wgmma (C7512), where tile 64 spills nothing; soft cap alone
     * compiles clean but was not timed either): modified attention stays at tile 64 */
    int plain = mod_plain(&o.mod);
    int rule = !o.tile && t128 >= 0 && work <= KEY64_MAX_WORK && plain;
    if (o.key64 == 1 || rule) {
      int tma = o.tma != -1;
      if (smem_hopper(128, D, 2, tma, 1) <= dev->smem_per_block_optin) {
        out->key64 = 1;
        out->tile = 128, out->warps = 8, out->stages = 2, out->tma = tma;
        if (o.key64 == 1)
          snprintf(tile_why, sizeof tile_why, "Hopper: 128 in 64-key steps, asked for");
        else
          snprintf(tile_why, sizeof tile_why, "Hopper: 128 in 64-key steps at <= %.2fx the 64-tiles' work (%.3fx) "
                   "and < %.0f%% partial", KEY64_MAX_WORK, work, 100 * SM90_ROWMASK_MIN_PARTIAL);
      }
    }
  }
  if (o.key64 == 1 && !out->key64)
    return stof_ctx_error(ctx, STOF_ERR_UNSUPPORTED,
                          "attention: key64 asked for, but it needs the Hopper kernel at D = 64, tile 128 or the "
                          "selector's, 8 warps or the selector's, 2 stages, no rowmask or halfskip (%s-wise, tile %d, "
                          "D = %lld%s)",
                          stof_attn_kernel_name(out->kernel), out->tile, (long long)D,
                          out->hopper ? "" : ", not the Hopper kernel");
  /* how the Hopper kernel masks partial tiles (hopper_masking says from what) */
  char mask_why[160] = "";
  if (out->hopper) hopper_masking(f, D, &o, out, mask_why, sizeof mask_why);
  if (o.halfskip == 1 && !out->halfskip)
    return stof_ctx_error(ctx, STOF_ERR_UNSUPPORTED,
                          "attention: halfskip asked for, but it needs the Hopper kernel at tile 64 (%s-wise, tile %d%s)", stof_attn_kernel_name(out->kernel), out->tile,
                          out->hopper ? "" : ", not the Hopper kernel");
  if (o.rowmask == 1 && !out->rowmask)
    return stof_ctx_error(ctx, STOF_ERR_UNSUPPORTED, "attention: rowmask asked for, but the Hopper kernel is not chosen");
  if (o.tma == 1 && !out->tma)
    return stof_ctx_error(ctx, STOF_ERR_UNSUPPORTED,
                          "attention: TMA asked for, but the Hopper kernel is not chosen (%s-wise, tile %d%s%s)",
                          stof_attn_kernel_name(out->kernel), out->tile,
                          !dev || dev->cc_major != 9 || dev->cc_minor != 0 ? ", not compute capability 9.0" : "",
                          o.portable ? ", portable asked for" : "");
  /* The lazy rescale (STOF_LAZY_RESCALE, attention_common.cuh): O rescaled only when a row's
   * running max grows by more than 2^8. Measured on an H200 (session 24, bench/attn_dev.cu,
   * bench/results/s24/call1): at D 128 0.96-0.99x the time on the Hopper kernel at tile 64
   * (sliding, causal_sliding, longformer, document) and on the tile-32 mma.sync kernel
   * (BigBird); at D 64 0.99-1.03x, and 1.01-1.03x in the ping-pong kernel, whose softmax already
   * runs behind the other warpgroup's MMA. Not measured with a score modifier. */
  const char *lazy_why = "";
  if (o.lazy == 1) {
    if (out->kernel != STOF_ATTN_BLOCK)
      return stof_ctx_error(ctx, STOF_ERR_UNSUPPORTED,
                            "attention: lazy asked for, but it is the block-wise kernels' (row-wise chosen: ask "
                            "for kernel = block, or leave lazy at 0)");
    out->lazy = 1, lazy_why = "; O rescaled lazily (asked for)";
  } else if (o.lazy == 0 && out->kernel == STOF_ATTN_BLOCK && dev && dev->cc_major == 9 && dev->cc_minor == 0 &&
             D == 128 && mod_plain(&o.mod) &&
             (out->hopper ? !hopper_pingpong(out->tile, out->stages) : out->tile == 32)) {
    out->lazy = 1, lazy_why = "; O rescaled lazily (Hopper GPU, D = 128, no ping-pong)";
  }
  if (out->kernel == STOF_ATTN_BLOCK && out->tile / out->warps != 16 && out->tile / out->warps != 32)
    return stof_ctx_error(ctx, STOF_ERR_ARG,
                          "attention: %d warps for tile %d (block-wise needs 16 or 32 query rows per warp)",
                          out->warps, out->tile);
  if (out->kernel == STOF_ATTN_ROW && out->warps > 8)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "attention: %d warps (row-wise takes 1 to 8)", out->warps);
  if (n > 0 && (size_t)n < sizeof out->why)
    snprintf(out->why + n, sizeof out->why - (size_t)n, "; tile %d (%s), %d warps, %d stages%s%s%s%s (B*H = %lld, D = %lld%s)",
             out->tile, tile_why, out->warps, out->kernel == STOF_ATTN_BLOCK ? out->stages : 1,
             out->key64 && out->tma ? ", wgmma (sm_90a), TMA, 64-key steps"
             : out->key64  ? ", wgmma (sm_90a), 64-key steps"
             : out->tma    ? ", wgmma (sm_90a), TMA"
             : out->hopper ? ", wgmma (sm_90a)"
             : out->kernel == STOF_ATTN_BLOCK ? ", mma.sync"
                                                : "",
             out->hopper && hopper_min_blocks(out->tile, D, out->stages, out->tma, out->key64, mod_plain(&o.mod)) == 3
                 ? ", three CTAs an SM (168 registers)" : "",
             mask_why, lazy_why, (long long)(B * H), (long long)D, sm_count ? "" : ", no GPU seen");
  return STOF_OK;
}

/* ---------------------------------------------------------------- GPU engine */

typedef struct attn_variant {
  char key[448];
  stof_cuda_module *mod;
  stof_cuda_kernel *fn;
  stof_cuda_kernel *combine; /* STOF_SM90_SPLIT=2: the split rows' combine (else NULL) */
} attn_variant;

struct stof_attn_engine {
  stof_ctx *ctx;
  stof_cuda_props props;
  char arch[16];
  stof_mask_cache *formats;
  kernels_format_gpu *gpu_formats; /* long sequences' formats, built on the GPU (lazily) */
  /* compiled variants, never unloaded before the engine: plans borrow their kernels;
   * there are few (kernel x D x dtype x tile x warps x stages) */
  int nvariant, capvariant;
  attn_variant *variant;
};

/* One K / V layout's TMA maps: the addresses and strides they were encoded for, state 1
 * (encoded) or -1 (the driver refused that layout, so the twin runs), and the maps
 * (stof_cuda_tmap's bytes; the plan is not 64-byte aligned). */
typedef struct attn_tmap_entry {
  uint64_t k, v;
  int64_t ks[3], vs[3];
  int state;
  uint64_t map[2][16];
} attn_tmap_entry;
#define ATTN_TMAP_CACHE 64 /* layouts a plan keeps the maps of (about 21 KB) */

struct stof_attn_plan {
  stof_attn_engine *e;
  stof_attn_choice choice;
  int64_t B, H, Hkv, Sq, Sk, D;
  stof_dtype dtype;
  int mask_b, mask_h;
  float scale;
  uint64_t row_ptr, col_idx, bmp_off, bitmap; /* device copies of the format */
  /* TMA: the K / V maps of the last ATTN_TMAP_CACHE layouts run (a model's layers share
   * one plan, each with its own K and V; benchmarks rotate input sets), so that a run
   * encodes them only for a layout it has not seen lately */
  attn_tmap_entry tmaps[ATTN_TMAP_CACHE];
  int ntmap, tmap_next, tmap_last; /* entries used, the next to replace, the last hit */
  int64_t tmap_encodes;            /* layouts encoded so far (tests read it) */
  size_t nrow_ptr, nentry, nword;
  stof_cuda_kernel *fn;
  unsigned grid[3], block[3], smem;
  stof_cuda_kernel *fn_twin; /* TMA plans: the same kernel with cp.async K/V loads */
  unsigned block_twin[3], smem_twin;
  int64_t nvalid;
  double prepare_ms;
  /* the score modifier compiled into fn (kind NONE, softcap 0: none), the dtype of the table
   * or slopes it reads, the T5 buckets by offset (device, 2 (maxd + 1) ints; see mod_t in
   * attention_common.cuh) and ALiBi's standard slopes (device, H float32) */
  stof_attn_mod mod;
  stof_dtype bias_dtype;
  uint64_t d_bucket, d_slopes;
  int maxd;
  /* heavy tile-rows split (choice.split_rows > 0): fn and fn_twin are then the main kernel
   * that skips them (STOF_SM90_SPLIT=1); the chunk kernel (and its cp.async twin) and the
   * combine run from the STOF_SM90_SPLIT=2 module; the table and workspace on the device */
  stof_cuda_kernel *fn_chunk, *fn_chunk_twin, *fn_combine;
  unsigned grid_chunk[3], grid_combine[3];
  uint64_t d_split, d_ws;
  size_t split_table_bytes, split_ws_bytes;
  int32_t split_nchunk_max;
  int64_t split_off[5]; /* row_nchunk, chunk_ptr, chunk, srow_ptr, srow (int32 offsets) */
  /* the launch order (choice.heavy_rows > 0 or order_group > 1, no split): its table on the
   * device */
  uint64_t d_order;
};

/* The kernels' mod_t (attention_common.cuh), by value. */
typedef struct attn_mod_args {
  uint64_t bias, bucket;
  int64_t bias_hs;
  int32_t maxd;
  float softcap;
} attn_mod_args;
_Static_assert(sizeof(attn_mod_args) == 32, "mod_t is 32 bytes");

/* The kernels' split_t (attention_block_sm90.cu, STOF_SM90_SPLIT), by value. */
typedef struct attn_split_args {
  uint64_t row_nchunk, chunk_ptr, chunk, srow_ptr, srow, ws;
  int32_t nchunk_max;
} attn_split_args;
_Static_assert(sizeof(attn_split_args) == 56, "split_t is 56 bytes");

/* The kernels' order_t (attention_common.cuh: STOF_SM90_ORDER in the Hopper kernel,
 * STOF_ORDER in the block kernel), by value. */
typedef struct attn_order_args {
  uint64_t row;
  int32_t nheavy, group;
} attn_order_args;
_Static_assert(sizeof(attn_order_args) == 16, "order_t is 16 bytes");

/* Whether a choice launches its tile-rows from an order table (STOF_SM90_ORDER / STOF_ORDER:
 * 2 where it has groups, else 1). */
static int uses_order(const stof_attn_choice *c) { return c->heavy_rows > 0 || c->order_group > 1; }

stof_status stof_attn_engine_new(stof_ctx *ctx, stof_attn_engine **out) {
  *out = NULL;
  stof_status st = stof_cuda_init(ctx);
  if (st) return st;
  stof_attn_engine *e = stof_ctx_alloc(ctx, sizeof *e);
  if (!e) return STOF_ERR_NOMEM;
  e->ctx = ctx;
  if ((st = stof_cuda_props_get(ctx, &e->props)) || (st = stof_mask_cache_new(ctx, 16, &e->formats))) {
    stof_ctx_dealloc(ctx, e, sizeof *e);
    return st;
  }
  snprintf(e->arch, sizeof e->arch, "sm_%d%d", e->props.cc_major, e->props.cc_minor);
  if (e->props.cc_major < 8) {
    int major = e->props.cc_major, minor = e->props.cc_minor;
    stof_attn_engine_free(e);
    return stof_ctx_error(ctx, STOF_ERR_UNSUPPORTED,
                          "attention: the kernels need compute capability 8.0 or newer (this GPU is %d.%d)",
                          major, minor);
  }
  *out = e;
  return STOF_OK;
}

void stof_attn_engine_free(stof_attn_engine *e) {
  if (!e) return;
  for (int i = 0; i < e->nvariant; i++) stof_cuda_module_free(e->variant[i].mod);
  stof_ctx_dealloc(e->ctx, e->variant, sizeof *e->variant * (size_t)e->capvariant);
  stof_mask_cache_free(e->formats);
  kernels_format_gpu_free(e->gpu_formats);
  stof_ctx_dealloc(e->ctx, e, sizeof *e);
}

/* Appends one option to o (printf-style); past KERNELS_ATTN_MAX_OPTS *n becomes -1 and
 * stays there, so that the caller reports the overflow instead of writing past o. */
__attribute__((format(printf, 3, 4))) static void add_opt(char (*o)[KERNELS_ATTN_OPT_LEN], int *n, const char *fmt,
                                                         ...) {
  if (*n < 0) return;
  if (*n >= KERNELS_ATTN_MAX_OPTS) {
    *n = -1;
    return;
  }
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(o[(*n)++], KERNELS_ATTN_OPT_LEN, fmt, ap);
  va_end(ap);
}

/* kernels_int.h. */
int kernels_attn_variant_options(const stof_attn_choice *c, int64_t D, stof_dtype dtype, const stof_attn_mod *mod,
                                 stof_dtype bias_dtype, int split, char (*o)[KERNELS_ATTN_OPT_LEN]) {
  int block = c->kernel == STOF_ATTN_BLOCK, hopper = block && c->hopper;
  int nopt = 0;
  /* a modifier only where there is one: the plain kernels' sources and cache keys unchanged */
  if (mod->kind != STOF_ATTN_MOD_NONE) {
    add_opt(o, &nopt, "-DSTOF_SCORE_MOD=%d", mod->kind == STOF_ATTN_MOD_T5_BIAS ? 1 : 2);
    add_opt(o, &nopt, "-DSTOF_MOD_F32=%d", bias_dtype == STOF_DTYPE_F32);
  }
  if (mod->softcap > 0) add_opt(o, &nopt, "-DSTOF_SOFTCAP=1");
  add_opt(o, &nopt, "-DSTOF_HEAD_DIM=%lld", (long long)D);
  add_opt(o, &nopt, "-DSTOF_BF16=%d", dtype == STOF_DTYPE_BF16);
  add_opt(o, &nopt, "-DSTOF_TILE_M=%d", c->tile);
  if (!hopper) add_opt(o, &nopt, block ? "-DSTOF_WARPS=%d" : "-DSTOF_ROW_WARPS=%d", c->warps);
  if (block) add_opt(o, &nopt, "-DSTOF_STAGES=%d", c->stages);
  if (hopper) add_opt(o, &nopt, "-DSTOF_SM90_PINGPONG=%d", hopper_pingpong(c->tile, c->stages));
  if (hopper) add_opt(o, &nopt, "-DSTOF_SM90_TMA=%d", c->tma);
  /* only where set: the plain variants' sources and cache keys unchanged */
  if (hopper && c->rowmask) add_opt(o, &nopt, "-DSTOF_SM90_ROWMASK=1");
  if (hopper && c->halfskip) add_opt(o, &nopt, "-DSTOF_SM90_HALFSKIP=1");
  if (hopper && c->nopartial) add_opt(o, &nopt, "-DSTOF_SM90_NOPARTIAL=1");
  if (hopper && hopper_q_in_smem(c->tile, D, c->tma, c->key64)) add_opt(o, &nopt, "-DSTOF_SM90_QREG=0");
  int min_blocks = hopper ? hopper_min_blocks(c->tile, D, c->stages, c->tma, c->key64, mod_plain(mod)) : 0;
  if (min_blocks) add_opt(o, &nopt, "-DSTOF_MIN_BLOCKS=%d", min_blocks);
  if (hopper && c->key64) add_opt(o, &nopt, "-DSTOF_SM90_KEY64=1");
  if (hopper && c->qshift) add_opt(o, &nopt, "-DSTOF_SM90_QSHIFT=%d", c->qshift);
  if (block && c->lazy) add_opt(o, &nopt, "-DSTOF_LAZY_RESCALE=1");
  /* only where there is one: the unsplit kernels' options and cache keys unchanged */
  if (hopper && split) add_opt(o, &nopt, "-DSTOF_SM90_SPLIT=%d", split);
  else if (hopper && uses_order(c)) add_opt(o, &nopt, "-DSTOF_SM90_ORDER=%d", c->order_group > 1 ? 2 : 1);
  else if (block && uses_order(c)) add_opt(o, &nopt, "-DSTOF_ORDER=%d", c->order_group > 1 ? 2 : 1);
  return nopt;
}

/* The compiled kernel for a choice, D and dtype (compiled once per engine; cubins are
 * also cached on disk). */
/* split (Hopper only): 0 the plain kernel, 1 the main kernel of a split plan, 2 the chunk
 * kernel, whose module's combine goes to *combine (else untouched; may be NULL). */
static stof_status get_variant(stof_attn_engine *e, const stof_attn_choice *c, int64_t D,
                               stof_dtype dtype, const stof_attn_mod *mod, stof_dtype bias_dtype,
                               int split, stof_cuda_kernel **fn, stof_cuda_kernel **combine) {
  int block = c->kernel == STOF_ATTN_BLOCK, hopper = block && c->hopper;
  char o[KERNELS_ATTN_MAX_OPTS][KERNELS_ATTN_OPT_LEN];
  int nopt = kernels_attn_variant_options(c, D, dtype, mod, bias_dtype, split, o);
  if (nopt < 0)
    return stof_ctx_error(e->ctx, STOF_ERR_INTERNAL, "attention: the kernel takes more than %d compile options "
                          "(KERNELS_ATTN_MAX_OPTS)", KERNELS_ATTN_MAX_OPTS);
  const char *opts[KERNELS_ATTN_MAX_OPTS];
  char key[KERNELS_ATTN_KEY_LEN];
  int len = snprintf(key, sizeof key, "%s", hopper ? "block_sm90" : block ? "block" : "row");
  for (int i = 0; i < nopt; i++) {
    opts[i] = o[i];
    int w = snprintf(key + len, sizeof key - (size_t)len, " %s", o[i]);
    if (w < 0 || (size_t)w >= sizeof key - (size_t)len)
      return stof_ctx_error(e->ctx, STOF_ERR_INTERNAL, "attention: the kernel's options pass the cache key's %zu bytes",
                            sizeof key);
    len += w;
  }
  for (int i = 0; i < e->nvariant; i++)
    if (strcmp(e->variant[i].key, key) == 0) {
      if (combine && e->variant[i].combine) *combine = e->variant[i].combine;
      return *fn = e->variant[i].fn, STOF_OK;
    }
  if (e->nvariant == e->capvariant) {
    int ncap = e->capvariant ? 2 * e->capvariant : 8;
    attn_variant *nv = stof_ctx_realloc(e->ctx, e->variant, sizeof *nv * (size_t)e->capvariant,
                                        sizeof *nv * (size_t)ncap);
    if (!nv) return STOF_ERR_NOMEM;
    e->variant = nv;
    e->capvariant = ncap;
  }
  const char *file = hopper ? "attention_block_sm90.cu" : block ? "attention_block.cu" : "attention_row.cu";
  const char *entry = hopper ? "stof_attn_block_fwd_sm90" : block ? "stof_attn_block_fwd" : "stof_attn_row_fwd";
  const char *src = stof_kernels_source(file);
  const char *hname[1] = {"attention_common.cuh"};
  const char *hsrc[1] = {stof_kernels_source("attention_common.cuh")};
  if (!src || !hsrc[0])
    return stof_ctx_error(e->ctx, STOF_ERR_INTERNAL, "attention: %s is not embedded in the library", file);
  void *cubin;
  size_t size;
  stof_status st = stof_cuda_compile_cached(e->ctx, src, file, hopper ? "sm_90a" : e->arch, nopt, opts, 1,
                                            hname, hsrc, &cubin, &size);
  if (st) return st;
  attn_variant *v = &e->variant[e->nvariant];
  st = stof_cuda_module_load(e->ctx, cubin, size, &v->mod);
  stof_ctx_dealloc(e->ctx, cubin, size);
  if (st) return st;
  st = stof_cuda_module_kernel(v->mod, entry, &v->fn);
  v->combine = NULL;
  if (!st && hopper && split == 2) st = stof_cuda_module_kernel(v->mod, "stof_attn_split_combine_sm90", &v->combine);
  if (st) {
    stof_cuda_module_free(v->mod);
    return st;
  }
  if (combine && v->combine) *combine = v->combine;
  snprintf(v->key, sizeof v->key, "%s", key);
  e->nvariant++;
  *fn = v->fn;
  return STOF_OK;
}

/* The format of (mask, dims, T), cached: built on the GPU when max(Sq, Sk) >=
 * STOF_FORMAT_GPU_MIN_S and the mask allows it, else on the CPU. Borrowed. */
/* The format of (mask, B, H, Sq, Sk, T): built on the GPU and kept there at long lengths
 * (*dev: the device addresses of row_ptr, col_idx, bmp_off, bitmap; the host format then
 * holds the statistics and the tile-row arrays only), else on the CPU (*dev NULL). */
static stof_status engine_format(stof_attn_engine *e, const stof_mask *mask, int64_t B,
                                 int64_t H, int64_t Sq, int64_t Sk, int T,
                                 const stof_mask_format **out, const uint64_t **dev) {
  *dev = NULL;
  if ((Sq >= STOF_FORMAT_GPU_MIN_S || Sk >= STOF_FORMAT_GPU_MIN_S) &&
      stof_mask_format_gpu_supported(mask)) {
    stof_status st = e->gpu_formats ? STOF_OK : kernels_format_gpu_new(e->ctx, &e->gpu_formats);
    if (!st) st = kernels_format_gpu_get_dev(e->gpu_formats, mask, B, H, Sq, Sk, T, out, dev);
    if (st != STOF_ERR_UNSUPPORTED) return st;
    *dev = NULL;
    stof_ctx_clear_error(e->ctx); /* past the GPU builder's range: the CPU builds it */
  }
  return stof_mask_cache_get(e->formats, mask, B, H, Sq, Sk, T, out);
}

void kernels_attn_engine_caches(const stof_attn_engine *e, stof_mask_cache **cpu, kernels_format_gpu **gpu) {
  if (cpu) *cpu = e->formats;
  if (gpu) *gpu = e->gpu_formats;
}

static stof_status upload(stof_ctx *ctx, const void *src, size_t bytes, uint64_t *dst) {
  stof_status st = stof_cuda_malloc(ctx, bytes ? bytes : 8, dst);
  if (!st && bytes) st = stof_cuda_htod(ctx, *dst, src, bytes);
  return st;
}

/* The plan's copy of a format array: from the host, or device to device when dsrc (the
 * engine's cached on-device format) is given. */
static stof_status plan_array(stof_ctx *ctx, const void *src, uint64_t dsrc, size_t bytes, uint64_t *dst) {
  if (!dsrc) return upload(ctx, src, bytes, dst);
  stof_status st = stof_cuda_malloc(ctx, bytes ? bytes : 8, dst);
  if (!st && bytes) st = stof_cuda_dtod(ctx, *dst, dsrc, bytes);
  return st;
}

void stof_attn_plan_free(stof_attn_plan *p) {
  if (!p) return;
  stof_ctx *ctx = p->e->ctx;
  stof_cuda_mem_free(ctx, p->row_ptr);
  stof_cuda_mem_free(ctx, p->col_idx);
  stof_cuda_mem_free(ctx, p->bmp_off);
  stof_cuda_mem_free(ctx, p->bitmap);
  stof_cuda_mem_free(ctx, p->d_bucket);
  stof_cuda_mem_free(ctx, p->d_slopes);
  stof_cuda_mem_free(ctx, p->d_split);
  stof_cuda_mem_free(ctx, p->d_order);
  stof_cuda_mem_free(ctx, p->d_ws);
  stof_ctx_dealloc(ctx, p, sizeof *p);
}

/* The modifier's constant data on the device: T5's bucket of every offset up to maxd (the
 * offset from which the bucket no longer changes within the shape, so that the kernel's
 * clamp is exact; checked here, not assumed) and ALiBi's standard slopes (float32). */
static stof_status mod_upload(stof_attn_plan *p) {
  stof_ctx *ctx = p->e->ctx;
  const stof_attn_mod *m = &p->mod;
  stof_status st = STOF_OK;
  if (m->kind == STOF_ATTN_MOD_T5_BIAS) {
    int64_t L = p->Sq > p->Sk ? p->Sq : p->Sk, maxd = m->max_distance < L ? m->max_distance : L;
    for (int side = 0; side < 2; side++) {
      int64_t sg = side ? 1 : -1;
      if (stof_attn_t5_bucket(sg * maxd, m->bidirectional, m->num_buckets, m->max_distance) !=
          stof_attn_t5_bucket(sg * L, m->bidirectional, m->num_buckets, m->max_distance))
        maxd = L; /* not constant past max_distance: every offset of the shape */
    }
    size_t n = 2 * (size_t)(maxd + 1);
    int32_t *b = stof_ctx_alloc(ctx, sizeof *b * n);
    if (!b) return STOF_ERR_NOMEM;
    for (int64_t k = 0; k <= maxd && !st; k++)
      for (int side = 0; side < 2; side++) {
        int64_t rel = side ? k : -k, v = stof_attn_t5_bucket(rel, m->bidirectional, m->num_buckets, m->max_distance);
        if (v < 0 || v >= m->num_buckets) {
          st = stof_ctx_error(ctx, STOF_ERR_INTERNAL, "attention: T5 bucket %lld of offset %lld", (long long)v,
                              (long long)rel);
          break;
        }
        b[side ? maxd + 1 + k : k] = (int32_t)v;
      }
    if (!st) st = upload(ctx, b, sizeof *b * n, &p->d_bucket);
    stof_ctx_dealloc(ctx, b, sizeof *b * n);
    p->maxd = (int)maxd;
  } else if (m->kind == STOF_ATTN_MOD_ALIBI && p->bias_dtype == STOF_DTYPE_F32) {
    float *sl = stof_ctx_alloc(ctx, sizeof *sl * (size_t)p->H);
    if (!sl) return STOF_ERR_NOMEM;
    for (int64_t h = 0; h < p->H; h++) sl[h] = (float)stof_attn_alibi_slope(p->H, h);
    st = upload(ctx, sl, sizeof *sl * (size_t)p->H, &p->d_slopes);
    stof_ctx_dealloc(ctx, sl, sizeof *sl * (size_t)p->H);
  }
  return st;
}

/* CTAs of the Hopper kernel resident on one SM, for the split rule's launch balance: what
 * shared memory allows, capped by registers as cuobjdump -res-usage reports them for the
 * variants the selector picks (tile 128: 168 registers x 256-384 threads, one CTA; tile 64:
 * 186-220 x 128, two, or 168 and three by STOF_MIN_BLOCKS=3 at D = 128 without a modifier
 * (hopper_min_blocks); Q in shared memory: 96 x 160, four by STOF_MIN_BLOCKS=4; key64: 93-95
 * x 288, two by STOF_MIN_BLOCKS=2, as attn_dev's occupancy query reported, sessions 18 and 21).
 * plain: no score modifier. A TMA plan's cp.async twin (run only where the driver refuses the
 * layout's tensor maps) is compiled as a cp.async choice, so at D = 128, tile 64 it has three
 * CTAs where this counts the TMA kernel's. */
static int64_t hopper_ctas_per_sm(const stof_cuda_props *dev, int T, int64_t D, int stages, int tma, int key64,
                                  int plain) {
  int min_blocks = hopper_min_blocks(T, D, stages, tma, key64, plain);
  int64_t by_regs = min_blocks ? min_blocks : T == 128 ? 1 : 2;
  int64_t by_smem = (int64_t)(dev->smem_per_block_optin + 1024) / (smem_hopper(T, D, stages, tma, key64) + 1024);
  return by_smem < by_regs ? by_smem : by_regs;
}

/* kernels_int.h. */
int64_t kernels_attn_ctas_per_sm(const stof_cuda_props *dev, const stof_attn_choice *c, int64_t D,
                                 const stof_attn_mod *mod) {
  return hopper_ctas_per_sm(dev, c->tile, D, c->stages, c->tma, c->key64, mod_plain(mod));
}

/* The query shift (kernels_format_qshift) of a Hopper choice at tile 64, from f (the
 * unshifted format at tile 64, of at most QSHIFT_MAX_FETCH bytes wherever it is): taken where
 * the shifted format has at most QSHIFT_MAX_TILES of f's non-empty tiles (counted before it is
 * built), or asked for (o->qshift 1). Then c has qshift 32 and its masking (per lane or not,
 * the half skip) decided again from the shifted tiles' counts (hopper_masking), and *fs is
 * the shifted format (the caller's); else *fs is NULL and c unchanged but for its why. The
 * selector's other rules (tile 32, 128, key64) stay those of the unshifted counts, which they
 * were calibrated on. Measured on an H200 (session 22, bench/results/s22/call1): masks of
 * the same work whose rows take 2 instead of 3 steps of 64 keys (window(0, 64) against
 * window(32, 32), 0.67x the tiles) ran in 0.88-0.92x the time at D 64 and D 128, B x S
 * 8 x 1024 .. 16 x 4096; 3 steps instead of 4 (global(32) | window(0, 64) against
 * longformer(32, 32), 0.80x the tiles) in 0.90-0.98x. In the engine
 * (calls 2 and 5, against qshift -1): sliding 0.89-0.93x, longformer 0.89-0.98x, at B 1 x H 32
 * x S 32k / 128k, D 128, 0.87-0.89x. A format kept on the device only (long sequences; fdev,
 * its arrays there) is fetched for the transform when its arrays take at most
 * QSHIFT_MAX_FETCH bytes (sliding's take ~3 MB at S = 128k; BigBird's, at tile 32 anyway,
 * 719 MB). */
#define QSHIFT_MAX_TILES 0.85
#define QSHIFT_MAX_FETCH ((size_t)64 << 20)
static stof_status choose_qshift(stof_ctx *ctx, const stof_mask_format *f, const uint64_t *fdev, int64_t D,
                                 const stof_attn_opts *o, stof_attn_choice *c, stof_mask_format **fs) {
  *fs = NULL;
  int fits = c->kernel == STOF_ATTN_BLOCK && c->hopper && c->tile == 64 && !c->key64 && f->T == 64 && !f->qshift;
  int host = f->row_ptr && (!f->nentry || (f->col_idx && f->bmp_off)) && (!f->nword || f->bitmap);
  /* the same limit wherever the format is (so that explain, which builds it on the host, says
   * what the plan does) */
  int small = f->bytes <= QSHIFT_MAX_FETCH;
  if (o->qshift < 0 || !fits || !small || (!host && !fdev)) {
    if (o->qshift == 1)
      return stof_ctx_error(ctx, STOF_ERR_UNSUPPORTED, "attention: qshift asked for, but it needs the Hopper kernel "
                            "at tile 64 without key64 and a format of at most %zu MB (%s-wise, tile %d%s%s)",
                            QSHIFT_MAX_FETCH >> 20, stof_attn_kernel_name(c->kernel), c->tile,
                            c->hopper ? "" : ", not the Hopper kernel", small ? "" : ", a larger format");
    return STOF_OK;
  }
  if (!host) { /* a format on the device: a shallow copy with its arrays fetched (freed below) */
    stof_mask_format fh = *f;
    size_t ncol_b = (size_t)f->nentry * 4, nbits_b = (size_t)f->nword * 8;
    fh.col_idx = stof_ctx_alloc(ctx, ncol_b ? ncol_b : 4), fh.bmp_off = stof_ctx_alloc(ctx, ncol_b ? ncol_b : 4);
    fh.bitmap = stof_ctx_alloc(ctx, nbits_b ? nbits_b : 8);
    stof_status st = !fh.col_idx || !fh.bmp_off || !fh.bitmap ? STOF_ERR_NOMEM : STOF_OK;
    if (!st && ncol_b) st = stof_cuda_dtoh(ctx, fh.col_idx, fdev[1], ncol_b);
    if (!st && ncol_b) st = stof_cuda_dtoh(ctx, fh.bmp_off, fdev[2], ncol_b);
    if (!st && nbits_b) st = stof_cuda_dtoh(ctx, fh.bitmap, fdev[3], nbits_b);
    if (!st) st = choose_qshift(ctx, &fh, NULL, D, o, c, fs);
    stof_ctx_dealloc(ctx, fh.col_idx, ncol_b ? ncol_b : 4);
    stof_ctx_dealloc(ctx, fh.bmp_off, ncol_b ? ncol_b : 4);
    stof_ctx_dealloc(ctx, fh.bitmap, nbits_b ? nbits_b : 8);
    return st;
  }
  /* counted first (or bounded from the full tiles alone, where that already passes the limit):
   * built only where taken */
  int64_t n0 = f->ntile_full + f->ntile_partial, n1 = 0, nm = f->nmask ? f->nmask : 1;
  if (!n0 && o->qshift == 0) return STOF_OK; /* nothing to run */
  int64_t limit = o->qshift == 1 ? -1 : (int64_t)floor(QSHIFT_MAX_TILES * (double)n0);
  stof_mask_format *g = NULL;
  int counted = 1;
  stof_status st = kernels_format_qshift(ctx, f, limit, &n1, &counted, &g);
  if (st == STOF_ERR_UNSUPPORTED && o->qshift == 0) { /* too large to shift: the grid as it is */
    stof_ctx_clear_error(ctx);
    st = STOF_OK;
  }
  if (st) return st;
  size_t n = strlen(c->why);
  if (!g) {
    if (n + 2 < sizeof c->why)
      snprintf(c->why + n, sizeof c->why - n, "; queries not shifted (%s%lld tiles an instance against %lld, > %.0f%%)",
               counted ? "" : "at least ", (long long)(n1 / nm), (long long)(n0 / nm), 100 * QSHIFT_MAX_TILES);
    return STOF_OK;
  }
  /* the shifted tiles decide the masking again (their partial and half-empty shares) */
  char mask_why[160];
  hopper_masking(g, D, o, c, mask_why, sizeof mask_why);
  c->qshift = 32;
  *fs = g;
  char why_take[32] = "asked for";
  if (o->qshift != 1) snprintf(why_take, sizeof why_take, "<= %.0f%%", 100 * QSHIFT_MAX_TILES);
  if (n + 2 < sizeof c->why)
    snprintf(c->why + n, sizeof c->why - n, "; queries shifted by 32 (%lld tiles an instance against %lld, %s), then%s",
             (long long)(n1 / nm), (long long)(n0 / nm), why_take, mask_why + 1);
  return STOF_OK;
}

/* The split decision for a choice (sp->nsplit 0 and no table where nothing is split, or
 * where the Hopper kernel is not chosen): the choice's split_* fields set and its why
 * extended. f is the format at the choice's tile. */
static stof_status choose_split(stof_ctx *ctx, const stof_mask_format *f, int64_t BH, int64_t D,
                                const stof_cuda_props *dev, const stof_attn_opts *o, stof_attn_choice *c,
                                kernels_attn_split *sp) {
  memset(sp, 0, sizeof *sp);
  if (!c->hopper) {
    if (o->split > 0)
      return stof_ctx_error(ctx, STOF_ERR_UNSUPPORTED, "attention: split %d asked for, but the Hopper kernel is not "
                            "chosen (%s-wise, %s): only it splits tile-rows", o->split,
                            stof_attn_kernel_name(c->kernel), c->kernel == STOF_ATTN_BLOCK ? "mma.sync" : "a warp per row");
    return STOF_OK;
  }
  if (f->T != c->tile)
    return stof_ctx_error(ctx, STOF_ERR_INTERNAL, "attention: split from a tile-%d format for tile %d", f->T, c->tile);
  int64_t slots = (int64_t)dev->sm_count * kernels_attn_ctas_per_sm(dev, c, D, &o->mod);
  stof_status st = kernels_attn_split_plan(ctx, f->row_ptr, f->nmask, f->nrow, BH, c->tile, D, slots, o->split, sp);
  if (st) return st;
  size_t n = strlen(c->why);
  if (n + 2 < sizeof c->why) snprintf(c->why + n, sizeof c->why - n, "; %s", sp->why);
  if (!sp->nsplit) return STOF_OK;
  c->split_rows = sp->rows, c->split_chunks = sp->chunks;
  c->split_min_tiles = sp->min_tiles, c->split_chunk_tiles = sp->chunk_tiles;
  c->split_ws = sp->ws_bytes;
  return STOF_OK;
}

/* Whether the plan's format (f, at the choice's tile) has no partial tile: then the Hopper
 * kernel is compiled without its mask code (STOF_SM90_NOPARTIAL), which would be wrong on a
 * partial tile; the choice's why says so. */
static void choose_nopartial(const stof_mask_format *f, stof_attn_choice *c) {
  c->nopartial = c->hopper && f->T == c->tile && f->ntile_partial == 0;
  size_t n = strlen(c->why);
  if (c->nopartial && n + 2 < sizeof c->why)
    snprintf(c->why + n, sizeof c->why - n, "; no partial tile at tile %d: the kernel without mask code", c->tile);
}

/* The launch order of a Hopper choice that splits nothing, or of the block kernel at tile 32
 * on a Hopper GPU (the selector's BigBird tile there; STOF_ORDER), f at its tile:
 * c->heavy_rows, c->order_group and the why set, *ord's table owned by the caller (none where
 * the default order stays). BH (the plan's B x H), D and the tile bound the groups
 * (kernels_attn_order_group_max). A split plan (split 1) keeps the default order. A group
 * asked for (o->order_group > 0) where no order is taken is an error, as a forced split is. */
static stof_status choose_order(stof_ctx *ctx, const stof_mask_format *f, int64_t BH, int64_t D,
                                const stof_cuda_props *dev, int split, const stof_attn_opts *o, stof_attn_choice *c,
                                kernels_attn_order *ord) {
  memset(ord, 0, sizeof *ord);
  c->heavy_rows = 0, c->order_group = 0;
  int hopper_gpu = dev && dev->cc_major == 9 && dev->cc_minor == 0;
  int takes = !split && c->kernel == STOF_ATTN_BLOCK && (c->hopper || (c->tile == 32 && hopper_gpu)) &&
              f->T == c->tile;
  if (o->order_group > 0 && (!takes || o->order < 0))
    return stof_ctx_error(ctx, STOF_ERR_UNSUPPORTED, "attention: order_group %d asked for, but %s", o->order_group,
                          split            ? "the plan splits its long tile-rows (split plans keep the default order; "
                                             "split -1 to order them)"
                          : o->order < 0 ? "order -1 asks for the default order"
                                         : "the launch order needs the Hopper kernel, or the block kernel at tile 32 "
                                           "on a Hopper GPU");
  if (!takes) return STOF_OK;
  if (o->order < 0) {
    snprintf(ord->why, sizeof ord->why, "last tile-row first (asked for)");
  } else {
    int64_t gmax = o->order_group > 0 ? (o->order_group < BH ? o->order_group : BH)
                                      : kernels_attn_order_group_max(BH, f->Sk, D, c->tile);
    if (BH * f->nrow > INT32_MAX) { /* the kernel's groups walk in 32 bits (order_cta) */
      if (o->order_group > 1)
        return stof_ctx_error(ctx, STOF_ERR_UNSUPPORTED, "attention: order_group %d asked for, but B x H x tile-rows = "
                              "%lld is past the groups' 2^31 - 1", o->order_group, (long long)(BH * f->nrow));
      gmax = 1;
    }
    stof_status st = kernels_attn_order_plan(ctx, f->row_ptr, f->nmask, f->nrow, gmax, o->order_group > 0, ord);
    if (st) return st;
  }
  c->heavy_rows = ord->nheavy;
  c->order_group = ord->table && ord->group > 1 ? ord->group : 0;
  size_t n = strlen(c->why);
  if (n + 2 < sizeof c->why) snprintf(c->why + n, sizeof c->why - n, "; %s", ord->why);
  return STOF_OK;
}

stof_status stof_attention_select_split(stof_ctx *ctx, const stof_mask_format *f, int64_t B, int64_t H, int64_t D,
                                        const stof_cuda_props *dev, const stof_attn_opts *opts,
                                        stof_attn_choice *c) {
  stof_attn_opts o = opts ? *opts : (stof_attn_opts){0};
  if (c->hopper && !dev) return stof_ctx_error(ctx, STOF_ERR_ARG, "attention: a Hopper choice without a device");
  stof_mask_format *fs = NULL;
  stof_status st = choose_qshift(ctx, f, NULL, D, &o, c, &fs);
  if (st) return st;
  if (fs) f = fs;
  choose_nopartial(f, c);
  kernels_attn_split sp;
  st = choose_split(ctx, f, B * H, D, dev, &o, c, &sp);
  int split = sp.nsplit > 0;
  kernels_attn_split_free(ctx, &sp);
  kernels_attn_order ord = {0};
  if (!st) st = choose_order(ctx, f, B * H, D, dev, split, &o, c, &ord);
  kernels_attn_order_free(ctx, &ord);
  stof_mask_format_free(fs);
  return st;
}

/* The split of heavy tile-rows (kernels/attention_split.c) for a Hopper plan, as choose_split
 * decided it (sp; nothing where sp->nsplit is 0): the table and workspace on the device, the
 * chunk kernel (and its cp.async twin) and the combine compiled, and their grids. The main
 * kernel that skips split rows is compiled by the caller (get_variant's split 1). */
static stof_status plan_split(stof_attn_plan *p, const kernels_attn_split *sp) {
  if (!sp->nsplit) return STOF_OK;
  stof_attn_engine *e = p->e;
  stof_ctx *ctx = e->ctx;
  const stof_attn_choice *c = &p->choice;
  p->split_table_bytes = sizeof *sp->table * sp->ntable;
  p->split_ws_bytes = sp->ws_bytes;
  p->split_nchunk_max = sp->nchunk_max;
  int64_t off[5] = {sp->off_row_nchunk, sp->off_chunk_ptr, sp->off_chunk, sp->off_srow_ptr, sp->off_srow};
  memcpy(p->split_off, off, sizeof off);
  stof_status st = upload(ctx, sp->table, p->split_table_bytes, &p->d_split);
  if (!st) st = stof_cuda_malloc(ctx, p->split_ws_bytes, &p->d_ws);
  if (st || (st = get_variant(e, c, p->D, p->dtype, &p->mod, p->bias_dtype, 2, &p->fn_chunk, &p->fn_combine)))
    return st;
  if (c->tma) { /* the twin: the same with cp.async K/V loads */
    stof_attn_choice twin = *c;
    twin.tma = 0;
    if ((st = get_variant(e, &twin, p->D, p->dtype, &p->mod, p->bias_dtype, 2, &p->fn_chunk_twin, NULL)))
      return st;
  }
  p->grid_chunk[0] = (unsigned)sp->nchunk_max, p->grid_combine[0] = (unsigned)sp->nsplit_max;
  p->grid_chunk[1] = p->grid_combine[1] = p->grid[1];
  p->grid_chunk[2] = p->grid_combine[2] = p->grid[2];
  return STOF_OK;
}

/* The launch order of a plan (choose_order: the Hopper kernel, or the block kernel at tile 32
 * on a Hopper GPU; none where it splits, split 1): the choice's heavy_rows, order_group and
 * why, the table on the device. Before get_variant, which compiles the kernel with
 * STOF_SM90_ORDER / STOF_ORDER where heavy_rows > 0 or order_group > 1 (uses_order). */
static stof_status plan_order(stof_attn_plan *p, const stof_mask_format *f, int split, const stof_attn_opts *o) {
  stof_ctx *ctx = p->e->ctx;
  kernels_attn_order ord;
  stof_status st = choose_order(ctx, f, p->B * p->H, p->D, &p->e->props, split, o, &p->choice, &ord);
  if (!st && uses_order(&p->choice)) st = upload(ctx, ord.table, sizeof *ord.table * ord.ntable, &p->d_order);
  kernels_attn_order_free(ctx, &ord);
  return st;
}

stof_status stof_attn_plan_new(stof_attn_engine *e, const stof_mask *mask, int64_t B, int64_t H,
                               int64_t Hkv, int64_t Sq, int64_t Sk, int64_t D, stof_dtype dtype,
                               const stof_attn_opts *opts, stof_attn_plan **out) {
  stof_ctx *ctx = e->ctx;
  stof_status st;
  *out = NULL;
  double t0 = kernels_now_ms();
  if (!mask) return stof_ctx_error(ctx, STOF_ERR_ARG, "attention: missing mask");
  if (opts && (st = kernels_attn_mod_gpu_check(ctx, &opts->mod, opts->bias_dtype, dtype))) return st;
  if (B <= 0 || H <= 0 || Hkv <= 0 || Sq <= 0 || Sk <= 0)
    return stof_ctx_error(ctx, STOF_ERR_SHAPE, "attention: sizes must be positive (B %lld, H %lld, Hkv %lld, Sq %lld, Sk %lld)",
                          (long long)B, (long long)H, (long long)Hkv, (long long)Sq, (long long)Sk);
  if (H % Hkv)
    return stof_ctx_error(ctx, STOF_ERR_SHAPE, "attention: %lld query heads is not a multiple of %lld key/value heads",
                          (long long)H, (long long)Hkv);
  if ((st = head_dim_check(ctx, D))) return st;
  if (dtype != STOF_DTYPE_F16 && dtype != STOF_DTYPE_BF16)
    return stof_ctx_error(ctx, STOF_ERR_UNSUPPORTED, "attention: dtype %s is not supported on the GPU (float16 or bfloat16)",
                          stof_dtype_name(dtype));
  if (B * H > 0x7fffffff || Sq > 0x7fffffff || Sk > 0x7fffffff)
    return stof_ctx_error(ctx, STOF_ERR_UNSUPPORTED, "attention: sizes past 2^31");
  stof_attn_opts o = opts ? *opts : (stof_attn_opts){0};
  const stof_mask_format *f;
  const uint64_t *fdev; /* the format's arrays on the device (NULL: on the host) */
  st = engine_format(e, mask, B, H, Sq, Sk, o.tile ? o.tile : 64, &f, &fdev);
  if (st) return st;
  /* a mask that keeps no pair is no error: every row has no valid key and gives zeros, as
   * on the CPU and in the runtime's intrinsic (the kernels write zeros for such rows) */
  stof_attn_plan *p = stof_ctx_alloc(ctx, sizeof *p);
  if (!p) return STOF_ERR_NOMEM;
  memset(p, 0, sizeof *p); /* a failure below frees whatever is set */
  kernels_attn_split sp = {0}; /* the split decision (its table freed at the end) */
  stof_mask_format *fshift = NULL; /* the query-shifted format, where taken (freed at the end) */
  p->e = e;
  if ((st = stof_attention_select(ctx, f, B, H, D, &e->props, &o, &p->choice))) goto fail;
  /* another tile chosen: the plan copies its arrays from the format at that tile, so a
   * selector's format kept on the device (fdev) is dropped from the GPU cache before that one
   * is built (not kept for the engine's lifetime nor beside it: BigBird's at S = 128k, H = 32
   * is 719 MiB); a later plan that wants it builds it again. f pointed into it: nothing holds
   * it past here. A host format stays in the CPU cache: host memory, and rebuilding it took
   * 0.8-2.6 ms a plan at S = 2048-4096 (bigbird) for nothing. */
  if (p->choice.tile != f->T) {
    int T_select = f->T, on_device = fdev != NULL;
    f = NULL, fdev = NULL;
    if ((on_device && (st = kernels_format_gpu_drop(e->gpu_formats, mask, B, H, Sq, Sk, T_select))) ||
        (st = engine_format(e, mask, B, H, Sq, Sk, p->choice.tile, &f, &fdev)))
      goto fail;
  }
  /* the query shift: then the plan's arrays and decisions are the shifted format's (on the
   * host), freed at the end; an unshifted format kept on the device is dropped from the GPU
   * cache, as for another tile above (the plan copies the shifted one) */
  if ((st = choose_qshift(ctx, f, fdev, D, &o, &p->choice, &fshift))) goto fail;
  if (fshift) {
    int on_device = fdev != NULL, T_unshifted = f->T;
    f = fshift, fdev = NULL;
    if (on_device && (st = kernels_format_gpu_drop(e->gpu_formats, mask, B, H, Sq, Sk, T_unshifted))) goto fail;
  }
  p->B = B, p->H = H, p->Hkv = Hkv, p->Sq = Sq, p->Sk = Sk, p->D = D, p->dtype = dtype;
  p->mask_b = f->mask_b, p->mask_h = f->mask_h;
  p->scale = o.scale > 0 ? o.scale : (float)(1.0 / sqrt((double)D));
  p->nvalid = f->nvalid * (f->mask_b == 1 ? B : 1) * (f->mask_h == 1 ? H : 1);
  p->nrow_ptr = (size_t)f->nmask * (size_t)(f->nrow + 1);
  p->nentry = (size_t)f->nentry;
  p->nword = (size_t)f->nword;
  if ((st = plan_array(ctx, f->row_ptr, fdev ? fdev[0] : 0, p->nrow_ptr * 4, &p->row_ptr)) ||
      (st = plan_array(ctx, f->col_idx, fdev ? fdev[1] : 0, p->nentry * 4, &p->col_idx)) ||
      (st = plan_array(ctx, f->bmp_off, fdev ? fdev[2] : 0, p->nentry * 4, &p->bmp_off)) ||
      (st = plan_array(ctx, f->bitmap, fdev ? fdev[3] : 0, p->nword * 8, &p->bitmap)))
    goto fail;
  p->mod = o.mod;
  p->bias_dtype = o.bias_dtype;
  if ((st = mod_upload(p))) goto fail;
  /* the plan's decisions from the format at its tile, before anything is compiled: mask code,
   * the split of heavy tile-rows (then the main kernel skips them: split 1), else the order */
  choose_nopartial(f, &p->choice);
  if ((st = choose_split(ctx, f, B * H, D, &e->props, &o, &p->choice, &sp)) ||
      (st = plan_order(p, f, sp.nsplit > 0, &o)))
    goto fail;
  int split = sp.nsplit ? 1 : 0;
  if ((st = get_variant(e, &p->choice, D, dtype, &p->mod, p->bias_dtype, split, &p->fn, NULL))) goto fail;
  int T = p->choice.tile, W = p->choice.warps;
  if (p->choice.tma) { /* the fallback for layouts the driver cannot map */
    stof_attn_choice twin = p->choice;
    twin.tma = 0;
    if ((st = get_variant(e, &twin, D, dtype, &p->mod, p->bias_dtype, split, &p->fn_twin, NULL))) goto fail;
    p->block_twin[0] = threads_hopper(T, 0, p->choice.key64), p->block_twin[1] = p->block_twin[2] = 1;
    p->smem_twin = smem_hopper(T, D, p->choice.stages, 0, p->choice.key64);
  }
  if (p->choice.kernel == STOF_ATTN_BLOCK) {
    p->grid[0] = (unsigned)((Sq + p->choice.qshift + T - 1) / T);
    p->block[0] = p->choice.hopper ? threads_hopper(T, p->choice.tma, p->choice.key64) : 32u * (unsigned)W;
    p->block[1] = p->block[2] = 1;
    p->smem = p->choice.hopper ? smem_hopper(T, D, p->choice.stages, p->choice.tma, p->choice.key64)
                               : smem_portable(T, D, p->choice.stages);
  } else {
    p->grid[0] = (unsigned)((Sq + W - 1) / W);
    p->block[0] = 32u * (unsigned)W, p->block[1] = p->block[2] = 1;
    p->smem = 0;
  }
  /* the (batch, head) pairs over grid y and z (each at most 65535) */
  long long bh = (long long)(B * H), gy = bh < 65535 ? bh : 65535, gz = (bh + gy - 1) / gy;
  if (gz > 65535 || bh > INT32_MAX) {
    st = stof_ctx_error(ctx, STOF_ERR_UNSUPPORTED, "attention: B * H = %lld (batch, head) pairs: at most %d", bh,
                        INT32_MAX);
    goto fail;
  }
  p->grid[1] = (unsigned)gy, p->grid[2] = (unsigned)gz;
  if ((st = plan_split(p, &sp))) goto fail;
  kernels_attn_split_free(ctx, &sp);
  stof_mask_format_free(fshift);
  p->prepare_ms = kernels_now_ms() - t0;
  *out = p;
  return STOF_OK;
fail:
  kernels_attn_split_free(ctx, &sp);
  stof_mask_format_free(fshift);
  stof_attn_plan_free(p);
  return st;
}

stof_status stof_attn_plan_run(stof_attn_plan *p, const stof_tensor *q, const stof_tensor *k,
                               const stof_tensor *v, stof_tensor *out) {
  return stof_attn_plan_run_bias(p, q, k, v, NULL, out);
}

stof_status stof_attn_plan_run_bias(stof_attn_plan *p, const stof_tensor *q, const stof_tensor *k,
                                    const stof_tensor *v, const stof_tensor *bias, stof_tensor *out) {
  stof_ctx *ctx = p->e->ctx;
  int64_t bias_hs = 0;
  if (bias) {
    int t5 = p->mod.kind == STOF_ATTN_MOD_T5_BIAS;
    if (p->mod.kind == STOF_ATTN_MOD_NONE)
      return stof_ctx_error(ctx, STOF_ERR_ARG, "attention: a bias tensor for a plan without a modifier that reads one");
    if (bias->device != STOF_DEVICE_CUDA)
      return stof_ctx_error(ctx, STOF_ERR_ARG, "attention: the %s is on the CPU (move it with :to(\"cuda\"))",
                            t5 ? "T5 bias table" : "ALiBi slopes");
    if (bias->dtype != p->bias_dtype)
      return stof_ctx_error(ctx, STOF_ERR_TYPE, "attention: the %s is %s, the plan is for %s",
                            t5 ? "T5 bias table" : "ALiBi slopes", stof_dtype_name(bias->dtype),
                            stof_dtype_name(p->bias_dtype));
    if (t5 && (bias->ndim != 2 || bias->shape[0] != p->H || bias->shape[1] != p->mod.num_buckets ||
               (bias->strides[1] != 1 && bias->shape[1] > 1)))
      return stof_ctx_error(ctx, STOF_ERR_SHAPE, "attention: the T5 bias table must be [H, buckets] = [%lld, %d], "
                            "its rows contiguous", (long long)p->H, p->mod.num_buckets);
    if (!t5 && (bias->ndim != 1 || bias->shape[0] != p->H))
      return stof_ctx_error(ctx, STOF_ERR_SHAPE, "attention: the ALiBi slopes must be [H] = [%lld]", (long long)p->H);
    bias_hs = p->H > 1 ? bias->strides[0] : 0;
  } else if (p->mod.kind == STOF_ATTN_MOD_T5_BIAS) {
    return stof_ctx_error(ctx, STOF_ERR_ARG, "attention: the T5 bias needs its [H, buckets] table");
  }
  int64_t d[6];
  stof_status st = check_shapes(ctx, "attention", q, k, v, out, d);
  if (st) return st;
  int64_t want[6] = {p->B, p->H, p->Hkv, p->Sq, p->Sk, p->D};
  if (memcmp(d, want, sizeof d))
    return stof_ctx_error(ctx, STOF_ERR_SHAPE,
                          "attention: tensors are (B %lld, H %lld, Hkv %lld, Sq %lld, Sk %lld, D %lld), the plan is for (%lld, %lld, %lld, %lld, %lld, %lld)",
                          (long long)d[0], (long long)d[1], (long long)d[2], (long long)d[3], (long long)d[4], (long long)d[5],
                          (long long)want[0], (long long)want[1], (long long)want[2], (long long)want[3], (long long)want[4], (long long)want[5]);
  const stof_tensor *t[4] = {q, k, v, out};
  static const char *const names[4] = {"q", "k", "v", "out"};
  for (int i = 0; i < 4; i++) {
    if (t[i]->device != STOF_DEVICE_CUDA)
      return stof_ctx_error(ctx, STOF_ERR_ARG, "attention: %s is on the CPU (move it with :to(\"cuda\"))", names[i]);
    if (t[i]->dtype != p->dtype)
      return stof_ctx_error(ctx, STOF_ERR_TYPE, "attention: %s is %s, the plan is for %s", names[i],
                            stof_dtype_name(t[i]->dtype), stof_dtype_name(p->dtype));
    if (t[i]->strides[3] != 1 && t[i]->shape[3] > 1)
      return stof_ctx_error(ctx, STOF_ERR_ARG,
                            "attention: %s's head dim is strided (stride %lld): the kernels need it contiguous",
                            names[i], (long long)t[i]->strides[3]);
  }
  stof_attn_layout l;
  int64_t *dst[4] = {l.q, l.k, l.v, l.o};
  for (int i = 0; i < 4; i++) memcpy(dst[i], t[i]->strides, sizeof l.q);
  return stof_attn_plan_launch_bias(p, (uint64_t)(uintptr_t)q->data, (uint64_t)(uintptr_t)k->data,
                                    (uint64_t)(uintptr_t)v->data, (uint64_t)(uintptr_t)out->data, &l,
                                    bias ? (uint64_t)(uintptr_t)bias->data : 0, bias_hs);
}

/* The layout with the strides of extent-1 dims set to 0 (they address nothing), checked as
 * stof_attn_plan_launch_strided says. */
static stof_status layout_check(const stof_attn_plan *p, const uint64_t addr[4], stof_attn_layout *l) {
  static const char *const names[4] = {"q", "k", "v", "out"};
  int64_t *st[4] = {l->q, l->k, l->v, l->o};
  for (int i = 0; i < 4; i++) {
    int kv = i == 1 || i == 2;
    int64_t ext[3] = {p->B, kv ? p->Hkv : p->H, kv ? p->Sk : p->Sq};
    if (addr[i] & 15)
      return stof_ctx_error(p->e->ctx, STOF_ERR_ARG, "attention: %s at 0x%llx is not 16-byte aligned", names[i],
                            (unsigned long long)addr[i]);
    for (int d = 0; d < 3; d++) {
      if (ext[d] == 1) st[i][d] = 0;
      if (st[i][d] < 0 || st[i][d] % 8 || (d == 2 && st[i][d] >= ((int64_t)1 << 24)))
        return stof_ctx_error(p->e->ctx, STOF_ERR_ARG,
                              "attention: %s's %s stride %lld: strides must be >= 0 and multiples of 8 elements "
                              "(16 bytes), row strides under 2^24",
                              names[i], d == 0 ? "batch" : d == 1 ? "head" : "row", (long long)st[i][d]);
    }
  }
  return STOF_OK;
}

static int tmap_entry_is(const attn_tmap_entry *t, uint64_t pk, uint64_t pv, const stof_attn_layout *l) {
  return t->k == pk && t->v == pv && !memcmp(l->k, t->ks, sizeof l->k) && !memcmp(l->v, t->vs, sizeof l->v);
}

/* K's and V's TMA maps for the layout: *e its cache entry, encoded only when the plan has not
 * run that layout among its last ATTN_TMAP_CACHE ones ((*e)->state -1: the driver refused it,
 * the twin runs; the error cleared). */
static stof_status tma_maps(stof_attn_plan *p, uint64_t pk, uint64_t pv, const stof_attn_layout *l,
                            const attn_tmap_entry **e) {
  stof_ctx *ctx = p->e->ctx;
  if (p->ntmap && tmap_entry_is(&p->tmaps[p->tmap_last], pk, pv, l)) { /* the same K and V again */
    *e = &p->tmaps[p->tmap_last];
    return STOF_OK;
  }
  for (int i = 0; i < p->ntmap; i++)
    if (tmap_entry_is(&p->tmaps[i], pk, pv, l)) {
      p->tmap_last = i;
      *e = &p->tmaps[i];
      return STOF_OK;
    }
  /* [B][Hkv][Sk][D] walked as {D, Sk, Hkv, B}; boxes of T rows x 64 columns in the kernel's
   * 128-byte swizzle. A dim of extent 1 gets the stride a contiguous tensor would have (any
   * value addresses nothing there; the driver wants one in range). */
  uint64_t dims[4] = {(uint64_t)p->D, (uint64_t)p->Sk, (uint64_t)p->Hkv, (uint64_t)p->B};
  uint32_t box[4] = {64, (uint32_t)p->choice.tile, 1, 1};
  stof_cuda_tmap m[2];
  const int64_t *src[2] = {l->k, l->v};
  uint64_t base[2] = {pk, pv};
  stof_status st = STOF_OK;
  for (int t = 0; t < 2 && !st; t++) {
    uint64_t s[3], inner = (uint64_t)p->D;
    for (int d = 0; d < 3; d++) {
      s[d] = dims[d + 1] == 1 ? inner : (uint64_t)src[t][2 - d];
      inner = s[d] * dims[d + 1];
      s[d] *= 2;
    }
    st = stof_cuda_tmap_encode_4d(ctx, &m[t], base[t], p->dtype, dims, s, box, 128);
  }
  if (st && st != STOF_ERR_CUDA) return st;
  if (st) stof_ctx_clear_error(ctx);
  /* a free entry while there is one, then round robin */
  int i = p->ntmap < ATTN_TMAP_CACHE ? p->ntmap++ : p->tmap_next;
  p->tmap_next = (i + 1) % ATTN_TMAP_CACHE;
  attn_tmap_entry *t = &p->tmaps[i];
  t->state = st ? -1 : 1;
  if (!st) {
    memcpy(t->map[0], &m[0], sizeof m[0]);
    memcpy(t->map[1], &m[1], sizeof m[1]);
  }
  t->k = pk, t->v = pv;
  memcpy(t->ks, l->k, sizeof l->k);
  memcpy(t->vs, l->v, sizeof l->v);
  p->tmap_last = i;
  p->tmap_encodes++;
  *e = t;
  return STOF_OK;
}

stof_status stof_attn_plan_launch_bias(stof_attn_plan *p, uint64_t pq, uint64_t pk, uint64_t pv,
                                       uint64_t po, const stof_attn_layout *lay, uint64_t bias,
                                       int64_t bias_hs) {
  stof_ctx *ctx = p->e->ctx;
  stof_status st;
  attn_mod_args ma = {0};
  if (p->mod.kind == STOF_ATTN_MOD_T5_BIAS) {
    if (!bias) return stof_ctx_error(ctx, STOF_ERR_ARG, "attention: the T5 bias needs its [H, buckets] table");
    ma.bias = bias, ma.bias_hs = bias_hs, ma.bucket = p->d_bucket, ma.maxd = p->maxd;
  } else if (p->mod.kind == STOF_ATTN_MOD_ALIBI) {
    if (!bias && !p->d_slopes)
      return stof_ctx_error(ctx, STOF_ERR_ARG, "attention: ALiBi slopes of %s are needed (the standard ones are "
                            "float32)", stof_dtype_name(p->bias_dtype));
    ma.bias = bias ? bias : p->d_slopes, ma.bias_hs = bias ? bias_hs : 1;
  }
  ma.softcap = p->mod.softcap;
  if (ma.bias && (ma.bias % stof_dtype_size(p->bias_dtype) || bias_hs < 0))
    return stof_ctx_error(ctx, STOF_ERR_ARG, "attention: the modifier's tensor at 0x%llx (head stride %lld) is "
                          "misaligned or negatively strided", (unsigned long long)ma.bias, (long long)bias_hs);
  int64_t Sq = p->Sq, Sk = p->Sk, D = p->D;
  stof_attn_layout l = lay ? *lay
                           : (stof_attn_layout){{p->H * Sq * D, Sq * D, D},
                                                {p->Hkv * Sk * D, Sk * D, D},
                                                {p->Hkv * Sk * D, Sk * D, D},
                                                {p->H * Sq * D, Sq * D, D}};
  uint64_t addr[4] = {pq, pk, pv, po};
  if ((st = layout_check(p, addr, &l))) return st;
  stof_cuda_kernel *fn = p->fn, *fn_chunk = p->fn_chunk;
  const unsigned *block = p->block;
  unsigned smem = p->smem;
  stof_cuda_tmap tm[2]; /* by value: the kernel's last two parameters (TMA only) */
  memset(tm, 0, sizeof tm);
  if (p->choice.tma) {
    const attn_tmap_entry *te;
    if ((st = tma_maps(p, pk, pv, &l, &te))) return st;
    if (te->state < 0) fn = p->fn_twin, fn_chunk = p->fn_chunk_twin, block = p->block_twin, smem = p->smem_twin;
    else memcpy(&tm[0], te->map[0], sizeof tm[0]), memcpy(&tm[1], te->map[1], sizeof tm[1]);
  }
  int iB = (int)p->B, iH = (int)p->H, iHkv = (int)p->Hkv, iSq = (int)p->Sq, iSk = (int)p->Sk,
      mb = p->mask_b, mh = p->mask_h;
  float scale = p->scale;
  /* the kernel's split_t or order_t, by value, after the modifier (neither: none) */
  attn_split_args sa = {0};
  attn_order_args oa = {p->d_order, p->choice.heavy_rows, p->choice.order_group > 1 ? p->choice.order_group : 1};
  if (p->choice.split_rows) {
    uint64_t *tab[5] = {&sa.row_nchunk, &sa.chunk_ptr, &sa.chunk, &sa.srow_ptr, &sa.srow};
    for (int i = 0; i < 5; i++) *tab[i] = p->d_split + 4 * (uint64_t)p->split_off[i];
    sa.ws = p->d_ws, sa.nchunk_max = p->split_nchunk_max;
  }
  void *extra = p->choice.split_rows ? (void *)&sa : uses_order(&p->choice) ? (void *)&oa : NULL;
  void *args[21] = {&pq, &pk, &pv, &po, &p->row_ptr, &p->col_idx, &p->bmp_off, &p->bitmap,
                    &iB, &iH, &iHkv, &iSq, &iSk, &mb, &mh, &scale, &l, &ma};
  int na = 18;
  if (extra) args[na++] = extra;
  args[na++] = &tm[0];
  args[na++] = &tm[1];
  if (!p->choice.split_rows) return stof_cuda_launch(ctx, fn, p->grid, block, smem, args);
  /* Split rows: their chunks first (the long work starts at once), then every other row,
   * then the combine of the chunks into O; in stream order. Three launches, not one: CTAs
   * start in block-index order, so chunks put in one grid with the rows would start only
   * when their (b, h) comes up (the last pair's at the end of the launch), and the combine
   * must wait for every chunk of its row anyway. */
  void *cargs[] = {&po, &iB, &iH, &iSq, &mb, &mh, &l, &sa};
  static const unsigned combine_block[3] = {256, 1, 1};
  if ((st = stof_cuda_launch(ctx, fn_chunk, p->grid_chunk, block, smem, args)) ||
      (st = stof_cuda_launch(ctx, fn, p->grid, block, smem, args)))
    return st;
  return stof_cuda_launch(ctx, p->fn_combine, p->grid_combine, combine_block, 0, cargs);
}

stof_status stof_attn_plan_launch_strided(stof_attn_plan *p, uint64_t pq, uint64_t pk, uint64_t pv,
                                          uint64_t po, const stof_attn_layout *lay) {
  return stof_attn_plan_launch_bias(p, pq, pk, pv, po, lay, 0, 0);
}

stof_status stof_attn_plan_launch(stof_attn_plan *p, uint64_t pq, uint64_t pk, uint64_t pv,
                                  uint64_t po) {
  return stof_attn_plan_launch_strided(p, pq, pk, pv, po, NULL);
}

const stof_attn_choice *stof_attn_plan_choice(const stof_attn_plan *p) { return &p->choice; }
int64_t kernels_attn_plan_tmap_encodes(const stof_attn_plan *p) { return p->tmap_encodes; }
stof_ctx *stof_attn_plan_ctx(const stof_attn_plan *p) { return p->e->ctx; }
double stof_attn_plan_prepare_ms(const stof_attn_plan *p) { return p->prepare_ms; }
int64_t stof_attn_plan_nvalid(const stof_attn_plan *p) { return p->nvalid; }
size_t stof_attn_plan_format_bytes(const stof_attn_plan *p) {
  return p->nrow_ptr * 4 + p->nentry * 8 + p->nword * 8;
}

#define TIME_MAX_WARMUP 1000000 /* launches: warmup_ms (<= 60 s) sets the warm-up, not this */

static int cmp_ms(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

stof_status stof_attn_plan_time(stof_attn_plan *p, stof_tensor *const *q, stof_tensor *const *k,
                                stof_tensor *const *v, int nset, stof_tensor *out, int64_t reps,
                                double warmup_ms, float *ts, float *median_ms) {
  stof_ctx *ctx = p->e->ctx;
  if (nset < 1 || nset > STOF_ATTN_TIME_MAX_SETS)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "attention time: %d input sets (1 to %d)", nset, STOF_ATTN_TIME_MAX_SETS);
  if (reps < 1 || reps > STOF_ATTN_TIME_MAX_REPS)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "attention time: reps = %lld (1 to %d)", (long long)reps,
                          STOF_ATTN_TIME_MAX_REPS);
  if (!(warmup_ms >= 0 && warmup_ms <= STOF_ATTN_TIME_MAX_WARMUP_MS))
    return stof_ctx_error(ctx, STOF_ERR_ARG, "attention time: warmup_ms = %g (0 to %d)", warmup_ms,
                          STOF_ATTN_TIME_MAX_WARMUP_MS);
  if (!q || !k || !v || !ts)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "attention time: no %s array", !ts ? "times" : !q ? "q" : !k ? "k" : "v");
  /* the median's sorted copy, made before the runs (no allocation to fail after them) */
  float *sorted = median_ms ? stof_ctx_alloc(ctx, sizeof *sorted * (size_t)reps) : NULL;
  if (median_ms && !sorted) return STOF_ERR_NOMEM;
  stof_cuda_timer *timer = NULL;
  stof_status st = stof_cuda_timer_new(ctx, &timer);
  /* 5 launches timed together, then as many more as fill warmup_ms at their pace */
  float wms = 0;
  if (!st) st = stof_cuda_timer_start(timer);
  for (int w = 0; w < 5 && !st; w++) st = stof_attn_plan_run(p, q[w % nset], k[w % nset], v[w % nset], out);
  if (!st) st = stof_cuda_timer_stop(timer, &wms);
  int64_t nwarm = wms > 0 ? (int64_t)fmin((double)TIME_MAX_WARMUP, warmup_ms / (wms / 5)) : (warmup_ms > 0 ? 100 : 0);
  for (int64_t w = 0; w < nwarm && !st; w++)
    st = stof_attn_plan_run(p, q[w % nset], k[w % nset], v[w % nset], out);
  for (int64_t r = 0; r < reps && !st; r++) {
    int i = (int)(r % nset);
    st = stof_cuda_timer_start(timer);
    if (!st) st = stof_attn_plan_run(p, q[i], k[i], v[i], out);
    if (!st) st = stof_cuda_timer_stop(timer, &ts[r]);
  }
  stof_cuda_timer_free(timer);
  if (!st && median_ms) { /* sorted in a copy: ts stays in run order */
    memcpy(sorted, ts, sizeof *sorted * (size_t)reps);
    qsort(sorted, (size_t)reps, sizeof *sorted, cmp_ms);
    *median_ms = sorted[reps / 2];
  }
  if (sorted) stof_ctx_dealloc(ctx, sorted, sizeof *sorted * (size_t)reps);
  return st;
}
