#!/usr/bin/env python3
"""Executed instructions and warp-stall samples of one kernel, per SASS opcode, from Nsight
Compute's source page exported as CSV (`ncu -i REPORT --page source --csv --print-source sass`,
as bench/profile_dense_opcodes.sh writes it). Session 16 read the D 64 dense kernel's extra
instructions this way (bench/NOTES-attention.md).

    python3 bench/sass_lines.py PAGE.csv [--top N] [--hot MIN]
--hot MIN also lists every SASS line executed at least MIN times (address, count, stall
samples, instruction), in program order.
"""
import argparse
import collections
import csv
import re
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--hot", type=int, default=0)
    a = ap.parse_args()
    rows = list(csv.reader(open(a.csv, errors="replace")))
    head = next((i for i, r in enumerate(rows) if "Instructions Executed" in r), None)
    if head is None:
        sys.exit("%s: no 'Instructions Executed' column (not an ncu source page CSV?)" % a.csv)
    hdr = rows[head]
    ie, src = hdr.index("Instructions Executed"), hdr.index("Source")
    st = hdr.index("Warp Stall Sampling (All Samples)") if "Warp Stall Sampling (All Samples)" in hdr else None
    ops, stall, hot = collections.Counter(), collections.Counter(), []
    for r in rows[head + 1:]:
        try:
            n = int(r[ie])
            s = int(r[st]) if st is not None else 0
        except (ValueError, IndexError):
            continue
        text = r[src].strip()
        m = re.match(r"(@!?U?P\w+\s+)?([A-Z0-9_]+)", text)
        op = m.group(2) if m else text
        ops[op] += n
        stall[op] += s
        if a.hot and n >= a.hot:
            hot.append((r[0], n, s, text))
    tot, stot = sum(ops.values()), max(1, sum(stall.values()))
    print("%-12s %14s %7s %8s" % ("opcode", "executed", "share", "stalls"))
    for op, n in ops.most_common(a.top):
        print("%-12s %14d %6.1f%% %7.1f%%" % (op, n, 100.0 * n / max(1, tot), 100.0 * stall[op] / stot))
    print("%-12s %14d" % ("total", tot))
    for addr, n, s, text in hot:
        print("%s %12d %6d  %s" % (addr, n, s, text))


if __name__ == "__main__":
    main()
