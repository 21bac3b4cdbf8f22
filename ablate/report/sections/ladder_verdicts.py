"""A ladder's report (``ablation.scales``): it opens with the ladder figure (each variant's metric against
training compute, one line and band per variant, seeds as dots, the target marked, each rung's verdicts
above it), the transfer table after it; the section "Across scales" holds the rungs (size, tokens, compute,
signal-to-noise, decision accuracy), each variant's fit with its lack-of-fit test, each comparison's verdict
at every rung with the verdict figure of each rung, each comparison's decision accuracy and signal-to-noise
with their intervals, and the rolling-origin backtests with their coverage.

Renders ``ablate.report.compute.fitted_ladder``'s numbers; decides nothing (the verdicts are
``ablate.stats``'). A prediction at the target is always worded as an extrapolation beyond the largest rung.
"""

from __future__ import annotations

import math

from ablate.report import plots as figs
from ablate.report.compute import statistics as st
from ablate.report.compute.comparisons import Reading
from ablate.report.compute.fitted_ladder import (
    AtRung,
    ComparisonLadder,
    Estimate,
    Fit,
    Fixed,
    Interval,
    Ladder,
    Transfer,
    TransferVerdict,
    as_record,
    ladder_of,
)
from ablate.report.render import Block, Figure, Para, Section, Table
from ablate.report.section_api import Inputs, Part, section

# One mark per verdict at a rung, in the figure's notes.
MARK = {Fixed.BETTER: "+", Fixed.WORSE: "-", Fixed.IDENTICAL: "=", Fixed.NO_DETECTABLE: "0",
        Fixed.NOT_TESTABLE: "?", Fixed.TOO_FEW: "?", Fixed.NO_RUNS: " "}


def flops(value: float | None) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.3g}"


def _interval(e: Estimate | None, dec: int) -> str:
    if e is None or not math.isfinite(e.value):
        return "-"
    if not (math.isfinite(e.lo) and math.isfinite(e.hi)):
        return st.fmt(e.value, dec, True)
    return f"{st.fmt(e.value, dec, True)} {st.fmt_interval(e.lo, e.hi, dec)}"


def crossover_text(v: TransferVerdict) -> str:
    c = v.crossover
    if c is None or not math.isfinite(c.compute):
        return "-"
    lo = "below the range" if c.open_below else flops(c.lo)
    hi = "beyond the range" if c.open_above else flops(c.hi)
    return f"{flops(c.compute)} FLOPs [{lo}, {hi}]"


def verdict_words(v: TransferVerdict, higher: bool, unit: str, dec: int) -> str:
    """The transfer verdict in words: whose advantage grows, shrinks, holds or reverses, read from the
    measured rungs."""
    top = v.top.value
    better = (top > 0) == higher
    who = "its advantage" if better else "its deficit"
    if v.verdict == Transfer.REVERSES:
        cross = f"; the line crosses at {crossover_text(v)}" if v.crossover is not None else ""
        return f"**reverses** (the two smallest and the two largest rungs decided, opposite ways{cross})"
    if v.verdict == Transfer.HOLDS:
        return f"**holds** (every rung within ±{v.margin:g} {unit} of the smallest)"
    if v.verdict == Transfer.GROWS:
        return f"**grows** ({who} widens with compute, rung by rung)"
    if v.verdict == Transfer.SHRINKS:
        beyond = (f"; the line would reach 0 near {crossover_text(v)}, an extrapolation"
                  if v.crossover is not None else "")
        return f"**shrinks** (the smallest rung's side narrows with compute{beyond})"
    return "**not settled**"


def trend_text(v: TransferVerdict) -> str:
    if v.trend is None or not math.isfinite(v.trend.p):
        return "-"
    return f"J {v.trend.statistic:+.2f}, Holm p {_p(v.trend_p)}"


def _p(p: float) -> str:
    return "-" if not math.isfinite(p) else "<0.001" if p < 0.001 else f"{p:.3f}"


def line_text(v: TransferVerdict, dec: int) -> str:
    """The line in log compute, or why nothing is read from it."""
    lof = v.lack_of_fit
    test = (f"lack of fit F({lof.df1}, {lof.df2}) = {lof.f:.3g}, p {_p(lof.p)}" if lof.testable
            else "lack of fit not testable")
    if not v.trend_based:
        return f"the gap does not follow a trend in log compute over these rungs ({test})"
    return (f"{st.fmt(v.per_decade, dec, True)} per 10x; change {_interval(v.change, dec)} "
            f"(rung sd {math.sqrt(v.tau2):.{dec}f}; {test})")


WITHHELD = {"lack of fit": "none: the gap does not follow a trend in log compute",
            "no backtest": "none: no rolling backtest checked an extrapolation (fewer than 4 rungs)",
            "no target": "-"}


def prediction_text(v: TransferVerdict, dec: int, unit: str) -> str:
    if v.prediction is None or v.target is None:
        if v.withheld == "beyond the backtests" and v.beyond is not None and v.reach is not None:
            return (f"none: {flops(v.target)} FLOPs is {v.beyond:.3g}x beyond the largest rung, the "
                    f"backtests reached {v.reach:.3g}x")
        return WITHHELD.get(v.withheld, "-")
    return (f"{_interval(v.prediction, dec)} {unit} at {flops(v.target)} FLOPs (extrapolated "
            f"{v.beyond:.3g}x beyond the largest rung)")


def transfer_table(ladder: Ladder) -> Table:
    rows = []
    for c in ladder.comparisons:
        v = c.verdict
        if v is None:
            rows.append([c.variant, "no fit (fewer than two rungs with two pairs)", "-", "-", "-", "-"])
            continue
        rows.append([c.variant, verdict_words(v, ladder.higher, ladder.unit, ladder.decimals),
                     f"{_interval(v.bottom, ladder.decimals)} → {_interval(v.top, ladder.decimals)}",
                     trend_text(v), line_text(v, ladder.decimals),
                     prediction_text(v, ladder.decimals, ladder.unit)])
    level = ladder.transfer_level
    return Table(["comparison", "transfer verdict", f"measured gap, smallest → largest rung ({level:.1%})",
                  "monotone trend", "line in log10 compute", "predicted gap at the target"], rows,
                 align="llllll",
                 caption=f"Each gap (variant − baseline, {ladder.metric}) judged from its measured rungs: "
                         "reverses where the two smallest and the two largest rungs are each decided (their "
                         "verdicts below), opposite ways; grows or shrinks where Jonckheere's monotone trend "
                         "test over the rungs (seed resampling, the rung-level variance in its null) "
                         f"rejects, Holm over the {len(ladder.comparisons)} comparisons; holds where every "
                         "rung's gap minus the smallest's lies within ±margin. Beside it the gap's line in "
                         "log10 compute, each rung with its own spread plus the rung-level variance "
                         f"(Welch–Satterthwaite t), at {level:.1%} (Bonferroni over the comparisons), "
                         "read only where its lack-of-fit test does not reject; a prediction is an "
                         "extrapolation, never a measurement, and none is given farther than the rolling "
                         "backtests reached.")


def _rung_notes(ladder: Ladder) -> list[tuple[float, str]]:
    notes = []
    for i, r in enumerate(ladder.rungs):
        marks = "".join(MARK.get(c.at_rungs[i].verdict, "?") for c in ladder.comparisons)
        notes.append((r.compute, f"{r.name}\n{marks}"))
    return notes


def ladder_figure(inp: Inputs, ladder: Ladder) -> Figure:
    curves = [figs.LadderCurve(c.variant, [(p.compute, p.values) for p in c.points], ladder.grid, c.line,
                                c.lo, c.hi) for c in ladder.curves]
    path = figs.ladder_figure(curves, ladder.rungs[-1].compute, ladder.target, _rung_notes(ladder),
                              ladder.metric, inp.fig_dir / "scaling.png", gap_series(ladder),
                              f"Δ {ladder.metric} vs baseline")
    order = ", ".join(f"`{c.variant}`" for c in ladder.comparisons)
    return Figure(f"figures/{path.name}",
                  f"`{ladder.metric}` against training compute over {len(ladder.rungs)} rungs "
                  f"({ladder.span:.3g}x): each variant's seeds (dots), rung means, fitted curve and "
                  f"{ladder.band_level:.0%} band (from "
                  "resampling seeds within rungs, plus the rungs' own scatter about the curve), dashed "
                  "beyond the largest rung (an extrapolation). Above "
                  f"each rung its verdicts, one mark per comparison ({order}): + better, - worse, 0 no "
                  "detectable effect, = identical, ? not testable. Below: each comparison's gap (variant "
                  "− baseline) at each rung with its interval (bars, nudged apart), and the gap fitted as "
                  "a line in log compute (the transfer table's), shaded between its ends' intervals.")


def gap_series(ladder: Ladder) -> list[figs.GapSeries]:
    """The lower panel of the ladder figure: each comparison's gap per rung and its fitted line."""
    compute = {r.name: r.compute for r in ladder.rungs}
    colour = {c.variant: i for i, c in enumerate(ladder.curves)}
    out = []
    for c in ladder.comparisons:
        at = [(r.compute, a.diff, a.lo, a.hi) for r, a in zip(ladder.rungs, c.at_rungs, strict=True)]
        v = c.verdict
        ends = None if v is None or not v.rungs else (
            (compute[v.rungs[0]], v.bottom.value, v.bottom.lo, v.bottom.hi),
            (compute[v.rungs[-1]], v.top.value, v.top.lo, v.top.hi))
        out.append(figs.GapSeries(c.variant, colour.get(c.variant, 0), at, ends))
    return out


def fits_table(ladder: Ladder) -> Table:
    rows = []
    for c in ladder.curves:
        rows.append([c.variant, *_fit_cells(c.fit), _lof_cell(c.fit), ": ".join(_fit_cells(c.without_top))])
    return Table(["variant", "form (rungs, seeds)", "parameters (95% intervals)", "lack of fit; rung sd",
                  "without the largest rung"],
                 rows, align="lllll",
                 caption="Each variant's metric against compute: L(C) = E + A (C/C0)^-alpha with 4 or "
                         "more rungs (C0 the rungs' geometric mean), else L(C) = a + b log10(C/C0); least "
                         "squares on the rung means weighted by their seeds, intervals from resampling seeds "
                         "within each rung plus a rung effect of the rung-level variance estimated from the "
                         "residuals (widened by t/z on the seeds' df, or on the rungs' left over the fit "
                         "where the rungs scatter). The lack-of-fit F test: the rungs' scatter about the "
                         "curve against the seeds'.")


def _lof_cell(fit: Fit | None) -> str:
    if fit is None:
        return "-"
    lof = fit.lack_of_fit
    test = (f"F({lof.df1}, {lof.df2}) = {lof.f:.3g}, p {_p(lof.p)}" if lof.testable else Fixed.NOT_TESTABLE)
    return f"{test}; {math.sqrt(fit.tau2):.3g}"


def _fit_cells(fit: Fit | None) -> list[str]:
    if fit is None:
        return ["-", "-"]
    edge = "; exponent only bounded (saturates within the ladder)" if fit.at_edge else ""
    edge += f"; {fit.note}" if fit.note else ""
    shown = ", ".join(f"{k} {_g(v)} [{_g(fit.intervals[k][0])}, {_g(fit.intervals[k][1])}]"
                      for k, v in fit.params.items())
    return [f"{fit.form.replace('_', ' ')} ({fit.rungs}, {fit.seeds}){edge}", shown]


def _g(value: float) -> str:
    return "-" if not math.isfinite(value) else f"{value:.4g}"


def rungs_table(ladder: Ladder) -> Table:
    rows = []
    for i, r in enumerate(ladder.rungs):
        accuracy = ladder.accuracy[i] if i < len(ladder.accuracy) else None
        rows.append([r.name, f"{r.params:,.0f}" if math.isfinite(r.params) else "-",
                     f"{r.tokens:,.0f}" if math.isfinite(r.tokens) else "-", flops(r.compute),
                     flops(r.planned), str(r.seeds), _g(r.snr),
                     "(the reference)" if accuracy is None else f"{accuracy:.0%}"])
    return Table(["rung", "N (no embeddings)", "tokens", "FLOPs", "planned FLOPs", "baseline seeds",
                  "signal/noise", "decision accuracy"], rows,
                 caption="Compute by 6ND + 6·n_layer·n_ctx·d_model·D (Kaplan et al. 2020), measured by each "
                         "run. Signal/noise (Heineman et al. 2025): the largest difference between the "
                         "variants' means over the pooled sd of seeds within variants. Decision accuracy "
                         "(DataDecide, Magnusson et al. 2025): the share of pairs of variants this rung "
                         "orders as the largest rung does.")


def at_rungs_table(ladder: Ladder) -> Table:
    names = [r.name for r in ladder.rungs]
    rows = []
    for c in ladder.comparisons:
        rows.append([c.variant, *(_at_rung(a, ladder.decimals) for a in c.at_rungs)])
    level = 1.0 - ladder.alpha / ladder.family
    return Table(["comparison", *names], rows,
                 caption=f"Each comparison at each rung, paired by seed: Δ with its {level:.2%} interval "
                         f"(Bonferroni over the ladder's {ladder.family} verdicts), its verdict by the "
                         f"Holm-adjusted p over the same family, n pairs. The verdicts of every rung are one "
                         "family.")


def _at_rung(a: AtRung, dec: int) -> str:
    if a.n == 0:
        return Reading.NO_PAIRS
    ci = "" if not math.isfinite(a.lo) else f" {st.fmt_interval(a.lo, a.hi, dec)}"
    return f"{st.fmt(a.diff, dec, True)}{ci} {a.verdict.value}, n={a.n}"


def rung_figures(inp: Inputs, ladder: Ladder) -> list[Block]:
    """The verdict figure of each rung: every comparison's interval there."""
    blocks: list[Block] = []
    level = 1.0 - ladder.alpha / ladder.family
    for i, r in enumerate(ladder.rungs):
        rows = [(c.variant, (c.at_rungs[i].diff, c.at_rungs[i].lo, c.at_rungs[i].hi), None)
                for c in ladder.comparisons if c.at_rungs[i].n and math.isfinite(c.at_rungs[i].lo)]
        if not rows:
            continue
        path = figs.verdict_forest(rows, ladder.margin, f"Δ vs baseline ({ladder.unit}), {level:.2%} CI",
                                   (ladder.metric, "test"), inp.fig_dir / f"verdicts_{r.name}.png")
        blocks.append(Figure(f"figures/{path.name}", f"Rung `{r.name}` ({flops(r.compute)} FLOPs): each "
                             f"comparison's paired interval on `{ladder.metric}` at {level:.2%}."))
    return blocks


def backtest_table(ladder: Ladder) -> Table | None:
    rows = []
    for c in ladder.comparisons:
        for b in c.backtests:
            rows.append([c.variant, f"{b.fitted[0]}–{b.fitted[-1]}", b.rung, f"{b.reach:.3g}x",
                         _interval(b.predicted, ladder.decimals),
                         f"{st.fmt(b.measured, ladder.decimals, True)} (n={b.n})",
                         "inside" if b.inside else "**outside**"])
    if not rows:
        return None
    return Table(["comparison", "fitted", "predicted", "beyond the fitted", "predicted gap (prediction "
                  "interval)", "measured gap", ""], rows,
                 caption="Rolling-origin backtests: the gap's line fitted to the rungs up to each origin "
                         "(at least 3) predicts the next rung; the interval adds that rung's seed noise "
                         "(estimated on the largest rung fitted) and a new rung's own effect (the rung-level "
                         "variance) to the line's own error.")


def _ci(i: Interval, pct: bool) -> str:
    if not math.isfinite(i.value):
        return "-"
    if pct:
        return f"{i.value:.0%} [{i.lo:.0%}, {i.hi:.0%}]" if math.isfinite(i.lo) else f"{i.value:.0%}"
    return f"{_g(i.value)} [{_g(i.lo)}, {_g(i.hi)}]" if math.isfinite(i.lo) else _g(i.value)


def per_comparison_table(ladder: Ladder) -> Table:
    names = [r.name for r in ladder.rungs]
    rows = [[c.variant, _ci(c.accuracy, True), *(_ci(s, False) for s in c.snr)] for c in ladder.comparisons]
    return Table(["comparison", "decision accuracy", *(f"signal/noise {n}" for n in names)], rows,
                 caption="Per comparison, with 95% intervals from resampling seeds within rungs (pairs kept "
                         "together): its decision accuracy (the share of the smaller rungs whose gap has the "
                         "largest rung's sign; DataDecide, Magnusson et al. 2025) and its signal-to-noise at "
                         "each rung (|gap| over the pooled sd of seeds within the two variants; Heineman et "
                         "al. 2025).")


def _backtest_line(ladder: Ladder) -> str:
    cov = ladder.coverage
    if cov is None or cov.total == 0:
        tested = "no rolling backtest ran (a backtest fits at least 3 rungs and predicts the next)"
    else:
        tested = (f"the rolling backtests' prediction intervals held the measured gap in {cov.inside} of "
                  f"{cov.total} ({cov.share:.0%}, 95% interval [{cov.lo:.0%}, {cov.hi:.0%}]) at a nominal "
                  f"{cov.nominal:.1%}")
    accuracy = "; ".join(f"`{c.variant}` {_ci(c.accuracy, True)}" for c in ladder.comparisons)
    return (f"**Backtest**: {tested}. Decision accuracy per comparison (the smaller rungs' sign against "
            f"the largest's, seed-bootstrap 95% intervals): {accuracy}.")


def rung_range(ladder: Ladder, c: ComparisonLadder) -> str:
    """The range of scale a comparison's verdicts hold over: 'N 25k-200k, 8e10-5e12 FLOPs'."""
    used = [r for r in ladder.rungs if c.verdict is not None and r.name in c.verdict.rungs]
    if not used:
        return "-"
    return (f"N {used[0].params:,.0f}–{used[-1].params:,.0f}, {flops(used[0].compute)}–"
            f"{flops(used[-1].compute)} FLOPs")


@section(10)
def part(inp: Inputs) -> Part | None:
    """The opening ladder figure and transfer table, and the section "Across scales"."""
    ladder = ladder_of(inp.study)
    if ladder is None or not ladder.rungs:
        return None
    intro: list[Block] = [ladder_figure(inp, ladder), transfer_table(ladder), Para(_backtest_line(ladder))]
    blocks: list[Block] = [
        Para(f"A ladder of {len(ladder.rungs)} rungs spanning {ladder.span:.3g}x in training compute; every "
             "variant runs at every rung on the same seeds, paired by seed within a rung. The sections "
             f"after this one state the largest rung's (`{ladder.rungs[-1].name}`) verdicts."),
        rungs_table(ladder), fits_table(ladder), at_rungs_table(ladder), per_comparison_table(ladder),
        *rung_figures(inp, ladder)]
    test = backtest_table(ladder)
    if test is not None:
        blocks.append(test)
    return Part("scaling", sections=[Section("Across scales", blocks)], intro=intro,
                data={"ladder": as_record(ladder)})
