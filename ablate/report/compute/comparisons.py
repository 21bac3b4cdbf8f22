"""Each comparison of a study with adaptive seeds, walked through its planned looks with the study's own
code: the design (the parent run's ``ablate.sequential`` tag), the metric it decided by (``ablate.metric``),
each claim's question (``ablate.expect``), the per-seed paired differences, and the verdict
``ablate.study.verdict.read`` gives them, so that the report and the study cannot disagree.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import ablate.tracking.record as R
from ablate.report.compute.loaded_study import Study, quality_meta
from ablate.study.sequential import Design, walk
from ablate.study.verdict import Look, Question, Reading, Verdict, read


def design_of(study: Study) -> Design | None:
    """The study's sequential design from its parent's tag. The family is the study's comparisons (every
    variant but the baseline): a study recorded before family-wise correction is judged with it too."""
    text = study.parent["tags"].get(R.SEQUENTIAL)
    if not text:
        return None
    d = json.loads(text)
    family = int(d.get("family") or max(1, len(study.variants) - 1))
    return Design(tuple(int(n) for n in d["looks"]), float(d["alpha"]),
                  None if d.get("min_effect") is None else float(d["min_effect"]), family)


def claim_questions(study: Study) -> dict[str, tuple[Question, float | None]]:
    """{variant: (its claim's question, the claim's own margin)} from the parent's ``ablate.expect`` tag."""
    text = study.parent["tags"].get(R.EXPECT)
    claims = json.loads(text) if text else []
    return {str(c["variant"]): (c.get("effect"), c.get("margin")) for c in claims if isinstance(c, dict)}


def decided_metric(study: Study) -> str:
    """The metric the study added seeds by (its ``ablate.metric`` tag, read as runs name it)."""
    return R.unfinal(study.parent["tags"].get(R.METRIC, "")) or study.primary


def paired_differences(study: Study, variant: str, metric: str) -> tuple[list[float | None], bool]:
    """Per-seed variant - baseline over the variant's seeds in order (None where either run did not
    finish); and whether no seed has a pair."""
    assert study.baseline is not None
    base = {r.seed: r for r in study.of(study.baseline)}
    runs = sorted(study.of(variant), key=lambda r: r.seed)
    out: list[float | None] = []
    for r in runs:
        b = base.get(r.seed)
        if b is not None and r.status == b.status == "finished" and metric in r.metrics.keys() & b.metrics:
            out.append(r.metrics[metric] - b.metrics[metric])
        else:
            out.append(None)
    return out, bool(out) and all(d is None for d in out)


@dataclass(frozen=True)
class Comparison:
    """One variant against the baseline under the study's sequential design, and its verdict."""

    variant: str
    seeds: int  # the variant's runs, finished or not
    verdict: Verdict  # what its looks say (``ablate.study.verdict.read``)
    finite: tuple[float, ...]  # the paired differences so far (for the mean before the first look)

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
        diffs, lost = paired_differences(study, v, metric)
        finite = tuple(d for d in diffs if d is not None and math.isfinite(d))
        looks = walk(diffs, design, *asked.get(v, (None, None)))
        out.append(Comparison(v, len(diffs), read(looks, higher, lost), finite))
    return out
