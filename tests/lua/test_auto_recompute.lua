-- stof_sched_auto does not inline an elementwise block into a reduction that would compute
-- it again for each value of one of its own axes: in a feed-forward segment generated whole
-- (no vendor GEMM), gelu(fc1 + b1) stays a block of its own instead of being recomputed
-- inside fc2's sum for every output column (on the C backend that made the segment 15x
-- slower: 23.7 ms against 1.58 ms at 64 x 128 x 256); an elementwise block a row reduction
-- reads at its own rows (the residual add under a layer norm's statistics) is still inlined.
-- Both schedules match the interpreter.
local stof = require("stof")
local te, nn = stof.te, stof.nn

local x = te.placeholder({16, 32}, "float32", "x")
local w1, b1 = te.placeholder({64, 32}, "float32", "w1"), te.placeholder({64}, "float32", "b1")
local w2, b2 = te.placeholder({32, 64}, "float32", "w2"), te.placeholder({32}, "float32", "b2")
local h = nn.gelu_tanh(nn.linear(x, w1, b1, {name = "fc1", transposed = true}), "fc1.gelu")
local y = nn.linear(h, w2, b2, {name = "fc2", transposed = true})
local g, bt = te.placeholder({32}, "float32", "g"), te.placeholder({32}, "float32", "bt")
local z = nn.layer_norm(nn.add(y, x, "res"), g, bt, 1e-5, "ln")
local feed = {}
for i, p in ipairs({x, w1, b1, w2, b2, g, bt}) do feed[p] = stof.rand(p.shape, "float32", i) end

local s = stof.schedule({z})
s:auto("c")
-- gelu(fc1 + b1) is still a block (its bias add inlined into it): fc2 reads it
assert(pcall(s.get_block, s, "fc1.gelu"), "fc1.gelu was inlined into fc2's reduction")
assert(not pcall(s.get_block, s, "fc1.bias"), "fc1.bias should be inlined into fc1.gelu")
-- the residual add is inlined under the layer norm (its statistics read it at their own rows)
assert(not pcall(s.get_block, s, "res"), "the residual add should be inlined")
local args = {x, w1, b1, w2, b2, g, bt, z}
local f = stof.build(s, args, {target = "c"})
local out = stof.zeros({16, 32}, "float32"):fill(0 / 0)
f(feed[x], feed[w1], feed[b1], feed[w2], feed[b2], feed[g], feed[bt], out)
local e = stof.rel_l2(out, stof.eval(z, feed))
assert(e < 1e-5, ("relative L2 error %g"):format(e))
print("test_auto_recompute: ok")
