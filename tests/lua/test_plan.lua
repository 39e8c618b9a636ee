-- stof.plan: the runtime from Lua on the CPU backend (target "c"). Every plan runs on
-- random inputs after poison() and matches stof.eval (1e-5 in float32, 1e-2 in float16);
-- the segments the default scheme makes (GEMM epilogues only when their bodies are right),
-- sharing between identical segments, the memory plan, the Plan methods, the errors (with
-- the script's file:line), and a plan keeping its graph alive.
package.path = debug.getinfo(1, "S").source:match("^@(.*/)") .. "?.lua;" .. package.path
local U = require("util")
local stof = require("stof")
local te, nn, M = stof.te, stof.nn, stof.mask

local C = {target = "c"}

local seed = 100
-- Random values for every input of p; returns the feed.
local function feed_of(p)
  local feed = {}
  for _, ph in ipairs(p:inputs()) do
    seed = seed + 1
    feed[ph] = stof.rand(ph.shape, ph.dtype, seed)
  end
  return feed
end

-- Poisons p, runs it on feed (random when nil) and compares every output with stof.eval.
local function check(p, outs, feed, what)
  feed = feed or feed_of(p)
  p:poison()
  local got = {p:run(feed)}
  local want = {stof.eval(outs, feed)}
  assert(#got == #outs and #want == #outs, what)
  for i = 1, #outs do
    local tol = outs[i].dtype == "float32" and 1e-5 or 1e-2
    local e = stof.rel_l2(got[i], want[i])
    if not (e < tol) then error(("%s: output %d (%s): rel L2 %g"):format(what, i, outs[i].name, e), 2) end
    local again = p:output(i)
    assert(stof.allclose(again, got[i], 0, 0), what .. ": output(i) differs from run()")
  end
  return got, feed
end

local function kinds(p)
  local s = {}
  for i, g in ipairs(p:segments()) do s[i] = g.kind .. ":" .. g.template end
  return table.concat(s, " ")
end

-- ---------------------------------------------------------------- GEMM epilogues
do
  local x = te.placeholder({2, 4, 16}, "float32", "x")
  local w = te.placeholder({16, 32}, "float32", "w")
  local b = te.placeholder({32}, "float32", "b")
  local y = nn.relu(nn.linear(x, w, b, "fc"), "fc.relu")
  local p = stof.plan(y, C)
  assert(p.target == "c" and p.nsegment == 1 and tostring(p):find("stof.Plan(c, 1 segments)", 1, true))
  assert(kinds(p) == "gemm:gemm+bias+relu", kinds(p))
  local s = p:segments()[1]
  assert(s.nop == 3 and s.first == "fc" and s.last == "fc.relu" and s.shared_with == 0)
  assert(s.detail:find("M 8, N 32, K 16", 1, true) and s.detail:find("epilogue relu_bias", 1, true), s.detail)
  assert(p.scheme == "0 0 0", p.scheme)
  local ins = p:inputs()
  assert(#ins == 3 and ins[1].name == "x" and ins[2].name == "w" and ins[3].name == "b")
  local d = p:describe()
  assert(d:find("plan for c: 1 segments", 1, true) and d:find("gemm+bias+relu", 1, true), d)
  check(p, {y}, nil, "gemm+bias+relu")
  assert(p:poison() == p)
  -- time(reps, warmup): a positive median on the CPU
  local ms = p:time(3, 1)
  assert(type(ms) == "number" and ms > 0, ms)
  local ts = p:time_segments(2)
  assert(#ts == 1 and ts[1].ms >= 0 and ts[1].template == "gemm+bias+relu")
  -- float16, w as [N, K], the tanh GELU
  local xh = te.placeholder({8, 16}, "float16", "xh")
  local wh = te.placeholder({24, 16}, "float16", "wh")
  local bh = te.placeholder({24}, "float16", "bh")
  local yh = nn.gelu_tanh(nn.linear(xh, wh, bh, {name = "fch", transposed = true}), "fch.gelu")
  local ph = stof.plan(yh, C)
  assert(kinds(ph) == "gemm:gemm+bias+gelu_tanh", kinds(ph))
  assert(ph:segments()[1].detail:find("w [N, K]", 1, true))
  check(ph, {yh}, nil, "float16 gemm+bias+gelu_tanh")
  -- the erf GELU stays exact on the CPU: a generated segment
  local ye = nn.gelu(nn.linear(x, w, b, "fce"), "fce.gelu")
  local pe = stof.plan(ye, C)
  assert(kinds(pe) == "gemm:gemm+bias generated:gelu", kinds(pe))
  check(pe, {ye}, nil, "erf gelu")
end

-- ---------------------------------------------------------------- tags are checked
do
  local x = te.placeholder({8, 16}, "float32", "x")
  local w = te.placeholder({16, 8}, "float32", "w")
  local b = te.placeholder({8}, "float32", "b")
  local r = te.placeholder({8, 8}, "float32", "r")
  local y = nn.linear(x, w, nil, "fc")
  local fakes = {
    te.compute({8, 8}, function(i, j) return y[{i, j}] * b[j] end, "mul_as_bias", nil, "bias_add"),
    te.compute({8, 8}, function(i, j) return y[{i, j}] + b[i] end, "row_bias", nil, "bias_add"),
    te.compute({8, 8}, function(i, j) return y[{i, j}] - r[{i, j}] end, "sub_as_res", nil, "residual_add"),
    te.compute({8, 8}, function(i, j) return te.exp(y[{i, j}]) end, "exp_as_relu", nil, "relu"),
    te.compute({8, 8}, function(i, j) return te.maximum(y[{i, j}], 0.5) end, "shifted_relu", nil, "relu"),
  }
  for _, f in ipairs(fakes) do
    local p = stof.plan(f, C)
    assert(kinds(p):match("^gemm:gemm generated:"), f.name .. ": " .. kinds(p))
    check(p, {f}, nil, f.name)
  end
  -- a relu written by hand with the right body is taken
  local ok = te.compute({8, 8}, function(i, j) return te.maximum(y[{i, j}], 0.0) end, "hand_relu", nil, "relu")
  local p = stof.plan(ok, C)
  assert(kinds(p) == "gemm:gemm+relu", kinds(p))
  check(p, {ok}, nil, "hand relu")
end

-- ---------------------------------------------------------------- residual, layer norm, sharing
local function layer(x, l, E, F)
  local function ph(shape, n) return te.placeholder(shape, "float32", ("l%d.%s"):format(l, n)) end
  local h = nn.gelu_tanh(nn.linear(x, ph({E, F}, "w1"), ph({F}, "b1"), "l" .. l .. ".fc1"), "l" .. l .. ".gelu")
  local y = nn.add(nn.linear(h, ph({F, E}, "w2"), ph({E}, "b2"), "l" .. l .. ".fc2"), x, "l" .. l .. ".res")
  return nn.layer_norm(y, ph({E}, "gamma"), ph({E}, "beta"), 1e-5, "l" .. l .. ".ln"), h
end

do
  local x = te.placeholder({2, 8, 16}, "float32", "x")
  local h1
  local y = x
  for l = 1, 3 do
    local h
    y, h = layer(y, l, 16, 32)
    h1 = h1 or h
  end
  local p = stof.plan(y, C)
  local segs = p:segments()
  assert(#segs == 9, kinds(p))
  for l = 0, 2 do
    assert(segs[3 * l + 1].template == "gemm+bias+gelu_tanh", kinds(p))
    assert(segs[3 * l + 2].template == "gemm+bias+residual", kinds(p))
    assert(segs[3 * l + 3].template == "layer_norm" and segs[3 * l + 3].kind == "generated", kinds(p))
    for k = 1, 3 do
      local want = l == 0 and 0 or k -- 1-based; 0 = not shared
      assert(segs[3 * l + k].shared_with == want, ("layer %d segment %d shares %d"):format(l, k, segs[3 * l + k].shared_with))
    end
  end
  assert(p:describe():find("(as segment 0)", 1, true))
  check(p, {y}, nil, "3 layers")
  -- memory: the arena is smaller than the values, and intermediate outputs survive
  local p2 = stof.plan({y, h1}, C)
  local m = p2:memory()
  assert(m.arena < m.values and m.workspace == 0 and m.owned_inputs == 0, m.arena .. " " .. m.values)
  check(p2, {y, h1}, nil, "3 layers, first hidden kept")
end

-- ---------------------------------------------------------------- attention
do
  local B, H, S, D = 1, 2, 32, 16
  local x = te.placeholder({B, S, 3 * H * D}, "float32", "x")
  local w = te.placeholder({3 * H * D, 3 * H * D}, "float32", "w")
  local y = nn.linear(x, w, nil, "qkv")
  local function heads(off, name)
    return te.compute({B, H, S, D}, function(b, h, s, d) return y[{b, s, h * D + d + off}] end, name)
  end
  local q, k, v = heads(0, "q"), heads(H * D, "k"), heads(2 * H * D, "v")
  local causal = M.causal() -- one mask: the same attrs, one implementation
  local a1 = nn.attention(q, k, v, causal)
  local a2 = nn.attention(k, q, v, causal)
  local a3 = nn.attention(q, k, v, M.bigbird(2, 1, 4, 0.3, 0))
  local out = te.compute({B, H, S, D}, function(b, h, s, d)
    return a1[{b, h, s, d}] + a2[{b, h, s, d}] * a3[{b, h, s, d}]
  end, "combine")
  local p = stof.plan(out, C)
  local att = {}
  for i, s in ipairs(p:segments()) do
    if s.kind == "intrinsic" then att[#att + 1] = {i, s} end
  end
  assert(#att == 3, kinds(p))
  assert(att[1][2].shared_with == 0 and att[2][2].shared_with == att[1][1] and att[3][2].shared_with == 0,
    kinds(p))
  check(p, {out}, nil, "attention")
end

-- ---------------------------------------------------------------- binding, errors
do
  local x = te.placeholder({4, 16}, "float32", "x")
  local w = te.placeholder({16, 8}, "float32", "w")
  local y = nn.relu(nn.linear(x, w, nil, "fc"))
  local p = stof.plan(y, C)
  -- a misspelt option never passes for a default (taget: the default target, silently)
  U.raises(function() stof.plan(y, {taget = "c"}) end, "ValueError", 'unknown option "taget"', "known: target")
  U.raises(function() p:run() end, "ValueError", "input x is not bound")
  U.raises(function() p:output(1) end, "ValueError", "has not run yet")
  local xv, wv = stof.rand({4, 16}, "float32", 1), stof.rand({16, 8}, "float32", 2)
  assert(p:bind(x, xv) == p)
  U.raises(function() p:run() end, "input w is not bound")
  U.raises(function() p:bind(w, stof.rand({16, 8}, "float16", 3)) end, "TypeError", "float16")
  U.raises(function() p:bind(w, stof.rand({8, 16}, "float32", 3)) end, "ShapeError", "[8, 16]", "[16, 8]")
  U.raises(function() p:bind(y, wv) end, "not a placeholder")
  U.raises(function() p:bind({[w] = "nope"}) end, "Plan:bind")
  p:bind({[w] = wv})
  local r1 = p:run()
  U.raises(function() p:output(2) end, "IndexError", "index 2 out of range (the plan has 1 outputs)")
  U.raises(function() stof.plan(y, {target = "tpu"}) end, "ValueError", "target \"tpu\"")
  U.raises(function() stof.plan(y, {target = 3}) end, "target")
  -- rebinding a CPU input between runs gives new results (the storage is borrowed)
  local xv2 = stof.rand({4, 16}, "float32", 4)
  local r2 = p:run({[x] = xv2})
  assert(not stof.allclose(r1, r2, 0, 0))
  check(p, {y}, {[x] = xv2, [w] = wv}, "rebound")
  -- a chain of generated ops from one input (softmax and its producers): one segment
  local s = te.placeholder({8}, "float32", "s")
  local sq = te.compute({8}, function(i) return s[i] * s[i] end, "sq")
  local sm = nn.softmax(te.compute({1, 8}, function(_, j) return sq[j] end, "row"), "sm")
  local ps = stof.plan(sm, C)
  assert(ps.nsegment == 1 and ps:segments()[1].kind == "generated", kinds(ps))
  check(ps, {sm}, nil, "softmax")
end

-- ---------------------------------------------------------------- the plan keeps its graph
do
  local p, feed
  do
    te.reset()
    local x = te.placeholder({4, 8}, "float32", "x")
    local w = te.placeholder({8, 8}, "float32", "w")
    local y = nn.layer_norm(nn.relu(nn.linear(x, w, nil, "fc")), te.placeholder({8}, "float32", "g"),
      te.placeholder({8}, "float32", "b"), 1e-5, "ln")
    p = stof.plan(y, C)
    feed = {}
    for i, ph in ipairs(p:inputs()) do feed[i] = stof.rand(ph.shape, "float32", 200 + i) end
    te.reset()
  end
  collectgarbage()
  collectgarbage()
  local ins = p:inputs()
  assert(#ins == 4 and ins[1].name == "x")
  local f = {}
  for i, ph in ipairs(ins) do f[ph] = feed[i] end
  local y = p:run(f)
  assert(y:shape()[1] == 4 and y:shape()[2] == 8)
  collectgarbage()
  -- bound tensors are kept by the plan: drop ours and run again
  f, feed = nil, nil
  collectgarbage()
  collectgarbage()
  local y2 = p:run()
  assert(stof.allclose(y, y2, 0, 0))
end

-- Attention reads its q/k/v straight from the projections' [B, S, H*D] (or the fused
-- [B, S, 3*H*D]) outputs and writes into the head merge's layout: the head splits and the
-- merge are views inside the attention segment (no kernel of their own), results unchanged.
do
  te.reset()
  local B, S, H, D = 2, 9, 2, 4
  local x = te.placeholder({B, S, H * D}, "float32", "x")
  local w = te.placeholder({3 * H * D, H * D}, "float32", "w")
  local qkv = nn.linear(x, w, nil, {name = "qkv", transposed = true})
  local q, k, v = nn.split_qkv(qkv, H, "split")
  local a = nn.attention(q, k, v, M.bigbird(2, 1, 4, 0.3, 0))
  local y = nn.merge_heads(a, "merge")
  local p = stof.plan(y, C)
  local segs = p:segments()
  local att
  for _, sg in ipairs(segs) do if sg.template:find("attention", 1, true) then att = sg end end
  assert(att and att.template == "attention (views)" and att.nop == 5 and att.last == "merge",
         "the splits and the merge are not views: " .. p:describe())
  assert(#segs == 2, p:describe())
  check(p, {y}, nil, "attention with views")
  -- a split read at an offset past the tensor's end is not a view (and stof.eval refuses it)
  te.reset()
  local x2 = te.placeholder({B, S, H * D}, "float32", "x2")
  local shifted = te.compute({B, H, S, D}, function(b, h, s, d) return x2[{b, s, h * D + d + 1}] end, "shifted", nil,
                             "split_heads")
  local ok = te.compute({B, H, S, D}, function(b, h, s, d) return x2[{b, s, h * D + d}] end, "ok", nil, "split_heads")
  local a2 = nn.attention(ok, ok, shifted, M.causal())
  -- "shifted" reads past x2's end: not a view, and its generated kernel is refused at build
  -- time (generated code never reads outside a tensor)
  U.raises(function() stof.plan(a2, C) end, "may read index 8 of dim 2 (extent 8)")
  -- "ok" is read twice (q and k): not a view either
  local a3 = nn.attention(ok, ok, ok, M.causal())
  for _, sg in ipairs(stof.plan(a3, C):segments()) do
    if sg.template:find("attention", 1, true) then assert(sg.nop == 1 and sg.template == "attention") end
  end
end

print("test_plan: ok")

-- Plan options: knobs forced on intrinsics are checked (names, candidates) on every target;
-- a generated segment carries its default schedule as a Lua script (its knobs threads / vec).
do
  te.reset()
  local B, S, H, D = 1, 8, 2, 4
  local q = te.placeholder({B, H, S, D}, "float32", "q")
  local a = nn.attention(q, q, q, M.causal())
  local y = te.compute({B, H, S, D}, function(b, h, s, d) return a[{b, h, s, d}] * 2.0 end, "twice")
  U.raises(function() stof.plan(y, {target = "c", knobs = "attention.tiles=64"}) end, "intrinsic attention has no knob tiles")
  U.raises(function() stof.plan(y, {target = "c", knobs = "attention.tile=96"}) end, "attention.tile = 96 is not one of its candidates")
  U.raises(function() stof.plan(y, {target = "c", knobs = "flash.tile=64"}) end, "no intrinsic named flash")
  U.raises(function() stof.plan(y, {target = "c", knobs = "attention-tile"}) end, "is not NAME.KNOB=VALUE")
  -- a tile-32 decision (the selector's for bigbird on Hopper) replays as knobs
  stof.plan(y, {target = "c", knobs = "attention.tile=32,attention.warps=2,attention.hopper=2"})
  local p = stof.plan(y, {target = "c", knobs = "attention.tile=128,attention.warps=8"})
  local gen
  for _, sg in ipairs(p:segments()) do if sg.kind == "generated" then gen = sg end end
  assert(gen and gen.trace and gen.trace:find("stof", 1, true), "no trace for the generated segment")
  check(p, {y}, nil, "plan with forced knobs")
end
print("test_plan: knobs ok")

-- A run's measurement as a tuning record (stof.db): its workload key, the scheme's code, the
-- knob decisions (Plan:knobs(): none on the CPU backend) and the times; the best record of
-- the workload is that one.
do
  local run = require("stof.models.run")
  local models = require("stof.models")
  local cfg = models.gpt2.config("gpt2", {n_embd = 32, n_layer = 1, n_head = 2, vocab_size = 100})
  cfg.model_type = "gpt2"
  local r = run.prepare(cfg, {batch = 1, seq = 16, mask = "bigbird", target = "c", dtype = "float32"})
  assert(type(r.plan:knobs()) == "table")
  local path = os.tmpname()
  local db = stof.db.open(path)
  local rec = r:record(db, 2)
  assert(rec.scheme == r.plan.scheme and rec.median_ms > 0 and rec.workload:find("gpt2", 1, true))
  local best = db:best(r:workload(), "cpu")
  assert(best and best.scheme == r.plan.scheme, "the record is not the workload's best")
  db:close()
  os.remove(path)
end
print("test_plan: records ok")
