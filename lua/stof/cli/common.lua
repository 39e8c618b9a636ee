-- What the stof CLI commands (lua/stof/cli/*.lua) share: user errors that print
-- "stof NAME: <cause>" and exit with status 1, and the subcommand dispatch.
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

return M
