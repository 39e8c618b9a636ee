-- The stof half of bench/hf_compare.py (Hugging Face parity, DESIGN.md section 8).
--
--   stof run bench/hf_compare.lua mask NAME S OUT.safetensors
--       writes the suite mask NAME at sequence length S as a bool tensor "mask" [S, S]
--   stof run bench/hf_compare.lua compare MODEL_DIR MASK B S REF.safetensors [TARGET]
--       loads MODEL_DIR (config.json + model.safetensors as Hugging Face saves them) with
--       from_pretrained, runs it through a plan (fp16, default scheme, CUDA graph) on REF's
--       input_ids with MASK, and prints one JSON line: the relative L2 error of every hidden
--       state against REF's "hs.<i>" (Hugging Face's output_hidden_states)
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
local cfg_json = stof.load_json(dir .. "/config.json")
local key = cfg_json.model_type == "gpt2" and "gpt2" or "bert"
local mod = models[key]
local cfg, weights = mod.from_pretrained(dir, {dtype = "float16"})
cfg.model_type = key
local ref = stof.load(ref_path)
local r = run.prepare(cfg, {batch = B, seq = S, mask = maskname, dtype = "float16", weights = weights,
                            hidden_states = true, inputs = {input_ids = ref.input_ids}, target = target})
r.plan:poison()
local got = {r:run()}
local errs, worst = {}, 0
for i = 1, #got do
  local want = ref["hs." .. (i - 1)]
  assert(want, "the reference lacks hs." .. (i - 1))
  local e = stof.rel_l2(got[i]:astype("float32"), want)
  errs[#errs + 1] = ("%.3e"):format(e)
  if not (e <= worst) then worst = e end
end
print(('{"kind":"hf_parity","model":"%s","mask":"%s","B":%d,"S":%d,"layers":%d,"max_rel_l2":%.4e,"rel_l2":[%s],"target":"%s"}')
  :format(dir:match("[^/]+$"), maskname, B, S, #got, worst, table.concat(errs, ","), r.plan.target))
if not (worst <= 1e-2) then os.exit(1) end
