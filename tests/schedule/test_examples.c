/* Worked examples of the block primitives together: softmax and layer norm with their
 * reductions computed per row of the output; a matmul with its operands cached in
 * "shared" per k-tile and its accumulator in "local" per output tile; a GEMM + bias +
 * GELU whose epilogue is folded into the write-back of the accumulator. Each: golden
 * nest, numbers against the interpreter, trace round trip. */
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

static void softmax_per_row(void **state) {
  sh_graph G;
  sh_softmax(&G, 8, 10);
  stof_sched *s = sh_sched(&G);
  int l[4];
  sh_loops(s, sh_block(s, "P"), l);
  SH_OK(G.ctx, stof_sched_compute_at(s, sh_block(s, "sm"), l[0]));
  SH_OK(G.ctx, stof_sched_compute_at(s, sh_block(s, "e"), l[0]));
  SH_OK(G.ctx, stof_sched_compute_at(s, sh_block(s, "mx"), l[0]));
  SH_OK(G.ctx, stof_sched_parallel(s, l[0]));
  sh_check_all(&G, s,
               "alloc mx: float32[1] at i\n"
               "alloc e: float32[1, 10] at i\n"
               "alloc sm: float32[1] at i\n"
               "for i in 0..8 [parallel]:\n"
               "  mx[i] = -inf\n"
               "  for r in 0..10:\n"
               "    mx[i] = max(mx[i], X[i, r])\n"
               "  for j in 0..10:\n"
               "    e[i, j] = exp((X[i, j] - mx[i]))\n"
               "  sm[i] = 0.0\n"
               "  for c in 0..10:\n"
               "    sm[i] = sm[i] + e[i, c]\n"
               "  for j in 0..10:\n"
               "    P[i, j] = e[i, j] / sm[i]\n");
  stof_sched_free(s);
  sh_done(&G);
}

static void layernorm_per_row(void **state) {
  sh_graph G;
  sh_layernorm(&G, 6, 16);
  stof_sched *s = sh_sched(&G);
  int l[4], p[2];
  sh_loops(s, sh_block(s, "Y"), l);
  SH_OK(G.ctx, stof_sched_compute_at(s, sh_block(s, "var"), l[0]));
  SH_OK(G.ctx, stof_sched_compute_at(s, sh_block(s, "mean"), l[0]));
  sh_split(s, l[1], 4, p);
  SH_OK(G.ctx, stof_sched_vectorize(s, p[1]));
  sh_check_all(&G, s,
               "alloc mean: float32[1] at i\n"
               "alloc var: float32[1] at i\n"
               "for i in 0..6:\n"
               "  mean[i] = 0.0\n"
               "  for r in 0..16:\n"
               "    mean[i] = mean[i] + (X[i, r] * 0.0625)\n"
               "  var[i] = 0.0\n"
               "  for c in 0..16:\n"
               "    var[i] = var[i] + (((X[i, c] - mean[i]) * (X[i, c] - mean[i])) * 0.0625)\n"
               "  for j.outer in 0..4:\n"
               "    for j.inner in 0..4 [vectorized]:\n"
               "      let j = j.outer * 4 + j.inner\n"
               "      Y[i, j] = (((X[i, j] - mean[i]) * rsqrt((var[i] + 1e-05))) * gamma[j]) + beta[j]\n");
  stof_sched_free(s);
  sh_done(&G);
}

static void matmul_shared_and_local(void **state) {
  sh_graph G;
  sh_matmul(&G, 20, 24, 16);
  stof_sched *s = sh_sched(&G);
  int bc = sh_block(s, "C"), l[4], t[4], k[2], as, bs, cw;
  sh_loops(s, bc, l);
  SH_OK(G.ctx, stof_sched_tile(s, l[0], l[1], stof_factor_const(8), stof_factor_const(8), t));
  sh_split(s, l[2], 4, k);
  int order[6] = {t[0], t[1], k[0], t[2], k[1], t[3]};
  SH_OK(G.ctx, stof_sched_reorder(s, 6, order));
  SH_OK(G.ctx, stof_sched_cache_read(s, bc, 0, "shared", &as));
  SH_OK(G.ctx, stof_sched_cache_read(s, bc, 1, "shared", &bs));
  SH_OK(G.ctx, stof_sched_compute_at(s, as, k[0]));
  SH_OK(G.ctx, stof_sched_compute_at(s, bs, k[0]));
  SH_OK(G.ctx, stof_sched_cache_write(s, bc, "local", &cw));
  SH_OK(G.ctx, stof_sched_reverse_compute_at(s, cw, t[1]));
  SH_OK(G.ctx, stof_sched_vectorize(s, t[3]));
  sh_check_all(&G, s,
               "alloc C.local: float32[8, 8] local at j.outer\n"
               "alloc A.shared: float32[8, 4] shared at k.outer\n"
               "alloc B.shared: float32[4, 8] shared at k.outer\n"
               "for i.outer in 0..3:\n"
               "  for j.outer in 0..3:\n"
               "    for i.inner in 0..8:\n"
               "      let i = i.outer * 8 + i.inner\n"
               "      if i < 20:\n"
               "        for j.inner in 0..8 [vectorized]:\n"
               "          let j = j.outer * 8 + j.inner\n"
               "          C.local[i, j] = 0.0\n"
               "    for k.outer in 0..4:\n"
               "      for ax0 in 0..8:\n"
               "        let v0 = i.outer * 8 + ax0\n"
               "        if v0 < 20:\n"
               "          for ax1 in 0..4:\n"
               "            let v1 = k.outer * 4 + ax1\n"
               "            A.shared[v0, v1] = A[v0, v1]\n"
               "      for ax0 in 0..4:\n"
               "        let v0 = k.outer * 4 + ax0\n"
               "        for ax1 in 0..8:\n"
               "          let v1 = j.outer * 8 + ax1\n"
               "          B.shared[v0, v1] = B[v0, v1]\n"
               "      for i.inner in 0..8:\n"
               "        let i = i.outer * 8 + i.inner\n"
               "        if i < 20:\n"
               "          for k.inner in 0..4:\n"
               "            let k = k.outer * 4 + k.inner\n"
               "            for j.inner in 0..8 [vectorized]:\n"
               "              let j = j.outer * 8 + j.inner\n"
               "              C.local[i, j] = C.local[i, j] + (A.shared[i, k] * B.shared[k, j])\n"
               "    for ax0 in 0..8:\n"
               "      let v0 = i.outer * 8 + ax0\n"
               "      if v0 < 20:\n"
               "        for ax1 in 0..8:\n"
               "          let v1 = j.outer * 8 + ax1\n"
               "          C[v0, v1] = C.local[v0, v1]\n");
  stof_sched_free(s);
  sh_done(&G);
}

/* GEMM + bias + GELU: the accumulator in "local" per tile, and the epilogue folded into
 * its write-back (reverse_compute_inline twice), so C, D and E never exist in memory. */
static void gemm_bias_gelu_epilogue(void **state) {
  sh_graph G;
  sh_gemm_bias_gelu(&G, 12, 10, 6);
  stof_sched *s = sh_sched(&G);
  int bc = sh_block(s, "C"), bd = sh_block(s, "D"), be = sh_block(s, "E"), l[4], t[4], cw;
  sh_loops(s, bc, l);
  SH_OK(G.ctx, stof_sched_tile(s, l[0], l[1], stof_factor_const(4), stof_factor_const(5), t));
  SH_OK(G.ctx, stof_sched_cache_write(s, bc, "local", &cw));
  SH_OK(G.ctx, stof_sched_reverse_compute_inline(s, be));
  SH_OK(G.ctx, stof_sched_reverse_compute_inline(s, bd));
  SH_OK(G.ctx, stof_sched_reverse_compute_at(s, cw, t[1]));
  sh_check_all(&G, s,
               "alloc C.local: float32[4, 5] local at j.outer\n"
               "for i.outer in 0..3:\n"
               "  for j.outer in 0..2:\n"
               "    for i.inner in 0..4:\n"
               "      let i = i.outer * 4 + i.inner\n"
               "      for j.inner in 0..5:\n"
               "        let j = j.outer * 5 + j.inner\n"
               "        C.local[i, j] = 0.0\n"
               "        for k in 0..6:\n"
               "          C.local[i, j] = C.local[i, j] + (A[i, k] * W[k, j])\n"
               "    for ax0 in 0..4:\n"
               "      let v0 = i.outer * 4 + ax0\n"
               "      for ax1 in 0..5:\n"
               "        let v1 = j.outer * 5 + ax1\n"
               "        E[v0, v1] = ((C.local[v0, v1] + bias[v1]) * 0.5) * (1.0 + erf(((C.local[v0, v1] + "
               "bias[v1]) * 0.70710677)))\n");
  stof_sched_free(s);
  sh_done(&G);
}

int run_examples_tests(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(softmax_per_row),
      cmocka_unit_test(layernorm_per_row),
      cmocka_unit_test(matmul_shared_and_local),
      cmocka_unit_test(gemm_bias_gelu_epilogue),
  };
  return cmocka_run_group_tests_name("examples", tests, NULL, NULL);
}
