"""What a study's design could settle, computed for the report's opening table and its Setup line
(ablate/report/sections/mde.py renders them): the power plan the study recorded before its first cell
(ablate/study/sizing.py) read back from its parent run, each comparison's pairs on the deciding metric
with what a design at their spread detects and the seeds a new study would need, and the plan's forecast
of settled comparisons beside the count found.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ablate.report.compute.comparisons import claim_questions, decided_metric, design_of, paired_differences
from ablate.report.compute.loaded_study import Study, quality_meta
from ablate.spec import metricnames
from ablate.stats.power import MOST_SEEDS, detectable
from ablate.stats.replication_size import SeedsAcross, sized_at_found
from ablate.stats.sequential import Design, Question, walk
from ablate.stats.transfer import GapRung, fit_line
from ablate.study.pilot import paired_sd


@dataclass(frozen=True)
class Found:
    """One comparison as the study's own seeds read it."""

    label: str
    question: Question
    margin: float | None
    n: int
    diff: float
    sd: float
    detectable: float  # at the study's design and this sd (NaN below two pairs)
    needed: int | None  # seeds a new study would need at the effect found (None: > 100, or nothing to size)
    settled: bool = False  # the study's own looks answered the comparison's question
    # needed is sized at the effect these seeds found and ``across`` at each end of its interval too
    # (stats/replication_size.py sized_at_found, a paired t test), never at an assumed one; without a claim
    # either way the looks settle it (the interval excludes 0, or lies within min_effect)
    # whether a new study's seeds can be sized: a claim (better, worse, none), or no claim and a min_effect;
    # an identity check or neither: nothing to size
    sizable: bool = False
    at_observed: bool = False
    across: SeedsAcross | None = None  # on a ladder its sd carries the gap's rung variance (across.rung_var)


def found_rows(study: Study, design: Design, metric: str) -> list[Found]:
    """Each comparison's pairs on the deciding metric and what a design at their sd could detect."""
    asked = claim_questions(study)
    rows = []
    for label in study.variants[1:]:
        diffs, _ = paired_differences(study, label, metric)
        d = [x for x in diffs if x is not None and math.isfinite(x)]
        question, margin = asked.get(label, (None, None))
        looks = walk(diffs, design, question, margin, quality_meta(metric)[2])
        settled = bool(looks) and looks[-1].decided
        if len(d) < 2:
            first = d[0] if d else math.nan
            rows.append(Found(label, question, margin, len(d), first, math.nan, math.nan, None))
            continue
        mean, sd = sum(d) / len(d), paired_sd(d)
        sizable = question in ("better", "worse", "none") or (question is None
                                                              and design.min_effect is not None)
        across = None
        if sizable and sd > 0 and not settled:
            last = looks[-1] if looks else None
            interval = (last.lo, last.hi) if last is not None and math.isfinite(last.lo) else None
            across = sized_at_found(d, design.level, question, margin, design.min_effect,
                                    quality_meta(metric)[2], rung_variance(study, label, metric), interval,
                                    MOST_SEEDS)
        rows.append(Found(label, question, margin, len(d), mean, sd,
                          detectable(design, sd, question, margin) if sd > 0 else 0.0,
                          None if across is None else across.observed, settled, sizable, across is not None,
                          across))
    return rows


def rung_variance(study: Study, label: str, metric: str) -> float:
    """On a ladder, the comparison's rung-level variance: the scatter of its rungs' gaps about their line in
    log compute that the seeds do not explain (ablate/stats/transfer.py ``fit_line``'s tau^2); 0 off a
    ladder or where it cannot be estimated (fewer than 3 rungs with pairs)."""
    gaps = []
    for name, rung in study.rungs.items():
        if label not in rung.variants or rung.baseline is None:
            continue
        diffs = [x for x in paired_differences(rung, label, metric)[0] if x is not None and math.isfinite(x)]
        flops = [r.metrics[metricnames.TRAIN_FLOPS] for r in rung.finished(rung.baseline)
                 if metricnames.TRAIN_FLOPS in r.metrics]
        if flops:
            gaps.append(GapRung(name, sum(flops) / len(flops), tuple(diffs)))
    line = fit_line(gaps) if len(gaps) >= 3 else None
    return 0.0 if line is None else float(line.tau2)


@dataclass(frozen=True)
class Plans:
    """A study's power plans: the one it recorded before its first cell (None for a study from before
    pre-registration) and the one its own seeds give, for information only."""

    design: Design
    metric: str
    registered: dict[str, Any] | None
    recorded: dict[str, Any] | None
    found: list[Found]


def plans_of(study: Study) -> Plans | None:
    """None where there is nothing to plan: not an ablation, no baseline, or fixed seeds (their verdicts are
    fixed-sample tests, with no looks to plan). Read through ``Inputs.derived``: once per report."""
    if study.kind != "ablation" or study.baseline is None:
        return None
    design = design_of(study)
    if design is None:
        return None
    metric = decided_metric(study)
    return Plans(design, metric, study.record.preregistered, study.record.power_plan,
                 found_rows(study, design, metric))


@dataclass(frozen=True)
class Forecast:
    """How many comparisons the plan expected to settle, against how many the study settled.

    Each comparison settles with the probability its plan gave it (its power at the effect it was sized
    at), independently of the others, so the count settled is a Poisson-binomial variable: its mean is
    the sum of the powers, its central 90% interval runs from ``fewest`` (the 5% quantile) to ``most`` (the
    95%), and the line that compares it with the count found reports the chance of as few settled as found
    (``as_few``) and of as many (``as_many``): either below 5% says the plan was wrong, one way or the
    other. Both are printed, so a reader sees how far the count found could have failed the plan: with
    powers near 1, "as many" is near 1 whatever happens, and only "as few" can fail.
    """

    powers: dict[str, float]
    settled: int

    @property
    def expected(self) -> float:
        return sum(self.powers.values())

    @property
    def distribution(self) -> list[float]:
        """dist[k]: the probability that exactly k comparisons settle."""
        dist = [1.0]
        for p in self.powers.values():
            dist = [(dist[k] if k < len(dist) else 0.0) * (1 - p) + (dist[k - 1] * p if k else 0.0)
                    for k in range(len(dist) + 1)]
        return dist

    def _quantile(self, q: float) -> int:
        below = 0.0
        for k, prob in enumerate(self.distribution):
            below += prob
            if below > q:
                return k
        return len(self.powers)

    @property
    def fewest(self) -> int:
        return self._quantile(0.05)

    @property
    def most(self) -> int:
        return self._quantile(0.95 - 1e-12)

    @property
    def as_few(self) -> float:
        """The chance of settling no more than the study did, if the plan was right."""
        return float(sum(self.distribution[: self.settled + 1]))

    @property
    def as_many(self) -> float:
        """The chance of settling no fewer than the study did, if the plan was right."""
        return float(sum(self.distribution[self.settled:]))

    def as_dict(self) -> dict[str, object]:
        return {"powers": self.powers, "expected": self.expected, "fewest_by_chance": self.fewest,
                "most_by_chance": self.most, "settled": self.settled, "as_few": self.as_few,
                "as_many": self.as_many}


def settled_forecast(plan: dict[str, Any] | None, found: list[Found]) -> Forecast | None:
    """The plan's forecast of settled comparisons beside the count found; None without a sizing plan
    (no plan, or one printed from the study's own seeds for information)."""
    if not plan or plan.get("informational"):
        return None
    powers = {str(c["label"]): float(c["power"]) for c in plan.get("comparisons", [])
              if isinstance(c.get("power"), int | float) and math.isfinite(c["power"])}
    mine = [f for f in found if f.label in powers]
    if not mine:
        return None
    return Forecast({f.label: powers[f.label] for f in mine}, sum(f.settled for f in mine))
