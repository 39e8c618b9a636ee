"""The dense and causal peers (FlashAttention-2 and cuDNN through PyTorch's SDPA, FlexAttention
for causal) timed with bench_attention's protocol instead of peers.py's, so that stof and its
peers can be compared at the same GPU state (issue 14, item 1):

  python3 bench/peers_sustained.py PEERS_PY --shapes 16x2048 --heads 12 --dim 128
          [--masks dense,causal] [--warmup-ms 3000] [--out FILE]

Protocol (bench_attention --warmup-ms W): 5 launches, then W ms of back-to-back launches, then 30
runs, each between its own events and followed by a synchronize; the median. Inputs rotate
over three sets (bench_attention does; peers.py reuses one). peers.py itself warms up with 5
launches only: on an H200 (700 W limit) a dense attention kernel then runs at the 1980 MHz
boost clock, while after a few hundred ms of back-to-back launches the power limit holds it
near 1500 MHz and the same kernel takes ~15% longer (bench/results/s20/README.md). The SM
clock and the power, read through NVML every 10 ms, are averaged over the timed runs (sm_mhz,
watts) and over the warm-up (warm_sm_mhz, warm_watts); NVML's power reading lags, so read the
clock. One JSON line per (shape, mask, peer) in peers.py's format (bench/report.py reads it),
with "protocol", "warmup_ms", the clocks and the power added. Launched from Python, a peer's
kernels of ~0.1 ms or less may leave the GPU idle between launches and so not reach the cap
(session 20 read 1815-1980 MHz in the peers' warm-up at 8 x 1024, while stof's own clock was
not recorded): read warm_sm_mhz before comparing.
"""
import argparse, importlib.util, json, sys, threading, time

import pynvml
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("peers_py")
    ap.add_argument("--shapes", default="16x2048")
    ap.add_argument("--masks", default="dense,causal")
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--warmup-ms", type=float, default=3000)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    spec = importlib.util.spec_from_file_location("peers", a.peers_py)
    peers = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(peers)
    out = open(a.out, "a") if a.out else None

    pynvml.nvmlInit()
    dev = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
    samples, tag, stop = [], ["idle"], [False]

    def sampler():
        while not stop[0]:
            samples.append((tag[0], pynvml.nvmlDeviceGetClockInfo(dev, pynvml.NVML_CLOCK_SM),
                            pynvml.nvmlDeviceGetPowerUsage(dev) / 1000.0))
            time.sleep(0.01)

    def mean(t, k):
        v = [s[k] for s in samples if s[0] == t]
        return round(sum(v) / len(v), 1) if v else None

    def timed(fn):
        samples.clear()
        tag[0] = "warm"
        for i in range(5): fn(i)
        torch.cuda.synchronize()
        t0, i = time.time(), 0
        while (time.time() - t0) * 1000 < a.warmup_ms:
            for _ in range(64): fn(i); i += 1  # a synchronize every 64: few idle gaps
            torch.cuda.synchronize()
        tag[0] = "timed"
        ts = []
        for r in range(30):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record(); fn(r); e.record(); torch.cuda.synchronize(); ts.append(s.elapsed_time(e))
        tag[0] = "idle"
        return dict(ms=sorted(ts)[15], sm_mhz=mean("timed", 1), watts=mean("timed", 2),
                    warm_sm_mhz=mean("warm", 1), warm_watts=mean("warm", 2))

    def emit(**kw):
        line = json.dumps(kw)
        print(line, flush=True)
        if out: out.write(line + "\n"); out.flush()

    th = threading.Thread(target=sampler, daemon=True)
    th.start()
    flex = torch.compile(flex_attention, dynamic=False)
    emit(kind="env", gpu=torch.cuda.get_device_name(), protocol="sustained", warmup_ms=a.warmup_ms)
    for shp in a.shapes.split(","):
        B, S = map(int, shp.split("x")); H, D = a.heads, a.dim
        sets = [[torch.randn(B, H, S, D, device="cuda", dtype=torch.float16) for _ in range(3)] for _ in range(3)]
        base = dict(kind="attn", B=B, H=H, S=S, D=D, dtype="float16", protocol="sustained", warmup_ms=a.warmup_ms)
        for mask in a.masks.split(","):
            if mask not in ("dense", "causal"):
                print(f"peers_sustained: mask {mask} skipped (dense and causal only)", file=sys.stderr)
                continue
            causal = mask == "causal"
            dens = 1.0 if not causal else (S + 1) / (2 * S)
            for impl, backend in (("sdpa_flash2", SDPBackend.FLASH_ATTENTION),
                                  ("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION)):
                try:
                    with sdpa_kernel(backend):
                        r = timed(lambda i: F.scaled_dot_product_attention(*sets[i % 3], is_causal=causal))
                    emit(**base, mask=mask, impl=impl, density=dens, **r)
                except Exception as ex:
                    emit(**base, mask=mask, impl=impl, error=str(ex)[:200])
            if causal:
                mod = peers.suite(S, "cuda")["causal"]
                bm = create_block_mask(mod, None, None, S, S, device="cuda", _compile=True)
                r = timed(lambda i: flex(*sets[i % 3], block_mask=bm))
                emit(**base, mask=mask, impl="flex_attention", density=dens, **r)
        del sets
        torch.cuda.empty_cache()
    stop[0] = True

if __name__ == "__main__":
    main()
