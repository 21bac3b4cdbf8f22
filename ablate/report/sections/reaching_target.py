"""Steps to a target loss with the runs that never reach it: each arm's target and where it came from (the
tuned baseline's own final loss where every variant ran at its own best), each side's "did not reach"
count, and the censoring-aware paired comparison. Renders ``ablate.report.compute.target_reach``; decides
nothing."""

from __future__ import annotations

from ablate.report.compute.target_reach import ArmTarget, targets
from ablate.report.render import Block, Para, Section, Table
from ablate.report.section_api import Inputs, Part, section
from ablate.tracking import record

ARM_NAMES = {record.BASELINE_ARM: "at the baseline's settings", record.OWN_BEST_ARM: "each at its own best"}


def _reached(t: ArmTarget, variant: str) -> str:
    runs = t.reach.get(variant, {})
    missed = t.not_reached(variant)
    return f"{len(runs) - missed} of {len(runs)}" + (f" ({missed} did not reach)" if missed else "")


def table(t: ArmTarget, baseline: str) -> Table:
    rows = []
    for v, c in t.comparisons.items():
        rows.append([v, _reached(t, v), _reached(t, baseline), f"{c.statistic:+d} of {len(c.scores)}",
                     f"{c.p:.3g}", c.answer(t.level)])
    return Table(["variant", "variant reached", "baseline reached", "score", "p", "answer"], rows,
                 caption=f"Steps to val/loss {t.target:.4g} {ARM_NAMES.get(t.arm, t.arm)}: the target is "
                         f"{t.source}. A run that never reached it is censored at its last evaluation, not "
                         "counted as reaching there. score: over the pairs of seeds, +1 where the variant "
                         "reached the target first (the baseline later or never), -1 where the baseline did, "
                         "0 where no order is known (Gehan 1965); p: two-sided sign-flip permutation, "
                         f"answered at {t.level:.3g} (the study's alpha shared by its family).")


def _alone(t: ArmTarget, baseline: str) -> Para:
    """An arm with no comparison yet (no variant has a run paired with the baseline's): its target and the
    baseline's runs."""
    runs, missed = len(t.reach.get(baseline, {})), t.not_reached(baseline)
    did_not = f" ({missed} did not reach)" if missed else ""
    return Para(f"Steps to val/loss {t.target:.4g} {ARM_NAMES.get(t.arm, t.arm)}: the target is {t.source}; "
                f"the baseline reached it in {runs - missed} of {runs} runs{did_not}; no variant has runs "
                "paired with it yet.")


@section(105)  # after each variant at its own best
def part(inp: Inputs) -> Part | None:
    found = targets(inp.study)
    baseline = inp.study.baseline
    if not found or baseline is None:
        return None
    blocks: list[Block] = [table(t, baseline) if t.comparisons else _alone(t, baseline) for t in found]
    if any(t.comparisons and any(t.not_reached(v) for v in t.reach) for t in found):
        blocks.append(Para("Some runs did not reach their target: the group-sequential verdicts in the other "
                           "sections count such a run at its budget (the steps it logged), which shortens "
                           "the slower side; the censoring-aware answer above is the one that does not."))
    data = {t.arm: t.as_dict() for t in found}
    return Part("steps_to_target", sections=[Section("Steps to the target loss", blocks)],
                data={"steps_to_target": data})
