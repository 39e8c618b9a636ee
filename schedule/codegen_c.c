/*
 * C code from the loop IR: one function per schedule,
 *
 *   int stof_kernel(void *arg0, void *arg1, ...)
 *
 * whose arguments are the build's tensors (inputs and outputs in the order given), with the
 * loop nests of the lowering (blocks nested where compute_at put them, each in braces).
 * Buffers that are not arguments live inside: "shared" and "local" ones of up to 64 KiB as
 * arrays on the stack, the others malloc'd (the function returns 1 when that fails, else
 * 0); a compacted buffer holds a region and is indexed relative to its start.
 *
 * Types: each TE dtype has a storage type (float, double, uint16_t for f16/bf16, int32_t,
 * int64_t, uint8_t for bool) and a compute type (f16 and bf16 compute in float, bool in
 * int); conversion helpers for f16/bf16 (round to nearest even) and the interpreter's
 * semantics (floor division and modulo, saturating float-to-int casts, NaN-propagating
 * max/min reductions) are emitted into the source. Reductions accumulate in the output
 * buffer, in the output's compute type, except float16 and bfloat16 ones: they combine in
 * a float32 accumulator (lower.c: an element per iteration of the data-parallel loops
 * inside the outermost reduce loop; a scalar when there are none), declared at the top as
 * float stof_facc<block> (on the stack up to 64 KiB, else malloc'd), and each element is
 * rounded into the buffer once, by the final nest.
 *
 * Annotations: vectorize -> #pragma GCC ivdep, unroll -> #pragma GCC unroll N; parallel,
 * thread bindings and pragmas become comments (the loops run serially).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "schedule_int.h"

static const char prelude[] =
    "#include <math.h>\n"
    "#include <stdint.h>\n"
    "#include <stdlib.h>\n"
    "#include <string.h>\n"
    "\n"
    "static inline uint32_t stof_bits(float f) { uint32_t x; memcpy(&x, &f, 4); return x; }\n"
    "static inline float stof_float(uint32_t x) { float f; memcpy(&f, &x, 4); return f; }\n"
    "static inline uint16_t stof_f2h(float f) {\n"
    "  uint32_t x = stof_bits(f), sign = (x >> 16) & 0x8000u, e8 = (x >> 23) & 0xffu, man = x & 0x7fffffu;\n"
    "  if (e8 == 0xff) return (uint16_t)(sign | 0x7c00u | (man ? 0x200u | (man >> 13) : 0));\n"
    "  int e = (int)e8 - 112;\n"
    "  if (e >= 31) return (uint16_t)(sign | 0x7c00u);\n"
    "  if (e <= 0) {\n"
    "    if (e < -10) return (uint16_t)sign;\n"
    "    uint32_t m = man | 0x800000u, sh = (uint32_t)(14 - e), h = m >> sh;\n"
    "    uint32_t rem = m & ((1u << sh) - 1), half = 1u << (sh - 1);\n"
    "    if (rem > half || (rem == half && (h & 1))) h++;\n"
    "    return (uint16_t)(sign | h);\n"
    "  }\n"
    "  uint32_t h = sign | ((uint32_t)e << 10) | (man >> 13), rem = man & 0x1fffu;\n"
    "  if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) h++;\n"
    "  return (uint16_t)h;\n"
    "}\n"
    "static inline float stof_h2f(uint16_t h) {\n"
    "  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, man = h & 0x3ffu;\n"
    "  if (e == 0) {\n"
    "    if (man == 0) return stof_float(sign);\n"
    "    float v = (float)man * (1.0f / 16777216.0f);\n"
    "    return sign ? -v : v;\n"
    "  }\n"
    "  if (e == 31) return stof_float(sign | 0x7f800000u | (man << 13));\n"
    "  return stof_float(sign | ((e + 112) << 23) | (man << 13));\n"
    "}\n"
    "static inline uint16_t stof_f2bf(float f) {\n"
    "  uint32_t x = stof_bits(f);\n"
    "  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);\n"
    "  return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);\n"
    "}\n"
    "static inline float stof_bf2f(uint16_t b) { return stof_float((uint32_t)b << 16); }\n"
    "static inline float stof_round_f16(float f) { return stof_h2f(stof_f2h(f)); }\n"
    "static inline float stof_round_bf16(float f) { return stof_bf2f(stof_f2bf(f)); }\n"
    "static inline int64_t stof_floordiv(int64_t a, int64_t b) {\n"
    "  if (b == 0) return 0;\n"
    "  int64_t q = a / b;\n"
    "  if (a % b != 0 && ((a < 0) != (b < 0))) q--;\n"
    "  return q;\n"
    "}\n"
    "static inline int64_t stof_floormod(int64_t a, int64_t b) {\n"
    "  if (b == 0) return 0;\n"
    "  int64_t r = a % b;\n"
    "  if (r != 0 && ((r < 0) != (b < 0))) r += b;\n"
    "  return r;\n"
    "}\n"
    "static inline double stof_fmod(double a, double b) { double r = fmod(a, b); return r != 0 && (r < 0) != (b < 0) ? r + b : r; }\n"
    "static inline float stof_fmodf(float a, float b) { return (float)stof_fmod(a, b); }\n"
    "static inline int32_t stof_to_i32(double v) {\n"
    "  if (v != v) return 0;\n"
    "  if (v >= 2147483647.0) return INT32_MAX;\n"
    "  if (v <= -2147483648.0) return INT32_MIN;\n"
    "  return (int32_t)v;\n"
    "}\n"
    "static inline int64_t stof_to_i64(double v) {\n"
    "  if (v != v) return 0;\n"
    "  if (v >= 9.2233720368547758e18) return INT64_MAX;\n"
    "  if (v <= -9.2233720368547758e18) return INT64_MIN;\n"
    "  return (int64_t)v;\n"
    "}\n"
    "#define STOF_MINMAX(T, S) \\\n"
    "  static inline T stof_min_##S(T a, T b) { return a < b ? a : b; } \\\n"
    "  static inline T stof_max_##S(T a, T b) { return a > b ? a : b; }\n"
    "STOF_MINMAX(float, f32)\n"
    "STOF_MINMAX(double, f64)\n"
    "STOF_MINMAX(int32_t, i32)\n"
    "STOF_MINMAX(int64_t, i64)\n"
    "static inline int32_t stof_abs_i32(int32_t a) { return a < 0 ? -a : a; }\n"
    "static inline int64_t stof_abs_i64(int64_t a) { return a < 0 ? -a : a; }\n";


/* Internal buffers up to this many bytes, of scope shared or local, are arrays on the
 * stack; the others are malloc'd. */
#define STACK_BYTES 65536

static int on_stack(const lir_buf *lb, int64_t n) {
  return lb->scope != SCHED_SCOPE_GLOBAL && n * (int64_t)stof_dtype_size(lb->op->dtype) <= STACK_BYTES;
}

/* Is an accumulator of nd dimensions and n floats malloc'd? */
static int heap_acc(int nd, int64_t n) { return nd > 0 && n > STACK_BYTES / (int64_t)sizeof(float); }

static int64_t buf_numel(const lir_buf *lb) {
  int64_t n = 1;
  for (int d = 0; d < lb->op->ndim; d++) n *= lb->ext[d];
  return n ? n : 1;
}

static stof_status codegen_c(const stof_sched *s, int nargs, const stof_op *const *args, char **out);

stof_status sched_codegen_c(const stof_sched *s, int nargs, const stof_op *const *args,
                            char **out) {
  *out = NULL;
  stof_sched *fused = NULL; /* groups as one nest each */
  stof_status st = sched_fuse_groups(s, &fused);
  if (st) return st;
  st = codegen_c(fused ? fused : s, nargs, args, out);
  stof_sched_free(fused);
  return st;
}

static stof_status codegen_c(const stof_sched *s, int nargs, const stof_op *const *args, char **out) {
  *out = NULL;
  sched_lir l;
  stof_status st = sched_lower(s, nargs, args, &l);
  if (st) return st;
  sched_access acc;
  if ((st = sched_access_check(s, &acc))) {
    sched_lir_free(&l);
    return st;
  }
  stof_buf b;
  stof_buf_init(&b, s->ctx);
  cgen g = {.s = s, .l = &l, .b = &b, .st = STOF_OK, .cuda = 0, .cur_loop = -1, .acc = &acc};
  stof_buf_puts(&b, "/* generated by stof from a schedule of");
  for (int i = 0; i < s->nout; i++) {
    stof_buf_puts(&b, " ");
    sched_cg_comment(&b, s->out[i]->name);
  }
  stof_buf_puts(&b, " */\n");
  stof_buf_puts(&b, prelude);
  stof_buf_puts(&b, "\nint stof_kernel(");
  for (int i = 0; i < nargs; i++) stof_buf_printf(&b, "%svoid *arg%d", i ? ", " : "", i);
  if (nargs == 0) stof_buf_puts(&b, "void");
  stof_buf_puts(&b, ") {\n  int rc = 1;\n");
  for (int i = 0; i < nargs; i++) {
    stof_buf_printf(&b, "  %s *", sched_cg_stype(0, args[i]->dtype));
    sched_cg_buf_name(&b, args[i]);
    stof_buf_printf(&b, " = (%s *)arg%d;\n", sched_cg_stype(0, args[i]->dtype), i);
  }
  /* internal buffers: the ones no argument holds */
  int nheap = 0;
  for (int k = 0; k < l.bufs.len; k++) {
    const lir_buf *lb = (const lir_buf *)l.bufs.data + k;
    if (lb->writer < 0 || lb->external) continue;
    int64_t n = buf_numel(lb);
    const char *t = sched_cg_stype(0, lb->op->dtype);
    if (on_stack(lb, n)) {
      stof_buf_printf(&b, "  %s ", t);
      sched_cg_buf_name(&b, lb->op);
      stof_buf_printf(&b, "[%lld]; /* %s */\n", (long long)n, sched_scope_name(lb->scope));
      continue;
    }
    stof_buf_printf(&b, "  %s *", t);
    sched_cg_buf_name(&b, lb->op);
    stof_buf_puts(&b, " = NULL;\n");
    nheap++;
  }
  /* float32 accumulators of float16 and bfloat16 reductions, one per block (a block's nest
   * never runs inside itself): on the stack, or malloc'd beyond STACK_BYTES */
  for (int k = 0; k < l.nblk; k++) {
    int64_t n;
    if (sched_block_at(s, k)->state != SCHED_B_LIVE || !sched_cg_acc(&g, k)) continue;
    int nd = sched_cg_acc_dims(&g, k, &n);
    stof_buf_puts(&b, heap_acc(nd, n) ? "  float *" : "  float ");
    sched_cg_acc_name(&b, k);
    if (heap_acc(nd, n)) {
      stof_buf_puts(&b, " = NULL;\n");
      nheap++;
      continue;
    }
    if (nd) stof_buf_printf(&b, "[%lld]", (long long)n);
    stof_buf_puts(&b, "; /* float32 accumulator of ");
    sched_cg_comment(&b, sched_block_at(s, k)->out->name);
    stof_buf_puts(&b, " */\n");
  }
  for (int k = 0; k < l.bufs.len; k++) {
    const lir_buf *lb = (const lir_buf *)l.bufs.data + k;
    int64_t n = buf_numel(lb);
    if (lb->writer < 0 || lb->external || on_stack(lb, n)) continue;
    stof_buf_puts(&b, "  ");
    sched_cg_buf_name(&b, lb->op);
    stof_buf_printf(&b, " = (%s *)malloc(sizeof(%s) * (size_t)%lld);\n  if (!", sched_cg_stype(0, lb->op->dtype),
                    sched_cg_stype(0, lb->op->dtype), (long long)n);
    sched_cg_buf_name(&b, lb->op);
    stof_buf_puts(&b, ") goto done;\n");
  }
  for (int k = 0; k < l.nblk; k++) {
    int64_t n;
    if (sched_block_at(s, k)->state != SCHED_B_LIVE || !sched_cg_acc(&g, k)) continue;
    int nd = sched_cg_acc_dims(&g, k, &n);
    if (!heap_acc(nd, n)) continue;
    stof_buf_puts(&b, "  ");
    sched_cg_acc_name(&b, k);
    stof_buf_printf(&b, " = (float *)malloc(sizeof(float) * (size_t)%lld);\n  if (!", (long long)n);
    sched_cg_acc_name(&b, k);
    stof_buf_puts(&b, ") goto done;\n");
  }
  sched_cg_stmts(&g, l.first, 1);
  stof_buf_puts(&b, "  rc = 0;\n");
  stof_buf_puts(&b, nheap ? "done:\n" : "  goto done;\ndone:\n");
  for (int k = 0; k < l.bufs.len; k++) {
    const lir_buf *lb = (const lir_buf *)l.bufs.data + k;
    if (lb->writer < 0 || lb->external || on_stack(lb, buf_numel(lb))) continue;
    stof_buf_puts(&b, "  free(");
    sched_cg_buf_name(&b, lb->op);
    stof_buf_puts(&b, ");\n");
  }
  for (int k = 0; k < l.nblk; k++) {
    int64_t n;
    if (sched_block_at(s, k)->state != SCHED_B_LIVE || !sched_cg_acc(&g, k)) continue;
    int nd = sched_cg_acc_dims(&g, k, &n);
    if (!heap_acc(nd, n)) continue;
    stof_buf_puts(&b, "  free(");
    sched_cg_acc_name(&b, k);
    stof_buf_puts(&b, ");\n");
  }
  stof_buf_puts(&b, "  return rc;\n}\n");
  sched_lir_free(&l);
  sched_access_free(s->ctx, &acc);
  if (g.st) {
    stof_buf_free(&b);
    return g.st;
  }
  return stof_buf_finish(&b, out);
}
