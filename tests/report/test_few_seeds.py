"""A report at few seeds says one thing: a comparison with 3 paired seeds whose interval lies inside
+-min_effect was called "no effect" in the summary while the same report warned "too few seeds to
conclude" and "not testable with 3 seeds", and its plan table showed "—" for the seeds a new study needs.
Now no comparison is called "no effect" from fewer than 4 pairs (stats.verdict.EQUIVALENCE_PAIRS), the
warning says what the summary's verdicts rest on, and the plan table sizes the open comparison."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from ablate.cli import main as cli_main
from ablate.launch.local_study import main_ablate
from ablate.spec.experiment import ExperimentSpec
from tests.tuned_studies import fake_training, write_study


def equal_or_better(spec: ExperimentSpec) -> float:
    """norm=custom: the baseline's score within 0.001 (no effect, tightly); residual=post_norm: 0.2 better."""
    noise = random.Random(f"{spec.model.norm}/{spec.model.residual}/{spec.seed}").gauss(0.0, 0.001)
    return 0.5 + (0.2 if spec.model.residual == "post_norm" else 0.0) + noise


@pytest.mark.slow  # a study end to end (fake training, real MLflow runs)
def test_three_seeds_are_not_called_no_effect_and_the_report_says_one_thing(
        workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_training(monkeypatch)
    monkeypatch.setattr("tests.tuned_studies.score", equal_or_better)
    spec = write_study(workdir, "few", tune=False, confirm=False)
    spec.write_text(spec.read_text().replace("seeds: {min: 3, max: 4}", "seeds: {min: 3, max: 3}"))
    assert main_ablate(str(spec)) == 0
    out = workdir / "report"
    assert cli_main(["report", "few", "--out", str(out)]) == 0
    text, data = (out / "report.md").read_text(), json.loads((out / "report.json").read_text())

    seq = {c["variant"]: c for c in data["sequential"]["comparisons"]}
    custom = seq["norm=custom"]
    assert custom["pairs"] == 3 and -0.1 < custom["lo"] < custom["hi"] < 0.1  # inside the margin...
    assert custom["state"] == "open"  # ... from 3 pairs: too few to call it no effect
    assert seq["residual=post_norm"]["state"] == "effect"  # a clear effect is one at 3 seeds
    custom_lines = [line for line in text.splitlines() if "norm=custom" in line]
    assert custom_lines and not any("no effect as large" in line for line in custom_lines), custom_lines
    # the summary and the Adaptive seeds table say why the interval inside the margin is no verdict
    why = ("undecided at the maximum of 3 seeds: its interval lies within ±0.1 exact match, but 3 pairs are "
           "too few to call it no effect (at least 4)")
    assert sum(why in line for line in custom_lines) == 2, custom_lines
    assert "too few seeds to conclude" not in text  # the verdicts above are the sequential test's
    assert "no effect only from 4 paired seeds on" in text

    found = {f["label"]: f for f in data["power_plan"]["found"]}
    # no "—" for the open comparison; settling it either way takes a "no effect" from 4 pairs at least
    assert found["norm=custom"]["seeds_needed"] is not None and found["norm=custom"]["seeds_needed"] >= 4
    assert "sd: the spread (standard deviation) of the paired seed differences" in text
