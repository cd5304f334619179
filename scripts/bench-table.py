#!/usr/bin/env python3
"""Turns the output of scripts/bench-vs-torch.sh into one markdown table: forward + backward
median ms per size, thread count and policy, for PyTorch eager, torch.compile, remat (respect),
remat (mincut) and, if measured, the baseline build."""
import json, re, sys
from collections import defaultdict

out = sys.argv[1]
cell = defaultdict(dict)  # (size, threads, policy) -> column -> ms
for line in open(f"{out}/torch.jsonl"):
    line = line.strip()
    if not line.startswith("{"):
        continue
    d = json.loads(line)
    size = "small" if d["config"]["d_model"] == 64 else "large"
    col = "torch.compile" if d["compile"] else "torch eager"
    cell[(size, d["threads"], d["policy"])][col] = d["fwdbwd_ms_median"]
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
        cell[(size, int(t), policy)][col] = float(ms)
cols = ["torch eager", "torch.compile", "remat before", "remat respect", "remat mincut"]
sizes = {"small": "d64 s32 b8", "large": "d256 s128 b8"}
print("| size | threads | policy | " + " | ".join(cols) + " |")
print("|---|---|---|" + "---|" * len(cols))
for (size, t, pol) in sorted(cell, key=lambda k: (k[0] != "small", k[1], ["none", "full", "save-matmuls"].index(k[2]))):
    row = cell[(size, t, pol)]
    vals = [f"{row[c]:.1f}" if c in row else "-" for c in cols]
    print(f"| {sizes[size]} | {t} | {pol} | " + " | ".join(vals) + " |")
