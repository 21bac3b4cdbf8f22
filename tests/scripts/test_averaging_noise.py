"""scripts/averaging_noise.py's computation on synthetic numbers: the paired readings, the sds, the
Pitman-Morgan interval of a paired sd ratio (by hand and by its coverage) and the bootstrap beside it."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from ablate.tracking import record
from tests.scripts.script_loader import load_script
from tests.stores import mlflow_store

S = load_script("averaging_noise")


def run(variant: str, seed: int, plain: float, averaged: float,
        status: str = "finished") -> dict[str, object]:
    return {"variant": variant, "seed": str(seed), "status": status,
            "metrics": {"val/bleu": plain, "val/averaged/bleu": averaged}}


def test_readings_are_paired_by_seed_and_need_both_variants_finished() -> None:
    runs = [run("baseline", 1, 30.0, 31.0), run("positions=rope", 1, 32.0, 32.5),
            run("baseline", 2, 29.0, 30.0), run("positions=rope", 2, 33.0, 31.0, status="diverged"),
            run("baseline", 3, 31.0, 31.5)]  # seed 3 has no variant run
    pairs = S.paired_readings(runs, "val/bleu", "baseline", "positions=rope")
    assert [p.seed for p in pairs] == [1]
    assert (pairs[0].diff_plain, pairs[0].diff_avg) == (2.0, 1.5)
    # the averaged name given works the same
    assert S.paired_readings(runs, "val/averaged/bleu", "baseline", "positions=rope") == pairs


def test_the_interval_by_hand() -> None:
    x, y = [1.0, 2.5, 0.5, 3.0, 2.0], [2.0, 4.0, 1.0, 7.0, 3.0]
    f = np.var(x, ddof=1) / np.var(y, ddof=1)
    r = np.corrcoef(x, y)[0, 1]
    t = stats.t.ppf(0.975, 3)
    k = 1 + 2 * (1 - r**2) * t**2 / 3
    ratio, low, high = S.pitman_morgan_sd_ratio(x, y)
    assert ratio == pytest.approx(math.sqrt(f))
    assert low == pytest.approx(math.sqrt(f * (k - math.sqrt(k * k - 1))))
    assert high == pytest.approx(math.sqrt(f * (k + math.sqrt(k * k - 1))))
    assert low < ratio < high


def test_the_interval_inverts_the_pitman_morgan_test() -> None:
    """At each end of the interval, X + c Y and X - c Y (c the ratio there) correlate exactly at the t test's
    critical value: the interval is the set of ratios the test does not reject."""
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=8), rng.normal(size=8) * 2
    _, low, high = S.pitman_morgan_sd_ratio(x, y)
    critical = stats.t.ppf(0.975, 6) / math.sqrt(6 + stats.t.ppf(0.975, 6) ** 2)
    for c in (low, high):
        r = np.corrcoef(x + c * y, x - c * y)[0, 1]
        assert abs(r) == pytest.approx(critical, rel=1e-6)


def test_the_interval_covers_the_true_ratio_95_percent_of_the_time() -> None:
    """8 correlated pairs (rho 0.6) whose sds differ by a factor 0.5, 4000 times."""
    rng = np.random.default_rng(0)
    cov = [[0.25, 0.6 * 0.5], [0.6 * 0.5, 1.0]]
    covered = 0
    trials = 4000
    for _ in range(trials):
        xy = rng.multivariate_normal([0.0, 0.0], cov, size=8)
        _, low, high = S.pitman_morgan_sd_ratio(xy[:, 0], xy[:, 1])
        covered += low <= 0.5 <= high
    assert covered / trials == pytest.approx(0.95, abs=0.015)


def test_bootstrap_brackets_the_ratio_and_report_prints_the_figures() -> None:
    rng = np.random.default_rng(1)
    pairs = []
    for seed in range(100, 108):
        base, noise = 31 + rng.normal(), rng.normal(size=2)
        pairs.append(S.Paired(seed, base, base + 0.3 * noise[0], base + 0.5 + noise[1],
                              base + 0.5 + 0.3 * noise[0] + 0.4 * noise[1]))
    with_ = [p.diff_avg for p in pairs]
    without = [p.diff_plain for p in pairs]
    low, high = S.bootstrap_sd_ratio(with_, without, draws=2000)
    ratio = S.sd(with_) / S.sd(without)
    assert low < ratio < high
    text = S.report(pairs, "val/bleu", "baseline", "positions=rope", draws=2000)
    assert f"{S.sd(without):9.3f} {S.sd(with_):9.3f} {ratio:13.3f}" in text
    assert f"paired sd ratio (with / without) {ratio:.3f}" in text
    assert "8 seeds (100, 101, 102, 103, 104, 105, 106, 107)" in text
    assert "at least 3 are needed" in S.report(pairs[:2], "val/bleu", "baseline", "positions=rope")


def test_runs_are_read_back_from_mlflow_without_superseded_or_failed_repeats(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mlflow import MlflowClient

    uri = mlflow_store(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    client = MlflowClient(uri)
    experiment = client.create_experiment("noise")
    parent = client.create_run(experiment, tags={record.STUDY: "noise", record.KIND: "ablation"}).info.run_id

    def cell(variant: str, seed: int, status: str, bleu: float, **extra: str) -> None:
        tags = {record.PARENT_RUN: parent, record.STUDY: "noise", record.KIND: "cell",
                record.VARIANT: variant, record.SEED: str(seed),
                record.STATUS: status, **extra}
        run_id = client.create_run(experiment, tags=tags).info.run_id
        client.log_metric(run_id, record.final("val/bleu"), bleu, step=720)
        client.log_metric(run_id, record.final(record.averaged("val/bleu")), bleu + 1, step=720)

    cell("baseline", 100, "finished", 30.0)
    cell("baseline", 100, "failed", 10.0)  # a failed retry never replaces a finished run
    cell("positions=rope", 100, "finished", 31.0)
    cell("positions=rope", 100, "finished", 20.0, **{record.SUPERSEDED: "ran in bf16"})  # newer, but stale
    runs = S.read_runs("noise")
    pairs = S.paired_readings(runs, "val/bleu", "baseline", "positions=rope")
    assert [(p.seed, p.base_plain, p.base_avg, p.var_plain, p.var_avg) for p in pairs] == [
        (100, 30.0, 31.0, 31.0, 32.0)]
