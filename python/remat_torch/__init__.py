"""remat's partitioner for torch.compile.

    import remat_torch
    compiled = torch.compile(model, backend=remat_torch.backend(strategy="mincut"))

remat decides which forward values the backward keeps, honouring PyTorch's selective-checkpoint
tags (``ac_graph_id`` and ``recompute`` on each node); PyTorch's own graph extraction then builds
the forward and backward graphs from that decision. The partition runs in process, in Rust.
"""

from __future__ import annotations

import functools
import json
import numbers
import os
from typing import Any, Callable

import torch
import torch.fx as fx

from . import _policy, _remat
from ._export import ExportError, joint_document
from ._export import merge_common_subexpressions as _merge_common_subexpressions
from ._export import running_statistics_read

__all__ = [
    "backend",
    "partition_fn",
    "partition_joint",
    "plan_joint",
    "export_joint",
    "joint_document",
    "with_policy",
    "explain",
    "ExportError",
    "RematError",
]
__version__ = _remat.__version__


class RematError(ValueError):
    """remat refused the joint graph (the message names the node) or the strategy."""


def partition_joint(
    doc: dict, strategy: str = "mincut", *, text: bool = False, search_seconds: float | None = None
) -> dict | str:
    """remat's report on a ``remat.joint`` document: ``saved``, ``held``, ``recomputed``, one
    decision per value with its reason, totals; with ``text``, the table ``remat partition``
    prints. ``search_seconds``: how long a ``peak=`` search may look (default 20, from 1 to a
    week; ``remat partition --search-seconds``): more narrows the gap of an answer near the
    least peak; refused with another strategy."""
    if not isinstance(doc, dict):
        raise ValueError(f"doc: expected a remat.joint document (a dict), got {type(doc).__name__}")
    strategy = _strategy(strategy, None)
    if not isinstance(text, bool):
        raise ValueError(f"text={text!r}: expected True or False")
    seconds = _seconds(search_seconds)
    try:
        report = _remat.partition(json.dumps(doc), strategy, text, seconds)
    except ValueError as e:
        raise RematError(str(e)) from None
    return report if text else json.loads(report)


def plan_joint(doc: dict, strategy: str = "mincut", *, search_seconds: float | None = None) -> dict:
    """remat's plan of a ``remat.joint`` document: ``report`` (what :func:`partition_joint`
    returns), ``forward`` and ``backward`` (each program's steps in order, ``[kind, id]`` with
    ``kind`` one of ``compute``, ``recompute``, ``free``, ``alias``, ``offload``, ``fetch`` and
    ``id`` the node's document id), ``planned_peak`` and ``resident_bytes`` (the inputs and
    parameters, which remat counts live from the start; a tangent is computed at the backward's
    start). One search gives both the partition and its plan (``peak=`` searches over plans);
    ``search_seconds`` as in :func:`partition_joint`."""
    if not isinstance(doc, dict):
        raise ValueError(f"doc: expected a remat.joint document (a dict), got {type(doc).__name__}")
    strategy = _strategy(strategy, None)
    seconds = _seconds(search_seconds)
    try:
        return json.loads(_remat.plan(json.dumps(doc), strategy, seconds))
    except ValueError as e:
        raise RematError(str(e)) from None


def _torch_budget_strategy(doc: dict) -> str | None:
    """PyTorch's ``activation_memory_budget`` (0 = recompute everything, 1 = min-cut's memory)
    as remat bytes between the fewest remat can keep and what its min-cut keeps; ``None`` at the
    default 1.0."""
    fraction = _torch_fraction()
    if fraction >= 1.0:
        return None
    fewest = partition_joint(doc, "budget=0.0")["saved_bytes"]
    mincut = partition_joint(doc, "mincut")["saved_bytes"]
    return f"budget={int(fewest + fraction * max(mincut - fewest, 0))}"


def _torch_fraction() -> float:
    """PyTorch's ``activation_memory_budget``, checked as PyTorch's partitioner checks it (a
    number in [0, 1]) and for what it lets through (NaN, a bool)."""
    from torch._functorch import config

    value = getattr(config, "activation_memory_budget", 1.0)
    name = "torch._functorch.config.activation_memory_budget"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} = {value!r} (strategy 'torch'): expected a number in [0, 1]")
    if not 0.0 <= float(value) <= 1.0:
        # NaN fails this too.
        raise ValueError(f"{name} = {value!r} (strategy 'torch'): expected a number in [0, 1]")
    return float(value)


_STRATEGIES = (
    "'mincut', 'respect', 'budget=<bytes or fraction>', 'peak=<bytes>' (with compiler='aot_eager') or 'torch'"
)


def _strategy(strategy: Any, budget: Any) -> str:
    """The strategy string remat parses, from ``strategy`` or ``budget``; each checked and named
    when wrong (remat's parser checks the rest of the text)."""
    if strategy is not None and not isinstance(strategy, str):
        raise ValueError(f"strategy={strategy!r}: expected a string, {_STRATEGIES}")
    if strategy is not None and not strategy.strip():
        raise ValueError(f"strategy={strategy!r}: empty; expected {_STRATEGIES}")
    if budget is not None:
        if strategy not in (None, "budget"):
            raise ValueError(f"give a strategy or a budget, not both ({strategy!r}, budget={budget!r})")
        return _budget_strategy(budget)
    return strategy or "mincut"


def _seconds(search_seconds: Any) -> float | None:
    """``search_seconds`` as the float remat reads (which checks its range and strategy)."""
    if search_seconds is None:
        return None
    if isinstance(search_seconds, bool) or not isinstance(search_seconds, numbers.Real):
        raise ValueError(f"search_seconds={search_seconds!r}: expected a number of seconds (20, 2.5)")
    return float(search_seconds)


def _checked_seconds(search_seconds: Any, strategy: str) -> float | None:
    """``search_seconds`` for ``strategy``, refused now (not at the first call of the compiled
    model) where remat would refuse it."""
    seconds = _seconds(search_seconds)
    if seconds is None:
        return None
    if strategy == "torch":
        raise ValueError(
            f"search_seconds: {seconds:g} s: only `peak=` and `peak+offload=` search by time; `torch` takes none"
        )
    try:
        _remat.partition(json.dumps(_EMPTY), strategy, False, seconds)
    except ValueError as e:
        raise ValueError(str(e)) from None
    return seconds


def _budget_strategy(budget: Any) -> str:
    """``budget=``'s value as remat's strategy text: an int is bytes, a float a fraction."""
    what = f"budget={budget!r}"
    if isinstance(budget, bool) or not isinstance(budget, numbers.Real):
        raise ValueError(
            f"{what}: expected a number, a float fraction in [0, 1] (0.5) or int bytes (4096); "
            "a text such as '64MiB' goes in strategy='budget=64MiB'"
        )
    if isinstance(budget, numbers.Integral):
        if budget < 0:
            raise ValueError(f"{what}: bytes cannot be negative")
        return f"budget={int(budget)}"
    fraction = float(budget)
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"{what}: a fraction must be in [0, 1] (bytes are an int: budget=4096)")
    text = repr(fraction)
    # remat reads a fraction by its decimal point: 1e-05 must be written out.
    return f"budget={text if '.' in text and 'e' not in text else format(fraction, '.20f')}"


def _compiled_strategy(strategy: Any, budget: Any, compiler: str = "aot_eager") -> str:
    """The strategy for a graph PyTorch runs, refused now when remat cannot honour it there."""
    chosen = _strategy(strategy, budget)
    if chosen.startswith("peak=") and compiler != "aot_eager":
        # remat's peak bound holds for the programs it plans: each value computed, recomputed and
        # freed at the step remat chose. aot_eager runs the graphs node by node in the order
        # partition_fn gives them; Inductor reorders and fuses, and allocates its own buffers.
        raise ValueError(
            f"strategy {chosen!r}: a peak bound needs the graphs run in the order remat planned; "
            f"{compiler} reorders and fuses them, so use compiler='aot_eager', or bound the saved "
            "bytes instead: budget=<bytes or fraction>"
        )
    if chosen.startswith(("budget+offload=", "peak+offload=")):
        # Offloading copies values to the host and back around the backward: remat's executor
        # does that, PyTorch's graph extraction has nowhere to put such a value.
        raise ValueError(
            f"strategy {chosen!r}: offloading needs remat's executor to copy values to the host and "
            "back; under torch.compile, PyTorch runs the graphs, so bound the saved bytes instead "
            "(budget=<bytes or fraction>) or the peak without offload (peak=<bytes>, aot_eager)"
        )
    return _parsed(chosen)


def _parsed(strategy: str) -> str:
    """``strategy``, once remat's parser (or, for ``"torch"``, PyTorch's knob) accepts it."""
    if strategy == "torch":
        _torch_fraction()
        return strategy
    try:
        _remat.partition(json.dumps(_EMPTY), strategy)
    except ValueError as e:
        raise ValueError(str(e)) from None
    return strategy


def partition_fn(
    joint_module: fx.GraphModule,
    _joint_inputs: Any,
    *,
    num_fwd_outputs: int,
    strategy: str = "mincut",
    policy: str | None = None,
    search_seconds: float | None = None,
    **_kwargs: Any,
) -> tuple[fx.GraphModule, fx.GraphModule]:
    """A ``partition_fn`` for ``aot_autograd``: remat chooses the saved values, PyTorch's
    ``_extract_fwd_bwd_modules`` builds the two graphs (recomputing in the backward whatever the
    forward does not keep). ``strategy="torch"`` reads PyTorch's
    ``torch._functorch.config.activation_memory_budget`` with its own meaning (1.0: min-cut;
    0.0: keep the fewest bytes; between: bytes in proportion). Under ``"peak=B"`` the two graphs'
    nodes are put in the order of remat's plan (:func:`plan_joint`), so that a compiler running
    them node by node, freeing each value after its last use (``aot_eager``), runs remat's plan.
    ``policy`` (remat's words, ``"save(matmul, sdpa)"``) replaces PyTorch's tag on every op of
    every checkpointed region (:func:`with_policy`). ``search_seconds``: how long a ``peak=``
    search may look (:func:`partition_joint`)."""
    from torch._functorch.partitioners import _extract_fwd_bwd_modules

    strategy = _compiled_strategy(strategy, None)
    search_seconds = _checked_seconds(search_seconds, strategy)
    lists = None if policy is None else _policy.parse(policy)
    _merge_common_subexpressions(joint_module, num_fwd_outputs)
    doc = joint_document(joint_module, num_fwd_outputs, static_inputs=_kwargs.get("static_lifetime_input_indices"))
    if lists is not None:
        _policy.apply(doc, lists)
    if strategy == "torch":
        strategy = _torch_budget_strategy(doc) or "mincut"
    planned = plan_joint(doc, strategy, search_seconds=search_seconds) if strategy.startswith("peak=") else None
    report = planned["report"] if planned else partition_joint(doc, strategy)
    # Nothing asks remat to offload here (PyTorch's tags have no offload policy, and
    # budget+offload is refused): whatever remat would offload is kept on the device.
    keep = set(report["saved"]) | set(report["held"]) | set(report.get("offloaded", ()))
    saved, saved_sym = [], []
    for node in joint_module.graph.nodes:
        if node.name not in keep or node.op == "output":
            continue
        if isinstance(node.meta.get("val"), torch.Tensor) or node.op == "placeholder":
            saved.append(node)
        else:
            saved_sym.append(node)
    saved += [n for n in running_statistics_read(joint_module.graph, keep) if n not in saved]
    fw, bw = _extract_fwd_bwd_modules(joint_module, saved, saved_sym, num_fwd_outputs=num_fwd_outputs)
    if planned:
        # PyTorch's extraction keeps the joint graph's order: the backward recomputes every
        # value it needs up front, all held at once. remat's peak is that of its own order.
        _order_as_planned(fw, planned["forward"])
        _order_as_planned(bw, planned["backward"])
    return _replay_random_ops(joint_module, fw, bw, len(saved_sym))


def _order_as_planned(gm: fx.GraphModule, program: list) -> None:
    """Moves ``gm``'s nodes into the order of ``program`` (one of remat's plan's programs, whose
    compute steps name FX nodes) and regenerates its code, whose deletions then free each value
    after its last use in that order, as the plan frees it. A node the plan does not name (one
    PyTorch's extraction adds) goes just before its first user, else last; an order that respects
    every node's inputs is kept whatever the plan says (the plan is itself topological, so on the
    nodes it names the two agree)."""
    import heapq
    import math

    position: dict[str, int] = {}
    for k, (kind, node_id) in enumerate(program):
        if kind in ("compute", "recompute", "alias", "fetch") and isinstance(node_id, str):
            position.setdefault(node_id, k)
    nodes = [n for n in gm.graph.nodes if n.op not in ("placeholder", "output")]
    key: dict[fx.Node, float] = {}
    for node in reversed(nodes):
        if node.name in position:
            key[node] = position[node.name]
        else:
            after = [key[u] for u in node.users if u in key]
            key[node] = min(after) if after else math.inf
    index = {n: i for i, n in enumerate(nodes)}
    waiting = {n: sum(1 for i in n.all_input_nodes if i in index) for n in nodes}
    ready = [(key[n], index[n], n) for n in nodes if waiting[n] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        _, _, node = heapq.heappop(ready)
        order.append(node)
        for user in node.users:
            if user in waiting:
                waiting[user] -= 1
                if waiting[user] == 0:
                    heapq.heappush(ready, (key[user], index[user], user))
    if len(order) != len(nodes):
        raise RematError(f"the graph of {len(nodes)} nodes has a cycle: {len(order)} could be ordered")
    output = next(n for n in gm.graph.nodes if n.op == "output")
    for node in order:
        output.prepend(node)
    gm.graph.lint()
    gm.recompile()


def _replay_random_ops(
    joint: fx.GraphModule, fw: fx.GraphModule, bw: fx.GraphModule, num_sym: int
) -> tuple[fx.GraphModule, fx.GraphModule]:
    """A random op remat recomputes runs in both graphs; the backward's run must draw what the
    forward's drew. PyTorch's own ``functionalize_rng_ops`` does that (the forward saves the
    generator state before the op, the backward runs it from that state) for the ops it finds
    tagged for recomputation, so those remat recomputes are tagged so while it runs."""
    from torch._functorch.partitioners import functionalize_rng_ops, is_rng_op, must_recompute
    from torch.utils.checkpoint import CheckpointPolicy

    in_fw = {n.name for n in fw.graph.nodes if n.op == "call_function"}
    in_bw = {n.name for n in bw.graph.nodes if n.op == "call_function"}
    replayed = [
        n for n in joint.graph.nodes if n.op == "call_function" and n.name in in_fw and n.name in in_bw and is_rng_op(n)
    ]
    if not replayed:
        return fw, bw
    retagged = {n: n.meta.get("recompute") for n in replayed if not must_recompute(n)}
    for node in retagged:
        node.meta["recompute"] = CheckpointPolicy.PREFER_RECOMPUTE
    try:
        return functionalize_rng_ops(joint, fw, bw, num_sym)
    finally:
        for node, policy in retagged.items():
            if policy is None:
                node.meta.pop("recompute", None)
            else:
                node.meta["recompute"] = policy


_COMPILERS = ("inductor", "aot_eager")


def backend(
    strategy: str | None = None,
    *,
    budget: float | int | None = None,
    compiler: str = "inductor",
    policy: str | None = None,
    search_seconds: float | None = None,
) -> Callable:
    """A ``torch.compile`` backend that partitions with remat: ``strategy`` is ``"mincut"``
    (the default), ``"respect"``, ``"budget=B"`` or ``"torch"`` (PyTorch's
    ``activation_memory_budget``, see :func:`partition_fn`); ``budget`` (a fraction with a
    decimal point, else bytes) is ``"budget=B"``. ``compiler`` is what runs the two graphs:
    ``"inductor"`` (``torch.compile``'s default: its joint-graph passes, then remat's partition
    in place of its min-cut, then its code generation) or ``"aot_eager"`` (the graphs run op by
    op, as ``backend="aot_eager"`` runs them: bit for bit what PyTorch's own ``aot_eager``
    computes, which on some models differs from eager by rounding). ``"peak=B"`` (bytes,
    ``"64MiB"`` and the like) needs ``"aot_eager"``: remat plans the joint graph for a peak of at
    most B, in its own count (every value its bytes, inputs and parameters included), and the
    graphs run in the plan's order (see :func:`partition_fn`); Inductor reorders and fuses.
    ``policy`` is remat's words for the ops of every region PyTorch marks as checkpointed
    (``"save(matmul, sdpa)"``, the grammar of ``#[checkpoint(policy = ..)]``): selective
    checkpointing for a model that cannot take a ``context_fn`` (see :func:`with_policy`).
    ``search_seconds``: how long the ``peak=`` search may look (default 20 s; see
    :func:`partition_joint`)."""
    # Every argument is checked now, not at the first call of the compiled model.
    if not isinstance(compiler, str) or compiler not in _COMPILERS:
        raise ValueError(f"compiler {compiler!r}: expected one of {', '.join(map(repr, _COMPILERS))}")
    chosen = _compiled_strategy(strategy, budget, compiler)
    search_seconds = _checked_seconds(search_seconds, chosen)
    if policy is not None:
        _policy.parse(policy)
    if compiler == "inductor":
        return _inductor_backend(chosen, policy)

    from torch._dynamo.backends.common import aot_autograd
    from torch._dynamo.backends.debugging import boxed_nop

    # PyTorch's own aot_eager compiler: the graph's code takes its inputs as one list and empties
    # it, so a value is freed at its last use in the graph. (Calling `gm.forward(*args)` instead
    # would hold every input, the saved values included, in the call's tuple to the end.)
    # Input mutations (BatchNorm's running statistics) are kept in the forward graph, as
    # PyTorch's aot_eager keeps them: applied there, before the forward's values are saved for
    # the backward, a backward that recomputes batch norm from the running statistics (its
    # outputs but the updates do not depend on their values) reads them without tripping
    # autograd's version check, which an update applied after the forward would.
    return aot_autograd(
        fw_compiler=boxed_nop,
        bw_compiler=boxed_nop,
        partition_fn=functools.partial(partition_fn, strategy=chosen, policy=policy, search_seconds=search_seconds),
        keep_inference_input_mutations=True,
    )


def with_policy(doc: dict, policy: str) -> dict:
    """``doc`` (a ``remat.joint`` document) with every forward op of every checkpointed region
    (a node with a ``region``) under the policy remat's words give its kind: ``"save(matmul)"``
    keeps each matrix product as ``#[checkpoint(policy = save(matmul))]`` does and gives every
    other op the policy's default. Refused with remat's message where the policy does not parse
    (an unknown kind with "did you mean"), where it offloads or names values, and where a kind it
    names matches no op of the regions (the message lists the kinds they hold)."""
    if not isinstance(doc, dict):
        raise ValueError(f"doc: expected a remat.joint document (a dict), got {type(doc).__name__}")
    return _policy.apply(doc, _policy.parse(policy))


def _inductor_backend(strategy: str, policy: str | None = None) -> Callable:
    """Inductor with remat's partition: Inductor's ``custom_partitioner_fn`` hook, set while
    the model compiles, so Inductor's decompositions and joint-graph passes run first and its
    code generation after."""
    from torch._inductor import config as inductor_config
    from torch._inductor.compile_fx import compile_fx

    partitioner = _partitioner(strategy, policy)

    def compile_with_inductor(gm: fx.GraphModule, example_inputs: Any) -> Callable:
        with inductor_config.patch(custom_partitioner_fn=partitioner):
            return compile_fx(gm, example_inputs)

    return compile_with_inductor


def _partitioner(strategy: str, policy: str | None = None) -> Any:
    """remat's partition as Inductor's ``CustomPartitionerFn``. Inductor pickles its config,
    this object included, into its cache keys, so the class lives at module level (a local
    class cannot be pickled, and Inductor then bypasses its caches)."""
    from torch._inductor.custom_graph_pass import CustomPartitionerFn, get_hash_for_files

    global RematPartitioner
    if RematPartitioner is None:

        class RematPartitioner(CustomPartitionerFn):  # type: ignore[no-redef]
            """remat's partition with ``strategy``, for Inductor."""

            def __init__(self, strategy: str, policy: str | None) -> None:
                self.strategy = strategy
                self.policy = policy

            def __call__(
                self, gm: fx.GraphModule, joint_inputs: Any, **kwargs: Any
            ) -> tuple[fx.GraphModule, fx.GraphModule]:
                kwargs.pop("compiler", None)
                return partition_fn(gm, joint_inputs, strategy=self.strategy, policy=self.policy, **kwargs)

            def uuid(self) -> Any:
                # Inductor's caches key compiled graphs on this: the partitioner's code, the
                # extension's version, the strategy and the policy decide the graphs.
                here = os.path.dirname(__file__)
                files = (__file__, os.path.join(here, "_export.py"), os.path.join(here, "_policy.py"))
                return (get_hash_for_files(files), _remat.__version__, self.strategy, self.policy)

        # Pickled by this name: make it the module's attribute it is.
        RematPartitioner.__module__ = __name__
        RematPartitioner.__qualname__ = "RematPartitioner"
    return RematPartitioner(strategy, policy)


# The class of `_partitioner`'s objects, made on first use (it derives from an Inductor class,
# imported only when Inductor is used).
RematPartitioner: Any = None


def _capture(model: Callable, inputs: tuple, on_joint: Callable[[fx.GraphModule, int], None]) -> None:
    """Traces ``model(*inputs)`` (forward and backward) once through ``aot_autograd``, handing
    the joint graph to ``on_joint`` before partitioning it with min-cut."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    def part(joint_module, joint_inputs, *, num_fwd_outputs, **kwargs):
        on_joint(joint_module, num_fwd_outputs)
        return partition_fn(joint_module, joint_inputs, num_fwd_outputs=num_fwd_outputs)

    def compiler(gm, _inputs):
        return make_boxed_func(gm.forward)

    torch._dynamo.reset()
    traced = torch.compile(model, backend=aot_autograd(fw_compiler=compiler, bw_compiler=compiler, partition_fn=part))
    out = traced(*inputs)
    del out
    torch._dynamo.reset()


def export_joint(model: Callable, *inputs: Any, path: str | None = None) -> list[dict]:
    """The ``remat.joint`` documents of ``model(*inputs)``'s joint graphs (one per graph
    ``torch.compile`` makes), written to ``path`` as JSON when given (the first graph; more are
    ``path`` with ``.1``, ``.2``, ... before the extension)."""
    _check_model(model)
    if path is not None and not isinstance(path, (str, os.PathLike)):
        raise ValueError(f"path={path!r}: expected a file name (str or os.PathLike)")
    docs: list[dict] = []
    _capture(model, inputs, lambda gm, n: docs.append(joint_document(gm, n)))
    if path is not None:
        for k, doc in enumerate(docs):
            target = path if k == 0 else _numbered(path, k)
            with open(target, "w") as f:
                json.dump(doc, f, indent=1)
    return docs


def _check_model(model: Any) -> None:
    if not callable(model):
        raise ValueError(f"model: expected a module or a function to trace, got {type(model).__name__}")


def _numbered(path: str, k: int) -> str:
    path = os.fspath(path)
    stem, dot, ext = path.rpartition(".")
    return f"{stem}.{k}.{ext}" if dot else f"{path}.{k}"


def explain(model: Callable, *inputs: Any, strategy: str = "mincut", file: Any = None) -> str:
    """Prints (to ``file``, standard output by default) and returns remat's report for each joint
    graph of ``model(*inputs)``: what the forward keeps, why, and what is recomputed — on the graph
    ``partition_fn`` partitions (common subexpressions merged, as PyTorch's partitioner does)."""
    import sys

    _check_model(model)
    strategy = _parsed(_strategy(strategy, None))
    if file is not None and not callable(getattr(file, "write", None)):
        raise ValueError(f"file={file!r}: expected a text stream (an object with write), or None")
    texts: list[str] = []

    def explain_one(gm: fx.GraphModule, num_fwd_outputs: int) -> None:
        # The graph partition_fn partitions: common subexpressions merged first.
        _merge_common_subexpressions(gm, num_fwd_outputs)
        doc = joint_document(gm, num_fwd_outputs)
        chosen = (_torch_budget_strategy(doc) or "mincut") if strategy == "torch" else strategy
        texts.append(partition_joint(doc, chosen, text=True))

    _capture(model, inputs, explain_one)
    text = "\n".join(texts)
    print(text, file=file or sys.stdout)
    return text


# The document a strategy's text is checked on (`_parsed`): one input of 0 bytes, so that every
# peak= bound is met on it and a refusal can only be of the text.
_EMPTY = {
    "format": "remat.joint",
    "version": 1,
    "nodes": [{"id": "x", "op": "input", "phase": "forward", "bytes": 0}],
    "forward_outputs": ["x"],
}
