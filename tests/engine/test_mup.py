"""muP (registry/parametrisation.py, ablate/engine/parametrise.py) against Yang et al. 2022: the same model
as the standard parametrisation at the base width; the multipliers of Table 3 / Table 8 away from it; the
learning rates per parameter group of each optimizer rule; and the coordinate check."""

from __future__ import annotations

import math

import pytest
import torch

from ablate.engine import coord_check
from ablate.engine.builders import build_lm, build_model
from ablate.engine.param_roles import parameter_roles, train_params
from ablate.engine.trainer import build_optimizer
from ablate.spec.experiment import ModelSpec, TrainSpec
from registry.optimizer import BIAS, EMBEDDING, HIDDEN, NORM

pytestmark = pytest.mark.usefixtures("single_thread")
V = 40


def lm(width: int, parametrisation: str = "standard", base: int = 32, **extra: object) -> torch.nn.Module:
    options = {"mup_base_width": base} if parametrisation == "mup" else {}
    spec = ModelSpec(arch="decoder_only", d_model=width, heads=4, d_ff=4 * width, decoder_layers=2,
                     dropout=0.0,
                     max_positions=32, parametrisation=parametrisation, **options, **extra)
    return build_lm(spec, V, seed=3)


@pytest.mark.parametrize("extra", [{}, {"embeddings": "separate", "init": "xavier_embed_normal"},
                                   {"attention": "explicit", "kv_heads": 2}])
def test_mup_at_its_base_width_is_the_standard_parametrisation_bit_for_bit(extra: dict[str, object]) -> None:
    ids = torch.randint(3, V, (2, 9), generator=torch.Generator().manual_seed(0))
    sp, mup = lm(32, **extra).eval(), lm(32, "mup", base=32, **extra).eval()
    for (name, a), (_, b) in zip(sp.state_dict().items(), mup.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    with torch.no_grad():
        assert torch.equal(sp(ids), mup(ids))
    seq = dict(d_model=32, heads=4, d_ff=64, encoder_layers=1, decoder_layers=1, dropout=0.0)
    src, tgt = ids, ids[:, :5]
    a = build_model(ModelSpec(**seq), V, V, seed=1).eval()
    b = build_model(ModelSpec(**seq, parametrisation="mup", mup_base_width=32), V, V, seed=1).eval()
    with torch.no_grad():
        assert torch.equal(a(src, tgt), b(src, tgt))


def test_mup_multipliers_away_from_the_base_width() -> None:
    """m = 4: vector-like parameters start at their base-width std, hidden matrices at base variance x
    fan_in base / fan_in, the embedding scale is sqrt(base), logits x 1/m, attention 1/d_head."""
    for init in ("xavier", "xavier_embed_normal"):
        sp, mup, base = lm(128, init=init), lm(128, "mup", init=init), lm(32, init=init)
        assert mup.logit_multiplier == pytest.approx(0.25) and sp.logit_multiplier == 1.0
        assert mup.embed_scale == pytest.approx(math.sqrt(32))
        assert sp.embed_scale == pytest.approx(math.sqrt(128))
        # embeddings: the same std as the base model's (within sampling noise of V x d draws)
        ratio = float(mup.embed.weight.detach().std() / base.embed.weight.detach().std())
        assert ratio == pytest.approx(1.0, rel=0.05), init
        shape = mup.width_shapes["embed.weight"]
        assert shape.infinite == 1 and shape.width_mult == 4.0
        # hidden: Xavier already gives variance ~ 1/fan_in when both fans grow, so the multiplier is 1
        name = "decoder.layers.0.ffn.w1.weight"
        assert mup.width_shapes[name].infinite == 2
        torch.testing.assert_close(dict(mup.named_parameters())[name], dict(sp.named_parameters())[name])
    attn = mup.attention_modules()["decoder_self"][0]
    assert attn.scale == pytest.approx(math.sqrt(8) / 32)  # d_head 32, base d_head 8
    assert sp.attention_modules()["decoder_self"][0].scale == pytest.approx(1 / math.sqrt(32))


def test_mup_learning_rates_per_group_follow_each_optimizer_rule() -> None:
    """MuAdam: a hidden matrix's rate / fan_in multiplier, every vector-like one unchanged; MuSGD: a
    vector-like rate x width multiplier, a hidden matrix's x fan_out / fan_in multipliers."""
    model = lm(128, "mup")
    roles = parameter_roles(model)
    adam = {p.name: p.lr_scale for p in train_params(model, mup_rule="adam")}
    sgd = {p.name: p.lr_scale for p in train_params(model, mup_rule="sgd")}
    for name, role in roles.items():
        shape = model.width_shapes[name]
        if role == HIDDEN:
            assert adam[name] == pytest.approx(1 / shape.fan_in_mult), name
            assert sgd[name] == pytest.approx(shape.fan_out_mult / shape.fan_in_mult), name
        elif shape.infinite == 1:
            assert adam[name] == 1.0 and sgd[name] == pytest.approx(4.0), name
    assert adam["decoder.layers.0.ffn.w1.weight"] == pytest.approx(0.25)
    assert roles["embed.weight"] == EMBEDDING and roles["decoder.layers.0.ffn.w1.bias"] == BIAS
    assert roles["decoder.norm.weight"] == NORM
    # the trainer's optimizer gets the groups: lr x multiplier in each
    train = TrainSpec.model_validate({"optimizer": {"name": "adamw", "lr": 0.01}})
    groups = build_optimizer(model, train).param_groups
    assert sorted({round(g["lr"] / 0.01, 6) for g in groups}) == [0.25, 1.0]
    standard = build_optimizer(lm(128), train).param_groups
    assert len(standard) == 1 and standard[0]["lr"] == 0.01  # one group, as before the axis


def test_the_coordinate_check_is_flat_under_mup_and_grows_under_the_standard_parametrisation() -> None:
    """Yang et al. 2022, figure 5: widths 32 to 256, Adam at lr 0.03, 3 steps. Measured slopes of log |x|
    against log width after steps 1, 2, 3 (torch 2.13, CPU): hidden 0.93, 1.27, 1.36 and logits 0.60, 0.86,
    1.05 under SP; hidden 0.13, 0.09, 0.02 and logits -0.13, -0.10, -0.02 under muP (its logits start at
    -0.5: muP's initial logits shrink as 1/sqrt(width), Table 3's output multiplier).
    scripts/coord_check.py draws them (docs/recipe.md)."""
    sp = coord_check.check("standard", steps=3)
    mup = coord_check.check("mup", steps=3)
    assert abs(coord_check.growth(sp, 0)) < 0.3  # at init both are about flat in the hidden states
    for step in (2, 3):
        assert coord_check.growth(sp, step) > 0.6, step
        assert abs(coord_check.growth(mup, step)) < 0.25, step
        assert coord_check.growth(sp, step, "logits") > 0.5, step
        assert abs(coord_check.growth(mup, step, "logits")) < 0.3, step


def test_mup_weight_decay_per_group_is_mu_adamws() -> None:
    """The mup package's MuAdamW (decoupled_wd=False, its default) divides a hidden matrix's rate by its
    width multiplier and multiplies its weight decay by it: the decay a step applies, lr x weight_decay, is
    the base width's in every group, at every width (registry/optimizer.py param_groups)."""
    train = TrainSpec.model_validate({"optimizer": {"name": "adamw", "lr": 0.01, "weight_decay": 0.1}})
    for width in (32, 128):
        groups = build_optimizer(lm(width, "mup"), train).param_groups
        assert {round(g["lr"] * g["weight_decay"], 12) for g in groups} == {round(0.01 * 0.1, 12)}, width
    wide = build_optimizer(lm(128, "mup"), train).param_groups
    hidden = next(g for g in wide if g["lr_scale"] == pytest.approx(0.25))
    assert hidden["weight_decay"] == pytest.approx(0.4)  # 0.1 x width multiplier 4
    standard = build_optimizer(lm(128), train).param_groups
    assert [g["weight_decay"] for g in standard] == [0.1]  # the standard parametrisation: as the spec says
