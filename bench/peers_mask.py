"""The peers on one mask of any shape, for `stof bench attention MASK ... --peers`.

stof writes the mask's instances as bool tensors into a safetensors file (one tensor per
instance "m<b>_<h>" of shape [Sq, Sk]; mask_b x mask_h instances, 1 where the mask does not
vary with b or h); this script times, on the same GPU, with the protocol of shared/bench/
peers.py (warm-up, median of CUDA-event timings):
  - FlexAttention (torch.compile'd), its block mask built from the same mask by
    create_block_mask over a mask_mod that indexes the tensor (block_mask_ms reported apart);
  - SDPA with the boolean mask (memory-efficient backend);
  - where the mask is all ones: SDPA FlashAttention-2 and cuDNN; where it is the causal lower
    triangle (Sq == Sk): FlashAttention-2 with is_causal.
One JSON object per line on stdout: {"impl", "ms", "block_mask_ms"?, "error"?}.

  python3 bench/peers_mask.py --mask FILE --B 8 --H 12 --Hkv 12 --Sq 4096 --Sk 4096 --D 64
                              [--dtype float16|bfloat16] [--reps 30]
"""
import argparse, json, struct, sys


def read_safetensors(path):
    """{name: (shape, raw bytes)} of a safetensors file's BOOL tensors (stdlib only)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        if n > 1 << 26:
            raise ValueError(f"{path}: header of {n} bytes")
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        if t["dtype"] != "BOOL":
            raise ValueError(f"{path}: tensor {name} is {t['dtype']}, BOOL expected")
        a, b = t["data_offsets"]
        shape = tuple(t["shape"])
        size = 1
        for s in shape:
            size *= s
        if b - a != size or b > len(data):
            raise ValueError(f"{path}: tensor {name}: offsets {a}..{b} do not hold {shape}")
        out[name] = (shape, data[a:b])
    return out


def instances(tensors):
    """mask_b, mask_h and the instances in (b, h) order, from the names m<b>_<h>."""
    keys = {}
    for name in tensors:
        if not name.startswith("m") or "_" not in name:
            raise ValueError(f"unexpected tensor {name}: m<b>_<h> expected")
        b, h = name[1:].split("_")
        keys[(int(b), int(h))] = name
    mb = 1 + max(b for b, _ in keys)
    mh = 1 + max(h for _, h in keys)
    if len(keys) != mb * mh:
        raise ValueError(f"{len(keys)} instances for {mb} x {mh}")
    return mb, mh, [keys[(b, h)] for b in range(mb) for h in range(mh)]


def emit(**kw):
    print(json.dumps(kw), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mask", required=True)
    for k in ("B", "H", "Hkv", "Sq", "Sk", "D"):
        ap.add_argument("--" + k, type=int, required=True)
    ap.add_argument("--dtype", default="float16")
    ap.add_argument("--reps", type=int, default=30)
    a = ap.parse_args()
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel, SDPBackend
    from torch.nn.attention.flex_attention import flex_attention, create_block_mask

    dev = "cuda"
    dt = {"float16": torch.float16, "bfloat16": torch.bfloat16}[a.dtype]
    tensors = read_safetensors(a.mask)
    mb, mh, names = instances(tensors)
    for n in names:
        if tensors[n][0] != (a.Sq, a.Sk):
            raise ValueError(f"instance {n} is {tensors[n][0]}, ({a.Sq}, {a.Sk}) expected")
    M = torch.stack([torch.frombuffer(bytearray(tensors[n][1]), dtype=torch.bool).view(a.Sq, a.Sk) for n in names])
    M = M.view(mb, mh, a.Sq, a.Sk).to(dev)

    def bench(fn, warm=5):
        for _ in range(warm):
            fn()
        torch.cuda.synchronize()
        ts = []
        for _ in range(a.reps):
            s = torch.cuda.Event(enable_timing=True)
            e = torch.cuda.Event(enable_timing=True)
            s.record(); fn(); e.record(); torch.cuda.synchronize()
            ts.append(s.elapsed_time(e))
        ts.sort()
        return ts[len(ts) // 2]

    q = torch.randn(a.B, a.H, a.Sq, a.D, device=dev, dtype=dt)
    k = torch.randn(a.B, a.Hkv, a.Sk, a.D, device=dev, dtype=dt)
    v = torch.randn(a.B, a.Hkv, a.Sk, a.D, device=dev, dtype=dt)
    gqa = a.Hkv != a.H

    def mask_mod(b, h, qi, ki):
        return M[b % mb if mb > 1 else 0, h % mh if mh > 1 else 0, qi, ki]

    try:
        torch.cuda.synchronize()
        t0 = torch.cuda.Event(enable_timing=True); t1 = torch.cuda.Event(enable_timing=True)
        t0.record()
        bm = create_block_mask(mask_mod, a.B if mb > 1 else None, a.H if mh > 1 else None, a.Sq, a.Sk, device=dev)
        t1.record(); torch.cuda.synchronize()
        bm_ms = t0.elapsed_time(t1)
        flex = torch.compile(flex_attention, dynamic=False)
        ms = bench(lambda: flex(q, k, v, block_mask=bm, enable_gqa=gqa))
        emit(impl="flex_attention", ms=ms, block_mask_ms=bm_ms)
    except Exception as ex:
        emit(impl="flex_attention", error=f"{type(ex).__name__}: {ex}"[-400:])
    kk, vv = (k, v) if not gqa else (k.repeat_interleave(a.H // a.Hkv, 1), v.repeat_interleave(a.H // a.Hkv, 1))
    try:
        with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
            ms = bench(lambda: F.scaled_dot_product_attention(q, kk, vv, attn_mask=M))
        emit(impl="sdpa_mem_efficient_bool_mask", ms=ms)
    except Exception as ex:
        emit(impl="sdpa_mem_efficient_bool_mask", error=f"{type(ex).__name__}: {ex}"[-400:])
    dense = bool(M.all())
    causal = a.Sq == a.Sk and mb == 1 and mh == 1 and bool(
        torch.equal(M[0, 0], torch.ones(a.Sq, a.Sk, device=dev, dtype=torch.bool).tril()))
    runs = []
    if dense:
        runs = [("sdpa_flash2", SDPBackend.FLASH_ATTENTION, False), ("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION, False)]
    elif causal:
        runs = [("sdpa_flash2_causal", SDPBackend.FLASH_ATTENTION, True)]
    for name, backend, is_causal in runs:
        try:
            with sdpa_kernel(backend):
                ms = bench(lambda: F.scaled_dot_product_attention(q, kk, vv, is_causal=is_causal))
            emit(impl=name, ms=ms)
        except Exception as ex:
            emit(impl=name, error=f"{type(ex).__name__}: {ex}"[-400:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
