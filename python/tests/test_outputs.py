"""Forward outputs counted as PyTorch keeps them (issue 48, point 3). The caller of a compiled
forward may drop an output once the forward returns (logits after the loss): remat keeps such an
output for the backward only at its bytes (the document's ``released_outputs``), and counts as
held only what the caller cannot free — its own tensors and the loss it calls ``backward()`` on.
Measured by PyTorch's ``saved_tensors_hooks``, against PyTorch's own partitioner."""

import functools

import pytest
import torch
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

import remat_torch

WIDTH = 512  # one activation: 512 × 512 f32, 1 MiB


def recompute_everything(ctx, op, *args, **kwargs):
    return CheckpointPolicy.MUST_RECOMPUTE


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(WIDTH, WIDTH)

    def forward(self, x):
        # tanh's gradient reads its output: the block's output is what its backward needs.
        return torch.nn.functional.gelu(self.linear(x)).tanh()


class Chain(torch.nn.Module):
    """``f(g(x))``, each a checkpointed region whose every op is MUST_RECOMPUTE."""

    def __init__(self, loss_inside=False):
        super().__init__()
        self.f, self.g, self.loss_inside = Block(), Block(), loss_inside

    def forward(self, x):
        context = functools.partial(create_selective_checkpoint_contexts, recompute_everything)
        h = checkpoint(self.g, x, use_reentrant=False, context_fn=context)
        y = checkpoint(self.f, h, use_reentrant=False, context_fn=context)
        return y.sum() if self.loss_inside else y


def kept_by_hooks(model, backend):
    """Bytes saved for the backward by one step, counted by PyTorch's saved-tensor hooks (each
    storage once; parameters and the input excluded: every partition holds them)."""
    torch.manual_seed(0)
    x = torch.randn(WIDTH, WIDTH, requires_grad=True)
    held = {p.data_ptr() for p in model.parameters()} | {x.data_ptr()}
    seen, kept = set(), 0

    def pack(t):
        nonlocal kept
        storage = t.untyped_storage()
        if t.data_ptr() not in held and storage.data_ptr() not in seen:
            seen.add(storage.data_ptr())
            kept += storage.nbytes()
        return t

    compiled = torch.compile(model, backend=backend)
    torch._dynamo.reset()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = compiled(x)
    (out if out.dim() == 0 else out.sum()).backward()
    torch._dynamo.reset()
    return kept, x.grad


@pytest.mark.parametrize("compiler", ["aot_eager", "inductor"])
def test_the_chain_keeps_no_more_than_pytorch(compiler):
    """The chain's output y is what its last op's gradient reads. Counted as held by the caller
    (the old rule), remat kept it beside the boundary value h: 2 MiB where PyTorch keeps 1 MiB.
    Released, keeping y would cost its bytes, and remat recomputes it from h, as PyTorch does."""
    torch.manual_seed(0)
    model = Chain()
    ours, grad = kept_by_hooks(model, remat_torch.backend("mincut", compiler=compiler))
    model.zero_grad()
    theirs, their_grad = kept_by_hooks(model, compiler)
    assert ours <= theirs, (ours, theirs)
    assert ours == WIDTH * WIDTH * 4, "the boundary value h alone"
    if compiler == "aot_eager":
        assert torch.equal(grad, their_grad)
    else:
        torch.testing.assert_close(grad, their_grad, rtol=1e-3, atol=1e-5)


@pytest.mark.parametrize("loss_inside", [False, True])
def test_the_exporter_holds_the_loss_and_releases_the_rest(loss_inside):
    (doc,) = remat_torch.export_joint(Chain(loss_inside), torch.randn(WIDTH, WIDTH, requires_grad=True))
    by_id = {n["id"]: n for n in doc["nodes"]}
    held = [by_id[i] for i in doc["forward_outputs"]]
    released = [by_id[i] for i in doc["released_outputs"]]
    if loss_inside:
        assert [n["shape"] for n in held] == [[]], "the 0-dim loss is the caller's"
        assert not released
    else:
        assert not held
        assert [n["shape"] for n in released] == [[WIDTH, WIDTH]], "y may be dropped after the forward"
    report = remat_torch.partition_joint(doc, "mincut")
    assert set(doc["released_outputs"]).isdisjoint(report["held"]), "a released output is never held for free"
