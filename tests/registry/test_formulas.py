"""Each variant added beyond the tutorials' five axes (RMSNorm, RoPE, ALiBi, ...) against the formula its
docstring cites, written out independently."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import registry
from ablate.engine.builders import build_model
from ablate.spec.experiment import ModelSpec
from registry.ffn import glu_hidden_size
from registry.positions import alibi_slopes, relative_buckets
from registry.residual import Depth, NormFactory, deepnorm_constants

pytestmark = pytest.mark.usefixtures("single_thread")


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ---------------------------------------------------------------- norms
def test_rms_norm_is_x_over_root_mean_square_times_gain() -> None:
    x = torch.randn(5, 12, generator=_gen(0))
    norm = registry.get("norm", "rms")(12, eps=1e-6)
    with torch.no_grad():
        norm.weight.copy_(torch.linspace(0.5, 2.0, 12))
    expected = x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-6) * torch.linspace(0.5, 2.0, 12)
    torch.testing.assert_close(norm(x), expected)
    assert not hasattr(norm, "bias")  # no re-centring, no bias


def test_scale_norm_is_g_times_x_over_its_l2_norm_with_g_starting_at_sqrt_d() -> None:
    x = torch.randn(5, 12, generator=_gen(1))
    norm = registry.get("norm", "scale")(12, eps=1e-6)
    assert norm.weight.item() == pytest.approx(math.sqrt(12))
    expected = math.sqrt(12) * x / x.norm(dim=-1, keepdim=True)
    torch.testing.assert_close(norm(x), expected)
    # the same function as RMSNorm at their initial gains (g = sqrt(d) vs ones), up to eps
    torch.testing.assert_close(norm(x), registry.get("norm", "rms")(12, eps=0.0)(x), atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------- residuals
def _sublayer() -> nn.Linear:
    torch.manual_seed(1)
    return nn.Linear(8, 8)


def test_sandwich_rezero_and_deepnorm_match_their_formulas() -> None:
    x = torch.randn(2, 3, 8, generator=_gen(2))
    f = _sublayer()
    ln = lambda t: F.layer_norm(t, (8,), eps=1e-6)  # noqa: E731
    norms = NormFactory(lambda: registry.get("norm", "builtin")(8, eps=1e-6))
    depth = Depth("encoder", 6, 6)
    sandwich = registry.get("residual", "sandwich")(norms, 0.0, depth=depth)
    torch.testing.assert_close(sandwich(x, f), x + ln(f(ln(x))))
    assert sandwich.final_norm and sandwich.norm is not sandwich.out_norm
    rezero = registry.get("residual", "rezero")(norms, 0.0, depth=depth)
    torch.testing.assert_close(rezero(x, f), x)  # alpha starts at 0: every layer is the identity
    with torch.no_grad():
        rezero.alpha.fill_(0.3)
    torch.testing.assert_close(rezero(x, f), x + 0.3 * f(x))
    deep = registry.get("residual", "deepnorm")(norms, 0.0, depth=depth)
    torch.testing.assert_close(deep(x, f), ln(deep.alpha * x + f(x)))
    assert not rezero.final_norm and not deep.final_norm


def test_deepnorm_constants_follow_the_encoder_decoder_table() -> None:
    """DeepNet table 1, N encoder / M decoder layers: 0.81 (N^4 M)^(1/16), 0.87 (N^4 M)^(-1/16);
    (3M)^(1/4), (12M)^(-1/4)."""
    enc = deepnorm_constants(Depth("encoder", 6, 6))
    dec = deepnorm_constants(Depth("decoder", 6, 6))
    assert enc == pytest.approx((0.81 * (6**5) ** (1 / 16), 0.87 * (6**5) ** (-1 / 16)))
    assert dec == pytest.approx((18 ** 0.25, 72 ** -0.25))
    assert enc[0] > 1 > enc[1] and dec[0] > 1 > dec[1]


def test_deepnorm_scales_value_output_and_ffn_weights_by_beta_only() -> None:
    small = {"d_model": 16, "heads": 2, "d_ff": 32, "encoder_layers": 2, "decoder_layers": 3}
    base = build_model(ModelSpec(**small, residual="post_norm"), 11, 11, seed=0)
    deep = build_model(ModelSpec(**small, residual="deepnorm"), 11, 11, seed=0)
    _, beta_enc = deepnorm_constants(Depth("encoder", 2, 3))
    _, beta_dec = deepnorm_constants(Depth("decoder", 2, 3))
    for stack, beta in ((0, beta_enc), (1, beta_dec)):
        b_layer = [base.encoder, base.decoder][stack].layers[0]
        d_layer = [deep.encoder, deep.decoder][stack].layers[0]
        qkv_b, qkv_d = b_layer.self_attn.qkv.weight, d_layer.self_attn.qkv.weight
        torch.testing.assert_close(qkv_d[:32], qkv_b[:32])  # queries and keys: gain 1
        torch.testing.assert_close(qkv_d[32:], beta * qkv_b[32:])  # values: beta
        torch.testing.assert_close(d_layer.self_attn.out.weight, beta * b_layer.self_attn.out.weight)
        torch.testing.assert_close(d_layer.ffn.w1.weight, beta * b_layer.ffn.w1.weight)
        torch.testing.assert_close(d_layer.self_attn.out.bias, b_layer.self_attn.out.bias)  # biases untouched


# ---------------------------------------------------------------- positions
def test_rope_rotates_feature_pairs_by_position_times_theta() -> None:
    rope = registry.get("positions", "rope")(8, 2, 32, 0.0, causal=False, rope_base=100.0)
    x = torch.randn(1, 2, 5, 4, generator=_gen(3))  # (B, heads, T, d_head 4)
    out = rope.attention(3, 5, 8, torch.device("cpu")).rotate(x)
    for t in range(5):
        m = 3 + t  # absolute position
        for i in range(2):
            theta = 100.0 ** (-2 * i / 4)
            c, s = math.cos(m * theta), math.sin(m * theta)
            a, b = x[..., t, 2 * i], x[..., t, 2 * i + 1]
            torch.testing.assert_close(out[..., t, 2 * i], a * c - b * s)
            torch.testing.assert_close(out[..., t, 2 * i + 1], a * s + b * c)


def test_rope_scores_depend_on_the_relative_position_only() -> None:
    rope = registry.get("positions", "rope")(8, 1, 64, 0.0, causal=False)
    q, k = torch.randn(1, 1, 1, 8, generator=_gen(4)), torch.randn(1, 1, 1, 8, generator=_gen(5))
    cpu = torch.device("cpu")

    def score(m: int, n: int) -> float:
        rotated_q = rope.attention(m, 1, m + 1, cpu).rotate(q)
        return float((rotated_q * rope.attention(n, 1, n + 1, cpu).rotate(k)).sum())

    assert score(7, 3) == pytest.approx(score(20, 16), abs=1e-5)
    assert score(7, 3) != pytest.approx(score(7, 4), abs=1e-3)


def test_alibi_slopes_and_bias_follow_the_paper() -> None:
    assert alibi_slopes(8).tolist() == pytest.approx([2 ** -(i + 1) for i in range(8)])  # 1/2 .. 1/256
    assert alibi_slopes(4).tolist() == pytest.approx([2 ** -(2 * (i + 1)) for i in range(4)])
    # 6 heads: the 4 of the closest power of two, then every other of 8's: 2^-0.5 and 2^-1.5 ... (paper code)
    six = alibi_slopes(6).tolist()
    assert six[:4] == pytest.approx([2**-2, 2**-4, 2**-6, 2**-8])
    assert six[4:] == pytest.approx([2**-1, 2**-3])
    alibi = registry.get("positions", "alibi")(16, 4, 32, 0.0, causal=True)
    bias = alibi.attention(2, 3, 5, torch.device("cpu")).bias  # queries at 2..4, keys 0..4
    assert bias.shape == (4, 3, 5)
    for h, m in enumerate(alibi_slopes(4).tolist()):
        for i in range(3):
            for j in range(5):
                assert bias[h, i, j].item() == pytest.approx(-m * abs((2 + i) - j))


def test_t5_buckets_exact_then_logarithmic_and_per_direction() -> None:
    rel = torch.arange(-20, 21)[None, :]  # key - query
    both = relative_buckets(rel, True, 32, 128)[0]
    # bidirectional: 16 buckets per direction, distances 0..7 exact
    assert both[20 + 0].item() == 0 and both[20 - 5].item() == 5 and both[20 + 5].item() == 16 + 5
    assert both[20 - 8].item() >= 8 and both[20 - 20].item() < 16  # log-spaced, still in its half
    causal = relative_buckets(rel, False, 32, 128)[0]
    assert (causal[21:] == 0).all()  # keys after the query share bucket 0 (masked anyway)
    assert causal[20 - 15].item() == 15 and causal[20 - 16].item() >= 16
    far = relative_buckets(torch.tensor([[-10_000]]), False, 32, 128)
    assert far.item() == 31  # beyond max_distance: the last bucket
    t5 = registry.get("positions", "t5_bias")(16, 2, 64, 0.0, causal=False, t5_buckets=32,
                                              t5_max_distance=128)
    hooks = t5.attention(0, 4, 4, torch.device("cpu"))
    buckets = relative_buckets(torch.arange(4)[None, :] - torch.arange(4)[:, None], True, 32, 128)
    torch.testing.assert_close(hooks.bias, t5.relative.weight[buckets].permute(2, 0, 1))


def test_no_positions_makes_the_encoder_order_blind() -> None:
    model = build_model(ModelSpec(d_model=16, heads=2, d_ff=32, dropout=0.0, positions="none"), 11, 11).eval()
    src = torch.tensor([[3, 4, 5, 6]])
    with torch.no_grad():
        a, b = model.encode(src).memory, model.encode(src.flip(1)).memory
    torch.testing.assert_close(a, b.flip(1), atol=1e-5, rtol=1e-5)  # permuted input, permuted output


# ---------------------------------------------------------------- feed-forward
@pytest.mark.parametrize(("name", "gate"), [("swiglu", F.silu), ("geglu", F.gelu)])
def test_gated_ffns_match_shazeer(name: str, gate: object) -> None:
    ffn = registry.get("ffn", name)(8, 24, 0.0, glu_hidden="match_params", glu_multiple_of=1)
    x = torch.randn(2, 3, 8, generator=_gen(6))
    expected = ffn.w2(gate(ffn.w1(x)) * ffn.w3(x))  # type: ignore[operator]
    torch.testing.assert_close(ffn(x), expected)
    assert ffn.w1.bias is None and ffn.w3.bias is None and ffn.w2.bias is None


@pytest.mark.parametrize(("d_ff", "multiple", "hidden"), [(24, 1, 16), (1024, 8, 680), (2048, 8, 1368),
                                                          (1024, 64, 704)])
def test_glu_hidden_size_keeps_the_weight_count(d_ff: int, multiple: int, hidden: int) -> None:
    assert glu_hidden_size(d_ff, "match_params", multiple) == hidden
    assert glu_hidden_size(d_ff, "d_ff", multiple) == d_ff
    linear_weights, glu_weights = 2 * d_ff, 3 * hidden  # per d_model
    assert abs(glu_weights - linear_weights) <= 1.5 * multiple


@pytest.mark.parametrize("d_model", [8, 16, 48, 512])
def test_glu_match_all_holds_the_linear_ffns_parameters_biases_included(d_model: int) -> None:
    """match_all: 3 d h = 2 d d_ff + d_ff + d (the linear FFN's two matrices and two biases), h rounded to
    a whole unit: within half a hidden unit's 3d weights of the linear FFN's count."""
    d_ff = 4 * d_model
    hidden = glu_hidden_size(d_ff, "match_all", 1, d_model)
    linear = 2 * d_model * d_ff + d_ff + d_model
    assert abs(3 * d_model * hidden - linear) <= 1.5 * d_model
    assert glu_hidden_size(d_ff, "match_params", 1) == round(2 * d_ff / 3)  # weights only, as before


@pytest.mark.parametrize(("name", "fn"), [("relu", F.relu), ("gelu", F.gelu), ("silu", F.silu)])
def test_the_activation_axis_reaches_the_linear_ffn(name: str, fn: object) -> None:
    ffn = registry.get("ffn", "linear")(8, 16, 0.0, activation=registry.get("activation", name)())
    x = torch.randn(2, 3, 8, generator=_gen(7))
    torch.testing.assert_close(ffn(x), ffn.w2(fn(ffn.w1(x))))  # type: ignore[operator]


# ---------------------------------------------------------------- attention and embeddings
def test_qk_norm_scores_are_g_times_cosine_similarities() -> None:
    attn = registry.get("attention", "qk_norm")(8, 2, qk_norm_scale=3.0)
    q, k = torch.randn(1, 2, 4, 4, generator=_gen(8)), torch.randn(1, 2, 5, 4, generator=_gen(9))
    v = torch.randn(1, 2, 5, 4, generator=_gen(10))
    qn, kn = attn.shape_qk(q, k)
    out = attn.attend(qn, kn, v, None)
    cosine = F.normalize(q, dim=-1) @ F.normalize(k, dim=-1).transpose(-2, -1)
    torch.testing.assert_close(out, torch.softmax(3.0 * cosine, dim=-1) @ v)
    assert attn.gain.shape == (2, 1, 1) and (attn.gain == 3.0).all()


def test_tied_decoder_embeddings_tie_target_input_and_output_only() -> None:
    model = build_model(ModelSpec(d_model=16, heads=2, d_ff=32, embeddings="tied_decoder"), 13, 11)
    assert model.generator.weight is model.tgt_embed.weight
    assert model.src_embed.weight.shape == (13, 16)  # the source vocabulary may differ
    assert model.src_embed.weight.data_ptr() != model.tgt_embed.weight.data_ptr()



# ---------------------------------------------------------------- sinusoidal positions
def test_sinusoid_table_is_the_papers_formula_at_every_position_and_feature() -> None:
    """Vaswani et al. 2017, section 3.5: PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...),
    computed here in float64 from the formula, independently of the component; each row has norm sqrt(d/2)
    (sin^2 + cos^2 per pair), whatever the position, so its scale against the token embedding is fixed."""
    from registry.positions import sinusoid_table

    d, positions = 64, 512
    table = sinusoid_table(positions, d)
    for pos in (0, 1, 31, 32, 255, 511):
        for i in range(d // 2):
            angle = pos / 10000 ** (2 * i / d)
            assert table[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=2e-4), (pos, i)
            assert table[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=2e-4), (pos, i)
    torch.testing.assert_close(table.norm(dim=1), torch.full((positions,), math.sqrt(d / 2)))


# ---------------------------------------------------------------- embedding dropout
@pytest.mark.parametrize("variant", ["none", "before_positions"])
def test_embedding_dropout_before_positions_drops_the_scaled_embedding_then_the_sum(variant: str) -> None:
    """``before_positions`` is the 2019 Multi30k blog's ``drop(drop(emb * sqrt(d)) + pe)``; ``none`` the
    paper's ``drop(emb * sqrt(d) + pe)`` (section 5.4); in the encoder and the decoder alike."""
    from registry.dropout import Dropout
    from registry.positions import sinusoid_table

    p, d = 0.3, 16
    model = build_model(ModelSpec(d_model=d, heads=2, d_ff=32, dropout=p, embedding_dropout=variant), 13, 11)
    model.train()
    ids = torch.randint(1, 11, (3, 7), generator=_gen(4))
    drop, pe = Dropout(p), sinusoid_table(7, d)
    for table, positions in ((model.src_embed, model.src_pos), (model.tgt_embed, model.tgt_pos)):
        torch.manual_seed(5)  # the model's draws and the formula's come from one RNG stream, in order
        got = positions.embed(model._embed(table, ids))  # type: ignore[operator]
        torch.manual_seed(5)
        scaled = table(ids) * math.sqrt(d)
        expected = drop(drop(scaled) + pe) if variant == "before_positions" else drop(scaled + pe)
        torch.testing.assert_close(got, expected)
        assert (got == 0).any()  # the dropout was live: the comparison is not between two identities


# ---------------------------------------------------------------- each variant's own init, after the builder
SMALL_MODEL = {"d_model": 16, "heads": 2, "d_ff": 32, "encoder_layers": 2, "decoder_layers": 2}


def _built(**choice: object) -> nn.Module:
    return build_model(ModelSpec(**SMALL_MODEL, **choice), 11, 11, seed=5)


def test_qk_norm_gain_starts_at_g0_a_number_or_henry_et_al_rule() -> None:
    """Henry et al. 2020, section 3.2: g starts at g0 = log2(L^2 - L), one value for every head."""
    gains = [m.gain for m in _built(attention="qk_norm").modules() if hasattr(m, "gain")]
    assert len(gains) == 6 and all((g == 12.0).all() for g in gains)  # 2 encoder self, 2+2 decoder
    ruled = [m.gain for m in _built(attention="qk_norm", qk_norm_length=30).modules() if hasattr(m, "gain")]
    assert all(torch.allclose(g, torch.full_like(g, math.log2(30 * 30 - 30))) for g in ruled)
    assert ruled[0].flatten().tolist() == pytest.approx([9.7649] * 2, abs=1e-4)  # log2(870)


def test_t5_bias_table_is_drawn_from_n0_over_root_d_as_t5_does() -> None:
    model = _built(positions="t5_bias", t5_buckets=512, t5_max_distance=1024)
    for table in (model.src_pos.relative.weight, model.tgt_pos.relative.weight):  # (512, 2) each
        assert table.mean().abs().item() < 0.05
        assert table.std().item() == pytest.approx(16 ** -0.5, rel=0.1)
    assert not torch.equal(model.src_pos.relative.weight, model.tgt_pos.relative.weight)


def test_rezero_gates_start_at_zero_and_scale_norm_gains_at_root_d_after_the_builder() -> None:
    rezero = [m.alpha for m in _built(residual="rezero").modules() if hasattr(m, "alpha")]
    assert len(rezero) == 10 and all(a.item() == 0.0 for a in rezero)  # 2x2 encoder + 2x3 decoder sub-layers
    scale = [m.weight for m in _built(norm="scale").modules() if type(m).__name__ == "ScaleNorm"]
    assert scale and all(w.item() == pytest.approx(4.0) for w in scale)


def test_alibi_encoder_heads_read_one_direction_each_and_symmetric_stays_available() -> None:
    cpu = torch.device("cpu")
    enc = registry.get("positions", "alibi")(16, 4, 32, 0.0, causal=False)
    bias = enc.attention(0, 6, 6, cpu).bias  # (heads, Tq, Tk)
    m = alibi_slopes(4)[[0, 0, 2, 2]]  # each pair of heads shares the steeper slope
    for h in range(4):
        for i in range(6):
            for j in range(6):
                ahead = (j - i) if h % 2 else (i - j)  # odd heads read right to left
                want = -m[h].item() * ahead if ahead >= 0 else -1.0e4
                assert bias[h, i, j].item() == pytest.approx(want), (h, i, j)
    # so the encoder's attention tells left from right: its bias is not symmetric in (i, j)
    assert not torch.equal(bias, bias.transpose(-2, -1))
    symmetric = registry.get("positions", "alibi")(16, 4, 32, 0.0, causal=False, alibi_encoder="symmetric")
    sym = symmetric.attention(0, 6, 6, cpu).bias
    assert torch.equal(sym, sym.transpose(-2, -1))
    # the decoder keeps the paper's causal bias whatever the encoder's form
    dec = registry.get("positions", "alibi")(16, 4, 32, 0.0, causal=True)
    assert torch.equal(dec.attention(0, 6, 6, cpu).bias, sym)
