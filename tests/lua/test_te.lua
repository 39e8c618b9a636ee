-- stof.te: placeholders, computes, reductions, operators, functions, printing, accessors,
-- and their errors.
package.path = arg[0]:match("^(.*/)") .. "?.lua;" .. package.path
local u = require("util")
local stof = require("stof")
local te = stof.te
assert(stof.te == require("stof.te"), "package.loaded['stof.te'] is stof.te")

-- placeholder and accessors
local A = te.placeholder({4, 6}, "float32", "A")
assert(A.name == "A" and A.dtype == "float32" and A.op == "placeholder" and A.ndim == 2)
assert(A.shape[1] == 4 and A.shape[2] == 6 and #A.shape == 2)
assert(A.pattern == "input")
assert(A.nonexistent == nil)
local P = te.placeholder({3})
assert(P.dtype == "float32" and P.name == "placeholder", "defaults: float32, 'placeholder'")
assert(te.placeholder({2}, "f16").dtype == "float16", "dtype aliases")
assert(te.placeholder({}, "int32", "s").ndim == 0, "0-D placeholder")
assert(tostring(A):find("A = placeholder([4, 6], float32)", 1, true), tostring(A))

-- compute: the axes are named after the function's parameters
local B = te.compute({4, 6}, function(row, col) return A[{row, col}] * 2 + 1 end, "B")
assert(B.op == "compute" and B.dtype == "float32" and B.name == "B")
assert(B.axis[1].name == "row" and B.axis[2].name == "col" and B.axis[2].extent == 6)
assert(tostring(B.body) == "((A[row, col] * 2.0) + 1.0)", tostring(B.body))
assert(tostring(B):find("B = compute", 1, true) and tostring(B):find("A = placeholder", 1, true))
assert(B.pattern == "elementwise")
assert(te.compute({4}, function(i) return 1 end, "one").dtype == "int32", "number body")
assert(te.compute({4}, function(i) return 1.5 end).dtype == "float32")
assert(te.compute({4}, function(i) return i end, "I", "float64").dtype == "float64", "dtype arg")
assert(te.compute({2, 2}, function(...) return 0 end).axis[1].name ~= nil, "vararg fn: default names")

-- one handle per op: == and table keys work
local seen = {}
seen[A] = 1
assert(seen[A] == 1)

-- reduce_axis and sum / max / min (reductions)
local k = te.reduce_axis(6, "k")
assert(k.is_reduce_axis and k.name == "k" and k.extent == 6 and k.kind == "var")
assert(te.reduce_axis({0, 6}, "k2").extent == 6, "reduce_axis({0, n})")
assert(te.reduce_axis(3).name == "rv", "default name")
local C = te.compute({4, 4}, function(i, j) return te.sum(A[{i, k}] * A[{j, k}], {k}) end, "C")
assert(C.pattern == "out-elementwise-fusable" and C.compute_intensive, C.pattern)
assert(tostring(C.body) == "sum((A[i, k] * A[j, k]), axis=[k:6])", tostring(C.body))
local S1 = te.compute({4}, function(i) return te.sum(A[{i, k}], k) end, "S1")
local M1 = te.compute({4}, function(i) return te.max(A[{i, k}], k) end, "M1")
local N1 = te.compute({4}, function(i) return te.min(A[{i, k}], {k}) end, "N1")
assert(tostring(M1.body):find("^max%(") and tostring(N1.body):find("^min%("))
assert(M1.pattern == "reduction")

-- te.max / te.min with expressions: elementwise
local e = A[{0, 0}]
assert(tostring(te.max(e, 0)) == "max(A[0, 0], 0.0)", tostring(te.max(e, 0)))
assert(tostring(te.min(e, e, 1)) == "min(min(A[0, 0], A[0, 0]), 1.0)")
assert(tostring(te.maximum(e, 2)) == "max(A[0, 0], 2.0)")
assert(tostring(te.minimum(1, e)) == "min(1.0, A[0, 0])")
-- an axis of a compute is not a reduce axis: te.max(x, i) is elementwise
te.compute({4}, function(i)
  local m = te.max(A[{i, 0}], i)
  assert(m.kind == "max", m.kind)
  return m
end)

-- operators
assert(tostring(e + 1) == "(A[0, 0] + 1.0)")
assert(tostring(1 - e) == "(1.0 - A[0, 0])")
assert(tostring(e * e) == "(A[0, 0] * A[0, 0])")
assert(tostring(e / 2) == "(A[0, 0] / 2.0)")
assert(tostring(e // 2) == "(A[0, 0] // 2.0)")
assert(tostring(e % 2) == "(A[0, 0] % 2.0)")
assert(tostring(-e) == "-A[0, 0]")
assert(tostring(e ^ 2) == "pow(A[0, 0], 2.0)")
assert((e + 1).kind == "+" and (e + 1).dtype == "float32")
-- constants take a float operand's dtype
local H = te.placeholder({2}, "float16", "H")
assert((H[0] * 0.5).dtype == "float16", "f16 * 0.5 stays f16")
assert((H[0] + 1).dtype == "float16")
te.compute({3}, function(i)
  assert((i * 2).dtype == "int32" and (i // 2).dtype == "int32" and (i % 2).dtype == "int32")
  assert((i * 0.5).dtype == "float32")
  return i
end)
-- & | ~ on conditions
local c1, c2 = te.lt(e, 1), te.ge(e, 0)
assert((c1 & c2).dtype == "bool" and tostring(c1 & c2) == "((A[0, 0] < 1.0) && (A[0, 0] >= 0.0))")
assert(tostring(c1 | c2) == "((A[0, 0] < 1.0) || (A[0, 0] >= 0.0))")
assert(tostring(~c1) == "!(A[0, 0] < 1.0)")

-- comparisons, all / any / not_, select
for name, sym in pairs({lt = "<", le = "<=", gt = ">", ge = ">=", eq = "==", ne = "!="}) do
  local c = te[name](e, 3)
  assert(c.dtype == "bool" and tostring(c) == "(A[0, 0] " .. sym .. " 3.0)", tostring(c))
end
assert(tostring(te.all(c1, c2, te.ne(e, 2))):find("&&.*&&"))
assert(tostring(te.any({c1, c2})) == "((A[0, 0] < 1.0) || (A[0, 0] >= 0.0))")
assert(te.all().dtype == "bool" and te.any().dtype == "bool")
assert(te.all(c1) == c1 or tostring(te.all(c1)) == tostring(c1))
assert(tostring(te.not_(c1)) == "!(A[0, 0] < 1.0)")
assert(tostring(te.select(c1, e, 0)) == "select((A[0, 0] < 1.0), A[0, 0], 0.0)")
assert(te.select(c1, 1, 0).dtype == "int32")
assert(te.select(c1, H[0], 0).dtype == "float16")

-- math functions
for _, f in ipairs({"exp", "log", "sqrt", "rsqrt", "tanh", "erf", "sigmoid", "abs", "sin",
                    "cos", "floor"}) do
  local x = te[f](e)
  assert(x.kind == f and x.dtype == "float32" and tostring(x) == f .. "(A[0, 0])", tostring(x))
end
assert(te.exp(1).dtype == "float32", "an int operand is cast to float32")
assert(tostring(te.pow(e, 3)) == "pow(A[0, 0], 3.0)")
assert(te.floordiv(7, 2).kind == "//" and te.floormod(7, 2).kind == "%")

-- const and cast
assert(te.const(3).dtype == "int32" and te.const(3).value == 3)
assert(te.const(2.5).dtype == "float32" and te.const(2.5).value == 2.5)
assert(te.const(true).dtype == "bool")
assert(te.const(3, "float64").dtype == "float64")
assert(te.const(1 << 40).dtype == "int64", "big integers are int64")
assert(te.cast(e, "float16").dtype == "float16" and te.cast(e, "int32").kind == "cast")
assert(e:astype("int64").dtype == "int64")

-- loads: numbers and expressions as indices; 1-D tensors take a bare index
assert(tostring(A[{1, 2}]) == "A[1, 2]")
assert(tostring(P[2]) == "P[2]" or tostring(P[2]) == "placeholder[2]")
te.compute({3}, function(i) assert(tostring(P[i]):find("%[i%]")); return P[i] end)
te.compute({2, 3}, function(i, j) return A[{i + 1, j * 2}] end, "shifted")

-- errors
u.raises(function() return A[{1}] end, "IndexError", "1 index for a 2-D tensor")
u.raises(function() return A[{1, 2, 3}] end, "IndexError", "3 indices for a 2-D tensor")
u.raises(function() return A[{1.5, 2}] end, "TypeError", "dim 0", "must be an integer", "1.5")
u.raises(function() return A[{0, "x"}] end, "TypeError", "dim 1")
u.raises(function() return A[{4, 0}] end, "IndexError", "out of range", "dim 0")
u.raises(function() return A[{0, -1}] end, "IndexError", "dim 1")
u.raises(function() return A[true] end, "TypeError", "index with a table")
u.raises(function() return A[{e, 0}] end, "TypeError", "float32", "integer")
u.raises(function() return A[3] end, "IndexError", "1 index for a 2-D tensor")
u.raises(function() A.shape = 3 end, "TypeError", "immutable")
u.raises(function() return A + 1 end, "TypeError", "not an expression", "A[{i, j}]")
u.raises(function() return 1 * A end, "TypeError", "bad argument #2")
u.raises(function() return e < 1 end, "TypeError", "te.lt")
u.raises(function() return e <= 1 end, "TypeError", "te.le")
u.raises(function() return e + "x" end, "TypeError", "operator +", "expression or number expected, got string")
u.raises(function() return te.exp("x") end, "TypeError", "te.exp", "got string")
u.raises(function() return te.exp() end, "TypeError", "te.exp", "got no value")
u.raises(function() return te.exp(c1) end, "TypeError", "bool")
u.raises(function() return c1 + 1 end, "TypeError", "bool")
u.raises(function() return te.all(1, 2) end, "TypeError", "bool")
u.raises(function() return te.all(e) end, "TypeError", "te.all", "float32")
u.raises(function() return te.not_(e) end, "TypeError")
u.raises(function() return te.select(e, 1, 2) end, "TypeError")
u.raises(function() return te.placeholder(3) end,
  "TypeError: te.placeholder: bad argument #1 (shape table expected, got integer)")
u.raises(function() return te.placeholder() end, "TypeError", "shape table expected, got no value")
u.raises(function() return te.placeholder({-3}) end, "ShapeError", "negative extent -3 in dim 0")
u.raises(function() return te.placeholder({2.5}) end, "TypeError", "dim 0", "2.5")
u.raises(function() return te.placeholder({"a"}) end, "TypeError", "dim 0", "string")
u.raises(function() return te.placeholder({1, 2, 3, 4, 5, 6, 7, 8, 9}) end, "ShapeError", "9 dims")
u.raises(function() return te.placeholder({3}, "floot32") end, "TypeError", "unknown dtype 'floot32'")
u.raises(function() return te.placeholder({3}, 5) end, "TypeError", "dtype string expected")
u.raises(function() return te.placeholder({3}, "float32", {}) end, "TypeError", "name must be a string")
u.raises(function() return te.reduce_axis(-2) end, "ShapeError", "negative extent -2")
u.raises(function() return te.reduce_axis(0) end, "ShapeError", "must be positive")
u.raises(function() return te.reduce_axis(2.5) end, "TypeError", "extent must be an integer")
u.raises(function() return te.reduce_axis("x") end, "TypeError", "te.reduce_axis")
u.raises(function() return te.reduce_axis({1, 4}) end, "TypeError", "start at 0")
u.raises(function() return te.sum(e, {}) end, "ValueError", "no reduce axis")
u.raises(function() return te.sum(e, 3) end, "TypeError", "reduce axis or table of reduce axes")
u.raises(function() return te.sum(e, {3}) end, "TypeError", "axis 1: reduce axis expected, got integer")
u.raises(function() return te.sum(e) end, "TypeError", "te.sum", "got no value")
u.raises(function() return te.max(e) end, "TypeError", "te.max", "1 argument")
u.raises(function() return te.maximum(e) end, "TypeError", "te.maximum", "at least 2")
u.raises(function() return te.sum(te.lt(e, 1), k) end, "TypeError", "bool")
u.raises(function()
  te.compute({4}, function(i) return te.sum(A[{i, 0}], i) end)
end, "not a reduce axis")
u.raises(function()
  return te.compute({4}, function(i) return te.sum(A[{i, k}], k) * 2 end, "bad")
end, "ValueError", "compute bad", "a reduction must be the whole body")
u.raises(function() return te.compute({4}, function(i) return A[{i, k}] end, "free") end,
  "ValueError", "reduce axis k")
u.raises(function() return te.compute({4}, function(i) return "x" end) end,
  "TypeError", "te.compute", "must return an expression or a number, got string")
u.raises(function() return te.compute({4}, function(i) end) end, "must return", "got nil")
u.raises(function() return te.compute({4}, function(i) return A end) end, "index the tensor")
u.raises(function() return te.compute({4}, 3) end, "TypeError", "function expected, got integer")
u.raises(function() return te.compute(3, function() end) end, "shape table expected")
u.raises(function() return te.compute({0}, function(i) return 1 end) end, "ShapeError")
u.raises(function() return te.compute({4}, function(i) error("boom") end) end, "boom")
u.raises(function() return te.const("x") end, "TypeError", "te.const", "number or boolean expected")
u.raises(function() return te.const(1.5, "int32") end, "ValueError", "not an integer")
u.raises(function() return te.cast(e) end, "TypeError", "te.cast", "dtype string expected")
u.raises(function() return te.cast(e, "nope") end, "TypeError", "unknown dtype")

-- graphs: te.reset() starts a new one; mixing them is an error
local old = A[{0, 0}]
te.reset()
local A2 = te.placeholder({4, 6}, "float32", "A")
u.raises(function() return old + A2[{0, 0}] end, "ValueError", "different graphs")
u.raises(function() return te.compute({4}, function(i) return old end) end, "different graphs")
assert(tostring(old + 1) == "(A[0, 0] + 1.0)", "the old graph lives on")

-- the GC may run at any time: expressions keep their graph alive
do
  local x = A2[{1, 1}]
  te.reset()
  collectgarbage(); collectgarbage()
  assert(tostring(x * 2) == "(A[1, 1] * 2.0)")
end

print("test_te: ok")
