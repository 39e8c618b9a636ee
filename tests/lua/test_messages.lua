-- Messages of user errors (issue 12): every binding's argument error says its kind, the
-- function and the argument ("TypeError: Db:best: bad argument #3 (...)"), never Lua's
-- "bad argument #3 to '?'"; option tables refuse unknown keys; the database refuses strings
-- with NUL bytes and reads lists as stored; stof.nn's errors point at the caller's line;
-- `stof db show` says why a file cannot be read; one rule for an empty mask (zeros) on the
-- CPU through stof.attention and through the runtime's intrinsic.
package.path = debug.getinfo(1, "S").source:match("^@(.*/)") .. "?.lua;" .. package.path
local U = require("util")
local stof = require("stof")
local te, nn, M = stof.te, stof.nn, stof.mask

-- ---------------------------------------------------------------- argument errors

local path = os.tmpname()
os.remove(path)
local db <close> = stof.db.open(path)
U.raises(function() return db:best("w") end, "TypeError: Db:best: bad argument #3 (device string expected, got no value)")
U.raises(function() return db:best(5, "cpu") end, "TypeError: Db:best: bad argument #2 (workload string expected, got integer)")
U.raises(function() return db.close(5) end, "TypeError: Db:close: bad argument #1 (stof.Db expected, got integer)")
U.raises(function() return getmetatable(db).__tostring(5) end, "TypeError: Db:__tostring: bad argument #1")
U.raises(function() return getmetatable(db).__len({}) end, "TypeError: Db:__len: bad argument #1")
U.raises(function() return stof.db.open(5) end, "TypeError: stof.db.open: bad argument #1")

U.raises(function() return stof.attention_plan(M.causal(), "x") end,
  "TypeError: stof.attention_plan: bad argument #2 (table {B=, H=, Hkv=, S= | Sq=, Sk=, D=, dtype=} expected, got string)")

-- schedule handles' metamethods
local A = te.placeholder({4, 4}, "float32", "A")
local Cc = te.compute({4, 4}, function(i, j) return A[{i, j}] * 2 end, "C")
local s = stof.schedule(Cc)
local blk = s:get_block("C")
local loop = s:get_loops(blk)[1]
U.raises(function() return getmetatable(blk).__tostring(5) end, "TypeError: Block:__tostring: bad argument #1 (stof.Block expected, got integer)")
U.raises(function() return getmetatable(blk).__index(5, "name") end, "TypeError: Block:__index: bad argument #1")
U.raises(function() return getmetatable(loop).__tostring(5) end, "TypeError: Loop:__tostring: bad argument #1 (stof.Loop expected")
U.raises(function() return getmetatable(loop).__index(5, "name") end, "TypeError: Loop:__index: bad argument #1")
U.raises(function() return getmetatable(s).__gc(5) end, "TypeError: Schedule:close: bad argument #1 (stof.Schedule expected")
local f = stof.build(s, {A, Cc}, {target = "c"})
U.raises(function() return getmetatable(f).__tostring(5) end, "TypeError: Func:__tostring: bad argument #1 (stof.Func expected")
U.raises(function() return getmetatable(f).__gc(5) end, "TypeError: Func:close: bad argument #1")

-- the runtime's plan: a key that is not a string is no field (nil), not an error
local p = stof.plan(Cc, {target = "c"})
assert(p[true] == nil and p[5] == nil)
U.raises(function() return getmetatable(p).__tostring(5) end, "TypeError: Plan:__tostring: bad argument #1 (stof.Plan expected")
U.raises(function() return getmetatable(p).__gc(5) end, "TypeError: Plan:close: bad argument #1")

-- ---------------------------------------------------------------- the database's strings and lists

U.raises(function() return db:append{workload = "bert\0-large", device = "cpu", times_ms = {1}} end,
  "ValueError: Db:append: field workload holds a NUL byte at byte 5")
U.raises(function() return db:append{workload = "w", device = "c\0pu", times_ms = {1}} end,
  "ValueError: Db:append: field device holds a NUL byte")
U.raises(function() return db:append{workload = "w", device = "cpu", scheme = "0\0", times_ms = {1}} end,
  "ValueError: Db:append: field scheme holds a NUL byte")
U.raises(function() return db:append{workload = "w", device = "cpu", status = "ERR_CUDA", message = "a\0b"} end,
  "ValueError: Db:append: field message holds a NUL byte")
U.raises(function() return db:append{workload = "w", device = "cpu", knobs = {["t\0x"] = 1}, times_ms = {1}} end,
  "ValueError: Db:append: a knob name holds a NUL byte")
U.raises(function() return db:best("bert\0-large", "cpu") end, "ValueError: Db:best: argument #2 (workload string) holds a NUL byte")
U.raises(function() return stof.db.open(path .. "\0x") end, "ValueError: stof.db.open: argument #1")
-- a list's length is what it holds, not what __len says
local huge = setmetatable({}, {__len = function() return math.maxinteger end})
U.raises(function() return db:append{workload = "w", device = "cpu", times_ms = huge} end,
  "TypeError: Db:append: field times_ms must be a plain list of numbers")
U.raises(function() return db:append{workload = "w", device = "cpu", status = "ERR_CUDA", times_ms = huge} end,
  "TypeError: Db:append: field times_ms must be a plain list")
local long = {}
for i = 1, 1000001 do long[i] = 1.0 end
U.raises(function() return db:append{workload = "w", device = "cpu", times_ms = long} end,
  "ValueError: Db:append: field times_ms has 1000001 entries, at most 1000000")
long = nil
assert(#db == 0) -- nothing was stored
db:append{workload = "bert", device = "cpu", times_ms = {1}}
assert(db:get(1).workload == "bert" and #db == 1)

-- ---------------------------------------------------------------- attention options

local q = stof.rand({1, 2, 40, 8}, "float32", 1)
local k = stof.rand({1, 2, 40, 8}, "float32", 2)
local v = stof.rand({1, 2, 40, 8}, "float32", 3)
U.raises(function() return stof.attention(q, k, v, M.causal(), {tiel = 64}) end,
  'ValueError: stof.attention: unknown option "tiel" (known: kernel, tile, warps, stages, portable, scale')
U.raises(function() return stof.attention(q, k, v, M.causal(), {64}) end, "ValueError: stof.attention: unknown option [integer]")
U.raises(function() return stof.attention_plan(M.causal(), {S = 128}, {tiel = 64}) end,
  'ValueError: stof.attention_plan: unknown option "tiel"')
U.raises(function() return stof.attention_plan(M.causal(), {S = 128, d = 64}) end,
  'ValueError: stof.attention_plan: unknown dims key "d" (known: B, H, Hkv, S, Sq, Sk, D, dtype)')
U.raises(function() return stof.explain(M.causal(), {S = 128}, {tiel = 64}) end,
  'ValueError: stof.explain: unknown option "tiel" (known: kernel, tile, warps, stages, portable, scale',
  ", gpu, mod, softcap, buckets, max_distance, bidirectional)")
U.raises(function() return stof.explain(M.causal(), {S = 128, s = 3}) end, 'ValueError: stof.explain: unknown dims key "s"')
-- the CPU path takes the GPU plans' tiles
U.raises(function() return stof.attention(q, k, v, M.causal(), {tile = 48}) end,
  "ValueError: stof.attention: tile 48 (32, 64 or 128, on the CPU as on the GPU)")
U.raises(function() return stof.attention(q, k, v, M.causal(), {tile = 16}) end, "tile 16 (32, 64 or 128")
U.raises(function() return stof.attention(q, k, v, M.causal(), {tile = 32, kernel = "row"}) end,
  "UnsupportedError: stof.attention: tile 32 is the block-wise kernel's (row-wise asked for; refused on the GPU too)")
assert(stof.rel_l2(stof.attention(q, k, v, M.causal(), {tile = 128}), stof.attention(q, k, v, M.causal())) < 1e-6)
-- the selector refuses what the GPU plan refuses, with the plan's message
U.raises(function() return stof.explain(M.causal(), {S = 128, D = 96}) end,
  "UnsupportedError: stof.explain: attention: head dim 96 is not supported (64 or 128)")
U.raises(function() return stof.explain(M.causal(), {S = 128, D = 96}, {gpu = "h100"}) end, "head dim 96 is not supported")
assert(stof.explain(M.causal(), {S = 128, D = 128}))

-- ---------------------------------------------------------------- an empty mask gives zeros

local empty = M.causal() - M.causal()
local function all_zero(t)
  local shape = t:shape()
  for b = 0, shape[1] - 1 do
    for h = 0, shape[2] - 1 do
      for i = 0, shape[3] - 1 do
        for x = 0, shape[4] - 1 do
          local e = t[{b, h, i, x}]
          if e ~= 0 then return false end
        end
      end
    end
  end
  return true
end
assert(all_zero(stof.attention(q, k, v, empty)), "stof.attention on the CPU: an empty mask gives zeros")
assert(all_zero(stof.attention(q, k, v, empty, {tile = 128})))
local Q = te.placeholder({1, 2, 40, 8}, "float32", "Q")
local K = te.placeholder({1, 2, 40, 8}, "float32", "K")
local V = te.placeholder({1, 2, 40, 8}, "float32", "V")
local O = te.attention(Q, K, V, empty)
assert(all_zero(stof.eval(O, {[Q] = q, [K] = k, [V] = v})), "te.attention + stof.eval: zeros")
local P = stof.plan(O, {target = "c"})
assert(all_zero(P:run{[Q] = q, [K] = k, [V] = v}), "the runtime (CPU): zeros")

-- ---------------------------------------------------------------- stof.nn: the caller's line
-- (not in a tail call: `return nn.linear(...)` leaves no caller's frame to point at)

local x = te.placeholder({2, 3, 8}, "float32", "x")
local w = te.placeholder({4, 5}, "float32", "w")
local g8 = te.placeholder({8}, "float32", "g")
local g4 = te.placeholder({4}, "float32", "g4")
U.raises(function() local r = nn.linear(x, w); return r end, "nn.linear: x [2, 3, 8] and w [4, 5] ([K, N]): x's last dim 8 is not w's first dim 4")
U.raises(function() local r = nn.linear(x, te.placeholder({5, 8}, "float32", "wt"), nil, {transposed = true, name = 3}); return r end,
  "nn.linear: name must be a string")
U.raises(function() local r = nn.linear(x, te.placeholder({8, 4}, "float32", "w2"), g8); return r end, "nn.linear: bias has shape [8], [4] expected")
U.raises(function() local r = nn.layer_norm(x, g4, g4, 1e-5); return r end, "nn.layer_norm: gamma has shape [4], [8] expected")
U.raises(function() local r = nn.layer_norm(x, g8, nil, 1e-5); return r end, "nn.layer_norm: beta is missing")
U.raises(function() local r = nn.rms_norm(x, g8, -1); return r end, "nn.rms_norm: eps -1 is negative")
U.raises(function() local r = nn.softmax(5); return r end, "nn.softmax: x must be a te tensor")
U.raises(function() local r = nn.gelu("x"); return r end, "nn.gelu: x must be a te tensor")
U.raises(function() local r = nn.add(x, g8); return r end, "nn.add: shapes [2, 3, 8] and [8] differ")
U.raises(function() local r = nn.split_heads(x, 3); return r end, "nn.split_heads: the last dim 8 of x is not a multiple of 3 heads")
U.raises(function() local r = nn.merge_heads(x); return r end, "nn.merge_heads: x has shape [2, 3, 8], [B, H, S, D] expected")
U.raises(function() local r = nn.embedding(x, w); return r end, "nn.embedding: ids has dtype float32")
U.raises(function() local r = nn.position_embedding(w, 1, 9); return r end, "nn.position_embedding: positions up to 8")
local qh = te.placeholder({1, 2, 40, 8}, "float32", "qh")
U.raises(function() local r = nn.attention(qh, qh, qh, 5); return r end, "nn.attention: mask must be a stof.mask value")
-- an error of the binding nn.attention calls also points at the caller
U.raises(function() local r = nn.attention(qh, qh, qh, M.causal(), {scale = -1}); return r end, "ValueError: te.attention", "scale -1 is negative")
-- a layer called from a helper of the caller's file points at the helper's line
local function helper() local r = nn.softmax({}); return r end
U.raises(helper, "nn.softmax: x must be a te tensor")

-- ---------------------------------------------------------------- stof db show: why a file cannot be read

local exe = arg and arg[-1] == "run" and arg[-2]
if exe then
  local function show(file)
    local pipe = io.popen(("'%s' db show '%s' 2>&1"):format(exe, file))
    local out = pipe:read("a")
    pipe:close()
    return out
  end
  -- a long evaluation of an fn mask's predicate says where it is (every STOF_PROGRESS_S
  -- seconds, 10 by default; the clock is read every 2^20 calls): 1100 x 1100 calls
  local function mask_show(env)
    local pipe = io.popen(("%s '%s' mask show 'fn(function(b, h, i, j) return j <= i end)' --seq 1100 2>&1 >/dev/null")
      :format(env, exe))
    local text = pipe:read("a")
    pipe:close()
    return text
  end
  local said = mask_show("STOF_PROGRESS_S=0")
  assert(said:find("stof: evaluating an fn mask's predicate: 1048576 calls in ", 1, true), said)
  assert(said:find("now at %(b 0, h 0, i %d+%)\n") and select(2, said:gsub("evaluating", "")) == 1, said)
  assert(not mask_show(""):find("evaluating", 1, true), "no progress line within 10 s")
  local missing = path .. ".missing"
  local out = show(missing)
  assert(out:find("no such file (stof db show does not create one)", 1, true), out)
  -- a path through a regular file: not a directory, not "no such file"
  out = show(path .. "/x.jsonl")
  assert(out:find("cannot read " .. path .. "/x.jsonl: Not a directory", 1, true), out)
  -- a file without read permission (root reads it anyway: then the check is moot)
  local locked = path .. ".locked"
  local fl = assert(io.open(locked, "w"))
  fl:write("\n")
  fl:close()
  assert(os.execute("chmod 000 '" .. locked .. "'"))
  local readable = io.open(locked, "r")
  if readable then
    readable:close()
    print("test_messages: running as root, the chmod 000 check is skipped")
  else
    out = show(locked)
    assert(out:find("cannot read " .. locked .. ": Permission denied", 1, true), out)
    assert(not out:find("no such file", 1, true), out)
  end
  os.remove(locked)
end
os.remove(path)

print("test_messages: ok")

-- the mask handles' metamethods name themselves too (MaskFormat:close(5) said "to '?'")
do
  local M = stof.mask
  local f = M.causal():format(64)
  for _, case in ipairs({{function() return f.close(5) end, "TypeError: MaskFormat:close: bad argument #1"},
                         {function() return M.causal().close(5) end, "TypeError: Mask:close: bad argument #1"}}) do
    local ok, err = pcall(case[1])
    assert(not ok and tostring(err):find(case[2], 1, true), tostring(err))
  end
end
print("test_messages: masks ok")
