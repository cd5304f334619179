"""The exporter writes what the fixtures hold: the models of `tests/fixtures/torch/` exported
again (Inductor's decompositions, as the fixtures were) give documents with the same nodes, edges,
phases, shapes, dtypes, FLOPs, flags, regions, policies and outputs."""

import functools
import json
from pathlib import Path

import pytest
import torch
from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts

import remat_torch
from remat_torch import export_joint
from test_compile import save_matmuls

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "torch"


class Chain(torch.nn.Module):
    """`chain-inductor__full`: `g(f(x))`, each linear + relu, `checkpoint` on each."""

    def __init__(self):
        super().__init__()
        self.f, self.g = torch.nn.Linear(256, 256), torch.nn.Linear(256, 256)

    def forward(self, x):
        h = checkpoint(lambda x: torch.relu(self.f(x)), x, use_reentrant=False)
        return checkpoint(lambda h: torch.relu(self.g(h)), h, use_reentrant=False)


class Layer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(256, 1024), torch.nn.Linear(1024, 256)

    def forward(self, x):
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(x)))


class Mlp(torch.nn.Module):
    """`mlp-inductor__sac_save_mm`: 4 × `x + fc2(gelu(fc1(x)))`, a region per layer, selective
    checkpointing that saves matmuls."""

    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList(Layer() for _ in range(4))

    def forward(self, x):
        context = functools.partial(create_selective_checkpoint_contexts, save_matmuls)
        for layer in self.layers:
            x = checkpoint(layer, x, use_reentrant=False, context_fn=context)
        return x


def exported(model, x):
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd
    from torch._inductor.decomposition import select_decomp_table

    docs = []

    def part(joint, inputs, *, num_fwd_outputs, **kwargs):
        static = kwargs.get("static_lifetime_input_indices")
        docs.append(export_joint(joint, num_fwd_outputs, static_inputs=static))
        return remat_torch.partition_fn(joint, inputs, num_fwd_outputs=num_fwd_outputs, **kwargs)

    boxed = lambda gm, _: make_boxed_func(gm.forward)  # noqa: E731
    backend = aot_autograd(fw_compiler=boxed, bw_compiler=boxed, partition_fn=part, decompositions=select_decomp_table())
    torch._dynamo.reset()
    torch.compile(model, backend=backend, dynamic=False)(x).sum().backward()
    return docs[0]


def key(node):
    return (
        node["id"],
        node["op"],
        tuple(node.get("inputs", [])),
        node["phase"],
        tuple(node.get("shape") or []),
        node.get("dtype"),
        node.get("bytes"),
        node.get("flops", 0),
        tuple(sorted(node.get("flags", []))),
        node.get("region"),
        node.get("policy"),
    )


@pytest.mark.parametrize("case, model", [("chain-inductor__full", Chain), ("mlp-inductor__sac_save_mm", Mlp)])
def test_the_exporter_writes_the_fixtures(case, model):
    torch.manual_seed(0)
    doc = exported(model(), torch.randn(8, 128, 256, requires_grad=True))
    fixture = json.loads((FIXTURES / f"{case}.json").read_text())
    ours, theirs = [key(n) for n in doc["nodes"]], [key(n) for n in fixture["nodes"]]
    differ = [(a, b) for a, b in zip(ours, theirs) if a != b]
    assert len(ours) == len(theirs) and not differ, differ[:3]
    assert doc["forward_outputs"] == fixture["forward_outputs"]
    assert doc["backward_outputs"] == fixture["backward_outputs"]
