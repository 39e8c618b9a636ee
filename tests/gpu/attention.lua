-- stof.attention on the GPU against the CPU path, through Lua
local stof = require("stof")
local M = stof.mask
local B, H, S, D = 2, 4, 1000, 64
for _, name in ipairs(M.suite_names()) do
  local m = M.suite(name, S)
  local q, k, v = stof.rand({B, H, S, D}, "float16", 1), stof.rand({B, H, S, D}, "float16", 2), stof.rand({B, H, S, D}, "float16", 3)
  local o = stof.attention(q:to("cuda"), k:to("cuda"), v:to("cuda"), m):to("cpu")
  local ref = stof.attention(q:astype("float32"), k:astype("float32"), v:astype("float32"), m)
  local err = stof.rel_l2(o:astype("float32"), ref)
  print(("%-15s rel_l2 %.2e"):format(name, err))
  assert(err < 1e-2)
end
print("gpu attention through Lua ok")
