-- A command for the CLI test: `stof hello NAME` runs lua/stof/cli/hello.lua the same way.
local name = ...
assert(arg[0] == "hello", tostring(arg[0]))
print("hello, " .. tostring(name))
