-- A binding raising at line 4: stof must print this file:line, "TypeError" and a traceback.
local stof = require("stof")
local te = stof.te
local A = te.placeholder(42, "float32", "A")
return A
