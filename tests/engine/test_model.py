"""The assembled encoder-decoder: masks, controlled init, reference values, embeddings, attention maps."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import registry
from ablate.engine.builders import build_lm, build_model
from ablate.engine.encoder_decoder import Seq2SeqTransformer
from ablate.spec.experiment import ModelSpec

# Small tensors: one thread is faster and makes reductions bitwise repeatable (reference values).
pytestmark = pytest.mark.usefixtures("single_thread")

V = 16
SMALL = {"d_model": 16, "heads": 2, "d_ff": 32, "encoder_layers": 2, "decoder_layers": 2, "dropout": 0.0}
# Every registered component of every declared axis.
AXES = [(axis.kind, name) for axis in registry.axes() for name in registry.names(axis.kind)]


def tiny(**overrides: object) -> Seq2SeqTransformer:
    seed = int(overrides.pop("seed", 0))  # type: ignore[call-overload]
    return build_model(ModelSpec(**{**SMALL, **overrides}), V, V, seed=seed).eval()


def _sentences() -> tuple[list[list[int]], list[list[int]]]:
    srcs = [[5, 9, 3, 12, 7], [4, 8, 15], [6, 11, 10, 13, 14, 7, 9], [3]]
    tgts = [[1, 6, 9, 14], [1, 3, 7, 7, 12, 5], [1, 8], [1, 4, 4]]
    return srcs, tgts


def _pad(rows: list[list[int]]) -> torch.Tensor:
    out = torch.zeros(len(rows), max(map(len, rows)), dtype=torch.long)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row)
    return out


def test_forward_shapes() -> None:
    model = tiny()
    src, tgt = _pad(_sentences()[0]), _pad(_sentences()[1])
    assert model(src, tgt).shape == (4, tgt.size(1), V)
    enc = model.encode(src)
    assert enc.memory.shape == (4, src.size(1), 16) and enc.src_pad.dtype == torch.bool
    assert enc.src_pad.sum().item() == (src == 0).sum().item()
    wide = build_model(ModelSpec(**SMALL), 11, 23)
    assert wide(src.clamp(max=10), tgt).shape == (4, tgt.size(1), 23)


def test_the_source_mask_is_built_once_by_encode() -> None:
    """encode's key-padding mask is the one the decoder's cross-attention reads (no rebuild per decode
    call or per cache); a decode in another compute dtype (autocast on) builds its own in that dtype."""
    model = tiny(mask="-1e9")
    src, tgt = _pad(_sentences()[0]), _pad(_sentences()[1])
    enc = model.encode(src)
    assert enc.key_mask is not None and enc.key_mask.bias is not None
    assert enc.key_mask.bias.shape == (4, 1, 1, src.size(1)) and enc.key_mask.bias.dtype == torch.float32
    assert torch.equal(enc.key_mask.blocked[:, 0, 0], enc.src_pad)  # type: ignore[index]
    assert model.init_cache(enc).cross_mask is enc.key_mask
    picked = enc.index_select(torch.tensor([2, 0]))
    assert torch.equal(picked.key_mask.bias, enc.key_mask.bias[[2, 0]])  # type: ignore[union-attr,index]
    with torch.no_grad():
        torch.testing.assert_close(model.decode(tgt, enc), model(src, tgt))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            cache = model.init_cache(enc)  # fp32 encoder state, bf16 decoding
            assert cache.cross_mask.bias is not None and cache.cross_mask.bias.dtype == torch.bfloat16
            assert torch.isfinite(model.decode(tgt, enc)).all()


@pytest.mark.parametrize("mask", ["-inf", "-1e9"])
@pytest.mark.parametrize("attention", ["sdpa", "explicit"])
def test_padding_does_not_change_real_positions(attention: str, mask: str) -> None:
    model = tiny(attention=attention, mask=mask)
    srcs, tgts = _sentences()
    with torch.no_grad():
        batched = model(_pad(srcs), _pad(tgts))
        for i, (s, t) in enumerate(zip(srcs, tgts, strict=True)):
            alone = model(torch.tensor([s]), torch.tensor([t]))[0]
            torch.testing.assert_close(batched[i, : len(t)], alone, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("attention", ["sdpa", "explicit"])
def test_future_target_tokens_do_not_change_earlier_logits(attention: str) -> None:
    model = tiny(attention=attention)
    src = _pad(_sentences()[0])
    tgt = torch.randint(3, V, (4, 6), generator=torch.Generator().manual_seed(0))
    changed = tgt.clone()
    changed[:, 3:] = torch.randint(3, V, (4, 3), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        a, b = model(src, tgt), model(src, changed)
    torch.testing.assert_close(a[:, :3], b[:, :3], atol=1e-6, rtol=1e-6)
    assert (a[:, 3:] - b[:, 3:]).abs().max() > 1e-3  # later positions do see the change


def _params(model: nn.Module) -> dict[tuple[str, tuple[int, ...]], torch.Tensor]:
    return {(n, tuple(p.shape)): p.detach() for n, p in model.named_parameters()}


# Controlled init per variant: tests/registry/test_contract.py (every variant of every axis).


@pytest.mark.parametrize("option", [{"embeddings": "tied"}, {"init": "default"}, {"shared_layer_norm": True,
                                                                                 "residual": "post_norm"}])
def test_controlled_init_for_options(option: dict[str, object]) -> None:
    base, variant = _params(tiny(seed=5)), _params(tiny(seed=5, **option))
    same = [k for k in base.keys() & variant.keys() if torch.equal(base[k], variant[k])]
    if option.get("init") == "default":  # another scheme: only norms and biases (module defaults) agree
        assert all(k[0].endswith("bias") or "norm" in k[0] for k in same)
        assert any(k[0].endswith("bias") and "norm" not in k[0] for k in same)
    else:
        assert set(same) == base.keys() & variant.keys()


@pytest.mark.parametrize("init", ["xavier", "default"])
def test_conv1d_ffn_starts_from_the_linear_ffn_weights(init: str) -> None:
    """The two FFNs are the same function given the same weights; controlled init gives them
    the same weights (a (d_ff, d, 1) kernel seeded like the (d_ff, d) matrix), so the models agree at init."""
    linear, conv = tiny(seed=7, init=init), tiny(seed=7, init=init, ffn="conv1d")
    layers = lambda m: [*m.encoder.layers, *m.decoder.layers]  # noqa: E731
    pairs = [(a.ffn, b.ffn) for a, b in zip(layers(linear), layers(conv), strict=True)]
    for lin_ffn, conv_ffn in pairs:
        for name in ("w1", "w2"):
            assert getattr(conv_ffn, name).weight.shape[-1] == 1
            assert torch.equal(getattr(conv_ffn, name).weight[:, :, 0], getattr(lin_ffn, name).weight), name
            assert torch.equal(getattr(conv_ffn, name).bias, getattr(lin_ffn, name).bias), name
    src, tgt = _pad(_sentences()[0]), _pad(_sentences()[1])
    with torch.no_grad():
        torch.testing.assert_close(conv(src, tgt), linear(src, tgt), atol=1e-5, rtol=1e-5)
        other_seed = tiny(seed=8, init=init, ffn="conv1d")(src, tgt)
    assert (other_seed - linear(src, tgt)).abs().max() > 1e-3  # the seed matters: the check is not vacuous


def test_xavier_bound_of_fused_projections_is_per_chunk() -> None:
    """A fused (3d, d) QKV weight is drawn like three (d, d) Xavier matrices, as separate Linears would be."""
    w = tiny().encoder.layers[0].self_attn.qkv.weight
    bound = (6 / (16 + 16)) ** 0.5
    assert w.abs().max() <= bound and w.abs().max() > 0.9 * bound


# Logits of the default ModelSpec() (d 128, 4 heads, 2+2 layers) with seed 0, computed once.
REF_SRC = [[5, 9, 3, 12, 7, 0, 0], [4, 4, 8, 15, 6, 11, 10]]
REF_TGT = [[1, 6, 9, 14, 0], [1, 3, 7, 7, 12]]
REF_LOGITS_0 = [[0.92288, 0.33923, -1.38644, 2.53590], [-0.45428, -0.01444, 1.43899, 0.53614]]
REF_LOGITS_1 = [-0.14382, 1.58011, 1.70957, -1.19925]
# Per variant (default spec with one axis changed): sum of logits[0, 1], logits[1, -1, 3], mean |logits|.
REF_VARIANTS = {
    ("residual", "post_norm"): [7.68539, -1.20303, 1.13004],
    ("residual", "pre_norm"): [7.47105, -1.19925, 1.06454],
    ("positions", "learned"): [6.0693, -1.67026, 1.01955],
    ("positions", "sinusoidal"): [7.47105, -1.19925, 1.06454],
    ("ffn", "conv1d"): [7.47105, -1.19925, 1.06454],  # = linear: the same weights (kernel-1 seeding)
    ("ffn", "linear"): [7.47105, -1.19925, 1.06454],
    ("norm", "builtin"): [7.47105, -1.19925, 1.06454],
    ("norm", "custom"): [7.43633, -1.19197, 1.06018],
    ("mask", "-1e9"): [7.47105, -1.19925, 1.06454],
    ("mask", "-inf"): [7.47105, -1.19925, 1.06454],
    ("attention", "explicit"): [7.47105, -1.19925, 1.06454],
    ("attention", "sdpa"): [7.47105, -1.19925, 1.06454],
    # the variants added beyond the tutorials' axes, pinned when they were added
    ("residual", "deepnorm"): [2.57882, -0.144864, 1.11558],
    ("residual", "rezero"): [5.14926, -0.157155, 1.68044],
    ("residual", "sandwich"): [6.6104, -0.934681, 1.0465],
    ("positions", "alibi"): [6.54726, -1.31224, 1.05516],  # v2: the directional encoder
    ("positions", "none"): [6.16339, -1.71643, 1.02796],
    ("positions", "rope"): [5.40307, -1.74048, 1.03645],
    ("positions", "t5_bias"): [6.41001, -1.74658, 1.02149],  # v2: T5 own init of its table
    ("ffn", "geglu"): [5.69851, 0.0260924, 1.12919],
    ("ffn", "swiglu"): [5.97955, 0.0888733, 1.12856],
    ("activation", "gelu"): [6.79836, -1.26634, 1.04216],
    ("activation", "relu"): [7.47105, -1.19925, 1.06454],
    ("activation", "silu"): [6.28209, -1.19083, 1.03468],
    ("norm", "rms"): [6.70341, -1.33716, 1.01522],
    ("norm", "scale"): [6.70341, -1.33716, 1.01522],  # = rms at init: g = sqrt(d) vs ones, see equivalence
    ("attention", "qk_norm"): [6.30226, -1.04131, 1.04658],  # v2: g starts at g0 = 12
    ("embeddings", "separate"): [7.47105, -1.19925, 1.06454],
    ("embeddings", "shared"): [6.79169, 1.21219, 1.24074],
    ("embeddings", "tied"): [10.6153, -2.83046, 1.46122],
    ("embeddings", "tied_decoder"): [5.18913, -0.660119, 1.4123],
}


def test_reference_logits_of_the_default_model() -> None:
    model = build_model(ModelSpec(), V, V, seed=0).eval()
    with torch.no_grad():
        logits = model(torch.tensor(REF_SRC), torch.tensor(REF_TGT))
    torch.testing.assert_close(logits[0, :2, :4], torch.tensor(REF_LOGITS_0), atol=2e-4, rtol=0)
    torch.testing.assert_close(logits[1, -1, :4], torch.tensor(REF_LOGITS_1), atol=2e-4, rtol=0)


@pytest.mark.parametrize("kind,name", sorted(REF_VARIANTS), ids=[f"{k}:{n}" for k, n in sorted(REF_VARIANTS)])
def test_reference_values_per_variant(kind: str, name: str) -> None:
    model = build_model(ModelSpec(**{kind: name}), V, V, seed=0).eval()
    with torch.no_grad():
        logits = model(torch.tensor(REF_SRC), torch.tensor(REF_TGT))
    got = [logits[0, 1].sum().item(), logits[1, -1, 3].item(), logits.abs().mean().item()]
    assert got == pytest.approx(REF_VARIANTS[(kind, name)], abs=5e-4)


def test_shared_and_tied_embeddings_share_storage() -> None:
    separate, shared, tied = tiny(), tiny(embeddings="shared"), tiny(embeddings="tied")
    assert separate.src_embed.weight.data_ptr() != separate.tgt_embed.weight.data_ptr()
    assert shared.src_embed.weight is shared.tgt_embed.weight
    assert shared.generator.weight.data_ptr() != shared.tgt_embed.weight.data_ptr()
    assert tied.generator.weight is tied.tgt_embed.weight is tied.src_embed.weight
    assert separate.num_parameters() - shared.num_parameters() == V * 16
    assert shared.num_parameters() - tied.num_parameters() == V * 16
    # Still one tensor after a training step.
    tied.train()
    opt = torch.optim.SGD(tied.parameters(), lr=0.1)
    tied(_pad(_sentences()[0]), _pad(_sentences()[1])).sum().backward()
    opt.step()
    assert tied.generator.weight.data_ptr() == tied.src_embed.weight.data_ptr()
    with pytest.raises(ValueError, match="one vocabulary"):
        build_model(ModelSpec(**SMALL, embeddings="shared"), 11, 12)


def test_attention_maps() -> None:
    model = tiny(attention="explicit")
    src, tgt = torch.tensor([[5, 9, 3, 0, 0]]), torch.tensor([[1, 6, 9, 14]])
    maps = model.attention_maps(src, tgt)
    assert set(maps) == {"encoder_self", "decoder_self", "cross"}
    expected = {"encoder_self": (2, 5, 5), "decoder_self": (2, 4, 4), "cross": (2, 4, 5)}
    for key, shape in expected.items():
        assert len(maps[key]) == 2  # one per layer
        for w in maps[key]:
            assert w.shape == shape
            torch.testing.assert_close(w.sum(-1), torch.ones(shape[:2]))
    assert maps["cross"][0][..., 3:].abs().max() == 0  # source padding gets no attention
    assert maps["decoder_self"][1].triu(1).abs().max() == 0  # causal
    assert model.encoder.layers[0].self_attn.last_weights is None  # nothing kept afterwards
    with pytest.raises(ValueError, match="explicit"):
        tiny(attention="sdpa").attention_maps(src, tgt)


def test_attention_maps_of_a_decoder_only_model() -> None:
    """The same heat-map hook on the decoder-only stack: one causal self-attention map per layer."""
    spec = ModelSpec(**{**SMALL, "arch": "decoder_only", "attention": "explicit"})
    model = build_lm(spec, 17, seed=1)
    ids = torch.tensor([[5, 9, 3, 7, 2, 11]])
    maps = model.attention_maps(ids)
    assert set(maps) == {"decoder_self"} and len(maps["decoder_self"]) == spec.decoder_layers
    for w in maps["decoder_self"]:
        assert w.shape == (spec.heads, 6, 6)
        torch.testing.assert_close(w.sum(-1), torch.ones(spec.heads, 6))
        assert w.triu(1).abs().max() == 0  # a query never sees a later key
    assert model.decoder.layers[0].self_attn.last_weights is None and model.training
    with pytest.raises(ValueError, match="explicit"):
        build_lm(ModelSpec(**{**SMALL, "arch": "decoder_only"}), 17).attention_maps(ids)


def test_positions_beyond_max_positions_are_an_error() -> None:
    model = tiny(max_positions=8, positions="learned")
    with pytest.raises(ValueError, match="max_positions"):
        model(torch.ones(1, 9, dtype=torch.long), torch.ones(1, 3, dtype=torch.long))
