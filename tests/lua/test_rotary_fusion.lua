-- Rotary positions fused into the Q/K producer where that producer is generated code
-- (issue 11): with vendor GEMMs the projection is a GEMM segment and its head split and
-- rotary one generated segment after it; with vendor_gemm = false, or a given scheme that
-- puts the three in one segment, they are one generated kernel. Both match the reference
-- interpreter on random inputs (outputs poisoned first); a zoo LLaMA planned without vendor
-- GEMMs has each q/k projection in the segment of its rotary.
local stof = require("stof")
local te, nn = stof.te, stof.nn
local models = require("stof.models")
local run = require("stof.models.run")

-- the segment of each op (by id) in a plan's scheme: ops the plan runs, in id order
local function segments_of(plan, ops, all)
  local ids = {}
  for _, o in ipairs(all) do ids[#ids + 1] = o.id end
  table.sort(ids)
  local code = {}
  for v in plan.scheme:gmatch("%d+") do code[#code + 1] = tonumber(v) end
  assert(#code == #ids, ("scheme %q for %d ops"):format(plan.scheme, #ids))
  local seg = {}
  for rank, id in ipairs(ids) do
    for _, o in ipairs(ops) do
      if o.id == id then seg[o.name] = code[rank] end
    end
  end
  return seg
end

for _, dtype in ipairs({"float32", "float16"}) do
  local B, S, H, Hkv, D = 2, 12, 4, 2, 8
  local x = te.placeholder({B, S, H * D}, dtype, "x")
  local wq = te.placeholder({H * D, H * D}, dtype, "wq")
  local wk = te.placeholder({Hkv * D, H * D}, dtype, "wk")
  local q = nn.linear(x, wq, nil, {name = "q", transposed = true})
  local k = nn.linear(x, wk, nil, {name = "k", transposed = true})
  local qh, kh = nn.split_heads(q, H, "q.heads"), nn.split_heads(k, Hkv, "k.heads")
  local qr = nn.rotary(qh, {name = "q.rotary", theta = 500000.0})
  local kr = nn.rotary(kh, {name = "k.rotary"})
  local ops = {q, k, qh, kh, qr, kr}
  local feed = {[x] = stof.rand({B, S, H * D}, dtype, 1), [wq] = stof.rand({H * D, H * D}, dtype, 2),
                [wk] = stof.rand({Hkv * D, H * D}, dtype, 3)}
  local want = {stof.eval({qr, kr}, feed)}
  local tol = dtype == "float32" and 1e-5 or 1e-2
  local function check(plan, what)
    plan:poison()
    local got = {plan:run(feed)}
    for i = 1, 2 do
      local e = stof.rel_l2(got[i]:astype("float32"), want[i]:astype("float32"))
      assert(e < tol, ("%s %s output %d: relative L2 %g against the interpreter"):format(dtype, what, i, e))
    end
  end

  local pv = stof.plan({qr, kr}, {target = "c"})
  local sv = segments_of(pv, ops, ops)
  assert(sv.q ~= sv["q.rotary"] and sv["q.heads"] == sv["q.rotary"], pv.scheme)
  assert(sv.k ~= sv["k.rotary"] and sv["k.heads"] == sv["k.rotary"], pv.scheme)
  assert(pv:segments()[sv.q + 1].kind == "gemm", pv:describe())
  check(pv, "vendor GEMM")

  local pg = stof.plan({qr, kr}, {target = "c", vendor_gemm = false})
  local sg = segments_of(pg, ops, ops)
  assert(sg.q == sg["q.rotary"] and sg.k == sg["k.rotary"], pg.scheme)
  assert(pg:segments()[sg.q + 1].kind == "generated", pg:describe())
  check(pg, "generated")

  -- the same fusion as a given scheme (the search's candidates are such codes): q with its
  -- rotary, k with its rotary, two segments
  local code = {}
  local ids = {}
  for _, o in ipairs(ops) do ids[#ids + 1] = {o.id, o.name:sub(1, 1) == "q" and 0 or 1} end
  table.sort(ids, function(a, b) return a[1] < b[1] end)
  for i, v in ipairs(ids) do code[i] = tostring(v[2]) end
  local ps = stof.plan({qr, kr}, {target = "c", scheme = table.concat(code, " ")})
  assert(ps.nsegment == 2, ps:describe())
  for _, s in ipairs(ps:segments()) do
    assert(s.kind == "generated" and s.nop == 3, ps:describe())
  end
  check(ps, "given scheme")
end

-- bad schemes are refused with the cause
do
  local x = te.placeholder({2, 4}, "float32", "x")
  local y = te.compute({2, 4}, function(i, j) return x[{i, j}] * 2 end, "y")
  local ok, err = pcall(stof.plan, {y}, {target = "c", scheme = 7})
  assert(not ok and tostring(err):find("scheme must be a string", 1, true), tostring(err))
  ok, err = pcall(stof.plan, {y}, {target = "c", scheme = "0 1"})
  assert(not ok and tostring(err):find("more numbers than the plan's 1 ops", 1, true), tostring(err))
end

-- a zoo LLaMA: with vendor GEMMs each q/k head split + rotary is a segment of its own after
-- its projection's GEMM; without them no segment starts at a head split (each joined the
-- segment of its projection), and the plan matches the interpreter
do
  local cfg = models.llama.config("llama", {hidden_size = 32, intermediate_size = 64, num_hidden_layers = 2,
                                            num_attention_heads = 4, num_key_value_heads = 2, vocab_size = 50})
  local r = run.prepare(cfg, {batch = 1, seq = 8, mask = "bigbird", dtype = "float32", target = "c", verbose = false})
  local function starts(p)
    local n = 0
    for _, s in ipairs(p:segments()) do
      if s.first:find("_proj%.heads$") and s.last:find("_proj%.rotary$") then n = n + 1 end
    end
    return n
  end
  local pv = stof.plan({r.model.output}, {target = "c"})
  assert(starts(pv) == 4, pv:describe())
  local p = stof.plan({r.model.output}, {target = "c", vendor_gemm = false})
  assert(starts(p) == 0, p:describe())
  p:poison()
  local e = stof.rel_l2(p:run(r:feed()), stof.eval(r.model.output, r:feed()))
  assert(e < 1e-5, ("llama without vendor GEMMs: relative L2 %g"):format(e))
end
print("test_rotary_fusion: ok")
