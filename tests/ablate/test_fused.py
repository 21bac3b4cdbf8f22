"""The fused projections of registry/attention.py are the separate q/k/v projections of the paper.

Self-attention projects with one ``qkv`` Linear (d -> 3d), cross-attention with ``q`` plus one ``kv``
Linear (d -> 2d): one matmul instead of three (two). Given the same weights, the fused module must
compute exactly what three separate Linears followed by attention compute, for every attention core,
and what torch.nn.MultiheadAttention (which packs q/k/v in the same order) computes.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

import registry
from registry.masking import make_mask

D, HEADS, B, T, S = 32, 4, 3, 7, 9
CORES = registry.names("attention")


def separate(fused: nn.Linear, parts: int) -> list[nn.Linear]:
    """`parts` Linears holding the row blocks of a fused (parts*d, d) projection, in order."""
    out = []
    for w, b in zip(fused.weight.chunk(parts, 0), fused.bias.chunk(parts, 0), strict=True):
        lin = nn.Linear(fused.in_features, fused.out_features // parts)
        with torch.no_grad():
            lin.weight.copy_(w)
            lin.bias.copy_(b)
        out.append(lin)
    return out


def reference(q_lin: nn.Linear, k_lin: nn.Linear, v_lin: nn.Linear, out: nn.Linear, x: Tensor, mem: Tensor,
              key_pad: Tensor | None, causal: bool) -> Tensor:
    """softmax(Q K^T / sqrt(d_head) + mask) V per head, then the output projection (the paper's eq. 1)."""
    def heads(t: Tensor) -> Tensor:  # (B, L, d) -> (B, h, L, d_head)
        return t.view(t.size(0), t.size(1), HEADS, D // HEADS).transpose(1, 2)

    q, k, v = heads(q_lin(x)), heads(k_lin(mem)), heads(v_lin(mem))
    scores = q @ k.transpose(-2, -1) / math.sqrt(D // HEADS)  # (B, h, Tq, Tk)
    if key_pad is not None:
        scores = scores.masked_fill(key_pad[:, None, None, :], float("-inf"))
    if causal:
        tq, tk = scores.shape[-2:]
        scores = scores.masked_fill(torch.ones(tq, tk, dtype=torch.bool).triu(1), float("-inf"))
    ctx = torch.softmax(scores, -1) @ v  # (B, h, Tq, d_head)
    return out(ctx.transpose(1, 2).reshape(x.size(0), x.size(1), D))


def inputs(length: int) -> tuple[Tensor, Tensor]:
    torch.manual_seed(0)
    x = torch.randn(B, length, D)
    pad = torch.zeros(B, length, dtype=torch.bool)
    pad[1, -2:] = True  # real padding on two rows, never a fully masked row
    pad[2, -4:] = True
    return x, pad


@pytest.mark.parametrize("core", CORES)
def test_fused_qkv_equals_separate_projections(core: str) -> None:
    attn = registry.get("attention", core)(D, HEADS, 0.0).eval()
    assert attn.qkv.out_features == 3 * D and not hasattr(attn, "q")  # one matmul for q, k and v
    x, pad = inputs(T)
    mask = make_mask("-inf", float("-inf")).build(pad[:, None, None, :], torch.float32)
    q, k, v = separate(attn.qkv, 3)
    with torch.no_grad():
        got = attn(x, mask=mask)
        want = reference(q, k, v, attn.out, x, x, pad, causal=False)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("core", CORES)
def test_fused_qkv_with_a_causal_mask(core: str) -> None:
    attn = registry.get("attention", core)(D, HEADS, 0.0).eval()
    x, _ = inputs(T)
    causal = torch.ones(T, T, dtype=torch.bool).triu(1)
    mask = make_mask("-inf", float("-inf")).build(causal, torch.float32, is_causal=True)
    q, k, v = separate(attn.qkv, 3)
    with torch.no_grad():
        got = attn(x, mask=mask)
        want = reference(q, k, v, attn.out, x, x, None, causal=True)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("core", CORES)
def test_fused_kv_of_cross_attention_equals_separate_projections(core: str) -> None:
    attn = registry.get("attention", core)(D, HEADS, 0.0, cross=True).eval()
    assert attn.kv.out_features == 2 * D
    x, _ = inputs(T)
    mem, mem_pad = inputs(S)
    mask = make_mask("-1e9", -1e9).build(mem_pad[:, None, None, :], torch.float32)
    k, v = separate(attn.kv, 2)
    with torch.no_grad():
        got = attn(x, mem, mask=mask)
        want = reference(attn.q, k, v, attn.out, x, mem, mem_pad, causal=False)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_fused_qkv_matches_torch_multihead_attention() -> None:
    """torch's MultiheadAttention packs in_proj as [W_q; W_k; W_v] too: same weights, same output."""
    attn = registry.get("attention", "sdpa")(D, HEADS, 0.0).eval()
    mha = nn.MultiheadAttention(D, HEADS, batch_first=True).eval()
    with torch.no_grad():
        mha.in_proj_weight.copy_(attn.qkv.weight)
        mha.in_proj_bias.copy_(attn.qkv.bias)
        mha.out_proj.weight.copy_(attn.out.weight)
        mha.out_proj.bias.copy_(attn.out.bias)
    x, pad = inputs(T)
    mask = make_mask("-inf", float("-inf")).build(pad[:, None, None, :], torch.float32)
    with torch.no_grad():
        got = attn(x, mask=mask)
        want, _ = mha(x, x, x, key_padding_mask=pad, need_weights=False)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_fused_gradients_equal_the_separate_ones() -> None:
    """Backward through the fused matmul gives each block the gradient its own Linear would get."""
    attn = registry.get("attention", "explicit")(D, HEADS, 0.0)
    x, pad = inputs(T)
    mask = make_mask("-inf", float("-inf")).build(pad[:, None, None, :], torch.float32)
    parts = separate(attn.qkv, 3)
    target = torch.randn(B, T, D)
    F.mse_loss(attn(x, mask=mask), target).backward()
    q, k, v = parts
    F.mse_loss(reference(q, k, v, attn.out, x, x, pad, causal=False), target).backward()
    for block, lin in zip(attn.qkv.weight.grad.chunk(3, 0), parts, strict=True):
        torch.testing.assert_close(block, lin.weight.grad, rtol=1e-4, atol=1e-6)
