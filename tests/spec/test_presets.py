"""The five tutorial presets (experiments/presets/) against the tutorial texts they reproduce.

Each preset must state every model, training and evaluation setting it relies on in its own file (a preset
extends the local Multi30k spec for the corpus only: a change there must not silently change a tutorial
design). Its header lists what the tutorial states (cited by section) apart from what the preset had to
choose (with the reason); every stated fact a spec can express is pinned here, and where a tutorial reports
a number the design determines (the 2025 blog's parameter count), the model is built and checked against
it. The texts are in ../shared/tutorials/ (not part of this repository: the tests do not read them).
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
OPERATIONAL = {"train.out_dir", "train.threads", "train.device"}
# Evaluation settings of decoder-only language models only (a spec error on a translation model).
LM_ONLY = {"eval.lengths", "eval.sliding_stride"}
# The data fields that shape what the model sees (the corpus and its files come from the extended spec).
DATA_DESIGN = ("data.lowercase", "data.reverse_source", "data.max_len", "data.tokenizer.",
               "data.batch_tokens")
NOAM_FACTOR_1 = 512**-0.5 * 2000**-0.5  # Noam's peak lr at d_model 512, warm-up 2000
# The tutorial text each preset cites (../shared/tutorials/README.md maps them).
TUTORIAL = {
    "a-blog-2025-prenorm-custom-ln": "000_9cdfbb5640d1576e.txt",
    "b-github-readme": "001_12bd5c22c793c362.txt",
    "c-lightning-2024": "002_0cd0c92b5f5edade.txt",
    "d-multi30k-2019-postnorm-conv1d": "003_3750c86a79aaa06b.txt",
    "e-notebook-2024-scalar-ln": "004_e89cc2033f82fd06.txt",
}

# What each tutorial states, as far as a spec can say it: every entry is one of the facts listed under
# "STATED by" in the preset's header (its section is cited there). The header's "CHOSEN by this preset"
# settings are not pinned here, except where the tests below check why they were chosen.
STATED: dict[str, dict[str, Any]] = {
    # 2025 blog: the code's d_model 256 (its config block says 512), 8 heads, 6+6 layers, d_ff 2048,
    # dropout 0.1 (also on the attention weights), sqrt(d) scale, sinusoids with dropout over 512 positions,
    # hand-written per-feature LN (eps 1e-6), pre-norm with a final norm, Linear ReLU FFN, -inf, explicit
    # attention (heat maps), Xavier, separate embeddings, joint BPE, Adam 1e-4 (0.9, 0.98, 1e-9) constant,
    # no label smoothing, fp16 + GradScaler, accumulation 4, clip 1.0, beam 3 on raw log-probabilities up to
    # 50 tokens.
    "a-blog-2025-prenorm-custom-ln": {
        "model.arch": "encoder_decoder",
        "model.d_model": 256, "model.heads": 8, "model.encoder_layers": 6, "model.decoder_layers": 6,
        "model.d_ff": 2048, "model.dropout": 0.1, "model.attention_dropout": 0.1, "model.embed_scale": True,
        "model.positions": "sinusoidal", "model.position_dropout": True, "model.max_positions": 512,
        "model.embedding_dropout": "none", "model.norm": "custom", "model.norm_affine": "per_feature",
        "model.norm_eps": 1e-6, "model.residual": "pre_norm", "model.ffn": "linear",
        "model.activation": "relu", "model.mask": "-inf", "model.attention": "explicit",
        "model.init": "xavier", "model.embeddings": "separate", "data.tokenizer.kind": "bpe",
        "data.tokenizer.joint": True, "train.optimizer.name": "adam", "train.optimizer.lr": 1e-4,
        "train.optimizer.betas": (0.9, 0.98), "train.optimizer.eps": 1e-9,
        "train.optimizer.weight_decay": 0.0, "train.schedule.name": "constant",
        "train.schedule.warmup_steps": 0, "train.label_smoothing": 0.0, "train.precision": "fp16",
        "train.accumulation": 4, "train.clip_norm": 1.0, "eval.decode.strategy": "beam",
        "eval.decode.beam": 3, "eval.decode.length_penalty": 0.0, "eval.decode.max_len_a": 0.0,
        "eval.decode.max_len_b": 50},
    # GitHub README: pre-norm by its code (its prose says post-norm) with a final norm, sinusoids, d_model
    # 512 (its example), a two-layer ReLU FFN, -1e6, attention probabilities returned for plots (explicit),
    # no attention dropout (drop_prob defaults to None), beam search.
    "b-github-readme": {
        "model.arch": "encoder_decoder",
        "model.residual": "pre_norm", "model.positions": "sinusoidal", "model.d_model": 512,
        "model.ffn": "linear", "model.activation": "relu", "model.mask": "-1e6",
        "model.attention": "explicit", "model.attention_dropout": 0.0, "eval.decode.strategy": "beam"},
    # 2024 Lightning blog: d_model 512, sqrt(d) scale, sinusoids with dropout, nn.LayerNorm (eps 1e-5),
    # Linear ReLU FFN, -1e9, no attention dropout.
    "c-lightning-2024": {
        "model.arch": "encoder_decoder",
        "model.d_model": 512, "model.embed_scale": True, "model.positions": "sinusoidal",
        "model.position_dropout": True, "model.norm": "builtin", "model.norm_eps": 1e-5,
        "model.ffn": "linear", "model.activation": "relu", "model.mask": "-1e9",
        "model.attention_dropout": 0.0},
    # 2019 Multi30k blog: lowercased, reversed source, per-language vocabularies of words seen twice;
    # -1e10 with attention dropout; Conv1d ReLU FFN; sinusoids with dropout; post-norm with one nn.LayerNorm
    # (eps 1e-5) per layer and no final norm; the scaled embedding dropped out before the positions too;
    # 512/6+6/8/2048, dropout 0.1, Xavier; Adam (0.9, 0.98, 1e-9) under Noam factor 1, warm-up 2000; no
    # label smoothing; clip 1; 10 epochs.
    "d-multi30k-2019-postnorm-conv1d": {
        "model.arch": "encoder_decoder",
        "data.src_lang": "de", "data.tgt_lang": "en", "data.lowercase": True, "data.reverse_source": True,
        "data.tokenizer.kind": "wordlevel", "data.tokenizer.joint": False, "data.tokenizer.min_freq": 2,
        "model.mask": "-1e10", "model.attention_dropout": 0.1, "model.ffn": "conv1d",
        "model.activation": "relu",
        "model.positions": "sinusoidal", "model.position_dropout": True, "model.residual": "post_norm",
        "model.shared_layer_norm": True, "model.norm": "builtin", "model.norm_eps": 1e-5,
        "model.embed_scale": True, "model.embedding_dropout": "before_positions", "model.d_model": 512,
        "model.encoder_layers": 6, "model.decoder_layers": 6, "model.heads": 8, "model.d_ff": 2048,
        "model.dropout": 0.1, "model.init": "xavier", "model.embeddings": "separate",
        "train.optimizer.name": "adam", "train.optimizer.betas": (0.9, 0.98), "train.optimizer.eps": 1e-9,
        "train.optimizer.weight_decay": 0.0, "train.schedule.name": "inverse_sqrt",
        "train.schedule.warmup_steps": 2000, "train.optimizer.lr": NOAM_FACTOR_1,
        "train.label_smoothing": 0.0, "train.clip_norm": 1.0, "train.epochs": 10, "train.max_steps": None},
    # 2024 notebook: sqrt(d) scale, sinusoids with dropout, hand-written LN with scalar gain and bias (eps
    # 1e-6), Linear ReLU FFN, -1e9 with attention dropout, pre-norm with a final norm, 512/6+6/8/2048,
    # dropout 0.1, separate embeddings, Xavier, word-level tokenizer per language, 350 tokens, greedy up to
    # 349 new tokens, Adam 1e-4 eps 1e-9 with torch's default betas, constant, no clipping.
    "e-notebook-2024-scalar-ln": {
        "model.arch": "encoder_decoder",
        "model.embed_scale": True, "model.positions": "sinusoidal", "model.position_dropout": True,
        "model.norm": "custom", "model.norm_affine": "scalar", "model.norm_eps": 1e-6,
        "model.ffn": "linear", "model.activation": "relu", "model.mask": "-1e9",
        "model.attention_dropout": 0.1, "model.residual": "pre_norm", "model.d_model": 512,
        "model.encoder_layers": 6, "model.decoder_layers": 6, "model.heads": 8, "model.d_ff": 2048,
        "model.dropout": 0.1, "model.embeddings": "separate", "model.init": "xavier",
        "data.tokenizer.kind": "wordlevel", "data.tokenizer.joint": False, "data.max_len": 350,
        "model.max_positions": 350, "eval.decode.strategy": "greedy", "eval.decode.max_len_a": 0.0,
        "eval.decode.max_len_b": 349, "train.optimizer.name": "adam", "train.optimizer.lr": 1e-4,
        "train.optimizer.betas": (0.9, 0.999), "train.optimizer.eps": 1e-9,
        "train.optimizer.weight_decay": 0.0, "train.schedule.name": "constant",
        "train.schedule.warmup_steps": 0, "train.clip_norm": None},
}
# The blog's reported size: "Total number of parameters of the model = 40,433,968", at its joint BPE
# vocabulary of 30000 (its BpeTrainer's vocab_size, [SOS]/[EOS] among the special tokens already).
A_BLOG_PARAMETERS, A_BLOG_VOCABULARY = 40_433_968, 30_000
# Multi30k's training pairs, and more sentences than a 512-token batch of them can hold (their mean length
# is above 8 tokens): a lower bound on the optimizer steps of an epoch-budgeted preset.
MULTI30K_TRAIN_PAIRS, SENTENCES_PER_512_TOKENS_AT_MOST = 29_000, 64


def _load(name: str) -> ExperimentSpec:
    return load_spec(PRESETS / f"{name}.yaml", check_hardware=False)


def _own_keys(name: str) -> set[str]:
    raw = yaml.safe_load((PRESETS / f"{name}.yaml").read_text())
    raw.pop("extends", None)
    return set(flatten(raw))


def test_there_is_one_preset_per_tutorial_design() -> None:
    assert sorted(p.stem for p in PRESETS.glob("*.yaml")) == sorted(STATED) == sorted(TUTORIAL)


@pytest.mark.parametrize("name", sorted(STATED))
def test_preset_states_every_setting_it_relies_on(name: str) -> None:
    resolved = flatten(_load(name).resolved())
    relied_on = {k for k in resolved if k.startswith(("model.", "train.", "eval.", *DATA_DESIGN))}
    missing = sorted(relied_on - OPERATIONAL - LM_ONLY - _own_keys(name))
    assert missing == [], f"{name} inherits these settings silently: {missing}"


@pytest.mark.parametrize("name", sorted(STATED))
def test_preset_reproduces_what_its_tutorial_states(name: str) -> None:
    resolved = flatten(_load(name).resolved())
    for key, expected in STATED[name].items():
        got = resolved[key]
        if isinstance(expected, float):
            assert got is not None and math.isclose(got, expected, rel_tol=1e-3), (key, got, expected)
        elif isinstance(expected, tuple):
            assert tuple(got) == expected, (key, got, expected)
        else:
            assert got == expected, (key, got, expected)


@pytest.mark.parametrize("name", sorted(STATED))
def test_preset_header_keeps_what_the_tutorial_states_apart_from_its_own_choices(name: str) -> None:
    header = [line for line in (PRESETS / f"{name}.yaml").read_text().splitlines() if line.startswith("#")]
    text = "\n".join(header)
    assert TUTORIAL[name] in text  # cites its source text
    stated = next(i for i, line in enumerate(header) if line.startswith("# STATED by "))
    chosen = next(i for i, line in enumerate(header) if line.startswith("# CHOSEN by this preset"))
    assert stated < chosen and chosen - stated > 2, "each list needs its own entries"


def test_a_is_the_blog_model_at_the_size_the_blog_reports() -> None:
    """The blog's code builds d_model 256 (its config block's 512 is never passed): at its 30k vocabulary
    that model has exactly the 40,433,968 parameters the blog reports (90,250,544 at 512)."""
    from ablate.engine.builders import build_model

    model = build_model(_load("a-blog-2025-prenorm-custom-ln").model, A_BLOG_VOCABULARY, A_BLOG_VOCABULARY)
    assert model.num_parameters() == A_BLOG_PARAMETERS


@pytest.mark.parametrize("name", sorted(STATED))
def test_warm_up_ends_inside_the_training_budget(name: str) -> None:
    """A warm-up longer than the budget never reaches its peak rate (B and C once peaked at 2.25e-4 of
    5e-4): every preset's schedule leaves its warm-up well before training ends."""
    train = _load(name).train
    if train.schedule.warmup_steps == 0:
        return
    steps = train.max_steps
    if steps is None:  # an epoch budget: at least this many optimizer steps
        assert train.epochs is not None and _load(name).data.batch_tokens <= 512
        steps = train.epochs * MULTI30K_TRAIN_PAIRS // SENTENCES_PER_512_TOKENS_AT_MOST
    assert train.schedule.warmup_steps <= steps / 2, (train.schedule.warmup_steps, steps)


def test_d_drops_out_its_embeddings_twice_and_the_others_once() -> None:
    for name in STATED:
        twice = _load(name).model.embedding_dropout == "before_positions"
        assert twice == (name == "d-multi30k-2019-postnorm-conv1d"), name


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


# ---------------------------------------------------------------- the presets study
STUDY = PRESETS.parent / "ablations" / "presets-multi30k.yaml"
# What the study holds at the cell's values for every design: size, and the attention implementation (a
# and b use explicit attention for heat maps: the same function as sdpa, slower).
HELD_EQUAL = {"d_model", "heads", "encoder_layers", "decoder_layers", "d_ff", "dropout", "max_positions",
              "attention", "attention_dropout"}
# The study's label of each preset's design.
STUDY_LABEL = {"a-blog-2025-prenorm-custom-ln": "a-blog-2025", "b-github-readme": "b-github-readme",
               "c-lightning-2024": "c-lightning-2024", "d-multi30k-2019-postnorm-conv1d": "d-multi30k-2019",
               "e-notebook-2024-scalar-ln": "e-notebook-2024"}


def test_the_presets_study_runs_each_preset_design_at_the_cells_size() -> None:
    """Each variant of the presets study is its preset's model section but for size: when a preset's design
    changes, the study must change with it (this test says where)."""
    from ablate.study.designs import plan_study

    plan = plan_study(str(STUDY))
    cell = load_spec(PRESETS.parent / "multi30k-cell.yaml").model
    variants = {c.label: c.spec.model for c in plan.cells if c.seed == plan.seeds[0]}
    assert sorted(variants) == sorted(["baseline", *STUDY_LABEL.values()])
    for name, label in STUDY_LABEL.items():
        model, preset = variants[label].model_dump(), _load(name).model.model_dump()
        differs = {k: (model[k], preset[k]) for k in preset if k not in HELD_EQUAL and model[k] != preset[k]}
        assert differs == {}, (label, differs)
        assert {k: model[k] for k in HELD_EQUAL - {"attention_dropout"}} == {
            k: cell.model_dump()[k] for k in HELD_EQUAL - {"attention_dropout"}}, label
        # Attention dropout where the design has it, at the cell's rate.
        assert model["attention_dropout"] == (cell.dropout if preset["attention_dropout"] > 0 else 0.0), label
