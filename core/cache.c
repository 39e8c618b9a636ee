/*
 * The on-disk cache of compiled artefacts (cubins, shared objects): where it lives, and
 * reads and atomic writes (temporary file + rename), so that two processes compiling the
 * same thing at once never see a half-written file.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core_int.h"

uint64_t stof_hash_bytes(uint64_t h, const void *data, size_t size) {
  const unsigned char *p = data;
  for (size_t i = 0; i < size; i++) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

/* mkdir -p */
static int make_dirs(char *path) {
  for (char *p = path + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    int r = mkdir(path, 0755);
    *p = '/';
    if (r != 0 && errno != EEXIST) return -1;
  }
  return mkdir(path, 0755) == 0 || errno == EEXIST ? 0 : -1;
}

stof_status stof_cache_dir(stof_ctx *ctx, const char *subdir, char *buf, size_t n) {
  const char *env;
  int len;
  if ((env = getenv("STOF_CACHE_DIR")) && *env)
    len = snprintf(buf, n, "%s/%s", env, subdir);
  else if ((env = getenv("XDG_CACHE_HOME")) && *env)
    len = snprintf(buf, n, "%s/stof/%s", env, subdir);
  else if ((env = getenv("HOME")) && *env)
    len = snprintf(buf, n, "%s/.cache/stof/%s", env, subdir);
  else
    len = snprintf(buf, n, "/tmp/stof-cache/%s", subdir);
  if (len < 0 || (size_t)len >= n)
    return stof_ctx_error(ctx, STOF_ERR_IO, "cache: directory name too long");
  if (make_dirs(buf) != 0)
    return stof_ctx_error(ctx, STOF_ERR_IO, "cache: cannot create %s: %s", buf, strerror(errno));
  return STOF_OK;
}

stof_status stof_cache_read(stof_ctx *ctx, const char *path, void **data, size_t *size) {
  *data = NULL;
  *size = 0;
  FILE *f = fopen(path, "rb");
  if (!f) {
    if (errno == ENOENT) return stof_ctx_error(ctx, STOF_ERR_NOT_FOUND, "cache: %s not found", path);
    return stof_ctx_error(ctx, STOF_ERR_IO, "cache: cannot open %s: %s", path, strerror(errno));
  }
  struct stat sb;
  if (fstat(fileno(f), &sb) != 0 || sb.st_size <= 0) {
    fclose(f);
    return stof_ctx_error(ctx, STOF_ERR_IO, "cache: %s is empty or unreadable", path);
  }
  size_t n = (size_t)sb.st_size;
  void *p = stof_ctx_alloc(ctx, n);
  if (!p) {
    fclose(f);
    return STOF_ERR_NOMEM;
  }
  size_t got = fread(p, 1, n, f);
  fclose(f);
  if (got != n) {
    stof_ctx_dealloc(ctx, p, n);
    return stof_ctx_error(ctx, STOF_ERR_IO, "cache: short read of %s", path);
  }
  *data = p;
  *size = n;
  return STOF_OK;
}

stof_status stof_cache_write(stof_ctx *ctx, const char *path, const void *data, size_t size) {
  char tmp[4200];
  if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld.%llx", path, (long)getpid(),
               (unsigned long long)stof_ctx_rand_u64(ctx)) >= (int)sizeof tmp)
    return stof_ctx_error(ctx, STOF_ERR_IO, "cache: path too long");
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL, 0644);
  if (fd < 0) return stof_ctx_error(ctx, STOF_ERR_IO, "cache: cannot create %s: %s", tmp, strerror(errno));
  const char *p = data;
  size_t left = size;
  while (left > 0) {
    ssize_t w = write(fd, p, left);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      int e = errno;
      close(fd);
      unlink(tmp);
      return stof_ctx_error(ctx, STOF_ERR_IO, "cache: writing %s failed: %s", tmp, strerror(e));
    }
    p += w;
    left -= (size_t)w;
  }
  if (close(fd) != 0 || rename(tmp, path) != 0) {
    int e = errno;
    unlink(tmp);
    return stof_ctx_error(ctx, STOF_ERR_IO, "cache: cannot install %s: %s", path, strerror(e));
  }
  return STOF_OK;
}
