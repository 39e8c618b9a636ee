-- stof.attention on the GPU against the CPU path, through Lua
local stof = require("stof")
local M = stof.mask
local B, H, S, D = 2, 4, 1000, 64
for _, name in ipairs(M.suite_names()) do
  local m = M.suite(name, S)
  local q, k, v = stof.rand({B, H, S, D}, "float16", 1), stof.rand({B, H, S, D}, "float16", 2), stof.rand({B, H, S, D}, "float16", 3)
  local o = stof.attention(q:to("cuda"), k:to("cuda"), v:to("cuda"), m):to("cpu")
  local ref = stof.attention(q:astype("float32"), k:astype("float32"), v:astype("float32"), m)
  local err = stof.rel_l2(o:astype("float32"), ref)
  print(("%-15s rel_l2 %.2e"):format(name, err))
  assert(err < 1e-2)
end
print("gpu attention through Lua ok")

-- more (batch, head) pairs than grid y takes (65535): the pairs spread over grid z too
do
  local Bb, Hh, Ss = 4097, 16, 8
  local q, k, v = stof.rand({Bb, Hh, Ss, D}, "float16", 4), stof.rand({Bb, Hh, Ss, D}, "float16", 5),
    stof.rand({Bb, Hh, Ss, D}, "float16", 6)
  local m = M.causal()
  local o = stof.attention(q:to("cuda"), k:to("cuda"), v:to("cuda"), m):to("cpu")
  local ref = stof.attention(q:astype("float32"), k:astype("float32"), v:astype("float32"), m)
  local err = stof.rel_l2(o:astype("float32"), ref)
  print(("B*H = %d (grid z %d) rel_l2 %.2e"):format(Bb * Hh, (Bb * Hh + 65534) // 65535, err))
  assert(err < 1e-2)
  -- the pairs past grid y (bh >= 65535) element by element: a z slice that did not run
  -- would be caught here even where the whole-tensor norm could hide it
  local worst = 0
  for bh = 65535, Bb * Hh - 1 do
    local b, h = bh // Hh, bh % Hh
    for s = 0, Ss - 1 do
      for d = 0, D - 1 do
        local got, want = o[{b, h, s, d}], ref[{b, h, s, d}]
        local e = math.abs(got - want)
        if not (e <= worst) then worst = e end
      end
    end
  end
  print(("pairs past grid y: max abs error %.2e"):format(worst))
  assert(worst < 5e-3, "the (batch, head) pairs of grid z are wrong")
end
print("gpu attention (B*H over grid z) ok")

-- key64 (D 64 on Hopper: tile 128 in 64-key steps): the selector's, forced and off give the
-- CPU's result; the plan cache keys on the option (a forced key64 at D 128 is refused even
-- after a plain call with the same inputs had cached a plan)
do
  local _, c = stof.explain(M.dense(), {S = 1024, B = 2, H = 4, D = 64})
  if c.hopper then
    local m = M.causal()
    for _, Dd in ipairs({64, 128}) do
      local q, k, v = stof.rand({2, 4, 1024, Dd}, "float16", 7), stof.rand({2, 4, 1024, Dd}, "float16", 8),
        stof.rand({2, 4, 1024, Dd}, "float16", 9)
      local qd, kd, vd = q:to("cuda"), k:to("cuda"), v:to("cuda")
      local ref = stof.attention(q:astype("float32"), k:astype("float32"), v:astype("float32"), m)
      local o = stof.attention(qd, kd, vd, m):to("cpu")
      assert(stof.rel_l2(o:astype("float32"), ref) < 1e-2)
      if Dd == 64 then
        for _, kv in ipairs({1, -1}) do
          local ok = stof.attention(qd, kd, vd, m, {key64 = kv}):to("cpu")
          local err = stof.rel_l2(ok:astype("float32"), ref)
          print(("key64 = %d rel_l2 %.2e"):format(kv, err))
          assert(err < 1e-2)
        end
      else
        local ok, err = pcall(stof.attention, qd, kd, vd, m, {key64 = 1})
        assert(not ok and tostring(err):find("key64 asked for", 1, true), tostring(err))
      end
    end
    print("gpu attention key64 ok")
  end
end

-- the lazy rescale forced on and off gives the CPU's result, and the plan cache keys on the
-- option: after a row-wise call has cached its plan, the same call with lazy = 1 is still
-- refused (a key without lazy would hand back the cached row-wise plan)
do
  local m = M.suite("bigbird", 1000)
  local q, k, v = stof.rand({2, 4, 1000, 128}, "float16", 10), stof.rand({2, 4, 1000, 128}, "float16", 11),
    stof.rand({2, 4, 1000, 128}, "float16", 12)
  local qd, kd, vd = q:to("cuda"), k:to("cuda"), v:to("cuda")
  local ref = stof.attention(q:astype("float32"), k:astype("float32"), v:astype("float32"), m)
  for _, lz in ipairs({1, -1, 0}) do
    local o = stof.attention(qd, kd, vd, m, {lazy = lz}):to("cpu")
    local err = stof.rel_l2(o:astype("float32"), ref)
    print(("lazy = %d rel_l2 %.2e"):format(lz, err))
    assert(err < 1e-2)
  end
  local o = stof.attention(qd, kd, vd, m, {kernel = "row"}):to("cpu")
  assert(stof.rel_l2(o:astype("float32"), ref) < 1e-2)
  local ok, err = pcall(stof.attention, qd, kd, vd, m, {kernel = "row", lazy = 1})
  assert(not ok and tostring(err):find("lazy asked for", 1, true), tostring(err))
  print("gpu attention lazy ok")
end
