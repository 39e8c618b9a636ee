"""Where Hugging Face's own fp16 run of a model departs from its float32 run (GPU machine).

bench/hf_compare.py --ref32 shows stof's fp16 plan and Hugging Face's fp16 model each against
the float32 model (same weights, same inputs, same mask). For LLaMA, Hugging Face's fp16 run
was the farther of the two (1.07e-2 at the last layer against stof's 3.7e-3), so stof's
distance to it was mostly the reference's own rounding. This script found where that rounding
happened (the rotary tables, from inv_freq rounded to fp16), without stof:

  local   each leaf module of the fp16 model (Linear, RMSNorm/LayerNorm, activation) and the
          rotary embedding run again in float32 on the very inputs the fp16 run gave it (the
          module's float32 twin): the rel L2 of the fp16 output against that is the error the
          module adds itself, nothing inherited;
  global  every module's output in the fp16 run against the same module's in the float32 run
          (everything inherited);
  fixes   the last hidden state's distance to float32 with one suspected source removed at a
          time: rms_norm_f32 (the fp16 model's RMSNorm multiplying its weight in float32 before
          its one rounding), residual_f32 (the float32 model with only its Linear layers in
          fp16: inputs, weights and outputs rounded, everything else float32).

  python3 bench/hf_drift.py [--model llama] [--layers 2] [--shape 2x256] [--round-inv-freq]
--round-inv-freq builds the fp16 model as hf_compare.py did before the eighth session
(Module.to(float16) rounding the rotary inv_freq buffers too). Prints one JSON line per
measurement: the local rows by error (largest first), the global rows by module name, then
the fix rows.
"""
import argparse, json, os, sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_compare as H  # noqa: E402


def rel(a, b):
    a, b = a.float(), b.float()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def first_tensor(o):
    if torch.is_tensor(o):
        return o
    if isinstance(o, (tuple, list)):
        for x in o:
            t = first_tensor(x)
            if t is not None:
                return t
    return None


def up(x):
    if torch.is_tensor(x) and x.is_floating_point():
        return x.float()
    if isinstance(x, tuple):
        return tuple(up(y) for y in x)
    return x


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="llama")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--shape", default="2x256")
    ap.add_argument("--round-inv-freq", action="store_true")
    a = ap.parse_args()
    B, S = map(int, a.shape.split("x"))
    H.T.AttentionInterface.register("stof_masked_sdpa", H.masked_sdpa)
    model, model32, cfg, S, _ = H.hf_model(a.model, S, a.layers, "cuda", ref32=True, inv_freq32=not a.round_inv_freq)
    for mm in (model, model32):
        for m in mm.modules():
            c = getattr(m, "config", None)
            if c is not None and hasattr(c, "_attn_implementation"):
                c._attn_implementation = "stof_masked_sdpa"
    causal = torch.ones(S, S, dtype=torch.bool, device="cuda").tril()
    full = torch.ones(S, S, dtype=torch.bool, device="cuda")
    fwd, _ = H.model_inputs(a.model, cfg, B, S, "cuda")

    def set_mask(dtype):
        H.MASK.clear()
        H.MASK.update(enc=H.additive(full, dtype), dec=H.additive(causal, dtype), cross=None)

    twins = dict(model32.named_modules())
    outs16, outs32, local = {}, {}, []

    def leaf(m):
        return not list(m.children()) or type(m).__name__.endswith("RotaryEmbedding")

    hooks = []
    for name, m in model.named_modules():
        if not name:
            continue
        def h16(mod, inp, kw, out, name=name):
            t = first_tensor(out)
            if t is not None:
                outs16[name] = t.detach().float()
            if leaf(mod) and name in twins:
                with torch.no_grad():
                    o32 = first_tensor(twins[name](*up(tuple(inp)), **{k: up(v) for k, v in kw.items()}))
                if t is not None and o32 is not None and o32.shape == t.shape:
                    local.append(dict(kind="local", module=name, type=type(mod).__name__, rel_l2=rel(t, o32)))
        hooks.append(m.register_forward_hook(h16, with_kwargs=True))
    for name, m in model32.named_modules():
        if name:
            hooks.append(m.register_forward_hook(
                lambda mod, inp, out, name=name: outs32.__setitem__(name, first_tensor(out).detach().float())
                if first_tensor(out) is not None else None))
    fwd32 = {k: v for k, v in fwd.items()}
    with torch.inference_mode():
        set_mask(torch.float16)
        o16 = model(**fwd).last_hidden_state.float()
        set_mask(torch.float32)
        o32 = model32(**fwd32).last_hidden_state.float()
    for h in hooks:
        h.remove()
    base = rel(o16, o32)
    rows = sorted(local, key=lambda r: -r["rel_l2"])
    rows += sorted((dict(kind="global", module=n, rel_l2=rel(outs16[n], outs32[n]))
                    for n in outs16 if n in outs32 and outs16[n].shape == outs32[n].shape),
                   key=lambda r: r["module"])
    for r in rows:
        print(json.dumps(r))
    print(json.dumps(dict(kind="fix", fix="none", last_rel_l2=base)), flush=True)

    # one suspected source at a time, patched into the fp16 model
    norms = [m for m in model.modules() if type(m).__name__.endswith("RMSNorm")]

    def norm_f32(self, x):
        v = x.float().pow(2).mean(-1, keepdim=True)
        return (self.weight.float() * (x.float() * torch.rsqrt(v + self.variance_epsilon))).to(x.dtype)

    for fix in ("rms_norm_f32", "residual_f32"):
        saved = []
        if fix == "rms_norm_f32":
            for m in norms:
                saved.append((m, m.forward))
                m.forward = norm_f32.__get__(m)
        if fix == "residual_f32":  # the whole model in fp32 but the linear layers (fp16 GEMMs)
            pass
        with torch.inference_mode():
            set_mask(torch.float16)
            if fix == "residual_f32":
                m2 = model32
                lin = [m for m in m2.modules() if isinstance(m, torch.nn.Linear)]
                def lin16(self, x):
                    return torch.nn.functional.linear(x.half(), self.weight.half(),
                                                      None if self.bias is None else self.bias.half()).float()
                for m in lin:
                    saved.append((m, m.forward))
                    m.forward = lin16.__get__(m)
                set_mask(torch.float32)
                o = m2(**fwd32).last_hidden_state.float()
            else:
                o = model(**fwd).last_hidden_state.float()
        for m, f in saved:
            m.forward = f
        print(json.dumps(dict(kind="fix", fix=fix, last_rel_l2=rel(o, o32))), flush=True)


if __name__ == "__main__":
    main()
