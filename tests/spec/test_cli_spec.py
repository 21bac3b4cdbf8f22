"""The spec commands through the real CLI (`python -m ablate ...` in a subprocess, cwd = a temp folder).

Every malformed spec must exit 2 with one `FILE:LINE: dotted.path: ...` line per problem, no traceback,
and nothing written to the working directory. Importing torch costs ~1.5 s per process, so the malformed
files are validated by one `ablate validate` call (each file is reported on its own) and checked case by
case from its output.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import pytest

import registry
from ablate.cli import COMMAND, build_parser, main

REPO = Path(__file__).resolve().parents[2]


def ablate(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "ABLATE_DATA_DIR")}
    return subprocess.run(
        [sys.executable, "-m", "ablate", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def listing(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


@dataclass(frozen=True)
class Bad:
    id: str
    text: str
    line: int  # line the problem is reported at
    path: str  # dotted field path named in the message ("" for file-level problems)
    says: str  # a fragment the message must contain


BASE = "name: t\ntrain: {max_steps: 10}\n"
CASES = [
    Bad("yaml-syntax", "name: [unclosed\nseed: 1\n", 2, "", "invalid YAML"),
    Bad("yaml-tab", "name: t\nmodel:\n\td_model: 64\n", 3, "", "tabs are not allowed"),
    Bad("yaml-bad-indent", "name: t\nmodel:\n  d_model: 64\n   heads: 4\n", 4, "", "invalid YAML"),
    Bad("empty-file", "", 1, "", "the file is empty"),
    Bad("comments-only", "# nothing here\n", 1, "", "the file is empty"),
    Bad("not-a-mapping", "- name: t\n- seed: 1\n", 1, "", "found a list"),
    Bad("scalar-document", "just some text\n", 1, "", "a spec is a mapping"),
    Bad(
        "duplicate-top-key",
        "name: a\nseed: 1\nname: b\n",
        3,
        "name",
        "duplicate key 'name' (first at line 1)",
    ),
    Bad(
        "duplicate-nested-key",
        BASE + "model:\n  d_model: 64\n  heads: 4\n  d_model: 32\n",
        6,
        "model.d_model",
        "first at line 4",
    ),
    Bad("unknown-top-key", BASE + "modle: {d_model: 64}\n", 3, "modle", "did you mean 'model'?"),
    Bad("unknown-model-key", BASE + "model:\n  d_modle: 64\n", 4, "model.d_modle", "did you mean 'd_model'?"),
    Bad(
        "unknown-optimizer-key",
        "name: t\ntrain:\n  optimizer:\n    betass: [0.9, 0.98]\n",
        4,
        "train.optimizer.betass",
        "did you mean 'betas'?",
    ),
    Bad(
        "unknown-synthetic-key",
        BASE + "data:\n  synthetic:\n    vocab: 30\n",
        5,
        "data.synthetic.vocab",
        "did you mean 'vocab_size'?",
    ),
    Bad(
        "unknown-decode-key",
        BASE + "eval:\n  decode: {beams: 4}\n",
        4,
        "eval.decode.beams",
        "did you mean 'beam'?",
    ),
    Bad(
        "unknown-tracking-key",
        BASE + "tracking:\n  experment: x\n",
        4,
        "tracking.experment",
        "did you mean 'experiment'?",
    ),
    Bad("unknown-key-no-match", BASE + "model:\n  zzz: 1\n", 4, "model.zzz", "accepted: d_model, heads"),
    Bad(
        "wrong-type-int",
        BASE + "model:\n  d_model: abc\n",
        4,
        "model.d_model",
        "found 'abc'; expected an integer",
    ),
    Bad(
        "wrong-type-list",
        "name: t\ntrain:\n  max_steps: [1, 2]\n",
        3,
        "train.max_steps",
        "expected an integer",
    ),
    Bad("section-not-mapping", BASE + "model: 5\n", 3, "model", "expected a mapping"),
    Bad(
        "misspelled-residual",
        BASE + "model:\n  residual: postnorm\n",
        4,
        "model.residual",
        "did you mean 'post_norm'?",
    ),
    Bad("misspelled-norm", BASE + "model:\n  norm: costum\n", 4, "model.norm", "did you mean 'custom'?"),
    Bad(
        "misspelled-attention",
        BASE + "model:\n  attention: spda\n",
        4,
        "model.attention",
        "did you mean 'sdpa'?",
    ),
    Bad("unknown-ffn", BASE + "model:\n  ffn: zzzzzz\n", 4, "model.ffn", "unknown ffn 'zzzzzz'; accepted: "),
    Bad(
        "misspelled-precision",
        "name: t\ntrain:\n  max_steps: 5\n  precision: fp31\n",
        4,
        "train.precision",
        "did you mean 'fp32'?",
    ),
    Bad(
        "heads-not-dividing",
        BASE + "model:\n  d_model: 64\n  heads: 3\n",
        5,
        "model.heads",
        "d_model 64 is not divisible by heads 3",
    ),
    Bad(
        "dropout-one",
        BASE + "model:\n  dropout: 1.0\n",
        4,
        "model.dropout",
        "found 1.0; expected a value < 1.0",
    ),
    Bad("negative-d-ff", BASE + "model:\n  d_ff: -5\n", 4, "model.d_ff", "found -5; expected a value > 0"),
    Bad(
        "negative-train-size",
        BASE + "data:\n  synthetic: {train_size: -1}\n",
        4,
        "data.synthetic.train_size",
        "expected a value >= 1",
    ),
    Bad("mask-zero", BASE + "model:\n  mask: 0\n", 4, "model.mask", "must be negative"),
    Bad("mask-positive", BASE + "model:\n  mask: 1e9\n", 4, "model.mask", "must be negative"),
    Bad("mask-word", BASE + "model:\n  mask: abc\n", 4, "model.mask", "expected a negative number or -inf"),
    Bad(
        "python-object-tag",
        BASE + "seed: !!python/object/apply:os.system ['touch pwned']\n",
        3,
        "seed",
        "tag '!!python/object/apply:os.system' is not allowed",
    ),
    Bad("local-tag", BASE + "description: !secret x\n", 3, "description", "tag '!secret' is not allowed"),
    Bad(
        "huge-float",
        "name: t\ntrain:\n  max_steps: 5\n  clip_norm: 1e400\n",
        4,
        "train.clip_norm",
        "too large",
    ),
    Bad(
        "huge-int",
        "name: t\ntrain:\n  max_steps: 5\n  eval_every: " + "1" + "0" * 30 + "\n",
        4,
        "train.eval_every",
        "too large",
    ),
    Bad("huge-int-bounded", BASE + "model:\n  d_model: 1e30\n", 4, "model.d_model", "found 1e+30"),
    Bad("name-with-slash", "name: runs/evil\ntrain: {max_steps: 10}\n", 1, "name", "found 'runs/evil'"),
    Bad("name-missing", "train: {max_steps: 10}\n", 1, "name", "required"),
    Bad(
        "min-len-above-max-len",
        BASE + "data:\n  synthetic:\n    min_len: 9\n    max_len: 4\n",
        5,
        "data.synthetic.min_len",
        "min_len 9 is above max_len 4",
    ),
    Bad(
        "no-max-steps-nor-epochs",
        "name: t\ntrain:\n  max_steps: null\n",
        3,
        "train.max_steps",
        "set max_steps, epochs or both",
    ),
    Bad(
        "learned-positions-too-short",
        BASE + "data: {max_len: 600}\nmodel: {positions: learned}\n",
        3,
        "data.max_len",
        "exceeds model.max_positions 512",
    ),
    Bad("ablation-not-mapping", BASE + "ablation: [model.residual]\n", 3, "ablation", "expected a mapping"),
    Bad(
        "ablation-axis-not-list",
        BASE + "ablation:\n  axes:\n    model.residual: pre_norm\n",
        5,
        "ablation.axes.model.residual",
        "expected a list",
    ),
    Bad(
        "ablation-axis-unknown-field",
        BASE + "ablation:\n  axes:\n    model.residul: [pre_norm, post_norm]\n",
        5,
        "ablation.axes.model.residul",
        "did you mean 'model.residual'?",
    ),
    Bad(
        "ablation-axis-bad-value",
        BASE + "ablation:\n  axes:\n    model.residual:\n      - pre_norm\n      - postnorm\n",
        7,
        "ablation.axes.model.residual.1",
        "did you mean 'post_norm'?",
    ),
    Bad(
        "ablation-variants-empty",
        BASE + "ablation:\n  design: variants\n",
        3,
        "ablation.variants",
        "needs a non-empty variants list",
    ),
    Bad(
        "search-low-above-high",
        BASE + "search:\n  space:\n    train.optimizer.lr: {low: 1e-2, high: 1e-4}\n",
        5,
        "search.space.train.optimizer.lr.low",
        "must be below high",
    ),
    Bad(
        "search-unknown-field",
        BASE + "search:\n  space:\n    model.dmodel: {choice: [64, 128]}\n",
        5,
        "search.space.model.dmodel",
        "did you mean 'model.d_model'?",
    ),
    Bad("bool-as-int", BASE + "model:\n  heads: true\n", 4, "model.heads", "found true; expected an integer"),
    Bad(
        "yes-as-int",
        BASE + "model:\n  encoder_layers: yes\n",
        4,
        "model.encoder_layers",
        "found true; expected an integer",
    ),
    Bad(
        "string-as-bool",
        BASE + "model:\n  position_dropout: 'yes'\n",
        4,
        "model.position_dropout",
        "found 'yes'; expected true or false",
    ),
    Bad("int-as-bool", BASE + "model:\n  embed_scale: 1\n", 4, "model.embed_scale", "expected true or false"),
    Bad("string-as-seed", BASE + "seed: '7'\n", 3, "seed", "found '7'; expected an integer"),
    Bad(
        "experiment-path",
        BASE + "tracking:\n  experiment: a/../../b\n",
        4,
        "tracking.experiment",
        "found 'a/../../b'; expected 1-100 letters",
    ),
    Bad(
        "early-stopping-metric-typo",
        BASE + "train:\n  max_steps: 10\n  early_stopping: {metric: val/exact_macth}\n",
        5,
        "train.early_stopping.metric",
        "found 'val/exact_macth'; accepted: val/loss, val/ppl, val/exact_match; "
        "did you mean 'val/exact_match'?",
    ),
    Bad(
        "ablation-metric-typo",
        BASE + "ablation:\n  axes: {model.ffn: [conv1d]}\n  metric: val/los\n",
        5,
        "ablation.metric",
        "did you mean 'val/loss'?",
    ),
    Bad("mask-typo", BASE + "model:\n  mask: -inff\n", 4, "model.mask", "did you mean '-inf'?"),
    Bad("mask-number-typo", BASE + "model:\n  mask: -1e9x\n", 4, "model.mask", "did you mean '-1e9'?"),
    # Every problem in one pass: the cross-field check runs although another field failed.
    Bad("two-problems-key", BASE + "model:\n  d_modle: 64\n  heads: 3\n", 4, "model.d_modle", "d_model"),
    Bad(
        "two-problems-heads",
        BASE + "model:\n  d_modle: 64\n  heads: 3\n",
        5,
        "model.heads",
        "d_model 128 is not divisible by heads 3",
    ),
    Bad("list-as-key", BASE + "[a, b]: 1\n", 3, "", "keys must be plain names"),
    Bad("recursive-alias", BASE + "description: &x [*x]\n", 3, "description.0", "recursive alias"),
    Bad(
        "extends-missing", "extends: nowhere.yaml\nname: t\n", 1, "extends", "file not found: 'nowhere.yaml'"
    ),
    Bad("extends-not-a-name", "extends: 5\nname: t\n", 1, "extends", "expected a file name"),
    Bad("extends-self", "extends: extends-self.yaml\nname: t\n", 1, "extends", "cycle"),
    # The training recipe's axes (registry/optimizer.py, schedule.py, parametrisation.py), grouped attention
    Bad("unknown-optimizer", "name: t\ntrain:\n  optimizer: {name: adamm}\n", 3, "train.optimizer.name",
        "unknown optimizer 'adamm'; accepted: adafactor, adam, adamw, lion, muon, sgd; did you mean 'adam'?"),
    Bad("unknown-schedule", "name: t\ntrain:\n  schedule:\n    name: cosinus\n", 4, "train.schedule.name",
        "did you mean 'cosine'?"),
    Bad("unknown-loss", "name: t\ntrain:\n  loss: {name: zloss}\n", 3, "train.loss.name",
        "did you mean 'z_loss'?"),
    Bad("kv-heads-not-dividing", BASE + "model:\n  heads: 4\n  kv_heads: 3\n", 5, "model.kv_heads",
        "kv_heads 3 does not divide heads 4: each key/value head serves heads / kv_heads query heads; "
        "try 1, 2 or 4"),
    Bad("mup-without-base-width", BASE + "model:\n  parametrisation: mup\n", 4, "model.parametrisation",
        "parametrisation mup needs mup_base_width, the d_model the hyperparameters were tuned at"),
    Bad("mup-base-width-zero", BASE + "model:\n  parametrisation: mup\n  mup_base_width: 0\n", 5,
        "model.mup_base_width", "found 0; must be >= 1"),
    Bad("mup-with-muon", "name: t\nmodel:\n  parametrisation: mup\n  mup_base_width: 32\ntrain:\n"
        "  optimizer: {name: muon}\n", 3, "model.parametrisation",
        "optimizer muon is not one: use adam, adamw, lion, sgd, or parametrisation: standard"),
    Bad("wsd-fraction-above-1", "name: t\ntrain:\n  schedule: {name: wsd, wsd_decay_fraction: 1.5}\n", 3,
        "train.schedule.wsd_decay_fraction", "found 1.5; must be <= 1 (a fraction of the run in (0, 1]"),
    Bad("wsd-fraction-zero", "name: t\ntrain:\n  schedule:\n    name: wsd\n    wsd_decay_fraction: 0\n", 5,
        "train.schedule.wsd_decay_fraction", "found 0; must be > 0 (a fraction of the run in (0, 1]"),
    Bad("wsd-shape-typo", "name: t\ntrain:\n  schedule: {name: wsd, wsd_shape: sqrt}\n", 3,
        "train.schedule.wsd_shape", "accepted: linear, cosine, 1-sqrt"),
    Bad("muon-option-on-adamw", "name: t\ntrain:\n  optimizer:\n    name: adamw\n    muon_momentum: 0.9\n",
        5, "train.optimizer.muon_momentum", "muon_momentum applies to optimizer: muon only (this spec has "
        "optimizer: adamw)"),
    Bad("betas-on-sgd", "name: t\ntrain:\n  optimizer: {name: sgd, betas: [0.9, 0.9]}\n", 3,
        "train.optimizer.betas", "betas applies to optimizer: adam, adamw, muon only"),
    Bad("betas-not-a-pair", "name: t\ntrain:\n  optimizer: {name: adam, betas: [0.9]}\n", 3,
        "train.optimizer.betas", "found [0.9]; expected a list of 2 numbers"),
    Bad("nesterov-without-momentum",
        "name: t\ntrain:\n  optimizer: {name: sgd, momentum: 0, nesterov: true}\n", 3, "train.optimizer.name",
        "nesterov needs momentum > 0"),
    Bad("window-on-encoder-decoder", BASE + "model:\n  window: 8\n", 4, "model.window",
        "a sliding window applies to the causal self-attention of model.arch decoder_only"),
    Bad("min-lr-ratio-on-inverse-sqrt",
        "name: t\ntrain:\n  schedule: {name: inverse_sqrt, min_lr_ratio: 0.1}\n", 3,
        "train.schedule.min_lr_ratio", "min_lr_ratio applies to schedule: cosine, linear, wsd only"),
]
CYCLE = {
    "cycle-a.yaml": "extends: cycle-b.yaml\nname: a\n",
    "cycle-b.yaml": "extends: cycle-a.yaml\nname: b\n",
}


@pytest.fixture(scope="module")
def batch(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[subprocess.CompletedProcess[str], Path, set[str]]:
    folder = tmp_path_factory.mktemp("bad")
    for case in CASES:
        (folder / f"{case.id}.yaml").write_text(case.text)
    for name, text in CYCLE.items():
        (folder / name).write_text(text)
    before = listing(folder)
    files = [f"{case.id}.yaml" for case in CASES] + ["cycle-a.yaml"]
    result = ablate("validate", *files, cwd=folder)
    return result, folder, before


def test_batch_exits_2_without_traceback_or_files(
    batch: tuple[subprocess.CompletedProcess[str], Path, set[str]],
) -> None:
    result, folder, before = batch
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""  # not one of them is "ok"
    assert listing(folder) == before  # no mlflow.db, no runs/, no cache: validation writes nothing
    assert not (folder / "pwned").exists()


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_malformed_spec(case: Bad, batch: tuple[subprocess.CompletedProcess[str], Path, set[str]]) -> None:
    result, _, _ = batch
    lines = [line for line in result.stderr.splitlines() if line.startswith(f"error: {case.id}.yaml:")]
    assert lines, f"no error for {case.id}.yaml in:\n{result.stderr}"
    head = f"error: {case.id}.yaml:{case.line}: " + (f"{case.path}: " if case.path else "")
    matching = [line for line in lines if line.startswith(head) and case.says in line]
    assert matching, f"expected a line starting {head!r} containing {case.says!r}; got:\n" + "\n".join(lines)


def test_cyclic_extends_names_the_chain(
    batch: tuple[subprocess.CompletedProcess[str], Path, set[str]],
) -> None:
    result, _, _ = batch
    assert (
        "error: cycle-b.yaml:1: extends: cycle: cycle-a.yaml -> cycle-b.yaml -> cycle-a.yaml" in result.stderr
    )


@pytest.mark.slow
def test_one_bad_file_alone_exits_2_and_good_files_still_print_ok(tmp_path: Path) -> None:
    (tmp_path / "good.yaml").write_text("name: good\ntrain: {max_steps: 10}\n")
    (tmp_path / "bad.yaml").write_text("name: bad\nmodel:\n  residual: postnorm\n  d_model: 63\n")
    result = ablate("validate", "good.yaml", "bad.yaml", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stdout.startswith("ok good.yaml (") and "bad.yaml" not in result.stdout
    assert "error: bad.yaml:3: model.residual: unknown residual 'postnorm'" in result.stderr
    assert "Traceback" not in result.stderr
    assert listing(tmp_path) == {"good.yaml", "bad.yaml"}


SET_CASES = {
    "model.d_model": "--set model.d_model: expected KEY=VALUE",
    "=3": "--set =3: bad key ''",
    "model..heads=4": "--set model..heads=4: bad key 'model..heads'",
    "model.fooo=1": "--set model.fooo=1: model.fooo: unknown key 'fooo'",
    "model.d_modl=64": "--set model.d_modl=64: model.d_modl: unknown key 'd_modl'; did you mean 'd_model'?",
    "model.d_model.x=1": "--set model.d_model.x=1: model.d_model.x: cannot set it: model.d_model is 64",
    "model.heads=abc": "--set model.heads=abc: model.heads: found 'abc'; expected an integer",
    "model.encoder_layers=true": "--set model.encoder_layers=true: model.encoder_layers: found true; "
    "expected an integer",
    "tracking.experiment=a/../../b": "--set tracking.experiment=a/../../b: tracking.experiment: "
    "found 'a/../../b'",
    "model.heads=[1": "--set model.heads=[1: model.heads: invalid YAML",
    "seed=!!python/name:os.system": "--set seed=!!python/name:os.system: seed: tag '!!python/name:os.system'",
    "model.mask=1e9": "--set model.mask=1e9: model.mask: found 1000000000.0; the mask fill must be negative",
    "extends=other.yaml": "--set extends=other.yaml: extends: extends can only be written in a spec file",
}


@pytest.mark.slow
def test_bad_overrides_all_reported_in_one_pass(tmp_path: Path) -> None:
    (tmp_path / "x.yaml").write_text("name: x\nmodel: {d_model: 64}\ntrain: {max_steps: 10}\n")
    args = [a for override in SET_CASES for a in ("--set", override)]
    result = ablate("validate", "x.yaml", *args, cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    for expected in SET_CASES.values():
        assert f"error: {expected}" in result.stderr, (expected, result.stderr)
    assert listing(tmp_path) == {"x.yaml"}


@pytest.mark.slow
def test_set_fixes_a_file_and_changes_the_hash(tmp_path: Path) -> None:
    (tmp_path / "x.yaml").write_text("name: x\nmodel: {d_model: 64, heads: 3}\ntrain: {max_steps: 10}\n")
    fixed = ablate("validate", "x.yaml", "--set", "model.heads=4", cwd=tmp_path)
    assert fixed.returncode == 0, fixed.stderr
    other = ablate("show", "x.yaml", "--set", "model.heads=8", cwd=tmp_path)
    assert other.returncode == 0, other.stderr
    assert "heads: 8" in other.stdout
    hash_line = [line for line in other.stdout.splitlines() if line.startswith("# spec_hash: ")]
    assert hash_line and hash_line[0][len("# spec_hash: ") :] not in fixed.stdout


@pytest.mark.slow
def test_list_prints_every_component_with_its_doc(tmp_path: Path) -> None:
    result = ablate("list", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    registry.load_plugins()  # an installed plugin's components are listed too
    for kind in registry.REGISTRY.kinds():
        assert f"\n{kind}\n" in "\n" + result.stdout
        for entry in registry.REGISTRY.entries(kind):
            assert f"  {entry.name}" in result.stdout
            assert entry.summary and entry.summary in result.stdout, f"{kind}/{entry.name} has no doc line"


@pytest.mark.slow
def test_list_filters_by_kind_and_pattern(tmp_path: Path) -> None:
    result = ablate("list", "norm", "c*", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    names = [line.split()[0] for line in result.stdout.splitlines() if line.startswith("  ")]
    assert names == registry.names("norm", "c*") and "custom" in names
    assert result.stdout.splitlines()[0] == "norm"
    wrong = ablate("list", "nrom", cwd=tmp_path)
    assert (
        wrong.returncode == 2 and "did you mean 'norm'?" in wrong.stderr and "Traceback" not in wrong.stderr
    )


@pytest.mark.parametrize("args", [["mask", "-inf"], ["mask", "-1e9"], ["-inf"], ["mask", "-1e*"]])
def test_list_takes_mask_names_that_look_like_options(
    args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["list", *args]) == 0
    out = capsys.readouterr().out.splitlines()
    shown = [line.split()[0] for line in out if line.startswith("  ") and line.split()[0].startswith("-")]
    expected = registry.names("mask", args[-1])
    assert out[0] == "mask" and shown == expected and expected


def test_every_command_has_help_saying_what_it_does(capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert set(commands.choices) == set(COMMAND)
    for name, sub in commands.choices.items():
        with pytest.raises(SystemExit) as exit_info:
            main([name, "--help"])
        assert exit_info.value.code == 0
        text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
        assert sub.description and " ".join(sub.description.split()) in text, name
        assert text.startswith(f"usage: ablate {COMMAND[name].name}")  # an alias shows the command's name
    with pytest.raises(SystemExit):
        main(["report", "--help"])
    assert "study name or parent run id" in " ".join(capsys.readouterr().out.split())


def test_help_and_version() -> None:
    top = ablate("--help", cwd=REPO)
    assert top.returncode == 0
    for command in (
        "validate",
        "list",
        "show",
        "schema",
        "run",
        "translate",
        "ui",
        "runs",
        "study (ablate)",
        "status",
        "tune",
        "report",
        "bench",
    ):
        assert f"    {command}" in top.stdout
    sub = ablate("validate", "--help", cwd=REPO)
    assert sub.returncode == 0 and "--set KEY=VALUE" in sub.stdout
    version = ablate("--version", cwd=REPO)
    assert version.returncode == 0 and version.stdout.strip() == f"ablate {metadata.version('ablate')}"


def test_schema_out_writes_json_listing_components(tmp_path: Path) -> None:
    result = ablate("schema", "--out", "s.json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    schema = json.loads((tmp_path / "s.json").read_text())
    assert schema["$defs"]["ModelSpec"]["properties"]["residual"]["enum"] == registry.names("residual")
