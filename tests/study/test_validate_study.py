"""`ablate validate` expands a study's design as its dry run does (ablate/study/validate_study.py): a spec
validate passes is one the dry run plans, and every problem of the spec, its data files and its variants,
levels and rungs comes in one pass, each one located line, exit 2, nothing written."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ablate.cli import main
from tests.factories import STUDY_CELL, write_tiny_spec


def test_validate_reports_every_problem_of_the_design_and_the_data_in_one_pass(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    path = write_tiny_spec(tmp_path, STUDY_CELL, {"name": "typos"}, filename="typos.yaml", extra="""
ablation:
  design: variants
  variants:
    - {label: rms, model.norm: rmsnorm}
    - {label: post, model.residual: post_norm, model.d_model: 15}
  seeds: [0, 1]
""")
    assert main(["study", str(path), "--dry-run"]) == 2
    dry = capsys.readouterr().err.splitlines()
    assert main(["validate", str(path)]) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    # the dry run's problems, every one, and nothing said ok
    assert lines == dry and "ok " not in captured.out
    assert all(line.startswith(f"error: {path}:") for line in lines)
    assert "ablation.variants.0: model.norm=rmsnorm gives an invalid spec: model.norm: unknown norm" \
        in lines[0]
    assert "did you mean 'rms'?" in lines[0]
    assert any("ablation.variants.1: " in line and "not divisible by heads 2" in line for line in lines[1:])
    assert sorted(os.listdir(tmp_path)) == ["typos.yaml"]  # nothing written

    # a ladder's rung that gives an invalid spec, with a missing tokenizer file: both in the one pass
    ladder = write_tiny_spec(tmp_path, STUDY_CELL, {"name": "rungs", "data.tokenizer": {
        "kind": "file", "path": "missing.json"}}, filename="rungs.yaml", extra="""
ablation:
  axes: {model.norm: [builtin, rms]}
  scales:
    rungs:
      small: {model.d_model: 16}
      large: {model.d_model: 17}
""")
    assert main(["validate", str(ladder)]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert any("data.tokenizer.path: tokenizer file not found" in line for line in lines), lines
    assert any("ablation.scales.rungs.large" in line and "not divisible by heads 2" in line for line in lines)


def test_a_valid_study_is_ok_for_validate_and_its_dry_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                         ) -> None:
    path = write_tiny_spec(tmp_path, STUDY_CELL, {"name": "fine"}, filename="fine.yaml", extra="""
ablation:
  design: full_factorial
  axes:
    ffn: {relu_mlp: {model.ffn: linear}, swiglu: {model.ffn: swiglu}}
    model.norm: [builtin, rms]
""")
    assert main(["validate", str(path)]) == 0
    assert capsys.readouterr().out.startswith(f"ok {path} (")
    assert main(["study", str(path), "--dry-run"]) == 0


def test_validate_checks_the_data_files_of_a_spec_whose_study_section_is_wrong(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    # A spec error outside `data` (a seed range, a level's typo) must not hide a missing tokenizer file:
    # every problem in the one pass, in line order.
    monkeypatch.chdir(tmp_path)
    path = write_tiny_spec(tmp_path, STUDY_CELL, {"name": "both", "data.tokenizer": {
        "kind": "file", "path": "missing.json"}}, filename="both.yaml", extra="""
ablation:
  axes: {model.norm: [builtin, rmsnorm_typo]}
  seeds: {min: 5, max: 3}
""")
    assert main(["validate", str(path)]) == 2
    lines = capsys.readouterr().err.splitlines()
    fields = [line.split(": ")[2] for line in lines]
    assert fields == ["data.tokenizer.path", "ablation.axes.model.norm.1", "ablation.seeds.max"], lines
    assert "tokenizer file not found" in lines[0]
    assert sorted(os.listdir(tmp_path)) == ["both.yaml"]  # nothing written
