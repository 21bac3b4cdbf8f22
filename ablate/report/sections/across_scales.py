"""A ladder's report (``ablation.scales``): it opens with the scaling figure (each variant's metric against
training compute, one line and band per variant, seeds as dots, the target marked, each rung's verdicts
above it), the transfer table after it; the section "Across scales" holds the rungs (size, tokens, compute,
signal-to-noise, decision accuracy), each variant's fit, each comparison's verdict at every rung with the
verdict figure of each rung, and the backtest on the largest rung.

Renders ``ablate.report.compute.fitted_ladder``'s numbers; decides nothing (the verdicts are
``ablate.stats``'). A prediction at the target is always worded as an extrapolation beyond the largest rung.
"""

from __future__ import annotations

import math

from ablate.report import plots as figs
from ablate.report.compute import statistics as st
from ablate.report.compute.fitted_ladder import (
    AtRung,
    ComparisonLadder,
    Estimate,
    Fit,
    Fixed,
    Ladder,
    Transfer,
    TransferVerdict,
    as_record,
    ladder_of,
)
from ablate.report.render import Block, Figure, Para, Section, Table
from ablate.report.section_api import Inputs, Part

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
    """The transfer verdict in words: whose advantage grows, shrinks, holds or reverses."""
    top = v.top.value
    better = (top > 0) == higher
    who = "its advantage" if better else "its deficit"
    if v.verdict == Transfer.REVERSES:
        return f"**reverses** (crosses at {crossover_text(v)})"
    if v.verdict == Transfer.HOLDS:
        return f"**holds** (changes by less than ±{v.margin:g} {unit} over the ladder)"
    if v.verdict == Transfer.GROWS:
        return f"**grows** ({who} widens with compute)"
    if v.verdict == Transfer.SHRINKS:
        return f"**shrinks** (the gap narrows with compute; it would reach 0 near {crossover_text(v)}, " \
               "an extrapolation)"
    return "**not settled**"


def prediction_text(v: TransferVerdict, dec: int, unit: str) -> str:
    if v.prediction is None or v.target is None:
        return "-"
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
                     f"{st.fmt(v.per_decade, ladder.decimals, True)}",
                     _interval(v.change, ladder.decimals), prediction_text(v, ladder.decimals, ladder.unit)])
    level = ladder.transfer_level
    return Table(["comparison", "transfer verdict", f"gap, smallest → largest rung ({level:.1%})",
                  "per 10x compute", "change over the ladder", "predicted gap at the target"], rows,
                 align="llllll",
                 caption=f"Each gap (variant − baseline, {ladder.metric}) fitted as a line in log10 "
                         "compute over the rungs, each rung with its own spread (Welch–Satterthwaite t); "
                         f"intervals at {level:.1%} (Bonferroni over the {len(ladder.comparisons)} "
                         "comparisons). Holds: the change stays within ±margin; the prediction is an "
                         "extrapolation, never a measurement.")


def _rung_notes(ladder: Ladder) -> list[tuple[float, str]]:
    notes = []
    for i, r in enumerate(ladder.rungs):
        marks = "".join(MARK.get(c.at_rungs[i].verdict, "?") for c in ladder.comparisons)
        notes.append((r.compute, f"{r.name}\n{marks}"))
    return notes


def scaling_figure(inp: Inputs, ladder: Ladder) -> Figure:
    curves = [figs.ScalingCurve(c.variant, [(p.compute, p.values) for p in c.points], ladder.grid, c.line,
                                c.lo, c.hi) for c in ladder.curves]
    path = figs.scaling_figure(curves, ladder.rungs[-1].compute, ladder.target, _rung_notes(ladder),
                               ladder.metric, inp.fig_dir / "scaling.png", gap_series(ladder),
                               f"Δ {ladder.metric} vs baseline")
    order = ", ".join(f"`{c.variant}`" for c in ladder.comparisons)
    return Figure(f"figures/{path.name}",
                  f"`{ladder.metric}` against training compute over {len(ladder.rungs)} rungs "
                  f"({ladder.span:.3g}x): each variant's seeds (dots), rung means, fitted curve and "
                  f"{ladder.band_level:.0%} band (from "
                  "resampling seeds within rungs), dashed beyond the largest rung (an extrapolation). Above "
                  f"each rung its verdicts, one mark per comparison ({order}): + better, - worse, 0 no "
                  "detectable effect, = identical, ? not testable. Below: each comparison's gap (variant "
                  "− baseline) at each rung with its interval (bars, nudged apart), and the gap fitted as "
                  "a line in log compute (the transfer table's), shaded between its ends' intervals.")


def gap_series(ladder: Ladder) -> list[figs.GapSeries]:
    """The lower panel of the scaling figure: each comparison's gap per rung and its fitted line."""
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
        rows.append([c.variant, *_fit_cells(c.fit), ": ".join(_fit_cells(c.without_top))])
    return Table(["variant", "form (rungs, seeds)", "parameters (95% intervals)", "without the largest rung"],
                 rows, align="llll",
                 caption="Each variant's metric against compute: L(C) = E + A (C/C0)^-alpha with 4 or "
                         "more rungs (C0 the rungs' geometric mean), else L(C) = a + b log10(C/C0); least "
                         "squares on the rung means weighted by their seeds, intervals from resampling seeds "
                         "within each rung (widened by t/z for few seeds).")


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
        return "no pairs"
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
        b = c.backtest
        if b is None:
            continue
        rows.append([c.variant, b.rung, _interval(b.predicted, ladder.decimals),
                     f"{st.fmt(b.measured, ladder.decimals, True)} (n={b.n})",
                     "inside" if b.inside else "**outside**"])
    if not rows:
        return None
    return Table(["comparison", "left out", "predicted gap (prediction interval)", "measured gap", ""], rows,
                 caption="The gap's line fitted without the largest rung, predicting it: the interval adds "
                         "that rung's seed noise (estimated on the largest rung fitted) to the line's own "
                         "error.")


def _backtest_line(ladder: Ladder) -> str:
    tested = [c.backtest for c in ladder.comparisons if c.backtest is not None]
    inside = sum(b.inside for b in tested)
    accuracy = [a for a in ladder.accuracy if math.isfinite(a)]
    mean = f"{ladder.mean_accuracy:.0%}" if accuracy else "-"
    return (f"**Backtest**: the smaller rungs predicted the largest rung's gap within the prediction "
            f"interval for {inside} of {len(tested)} comparisons; the smaller rungs order the pairs of "
            f"variants as the largest does in {mean} of cases (DataDecide's decision accuracy, over the "
            f"{len(accuracy)} smaller rungs).")


def scale_range(ladder: Ladder, c: ComparisonLadder) -> str:
    """The range of scale a comparison's verdicts hold over: 'N 25k-200k, 8e10-5e12 FLOPs'."""
    used = [r for r in ladder.rungs if c.verdict is not None and r.name in c.verdict.rungs]
    if not used:
        return "-"
    return (f"N {used[0].params:,.0f}–{used[-1].params:,.0f}, {flops(used[0].compute)}–"
            f"{flops(used[-1].compute)} FLOPs")


def part(inp: Inputs) -> Part | None:
    """The opening scaling figure and transfer table, and the section "Across scales"."""
    ladder = ladder_of(inp.study)
    if ladder is None or not ladder.rungs:
        return None
    intro: list[Block] = [scaling_figure(inp, ladder), transfer_table(ladder), Para(_backtest_line(ladder))]
    blocks: list[Block] = [
        Para(f"A ladder of {len(ladder.rungs)} rungs spanning {ladder.span:.3g}x in training compute; every "
             "variant runs at every rung on the same seeds, paired by seed within a rung. The sections "
             f"after this one state the largest rung's (`{ladder.rungs[-1].name}`) verdicts."),
        rungs_table(ladder), fits_table(ladder), at_rungs_table(ladder), *rung_figures(inp, ladder)]
    test = backtest_table(ladder)
    if test is not None:
        blocks.append(test)
    return Part("scaling", sections=[Section("Across scales", blocks)], intro=intro,
                data={"ladder": as_record(ladder)})
