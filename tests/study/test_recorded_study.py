"""A study's record (ablate/study/recorded_study.py): the writer's object reads back as written, through its
artifact and through its per-field tags; every committed export's tags read through the one converter with
nothing lost; a record from a newer ablate still reads. Rebuilding every committed report from its export
through the record: tests/report/test_committed_reports.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ablate.spec.study_sections import Expectation
from ablate.study import preregister, recorded_study
from ablate.study.ablation import study_record as record_of
from ablate.study.designs import plan_study
from ablate.study.recorded_study import (
    LEGACY_TAGS,
    ArmDesign,
    StudyRecord,
    as_json,
    from_tags,
    parse,
    to_tags,
)
from ablate.tracking import record
from tests.study.test_ladder import write as write_ladder
from tests.tuned_studies import write_study

REPORTS = Path(__file__).resolve().parents[2] / "reports"
EXPORTS = sorted(p.parents[2].name for p in REPORTS.glob("*/export/parent/run.json"))


def _tags(name: str) -> dict[str, str]:
    tags: dict[str, str] = json.loads((REPORTS / name / "export" / "parent" / "run.json").read_text())["tags"]
    return tags


class _Queue:
    """A study's queue as the writer reads it: the pre-registered design and the plan it was recorded with."""

    def __init__(self, values: dict[str, str] | None = None) -> None:
        self.values = values or {}

    def get(self, name: str) -> str | None:
        return self.values.get(name)


def test_the_committed_exports_are_found() -> None:
    assert len(EXPORTS) >= 20 and {"ladder-kdocs", "modern-axes-multi30k", "wsd-vs-cosine-tuned-docs"} <= set(
        EXPORTS)


@pytest.mark.parametrize("name", EXPORTS)
def test_an_older_studys_tags_read_through_the_converter_with_nothing_lost(name: str) -> None:
    tags = _tags(name)
    rec = from_tags(tags)
    assert rec.kind == "ablation" and rec.version == recorded_study.VERSION
    back = to_tags(rec)
    for tag in LEGACY_TAGS.values():
        if tag not in tags:  # a field the study did not record sets no tag (expect: always, as [] at least)
            assert tag not in back or tag == record.EXPECT
            continue
        if tag == record.EXPECT:  # claims recorded before a field of theirs existed read with its default
            claims = [Expectation.model_validate(c) for c in json.loads(tags[tag])]
            assert [Expectation.model_validate(c) for c in json.loads(back[tag])] == claims
        elif tag in (record.DESIGN, record.METRIC, record.TUNED_ON):
            assert back[tag] == tags[tag]
        else:
            assert json.loads(back[tag]) == json.loads(tags[tag]), tag
    assert from_tags(back) == rec


@pytest.mark.parametrize("name", EXPORTS)
def test_the_artifact_reads_back_as_written(name: str) -> None:
    rec = from_tags(_tags(name))
    assert parse(json.dumps(as_json(rec)), {}) == rec
    assert parse(None, _tags(name)) == rec  # no artifact: the tags


def test_the_records_of_the_committed_ladders_and_arms_are_typed() -> None:
    ladder = from_tags(_tags("ladder-kdocs")).ladder
    assert ladder is not None and ladder.names == ["xs", "s", "m", "l"]
    assert ladder.margin == 0.02 and ladder.target == 5e13
    planned = ladder.planned_flops()
    assert list(planned) == ladder.names and all(f > 0 for f in planned.values())
    tuned = from_tags(_tags("modern-axes-multi30k"))
    assert tuned.tune is not None and tuned.tune.trials > 0 and tuned.tune.space
    assert tuned.arm_design is not None and tuned.arm_design.decided_by == record.OWN_BEST_ARM
    assert tuned.confirm is not None and len(tuned.confirm.seeds) >= 2
    sequential = from_tags(_tags("rope-margin-multi30k")).sequential
    assert sequential is not None and sequential.design().looks == tuple(sequential.looks)
    assert from_tags(_tags("rope-margin-multi30k")).claims()["positions=rope"].margin == 0.05


def test_a_record_from_a_newer_ablate_still_reads() -> None:
    data = as_json(StudyRecord(design="variants", metric="final/val/loss"))
    newer = {**data, "version": recorded_study.VERSION + 1, "rung_tuning": {"trials": 8}}
    rec = parse(json.dumps(newer), {})
    assert rec.design == "variants" and rec.decided_metric == "val/loss"


def test_the_arm_design_reads_as_the_statistics_floors_design() -> None:
    arms = ArmDesign(looks=(2, 4), alpha=0.05, min_effect=0.1, family=2, decided_by=record.OWN_BEST_ARM)
    design = arms.design(family=6)
    assert (design.looks, design.alpha, design.min_effect, design.family) == ((2, 4), 0.05, 0.1, 6)
    tag = to_tags(StudyRecord(arm_design=arms))[record.ARM_DESIGN]
    assert json.loads(tag) == {"looks": [2, 4], "alpha": 0.05, "min_effect": 0.1, "family": 2,
                               "decided_by": record.OWN_BEST_ARM}


def test_the_writer_records_a_ladder_in_order_of_compute(tmp_path: Path) -> None:
    plan = plan_study(str(write_ladder(tmp_path)))
    registered = {"looks": [2], "metric": "val/loss"}
    queue = _Queue({preregister.STORE_ATTR: json.dumps(registered)})
    rec = record_of(plan, queue)  # type: ignore[arg-type]
    assert rec.ladder is not None
    assert rec.ladder.names == [r.name for r in plan.rungs] == ["small", "mid", "large"]
    assert [r.flops for r in rec.ladder.rungs] == sorted(r.flops for r in rec.ladder.rungs)
    assert rec.metric == "final/val/loss" and rec.preregistered == registered and rec.tune is None
    assert parse(json.dumps(as_json(rec)), {}) == rec == from_tags(to_tags(rec))


def test_the_writer_records_the_arms_typed(tmp_path: Path) -> None:
    plan = plan_study(str(write_study(tmp_path, "armed")))
    rec = record_of(plan, _Queue())  # type: ignore[arg-type]
    assert rec.tune is not None and rec.confirm is not None and rec.arm_design is not None
    assert rec.arm_design.decided_by == record.OWN_BEST_ARM
    assert set(rec.tune.space) == set(rec.tune.baseline)
    assert rec.preregistered is None and rec.power_plan is None  # nothing recorded in the queue
    assert parse(json.dumps(as_json(rec)), {}) == rec == from_tags(to_tags(rec))
