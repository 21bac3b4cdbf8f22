"""Steps to a target loss as a report reads them: the target each arm is judged at, and the runs that never
reach it.

- **The target.** At the baseline's settings it is the spec's ``eval.target_loss``, the loss each run
  logged its ``val/steps_to_target`` against. Where every variant also runs at its own best settings
  (``ablation.tune``), "reaches the baseline's final loss in fewer steps" is asked of the *tuned*
  baseline. A target fixed before tuning is the untuned baseline's loss, which a tuned baseline may beat
  by a wide margin and which every tuned run then reaches early (Wen et al. 2025: the 1.4-2x speedups
  claimed over baselines tuned once). The arm's cells log their steps at the tuned baseline's own final
  loss in its best search trial, fixed before the arm's seeds ran (ablate/study/tuned_target.py), so the
  arm's rounds and its verdicts here read the same numbers; an arm run before its cells carried that
  target (they logged the spec's) leaves those runs out (:func:`retarget`) where the arm has been rerun,
  and otherwise is read again: the target is then the tuned baseline's mean final ``val/loss`` over its
  evaluation seeds, each run's ``val/steps_to_target`` replaced by its reach of it from its ``val/loss``
  evaluations (ablate/engine/metrics.py ``first_reach``), and the source says that the arm's rounds
  decided at the spec's target.
- **Censoring.** A run that never reaches its arm's target is censored at its last evaluation: "more than
  that many steps", never "that many". Each arm's comparisons are the censoring-aware paired test
  (ablate/stats/censored.py, Gehan's scores, sign-flip permutation), at the level the study's family gives
  each comparison, with each side's "did not reach" count. The group-sequential verdicts in the other
  sections still count a run that did not reach the target at its budget (the value it logged), which
  shortens the slower side; the section says so beside this reading.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from ablate.engine.metrics import first_reach
from ablate.report.compute.comparisons import design_of, family_of
from ablate.report.compute.loaded_study import Run, Study
from ablate.spec import metricnames
from ablate.stats.censored import CensoredComparison, compare
from ablate.stats.censored import Run as Reach
from ablate.stats.multiplicity import bonferroni_level
from ablate.tracking import record
from ablate.tracking.read import metric_history

TARGET_PARAM = "eval.target_loss"  # the spec field a run logs its target under (flattened)
ALPHA = 0.05  # a study recorded without a design: the default level


@dataclass(frozen=True)
class ArmTarget:
    """One arm's target and its comparisons on the steps to reach it."""

    arm: str  # record.BASELINE_ARM or record.OWN_BEST_ARM
    target: float
    source: str  # where the target came from, in words
    level: float  # the two-sided level each comparison is tested at (the family's Bonferroni share)
    reach: dict[str, dict[int, Reach]] = field(default_factory=dict)  # variant -> seed -> its reach
    comparisons: dict[str, CensoredComparison] = field(default_factory=dict)

    def not_reached(self, variant: str) -> int:
        return sum(not r.reached for r in self.reach.get(variant, {}).values())

    def as_dict(self) -> dict[str, object]:
        return {"target": self.target, "source": self.source, "level": self.level,
                "did_not_reach": {v: self.not_reached(v) for v in self.reach},
                "runs": {v: len(runs) for v, runs in self.reach.items()},
                "comparisons": {v: {**c.as_dict(), "answer": c.answer(self.level)}
                                for v, c in self.comparisons.items()}}


def asks_steps(study: Study) -> bool:
    """The study's runs measured steps to a target loss (a spec with eval.target_loss)."""
    return any(metricnames.VAL_STEPS_TO_TARGET in r.metrics for r in study.runs)


def _history(run: Run) -> list[tuple[int, Mapping[str, float]]]:
    return [(step, {metricnames.VAL_LOSS: value}) for step, value in
            metric_history(run.run_id, metricnames.VAL_LOSS)]


def reach_of(run: Run, target: float) -> Reach | None:
    """The run's steps to ``target`` from its val/loss evaluations, censored at its last one; None without
    an evaluation."""
    history = _history(run)
    if not history:
        return None
    steps = first_reach(history, target)
    return Reach(float(history[-1][0]), False) if steps is None else Reach(steps, True)


def recorded_target(arm: Study, spec: float | None) -> float | None:
    """The target the own-best arm's cells logged their steps at where it is the arm's own (not the spec's):
    the latest such run's, if the arm was rerun after its searches moved; None for an arm whose cells
    logged the spec's."""
    own = [r for r in arm.runs if (v := _target_param(r)) is not None and v != spec]
    return _target_param(max(own, key=lambda r: (r.start_time, r.run_id))) if own else None


def _target_param(run: Run) -> float | None:
    value = run.params.get(TARGET_PARAM, "")
    return None if value in ("", "None", "null") else float(value)


def tuned_target(arm: Study, spec: float | None = None) -> tuple[float, str] | None:
    """The tuned baseline's own final val/loss and its source: the target the arm's cells logged their
    steps at (its best search trial's), else, for an arm whose cells logged the spec's ``spec``, the mean
    over its finished seeds in the arm."""
    own = recorded_target(arm, spec)
    if own is not None:
        return own, ("the tuned baseline's own final val/loss in its best search trial, fixed before the "
                     "arm's seeds ran; the arm's cells and its rounds counted their steps to it")
    runs = [r for r in arm.finished(arm.baseline or "") if metricnames.VAL_LOSS in r.metrics]
    if not runs:
        return None
    seeds = ", ".join(str(r.seed) for r in runs)
    mean = sum(r.metrics[metricnames.VAL_LOSS] for r in runs) / len(runs)
    return mean, (f"the tuned baseline's own final val/loss, the mean over its seeds {seeds}, read after "
                  "the arm ran (its cells counted steps to the spec's target, and its rounds decided on "
                  "those)")


def spec_target(study: Study) -> tuple[float, str] | None:
    """The spec's eval.target_loss as the runs logged it."""
    values = {v for r in study.runs if (v := _target_param(r)) is not None}
    if len(values) != 1:
        return None
    return next(iter(values)), "the spec's eval.target_loss, fixed before the study ran"


def _spec_value(study: Study) -> float | None:
    found = spec_target(study)
    return None if found is None else found[0]


def retarget(study: Study) -> Study:
    """``study`` with its own-best arm read at the tuned baseline's own final loss (module doc): the runs
    the arm logged at another target left out where its cells carry their own, else each run's
    val/steps_to_target read again; unchanged without such an arm or a tuned baseline that finished."""
    arm = study.arms.get(record.OWN_BEST_ARM)
    if arm is None or not asks_steps(arm):
        return study
    spec = _spec_value(study)
    own = recorded_target(arm, spec)
    if own is not None:
        return dataclasses.replace(study, arms={**study.arms, record.OWN_BEST_ARM: _at_own(arm, own)})
    found = tuned_target(arm, spec)
    if found is None:
        return study
    target = found[0]

    def read_again(run: Run) -> Run:
        reach = reach_of(run, target) if metricnames.VAL_STEPS_TO_TARGET in run.metrics else None
        if reach is None:
            return run
        # a new Run: a cell two arms share is one object, and the other arm keeps the spec's target
        return dataclasses.replace(run, metrics={**run.metrics, metricnames.VAL_STEPS_TO_TARGET: reach.steps})

    again = dataclasses.replace(arm, runs=[read_again(r) for r in arm.runs])
    return dataclasses.replace(study, arms={**study.arms, record.OWN_BEST_ARM: again})


def _at_own(arm: Study, own: float) -> Study:
    """The arm's runs at its own target; the others (run before the arm carried it) withdrawn, with why."""
    keep = [r for r in arm.runs if _target_param(r) == own]
    gone = [(r, f"counted its steps to val/loss {_target_param(r)}, not to the arm's target {own:g} (the "
                "tuned baseline's own loss, fixed before the arm's seeds ran): run before the arm carried it")
            for r in arm.runs if _target_param(r) != own]
    if not gone:
        return arm
    note = (f"{len(gone)} run(s) of this arm counted their steps to another target than the arm's {own:g} "
            "and are left out")
    return dataclasses.replace(arm, runs=keep, withdrawn=[*arm.withdrawn, *gone], notes=[*arm.notes, note])


def _level(study: Study) -> float:
    design = design_of(study) or study.record.arm_design
    alpha = design.alpha if design is not None else ALPHA
    return bonferroni_level(alpha, family_of(study))


def arm_target(study: Study, arm: str, found: tuple[float, str], level: float) -> ArmTarget:
    """One arm's reach per run and its censoring-aware comparisons, each variant against the baseline."""
    target, source = found
    out = ArmTarget(arm, target, source, level)
    for v in study.variants:
        runs = {r.seed: reach for r in study.finished(v) if (reach := reach_of(r, target)) is not None}
        out.reach[v] = runs
    base = out.reach.get(study.baseline or "", {})
    for v in study.variants[1:]:
        seeds = sorted(set(base) & set(out.reach[v]))
        if seeds:
            out.comparisons[v] = compare([out.reach[v][s] for s in seeds], [base[s] for s in seeds])
    return out


def targets(study: Study) -> list[ArmTarget]:
    """Each arm's target and comparisons (the baseline's settings first); [] for a study that measured no
    steps to a target."""
    if not asks_steps(study) or study.baseline is None or study.rungs:
        return []
    level = _level(study)
    out = []
    first = spec_target(study)
    if first is not None:
        out.append(arm_target(study, record.BASELINE_ARM, first, level))
    arm = study.arms.get(record.OWN_BEST_ARM)
    tuned = None if arm is None else tuned_target(arm, None if first is None else first[0])
    if arm is not None and tuned is not None:
        out.append(arm_target(arm, record.OWN_BEST_ARM, tuned, level))
    return [t for t in out if math.isfinite(t.target)]
