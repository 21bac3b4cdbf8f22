"""Every committed report, rebuilt from its committed export, is the committed report.

Each study in ``reports/`` with an ``export/`` is imported into a fresh MLflow store (``ablate import``, the
path a study moved between machines takes), read back through its record (ablate/study/recorded_study.py: the
older studies' tags through the one converter) and rebuilt; its ``report.json`` (every number at full
precision) must equal the committed one: every key, string and integer exactly, every float to 1e-9 of
itself, a ladder's least-squares fits to 1e-7 (``FIT_TOLERANCE``: rebuilt on another CPU they move by
1e-12 to 2e-9). A change to how a
study's record is written or read, or to any computation a report states, that moves a committed report
fails here.

About 20 studies at 15-60 s each on an idle 2-core machine: the soak tier
(``python -m pytest -m soak tests/report/test_committed_reports.py``). The figures are drawn but not
rasterised (their files are written empty): report.json never reads them, and rendering them was about 80%
of a ladder's rebuild (``cProfile``: 63 of 79 s for ladder-kdocs, in matplotlib's savefig).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from matplotlib.figure import Figure

from ablate.report import plots
from ablate.report.build import build_report, load_study
from ablate.study.export_study import main_import
from tests.stores import mlflow_store

REPORTS = Path(__file__).resolve().parents[2] / "reports"
EXPORTED = sorted(p.parent.name for p in REPORTS.glob("*/export"))
# Committed reports without an export: the quickstart's own studies, trained by whoever follows the README
# (their runs are a few seconds each; their report stands as an example of the output, not as a result)
NOT_EXPORTED = {"quick-axes", "quick-search"}


def test_every_committed_report_has_an_export_or_is_listed() -> None:
    reports = {p.parent.name for p in REPORTS.glob("*/report.json")}
    assert len(EXPORTED) >= 20
    assert reports - set(EXPORTED) == NOT_EXPORTED


# A ladder's power-law fits (a report.json path through ".fits.") take their exponent from a parabola
# through three nearly equal residual sums, whose second difference cancels most of their digits; the sums
# are BLAS products whose summation order follows the CPU's vector width. Rebuilt on a Xeon (AVX-512), two
# reports written on an AMD EPYC moved by 2e-9 of a fit's interval end: the fits compare to 1e-7.
FIT_TOLERANCE = 1e-7


def differences(new: Any, old: Any, path: str = "") -> list[str]:
    """Where two report.json documents differ: the JSON path of each value that moved (floats compared to
    1e-9 of their size, a ladder fit's to ``FIT_TOLERANCE``)."""
    if isinstance(new, float) and isinstance(old, float | int) and not isinstance(old, bool):
        rel = FIT_TOLERANCE if ".fits." in path else 1e-9
        return [] if math.isclose(new, old, rel_tol=rel, abs_tol=1e-12) else [f"{path}: {old!r} -> {new!r}"]
    if isinstance(new, dict) and isinstance(old, dict):
        return [d for k in sorted(new.keys() | old.keys()) for d in
                (differences(new[k], old[k], f"{path}.{k}") if k in new and k in old else [f"{path}.{k}"])]
    if isinstance(new, list) and isinstance(old, list) and len(new) == len(old):
        return [d for i, (a, b) in enumerate(zip(new, old, strict=True))
                for d in differences(a, b, f"{path}[{i}]")]
    return [] if new == old and type(new) is type(old) else [f"{path}: {old!r} -> {new!r}"]


def test_the_comparison_tolerates_a_fits_last_digits_only() -> None:
    old = {"fit": {"E": 2.792989608391289, "n": 4}, "verdict": "better", "seeds": [1, 2]}
    close = {"fit": {"E": 2.7929896083908345, "n": 4}, "verdict": "better", "seeds": [1, 2]}
    assert differences(close, old) == []
    assert differences({"fit": {"E": 2.7929, "n": 4}, "verdict": "better", "seeds": [1, 2]}, old) == [
        ".fit.E: 2.792989608391289 -> 2.7929"]
    assert differences({"fit": {"E": 2.792989608391289, "n": 5}, "verdict": "open", "seeds": [1]}, old) == [
        ".fit.n: 4 -> 5", ".seeds: [1, 2] -> [1]", ".verdict: 'better' -> 'open'"]
    # a ladder fit's value (under ".fits.") moves with the CPU's summation order by about 2e-9, not more
    fits = {"ladder": {"fits": {"rope": {"A": 210.96770226439662}}}, "gap": 0.5}
    moved = {"ladder": {"fits": {"rope": {"A": 210.96770262901939}}}, "gap": 0.5}
    assert differences(moved, fits) == []
    assert differences({"ladder": {"fits": {"rope": {"A": 210.968}}}, "gap": 0.5}, fits) == [
        ".ladder.fits.rope.A: 210.96770226439662 -> 210.968"]
    elsewhere = {"ladder": {"fits": {"rope": {"A": 210.96770226439662}}}, "gap": 0.5 + 2e-9}
    assert differences(elsewhere, fits) == [f".gap: 0.5 -> {0.5 + 2e-9!r}"]


def unrendered(fig: Figure, path: Path) -> Path:
    """``plots.save`` without the rendering: the figure's file, empty."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")
    return path


@pytest.mark.soak
@pytest.mark.parametrize("name", EXPORTED)
def test_a_committed_report_rebuilt_from_its_export_is_unchanged(name: str, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_store(tmp_path))
    monkeypatch.setattr(plots, "save", unrendered)
    monkeypatch.setattr(plots, "save_vector", lambda fig, path: [unrendered(fig, path.with_suffix(s))
                                                                 for s in (".pdf", ".svg")])
    export = REPORTS / name / "export"
    assert main_import(str(export)) == 0
    study = load_study(json.loads((export / "study.json").read_text())["study"])
    build_report(study, tmp_path / "report")
    rebuilt = json.loads((tmp_path / "report" / "report.json").read_text())
    assert differences(rebuilt, json.loads((REPORTS / name / "report.json").read_text())) == []
