"""Real blocks under remat's partition: a 2-block Llama (RMSNorm, rotary, SDPA, SwiGLU) under
full checkpointing, selective "save matmuls" and MUST_RECOMPUTE everywhere — gradients bitwise
equal to eager, and no more saved activation bytes than PyTorch's own min-cut partitioner on the
same model."""

import functools

import pytest
import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts

from test_compile import assert_bitwise, compiled_with, recompute_everything, run, save_matmuls, saved_targets


class RMSNorm(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.g = torch.nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.g


def rotate(x, cos, sin):
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class Block(torch.nn.Module):
    def __init__(self, d, heads, hidden):
        super().__init__()
        self.heads = heads
        self.n1, self.n2 = RMSNorm(d), RMSNorm(d)
        self.qkv = torch.nn.Linear(d, 3 * d, bias=False)
        self.o = torch.nn.Linear(d, d, bias=False)
        self.gate = torch.nn.Linear(d, hidden, bias=False)
        self.up = torch.nn.Linear(d, hidden, bias=False)
        self.down = torch.nn.Linear(hidden, d, bias=False)

    def forward(self, x, cos, sin):
        b, t, d = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, d))
        h = self.n2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Llama(torch.nn.Module):
    def __init__(self, policy, vocab=64, d=32, heads=4, hidden=64, t=16):
        super().__init__()
        torch.manual_seed(3)
        self.embed = torch.nn.Embedding(vocab, d)
        self.blocks = torch.nn.ModuleList(Block(d, heads, hidden) for _ in range(2))
        self.norm = RMSNorm(d)
        self.policy = policy
        dh = d // heads
        angle = torch.arange(t)[:, None] * 10_000 ** (-torch.arange(dh // 2) * 2 / dh)[None, :]
        self.register_buffer("cos", angle.cos())
        self.register_buffer("sin", angle.sin())

    def forward(self, tokens, targets):
        x = self.embed(tokens)
        for block in self.blocks:
            if self.policy == "none":
                x = block(x, self.cos, self.sin)
            elif self.policy == "full":
                x = checkpoint(block, x, self.cos, self.sin, use_reentrant=False)
            else:
                context = functools.partial(create_selective_checkpoint_contexts, self.policy)
                x = checkpoint(block, x, self.cos, self.sin, use_reentrant=False, context_fn=context)
        logits = self.norm(x) @ self.embed.weight.t()
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def saved_activation_bytes(forward):
    """Bytes of the distinct computed values the forward graph hands to the backward."""
    out = next(n for n in forward.graph.nodes if n.op == "output")
    values = {v for v in out.args[0][1:] if isinstance(v, torch.fx.Node) and v.op == "call_function"}
    total = 0
    for v in values:
        val = v.meta.get("val")
        if isinstance(val, torch.Tensor):
            total += int(val.numel()) * val.element_size()
    return total


def pytorch_min_cut_forward(model, *inputs):
    from functorch.compile import make_boxed_func, min_cut_rematerialization_partition
    from torch._dynamo.backends.common import aot_autograd

    forwards = []

    def fw(gm, _):
        forwards.append(gm)
        return make_boxed_func(gm.forward)

    torch._dynamo.reset()
    backend = aot_autograd(
        fw_compiler=fw,
        bw_compiler=lambda gm, _: make_boxed_func(gm.forward),
        partition_fn=functools.partial(min_cut_rematerialization_partition, compiler="inductor"),
    )
    torch.compile(model, backend=backend, dynamic=False)(*inputs).backward()
    return forwards[0]


@pytest.mark.parametrize("policy", ["full", "save_matmuls", "must_recompute"])
def test_llama_blocks_match_eager_and_save_no_more_than_pytorch(policy):
    fn = {"full": "full", "save_matmuls": save_matmuls, "must_recompute": recompute_everything}[policy]
    model = Llama(fn)
    tokens = torch.randint(0, 64, (2, 16))
    targets = torch.randint(0, 64, (2, 16))
    compiled, forwards = compiled_with(model, "mincut")
    assert_bitwise(run(compiled, tokens, targets, grad_inputs=False), run(model, tokens, targets, grad_inputs=False))
    ours = saved_activation_bytes(forwards[0])
    theirs = saved_activation_bytes(pytorch_min_cut_forward(model, tokens, targets))
    print(f"{policy}: remat keeps {ours} B, PyTorch's min-cut {theirs} B")
    assert ours <= theirs, (ours, theirs)


class GptBlock(torch.nn.Module):
    """A pre-LN GPT block with dropout on the attention output, the MLP hidden layer and the MLP
    output."""

    def __init__(self, d=32, heads=4, p=0.1):
        super().__init__()
        torch.manual_seed(5)
        self.heads, self.p = heads, p
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.o = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.fc1, self.fc2 = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

    def block(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
        x = x + F.dropout(self.o(a), self.p, self.training)
        h = F.dropout(F.gelu(self.fc1(self.ln2(x))), self.p, self.training)
        return x + F.dropout(self.fc2(h), self.p, self.training)

    def forward(self, x):
        return checkpoint(self.block, x, use_reentrant=False).pow(2).mean()


def test_dropout_under_checkpoint_matches_pytorchs_partitioner_with_the_same_seed():
    from functorch.compile import make_boxed_func, min_cut_rematerialization_partition
    from torch._dynamo.backends.common import aot_autograd

    model = GptBlock()
    x = torch.randn(2, 16, 32)
    compiled, forwards = compiled_with(model, "mincut")
    torch.manual_seed(11)
    ours = run(compiled, x)
    torch._dynamo.reset()
    boxed = lambda gm, _: make_boxed_func(gm.forward)  # noqa: E731
    theirs_backend = aot_autograd(fw_compiler=boxed, bw_compiler=boxed, partition_fn=min_cut_rematerialization_partition)
    theirs_model = torch.compile(model, backend=theirs_backend, dynamic=False)
    torch.manual_seed(11)
    theirs = run(theirs_model, x)
    assert_bitwise(ours, theirs)
    # The masks replay: the forward keeps a generator state per dropout (what PyTorch keeps), not
    # the dropout's result or mask, and no more bytes than PyTorch's partitioner.
    saved = saved_targets(forwards[0])
    assert not any("native_dropout" in s for s in saved), saved
    assert saved.count("run_and_save_rng_state") == 3, saved
    ours_bytes = saved_activation_bytes(forwards[0])
    theirs_bytes = saved_activation_bytes(pytorch_min_cut_forward(model, x.clone().requires_grad_()))
    print(f"dropout: remat keeps {ours_bytes} B, PyTorch's min-cut {theirs_bytes} B (generator states included)")
    assert ours_bytes <= theirs_bytes, (ours_bytes, theirs_bytes)
