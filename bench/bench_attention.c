/*
 * stof's attention benchmark (DESIGN.md section 9): times stof's sparse attention on the
 * protocol grid with device events (warm-up, median of --reps runs, inputs rotated over
 * three sets so caches do not flatter), after a correctness check with the output poisoned
 * first: sampled rows against a float64 CPU reference, and no NaN left anywhere. One JSON object per case on
 * stdout and in --out (jansson); a table on stderr.
 *
 * The inputs are made on the GPU (stof_tensor_rand_on, the values of stof_tensor_rand), the
 * NaN scan runs there (stof_tensor_count_nan), and the reference regenerates on the host only
 * the slices it reads (stof_tensor_rand_range) and copies back only the checked output rows:
 * a 128k-token shape checks in seconds. Each line also has the format built on the GPU at the
 * plan's tile, kept on the device as plans use it (format_ms, warm median of 3; format_mb; the
 * host build with its copies back: format_host_ms, format_copy_ms), the plan's own copy of the
 * format (plan_format_mb: the query-shifted one where the plan shifts), the device memory in use after the
 * checked run (gpu_used_mb; io_mb of it the 3 input sets and the output, plan_mem_mb the rest)
 * and the check's seconds (check_s).
 *
 *   bench_attention [--shapes 8x1024,16x4096] [--heads 12] [--dim 64] [--dtype float16]
 *                   [--masks dense,causal,...] [--kernels auto,block,row,portable,tma,cpasync,plainmask,
 *                   noorder,nogroup,halfskip,nohalfskip,key64,nokey64,noqshift,lazy,nolazy]
 *                   [--tiles 0,64,128] [--splits auto,off,16] [--stages 0] [--reps 30] [--warmup-ms 0]
 *                   [--check-rows 6]
 *                   [--peer-masks DIR] [--out FILE]
 *
 * --kernels: auto (the selector), block, row (forced), portable (auto without the Hopper
 * kernel), tma / cpasync (block-wise on the Hopper kernel with its K/V loads by the TMA
 * producer / by cp.async: stof_attn_opts.tma = 1 / -1), plainmask (auto, but partial tiles
 * masked from the bitmap with no half skip: stof_attn_opts.rowmask = halfskip = -1, the
 * Hopper kernel before the thirteenth session), noorder (auto, each (b, h)'s tile-rows
 * launched last first even where some are far longer: stof_attn_opts.order = -1), nogroup
 * (auto, but the other tile-rows (b, h) by (b, h), not longest first over groups of pairs:
 * stof_attn_opts.order_group = 1, the rule before session 23), halfskip
 * (auto, with the empty key half of partial tiles skipped: stof_attn_opts.halfskip = 1),
 * nohalfskip (auto, never skipped: stof_attn_opts.halfskip = -1),
 * key64 (D 64 at tile 128 in 64-key steps, forced: stof_attn_opts.key64 = 1, tile 128, so
 * that with several --tiles it runs once per tile value, at 128 each time),
 * nokey64 (auto, but D 64 never at tile 128 in 64-key steps: stof_attn_opts.key64 = -1),
 * noqshift (auto, but the query tiles never moved by 32 rows: stof_attn_opts.qshift = -1),
 * lazy / nolazy (auto, with O rescaled only when a row's max grows past 2^8, forced on / off:
 * stof_attn_opts.lazy = 1 / -1).
 * --splits: heavy tile-rows split over
 * CTAs (Hopper kernel): auto (the rule, the default), off, or N (every tile-row of more than
 * N tiles in chunks of at most N): stof_attn_opts.split = 0 / -1 / N; each case runs once per
 * value, so one process times split against no split. --reps 0: check only, no timing.
 * --warmup-ms: the warm-up before the timed runs, in ms of back-to-back launches (at least 5
 * launches). 0 (the default) is peers.py's own protocol, 5 launches, so that the grid compares
 * stof and its peers at the same GPU state: on an H200, after 5 launches a dense kernel runs at
 * the 1980 MHz boost clock, after a few hundred ms of back-to-back launches the 700 W limit
 * holds it near 1500 MHz (bench/results/s20/README.md). --warmup-ms 3000 measures that
 * sustained state; bench/peers_sustained.py times the dense and causal peers the same way.
 * --check-rows N: rows checked per sampled (b, h) (at least the 6 default ones, all rows
 * when N >= S). --masks also takes "holes": causal, but rows [S/3, S/3 + 150) and the last
 * 5 see no key (fully masked rows, and at small S whole empty tile-rows).
 *
 * --peer-masks DIR: for a mask NAME at sequence length S, if DIR/NAME_S.u8 exists (S*S
 * bytes, written by bench/dump_peer_masks.py from the peers' own generators), stof uses
 * that exact mask (from_tensor), so random masks compare at equal density.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <stof/core.h>
#include <stof/kernels.h>

#define MAXL 64

static int split_list(char *s, char **out, int max) {
  int n = 0;
  for (char *t = strtok(s, ","); t && n < max; t = strtok(NULL, ",")) out[n++] = t;
  return n;
}

/* The "holes" mask: causal, with rows [S/3, S/3 + 150) and the last 5 rows fully masked. */
static int holes_pred(void *ud, int64_t b, int64_t h, int64_t i, int64_t j) {
  int64_t S = *(const int64_t *)ud;
  (void)b, (void)h;
  if ((i >= S / 3 && i < S / 3 + 150) || i >= S - 5) return 0;
  return j <= i;
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static void die(stof_ctx *ctx, const char *what) {
  fprintf(stderr, "bench_attention: %s: %s\n", what, stof_ctx_message(ctx));
  exit(1);
}

/* Reads DIR/name_S.u8 into a bool tensor [S, S]; NULL when absent. */
static stof_tensor *peer_mask(stof_ctx *ctx, const char *dir, const char *name, int64_t S) {
  if (!dir) return NULL;
  char path[4096];
  snprintf(path, sizeof path, "%s/%s_%lld.u8", dir, name, (long long)S);
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  int64_t shape[2] = {S, S};
  stof_tensor *t;
  if (stof_tensor_new(ctx, STOF_DTYPE_BOOL, 2, shape, STOF_DEVICE_CPU, &t)) die(ctx, "peer mask");
  size_t n = fread(t->data, 1, (size_t)(S * S), f);
  fclose(f);
  if (n != (size_t)(S * S)) {
    fprintf(stderr, "bench_attention: %s is short (%zu bytes)\n", path, n);
    exit(1);
  }
  return t;
}

/* The seeds of input set r (q, k, v): the inputs are stof_tensor_rand's tensors, made on
 * the GPU (stof_tensor_rand_on); the reference regenerates the slices it reads. */
static uint64_t seed_of(int r, int which) { return (uint64_t)(100 + 3 * r + which); }

/* Elements [first, first + n) of input `which` of set 0 as doubles (malloc'd). */
static double *input_slice(stof_ctx *ctx, stof_dtype dt, int which, int64_t first, int64_t n) {
  stof_tensor *t;
  if (stof_tensor_rand_range(ctx, dt, seed_of(0, which), first, n, &t)) die(ctx, "reference inputs");
  double *x = malloc(sizeof *x * (size_t)(n ? n : 1));
  if (!x) die(ctx, "reference inputs: out of host memory");
  for (int64_t e = 0; e < n; e++) x[e] = stof_tensor_load(t, e);
  stof_tensor_free(t);
  return x;
}

/* Relative L2 error of rows `rows` of (b, h) = (0, 0) and (B-1, H-1) of the GPU output o
 * against float64 on input set 0: only those heads' K and V, those rows of Q (regenerated on
 * the host) and of O (copied back) cross; so a 128k sequence checks in seconds. */
static double check_rows(stof_ctx *ctx, const stof_mask *mask, stof_dtype dt, int64_t B, int64_t H, int64_t S,
                         int64_t D, const stof_tensor *o, int nrows, const int64_t *rows) {
  double num = 0, den = 0, scale = 1.0 / sqrt((double)D);
  double *s = malloc(sizeof *s * (size_t)S), *acc = malloc(sizeof *acc * (size_t)D);
  size_t es = stof_dtype_size(dt);
  void *orow = malloc(es * (size_t)D);
  stof_tensor *ot;
  if (stof_tensor_wrap(ctx, dt, 1, &D, NULL, orow, STOF_DEVICE_CPU, &ot)) die(ctx, "output row");
  int64_t bh[2][2] = {{0, 0}, {B - 1, H - 1}};
  for (int p = 0; p < 2; p++) {
    int64_t b = bh[p][0], h = bh[p][1], base = (b * H + h) * S * D;
    double *k = input_slice(ctx, dt, 1, base, S * D), *v = input_slice(ctx, dt, 2, base, S * D);
    for (int r = 0; r < nrows; r++) {
      int64_t i = rows[r];
      double *q = input_slice(ctx, dt, 0, base + i * D, D);
      double mx = -INFINITY;
      for (int64_t j = 0; j < S; j++) {
        s[j] = -INFINITY;
        if (stof_mask_eval(mask, b, h, i, j) != 1) continue;
        double d = 0;
        for (int64_t x = 0; x < D; x++) d += q[x] * k[j * D + x];
        s[j] = d * scale;
        if (s[j] > mx) mx = s[j];
      }
      free(q);
      double sum = 0;
      for (int64_t x = 0; x < D; x++) acc[x] = 0;
      for (int64_t j = 0; j < S; j++) {
        if (s[j] == -INFINITY) continue;
        double e = exp(s[j] - mx);
        sum += e;
        for (int64_t x = 0; x < D; x++) acc[x] += e * v[j * D + x];
      }
      if (stof_cuda_dtoh(ctx, orow, (uint64_t)(uintptr_t)o->data + (uint64_t)((base + i * D) * (int64_t)es), es * (size_t)D))
        die(ctx, "output row");
      for (int64_t x = 0; x < D; x++) {
        double ref = sum > 0 ? acc[x] / sum : 0, got = stof_tensor_load(ot, x);
        num += (got - ref) * (got - ref); /* a NaN makes the error NaN: the row fails */
        den += ref * ref;
      }
    }
    free(k), free(v);
  }
  stof_tensor_free(ot);
  free(orow), free(s), free(acc);
  return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* Median over 3 warm builds of the mask's format on the GPU at tile T (after one that
 * compiles and loads the builder), and its device bytes (what the plan uploads); -1 when the
 * GPU builder cannot take the mask. */
static double format_gpu_ms(stof_ctx *ctx, const stof_mask *mask, int64_t B, int64_t H, int64_t S, int T,
                            double *mb, double *copy_ms) {
  double ms[4], cp[4];
  *mb = 0;
  for (int r = 0; r < 4; r++) {
    stof_mask_format *f;
    if (stof_mask_format_build_gpu(ctx, mask, B, H, S, S, T, &f)) {
      stof_ctx_clear_error(ctx);
      return -1;
    }
    ms[r] = f->build_ms;
    cp[r] = f->copy_ms;
    *mb = (double)f->bytes / 1048576.0;
    stof_mask_format_free(f);
  }
  int k = 1; /* the median build, and its copies */
  if ((ms[2] - ms[1]) * (ms[2] - ms[3]) <= 0) k = 2;
  else if ((ms[3] - ms[1]) * (ms[3] - ms[2]) <= 0) k = 3;
  *copy_ms = cp[k];
  return ms[k];
}

int main(int argc, char **argv) {
  char shapes_s[512] = "8x1024,16x4096", masks_s[512] = "dense,causal,sliding,causal_sliding,longformer,bigbird,document",
       kernels_s[128] = "auto", tiles_s[128] = "0", splits_s[128] = "auto";
  int heads = 12, dim = 64, reps = 30, nrows_asked = 6, stages = 0, warmup_ms = 0;
  const char *out_path = NULL, *peer_dir = NULL, *dtype_s = "float16";
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v) {
      fprintf(stderr, "bench_attention: %s needs a value\n", a);
      return 2;
    }
    if (!strcmp(a, "--shapes")) snprintf(shapes_s, sizeof shapes_s, "%s", v);
    else if (!strcmp(a, "--masks")) snprintf(masks_s, sizeof masks_s, "%s", v);
    else if (!strcmp(a, "--kernels")) snprintf(kernels_s, sizeof kernels_s, "%s", v);
    else if (!strcmp(a, "--tiles")) snprintf(tiles_s, sizeof tiles_s, "%s", v);
    else if (!strcmp(a, "--splits")) snprintf(splits_s, sizeof splits_s, "%s", v);
    else if (!strcmp(a, "--heads")) heads = atoi(v);
    else if (!strcmp(a, "--dim")) dim = atoi(v);
    else if (!strcmp(a, "--reps")) {
      char *end = NULL;
      long n = strtol(v, &end, 10);
      if (end == v || *end || n < 0 || n > STOF_ATTN_TIME_MAX_REPS) {
        fprintf(stderr, "bench_attention: --reps: an integer from 0 (check only) to %d, got '%s'\n",
                STOF_ATTN_TIME_MAX_REPS, v);
        return 2;
      }
      reps = (int)n;
    }
    else if (!strcmp(a, "--warmup-ms")) {
      char *end = NULL;
      long ms = strtol(v, &end, 10);
      if (end == v || *end || ms < 0 || ms > STOF_ATTN_TIME_MAX_WARMUP_MS) {
        fprintf(stderr, "bench_attention: --warmup-ms: an integer from 0 to %d, got '%s'\n",
                STOF_ATTN_TIME_MAX_WARMUP_MS, v);
        return 2;
      }
      warmup_ms = (int)ms;
    }
    else if (!strcmp(a, "--stages")) stages = atoi(v); /* block-wise pipeline depth, 0: the selector's */
    else if (!strcmp(a, "--check-rows")) nrows_asked = atoi(v);
    else if (!strcmp(a, "--dtype")) dtype_s = v;
    else if (!strcmp(a, "--out")) out_path = v;
    else if (!strcmp(a, "--peer-masks")) peer_dir = v;
    else {
      fprintf(stderr, "bench_attention: unknown option %s\n", a);
      return 2;
    }
    i++;
  }
  if (reps != 0 && reps < 3) reps = 3; /* 0: check only */
  stof_ctx *ctx = stof_ctx_new(NULL, NULL);
  stof_dtype dtype;
  if (stof_dtype_parse(ctx, dtype_s, &dtype)) die(ctx, "--dtype");
  stof_attn_engine *eng;
  if (stof_attn_engine_new(ctx, &eng)) die(ctx, "engine");
  stof_cuda_props props;
  stof_cuda_props_get(ctx, &props);
  /* ceilings measured on these GPUs (GPU.md, KINDS.md): fp16 dense GEMM and copy */
  double peak_tflops = strstr(props.name, "H200") ? 768 : 798, peak_tbs = strstr(props.name, "H200") ? 4.2 : 3.0;
  FILE *out = out_path ? fopen(out_path, "a") : NULL;
  char *shapes[MAXL], *masks[MAXL], *kernels[8], *tiles[8], *splits[8];
  int nshape = split_list(shapes_s, shapes, MAXL), nmask = split_list(masks_s, masks, MAXL),
      nkern = split_list(kernels_s, kernels, 8), ntile = split_list(tiles_s, tiles, 8),
      nsplit = split_list(splits_s, splits, 8);
  for (int i = 0; i < nsplit; i++)
    if (strcmp(splits[i], "auto") && strcmp(splits[i], "off") && atoi(splits[i]) <= 0) {
      fprintf(stderr, "bench_attention: --splits %s: auto, off or a positive number of tiles\n", splits[i]);
      return 2;
    }
  fprintf(stderr, "%-15s %5s %3s %4s %6s %5s %4s %9s %8s %7s %7s %9s\n", "mask", "B", "H", "S", "kernel",
          "tile", "D", "ms", "TFLOP/s", "roof%", "density", "rel_err");
  float *ts = malloc(sizeof *ts * (size_t)(reps ? reps : 1));
  for (int si = 0; si < nshape; si++) {
    long long Bl, Sl;
    if (sscanf(shapes[si], "%lldx%lld", &Bl, &Sl) != 2) {
      fprintf(stderr, "bench_attention: bad shape %s (BxS)\n", shapes[si]);
      return 2;
    }
    int64_t B = Bl, S = Sl, H = heads, D = dim, shape[4] = {B, H, S, D};
    stof_tensor *dq[3], *dk[3], *dv[3], *dout;
    size_t total = 0;
    double t_in = now_ms();
    for (int r = 0; r < 3; r++) /* made on the GPU: seconds for gigabytes, not minutes */
      if (stof_tensor_rand_on(ctx, dtype, 4, shape, seed_of(r, 0), STOF_DEVICE_CUDA, &dq[r]) ||
          stof_tensor_rand_on(ctx, dtype, 4, shape, seed_of(r, 1), STOF_DEVICE_CUDA, &dk[r]) ||
          stof_tensor_rand_on(ctx, dtype, 4, shape, seed_of(r, 2), STOF_DEVICE_CUDA, &dv[r]))
        die(ctx, "inputs");
    if (stof_tensor_new(ctx, dtype, 4, shape, STOF_DEVICE_CUDA, &dout)) die(ctx, "output");
    fprintf(stderr, "inputs %lldx%lldx%lldx%lld (3 sets of q, k, v) made on the GPU in %.0f ms\n", (long long)B,
            (long long)H, (long long)S, (long long)D, now_ms() - t_in);
    for (int mi = 0; mi < nmask; mi++) {
      stof_mask *mask = NULL;
      stof_tensor *pm = peer_mask(ctx, peer_dir, masks[mi], S);
      int from_peer = pm != NULL;
      if (!pm && !strcmp(masks[mi], "holes")) {
        if (stof_mask_fn(ctx, holes_pred, &S, "holes", 0, 0, &mask)) die(ctx, masks[mi]);
      } else if (pm ? stof_mask_from_tensor(ctx, pm, &mask) : stof_mask_suite(ctx, masks[mi], S, &mask))
        die(ctx, masks[mi]);
      stof_tensor_free(pm);
      for (int ki = 0; ki < nkern; ki++)
        for (int ti = 0; ti < ntile * nsplit; ti++) {
          const char *split = splits[ti % nsplit];
          stof_attn_opts o = {0};
          o.split = !strcmp(split, "auto") ? 0 : !strcmp(split, "off") ? -1 : atoi(split);
          int tma = !strcmp(kernels[ki], "tma"), cpasync = !strcmp(kernels[ki], "cpasync");
          o.kernel = !strcmp(kernels[ki], "block") || tma || cpasync ? STOF_ATTN_BLOCK
                     : !strcmp(kernels[ki], "row")                   ? STOF_ATTN_ROW
                                                                     : STOF_ATTN_AUTO;
          o.portable = !strcmp(kernels[ki], "portable"); /* auto, without the Hopper kernel */
          o.tma = tma ? 1 : cpasync ? -1 : 0;
          if (!strcmp(kernels[ki], "plainmask")) o.rowmask = o.halfskip = -1;
          if (!strcmp(kernels[ki], "noorder")) o.order = -1;
          if (!strcmp(kernels[ki], "nogroup")) o.order_group = 1;
          if (!strcmp(kernels[ki], "halfskip")) o.halfskip = 1;
          if (!strcmp(kernels[ki], "nohalfskip")) o.halfskip = -1;
          if (!strcmp(kernels[ki], "nokey64")) o.key64 = -1;
          if (!strcmp(kernels[ki], "noqshift")) o.qshift = -1;
          if (!strcmp(kernels[ki], "nolazy")) o.lazy = -1;
          if (!strcmp(kernels[ki], "lazy")) o.lazy = 1;
          o.tile = atoi(tiles[ti / nsplit]);
          if (!strcmp(kernels[ki], "key64")) o.key64 = 1, o.tile = 128;
          o.stages = stages;
          stof_attn_plan *plan;
          size_t free_pre; /* per case: memory the engine frees between cases does not count */
          if (stof_cuda_mem_get_info(ctx, &free_pre, &total)) die(ctx, "memory");
          if (stof_attn_plan_new(eng, mask, B, H, H, S, S, D, dtype, &o, &plan)) {
            fprintf(stderr, "%-15s skipped: %s\n", masks[mi], stof_ctx_message(ctx));
            stof_ctx_clear_error(ctx);
            continue;
          }
          const stof_attn_choice *c = stof_attn_plan_choice(plan);
          if (cpasync && !c->hopper) { /* cpasync means the Hopper kernel */
            fprintf(stderr, "%-15s skipped: cpasync: the Hopper kernel is not chosen (%s)\n", masks[mi], c->why);
            stof_attn_plan_free(plan);
            continue;
          }
          /* correctness first: poison, run, check sampled rows */
          /* 0x7fff: NaN in float16 and in bfloat16 */
          double t_check = now_ms();
          if (stof_cuda_memset16(ctx, (uint64_t)(uintptr_t)dout->data, 0x7fff, (size_t)(B * H * S * D)) ||
              stof_attn_plan_run(plan, dq[0], dk[0], dv[0], dout) || stof_cuda_synchronize(ctx))
            die(ctx, "run");
          size_t free1;
          if (stof_cuda_mem_get_info(ctx, &free1, &total)) die(ctx, "memory");
          int nrows = nrows_asked < 6 ? 6 : nrows_asked >= S ? (int)S : nrows_asked;
          int64_t *rows = malloc(sizeof *rows * (size_t)nrows);
          if (nrows == S) {
            for (int r = 0; r < nrows; r++) rows[r] = r;
          } else {
            int64_t fixed[6] = {0, 1, S / 3, S / 2 + 7, S - 2, S - 1};
            for (int r = 0; r < nrows; r++) rows[r] = r < 6 ? fixed[r] : (int64_t)fmin((double)(S - 1), (double)((r - 6) * S / (nrows - 6) + 3));
          }
          double err = check_rows(ctx, mask, dtype, B, H, S, D, dout, nrows, rows);
          free(rows);
          /* every element written: the poison (NaN) must be gone everywhere (counted on the GPU) */
          int64_t nnan = 0;
          if (stof_tensor_count_nan(dout, &nnan)) die(ctx, "NaN scan");
          int nan_seen = nnan > 0 || isnan(err);
          t_check = now_ms() - t_check;
          double fmt_mb = 0, fmt_copy = 0, fmt_host_ms = format_gpu_ms(ctx, mask, B, H, S, c->tile, &fmt_mb, &fmt_copy);
          /* the format as the engine builds it at long lengths: kept on the device */
          double fmt_ms = -1;
          size_t fmt_bytes = 0;
          if (fmt_host_ms >= 0 && stof_mask_format_time_gpu(ctx, mask, B, H, S, S, c->tile, 3, &fmt_ms, &fmt_bytes)) {
            stof_ctx_clear_error(ctx);
            fmt_ms = -1;
          }
          double ms = 0;
          if (reps == 0) goto report;
          /* 5 warm-up launches, then --warmup-ms of them (see the usage comment), then reps */
          float median = 0;
          if (stof_attn_plan_time(plan, dq, dk, dv, 3, dout, reps, warmup_ms, ts, &median)) die(ctx, "timing");
          ms = median;
        report:;
          int64_t nvalid = stof_attn_plan_nvalid(plan);
          double flops = 4.0 * (double)D * (double)nvalid, bytes = 4.0 * (double)(B * H * S * D) * 2.0;
          double tflops = ms > 0 ? flops / (ms * 1e-3) / 1e12 : 0;
          double floor_ms = fmax(flops / (peak_tflops * 1e12), bytes / (peak_tbs * 1e12)) * 1e3;
          double density = (double)nvalid / ((double)B * H * S * S);
          fprintf(stderr, "%-15s %5lld %3lld %4lld %6s %5d %4lld %9.4f %8.1f %6.1f%% %7.4f %9.2e%s\n", masks[mi],
                  (long long)B, (long long)H, (long long)S,
                  c->halfskip ? "wg-hs" : c->rowmask ? "wg-rm" : c->key64 ? "wg-k64" : c->tma ? "tma" : c->hopper ? "wgmma" : stof_attn_kernel_name(c->kernel),
                  c->tile, (long long)D, ms,
                  tflops, ms > 0 ? 100 * floor_ms / ms : 0, density, err, nan_seen ? " NaN!" : "");
          if (c->split_rows)
            fprintf(stderr, "%-15s   split (%s): %lld tile-rows of >= %lld tiles in %lld chunks of <= %lld\n", "",
                    split, (long long)c->split_rows, (long long)c->split_min_tiles, (long long)c->split_chunks,
                    (long long)c->split_chunk_tiles);
          json_t *j = json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:s, s:s, s:s, s:i, s:i, s:i, s:b, s:b, s:b, s:b, s:b, s:b, s:i, s:f, s:f, s:f, s:f, s:f, s:f, s:b, s:s, s:s, s:b}",
                                "tool", "stof", "mask", masks[mi], "B", (json_int_t)B, "H", (json_int_t)H, "S", (json_int_t)S,
                                "D", (json_int_t)D, "dtype", stof_dtype_name(dtype), "asked", kernels[ki], "kernel",
                                stof_attn_kernel_name(c->kernel), "tile", c->tile, "warps", c->warps, "stages", c->stages,
                                "hopper", c->hopper, "tma", c->tma, "rowmask", c->rowmask, "halfskip", c->halfskip, "nopartial", c->nopartial, "key64", c->key64, "heavy_rows", c->heavy_rows, "ms", ms, "tflops", tflops, "roofline", ms > 0 ? floor_ms / ms : 0, "density", density, "rel_err", err,
                                "prepare_ms", stof_attn_plan_prepare_ms(plan), "nan", nan_seen, "why", c->why, "gpu",
                                props.name, "peer_mask", from_peer);
          /* long context: the format built on the GPU and kept there, as plans use it
           * (format_ms, warm, median of 3; -1: not on the GPU), the same copied back to the host
           * (format_host_ms, of which format_copy_ms copying) and its bytes; device memory in use after the checked run (gpu_used_mb), of
           * which the 3 input sets and the output are io_mb, and what the plan took from making it
           * to the end of its checked run (format arrays, modules; 2 MiB pages) plan_mem_mb; the
           * check's s */
          json_object_set_new(j, "split", json_string(split));
          json_object_set_new(j, "split_rows", json_integer(c->split_rows));
          json_object_set_new(j, "split_chunks", json_integer(c->split_chunks));
          json_object_set_new(j, "qshift", json_integer(c->qshift));
          json_object_set_new(j, "lazy", json_integer(c->lazy));
          json_object_set_new(j, "order_group", json_integer(c->order_group > 1 ? c->order_group : 1));
          json_object_set_new(j, "format_ms", json_real(fmt_ms));
          json_object_set_new(j, "format_mb", json_real(fmt_mb));
          json_object_set_new(j, "plan_format_mb", json_real((double)stof_attn_plan_format_bytes(plan) / 1048576.0));
          json_object_set_new(j, "format_copy_ms", json_real(fmt_copy));
          json_object_set_new(j, "format_host_ms", json_real(fmt_host_ms));
          json_object_set_new(j, "gpu_used_mb", json_real((double)(total - free1) / 1048576.0));
          double io_mb = 10.0 * (double)(B * H * S * D) * (double)stof_dtype_size(dtype) / 1048576.0;
          json_object_set_new(j, "io_mb", json_real(io_mb));
          json_object_set_new(j, "plan_mem_mb", json_real(((double)free_pre - (double)free1) / 1048576.0));
          json_object_set_new(j, "check_s", json_real(t_check / 1e3));
          json_object_set_new(j, "warmup_ms", json_integer(warmup_ms));
          char *line = json_dumps(j, JSON_COMPACT);
          printf("%s\n", line);
          if (out) fprintf(out, "%s\n", line);
          free(line);
          json_decref(j);
          stof_attn_plan_free(plan);
        }
      stof_mask_free(mask);
    }
    for (int r = 0; r < 3; r++) stof_tensor_free(dq[r]), stof_tensor_free(dk[r]), stof_tensor_free(dv[r]);
    stof_tensor_free(dout);
  }
  free(ts);
  if (out) fclose(out);
  stof_attn_engine_free(eng);
  stof_ctx_free(ctx);
  return 0;
}
