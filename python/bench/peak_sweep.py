"""PyTorch's `activation_memory_budget` sweep and remat's `peak=` on the same joint graph.

PyTorch's knob bounds the bytes its min-cut saves, and users turn it to fit a peak. This script
asks both systems that question on one graph. `torch.compile` hands the joint graph of a small
Llama-style model (RMSNorm, rotary embeddings, grouped-query attention, SwiGLU; 2 layers, tiny
sizes; Inductor's decompositions, no checkpoint) to a partition function that exports it as a
`remat.joint` document (remat_torch's exporter, after the common-subexpression merge PyTorch's
partitioner does itself, so both partition one graph) and runs PyTorch's own
`min_cut_rematerialization_partition` on it once per budget (0.05, 0.1, 0.2, ..., 1.0). For each
budget the values PyTorch's forward graph hands its backward (its outputs past the model's) are
the decision; `remat evaluate DOC --save ..` scores it under remat's schedule (`planned_peak`,
`recompute_flops`), and `remat partition DOC --strategy peak=<that peak>` answers with remat's
least recompute at that peak (`optimality_gap`, seconds). Each remat call has a timeout; a call
that runs past it is recorded as `"timed_out": true`, not dropped.

`--model gpt` is a GPT-2-style model at the same sizes (LayerNorm, learned positions, GELU MLP).
`--model mlp` rebuilds the 4-layer MLP of `tests/fixtures/torch/mlp-inductor__budget_0.5` (its
graph here is merged as above; the fixture is the unmerged one). `--fixture NAME` instead scores
the decision PyTorch recorded for `tests/fixtures/torch/NAME.json` (its `.torch.json`), for
fixtures whose model this script cannot rebuild.

    .venv-torch/bin/python python/bench/peak_sweep.py --remat /tmp/tgt-b/release/remat \\
        --out docs/peak/llama.points.json
    .venv-torch/bin/python python/bench/peak_sweep.py --remat /tmp/tgt-b/release/remat \\
        --fixture seed_fp8_scaled_mm-inductor__budget_0.5 \\
        --out docs/peak/seed_fp8_scaled_mm-inductor__budget_0.5.points.json

`--limits B,B,...` times remat's exact peak search instead: `remat partition DOC --strategy
peak=B --json` at each limit (bytes), one call at a time, wall clock, and writes a `remat.limits`
file (each limit with its answer or its error line) and a Markdown table to standard output —
docs/performance.md's tables of the search at 2 660 and 13 788 nodes:

    .venv-torch/bin/python python/bench/peak_sweep.py --remat target/release/remat --layers 12 \\
        --limits 7500000,6000000,5000000 --out /tmp/llama/l12.limits.json --doc /tmp/llama/l12.joint.json

The output is a `remat.points` file (docs/peak.md) that `remat pareto DOC --peak --against FILE`
draws: `points` are PyTorch's, each with its `save` list, its `evaluate` score and remat's answer
at that peak (`remat_at_peak`).
"""

import argparse
import copy
import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[2]
BUDGETS = [0.05] + [round(0.1 * k, 1) for k in range(1, 11)]


def exporter():
    """remat_torch's exporter module, loaded by path (the package needs its extension built):
    `joint_document`, and `merge_common_subexpressions`, the merge `partition_fn` makes before it
    exports (PyTorch's partitioner merges too, so PyTorch's saved names mean the same values)."""
    path = ROOT / "python" / "remat_torch" / "_export.py"
    spec = importlib.util.spec_from_file_location("remat_torch_export", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class RMSNorm(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


def rotate(x, cos, sin):
    """Rotary embedding: the two halves of each head's features rotated by position."""
    a, b = x.chunk(2, dim=-1)
    return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)


class Block(torch.nn.Module):
    def __init__(self, d, heads, kv_heads, hidden):
        super().__init__()
        self.heads, self.kv_heads, self.hd = heads, kv_heads, d // heads
        self.norm1, self.norm2 = RMSNorm(d), RMSNorm(d)
        self.q = torch.nn.Linear(d, d, bias=False)
        self.kv = torch.nn.Linear(d, 2 * kv_heads * self.hd, bias=False)
        self.o = torch.nn.Linear(d, d, bias=False)
        self.gate_up = torch.nn.Linear(d, 2 * hidden, bias=False)
        self.down = torch.nn.Linear(hidden, d, bias=False)

    def forward(self, x, cos, sin):
        b, t, d = x.shape
        h = self.norm1(x)
        q = self.q(h).view(b, t, self.heads, self.hd).transpose(1, 2)
        k, v = self.kv(h).view(b, t, 2, self.kv_heads, self.hd).unbind(2)
        k, v = k.transpose(1, 2), v.transpose(1, 2)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        # Grouped-query attention: each key/value head serves heads / kv_heads query heads.
        repeat = self.heads // self.kv_heads
        k, v = k.repeat_interleave(repeat, dim=1), v.repeat_interleave(repeat, dim=1)
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(att.transpose(1, 2).reshape(b, t, d))
        gate, up = self.gate_up(self.norm2(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)


class Llama(torch.nn.Module):
    def __init__(self, vocab=128, d=64, heads=4, kv_heads=2, hidden=160, layers=2, seq=32):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, d)
        self.blocks = torch.nn.ModuleList(Block(d, heads, kv_heads, hidden) for _ in range(layers))
        self.norm, self.head = RMSNorm(d), torch.nn.Linear(d, vocab, bias=False)
        hd = d // heads
        freq = 1.0 / 10000 ** (torch.arange(0, hd // 2).float() / (hd // 2))
        angle = torch.outer(torch.arange(seq).float(), freq)
        self.register_buffer("cos", angle.cos(), persistent=False)
        self.register_buffer("sin", angle.sin(), persistent=False)

    def forward(self, tokens, targets):
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x, self.cos, self.sin)
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


class GptBlock(torch.nn.Module):
    """GPT-2's block: pre-LayerNorm causal attention (one fused q/k/v projection, biases) and a
    4x GELU (tanh) MLP, each added to the residual stream."""

    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.fc1, self.fc2 = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


class Gpt(torch.nn.Module):
    """A GPT-2-style model at the Llama's tiny sizes: learned positions, `layers` blocks, a final
    LayerNorm and an untied head."""

    def __init__(self, vocab=128, d=64, heads=4, layers=2, seq=32):
        super().__init__()
        self.embed, self.pos = torch.nn.Embedding(vocab, d), torch.nn.Embedding(seq, d)
        self.blocks = torch.nn.ModuleList(GptBlock(d, heads) for _ in range(layers))
        self.norm, self.head = torch.nn.LayerNorm(d), torch.nn.Linear(d, vocab, bias=False)

    def forward(self, tokens, targets):
        x = self.embed(tokens) + self.pos(torch.arange(tokens.shape[1]))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


class Mlp(torch.nn.Module):
    """The model of `tests/fixtures/torch/mlp-inductor__budget_0.5`: 4 x `x + fc2(gelu(fc1(x)))`,
    D=256, hidden 1024, input [8, 128, 256] (that fixture's README row)."""

    def __init__(self, d=256, hidden=1024, layers=4):
        super().__init__()
        pairs = [(torch.nn.Linear(d, hidden), torch.nn.Linear(hidden, d)) for _ in range(layers)]
        self.layers = torch.nn.ModuleList(torch.nn.ModuleList(p) for p in pairs)

    def forward(self, x):
        for fc1, fc2 in self.layers:
            x = x + fc2(F.gelu(fc1(x)))
        return x


def torch_sweep(model, inputs, budgets=BUDGETS):
    """The joint graph's document and, per budget, the names PyTorch's forward graph saves."""
    from functorch.compile import make_boxed_func, min_cut_rematerialization_partition
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch import config
    from torch._inductor.decomposition import select_decomp_table

    export, found = exporter(), []

    def partition(joint, joint_inputs, *, num_fwd_outputs, **kwargs):
        export.merge_common_subexpressions(joint, num_fwd_outputs)
        doc = export.joint_document(joint, num_fwd_outputs, static_inputs=kwargs.get("static_lifetime_input_indices"))
        decisions = []
        for budget in budgets:
            with config.patch(activation_memory_budget=budget):
                start = time.perf_counter()
                fw, _ = min_cut_rematerialization_partition(
                    copy.deepcopy(joint), joint_inputs, num_fwd_outputs=num_fwd_outputs, **kwargs
                )
                seconds = time.perf_counter() - start
            out = next(n for n in fw.graph.nodes if n.op == "output").args[0]
            saved = [a.name for a in out[num_fwd_outputs:] if isinstance(a, torch.fx.Node)]
            decisions.append({"budget": budget, "save": saved, "torch_partition_s": round(seconds, 4)})
        found.append((doc, decisions))
        return min_cut_rematerialization_partition(joint, joint_inputs, num_fwd_outputs=num_fwd_outputs, **kwargs)

    boxed = lambda gm, _: make_boxed_func(gm.forward)  # noqa: E731
    backend = aot_autograd(
        fw_compiler=boxed, bw_compiler=boxed, partition_fn=partition, decompositions=select_decomp_table()
    )
    torch._dynamo.reset()
    out = torch.compile(model, backend=backend, dynamic=False)(*inputs)
    out.backward(torch.ones_like(out))
    if len(found) != 1:
        sys.exit(f"expected one joint graph, torch.compile made {len(found)} (a graph break?)")
    return found[0]


def remat_json(remat, args, timeout):
    """`remat ARGS --json` parsed, with its seconds; `timed_out` or `error` (its one line) instead
    when it did not answer."""
    start = time.perf_counter()
    try:
        done = subprocess.run([remat, *args, "--json"], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"timed_out": True, "seconds": timeout}
    seconds = round(time.perf_counter() - start, 3)
    if done.returncode != 0:
        return {"error": done.stderr.strip(), "seconds": seconds}
    report = json.loads(done.stdout)
    keys = ("planned_peak", "recompute_flops", "saved_bytes", "optimality_gap")
    answer = {k: report[k] for k in keys if k in report}
    answer["broken"] = len(report.get("broken", []))
    return {**answer, "seconds": seconds}


def score(remat, doc_path, ids, decisions, timeout):
    """Each decision scored by `remat evaluate`, and remat's `peak=` answer at its peak (one
    solve per distinct peak: budgets that save the same set share it)."""
    at_peak = {}
    for d in decisions:
        unknown = [s for s in d["save"] if s not in ids]
        if unknown:
            # Never silently dropped: a saved name the document lacks makes the score wrong.
            sys.exit(f"budget {d.get('budget')}: PyTorch saved {unknown}, not ids of {doc_path}")
        d["evaluate"] = remat_json(remat, ["evaluate", str(doc_path), "--save", ",".join(d["save"])], timeout)
        peak = d["evaluate"].get("planned_peak")
        if peak is not None and peak not in at_peak:
            at_peak[peak] = remat_json(remat, ["partition", str(doc_path), "--strategy", f"peak={peak}"], timeout)
        d["remat_at_peak"] = at_peak.get(peak)
        answer = json.dumps(d["remat_at_peak"])
        print(f"{d.get('label')}: {json.dumps(d['evaluate'])} -> remat {answer}", file=sys.stderr)


def mib(n):
    """Bytes in MiB, two decimals, as docs/peak.md writes them."""
    return f"{n / 2**20:.2f} MiB"


def points_table(points):
    """docs/peak.md's table of a `remat.points` file: per point PyTorch's peak and recompute as
    `remat evaluate` scores them, remat's `peak=` answer at that peak (recompute, its own peak,
    its gap, its seconds), and whether a smaller budget peaks above a larger one's."""
    print("| budget | PyTorch peak | PyTorch recompute FLOPs | remat recompute at that peak (its peak) | gap | remat s | monotone |")
    print("|---:|---:|---:|---:|---:|---:|---|")
    scored = [p for p in points if "planned_peak" in p.get("evaluate", {})]
    for p in points:
        score, answer = p.get("evaluate", {}), p.get("remat_at_peak") or {}
        if "planned_peak" not in score:
            print(f"| {p.get('budget')} | not scored: {score.get('error', 'timed out')} | | | | | |")
            continue
        if "recompute_flops" in answer:
            gap = answer.get("optimality_gap")
            remat = f"{answer['recompute_flops']:,} ({mib(answer['planned_peak'])})"
            gap = "—" if gap is None else f"{100 * gap:.2f} %"
        else:
            remat = "timed out" if answer.get("timed_out") else (answer.get("error", "").splitlines() or ["—"])[-1]
            gap = "—"
        # A smaller budget whose decision peaks above a larger budget's.
        lower = [
            q
            for q in scored
            if p.get("budget") is not None
            and q.get("budget") is not None
            and q["budget"] > p["budget"]
            and q["evaluate"]["planned_peak"] < score["planned_peak"]
        ]
        monotone = f"no: {lower[0]['budget']} peaks lower" if lower else "yes"
        seconds = f"{answer['seconds']:.1f}" if "seconds" in answer else "—"
        cells = [str(p.get("budget")), mib(score["planned_peak"]), f"{score['recompute_flops']:,}", remat, gap, seconds]
        print(f"| {' | '.join(cells)} | {monotone} |")


def spaced(n):
    """An integer with its thousands apart, as docs/ writes them."""
    return f"{n:,}".replace(",", " ")


def limits_table(remat, doc_path, limits, timeout):
    """remat's `peak=` answer at each limit, with a Markdown table of them on standard output."""
    rows = []
    print("| limit (B) | recompute FLOPs | planned peak | `optimality_gap` | seconds |")
    print("|---|---|---|---|---|")
    for limit in limits:
        answer = remat_json(remat, ["partition", str(doc_path), "--strategy", f"peak={limit}"], timeout)
        rows.append({"limit": limit, "answer": answer})
        if "recompute_flops" in answer:
            gap = answer.get("optimality_gap")
            gap = "—" if gap is None else f"{100 * gap:.2f} %"
            cells = [spaced(answer["recompute_flops"]), spaced(answer["planned_peak"]), gap]
        else:
            # A refusal, or "was not met": its message's last line, which names the bounds.
            said = "timed out" if answer.get("timed_out") else (answer["error"].splitlines() or [""])[-1]
            said = said.removeprefix(f"error: {doc_path}: ")
            cells = [said, "", ""]
        print(f"| {spaced(limit)} | {' | '.join(cells)} | {answer['seconds']:.1f} |", flush=True)
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--remat", required=True, help="the remat command (a release build)")
    parser.add_argument("--out", required=True, help="the remat.points file to write")
    parser.add_argument("--doc", help="where to write the exported joint document (default: beside --out)")
    parser.add_argument("--model", choices=("llama", "gpt", "mlp"), default="llama")
    parser.add_argument("--fixture", help="score tests/fixtures/torch/NAME's recorded decision instead")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per remat call")
    parser.add_argument(
        "--layers", type=int, default=2, help="the Llama or GPT model's layers (2; 12 and 64 for the solver's timings)"
    )
    parser.add_argument(
        "--export-only",
        action="store_true",
        help="write the joint document (--doc, or beside --out) and stop: no PyTorch budgets, no remat calls",
    )
    parser.add_argument(
        "--table",
        action="store_true",
        help="print the Markdown table of the remat.points file --out names (written before) and stop",
    )
    parser.add_argument(
        "--limits",
        help="comma-separated byte limits: time remat's peak= at each instead of PyTorch's budgets",
    )
    args = parser.parse_args()
    try:
        limits = [int(b) for b in args.limits.split(",")] if args.limits else []
    except ValueError:
        parser.error(f"--limits takes byte counts separated by commas, not {args.limits!r}")
    if args.limits and (args.fixture or args.export_only):
        parser.error("--limits times the exported model's document: not with --fixture or --export-only")
    out = Path(args.out)
    if args.table:
        try:
            points = json.loads(out.read_text())["points"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            parser.error(f"--table reads the remat.points file --out names, and {out} is not one ({e!r})")
        points_table(points)
        return
    out.parent.mkdir(parents=True, exist_ok=True)

    if args.fixture:
        doc_path = ROOT / "tests" / "fixtures" / "torch" / f"{args.fixture}.json"
        record = json.loads(doc_path.with_suffix(".torch.json").read_text())
        doc = json.loads(doc_path.read_text())
        budget = record["case"].get("activation_memory_budget")
        decisions = [{"budget": budget, "save": record["saved"], "recorded": True}]
        system = f"PyTorch {record.get('torch_version', '2.15')} (recorded)"
    else:
        torch.manual_seed(0)
        if args.model in ("llama", "gpt"):
            model = (Llama if args.model == "llama" else Gpt)(layers=args.layers)
            inputs = (torch.randint(0, 128, (2, 32)), torch.randint(0, 128, (2, 32)))
        else:
            model, inputs = Mlp(), (torch.randn(8, 128, 256, requires_grad=True),)
        doc, decisions = torch_sweep(model, inputs, [] if args.export_only or limits else BUDGETS)
        doc_path = Path(args.doc) if args.doc else out.with_suffix(".joint.json")
        doc_path.write_text(json.dumps(doc, indent=1))
        if args.export_only:
            print(f"wrote {doc_path} ({len(doc['nodes'])} nodes)", file=sys.stderr)
            return
        system = f"PyTorch {torch.__version__}"
        if limits:
            rows = limits_table(args.remat, doc_path, limits, args.timeout)
            result = {"format": "remat.limits", "version": 1, "doc": str(doc_path), "nodes": len(doc["nodes"])}
            out.write_text(json.dumps({**result, "limits": rows}, indent=1) + "\n")
            print(f"wrote {out} ({len(rows)} limits, document {doc_path}, {len(doc['nodes'])} nodes)", file=sys.stderr)
            return
    for d in decisions:
        d["label"] = f"budget={d['budget']}"
    ids = {n["id"] for n in doc["nodes"]}
    score(args.remat, doc_path, ids, decisions, args.timeout)
    result = {
        "format": "remat.points",
        "version": 1,
        "system": f"{system} activation_memory_budget",
        "doc": str(doc_path),
        "timeout_s": args.timeout,
        "points": decisions,
    }
    out.write_text(json.dumps(result, indent=1) + "\n")
    points_table(decisions)
    print(f"wrote {out} ({len(decisions)} points, document {doc_path}, {len(doc['nodes'])} nodes)", file=sys.stderr)


if __name__ == "__main__":
    main()
