"""The report's perplexity-by-evaluation-length section: numbers from each finished run's
``<split>/ppl_at_<n>`` results, one line per variant with its seeds as a band."""

from __future__ import annotations

from pathlib import Path

from ablate.report import lengths
from ablate.report.data import Run, Study
from ablate.report.part import Inputs
from ablate.report.render import Figure, Table


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
