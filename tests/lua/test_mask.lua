-- stof.mask: every constructor against an independent Lua predicate, the format (get, tile
-- kinds, stats, text map, expand, svg) against mask:eval element by element, the algebra,
-- from_tensor round trips, fn masks (equal to built-ins, kept alive, failing cleanly), and
-- errors with their kinds.
package.path = arg[0]:match("^(.*/)") .. "?.lua;" .. package.path
local u = require("util")
local stof = require("stof")
local M = stof.mask
assert(require("stof.mask") == M, "require('stof.mask') gives stof.mask")

-- ---------------------------------------------------------------- independent predicates

local function abs(x) return x < 0 and -x or x end
local P = {}
function P.dense() return function() return true end end
function P.causal() return function(_, _, i, j) return j <= i end end
function P.window(l, r) return function(_, _, i, j) return i - l <= j and j <= i + r end end
function P.sliding(w) return function(_, _, i, j) return abs(i - j) <= w end end
function P.causal_sliding(w) return function(_, _, i, j) return i - w < j and j <= i end end
function P.global(g) return function(_, _, i, j) return i < g or j < g end end
function P.longformer(w, g)
  return function(_, _, i, j) return abs(i - j) <= w or i < g or j < g end
end
function P.dilated(w, d)
  return function(_, _, i, j)
    local k = i - j
    return k >= 0 and k % (d + 1) == 0 and k // (d + 1) < w
  end
end
-- lengths: a list (one batch) or a list of lists (per batch element)
function P.document(lengths)
  local per = type(lengths[1]) == "table" and lengths or {lengths}
  local docs = {}
  for b, ls in ipairs(per) do
    local d, pos = {}, 0
    for k, l in ipairs(ls) do
      for x = pos, pos + l - 1 do d[x] = k end
      pos = pos + l
    end
    docs[b - 1] = d
  end
  return function(b, _, i, j)
    local d = docs[#per > 1 and b or 0]
    return d[i] ~= nil and d[i] == d[j]
  end
end

-- ---------------------------------------------------------------- checking a format

-- Checks format f of mask m (B x H instances of Sq x Sk) element by element: f:get equals
-- m:eval (and pred when given); the tile kinds agree with the elements; the stats add up;
-- the text map shows the tile kinds.
local function check_format(m, f, pred, what)
  local Sq, Sk, T = f.Sq, f.Sk, f.T
  local nrow, ncol = (Sq + T - 1) // T, (Sk + T - 1) // T
  assert(f.nrow == nrow and f.ncol == ncol, what .. ": tile counts")
  local st = f.stats
  local vb, vh = m:varies()
  assert(f.nmask == (vb and f.B or 1) * (vh and f.H or 1), what .. ": instances")
  assert(st.nmask == f.nmask)
  assert(st.full + st.partial + st.empty == st.tiles, what .. ": full + partial + empty = tiles")
  assert(st.tiles == nrow * ncol * f.nmask, what .. ": tiles = nrow * ncol * instances")
  assert(st.nentry == st.full + st.partial, what .. ": entries are the non-empty tiles")
  assert(st.nword == st.partial * (T // 8) * (T // 8), what .. ": bitmap words")
  assert(st.bytes > 0 and st.build_ms >= 0 and st.frac16 >= 0 and st.frac16 <= 1)
  local nvalid, nfull, npartial = 0, 0, 0
  for m_ = 0, f.nmask - 1 do
    local b, h = m_ // f.mask_h, m_ % f.mask_h
    local count = {}
    local n_inst = 0
    for i = 0, Sq - 1 do
      local r = i // T
      for j = 0, Sk - 1 do
        local g, e = f:get(b, h, i, j), m:eval(b, h, i, j)
        if g ~= e then
          error(("%s: format %s, eval %s at (b %d, h %d, i %d, j %d)"):format(what,
            tostring(g), tostring(e), b, h, i, j), 2)
        end
        if pred and pred(b, h, i, j) ~= e then
          error(("%s: eval %s, predicate %s at (b %d, h %d, i %d, j %d)"):format(what,
            tostring(e), tostring(pred(b, h, i, j)), b, h, i, j), 2)
        end
        if e then
          local k = r * ncol + j // T
          count[k] = (count[k] or 0) + 1
          n_inst = n_inst + 1
        end
      end
    end
    assert(f:count(b, h) == n_inst, what .. ": count")
    nvalid = nvalid + n_inst
    local map = {}
    for r = 0, nrow - 1 do
      local row = {}
      for c = 0, ncol - 1 do
        local n = count[r * ncol + c] or 0
        local inside = (r + 1) * T <= Sq and (c + 1) * T <= Sk
        local want = n == 0 and "empty" or (inside and n == T * T) and "full" or "partial"
        local got = f:tile(b, h, r, c)
        if got ~= want then
          error(("%s: tile (%d, %d) of (b %d, h %d) is %s, want %s"):format(what, r, c, b, h,
            got, want), 2)
        end
        nfull = nfull + (got == "full" and 1 or 0)
        npartial = npartial + (got == "partial" and 1 or 0)
        row[#row + 1] = got == "full" and "#" or got == "partial" and "+" or "."
      end
      map[#map + 1] = table.concat(row)
    end
    local text = f:map(b, h)
    if f.nmask > 1 then text = text:gsub("^[^\n]*\n", "") end
    if nrow <= 64 and ncol <= 96 then
      assert(text == table.concat(map, "\n"), what .. ": text map\n" .. text)
    end
  end
  assert(st.nvalid == nvalid, what .. ": nvalid")
  assert(st.full == nfull and st.partial == npartial, what .. ": tile counts in stats")
  u.near(st.density, nvalid / (f.nmask * Sq * Sk), 1e-12, what .. ": density")
  local s = tostring(f)
  assert(s:find("density", 1, true) and s:find(tostring(m), 1, true), what .. ": tostring")
  assert(s:find(("%d full, %d partial, %d empty"):format(st.full, st.partial, st.empty), 1, true))
end

-- ---------------------------------------------------------------- constructors

local function doc_lengths(S) -- covers S exactly: several short and a long sequence
  local ls, left = {}, S
  for _, l in ipairs({7, 30, 1, 64, 5}) do
    if left <= l then break end
    ls[#ls + 1] = l
    left = left - l
  end
  ls[#ls + 1] = left
  return ls
end

for _, S in ipairs({100, 257}) do
  local cases = {
    {M.dense(), P.dense()},
    {M.causal(), P.causal()},
    {M.sliding(32), P.sliding(32)},
    {M.sliding(0), P.sliding(0)},
    {M.causal_sliding(32), P.causal_sliding(32)},
    {M.causal_sliding(1), P.causal_sliding(1)},
    {M.longformer(32, 32), P.longformer(32, 32)},
    {M.longformer(5, 70), P.longformer(5, 70)},
    {M.window(3, 17), P.window(3, 17)},
    {M.window(0, 0), P.window(0, 0)},
    {M.global(9), P.global(9)},
    {M.global(0), P.global(0)},
    {M.dilated(4, 2), P.dilated(4, 2)},
    {M.dilated(100, 0), P.dilated(100, 0)},
    {M.dilated(8, 15), P.dilated(8, 15)},
    {M.document(doc_lengths(S)), P.document(doc_lengths(S))},
    {M.document({S // 2}), P.document({S // 2})}, -- positions past the lengths see nothing
    {M.random_blocks(32, 0.3, 7), nil},
    {M.random_blocks(10, 0, 7), P.window(-1, -1)}, -- p = 0: nothing
    {M.random_blocks(10, 1, 7), P.dense()},
    {M.bigbird(32, 32, 32, 0.1, 0), nil},
  }
  for _, name in ipairs(M.suite_names()) do
    local m = M.suite(name, S)
    local pred = ({dense = P.dense(), causal = P.causal(), sliding = P.sliding(32),
                   causal_sliding = P.causal_sliding(32), longformer = P.longformer(32, 32)})[name]
    cases[#cases + 1] = {m, pred}
  end
  for _, c in ipairs(cases) do
    local m, pred = c[1], c[2]
    check_format(m, m:format(S), pred, ("%s at S = %d"):format(tostring(m), S))
  end
  -- other tile sizes, and Sq != Sk
  for _, T in ipairs({16, 32, 48, 128}) do
    for _, c in ipairs({cases[2], cases[7], cases[13], cases[16]}) do
      check_format(c[1], c[1]:format(S, {tile = T}), c[2],
                   ("%s at S = %d, tile %d"):format(tostring(c[1]), S, T))
    end
  end
  local lf = M.longformer(8, 3)
  check_format(lf, lf:format({S, 77}, {tile = 32}), P.longformer(8, 3), "longformer {S, 77}")
  check_format(lf, lf:format({40, S}), P.longformer(8, 3), "longformer {40, S}")
end

-- The suite's document mask partitions [0, S) into contiguous sequences.
do
  local S = 257
  local d = M.suite("document", S)
  for i = 0, S - 1 do
    assert(d:eval(i, i), "every position is in a sequence")
    if i > 0 and not d:eval(i, i - 1) then
      for j = 0, i - 1 do assert(not d:eval(i, j)) end -- a sequence starts at i
    end
  end
  assert(tostring(d):match("^document%("))
end

-- random_blocks: constant on blocks, reproducible, seeded.
do
  local S, b = 257, 16
  local r1, r2, r3 = M.random_blocks(b, 0.4, 3), M.random_blocks(b, 0.4, 3), M.random_blocks(b, 0.4, 4)
  local kept, differ = 0, false
  for i = 0, S - 1 do
    for j = 0, S - 1 do
      local v = r1:eval(i, j)
      assert(v == r1:eval(i // b * b, j // b * b), "constant on a block")
      assert(v == r2:eval(i, j), "same seed, same mask")
      if v ~= r3:eval(i, j) then differ = true end
      if v then kept = kept + 1 end
    end
  end
  assert(differ, "another seed, another mask")
  assert(kept > 0.2 * S * S and kept < 0.6 * S * S, "about p of the blocks: " .. kept)
  assert(tostring(M.random_blocks(4, 0.5)) == "random_blocks(4, 0.5, 0)", "seed defaults to 0")
  assert(tostring(M.bigbird(1, 2, 3, 0.25, 9)) == "bigbird(1, 2, 3, 0.25, 9)")
end

-- document per batch element: a list of lists
do
  local lens = {{10, 20, 5}, {35}, {1, 1, 33}}
  local d = M.document(lens)
  local vb, vh = d:varies()
  assert(vb and not vh, "a batched document mask varies with b only")
  local f = d:format(35, {batch = 3, heads = 2, tile = 16})
  assert(f.nmask == 3 and f.mask_b == 3 and f.mask_h == 1)
  check_format(d, f, P.document(lens), "document per batch")
  assert(tostring(d) == "document_batched({10, 20, 5}, {35}, {1, 1, 33})", tostring(d))
  assert(tostring(M.document({{4, 5}})) == "document(4, 5)", "one list of lists is one batch")
  u.raises(function() d:format(35) end, "ValueError", "3 batches")
end

-- ---------------------------------------------------------------- algebra

do
  local function both(m, p) return {m, p} end
  local causal, sl, gl, win = both(M.causal(), P.causal()), both(M.sliding(5), P.sliding(5)),
    both(M.global(3), P.global(3)), both(M.window(0, 9), P.window(0, 9))
  local function U(a, b) return {a[1] | b[1], function(...) return a[2](...) or b[2](...) end} end
  local function I(a, b) return {a[1] & b[1], function(...) return a[2](...) and b[2](...) end} end
  local function D(a, b) return {a[1] - b[1], function(...) return a[2](...) and not b[2](...) end} end
  local exprs = {
    {U(causal, sl), "causal() | sliding(5)"},
    {I(causal, sl), "causal() & sliding(5)"},
    {D(causal, sl), "causal() - sliding(5)"},
    {D(both(M.dense(), P.dense()), causal), "dense() - causal()"},
    {U(D(causal, sl), gl), "(causal() - sliding(5)) | global(3)"},
    {I(U(sl, gl), win), "(sliding(5) | global(3)) & window(0, 9)"},
    {D(causal, D(sl, gl)), "causal() - (sliding(5) - global(3))"},
    {U(U(causal, sl), gl), "causal() | sliding(5) | global(3)"},
  }
  for _, S in ipairs({100, 257}) do
    for _, e in ipairs(exprs) do
      local m, pred, desc = e[1][1], e[1][2], e[2]
      assert(tostring(m) == desc, tostring(m) .. " vs " .. desc)
      check_format(m, m:format(S, {tile = 32}), pred, desc .. " at S = " .. S)
    end
  end
  -- operands are copied: closing one leaves the combination intact
  local a, b = M.causal(), M.global(2)
  local ab = a | b
  a:close()
  b:close()
  assert(ab:eval(0, 1) and ab:eval(5, 1) and not ab:eval(5, 6))
end

-- ---------------------------------------------------------------- from_tensor

do
  for _, S in ipairs({100, 257}) do
    for _, name in ipairs({"longformer", "bigbird", "document", "causal"}) do
      local m = M.suite(name, S)
      local f = m:format(S)
      local t = f:expand()
      assert(t:dtype() == "bool" and t:shape()[1] == S and t:shape()[2] == S)
      assert(t[{S - 1, 0}] == f:get(S - 1, 0) and t[{0, S - 1}] == f:get(0, S - 1))
      for _, src in ipairs({t, t:astype("int32")}) do
        local m2 = M.from_tensor(src)
        assert(tostring(m2):match("^from_tensor%(" .. S .. "x" .. S .. ", #"), tostring(m2))
        local f2 = m2:format(S)
        local s1, s2 = f.stats, f2.stats
        assert(s1.nvalid == s2.nvalid and s1.full == s2.full and s1.partial == s2.partial and
               s1.empty == s2.empty, "from_tensor round trip: stats of " .. name)
        check_format(m2, f2, function(_, _, i, j) return m:eval(i, j) end,
                     "from_tensor(" .. name .. ") at S = " .. S)
      end
    end
  end
  -- [B, H, S, S]: per batch element and head; a dim of 1 broadcasts
  local S = 70
  local t4 = stof.zeros({2, 3, S, S}, "bool")
  local pred = function(b, h, i, j) return (i + j + b + 2 * h) % 5 == 0 or j == i end
  for b = 0, 1 do for h = 0, 2 do for i = 0, S - 1 do for j = 0, S - 1 do
    if pred(b, h, i, j) then t4[{b, h, i, j}] = true end
  end end end end
  local m4 = M.from_tensor(t4)
  check_format(m4, m4:format(S, {batch = 2, heads = 3, tile = 32}), pred, "from_tensor 4-D")
  local t1 = stof.zeros({1, 3, S, S}, "int64")
  for h = 0, 2 do for i = 0, S - 1 do t1[{0, h, i, (i * (h + 1)) % S}] = 1 end end
  local m1 = M.from_tensor(t1)
  local vb, vh = m1:varies()
  assert(not vb and vh)
  check_format(m1, m1:format(S, {batch = 4, heads = 3}),
               function(_, h, i, j) return j == (i * (h + 1)) % S end, "from_tensor [1, H, S, S]")
  -- errors
  u.raises(function() M.from_tensor(stof.zeros({0, 4}, "bool")) end, "ShapeError", "empty tensor")
  u.raises(function() M.from_tensor(stof.zeros({2, 4, 4}, "bool")) end, "ShapeError", "rank 3")
  u.raises(function() M.from_tensor(stof.zeros({4, 4}, "float32")) end, "TypeError", "float32")
  u.raises(function() M.from_tensor({{1, 0}, {0, 1}}) end, "TypeError", "stof.Tensor expected")
  u.raises(function() m1:format(S + 1) end, "ValueError", "70 x 70")
  u.raises(function() m4:format(S, {batch = 3, heads = 3}) end, "ValueError", "B = 2")
end

-- ---------------------------------------------------------------- fn masks

do
  local nocare = {varies_b = false, varies_h = false}
  local fc = M.fn(function(b, h, i, j) return j <= i end, nocare)
  assert(tostring(fc):match("^fn%(test_mask%.lua:%d+%)$"), tostring(fc))
  assert(tostring(M.fn(function() return true end, {name = "everything"})) == "fn(everything)")
  local vb, vh = fc:varies()
  assert(not vb and not vh)
  vb, vh = M.fn(function() return true end):varies()
  assert(vb and vh, "fn masks vary with b and h unless told otherwise")
  for _, S in ipairs({100, 257}) do
    for _, T in ipairs({16, 64}) do
      local f1, f2 = fc:format(S, {tile = T}), M.causal():format(S, {tile = T})
      local s1, s2 = f1.stats, f2.stats
      for _, k in ipairs({"nvalid", "full", "partial", "empty", "nentry", "nword", "bytes"}) do
        assert(s1[k] == s2[k], ("fn(j <= i) vs causal(): %s %s vs %s"):format(k, s1[k], s2[k]))
      end
      check_format(fc, f1, P.causal(), "fn(j <= i) at S = " .. S)
    end
  end
  local fw = M.fn(function(_, _, i, j) return i - 2 <= j and j <= i + 7 end, nocare)
  local fwf, wf = fw:format(257, {tile = 32}), M.window(2, 7):format(257, {tile = 32})
  for i = 0, 256 do for j = 0, 256 do assert(fwf:get(i, j) == wf:get(i, j)) end end

  -- b and h reach the predicate
  local fbh = M.fn(function(b, h, i, j) return (i + j) % (b + h + 2) == 0 end)
  check_format(fbh, fbh:format(40, {batch = 2, heads = 3, tile = 16}),
               function(b, h, i, j) return (i + j) % (b + h + 2) == 0 end, "fn(b, h)")

  -- fn masks combine, and stay alive through the masks and formats made from them
  local combined = (function()
    local diag = M.fn(function(_, _, i, j) return i == j end, nocare)
    return (diag | M.global(2)) - M.window(0, 0) | M.fn(function(_, _, i, j) return j == 0 end, nocare)
  end)()
  local fmt = (function() return M.fn(function(_, _, i, j) return j == i + 1 end, nocare):format(64) end)()
  collectgarbage()
  collectgarbage()
  check_format(combined, combined:format(100), function(_, _, i, j)
    return ((i == j or i < 2 or j < 2) and i ~= j) or j == 0
  end, "combined fn masks after a collection")
  assert(fmt:get(3, 4) and not fmt:get(4, 3) and tostring(fmt.mask):match("^fn%("))

  -- a predicate that evaluates masks itself, and one run in a coroutine
  local outer = M.fn(function(b, h, i, j) return fc:eval(b, h, i, j) and not fw:eval(b, h, i, j) end, nocare)
  check_format(outer, outer:format(100, {tile = 32}), function(_, _, i, j)
    return j <= i and not (i - 2 <= j and j <= i + 7)
  end, "nested predicates")
  local co = coroutine.wrap(function() return fc:format(100).stats.nvalid end)
  assert(co() == 5050)

  -- failures: a clean error with the predicate's message, and nothing stale afterwards
  local bad = M.fn(function(_, _, i, j)
    if i == 3 and j == 2 then error("no attention at (3, 2)") end
    return true
  end, nocare)
  local err = u.raises(function() bad:format(64) end, "ValueError", "Mask:format", "predicate failed",
                       "no attention at (3, 2)", "i 3, j 2", "fn(test_mask.lua:")
  assert(err:find("test_mask.lua:%d+: no attention"), "the predicate's own file:line: " .. err)
  u.raises(function() bad:eval(3, 2) end, "ValueError", "Mask:eval", "no attention at (3, 2)")
  assert(bad:eval(0, 0) == true)
  u.raises(function() (M.causal() & bad):format(100, {tile = 16}) end, "no attention at (3, 2)")
  -- where the rest of a union covers a tile, the predicate is not asked: no error
  assert((M.global(100) | bad):format(100).stats.nvalid == 100 * 100)
  local nonbool = M.fn(function() return 1 end)
  u.raises(function() nonbool:format(16) end, "ValueError", "returned number, a boolean was expected")
  u.raises(function() M.fn(function() end):eval(0, 0) end, "returned nil")
  u.raises(function() M.fn(function() error({}) end):eval(0, 0) end, "error object is a table")
  local inner_bad = M.fn(function() return bad:eval(3, 2) end, nocare)
  u.raises(function() inner_bad:format(64) end, "no attention at (3, 2)")
  local selfclose
  selfclose = M.fn(function() selfclose:close() return true end)
  u.raises(function() selfclose:format(16) end, "predicate failed", "is being evaluated")
  assert(tostring(selfclose):match("^fn%("), "still open: the close was refused")
  u.raises(function() selfclose:eval(1, 1) end, "is being evaluated")
  local rec
  rec = M.fn(function(b, h, i, j) return rec:eval(b, h, i, j) end)
  u.raises(function() rec:eval(0, 0) end, "ValueError", "predicate failed") -- endless recursion
  check_format(fc, fc:format(100), P.causal(), "fn after failures")
  u.raises(function() M.fn(42) end, "TypeError", "predicate function")
  u.raises(function() M.fn(function() return true end, {nme = "x"}) end, "ValueError", "unknown option 'nme'")
  u.raises(function() M.fn(function() return true end, {varies_b = 1}) end, "TypeError", "varies_b")
end

-- ---------------------------------------------------------------- format extras

do
  local m = M.longformer(32, 32)
  local f = m:format(1024, {tile = 64})
  local s = tostring(f)
  local lines = {}
  for l in s:gmatch("[^\n]+") do lines[#lines + 1] = l end
  assert(#lines == 2 + 16, "header (2 lines) and 16 map rows:\n" .. s)
  assert(lines[1]:find("longformer(32, 32)", 1, true) and lines[2]:find("density 0.1220", 1, true))
  assert(f.Sq == 1024 and f.Sk == 1024 and f.T == 64 and f.B == 1 and f.H == 1)
  assert(f.description == "longformer(32, 32)" and f.mask == m)
  -- big maps are cut
  local big = M.causal():format(100000, {tile = 128})
  local bs = tostring(big)
  assert(bs:find("more tile rows", 1, true) and bs:find("more)", 1, true))
  assert(#bs < 20000)
  -- expand of another instance; svg
  local d = M.document({{3, 4}, {7}})
  local fd = d:format(7, {batch = 2, tile = 16})
  local t1 = fd:expand(1, 0)
  for i = 0, 6 do for j = 0, 6 do assert(t1[{i, j}] == true) end end
  local path = os.tmpname()
  f:svg(path)
  local fh = assert(io.open(path))
  local svg = fh:read("a")
  fh:close()
  os.remove(path)
  assert(svg:find("<svg", 1, true) and svg:find("longformer(32, 32)", 1, true))
  u.raises(function() f:svg("/nonexistent-dir/x.svg") end, "IOError", "/nonexistent-dir/x.svg")
  u.raises(function() f:expand(1, 0) end, "IndexError", "outside B x H")
  u.raises(function() f:tile(0, 0, 16, 0) end, "IndexError", "outside 16 x 16")
  assert(f:get(-1, 0) == false and f:get(0, 5000) == false, "get outside the mask is false")
  -- close
  f:close()
  f:close()
  assert(tostring(f) == "stof.MaskFormat (closed)")
  u.raises(function() f:get(0, 0) end, "ValueError", "closed")
  local c = M.causal()
  c:close()
  assert(tostring(c) == "stof.Mask (closed)")
  u.raises(function() c:eval(0, 0) end, "ValueError", "closed")
  u.raises(function() return c | M.dense() end, "ValueError", "closed")
  do local tbc <close> = M.dense() end
end

-- ---------------------------------------------------------------- bad arguments

u.raises(function() M.window(-1, 0) end, "ValueError", "window", "negative")
u.raises(function() M.window(1) end, "TypeError", "stof.mask.window", "r must be an integer")
u.raises(function() M.sliding(2.5) end, "TypeError", "w must be an integer")
u.raises(function() M.sliding("8") end, "TypeError", "got string")
u.raises(function() M.causal_sliding(0) end, "ValueError", "causal_sliding", ">= 1")
u.raises(function() M.global(-3) end, "ValueError", "global")
u.raises(function() M.longformer(4, -1) end, "ValueError", "longformer", "g = -1")
u.raises(function() M.random_blocks(0, 0.5) end, "ValueError", "block size")
u.raises(function() M.random_blocks(8, 1.5) end, "ValueError", "probability p = 1.5")
u.raises(function() M.random_blocks(8, 0 / 0) end, "ValueError", "probability")
u.raises(function() M.random_blocks(8, "x") end, "TypeError", "p must be a number")
u.raises(function() M.random_blocks(8, 0.5, -1) end, "ValueError", "seed")
u.raises(function() M.bigbird(3, 3, 8, -0.1, 0) end, "ValueError", "bigbird", "probability")
u.raises(function() M.dilated(0, 1) end, "ValueError", "dilated", "w = 0")
u.raises(function() M.dilated(2, -1) end, "ValueError", "dilated", "d = -1")
u.raises(function() M.document({}) end, "ValueError", "empty")
u.raises(function() M.document({3, 0}) end, "ValueError", "lengths[1] = 0")
u.raises(function() M.document({3, "a"}) end, "TypeError", "length 2 must be an integer")
u.raises(function() M.document({3, 2.5}) end, "TypeError", "length 2 must be an integer, got 2.5")
u.raises(function() M.document({{3}, 4}) end, "TypeError", "batch 1")
u.raises(function() M.document({{3}, {}}) end, "ValueError", "batch 1")
u.raises(function() M.document(5) end, "TypeError", "list of lengths")
u.raises(function() M.suite("nope", 64) end, "NotFoundError", "nope")
u.raises(function() M.suite("causal", 0) end, "ValueError", "S = 0")
u.raises(function() M.suite(3, 64) end, "TypeError", "suite name")
u.raises(function() return M.causal() | 3 end, "TypeError", "right operand", "got integer")
u.raises(function() return "x" & M.causal() end, "TypeError", "left operand", "got string")
u.raises(function() return M.causal() - {} end, "TypeError", "stof.Mask")
u.raises(function() M.causal():eval("a", 0) end, "TypeError", "i must be an integer")
local c = M.causal()
u.raises(function() c:format(100, {tile = 24}) end, "ValueError", "tile = 24", "multiple of 16")
u.raises(function() c:format(100, {tile = 256}) end, "ValueError", "tile = 256")
u.raises(function() c:format(100, {tile = 8}) end, "ValueError", "tile = 8")
u.raises(function() c:format(100, {tile = "64"}) end, "TypeError", "option tile must be an integer")
u.raises(function() c:format(100, {tile = 64.5}) end, "TypeError", "option tile")
u.raises(function() c:format(100, {tiles = 64}) end, "ValueError", "unknown option 'tiles'")
u.raises(function() c:format(0) end, "ValueError", "must be >= 1")
u.raises(function() c:format({10, -2}) end, "ValueError", "Sk = -2")
u.raises(function() c:format({10}) end, "TypeError", "{Sq, Sk} expected")
u.raises(function() c:format("100") end, "TypeError", "sequence length")
u.raises(function() c:format(100, 64) end, "TypeError", "options table")
u.raises(function() c:format(100, {batch = 0}) end, "ValueError", "batch = 0")
u.raises(function() c.format(42, 100) end, "TypeError", "stof.Mask expected")

print("test_mask: ok")
