-- Run as: stof [run] args.lua a "b c" 3: checks the global arg table and the varargs.
assert(arg[0]:find("args.lua$"), arg[0])
assert(arg[1] == "a" and arg[2] == "b c" and arg[3] == "3" and arg[4] == nil, "arg[1..]")
-- stof run args.lua ... or stof args.lua ...
if arg[-1] == "run" then
  assert(arg[-2]:find("stof"), tostring(arg[-2]))
else
  assert(arg[-1]:find("stof") and arg[-2] == nil, tostring(arg[-1]))
end
local n = select("#", ...)
local x, y, z = ...
assert(n == 3 and x == "a" and y == "b c" and z == "3", "varargs")
assert(require("stof").te, "require works")
print("args: ok")
