"""The fused projections of registry/attention.py are the separate q/k/v projections of the paper.

Self-attention projects with one ``qkv`` Linear (d -> 3d), cross-attention with ``q`` plus one ``kv``
Linear (d -> 2d): one matmul instead of three (two). Given the same weights, the fused module must
compute exactly what three separate Linears followed by attention compute, for every attention core,
and what torch.nn.MultiheadAttention (which packs q/k/v in the same order) computes, outputs and
gradients, on both of sdpa's CPU paths (two matmuls / the fused kernel; a spy checks which one ran).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

import registry
from registry.attention import SMALL_QUERY, SDPAttention
from registry.masking import make_mask

D, HEADS, B, S = 32, 4, 3, 9
# The cores that compute eq. 1 itself; qk_norm scores cosine similarities instead (its own formula test is
# in tests/registry/test_formulas.py) on the same fused projections, which these tests already cover.
CORES = [name for name in registry.names("attention") if name in ("explicit", "sdpa")]
# sdpa has two CPU paths: two matmuls (inference with <= SMALL_QUERY queries per row, and bf16 training)
# and F.scaled_dot_product_attention (everything else). Query lengths on both sides of the threshold,
# with and without gradients, so that every equivalence below holds on both paths.
FEW, MANY = SMALL_QUERY - 1, SMALL_QUERY + 5
MODES = {"inference-few-queries": (FEW, False), "inference-many-queries": (MANY, False),
         "training-few-queries": (FEW, True), "training-many-queries": (MANY, True)}


def takes_matmuls(length: int, grad: bool, bf16: bool = False) -> bool:
    """Whether SDPAttention on CPU runs its two-matmul path (registry/attention.py, SDPAttention.attend)."""
    return (bf16 and grad) or (not grad and length <= SMALL_QUERY)


@pytest.fixture
def matmul_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Query lengths of SDPAttention's two-matmul path calls during the test (it still runs)."""
    calls: list[int] = []
    original = SDPAttention._attend_matmul

    def spy(self: SDPAttention, q: Tensor, *args: object) -> Tensor:
        calls.append(q.size(-2))
        return original(self, q, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(SDPAttention, "_attend_matmul", spy)
    return calls


Result = tuple[Tensor, list[Tensor]]  # (output, gradients of the inputs)


def run(fn: Callable[..., Tensor], tensors: list[Tensor], grad: bool) -> Result:
    """fn(*tensors) with gradients on or off; with them, also d(<out, fixed cotangent>)/d(each tensor)."""
    leaves = [t.detach().clone().requires_grad_(grad) for t in tensors]
    with torch.set_grad_enabled(grad):
        out = fn(*leaves)
    if not grad:
        return out, []
    out.backward(torch.randn(out.shape, generator=torch.Generator().manual_seed(7)))
    return out.detach(), [t.grad for t in leaves]  # type: ignore[misc]


def assert_same(got: Result, want: Result, tol: float = 1e-5) -> None:
    torch.testing.assert_close(got[0], want[0], rtol=tol, atol=tol)
    assert len(got[1]) == len(want[1])
    for g, w in zip(got[1], want[1], strict=True):
        torch.testing.assert_close(g, w, rtol=10 * tol, atol=10 * tol)


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


def check_path(core: str, calls: list[int], length: int, grad: bool, bf16: bool = False) -> None:
    if core == "sdpa":  # the path this case is meant to cover is the one that ran
        assert bool(calls) == takes_matmuls(length, grad, bf16), (length, grad, bf16, calls)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("core", CORES)
def test_fused_qkv_equals_separate_projections(core: str, mode: str, matmul_calls: list[int]) -> None:
    length, grad = MODES[mode]
    attn = registry.get("attention", core)(D, HEADS, 0.0).eval()
    assert attn.qkv.out_features == 3 * D and not hasattr(attn, "q")  # one matmul for q, k and v
    x, pad = inputs(length)
    mask = make_mask("-inf", float("-inf")).build(pad[:, None, None, :], torch.float32)
    q, k, v = separate(attn.qkv, 3)
    got = run(lambda t: attn(t, mask=mask), [x], grad)
    check_path(core, matmul_calls, length, grad)
    want = run(lambda t: reference(q, k, v, attn.out, t, t, pad, causal=False), [x], grad)
    assert_same(got, want)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("core", CORES)
def test_fused_qkv_with_a_causal_mask(core: str, mode: str, matmul_calls: list[int]) -> None:
    length, grad = MODES[mode]
    attn = registry.get("attention", core)(D, HEADS, 0.0).eval()
    x, _ = inputs(length)
    causal = torch.ones(length, length, dtype=torch.bool).triu(1)
    mask = make_mask("-inf", float("-inf")).build(causal, torch.float32, is_causal=True)
    q, k, v = separate(attn.qkv, 3)
    got = run(lambda t: attn(t, mask=mask), [x], grad)
    check_path(core, matmul_calls, length, grad)
    want = run(lambda t: reference(q, k, v, attn.out, t, t, None, causal=True), [x], grad)
    assert_same(got, want)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("core", CORES)
def test_fused_kv_of_cross_attention_equals_separate_projections(core: str, mode: str,
                                                                 matmul_calls: list[int]) -> None:
    length, grad = MODES[mode]
    attn = registry.get("attention", core)(D, HEADS, 0.0, cross=True).eval()
    assert attn.kv.out_features == 2 * D
    x, _ = inputs(length)
    mem, mem_pad = inputs(S)
    mask = make_mask("-1e9", -1e9).build(mem_pad[:, None, None, :], torch.float32)
    k, v = separate(attn.kv, 2)
    got = run(lambda a, m: attn(a, m, mask=mask), [x, mem], grad)
    check_path(core, matmul_calls, length, grad)
    want = run(lambda a, m: reference(attn.q, k, v, attn.out, a, m, mem_pad, causal=False), [x, mem], grad)
    assert_same(got, want)


@pytest.mark.parametrize("mode", MODES)
def test_fused_qkv_matches_torch_multihead_attention(mode: str, matmul_calls: list[int]) -> None:
    """torch's MultiheadAttention packs in_proj as [W_q; W_k; W_v] too: same weights, same output."""
    length, grad = MODES[mode]
    attn = registry.get("attention", "sdpa")(D, HEADS, 0.0).eval()
    mha = nn.MultiheadAttention(D, HEADS, batch_first=True).eval()
    with torch.no_grad():
        mha.in_proj_weight.copy_(attn.qkv.weight)
        mha.in_proj_bias.copy_(attn.qkv.bias)
        mha.out_proj.weight.copy_(attn.out.weight)
        mha.out_proj.bias.copy_(attn.out.bias)
    x, pad = inputs(length)
    mask = make_mask("-inf", float("-inf")).build(pad[:, None, None, :], torch.float32)
    got = run(lambda t: attn(t, mask=mask), [x], grad)
    check_path("sdpa", matmul_calls, length, grad)
    want = run(lambda t: mha(t, t, t, key_padding_mask=pad, need_weights=False)[0], [x], grad)
    assert_same(got, want)


@pytest.mark.parametrize("length", [FEW, MANY])
@pytest.mark.parametrize("core", CORES)
def test_fused_gradients_equal_the_separate_ones(core: str, length: int, matmul_calls: list[int]) -> None:
    """Backward through the fused matmul gives each block the gradient its own Linear would get."""
    attn = registry.get("attention", core)(D, HEADS, 0.0)
    x, pad = inputs(length)
    mask = make_mask("-inf", float("-inf")).build(pad[:, None, None, :], torch.float32)
    parts = separate(attn.qkv, 3)
    target = torch.randn(B, length, D)
    F.mse_loss(attn(x, mask=mask), target).backward()
    check_path(core, matmul_calls, length, grad=True)
    q, k, v = parts
    F.mse_loss(reference(q, k, v, attn.out, x, x, pad, causal=False), target).backward()
    for block, lin in zip(attn.qkv.weight.grad.chunk(3, 0), parts, strict=True):
        torch.testing.assert_close(block, lin.weight.grad, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("causal", [False, True], ids=["padding", "causal"])
@pytest.mark.parametrize("length", [FEW, MANY])
def test_sdpa_bf16_training_path_equals_the_fp32_reference(length: int, causal: bool,
                                                           matmul_calls: list[int]) -> None:
    """bf16 autocast training on CPU takes the two-matmul path (faster backward there): the same
    outputs and input gradients as the fp32 formula, within bf16 rounding (8 mantissa bits)."""
    attn = registry.get("attention", "sdpa")(D, HEADS, 0.0).train()
    x, pad = inputs(length)
    blocked = torch.ones(length, length, dtype=torch.bool).triu(1) if causal else pad[:, None, None, :]
    mask = make_mask("-inf", float("-inf")).build(blocked, torch.bfloat16, is_causal=causal)
    q, k, v = separate(attn.qkv, 3)

    def bf16(t: Tensor) -> Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return attn(t, mask=mask).float()

    got = run(bf16, [x], grad=True)
    check_path("sdpa", matmul_calls, length, grad=True, bf16=True)
    key_pad = None if causal else pad
    want = run(lambda t: reference(q, k, v, attn.out, t, t, key_pad, causal=causal), [x], grad=True)
    scale = want[0].abs().max().item()
    torch.testing.assert_close(got[0], want[0], rtol=0, atol=0.02 * scale)
    torch.testing.assert_close(got[1][0], want[1][0], rtol=0, atol=0.03 * want[1][0].abs().max().item())
