"""A study's arms as its report reads them (``ablation.tune`` and ``ablation.confirm``): what the
parent run recorded about them, every comparison judged at the baseline's settings and at each variant's
own best by the one design the study decided with, which verdicts tuning changed, and whether each
decided verdict transfers to the larger setting.

The design is the parent's ``ablate.arm_design``: the study's group-sequential design with a seed range,
else one look at its fixed seeds (the same paired t-test, Bonferroni over the study's comparisons), as
ablate/study/arms.py decided which comparisons to rerun at scale. Each arm is walked with
ablate/report/compute/comparisons.py on its own runs (``Study.arms``) and read by
``ablate.stats.verdict.read``, so no own-best or confirmation run enters the verdicts at the baseline's
settings. The sections (ablate/report/sections/): own_best.py, tuning_budget.py, larger_scale.py,
compute_hours.py, and the summary's opening lines (summary.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ablate.report.compute import statistics as st
from ablate.report.compute.comparisons import claim_questions, comparisons, decided_metric, family_of
from ablate.report.compute.loaded_study import Run, Study, quality_meta
from ablate.report.compute.scale_outcomes import Rerun, Transfer, check_transfers
from ablate.stats.sequential import Design
from ablate.stats.verdict import Answer, Direction, Look, Verdict, none_margin

# How far each variant's best settings moved, and how a setting is shown: the own-best section reads them here
from ablate.study.arm_settings import Change, changes  # noqa: F401
from ablate.study.derived_specs import show  # noqa: F401

# the records' types, for the sections that render them (a section reads the computing half only)
from ablate.study.recorded_study import ConfirmRecord as ConfirmRecord
from ablate.study.recorded_study import TuneRecord as TuneRecord
from ablate.tracking import record


def arm_design(study: Study) -> Design | None:
    """The design the arms are judged by (None: the study declares neither tune: nor confirm:)."""
    recorded = study.record.arm_design
    # one family over both arms (family_of): every verdict the report states shares the study's alpha
    return None if recorded is None else recorded.design(family_of(study))


def deciding_arm(study: Study) -> str:
    """The arm whose decided comparisons the confirm arm reruns."""
    recorded = study.record.arm_design
    return record.BASELINE_ARM if recorded is None else recorded.decided_by


def tuning(study: Study) -> TuneRecord | None:
    """The tuning section as the study recorded it: space, the baseline's values, trials, fidelity, ..."""
    return study.record.tune


def larger_setting(study: Study) -> ConfirmRecord | None:
    """The confirm section as the study recorded it: the larger setting (as written) and its seeds."""
    return study.record.confirm


@dataclass(frozen=True)
class Judged:
    """One comparison in one arm and its verdict (``ablate.stats.verdict.read``)."""

    variant: str
    judgement: Verdict

    @property
    def look(self) -> Look | None:
        """The deciding (or latest) look."""
        return self.judgement.look

    @property
    def answer(self) -> Answer:
        """better | worse | no effect | identical | short of its margin | open"""
        return self.judgement.answer

    @property
    def settled(self) -> bool:
        """Answered, or undecided at the last planned look: no later round can change it."""
        return self.judgement.settled

    @property
    def verdict(self) -> str:
        """The answer, with an open comparison told apart by whether its rounds continue."""
        if self.answer != Answer.OPEN:
            return self.answer
        return "undecided at the maximum of seeds" if self.settled else "open (its rounds continue)"

    @property
    def decided(self) -> bool:
        """Decided as the study decides which comparisons to confirm (ablate/study/arms.py)."""
        return self.judgement.decided

    def shown(self, dec: int, unit: str) -> str:
        """'-1.000 exact match [-1.021, -0.979]: worse' (the interval when there is one)."""
        lk = self.look
        if lk is None or math.isnan(lk.diff):
            return f"— ({self.answer})"
        ci = "" if math.isnan(lk.lo) else f" {st.fmt_interval(lk.lo, lk.hi, dec)}"
        return f"{st.fmt(lk.diff, dec, True)} {unit}{ci}, n={lk.n}: {self.verdict}"


def judged(study: Study, design: Design) -> dict[str, Judged]:
    """Every comparison of a study (or of one arm's study), by ``design``."""
    if study.baseline is None:
        return {}
    metric = decided_metric(study)
    return {c.variant: Judged(c.variant, c.verdict) for c in comparisons(study, design, metric)}


@dataclass(frozen=True)
class Twice:
    """One comparison at the baseline's settings and with each variant at its own best."""

    variant: str
    base: Judged
    own: Judged | None  # None: no own-best run of it (or of the baseline) yet

    @property
    def changed(self) -> bool:
        """Tuning changed the verdict: both arms settled, differently (an effect in one arm and undecided
        at the maximum of seeds in the other is a change too)."""
        return (self.own is not None and self.base.settled and self.own.settled
                and self.base.verdict != self.own.verdict)

    @property
    def identical(self) -> bool:
        """Both arms read the same cells (neither the variant's search nor the baseline's moved): one
        comparison, which tuning cannot change however open it still is."""
        def key(j: Judged) -> tuple[Any, ...] | None:
            return None if j.look is None else (j.look.n, j.look.look, j.look.diff, j.look.lo, j.look.hi,
                                                j.look.state)

        return self.own is not None and key(self.base) is not None and key(self.base) == key(self.own)

    @property
    def pending(self) -> bool:
        """The own-best arm has not settled this comparison yet: tuning may still change its verdict."""
        return self.own is None or (not self.own.settled and not self.identical)


def pending_text(rows: list[Twice]) -> str:
    """'Not settled yet at its own best, the study's rounds continue: `tied` (worse at the baseline's
    settings; open at its own best after 6 seeds).'"""
    def one(t: Twice) -> str:
        own = f"{t.own.look.n} seeds" if t.own is not None and t.own.look is not None else "no seeds"
        base = f"{t.base.verdict} at the baseline's settings"
        return f"`{t.variant}` ({base}; open at its own best after {own})"

    return "Not settled yet at its own best, the study's rounds continue: " + "; ".join(map(one, rows)) + "."


def twice(study: Study) -> list[Twice]:
    """Every comparison in both arms (empty without an own-best arm)."""
    design, own = arm_design(study), study.arms.get(record.OWN_BEST_ARM)
    if design is None or own is None:
        return []
    at_own = judged(own, design)
    return [Twice(v, j, at_own.get(v)) for v, j in judged(study, design).items()]


def deciding(study: Study) -> Study | None:
    return study if deciding_arm(study) == record.BASELINE_ARM else study.arms.get(record.OWN_BEST_ARM)


def deciding_rounds_over(study: Study) -> bool:
    """Every variant's comparison in the deciding arm is settled (answered, or undecided at its last look):
    no later round can give the confirm arm another verdict to check."""
    design, decided_by = arm_design(study), deciding(study)
    if design is None or decided_by is None:
        return False
    found = judged(decided_by, design)
    variants = {v for v in study.variants if v != study.baseline}
    return variants <= set(found) and all(found[v].settled for v in variants)


def transfers(study: Study) -> list[Transfer] | None:
    """Each verdict the deciding arm reached, checked at the larger setting (paired by seed; one family,
    Bonferroni over the verdicts); None when the study declares no confirm: or has no deciding arm yet."""
    design, decided_by = arm_design(study), deciding(study)
    if larger_setting(study) is None or design is None or decided_by is None:
        return None
    metric = decided_metric(study)
    _, _, higher = quality_meta(metric)
    asked = claim_questions(study)
    at_scale = study.arms.get(record.CONFIRM_ARM)

    def values(variant: str) -> dict[int, float]:
        runs: list[Run] = at_scale.finished(variant) if at_scale is not None else []
        return {r.seed: r.metrics[metric] for r in runs if metric in r.metrics}

    checked = []
    for j in judged(decided_by, design).values():
        small = j.judgement.direction
        if small is None:  # not decided: nothing to confirm
            continue
        margin = none_margin(*asked.get(j.variant, (None, None)), design.min_effect)
        checked.append(Rerun(j.variant, small, values("baseline"), values(j.variant),
                             margin if small == Direction.NONE else None))
    return check_transfers(checked, higher, design.alpha)


def every_run(study: Study) -> list[Run]:
    """Every run the study trained, each once: its cells at every rung of a ladder and in every arm, and
    its searches' trials."""
    seen: dict[str, Run] = {r.run_id: r for r in study.runs}
    for rung in study.rungs.values():
        seen.update({r.run_id: r for r in rung.runs if r.run_id not in seen})
    for arm in study.arms.values():
        seen.update({r.run_id: r for r in arm.runs if r.run_id not in seen})
    for search in study.searches:
        seen.update({r.run_id: r for r in search.trials})
    return list(seen.values())
