"""Honest costs and kept routing in the exported document (issue 48, points 2 and 4): attention in
its CPU flash variant, grouped matrix products and a library's custom op are compute-intensive
with PyTorch's flop counter's FLOPs (or 2 × the multiply-adds where it has none), so the min-cut
does not recompute them without a tag; a top-k's outputs are kept unless a tag asks to recompute
them. The oracle is PyTorch's own flop counter (``FlopCounterMode``) run on the eager model, and
the document and report remat writes."""

import functools

import pytest
import torch
import torch.fx as fx
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts
from torch.utils.flop_counter import FlopCounterMode

import remat_torch
from remat_torch import joint_document


def _nodes(doc, op_part):
    return [n for n in doc["nodes"] if op_part in n["op"] and n["phase"] == "forward"]


class Attention(torch.nn.Module):
    def __init__(self, d=64, heads=4):
        super().__init__()
        self.heads = heads
        self.qkv, self.out = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        return self.out(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d))


def test_cpu_flash_attention_is_compute_intensive_at_the_flop_counters_flops():
    torch.manual_seed(0)
    model, x = Attention(), torch.randn(2, 32, 64, requires_grad=True)
    (doc,) = remat_torch.export_joint(model, x)
    attention = _nodes(doc, "_scaled_dot_product_flash_attention_for_cpu")
    assert attention, [n["op"] for n in doc["nodes"]]
    assert all("compute_intensive" in n.get("flags", []) for n in attention)
    # PyTorch's flop counter over the eager forward: its attention entry.
    with FlopCounterMode(display=False) as counter:
        model(x)
    counted = {str(op): flops for op, flops in counter.get_flop_counts()["Global"].items()}
    sdpa = next(v for k, v in counted.items() if "scaled_dot_product" in k)
    assert attention[0]["flops"] == sdpa
    # The min-cut keeps attention's outputs rather than recomputing them in the backward.
    report = remat_torch.partition_joint(doc, "mincut")
    assert not {n["id"] for n in attention} & set(report["recomputed"]), report["recomputed"]


def _grouped_mm_graph():
    """An FX graph of one ``aten._grouped_mm`` (tokens × k by experts × k × n) with fake values,
    as a joint graph: the forward output and a tangent-free backward output."""
    graph = fx.Graph()
    with FakeTensorMode() as mode:
        a, b = torch.empty(48, 16), torch.empty(4, 16, 8)
        offs = torch.tensor([12, 24, 36, 48], dtype=torch.int32)
        out = torch.ops.aten._grouped_mm.default(a, b, offs)
    names = ("primals_1", "primals_2", "primals_3")
    nodes = []
    for name, val in zip(names, (a, b, offs)):
        node = graph.placeholder(name)
        node.meta["val"] = val
        nodes.append(node)
    mm = graph.call_function(torch.ops.aten._grouped_mm.default, (nodes[0], nodes[1], nodes[2]))
    mm.meta["val"] = out
    graph.output([mm])
    del mode
    return fx.GraphModule(torch.nn.Module(), graph)


def test_grouped_mm_is_compute_intensive_with_twice_its_multiply_adds():
    doc = joint_document(_grouped_mm_graph(), 1)
    (mm,) = _nodes(doc, "_grouped_mm")
    assert "compute_intensive" in mm["flags"]
    # 48 tokens, each through its expert's 16 × 8 matrix: 48 · 16 · 8 multiply-adds.
    assert mm["flops"] == 2 * 48 * 16 * 8


@torch.library.custom_op("remat_test::mystery", mutates_args=())
def mystery(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.tanh(x @ w)


@mystery.register_fake
def _(x, w):
    return x.new_empty(x.shape[0], w.shape[1])


def _mystery_backward(ctx, grad):
    x, w = ctx.saved_tensors
    y = torch.tanh(x @ w)
    g = grad * (1 - y * y)
    return g @ w.T, x.T @ g


mystery.register_autograd(_mystery_backward, setup_context=lambda ctx, inputs, output: ctx.save_for_backward(*inputs))


class Custom(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(32, 32) / 8)

    def forward(self, x):
        return mystery(torch.relu(x), self.w).sin()


def test_a_custom_op_without_a_formula_is_never_recomputed_by_the_min_cut():
    torch.manual_seed(0)
    model, x = Custom(), torch.randn(16, 32, requires_grad=True)
    (doc,) = remat_torch.export_joint(model, x)
    (custom,) = _nodes(doc, "remat_test.mystery")
    assert "compute_intensive" in custom["flags"]
    report = remat_torch.partition_joint(doc, "mincut")
    assert custom["id"] not in report["recomputed"]
    # And the compiled model still computes what eager does.
    copy = Custom()
    copy.load_state_dict(model.state_dict())
    compiled = torch.compile(copy, backend=remat_torch.backend("mincut", compiler="aot_eager"))
    torch.testing.assert_close(compiled(x), model(x))


class Router(torch.nn.Module):
    """Top-2 of 4 experts, dispatched by the top-k's indices (gather and index_add)."""

    def __init__(self, d=32, experts=4, policy=None):
        super().__init__()
        self.gate = torch.nn.Linear(d, experts)
        self.experts = torch.nn.Parameter(torch.randn(experts, d, d) / d**0.5)
        self.policy = policy

    def route(self, x):
        weights, chosen = torch.topk(self.gate(x).softmax(-1), 2, dim=-1)
        out = torch.zeros_like(x)
        for k in range(2):
            expert = self.experts[chosen[:, k]]
            y = torch.bmm(x.unsqueeze(1), expert).squeeze(1)
            out = out + weights[:, k : k + 1] * torch.tanh(y)
        return out

    def forward(self, x):
        if self.policy is None:
            return checkpoint(self.route, x, use_reentrant=False)
        context = functools.partial(create_selective_checkpoint_contexts, self.policy)
        return checkpoint(self.route, x, use_reentrant=False, context_fn=context)


def recompute_topk(ctx, op, *args, **kwargs):
    return CheckpointPolicy.MUST_RECOMPUTE if op is torch.ops.aten.topk.default else CheckpointPolicy.PREFER_RECOMPUTE


@pytest.mark.parametrize("strategy", ["mincut", "budget=0.0", "respect"])
def test_routing_is_kept_unless_a_tag_asks_to_recompute_it(strategy):
    torch.manual_seed(0)
    x = torch.randn(24, 32, requires_grad=True)
    (doc,) = remat_torch.export_joint(Router(), x)
    routing = _nodes(doc, "aten.topk")
    assert routing and all("not_recomputable" in n.get("flags", []) for n in routing)
    report = remat_torch.partition_joint(doc, strategy)
    assert not {n["id"] for n in routing} & set(report["recomputed"]), (strategy, report["recomputed"])
    # The same model with topk tagged MUST_RECOMPUTE: no flag, and the checkpoint recomputes it.
    (tagged,) = remat_torch.export_joint(Router(policy=recompute_topk), x)
    recomputable = _nodes(tagged, "aten.topk")
    assert recomputable and not any("not_recomputable" in n.get("flags", []) for n in recomputable)
    if strategy != "respect":
        return
    report = remat_torch.partition_joint(tagged, strategy)
    assert {n["id"] for n in recomputable} & set(report["recomputed"]), report["recomputed"]


def test_routing_kept_runs_as_eager_does():
    torch.manual_seed(0)
    model, x = Router(), torch.randn(24, 32)
    copy = Router()
    copy.load_state_dict(model.state_dict())
    compiled = torch.compile(copy, backend=remat_torch.backend("mincut", compiler="aot_eager"))
    a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
    model(a).square().sum().backward()
    compiled(b).square().sum().backward()
    torch.testing.assert_close(b.grad, a.grad)


class CappedRouter(Router):
    """A capacity cut on top of Router: a second choice whose weight is below a threshold goes to
    expert 0 (a comparison feeding the dispatch), and a ReLU-like gate (a comparison that
    selects no index)."""

    def route(self, x):
        weights, chosen = torch.topk(self.gate(x).softmax(-1), 2, dim=-1)
        keep = weights > 0.3
        sent = torch.where(keep, chosen, torch.zeros_like(chosen))
        out = torch.zeros_like(x)
        for k in range(2):
            expert = self.experts[sent[:, k]]
            y = torch.bmm(x.unsqueeze(1), expert).squeeze(1)
            gate = y > 0
            out = out + weights[:, k : k + 1] * torch.where(gate, y, torch.zeros_like(y))
        return out


def test_the_routing_rule_is_the_rust_dsls():
    # docs/policies.md, "Routing": a comparison of floats reaching an index through integer and
    # bool values is routing too; what integer ops compute from routing is exact to recompute,
    # and a comparison that only gates values selects nothing.
    torch.manual_seed(0)
    x = torch.randn(24, 32, requires_grad=True)
    (doc,) = remat_torch.export_joint(CappedRouter(), x)
    flagged = lambda n: "not_recomputable" in n.get("flags", [])  # noqa: E731
    cut = [n for n in _nodes(doc, "aten.gt") if n["dtype"] == "bool" and n["shape"] == [24, 2]]
    gates = [n for n in _nodes(doc, "aten.gt") if n["shape"] == [24, 32]]
    sent = [n for n in _nodes(doc, "aten.where") if n["dtype"] == "i64"]
    assert cut and sent and gates, [n["op"] for n in doc["nodes"]]
    assert all(flagged(n) for n in cut), cut
    assert not any(flagged(n) for n in sent + gates), sent + gates
    # Views of routing are not flagged (their base is kept); the document is read as exported.
    assert not any(flagged(n) and "view" in n.get("flags", []) for n in doc["nodes"])
    for strategy in ("mincut", "respect", "budget=0.0"):
        report = remat_torch.partition_joint(doc, strategy)
        assert not {n["id"] for n in cut} & set(report["recomputed"]), (strategy, report["recomputed"])
