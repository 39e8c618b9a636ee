/*
 * Weights in the safetensors format (Hugging Face): reading by mapping the file, writing
 * atomically.
 *
 * Layout: 8 bytes, the header length N as a little-endian u64; N bytes of JSON, an object
 * mapping each tensor name to {"dtype": "F32", "shape": [..], "data_offsets": [begin,
 * end]} (offsets relative to the data section), plus an optional "__metadata__" object of
 * string -> string; then the data section, from byte 8 + N to the end of the file, each
 * tensor's bytes row-major, little-endian.
 *
 * Invariants of an open stof_st_file:
 *  - The whole file is mapped once (MAP_PRIVATE, PROT_READ | PROT_WRITE: copy-on-write, so
 *    writing into a loaded tensor changes the process's copy only, never the file; pages
 *    are read lazily, and only the ones written to take memory of their own). The file is
 *    at least 8 bytes long, so the mapping is never empty. Tensors handed out by
 *    stof_st_tensor point into the mapping: the bytes are never copied (except for a
 *    tensor whose offset is not a multiple of its element size, copied once so that every
 *    access is aligned).
 *  - Every entry was checked when the file was opened: known dtype, at most STOF_MAX_DIMS
 *    non-negative extents, begin <= end <= size of the data section, end - begin equal to
 *    the shape's byte count (checked arithmetic), no two non-empty byte ranges overlapping.
 *    Nothing in the file can make a later access fall outside the mapping (as long as no
 *    other process truncates the file while it is mapped: that raises SIGBUS, as for any
 *    mapped file).
 *  - Entries are sorted by name (stof_st_find is a binary search); metadata by key.
 *  - The host is little-endian (checked at compile time): the data are used as they lie.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "core_int.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c uses tensor data in place: it needs a little-endian host"
#endif

#define META_KEY "__metadata__"

/* The file's dtype names. U8 loads as bool (one byte per element, bytes kept as they are;
 * element access reads any non-zero byte as 1); bool tensors are saved as BOOL. */
static const struct {
  const char *name;
  stof_dtype dtype;
} st_dtypes[] = {
    {"F32", STOF_DTYPE_F32}, {"F16", STOF_DTYPE_F16},   {"BF16", STOF_DTYPE_BF16},
    {"F64", STOF_DTYPE_F64}, {"I64", STOF_DTYPE_I64},   {"I32", STOF_DTYPE_I32},
    {"BOOL", STOF_DTYPE_BOOL}, {"U8", STOF_DTYPE_BOOL},
};
#define NDTYPE ((int)(sizeof st_dtypes / sizeof *st_dtypes))
#define DTYPE_LIST "F32, F16, BF16, F64, I64, I32, BOOL, U8"

typedef struct st_entry {
  char *name; /* ctx-owned */
  stof_dtype dtype;
  int ndim;
  int64_t shape[STOF_MAX_DIMS];
  uint64_t begin, end; /* within the data section */
} st_entry;

typedef struct st_meta {
  char *key, *value; /* ctx-owned */
} st_meta;

struct stof_st_file {
  stof_ctx *ctx;
  char *path;        /* ctx-owned copy, for messages */
  unsigned char *map; /* the whole file */
  size_t map_size;
  unsigned char *data; /* the data section: map + 8 + N */
  uint64_t data_size;
  int n, capn;
  st_entry *entry; /* n used of capn allocated, sorted by name */
  int nmeta, capmeta;
  st_meta *meta; /* nmeta used of capmeta allocated, sorted by key */
};

/* ---------------------------------------------------------------- reading */

void stof_st_close(stof_st_file *f) {
  if (!f) return;
  stof_ctx *ctx = f->ctx;
  for (int i = 0; i < f->n; i++) stof_ctx_dealloc(ctx, f->entry[i].name, strlen(f->entry[i].name) + 1);
  stof_ctx_dealloc(ctx, f->entry, sizeof *f->entry * (size_t)f->capn);
  for (int i = 0; i < f->nmeta; i++) {
    stof_ctx_dealloc(ctx, f->meta[i].key, strlen(f->meta[i].key) + 1);
    stof_ctx_dealloc(ctx, f->meta[i].value, strlen(f->meta[i].value) + 1);
  }
  stof_ctx_dealloc(ctx, f->meta, sizeof *f->meta * (size_t)f->capmeta);
  if (f->map) munmap(f->map, f->map_size);
  if (f->path) stof_ctx_dealloc(ctx, f->path, strlen(f->path) + 1);
  stof_ctx_dealloc(ctx, f, sizeof *f);
}

/* "an array", "a string", ... for messages. */
static const char *json_kind(const json_t *v) {
  switch (json_typeof(v)) {
  case JSON_OBJECT: return "an object";
  case JSON_ARRAY: return "an array";
  case JSON_STRING: return "a string";
  case JSON_INTEGER: return "an integer";
  case JSON_REAL: return "a real number";
  case JSON_TRUE: return "true";
  case JSON_FALSE: return "false";
  case JSON_NULL: return "null";
  default: return "a value";
  }
}

/* A JSON value as short text for messages: the integer or real itself, else its kind. */
static const char *json_brief(char *buf, size_t n, const json_t *v) {
  if (json_is_integer(v))
    snprintf(buf, n, "%lld", (long long)json_integer_value(v));
  else if (json_is_real(v)) {
    snprintf(buf, n, "%.17g", json_real_value(v));
    if (strspn(buf, "-0123456789") == strlen(buf) && strlen(buf) + 2 < n) strcat(buf, ".0");
  }
  else if (json_is_string(v))
    snprintf(buf, n, "\"%.40s\"", json_string_value(v));
  else
    snprintf(buf, n, "%s", json_kind(v));
  return buf;
}

/* Fills e (all but its name) from the header entry v of tensor name. */
static stof_status parse_entry(stof_st_file *f, const char *name, const json_t *v, st_entry *e) {
  stof_ctx *ctx = f->ctx;
  const char *path = f->path;
  char b1[64], b2[64];
  if (!json_is_object(v))
    return stof_ctx_error(ctx, STOF_ERR_PARSE, "%s: tensor \"%s\": entry is %s, not an object", path, name,
                          json_kind(v));
  /* dtype */
  const json_t *dt = json_object_get(v, "dtype");
  if (!dt) return stof_ctx_error(ctx, STOF_ERR_PARSE, "%s: tensor \"%s\": no \"dtype\"", path, name);
  if (!json_is_string(dt))
    return stof_ctx_error(ctx, STOF_ERR_PARSE, "%s: tensor \"%s\": dtype is %s, not a string", path, name,
                          json_kind(dt));
  int k = 0;
  while (k < NDTYPE && strcmp(st_dtypes[k].name, json_string_value(dt)) != 0) k++;
  if (k == NDTYPE)
    return stof_ctx_error(ctx, STOF_ERR_TYPE, "%s: tensor \"%s\": unknown dtype \"%.40s\" (supported: %s)", path,
                          name, json_string_value(dt), DTYPE_LIST);
  e->dtype = st_dtypes[k].dtype;
  /* shape */
  const json_t *sh = json_object_get(v, "shape");
  if (!sh) return stof_ctx_error(ctx, STOF_ERR_PARSE, "%s: tensor \"%s\": no \"shape\"", path, name);
  if (!json_is_array(sh))
    return stof_ctx_error(ctx, STOF_ERR_SHAPE,
                          "%s: tensor \"%s\": shape is %s, not a list of non-negative integers", path, name,
                          json_kind(sh));
  size_t nd = json_array_size(sh);
  if (nd > STOF_MAX_DIMS)
    return stof_ctx_error(ctx, STOF_ERR_SHAPE, "%s: tensor \"%s\": shape has %zu dims, at most %d are supported",
                          path, name, nd, STOF_MAX_DIMS);
  e->ndim = (int)nd;
  uint64_t numel = 1;
  int numel_overflow = 0;
  for (size_t d = 0; d < nd; d++) {
    const json_t *x = json_array_get(sh, d);
    if (!json_is_integer(x) || json_integer_value(x) < 0)
      return stof_ctx_error(ctx, STOF_ERR_SHAPE,
                            "%s: tensor \"%s\": shape must be a list of non-negative integers, entry %zu is %s",
                            path, name, d, json_brief(b1, sizeof b1, x));
    e->shape[d] = (int64_t)json_integer_value(x);
    if (__builtin_mul_overflow(numel, (uint64_t)e->shape[d], &numel)) numel_overflow = 1;
  }
  /* data_offsets */
  const json_t *off = json_object_get(v, "data_offsets");
  if (!off) return stof_ctx_error(ctx, STOF_ERR_PARSE, "%s: tensor \"%s\": no \"data_offsets\"", path, name);
  if (!json_is_array(off) || json_array_size(off) != 2)
    return stof_ctx_error(ctx, STOF_ERR_PARSE,
                          "%s: tensor \"%s\": data_offsets must be a list [begin, end] of two integers", path,
                          name);
  const json_t *jb = json_array_get(off, 0), *je = json_array_get(off, 1);
  if (!json_is_integer(jb) || json_integer_value(jb) < 0 || !json_is_integer(je) || json_integer_value(je) < 0)
    return stof_ctx_error(ctx, STOF_ERR_PARSE,
                          "%s: tensor \"%s\": data_offsets [%s, %s] must be non-negative integers", path, name,
                          json_brief(b1, sizeof b1, jb), json_brief(b2, sizeof b2, je));
  e->begin = (uint64_t)json_integer_value(jb);
  e->end = (uint64_t)json_integer_value(je);
  if (e->begin > e->end)
    return stof_ctx_error(ctx, STOF_ERR_PARSE, "%s: tensor \"%s\": data_offsets [%llu, %llu] begin after end",
                          path, name, (unsigned long long)e->begin, (unsigned long long)e->end);
  if (e->end > f->data_size)
    return stof_ctx_error(ctx, STOF_ERR_PARSE,
                          "%s: tensor \"%s\": data_offsets end %llu past the data section (%llu bytes)", path,
                          name, (unsigned long long)e->end, (unsigned long long)f->data_size);
  uint64_t need;
  char sbuf[160];
  if (numel_overflow || __builtin_mul_overflow(numel, (uint64_t)stof_dtype_size(e->dtype), &need) ||
      need != e->end - e->begin) {
    core_shape_str(sbuf, sizeof sbuf, e->ndim, e->shape);
    if (numel_overflow || need / stof_dtype_size(e->dtype) != numel)
      return stof_ctx_error(ctx, STOF_ERR_SHAPE,
                            "%s: tensor \"%s\": data_offsets [%llu, %llu] hold %llu bytes, its shape %s %s "
                            "needs more than 2^64",
                            path, name, (unsigned long long)e->begin, (unsigned long long)e->end,
                            (unsigned long long)(e->end - e->begin), sbuf, stof_dtype_name(e->dtype));
    return stof_ctx_error(ctx, STOF_ERR_SHAPE,
                          "%s: tensor \"%s\": data_offsets [%llu, %llu] hold %llu bytes, its shape %s %s "
                          "needs %llu",
                          path, name, (unsigned long long)e->begin, (unsigned long long)e->end,
                          (unsigned long long)(e->end - e->begin), sbuf, stof_dtype_name(e->dtype),
                          (unsigned long long)need);
  }
  return STOF_OK;
}

static int entry_by_name(const void *a, const void *b) {
  return strcmp(((const st_entry *)a)->name, ((const st_entry *)b)->name);
}

static int entry_by_begin(const void *a, const void *b) {
  const st_entry *x = *(const st_entry *const *)a, *y = *(const st_entry *const *)b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  return x->end < y->end ? -1 : x->end > y->end;
}

static int meta_by_key(const void *a, const void *b) {
  return strcmp(((const st_meta *)a)->key, ((const st_meta *)b)->key);
}

/* No two non-empty byte ranges overlap. */
static stof_status check_overlaps(stof_st_file *f) {
  int m = 0;
  for (int i = 0; i < f->n; i++) m += f->entry[i].end > f->entry[i].begin;
  if (m < 2) return STOF_OK;
  const st_entry **by = stof_ctx_alloc(f->ctx, sizeof *by * (size_t)m);
  if (!by) return STOF_ERR_NOMEM;
  m = 0;
  for (int i = 0; i < f->n; i++)
    if (f->entry[i].end > f->entry[i].begin) by[m++] = &f->entry[i];
  qsort(by, (size_t)m, sizeof *by, entry_by_begin);
  stof_status st = STOF_OK;
  const st_entry *reach = by[0]; /* the range reaching furthest so far */
  for (int i = 1; i < m && !st; i++) {
    if (by[i]->begin < reach->end)
      st = stof_ctx_error(f->ctx, STOF_ERR_PARSE,
                          "%s: tensors \"%s\" and \"%s\" overlap (bytes [%llu, %llu) and [%llu, %llu))",
                          f->path, reach->name, by[i]->name, (unsigned long long)reach->begin,
                          (unsigned long long)reach->end, (unsigned long long)by[i]->begin,
                          (unsigned long long)by[i]->end);
    if (by[i]->end > reach->end) reach = by[i];
  }
  stof_ctx_dealloc(f->ctx, by, sizeof *by * (size_t)m);
  return st;
}

/* Reads the header (already mapped) into f's entries and metadata. */
static stof_status parse_header(stof_st_file *f, const char *text, size_t len) {
  stof_ctx *ctx = f->ctx;
  json_error_t jerr;
  json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
  if (!root)
    return stof_ctx_error(ctx, STOF_ERR_PARSE, "%s: header is not valid JSON: line %d, column %d: %s", f->path,
                          jerr.line, jerr.column, jerr.text);
  stof_status st = STOF_OK;
  if (!json_is_object(root)) {
    st = stof_ctx_error(ctx, STOF_ERR_PARSE, "%s: header is %s, not a JSON object", f->path, json_kind(root));
    goto done;
  }
  const json_t *meta = json_object_get(root, META_KEY);
  size_t nobj = json_object_size(root) - (meta != NULL);
  if (nobj > (size_t)INT32_MAX / 2) {
    st = stof_ctx_error(ctx, STOF_ERR_PARSE, "%s: header lists %zu tensors, too many", f->path, nobj);
    goto done;
  }
  if (nobj) {
    f->entry = stof_ctx_alloc(ctx, sizeof *f->entry * nobj);
    if (!f->entry) {
      st = STOF_ERR_NOMEM;
      goto done;
    }
    f->capn = (int)nobj;
  }
  const char *key;
  json_t *v;
  json_object_foreach(root, key, v) {
    if (strcmp(key, META_KEY) == 0) continue;
    st_entry e = {0};
    if (!*key) {
      st = stof_ctx_error(ctx, STOF_ERR_PARSE, "%s: a tensor has an empty name", f->path);
      goto done;
    }
    if ((st = parse_entry(f, key, v, &e))) goto done;
    if (!(e.name = stof_ctx_strdup(ctx, key))) {
      st = STOF_ERR_NOMEM;
      goto done;
    }
    f->entry[f->n++] = e;
  }
  if (meta) {
    if (!json_is_object(meta)) {
      st = stof_ctx_error(ctx, STOF_ERR_PARSE, "%s: \"%s\" is %s, not an object of strings", f->path, META_KEY,
                          json_kind(meta));
      goto done;
    }
    size_t nm = json_object_size(meta);
    json_object_foreach((json_t *)meta, key, v) {
      if (!json_is_string(v)) {
        st = stof_ctx_error(ctx, STOF_ERR_PARSE, "%s: \"%s\": the value of \"%s\" is %s, not a string", f->path,
                            META_KEY, key, json_kind(v));
        goto done;
      }
    }
    if (nm) {
      if (nm > (size_t)INT32_MAX / 2 || !(f->meta = stof_ctx_alloc(ctx, sizeof *f->meta * nm))) {
        st = stof_ctx_error(ctx, STOF_ERR_NOMEM, "%s: out of memory reading %zu metadata entries", f->path, nm);
        goto done;
      }
      f->capmeta = (int)nm;
      json_object_foreach((json_t *)meta, key, v) {
        st_meta m = {stof_ctx_strdup(ctx, key), NULL};
        if (m.key) m.value = stof_ctx_strdup(ctx, json_string_value(v));
        if (!m.value) {
          if (m.key) stof_ctx_dealloc(ctx, m.key, strlen(m.key) + 1);
          st = STOF_ERR_NOMEM;
          goto done;
        }
        f->meta[f->nmeta++] = m;
      }
      qsort(f->meta, (size_t)f->nmeta, sizeof *f->meta, meta_by_key);
    }
  }
  if (f->n) qsort(f->entry, (size_t)f->n, sizeof *f->entry, entry_by_name);
  st = check_overlaps(f);
done:
  json_decref(root);
  return st;
}

stof_status stof_st_open(stof_ctx *ctx, const char *path, stof_st_file **out) {
  *out = NULL;
  if (!path || !*path) return stof_ctx_error(ctx, STOF_ERR_ARG, "safetensors: empty path");
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return stof_ctx_error(ctx, STOF_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  struct stat sb;
  if (fstat(fd, &sb) != 0) {
    int e = errno;
    close(fd);
    return stof_ctx_error(ctx, STOF_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
  }
  if (!S_ISREG(sb.st_mode)) {
    close(fd);
    return stof_ctx_error(ctx, STOF_ERR_IO, "%s: not a regular file", path);
  }
  if (sb.st_size < 8) {
    close(fd);
    return stof_ctx_error(ctx, STOF_ERR_PARSE,
                          "%s: file is %lld bytes, shorter than the 8-byte header length", path,
                          (long long)sb.st_size);
  }
  if ((uint64_t)sb.st_size > SIZE_MAX) {
    close(fd);
    return stof_ctx_error(ctx, STOF_ERR_IO, "%s: file too large to map", path);
  }
  stof_st_file *f = stof_ctx_alloc(ctx, sizeof *f);
  if (!f) {
    close(fd);
    return STOF_ERR_NOMEM;
  }
  f->ctx = ctx;
  if (!(f->path = stof_ctx_strdup(ctx, path))) {
    close(fd);
    stof_st_close(f);
    return STOF_ERR_NOMEM;
  }
  f->map_size = (size_t)sb.st_size; /* >= 8: never an empty mapping */
  void *m = mmap(NULL, f->map_size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  int e = errno;
  close(fd);
  if (m == MAP_FAILED) {
    stof_st_close(f);
    return stof_ctx_error(ctx, STOF_ERR_IO, "%s: cannot map %zu bytes: %s", path, (size_t)sb.st_size,
                          strerror(e));
  }
  f->map = m;
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--) hlen = hlen << 8 | f->map[i];
  uint64_t room = (uint64_t)f->map_size - 8;
  if (hlen > room) {
    stof_st_close(f);
    return stof_ctx_error(ctx, STOF_ERR_PARSE, "%s: header length %llu runs past the end of the file (%zu bytes)",
                          path, (unsigned long long)hlen, (size_t)sb.st_size);
  }
  f->data = f->map + 8 + hlen;
  f->data_size = room - hlen;
  stof_status st = parse_header(f, (const char *)f->map + 8, (size_t)hlen);
  if (st) {
    stof_st_close(f);
    return st;
  }
  *out = f;
  return STOF_OK;
}

int stof_st_count(const stof_st_file *f) { return f->n; }

const char *stof_st_name(const stof_st_file *f, int i) {
  return i >= 0 && i < f->n ? f->entry[i].name : NULL;
}

int stof_st_find(const stof_st_file *f, const char *name) {
  int lo = 0, hi = f->n - 1;
  while (lo <= hi) {
    int mid = lo + (hi - lo) / 2, c = strcmp(f->entry[mid].name, name);
    if (c == 0) return mid;
    if (c < 0) lo = mid + 1;
    else hi = mid - 1;
  }
  return -1;
}

stof_status stof_st_tensor(stof_st_file *f, int i, stof_tensor **out) {
  *out = NULL;
  if (i < 0 || i >= f->n)
    return stof_ctx_error(f->ctx, STOF_ERR_RANGE, "%s: tensor index %d out of range (%d tensors)", f->path, i,
                          f->n);
  const st_entry *e = &f->entry[i];
  unsigned char *p = f->data + e->begin;
  size_t esz = stof_dtype_size(e->dtype);
  if (e->end > e->begin && (uintptr_t)p % esz != 0) { /* unaligned in the file: one copy */
    stof_status st = stof_tensor_new(f->ctx, e->dtype, e->ndim, e->shape, STOF_DEVICE_CPU, out);
    if (st) return st;
    memcpy((*out)->data, p, (size_t)(e->end - e->begin));
    return STOF_OK;
  }
  return stof_tensor_wrap(f->ctx, e->dtype, e->ndim, e->shape, NULL, p, STOF_DEVICE_CPU, out);
}

int stof_st_metadata_count(const stof_st_file *f) { return f->nmeta; }

const char *stof_st_metadata_key(const stof_st_file *f, int i) {
  return i >= 0 && i < f->nmeta ? f->meta[i].key : NULL;
}

const char *stof_st_metadata(const stof_st_file *f, const char *key) {
  int lo = 0, hi = f->nmeta - 1;
  while (lo <= hi) {
    int mid = lo + (hi - lo) / 2, c = strcmp(f->meta[mid].key, key);
    if (c == 0) return f->meta[mid].value;
    if (c < 0) lo = mid + 1;
    else hi = mid - 1;
  }
  return NULL;
}

const char *stof_st_path(const stof_st_file *f) { return f->path; }

/* ---------------------------------------------------------------- writing */

static int str_ptr_cmp(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The first string given twice in list (n entries), or NULL. NOMEM leaves *st set. */
static const char *find_duplicate(stof_ctx *ctx, int n, const char *const *list, stof_status *st) {
  *st = STOF_OK;
  if (n < 2) return NULL;
  const char **sorted = stof_ctx_alloc(ctx, sizeof *sorted * (size_t)n);
  if (!sorted) {
    *st = STOF_ERR_NOMEM;
    return NULL;
  }
  memcpy(sorted, list, sizeof *sorted * (size_t)n);
  qsort(sorted, (size_t)n, sizeof *sorted, str_ptr_cmp);
  const char *dup = NULL;
  for (int i = 1; i < n && !dup; i++)
    if (strcmp(sorted[i - 1], sorted[i]) == 0) dup = sorted[i];
  stof_ctx_dealloc(ctx, sorted, sizeof *sorted * (size_t)n);
  return dup;
}

static int write_all(int fd, const void *data, size_t n) {
  const char *p = data;
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

static const char *st_dtype_name(stof_dtype d) {
  for (int k = 0; k < NDTYPE; k++)
    if (st_dtypes[k].dtype == d) return st_dtypes[k].name;
  return NULL;
}

/* Checks the arguments of stof_st_save. */
static stof_status check_save_args(stof_ctx *ctx, const char *path, int n, const char *const *names,
                                   const stof_tensor *const *tensors, int nmeta, const char *const *keys,
                                   const char *const *values) {
  if (!path || !*path) return stof_ctx_error(ctx, STOF_ERR_ARG, "safetensors save: empty path");
  if (n < 0 || nmeta < 0)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "%s: negative count (%d tensors, %d metadata entries)", path, n,
                          nmeta);
  if ((n && (!names || !tensors)) || (nmeta && (!keys || !values)))
    return stof_ctx_error(ctx, STOF_ERR_ARG, "%s: names, tensors, keys or values missing", path);
  for (int i = 0; i < n; i++) {
    if (!names[i] || !*names[i])
      return stof_ctx_error(ctx, STOF_ERR_ARG, "%s: tensor %d has an empty name", path, i);
    if (strcmp(names[i], META_KEY) == 0)
      return stof_ctx_error(ctx, STOF_ERR_ARG, "%s: \"%s\" cannot name a tensor (the format reserves it)", path,
                            META_KEY);
    if (!tensors[i]) return stof_ctx_error(ctx, STOF_ERR_ARG, "%s: tensor \"%s\" is NULL", path, names[i]);
    if (!st_dtype_name(tensors[i]->dtype))
      return stof_ctx_error(ctx, STOF_ERR_TYPE, "%s: tensor \"%s\": dtype %d has no safetensors name", path,
                            names[i], (int)tensors[i]->dtype);
  }
  for (int i = 0; i < nmeta; i++)
    if (!keys[i] || !values[i])
      return stof_ctx_error(ctx, STOF_ERR_ARG, "%s: metadata entry %d has no key or no value", path, i);
  stof_status st;
  const char *dup = find_duplicate(ctx, n, names, &st);
  if (st) return st;
  if (dup) return stof_ctx_error(ctx, STOF_ERR_ARG, "%s: tensor name \"%s\" given twice", path, dup);
  dup = find_duplicate(ctx, nmeta, keys, &st);
  if (st) return st;
  if (dup) return stof_ctx_error(ctx, STOF_ERR_ARG, "%s: metadata key \"%s\" given twice", path, dup);
  return STOF_OK;
}

static uint64_t tensor_bytes(const stof_tensor *t) {
  return (uint64_t)stof_tensor_numel(t) * stof_dtype_size(t->dtype);
}

/* The data layout: order[] lists the tensors by element size, largest first (the given
 * order among equals), so that every tensor starts at a multiple of its element size
 * (the data section starts at a multiple of 8) and loads without a copy; begin[i] is
 * tensor i's offset. */
static stof_status plan_layout(stof_ctx *ctx, const char *path, int n, const char *const *names,
                               const stof_tensor *const *tensors, int *order, uint64_t *begin) {
  int k = 0;
  for (size_t esz = 8; esz >= 1; esz /= 2)
    for (int i = 0; i < n; i++)
      if (stof_dtype_size(tensors[i]->dtype) == esz) order[k++] = i;
  if (k != n) return stof_ctx_error(ctx, STOF_ERR_INTERNAL, "%s: an element size outside 1, 2, 4, 8", path);
  uint64_t off = 0;
  for (k = 0; k < n; k++) {
    const stof_tensor *t = tensors[order[k]];
    uint64_t numel = 1, nbytes;
    int over = 0;
    for (int d = 0; d < t->ndim; d++) over |= __builtin_mul_overflow(numel, (uint64_t)t->shape[d], &numel);
    over |= __builtin_mul_overflow(numel, (uint64_t)stof_dtype_size(t->dtype), &nbytes);
    begin[order[k]] = off;
    if (over || __builtin_add_overflow(off, nbytes, &off) || off > (uint64_t)INT64_MAX)
      return stof_ctx_error(ctx, STOF_ERR_SHAPE, "%s: tensor \"%s\": the data would pass 2^63 bytes", path,
                            names[order[k]]);
  }
  return STOF_OK;
}

/* The header JSON (compact, metadata first, tensors in the given order, at offsets
 * begin[]): a malloc'd string from jansson (free()), or NULL with the error recorded. */
static char *build_header(stof_ctx *ctx, const char *path, int n, const char *const *names,
                          const stof_tensor *const *tensors, const uint64_t *begin, int nmeta,
                          const char *const *keys, const char *const *values, stof_status *st) {
  json_t *root = json_object();
  char *text = NULL;
  *st = STOF_OK;
  if (!root) goto nomem;
  if (nmeta) {
    json_t *meta = json_object();
    if (!meta || json_object_set_new(root, META_KEY, meta)) goto nomem;
    for (int i = 0; i < nmeta; i++) {
      json_t *v = json_string(values[i]);
      if (!v) {
        *st = stof_ctx_error(ctx, STOF_ERR_ARG, "%s: metadata value of \"%.80s\" is not valid UTF-8", path,
                             keys[i]);
        goto fail;
      }
      if (json_object_set_new(meta, keys[i], v)) {
        *st = stof_ctx_error(ctx, STOF_ERR_ARG, "%s: metadata key \"%.80s\" is not valid UTF-8", path, keys[i]);
        goto fail;
      }
    }
  }
  for (int i = 0; i < n; i++) {
    const stof_tensor *t = tensors[i];
    json_t *e = json_object(), *shape = json_array(), *offs = json_array();
    if (!e || !shape || !offs) {
      json_decref(e), json_decref(shape), json_decref(offs);
      goto nomem;
    }
    int bad = json_object_set_new(e, "dtype", json_string(st_dtype_name(t->dtype)));
    for (int d = 0; d < t->ndim; d++) bad |= json_array_append_new(shape, json_integer((json_int_t)t->shape[d]));
    bad |= json_array_append_new(offs, json_integer((json_int_t)begin[i]));
    bad |= json_array_append_new(offs, json_integer((json_int_t)(begin[i] + tensor_bytes(t))));
    bad |= json_object_set_new(e, "shape", shape);
    bad |= json_object_set_new(e, "data_offsets", offs);
    if (bad) {
      json_decref(e);
      goto nomem;
    }
    if (json_object_set_new(root, names[i], e)) {
      *st = stof_ctx_error(ctx, STOF_ERR_ARG, "%s: tensor name \"%.80s\" is not valid UTF-8", path, names[i]);
      goto fail;
    }
  }
  text = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
  if (!text) goto nomem;
  json_decref(root);
  return text;
nomem:
  *st = stof_ctx_error(ctx, STOF_ERR_NOMEM, "%s: out of memory building the header", path);
fail:
  json_decref(root);
  return NULL;
}

/* Writes the tensors' bytes to fd, in the layout's order. */
static stof_status write_tensors(stof_ctx *ctx, const char *path, int fd, int n, const char *const *names,
                                 const stof_tensor *const *tensors, const int *order) {
  for (int k = 0; k < n; k++) {
    int i = order[k];
    const stof_tensor *t = tensors[i];
    size_t nbytes = (size_t)tensor_bytes(t);
    if (nbytes == 0) continue;
    const stof_tensor *src = t;
    stof_tensor *tmp = NULL;
    if (t->device != STOF_DEVICE_CPU || !stof_tensor_is_contiguous(t)) {
      stof_status st = stof_tensor_to(t, STOF_DEVICE_CPU, &tmp); /* a contiguous host copy */
      if (st) {
        char why[1024];
        snprintf(why, sizeof why, "%s", stof_ctx_message(ctx));
        return stof_ctx_error(ctx, st, "%s: tensor \"%s\": %s", path, names[i], why);
      }
      src = tmp;
    }
    int r = write_all(fd, src->data, nbytes);
    int e = errno;
    stof_tensor_free(tmp);
    if (r)
      return stof_ctx_error(ctx, STOF_ERR_IO, "%s: writing tensor \"%s\" failed: %s", path, names[i],
                            strerror(e));
  }
  return STOF_OK;
}

stof_status stof_st_save(stof_ctx *ctx, const char *path, int n, const char *const *names,
                         const stof_tensor *const *tensors, int nmeta, const char *const *meta_keys,
                         const char *const *meta_values) {
  stof_status st = check_save_args(ctx, path, n, names, tensors, nmeta, meta_keys, meta_values);
  if (st) return st;
  size_t norder = sizeof(int) * (size_t)n, nbegin = sizeof(uint64_t) * (size_t)n;
  int *order = stof_ctx_alloc(ctx, norder);
  uint64_t *begin = order ? stof_ctx_alloc(ctx, nbegin) : NULL;
  char *text = NULL, *tmp = NULL;
  size_t tmpn = strlen(path) + 48;
  if (!begin) {
    st = STOF_ERR_NOMEM;
    goto done;
  }
  if ((st = plan_layout(ctx, path, n, names, tensors, order, begin))) goto done;
  if (!(text = build_header(ctx, path, n, names, tensors, begin, nmeta, meta_keys, meta_values, &st))) goto done;
  size_t len = strlen(text), padded = (len + 7) & ~(size_t)7; /* as Hugging Face's writer */
  unsigned char lenbytes[8];
  for (int i = 0; i < 8; i++) lenbytes[i] = (unsigned char)((uint64_t)padded >> (8 * i));
  static const char spaces[8] = "        ";

  if (!(tmp = stof_ctx_alloc(ctx, tmpn))) {
    st = STOF_ERR_NOMEM;
    goto done;
  }
  snprintf(tmp, tmpn, "%s.tmp.%ld.%llx", path, (long)getpid(), (unsigned long long)stof_ctx_rand_u64(ctx));
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    st = stof_ctx_error(ctx, STOF_ERR_IO, "%s: cannot create %s: %s", path, tmp, strerror(errno));
    goto done;
  }
  if (write_all(fd, lenbytes, 8) || write_all(fd, text, len) || write_all(fd, spaces, padded - len)) {
    st = stof_ctx_error(ctx, STOF_ERR_IO, "%s: writing the header to %s failed: %s", path, tmp, strerror(errno));
    close(fd);
    unlink(tmp);
    goto done;
  }
  if ((st = write_tensors(ctx, path, fd, n, names, tensors, order))) {
    close(fd);
    unlink(tmp);
    goto done;
  }
  int bad = fsync(fd) != 0, e = errno;
  if (close(fd) != 0 && !bad) bad = 1, e = errno;
  if (bad) {
    st = stof_ctx_error(ctx, STOF_ERR_IO, "%s: writing %s failed: %s", path, tmp, strerror(e));
    unlink(tmp);
    goto done;
  }
  if (rename(tmp, path) != 0) {
    st = stof_ctx_error(ctx, STOF_ERR_IO, "%s: cannot install %s: %s", path, tmp, strerror(errno));
    unlink(tmp);
  }
done:
  free(text);
  if (tmp) stof_ctx_dealloc(ctx, tmp, tmpn);
  if (begin) stof_ctx_dealloc(ctx, begin, nbegin);
  if (order) stof_ctx_dealloc(ctx, order, norder);
  return st;
}
