"""The report's wording of the statistics floor's effects: the method note, one sentence per effect, fixed
number formatting, and the Pareto front of cost against quality.

The numbers come from ``ablate.stats``: seed means and effects with their t-tests, bootstrap intervals and
permutation tests (``ablate.stats.fixed_sample``, whose docstring states the rules this note repeats),
Holm's and Bonferroni's corrections (``ablate.stats.multiplicity``), and which verdict an effect gives
(``ablate.stats.verdict.fixed_reading``). They are re-exported here because the report's sections read its
computing half only (tests/test_layout.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

# the statistics floor's effects and corrections, for the report's sections (the ``X as X`` form)
from ablate.stats.fixed_sample import CONFIDENCE as CONFIDENCE
from ablate.stats.fixed_sample import RESAMPLES as RESAMPLES
from ablate.stats.fixed_sample import TINY as TINY
from ablate.stats.fixed_sample import Effect as Effect
from ablate.stats.fixed_sample import Summary as Summary
from ablate.stats.fixed_sample import compare as compare
from ablate.stats.fixed_sample import compare_differences as compare_differences
from ablate.stats.fixed_sample import mean_ci as mean_ci
from ablate.stats.fixed_sample import needed_for_significance as needed_for_significance
from ablate.stats.multiplicity import holm as holm
from ablate.stats.verdict import ALPHA, Fixed, fixed_reading

METHOD_NOTE = (
    "Each cell is the mean over seeds of finished runs with a 95% Student-t interval "
    "(mean ± t(0.975, n−1)·s/√n); diverged, failed and pruned runs are counted, not averaged. "
    "An effect is mean(variant) − mean(baseline). When one side's seeds are all among the other's (an "
    "adaptive study runs the baseline on every seed any comparison needed) the comparison is paired by "
    "seed on the seeds both ran (same data order, same initial weights in shared parameters): paired "
    "t-test on the per-seed differences, n the pairs. Otherwise Welch's t-test with the "
    "Welch–Satterthwaite interval. The t-tests need at "
    f"least {TINY + 1} observations (pairs, or runs in the smaller group). With 2 or 3 (or when every "
    "difference is the same, which leaves t undefined) the interval is a bootstrap percentile interval "
    f"({RESAMPLES:,} resamples, fixed seed; paired: per-seed differences resampled) and the p-value an "
    "exact permutation test (sign flips of the per-seed differences, or relabelings of independent "
    "groups). Such a test cannot reach p < 0.05 with 2–3 seeds a side (2 paired seeds: p ≥ 0.5; "
    "3: p ≥ 0.25), so those verdicts say “not testable” and why. With 1 run: the difference "
    "alone, no interval and no p-value (too few seeds). A full-factorial main effect pairs cells that "
    "differ only in that axis (same other-axis values, same seed); an interaction is the difference of "
    "two such differences; both are tested on their matched sets with the same rules. "
    "Significant means p < 0.05 unadjusted; the Holm-adjusted p over all comparisons is listed too."
)


def answer(effect: Effect, higher_is_better: bool, alpha: float = ALPHA) -> str:
    """The verdict `effect_sentence` words, as one short phrase for a table cell (better, worse, no
    detectable effect, not testable, identical, too few seeds, no finished runs)."""
    return str(fixed_reading(effect.diff, effect.p, effect.p_min, effect.identical, higher_is_better, alpha))


def effect_sentence(label: str, effect: Effect, unit: str, higher_is_better: bool, decimals: int = 2,
                    alpha: float = ALPHA, noun: str = "seed", reference: str | None = "the baseline") -> str:
    """The plain-language line of the verdict ``ablate.stats.verdict.fixed_reading`` decides, e.g.
    'post_norm: -1.20 BLEU [-1.90, -0.50], significant at 5% (...)'.

    ``noun`` names an observation ('seed', or 'pair' for matched factorial cells); ``reference`` is what a
    significant effect is better or worse than (None: no direction, e.g. an interaction).
    """
    said = fixed_reading(effect.diff, effect.p, effect.p_min, effect.identical,
                         higher_is_better if reference else None, alpha)
    if said == Fixed.NO_RUNS:
        return f"{label}: no finished runs to compare"
    d = fmt(effect.diff, decimals, signed=True)
    if said == Fixed.IDENTICAL:
        same = f"identical to {reference}" if reference else "exactly 0"
        every = f"both {noun}s" if effect.n_min == 2 else f"all {effect.n_min} {noun}s"
        return f"{label}: {same} in {every}: no effect at all on this metric"
    if said == Fixed.TOO_FEW:
        return (f"{label}: {d} {unit}; too few seeds to test (one run on a side), "
                f"repeat with >= {TINY + 1} seeds to conclude")
    ci = fmt_interval(effect.lo, effect.hi, decimals)
    boot = effect.interval == "bootstrap"
    shown = f"{d} {unit} {ci}" + (" (bootstrap interval)" if boot else "")
    n = effect.n_min
    many = f"{n} {noun}{'s' if n != 1 else ''}"
    if said in (Fixed.BETTER, Fixed.WORSE, Fixed.SIGNIFICANT):
        direction = f": {said.value} than {reference}" if reference else ""
        return f"{label}: {shown}, significant at 5% ({effect.test}, p={fmt_p(effect.p)}){direction}"
    if said == Fixed.NOT_TESTABLE:
        need = needed_for_significance(effect, alpha)
        # Not "no detectable effect": a -30 BLEU gap over 3 seeds would read as "no effect" to a skimmer.
        return (f"{label}: {d} {unit}, not testable with {many} ({'bootstrap interval ' * boot}{ci}, "
                f"{effect.test} p={fmt_p(effect.p)}; p < 0.05 is out of reach with {many}, the smallest "
                f"possible p is {fmt_p(effect.p_min)}: use >= {need} {noun}s)")
    return f"{label}: {shown}, no detectable effect with {many} ({effect.test}, p={fmt_p(effect.p)})"



UNTESTABLE_CAPTION = ("; grey, hollow and dotted: not testable, its exact test cannot reach p < 0.05 at "
                      "these seeds, so its interval decides nothing (the smallest p it can give is written "
                      "on it)")


def untestable_note(effect: Effect) -> str | None:
    """'not testable: p ≥ 0.25 with 3 seeds' where the verdict is "not testable" (fixed_reading: its test
    cannot reach p < ALPHA at these sample sizes), else None: the figures say it as the text does."""
    if fixed_reading(effect.diff, effect.p, effect.p_min, effect.identical, None) != Fixed.NOT_TESTABLE:
        return None
    return f"not testable: p ≥ {effect.p_min:.2g} with {effect.n_min} seeds"


def pareto_front(cost: Sequence[float], quality: Sequence[float], higher_quality_is_better: bool = True
                 ) -> list[bool]:
    """True for points no other point beats (cost no higher and quality no worse, one strictly)."""
    pts = [(float(c), float(q) if higher_quality_is_better else -float(q)) for c, q in zip(cost, quality,
                                                                                           strict=True)]
    out = []
    for i, (c, q) in enumerate(pts):
        if not (math.isfinite(c) and math.isfinite(q)):
            out.append(False)
            continue
        dominated = any(j != i and math.isfinite(c2) and math.isfinite(q2) and c2 <= c and q2 >= q
                        and (c2 < c or q2 > q) for j, (c2, q2) in enumerate(pts))
        out.append(not dominated)
    return out


# ---------------------------------------------------------------- fixed formatting (deterministic text)
def fmt(value: float, decimals: int, signed: bool = False) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    text = f"{value:{'+' if signed else ''},.{decimals}f}"
    if text.lstrip("+-").strip("0.,") == "":  # '-0.00' and '+0.00' read as plain zero
        text = f"{0.0:.{decimals}f}"
    return text


def fmt_interval(lo: float, hi: float, decimals: int) -> str:
    """'[-4.09, -1.05]', both ends signed; '—' where the interval is undefined (NaN: too few seeds)."""
    if math.isnan(lo) or math.isnan(hi):
        return "—"
    return f"[{fmt(lo, decimals, signed=True)}, {fmt(hi, decimals, signed=True)}]"


def fmt_summary(s: Summary, decimals: int) -> str:
    """'12.34 ± 0.56' (n >= 2), '12.34' (n = 1), '—' (no runs)."""
    if s.n == 0:
        return "—"
    if s.n == 1 or math.isnan(s.half_width):
        return fmt(s.mean, decimals)
    return f"{fmt(s.mean, decimals)} ± {fmt(s.half_width, decimals)}"


def fmt_p(p: float) -> str:
    if math.isnan(p):
        return "—"
    return "<0.001" if p < 0.001 else f"{p:.3f}"
