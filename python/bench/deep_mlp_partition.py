"""PyTorch 2.15's partition step and `remat partition` on the same joint graph, in one run.

The model is `deep_mlp_32__none` (`tests/fixtures/torch/`) made deeper: `layers` residual layers
`x + fc2(gelu(fc1(x)))`, D=64, hidden 256, input [4, 16, 64], no checkpoint, no Inductor
decompositions. At 512 layers its joint graph has 18 434 nodes, the shape of the document
`benches/common/deep_mlp_joint.rs` writes. `torch.compile` hands the joint graph to a partition
function that exports it as a `remat.joint` document (remat_torch's exporter) and times PyTorch's
own `min_cut_rematerialization_partition` on it, alone, `runs` times (each on a fresh copy of the
graph, since the partition annotates the nodes it reads); then `remat partition DOC --strategy
mincut --json` runs `runs` times on that document, end to end (process start, read, partition,
JSON out), as a user would run it.

    .venv-torch/bin/python python/bench/deep_mlp_partition.py --remat target/release/remat
    .venv-torch/bin/python python/bench/deep_mlp_partition.py --remat target/release/remat \\
        --layers 512 --runs 3 --doc target/tmp/deep_mlp_512.joint.json

`--doc` times remat on a second document too (the benchmark's own, to compare with PyTorch's
export). Prints one JSON object on its last line; `cargo bench -p remat-cli --bench end_to_end`
runs this script where it finds PyTorch and divides by the figure it measures.

Needs only PyTorch: the exporter is loaded from `python/remat_torch/_export.py` by path, so the
package's extension module need not be built.
"""

import argparse
import copy
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch


def exporter():
    """remat_torch's `joint_document`, loaded without the package (whose `__init__` needs the
    extension module)."""
    path = Path(__file__).resolve().parents[1] / "remat_torch" / "_export.py"
    spec = importlib.util.spec_from_file_location("remat_torch_export", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.joint_document


class Layer(torch.nn.Module):
    def __init__(self, d, hidden):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(d, hidden), torch.nn.Linear(hidden, d)

    def forward(self, x):
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(x)))


class DeepMlp(torch.nn.Module):
    def __init__(self, layers):
        super().__init__()
        self.layers = torch.nn.ModuleList(Layer(64, 256) for _ in range(layers))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def torch_partition(layers, runs):
    """The joint graph's document and the seconds each run of PyTorch's partition step took."""
    from functorch.compile import make_boxed_func, min_cut_rematerialization_partition
    from torch._dynamo.backends.common import aot_autograd

    joint_document = exporter()
    docs, seconds = [], []

    def partition(joint, inputs, *, num_fwd_outputs, **kwargs):
        static = kwargs.get("static_lifetime_input_indices")
        docs.append(joint_document(joint, num_fwd_outputs, static_inputs=static))
        result = None
        for _ in range(runs):
            fresh = copy.deepcopy(joint)
            start = time.perf_counter()
            result = min_cut_rematerialization_partition(fresh, inputs, num_fwd_outputs=num_fwd_outputs, **kwargs)
            seconds.append(time.perf_counter() - start)
        return result

    boxed = lambda gm, _: make_boxed_func(gm.forward)  # noqa: E731
    backend = aot_autograd(fw_compiler=boxed, bw_compiler=boxed, partition_fn=partition)
    torch._dynamo.reset()
    torch.manual_seed(0)
    x = torch.randn(4, 16, 64, requires_grad=True)
    torch.compile(DeepMlp(layers), backend=backend, dynamic=False)(x).sum().backward()
    if len(docs) != 1:
        sys.exit(f"expected one joint graph, torch.compile made {len(docs)} (a graph break?)")
    return docs[0], seconds


def remat_partition(remat, doc_path, runs):
    """Seconds each `remat partition DOC --strategy mincut --json` took, end to end."""
    seconds = []
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run(
            [remat, "partition", str(doc_path), "--strategy", "mincut", "--json"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        seconds.append(time.perf_counter() - start)
        if done.returncode != 0:
            sys.exit(f"remat partition {doc_path} failed ({done.returncode}): {done.stderr.strip()}")
    return seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--remat", required=True, help="the remat command (target/release/remat)")
    parser.add_argument("--layers", type=int, default=512)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--doc", help="another remat.joint document to time remat on")
    args = parser.parse_args()
    if args.layers < 1 or args.runs < 1:
        parser.error("--layers and --runs must be at least 1")

    doc, torch_s = torch_partition(args.layers, args.runs)
    with tempfile.TemporaryDirectory() as tmp:
        exported = Path(tmp) / f"deep_mlp_{args.layers}.torch-export.joint.json"
        exported.write_text(json.dumps(doc))
        remat_s = remat_partition(args.remat, exported, args.runs)
        other_s = remat_partition(args.remat, args.doc, args.runs) if args.doc else None
    torch_median, remat_median = statistics.median(torch_s), statistics.median(remat_s)
    result = {
        "torch_version": torch.__version__,
        "layers": args.layers,
        "nodes": len(doc["nodes"]),
        "torch_partition_s": torch_s,
        "torch_partition_median_s": torch_median,
        "remat_end_to_end_s": remat_s,
        "remat_end_to_end_median_s": remat_median,
        "torch_over_remat": torch_median / remat_median,
    }
    if other_s is not None:
        result["doc"] = args.doc
        result["remat_end_to_end_doc_s"] = other_s
        result["remat_end_to_end_doc_median_s"] = statistics.median(other_s)
    print(
        f"{args.layers} layers, {result['nodes']} nodes: PyTorch {torch.__version__}'s partition step "
        f"{torch_median:.2f} s (median of {args.runs}), remat partition end to end {remat_median * 1e3:.1f} ms: "
        f"{result['torch_over_remat']:.0f}x",
        file=sys.stderr,
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
