"""remat's policy words for PyTorch's checkpointed regions: ``backend(..., policy="save(matmul,
sdpa)")`` gives every op of every region PyTorch marks as checkpointed (``ac_graph_id``: HF's
``gradient_checkpointing_enable()``, ``torch.utils.checkpoint``, a SAC ``context_fn``) the policy
that remat's ``#[checkpoint(policy = ..)]`` gives an op of that kind — the same grammar, read by
the same parser, with the same errors (an unknown kind with "did you mean"). A timm block that
cannot take a ``context_fn`` gets selective checkpointing this way.

An aten op has the kind of remat's op that computes the same thing (``aten.mm`` and ``aten.bmm``
are ``matmul``, every scaled-dot-product attention is ``sdpa``, ``aten._to_copy`` is ``cast``, ...),
or, where remat has an op of its name (``add``, ``gelu``, ``tanh``), that one; other ops take the
policy's default.
"""

from __future__ import annotations

import json
import re
from typing import Any

from . import _remat

# aten op names (the overload packet's) per remat op kind, where the names differ.
_ALIASES = {
    "matmul": (
        "mm", "addmm", "bmm", "baddbmm", "addbmm", "mv", "addmv", "dot", "vdot", "linear", "_grouped_mm",
        "_int_mm", "_weight_int8pack_mm",
    ),
    "scaled_matmul": ("_scaled_mm", "_scaled_grouped_mm"),
    "sdpa": (
        "_scaled_dot_product_flash_attention", "_scaled_dot_product_flash_attention_for_cpu",
        "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
        "_scaled_dot_product_fused_attention_overrideable", "_flash_attention_forward",
        "_efficient_attention_forward", "_cudnn_attention_forward", "scaled_dot_product_attention",
    ),
    "softmax": ("_softmax",),
    "log_softmax": ("_log_softmax",),
    "layer_norm": ("native_layer_norm",),
    "rms_norm": ("_fused_rms_norm",),
    "dropout": ("native_dropout",),
    "cast": ("_to_copy", "convert_element_type"),
    "reshape": ("view", "_unsafe_view", "flatten", "unflatten", "squeeze", "unsqueeze"),
    "transpose": ("permute", "t"),
    "concat": ("cat",),
    "cross_entropy": ("nll_loss_forward",),
    "argsort": ("sort", "argsort"),
    "rem": ("remainder",),
}  # fmt: skip
_KIND_OF = {aten: kind for kind, names in _ALIASES.items() for aten in names}

_POLICIES = ("must_save", "prefer_save", "must_recompute", "prefer_recompute", "must_offload", "prefer_offload")


def parse(text: Any) -> dict:
    """The policy ``text`` as remat reads it: op kinds per policy and the default. Refused with
    remat's message where it does not parse, and where it asks what PyTorch's graphs cannot do:
    offload (PyTorch runs the graphs, with no host copies) or value names (an FX graph has none
    of remat's ``.name(..)``)."""
    if not isinstance(text, str):
        raise ValueError(f"policy={text!r}: expected a policy as #[checkpoint(policy = ..)] writes it, e.g. 'save(matmul)'")
    try:
        lists = json.loads(_remat.policy_lists(text))
    except ValueError as e:
        raise ValueError(str(e)) from None
    offloads = lists["must_offload"] + lists["prefer_offload"]
    if offloads or lists["default"].endswith("offload") or lists["offload_names"]:
        raise ValueError(
            f"policy {text!r}: offloading needs remat's executor to copy values to the host and back; "
            "under torch.compile PyTorch runs the graphs, so save or recompute instead"
        )
    if lists["save_names"]:
        raise ValueError(
            f"policy {text!r}: save_names reads remat's value names (.name(..)), which PyTorch's graphs do not "
            "carry; name op kinds instead (save(matmul, sdpa))"
        )
    if lists["budget"] is not None:
        raise ValueError(
            f"policy {text!r}: a region budget is not taken here; bound the whole graph with the strategy "
            "(budget=<bytes or fraction>)"
        )
    lists["text"] = text
    return lists


def kind_of(op: str) -> str | None:
    """remat's op kind of a document op (``aten.mm.default`` → ``matmul``; ``aten.var_mean.correction[1]``
    → ``var_mean``'s), ``None`` for an op that is not aten's."""
    match = re.match(r"^aten\.([A-Za-z0-9_]+)\.", op)
    if match is None:
        return None
    name = match.group(1)
    return _KIND_OF.get(name, name)


def _routing_under(node: dict) -> None:
    """The routing rule (docs/policies.md) under the node's new policy: ``must_recompute`` lifts the
    exporter's ``not_recomputable`` from a routing value (a random op keeps its own); another
    policy puts it back on a selecting op a PyTorch ``MUST_RECOMPUTE`` tag had left recomputable.
    (A comparison feeding an index is recognised from the FX graph only, so the words cannot put
    its flag back; they can lift it.)"""
    flags = node.setdefault("flags", [])
    if node["policy"] == "must_recompute":
        if "random" not in flags and "not_recomputable" in flags:
            flags.remove("not_recomputable")
    elif _selects(node["op"]) and "not_recomputable" not in flags and "view" not in flags:
        flags.append("not_recomputable")
    if not flags:
        del node["flags"]


def _selects(op: str) -> bool:
    """Whether a document op is one of the exporter's selecting ops (top-k, sort, argmax, ...)."""
    from ._export import _ROUTING

    match = re.match(r"^aten\.([A-Za-z0-9_]+)\.([A-Za-z0-9_]+)", op)
    if match is None:
        return False
    name, overload = match.groups()
    return name in {p.__name__ for p in _ROUTING} or (name in ("max", "min") and overload == "dim")


def apply(doc: dict, lists: dict) -> dict:
    """``doc`` with every forward node of a checkpointed region (one with a ``region``) under the
    policy ``lists`` gives its kind — PyTorch's tag replaced. A kind the policy names that no
    such node has is an error listing the kinds the regions hold."""
    listed = {kind: policy for policy in _POLICIES for kind in lists[policy]}
    held: set[str] = set()
    for node in doc["nodes"]:
        if node.get("phase") != "forward" or "region" not in node:
            continue
        kind = kind_of(node["op"])
        if kind in lists["kinds"]:
            held.add(kind)
        node["policy"] = listed.get(kind, lists["default"])
        _routing_under(node)
    missing = sorted(set(listed) - held)
    if missing:
        holds = ", ".join(sorted(held)) or "no op of a kind remat names"
        regions = "no checkpointed region" if not any("region" in n for n in doc["nodes"]) else f"they hold {holds}"
        raise ValueError(
            f"policy {lists['text']!r}: {', '.join(missing)} matches no op in this graph's checkpointed regions "
            f"({regions})"
        )
    return doc
