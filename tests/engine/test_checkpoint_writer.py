"""Checkpoints written in the background (ablate/engine/checkpoint.py's CheckpointWriter): above its size the
step goes on while the file is written, the file holds the tensors as they were when saved, with the same
checksum, atomic rename and previous file as a synchronous write, in the order saved; below it a write is
synchronous; a failed background write is raised by ``wait``. A trainer checkpointing in the background
writes the same files as one checkpointing in the foreground."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import torch

from ablate.data.prepare import prepare_data
from ablate.engine import checkpoint
from ablate.engine.builders import build_model
from ablate.engine.checkpoint import (
    CheckpointWriter,
    load_checkpoint,
    load_verified,
    previous_path,
    save_checkpoint,
    sum_path,
    tensor_bytes,
)
from ablate.engine.trainer import Trainer
from ablate.errors import StorageError
from ablate.spec.experiment import ExperimentSpec
from tests.factories import tiny_spec


def _payload(step: int, n: int = 256) -> dict[str, Any]:
    return {"state": {"step": step}, "model": {"w": torch.full((n,), float(step))},
            "optimizer": {"state": {0: {"exp_avg": torch.zeros(n)}}, "param_groups": [{"lr": 1e-3}]}}


class Gate:
    """A write function that blocks until opened: the test decides when the background write proceeds."""

    def __init__(self) -> None:
        self.opened = threading.Event()
        self.started = threading.Event()
        self.paths: list[Path] = []

    def __call__(self, path: Path, payload: dict[str, Any], **options: Any) -> None:
        self.started.set()
        assert self.opened.wait(timeout=60)
        self.paths.append(path)
        save_checkpoint(path, payload, **options)


def test_tensor_bytes_counts_every_nested_tensor() -> None:
    assert tensor_bytes(_payload(1, n=100)) == 2 * 100 * 4
    assert tensor_bytes({"a": [torch.zeros(3, dtype=torch.float16), (torch.zeros(2, dtype=torch.int64),)]}) \
        == 3 * 2 + 2 * 8


def test_a_large_checkpoint_is_written_in_the_background_with_the_tensors_as_saved(tmp_path: Path) -> None:
    writer, gate = CheckpointWriter(threshold=0), Gate()
    payload = _payload(3)
    last = tmp_path / "last.pt"
    assert writer.save(last, payload, keep_previous=True, write=gate) is True
    assert gate.started.wait(timeout=60)
    assert writer.busy and not last.exists()  # save returned while the file is not written yet
    payload["model"]["w"].add_(100.0)  # the next step changes the tensors in place
    payload["optimizer"]["state"][0]["exp_avg"].fill_(7.0)
    gate.opened.set()
    writer.wait()
    assert not writer.busy
    found = load_verified(last)
    assert found is not None and found[2] == []  # its sha256 beside it, and it matches
    written = found[0]
    assert torch.equal(written["model"]["w"], torch.full((256,), 3.0))
    assert torch.equal(written["optimizer"]["state"][0]["exp_avg"], torch.zeros(256))
    assert written["state"] == {"step": 3} and sum_path(last).is_file()


def test_background_writes_land_in_the_order_saved_and_keep_the_previous_file(tmp_path: Path) -> None:
    writer, gate = CheckpointWriter(threshold=0), Gate()
    last, best = tmp_path / "last.pt", tmp_path / "best.pt"
    writer.save(last, _payload(1), keep_previous=True, write=gate)
    writer.save(best, _payload(2), write=gate)  # two in flight: the second waits for the first
    gate.opened.set()
    writer.save(last, _payload(3), keep_previous=True, write=gate)
    writer.wait()
    assert gate.paths == [last, best, last]
    assert load_checkpoint(last)["state"]["step"] == 3
    assert load_checkpoint(previous_path(last))["state"]["step"] == 1
    assert load_checkpoint(best)["state"]["step"] == 2


def test_a_small_checkpoint_is_written_at_once(tmp_path: Path) -> None:
    writer = CheckpointWriter(threshold=tensor_bytes(_payload(1)))
    assert writer.save(tmp_path / "last.pt", _payload(1)) is False
    assert not writer.busy and load_checkpoint(tmp_path / "last.pt")["state"]["step"] == 1


def test_a_failed_background_write_is_raised_by_wait(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    writer = CheckpointWriter(threshold=0)
    assert writer.save(blocker / "last.pt", _payload(1)) is True
    with pytest.raises((StorageError, OSError)):
        writer.wait()
    writer.wait()  # raised once: the writer is usable again
    assert writer.save(tmp_path / "ok.pt", _payload(2)) is True
    writer.wait()
    assert load_checkpoint(tmp_path / "ok.pt")["state"]["step"] == 2


def test_the_threshold_default_is_read_when_a_writer_is_made(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checkpoint, "ASYNC_CHECKPOINT_BYTES", 5)
    assert CheckpointWriter().threshold == 5


def test_a_trainer_checkpointing_in_the_background_writes_what_the_foreground_writes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = ExperimentSpec.model_validate(tiny_spec({"model.dropout": 0.0, "train.max_steps": 12,
                                                    "train.eval_every": 6, "train.checkpoint_every": 4}))
    data = prepare_data(spec)
    tok = data.tokenizers
    written = {}
    for name, threshold in (("foreground", 1 << 40), ("background", 0)):
        monkeypatch.setattr(checkpoint, "ASYNC_CHECKPOINT_BYTES", threshold)
        model = build_model(spec.model, tok.src_vocab_size, tok.tgt_vocab_size, pad_id=tok.pad_id, seed=0)
        trainer = Trainer(spec, data, model, tmp_path / name, torch.device("cpu"), show_progress=False)
        assert trainer.writer.threshold == threshold
        trainer.save()  # step 0, as the runner writes it
        assert trainer.fit().status == "finished"
        assert not trainer.writer.busy  # fit waited for every write
        files = ("last.pt", "last.prev.pt", "best.pt")
        written[name] = {f: load_verified(tmp_path / name / f) for f in files}
    for f, found in written["foreground"].items():
        other = written["background"][f]
        assert found is not None and other is not None and found[2] == other[2] == []
        a, b = found[0], other[0]
        assert a.get("step") == b.get("step")  # best.pt's
        if "state" in a:
            assert a["state"]["step"] == b["state"]["step"]
            assert a["state"]["history"] == b["state"]["history"]
        for key, tensor in a["model"].items():
            assert torch.equal(tensor, b["model"][key]), (f, key)
