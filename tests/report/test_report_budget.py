"""The report's "Tuning budget" paragraph reads only what its searches can say: no ranking from one curve,
and "the full budget" only once every search has run its planned trials."""

from __future__ import annotations

from pathlib import Path

from ablate.report.compute.loaded_study import Run, Search, Study
from ablate.report.section_api import Inputs
from ablate.report.sections import tuning_budget as budget
from ablate.study.recorded_study import StudyRecord, TuneRecord


def _run(variant: str, i: int, score: float | None, status: str = "finished") -> Run:
    metrics = {} if score is None else {"val/bleu": score}
    return Run(f"{variant}-{i}", variant, 0, status, "h", float(i), {}, metrics, {})


def _study(trials: dict[str, list[float | None]], planned: int) -> Study:
    searches = [Search(_run(v, -1, None), [_run(v, i, s, "finished" if s is not None else "pruned")
                                           for i, s in enumerate(scores)]) for v, scores in trials.items()]
    tune = TuneRecord(space={}, baseline={}, trials=planned, sampler="tpe", pruner="median")
    return Study("s", "ablation", {"tags": {}}, [], list(trials), "baseline", "bleu", "val/bleu",
                 searches=searches, record=StudyRecord(metric="final/val/bleu", tune=tune))


def _paragraph(study: Study, tmp_path: Path) -> str:
    made = budget.part(Inputs(study, tmp_path))
    assert made is not None
    (section,) = made.sections
    return str(section.blocks[-1].text)  # type: ignore[attr-defined]


def test_one_curve_ranks_nothing(tmp_path: Path) -> None:
    text = _paragraph(_study({"baseline": [23.15], "x": []}, planned=8), tmp_path)
    assert text.startswith("Only `baseline` has finished trials yet: there is no ranking to read (1 search")
    assert "the best expected score at every budget" not in text
    assert "Expected best at the trials finished so far (BLEU): baseline: 23.15 at 1." in text


def test_the_full_budget_once_every_search_ran_its_trials_pruned_ones_included(tmp_path: Path) -> None:
    done = _study({"baseline": [20.0, 22.0, None], "x": [21.0, 19.0, 18.0]}, planned=3)
    text = _paragraph(done, tmp_path)
    assert "`baseline` has the best expected score at every budget from 1 to 2 trials" in text
    assert "Expected best at the full budget (BLEU)" in text and "Left out" in text and "baseline 1" in text
    short = _study({"baseline": [20.0, 22.0], "x": [21.0, 19.0, 18.0]}, planned=3)
    assert "Expected best at the trials finished so far (BLEU)" in _paragraph(short, tmp_path)
