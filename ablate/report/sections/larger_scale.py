"""The report's "At a larger scale" section (``ablation.confirm``): each verdict the study decided
(the own-best arm's with ``tune:``, else those at the baseline's settings), rerun at the larger setting on
``confirm.seeds`` and paired by seed, **transfers** (same direction, significant), **reverses** or is **not
settled at that scale** (ablate/report/compute/scale_outcomes.py; one family: Bonferroni over the verdicts
checked).
`holds_at_both` gives the summary the verdicts it leads with.
"""

from __future__ import annotations

import math

from ablate.report.compute import statistics as st
from ablate.report.compute.arm_verdicts import (
    ConfirmRecord,
    deciding_arm,
    deciding_rounds_over,
    larger_setting,
    transfers,
)
from ablate.report.compute.comparisons import decided_metric
from ablate.report.compute.loaded_study import Study, quality_meta
from ablate.report.compute.scale_outcomes import Transfer
from ablate.report.render import Block, Para, Section, Table
from ablate.report.section_api import Inputs, Part, section
from ablate.tracking import record

WORDS = {"better": "better than the baseline", "worse": "worse than the baseline",
         "none": "no effect as large as the margin"}


def line(t: Transfer, dec: int, unit: str) -> str:
    """'residual=post_norm: better than the baseline → reverses at the larger setting: -0.200 [...], n=4'."""
    e = t.effect
    if e.n_min == 0:
        at = "no finished pair at the larger setting yet"
    else:
        ci = "" if math.isnan(e.lo) else f" {st.fmt_interval(e.lo, e.hi, dec)}"
        at = f"{st.fmt(e.diff, dec, True)} {unit}{ci} ({t.confidence:.1%} interval), n={e.n_min}"
    return f"{t.label}: {WORDS[t.small]} → **{t.outcome}** at the larger setting: {at}"


def deciding_words(study: Study) -> str:
    """The arm whose verdicts are checked, in words: 'with each variant at its own best' or 'at the
    baseline's settings'."""
    return "with each variant at its own best" if deciding_arm(study) == record.OWN_BEST_ARM else \
        "at the baseline's settings"


def nothing_to_check(inp: Inputs) -> str:
    """Why no verdict is checked at the larger setting: the study decided none (its rounds are over), or
    none yet (they continue)."""
    study = inp.study
    arm = deciding_words(study)
    if deciding_rounds_over(study):
        return (f"the study decided no comparison {arm} (each is undecided at its maximum of seeds), so none "
                "was rerun at the larger setting: there is no verdict to check there")
    return (f"no comparison is decided {arm} yet; each one the study decides is rerun at the larger setting "
            "as its rounds continue")


def holds_at_both(inp: Inputs) -> tuple[list[str], list[str]] | None:
    """(lines of the verdicts that transfer, lines of those that do not), None without confirm:."""
    found = inp.derived(transfers)
    if found is None:
        return None
    unit, dec, _ = quality_meta(decided_metric(inp.study))
    return ([line(t, dec, unit) for t in found if t.transferred],
            [line(t, dec, unit) for t in found if not t.transferred])


@section(120)
def part(inp: Inputs) -> Part | None:
    """``data['scale']``: the larger setting, its seeds, each verdict's outcome and effect there."""
    study = inp.study
    found, setting = inp.derived(transfers), larger_setting(study)
    if found is None or setting is None:
        return None
    metric = decided_metric(study)
    unit, dec, _ = quality_meta(metric)
    arm = deciding_words(study)
    seeds = ", ".join(map(str, setting.seeds))
    if not found:
        why = nothing_to_check(inp)
        blocks: list[Block] = [Para(f"The larger setting is `{setting.setting}` on seeds {seeds}: "
                                    f"{why}.")]
        return Part("at_scale", [Section("At a larger scale", blocks)], data=_data(setting, metric, found))
    blocks = [Para(
        f"Each comparison the study decided {arm} was rerun at `{setting.setting}` on seeds {seeds}, each "
        "variant beside the baseline of the same seed and with the settings its verdict was measured at. A "
        "verdict **transfers** when the larger scale's paired interval points the same way and its test is "
        "significant (an effect), or lies within the margin (no effect); it **reverses** when it is "
        "significant the other way (or wholly beyond the margin); otherwise it is **not settled** at that "
        f"scale. The {len(found)} verdicts are one family: each interval at 1 − α/{max(1, len(found))} "
        "(Bonferroni). With 3 seeds or fewer the exact permutation test cannot reach significance.")]
    rows = [[t.label, WORDS[t.small], t.outcome,
             "—" if t.effect.n_min == 0 else st.fmt(t.effect.diff, dec, True),
             st.fmt_interval(t.effect.lo, t.effect.hi, dec), str(t.effect.n_min), st.fmt_p(t.effect.p)]
            for t in found]
    header = ["variant", "verdict", "at the larger setting", f"Δ {unit}", "interval", "pairs", "p"]
    caption = f"Each decided verdict at the larger setting, on `{metric}`"
    blocks.append(Table(header, rows, "lllrrrr", caption))
    return Part("at_scale", [Section("At a larger scale", blocks)], data=_data(setting, metric, found))


def _data(setting: ConfirmRecord, metric: str, found: list[Transfer]) -> dict[str, object]:
    return {"scale": {"setting": setting.setting, "seeds": list(setting.seeds), "metric": metric,
                      "verdicts": [{"variant": t.label, "small": t.small, "outcome": t.outcome,
                                    "diff": t.effect.diff, "lo": t.effect.lo, "hi": t.effect.hi,
                                    "p": t.effect.p, "pairs": t.effect.n_min, "confidence": t.confidence}
                                   for t in found]}}
