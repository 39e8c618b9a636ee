/*
 * Traces: the instructions a schedule was built with (TVM's kinds, ComputeAt, CacheRead,
 * RFactor and the others included, plus Knob, Group and Ungroup), their values (blocks, loops, knobs, groups, numbered in creation order), and
 * three forms: a Lua script that rebuilds the schedule, JSON for the tuning database, and
 * replay into a schedule.
 *
 * Invariants: an instruction's outputs are the next values in order; inputs name earlier
 * values of the right kind (the JSON reader checks both); Knob and the Sample* kinds carry
 * their decisions (SamplePerfectTile: its factors), so a replay reproduces the schedule
 * without drawing from the RNG, and a changed decision gives the schedule with that
 * decision. ComputeAt's loop may be a location knob (SampleComputeLocation).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "schedule_int.h"

static const char *const inst_names[] = {
#define STOF_X(name, text, method) text,
    STOF_INST_LIST(STOF_X)
#undef STOF_X
};
static const char *const inst_methods[] = {
#define STOF_X(name, text, method) method,
    STOF_INST_LIST(STOF_X)
#undef STOF_X
};

const char *stof_inst_kind_name(stof_inst_kind k) {
  return (unsigned)k < STOF_INST_COUNT ? inst_names[k] : "?";
}

/* ---------------------------------------------------------------- storage */

void trace_init(stof_trace *t, stof_ctx *ctx) {
  t->ctx = ctx;
  sched_vec_init(&t->insts, sizeof(sched_inst));
  sched_vec_init(&t->ints, sizeof(int));
  sched_vec_init(&t->nums, sizeof(int64_t));
  sched_vec_init(&t->dbls, sizeof(double));
  sched_vec_init(&t->chars, 1);
  sched_vec_init(&t->vkinds, 1);
}

void trace_free_arrays(stof_trace *t) {
  sched_vec_free(t->ctx, &t->insts);
  sched_vec_free(t->ctx, &t->ints);
  sched_vec_free(t->ctx, &t->nums);
  sched_vec_free(t->ctx, &t->dbls);
  sched_vec_free(t->ctx, &t->chars);
  sched_vec_free(t->ctx, &t->vkinds);
}

stof_status trace_copy(stof_trace *dst, const stof_trace *src) {
  trace_init(dst, src->ctx);
  stof_status st = sched_vec_copy(src->ctx, &dst->insts, &src->insts);
  if (!st) st = sched_vec_copy(src->ctx, &dst->ints, &src->ints);
  if (!st) st = sched_vec_copy(src->ctx, &dst->nums, &src->nums);
  if (!st) st = sched_vec_copy(src->ctx, &dst->dbls, &src->dbls);
  if (!st) st = sched_vec_copy(src->ctx, &dst->chars, &src->chars);
  if (!st) st = sched_vec_copy(src->ctx, &dst->vkinds, &src->vkinds);
  if (st) trace_free_arrays(dst);
  return st;
}

void trace_need(sched_need *n, int nin, int nnum, int ndbl, int nstr, int strbytes, int nout) {
  n->insts += 1;
  n->tints += nin + nstr;
  n->tnums += nnum;
  n->tdbls += ndbl;
  n->tchars += strbytes;
  n->tvalues += nout;
}

static stof_status trace_reserve(stof_trace *t, const sched_need *n) {
  stof_status st;
  if ((st = sched_vec_reserve(t->ctx, &t->insts, n->insts))) return st;
  if ((st = sched_vec_reserve(t->ctx, &t->ints, n->tints))) return st;
  if ((st = sched_vec_reserve(t->ctx, &t->nums, n->tnums))) return st;
  if ((st = sched_vec_reserve(t->ctx, &t->dbls, n->tdbls))) return st;
  if ((st = sched_vec_reserve(t->ctx, &t->chars, n->tchars))) return st;
  return sched_vec_reserve(t->ctx, &t->vkinds, n->tvalues);
}

int trace_record(stof_trace *t, stof_inst_kind kind, int nin, const int *in, int nnum,
                 const int64_t *num, int ndbl, const double *dbl, int nstr,
                 const char *const *str, int decision, int nout, int vkind) {
  sched_inst I;
  memset(&I, 0, sizeof I);
  I.kind = kind;
  I.in = sched_vec_push(t->ctx, &t->ints, in, nin);
  I.nin = nin;
  I.num = sched_vec_push(t->ctx, &t->nums, num, nnum);
  I.nnum = nnum;
  I.dbl = sched_vec_push(t->ctx, &t->dbls, dbl, ndbl);
  I.ndbl = ndbl;
  int offs[256];
  for (int i = 0; i < nstr && i < 256; i++)
    offs[i] = sched_vec_push(t->ctx, &t->chars, str[i], (int)strlen(str[i]) + 1);
  I.str = t->ints.len;
  I.nstr = 0;
  for (int i = 0; i < nstr; i++) {
    int off = i < 256 ? offs[i] : sched_vec_push(t->ctx, &t->chars, str[i], (int)strlen(str[i]) + 1);
    sched_vec_push(t->ctx, &t->ints, &off, 1);
    I.nstr++;
  }
  I.decision = decision;
  I.out = t->vkinds.len;
  I.nout = nout;
  unsigned char vk = (unsigned char)vkind;
  for (int i = 0; i < nout; i++) sched_vec_push(t->ctx, &t->vkinds, &vk, 1);
  sched_vec_push(t->ctx, &t->insts, &I, 1);
  return nout ? I.out : -1;
}

static const char *inst_str(const stof_trace *t, const sched_inst *I, int i) {
  return trace_str(t, trace_int(t, I->str)[i]);
}

stof_status stof_sched_trace(const stof_sched *s, stof_trace **out) {
  *out = NULL;
  stof_trace *t = stof_ctx_alloc(s->ctx, sizeof *t);
  if (!t) return STOF_ERR_NOMEM;
  stof_status st = trace_copy(t, &s->trace);
  if (st) {
    stof_ctx_dealloc(s->ctx, t, sizeof *t);
    return st;
  }
  *out = t;
  return STOF_OK;
}

void stof_trace_free(stof_trace *t) {
  if (!t) return;
  trace_free_arrays(t);
  stof_ctx_dealloc(t->ctx, t, sizeof *t);
}

int stof_trace_ninst(const stof_trace *t) { return t->insts.len; }

stof_inst_kind stof_trace_inst_kind(const stof_trace *t, int i) {
  return i >= 0 && i < t->insts.len ? trace_inst_at(t, i)->kind : STOF_INST_COUNT;
}

/* A SamplePerfectTile knob's decision: factor k becomes divisor decision of the extent. The
 * product is checked when the trace is replayed (the other factors may change next). */
static stof_status set_tile_decision(stof_trace *t, sched_inst *I, int k, int decision) {
  int64_t *num = trace_num(t, I->num);
  int64_t div[SCHED_MAX_DIVISORS];
  int ndiv = sched_divisors(num[2], div);
  if (decision < 0 || decision >= ndiv)
    return stof_ctx_error(t->ctx, STOF_ERR_ARG, "set_decision: decision %d for knob %s out of range "
                          "(%d candidates)", decision, inst_str(t, I, k), ndiv);
  num[3 + k] = div[decision];
  return STOF_OK;
}

stof_status stof_trace_set_decision(stof_trace *t, const char *knob, int decision) {
  for (int i = 0; knob && i < t->insts.len; i++) {
    sched_inst *I = trace_inst_at(t, i);
    if (I->kind == STOF_INST_SAMPLE_PERFECT_TILE) {
      for (int k = 0; k < I->nstr; k++)
        if (strcmp(inst_str(t, I, k), knob) == 0) return set_tile_decision(t, I, k, decision);
      continue;
    }
    if ((I->kind != STOF_INST_KNOB && I->kind != STOF_INST_SAMPLE_CATEGORICAL &&
         I->kind != STOF_INST_SAMPLE_COMPUTE_LOCATION) ||
        strcmp(inst_str(t, I, 0), knob) != 0)
      continue;
    if (decision < 0 || decision >= I->nnum)
      return stof_ctx_error(t->ctx, STOF_ERR_ARG, "set_decision: decision %d for knob %s out of range "
                            "(%d candidates)", decision, knob, I->nnum);
    I->decision = decision;
    return STOF_OK;
  }
  return stof_ctx_error(t->ctx, STOF_ERR_NOT_FOUND, "set_decision: the trace has no knob named %s",
                        knob ? knob : "(null)");
}

/* ---------------------------------------------------------------- Lua text */

/* The shortest of %.15g, %.16g, %.17g that reads back as v. */
static void put_double(stof_buf *b, double v) {
  char t[40];
  for (int prec = 15; prec <= 17; prec++) {
    snprintf(t, sizeof t, "%.*g", prec, v);
    if (strtod(t, NULL) == v) break;
  }
  stof_buf_puts(b, t);
}

static void lua_string(stof_buf *b, const char *s) {
  stof_buf_puts(b, "\"");
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\')
      stof_buf_printf(b, "\\%c", *p);
    else if (*p == '\n')
      stof_buf_puts(b, "\\n");
    else if (*p < 32 || *p == 127)
      stof_buf_printf(b, "\\%03d", *p);
    else
      stof_buf_printf(b, "%c", *p);
  }
  stof_buf_puts(b, "\"");
}

/* A value's name: "l5" (locals) or "v[5]" (a table, for traces with many values: Lua
 * allows 200 locals per function). */
static void lua_value(stof_buf *b, const stof_trace *t, int v, int table) {
  static const char prefix[] = {'b', 'l', 'k', 'g'};
  if (table)
    stof_buf_printf(b, "v[%d]", v);
  else
    stof_buf_printf(b, "%c%d", prefix[((const unsigned char *)t->vkinds.data)[v] & 3], v);
}

static void lua_outputs(stof_buf *b, const stof_trace *t, const sched_inst *I, int table) {
  stof_buf_puts(b, table ? "  " : "  local ");
  for (int i = 0; i < I->nout; i++) {
    if (i) stof_buf_puts(b, ", ");
    lua_value(b, t, I->out + i, table);
  }
  stof_buf_puts(b, " = ");
}

static void lua_inputs(stof_buf *b, const stof_trace *t, const sched_inst *I, int table) {
  for (int i = 0; i < I->nin; i++) {
    if (i) stof_buf_puts(b, ", ");
    lua_value(b, t, trace_int(t, I->in)[i], table);
  }
}

stof_status stof_trace_to_lua(const stof_trace *t, char **out) {
  stof_buf b;
  stof_buf_init(&b, t->ctx);
  int table = t->vkinds.len > 180;
  stof_buf_puts(&b, "-- stof schedule trace: load(text)()(stof.schedule(outputs), stof) rebuilds it\n");
  stof_buf_puts(&b, "return function(s, stof)\n");
  if (table) stof_buf_puts(&b, "  local v = {}\n");
  for (int i = 0; i < t->insts.len; i++) {
    const sched_inst *I = trace_inst_at(t, i);
    const int *in = trace_int(t, I->in);
    const char *m = inst_methods[I->kind];
    if (I->nout > 0) lua_outputs(&b, t, I, table);
    else stof_buf_puts(&b, "  ");
    switch (I->kind) {
    case STOF_INST_GET_BLOCK:
      stof_buf_printf(&b, "s:%s(", m);
      lua_string(&b, inst_str(t, I, 0));
      stof_buf_puts(&b, ")\n");
      break;
    case STOF_INST_GET_LOOPS:
      stof_buf_printf(&b, I->nout ? "table.unpack(s:%s(" : "s:%s(", m);
      lua_value(&b, t, in[0], table);
      stof_buf_puts(&b, I->nout ? "))\n" : ")\n");
      break;
    case STOF_INST_SPLIT:
      stof_buf_printf(&b, "s:%s(", m);
      lua_value(&b, t, in[0], table);
      stof_buf_puts(&b, ", {");
      for (int k = 0; k < I->nnum; k++) {
        if (k) stof_buf_puts(&b, ", ");
        int64_t f = trace_num(t, I->num)[k];
        if (in[1 + k] >= 0)
          lua_value(&b, t, in[1 + k], table);
        else if (f == STOF_INFER)
          stof_buf_puts(&b, "stof.INFER");
        else
          stof_buf_printf(&b, "%lld", (long long)f);
      }
      stof_buf_puts(&b, "})\n");
      break;
    case STOF_INST_FUSE:
    case STOF_INST_REORDER:
    case STOF_INST_VECTORIZE:
    case STOF_INST_UNROLL:
    case STOF_INST_PARALLEL:
    case STOF_INST_UNGROUP:
      stof_buf_printf(&b, "s:%s(", m);
      lua_inputs(&b, t, I, table);
      stof_buf_puts(&b, ")\n");
      break;
    case STOF_INST_BIND:
    case STOF_INST_TENSORIZE:
    case STOF_INST_ANNOTATE:
      stof_buf_printf(&b, "s:%s(", m);
      lua_inputs(&b, t, I, table);
      for (int k = 0; k < I->nstr; k++) {
        stof_buf_puts(&b, ", ");
        lua_string(&b, inst_str(t, I, k));
      }
      stof_buf_puts(&b, ")\n");
      break;
    case STOF_INST_KNOB:
    case STOF_INST_SAMPLE_CATEGORICAL:
      stof_buf_printf(&b, "s:%s(", m);
      lua_string(&b, inst_str(t, I, 0));
      stof_buf_puts(&b, ", {");
      for (int k = 0; k < I->nnum; k++)
        stof_buf_printf(&b, "%s%lld", k ? ", " : "", (long long)trace_num(t, I->num)[k]);
      stof_buf_puts(&b, "}");
      if (I->kind == STOF_INST_SAMPLE_CATEGORICAL) {
        stof_buf_puts(&b, ", {");
        for (int k = 0; k < I->ndbl; k++) {
          if (k) stof_buf_puts(&b, ", ");
          put_double(&b, trace_dbl(t, I->dbl)[k]);
        }
        stof_buf_puts(&b, "}");
      }
      stof_buf_printf(&b, ", %d)\n", I->decision);
      break;
    case STOF_INST_COMPUTE_AT:
    case STOF_INST_REVERSE_COMPUTE_AT:
    case STOF_INST_COMPUTE_INLINE:
    case STOF_INST_REVERSE_COMPUTE_INLINE:
      stof_buf_printf(&b, "s:%s(", m);
      lua_inputs(&b, t, I, table);
      stof_buf_puts(&b, ")\n");
      break;
    case STOF_INST_SAMPLE_PERFECT_TILE: {
      const int64_t *num = trace_num(t, I->num);
      stof_buf_printf(&b, "s:%s(", m);
      lua_inputs(&b, t, I, table);
      stof_buf_printf(&b, ", %lld, %lld, {", (long long)num[0], (long long)num[1]);
      for (int k = 0; k < I->nstr; k++) stof_buf_printf(&b, "%s%lld", k ? ", " : "", (long long)num[3 + k]);
      stof_buf_puts(&b, "}, {");
      for (int k = 0; k < I->nstr; k++) {
        if (k) stof_buf_puts(&b, ", ");
        lua_string(&b, inst_str(t, I, k));
      }
      stof_buf_puts(&b, "})\n");
      break;
    }
    case STOF_INST_SAMPLE_COMPUTE_LOCATION:
      stof_buf_printf(&b, "s:%s(", m);
      lua_inputs(&b, t, I, table);
      stof_buf_printf(&b, ", %d, ", I->decision);
      lua_string(&b, inst_str(t, I, 0));
      stof_buf_puts(&b, ")\n");
      break;
    case STOF_INST_CACHE_READ:
    case STOF_INST_CACHE_WRITE:
      stof_buf_printf(&b, "s:%s(", m);
      lua_inputs(&b, t, I, table);
      if (I->kind == STOF_INST_CACHE_READ)
        stof_buf_printf(&b, ", %lld", (long long)trace_num(t, I->num)[0]);
      stof_buf_puts(&b, ", ");
      lua_string(&b, inst_str(t, I, 0));
      stof_buf_puts(&b, ")\n");
      break;
    case STOF_INST_RFACTOR:
      stof_buf_printf(&b, "s:%s(", m);
      lua_inputs(&b, t, I, table);
      stof_buf_printf(&b, ", %lld)\n", (long long)trace_num(t, I->num)[0]);
      break;
    case STOF_INST_GROUP:
      stof_buf_printf(&b, "s:%s({", m);
      for (int k = 0; k < I->nstr; k++) {
        if (k) stof_buf_puts(&b, ", ");
        lua_string(&b, inst_str(t, I, k));
      }
      stof_buf_puts(&b, "})\n");
      break;
    default: stof_buf_puts(&b, "error(\"unknown instruction\")\n"); break;
    }
  }
  stof_buf_puts(&b, "end\n");
  return stof_buf_finish(&b, out);
}

/* ---------------------------------------------------------------- JSON */

static json_t *json_values(int first, int n) {
  json_t *a = json_array();
  for (int i = 0; i < n; i++) json_array_append_new(a, json_integer(first + i));
  return a;
}

static json_t *json_inputs(const stof_trace *t, const sched_inst *I, int from) {
  json_t *a = json_array();
  for (int i = from; i < I->nin; i++) json_array_append_new(a, json_integer(trace_int(t, I->in)[i]));
  return a;
}

stof_status stof_trace_to_json(const stof_trace *t, char **out) {
  *out = NULL;
  json_t *root = json_object(), *insts = json_array();
  if (!root || !insts) {
    json_decref(root);
    json_decref(insts);
    return stof_ctx_error(t->ctx, STOF_ERR_NOMEM, "trace: out of memory writing JSON");
  }
  json_object_set_new(root, "format", json_string("stof.trace"));
  json_object_set_new(root, "version", json_integer(1));
  for (int i = 0; i < t->insts.len; i++) {
    const sched_inst *I = trace_inst_at(t, i);
    const int *in = trace_int(t, I->in);
    json_t *o = json_object();
    json_object_set_new(o, "kind", json_string(inst_names[I->kind]));
    switch (I->kind) {
    case STOF_INST_GET_BLOCK: json_object_set_new(o, "name", json_string(inst_str(t, I, 0))); break;
    case STOF_INST_GET_LOOPS: json_object_set_new(o, "block", json_integer(in[0])); break;
    case STOF_INST_SPLIT: {
      json_object_set_new(o, "loop", json_integer(in[0]));
      json_t *f = json_array();
      for (int k = 0; k < I->nnum; k++) {
        if (in[1 + k] >= 0) {
          json_t *kn = json_object();
          json_object_set_new(kn, "knob", json_integer(in[1 + k]));
          json_array_append_new(f, kn);
        } else {
          json_array_append_new(f, json_integer(trace_num(t, I->num)[k]));
        }
      }
      json_object_set_new(o, "factors", f);
      break;
    }
    case STOF_INST_FUSE:
    case STOF_INST_REORDER: json_object_set_new(o, "loops", json_inputs(t, I, 0)); break;
    case STOF_INST_BIND:
      json_object_set_new(o, "loop", json_integer(in[0]));
      json_object_set_new(o, "tag", json_string(inst_str(t, I, 0)));
      break;
    case STOF_INST_TENSORIZE:
      json_object_set_new(o, "loop", json_integer(in[0]));
      json_object_set_new(o, "intrinsic", json_string(inst_str(t, I, 0)));
      break;
    case STOF_INST_VECTORIZE:
    case STOF_INST_UNROLL:
    case STOF_INST_PARALLEL: json_object_set_new(o, "loop", json_integer(in[0])); break;
    case STOF_INST_ANNOTATE:
      json_object_set_new(o, "target", json_integer(in[0]));
      json_object_set_new(o, "key", json_string(inst_str(t, I, 0)));
      json_object_set_new(o, "value", json_string(inst_str(t, I, 1)));
      break;
    case STOF_INST_KNOB:
    case STOF_INST_SAMPLE_CATEGORICAL: {
      json_object_set_new(o, "name", json_string(inst_str(t, I, 0)));
      json_t *c = json_array();
      for (int k = 0; k < I->nnum; k++) json_array_append_new(c, json_integer(trace_num(t, I->num)[k]));
      json_object_set_new(o, "candidates", c);
      if (I->kind == STOF_INST_SAMPLE_CATEGORICAL) {
        json_t *p = json_array();
        for (int k = 0; k < I->ndbl; k++) json_array_append_new(p, json_real(trace_dbl(t, I->dbl)[k]));
        json_object_set_new(o, "probs", p);
      }
      json_object_set_new(o, "decision", json_integer(I->decision));
      break;
    }
    case STOF_INST_GROUP: {
      json_t *a = json_array();
      for (int k = 0; k < I->nstr; k++) json_array_append_new(a, json_string(inst_str(t, I, k)));
      json_object_set_new(o, "ops", a);
      break;
    }
    case STOF_INST_UNGROUP: json_object_set_new(o, "group", json_integer(in[0])); break;
    case STOF_INST_COMPUTE_AT:
    case STOF_INST_REVERSE_COMPUTE_AT:
      json_object_set_new(o, "block", json_integer(in[0]));
      if (((const unsigned char *)t->vkinds.data)[in[1]] == SCHED_V_KNOB) {
        json_t *kn = json_object();
        json_object_set_new(kn, "knob", json_integer(in[1]));
        json_object_set_new(o, "loop", kn);
      } else {
        json_object_set_new(o, "loop", json_integer(in[1]));
      }
      break;
    case STOF_INST_SAMPLE_PERFECT_TILE: {
      const int64_t *num = trace_num(t, I->num);
      json_object_set_new(o, "loop", json_integer(in[0]));
      json_object_set_new(o, "n", json_integer(num[0]));
      json_object_set_new(o, "max_innermost", json_integer(num[1]));
      json_object_set_new(o, "extent", json_integer(num[2]));
      json_t *d = json_array(), *nm = json_array();
      for (int k = 0; k < I->nstr; k++) {
        json_array_append_new(d, json_integer(num[3 + k]));
        json_array_append_new(nm, json_string(inst_str(t, I, k)));
      }
      json_object_set_new(o, "decisions", d);
      json_object_set_new(o, "names", nm);
      break;
    }
    case STOF_INST_SAMPLE_COMPUTE_LOCATION: {
      json_object_set_new(o, "block", json_integer(in[0]));
      json_object_set_new(o, "name", json_string(inst_str(t, I, 0)));
      json_t *c = json_array();
      for (int k = 0; k < I->nnum; k++) json_array_append_new(c, json_integer(trace_num(t, I->num)[k]));
      json_object_set_new(o, "candidates", c);
      json_object_set_new(o, "decision", json_integer(I->decision));
      break;
    }
    case STOF_INST_COMPUTE_INLINE:
    case STOF_INST_REVERSE_COMPUTE_INLINE: json_object_set_new(o, "block", json_integer(in[0])); break;
    case STOF_INST_CACHE_READ:
    case STOF_INST_CACHE_WRITE:
      json_object_set_new(o, "block", json_integer(in[0]));
      if (I->kind == STOF_INST_CACHE_READ)
        json_object_set_new(o, "index", json_integer(trace_num(t, I->num)[0]));
      json_object_set_new(o, "scope", json_string(inst_str(t, I, 0)));
      break;
    case STOF_INST_RFACTOR:
      json_object_set_new(o, "loop", json_integer(in[0]));
      json_object_set_new(o, "factor_axis", json_integer(trace_num(t, I->num)[0]));
      break;
    default: break;
    }
    if (I->nout) json_object_set_new(o, "outputs", json_values(I->out, I->nout));
    json_array_append_new(insts, o);
  }
  json_object_set_new(root, "insts", insts);
  char *text = json_dumps(root, JSON_COMPACT);
  json_decref(root);
  if (!text) return stof_ctx_error(t->ctx, STOF_ERR_NOMEM, "trace: out of memory writing JSON");
  *out = stof_ctx_strdup(t->ctx, text);
  free(text);
  return *out ? STOF_OK : STOF_ERR_NOMEM;
}

/* The JSON reader's state: the trace being built and where we are, for messages. */
typedef struct json_reader {
  stof_trace *t;
  int i;
  const char *kind;
} json_reader;

static stof_status bad(json_reader *r, const char *fmt, const char *what) {
  char msg[256];
  snprintf(msg, sizeof msg, fmt, what);
  return stof_ctx_error(r->t->ctx, STOF_ERR_PARSE, "trace: instruction %d (%s): %s", r->i,
                        r->kind ? r->kind : "?", msg);
}

/* v must name an earlier value of kind vkind (any kind when vkind < 0); key names it. */
static stof_status read_value(json_reader *r, json_t *v, const char *key, int vkind, int *out) {
  static const char *const kinds[] = {"block", "loop", "knob", "group"};
  if (!json_is_integer(v)) return bad(r, "%s must be a value number", key);
  json_int_t x = json_integer_value(v);
  if (x < 0 || x >= r->t->vkinds.len) return bad(r, "%s names a value not defined yet", key);
  int k = ((const unsigned char *)r->t->vkinds.data)[x];
  if (vkind >= 0 && k != vkind) {
    char msg[64];
    snprintf(msg, sizeof msg, "%s must be a %s value", key, kinds[vkind]);
    return bad(r, "%s", msg);
  }
  *out = (int)x;
  return STOF_OK;
}

static stof_status read_string(json_reader *r, json_t *o, const char *key, const char **out) {
  json_t *v = json_object_get(o, key);
  if (!json_is_string(v)) return bad(r, "%s must be a string", key);
  *out = json_string_value(v);
  return STOF_OK;
}

static stof_status read_array(json_reader *r, json_t *o, const char *key, int min, json_t **out) {
  json_t *v = json_object_get(o, key);
  if (!json_is_array(v) || (int)json_array_size(v) < min || json_array_size(v) > 65536)
    return bad(r, "%s must be a non-empty array", key);
  *out = v;
  return STOF_OK;
}

static stof_status read_outputs(json_reader *r, json_t *o, int n) {
  json_t *a = json_object_get(o, "outputs");
  if (n == 0) return a ? bad(r, "%s: this kind has no outputs", "outputs") : STOF_OK;
  if (!json_is_array(a) || (int)json_array_size(a) != n) return bad(r, "%s: wrong number of values", "outputs");
  for (int k = 0; k < n; k++) {
    json_t *v = json_array_get(a, (size_t)k);
    if (!json_is_integer(v) || json_integer_value(v) != r->t->vkinds.len + k)
      return bad(r, "%s must number the next values in order", "outputs");
  }
  return STOF_OK;
}

#define READ_MAX 1024

static stof_status read_inst(json_reader *r, json_t *o) {
  stof_trace *t = r->t;
  json_t *kv = json_object_get(o, "kind");
  if (!json_is_object(o) || !json_is_string(kv)) return bad(r, "%s", "not an object with a kind");
  int kind = -1;
  for (int k = 0; k < STOF_INST_COUNT; k++)
    if (strcmp(json_string_value(kv), inst_names[k]) == 0) kind = k;
  r->kind = json_string_value(kv);
  if (kind < 0) return bad(r, "%s", "unknown kind");
  int in[READ_MAX + 1], nin = 0, nnum = 0, ndbl = 0, nstr = 0, nout = 0, decision = -1, vk = 0;
  int64_t num[READ_MAX];
  double dbl[READ_MAX];
  const char *str[READ_MAX];
  json_t *a = NULL;
  stof_status st = STOF_OK;
  switch (kind) {
  case STOF_INST_GET_BLOCK:
    st = read_string(r, o, "name", &str[nstr++]);
    nout = 1;
    vk = SCHED_V_BLOCK;
    break;
  case STOF_INST_GET_LOOPS: {
    st = read_value(r, json_object_get(o, "block"), "block", SCHED_V_BLOCK, &in[nin++]);
    json_t *outs = json_object_get(o, "outputs");
    nout = json_is_array(outs) ? (int)json_array_size(outs) : 0;
    if (nout > STOF_SCHED_MAX_LOOPS) return bad(r, "%s: too many loops", "outputs");
    vk = SCHED_V_LOOP;
    break;
  }
  case STOF_INST_SPLIT:
    st = read_value(r, json_object_get(o, "loop"), "loop", SCHED_V_LOOP, &in[nin++]);
    if (!st) st = read_array(r, o, "factors", 2, &a);
    if (!st && json_array_size(a) > STOF_SCHED_MAX_LOOPS) return bad(r, "%s: too many", "factors");
    for (size_t k = 0; !st && k < json_array_size(a); k++) {
      json_t *f = json_array_get(a, k);
      if (json_is_integer(f)) {
        in[nin++] = -1;
        num[nnum++] = json_integer_value(f);
      } else if (json_is_object(f)) {
        st = read_value(r, json_object_get(f, "knob"), "factors[].knob", SCHED_V_KNOB, &in[nin++]);
        num[nnum++] = 0;
      } else {
        return bad(r, "%s: each is an integer or {\"knob\": value}", "factors");
      }
    }
    nout = nnum;
    vk = SCHED_V_LOOP;
    break;
  case STOF_INST_FUSE:
  case STOF_INST_REORDER:
    st = read_array(r, o, "loops", 1, &a);
    if (!st && json_array_size(a) > STOF_SCHED_MAX_LOOPS) return bad(r, "%s: too many", "loops");
    for (size_t k = 0; !st && k < json_array_size(a); k++)
      st = read_value(r, json_array_get(a, k), "loops[]", SCHED_V_LOOP, &in[nin++]);
    nout = kind == STOF_INST_FUSE;
    vk = SCHED_V_LOOP;
    break;
  case STOF_INST_BIND:
    st = read_value(r, json_object_get(o, "loop"), "loop", SCHED_V_LOOP, &in[nin++]);
    if (!st) st = read_string(r, o, "tag", &str[nstr++]);
    break;
  case STOF_INST_TENSORIZE:
    st = read_value(r, json_object_get(o, "loop"), "loop", SCHED_V_LOOP, &in[nin++]);
    if (!st) st = read_string(r, o, "intrinsic", &str[nstr++]);
    break;
  case STOF_INST_VECTORIZE:
  case STOF_INST_UNROLL:
  case STOF_INST_PARALLEL:
    st = read_value(r, json_object_get(o, "loop"), "loop", SCHED_V_LOOP, &in[nin++]);
    break;
  case STOF_INST_ANNOTATE:
    st = read_value(r, json_object_get(o, "target"), "target", -1, &in[nin++]);
    if (!st && ((const unsigned char *)t->vkinds.data)[in[0]] > SCHED_V_LOOP)
      return bad(r, "%s must be a loop or a block", "target");
    if (!st) st = read_string(r, o, "key", &str[nstr++]);
    if (!st) st = read_string(r, o, "value", &str[nstr++]);
    break;
  case STOF_INST_KNOB:
  case STOF_INST_SAMPLE_CATEGORICAL: {
    st = read_string(r, o, "name", &str[nstr++]);
    if (!st) st = read_array(r, o, "candidates", 1, &a);
    if (!st && json_array_size(a) > READ_MAX) return bad(r, "%s: too many", "candidates");
    for (size_t k = 0; !st && k < json_array_size(a); k++) {
      if (!json_is_integer(json_array_get(a, k))) return bad(r, "%s must be integers", "candidates");
      num[nnum++] = json_integer_value(json_array_get(a, k));
    }
    if (!st && kind == STOF_INST_SAMPLE_CATEGORICAL) {
      st = read_array(r, o, "probs", 1, &a);
      if (!st && (int)json_array_size(a) != nnum) return bad(r, "%s: one per candidate", "probs");
      for (size_t k = 0; !st && k < json_array_size(a); k++) {
        if (!json_is_number(json_array_get(a, k))) return bad(r, "%s must be numbers", "probs");
        dbl[ndbl++] = json_number_value(json_array_get(a, k));
      }
    }
    json_t *d = json_object_get(o, "decision");
    if (!st && (!json_is_integer(d) || json_integer_value(d) < 0 || json_integer_value(d) >= nnum))
      return bad(r, "%s must index the candidates", "decision");
    if (!st) decision = (int)json_integer_value(d);
    nout = 1;
    vk = SCHED_V_KNOB;
    break;
  }
  case STOF_INST_GROUP:
    st = read_array(r, o, "ops", 1, &a);
    if (!st && json_array_size(a) > READ_MAX) return bad(r, "%s: too many", "ops");
    for (size_t k = 0; !st && k < json_array_size(a); k++) {
      if (!json_is_string(json_array_get(a, k))) return bad(r, "%s must be op names", "ops");
      str[nstr++] = json_string_value(json_array_get(a, k));
    }
    nout = 1;
    vk = SCHED_V_GROUP;
    break;
  case STOF_INST_UNGROUP:
    st = read_value(r, json_object_get(o, "group"), "group", SCHED_V_GROUP, &in[nin++]);
    break;
  case STOF_INST_COMPUTE_AT:
  case STOF_INST_REVERSE_COMPUTE_AT: {
    st = read_value(r, json_object_get(o, "block"), "block", SCHED_V_BLOCK, &in[nin++]);
    json_t *l = json_object_get(o, "loop");
    if (!st && kind == STOF_INST_COMPUTE_AT && json_is_object(l))
      st = read_value(r, json_object_get(l, "knob"), "loop.knob", SCHED_V_KNOB, &in[nin++]);
    else if (!st)
      st = read_value(r, l, "loop", SCHED_V_LOOP, &in[nin++]);
    break;
  }
  case STOF_INST_SAMPLE_PERFECT_TILE: {
    st = read_value(r, json_object_get(o, "loop"), "loop", SCHED_V_LOOP, &in[nin++]);
    json_t *jn = json_object_get(o, "n"), *jm = json_object_get(o, "max_innermost"),
           *je = json_object_get(o, "extent");
    if (!st && (!json_is_integer(jn) || json_integer_value(jn) < 1 || json_integer_value(jn) > STOF_SCHED_MAX_LOOPS))
      return bad(r, "%s must be an integer in 1..64", "n");
    if (!st && (!json_is_integer(jm) || json_integer_value(jm) < 0 || json_integer_value(jm) > SCHED_MAX_TILE_EXTENT))
      return bad(r, "%s must be an integer >= 0", "max_innermost");
    if (!st && (!json_is_integer(je) || json_integer_value(je) < 1 || json_integer_value(je) > SCHED_MAX_TILE_EXTENT))
      return bad(r, "%s must be an integer in 1..2^31-1", "extent");
    if (st) break;
    int n = (int)json_integer_value(jn);
    int64_t ext = json_integer_value(je), maxi = json_integer_value(jm), prod = 1;
    num[nnum++] = n;
    num[nnum++] = maxi;
    num[nnum++] = ext;
    json_t *d = json_object_get(o, "decisions"), *nm = json_object_get(o, "names");
    if (!json_is_array(d) || (int)json_array_size(d) != n) return bad(r, "%s must hold n factors", "decisions");
    if (!json_is_array(nm) || (int)json_array_size(nm) != n) return bad(r, "%s must hold n knob names", "names");
    for (int k = 0; k < n; k++) {
      json_t *f = json_array_get(d, (size_t)k), *s = json_array_get(nm, (size_t)k);
      if (!json_is_integer(f) || json_integer_value(f) < 1 || ext % json_integer_value(f))
        return bad(r, "%s must be divisors of the extent", "decisions");
      if (!json_is_string(s) || !*json_string_value(s)) return bad(r, "%s must be non-empty strings", "names");
      num[nnum++] = json_integer_value(f);
      str[nstr++] = json_string_value(s);
      prod = prod > ext ? prod : prod * json_integer_value(f);
    }
    if (prod != ext) return bad(r, "%s must multiply to the extent", "decisions");
    if (maxi > 0 && num[nnum - 1] > maxi) return bad(r, "%s: the innermost exceeds max_innermost", "decisions");
    nout = n;
    vk = SCHED_V_KNOB;
    break;
  }
  case STOF_INST_SAMPLE_COMPUTE_LOCATION: {
    st = read_value(r, json_object_get(o, "block"), "block", SCHED_V_BLOCK, &in[nin++]);
    if (!st) st = read_string(r, o, "name", &str[nstr++]);
    if (!st) st = read_array(r, o, "candidates", 1, &a);
    if (!st && json_array_size(a) > READ_MAX) return bad(r, "%s: too many", "candidates");
    for (size_t k = 0; !st && k < json_array_size(a); k++) {
      json_t *c = json_array_get(a, k);
      if (!json_is_integer(c) || json_integer_value(c) < (k ? 0 : -1) || (k == 0) != (json_integer_value(c) == -1) ||
          json_integer_value(c) >= STOF_SCHED_MAX_LOOPS * 8)
        return bad(r, "%s must be -1 (the root), then loop depths", "candidates");
      num[nnum++] = json_integer_value(c);
    }
    json_t *d = json_object_get(o, "decision");
    if (!st && (!json_is_integer(d) || json_integer_value(d) < 0 || json_integer_value(d) >= nnum))
      return bad(r, "%s must index the candidates", "decision");
    if (!st) decision = (int)json_integer_value(d);
    nout = 1;
    vk = SCHED_V_KNOB;
    break;
  }
  case STOF_INST_COMPUTE_INLINE:
  case STOF_INST_REVERSE_COMPUTE_INLINE:
    st = read_value(r, json_object_get(o, "block"), "block", SCHED_V_BLOCK, &in[nin++]);
    break;
  case STOF_INST_CACHE_READ:
  case STOF_INST_CACHE_WRITE:
    st = read_value(r, json_object_get(o, "block"), "block", SCHED_V_BLOCK, &in[nin++]);
    if (!st && kind == STOF_INST_CACHE_READ) {
      json_t *x = json_object_get(o, "index");
      if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) > (1 << 20))
        return bad(r, "%s must be an integer >= 0", "index");
      num[nnum++] = json_integer_value(x);
    }
    if (!st) st = read_string(r, o, "scope", &str[nstr++]);
    nout = 1;
    vk = SCHED_V_BLOCK;
    break;
  case STOF_INST_RFACTOR: {
    st = read_value(r, json_object_get(o, "loop"), "loop", SCHED_V_LOOP, &in[nin++]);
    json_t *x = json_object_get(o, "factor_axis");
    if (!st && (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) > STOF_MAX_DIMS))
      return bad(r, "%s must be an integer in 0..8", "factor_axis");
    if (!st) num[nnum++] = json_integer_value(x);
    nout = 1;
    vk = SCHED_V_BLOCK;
    break;
  }
  default: break;
  }
  if (st) return st;
  if ((st = read_outputs(r, o, nout))) return st;
  int bytes = 0;
  for (int k = 0; k < nstr; k++) bytes += (int)strlen(str[k]) + 1;
  sched_need n = {0};
  trace_need(&n, nin, nnum, ndbl, nstr, bytes, nout);
  if ((st = trace_reserve(t, &n))) return st;
  trace_record(t, (stof_inst_kind)kind, nin, in, nnum, num, ndbl, dbl, nstr, str, decision, nout, vk);
  return STOF_OK;
}

stof_status stof_trace_from_json(stof_ctx *ctx, const char *json, stof_trace **out) {
  *out = NULL;
  if (!json) return stof_ctx_error(ctx, STOF_ERR_ARG, "trace: missing JSON text");
  json_error_t err;
  json_t *root = json_loads(json, 0, &err);
  if (!root)
    return stof_ctx_error(ctx, STOF_ERR_PARSE, "trace: JSON error at line %d, column %d: %s",
                          err.line, err.column, err.text);
  stof_status st = STOF_OK;
  json_t *fmt = json_object_get(root, "format"), *ver = json_object_get(root, "version"),
         *insts = json_object_get(root, "insts");
  if (!json_is_object(root) || !json_is_string(fmt) || strcmp(json_string_value(fmt), "stof.trace") != 0)
    st = stof_ctx_error(ctx, STOF_ERR_PARSE, "trace: not a stof trace (format must be \"stof.trace\")");
  else if (!json_is_integer(ver) || json_integer_value(ver) != 1)
    st = stof_ctx_error(ctx, STOF_ERR_PARSE, "trace: unsupported version (this stof reads version 1)");
  else if (!json_is_array(insts))
    st = stof_ctx_error(ctx, STOF_ERR_PARSE, "trace: insts must be an array");
  stof_trace *t = NULL;
  if (!st) {
    t = stof_ctx_alloc(ctx, sizeof *t);
    if (!t) st = STOF_ERR_NOMEM;
    else trace_init(t, ctx);
  }
  json_reader r = {t, 0, NULL};
  for (size_t i = 0; !st && i < json_array_size(insts); i++) {
    r.i = (int)i;
    r.kind = NULL;
    st = read_inst(&r, json_array_get(insts, i));
  }
  json_decref(root);
  if (st) {
    stof_trace_free(t);
    return st;
  }
  *out = t;
  return STOF_OK;
}

/* ---------------------------------------------------------------- replay */

static stof_status replay_inst(const stof_trace *t, const sched_inst *I, stof_sched *c, int *map) {
  const int *in = trace_int(t, I->in);
  int ids[STOF_SCHED_MAX_LOOPS + 1], n = 0, one = -1;
  stof_status st = STOF_OK;
  for (int k = 0; k < I->nin && k <= STOF_SCHED_MAX_LOOPS; k++) ids[k] = in[k] >= 0 ? map[in[k]] : -1;
  switch (I->kind) {
  case STOF_INST_GET_BLOCK:
    st = stof_sched_get_block(c, inst_str(t, I, 0), &one);
    if (!st) map[I->out] = one;
    break;
  case STOF_INST_GET_LOOPS: {
    int loops[STOF_SCHED_MAX_LOOPS];
    st = stof_sched_get_loops(c, ids[0], STOF_SCHED_MAX_LOOPS, loops, &n);
    if (!st && n != I->nout)
      st = stof_ctx_error(c->ctx, STOF_ERR_SCHEDULE, "block %s has %d loops, the trace expects %d",
                          sched_block_name(c, ids[0]), n, I->nout);
    for (int k = 0; !st && k < n; k++) map[I->out + k] = loops[k];
    break;
  }
  case STOF_INST_SPLIT: {
    stof_factor f[STOF_SCHED_MAX_LOOPS];
    int parts[STOF_SCHED_MAX_LOOPS];
    for (int k = 0; k < I->nnum; k++)
      f[k] = in[1 + k] >= 0 ? stof_factor_knob(ids[1 + k]) : stof_factor_const(trace_num(t, I->num)[k]);
    st = stof_sched_split(c, ids[0], I->nnum, f, parts);
    for (int k = 0; !st && k < I->nnum; k++) map[I->out + k] = parts[k];
    break;
  }
  case STOF_INST_FUSE:
    st = stof_sched_fuse(c, I->nin, ids, &one);
    if (!st) map[I->out] = one;
    break;
  case STOF_INST_REORDER: st = stof_sched_reorder(c, I->nin, ids); break;
  case STOF_INST_BIND: st = stof_sched_bind(c, ids[0], inst_str(t, I, 0)); break;
  case STOF_INST_TENSORIZE: st = stof_sched_tensorize(c, ids[0], inst_str(t, I, 0)); break;
  case STOF_INST_VECTORIZE: st = stof_sched_vectorize(c, ids[0]); break;
  case STOF_INST_UNROLL: st = stof_sched_unroll(c, ids[0]); break;
  case STOF_INST_PARALLEL: st = stof_sched_parallel(c, ids[0]); break;
  case STOF_INST_ANNOTATE:
    if (((const unsigned char *)t->vkinds.data)[in[0]] == SCHED_V_BLOCK)
      st = stof_sched_annotate_block(c, ids[0], inst_str(t, I, 0), inst_str(t, I, 1));
    else
      st = stof_sched_annotate_loop(c, ids[0], inst_str(t, I, 0), inst_str(t, I, 1));
    break;
  case STOF_INST_KNOB:
    st = stof_sched_knob(c, inst_str(t, I, 0), I->nnum, trace_num(t, I->num), I->decision, &one);
    if (!st) map[I->out] = one;
    break;
  case STOF_INST_SAMPLE_CATEGORICAL:
    st = stof_sched_sample_categorical(c, inst_str(t, I, 0), I->nnum, trace_num(t, I->num),
                                       trace_dbl(t, I->dbl), I->decision, &one);
    if (!st) map[I->out] = one;
    break;
  case STOF_INST_GROUP: {
    int *blocks = stof_ctx_alloc(c->ctx, sizeof *blocks * (size_t)I->nstr);
    if (!blocks) return STOF_ERR_NOMEM;
    for (int k = 0; k < I->nstr && !st; k++) st = sched_find_block_any(c, "group", inst_str(t, I, k), &blocks[k]);
    if (!st) st = sched_group_blocks(c, I->nstr, blocks, &one);
    stof_ctx_dealloc(c->ctx, blocks, sizeof *blocks * (size_t)I->nstr);
    if (!st) map[I->out] = one;
    break;
  }
  case STOF_INST_UNGROUP: st = stof_sched_ungroup(c, ids[0]); break;
  case STOF_INST_COMPUTE_AT:
    if (((const unsigned char *)t->vkinds.data)[in[1]] == SCHED_V_KNOB)
      st = stof_sched_compute_at_knob(c, ids[0], ids[1]);
    else
      st = stof_sched_compute_at(c, ids[0], ids[1]);
    break;
  case STOF_INST_SAMPLE_PERFECT_TILE: {
    const int64_t *num = trace_num(t, I->num);
    const char *names[STOF_SCHED_MAX_LOOPS];
    int knobs[STOF_SCHED_MAX_LOOPS];
    for (int k = 0; k < I->nstr; k++) names[k] = inst_str(t, I, k);
    st = sched_sample_perfect_tile(c, ids[0], (int)num[0], (int)num[1], num + 3, names, knobs);
    for (int k = 0; !st && k < I->nstr; k++) map[I->out + k] = knobs[k];
    break;
  }
  case STOF_INST_SAMPLE_COMPUTE_LOCATION:
    st = sched_sample_compute_location(c, ids[0], I->decision, inst_str(t, I, 0), I->nnum,
                                       trace_num(t, I->num), &one);
    if (!st) map[I->out] = one;
    break;
  case STOF_INST_REVERSE_COMPUTE_AT: st = stof_sched_reverse_compute_at(c, ids[0], ids[1]); break;
  case STOF_INST_COMPUTE_INLINE: st = stof_sched_compute_inline(c, ids[0]); break;
  case STOF_INST_REVERSE_COMPUTE_INLINE: st = stof_sched_reverse_compute_inline(c, ids[0]); break;
  case STOF_INST_CACHE_READ:
    st = stof_sched_cache_read(c, ids[0], (int)trace_num(t, I->num)[0], inst_str(t, I, 0), &one);
    if (!st) map[I->out] = one;
    break;
  case STOF_INST_CACHE_WRITE:
    st = stof_sched_cache_write(c, ids[0], inst_str(t, I, 0), &one);
    if (!st) map[I->out] = one;
    break;
  case STOF_INST_RFACTOR:
    st = stof_sched_rfactor(c, ids[0], (int)trace_num(t, I->num)[0], &one);
    if (!st) map[I->out] = one;
    break;
  default: st = stof_ctx_error(c->ctx, STOF_ERR_INTERNAL, "unknown instruction kind %d", I->kind);
  }
  return st;
}

stof_status stof_sched_replay(const stof_trace *t, stof_sched *s) {
  stof_sched *c = NULL;
  stof_status st = stof_sched_clone(s, &c);
  if (st) return st;
  int nv = t->vkinds.len;
  int *map = stof_ctx_alloc(s->ctx, sizeof *map * (size_t)(nv ? nv : 1));
  if (!map) {
    stof_sched_free(c);
    return STOF_ERR_NOMEM;
  }
  for (int i = 0; i < t->insts.len && !st; i++) {
    const sched_inst *I = trace_inst_at(t, i);
    st = replay_inst(t, I, c, map);
    if (st && st != STOF_ERR_NOMEM) {
      char msg[900];
      snprintf(msg, sizeof msg, "%s", stof_ctx_message(s->ctx));
      stof_ctx_error(s->ctx, st, "replay: instruction %d (%s): %s", i, inst_names[I->kind], msg);
    }
  }
  stof_ctx_dealloc(s->ctx, map, sizeof *map * (size_t)(nv ? nv : 1));
  if (st) {
    stof_sched_free(c);
    return st;
  }
  stof_sched tmp = *s;
  *s = *c;
  *c = tmp;
  stof_sched_free(c);
  return STOF_OK;
}
