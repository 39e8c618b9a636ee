-- End-to-end timing of zoo models on the GPU with the default scheme (DESIGN.md section 9):
-- each model at each shape with a mask, built, planned (CUDA-graph replay), seeded random
-- weights; the output is checked for NaN, then timed (median of runs, warm-up first), then
-- timed kernel by kernel for the split (GEMM / attention / the rest). One JSON line per case.
--
--   build-gpu/stof run bench/e2e.lua [MODELS [SHAPES [MASK [REPS [TUNE_SECONDS [DB]]]]]]
--   build-gpu/stof run bench/e2e.lua bert-base,gpt2 1x128,8x512,16x2048 bigbird 30
-- With TUNE_SECONDS > 0 each case is also searched (stof.tune, that budget, records in DB,
-- default /tmp/stof-e2e-tune.jsonl): the line then holds the tuned plan's time (ms), the
-- default plan's (default_ms; both timed in turn after the search, three rounds;
-- default_before_ms is the default plan before the search), the ablation (tune_default_ms, tune_stage1_ms, tune_best_ms as
-- the search measured them), the search's seconds and candidates, and how long a second
-- search of the same workload took to load the best record (resume_s); the split and memory
-- are the tuned plan's.
local stof = require("stof")
local run = require("stof.models.run")

local models = arg[1] or "bert-base,bert-large,gpt2"
local shapes = arg[2] or "1x128,8x512,16x2048"
local mask = arg[3] or "bigbird"
local reps = tonumber(arg[4]) or 30
local tune_s = tonumber(arg[5]) or 0
local tune_db = arg[6] or "/tmp/stof-e2e-tune.jsonl"

local function json(t)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = k end
  table.sort(keys)
  local parts = {}
  for _, k in ipairs(keys) do
    local v = t[k]
    local s
    if type(v) == "string" then s = ("%q"):format(v)
    elseif type(v) == "number" then s = v == math.floor(v) and math.abs(v) < 2^53 and ("%d"):format(v) or ("%.6g"):format(v)
    elseif type(v) == "boolean" then s = tostring(v)
    elseif type(v) == "table" then s = json(v)
    else s = "null" end
    parts[#parts + 1] = ("%q:%s"):format(k, s)
  end
  return "{" .. table.concat(parts, ",") .. "}"
end

local function has_nan(t)
  local n = 1
  local shape = t:shape()
  for _, d in ipairs(shape) do n = n * d end
  local flat = t
  -- sample rows: the whole tensor is large; every 97th element is enough to catch a NaN layer
  local idx = {}
  for k = 0, n - 1, 97 do
    local r = k
    for d = #shape, 1, -1 do idx[d] = r % shape[d]; r = r // shape[d] end
    local v = flat[idx]
    if v ~= v then return true end
  end
  return false
end

local gpu = select(1, stof.cuda_mem_info())
local maxS = 0
for shp in shapes:gmatch("[^,]+") do maxS = math.max(maxS, tonumber(shp:match("x(%d+)"))) end
for name in models:gmatch("[^,]+") do
  local weights
  for shp in shapes:gmatch("[^,]+") do
    local B, S = shp:match("(%d+)x(%d+)")
    B, S = tonumber(B), tonumber(S)
    local row = {kind = "e2e", impl = "stof", model = name, B = B, S = S, mask = mask, dtype = "float16"}
    local ok, err = pcall(function()
      local t0 = os.time()
      -- one set of weights per model, its position table sized for the longest sequence
      local over = {max_position_embeddings = math.max(maxS, name == "gpt2" and 1024 or 512)}
      local r = run.prepare(name, {batch = B, seq = S, mask = mask, dtype = "float16", weights = weights,
                                   overrides = over, verbose = false})
      -- (ViT's position table follows the image, which follows S: new weights per shape)
      weights = not r.image_size and r.weights or nil
      row.S_built = r.seq
      local out = r:run()
      row.nan = has_nan(out)
      row.ms = r:time(reps, 5)
      if tune_s > 0 then
        local opts = {feed = r:feed(), budget = tune_s, db = tune_db, workload = "e2e/" .. r:workload():gsub("/[^/]*$", ""),
                      force = true}
        local plan, res = stof.tune({r.model.output}, opts)
        row.default_ms = row.ms
        row.tune_default_ms, row.tune_stage1_ms, row.tune_best_ms = res.default_ms, res.stage1_ms, res.best_ms
        row.tune_s, row.tune_trials, row.tune_failed, row.tune_rejected = res.seconds, res.trials, res.failed, res.rejected
        opts.force = nil
        local _, again = stof.tune({r.model.output}, opts)
        row.resume_s = again.seconds
        row.resumed = again.from_db
        local default_plan = r.plan
        r.plan = plan
        plan:poison()
        local tout = plan:run()
        row.nan = row.nan or has_nan(tout)
        row.tuned_vs_default = stof.rel_l2(tout:astype("float32"), out:astype("float32"))
        -- the default and the tuned plan timed in turn (3 rounds, each its median round):
        -- both after the search's load, so that the device's state flatters neither;
        -- default_before_ms is the default plan's time before the search
        row.default_before_ms = row.default_ms
        row.default_ms, row.ms = run.time_in_turn(default_plan, plan, reps, 5)
      end
      local split = r:split(10)
      row.gemm_ms, row.attention_ms, row.other_ms, row.kernels_ms = split.gemm, split.attention, split.other, split.total
      local mem = r:memory()
      row.weights_mb, row.arena_mb, row.workspace_mb = mem.weights / 2^20, mem.arena / 2^20, mem.workspace / 2^20
      row.values_mb = mem.values / 2^20
      row.device_mb = mem.total / 2^20
      row.segments = r.plan.nsegment
      row.prepare_s = os.time() - t0
      if gpu then
        local free, total = stof.cuda_mem_info()
        row.gpu_used_mb = (total - free) / 2^20
      end
    end)
    if not ok then row.error = tostring(err):sub(1, 400) end
    print(json(row))
    io.stdout:flush()
    collectgarbage()
  end
  weights = nil
  collectgarbage()
end
