/*
 * Helpers shared by the libFuzzer targets of tests/fuzz: a reader that draws numbers from
 * the input bytes (zeros once they run out, so every input decodes to something), numbers
 * biased towards edge values, a memfd that holds the input as a file the library opens by
 * path, and an abort that says why.
 */
#ifndef STOF_FUZZ_UTIL_H
#define STOF_FUZZ_UTIL_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memfd_create */
#endif

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <stof/core.h>

typedef struct fz_in {
  const uint8_t *p;
  size_t n, at;
} fz_in;

static inline unsigned fz_u8(fz_in *in) { return in->at < in->n ? in->p[in->at++] : 0; }
static inline unsigned fz_u16(fz_in *in) { return fz_u8(in) | fz_u8(in) << 8; }
static inline uint64_t fz_u64(fz_in *in) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)fz_u8(in) << (8 * i);
  return v;
}
/* An integer in [0, n). */
static inline unsigned fz_below(fz_in *in, unsigned n) { return n ? fz_u8(in) % n : 0; }

/* A constructor parameter: mostly small (-2 .. 253), sometimes an edge value (limits, their
 * neighbours, int64's ends) or any 64-bit value. */
static inline int64_t fz_param(fz_in *in) {
  static const int64_t edge[] = {0, -1, 1, 2, 15, 16, 17, 127, 128, 199, 200, 201, 255, 256,
                                 INT32_MAX, (int64_t)INT32_MAX + 1, ((int64_t)1 << 40) - 1,
                                 (int64_t)1 << 40, ((int64_t)1 << 40) + 1, (int64_t)1 << 24,
                                 ((int64_t)1 << 24) + 1, (int64_t)1 << 62, INT64_MAX, INT64_MIN,
                                 INT64_MAX - 1, INT64_MIN + 1};
  unsigned sel = fz_u8(in);
  if (sel < 200) return (int64_t)fz_u8(in) - 2;
  if (sel < 250) return edge[fz_u8(in) % (sizeof edge / sizeof edge[0])];
  return (int64_t)fz_u64(in);
}

/* Aborts (a crash for libFuzzer) with a message. */
static inline void fz_fail(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static inline void fz_fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "FUZZ CHECK FAILED: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  abort();
}

/* An error must carry its status in the context and a message. */
static inline void fz_check_error(stof_ctx *ctx, stof_status st, const char *what) {
  const char *msg = stof_ctx_message(ctx);
  if (st <= STOF_OK || st >= STOF_STATUS_COUNT) fz_fail("%s: status %d", what, (int)st);
  if (!msg || !*msg) fz_fail("%s: %s without a message", what, stof_status_name(st));
}

/* The input as a file: one memfd per process, rewritten for each input; its path is
 * /proc/self/fd/N. */
static inline const char *fz_file(const uint8_t *data, size_t n) {
  static int fd = -1;
  static char path[64];
  if (fd < 0) {
    fd = memfd_create("stof-fuzz", MFD_CLOEXEC);
    if (fd < 0) fz_fail("memfd_create failed");
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  }
  if (ftruncate(fd, 0) != 0) fz_fail("ftruncate failed");
  size_t done = 0;
  while (done < n) {
    ssize_t k = pwrite(fd, data + done, n - done, (off_t)done);
    if (k <= 0) fz_fail("pwrite failed");
    done += (size_t)k;
  }
  return path;
}

#endif
