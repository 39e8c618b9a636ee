-- Helpers shared by the Lua tests (tests/lua/test_*.lua): checking raised errors and
-- comparing numbers.
local M = {}

-- Calls fn, which must raise. The message must start with the calling script's
-- "file:line:" (the binding reports where the script called it) and contain each of the
-- plain strings given (the kind prefix, the cause). Returns the message.
function M.raises(fn, ...)
  local ok, err = pcall(fn)
  if ok then error("expected an error, got none", 2) end
  err = tostring(err)
  local src = debug.getinfo(2, "S").short_src:match("[^/]*$")
  local at = err:match("^(.-):%d+: ")
  if not at or at:match("[^/]*$") ~= src then
    error(("error %q does not start with %s:<line>:"):format(err, src), 2)
  end
  for _, s in ipairs({...}) do
    if not err:find(s, 1, true) then error(("error %q lacks %q"):format(err, s), 2) end
  end
  return err
end

-- Like raises, without the file:line check (for errors raised through pcall directly).
function M.raises_any(fn, ...)
  local ok, err = pcall(fn)
  if ok then error("expected an error, got none", 2) end
  err = tostring(err)
  for _, s in ipairs({...}) do
    if not err:find(s, 1, true) then error(("error %q lacks %q"):format(err, s), 2) end
  end
  return err
end

function M.near(a, b, tol, what)
  tol = tol or 1e-6
  if not (math.abs(a - b) <= tol * math.max(1, math.abs(b))) then
    error(("%s: %.9g vs %.9g (tol %g)"):format(what or "near", a, b, tol), 2)
  end
end

-- Checks every element of tensor t against the Lua function ref(i, j, ...) (0-based).
function M.check(t, ref, tol, what)
  local shape = t:shape()
  local idx, n = {}, #shape
  local worst = 0
  local function rec(d)
    if d > n then
      local got, want = t[idx], ref(table.unpack(idx, 1, n))
      if type(got) == "boolean" then got = got and 1 or 0 end
      if type(want) == "boolean" then want = want and 1 or 0 end
      local err = math.abs(got - want) / math.max(1, math.abs(want))
      if err ~= err or err > (tol or 1e-6) then
        error(("%s: at {%s}: got %.9g, want %.9g"):format(what or "check",
          table.concat(idx, ", "), got, want), 3)
      end
      if err > worst then worst = err end
      return
    end
    for i = 0, shape[d] - 1 do idx[d] = i; rec(d + 1) end
  end
  rec(1)
  return worst
end

-- erf, Abramowitz and Stegun 7.1.26 (absolute error below 1.5e-7).
function M.erf(x)
  local s = x < 0 and -1 or 1
  x = math.abs(x)
  local t = 1 / (1 + 0.3275911 * x)
  local y = 1 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t
    + 0.254829592) * t * math.exp(-x * x)
  return s * y
end

--- A Lua value as JSON text (sequences as arrays, tables as objects with sorted keys,
--- floats with 17 digits): the config.json files the from_pretrained tests write.
function M.json(v)
  if type(v) == "table" and #v > 0 then
    local parts = {}
    for _, e in ipairs(v) do parts[#parts + 1] = M.json(e) end
    return "[" .. table.concat(parts, ", ") .. "]"
  elseif type(v) == "table" then
    local keys, parts = {}, {}
    for k in pairs(v) do keys[#keys + 1] = k end
    table.sort(keys)
    for _, k in ipairs(keys) do parts[#parts + 1] = ("%q: %s"):format(k, M.json(v[k])) end
    return "{" .. table.concat(parts, ", ") .. "}"
  elseif type(v) == "string" then
    return ("%q"):format(v)
  elseif math.type(v) == "float" then
    return ("%.17g"):format(v)
  end
  return tostring(v)
end

return M
