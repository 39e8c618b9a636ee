"""The end-to-end table of docs/PERFORMANCE.md from bench/e2e.lua's and peers.py e2e's JSON lines.

For each (model, B, S): stof's time, each peer variant's time (attention x mode), the best peer and
the ratio best peer / stof, stof's kernel-by-kernel split (GEMM / attention / other) and its device
memory (weights + arena + workspace). When several runs measured a peer variant, the fastest is
taken (the bar stof must clear); the run that measured each number is listed under the table.

  python3 bench/e2e_report.py bench/results/e2e-stof-h100.jsonl bench/results/e2e-peers-h100.jsonl
                              [--chart docs/e2e.svg]

When stof's lines come from a tuned run (bench/e2e.lua with TUNE_SECONDS), a second table
follows: the ablation (default scheme, stage 1, stage 1 + 2 as the search measured them; the
default and tuned plans timed by graph replay), each torch.compile mode (the faster of SDPA
and FlexAttention), best mode / tuned, the search's seconds and the resume's, then the
geometric mean and the lowest ratio (DESIGN.md section 9's acceptance for the search).
With --chart (matplotlib), that ratio as a bar per model and shape, against 1x and the 1.5x
geometric-mean bar.
"""
import json, math, sys
from collections import defaultdict


def load(path):
    with open(path) as f:
        return [json.loads(l) for l in f if l.strip().startswith("{")]


def main():
    stof, peers = {}, defaultdict(dict)
    args, chart = sys.argv[1:], None
    if "--chart" in args:
        i = args.index("--chart")
        chart = args[i + 1]
        args = args[:i] + args[i + 2:]
    for path in args:
        for r in load(path):
            if r.get("kind") != "e2e" or r.get("error") or not r.get("ms"):
                continue
            # the shape as asked (ViT runs n * n + 1 tokens for an asked S: peers.py says S_req)
            key = (r["model"], r["B"], r.get("S_req", r["S"]))
            if r.get("impl") == "stof":
                if key not in stof or r["ms"] < stof[key]["ms"]:
                    stof[key] = r
            else:
                v = f'{r["attn"]} {r["impl"].replace("torch_compile_", "compile ").replace("torch_", "")}'
                if v not in peers[key] or r["ms"] < peers[key][v]["ms"]:
                    peers[key][v] = r
    order = {"bert-base": 0, "bert-large": 1, "gpt2": 2, "llama": 3, "t5": 4, "vit": 5}
    print("| model | B x S | stof ms | best peer (variant) ms | best / stof | GEMM / attention / other ms | device MiB | stof run | peer run |")
    print("|---|---|---|---|---|---|---|---|---|")
    for key in sorted(stof, key=lambda k: (order.get(k[0], 9), k[1] * k[2])):
        s = stof[key]
        p = peers.get(key, {})
        best = min(p.items(), key=lambda kv: kv[1]["ms"]) if p else None
        ratio = f'{best[1]["ms"] / s["ms"]:.2f}x' if best else "-"
        bp = f'{best[1]["ms"]:.3f} ({best[0]})' if best else "-"
        split = f'{s["gemm_ms"]:.3f} / {s["attention_ms"]:.3f} / {s["other_ms"]:.3f}'
        print(f'| {key[0]} | {key[1]} x {key[2]} | {s["ms"]:.3f} | {bp} | {ratio} | {split} | {s["device_mb"]:.0f} | {s.get("run", "")} | {best[1].get("run", "") if best else ""} |')
    print()
    print("Every peer variant (ms; fastest over the runs that measured it):")
    print()
    for key in sorted(peers, key=lambda k: (order.get(k[0], 9), k[1] * k[2])):
        items = sorted(peers[key].items(), key=lambda kv: kv[1]["ms"])
        print(f'- {key[0]} {key[1]}x{key[2]}: ' + ", ".join(f'{v} {r["ms"]:.3f}' for v, r in items))
    ratios = tuned_table(stof, peers)
    if chart and ratios:
        gpus = {r.get("gpu") for p in peers.values() for r in p.values() if r.get("gpu")}
        draw(ratios, chart, ", ".join(sorted(gpus)))


def draw(ratios, path, gpu):
    """Best torch.compile mode / stof tuned, a bar per case, in the table's order."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(max(8, len(ratios) * 0.5), 4.2))
    xs = list(range(len(ratios)))
    ax.bar(xs, [r for r, _ in ratios], 0.6, label="best torch.compile mode / stof tuned")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.axhline(1.5, color="tab:red", linewidth=0.8, linestyle="--", label="1.5x (the geometric-mean bar)")
    g = math.exp(sum(math.log(r) for r, _ in ratios) / len(ratios))
    ax.axhline(g, color="tab:green", linewidth=0.8, linestyle=":", label=f"geometric mean {g:.2f}x")
    ax.set_xticks(xs)
    ax.set_xticklabels([f"{k[0]} {k[1]}x{k[2]}" for _, k in ratios], rotation=50, ha="right", fontsize=7)
    ax.set_ylabel("speed-up (time ratio)")
    ax.set_title(f"End to end, BigBird, fp16{', ' + gpu if gpu else ''}: stof tuned against torch.compile's best mode")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    print(f"\nChart: {path}")


MODES = ["default", "reduce-overhead", "max-autotune"]


def tuned_table(stof, peers):
    """The search's ablation against every torch.compile mode (stof rows with tune_s)."""
    rows = [k for k in stof if "tune_s" in stof[k]]
    if not rows:
        return []
    order = {"bert-base": 0, "bert-large": 1, "gpt2": 2, "llama": 3, "t5": 4, "vit": 5}
    print()
    print("| model | B x S | default ms | stage 1 ms (search) | stage 1+2 ms (search) | tuned ms | eager | "
          + " | ".join(f"compile {m}" for m in MODES) + " | best compile / tuned | tuning s | resume s |")
    print("|---|---|---|---|---|---|---|" + "---|" * len(MODES) + "---|---|---|")
    ratios = []
    for key in sorted(rows, key=lambda k: (order.get(k[0], 9), k[1] * k[2])):
        s, p = stof[key], peers.get(key, {})
        def best(impl):
            c = [r for v, r in p.items() if v.split(" ", 1)[1] == impl]
            return min(c, key=lambda r: r["ms"]) if c else None
        cells = [best("eager")] + [best("compile " + m) for m in MODES]
        comp = [c for c in cells[1:] if c]
        b = min(comp, key=lambda r: r["ms"]) if comp else None
        ratio = b["ms"] / s["ms"] if b else None
        if ratio:
            ratios.append((ratio, key))
        fmt = lambda c: f'{c["ms"]:.3f}' + (" (flex)" if c["attn"] == "flex" else "") if c else "-"
        print(f'| {key[0]} | {key[1]} x {key[2]} | {s["default_ms"]:.3f} | {s["tune_stage1_ms"]:.3f} | {s["tune_best_ms"]:.3f} | '
              f'{s["ms"]:.3f} | ' + " | ".join(fmt(c) for c in cells)
              + f' | {f"{ratio:.2f}x" if ratio else "-"} | {s["tune_s"]:.1f} | {s["resume_s"]:.2f} |')
    if ratios:
        g = math.exp(sum(math.log(r) for r, _ in ratios) / len(ratios))
        lo = min(ratios)
        print()
        print(f"Geometric mean of best torch.compile mode / stof tuned over {len(ratios)} cases: {g:.2f}x; "
              f"lowest {lo[0]:.2f}x ({lo[1][0]} {lo[1][1]} x {lo[1][2]}).")
    return ratios


if __name__ == "__main__":
    main()
