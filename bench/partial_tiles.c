/*
 * How the partial tiles of a suite mask are filled (bench/NOTES-attention.md): for each
 * partial 64 x 64 tile of the mask's format (CPU builder), which of its four 32 x 32
 * quadrants hold a kept pair. Prints the partial tiles, those with one quadrant, and those
 * whose keys 0-31 or 32-63 are all masked (a kernel with 32-key tiles would skip that half).
 *
 *   build/bench_partial_tiles [MASK [S]]     (default bigbird 32768)
 */
#include <stdio.h>
#include <stdlib.h>

#include <stof/core.h>
#include <stof/kernels.h>

int main(int argc, char **argv) {
  const char *name = argc > 1 ? argv[1] : "bigbird";
  long long S = argc > 2 ? atoll(argv[2]) : 32768;
  stof_ctx *ctx = stof_ctx_new(NULL, NULL);
  stof_mask *m = NULL;
  stof_mask_format *f = NULL;
  if (S <= 0 || stof_mask_suite(ctx, name, S, &m) || stof_mask_format_build(ctx, m, 1, 1, S, S, 64, &f)) {
    fprintf(stderr, "bench_partial_tiles: %s\n", S <= 0 ? "S must be positive" : stof_ctx_message(ctx));
    return 1;
  }
  /* the 8 x 8 inner-tile words of a partial tile: word (key / 8) * 8 + row / 8 */
  long long part = 0, one_quadrant = 0, key_half_empty = 0;
  for (int32_t e = 0; e < f->nentry; e++) {
    if (f->bmp_off[e] < 0) continue;
    part++;
    const uint64_t *w = f->bitmap + f->bmp_off[e];
    int q[2][2] = {{0, 0}, {0, 0}}; /* [row half][key half] */
    for (int kw = 0; kw < 8; kw++)
      for (int rw = 0; rw < 8; rw++)
        if (w[kw * 8 + rw]) q[rw / 4][kw / 4] = 1;
    one_quadrant += q[0][0] + q[0][1] + q[1][0] + q[1][1] == 1;
    key_half_empty += q[0][0] + q[1][0] == 0 || q[0][1] + q[1][1] == 0;
  }
  printf("%s at S %lld, tile 64: %lld partial tiles; %lld (%.1f%%) with one 32 x 32 quadrant, %lld (%.1f%%) with "
         "keys 0-31 or 32-63 all masked\n",
         stof_mask_description(m), S, part, one_quadrant, part ? 100.0 * one_quadrant / part : 0, key_half_empty,
         part ? 100.0 * key_half_empty / part : 0);
  stof_mask_format_free(f);
  stof_mask_free(m);
  stof_ctx_free(ctx);
  return 0;
}
