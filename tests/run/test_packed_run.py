"""A pack's cells stay cells (ablate/run/packed_run.py): each its own MLflow run with its own metrics,
summary, checkpoints and its pack recorded, equal to the cell run alone; a stopped pack resumes cell by
cell, here each alone, and ends where the uninterrupted cells end. With dropout too: each cell's masks come
from its own seed's stream, which its checkpoint saves (ablate/engine/cell_rng.py)."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest
from mlflow import MlflowClient

from ablate.engine import preempt
from ablate.engine.packed_trainer import PackedTrainer
from ablate.run.packed_run import PackCell, run_pack
from ablate.run.runner import Interrupted, RunOptions, RunResult, run_experiment
from ablate.spec.experiment import ExperimentSpec
from ablate.spec.load import load_spec
from ablate.tracking import record
from tests.factories import write_tiny_spec
from tests.stores import mlflow_store

pytestmark = pytest.mark.usefixtures("single_thread")
CELL = {"model.dropout": 0.0, "model.d_model": 16, "model.d_ff": 32, "data.synthetic.train_size": 200,
        "train.max_steps": 6, "train.eval_every": 3, "train.checkpoint_every": 3, "eval.samples": 0,
        "eval.metric": "exact_match", "tracking.log_checkpoint": False}


def cell_specs(folder: Path, uri: str, dropout: float = 0.0) -> list[ExperimentSpec]:
    changes = {"tracking.uri": uri, "tracking.enabled": True, "model.dropout": dropout}
    path = write_tiny_spec(folder, CELL, changes)
    return [load_spec(path, [f"seed={seed}", f"train.optimizer.lr={lr}"])
            for seed, lr in ((0, 0.003), (1, 0.01))]


def options(folder: Path, name: str) -> RunOptions:
    return RunOptions(run_dir=folder / name, experiment="packed", run_name=name, quiet=True)


def final_val_loss(result: Any) -> float:
    assert isinstance(result, RunResult), result
    return float(result.history[-1][1]["val/loss"])


@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_each_packed_cell_is_its_own_run_equal_to_the_cell_alone(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch,
                                                                 dropout: float) -> None:
    monkeypatch.chdir(tmp_path)
    uri = mlflow_store(tmp_path)
    specs = cell_specs(tmp_path, uri, dropout)
    results = run_pack([PackCell(s, options(tmp_path, f"packed{k}")) for k, s in enumerate(specs)])
    alone = [run_experiment(s, run_dir=tmp_path / f"alone{k}", experiment="alone", quiet=True)
             for k, s in enumerate(specs)]
    client = MlflowClient(uri)
    for k, (packed, single) in enumerate(zip(results, alone, strict=True)):
        assert isinstance(packed, RunResult) and packed.status == "finished" and packed.run_id
        assert (Path(packed.run_dir) / "summary.json").is_file() and packed.checkpoint
        assert final_val_loss(packed) == pytest.approx(final_val_loss(single), rel=2e-4)
        run = client.get_run(packed.run_id)
        assert run.data.tags[record.PACK_SIZE] == "2" and run.data.tags[record.PACK_INDEX] == str(k)
        assert run.data.tags[record.SEED] == str(k) and run.info.status == "FINISHED"
        assert single.run_id and record.PACK_SIZE not in client.get_run(single.run_id).data.tags
        losses = client.get_metric_history(packed.run_id, record.TRAIN_LOSS)
        single_losses = client.get_metric_history(single.run_id, record.TRAIN_LOSS)
        assert [m.step for m in losses] == [m.step for m in single_losses]
        assert [m.value for m in losses] == pytest.approx([m.value for m in single_losses], rel=2e-4)
    assert results[0].run_id != results[1].run_id  # type: ignore[union-attr]


@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_a_stopped_pack_resumes_cell_by_cell_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   dropout: float) -> None:
    """SIGTERM after step 4: every cell checkpoints at the boundary, its MLflow run is left interrupted, and
    each cell, resumed alone from its own checkpoint into the same MLflow run, ends where the cell run
    alone without a stop ends."""
    monkeypatch.chdir(tmp_path)
    uri = mlflow_store(tmp_path)
    specs = cell_specs(tmp_path, uri, dropout)
    after_step = PackedTrainer.after_step

    def stop_after_4(self: PackedTrainer, t: Any, *args: Any) -> Any:
        ended = after_step(self, t, *args)
        if t.state.step == 4:
            monkeypatch.setattr(preempt, "_requested", signal.SIGTERM)
        return ended

    monkeypatch.setattr(PackedTrainer, "after_step", stop_after_4)
    with pytest.raises(Interrupted):
        run_pack([PackCell(s, options(tmp_path, f"cell{k}")) for k, s in enumerate(specs)])
    monkeypatch.undo()
    monkeypatch.chdir(tmp_path)
    client = MlflowClient(uri)
    resumed = [run_experiment(s, run_dir=tmp_path / f"cell{k}", experiment="packed", quiet=True)
               for k, s in enumerate(specs)]
    alone = [run_experiment(s, run_dir=tmp_path / f"alone{k}", experiment="alone", quiet=True)
             for k, s in enumerate(specs)]
    for again, single in zip(resumed, alone, strict=True):
        assert again.status == "finished" and again.resumed_at == 4 and again.run_id
        assert final_val_loss(again) == pytest.approx(final_val_loss(single), rel=2e-4)
        assert client.get_run(again.run_id).data.tags[record.PACK_SIZE] == "2"  # the run the pack opened
