"""Every argument of remat_torch's functions is checked when given: a wrong one is a
``ValueError`` naming the argument (round-3 reproducer ``py_unreadable_argument_errors.py``),
and a strategy the backend cannot honour under ``torch.compile`` is refused when the backend is
made (``py_budget_offload_backend_assertion.py``)."""

import math

import pytest
import torch
import torch.nn as nn

import remat_torch

DOC = {
    "format": "remat.joint",
    "version": 1,
    "nodes": [{"id": "x", "op": "input", "phase": "forward", "bytes": 4}],
    "forward_outputs": ["x"],
}


@pytest.mark.parametrize(
    "call, named",
    [
        (lambda: remat_torch.backend(5), "strategy=5"),
        (lambda: remat_torch.backend(""), "strategy=''"),
        (lambda: remat_torch.backend("   "), "strategy='   '"),
        (lambda: remat_torch.backend(["mincut"]), "strategy=\\['mincut'\\]"),
        (lambda: remat_torch.backend(budget="0.5"), "budget='0.5'"),
        (lambda: remat_torch.backend(budget=True), "budget=True"),
        (lambda: remat_torch.backend(budget=False), "budget=False"),
        (lambda: remat_torch.backend(budget=math.nan), "budget=nan"),
        (lambda: remat_torch.backend(budget=math.inf), "budget=inf"),
        (lambda: remat_torch.backend(budget=1.5), "budget=1.5"),
        (lambda: remat_torch.backend(budget=-1), "budget=-1"),
        (lambda: remat_torch.backend("mincut", compiler=None), "compiler None"),
        (lambda: remat_torch.backend("mincut", compiler=3), "compiler 3"),
        (lambda: remat_torch.backend("budget=lots"), "strategy \"budget=lots\""),
        (lambda: remat_torch.backend("budget+offload=0"), "strategy 'budget\\+offload=0'.*offload"),
        (lambda: remat_torch.backend("budget+offload=0.5", compiler="aot_eager"), "budget\\+offload"),
        (lambda: remat_torch.backend("peak=64MiB"), "strategy 'peak=64MiB'"),
        (lambda: remat_torch.backend("peak+offload=64MiB", compiler="aot_eager"), "peak\\+offload=64MiB.*offload"),
        (lambda: remat_torch.partition_joint(DOC, 5), "strategy=5"),
        (lambda: remat_torch.partition_joint(DOC, ""), "strategy=''"),
        (lambda: remat_torch.partition_joint("{}", "mincut"), "doc: expected"),
        (lambda: remat_torch.partition_joint(DOC, "mincut", text="yes"), "text='yes'"),
        (lambda: remat_torch.partition_joint(DOC, "peak=1KiB", search_seconds="20"), "search_seconds='20'"),
        (lambda: remat_torch.partition_joint(DOC, "peak=1KiB", search_seconds=True), "search_seconds=True"),
        (lambda: remat_torch.partition_joint(DOC, "peak=1KiB", search_seconds=0.5), "search_seconds: 0.5 s is out of range"),
        (lambda: remat_torch.partition_joint(DOC, "peak=1KiB", search_seconds=math.nan), "search_seconds: NaN is not"),
        (lambda: remat_torch.partition_joint(DOC, "mincut", search_seconds=5), "search_seconds: 5 s: only `peak=`.*`mincut` takes none"),
        (lambda: remat_torch.plan_joint(DOC, "budget=0.5", search_seconds=5), "`budget=0.5` takes none"),
        (lambda: remat_torch.backend("mincut", search_seconds=5), "search_seconds: 5 s: only `peak=`"),
        (lambda: remat_torch.backend("torch", search_seconds=5), "`torch` takes none"),
        (lambda: remat_torch.backend("peak=64MiB", compiler="aot_eager", search_seconds=-1), "search_seconds: -1 s is out of range"),
        (lambda: remat_torch.explain(nn.Linear(2, 2), torch.randn(1, 2), strategy=3), "strategy=3"),
        (lambda: remat_torch.explain(nn.Linear(2, 2), torch.randn(1, 2), strategy="peak"), "strategy \"peak\""),
        (lambda: remat_torch.explain(nn.Linear(2, 2), torch.randn(1, 2), file=5), "file=5"),
        (lambda: remat_torch.explain(5, torch.randn(1, 2)), "model: expected"),
        (lambda: remat_torch.export_joint(nn.Linear(2, 2), torch.randn(1, 2), path=3), "path=3"),
        (lambda: remat_torch.joint_document(5, 1), "joint: expected"),
        (lambda: remat_torch.partition_fn(torch.fx.symbolic_trace(nn.Identity()), [], num_fwd_outputs=1,
                                          strategy="budget+offload=0"), "budget\\+offload"),
    ],
)
def test_a_bad_argument_is_a_value_error_naming_it(call, named):
    with pytest.raises(ValueError, match=named):
        call()


def test_joint_document_checks_its_counts():
    gm = torch.fx.symbolic_trace(nn.Identity())
    with pytest.raises(ValueError, match="num_fwd_outputs=True"):
        remat_torch.joint_document(gm, True)
    with pytest.raises(ValueError, match="num_fwd_outputs=7: expected an int from 0 to"):
        remat_torch.joint_document(gm, 7)
    with pytest.raises(ValueError, match="static_inputs=5"):
        remat_torch.joint_document(gm, 0, static_inputs=5)
    with pytest.raises(ValueError, match="static_inputs=\\[-1\\]"):
        remat_torch.joint_document(gm, 0, static_inputs=[-1])


def test_the_budget_argument_means_what_it_says():
    # An int is bytes, a float a fraction (also one too small for a decimal repr).
    seen = []
    real = remat_torch._remat.partition

    def spy(doc, strategy, text=False):
        seen.append(strategy)
        return real(doc, strategy, text)

    remat_torch._remat.partition = spy
    try:
        remat_torch.backend(budget=4096)
        remat_torch.backend(budget=0.5)
        remat_torch.backend(budget=1e-05)
        remat_torch.backend(budget=0)
    finally:
        remat_torch._remat.partition = real
    assert seen[0] == "budget=4096" and seen[1] == "budget=0.5" and seen[3] == "budget=0", seen
    assert seen[2].startswith("budget=0.0000100"), seen


@pytest.mark.parametrize("value", [math.nan, -0.5, 1.5, True, "0.5", None])
def test_pytorchs_activation_memory_budget_is_checked(value):
    from torch._functorch import config

    with config.patch(activation_memory_budget=value):
        with pytest.raises(ValueError, match="activation_memory_budget = .*strategy 'torch'.*\\[0, 1\\]"):
            remat_torch.backend("torch", compiler="aot_eager")


def test_a_nan_activation_memory_budget_set_after_the_backend_is_named_at_compile_time():
    from torch._functorch import config

    backend = remat_torch.backend("torch", compiler="aot_eager")
    torch._dynamo.reset()
    with config.patch(activation_memory_budget=math.nan):
        compiled = torch.compile(nn.Linear(4, 4), backend=backend)
        with pytest.raises(Exception, match="activation_memory_budget = nan"):
            compiled(torch.randn(2, 4, requires_grad=True)).sum().backward()
    torch._dynamo.reset()
