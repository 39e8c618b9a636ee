/*
 * The two-stage search (DESIGN.md section 7, docs/SEARCH.md): for a model graph on a
 * target, the fusion scheme (stage 1) and each segment's template and knob decisions
 * (stage 2) that run fastest, every candidate built as an exec/ plan and measured on the
 * target, every candidate that would become the best checked against the reference first.
 *
 * A candidate is a scheme (a segment number per op, the plan's code) and a configuration:
 * per segment, a template (-1 the vendor GEMM, else an index into the templates, or
 * DEFAULT: the vendor GEMM where it can run, else "auto") and knob decisions by knob name;
 * per intrinsic (GPU), knob values. The plan calls back (stof_plan_hooks): generate_gemm
 * asks whether a GEMM segment runs on the vendor GEMM, schedule applies a template to a
 * generated segment: the template runs on a clone of the fresh schedule, its trace gets
 * the configuration's decisions and is replayed into the schedule, and the knobs it made
 * (names, candidate counts) are remembered per (segment, template) for sampling.
 *
 * Segments are indexed in the order the plan runs them, which for a fixed scheme does not
 * change, so a configuration is an array by segment index. Identical segments (the plan
 * shares one implementation among them) form a class tuned once: its owner's decisions
 * rule, its members take the owner's template so that they keep sharing.
 *
 * Invariants: candidates never fail the search (a failure is a record); every OK record of
 * a run is at least as slow as a record of that run that passed the check, so the
 * database's best record has always passed it; the tuner owns every plan it builds and
 * frees all but the one returned.
 *
 * This file: sampling, stage 1, stage 2, resuming and stof_tune; candidate.c builds,
 * measures, checks and records candidates (search_int.h).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "search_int.h"

/* ---------------------------------------------------------------- sampling */

static uint64_t rnd(tuner *t) { return stof_ctx_rand_u64(t->ctx); }

/* A random configuration of class (owner) i: a template among its choices (one not tried
 * on the segment yet first, never one that failed), a random decision of each knob that
 * template is known to make; members take the template. */
static void sample_class(tuner *t, int i) {
  seg *s = &t->segs[i];
  cfg *c = &t->cur[i];
  if (!s->seen || s->nchoice == 0) return;
  /* a template not tried on this segment yet comes first, then any that is not bad */
  int good[MAXC], ngood = 0;
  for (int k = 0; k < s->nchoice; k++)
    if (!s->bad[k] && !s->tried[k]) good[ngood++] = k;
  if (!ngood)
    for (int k = 0; k < s->nchoice; k++)
      if (!s->bad[k]) good[ngood++] = k;
  if (!ngood) return;
  int ch = good[rnd(t) % (uint64_t)ngood];
  c->tmpl = s->tmpl[ch];
  c->n = 0;
  const dom *d = &s->d[ch];
  for (int k = 0; d->known && k < d->n; k++)
    if (d->ncand[k] > 1) {
      snprintf(c->name[c->n], NAMEL, "%s", d->name[k]);
      c->dec[c->n++] = (int)(rnd(t) % (uint64_t)d->ncand[k]);
    }
  for (int m = 0; m < t->nseg; m++)
    if (m != i && t->segs[m].owner == i) {
      t->cur[m].tmpl = c->tmpl;
      t->cur[m].n = 0;
    }
}

/* Whether class i has more than one configuration (or may have: a template not tried yet). */
static int tunable(const tuner *t, int i) {
  const seg *s = &t->segs[i];
  if (s->owner != i || !s->seen) return 0;
  if (s->nchoice > 1) return 1;
  for (int k = 0; s->nchoice == 1 && s->d[0].known && k < s->d[0].n; k++)
    if (s->d[0].ncand[k] > 1) return 1;
  return 0;
}

/* One knob of one intrinsic set to another of its candidates (a step from the best: most
 * joint settings of tile, warps and stages are illegal, and the plan refuses those before
 * compiling anything). */
static void sample_intrinsics(tuner *t) {
  if (!t->nin) return;
  int i = (int)(rnd(t) % (uint64_t)t->nin);
  if (!t->in[i]->nknob) return;
  int k = (int)(rnd(t) % (uint64_t)t->in[i]->nknob);
  const stof_intrin_knob *kn = &t->in[i]->knob[k];
  if (kn->ncand > 1) t->inval[i][k] = (int)kn->cand[rnd(t) % (uint64_t)kn->ncand];
}

static void reset_cfg(tuner *t) {
  for (int i = 0; i < t->nslot; i++) t->cur[i] = (cfg){DEFAULT, 0, {{0}}, {0}};
  memset(t->inval, 0, sizeof t->inval);
}

/* ---------------------------------------------------------------- stage 1 */

/* Knob settings measured per stage-1 scheme (stof_tune_opts.stage1_samples, default 3). */
static int stage1_samples(const tuner *t) { return t->o->stage1_samples > 0 ? t->o->stage1_samples : 3; }

/* Measures the scheme in t->code: the default configuration, then samples-1 random ones;
 * the best time in *ms (0 when every one failed). The segments are reset for this scheme. */
static void measure_scheme(tuner *t, double *ms) {
  int samples = stage1_samples(t);
  *ms = 0;
  memset(t->segs, 0, sizeof *t->segs * (size_t)t->nslot);
  reset_cfg(t);
  double best = 0, m;
  int *code0 = stof_ctx_alloc(t->ctx, sizeof *code0 * (size_t)t->nop);
  if (!code0) return;
  memcpy(code0, t->code, sizeof *code0 * (size_t)t->nop);
  for (int k = 0; k < samples && !search_out_of_budget(t); k++) {
    memcpy(t->code, code0, sizeof *code0 * (size_t)t->nop);
    if (k > 0) {
      for (int i = 0; i < t->nseg; i++)
        if (tunable(t, i)) sample_class(t, i);
      sample_intrinsics(t);
    }
    int r = search_trial(t, &m);
    if (r >= 0 && m > 0 && t->outcome != TRIAL_ABANDONED && (best == 0 || m < best)) best = m;
    if (k == 0 && m == 0) break; /* the scheme does not build */
    /* its default configuration so slow that its first run was abandoned: no knob setting
     * is likely to win that back, and each sample would cost that much again */
    if (k == 0 && r == 0 && t->outcome == TRIAL_ABANDONED) break;
  }
  memcpy(t->code, code0, sizeof *code0 * (size_t)t->nop);
  stof_ctx_dealloc(t->ctx, code0, sizeof *code0 * (size_t)t->nop);
  *ms = best;
}

/* The ops of segment s of code (run order). */
static int seg_first(const tuner *t, const int *code, int s) {
  for (int i = 0; i < t->nop; i++)
    if (code[i] == s) return i;
  return -1;
}
static int seg_last(const tuner *t, const int *code, int s) {
  for (int i = t->nop - 1; i >= 0; i--)
    if (code[i] == s) return i;
  return -1;
}

typedef enum move_kind { MOVE_EXPAND, MOVE_SEIZE_NEXT, MOVE_SEIZE_PREV, MOVE_COMPETE } move_kind;

/* Applies a move at segment a (a and a + 1, or a - 1 and a + 1 for compete) and at every
 * position whose segments are of the same classes (identical layers move together): into
 * code (from base). Returns whether anything changed and the move is legal by the counts. */
static int apply_move(const tuner *t, const int *base, int *code, move_kind mk, int a) {
  memcpy(code, base, sizeof *code * (size_t)t->nop);
  const seg *S = t->segs;
  int n = t->nseg, changed = 0;
  for (int x = 0; x < n; x++) {
    int y = mk == MOVE_COMPETE ? x - 1 : x + 1, z = x + 1;
    if (y < 0 || z >= n || y >= n) continue;
    if (mk == MOVE_COMPETE) {
      if (a < 1 || a + 1 >= n) return 0;
      if (S[x].owner != S[a].owner || S[y].owner != S[a - 1].owner || S[z].owner != S[a + 1].owner) continue;
      /* x (no CI op) between y and z (CI ops, not intrinsics): to the one with fewer */
      int to = S[y].nci <= S[z].nci ? y : z;
      if (S[to].nci + S[x].nci > 2) continue;
      for (int i = 0; i < t->nop; i++)
        if (code[i] == x) code[i] = to, changed = 1;
      continue;
    }
    if (S[x].owner != S[a].owner || S[y].owner != S[a + 1].owner) continue;
    if (mk == MOVE_EXPAND) {
      if (S[x].nci + S[y].nci > 2) continue;
      for (int i = 0; i < t->nop; i++)
        if (code[i] == y) code[i] = x, changed = 1;
    } else if (mk == MOVE_SEIZE_NEXT) { /* x (CI) takes y's first op */
      int i = seg_first(t, base, y);
      if (i >= 0 && seg_last(t, base, y) != i) code[i] = x, changed = 1;
    } else { /* MOVE_SEIZE_PREV: y (CI) takes x's last op */
      int i = seg_last(t, base, x);
      if (i >= 0 && seg_first(t, base, x) != i) code[i] = y, changed = 1;
    }
  }
  return changed;
}

/* Whether the move at a is one the rules allow (kinds and compute-intensive counts). */
static int move_allowed(const tuner *t, move_kind mk, int a) {
  const seg *S = t->segs;
  int n = t->nseg;
  if (mk == MOVE_COMPETE) {
    if (a < 1 || a + 1 >= n) return 0;
    return S[a].kind != STOF_SEG_INTRIN && S[a].nci == 0 && S[a - 1].kind != STOF_SEG_INTRIN &&
           S[a + 1].kind != STOF_SEG_INTRIN && S[a - 1].nci > 0 && S[a + 1].nci > 0;
  }
  if (a + 1 >= n || S[a].kind == STOF_SEG_INTRIN || S[a + 1].kind == STOF_SEG_INTRIN) return 0;
  if (mk == MOVE_EXPAND) return S[a].nci + S[a + 1].nci <= 2;
  if (mk == MOVE_SEIZE_NEXT) return S[a].nci > 0 && S[a + 1].nci == 0;
  return S[a + 1].nci > 0 && S[a].nci == 0; /* SEIZE_PREV */
}

static const char *const move_names[] = {"expand", "seize", "seize", "compete"};

static stof_status stage1(tuner *t, double stage_budget) {
  stof_ctx *ctx = t->ctx;
  t->stage = 1;
  size_t no = (size_t)t->nop, ns = (size_t)t->nslot;
  int maxmove = 4 * t->nslot;
  int *base = stof_ctx_alloc(ctx, sizeof *base * no);
  int *codes = stof_ctx_alloc(ctx, sizeof *codes * no * (size_t)maxmove);
  int *mkind = stof_ctx_alloc(ctx, sizeof *mkind * (size_t)maxmove), *mat = stof_ctx_alloc(ctx, sizeof *mat * (size_t)maxmove);
  seg *snap = stof_ctx_alloc(ctx, sizeof *snap * ns);
  unsigned char *tried = stof_ctx_alloc(ctx, ns * 4);
  stof_status st = STOF_OK;
  if (!base || !codes || !mkind || !mat || !snap || !tried) {
    st = STOF_ERR_NOMEM;
    goto done;
  }
  int improved = 1;
  while (improved && search_elapsed(t) < stage_budget && !search_out_of_budget(t)) {
    improved = 0;
    /* the moves of the current best scheme, one position per class (the move applies to
     * every position of the same classes) */
    memcpy(base, t->best_code, sizeof *base * no);
    memcpy(snap, t->segs, sizeof *snap * ns); /* the facts of the best scheme's last build */
    int nseg = t->nseg, nmove = 0;
    memset(tried, 0, ns * 4);
    for (int mk = 0; mk < 4; mk++)
      for (int a = 0; a < nseg && nmove < maxmove; a++) {
        if (!move_allowed(t, (move_kind)mk, a) || tried[(size_t)mk * ns + (size_t)snap[a].owner]) continue;
        tried[(size_t)mk * ns + (size_t)snap[a].owner] = 1;
        if (!apply_move(t, base, codes + no * (size_t)nmove, (move_kind)mk, a)) continue;
        mkind[nmove] = mk;
        mat[nmove++] = a;
      }
    /* as many as the budget leaves room for (each: compiled ahead, then measured a few
     * times), their code compiled ahead on every compiling thread with the default
     * configuration */
    nmove = search_fit(t, nmove, stage1_samples(t));
    double p0 = search_now();
    for (int m = 0; m < nmove; m++) {
      memcpy(t->code, codes + no * (size_t)m, sizeof *t->code * no);
      memset(t->segs, 0, sizeof *t->segs * ns);
      reset_cfg(t);
      search_collect_jobs(t);
    }
    search_compile_jobs(t);
    if (nmove) t->prep_s = (search_now() - p0) / nmove;
    for (int m = 0; m < nmove && !improved && search_elapsed(t) < stage_budget && !search_out_of_budget(t); m++) {
      memcpy(t->code, codes + no * (size_t)m, sizeof *t->code * no);
      if (t->o->trace) {
        int i = seg_first(t, base, mat[m]), j = seg_last(t, base, mat[m] + 1 < nseg ? mat[m] + 1 : mat[m]);
        fprintf(stderr, "stof tune: trace: %6.2f s stage 1: %s at segment %d (ops %s .. %s)\n", search_elapsed(t),
                move_names[mkind[m]], mat[m], i >= 0 ? t->ops[i]->name : "?", j >= 0 ? t->ops[j]->name : "?");
      }
      double ms, before = t->best_ms;
      measure_scheme(t, &ms);
      snprintf(t->what, sizeof t->what, "%s at segment %d: %.4f ms", move_names[mkind[m]], mat[m], ms);
      improved = t->best_ms < before; /* a sample became the best (checked) */
    }
    if (!improved) { /* the facts of the best scheme again, for stage 2 */
      memcpy(t->segs, snap, sizeof *snap * ns);
      t->nseg = nseg;
    }
  }
done:
  stof_ctx_dealloc(ctx, base, sizeof *base * no);
  stof_ctx_dealloc(ctx, codes, sizeof *codes * no * (size_t)maxmove);
  stof_ctx_dealloc(ctx, mkind, sizeof *mkind * (size_t)maxmove);
  stof_ctx_dealloc(ctx, mat, sizeof *mat * (size_t)maxmove);
  stof_ctx_dealloc(ctx, snap, sizeof *snap * ns);
  stof_ctx_dealloc(ctx, tried, ns * 4);
  return st;
}

/* ---------------------------------------------------------------- stage 2 */

static stof_status stage2(tuner *t) {
  stof_ctx *ctx = t->ctx;
  t->stage = 2;
  size_t ns = (size_t)t->nslot, no = (size_t)t->nop;
  /* the facts of the best scheme: rebuild it once with its configuration */
  memcpy(t->code, t->best_code, sizeof *t->code * no);
  memset(t->segs, 0, sizeof *t->segs * ns);
  search_copy_cfg(t->cur, t->best_cfg, t->nslot);
  memcpy(t->inval, t->best_inval, sizeof t->inval);
  stof_plan *p = NULL;
  stof_status st = search_build(t, t->code, &p);
  if (!st) st = search_learn(t, p);
  stof_plan_free(p);
  if (st == STOF_ERR_NOMEM) return st;
  if (st) {
    /* it built before: a template that does not do the same twice (a user's Lua function
     * may not); the best plan so far stands, without stage 2 */
    fprintf(stderr, "stof tune: the best scheme does not build again (%s): stage 2 skipped\n", stof_ctx_message(ctx));
    stof_ctx_clear_error(ctx);
    return STOF_OK;
  }
  int n = t->nseg;
  int ncls = 0, intr = t->cuda && t->nin > 0; /* the intrinsics' knobs: one more class */
  int *cls = stof_ctx_alloc(ctx, sizeof *cls * (size_t)(n + 1));
  double *reward = stof_ctx_alloc(ctx, sizeof *reward * (size_t)(n + 1));
  if (!cls || !reward) {
    st = STOF_ERR_NOMEM;
    goto done;
  }
  for (int i = 0; i < n; i++)
    if (tunable(t, i)) cls[ncls++] = i;
  int nall = ncls + intr;
  for (int c = 0; c < nall; c++) reward[c] = 0;
  int per_round = nall < 4 ? 4 : nall;
  cfg *cand = stof_ctx_alloc(ctx, sizeof *cand * ns * (size_t)per_round);
  int (*cval)[MAXIN][STOF_INTRIN_MAX_KNOBS] = stof_ctx_alloc(ctx, sizeof *cval * (size_t)per_round);
  int *ccls = stof_ctx_alloc(ctx, sizeof *ccls * (size_t)per_round);
  uint64_t *chash = stof_ctx_alloc(ctx, sizeof *chash * (size_t)per_round);
  if (!cand || !cval || !ccls || !chash) {
    st = STOF_ERR_NOMEM;
    goto free_round;
  }
  int stale = 0;
  for (int round = 0; nall > 0 && stale < 2 && !search_out_of_budget(t); round++) {
    double total = 0;
    for (int c = 0; c < nall; c++) total += reward[c];
    /* the round's candidates: one class resampled from the best each (round 1 evenly,
     * later in proportion to the gain, a tenth kept for exploration), none measured before */
    int nc = 0;
    for (int k = 0; k < per_round * 4 && nc < per_round; k++) {
      int c;
      if (round == 0 || total <= 0) {
        c = k % nall;
      } else {
        double r = (double)(rnd(t) >> 11) * 0x1p-53 * total * 1.1, acc = 0;
        for (c = 0; c < nall - 1; c++) {
          acc += reward[c] + total * 0.1 / nall;
          if (r < acc) break;
        }
      }
      search_copy_cfg(t->cur, t->best_cfg, t->nslot);
      memcpy(t->inval, t->best_inval, sizeof t->inval);
      memcpy(t->code, t->best_code, sizeof *t->code * no);
      if (c < ncls) sample_class(t, cls[c]);
      else sample_intrinsics(t);
      uint64_t h = search_cand_hash(t);
      int dup = 0;
      for (int i = 0; i < t->nseen && !dup; i++) dup = t->seen[i] == h;
      for (int j = 0; j < nc && !dup; j++) dup = chash[j] == h;
      if (dup) { /* measured (or about to be): its template counts as tried */
        int ch = c < ncls ? search_cur_choice(t, cls[c]) : -1;
        if (ch >= 0) t->segs[cls[c]].tried[ch] = 1;
        continue;
      }
      search_copy_cfg(cand + ns * (size_t)nc, t->cur, t->nslot);
      memcpy(cval[nc], t->inval, sizeof t->inval);
      chash[nc] = h;
      ccls[nc++] = c;
    }
    if (!nc) { /* nothing new to try */
      stale++;
      continue;
    }
    if (!(nc = search_fit(t, nc, 1))) break; /* none would end inside the budget */
    /* compiled ahead on every compiling thread, then measured one at a time */
    double p0 = search_now();
    for (int j = 0; j < nc; j++) {
      search_copy_cfg(t->cur, cand + ns * (size_t)j, t->nslot);
      memcpy(t->inval, cval[j], sizeof t->inval);
      memcpy(t->code, t->best_code, sizeof *t->code * no);
      search_collect_jobs(t);
    }
    search_compile_jobs(t);
    t->prep_s = (search_now() - p0) / nc;
    int gained = 0;
    for (int j = 0; j < nc && !search_out_of_budget(t); j++) {
      search_copy_cfg(t->cur, cand + ns * (size_t)j, t->nslot);
      memcpy(t->inval, cval[j], sizeof t->inval);
      memcpy(t->code, t->best_code, sizeof *t->code * no);
      double before = t->best_ms, ms;
      if (search_trial(t, &ms) == 1) {
        reward[ccls[j]] += before - ms;
        gained = 1;
      }
    }
    stale = gained ? 0 : stale + 1;
  }
free_round:
  stof_ctx_dealloc(ctx, cand, sizeof *cand * ns * (size_t)per_round);
  stof_ctx_dealloc(ctx, cval, sizeof *cval * (size_t)per_round);
  stof_ctx_dealloc(ctx, ccls, sizeof *ccls * (size_t)per_round);
  stof_ctx_dealloc(ctx, chash, sizeof *chash * (size_t)per_round);
done:
  stof_ctx_dealloc(ctx, reward, sizeof *reward * (size_t)(n + 1));
  stof_ctx_dealloc(ctx, cls, sizeof *cls * (size_t)(n + 1));
  return st;
}

/* ---------------------------------------------------------------- resuming */

/* Reads record r's scheme and configuration into t->code / t->cur / t->inval: NULL when it
 * fits this search, else why not. */
static const char *record_config(tuner *t, const stof_db_record *r) {
  const char *sc = r->scheme;
  for (int i = 0; i < t->nop; i++) {
    char *end;
    long v = strtol(sc, &end, 10);
    if (end == sc || v < 0 || v >= t->nslot) return "its scheme does not fit this graph";
    t->code[i] = (int)v;
    sc = end;
  }
  while (*sc == ' ') sc++;
  if (*sc) return "its scheme has more entries than this graph has ops";
  for (int k = 0; k < r->nknob; k++) {
    const char *nm = r->knob_name[k];
    if (!strncmp(nm, "intrin.", 7)) {
      const char *dot = strchr(nm + 7, '.');
      if (!dot) return "a knob name it holds is not one the search writes";
      int found = 0;
      for (int i = 0; i < t->nin && !found; i++)
        if (strlen(t->in[i]->name) == (size_t)(dot - nm - 7) && !strncmp(t->in[i]->name, nm + 7, (size_t)(dot - nm - 7)))
          for (int j = 0; j < t->in[i]->nknob; j++)
            if (!strcmp(t->in[i]->knob[j].name, dot + 1)) t->inval[i][j] = (int)r->knob_value[k], found = 1;
      if (!found) return "it sets an intrinsic knob this build does not have";
      continue;
    }
    char *end;
    long s = nm[0] == 's' ? strtol(nm + 1, &end, 10) : -1;
    if (s < 0 || s >= t->nslot || end == nm + 1) return "a knob name it holds is not one the search writes";
    cfg *c = &t->cur[s];
    if (*end == '@') {
      const char *tn = end + 1;
      if (!strcmp(tn, "vendor")) {
        c->tmpl = VENDOR;
      } else {
        int found = -1;
        for (int j = 0; j < t->nt; j++)
          if (!strcmp(t->t[j].name, tn)) found = j;
        if (found < 0) return "it uses a template this search does not have";
        c->tmpl = found;
      }
    } else if (*end == '.' && c->n < MAXK && strlen(end + 1) < NAMEL) {
      snprintf(c->name[c->n], NAMEL, "%s", end + 1);
      c->dec[c->n++] = (int)r->knob_value[k];
    } else {
      return "a knob name it holds is not one the search writes";
    }
  }
  return NULL;
}

/* Rebuilds the best record of this workload, if any: 1 when t->best_plan holds it. A record
 * that does not fit or no longer builds is noted on stderr and leaves nothing behind (the
 * configuration it set is reset): the search runs as if there were none. */
static int resume(tuner *t) {
  int idx;
  if (!t->o->db || t->o->force) return 0;
  if (stof_db_best(t->o->db, t->workload, t->device, &idx) != STOF_OK) {
    stof_ctx_clear_error(t->ctx);
    return 0;
  }
  stof_db_record r;
  if (stof_db_get(t->o->db, idx, &r) != STOF_OK) {
    stof_ctx_clear_error(t->ctx);
    return 0;
  }
  reset_cfg(t);
  memset(t->segs, 0, sizeof *t->segs * (size_t)t->nslot);
  const char *why = record_config(t, &r);
  stof_plan *p = NULL;
  if (!why) {
    stof_status st = search_build(t, t->code, &p);
    if (!st) st = search_learn(t, p);
    if (st) {
      fprintf(stderr, "stof tune: the best record of %s no longer builds (%s): searching again\n", t->workload,
              stof_ctx_message(t->ctx));
      stof_ctx_clear_error(t->ctx);
      stof_plan_free(p);
      p = NULL;
    }
  } else {
    fprintf(stderr, "stof tune: the best record of %s does not fit this search (%s): searching again\n", t->workload,
            why);
  }
  if (!p) { /* nothing of the record stays */
    reset_cfg(t);
    memset(t->segs, 0, sizeof *t->segs * (size_t)t->nslot);
    t->nseg = 0;
    return 0;
  }
  t->best_plan = p;
  t->best_ms = r.median_ms;
  t->res.from_db = 1;
  memcpy(t->best_code, t->code, sizeof *t->code * (size_t)t->nop);
  search_copy_cfg(t->best_cfg, t->cur, t->nslot);
  return 1;
}

/* ---------------------------------------------------------------- set-up */

static stof_status reference(tuner *t, stof_plan *def) {
  stof_ctx *ctx = t->ctx;
  stof_status st = STOF_OK;
  t->ref = stof_ctx_alloc(ctx, sizeof *t->ref * (size_t)t->nout);
  if (!t->ref) return STOF_ERR_NOMEM;
  memset(t->ref, 0, sizeof *t->ref * (size_t)t->nout);
  if (t->cuda) { /* the default plan's outputs */
    if ((st = stof_plan_run(def))) return st;
    for (int i = 0; i < t->nout && !st; i++) st = stof_plan_output(def, i, &t->ref[i]);
    return st;
  }
  /* the interpreter, on CPU copies of the feed */
  int nf = t->o->nfeed;
  stof_tensor **cpu = stof_ctx_alloc(ctx, sizeof *cpu * (size_t)(nf ? nf : 1));
  if (!cpu) return STOF_ERR_NOMEM;
  memset(cpu, 0, sizeof *cpu * (size_t)(nf ? nf : 1));
  for (int i = 0; i < nf && !st; i++)
    if (t->o->feed[i]->device != STOF_DEVICE_CPU) st = stof_tensor_to(t->o->feed[i], STOF_DEVICE_CPU, &cpu[i]);
  const stof_tensor **feed = stof_ctx_alloc(ctx, sizeof *feed * (size_t)(nf ? nf : 1));
  if (!feed) st = STOF_ERR_NOMEM;
  for (int i = 0; i < nf && !st; i++) feed[i] = cpu[i] ? cpu[i] : t->o->feed[i];
  if (!st) st = stof_interp_eval(t->g, t->nout, t->outputs, nf, t->o->feed_ops, feed, t->ref);
  for (int i = 0; i < nf; i++)
    if (cpu[i]) stof_tensor_free(cpu[i]);
  stof_ctx_dealloc(ctx, cpu, sizeof *cpu * (size_t)(nf ? nf : 1));
  stof_ctx_dealloc(ctx, feed, sizeof *feed * (size_t)(nf ? nf : 1));
  return st;
}

int stof_tune_name_reserved(const char *name) {
  return name && (!strcmp(name, "auto") || !strcmp(name, search_tc_name()) || !strcmp(name, search_tcn_name()) ||
                  !strcmp(name, search_tgg_name()) ||
                  !strcmp(name, "vendor") ||
                  !strcmp(name, "default"));
}

static stof_status check_templates(tuner *t) {
  for (int i = 0; i < t->o->ntemplate; i++) {
    const stof_template *u = &t->o->templates[i];
    if (!u->name || !u->name[0] || strpbrk(u->name, "@.") || strlen(u->name) >= NAMEL || !u->schedule)
      return stof_ctx_error(t->ctx, STOF_ERR_ARG,
                            "tune: template %d: a name (no '@' or '.', under %d characters) and a schedule function are required",
                            i + 1, NAMEL);
    if (stof_tune_name_reserved(u->name))
      return stof_ctx_error(t->ctx, STOF_ERR_ARG, "tune: template name %s is taken by a built-in one", u->name);
    for (int j = 0; j < i; j++)
      if (!strcmp(u->name, t->o->templates[j].name))
        return stof_ctx_error(t->ctx, STOF_ERR_ARG, "tune: two templates named %s", u->name);
  }
  return STOF_OK;
}

/* The workload key: the name, the target and the structural hash of the graph. */
static stof_status workload_key(tuner *t) {
  uint64_t h;
  stof_status st = stof_te_hash(t->g, t->nout, t->outputs, &h);
  if (st) return st;
  snprintf(t->workload, sizeof t->workload, "%.80s/%s/%016llx", t->o->workload ? t->o->workload : "graph",
           t->cuda ? "cuda" : "c", (unsigned long long)h);
  if (t->cuda) {
    stof_cuda_props pr;
    if ((st = stof_cuda_props_get(t->ctx, &pr))) return st;
    snprintf(t->device, sizeof t->device, "%s", pr.name);
  } else {
    snprintf(t->device, sizeof t->device, "cpu");
  }
  return STOF_OK;
}

/* The default scheme's segments, for the serial-nest pruning rule (t->code holds it). */
static stof_status remember_default(tuner *t) {
  size_t no = (size_t)(t->nop ? t->nop : 1);
  t->nid = stof_graph_nop(t->g);
  t->def_code = stof_ctx_alloc(t->ctx, sizeof *t->def_code * no);
  t->def_count = stof_ctx_alloc(t->ctx, sizeof *t->def_count * no);
  t->op_index = stof_ctx_alloc(t->ctx, sizeof *t->op_index * (size_t)(t->nid > 0 ? t->nid : 1));
  if (!t->def_code || !t->def_count || !t->op_index) return STOF_ERR_NOMEM;
  memset(t->def_count, 0, sizeof *t->def_count * no);
  for (int i = 0; i < t->nid; i++) t->op_index[i] = -1;
  for (int i = 0; i < t->nop; i++) {
    t->def_code[i] = t->code[i];
    if (t->code[i] >= 0 && t->code[i] < t->nop) t->def_count[t->code[i]]++;
    if (t->ops[i]->id >= 0 && t->ops[i]->id < t->nid) t->op_index[t->ops[i]->id] = i;
  }
  return STOF_OK;
}

static void free_tuner(tuner *t) {
  stof_ctx *ctx = t->ctx;
  size_t ns = (size_t)(t->nslot ? t->nslot : 1), no = (size_t)(t->nop ? t->nop : 1);
  if (t->def_code) stof_ctx_dealloc(ctx, t->def_code, sizeof *t->def_code * no);
  if (t->def_count) stof_ctx_dealloc(ctx, t->def_count, sizeof *t->def_count * no);
  if (t->op_index) stof_ctx_dealloc(ctx, t->op_index, sizeof *t->op_index * (size_t)(t->nid > 0 ? t->nid : 1));
  if (t->ref)
    for (int i = 0; i < t->nout; i++)
      if (t->ref[i]) stof_tensor_free(t->ref[i]);
  if (t->ref) stof_ctx_dealloc(ctx, t->ref, sizeof *t->ref * (size_t)t->nout);
  if (t->best_plan) stof_plan_free(t->best_plan);
  if (t->dfeed) {
    for (int i = 0; i < t->o->nfeed; i++)
      if (t->dfeed[i]) stof_tensor_free(t->dfeed[i]);
    stof_ctx_dealloc(ctx, t->dfeed, sizeof *t->dfeed * (size_t)t->o->nfeed);
  }
  for (int i = 0; i < t->njob; i++) stof_compile_job_free(t->jobs[i]);
  if (t->jobs) stof_ctx_dealloc(ctx, t->jobs, sizeof *t->jobs * (size_t)t->capjob);
  if (t->seen) stof_ctx_dealloc(ctx, t->seen, sizeof *t->seen * (size_t)t->capseen);
  stof_ctx_dealloc(ctx, t->t, sizeof *t->t * (size_t)(t->nt ? t->nt : 1));
  stof_ctx_dealloc(ctx, t->ops, sizeof *t->ops * no);
  stof_ctx_dealloc(ctx, t->code, sizeof *t->code * no);
  stof_ctx_dealloc(ctx, t->best_code, sizeof *t->best_code * no);
  stof_ctx_dealloc(ctx, t->segs, sizeof *t->segs * ns);
  stof_ctx_dealloc(ctx, t->cur, sizeof *t->cur * ns);
  stof_ctx_dealloc(ctx, t->best_cfg, sizeof *t->best_cfg * ns);
}

stof_status stof_tune(stof_graph *g, int nout, const stof_op *const *outputs, const stof_tune_opts *opts,
                      stof_plan **plan, stof_tune_result *res) {
  stof_ctx *ctx = stof_graph_ctx(g);
  *plan = NULL;
  if (!opts) return stof_ctx_error(ctx, STOF_ERR_ARG, "tune: no options (the feed is required)");
  tuner T = {0}, *t = &T;
  t->ctx = ctx;
  t->g = g;
  t->nout = nout;
  t->outputs = outputs;
  t->o = opts;
  t->t0 = search_now();
  t->budget = opts->budget_s > 0 ? opts->budget_s : 30;
  stof_status st = check_templates(t);
  if (st) return st;
  if (opts->seed) stof_ctx_seed(ctx, opts->seed);
  const char *target = opts->plan.target;
  if (target && strcmp(target, "c") && strcmp(target, "cuda"))
    return stof_ctx_error(ctx, STOF_ERR_ARG, "tune: target \"%s\" (\"c\" or \"cuda\")", target);
  if (!target || !strcmp(target, "cuda")) {
    st = stof_cuda_init(ctx);
    if (st && target) return st; /* "cuda" asked for: say why there is none */
    if (st) stof_ctx_clear_error(ctx);
    t->cuda = st == STOF_OK;
  }
  stof_plan_opts po = opts->plan;
  po.target = t->cuda ? "cuda" : "c";
  po.scheme = NULL;
  po.hooks = NULL;
  po.knobs = NULL;
  stof_plan *def = NULL;
  const stof_op **all = NULL;
  int nall = 0;
  if ((st = stof_graph_collect(g, nout, outputs, &all, &nall))) return st;
  for (int i = 0; i < nall; i++) {
    t->nop += all[i]->kind != STOF_OP_PLACEHOLDER;
    int k;
    for (k = 0; all[i]->kind == STOF_OP_PLACEHOLDER && k < opts->nfeed && opts->feed_ops[k] != all[i]; k++) {}
    if (all[i]->kind == STOF_OP_PLACEHOLDER && k == opts->nfeed) {
      st = stof_ctx_error(ctx, STOF_ERR_ARG, "tune: no input given for placeholder %s", all[i]->name);
      stof_ctx_dealloc(ctx, all, sizeof *all * (size_t)nall);
      return st;
    }
  }
  t->nslot = t->nop + 1;
  size_t ns = (size_t)t->nslot, no = (size_t)(t->nop ? t->nop : 1);
  t->nt = NBUILTIN + opts->ntemplate;
  t->t = stof_ctx_alloc(ctx, sizeof *t->t * (size_t)t->nt);
  t->ops = stof_ctx_alloc(ctx, sizeof *t->ops * no);
  t->code = stof_ctx_alloc(ctx, sizeof *t->code * no);
  t->best_code = stof_ctx_alloc(ctx, sizeof *t->best_code * no);
  t->segs = stof_ctx_alloc(ctx, sizeof *t->segs * ns);
  t->cur = stof_ctx_alloc(ctx, sizeof *t->cur * ns);
  t->best_cfg = stof_ctx_alloc(ctx, sizeof *t->best_cfg * ns);
  if (!t->t || !t->ops || !t->code || !t->best_code || !t->segs || !t->cur || !t->best_cfg) {
    stof_ctx_dealloc(ctx, all, sizeof *all * (size_t)nall);
    st = STOF_ERR_NOMEM;
    goto fail;
  }
  memset(t->segs, 0, sizeof *t->segs * ns);
  t->t[0] = (stof_template){"auto", NULL, search_auto_schedule, NULL};
  t->t[1] = (stof_template){search_tc_name(), search_tc_matches, search_tc_schedule, NULL};
  t->t[2] = (stof_template){search_tcn_name(), search_tcn_matches, search_tcn_schedule, NULL};
  t->t[3] = (stof_template){search_tgg_name(), search_tgg_matches, search_tgg_schedule, NULL};
  for (int i = 0; i < opts->ntemplate; i++) t->t[NBUILTIN + i] = opts->templates[i];
  for (int i = 0, k = 0; i < nall; i++)
    if (all[i]->kind != STOF_OP_PLACEHOLDER) t->ops[k++] = all[i];
  for (int i = 0; i < nall; i++) /* the distinct intrinsics, for their knobs */
    if (all[i]->kind == STOF_OP_EXTERN && all[i]->intrin) {
      const stof_intrin *in = stof_intrin_find(all[i]->intrin);
      int seen = 0;
      for (int k = 0; k < t->nin; k++) seen |= t->in[k] == in;
      if (in && !seen && t->nin < MAXIN) t->in[t->nin++] = in;
    }
  stof_ctx_dealloc(ctx, all, sizeof *all * (size_t)nall);
  reset_cfg(t);
  if ((st = workload_key(t))) goto fail;
  if (t->cuda && opts->nfeed) { /* the weights cross to the GPU once, not once per candidate */
    t->dfeed = stof_ctx_alloc(ctx, sizeof *t->dfeed * (size_t)opts->nfeed);
    if (!t->dfeed) {
      st = STOF_ERR_NOMEM;
      goto fail;
    }
    memset(t->dfeed, 0, sizeof *t->dfeed * (size_t)opts->nfeed);
    for (int i = 0; i < opts->nfeed && !st; i++)
      if (opts->feed[i]->device != STOF_DEVICE_CUDA || !stof_tensor_is_contiguous(opts->feed[i]))
        st = stof_tensor_to(opts->feed[i], STOF_DEVICE_CUDA, &t->dfeed[i]);
    if (st) goto fail;
  }
  /* a best record of this workload: rebuilt, nothing measured */
  if (resume(t)) {
    t->stage = 0;
    t->res.best_ms = t->best_ms;
    goto done;
  }
  /* the default plan: the reference (on the GPU) and the default scheme's code */
  if ((st = stof_plan_new(g, nout, outputs, &po, &def)) || (st = search_bind_feed(t, def)) || (st = reference(t, def)))
    goto fail_def;
  {
    /* built through the hooks with the default configuration, the code gives this plan */
    const char *sc = stof_plan_scheme(def);
    for (int i = 0; i < t->nop; i++) {
      char *end;
      t->code[i] = (int)strtol(sc, &end, 10);
      sc = end;
    }
  }
  stof_plan_free(def);
  def = NULL;
  if (t->cuda && (st = remember_default(t))) goto fail;
  /* the default scheme and configuration, measured and checked (it must pass) */
  t->stage = 1;
  double ms0;
  int r0 = search_trial(t, &ms0);
  if (r0 != 1) { /* the default plan built once already: out of memory, most likely */
    st = r0 < 0 && t->last_fail == STOF_ERR_NOMEM
             ? STOF_ERR_NOMEM
             : stof_ctx_error(ctx, r0 < 0 ? t->last_fail : STOF_ERR_CHECK, "tune: the default plan %s: %s",
                              r0 < 0 ? "failed" : "does not match the reference", t->what);
    goto fail;
  }
  t->res.default_ms = ms0;
  t->res.setup_s = search_elapsed(t);
  if (!opts->skip_stage1) {
    double share = opts->skip_stage2 ? 1.0 : 0.5;
    if ((st = stage1(t, share * t->budget))) goto fail;
  }
  t->res.stage1_ms = t->best_ms;
  if (!opts->skip_stage2 && (st = stage2(t))) goto fail;
  t->stage = 0;
  t->res.best_ms = t->best_ms;
done:
  t->res.seconds = search_elapsed(t);
  snprintf(t->res.workload, sizeof t->res.workload, "%.127s", t->workload);
  search_progress(t);
  if (t->dfeed) /* the caller's tensors: the plan copies them once into storage it owns */
    for (int i = 0; i < opts->nfeed && !st; i++)
      if (t->dfeed[i]) {
        int used = 0;
        for (int k = 0; k < stof_plan_ninput(t->best_plan); k++) used |= stof_plan_input(t->best_plan, k) == opts->feed_ops[i];
        if (used) st = stof_plan_bind(t->best_plan, opts->feed_ops[i], opts->feed[i]);
      }
  if (st) goto fail;
  *plan = t->best_plan;
  t->best_plan = NULL;
  if (res) *res = t->res;
  free_tuner(t);
  return STOF_OK;
fail_def:
  if (def) stof_plan_free(def);
fail:
  free_tuner(t);
  return st;
}
