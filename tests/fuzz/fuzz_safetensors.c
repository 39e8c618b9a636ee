/*
 * libFuzzer target: the safetensors reader (core/safetensors.c). The input is a
 * .safetensors file. stof_st_open either refuses it with a status and a message or opens
 * it; then every tensor loads (a view over the mapping, or a copy when unaligned) and
 * every element is read (ASan catches a read past what was checked), names and metadata
 * are consistent (sorted, found again by name), and a file that opened is saved again with
 * stof_st_save and reopened with the same names, shapes, dtypes, values and metadata (save
 * may refuse only what it documents: STOF_ERR_ARG). Nothing leaks.
 */
#include "fuzz_util.h"

#include <math.h>
#include <sys/stat.h>

#define MAXT 256

static const char *save_path(void) {
  static char path[128];
  if (!*path) {
    char dir[96];
    snprintf(dir, sizeof dir, "%s/stof-fuzz-st-%d", access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp", (int)getpid());
    mkdir(dir, 0700);
    snprintf(path, sizeof path, "%s/again.safetensors", dir);
  }
  return path;
}

static void cleanup(void) {
  char dir[128];
  snprintf(dir, sizeof dir, "%s", save_path());
  unlink(dir);
  *strrchr(dir, '/') = 0;
  rmdir(dir);
}

/* Sum of every element (touches all of them); *n gets the count. */
static double sum_of(const stof_tensor *t, int64_t *n) {
  *n = stof_tensor_numel(t);
  double s = 0;
  for (int64_t k = 0; k < *n; k++) s += stof_tensor_load(t, k);
  return s;
}

static int same_value(double a, double b) { return a == b || (isnan(a) && isnan(b)); }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static int registered;
  if (!registered) registered = 1, atexit(cleanup);
  stof_ctx *ctx = stof_ctx_new(NULL, NULL);
  if (!ctx) return 0;
  const char *path = fz_file(data, size);
  stof_st_file *f = NULL;
  stof_status st = stof_st_open(ctx, path, &f);
  if (st) {
    fz_check_error(ctx, st, "stof_st_open");
    if (f) fz_fail("stof_st_open failed but returned a file");
    goto done;
  }
  int n = stof_st_count(f);
  if (n < 0) fz_fail("count %d", n);
  if (stof_st_name(f, n) || stof_st_name(f, -1)) fz_fail("a name out of range");
  stof_tensor *t[MAXT] = {0};
  const char *names[MAXT];
  int nt = n < MAXT ? n : MAXT;
  for (int i = 0; i < n; i++) {
    const char *name = stof_st_name(f, i);
    if (!name) fz_fail("tensor %d has no name", i);
    if (i && strcmp(stof_st_name(f, i - 1), name) >= 0) fz_fail("names not sorted at %d", i);
    if (stof_st_find(f, name) != i) fz_fail("find(%s) != %d", name, i);
    stof_tensor *x = NULL;
    if ((st = stof_st_tensor(f, i, &x))) fz_fail("tensor %s: %s", name, stof_ctx_message(ctx));
    if (!stof_tensor_is_contiguous(x) || x->device != STOF_DEVICE_CPU) fz_fail("tensor %s not contiguous", name);
    int64_t cnt;
    volatile double s = sum_of(x, &cnt);
    (void)s;
    if (i < nt) t[i] = x, names[i] = name;
    else stof_tensor_free(x);
  }
  stof_tensor *bad = NULL;
  if (stof_st_tensor(f, n, &bad) != STOF_ERR_RANGE || bad) fz_fail("tensor out of range did not fail");
  int nm = stof_st_metadata_count(f);
  const char *mk[MAXT], *mv[MAXT];
  if (nm < 0 || nm > MAXT) nm = nm < 0 ? (fz_fail("metadata count %d", nm), 0) : MAXT;
  for (int i = 0; i < stof_st_metadata_count(f); i++) {
    const char *k = stof_st_metadata_key(f, i), *v = k ? stof_st_metadata(f, k) : NULL;
    if (!k || !v) fz_fail("metadata %d has no key or value", i);
    if (i && strcmp(stof_st_metadata_key(f, i - 1), k) >= 0) fz_fail("metadata keys not sorted at %d", i);
    if (i < nm) mk[i] = k, mv[i] = v;
  }
  if (n <= MAXT && stof_st_metadata_count(f) <= MAXT) {
    const char *again = save_path();
    st = stof_st_save(ctx, again, nt, names, (const stof_tensor *const *)t, nm, mk, mv);
    if (st == STOF_ERR_ARG) {
      fz_check_error(ctx, st, "stof_st_save");
    } else if (st) {
      fz_fail("stof_st_save of what was loaded: %s", stof_ctx_message(ctx));
    } else {
      stof_st_file *g = NULL;
      if ((st = stof_st_open(ctx, again, &g))) fz_fail("reopening the saved file: %s", stof_ctx_message(ctx));
      if (stof_st_count(g) != n || stof_st_metadata_count(g) != nm) fz_fail("saved file: other counts");
      for (int i = 0; i < nm; i++)
        if (strcmp(stof_st_metadata_key(g, i), mk[i]) || strcmp(stof_st_metadata(g, mk[i]), mv[i]))
          fz_fail("saved file: metadata %s differs", mk[i]);
      for (int i = 0; i < n; i++) {
        stof_tensor *y = NULL;
        if (strcmp(stof_st_name(g, i), names[i])) fz_fail("saved file: name %d differs", i);
        if (stof_st_tensor(g, i, &y)) fz_fail("saved file: tensor %s: %s", names[i], stof_ctx_message(ctx));
        if (y->dtype != t[i]->dtype || y->ndim != t[i]->ndim ||
            memcmp(y->shape, t[i]->shape, sizeof y->shape[0] * (size_t)y->ndim))
          fz_fail("saved file: tensor %s: another dtype or shape", names[i]);
        int64_t m = stof_tensor_numel(y);
        for (int64_t k = 0; k < m; k++)
          if (!same_value(stof_tensor_load(y, k), stof_tensor_load(t[i], k)))
            fz_fail("saved file: tensor %s: element %lld differs", names[i], (long long)k);
        stof_tensor_free(y);
      }
      stof_st_close(g);
    }
  }
  for (int i = 0; i < nt; i++) stof_tensor_free(t[i]);
  stof_st_close(f);
done:
  if (stof_ctx_bytes_in_use(ctx) != 0) fz_fail("%zu bytes leaked", stof_ctx_bytes_in_use(ctx));
  stof_ctx_free(ctx);
  return 0;
}
