-- stof.mask at its limits (issue 12): parameters past 2^40 refused when the mask is built,
-- masks at the limits formatted exactly, format sizes checked before anything is built,
-- combinations of many masks in linear memory and time, from_tensor of [Sq, Sk] masks.
package.path = arg[0]:match("^(.*/)") .. "?.lua;" .. package.path
local u = require("util")
local stof = require("stof")
local M = stof.mask
local maxi, lim = math.maxinteger, 1 << 40

-- the format against eval, element by element
local function check(m, Sq, Sk, what)
  local f = m:format({Sq, Sk}, {tile = 16})
  local n = 0
  for i = 0, Sq - 1 do
    for j = 0, Sk - 1 do
      local want = m:eval(i, j)
      if want then n = n + 1 end
      assert(f:get(i, j) == want, ("%s: (%d, %d)"):format(what, i, j))
    end
  end
  assert(f.stats.nvalid == n, what)
  return f
end

-- parameters past the limit: refused by the constructor, naming it and the parameter
u.raises(function() M.dilated(3, maxi - 1) end, "ValueError",
         "dilated: d = 9223372036854775806 is too large (at most 2^40")
u.raises(function() M.dilated(2, maxi) end, "ValueError", "dilated: d = ")
u.raises(function() M.window(5, maxi) end, "ValueError", "window: r = 9223372036854775807 is too large")
u.raises(function() M.document({1, maxi, 5}) end, "ValueError", "document: lengths[1] = 9223372036854775807")
u.raises(function() M.global(lim + 1) end, "ValueError", "global: g = 1099511627777 is too large")
u.raises(function() M.suite("document", maxi - 1) end, "ValueError", "document: S = 9223372036854775806")

-- at the limit: exact, and window(5, 2^40) | global(1) is window(5, 100000) | global(1)
local a, b = M.window(5, lim) | M.global(1), M.window(5, 100000) | M.global(1)
local fa, fb = check(a, 150, 150, "window at the limit"), check(b, 150, 150, "window")
assert(fa.stats.nvalid == fb.stats.nvalid and fa.nentry == fb.nentry and fa.nword == fb.nword)
check(M.dilated(3, lim), 100, 100, "dilated(3, 2^40)")
check(M.dilated(lim, lim), 60, 70, "dilated(2^40, 2^40)")
check(M.document({1, 1 << 39, 5}), 40, 40, "document with a long sequence")

-- format sizes: checked before anything is built, in well under a second
local t0 = os.clock()
u.raises(function() M.dense():format({1, maxi - 5}) end, "ValueError",
         "Sk = 9223372036854775802 is too large (at most 2^40")
u.raises(function() M.dense():format(1000000) end, "UnsupportedError",
         "15625 x 15625 tiles of 64 x 64 is 2.44e+08 tiles, more than a format may have")
u.raises(function() M.dense():format(1000000000) end, "UnsupportedError", "more than a format may have")
local fn = M.fn(function(_, _, i, j) return j <= i end, {name = "lower", varies_b = false, varies_h = false})
u.raises(function() fn:format(1 << 31) end, "UnsupportedError", "more than a format may have")
u.raises(function() fn:format(2 ^ 31) end, "UnsupportedError", "more than a format may have")
u.raises(function() fn:format(10000) end, "UnsupportedError",
         "mask fn(lower) calls a predicate for each element: 1 instance x 10000 x 10000 = 1e+08 calls")
assert(os.clock() - t0 < 1, "the size checks come first")

-- many combinations: linear memory and time, a short description, the right mask
collectgarbage()
local kb0 = collectgarbage("count")
t0 = os.clock()
local m = M.global(0)
for k = 1, 5000 do m = m | M.global(k % 7) end
local dt = os.clock() - t0
assert(dt < 5, ("5000 unions took %.2f s"):format(dt))
assert(#tostring(m) <= 256 and tostring(m):find(" ... #", 1, true), tostring(m))
for i = 0, 9 do for j = 0, 9 do assert(m:eval(i, j) == (i < 6 or j < 6)) end end
check(m, 40, 30, "5000 unions")
assert(collectgarbage("count") - kb0 < 5000 * 4, "Lua-side memory linear in N")
u.raises(function()
  local d = M.causal()
  for _ = 1, 8192 do d = d - M.global(1) end
end, "ValueError", "difference: the result would be 8192 combinations deep (at most 8191)")

-- from_tensor takes [Sq, Sk] (what f:expand() gives) and [B, H, Sq, Sk]
local c = M.causal() & M.sliding(9)
local e = c:format({30, 50}):expand()
local back = M.from_tensor(e)
assert(tostring(back):find("from_tensor(30x50, #", 1, true), tostring(back))
check(back, 30, 50, "from_tensor of an expansion")
for i = 0, 29 do for j = 0, 49 do assert(back:eval(i, j) == c:eval(i, j)) end end
u.raises(function() back:format(30) end, "ValueError", "is 30 x 50, the format 30 x 30")
print("test_mask_limits: ok")
