-- `make demo`: one Transformer block (pre-LayerNorm, single-head causal self-attention,
-- then a 2-layer GELU MLP, each with a residual) written as stof tensor expressions,
-- evaluated by the reference interpreter on seeded random inputs, and checked against the
-- same block computed with plain Lua loops; then sparse attention with a BigBird mask
-- through stof's kernels (on the GPU when there is one, checked against the CPU path).
--
--   stof run examples/demo.lua [S DMODEL DFF]
local stof = require("stof")
local te = stof.te

local S, DM, DFF = tonumber(arg[1]) or 61, tonumber(arg[2]) or 64, tonumber(arg[3]) or 256
local EPS, NEG = 1e-5, -1e30
local t0 = os.clock()

-- Building blocks ------------------------------------------------------------------------
local function matmul(X, W, name) -- X [n, k] @ W [k, m]
  local n, kk, m = X.shape[1], X.shape[2], W.shape[2]
  local r = te.reduce_axis(kk, name .. "_k")
  return te.compute({n, m}, function(i, j) return te.sum(X[{i, r}] * W[{r, j}], {r}) end, name)
end

local function layer_norm(X, gamma, beta, name) -- over the last axis
  local n, d = X.shape[1], X.shape[2]
  local r1, r2 = te.reduce_axis(d, name .. "_r1"), te.reduce_axis(d, name .. "_r2")
  local mean = te.compute({n}, function(i) return te.sum(X[{i, r1}] * (1 / d), r1) end, name .. "_mean")
  local var = te.compute({n}, function(i)
    local c = X[{i, r2}] - mean[i]
    return te.sum(c * c * (1 / d), r2)
  end, name .. "_var")
  return te.compute({n, d}, function(i, j)
    return (X[{i, j}] - mean[i]) * te.rsqrt(var[i] + EPS) * gamma[j] + beta[j]
  end, name)
end

local function add(X, Y, name)
  return te.compute(X.shape, function(i, j) return X[{i, j}] + Y[{i, j}] end, name)
end

-- The block ------------------------------------------------------------------------------
local x = te.placeholder({S, DM}, "float32", "x")
local P = {} -- weights, by name: {shape}
local function weight(name, shape) P[name] = te.placeholder(shape, "float32", name); return P[name] end
local g1, b1 = weight("ln1_g", {DM}), weight("ln1_b", {DM})
local wq, wk, wv, wo = weight("wq", {DM, DM}), weight("wk", {DM, DM}), weight("wv", {DM, DM}), weight("wo", {DM, DM})
local g2, b2 = weight("ln2_g", {DM}), weight("ln2_b", {DM})
local w1, w2 = weight("w1", {DM, DFF}), weight("w2", {DFF, DM})

local h = layer_norm(x, g1, b1, "ln1")
local q, k, v = matmul(h, wq, "q"), matmul(h, wk, "k"), matmul(h, wv, "v")
local rd = te.reduce_axis(DM, "rd")
local scale = 1 / math.sqrt(DM)
local scores = te.compute({S, S}, function(i, j)
  return te.sum(q[{i, rd}] * k[{j, rd}], rd)
end, "scores")
local masked = te.compute({S, S}, function(i, j)
  return te.select(te.le(j, i), scores[{i, j}] * scale, NEG) -- causal mask
end, "masked")
local rj1, rj2, rj3 = te.reduce_axis(S, "rj1"), te.reduce_axis(S, "rj2"), te.reduce_axis(S, "rj3")
local mx = te.compute({S}, function(i) return te.max(masked[{i, rj1}], rj1) end, "mx")
local ex = te.compute({S, S}, function(i, j) return te.exp(masked[{i, j}] - mx[i]) end, "ex")
local den = te.compute({S}, function(i) return te.sum(ex[{i, rj2}], rj2) end, "den")
local attn = te.compute({S, DM}, function(i, d)
  return te.sum(ex[{i, rj3}] * v[{rj3, d}], rj3)
end, "attn_unnorm")
local ctx = te.compute({S, DM}, function(i, d) return attn[{i, d}] / den[i] end, "attn")
local x1 = add(x, matmul(ctx, wo, "o"), "x1")
local h2 = layer_norm(x1, g2, b2, "ln2")
local u = matmul(h2, w1, "up")
local gelu = te.compute({S, DFF}, function(i, j)
  local z = u[{i, j}]
  return 0.5 * z * (1 + te.erf(z * (1 / math.sqrt(2))))
end, "gelu")
local y = add(x1, matmul(gelu, w2, "down"), "y")
local t_build = os.clock() - t0

-- Inputs: seeded random values, weights scaled like a real initialisation.
local feed, vals, seed = {}, {}, 100
local function input(ph, scl, shift)
  seed = seed + 1
  local t = stof.rand(ph.shape, "float32", seed)
  local tt = t:totable()
  if scl ~= 1 or shift ~= 0 then
    local function rescale(tbl)
      for i, e in ipairs(tbl) do
        if type(e) == "table" then rescale(e) else tbl[i] = e * scl + shift end
      end
    end
    rescale(tt)
    t = stof.tensor(tt, "float32")
    tt = t:totable() -- the rounded values stof sees
  end
  feed[ph] = t
  vals[ph.name] = tt
end
input(x, 1, 0)
local names = {}
for name in pairs(P) do names[#names + 1] = name end
table.sort(names) -- a fixed order, so every run draws the same weights
for _, name in ipairs(names) do
  local ph = P[name]
  if name:match("_g$") then input(ph, 0.1, 1)
  elseif name:match("_b$") then input(ph, 0.1, 0)
  else input(ph, 1 / math.sqrt(ph.shape[1]), 0) end
end

local t1 = os.clock()
local out = stof.eval(y, feed)
local t_eval = os.clock() - t1

-- Plain Lua reference ----------------------------------------------------------------------
local t2 = os.clock()
local function mm(X, W)
  local n, kk, m = #X, #W, #W[1]
  local R = {}
  for i = 1, n do
    local row, xi = {}, X[i]
    for j = 1, m do
      local s = 0
      for r = 1, kk do s = s + xi[r] * W[r][j] end
      row[j] = s
    end
    R[i] = row
  end
  return R
end
local function ln(X, g, b)
  local R = {}
  for i = 1, #X do
    local d, mean, var = #X[i], 0, 0
    for j = 1, d do mean = mean + X[i][j] end
    mean = mean / d
    for j = 1, d do var = var + (X[i][j] - mean) ^ 2 end
    var = var / d
    local row = {}
    for j = 1, d do row[j] = (X[i][j] - mean) / math.sqrt(var + EPS) * g[j] + b[j] end
    R[i] = row
  end
  return R
end
local function addm(X, Y)
  local R = {}
  for i = 1, #X do R[i] = {}; for j = 1, #X[i] do R[i][j] = X[i][j] + Y[i][j] end end
  return R
end
local function erf(z) -- Abramowitz and Stegun 7.1.26, |error| < 1.5e-7
  local sg = z < 0 and -1 or 1
  z = math.abs(z)
  local t = 1 / (1 + 0.3275911 * z)
  return sg * (1 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t
    + 0.254829592) * t * math.exp(-z * z))
end
local X = vals.x
local Hh = ln(X, vals.ln1_g, vals.ln1_b)
local Qm, Km, Vm = mm(Hh, vals.wq), mm(Hh, vals.wk), mm(Hh, vals.wv)
local C = {}
for i = 1, S do
  local w, m = {}, -math.huge
  for j = 1, i do
    local s = 0
    for d = 1, DM do s = s + Qm[i][d] * Km[j][d] end
    w[j] = s * scale
    m = math.max(m, w[j])
  end
  local sum = 0
  for j = 1, i do w[j] = math.exp(w[j] - m); sum = sum + w[j] end
  C[i] = {}
  for d = 1, DM do
    local acc = 0
    for j = 1, i do acc = acc + w[j] * Vm[j][d] end
    C[i][d] = acc / sum
  end
end
local X1 = addm(X, mm(C, vals.wo))
local U = mm(ln(X1, vals.ln2_g, vals.ln2_b), vals.w1)
for i = 1, S do for j = 1, DFF do local z = U[i][j]; U[i][j] = 0.5 * z * (1 + erf(z / math.sqrt(2))) end end
local Y = addm(X1, mm(U, vals.w2))
local t_ref = os.clock() - t2

-- Compare ---------------------------------------------------------------------------------
local yt = out:totable()
local num, dnm, maxerr = 0, 0, 0
for i = 1, S do
  for j = 1, DM do
    local e = yt[i][j] - Y[i][j]
    num, dnm = num + e * e, dnm + Y[i][j] * Y[i][j]
    maxerr = math.max(maxerr, math.abs(e))
  end
end
local rel = math.sqrt(num / dnm)

local macs = S * DM * DM * 4 + S * S * DM + S * S * DM + 2 * S * DM * DFF
print("stof demo: one Transformer block, evaluated by stof's reference interpreter")
print(("  x [%d, %d] -> LayerNorm -> q, k, v = x W (each [%d, %d])"):format(S, DM, DM, DM))
print(("  causal single-head attention over S = %d tokens (mask: te.select(te.le(j, i), ...))"):format(S))
print(("  -> output projection + residual -> LayerNorm -> MLP %d -> %d (GELU) -> %d + residual"):format(DM, DFF, DM))
print(("  %d parameters, about %.1f M multiply-adds"):format(DM * 4 + 4 * DM * DM + 2 * DM * DFF, macs / 1e6))
print(("  build %.3f s, stof.eval %.3f s, plain-Lua reference %.3f s"):format(t_build, t_eval, t_ref))
print(("  y[0, 0..3] = %.5f %.5f %.5f %.5f"):format(yt[1][1], yt[1][2], yt[1][3], yt[1][4]))
print(("  relative L2 error vs plain Lua: %.3g (max abs %.3g)"):format(rel, maxerr))
if not (rel < 1e-5) then error(("demo: mismatch, relative L2 error %g"):format(rel)) end

-- Part 2: sparse attention through stof's kernels ------------------------------------------
-- A BigBird mask (window, global tokens, random blocks); the selector says which kernel it
-- picks and why; on a GPU the NVRTC-compiled kernel runs and is checked against the CPU
-- implementation, which walks the same two-level format.
local M = stof.mask
local Bs, Hs, Ss, Ds = 2, 4, 1000, 64
local mask = M.bigbird(32, 32, 32, 0.1, 0)
local _, choice = stof.explain(mask, {S = Ss, B = Bs, H = Hs, D = Ds})
print(("sparse attention: %s, B %d, H %d, S %d, D %d"):format(tostring(mask), Bs, Hs, Ss, Ds))
print("  selector: " .. choice.why)
local q = stof.rand({Bs, Hs, Ss, Ds}, "float16", 7)
local k = stof.rand({Bs, Hs, Ss, Ds}, "float16", 8)
local v = stof.rand({Bs, Hs, Ss, Ds}, "float16", 9)
local f32 = function(t) return t:astype("float32") end
local t3 = os.clock()
local ref = stof.attention(f32(q), f32(k), f32(v), mask)
print(("  CPU implementation (f32 in, f64 accumulation): %.2f s"):format(os.clock() - t3))
local on_gpu, qd = pcall(function() return q:to("cuda") end)
if on_gpu then
  local o = stof.attention(qd, k:to("cuda"), v:to("cuda"), mask):to("cpu")
  local err = stof.rel_l2(f32(o), ref)
  print(("  GPU kernel: relative L2 error vs the CPU implementation %.2e"):format(err))
  if not (err < 1e-2) then error(("demo: GPU attention mismatch, relative L2 error %g"):format(err)) end
else
  print("  no GPU here (" .. tostring(qd):gsub("^.-Error: ", "") .. "): the GPU run is skipped")
end
print("ok")
