"""PyTorch's joint forward/backward FX graph as a ``remat.joint`` document.

The conventions are those of the fixtures (``tests/fixtures/torch/README.md``): ids are FX node
names in FX order; placeholders are ``input``, ``param`` or ``tangent``; a node is ``backward``
iff it depends on a tangent; every tensor has ``shape`` and ``dtype``; ``flops`` is PyTorch's
flop counter's formula where it has one (2mnk for matrix products, attention, convolutions), else
the largest element count among inputs and output, 0 for views (``_unsafe_view`` is one);
``flags`` are ``view``, ``compute_intensive`` (matrix products, convolutions and attention in
every variant — any op PyTorch's flop counter has a formula for — grouped matrix products, and a
library's custom op, whose cost remat cannot know: the min-cut recomputes none of them without a
tag), ``random``, ``not_recomputable``; a forward random op on the CPU or a CUDA device carries
``rng_state_bytes`` (the generator state PyTorch saves to replay it; elsewhere it is
``not_recomputable``); a forward routing value (a top-k, sort, argmax, ... : its outputs select
data, and a recompute may select other data; an integer or bool value taken from floats — a
comparison, a cast — that reaches an index through integer and bool values) is
``not_recomputable`` unless its policy is ``MUST_RECOMPUTE`` (a view is not flagged, its base
is); grouped matrix products have 2 × their multiply-adds as FLOPs; ``region`` is PyTorch's
``ac_graph_id`` renumbered from 0 and ``policy`` the node's ``CheckpointPolicy``; a multi-output
op appears as its ``getitem`` users, each with the producer's op and the output's index
(``aten.var_mean.correction[1]``), inputs and FLOPs; a primal the forward mutates (BatchNorm's
running statistics, a ``copy_`` into an input) has the flag ``mutated``.
"""

from __future__ import annotations

import math
import operator
from typing import Any, Iterable

import torch
import torch.fx as fx

_DTYPES = {
    torch.float64: "f64",
    torch.float32: "f32",
    torch.float16: "f16",
    torch.bfloat16: "bf16",
    torch.float8_e4m3fn: "f8e4m3",
    torch.float8_e5m2: "f8e5m2",
    torch.int64: "i64",
    torch.int32: "i32",
    torch.int16: "i16",
    torch.int8: "i8",
    torch.uint8: "u8",
    torch.bool: "bool",
}

_aten = torch.ops.aten


def _ops(*names: str) -> set:
    """The aten op packets of ``names`` this PyTorch has."""
    return {op for op in (getattr(_aten, n, None) for n in names) if op is not None}


# Matrix products, convolutions and attention in every variant: never recomputed by the min-cut
# without a tag that asks (Inductor's rule). Any op PyTorch's flop counter has a formula for is
# one too (``_compute_intensive``).
_COMPUTE_INTENSIVE = _ops(
    "mm", "addmm", "bmm", "baddbmm", "addbmm", "mv", "addmv", "dot", "vdot", "matmul",
    "_scaled_mm", "_int_mm", "_weight_int8pack_mm", "_grouped_mm", "_scaled_grouped_mm",
    "convolution", "_convolution", "convolution_overrideable", "cudnn_convolution", "mkldnn_convolution",
    "_slow_conv2d_forward",
    "_scaled_dot_product_flash_attention", "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
    "_scaled_dot_product_fused_attention_overrideable", "_flash_attention_forward",
    "_efficient_attention_forward", "_cudnn_attention_forward",
)  # fmt: skip

# Grouped matrix products (an MoE's experts) without a flop-counter formula in some PyTorch
# versions, and the custom ops libraries run in their place (transformers'
# ``grouped_mm_fallback``): FLOPs by ``_grouped_mm_flops``.
_GROUPED_MM = _ops("_grouped_mm", "_scaled_grouped_mm")

# Ops whose outputs select data — which experts a token goes to, an order, a position: recomputed,
# a tie can choose differently (NeMo-Automodel #2635), so they are never recomputed unless a tag
# asks for it (MUST_RECOMPUTE); torchtitan always saves routing too.
_ROUTING = _ops(
    "topk", "sort", "argsort", "argmax", "argmin", "kthvalue", "mode", "median", "nanmedian", "nonzero",
    "_unique2", "unique_dim", "unique_consecutive", "bincount", "histc", "searchsorted", "bucketize",
)  # fmt: skip
# The argument of each op that indexes another operand (a tensor, or a list of them for
# ``index``/``index_put``): what a comparison feeding it selects.
_INDEX_ARGS = {
    op: k
    for names, k in (
        (("index", "index_put", "index_put_", "_index_put_impl_"), 1),
        (("index_select", "gather", "scatter", "scatter_add", "scatter_reduce", "index_add", "index_copy"), 2),
        (("index_fill",), 2),
        (("embedding", "nll_loss_forward", "nll_loss2d_forward", "take", "take_along_dim"), 1),
        (("masked_select", "masked_scatter"), 1),
        (("one_hot", "bincount"), 0),
    )
    for op in _ops(*names)
}
# `max.dim` / `min.dim` return (values, indices): routing only through their `dim` overloads.
_ROUTING_OVERLOADS = {o for o in (getattr(_aten.max, "dim", None), getattr(_aten.min, "dim", None)) if o is not None}

# Namespaces of PyTorch's own ops; any other is a library's custom op.
_TORCH_NAMESPACES = {"aten", "prims", "_c10d_functional", "c10d", "c10d_functional", "quantized", "higher_order"}


_POLICIES = {
    "MUST_SAVE": "must_save",
    "PREFER_SAVE": "prefer_save",
    "MUST_RECOMPUTE": "must_recompute",
    "PREFER_RECOMPUTE": "prefer_recompute",
}


class ExportError(ValueError):
    """A joint graph remat cannot describe; the message names the FX node."""


def _packet(target: Any) -> Any:
    return getattr(target, "overloadpacket", None)


def _is_view(target: Any) -> bool:
    # `_unsafe_view` shares its input's storage although its schema does not say so (PyTorch
    # uses it for reshapes whose input nothing else reads).
    return bool(getattr(target, "is_view", False)) or _packet(target) is _aten._unsafe_view


def _tensor(val: Any) -> torch.Tensor | None:
    return val if isinstance(val, torch.Tensor) else None


def _is_rng_op(node: fx.Node) -> bool:
    """Whether the op draws random numbers: PyTorch's own rule where it has one (seeded ops,
    attention only when its dropout probability is not zero)."""
    try:
        from torch._functorch.partitioners import is_rng_op
    except ImportError:
        return torch.Tag.nondeterministic_seeded in getattr(node.target, "tags", ())
    return bool(is_rng_op(node))


def _rng_state_bytes(val: Any) -> int | None:
    """The bytes of generator state PyTorch saves to replay a random op whose output is
    ``val`` (a CPU generator's state is 5 056 B), or ``None`` where it cannot replay one."""
    t = next((v for v in (val if isinstance(val, (tuple, list)) else (val,)) if isinstance(v, torch.Tensor)), None)
    device = t.device if t is not None else torch.device("cpu")
    if device.type == "cpu":
        return int(torch.get_rng_state().numel())
    if device.type == "cuda":
        return int(torch.cuda.get_rng_state(device).numel())
    return None


def _value_fields(node: fx.Node, val: Any) -> dict:
    t = _tensor(val)
    if t is None:
        # A symbolic size, None or another non-tensor value: no device memory.
        return {"bytes": 0}
    shape = [int(d) for d in t.shape]
    dtype = _DTYPES.get(t.dtype)
    if dtype is None:
        return {"shape": shape, "bytes": math.prod(shape) * t.element_size()}
    return {"shape": shape, "dtype": dtype}


def _numel(val: Any) -> int:
    t = _tensor(val)
    return int(t.numel()) if t is not None else 0


def _custom(target: Any) -> bool:
    """Whether ``target`` is a library's own op (``transformers::grouped_mm_fallback``)."""
    namespace = getattr(target, "namespace", None)
    return namespace is not None and namespace not in _TORCH_NAMESPACES


def _is_grouped_mm(target: Any) -> bool:
    return _packet(target) in _GROUPED_MM or (_custom(target) and "grouped_mm" in str(target))


def _grouped_mm_flops(a: Any, b: Any) -> int | None:
    """2 × the multiply-adds of a grouped matrix product of ``a`` and ``b`` (each group's
    rows times its columns times the shared dimension), in ``torch._grouped_mm``'s four forms;
    ``None`` for shapes it does not take."""
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        return None
    match (a.dim(), b.dim()):
        case (2, 3):  # tokens × k by groups × k × n: each token through its group's matrix
            return 2 * a.shape[0] * a.shape[1] * b.shape[2]
        case (3, 2):  # groups × m × k by k × (columns of every group)
            return 2 * a.shape[1] * a.shape[2] * b.shape[1]
        case (2, 2):  # m × (k of every group) by (k of every group) × n: a weight's gradient
            return 2 * a.shape[0] * a.shape[1] * b.shape[1]
        case (3, 3):  # a batch of products
            return 2 * a.shape[0] * a.shape[1] * a.shape[2] * b.shape[2]
    return None


def _compute_intensive(target: Any) -> bool:
    """Never recomputed by the min-cut without a tag that asks: a matrix product, convolution or
    attention (any op PyTorch's flop counter has a formula for), and a library's custom op
    without one, whose cost remat cannot know."""
    from torch.utils.flop_counter import flop_registry

    packet = _packet(target)
    return packet in _COMPUTE_INTENSIVE or packet in flop_registry or _is_grouped_mm(target) or _custom(target)


def _routing(target: Any) -> bool:
    """Whether ``target``'s outputs select data (top-k, sort, argmax, ...): kept, not recomputed."""
    return _packet(target) in _ROUTING or target in _ROUTING_OVERLOADS


def _discrete(node: fx.Node) -> bool:
    """Whether ``node``'s value is an integer or bool tensor."""
    val = node.meta.get("val")
    return isinstance(val, torch.Tensor) and not (val.dtype.is_floating_point or val.dtype.is_complex)


def _index_operands(node: fx.Node) -> list[fx.Node]:
    """The nodes ``node`` uses as indices into another operand (``_INDEX_ARGS``)."""
    k = _INDEX_ARGS.get(_packet(node.target))
    if k is None or k >= len(node.args):
        return []
    arg = node.args[k]
    items = arg if isinstance(arg, (list, tuple)) else [arg]
    return [a for a in items if isinstance(a, fx.Node)]


def _feeding_an_index(nodes: list[fx.Node]) -> set[fx.Node]:
    """The nodes whose value reaches an index operand through integer and bool values only."""
    feeds: set[fx.Node] = set()
    for node in reversed(nodes):
        if node.op != "call_function":
            continue
        feeds.update(_index_operands(node))
        if node in feeds and _discrete(node):
            feeds.update(i for i in node.all_input_nodes if _discrete(i))
    return feeds


def _is_routing(node: fx.Node, producer: fx.Node, feeds_index: set[fx.Node]) -> bool:
    """The routing rule of docs/policies.md, the same as the Rust DSL's: a forward value is routing
    (kept, never recomputed) unless its policy is ``MUST_RECOMPUTE`` when its op selects (top-k,
    sort, argmax, ...), or when it is an integer or bool value taken from floats (a comparison, a
    cast) that reaches an index through integer and bool values only. What is computed from kept
    routing by integer ops is exact, and recomputed like any value."""
    if _policy_name(producer) == "MUST_RECOMPUTE":
        return False
    if _routing(producer.target):
        return True
    floats_in = any(isinstance(i.meta.get("val"), torch.Tensor) and not _discrete(i) for i in producer.all_input_nodes)
    return _discrete(node) and floats_in and node in feeds_index


def _flops(producer: fx.Node, out_val: Any) -> int:
    """PyTorch's flop counter's formula where it has one (matrix products: 2mnk; attention;
    convolutions), grouped matrix products by theirs, else the largest element count among inputs
    and output; 0 for views."""
    target = producer.target
    if _is_view(target):
        return 0
    from torch.utils.flop_counter import flop_registry

    if _is_grouped_mm(target):
        args = [a.meta.get("val") if isinstance(a, fx.Node) else a for a in producer.args[:2]]
        grouped = _grouped_mm_flops(*args) if len(args) == 2 else None
        if grouped is not None:
            return int(grouped)
    formula = flop_registry.get(_packet(target))
    if formula is not None:
        args, kwargs = fx.node.map_arg((producer.args, producer.kwargs), lambda n: n.meta.get("val"))
        try:
            return int(formula(*args, **kwargs, out_val=producer.meta.get("val")))
        except Exception:  # noqa: BLE001 — a formula that cannot read these shapes: count elements
            pass
    sizes = [_numel(i.meta.get("val")) for i in producer.all_input_nodes]
    return max(sizes + [_numel(out_val)])


# Batch norm in training normalises by the batch's own statistics: its output, mean and inverse
# deviation (outputs 0-2) do not read the running statistics (arguments 3 and 4), which only its
# updated statistics (outputs 3 and 4) read. The running statistics are the buffers the forward
# mutates, and remat never recomputes a reader of a mutated buffer, so an export naming them as
# inputs of every output would keep the normalised activations PyTorch recomputes.
_BATCH_NORM_TRAINING = (_aten._native_batch_norm_legit_functional.default,)
_RUNNING_STATS = (3, 4)


def _batch_norm_training(producer: fx.Node) -> bool:
    return producer.target in _BATCH_NORM_TRAINING and len(producer.args) > 5 and producer.args[5] is True


def _inputs_read(node: fx.Node, producer: fx.Node) -> list[fx.Node]:
    """The nodes ``node``'s value is computed from: its producer's inputs, less the running
    statistics for a training batch norm's outputs other than the updated statistics."""
    inputs = producer.all_input_nodes
    if node is producer or not _batch_norm_training(producer) or node.args[1] in _RUNNING_STATS:
        return inputs
    unread = {producer.args[k] for k in _RUNNING_STATS}
    return [i for i in inputs if i not in unread]


def running_statistics_read(graph: fx.Graph, kept: set[str]) -> list[fx.Node]:
    """The running statistics a backward reads where it recomputes a training batch norm from
    outputs ``kept`` does not hold (PyTorch's extraction copies the whole op, arguments and all,
    although the outputs it recomputes do not depend on them): the extraction needs them saved."""
    out: list[fx.Node] = []
    for node in graph.nodes:
        if node.op != "call_function" or not _batch_norm_training(node):
            continue
        recomputable = [u for u in node.users if u.target is operator.getitem and u.args[1] not in _RUNNING_STATS]
        if any(u.name not in kept for u in recomputable):
            out.extend(a for k in _RUNNING_STATS if isinstance(a := node.args[k], fx.Node) and a not in out)
    return out


def _mutated_primals(graph: fx.Graph) -> set[fx.Node]:
    """The placeholders the forward mutates, whichever way AOTAutograd applies the mutation:
    after the forward (the joint graph returns the new value, an ``InputMutationAOTOutput``
    among the output's descriptors; ``aot_runtime_epilogue_input_mutation`` on inputs that
    need a gradient) or inside it (an op that writes to the placeholder or a view of it, as
    Inductor's ``copy_`` epilogue does)."""
    by_desc: dict[Any, fx.Node] = {}
    mutated: set[fx.Node] = set()
    for node in graph.nodes:
        if node.op == "placeholder":
            try:
                by_desc[node.meta["desc"]] = node
            except (KeyError, TypeError):  # no descriptor, or one that is not hashable
                pass
            if node.meta.get("aot_runtime_epilogue_input_mutation", False):
                mutated.add(node)
        elif node.op == "output":
            for desc in node.meta.get("desc") or ():
                try:
                    target = by_desc.get(getattr(desc, "mutated_input", None))
                except TypeError:
                    continue
                if target is not None:
                    mutated.add(target)
        elif node.op == "call_function":
            mutated.update(_written_placeholders(node))
    return {n for n in mutated if not n.name.startswith("tangents")}


def _written_placeholders(node: fx.Node) -> list[fx.Node]:
    """The placeholders ``node``'s op writes to (its schema's mutable arguments), through views."""
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        return []
    found = []
    for k, arg in enumerate(schema.arguments):
        if arg.alias_info is None or not arg.alias_info.is_write:
            continue
        value = _through_views(node.args[k] if k < len(node.args) else node.kwargs.get(arg.name))
        if isinstance(value, fx.Node) and value.op == "placeholder":
            found.append(value)
    return found


def joint_document(
    joint: fx.GraphModule, num_fwd_outputs: int, *, static_inputs: Iterable[int] | None = None
) -> dict:
    """The ``remat.joint`` document of ``joint`` (as ``aot_autograd`` hands it to a
    partitioner). Primals whose positions are in ``static_inputs`` (the partitioner's
    ``static_lifetime_input_indices``: parameters and buffers) are ``param``, the rest ``input``."""
    _check_joint_arguments(joint, num_fwd_outputs, static_inputs)
    static = set(static_inputs or ())
    graph = joint.graph
    mutated = _mutated_primals(graph)
    nodes = list(graph.nodes)
    backward: dict[fx.Node, bool] = {}
    primal = 0
    regions: dict[Any, int] = {}
    out: list[dict] = []
    feeds_index = _feeding_an_index(nodes)
    for node in nodes:
        if node.op == "output":
            continue
        backward[node] = (node.op == "placeholder" and node.name.startswith("tangents")) or any(
            backward.get(i, False) for i in node.all_input_nodes
        )
        val = node.meta.get("val")
        if node.op == "placeholder":
            if node.name.startswith("tangents"):
                doc = {"id": node.name, "op": "tangent", "phase": "backward", "flags": ["tangent"]}
            else:
                is_param = primal in static
                primal += 1
                doc = {"id": node.name, "op": "param" if is_param else "input", "phase": "forward"}
                if node in mutated:
                    # remat then never reads it in the backward: what a recompute would read
                    # from it is kept instead.
                    doc["flags"] = ["mutated"]
            doc.update(_value_fields(node, val))
            out.append(doc)
            continue
        if node.op == "get_attr":
            out.append({"id": node.name, "op": "param", "phase": "forward", **_value_fields(node, val)})
            continue
        if node.op != "call_function":
            raise ExportError(f"FX node {node.name!r} ({node.op} {node.target}): only call_function nodes are supported")
        if isinstance(val, (tuple, list)):
            # A multi-output op: its getitem users stand for it.
            continue
        producer = node
        if node.target is operator.getitem:
            producer = node.args[0]
            if not isinstance(producer, fx.Node):
                raise ExportError(f"FX node {node.name!r}: getitem of a non-node")
        inputs = [i.name for i in _inputs_read(node, producer)]
        doc = {
            "id": node.name,
            "op": str(producer.target) if producer is node else f"{producer.target}[{node.args[1]}]",
            "inputs": inputs,
            "phase": "backward" if backward[node] else "forward",
            **_value_fields(node, val),
        }
        flops = _flops(producer, val)
        if flops:
            doc["flops"] = flops
        flags = []
        if _is_view(producer.target):
            if not inputs:
                raise ExportError(f"FX node {node.name!r} ({producer.target}): a view with no input")
            flags.append("view")
        if _compute_intensive(producer.target):
            flags.append("compute_intensive")
        state_bytes = None
        if _is_rng_op(producer):
            flags.append("random")
            state_bytes = _rng_state_bytes(producer.meta.get("val"))
            if state_bytes is None or backward[node]:
                # Running it again would draw anew and no saved state can replay it here.
                flags.append("not_recomputable")
        elif not backward[node] and "view" not in flags and _is_routing(node, producer, feeds_index):
            # Routing is kept where the backward needs it, unless a tag asks to recompute it.
            flags.append("not_recomputable")
        if flags:
            doc["flags"] = flags
        if state_bytes is not None and not backward[node]:
            # remat_torch.partition_fn replays the op from its generator state when remat
            # recomputes it (PyTorch's run_and_save_rng_state / run_with_rng_state).
            doc["rng_state_bytes"] = state_bytes
            if producer is not node:
                # The outputs of one draw (native_dropout's result and mask) share its state.
                doc["rng_state"] = producer.name
        if not backward[node]:
            graph_id = producer.meta.get("ac_graph_id")
            if graph_id is not None:
                doc["region"] = regions.setdefault(graph_id, len(regions))
            policy = producer.meta.get("recompute")
            if policy is not None:
                name = _policy_name(producer)
                if name not in _POLICIES:
                    raise ExportError(f"FX node {node.name!r}: unknown checkpoint policy {policy!r}")
                doc["policy"] = _POLICIES[name]
        out.append(doc)
    output = next(n for n in nodes if n.op == "output")
    outs = list(output.args[0])
    # A multi-output node listed among the outputs is referred to by its getitems only.
    names = {d["id"] for d in out}
    fwd = [n for n in outs[:num_fwd_outputs] if isinstance(n, fx.Node) and n.name in names]
    bwd = [n.name for n in outs[num_fwd_outputs:] if isinstance(n, fx.Node) and n.name in names]
    fwd = list(dict.fromkeys(fwd))
    return {
        "format": "remat.joint",
        "version": 1,
        "regions": [{"id": i, "name": f"ac_graph_{k}"} for k, i in regions.items()],
        "nodes": out,
        "forward_outputs": [n.name for n in fwd if _caller_holds(n)],
        "released_outputs": [n.name for n in fwd if not _caller_holds(n)],
        "backward_outputs": bwd,
    }


def _caller_holds(output: fx.Node) -> bool:
    """Whether the caller of the compiled forward holds ``output`` through the backward whatever
    it does with it: a primal or a view of one (the caller's own tensor), or a 0-dim value (the
    loss ``backward()`` is called on). Any other output — logits, hidden states, a mutated input's
    new value that PyTorch copies back — the caller may drop once the forward returns: remat keeps
    it for the backward only at its bytes, as PyTorch's partitioner does."""
    if _through_views(output).op in ("placeholder", "get_attr"):
        return True
    val = output.meta.get("val")
    return isinstance(val, torch.Tensor) and val.dim() == 0


def _through_views(value: Any) -> Any:
    """What ``value`` views: the first argument of each view op it is made by, followed back to a
    value that is not a view (``value`` itself when it is none)."""
    while isinstance(value, fx.Node) and value.op == "call_function" and _is_view(value.target) and value.args:
        value = value.args[0]
    return value


def _policy_name(node: fx.Node) -> str | None:
    """The name of ``node``'s checkpoint policy (``MUST_SAVE``, ...), ``None`` without one."""
    policy = node.meta.get("recompute")
    return None if policy is None else getattr(policy, "name", str(policy))


def _check_joint_arguments(joint: Any, num_fwd_outputs: Any, static_inputs: Any) -> None:
    if not isinstance(joint, fx.GraphModule):
        raise ValueError(f"joint: expected a torch.fx.GraphModule (the joint graph), got {type(joint).__name__}")
    outputs = next((n for n in joint.graph.nodes if n.op == "output"), None)
    count = len(outputs.args[0]) if outputs is not None and isinstance(outputs.args[0], (tuple, list)) else 0
    if isinstance(num_fwd_outputs, bool) or not isinstance(num_fwd_outputs, int) or not 0 <= num_fwd_outputs <= count:
        raise ValueError(f"num_fwd_outputs={num_fwd_outputs!r}: expected an int from 0 to {count} (the graph's outputs)")
    if static_inputs is None:
        return
    try:
        indices = list(static_inputs)
    except TypeError:
        raise ValueError(f"static_inputs={static_inputs!r}: expected primal positions (ints)") from None
    if any(isinstance(i, bool) or not isinstance(i, int) or i < 0 for i in indices):
        raise ValueError(f"static_inputs={static_inputs!r}: expected primal positions (non-negative ints)")


def merge_common_subexpressions(joint_module: fx.GraphModule, num_fwd_outputs: int) -> None:
    """Merges the nodes that compute the same value (same op, arguments and inputs), as PyTorch's
    own partitioner does before it chooses (``torch._functorch.config.cse``), so that remat
    partitions the graph PyTorch's partitioner would (the exporter's users merge first, the partitioner
    and the benches; it needs no extension, so it lives here): a GELU's ``erf`` that the forward and the
    backward each compute is one value, recomputed or kept once. Like PyTorch, a value only the
    forward needs is not merged with one the backward needs (the merged value would become an
    extra saved output), and random ops are never merged (PyTorch's ``fx_graph_cse`` skips them)."""
    from torch._functorch import config
    from torch._functorch.compile_utils import fx_graph_cse
    from torch._functorch.partitioners import _extract_fwd_bwd_outputs

    joint_module.graph.eliminate_dead_code()
    joint_module.recompile()
    if not config.cse:
        return
    _, backward_outputs, _, _ = _extract_fwd_bwd_outputs(joint_module, num_fwd_outputs=num_fwd_outputs)
    backward_needs: set[fx.Node] = set()
    stack = [o for o in backward_outputs if o is not None and o.op != "output"]
    while stack:
        node = stack.pop()
        if node not in backward_needs:
            backward_needs.add(node)
            stack.extend(node.all_input_nodes)
    joint_module.graph = fx_graph_cse(joint_module.graph, extra_node_key=lambda n: n in backward_needs)
