"""Each comparison of a study with adaptive seeds, walked through its planned looks with the study's own
code: the design (the parent run's ``ablate.sequential`` tag), the metric it decided by (``ablate.metric``),
each claim's question (``ablate.expect``), the per-seed paired differences, and the verdict
``ablate.stats.verdict.read`` gives them, so that the report and the study cannot disagree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ablate.report.compute.loaded_study import Study, hardware, quality_meta
from ablate.stats.pairing import Cell
from ablate.stats.pairing import paired_differences as verdict_pairs

# METHOD, POWER, Design, Look and the vocabulary's words (Answer, Reading, State, Tuning) are also the
# statistics floor's as the sections read it:
# a section imports the report's computing half only (tests/test_layout.py)
from ablate.stats.sequential import METHOD, POWER, Design, walk  # noqa: F401
from ablate.stats.verdict import (  # noqa: F401
    EQUIVALENCE_PAIRS,
    Answer,
    Look,
    Question,
    Reading,
    Verdict,
    one_family,
    read,
)
from ablate.stats.vocabulary import State, Tuning  # noqa: F401
from ablate.tracking import record


def design_of(study: Study) -> Design | None:
    """The study's sequential design from its parent's tag, its family every verdict the report states
    (:func:`family_of`): a study recorded before that rule is judged by it too."""
    recorded = study.record.sequential
    return None if recorded is None else recorded.design(family_of(study))


def family_of(study: Study) -> int:
    """Every comparison the report gives a verdict on, in one family (``ablate.stats.verdict.one_family``):
    the comparisons at the baseline's settings, and with ``ablation.tune`` each variant at its own best
    unless both of its arms read the same cells (the variant's and the baseline's runs are the same); on a
    ladder, every comparison at every rung."""
    labels = [v for v in study.variants if v != study.baseline]
    own = study.arms.get(record.OWN_BEST_ARM)
    if study.rungs:  # a ladder: every comparison at every rung
        return one_family(len(labels), rungs=len(study.rungs))
    if own is None or not own.runs or study.baseline is None:
        return one_family(len(labels))

    def ids(s: Study, label: str) -> set[str]:
        return {r.run_id for r in s.of(label)}

    same_base = ids(own, study.baseline) == ids(study, study.baseline)
    distinct = sum(not (same_base and ids(own, v) == ids(study, v)) for v in labels)
    return one_family(len(labels), distinct)


def claim_questions(study: Study) -> dict[str, tuple[Question, float | None]]:
    """{variant: (its claim's question, the claim's own margin)} from the study's record (its expect:)."""
    return {c.variant: (c.effect, c.margin) for c in study.record.expect}


def decided_metric(study: Study) -> str:
    """The metric the study added seeds by (its record's, read as runs name it)."""
    return study.record.decided_metric or study.primary


def paired_differences(study: Study, variant: str, metric: str) -> tuple[list[float | None], bool]:
    """Per-seed variant - baseline over the variant's seeds in order, a diverged cell counted against its
    side (``ablate.stats.pairing.paired_differences``; None where a run failed or has no baseline run);
    and whether no seed has a pair."""
    out, _ = pairs_with_divergence(study, variant, metric)
    return out, bool(out) and all(d is None for d in out)


def cross_hardware(study: Study, variant: str) -> int:
    """Seeds whose variant and baseline cells ran on different hardware (CPU or GPU as the runs' tags
    name them): the pair measures the machines as well as the variant where speed or numerics differ."""
    assert study.baseline is not None
    base = {r.seed: hardware(r) for r in study.of(study.baseline)}
    return sum(1 for r in study.of(variant) if r.seed in base and base[r.seed] != hardware(r))


def pairs_with_divergence(study: Study, variant: str, metric: str) -> tuple[list[float | None], int]:
    """The paired differences and how many pairs hold a diverged cell counted against its side."""
    assert study.baseline is not None
    base = {r.seed: r for r in study.of(study.baseline)}
    pairs: list[tuple[Cell, Cell]] = []
    for r in sorted(study.of(variant), key=lambda r: r.seed):
        b = base.get(r.seed)
        pairs.append((("missing", None) if b is None else (b.status, b.metrics.get(metric)),
                      (r.status, r.metrics.get(metric))))
    return verdict_pairs(pairs, metric, quality_meta(metric)[2])


@dataclass(frozen=True)
class Comparison:
    """One variant against the baseline under the study's sequential design, and its verdict."""

    variant: str
    seeds: int  # the variant's runs, finished or not
    verdict: Verdict  # what its looks say (``ablate.stats.verdict.read``)
    finite: tuple[float, ...]  # the paired differences so far (for the mean before the first look)
    diverged_pairs: int = 0  # pairs holding a diverged cell, counted against its side
    cross_hardware: int = 0  # pairs whose two cells ran on different hardware (flagged beside the verdict)

    @property
    def look(self) -> Look | None:
        """The deciding (or latest) look; None before the first planned look."""
        return self.verdict.look

    @property
    def lost(self) -> bool:
        """No seed where both it and the baseline finished."""
        return self.verdict.reading == Reading.NO_PAIRS

    @property
    def earlier(self) -> Look | None:
        """An earlier look that read an effect the later seeds reopened."""
        return self.verdict.earlier

    @property
    def mean_so_far(self) -> float | None:
        """The mean of the paired differences so far (None without one): shown before the first look."""
        return sum(self.finite) / len(self.finite) if self.finite else None


def comparisons(study: Study, design: Design, metric: str) -> list[Comparison]:
    """Every variant's sequential comparison, walked with the study's own code."""
    out = []
    asked = claim_questions(study)
    higher = quality_meta(metric)[2]
    for v in study.variants[1:]:
        diffs, counted = pairs_with_divergence(study, v, metric)
        lost = bool(diffs) and all(d is None for d in diffs)
        finite = tuple(d for d in diffs if d is not None and math.isfinite(d))
        question, margin = asked.get(v, (None, None))
        looks = walk(diffs, design, question, margin, higher)
        out.append(Comparison(v, len(diffs), read(looks, higher, lost, question, margin), finite, counted,
                              cross_hardware(study, v)))
    return out


def look_answer(look: Look, higher: bool) -> str:
    """What one look alone answers (``ablate.stats.verdict.read`` of it): better, worse, no effect,
    identical or open."""
    return read([look], higher).answer

