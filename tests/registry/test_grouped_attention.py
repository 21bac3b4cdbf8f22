"""Grouped keys and values (``model.kv_heads``: Ainslie et al. 2023, GQA; Shazeer 2019, MQA) and the
sliding window (``model.window``: Beltagy et al. 2020; Jiang et al. 2023), for every attention variant:
kv_heads = heads is multi-head attention itself; GQA equals multi-head attention whose key/value heads
are repeated within each group (Ainslie et al.'s conversion, exact when the heads are equal); the KV cache
holds kv_heads / heads of MHA's; cached decoding equals the full forward; a window hides what is outside
it and changes nothing when it covers the whole sequence."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import registry
from ablate.engine.builders import build_lm, build_model
from ablate.engine.decoder_only import DecoderOnlyLM
from ablate.spec.experiment import ModelSpec
from registry.attention import MultiHeadAttention

pytestmark = pytest.mark.usefixtures("single_thread")
V = 23
ATTENTION = registry.names("attention")
SIZES = {"d_model": 32, "heads": 4, "d_ff": 48, "dropout": 0.0, "max_positions": 64}


def lm(attention: str, seed: int = 0, **extra: object) -> DecoderOnlyLM:
    spec = ModelSpec(arch="decoder_only", decoder_layers=2, attention=attention, **SIZES, **extra)
    return build_lm(spec, V, seed=seed).eval()


def seq2seq(attention: str, seed: int = 0, **extra: object) -> nn.Module:
    spec = ModelSpec(encoder_layers=1, decoder_layers=2, attention=attention, **SIZES, **extra)
    return build_model(spec, V, V, seed=seed).eval()


def _ids(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(3, V, shape, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("attention", ATTENTION)
def test_kv_heads_equal_to_heads_is_multi_head_attention(attention: str) -> None:
    """Same parameters (names, shapes, initial values under the same seed), same logits."""
    mha, same = lm(attention), lm(attention, kv_heads=4)
    shapes = {k: v.shape for k, v in mha.state_dict().items()}
    assert shapes == {k: v.shape for k, v in same.state_dict().items()}
    for (name, a), (_, b) in zip(mha.state_dict().items(), same.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    ids = _ids(2, 11)
    with torch.no_grad():
        assert torch.equal(mha(ids), same(ids))
        src, tgt = _ids(2, 7, seed=1), _ids(2, 5, seed=2)
        assert torch.equal(seq2seq(attention)(src, tgt), seq2seq(attention, kv_heads=4)(src, tgt))


def _repeat_kv(model: nn.Module, grouped: nn.Module) -> None:
    """Load ``grouped``'s weights into the multi-head ``model``, each key/value head repeated for the query
    heads of its group (query head i reads kv head i // groups)."""
    state = grouped.state_dict()
    out = {}
    modules = dict(grouped.named_modules())
    for name, value in state.items():
        owner = modules[name.rsplit(".", 2)[0]] if name.count(".") >= 2 else None
        fused_names = ("qkv.weight", "qkv.bias", "kv.weight", "kv.bias")
        if isinstance(owner, MultiHeadAttention) and name.endswith(fused_names):
            d, dh, kv, g = owner.d_model, owner.d_head, owner.kv_heads, owner.groups
            fused = name.rsplit(".", 1)[0].endswith("qkv")
            q, rest = (value[:d], value[d:]) if fused else (None, value)
            k, v = rest.chunk(2)
            k, v = (t.unflatten(0, (kv, dh)).repeat_interleave(g, dim=0).flatten(0, 1) for t in (k, v))
            value = torch.cat([q, k, v] if q is not None else [k, v])
        out[name] = value
    model.load_state_dict(out)


@pytest.mark.parametrize("attention", ATTENTION)
@pytest.mark.parametrize("kv_heads", [1, 2])
def test_grouped_attention_equals_mha_with_repeated_key_value_heads(attention: str, kv_heads: int) -> None:
    ids = _ids(3, 10)
    grouped, mha = lm(attention, kv_heads=kv_heads), lm(attention)
    _repeat_kv(mha, grouped)
    with torch.no_grad():
        torch.testing.assert_close(grouped(ids), mha(ids), rtol=1e-5, atol=1e-5)
    # the encoder-decoder's self- and cross-attention too
    g2, m2 = seq2seq(attention, kv_heads=kv_heads), seq2seq(attention)
    _repeat_kv(m2, g2)
    src, tgt = _ids(2, 8, seed=3), _ids(2, 6, seed=4)
    with torch.no_grad():
        torch.testing.assert_close(g2(src, tgt), m2(src, tgt), rtol=1e-5, atol=1e-5)


def test_grouped_projections_are_smaller_and_xavier_per_chunk() -> None:
    model = lm("sdpa", kv_heads=1)
    qkv = model.attention_modules()["decoder_self"][0].qkv.weight.detach()  # (d + 2 d_head, d)
    assert tuple(qkv.shape) == (32 + 2 * 8, 32)
    # Q's chunk is drawn with Q's Xavier bound, K's and V's with their narrower fan-out's
    bound_q, bound_kv = (6 / (32 + 32)) ** 0.5, (6 / (32 + 8)) ** 0.5
    assert float(qkv[:32].abs().max()) <= bound_q < float(qkv[32:].abs().max()) <= bound_kv


@pytest.mark.parametrize("attention", ATTENTION)
def test_the_kv_cache_of_mqa_is_one_heads_th_of_mhas(attention: str) -> None:
    """After decoding the same 12 tokens: MQA's cache holds 1/heads of MHA's bytes, GQA-2 half of them."""
    ids = _ids(2, 12)
    sizes = {}
    for kv in (4, 2, 1):
        model = lm(attention, kv_heads=kv)
        cache = model.init_cache()
        with torch.no_grad():
            for t in range(ids.size(1)):
                model(ids[:, t:t + 1], cache=cache, start_pos=t)
        sizes[kv] = cache.nbytes
        assert cache.nbytes == 2 * 12 * model.kv_cache_bytes_per_token()  # 2 rows x 12 tokens
    assert sizes[1] * 4 == sizes[4] and sizes[2] * 2 == sizes[4]
    assert sizes[4] == 2 * 2 * 2 * 12 * 32 * 4  # rows x layers x (K, V) x tokens x d_model x fp32 bytes


@pytest.mark.parametrize("attention", ATTENTION)
@pytest.mark.parametrize("extra", [{"kv_heads": 1}, {"kv_heads": 2, "positions": "rope"},
                                   {"window": 3}, {"window": 4, "kv_heads": 2, "positions": "alibi"}])
def test_cached_decoding_equals_the_full_forward(attention: str, extra: dict[str, object]) -> None:
    model = lm(attention, **extra)
    ids = _ids(2, 10)
    with torch.no_grad():
        full = model(ids)
        cache = model.init_cache()
        head = model(ids[:, :5], cache=cache, start_pos=0)  # a prompt in one call, then one at a time
        tail = [model(ids[:, t:t + 1], cache=cache, start_pos=t) for t in range(5, 10)]
    torch.testing.assert_close(torch.cat([head, *tail], dim=1), full, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("attention", ATTENTION)
def test_a_window_hides_the_tokens_before_it(attention: str) -> None:
    """With window W = 3 (one layer, no positions), position i reads tokens i-2..i only: changing token 2
    changes positions 2, 3 and 4 and leaves 5.. alone; a window wider than the sequence is no window."""
    spec = ModelSpec(arch="decoder_only", decoder_layers=1, attention=attention, window=3, positions="none",
                     **SIZES)
    model = build_lm(spec, V, seed=0).eval()
    ids = _ids(1, 9)
    changed = ids.clone()
    changed[0, 2] = (ids[0, 2] + 1 - 3) % (V - 3) + 3
    with torch.no_grad():
        a, b = model(ids), model(changed)
    assert torch.equal(a[0, 5:], b[0, 5:])  # positions 5.. see 3.. only
    assert not torch.allclose(a[0, 2:5], b[0, 2:5])  # positions 2, 3, 4 see token 2
    wide = lm(attention, window=64)
    with torch.no_grad():
        torch.testing.assert_close(wide(_ids(2, 20)), lm(attention)(_ids(2, 20)), rtol=0, atol=0)
