-- The stof half of bench/hf_compare.py (Hugging Face parity, DESIGN.md section 8).
--
--   stof run bench/hf_compare.lua mask NAME S OUT.safetensors
--       writes the suite mask NAME at sequence length S as a bool tensor "mask" [S, S]
--   stof run bench/hf_compare.lua compare MODEL_DIR MASK B S REF.safetensors [TARGET]
--       loads MODEL_DIR (config.json + model.safetensors as Hugging Face saves them) with the
--       from_pretrained of config.json's model_type (bert, gpt2, llama, t5, vit), runs it
--       through a plan (fp16, default scheme, CUDA graph) on REF's inputs with MASK, and
--       prints one JSON line: the relative L2 error of every hidden state against REF's.
--
-- REF holds the inputs (input_ids; t5 also decoder_input_ids; vit pixel_values, float32, run
-- in fp16) and the hidden states, paired with the plan's outputs (run.prepare with
-- hidden_states = true) in order:
--   bert, gpt2, llama  hs.0 .. hs.L                      model.hidden_states
--   t5                 encoder_hs.0 .. encoder_hs.L,      model.encoder_hidden_states,
--                      decoder_hs.0 .. decoder_hs.L       then model.decoder_hidden_states
--   vit                hs.0 .. hs.L, last_hidden_state    model.hidden_states (none with the
--                                                         final layernorm), then model.output
-- Every hidden state of REF must pair with an output and every output with one of REF's: a
-- count that differs (a model shrunk on one side only) is an error, not a shorter list.
-- The mask reaches each attention as the model builds it (docs/MODELS.md): bert and vit the
-- mask; gpt2 and llama causal & the mask; t5 the mask in the encoder, causal & the mask in the
-- decoder's self-attention, dense cross-attention. S is the token count (vit: 1 + patches,
-- from config.json's image_size). TARGET: the plan's target (default: the GPU where there is
-- one). Exit status 1 if any error exceeds 1e-2.
local stof = require("stof")
local models = require("stof.models")
local run = require("stof.models.run")

local what = arg[1]
if what == "mask" then
  local name, S, out = arg[2], tonumber(arg[3]), arg[4]
  local m = stof.mask.suite(name, S)
  local f = m:format(S, {tile = 64})
  stof.save(out, {mask = f:expand(0, 0)})
  return
end
assert(what == "compare", "usage: hf_compare.lua mask|compare ...")
local dir, maskname, B, S, ref_path, target = arg[2], arg[3], tonumber(arg[4]), tonumber(arg[5]), arg[6], arg[7]

-- the inputs each family reads from REF
local INPUTS = {
  bert = {"input_ids"}, gpt2 = {"input_ids"}, llama = {"input_ids"},
  t5 = {"input_ids", "decoder_input_ids"}, vit = {"pixel_values"},
}

local function json_string(s)
  return '"' .. tostring(s):gsub('[%c"\\]', function(c) return ("\\u%04x"):format(c:byte()) end) .. '"'
end

local family = stof.load_json(dir .. "/config.json").model_type
if not INPUTS[family] then
  error(("hf_compare: %s/config.json: model_type %s is not one of bert, gpt2, llama, t5, vit"):format(dir,
    tostring(family)), 0)
end
local cfg, weights = models[family].from_pretrained(dir, {dtype = "float16"})
local ref = stof.load(ref_path)
local inputs = {}
for _, name in ipairs(INPUTS[family]) do
  local t = ref[name]
  if not t then error(("hf_compare: %s lacks the input %s"):format(ref_path, name), 0) end
  inputs[name] = name == "pixel_values" and t:astype("float16") or t
end

local r = run.prepare(cfg, {batch = B, seq = S, mask = maskname, dtype = "float16", weights = weights,
                            hidden_states = true, inputs = inputs, target = target})
if r.seq ~= S then
  error(("hf_compare: %s builds %d tokens, the reference has S = %d"):format(dir, r.seq, S), 0)
end
r.plan:poison()
local got = {r:run()}

-- REF's names of the outputs, in order
local m, names = r.model, {}
local function add(prefix, list)
  for i = 0, #list - 1 do names[#names + 1] = prefix .. i end
end
if m.encoder_hidden_states then
  add("encoder_hs.", m.encoder_hidden_states)
  add("decoder_hs.", m.decoder_hidden_states)
else
  add("hs.", m.hidden_states)
end
if #got == #names + 1 then names[#names + 1] = "last_hidden_state" end -- vit: the output after layernorm
assert(#got == #names, ("hf_compare: %d outputs for %d hidden states"):format(#got, #names))
local paired, unpaired = {}, {}
for _, n in ipairs(names) do paired[n] = true end
for k in pairs(ref) do
  if not paired[k] and not k:match("^f32%.") and (k:match("hs%.%d+$") or k == "last_hidden_state") then
    unpaired[#unpaired + 1] = k
  end
end
table.sort(unpaired)
if #unpaired > 0 then
  error(("hf_compare: %s has hidden states stof's %s does not produce: %s"):format(ref_path, family,
    table.concat(unpaired, ", ")), 0)
end

-- with a float32 reference beside (hf_compare.py --ref32: "f32." + name): stof's error against
-- it and Hugging Face fp16's own, per hidden state
local errs, worst, errs32, hf32 = {}, 0, {}, {}
for i, n in ipairs(names) do
  local want = ref[n]
  if not want then error(("hf_compare: %s lacks %s"):format(ref_path, n), 0) end
  local g = got[i]:astype("float32")
  local e = stof.rel_l2(g, want)
  errs[#errs + 1] = ("%.3e"):format(e)
  if not (e <= worst) then worst = e end
  local w32 = ref["f32." .. n]
  if w32 then
    errs32[#errs32 + 1] = ("%.3e"):format(stof.rel_l2(g, w32))
    hf32[#hf32 + 1] = ("%.3e"):format(stof.rel_l2(want, w32))
  end
end
local calib = #errs32 == 0 and ""
  or (',"rel_l2_f32":[%s],"hf16_vs_f32":[%s]'):format(table.concat(errs32, ","), table.concat(hf32, ","))

-- the pairing in short: runs of one prefix as "prefix0-N"
local runs = {}
for _, n in ipairs(names) do
  local p, i = n:match("^(.-)(%d+)$")
  local last = runs[#runs]
  if p and last and last.p == p and tonumber(i) == last.hi + 1 then
    last.hi = last.hi + 1
  else
    runs[#runs + 1] = p and {p = p, lo = tonumber(i), hi = tonumber(i)} or {name = n}
  end
end
for k, x in ipairs(runs) do runs[k] = x.name or ("%s%d-%d"):format(x.p, x.lo, x.hi) end

print(('{"kind":"hf_parity","model":%s,"family":"%s","mask":%s,"B":%d,"S":%d,"layers":%d,"max_rel_l2":%.4e,"rel_l2":[%s],"pairs":%s,"target":"%s"%s}')
  :format(json_string(dir:match("[^/]+$")), family, json_string(maskname), B, S, #got, worst, table.concat(errs, ","),
          json_string(table.concat(runs, ",")), r.plan.target, calib))
if not (worst <= 1e-2) then os.exit(1) end
