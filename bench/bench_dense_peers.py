#!/usr/bin/env python3
"""The dense peers of stof's scheduled kernels, timed with PyTorch on the GPU machine in
the same device call as stof's own timings (docs/PERFORMANCE.md, "Schedules"):

  gemm       fp16 A[M, K] @ W[K, N] (cuBLAS through torch.matmul), TFLOP/s
  copy       device-to-device copy of an [R, C] fp16 tensor (x.clone()), GB/s read + written
  softmax    torch.softmax over the rows of [R, C] fp16, GB/s
  layernorm  F.layer_norm over the rows of [R, C] fp16 with weight and bias, GB/s

CUDA events, warm-up, median of --reps runs over 4 rotated input sets. One JSON object per
line on stdout (and appended to --out).

  python3 bench/bench_dense_peers.py [--gemm 4096x4096x4096] [--rows 16384x4096] [--out F]
"""
import argparse, json, statistics

import torch
import torch.nn.functional as F


def timed(fn, inputs, reps):
    for x in inputs:  # warm-up, one pass over every input set
        fn(x)
    torch.cuda.synchronize()
    ms = []
    for r in range(reps):
        x = inputs[r % len(inputs)]
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn(x)
        b.record()
        b.synchronize()
        ms.append(a.elapsed_time(b))
    return statistics.median(ms)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gemm", default="4096x4096x4096")
    ap.add_argument("--rows", default="16384x4096")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    out = open(a.out, "a") if a.out else None

    def emit(**kw):
        line = json.dumps(kw)
        print(line, flush=True)
        if out:
            out.write(line + "\n")
            out.flush()

    dev = torch.device("cuda")
    emit(kind="env", torch=torch.__version__, gpu=torch.cuda.get_device_name())
    torch.manual_seed(0)
    M, N, K = map(int, a.gemm.split("x"))
    sets = [(torch.randn(M, K, device=dev, dtype=torch.float16), torch.randn(K, N, device=dev, dtype=torch.float16))
            for _ in range(4)]
    ms = timed(lambda x: torch.matmul(x[0], x[1]), sets, a.reps)
    emit(kind="dense", op="gemm", impl="cublas", M=M, N=N, K=K, ms=ms, tflops=2 * M * N * K / ms / 1e9)
    del sets
    R, C = map(int, a.rows.split("x"))
    xs = [torch.randn(R, C, device=dev, dtype=torch.float16) for _ in range(4)]
    g, bta = torch.randn(C, device=dev, dtype=torch.float16), torch.randn(C, device=dev, dtype=torch.float16)
    nbytes = 2 * R * C * 2  # read once, written once
    for op, fn in (("copy", lambda x: x.clone()),
                   ("softmax", lambda x: torch.softmax(x, dim=-1)),
                   ("layernorm", lambda x: F.layer_norm(x, (C,), g, bta))):
        ms = timed(fn, xs, a.reps)
        emit(kind="dense", op=op, impl="torch", R=R, C=C, ms=ms, gbps=nbytes / ms / 1e6)


if __name__ == "__main__":
    main()
