"""Session 20 call 3's probe (kept as the record of what ran; bench/peers_sustained.py took it
over): how the timing protocol moves a dense attention time on this GPU. cuDNN's SDPA
(PyTorch, layout [B, H, S, D], f16) timed three ways at one shape, with the SM clock and the
power read through NVML every 10 ms during each:

  peers     ../shared/bench/peers.py's protocol: 5 warm-ups, then 30 runs, each between its
            own events and followed by a synchronize (the GPU idles between runs)
  warm      100 ms of back-to-back launches first, then the same 30 runs (bench_attention's
            protocol until session 20)
  sustained 2 s of back-to-back launches, then 30 back-to-back runs between events (attn_dev's)

  python3 bench/power_probe.py B H S D      (run from the repository root in that call)
One line per protocol: median ms, mean SM MHz and W over the timed runs and over the warm-up.
"""
import sys, threading, time

import pynvml
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

B, H, S, D = (int(x) for x in sys.argv[1:5])
pynvml.nvmlInit()
dev = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
samples, tag, stop = [], ["idle"], [False]

def sampler():
    while not stop[0]:
        samples.append((tag[0], pynvml.nvmlDeviceGetClockInfo(dev, pynvml.NVML_CLOCK_SM),
                        pynvml.nvmlDeviceGetPowerUsage(dev) / 1000.0))
        time.sleep(0.01)

torch.manual_seed(0)
sets = [[torch.randn(B, H, S, D, device="cuda", dtype=torch.float16) for _ in range(3)] for _ in range(3)]
def fn(i):
    q, k, v = sets[i % 3]
    torch.nn.functional.scaled_dot_product_attention(q, k, v)

def timed_sync(n):
    ts = []
    for i in range(n):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); fn(i); e.record(); torch.cuda.synchronize(); ts.append(s.elapsed_time(e))
    return sorted(ts)[n // 2]

def timed_b2b(n):
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
    for i, (s, e) in enumerate(ev):
        s.record(); fn(i); e.record()
    torch.cuda.synchronize()
    return sorted(s.elapsed_time(e) for s, e in ev)[n // 2]

def b2b_for(ms):
    t0 = time.time(); i = 0
    while (time.time() - t0) * 1000 < ms:
        for _ in range(8): fn(i); i += 1
        torch.cuda.synchronize()

def mean(tagname, k):
    v = [x[k] for x in samples if x[0] == tagname]
    return sum(v) / len(v) if v else float("nan")

th = threading.Thread(target=sampler, daemon=True); th.start()
with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
    fn(0); torch.cuda.synchronize(); time.sleep(1.0)
    for name in ("peers", "warm", "sustained"):
        time.sleep(1.0)
        tag[0] = name + "-warm"
        if name == "peers":
            for i in range(5): fn(i)
        elif name == "warm": b2b_for(100)
        else: b2b_for(2000)
        torch.cuda.synchronize()
        tag[0] = name
        ms = timed_b2b(30) if name == "sustained" else timed_sync(30)
        tag[0] = "idle"
        print(f"cudnn B={B} H={H} S={S} D={D} {name:9s} {ms:.4f} ms  timed: {mean(name, 1):6.0f} MHz "
              f"{mean(name, 2):5.0f} W  warm-up: {mean(name + '-warm', 1):6.0f} MHz {mean(name + '-warm', 2):5.0f} W",
              flush=True)
stop[0] = True
