"""The report section of a full-factorial study: main effects and interactions (also among the report's
opening lines), a cell-means grid for two axes, and their forest plot. The effects themselves are
computed in ``ablate.report.compute.contrasts``.
"""

from __future__ import annotations

from pathlib import Path

from ablate.report import plots as figs
from ablate.report.compute import statistics as st
from ablate.report.compute.comparisons import design_of
from ablate.report.compute.contrasts import FactorialRow, cell_means
from ablate.report.compute.loaded_study import Study, quality_meta
from ablate.report.render import Block, Bullets, Figure, Para, Section, Table
from ablate.report.section_api import Inputs, Part
from ablate.report.section_api import section as report_section  # factorial.py has a section() of its own


@report_section(140)
def part(inp: Inputs) -> Part:
    """The opening lines and the section (none when the study is not a full factorial); ``data['factorial']``
    (empty then)."""
    study, rows = inp.study, inp.factorial
    data = {"factorial": [{"kind": r.kind, "label": r.label, "metric": r.metric, "diff": r.effect.diff,
                           "lo": r.effect.lo, "hi": r.effect.hi, "p": r.effect.p, "p_holm": r.p_holm,
                           "test": r.effect.test, "interval": r.effect.interval, "n": r.effect.n_min,
                           "incomplete": r.incomplete, "verdict": r.verdict} for r in rows]}
    if not rows:
        return Part("factorial", data=data)
    adaptive = design_of(study) is not None and study.baseline is not None
    fixed = "; fixed-sample tests, blind to the adaptive stopping" if adaptive else ""
    intro: list[Block] = [Para("**Main effects and interactions** (full factorial, cells matched by seed and "
                               f"the other axes{fixed}):"),
                          Bullets([r.verdict for r in rows if r.metric == study.primary])]
    return Part("factorial", [section(study, rows, inp.fig_dir)], intro=intro, data=data)


def section(study: Study, rows: list[FactorialRow], fig_dir: Path) -> Section:
    """Main effects and interactions of a full-factorial study, with a cell-means grid for two axes."""
    blocks: list[Block] = [Para(
        "A main effect compares each axis value with the baseline's value of that axis over cells matched "
        "on every other axis and on the seed (one difference per matched pair, so it averages over the "
        "other axes). An interaction `A=a × B=b` is the effect of A=a (against the baseline's A) when B=b "
        "minus its effect when B has the baseline's value: zero when the axes act independently.")]
    grid = cell_means(study, study.primary)
    if grid is not None:
        _, dec, _ = quality_meta(study.primary)

        def cell(va: str, vb: str) -> str:
            bad = grid.unfinished[(va, vb)]
            return st.fmt_summary(grid.means[(va, vb)], dec) + (f" ({bad} unfinished)" if bad else "")

        (a, b) = grid.axes
        blocks.append(Table(["", *[f"{b}={vb}" for vb in grid.cols]],
                            [[f"{a}={va}", *[cell(va, vb) for vb in grid.cols]] for va in grid.rows],
                            caption=f"{study.primary} per cell: mean ± 95% t-interval half-width over "
                                    "finished seeds (the baseline's values first)"))
    table_rows = []
    for r in rows:
        _, dec, _ = quality_meta(r.metric)
        e = r.effect
        ci = st.fmt_interval(e.lo, e.hi, dec) if e.tested else "—"
        if e.tested and e.interval == "bootstrap":
            ci += " bootstrap"
        table_rows.append([r.label, r.metric, st.fmt(e.diff, dec, True), ci, e.test if e.tested else "—",
                           str(e.n_min), str(r.incomplete), st.fmt_p(e.p), st.fmt_p(r.p_holm)])
    blocks.append(Table(["comparison", "metric", "Δ", "95% CI", "test", "n", "incomplete", "p", "p (Holm)"],
                        table_rows, "llrrlrrrr", "Main effects and interactions"))
    prim = [r for r in rows if r.metric == study.primary]
    notes = [st.untestable_note(r.effect) for r in prim]
    figs.forest_plot([(r.label, r.effect.diff, r.effect.lo, r.effect.hi) for r in prim],
                     f"Δ {study.primary} (95% CI)", fig_dir / "factorial.png", notes)
    blocks.append(Figure("figures/factorial.png", f"Main effects and interactions on {study.primary} "
                         "(dot: mean matched difference; bar: 95% CI)"
                         + (st.UNTESTABLE_CAPTION if any(notes) else "")))
    return Section("Factorial effects", blocks)
