"""Report statistics, rendering and run bookkeeping, checked against scipy and by hand (no MLflow here)."""

from __future__ import annotations

import json
import math
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from ablate import report_figures as figs
from ablate import report_stats as st
from ablate.report_data import build_study, detect_quality, spec_diff
from ablate.report_render import (
    STAMP_PREFIX,
    Bullets,
    Document,
    Figure,
    Note,
    Para,
    Section,
    Table,
    render_html,
    render_markdown,
)

BASE = {0: 24.1, 1: 25.3, 2: 23.8, 3: 24.9}
POST = {0: 22.7, 1: 24.0, 2: 22.9, 3: 23.5}


# ---------------------------------------------------------------- statistics
def test_mean_ci_is_the_student_t_interval() -> None:
    x = list(BASE.values())
    s = st.mean_ci(x)
    lo, hi = stats.t.interval(0.95, len(x) - 1, loc=np.mean(x), scale=stats.sem(x))
    assert s.n == 4 and s.mean == pytest.approx(np.mean(x), rel=1e-12)
    assert (s.lo, s.hi) == (pytest.approx(lo, rel=1e-12), pytest.approx(hi, rel=1e-12))


def test_mean_ci_of_one_value_has_no_interval_and_ignores_non_finite() -> None:
    s = st.mean_ci([3.0, math.nan, math.inf])
    assert s.n == 1 and s.mean == 3.0 and math.isnan(s.half_width)
    assert st.fmt_summary(s, 2) == "3.00"
    assert st.fmt_summary(st.mean_ci([]), 2) == "—"


def test_same_seeds_give_a_paired_t_test() -> None:
    e = st.compare(BASE, POST)
    ref = stats.ttest_rel(list(POST.values()), list(BASE.values()))
    lo, hi = ref.confidence_interval(0.95)
    assert e.test == "paired t-test" and e.paired
    assert e.p == pytest.approx(ref.pvalue, rel=1e-12)
    assert (e.lo, e.hi) == (pytest.approx(lo, rel=1e-9), pytest.approx(hi, rel=1e-9))
    assert e.diff == pytest.approx(np.mean(list(POST.values())) - np.mean(list(BASE.values())))


def test_different_seeds_give_welch() -> None:
    other = {10: 22.7, 11: 24.0, 12: 22.9}
    e = st.compare(BASE, other)
    ref = stats.ttest_ind(list(other.values()), list(BASE.values()), equal_var=False)
    lo, hi = ref.confidence_interval(0.95)
    assert e.test == "Welch's t-test" and not e.paired
    assert e.p == pytest.approx(ref.pvalue, rel=1e-12)
    assert (e.lo, e.hi) == (pytest.approx(lo, rel=1e-9), pytest.approx(hi, rel=1e-9))


def test_two_seeds_are_tested_with_one_degree_of_freedom_not_a_bootstrap() -> None:
    # A bootstrap of two pairs calls this wobble significant; the t-test with df=1 does not.
    e = st.compare({0: 1.076, 1: 1.100}, {0: 1.050, 1: 1.067})
    ref = stats.ttest_rel([1.050, 1.067], [1.076, 1.100])
    assert e.p == pytest.approx(ref.pvalue) and e.p > 0.05
    assert "no detectable effect with 2 seeds" in st.verdict("x", e, "loss", higher_is_better=False)


def test_one_seed_is_not_tested() -> None:
    e = st.compare({0: 24.0}, {0: 23.0})
    assert e.diff == -1.0 and not e.tested and math.isnan(e.lo)
    text = st.verdict("residual=post_norm", e, "BLEU", True)
    assert text.startswith("residual=post_norm: -1.00 BLEU") and "too few seeds" in text
    assert "p=" not in text


def test_identical_runs_are_no_effect_and_a_constant_shift_is_significant() -> None:
    same = st.compare({0: 0.0, 1: 0.0, 2: 0.0}, {0: 0.0, 1: 0.0, 2: 0.0})
    assert same.p == 1.0 and same.diff == 0.0
    shift = st.compare({0: 1.0, 1: 2.0, 2: 3.0}, {0: 2.0, 1: 3.0, 2: 4.0})
    assert shift.p == 0.0 and shift.lo == shift.hi == 1.0


def test_verdict_wording() -> None:
    worse = st.Effect(-1.2, -1.9, -0.5, 0.004, "paired t-test", 3, 3, True)
    assert st.verdict("post_norm", worse, "BLEU", True) == (
        "post_norm: -1.20 BLEU [-1.90, -0.50], significant at 5% (paired t-test, p=0.004): worse than the "
        "baseline")
    better_loss = st.Effect(-0.2, -0.3, -0.1, 0.01, "paired t-test", 3, 3, True)
    assert st.verdict("v", better_loss, "loss", False, 3).endswith("better than the baseline")
    none = st.Effect(0.3, -0.4, 1.0, 0.31, "Welch's t-test", 3, 3, False)
    assert "no detectable effect with 3 seeds" in st.verdict("v", none, "BLEU", True)


def test_holm_adjustment() -> None:
    assert st.holm([0.01, 0.04, math.nan, 0.03]) == pytest.approx([0.03, 0.06, math.nan, 0.06], nan_ok=True)
    assert st.holm([0.5, 0.9]) == [1.0, 1.0]


def test_pareto_front() -> None:
    # (cost, quality): b is dominated by a (cheaper and better); d has no finite cost.
    front = st.pareto_front([1.0, 2.0, 3.0, math.nan], [10.0, 9.0, 12.0, 20.0])
    assert front == [True, False, True, False]
    assert st.pareto_front([1.0, 2.0], [0.5, 0.4], higher_quality_is_better=False) == [True, True]


def test_fixed_formatting() -> None:
    assert st.fmt(-0.0001, 2) == "0.00" and st.fmt(-0.0001, 2, signed=True) == "0.00"
    assert st.fmt(1234.4, 0) == "1,234" and st.fmt(math.nan, 1) == "—"
    assert st.fmt(0.5, 3, signed=True) == "+0.500"
    assert st.fmt_p(0.0004) == "<0.001" and st.fmt_p(0.04567) == "0.046" and st.fmt_p(math.nan) == "—"


# ---------------------------------------------------------------- rendering
class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.attrs: list[tuple[str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.attrs += [(f"{tag}.{k}", v or "") for k, v in attrs]


def _doc(fig: str) -> Document:
    return Document("Report: a|b", f"{STAMP_PREFIX}2000-01-01 00:00:00 UTC", [Para("see `x` and **y**")], [
        Section("S", [Note("careful <script>alert(1)</script>"), Bullets(["one", "two"]),
                      Table(["name", "value"], [["a|b", "1.0"]], caption="cap"),
                      Figure(fig, "a figure")])])


def test_markdown_and_html_render_the_same_blocks(tmp_path: Path) -> None:
    figs.forest_plot([("v", 1.0, 0.5, 1.5)], "Δ", tmp_path / "figures" / "f.png")
    doc = _doc("figures/f.png")
    md = render_markdown(doc)
    assert "| a\\|b | 1.0 |" in md and "> **Warning:** careful" in md and "![a figure](figures/f.png)" in md
    assert sum(line.startswith(STAMP_PREFIX) for line in md.splitlines()) == 1
    page = render_html(doc, tmp_path)
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert "<code>x</code>" in page and "<strong>y</strong>" in page
    assert 'name="viewport"' in page and "overflow-x: auto" in page
    parser = _Tags()
    parser.feed(page)
    srcs = [v for k, v in parser.attrs if k == "img.src"]
    assert len(srcs) == 1 and srcs[0].startswith("data:image/png;base64,")
    links = [v for k, v in parser.attrs if k.endswith((".src", ".href"))]
    assert not any(v.startswith(("http://", "https://")) for v in links)
    assert sum(STAMP_PREFIX in line for line in page.splitlines()) == 1


def test_figures_are_byte_identical_on_rerun(tmp_path: Path) -> None:
    curves = {"baseline": {"val/loss": [[(10, 2.0), (20, 1.5)], [(10, 2.2), (20, 1.4)]]}}
    a = figs.learning_curves(curves, ["val/loss"], tmp_path / "a.png")
    b = figs.learning_curves(curves, ["val/loss"], tmp_path / "b.png")
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and b"matplotlib" not in a.read_bytes()


# ---------------------------------------------------------------- runs -> study
def _frame(rows: list[dict[str, object]]) -> pd.DataFrame:
    return pd.DataFrame(rows)


def _row(run_id: str, variant: str, seed: int, status: str, start: int,
         **metrics: float) -> dict[str, object]:
    residual = "post_norm" if variant != "baseline" else "pre_norm"
    return {"run_id": run_id, "status": "FINISHED", "start_time": pd.Timestamp(start, unit="s", tz="UTC"),
            "tags.ablate.variant": variant, "tags.ablate.seed": str(seed), "tags.ablate.status": status,
            "params.seed": str(seed), "params.model.residual": residual,
            **{f"metrics.{k.replace('_', '/', 1)}": v for k, v in metrics.items()}}


def test_build_study_dedupes_cells_orders_variants_and_picks_the_metric() -> None:
    parent = {"run_id": "p", "experiment_id": "1", "run_name": "s", "status": "FINISHED",
              "tags": {"ablate.study": "s", "ablate.kind": "ablation"}, "params": {}, "metrics": {}}
    frame = _frame([
        _row("r3", "residual=post_norm", 0, "finished", 3, val_exact_match=0.5, test_exact_match=0.4),
        _row("r1", "baseline", 0, "failed", 1),
        _row("r2", "baseline", 0, "finished", 2, val_exact_match=0.6, test_exact_match=0.7),  # the retry
        _row("r4", "baseline", 1, "finished", 4, val_exact_match=0.6, test_exact_match=0.7),
    ])
    study = build_study(parent, frame)
    assert study.variants == ["baseline", "residual=post_norm"] and study.dropped == 1
    assert [(r.run_id, r.seed) for r in study.runs] == [("r2", 0), ("r4", 1), ("r3", 0)]
    assert study.quality == "exact_match" and study.primary == "test/exact_match"
    assert detect_quality(study.runs, "val/bleu") == "bleu"


def test_spec_diff_ignores_identity_and_bookkeeping() -> None:
    a = {"name": "x", "seed": "0", "tracking.experiment": "e", "model.residual": "pre_norm",
         "train.out_dir": "a"}
    b = {**a, "name": "y", "seed": "1", "tracking.experiment": "f", "model.residual": "post_norm"}
    assert spec_diff(a, b) == [("model.residual", "pre_norm", "post_norm")]


def test_two_objective_search_marks_its_pareto_front(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ablate import report_extra

    monkeypatch.setattr(report_extra, "importances", lambda study, metric: ("", []))
    objectives = json.dumps([{"metric": "val/loss", "direction": "minimize"},
                             {"metric": "train/wall_time_s", "direction": "minimize"}])
    parent = {"run_id": "p", "experiment_id": "1", "run_name": "s", "status": "FINISHED",
              "tags": {"ablate.study": "s", "ablate.kind": "search"},
              "params": {"search.objectives": objectives}, "metrics": {}}
    trials = [(0, 1.0, 9.0, "0.01"), (1, 2.0, 1.0, "0.02"), (2, 2.5, 5.0, "0.03"), (3, 0.9, 20.0, "0.04")]
    tags = {"tags.ablate.kind": "trial"}
    frame = _frame([{**_row(f"r{n}", f"trial-{n}", 0, "finished", n, val_loss=loss, train_wall_time_s=cost),
                     **tags, "tags.ablate.trial": str(n), "params.train.optimizer.lr": lr}
                    for n, loss, cost, lr in trials])
    study = build_study(parent, frame)
    assert study.kind == "search"
    data: dict[str, object] = {}
    sections = report_extra.search_sections(study, tmp_path, data)
    # Trial 2 is beaten by trial 1 on both objectives; every other trial is best at some trade-off.
    assert data["pareto_trials"] == [0, 1, 3]
    best = next(s for s in sections if s.title == "Best trials").blocks[0]
    assert isinstance(best, Table) and [row[1] for row in best.rows] == ["3", "0", "1", "2"]
    assert {p.name for p in tmp_path.glob("*.png")} == {"optimisation_history.png", "parallel_coords.png"}
