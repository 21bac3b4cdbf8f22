"""A study's cell named on the command line (`ablate export-model STUDY:VARIANT:SEED`): the latest finished
run of that variant and seed among the study's child runs, and one line naming the study's variants and
seeds when it has no such cell."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from ablate.errors import AblateError
from ablate.tracking import record
from ablate.tracking.mlflow_store import use_uri
from ablate.tracking.read import cell_run_id, run_tags


def test_a_cell_is_the_latest_finished_run_of_its_variant_and_seed(workdir: Path) -> None:
    # an earlier test of this worker may have pointed MLflow's process-wide URI at a server it has stopped
    use_uri(os.environ["MLFLOW_TRACKING_URI"])
    client = MlflowClient()
    exp = client.create_experiment("st")
    parent = client.create_run(exp, tags={record.STUDY: "st", record.KIND: "ablation"}).info.run_id

    def cell(variant: str, seed: int, status: str, start: int) -> str:
        tags = {record.PARENT_RUN: parent, record.STUDY: "st", record.VARIANT: variant,
                record.SEED: str(seed), record.STATUS: status, record.KIND: "cell"}
        return client.create_run(exp, tags=tags, start_time=start).info.run_id

    cell("baseline", 0, "finished", 1)
    wanted = cell("baseline", 0, "finished", 2)  # the cell run again later: the latest finished wins
    cell("baseline", 0, "failed", 3)
    other = cell("norm=rms", 0, "finished", 4)
    assert cell_run_id("st", "baseline", 0) == wanted
    assert cell_run_id("st", "norm=rms", 0) == other
    assert run_tags(other)[record.VARIANT] == "norm=rms"
    with pytest.raises(AblateError, match=r"study 'st' has no cell norm=rms:7; its variants: baseline, "
                                          r"norm=rms; its seeds: 0-0"):
        cell_run_id("st", "norm=rms", 7)
