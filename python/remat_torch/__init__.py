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
from typing import Any, Callable

import torch
import torch.fx as fx

from . import _remat
from ._export import ExportError, export_joint

__all__ = ["backend", "partition_fn", "partition_joint", "export_joint", "ExportError", "RematError"]
__version__ = _remat.__version__


class RematError(ValueError):
    """remat refused the joint graph (the message names the node) or the strategy."""


def partition_joint(doc: dict, strategy: str = "mincut") -> dict:
    """remat's report on a ``remat.joint`` document: ``saved``, ``held``, ``recomputed``, one
    decision per value with its reason, totals."""
    try:
        return json.loads(_remat.partition(json.dumps(doc), strategy))
    except ValueError as e:
        raise RematError(str(e)) from None


def _strategy(strategy: str | None, budget: float | int | None) -> str:
    if budget is not None:
        if strategy not in (None, "budget"):
            raise ValueError(f"give a strategy or a budget, not both ({strategy!r}, budget={budget!r})")
        return f"budget={float(budget)!r}" if isinstance(budget, float) else f"budget={int(budget)}"
    return strategy or "mincut"


def partition_fn(
    joint_module: fx.GraphModule,
    _joint_inputs: Any,
    *,
    num_fwd_outputs: int,
    strategy: str = "mincut",
    **_kwargs: Any,
) -> tuple[fx.GraphModule, fx.GraphModule]:
    """A ``partition_fn`` for ``aot_autograd``: remat chooses the saved values, PyTorch's
    ``_extract_fwd_bwd_modules`` builds the two graphs (recomputing in the backward whatever the
    forward does not keep)."""
    from torch._functorch.partitioners import _extract_fwd_bwd_modules

    doc = export_joint(joint_module, num_fwd_outputs)
    report = partition_joint(doc, strategy)
    keep = set(report["saved"]) | set(report["held"])
    saved, saved_sym = [], []
    for node in joint_module.graph.nodes:
        if node.name not in keep or node.op == "output":
            continue
        if isinstance(node.meta.get("val"), torch.Tensor) or node.op == "placeholder":
            saved.append(node)
        else:
            saved_sym.append(node)
    return _extract_fwd_bwd_modules(joint_module, saved, saved_sym, num_fwd_outputs=num_fwd_outputs)


def backend(strategy: str | None = None, *, budget: float | int | None = None) -> Callable:
    """A ``torch.compile`` backend that partitions with remat: ``strategy`` is ``"mincut"``
    (the default), ``"respect"`` or ``"budget=B"``; ``budget`` (a fraction with a decimal point,
    else bytes) is ``"budget=B"``. The graphs run as ``aot_eager`` runs them."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    chosen = _strategy(strategy, budget)
    # Check the strategy now, not at the first call of the compiled model.
    _remat.partition(json.dumps(_EMPTY), chosen)

    def compiler(gm: fx.GraphModule, _example_inputs: Any) -> Callable:
        return make_boxed_func(gm.forward)

    return aot_autograd(
        fw_compiler=compiler,
        bw_compiler=compiler,
        partition_fn=functools.partial(partition_fn, strategy=chosen),
    )


_EMPTY = {
    "format": "remat.joint",
    "version": 1,
    "nodes": [{"id": "x", "op": "input", "phase": "forward", "bytes": 4}],
    "forward_outputs": ["x"],
}
