-- stof.bench.attention and `stof bench attention` on the GPU (issue 14, item 4): a few masks
-- (an expression, a suite mask with GQA in bfloat16 at D 128, an fn mask varying with the
-- head at unequal odd lengths, the row-wise kernel forced), each checked against the CPU
-- reference by the benchmark itself, then timed; AttnPlan:time on its own; the command with
-- --json.
--
--   stof run tests/gpu/bench_attention.lua
local stof = require("stof")
local M, bench = stof.mask, stof.bench

local function check(r, what)
  print(("%-40s %-5s tile %3d  %8.4f ms  %6.1f TFLOP/s  roofline %s  density %.4f  max rel err %.2e (%d rows)")
    :format(what, r.kernel, r.tile, r.ms, r.tflops, r.roofline and ("%.1f%%"):format(100 * r.roofline) or "?",
            r.density, r.max_rel_err, r.checked_rows))
  assert(r.max_rel_err <= bench.CHECK_TOL and r.rel_err <= bench.CHECK_TOL, what)
  assert(r.checked_rows > 0 and r.checked_pairs > 0, what)
  assert(r.ms > 0 and r.tflops > 0 and r.density > 0 and r.nvalid > 0, what)
  assert(#r.times == r.reps, what)
  for _, t in ipairs(r.times) do assert(t > 0, what) end
  assert(type(r.why) == "string" and #r.why > 0 and (r.tile == 32 or r.tile == 64 or r.tile == 128), what)
  assert(type(r.gpu) == "string" and #r.gpu > 0, what)
  if bench.peaks(r.gpu) then
    assert(r.roofline > 0 and r.roofline < 1.5 and r.floor_ms > 0, what) -- above 1: the ceilings are wrong
  end
end

-- an expression, as the command takes it
local r = bench.attention("causal() & sliding(64)", {B = 2, H = 4, S = 1024, D = 64, reps = 10})
check(r, "causal() & sliding(64)")
assert(r.mask == "causal() & sliding(64)" and r.dtype == "float16" and r.Hkv == 4)

-- a suite mask, GQA, bfloat16, D 128
r = bench.attention(M.suite("bigbird", 2048), {B = 1, H = 8, Hkv = 2, S = 2048, D = 128, dtype = "bfloat16",
                                                reps = 10, check_rows = 24})
check(r, "bigbird GQA bf16 D128")
assert(r.checked_rows == 3 * 24)
-- on Hopper its 32-wide blocks run at tile 32 (the mma.sync kernel; kernels/attention.c)
if r.gpu:find("H100", 1, true) or r.gpu:find("H200", 1, true) then assert(r.tile == 32, r.why) end

-- an fn mask that varies with the head, odd unequal lengths (rows of the last tile partial)
local per_head = M.fn(function(_, h, i, j) return j <= i and (i - j) % (h + 2) == 0 end,
                      {name = "strided per head", varies_b = false})
r = bench.attention(per_head, {B = 2, H = 3, Sq = 301, Sk = 257, D = 64, reps = 5, check_rows = 400})
check(r, "fn per head 301x257")
assert(r.checked_rows == 3 * 301, r.checked_rows) -- all rows: Sq <= check_rows

-- the row-wise kernel forced, and tile 128 asked for
r = bench.attention("longformer(16, 4)", {B = 2, H = 4, S = 1536, D = 64, kernel = "row", reps = 5})
check(r, "longformer row-wise")
assert(r.kernel == "row", r.kernel)
r = bench.attention("dense()", {B = 1, H = 8, S = 2048, D = 128, tile = 128, reps = 5})
check(r, "dense tile 128")
assert(r.tile == 128 and r.kernel == "block")

-- AttnPlan:time on its own: rotation over lists, every run timed
do
  local plan = stof.attention_plan(M.causal(), {B = 2, H = 4, S = 512, D = 64})
  local function r3(seed) return stof.rand({2, 4, 512, 64}, "float16", seed):to("cuda") end
  local q, k, v = {r3(1), r3(2)}, {r3(3), r3(4)}, {r3(5), r3(6)}
  local out = stof.zeros({2, 4, 512, 64}, "float16"):to("cuda")
  local ms, times = plan:time(q, k, v, out, 7, 20)
  assert(ms > 0 and #times == 7)
  local sorted = {table.unpack(times)}
  table.sort(sorted)
  assert(ms == sorted[4], "the median")
  ms = plan:time(q[1], k[1], v[1], out) -- single tensors, 30 runs
  assert(ms > 0)
  local ok, err = pcall(plan.time, plan, q, {k[1]}, v, out)
  assert(not ok and tostring(err):find("as many of each"), err)
  ok, err = pcall(plan.time, plan, q[1], k[1], v[1], out, 0)
  assert(not ok and tostring(err):find("reps = 0"), err)
  print("AttnPlan:time ok")
end

-- the command, with --json (the executable is arg[-2] under `stof run`)
local exe = arg and arg[-1] == "run" and arg[-2]
if exe then
  local json = os.tmpname()
  local p = assert(io.popen(("%q bench attention %q --seq 777 --batch 2 --heads 2 --reps 5 --json %q 2>&1")
    :format(exe, "fn(function(b, h, i, j) return j <= i and (i // 64 + j // 64 + b) % 2 == 0 end)", json)))
  local out = p:read("a")
  local ok = p:close()
  print(out)
  assert(ok, "stof bench attention failed")
  assert(out:find("no NaN in the output: ok", 1, true) and out:find("useful: [%d.]+ TFLOP/s"), out)
  local j = stof.load_json(json) -- a fresh file: one line
  os.remove(json)
  assert(j.ms > 0 and j.Sq == 777 and j.B == 2 and j.max_rel_err <= bench.CHECK_TOL, out)
  print("stof bench attention --json ok")
end
print("gpu bench attention ok")
