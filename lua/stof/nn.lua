-- stof.nn: Transformer layers built from stof.te (DESIGN.md sections 3 and 8). Each layer
-- takes TE tensors and returns a TE tensor; stof.eval runs it on the reference interpreter.
--
-- Invariants the runtime relies on:
-- - every op a layer builds carries a tag (te.compute's 5th argument) naming what it is;
--   the runtime maps tagged ops to its templates (GEMM + bias + activation + residual,
--   layer norm, softmax, ...). The vocabulary is `nn.TAGS`; stof.eval ignores tags.
-- - a GEMM's body is exactly sum(x[..., k] * w[k, j]) (or w[j, k]): no casts, output in x's
--   dtype; leading dims are kept (the runtime flattens them).
-- - normalisations, softmax and activations compute in float32 and store in the input
--   dtype; their reductions are float32 ops of their own.
-- - no generated load reads outside a tensor: data-dependent indices (embedding ids) are
--   clamped into range.
-- - op names follow the caller's name prefix ("encoder.layer.3.attention.self.query"), so
--   a printed graph or a profile reads like the model.
--
-- Every layer checks its arguments and raises "nn.<layer>: <cause>" at the caller's line.
local stof = require("stof")
local te = stof.te

local nn = {}

nn.TAGS = {
  "embedding", "add", "gemm", "bias_add", "gelu", "gelu_tanh", "relu", "silu",
  "residual_add", "mul", "layer_norm_stat", "layer_norm", "rms_norm_stat", "rms_norm",
  "softmax_stat", "softmax", "split_heads", "merge_heads", "rotary", "rotary_table", "swiglu",
  "patches", "concat",
}

-- ---------------------------------------------------------------- argument checks

local FLOATS = {float32 = true, float16 = true, bfloat16 = true}
local INTS = {int32 = true, int64 = true}

local SELF = debug and debug.getinfo and debug.getinfo(1, "S").source

-- Raises the message at the line that called the layer: the first frame outside this file.
local function fail(fmt, ...)
  local level = 2
  if SELF then
    while true do
      local info = debug.getinfo(level, "S")
      if not info or info.source ~= SELF then break end
      level = level + 1
    end
  end
  error(fmt:format(...), level)
end

-- te.compute for the layers: an error it raises (an extent of 0 in x's shape, an index out
-- of int64) is raised again at the line that called the layer, naming the op, instead of at
-- this file's line (the location of this file is dropped from the message; any other kept).
local HERE = SELF and SELF:sub(1, 1) == "@" and SELF:sub(2) .. ":" or nil
local function compute(shape, body, name, ...)
  local ok, r = pcall(te.compute, shape, body, name, ...)
  if ok then return r end
  local msg = tostring(r)
  if HERE and msg:sub(1, #HERE) == HERE then msg = msg:gsub("^[^:]*:%d+: ", "", 1) end
  fail("%s (building op %s)", msg, tostring(name))
end

local function is_te(x)
  local mt = type(x) == "userdata" and getmetatable(x)
  return type(mt) == "table" and mt.__name == "stof.TeTensor"
end

local function shape_str(s)
  return "[" .. table.concat(s, ", ") .. "]"
end

local function check_te(layer, what, x, min_ndim)
  if not is_te(x) then fail("%s: %s must be a te tensor, got %s", layer, what, type(x)) end
  if min_ndim and x.ndim < min_ndim then
    fail("%s: %s %s has %d dims, at least %d expected", layer, what, shape_str(x.shape), x.ndim, min_ndim)
  end
  return x
end

local function check_float(layer, what, x)
  if not FLOATS[x.dtype] then
    fail("%s: %s has dtype %s, a float dtype expected", layer, what, x.dtype)
  end
end

local function check_vector(layer, what, v, n, dtype)
  check_te(layer, what, v)
  if v.ndim ~= 1 or v.shape[1] ~= n then
    fail("%s: %s has shape %s, [%d] expected", layer, what, shape_str(v.shape), n)
  end
  if dtype and v.dtype ~= dtype then
    fail("%s: %s has dtype %s, %s expected (that of x)", layer, what, v.dtype, dtype)
  end
end

local function check_same(layer, a, b)
  check_te(layer, "a", a)
  check_te(layer, "b", b)
  local sa, sb = a.shape, b.shape
  local same = #sa == #sb
  for d = 1, #sa do same = same and sa[d] == sb[d] end
  if not same then
    fail("%s: shapes %s and %s differ", layer, shape_str(sa), shape_str(sb))
  end
  if a.dtype ~= b.dtype then fail("%s: dtypes %s and %s differ", layer, a.dtype, b.dtype) end
end

-- Refuses a key of opts that is not in known (a misspelt option never passes for a default:
-- {thetta = 500000} would have built LLaMA's rotary with theta 10000).
local function check_keys(layer, opts, known)
  for k in pairs(opts) do
    local ok = false
    for _, n in ipairs(known) do ok = ok or n == k end
    if not ok then fail("%s: unknown option %q (known: %s)", layer, tostring(k), table.concat(known, ", ")) end
  end
end

local function check_name(layer, name, default)
  if name == nil then return default end
  if type(name) ~= "string" then fail("%s: name must be a string, got %s", layer, type(name)) end
  return name
end

local function check_number(layer, what, v)
  if type(v) ~= "number" then fail("%s: %s must be a number, got %s", layer, what, type(v)) end
  if v ~= v or v == math.huge or v == -math.huge then
    fail("%s: %s must be a finite number, got %s", layer, what, tostring(v))
  end
  return v
end

-- ---------------------------------------------------------------- helpers

-- e in float32 (no cast when it already is).
local function f32(e)
  if e.dtype == "float32" then return e end
  return e:astype("float32")
end

-- e stored as dtype.
local function as(e, dtype)
  if e.dtype == dtype then return e end
  return e:astype(dtype)
end

local function copy(t)
  return {table.unpack(t)}
end

-- The shape of x without its last dim.
local function rows_of(x)
  local s = copy(x.shape)
  s[#s] = nil
  return s
end

-- ---------------------------------------------------------------- embeddings

--- ids int32/int64 [...], table [V, E] -> [..., E]: table[clamp(ids[...], 0, V-1), e].
--- An out-of-range id reads the nearest row (0 or V-1), never outside the table. Tag
--- "embedding".
function nn.embedding(ids, tbl, name)
  local layer = "nn.embedding"
  check_te(layer, "ids", ids)
  check_te(layer, "table", tbl)
  name = check_name(layer, name, "embedding")
  if not INTS[ids.dtype] then fail("%s: ids has dtype %s, int32 or int64 expected", layer, ids.dtype) end
  check_float(layer, "table", tbl)
  if tbl.ndim ~= 2 then fail("%s: table has shape %s, [V, E] expected", layer, shape_str(tbl.shape)) end
  local V, E = tbl.shape[1], tbl.shape[2]
  local shape = copy(ids.shape)
  shape[#shape + 1] = E
  return compute(shape, function(...)
    local idx = {...}
    local e = idx[#idx]
    idx[#idx] = nil
    local id = te.min(te.max(ids[idx], 0), V - 1)
    return tbl[{id, e}]
  end, name, nil, "embedding")
end

--- The learned position embeddings of positions offset .. offset + seq - 1 for every batch
--- element: table [P, E] (or [1, P, E], as ViT stores it) -> [batch, seq, E]. Tag
--- "embedding".
function nn.position_embedding(tbl, batch, seq, name, offset)
  local layer = "nn.position_embedding"
  check_te(layer, "table", tbl)
  name = check_name(layer, name, "position_embedding")
  offset = offset or 0
  for _, a in ipairs({{"batch", batch}, {"seq", seq}, {"offset", offset}}) do
    if math.type(a[2]) ~= "integer" or a[2] < 0 then
      fail("%s: %s must be a non-negative integer, got %s", layer, a[1], tostring(a[2]))
    end
  end
  local lead = tbl.ndim == 3 and tbl.shape[1] == 1
  if tbl.ndim ~= 2 and not lead then
    fail("%s: table has shape %s, [P, E] or [1, P, E] expected", layer, shape_str(tbl.shape))
  end
  local P, E = tbl.shape[tbl.ndim - 1], tbl.shape[tbl.ndim]
  if offset + seq > P then
    fail("%s: positions up to %d need a table of at least %d rows, it has %d", layer,
      offset + seq - 1, offset + seq, P)
  end
  return compute({batch, seq, E}, function(_, s, e)
    if lead then return tbl[{0, s + offset, e}] end
    return tbl[{s + offset, e}]
  end, name, nil, "embedding")
end

-- ---------------------------------------------------------------- linear

--- x [..., K] @ w (+ bias [N]) -> [..., N]. w is [K, N] (GPT-2's Conv1D), or [N, K] with
--- opts.transposed (PyTorch's nn.Linear: BERT, LLaMA, T5, ViT). opts is a table
--- {name =, transposed =} or the name itself. The GEMM op (tag "gemm") is named after
--- the layer; the bias is a separate op "<name>.bias" (tag "bias_add").
function nn.linear(x, w, bias, opts)
  local layer = "nn.linear"
  if type(opts) == "string" then opts = {name = opts} end
  if opts ~= nil and type(opts) ~= "table" then
    fail("%s: opts must be a table or a name, got %s", layer, type(opts))
  end
  opts = opts or {}
  check_keys(layer, opts, {"name", "transposed"})
  local name = check_name(layer, opts.name, "linear")
  check_te(layer, "x", x, 1)
  check_te(layer, "w", w)
  check_float(layer, "x", x)
  if w.ndim ~= 2 then fail("%s: w has shape %s, a matrix expected", layer, shape_str(w.shape)) end
  if w.dtype ~= x.dtype then fail("%s: w has dtype %s, x %s", layer, w.dtype, x.dtype) end
  local K = x.shape[x.ndim]
  local N, wk
  if opts.transposed then N, wk = w.shape[1], w.shape[2] else wk, N = w.shape[1], w.shape[2] end
  if wk ~= K then
    fail("%s: x %s and w %s%s: x's last dim %d is not w's %s dim %d", layer, shape_str(x.shape),
      shape_str(w.shape), opts.transposed and " (transposed, [N, K])" or " ([K, N])", K,
      opts.transposed and "second" or "first", wk)
  end
  if bias ~= nil then check_vector(layer, "bias", bias, N, x.dtype) end
  local shape = copy(x.shape)
  shape[#shape] = N
  local k = te.reduce_axis(K, name .. ".k")
  local y
  if opts.transposed then
    y = compute(shape, function(...)
      local idx = {...}
      local j = idx[#idx]
      idx[#idx] = k
      return te.sum(x[idx] * w[{j, k}], {k})
    end, name, nil, "gemm")
  else
    y = compute(shape, function(...)
      local idx = {...}
      local j = idx[#idx]
      idx[#idx] = k
      return te.sum(x[idx] * w[{k, j}], {k})
    end, name, nil, "gemm")
  end
  if bias == nil then return y end
  return compute(shape, function(...)
    local idx = {...}
    return y[idx] + bias[{idx[#idx]}]
  end, name .. ".bias", nil, "bias_add")
end

-- ---------------------------------------------------------------- elementwise

-- One op of one input x: body(v) with v = x[idx] in float32, stored in x's dtype.
local function unary(layer, tag, x, name, body)
  check_te(layer, "x", x)
  check_float(layer, "x", x)
  name = check_name(layer, name, tag)
  local dtype = x.dtype
  return compute(x.shape, function(...)
    return as(body(f32(x[{...}])), dtype)
  end, name, nil, tag)
end

local SQRT1_2 = 1 / math.sqrt(2)
local SQRT_2_PI = math.sqrt(2 / math.pi)

--- GELU, erf form: 0.5 x (1 + erf(x / sqrt 2)). Tag "gelu".
function nn.gelu(x, name)
  return unary("nn.gelu", "gelu", x, name, function(v)
    return 0.5 * v * (1 + te.erf(v * SQRT1_2))
  end)
end

--- GELU, tanh form (GPT-2's gelu_new): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
--- Tag "gelu_tanh".
function nn.gelu_tanh(x, name)
  return unary("nn.gelu_tanh", "gelu_tanh", x, name, function(v)
    return 0.5 * v * (1 + te.tanh(SQRT_2_PI * (v + 0.044715 * v * v * v)))
  end)
end

--- max(x, 0). Tag "relu".
function nn.relu(x, name)
  return unary("nn.relu", "relu", x, name, function(v) return te.max(v, 0.0) end)
end

--- x sigmoid(x). Tag "silu".
function nn.silu(x, name)
  return unary("nn.silu", "silu", x, name, function(v) return v * te.sigmoid(v) end)
end

-- Hugging Face's activation names (hidden_act, activation_function) -> layers.
local ACTIVATIONS = {
  gelu = nn.gelu, gelu_new = nn.gelu_tanh, gelu_pytorch_tanh = nn.gelu_tanh,
  gelu_tanh = nn.gelu_tanh, relu = nn.relu, silu = nn.silu, swish = nn.silu,
}

--- The layer for a Hugging Face activation name ("gelu", "gelu_new", "relu", "silu", ...),
--- or nil and the list of known names.
function nn.activation(act)
  if ACTIVATIONS[act] then return ACTIVATIONS[act] end
  local names = {}
  for k in pairs(ACTIVATIONS) do names[#names + 1] = k end
  table.sort(names)
  return nil, table.concat(names, ", ")
end

local function binary(layer, tag, a, b, name, fn)
  check_same(layer, a, b)
  name = check_name(layer, name, tag)
  return compute(a.shape, function(...)
    local idx = {...}
    return fn(a[idx], b[idx])
  end, name, nil, tag)
end

--- a + b, same shapes and dtypes. Tag "residual_add", or tag = "add" for other sums (the
--- embeddings' word + position + token type).
function nn.add(a, b, name, tag)
  tag = tag or "residual_add"
  if tag ~= "residual_add" and tag ~= "add" then
    fail("nn.add: tag must be \"residual_add\" or \"add\", got %s", tostring(tag))
  end
  return binary("nn.add", tag, a, b, name, function(x, y) return x + y end)
end

--- a * b, same shapes and dtypes (SwiGLU's gate). Tag "mul".
function nn.mul(a, b, name)
  return binary("nn.mul", "mul", a, b, name, function(x, y) return x * y end)
end

--- silu(gate) * up in float32, stored in gate's dtype: LLaMA's gated feed-forward in one
--- op (same shapes and dtypes). Tag "swiglu".
function nn.swiglu(gate, up, name)
  local layer = "nn.swiglu"
  check_same(layer, gate, up)
  check_float(layer, "gate", gate)
  local dtype = gate.dtype
  return binary(layer, "swiglu", gate, up, name, function(g, u)
    g = f32(g)
    return as(g * te.sigmoid(g) * f32(u), dtype)
  end)
end

-- ---------------------------------------------------------------- normalisation

local function check_norm(layer, x, gamma, beta, eps)
  check_te(layer, "x", x, 1)
  check_float(layer, "x", x)
  local d = x.shape[x.ndim]
  check_vector(layer, "gamma", gamma, d, x.dtype)
  if beta ~= nil then check_vector(layer, "beta", beta, d, x.dtype) end
  check_number(layer, "eps", eps)
  if eps < 0 then fail("%s: eps %g is negative", layer, eps) end
  return d
end

--- Layer norm over the last axis: (x - mean) / sqrt(var + eps) * gamma + beta. Ops
--- "<name>.mean" and "<name>.var" (float32, tag "layer_norm_stat"), then "<name>" (tag
--- "layer_norm", stored in x's dtype).
function nn.layer_norm(x, gamma, beta, eps, name)
  local layer = "nn.layer_norm"
  local d = check_norm(layer, x, gamma, beta, eps)
  if beta == nil then fail("%s: beta is missing", layer) end
  name = check_name(layer, name, "layer_norm")
  local rows, inv = rows_of(x), 1 / d
  local r1, r2 = te.reduce_axis(d, name .. ".r1"), te.reduce_axis(d, name .. ".r2")
  local mean = compute(rows, function(...)
    local idx = {...}
    idx[#idx + 1] = r1
    return te.sum(f32(x[idx]) * inv, {r1})
  end, name .. ".mean", nil, "layer_norm_stat")
  local var = compute(rows, function(...)
    local idx = {...}
    local m = mean[idx]
    idx[#idx + 1] = r2
    local c = f32(x[idx]) - m
    return te.sum(c * c * inv, {r2})
  end, name .. ".var", nil, "layer_norm_stat")
  local dtype = x.dtype
  return compute(x.shape, function(...)
    local idx = {...}
    local j = idx[#idx]
    local v = f32(x[idx])
    idx[#idx] = nil
    local y = (v - mean[idx]) * te.rsqrt(var[idx] + eps) * f32(gamma[j]) + f32(beta[j])
    return as(y, dtype)
  end, name, nil, "layer_norm")
end

--- RMS norm over the last axis: x / sqrt(mean(x^2) + eps) * gamma. Ops "<name>.ms"
--- (float32, tag "rms_norm_stat"), then "<name>" (tag "rms_norm", in x's dtype).
function nn.rms_norm(x, gamma, eps, name)
  local layer = "nn.rms_norm"
  local d = check_norm(layer, x, gamma, nil, eps)
  name = check_name(layer, name, "rms_norm")
  local rows, inv = rows_of(x), 1 / d
  local r = te.reduce_axis(d, name .. ".r")
  local ms = compute(rows, function(...)
    local idx = {...}
    idx[#idx + 1] = r
    local v = f32(x[idx])
    return te.sum(v * v * inv, {r})
  end, name .. ".ms", nil, "rms_norm_stat")
  local dtype = x.dtype
  return compute(x.shape, function(...)
    local idx = {...}
    local j = idx[#idx]
    local v = f32(x[idx])
    idx[#idx] = nil
    return as(v * te.rsqrt(ms[idx] + eps) * f32(gamma[j]), dtype)
  end, name, nil, "rms_norm")
end

--- Softmax over the last axis: exp(x - max) / sum(exp(x - max)). Ops "<name>.max" and
--- "<name>.sum" (float32, tag "softmax_stat"), then "<name>" (tag "softmax", in x's dtype).
function nn.softmax(x, name)
  local layer = "nn.softmax"
  check_te(layer, "x", x, 1)
  check_float(layer, "x", x)
  name = check_name(layer, name, "softmax")
  local d, rows = x.shape[x.ndim], rows_of(x)
  local r1, r2 = te.reduce_axis(d, name .. ".r1"), te.reduce_axis(d, name .. ".r2")
  local mx = compute(rows, function(...)
    local idx = {...}
    idx[#idx + 1] = r1
    return te.max(f32(x[idx]), {r1})
  end, name .. ".max", nil, "softmax_stat")
  local sum = compute(rows, function(...)
    local idx = {...}
    local m = mx[idx]
    idx[#idx + 1] = r2
    return te.sum(te.exp(f32(x[idx]) - m), {r2})
  end, name .. ".sum", nil, "softmax_stat")
  local dtype = x.dtype
  return compute(x.shape, function(...)
    local idx = {...}
    local v = f32(x[idx])
    idx[#idx] = nil
    return as(te.exp(v - mx[idx]) / sum[idx], dtype)
  end, name, nil, "softmax")
end

-- ---------------------------------------------------------------- heads

-- [B, S, n*H*D] -> [B, H, S, D], the slice that starts at column offset. Tag "split_heads".
local function split(x, heads, D, offset, name)
  local B, S = x.shape[1], x.shape[2]
  return compute({B, heads, S, D}, function(b, h, s, d)
    local c = h * D + d
    if offset ~= 0 then c = c + offset end
    return x[{b, s, c}]
  end, name, nil, "split_heads")
end

local function check_heads(layer, x, heads, parts)
  check_te(layer, "x", x)
  if x.ndim ~= 3 then fail("%s: x has shape %s, [B, S, C] expected", layer, shape_str(x.shape)) end
  if math.type(heads) ~= "integer" or heads <= 0 then
    fail("%s: heads must be a positive integer, got %s", layer, tostring(heads))
  end
  local C = x.shape[3]
  if C % (parts * heads) ~= 0 then
    fail("%s: the last dim %d of x is not a multiple of %s%d heads", layer, C,
      parts > 1 and parts .. " x " or "", heads)
  end
  return C // (parts * heads)
end

--- x [B, S, H*D] -> [B, H, S, D]. Tag "split_heads".
function nn.split_heads(x, heads, name)
  local layer = "nn.split_heads"
  local D = check_heads(layer, x, heads, 1)
  name = check_name(layer, name, "split_heads")
  return split(x, heads, D, 0, name)
end

--- A fused QKV projection x [B, S, 3*H*D] (q, then k, then v along the last dim, as GPT-2's
--- c_attn) -> q, k, v [B, H, S, D]: ops "<name>.q", "<name>.k", "<name>.v", tag
--- "split_heads".
function nn.split_qkv(x, heads, name)
  local layer = "nn.split_qkv"
  local D = check_heads(layer, x, heads, 3)
  name = check_name(layer, name, "split_qkv")
  local E = heads * D
  return split(x, heads, D, 0, name .. ".q"), split(x, heads, D, E, name .. ".k"),
    split(x, heads, D, 2 * E, name .. ".v")
end

--- x [B, H, S, D] -> [B, S, H*D]. Tag "merge_heads".
function nn.merge_heads(x, name)
  local layer = "nn.merge_heads"
  check_te(layer, "x", x)
  if x.ndim ~= 4 then fail("%s: x has shape %s, [B, H, S, D] expected", layer, shape_str(x.shape)) end
  name = check_name(layer, name, "merge_heads")
  local B, H, S, D = table.unpack(x.shape)
  return compute({B, S, H * D}, function(b, s, c)
    return x[{b, c // D, s, c % D}]
  end, name, nil, "merge_heads")
end

-- ---------------------------------------------------------------- rotary positions

-- The angle of position p and pair i of a head dim D: p * theta^(-2i/D), float32 (Hugging
-- Face: inv_freq = 1 / theta^(2i / D), angle = position * inv_freq).
local function rotary_angle(theta, D, p, d)
  local inv = 1.0 / te.pow(te.const(theta, "float32"), (d % (D // 2)):astype("float32") * (2.0 / D))
  return p:astype("float32") * inv
end

local function rotary_opts(layer, opts, keys)
  if type(opts) == "string" then opts = {name = opts} end
  if opts ~= nil and type(opts) ~= "table" then
    fail("%s: opts must be a table or a name, got %s", layer, type(opts))
  end
  opts = opts or {}
  check_keys(layer, opts, keys)
  local theta = opts.theta == nil and 10000.0 or check_number(layer, "opts.theta", opts.theta)
  if theta <= 0 then fail("%s: opts.theta %g is not positive", layer, theta) end
  local offset = opts.offset or 0
  if math.type(offset) ~= "integer" or offset < 0 then
    fail("%s: opts.offset must be a non-negative integer, got %s", layer, tostring(offset))
  end
  return opts, theta, offset
end

--- The cos and sin of every rotary angle, once for a model: [2, S, D] float32 with
--- table[0, s, d] = cos a and table[1, s, d] = sin a, a = (s + offset) theta^(-2i/D),
--- i = d mod D/2. nn.rotary(x, {table = t}) reads it instead of computing the angles per
--- element (a pow, a cos and a sin for each element of every q and k of every layer; the
--- same float32 operations, though a GPU kernel may round their last bit differently). opts: {theta = (10000), offset = (0), name =} or the
--- name. Tag "rotary_table".
function nn.rotary_table(S, D, opts)
  local layer = "nn.rotary_table"
  if math.type(S) ~= "integer" or S < 1 then fail("%s: S must be a positive integer, got %s", layer, tostring(S)) end
  if math.type(D) ~= "integer" or D < 2 or D % 2 ~= 0 then
    fail("%s: D must be a positive even integer, got %s", layer, tostring(D))
  end
  local theta, offset
  opts, theta, offset = rotary_opts(layer, opts, {"name", "theta", "offset"})
  local name = check_name(layer, opts.name, "rotary_table")
  return compute({2, S, D}, function(c, s, d)
    local a = rotary_angle(theta, D, offset ~= 0 and s + offset or s, d)
    return te.select(te.eq(c, 0), te.cos(a), te.sin(a))
  end, name, nil, "rotary_table")
end

--- Rotary position embedding (Hugging Face Llama's rotate-half form) of x [B, H, S, D]
--- after the head split: with half = D/2, i = d mod half, p = s + offset and
--- a = p * theta^(-2i/D),
---   out[..., d] = x[..., d] cos a - x[..., d + half] sin a   (d < half)
---   out[..., d] = x[..., d] cos a + x[..., d - half] sin a   (d >= half).
--- opts: {theta = (10000), offset = (0), table =, name =} or the name. The angle, its cos
--- and sin are float32; the result is stored in x's dtype. With table (nn.rotary_table of
--- at least S positions and x's head dim; theta and offset are then the table's) the cos
--- and sin are read from it. Tag "rotary".
function nn.rotary(x, opts)
  local layer = "nn.rotary"
  local theta, offset
  opts, theta, offset = rotary_opts(layer, opts, {"name", "theta", "offset", "table"})
  check_te(layer, "x", x)
  check_float(layer, "x", x)
  if x.ndim ~= 4 then fail("%s: x has shape %s, [B, H, S, D] expected", layer, shape_str(x.shape)) end
  local name = check_name(layer, opts.name, "rotary")
  local D = x.shape[4]
  if D % 2 ~= 0 then fail("%s: the head dim %d of x %s is odd", layer, D, shape_str(x.shape)) end
  local half, dtype, tab = D // 2, x.dtype, opts.table
  if tab ~= nil then
    check_te(layer, "opts.table", tab)
    if tab.ndim ~= 3 or tab.shape[1] ~= 2 or tab.shape[2] < x.shape[3] or tab.shape[3] ~= D
      or tab.dtype ~= "float32" then
      fail("%s: opts.table is %s %s, float32 [2, >= %d, %d] expected (nn.rotary_table)", layer, tab.dtype,
           shape_str(tab.shape), x.shape[3], D)
    end
    if opts.theta ~= nil or opts.offset ~= nil then
      fail("%s: opts.theta and opts.offset are the table's; give them to nn.rotary_table", layer)
    end
  end
  return compute(x.shape, function(b, h, s, d)
    local c, sn
    if tab then
      c, sn = tab[{0, s, d}], tab[{1, s, d}]
    else
      local a = rotary_angle(theta, D, offset ~= 0 and s + offset or s, d)
      c, sn = te.cos(a), te.sin(a)
    end
    local v, w = f32(x[{b, h, s, d}]), f32(x[{b, h, s, (d + half) % D}])
    return as(v * c + te.select(te.lt(d, half), -w, w) * sn, dtype)
  end, name, nil, "rotary")
end

-- ---------------------------------------------------------------- vision

--- Non-overlapping patches of pixels [B, C, Hi, Wi] (Hi, Wi multiples of patch) as rows:
--- [B, (Hi/p)(Wi/p), C p p], patches in row-major order over the image and each row in the
--- order (c, kh, kw), so that a convolution weight [E, C, p, p] read as [E, C p p] is the
--- weight of a transposed nn.linear (ViT's patch embedding as a GEMM). Tag "patches".
function nn.patches(pixels, patch, name)
  local layer = "nn.patches"
  check_te(layer, "pixels", pixels)
  check_float(layer, "pixels", pixels)
  if pixels.ndim ~= 4 then
    fail("%s: pixels has shape %s, [B, C, H, W] expected", layer, shape_str(pixels.shape))
  end
  if math.type(patch) ~= "integer" or patch <= 0 then
    fail("%s: patch must be a positive integer, got %s", layer, tostring(patch))
  end
  name = check_name(layer, name, "patches")
  local B, Cn, Hi, Wi = table.unpack(pixels.shape)
  if Hi % patch ~= 0 or Wi % patch ~= 0 then
    fail("%s: the image %dx%d is not a multiple of the patch size %d", layer, Hi, Wi, patch)
  end
  local nw, pp = Wi // patch, patch * patch
  return compute({B, (Hi // patch) * nw, Cn * pp}, function(b, n, col)
    local kh, kw = (col // patch) % patch, col % patch
    return pixels[{b, col // pp, (n // nw) * patch + kh, (n % nw) * patch + kw}]
  end, name, nil, "patches")
end

--- token [E] (or [1, 1, E], ViT's class token) before x [B, N, E] -> [B, N + 1, E]. Same
--- dtypes. Tag "concat".
function nn.prepend(token, x, name)
  local layer = "nn.prepend"
  check_te(layer, "token", token)
  check_te(layer, "x", x)
  if x.ndim ~= 3 then fail("%s: x has shape %s, [B, N, E] expected", layer, shape_str(x.shape)) end
  local B, N, E = table.unpack(x.shape)
  local ts = token.shape
  if not ((token.ndim == 1 and ts[1] == E) or (token.ndim == 3 and ts[1] == 1 and ts[2] == 1 and ts[3] == E)) then
    fail("%s: token has shape %s, [%d] or [1, 1, %d] expected (x is %s)", layer, shape_str(ts), E, E,
      shape_str(x.shape))
  end
  if token.dtype ~= x.dtype then fail("%s: dtypes %s and %s differ", layer, token.dtype, x.dtype) end
  name = check_name(layer, name, "prepend")
  local flat = token.ndim == 1
  return compute({B, N + 1, E}, function(b, s, e)
    local t = flat and token[{e}] or token[{0, 0, e}]
    -- the clamp keeps the load of x in range at s = 0, where it is not taken
    return te.select(te.eq(s, 0), t, x[{b, te.max(s - 1, 0), e}])
  end, name, nil, "concat")
end

-- ---------------------------------------------------------------- attention

--- Sparse attention as an opaque intrinsic: q [B, H, Sq, D], k and v [B, Hkv, Sk, D] (GQA
--- when Hkv < H), mask a stof.mask value; softmax(scale * q k^T, masked) v with scale
--- 1/sqrt(D) unless opts.scale says otherwise. Rows with no kept key give zeros. The score
--- modifiers of te.attention pass through: opts.bias (T5's [H, buckets] table, with
--- buckets, max_distance, bidirectional), opts.alibi (slopes [H] or true), opts.softcap.
function nn.attention(q, k, v, mask, opts)
  local layer = "nn.attention"
  check_te(layer, "q", q)
  check_te(layer, "k", k)
  check_te(layer, "v", v)
  for _, a in ipairs({{"q", q}, {"k", k}, {"v", v}}) do
    if a[2].ndim ~= 4 then
      fail("%s: %s has shape %s, [B, H, S, D] expected", layer, a[1], shape_str(a[2].shape))
    end
  end
  if k.dtype ~= q.dtype or v.dtype ~= q.dtype then
    fail("%s: dtypes of q, k, v differ (%s, %s, %s)", layer, q.dtype, k.dtype, v.dtype)
  end
  local qs, ks, vs = q.shape, k.shape, v.shape
  if ks[1] ~= qs[1] or ks[4] ~= qs[4] or ks[1] ~= vs[1] or ks[2] ~= vs[2] or ks[3] ~= vs[3]
    or ks[4] ~= vs[4] or qs[2] % ks[2] ~= 0 then
    fail("%s: q %s, k %s, v %s: q [B, H, Sq, D], k and v [B, Hkv, Sk, D] with H a multiple of Hkv expected",
      layer, shape_str(qs), shape_str(ks), shape_str(vs))
  end
  local mt = getmetatable(mask)
  if type(mt) ~= "table" or mt.__name ~= "stof.Mask" then
    fail("%s: mask must be a stof.mask value, got %s", layer, type(mask))
  end
  if opts ~= nil and type(opts) ~= "table" then
    fail("%s: opts must be a table, got %s", layer, type(opts))
  end
  local scale = opts and opts.scale
  if scale ~= nil then check_number(layer, "opts.scale", scale) end
  -- the score modifiers (bias, buckets, max_distance, bidirectional, alibi, softcap) pass
  -- through to te.attention, which checks them and refuses unknown keys
  local arg = scale
  if opts ~= nil and next(opts) ~= nil then
    arg = {}
    for key, val in pairs(opts) do arg[key] = val end
  end
  -- what te.attention refuses (a mask for other dims, a negative scale) is raised again at
  -- the caller's line: called by pcall (a C function), the binding adds no position
  local ok, out = pcall(te.attention, q, k, v, mask, arg)
  if not ok then fail("%s", tostring(out)) end
  return out
end

return nn
