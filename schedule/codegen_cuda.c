/*
 * CUDA C code from the loop IR: one `extern "C" __global__` kernel per root block (a block
 * and the blocks computed at its loops), in the lowering's (topological) order; groups do
 * not fuse yet, as on the C backend. Every kernel takes the same parameters: the build's
 * tensors in the order given (placeholders const), then the intermediate buffers that live
 * in global memory (allocated by the run time), so the launcher passes one list to all.
 *
 * Threads: a loop bound to blockIdx.x/y/z or threadIdx.x/y/z is not a loop but the built-in
 * index (with a guard when the kernel launches more than its extent); the launch extent of
 * a tag is the extent of the loop bound to it (1 when none is). Every other loop runs
 * serially in each thread. A kernel is therefore each thread running the C backend's nest
 * with its bound loops fixed, which is right when (checked here, STOF_ERR_SCHEDULE):
 *  - no two loops of one kernel are bound to the same tag, and no reduce loop is bound;
 *  - threadIdx extents multiply to at most 1024 (x, y <= 1024, z <= 64), gridDim.y and z
 *    are at most 65535;
 *  - every store into memory that other threads see (an argument or a global intermediate)
 *    lies under a loop bound to every tag the kernel launches more than once (else several
 *    threads would write, or accumulate into, the same element);
 *  - an intermediate compacted under a loop is private to a thread (a local array): the
 *    loop lies under loops bound to every launched tag. Staging one in shared memory for
 *    the threads of a block is not built yet.
 *
 * Types: f16 and bf16 are stored as __half and __nv_bfloat16 (cuda_fp16.h, cuda_bf16.h)
 * and compute in float; the other rules (floor division, saturating casts, NaN-propagating
 * max/min) are the C backend's, with the same helpers written as device functions.
 * vectorize and unroll become `#pragma unroll`.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "schedule_int.h"

static const char prelude[] =
    "#include <cuda_fp16.h>\n"
    "#include <cuda_bf16.h>\n"
    "\n"
    "typedef long long stof_i64_t;\n"
    "#define int64_t stof_i64_t\n"
    "#define int32_t int\n"
    "#define uint8_t unsigned char\n"
    "#define INT64_C(x) x##LL\n"
    "#undef INT64_MIN\n#undef INT64_MAX\n#undef INT32_MIN\n#undef INT32_MAX\n#undef NAN\n#undef INFINITY\n"
    "#define INT64_MAX 9223372036854775807LL\n"
    "#define INT64_MIN (-INT64_MAX - 1LL)\n"
    "#define INT32_MAX 2147483647\n"
    "#define INT32_MIN (-INT32_MAX - 1)\n"
    "#define NAN __int_as_float(0x7fffffff)\n"
    "#define INFINITY __int_as_float(0x7f800000)\n"
    "#define STOF_D static __device__ __forceinline__\n"
    "\n"
    "STOF_D float stof_h2f(__half h) { return __half2float(h); }\n"
    "STOF_D __half stof_f2h(float f) { return __float2half_rn(f); }\n"
    "STOF_D float stof_bf2f(__nv_bfloat16 b) { return __bfloat162float(b); }\n"
    "STOF_D __nv_bfloat16 stof_f2bf(float f) { return __float2bfloat16_rn(f); }\n"
    "STOF_D float stof_round_f16(float f) { return stof_h2f(stof_f2h(f)); }\n"
    "STOF_D float stof_round_bf16(float f) { return stof_bf2f(stof_f2bf(f)); }\n"
    "STOF_D int64_t stof_floordiv(int64_t a, int64_t b) {\n"
    "  if (b == 0) return 0;\n"
    "  int64_t q = a / b;\n"
    "  if (a % b != 0 && ((a < 0) != (b < 0))) q--;\n"
    "  return q;\n"
    "}\n"
    "STOF_D int64_t stof_floormod(int64_t a, int64_t b) {\n"
    "  if (b == 0) return 0;\n"
    "  int64_t r = a % b;\n"
    "  if (r != 0 && ((r < 0) != (b < 0))) r += b;\n"
    "  return r;\n"
    "}\n"
    "STOF_D float stof_fmodf(float a, float b) { return a - floorf(a / b) * b; }\n"
    "STOF_D double stof_fmod(double a, double b) { return a - floor(a / b) * b; }\n"
    "STOF_D int32_t stof_to_i32(double v) {\n"
    "  if (v != v) return 0;\n"
    "  if (v >= 2147483647.0) return INT32_MAX;\n"
    "  if (v <= -2147483648.0) return INT32_MIN;\n"
    "  return (int32_t)v;\n"
    "}\n"
    "STOF_D int64_t stof_to_i64(double v) {\n"
    "  if (v != v) return 0;\n"
    "  if (v >= 9.2233720368547758e18) return INT64_MAX;\n"
    "  if (v <= -9.2233720368547758e18) return INT64_MIN;\n"
    "  return (int64_t)v;\n"
    "}\n"
    "#define STOF_MINMAX(T, S) \\\n"
    "  STOF_D T stof_min_##S(T a, T b) { return a < b ? a : b; } \\\n"
    "  STOF_D T stof_max_##S(T a, T b) { return a > b ? a : b; }\n"
    "STOF_MINMAX(float, f32)\n"
    "STOF_MINMAX(double, f64)\n"
    "STOF_MINMAX(int32_t, i32)\n"
    "STOF_MINMAX(int64_t, i64)\n"
    "STOF_D int32_t stof_abs_i32(int32_t a) { return a < 0 ? -a : a; }\n"
    "STOF_D int64_t stof_abs_i64(int64_t a) { return a < 0 ? -a : a; }\n";

/* ---------------------------------------------------------------- types */

static const char *ctype(stof_dtype d) {
  switch (d) {
  case STOF_DTYPE_F64: return "double";
  case STOF_DTYPE_I32: return "int32_t";
  case STOF_DTYPE_I64: return "int64_t";
  case STOF_DTYPE_BOOL: return "int";
  default: return "float";
  }
}

static const char *stype(stof_dtype d) {
  switch (d) {
  case STOF_DTYPE_F32: return "float";
  case STOF_DTYPE_F64: return "double";
  case STOF_DTYPE_F16: return "__half";
  case STOF_DTYPE_BF16: return "__nv_bfloat16";
  case STOF_DTYPE_I32: return "int32_t";
  case STOF_DTYPE_I64: return "int64_t";
  default: return "uint8_t";
  }
}

/* min/max helper suffix of a compute type. */
static const char *suffix(stof_dtype d) {
  switch (d) {
  case STOF_DTYPE_F64: return "f64";
  case STOF_DTYPE_I32:
  case STOF_DTYPE_BOOL: return "i32";
  case STOF_DTYPE_I64: return "i64";
  default: return "f32";
  }
}

static int is_f64(stof_dtype d) { return d == STOF_DTYPE_F64; }

/* ---------------------------------------------------------------- names */

typedef struct cgen {
  const stof_sched *s;
  const sched_lir *l;
  stof_buf *b;
  stof_status st;
  int64_t dim[STOF_THREAD_COUNT]; /* the current kernel's launch extent per tag */
} cgen;

static void ident(stof_buf *b, char tag, int id, const char *name) {
  stof_buf_printf(b, "%c%d_", tag, id);
  for (int i = 0; name && name[i] && i < 32; i++) {
    char c = name[i];
    int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    stof_buf_printf(b, "%c", ok ? c : '_');
  }
}

static void buf_name(stof_buf *b, const stof_op *op) { ident(b, 'b', op->id, op->name); }
static void var_name(stof_buf *b, const stof_var *v) { ident(b, 'v', v->id, v->name); }
static void loop_name(cgen *g, int loop) { ident(g->b, 'l', loop, sched_loop_name(g->s, loop)); }

/* A comment's text, without anything that would close it. */
static void comment_text(stof_buf *b, const char *s) {
  for (; *s; s++) stof_buf_printf(b, "%c", (s[0] == '*' && s[1] == '/') || *s == '\n' ? ' ' : *s);
}

/* ---------------------------------------------------------------- expressions */

static void emit(cgen *g, const stof_expr *e);

/* a converted to dtype to, rounding as the interpreter's CAST does. */
static void emit_cast(cgen *g, const stof_expr *a, stof_dtype to) {
  switch (to) {
  case STOF_DTYPE_F32: stof_buf_puts(g->b, "((float)("); break;
  case STOF_DTYPE_F64: stof_buf_puts(g->b, "((double)("); break;
  case STOF_DTYPE_F16: stof_buf_puts(g->b, "(stof_round_f16((float)("); break;
  case STOF_DTYPE_BF16: stof_buf_puts(g->b, "(stof_round_bf16((float)("); break;
  case STOF_DTYPE_I32: stof_buf_puts(g->b, "(stof_to_i32((double)("); break;
  case STOF_DTYPE_I64: stof_buf_puts(g->b, "(stof_to_i64((double)("); break;
  default: stof_buf_puts(g->b, "(("); break;
  }
  emit(g, a);
  if (to == STOF_DTYPE_BOOL)
    stof_buf_puts(g->b, ") != 0)");
  else if (to == STOF_DTYPE_F32 || to == STOF_DTYPE_F64)
    stof_buf_puts(g->b, "))");
  else
    stof_buf_puts(g->b, ")))");
}

/* a in compute type of dt (a plain C conversion when its dtype differs). */
static void emit_as(cgen *g, const stof_expr *a, stof_dtype dt) {
  if (a->dtype == dt || !strcmp(ctype(a->dtype), ctype(dt))) {
    emit(g, a);
    return;
  }
  stof_buf_printf(g->b, "((%s)", ctype(dt));
  emit(g, a);
  stof_buf_puts(g->b, ")");
}

static void emit_iexpr(cgen *g, const sched_block *b, int e);

/* The extents buffer t is allocated with (its region when compacted) and its entry. */
static const lir_buf *buf_layout(cgen *g, const stof_op *t, int64_t *ext) {
  const lir_buf *lb = lir_find_buf(g->l, t);
  for (int d = 0; d < t->ndim; d++) ext[d] = lb ? lb->ext[d] : t->shape[d];
  return lb;
}

/* " - (min)" for dimension d of a compacted buffer. */
static void emit_rel(cgen *g, const lir_buf *lb, int d) {
  if (!lb || lb->min[d] < 0) return;
  stof_buf_puts(g->b, " - ");
  emit_iexpr(g, NULL, lb->min[d]);
}

static void emit_load(cgen *g, const stof_expr *e) {
  const stof_op *t = e->u.load.tensor;
  const char *conv = t->dtype == STOF_DTYPE_F16 ? "stof_h2f" : t->dtype == STOF_DTYPE_BF16 ? "stof_bf2f"
                   : t->dtype == STOF_DTYPE_BOOL ? "(int)" : "";
  int64_t ext[STOF_MAX_DIMS];
  const lir_buf *lb = buf_layout(g, t, ext);
  stof_buf_printf(g->b, "%s(", conv);
  buf_name(g->b, t);
  stof_buf_puts(g->b, "[");
  if (t->ndim == 0) stof_buf_puts(g->b, "0");
  for (int d = 0; d < t->ndim; d++) {
    int64_t stride = 1;
    for (int k = d + 1; k < t->ndim; k++) stride *= ext[k];
    if (d) stof_buf_puts(g->b, " + ");
    stof_buf_puts(g->b, "((int64_t)(");
    emit(g, e->u.load.idx[d]);
    stof_buf_puts(g->b, ")");
    emit_rel(g, lb, d);
    stof_buf_printf(g->b, ") * INT64_C(%lld)", (long long)stride);
  }
  stof_buf_puts(g->b, "])");
}

static void emit_float(cgen *g, double v, stof_dtype d) {
  const char *t = is_f64(d) ? "double" : "float";
  if (isnan(v))
    stof_buf_printf(g->b, "((%s)NAN)", t);
  else if (isinf(v))
    stof_buf_printf(g->b, "((%s)%sINFINITY)", t, v < 0 ? "-" : "");
  else
    stof_buf_printf(g->b, "((%s)%.17g)", t, v);
}

static void emit_binary(cgen *g, const stof_expr *e) {
  const stof_expr *a = e->u.op.a, *b = e->u.op.b;
  stof_dtype dt = e->dtype;
  int isf = stof_dtype_is_float(dt), f64 = is_f64(dt);
  const char *ct = ctype(dt);
  stof_buf *o = g->b;
  switch (e->kind) {
  case STOF_EXPR_ADD:
  case STOF_EXPR_SUB:
  case STOF_EXPR_MUL:
    stof_buf_puts(o, "(");
    emit_as(g, a, dt);
    stof_buf_puts(o, e->kind == STOF_EXPR_ADD ? " + " : e->kind == STOF_EXPR_SUB ? " - " : " * ");
    emit_as(g, b, dt);
    stof_buf_puts(o, ")");
    return;
  case STOF_EXPR_DIV:
  case STOF_EXPR_FLOORDIV:
  case STOF_EXPR_MOD:
    if (isf) {
      if (e->kind == STOF_EXPR_MOD)
        stof_buf_printf(o, "%s(", f64 ? "stof_fmod" : "stof_fmodf");
      else
        stof_buf_printf(o, "%s(", e->kind == STOF_EXPR_FLOORDIV ? (f64 ? "floor" : "floorf") : "");
      emit_as(g, a, dt);
      stof_buf_puts(o, e->kind == STOF_EXPR_MOD ? ", " : " / ");
      emit_as(g, b, dt);
      stof_buf_puts(o, ")");
    } else {
      stof_buf_printf(o, "((%s)%s((int64_t)(", ct, e->kind == STOF_EXPR_MOD ? "stof_floormod" : "stof_floordiv");
      emit(g, a);
      stof_buf_puts(o, "), (int64_t)(");
      emit(g, b);
      stof_buf_puts(o, ")))");
    }
    return;
  case STOF_EXPR_MIN:
  case STOF_EXPR_MAX:
    stof_buf_printf(o, "stof_%s_%s(", e->kind == STOF_EXPR_MIN ? "min" : "max", suffix(dt));
    emit_as(g, a, dt);
    stof_buf_puts(o, ", ");
    emit_as(g, b, dt);
    stof_buf_puts(o, ")");
    return;
  case STOF_EXPR_POW:
    if (isf) {
      stof_buf_printf(o, "%s(", f64 ? "pow" : "powf");
      emit_as(g, a, dt);
      stof_buf_puts(o, ", ");
      emit_as(g, b, dt);
      stof_buf_puts(o, ")");
    } else {
      stof_buf_printf(o, "((%s)pow((double)(", ct);
      emit(g, a);
      stof_buf_puts(o, "), (double)(");
      emit(g, b);
      stof_buf_puts(o, ")))");
    }
    return;
  case STOF_EXPR_AND:
  case STOF_EXPR_OR:
    stof_buf_puts(o, "((");
    emit(g, a);
    stof_buf_puts(o, e->kind == STOF_EXPR_AND ? ") && (" : ") || (");
    emit(g, b);
    stof_buf_puts(o, "))");
    return;
  default: { /* comparisons */
    static const char *const cmp[] = {[STOF_EXPR_LT] = " < ", [STOF_EXPR_LE] = " <= ",
                                      [STOF_EXPR_GT] = " > ", [STOF_EXPR_GE] = " >= ",
                                      [STOF_EXPR_EQ] = " == ", [STOF_EXPR_NE] = " != "};
    int same = !strcmp(ctype(a->dtype), ctype(b->dtype));
    stof_buf_puts(o, same ? "((" : "((double)(");
    emit(g, a);
    stof_buf_printf(o, ")%s%s", cmp[e->kind], same ? "(" : "(double)(");
    emit(g, b);
    stof_buf_puts(o, "))");
    return;
  }
  }
}

static void emit_unary(cgen *g, const stof_expr *e) {
  stof_dtype dt = e->dtype;
  int f64 = is_f64(dt), isf = stof_dtype_is_float(dt);
  const char *sfx = f64 ? "" : "f", *one = f64 ? "1.0" : "1.0f";
  stof_buf *o = g->b;
  const stof_expr *a = e->u.op.a;
  switch (e->kind) {
  case STOF_EXPR_NEG: stof_buf_puts(o, "(-("); emit_as(g, a, dt); stof_buf_puts(o, "))"); return;
  case STOF_EXPR_NOT: stof_buf_puts(o, "(!("); emit(g, a); stof_buf_puts(o, "))"); return;
  case STOF_EXPR_ABS:
    if (isf) stof_buf_printf(o, "fabs%s(", sfx);
    else stof_buf_printf(o, "stof_abs_%s(", suffix(dt));
    emit_as(g, a, dt);
    stof_buf_puts(o, ")");
    return;
  case STOF_EXPR_RSQRT: stof_buf_printf(o, "(%s / sqrt%s(", one, sfx); break;
  case STOF_EXPR_SIGMOID: stof_buf_printf(o, "(%s / (%s + exp%s(-(", one, one, sfx); break;
  default: {
    const char *fn = e->kind == STOF_EXPR_EXP ? "exp" : e->kind == STOF_EXPR_LOG ? "log"
                   : e->kind == STOF_EXPR_SQRT ? "sqrt" : e->kind == STOF_EXPR_TANH ? "tanh"
                   : e->kind == STOF_EXPR_ERF ? "erf" : e->kind == STOF_EXPR_SIN ? "sin"
                   : e->kind == STOF_EXPR_COS ? "cos" : "floor";
    stof_buf_printf(o, "(%s%s(", fn, sfx);
    break;
  }
  }
  emit_as(g, a, dt);
  stof_buf_puts(o, e->kind == STOF_EXPR_SIGMOID ? "))))" : "))");
}

static void emit(cgen *g, const stof_expr *e) {
  switch (e->kind) {
  case STOF_EXPR_INT:
    if (e->dtype == STOF_DTYPE_I64)
      stof_buf_printf(g->b, e->u.ival == INT64_MIN ? "INT64_MIN" : "INT64_C(%lld)", (long long)e->u.ival);
    else if (e->dtype == STOF_DTYPE_BOOL)
      stof_buf_printf(g->b, "%d", e->u.ival != 0);
    else
      stof_buf_printf(g->b, "((int32_t)%lld)", (long long)e->u.ival);
    return;
  case STOF_EXPR_FLOAT: emit_float(g, e->u.fval, e->dtype); return;
  case STOF_EXPR_VAR: var_name(g->b, e->u.var); return;
  case STOF_EXPR_CAST: emit_cast(g, e->u.op.a, e->dtype); return;
  case STOF_EXPR_SELECT:
    stof_buf_puts(g->b, "((");
    emit(g, e->u.op.c);
    stof_buf_puts(g->b, ") ? (");
    emit_as(g, e->u.op.a, e->dtype);
    stof_buf_puts(g->b, ") : (");
    emit_as(g, e->u.op.b, e->dtype);
    stof_buf_puts(g->b, "))");
    return;
  case STOF_EXPR_LOAD: emit_load(g, e); return;
  case STOF_EXPR_REDUCE:
    if (!g->st)
      g->st = stof_ctx_error(g->s->ctx, STOF_ERR_UNSUPPORTED, "codegen: a reduction below the top of a body");
    stof_buf_puts(g->b, "0");
    return;
  default:
    if (stof_expr_kind_is_binary(e->kind))
      emit_binary(g, e);
    else
      emit_unary(g, e);
  }
}

/* ---------------------------------------------------------------- statements */

static void emit_iexpr(cgen *g, const sched_block *b, int e) {
  const lir_expr *x = lir_expr_at(g->l, e);
  switch (x->kind) {
  case LIR_E_CONST: stof_buf_printf(g->b, "INT64_C(%lld)", (long long)x->c); return;
  case LIR_E_LOOP: loop_name(g, x->loop); return;
  case LIR_E_AXIS: var_name(g->b, sched_block_axis(b, x->axis)); return;
  default: {
    static const char *const ops[] = {[LIR_E_ADD] = " + ", [LIR_E_SUB] = " - ", [LIR_E_MUL] = " * ",
                                      [LIR_E_DIV] = " / ", [LIR_E_MOD] = " % ", [LIR_E_LT] = " < ",
                                      [LIR_E_GE] = " >= "};
    stof_buf_puts(g->b, "(");
    emit_iexpr(g, b, x->a);
    stof_buf_puts(g->b, ops[x->kind]);
    emit_iexpr(g, b, x->b);
    stof_buf_puts(g->b, ")");
  }
  }
}

/* Block b's buffer element at its store indices. */
static void emit_elem(cgen *g, int block) {
  const sched_block *b = sched_block_at(g->s, block);
  const stof_op *t = b->out;
  int64_t ext[STOF_MAX_DIMS];
  const lir_buf *lb = buf_layout(g, t, ext);
  buf_name(g->b, t);
  stof_buf_puts(g->b, "[");
  if (t->ndim == 0) stof_buf_puts(g->b, "0");
  for (int d = 0; d < t->ndim; d++) {
    int64_t stride = 1;
    for (int k = d + 1; k < t->ndim; k++) stride *= ext[k];
    if (d) stof_buf_puts(g->b, " + ");
    stof_buf_puts(g->b, "(");
    emit_iexpr(g, b, g->l->blk[block].store[d]);
    emit_rel(g, lb, d);
    stof_buf_printf(g->b, ") * INT64_C(%lld)", (long long)stride);
  }
  stof_buf_puts(g->b, "]");
}

/* "elem = conv(" for a store of block; close with ");". */
static void store_open(cgen *g, int block) {
  stof_dtype d = sched_block_at(g->s, block)->out->dtype;
  emit_elem(g, block);
  switch (d) {
  case STOF_DTYPE_F16: stof_buf_puts(g->b, " = stof_f2h("); break;
  case STOF_DTYPE_BF16: stof_buf_puts(g->b, " = stof_f2bf("); break;
  case STOF_DTYPE_BOOL: stof_buf_puts(g->b, " = (uint8_t)(0 != "); break;
  default: stof_buf_printf(g->b, " = (%s)(", stype(d)); break;
  }
}

static void load_elem(cgen *g, int block) {
  stof_dtype d = sched_block_at(g->s, block)->out->dtype;
  const char *conv = d == STOF_DTYPE_F16 ? "stof_h2f" : d == STOF_DTYPE_BF16 ? "stof_bf2f" : "";
  stof_buf_printf(g->b, "%s(", conv);
  emit_elem(g, block);
  stof_buf_puts(g->b, ")");
}

static void emit_store(cgen *g, int block, const lir_stmt *st, int depth) {
  const sched_block *b = sched_block_at(g->s, block);
  const stof_op *op = b->op;
  const stof_expr *red = sched_block_reduce(b);
  stof_buf *o = g->b;
  stof_dtype dt = op->dtype;
  int isf = stof_dtype_is_float(dt);
  sched_indent(o, depth);
  if (st->store == LIR_STORE_PLAIN) {
    store_open(g, block);
    if (op->body->dtype == dt)
      emit(g, op->body);
    else
      emit_cast(g, op->body, dt);
    stof_buf_puts(o, ");\n");
    return;
  }
  stof_reduce_kind c = red->u.reduce.combiner;
  if (st->store == LIR_STORE_INIT) {
    store_open(g, block);
    if (c == STOF_REDUCE_SUM)
      stof_buf_printf(o, "(%s)0", ctype(dt));
    else if (isf)
      stof_buf_printf(o, "(%s)%sINFINITY", ctype(dt), c == STOF_REDUCE_MAX ? "-" : "");
    else
      stof_buf_printf(o, "%s", dt == STOF_DTYPE_I64 ? (c == STOF_REDUCE_MAX ? "INT64_MIN" : "INT64_MAX")
                                                     : (c == STOF_REDUCE_MAX ? "INT32_MIN" : "INT32_MAX"));
    stof_buf_puts(o, ");\n");
    return;
  }
  if (c == STOF_REDUCE_SUM) {
    store_open(g, block);
    load_elem(g, block);
    stof_buf_puts(o, " + ");
    emit_as(g, red->u.reduce.src, dt);
    stof_buf_puts(o, ");\n");
    return;
  }
  stof_buf_printf(o, "{\n");
  sched_indent(o, depth + 1);
  stof_buf_printf(o, "%s acc_ = ", ctype(dt));
  load_elem(g, block);
  stof_buf_printf(o, ", x_ = ");
  emit_as(g, red->u.reduce.src, dt);
  stof_buf_puts(o, ";\n");
  sched_indent(o, depth + 1);
  store_open(g, block);
  stof_buf_printf(o, "(x_ %s acc_ || x_ != x_) ? x_ : acc_);\n", c == STOF_REDUCE_MAX ? ">" : "<");
  sched_indent(o, depth);
  stof_buf_puts(o, "}\n");
}

static void emit_stmts(cgen *g, int first, int depth) {
  const stof_sched *s = g->s;
  stof_buf *o = g->b;
  for (int i = first; i >= 0; i = lir_stmt_at(g->l, i)->next) {
    const lir_stmt *st = lir_stmt_at(g->l, i);
    const sched_block *b = st->block >= 0 ? sched_block_at(s, st->block) : NULL;
    switch (st->kind) {
    case LIR_FOR: {
      const sched_loop *lp = sched_loop_at(s, st->loop);
      if (lp->ann == STOF_ANN_THREAD) {
        /* the loop is the thread's index: every thread runs the body once */
        int tag = lp->thread;
        sched_indent(o, depth);
        stof_buf_puts(o, "{ /* ");
        stof_buf_puts(o, stof_thread_tag_name(lp->thread));
        stof_buf_puts(o, " */\n");
        sched_indent(o, depth + 1);
        stof_buf_puts(o, "const int64_t ");
        loop_name(g, st->loop);
        stof_buf_printf(o, " = (int64_t)%s;\n", stof_thread_tag_name(lp->thread));
        int guard = g->dim[tag] != lp->extent;
        if (guard) {
          sched_indent(o, depth + 1);
          stof_buf_puts(o, "if (");
          loop_name(g, st->loop);
          stof_buf_printf(o, " < INT64_C(%lld)) {\n", (long long)lp->extent);
        }
        emit_stmts(g, st->first, depth + 1 + guard);
        if (guard) {
          sched_indent(o, depth + 1);
          stof_buf_puts(o, "}\n");
        }
        sched_indent(o, depth);
        stof_buf_puts(o, "}\n");
        break;
      }
      if (lp->ann == STOF_ANN_VECTORIZE || lp->ann == STOF_ANN_UNROLL) {
        sched_indent(o, depth);
        stof_buf_printf(o, "#pragma unroll %lld /* %s */\n", (long long)(lp->extent < 65534 ? lp->extent : 65534),
                        lp->ann == STOF_ANN_VECTORIZE ? "vectorize" : "unroll");
      }
      sched_indent(o, depth);
      stof_buf_puts(o, "for (int64_t ");
      loop_name(g, st->loop);
      stof_buf_puts(o, " = 0; ");
      loop_name(g, st->loop);
      stof_buf_printf(o, " < INT64_C(%lld); ++", (long long)lp->extent);
      loop_name(g, st->loop);
      stof_buf_puts(o, ") {");
      if (lp->ann == STOF_ANN_PARALLEL) stof_buf_puts(o, " /* parallel (serial within a thread) */");
      for (int k = 0; k < s->annots.len; k++) {
        const sched_annot *a = sched_annot_at(s, k);
        if (a->is_block || a->id != st->loop) continue;
        stof_buf_puts(o, " /* pragma ");
        comment_text(o, sched_str(s, a->key));
        stof_buf_puts(o, "=");
        comment_text(o, sched_str(s, a->value));
        stof_buf_puts(o, " */");
      }
      stof_buf_puts(o, "\n");
      emit_stmts(g, st->first, depth + 1);
      sched_indent(o, depth);
      stof_buf_puts(o, "}\n");
      break;
    }
    case LIR_LET:
      sched_indent(o, depth);
      stof_buf_puts(o, "const int64_t ");
      var_name(o, sched_block_axis(b, st->axis));
      stof_buf_puts(o, " = ");
      emit_iexpr(g, b, st->expr);
      stof_buf_puts(o, ";\n");
      break;
    case LIR_IF:
      sched_indent(o, depth);
      stof_buf_puts(o, "if ");
      emit_iexpr(g, b, st->expr);
      stof_buf_puts(o, " {\n");
      emit_stmts(g, st->first, depth + 1);
      sched_indent(o, depth);
      stof_buf_puts(o, "}\n");
      break;
    case LIR_STORE: emit_store(g, st->block, st, depth); break;
    case LIR_BLOCK:
      sched_indent(o, depth);
      stof_buf_puts(o, "{ /* block ");
      comment_text(o, sched_block_name(s, st->block));
      for (int k = 0; k < s->annots.len; k++) {
        const sched_annot *a = sched_annot_at(s, k);
        if (!a->is_block || a->id != st->block) continue;
        stof_buf_puts(o, ", pragma ");
        comment_text(o, sched_str(s, a->key));
        stof_buf_puts(o, "=");
        comment_text(o, sched_str(s, a->value));
      }
      stof_buf_puts(o, " */\n");
      emit_stmts(g, st->first, depth + 1);
      sched_indent(o, depth);
      stof_buf_puts(o, "}\n");
      break;
    default: break;
    }
  }
}

/* ---------------------------------------------------------------- kernels */

static int64_t buf_numel(const lir_buf *lb) {
  int64_t n = 1;
  for (int d = 0; d < lb->op->ndim; d++) n *= lb->ext[d];
  return n ? n : 1;
}

/* The root block whose kernel runs block b. */
static int root_of(const stof_sched *s, int b) {
  while (sched_block_at(s, b)->attach >= 0) b = sched_loop_at(s, sched_block_at(s, b)->attach)->block;
  return b;
}

/* One kernel's facts, gathered by walking its statements. */
typedef struct kscan {
  const stof_sched *s;
  const sched_lir *l;
  int bound[STOF_THREAD_COUNT];    /* loop bound to each tag (-1: none) */
  unsigned *inside;                /* per loop: tags bound around and at it (bit per tag) */
  const char *kname;
  stof_status st;
} kscan;

static void scan_bindings(kscan *k, int first, unsigned mask) {
  const stof_sched *s = k->s;
  for (int i = first; i >= 0 && !k->st; i = lir_stmt_at(k->l, i)->next) {
    const lir_stmt *st = lir_stmt_at(k->l, i);
    unsigned m = mask;
    if (st->kind == LIR_FOR) {
      const sched_loop *lp = sched_loop_at(s, st->loop);
      if (lp->ann == STOF_ANN_THREAD) {
        const char *tag = stof_thread_tag_name(lp->thread);
        if (lp->iter == STOF_ITER_REDUCE) {
          k->st = stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                                 "cuda: reduce loop %s of block %s is bound to %s (rfactor it first)",
                                 sched_loop_name(s, st->loop), sched_block_name(s, lp->block), tag);
          return;
        }
        int prev = k->bound[lp->thread];
        if (prev >= 0 && prev != st->loop) {
          k->st = stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                                 "cuda: loops %s (block %s) and %s (block %s) are both bound to %s in "
                                 "kernel %s (blocks sharing a tag need shared-memory staging, not "
                                 "built yet)",
                                 sched_loop_name(s, prev), sched_block_name(s, sched_loop_at(s, prev)->block),
                                 sched_loop_name(s, st->loop), sched_block_name(s, lp->block), tag, k->kname);
          return;
        }
        k->bound[lp->thread] = st->loop;
        m |= 1u << lp->thread;
      }
      k->inside[st->loop] = m;
    }
    scan_bindings(k, st->first, m);
  }
}

/* The tags launched more than once (bit per tag). */
static unsigned launched(const stof_sched *s, const int *bound) {
  unsigned m = 0;
  for (int t = 0; t < STOF_THREAD_COUNT; t++)
    if (bound[t] >= 0 && sched_loop_at(s, bound[t])->extent > 1) m |= 1u << t;
  return m;
}

static const char *missing_tag(unsigned need, unsigned have) {
  for (int t = 0; t < STOF_THREAD_COUNT; t++)
    if ((need & ~have) & (1u << t)) return stof_thread_tag_name((stof_thread_tag)t);
  return "?";
}

/* Every store into memory other threads see lies under loops bound to all launched tags. */
static void scan_stores(kscan *k, int first, unsigned mask, unsigned need, const unsigned char *local) {
  const stof_sched *s = k->s;
  for (int i = first; i >= 0 && !k->st; i = lir_stmt_at(k->l, i)->next) {
    const lir_stmt *st = lir_stmt_at(k->l, i);
    unsigned m = mask;
    if (st->kind == LIR_FOR && sched_loop_at(s, st->loop)->ann == STOF_ANN_THREAD)
      m |= 1u << sched_loop_at(s, st->loop)->thread;
    if (st->kind == LIR_STORE && (need & ~m)) {
      const stof_op *t = sched_block_at(s, st->block)->out;
      const lir_buf *lb = lir_find_buf(k->l, t);
      int idx = lb ? (int)(lb - (const lir_buf *)k->l->bufs.data) : -1;
      if (idx < 0 || !local[idx]) {
        k->st = stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                               "cuda: block %s stores into %s outside any loop bound to %s, which "
                               "kernel %s launches more than once: several threads would write the "
                               "same elements (bind one of its loops to %s, or compute it at a "
                               "bound loop)",
                               sched_block_name(s, st->block), t->name, missing_tag(need, m), k->kname,
                               missing_tag(need, m));
        return;
      }
    }
    scan_stores(k, st->first, m, need, local);
  }
}

static void kernel_name(char *out, size_t cap, int i, const char *block) {
  int n = snprintf(out, cap, "stof_k%d_", i);
  for (int j = 0; block[j] && n < (int)cap - 1 && j < 32; j++, n++) {
    char c = block[j];
    out[n] = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ? c : '_';
  }
  out[n] = 0;
}

void sched_cuda_info_free(stof_ctx *ctx, sched_cuda_info *info) {
  if (!info) return;
  if (info->kernel) stof_ctx_dealloc(ctx, info->kernel, sizeof *info->kernel * (size_t)(info->nkernel ? info->nkernel : 1));
  if (info->temp_bytes)
    stof_ctx_dealloc(ctx, info->temp_bytes, sizeof *info->temp_bytes * (size_t)(info->ntemp ? info->ntemp : 1));
  memset(info, 0, sizeof *info);
}

static stof_status too_many(const stof_sched *s, const char *kname, const char *what, long long n, long long max) {
  return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE, "cuda: kernel %s launches %s = %lld, at most %lld", kname,
                        what, n, max);
}

/* Checks kernel k (root statement stmt) and works out its launch; local[] gets the
 * thread-private buffers of the kernel. */
static stof_status plan_kernel(const stof_sched *s, const sched_lir *l, int stmt, const char *kname,
                               unsigned *inside, unsigned char *local, sched_cuda_kernel *kk) {
  kscan k = {s, l, {-1, -1, -1, -1, -1, -1}, inside, kname, STOF_OK};
  const lir_stmt *root = lir_stmt_at(l, stmt);
  scan_bindings(&k, root->first, 0);
  if (k.st) return k.st;
  int64_t e[STOF_THREAD_COUNT];
  for (int t = 0; t < STOF_THREAD_COUNT; t++) e[t] = k.bound[t] >= 0 ? sched_loop_at(s, k.bound[t])->extent : 1;
  if (e[STOF_THREAD_THREAD_X] > 1024) return too_many(s, kname, "threadIdx.x", e[STOF_THREAD_THREAD_X], 1024);
  if (e[STOF_THREAD_THREAD_Y] > 1024) return too_many(s, kname, "threadIdx.y", e[STOF_THREAD_THREAD_Y], 1024);
  if (e[STOF_THREAD_THREAD_Z] > 64) return too_many(s, kname, "threadIdx.z", e[STOF_THREAD_THREAD_Z], 64);
  int64_t threads = e[STOF_THREAD_THREAD_X] * e[STOF_THREAD_THREAD_Y] * e[STOF_THREAD_THREAD_Z];
  if (threads > 1024) return too_many(s, kname, "threads per block (threadIdx x * y * z)", threads, 1024);
  if (e[STOF_THREAD_BLOCK_X] > 2147483647) return too_many(s, kname, "blockIdx.x", e[STOF_THREAD_BLOCK_X], 2147483647);
  if (e[STOF_THREAD_BLOCK_Y] > 65535) return too_many(s, kname, "blockIdx.y", e[STOF_THREAD_BLOCK_Y], 65535);
  if (e[STOF_THREAD_BLOCK_Z] > 65535) return too_many(s, kname, "blockIdx.z", e[STOF_THREAD_BLOCK_Z], 65535);
  for (int t = 0; t < 3; t++) {
    kk->grid[t] = (unsigned)e[STOF_THREAD_BLOCK_X + t];
    kk->block[t] = (unsigned)e[STOF_THREAD_THREAD_X + t];
  }
  unsigned need = launched(s, k.bound);
  /* intermediates compacted under a loop of this kernel: private to a thread, or illegal */
  for (int i = 0; i < l->bufs.len; i++) {
    const lir_buf *lb = (const lir_buf *)l->bufs.data + i;
    if (lb->writer < 0 || lb->external || lb->at < 0 || root_of(s, lb->writer) != root->block) continue;
    if (need & ~inside[lb->at])
      return stof_ctx_error(s->ctx, STOF_ERR_SCHEDULE,
                            "cuda: buffer %s is allocated per iteration of loop %s, outside the loop "
                            "bound to %s in kernel %s: threads would share it, and staging it in "
                            "shared memory is not built yet",
                            lb->op->name, sched_loop_name(s, lb->at), missing_tag(need, inside[lb->at]), kname);
    local[i] = 1;
  }
  scan_stores(&k, root->first, 0, need, local);
  return k.st;
}

static void emit_params(cgen *g, int nargs, const stof_op *const *args, const sched_lir *l) {
  stof_buf *b = g->b;
  for (int i = 0; i < nargs; i++) {
    stof_buf_printf(b, "%s%s%s *", i ? ", " : "", args[i]->kind == STOF_OP_PLACEHOLDER ? "const " : "",
                    stype(args[i]->dtype));
    buf_name(b, args[i]);
  }
  for (int i = 0; i < l->bufs.len; i++) {
    const lir_buf *lb = (const lir_buf *)l->bufs.data + i;
    if (lb->writer < 0 || lb->external || lb->at >= 0) continue;
    stof_buf_printf(b, ", %s *", stype(lb->op->dtype));
    buf_name(b, lb->op);
  }
}

stof_status sched_codegen_cuda(const stof_sched *s, int nargs, const stof_op *const *args, char **out,
                               sched_cuda_info *info) {
  stof_ctx *ctx = s->ctx;
  *out = NULL;
  sched_cuda_info inf;
  memset(&inf, 0, sizeof inf);
  sched_lir l;
  stof_status st = sched_lower(s, nargs, args, &l);
  if (st) return st;
  int nk = 0;
  for (int i = l.first; i >= 0; i = lir_stmt_at(&l, i)->next) nk++;
  unsigned *inside = stof_ctx_alloc(ctx, sizeof *inside * (size_t)(s->loops.len ? s->loops.len : 1));
  unsigned char *local = stof_ctx_alloc(ctx, (size_t)(l.bufs.len ? l.bufs.len : 1));
  inf.nkernel = nk;
  inf.kernel = stof_ctx_alloc(ctx, sizeof *inf.kernel * (size_t)(nk ? nk : 1));
  for (int i = 0; i < l.bufs.len; i++) {
    const lir_buf *lb = (const lir_buf *)l.bufs.data + i;
    if (lb->writer >= 0 && !lb->external && lb->at < 0) inf.ntemp++;
  }
  inf.temp_bytes = stof_ctx_alloc(ctx, sizeof *inf.temp_bytes * (size_t)(inf.ntemp ? inf.ntemp : 1));
  if (!inside || !local || !inf.kernel || !inf.temp_bytes) {
    st = STOF_ERR_NOMEM;
    goto done;
  }
  memset(local, 0, (size_t)(l.bufs.len ? l.bufs.len : 1));
  memset(inf.kernel, 0, sizeof *inf.kernel * (size_t)(nk ? nk : 1));
  for (int i = 0, t = 0; i < l.bufs.len; i++) {
    const lir_buf *lb = (const lir_buf *)l.bufs.data + i;
    if (lb->writer >= 0 && !lb->external && lb->at < 0)
      inf.temp_bytes[t++] = (size_t)buf_numel(lb) * stof_dtype_size(lb->op->dtype);
  }
  int k = 0;
  for (int i = l.first; i >= 0 && !st; i = lir_stmt_at(&l, i)->next, k++) {
    kernel_name(inf.kernel[k].name, sizeof inf.kernel[k].name, k, sched_block_name(s, lir_stmt_at(&l, i)->block));
    memset(inside, 0, sizeof *inside * (size_t)(s->loops.len ? s->loops.len : 1));
    st = plan_kernel(s, &l, i, inf.kernel[k].name, inside, local, &inf.kernel[k]);
  }
  if (st) goto done;

  stof_buf b;
  stof_buf_init(&b, ctx);
  cgen g = {s, &l, &b, STOF_OK, {0}};
  stof_buf_puts(&b, "/* generated by stof (CUDA) from a schedule of");
  for (int i = 0; i < s->nout; i++) {
    stof_buf_puts(&b, " ");
    comment_text(&b, s->out[i]->name);
  }
  stof_buf_puts(&b, "\n * kernels, launched in this order (grid; block):\n");
  for (int i = 0; i < nk; i++)
    stof_buf_printf(&b, " *   %s (%u, %u, %u; %u, %u, %u)\n", inf.kernel[i].name, inf.kernel[i].grid[0],
                    inf.kernel[i].grid[1], inf.kernel[i].grid[2], inf.kernel[i].block[0], inf.kernel[i].block[1],
                    inf.kernel[i].block[2]);
  stof_buf_puts(&b, " */\n");
  stof_buf_puts(&b, prelude);
  k = 0;
  for (int i = l.first; i >= 0; i = lir_stmt_at(&l, i)->next, k++) {
    const lir_stmt *root = lir_stmt_at(&l, i);
    sched_cuda_kernel *kk = &inf.kernel[k];
    for (int t = 0; t < 3; t++) {
      g.dim[STOF_THREAD_BLOCK_X + t] = kk->grid[t];
      g.dim[STOF_THREAD_THREAD_X + t] = kk->block[t];
    }
    stof_buf_printf(&b, "\n/* block %s: grid (%u, %u, %u), block (%u, %u, %u) */\n", sched_block_name(s, root->block),
                    kk->grid[0], kk->grid[1], kk->grid[2], kk->block[0], kk->block[1], kk->block[2]);
    stof_buf_printf(&b, "extern \"C\" __global__ void __launch_bounds__(%u) %s(", kk->block[0] * kk->block[1] * kk->block[2],
                    kk->name);
    emit_params(&g, nargs, args, &l);
    stof_buf_puts(&b, ") {\n");
    for (int j = 0; j < l.bufs.len; j++) {
      const lir_buf *lb = (const lir_buf *)l.bufs.data + j;
      if (!local[j] || root_of(s, lb->writer) != root->block) continue;
      stof_buf_printf(&b, "  %s ", stype(lb->op->dtype));
      buf_name(&b, lb->op);
      stof_buf_printf(&b, "[%lld]; /* %s, private to the thread */\n", (long long)buf_numel(lb),
                      sched_scope_name(lb->scope));
    }
    emit_stmts(&g, root->first, 1);
    stof_buf_puts(&b, "}\n");
  }
  if (g.st) {
    stof_buf_free(&b);
    st = g.st;
    goto done;
  }
  st = stof_buf_finish(&b, out);
done:
  if (inside) stof_ctx_dealloc(ctx, inside, sizeof *inside * (size_t)(s->loops.len ? s->loops.len : 1));
  if (local) stof_ctx_dealloc(ctx, local, (size_t)(l.bufs.len ? l.bufs.len : 1));
  sched_lir_free(&l);
  if (st || !info)
    sched_cuda_info_free(ctx, &inf);
  else
    *info = inf;
  return st;
}
