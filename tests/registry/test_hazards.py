"""What each mask fill does where it can go wrong: fully masked rows and half precision.

The expectations here are the table in registry/masking.py's docstring; if torch changes one of
them this file fails and the table must be updated with it.
"""

from __future__ import annotations

import pytest
import torch

import registry
from ablate.engine.builders import build_model
from ablate.spec.experiment import ModelSpec
from registry.attention import SMALL_QUERY
from registry.masking import clamp_fill, make_mask

# Small tensors: one thread is faster and makes reductions bitwise repeatable (reference values).
pytestmark = pytest.mark.usefixtures("single_thread")

# (fill, attention) -> what a fully masked query row becomes, fp32 (and bf16).
FULLY_MASKED = {
    ("-inf", "explicit"): "nan",
    ("-inf", "sdpa"): "zeros",
    ("-1e9", "explicit"): "uniform",
    ("-1e9", "sdpa"): "uniform",
    ("-1e10", "explicit"): "uniform",
    ("-1e10", "sdpa"): "uniform",
    ("-1e6", "explicit"): "uniform",
    ("-1e6", "sdpa"): "unmasked",  # -1e6 + score keeps the score differences in fp32
}
FILLS = sorted({fill for fill, _ in FULLY_MASKED})


def _qkv(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    q = 3 * torch.randn(2, 2, 3, 8, generator=g)  # (B, heads, Tq, d_head), scores well below 32
    k = 3 * torch.randn(2, 2, 4, 8, generator=g)
    v = torch.randn(2, 2, 4, 8, generator=g)
    return q.to(dtype), k.to(dtype), v.to(dtype)


def _blocked() -> torch.Tensor:
    blocked = torch.zeros(2, 1, 3, 4, dtype=torch.bool)
    blocked[0, 0, 1] = True  # query row 1 of sentence 0 sees nothing
    blocked[:, 0, 2, 2:] = True  # a partially masked row
    return blocked


# registry/attention.py's SDPAttention.attend takes two paths on CPU: F.scaled_dot_product_attention (the
# fused kernel) or a matmul fallback (bf16 with grad enabled: training; <= SMALL_QUERY queries per row under
# no_grad: decoding). Each "sdpa" case runs both, named so, and checks it ran the path its name says.
IMPLEMENTATIONS = ["explicit", "sdpa-fused", "sdpa-matmul"]


def _attend(impl: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, blocked: torch.Tensor,
            fill: str) -> torch.Tensor:
    """``impl``'s output for the first ``blocked.size(2)`` query rows: (B, heads, Tq, d_head) as float."""
    attention = impl.split("-")[0]
    attn = registry.get("attention", attention)(16, 2)
    rows = q.size(-2)
    if impl == "sdpa-fused":
        # Under no_grad with more than SMALL_QUERY queries per row, every dtype reaches the fused kernel;
        # the extra (unmasked) query rows change nothing in the rows under test (attention is per row).
        extra = SMALL_QUERY + 1 - rows
        q = torch.cat([q, q[:, :, :1].expand(-1, -1, extra, -1)], dim=2)
        blocked = torch.cat([blocked, blocked[:, :, -1:].expand(-1, -1, extra, -1) & False], dim=2)
    mask = make_mask(fill, float(fill)).build(blocked, q.dtype)
    fallback_calls: list[int] = []
    if attention == "sdpa":
        matmul = attn._attend_matmul  # a spy: the real fallback, counted
        attn._attend_matmul = lambda *a: (fallback_calls.append(1), matmul(*a))[1]  # type: ignore[method-assign]
    with torch.no_grad():  # sdpa-matmul: the decoding condition (<= SMALL_QUERY queries), for every dtype
        out = attn.attend(q, k, v, mask).float()
    if attention == "sdpa":
        assert len(fallback_calls) == (impl == "sdpa-matmul"), f"{impl} did not run the path it names"
    return out[:, :, :rows]


def _classify(row: torch.Tensor, v: torch.Tensor, unmasked: torch.Tensor) -> str:
    if torch.isnan(row).any():
        return "nan"
    if torch.equal(row, torch.zeros_like(row)):
        return "zeros"
    if torch.allclose(row, v.mean(dim=1), atol=1e-2):  # (heads, d_head): uniform weights over the keys
        return "uniform"
    if torch.allclose(row, unmasked, atol=3e-2):  # up to the rounding of score + fill
        return "unmasked"
    return "other"


def test_every_registered_mask_has_documented_hazards() -> None:
    for name in registry.names("mask"):
        assert name in FILLS, f"add the fully-masked-row behaviour of mask {name!r} to this file and its docs"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("fill", FILLS)
def test_fully_masked_row(fill: str, impl: str, dtype: torch.dtype) -> None:
    attention = impl.split("-")[0]
    q, k, v = _qkv(dtype)
    out = _attend(impl, q, k, v, _blocked(), fill)  # (B, heads, Tq, d_head)
    reference = torch.softmax(q.float() @ k.float().transpose(-1, -2) / 8**0.5, dim=-1)
    unmasked = reference @ v.float()
    assert _classify(out[0, :, 1], v[0].float(), unmasked[0, :, 1]) == FULLY_MASKED[(fill, attention)]
    # Every other row is finite and the same for every fill: blocked keys get exactly zero weight.
    partial = reference.masked_fill(_blocked(), 0.0)
    partial = partial / partial.sum(-1, keepdim=True) @ v.float()
    tol = 1e-5 if dtype == torch.float32 else 3e-2
    torch.testing.assert_close(out[0, :, [0, 2]], partial[0, :, [0, 2]], atol=tol, rtol=tol)
    torch.testing.assert_close(out[1], partial[1], atol=tol, rtol=tol)


def test_explicit_fully_masked_weights_are_uniform_with_a_finite_fill() -> None:
    attn = registry.get("attention", "explicit")(16, 2)
    attn.keep_weights = True
    q, k, v = _qkv(torch.float32)
    attn.attend(q, k, v, make_mask("-1e9", -1e9).build(_blocked(), torch.float32))
    assert attn.last_weights is not None
    torch.testing.assert_close(attn.last_weights[0, :, 1], torch.full((2, 4), 0.25))


# ---------------------------------------------------------------- half precision
def test_minus_1e9_overflows_fp16_and_the_fill_is_clamped() -> None:
    with pytest.raises(RuntimeError, match="overflow"):
        torch.zeros(2, dtype=torch.float16).masked_fill(torch.tensor([True, False]), -1e9)
    finite = make_mask("-1e9", -1e9)
    assert finite.fill_for(torch.float16) == torch.finfo(torch.float16).min / 2 == -32752.0
    assert finite.fill_for(torch.bfloat16) == -1e9 and finite.fill_for(torch.float32) == -1e9
    assert clamp_fill(float("-inf"), torch.float16) == float("-inf")
    scores = torch.zeros(3, dtype=torch.float16)
    mask = finite.build(torch.tensor([True, False, True]), torch.float16)  # what the model hands attention
    assert mask.apply(scores).tolist() == [-32752.0, 0.0, -32752.0]  # explicit attention's path
    assert mask.bias is not None and mask.bias.dtype == torch.float16
    assert mask.bias.tolist() == [-32752.0, 0.0, -32752.0]  # sdpa's additive path


# fp16: a finite fill is clamped to -32752 (fill_for), -inf is written as is.
FULLY_MASKED_FP16 = {
    ("-inf", "explicit"): "nan",
    ("-inf", "sdpa"): "zeros",
    ("-1e9", "explicit"): "uniform",  # the clamped fill still dwarfs every score
    ("-1e9", "sdpa"): "unmasked",  # sdpa's fp32 accumulation keeps the score differences next to -32752
    ("-1e10", "explicit"): "uniform",
    ("-1e10", "sdpa"): "unmasked",
    ("-1e6", "explicit"): "uniform",
    ("-1e6", "sdpa"): "unmasked",
}


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("fill", FILLS)
def test_fp16_fully_masked_row(fill: str, impl: str) -> None:
    """fp16, every fill: no overflow error; the fully masked row as the table says; every other row finite
    and equal to the fp32 masked softmax (blocked keys get zero weight with the clamped fill too)."""
    assert {f for f, _ in FULLY_MASKED_FP16} == set(FILLS)
    attention = impl.split("-")[0]
    q, k, v = _qkv(torch.float16)
    out = _attend(impl, q, k, v, _blocked(), fill)
    reference = torch.softmax(q.float() @ k.float().transpose(-1, -2) / 8**0.5, dim=-1)
    unmasked = reference @ v.float()
    assert _classify(out[0, :, 1], v[0].float(), unmasked[0, :, 1]) == FULLY_MASKED_FP16[(fill, attention)]
    partial = reference.masked_fill(_blocked(), 0.0)
    partial = partial / partial.sum(-1, keepdim=True) @ v.float()
    torch.testing.assert_close(out[0, :, [0, 2]], partial[0, :, [0, 2]], atol=3e-2, rtol=3e-2)
    torch.testing.assert_close(out[1], partial[1], atol=3e-2, rtol=3e-2)


def _tiny(mask: str, attention: str) -> torch.nn.Module:
    spec = ModelSpec(d_model=16, heads=2, d_ff=32, encoder_layers=1, decoder_layers=1, dropout=0.0,
                     mask=mask, attention=attention)
    return build_model(spec, 13, 13, seed=0).eval()


def _batch(src_len: int = 7, tgt_len: int = 5) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    src = torch.randint(3, 13, (3, src_len), generator=g)
    src[1, 4:] = 0
    src[2, 2:] = 0
    tgt = torch.randint(3, 13, (3, tgt_len), generator=g)
    tgt[2, 3:] = 0
    return src, tgt


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("mask", ["-1e9", "-1e6", "-inf"])
def test_half_precision_autocast_forward(mask: str, impl: str, dtype: torch.dtype,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Under no_grad, sentences longer than SMALL_QUERY reach sdpa's fused kernel in every attention of the
    model; short ones take the matmul fallback in every one (the spy counts the real fallback's calls)."""
    attention = impl.split("-")[0]
    model = _tiny(mask, attention)
    fused = impl == "sdpa-fused"
    src, tgt = _batch(12, 10) if fused else _batch()
    assert fused == (min(src.size(1), tgt.size(1)) > SMALL_QUERY)
    calls: list[int] = []
    sdpa = registry.get("attention", "sdpa")
    matmul = sdpa._attend_matmul
    monkeypatch.setattr(sdpa, "_attend_matmul", lambda *a: (calls.append(1), matmul(*a))[1])
    with torch.no_grad():
        full = model(src, tgt)
        calls.clear()
        with torch.autocast("cpu", dtype=dtype):
            half = model(src, tgt)  # -1e9 in fp16 would raise without the clamp
    attentions = 3  # encoder self, decoder self, decoder cross: one layer each
    assert len(calls) == (attentions if impl == "sdpa-matmul" else 0)
    assert half.dtype == dtype
    assert torch.isfinite(half).all()
    torch.testing.assert_close(half.float(), full, atol=0.1, rtol=0.05)


@pytest.mark.parametrize("attention", ["explicit", "sdpa"])
@pytest.mark.parametrize("mask", ["-inf", "-1e9"])
def test_empty_source_sentence(mask: str, attention: str) -> None:
    """An all-padding source: the real-world fully-masked row. Only -inf with explicit attention gives
    NaN, and only for that sentence (the loss of the whole batch would still be NaN)."""
    model = _tiny(mask, attention)
    src, tgt = _batch()
    src[1] = 0
    with torch.no_grad():
        logits = model(src, tgt)
    broken = torch.isnan(logits).any(dim=(1, 2)).tolist()
    assert broken == [False, mask == "-inf" and attention == "explicit", False]
    assert torch.isfinite(logits[[0, 2]]).all()
