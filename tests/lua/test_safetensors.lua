-- stof.load / stof.save (safetensors) and stof.load_json: round trips compared element by
-- element, tensors that outlive their table, metadata, malformed files and their errors.
package.path = arg[0]:match("^(.*/)") .. "?.lua;" .. package.path
local u = require("util")
local stof = require("stof")

local dir = os.tmpname()
os.remove(dir)
local function tmp(name) return dir .. "-" .. name end
local made = {}
local function write(name, bytes)
  local p = tmp(name)
  local f = assert(io.open(p, "wb"))
  f:write(bytes)
  f:close()
  made[#made + 1] = p
  return p
end
-- A safetensors file: the 8-byte little-endian header length, the header, the data.
local function st_file(name, header, data, hlen)
  return write(name, string.pack("<I8", hlen or #header) .. header .. (data or ""))
end

-- every element of a against b (same shape, dtype), by multi-index
local function same(a, b, what)
  assert(a:dtype() == b:dtype(), what .. ": dtype " .. a:dtype() .. " vs " .. b:dtype())
  local sa, sb = a:shape(), b:shape()
  assert(#sa == #sb, what .. ": rank")
  for d = 1, #sa do assert(sa[d] == sb[d], what .. ": extent of dim " .. d) end
  if a:numel() == 0 then return end
  u.check(a, function(...) return b[{...}] end, 0, what)
end

-- ---------------------------------------------------------------- round trip
local src = {
  ["model.layers.0.w"] = stof.rand({3, 5}, "float32", 1),
  ["h16"] = stof.rand({4, 2, 3}, "float16", 2),
  ["bf"] = stof.rand({7}, "bfloat16", 3),
  ["ids"] = stof.rand({2, 3}, "int64", 4),
  ["i32"] = stof.rand({6}, "int32", 5),
  ["f64"] = stof.rand({2, 2}, "float64", 6),
  ["mask"] = stof.tensor({true, false, true}, "bool"),
  ["scale"] = stof.tensor(-2.75),
  ["empty"] = stof.zeros({0, 3}),
}
-- random values really differ from zero (a test that could not fail would be useless)
local nonzero = 0
for i = 0, 14 do if src["model.layers.0.w"][{i // 5, i % 5}] ~= 0 then nonzero = nonzero + 1 end end
assert(nonzero == 15)
local path = tmp("round.safetensors")
made[#made + 1] = path
assert(stof.save(path, src, {format = "pt", note = "made by test_safetensors"}) == nil)
local w, meta = stof.load(path)
local n = 0
for name, t in pairs(w) do
  n = n + 1
  assert(src[name], "unexpected tensor " .. name)
  assert(t:device() == "cpu")
  same(t, src[name], name)
end
assert(n == 9, "9 tensors, got " .. n)
assert(meta.format == "pt" and meta.note == "made by test_safetensors")
local count = 0
for _ in pairs(meta) do count = count + 1 end
assert(count == 2)
assert(math.type(w.ids[{1, 2}]) == "integer" and w.mask[0] == true and w.mask[1] == false)
assert(w.scale[{}] == -2.75)
assert(tostring(w.h16):find("stof.Tensor float16 [4, 2, 3]", 1, true))

-- the same table always gives the same bytes (names sorted)
local path2 = tmp("round2.safetensors")
made[#made + 1] = path2
stof.save(path2, src, {note = "made by test_safetensors", format = "pt"})
local function slurp(p) local f = assert(io.open(p, "rb")); local s = f:read("a"); f:close(); return s end
assert(slurp(path) == slurp(path2), "stof.save is deterministic")
local hlen = string.unpack("<I8", slurp(path))
assert(hlen % 8 == 0, "header padded to a multiple of 8")

-- a file without metadata gives an empty metadata table
local path3 = tmp("nometa.safetensors")
made[#made + 1] = path3
stof.save(path3, {x = stof.tensor({1, 2})})
local w3, m3 = stof.load(path3)
assert(next(m3) == nil and w3.x[1] == 2)

-- ---------------------------------------------------------------- lifetime
do
  local keep = stof.load(path)["model.layers.0.w"] -- the table is dropped at once
  collectgarbage()
  collectgarbage()
  same(keep, src["model.layers.0.w"], "kept tensor after collection")
  -- writing into a loaded tensor changes this copy only, never the file
  keep[{0, 0}] = 1234.5
  assert(keep[{0, 0}] == 1234.5)
  local again = stof.load(path)["model.layers.0.w"]
  same(again, src["model.layers.0.w"], "file unchanged after a write")
  -- copies own their storage
  local c = keep:clone()
  keep = nil
  collectgarbage()
  assert(c[{0, 0}] == 1234.5 and c[{2, 4}] == src["model.layers.0.w"][{2, 4}])
  local closed = stof.load(path).bf
  closed:close()
  u.raises(function() return closed:numel() end, "ValueError", "closed")
end

-- ---------------------------------------------------------------- save errors
u.raises(function() stof.save(tmp("x.safetensors"), {w = 3}) end, "TypeError", "stof.save", "\"w\" is integer, not a stof.Tensor")
u.raises(function() stof.save(tmp("x.safetensors"), {stof.zeros({2})}) end, "TypeError",
  "tensor names must be strings")
u.raises(function() stof.save(tmp("x.safetensors"), {__metadata__ = stof.zeros({2})}) end, "ValueError",
  "\"__metadata__\" cannot name a tensor")
u.raises(function() stof.save(tmp("x.safetensors"), {a = stof.zeros({2})}, {k = 1}) end, "TypeError",
  "metadata maps strings to strings")
u.raises(function() stof.save(tmp("no-such-dir/x.safetensors"), {a = stof.zeros({2})}) end, "IOError",
  "no-such-dir/x.safetensors: cannot create")
u.raises(function() stof.save(42, {}) end, "TypeError", "bad argument #1")

-- ---------------------------------------------------------------- bad files
local p = write("short.safetensors", "\1\2\3")
u.raises(function() stof.load(p) end, "ParseError", p .. ": file is 3 bytes, shorter than the 8-byte header length")
p = st_file("past.safetensors", string.rep(" ", 504), "", 1000000)
u.raises(function() stof.load(p) end, "ParseError",
  p .. ": header length 1000000 runs past the end of the file (512 bytes)")
p = st_file("json.safetensors", "{\"w\": {\"dtype\": ")
u.raises(function() stof.load(p) end, "ParseError", p .. ": header is not valid JSON: line 1, column")
p = st_file("trunc.safetensors", '{"w":{"dtype":"F32","shape":[4,4],"data_offsets":[0,64]}}', string.rep("\0", 40))
u.raises(function() stof.load(p) end, "ParseError", 'tensor "w": data_offsets end 64 past the data section (40 bytes)')
p = st_file("dtype.safetensors", '{"w":{"dtype":"F8_E4M3","shape":[4],"data_offsets":[0,4]}}', "abcd")
u.raises(function() stof.load(p) end, "TypeError", 'tensor "w": unknown dtype "F8_E4M3" (supported: F32')
p = st_file("shape.safetensors", '{"w":{"dtype":"F16","shape":[10,8],"data_offsets":[0,100]}}', string.rep("\0", 100))
u.raises(function() stof.load(p) end, "ShapeError",
  'data_offsets [0, 100] hold 100 bytes, its shape [10, 8] float16 needs 160')
p = st_file("overlap.safetensors", '{"a":{"dtype":"U8","shape":[64],"data_offsets":[0,64]},' ..
  '"b":{"dtype":"U8","shape":[64],"data_offsets":[32,96]}}', string.rep("\0", 96))
u.raises(function() stof.load(p) end, "ParseError", 'tensors "a" and "b" overlap (bytes [0, 64) and [32, 96))')
u.raises(function() stof.load(tmp("missing.safetensors")) end, "IOError", "missing.safetensors: cannot open: No such file")
u.raises(function() stof.load() end, "TypeError", "stof.load: bad argument #1")

-- ---------------------------------------------------------------- JSON configs
p = write("config.json", [[
{
  "model_type": "bert",
  "hidden_size": 768,
  "layer_norm_eps": 1e-12,
  "dropout": 0.1,
  "architectures": ["BertModel", "BertForMaskedLM"],
  "tie": true, "untie": false,
  "pad": null,
  "nested": {"a": {"b": [1, [2, 3], {"c": -4}]}, "empty_list": [], "empty_obj": {}},
  "unicode": "caf\u00e9"
}
]])
local cfg = stof.load_json(p)
assert(cfg.model_type == "bert")
assert(cfg.hidden_size == 768 and math.type(cfg.hidden_size) == "integer")
assert(math.type(cfg.layer_norm_eps) == "float" and cfg.layer_norm_eps == 1e-12)
assert(math.type(cfg.dropout) == "float" and cfg.dropout == 0.1)
assert(#cfg.architectures == 2 and cfg.architectures[1] == "BertModel" and cfg.architectures[2] == "BertForMaskedLM")
assert(cfg.tie == true and cfg.untie == false)
assert(cfg.pad == stof.null and cfg.pad ~= nil and type(stof.null) == "userdata")
assert(cfg.nested.a.b[1] == 1 and cfg.nested.a.b[2][2] == 3 and cfg.nested.a.b[3].c == -4)
assert(math.type(cfg.nested.a.b[3].c) == "integer")
assert(next(cfg.nested.empty_list) == nil and next(cfg.nested.empty_obj) == nil)
assert(cfg.unicode == "caf\u{e9}")
assert(stof.load_json(write("scalar.json", "42")) == 42)
assert(stof.load_json(write("array.json", "[null, 1.5]"))[1] == stof.null)

p = write("bad.json", '{\n  "a": 1,\n  "b": [1, 2,,]\n}\n')
local err = u.raises(function() stof.load_json(p) end, "ParseError", p .. ":3:")
assert(err:find("ParseError: " .. p:gsub("%p", "%%%0") .. ":3:%d+: "), err)
u.raises(function() stof.load_json(write("empty.json", "")) end, "ParseError", "empty.json:")
u.raises(function() stof.load_json(tmp("missing.json")) end, "IOError", "missing.json: cannot open: No such file")
u.raises(function() stof.load_json({}) end, "TypeError", "stof.load_json: bad argument #1")

for _, f in ipairs(made) do os.remove(f) end
print("test_safetensors: ok")
