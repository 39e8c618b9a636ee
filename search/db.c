/*
 * The tuning database (include/stof/search.h): JSON lines, append-only, read tolerantly,
 * appended whole lines under an exclusive flock.
 *
 * The file stays open for the database's lifetime. `consumed` is the byte offset up to
 * which complete lines have been read (the end of the last '\n' seen); an unterminated
 * tail is left for later: it is either a line another process is writing (only possible
 * outside the lock) or the remains of a writer that died (found under the lock, when the
 * next record is appended after a newline that closes it; it then loads as a malformed
 * line). Records live in one array of structs whose strings and arrays are separate
 * allocations, so the pointers stof_db_get hands out survive later appends.
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <stof/search.h>

typedef struct db_rec {
  char *workload, *device, *scheme, *message, *version; /* owned; message may be NULL */
  int nknob, ntime;
  char **knob_name; /* owned strings */
  int64_t *knob_value;
  double *time_ms;
  stof_status status;
  double median_ms;
} db_rec;

struct stof_db {
  stof_ctx *ctx;
  char *path;
  int fd;
  int readonly; /* opened read-only (no permission to write): append refuses */
  pid_t pid;    /* the process that opened fd: a forked child opens its own (flock is per open file) */
  long long consumed;
  long long nline; /* complete lines read, for the line numbers of skip notes */
  int nrec, caprec;
  db_rec *rec;
  int nskipped;
  char skip_note[256]; /* the last skipped line's number and why */
};

static stof_status own_fd(stof_db *db);

/* At most this many knobs or times in a record: a line with more is skipped when read, so
 * an append with more is refused. */
#define DB_MAX_ITEMS 1000000

/* ---------------------------------------------------------------- records in memory */

static void rec_clear(stof_ctx *ctx, db_rec *r) {
  char **strs[] = {&r->workload, &r->device, &r->scheme, &r->message, &r->version};
  for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++)
    if (*strs[i]) stof_ctx_dealloc(ctx, *strs[i], strlen(*strs[i]) + 1);
  for (int k = 0; k < r->nknob; k++)
    if (r->knob_name && r->knob_name[k]) stof_ctx_dealloc(ctx, r->knob_name[k], strlen(r->knob_name[k]) + 1);
  if (r->knob_name) stof_ctx_dealloc(ctx, r->knob_name, sizeof *r->knob_name * (size_t)r->nknob);
  if (r->knob_value) stof_ctx_dealloc(ctx, r->knob_value, sizeof *r->knob_value * (size_t)r->nknob);
  if (r->time_ms) stof_ctx_dealloc(ctx, r->time_ms, sizeof *r->time_ms * (size_t)r->ntime);
  memset(r, 0, sizeof *r);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The median of t[0..n) into *out (0 for n = 0). */
static stof_status median_of(stof_ctx *ctx, const double *t, int n, double *out) {
  *out = 0;
  if (n <= 0) return STOF_OK;
  double *v = stof_ctx_alloc(ctx, sizeof *v * (size_t)n);
  if (!v) return STOF_ERR_NOMEM;
  memcpy(v, t, sizeof *v * (size_t)n);
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  *out = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  stof_ctx_dealloc(ctx, v, sizeof *v * (size_t)n);
  return STOF_OK;
}

/* Copies the view into an owned record (version given separately). */
static stof_status rec_fill(stof_ctx *ctx, db_rec *r, const stof_db_record *in, const char *version) {
  memset(r, 0, sizeof *r);
  r->status = in->status;
  r->nknob = in->nknob;
  r->ntime = in->ntime;
  if (!(r->workload = stof_ctx_strdup(ctx, in->workload)) || !(r->device = stof_ctx_strdup(ctx, in->device)) ||
      !(r->scheme = stof_ctx_strdup(ctx, in->scheme ? in->scheme : "")) ||
      !(r->version = stof_ctx_strdup(ctx, version)) ||
      (in->message && !(r->message = stof_ctx_strdup(ctx, in->message))))
    goto nomem;
  if (r->nknob) {
    r->knob_name = stof_ctx_alloc(ctx, sizeof *r->knob_name * (size_t)r->nknob);
    r->knob_value = stof_ctx_alloc(ctx, sizeof *r->knob_value * (size_t)r->nknob);
    if (!r->knob_name || !r->knob_value) goto nomem;
    memset(r->knob_name, 0, sizeof *r->knob_name * (size_t)r->nknob);
    for (int k = 0; k < r->nknob; k++) {
      if (!(r->knob_name[k] = stof_ctx_strdup(ctx, in->knob_name[k]))) goto nomem;
      r->knob_value[k] = in->knob_value[k];
    }
  }
  if (r->ntime) {
    if (!(r->time_ms = stof_ctx_alloc(ctx, sizeof *r->time_ms * (size_t)r->ntime))) goto nomem;
    memcpy(r->time_ms, in->time_ms, sizeof *r->time_ms * (size_t)r->ntime);
  }
  if (median_of(ctx, r->time_ms, r->ntime, &r->median_ms) == STOF_OK) return STOF_OK;
nomem:
  rec_clear(ctx, r);
  return STOF_ERR_NOMEM;
}

/* Room for one more record. */
static stof_status reserve(stof_db *db) {
  if (db->nrec < db->caprec) return STOF_OK;
  int ncap = db->caprec ? 2 * db->caprec : 64;
  db_rec *nr = stof_ctx_realloc(db->ctx, db->rec, sizeof *nr * (size_t)db->caprec, sizeof *nr * (size_t)ncap);
  if (!nr) return STOF_ERR_NOMEM;
  db->rec = nr;
  db->caprec = ncap;
  return STOF_OK;
}

static stof_status push_rec(stof_db *db, const stof_db_record *in, const char *version) {
  stof_status st = reserve(db);
  if (st) return st;
  st = rec_fill(db->ctx, &db->rec[db->nrec], in, version);
  if (st) return st;
  db->nrec++;
  return STOF_OK;
}

/* ---------------------------------------------------------------- JSON lines */

static void skip(stof_db *db, const char *fmt, ...) {
  db->nskipped++;
  int n = snprintf(db->skip_note, sizeof db->skip_note, "%s:%lld: ", db->path, db->nline);
  va_list ap;
  va_start(ap, fmt);
  if (n > 0 && (size_t)n < sizeof db->skip_note) vsnprintf(db->skip_note + n, sizeof db->skip_note - (size_t)n, fmt, ap);
  va_end(ap);
}

static int status_of(const char *name, stof_status *out) {
  for (int i = 0; i < STOF_STATUS_COUNT; i++)
    if (strcmp(name, stof_status_name((stof_status)i)) == 0) return *out = (stof_status)i, 1;
  return 0;
}

static const char *str_field(json_t *o, const char *key, int nonempty) {
  const char *s = json_string_value(json_object_get(o, key));
  return s && (!nonempty || *s) ? s : NULL;
}

/* Checks the parsed object o and, if it is a valid record, adds it; else a counted skip. */
static stof_status load_object(stof_db *db, json_t *o) {
  stof_ctx *ctx = db->ctx;
  json_t *v = json_object_get(o, "v"), *knobs = json_object_get(o, "knobs"), *times = json_object_get(o, "times_ms"),
         *msg = json_object_get(o, "message");
  const char *workload = str_field(o, "workload", 1), *device = str_field(o, "device", 1),
             *scheme = str_field(o, "scheme", 0), *version = str_field(o, "stof", 1),
             *status = str_field(o, "status", 1);
  stof_db_record r = {0};
  if (!json_is_object(o)) return skip(db, "not a JSON object"), STOF_OK;
  if (!json_is_integer(v) || json_integer_value(v) != STOF_DB_FORMAT)
    return skip(db, "record format \"v\" is not %d", STOF_DB_FORMAT), STOF_OK;
  if (!workload || !device || !scheme || !version || !status || !json_is_object(knobs) || !json_is_array(times) ||
      (msg && !json_is_string(msg)))
    return skip(db, "a field is missing or of the wrong type (workload, device, scheme, stof, status, knobs, "
                    "times_ms, message)"),
           STOF_OK;
  if (!status_of(status, &r.status)) return skip(db, "unknown status \"%s\"", status), STOF_OK;
  if (json_object_size(knobs) > DB_MAX_ITEMS || json_array_size(times) > DB_MAX_ITEMS)
    return skip(db, "too many knobs or times"), STOF_OK;
  int nk = (int)json_object_size(knobs), nt = (int)json_array_size(times), ok = 1;
  size_t bn = sizeof(char *) * (size_t)nk, bv = sizeof(int64_t) * (size_t)nk, bt = sizeof(double) * (size_t)nt;
  const char **names = nk ? stof_ctx_alloc(ctx, bn) : NULL;
  int64_t *vals = nk ? stof_ctx_alloc(ctx, bv) : NULL;
  double *ts = nt ? stof_ctx_alloc(ctx, bt) : NULL;
  stof_status st = STOF_OK;
  if ((nk && (!names || !vals)) || (nt && !ts)) {
    st = stof_ctx_error(ctx, STOF_ERR_NOMEM, "tuning database %s: out of memory", db->path);
    goto done;
  }
  int k = 0;
  const char *key;
  json_t *val;
  json_object_foreach(knobs, key, val) {
    if (!json_is_integer(val) || !*key) ok = 0;
    else names[k] = key, vals[k] = json_integer_value(val), k++;
  }
  for (int i = 0; ok && i < nt; i++) {
    json_t *t = json_array_get(times, (size_t)i);
    ts[i] = json_number_value(t);
    if (!json_is_number(t) || !isfinite(ts[i]) || ts[i] < 0) ok = 0;
  }
  if (!ok) {
    skip(db, "a knob decision is not an integer, or a time not a finite non-negative number");
  } else if (r.status == STOF_OK && nt == 0) {
    skip(db, "a successful record without times");
  } else {
    r.workload = workload, r.device = device, r.scheme = scheme;
    r.nknob = nk, r.knob_name = names, r.knob_value = vals;
    r.ntime = nt, r.time_ms = ts;
    r.message = json_string_value(msg);
    if ((st = push_rec(db, &r, version))) stof_ctx_error(ctx, st, "tuning database %s: out of memory", db->path);
  }
done:
  if (names) stof_ctx_dealloc(ctx, names, bn);
  if (vals) stof_ctx_dealloc(ctx, vals, bv);
  if (ts) stof_ctx_dealloc(ctx, ts, bt);
  return st;
}

/* One complete line (without its '\n'): a record, or a counted skip. */
static stof_status load_line(stof_db *db, const char *line, size_t len) {
  db->nline++;
  while (len && (line[len - 1] == '\r' || line[len - 1] == ' ' || line[len - 1] == '\t')) len--;
  if (len == 0) return STOF_OK; /* blank lines are not records */
  json_error_t err;
  json_t *o = json_loadb(line, len, JSON_REJECT_DUPLICATES, &err);
  if (!o && json_error_code(&err) == json_error_out_of_memory)
    return stof_ctx_error(db->ctx, STOF_ERR_NOMEM, "tuning database %s: out of memory (JSON)", db->path);
  if (!o) return skip(db, "not JSON (%s)", err.text), STOF_OK;
  stof_status st = load_object(db, o);
  json_decref(o);
  return st;
}

/* Reads [consumed, size) and loads its complete lines; with `close_tail` (under the lock,
 * about to append after the newline that terminates it) an unterminated tail is loaded as
 * a line too. A line whose record cannot be stored for want of memory is not consumed: the
 * next load reads it again. */
static stof_status load_from(stof_db *db, long long size, int close_tail, int *nnew) {
  int before = db->nrec;
  if (nnew) *nnew = 0;
  if (size <= db->consumed) return STOF_OK;
  size_t n = (size_t)(size - db->consumed);
  char *buf = stof_ctx_alloc(db->ctx, n);
  if (!buf) return stof_ctx_error(db->ctx, STOF_ERR_NOMEM, "tuning database %s: out of memory", db->path);
  size_t got = 0;
  stof_status st = STOF_OK;
  while (got < n) {
    ssize_t r = pread(db->fd, buf + got, n - got, (off_t)(db->consumed + (long long)got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) st = stof_ctx_error(db->ctx, STOF_ERR_IO, "tuning database %s: read: %s", db->path, strerror(errno));
    if (r <= 0) break; /* 0: shrunk under us (not by stof); what was read is used */
    got += (size_t)r;
  }
  size_t start = 0;
  for (size_t i = 0; i < got && !st; i++)
    if (buf[i] == '\n') {
      if ((st = load_line(db, buf + start, i - start))) {
        db->nline--; /* not consumed: read again next time */
        break;
      }
      start = i + 1;
    }
  if (!st && close_tail && start < got) {
    if ((st = load_line(db, buf + start, got - start))) db->nline--;
    else start = got;
  }
  db->consumed += (long long)start;
  stof_ctx_dealloc(db->ctx, buf, n);
  if (nnew) *nnew = db->nrec - before;
  return st;
}

/* ---------------------------------------------------------------- public */

stof_status stof_db_open(stof_ctx *ctx, const char *path, stof_db **out) {
  *out = NULL;
  if (!path || !*path) return stof_ctx_error(ctx, STOF_ERR_ARG, "tuning database: empty path");
  stof_db *db = stof_ctx_alloc(ctx, sizeof *db);
  if (!db) return STOF_ERR_NOMEM;
  memset(db, 0, sizeof *db);
  db->ctx = ctx;
  db->fd = -1;
  if (!(db->path = stof_ctx_strdup(ctx, path))) {
    stof_db_free(db);
    return STOF_ERR_NOMEM;
  }
  db->fd = open(path, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  int why = errno;
  if (db->fd < 0 && (why == EACCES || why == EROFS || why == EPERM)) {
    db->fd = open(path, O_RDONLY | O_CLOEXEC); /* an existing file we may only read */
    db->readonly = db->fd >= 0;
  }
  struct stat sb;
  if (db->fd < 0 || fstat(db->fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    stof_status st = stof_ctx_error(ctx, STOF_ERR_IO, "tuning database %s: %s", path,
                                    db->fd < 0 ? strerror(why) : "not a regular file");
    stof_db_free(db);
    return st;
  }
  db->pid = getpid();
  stof_status st = load_from(db, (long long)sb.st_size, 0, NULL);
  if (st) {
    stof_db_free(db);
    return st;
  }
  *out = db;
  return STOF_OK;
}

void stof_db_free(stof_db *db) {
  if (!db) return;
  stof_ctx *ctx = db->ctx;
  if (db->fd >= 0) close(db->fd);
  for (int i = 0; i < db->nrec; i++) rec_clear(ctx, &db->rec[i]);
  if (db->rec) stof_ctx_dealloc(ctx, db->rec, sizeof *db->rec * (size_t)db->caprec);
  if (db->path) stof_ctx_dealloc(ctx, db->path, strlen(db->path) + 1);
  stof_ctx_dealloc(ctx, db, sizeof *db);
}

stof_status stof_db_refresh(stof_db *db, int *nnew) {
  if (nnew) *nnew = 0;
  stof_status st = own_fd(db);
  if (st) return st;
  struct stat sb;
  if (fstat(db->fd, &sb) != 0)
    return stof_ctx_error(db->ctx, STOF_ERR_IO, "tuning database %s: %s", db->path, strerror(errno));
  return load_from(db, (long long)sb.st_size, 0, nnew);
}

/* Whether s is well-formed UTF-8 (RFC 3629: no overlongs, surrogates or code points past
 * U+10FFFF), as JSON strings must be. */
static int utf8_valid(const char *s) {
  const unsigned char *p = (const unsigned char *)s;
  while (*p) {
    unsigned c = *p++;
    if (c < 0x80) continue;
    int n = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC2 ? 1 : -1;
    if (n < 0 || c > 0xF4) return 0;
    unsigned cp = c & (0x3F >> n);
    for (int k = 0; k < n; k++, p++) {
      if ((*p & 0xC0) != 0x80) return 0;
      cp = cp << 6 | (*p & 0x3F);
    }
    if ((n == 2 && cp < 0x800) || (n == 3 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF))
      return 0;
  }
  return 1;
}

static stof_status check_record(stof_db *db, const stof_db_record *r) {
  stof_ctx *ctx = db->ctx;
  if (!r->workload || !*r->workload) return stof_ctx_error(ctx, STOF_ERR_ARG, "tuning database: a record needs a workload");
  if (!r->device || !*r->device) return stof_ctx_error(ctx, STOF_ERR_ARG, "tuning database: record of %s: no device", r->workload);
  if ((unsigned)r->status >= STOF_STATUS_COUNT)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "tuning database: record of %s: status %d", r->workload, (int)r->status);
  if (r->nknob < 0 || r->ntime < 0 || (r->nknob && (!r->knob_name || !r->knob_value)) || (r->ntime && !r->time_ms))
    return stof_ctx_error(ctx, STOF_ERR_ARG, "tuning database: record of %s: bad knob or time arrays", r->workload);
  if (r->nknob > DB_MAX_ITEMS || r->ntime > DB_MAX_ITEMS)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "tuning database: record of %s: %d knobs and %d times, at most %d of each",
                          r->workload, r->nknob, r->ntime, DB_MAX_ITEMS);
  for (int k = 0; k < r->nknob; k++) {
    if (!r->knob_name[k] || !*r->knob_name[k])
      return stof_ctx_error(ctx, STOF_ERR_ARG, "tuning database: record of %s: knob %d has no name", r->workload, k);
    for (int j = 0; j < k; j++)
      if (strcmp(r->knob_name[j], r->knob_name[k]) == 0)
        return stof_ctx_error(ctx, STOF_ERR_ARG, "tuning database: record of %s: knob %s given twice", r->workload,
                              r->knob_name[k]);
  }
  for (int i = 0; i < r->ntime; i++)
    if (!isfinite(r->time_ms[i]) || r->time_ms[i] < 0)
      return stof_ctx_error(ctx, STOF_ERR_ARG, "tuning database: record of %s: time %g ms", r->workload, r->time_ms[i]);
  if (r->status == STOF_OK && r->ntime == 0)
    return stof_ctx_error(ctx, STOF_ERR_ARG, "tuning database: record of %s: a successful record needs times",
                          r->workload);
  const char *strs[4] = {r->workload, r->device, r->scheme ? r->scheme : "", r->message ? r->message : ""};
  for (int i = 0; i < 4 + r->nknob; i++)
    if (!utf8_valid(i < 4 ? strs[i] : r->knob_name[i - 4]))
      return stof_ctx_error(ctx, STOF_ERR_ARG, "tuning database: a record's %s is not UTF-8",
                            i == 0 ? "workload" : i == 1 ? "device" : i == 2 ? "scheme" : i == 3 ? "message" : "knob name");
  return STOF_OK;
}

/* A child of fork() shares the parent's open file, and so its flock: it reopens the file.
 * The view (records, consumed) carries over: it is the same file. */
static stof_status own_fd(stof_db *db) {
  if (db->pid == getpid()) return STOF_OK;
  int fd = open(db->path, (db->readonly ? O_RDONLY : O_RDWR | O_APPEND) | O_CLOEXEC);
  if (fd < 0) return stof_ctx_error(db->ctx, STOF_ERR_IO, "tuning database %s: reopen: %s", db->path, strerror(errno));
  close(db->fd);
  db->fd = fd;
  db->pid = getpid();
  return STOF_OK;
}

/* "\n" + the record as one JSON line + "\n" (owned: stof_ctx_dealloc(ctx, line, *len); NULL
 * on failure); the leading newline closes an unterminated tail, else it is not written. */
static char *record_line(stof_ctx *ctx, const stof_db_record *r, size_t *len) {
  json_t *o = json_object(), *knobs = json_object(), *times = json_array();
  int bad = !o || !knobs || !times;
  bad |= json_object_set_new(o, "v", json_integer(STOF_DB_FORMAT));
  bad |= json_object_set_new(o, "stof", json_string(STOF_VERSION));
  bad |= json_object_set_new(o, "workload", json_string(r->workload));
  bad |= json_object_set_new(o, "device", json_string(r->device));
  bad |= json_object_set_new(o, "scheme", json_string(r->scheme ? r->scheme : ""));
  for (int k = 0; k < r->nknob; k++) bad |= json_object_set_new(knobs, r->knob_name[k], json_integer(r->knob_value[k]));
  bad |= json_object_set(o, "knobs", knobs);
  for (int i = 0; i < r->ntime; i++) bad |= json_array_append_new(times, json_real(r->time_ms[i]));
  bad |= json_object_set(o, "times_ms", times);
  bad |= json_object_set_new(o, "status", json_string(stof_status_name(r->status)));
  if (r->message) bad |= json_object_set_new(o, "message", json_string(r->message));
  char *text = bad ? NULL : json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII);
  json_decref(knobs);
  json_decref(times);
  json_decref(o);
  if (!text) return NULL;
  size_t n = strlen(text);
  char *line = stof_ctx_alloc(ctx, n + 2);
  if (line) {
    line[0] = '\n';
    memcpy(line + 1, text, n);
    line[n + 1] = '\n';
    *len = n + 2;
  }
  free(text);
  return line;
}

stof_status stof_db_append(stof_db *db, const stof_db_record *r) {
  stof_ctx *ctx = db->ctx;
  stof_status st = check_record(db, r);
  if (st) return st;
  if (db->readonly)
    return stof_ctx_error(ctx, STOF_ERR_IO, "tuning database %s: opened read-only (no permission to write)", db->path);
  /* everything that can fail for want of memory comes before the write: a failed append
   * writes nothing */
  db_rec mine;
  if ((st = rec_fill(ctx, &mine, r, STOF_VERSION)))
    return stof_ctx_error(ctx, st, "tuning database %s: out of memory", db->path);
  size_t len = 0;
  char *line = record_line(ctx, r, &len);
  if (!line) { /* the strings were checked: only memory can fail here */
    rec_clear(ctx, &mine);
    return stof_ctx_error(ctx, STOF_ERR_NOMEM, "tuning database %s: out of memory (JSON)", db->path);
  }
  if ((st = own_fd(db))) {
    stof_ctx_dealloc(ctx, line, len);
    rec_clear(ctx, &mine);
    return st;
  }
  while (flock(db->fd, LOCK_EX) != 0)
    if (errno != EINTR) {
      stof_ctx_dealloc(ctx, line, len);
      rec_clear(ctx, &mine);
      return stof_ctx_error(ctx, STOF_ERR_IO, "tuning database %s: lock: %s", db->path, strerror(errno));
    }
  struct stat sb;
  if (fstat(db->fd, &sb) != 0) {
    st = stof_ctx_error(ctx, STOF_ERR_IO, "tuning database %s: %s", db->path, strerror(errno));
    goto unlock;
  }
  /* the others' records first, so that ours is read once (ours is added below, not reread);
   * an unterminated tail (a writer died mid-line) is closed by our leading newline */
  if ((st = load_from(db, (long long)sb.st_size, 1, NULL))) goto unlock;
  if (db->consumed != (long long)sb.st_size) {
    st = stof_ctx_error(ctx, STOF_ERR_IO, "tuning database %s: the file shrank during the append", db->path);
    goto unlock;
  }
  if ((st = reserve(db))) {
    stof_ctx_error(ctx, st, "tuning database %s: out of memory", db->path);
    goto unlock;
  }
  char last = '\n';
  if (sb.st_size > 0 && pread(db->fd, &last, 1, sb.st_size - 1) != 1) {
    st = stof_ctx_error(ctx, STOF_ERR_IO, "tuning database %s: read: %s", db->path, strerror(errno));
    goto unlock;
  }
  const char *w = last == '\n' ? line + 1 : line;
  size_t n = last == '\n' ? len - 1 : len;
  size_t done = 0;
  errno = 0;
  while (done < n) {
    ssize_t k = write(db->fd, w + done, n - done);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) break;
    done += (size_t)k;
  }
  if (done < n) {
    st = stof_ctx_error(ctx, STOF_ERR_IO, "tuning database %s: write: %s", db->path,
                        errno ? strerror(errno) : "short write");
    if (done && ftruncate(db->fd, sb.st_size) != 0) /* still locked: take the partial line back */
      st = stof_ctx_error(ctx, STOF_ERR_IO, "tuning database %s: write: %s; the partial line stays (skipped when read)",
                          db->path, errno ? strerror(errno) : "short write");
    goto unlock;
  }
  /* written: a failed sync is reported, but the record stays (in the file and here), so
   * that a caller that retries does not write it twice */
  if (fdatasync(db->fd) != 0 && errno != EINVAL && errno != EROFS)
    st = stof_ctx_error(ctx, STOF_ERR_IO, "tuning database %s: written, but fdatasync failed: %s", db->path,
                        strerror(errno));
  db->consumed += (long long)n;
  db->nline++;
  db->rec[db->nrec++] = mine; /* reserved above */
  mine.workload = NULL;       /* handed over */
unlock:
  flock(db->fd, LOCK_UN);
  stof_ctx_dealloc(ctx, line, len);
  if (mine.workload) rec_clear(ctx, &mine);
  return st;
}

int stof_db_count(const stof_db *db) { return db->nrec; }
int stof_db_nskipped(const stof_db *db) { return db->nskipped; }
const char *stof_db_skip_note(const stof_db *db) { return db->skip_note; }

stof_status stof_db_get(const stof_db *db, int i, stof_db_record *out) {
  if (i < 0 || i >= db->nrec)
    return stof_ctx_error(db->ctx, STOF_ERR_RANGE, "tuning database %s: record %d of %d", db->path, i, db->nrec);
  const db_rec *r = &db->rec[i];
  *out = (stof_db_record){r->workload, r->device, r->scheme, r->nknob, (const char *const *)r->knob_name,
                          r->knob_value, r->ntime, r->time_ms, r->status, r->message, r->version, r->median_ms};
  return STOF_OK;
}

stof_status stof_db_best(const stof_db *db, const char *workload, const char *device, int *index) {
  int best = -1;
  for (int i = 0; i < db->nrec; i++) {
    const db_rec *r = &db->rec[i];
    if (r->status != STOF_OK || strcmp(r->workload, workload) || strcmp(r->device, device) ||
        strcmp(r->version, STOF_VERSION))
      continue;
    if (best < 0 || r->median_ms < db->rec[best].median_ms) best = i;
  }
  if (best < 0)
    return stof_ctx_error(db->ctx, STOF_ERR_NOT_FOUND,
                          "tuning database %s: no successful record of %s on %s by stof %s", db->path, workload,
                          device, STOF_VERSION);
  *index = best;
  return STOF_OK;
}
