/*
 * core's cross-file internals: the context and graph structs, a growable string
 * buffer. Never included by public headers.
 */
#ifndef STOF_CORE_INT_H
#define STOF_CORE_INT_H

#include <stof/core.h>

struct stof_ctx {
  stof_alloc_fn alloc;
  void *ud;
  size_t in_use;
  stof_status status;
  int nomem; /* sticky out-of-memory */
  char message[1024];
  uint64_t rng[4];
  struct stof_cuda_stream *stream; /* current CUDA stream (borrowed; NULL: the default) */
};

struct stof_graph {
  stof_ctx *ctx;
  stof_arena arena;
  int nop, capop;
  stof_op **ops;    /* ctx-allocated array of arena-allocated ops */
  int nvar;
};


/* Shape text "[2, 3]" for messages, into a caller buffer. */
const char *core_shape_str(char *buf, size_t n, int ndim, const int64_t *shape);

/* The generator state of stof_tensor_rand's seed (its device copy starts from it). */
uint64_t core_rand_state(uint64_t seed);

/* stof_graph_collect, optionally following extern ops' semantics too. */
stof_status core_graph_collect(stof_graph *g, int nout, const stof_op *const *outputs,
                               int with_semantics, const stof_op ***ops, int *nops);

#endif
