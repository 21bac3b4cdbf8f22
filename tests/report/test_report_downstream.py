"""The report's "Downstream tasks" section (ablate/report/sections/downstream.py): each downstream score
beside the loss per variant, and each metric's signal-to-noise ratio across seeds, at each rung of a
ladder, computed as Heineman et al. 2025 define it (spread of variant means over the seeds' pooled sd)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from ablate.report.compute.loaded_study import Run, Study
from ablate.report.compute.metric_noise import metric_noise
from ablate.report.render import Table
from ablate.report.section_api import Inputs
from ablate.report.sections.downstream import part

ACC, LOSS = "downstream/tiny/acc", "val/loss"


def _run(variant: str, seed: int, loss: float, acc: float | None) -> Run:
    metrics = {LOSS: loss, **({ACC: acc} if acc is not None else {})}
    return Run(f"{variant}-{seed}", variant, seed, "finished", "h", 0.0, {}, metrics, {})


def _study(runs: list[Run], rungs: dict[str, Study] | None = None) -> Study:
    return Study("s", "ablation", {"tags": {}}, runs, ["a", "b"], "a", "loss", LOSS, rungs=rungs or {})


# loss: a 2.0, 2.2; b 3.0, 3.2 -> signal 1.0, both variances 0.02 -> noise sqrt(0.02), SNR 7.07
# acc: a 0.5, 0.7; b 0.6, 0.6 -> signal 0.0 (means 0.6 and 0.6), noise sqrt((0.02 + 0) / 2) = 0.1
RUNS = [_run("a", 0, 2.0, 0.5), _run("a", 1, 2.2, 0.7), _run("b", 0, 3.0, 0.6), _run("b", 1, 3.2, 0.6)]


def test_signal_noise_and_snr_are_the_spread_over_the_pooled_seed_sd() -> None:
    rows = {r.metric: r for r in metric_noise(_study(RUNS))}
    assert rows[LOSS].signal == pytest.approx(1.0)
    assert rows[LOSS].noise == pytest.approx(math.sqrt(0.02))
    assert rows[LOSS].snr == pytest.approx(1.0 / math.sqrt(0.02))
    assert rows[ACC].means == pytest.approx({"a": 0.6, "b": 0.6})
    assert rows[ACC].noise == pytest.approx(0.1) and rows[ACC].snr == pytest.approx(0.0, abs=1e-12)
    assert rows[ACC].seeds == 2


def test_the_section_shows_downstream_beside_loss_per_rung_and_only_when_scored(tmp_path: Path) -> None:
    assert part(Inputs(_study([_run("a", 0, 2.0, None), _run("b", 0, 3.0, None)]), tmp_path)) is None
    small, large = _study(RUNS), _study([_run(r.variant, r.seed, r.metrics[LOSS] - 1, 0.9) for r in RUNS])
    made = part(Inputs(_study(RUNS, rungs={"r0": small, "r1": large}), tmp_path))
    assert made is not None
    table = next(b for s in made.sections for b in s.blocks if isinstance(b, Table))
    assert table.header[:4] == ["metric", "rung", "a", "b"]
    scales = [(d["metric"], d["scale"]) for d in made.data["downstream"]]
    assert scales == [(LOSS, "r0"), (LOSS, "r1"), (ACC, "r0"), (ACC, "r1")]
    assert made.data["downstream"][3]["noise"] == 0.0 and made.data["downstream"][3]["snr"] is None


def test_a_verdict_on_a_downstream_score_reads_its_direction_from_the_record() -> None:
    from ablate.report.compute.loaded_study import quality_meta

    assert quality_meta("downstream/hellaswag/acc")[2] and quality_meta("downstream/hellaswag/acc_norm")[2]
    assert not quality_meta("downstream/hellaswag/bpb")[2]  # bits per byte: lower is better
    assert quality_meta("val/bleu")[2] and not quality_meta("val/loss")[2]
