"""remat_torch as a PyTorch user uses it: torch.compile with remat's partition gives eager's
outputs and gradients bit for bit, keeps what remat decides (inspected in the compiled forward
graph), honours selective-checkpoint tags, and refuses bad input with a Python exception."""

import functools
import operator

import pytest
import torch
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

import remat_torch

aten = torch.ops.aten


def compiled_with(model, strategy="mincut"):
    """The model compiled with remat's partition, and the forward graphs it produced."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    forwards = []

    def fw(gm, _inputs):
        forwards.append(gm)
        return make_boxed_func(gm.forward)

    def bw(gm, _inputs):
        return make_boxed_func(gm.forward)

    torch._dynamo.reset()
    part = functools.partial(remat_torch.partition_fn, strategy=strategy)
    backend = aot_autograd(fw_compiler=fw, bw_compiler=bw, partition_fn=part)
    return torch.compile(model, backend=backend, dynamic=False), forwards


def saved_targets(forward):
    """The ops whose values the forward graph outputs (the user's outputs, then what it hands to
    the backward), by FX target name; a getitem by its producer's."""
    out = next(n for n in forward.graph.nodes if n.op == "output")
    values = [v for v in out.args[0] if isinstance(v, torch.fx.Node) and v.op == "call_function"]
    return [str(v.args[0].target if v.target is operator.getitem else v.target) for v in values]


def run(model, *inputs, grad_inputs=True):
    """Loss, input gradients and parameter gradients of one forward and backward (integer
    inputs, like token ids, get no gradient: pass ``grad_inputs=False``)."""
    for p in model.parameters():
        p.grad = None
    inputs = [i.detach().clone().requires_grad_(grad_inputs) for i in inputs]
    loss = model(*inputs)
    loss.backward()
    return loss.detach(), [i.grad for i in inputs], [p.grad.clone() for p in model.parameters()]


def assert_bitwise(a, b):
    (la, ia, pa), (lb, ib, pb) = a, b
    assert torch.equal(la, lb), (la, lb)
    ia, ib = [g for g in ia if g is not None], [g for g in ib if g is not None]
    for x, y in zip(ia + pa, ib + pb):
        assert torch.equal(x, y), (x - y).abs().max()


class Chain(torch.nn.Module):
    """`g(f(x))`, each linear + relu in its own checkpointed region: the boundary case."""

    def __init__(self, policy=None):
        super().__init__()
        torch.manual_seed(0)
        self.f = torch.nn.Linear(16, 32)
        self.g = torch.nn.Linear(32, 16)
        self.policy = policy

    def region(self, fn, x):
        if self.policy is None:
            return checkpoint(fn, x, use_reentrant=False)
        context = functools.partial(create_selective_checkpoint_contexts, self.policy)
        return checkpoint(fn, x, use_reentrant=False, context_fn=context)

    def forward(self, x):
        h = self.region(lambda x: torch.relu(self.f(x)), x)
        return self.region(lambda h: torch.relu(self.g(h)), h).sum()


def recompute_everything(ctx, op, *args, **kwargs):
    return CheckpointPolicy.MUST_RECOMPUTE


def save_matmuls(ctx, op, *args, **kwargs):
    if op in (aten.mm.default, aten.addmm.default, aten.bmm.default, aten._scaled_mm.default):
        return CheckpointPolicy.MUST_SAVE
    return CheckpointPolicy.PREFER_RECOMPUTE


@pytest.mark.parametrize("strategy", ["mincut", "respect", "budget=0.0", "budget=1.0"])
def test_consecutive_regions_give_eager_bits(strategy):
    model = Chain()
    x = torch.randn(8, 16)
    compiled, forwards = compiled_with(model, strategy)
    assert_bitwise(run(compiled, x), run(model, x))
    assert forwards, "the forward graph was compiled"


def test_must_recompute_everywhere_keeps_the_boundary():
    # The seeds' question (PyTorch PR #129295): every op tagged MUST_RECOMPUTE in two
    # consecutive regions. remat keeps the tensor between them (its reader's rule).
    model = Chain(recompute_everything)
    x = torch.randn(8, 16)
    compiled, forwards = compiled_with(model, "mincut")
    assert_bitwise(run(compiled, x), run(model, x))
    saved = saved_targets(forwards[0])
    assert "aten.relu.default" in saved, saved


def test_save_matmuls_keeps_the_needed_matmul_and_the_boundary():
    model = Chain(save_matmuls)
    x = torch.randn(8, 16)
    compiled, forwards = compiled_with(model, "respect")
    assert_bitwise(run(compiled, x), run(model, x))
    # g's matmul (must_save, read by relu's backward) and the boundary f(x) (read by g's weight
    # gradient); f's matmul output is must_save but no backward op reads it (relu's backward
    # reads relu's output), so it is not kept. The loss is the forward's own output.
    assert sorted(saved_targets(forwards[0])) == ["aten.addmm.default", "aten.relu.default", "aten.sum.default"]


def to_fp8(t):
    scale = t.abs().amax().clamp(min=1e-12) / torch.finfo(torch.float8_e4m3fn).max
    return (t / scale).clamp(-448.0, 448.0).to(torch.float8_e4m3fn), scale


class Float8Linear(torch.autograd.Function):
    """`x @ wᵀ` through float8 `_scaled_mm`, casts by absmax scale and clamp inside; the
    backward in float32 from the fp8 values, straight through the casts (the seed's function)."""

    @staticmethod
    def forward(ctx, x, w):
        (x8, sx), (w8, sw) = to_fp8(x), to_fp8(w)
        ctx.save_for_backward(x8, w8, sx, sw)
        return torch._scaled_mm(x8, w8.t(), scale_a=sx, scale_b=sw, out_dtype=torch.float32)

    @staticmethod
    def backward(ctx, g):
        x8, w8, sx, sw = ctx.saved_tensors
        return g @ (w8.float() * sw), g.t() @ (x8.float() * sx)


class Float8Seed(torch.nn.Module):
    """`x + relu(_scaled_mm(cast_fp8(x), cast_fp8(w)))` in one selective-checkpoint region whose
    policy saves the matmul and recomputes everything else: PyTorch's compiler once saved the
    fp8 cast of the input instead (the reason remat exists)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(1)
        self.w = torch.nn.Parameter(torch.randn(64, 64) / 8)

    def block(self, x):
        return x + torch.relu(Float8Linear.apply(x, self.w))

    def forward(self, x):
        context = functools.partial(create_selective_checkpoint_contexts, save_matmuls)
        return checkpoint(self.block, x, use_reentrant=False, context_fn=context).sum()


def test_float8_seed_saves_no_cast_scale_or_amax():
    model = Float8Seed()
    x = torch.randn(32, 64)
    compiled, forwards = compiled_with(model, "respect")
    assert_bitwise(run(compiled, x), run(model, x))
    saved = saved_targets(forwards[0])
    assert "aten._scaled_mm.default" in saved, saved
    casts = [s for s in saved if any(k in s for k in ("_to_copy", "amax", "clamp", "div", "abs"))]
    assert not casts, f"the forward keeps fp8 casts or scales: {saved}"


def test_the_backend_runs_aot_eager_with_eagers_bits():
    model = Chain(save_matmuls)
    x = torch.randn(8, 16)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=remat_torch.backend("respect", compiler="aot_eager"), dynamic=False)
    assert_bitwise(run(compiled, x), run(model, x))


def test_the_backend_puts_remats_partition_inside_inductor(monkeypatch):
    # Inductor (torch.compile's default compiler) partitions through remat: counted here, with
    # Inductor's caches off so that the partition really runs.
    calls = []
    real = remat_torch.partition_fn

    def counted(*args, **kwargs):
        calls.append(kwargs["strategy"])
        return real(*args, **kwargs)

    monkeypatch.setattr(remat_torch, "partition_fn", counted)
    model = Chain(recompute_everything)
    x = torch.randn(8, 16)
    torch._dynamo.reset()
    with torch._inductor.config.patch(fx_graph_cache=False), torch._functorch.config.patch(enable_autograd_cache=False):
        compiled = torch.compile(model, backend=remat_torch.backend("mincut"), dynamic=False)
        (loss, grads, params) = run(compiled, x)
    assert calls == ["mincut"], calls
    (eager_loss, eager_grads, eager_params) = run(model, x)
    # Inductor fuses and reorders, so its bits may differ from eager's; its values may not.
    for a, b in zip([loss, *grads, *params], [eager_loss, *eager_grads, *eager_params]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_bad_input_raises_python_exceptions_naming_the_problem():
    with pytest.raises(ValueError, match="strategy"):
        remat_torch.backend("budget=lots")
    with pytest.raises(ValueError, match="not both"):
        remat_torch.backend("mincut", budget=0.5)
    with pytest.raises(ValueError, match="peak bound .* budget="):
        remat_torch.backend("peak=64MiB")
    with pytest.raises(ValueError, match="compiler 'eager'"):
        remat_torch.backend("mincut", compiler="eager")
    bad = {
        "format": "remat.joint",
        "version": 1,
        "nodes": [{"id": "mm_3", "op": "aten.mm.default", "inputs": ["nowhere"], "phase": "forward", "bytes": 4}],
        "forward_outputs": ["mm_3"],
    }
    with pytest.raises(remat_torch.RematError, match="mm_3"):
        remat_torch.partition_joint(bad)


def meta(shape, dtype=torch.float32):
    return torch.empty(shape, dtype=dtype, device="meta")


def dropout_joint(tag_mask):
    """A hand-built joint graph: dropout on a device whose generator PyTorch cannot save (meta),
    its mask read by the backward; `tag_mask` tags the dropout MUST_RECOMPUTE."""
    g = torch.fx.Graph()
    x = g.placeholder("primals_1")
    x.meta["val"] = meta((4, 8))
    t = g.placeholder("tangents_1")
    t.meta["val"] = meta((4, 8))
    d = g.call_function(aten.native_dropout.default, (x, 0.5, True))
    d.meta["val"] = (meta((4, 8)), meta((4, 8), torch.bool))
    if tag_mask:
        d.meta["recompute"], d.meta["ac_graph_id"] = CheckpointPolicy.MUST_RECOMPUTE, 1
    out = g.call_function(operator.getitem, (d, 0))
    out.meta["val"] = meta((4, 8))
    mask = g.call_function(operator.getitem, (d, 1))
    mask.meta["val"] = meta((4, 8), torch.bool)
    grad = g.call_function(aten.mul.Tensor, (t, mask))
    grad.meta["val"] = meta((4, 8))
    g.output([out, grad])
    return torch.fx.GraphModule(torch.nn.Module(), g)


def test_graphs_remat_cannot_take_raise_exceptions_naming_the_fx_node():
    # A mask that must be recomputed but cannot be replayed: remat refuses, naming the getitem.
    with pytest.raises(remat_torch.RematError, match="getitem_1") as refused:
        remat_torch.partition_fn(dropout_joint(tag_mask=True), [], num_fwd_outputs=1)
    assert "must_recompute" in str(refused.value) and "not_recomputable" in str(refused.value), refused.value
    # Untagged, the same graph partitions: the mask is kept (nothing could replay it).
    fw, bw = remat_torch.partition_fn(dropout_joint(tag_mask=False), [], num_fwd_outputs=1)
    assert "getitem_1" in [n.name for n in bw.graph.nodes if n.op == "placeholder"]
    # A node the exporter cannot describe (a method call, which aot_autograd never makes).
    joint = dropout_joint(tag_mask=False)
    x = next(iter(joint.graph.nodes))
    with joint.graph.inserting_after(x):
        odd = joint.graph.call_method("relu", (x,))
    odd.meta["val"] = meta((4, 8))
    # Read by the dropout, so that dead-code elimination (which partition_fn runs first, as
    # PyTorch's partitioner does) keeps it.
    next(n for n in joint.graph.nodes if n.target is aten.native_dropout.default).replace_input_with(x, odd)
    with pytest.raises(remat_torch.ExportError, match="'relu'.*call_method"):
        remat_torch.partition_fn(joint, [], num_fwd_outputs=1)


def test_explain_and_export_describe_the_joint_graph(tmp_path):
    model = Chain(recompute_everything)
    x = torch.randn(8, 16, requires_grad=True)
    lines = []

    class Sink:
        def write(self, s):
            lines.append(s)

    text = remat_torch.explain(model, x, file=Sink())
    assert "".join(lines).startswith(text[:40])
    assert "relu" in text and "must_recompute" in text, text
    path = tmp_path / "chain.json"
    docs = remat_torch.export_joint(model, x, path=str(path))
    assert path.exists() and len(docs) == 1
    doc = docs[0]
    assert doc["format"] == "remat.joint"
    ops = {n["op"] for n in doc["nodes"]}
    assert {"input", "tangent", "aten.addmm.default", "aten.relu.default"} <= ops, ops
    regions = {n.get("region") for n in doc["nodes"] if n["phase"] == "forward" and n.get("policy")}
    assert regions == {0, 1}, regions
    # The user's ops carry the policy's tag (PyTorch tags the detaches it adds itself).
    user_ops = {"aten.t.default", "aten.addmm.default", "aten.relu.default"}
    tagged = [n for n in doc["nodes"] if n.get("region") is not None and n["op"] in user_ops]
    assert len(tagged) == 6 and all(n["policy"] == "must_recompute" for n in tagged), tagged


def test_pytorchs_activation_memory_budget_is_honoured():
    from torch._functorch import config

    model = Chain()
    x = torch.randn(8, 16)
    eager = run(model, x)
    saved = {}
    for fraction in (1.0, 0.0):
        with config.patch(activation_memory_budget=fraction):
            compiled, forwards = compiled_with(model, "torch")
            assert_bitwise(run(compiled, x), eager)
            saved[fraction] = len(saved_targets(forwards[0]))
    assert saved[0.0] <= saved[1.0], saved
