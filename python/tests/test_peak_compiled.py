"""`peak=` under `torch.compile(backend=remat_torch.backend("peak=B", compiler="aot_eager"))`: remat
plans the joint graph within B, the graphs PyTorch runs follow remat's plan, and PyTorch's own
profiler measures the activation peak remat predicted for them, to the byte (peak_measure.py says
how each figure is made and how the two counts correspond)."""

import pytest
import torch

import remat_torch
from peak_measure import measure, models, bounds, predicted_activation_peak

MODELS = {name: (make, inputs) for name, make, inputs in models()}


@pytest.fixture(scope="module")
def pytorch_runs():
    """Each model's step under PyTorch's own aot_eager: its loss, gradients and measured peak."""
    return {name: measure(make, inputs, None) for name, (make, inputs) in MODELS.items()}


@pytest.fixture(scope="module")
def model_bounds():
    return {name: bounds(make, inputs) for name, (make, inputs) in MODELS.items()}


@pytest.mark.parametrize("which", ["loosest", "middle", "least"])
@pytest.mark.parametrize("name", list(MODELS))
def test_the_profiler_measures_the_peak_remat_planned(name, which, pytorch_runs, model_bounds):
    make, inputs = MODELS[name]
    limits = model_bounds[name]
    limit = {"loosest": limits[-1], "middle": limits[len(limits) // 2], "least": limits[0]}[which]
    run = measure(make, inputs, f"peak={limit}")
    torch_run = pytorch_runs[name]

    # The same values as PyTorch's aot_eager, bit for bit: both run the same ops eagerly, remat's
    # order and recomputation change when each runs, not what it computes.
    assert torch.equal(run["loss"], torch_run["loss"])
    for mine, theirs in zip(run["grads"], torch_run["grads"], strict=True):
        assert torch.equal(mine, theirs)

    # remat's plan is within the bound, in its own count (residents included).
    assert run["planned_peak"] <= limit, (run["planned_peak"], limit)
    # What the profiler saw is exactly remat's plan run as PyTorch allocates it.
    assert run["measured"] == run["predicted"], (run["measured"], run["predicted"])
    # And within the bound once the inputs and parameters (live before the step) are added: the
    # views remat counts as copies cost PyTorch nothing, and no view here outlives its base. One
    # allowance, the tangent (4 B): remat frees it after its last use, the autograd engine holds
    # it until the backward returns.
    assert run["measured"] + run["resident_bytes"] <= limit + run["tangent_bytes"]
    if which == "least" and name.startswith("transformer"):
        # Bounded to its least, remat recomputes and holds less than PyTorch's own partition. (Built
        # without HiGHS, remat's search finds no plan below the MLP's no-recompute one.)
        assert run["planned"]["report"]["recompute_flops"] > 0
        assert run["measured"] < torch_run["measured"], (run["measured"], torch_run["measured"])


def test_peak_needs_aot_eager():
    with pytest.raises(ValueError, match="strategy 'peak=64MiB': a peak bound needs the graphs run in the order "
                       "remat planned; inductor reorders .* compiler='aot_eager'.* budget="):
        remat_torch.backend("peak=64MiB")
    with pytest.raises(ValueError, match="strategy \"peak=lots\""):
        remat_torch.backend("peak=lots", compiler="aot_eager")
    assert callable(remat_torch.backend("peak=64MiB", compiler="aot_eager"))


def test_a_peak_no_plan_meets_is_a_remat_error_naming_the_least():
    make, inputs = MODELS[next(iter(MODELS))]
    torch.manual_seed(0)
    model = make()
    compiled = torch.compile(model, backend=remat_torch.backend("peak=1", compiler="aot_eager"))
    torch._dynamo.reset()
    with pytest.raises(Exception, match="peak=1 .*cannot be met"):
        compiled(*inputs).backward()
    torch._dynamo.reset()


def test_the_walk_counts_views_as_shared_storage():
    # x -> a (4 KiB) -> v = view(a) -> b = relu(v): freeing a while v lives keeps the storage.
    doc = {
        "nodes": [
            {"id": "x", "op": "input", "bytes": 4096},
            {"id": "a", "op": "aten.mul.Tensor", "inputs": ["x"], "bytes": 4096},
            {"id": "v", "op": "aten.view.default", "inputs": ["a"], "shape": [1024], "flags": ["view"]},
            {"id": "w", "op": "aten.t.default", "inputs": ["x"], "shape": [1024], "flags": ["view"]},
            {"id": "b", "op": "aten.relu.default", "inputs": ["v", "w"], "bytes": 1024},
        ]
    }
    program = [["compute", "a"], ["compute", "v"], ["free", "a"], ["compute", "w"], ["compute", "b"],
               ["free", "v"], ["free", "w"]]
    # a's 4 KiB and b's 1 KiB: the view and the parameter's transpose allocate nothing.
    assert predicted_activation_peak(doc, {"forward": program, "backward": []}) == 5120
    program = [["compute", "a"], ["compute", "v"], ["free", "a"], ["free", "v"], ["compute", "w"], ["compute", "b"]]
    assert predicted_activation_peak(doc, {"forward": program, "backward": []}) == 4096


def test_the_plan_comes_with_the_report_it_plans():
    import json
    from pathlib import Path

    doc = json.loads((Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "torch" /
                      "chain-inductor__full.json").read_text())
    for strategy in ("mincut", "budget=0.0", "peak=1TiB"):
        planned = remat_torch.plan_joint(doc, strategy)
        assert planned["report"] == remat_torch.partition_joint(doc, strategy)
        assert planned["planned_peak"] == planned["report"]["planned_peak"]
        # Each step reads only values live then (computed and not yet freed, or inputs and
        # parameters), and frees only a live value.
        ids = {n["id"]: n for n in doc["nodes"]}
        live = {n["id"] for n in doc["nodes"] if n["op"] in ("input", "param")}
        for kind, value in planned["forward"] + planned["backward"]:
            if kind == "free":
                assert value in live, value
                live.remove(value)
            else:
                assert all(i in live for i in ids[value].get("inputs", ())), value
                live.add(value)
    with pytest.raises(remat_torch.RematError, match="cannot be met"):
        remat_torch.plan_joint(doc, "peak=1")


def test_the_backends_search_time_reaches_the_search(monkeypatch):
    # The time given to the backend is the one remat's search gets for each joint graph.
    make, inputs = MODELS[next(iter(MODELS))]
    plan_joint, asked = remat_torch.plan_joint, []

    def recording(doc, strategy, **options):
        asked.append(options)
        return plan_joint(doc, strategy, **options)

    monkeypatch.setattr(remat_torch, "plan_joint", recording)
    torch.manual_seed(0)
    compiled = torch.compile(make(), backend=remat_torch.backend("peak=1TiB", compiler="aot_eager",
                                                                search_seconds=3))
    torch._dynamo.reset()
    compiled(*inputs).sum().backward()
    torch._dynamo.reset()
    assert asked and all(options == {"search_seconds": 3.0} for options in asked), asked
