/* Traces: the Lua and JSON forms of every instruction kind (golden texts), the JSON reader's
 * checks, replays that fail (the schedule stays as it was), and long traces. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

/* A schedule of matmul + bias + ReLU that uses every instruction kind. */
static stof_sched *every_kind(sh_graph *G) {
  sh_matmul_bias_relu(G, 12, 10, 6);
  stof_sched *s = sh_sched(G);
  stof_ctx *ctx = G->ctx;
  int bc = sh_block(s, "C"), l[4], p[2], t[4], f, k, v, g;
  sh_loops(s, bc, l);
  int64_t cand[3] = {2, 4, 8}, vc[2] = {1, 2};
  double probs[2] = {0.25, 0.75};
  SH_OK(ctx, stof_sched_knob(s, "tile", 3, cand, 1, &k));
  SH_OK(ctx, stof_sched_sample_categorical(s, "pick", 2, vc, probs, 1, &v));
  SH_OK(ctx, stof_sched_tile(s, l[0], l[1], stof_factor_knob(k), stof_factor_const(5), t));
  stof_factor fs[2] = {stof_factor_const(STOF_INFER), stof_factor_knob(v)};
  SH_OK(ctx, stof_sched_split(s, l[2], 2, fs, p));
  int fo[2] = {t[0], t[1]};
  SH_OK(ctx, stof_sched_fuse(s, 2, fo, &f));
  SH_OK(ctx, stof_sched_bind(s, f, "blockIdx.x"));
  SH_OK(ctx, stof_sched_vectorize(s, t[3]));
  SH_OK(ctx, stof_sched_unroll(s, p[1]));
  int be = sh_block(s, "E"), le[4];
  sh_loops(s, be, le);
  SH_OK(ctx, stof_sched_parallel(s, le[0]));
  SH_OK(ctx, stof_sched_annotate_loop(s, le[1], "note", "a \"quoted\"\nvalue"));
  SH_OK(ctx, stof_sched_annotate_block(s, be, "stage", "out"));
  const stof_op *de[2] = {sh_op(G, "D"), sh_op(G, "E")};
  SH_OK(ctx, stof_sched_group(s, 2, de, &g));
  SH_OK(ctx, stof_sched_ungroup(s, g));
  const stof_op *cde[3] = {sh_op(G, "C"), sh_op(G, "D"), sh_op(G, "E")};
  SH_OK(ctx, stof_sched_group(s, 3, cde, &g));
  return s;
}

static const char golden_lua[] =
    "-- stof schedule trace: load(text)()(stof.schedule(outputs), stof) rebuilds it\n"
    "return function(s, stof)\n"
    "  local b0 = s:get_block(\"C\")\n"
    "  local l1, l2, l3 = table.unpack(s:get_loops(b0))\n"
    "  local k4 = s:knob(\"tile\", {2, 4, 8}, 1)\n"
    "  local k5 = s:sample_categorical(\"pick\", {1, 2}, {0.25, 0.75}, 1)\n"
    "  local l6, l7 = s:split(l1, {stof.INFER, k4})\n"
    "  local l8, l9 = s:split(l2, {stof.INFER, 5})\n"
    "  s:reorder(l6, l8, l7, l9)\n"
    "  local l10, l11 = s:split(l3, {stof.INFER, k5})\n"
    "  local l12 = s:fuse(l6, l8)\n"
    "  s:bind(l12, \"blockIdx.x\")\n"
    "  s:vectorize(l9)\n"
    "  s:unroll(l11)\n"
    "  local b13 = s:get_block(\"E\")\n"
    "  local l14, l15 = table.unpack(s:get_loops(b13))\n"
    "  s:parallel(l14)\n"
    "  s:annotate(l15, \"note\", \"a \\\"quoted\\\"\\nvalue\")\n"
    "  s:annotate(b13, \"stage\", \"out\")\n"
    "  local g16 = s:group({\"D\", \"E\"})\n"
    "  s:ungroup(g16)\n"
    "  local g17 = s:group({\"C\", \"D\", \"E\"})\n"
    "end\n";

static const char golden_json[] =
    "{\"format\":\"stof.trace\",\"version\":1,\"insts\":["
    "{\"kind\":\"GetBlock\",\"name\":\"C\",\"outputs\":[0]},"
    "{\"kind\":\"GetLoops\",\"block\":0,\"outputs\":[1,2,3]},"
    "{\"kind\":\"Knob\",\"name\":\"tile\",\"candidates\":[2,4,8],\"decision\":1,\"outputs\":[4]},"
    "{\"kind\":\"SampleCategorical\",\"name\":\"pick\",\"candidates\":[1,2],\"probs\":[0.25,0.75],"
    "\"decision\":1,\"outputs\":[5]},"
    "{\"kind\":\"Split\",\"loop\":1,\"factors\":[-1,{\"knob\":4}],\"outputs\":[6,7]},"
    "{\"kind\":\"Split\",\"loop\":2,\"factors\":[-1,5],\"outputs\":[8,9]},"
    "{\"kind\":\"Reorder\",\"loops\":[6,8,7,9]},"
    "{\"kind\":\"Split\",\"loop\":3,\"factors\":[-1,{\"knob\":5}],\"outputs\":[10,11]},"
    "{\"kind\":\"Fuse\",\"loops\":[6,8],\"outputs\":[12]},"
    "{\"kind\":\"Bind\",\"loop\":12,\"tag\":\"blockIdx.x\"},"
    "{\"kind\":\"Vectorize\",\"loop\":9},"
    "{\"kind\":\"Unroll\",\"loop\":11},"
    "{\"kind\":\"GetBlock\",\"name\":\"E\",\"outputs\":[13]},"
    "{\"kind\":\"GetLoops\",\"block\":13,\"outputs\":[14,15]},"
    "{\"kind\":\"Parallel\",\"loop\":14},"
    "{\"kind\":\"Annotate\",\"target\":15,\"key\":\"note\",\"value\":\"a \\\"quoted\\\"\\nvalue\"},"
    "{\"kind\":\"Annotate\",\"target\":13,\"key\":\"stage\",\"value\":\"out\"},"
    "{\"kind\":\"Group\",\"ops\":[\"D\",\"E\"],\"outputs\":[16]},"
    "{\"kind\":\"Ungroup\",\"group\":16},"
    "{\"kind\":\"Group\",\"ops\":[\"C\",\"D\",\"E\"],\"outputs\":[17]}]}";

/* A schedule of GEMM + bias + GELU that uses every kind that places blocks. */
static stof_sched *block_kinds(sh_graph *G) {
  sh_gemm_bias_gelu(G, 12, 10, 8);
  stof_sched *s = sh_sched(G);
  stof_ctx *ctx = G->ctx;
  int bc = sh_block(s, "C"), l[4], k[2], rf, as, cw, lc[4];
  sh_loops(s, bc, l);
  sh_split(s, l[2], 4, k);
  SH_OK(ctx, stof_sched_rfactor(s, k[1], 1, &rf));
  SH_OK(ctx, stof_sched_cache_read(s, rf, 0, "shared", &as));
  SH_OK(ctx, stof_sched_compute_at(s, as, k[0]));
  SH_OK(ctx, stof_sched_cache_write(s, bc, "local", &cw));
  SH_OK(ctx, stof_sched_compute_inline(s, sh_block(s, "D")));
  SH_OK(ctx, stof_sched_reverse_compute_inline(s, sh_block(s, "E")));
  sh_loops(s, bc, lc);
  SH_OK(ctx, stof_sched_reverse_compute_at(s, cw, lc[0]));
  return s;
}

static const char golden_block_lua[] =
    "-- stof schedule trace: load(text)()(stof.schedule(outputs), stof) rebuilds it\n"
    "return function(s, stof)\n"
    "  local b0 = s:get_block(\"C\")\n"
    "  local l1, l2, l3 = table.unpack(s:get_loops(b0))\n"
    "  local l4, l5 = s:split(l3, {stof.INFER, 4})\n"
    "  local b6 = s:rfactor(l5, 1)\n"
    "  local b7 = s:cache_read(b6, 0, \"shared\")\n"
    "  s:compute_at(b7, l4)\n"
    "  local b8 = s:cache_write(b0, \"local\")\n"
    "  local b9 = s:get_block(\"D\")\n"
    "  s:compute_inline(b9)\n"
    "  local b10 = s:get_block(\"E\")\n"
    "  s:reverse_compute_inline(b10)\n"
    "  local l11, l12, l13 = table.unpack(s:get_loops(b0))\n"
    "  s:reverse_compute_at(b8, l11)\n"
    "end\n";
static const char golden_block_json[] =
    "{\"format\":\"stof.trace\",\"version\":1,\"insts\":[{\"kind\":\"GetBlock\",\"name\":\"C\",\"outputs\":[0]},"
    "{\"kind\":\"GetLoops\",\"block\":0,\"outputs\":[1,2,3]},"
    "{\"kind\":\"Split\",\"loop\":3,\"factors\":[-1,4],\"outputs\":[4,5]},"
    "{\"kind\":\"RFactor\",\"loop\":5,\"factor_axis\":1,\"outputs\":[6]},"
    "{\"kind\":\"CacheRead\",\"block\":6,\"index\":0,\"scope\":\"shared\",\"outputs\":[7]},"
    "{\"kind\":\"ComputeAt\",\"block\":7,\"loop\":4},"
    "{\"kind\":\"CacheWrite\",\"block\":0,\"scope\":\"local\",\"outputs\":[8]},"
    "{\"kind\":\"GetBlock\",\"name\":\"D\",\"outputs\":[9]},"
    "{\"kind\":\"ComputeInline\",\"block\":9},"
    "{\"kind\":\"GetBlock\",\"name\":\"E\",\"outputs\":[10]},"
    "{\"kind\":\"ReverseComputeInline\",\"block\":10},"
    "{\"kind\":\"GetLoops\",\"block\":0,\"outputs\":[11,12,13]},"
    "{\"kind\":\"ReverseComputeAt\",\"block\":8,\"loop\":11}]}";
static const char golden_block_nest[] =
    "alloc C.local: float32[1, 10] local at i\n"
    "alloc C.rf: float32[12, 4, 10]\n"
    "alloc A.shared: float32[1, 4] shared at k.outer\n"
    "for i in 0..12:\n"
    "  for j in 0..10:\n"
    "    for k.inner in 0..4:\n"
    "      C.rf[i, k.inner, j] = 0.0\n"
    "    for k.outer in 0..2:\n"
    "      let v0 = i\n"
    "      for ax1 in 0..4:\n"
    "        let v1 = k.outer * 4 + ax1\n"
    "        A.shared[v0, v1] = A[v0, v1]\n"
    "      for k.inner in 0..4:\n"
    "        let k = k.outer * 4 + k.inner\n"
    "        C.rf[i, k.inner, j] = C.rf[i, k.inner, j] + (A.shared[i, k] * W[k, j])\n"
    "for i in 0..12:\n"
    "  for j in 0..10:\n"
    "    C.local[i, j] = 0.0\n"
    "    for k.inner in 0..4:\n"
    "      C.local[i, j] = C.local[i, j] + C.rf[i, k.inner, j]\n"
    "  let v0 = i\n"
    "  for v1 in 0..10:\n"
    "    E[v0, v1] = ((C.local[v0, v1] + bias[v1]) * 0.5) * (1.0 + erf(((C.local[v0, v1] + bias[v1]) * 0.70710677)))\n";

/* A float16 matmul with its inner 16 x 8 x 16 nest tensorized: the Tensorize kind. */
static stof_sched *tensorized(sh_graph *G) {
  sh_matmul_f16(G, 32, 16, 32, STOF_DTYPE_F16);
  stof_sched *s = sh_sched(G);
  int l[3], i[2], j[2], k[2];
  sh_loops(s, sh_block(s, "C"), l);
  sh_split(s, l[0], 16, i);
  sh_split(s, l[1], 8, j);
  sh_split(s, l[2], 16, k);
  int order[6] = {i[0], j[0], k[0], i[1], j[1], k[1]};
  SH_OK(G->ctx, stof_sched_reorder(s, 6, order));
  SH_OK(G->ctx, stof_sched_tensorize(s, i[1], "mma_m16n8k16"));
  return s;
}

static void trace_texts_of_block_kinds(void **state) {
  sh_graph G;
  stof_sched *s = block_kinds(&G);
  char *lua = sh_trace_lua(s);
  assert_string_equal(lua, golden_block_lua);
  free(lua);
  stof_trace *t;
  char *json;
  SH_OK(G.ctx, stof_sched_trace(s, &t));
  SH_OK(G.ctx, stof_trace_to_json(t, &json));
  assert_string_equal(json, golden_block_json);
  stof_ctx_dealloc(G.ctx, json, strlen(json) + 1);
  stof_trace_free(t);
  sh_check_all(&G, s, golden_block_nest);
  stof_sched_free(s);
  sh_done(&G);
}

/* A chain B, C of 24 whose C is tiled by sample_perfect_tile and B computed at a sampled
 * location: the sample_* kinds. */
static stof_sched *sampled(sh_graph *G) {
  sh_chain(G, 24);
  stof_sched *s = sh_sched(G);
  stof_ctx *ctx = G->ctx;
  int bb = sh_block(s, "B"), l[1], kn[2], p[2], loc;
  sh_loops(s, sh_block(s, "C"), l);
  int64_t d[2] = {3, 8};
  SH_OK(ctx, stof_sched_sample_perfect_tile(s, l[0], 2, 8, d, NULL, kn));
  stof_factor f[2] = {stof_factor_knob(kn[0]), stof_factor_knob(kn[1])};
  SH_OK(ctx, stof_sched_split(s, l[0], 2, f, p));
  SH_OK(ctx, stof_sched_sample_compute_location(s, bb, 1, NULL, &loc));
  SH_OK(ctx, stof_sched_compute_at_knob(s, bb, loc));
  return s;
}

static void trace_round_trip_of_sampled(void **state) {
  sh_graph G;
  stof_sched *s = sampled(&G);
  sh_check_numeric(&G, s);
  sh_round_trip(&G, s);
  stof_sched_free(s);
  sh_done(&G);
}

static void trace_texts_of_every_kind(void **state) {
  sh_graph G;
  stof_sched *s = every_kind(&G);
  char *lua = sh_trace_lua(s);
  assert_string_equal(lua, golden_lua);
  free(lua);
  stof_trace *t;
  char *json;
  SH_OK(G.ctx, stof_sched_trace(s, &t));
  SH_OK(G.ctx, stof_trace_to_json(t, &json));
  assert_string_equal(json, golden_json);
  stof_ctx_dealloc(G.ctx, json, strlen(json) + 1);
  /* every kind appears here, in block_kinds, in tensorized or in sampled */
  int seen[STOF_INST_COUNT] = {0};
  for (int i = 0; i < stof_trace_ninst(t); i++) seen[stof_trace_inst_kind(t, i)]++;
  stof_sched *(*const others[])(sh_graph *) = {block_kinds, tensorized, sampled};
  for (size_t o = 0; o < sizeof others / sizeof *others; o++) {
    sh_graph G2;
    stof_sched *s2 = others[o](&G2);
    stof_trace *t2;
    SH_OK(G2.ctx, stof_sched_trace(s2, &t2));
    for (int i = 0; i < stof_trace_ninst(t2); i++) seen[stof_trace_inst_kind(t2, i)]++;
    stof_trace_free(t2);
    stof_sched_free(s2);
    sh_done(&G2);
  }
  for (int k = 0; k < STOF_INST_COUNT; k++)
    if (!seen[k]) fail_msg("no %s instruction", stof_inst_kind_name((stof_inst_kind)k));
  assert_int_equal(stof_trace_inst_kind(t, -1), STOF_INST_COUNT);
  stof_trace_free(t);
  sh_check_numeric(&G, s);
  sh_round_trip(&G, s);
  stof_sched_free(s);
  sh_done(&G);
}

static void json_reader_checks(void **state) {
  stof_ctx *ctx = sh_ctx();
  static const struct {
    const char *text, *msg;
  } cases[] = {
      {"{", "trace: JSON error at line 1"},
      {"[]", "not a stof trace"},
      {"{\"format\":\"x\",\"version\":1,\"insts\":[]}", "not a stof trace"},
      {"{\"format\":\"stof.trace\",\"version\":2,\"insts\":[]}", "unsupported version"},
      {"{\"format\":\"stof.trace\",\"version\":1,\"insts\":{}}", "insts must be an array"},
      {"{\"format\":\"stof.trace\",\"version\":1,\"insts\":[{\"kind\":\"Frob\"}]}",
       "instruction 0 (Frob): unknown kind"},
      {"{\"format\":\"stof.trace\",\"version\":1,\"insts\":[3]}", "not an object with a kind"},
      {"{\"format\":\"stof.trace\",\"version\":1,\"insts\":[{\"kind\":\"GetLoops\",\"block\":0,\"outputs\":[0]}]}",
       "instruction 0 (GetLoops): block names a value not defined yet"},
      {"{\"format\":\"stof.trace\",\"version\":1,\"insts\":[{\"kind\":\"GetBlock\",\"name\":\"C\",\"outputs\":[3]}]}",
       "outputs must number the next values in order"},
      {"{\"format\":\"stof.trace\",\"version\":1,\"insts\":[{\"kind\":\"GetBlock\",\"name\":\"C\",\"outputs\":[0]},"
       "{\"kind\":\"Split\",\"loop\":0,\"factors\":[-1,4],\"outputs\":[1,2]}]}",
       "instruction 1 (Split): loop must be a loop value"},
      {"{\"format\":\"stof.trace\",\"version\":1,\"insts\":[{\"kind\":\"Knob\",\"name\":\"t\",\"candidates\":[1,2],"
       "\"decision\":2,\"outputs\":[0]}]}",
       "decision must index the candidates"},
      {"{\"format\":\"stof.trace\",\"version\":1,\"insts\":[{\"kind\":\"GetBlock\",\"name\":\"C\",\"outputs\":[0]},"
       "{\"kind\":\"GetLoops\",\"block\":0,\"outputs\":[1]},{\"kind\":\"Split\",\"loop\":1,\"factors\":[-1,\"x\"],"
       "\"outputs\":[2,3]}]}",
       "factors: each is an integer or {\"knob\": value}"},
      {"{\"format\":\"stof.trace\",\"version\":1,\"insts\":[{\"kind\":\"GetBlock\",\"outputs\":[0]}]}",
       "name must be a string"},
      {"{\"format\":\"stof.trace\",\"version\":1,\"insts\":[{\"kind\":\"Vectorize\",\"loop\":0,\"outputs\":[0]}]}",
       "loop names a value not defined yet"},
      {"{\"format\":\"stof.trace\",\"version\":1,\"insts\":[{\"kind\":\"ComputeAt\",\"block\":0,\"loop\":1}]}",
       "instruction 0 (ComputeAt): block names a value not defined yet"},
      {"{\"format\":\"stof.trace\",\"version\":1,\"insts\":[{\"kind\":\"GetBlock\",\"name\":\"C\",\"outputs\":[0]},"
       "{\"kind\":\"CacheRead\",\"block\":0,\"scope\":\"shared\",\"outputs\":[1]}]}",
       "instruction 1 (CacheRead): index must be an integer >= 0"},
      {"{\"format\":\"stof.trace\",\"version\":1,\"insts\":[{\"kind\":\"GetBlock\",\"name\":\"C\",\"outputs\":[0]},"
       "{\"kind\":\"CacheWrite\",\"block\":0,\"scope\":\"local\"}]}",
       "instruction 1 (CacheWrite): outputs: wrong number of values"},
      {"{\"format\":\"stof.trace\",\"version\":1,\"insts\":[{\"kind\":\"GetBlock\",\"name\":\"C\",\"outputs\":[0]},"
       "{\"kind\":\"RFactor\",\"loop\":0,\"factor_axis\":0,\"outputs\":[1]}]}",
       "instruction 1 (RFactor): loop must be a loop value"},
      {"{\"format\":\"stof.trace\",\"version\":1,\"insts\":[{\"kind\":\"GetBlock\",\"name\":\"C\",\"outputs\":[0]},"
       "{\"kind\":\"GetLoops\",\"block\":0,\"outputs\":[1]},{\"kind\":\"RFactor\",\"loop\":1,\"factor_axis\":-1,"
       "\"outputs\":[2]}]}",
       "instruction 2 (RFactor): factor_axis must be an integer in 0..8"},
      {"{\"format\":\"stof.trace\",\"version\":1,\"insts\":[{\"kind\":\"GetBlock\",\"name\":\"C\",\"outputs\":[0]},"
       "{\"kind\":\"ComputeInline\"}]}",
       "instruction 1 (ComputeInline): block must be a value number"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    stof_trace *t = NULL;
    sh_expect_error(ctx, stof_trace_from_json(ctx, cases[i].text, &t), STOF_ERR_PARSE, cases[i].msg);
    assert_null(t);
  }
  stof_trace *t;
  SH_OK(ctx, stof_trace_from_json(ctx, "{\"format\":\"stof.trace\",\"version\":1,\"insts\":[]}", &t));
  assert_int_equal(stof_trace_ninst(t), 0);
  stof_trace_free(t);
  sh_ctx_done(ctx);
}

static void failed_replay_leaves_the_schedule_unchanged(void **state) {
  sh_graph G;
  sh_matmul(&G, 16, 12, 8);
  stof_sched *s = sh_sched(&G);
  int l[4], p[2];
  sh_loops(s, sh_block(s, "C"), l);
  stof_factor f[2] = {stof_factor_const(STOF_INFER), stof_factor_const(4)};
  SH_OK(G.ctx, stof_sched_split(s, l[0], 2, f, p));
  stof_trace *t;
  SH_OK(G.ctx, stof_sched_trace(s, &t));
  /* into the same schedule again: C has 4 loops now, the trace expects 3 */
  char *before = sh_nest(s), *lua = sh_trace_lua(s);
  sh_expect_error(G.ctx, stof_sched_replay(t, s), STOF_ERR_SCHEDULE,
                  "replay: instruction 1 (GetLoops): block C has 4 loops, the trace expects 3");
  char *after = sh_nest(s), *lua2 = sh_trace_lua(s);
  assert_string_equal(before, after);
  assert_string_equal(lua, lua2);
  free(before);
  free(after);
  free(lua);
  free(lua2);
  /* into a schedule of another graph */
  sh_graph H;
  sh_elem2(&H, 4, 4);
  stof_sched *o = sh_sched(&H);
  sh_expect_error(H.ctx, stof_sched_replay(t, o), STOF_ERR_SCHEDULE,
                  "replay: instruction 0 (GetBlock): get_block: no block named C (blocks: B)");
  sh_expect_nest(o, "for i in 0..4:\n  for j in 0..4:\n    B[i, j] = (A[i, j] * 2.0) + 1.0\n");
  stof_sched_free(o);
  sh_done(&H);
  stof_trace_free(t);
  stof_sched_free(s);
  sh_done(&G);

  /* a block primitive that fails on replay: e has a consumer (sm) outside P's loop i */
  sh_softmax(&G, 4, 6);
  s = sh_sched(&G);
  SH_OK(G.ctx, stof_trace_from_json(G.ctx,
                                    "{\"format\":\"stof.trace\",\"version\":1,\"insts\":["
                                    "{\"kind\":\"GetBlock\",\"name\":\"P\",\"outputs\":[0]},"
                                    "{\"kind\":\"GetLoops\",\"block\":0,\"outputs\":[1,2]},"
                                    "{\"kind\":\"GetBlock\",\"name\":\"e\",\"outputs\":[3]},"
                                    "{\"kind\":\"ComputeAt\",\"block\":3,\"loop\":1}]}",
                                    &t));
  before = sh_nest(s);
  lua = sh_trace_lua(s);
  sh_expect_error(G.ctx, stof_sched_replay(t, s), STOF_ERR_SCHEDULE,
                  "replay: instruction 3 (ComputeAt): compute_at: loop i of block P does not enclose "
                  "consumer sm of block e");
  after = sh_nest(s);
  lua2 = sh_trace_lua(s);
  assert_string_equal(before, after);
  assert_string_equal(lua, lua2);
  free(before);
  free(after);
  free(lua);
  free(lua2);
  stof_trace_free(t);
  stof_sched_free(s);
  sh_done(&G);
}

static void long_traces_use_a_table(void **state) {
  sh_graph G;
  sh_elem2(&G, 4, 6);
  stof_sched *s = sh_sched(&G);
  int b = sh_block(s, "B"), l[4];
  for (int i = 0; i < 100; i++) sh_loops(s, b, l);
  int f;
  SH_OK(G.ctx, stof_sched_fuse(s, 2, l, &f));
  char *lua = sh_trace_lua(s);
  assert_non_null(strstr(lua, "return function(s, stof)\n  local v = {}\n  v[0] = s:get_block(\"B\")\n"));
  assert_non_null(strstr(lua, "  v[199], v[200] = table.unpack(s:get_loops(v[0]))\n  v[201] = s:fuse(v[199], v[200])\n"));
  free(lua);
  sh_round_trip(&G, s);
  stof_sched_free(s);
  sh_done(&G);
}

int run_trace_tests(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(trace_texts_of_every_kind),
      cmocka_unit_test(trace_round_trip_of_sampled),
      cmocka_unit_test(trace_texts_of_block_kinds),
      cmocka_unit_test(json_reader_checks),
      cmocka_unit_test(failed_replay_leaves_the_schedule_unchanged),
      cmocka_unit_test(long_traces_use_a_table),
  };
  return cmocka_run_group_tests_name("trace", tests, NULL, NULL);
}
