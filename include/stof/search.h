/*
 * stof search (DESIGN.md section 7). Built so far: the tuning database.
 *
 * The tuning database keeps every measurement of a candidate, one JSON object per line, in
 * an append-only file:
 *
 *   {"v":1,"stof":"0.1.0","workload":"bert-base/1x128","device":"NVIDIA H100 80GB HBM3",
 *    "scheme":"0011223","knobs":{"C.tile_i":2,"C.tile_j":0},"times_ms":[0.51,0.5,0.52],
 *    "status":"OK"}
 *
 * (one line; "message" is added for a failed candidate). Invariants:
 *  - A record is never rewritten or removed; the file only grows, by whole lines.
 *  - Loading tolerates an unterminated last line (ignored until it is terminated: it may be
 *    being written; the next append terminates it and loads it, as a record if it is one)
 *    and malformed lines (skipped and counted, never fatal), so one bad line never loses
 *    the others. A line that cannot be stored for want of memory is read again next time.
 *  - Several processes may append at once: each record is one write() under an exclusive
 *    flock on the file, preceded by a newline when the file's last line is unterminated; a
 *    short write is truncated away under the lock. A handle used after fork() reopens the
 *    file in the child (flock belongs to the open file). Use a local file system. A handle
 *    is not for concurrent use by several threads.
 *  - The best record of a (workload, device) is the successful one (status OK) written by
 *    this version of stof with the smallest median time; ties go to the earliest.
 */
#ifndef STOF_SEARCH_H
#define STOF_SEARCH_H

#include <stof/core.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- tuning database */

/** The record format written in "v". */
#define STOF_DB_FORMAT 1

typedef struct stof_db stof_db;

/** One measurement. In stof_db_get's answers every pointer is borrowed from the database
 * (valid until stof_db_free). */
typedef struct stof_db_record {
  const char *workload;  /* what was tuned: a key naming the graph and its shapes */
  const char *device;    /* "NVIDIA H100 80GB HBM3", "cpu" */
  const char *scheme;    /* fusion scheme code: one digit per op (may be "") */
  int nknob;             /* knob decisions, by knob name */
  const char *const *knob_name;
  const int64_t *knob_value;
  int ntime;             /* measured times, ms (at least one when status is STOF_OK) */
  const double *time_ms;
  stof_status status;    /* STOF_OK, or why the candidate failed (compile, launch, result) */
  const char *message;   /* the failure's message, or NULL */
  const char *version;   /* the stof version that wrote it; stof_db_append writes its own */
  double median_ms;      /* of time_ms (computed; 0 without times) */
} stof_db_record;

/**
 * Opens the database at path, creating an empty file if there is none, and loads its
 * complete lines. Owned: stof_db_free. STOF_ERR_IO (naming the path and the cause) when the
 * file cannot be created or read.
 */
stof_status stof_db_open(stof_ctx *ctx, const char *path, stof_db **out);
void stof_db_free(stof_db *db);

/**
 * Appends r as one line (its version and median are this stof's and computed) and adds it
 * to db, after loading what other processes appended since. STOF_ERR_ARG for an empty
 * workload or device, a knob name empty or given twice, a string that is not UTF-8, a
 * negative or non-finite time, or a successful record without times (nothing written);
 * STOF_ERR_NOMEM before anything is written; STOF_ERR_IO if the write fails (nothing of the
 * record stays) or, the record written and kept, if fdatasync fails.
 */
stof_status stof_db_append(stof_db *db, const stof_db_record *r);

/** Loads the lines other processes appended since the last load. *nnew (may be NULL): how
 * many records came in. */
stof_status stof_db_refresh(stof_db *db, int *nnew);

/** Records loaded (valid lines), and lines skipped as malformed or of another format. */
int stof_db_count(const stof_db *db);
int stof_db_nskipped(const stof_db *db);
/** Why the last skipped line was skipped ("PATH:LINE: not JSON (...)"), or "". Borrowed. */
const char *stof_db_skip_note(const stof_db *db);

/** Record i (0 <= i < count, in file order). Borrowed pointers. STOF_ERR_RANGE otherwise. */
stof_status stof_db_get(const stof_db *db, int i, stof_db_record *out);

/**
 * The best record of (workload, device) (see the invariants above): its index in *index.
 * STOF_ERR_NOT_FOUND, naming the workload and the device, when there is none.
 */
stof_status stof_db_best(const stof_db *db, const char *workload, const char *device, int *index);

#ifdef __cplusplus
}
#endif

#endif /* STOF_SEARCH_H */
