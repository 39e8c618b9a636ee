"""The long-context table and chart of docs/PERFORMANCE.md from one run of bench/long-gpu.sh
(stof's bench_attention lines and bench/peers_long.py's, same GPU, same run).

  python3 bench/long_report.py STOF.jsonl PEERS.jsonl [--chart docs/attention-long.svg]

Prints the markdown table (time, kernel, roofline fraction, each peer, best peer / stof, the
format build against create_block_mask, memory, check seconds). The chart (matplotlib) has
two panels: attention time of stof and the best peer per mask and S, and the format build of
stof against FlexAttention's create_block_mask.
"""
import argparse, json, sys

MASKS = ("dense", "causal", "sliding", "causal_sliding", "longformer", "bigbird", "document")


def fm(x):
    return "-" if x is None else f"{x:.3f}" if x < 10 else f"{x:.1f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("stof")
    ap.add_argument("peers")
    ap.add_argument("--chart", default=None)
    a = ap.parse_args()
    st, pe = {}, {}
    for line in open(a.stof):
        r = json.loads(line)
        st[(r["S"], r["mask"])] = r
    for line in open(a.peers):
        r = json.loads(line)
        if "ms" in r:
            pe[(r["S"], r["mask"], r["impl"])] = r
    sizes = sorted({s for s, _ in st})
    gpu = next(iter(st.values()))["gpu"]
    print("| mask | S | stof ms | kernel/tile | roofline | FA2 | cuDNN | Flex | best peer / stof | "
          "format ms, stof (GPU) | create_block_mask ms | format MiB | plan MiB | check s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    rows = []
    for S in sizes:
        for m in MASKS:
            r = st.get((S, m))
            if not r:
                continue
            f2 = pe.get((S, m, "sdpa_flash2"), {}).get("ms")
            cd = pe.get((S, m, "sdpa_cudnn"), {}).get("ms")
            fx = pe.get((S, m, "flex_attention"), {})
            peers = [x for x in (f2, cd, fx.get("ms")) if x]
            best = min(peers) if peers else None
            kern = ("tma" if r["tma"] else "wgmma" if r["hopper"] else r["kernel"]) + "/" + str(r["tile"])
            fmt = r.get("format_ms")
            fmt = None if fmt is None or fmt < 0 else fmt
            ratio = "-" if best is None else f"{best / r['ms']:.2f}x"
            print(f"| {m} | {S} | {fm(r['ms'])} | {kern} | {r['roofline'] * 100:.0f}% | {fm(f2)} | {fm(cd)} | "
                  f"{fm(fx.get('ms'))} | {ratio} | "
                  f"{fm(fmt)} | {fm(fx.get('block_mask_ms'))} | {r.get('format_mb', 0):.1f} | "
                  f"{max(r.get('plan_mem_mb', 0), 0):.0f} | {r.get('check_s', 0):.1f} |")
            rows.append((m, S, r["ms"], best, fmt, fx.get("block_mask_ms")))
    if a.chart and rows:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(max(9, len(rows) * 0.5), 8))
        xs = list(range(len(rows)))
        labels = [f"{m} {S // 1024}k" for m, S, *_ in rows]
        w = 0.38
        ax1.bar([x - w / 2 for x in xs], [r[2] for r in rows], w, label="stof")
        ax1.bar([x + w / 2 for x in xs], [r[3] or 0 for r in rows], w, label="best peer (FA2, cuDNN, Flex)")
        ax1.set_yscale("log")
        ax1.set_ylabel("attention ms (median, log)")
        ax1.set_xticks(xs)
        ax1.set_xticklabels(labels, fontsize=7, rotation=50, ha="right")
        ax1.set_title(f"Long context, batch 1, 32 heads, D 128, fp16, {gpu}")
        ax1.legend(fontsize=8)
        ax2.bar([x - w / 2 for x in xs], [r[4] or 0 for r in rows], w, label="stof format build on the GPU (format_ms of the run)")
        ax2.bar([x + w / 2 for x in xs], [r[5] or 0 for r in rows], w, label="FlexAttention create_block_mask")
        ax2.set_yscale("log")
        ax2.set_ylabel("mask preparation ms (log)")
        ax2.set_xticks(xs)
        ax2.set_xticklabels(labels, fontsize=7, rotation=50, ha="right")
        ax2.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(a.chart)
        print(f"\nChart: {a.chart}")


if __name__ == "__main__":
    sys.exit(main())
