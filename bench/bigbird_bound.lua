-- What bounds BigBird (32 x 32 blocks) on Hopper's MMA shapes (issue 14, item 2): the useful
-- share of the MMA work when each 32-row block runs alone (mma.sync, tile 32: the partial
-- window blocks' masked pairs only), and when two 32-row blocks share a 64-row wgmma tile
-- over the union of their 32-key blocks: neighbours (2r, 2r + 1), as the tile-64 kernel with
-- the half skip does, or any two blocks paired greedily by the most key blocks in common.
-- A kernel's fraction of the roofline on BigBird is at most that share times its fraction on
-- dense at the same shape (bench/results/s25/README.md has both measured).
--   build/stof run bench/bigbird_bound.lua
local stof = require("stof")

-- BigBird's format at tile 32 for length S, its n block-rows, and per block-row r the set of
-- its non-empty key blocks (sets[r][c] true) and their count (size[r]); single: the sum.
local function block_sets(S)
  local f = stof.mask.bigbird(32, 32, 32, 0.1, 0):format(S, {tile = 32})
  local n = S // 32
  local sets, size, single = {}, {}, 0
  for r = 0, n - 1 do
    local t, k = {}, 0
    for c = 0, n - 1 do
      if f:tile(0, 0, r, c) ~= "empty" then t[c], k = true, k + 1 end
    end
    sets[r], size[r], single = t, k, single + k
  end
  return f, n, sets, size, single
end

print(("%6s %10s %14s %14s"):format("S", "tile 32", "64 x 32 pairs", "64 x 32 best"))
for _, S in ipairs({1024, 2048, 4096, 8192}) do
  local f, n, sets, size, single = block_sets(S)
  local function common(a, b)
    local k = 0
    for c in pairs(sets[a]) do if sets[b][c] then k = k + 1 end end
    return k
  end
  local adjacent = 0
  for r = 0, n - 1, 2 do adjacent = adjacent + size[r] + size[r + 1] - common(r, r + 1) end
  local cand = {}
  for a = 0, n - 1 do
    for b = a + 1, n - 1 do cand[#cand + 1] = {common(a, b), a, b} end
  end
  table.sort(cand, function(x, y) return x[1] > y[1] end)
  local used, best = {}, 0
  for _, p in ipairs(cand) do
    if not used[p[2]] and not used[p[3]] then
      used[p[2]], used[p[3]] = true, true
      best = best + size[p[2]] + size[p[3]] - p[1]
    end
  end
  local nvalid = f:count()
  print(("%6d %10.3f %14.3f %14.3f"):format(S, nvalid / (single * 1024), nvalid / (adjacent * 2048),
    nvalid / (best * 2048)))
end

-- K and V from the L2: a kernel holding 32 queries' O in registers reads each of its key
-- blocks once per 32-query block; a CTA of G blocks that stages the union of their key blocks
-- once reads them `union / sum` as often. The K/V bytes a forward pass then moves at 16 x 12 x S,
-- against the time of 50% of the roofline at D 128 (bench/wgmma_shapes.cu measures what the
-- H200's L2 gives a gather of 8 KB blocks: 9.1-9.5 TB/s).
print(("\n%6s %5s %12s %14s %18s"):format("S", "G", "union / sum", "K/V GB (D 128)", "TB/s at 50% roofline"))
for _, S in ipairs({2048, 4096}) do
  local f, n, sets, _, single = block_sets(S)
  local B, H, D = 16, 12, 128
  local flops = 4.0 * D * f:count() * B * H
  local roof = math.max(flops / 768e12, 4.0 * B * H * S * D * 2 / 4.2e12)
  for _, G in ipairs({1, 2, 4, 8}) do
    local loads = 0
    for r0 = 0, n - 1, G do
      local u = {}
      for r = r0, math.min(r0 + G, n) - 1 do
        for c in pairs(sets[r]) do u[c] = true end
      end
      for _ in pairs(u) do loads = loads + 1 end
    end
    local kv = B * H * loads * 32 * D * 2 * 2
    print(("%6d %5d %12.2f %14.2f %18.1f"):format(S, G, loads / single, kv / 1e9, kv / (2 * roof) / 1e12))
  end
end
