/*
 * Tests of safetensors reading and writing (core/safetensors.c): round trips of random
 * tensors of every dtype (scalar, zero-size and strided inputs), metadata, the exact byte
 * layout written, every malformed file the reader must refuse (built byte by byte in a
 * temporary folder) with its status and message, save's argument errors, copy-on-write
 * of loaded tensors, random corruption of a valid header, and failure of each allocation
 * in turn without leaks.
 */
#include "testutil.h"

#include <dirent.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

/* ---------------------------------------------------------------- files */

static char tmpdir[64];

static int make_tmpdir(void **state) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/stof-st-test-XXXXXX");
  return mkdtemp(tmpdir) ? 0 : -1;
}

static int remove_tmpdir(void **state) {
  DIR *d = opendir(tmpdir);
  if (d) {
    struct dirent *e;
    char p[512];
    while ((e = readdir(d)) != NULL) {
      if (e->d_name[0] == '.') continue;
      snprintf(p, sizeof p, "%s/%s", tmpdir, e->d_name);
      unlink(p);
    }
    closedir(d);
  }
  rmdir(tmpdir);
  return 0;
}

/* tmpdir/name into a static buffer (one of four, so that several can be live). */
static const char *tpath(const char *name) {
  static char buf[4][512];
  static int k;
  k = (k + 1) % 4;
  snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
  return buf[k];
}

static void write_bytes(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  if (n) assert_int_equal(fwrite(data, 1, n, f), n);
  assert_int_equal(fclose(f), 0);
}

/* A file with header text (length written as given, or as its strlen when hlen < 0) and
 * ndata bytes of data (pattern). */
static const char *write_file(const char *name, const char *header, long long hlen, size_t ndata) {
  size_t len = strlen(header);
  uint64_t h = hlen < 0 ? (uint64_t)len : (uint64_t)hlen;
  unsigned char *buf = malloc(8 + len + ndata + 1);
  assert_non_null(buf);
  for (int i = 0; i < 8; i++) buf[i] = (unsigned char)(h >> (8 * i));
  memcpy(buf + 8, header, len);
  for (size_t i = 0; i < ndata; i++) buf[8 + len + i] = (unsigned char)(i * 37 + 11);
  const char *path = tpath(name);
  write_bytes(path, buf, 8 + len + ndata);
  free(buf);
  return path;
}

static unsigned char *read_all(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  long sz = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *p = malloc((size_t)sz + 1);
  assert_non_null(p);
  assert_int_equal(fread(p, 1, (size_t)sz, f), (size_t)sz);
  fclose(f);
  *n = (size_t)sz;
  return p;
}

/* Files in tmpdir whose name starts with prefix. */
static int count_files(const char *prefix) {
  DIR *d = opendir(tmpdir);
  assert_non_null(d);
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
  closedir(d);
  return n;
}

/* ---------------------------------------------------------------- tensors */

/* Element n (row-major over the shape) of t, whatever its strides. */
static double nth(const stof_tensor *t, int64_t n) {
  int64_t off = 0;
  for (int d = t->ndim - 1; d >= 0; d--) {
    off += (n % t->shape[d]) * t->strides[d];
    n /= t->shape[d];
  }
  return stof_tensor_load(t, off);
}

/* got (as loaded) has want's dtype, shape and values (exactly). */
static void assert_same_tensor(const stof_tensor *got, const stof_tensor *want) {
  assert_int_equal(got->dtype, want->dtype);
  assert_int_equal(got->device, STOF_DEVICE_CPU);
  assert_int_equal(got->ndim, want->ndim);
  for (int d = 0; d < want->ndim; d++) assert_int_equal(got->shape[d], want->shape[d]);
  assert_true(stof_tensor_is_contiguous(got));
  int64_t n = stof_tensor_numel(want);
  for (int64_t i = 0; i < n; i++) {
    double g = stof_tensor_load(got, i), w = nth(want, i);
    if (!(g == w)) fail_msg("element %lld: got %.17g, want %.17g", (long long)i, g, w);
  }
}

/* A random CPU tensor: floats in [-3, 3) (never 0), ints in [-1e6, 1e6), bools. */
static stof_tensor *rand_tensor(stof_ctx *ctx, stof_dtype dt, int ndim, const int64_t *shape, uint64_t *seed) {
  stof_tensor *t = NULL;
  TU_OK(ctx, stof_tensor_new(ctx, dt, ndim, shape, STOF_DEVICE_CPU, &t));
  int64_t n = stof_tensor_numel(t);
  for (int64_t i = 0; i < n; i++) {
    double v = tu_uniform(seed, -3, 3);
    if (dt == STOF_DTYPE_I64 || dt == STOF_DTYPE_I32) v = floor(v * 333333.0) + 1;
    if (dt == STOF_DTYPE_BOOL) v = v > 0;
    stof_tensor_store(t, i, v);
  }
  return t;
}

/* ---------------------------------------------------------------- round trips */

static void save_load_round_trips_random_tensors_of_every_dtype(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  uint64_t seed = 0x5afe;
  enum { N = 11 };
  stof_tensor *src[N];
  src[0] = rand_tensor(ctx, STOF_DTYPE_F32, 2, TU_SHAPE(3, 5), &seed);
  src[1] = rand_tensor(ctx, STOF_DTYPE_F16, 3, TU_SHAPE(4, 2, 3), &seed);
  src[2] = rand_tensor(ctx, STOF_DTYPE_BF16, 1, TU_SHAPE(7), &seed);
  src[3] = rand_tensor(ctx, STOF_DTYPE_I64, 2, TU_SHAPE(2, 3), &seed);
  src[4] = rand_tensor(ctx, STOF_DTYPE_F32, 0, NULL, &seed);          /* scalar */
  src[5] = rand_tensor(ctx, STOF_DTYPE_F32, 2, TU_SHAPE(0, 3), &seed); /* zero-size */
  src[6] = rand_tensor(ctx, STOF_DTYPE_F64, 2, TU_SHAPE(2, 2), &seed);
  src[7] = rand_tensor(ctx, STOF_DTYPE_I32, 1, TU_SHAPE(9), &seed);
  src[8] = rand_tensor(ctx, STOF_DTYPE_BOOL, 1, TU_SHAPE(5), &seed);
  /* strided: the transpose of a 4x6 f32 buffer, and every other column of an f16 one */
  stof_tensor *base = rand_tensor(ctx, STOF_DTYPE_F32, 2, TU_SHAPE(4, 6), &seed);
  stof_tensor *base16 = rand_tensor(ctx, STOF_DTYPE_F16, 2, TU_SHAPE(3, 8), &seed);
  TU_OK(ctx, stof_tensor_wrap(ctx, STOF_DTYPE_F32, 2, TU_SHAPE(6, 4), TU_SHAPE(1, 6), base->data,
                              STOF_DEVICE_CPU, &src[9]));
  TU_OK(ctx, stof_tensor_wrap(ctx, STOF_DTYPE_F16, 2, TU_SHAPE(3, 4), TU_SHAPE(8, 2), base16->data,
                              STOF_DEVICE_CPU, &src[10]));
  assert_false(stof_tensor_is_contiguous(src[9]));
  const char *names[N] = {"model.w",    "h16",   "bert.embeddings.bf", "ids", "scale", "empty",
                          "f64", "i32", "mask", "transposed", "every_other"};
  const char *path = tpath("round.safetensors");
  TU_OK(ctx, stof_st_save(ctx, path, N, names, (const stof_tensor *const *)src, 0, NULL, NULL));
  assert_int_equal(count_files("round.safetensors.tmp"), 0);

  stof_st_file *f = NULL;
  TU_OK(ctx, stof_st_open(ctx, path, &f));
  assert_string_equal(stof_st_path(f), path);
  assert_int_equal(stof_st_count(f), N);
  for (int i = 1; i < N; i++) assert_true(strcmp(stof_st_name(f, i - 1), stof_st_name(f, i)) < 0);
  assert_null(stof_st_name(f, N));
  assert_null(stof_st_name(f, -1));
  assert_int_equal(stof_st_find(f, "nope"), -1);
  assert_int_equal(stof_st_find(f, ""), -1);
  for (int k = 0; k < N; k++) {
    int i = stof_st_find(f, names[k]);
    assert_true(i >= 0);
    assert_string_equal(stof_st_name(f, i), names[k]);
    stof_tensor *t = NULL;
    TU_OK(ctx, stof_st_tensor(f, i, &t));
    assert_false(t->owned); /* borrowed from the mapping */
    assert_same_tensor(t, src[k]);
    stof_tensor_free(t);
  }
  stof_tensor *t = NULL;
  TU_ERR(ctx, stof_st_tensor(f, N, &t), STOF_ERR_RANGE, "tensor index 11 out of range (11 tensors)");
  assert_null(t);
  assert_int_equal(stof_st_metadata_count(f), 0);
  assert_null(stof_st_metadata(f, "format"));
  stof_st_close(f);
  for (int k = 0; k < N; k++) stof_tensor_free(src[k]);
  stof_tensor_free(base);
  stof_tensor_free(base16);
  tu_ctx_free(ctx, &h);
}

static void metadata_round_trips_and_is_looked_up_by_key(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  uint64_t seed = 77;
  stof_tensor *a = rand_tensor(ctx, STOF_DTYPE_F32, 1, TU_SHAPE(3), &seed);
  const char *names[] = {"a"};
  const char *keys[] = {"format", "note", "empty"};
  const char *values[] = {"pt", "quotes \" and \\ and \xc3\xa9", ""};
  const char *path = tpath("meta.safetensors");
  TU_OK(ctx, stof_st_save(ctx, path, 1, names, (const stof_tensor *const *)&a, 3, keys, values));
  stof_st_file *f = NULL;
  TU_OK(ctx, stof_st_open(ctx, path, &f));
  assert_int_equal(stof_st_metadata_count(f), 3);
  assert_string_equal(stof_st_metadata_key(f, 0), "empty"); /* sorted */
  assert_string_equal(stof_st_metadata_key(f, 1), "format");
  assert_string_equal(stof_st_metadata_key(f, 2), "note");
  assert_null(stof_st_metadata_key(f, 3));
  for (int i = 0; i < 3; i++) assert_string_equal(stof_st_metadata(f, keys[i]), values[i]);
  assert_null(stof_st_metadata(f, "missing"));
  assert_int_equal(stof_st_count(f), 1);
  stof_st_close(f);
  stof_tensor_free(a);
  tu_ctx_free(ctx, &h);
}

static void saved_bytes_follow_the_layout_exactly(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  uint64_t seed = 4242;
  stof_tensor *ts[2];
  ts[0] = rand_tensor(ctx, STOF_DTYPE_F32, 2, TU_SHAPE(2, 3), &seed);
  ts[1] = rand_tensor(ctx, STOF_DTYPE_BF16, 1, TU_SHAPE(5), &seed);
  const char *names[] = {"z.w", "a.b"}; /* kept in the given order */
  const char *keys[] = {"format"}, *values[] = {"pt"};
  const char *path = tpath("layout.safetensors");
  TU_OK(ctx, stof_st_save(ctx, path, 2, names, (const stof_tensor *const *)ts, 1, keys, values));
  size_t n = 0;
  unsigned char *b = read_all(path, &n);
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--) hlen = hlen << 8 | b[i];
  assert_int_equal(hlen % 8, 0);
  assert_int_equal(n, 8 + hlen + 24 + 10);
  const char *want = "{\"__metadata__\":{\"format\":\"pt\"},"
                     "\"z.w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
                     "\"a.b\":{\"dtype\":\"BF16\",\"shape\":[5],\"data_offsets\":[24,34]}}";
  size_t wl = strlen(want);
  assert_true(hlen >= wl && hlen < wl + 8);
  assert_memory_equal(b + 8, want, wl);
  for (size_t i = wl; i < hlen; i++) assert_int_equal(b[8 + i], ' ');
  assert_memory_equal(b + 8 + hlen, ts[0]->data, 24);
  assert_memory_equal(b + 8 + hlen + 24, ts[1]->data, 10);
  /* the header is JSON that any reader takes */
  json_error_t jerr;
  json_t *j = json_loadb((const char *)b + 8, hlen, 0, &jerr);
  assert_non_null(j);
  json_decref(j);
  free(b);
  /* saving again replaces the file with the same bytes */
  TU_OK(ctx, stof_st_save(ctx, path, 2, names, (const stof_tensor *const *)ts, 1, keys, values));
  size_t n2 = 0;
  unsigned char *b2 = read_all(path, &n2);
  assert_int_equal(n2, n);
  free(b2);
  stof_tensor_free(ts[0]);
  stof_tensor_free(ts[1]);
  tu_ctx_free(ctx, &h);
}

static void empty_data_section_and_zero_element_tensors_load(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  stof_st_file *f = NULL;
  TU_OK(ctx, stof_st_open(ctx, write_file("empty.safetensors", "{}      ", -1, 0), &f));
  assert_int_equal(stof_st_count(f), 0);
  stof_st_close(f);
  TU_OK(ctx, stof_st_open(ctx, write_file("zero.safetensors",
                                          "{\"e\":{\"dtype\":\"F32\",\"shape\":[0,3],\"data_offsets\":[0,0]},"
                                          "\"f\":{\"dtype\":\"I64\",\"shape\":[4,0],\"data_offsets\":[0,0]}}",
                                          -1, 0),
                          &f));
  assert_int_equal(stof_st_count(f), 2);
  stof_tensor *t = NULL;
  TU_OK(ctx, stof_st_tensor(f, stof_st_find(f, "f"), &t));
  assert_int_equal(t->dtype, STOF_DTYPE_I64);
  assert_int_equal(stof_tensor_numel(t), 0);
  assert_int_equal(t->shape[0], 4);
  stof_tensor_free(t);
  stof_st_close(f);
  /* saving nothing at all gives a valid file too */
  const char *path = tpath("nothing.safetensors");
  TU_OK(ctx, stof_st_save(ctx, path, 0, NULL, NULL, 0, NULL, NULL));
  TU_OK(ctx, stof_st_open(ctx, path, &f));
  assert_int_equal(stof_st_count(f), 0);
  stof_st_close(f);
  stof_st_close(NULL);
  tu_ctx_free(ctx, &h);
}

static void writing_into_a_loaded_tensor_never_changes_the_file(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  uint64_t seed = 9;
  stof_tensor *a = rand_tensor(ctx, STOF_DTYPE_F32, 1, TU_SHAPE(4), &seed);
  const char *names[] = {"a"};
  const char *path = tpath("cow.safetensors");
  TU_OK(ctx, stof_st_save(ctx, path, 1, names, (const stof_tensor *const *)&a, 0, NULL, NULL));
  stof_st_file *f = NULL;
  stof_tensor *t = NULL;
  TU_OK(ctx, stof_st_open(ctx, path, &f));
  TU_OK(ctx, stof_st_tensor(f, 0, &t));
  stof_tensor_fill(t, 123.5);
  assert_true(stof_tensor_load(t, 3) == 123.5);
  stof_tensor_free(t);
  stof_st_close(f);
  TU_OK(ctx, stof_st_open(ctx, path, &f));
  TU_OK(ctx, stof_st_tensor(f, 0, &t));
  assert_same_tensor(t, a);
  stof_tensor_free(t);
  stof_st_close(f);
  stof_tensor_free(a);
  tu_ctx_free(ctx, &h);
}

static void unaligned_tensor_is_copied_once_and_u8_loads_as_bool(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  /* data: byte 0 a U8, bytes [1, 5) an f32 (1.5f = 0x3fc00000, little-endian) */
  const char *hdr = "{\"flag\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                    "\"x\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[1,5]}}";
  size_t len = strlen(hdr);
  unsigned char buf[512];
  for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)len >> (8 * i));
  memcpy(buf + 8, hdr, len);
  const unsigned char data[5] = {7, 0x00, 0x00, 0xc0, 0x3f};
  memcpy(buf + 8 + len, data, 5);
  const char *path = tpath("unaligned.safetensors");
  write_bytes(path, buf, 8 + len + 5);
  stof_st_file *f = NULL;
  TU_OK(ctx, stof_st_open(ctx, path, &f));
  stof_tensor *x = NULL, *flag = NULL;
  TU_OK(ctx, stof_st_tensor(f, stof_st_find(f, "x"), &x));
  TU_OK(ctx, stof_st_tensor(f, stof_st_find(f, "flag"), &flag));
  assert_true(stof_tensor_load(x, 0) == 1.5);
  assert_int_equal((uintptr_t)x->data % 4, 0);
  assert_int_equal(flag->dtype, STOF_DTYPE_BOOL);
  assert_int_equal(((unsigned char *)flag->data)[0], 7); /* bytes kept as they are */
  stof_st_close(f);
  assert_true(stof_tensor_load(x, 0) == 1.5); /* the copy outlives the file */
  stof_tensor_free(x);
  stof_tensor_free(flag);
  tu_ctx_free(ctx, &h);
}

/* ---------------------------------------------------------------- malformed files */

/* Opening path fails with status and a message containing substr, leaks nothing and
 * returns no file. */
#define BAD_FILE(path, status, substr)                          \
  do {                                                          \
    stof_st_file *bf_ = (stof_st_file *)1;                      \
    TU_ERR(ctx, stof_st_open(ctx, (path), &bf_), status, substr); \
    assert_null(bf_);                                           \
    assert_int_equal(stof_ctx_bytes_in_use(ctx), 0);            \
  } while (0)

static void malformed_files_fail_with_messages_naming_file_tensor_and_cause(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  char want[1024];
  const char *p;
  /* short files */
  p = tpath("short.safetensors");
  write_bytes(p, "\x01\x02\x03\x04\x05", 5);
  snprintf(want, sizeof want, "%s: file is 5 bytes, shorter than the 8-byte header length", p);
  BAD_FILE(p, STOF_ERR_PARSE, want);
  p = tpath("zero.bytes");
  write_bytes(p, "", 0);
  BAD_FILE(p, STOF_ERR_PARSE, "file is 0 bytes");
  /* header length past the end: 8 + 504 bytes */
  {
    char hdr[505];
    memset(hdr, ' ', 504);
    hdr[504] = 0;
    p = write_file("model.safetensors", hdr, 1000000, 0);
    snprintf(want, sizeof want, "%s: header length 1000000 runs past the end of the file (512 bytes)", p);
    BAD_FILE(p, STOF_ERR_PARSE, want);
    p = write_file("huge.safetensors", "{}", (long long)0x7fffffffffffffffLL, 0);
    BAD_FILE(p, STOF_ERR_PARSE, "header length 9223372036854775807 runs past the end");
  }
  /* invalid JSON, with jansson's line and column */
  p = write_file("badjson.safetensors", "{\"a\":\n {\"dtype\": }", -1, 0);
  BAD_FILE(p, STOF_ERR_PARSE, "header is not valid JSON: line 2, column");
  BAD_FILE(write_file("hdr0.safetensors", "", -1, 16), STOF_ERR_PARSE, "header is not valid JSON");
  BAD_FILE(write_file("dup.safetensors",
                      "{\"a\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]},"
                      "\"a\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[4,8]}}", -1, 8),
           STOF_ERR_PARSE, "duplicate object key");
  /* not an object */
  BAD_FILE(write_file("array.safetensors", "[1, 2]", -1, 0), STOF_ERR_PARSE, "header is an array, not a JSON object");
  BAD_FILE(write_file("entry.safetensors", "{\"w\": 3}", -1, 0), STOF_ERR_PARSE,
           "tensor \"w\": entry is an integer, not an object");
  BAD_FILE(write_file("meta.safetensors", "{\"__metadata__\": {\"k\": 1}}", -1, 0), STOF_ERR_PARSE,
           "\"__metadata__\": the value of \"k\" is an integer, not a string");
  BAD_FILE(write_file("meta2.safetensors", "{\"__metadata__\": [\"k\"]}", -1, 0), STOF_ERR_PARSE,
           "\"__metadata__\" is an array, not an object of strings");
  BAD_FILE(write_file("noname.safetensors", "{\"\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}}", -1, 4),
           STOF_ERR_PARSE, "a tensor has an empty name");
  /* overlapping, truncated and reversed offsets */
  p = write_file("overlap.safetensors",
                 "{\"b\":{\"dtype\":\"F32\",\"shape\":[16],\"data_offsets\":[32,96]},"
                 "\"c\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[96,104]},"
                 "\"a\":{\"dtype\":\"F32\",\"shape\":[16],\"data_offsets\":[0,64]}}",
                 -1, 104);
  snprintf(want, sizeof want, "%s: tensors \"a\" and \"b\" overlap (bytes [0, 64) and [32, 96))", p);
  BAD_FILE(p, STOF_ERR_PARSE, want);
  BAD_FILE(write_file("inside.safetensors",
                      "{\"big\":{\"dtype\":\"U8\",\"shape\":[100],\"data_offsets\":[0,100]},"
                      "\"mid\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[60,64]},"
                      "\"end\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[98,100]}}",
                      -1, 100),
           STOF_ERR_PARSE, "tensors \"big\" and \"mid\" overlap (bytes [0, 100) and [60, 64))");
  p = write_file("x.safetensors", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1024],\"data_offsets\":[0,4096]}}", -1,
                 1024);
  snprintf(want, sizeof want, "%s: tensor \"w\": data_offsets end 4096 past the data section (1024 bytes)", p);
  BAD_FILE(p, STOF_ERR_PARSE, want);
  BAD_FILE(write_file("rev.safetensors", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}", -1, 8),
           STOF_ERR_PARSE, "tensor \"w\": data_offsets [8, 4] begin after end");
  BAD_FILE(write_file("offs.safetensors", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", -1, 8),
           STOF_ERR_PARSE, "tensor \"w\": data_offsets must be a list [begin, end] of two integers");
  BAD_FILE(write_file("offs2.safetensors", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", -1,
                      8),
           STOF_ERR_PARSE, "data_offsets [-4, 0] must be non-negative integers");
  BAD_FILE(write_file("offs3.safetensors", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4.0]}}", -1,
                      8),
           STOF_ERR_PARSE, "data_offsets [0, 4.0] must be non-negative integers");
  BAD_FILE(write_file("nooffs.safetensors", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1]}}", -1, 8), STOF_ERR_PARSE,
           "tensor \"w\": no \"data_offsets\"");
  /* dtypes */
  BAD_FILE(write_file("f8.safetensors", "{\"w\":{\"dtype\":\"F8_E4M3\",\"shape\":[4],\"data_offsets\":[0,4]}}", -1,
                      4),
           STOF_ERR_TYPE, "tensor \"w\": unknown dtype \"F8_E4M3\" (supported: F32, F16, BF16, F64, I64, I32, BOOL, U8)");
  BAD_FILE(write_file("dt.safetensors", "{\"w\":{\"dtype\":32,\"shape\":[4],\"data_offsets\":[0,16]}}", -1, 16),
           STOF_ERR_PARSE, "tensor \"w\": dtype is an integer, not a string");
  BAD_FILE(write_file("nodt.safetensors", "{\"w\":{\"shape\":[4],\"data_offsets\":[0,16]}}", -1, 16), STOF_ERR_PARSE,
           "tensor \"w\": no \"dtype\"");
  /* shapes */
  p = write_file("mismatch.safetensors",
                 "{\"bert.embeddings.word_embeddings.weight\":{\"dtype\":\"F16\",\"shape\":[10,8],"
                 "\"data_offsets\":[0,100]}}",
                 -1, 160);
  snprintf(want, sizeof want,
           "%s: tensor \"bert.embeddings.word_embeddings.weight\": data_offsets [0, 100] hold 100 bytes, its shape "
           "[10, 8] float16 needs 160",
           p);
  BAD_FILE(p, STOF_ERR_SHAPE, want);
  BAD_FILE(write_file("neg.safetensors", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,-1],\"data_offsets\":[0,0]}}", -1, 0),
           STOF_ERR_SHAPE, "tensor \"w\": shape must be a list of non-negative integers, entry 1 is -1");
  BAD_FILE(write_file("real.safetensors", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,8]}}", -1, 8),
           STOF_ERR_SHAPE, "entry 0 is 2.5");
  BAD_FILE(write_file("str.safetensors", "{\"w\":{\"dtype\":\"F32\",\"shape\":[\"2\"],\"data_offsets\":[0,8]}}", -1, 8),
           STOF_ERR_SHAPE, "entry 0 is \"2\"");
  BAD_FILE(write_file("notlist.safetensors", "{\"w\":{\"dtype\":\"F32\",\"shape\":4,\"data_offsets\":[0,16]}}", -1,
                      16),
           STOF_ERR_SHAPE, "tensor \"w\": shape is an integer, not a list of non-negative integers");
  BAD_FILE(write_file("dims.safetensors",
                      "{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", -1, 4),
           STOF_ERR_SHAPE, "tensor \"w\": shape has 9 dims, at most 8 are supported");
  BAD_FILE(write_file("overflow.safetensors",
                      "{\"w\":{\"dtype\":\"F64\",\"shape\":[4294967296,4294967296,16],\"data_offsets\":[0,0]}}", -1,
                      0),
           STOF_ERR_SHAPE, "needs more than 2^64");
  BAD_FILE(write_file("overflow2.safetensors",
                      "{\"w\":{\"dtype\":\"F64\",\"shape\":[4294967296,1073741824],\"data_offsets\":[0,0]}}", -1, 0),
           STOF_ERR_SHAPE, "needs more than 2^64");
  /* paths */
  p = tpath("no-such.safetensors");
  snprintf(want, sizeof want, "%s: cannot open: No such file or directory", p);
  BAD_FILE(p, STOF_ERR_IO, want);
  BAD_FILE(tmpdir, STOF_ERR_IO, "not a regular file");
  BAD_FILE("", STOF_ERR_ARG, "safetensors: empty path");
  tu_ctx_free(ctx, &h);
}

static void random_header_corruption_never_crashes_or_leaks(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  uint64_t seed = 0xc0ffee;
  stof_tensor *ts[3];
  ts[0] = rand_tensor(ctx, STOF_DTYPE_F32, 2, TU_SHAPE(3, 4), &seed);
  ts[1] = rand_tensor(ctx, STOF_DTYPE_F16, 1, TU_SHAPE(6), &seed);
  ts[2] = rand_tensor(ctx, STOF_DTYPE_I64, 0, NULL, &seed);
  const char *names[] = {"w", "b", "step"};
  const char *src = tpath("fuzz-src.safetensors");
  TU_OK(ctx, stof_st_save(ctx, src, 3, names, (const stof_tensor *const *)ts, 0, NULL, NULL));
  size_t n = 0;
  unsigned char *orig = read_all(src, &n);
  unsigned char *b = malloc(n);
  assert_non_null(b);
  const char *p = tpath("fuzz.safetensors");
  static const char alphabet[] = "0123456789[]{},:\"- eFIU";
  int ok = 0, failed = 0;
  size_t base = stof_ctx_bytes_in_use(ctx);
  for (int it = 0; it < 400; it++) {
    memcpy(b, orig, n);
    int nflip = 1 + (int)(tu_splitmix(&seed) % 3);
    for (int k = 0; k < nflip; k++) {
      size_t at = (size_t)(tu_splitmix(&seed) % (it % 10 == 0 ? 8 : n < 120 ? n : 120));
      b[at] = (unsigned char)alphabet[tu_splitmix(&seed) % (sizeof alphabet - 1)];
    }
    size_t len = n - (it % 7 == 0 ? (size_t)(tu_splitmix(&seed) % 16) : 0); /* some truncated */
    write_bytes(p, b, len);
    stof_st_file *f = NULL;
    stof_status st = stof_st_open(ctx, p, &f);
    if (st == STOF_OK) {
      ok++;
      for (int i = 0; i < stof_st_count(f); i++) {
        stof_tensor *t = NULL;
        TU_OK(ctx, stof_st_tensor(f, i, &t));
        int64_t m = stof_tensor_numel(t);
        volatile double sink = 0;
        for (int64_t e = 0; e < m; e++) sink += stof_tensor_load(t, e); /* in bounds (ASan) */
        (void)sink;
        stof_tensor_free(t);
      }
      stof_st_close(f);
    } else {
      failed++;
      assert_null(f);
      assert_true(st == STOF_ERR_PARSE || st == STOF_ERR_TYPE || st == STOF_ERR_SHAPE);
      assert_true(strstr(stof_ctx_message(ctx), p) != NULL); /* names the file */
      stof_ctx_clear_error(ctx);
    }
    assert_int_equal(stof_ctx_bytes_in_use(ctx), base);
  }
  assert_true(failed > 100);
  print_message("header corruption: %d opened, %d refused\n", ok, failed);
  free(b);
  free(orig);
  for (int i = 0; i < 3; i++) stof_tensor_free(ts[i]);
  tu_ctx_free(ctx, &h);
}

/* ---------------------------------------------------------------- saving */

static void save_rejects_bad_names_and_leaves_nothing_behind(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  uint64_t seed = 31;
  stof_tensor *ts[2];
  ts[0] = rand_tensor(ctx, STOF_DTYPE_F32, 1, TU_SHAPE(2), &seed);
  ts[1] = rand_tensor(ctx, STOF_DTYPE_F32, 1, TU_SHAPE(3), &seed);
  const stof_tensor *const *tv = (const stof_tensor *const *)ts;
  const char *p = tpath("bad-save.safetensors");
  char want[1024];
  const char *dup[] = {"w", "w"};
  snprintf(want, sizeof want, "%s: tensor name \"w\" given twice", p);
  TU_ERR(ctx, stof_st_save(ctx, p, 2, dup, tv, 0, NULL, NULL), STOF_ERR_ARG, want);
  const char *empty[] = {"w", ""};
  TU_ERR(ctx, stof_st_save(ctx, p, 2, empty, tv, 0, NULL, NULL), STOF_ERR_ARG, "tensor 1 has an empty name");
  const char *reserved[] = {"__metadata__", "w"};
  TU_ERR(ctx, stof_st_save(ctx, p, 2, reserved, tv, 0, NULL, NULL), STOF_ERR_ARG,
         "\"__metadata__\" cannot name a tensor");
  const char *bad_utf8[] = {"w", "\xff\xfe"};
  TU_ERR(ctx, stof_st_save(ctx, p, 2, bad_utf8, tv, 0, NULL, NULL), STOF_ERR_ARG, "is not valid UTF-8");
  const char *ok[] = {"w", "v"};
  const char *keys[] = {"k", "k"}, *values[] = {"1", "2"};
  TU_ERR(ctx, stof_st_save(ctx, p, 2, ok, tv, 2, keys, values), STOF_ERR_ARG, "metadata key \"k\" given twice");
  const stof_tensor *withnull[] = {ts[0], NULL};
  TU_ERR(ctx, stof_st_save(ctx, p, 2, ok, withnull, 0, NULL, NULL), STOF_ERR_ARG, "tensor \"v\" is NULL");
  TU_ERR(ctx, stof_st_save(ctx, "", 2, ok, tv, 0, NULL, NULL), STOF_ERR_ARG, "empty path");
  TU_ERR(ctx, stof_st_save(ctx, p, -1, ok, tv, 0, NULL, NULL), STOF_ERR_ARG, "negative count");
  const char *missing = tpath("no-such-dir/w.safetensors");
  snprintf(want, sizeof want, "%s: cannot create", missing);
  TU_ERR(ctx, stof_st_save(ctx, missing, 2, ok, tv, 0, NULL, NULL), STOF_ERR_IO, want);
  assert_int_equal(count_files("bad-save"), 0);
  /* a failed save keeps the file that was there */
  TU_OK(ctx, stof_st_save(ctx, p, 1, ok, tv, 0, NULL, NULL));
  TU_ERR(ctx, stof_st_save(ctx, p, 2, dup, tv, 0, NULL, NULL), STOF_ERR_ARG, "given twice");
  stof_st_file *f = NULL;
  TU_OK(ctx, stof_st_open(ctx, p, &f));
  assert_int_equal(stof_st_count(f), 1);
  stof_st_close(f);
  assert_int_equal(count_files("bad-save"), 1);
  stof_tensor_free(ts[0]);
  stof_tensor_free(ts[1]);
  tu_ctx_free(ctx, &h);
}

static void save_of_a_gpu_tensor_without_a_gpu_names_the_tensor(void **state) {
  tu_heap h;
  stof_ctx *ctx = tu_ctx_new(&h);
  stof_tensor *g = NULL;
  stof_status st = stof_tensor_new(ctx, STOF_DTYPE_F32, 1, TU_SHAPE(4), STOF_DEVICE_CUDA, &g);
  if (st != STOF_OK) { /* no GPU here: a fake device handle that is never dereferenced */
    stof_ctx_clear_error(ctx);
    TU_OK(ctx, stof_tensor_wrap(ctx, STOF_DTYPE_F32, 1, TU_SHAPE(4), NULL, (void *)(uintptr_t)0x1000,
                                STOF_DEVICE_CUDA, &g));
    const char *names[] = {"gpu.w"};
    const char *p = tpath("gpu.safetensors");
    st = stof_st_save(ctx, p, 1, names, (const stof_tensor *const *)&g, 0, NULL, NULL);
    assert_int_not_equal(st, STOF_OK);
    TU_MSG(ctx, "tensor \"gpu.w\"");
    TU_MSG(ctx, p);
    stof_ctx_clear_error(ctx);
    assert_int_equal(count_files("gpu.safetensors"), 0);
  } else { /* on a GPU machine: round trip through the device */
    uint64_t seed = 5;
    stof_tensor *c = rand_tensor(ctx, STOF_DTYPE_F32, 1, TU_SHAPE(4), &seed);
    stof_tensor_free(g);
    TU_OK(ctx, stof_tensor_to(c, STOF_DEVICE_CUDA, &g));
    const char *names[] = {"gpu.w"};
    const char *p = tpath("gpu.safetensors");
    TU_OK(ctx, stof_st_save(ctx, p, 1, names, (const stof_tensor *const *)&g, 0, NULL, NULL));
    stof_st_file *f = NULL;
    stof_tensor *t = NULL;
    TU_OK(ctx, stof_st_open(ctx, p, &f));
    TU_OK(ctx, stof_st_tensor(f, 0, &t));
    assert_same_tensor(t, c);
    stof_tensor_free(t);
    stof_st_close(f);
    stof_tensor_free(c);
  }
  stof_tensor_free(g);
  tu_ctx_free(ctx, &h);
}

/* ---------------------------------------------------------------- allocation failures */

/* Open a file (tensors and metadata) and save it again with the heap's fail_at. Returns 1
 * when it ran to the end without an injected failure; every failure is a clean NOMEM. */
static int nomem_scenario(tu_heap *h, const char *src, const char *dst) {
  stof_ctx *ctx = stof_ctx_new(tu_alloc, h);
  if (!ctx) return 0;
  stof_st_file *f = NULL;
  stof_tensor *ts[4] = {NULL, NULL, NULL, NULL};
  const char *names[4];
  const char *step = "stof_st_open";
  stof_status st = stof_st_open(ctx, src, &f);
  if (!st) {
    step = "stof_st_tensor";
    assert_int_equal(stof_st_count(f), 4);
    for (int i = 0; i < 4 && !st; i++) {
      names[i] = stof_st_name(f, i);
      st = stof_st_tensor(f, i, &ts[i]);
    }
  }
  if (!st) {
    step = "stof_st_save";
    const char *keys[] = {"format"}, *values[] = {stof_st_metadata(f, "format")};
    st = stof_st_save(ctx, dst, 4, names, (const stof_tensor *const *)ts, 1, keys, values);
  }
  if (st) {
    if (st != STOF_ERR_NOMEM)
      fail_msg("allocation %ld failed: %s returned %s (%s), expected ERR_NOMEM", h->fail_at, step,
               stof_status_name(st), stof_ctx_message(ctx));
    assert_true(h->failed);
  } else if (h->failed) {
    fail_msg("allocation %ld failed but every call returned OK", h->fail_at);
  }
  for (int i = 0; i < 4; i++) stof_tensor_free(ts[i]);
  stof_st_close(f);
  if (stof_ctx_bytes_in_use(ctx) != 0)
    fail_msg("allocation %ld failed in %s: %zu bytes leaked", h->fail_at, step, stof_ctx_bytes_in_use(ctx));
  stof_ctx_free(ctx);
  assert_int_equal(h->live, 0);
  assert_int_equal(h->bad_size, 0);
  return st == STOF_OK && !h->failed;
}

static void nomem_at_every_allocation_fails_cleanly_without_leaks(void **state) {
  const char *src = write_file("nomem.safetensors",
                               "{\"__metadata__\":{\"format\":\"pt\",\"x\":\"y\"},"
                               "\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
                               "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[16,24]},"
                               "\"odd\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[24,25]},"
                               "\"u\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[28,32]}} ",
                               -1, 32);
  const char *dst = tpath("nomem-out.safetensors");
  tu_heap h;
  long n;
  for (n = 1; n < 10000; n++) {
    memset(&h, 0, sizeof h);
    h.fail_at = n;
    if (nomem_scenario(&h, src, dst)) break;
  }
  assert_true(n < 10000);
  assert_true(n > 15); /* the loop really injected failures in open, tensor and save */
  assert_int_equal(h.nalloc, n - 1);
  print_message("safetensors failure injection: %ld allocations, each failed in turn\n", n - 1);
}

int run_safetensors_tests(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(save_load_round_trips_random_tensors_of_every_dtype),
      cmocka_unit_test(metadata_round_trips_and_is_looked_up_by_key),
      cmocka_unit_test(saved_bytes_follow_the_layout_exactly),
      cmocka_unit_test(empty_data_section_and_zero_element_tensors_load),
      cmocka_unit_test(writing_into_a_loaded_tensor_never_changes_the_file),
      cmocka_unit_test(unaligned_tensor_is_copied_once_and_u8_loads_as_bool),
      cmocka_unit_test(malformed_files_fail_with_messages_naming_file_tensor_and_cause),
      cmocka_unit_test(random_header_corruption_never_crashes_or_leaks),
      cmocka_unit_test(save_rejects_bad_names_and_leaves_nothing_behind),
      cmocka_unit_test(save_of_a_gpu_tensor_without_a_gpu_names_the_tensor),
      cmocka_unit_test(nomem_at_every_allocation_fails_cleanly_without_leaks),
  };
  return cmocka_run_group_tests_name("safetensors", tests, make_tmpdir, remove_tmpdir);
}
