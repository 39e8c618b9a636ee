"""Hugging Face parity for stof's models (DESIGN.md section 8), on the GPU machine.

For each model: a transformers model built from its config (the shapes of the shared
peers.py) with seeded random weights (fp16), saved with save_pretrained (config.json +
model.safetensors); for each mask: stof writes the mask (bench/hf_compare.lua mask),
transformers runs the model with output_hidden_states through an attention function
registered with transformers.AttentionInterface (plain SDPA with exactly this case's additive
mask, plus the model's own additive terms: its attention mask if it makes one, T5's relative
position bias); then stof loads the saved directory with the family's from_pretrained, runs
the same inputs through a plan (fp16, default scheme, CUDA graph) and prints one JSON line of
the relative L2 error of every hidden state (bench/hf_compare.lua compare). Exit status 1 if
any case exceeds 1e-2 or fails.

  python3 bench/hf_compare.py [--stof build-gpu/stof] [--models bert-base,bert-large,gpt2,llama,t5,vit]
                              [--masks dense,bigbird] [--shape 2x256] [--layers N] [--target c] [--out DIR]
                              [--ref32] [--exact-reductions]

Models and masks (attention kinds: enc = the mask, dec = causal AND the mask, cross = none):
  bert-base, bert-large  BertModel (no pooler)                  enc
  gpt2                   GPT2Model                              dec
  llama                  LlamaModel, Llama-3.2-1B shape          dec (grouped-query: K/V heads repeated)
  t5                     T5Model, t5-base shape                  encoder self-attention enc, decoder
                         (input_ids and decoder_input_ids, S)    self-attention dec, cross-attention none;
                                                                 plus T5's position bias, no 1/sqrt(d)
  vit                    ViTModel base/16 (no pooler)            enc over all S tokens, class token included
The fp16 model is the float32 one cast with Module.to(float16), except the rotary embeddings'
inv_freq buffers, which stay float32 as from_pretrained(dtype=float16) keeps them (cast, they
move LLaMA's angles by up to p * theta * 2^-11: bench/hf_drift.py, docs/PERFORMANCE.md).
For vit, S picks the image: the smallest side 16 n with n * n + 1 >= S; the case runs with the
real token count n * n + 1 (2x256 -> 256 px, S = 257). --layers N shrinks every stack to N
layers (num_hidden_layers / n_layer / num_layers and num_decoder_layers), in config.json too.
The registered function counts its calls per attention kind: a model that does not route its
attention through the interface (T5 before transformers ~5.16) is an error, not a silent pass.

The reference file (ref-MODEL-MASK.safetensors, float32 on the CPU) holds the inputs stof
needs (input_ids, decoder_input_ids as int64; pixel_values as float32 of the fp16 values) and
the hidden states under the names hf_compare.lua pairs with stof's outputs:
  bert, gpt2, llama  hs.0 .. hs.L   Hugging Face's hidden_states: the embeddings' output, then
                     each layer's; hs.L is last_hidden_state (GPT-2 after ln_f, LLaMA after the
                     final norm, BERT the last layer as it is). stof: model.hidden_states.
  t5                 encoder_hs.0 .. encoder_hs.L, decoder_hs.0 .. decoder_hs.L: T5Model's
                     encoder_hidden_states and decoder_hidden_states (each stack's embeddings,
                     then each block's output); the last of each is the stack's output after its
                     final_layer_norm (encoder_last_hidden_state, last_hidden_state). stof:
                     model.encoder_hidden_states then model.decoder_hidden_states.
  vit                hs.0 .. hs.L   the embeddings' output and each layer's output, none with the
                     final layernorm (hs.L is the last ViTLayer's output, taken by a forward
                     hook); last_hidden_state  ViTModel's output, after the final layernorm.
                     stof: model.hidden_states, then model.output.
Why the last entries are taken from last_hidden_state (and the hook) rather than from
hidden_states[-1]: in transformers 5.x the tuple is collected by hooks on the layer classes
(utils/output_capturing.py, capture_outputs): the first layer's input, then each layer's
output, and with tie_last_hidden_states (the default) the last entry is replaced by the
model's last_hidden_state, i.e. after the final norm (LlamaModel: norm; T5Stack:
final_layer_norm; GPT2Model: ln_f); vision models that must keep the pre-norm state (ViTMSN,
CLIP, SigLIP) are decorated with tie_last_hidden_states=False. Transformers 4.x built the
tuple in a loop with the same result for the text models. Each JSON line records what this
transformers' hidden_states[-1] was (hf_last_tied: equal to last_hidden_state; for t5
[encoder, decoder]), so a change of convention shows instead of skewing the comparison.
"""
import argparse, collections, copy, json, os, subprocess, sys, tempfile

import torch
import torch.nn.functional as F
import transformers as T
from safetensors.torch import load_file, save_file

MASK = {}                       # this case's additive [S, S] masks by attention kind (None: no mask)
CALLS = collections.Counter()   # calls of masked_sdpa by attention kind during one forward


def additive(m, dtype):
    """A boolean mask (True: keep) as an additive one (0 / -inf); an additive one as it is."""
    if m.dtype != torch.bool:
        return m.to(dtype)
    return torch.zeros(m.shape, dtype=dtype, device=m.device).masked_fill(~m, float("-inf"))


def masked_sdpa(module, q, k, v, attention_mask=None, scaling=None, dropout=0.0, position_bias=None, **kw):
    """Scaled dot-product attention with this case's mask for the module's attention kind, plus
    the model's own additive terms: its attention_mask (None for a registered function that
    transformers has no mask builder for) and T5's position_bias (zeros for cross-attention)."""
    kind = module.hf_compare_kind
    CALLS[kind] += 1
    add = MASK[kind]
    for extra in (attention_mask, position_bias):
        if extra is None:
            continue
        e = additive(extra[..., : k.shape[-2]], q.dtype)
        add = e if add is None else add + e
    if k.shape[1] != q.shape[1]:  # grouped-query attention: query head h reads K/V head h // group
        group = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    o = F.scaled_dot_product_attention(q, k, v, attn_mask=add, scale=scaling)
    return o.transpose(1, 2).contiguous(), None


def hf_model(name, S, layers, dev, ref32=False, inv_freq32=True):
    """(model, config, S, expected attention calls by kind): the model of peers.py build() with
    seeded random weights in fp16; S is the token count (vit: n * n + 1)."""
    n = layers
    if name in ("bert-base", "bert-large"):
        big = dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096) if name == "bert-large" else {}
        if n:
            big["num_hidden_layers"] = n
        cfg = T.BertConfig(max_position_embeddings=max(512, S), **big)
        make, calls = (lambda: T.BertModel(cfg, add_pooling_layer=False)), dict(enc=cfg.num_hidden_layers)
    elif name == "gpt2":
        cfg = T.GPT2Config(n_positions=max(1024, S), **(dict(n_layer=n) if n else {}))
        make, calls = (lambda: T.GPT2Model(cfg)), dict(dec=cfg.n_layer)
    elif name == "llama":
        cfg = T.LlamaConfig(hidden_size=2048, intermediate_size=8192, num_hidden_layers=n or 16, num_attention_heads=32,
                            num_key_value_heads=8, vocab_size=128256, max_position_embeddings=max(2048, S))
        make, calls = (lambda: T.LlamaModel(cfg)), dict(dec=cfg.num_hidden_layers)
    elif name == "t5":
        cfg = T.T5Config(d_model=768, d_kv=64, d_ff=3072, num_layers=n or 12, num_decoder_layers=n or 12, num_heads=12,
                         relative_attention_num_buckets=32)
        make = lambda: T.T5Model(cfg)
        calls = dict(enc=cfg.num_layers, dec=cfg.num_decoder_layers, cross=cfg.num_decoder_layers)
    elif name == "vit":
        side = 1
        while side * side + 1 < S:
            side += 1
        S = side * side + 1
        cfg = T.ViTConfig(image_size=16 * side, patch_size=16, **(dict(num_hidden_layers=n) if n else {}))
        make, calls = (lambda: T.ViTModel(cfg, add_pooling_layer=False)), dict(enc=cfg.num_hidden_layers)
    else:
        raise SystemExit(f"hf_compare: unknown model {name} (bert-base, bert-large, gpt2, llama, t5, vit)")
    torch.manual_seed(0)
    with torch.device(dev):  # random init on the GPU (llama's on the CPU takes a minute)
        model32 = make().eval().requires_grad_(False)
    # rotary tables' inverse frequencies stay float32, as in a model loaded with from_pretrained(dtype=float16)
    # (LlamaRotaryEmbedding computes them in float32 at construction); Module.to(float16) would round them,
    # which moves position p's angles by up to p * theta * 2^-11 (rel L2 5e-3 on the cos/sin tables at S 256)
    keep32 = {} if not inv_freq32 else {n: b.clone() for n, b in model32.named_buffers(remove_duplicate=False) if n.rsplit(".", 1)[-1] in ("inv_freq", "original_inv_freq")}
    model = copy.deepcopy(model32).to(torch.float16) if ref32 else model32.to(torch.float16)
    for n, b in keep32.items():
        owner, attr = n.rsplit(".", 1) if "." in n else ("", n)
        setattr(model.get_submodule(owner), attr, b)
    decoder = name in ("gpt2", "llama")
    for mm in (model, model32) if ref32 else (model,):
        for mname, m in mm.named_modules():  # the attention kind, read by masked_sdpa
            m.hf_compare_kind = ("cross" if "EncDecAttention" in mname
                                 else "dec" if decoder or mname.startswith("decoder.") else "enc")
    return model, (model32 if ref32 else None), cfg, S, calls


def model_inputs(name, cfg, B, S, dev):
    """(the forward's keyword arguments, the inputs stof reads from the reference file)."""
    g = torch.Generator().manual_seed(1)
    ids = lambda: torch.randint(0, cfg.vocab_size, (B, S), generator=g, dtype=torch.int64)
    if name == "vit":
        px = torch.randn(B, cfg.num_channels, cfg.image_size, cfg.image_size, generator=g).to(torch.float16)
        return dict(pixel_values=px.to(dev)), dict(pixel_values=px.float())
    if name == "t5":
        a, b = ids(), ids()
        return dict(input_ids=a.to(dev), decoder_input_ids=b.to(dev), use_cache=False), dict(input_ids=a, decoder_input_ids=b)
    a = ids()
    fwd = dict(input_ids=a.to(dev))
    if name in ("gpt2", "llama"):
        fwd["use_cache"] = False
    return fwd, dict(input_ids=a)


def reference(name, out, last_layer):
    """(name -> hidden state, hf_last_tied): the hidden states in the pairing of the docstring."""
    if name == "t5":
        enc, dec = list(out.encoder_hidden_states), list(out.decoder_hidden_states)
        tied = [torch.equal(enc[-1], out.encoder_last_hidden_state), torch.equal(dec[-1], out.last_hidden_state)]
        enc[-1], dec[-1] = out.encoder_last_hidden_state, out.last_hidden_state
        ref = {f"encoder_hs.{i}": h for i, h in enumerate(enc)}
        ref.update({f"decoder_hs.{i}": h for i, h in enumerate(dec)})
        return ref, tied
    hs = list(out.hidden_states)
    tied = torch.equal(hs[-1], out.last_hidden_state)
    if name == "vit":
        if not tied and not torch.equal(hs[-1], last_layer):
            raise RuntimeError("ViT's hidden_states[-1] is neither the last layer's output nor last_hidden_state")
        hs[-1] = last_layer
        ref = {f"hs.{i}": h for i, h in enumerate(hs)}
        ref["last_hidden_state"] = out.last_hidden_state
        return ref, tied
    hs[-1] = out.last_hidden_state
    return {f"hs.{i}": h for i, h in enumerate(hs)}, tied


def run_case(a, name, model, model32, cfg, S, calls, d, mask, work, dev):
    """The JSON record of one (model, mask) case; raises on a failure of the Hugging Face side."""
    B = a.B
    mfile = os.path.join(work, f"mask-{mask}-{S}.safetensors")
    subprocess.run([a.stof, "run", "bench/hf_compare.lua", "mask", mask, str(S), mfile], check=True)
    m = load_file(mfile)["mask"].to(dev).bool()
    causal = m & torch.ones(S, S, dtype=torch.bool, device=dev).tril()
    MASK.clear()
    MASK.update(enc=additive(m, torch.float16), dec=additive(causal, torch.float16), cross=None)
    fwd, saved = model_inputs(name, cfg, B, S, dev)
    def forward(mdl, kw):
        # (output, the last ViT layer's output or None) of one forward with hidden states
        got, hook = [], None
        if name == "vit":  # the last ViTLayer, wherever this transformers keeps it
            layer = [m for m in mdl.modules() if type(m).__name__ == "ViTLayer"][-1]
            hook = layer.register_forward_hook(lambda mod, inp, o: got.append(o[0] if isinstance(o, tuple) else o))
        try:
            with torch.inference_mode():
                o = mdl(**kw, output_hidden_states=True)
        finally:
            if hook is not None:
                hook.remove()
        return o, got[-1] if got else None

    CALLS.clear()
    out, last = forward(model, fwd)
    calls16 = dict(CALLS)
    if model32 is not None:  # the float32 model on the same inputs: the calibration
        MASK.update({k: (None if v is None else v.float()) for k, v in MASK.items()})
        fwd32 = {k: (v.float() if torch.is_tensor(v) and v.is_floating_point() else v) for k, v in fwd.items()}
        out32, last32 = forward(model32, fwd32)
    CALLS.clear()
    CALLS.update(calls16)
    last_layer = [last] if last is not None else []
    if dict(CALLS) != calls:
        raise RuntimeError(f"{type(model).__name__} called the registered attention {dict(CALLS)} times, "
                         f"expected {calls}: this transformers ({T.__version__}) does not route its attention "
                         "through AttentionInterface, so the case's mask would not apply")
    ref, tied = reference(name, out, last_layer[-1] if last_layer else None)
    ref = {k: v.float().contiguous().cpu() for k, v in ref.items()}
    if model32 is not None:
        r32, _ = reference(name, out32, last32)
        ref.update({"f32." + k: v.float().contiguous().cpu() for k, v in r32.items()})
    ref.update({k: v.contiguous() for k, v in saved.items()})
    rfile = os.path.join(work, f"ref-{name}-{mask}.safetensors")
    save_file(ref, rfile)
    cmd = [a.stof, "run", "bench/hf_compare.lua", "compare", d, mask, str(B), str(S), rfile]
    if a.target:
        cmd.append(a.target)
    r = subprocess.run(cmd, capture_output=True, text=True)
    line = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""
    try:
        rec = json.loads(line)
    except ValueError:
        return dict(kind="hf_parity", model=name, mask=mask, error=(r.stderr or line)[-600:]), False
    rec.update(model=name, hf_last_tied=tied)
    return rec, r.returncode == 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stof", default="build-gpu/stof")
    ap.add_argument("--models", default="bert-base,bert-large,gpt2,llama,t5,vit")
    ap.add_argument("--masks", default="dense,bigbird")
    ap.add_argument("--shape", default="2x256")
    ap.add_argument("--layers", type=int, default=None, help="every stack shrunk to this many layers")
    ap.add_argument("--target", default=None, help="stof's target (default: cuda where there is a GPU)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--ref32", action="store_true",
                    help="also run the model in float32 (same weights): each line then gives stof's error "
                         "against it (rel_l2_f32) and Hugging Face fp16's own (hf16_vs_f32)")
    ap.add_argument("--exact-reductions", action="store_true",
                    help="run Hugging Face's fp16 GEMMs with torch.backends.cuda.matmul."
                         "allow_fp16_reduced_precision_reduction = False (PyTorch's default lets cuBLAS "
                         "reduce split-K partial sums in fp16); recorded in the env line")
    a = ap.parse_args()
    if a.exact_reductions:
        torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    a.B, S_req = map(int, a.shape.split("x"))
    dev = "cuda"
    T.AttentionInterface.register("stof_masked_sdpa", masked_sdpa)
    work = a.out or tempfile.mkdtemp(prefix="stof-hf-")
    failed = 0
    print(json.dumps(dict(kind="env", gpu=torch.cuda.get_device_name(), torch=torch.__version__, transformers=T.__version__,
                                fp16_reduced_precision_reduction=torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction)),
          flush=True)
    for name in a.models.split(","):
        model, model32, cfg, S, calls = hf_model(name, S_req, a.layers, dev, a.ref32)
        d = os.path.join(work, name)
        model.save_pretrained(d, safe_serialization=True)
        for m in [*model.modules(), *(model32.modules() if model32 is not None else [])]:
            c = getattr(m, "config", None)
            if c is not None and hasattr(c, "_attn_implementation"):
                c._attn_implementation = "stof_masked_sdpa"
        for mask in a.masks.split(","):
            try:
                rec, ok = run_case(a, name, model, model32, cfg, S, calls, d, mask, work, dev)
            except Exception as ex:
                rec, ok = dict(kind="hf_parity", model=name, mask=mask, error=f"{type(ex).__name__}: {ex}"[-600:]), False
            failed += not ok
            print(json.dumps(rec), flush=True)
        del model, model32
        torch.cuda.empty_cache()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
