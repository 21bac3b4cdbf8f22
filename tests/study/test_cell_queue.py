"""The queue of a study's cells in its Optuna store (ablate/study/cell_queue.py and optuna_store.py): a
cell stopped part-way resumes before any new cell starts, and `ablate status` calls it interrupted, not
pending, until it does."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from ablate.study.cell_queue import CellQueue
from ablate.study.optuna_store import Store

CELLS = [{"ablate.cell": f"h{i}-s0", "label": f"v{i}", "seed": 0} for i in range(4)]


def queue_of(storage: str) -> CellQueue:
    queue = CellQueue(Store(storage), f"s-{uuid.uuid4().hex[:8]}", "maximize")  # a shared server's store
    assert queue.enqueue(CELLS) == (4, 0)
    return queue


def claimed_cell(queue: CellQueue) -> tuple[object, str]:
    trial, _ = queue.claim()
    assert trial is not None
    return trial, trial.user_attrs["ablate.cell"]


def interrupted_first(queue: CellQueue) -> None:
    first, cell = claimed_cell(queue)
    assert cell == "h0-s0"
    queue.release(first)  # SIGTERM: its checkpoint written, the cell queued again
    assert {k: r.status for k, r in queue.records().items()} == {
        "h0-s0": "interrupted", "h1-s0": "pending", "h2-s0": "pending", "h3-s0": "pending"}
    again, cell = claimed_cell(queue)
    assert cell == "h0-s0"  # not h1-s0: the interrupted cell resumes before the new ones
    queue.finish(again, "finished", 0.5)
    assert [claimed_cell(queue)[1] for _ in range(3)] == ["h1-s0", "h2-s0", "h3-s0"]  # then queue order


def test_an_interrupted_cell_resumes_before_new_cells_start(tmp_path: Path) -> None:
    interrupted_first(queue_of(str(tmp_path / "journal.log")))


@pytest.mark.slow
def test_an_interrupted_cell_resumes_first_from_a_postgresql_store(postgres_url: str) -> None:
    """The same through RDBStorage (Optuna wraps it in its cache), the store several machines share."""
    interrupted_first(queue_of(postgres_url))


def test_a_failed_cell_queued_again_is_pending_not_interrupted(tmp_path: Path) -> None:
    queue = queue_of(str(tmp_path / "journal.log"))
    trial, _ = claimed_cell(queue)
    queue.finish(trial, "failed", None, error="boom")
    assert queue.records()["h0-s0"].status == "failed"
    assert queue.enqueue(CELLS, retry_failed=True) == (0, 1)
    assert queue.records()["h0-s0"].status == "pending"
    assert claimed_cell(queue)[1] == "h0-s0"  # it has a checkpoint too: it goes first


def test_a_cell_resumed_at_its_last_step_shows_the_step_of_its_result(tmp_path: Path) -> None:
    """Its resumed segment evaluates nothing new (it resumed at its last step), so its trial has no
    reported value of its own: `ablate status` showed step '-' for a finished cell."""
    queue = queue_of(str(tmp_path / "journal.log"))
    trial, _ = claimed_cell(queue)
    queue.report(trial, 100, 0.2)
    queue.release(trial)
    again, cell = claimed_cell(queue)
    queue.finish(again, "finished", 0.9, step=100)  # its result: the evaluation at step 100
    record = queue.records()[cell]
    assert (record.status, record.metric, record.step) == ("finished", 0.9, 100)
