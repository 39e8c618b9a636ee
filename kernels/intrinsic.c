/*
 * The intrinsic registry: opaque kernels known by name, process-wide. The built-in ones
 * (attention) are registered on first lookup; users add theirs with stof_intrin_register.
 * The table only grows, so a pointer found once stays valid.
 */
#include <pthread.h>
#include <string.h>

#include "kernels_int.h"

#define MAX_INTRIN 64

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static const stof_intrin *table[MAX_INTRIN];
static int ntable, builtins_done;

static void add_builtins_locked(void) {
  if (builtins_done) return;
  builtins_done = 1;
  table[ntable++] = &kernels_intrin_attention;
}

const stof_intrin *stof_intrin_find(const char *name) {
  const stof_intrin *found = NULL;
  if (!name) return NULL;
  pthread_mutex_lock(&lock);
  add_builtins_locked();
  for (int i = 0; i < ntable && !found; i++)
    if (strcmp(table[i]->name, name) == 0) found = table[i];
  pthread_mutex_unlock(&lock);
  return found;
}

stof_status stof_intrin_register(stof_ctx *ctx, const stof_intrin *in) {
  if (!in || !in->name || !in->name[0])
    return stof_ctx_error(ctx, STOF_ERR_ARG, "intrin_register: an intrinsic needs a name");
  if (!in->cpu)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "intrin_register: %s has no CPU implementation", in->name);
  if ((in->gpu_new != NULL) != (in->gpu_launch != NULL) || (in->gpu_new && !in->gpu_free))
    return stof_ctx_error(ctx, STOF_ERR_ARG,
                          "intrin_register: %s: gpu_new, gpu_launch and gpu_free come together", in->name);
  if (in->nknob < 0 || in->nknob > STOF_INTRIN_MAX_KNOBS)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "intrin_register: %s has %d knobs (at most %d)", in->name,
                          in->nknob, STOF_INTRIN_MAX_KNOBS);
  stof_status st = STOF_OK;
  pthread_mutex_lock(&lock);
  add_builtins_locked();
  for (int i = 0; i < ntable && !st; i++)
    if (strcmp(table[i]->name, in->name) == 0)
      st = stof_ctx_error(ctx, STOF_ERR_ARG, "intrin_register: an intrinsic named %s exists already", in->name);
  if (!st && ntable == MAX_INTRIN)
    st = stof_ctx_error(ctx, STOF_ERR_UNSUPPORTED, "intrin_register: %d intrinsics registered (the most)", MAX_INTRIN);
  if (!st) table[ntable++] = in;
  pthread_mutex_unlock(&lock);
  return st;
}
