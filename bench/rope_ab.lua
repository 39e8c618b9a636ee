-- A/B of LLaMA's rotary: read from nn.rotary_table (as llama.build does) against each
-- element's angle, cos and sin computed in the rotary kernel (nn.rotary without a table, as
-- before the eleventh session), same weights, timed by graph replay and kernel by kernel;
-- prints each variant's time per segment template and the two outputs' relative L2.
--   build-gpu/stof bench/rope_ab.lua [B [S [LAYERS [TARGET]]]]     (8 512 2 on the GPU)
local stof = require("stof")
local nn = stof.nn
local run = require("stof.models.run")
local B, S, L = tonumber(arg[1] or 8), tonumber(arg[2] or 512), tonumber(arg[3] or 2)
local target = arg[4]
local orig = nn.rotary
local weights
for _, variant in ipairs({"table", "inline", "table"}) do
  if variant == "inline" then
    nn.rotary = function(x, o) return orig(x, {theta = 10000.0, name = o.name}) end
  else
    nn.rotary = orig
  end
  local r = run.prepare("llama", {batch = B, seq = S, mask = "bigbird", dtype = "float16", target = target,
                                  weights = weights, overrides = {num_hidden_layers = L}})
  weights = r.weights
  local out = r:run()
  local ms = r:time(30, 5)
  local split, segs = r:split(20)
  local by = {}
  for _, g in ipairs(segs) do
    local k = g.kind == "gemm" and "gemm" or g.template
    by[k] = (by[k] or 0) + g.ms
  end
  local keys = {}
  for k in pairs(by) do keys[#keys + 1] = k end
  table.sort(keys)
  local parts = {}
  for _, k in ipairs(keys) do parts[#parts + 1] = ("%s %.4f"):format(k, by[k]) end
  print(("%-6s B %d S %d layers %d: forward %.4f ms; kernels %.4f = gemm %.4f attn %.4f other %.4f"):format(
    variant, B, S, L, ms, split.total, split.gemm, split.attention, split.other))
  print("   " .. table.concat(parts, "; "))
  if variant == "inline" then io.stdout:flush() end
  _G["out_" .. variant] = out:astype("float32")
end
print(("table vs inline output rel L2 %.3g"):format(stof.rel_l2(_G.out_table, _G.out_inline)))
