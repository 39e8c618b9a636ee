-- stof.bench: a verified number for one attention mask (issue 14, item 4; DESIGN.md
-- sections 9 and 10). `stof bench attention` (lua/stof/cli/bench.lua) is its command line.
--
--   stof.bench.attention(mask, {B=, H=, Hkv=, S= | Sq=, Sk=, D=, dtype=, kernel=, tile=,
--                               reps=, warmup_ms=, check_rows=}) -> result table
--
-- mask is a stof.Mask or the text of a MASK argument of `stof mask show` ("causal() &
-- sliding(64)", "bigbird", "fn(function(b, h, i, j) ... end)"). Correctness first: the
-- output is poisoned with NaN, one run is checked against the CPU reference
-- (stof.attention on float32 copies, f64 accumulation) on sampled rows of sampled (b, h)
-- pairs, and no NaN may remain anywhere; a row off by more than CHECK_TOL (relative L2)
-- raises a CheckError naming it. Then the plan is timed with device events (AttnPlan:time:
-- 5 warm-up launches and warmup_ms more of them (0: the 5 alone, as the peers' scripts warm
-- up, so that --peers compares at the same GPU state), median of reps runs, inputs rotated
-- over three sets) and the result gives the time, useful TFLOP/s (4 * D * kept pairs /
-- time), the fraction of the roofline, the density and the selector's choice with its
-- reason.
--
-- The parts that need no GPU (work, roofline, peaks, sample_rows, sample_pairs, json,
-- report, and check / ok on CPU tensors) are functions of their own, so that tests check
-- them on known inputs (tests/lua/bench_attention.lua); tests/gpu/bench_attention.lua runs
-- the whole on the GPU.
local stof = require("stof")

local bench = {}

--- Relative L2 error allowed per checked row, f16 and bf16 (DESIGN.md section 10).
bench.CHECK_TOL = 1e-2

--- Ceilings per GPU (matched against the device's name, first match wins): the fp16 dense
--- GEMM rate and the device-to-device copy bandwidth measured on the project's GPU machine
--- (DESIGN.md section 12 and GPU.md for the H200; docs/PERFORMANCE.md for the H100; the
--- same numbers as bench/bench_attention.c; bfloat16 is held to the same ceilings).
--- Another GPU has no roofline until its ceilings are measured and added here.
bench.PEAKS = {
  {match = "H200", name = "H200", tflops = 768, tbs = 4.2,
   source = "fp16 GEMM and copy measured on an H200 (DESIGN.md section 12)"},
  {match = "H100", name = "H100", tflops = 798, tbs = 3.0,
   source = "fp16 GEMM and copy measured on an H100 (docs/PERFORMANCE.md)"},
}

--- The ceilings of the GPU named gpu (its device name, "NVIDIA H200"), or nil.
function bench.peaks(gpu)
  if type(gpu) ~= "string" then return nil end
  for _, p in ipairs(bench.PEAKS) do
    if gpu:find(p.match, 1, true) then return p end
  end
  return nil
end

--- Useful FLOPs and the bytes of Q, K, V and O moved once, for dims {B, H, Hkv, Sq, Sk, D}
--- and nvalid kept (query, key) pairs over all B x H, elements of esize bytes.
function bench.work(d, nvalid, esize)
  local flops = 4.0 * d.D * nvalid
  local bytes = esize * d.D * (2.0 * d.B * d.H * d.Sq + 2.0 * d.B * d.Hkv * d.Sk)
  return flops, bytes
end

--- The roofline of a run of ms milliseconds doing flops useful FLOPs and moving bytes,
--- on a GPU of peak.tflops TFLOP/s and peak.tbs TB/s: the fraction floor / ms, the floor
--- max(flops / peak FLOP/s, bytes / bandwidth) in ms, and what bounds it ("compute" or
--- "memory").
function bench.roofline(flops, bytes, ms, peak)
  local compute_ms = flops / (peak.tflops * 1e12) * 1e3
  local memory_ms = bytes / (peak.tbs * 1e12) * 1e3
  local floor_ms = math.max(compute_ms, memory_ms)
  return floor_ms / ms, floor_ms, compute_ms >= memory_ms and "compute" or "memory"
end

-- A 64-bit linear congruential generator (Knuth's MMIX constants): the same rows on every
-- platform, and math.random's state left alone.
local function lcg(seed)
  local x = seed
  return function(n)
    x = x * 6364136223846793005 + 1442695040888963407
    return (x >> 33) % n
  end
end

--- The query rows to check of an instance with Sq rows, n asked for (n >= 2): all of them
--- when n >= Sq; else the first and the last, then 1, Sq // 3, Sq // 2 + 7 and Sq - 2 (a
--- row at each end of a tile and inside), then rows drawn from seed, up to n distinct.
--- Sorted, 0-based.
function bench.sample_rows(Sq, n, seed)
  if math.type(Sq) ~= "integer" or Sq < 1 then
    error(("ValueError: stof.bench.sample_rows: Sq must be a positive integer, got %s"):format(tostring(Sq)), 2)
  end
  if math.type(n) ~= "integer" or n < 1 then
    error(("ValueError: stof.bench.sample_rows: n must be a positive integer, got %s"):format(tostring(n)), 2)
  end
  local rows, seen = {}, {}
  local function add(i)
    if #rows < n and i >= 0 and i < Sq and not seen[i] then
      seen[i] = true
      rows[#rows + 1] = i
    end
  end
  if n >= Sq then
    for i = 0, Sq - 1 do add(i) end
    return rows
  end
  for _, i in ipairs({0, Sq - 1, 1, Sq // 3, Sq // 2 + 7, Sq - 2}) do add(i) end
  local draw = lcg(seed or 1)
  while #rows < n do add(draw(Sq)) end
  table.sort(rows)
  return rows
end

--- The (b, h) pairs to check, 0-based: all of them when B * H <= 4, else (0, 0),
--- (B - 1, H - 1) and (B // 2, H // 2) (the last head of the last batch element catches
--- offsets computed for the first).
function bench.sample_pairs(B, H)
  local pairs_, seen = {}, {}
  local function add(b, h)
    local key = b * H + h
    if not seen[key] then
      seen[key] = true
      pairs_[#pairs_ + 1] = {b, h}
    end
  end
  if B * H <= 4 then
    for b = 0, B - 1 do for h = 0, H - 1 do add(b, h) end end
  else
    add(0, 0)
    add(B - 1, H - 1)
    add(B // 2, H // 2)
  end
  return pairs_
end

local function json_string(s)
  return '"' .. s:gsub('[%c"\\]', function(c)
    local esc = {['"'] = '\\"', ['\\'] = '\\\\', ['\n'] = '\\n', ['\t'] = '\\t', ['\r'] = '\\r'}
    return esc[c] or ("\\u%04x"):format(c:byte())
  end) .. '"'
end

--- A result as one line of JSON (its numbers, strings and booleans, keys sorted; tables
--- such as times left out).
function bench.json(r)
  local keys = {}
  for k, v in pairs(r) do
    if type(k) == "string" and type(v) ~= "table" and type(v) ~= "function" then keys[#keys + 1] = k end
  end
  table.sort(keys)
  local parts = {}
  for _, k in ipairs(keys) do
    local v, s = r[k], nil
    if type(v) == "string" then
      s = json_string(v)
    elseif type(v) == "boolean" then
      s = tostring(v)
    elseif math.type(v) == "integer" then
      s = tostring(v)
    elseif v ~= v or v == math.huge or v == -math.huge then
      s = "null"
    else
      s = ("%.10g"):format(v)
    end
    parts[#parts + 1] = json_string(k) .. ":" .. s
  end
  return "{" .. table.concat(parts, ",") .. "}"
end

--- The text `stof bench attention` prints for a result.
function bench.report(r)
  local lines = {}
  local function add(fmt, ...) lines[#lines + 1] = fmt:format(...) end
  add("mask %s on %s: B %d, H %d (Hkv %d), Sq %d, Sk %d, D %d, %s", r.mask, r.gpu or "?", r.B, r.H, r.Hkv, r.Sq,
      r.Sk, r.D, r.dtype)
  add("  check: %d rows of %d (b, h) pairs against the CPU reference (float32 copies, f64 accumulation): "
      .. "max rel err %.2e (limit %.0e), no NaN in the output: ok", r.checked_rows, r.checked_pairs, r.max_rel_err,
      bench.CHECK_TOL)
  local warm = (r.warmup_ms or 0) > 0 and ("5 warm-up launches and %d ms more"):format(r.warmup_ms)
    or "5 warm-up launches"
  add("  time: %.4f ms (median of %d runs after %s, CUDA events; prepare %.1f ms apart)", r.ms, r.reps, warm,
      r.prepare_ms)
  add("  useful: %.1f TFLOP/s (4 * D * %d kept pairs)", r.tflops, r.nvalid)
  if r.roofline then
    add("  roofline: %.1f%% (floor %.3g ms, %s-bound: max(FLOPs / %g TFLOP/s, Q+K+V+O bytes / %g TB/s); %s)",
        100 * r.roofline, r.floor_ms, r.bound, r.peak_tflops, r.peak_tbs, r.peak_source)
  else
    add("  roofline: unknown (no ceilings for %s in stof.bench.PEAKS)", r.gpu or "this GPU")
  end
  add("  density: %.4f (%d of %d pairs)", r.density, r.nvalid, r.B * r.H * r.Sq * r.Sk)
  add("  kernel: %s, tile %d, %d warps, %d stages%s", r.kernel, r.tile, r.warps, r.stages,
      r.hopper and ", wgmma (sm_90a)" or "")
  add("  why: %s", r.why)
  return table.concat(lines, "\n")
end

-- ---------------------------------------------------------------- the benchmark

local Raised = {} -- errors this module raises: reported at the caller's line

local function raise(kind, fmt, ...)
  error(setmetatable({msg = kind .. ": stof.bench.attention: " .. fmt:format(...)}, Raised), 0)
end

-- f as a public function: this module's errors raised at the caller's line, a bug with
-- the traceback of where it happened.
local function public(f)
  return function(...)
    local res = table.pack(xpcall(f, function(e)
      if getmetatable(e) == Raised then return e end
      return debug.traceback(tostring(e), 2)
    end, ...))
    if res[1] then return table.unpack(res, 2, res.n) end
    if getmetatable(res[2]) == Raised then error(res[2].msg, 2) end
    error(res[2], 0)
  end
end

local DIM_KEYS = {B = true, H = true, Hkv = true, S = true, Sq = true, Sk = true, D = true, dtype = true,
                  kernel = true, tile = true, reps = true, warmup_ms = true, check_rows = true}

local function int_field(o, key, def, min)
  local v = o[key]
  if v == nil then return def end
  if math.type(v) ~= "integer" then raise("TypeError", "%s must be an integer, got %s", key, tostring(v)) end
  if v < min then raise("ValueError", "%s = %d (at least %d)", key, v, min) end
  return v
end

-- The options checked, with their defaults: dims {B, H, Hkv, Sq, Sk, D}, dtype, plan
-- options, reps, check_rows, warmup_ms.
local function check_options(o)
  if type(o) ~= "table" then raise("TypeError", "the second argument must be a table {B=, H=, S=, D=, ...}") end
  for k in pairs(o) do
    if not DIM_KEYS[k] then
      local known = {}
      for n in pairs(DIM_KEYS) do known[#known + 1] = n end
      table.sort(known)
      raise("ValueError", "unknown key %s (known: %s)", tostring(k), table.concat(known, ", "))
    end
  end
  local d = {}
  d.B = int_field(o, "B", 1, 1)
  d.H = int_field(o, "H", 12, 1)
  d.Hkv = int_field(o, "Hkv", d.H, 1)
  local S = int_field(o, "S", nil, 1)
  d.Sq = int_field(o, "Sq", S, 1)
  d.Sk = int_field(o, "Sk", S, 1)
  if not d.Sq or not d.Sk then raise("ValueError", "give S (or Sq and Sk)") end
  d.D = int_field(o, "D", 64, 1)
  if d.H % d.Hkv ~= 0 then raise("ValueError", "H = %d is not a multiple of Hkv = %d", d.H, d.Hkv) end
  local dtype = o.dtype or "float16"
  if dtype ~= "float16" and dtype ~= "bfloat16" then
    raise("ValueError", "dtype must be \"float16\" or \"bfloat16\" (the GPU kernels' types), got %s", tostring(dtype))
  end
  local kernel = o.kernel or "auto"
  if kernel ~= "auto" and kernel ~= "block" and kernel ~= "row" then
    raise("ValueError", "kernel must be \"auto\", \"block\" or \"row\", got %s", tostring(kernel))
  end
  local tile = int_field(o, "tile", nil, 1)
  if tile and tile ~= 32 and tile ~= 64 and tile ~= 128 then
    raise("ValueError", "tile must be 32, 64 or 128, got %d", tile)
  end
  local lim = stof.attention_time_limits
  local warmup_ms = int_field(o, "warmup_ms", 0, 0)
  if warmup_ms > lim.max_warmup_ms then
    raise("ValueError", "warmup_ms = %d (at most %d)", warmup_ms, lim.max_warmup_ms)
  end
  local reps = int_field(o, "reps", 30, 1)
  if reps > lim.max_reps then raise("ValueError", "reps = %d (at most %d)", reps, lim.max_reps) end
  return d, dtype, {kernel = kernel, tile = tile}, reps, int_field(o, "check_rows", 16, 2), warmup_ms
end

local function as_mask(mask, d)
  if type(mask) == "string" then
    local common = require("stof.cli.common")
    local ok, m = pcall(common.eval_mask, mask, d.Sq, d.Sk)
    if ok then return m end
    local msg = common.fail_message(m)
    if msg then raise("ValueError", "%s", msg) end
    error(m, 0)
  end
  if getmetatable(mask) ~= getmetatable(stof.mask.dense()) then
    raise("TypeError", "the first argument must be a stof.Mask or a MASK expression, got %s", type(mask))
  end
  return mask
end

-- Runs a call to a binding; a user error it raises is re-raised as this module's (at the
-- caller's line), a DeviceError saying that the benchmark needs a GPU.
local function call(f, ...)
  local res = table.pack(pcall(f, ...))
  if res[1] then return table.unpack(res, 2, res.n) end
  local r = res[2]
  local msg = type(r) == "string" and r:gsub("^[^\n]-:%d+: ", "", 1)
  if msg and msg:match("^DeviceError: ") then
    raise("DeviceError", "needs a GPU (%s)", (msg:gsub("^DeviceError: [^:]*: ", "", 1)))
  end
  if msg and msg:match("^%u%a*Error: ") then error(setmetatable({msg = msg}, Raised), 0) end
  error(r, 0)
end

-- Relative L2 errors of rows `rows` of pair (b, h) of out against the CPU reference:
-- stof.attention on float32 copies of the pair's query rows and keys/values, with the
-- mask's rows of (b, h) as an fn mask over the gathered rows (so the reference costs the
-- sampled rows only). Returns the worst row's error and that row, and the sums of squared
-- errors and of squared reference values.
local function check_pair(mask, d, q, k, v, out, b, h, rows)
  local n, D = #rows, d.D
  local hk = h // (d.H // d.Hkv)
  local qr = stof.zeros({1, 1, n, D}, "float32")
  for r, i in ipairs(rows) do
    for x = 0, D - 1 do qr[{0, 0, r - 1, x}] = q[{b, h, i, x}] end
  end
  local kp = k:slice(0, b):slice(1, hk):astype("float32")
  local vp = v:slice(0, b):slice(1, hk):astype("float32")
  local sub = stof.mask.fn(function(_, _, r, j) return mask:eval(b, h, rows[r + 1], j) end,
                           {name = ("rows of (b %d, h %d)"):format(b, h), varies_b = false, varies_h = false})
  local ref = call(stof.attention, qr, kp, vp, sub)
  local worst, worst_row, num, den = 0, rows[1], 0, 0
  for r, i in ipairs(rows) do
    local e2, w2 = 0, 0
    for x = 0, D - 1 do
      local want, got = ref[{0, 0, r - 1, x}], out[{b, h, i, x}]
      e2 = e2 + (got - want) ^ 2
      w2 = w2 + want ^ 2
    end
    local err = w2 > 0 and math.sqrt(e2 / w2) or math.sqrt(e2) -- a row with no key: zeros
    if not (err <= worst) then worst, worst_row = err, i end -- NaN counts as the worst
    num, den = num + e2, den + w2
  end
  return worst, worst_row, num, den
end

--- Checks out, the attention of q, k, v (CPU tensors [B, H, Sq, D] and [B, Hkv, Sk, D])
--- with mask as a kernel computed it (a CPU tensor [B, H, Sq, D]), against the CPU
--- reference on check_rows sampled rows (sample_rows) of the sampled (b, h) pairs
--- (sample_pairs); d = {B, H, Hkv, Sq, Sk, D}. Returns {max_rel_err (the worst row's
--- relative L2 error; a row the reference leaves zero counts its absolute error), rel_err
--- (over all checked rows), checked_rows, checked_pairs, worst = {b, h, i}, nan (true when
--- out holds a NaN or an Inf anywhere)}. Raises nothing for a wrong result: see ok().
local function check(mask, d, q, k, v, out, check_rows)
  local c = {max_rel_err = 0, checked_rows = 0, nan = not stof.allclose(out, out, 0, 0)} -- NaN is never close
  local num, den = 0, 0
  local pairs_ = bench.sample_pairs(d.B, d.H)
  for p, bh in ipairs(pairs_) do
    local rows = bench.sample_rows(d.Sq, check_rows, p)
    local w, row, n2, d2 = check_pair(mask, d, q, k, v, out, bh[1], bh[2], rows)
    if not (w <= c.max_rel_err) or not c.worst then c.max_rel_err, c.worst = w, {bh[1], bh[2], row} end
    num, den, c.checked_rows = num + n2, den + d2, c.checked_rows + #rows
  end
  c.checked_pairs = #pairs_
  c.rel_err = den > 0 and math.sqrt(num / den) or math.sqrt(num)
  return c
end
bench.check = public(check)

--- Whether a check passed: no NaN and every row within CHECK_TOL; else false and why.
function bench.ok(c)
  if c.nan then return false, "NaN (or Inf) left in the output: an element was not written, or overflowed" end
  if not (c.max_rel_err <= bench.CHECK_TOL) then
    return false, ("row %d of (b %d, h %d) is off: relative L2 error %.3g against the CPU reference (limit %g)")
      :format(c.worst[3], c.worst[1], c.worst[2], c.max_rel_err, bench.CHECK_TOL)
  end
  return true
end

local function run(mask, o)
  local d, dtype, popts, reps, check_rows, warmup_ms = check_options(o)
  mask = as_mask(mask, d)
  -- the plan first: without a GPU this is where it stops, before inputs are made
  local plan = call(stof.attention_plan, mask, {B = d.B, H = d.H, Hkv = d.Hkv, Sq = d.Sq, Sk = d.Sk, D = d.D,
                                                dtype = dtype}, popts)
  local qshape, kshape = {d.B, d.H, d.Sq, d.D}, {d.B, d.Hkv, d.Sk, d.D}
  local set_bytes = 2 * d.D * (2 * d.B * d.H * d.Sq + 2 * d.B * d.Hkv * d.Sk)
  local nset = set_bytes <= 256 * 2^20 and 3 or 1
  local qh, kh, vh, qd, kd, vd = {}, {}, {}, {}, {}, {}
  for s = 1, nset do
    qh[s] = stof.rand(qshape, dtype, 100 + 3 * s)
    kh[s] = stof.rand(kshape, dtype, 101 + 3 * s)
    vh[s] = stof.rand(kshape, dtype, 102 + 3 * s)
    qd[s], kd[s], vd[s] = call(qh[s].to, qh[s], "cuda"), call(kh[s].to, kh[s], "cuda"), call(vh[s].to, vh[s], "cuda")
  end
  -- correctness first: poison, run once, no NaN anywhere, sampled rows against the CPU
  local poison = stof.full(qshape, 0 / 0, dtype)
  local outd = call(poison.to, poison, "cuda")
  poison:close()
  call(plan.run, plan, qd[1], kd[1], vd[1], outd)
  local out = call(outd.to, outd, "cpu")
  local c = check(mask, d, qh[1], kh[1], vh[1], out, check_rows)
  local good, why = bench.ok(c)
  if not good then
    raise("CheckError", "mask %s (kernel %s, tile %d): %s", tostring(mask), plan.choice.kernel, plan.choice.tile, why)
  end
  -- then the time
  local ms, times = call(plan.time, plan, qd, kd, vd, outd, reps, warmup_ms)
  local ch, nvalid = plan.choice, plan.nvalid
  local flops, bytes = bench.work(d, nvalid, 2)
  local r = {
    mask = tostring(mask), gpu = plan.gpu, B = d.B, H = d.H, Hkv = d.Hkv, Sq = d.Sq, Sk = d.Sk, D = d.D,
    dtype = dtype, ms = ms, times = times, reps = reps, warmup_ms = warmup_ms, tflops = flops / (ms * 1e-3) / 1e12,
    nvalid = nvalid, density = nvalid / (d.B * d.H * d.Sq * d.Sk), kernel = ch.kernel, tile = ch.tile, warps = ch.warps,
    stages = ch.stages, hopper = ch.hopper, why = ch.why, prepare_ms = plan.prepare_ms, max_rel_err = c.max_rel_err,
    rel_err = c.rel_err, checked_rows = c.checked_rows, checked_pairs = c.checked_pairs, flops = flops, bytes = bytes,
  }
  local peak = bench.peaks(r.gpu)
  if peak then
    r.roofline, r.floor_ms, r.bound = bench.roofline(flops, bytes, ms, peak)
    r.peak_tflops, r.peak_tbs, r.peak_source = peak.tflops, peak.tbs, peak.source
  end
  plan:close()
  for s = 1, nset do qd[s]:close(); kd[s]:close(); vd[s]:close() end
  outd:close()
  return r
end

-- ---------------------------------------------------------------- the peers on the same mask

bench.EXPORT_LIMIT = 2^30 -- bytes of bool instances written for the peers at most

local function raise_peers(kind, fmt, ...)
  error(setmetatable({msg = kind .. ": stof.bench.peers: " .. fmt:format(...)}, Raised), 0)
end

--- Writes the instances of mask at dims d ({B, H, Sq, Sk}) to the safetensors file path as
--- bool tensors "m<b>_<h>" of shape [Sq, Sk] (mask_b x mask_h of them: one where the mask
--- does not vary with b or h), what bench/peers_mask.py reads; returns their number.
--- Refuses more than bench.EXPORT_LIMIT bytes (a ValueError naming the size).
local function export_mask(mask, d, path)
  mask = as_mask(mask, d)
  local f = call(mask.format, mask, {d.Sq, d.Sk}, {tile = 64, batch = d.B, heads = d.H})
  local n = f.mask_b * f.mask_h
  local bytes = n * d.Sq * d.Sk
  if bytes > bench.EXPORT_LIMIT then
    f:close()
    raise_peers("ValueError", "the peers need the mask as %d bool instance(s) of %d x %d: %.1f GiB, more than %.0f GiB",
          n, d.Sq, d.Sk, bytes / 2^30, bench.EXPORT_LIMIT / 2^30)
  end
  local t = {}
  for b = 0, f.mask_b - 1 do
    for h = 0, f.mask_h - 1 do t[("m%d_%d"):format(b, h)] = call(f.expand, f, b, h) end
  end
  call(stof.save, path, t)
  f:close()
  for _, x in pairs(t) do x:close() end
  return n
end
bench.export_mask = public(export_mask)

-- One line of peers_mask.py's JSON ({"impl": .., "ms": .., "block_mask_ms": .., "error": ..}),
-- or nil for any other line (a warning on the way).
local function peer_line(line)
  local impl = line:match('^%s*{"impl": "([^"]+)"')
  if not impl then return nil end
  local function num(key) return tonumber(line:match('"' .. key .. '": ([%d%.eE+-]+)')) end
  return {impl = impl, ms = num("ms"), block_mask_ms = num("block_mask_ms"), error = line:match('"error": "(.*)"}%s*$')}
end

--- The peers on the same mask and dims, in this process's GPU, through the project's
--- bench/peers_mask.py (FlexAttention with a block mask from the same mask, SDPA with the
--- boolean mask, FlashAttention-2 and cuDNN where the mask is dense or causal): r is
--- bench.attention's result (its ms gives the ratios). opts: script (the path of
--- peers_mask.py, default "bench/peers_mask.py"), python ("python3"), reps (r.reps).
--- Returns a list of {impl, ms, block_mask_ms, error, speedup = ms / r.ms}, fastest first.
local function peers(mask, r, opts)
  opts = opts or {}
  local script, python = opts.script or "bench/peers_mask.py", opts.python or "python3"
  local fh = io.open(script, "r")
  if not fh then
    raise_peers("ValueError", "%s not found (run from the stof checkout, or give the script's path)", script)
  end
  fh:close()
  local d = {B = r.B, H = r.H, Hkv = r.Hkv, Sq = r.Sq, Sk = r.Sk, D = r.D}
  local path = os.tmpname() .. ".safetensors"
  export_mask(mask, d, path)
  local cmd = ("%s %q --mask %q --B %d --H %d --Hkv %d --Sq %d --Sk %d --D %d --dtype %s --reps %d 2>&1"):format(
    python, script, path, d.B, d.H, d.Hkv, d.Sq, d.Sk, d.D, r.dtype or "float16", opts.reps or r.reps or 30)
  local p = io.popen(cmd, "r")
  local out, res = {}, {}
  for line in p:lines() do
    local x = peer_line(line)
    if x then
      if x.ms then x.speedup = x.ms / r.ms end
      res[#res + 1] = x
    else
      out[#out + 1] = line
    end
  end
  local ok, _, code = p:close()
  os.remove(path)
  os.remove(path:sub(1, -13))
  if not ok and #res == 0 then
    raise_peers("PeerError", "%s exited with status %s: %s", script, tostring(code),
          table.concat(out, "\n", math.max(1, #out - 5)))
  end
  table.sort(res, function(a, b)
    if (a.ms == nil) ~= (b.ms == nil) then return a.ms ~= nil end
    return (a.ms or 0) < (b.ms or 0)
  end)
  return res
end
bench.peers = public(peers)

--- The text of bench.peers' list under bench.report's.
function bench.peers_report(list)
  local lines = {"  peers on the same GPU and mask (bench/peers_mask.py, median of CUDA-event timings):"}
  for _, x in ipairs(list) do
    if x.ms then
      lines[#lines + 1] = ("    %-30s %9.4f ms%s  stof %.2fx"):format(x.impl, x.ms,
        x.block_mask_ms and (" (block mask %.1f ms apart)"):format(x.block_mask_ms) or "", x.speedup)
    else
      lines[#lines + 1] = ("    %-30s failed: %s"):format(x.impl, x.error or "?")
    end
  end
  if #list == 0 then lines[#lines + 1] = "    (none ran)" end
  return table.concat(lines, "\n")
end

--- Checks, then times, attention with mask (a stof.Mask or a MASK expression) at the
--- given dims (B 1, H 12, Hkv H, D 64, dtype float16 by default; S or Sq and Sk
--- required) with the plan options kernel ("auto", "block", "row") and tile (32, 64, 128),
--- reps timed runs (30) after 5 warm-up launches and warmup_ms more of them (0),
--- check_rows rows checked per sampled (b, h) (16; all when Sq is at most that). Returns {ms,
--- tflops, roofline (nil for a GPU without ceilings in bench.PEAKS), floor_ms, bound, density,
--- nvalid, kernel, tile, warps, stages, hopper, why, prepare_ms, max_rel_err, rel_err,
--- checked_rows, checked_pairs, gpu, mask, the dims, times (each run's ms), warmup_ms}.
--- Raises a DeviceError without a GPU, a CheckError when the result is wrong, a ValueError /
--- TypeError for bad arguments (reps and warmup_ms past stof.attention_time_limits too).
bench.attention = public(run)

return bench
