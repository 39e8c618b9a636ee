-- GPU: score modifiers (T5 bucket bias, ALiBi, tanh soft cap) in every attention kernel the
-- selector can pick, against the CPU path (float64 accumulation) on the same inputs:
-- float16 and bfloat16, head dim 64 and 128, odd lengths, Sq != Sk, grouped-query heads,
-- a table / slopes of float32 and of the attention's dtype.
--   build-gpu/stof run tests/gpu/attention_mod.lua
local stof = require("stof")
local M = stof.mask

if not stof.cuda_mem_info() then
  print("no GPU: skipped")
  return
end

local B, H, Hkv = 1, 4, 2
-- whether the GPU present runs the Hopper kernel (the selector's answer for it)
local hopper = select(2, stof.explain(M.dense(), {S = 1024, D = 64})).hopper
-- kernels: the selector's choice (the Hopper kernel with TMA at D 64 / tile 64 and D 128 /
-- tile 128), the other tile (the Hopper kernel with cp.async), the portable block-wise
-- kernel (mma.sync) at tiles 64 and 32, and the row-wise kernel; the Hopper kernel with
-- every tile-row of more than 2 tiles split over CTAs (the chunks' modifiers must match the
-- main kernel's); on Hopper also key64 (D 64) and the query shift; the lazy rescale, forced
local function kernels(D)
  local list = {
    {name = "auto", o = {}},
    {name = "other tile", o = {tile = D == 64 and 128 or 64}},
    {name = "split 2", o = {split = 2}},
    {name = "other tile, split 2", o = {tile = D == 64 and 128 or 64, split = 2}},
    {name = "portable", o = {portable = true}},
    {name = "tile 32", o = {tile = 32}}, -- the portable kernel, as bigbird runs on Hopper from S = 2048
    {name = "row", o = {kernel = "row"}},
  }
  -- D 64 on Hopper: tile 128 in 64-key steps (key64; the selector leaves modified attention at
  -- tile 64, as key64 was measured without modifiers, so it is forced here), also split
  if D == 64 and hopper then
    list[#list + 1] = {name = "key64", o = {key64 = 1}}
    list[#list + 1] = {name = "key64, split 2", o = {key64 = 1, split = 2}}
  end
  -- Hopper: the query tiles moved up by 32 rows (qshift; the rule takes it for window masks,
  -- forced here on these), also split: the modifiers' positions from the shifted rows
  if hopper then
    list[#list + 1] = {name = "qshift", o = {tile = 64, qshift = 1}}
    list[#list + 1] = {name = "qshift, split 2", o = {tile = 64, qshift = 1, split = 2}}
  end
  -- O rescaled lazily (the rule leaves modified attention without it, as it was measured
  -- without modifiers; forced here): the selector's kernel, tile 64 and the tile-32 kernel
  list[#list + 1] = {name = "lazy", o = {lazy = 1}}
  list[#list + 1] = {name = "lazy, tile 32", o = {tile = 32, lazy = 1}}
  if hopper then list[#list + 1] = {name = "lazy, tile 64, split 2", o = {tile = 64, lazy = 1, split = 2}} end
  return list
end
local shapes = {
  {Sq = 200, Sk = 200, mask = function(S) return M.suite("bigbird", S) end, mname = "bigbird"},
  {Sq = 333, Sk = 333, mask = function() return M.causal() end, mname = "causal"},
  {Sq = 129, Sk = 301, mask = function() return M.dense() end, mname = "dense"},
}

local function mods(dt, seed)
  local tbl = stof.rand({H, 32}, "float32", seed)
  local tbl8 = stof.rand({H, 8}, "float32", seed + 1)
  local slopes = stof.rand({H}, "float32", seed + 2)
  local function dev(t, bdt) return t:astype(bdt):to("cuda") end
  local function ref(t, bdt) return t:astype(bdt):astype("float32") end
  return {
    {"t5 bidirectional, f32 table", function(on) return {scale = 1, bias = on and dev(tbl, "float32") or tbl} end},
    {"t5 bidirectional, table " .. dt, function(on)
      return {scale = 1, bias = on and dev(tbl, dt) or ref(tbl, dt)}
    end},
    {"t5 unidirectional 8 / 20 + softcap", function(on)
      return {bias = on and dev(tbl8, "float32") or tbl8, buckets = 8, max_distance = 20, bidirectional = false,
              softcap = 1.5}
    end},
    {"alibi standard", function() return {alibi = true} end},
    {"alibi slopes " .. dt, function(on) return {alibi = on and dev(slopes, dt) or ref(slopes, dt)} end},
    {"softcap 0.5", function() return {softcap = 0.5} end},
  }
end

-- STOF_MOD_DTYPES (e.g. "bfloat16") runs one dtype's half alone, for a device call too
-- short for both; the seeds stay those of the whole run
local only = os.getenv("STOF_MOD_DTYPES")
local worst, n, seed = 0, 0, 10
for _, dt in ipairs({"float16", "bfloat16"}) do
  if only and not (("," .. only .. ","):find("," .. dt .. ",", 1, true)) then
    seed = seed + 10 * 2 * #shapes
    goto next_dtype
  end
  for _, D in ipairs({64, 128}) do
    for _, sh in ipairs(shapes) do
      seed = seed + 10
      local q = stof.rand({B, H, sh.Sq, D}, dt, seed)
      local k = stof.rand({B, Hkv, sh.Sk, D}, dt, seed + 1)
      local v = stof.rand({B, Hkv, sh.Sk, D}, dt, seed + 2)
      local qd, kd, vd = q:to("cuda"), k:to("cuda"), v:to("cuda")
      local qf, kf, vf = q:astype("float32"), k:astype("float32"), v:astype("float32")
      local m = sh.mask(sh.Sq)
      for _, md in ipairs(mods(dt, seed + 3)) do
        local want = stof.attention(qf, kf, vf, m, md[2](false))
        local plain = stof.attention(qf, kf, vf, m)
        -- the modifier must matter on these inputs, or the check below proves nothing
        assert(stof.rel_l2(plain, want) > 1e-2, md[1] .. ": the modifier changes nothing here")
        for _, kn in ipairs(kernels(D)) do
          local o = md[2](true)
          for key, val in pairs(kn.o) do o[key] = val end
          local got = stof.attention(qd, kd, vd, m, o):to("cpu"):astype("float32")
          local e = stof.rel_l2(got, want)
          n = n + 1
          if not (e <= worst) then worst = e end
          local line = ("%-9s D %3d %-8s %3dx%3d %-38s %-10s rel L2 %.2e"):format(dt, D, sh.mname, sh.Sq, sh.Sk,
            md[1], kn.name, e)
          if not (e < 1e-2) then error(line .. ": the GPU kernel disagrees with the CPU") end
          print(line)
        end
      end
    end
  end
  ::next_dtype::
end
assert(n > 0, "STOF_MOD_DTYPES = " .. tostring(only) .. " names no dtype (float16, bfloat16)")
print(("score modifiers on the GPU: %d cases, worst rel L2 %.2e"):format(n, worst))
