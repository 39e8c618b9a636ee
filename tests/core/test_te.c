/*
 * Tests of the TE IR: builders (type promotion and operand checks), loads, computes and
 * their body rules, placeholders, the printer, the structural hash, pattern kinds and
 * graph collection. Numeric semantics are tested in test_interp.c.
 */
#include "testutil.h"

#include <math.h>
#include <string.h>
#include <stdio.h>

static stof_status ext_noop(stof_ctx *ctx, int ninput, const stof_tensor *const *inputs,
                            stof_tensor *output, void *ud) {
  return STOF_OK;
}

/* ---------------------------------------------------------------- kinds and graphs */

static void kind_names_follow_x_macros(void **state) {
  static const char *const ek[] = {
#define X(n, t) t,
      STOF_EXPR_KIND_LIST(X)
#undef X
  };
  assert_int_equal(sizeof ek / sizeof *ek, STOF_EXPR_KIND_COUNT);
  for (int k = 0; k < STOF_EXPR_KIND_COUNT; k++) {
    assert_string_equal(stof_expr_kind_name((stof_expr_kind)k), ek[k]);
    int bin = k >= STOF_EXPR_ADD && k <= STOF_EXPR_OR;
    int un = k >= STOF_EXPR_NEG && k <= STOF_EXPR_FLOOR;
    assert_int_equal(!!stof_expr_kind_is_binary((stof_expr_kind)k), bin);
    assert_int_equal(!!stof_expr_kind_is_unary((stof_expr_kind)k), un);
  }
  static const char *const rk[] = {
#define X(n, t) t,
      STOF_REDUCE_LIST(X)
#undef X
  };
  for (int k = 0; k < STOF_REDUCE_COUNT; k++)
    assert_string_equal(stof_reduce_kind_name((stof_reduce_kind)k), rk[k]);
  static const char *const pk[] = {
#define X(n, t) t,
      STOF_PATTERN_LIST(X)
#undef X
  };
  for (int k = 0; k < STOF_PATTERN_COUNT; k++)
    assert_string_equal(stof_pattern_name((stof_pattern)k), pk[k]);
  assert_string_equal(stof_reduce_kind_name(STOF_REDUCE_SUM), "sum");
  assert_true(STOF_PATTERN_ELEMWISE < STOF_PATTERN_BROADCAST &&
              STOF_PATTERN_BROADCAST < STOF_PATTERN_INJECTIVE &&
              STOF_PATTERN_INJECTIVE < STOF_PATTERN_REDUCTION &&
              STOF_PATTERN_REDUCTION < STOF_PATTERN_OUT_FUSABLE &&
              STOF_PATTERN_OUT_FUSABLE < STOF_PATTERN_OPAQUE);
}

static void graph_numbers_ops_in_creation_order(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  stof_graph *g = NULL;
  TU_OK(ctx, stof_graph_new(ctx, &g));
  assert_ptr_equal(stof_graph_ctx(g), ctx);
  assert_int_equal(stof_graph_nop(g), 0);
  const stof_op *A = tu_ph(g, "A_in", STOF_DTYPE_F16, 2, TU_SHAPE(3, 5));
  const stof_op *B = tu_ph(g, "B_in", STOF_DTYPE_I32, 1, TU_SHAPE(7));
  assert_int_equal(stof_graph_nop(g), 2);
  assert_ptr_equal(stof_graph_op(g, 0), A);
  assert_ptr_equal(stof_graph_op(g, 1), B);
  assert_int_equal(A->id, 0);
  assert_int_equal(B->id, 1);
  assert_int_equal(A->kind, STOF_OP_PLACEHOLDER);
  assert_string_equal(A->name, "A_in");
  assert_int_equal(A->dtype, STOF_DTYPE_F16);
  assert_int_equal(A->ndim, 2);
  assert_int_equal(A->shape[0], 3);
  assert_int_equal(A->shape[1], 5);
  assert_int_equal(A->pattern, STOF_PATTERN_INPUT);
  assert_false(A->compute_intensive);
  const stof_expr *ax[2];
  TU_OK(ctx, stof_te_compute_axes(g, 2, TU_SHAPE(3, 5), NULL, ax));
  for (int d = 0; d < 2; d++) {
    assert_int_equal(ax[d]->kind, STOF_EXPR_VAR);
    assert_int_equal(ax[d]->u.var->kind, STOF_VAR_AXIS);
  }
  assert_string_equal(ax[0]->u.var->name, "i");
  assert_string_equal(ax[1]->u.var->name, "j");
  assert_int_equal(ax[0]->u.var->extent, 3);
  assert_int_equal(ax[1]->u.var->extent, 5);
  const stof_op *C = tu_compute(g, "C_out", 2, ax,
                                tu_bin(g, STOF_EXPR_MUL, tu_load(g, A, 2, ax[0], ax[1]),
                                       tu_f32(g, 2.0)));
  assert_int_equal(C->id, 2);
  assert_int_equal(C->kind, STOF_OP_COMPUTE);
  assert_string_equal(C->name, "C_out");
  assert_int_equal(C->shape[1], 5);
  assert_non_null(C->body);
  assert_ptr_equal(C->axis[0], ax[0]->u.var);
  assert_ptr_equal(stof_graph_op(g, 2), C);
  const stof_expr *names_ax[3];
  const char *const names[3] = {"batch", "row", "col"};
  TU_OK(ctx, stof_te_compute_axes(g, 3, TU_SHAPE(2, 4, 6), names, names_ax));
  assert_string_equal(names_ax[0]->u.var->name, "batch");
  assert_string_equal(names_ax[2]->u.var->name, "col");
  assert_int_equal(names_ax[2]->u.var->extent, 6);
  const stof_expr *k = tu_raxis(g, 9, "kk");
  assert_int_equal(k->kind, STOF_EXPR_VAR);
  assert_int_equal(k->u.var->kind, STOF_VAR_REDUCE);
  assert_int_equal(k->u.var->extent, 9);
  assert_string_equal(k->u.var->name, "kk");
  stof_graph_free(g);
  tu_ctx_free(ctx, &h);
}

/* ---------------------------------------------------------------- builders */

static const stof_expr *imm(stof_graph *g, stof_dtype dt) {
  const stof_expr *e = NULL;
  if (stof_dtype_is_float(dt)) TU_OK(TU_G(g), stof_te_float(g, 1.5, dt, &e));
  else TU_OK(TU_G(g), stof_te_int(g, dt == STOF_DTYPE_BOOL ? 1 : 3, dt, &e));
  assert_int_equal(e->dtype, dt);
  return e;
}

static void binary_promotes_types(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  stof_graph *g = NULL;
  TU_OK(ctx, stof_graph_new(ctx, &g));
  static const struct {
    stof_dtype a, b, want;
  } cases[] = {
      {STOF_DTYPE_I32, STOF_DTYPE_F32, STOF_DTYPE_F32},  {STOF_DTYPE_F32, STOF_DTYPE_I32, STOF_DTYPE_F32},
      {STOF_DTYPE_I64, STOF_DTYPE_F32, STOF_DTYPE_F32},  {STOF_DTYPE_I32, STOF_DTYPE_I64, STOF_DTYPE_I64},
      {STOF_DTYPE_F16, STOF_DTYPE_BF16, STOF_DTYPE_F32}, {STOF_DTYPE_BF16, STOF_DTYPE_F16, STOF_DTYPE_F32},
      {STOF_DTYPE_F16, STOF_DTYPE_F16, STOF_DTYPE_F16},  {STOF_DTYPE_F16, STOF_DTYPE_F32, STOF_DTYPE_F32},
      {STOF_DTYPE_F32, STOF_DTYPE_F64, STOF_DTYPE_F64},  {STOF_DTYPE_BF16, STOF_DTYPE_I32, STOF_DTYPE_BF16},
      {STOF_DTYPE_I32, STOF_DTYPE_I32, STOF_DTYPE_I32},
  };
  stof_expr_kind kinds[] = {STOF_EXPR_ADD, STOF_EXPR_SUB, STOF_EXPR_MUL, STOF_EXPR_DIV,
                            STOF_EXPR_MIN, STOF_EXPR_MAX};
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++)
    for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
      const stof_expr *a = imm(g, cases[c].a), *b = imm(g, cases[c].b);
      const stof_expr *e = tu_bin(g, kinds[k], a, b);
      if (e->dtype != cases[c].want)
        fail_msg("%s %s %s gave %s, want %s", stof_dtype_name(cases[c].a),
                 stof_expr_kind_name(kinds[k]), stof_dtype_name(cases[c].b),
                 stof_dtype_name(e->dtype), stof_dtype_name(cases[c].want));
      assert_int_equal(e->kind, kinds[k]);
      assert_ptr_equal(e->u.op.a, a);
      assert_ptr_equal(e->u.op.b, b);
    }
  stof_graph_free(g);
  tu_ctx_free(ctx, &h);
}

static void comparisons_give_bool_and_logic_takes_bools(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  stof_graph *g = NULL;
  TU_OK(ctx, stof_graph_new(ctx, &g));
  stof_expr_kind cmp[] = {STOF_EXPR_LT, STOF_EXPR_LE, STOF_EXPR_GT,
                          STOF_EXPR_GE, STOF_EXPR_EQ, STOF_EXPR_NE};
  for (size_t k = 0; k < sizeof cmp / sizeof *cmp; k++) {
    assert_int_equal(tu_bin(g, cmp[k], imm(g, STOF_DTYPE_I32), imm(g, STOF_DTYPE_F32))->dtype,
                     STOF_DTYPE_BOOL);
    assert_int_equal(tu_bin(g, cmp[k], imm(g, STOF_DTYPE_F16), imm(g, STOF_DTYPE_F16))->dtype,
                     STOF_DTYPE_BOOL);
  }
  const stof_expr *p = tu_bin(g, STOF_EXPR_LT, imm(g, STOF_DTYPE_I32), imm(g, STOF_DTYPE_I32));
  const stof_expr *q = tu_bin(g, STOF_EXPR_GE, imm(g, STOF_DTYPE_F32), imm(g, STOF_DTYPE_F32));
  assert_int_equal(tu_bin(g, STOF_EXPR_AND, p, q)->dtype, STOF_DTYPE_BOOL);
  assert_int_equal(tu_bin(g, STOF_EXPR_OR, p, q)->dtype, STOF_DTYPE_BOOL);
  int nop = stof_graph_nop(g);
  const stof_expr *out = NULL;
  stof_status st = stof_te_binary(g, STOF_EXPR_AND, imm(g, STOF_DTYPE_F32), p, &out);
  assert_int_equal(st, STOF_ERR_TYPE);
  assert_int_equal(stof_ctx_status(ctx), STOF_ERR_TYPE);
  TU_MSG_ANY(ctx, "&&", "and", "AND");
  stof_ctx_clear_error(ctx);
  st = stof_te_binary(g, STOF_EXPR_OR, p, imm(g, STOF_DTYPE_I32), &out);
  assert_int_equal(st, STOF_ERR_TYPE);
  TU_MSG_ANY(ctx, "||", "or", "OR");
  stof_ctx_clear_error(ctx);
  assert_int_equal(stof_graph_nop(g), nop);
  stof_graph_free(g);
  tu_ctx_free(ctx, &h);
}

static void unary_keeps_or_converts_dtype_and_not_takes_bool(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  stof_graph *g = NULL;
  TU_OK(ctx, stof_graph_new(ctx, &g));
  assert_int_equal(tu_un(g, STOF_EXPR_NEG, imm(g, STOF_DTYPE_I32))->dtype, STOF_DTYPE_I32);
  assert_int_equal(tu_un(g, STOF_EXPR_ABS, imm(g, STOF_DTYPE_I64))->dtype, STOF_DTYPE_I64);
  assert_int_equal(tu_un(g, STOF_EXPR_ABS, imm(g, STOF_DTYPE_F16))->dtype, STOF_DTYPE_F16);
  assert_int_equal(tu_un(g, STOF_EXPR_EXP, imm(g, STOF_DTYPE_I32))->dtype, STOF_DTYPE_F32);
  assert_int_equal(tu_un(g, STOF_EXPR_TANH, imm(g, STOF_DTYPE_F64))->dtype, STOF_DTYPE_F64);
  assert_int_equal(tu_un(g, STOF_EXPR_EXP, imm(g, STOF_DTYPE_F32))->kind, STOF_EXPR_EXP);
  const stof_expr *b = tu_bin(g, STOF_EXPR_LT, imm(g, STOF_DTYPE_I32), imm(g, STOF_DTYPE_I32));
  assert_int_equal(tu_un(g, STOF_EXPR_NOT, b)->dtype, STOF_DTYPE_BOOL);
  const stof_expr *out = NULL;
  stof_status s = stof_te_unary(g, STOF_EXPR_NOT, imm(g, STOF_DTYPE_F32), &out);
  assert_int_equal(s, STOF_ERR_TYPE);
  TU_MSG_ANY(ctx, "not", "NOT", "!");
  stof_ctx_clear_error(ctx);
  /* a binary kind is not a unary op and vice versa */
  s = stof_te_unary(g, STOF_EXPR_ADD, imm(g, STOF_DTYPE_F32), &out);
  assert_int_equal(s, STOF_ERR_ARG);
  TU_MSG_ANY(ctx, "+", "unary", "ADD");
  stof_ctx_clear_error(ctx);
  s = stof_te_binary(g, STOF_EXPR_EXP, imm(g, STOF_DTYPE_F32), imm(g, STOF_DTYPE_F32), &out);
  assert_int_equal(s, STOF_ERR_ARG);
  TU_MSG_ANY(ctx, "exp", "binary", "EXP");
  stof_ctx_clear_error(ctx);
  stof_graph_free(g);
  tu_ctx_free(ctx, &h);
}

static void select_needs_bool_condition_and_promotes_branches(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  stof_graph *g = NULL;
  TU_OK(ctx, stof_graph_new(ctx, &g));
  const stof_expr *c = tu_bin(g, STOF_EXPR_LT, imm(g, STOF_DTYPE_I32), imm(g, STOF_DTYPE_I32));
  const stof_expr *a = imm(g, STOF_DTYPE_I32), *b = imm(g, STOF_DTYPE_F32);
  const stof_expr *e = tu_sel(g, c, a, b);
  assert_int_equal(e->kind, STOF_EXPR_SELECT);
  assert_int_equal(e->dtype, STOF_DTYPE_F32);
  assert_ptr_equal(e->u.op.c, c);
  assert_int_equal(tu_sel(g, c, imm(g, STOF_DTYPE_F16), imm(g, STOF_DTYPE_BF16))->dtype,
                   STOF_DTYPE_F32);
  const stof_expr *out = NULL;
  stof_status s = stof_te_select(g, imm(g, STOF_DTYPE_F32), a, b, &out);
  assert_int_equal(s, STOF_ERR_TYPE);
  TU_MSG(ctx, "select");
  stof_ctx_clear_error(ctx);
  TU_OK(ctx, stof_te_cast(g, STOF_DTYPE_F16, b, &out));
  assert_int_equal(out->kind, STOF_EXPR_CAST);
  assert_int_equal(out->dtype, STOF_DTYPE_F16);
  assert_ptr_equal(out->u.op.a, b);
  stof_graph_free(g);
  tu_ctx_free(ctx, &h);
}

/* ---------------------------------------------------------------- loads */

static void load_with_wrong_number_of_indices_fails_naming_tensor(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  stof_graph *g = NULL;
  TU_OK(ctx, stof_graph_new(ctx, &g));
  const stof_op *A = tu_ph(g, "Amat", STOF_DTYPE_F32, 2, TU_SHAPE(3, 4));
  const stof_expr *ax[3];
  tu_axes(g, 3, TU_SHAPE(3, 4, 5), ax);
  const stof_expr *out = NULL;
  TU_ERR(ctx, stof_te_load(g, A, 1, ax, &out), STOF_ERR_ARG, "Amat");
  TU_ERR(ctx, stof_te_load(g, A, 3, ax, &out), STOF_ERR_ARG, "Amat");
  const stof_expr *e = tu_load(g, A, 2, ax[0], ax[1]);
  assert_int_equal(e->kind, STOF_EXPR_LOAD);
  assert_int_equal(e->dtype, STOF_DTYPE_F32);
  assert_ptr_equal(e->u.load.tensor, A);
  assert_int_equal(e->u.load.nidx, 2);
  assert_ptr_equal(e->u.load.idx[1], ax[1]);
  stof_graph_free(g);
  tu_ctx_free(ctx, &h);
}

static void load_with_constant_index_out_of_range_fails(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  stof_graph *g = NULL;
  TU_OK(ctx, stof_graph_new(ctx, &g));
  const stof_op *A = tu_ph(g, "Amat", STOF_DTYPE_F32, 2, TU_SHAPE(3, 4));
  const stof_expr *out = NULL;
  const stof_expr *ok_idx[2] = {tu_int(g, 2), tu_int(g, 3)};
  TU_OK(ctx, stof_te_load(g, A, 2, ok_idx, &out));
  const stof_expr *bad0[2] = {tu_int(g, 3), tu_int(g, 0)};
  TU_ERR(ctx, stof_te_load(g, A, 2, bad0, &out), STOF_ERR_RANGE, "Amat");
  const stof_expr *bad1[2] = {tu_int(g, 0), tu_int(g, 4)};
  TU_ERR(ctx, stof_te_load(g, A, 2, bad1, &out), STOF_ERR_RANGE, "Amat");
  const stof_expr *neg[2] = {tu_int(g, -1), tu_int(g, 0)};
  TU_ERR(ctx, stof_te_load(g, A, 2, neg, &out), STOF_ERR_RANGE, "Amat");
  stof_graph_free(g);
  tu_ctx_free(ctx, &h);
}

static void load_with_float_index_fails(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  stof_graph *g = NULL;
  TU_OK(ctx, stof_graph_new(ctx, &g));
  const stof_op *A = tu_ph(g, "Amat", STOF_DTYPE_F32, 2, TU_SHAPE(3, 4));
  const stof_expr *ax[2];
  tu_axes(g, 2, TU_SHAPE(3, 4), ax);
  const stof_expr *idx[2] = {ax[0], tu_f32(g, 1.0)};
  const stof_expr *out = NULL;
  TU_ERR(ctx, stof_te_load(g, A, 2, idx, &out), STOF_ERR_TYPE, "Amat");
  const stof_expr *idx2[2] = {tu_bin(g, STOF_EXPR_ADD, ax[0], tu_f32(g, 0.5)), ax[1]};
  TU_ERR(ctx, stof_te_load(g, A, 2, idx2, &out), STOF_ERR_TYPE, "Amat");
  stof_graph_free(g);
  tu_ctx_free(ctx, &h);
}

/* ---------------------------------------------------------------- computes */

static void compute_with_reduce_not_at_top_fails(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  stof_graph *g = NULL;
  TU_OK(ctx, stof_graph_new(ctx, &g));
  const stof_op *A = tu_ph(g, "A", STOF_DTYPE_F32, 2, TU_SHAPE(3, 4));
  const stof_expr *ax[1];
  tu_axes(g, 1, TU_SHAPE(3), ax);
  const stof_expr *k = tu_raxis(g, 4, "k");
  const stof_expr *sum = tu_reduce(g, STOF_REDUCE_SUM, tu_load(g, A, 2, ax[0], k), 1, k);
  assert_int_equal(sum->kind, STOF_EXPR_REDUCE);
  assert_int_equal(sum->u.reduce.combiner, STOF_REDUCE_SUM);
  assert_int_equal(sum->u.reduce.naxis, 1);
  assert_ptr_equal(sum->u.reduce.axis[0], k->u.var);
  const stof_expr *body = tu_bin(g, STOF_EXPR_ADD, sum, tu_f32(g, 1.0));
  int nop = stof_graph_nop(g);
  const stof_op *out = NULL;
  TU_ERR(ctx, stof_te_compute(g, "Cbad", 1, ax, body, -1, &out), STOF_ERR_ARG, "Cbad");
  assert_int_equal(stof_graph_nop(g), nop);
  /* the same reduce at the top is fine */
  const stof_op *C = tu_compute(g, "Cgood", 1, ax, sum);
  assert_int_equal(C->dtype, STOF_DTYPE_F32);
  assert_int_equal(stof_graph_nop(g), nop + 1);
  stof_graph_free(g);
  tu_ctx_free(ctx, &h);
}

static void compute_whose_body_uses_var_of_another_compute_fails(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  stof_graph *g = NULL;
  TU_OK(ctx, stof_graph_new(ctx, &g));
  const stof_op *A = tu_ph(g, "A", STOF_DTYPE_F32, 1, TU_SHAPE(5));
  const stof_expr *ax1[1], *ax2[1];
  const char *const n1[1] = {"ii"};
  TU_OK(ctx, stof_te_compute_axes(g, 1, TU_SHAPE(5), n1, ax1));
  tu_compute(g, "C1", 1, ax1, tu_load(g, A, 1, ax1[0]));
  tu_axes(g, 1, TU_SHAPE(5), ax2);
  int nop = stof_graph_nop(g);
  const stof_op *out = NULL;
  stof_status s = stof_te_compute(g, "C2", 1, ax2, tu_load(g, A, 1, ax1[0]), -1, &out);
  assert_int_equal(s, STOF_ERR_ARG);
  TU_MSG_ANY(ctx, "C2", "ii");
  stof_ctx_clear_error(ctx);
  assert_int_equal(stof_graph_nop(g), nop);
  stof_graph_free(g);
  tu_ctx_free(ctx, &h);
}

static void compute_using_reduce_axis_outside_a_reduce_fails(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  stof_graph *g = NULL;
  TU_OK(ctx, stof_graph_new(ctx, &g));
  const stof_op *A = tu_ph(g, "A", STOF_DTYPE_F32, 2, TU_SHAPE(3, 4));
  const stof_expr *ax[1];
  tu_axes(g, 1, TU_SHAPE(3), ax);
  const stof_expr *k = tu_raxis(g, 4, "kfree");
  const stof_op *out = NULL;
  stof_status s = stof_te_compute(g, "Cfree", 1, ax, tu_load(g, A, 2, ax[0], k), -1, &out);
  assert_int_equal(s, STOF_ERR_ARG);
  TU_MSG_ANY(ctx, "Cfree", "kfree");
  stof_ctx_clear_error(ctx);
  /* a reduce over a data-parallel axis is refused by the reduce builder or the compute */
  const stof_expr *r = NULL, *pax[1];
  const char *const pname[1] = {"pax"};
  TU_OK(ctx, stof_te_compute_axes(g, 1, TU_SHAPE(3), pname, pax));
  const stof_expr *src = tu_load(g, A, 2, pax[0], tu_int(g, 0));
  s = stof_te_reduce(g, STOF_REDUCE_SUM, src, 1, pax, &r);
  if (s == STOF_OK) s = stof_te_compute(g, "Cax", 1, pax, r, -1, &out);
  assert_int_equal(s, STOF_ERR_ARG);
  TU_MSG_ANY(ctx, "pax", "Cax", "sum"); /* the var, the compute or the operation */
  stof_ctx_clear_error(ctx);
  stof_graph_free(g);
  tu_ctx_free(ctx, &h);
}

static void compute_dtype_argument_casts_the_result(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  stof_graph *g = NULL;
  TU_OK(ctx, stof_graph_new(ctx, &g));
  const stof_op *A = tu_ph(g, "A", STOF_DTYPE_F32, 2, TU_SHAPE(3, 4));
  const stof_expr *ax[2];
  tu_axes(g, 2, TU_SHAPE(3, 4), ax);
  const stof_op *C = NULL;
  TU_OK(ctx, stof_te_compute(g, "Ch", 2, ax, tu_load(g, A, 2, ax[0], ax[1]), STOF_DTYPE_F16, &C));
  assert_int_equal(C->dtype, STOF_DTYPE_F16);
  assert_int_equal(C->ndim, 2);
  assert_int_equal(C->shape[0], 3);
  assert_int_equal(C->shape[1], 4);
  tu_axes(g, 2, TU_SHAPE(3, 4), ax);
  const stof_op *D = tu_compute(g, "D", 2, ax,
                                tu_bin(g, STOF_EXPR_LT, tu_load(g, A, 2, ax[0], ax[1]), tu_f32(g, 0)));
  assert_int_equal(D->dtype, STOF_DTYPE_BOOL);
  stof_graph_free(g);
  tu_ctx_free(ctx, &h);
}

static void placeholder_with_bad_shape_fails(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  stof_graph *g = NULL;
  TU_OK(ctx, stof_graph_new(ctx, &g));
  const stof_op *out = NULL;
  TU_ERR(ctx, stof_te_placeholder(g, 2, TU_SHAPE(3, -2), STOF_DTYPE_F32, "Pbad", &out),
         STOF_ERR_SHAPE, "Pbad");
  TU_ERR(ctx,
         stof_te_placeholder(g, 9, TU_SHAPE(1, 1, 1, 1, 1, 1, 1, 1, 1), STOF_DTYPE_F32, "Pdeep",
                             &out),
         STOF_ERR_SHAPE, "Pdeep");
  assert_int_equal(stof_graph_nop(g), 0);
  const stof_expr *ax[2];
  stof_status s = stof_te_compute_axes(g, 2, TU_SHAPE(2, -7), NULL, ax);
  assert_int_equal(s, STOF_ERR_SHAPE);
  TU_MSG(ctx, "-7");
  stof_ctx_clear_error(ctx);
  stof_graph_free(g);
  tu_ctx_free(ctx, &h);
}

/* ---------------------------------------------------------------- printing */

/* C[i, j] = sum over red_k of lhs_A[i, red_k] * rhs_B[red_k, j] */
static const stof_op *build_matmul(stof_graph *g, const char *a, const char *b, const char *c,
                                   const char *k, int64_t m, int64_t kk, int64_t n,
                                   const stof_op **pa, const stof_op **pb) {
  const stof_op *A = tu_ph(g, a, STOF_DTYPE_F32, 2, TU_SHAPE(m, kk));
  const stof_op *B = tu_ph(g, b, STOF_DTYPE_F32, 2, TU_SHAPE(kk, n));
  const stof_expr *ax[2];
  tu_axes(g, 2, TU_SHAPE(m, n), ax);
  const stof_expr *r = tu_raxis(g, kk, k);
  const stof_expr *body = tu_reduce(
      g, STOF_REDUCE_SUM,
      tu_bin(g, STOF_EXPR_MUL, tu_load(g, A, 2, ax[0], r), tu_load(g, B, 2, r, ax[1])), 1, r);
  if (pa) *pa = A;
  if (pb) *pb = B;
  return tu_compute(g, c, 2, ax, body);
}

static void printer_shows_op_names_sum_and_reduce_axis(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  stof_graph *g = NULL;
  TU_OK(ctx, stof_graph_new(ctx, &g));
  const stof_op *C = build_matmul(g, "lhs_A", "rhs_B", "out_C", "red_k", 4, 5, 6, NULL, NULL);
  char *s = NULL;
  TU_OK(ctx, stof_te_print(g, 1, &C, &s));
  assert_non_null(s);
  const char *want[] = {"lhs_A", "rhs_B", "out_C", "sum", "red_k", "*"};
  for (size_t i = 0; i < sizeof want / sizeof *want; i++)
    if (!strstr(s, want[i])) fail_msg("printed graph lacks \"%s\":\n%s", want[i], s);
  /* ops appear in topological order */
  assert_true(strstr(s, "lhs_A") < strstr(s, "out_C"));
  stof_ctx_dealloc(ctx, s, strlen(s) + 1);
  char *e = NULL;
  TU_OK(ctx, stof_expr_print(ctx, C->body, &e));
  const char *want_e[] = {"lhs_A", "rhs_B", "sum", "red_k"};
  for (size_t i = 0; i < sizeof want_e / sizeof *want_e; i++)
    if (!strstr(e, want_e[i])) fail_msg("printed expr lacks \"%s\": %s", want_e[i], e);
  stof_ctx_dealloc(ctx, e, strlen(e) + 1);
  /* binary and unary operators print their names */
  const stof_expr *x = tu_un(g, STOF_EXPR_TANH,
                             tu_bin(g, STOF_EXPR_SUB, tu_f32(g, 2.5), tu_f32(g, 0.75)));
  TU_OK(ctx, stof_expr_print(ctx, x, &e));
  if (!strstr(e, "tanh") || !strstr(e, "-") || !strstr(e, "2.5") || !strstr(e, "0.75"))
    fail_msg("printed expr: %s", e);
  stof_ctx_dealloc(ctx, e, strlen(e) + 1);
  stof_graph_free(g);
  tu_ctx_free(ctx, &h);
}

/* ---------------------------------------------------------------- hash */

typedef struct hspec {
  int64_t m, k, n;
  stof_dtype dt;
  double scale;
  int same_input;   /* B is A */
  int transpose_b;  /* B[j, k] instead of B[k, j] */
  stof_reduce_kind comb;
  stof_expr_kind op;
} hspec;

static const hspec HBASE = {8, 8, 8, STOF_DTYPE_F32, 0.5, 0, 0, STOF_REDUCE_SUM, STOF_EXPR_MUL};

/* D[i, j] = scale * comb_r(A[i, r] op B[r, j]), names prefixed by p. */
static const stof_op *build_hashed(stof_graph *g, const char *p, hspec s) {
  char na[32], nb[32], nc[32], nd[32], nr[32], ni[32], nj[32];
  snprintf(na, sizeof na, "%sA", p);
  snprintf(nb, sizeof nb, "%sB", p);
  snprintf(nc, sizeof nc, "%sC", p);
  snprintf(nd, sizeof nd, "%sD", p);
  snprintf(nr, sizeof nr, "%sr", p);
  snprintf(ni, sizeof ni, "%si", p);
  snprintf(nj, sizeof nj, "%sj", p);
  const stof_op *A = tu_ph(g, na, s.dt, 2, TU_SHAPE(s.m, s.k));
  const stof_op *B = s.same_input ? A
                     : s.transpose_b ? tu_ph(g, nb, s.dt, 2, TU_SHAPE(s.n, s.k))
                                     : tu_ph(g, nb, s.dt, 2, TU_SHAPE(s.k, s.n));
  const char *const names[2] = {ni, nj};
  const stof_expr *ax[2];
  TU_OK(TU_G(g), stof_te_compute_axes(g, 2, TU_SHAPE(s.m, s.n), names, ax));
  const stof_expr *r = tu_raxis(g, s.k, nr);
  const stof_expr *lb = s.transpose_b ? tu_load(g, B, 2, ax[1], r) : tu_load(g, B, 2, r, ax[1]);
  const stof_expr *body =
      tu_reduce(g, s.comb, tu_bin(g, s.op, tu_load(g, A, 2, ax[0], r), lb), 1, r);
  const stof_op *C = tu_compute(g, nc, 2, ax, body);
  TU_OK(TU_G(g), stof_te_compute_axes(g, 2, TU_SHAPE(s.m, s.n), names, ax));
  const stof_expr *sc = NULL;
  TU_OK(TU_G(g), stof_te_float(g, s.scale, s.dt, &sc));
  return tu_compute(g, nd, 2, ax, tu_bin(g, STOF_EXPR_MUL, tu_load(g, C, 2, ax[0], ax[1]), sc));
}

static uint64_t hash_of(stof_ctx *ctx, const char *p, hspec s) {
  stof_graph *g = NULL;
  TU_OK(ctx, stof_graph_new(ctx, &g));
  const stof_op *D = build_hashed(g, p, s);
  uint64_t hv = 0;
  TU_OK(ctx, stof_te_hash(g, 1, &D, &hv));
  stof_graph_free(g);
  return hv;
}

static void hash_is_equal_for_same_structure_with_other_names_and_graphs(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  uint64_t h1 = hash_of(ctx, "x_", HBASE);
  uint64_t h2 = hash_of(ctx, "other_", HBASE);
  assert_true(h1 == h2);
  /* built twice in one graph */
  stof_graph *g = NULL;
  TU_OK(ctx, stof_graph_new(ctx, &g));
  const stof_op *D1 = build_hashed(g, "p", HBASE);
  const stof_op *D2 = build_hashed(g, "q", HBASE);
  uint64_t a = 0, b = 0, c = 0;
  TU_OK(ctx, stof_te_hash(g, 1, &D1, &a));
  TU_OK(ctx, stof_te_hash(g, 1, &D2, &b));
  assert_true(a == b);
  assert_true(a == h1);
  /* the hash is of what the outputs compute: the intermediate C hashes differently */
  const stof_op *C1 = stof_graph_op(g, D1->id - 1);
  assert_int_equal(C1->kind, STOF_OP_COMPUTE);
  TU_OK(ctx, stof_te_hash(g, 1, &C1, &c));
  assert_true(c != a);
  stof_graph_free(g);
  tu_ctx_free(ctx, &h);
}

static void hash_differs_for_shape_constant_dtype_operation_and_wiring(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  uint64_t base = hash_of(ctx, "", HBASE);
  struct {
    const char *what;
    hspec s;
  } v[9];
  int n = 0;
  v[n].what = "shape n";
  v[n].s = HBASE;
  v[n++].s.n = 9;
  v[n].what = "shape k";
  v[n].s = HBASE;
  v[n++].s.k = 7;
  v[n].what = "constant";
  v[n].s = HBASE;
  v[n++].s.scale = 0.25;
  v[n].what = "dtype";
  v[n].s = HBASE;
  v[n++].s.dt = STOF_DTYPE_F16;
  v[n].what = "combiner";
  v[n].s = HBASE;
  v[n++].s.comb = STOF_REDUCE_MAX;
  v[n].what = "operation";
  v[n].s = HBASE;
  v[n++].s.op = STOF_EXPR_ADD;
  v[n].what = "wiring: one input used twice";
  v[n].s = HBASE;
  v[n++].s.same_input = 1;
  v[n].what = "wiring: transposed index";
  v[n].s = HBASE;
  v[n++].s.transpose_b = 1;
  uint64_t seen[10];
  seen[0] = base;
  for (int i = 0; i < n; i++) {
    uint64_t hv = hash_of(ctx, "", v[i].s);
    for (int j = 0; j <= i; j++)
      if (hv == seen[j]) fail_msg("hash of variant \"%s\" collides with variant %d", v[i].what, j);
    seen[i + 1] = hv;
  }
  tu_ctx_free(ctx, &h);
}

/* ---------------------------------------------------------------- patterns */

typedef struct pgraph {
  stof_graph *g;
  const stof_op *X, *Y, *b, *W;
} pgraph;

static void pgraph_new(stof_ctx *ctx, pgraph *p) {
  TU_OK(ctx, stof_graph_new(ctx, &p->g));
  p->X = tu_ph(p->g, "X", STOF_DTYPE_F32, 2, TU_SHAPE(8, 6));
  p->Y = tu_ph(p->g, "Y", STOF_DTYPE_F32, 2, TU_SHAPE(8, 6));
  p->b = tu_ph(p->g, "bias", STOF_DTYPE_F32, 1, TU_SHAPE(6));
  p->W = tu_ph(p->g, "W", STOF_DTYPE_F32, 2, TU_SHAPE(6, 5));
}

static void check_pattern(const stof_op *op, stof_pattern want, int ci) {
  if (op->pattern != want)
    fail_msg("%s: pattern %s, want %s", op->name, stof_pattern_name(op->pattern),
             stof_pattern_name(want));
  assert_int_equal(!!op->compute_intensive, ci);
}

static void elementwise_add_is_elemwise(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  pgraph p;
  pgraph_new(ctx, &p);
  stof_graph *g = p.g;
  check_pattern(p.X, STOF_PATTERN_INPUT, 0);
  const stof_expr *ax[2];
  tu_axes(g, 2, TU_SHAPE(8, 6), ax);
  const stof_op *E = tu_compute(g, "add", 2, ax,
                                tu_bin(g, STOF_EXPR_ADD, tu_load(g, p.X, 2, ax[0], ax[1]),
                                       tu_load(g, p.Y, 2, ax[0], ax[1])));
  check_pattern(E, STOF_PATTERN_ELEMWISE, 0);
  tu_axes(g, 2, TU_SHAPE(8, 6), ax);
  const stof_op *S = tu_compute(g, "scale_exp", 2, ax,
                                tu_un(g, STOF_EXPR_EXP, tu_bin(g, STOF_EXPR_MUL,
                                      tu_load(g, E, 2, ax[0], ax[1]), tu_f32(g, 2))));
  check_pattern(S, STOF_PATTERN_ELEMWISE, 0);
  stof_graph_free(g);
  tu_ctx_free(ctx, &h);
}

static void bias_add_is_broadcast(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  pgraph p;
  pgraph_new(ctx, &p);
  stof_graph *g = p.g;
  const stof_expr *ax[2];
  tu_axes(g, 2, TU_SHAPE(8, 6), ax);
  const stof_op *E = tu_compute(g, "bias_add", 2, ax,
                                tu_bin(g, STOF_EXPR_ADD, tu_load(g, p.X, 2, ax[0], ax[1]),
                                       tu_load(g, p.b, 1, ax[1])));
  check_pattern(E, STOF_PATTERN_BROADCAST, 0);
  stof_graph_free(g);
  tu_ctx_free(ctx, &h);
}

static void transpose_is_injective(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  pgraph p;
  pgraph_new(ctx, &p);
  stof_graph *g = p.g;
  const stof_expr *ax[2];
  tu_axes(g, 2, TU_SHAPE(6, 8), ax);
  const stof_op *T = tu_compute(g, "transpose", 2, ax, tu_load(g, p.X, 2, ax[1], ax[0]));
  check_pattern(T, STOF_PATTERN_INJECTIVE, 0);
  stof_graph_free(g);
  tu_ctx_free(ctx, &h);
}

static void row_sum_is_reduction_and_not_compute_intensive(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  pgraph p;
  pgraph_new(ctx, &p);
  stof_graph *g = p.g;
  const stof_expr *ax[1];
  tu_axes(g, 1, TU_SHAPE(8), ax);
  const stof_expr *r = tu_raxis(g, 6, "r");
  const stof_op *R = tu_compute(g, "row_sum", 1, ax,
                                tu_reduce(g, STOF_REDUCE_SUM, tu_load(g, p.X, 2, ax[0], r), 1, r));
  check_pattern(R, STOF_PATTERN_REDUCTION, 0);
  stof_graph_free(g);
  tu_ctx_free(ctx, &h);
}

/* RMSNorm's sum of squares multiplies two loads over the reduce axis but is not GEMM-like:
 * both operands are the same row, so it is memory-intensive. */
static void row_sum_of_squares_is_reduction_not_compute_intensive(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  pgraph p;
  pgraph_new(ctx, &p);
  stof_graph *g = p.g;
  const stof_expr *ax[1];
  tu_axes(g, 1, TU_SHAPE(8), ax);
  const stof_expr *r = tu_raxis(g, 6, "r");
  const stof_op *R = tu_compute(
      g, "sum_sq", 1, ax,
      tu_reduce(g, STOF_REDUCE_SUM,
                tu_bin(g, STOF_EXPR_MUL, tu_load(g, p.X, 2, ax[0], r), tu_load(g, p.X, 2, ax[0], r)),
                1, r));
  check_pattern(R, STOF_PATTERN_REDUCTION, 0);
  /* a row-wise dot product of two same-shape tensors is not GEMM-like either */
  tu_axes(g, 1, TU_SHAPE(8), ax);
  r = tu_raxis(g, 6, "r");
  const stof_op *D = tu_compute(
      g, "row_dot", 1, ax,
      tu_reduce(g, STOF_REDUCE_SUM,
                tu_bin(g, STOF_EXPR_MUL, tu_load(g, p.X, 2, ax[0], r), tu_load(g, p.Y, 2, ax[0], r)),
                1, r));
  check_pattern(D, STOF_PATTERN_REDUCTION, 0);
  stof_graph_free(g);
  tu_ctx_free(ctx, &h);
}

static void matmul_is_out_fusable_and_compute_intensive(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  pgraph p;
  pgraph_new(ctx, &p);
  stof_graph *g = p.g;
  const stof_expr *ax[2];
  tu_axes(g, 2, TU_SHAPE(8, 5), ax);
  const stof_expr *r = tu_raxis(g, 6, "k");
  const stof_op *M = tu_compute(
      g, "matmul", 2, ax,
      tu_reduce(g, STOF_REDUCE_SUM,
                tu_bin(g, STOF_EXPR_MUL, tu_load(g, p.X, 2, ax[0], r), tu_load(g, p.W, 2, r, ax[1])),
                1, r));
  check_pattern(M, STOF_PATTERN_OUT_FUSABLE, 1);
  stof_graph_free(g);
  tu_ctx_free(ctx, &h);
}

static void extern_marked_compute_intensive_is_opaque(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  pgraph p;
  pgraph_new(ctx, &p);
  stof_graph *g = p.g;
  const stof_op *ins[2] = {p.X, p.Y};
  const stof_op *E = NULL;
  TU_OK(ctx, stof_te_extern(g, "attn", 2, ins, 2, TU_SHAPE(8, 6), STOF_DTYPE_F32, ext_noop,
                            NULL, NULL, 1, &E));
  assert_int_equal(E->kind, STOF_OP_EXTERN);
  check_pattern(E, STOF_PATTERN_OPAQUE, 1);
  assert_int_equal(E->ninput, 2);
  assert_ptr_equal(E->input[1], p.Y);
  assert_true(E->cpu_fn == ext_noop);
  const stof_op *F = NULL;
  TU_OK(ctx, stof_te_extern(g, "memop", 1, ins, 2, TU_SHAPE(8, 6), STOF_DTYPE_F32, ext_noop,
                            NULL, NULL, 0, &F));
  check_pattern(F, STOF_PATTERN_OPAQUE, 0);
  /* an extern with a bad shape is refused */
  const stof_op *bad = NULL;
  stof_status s;
  s = stof_te_extern(g, "badshape", 1, ins, 2, TU_SHAPE(8, -6), STOF_DTYPE_F32, ext_noop, NULL,
                     NULL, 0, &bad);
  assert_int_equal(s, STOF_ERR_SHAPE);
  TU_MSG(ctx, "badshape");
  stof_ctx_clear_error(ctx);
  stof_graph_free(g);
  tu_ctx_free(ctx, &h);
}

/* ---------------------------------------------------------------- collect */

static void collect_ops(stof_ctx *ctx, stof_graph *g, int nout, const stof_op *const *outs,
                        const int *want, int nwant) {
  const stof_op **ops = NULL;
  int n = -1;
  TU_OK(ctx, stof_graph_collect(g, nout, outs, &ops, &n));
  if (n != nwant) fail_msg("collected %d ops, want %d", n, nwant);
  for (int i = 0; i < n; i++)
    if (ops[i]->id != want[i]) fail_msg("op %d is id %d (%s), want id %d", i, ops[i]->id, ops[i]->name, want[i]);
  stof_ctx_dealloc(ctx, ops, (size_t)n * sizeof *ops);
}

static void collect_returns_reachable_ops_in_topological_order(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  stof_graph *g = NULL;
  TU_OK(ctx, stof_graph_new(ctx, &g));
  const stof_op *A = tu_ph(g, "A", STOF_DTYPE_F32, 1, TU_SHAPE(4));        /* 0 */
  const stof_op *B = tu_ph(g, "B", STOF_DTYPE_F32, 1, TU_SHAPE(4));        /* 1 */
  const stof_expr *ax[1];
  tu_axes(g, 1, TU_SHAPE(4), ax);
  const stof_op *U = tu_compute(g, "unused", 1, ax,                        /* 2 */
                                tu_un(g, STOF_EXPR_NEG, tu_load(g, A, 1, ax[0])));
  tu_axes(g, 1, TU_SHAPE(4), ax);
  const stof_op *C = tu_compute(g, "C", 1, ax,                             /* 3 */
                                tu_bin(g, STOF_EXPR_ADD, tu_load(g, A, 1, ax[0]),
                                       tu_load(g, B, 1, ax[0])));
  const stof_op *Z = tu_ph(g, "Z", STOF_DTYPE_F32, 1, TU_SHAPE(4));        /* 4 */
  tu_axes(g, 1, TU_SHAPE(4), ax);
  const stof_op *E = tu_compute(g, "E", 1, ax,                             /* 5 */
                                tu_bin(g, STOF_EXPR_MUL, tu_load(g, C, 1, ax[0]),
                                       tu_load(g, C, 1, ax[0])));
  const stof_op *ins[2] = {E, Z};
  const stof_op *X = NULL;                                                 /* 6 */
  TU_OK(ctx, stof_te_extern(g, "ext", 2, ins, 1, TU_SHAPE(4), STOF_DTYPE_F32, ext_noop, NULL,
                            NULL, 0, &X));
  assert_int_equal(U->id, 2);
  assert_int_equal(X->id, 6);
  collect_ops(ctx, g, 1, &E, (const int[]){0, 1, 3, 5}, 4);
  collect_ops(ctx, g, 1, &U, (const int[]){0, 2}, 2);
  collect_ops(ctx, g, 1, &A, (const int[]){0}, 1);
  const stof_op *two[2] = {E, U};
  collect_ops(ctx, g, 2, two, (const int[]){0, 1, 2, 3, 5}, 5);
  const stof_op *rev[3] = {U, E, U};
  collect_ops(ctx, g, 3, rev, (const int[]){0, 1, 2, 3, 5}, 5);
  collect_ops(ctx, g, 1, &X, (const int[]){0, 1, 3, 4, 5, 6}, 6);
  stof_graph_free(g);
  tu_ctx_free(ctx, &h);
}

/* Each expression records its depth; the builders refuse one deeper than
 * STOF_TE_MAX_DEPTH (a chain 20,000 deep used to overflow the stack in compute's walk and
 * in every printer), and every kind of builder counts. */
/* A float constant holds its dtype's value (found by fuzz_te: the interpreter kept 1e30 as
 * a double while the generated code's literal is the float 1.0000000150e30, so A + (-1e30)
 * with A = 1e30 gave 1.5e22 in one and 0 in the other); it prints as the shortest text that
 * reads back as that value. */
static void float_constants_hold_their_dtypes_value(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  stof_graph *g;
  TU_OK(ctx, stof_graph_new(ctx, &g));
  const stof_expr *c = tu_f32(g, -1e30), *d;
  assert_true(c->u.fval == (double)(float)-1e30);
  TU_OK(ctx, stof_te_float(g, 1e-5, STOF_DTYPE_F16, &d));
  assert_true(d->u.fval == stof_dtype_round(STOF_DTYPE_F16, 1e-5));
  char *text;
  TU_OK(ctx, stof_expr_print(ctx, tu_f32(g, 1e-5), &text));
  assert_string_equal(text, "1e-05");
  stof_ctx_dealloc(ctx, text, strlen(text) + 1);
  stof_graph_free(g);
  tu_ctx_free(ctx, &h);
}

static void builders_refuse_expressions_nested_too_deep(void **state) {
  (void)state;
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  stof_graph *g = NULL;
  TU_OK(ctx, stof_graph_new(ctx, &g));
  const stof_op *A = tu_ph(g, "A", STOF_DTYPE_F32, 1, TU_SHAPE(4));
  const stof_expr *ax[1];
  tu_axes(g, 1, TU_SHAPE(4), ax);
  const stof_expr *e = tu_load(g, A, 1, ax[0]), *one = tu_f32(g, 1), *next = NULL;
  assert_int_equal(ax[0]->depth, 1);
  assert_int_equal(e->depth, 2);
  int k = 0;
  stof_status st = STOF_OK;
  for (; k < 20000 && !st; k++)
    if (!(st = stof_te_binary(g, STOF_EXPR_ADD, e, one, &next))) e = next;
  assert_int_equal(st, STOF_ERR_UNSUPPORTED);
  TU_MSG(ctx, "expression nested deeper than 10000 levels (build it as several computes)");
  stof_ctx_clear_error(ctx);
  assert_int_equal(e->depth, STOF_TE_MAX_DEPTH);
  assert_int_equal(k, STOF_TE_MAX_DEPTH - 2 + 1);
  /* the other builders refuse too; the graph gains nothing */
  int nop = stof_graph_nop(g);
  const stof_expr *r = NULL, *ra = NULL;
  TU_ERR(ctx, stof_te_unary(g, STOF_EXPR_NEG, e, &r), STOF_ERR_UNSUPPORTED, "nested deeper than 10000");
  TU_ERR(ctx, stof_te_cast(g, STOF_DTYPE_F64, e, &r), STOF_ERR_UNSUPPORTED, "nested deeper than 10000");
  TU_ERR(ctx, stof_te_select(g, tu_bin(g, STOF_EXPR_LT, ax[0], tu_int(g, 2)), e, one, &r), STOF_ERR_UNSUPPORTED,
         "nested deeper than 10000");
  TU_OK(ctx, stof_te_reduce_axis(g, 4, "r", &ra));
  const stof_expr *deep_i = ax[0];
  for (int d = 1; d < STOF_TE_MAX_DEPTH; d++) deep_i = tu_bin(g, STOF_EXPR_MUL, deep_i, tu_int(g, 1));
  TU_ERR(ctx, stof_te_load(g, A, 1, &deep_i, &r), STOF_ERR_UNSUPPORTED, "nested deeper than 10000");
  TU_ERR(ctx, stof_te_reduce(g, STOF_REDUCE_SUM, e, 1, &ra, &r), STOF_ERR_UNSUPPORTED, "nested deeper than 10000");
  assert_int_equal(stof_graph_nop(g), nop);
  /* the deepest allowed expression computes, prints and hashes */
  const stof_op *B = NULL;
  TU_OK(ctx, stof_te_compute(g, "B", 1, ax, e, -1, &B));
  char *text = NULL;
  TU_OK(ctx, stof_te_print(g, 1, &B, &text));
  stof_ctx_dealloc(ctx, text, strlen(text) + 1);
  uint64_t hash;
  TU_OK(ctx, stof_te_hash(g, 1, &B, &hash));
  stof_tensor *x = NULL, *y = NULL;
  TU_OK(ctx, stof_tensor_rand(ctx, STOF_DTYPE_F32, 1, TU_SHAPE(4), 1, &x));
  TU_OK(ctx, stof_interp_eval(g, 1, &B, 1, &A, (const stof_tensor *const *)&x, &y));
  double a0, b0;
  TU_OK(ctx, stof_tensor_get(x, TU_SHAPE(0), &a0));
  TU_OK(ctx, stof_tensor_get(y, TU_SHAPE(0), &b0));
  assert_true(fabs(b0 - (a0 + (STOF_TE_MAX_DEPTH - 2))) < 1e-2);
  stof_graph *copy = NULL;
  TU_OK(ctx, stof_graph_extract(g, 1, &B, &copy, NULL));
  assert_int_equal(stof_graph_op(copy, 1)->body->depth, STOF_TE_MAX_DEPTH);
  stof_graph_free(copy);
  stof_tensor_free(x);
  stof_tensor_free(y);
  stof_graph_free(g);
  tu_ctx_free(ctx, &h);
}

int run_te_tests(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(kind_names_follow_x_macros),
      cmocka_unit_test(graph_numbers_ops_in_creation_order),
      cmocka_unit_test(binary_promotes_types),
      cmocka_unit_test(comparisons_give_bool_and_logic_takes_bools),
      cmocka_unit_test(unary_keeps_or_converts_dtype_and_not_takes_bool),
      cmocka_unit_test(select_needs_bool_condition_and_promotes_branches),
      cmocka_unit_test(load_with_wrong_number_of_indices_fails_naming_tensor),
      cmocka_unit_test(load_with_constant_index_out_of_range_fails),
      cmocka_unit_test(load_with_float_index_fails),
      cmocka_unit_test(compute_with_reduce_not_at_top_fails),
      cmocka_unit_test(compute_whose_body_uses_var_of_another_compute_fails),
      cmocka_unit_test(compute_using_reduce_axis_outside_a_reduce_fails),
      cmocka_unit_test(compute_dtype_argument_casts_the_result),
      cmocka_unit_test(placeholder_with_bad_shape_fails),
      cmocka_unit_test(printer_shows_op_names_sum_and_reduce_axis),
      cmocka_unit_test(hash_is_equal_for_same_structure_with_other_names_and_graphs),
      cmocka_unit_test(hash_differs_for_shape_constant_dtype_operation_and_wiring),
      cmocka_unit_test(elementwise_add_is_elemwise),
      cmocka_unit_test(bias_add_is_broadcast),
      cmocka_unit_test(transpose_is_injective),
      cmocka_unit_test(row_sum_is_reduction_and_not_compute_intensive),
      cmocka_unit_test(row_sum_of_squares_is_reduction_not_compute_intensive),
      cmocka_unit_test(matmul_is_out_fusable_and_compute_intensive),
      cmocka_unit_test(extern_marked_compute_intensive_is_opaque),
      cmocka_unit_test(collect_returns_reachable_ops_in_topological_order),
      cmocka_unit_test(builders_refuse_expressions_nested_too_deep),
      cmocka_unit_test(float_constants_hold_their_dtypes_value),
  };
  return cmocka_run_group_tests_name("te", tests, NULL, NULL);
}
