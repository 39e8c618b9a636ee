/*
 * Tests of dtypes: names, sizes, parsing, and the f16 / bf16 conversions, checked
 * exhaustively over all 65536 bit patterns and on every rounding midpoint against a
 * reference written here in double (tu_round_ieee, tu_f16_value).
 */
#include "testutil.h"

static uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
static float bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static int f16_is_nan(uint16_t h) { return (h & 0x7C00) == 0x7C00 && (h & 0x03FF); }
static int bf16_is_nan(uint16_t b) { return (b & 0x7F80) == 0x7F80 && (b & 0x007F); }

/* ---------------------------------------------------------------- names */

static void dtype_names_sizes_and_floatness_follow_x_macro(void **state) {
  static const struct {
    const char *name;
    size_t size;
    int isfloat;
  } want[] = {
#define X(n, text, size, isfloat) {text, size, isfloat},
      STOF_DTYPE_LIST(X)
#undef X
  };
  assert_int_equal(sizeof want / sizeof *want, STOF_DTYPE_COUNT);
  for (int d = 0; d < STOF_DTYPE_COUNT; d++) {
    assert_string_equal(stof_dtype_name((stof_dtype)d), want[d].name);
    assert_int_equal(stof_dtype_size((stof_dtype)d), want[d].size);
    assert_int_equal(!!stof_dtype_is_float((stof_dtype)d), want[d].isfloat);
  }
  assert_int_equal(stof_dtype_size(STOF_DTYPE_BF16), 2);
  assert_true(stof_dtype_is_float(STOF_DTYPE_F16));
  assert_false(stof_dtype_is_float(STOF_DTYPE_BOOL));
}

static void dtype_parse_accepts_names_and_aliases(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  static const struct {
    const char *s;
    stof_dtype d;
  } cases[] = {
      {"float32", STOF_DTYPE_F32},  {"f32", STOF_DTYPE_F32},     {"float16", STOF_DTYPE_F16},
      {"f16", STOF_DTYPE_F16},      {"half", STOF_DTYPE_F16},    {"bfloat16", STOF_DTYPE_BF16},
      {"bf16", STOF_DTYPE_BF16},    {"float64", STOF_DTYPE_F64}, {"f64", STOF_DTYPE_F64},
      {"int32", STOF_DTYPE_I32},    {"i32", STOF_DTYPE_I32},     {"int64", STOF_DTYPE_I64},
      {"i64", STOF_DTYPE_I64},      {"bool", STOF_DTYPE_BOOL},   {"uint8", STOF_DTYPE_BOOL},
      {"u8", STOF_DTYPE_BOOL},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    stof_dtype d = (stof_dtype)-1;
    TU_OK(ctx, stof_dtype_parse(ctx, cases[i].s, &d));
    if (d != cases[i].d)
      fail_msg("\"%s\" parsed as %d, want %d", cases[i].s, (int)d, (int)cases[i].d);
  }
  /* every canonical name parses back to its dtype */
  for (int d = 0; d < STOF_DTYPE_COUNT; d++) {
    stof_dtype got = (stof_dtype)-1;
    TU_OK(ctx, stof_dtype_parse(ctx, stof_dtype_name((stof_dtype)d), &got));
    assert_int_equal(got, d);
  }
  tu_ctx_free(ctx, &h);
}

static void dtype_parse_unknown_fails_with_type_error_naming_it(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  stof_dtype d = STOF_DTYPE_I64;
  TU_ERR(ctx, stof_dtype_parse(ctx, "float8_e4m3", &d), STOF_ERR_TYPE, "float8_e4m3");
  assert_int_equal(stof_dtype_parse(ctx, "", &d), STOF_ERR_TYPE);
  assert_int_equal(stof_ctx_status(ctx), STOF_ERR_TYPE);
  assert_true(strlen(stof_ctx_message(ctx)) > 0);
  stof_ctx_clear_error(ctx);
  TU_ERR(ctx, stof_dtype_parse(ctx, "float32x", &d), STOF_ERR_TYPE, "float32x");
  TU_ERR(ctx, stof_dtype_parse(ctx, "f3", &d), STOF_ERR_TYPE, "f3");
  tu_ctx_free(ctx, &h);
}

/* ---------------------------------------------------------------- f16 */

static void f16_to_f32_decodes_every_pattern(void **state) {
  for (uint32_t u = 0; u < 65536; u++) {
    uint16_t hb = (uint16_t)u;
    float f = stof_f16_to_f32(hb);
    double want = tu_f16_value(hb);
    if (isnan(want)) {
      if (!isnan(f)) fail_msg("f16 %04x: want NaN, got %g", u, f);
    } else if ((double)f != want || !!signbit(f) != !!signbit(want)) {
      fail_msg("f16 %04x: got %.10g want %.10g", u, f, want);
    }
  }
}

static void f16_round_trip_all_patterns(void **state) {
  for (uint32_t u = 0; u < 65536; u++) {
    uint16_t hb = (uint16_t)u;
    uint16_t back = stof_f32_to_f16(stof_f16_to_f32(hb));
    if (f16_is_nan(hb)) {
      if (!f16_is_nan(back)) fail_msg("f16 NaN %04x came back as %04x", u, back);
    } else if (back != hb) {
      fail_msg("f16 %04x came back as %04x", u, back);
    }
  }
}

/* Between every pair of adjacent finite f16 values a < b: the midpoint goes to the one with
 * an even mantissa, anything just above to b, just below to a. Both signs. */
static void f16_rounds_to_nearest_even_at_every_midpoint(void **state) {
  for (uint32_t u = 0; u < 0x7BFF; u++) {
    for (int sign = 0; sign < 2; sign++) {
      uint16_t a = (uint16_t)(u | (sign << 15)), b = (uint16_t)((u + 1) | (sign << 15));
      double va = tu_f16_value(a), vb = tu_f16_value(b);
      float mid = (float)((va + vb) / 2); /* exact: needs 12 significant bits */
      assert_true((double)mid == (va + vb) / 2);
      uint16_t even = (u & 1) ? b : a;
      uint16_t got = stof_f32_to_f16(mid);
      if (got != even) fail_msg("midpoint %.10g of %04x/%04x -> %04x, want %04x", mid, a, b, got, even);
      float above = nextafterf(mid, sign ? -INFINITY : INFINITY);
      float below = nextafterf(mid, 0.0f);
      if (stof_f32_to_f16(above) != b) fail_msg("just beyond midpoint of %04x/%04x -> %04x", a, b, stof_f32_to_f16(above));
      if (stof_f32_to_f16(below) != a) fail_msg("just inside midpoint of %04x/%04x -> %04x", a, b, stof_f32_to_f16(below));
    }
  }
}

static void f16_overflows_to_inf_past_65504(void **state) {
  assert_int_equal(stof_f32_to_f16(65504.0f), 0x7BFF);
  assert_int_equal(stof_f32_to_f16(65519.0f), 0x7BFF);
  assert_int_equal(stof_f32_to_f16(65519.996f), 0x7BFF);
  assert_int_equal(stof_f32_to_f16(65520.0f), 0x7C00);
  assert_int_equal(stof_f32_to_f16(-65520.0f), 0xFC00);
  assert_int_equal(stof_f32_to_f16(-65519.0f), 0xFBFF);
  assert_int_equal(stof_f32_to_f16(1e6f), 0x7C00);
  assert_int_equal(stof_f32_to_f16(3.0e38f), 0x7C00);
  assert_int_equal(stof_f32_to_f16(INFINITY), 0x7C00);
  assert_int_equal(stof_f32_to_f16(-INFINITY), 0xFC00);
  assert_true(f16_is_nan(stof_f32_to_f16(NAN)));
  assert_true(f16_is_nan(stof_f32_to_f16(bits_f32(0x7F800001u)))); /* low-bit NaN stays NaN */
  assert_true(f16_is_nan(stof_f32_to_f16(bits_f32(0xFFC00000u))));
}

static void f16_handles_subnormals_and_underflow(void **state) {
  assert_int_equal(stof_f32_to_f16(0x1.0p-24f), 0x0001);   /* smallest subnormal */
  assert_int_equal(stof_f32_to_f16(-0x1.0p-24f), 0x8001);
  assert_int_equal(stof_f32_to_f16(0x1.0p-25f), 0x0000);   /* halfway to 0: even is 0 */
  assert_int_equal(stof_f32_to_f16(0x1.000002p-25f), 0x0001);
  assert_int_equal(stof_f32_to_f16(0x1.8p-24f), 0x0002);   /* 1.5 ulp: even is 2 */
  assert_int_equal(stof_f32_to_f16(0x1.4p-23f), 0x0002);   /* 2.5 ulp: even is 2 */
  assert_int_equal(stof_f32_to_f16(0x1.ff8p-15f), 0x03FF); /* largest subnormal */
  assert_int_equal(stof_f32_to_f16(0x1.ffcp-15f), 0x0400); /* its tie with 2^-14: even */
  assert_int_equal(stof_f32_to_f16(0x1.0p-14f), 0x0400);   /* smallest normal */
  assert_int_equal(stof_f32_to_f16(0x1.ff8p-15f * 0.99999f), 0x03FF);
  assert_int_equal(stof_f32_to_f16(1e-10f), 0x0000);
  assert_int_equal(stof_f32_to_f16(-1e-10f), 0x8000);
  assert_int_equal(stof_f32_to_f16(0x1.0p-149f), 0x0000);  /* f32 subnormal */
  assert_int_equal(stof_f32_to_f16(-0.0f), 0x8000);
  assert_true(stof_f16_to_f32(0x0001) == 0x1.0p-24f);
  assert_true(stof_f16_to_f32(0x03FF) == 1023 * 0x1.0p-24f);
  assert_true(signbit(stof_f16_to_f32(0x8000)) && stof_f16_to_f32(0x8000) == 0);
}

/* Random f32 values of all magnitudes agree with the double reference. */
static void f16_from_random_f32_matches_reference(void **state) {
  uint64_t seed = 99;
  for (int i = 0; i < 200000; i++) {
    uint32_t u = (uint32_t)tu_splitmix(&seed);
    /* exponents around the f16 range, both signs */
    u = (u & 0x807FFFFFu) | ((uint32_t)(100 + (u >> 23) % 60) << 23);
    float f = bits_f32(u);
    double want = tu_round_f16((double)f);
    float got = stof_f16_to_f32(stof_f32_to_f16(f));
    if ((double)got != want || !!signbit(got) != !!signbit(want))
      fail_msg("%a -> %a, want %a", f, got, want);
  }
}

/* ---------------------------------------------------------------- bf16 */

static void bf16_decodes_as_top_half_of_f32_and_round_trips(void **state) {
  for (uint32_t u = 0; u < 65536; u++) {
    uint16_t b = (uint16_t)u;
    float f = stof_bf16_to_f32(b);
    if (bf16_is_nan(b)) {
      if (!isnan(f)) fail_msg("bf16 NaN %04x decoded to %g", u, f);
      if (!bf16_is_nan(stof_f32_to_bf16(f))) fail_msg("bf16 NaN %04x did not stay NaN", u);
      continue;
    }
    if (f32_bits(f) != u << 16) fail_msg("bf16 %04x decoded to bits %08x", u, f32_bits(f));
    uint16_t back = stof_f32_to_bf16(f);
    if (back != b) fail_msg("bf16 %04x came back as %04x", u, back);
  }
}

static void bf16_rounds_to_nearest_even_at_every_midpoint(void **state) {
  for (uint32_t u = 0; u < 0x7F7F; u++) {
    for (int sign = 0; sign < 2; sign++) {
      uint16_t a = (uint16_t)(u | (sign << 15)), b = (uint16_t)((u + 1) | (sign << 15));
      uint32_t mid = ((uint32_t)a << 16) | 0x8000u;
      uint16_t even = (u & 1) ? b : a;
      uint16_t got = stof_f32_to_bf16(bits_f32(mid));
      if (got != even) fail_msg("midpoint %08x -> %04x, want %04x", mid, got, even);
      if (stof_f32_to_bf16(bits_f32(mid + 1)) != b) fail_msg("above midpoint %08x", mid);
      if (stof_f32_to_bf16(bits_f32(mid - 1)) != a) fail_msg("below midpoint %08x", mid);
    }
  }
}

static void bf16_rounding_examples_and_overflow(void **state) {
  assert_int_equal(stof_f32_to_bf16(1.0f), 0x3F80);
  assert_int_equal(stof_f32_to_bf16(1.0f + 0x1.0p-8f), 0x3F80);               /* tie, even */
  assert_int_equal(stof_f32_to_bf16(1.0f + 3 * 0x1.0p-8f), 0x3F82);           /* tie, even */
  assert_int_equal(stof_f32_to_bf16(1.0f + 0x1.0p-8f + 0x1.0p-20f), 0x3F81);  /* above tie */
  assert_int_equal(stof_f32_to_bf16(1.0f + 0x1.0p-7f), 0x3F81);
  assert_int_equal(stof_f32_to_bf16(-1.0f - 0x1.0p-8f), 0xBF80);
  assert_int_equal(stof_f32_to_bf16(0x1.fep127f), 0x7F7F);                    /* max */
  assert_int_equal(stof_f32_to_bf16(0x1.ffp127f), 0x7F80);                    /* tie -> inf */
  assert_int_equal(stof_f32_to_bf16(0x1.fefffep127f), 0x7F7F);
  assert_int_equal(stof_f32_to_bf16(-0x1.ffp127f), 0xFF80);
  assert_int_equal(stof_f32_to_bf16(INFINITY), 0x7F80);
  assert_true(bf16_is_nan(stof_f32_to_bf16(NAN)));
  assert_true(bf16_is_nan(stof_f32_to_bf16(bits_f32(0x7F800001u)))); /* not inf */
  assert_true(bf16_is_nan(stof_f32_to_bf16(bits_f32(0x7FFFFFFFu))));  /* no carry into sign */
  assert_true(bf16_is_nan(stof_f32_to_bf16(bits_f32(0xFF800001u))));
  assert_int_equal(stof_f32_to_bf16(0x1.0p-133f), 0x0001);           /* bf16 subnormal */
  assert_int_equal(stof_f32_to_bf16(0x1.0p-134f), 0x0000);           /* tie to 0 */
  assert_true(stof_bf16_to_f32(0x4049) == 3.140625f);
}

static void bf16_from_random_f32_matches_reference(void **state) {
  uint64_t seed = 5;
  for (int i = 0; i < 200000; i++) {
    uint32_t u = (uint32_t)tu_splitmix(&seed);
    float f = bits_f32(u);
    if (isnan(f)) continue;
    double want = tu_round_bf16((double)f);
    float got = stof_bf16_to_f32(stof_f32_to_bf16(f));
    if ((double)got != want || !!signbit(got) != !!signbit(want))
      fail_msg("%a -> %a, want %a", f, got, want);
  }
}

/* ---------------------------------------------------------------- dtype_round */

static void dtype_round_floats_to_nearest_representable(void **state) {
  uint64_t seed = 1234;
  for (int i = 0; i < 100000; i++) {
    double scale = ldexp(1.0, (int)(tu_splitmix(&seed) % 60) - 30);
    double v = tu_uniform(&seed, -1, 1) * scale;
    double w;
    if ((w = stof_dtype_round(STOF_DTYPE_F32, v)) != tu_round_f32(v))
      fail_msg("f32 round %a -> %a want %a", v, w, tu_round_f32(v));
    /* f32-representable inputs here; rounding straight from double is checked below */
    double vf = (double)(float)v;
    if ((w = stof_dtype_round(STOF_DTYPE_F16, vf)) != tu_round_f16(vf))
      fail_msg("f16 round %a -> %a want %a", vf, w, tu_round_f16(vf));
    if ((w = stof_dtype_round(STOF_DTYPE_BF16, vf)) != tu_round_bf16(vf))
      fail_msg("bf16 round %a -> %a want %a", vf, w, tu_round_bf16(vf));
    assert_true(stof_dtype_round(STOF_DTYPE_F64, v) == v);
  }
  assert_true(stof_dtype_round(STOF_DTYPE_F16, 65520.0) == INFINITY);
  assert_true(stof_dtype_round(STOF_DTYPE_F16, 65519.0) == 65504.0);
  assert_true(stof_dtype_round(STOF_DTYPE_F16, 0x1.0p-24) == 0x1.0p-24);
  assert_true(stof_dtype_round(STOF_DTYPE_F32, 0.1) == (double)0.1f);
  assert_true(isnan(stof_dtype_round(STOF_DTYPE_F16, NAN)));
}

/* "Nearest" means from the double: rounding through f32 first would give 1.0 here. */
static void dtype_round_f16_does_not_double_round_through_f32(void **state) {
  double v = 1.0 + 0x1.0p-11 + 0x1.0p-40; /* just above the f16 midpoint of 1 and 1+2^-10 */
  assert_true(stof_dtype_round(STOF_DTYPE_F16, v) == 1.0 + 0x1.0p-10);
  assert_true(stof_dtype_round(STOF_DTYPE_BF16, 1.0 + 0x1.0p-8 + 0x1.0p-40) == 1.0 + 0x1.0p-7);
  uint64_t seed = 4321;
  for (int i = 0; i < 100000; i++) {
    double v = tu_uniform(&seed, -1, 1) * ldexp(1.0, (int)(tu_splitmix(&seed) % 40) - 20);
    double w;
    if ((w = stof_dtype_round(STOF_DTYPE_F16, v)) != tu_round_f16(v))
      fail_msg("f16 round %a -> %a want %a", v, w, tu_round_f16(v));
    if ((w = stof_dtype_round(STOF_DTYPE_BF16, v)) != tu_round_bf16(v))
      fail_msg("bf16 round %a -> %a want %a", v, w, tu_round_bf16(v));
  }
}

static void dtype_round_ints_truncate_like_c_casts(void **state) {
  assert_true(stof_dtype_round(STOF_DTYPE_I32, 3.7) == 3.0);
  assert_true(stof_dtype_round(STOF_DTYPE_I32, -3.7) == -3.0);
  assert_true(stof_dtype_round(STOF_DTYPE_I32, 0.999) == 0.0);
  assert_true(stof_dtype_round(STOF_DTYPE_I64, 1e15 + 0.5) == 1e15);
  assert_true(stof_dtype_round(STOF_DTYPE_I64, -123456789012.9) == -123456789012.0);
  assert_true(stof_dtype_round(STOF_DTYPE_BOOL, 0.0) == 0.0);
  assert_true(stof_dtype_round(STOF_DTYPE_BOOL, 1.0) == 1.0);
  uint64_t seed = 77;
  for (int i = 0; i < 1000; i++) {
    double v = tu_uniform(&seed, -1e6, 1e6);
    assert_true(stof_dtype_round(STOF_DTYPE_I32, v) == (double)(int32_t)v);
  }
}

int run_dtype_tests(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(dtype_names_sizes_and_floatness_follow_x_macro),
      cmocka_unit_test(dtype_parse_accepts_names_and_aliases),
      cmocka_unit_test(dtype_parse_unknown_fails_with_type_error_naming_it),
      cmocka_unit_test(f16_to_f32_decodes_every_pattern),
      cmocka_unit_test(f16_round_trip_all_patterns),
      cmocka_unit_test(f16_rounds_to_nearest_even_at_every_midpoint),
      cmocka_unit_test(f16_overflows_to_inf_past_65504),
      cmocka_unit_test(f16_handles_subnormals_and_underflow),
      cmocka_unit_test(f16_from_random_f32_matches_reference),
      cmocka_unit_test(bf16_decodes_as_top_half_of_f32_and_round_trips),
      cmocka_unit_test(bf16_rounds_to_nearest_even_at_every_midpoint),
      cmocka_unit_test(bf16_rounding_examples_and_overflow),
      cmocka_unit_test(bf16_from_random_f32_matches_reference),
      cmocka_unit_test(dtype_round_floats_to_nearest_representable),
      cmocka_unit_test(dtype_round_f16_does_not_double_round_through_f32),
      cmocka_unit_test(dtype_round_ints_truncate_like_c_casts),
  };
  return cmocka_run_group_tests_name("dtype", tests, NULL, NULL);
}
