/* Pictures of mask formats: the SVG holds the title, the tile map and (small masks) the
 * bits of partial tiles; bad paths and instances give clear errors. */
#include "helpers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The whole file (malloc'd, NUL-terminated). */
static char *slurp(const char *path) {
  FILE *fp = fopen(path, "rb");
  assert_non_null(fp);
  fseek(fp, 0, SEEK_END);
  long n = ftell(fp);
  fseek(fp, 0, SEEK_SET);
  char *s = malloc((size_t)n + 1);
  assert_non_null(s);
  assert_int_equal(fread(s, 1, (size_t)n, fp), (size_t)n);
  s[n] = 0;
  fclose(fp);
  return s;
}

static int count_of(const char *s, const char *what) {
  int n = 0;
  for (const char *p = s; (p = strstr(p, what)); p += strlen(what)) n++;
  return n;
}

static void tmp_path(char *buf, size_t size, const char *name) {
  snprintf(buf, size, "%s/stof_test_%d_%s.svg", P_tmpdir, (int)getpid(), name);
}

static void svg_draws_title_tiles_and_bits(void **state) {
  stof_ctx *ctx = kt_ctx();
  stof_mask *a, *b, *m;
  stof_mask_format *f;
  KT_OK(ctx, stof_mask_causal(ctx, &a));
  KT_OK(ctx, stof_mask_longformer(ctx, 8, 4, &b));
  KT_OK(ctx, stof_mask_union(a, b, &m));
  stof_mask_free(a);
  KT_OK(ctx, stof_mask_dense(ctx, &a));
  stof_mask *u = m;
  KT_OK(ctx, stof_mask_intersection(a, u, &m));
  stof_mask_free(u);
  KT_OK(ctx, stof_mask_format_build(ctx, m, 1, 1, 200, 200, 32, &f));
  char path[256];
  tmp_path(path, sizeof path, "small");
  KT_OK(ctx, stof_mask_format_svg(f, 0, 0, path));
  char *s = slurp(path);
  assert_non_null(strstr(s, "<svg xmlns=\"http://www.w3.org/2000/svg\""));
  assert_non_null(strstr(s, "dense() &amp; (causal() | longformer(8, 4))")); /* escaped title */
  assert_non_null(strstr(s, "Sq=200 Sk=200 T=32"));
  assert_non_null(strstr(s, "density"));
  assert_true(count_of(s, "#08306b") >= 1); /* full tiles */
  assert_true(count_of(s, "#c6dbef") >= (int)f->ntile_partial / 7); /* partial runs */
  assert_true(count_of(s, "#3182bd") >= 200); /* bits: at least one run per row */
  assert_true(count_of(s, "<line") == 2 * 6); /* grid: 6 inner lines each way */
  assert_non_null(strstr(s, "</svg>"));
  free(s);
  remove(path);
  stof_mask_format_free(f);
  stof_mask_free(a);
  stof_mask_free(b);
  stof_mask_free(m);
  kt_ctx_done(ctx);
}

static void svg_of_large_mask_draws_tiles_only(void **state) {
  stof_ctx *ctx = kt_ctx();
  stof_mask *m;
  stof_mask_format *f;
  KT_OK(ctx, stof_mask_suite(ctx, "bigbird", 2048, &m));
  KT_OK(ctx, stof_mask_format_build(ctx, m, 1, 1, 2048, 2048, 64, &f));
  char path[256];
  tmp_path(path, sizeof path, "large");
  KT_OK(ctx, stof_mask_format_svg(f, 0, 0, path));
  char *s = slurp(path);
  assert_non_null(strstr(s, "bigbird(32, 32, 32, 0.1, 0)"));
  assert_null(strstr(s, "#3182bd"));
  assert_non_null(strstr(s, "#c6dbef"));
  free(s);
  remove(path);
  stof_mask_format_free(f);
  stof_mask_free(m);
  kt_ctx_done(ctx);
}

static void svg_reports_unwritable_path_and_bad_instance(void **state) {
  stof_ctx *ctx = kt_ctx();
  stof_mask *m;
  stof_mask_format *f;
  KT_OK(ctx, stof_mask_causal(ctx, &m));
  KT_OK(ctx, stof_mask_format_build(ctx, m, 2, 2, 64, 64, 16, &f));
  kt_expect_error(ctx, stof_mask_format_svg(f, 0, 0, "/nonexistent-dir/x/mask.svg"),
                  STOF_ERR_IO, "mask_format_svg: cannot open /nonexistent-dir/x/mask.svg");
  kt_expect_error(ctx, stof_mask_format_svg(f, 0, 2, "/tmp/never.svg"), STOF_ERR_RANGE,
                  "(b, h) = (0, 2) outside B x H = 2 x 2");
  stof_mask_format_free(f);
  stof_mask_free(m);
  kt_ctx_done(ctx);
}

int run_mask_svg_tests(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(svg_draws_title_tiles_and_bits),
      cmocka_unit_test(svg_of_large_mask_draws_tiles_only),
      cmocka_unit_test(svg_reports_unwritable_path_and_bad_instance),
  };
  return cmocka_run_group_tests_name("mask_svg", tests, NULL, NULL);
}
