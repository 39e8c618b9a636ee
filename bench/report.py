"""Turns one benchmark run (stof.jsonl from bench_attention, peers.jsonl from peers.py,
same GPU, same run) into the markdown table of docs/PERFORMANCE.md and a chart.

  python3 bench/report.py RUN_DIR [--chart docs/attention.svg]

Ratios are peer time / stof time (above 1: stof is faster). "best peer" is the fastest
peer that computes the same mask (FlashAttention-2 and cuDNN only for dense/causal).
"""
import argparse, json, math, os, sys

SPARSE = ("sliding", "causal_sliding", "longformer", "bigbird", "document")
PEERS = (("flex_attention", "Flex"), ("sdpa_mem_efficient_boolmask", "SDPA mask"),
         ("sdpa_flash2", "FA2"), ("sdpa_cudnn", "cuDNN"))

def load(path):
    rows = []
    if os.path.exists(path):
        for line in open(path):
            line = line.strip()
            if line.startswith("{"):
                rows.append(json.loads(line))
    return rows

def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("run")
    ap.add_argument("--chart", default=None)
    a = ap.parse_args()
    stof = [r for r in load(os.path.join(a.run, "stof.jsonl")) if r.get("asked", "auto") == "auto"]
    peers = load(os.path.join(a.run, "peers.jsonl"))
    gpu = next((r["gpu"] for r in peers if r.get("kind") == "env"), stof[0]["gpu"] if stof else "?")
    peer = {}
    for r in peers:
        if r.get("kind") == "attn" and "ms" in r:
            peer[(r["mask"], r["B"], r["S"], r["H"], r["D"], r["impl"])] = r
    head = ["mask", "B", "S", "H", "D", "stof ms", "kernel", "TFLOP/s", "roofline", "density (stof / peer)"]
    head += [f"{n} ms (x)" for _, n in PEERS] + ["vs best peer"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    vs_flex, vs_best, dense_fa2 = [], [], []
    chart = []
    for r in sorted(stof, key=lambda r: (r["H"] * r["D"], r["B"] * r["S"], r["S"], r["mask"])):
        key = (r["mask"], r["B"], r["S"], r["H"], r["D"])
        cells = [r["mask"], r["B"], r["S"], r["H"], r["D"], f'{r["ms"]:.4f}', f'{r["kernel"]}{"-wgmma" if r.get("hopper") else ""}/{r["tile"]}',
                 f'{r["tflops"]:.1f}', f'{100 * r["roofline"]:.0f}%']
        pd = next((peer[key + (i,)]["density"] for i, _ in PEERS if key + (i,) in peer), None)
        cells.append(f'{r["density"]:.4f} / {pd:.4f}' if pd is not None else f'{r["density"]:.4f}')
        best = None
        for impl, name in PEERS:
            p = peer.get(key + (impl,))
            if p is None:
                cells.append("")
                continue
            x = p["ms"] / r["ms"]
            cells.append(f'{p["ms"]:.4f} ({x:.2f}x)')
            best = p["ms"] if best is None else min(best, p["ms"])
            if impl == "flex_attention" and r["mask"] in SPARSE:
                vs_flex.append(x)
            if impl == "sdpa_flash2" and r["mask"] in ("dense", "causal"):
                dense_fa2.append((r["mask"], r["B"], r["S"], x))
        cells.append(f'{best / r["ms"]:.2f}x' if best else "")
        if best and r["mask"] in SPARSE:
            vs_best.append((r["mask"], r["B"], r["S"], best / r["ms"]))
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
        if best:
            chart.append((f'{r["mask"]}\n{r["B"]}x{r["S"]}', r["ms"], peer.get(key + ("flex_attention",), {}).get("ms"),
                          best, f'H={r["H"]} D={r["D"]}'))
    print(f"GPU: {gpu}\n")
    print("\n".join(lines))
    print()
    if vs_flex:
        print(f"Geometric mean over the sparse cases ({len(vs_flex)}), FlexAttention time / stof time: "
              f"**{geomean(vs_flex):.2f}x**")
    slower = [c for c in vs_best if c[3] < 1]
    print(f"Sparse cases slower than the best peer: {len(slower)} of {len(vs_best)}"
          + (": " + ", ".join(f"{m} {b}x{s} ({x:.2f}x)" for m, b, s, x in slower) if slower else ""))
    if dense_fa2:
        print("Dense and causal, FA2 time / stof time: " + ", ".join(f"{m} {b}x{s} {x:.2f}x" for m, b, s, x in dense_fa2))
    if a.chart and chart:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(max(8, len(chart) * 0.45), 4.5))
        xs = range(len(chart))
        w = 0.28
        ax.bar([x - w for x in xs], [c[1] for c in chart], w, label="stof")
        ax.bar(list(xs), [c[2] or 0 for c in chart], w, label="FlexAttention")
        ax.bar([x + w for x in xs], [c[3] or 0 for c in chart], w, label="best peer")
        ax.set_yscale("log")
        ax.set_ylabel("ms (median, log scale)")
        ax.set_xticks(list(xs))
        ax.set_xticklabels([c[0] for c in chart], rotation=90, fontsize=7)
        dims = ", ".join(sorted({c[4] for c in chart}))
        ax.set_title(f"Attention, {dims}, fp16, {gpu}: stof vs FlexAttention vs the best peer for each mask")
        ax.legend()
        fig.tight_layout()
        fig.savefig(a.chart)
        print(f"\nChart: {a.chart}")

if __name__ == "__main__":
    sys.exit(main())
