"""Real architectures as PyTorch users meet them (issue 48, point 1): transformers and timm models
built from tiny configs (no downloads), each without checkpointing, with the library's own
checkpointing, and with a selective policy (HF's ``context_fn`` where the model takes one, remat's
policy words where it cannot), compiled with ``remat_torch.backend("mincut")``. Each run is held
against PyTorch's own backend with its min-cut partitioner: under ``aot_eager`` the loss and every
gradient bit for bit; the bytes kept for the backward, counted by PyTorch's
``saved_tensors_hooks``, no more than PyTorch's; and the FLOPs the backward runs, counted by
PyTorch's ``FlopCounterMode``, at most 1.05× PyTorch's. ``REMAT_REAL_MODELS_TABLE=path`` writes
each run's figures (both sides: bytes, backward FLOPs, compile CPU seconds, step milliseconds).

Under Inductor (1e-3 relative against PyTorch's Inductor), which compiles for minutes on two cores,
CI runs three of the 21 runs (``INDUCTOR_IN_CI``); ``REMAT_REAL_MODELS=all`` runs every one.
"""

import functools
import json
import os
import time

import pytest
import torch
from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

import remat_torch

transformers = pytest.importorskip("transformers")
timm = pytest.importorskip("timm")

TOKENS = (2, 16)
IMAGES = (2, 3, 32, 32)


def save_matmuls(ctx, op, *args, **kwargs):
    matmuls = (torch.ops.aten.mm.default, torch.ops.aten.addmm.default, torch.ops.aten.bmm.default)
    return CheckpointPolicy.MUST_SAVE if op in matmuls else CheckpointPolicy.PREFER_RECOMPUTE


def _hf(config_class, model_class, **config):
    def make(checkpointing):
        torch.manual_seed(0)
        model = model_class(config_class(**config))
        if checkpointing == "full":
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        elif checkpointing == "sac":
            context = functools.partial(create_selective_checkpoint_contexts, save_matmuls)
            model.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False, "context_fn": context}
            )
        return model

    return make


def _timm(name, **kwargs):
    def make(checkpointing):
        torch.manual_seed(0)
        model = timm.create_model(name, pretrained=False, **kwargs)
        if checkpointing in ("full", "sac"):
            model.set_grad_checkpointing(True)
        return model

    return make


T = transformers
NO_DROPOUT = dict(attn_pdrop=0.0, resid_pdrop=0.0, embd_pdrop=0.0)
MODELS = {
    "gpt2": (_hf(T.GPT2Config, T.GPT2LMHeadModel, n_layer=2, n_embd=64, n_head=4, vocab_size=128,
                 n_positions=32, **NO_DROPOUT), "tokens"),
    "llama_gqa": (_hf(T.LlamaConfig, T.LlamaForCausalLM, hidden_size=64, intermediate_size=128,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, vocab_size=128), "tokens"),
    "bert": (_hf(T.BertConfig, T.BertForMaskedLM, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                 intermediate_size=128, vocab_size=128, hidden_dropout_prob=0.0,
                 attention_probs_dropout_prob=0.0), "tokens"),
    "t5": (_hf(T.T5Config, T.T5ForConditionalGeneration, d_model=64, d_ff=128, d_kv=16, num_layers=2,
               num_heads=4, vocab_size=128, dropout_rate=0.0, decoder_start_token_id=0), "seq2seq"),
    "mixtral": (_hf(T.MixtralConfig, T.MixtralForCausalLM, hidden_size=64, intermediate_size=128,
                    num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, num_local_experts=4,
                    num_experts_per_tok=2, vocab_size=128), "tokens"),
    "vit": (_timm("vit_tiny_patch16_224", img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4,
                  num_classes=10), "images"),
    "resnet18": (_timm("resnet18", num_classes=10), "images"),
}  # fmt: skip
# timm's blocks cannot take a context_fn: remat's policy words give them a selective policy
# (a ResNet's regions hold no matrix product: its convolutions are not a kind remat names).
TIMM_POLICY = {"vit": "save(matmul)", "resnet18": "recompute(relu)"}

# Where remat keeps more than PyTorch by the hooks, the bytes it may keep more under each compiler
# and why (measured 2026-12-06): a test fails if the excess grows past them.
ROTARY = (
    "rotary cos and sin (1 024 B each) are inputs of every checkpointed layer, which remat keeps as eager "
    "checkpointing does (DESIGN §4: a region's inputs are kept whatever made them); PyTorch's compiled "
    "partitioner recomputes them — from their concatenation under aot_eager (1 024 B plus 388 B of row "
    "statistics), from the position ids under Inductor (keeping 660 B of labels and statistics instead)"
)
EXCESS = {
    "llama_gqa": ({"aot_eager": 636, "inductor": 1388}, ROTARY),
    # The rotary difference above, and the routing remat never recomputes (top-k values and
    # indices, the sort's order, the expert histogram: 2 080 B over 2 layers), which PyTorch
    # recomputes (NeMo-Automodel #2635: a recompute can route differently).
    "mixtral": ({"aot_eager": 636 + 2080, "inductor": 1388 + 2080}, "routing kept; " + ROTARY),
}


# Where remat's backward runs more than 1.05× PyTorch's FLOPs (flop counter, aot_eager), the
# ratio it may reach and why; a test fails past it.
FLOPS = {}

def _batch(kind):
    torch.manual_seed(1)
    if kind == "images":
        return (torch.randn(*IMAGES),), {}
    ids = torch.randint(0, 128, TOKENS)
    if kind == "seq2seq":
        return (), {"input_ids": ids, "labels": torch.randint(0, 128, TOKENS)}
    return (), {"input_ids": ids, "labels": ids}


def _loss(model, args, kwargs):
    out = model(*args, **kwargs)
    if isinstance(out, torch.Tensor):
        return out.float().square().mean()
    return out.loss


class Step:
    """One compiled step as PyTorch's instruments see it: the loss, every gradient, the bytes
    saved for the backward (``saved_tensors_hooks``: each storage once, parameters, buffers and
    inputs excluded, since every partition holds them), the FLOPs the backward really runs
    (``FlopCounterMode`` around ``backward()``: the compiled backward graph's ops as they
    execute, recomputes included), the CPU seconds of the first step (compiling it), and the
    median wall milliseconds of five steps after it."""

    def __init__(self, loss, grads, kept, backward_flops, compile_cpu_s, step_ms):
        self.loss, self.grads, self.kept = loss, grads, kept
        self.backward_flops, self.compile_cpu_s, self.step_ms = backward_flops, compile_cpu_s, step_ms


def _run(make, kind, checkpointing, backend):
    from torch.utils.flop_counter import FlopCounterMode

    model = make(checkpointing)
    model.train()
    args, kwargs = _batch(kind)
    compiled = torch.compile(model, backend=backend)
    held = {p.data_ptr() for p in model.parameters()} | {b.data_ptr() for b in model.buffers()}
    held |= {t.data_ptr() for t in list(args) + list(kwargs.values())}
    seen, kept = set(), 0

    def pack(t):
        nonlocal kept
        ptr = t.untyped_storage().data_ptr()
        if t.data_ptr() not in held and ptr not in seen:
            seen.add(ptr)
            kept += t.untyped_storage().nbytes()
        return t

    torch._dynamo.reset()
    started = time.process_time()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = _loss(compiled, args, kwargs)
    counter = FlopCounterMode(display=False)
    with counter:
        loss.backward()
    compile_cpu_s = time.process_time() - started
    grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
    times = []
    for _ in range(5):
        model.zero_grad(set_to_none=True)
        started = time.perf_counter()
        _loss(compiled, args, kwargs).backward()
        times.append((time.perf_counter() - started) * 1e3)
    step_ms = sorted(times)[len(times) // 2]
    torch._dynamo.reset()
    return Step(loss.detach(), grads, kept, counter.get_total_flops(), compile_cpu_s, step_ms)


# Inductor compiles for minutes on two cores: CI runs these of its runs, REMAT_REAL_MODELS=all every one.
INDUCTOR_IN_CI = {("gpt2", "none"), ("llama_gqa", "full"), ("mixtral", "sac")}


def _cases():
    every = os.environ.get("REMAT_REAL_MODELS") == "all"
    for compiler in ("aot_eager", "inductor"):
        for name in MODELS:
            for checkpointing in ("none", "full", "sac"):
                if compiler == "aot_eager" or every or (name, checkpointing) in INDUCTOR_IN_CI:
                    yield pytest.param(name, checkpointing, compiler, id=f"{name}-{checkpointing}-{compiler}")


@pytest.mark.parametrize("name, checkpointing, compiler", list(_cases()))
def test_a_real_model_compiles_matches_pytorch_and_keeps_no_more(name, checkpointing, compiler):
    make, kind = MODELS[name]
    policy = TIMM_POLICY.get(name) if checkpointing == "sac" else None
    ours = _run(make, kind, checkpointing, remat_torch.backend("mincut", compiler=compiler, policy=policy))
    theirs = _run(make, kind, checkpointing, compiler)
    _record(name, checkpointing, compiler, policy, ours, theirs)
    assert len(ours.grads) == len(theirs.grads)
    if compiler == "aot_eager":
        assert torch.equal(ours.loss, theirs.loss), (ours.loss, theirs.loss)
        for g, h in zip(ours.grads, theirs.grads):
            assert torch.equal(g, h)
    else:
        torch.testing.assert_close(ours.loss, theirs.loss, rtol=1e-3, atol=1e-5)
        for g, h in zip(ours.grads, theirs.grads):
            torch.testing.assert_close(g, h, rtol=1e-3, atol=1e-4)
    if policy is None:
        # (With remat's words the policy is not PyTorch's: nothing to hold the bytes against.)
        allowed, why = EXCESS.get(name, ({}, ""))
        allowed = allowed.get(compiler, 0)
        assert ours.kept <= theirs.kept + allowed, (
            f"{name} {checkpointing} {compiler}: remat keeps {ours.kept} B, PyTorch {theirs.kept} B (allowed "
            f"{allowed} B more: {why or 'none'})"
        )
        # Under Inductor the counter sees the matrix products it hands to extern kernels.
        ratio, why = FLOPS.get((name, checkpointing), (1.05, ""))
        assert ours.backward_flops <= ratio * theirs.backward_flops, (
            f"{name} {checkpointing} {compiler}: remat's backward runs {ours.backward_flops} FLOPs, PyTorch's "
            f"{theirs.backward_flops} (allowed {ratio}×: {why or 'none'})"
        )


def _record(name, checkpointing, compiler, policy, ours, theirs):
    """Appends the run's figures, both sides, as a JSON line to ``$REMAT_REAL_MODELS_TABLE`` (the
    table in docs/torch.md is made from it)."""
    path = os.environ.get("REMAT_REAL_MODELS_TABLE")
    if not path:
        return
    row = {"model": name, "checkpointing": checkpointing + (f" ({policy})" if policy else ""), "compiler": compiler}
    for side, step in (("remat", ours), ("torch", theirs)):
        row.update({f"{side}_kept": step.kept, f"{side}_backward_flops": step.backward_flops,
                    f"{side}_compile_cpu_s": round(step.compile_cpu_s, 2), f"{side}_step_ms": round(step.step_ms, 2)})
    row["bitwise"] = torch.equal(ours.loss, theirs.loss) and all(torch.equal(g, h) for g, h in zip(ours.grads, theirs.grads))
    with open(path, "a") as f:
        f.write(json.dumps(row) + "\n")
