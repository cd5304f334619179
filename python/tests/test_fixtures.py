"""The exporter writes what the fixtures hold: every model of `tests/fixtures/torch/` exported
again (with Inductor's decompositions where the fixture had them) gives a document with the same
nodes, edges, phases, shapes, dtypes, FLOPs, flags, regions, policies, generator-state sizes and
outputs."""

import functools
import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts

import remat_torch
from remat_torch import joint_document
from test_compile import recompute_everything, save_matmuls

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "torch"


def region(fn, x, policy):
    """`fn(x)` as the fixtures' exporter ran it: plain (`None`), under `checkpoint` (`"full"`),
    or selective checkpointing with a policy function."""
    if policy is None:
        return fn(x)
    if policy == "full":
        return checkpoint(fn, x, use_reentrant=False)
    context = functools.partial(create_selective_checkpoint_contexts, policy)
    return checkpoint(fn, x, use_reentrant=False, context_fn=context)


class Chain(torch.nn.Module):
    """`chain-inductor__full`: `g(f(x))`, each linear + relu, `checkpoint` on each."""

    def __init__(self):
        super().__init__()
        self.f, self.g = torch.nn.Linear(256, 256), torch.nn.Linear(256, 256)

    def forward(self, x):
        h = region(lambda x: torch.relu(self.f(x)), x, "full")
        return region(lambda h: torch.relu(self.g(h)), h, "full")


class Layer(torch.nn.Module):
    def __init__(self, d=256, hidden=1024):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(d, hidden), torch.nn.Linear(hidden, d)

    def forward(self, x):
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(x)))


class Mlp(torch.nn.Module):
    """`mlp-inductor__*`: 4 × `x + fc2(gelu(fc1(x)))` (D=256, hidden 1024), a region per
    layer."""

    def __init__(self, policy):
        super().__init__()
        self.layers = torch.nn.ModuleList(Layer() for _ in range(4))
        self.policy = policy

    def forward(self, x):
        for layer in self.layers:
            x = region(layer, x, self.policy)
        return x


class Attention(torch.nn.Module):
    def __init__(self, d, heads, t):
        super().__init__()
        self.heads = heads
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.register_buffer("masked", torch.ones(t, t).triu(1).bool())

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = (y.view(b, t, self.heads, d // self.heads).transpose(1, 2) for y in self.qkv(x).split(d, dim=2))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // self.heads))
        att = att.masked_fill(self.masked[:t, :t], float("-inf")).softmax(dim=-1)
        return self.proj((att @ v).transpose(1, 2).reshape(b, t, d))


class GptBlock(torch.nn.Module):
    """Pre-LN: attention as matmuls and a masked softmax, or (`dropout`) SDPA with dropout on
    the attention projection, the MLP's hidden layer and its output."""

    def __init__(self, d=256, heads=4, t=128, dropout=None):
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.ln1 = torch.nn.LayerNorm(d)
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        if dropout is None:
            self.register_buffer("masked", torch.ones(t, t).triu(1).bool())
        self.ln2, self.fc1, self.fc2 = torch.nn.LayerNorm(d), torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

    def attend(self, x):
        b, t, d = x.shape
        q, k, v = (y.view(b, t, self.heads, d // self.heads).transpose(1, 2) for y in self.qkv(x).split(d, dim=2))
        if self.dropout is not None:
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
            return F.dropout(self.proj(a), self.dropout)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // self.heads))
        att = att.masked_fill(self.masked[:t, :t], float("-inf")).softmax(dim=-1)
        return self.proj((att @ v).transpose(1, 2).reshape(b, t, d))

    def forward(self, x):
        x = x + self.attend(self.ln1(x))
        drop = (lambda y: F.dropout(y, self.dropout)) if self.dropout is not None else (lambda y: y)
        return x + drop(self.fc2(drop(F.gelu(self.fc1(self.ln2(x))))))


class Transformer(torch.nn.Module):
    """`transformer*` and `gpt_dropout*`: 2 GPT blocks (D=256, 4 heads), a region per block."""

    def __init__(self, policy, dropout=None):
        super().__init__()
        self.blocks = torch.nn.ModuleList(GptBlock(dropout=dropout) for _ in range(2))
        self.policy = policy

    def forward(self, x):
        for block in self.blocks:
            x = region(block, x, self.policy)
        return x


def to_fp8(t):
    """Absmax scale, clamp, cast: the float8-training recipe (the scale's inverse is
    `_scaled_mm`'s)."""
    return 448.0 / t.abs().amax().clamp(min=1e-12)


class Float8Mm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        sx, sw = to_fp8(x), to_fp8(w)
        x8 = (x * sx).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
        w8 = (w * sw).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
        ctx.save_for_backward(x8, w8, sx, sw)
        return torch._scaled_mm(x8, w8.t(), scale_a=sx.reciprocal(), scale_b=sw.reciprocal(), out_dtype=torch.float32)

    @staticmethod
    def backward(ctx, g):
        x8, w8, sx, sw = ctx.saved_tensors
        return g @ (w8.float() / sw), g.t() @ (x8.float() / sx)


class Float8Seed(torch.nn.Module):
    """`seed_fp8_scaled_mm-inductor__*`: `x + relu(_scaled_mm(q(x), q(w)ᵀ))` in one region
    (D=256)."""

    def __init__(self, policy):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(256, 256) / 16)
        self.policy = policy

    def block(self, x):
        return x + torch.relu(Float8Mm.apply(x.view(-1, 256), self.w).view(x.shape))

    def forward(self, x):
        return region(self.block, x, self.policy)


class DeepMlp(torch.nn.Module):
    """`deep_mlp_32__none`: 32 × `x + fc2(gelu(fc1(x)))`, D=64, hidden 256, no checkpoint, no
    Inductor decompositions."""

    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList(Layer(64, 256) for _ in range(32))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def exported(model, x, inductor=True):
    """The joint graph's document, as `torch.compile` hands it to the partitioner (under
    Inductor's decompositions unless `inductor` is false)."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd
    from torch._inductor.decomposition import select_decomp_table

    docs = []

    def part(joint, inputs, *, num_fwd_outputs, **kwargs):
        static = kwargs.get("static_lifetime_input_indices")
        docs.append(joint_document(joint, num_fwd_outputs, static_inputs=static))
        return remat_torch.partition_fn(joint, inputs, num_fwd_outputs=num_fwd_outputs, **kwargs)

    boxed = lambda gm, _: make_boxed_func(gm.forward)  # noqa: E731
    decompositions = select_decomp_table() if inductor else None
    backend = aot_autograd(fw_compiler=boxed, bw_compiler=boxed, partition_fn=part, decompositions=decompositions)
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
        node.get("rng_state_bytes"),
    )


def as_remat_torch_flags(fixture_node):
    """The fixtures' exporter flagged every op PyTorch tags `nondeterministic_seeded`, attention
    without dropout included; remat_torch follows PyTorch's partitioner (`is_rng_op`: attention
    is random only with a nonzero dropout), since running it again draws nothing. The one
    deliberate difference."""
    flags = fixture_node.get("flags", [])
    if fixture_node["op"].startswith("aten._scaled_dot_product") and "random" in flags:
        return {**fixture_node, "flags": [f for f in flags if f != "random"]}
    return fixture_node


CASES = [
    ("chain-inductor__full", Chain, (8, 128, 256), True),
    ("mlp-inductor__sac_save_mm", lambda: Mlp(save_matmuls), (8, 128, 256), True),
    ("mlp-inductor__budget_0.5", lambda: Mlp(None), (8, 128, 256), True),
    ("transformer-inductor__full", lambda: Transformer("full"), (8, 128, 256), True),
    ("transformer__sac_must_recompute_all", lambda: Transformer(recompute_everything), (8, 128, 256), False),
    ("gpt_dropout-inductor__full", lambda: Transformer("full", dropout=0.1), (4, 128, 256), True),
    ("seed_fp8_scaled_mm-inductor__sac_save_mm", lambda: Float8Seed(save_matmuls), (1, 128, 256), True),
    ("seed_fp8_scaled_mm-inductor__budget_0.5", lambda: Float8Seed(None), (1, 128, 256), True),
    ("deep_mlp_32__none", DeepMlp, (4, 16, 64), False),
]


@pytest.mark.parametrize("case, model, shape, inductor", CASES, ids=[c[0] for c in CASES])
def test_the_exporter_writes_the_fixtures(case, model, shape, inductor):
    torch.manual_seed(0)
    doc = exported(model(), torch.randn(*shape, requires_grad=True), inductor)
    fixture = json.loads((FIXTURES / f"{case}.json").read_text())
    ours, theirs = [key(n) for n in doc["nodes"]], [key(as_remat_torch_flags(n)) for n in fixture["nodes"]]
    differ = [(a, b) for a, b in zip(ours, theirs) if a != b]
    assert len(ours) == len(theirs) and not differ, (len(ours), len(theirs), differ[:3])
    # The fixture lists every forward output; the exporter splits them into the held (the loss,
    # primals) and the released (the caller may drop them after the forward).
    assert sorted(doc["forward_outputs"] + doc["released_outputs"]) == sorted(fixture["forward_outputs"])
    assert doc["backward_outputs"] == fixture["backward_outputs"]


def test_at_pytorchs_bytes_remat_recomputes_no_more_than_pytorch(monkeypatch):
    """`mlp-inductor__budget_0.5`: PyTorch merges 12 nodes of the joint graph (a GELU's `mul`,
    `erf` and `add`, computed once for the forward and again for the gradient) before its
    knapsack chooses; `partition_fn` merges them the same way, so at the bytes PyTorch kept remat
    runs no more FLOPs again than PyTorch did (the record's `recomputed_nonview` and
    `forward_nodes_only_in_backward`, counted with the fixture's FLOPs), and the gradients are
    those of PyTorch's own partition, bit for bit."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.partitioners import min_cut_rematerialization_partition
    from torch._inductor.decomposition import select_decomp_table

    case = "mlp-inductor__budget_0.5"
    record = json.loads((FIXTURES / f"{case}.torch.json").read_text())
    fixture = json.loads((FIXTURES / f"{case}.json").read_text())
    flops = {n["id"]: n.get("flops", 0) for n in fixture["nodes"]}
    torch_flops = sum(flops[i] for i in record["recomputed_nonview"] + record["forward_nodes_only_in_backward"])
    torch_bytes = record["saved_activation_bytes"]

    seen = []
    partition_joint = remat_torch.partition_joint

    def spy(doc, strategy="mincut", **kwargs):
        report = partition_joint(doc, strategy, **kwargs)
        seen.append((doc, report))
        return report

    monkeypatch.setattr(remat_torch, "partition_joint", spy)
    torch.manual_seed(0)
    model = Mlp(None)
    x = torch.randn(8, 128, 256)

    def grads(partition):
        boxed = lambda gm, _: make_boxed_func(gm.forward)  # noqa: E731
        decompositions = select_decomp_table()
        backend = aot_autograd(fw_compiler=boxed, bw_compiler=boxed, partition_fn=partition, decompositions=decompositions)
        torch._dynamo.reset()
        model.zero_grad()
        xc = x.clone().requires_grad_()
        torch.compile(model, backend=backend, dynamic=False)(xc).sum().backward()
        return [p.grad.clone() for p in model.parameters()] + [xc.grad]

    ours = grads(functools.partial(remat_torch.partition_fn, strategy=f"budget={torch_bytes}"))
    with torch._functorch.config.patch(activation_memory_budget=0.5):
        theirs = grads(min_cut_rematerialization_partition)
    for a, b in zip(ours, theirs):
        assert torch.equal(a, b)

    (doc, report), = seen
    merged = {n["id"] for n in fixture["nodes"]} - {n["id"] for n in doc["nodes"]}
    assert merged == set(record["cse_removed"]), merged
    assert len(doc["nodes"]) == record["cse_doc_nodes"]
    assert report["saved_bytes"] <= torch_bytes, report["saved_bytes"]
    assert report["recompute_flops"] <= torch_flops, (report["recompute_flops"], torch_flops)
