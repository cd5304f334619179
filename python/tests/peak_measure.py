"""What a training step really allocates under ``torch.compile``, by PyTorch's own profiler, beside
what remat predicts for it. Imported by ``test_peak_compiled.py``; run as a script it prints the
table of docs/torch.md ("A peak bound under aot_eager"):

    PYTHONPATH=<a directory holding remat_torch with its extension> \\
        .venv-torch/bin/python python/tests/peak_measure.py

**Measured** (:func:`measured_peaks`): one step (forward and backward) under
``torch.profiler.profile(activities=[CPU], profile_memory=True)``. The CPU allocator reports every
block it hands out or takes back while the profiler records, with its address and size. In the
order of their time stamps, each block allocated during the step adds its bytes and its free takes
them off again (matched by address); a free of a block allocated before the step (an old gradient
``zero_grad`` drops) is left out, as the block's allocation is. The high-water mark of that sum is
the most the step held at once above what was live when it began. ``values`` leaves out the blocks
an op allocates and frees before it returns (its scratch: a Python-number argument wrapped as a
0-dim double tensor, 8 B, and its cast to the op's dtype, 4 B; ``mean``'s accumulator): they are no
value of the graph. ``all`` keeps them. The allocator's own running total (``total_allocated``) is
not read: it goes on counting blocks allocated in an earlier profiling session, whose frees
between sessions it did not see, so it drifts from one session to the next.

**Predicted** (:func:`predicted_activation_peak`): remat's plan of the joint graph, walked step by
step as PyTorch allocates it. remat's own ``planned_peak`` counts every value its bytes from the
step that computes it to its ``free``, and the inputs and parameters from the start
(``resident_bytes``): what remat's executor, which copies every view, holds. PyTorch differs in
three ways, each applied here to remat's plan, step for step:

- the inputs and parameters were allocated before the step: the profiler does not see them;
- the tangent (``ones_like(loss)``, 4 B for a scalar loss), which remat computes at the backward's
  start and frees after its last use, is held by the autograd engine to the end of the backward;
- a view (flag ``view``: ``t``, ``view``, ``expand``, ``detach``, ``transpose``, ...) allocates
  nothing: it shares its base's storage, which is freed when the last of the base and its views is
  freed. A view of an input or a parameter holds nothing the profiler counts.

Everything else is remat's plan as it stands: each value allocated when its step computes or
recomputes it, freed at its ``free``. That the profiler's figure equals this one exactly is the test
that the graphs PyTorch ran computed, recomputed and freed every value where remat planned it.
"""

from __future__ import annotations

import json
import math
import sys
from typing import Any, Callable

import torch
import torch.nn as nn
from torch.profiler import ProfilerActivity, profile


def measured_peaks(step: Callable[[], Any]) -> dict:
    """Runs ``step()`` under the profiler and returns, from its CPU allocation events, ``all``: the
    high-water mark of the bytes allocated during the step and not yet freed, and ``values``: the
    same without the blocks an op allocates and frees before it returns (its scratch: a Python
    number wrapped as a 0-dim double tensor, 8 B, and its cast to the op's dtype, 4 B, beside the
    op's output; ``mean``'s accumulator). The module's docstring says why the allocator's own
    running total (``total_allocated``) is not read."""
    from torch._C._profiler import _EventType

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    events = []
    stack = list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        event = stack.pop()
        if event.tag == _EventType.Allocation and event.extra_fields.device.type == "cpu":
            events.append(event)
        stack.extend(event.children)
    events.sort(key=lambda e: e.start_time_ns)

    def op_of(event: Any) -> Any:
        # The outermost ATen op the block was allocated or freed in: the graph's own call.
        outer, parent = None, event.parent
        while parent is not None:
            if parent.name.startswith("aten::"):
                outer = (parent.name, parent.start_time_ns, parent.end_time_ns)
            parent = parent.parent
        return outer

    allocated: dict[int, tuple[int, int, Any]] = {}  # live block -> (allocation, bytes, its op)
    scratch = set()  # allocations freed within the op that made them
    changes = []  # (bytes, allocation) in order, frees negative
    for event in events:
        fields = event.extra_fields
        if fields.alloc_size > 0:
            allocated[fields.ptr] = (len(changes), fields.alloc_size, op_of(event))
            changes.append((fields.alloc_size, len(changes)))
        elif fields.ptr in allocated:
            k, size, op = allocated.pop(fields.ptr)
            if size != -fields.alloc_size:
                raise AssertionError(f"block {fields.ptr:#x}: allocated {size} B, freed {-fields.alloc_size} B")
            changes.append((-size, k))
            if op is not None and op == op_of(event):
                scratch.add(k)
        # Else a block allocated before the step (an old gradient zero_grad frees): not counted.
    peaks = {}
    for name, skip in (("all", set()), ("values", scratch)):
        live = peak = 0
        for size, k in changes:
            if k not in skip:
                live += size
                peak = max(peak, live)
        peaks[name] = peak
    return peaks


_DTYPE_BYTES = {"f64": 8, "f32": 4, "f16": 2, "bf16": 2, "f8e4m3": 1, "f8e5m2": 1, "i64": 8, "i32": 4, "i16": 2,
                "i8": 1, "u8": 1, "bool": 1}


def value_bytes(node: dict) -> int:
    """A document node's bytes: given, else its shape's elements times its dtype's size (what the
    exporter leaves implied), 0 without a shape (not a tensor)."""
    if "bytes" in node:
        return node["bytes"]
    if "shape" not in node:
        return 0
    return math.prod(node["shape"]) * _DTYPE_BYTES[node.get("dtype", "f32")]


def predicted_activation_peak(doc: dict, planned: dict) -> int:
    """remat's plan (``plan_joint``'s ``forward`` and ``backward``) of ``doc``, walked as PyTorch
    allocates it: the most bytes live at once above the inputs and parameters (the module's
    docstring says what differs from ``planned_peak`` and why)."""
    nodes = {n["id"]: n for n in doc["nodes"]}
    storage: dict[Any, int] = {}  # live value -> its storage (a view: its base's)
    size: dict[int, int] = {}
    holders: dict[int, int] = {}  # storage -> live values on it
    live = peak = 0

    def hold(value: Any, store: int) -> None:
        storage[value] = store
        holders[store] += 1

    computes_tangents = any(
        kind == "compute" and "tangent" in nodes[value].get("flags", ()) for kind, value in planned["backward"]
    )
    for program in ("forward", "backward"):
        if program == "backward" and not computes_tangents:
            # loss.backward() allocates the tangents (ones) after the forward, before the graph runs.
            tangents = [n for n in doc["nodes"] if "tangent" in n.get("flags", ())]
            live += sum(value_bytes(n) for n in tangents)
            peak = max(peak, live)
        for kind, value in planned[program]:
            node = nodes[value]
            if kind in ("compute", "recompute", "alias"):
                base = node["inputs"][0] if node.get("inputs") else None
                if "view" in node.get("flags", ()) or kind == "alias":
                    # A view of a value the step did not allocate (an input, a parameter, a tangent)
                    # holds nothing counted; a view of a computed value holds its base's storage.
                    if base in storage:
                        hold(value, storage[base])
                    continue
                store = len(size)
                size[store] = value_bytes(node)
                holders[store] = 0
                hold(value, store)
                live += size[store]
                peak = max(peak, live)
            elif kind == "free" and "tangent" in node.get("flags", ()):
                # The autograd engine holds the tangents it passed in until the backward returns.
                continue
            elif kind == "free" and value in storage:
                store = storage.pop(value)
                holders[store] -= 1
                if holders[store] == 0:
                    live -= size[store]
            elif kind in ("offload", "fetch"):
                raise ValueError(f"step {kind} {value!r}: no offloading under torch.compile")
    return peak


def compile_and_capture(model: nn.Module, strategy: str | None) -> tuple[Callable, list]:
    """``torch.compile(model)`` with remat's backend under ``strategy`` and ``aot_eager`` (PyTorch's
    own ``aot_eager`` where ``strategy`` is None), and a list that receives ``(doc, planned)`` for
    each joint graph remat plans, as ``partition_fn`` planned it."""
    captured: list = []
    if strategy is None:
        return torch.compile(model, backend="aot_eager"), captured
    import remat_torch

    plan_joint = remat_torch.plan_joint

    def recording(doc: dict, chosen: str, **options: Any) -> dict:
        planned = plan_joint(doc, chosen, **options)
        captured.append((doc, planned))
        return planned

    # partition_fn finds plan_joint in its module when it runs: the compiled model's first call.
    remat_torch.plan_joint = recording
    backend = remat_torch.backend(strategy, compiler="aot_eager")

    def restoring(gm, example_inputs):
        try:
            return backend(gm, example_inputs)
        finally:
            remat_torch.plan_joint = plan_joint

    return torch.compile(model, backend=restoring), captured


def training_step(compiled: Callable, model: nn.Module, inputs: tuple) -> Callable[[], tuple]:
    """One step: the loss, its backward, the loss and the gradients it leaves (``.grad`` cleared
    first, so the backward's gradients are taken over, not added into the last step's)."""

    def step() -> tuple:
        model.zero_grad(set_to_none=True)
        loss = compiled(*inputs)
        loss.backward()
        return loss.detach(), [p.grad for p in model.parameters()]

    return step


# --- the models: plain torch.nn, each returning a scalar loss from inside the compiled region (so the
# tangent is the 4-byte ones that loss.backward() makes, not a copy aot_autograd makes contiguous).


class MLP(nn.Module):
    """Linear layers with ReLU, the mean square of the output as the loss."""

    def __init__(self, width: int = 256, depth: int = 4) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.relu(layer(x))
        return x.pow(2).mean()


class Block(nn.Module):
    """A pre-norm transformer block: RMSNorm (written out), multi-head attention with separate q, k
    and v projections and a written-out softmax attention, an MLP with GELU. No op with several
    outputs (layer norm, SDPA, split): the document names such an op by its outputs, which PyTorch
    allocates together."""

    def __init__(self, dim: int = 64, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.Parameter(torch.ones(dim))
        self.norm2 = nn.Parameter(torch.ones(dim))
        self.q, self.k, self.v, self.o = (nn.Linear(dim, dim) for _ in range(4))
        self.up = nn.Linear(dim, 4 * dim)
        self.down = nn.Linear(4 * dim, dim)

    @staticmethod
    def rms(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        h = self.rms(x, self.norm1)

        def heads(y: torch.Tensor) -> torch.Tensor:
            return y.view(b, t, self.heads, d // self.heads).transpose(1, 2)

        q, k, v = heads(self.q(h)), heads(self.k(h)), heads(self.v(h))
        att = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d // self.heads), dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.o(y)
        x = x + self.down(torch.nn.functional.gelu(self.up(self.rms(x, self.norm2))))
        return x.pow(2).mean()


def models() -> list[tuple[str, Callable[[], nn.Module], tuple]]:
    """(name, a fresh model, its inputs) for each measured model."""
    return [
        ("MLP 8×128, batch 1024", lambda: MLP(128, 8), (torch.randn(1024, 128),)),
        ("transformer block, dim 64, 4 heads, 2×128 tokens", lambda: Block(64, 4), (torch.randn(2, 128, 64),)),
    ]


def measure(make: Callable[[], nn.Module], inputs: tuple, strategy: str | None) -> dict:
    """Compiles a fresh ``make()`` (seeded alike each time) under ``strategy`` (None: PyTorch's
    aot_eager), runs one step to compile, then one under the profiler; returns the measured
    activation peak, the loss and gradients, and remat's figures for its joint graph."""
    torch.manual_seed(0)
    model = make()
    torch._dynamo.reset()
    compiled, captured = compile_and_capture(model, strategy)
    step = training_step(compiled, model, inputs)
    step()
    peaks = measured_peaks(step)
    result: dict = {"measured": peaks["values"], "measured_all": peaks["all"]}
    result["loss"], result["grads"] = step()
    if captured:
        if len(captured) != 1:
            raise AssertionError(f"{len(captured)} joint graphs: expected the model in one graph")
        doc, planned = captured[0]
        result.update(
            doc=doc,
            planned=planned,
            planned_peak=planned["planned_peak"],
            resident_bytes=planned["resident_bytes"],
            predicted=predicted_activation_peak(doc, planned),
            tangent_bytes=sum(value_bytes(n) for n in doc["nodes"] if "tangent" in n.get("flags", ())),
        )
    torch._dynamo.reset()
    return result


def bounds(make: Callable[[], nn.Module], inputs: tuple) -> list[int]:
    """Peak bounds worth measuring on a model, on the document ``partition_fn`` plans (common
    subexpressions merged): the planned peak of the least recompute (``peak=1TiB``: the loosest
    useful bound), the least peak remat can plan (its refusal of ``peak=1`` names it), and halfway
    between; in increasing order."""
    import remat_torch

    torch.manual_seed(0)
    model = make()
    torch._dynamo.reset()
    compiled, captured = compile_and_capture(model, "peak=1TiB")
    compiled(*inputs).backward()
    torch._dynamo.reset()
    doc, planned = captured[0]
    loose = planned["planned_peak"]
    least = least_peak(doc)
    return sorted({loose, (loose + least) // 2, least})


def least_peak(doc: dict) -> int:
    """The least planned peak remat's ``peak=`` search reaches on ``doc``. remat's refusal of
    ``peak=1`` states a lower bound (known without searching); a search at that bound either meets
    it or, refusing, names the least peak it reached, which is a plan's peak and so met. Where a
    refusal names none, a bisection between the bound and the no-recompute plan's peak finds it."""
    import re

    import remat_torch

    def attempt(limit: int) -> tuple[int | None, str]:
        try:
            return remat_torch.plan_joint(doc, f"peak={limit}")["planned_peak"], ""
        except remat_torch.RematError as e:
            # "cannot be met" where no plan does (proven), "was not met" where the search found
            # none in its time; either names the lowest peak it found.
            refused = re.search(r"(?:cannot be|was not) met(.*)", str(e), re.S)
            if refused is None:
                raise
            return None, refused.group(1)

    met, why = attempt(1)
    if met is not None:
        return met
    # "no plan peaks below N bytes ...": a bound no plan goes under.
    below = re.search(r"(\d+) bytes", why)
    bound = int(below.group(1)) if below else 1
    met, why = attempt(bound)
    if met is not None:
        return met
    reached = re.search(r"(?:least|lowest|smallest) predicted peak (?:of any plan |found |reached )?is (\d+) bytes", why)
    if reached:
        return int(reached.group(1))
    lo, hi = bound, remat_torch.plan_joint(doc, "peak=1TiB")["planned_peak"]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        met, _ = attempt(mid)
        lo, hi = (mid, hi) if met is None else (lo, met)
    return hi


def table() -> list[dict]:
    """Each model at each of its :func:`bounds`, under remat's ``peak=B``, beside PyTorch's own
    ``aot_eager`` on the same model."""
    rows = []
    for name, make, inputs in models():
        theirs = measure(make, inputs, None)
        for limit in bounds(make, inputs):
            r = measure(make, inputs, f"peak={limit}")
            rows.append(
                {
                    "model": name,
                    "B": limit,
                    "planned_peak": r["planned_peak"],
                    "resident_bytes": r["resident_bytes"],
                    "predicted": r["predicted"],
                    "measured": r["measured"],
                    "measured_all": r["measured_all"],
                    "torch_aot_eager": theirs["measured"],
                    "torch_aot_eager_all": theirs["measured_all"],
                    "recompute_flops": r["planned"]["report"]["recompute_flops"],
                }
            )
    return rows


def _b(n: int) -> str:
    return f"{n:,}".replace(",", " ")


if __name__ == "__main__":
    rows = table()
    if "--json" in sys.argv:
        print(json.dumps(rows, indent=1))
    else:
        print(
            "| model | B | remat planned peak (of which inputs and parameters) | remat predicted | "
            "measured by the profiler (+ scratch) | PyTorch aot_eager measured (+ scratch) | recompute FLOPs |"
        )
        print("|---|---|---|---|---|---|---|")
        for r in rows:
            print(
                f"| {r['model']} | {_b(r['B'])} | {_b(r['planned_peak'])} ({_b(r['resident_bytes'])}) | "
                f"{_b(r['predicted'])} | {_b(r['measured'])} (+{r['measured_all'] - r['measured']}) | "
                f"{_b(r['torch_aot_eager'])} (+{r['torch_aot_eager_all'] - r['torch_aot_eager']}) | "
                f"{_b(r['recompute_flops'])} |"
            )
