"""The report's perplexity-by-evaluation-length section: numbers from each finished run's
``<split>/ppl_at_<n>`` results, one line per variant with its seeds as a band."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

from scipy import stats

from ablate.report.compute.loaded_study import Run, Study
from ablate.report.render import Figure, Table
from ablate.report.section_api import Inputs
from ablate.report.sections import lengths


def _run(variant: str, seed: int, ppl: dict[int, float], status: str = "finished") -> Run:
    metrics = {f"val/ppl_at_{n}": v for n, v in ppl.items()} | {"val/loss": 1.0, "test/ppl_at_32": 99.0}
    return Run(f"{variant}-{seed}", variant, seed, status, "h", 0.0, {"data.max_len": "32"}, metrics, {})


def _study(runs: list[Run]) -> Study:
    return Study("s", "ablation", {}, runs, ["baseline", "positions=alibi"], "baseline", "loss",
                 "val/ppl_at_64")


def test_each_variant_gets_its_seeds_mean_and_spread_at_each_length(tmp_path: Path) -> None:
    study = _study([
        _run("baseline", 0, {32: 10.0, 64: 30.0}), _run("baseline", 1, {32: 12.0, 64: 50.0}),
        _run("positions=alibi", 0, {32: 11.0, 64: 10.0}), _run("positions=alibi", 1, {32: 11.0, 64: 9.0}),
        _run("positions=alibi", 2, {32: 500.0, 64: 500.0}, status="diverged"),  # not a finished seed
    ])
    part = lengths.part(Inputs(study, tmp_path / "figures"))
    assert part is not None
    blocks = part.sections[0].blocks
    table = next(b for b in blocks if isinstance(b, Table))
    assert table.header == ["variant", "32", "64"]
    assert table.rows == [["baseline", "11.00 ± 1.41", "40.00 ± 14.14"],
                          ["positions=alibi", "11.00 ± 0.00", "9.50 ± 0.71"]]
    assert part.data["ppl_by_length"]["baseline"]["windows"] == {"32": [10.0, 12.0], "64": [30.0, 50.0]}
    figure = next(b for b in blocks if isinstance(b, Figure))
    assert (tmp_path / figure.path).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_study_without_length_metrics_has_no_such_section(tmp_path: Path) -> None:
    study = _study([Run("r", "baseline", 0, "finished", "h", 0.0, {}, {"val/bleu": 30.0}, {})])
    assert lengths.part(Inputs(study, tmp_path)) is None


def test_growth_past_the_training_length_is_paired_by_seed_against_the_baseline(tmp_path: Path) -> None:
    """The baseline doubles past 32 tokens in every seed, ALiBi stays flat: its growth is half the
    baseline's, whatever its perplexity at 32; the ratios are paired by seed."""
    base = [{32: 10.0, 64: 20.0}, {32: 12.0, 64: 25.0}, {32: 11.0, 64: 21.0}, {32: 9.0, 64: 19.0}]
    alibi = [{32: 20.0, 64: 20.0}, {32: 22.0, 64: 23.0}, {32: 21.0, 64: 20.0}, {32: 19.0, 64: 19.5}]
    study = _study([_run("baseline", s, p) for s, p in enumerate(base)]
                   + [_run("positions=alibi", s, p) for s, p in enumerate(alibi)])
    part = lengths.part(Inputs(study, tmp_path / "figures"))
    assert part is not None
    grown = [b for b in part.sections[0].blocks if isinstance(b, Table)][1]
    assert grown.header[1] == "ppl at 64 / ppl at 32"
    base_row, alibi_row = grown.rows
    geometric = math.exp(statistics.mean(math.log(b[64] / b[32]) for b in base))
    assert base_row[:3] == ["baseline", f"x{geometric:.2f}", "4"] and base_row[3] == "—"
    d = [math.log((a[64] / a[32]) / (b[64] / b[32])) for a, b in zip(alibi, base, strict=True)]
    lo, hi = stats.ttest_1samp(d, 0.0).confidence_interval(0.95)
    assert alibi_row[3].startswith(f"x{math.exp(statistics.mean(d)):.2f} [x{math.exp(lo):.2f}, "
                                   f"x{math.exp(hi):.2f}], paired t-test")
    assert alibi_row[3].endswith("n=4") and math.exp(hi) < 1  # grows less than the baseline
