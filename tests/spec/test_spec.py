"""Spec loading in-process: extends, --set, hashing, round trips, schema, and every file in experiments/."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

import registry
from ablate.spec.experiment import ExperimentSpec
from ablate.spec.load import (
    SpecError,
    apply_overrides,
    dump_spec_yaml,
    json_schema,
    load_spec,
    load_spec_data,
    set_dotted,
    validate_data,
)

REPO = Path(__file__).resolve().parents[2]
EXPERIMENTS = sorted((REPO / "experiments").rglob("*.yaml"))
MINIMAL = "name: t\ntrain: {max_steps: 10}\n"


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def problems(path: Path, overrides: tuple[str, ...] = ()) -> list[str]:
    with pytest.raises(SpecError) as info:
        load_spec(path, overrides)
    return [str(p) for p in info.value.problems]


# ---------------------------------------------------------------- every problem, once, with its line
def test_all_problems_of_a_file_in_one_pass(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "x.yaml",
        "name: a/b\nmodel:\n  residual: postnorm\n  d_modl: 64\n"
        "  mask: abc\ntrain:\n  precision: fp31\n  clip_norm: 1e400\n  max_steps: 5\n  max_steps: 6\n",
    )
    lines = problems(path)
    assert [line.split(": ")[0] for line in lines] == [f"{path}:{n}" for n in (1, 3, 4, 5, 7, 8, 10)]
    assert [line.split(": ")[1] for line in lines] == [
        "name",
        "model.residual",
        "model.d_modl",
        "model.mask",
        "train.precision",
        "train.clip_norm",
        "train.max_steps",
    ]
    assert str(SpecError(load_problems(path))).count("\n") == len(lines) - 1


def load_problems(path: Path) -> list[object]:
    try:
        load_spec(path)
    except SpecError as exc:
        return list(exc.problems)
    raise AssertionError("expected a SpecError")


def test_problem_inherited_from_a_parent_points_at_the_parent(tmp_path: Path) -> None:
    write(tmp_path, "base.yaml", MINIMAL + "model:\n  ffn: conv1\n")
    child = write(tmp_path, "sub/child.yaml", "extends: ../base.yaml\nname: c\n")
    assert problems(child) == [
        f"{tmp_path / 'base.yaml'}:4: model.ffn: unknown ffn 'conv1'; accepted: "
        f"{', '.join(registry.names('ffn'))}; did you mean 'conv1d'?"
    ]


def test_validate_data_names_its_origin_when_no_line_is_known() -> None:
    with pytest.raises(SpecError) as info:
        validate_data({"name": "t", "model": {"heads": 0}}, None, "cell model.heads=0")
    assert str(info.value) == "cell model.heads=0: model.heads: found 0; expected a value > 0"


def test_cross_field_checks_all_reported_even_when_another_field_fails(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "x.yaml",
        "name: t\nmodel:\n  d_modle: 64\n  heads: 3\n  shared_layer_norm: true\n  norm_affine: scalar\n"
        "  norm: rms\n  max_positions: 64\ndata: {max_len: 100}\n"
        "train:\n  max_steps: 10\n  optimizer: {lr: abc}\n",
    )
    assert [line.removeprefix(f"{path}:") for line in problems(path)] == [
        "3: model.d_modle: unknown key 'd_modle'; did you mean 'd_model'?",
        "4: model.heads: d_model 128 is not divisible by heads 3",  # d_model is the default (d_modle)
        "5: model.shared_layer_norm: shared_layer_norm applies to residual: post_norm only "
        "(this spec has residual: pre_norm)",
        "6: model.norm_affine: norm_affine applies to norm: builtin, custom only (this spec has norm: rms)",
        "9: data.max_len: data.max_len 100 exceeds model.max_positions 64",  # a check of the whole spec
        "12: train.optimizer.lr: found 'abc'; expected a number",
    ]


def test_a_cross_field_check_on_an_invalid_value_is_left_out(tmp_path: Path) -> None:
    # d_model is invalid: judging heads against the default d_model would blame a correct value
    path = write(tmp_path, "x.yaml", MINIMAL + "model: {d_model: abc, heads: 3}\ndata: {source: files}\n")
    assert [line.removeprefix(f"{path}:") for line in problems(path)] == [
        "3: model.d_model: found 'abc'; expected an integer",
        "4: data.files: source is 'files' but the data.files section is missing",
    ]


@pytest.mark.parametrize(
    ("model", "found"),
    [
        ("heads: true", "model.heads: found true; expected an integer"),
        ("encoder_layers: yes", "model.encoder_layers: found true; expected an integer"),
        ("d_model: 64.0", "model.d_model: found 64.0; expected an integer"),
        ("position_dropout: 'yes'", "model.position_dropout: found 'yes'; expected true or false"),
        ("embed_scale: 1", "model.embed_scale: found 1; expected true or false"),
        ("dropout: true", "model.dropout: found true; expected a number"),
        ("dropout: '0.1'", "model.dropout: found '0.1'; expected a number"),
    ],
)
def test_wrong_types_are_not_coerced(tmp_path: Path, model: str, found: str) -> None:
    path = write(tmp_path, "x.yaml", MINIMAL + f"model: {{{model}}}\n")
    assert problems(path) == [f"{path}:3: {found}"]


def test_strict_types_still_take_what_yaml_and_json_dumps_give(tmp_path: Path) -> None:
    text = "name: t\nmodel: {dropout: 0}\ntrain: {max_steps: 10, optimizer: {lr: 1, betas: [0, 0.5]}}\n"
    spec = load_spec(write(tmp_path, "x.yaml", text))
    assert spec.model.dropout == 0.0 and type(spec.model.dropout) is float  # an int in a float field
    assert spec.train.optimizer.lr == 1.0 and spec.train.optimizer.betas == (0.0, 0.5)  # a list for a tuple
    assert ExperimentSpec.model_validate(json.loads(json.dumps(spec.resolved()))) == spec
    assert problems(tmp_path / "x.yaml", ("seed='7'",)) == [
        "--set seed='7': seed: found '7'; expected an integer"
    ]
    assert load_spec(tmp_path / "x.yaml", ["seed=7", "model.heads=8"]).model.heads == 8  # --set reads YAML


def test_tracking_experiment_follows_the_name_rule(tmp_path: Path) -> None:
    path = write(tmp_path, "x.yaml", MINIMAL)
    assert load_spec(path, ["tracking.experiment=study-2.a_b"]).tracking.experiment == "study-2.a_b"
    [line] = problems(path, ("tracking.experiment=a/../../b",))
    assert line.startswith(
        "--set tracking.experiment=a/../../b: tracking.experiment: found 'a/../../b'; expected"
    )


def test_a_precision_this_machine_cannot_run_is_a_spec_problem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ablate import hardware

    path = write(tmp_path, "x.yaml", "name: t\ntrain:\n  max_steps: 10\n  precision: bf16\n")
    allowed = load_spec(path)
    def probe(precision: str, device_type: str | None = None) -> str | None:
        return "no bf16 units here" if precision == "bf16" else None

    monkeypatch.setattr(hardware, "precision_problem", probe)
    assert problems(path) == [
        f"{path}:4: train.precision: found 'bf16'; no bf16 units here; accepted: auto, fp32, fp16"
    ]
    axis = write(tmp_path, "a.yaml", MINIMAL + "ablation: {axes: {train.precision: [fp32, bf16]}}\n")
    assert problems(axis) == [
        f"{axis}:3: ablation.axes.train.precision.1: train.precision: 'bf16' gives an invalid spec: "
        "train.precision: found 'bf16'; no bf16 units here; accepted: auto, fp32, fp16"
    ]
    # Not part of the spec: the same file elsewhere (check_hardware=False) is the same spec, same hash.
    elsewhere = load_spec(path, check_hardware=False)
    assert elsewhere == allowed and elsewhere.spec_hash == allowed.spec_hash
    assert load_spec(path, ["train.precision=fp16"]).train.precision == "fp16"


# ---------------------------------------------------------------- metric names
TEXT = (
    "name: t\ntrain: {max_steps: 10}\ndata:\n  source: files\n  files:\n"
    "    train: {src: a, tgt: b}\n    val: {src: c, tgt: d}\n"
)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (TEXT + "train: {max_steps: 10, early_stopping: {metric: val/blue}}\n",
         "train.early_stopping.metric: found 'val/blue'; accepted: val/loss, val/ppl, val/bleu, val/chrf; "
         "did you mean 'val/bleu'?"),
        (MINIMAL + "train: {max_steps: 10, early_stopping: {metric: val/bleu}}\n",
         "train.early_stopping.metric: val/bleu needs text data; a synthetic task reports val/exact_match"),
        (TEXT + "eval: {bleu_during_training: false}\n"
         "train: {max_steps: 10, early_stopping: {metric: val/bleu}}\n",
         "val/bleu is not computed at each evaluation: set eval.bleu_during_training: true"),
        (TEXT + "train: {max_steps: 10, early_stopping: {metric: val/bleu, mode: min}}\n",
         "train.early_stopping.mode: mode 'min' contradicts val/bleu (higher is better)"),
        (TEXT + "ablation: {axes: {model.ffn: [conv1d]}, metric: test/bleu}\n",
         "ablation.metric: test/bleu: the data has no test split; accepted: auto, val/loss"),
        (MINIMAL + "search:\n  space: {model.dropout: {low: 0, high: 0.3}}\n"
         "  objectives: [{metric: modelparams}]\n",
         "search.objectives.0.metric: found 'modelparams'; accepted: val/loss"),
        (MINIMAL + "eval: {metric: bleu}\n", "eval.metric: bleu needs text data (files, hub); or use auto"),
    ],
    ids=["typo", "text-only", "not-decoded", "mode", "no-test-split", "objective", "eval-metric"],
)
def test_metric_names_must_be_reported_by_runs_of_the_spec(tmp_path: Path, text: str, says: str) -> None:
    assert says in "\n".join(problems(write(tmp_path, "x.yaml", text)))


def test_metric_directions_default_to_the_metric() -> None:
    spec = validate_data(
        {"name": "t", "data": {"source": "hub", "hub": {"name": "x"}},
         "train": {"early_stopping": {"metric": "val/bleu"}},
         "ablation": {"axes": {"model.ffn": ["conv1d"]}, "metric": "test/chrf"},
         "search": {"space": {"model.dropout": {"low": 0, "high": 0.3}},
                    "objectives": [{"metric": "val/bleu"}, {"metric": "model/params"}]}},
        None, "t",
    )
    assert spec.train.early_stopping is not None and spec.train.early_stopping.mode == "max"
    assert spec.search is not None
    assert [o.direction for o in spec.search.objectives] == ["maximize", "minimize"]


@pytest.mark.parametrize(
    ("written", "says"),
    [
        ("-inff", "found '-inff'; expected a negative number or -inf (e.g. -1e9); did you mean '-inf'?"),
        ("-1e9x", "found '-1e9x'; expected a negative number or -inf (e.g. -1e9); did you mean '-1e9'?"),
        ("inf", "found 'inf'; the mask fill must be negative (-inf, -1e9, -1e6 ...); did you mean '-inf'?"),
        ("1e9", "found 1000000000.0; the mask fill must be negative (-inf, -1e9, -1e6 ...); "
                "did you mean '-1e9'?"),
        ("0", "found 0; the mask fill must be negative (-inf, -1e9, -1e6 ...)"),
    ],
)
def test_misspelled_mask_gets_a_did_you_mean(tmp_path: Path, written: str, says: str) -> None:
    path = write(tmp_path, "m.yaml", MINIMAL + f"model:\n  mask: {written}\n")
    assert problems(path) == [f"{path}:4: model.mask: {says}"]


# ---------------------------------------------------------------- extends
def test_extends_deep_merges_and_the_child_wins(tmp_path: Path) -> None:
    write(
        tmp_path,
        "base.yaml",
        "name: base\nseed: 3\nmodel: {d_model: 128, heads: 8, norm: custom}\n"
        "train: {max_steps: 50, optimizer: {lr: 1e-3, betas: [0.9, 0.98]}}\n",
    )
    write(tmp_path, "mid.yaml", "extends: base.yaml\nmodel: {heads: 4}\n")
    child = write(
        tmp_path,
        "deep/child.yaml",
        "extends: [../mid.yaml]\nname: child\ntrain: {optimizer: {betas: [0.8, 0.9]}}\n",
    )
    spec = load_spec(child)
    assert (spec.name, spec.seed) == ("child", 3)
    assert (spec.model.d_model, spec.model.heads, spec.model.norm) == (128, 4, "custom")
    assert spec.train.optimizer.lr == 1e-3 and spec.train.optimizer.betas == (0.8, 0.9)
    data, smap = load_spec_data(child)
    assert "extends" not in data
    assert smap.where("model.heads") == f"{tmp_path / 'mid.yaml'}:2"
    assert smap.where("model.d_model") == f"{tmp_path / 'base.yaml'}:3"
    assert smap.where("train.optimizer.betas.1") == f"{tmp_path / 'deep/child.yaml'}:3"


def test_extends_list_later_parent_wins_and_null_removes_a_section(tmp_path: Path) -> None:
    write(
        tmp_path,
        "a.yaml",
        MINIMAL + "model: {d_model: 32}\nablation: {axes: {model.ffn: [linear, conv1d]}}\n",
    )
    write(tmp_path, "b.yaml", "model: {d_model: 48, heads: 4}\n")
    spec = load_spec(write(tmp_path, "c.yaml", "extends: [a.yaml, b.yaml]\nablation: null\n"))
    assert spec.model.d_model == 48 and spec.ablation is None


# ---------------------------------------------------------------- --set
@pytest.mark.parametrize(
    ("override", "field", "expected"),
    [
        ("model.d_model=256", ("model", "d_model"), 256),
        ("train.optimizer.lr=3e-4", ("train", "optimizer", "lr"), 3e-4),
        ("train.optimizer.lr=0.5", ("train", "optimizer", "lr"), 0.5),
        ("tracking.enabled=false", ("tracking", "enabled"), False),
        (
            "model.shared_layer_norm=yes",
            ("model", "shared_layer_norm"),
            False,
        ),  # residual is pre_norm: checked
        ("model.mask=-inf", ("model", "mask"), "-inf"),
        ("model.mask=-1e9", ("model", "mask"), "-1e9"),
        ("train.optimizer.betas=[0.8, 0.99]", ("train", "optimizer", "betas"), (0.8, 0.99)),
        ("train.clip_norm=null", ("train", "clip_norm"), None),
        ("data.synthetic={task: sort, vocab_size: 30}", ("data", "synthetic", "task"), "sort"),
        ("description=a b = c", ("description",), "a b = c"),
    ],
)
def test_set_coerces_values_as_yaml(
    tmp_path: Path, override: str, field: tuple[str, ...], expected: object
) -> None:
    path = write(tmp_path, "x.yaml", MINIMAL)
    if override.startswith("model.shared_layer_norm"):
        assert "shared_layer_norm applies to residual: post_norm only" in "\n".join(
            problems(path, (override,))
        )
        return
    value: object = load_spec(path, [override])
    for part in field:
        value = getattr(value, part)
    assert value == expected and type(value) is type(expected)


def test_set_list_item_and_later_override_wins(tmp_path: Path) -> None:
    path = write(tmp_path, "x.yaml", MINIMAL + "ablation: {axes: {model.ffn: [linear]}, seeds: [1, 2]}\n")
    spec = load_spec(path, ["ablation.seeds.1=7", "model.heads=2", "model.heads=8"])
    assert spec.ablation is not None and spec.ablation.seeds == [1, 7] and spec.model.heads == 8


def test_apply_overrides_copies_and_reports_bad_forms() -> None:
    data = {"model": {"d_model": 64}}
    out = apply_overrides(data, ["model.d_model=32", "train.max_steps=5"])
    assert out == {"model": {"d_model": 32}, "train": {"max_steps": 5}} and data == {"model": {"d_model": 64}}
    with pytest.raises(SpecError) as info:
        apply_overrides(data, ["model.d_model", "model..x=1", "model.d_model.x=2"])
    assert [p.where for p in info.value.problems] == [
        "--set model.d_model",
        "--set model..x=1",
        "--set model.d_model.x=2",
    ]
    target: dict[str, object] = {}
    set_dotted(target, "a.b.c", 1)
    assert target == {"a": {"b": {"c": 1}}}


def test_env_var_in_files_root_stays_unexpanded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # ablate.data.corpus expands it when reading: the spec and its hash do not depend on the machine
    text = (
        "name: f\ntrain: {max_steps: 5}\ndata:\n  source: files\n  files:\n"
        "    root: ${ABLATE_T_DIR:-fallback}/x\n"
        "    train: {src: a, tgt: b}\n    val: {src: c, tgt: d}\n"
    )
    path = write(tmp_path, "f.yaml", text)
    monkeypatch.delenv("ABLATE_T_DIR", raising=False)
    spec = load_spec(path)
    assert spec.data.files is not None and spec.data.files.root == "${ABLATE_T_DIR:-fallback}/x"
    monkeypatch.setenv("ABLATE_T_DIR", "/data")
    assert load_spec(path).spec_hash == spec.spec_hash


# ---------------------------------------------------------------- YAML details
def test_yaml_merge_keys_floats_and_timestamps(tmp_path: Path) -> None:
    path = write(tmp_path, "x.yaml", "name: t\ndescription: 2024-01-31\nsmall: &s {d_model: 32, heads: 2}\n")
    assert "unknown key 'small'" in problems(path)[0]
    path = write(
        tmp_path,
        "y.yaml",
        "name: t\ndescription: 2024-01-31\ntrain: {max_steps: 5, optimizer: "
        "{lr: 5e-4, eps: 1E-8}}\nmodel:\n  <<: {d_model: 32, heads: 2}\n  heads: 4\n",
    )
    spec = load_spec(path)
    assert spec.description == "2024-01-31"
    assert spec.train.optimizer.lr == 5e-4 and spec.train.optimizer.eps == 1e-8
    assert (spec.model.d_model, spec.model.heads) == (32, 4)  # merge key, then the explicit key wins


def test_alias_bomb_is_a_clean_error(tmp_path: Path) -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 8)]
    path = write(tmp_path, "bomb.yaml", "\n".join(lines) + "\n")
    assert "alias bomb" in problems(path)[0]


@pytest.mark.parametrize(
    ("written", "canonical", "fill"),
    [
        ("-inf", "-inf", -math.inf),
        ("-.inf", "-inf", -math.inf),
        ("-1e9", "-1e9", -1e9),
        ("-1e6", "-1e6", -1e6),
        ("-1e10", "-1e10", -1e10),
        ("'-1e9'", "-1e9", -1e9),
        ("-1000000000.0", "-1e9", -1e9),
        ("-1.5e4", "-1.5e4", -15000.0),
    ],
)
def test_mask_spellings_accepted_and_round_trip(
    tmp_path: Path, written: str, canonical: str, fill: float
) -> None:
    spec = load_spec(write(tmp_path, "m.yaml", MINIMAL + f"model: {{mask: {written}}}\n"))
    assert spec.model.mask == canonical and spec.model.mask_fill == fill
    text = dump_spec_yaml(spec)
    assert f"\n  mask: {canonical}\n" in text  # written plain, as users write it
    again = load_spec(write(tmp_path, "again.yaml", text))
    assert again == spec and again.spec_hash == spec.spec_hash


# ---------------------------------------------------------------- identity
def test_hash_ignores_key_order_and_tracking_but_not_fields(tmp_path: Path) -> None:
    a = load_spec(
        write(
            tmp_path, "a.yaml", "name: t\nseed: 1\nmodel: {d_model: 64, heads: 4}\ntrain: {max_steps: 10}\n"
        )
    )
    b = load_spec(
        write(
            tmp_path,
            "b.yaml",
            "train: {max_steps: 10}\nmodel: {heads: 4, d_model: 64}\n"
            "seed: 1\nname: t\ntracking: {experiment: elsewhere, enabled: false}\n"
            "description: other words\n",
        )
    )
    assert a.spec_hash == b.spec_hash and len(a.spec_hash) == 12
    c = load_spec(
        write(
            tmp_path, "c.yaml", "name: t\nseed: 1\nmodel: {d_model: 64, heads: 8}\ntrain: {max_steps: 10}\n"
        )
    )
    assert c.spec_hash != a.spec_hash
    assert load_spec(tmp_path / "a.yaml", ["model.d_model=64"]).spec_hash == a.spec_hash
    assert load_spec(tmp_path / "a.yaml", ["seed=2"]).spec_hash != a.spec_hash


def test_an_axis_added_later_leaves_the_hash_of_older_specs_alone(tmp_path: Path) -> None:
    """embedding_dropout came after runs were recorded: at its default it is not part of a run's identity
    (a spec that never names it and one that names its default are one run), away from it it is."""
    path = write(tmp_path, "a.yaml", MINIMAL)
    before = load_spec(path)
    assert before.model.embedding_dropout == "none"
    assert "embedding_dropout" not in before.identity()["model"]
    assert load_spec(path, ["model.embedding_dropout=none"]).spec_hash == before.spec_hash
    assert load_spec(path, ["model.embedding_dropout=before_positions"]).spec_hash != before.spec_hash


@pytest.mark.parametrize("path", EXPERIMENTS, ids=[str(p.relative_to(REPO)) for p in EXPERIMENTS])
def test_every_experiment_validates_and_round_trips(
    path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ABLATE_DATA_DIR", raising=False)
    spec = load_spec(path)
    assert isinstance(spec, ExperimentSpec)
    first_line = path.read_text().splitlines()[0]
    assert first_line.startswith("# yaml-language-server: $schema=")
    schema_file = (path.parent / first_line.split("$schema=", 1)[1]).resolve()
    assert schema_file == REPO / "experiments" / "ablate.schema.json"
    again = load_spec(write(tmp_path, "resolved.yaml", dump_spec_yaml(spec)))
    assert again == spec and again.spec_hash == spec.spec_hash


def test_presets_and_quickstart_open_with_what_they_reproduce() -> None:
    designs = "ABCDE"  # the five tutorial designs, one preset each, named a- to e- by their source
    presets = sorted(p for p in EXPERIMENTS if p.parent.name == "presets")
    assert [p.name[0] for p in presets] == [d.lower() for d in designs]
    for path in presets:
        lines = path.read_text().splitlines()
        assert lines[1].startswith("# The design of "), (path.name, lines[1])  # named by what it is
        assert lines[2].startswith("# ")  # ... and goes on to say which choices it makes
    quick = (REPO / "experiments" / "quickstart.yaml").read_text().splitlines()
    assert quick[1].startswith("# Quickstart: ") and quick[2].lstrip("# ").startswith("ablate run ")


def test_public_api_loads_a_spec_and_builds_its_model() -> None:
    import torch

    import ablate

    spec = ablate.load_spec(REPO / "experiments" / "quickstart.yaml", overrides=["model.d_model=32",
                                                                                  "model.heads=2"])
    assert isinstance(spec, ExperimentSpec) and spec.model.d_model == 32
    model = ablate.build_model(spec.model, 11, 13, pad_id=0)
    src, tgt_in = torch.randint(1, 11, (3, 7)), torch.randint(1, 13, (3, 5))
    src[1, 4:] = 0  # padding is masked inside
    logits = model(src, tgt_in)
    assert logits.shape == (3, 5, 13) and torch.isfinite(logits).all()
    assert callable(getattr(model, "encode", None)) and callable(getattr(model, "decode", None))


def test_experiments_exist() -> None:
    names = {str(p.relative_to(REPO / "experiments")) for p in EXPERIMENTS}
    assert {"quickstart.yaml", "multi30k-de-en.yaml", "multi30k-de-en-local.yaml"} <= names
    assert len([n for n in names if n.startswith("presets/")]) == 5


def test_presets_reproduce_the_tutorial_designs() -> None:
    presets = {p.name.split("-")[0]: load_spec(p) for p in EXPERIMENTS if p.parent.name == "presets"}
    a, b, c, d, e = (presets[k] for k in "abcde")
    assert (a.model.residual, a.model.norm, a.model.mask, a.train.precision, a.train.accumulation) == (
        "pre_norm",
        "custom",
        "-inf",
        "fp16",
        4,
    )
    assert (b.model.mask, b.model.position_dropout) == ("-1e6", False)
    assert (c.model.norm, c.model.mask, c.model.attention_dropout) == ("builtin", "-1e9", 0.0)
    assert (d.model.residual, d.model.shared_layer_norm, d.model.ffn, d.model.mask) == (
        "post_norm",
        True,
        "conv1d",
        "-1e10",
    )
    assert (d.data.reverse_source, d.data.lowercase, d.data.tokenizer.min_freq, d.train.epochs) == (
        True,
        True,
        2,
        10,
    )
    assert (e.model.norm, e.model.norm_affine, e.model.mask, e.train.label_smoothing) == (
        "custom",
        "scalar",
        "-1e9",
        0.1,
    )


def test_local_multi30k_reads_the_shared_files(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ABLATE_DATA_DIR", raising=False)
    spec = load_spec(REPO / "experiments" / "multi30k-de-en-local.yaml")
    files = spec.data.files
    assert spec.data.source == "files" and spec.data.hub is None and files is not None
    assert files.root == "${ABLATE_DATA_DIR:-../shared/data/multi30k}"
    assert (files.train.src, files.val.tgt) == ("train.de.gz", "val.en.gz")
    assert files.test is not None and files.test.src == "test_2016_flickr.de.gz"


# ---------------------------------------------------------------- schema
def test_json_schema_is_json_and_enumerates_components() -> None:
    schema = json.loads(json.dumps(json_schema()))
    model = schema["$defs"]["ModelSpec"]["properties"]
    for kind in ("residual", "positions", "ffn", "norm", "attention"):
        assert model[kind]["enum"] == registry.names(kind) and registry.names(kind)
    assert set(registry.names("mask")) <= set(model["mask"]["examples"])
    assert "extends" in schema["properties"] and "name" in schema["properties"]
    # A child spec inherits `name` through `extends:`, which JSON Schema cannot follow: not required there.
    assert "name" not in schema.get("required", [])


def _builtin_components_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Hide every component registered outside the `registry` package (plugins, test components)."""
    registry.load_plugins()
    builtin = {kind: {name: entry for name, entry in bucket.items()
                      if getattr(entry.obj, "__module__", "").split(".")[0] == "registry"}
               for kind, bucket in registry.REGISTRY._entries.items()}
    monkeypatch.setattr(registry.REGISTRY, "_entries", builtin)


def test_committed_schema_is_up_to_date(crashing_ffn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The committed schema lists this repository's components; a third-party plugin installed beside it
    (here a test component registered like one) adds names to `ablate schema` but is no reason to fail."""
    assert crashing_ffn in json_schema()["$defs"]["ModelSpec"]["properties"]["ffn"]["enum"]
    _builtin_components_only(monkeypatch)
    committed = json.loads((REPO / "experiments" / "ablate.schema.json").read_text())
    assert committed == json_schema(), "regenerate: ablate schema --out experiments/ablate.schema.json"


def test_dump_is_plain_yaml() -> None:
    spec = load_spec(REPO / "experiments" / "quickstart.yaml")
    data = yaml.safe_load(dump_spec_yaml(spec))
    assert data["name"] == "quickstart" and data["model"]["mask"] == "-inf"


def test_where_a_run_trains_leaves_its_identity_alone_and_its_threads_keep_their_recorded_hash() -> None:
    """train.device is the machine's setting: the same cell wherever it trains. train.threads stays in the
    identity: runs were recorded with it, and a spec that set it must find them again."""
    base = ExperimentSpec.model_validate({"name": "t"})
    on_cpu = ExperimentSpec.model_validate({"name": "t", "train": {"device": "cpu"}})
    assert on_cpu.spec_hash == base.spec_hash
    one_thread = ExperimentSpec.model_validate({"name": "t", "train": {"threads": 1}})
    assert one_thread.spec_hash != base.spec_hash and one_thread.identity()["train"]["threads"] == 1
    assert "device" not in base.identity()["train"]


def test_a_seed_range_error_names_the_field_and_keeps_the_rest_of_the_study_checked(tmp_path: Path) -> None:
    # The union `seeds: list | {min, max}`: no member tags in the location, no "expected a list" for a
    # mapping, and the ablation section is not dropped, so its metric is still checked in the same pass.
    path = write(tmp_path, "x.yaml", MINIMAL + "ablation:\n  axes: {model.norm: [builtin, rms]}\n"
                 "  seeds: {min: 5, max: 3}\n  metric: val/los\n")
    lines = problems(path)
    assert [line.split(": ")[1] for line in lines] == ["ablation.seeds.max", "ablation.metric"]
    assert lines[0].endswith("ablation.seeds.max: max 3 is below min 5")
    assert "found 'val/los'" in lines[1] and "did you mean 'val/loss'?" in lines[1]
    assert not any("[" in line.split(": ")[1] for line in lines)  # no 'list[constrained-int]'
    for seeds, why in (("{min: 3, max: x}", "ablation.seeds.max: found 'x'; expected an integer or 'auto'"),
                       ("abc", "ablation.seeds: found 'abc'; expected a list or a mapping"),
                       ("{min: 3, max: 5, stp: 2}",
                        "ablation.seeds.stp: unknown key 'stp'; did you mean 'step'?")):
        path = write(tmp_path, "y.yaml", MINIMAL + f"ablation:\n  axes: {{model.norm: [builtin, rms]}}\n"
                     f"  seeds: {seeds}\n")
        assert [line.split(": ", 1)[1] for line in problems(path)] == [why]


def test_a_factorial_level_naming_no_component_is_one_line_at_the_level(tmp_path: Path) -> None:
    path = write(tmp_path, "x.yaml", MINIMAL + "ablation:\n  design: full_factorial\n  axes:\n"
                 "    model.residual: [pre_norm, post_norm]\n    model.norm: [builtin, rmsnorm_typo]\n"
                 "  seeds: [0, 1]\n")
    assert problems(path) == [
        f"{path}:7: ablation.axes.model.norm.1: model.norm: 'rmsnorm_typo' gives an invalid spec: "
        f"model.norm: unknown norm 'rmsnorm_typo'; accepted: {', '.join(registry.names('norm'))}"
    ]
