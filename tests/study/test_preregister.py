"""A study's design is recorded before its first cell and a spec that changes it is refused."""

from __future__ import annotations

import json
import os
from pathlib import Path

import optuna
import pytest
from mlflow import MlflowClient

from ablate.cli import main as cli_main
from ablate.errors import AblateError
from ablate.launch.local_study import main_ablate
from ablate.study import preregister, recorded_study
from ablate.study.cell_queue import CellQueue
from ablate.study.designs import plan_study
from ablate.study.optuna_store import DEFAULT_JOURNAL, Store
from ablate.tracking import record
from tests.study.test_adaptive_seeds import write


def _queue(plan: object, storage: str | None = None) -> CellQueue:
    store = Store(storage)
    plan.bind(store)  # type: ignore[attr-defined]
    return CellQueue(store, plan.store_name, plan.direction)  # type: ignore[attr-defined]


def test_the_first_start_records_the_design_and_a_changed_one_is_refused(bare_workdir: Path) -> None:
    path = write(bare_workdir, "pre")
    plan = plan_study(str(path))
    queue = _queue(plan)
    assert preregister.record_or_refuse(queue, plan, "the plan", {"comparisons": []}) is True
    recorded = json.loads(queue.get(preregister.STORE_ATTR))
    assert recorded == {"metric": "val/loss", "alpha": 0.05, "family": 2, "min_effect": None,
                        "looks": [2, 3], "claims": {"mask=-1e9": {"effect": "identical", "margin": None}}}
    assert preregister.record_or_refuse(queue, plan, "the plan again") is False  # the same design: goes on
    # the plan it was recorded with stays
    assert preregister.recorded_plan(queue) == ("the plan", {"comparisons": []})

    for change, field in [({"seeds: {min: 2, max: 3}": "seeds: {min: 2, max: 4}"}, "ablation.seeds"),
                          ({"metric: val/loss": "metric: val/exact_match"}, "ablation.metric"),
                          ({"model.positions: [learned]": "model.positions: [learned], model.norm: [rms]"},
                           "ablation.axes or ablation.tune")]:
        text = write(bare_workdir, "pre").read_text()
        for old, new in change.items():
            text = text.replace(old, new)
        path.write_text(text)
        changed = plan_study(str(path))
        with pytest.raises(AblateError) as err:
            preregister.record_or_refuse(_queue(changed), changed, "")
        message = str(err.value)
        assert message.startswith(f"{field}") and "study 'pre' was pre-registered with " in message
        assert "\n" not in message
        assert "a new `name:`" in message


def test_a_refused_start_exits_2_in_one_line_and_queues_nothing(bare_workdir: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    path = write(bare_workdir, "pre2")
    plan = plan_study(str(path))
    preregister.record_or_refuse(_queue(plan), plan, "")
    path.write_text(path.read_text().replace("max: 3", "max: 5"))
    assert cli_main(["ablate", str(path)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "ablation.seeds: study 'pre2'" in err
    assert "pre-registered with looks 2..3, the spec now gives 2..5" in err
    assert cli_main(["ablate", str(path), "--dry-run"]) == 2  # the dry run says what a start would do
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(DEFAULT_JOURNAL)))
    [summary] = optuna.get_all_study_summaries(storage)
    assert summary.n_trials == 0  # no cell was queued
    assert not os.path.exists(bare_workdir / "mlflow.db") or not MlflowClient().search_experiments(
        filter_string="name = 'pre2'")


@pytest.mark.soak  # in the soak tier: the default suite stays under 10 minutes
def test_a_study_records_its_design_on_the_parent_run(workdir: Path) -> None:
    path = write(workdir, "reg")
    assert main_ablate(str(path)) == 0
    [parent] = [r for r in MlflowClient().search_runs(
        [MlflowClient().get_experiment_by_name("reg").experiment_id]) if record.PARENT_RUN not in r.data.tags]
    design = json.loads(parent.data.tags[record.PREREGISTERED])
    assert design["looks"] == [2, 3] and design["metric"] == "val/loss"
    plan_file = MlflowClient().download_artifacts(parent.info.run_id, record.PLAN_ARTIFACT, str(workdir))
    assert Path(plan_file).read_text().startswith("power plan (Pocock looks at 2..3 seeds, 2 comparisons")
    planned = json.loads(parent.data.tags[record.POWER_PLAN])
    assert planned["looks"] == [2, 3] and planned["source"] is None  # no pilot: not sized, in sd units
    assert [c["label"] for c in planned["comparisons"]] == ["mask=-1e9", "positions=learned"]
    assert all(c["in_sd_units"] and c["detectable"] > 0 for c in planned["comparisons"])
    # the study's record (ablate/study/recorded_study.py) holds the same, and its tags are derived from it
    written = MlflowClient().download_artifacts(parent.info.run_id, record.STUDY_RECORD_ARTIFACT,
                                                str(workdir))
    rec = recorded_study.parse(Path(written).read_text(), {})
    assert rec.preregistered == design and rec.power_plan == planned and rec.metric == "final/val/loss"
    assert rec == recorded_study.from_tags(parent.data.tags)
