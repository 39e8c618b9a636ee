/*
 * stof.eval(outputs, feed): runs the reference interpreter.
 *
 *   outputs  a TE tensor, or a list of them (all from one graph)
 *   feed     a table mapping placeholders (TE tensors) to CPU data tensors; may be nil
 *            when nothing is read
 *   returns  one new CPU tensor per output, in order
 *
 * The result handles are created before the interpreter runs, so nothing it returns can
 * leak when a later allocation raises.
 */
#include "lua_int.h"

static int l_eval(lua_State *L) {
  const char *fname = "stof.eval";
  lua_settop(L, 2);
  if (!lua_isnoneornil(L, 2) && !lua_istable(L, 2))
    return slua_typeerror(L, 2, fname, "feed table (placeholder -> tensor)");
  /* Outputs: slot 3 keeps them while we work. */
  int nout;
  stof_graph *g;
  const stof_op **outs = slua_check_outputs(L, 1, fname, &nout, &g);

  /* Feed. */
  int nfeed = 0;
  if (lua_istable(L, 2)) {
    lua_pushnil(L);
    while (lua_next(L, 2)) {
      nfeed++;
      lua_pop(L, 1);
    }
  }
  const stof_op **fops = slua_scratch(L, sizeof *fops * (size_t)(nfeed + 1));
  const stof_tensor **fts = slua_scratch(L, sizeof *fts * (size_t)(nfeed + 1));
  if (nfeed) {
    int i = 0;
    lua_pushnil(L);
    while (lua_next(L, 2)) {
      slua_teop *k = slua_test_teop(L, -2);
      if (!k)
        return slua_argerror(L, 2, fname, "feed key: placeholder expected, got %s",
                             slua_typename(L, -2));
      if (k->g != g)
        return slua_error(L, "ValueError", "%s: placeholder %s is from another graph than the outputs",
                          fname, k->op->name);
      if (k->op->kind != STOF_OP_PLACEHOLDER)
        return slua_argerror(L, 2, fname, "feed key %s is not a placeholder", k->op->name);
      slua_tensor *h = luaL_testudata(L, -1, SLUA_TENSOR);
      if (!h)
        return slua_argerror(L, 2, fname, "value fed to %s: stof.Tensor expected, got %s",
                             k->op->name, slua_typename(L, -1));
      if (!h->t)
        return slua_error(L, "ValueError", "%s: the tensor fed to %s is closed", fname, k->op->name);
      if (h->t->device != STOF_DEVICE_CPU)
        return slua_error(L, "ValueError", "%s: the tensor fed to %s is on cuda: copy it with "
                          "t:to(\"cpu\")", fname, k->op->name);
      fops[i] = k->op;
      fts[i] = h->t;
      i++;
      lua_pop(L, 1);
    }
    nfeed = i;
  }

  /* Results: handles first, then the run. */
  stof_tensor **res = slua_scratch(L, sizeof *res * (size_t)nout);
  slua_tensor **hs = slua_scratch(L, sizeof *hs * (size_t)nout);
  luaL_checkstack(L, nout + 4, fname);
  for (int i = 0; i < nout; i++) hs[i] = slua_new_tensor(L);
  stof_ctx *ctx = stof_graph_ctx(g);
  slua_pred_call c; /* an extern (attention) may evaluate an fn mask */
  slua_pred_begin(L, &c);
  stof_status st = stof_interp_eval(g, nout, (const stof_op *const *)outs, nfeed,
                                    (const stof_op *const *)fops,
                                    (const stof_tensor *const *)fts, res);
  slua_pred_end(&c);
  lua_pop(L, 1);
  if (st && c.failed) return slua_pred_raise(L, ctx, fname, NULL, &c);
  if (st) return slua_raise(L, ctx, st, fname);
  for (int i = 0; i < nout; i++) hs[i]->t = res[i];
  return nout;
}

void slua_open_eval(lua_State *L, int idx) {
  idx = lua_absindex(L, idx);
  lua_pushcfunction(L, l_eval);
  lua_setfield(L, idx, "eval");
}
