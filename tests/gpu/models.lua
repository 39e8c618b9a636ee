-- GPU: small BERT and GPT-2 (head dim 64, as the attention kernels need) through a CUDA plan
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
    if pass == 2 then r:run({input_ids = stof.rand({B, S}, "int64", 99)}) end
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
-- a model whose arena does not fit the GPU: a clear error before any launch
local ok, err = pcall(run.prepare, "bert-base", {batch = 4096, seq = 2048, mask = "bigbird", target = "cuda",
                                                 overrides = {num_hidden_layers = 1}})
print("too large: " .. tostring(err))
assert(not ok and tostring(err):find("MiB", 1, true) and tostring(err):find("free", 1, true), err)
print("ok")
