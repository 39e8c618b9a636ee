-- What the stof CLI commands (lua/stof/cli/*.lua) share: user errors that print
-- "stof NAME: <cause>" and exit with status 1, the subcommand dispatch, the option parser,
-- and the MASK argument (an expression over the stof.mask constructors or a suite name) of
-- `stof mask show`, `stof explain` and `stof bench attention`.
local M = {}

local Fail = {}

--- Raises a user error (a message, no traceback).
function M.fail(fmt, ...)
  error(setmetatable({msg = fmt:format(...)}, Fail), 0)
end

--- Runs the subcommand args[1] of command `name` from `commands` (name -> function(args)),
--- prints usage for -h/--help/help (and to stderr, failing, without arguments), turns user
--- errors into "stof NAME: cause" and status 1, and exits with that status when it is not 0.
--- Bugs propagate with their traceback.
function M.main(name, usage, commands, ...)
  local args = {...}
  local cmd = args[1]
  local status
  if cmd == nil then
    io.stderr:write(usage, "\n")
    status = 1
  elseif cmd == "-h" or cmd == "--help" or cmd == "help" then
    print(usage)
    status = 0
  else
    table.remove(args, 1)
    local ok, err = pcall(function()
      local f = commands[cmd]
      if f then return f(args) end
      local names = {}
      for n in pairs(commands) do names[#names + 1] = n end
      table.sort(names)
      if cmd:sub(1, 1) == "-" then M.fail("unknown option '%s' (see stof %s --help)", cmd, name) end
      M.fail("unknown subcommand '%s' (%s; see stof %s --help)", cmd, table.concat(names, ", "), name)
    end)
    if ok then
      status = 0
    elseif getmetatable(err) == Fail then
      io.stderr:write("stof ", name, ": ", err.msg, "\n")
      status = 1
    else
      error(err, 0)
    end
  end
  if status ~= 0 then
    io.stdout:flush()
    os.exit(status, true)
  end
end

--- The message of a user error raised by a binding or by stof's Lua modules ("<file:line:>
--- <Kind>Error: cause", the position dropped), or nil for anything else (a bug, whose
--- traceback must not be hidden).
function M.user_error(err)
  if type(err) ~= "string" then return nil end
  local msg = err:gsub("^[^\n]-:%d+: ", "", 1)
  if msg:match("^%u%a*Error: ") then return msg end
  return nil
end

--- The positive integer of option opt's value v (a user error otherwise).
function M.positive(opt, v)
  local n = math.tointeger(tonumber(v))
  if not n or n < 1 then M.fail("%s: expected a positive integer, got '%s'", opt, tostring(v)) end
  return n
end

--- The lengths of "--seq S" (Sq = Sk = S) or "--seq Sq,Sk": Sq, Sk.
function M.parse_seq(v)
  local q, k = v:match("^%s*(%d+)%s*,%s*(%d+)%s*$")
  if q then return M.positive("--seq", q), M.positive("--seq", k) end
  local n = M.positive("--seq", v)
  return n, n
end

--- Parses the arguments of command cmd ("mask", "bench attention": named in messages) into
--- o, a table of defaults: options[name] = function(o, value, name) for an option that
--- takes a value ("--name V" or "--name=V"), flags[name] = function(o, name) for one that
--- does not, positional arguments into o[positional[1]], o[positional[2]], ... in turn ("-"
--- counts as one). -h and --help set o.help. An unknown option, a missing value or one
--- positional argument too many is a user error (hint: added to the last one). Returns o.
function M.parse_args(args, cmd, o, options, flags, positional, hint)
  local k, npos = 1, 0
  while k <= #args do
    local a = args[k]
    local name, inline = a:match("^(%-%-[%w-]+)=(.*)$")
    name = name or a
    if name == "-h" or name == "--help" then
      o.help = true
    elseif options[name] then
      local v = inline
      if v == nil then
        k = k + 1
        v = args[k]
        if v == nil then M.fail("%s needs a value", name) end
      end
      options[name](o, v, name)
    elseif flags and flags[name] and not inline then
      flags[name](o, name)
    elseif a:sub(1, 1) == "-" and a ~= "-" then
      M.fail("unknown option '%s' (see stof %s --help)", a, cmd)
    elseif positional and npos < #positional then
      npos = npos + 1
      o[positional[npos]] = a
    else
      M.fail("unexpected argument '%s'%s", a, hint and (" (" .. hint .. ")") or "")
    end
    k = k + 1
  end
  return o
end

--- The mask that expr denotes at sequence lengths Sq, Sk: the bare name of a mask of the
--- canonical suite ("bigbird"), or a Lua expression evaluated with the stof.mask
--- constructors (fn included) and math in scope, and S, Sq, Sk bound to the lengths
--- ("causal() & sliding(64)", "fn(function(b, h, i, j) return (i - j) % 3 == 0 end)").
--- A syntax error, an error raised while evaluating, or a value that is not a mask is a
--- user error naming the expression and the cause.
function M.eval_mask(expr, Sq, Sk)
  local stof = require("stof")
  local Mk = stof.mask
  local name = expr:match("^%s*([%a_][%w_]*)%s*$")
  if name then
    for _, s in ipairs(Mk.suite_names()) do
      if s == name then
        local ok, m = pcall(Mk.suite, name, Sq)
        if not ok then M.fail("%s", tostring(m)) end
        return m
      end
    end
  end
  local env = setmetatable({S = Sq, Sq = Sq, Sk = Sk, stof = stof}, {__index = function(_, k)
    return Mk[k] or math[k] or _G[k]
  end})
  local chunk, err = load("return " .. expr, "=MASK", "t", env)
  if not chunk then M.fail("bad MASK expression \"%s\": %s", expr, err) end
  local ok, m = pcall(chunk)
  if not ok then
    -- a name that is no constructor: say which names there are
    local unknown = tostring(m):match("attempt to call a nil value %(global '([%w_]+)'%)")
      or tostring(m):match("attempt to index a nil value %(global '([%w_]+)'%)")
    if unknown then
      local names = {}
      for k, v in pairs(Mk) do
        if type(v) == "function" and k:match("^[%l][%w_]*$") then names[#names + 1] = k end
      end
      table.sort(names)
      M.fail("bad MASK expression \"%s\": no mask constructor '%s' (stof.mask has: %s; suite names: %s)", expr,
        unknown, table.concat(names, ", "), table.concat(Mk.suite_names(), ", "))
    end
    M.fail("bad MASK expression \"%s\": %s", expr, tostring(m))
  end
  if getmetatable(m) ~= getmetatable(Mk.dense()) then
    local what = type(m) == "function" and "a function (call it, as in causal())"
      or (type(m) .. (m ~= nil and (" " .. tostring(m)) or ""))
    M.fail("MASK \"%s\" gives %s, not a mask", expr, what)
  end
  return m
end

--- Whether err (anything raised) is a user error raised by M.fail; its message then.
function M.fail_message(err)
  if getmetatable(err) == Fail then return err.msg end
  return nil
end

return M
