"""The peers at long context (issue 14: batch 1, H 32, D 128, S 32k-128k), on the GPU machine.

peers.py attn builds every sparse mask as a dense S x S boolean as well (for SDPA's
memory-efficient kernel), which at S = 131072 is 16 GiB per mask and minutes of SDPA; this
script takes the parts of it that make sense there, with its own definitions (its suite()
mask_mods, its bench() timing), so that the numbers are the ones peers.py would report:
  dense   SDPA FlashAttention-2 and cuDNN
  causal  SDPA FlashAttention-2 (is_causal)
  every suite mask but dense: FlexAttention (torch.compile'd, block mask from
          create_block_mask(_compile=True)), its time and block_mask_ms (create_block_mask
          timed as peers.py times it: 1 warm-up, median of 5)
plus the peak device memory of each case (torch.cuda.max_memory_allocated: q, k, v included).

  python3 bench/peers_long.py [--peers .peers/peers.py] [--shapes 1x32768,1x65536,1x131072]
                              [--heads 32] [--dim 128] [--masks ...] [--out FILE]
                              [--block-mask-only]
One JSON line per case (the fields of peers.py's, plus peak_mb). --block-mask-only: only
create_block_mask's time (block_mask_ms, impl "create_block_mask"), no attention (dense is
skipped; what bench/format_ab.sh compares stof's format build with).
"""
import argparse, importlib.util, json, sys, time

import torch
import torch.nn.functional as F


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--peers", default=".peers/peers.py")
    ap.add_argument("--shapes", default="1x32768,1x65536,1x131072")
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--masks", default="dense,causal,sliding,causal_sliding,longformer,bigbird,document")
    ap.add_argument("--out", default=None)
    ap.add_argument("--block-mask-only", action="store_true")
    a = ap.parse_args()
    spec = importlib.util.spec_from_file_location("peers", a.peers)
    P = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(P)
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    out = open(a.out, "a") if a.out else None

    def emit(**kw):
        kw["peak_mb"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
        line = json.dumps(dict(kind="attn", **kw))
        print(line, flush=True)
        if out:
            out.write(line + "\n")
            out.flush()

    dev, dt = "cuda", torch.float16
    flex = torch.compile(flex_attention, dynamic=False)
    for shp in a.shapes.split(","):
        B, S = map(int, shp.split("x"))
        H, D = a.heads, a.dim
        q, k, v = (torch.randn(B, H, S, D, device=dev, dtype=dt) for _ in range(3))
        base = dict(B=B, H=H, S=S, D=D, dtype="float16")
        masks = a.masks.split(",")
        mods = P.suite(S, dev)
        for name in masks:
            torch.cuda.reset_peak_memory_stats()
            try:
                if a.block_mask_only:
                    if name == "dense":
                        continue
                    mod = mods[name]
                    t0 = time.time()
                    create_block_mask(mod, None, None, S, S, device=dev, _compile=True)
                    torch.cuda.synchronize()
                    first = time.time() - t0
                    bm_ms = P.bench(lambda: create_block_mask(mod, None, None, S, S, device=dev, _compile=True), warm=1, rep=5)
                    emit(**base, mask=name, impl="create_block_mask", first_call_s=round(first, 2), block_mask_ms=bm_ms)
                    continue
                if name == "dense":
                    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                        emit(**base, mask=name, impl="sdpa_flash2", ms=P.bench(lambda: F.scaled_dot_product_attention(q, k, v), rep=10), density=1.0)
                    torch.cuda.reset_peak_memory_stats()
                    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                        emit(**base, mask=name, impl="sdpa_cudnn", ms=P.bench(lambda: F.scaled_dot_product_attention(q, k, v), rep=10), density=1.0)
                    continue
                if name == "causal":
                    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                        emit(**base, mask=name, impl="sdpa_flash2", ms=P.bench(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), rep=10))
                    torch.cuda.reset_peak_memory_stats()
                mod = mods[name]
                t0 = time.time()
                bm = create_block_mask(mod, None, None, S, S, device=dev, _compile=True)
                flex(q, k, v, block_mask=bm)
                torch.cuda.synchronize()
                first = time.time() - t0
                bm_ms = P.bench(lambda: create_block_mask(mod, None, None, S, S, device=dev, _compile=True), warm=1, rep=5)
                emit(**base, mask=name, impl="flex_attention", ms=P.bench(lambda: flex(q, k, v, block_mask=bm), rep=10),
                     first_call_s=round(first, 2), block_mask_ms=bm_ms)
                del bm
            except Exception as ex:  # noqa: BLE001 (one case's failure is its line)
                emit(**base, mask=name, impl="sdpa" if name == "dense" else "flex_attention or sdpa_flash2",
                     error=f"{type(ex).__name__}: {ex}"[:300])
            torch.cuda.empty_cache()
        del q, k, v
        torch.cuda.empty_cache()


if __name__ == "__main__":
    sys.exit(main())
