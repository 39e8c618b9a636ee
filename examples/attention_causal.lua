-- Causal multi-head attention as tensor expressions: scores = Q K^T / sqrt(D), the causal
-- mask through te.select(te.le(j, i), ...), a row softmax, then times V. The sequence
-- length is odd on purpose (no tile size divides it). Evaluated by stof's reference
-- interpreter and checked against plain Lua loops.
--
--   stof run examples/attention_causal.lua [H S D]
local stof = require("stof")
local te = stof.te

local H, S, D = tonumber(arg[1]) or 2, tonumber(arg[2]) or 37, tonumber(arg[3]) or 16
local scale = 1 / math.sqrt(D)
local NEG = -1e30 -- masked scores: exp(NEG - max) is exactly 0

local Q = te.placeholder({H, S, D}, "float32", "Q")
local K = te.placeholder({H, S, D}, "float32", "K")
local V = te.placeholder({H, S, D}, "float32", "V")
local d = te.reduce_axis(D, "d")
local scores = te.compute({H, S, S}, function(h, i, j)
  return te.sum(Q[{h, i, d}] * K[{h, j, d}], {d})
end, "scores")
local masked = te.compute({H, S, S}, function(h, i, j)
  return te.select(te.le(j, i), scores[{h, i, j}] * scale, NEG)
end, "masked")
local j1 = te.reduce_axis(S, "j1")
local mx = te.compute({H, S}, function(h, i) return te.max(masked[{h, i, j1}], j1) end, "mx")
local E = te.compute({H, S, S}, function(h, i, j) return te.exp(masked[{h, i, j}] - mx[{h, i}]) end, "E")
local j2 = te.reduce_axis(S, "j2")
local den = te.compute({H, S}, function(h, i) return te.sum(E[{h, i, j2}], j2) end, "den")
local P = te.compute({H, S, S}, function(h, i, j) return E[{h, i, j}] / den[{h, i}] end, "P")
local j3 = te.reduce_axis(S, "j3")
local O = te.compute({H, S, D}, function(h, i, dd)
  return te.sum(P[{h, i, j3}] * V[{h, j3, dd}], {j3})
end, "O")

local q, k, v = stof.rand({H, S, D}, "float32", 11), stof.rand({H, S, D}, "float32", 12),
                stof.rand({H, S, D}, "float32", 13)
local o, p = stof.eval({O, P}, {[Q] = q, [K] = k, [V] = v})

-- Plain Lua.
local qt, kt, vt, ot = q:totable(), k:totable(), v:totable(), o:totable()
local maxerr = 0
for h = 1, H do
  for i = 1, S do
    local w, m = {}, -math.huge
    for j = 1, i do -- causal: keys 1..i (1-based)
      local s = 0
      for x = 1, D do s = s + qt[h][i][x] * kt[h][j][x] end
      w[j] = s * scale
      if w[j] > m then m = w[j] end
    end
    local sum = 0
    for j = 1, i do w[j] = math.exp(w[j] - m); sum = sum + w[j] end
    for x = 1, D do
      local acc = 0
      for j = 1, i do acc = acc + w[j] / sum * vt[h][j][x] end
      maxerr = math.max(maxerr, math.abs(ot[h][i][x] - acc))
    end
  end
end

-- The mask as stof computed it: where head 0's attention weights are non-zero.
local rows = math.min(S, 12)
print(("causal attention: H=%d heads, S=%d (odd), D=%d, float32"):format(H, S, D))
print(("attention weights of head 0, first %d rows and columns ('#' kept, '.' masked):"):format(rows))
for i = 0, rows - 1 do
  local line = {}
  for j = 0, rows - 1 do line[#line + 1] = p[{0, i, j}] > 0 and "#" or "." end
  print("  " .. table.concat(line))
end
for i = 0, S - 1 do -- every row: keys j <= i only, weights summing to 1
  local sum = 0
  for j = 0, S - 1 do
    local w = p[{0, i, j}]
    if (j <= i) ~= (w > 0) then error(("attention_causal: mask wrong at (%d, %d)"):format(i, j)) end
    sum = sum + w
  end
  if math.abs(sum - 1) > 1e-5 then error(("attention_causal: row %d sums to %g"):format(i, sum)) end
end
print(("max |stof - Lua| over O[%d, %d, %d] = %.3g"):format(H, S, D, maxerr))
if not (maxerr < 1e-5) then error(("attention_causal: mismatch (max error %g)"):format(maxerr)) end
print("ok")
