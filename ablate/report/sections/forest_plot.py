"""The picture the report opens with: a forest plot of each comparison's validation interval with the test
split's beside it (``ablate.report.compute.val_and_test``), and the regime the verdicts hold for.
"""

from __future__ import annotations

import math

from ablate.report import plots as figs
from ablate.report.compute import statistics as st
from ablate.report.compute.arm_verdicts import twice
from ablate.report.compute.comparisons import decided_metric, design_of
from ablate.report.compute.loaded_study import quality_meta
from ablate.report.compute.val_and_test import OnBothSplits, regime, test_metric, verdicts
from ablate.report.render import Block, Figure, Para
from ablate.report.section_api import Inputs, Part, section


def test_text(v: OnBothSplits, dec: int, unit: str) -> str:
    """The test split's figure beside a validation verdict, flagged where it answers differently."""
    t = v.test
    if t is None or math.isnan(t.diff):
        return ""
    ci = f" {st.fmt_interval(t.lo, t.hi, dec)}" if not math.isnan(t.lo) else ""
    text = f"; test: {st.fmt(t.diff, dec, True)} {unit}{ci}"
    if v.agrees is False:
        text += f" — **{v.flag_words()}**"
    return text


def _own_best_intervals(inp: Inputs) -> dict[str, tuple[float, float, float]]:
    """Each variant's interval with it and the baseline at their own best, where those are not the cells
    at the baseline's settings (a tuned study whose search moved either's settings)."""
    out = {}
    for t in inp.derived(twice):
        look = t.own.look if t.own is not None else None
        if look is not None and not t.identical and not math.isnan(look.lo):
            out[t.variant] = (look.diff, look.lo, look.hi)
    return out


@section(30)
def part(inp: Inputs) -> Part | None:
    """The opening forest plot of the verdicts' own intervals, val and test side by side, with the
    ±min_effect band; ``data['verdicts']``: each comparison's val and test look and whether they agree."""
    study = inp.study
    design = design_of(study)
    if study.baseline is None:
        return None
    if design is None:  # a fixed seed list: no sequential intervals to draw, the regime all the same
        fixed = regime(study)
        return None if fixed is None else Part("verdicts", intro=[
            Para(f"**Regime** these results hold for: {fixed.text()}.")],
            data={"verdicts": [], "regime": fixed.record()})
    rows = verdicts(study, design)
    metric = decided_metric(study)
    unit, dec, _ = quality_meta(metric)
    shown = [(v.variant, v.val, v.test) for v in rows if v.val is not None and not math.isnan(v.val.lo)]
    intro: list[Block] = []
    own = _own_best_intervals(inp)
    if shown:
        test = test_metric(metric) or "test"
        path = figs.verdict_forest(
            [(name, (val.diff, val.lo, val.hi),
              None if t is None or math.isnan(t.lo) else (t.diff, t.lo, t.hi)) for name, val, t in shown],
            design.min_effect, f"Δ vs {study.baseline} ({unit}), repeated {1 - design.alpha:.0%} CI",
            (metric, test), inp.fig_dir / "verdicts.png", own_best=own)
        band = f", the shaded band ±{design.min_effect:g} {unit} (the smallest effect worth knowing)" if (
            design.min_effect is not None) else ""
        moved = ", ".join(f"`{v}`" for v in own)
        tuned = (f"; squares: `{metric}` with the variant and the baseline each at its own best settings, "
                 f"for {moved}, whose search moved them (the others' own-best cells are these same cells)"
                 ) if own else ""
        which = "at the baseline's settings" if inp.derived(twice) else "its verdict rests on"
        intro = [Figure(f"figures/{path.name}",
                        f"Each variant against `{study.baseline}`: the paired, repeated interval {which}, on "
                        f"`{metric}` (filled, decides) and on `{test}` (open, same seeds and look){tuned}"
                        f"{band}. {design.family} comparisons, each at level {design.level:.4g}.")]
    reg = regime(study)
    if reg is not None:
        intro.append(Para(f"**Regime** these verdicts hold for: {reg.text()}."))
    data = {"verdicts": [{"variant": v.variant, "val_answer": v.val_answer, "test_answer": v.test_answer,
                          "agrees": v.agrees, "test_diff": v.test.diff if v.test else None,
                          "test_lo": v.test.lo if v.test else None, "test_hi": v.test.hi if v.test else None,
                          "own_best": dict(zip(("diff", "lo", "hi"), own[v.variant], strict=True))
                          if v.variant in own else None}
                         for v in rows],
            "regime": None if reg is None else reg.record()}
    return Part("verdicts", intro=intro, data=data)
