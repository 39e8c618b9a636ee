-- GPU: small BERT, GPT-2, LLaMA, T5 and ViT (head dim 64, as the attention kernels need) through a CUDA plan
-- (cuBLASLt GEMMs with epilogues, the attention intrinsic, generated kernels, CUDA-graph
-- replay) against the reference interpreter, float16, dense and BigBird masks, odd length;
-- a second run with other input ids replays the captured graph and must follow them.
--   build-gpu/stof run tests/gpu/models.lua
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
    if pass == 2 then -- other inputs of the same shapes: the captured graph must follow them
      local new = {}
      for name, t in pairs(r.inputs) do
        new[name] = name:match("input_ids$") and stof.rand(t:shape(), "int64", 99 + #name)
          or name == "pixel_values" and stof.rand(t:shape(), t:dtype(), 99) or t
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
  return r
end

local bert = models.bert.config("bert-base", {hidden_size = 128, num_hidden_layers = 2, num_attention_heads = 2,
                                              intermediate_size = 256, vocab_size = 100})
local gpt2 = models.gpt2.config("gpt2", {n_embd = 128, n_layer = 2, n_head = 2, vocab_size = 100})
for _, mask in ipairs({stof.mask.dense(), stof.mask.bigbird(32, 32, 32, 0.1, 0)}) do
  local r = check("bert", bert, mask, 2, 77)
  if tostring(mask):find("dense") then print(r.plan:describe()) end
  check("gpt2", gpt2, mask, 2, 77)
end
check("bert", bert, stof.mask.bigbird(32, 32, 32, 0.1, 0), 1, 130)
-- LLaMA (grouped-query heads, rotary, causal & the mask), T5 (the bucket bias inside the
-- attention kernel, encoder + decoder, cross-attention Sq = Sk here), ViT (class token, S =
-- 7 x 7 + 1 = 50 patches)
local llama = models.llama.config("llama", {hidden_size = 256, num_hidden_layers = 2, num_attention_heads = 4,
                                            num_key_value_heads = 2, intermediate_size = 384, vocab_size = 100})
local t5 = models.t5.config("t5", {d_model = 128, d_kv = 64, num_heads = 2, d_ff = 256, num_layers = 2,
                                   vocab_size = 100})
local vit = models.vit.config("vit", {hidden_size = 128, num_hidden_layers = 2, num_attention_heads = 2,
                                      intermediate_size = 256})
for _, mask in ipairs({stof.mask.dense(), stof.mask.bigbird(32, 32, 32, 0.1, 0)}) do
  check("llama", llama, mask, 2, 77)
  check("t5", t5, mask, 2, 77)
  check("vit", vit, mask, 2, 50)
end
-- a model whose arena does not fit the GPU: a clear error before any launch
local ok, err = pcall(run.prepare, "bert-base", {batch = 4096, seq = 2048, mask = "bigbird", target = "cuda",
                                                 overrides = {num_hidden_layers = 1}})
print("too large: " .. tostring(err))
assert(not ok and tostring(err):find("MiB", 1, true) and tostring(err):find("free", 1, true), err)
print("ok")
