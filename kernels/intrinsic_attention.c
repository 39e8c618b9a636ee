/*
 * The "attention" intrinsic: sparse attention as an opaque op of a graph. Semantics and
 * CPU implementation: stof_attention_cpu over the mask's two-level format; GPU: an
 * attention plan of the engine (kernels/attention.c), one per op and knob setting, the
 * engine shared by a runtime plan's instances. Knobs (0 = the selector's decision):
 *   kernel  1 block-wise, 2 row-wise
 *   tile    32, 64, 128 (block-wise outer tile; 32 is the portable kernel's)
 *   warps   2, 4, 8
 *   stages  2, 3 (block-wise pipeline depth)
 *   tma     1 TMA producer, 2 cp.async (Hopper kernel's K/V loads)
 *   hopper  1 not the portable kernel forced (on a Hopper GPU the selector may still run
 *           the mma.sync kernel at tile 32), 2 the portable kernel
 * After gpu_new the knobs hold the decisions the plan took, so a replay with them forces
 * the same kernel.
 * A score modifier (attrs->mod) with a table or slopes makes them the op's 4th input (float32
 * or the attention's dtype on the GPU); both implementations apply it, the GPU plan compiling
 * it into its kernel.
 */
#include <stdio.h>
#include <string.h>

#include "kernels_int.h"

enum { K_KERNEL, K_TILE, K_WARPS, K_STAGES, K_TMA, K_HOPPER, K_COUNT };

typedef struct attn_inst {
  stof_attn_plan *plan;
  stof_attn_mod mod;
  int ninput; /* strides[ninput] is the output's */
  char why[1024];
} attn_inst;

static stof_status run_cpu(stof_ctx *ctx, const stof_attn_attrs *a, const stof_tensor *q,
                           const stof_tensor *k, const stof_tensor *v, const stof_tensor *bias,
                           stof_tensor *out) {
  stof_mask_format *f;
  stof_status st = stof_mask_format_build(ctx, a->mask, q->shape[0], q->shape[1], q->shape[2], k->shape[2], 64, &f);
  if (st) return st;
  st = stof_attention_cpu_mod(ctx, q, k, v, f, a->scale, &a->mod, bias, out);
  stof_mask_format_free(f);
  return st;
}

static stof_status attn_cpu(stof_ctx *ctx, const stof_op *op, const stof_tensor *const *in,
                            stof_tensor *out) {
  if (op->ninput < 3 || op->ninput > 4 || !op->intrin_attrs)
    return stof_ctx_error(ctx, STOF_ERR_INTERNAL, "attention intrinsic: op %s is not an attention op", op->name);
  return run_cpu(ctx, op->intrin_attrs, in[0], in[1], in[2], op->ninput == 4 ? in[3] : NULL, out);
}

/* The interpreter's entry (float64 tensors). */
static stof_status attn_interp(stof_ctx *ctx, int ninput, const stof_tensor *const *in,
                               stof_tensor *out, void *ud) {
  if (ninput < 3 || ninput > 4) return stof_ctx_error(ctx, STOF_ERR_INTERNAL, "attention extern: %d inputs", ninput);
  return run_cpu(ctx, ud, in[0], in[1], in[2], ninput == 4 ? in[3] : NULL, out);
}

static stof_status attn_gpu_new(stof_ctx *ctx, const stof_op *op, int *knobs, void **shared,
                                void **out) {
  const stof_attn_attrs *a = op->intrin_attrs;
  *out = NULL;
  if (!a) return stof_ctx_error(ctx, STOF_ERR_INTERNAL, "attention intrinsic: op %s has no parameters", op->name);
  /* before the engine: a refusal reads the same with or without a GPU */
  stof_dtype bias_dtype = op->ninput == 4 ? op->input[3]->dtype : STOF_DTYPE_F32;
  stof_status st = kernels_attn_mod_gpu_check(ctx, &a->mod, bias_dtype, op->input[0]->dtype);
  if (st) return st;
  if (!*shared && (st = stof_attn_engine_new(ctx, (stof_attn_engine **)shared))) return st;
  const stof_op *q = op->input[0], *k = op->input[1];
  stof_attn_opts o = {0};
  static const stof_attn_kernel kinds[] = {STOF_ATTN_AUTO, STOF_ATTN_BLOCK, STOF_ATTN_ROW};
  if (knobs[K_KERNEL] < 0 || knobs[K_KERNEL] > 2)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "attention %s: knob kernel = %d (0, 1 block, 2 row)", op->name, knobs[K_KERNEL]);
  o.kernel = kinds[knobs[K_KERNEL]];
  o.tile = knobs[K_TILE];
  o.warps = knobs[K_WARPS];
  o.stages = knobs[K_STAGES];
  o.tma = knobs[K_TMA] == 1 ? 1 : knobs[K_TMA] == 2 ? -1 : 0;
  o.portable = knobs[K_HOPPER] == 2;
  o.scale = a->scale;
  o.mod = a->mod;
  o.bias_dtype = bias_dtype;
  attn_inst *in = stof_ctx_alloc(ctx, sizeof *in);
  if (!in) return STOF_ERR_NOMEM;
  in->ninput = op->ninput;
  in->mod = a->mod;
  st = stof_attn_plan_new(*shared, a->mask, q->shape[0], q->shape[1], k->shape[1], q->shape[2], k->shape[2],
                          q->shape[3], q->dtype, &o, &in->plan);
  if (st) {
    stof_ctx_dealloc(ctx, in, sizeof *in);
    return st;
  }
  const stof_attn_choice *c = stof_attn_plan_choice(in->plan);
  knobs[K_KERNEL] = c->kernel == STOF_ATTN_ROW ? 2 : 1;
  knobs[K_TILE] = c->tile;
  knobs[K_WARPS] = c->warps;
  knobs[K_STAGES] = c->stages;
  knobs[K_TMA] = c->hopper ? (c->tma ? 1 : 2) : 0;
  knobs[K_HOPPER] = c->kernel == STOF_ATTN_BLOCK ? (c->hopper ? 1 : 2) : 0;
  char mod[256] = "";
  if (a->mod.kind != STOF_ATTN_MOD_NONE || a->mod.softcap > 0) {
    char d[232];
    snprintf(mod, sizeof mod, "; modifier: %s", stof_attn_mod_describe(&a->mod, d, sizeof d));
  }
  snprintf(in->why, sizeof in->why, "%s, tile %d, %d warps%s: %s%s", stof_attn_kernel_name(c->kernel), c->tile,
           c->warps, c->hopper ? (c->tma ? ", wgmma + TMA" : ", wgmma") : "", c->why, mod);
  *out = in;
  return STOF_OK;
}

/* a [H, buckets] table or [H] slopes, contiguous: head stride = buckets (1 for slopes) */
static int64_t bias_head_stride(const attn_inst *a) {
  return a->mod.kind == STOF_ATTN_MOD_T5_BIAS ? a->mod.num_buckets : 1;
}

static stof_status attn_gpu_launch(void *inst, const uint64_t *in, uint64_t out) {
  attn_inst *a = inst;
  return stof_attn_plan_launch_bias(a->plan, in[0], in[1], in[2], out, NULL, a->ninput == 4 ? in[3] : 0,
                                    bias_head_stride(a));
}

/* strides[i] of the 4-D (b, h, s, d) views of q, k, v, out; d must be contiguous */
static stof_status attn_gpu_launch_strided(void *inst, const uint64_t *in, uint64_t out,
                                           const int64_t *const *strides) {
  attn_inst *a = inst;
  stof_attn_layout l;
  int64_t *dst[4] = {l.q, l.k, l.v, l.o};
  for (int t = 0; t < 4; t++) {
    const int64_t *s = strides[t == 3 ? a->ninput : t]; /* q, k, v, then the output's */
    if (s[3] != 1)
      return stof_ctx_error(stof_attn_plan_ctx(a->plan), STOF_ERR_INTERNAL,
                            "attention: tensor %d's head dim is not contiguous (stride %lld)", t,
                            (long long)s[3]);
    for (int k = 0; k < 3; k++) dst[t][k] = s[k];
  }
  int64_t bias_hs = 0;
  if (a->ninput == 4) {
    const int64_t *bs = strides[3];
    if (a->mod.kind == STOF_ATTN_MOD_T5_BIAS && bs[1] != 1 && a->mod.num_buckets > 1)
      return stof_ctx_error(stof_attn_plan_ctx(a->plan), STOF_ERR_INTERNAL,
                            "attention: the T5 bias table's rows are not contiguous (stride %lld)", (long long)bs[1]);
    bias_hs = bs[0];
  }
  return stof_attn_plan_launch_bias(a->plan, in[0], in[1], in[2], out, &l, a->ninput == 4 ? in[3] : 0, bias_hs);
}

static void attn_gpu_free(void *inst) {
  attn_inst *a = inst;
  if (!a) return;
  stof_ctx *ctx = stof_attn_plan_ctx(a->plan);
  stof_attn_plan_free(a->plan);
  stof_ctx_dealloc(ctx, a, sizeof *a);
}

static void attn_shared_free(void *shared) { stof_attn_engine_free(shared); }

static const char *attn_describe(void *inst) { return ((attn_inst *)inst)->why; }

const stof_intrin kernels_intrin_attention = {
    .name = "attention",
    .nknob = K_COUNT,
    .knob = {{"kernel", 3, {0, 1, 2}},
             {"tile", 4, {0, 32, 64, 128}},
             {"warps", 4, {0, 2, 4, 8}},
             {"stages", 3, {0, 2, 3}},
             {"tma", 3, {0, 1, 2}},
             {"hopper", 3, {0, 1, 2}}},
    .cpu = attn_cpu,
    .gpu_new = attn_gpu_new,
    .gpu_launch = attn_gpu_launch,
    .gpu_launch_strided = attn_gpu_launch_strided,
    .gpu_free = attn_gpu_free,
    .shared_free = attn_shared_free,
    .gpu_describe = attn_describe,
};

stof_status stof_attention_op_ex(stof_graph *g, const stof_op *q, const stof_op *k,
                                 const stof_op *v, const stof_op *bias, const stof_mask *mask,
                                 float scale, const stof_attn_mod *mod, const stof_op **out) {
  stof_ctx *ctx = stof_graph_ctx(g);
  const char *fname = "attention";
  if (!q || !k || !v) return stof_ctx_error(ctx, STOF_ERR_ARG, "%s: missing q, k or v", fname);
  if (!mask) return stof_ctx_error(ctx, STOF_ERR_ARG, "%s: missing mask", fname);
  const stof_op *t[4] = {q, k, v, bias};
  static const char *const names[3] = {"q", "k", "v"};
  for (int i = 0; i < 3; i++) {
    if (t[i]->ndim != 4)
      return stof_ctx_error(ctx, STOF_ERR_SHAPE, "%s: %s (%s) has %d dimensions, [B, H, S, D] expected", fname,
                            names[i], t[i]->name, t[i]->ndim);
    if (!stof_dtype_is_float(t[i]->dtype))
      return stof_ctx_error(ctx, STOF_ERR_TYPE, "%s: %s (%s) is %s, a float dtype is needed", fname, names[i],
                            t[i]->name, stof_dtype_name(t[i]->dtype));
  }
  if (k->shape[0] != q->shape[0] || k->shape[3] != q->shape[3] || memcmp(k->shape, v->shape, sizeof k->shape[0] * 4) ||
      q->shape[1] % k->shape[1])
    return stof_ctx_error(ctx, STOF_ERR_SHAPE,
                          "%s: q [B, H, Sq, D], k and v [B, Hkv, Sk, D] with H a multiple of Hkv expected", fname);
  if (!(scale >= 0)) return stof_ctx_error(ctx, STOF_ERR_ARG, "%s: scale %g is negative", fname, (double)scale);
  stof_attn_mod m = mod ? *mod : (stof_attn_mod){0};
  stof_status st = stof_attn_mod_check(ctx, fname, &m);
  if (st) return st;
  int64_t H = q->shape[1];
  if (bias) {
    if (m.kind == STOF_ATTN_MOD_NONE)
      return stof_ctx_error(ctx, STOF_ERR_ARG, "%s: a bias input (%s) without a modifier that reads one", fname,
                            bias->name);
    if (!stof_dtype_is_float(bias->dtype))
      return stof_ctx_error(ctx, STOF_ERR_TYPE, "%s: the bias (%s) is %s, a float dtype is needed", fname, bias->name,
                            stof_dtype_name(bias->dtype));
    if (m.kind == STOF_ATTN_MOD_T5_BIAS && (bias->ndim != 2 || bias->shape[0] != H || bias->shape[1] != m.num_buckets))
      return stof_ctx_error(ctx, STOF_ERR_SHAPE, "%s: the T5 bias table (%s) must be [H, buckets] = [%lld, %d]", fname,
                            bias->name, (long long)H, m.num_buckets);
    if (m.kind == STOF_ATTN_MOD_ALIBI && (bias->ndim != 1 || bias->shape[0] != H))
      return stof_ctx_error(ctx, STOF_ERR_SHAPE, "%s: the ALiBi slopes (%s) must be [H] = [%lld]", fname, bias->name,
                            (long long)H);
  } else if (m.kind == STOF_ATTN_MOD_T5_BIAS) {
    return stof_ctx_error(ctx, STOF_ERR_ARG, "%s: the T5 bias needs its [H, buckets] table as an input", fname);
  }
  if ((st = kernels_mask_check_dims(ctx, fname, mask, q->shape[0], q->shape[1], q->shape[2], k->shape[2]))) return st;
  stof_attn_attrs *a = stof_graph_alloc(g, sizeof *a);
  if (!a) return STOF_ERR_NOMEM;
  memset(a, 0, sizeof *a); /* the runtime compares attrs bytewise */
  a->mask = mask;
  a->scale = scale;
  a->mod = m;
  const stof_op *op;
  if ((st = stof_te_extern(g, "attention", bias ? 4 : 3, t, 4, q->shape, q->dtype, attn_interp, a, NULL, 1, &op)))
    return st;
  if ((st = stof_te_set_intrin(g, op, "attention", a))) return st;
  *out = op;
  return STOF_OK;
}

stof_status stof_attention_op(stof_graph *g, const stof_op *q, const stof_op *k,
                              const stof_op *v, const stof_mask *mask, float scale,
                              const stof_op **out) {
  return stof_attention_op_ex(g, q, k, v, NULL, mask, scale, NULL, out);
}
