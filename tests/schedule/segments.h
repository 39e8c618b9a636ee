/*
 * Segments of model graphs (what the runtime hands stof_sched_auto: everything but GEMMs and
 * attention), as TE graphs built with the C API, for test_auto.c and the CUDA test table.
 * Tensors are stored in dtype d (float16 or float32) and computed in float32 (casts around
 * every load and at the store). Inputs are in argument order (G->in), then the outputs
 * (G->out); each builder makes a new context and graph (free with sh_done).
 */
#ifndef STOF_TEST_SCHEDULE_SEGMENTS_H
#define STOF_TEST_SCHEDULE_SEGMENTS_H

#include "helpers.h"

/* Y[i, j] = GELU(X[i, j] + bias[j]) over [M, N] (erf form, or tanh form when tanh is set). */
void sh_seg_bias_gelu(sh_graph *G, int64_t M, int64_t N, stof_dtype d, int tanh);
/* Y = SiLU(Gt) * U + R over [M, N] (SwiGLU with a residual add). */
void sh_seg_swiglu(sh_graph *G, int64_t M, int64_t N, stof_dtype d);
/* Y[b, h, s, e] = X[b * S + s, h * D + e]: [B*S, H*D] -> [B, H, S, D]. */
void sh_seg_split_heads(sh_graph *G, int64_t B, int64_t S, int64_t H, int64_t D, stof_dtype d);
/* Y[t, c] = X[t // S, c // D, t % S, c % D]: [B, H, S, D] -> [B*S, H*D]. */
void sh_seg_merge_heads(sh_graph *G, int64_t B, int64_t S, int64_t H, int64_t D, stof_dtype d);
/* Q, K, V [B, H, S, D] from X [B*S, 3*H*D] (three outputs). */
void sh_seg_qkv_split(sh_graph *G, int64_t B, int64_t S, int64_t H, int64_t D, stof_dtype d);
/* Rotary embedding of X [B, H, S, D] with cos, sin [S, D]: X * cos + sign * X[.., (e + D/2) % D]
 * * sin, sign -1 on the first half. */
void sh_seg_rotary(sh_graph *G, int64_t B, int64_t H, int64_t S, int64_t D, stof_dtype d);
/* Patches of P x P of images X [B, C, Hi, Wi] into Y [B, (Hi/P)*(Wi/P), C*P*P]. */
void sh_seg_patches(sh_graph *G, int64_t B, int64_t C, int64_t Hi, int64_t Wi, int64_t P, stof_dtype d);
/* Y[t, j] = W[clamp(ids[t], 0, V - 1), j] + Pos[t, j]; ids int32 [T], W [V, N], Pos [T, N]. */
void sh_seg_embedding(sh_graph *G, int64_t T, int64_t V, int64_t N, stof_dtype d);
/* Layer norm over the last axis of X [M, N] with gamma, beta [N]. residual: 0 none, 1 X + Rs
 * first (inside the segment), 2 the same with the sum an output too (outputs H, Y). */
void sh_seg_layernorm(sh_graph *G, int64_t M, int64_t N, stof_dtype d, int residual);
/* RMS norm over the last axis of X [M, N] with weight w [N]. */
void sh_seg_rmsnorm(sh_graph *G, int64_t M, int64_t N, stof_dtype d);
/* Softmax over the last axis of X [A, M, N] (rows: the first two axes). */
void sh_seg_softmax(sh_graph *G, int64_t A, int64_t M, int64_t N, stof_dtype d);
/* S[i] = sum_k X[i, k]; Y[i, j] = X[i, j] * S[M - 1 - i]: a reduction read off its rows. */
void sh_seg_mirrored_rowsum(sh_graph *G, int64_t M, int64_t N);
/* n[i] = sqrt(sum_j X[i, j]^2) and Y[i] = n[i] * 2 over [M]: the output has no columns. */
void sh_seg_row_norm(sh_graph *G, int64_t M, int64_t N, stof_dtype d);

/* A fresh schedule of G with stof_sched_auto(target) applied (opts NULL). Owned. */
stof_sched *sh_auto(sh_graph *G, const char *target);

#endif
