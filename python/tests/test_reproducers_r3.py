"""The round-3 reproducers of remat_torch (``shared/fixtures/adversarial-r3/py_*.py``, issue 45),
each as its script runs it, with what it should give."""

import json
import math
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn as nn

import remat_torch


def test_py_batchnorm_mincut_backward_fails():
    # BatchNorm1d in training mode under backend("mincut", compiler="aot_eager"): the backward
    # raised "modified by an inplace operation" (remat recomputed the batch norm from the
    # running statistics the forward overwrites). Now it trains as aot_eager does, bit for bit.
    results = {}
    for name, be in [
        ("aot_eager", "aot_eager"),
        ("remat respect", remat_torch.backend("respect", compiler="aot_eager")),
        ("remat mincut", remat_torch.backend("mincut", compiler="aot_eager")),
    ]:
        torch._dynamo.reset()
        torch.manual_seed(0)
        m = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 8))
        x = torch.randn(4, 8, requires_grad=True)
        torch.compile(m, backend=be)(x).sum().backward()
        results[name] = [x.grad] + [p.grad for p in m.parameters()] + list(m.buffers())
    for name in ("remat respect", "remat mincut"):
        for a, b in zip(results[name], results["aot_eager"]):
            assert torch.equal(a, b), (name, (a - b).abs().max())


def test_py_budget_offload_backend_assertion():
    # backend("budget+offload=0") was accepted, then died inside PyTorch's graph extraction
    # ("Node t_9 was invalid, but is output"). Now it is refused when made, as peak= is.
    with pytest.raises(ValueError, match="strategy 'budget\\+offload=0': offloading needs remat's executor"):
        remat_torch.backend("budget+offload=0", compiler="aot_eager")
    with pytest.raises(ValueError, match="budget\\+offload"):
        remat_torch.backend("budget+offload=0")


SCRIPT = """
import json, sys, torch, torch.nn as nn, remat_torch
from torch._dynamo.utils import counters
torch.manual_seed(0)
m = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8))
x = torch.randn(4, 8, requires_grad=True)
torch.compile(m, backend=remat_torch.backend(sys.argv[1]))(x).sum().backward()
print(json.dumps({k: dict(counters[k]) for k in ("inductor", "aot_autograd")}))
"""


def compile_in_a_fresh_process(tmp_path, strategy):
    """Counters and log of ``SCRIPT`` (the reproducer's model under Inductor) run in a new
    Python process with Inductor's caches in ``tmp_path``."""
    env = dict(os.environ)
    env.update(
        TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"),
        TORCHINDUCTOR_FX_GRAPH_CACHE="1",
        TORCHINDUCTOR_AUTOGRAD_CACHE="1",
        TRITON_CACHE_DIR=str(tmp_path / "triton"),
    )
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(SCRIPT), strategy], env=env, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1]), out.stderr


def hits(counts):
    return counts["inductor"].get("fxgraph_cache_hit", 0) + counts["aot_autograd"].get("autograd_cache_hit", 0)


def test_py_inductor_cache_key_unpicklable(tmp_path):
    # Every compile with remat's backend under Inductor logged "Failed to pickle cache key"
    # (the partitioner was a local class) and bypassed the caches. Now a second process
    # compiling the same model finds the first one's graphs; a third, under another strategy,
    # does not (the key holds the strategy).
    first, log1 = compile_in_a_fresh_process(tmp_path, "mincut")
    second, log2 = compile_in_a_fresh_process(tmp_path, "mincut")
    other, log3 = compile_in_a_fresh_process(tmp_path, "respect")
    for log in (log1, log2, log3):
        assert "Failed to pickle" not in log, log
    assert hits(first) == 0, first
    for counts in (first, second, other):
        assert counts["inductor"].get("fxgraph_cache_bypass", 0) == 0, counts
    # The whole compiled model from AOTAutograd's cache (before, the unpicklable key bypassed
    # it; only the graph without the partitioner, the forward-only one, hit Inductor's).
    assert second["aot_autograd"].get("autograd_cache_hit", 0) >= 1, second
    assert hits(other) == 0, other


def test_py_unreadable_argument_errors():
    # backend(5) was an AttributeError about startswith, budget="0.5" "invalid literal for
    # int()", backend("") silently mincut, budget=True a 1-byte budget, a NaN
    # activation_memory_budget "cannot convert float NaN to integer" at the first call.
    for call, named in [
        (lambda: remat_torch.backend(5), "strategy=5"),
        (lambda: remat_torch.backend(budget="0.5"), "budget='0.5'"),
        (lambda: remat_torch.backend(""), "strategy=''"),
        (lambda: remat_torch.backend(budget=True), "budget=True"),
    ]:
        with pytest.raises(ValueError, match=named):
            call()
    import torch._functorch.config as fc

    with fc.patch(activation_memory_budget=math.nan):
        with pytest.raises(ValueError, match="activation_memory_budget = nan"):
            torch.compile(
                nn.Linear(4, 4), backend=remat_torch.backend("torch", compiler="aot_eager")
            )(torch.randn(2, 4, requires_grad=True)).sum().backward()
