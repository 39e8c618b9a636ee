-- stof bench attention MASK --seq S [...]: a verified number for one mask (stof.bench,
-- lua/stof/bench.lua): the GPU result checked against the CPU reference on sampled rows
-- (output poisoned with NaN first), then the median time, useful TFLOP/s, the fraction of
-- the roofline, the density, and the kernel and tile the selector chose with its reason.
-- MASK is what `stof mask show` takes (stof.cli.common.eval_mask). Errors print
-- "stof bench: <cause>" and exit with status 1; so does a run without a GPU.
local stof = require("stof")
local common = require("stof.cli.common")
local fail = common.fail

local USAGE = [==[
usage: stof bench attention MASK --seq S[,Sk] [--batch B] [--heads H] [--heads-kv Hkv]
                            [--dim D] [--dtype float16|bfloat16] [--kernel auto|block|row]
                            [--tile 32|64|128] [--reps N] [--warmup-ms MS] [--check-rows N]
                            [--json FILE]
                            [--peers [--peers-script PATH]]
       stof bench --help

Checks stof's sparse attention for MASK on the GPU against the CPU reference (float32
copies, f64 accumulation) on sampled rows, with the output poisoned (NaN) first, then
times it (CUDA events, warm-up, median) and prints the time, useful TFLOP/s (4 * D * kept
pairs / time), the fraction of the roofline max(FLOPs / peak, Q+K+V+O bytes / bandwidth),
the density, and the kernel and tile the selector chose and why. Needs a GPU.

  MASK            what `stof mask show` takes: a Lua expression over the stof.mask
                  constructors ("longformer(32, 32)", "causal() & sliding(64)",
                  "fn(function(b, h, i, j) return (i - j) % 4 == 0 end)"), or a name of
                  the canonical suite (dense, causal, sliding, causal_sliding, longformer,
                  bigbird, document); S, Sq and Sk are the sequence lengths
  --seq S         the sequence length (required); --seq Sq,Sk for queries != keys
  --batch B       batch elements (1)
  --heads H       query heads (12)
  --heads-kv Hkv  key/value heads (H; fewer: grouped-query attention, H a multiple of it)
  --dim D         head dim (64; the GPU kernels take 64 and 128)
  --dtype T       float16 (default) or bfloat16
  --kernel K      auto (the selector, default), block or row
  --tile T        32, 64 or 128 (default: the selector's; 32 runs block-wise)
  --reps N        timed runs (30); the median is printed
  --warmup-ms MS  warm-up before them: 5 launches, then MS of launches (0). 0 is how the
                  peers are timed (--peers warms them up with 5 launches whatever MS is); on
                  an H200, a few hundred ms of back-to-back launches of a heavy kernel bring
                  the 700 W limit in and the clock down (~1980 to ~1500 MHz): --warmup-ms
                  3000 measures that sustained state, for stof alone
  --check-rows N  rows checked per sampled (b, h) pair (16; all rows when S <= N)
  --json FILE     also append the result to FILE as one line of JSON (and with --peers,
                  one line per peer)
  --peers         then time the peers on the same GPU and mask (bench/peers_mask.py:
                  FlexAttention with a block mask built from the mask, SDPA with it as a
                  boolean mask, FlashAttention-2 and cuDNN where it is dense or causal) and
                  print stof's speed-up over each; the mask travels as bool tensors, so at
                  most 1 GiB of them (Sq x Sk per instance); needs PyTorch
  --peers-script PATH   where peers_mask.py is (bench/peers_mask.py: run from the checkout)
  -h, --help      this text

The same from Lua: stof.bench.attention(mask, {B=, H=, S=, D=, ...}) (docs/ATTENTION.md).
example: stof bench attention "causal() & sliding(256)" --batch 8 --heads 12 --seq 4096 --peers]==]

local DTYPES = {float16 = true, bfloat16 = true}
local KERNELS = {auto = true, block = true, row = true}

local function set_int(field)
  return function(o, v, name) o[field] = common.positive(name, v) end
end

local OPTIONS = {
  ["--seq"] = function(o, v) o.Sq, o.Sk = common.parse_seq(v) end,
  ["--batch"] = set_int("B"),
  ["--heads"] = set_int("H"),
  ["--heads-kv"] = set_int("Hkv"),
  ["--dim"] = set_int("D"),
  ["--reps"] = set_int("reps"),
  ["--warmup-ms"] = function(o, v, name)
    local n = math.tointeger(tonumber(v))
    local most = stof.attention_time_limits.max_warmup_ms
    if not n or n < 0 or n > most then
      fail("%s: expected an integer from 0 to %d, got '%s'", name, most, tostring(v))
    end
    o.warmup_ms = n
  end,
  ["--check-rows"] = function(o, v, name)
    o.check_rows = common.positive(name, v)
    if o.check_rows < 2 then fail("--check-rows: at least 2 (the first and the last row), got %d", o.check_rows) end
  end,
  ["--dtype"] = function(o, v)
    if not DTYPES[v] then fail("--dtype: float16 or bfloat16 (the GPU kernels' types), got '%s'", v) end
    o.dtype = v
  end,
  ["--kernel"] = function(o, v)
    if not KERNELS[v] then fail("--kernel: auto, block or row, got '%s'", v) end
    o.kernel = v
  end,
  ["--tile"] = function(o, v, name)
    o.tile = common.positive(name, v)
    if o.tile ~= 32 and o.tile ~= 64 and o.tile ~= 128 then fail("--tile: 32, 64 or 128, got %d", o.tile) end
  end,
  ["--json"] = function(o, v) o.json = v end,
  ["--peers-script"] = function(o, v) o.peers_script = v end,
}

local FLAGS = {["--peers"] = function(o) o.peers = true end}

local function attention(args)
  local o = common.parse_args(args, "bench attention", {}, OPTIONS, FLAGS, {"expr"},
                              "quote the MASK expression if it has spaces")
  if o.help then return print(USAGE) end
  if not o.expr then fail("missing MASK (see stof bench --help)") end
  if not o.Sq then fail("missing --seq S (the sequence length)") end
  if o.peers_script and not o.peers then fail("--peers-script without --peers") end
  local mask = common.eval_mask(o.expr, o.Sq, o.Sk)
  local ok, r = pcall(stof.bench.attention, mask, {B = o.B, H = o.H, Hkv = o.Hkv, Sq = o.Sq, Sk = o.Sk, D = o.D,
                                                   dtype = o.dtype, kernel = o.kernel, tile = o.tile,
                                                   reps = o.reps, check_rows = o.check_rows})
  if not ok then
    local msg = common.user_error(r)
    if not msg then error(r, 0) end
    if msg:match("^DeviceError: ") then
      local seq = o.Sq == o.Sk and tostring(o.Sq) or ("%d,%d"):format(o.Sq, o.Sk)
      fail("attention needs a GPU, and none can be used here (%s); `stof explain '%s' --seq %s --batch %d "
           .. "--heads %d --dim %d` shows the kernel the selector would pick without one",
           (msg:gsub("^DeviceError: stof%.bench%.attention: needs a GPU %((.*)%)$", "%1")), o.expr, seq, o.B or 1,
           o.H or 12, o.D or 64)
    end
    fail("%s", msg)
  end
  print(stof.bench.report(r))
  local peers
  if o.peers then
    local okp, res = pcall(stof.bench.peers, mask, r, {script = o.peers_script})
    if not okp then
      local msg = common.user_error(res)
      if not msg then error(res, 0) end
      fail("%s", msg)
    end
    peers = res
    print(stof.bench.peers_report(peers))
  end
  if o.json then
    local f, err = io.open(o.json, "a")
    if not f then fail("--json: %s", err) end
    f:write(stof.bench.json(r), "\n")
    for _, x in ipairs(peers or {}) do
      f:write(stof.bench.json({tool = x.impl, mask = r.mask, B = r.B, H = r.H, Hkv = r.Hkv, Sq = r.Sq, Sk = r.Sk,
                               D = r.D, dtype = r.dtype, ms = x.ms, block_mask_ms = x.block_mask_ms,
                               stof_ms = r.ms, speedup = x.speedup, error = x.error}), "\n")
    end
    f:close()
    print("appended to " .. o.json)
  end
end

common.main("bench", USAGE, {attention = attention}, ...)
