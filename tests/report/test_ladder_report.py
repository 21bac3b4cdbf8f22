"""A ladder's report (ablate/report/compute/fitted_ladder.py, ablate/report/sections/ladder_verdicts.py): read
back rung by rung, it opens with the ladder figure and the transfer table, states every rung's verdicts in one
family and backtests the largest rung; runs.csv carries the rung. The fast tests build the study from
runs with a known answer; the slow one runs a small translation ladder on the synthetic task end to end."""

from __future__ import annotations

import csv
import dataclasses
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ablate.report.build import ABLATION_PARTS, assemble, write_runs_csv
from ablate.report.compute.arm_verdicts import every_run
from ablate.report.compute.comparisons import family_of
from ablate.report.compute.fitted_ladder import ladder_of
from ablate.report.compute.loaded_study import build_study, effects
from ablate.report.render import Figure, Table, render_markdown
from ablate.report.section_api import Inputs
from ablate.report.sections import ladder_verdicts, setup
from ablate.stats.transfer import Transfer
from ablate.stats.verdict import Fixed
from ablate.study.recorded_study import LadderRecord, Rung, StudyRecord, to_tags

RUNGS = [("xs", 1e10), ("s", 4e10), ("m", 1.6e11), ("l", 6.4e11)]


def ladder_frame(seeds: int = 6) -> tuple[dict[str, object], pd.DataFrame]:
    """A ladder whose loss falls with compute; 'wide' is 0.02 better at the smallest rung and 0.14 at the
    largest (its gap grows by 0.04 per rung), 'same' is the baseline plus noise."""
    rng = np.random.default_rng(0)
    rows = []
    for k, (rung, flops) in enumerate(RUNGS):
        for seed in range(seeds):
            base = 4.0 - 0.5 * k + 0.05 * rng.standard_normal()
            values = {"baseline": base, "wide": base - 0.02 - 0.04 * k + 0.01 * rng.standard_normal(),
                      "same": base + 0.01 * rng.standard_normal()}
            for variant, value in values.items():
                rows.append({"run_id": f"{rung}-{variant}-{seed}", "status": "FINISHED",
                             "start_time": pd.Timestamp(len(rows), unit="s"),
                             "tags.ablate.variant": variant, "tags.ablate.seed": str(seed),
                             "tags.ablate.status": "finished", "tags.ablate.rung": rung,
                             "tags.ablate.kind": "cell", "metrics.final/val/loss": value,
                             "metrics.final/train/flops": flops * (1.1 if variant == "wide" else 1.0),
                             "metrics.model/params_non_embedding": 1000.0 * (k + 1),
                             "metrics.final/train/tokens": 2e4 * (k + 1)})
    rungs = [Rung(name=n, overrides={}, params=1e3 * (k + 1), tokens=2e4 * (k + 1), flops=f)
             for k, (n, f) in enumerate(RUNGS)]
    ladder = LadderRecord(rungs=rungs, target=1e13, margin=0.05)
    # the parent's tags as a study writes them (ablate/study/recorded_study.py), read by the one converter
    tags = {"ablate.study": "lad", "ablate.kind": "ablation",
            **to_tags(StudyRecord(metric="final/val/loss", ladder=ladder))}
    parent = {"run_id": "p", "experiment_id": "1", "run_name": "lad", "status": "FINISHED",
              "params": {"ablation.metric": "val/loss", "ablation.alpha": "0.05"}, "metrics": {},
              "tags": tags}
    return parent, pd.DataFrame(rows)


def test_a_ladder_is_read_rung_by_rung_and_the_largest_stands_for_the_study() -> None:
    study = build_study(*ladder_frame())
    assert list(study.rungs) == ["xs", "s", "m", "l"] and study.rung == "l"
    assert {r.tags["ablate.rung"] for r in study.runs} == {"l"}  # the sections that know no ladder: rung l
    # 3 variants x 6 seeds at every rung, none deduplicated away
    assert all(len(rung.runs) == 18 for rung in study.rungs.values())


def test_the_ladder_says_how_each_gap_moves_and_backtests_the_largest_rung() -> None:
    ladder = ladder_of(build_study(*ladder_frame()))
    assert ladder is not None and [r.name for r in ladder.rungs] == ["xs", "s", "m", "l"]
    assert ladder.rungs[0].compute == pytest.approx(1e10)  # the baseline's measured compute
    assert ladder.family == 2 * 4  # every comparison at every rung: one family
    wide = next(c for c in ladder.comparisons if c.variant == "wide")
    same = next(c for c in ladder.comparisons if c.variant == "same")
    assert wide.verdict is not None and wide.verdict.verdict == Transfer.GROWS
    assert wide.verdict.top.value == pytest.approx(-0.14, abs=0.02)
    # the target is 15.6x beyond the largest rung, the one backtest (xs-m predicting l) reached 4x: no
    # prediction that far, and the reason is kept
    assert wide.verdict.beyond == pytest.approx(1e13 / 6.4e11) and wide.verdict.reach == pytest.approx(4.0)
    assert wide.verdict.prediction is None and wide.verdict.withheld == "beyond the backtests"
    assert wide.verdict.trend_based and wide.verdict.lack_of_fit.testable
    assert [a.verdict for a in wide.at_rungs][-1] == Fixed.BETTER  # lower loss is better
    assert same.verdict is not None and same.verdict.verdict in (Transfer.HOLDS, Transfer.NOT_SETTLED)
    assert wide.backtest is not None and wide.backtest.rung == "l" and wide.backtest.inside
    assert [b.fitted for b in wide.backtests] == [("xs", "s", "m")]  # every origin leaving 3 rungs to fit
    assert ladder.coverage is not None and ladder.coverage.total == 2
    # 'wide' orders every smaller rung as the largest (every seed resample too); 'same' is a coin flip
    assert wide.accuracy.value == 1.0 and wide.accuracy.lo == 1.0
    assert math.isfinite(same.accuracy.lo) and same.accuracy.lo < same.accuracy.hi
    assert len(wide.snr) == 4 and all(s.lo <= s.value <= s.hi for s in wide.snr)
    # decision accuracy: the pair (baseline, same) is a coin flip; the pairs with 'wide' are ordered alike
    assert all(a >= 1 / 3 for a in ladder.accuracy) and len(ladder.accuracy) == 3
    fit = next(c for c in ladder.curves if c.variant == "baseline").fit
    assert fit is not None and fit.rungs == 4


def test_the_report_opens_with_the_ladder_figure_and_the_transfer_table(tmp_path: Path) -> None:
    study = build_study(*ladder_frame())
    (tmp_path / "figures").mkdir()
    part = ladder_verdicts.part(Inputs(study, tmp_path / "figures"))
    assert part is not None and not part.failed
    assert isinstance(part.intro[0], Figure) and part.intro[0].path == "figures/scaling.png"
    assert isinstance(part.intro[1], Table) and part.intro[1].header[1] == "transfer verdict"
    assert ABLATION_PARTS[0] is ladder_verdicts.part  # its intro opens the report, before every other part's
    doc, data = assemble("Ablation report: lad", [part])
    text = render_markdown(doc)
    assert text[text.index("!["):].startswith("![`val/loss` against training compute")
    # no prediction farther than the backtests reached, and the table says why
    assert "the backtests reached 4x" in part.intro[1].rows[0][-1]
    for suffix in ("png", "pdf", "svg"):
        assert (tmp_path / "figures" / f"scaling.{suffix}").is_file()
    assert all((tmp_path / "figures" / f"verdicts_{name}.png").is_file() for name, _ in RUNGS)
    ladder = data["ladder"]
    assert ladder["fits"]["baseline"]["all"]["form"] in ("power_law", "log_linear")
    assert ladder["comparisons"]["wide"]["transfer"]["verdict"] == "grows"
    write_runs_csv(study, tmp_path / "runs.csv")
    with (tmp_path / "runs.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 4 * 18 and {r["rung"] for r in rows} == {n for n, _ in RUNGS}


def test_the_effects_table_corrects_over_every_rung() -> None:
    """The largest rung's effects (the sections that know no ladder) are Holm-corrected over the
    comparisons of every rung: with four rungs their adjusted p is at least the single rung's."""
    study = build_study(*ladder_frame())
    assert family_of(study) == 2 * 4
    single = dataclasses.replace(study, rungs={})
    for ladder_row, alone in zip(effects(study), effects(single), strict=True):
        assert ladder_row.variant == alone.variant and ladder_row.p_holm >= alone.p_holm
    assert any(a.p_holm > b.p_holm for a, b in zip(effects(study), effects(single), strict=True))


def test_the_setup_counts_every_rungs_runs_and_compute() -> None:
    """A ladder's setup said "18 runs" for 72 (the largest rung's) and summed only that rung's wall time."""
    parent, frame = ladder_frame()
    frame["metrics.final/train/wall_time_s"] = 10.0
    study = build_study(parent, frame)
    assert setup.ladder_runs(study) == "72 runs over 4 rungs (18 at `xs`, 18 at `s`, 18 at `m`, 18 at `l`)"
    assert sum(r.metrics["train/wall_time_s"] for r in every_run(study)) == 720.0  # the setup's total
    assert setup.ladder_runs(study.rungs["l"]) == "18 runs"  # one rung, or no ladder: the plain count


def test_the_gap_panel_draws_each_comparisons_gap_at_every_rung_and_its_fitted_line() -> None:
    """Under the ladder figure, each comparison's gap per rung (where the curves above overlap) and the
    transfer table's fitted line between the rungs it used, in the variant's colour."""
    ladder = ladder_of(build_study(*ladder_frame()))
    assert ladder is not None
    series = {g.label: g for g in ladder_verdicts.gap_series(ladder)}
    assert set(series) == {"wide", "same"}
    wide = series["wide"]
    assert [x for x, *_ in wide.rungs] == [r.compute for r in ladder.rungs]
    (c,) = [c for c in ladder.comparisons if c.variant == "wide"]
    assert [(d, lo, hi) for _, d, lo, hi in wide.rungs] == [(a.diff, a.lo, a.hi) for a in c.at_rungs]
    assert wide.rungs[0][1] == pytest.approx(-0.02, abs=0.01) and wide.rungs[-1][1] == pytest.approx(-0.14,
                                                                                                  abs=0.01)
    assert wide.fitted is not None and c.verdict is not None
    (x0, y0, lo0, hi0), (x1, y1, _, _) = wide.fitted
    assert (x0, x1) == (ladder.rungs[0].compute, ladder.rungs[-1].compute)
    assert (y0, y1, lo0, hi0) == (c.verdict.bottom.value, c.verdict.top.value, c.verdict.bottom.lo,
                                  c.verdict.bottom.hi)
    assert wide.color == [cv.variant for cv in ladder.curves].index("wide")  # one colour in both panels


def test_the_html_links_a_ladders_variants_rungs_and_cells_to_their_runs(tmp_path: Path) -> None:
    """A ladder's report links each variant to its runs at every rung, each rung to every variant's runs
    there, and each variant-at-rung cell of a table to the runs it compares (the variant's and the
    baseline's at that rung); a store without the study's experiment (its shared views cannot be written)
    gets MLflow's plain filtered runs page."""
    import urllib.parse

    from ablate.report.build import run_links
    from ablate.report.render import Bullets, Document, Section, render_html

    study = build_study(*ladder_frame(seeds=2))
    links = run_links(study, f"sqlite:///{tmp_path / 'other.db'}")
    assert links.base == "http://127.0.0.1:5000"

    def ids(url: str) -> set[str]:
        query = urllib.parse.parse_qs(url.partition("?")[2])["searchFilter"][0]
        return set(re.findall(r"'([^']+)'", query))

    rungs = [n for n, _ in RUNGS]
    assert ids(links.names["wide"]) == {f"{r}-wide-{s}" for r in rungs for s in range(2)}
    assert ids(links.names["s"]) == {f"s-{v}-{k}" for v in ("baseline", "wide", "same") for k in range(2)}
    assert ids(links.pairs[("wide", "m")]) == {f"m-{v}-{k}" for v in ("baseline", "wide") for k in range(2)}
    doc = Document("t", "Report generated on x", [Bullets(["wide: better", "nothing: here"])], [Section("s", [
        Table(["comparison", "xs", "l"], [["`wide`", "-0.02", "-0.14"]])])])
    page = render_html(doc, tmp_path, links)
    anchors = dict((text, href) for href, text in re.findall(r'<a class="runs" href="([^"]+)"[^>]*>(.*?)</a>',
                                                          page))
    assert set(anchors) == {"wide", "<code>wide</code>", "xs", "l", "-0.02", "-0.14"}
    assert anchors["-0.14"].replace("&amp;", "&") == links.pairs[("wide", "l")]
    assert anchors["xs"].replace("&amp;", "&") == links.names["xs"]
    assert "nothing: here" in page  # a bullet that names no variant stays plain
