/*
 * Expressions and statements of the lowered loop IR as C, shared by the two backends:
 * codegen_c.c (a C function for the CPU) and codegen_cuda.c (CUDA kernels). They differ
 * only where g->cuda says: storage types of f16/bf16, loops bound to thread indices, and
 * loop pragmas. Each backend's prelude defines the helpers the emitted code calls.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "schedule_int.h"

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

const char *sched_cg_stype(int cuda, stof_dtype d) {
  switch (d) {
  case STOF_DTYPE_F32: return "float";
  case STOF_DTYPE_F64: return "double";
  case STOF_DTYPE_F16: return cuda ? "__half" : "uint16_t";
  case STOF_DTYPE_BF16: return cuda ? "__nv_bfloat16" : "uint16_t";
  case STOF_DTYPE_I32: return "int32_t";
  case STOF_DTYPE_I64: return "int64_t";
  default: return "uint8_t";
  }
}

/* min/max helper suffix of a compute type. */
const char *sched_cg_suffix(stof_dtype d) {
  switch (d) {
  case STOF_DTYPE_F64: return "f64";
  case STOF_DTYPE_I32:
  case STOF_DTYPE_BOOL: return "i32";
  case STOF_DTYPE_I64: return "i64";
  default: return "f32";
  }
}

static int is_f64(stof_dtype d) { return d == STOF_DTYPE_F64; }

/* In a load's index, int32 arithmetic is done in int64_t: an index (or a part of one) may
 * exceed 2^31 where the interpreter, computing exactly, does not wrap. */
static const char *gctype(const cgen *g, stof_dtype d) {
  return g->idx64 && d == STOF_DTYPE_I32 ? "int64_t" : ctype(d);
}
static const char *gsuffix(const cgen *g, stof_dtype d) {
  return g->idx64 && d == STOF_DTYPE_I32 ? "i64" : sched_cg_suffix(d);
}

/* ---------------------------------------------------------------- names */


static void ident(stof_buf *b, char tag, int id, const char *name) {
  stof_buf_printf(b, "%c%d_", tag, id);
  for (int i = 0; name && name[i] && i < 32; i++) {
    char c = name[i];
    int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    stof_buf_printf(b, "%c", ok ? c : '_');
  }
}

void sched_cg_buf_name(stof_buf *b, const stof_op *op) { ident(b, 'b', op->id, op->name); }
static void var_name(stof_buf *b, const stof_var *v) { ident(b, 'v', v->id, v->name); }
static void loop_name(cgen *g, int loop) { ident(g->b, 'l', loop, sched_loop_name(g->s, loop)); }

/* A comment's text, without anything that would close it. */
void sched_cg_comment(stof_buf *b, const char *s) {
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
  if (a->dtype == dt || !strcmp(gctype(g, a->dtype), gctype(g, dt))) {
    emit(g, a);
    return;
  }
  stof_buf_printf(g->b, "((%s)", gctype(g, dt));
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

/* CUDA: the place of a lowered buffer (PLACE_GLOBAL when unknown). */
static int place_of(const cgen *g, const lir_buf *lb) {
  return g->cuda && g->place && lb ? g->place[lb - (const lir_buf *)g->l->bufs.data] : PLACE_GLOBAL;
}

static void emit_load(cgen *g, const stof_expr *e) {
  const stof_op *t = e->u.load.tensor;
  const char *conv = t->dtype == STOF_DTYPE_F16 ? "stof_h2f" : t->dtype == STOF_DTYPE_BF16 ? "stof_bf2f"
                   : t->dtype == STOF_DTYPE_BOOL ? "(int)" : "";
  int64_t ext[STOF_MAX_DIMS];
  const lir_buf *lb = buf_layout(g, t, ext);
  if (place_of(g, lb) == PLACE_WARP) { /* a lane's own element: the fragment loop names it */
    sched_cg_buf_name(g->b, t);
    stof_buf_puts(g->b, "[stof_frag]");
    return;
  }
  for (int k = 0; k < g->nvload; k++)
    if (g->vload[k] == e) { /* its element of the vector loaded before the loop */
      stof_buf_printf(g->b, "%s(((const %s *)&stof_vl%d)[", conv, sched_cg_stype(g->cuda, t->dtype), k);
      loop_name(g, g->vloop);
      stof_buf_puts(g->b, "])");
      return;
    }
  stof_buf_printf(g->b, "%s(", conv);
  sched_cg_load_elem(g, e);
  stof_buf_puts(g->b, ")");
}

/* CUDA: the shared-memory layout of a lowered buffer (SCHED_LAYOUT_*). */
static int layout_of(const cgen *g, const lir_buf *lb) {
  return g->cuda && g->layout && lb ? g->layout[lb - (const lir_buf *)g->l->bufs.data] : SCHED_LAYOUT_ROWS;
}

/* "stof_swz_k(" or "stof_swz_mn(" opening a swizzled element index (wgmma operands). */
static void swz_open(cgen *g, const lir_buf *lb) {
  stof_buf_puts(g->b, layout_of(g, lb) == SCHED_LAYOUT_SW128_K ? "[stof_swz_k(" : "[stof_swz_mn(");
}
static void swz_close(cgen *g, const lir_buf *lb) {
  if (layout_of(g, lb) == SCHED_LAYOUT_SW128_MN) stof_buf_printf(g->b, ", %lld", (long long)lb->ext[0]);
  stof_buf_puts(g->b, ")]");
}

/* Index d of load e relative to its buffer: "(int64_t)(idx) - min", clamped into [0, ext)
 * when access.c could not prove it in range. */
static void emit_index(cgen *g, const stof_expr *e, const lir_buf *lb, int d, int64_t ext) {
  int clamp = (sched_access_clamp(g->acc, e) >> d) & 1;
  int outer = g->idx64;
  if (clamp) stof_buf_puts(g->b, "stof_min_i64(stof_max_i64(");
  stof_buf_puts(g->b, "(int64_t)(");
  g->idx64 = 1;
  emit(g, e->u.load.idx[d]);
  g->idx64 = outer;
  stof_buf_puts(g->b, ")");
  emit_rel(g, lb, d);
  if (clamp) stof_buf_printf(g->b, ", INT64_C(0)), INT64_C(%lld))", (long long)(ext > 0 ? ext - 1 : 0));
}

void sched_cg_load_elem(cgen *g, const stof_expr *e) {
  const stof_op *t = e->u.load.tensor;
  int64_t ext[STOF_MAX_DIMS];
  const lir_buf *lb = buf_layout(g, t, ext);
  sched_cg_buf_name(g->b, t);
  if (layout_of(g, lb) != SCHED_LAYOUT_ROWS) {
    swz_open(g, lb);
    for (int d = 0; d < 2; d++) {
      stof_buf_puts(g->b, d ? ", (int)(" : "(int)(");
      emit_index(g, e, lb, d, ext[d]);
      stof_buf_puts(g->b, ")");
    }
    swz_close(g, lb);
    return;
  }
  stof_buf_puts(g->b, "[");
  if (t->ndim == 0) stof_buf_puts(g->b, "0");
  for (int d = 0; d < t->ndim; d++) {
    int64_t stride = 1;
    for (int k = d + 1; k < t->ndim; k++) stride *= ext[k];
    if (d) stof_buf_puts(g->b, " + ");
    stof_buf_puts(g->b, "(");
    emit_index(g, e, lb, d, ext[d]);
    stof_buf_printf(g->b, ") * INT64_C(%lld)", (long long)stride);
  }
  stof_buf_puts(g->b, "]");
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
  const char *ct = gctype(g, dt);
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
    stof_buf_printf(o, "stof_%s_%s(", e->kind == STOF_EXPR_MIN ? "min" : "max", gsuffix(g, dt));
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
    int same = !strcmp(gctype(g, a->dtype), gctype(g, b->dtype));
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
    else stof_buf_printf(o, "stof_abs_%s(", gsuffix(g, dt));
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

void sched_cg_iexpr(cgen *g, const sched_block *b, int e) { emit_iexpr(g, b, e); }
void sched_cg_loop_name(cgen *g, int loop) { loop_name(g, loop); }

/* Block b's buffer element at its store indices. */
void sched_cg_elem(cgen *g, int block) {
  const sched_block *b = sched_block_at(g->s, block);
  const stof_op *t = b->out;
  if (g->vstore) { /* its element of the vector stored after the loop */
    stof_buf_printf(g->b, "((%s *)&stof_vs)[", sched_cg_stype(g->cuda, t->dtype));
    loop_name(g, g->vloop);
    stof_buf_puts(g->b, "]");
    return;
  }
  int64_t ext[STOF_MAX_DIMS];
  const lir_buf *lb = buf_layout(g, t, ext);
  sched_cg_buf_name(g->b, t);
  if (layout_of(g, lb) != SCHED_LAYOUT_ROWS) {
    swz_open(g, lb);
    for (int d = 0; d < 2; d++) {
      stof_buf_puts(g->b, d ? ", (int)(" : "(int)(");
      emit_iexpr(g, b, g->l->blk[block].store[d]);
      emit_rel(g, lb, d);
      stof_buf_puts(g->b, ")");
    }
    swz_close(g, lb);
    return;
  }
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
  sched_cg_elem(g, block);
  switch (d) {
  case STOF_DTYPE_F16: stof_buf_puts(g->b, " = stof_f2h("); break;
  case STOF_DTYPE_BF16: stof_buf_puts(g->b, " = stof_f2bf("); break;
  case STOF_DTYPE_BOOL: stof_buf_puts(g->b, " = (uint8_t)(0 != "); break;
  default: stof_buf_printf(g->b, " = (%s)(", sched_cg_stype(g->cuda, d)); break;
  }
}

static void load_elem(cgen *g, int block) {
  stof_dtype d = sched_block_at(g->s, block)->out->dtype;
  const char *conv = d == STOF_DTYPE_F16 ? "stof_h2f" : d == STOF_DTYPE_BF16 ? "stof_bf2f" : "";
  stof_buf_printf(g->b, "%s(", conv);
  sched_cg_elem(g, block);
  stof_buf_puts(g->b, ")");
}

void sched_cg_expr_as(cgen *g, const stof_expr *a, stof_dtype dt) { emit_as(g, a, dt); }
void sched_cg_store_open(cgen *g, int block) { store_open(g, block); }

/* ---------------------------------------------------------------- float32 accumulators */

/* Does loop index block's accumulator here? On CUDA a loop bound to a thread index is the
 * thread's own: each thread's private accumulator holds its elements only. */
static int acc_dim(const cgen *g, int loop) {
  return !g->cuda || sched_loop_at(g->s, loop)->ann != STOF_ANN_THREAD;
}

int sched_cg_acc(const cgen *g, int block) {
  if (!g->l->blk[block].acc) return 0;
  return !g->cuda || sched_cuda_xr_tag(g->s, block) < 0; /* a cross-thread reduction keeps its own */
}

int sched_cg_acc_dims(const cgen *g, int block, int64_t *numel) {
  const lir_blk *lb = &g->l->blk[block];
  int n = 0;
  *numel = 1;
  for (int k = 0; k < lb->nacc; k++)
    if (acc_dim(g, lb->acc_loop[k])) {
      *numel *= sched_loop_run_extent(g->s, lb->acc_loop[k]);
      n++;
    }
  return n;
}

void sched_cg_acc_name(stof_buf *b, int block) { stof_buf_printf(b, "stof_facc%d", block); }

/* Block's accumulator element: "stof_facc<block>" or "stof_facc<block>[flat index over its
 * loops]" (each loop's variable is below its run extent, so the index is in range). */
static void acc_elem(cgen *g, int block) {
  const lir_blk *lb = &g->l->blk[block];
  int64_t numel;
  sched_cg_acc_name(g->b, block);
  if (!sched_cg_acc_dims(g, block, &numel)) return;
  stof_buf_puts(g->b, "[");
  int first = 1;
  for (int k = 0; k < lb->nacc; k++) {
    int loop = lb->acc_loop[k];
    if (!acc_dim(g, loop)) continue;
    int64_t stride = 1;
    for (int j = k + 1; j < lb->nacc; j++)
      if (acc_dim(g, lb->acc_loop[j])) stride *= sched_loop_run_extent(g->s, lb->acc_loop[j]);
    if (!first) stof_buf_puts(g->b, " + ");
    first = 0;
    loop_name(g, loop);
    stof_buf_printf(g->b, " * INT64_C(%lld)", (long long)stride);
  }
  stof_buf_puts(g->b, "]");
}

/* The init, update and final stores of a block with a float32 accumulator. */
static void emit_acc_store(cgen *g, int block, const lir_stmt *st, int depth) {
  const sched_block *b = sched_block_at(g->s, block);
  const stof_expr *red = sched_block_reduce(b);
  stof_reduce_kind c = red->u.reduce.combiner;
  stof_buf *o = g->b;
  sched_indent(o, depth);
  if (st->store == LIR_STORE_FINAL) { /* rounded once, into the buffer */
    store_open(g, block);
    acc_elem(g, block);
    stof_buf_puts(o, ");\n");
    return;
  }
  if (st->store == LIR_STORE_INIT) {
    acc_elem(g, block);
    stof_buf_puts(o, c == STOF_REDUCE_SUM   ? " = 0.0f;\n"
                     : c == STOF_REDUCE_MAX ? " = -INFINITY;\n"
                                            : " = INFINITY;\n");
    return;
  }
  if (c == STOF_REDUCE_SUM) {
    acc_elem(g, block);
    stof_buf_puts(o, " += ");
    emit_as(g, red->u.reduce.src, b->op->dtype);
    stof_buf_puts(o, ";\n");
    return;
  }
  stof_buf_puts(o, "{\n");
  sched_indent(o, depth + 1);
  stof_buf_puts(o, "float acc_ = ");
  acc_elem(g, block);
  stof_buf_puts(o, ", x_ = ");
  emit_as(g, red->u.reduce.src, b->op->dtype);
  stof_buf_puts(o, ";\n");
  sched_indent(o, depth + 1);
  acc_elem(g, block);
  stof_buf_printf(o, " = (x_ %s acc_ || x_ != x_) ? x_ : acc_;\n", c == STOF_REDUCE_MAX ? ">" : "<");
  sched_indent(o, depth);
  stof_buf_puts(o, "}\n");
}

static void emit_store(cgen *g, int block, const lir_stmt *st, int depth) {
  if (g->cuda && sched_cuda_xr_store(g, block, st, depth)) return;
  if (st->store != LIR_STORE_PLAIN && sched_cg_acc(g, block)) {
    emit_acc_store(g, block, st, depth);
    return;
  }
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

/* CUDA: does block write a buffer in shared memory? */
int sched_cg_shared_writer(const cgen *g, int block) {
  if (!g->cuda || !g->place) return 0;
  const lir_buf *lb = lir_find_buf(g->l, sched_block_at(g->s, block)->out);
  return lb && g->place[lb - (const lir_buf *)g->l->bufs.data] == PLACE_SHARED;
}

/* CUDA: a barrier of the CUDA block around a block that fills shared memory; every thread
 * must reach it, so no guard may enclose it. */
void sched_cg_sync(cgen *g, int block, int depth, const char *why) {
  if (g->diverge && !g->st)
    g->st = stof_ctx_error(g->s->ctx, STOF_ERR_SCHEDULE,
                           "cuda: block %s fills shared memory under a guard (a thread index beyond a "
                           "loop's extent, or a split that does not divide): not every thread would "
                           "reach its barrier (make the bound loops' extents equal and the splits divide)",
                           sched_block_name(g->s, block));
  sched_indent(g->b, depth);
  stof_buf_printf(g->b, "__syncthreads(); /* %s */\n", why);
}

void sched_cg_stmts(cgen *g, int first, int depth) {
  for (int i = first; i >= 0; i = lir_stmt_at(g->l, i)->next) sched_cg_stmt(g, i, depth);
}

void sched_cg_stmt(cgen *g, int i, int depth) {
  const stof_sched *s = g->s;
  stof_buf *o = g->b;
  {
    const lir_stmt *st = lir_stmt_at(g->l, i);
    const sched_block *b = st->block >= 0 ? sched_block_at(s, st->block) : NULL;
    if (g->cuda && g->place && sched_cuda_stmt(g, i, depth)) return;
    switch (st->kind) {
    case LIR_FOR: {
      const sched_loop *lp = sched_loop_at(s, st->loop);
      if (g->cuda && lp->ann == STOF_ANN_THREAD) {
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
        g->diverge += guard;
        int outer = g->cur_loop;
        g->cur_loop = st->loop;
        sched_cg_stmts(g, st->first, depth + 1 + guard);
        g->cur_loop = outer;
        g->diverge -= guard;
        if (guard) {
          sched_indent(o, depth + 1);
          stof_buf_puts(o, "}\n");
        }
        sched_indent(o, depth);
        stof_buf_puts(o, "}\n");
        break;
      }
      /* the C backend's vectorized loop is a plain loop: it skips the invalid values too */
      int64_t ext = !g->cuda && lp->ann == STOF_ANN_VECTORIZE ? sched_loop_valid_bound(s, st->loop)
                                                               : sched_loop_run_extent(s, st->loop);
      if (g->cuda && (lp->ann == STOF_ANN_VECTORIZE || lp->ann == STOF_ANN_UNROLL)) {
        sched_indent(o, depth);
        stof_buf_printf(o, "#pragma unroll %lld /* %s */\n", (long long)(ext < 65534 ? ext : 65534),
                        lp->ann == STOF_ANN_VECTORIZE ? "vectorize" : "unroll");
      }
      /* a vectorized reduce loop carries its accumulator: unrolled, never ivdep */
      int ivdep = lp->ann == STOF_ANN_VECTORIZE && lp->iter != STOF_ITER_REDUCE;
      if (!g->cuda && ivdep) {
        sched_indent(o, depth);
        stof_buf_puts(o, "#pragma GCC ivdep\n");
      } else if (!g->cuda && (lp->ann == STOF_ANN_UNROLL || lp->ann == STOF_ANN_VECTORIZE)) {
        sched_indent(o, depth);
        stof_buf_printf(o, "#pragma GCC unroll %lld\n", (long long)(ext < 65534 ? ext : 65534));
      }
      sched_indent(o, depth);
      stof_buf_puts(o, "for (int64_t ");
      loop_name(g, st->loop);
      stof_buf_puts(o, " = 0; ");
      loop_name(g, st->loop);
      stof_buf_printf(o, " < INT64_C(%lld); ++", (long long)ext);
      loop_name(g, st->loop);
      stof_buf_puts(o, ") {");
      if (lp->ann == STOF_ANN_PARALLEL)
        stof_buf_puts(o, g->cuda ? " /* parallel (serial within a thread) */" : " /* parallel (serial without OpenMP) */");
      if (!g->cuda && lp->ann == STOF_ANN_THREAD)
        stof_buf_printf(o, " /* %s (serial on the CPU) */", stof_thread_tag_name(lp->thread));
      for (int k = 0; k < s->annots.len; k++) {
        const sched_annot *a = sched_annot_at(s, k);
        if (a->is_block || a->id != st->loop) continue;
        stof_buf_puts(o, " /* pragma ");
        sched_cg_comment(o, sched_str(s, a->key));
        stof_buf_puts(o, "=");
        sched_cg_comment(o, sched_str(s, a->value));
        stof_buf_puts(o, " */");
      }
      stof_buf_puts(o, "\n");
      int outer = g->cur_loop;
      g->cur_loop = st->loop;
      sched_cg_stmts(g, st->first, depth + 1);
      g->cur_loop = outer;
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
      g->diverge++;
      sched_cg_stmts(g, st->first, depth + 1);
      g->diverge--;
      sched_indent(o, depth);
      stof_buf_puts(o, "}\n");
      break;
    case LIR_STORE: emit_store(g, st->block, st, depth); break;
    case LIR_BLOCK:
      sched_indent(o, depth);
      stof_buf_puts(o, "{ /* block ");
      sched_cg_comment(o, sched_block_name(s, st->block));
      for (int k = 0; k < s->annots.len; k++) {
        const sched_annot *a = sched_annot_at(s, k);
        if (!a->is_block || a->id != st->block) continue;
        stof_buf_puts(o, ", pragma ");
        sched_cg_comment(o, sched_str(s, a->key));
        stof_buf_puts(o, "=");
        sched_cg_comment(o, sched_str(s, a->value));
      }
      stof_buf_puts(o, " */\n");
      int sync = sched_cg_shared_writer(g, st->block);
      sync = sync && !g->in_pipeline;
      if (sync) sched_cg_sync(g, st->block, depth + 1, "the threads are done with the previous contents");
      sched_cg_stmts(g, st->first, depth + 1);
      if (sync) {
        sched_indent(o, depth + 1);
        stof_buf_puts(o, g->wgmma ? "stof_cp_async_wait_all(); stof_fence_async();\n" : "stof_cp_async_wait_all();\n");
        sched_cg_sync(g, st->block, depth + 1, "every thread's part is written");
      }
      sched_indent(o, depth);
      stof_buf_puts(o, "}\n");
      break;
    default: break;
    }
    if (g->cuda && st->kind == LIR_FOR) sched_cuda_xr_after(g, i, depth);
  }
}
