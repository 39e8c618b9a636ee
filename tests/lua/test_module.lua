-- require("stof") gives one module with its parts, under the stof executable and under
-- a plain lua5.4 loading stof.so (CTest runs this script both ways).
local stof = require("stof")
assert(type(stof) == "table" and require("stof") == stof, "one module table")
assert(type(stof.te) == "table" and require("stof.te") == stof.te)
assert(type(stof.version) == "string" and stof._VERSION == "stof " .. stof.version)
for _, name in ipairs({"tensor", "zeros", "full", "rand", "allclose", "rel_l2", "eval"}) do
  assert(type(stof[name]) == "function", name)
end
for _, name in ipairs({"placeholder", "compute", "reduce_axis", "sum", "max", "min", "exp",
                       "select", "all", "any", "not_", "lt", "const", "cast", "reset"}) do
  assert(type(stof.te[name]) == "function", "te." .. name)
end
assert(stof.no_such_submodule == nil, "unknown fields are nil")
-- stof's pure-Lua modules are on package.path, and stof.<name> loads lua/stof/<name>.lua
assert(package.path:find("/lua/?.lua", 1, true), package.path)
local dir = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
package.path = dir .. "cli/?.lua;" .. package.path
assert(stof.fixture.answer == 42 and rawget(stof, "fixture") == require("stof.fixture"))

-- a small end-to-end run
local te = stof.te
local A = te.placeholder({2, 3}, "float32", "A")
local B = te.compute({2, 3}, function(i, j) return A[{i, j}] * 2 + i end, "B")
local b = stof.eval(B, {[A] = stof.tensor({{1, 2, 3}, {4, 5, 6}})})
assert(b[{1, 2}] == 13 and b[{0, 0}] == 2)

-- errors carry the script's file:line and the kind
local ok, err = pcall(function() return te.placeholder(3) end)
assert(not ok and err:find("test_module.lua:%d+: TypeError: te.placeholder: bad argument #1"), err)

print("test_module: ok")
