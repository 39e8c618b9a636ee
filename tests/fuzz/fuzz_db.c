/*
 * libFuzzer target: the tuning-database loader (search/db.c). The input is a database
 * file's bytes. Whatever they are, stof_db_open either loads (skipping malformed lines) or
 * fails with a status and a message; every record loaded has a workload and a device, a
 * known status, times where status is OK and a median among its times; stof_db_best picks
 * an OK record of this version with the least median of its (workload, device), the
 * earliest on ties; stof_db_get refuses indices out of range. An append then closes an
 * unterminated tail and adds the record, and the file opened again loads as many records.
 * Nothing leaks.
 */
#include "fuzz_util.h"

#include <math.h>

#include <stof/search.h>

static void check_record(const stof_db_record *r, int i) {
  if (!r->workload || !*r->workload) fz_fail("record %d: empty workload", i);
  if (!r->device || !*r->device) fz_fail("record %d: empty device", i);
  if (!r->scheme || !r->version || !*r->version) fz_fail("record %d: no scheme or version", i);
  if ((unsigned)r->status >= STOF_STATUS_COUNT) fz_fail("record %d: status %d", i, (int)r->status);
  if (r->status == STOF_OK && r->ntime < 1) fz_fail("record %d: OK without times", i);
  if (r->nknob < 0 || r->ntime < 0) fz_fail("record %d: negative counts", i);
  double lo = INFINITY, hi = -INFINITY;
  for (int k = 0; k < r->ntime; k++) {
    double t = r->time_ms[k];
    if (!isfinite(t) || t < 0) fz_fail("record %d: time %g", i, t);
    lo = t < lo ? t : lo;
    hi = t > hi ? t : hi;
  }
  if (r->ntime && (r->median_ms < lo || r->median_ms > hi))
    fz_fail("record %d: median %g outside [%g, %g]", i, r->median_ms, lo, hi);
  if (!r->ntime && r->median_ms != 0) fz_fail("record %d: median %g without times", i, r->median_ms);
  for (int k = 0; k < r->nknob; k++) {
    if (!r->knob_name[k] || !*r->knob_name[k]) fz_fail("record %d: knob %d without a name", i, k);
    for (int j = 0; j < k; j++)
      if (!strcmp(r->knob_name[j], r->knob_name[k])) fz_fail("record %d: knob %s twice", i, r->knob_name[k]);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  stof_ctx *ctx = stof_ctx_new(NULL, NULL);
  if (!ctx) return 0;
  const char *path = fz_file(data, size);
  stof_db *db = NULL;
  stof_status st = stof_db_open(ctx, path, &db);
  if (st) {
    fz_check_error(ctx, st, "stof_db_open");
    if (db) fz_fail("stof_db_open failed but returned a database");
  } else {
    int n = stof_db_count(db);
    if (n < 0 || stof_db_nskipped(db) < 0) fz_fail("negative counts");
    if (stof_db_nskipped(db) > 0 && !*stof_db_skip_note(db)) fz_fail("a skipped line without a note");
    stof_db_record r, b;
    for (int i = 0; i < n; i++) {
      if ((st = stof_db_get(db, i, &r))) fz_fail("stof_db_get(%d) of %d: %s", i, n, stof_status_name(st));
      check_record(&r, i);
      int best;
      st = stof_db_best(db, r.workload, r.device, &best);
      int mine = r.status == STOF_OK && !strcmp(r.version, STOF_VERSION);
      if (st == STOF_ERR_NOT_FOUND) {
        fz_check_error(ctx, st, "stof_db_best");
        if (mine) fz_fail("record %d is OK and of this version, but best found none", i);
        continue;
      }
      if (st) fz_fail("stof_db_best: %s", stof_status_name(st));
      if (best < 0 || best >= n || stof_db_get(db, best, &b)) fz_fail("best %d of %d", best, n);
      if (b.status != STOF_OK || strcmp(b.version, STOF_VERSION) || strcmp(b.workload, r.workload) ||
          strcmp(b.device, r.device))
        fz_fail("best %d is not an OK record of this version of the workload", best);
      if (mine && (r.median_ms < b.median_ms || (r.median_ms == b.median_ms && i < best)))
        fz_fail("record %d (median %g) beats best %d (median %g)", i, r.median_ms, best, b.median_ms);
    }
    if (stof_db_get(db, n, &r) != STOF_ERR_RANGE || stof_db_get(db, -1, &r) != STOF_ERR_RANGE)
      fz_fail("stof_db_get out of range did not fail");
    int nnew = -1;
    if ((st = stof_db_refresh(db, &nnew)) || nnew != 0) fz_fail("refresh of an unchanged file: %d, %d", st, nnew);
    /* an append closes an unterminated tail; a second load of the file agrees */
    const char *kn[] = {"fz.tile"};
    int64_t kv[] = {4};
    double tm[] = {0.5, 0.25, 0.75};
    stof_db_record mine = {"fuzz/workload", "cpu", "01", 1, kn, kv, 3, tm, STOF_OK, NULL, NULL, 0};
    if ((st = stof_db_append(db, &mine))) fz_fail("append: %s", stof_ctx_message(ctx));
    int n2 = stof_db_count(db);
    if (n2 < n + 1 || n2 > n + 2) fz_fail("append: %d records after %d", n2, n);
    if (stof_db_get(db, n2 - 1, &r) || strcmp(r.workload, mine.workload) || r.median_ms != 0.5)
      fz_fail("append: the last record is not the one appended");
    stof_db *again = NULL;
    if ((st = stof_db_open(ctx, path, &again))) fz_fail("reopen: %s", stof_ctx_message(ctx));
    if (stof_db_count(again) != n2) fz_fail("reopen: %d records, %d before", stof_db_count(again), n2);
    stof_db_free(again);
    stof_db_free(db);
  }
  if (stof_ctx_bytes_in_use(ctx) != 0) fz_fail("%zu bytes leaked", stof_ctx_bytes_in_use(ctx));
  stof_ctx_free(ctx);
  return 0;
}
