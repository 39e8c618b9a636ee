-- A user template that the search chooses where it is faster: a GEMM whose weight is
-- [K, N] (GPT-2's Conv1D layout) with its bias and tanh GELU, on the C backend. The
-- built-in "auto" runs the GEMM's loops as i, j, k (the inner k loop strides through w by
-- N); the template "gemm_rows" computes one row of the GEMM at a time under the GELU's row
-- loop, with j innermost (contiguous in w and in the row, vectorized) and the bias inlined.
-- Measured on the development machine (2 cores, gcc 12 -O2): auto 3.0 ms, the vendor GEMM
-- (the CPU implementation, f64 accumulation) 4.1 ms, gemm_rows 0.5 ms. The tuned plan must
-- use the template (Plan:segments() and the database's best record say so), match the
-- interpreter and beat auto by more than 1.3x.
local stof = require("stof")
local te, nn = stof.te, stof.nn

local M, K, N = 64, 256, 256
local x = te.placeholder({M, K}, "float32", "x")
local w = te.placeholder({K, N}, "float32", "w")
local b = te.placeholder({N}, "float32", "b")
local y = nn.gelu_tanh(nn.linear(x, w, b, "fc"), "fc.gelu")
local feed = {[x] = stof.rand({M, K}, "float32", 1), [w] = stof.rand({K, N}, "float32", 2),
              [b] = stof.rand({N}, "float32", 3)}
local want = stof.eval(y, feed)

-- A GEMM segment whose other ops are elementwise (bias, activation, residual).
local epilogue = {bias_add = true, gelu_tanh = true, gelu = true, relu = true, residual_add = true}
stof.search.template("gemm_rows", {
  matches = function(seg)
    if seg.tags[1] ~= "gemm" or #seg.ops < 2 then return false end
    for i = 2, #seg.tags do if not epilogue[seg.tags[i]] then return false end end
    return true
  end,
  schedule = function(s, seg)
    local gemm, out = s:get_block(seg.ops[1]), s:get_block(seg.ops[#seg.ops])
    for i = 2, #seg.ops - 1 do s:compute_inline(s:get_block(seg.ops[i])) end
    local rows = s:get_loops(out)
    s:compute_at(gemm, rows[#rows - 1])      -- one row of the GEMM per row of the output
    local l = s:get_loops(gemm)              -- rows..., j, k
    s:reorder(l[#l], l[#l - 1])              -- rows..., k, j
    s:vectorize(l[#l - 1])
  end})

local function check(plan, what)
  plan:poison()
  local e = stof.rel_l2(plan:run(), want)
  assert(e <= 1e-5, ("%s: relative L2 error %g"):format(what, e))
end

-- "auto" on the segment: the plan without the vendor GEMM runs the default schedule
local auto = stof.plan(y, {target = "c", vendor_gemm = false})
auto:bind(feed)
assert(auto:segments()[1].detail:find("default schedule", 1, true), auto:segments()[1].detail)
check(auto, "auto")

local path = os.tmpname()
os.remove(path)
local plan, r = stof.tune(y, {feed = feed, target = "c", db = path, workload = "gemm_rows", budget = 30, trials = 8,
                              reps = 5, seed = 1})
check(plan, "tuned")
local seg = plan:segments()[1]
assert(plan.nsegment == 1 and seg.kind == "generated", seg.kind)
assert(seg.detail:find("template gemm_rows", 1, true), "the tuned plan does not use the template: " .. seg.detail)
local db <close> = stof.db.open(path)
local best = assert(db:best(r.workload, "cpu"))
assert(best.knobs["s0@gemm_rows"] == 1, "the best record does not name the template")
db:close()
os.remove(path)

-- it wins clearly: the same plan timed beside auto's (medians, interleaved)
local ta, tt = {}, {}
for i = 1, 3 do
  ta[i] = auto:time(10, 2)
  tt[i] = plan:time(10, 2)
end
table.sort(ta)
table.sort(tt)
local speedup = ta[2] / tt[2]
print(("test_tune_template: auto %.3f ms, vendor (default) %.3f ms, gemm_rows %.3f ms: %.1fx over auto"):format(
  ta[2], r.default_ms, tt[2], speedup))
assert(speedup > 1.3, ("gemm_rows is only %.2fx faster than auto"):format(speedup))
assert(r.best_ms < r.default_ms)
print("test_tune_template: ok")
