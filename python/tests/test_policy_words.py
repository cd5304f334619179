"""remat's policy words from Python (issue 48, point 5): ``backend(..., policy="save(matmul)")``
gives the ops of every region PyTorch marks as checkpointed the policy remat's DSL gives their
kind, so a model checkpointed without a ``context_fn`` (as timm and HF blocks are) gets selective
checkpointing; the words are remat's grammar with remat's errors. Measured by PyTorch's own
``saved_tensors_hooks``."""

import pytest
import torch
from torch.utils.checkpoint import checkpoint

import remat_torch
from remat_torch import with_policy


class Block(torch.nn.Module):
    """Two linears and a GELU under plain ``checkpoint`` (no ``context_fn``)."""

    def __init__(self, d=64):
        super().__init__()
        self.up, self.down = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

    def body(self, x):
        return self.down(torch.nn.functional.gelu(self.up(x))).tanh()

    def forward(self, x):
        return x + checkpoint(self.body, x, use_reentrant=False)


def kept_bytes(model, x):
    """Bytes PyTorch's saved-tensor hooks see the compiled forward keep for the backward
    (parameters and the input excluded: both sides hold them anyway)."""
    held = {p.data_ptr() for p in model.parameters()} | {x.data_ptr()}
    seen, total = set(), 0

    def pack(t):
        nonlocal total
        if t.data_ptr() not in held and t.data_ptr() not in seen:
            seen.add(t.data_ptr())
            total += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(x)
    out.square().sum().backward()
    return total


def compiled(policy, strategy="respect"):
    torch.manual_seed(0)
    model = Block()
    return model, torch.compile(model, backend=remat_torch.backend(strategy, compiler="aot_eager", policy=policy))


def test_save_matmul_keeps_the_matrix_products_a_plain_checkpoint_recomputes():
    x = torch.randn(32, 64, requires_grad=True)
    _, plain = compiled(None)
    eager, saving = compiled("save(matmul)")
    torch.manual_seed(1)
    plain_bytes, saving_bytes = kept_bytes(plain, x), kept_bytes(saving, x)
    # The up projection's output (32 × 256 f32) is kept with the words, recomputed without.
    assert saving_bytes >= plain_bytes + 32 * 256 * 4, (plain_bytes, saving_bytes)
    torch.testing.assert_close(saving(x), eager(x))


def _doc():
    torch.manual_seed(0)
    (doc,) = remat_torch.export_joint(Block(), torch.randn(8, 64, requires_grad=True))
    return doc


def test_with_policy_tags_every_op_of_the_regions_by_kind():
    doc = with_policy(_doc(), "rules(must_save = [matmul], must_recompute = [gelu], default = prefer_recompute)")
    tagged = {n["op"]: n["policy"] for n in doc["nodes"] if "region" in n}
    assert tagged["aten.addmm.default"] == "must_save"
    assert tagged["aten.gelu.default"] == "must_recompute"
    assert tagged["aten.tanh.default"] == "prefer_recompute"
    report = remat_torch.partition_joint(doc, "respect")
    saved_ops = {n["op"] for n in doc["nodes"] if n["id"] in report["saved"]}
    assert "aten.addmm.default" in saved_ops and "aten.gelu.default" not in saved_ops


@pytest.mark.parametrize(
    "policy, message",
    [
        ("save(matmull)", "did you mean `matmul`"),
        ("save(matmul", r"expected `,` or `\)`"),
        ("offload(matmul)", "offloading needs remat's executor"),
        ("save_names(\"h\")", "value names"),
        ("save(matmul), budget = 0.5", "region budget"),
        ("none", "marks no region"),
        (3, "policy=3"),
    ],
)
def test_bad_words_are_refused_when_the_backend_is_made(policy, message):
    with pytest.raises(ValueError, match=message):
        remat_torch.backend("mincut", compiler="aot_eager", policy=policy)


def test_a_kind_that_matches_nothing_lists_what_the_regions_hold():
    with pytest.raises(ValueError, match=r"sdpa matches no op .*they hold .*matmul") as caught:
        with_policy(_doc(), "save(sdpa)")
    assert "gelu" in str(caught.value)


def test_policy_words_follow_the_routing_rule():
    # recompute(topk) asks for the routing to be recomputed: the exporter's flag is lifted and the
    # checkpoint recomputes it; words that do not ask put the flag back on a top-k a PyTorch
    # MUST_RECOMPUTE tag had left recomputable.
    from test_costs import Router, recompute_topk

    x = torch.randn(24, 32, requires_grad=True)
    topk = lambda d: [n for n in d["nodes"] if "aten.topk" in n["op"]]  # noqa: E731
    flagged = lambda n: "not_recomputable" in n.get("flags", [])  # noqa: E731
    torch.manual_seed(0)
    (doc,) = remat_torch.export_joint(Router(), x)
    assert all(flagged(n) for n in topk(doc))
    recomputing = with_policy(doc, "recompute(topk)")
    assert topk(recomputing) and not any(flagged(n) for n in topk(recomputing))
    report = remat_torch.partition_joint(recomputing, "respect")
    assert {n["id"] for n in topk(recomputing)} & set(report["recomputed"]), report["recomputed"]
    torch.manual_seed(0)
    (tagged,) = remat_torch.export_joint(Router(policy=recompute_topk), x)
    assert not any(flagged(n) for n in topk(tagged))
    kept = with_policy(tagged, "save(matmul)")
    assert all(flagged(n) for n in topk(kept))
    report = remat_torch.partition_joint(kept, "respect")
    assert not {n["id"] for n in topk(kept)} & set(report["recomputed"]), report["recomputed"]
