/*
 * libFuzzer target: TE graphs, schedules and the C backend against the reference
 * interpreter (core/te.c, core/interp.c, schedule/). The input decodes into a small program:
 * 1-3 f32 placeholders of rank 1-2 (extents 1, 2, 3, 4 or 8), then 1-4 computes, each one
 * operation on earlier tensors (elementwise binary ops with broadcasting, unary math,
 * comparisons feeding a select, casts through f16 / bf16 / f64 / int32 / int64, sum / max /
 * min over the last axis), a few inputs with edge values (0, inf, NaN, 1e30, a subnormal).
 * Floored modulo takes only inputs and constants (see add_compute). The last compute is the
 * output. The interpreter evaluates it; the schedule is either stof_sched_auto(s, "c") or a
 * few primitives drawn from the bytes (split, fuse, reorder, compute_inline, unroll,
 * vectorize, compute_at, reverse_compute_at, cache_read, cache_write; ones that fail must
 * fail with a status and a message, leaving the schedule
 * usable); stof_build for "c" and stof_func_call then must give the interpreter's values
 * (rel 1e-5 of the largest magnitude among the element, its reference and every value it was
 * computed from (a magnitude shadow of the program, below: cancellation), plus 1e-5 of the
 * output's largest finite magnitude, plus 8 ULPs of float's subnormals; NaN where it gives NaN, inf of the
 * same sign where it gives inf; every element written, nothing written around the output or
 * into the inputs). A build or call failure of a schedule that was accepted is a bug. Each
 * new program costs one C compilation (STOF_CACHE_DIR caches it): the program space is kept
 * small so that the cache hits often.
 */
#include "fuzz_util.h"

#include <math.h>

#include <stof/schedule.h>

#define MAXOP 8
#define POISON (-777.25)
#define GUARD 64
#define GUARD_VALUE (-555.5f)

typedef struct prog {
  stof_ctx *ctx;
  stof_graph *g;
  fz_in in;
  int nop;
  const stof_op *op[MAXOP];
  const stof_op *mag[MAXOP]; /* each compute's magnitude shadow (NULL for placeholders) */
  int nph;
} prog;

static const int64_t extents[] = {1, 2, 3, 4, 8};

/* The index of tensor t for a consumer with axes ax[0..nax): right-aligned broadcasting
 * (extent 1: index 0; equal extent: the axis; otherwise the axis modulo the extent; a
 * tensor of higher rank takes index 0 in its leading dims). */
static void index_into(prog *p, const stof_op *t, int nax, const stof_expr *const *ax, const stof_expr **idx) {
  for (int d = 0; d < t->ndim; d++) {
    int a = nax - t->ndim + d;
    const stof_expr *e;
    if (a < 0 || t->shape[d] == 1) {
      stof_te_int(p->g, 0, STOF_DTYPE_I64, &e);
    } else if (ax[a]->u.var->extent == t->shape[d]) {
      e = ax[a];
    } else {
      const stof_expr *m;
      stof_te_int(p->g, t->shape[d], STOF_DTYPE_I64, &m);
      if (stof_te_binary(p->g, STOF_EXPR_MOD, ax[a], m, &e)) fz_fail("mod: %s", stof_ctx_message(p->ctx));
    }
    idx[d] = e;
  }
}

static const stof_expr *load(prog *p, const stof_op *t, int nax, const stof_expr *const *ax) {
  const stof_expr *idx[STOF_MAX_DIMS], *e;
  index_into(p, t, nax, ax, idx);
  if (stof_te_load(p->g, t, t->ndim, idx, &e)) fz_fail("load: %s", stof_ctx_message(p->ctx));
  return e;
}

static const stof_expr *constant(prog *p) {
  /* exact in f32, and not (0.1, 1e30, a subnormal): an f32 constant holds float's value in
   * the interpreter as in the generated C (bug 2 of docs/RELIABILITY.md) */
  static const double c[] = {0, 1, -1, 0.5, 2, -2.5, 3, 0x1p-10, 0x1p100, -0x1p100, 0.1, 1e30, -1e30, 1e-40};
  const stof_expr *e;
  stof_te_float(p->g, c[fz_below(&p->in, sizeof c / sizeof c[0])], STOF_DTYPE_F32, &e);
  return e;
}

/* ---------------------------------------------------------------- magnitude shadows
 *
 * The comparison's allowance for cancellation follows the operands: next to each compute T
 * the program gets a shadow M (never scheduled or built; the interpreter evaluates it with the
 * output) holding, per element, the largest magnitude of any value that element was computed
 * from: M = max(|T|, the shadows of T's operands at the indices T reads them, |constants|);
 * a reduction takes the max over its axis. A difference of a few float ULPs of an operand
 * (libm's float sigmoid one ULP from the correctly rounded value the interpreter stores) that
 * a subtraction exposes is then within 1e-5 of that element's M, however small the result,
 * while an element computed from small values only keeps the tight bound. */

static const stof_expr *expr_or_die(prog *p, stof_status st, const stof_expr *e, const char *what) {
  if (st) fz_fail("%s: %s", what, stof_ctx_message(p->ctx));
  return e;
}

/* (the builder runs before its result is read: the order of a call's arguments is not) */
static const stof_expr *absx(prog *p, const stof_expr *x) {
  const stof_expr *e = NULL;
  stof_status st = stof_te_unary(p->g, STOF_EXPR_ABS, x, &e);
  return expr_or_die(p, st, e, "abs");
}

static const stof_expr *maxx(prog *p, const stof_expr *x, const stof_expr *y) {
  const stof_expr *e = NULL;
  stof_status st = stof_te_binary(p->g, STOF_EXPR_MAX, x, y, &e);
  return expr_or_die(p, st, e, "max");
}

/* The shadow op of t, or NULL (a placeholder: its own magnitude). */
static const stof_op *shadow_of(prog *p, const stof_op *t) {
  for (int k = 0; k < p->nop; k++)
    if (p->op[k] == t) return p->mag[k];
  return NULL;
}

/* The shadow of t at a consumer's axes (broadcast as load() does): |t| for a placeholder. */
static const stof_expr *mag_load(prog *p, const stof_op *t, int nax, const stof_expr *const *ax) {
  const stof_op *m = shadow_of(p, t);
  return m ? load(p, m, nax, ax) : absx(p, load(p, t, nax, ax));
}

/* The shadow of compute op (the op just made from a and b; b unused when yb is 0, then the
 * constant y is; cmul the constant a was multiplied by, or NULL; reduce: a reduction over a's
 * last axis). */
static const stof_expr *binx(prog *p, stof_expr_kind k, const stof_expr *x, const stof_expr *y) {
  const stof_expr *e = NULL;
  stof_status st = stof_te_binary(p->g, k, x, y, &e);
  return expr_or_die(p, st, e, "shadow arithmetic");
}

static const stof_expr *unx(prog *p, stof_expr_kind k, const stof_expr *x) {
  const stof_expr *e = NULL;
  stof_status st = stof_te_unary(p->g, k, x, &e);
  return expr_or_die(p, st, e, "shadow function");
}

static const stof_expr *f32c(prog *p, double v) {
  const stof_expr *e = NULL;
  stof_status st = stof_te_float(p->g, v, STOF_DTYPE_F32, &e);
  return expr_or_die(p, st, e, "shadow constant");
}

/* What an operand's allowance becomes through an ill-conditioned function near zero: an
 * absolute error dx of x moves log(x) by dx / |x|, sqrt(x) by dx / (2 sqrt|x|), rsqrt(x) by
 * dx / (2 |x|^1.5), x / y by dx / |y| + |x| dy / y^2. So after a cancellation (x = T1 - T2,
 * a few ULPs of T1 apart on the two sides) log(x) keeps an allowance in proportion (found by
 * fuzzing: log(sigmoid(v) - float16(sigmoid(v)))). Capped at 1e30 (float's range). NULL: none. */
static const stof_expr *cond_mag(prog *p, stof_expr_kind kind, const stof_expr *x, const stof_expr *ma,
                                 const stof_expr *y, const stof_expr *my) {
  const stof_expr *ax = absx(p, x), *e = NULL;
  switch (kind) {
  case STOF_EXPR_LOG: e = binx(p, STOF_EXPR_DIV, ma, ax); break;
  case STOF_EXPR_SQRT: e = binx(p, STOF_EXPR_DIV, ma, unx(p, STOF_EXPR_SQRT, ax)); break;
  case STOF_EXPR_RSQRT: e = binx(p, STOF_EXPR_DIV, ma, binx(p, STOF_EXPR_MUL, ax, unx(p, STOF_EXPR_SQRT, ax))); break;
  case STOF_EXPR_DIV: {
    const stof_expr *ay = absx(p, y);
    e = binx(p, STOF_EXPR_ADD, binx(p, STOF_EXPR_DIV, ma, ay),
             binx(p, STOF_EXPR_DIV, binx(p, STOF_EXPR_MUL, ax, my), binx(p, STOF_EXPR_MUL, ay, ay)));
    break;
  }
  default: return NULL;
  }
  return binx(p, STOF_EXPR_MIN, e, f32c(p, 1e30));
}

static const stof_op *make_mag(prog *p, const stof_op *op, const stof_op *a, const stof_op *b, int yb,
                               const stof_expr *y, const stof_expr *cmul, int reduce, stof_expr_kind kind) {
  stof_graph *g = p->g;
  const stof_expr *ax[STOF_MAX_DIMS], *m;
  const stof_op *from = NULL;
  char name[8];
  if (reduce) { /* R = max over a's last axis of a's shadow */
    const stof_expr *k, *idx[STOF_MAX_DIMS], *src, *body;
    if (stof_te_compute_axes(g, op->ndim, op->shape, NULL, ax) ||
        stof_te_reduce_axis(g, a->shape[a->ndim - 1], "k", &k))
      fz_fail("shadow axes: %s", stof_ctx_message(p->ctx));
    for (int d = 0; d < a->ndim - 1; d++) idx[d] = ax[d];
    idx[a->ndim - 1] = k;
    const stof_op *sa = shadow_of(p, a);
    if (stof_te_load(g, sa ? sa : a, a->ndim, idx, &src)) fz_fail("shadow load: %s", stof_ctx_message(p->ctx));
    if (!sa) src = absx(p, src);
    if (stof_te_reduce(g, STOF_REDUCE_MAX, src, 1, &k, &body)) fz_fail("shadow reduce: %s", stof_ctx_message(p->ctx));
    snprintf(name, sizeof name, "R%d", p->nop);
    if (stof_te_compute(g, name, op->ndim, ax, body, STOF_DTYPE_F32, &from))
      fz_fail("shadow compute: %s", stof_ctx_message(p->ctx));
  }
  if (stof_te_compute_axes(g, op->ndim, op->shape, NULL, ax)) fz_fail("shadow axes: %s", stof_ctx_message(p->ctx));
  m = absx(p, load(p, op, op->ndim, ax));
  if (from) {
    m = maxx(p, m, load(p, from, op->ndim, ax));
  } else {
    const stof_expr *ma = mag_load(p, a, op->ndim, ax);
    m = maxx(p, m, ma);
    if (cmul) m = maxx(p, m, binx(p, STOF_EXPR_MUL, ma, absx(p, cmul)));
    const stof_expr *my = yb ? mag_load(p, b, op->ndim, ax) : absx(p, y);
    m = maxx(p, m, my);
    const stof_expr *c = cond_mag(p, kind, load(p, a, op->ndim, ax), ma, yb ? load(p, b, op->ndim, ax) : y, my);
    if (c) m = maxx(p, m, c);
  }
  const stof_op *out;
  snprintf(name, sizeof name, "M%d", p->nop);
  if (stof_te_compute(g, name, op->ndim, ax, m, STOF_DTYPE_F32, &out)) fz_fail("shadow compute: %s", stof_ctx_message(p->ctx));
  return out;
}

/* One compute on earlier tensors; 0 when the builders refuse it (then with a message). */
static int add_compute(prog *p) {
  fz_in *in = &p->in;
  stof_graph *g = p->g;
  const stof_op *a = p->op[fz_below(in, (unsigned)p->nop)], *b = p->op[fz_below(in, (unsigned)p->nop)];
  /* the output's shape: a's, or the broadcast of a and b when b is wider */
  const stof_op *shape_of = b->ndim > a->ndim ? b : a;
  int nd = shape_of->ndim;
  int64_t shape[STOF_MAX_DIMS];
  memcpy(shape, shape_of->shape, sizeof shape);
  unsigned kind = fz_below(in, 6);
  const stof_expr *ax[STOF_MAX_DIMS], *body = NULL, *y = NULL, *cmul = NULL;
  int yb = 1;
  stof_status st = STOF_OK;
  if (kind == 5) { /* a reduction over a's last axis */
    int64_t ext = a->shape[a->ndim - 1];
    int ond = a->ndim == 1 ? 1 : a->ndim - 1;
    int64_t oshape[STOF_MAX_DIMS] = {1};
    if (a->ndim > 1) memcpy(oshape, a->shape, sizeof oshape[0] * (size_t)ond);
    if ((st = stof_te_compute_axes(g, ond, oshape, NULL, ax))) fz_fail("axes: %s", stof_ctx_message(p->ctx));
    const stof_expr *k, *idx[STOF_MAX_DIMS], *src;
    if ((st = stof_te_reduce_axis(g, ext, "k", &k))) fz_fail("reduce_axis: %s", stof_ctx_message(p->ctx));
    for (int d = 0; d < a->ndim - 1; d++) idx[d] = ax[d];
    idx[a->ndim - 1] = k;
    if ((st = stof_te_load(g, a, a->ndim, idx, &src))) fz_fail("load: %s", stof_ctx_message(p->ctx));
    if (fz_below(in, 2)) { /* a function of the element before reducing */
      const stof_expr *e2;
      if (!stof_te_unary(g, STOF_EXPR_ABS, src, &e2)) src = e2;
    }
    stof_reduce_kind rk = (stof_reduce_kind)fz_below(in, STOF_REDUCE_COUNT);
    st = stof_te_reduce(g, rk, src, 1, &k, &body);
    nd = ond;
    memcpy(shape, oshape, sizeof shape);
  } else {
    if ((st = stof_te_compute_axes(g, nd, shape, NULL, ax))) fz_fail("axes: %s", stof_ctx_message(p->ctx));
    yb = fz_below(in, 4) != 0;
    const stof_expr *x = load(p, a, nd, ax);
    y = yb ? load(p, b, nd, ax) : constant(p);
    switch (kind) {
    case 0: case 1: { /* binary */
      static const stof_expr_kind bk[] = {STOF_EXPR_ADD, STOF_EXPR_SUB, STOF_EXPR_MUL, STOF_EXPR_DIV,
                                          STOF_EXPR_MIN, STOF_EXPR_MAX, STOF_EXPR_POW, STOF_EXPR_MOD};
      stof_expr_kind k = bk[fz_below(in, 8)];
      /* Floored modulo is ill-conditioned: a last-bit difference in its operands, which the
       * two sides may have where the interpreter works in double and the generated C in
       * float (sums, math functions: docs/SCHEDULE.md), becomes any value in [0, b) once the
       * quotient is large (sum * 2^100 % 3). Its operands are the inputs and constants, which
       * both sides see alike (a SUB otherwise). */
      if (k == STOF_EXPR_MOD && (a->kind != STOF_OP_PLACEHOLDER || (yb && b->kind != STOF_OP_PLACEHOLDER)))
        k = STOF_EXPR_SUB;
      st = stof_te_binary(g, k, x, y, &body);
      break;
    }
    case 2: { /* unary */
      static const stof_expr_kind uk[] = {STOF_EXPR_NEG, STOF_EXPR_EXP, STOF_EXPR_LOG, STOF_EXPR_SQRT,
                                          STOF_EXPR_RSQRT, STOF_EXPR_TANH, STOF_EXPR_ERF, STOF_EXPR_SIGMOID,
                                          STOF_EXPR_ABS, STOF_EXPR_SIN, STOF_EXPR_COS, STOF_EXPR_FLOOR};
      stof_expr_kind k = uk[fz_below(in, 12)];
      /* sin and cos are ill-conditioned at large arguments in the same way: a last-bit
       * difference in sigmoid(x) * 2^100 moves the argument by far more than 2 pi (sin of
       * sigmoid(x) * 1.27e30 - sigmoid(x): C backend -0.104, interpreter -0.578). Their
       * operands are the inputs, which both sides see alike (tanh otherwise). */
      if ((k == STOF_EXPR_SIN || k == STOF_EXPR_COS) && a->kind != STOF_OP_PLACEHOLDER) k = STOF_EXPR_TANH;
      st = stof_te_unary(g, k, x, &body);
      break;
    }
    case 3: { /* select on a comparison */
      static const stof_expr_kind ck[] = {STOF_EXPR_LT, STOF_EXPR_LE, STOF_EXPR_GT, STOF_EXPR_GE, STOF_EXPR_EQ,
                                          STOF_EXPR_NE};
      const stof_expr *c;
      if (!(st = stof_te_binary(g, ck[fz_below(in, 6)], x, y, &c))) {
        if (fz_below(in, 3) == 0) { /* the comparison itself, as 0 / 1 */
          body = c;
        } else {
          if (fz_below(in, 2) == 0) yb = 0, y = constant(p); /* the other branch a constant */
          st = stof_te_select(g, c, x, y, &body);
        }
      }
      break;
    }
    default: { /* a cast there and back */
      static const stof_dtype dk[] = {STOF_DTYPE_F16, STOF_DTYPE_BF16, STOF_DTYPE_I32, STOF_DTYPE_F64, STOF_DTYPE_I64};
      const stof_expr *c, *s = x;
      if (fz_below(in, 2)) {
        cmul = constant(p);
        if (stof_te_binary(g, STOF_EXPR_MUL, x, cmul, &s)) s = x, cmul = NULL;
      }
      stof_dtype to = dk[fz_below(in, 5)];
      if (!(st = stof_te_cast(g, to, s, &c))) st = stof_te_cast(g, STOF_DTYPE_F32, c, &body);
      break;
    }
    }
  }
  if (st) {
    fz_check_error(p->ctx, st, "a TE builder");
    return 0;
  }
  char name[8];
  snprintf(name, sizeof name, "T%d", p->nop);
  const stof_op *op;
  if ((st = stof_te_compute(g, name, nd, ax, body, STOF_DTYPE_F32, &op))) {
    fz_check_error(p->ctx, st, "stof_te_compute");
    return 0;
  }
  p->mag[p->nop] = make_mag(p, op, a, b, yb, y, cmul, kind == 5, body->kind);
  p->op[p->nop++] = op;
  return 1;
}

/* A few primitives drawn from the bytes; each either works or fails cleanly. */
static void random_schedule(prog *p, stof_sched *s) {
  fz_in *in = &p->in;
  int nprim = 1 + (int)fz_below(in, 4);
  for (int k = 0; k < nprim; k++) {
    int nb = stof_sched_nblock(s), b = (int)fz_below(in, (unsigned)nb), loops[STOF_SCHED_MAX_LOOPS], nl = 0;
    if (!stof_sched_block_alive(s, b)) continue;
    if (stof_sched_get_block(s, stof_sched_block_name(s, b), &b)) { /* ids are handed out by name */
      stof_ctx_clear_error(p->ctx);
      continue;
    }
    if (stof_sched_get_loops(s, b, STOF_SCHED_MAX_LOOPS, loops, &nl)) fz_fail("get_loops: %s", stof_ctx_message(p->ctx));
    stof_status st = STOF_OK;
    int l = nl ? loops[fz_below(in, (unsigned)nl)] : -1, out[4];
    unsigned kind = fz_below(in, 11);
    switch (kind) {
    case 0: case 1: {
      static const int64_t fs[] = {1, 2, 3, 4, 5, 8, 16, (int64_t)1 << 40};
      stof_factor f[3] = {stof_factor_const(STOF_INFER), stof_factor_const(fs[fz_below(in, 8)]),
                          stof_factor_const(fs[fz_below(in, 8)])};
      int nf = 2 + (int)fz_below(in, 2);
      if (fz_below(in, 2)) { stof_factor t = f[0]; f[0] = f[1]; f[1] = t; }
      if (l >= 0) st = stof_sched_split(s, l, nf, f, out);
      break;
    }
    case 2:
      if (nl >= 2) {
        int at = (int)fz_below(in, (unsigned)nl - 1);
        st = stof_sched_fuse(s, 2, loops + at, out);
      }
      break;
    case 3:
      if (nl >= 2) {
        int x = loops[fz_below(in, (unsigned)nl)], y = loops[fz_below(in, (unsigned)nl)], two[2] = {x, y};
        st = stof_sched_reorder(s, 2, two);
      }
      break;
    case 4: st = stof_sched_compute_inline(s, b); break;
    case 5: if (l >= 0) st = stof_sched_unroll(s, l); break;
    case 6: if (l >= 0) st = stof_sched_vectorize(s, l); break;
    case 7:
    case 8: { /* b at a loop of another block (bound inference: the region it must cover) */
      int c = (int)fz_below(in, (unsigned)nb), cl[STOF_SCHED_MAX_LOOPS], cn = 0;
      if (c == b || !stof_sched_block_alive(s, c)) break;
      if (stof_sched_get_block(s, stof_sched_block_name(s, c), &c) ||
          stof_sched_get_loops(s, c, STOF_SCHED_MAX_LOOPS, cl, &cn) || !cn) {
        stof_ctx_clear_error(p->ctx);
        break;
      }
      int at = cl[fz_below(in, (unsigned)cn)];
      st = kind == 7 ? stof_sched_compute_at(s, b, at) : stof_sched_reverse_compute_at(s, b, at);
      break;
    }
    case 9: st = stof_sched_cache_read(s, b, (int)fz_below(in, 2), fz_below(in, 2) ? "local" : "shared", out); break;
    default: st = stof_sched_cache_write(s, b, fz_below(in, 2) ? "local" : "shared", out); break;
    }
    if (st) fz_check_error(p->ctx, st, "a schedule primitive");
    stof_ctx_clear_error(p->ctx);
  }
}

static void compare(const stof_tensor *got, const stof_tensor *want, const stof_tensor *mag, const char *program) {
  int64_t n = stof_tensor_numel(want);
  double scale = 0;
  for (int64_t k = 0; k < n; k++) {
    double w = stof_tensor_load(want, k);
    if (isfinite(w) && fabs(w) > scale) scale = fabs(w);
  }
  for (int64_t k = 0; k < n; k++) {
    double a = stof_tensor_load(got, k), b = stof_tensor_load(want, k), m = stof_tensor_load(mag, k);
    if (!isfinite(m)) m = 0; /* an inf or NaN on the way: no allowance from it */
    if (isnan(a) && isnan(b)) continue;
    if (isinf(b) || isinf(a)) {
      if (a == b) continue;
    } else if (fabs(a - b) <= 1e-5 * fmax(fmax(fabs(a), fabs(b)), m) + 1e-5 * scale + 0x1p-146) {
      /* (0x1p-146: 8 ULPs of float's subnormals, where libm's float functions are a few ULPs
       * off the double ones rounded, and a ULP is most of the value: erff(-1.04e-41)) */
      continue;
    }
    fz_fail("element %lld: C backend %.9g, interpreter %.9g (scale %g, operands' magnitude %g)\n%s", (long long)k, a,
            b, scale, m, program);
  }
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  if (!getenv("STOF_CACHE_DIR")) setenv("STOF_CACHE_DIR", "/tmp/stof-fuzz-cache", 1);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  prog P = {0}, *p = &P;
  p->ctx = stof_ctx_new(NULL, NULL);
  p->in = (fz_in){data, size, 0};
  fz_in *in = &p->in;
  if (stof_graph_new(p->ctx, &p->g)) fz_fail("graph_new");
  p->nph = 1 + (int)fz_below(in, 3);
  for (int i = 0; i < p->nph; i++) {
    int64_t shape[2] = {extents[fz_below(in, 5)], extents[fz_below(in, 5)]};
    char name[8];
    snprintf(name, sizeof name, "P%d", i);
    if (stof_te_placeholder(p->g, 1 + (int)fz_below(in, 2), shape, STOF_DTYPE_F32, name, &p->op[p->nop++]))
      fz_fail("placeholder: %s", stof_ctx_message(p->ctx));
  }
  int ncomp = 1 + (int)fz_below(in, 4), made = 0;
  for (int i = 0; i < ncomp; i++) made += add_compute(p);
  const stof_op *outop = p->op[p->nop - 1];
  stof_tensor *feed[3] = {0}, *want = NULL, *got = NULL, *wm[2] = {0};
  float *obuf = NULL;
  stof_sched *s = NULL;
  stof_func *f = NULL;
  char *text = NULL;
  if (!made) goto done;
  /* inputs: uniform in [-1, 1), a few edge values */
  for (int i = 0; i < p->nph; i++) {
    if (stof_tensor_rand(p->ctx, STOF_DTYPE_F32, p->op[i]->ndim, p->op[i]->shape, 1 + (uint64_t)i, &feed[i]))
      fz_fail("rand: %s", stof_ctx_message(p->ctx));
    int nedge = (int)fz_below(in, 4);
    int64_t numel = stof_tensor_numel(feed[i]);
    static const double ev[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, 1e30, -1e30, 1e-40};
    for (int k = 0; k < nedge; k++) stof_tensor_store(feed[i], fz_below(in, 64) % numel, ev[fz_below(in, 8)]);
  }
  if (stof_te_print(p->g, 1, &outop, &text)) fz_fail("print: %s", stof_ctx_message(p->ctx));
  const stof_op *evals[2] = {outop, p->mag[p->nop - 1]};
  stof_status st = stof_interp_eval(p->g, 2, evals, p->nph, p->op, (const stof_tensor *const *)feed, wm);
  if (st) fz_fail("interp: %s\n%s", stof_ctx_message(p->ctx), text);
  want = wm[0];
  if ((st = stof_sched_new(p->g, 1, &outop, &s))) fz_fail("sched_new: %s\n%s", stof_ctx_message(p->ctx), text);
  if (fz_below(in, 4) == 0) {
    random_schedule(p, s);
  } else if ((st = stof_sched_auto(s, "c", NULL))) {
    fz_fail("sched_auto: %s\n%s", stof_ctx_message(p->ctx), text);
  }
  /* arguments: the placeholders the output reads, then the output */
  const stof_op **ops = NULL, *args[4];
  stof_tensor *argt[4];
  int nops = 0, nargs = 0;
  if (stof_graph_collect(p->g, 1, &outop, &ops, &nops)) fz_fail("collect: %s", stof_ctx_message(p->ctx));
  for (int i = 0; i < nops; i++)
    if (ops[i]->kind == STOF_OP_PLACEHOLDER) args[nargs] = ops[i], argt[nargs++] = feed[ops[i]->id];
  stof_ctx_dealloc(p->ctx, ops, sizeof *ops * (size_t)nops);
  /* the output between two guard zones: the generated code is not instrumented by ASan, so
   * a write past the output is caught here (and the inputs must stay as they were) */
  int64_t onum = stof_shape_numel(outop->ndim, outop->shape);
  obuf = malloc(sizeof(float) * (size_t)(onum + 2 * GUARD));
  for (int64_t k = 0; k < onum + 2 * GUARD; k++) obuf[k] = GUARD_VALUE;
  if (stof_tensor_wrap(p->ctx, STOF_DTYPE_F32, outop->ndim, outop->shape, NULL, obuf + GUARD, STOF_DEVICE_CPU, &got))
    fz_fail("tensor_wrap: %s", stof_ctx_message(p->ctx));
  stof_tensor_fill(got, POISON);
  stof_tensor *keep[3] = {0};
  for (int i = 0; i < p->nph; i++)
    if (stof_tensor_to(feed[i], STOF_DEVICE_CPU, &keep[i])) fz_fail("copy: %s", stof_ctx_message(p->ctx));
  args[nargs] = outop, argt[nargs++] = got;
  char *nest = NULL;
  if (stof_sched_print_loop_nest(s, &nest)) fz_fail("print_loop_nest: %s\n%s", stof_ctx_message(p->ctx), text);
  if ((st = stof_build(s, nargs, args, "c", &f)))
    fz_fail("build: %s\n%s\n%s", stof_ctx_message(p->ctx), text, nest);
  if (getenv("STOF_FUZZ_VERBOSE")) { /* for reducing a crash: the program, trace, loop nest, C */
    stof_trace *tr = NULL;
    char *lua = NULL;
    if (!stof_sched_trace(s, &tr) && !stof_trace_to_lua(tr, &lua)) fprintf(stderr, "%s\n", lua);
    if (lua) stof_ctx_dealloc(p->ctx, lua, strlen(lua) + 1);
    stof_trace_free(tr);
    fprintf(stderr, "%s\n%s\n%s\n", text, nest, stof_func_source(f));
  }
  if ((st = stof_func_call(f, nargs, argt))) fz_fail("call: %s\n%s\n%s", stof_ctx_message(p->ctx), text, nest);
  for (int64_t k = 0; k < GUARD; k++)
    if (obuf[k] != GUARD_VALUE || obuf[GUARD + onum + k] != GUARD_VALUE)
      fz_fail("the generated code wrote %s the output (guard element %lld)\n%s\n%s", obuf[k] != GUARD_VALUE ? "before" : "past",
              (long long)k, text, nest);
  for (int i = 0; i < p->nph; i++)
    for (int64_t k = 0; k < stof_tensor_numel(keep[i]); k++) {
      double a = stof_tensor_load(keep[i], k), b = stof_tensor_load(feed[i], k);
      if (a != b && !(isnan(a) && isnan(b))) fz_fail("the generated code wrote input P%d\n%s\n%s", i, text, nest);
    }
  for (int i = 0; i < 3; i++) stof_tensor_free(keep[i]);
  {
    size_t len = strlen(text) + strlen(nest) + 2;
    char *both = malloc(len);
    snprintf(both, len, "%s\n%s", text, nest);
    compare(got, want, wm[1], both);
    free(both);
  }
  stof_ctx_dealloc(p->ctx, nest, strlen(nest) + 1);
done:
  if (text) stof_ctx_dealloc(p->ctx, text, strlen(text) + 1);
  stof_func_free(f);
  stof_sched_free(s);
  stof_tensor_free(got);
  free(obuf);
  stof_tensor_free(want);
  stof_tensor_free(wm[1]);
  for (int i = 0; i < 3; i++) stof_tensor_free(feed[i]);
  stof_graph_free(p->g);
  if (stof_ctx_bytes_in_use(p->ctx) != 0) fz_fail("%zu bytes leaked", stof_ctx_bytes_in_use(p->ctx));
  stof_ctx_free(p->ctx);
  return 0;
}
