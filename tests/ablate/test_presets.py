"""The five tutorial presets (experiments/presets/) against the tutorial designs they reproduce.

Each preset must state every model, training and evaluation setting it relies on in its own file (a preset
extends the local Multi30k spec for the corpus only: a change there must not silently change a tutorial
design), and each pins the facts of the design that the spec can express (read from the five public
tutorials and summarised in each preset's header; the judgement calls the tutorials leave open are
stated there too, not tested here).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from ablate.spec.experiment import ExperimentSpec, flatten
from ablate.spec.load import load_spec

PRESETS = Path(__file__).resolve().parents[2] / "experiments" / "presets"
# Operational settings of a machine, not of a design: they may come from anywhere.
OPERATIONAL = {"train.out_dir", "train.threads"}
# The data fields that shape what the model sees (the corpus and its files come from the extended spec).
DATA_DESIGN = ("data.lowercase", "data.reverse_source", "data.max_len", "data.tokenizer.",
               "data.batch_tokens")
NOAM_FACTOR_1 = 512**-0.5 * 2000**-0.5  # Noam's peak lr at d_model 512, warm-up 2000

FACTS: dict[str, dict[str, Any]] = {
    # 2025 blog: pre-norm, hand-written per-feature LN (eps 1e-6) with a final norm, sinusoidal + dropout,
    # Linear FFN, -inf mask, Adam 1e-4 (0.9, 0.98, 1e-9), fp16 + GradScaler, accumulation 4, clip 1.0, no
    # label smoothing, Xavier, beam 3, explicit attention (heat maps).
    "a-blog-2025-prenorm-custom-ln": {
        "model.residual": "pre_norm", "model.norm": "custom", "model.norm_affine": "per_feature",
        "model.norm_eps": 1e-6, "model.positions": "sinusoidal", "model.position_dropout": True,
        "model.ffn": "linear", "model.mask": "-inf", "model.attention": "explicit", "model.init": "xavier",
        "train.optimizer.name": "adam", "train.optimizer.lr": 1e-4, "train.optimizer.betas": (0.9, 0.98),
        "train.optimizer.eps": 1e-9, "train.schedule.name": "constant", "train.precision": "fp16",
        "train.accumulation": 4, "train.clip_norm": 1.0, "train.label_smoothing": 0.0,
        "eval.decode.strategy": "beam", "eval.decode.beam": 3},
    # GitHub README: pre-norm, hand-written LN, sinusoidal without dropout, Linear FFN, -1e6 mask, beam,
    # explicit attention.
    "b-github-readme": {
        "model.residual": "pre_norm", "model.norm": "custom", "model.positions": "sinusoidal",
        "model.position_dropout": False, "model.ffn": "linear", "model.mask": "-1e6",
        "model.attention": "explicit", "eval.decode.strategy": "beam"},
    # 2024 Lightning blog: nn.LayerNorm (eps 1e-5), sinusoidal, Linear FFN, -1e9 mask, no attention dropout.
    "c-lightning-2024": {
        "model.norm": "builtin", "model.norm_eps": 1e-5, "model.positions": "sinusoidal",
        "model.ffn": "linear", "model.mask": "-1e9", "model.attention_dropout": 0.0},
    # 2019 Multi30k blog: post-norm with one nn.LayerNorm (eps 1e-5) shared per layer, sinusoidal, Conv1d
    # FFN, -1e10 mask, 512/6+6/8/2048, Noam factor 1 warm-up 2000, clip 1, Xavier, 10 epochs, source
    # reversed, lowercased, min_freq 2.
    "d-multi30k-2019-postnorm-conv1d": {
        "model.residual": "post_norm", "model.shared_layer_norm": True, "model.norm": "builtin",
        "model.norm_eps": 1e-5, "model.positions": "sinusoidal", "model.ffn": "conv1d", "model.mask": "-1e10",
        "model.d_model": 512, "model.encoder_layers": 6, "model.decoder_layers": 6, "model.heads": 8,
        "model.d_ff": 2048, "model.init": "xavier", "train.schedule.name": "inverse_sqrt",
        "train.schedule.warmup_steps": 2000, "train.optimizer.lr": NOAM_FACTOR_1, "train.clip_norm": 1.0,
        "train.epochs": 10, "train.max_steps": None, "data.reverse_source": True, "data.lowercase": True,
        "data.tokenizer.min_freq": 2},
    # 2024 notebook: pre-norm, hand-written LN with scalar gain and bias and a final norm, sinusoidal, Linear
    # FFN, -1e9 mask, Adam 1e-4 with torch's default betas and eps 1e-9, label smoothing 0.1, 350 tokens,
    # a word-level tokenizer per language, greedy.
    "e-notebook-2024-scalar-ln": {
        "model.residual": "pre_norm", "model.norm": "custom", "model.norm_affine": "scalar",
        "model.positions": "sinusoidal", "model.ffn": "linear", "model.mask": "-1e9",
        "train.optimizer.name": "adam", "train.optimizer.lr": 1e-4, "train.optimizer.betas": (0.9, 0.999),
        "train.optimizer.eps": 1e-9, "train.schedule.name": "constant", "train.label_smoothing": 0.1,
        "data.max_len": 350, "model.max_positions": 350, "data.tokenizer.kind": "wordlevel",
        "data.tokenizer.joint": False, "eval.decode.strategy": "greedy"},
}
# The tutorials whose attention drops out attention probabilities at their model dropout rate.
ATTENTION_DROPOUT_AT_MODEL_RATE = ("a-blog-2025-prenorm-custom-ln", "b-github-readme",
                                   "d-multi30k-2019-postnorm-conv1d", "e-notebook-2024-scalar-ln")


def _load(name: str) -> ExperimentSpec:
    return load_spec(PRESETS / f"{name}.yaml", check_hardware=False)


def _own_keys(name: str) -> set[str]:
    raw = yaml.safe_load((PRESETS / f"{name}.yaml").read_text())
    raw.pop("extends", None)
    return set(flatten(raw))


def test_there_is_one_preset_per_tutorial_design() -> None:
    assert sorted(p.stem for p in PRESETS.glob("*.yaml")) == sorted(FACTS)


@pytest.mark.parametrize("name", sorted(FACTS))
def test_preset_states_every_setting_it_relies_on(name: str) -> None:
    resolved = flatten(_load(name).resolved())
    relied_on = {k for k in resolved if k.startswith(("model.", "train.", "eval.", *DATA_DESIGN))}
    missing = sorted(relied_on - OPERATIONAL - _own_keys(name))
    assert missing == [], f"{name} inherits these settings silently: {missing}"


@pytest.mark.parametrize("name", sorted(FACTS))
def test_preset_reproduces_its_tutorial_design(name: str) -> None:
    spec = _load(name)
    resolved = flatten(spec.resolved())
    for key, expected in FACTS[name].items():
        got = resolved[key]
        if isinstance(expected, float):
            assert got is not None and math.isclose(got, expected, rel_tol=1e-3), (key, got, expected)
        elif isinstance(expected, tuple):
            assert tuple(got) == expected, (key, got, expected)
        else:
            assert got == expected, (key, got, expected)
    if name in ATTENTION_DROPOUT_AT_MODEL_RATE:
        assert spec.model.attention_dropout == spec.model.dropout > 0.0


def test_the_scalar_gain_preset_ablates_its_norm_with_one_factor() -> None:
    """The hand-written single-scalar LayerNorm vs the built-in kernel with the same scalar gain/bias: a
    one-factor change (``norm_affine: scalar`` is taken by both norms)."""
    path = str(PRESETS / "e-notebook-2024-scalar-ln.yaml")
    custom = load_spec(path)
    builtin = load_spec(path, ["model.norm=builtin"])
    assert (custom.model.norm, custom.model.norm_affine) == ("custom", "scalar")
    assert (builtin.model.norm, builtin.model.norm_affine) == ("builtin", "scalar")
    changed = {k for k, v in flatten(builtin.resolved()).items() if flatten(custom.resolved()).get(k) != v}
    assert changed == {"model.norm"}
