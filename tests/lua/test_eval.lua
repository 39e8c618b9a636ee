-- stof.eval: the reference interpreter through Lua, checked against plain Lua loops.
package.path = arg[0]:match("^(.*/)") .. "?.lua;" .. package.path
local u = require("util")
local stof = require("stof")
local te = stof.te

local M, N, K = 5, 7, 3
local A = te.placeholder({M, K}, "float32", "A")
local B = te.placeholder({K, N}, "float32", "B")
local a = stof.rand({M, K}, "float32", 1)
local b = stof.rand({K, N}, "float32", 2)
local feed = {[A] = a, [B] = b}

-- matmul
local k = te.reduce_axis(K, "k")
local C = te.compute({M, N}, function(i, j) return te.sum(A[{i, k}] * B[{k, j}], k) end, "C")
local c = stof.eval(C, feed)
assert(c:dtype() == "float32" and c:shape()[1] == M and c:shape()[2] == N)
u.check(c, function(i, j)
  local s = 0
  for kk = 0, K - 1 do s = s + a[{i, kk}] * b[{kk, j}] end
  return s
end, 1e-6, "matmul")

-- several outputs at once, one value each
local c2, d2 = stof.eval({C, A}, feed)
assert(stof.allclose(c2, c) and stof.allclose(d2, a))
assert(select("#", stof.eval({C, C, C}, feed)) == 3)

-- every unary function
local X = te.placeholder({2, 9}, "float64", "X")
local x = stof.rand({2, 9}, "float64", 3)
local pos = te.compute({2, 9}, function(i, j) return te.abs(X[{i, j}]) + 0.1 end, "pos")
local function sig(v) return 1 / (1 + math.exp(-v)) end
local unary = {
  exp = math.exp, sin = math.sin, cos = math.cos, tanh = function(v) return (math.exp(2 * v) - 1) / (math.exp(2 * v) + 1) end,
  erf = u.erf, sigmoid = sig, abs = math.abs, floor = math.floor, neg = function(v) return -v end,
}
for name, f in pairs(unary) do
  local Y = te.compute({2, 9}, function(i, j) return te[name](X[{i, j}] * 3) end, name)
  local y = stof.eval(Y, {[X] = x})
  u.check(y, function(i, j) return f(x[{i, j}] * 3) end, name == "erf" and 1e-6 or 1e-12, name)
end
for name, f in pairs({log = math.log, sqrt = math.sqrt, rsqrt = function(v) return 1 / math.sqrt(v) end}) do
  local Y = te.compute({2, 9}, function(i, j) return te[name](pos[{i, j}]) end, name)
  local y = stof.eval(Y, {[X] = x})
  u.check(y, function(i, j) return f(math.abs(x[{i, j}]) + 0.1) end, 1e-12, name)
end

-- binary operators, with numbers on either side
local ops = {
  {function(p, q) return p + q end}, {function(p, q) return p - q end},
  {function(p, q) return p * q end}, {function(p, q) return p / q end},
  {function(p, q) return p ^ 2 end}, {function(p, q) return 2 - p end},
  {function(p, q) return -p + q * 0.5 end},
}
for n, op in ipairs(ops) do
  local Y = te.compute({2, 9}, function(i, j) return op[1](X[{i, j}], pos[{i, j}]) end, "op" .. n)
  local y = stof.eval(Y, {[X] = x})
  u.check(y, function(i, j) return op[1](x[{i, j}], math.abs(x[{i, j}]) + 0.1) end, 1e-12, "op" .. n)
end

-- integer arithmetic on axes: // and % floor, / on integers floors too
local I = te.compute({4, 5}, function(i, j) return (i * 5 + j) // 3 + (i * 5 + j) % 3 * 100 + j / 2 * 1000 end, "I")
local iv = stof.eval(I)
assert(iv:dtype() == "int32")
u.check(iv, function(i, j) local f = i * 5 + j; return f // 3 + f % 3 * 100 + j // 2 * 1000 end, 0, "int ops")

-- comparisons, all / any / not_, select, min / max (elementwise), casts
local cmp = {
  lt = function(p, q) return p < q end, le = function(p, q) return p <= q end,
  gt = function(p, q) return p > q end, ge = function(p, q) return p >= q end,
  eq = function(p, q) return p == q end, ne = function(p, q) return p ~= q end,
}
for name, f in pairs(cmp) do
  local Y = te.compute({6, 6}, function(i, j) return te[name](i, j) end, name)
  local y = stof.eval(Y)
  assert(y:dtype() == "bool", name)
  u.check(y, function(i, j) return f(i, j) end, 0, name)
end
local band = te.compute({6, 6}, function(i, j) return te.all(te.ge(j, i - 1), te.le(j, i + 1), te.not_(te.eq(i, 3))) end, "band")
u.check(stof.eval(band), function(i, j) return j >= i - 1 and j <= i + 1 and i ~= 3 end, 0, "all")
local anyv = te.compute({6, 6}, function(i, j) return te.any(te.lt(i, 1), te.lt(j, 1)) | te.eq(i, j) end, "anyv")
u.check(stof.eval(anyv), function(i, j) return i < 1 or j < 1 or i == j end, 0, "any")
local masked = te.compute({6, 6}, function(i, j) return te.select(te.le(j, i), X[{0, j}], -1e9) end, "masked")
u.check(stof.eval(masked, {[X] = x}), function(i, j) return j <= i and x[{0, j}] or -1e9 end, 1e-12, "select")
local mm = te.compute({2, 9}, function(i, j) return te.max(X[{i, j}], 0) + te.min(X[{i, j}], -0.5, 0.5) end, "mm")
u.check(stof.eval(mm, {[X] = x}), function(i, j)
  local v = x[{i, j}]
  return math.max(v, 0) + math.min(v, -0.5, 0.5)
end, 1e-12, "min/max")
local cast = te.compute({2, 9}, function(i, j) return te.cast(X[{i, j}] * 10, "int32") end, "cast")
local cv = stof.eval(cast, {[X] = x})
assert(cv:dtype() == "int32")
u.check(cv, function(i, j) local v = x[{i, j}] * 10; return v < 0 and math.ceil(v) or math.floor(v) end, 0, "cast")

-- reductions: sum / max / min over one and two axes
local k1, k2 = te.reduce_axis(2, "k1"), te.reduce_axis(9, "k2")
local S = te.compute({}, function() return te.sum(X[{k1, k2}], {k1, k2}) end, "S")
local s = stof.eval(S, {[X] = x})
local want = 0
for i = 0, 1 do for j = 0, 8 do want = want + x[{i, j}] end end
u.near(s[{}], want, 1e-12, "sum over two axes")
local Mx = te.compute({2}, function(i) return te.max(X[{i, k2}], {k2}) end, "Mx")
local Mn = te.compute({2}, function(i) return te.min(X[{i, k2}], k2) end, "Mn")
local mx, mn = stof.eval({Mx, Mn}, {[X] = x})
for i = 0, 1 do
  local hi, lo = -math.huge, math.huge
  for j = 0, 8 do hi = math.max(hi, x[{i, j}]); lo = math.min(lo, x[{i, j}]) end
  assert(mx[i] == hi and mn[i] == lo)
end

-- softmax in f16: results rounded to f16, error vs f64 Lua small
local Hs = te.placeholder({3, 11}, "float16", "Hs")
local hs = stof.rand({3, 11}, "float16", 9)
local r = te.reduce_axis(11, "r")
local mxh = te.compute({3}, function(i) return te.max(Hs[{i, r}], r) end, "mxh")
local ex = te.compute({3, 11}, function(i, j) return te.exp(Hs[{i, j}] - mxh[i]) end, "ex")
local r2 = te.reduce_axis(11, "r2")
local den = te.compute({3}, function(i) return te.sum(ex[{i, r2}], r2) end, "den")
local sm = te.compute({3, 11}, function(i, j) return ex[{i, j}] / den[i] end, "sm")
local smv = stof.eval(sm, {[Hs] = hs})
assert(smv:dtype() == "float16")
u.check(smv, function(i, j)
  local m, d = -math.huge, 0
  for jj = 0, 10 do m = math.max(m, hs[{i, jj}]) end
  for jj = 0, 10 do d = d + math.exp(hs[{i, jj}] - m) end
  return math.exp(hs[{i, j}] - m) / d
end, 2e-3, "softmax f16")

-- a graph with constants only needs no feed
local cst = te.compute({3}, function(i) return i * 2 + 1 end, "cst")
assert(stof.eval(cst)[2] == 5 and stof.eval(cst, {})[1] == 3)

-- errors
u.raises(function() return stof.eval(C, {[A] = a}) end, "ValueError", "B")
u.raises(function() return stof.eval(C, {}) end, "ValueError", "no value in the feed")
u.raises(function() return stof.eval(C, {[A] = b, [B] = b}) end, "ShapeError", "A")
u.raises(function() return stof.eval(C, {[A] = a, [B] = 3}) end, "TypeError", "stof.eval", "value fed to B: stof.Tensor expected, got integer")
u.raises(function() return stof.eval(C, {[A] = a, [B] = b, x = a}) end, "TypeError", "feed key: placeholder expected, got string")
u.raises(function() return stof.eval(C, {[A] = a, [B] = b, [C] = c}) end, "TypeError", "not a placeholder")
u.raises(function() return stof.eval(C, 3) end, "TypeError", "stof.eval", "bad argument #2", "feed table")
u.raises(function() return stof.eval({}, feed) end, "TypeError", "empty")
u.raises(function() return stof.eval({C, 3}, feed) end, "TypeError", "output 2: te tensor expected, got integer")
u.raises(function() return stof.eval(a, feed) end, "TypeError", "te tensor or list of te tensors expected, got stof.Tensor")
u.raises(function() return stof.eval() end, "TypeError", "stof.eval", "got nil")
local closed = stof.rand({M, K})
closed:close()
u.raises(function() return stof.eval(C, {[A] = closed, [B] = b}) end, "ValueError", "closed")
te.reset()
local A2 = te.placeholder({M, K}, "float32", "A")
u.raises(function() return stof.eval(C, {[A2] = a, [B] = b}) end, "ValueError", "another graph")
u.raises(function() return stof.eval({C, A2}, feed) end, "ValueError", "different graphs")
-- out-of-range loads are caught when evaluated
local Sh = te.compute({M, K}, function(i, j) return A2[{i + 1, j}] end, "Sh")
u.raises(function() return stof.eval(Sh, {[A2] = a}) end, "IndexError")

print("test_eval: ok")
