-- bench/hf_compare.lua end to end on the CPU backend, without transformers: for a tiny model
-- of each family (bert, gpt2, llama, t5, vit) saved as Hugging Face saves it (config.json
-- with Hugging Face's keys, model.safetensors with its names), a reference file written the
-- way bench/hf_compare.py writes it (the inputs, the hidden states under hs.<i> /
-- encoder_hs.<i> / decoder_hs.<i> / last_hidden_state) but computed by the reference
-- interpreter, masks dense and document (at S = 17 BigBird is dense); `compare` must pair
-- every hidden state and agree (the plan on target "c" against stof.eval). Then the failures
-- it must report: the model run with another mask than the reference's, and a reference
-- whose hidden states are out of order (both an error above 1e-2, exit status 1), one with a
-- hidden state stof does not produce, one without an input, a model_type it does not know.
-- Also the mask file's shape at a length that is no multiple of the tile (ViT's 257).
--
--   stof run tests/lua/hf_compare_cpu.lua STOF_EXECUTABLE bench/hf_compare.lua
package.path = debug.getinfo(1, "S").source:match("^@(.*/)") .. "?.lua;" .. package.path
local U = require("util")
local stof = require("stof")
local models = require("stof.models")

local exe, script = ...
assert(exe and script, "usage: stof run tests/lua/hf_compare_cpu.lua STOF_EXECUTABLE bench/hf_compare.lua")
local B, S = 2, 17 -- ViT: image 32, patch 8 -> 17 tokens

local function sh(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

-- (exit code, stdout and stderr) of `stof run hf_compare.lua ARGS...`
local function hf_compare(...)
  local args = {}
  for i, a in ipairs({...}) do args[i] = sh(tostring(a)) end
  local p = assert(io.popen(("%s run %s %s 2>&1"):format(sh(exe), sh(script), table.concat(args, " "))))
  local out = p:read("a")
  local _, _, code = p:close()
  return code, out
end

local base = os.tmpname()
os.remove(base)
local made, files = {}, {}
local function tmp(name)
  files[#files + 1] = base .. "-" .. name
  return files[#files]
end

-- the mask file: [S, S] bool, also where S is no multiple of the tile
for _, n in ipairs({S, 257}) do
  local path = tmp("mask-" .. n)
  local code, out = hf_compare("mask", "bigbird", n, path)
  assert(code == 0, out)
  local t = stof.load(path).mask
  assert(t:dtype() == "bool" and t:shape()[1] == n and t:shape()[2] == n)
  t = nil
end

-- tiny configs with Hugging Face's keys (T5: 2 encoder blocks, 3 decoder blocks, so that a
-- mix-up of the stacks changes the counts)
local CONFIGS = {
  bert = {model_type = "bert", hidden_size = 32, num_hidden_layers = 2, num_attention_heads = 2,
          intermediate_size = 64, vocab_size = 100, max_position_embeddings = 32, type_vocab_size = 2,
          hidden_act = "gelu", layer_norm_eps = 1e-12},
  gpt2 = {model_type = "gpt2", n_embd = 32, n_layer = 2, n_head = 2, vocab_size = 100, n_positions = 32,
          activation_function = "gelu_new", layer_norm_epsilon = 1e-5},
  llama = {model_type = "llama", hidden_size = 32, intermediate_size = 48, num_hidden_layers = 2,
           num_attention_heads = 4, num_key_value_heads = 2, vocab_size = 100, max_position_embeddings = 64,
           rms_norm_eps = 1e-6, hidden_act = "silu", rope_parameters = {rope_theta = 10000.0, rope_type = "default"}},
  t5 = {model_type = "t5", d_model = 32, d_kv = 16, d_ff = 64, num_layers = 2, num_decoder_layers = 3,
        num_heads = 2, relative_attention_num_buckets = 8, relative_attention_max_distance = 20, vocab_size = 100,
        feed_forward_proj = "relu", layer_norm_epsilon = 1e-6, is_encoder_decoder = true},
  vit = {model_type = "vit", hidden_size = 32, num_hidden_layers = 2, num_attention_heads = 2,
         intermediate_size = 64, image_size = 32, patch_size = 8, num_channels = 3, hidden_act = "gelu",
         layer_norm_eps = 1e-12, qkv_bias = true},
}
-- the number of hidden states compared (t5: 3 + 4; vit: 3 and the output after layernorm)
local COUNT = {bert = 3, gpt2 = 3, llama = 3, t5 = 7, vit = 4}
local PAIRS = {bert = "hs.0-2", gpt2 = "hs.0-2", llama = "hs.0-2", t5 = "encoder_hs.0-2,decoder_hs.0-3",
               vit = "hs.0-2,last_hidden_state"}

local function model_dir(family, seed)
  local mod = models[family]
  local cfg = mod.config(CONFIGS[family])
  local dir = tmp(family)
  assert(os.execute("mkdir -p " .. sh(dir)))
  made[#made + 1] = dir
  local f = assert(io.open(dir .. "/config.json", "w"))
  f:write(U.json(CONFIGS[family]))
  f:close()
  -- std 0.2 rather than 0.02: attention moves the hidden states enough for a wrong mask to show
  local w = mod.random_weights(cfg, seed, "float16", {std = 0.2})
  stof.save(dir .. "/model.safetensors", w)
  return dir, cfg, w
end

-- the reference as hf_compare.py writes it, hidden states from stof.eval
local function reference(family, cfg, w, maskname, seed)
  local mod = models[family]
  local m = mod.build(cfg, {batch = B, seq = S, mask = stof.mask.suite(maskname, S), dtype = "float16"})
  local ref, saved = {}, {}
  for name, ph in pairs(m.inputs) do
    if name == "pixel_values" then
      saved[name] = stof.rand(ph.shape, "float32", seed)   -- float32 in the file, fp16 in the run
      ref[name] = saved[name]:astype("float16")
    elseif name == "input_ids" or name == "decoder_input_ids" then
      saved[name] = stof.rand(ph.shape, "int64", seed + #name)
      ref[name] = saved[name]
    else
      ref[name] = stof.zeros(ph.shape, "int64")               -- BERT's token types
    end
  end
  local outs, names = {}, {}
  local function add(prefix, list)
    for i, t in ipairs(list) do outs[#outs + 1], names[#names + 1] = t, prefix .. (i - 1) end
  end
  if family == "t5" then
    add("encoder_hs.", m.encoder_hidden_states)
    add("decoder_hs.", m.decoder_hidden_states)
  else
    add("hs.", m.hidden_states)
  end
  if family == "vit" then outs[#outs + 1], names[#names + 1] = m.output, "last_hidden_state" end
  local got = {stof.eval(outs, m:feed(w, ref))}
  for i, n in ipairs(names) do saved[n] = got[i]:astype("float32") end
  return saved, names
end

local function write(tag, t)
  local path = tmp("ref-" .. tag)
  stof.save(path, t)
  return path
end

local function record(out)
  local line = out:match("({\"kind\":\"hf_parity\"[^\n]*})")
  assert(line, "no JSON line in: " .. out)
  return line, tonumber(line:match('"max_rel_l2":([^,]+)')), tonumber(line:match('"layers":(%d+)'))
end

local seed = 1
for _, family in ipairs({"bert", "gpt2", "llama", "t5", "vit"}) do
  local dir, cfg, w = model_dir(family, seed)
  for _, maskname in ipairs({"dense", "document"}) do
    seed = seed + 1
    local ref, names = reference(family, cfg, w, maskname, seed)
    assert(#names == COUNT[family], family)
    local path = write(family .. "-" .. maskname, ref)
    local code, out = hf_compare("compare", dir, maskname, B, S, path, "c")
    assert(code == 0, ("%s %s: exit %s\n%s"):format(family, maskname, tostring(code), out))
    local line, worst, layers = record(out)
    assert(layers == COUNT[family], line)
    assert(worst < 5e-3, line)
    assert(line:find('"family":"' .. family .. '"', 1, true) and line:find('"target":"c"', 1, true), line)
    assert(line:find('"pairs":"' .. PAIRS[family] .. '"', 1, true), line)
    print(line)

    if maskname == "document" then
      -- the model run with another mask: the error shows
      code, out = hf_compare("compare", dir, "dense", B, S, path, "c")
      local l1, worst1 = record(out)
      assert(code == 1 and worst1 > 1e-2, l1)
      -- two hidden states swapped: the error shows and the status is 1
      local swapped = {}
      for k, v in pairs(ref) do swapped[k] = v end
      local a, b = names[2], names[#names]
      swapped[a], swapped[b] = ref[b], ref[a]
      code, out = hf_compare("compare", dir, maskname, B, S, write(family .. "-swapped", swapped), "c")
      local l2, worst2 = record(out)
      assert(code == 1 and worst2 > 1e-2, l2)
      -- a hidden state stof does not produce
      local extra = {}
      for k, v in pairs(ref) do extra[k] = v end
      local last = names[#names]
      local more = family == "vit" and "hs.3" or last:gsub("%d+$", function(d) return tostring(tonumber(d) + 1) end)
      extra[more] = ref[last]
      code, out = hf_compare("compare", dir, maskname, B, S, write(family .. "-extra", extra), "c")
      assert(code ~= 0 and out:find("has hidden states stof's " .. family .. " does not produce: " .. more, 1, true), out)
      -- an input missing
      local lacking = {}
      for k, v in pairs(ref) do lacking[k] = v end
      local input = family == "vit" and "pixel_values" or family == "t5" and "decoder_input_ids" or "input_ids"
      lacking[input] = nil
      code, out = hf_compare("compare", dir, maskname, B, S, write(family .. "-lacking", lacking), "c")
      assert(code ~= 0 and out:find("lacks the input " .. input, 1, true), out)
    end
  end
end

-- a config.json of another model type
local other = tmp("other")
assert(os.execute("mkdir -p " .. sh(other)))
made[#made + 1] = other
local f = assert(io.open(other .. "/config.json", "w"))
f:write('{"model_type": "whisper"}')
f:close()
local code, out = hf_compare("compare", other, "dense", B, S, files[1], "c")
assert(code ~= 0 and out:find("model_type whisper is not one of bert, gpt2, llama, t5, vit", 1, true), out)

collectgarbage()
for _, d in ipairs(made) do
  os.remove(d .. "/config.json")
  os.remove(d .. "/model.safetensors")
end
for _, p in ipairs(files) do os.remove(p) end
print("hf_compare_cpu: ok")
