"""Hugging Face parity for stof's models (DESIGN.md section 8), on the GPU machine.

For each model: a transformers model built from its config with seeded random weights (fp16),
saved with save_pretrained (config.json + model.safetensors); for each mask: stof writes the
mask (bench/hf_compare.lua mask), transformers runs the model with that mask as an additive
attention mask (causal added for GPT-2) through an attention function registered with
transformers.AttentionInterface (plain SDPA, so the mask is exactly the one given), with
output_hidden_states; then stof loads the saved model with from_pretrained, runs the same
input ids through a plan (fp16, default scheme, CUDA graph) and prints the relative L2 error
of every hidden state (bench/hf_compare.lua compare). Exit status 1 if any case exceeds 1e-2.

  python3 bench/hf_compare.py [--stof build-gpu/stof] [--models bert-base,bert-large,gpt2]
                              [--masks dense,bigbird] [--shape 2x256] [--out DIR]
"""
import argparse, json, os, subprocess, sys, tempfile

import torch
import torch.nn.functional as F
import transformers as T
from safetensors.torch import load_file, save_file

MASK = {}


def masked_sdpa(module, q, k, v, attention_mask=None, scaling=None, dropout=0.0, **kw):
    """Scaled dot-product attention with this case's additive mask (and the model's own, if any)."""
    add = MASK["add"]
    if attention_mask is not None:  # the model's own mask (GPT-2: causal), boolean or additive
        m = attention_mask[..., : k.shape[-2]]
        if m.dtype == torch.bool:
            m = torch.zeros(m.shape, dtype=add.dtype, device=m.device).masked_fill(~m, float("-inf"))
        add = add + m.to(add.dtype)
    o = F.scaled_dot_product_attention(q, k, v, attn_mask=add, scale=scaling)
    return o.transpose(1, 2).contiguous(), None


def hf_model(name, S, dev):
    if name in ("bert-base", "bert-large"):
        big = dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096) if name == "bert-large" else {}
        cfg = T.BertConfig(max_position_embeddings=max(512, S), **big)
        make = lambda: T.BertModel(cfg, add_pooling_layer=False)
    elif name == "gpt2":
        cfg = T.GPT2Config(n_positions=max(1024, S))
        make = lambda: T.GPT2Model(cfg)
    else:
        raise SystemExit(f"hf_compare: unknown model {name}")
    torch.manual_seed(0)
    with torch.device(dev):
        model = make()
    return model.to(torch.float16).eval().requires_grad_(False), cfg


def set_impl(model, impl):
    for m in model.modules():
        c = getattr(m, "config", None)
        if c is not None and hasattr(c, "_attn_implementation"):
            c._attn_implementation = impl


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stof", default="build-gpu/stof")
    ap.add_argument("--models", default="bert-base,bert-large,gpt2")
    ap.add_argument("--masks", default="dense,bigbird")
    ap.add_argument("--shape", default="2x256")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    B, S = map(int, a.shape.split("x"))
    dev = "cuda"
    T.AttentionInterface.register("stof_masked_sdpa", masked_sdpa)
    work = a.out or tempfile.mkdtemp(prefix="stof-hf-")
    failed = 0
    print(json.dumps(dict(kind="env", gpu=torch.cuda.get_device_name(), torch=torch.__version__, transformers=T.__version__)), flush=True)
    for name in a.models.split(","):
        model, cfg = hf_model(name, S, dev)
        d = os.path.join(work, name)
        model.save_pretrained(d, safe_serialization=True)
        set_impl(model, "stof_masked_sdpa")
        g = torch.Generator().manual_seed(1)
        ids = torch.randint(0, cfg.vocab_size, (B, S), generator=g).to(dev)
        for mask in a.masks.split(","):
            mfile = os.path.join(work, f"mask-{mask}-{S}.safetensors")
            subprocess.run([a.stof, "run", "bench/hf_compare.lua", "mask", mask, str(S), mfile], check=True)
            m = load_file(mfile)["mask"].to(dev).bool()
            if name == "gpt2":
                m = m & torch.ones(S, S, dtype=torch.bool, device=dev).tril()
            MASK["add"] = torch.zeros(S, S, dtype=torch.float16, device=dev).masked_fill(~m, float("-inf"))
            with torch.inference_mode():
                out = model(input_ids=ids, output_hidden_states=True)
            ref = {f"hs.{i}": h.float().contiguous() for i, h in enumerate(out.hidden_states)}
            ref["input_ids"] = ids.to(torch.int64).contiguous()
            rfile = os.path.join(work, f"ref-{name}-{mask}.safetensors")
            save_file({k: v.cpu() for k, v in ref.items()}, rfile)
            r = subprocess.run([a.stof, "run", "bench/hf_compare.lua", "compare", d, mask, str(B), str(S), rfile],
                               capture_output=True, text=True)
            line = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""
            if r.returncode != 0:
                failed += 1
                print(json.dumps(dict(kind="hf_parity", model=name, mask=mask, error=(r.stderr or line)[-600:])), flush=True)
            else:
                print(line, flush=True)
        del model
        torch.cuda.empty_cache()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
