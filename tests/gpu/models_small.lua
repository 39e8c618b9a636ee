-- GPU: a reduced tests/gpu/models.lua, small enough for compute-sanitizer
-- (scripts/gpu-sanitize.sh): one batch element, S = 77, three small models through a CUDA
-- plan (cuBLASLt GEMMs with epilogues, the attention intrinsic, generated kernels, CUDA-graph
-- replay) against the reference interpreter: BERT with a BigBird mask (block-sparse
-- attention), LLaMA (grouped-query heads, rotary, causal), T5 (the bucket bias inside the
-- attention kernel, encoder and decoder). A second run with other input ids replays the
-- captured graph and must follow them.
--   build-gpu/stof run tests/gpu/models_small.lua
local stof = require("stof")
local models = require("stof.models")
local run = require("stof.models.run")

if not stof.cuda_mem_info() then
  print("no GPU: skipped")
  return
end

local function check(name, cfg, mask, B, S)
  local r = run.prepare(cfg, {batch = B, seq = S, mask = mask, dtype = "float16", hidden_states = true,
                              target = "cuda", seed = 3})
  for pass = 1, 2 do
    if pass == 2 then -- other input ids of the same shapes: the captured graph must follow them
      local new = {}
      for iname, t in pairs(r.inputs) do
        new[iname] = iname:match("input_ids$") and stof.rand(t:shape(), "int64", 99 + #iname) or t
      end
      r:run(new)
    end
    r.plan:poison()
    local got = {r:run()}
    local want = {stof.eval(r.model.hidden_states, r.model:feed(r.weights, r.inputs))}
    local worst = 0
    for i = 1, #want do
      local e = stof.rel_l2(got[i]:astype("float32"), want[i]:astype("float32"))
      if not (e <= worst) then worst = e end
    end
    print(("%-5s %-28s B %d S %3d pass %d: %d hidden states, worst rel L2 %.3g"):format(name, tostring(mask), B, S,
      pass, #want, worst))
    assert(worst < 1e-2, name .. ": the GPU plan disagrees with the interpreter")
  end
end

local bert = models.bert.config("bert-base", {hidden_size = 128, num_hidden_layers = 2, num_attention_heads = 2,
                                              intermediate_size = 256, vocab_size = 100})
local llama = models.llama.config("llama", {hidden_size = 256, num_hidden_layers = 2, num_attention_heads = 4,
                                            num_key_value_heads = 2, intermediate_size = 384, vocab_size = 100})
local t5 = models.t5.config("t5", {d_model = 128, d_kv = 64, num_heads = 2, d_ff = 256, num_layers = 2,
                                   vocab_size = 100})
check("bert", bert, stof.mask.bigbird(32, 32, 32, 0.1, 0), 1, 77)
check("llama", llama, stof.mask.dense(), 1, 77)
check("t5", t5, stof.mask.dense(), 1, 77)
print("ok")
