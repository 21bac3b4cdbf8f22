"""Variants that must agree do agree; the ones that must not, differ by the documented amount."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import registry
from registry.attention import SMALL_QUERY, ExplicitAttention, KVCache, SDPAttention
from registry.ffn import Conv1dFFN, LinearFFN
from registry.masking import make_mask
from registry.norm import BuiltinLayerNorm, CustomLayerNorm
from registry.residual import NormFactory, PostNorm, PreNorm

# Small tensors: one thread is faster and makes reductions bitwise repeatable (reference values).
pytestmark = pytest.mark.usefixtures("single_thread")

# Every registered fill plus the other tutorials' values (accepted by the spec as plain numbers).
MASKS = [*registry.names("mask"), "-1e6", "-1e10"]


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ---------------------------------------------------------------- ffn
def test_conv1d_ffn_equals_linear_given_the_same_weights() -> None:
    torch.manual_seed(0)
    lin, conv = LinearFFN(16, 40).eval(), Conv1dFFN(16, 40).eval()
    with torch.no_grad():
        for name in ("w1", "w2"):
            # (out, in) -> (out, in, kernel 1)
            getattr(conv, name).weight.copy_(getattr(lin, name).weight[:, :, None])
            getattr(conv, name).bias.copy_(getattr(lin, name).bias)
    x = torch.randn(3, 7, 16, generator=_gen())
    torch.testing.assert_close(conv(x), lin(x), atol=1e-6, rtol=1e-5)
    assert not torch.equal(LinearFFN(16, 40)(x), lin(x))  # the weights matter: the check is not vacuous


# ---------------------------------------------------------------- attention
def _attention_pair(cross: bool) -> tuple[SDPAttention, ExplicitAttention]:
    torch.manual_seed(0)
    sdpa = SDPAttention(32, 4, cross=cross).eval()
    explicit = ExplicitAttention(32, 4, cross=cross).eval()
    explicit.load_state_dict(sdpa.state_dict())  # same parameter names and shapes
    return sdpa, explicit


def _padding(lengths: list[int], total: int) -> torch.Tensor:
    return torch.arange(total)[None, :] >= torch.tensor(lengths)[:, None]  # (B, total) True at pads


@pytest.mark.parametrize("mask_name", MASKS)
def test_sdpa_equals_explicit_on_padding_and_causal_masks(mask_name: str) -> None:
    mask = make_mask(mask_name, float(mask_name))
    x = torch.randn(3, 6, 32, generator=_gen(1))
    memory = torch.randn(3, 9, 32, generator=_gen(2))
    src_pad = _padding([9, 5, 2], 9)[:, None, None, :]  # (B, 1, 1, S)
    causal = torch.ones(6, 6, dtype=torch.bool).triu(1)

    close = lambda a, b: torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)  # noqa: E731

    sdpa, explicit = _attention_pair(cross=False)
    key_mask = mask.build(src_pad, torch.float32)
    close(sdpa(memory, mask=key_mask), explicit(memory, mask=key_mask))
    causal_mask = mask.build(causal, torch.float32, is_causal=True)  # sdpa: is_causal; explicit: blocked
    close(sdpa(x, mask=causal_mask), explicit(x, mask=causal_mask))
    # Causal AND padding as one additive mask (what an incremental step with several tokens uses).
    both = mask.build(causal[None, None] | _padding([6, 4, 3], 6)[:, None, None, :], torch.float32)
    close(sdpa(x, mask=both), explicit(x, mask=both))

    sdpa, explicit = _attention_pair(cross=True)
    close(sdpa(x, memory, mask=key_mask), explicit(x, memory, mask=key_mask))


@pytest.mark.parametrize("mask_name", MASKS)
def test_sdpa_decoding_path_equals_its_fused_kernel(mask_name: str) -> None:
    """Inference with few queries per row (decoding) takes two matmuls instead of the fused kernel:
    the same outputs, with padding masks, for self- and cross-attention, and with a source cache."""
    mask = make_mask(mask_name, float(mask_name))
    x = torch.randn(3, SMALL_QUERY, 32, generator=_gen(4))  # as many queries as still take the matmuls
    memory = torch.randn(3, 9, 32, generator=_gen(5))
    self_mask = mask.build(_padding([SMALL_QUERY, 5, 2], SMALL_QUERY)[:, None, None, :], torch.float32)
    cross_mask = mask.build(_padding([9, 5, 2], 9)[:, None, None, :], torch.float32)
    sdpa, _ = _attention_pair(cross=False)
    fused = sdpa(x, mask=self_mask)  # grad enabled: the fused kernel
    with torch.no_grad():
        torch.testing.assert_close(sdpa(x, mask=self_mask), fused, atol=1e-5, rtol=1e-5)
    sdpa, _ = _attention_pair(cross=True)
    fused = sdpa(x, memory, mask=cross_mask)
    with torch.no_grad():
        cache = KVCache()
        decoded = sdpa(x, memory, mask=cross_mask, cache=cache)  # fills the cache ...
        assert cache.length == 9
        torch.testing.assert_close(sdpa(x, None, mask=cross_mask, cache=cache), decoded)  # ... then reads it
    torch.testing.assert_close(decoded, fused, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("attention", registry.names("attention"))
def test_minus_inf_equals_minus_1e9_when_no_row_is_fully_masked(attention: str) -> None:
    torch.manual_seed(0)
    attn = registry.get("attention", attention)(32, 4).eval()
    x = torch.randn(3, 7, 32, generator=_gen(3))
    blocked = _padding([7, 4, 1], 7)[:, None, None, :]
    inf = attn(x, mask=make_mask("-inf", float("-inf")).build(blocked, torch.float32))
    big = attn(x, mask=make_mask("-1e9", -1e9).build(blocked, torch.float32))
    # exp(-1e9 - max) underflows to exactly 0 in fp32, as exp(-inf) does: same probabilities, same output.
    torch.testing.assert_close(inf, big, atol=1e-7, rtol=0)
    unmasked = attn(x)
    assert (unmasked - inf).abs().max() > 1e-2  # the mask does something


# ---------------------------------------------------------------- norm
@pytest.mark.parametrize("affine", ["per_feature", "scalar"])
def test_custom_norm_is_the_tutorial_formula(affine: str) -> None:
    norm = CustomLayerNorm(24, eps=1e-6, affine=affine)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(norm.weight.shape, generator=_gen(4)))
        norm.bias.copy_(torch.randn(norm.bias.shape, generator=_gen(5)))
    assert norm.weight.shape == ((24,) if affine == "per_feature" else (1,))
    x = 3 * torch.randn(5, 24, generator=_gen(6)) + 1
    mean = x.sum(-1, keepdim=True) / 24
    std = torch.sqrt(((x - mean) ** 2).sum(-1, keepdim=True) / 23)  # unbiased
    expected = norm.weight * (x - mean) / (std + 1e-6) + norm.bias  # eps outside the root
    torch.testing.assert_close(norm(x), expected, atol=1e-6, rtol=1e-5)


def test_builtin_norm_is_torch_layer_norm() -> None:
    ours, ref = BuiltinLayerNorm(24, eps=1e-6), nn.LayerNorm(24, eps=1e-6)
    with torch.no_grad():
        ref.weight.copy_(torch.randn(24, generator=_gen(7)))
        ref.bias.copy_(torch.randn(24, generator=_gen(8)))
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(5, 24, generator=_gen(9))
    torch.testing.assert_close(ours(x), ref(x))
    scalar = BuiltinLayerNorm(24, eps=1e-6, affine="scalar")
    with torch.no_grad():
        scalar.weight.fill_(2.0)
        scalar.bias.fill_(-1.0)
    torch.testing.assert_close(scalar(x), 2.0 * F.layer_norm(x, (24,), eps=1e-6) - 1.0)


@pytest.mark.parametrize("d,max_gap", [(32, 6.0e-2), (128, 1.9e-2), (512, 5.0e-3)])
def test_custom_norm_differs_from_builtin_by_the_documented_gap(d: int, max_gap: float) -> None:
    """The numbers in CustomLayerNorm's docstring: relative gap 1 - sqrt((d-1)/d), max abs gap as listed."""
    x = torch.randn(4096, d, generator=_gen(0))
    builtin, custom = BuiltinLayerNorm(d)(x), CustomLayerNorm(d)(x)
    gap = (custom - builtin).abs()
    relative = (gap / builtin.abs().clamp_min(1e-3)).median().item()
    assert relative == pytest.approx(1 - math.sqrt((d - 1) / d), rel=0.01)
    assert 0.5 * max_gap < gap.max().item() < 1.5 * max_gap
    assert "1 - sqrt((d-1)/d)" in (CustomLayerNorm.__doc__ or "")


# ---------------------------------------------------------------- residual
def _sublayer() -> nn.Linear:
    torch.manual_seed(1)
    return nn.Linear(16, 16)


def test_pre_and_post_norm_match_their_formulas() -> None:
    x = torch.randn(2, 5, 16, generator=_gen(10))
    f = _sublayer()
    norm = BuiltinLayerNorm(16)
    with torch.no_grad():
        norm.weight.copy_(torch.rand(16, generator=_gen(11)) + 0.5)
        norm.bias.copy_(torch.randn(16, generator=_gen(12)))
    ln = lambda t: F.layer_norm(t, (16,), norm.weight, norm.bias, 1e-6)  # noqa: E731
    torch.testing.assert_close(PreNorm(NormFactory(lambda: norm), 0.0)(x, f), x + f(ln(x)))
    torch.testing.assert_close(PostNorm(NormFactory(lambda: norm), 0.0)(x, f), ln(x + f(x)))
    assert PreNorm.final_norm and not PostNorm.final_norm


def test_dropout_hits_only_the_sublayer_branch() -> None:
    """With a zero sub-layer, training-mode dropout must leave the residual path untouched."""
    x = torch.randn(2, 5, 16, generator=_gen(13))
    zero = lambda t: torch.zeros_like(t)  # noqa: E731
    norm = BuiltinLayerNorm(16)
    torch.testing.assert_close(PreNorm(NormFactory(lambda: norm), 0.5).train()(x, zero), x)
    post = PostNorm(NormFactory(lambda: norm), 0.5).train()
    torch.testing.assert_close(post(x, zero), F.layer_norm(x, (16,), eps=1e-6))


def test_shared_layer_norm_is_one_module_in_the_built_model() -> None:
    from ablate.engine.builders import build_model
    from ablate.spec.experiment import ModelSpec

    spec = ModelSpec(d_model=16, heads=2, d_ff=32, residual="post_norm", shared_layer_norm=True)
    model = build_model(spec, 11, 11)
    enc, dec = model.encoder.layers[0], model.decoder.layers[0]
    assert enc.attn_res.norm is enc.ffn_res.norm
    assert dec.attn_res.norm is dec.cross_res.norm is dec.ffn_res.norm
    assert isinstance(model.encoder.norm, nn.Identity)  # post-norm: no final stack norm
    separate = build_model(spec.model_copy(update={"shared_layer_norm": False}), 11, 11)
    norms = lambda m: sum(p.numel() for n, p in m.named_parameters() if ".norm." in n)  # noqa: E731
    # (weight + bias of d=16) x (1 norm saved per encoder layer + 2 per decoder layer) x 2 layers each
    assert norms(separate) - norms(model) == 2 * 16 * (1 + 2) * 2


# ---------------------------------------------------------------- dropout
def test_fast_dropout_is_nn_dropout_in_distribution() -> None:
    """registry.dropout.Dropout: drops ~p of the elements, scales the rest to stay unbiased, and its
    gradient is the same mask; eval mode and p=0 are the identity, like nn.Dropout."""
    from registry.dropout import Dropout, lane_threshold

    x = torch.randn(256, 512, generator=_gen(14)).requires_grad_(True)
    drop = Dropout(0.1).train()
    torch.manual_seed(0)
    y = drop(x)
    dropped = (y == 0).float().mean().item()
    p = lane_threshold(0.1) / 2**15
    assert p == pytest.approx(0.1, abs=1e-4)
    assert dropped == pytest.approx(p, abs=4 * math.sqrt(p * (1 - p) / x.numel()))  # within 4 sigma
    kept = y != 0
    torch.testing.assert_close(y[kept], x[kept] / (1 - p))
    y.backward(torch.ones_like(y))
    assert x.grad is not None
    torch.testing.assert_close(x.grad, kept.float() / (1 - p))
    torch.manual_seed(0)
    assert torch.equal(drop(x), y)  # seeded by torch's global generator, like nn.Dropout
    assert torch.equal(drop.eval()(x), x) and torch.equal(Dropout(0.0).train()(x), x)
    assert drop.state_dict() == nn.Dropout(0.1).state_dict() == {}
    # Masks are independent across lanes of one random word: neighbouring decisions uncorrelated.
    k = kept.flatten().float()
    assert abs(torch.corrcoef(torch.stack([k[:-1], k[1:]]))[0, 1].item()) < 0.02
