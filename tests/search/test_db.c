/*
 * test_search: the tuning database (search/db.c). Records round-trip exactly; the best
 * record is the fastest successful one of this version; truncated and malformed lines are
 * skipped, counted and never lose the others; four processes appending at once keep every
 * record whole; bad records and bad paths are clear errors; allocation failures are clean.
 */
#include "../core/testutil.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <stof/search.h>

/* A fresh file name in a fresh directory (removed by the OS's /tmp cleaning, not by us:
 * a failing test leaves its file to look at). */
static void tmp_path(char *buf, size_t n, const char *name) {
  char dir[] = "/tmp/stof-db-XXXXXX";
  assert_non_null(mkdtemp(dir));
  snprintf(buf, n, "%s/%s", dir, name);
}

static long file_size(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0 ? (long)sb.st_size : -1;
}

static void write_file(const char *path, const char *text, const char *mode) {
  FILE *f = fopen(path, mode);
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

/* Waits for the n children; each must have exited with status 0. */
static void wait_all(const pid_t *pid, int n) {
  for (int p = 0; p < n; p++) {
    int ws = 0;
    assert_int_equal(waitpid(pid[p], &ws, 0), pid[p]);
    assert_true(WIFEXITED(ws));
    assert_int_equal(WEXITSTATUS(ws), 0);
  }
}

/* The start of a valid line of this version for workload "w" on device "d". */
#define LINE_WD "{\"v\":1,\"stof\":\"" STOF_VERSION "\",\"workload\":\"w\",\"device\":\"d\","

static stof_db_record rec(const char *workload, const char *device, const char *scheme, const double *t, int nt) {
  static const char *const names[] = {"C.tile_i", "C.tile_j", "B.location"};
  static const int64_t values[] = {2, 0, -1};
  return (stof_db_record){.workload = workload, .device = device, .scheme = scheme, .nknob = 3,
                          .knob_name = names, .knob_value = values, .ntime = nt, .time_ms = t,
                          .status = STOF_OK};
}

static void db_round_trips_records_and_finds_the_best(void **state) {
  (void)state;
  tu_heap heap;
  stof_ctx *ctx = tu_ctx_new(&heap);
  char path[256];
  tmp_path(path, sizeof path, "tune.jsonl");
  stof_db *db;
  TU_OK(ctx, stof_db_open(ctx, path, &db)); /* creates the file */
  assert_int_equal(stof_db_count(db), 0);
  assert_int_equal(file_size(path), 0);
  const double t1[] = {2.5, 2.0, 1.9}, t2[] = {1.0, 1.25}, t3[] = {3.0}, t4[] = {0.1 + 0.2, 0.5};
  TU_OK(ctx, stof_db_append(db, &(stof_db_record){.workload = "bert/1x128", .device = "gpu0", .scheme = "0012",
                                                  .ntime = 3, .time_ms = t1, .status = STOF_OK}));
  stof_db_record fast = rec("bert/1x128", "gpu0", "0011", t2, 2);
  TU_OK(ctx, stof_db_append(db, &fast));
  TU_OK(ctx, stof_db_append(db, &(stof_db_record){.workload = "bert/1x128", .device = "gpu0", .scheme = "0111",
                                                  .status = STOF_ERR_COMPILE,
                                                  .message = "nvrtc: \"quotes\", tabs\t and é"}));
  TU_OK(ctx, stof_db_append(db, &(stof_db_record){.workload = "bert/1x128", .device = "gpu1", .scheme = "0000",
                                                  .ntime = 2, .time_ms = t4, .status = STOF_OK}));
  TU_OK(ctx, stof_db_append(db, &(stof_db_record){.workload = "bert/1x128", .device = "gpu0", .ntime = 1,
                                                  .time_ms = t3, .status = STOF_OK}));
  assert_int_equal(stof_db_count(db), 5);
  int best;
  TU_OK(ctx, stof_db_best(db, "bert/1x128", "gpu0", &best));
  assert_int_equal(best, 1);
  stof_db_free(db);

  /* a second process's view: the file alone */
  TU_OK(ctx, stof_db_open(ctx, path, &db));
  assert_int_equal(stof_db_count(db), 5);
  assert_int_equal(stof_db_nskipped(db), 0);
  TU_OK(ctx, stof_db_best(db, "bert/1x128", "gpu0", &best));
  assert_int_equal(best, 1);
  stof_db_record r;
  TU_OK(ctx, stof_db_get(db, best, &r));
  assert_string_equal(r.workload, "bert/1x128");
  assert_string_equal(r.device, "gpu0");
  assert_string_equal(r.scheme, "0011");
  assert_string_equal(r.version, STOF_VERSION);
  assert_int_equal(r.nknob, 3);
  for (int k = 0; k < 3; k++) {
    assert_string_equal(r.knob_name[k], fast.knob_name[k]);
    assert_int_equal(r.knob_value[k], fast.knob_value[k]);
  }
  assert_int_equal(r.ntime, 2);
  assert_true(r.time_ms[0] == 1.0 && r.time_ms[1] == 1.25);
  assert_true(r.median_ms == 1.125);
  assert_int_equal(r.status, STOF_OK);
  assert_null(r.message);
  TU_OK(ctx, stof_db_get(db, 0, &r));
  assert_true(r.median_ms == 2.0 && r.nknob == 0 && strcmp(r.scheme, "0012") == 0);
  TU_OK(ctx, stof_db_get(db, 2, &r));
  assert_int_equal(r.status, STOF_ERR_COMPILE);
  assert_string_equal(r.message, "nvrtc: \"quotes\", tabs\t and é");
  assert_int_equal(r.ntime, 0);
  TU_OK(ctx, stof_db_get(db, 3, &r));
  assert_true(r.time_ms[0] == 0.1 + 0.2); /* doubles round-trip exactly */
  TU_OK(ctx, stof_db_get(db, 4, &r));
  assert_string_equal(r.scheme, "");
  TU_OK(ctx, stof_db_best(db, "bert/1x128", "gpu1", &best));
  assert_int_equal(best, 3);
  TU_ERR(ctx, stof_db_best(db, "bert/8x512", "gpu0", &best), STOF_ERR_NOT_FOUND, "no successful record of bert/8x512 on gpu0");
  TU_ERR(ctx, stof_db_get(db, 5, &r), STOF_ERR_RANGE, "record 5 of 5");
  stof_db_free(db);
  tu_ctx_free(ctx, &heap);
}

/* Records of another version are kept but never best; failed ones neither. */
static void db_best_skips_failures_and_other_versions(void **state) {
  (void)state;
  tu_heap heap;
  stof_ctx *ctx = tu_ctx_new(&heap);
  char path[256];
  tmp_path(path, sizeof path, "tune.jsonl");
  write_file(path,
             "{\"v\":1,\"stof\":\"0.0.9\",\"workload\":\"w\",\"device\":\"d\",\"scheme\":\"0\",\"knobs\":{},"
             "\"times_ms\":[0.01],\"status\":\"OK\"}\n"
             LINE_WD "\"scheme\":\"1\",\"knobs\":{},"
             "\"times_ms\":[0.02],\"status\":\"ERR_CUDA\",\"message\":\"launch failed\"}\n"
             LINE_WD "\"scheme\":\"2\",\"knobs\":{},"
             "\"times_ms\":[5],\"status\":\"OK\"}\n",
             "w");
  stof_db *db;
  TU_OK(ctx, stof_db_open(ctx, path, &db));
  assert_int_equal(stof_db_count(db), 3);
  int best;
  TU_OK(ctx, stof_db_best(db, "w", "d", &best));
  assert_int_equal(best, 2);
  stof_db_record r;
  TU_OK(ctx, stof_db_get(db, 0, &r));
  assert_string_equal(r.version, "0.0.9");
  stof_db_free(db);
  tu_ctx_free(ctx, &heap);
}

static void db_skips_malformed_lines_and_closes_a_truncated_one(void **state) {
  (void)state;
  tu_heap heap;
  stof_ctx *ctx = tu_ctx_new(&heap);
  char path[256];
  tmp_path(path, sizeof path, "tune.jsonl");
  const char *good = LINE_WD "\"scheme\":\"01\","
                     "\"knobs\":{\"k\":3},\"times_ms\":[1.5],\"status\":\"OK\"}\n";
  char text[4096];
  snprintf(text, sizeof text,
           "%s"
           "not json at all\n"                                                         /* line 2 */
           "\n"                                                                        /* blank */
           "[1, 2]\n"                                                                  /* line 4 */
           "{\"v\":2,\"workload\":\"w\"}\n"                                            /* line 5 */
           "{\"v\":1,\"stof\":\"x\",\"workload\":\"w\",\"device\":\"d\",\"scheme\":\"\",\"knobs\":{\"k\":\"big\"},"
           "\"times_ms\":[1],\"status\":\"OK\"}\n"                                     /* line 6 */
           "{\"v\":1,\"stof\":\"x\",\"workload\":\"w\",\"device\":\"d\",\"scheme\":\"\",\"knobs\":{},"
           "\"times_ms\":[],\"status\":\"OK\"}\n"                                      /* line 7 */
           "{\"v\":1,\"stof\":\"x\",\"workload\":\"w\",\"device\":\"d\",\"scheme\":\"\",\"knobs\":{},"
           "\"times_ms\":[1],\"status\":\"ERR_BOGUS\"}\n"                              /* line 8 */
           "{\"v\":1,\"v\":1}\n"                                                       /* line 9 */
           "%s"                                                                        /* line 10 */
           "{\"v\":1,\"stof\":\"" STOF_VERSION "\",\"workload\":\"w\",\"dev",          /* cut */
           good, good);
  write_file(path, text, "w");
  stof_db *db;
  TU_OK(ctx, stof_db_open(ctx, path, &db));
  assert_int_equal(stof_db_count(db), 2);
  assert_int_equal(stof_db_nskipped(db), 7); /* lines 2, 4-9; the cut tail waits */
  char want[300];
  snprintf(want, sizeof want, "%s:9: not JSON", path);
  if (!strstr(stof_db_skip_note(db), want)) fail_msg("skip note \"%s\" lacks \"%s\"", stof_db_skip_note(db), want);

  /* another process finishes nothing: the next append closes the cut line and starts anew */
  long before = file_size(path);
  const double t[] = {0.75};
  stof_db_record r = rec("w", "d", "11", t, 1);
  TU_OK(ctx, stof_db_append(db, &r));
  assert_int_equal(stof_db_count(db), 3);
  assert_int_equal(stof_db_nskipped(db), 8);
  assert_true(file_size(path) > before);
  int best;
  TU_OK(ctx, stof_db_best(db, "w", "d", &best));
  assert_int_equal(best, 2);
  stof_db_free(db);

  TU_OK(ctx, stof_db_open(ctx, path, &db));
  assert_int_equal(stof_db_count(db), 3);
  assert_int_equal(stof_db_nskipped(db), 8);
  snprintf(want, sizeof want, "%s:11: ", path);
  if (!strstr(stof_db_skip_note(db), want)) fail_msg("skip note \"%s\" lacks \"%s\"", stof_db_skip_note(db), want);
  TU_OK(ctx, stof_db_best(db, "w", "d", &best));
  assert_int_equal(best, 2);
  stof_db_record got;
  TU_OK(ctx, stof_db_get(db, 2, &got));
  assert_true(got.time_ms[0] == 0.75 && strcmp(got.scheme, "11") == 0);
  stof_db_free(db);
  tu_ctx_free(ctx, &heap);
}

/* A reader sees a line only once it is complete; refresh picks up what others appended. */
static void db_refresh_reads_only_complete_lines(void **state) {
  (void)state;
  tu_heap heap;
  stof_ctx *ctx = tu_ctx_new(&heap);
  char path[256];
  tmp_path(path, sizeof path, "tune.jsonl");
  stof_db *reader, *writer;
  TU_OK(ctx, stof_db_open(ctx, path, &reader));
  TU_OK(ctx, stof_db_open(ctx, path, &writer));
  const double t[] = {1.0};
  stof_db_record r = rec("w", "d", "0", t, 1);
  TU_OK(ctx, stof_db_append(writer, &r));
  TU_OK(ctx, stof_db_append(writer, &r));
  int nnew = -1;
  TU_OK(ctx, stof_db_refresh(reader, &nnew));
  assert_int_equal(nnew, 2);
  const char *half = "{\"v\":1,\"stof\":\"" STOF_VERSION "\",\"workload\":\"w\",";
  write_file(path, half, "a"); /* a writer in the middle of its line */
  TU_OK(ctx, stof_db_refresh(reader, &nnew));
  assert_int_equal(nnew, 0);
  assert_int_equal(stof_db_nskipped(reader), 0);
  write_file(path, "\"device\":\"d\",\"scheme\":\"7\",\"knobs\":{},\"times_ms\":[0.5],\"status\":\"OK\"}\n", "a");
  TU_OK(ctx, stof_db_refresh(reader, &nnew));
  assert_int_equal(nnew, 1);
  assert_int_equal(stof_db_count(reader), 3);
  int best;
  TU_OK(ctx, stof_db_best(reader, "w", "d", &best));
  assert_int_equal(best, 2);
  /* the writer reads the others' lines before it appends, so its view is whole too */
  TU_OK(ctx, stof_db_append(writer, &r));
  assert_int_equal(stof_db_count(writer), 4);
  TU_OK(ctx, stof_db_refresh(writer, &nnew));
  assert_int_equal(nnew, 0);
  stof_db_free(reader);
  stof_db_free(writer);
  tu_ctx_free(ctx, &heap);
}

/* Four processes append 150 records each (some long) at once: every record is there, whole. */
static void db_concurrent_appends_keep_every_record(void **state) {
  (void)state;
  char path[256];
  tmp_path(path, sizeof path, "tune.jsonl");
  enum { NPROC = 4, NREC = 150 };
  pid_t pid[NPROC];
  for (int p = 0; p < NPROC; p++) {
    pid[p] = fork();
    assert_true(pid[p] >= 0);
    if (pid[p] == 0) {
      stof_ctx *ctx = stof_ctx_new(NULL, NULL);
      stof_db *db;
      if (!ctx || stof_db_open(ctx, path, &db)) _exit(2);
      char workload[32], msg[9000];
      snprintf(workload, sizeof workload, "proc%d", p);
      for (int i = 0; i < NREC; i++) {
        double t[3] = {1.0 + p, 0.5 * i, 2.0};
        int64_t kv[2] = {p, i};
        const char *kn[2] = {"proc", "index"};
        memset(msg, 'a' + p, sizeof msg - 1);
        msg[(i % 7) * 1000 + 100] = '\0';
        stof_db_record r = {.workload = workload, .device = "d", .scheme = "0", .nknob = 2, .knob_name = kn,
                            .knob_value = kv, .ntime = 3, .time_ms = t,
                            .status = i % 5 ? STOF_OK : STOF_ERR_CUDA, .message = i % 5 ? NULL : msg};
        if (stof_db_append(db, &r)) _exit(3);
      }
      stof_db_free(db);
      stof_ctx_free(ctx);
      _exit(0);
    }
  }
  wait_all(pid, NPROC);
  tu_heap heap;
  stof_ctx *ctx = tu_ctx_new(&heap);
  stof_db *db;
  TU_OK(ctx, stof_db_open(ctx, path, &db));
  assert_int_equal(stof_db_nskipped(db), 0);
  assert_int_equal(stof_db_count(db), NPROC * NREC);
  int seen[NPROC][NREC];
  memset(seen, 0, sizeof seen);
  for (int i = 0; i < stof_db_count(db); i++) {
    stof_db_record r;
    TU_OK(ctx, stof_db_get(db, i, &r));
    int p = (int)r.knob_value[0], k = (int)r.knob_value[1];
    assert_true(p >= 0 && p < NPROC && k >= 0 && k < NREC);
    char workload[32];
    snprintf(workload, sizeof workload, "proc%d", p);
    assert_string_equal(r.workload, workload);
    assert_true(r.ntime == 3 && r.time_ms[1] == 0.5 * k);
    if (k % 5 == 0) {
      assert_int_equal(r.status, STOF_ERR_CUDA);
      assert_int_equal((int)strlen(r.message), (k % 7) * 1000 + 100);
      for (size_t c = 0; r.message[c]; c++) assert_int_equal(r.message[c], 'a' + p);
    }
    seen[p][k]++;
  }
  for (int p = 0; p < NPROC; p++)
    for (int k = 0; k < NREC; k++) assert_int_equal(seen[p][k], 1);
  stof_db_free(db);
  tu_ctx_free(ctx, &heap);
}

static void db_rejects_bad_records_and_paths(void **state) {
  (void)state;
  tu_heap heap;
  stof_ctx *ctx = tu_ctx_new(&heap);
  char path[256];
  tmp_path(path, sizeof path, "tune.jsonl");
  stof_db *db;
  TU_OK(ctx, stof_db_open(ctx, path, &db));
  const double t[] = {1.0}, neg[] = {-1.0}, nan_[] = {NAN};
  const char *dup[] = {"k", "k"}, *empty[] = {""};
  const int64_t kv[] = {1, 2};
  TU_ERR(ctx, stof_db_append(db, &(stof_db_record){.device = "d", .ntime = 1, .time_ms = t}), STOF_ERR_ARG,
         "needs a workload");
  TU_ERR(ctx, stof_db_append(db, &(stof_db_record){.workload = "w", .device = "", .ntime = 1, .time_ms = t}),
         STOF_ERR_ARG, "record of w: no device");
  TU_ERR(ctx, stof_db_append(db, &(stof_db_record){.workload = "w", .device = "d", .nknob = 2, .knob_name = dup,
                                                   .knob_value = kv, .ntime = 1, .time_ms = t}),
         STOF_ERR_ARG, "knob k given twice");
  TU_ERR(ctx, stof_db_append(db, &(stof_db_record){.workload = "w", .device = "d", .nknob = 1, .knob_name = empty,
                                                   .knob_value = kv, .ntime = 1, .time_ms = t}),
         STOF_ERR_ARG, "knob 0 has no name");
  TU_ERR(ctx, stof_db_append(db, &(stof_db_record){.workload = "w", .device = "d", .ntime = 1, .time_ms = neg}),
         STOF_ERR_ARG, "time -1 ms");
  TU_ERR(ctx, stof_db_append(db, &(stof_db_record){.workload = "w", .device = "d", .ntime = 1, .time_ms = nan_}),
         STOF_ERR_ARG, "time nan ms");
  TU_ERR(ctx, stof_db_append(db, &(stof_db_record){.workload = "w", .device = "d"}), STOF_ERR_ARG,
         "a successful record needs times");
  TU_ERR(ctx, stof_db_append(db, &(stof_db_record){.workload = "w", .device = "d", .status = (stof_status)999}),
         STOF_ERR_ARG, "status 999");
  TU_ERR(ctx, stof_db_append(db, &(stof_db_record){.workload = "w\xff", .device = "d", .ntime = 1, .time_ms = t}),
         STOF_ERR_ARG, "workload is not UTF-8");
  TU_ERR(ctx, stof_db_append(db, &(stof_db_record){.workload = "w", .device = "d", .ntime = 1, .time_ms = t,
                                                   .message = "overlong \xc0\xaf"}),
         STOF_ERR_ARG, "message is not UTF-8");
  TU_ERR(ctx, stof_db_append(db, &(stof_db_record){.workload = "w", .device = "d", .ntime = 1, .time_ms = t,
                                                   .message = "surrogate \xed\xa0\x80"}),
         STOF_ERR_ARG, "message is not UTF-8");
  assert_int_equal(file_size(path), 0); /* nothing written */
  assert_int_equal(stof_db_count(db), 0);
  stof_db_free(db);

  stof_db *none = (stof_db *)1;
  TU_ERR(ctx, stof_db_open(ctx, "/nonexistent-dir-of-stof/tune.jsonl", &none), STOF_ERR_IO,
         "/nonexistent-dir-of-stof/tune.jsonl: No such file or directory");
  assert_null(none);
  TU_ERR(ctx, stof_db_open(ctx, "/tmp", &none), STOF_ERR_IO, "/tmp: ");
  TU_ERR(ctx, stof_db_open(ctx, "", &none), STOF_ERR_ARG, "empty path");
  if (geteuid() != 0) { /* root may write anywhere */
    char ro[256];
    tmp_path(ro, sizeof ro, "ro.jsonl");
    write_file(ro,
               LINE_WD "\"scheme\":\"\","
               "\"knobs\":{},\"times_ms\":[1],\"status\":\"OK\"}\n",
               "w");
    assert_int_equal(chmod(ro, 0444), 0);
    TU_OK(ctx, stof_db_open(ctx, ro, &db));
    assert_int_equal(stof_db_count(db), 1);
    TU_ERR(ctx, stof_db_append(db, &(stof_db_record){.workload = "w", .device = "d", .ntime = 1, .time_ms = t}),
           STOF_ERR_IO, "read-only");
    stof_db_free(db);
  }
  tu_ctx_free(ctx, &heap);
}

/* What the database would skip when reading is refused when appending (more than a million
 * times), and a line whose string holds a NUL (\u0000) is skipped, never stored cut short
 * ("bert\0-large" read as "bert" would collide with another workload). */
static void db_refuses_what_it_would_skip_and_never_cuts_strings(void **state) {
  (void)state;
  tu_heap heap;
  stof_ctx *ctx = tu_ctx_new(&heap);
  char path[256];
  tmp_path(path, sizeof path, "tune.jsonl");
  write_file(path,
             "{\"v\":1,\"stof\":\"" STOF_VERSION "\",\"workload\":\"bert\\u0000-large\",\"device\":\"d\","
             "\"scheme\":\"\",\"knobs\":{},\"times_ms\":[1],\"status\":\"OK\"}\n",
             "w");
  stof_db *db;
  TU_OK(ctx, stof_db_open(ctx, path, &db));
  assert_int_equal(stof_db_count(db), 0);
  assert_int_equal(stof_db_nskipped(db), 1);
  int n = 1000001;
  double *t = calloc((size_t)n, sizeof *t);
  assert_non_null(t);
  TU_ERR(ctx, stof_db_append(db, &(stof_db_record){.workload = "w", .device = "d", .ntime = n, .time_ms = t}),
         STOF_ERR_ARG, "record of w: 0 knobs and 1000001 times, at most 1000000 of each");
  TU_OK(ctx, stof_db_append(db, &(stof_db_record){.workload = "w", .device = "d", .ntime = n - 1, .time_ms = t}));
  free(t);
  stof_db_free(db);
  TU_OK(ctx, stof_db_open(ctx, path, &db)); /* read back whole */
  assert_int_equal(stof_db_count(db), 1);
  assert_int_equal(stof_db_nskipped(db), 1);
  stof_db_free(db);
  tu_ctx_free(ctx, &heap);
}

/* Every allocation of open + append + refresh failing in turn: NOMEM, no leak, a failed
 * append writes nothing, and the file holds only whole records. */
static void db_out_of_memory_is_clean(void **state) {
  (void)state;
  char path[256];
  tmp_path(path, sizeof path, "tune.jsonl");
  const double t[] = {1.0, 2.0};
  int done = 0, nfail = 0;
  for (long n = 1; !done && n < 10000; n++) {
    tu_heap heap;
    stof_ctx *ctx = tu_ctx_new(&heap);
    heap.fail_at = heap.nalloc + n;
    stof_db *db = NULL;
    stof_status st = stof_db_open(ctx, path, &db);
    if (!st) {
      stof_db_record r = rec("w", "d", "01", t, 2);
      long before = file_size(path);
      st = stof_db_append(db, &r);
      if (st) assert_int_equal(file_size(path), before); /* a failed append writes nothing */
      if (!st) st = stof_db_refresh(db, NULL);
      stof_db_free(db);
    }
    if (st) {
      assert_int_equal(st, STOF_ERR_NOMEM);
      nfail++;
    }
    done = !heap.failed;
    stof_ctx_free(ctx);
    assert_int_equal(heap.live, 0);
    assert_int_equal(heap.bad_size, 0);
  }
  assert_true(done && nfail > 0);
  tu_heap heap;
  stof_ctx *ctx = tu_ctx_new(&heap);
  stof_db *db;
  TU_OK(ctx, stof_db_open(ctx, path, &db));
  assert_int_equal(stof_db_nskipped(db), 0);
  assert_true(stof_db_count(db) >= 1);
  stof_db_free(db);
  tu_ctx_free(ctx, &heap);
}

/* A refresh that runs out of memory consumes nothing: the next one loads the record. */
static void db_refresh_out_of_memory_loses_nothing(void **state) {
  (void)state;
  char path[256];
  tmp_path(path, sizeof path, "tune.jsonl");
  const double t[] = {0.5};
  stof_ctx *wctx = stof_ctx_new(NULL, NULL);
  stof_db *writer;
  assert_int_equal(stof_db_open(wctx, path, &writer), STOF_OK);
  int nfail = 0, done = 0;
  for (long n = 1; !done && n < 1000; n++) {
    tu_heap heap;
    stof_ctx *ctx = tu_ctx_new(&heap);
    stof_db *reader;
    TU_OK(ctx, stof_db_open(ctx, path, &reader));
    int had = stof_db_count(reader);
    stof_db_record r = rec("w", "d", "0", t, 1);
    assert_int_equal(stof_db_append(writer, &r), STOF_OK); /* another process's record */
    heap.fail_at = heap.nalloc + n;
    int nnew = -1;
    stof_status st = stof_db_refresh(reader, &nnew);
    done = !heap.failed;
    heap.fail_at = 0;
    if (st) {
      assert_int_equal(st, STOF_ERR_NOMEM);
      stof_ctx_clear_error(ctx);
      nfail++;
      TU_OK(ctx, stof_db_refresh(reader, &nnew)); /* memory is back: the line is read now */
    }
    assert_int_equal(nnew, 1);
    assert_int_equal(stof_db_count(reader), had + 1);
    assert_int_equal(stof_db_nskipped(reader), 0);
    stof_db_free(reader);
    tu_ctx_free(ctx, &heap);
  }
  assert_true(done && nfail > 0);
  stof_db_free(writer);
  stof_ctx_free(wctx);
}

/* A complete record missing only its newline (another tool, or a writer killed just
 * before it) is loaded by the next append, as every later reader will load it. */
static void db_append_loads_an_unterminated_record(void **state) {
  (void)state;
  tu_heap heap;
  stof_ctx *ctx = tu_ctx_new(&heap);
  char path[256];
  tmp_path(path, sizeof path, "tune.jsonl");
  write_file(path,
             LINE_WD "\"scheme\":\"0\","
             "\"knobs\":{},\"times_ms\":[0.01],\"status\":\"OK\"}",
             "w");
  stof_db *db;
  TU_OK(ctx, stof_db_open(ctx, path, &db));
  assert_int_equal(stof_db_count(db), 0); /* not terminated yet: maybe still being written */
  const double t[] = {1.0};
  stof_db_record r = rec("w", "d", "1", t, 1);
  TU_OK(ctx, stof_db_append(db, &r));
  assert_int_equal(stof_db_count(db), 2);
  assert_int_equal(stof_db_nskipped(db), 0);
  int best;
  TU_OK(ctx, stof_db_best(db, "w", "d", &best));
  assert_int_equal(best, 0);
  stof_db_free(db);
  TU_OK(ctx, stof_db_open(ctx, path, &db)); /* a fresh reader agrees */
  assert_int_equal(stof_db_count(db), 2);
  assert_int_equal(stof_db_nskipped(db), 0);
  TU_OK(ctx, stof_db_best(db, "w", "d", &best));
  assert_int_equal(best, 0);
  stof_db_free(db);
  tu_ctx_free(ctx, &heap);
}

/* A handle opened before fork() and used by the children: each reopens the file, so the
 * lock holds between them and every child's own view stays exact. */
static void db_handle_shared_across_fork(void **state) {
  (void)state;
  char path[256];
  tmp_path(path, sizeof path, "tune.jsonl");
  enum { NPROC = 4, NREC = 120 };
  stof_ctx *ctx = stof_ctx_new(NULL, NULL);
  stof_db *db;
  assert_int_equal(stof_db_open(ctx, path, &db), STOF_OK);
  pid_t pid[NPROC];
  for (int p = 0; p < NPROC; p++) {
    pid[p] = fork();
    assert_true(pid[p] >= 0);
    if (pid[p] == 0) {
      char msg[3000];
      memset(msg, 'a' + p, sizeof msg - 1);
      msg[sizeof msg - 1] = '\0';
      for (int i = 0; i < NREC; i++) {
        double t[1] = {1.0 + i};
        int64_t kv[1] = {p};
        const char *kn[1] = {"proc"};
        stof_db_record r = {.workload = "w", .device = "d", .nknob = 1, .knob_name = kn, .knob_value = kv,
                            .ntime = 1, .time_ms = t, .message = msg};
        if (stof_db_append(db, &r)) _exit(3);
      }
      if (stof_db_refresh(db, NULL) || stof_db_nskipped(db) != 0) _exit(4);
      int mine = 0;
      for (int i = 0; i < stof_db_count(db); i++) {
        stof_db_record r;
        if (stof_db_get(db, i, &r)) _exit(5);
        mine += r.knob_value[0] == p;
      }
      _exit(mine == NREC ? 0 : 6);
    }
  }
  wait_all(pid, NPROC);
  int nnew = 0;
  assert_int_equal(stof_db_refresh(db, &nnew), STOF_OK); /* the parent's handle too */
  assert_int_equal(nnew, NPROC * NREC);
  assert_int_equal(stof_db_nskipped(db), 0);
  stof_db_free(db);
  stof_ctx_free(ctx);
}

int run_tune_tests(void);
int run_tensorcore_tests(void);

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(db_round_trips_records_and_finds_the_best),
      cmocka_unit_test(db_best_skips_failures_and_other_versions),
      cmocka_unit_test(db_skips_malformed_lines_and_closes_a_truncated_one),
      cmocka_unit_test(db_refresh_reads_only_complete_lines),
      cmocka_unit_test(db_concurrent_appends_keep_every_record),
      cmocka_unit_test(db_rejects_bad_records_and_paths),
      cmocka_unit_test(db_refuses_what_it_would_skip_and_never_cuts_strings),
      cmocka_unit_test(db_out_of_memory_is_clean),
      cmocka_unit_test(db_refresh_out_of_memory_loses_nothing),
      cmocka_unit_test(db_append_loads_an_unterminated_record),
      cmocka_unit_test(db_handle_shared_across_fork),
  };
  int failed = cmocka_run_group_tests_name("db", tests, NULL, NULL);
  return failed + run_tune_tests() + run_tensorcore_tests(); /* test_tune.c, test_tensorcore.c */
}
