-- stof.nn: layers built from stof.te into a graph (DESIGN.md section 3). Each function takes
-- TE tensors and returns a TE tensor; stof.eval runs them on the reference interpreter.
-- This file grows with the models; today it holds the layers the attention work needs.
local stof = require("stof")
local te = stof.te

local nn = {}

--- Sparse attention as an opaque intrinsic: q [B, H, Sq, D], k and v [B, Hkv, Sk, D],
--- mask a stof.mask value; softmax(scale * q k^T, masked) v with scale 1/sqrt(D) unless
--- opts.scale says otherwise. Rows with no kept key give zeros.
function nn.attention(q, k, v, mask, opts)
  return te.attention(q, k, v, mask, opts and opts.scale or nil)
end

--- x [..., n] @ w [n, m] (+ bias [m]).
function nn.linear(x, w, bias, name)
  local xs, n, m = x.shape, w.shape[1], w.shape[2]
  assert(xs[#xs] == n, "nn.linear: x's last dim " .. xs[#xs] .. " is not w's first " .. n)
  local shape = {table.unpack(xs)}
  shape[#shape] = m
  local r = te.reduce_axis(n, (name or "linear") .. "_k")
  local y = te.compute(shape, function(...)
    local idx = {...}
    local j = idx[#idx]
    idx[#idx] = r
    return te.sum(x[idx] * w[{r, j}], {r})
  end, name or "linear")
  if not bias then return y end
  return te.compute(shape, function(...)
    local idx = {...}
    return y[idx] + bias[{idx[#idx]}]
  end, (name or "linear") .. "_bias")
end

return nn
