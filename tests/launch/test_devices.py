"""A study's workers over a node's GPUs: round robin, K per GPU, the device each worker's runs train on.

No GPU here: the GPU list is handed to the functions that take it (`worker_devices`, `worker_count`,
`run_workers(gpus=...)`), and a device the machine lacks must fail in one line.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from ablate.errors import AblateError
from ablate.hardware import WORKER_DEVICE_ENV
from ablate.launch.gpu_placement import worker_count, worker_devices
from ablate.launch.local_workers import run_workers
from ablate.run.distributed import DistInfo, pick_device
from ablate.spec.experiment import ExperimentSpec
from tests.factories import tiny_spec


def test_workers_go_round_robin_over_the_gpus_they_are_given() -> None:
    assert worker_devices(5, [0, 1, 2]) == ["cuda:0", "cuda:1", "cuda:2", "cuda:0", "cuda:1"]
    assert worker_devices(2, [3, 5]) == ["cuda:3", "cuda:5"]  # the indices given, not 0..n-1
    assert worker_devices(3, []) == [None, None, None]  # no GPU: each worker where a run goes by default


def test_workers_per_gpu_sets_the_count_and_caps_it() -> None:
    assert worker_count(None, None, [0, 1]) == 1  # nothing asked: one worker, as before
    assert worker_count(4, None, [0]) == 4  # --workers alone: all of them, round robin
    assert worker_count(None, 2, [0, 1, 2]) == 6  # --workers-per-gpu 2 on 3 GPUs
    assert worker_count(5, 2, [0, 1, 2]) == 5
    with pytest.raises(AblateError, match="3 GPUs hold at most 6 workers"):
        worker_count(7, 2, [0, 1, 2])
    with pytest.raises(AblateError, match="sees no GPU"):
        worker_count(None, 2, [])
    with pytest.raises(AblateError, match="expected 1 or more"):
        worker_count(None, 0, [0])


def record_device(folder: str, index: int, workers: int) -> int:
    """A worker target (spawned: module level): write down the device its runs would get."""
    Path(folder, f"worker-{index}").write_text(os.environ.get(WORKER_DEVICE_ENV, "none"))
    return 0


@pytest.mark.slow  # a real study, training or subprocess (the fast tier stays under 3 minutes)
def test_spawned_workers_each_get_their_gpu(tmp_path: Path) -> None:
    assert run_workers(record_device, (str(tmp_path),), 3, gpus=[0, 3]) == 0
    seen = {p.name: p.read_text() for p in tmp_path.iterdir()}
    assert seen == {"worker-0": "cuda:0", "worker-1": "cuda:3", "worker-2": "cuda:0"}


def test_a_pinned_device_wins_and_a_missing_gpu_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(WORKER_DEVICE_ENV, "cpu")
    assert pick_device(DistInfo()) == torch.device("cpu")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the missing-GPU error needs one it lacks")
    monkeypatch.setenv(WORKER_DEVICE_ENV, "cuda:1")
    with pytest.raises(AblateError, match=f"{WORKER_DEVICE_ENV}: cuda:1 asked for, but this process sees 0"):
        pick_device(DistInfo())
    assert pick_device(DistInfo(), pinned="cpu") == torch.device("cpu")  # the spec's train.device wins
    with pytest.raises(AblateError, match="train.device: cuda:0 asked for"):
        pick_device(DistInfo(), pinned="cuda:0")


def test_train_device_is_outside_the_run_identity() -> None:
    plain = ExperimentSpec.model_validate(tiny_spec())
    pinned = ExperimentSpec.model_validate(tiny_spec({"train.device": "cuda:2"}))
    assert pinned.train.device == "cuda:2" and pinned.spec_hash == plain.spec_hash
    other = ExperimentSpec.model_validate(tiny_spec({"train.threads": 2}))
    assert other.spec_hash != plain.spec_hash  # the identity still sees the train section's other fields
    with pytest.raises(ValueError, match="train.device"):
        ExperimentSpec.model_validate(tiny_spec({"train.device": "gpu0"}))


def test_the_dry_run_says_where_each_worker_would_train(monkeypatch: pytest.MonkeyPatch) -> None:
    from ablate.launch.local_study import workers_line

    monkeypatch.setattr("ablate.hardware.visible_gpus", lambda: [0, 1])
    assert workers_line(3) == "workers: 3, round robin over the 2 visible GPUs: cuda:0, cuda:1, cuda:0"
    monkeypatch.setattr("ablate.hardware.visible_gpus", lambda: [])
    assert workers_line(2) == "workers: 2, on the CPU (no GPU visible to torch)"
