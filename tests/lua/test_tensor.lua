-- stof.Tensor: constructors, element access, methods, printing, closing, and errors.
package.path = arg[0]:match("^(.*/)") .. "?.lua;" .. package.path
local u = require("util")
local stof = require("stof")

-- stof.tensor takes values: nested tables (shape inferred) or a number (0-D)
local t = stof.tensor({{1, 2, 3}, {4, 5, 6}})
assert(t:dtype() == "float32" and t:ndim() == 2 and t:numel() == 6 and t:device() == "cpu")
local s = t:shape()
assert(#s == 2 and s[1] == 2 and s[2] == 3)
assert(t[{0, 0}] == 1 and t[{1, 2}] == 6 and t[{0, 1}] == 2)
assert(math.type(t[{0, 0}]) == "float")
local v = stof.tensor({1, 2, 3})
assert(v:ndim() == 1 and v:shape()[1] == 3 and v[2] == 3, "a flat table is a 1-D tensor of values")
local z0 = stof.tensor(2.5)
assert(z0:ndim() == 0 and z0:numel() == 1 and z0[{}] == 2.5, "a number is a 0-D tensor")
local e = stof.tensor({})
assert(e:ndim() == 1 and e:numel() == 0)
local i32 = stof.tensor({{7, -8}}, "int32")
assert(i32:dtype() == "int32" and math.type(i32[{0, 1}]) == "integer" and i32[{0, 1}] == -8)
local b = stof.tensor({true, false, 1, 0}, "bool")
assert(b[0] == true and b[1] == false and b[2] == true and b[3] == false)
local h = stof.tensor({0.1, 65504, 1e6}, "float16")
assert(math.abs(h[0] - 0.1) < 1e-4 and h[0] ~= 0.1, "f16 rounds")
assert(h[1] == 65504 and h[2] == math.huge, "f16 overflows to inf")
local bf = stof.tensor({1.00390625}, "bfloat16")
assert(bf[0] == 1.0, "bf16 rounds to nearest even")
local d3 = stof.tensor({{{1, 2}, {3, 4}}, {{5, 6}, {7, 8}}}, "float64")
assert(d3:ndim() == 3 and d3[{1, 0, 1}] == 6)

-- zeros, full, rand
local z = stof.zeros({2, 3})
assert(z:dtype() == "float32" and z[{1, 2}] == 0)
assert(stof.zeros({4}, "int64"):dtype() == "int64")
assert(stof.zeros({}):numel() == 1)
local f = stof.full({2, 2}, 7, "int32")
assert(f[{1, 1}] == 7)
local r1, r2, r3 = stof.rand({3, 4}, "float32", 1), stof.rand({3, 4}, "float32", 1), stof.rand({3, 4}, "float32", 2)
assert(r1[{2, 3}] == r2[{2, 3}], "same seed, same values")
assert(r1[{2, 3}] ~= r3[{2, 3}] or r1[{0, 0}] ~= r3[{0, 0}], "another seed, other values")
for i = 0, 2 do for j = 0, 3 do assert(r1[{i, j}] >= -1 and r1[{i, j}] < 1) end end
local ri = stof.rand({50}, "int32", 5)
for i = 0, 49 do assert(ri[i] >= 0 and ri[i] < 100 and math.type(ri[i]) == "integer") end
assert(stof.rand({2}):dtype() == "float32", "default dtype and seed")

-- writes
t[{0, 0}] = 10
assert(t[{0, 0}] == 10)
t[{1, 2}] = -2.5
assert(t[{1, 2}] == -2.5)
v[1] = 9
assert(v[1] == 9)
i32[{0, 0}] = 3.7
assert(i32[{0, 0}] == 3, "ints truncate as C casts do")
b[1] = true
assert(b[1] == true)

-- methods
local tt = t:totable()
assert(#tt == 2 and #tt[1] == 3 and tt[1][1] == 10 and tt[2][3] == -2.5)
local c = t:clone()
c[{0, 0}] = 0
assert(t[{0, 0}] == 10, "clone copies")
local h16 = t:astype("float16")
assert(h16:dtype() == "float16" and h16[{0, 1}] == 2)
assert(z:fill(3) == z and z[{1, 1}] == 3, "fill returns the tensor")
local cpu = t:to("cpu")
assert(cpu:device() == "cpu" and cpu[{1, 0}] == 4)
-- to("cuda"): works with a GPU, else a clear error
local ok, err = pcall(function() return t:to("cuda") end)
if ok then
  assert(err:device() == "cuda")
  assert(tostring(err):find("on cuda"))
  local back = err:to("cpu")
  assert(back[{1, 2}] == -2.5, "round trip through the GPU")
  u.raises(function() return err[{0, 0}] end, "ValueError", "on cuda")
else
  assert(err:find("DeviceError") or err:find("CudaError"), err)
  print("(no GPU: " .. err .. ")")
end

-- allclose and rel_l2
local a1 = stof.tensor({1, 2, 3})
local a2 = stof.tensor({1, 2, 3.00001})
assert(stof.allclose(a1, a2, 1e-4, 0) and not stof.allclose(a1, a2, 1e-7, 0))
assert(stof.allclose(a1, a1))
assert(stof.rel_l2(a1, a1) == 0)
u.near(stof.rel_l2(a2, a1), 0.00001 / math.sqrt(14), 1e-2, "rel_l2")
local nan = stof.tensor({0 / 0, 1, 1})
assert(not stof.allclose(nan, nan), "NaN is never close")

-- printing
assert(tostring(t) == "stof.Tensor float32 [2, 3]\n[[10, 2, 3],\n [4, 5, -2.5]]", tostring(t))
assert(tostring(i32) == "stof.Tensor int32 [1, 2]\n[[3, -8]]", tostring(i32))
assert(tostring(b):find("[true, true, true, false]", 1, true), tostring(b))
assert(tostring(z0) == "stof.Tensor float32 []\n2.5", tostring(z0))
assert(tostring(e) == "stof.Tensor float32 [0]\n[]", tostring(e))
local big = stof.zeros({40, 50})
local bs = tostring(big)
assert(#bs < 400 and bs:find("...", 1, true), "big tensors are summarized:\n" .. bs)
assert(select(2, bs:gsub("\n", "")) == 1 + 6, "3 rows, ..., 3 rows")

-- closing: <close> variables, t:close(), __gc twice
do
  local scoped <close> = stof.zeros({2})
  assert(scoped:numel() == 2)
end
local cl = stof.zeros({2})
cl:close()
cl:close()
assert(tostring(cl) == "stof.Tensor (closed)")
u.raises(function() return cl:shape() end, "ValueError", "closed")
u.raises(function() return cl[0] end, "ValueError", "closed")
u.raises(function() cl[0] = 1 end, "ValueError", "closed")
u.raises(function() return stof.allclose(cl, cl) end, "ValueError", "closed")
local gc = getmetatable(t).__gc
local g2 = stof.zeros({3})
gc(g2); gc(g2)
u.raises(function() return g2:numel() end, "closed")

-- errors
u.raises(function() return t[{0}] end, "IndexError", "1 index for a 2-D tensor")
u.raises(function() return t[{0, 0, 0}] end, "IndexError", "3 indices for a 2-D tensor")
u.raises(function() return t[{2, 0}] end, "IndexError", "dim 0")
u.raises(function() return t[{0, 3}] end, "IndexError", "dim 1")
u.raises(function() return t[{0, -1}] end, "IndexError", "dim 1")
u.raises(function() return t[{0.5, 0}] end, "TypeError", "dim 0", "integer", "0.5")
u.raises(function() return t[{0, "a"}] end, "TypeError", "dim 1", "string")
u.raises(function() return t[0] end, "IndexError", "1 index for a 2-D tensor")
u.raises(function() return t[true] end, "TypeError", "table of integers")
u.raises(function() t[{0, 0}] = "x" end, "TypeError", "number or a boolean", "string")
u.raises(function() t[{5, 0}] = 1 end, "IndexError", "dim 0")
u.raises(function() t.foo = 1 end, "TypeError", "cannot set field 'foo'")
assert(t.foo == nil and t.shape ~= nil)
u.raises(function() return stof.tensor({{1, 2}, {3}}) end, "ShapeError", "ragged", "{1} has 1 elements, expected 2")
u.raises(function() return stof.tensor({{1, 2}, 3}) end, "ShapeError", "ragged", "{1}: table of 2 expected, got integer")
u.raises(function() return stof.tensor({1, {2}}) end, "ShapeError", "ragged", "{1} is a table")
u.raises(function() return stof.tensor({1, "x"}) end, "TypeError", "element {1}: number expected, got string")
u.raises(function() return stof.tensor("x") end, "TypeError", "stof.tensor", "bad argument #1")
u.raises(function() return stof.tensor() end, "TypeError", "got no value")
u.raises(function() return stof.tensor({1}, "float33") end, "TypeError", "unknown dtype 'float33'")
u.raises(function() return stof.tensor({{{{{{{{{1}}}}}}}}}) end, "ShapeError", "deeper than 8")
u.raises(function() return stof.zeros(3) end, "TypeError", "stof.zeros", "shape table expected")
u.raises(function() return stof.zeros({-1}) end, "ShapeError", "negative extent -1 in dim 0")
u.raises(function() return stof.zeros({2}, 3) end, "TypeError", "dtype string expected")
u.raises(function() return stof.full({2}, "x") end, "TypeError", "stof.full", "number expected")
u.raises(function() return stof.rand({2}, "float32", 1.5) end, "TypeError", "seed must be an integer")
u.raises(function() return stof.rand({2}, "float32", "x") end, "TypeError", "seed")
u.raises(function() return stof.rand(nil) end, "TypeError", "stof.rand", "shape table expected, got nil")
u.raises(function() return t:to("tpu") end, "ValueError", "unknown device 'tpu'")
u.raises(function() return t:to() end, "TypeError", "device string expected")
u.raises(function() return t.shape(3) end, "TypeError", "Tensor:shape", "stof.Tensor expected, got integer")
u.raises(function() return t:astype("x") end, "TypeError", "unknown dtype")
u.raises(function() return t:fill({}) end, "TypeError", "Tensor:fill")
u.raises(function() return stof.allclose(a1, t) end, "ShapeError")
u.raises(function() return stof.allclose(a1, 3) end, "TypeError", "stof.allclose", "bad argument #2")
u.raises(function() return stof.allclose(a1, a1, "x") end, "TypeError", "rtol must be a number")
u.raises(function() return stof.rel_l2(a1) end, "TypeError", "stof.rel_l2", "got no value")
u.raises(function() return stof.rel_l2(a1, t) end, "ShapeError")

-- rand_range: any slice of stof.rand's flat order, whatever the shape; count_nan; rand on
-- the GPU gives the same values (or a clear error without one)
do
  local r = stof.rand({3, 5, 7}, "float16", 9)
  local flat = {}
  for i = 0, 2 do for j = 0, 4 do for k = 0, 6 do flat[#flat + 1] = r[{i, j, k}] end end end
  local sl = stof.rand_range("float16", 9, 40, 30)
  assert(sl:dtype() == "float16" and sl:shape()[1] == 30)
  for e = 0, 29 do assert(sl[{e}] == flat[41 + e], "rand_range element " .. e) end
  assert(stof.rand_range("float32", 9, 0, 0):numel() == 0)
  u.raises(function() return stof.rand_range("float32", 9, -1, 2) end, "IndexError", "out of range")
  local n = stof.tensor({1, 0 / 0, 3, 0 / 0})
  assert(n:count_nan() == 2 and r:count_nan() == 0)
  u.raises(function() return stof.tensor({1, 2}, "int32"):count_nan() end, "TypeError", "not a float type")
  local okg, g = pcall(stof.rand, {3, 5, 7}, "float16", 9, "cuda")
  if okg then
    assert(g:device() == "cuda" and g:count_nan() == 0)
    assert(stof.allclose(g:to("cpu"), r, 0, 0), "the GPU's rand is the CPU's, bit for bit")
  else
    assert(g:find("DeviceError") or g:find("CudaError"), g)
  end
  u.raises(function() return stof.rand({2}, "float32", 1, "tpu") end, "ValueError", "unknown device 'tpu'")
end

-- uniform: lo + (hi - lo)(u + 1)/2 with u stof.rand's draw of that seed, in [lo, hi) before
-- rounding to the dtype; the same whatever the number of threads filling it (a tensor of
-- 3 M elements is split over the CPUs: sampled elements checked against rand_range)
do
  local lo, hi = -0.7, 0.3
  local w = stof.uniform({4, 6}, lo, hi, "float64", 5)
  local r = stof.rand({4, 6}, "float64", 5)
  local mn, mx = math.huge, -math.huge
  for i = 0, 3 do
    for j = 0, 5 do
      local v = w[{i, j}]
      assert(v == (lo + 0.5 * (hi - lo)) + 0.5 * (hi - lo) * r[{i, j}], "uniform element")
      assert(v >= lo and v < hi)
      mn, mx = math.min(mn, v), math.max(mx, v)
    end
  end
  assert(mx - mn > 0.3, "24 draws spread over the range")
  for _, dt in ipairs({"float32", "float16", "bfloat16"}) do
    local h = stof.uniform({4, 6}, lo, hi, dt, 5)
    assert(h:dtype() == dt)
    assert(stof.allclose(h, w:astype(dt), 0, 0), "uniform in " .. dt .. " is the float64 draw rounded")
  end
  assert(stof.uniform({4, 6}, lo, hi):dtype() == "float32")
  assert(not stof.allclose(stof.uniform({4, 6}, lo, hi, "float64", 6), w, 0, 0), "another seed, other values")
  local n = 3 * 2^20 + 5
  local big = stof.uniform({n}, 1, 3, "float64", 11)
  for _, e in ipairs({0, 1, 2^20 - 1, 2^20, 2^21 + 7, n - 1}) do
    local want = 2 + stof.rand_range("float64", 11, e, 1)[{0}]
    assert(big[{e}] == want, "uniform element " .. e .. " of a large tensor")
  end
  u.raises(function() return stof.uniform({2}, 0, 1, "int32") end, "TypeError", "tensor uniform: dtype int32 is not a float dtype")
  u.raises(function() return stof.uniform({2}, 1, 1) end, "ValueError", "the range [1, 1) is empty or not finite")
  u.raises(function() return stof.uniform({2}, 0, 1 / 0) end, "ValueError", "not finite")
  -- a bound past the dtype's largest value would fill the tensor with inf
  u.raises(function() return stof.uniform({2}, 0, 1e6, "float16") end, "ValueError", "[0, 1e+06) overflows float16")
  u.raises(function() return stof.uniform({2}, -1e300, 0) end, "ValueError", "overflows float32")
  assert(stof.uniform({2}, 0, 1e30, "bfloat16"):count_nan() == 0)
  u.raises(function() return stof.uniform({2}, "a", 1) end, "TypeError", "stof.uniform", "number (lo)")
  u.raises(function() return stof.uniform({2}, 0) end, "TypeError", "stof.uniform", "number (hi)")
end

print("test_tensor: ok")
