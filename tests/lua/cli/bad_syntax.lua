-- A syntax error on line 3: stof must print "bad_syntax.lua:3:" and exit 1.
local y = 1
local x = = y
return x
