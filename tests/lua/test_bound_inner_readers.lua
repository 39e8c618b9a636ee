-- Bound inference for a block whose readers were all moved into its own nest
-- (schedule/bound.c, infer_forward): it takes its region from those readers' readers only
-- when every one of them reads it at its own axes, is no output and has readers outside it
-- (a GEMM's write-back filling a shared tile); otherwise it computes its whole tensor. The
-- case below (found in review) has one reader that qualifies and one that reads it
-- transposed: narrowing by the first alone left the second reading unwritten elements.
local stof = require("stof")
local te = stof.te

local N = 8
local A = te.placeholder({N, N}, "float32", "A")
local T = te.compute({N, N}, function(i, j) return A[{i, j}] * 2 end, "T")
local R1 = te.compute({N, N}, function(i, j) return T[{i, j}] + 1 end, "R1")
local R3 = te.compute({N, N}, function(i, j) return T[{j, i}] + 0 end, "R3")
local O = te.compute({N, N}, function(i, j) return R1[{7 - i, j}] + R3[{i, j}] end, "O")

local s = stof.schedule({O})
local io = s:split(s:get_loops(s:get_block("O"))[1], {stof.INFER, 4})
local tb = s:get_block("T")
s:compute_at(s:get_block("R1"), io)
s:compute_at(s:get_block("R3"), io)
s:compute_at(tb, io)
local tl = s:get_loops(tb)
s:reverse_compute_at(s:get_block("R1"), tl[#tl - 1])
s:reverse_compute_at(s:get_block("R3"), tl[#tl - 1])
local nest = s:print_loop_nest()
-- T computes all of its 8 rows per iteration of O's outer loop (not the 4 R1's readers need)
assert(nest:find("for i in 0..8:\n    for j in 0..8:\n      T[i, j] = A[i, j] * 2.0", 1, true), nest)
local a = stof.rand({N, N}, "float32", 1)
local want = stof.eval(O, {[A] = a})
local o = stof.zeros({N, N}, "float32"):fill(0 / 0)
stof.build(s, {A, O}, {target = "c"})(a, o)
local err = stof.rel_l2(o, want)
assert(err < 1e-6, ("relative L2 error %g"):format(err))
print("test_bound_inner_readers: ok")
