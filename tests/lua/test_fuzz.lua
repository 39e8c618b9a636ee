-- Bad input never crashes: every binding, called with junk argument lists, either works or
-- raises a message with a kind prefix ("TypeError: ...", "ShapeError: ...", ...).
local stof = require("stof")
local te = stof.te

local A = te.placeholder({3, 4}, "float32", "A")
local k = te.reduce_axis(4, "k")
local C = te.compute({3}, function(i) return te.sum(A[{i, k}], k) end, "C")
local e = A[{0, 1}]
local t = stof.rand({3, 4})
local closed = stof.zeros({2})
closed:close()

local pool = {
  n = 22,
  nil, 0, -1, 2, 1.5, -0.5, 1 << 62, math.maxinteger, math.mininteger, 0 / 0, math.huge,
  "x", "float16", {}, {-1}, {1.5}, {"a"}, {{}}, {3, 4}, {1, 2, 3, 4, 5, 6, 7, 8, 9}, true,
  function() return 1 end,
}
local extra = {A, C, e, k, t, closed, io.stdout, coroutine.create(function() end),
               {e, k}, {A}, {[A] = t}, {[A] = 3}, {e}, {k, k}, {0, 4}, {te.lt(e, 1)}}
for _, v in ipairs(extra) do pool.n = pool.n + 1; pool[pool.n] = v end

local funcs = {}
for name, f in pairs(stof) do
  if type(f) == "function" then funcs["stof." .. name] = f end
end
for name, f in pairs(te) do
  if type(f) == "function" and name ~= "reset" then funcs["te." .. name] = f end
end
for name, f in pairs(getmetatable(e)) do
  if type(f) == "function" then funcs["Expr." .. name] = f end
end
for name, f in pairs(getmetatable(A)) do
  if type(f) == "function" then funcs["TeTensor." .. name] = f end
end
for name, f in pairs(getmetatable(t)) do
  if type(f) == "function" and name ~= "__gc" and name ~= "__close" then funcs["Tensor." .. name] = f end
end
for _, m in ipairs({"shape", "dtype", "device", "ndim", "numel", "to", "clone", "astype", "fill", "totable"}) do
  funcs["Tensor:" .. m] = t[m]
end

local calls, errors = 0, 0
local function try(name, f, args, n)
  calls = calls + 1
  local ok, err = pcall(f, table.unpack(args, 1, n))
  if not ok then
    errors = errors + 1
    if type(err) ~= "string" or not err:find("%u%a*Error: ") then
      error(("%s%s: message without a kind: %s"):format(name, n, tostring(err)))
    end
  end
end

local names = {}
for name in pairs(funcs) do names[#names + 1] = name end
table.sort(names)
-- Every function with 0, 1 and 2 arguments from the pool, exhaustively.
for _, name in ipairs(names) do
  local f = funcs[name]
  try(name, f, {}, 0)
  for i = 1, pool.n do
    try(name, f, {pool[i]}, 1)
    for j = 1, pool.n do try(name, f, {pool[i], pool[j]}, 2) end
  end
end
-- Then random lists of 3 and 4 (seeded).
local seed = 12345
local function rnd(n)
  seed = (seed * 1103515245 + 12345) % 2147483648
  return seed % n + 1
end
for _ = 1, 20000 do
  local name = names[rnd(#names)]
  local n = 2 + rnd(2)
  local args = {}
  for i = 1, n do args[i] = pool[rnd(pool.n)] end
  try(name, funcs[name], args, n)
end
-- Tensor element access with junk keys and values.
for i = 1, pool.n do
  try("t[k]", function(x) return t[x] end, {pool[i]}, 1)
  for j = 1, pool.n do
    try("t[k] = v", function(x, y) t[x] = y end, {pool[i], pool[j]}, 2)
    try("A[k]", function(x, y) return A[{x, y}] end, {pool[i], pool[j]}, 2)
    try("t[{k}]", function(x, y) return t[{x, y}] end, {pool[i], pool[j]}, 2)
  end
end
collectgarbage()
print(("test_fuzz: ok (%d calls, %d errors)"):format(calls, errors))
