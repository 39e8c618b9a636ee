/*
 * Arenas: bump allocation in blocks from the context's hook, released all at once.
 * Allocations are zeroed and 16-byte aligned; a large request gets its own block.
 */
#include <string.h>

#include "core_int.h"

#define ARENA_BLOCK 8192

struct stof_arena_block {
  stof_arena_block *next;
  size_t size; /* bytes of the whole block, header included */
  _Alignas(16) unsigned char data[];
};

void stof_arena_init(stof_arena *a, stof_ctx *ctx) {
  memset(a, 0, sizeof *a);
  a->ctx = ctx;
}

void *stof_arena_alloc(stof_arena *a, size_t size) {
  size = (size + 15) & ~(size_t)15;
  if (size == 0) size = 16;
  if (!a->head || a->used + size > a->cap) {
    size_t cap = size > ARENA_BLOCK ? size : ARENA_BLOCK;
    size_t bytes = sizeof(stof_arena_block) + cap;
    stof_arena_block *b = stof_ctx_alloc(a->ctx, bytes);
    if (!b) return NULL;
    b->size = bytes;
    a->total += bytes;
    if (a->head && size > ARENA_BLOCK) {
      /* a big one-off block goes behind the head, which keeps its free space */
      b->next = a->head->next;
      a->head->next = b;
      return b->data;
    }
    b->next = a->head;
    a->head = b;
    a->used = 0;
    a->cap = cap;
  }
  void *p = a->head->data + a->used;
  a->used += size;
  return p; /* blocks come zeroed from stof_ctx_alloc and are never reused */
}

char *stof_arena_strdup(stof_arena *a, const char *s) {
  size_t n = strlen(s) + 1;
  char *p = stof_arena_alloc(a, n);
  if (p) memcpy(p, s, n);
  return p;
}

void stof_arena_release(stof_arena *a) {
  stof_arena_block *b = a->head;
  while (b) {
    stof_arena_block *next = b->next;
    stof_ctx_dealloc(a->ctx, b, b->size);
    b = next;
  }
  a->head = NULL;
  a->used = a->cap = a->total = 0;
}
