-- stof.nn: linear (with bias) against plain Lua, attention against stof.attention.
local stof = require("stof")
local te, nn, M = stof.te, stof.nn, stof.mask
local Q = te.placeholder({1, 2, 9, 4}, "float32", "Q")
local A = nn.attention(Q, Q, Q, M.causal())
local x = te.placeholder({3, 5}, "float32", "x")
local w = te.placeholder({5, 2}, "float32", "w")
local b = te.placeholder({2}, "float32", "b")
local y = nn.linear(x, w, b, "fc")
local xv, wv, bv = stof.rand({3, 5}, "float32", 1), stof.rand({5, 2}, "float32", 2), stof.rand({2}, "float32", 3)
local out = stof.eval(y, {[x] = xv, [w] = wv, [b] = bv})
for i = 0, 2 do for j = 0, 1 do
  local r = bv[{j}]
  for k = 0, 4 do r = r + xv[{i, k}] * wv[{k, j}] end
  assert(math.abs(r - out[{i, j}]) < 1e-5)
end end
local q = stof.rand({1, 2, 9, 4}, "float32", 4)
assert(stof.rel_l2(stof.eval(A, {[Q] = q}), stof.attention(q, q, q, M.causal())) < 1e-6)
print("nn ok")
