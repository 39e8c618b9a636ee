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
