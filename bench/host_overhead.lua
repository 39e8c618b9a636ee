-- How much of a timed attention run is the host's: AttnPlan:time with one input set (the K/V
-- addresses never change) against three rotated sets (bench_attention's protocol: the TMA
-- kernels' K/V tensor maps are encoded again at every run whose addresses changed), at the
-- grid's shortest shapes, alternated. A tiny plan (B 1, H 1, S 128) times the launch itself.
-- On the GPU machine:
--   build-gpu/stof run bench/host_overhead.lua
local stof = require("stof")
local M = stof.mask
local cases = {
  {"sliding", 8, 1024, 64}, {"sliding", 8, 1024, 128}, {"dense", 8, 1024, 128}, {"dense", 8, 1024, 64},
  {"causal", 8, 1024, 64}, {"document", 8, 1024, 64}, {"causal", 1, 128, 64},
}
print(("%-9s %2s %5s %4s %-24s %10s %10s %8s"):format("mask", "B", "S", "D", "kernel", "1 set ms", "3 sets ms", "diff us"))
for _, c in ipairs(cases) do
  local name, B, S, D = c[1], c[2], c[3], c[4]
  local dims = {B = B, H = (S == 128 and 1 or 12), S = S, D = D}
  local plan = stof.attention_plan(M.suite(name, S), dims)
  local shape = {B, dims.H, S, D}
  local function set(seed) return stof.rand(shape, "float16", seed):to("cuda") end
  local q, k, v = {set(1), set(2), set(3)}, {set(4), set(5), set(6)}, {set(7), set(8), set(9)}
  local out = stof.zeros(shape, "float16"):to("cuda")
  local one, three = {}, {}
  for _ = 1, 3 do
    one[#one + 1] = plan:time(q[1], k[1], v[1], out, 50)
    three[#three + 1] = plan:time(q, k, v, out, 50)
  end
  table.sort(one)
  table.sort(three)
  local ch = plan.choice
  print(("%-9s %2d %5d %4d %-24s %10.4f %10.4f %8.1f"):format(name, B, S, D,
    ("%s/%d%s"):format(ch.kernel, ch.tile, ch.tma and " tma" or ""), one[2], three[2], 1e3 * (three[2] - one[2])))
end
