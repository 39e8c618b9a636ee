-- stof bench attention and stof.bench (lua/stof/bench.lua, lua/stof/cli/bench.lua) without
-- a GPU: the pure parts on known inputs (roofline arithmetic, work, ceilings, row and pair
-- sampling, JSON, the report), the check against the CPU reference on outputs computed by
-- the CPU implementation (a correct one passes; a changed element of a sampled row, and a
-- NaN anywhere, fail it), the Lua API's argument errors, and the command: --help, argument
-- errors, and the message without a GPU (with a GPU: a small run that passes its check).
--
--   stof run tests/lua/bench_attention.lua STOF_EXECUTABLE
package.path = debug.getinfo(1, "S").source:match("^@(.*/)") .. "?.lua;" .. package.path
local U = require("util")
local stof = require("stof")
local M, bench = stof.mask, stof.bench

local exe = ...
assert(exe, "usage: stof run tests/lua/bench_attention.lua STOF_EXECUTABLE")
local has_gpu = pcall(function() return stof.zeros({1}, "float16"):to("cuda") end)

local function near(a, b, what)
  assert(math.abs(a - b) <= 1e-12 * math.max(1, math.abs(b)), ("%s: %.17g, expected %.17g"):format(what, a, b))
end

-- ---------------------------------------------------------------- the pure parts

-- work: 4 * D FLOPs per kept pair; Q and O at H heads, K and V at Hkv heads, 2 bytes each
do
  local flops, bytes = bench.work({B = 2, H = 8, Hkv = 2, Sq = 1000, Sk = 3000, D = 64}, 12345, 2)
  near(flops, 4 * 64 * 12345, "flops")
  near(bytes, 2 * 64 * (2 * 2 * 8 * 1000 + 2 * 2 * 2 * 3000), "bytes")
end

-- roofline on the H200's ceilings: dense 1x1x1024x1024, D 64, is compute-bound
do
  local p = bench.peaks("NVIDIA H200")
  assert(p and p.tflops == 768 and p.tbs == 4.2 and p.source:find("H200"), "H200 ceilings")
  local flops, bytes = bench.work({B = 1, H = 1, Hkv = 1, Sq = 1024, Sk = 1024, D = 64}, 1024 * 1024, 2)
  assert(flops == 268435456 and bytes == 524288)
  local frac, floor_ms, bound = bench.roofline(flops, bytes, 1e-3, p)
  near(floor_ms, 268435456 / 768e12 * 1e3, "compute floor")
  near(frac, 268435456 / 768e12 * 1e3 / 1e-3, "fraction")
  assert(bound == "compute")
  -- sliding(32) at 16x4096 (DESIGN.md section 12's example): 1.6% of dense, memory-bound
  local d = {B = 16, H = 12, Hkv = 12, Sq = 4096, Sk = 4096, D = 64}
  flops, bytes = bench.work(d, math.floor(0.016 * 16 * 12 * 4096 * 4096), 2)
  frac, floor_ms, bound = bench.roofline(flops, bytes, 0.5, p)
  near(floor_ms, bytes / 4.2e12 * 1e3, "memory floor")
  assert(bound == "memory" and floor_ms > 0.095 and floor_ms < 0.097, floor_ms) -- ~0.1 ms: Q, K, V, O once
  near(frac, floor_ms / 0.5, "fraction")
end
assert(bench.peaks("NVIDIA H100 80GB HBM3").tflops == 798 and bench.peaks("NVIDIA H100 80GB HBM3").tbs == 3.0)
assert(bench.peaks("NVIDIA A100-SXM4-80GB") == nil and bench.peaks(nil) == nil)

-- rows: all of them when few; else first, last, the fixed ones, then seeded draws
do
  local r = bench.sample_rows(5, 16, 1)
  assert(#r == 5 and r[1] == 0 and r[5] == 4)
  r = bench.sample_rows(16, 16, 1)
  assert(#r == 16 and r[16] == 15)
  r = bench.sample_rows(1000, 2, 1)
  assert(#r == 2 and r[1] == 0 and r[2] == 999)
  r = bench.sample_rows(1000, 6, 1)
  assert(table.concat(r, " ") == "0 1 333 507 998 999", table.concat(r, " "))
  r = bench.sample_rows(1000, 10, 1)
  assert(table.concat(r, " ") == "0 1 153 196 333 507 774 870 998 999", table.concat(r, " "))
  assert(table.concat(bench.sample_rows(1000, 10, 1), " ") == table.concat(r, " "), "same seed, same rows")
  assert(table.concat(bench.sample_rows(1000, 10, 2), " ") ~= table.concat(r, " "), "another seed, other rows")
  for seed = 1, 5 do -- distinct, sorted, in range
    local rows = bench.sample_rows(300, 40, seed)
    assert(#rows == 40)
    for i = 2, #rows do assert(rows[i - 1] < rows[i] and rows[i] < 300) end
  end
  -- Sq // 2 + 7 past the end at tiny Sq is dropped, not clamped twice
  r = bench.sample_rows(8, 6, 1)
  assert(#r == 6 and r[1] == 0 and r[6] == 7)
  -- what is not a positive integer is refused (a NaN Sq looped for ever: new-user review)
  for _, bad in ipairs({{0 / 0, 16}, {0, 16}, {2.5, 16}, {16, 0}, {16, "4"}}) do
    local ok, err = pcall(bench.sample_rows, bad[1], bad[2], 1)
    assert(not ok and tostring(err):find("must be a positive integer", 1, true), tostring(err))
  end
end

-- pairs: all when B * H <= 4, else first, last, middle
do
  local function str(ps)
    local t = {}
    for i, p in ipairs(ps) do t[i] = p[1] .. "," .. p[2] end
    return table.concat(t, " ")
  end
  assert(str(bench.sample_pairs(1, 1)) == "0,0")
  assert(str(bench.sample_pairs(2, 2)) == "0,0 0,1 1,0 1,1")
  assert(str(bench.sample_pairs(8, 12)) == "0,0 7,11 4,6", str(bench.sample_pairs(8, 12)))
  assert(str(bench.sample_pairs(1, 12)) == "0,0 0,11 0,6")
end

-- JSON: one line, keys sorted, tables left out, NaN as null
assert(bench.json({ms = 0.5, kernel = "block", tile = 64, hopper = true, times = {1, 2}, why = 'a "b"\n', x = 0 / 0})
       == '{"hopper":true,"kernel":"block","ms":0.5,"tile":64,"why":"a \\"b\\"\\n","x":null}')

-- the report of a result (the command's output)
do
  local r = {mask = "causal()", gpu = "NVIDIA H200", B = 8, H = 12, Hkv = 12, Sq = 1024, Sk = 1024, D = 64,
             dtype = "float16", ms = 0.05, reps = 30, prepare_ms = 12.5, tflops = 123.4, nvalid = 50380800,
             density = 0.5005, checked_rows = 48, checked_pairs = 3, max_rel_err = 1.5e-3, kernel = "block",
             tile = 64, warps = 4, stages = 2, hopper = true, why = "block-wise: ...", roofline = 0.42,
             floor_ms = 0.021, bound = "compute", peak_tflops = 768, peak_tbs = 4.2, peak_source = "measured"}
  local text = bench.report(r)
  for _, s in ipairs({"mask causal() on NVIDIA H200: B 8, H 12 (Hkv 12), Sq 1024, Sk 1024, D 64, float16",
                      "check: 48 rows of 3 (b, h) pairs", "max rel err 1.50e-03 (limit 1e-02)",
                      "time: 0.0500 ms (median of 30 runs after 5 warm-up launches, CUDA", "useful: 123.4 TFLOP/s",
                      "roofline: 42.0% (floor 0.021 ms, compute-bound", "density: 0.5005 (50380800 of 100663296 pairs)",
                      "kernel: block, tile 64, 4 warps, 2 stages, wgmma (sm_90a)", "why: block-wise: ..."}) do
    assert(text:find(s, 1, true), ("report lacks %q:\n%s"):format(s, text))
  end
  r.warmup_ms = 3000
  assert(bench.report(r):find("median of 30 runs after 5 warm-up launches and 3000 ms more, CUDA", 1, true))
  r.roofline, r.gpu = nil, "NVIDIA A100"
  assert(bench.report(r):find("roofline: unknown (no ceilings for NVIDIA A100", 1, true))
end

-- ---------------------------------------------------------------- the check, on the CPU

-- outputs of the CPU implementation (f64, rounded to f16) pass; GQA, Sq != Sk, an fn mask
-- varying with b and h, fully masked rows
do
  local d = {B = 2, H = 4, Hkv = 2, Sq = 100, Sk = 120, D = 16}
  local q = stof.rand({2, 4, 100, 16}, "float16", 1)
  local k = stof.rand({2, 2, 120, 16}, "float16", 2)
  local v = stof.rand({2, 2, 120, 16}, "float16", 3)
  local masks = {M.causal(), M.longformer(8, 4), M.window(5, 0) - M.global(50),
                 M.fn(function(b, h, i, j) return (i + j + b + h) % 3 == 0 end)}
  for _, m in ipairs(masks) do
    local o = stof.attention(q, k, v, m)
    local c = bench.check(m, d, q, k, v, o, 8)
    assert(bench.ok(c), tostring(m))
    assert(c.max_rel_err < 1e-3 and c.checked_rows == 24 and c.checked_pairs == 3 and not c.nan, tostring(m))
    -- one element of the worst sampled row changed: the check names that row
    local b, h, i = c.worst[1], c.worst[2], c.worst[3]
    o[{b, h, i, 3}] = o[{b, h, i, 3}] + 0.25
    local c2 = bench.check(m, d, q, k, v, o, 8)
    local good, why = bench.ok(c2)
    assert(not good and why:find(("row %d of (b %d, h %d) is off"):format(i, b, h), 1, true), why)
  end
  -- a NaN outside the sampled rows still fails
  local m = M.causal()
  local o = stof.attention(q, k, v, m)
  o[{1, 1, 50, 0}] = 0 / 0
  local c = bench.check(m, d, q, k, v, o, 8)
  local good, why = bench.ok(c)
  assert(c.nan and not good and why:find("NaN"), why)
  -- all rows when Sq is small
  c = bench.check(m, d, q, k, v, stof.attention(q, k, v, m), 100)
  assert(c.checked_rows == 3 * 100 and bench.ok(c))
end

-- Tensor:slice, which the check uses for a pair's keys and values
do
  local t = stof.tensor({{{1, 2}, {3, 4}}, {{5, 6}, {7, 8}}}, "float16")
  local s = t:slice(0, 1):slice(1, 0)
  assert(table.concat(s:shape(), ",") == "1,1,2" and s[{0, 0, 1}] == 6 and s:dtype() == "float16")
  assert(t:slice(2, 1):totable()[2][2][1] == 8)
  U.raises(function() return t:slice(3, 0) end, "IndexError", "Tensor:slice: dim 3 of a 3-D tensor")
  U.raises(function() return t:slice(1, 1, 2) end, "IndexError", "Tensor:slice: elements [1, 1 + 2) of dim 1")
end

-- ---------------------------------------------------------------- the Lua API's errors

U.raises(function() bench.attention(M.causal(), {S = 64, tiel = 64}) end, "ValueError",
         "stof.bench.attention: unknown key tiel (known: B, D, H, Hkv, S, Sk, Sq, check_rows, dtype, kernel, reps, "
         .. "tile, warmup_ms)")
U.raises(function() bench.attention(M.causal(), {S = 64, warmup_ms = -1}) end, "ValueError",
         "warmup_ms = -1 (at least 0)")
U.raises(function() bench.attention(M.causal(), {S = 64, warmup_ms = 60001}) end, "ValueError",
         "warmup_ms = 60001 (at most 60000)")
U.raises(function() bench.attention(M.causal(), {S = 64, reps = 1000001}) end, "ValueError",
         "reps = 1000001 (at most 1000000)")
-- the limits the front ends check are stof_attn_plan_time's (kernels.h)
assert(stof.attention_time_limits.max_warmup_ms == 60000)
assert(stof.attention_time_limits.max_reps == 1000000)
assert(stof.attention_time_limits.max_sets == 8)
U.raises(function() bench.attention(M.causal(), {S = 64, warmup_ms = 0.5}) end, "TypeError",
         "warmup_ms must be an integer")
U.raises(function() bench.attention(M.causal(), {B = 2}) end, "ValueError", "stof.bench.attention: give S")
U.raises(function() bench.attention(M.causal(), {S = 64, dtype = "float32"}) end, "ValueError",
         "dtype must be \"float16\" or \"bfloat16\"")
U.raises(function() bench.attention(M.causal(), {S = 64, H = 6, Hkv = 4}) end, "ValueError",
         "H = 6 is not a multiple of Hkv = 4")
U.raises(function() bench.attention(M.causal(), {S = 64, tile = 96}) end, "ValueError", "tile must be 32, 64 or 128")
U.raises(function() bench.attention(M.causal(), {S = 64.5}) end, "TypeError", "S must be an integer")
U.raises(function() bench.attention("causal(", {S = 64}) end, "ValueError",
         "bad MASK expression \"causal(\": MASK:1: unexpected symbol near <eof>")
U.raises(function() bench.attention(42, {S = 64}) end, "TypeError", "a stof.Mask or a MASK expression")
if not has_gpu then
  U.raises(function() bench.attention("causal() & sliding(16)", {S = 64}) end, "DeviceError",
           "stof.bench.attention: needs a GPU (no GPU: ")
end

-- ---------------------------------------------------------------- the command

local function sh(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

-- (exit code, stdout and stderr) of `stof bench ARGS...`
local function stof_bench(...)
  local args = {}
  for i, a in ipairs({...}) do args[i] = sh(tostring(a)) end
  local p = assert(io.popen(("%s bench %s 2>&1"):format(sh(exe), table.concat(args, " "))))
  local out = p:read("a")
  local _, _, code = p:close()
  return code, out
end

local function expect(code, pattern, ...)
  local got, out = stof_bench(...)
  assert(got == code, ("stof bench %s: exit %s, expected %d:\n%s"):format(table.concat({...}, " "), got, code, out))
  assert(out:find(pattern, 1, true), ("stof bench %s: output lacks %q:\n%s"):format(table.concat({...}, " "), pattern, out))
  return out
end

expect(0, "usage: stof bench attention MASK --seq S[,Sk]", "--help")
expect(0, "usage: stof bench attention MASK --seq S[,Sk]", "attention", "--help")
expect(1, "usage: stof bench attention")
expect(1, "stof bench: unknown option '--bogus' (see stof bench attention --help)", "attention", "causal", "--seq", "64",
       "--bogus")
expect(1, "stof bench: missing --seq S (the sequence length)", "attention", "causal")
expect(1, "stof bench: missing MASK", "attention", "--seq", "64")
expect(1, "stof bench: --dtype: float16 or bfloat16 (the GPU kernels' types), got 'float32'", "attention", "causal",
       "--seq", "64", "--dtype", "float32")
expect(1, "stof bench: --seq: expected a positive integer, got 'abc'", "attention", "causal", "--seq", "abc")
expect(1, "stof bench: --tile: 32, 64 or 128, got 96", "attention", "causal", "--seq", "64", "--tile", "96")
expect(1, "stof bench: --kernel: auto, block or row, got 'fast'", "attention", "causal", "--seq", "64", "--kernel", "fast")
expect(1, "stof bench: --check-rows: at least 2", "attention", "causal", "--seq", "64", "--check-rows", "1")
expect(1, "stof bench: --warmup-ms: expected an integer from 0 to 60000, got '-5'", "attention", "causal", "--seq",
       "64", "--warmup-ms", "-5")
expect(1, "stof bench: --warmup-ms: expected an integer from 0 to 60000, got 'lots'", "attention", "causal", "--seq",
       "64", "--warmup-ms", "lots")
expect(1, "stof bench: bad MASK expression \"causal() & sliding(\": MASK:1: unexpected symbol near <eof>",
       "attention", "causal() & sliding(", "--seq", "64")
expect(1, "stof bench: bad MASK expression \"window(-1, 2)\": MASK:1: ValueError: window: l = -1 is negative",
       "attention", "window(-1, 2)", "--seq", "64")
expect(1, "stof bench: MASK \"window\" gives a function", "attention", "window", "--seq", "64")
expect(1, "stof bench: unexpected argument 'x' (quote the MASK expression", "attention", "causal", "x", "--seq", "64")
expect(1, "stof bench: ValueError: stof.bench.attention: H = 6 is not a multiple of Hkv = 4", "attention", "causal",
       "--seq", "64", "--heads", "6", "--heads-kv", "4")
expect(1, "stof bench: unknown subcommand 'gemm' (attention; see stof bench --help)", "gemm")
if has_gpu then
  local out = expect(0, "no NaN in the output: ok", "attention", "fn(function(b, h, i, j) return j <= i and (i - j) % 3 == 0 end)",
                     "--seq", "200", "--heads", "2", "--reps", "3", "--warmup-ms", "20")
  assert(out:find("useful: [%d.]+ TFLOP/s") and out:find("why: "), out)
else
  local out = expect(1, "stof bench: attention needs a GPU, and none can be used here (no GPU: ", "attention",
                     "causal() & sliding(64)", "--seq", "1024", "--batch", "2")
  assert(out:find("`stof explain 'causal() & sliding(64)' --seq 1024 --batch 2 --heads 12 --dim 64`", 1, true), out)
  assert(not out:find("traceback"), out)
end

-- ---------------------------------------------------------------- --peers

-- the mask as the peers get it: one bool instance per (b, h) where it varies, read back
-- element by element against the mask; bench/peers_mask.py's reader (no PyTorch needed for
-- it) gets the same instances and elements when python3 is here
do
  local path = os.tmpname() .. ".safetensors"
  local doc = M.document({{5, 15}, {10, 10}})
  assert(bench.export_mask(doc, {B = 2, H = 3, Sq = 20, Sk = 24}, path) == 2)
  local t = stof.load(path)
  assert(t.m0_0 and t.m1_0 and not t.m0_1, "one instance per b (the mask does not vary with h)")
  local f = doc:format({20, 24}, {batch = 2, heads = 3})
  for b = 0, 1 do
    local x = t[("m%d_0"):format(b)]
    assert(x:dtype() == "bool" and x:shape()[1] == 20 and x:shape()[2] == 24)
    for i = 0, 19, 3 do
      for j = 0, 23, 5 do assert(x[{i, j}] == f:get(b, 0, i, j), ("instance %d at (%d, %d)"):format(b, i, j)) end
    end
  end
  assert(bench.export_mask("causal() & sliding(3)", {B = 4, H = 4, Sq = 16, Sk = 16}, path) == 1)
  local py = io.popen("command -v python3 2>/dev/null"):read("l")
  if py and py ~= "" then
    local src = debug.getinfo(1, "S").source:match("^@(.*/)tests/lua/") or "./"
    local cmd = ("python3 -c 'import sys; sys.path.insert(0, sys.argv[1]); import peers_mask as p; "
                 .. "t = p.read_safetensors(sys.argv[2]); mb, mh, n = p.instances(t); "
                 .. "s, d = t[n[0]]; print(mb, mh, s, d[5 * 16 + 3], d[5 * 16 + 1], d[3 * 16 + 5])' %s %s 2>&1")
                :format(sh(src .. "bench"), sh(path))
    local out = io.popen(cmd):read("a")
    assert(out:find("^1 1 %(16, 16%) 1 0 0"), "peers_mask.py read: " .. out)
  end
  os.remove(path)
  os.remove(path:sub(1, -13))
  -- too large for the peers: refused before anything is written
  U.raises(function() bench.export_mask("dense", {B = 1, H = 1, Sq = 40000, Sk = 40000}, path) end,
           "ValueError: stof.bench.peers: the peers need the mask as 1 bool instance(s) of 40000 x 40000: 1.5 GiB")
  U.raises(function() bench.peers("dense", {B = 1, H = 1, Hkv = 1, Sq = 8, Sk = 8, D = 64, ms = 1}, {script = "/nonexistent/p.py"}) end,
           "ValueError: stof.bench.peers: /nonexistent/p.py not found")
  -- a script that prints one result and a failure: parsed, ratios against stof's time
  local fake = os.tmpname()
  local fh = assert(io.open(fake, "w"))
  fh:write('import sys\nprint("a warning")\nprint(\'{"impl": "flex_attention", "ms": 2.5, "block_mask_ms": 4.0}\')\n'
           .. 'print(\'{"impl": "sdpa_mem_efficient_bool_mask", "error": "RuntimeError: no kernel"}\')\n')
  fh:close()
  if py and py ~= "" then
    local res = bench.peers("causal", {B = 1, H = 2, Hkv = 2, Sq = 64, Sk = 64, D = 64, ms = 0.5, reps = 3},
                            {script = fake})
    assert(#res == 2 and res[1].impl == "flex_attention" and res[1].ms == 2.5 and res[1].block_mask_ms == 4.0)
    assert(math.abs(res[1].speedup - 5) < 1e-12 and res[2].error == "RuntimeError: no kernel" and not res[2].ms)
    local text = bench.peers_report(res)
    assert(text:find("flex_attention%s+2%.5000 ms %(block mask 4%.0 ms apart%)  stof 5%.00x"), text)
    assert(text:find("sdpa_mem_efficient_bool_mask%s+failed: RuntimeError: no kernel"), text)
  end
  os.remove(fake)
end
expect(1, "stof bench: --peers-script without --peers", "attention", "causal", "--seq", "64", "--peers-script", "x")

print("bench_attention: ok")
