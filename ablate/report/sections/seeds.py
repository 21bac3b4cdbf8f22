"""The report's "Adaptive seeds" section: the group-sequential verdict of every comparison of a study that
chose its seeds by the evidence (``ablation.seeds: {min, max}``).

The study decided when to stop adding seeds with ``ablate.stats.sequential``; this section re-derives each
verdict from the runs with the same code (the design comes from the parent run's ``ablate.sequential``
tag, the metric from ``ablate.metric``), so the report and the study cannot disagree.
"""

from __future__ import annotations

import math

from ablate.report.compute import statistics as st
from ablate.report.compute.comparisons import (
    EQUIVALENCE_PAIRS,
    METHOD,
    POWER,
    Answer,
    Comparison,
    Design,
    Look,
    Reading,
    State,
    comparisons,
    decided_metric,
    design_of,
    look_answer,
)
from ablate.report.compute.loaded_study import Study, quality_meta
from ablate.report.render import Para, Section, Table
from ablate.report.section_api import Inputs, Part, section


def reading(look: Look, design: Design, higher: bool, unit: str) -> str:
    """What one look reads in words, its margin spelled out: 'worse' / 'no effect as large as ±0.5 BLEU'."""
    said = look_answer(look, higher)
    return f"no effect as large as ±{design.min_effect:g} {unit}" if said == Answer.NO_EFFECT else said


def reopened_phrase(earlier: Look | None, design: Design, dec: int, higher: bool, unit: str) -> str:
    """'at look 3 (5 seeds) it read worse ([-2.10, -0.12]), and the seeds since reopened it' for an
    earlier look that read an effect the comparison's current look does not (:func:`reopened`), else ''."""
    if earlier is None:
        return ""
    return (f"at look {earlier.look} ({earlier.n} seeds) it read {reading(earlier, design, higher, unit)} "
            f"({st.fmt_interval(earlier.lo, earlier.hi, dec)}), and the seeds since reopened it")


_REOPENED = (
    " A comparison whose claim asks for no effect (within its margin) keeps getting seeds after its "
    "interval excludes 0 but still reaches inside the margin; where the seeds since then widened the "
    "interval back over 0, its verdict says which look read what. The intervals of all looks cover the true "
    "effect together with the stated confidence, so the earlier reading is evidence too, not a mistake the "
    "later look corrected.")


def _verdict(c: Comparison, design: Design, higher: bool, unit: str, dec: int) -> str:
    """The comparison's verdict in words (rendered, never decided here)."""
    v, look = c.verdict, c.look
    if v.reading == Reading.NO_PAIRS:
        return "no seed where both it and the baseline finished (diverged or failed): nothing to test"
    if look is None:
        return f"open: fewer than {design.looks[0]} complete seeds so far"
    if v.reading == Reading.IDENTICAL:
        return "identical to the baseline in every seed"
    if v.answer in (Answer.BETTER, Answer.WORSE):
        text = f"effect: {v.answer} than the baseline"
        if v.reading == Reading.CLAIM_OPEN and not look.final:  # a `none` claim's question: seeds go on
            text += " so far; its claim's question is open, so the study adds seeds"
        return text
    if v.answer == Answer.NO_EFFECT:
        return f"no effect as large as ±{design.min_effect:g} {unit}" if look.state == State.NO_EFFECT else \
            "no effect beyond its claim's margin"
    if v.reading == Reading.SHORT:
        return "short of its claim's margin: the interval's far bound falls short of it"
    if v.reading == Reading.UNTESTABLE:
        return "too few finished pairs to test"
    m = design.min_effect
    if m is not None and -m <= look.lo and look.hi <= m and look.n < EQUIVALENCE_PAIRS:
        # the interval alone would read no effect: say why the verdict does not
        where = f"undecided at the maximum of {design.looks[-1]} seeds" if look.final else State.OPEN
        return (f"{where}: its interval lies within ±{m:g} {unit}, but {look.n} pairs are too few to call "
                f"it no effect (at least {EQUIVALENCE_PAIRS})")
    return (f"undecided at the maximum of {design.looks[-1]} seeds" if look.final
            else "open: the study has not finished its rounds") + (
        f"; {reopened_phrase(c.earlier, design, dec, higher, unit)}"
        if v.reading == Reading.REOPENED else "")


def _interval(look: Look | None, dec: int) -> str:
    return "—" if look is None else st.fmt_interval(look.lo, look.hi, dec)


def _hardware_flag(c: Comparison) -> str:
    """' (**2 pairs on different hardware**: ...)' where a pair's cells ran on different machines."""
    if not c.cross_hardware:
        return ""
    return (f" (**{c.cross_hardware} pair{'s' * (c.cross_hardware != 1)} on different hardware**: the "
            "difference measures the machines too)")


def sequential_summary(study: Study) -> list[str] | None:
    """The report's summary lines for an adaptive study (:func:`sequential_lines` without the names)."""
    lines = sequential_lines(study)
    return None if lines is None else [line for _, line in lines]


def sequential_lines(study: Study) -> list[tuple[str, str]] | None:
    """(variant, summary line) for an adaptive study: each variant's verdict by the test the study
    stopped by (None for a study with a fixed seed list, whose summary is the fixed-sample verdicts).

    The fixed-sample tests ignore the stopping rule and, with the 2-3 seeds a first round has, cannot
    reach p < 0.05 at all; a summary built from them would contradict the Adaptive seeds section."""
    design = design_of(study)
    if design is None or study.baseline is None:
        return None
    metric = decided_metric(study)
    unit, dec, higher = quality_meta(metric)
    lines = []
    for c in comparisons(study, design, metric):
        text = _verdict(c, design, higher, unit, dec) + _hardware_flag(c)
        look = c.look
        if look is None and c.mean_so_far is not None:  # before the first look: the mean so far, no interval
            n = len(c.finite)
            mean = st.fmt(c.mean_so_far, dec, True)
            lines.append((c.variant, f"{c.variant}: {mean} {unit} so far ({n} paired seed{'s' * (n != 1)}), "
                                     f"{text}"))
            continue
        if look is None or math.isnan(look.diff):
            lines.append((c.variant, f"{c.variant}: {text}"))
            continue
        where = f"{look.n} paired seed{'s' * (look.n != 1)}, look {look.look} of {len(design.looks)}"
        ci = _interval(look, dec)
        shown = f"{st.fmt(look.diff, dec, True)} {unit}" + (
            f" {ci} (repeated {1 - design.alpha:.0%} CI)" if ci != "—" and look.sd > 0 else "")
        lines.append((c.variant, f"{c.variant}: {shown}, {text} ({where})"))
    return lines


@section(90)
def part(inp: Inputs) -> Part | None:
    """The section (None for a study with a fixed seed list); ``data['sequential']``: the design and each
    comparison's look and verdict."""
    study = inp.study
    design = design_of(study)
    if design is None or study.baseline is None:
        return None
    metric = decided_metric(study)
    unit, dec, higher = quality_meta(metric)
    rows, records = [], []
    reopen_note = False
    for c in comparisons(study, design, metric):
        look = c.look
        text = _verdict(c, design, higher, unit, dec)
        # Before the first look: the pairs so far and their mean (no interval yet), as the summary says.
        pairs = look.n if look else len(c.finite)
        diff = look.diff if look else c.mean_so_far
        shown = st.fmt(diff, dec, True) if diff is not None else "—"
        detectable = st.fmt(look.detectable, dec) if look else "—"
        text += _hardware_flag(c)
        if c.diverged_pairs:  # marked: the comparison holds pairs a diverged cell scored against its side
            text += (f" ({c.diverged_pairs} diverged cell{'s' * (c.diverged_pairs != 1)} counted against "
                     "its side)")
        rows.append([c.variant, str(c.seeds), str(pairs), shown, _interval(look, dec), detectable, text])
        records.append({"variant": c.variant, "seeds": c.seeds, "pairs": pairs,
                        "look": look.look if look else None, "state": State.NO_PAIRS if c.lost else
                        (look.state if look else State.OPEN), "diff": diff,
                        "lo": look.lo if look else None, "hi": look.hi if look else None,
                        "detectable": look.detectable if look else None, "verdict": text,
                        "diverged_pairs": c.diverged_pairs, "cross_hardware_pairs": c.cross_hardware,
                        "reopened": None if c.earlier is None else {
                            "look": c.earlier.look, "pairs": c.earlier.n, "state": c.earlier.state,
                            "diff": c.earlier.diff, "lo": c.earlier.lo, "hi": c.earlier.hi}})
        reopen_note |= c.earlier is not None
    data = {"method": METHOD, "looks": list(design.looks), "alpha": design.alpha,
                          "nominal_level": design.nominal, "min_effect": design.min_effect, "metric": metric,
                          "comparisons": records}
    width = (f"±{design.min_effect:g} {unit}; only from {EQUIVALENCE_PAIRS} pairs on"
             if design.min_effect is not None else "no min_effect given")
    return Part("seeds", [Section("Adaptive seeds", [
        Para(f"The study chose its seeds by the evidence on `{metric}`: {design.describe()}. Each variant "
             "got seeds round by round until its repeated confidence interval (simultaneous over all "
             f"{len(design.looks)} looks, so valid whenever the study stopped) excluded zero or lay within "
             f"the smallest effect worth knowing ({width}), or the maximum was reached. The interval at "
             f"look k is mean ± t(1 − p*/2, n−1)·s/√n with the per-look level p* = {design.nominal:.4f} "
             f"calibrated so that the overall two-sided level is {design.alpha:g} under optional stopping. "
             f"Smallest detectable effect: the true effect this test finds with {POWER:.0%} power given the "
             "spread of the seeds it got, (t(1 − p*/2, n−1) + t(0.8, n−1))·s/√n. The fixed-sample tests "
             "of the Effects section do not account for the stopping rule (their p-values are too small "
             "for a study that stopped where the evidence looked strongest): for this study read the "
             "verdicts below." + (_REOPENED if reopen_note else "")),
        Table(["variant", "seeds", "pairs", "Δ vs baseline", "repeated CI", "smallest detectable", "verdict"],
              rows, "lrrrrrl", f"Sequential verdicts on {metric}, each against the baseline"),
    ])], data={"sequential": data})
