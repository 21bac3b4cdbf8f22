"""What a study knows, as one typed, versioned record: written once to its parent run, read once by its
report.

An ablation's parent run carries a :class:`StudyRecord`: its kind, design and deciding metric, the
group-sequential design its seeds were added by, the published results it checks (``ablation.expect``, the
spec's own :class:`~ablate.spec.study_sections.Expectation` model), the tuning space and the larger setting of
its arms (``ablation.tune``, ``ablation.confirm``), its ladder of rungs (``ablation.scales``), and the power
plan and pre-registered design it was recorded with before its first cell. ``ablate study`` builds it from the
plan (:func:`ablate.study.ablation` calls :func:`write`); ``ablate report`` parses it into ``Study.record``
(:func:`parse`), so no report section reads a tag of its own.

The record is the parent's ``study_record.json`` artifact (``record.STUDY_RECORD_ARTIFACT``): a power plan
alone can pass MLflow's 8,000-character limit on a tag value. :func:`write` also sets the older per-field tags
(``LEGACY_TAGS``, derived from the same object) so that MLflow's UI and the stores' older readers keep seeing
them. A study recorded before the record existed (every committed export) has only those tags:
:func:`from_tags` is the one converter that reads them into the same object.

Extending it: add a field with a default (None, [] or a model's default), so that older records still
validate; bump ``VERSION`` when the meaning of an existing field changes, and convert in :func:`parse`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from ablate.spec.ladder_section import ScalingRule
from ablate.spec.study_sections import Expectation, SearchParam
from ablate.stats.sequential import Design
from ablate.tracking import record

VERSION = 1

JsonObject = dict[str, Any]  # a JSON object kept as recorded (the power plan, the pre-registered design)


class _Record(BaseModel):
    # ignore, not forbid: a record written by a newer ablate (a field added since) still reads here
    model_config = ConfigDict(extra="ignore", frozen=True)


class SequentialDesign(_Record):
    """The group-sequential design a study added seeds by (ablate/stats/sequential.py ``Design``)."""

    looks: tuple[int, ...]
    alpha: float
    min_effect: float | None = None
    family: int = 1

    @classmethod
    def of(cls, design: Design) -> SequentialDesign:
        return cls(looks=tuple(design.looks), alpha=design.alpha, min_effect=design.min_effect,
                   family=design.family)

    def design(self, family: int | None = None) -> Design:
        """The statistics floor's design; ``family``: the family a reader judges it by, in place of the
        recorded one (a report counts every verdict it states)."""
        chosen = self.family if family is None else family
        return Design(tuple(self.looks), self.alpha, self.min_effect, chosen)


class ArmDesign(SequentialDesign):
    """The design the arms of ``ablation.tune`` / ``ablation.confirm`` are judged by, and the arm whose
    decided comparisons ``confirm:`` reruns."""

    decided_by: str = record.BASELINE_ARM


class TuneRecord(_Record):
    """``ablation.tune`` as the study ran it: the space (the spec's own ``SearchParam``), the baseline's
    values of it, the trials, sampler (and its seed), pruner, and the steps of a trial against a cell's."""

    space: dict[str, SearchParam]
    baseline: dict[str, Any]
    trials: int
    sampler: str
    seed: int | None = None
    pruner: str
    fidelity_steps: int | None = None
    cell_steps: int | None = None


class ConfirmRecord(_Record):
    """``ablation.confirm`` as the study ran it: the larger setting as written, and its seeds."""

    setting: str
    seeds: list[int]


class Rung(_Record):
    """One rung of a ladder: its overrides, and the baseline's parameters, tokens and training FLOPs there."""

    name: str
    overrides: dict[str, Any]
    params: float
    tokens: float
    flops: float
    tokens_from: str | None = None
    # a fair ladder's (ablation.scales.budgets / tokens_counted): written only where set, so that every
    # ladder recorded before them keeps its record and its tag
    size: str | None = None  # a data budget's size rung (m for m-2x)
    budget: float | None = None  # its multiple of the size rung's tokens
    params_all: float | None = None  # every parameter, embeddings and head included (where counted)


FAIR = ("tokens_counted", "rule", "match", "budgets", "speedup")  # a fair ladder's fields (ablation.scales)
FAIR_RUNG = ("size", "budget", "params_all")  # a budget rung's and an all-parameter count's


class LadderRecord(_Record):
    """A ladder (spec field ``ablation.scales``): its rungs in order of compute, the compute its gaps are
    extrapolated to, the margin its transfer verdicts are judged by, and the tokens per parameter."""

    rungs: list[Rung]
    target: float | None = None
    margin: float | None = None
    tokens_per_param: float | None = None
    # a fair ladder's fields (the spec's own: ablation.scales), only where given (``FAIR``)
    tokens_counted: Literal["non_embedding", "all"] | None = None
    rule: ScalingRule | None = None
    match: float | None = None
    budgets: list[float] | None = None
    speedup: bool | None = None

    def as_tag(self) -> str:
        """The parent's ``ablate.scales`` tag: a fair ladder's fields and a rung's budget fields only where
        set, so that a ladder recorded before them writes the tag it always wrote."""
        out = self.model_dump(mode="json", exclude=set(FAIR))
        out.update(self.model_dump(mode="json", include=set(FAIR), exclude_none=True))
        out["rungs"] = [{k: v for k, v in r.model_dump(mode="json").items()
                         if v is not None or k not in FAIR_RUNG} for r in self.rungs]
        return json.dumps(out, sort_keys=True)

    @property
    def names(self) -> list[str]:
        return [r.name for r in self.rungs]

    def planned_flops(self) -> dict[str, float]:
        return {r.name: r.flops for r in self.rungs}


class StudyRecord(_Record):
    """Everything a study states about itself for its report (module doc)."""

    version: int = VERSION
    kind: Literal["ablation", "search"] = "ablation"
    design: str | None = None  # one_at_a_time | full_factorial | variants
    metric: str | None = None  # the metric cells rank by and seeds are added by, a final/ name
    sequential: SequentialDesign | None = None  # adaptive seeds (ablation.seeds with min/max)
    expect: list[Expectation] = []
    tuned_on: str | None = None  # ablation.tuned_on, only where the spec sets it
    arm_design: ArmDesign | None = None  # with tune: or confirm:
    tune: TuneRecord | None = None
    confirm: ConfirmRecord | None = None
    ladder: LadderRecord | None = None
    preregistered: JsonObject | None = None  # ablate/study/preregister.py design_record
    power_plan: JsonObject | None = None  # ablate/study/sizing.py or sized_ladder.py plan_record

    @property
    def decided_metric(self) -> str | None:
        """The metric seeds were added by, as runs name it (no final/ prefix); None where unrecorded."""
        return record.unfinal(self.metric) if self.metric else None

    def claims(self) -> dict[str, Expectation]:
        """Each variant's published claim (``ablation.expect``), by variant."""
        return {c.variant: c for c in self.expect}


# ---------------------------------------------------------------- the older tags (one converter)
# field -> the tag that held it before the record; every JSON one is written with json.dumps
LEGACY_TAGS: dict[str, str] = {
    "design": record.DESIGN, "metric": record.METRIC, "sequential": record.SEQUENTIAL,
    "expect": record.EXPECT, "tuned_on": record.TUNED_ON, "arm_design": record.ARM_DESIGN,
    "tune": record.TUNE, "confirm": record.CONFIRM, "ladder": record.SCALES,
    "preregistered": record.PREREGISTERED, "power_plan": record.POWER_PLAN,
}
_PLAIN = ("design", "metric", "tuned_on")  # tags holding a plain string, not JSON


def from_tags(tags: Mapping[str, str]) -> StudyRecord:
    """The record of a study from its parent run's tags: what every study recorded before the record
    existed (and what :func:`to_tags` mirrors for newer ones)."""
    data: dict[str, Any] = {"kind": "search" if tags.get(record.KIND) == "search" else "ablation"}
    for name, tag in LEGACY_TAGS.items():
        text = tags.get(tag)
        if text:
            data[name] = text if name in _PLAIN else json.loads(text)
    return StudyRecord.model_validate(data)


def to_tags(rec: StudyRecord) -> dict[str, str]:
    """The parent run's per-field tags of ``rec`` (``LEGACY_TAGS``; a field without a value sets none),
    written as the study wrote them before the record: read back by :func:`from_tags`."""
    tags: dict[str, str] = {}
    if rec.design is not None:
        tags[record.DESIGN] = rec.design
    if rec.metric is not None:
        tags[record.METRIC] = rec.metric
    if rec.sequential is not None:
        tags[record.SEQUENTIAL] = rec.sequential.design().to_tag()
    tags[record.EXPECT] = json.dumps([c.model_dump(mode="json") for c in rec.expect])
    if rec.tuned_on is not None:
        tags[record.TUNED_ON] = rec.tuned_on
    if rec.arm_design is not None:
        tags[record.ARM_DESIGN] = rec.arm_design.design().to_tag(decided_by=rec.arm_design.decided_by)
    if rec.tune is not None:
        tune = rec.tune.model_dump(mode="json")
        tune["space"] = {k: p.model_dump(mode="json", exclude_defaults=True)
                         for k, p in rec.tune.space.items()}
        tags[record.TUNE] = json.dumps(tune, sort_keys=True)
    if rec.confirm is not None:
        tags[record.CONFIRM] = json.dumps(rec.confirm.model_dump(mode="json"))
    if rec.ladder is not None:
        tags[record.SCALES] = rec.ladder.as_tag()
    if rec.preregistered is not None:
        tags[record.PREREGISTERED] = json.dumps(rec.preregistered, sort_keys=True)
    if rec.power_plan is not None:
        tags[record.POWER_PLAN] = json.dumps(rec.power_plan, sort_keys=True)
    return tags


# ---------------------------------------------------------------- the one writer and the one reader
def as_json(rec: StudyRecord) -> JsonObject:
    """The artifact's content."""
    return rec.model_dump(mode="json")


def parse(artifact: str | None, tags: Mapping[str, str]) -> StudyRecord:
    """The study's record: its ``study_record.json`` artifact's text where the parent has one, else (a study
    recorded before it) its tags through :func:`from_tags`."""
    if artifact is None:
        return from_tags(tags)
    data = json.loads(artifact)
    if int(data.get("version", VERSION)) > VERSION:  # fields added since read through extra="ignore"
        data["version"] = VERSION
    return StudyRecord.model_validate(data)
