/*
 * Dtypes: the name/size table (X-macro), parsing, and IEEE half / bfloat16 conversions
 * with round-to-nearest-even (bit manipulation on the float's fields).
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core_int.h"

static const struct {
  const char *name;
  size_t size;
  int isfloat;
} dtype_info[] = {
#define STOF_X(name, text, size, isfloat) {text, size, isfloat},
    STOF_DTYPE_LIST(STOF_X)
#undef STOF_X
};

const char *stof_dtype_name(stof_dtype d) {
  return (unsigned)d < STOF_DTYPE_COUNT ? dtype_info[d].name : "?";
}
size_t stof_dtype_size(stof_dtype d) { return (unsigned)d < STOF_DTYPE_COUNT ? dtype_info[d].size : 0; }
int stof_dtype_is_float(stof_dtype d) { return (unsigned)d < STOF_DTYPE_COUNT && dtype_info[d].isfloat; }

stof_status stof_dtype_parse(stof_ctx *ctx, const char *name, stof_dtype *out) {
  static const struct {
    const char *alias;
    stof_dtype d;
  } aliases[] = {
      {"f32", STOF_DTYPE_F32},  {"float", STOF_DTYPE_F32},   {"f16", STOF_DTYPE_F16},
      {"half", STOF_DTYPE_F16}, {"bf16", STOF_DTYPE_BF16},   {"f64", STOF_DTYPE_F64},
      {"double", STOF_DTYPE_F64}, {"i32", STOF_DTYPE_I32},   {"int", STOF_DTYPE_I32},
      {"i64", STOF_DTYPE_I64},  {"uint8", STOF_DTYPE_BOOL},  {"u8", STOF_DTYPE_BOOL},
  };
  for (int d = 0; d < STOF_DTYPE_COUNT; d++)
    if (strcmp(name, dtype_info[d].name) == 0) return *out = (stof_dtype)d, STOF_OK;
  for (size_t i = 0; i < sizeof aliases / sizeof *aliases; i++)
    if (strcmp(name, aliases[i].alias) == 0) return *out = aliases[i].d, STOF_OK;
  return stof_ctx_error(ctx, STOF_ERR_TYPE,
                        "unknown dtype '%s' (expected float32, float16, bfloat16, float64, "
                        "int32, int64 or bool)",
                        name);
}

static uint32_t f32_bits(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  return x;
}

static float bits_f32(uint32_t x) {
  float f;
  memcpy(&f, &x, 4);
  return f;
}

uint16_t stof_f32_to_f16(float f) {
  uint32_t x = f32_bits(f);
  uint32_t sign = (x >> 16) & 0x8000u, exp = (x >> 23) & 0xffu, man = x & 0x7fffffu;
  if (exp == 0xff) return (uint16_t)(sign | 0x7c00u | (man ? 0x200u | (man >> 13) : 0));
  int e = (int)exp - 127 + 15;
  if (e >= 31) return (uint16_t)(sign | 0x7c00u);
  if (e <= 0) {
    /* subnormal half: value / 2^-24 = (1.man) * 2^(e - 14) */
    if (e < -10) return (uint16_t)sign;
    uint32_t m = man | 0x800000u;
    int shift = 14 - e;
    uint32_t h = m >> shift, rem = m & ((1u << shift) - 1), mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (h & 1))) h++;
    return (uint16_t)(sign | h);
  }
  uint32_t h = sign | ((uint32_t)e << 10) | (man >> 13), rem = man & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) h++; /* a carry may reach inf: right */
  return (uint16_t)h;
}

float stof_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (exp == 0) {
    if (man == 0) return bits_f32(sign);
    int e = -1;
    do {
      e++;
      man <<= 1;
    } while (!(man & 0x400u));
    return bits_f32(sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13));
  }
  if (exp == 31) return bits_f32(sign | 0x7f800000u | (man << 13));
  return bits_f32(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t stof_f32_to_bf16(float f) {
  uint32_t x = f32_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u); /* quiet NaN */
  return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

float stof_bf16_to_f32(uint16_t b) { return bits_f32((uint32_t)b << 16); }

/* v to float rounding to odd: truncate toward zero, then set the last bit if inexact.
 * float has at least 13 more mantissa bits than half and bfloat16, so a second rounding
 * of this value to them gives the correctly rounded result (no double rounding). */
static float to_float_round_odd(double v) {
  float f = (float)v;
  if (!isfinite(v) || (double)f == v) return f;
  if (fabs((double)f) > fabs(v)) f = nextafterf(f, 0.0f);
  if (isinf(f)) return f;
  uint32_t x = f32_bits(f) | 1u;
  return bits_f32(x);
}

double stof_dtype_round(stof_dtype d, double v) {
  switch (d) {
  case STOF_DTYPE_F32: return (double)(float)v;
  case STOF_DTYPE_F16: return stof_f16_to_f32(stof_f32_to_f16(to_float_round_odd(v)));
  case STOF_DTYPE_BF16: return stof_bf16_to_f32(stof_f32_to_bf16(to_float_round_odd(v)));
  case STOF_DTYPE_F64: return v;
  case STOF_DTYPE_I32:
    if (isnan(v)) return 0;
    if (v >= 2147483647.0) return 2147483647.0;
    if (v <= -2147483648.0) return -2147483648.0;
    return trunc(v) + 0.0; /* an integer has no -0: trunc(-0.5) is -0.0 */
  case STOF_DTYPE_I64:
    if (isnan(v)) return 0;
    if (v >= 9.2233720368547758e18) return 9.2233720368547758e18;
    if (v <= -9.2233720368547758e18) return -9.2233720368547758e18;
    return trunc(v) + 0.0;
  case STOF_DTYPE_BOOL: return v != 0;
  default: return v;
  }
}
