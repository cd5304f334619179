#!/usr/bin/env python3
"""Turns the output of scripts/bench-vs-torch.sh into one markdown table: forward + backward
median ms per size, thread count and policy, for PyTorch eager, torch.compile, remat (respect),
remat (mincut) and, if measured, the baseline build. With several rounds, each cell is the
median of its rounds' medians, and a second table gives each cell's range over the rounds."""
import json, re, statistics, sys
from collections import defaultdict

out = sys.argv[1]
cell = defaultdict(lambda: defaultdict(list))  # (size, threads, policy) -> column -> [ms per round]
for line in open(f"{out}/torch.jsonl"):
    line = line.strip()
    if not line.startswith("{"):
        continue
    d = json.loads(line)
    size = "small" if d["config"]["d_model"] == 64 else "large"
    col = "torch.compile" if d["compile"] else "torch eager"
    cell[(size, d["threads"], d["policy"])][col].append(d["fwdbwd_ms_median"])
head = None
for line in open(f"{out}/remat.txt"):
    m = re.match(r"== (\w+) size=(\w+) threads=(\d) strategy=(\w+)", line)
    if m:
        head = m.groups()
        continue
    # A policy row: the step time is the field after the recompute FLOPs (`..MFL`), whatever
    # columns come before it.
    m = re.match(r"^(none|full|save-matmuls)\s.*?MFL\s+(\S+)", line)
    if m and head:
        who, size, t, strategy = head
        col = f"remat {strategy}" if who == "remat" else "remat before"
        policy, ms = m.group(1), m.group(2)
        cell[(size, int(t), policy)][col].append(float(ms))
cols = ["torch eager", "torch.compile", "remat before", "remat respect", "remat mincut"]
sizes = {"small": "d64 s32 b8", "large": "d256 s128 b8"}
keys = sorted(cell, key=lambda k: (k[0] != "small", k[1], ["none", "full", "save-matmuls"].index(k[2])))


def table(show):
    print("| size | threads | policy | " + " | ".join(cols) + " |")
    print("|---|---|---|" + "---|" * len(cols))
    for (size, t, pol) in keys:
        row = cell[(size, t, pol)]
        vals = [show(row[c]) if row.get(c) else "-" for c in cols]
        print(f"| {sizes[size]} | {t} | {pol} | " + " | ".join(vals) + " |")


rounds = max(len(v) for row in cell.values() for v in row.values())
table(lambda v: f"{statistics.median(v):.1f}")
if rounds > 1:
    print(f"\nrange over the {rounds} rounds (min–max):\n")
    table(lambda v: f"{min(v):.1f}–{max(v):.1f}")
