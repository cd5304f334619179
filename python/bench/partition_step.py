"""The partition step inside torch.compile, remat against PyTorch's own min-cut, timed in one
run; and the saved activation bytes of each partition for the test models.

    .venv-torch/bin/python python/bench/partition_step.py            # needs remat_torch importable
    .venv-torch/bin/python python/bench/partition_step.py --layers 8  # a smaller Llama

Each partition function is timed alone (median of its calls' wall time, the joint graph handed
to it by aot_autograd); saved bytes are the distinct computed values the forward graph hands to
the backward (as `saved_activation_bytes` in the fixtures' records).
"""

import argparse
import functools
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import remat_torch  # noqa: E402
from test_compile import Chain, Float8Seed, recompute_everything, save_matmuls  # noqa: E402
from test_models import GptBlock, Llama, saved_activation_bytes  # noqa: E402


def compile_and_measure(model, inputs, partition):
    """Seconds the partition function took (per joint graph) and the forward's saved bytes."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    seconds, forwards = [], []

    def timed(*args, **kwargs):
        start = time.perf_counter()
        out = partition(*args, **kwargs)
        seconds.append(time.perf_counter() - start)
        return out

    def fw(gm, _):
        forwards.append(gm)
        return make_boxed_func(gm.forward)

    torch._dynamo.reset()
    backend = aot_autograd(fw_compiler=fw, bw_compiler=lambda gm, _: make_boxed_func(gm.forward), partition_fn=timed)
    loss = torch.compile(model, backend=backend, dynamic=False)(*inputs)
    loss.backward()
    return sum(seconds), sum(saved_activation_bytes(f) for f in forwards)


def main():
    from functorch.compile import min_cut_rematerialization_partition

    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, default=64)
    args = parser.parse_args()
    torch_min_cut = functools.partial(min_cut_rematerialization_partition, compiler="inductor")
    remat_min_cut = functools.partial(remat_torch.partition_fn, strategy="mincut")

    class DeepLlama(Llama):
        def __init__(self, layers):
            super().__init__("full")
            from test_models import Block

            self.blocks = torch.nn.ModuleList(Block(32, 4, 64) for _ in range(layers))

    tokens, targets = torch.randint(0, 64, (2, 16)), torch.randint(0, 64, (2, 16))
    cases = [
        ("chain, checkpoint", lambda: Chain(), (torch.randn(8, 16, requires_grad=True),)),
        ("chain, MUST_RECOMPUTE everywhere", lambda: Chain(recompute_everything), (torch.randn(8, 16, requires_grad=True),)),
        ("chain, SAC save-matmuls", lambda: Chain(save_matmuls), (torch.randn(8, 16, requires_grad=True),)),
        ("float8 seed, SAC save-matmuls", lambda: Float8Seed(), (torch.randn(32, 64, requires_grad=True),)),
        ("Llama 2 blocks, full", lambda: Llama("full"), (tokens, targets)),
        ("Llama 2 blocks, SAC save-matmuls", lambda: Llama(save_matmuls), (tokens, targets)),
        ("Llama 2 blocks, MUST_RECOMPUTE", lambda: Llama(recompute_everything), (tokens, targets)),
        ("GPT block with dropout", lambda: GptBlock(), (torch.randn(2, 16, 32, requires_grad=True),)),
        (f"Llama {args.layers} blocks, full", lambda: DeepLlama(args.layers), (tokens, targets)),
    ]
    print(f"{'model':<36} {'PyTorch s':>10} {'remat s':>9} {'ratio':>7} {'PyTorch B':>11} {'remat B':>10}")
    for name, make, inputs in cases:
        theirs_s, theirs_b = compile_and_measure(make(), inputs, torch_min_cut)
        ours_s, ours_b = compile_and_measure(make(), inputs, remat_min_cut)
        print(f"{name:<36} {theirs_s:>10.3f} {ours_s:>9.3f} {theirs_s / ours_s:>6.1f}x {theirs_b:>11} {ours_b:>10}")


if __name__ == "__main__":
    main()
