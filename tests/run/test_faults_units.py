"""Fault handling pieces on their own: verified checkpoints, the run lock, storage errors, the outbox queue
and its sender thread, the repeated-failure rule, and the preemption handler with its grace bound. Fast (no
training); the end-to-end fault-injection suite is tests/run/test_faults_inject.py."""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import optuna
import pytest
import torch
from optuna.trial import TrialState

from ablate.engine import preempt
from ablate.engine.checkpoint import (
    CheckpointError,
    load_verified,
    previous_path,
    save_checkpoint,
    sum_path,
)
from ablate.errors import StorageError, storage_problem
from ablate.run.lock import RunLock, RunLocked
from ablate.study.failfast import repeated_failure
from ablate.tracking import outbox
from ablate.tracking.outbox import Courier, Outbox, send_outbox
from ablate.tracking.tracker import Tracker


def _payload(step: int) -> dict[str, object]:
    return {"state": {"step": step}, "w": torch.full((64,), float(step))}


def test_a_torn_checkpoint_falls_back_to_the_previous_good_one_in_one_line(tmp_path: Path) -> None:
    last = tmp_path / "last.pt"
    save_checkpoint(last, _payload(7), keep_previous=True)
    save_checkpoint(last, _payload(14), keep_previous=True)
    assert load_verified(last)[0]["state"]["step"] == 14  # type: ignore[index]
    data = last.read_bytes()
    last.write_bytes(data[: len(data) // 2])  # a node died while the file system flushed
    payload, used, problems = load_verified(last)  # type: ignore[misc]
    assert payload["state"]["step"] == 7 and used == previous_path(last)
    assert len(problems) == 1 and "torn" in problems[0] and str(last) in problems[0]
    # The same size but other bytes: the checksum, not the size, catches it.
    last.write_bytes(bytes(b ^ 1 if i == 100 else b for i, b in enumerate(data)))
    assert "checksum" in load_verified(last)[2][0]  # type: ignore[index]
    previous_path(last).write_bytes(b"")
    with pytest.raises(CheckpointError) as info:
        load_verified(last)
    assert "--restart" in str(info.value) and "\n" not in str(info.value)


def test_a_checkpoint_without_a_checksum_still_loads(tmp_path: Path) -> None:
    old = tmp_path / "last.pt"
    torch.save(_payload(21), old)  # what ablate wrote before checksums
    assert not sum_path(old).exists()
    assert load_verified(old)[0]["state"]["step"] == 21  # type: ignore[index]
    old.write_bytes(old.read_bytes()[:50])  # and an old torn one is caught by the reader
    with pytest.raises(CheckpointError, match="unreadable"):
        load_verified(old)


def test_a_second_writer_is_told_who_holds_the_run(tmp_path: Path) -> None:
    with RunLock(tmp_path):
        with pytest.raises(RunLocked) as info:
            RunLock(tmp_path).acquire()
        text = str(info.value)
        assert f"pid {os.getpid()} on {socket.gethostname()}" in text
        assert "--wait" in text and "\n" not in text
    RunLock(tmp_path).acquire()  # released: free again


def test_a_stale_lock_of_a_dead_process_is_taken_over(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    dead_pid = int(gone.stdout)
    (tmp_path / ".lock").write_text(json.dumps({"pid": dead_pid, "host": socket.gethostname(), "since": 0}))
    lock = RunLock(tmp_path)
    lock.acquire()
    assert json.loads((tmp_path / ".lock").read_text())["pid"] == os.getpid()
    assert f"took over the lock of pid {dead_pid}" in capsys.readouterr().err
    lock.release()
    assert not (tmp_path / ".lock").exists()
    # Another host's lock is never judged from here.
    (tmp_path / ".lock").write_text(json.dumps({"pid": dead_pid, "host": "elsewhere", "since": 0}))
    with pytest.raises(RunLocked, match="on elsewhere"):
        RunLock(tmp_path).acquire()


def test_storage_failures_become_one_line_naming_the_path() -> None:
    full = OSError(errno.ENOSPC, "No space left on device", "/data/runs/x/.last.pt.1.tmp")
    made = StorageError.from_os(full, what="a 2.0 MB checkpoint")
    assert isinstance(made, StorageError) and made.exit_code == 1
    assert "/data/runs/x/.last.pt.1.tmp" in str(made) and "2.0 MB checkpoint needs space" in str(made)
    assert StorageError.from_os(OSError(errno.EBADF, "bad fd")).__class__ is OSError  # a bug stays a bug
    try:  # MLflow wraps SQLAlchemy wraps sqlite3: found down the chain
        try:
            raise RuntimeError("(sqlite3.OperationalError) database or disk is full")
        except RuntimeError as inner:
            raise ValueError("API request failed") from inner
    except ValueError as outer:
        problem = storage_problem(outer)
    assert problem is not None and "database or disk is full" in str(problem) and "\n" not in str(problem)
    assert storage_problem(KeyError("x")) is None


def test_the_outbox_sends_in_order_once_and_resumes_after_a_failed_send(tmp_path: Path) -> None:
    box = Outbox(tmp_path / "outbox")
    for i in range(5):
        box.add({"kind": "metrics", "items": [["m", float(i), 1000 + i, i]]})
    sent: list[int] = []

    def flaky(op: dict[str, object]) -> None:
        step = op["items"][0][3]  # type: ignore[index]
        if step == 3 and 3 not in failed:
            failed.add(3)
            raise ConnectionError("server down")
        sent.append(step)

    failed: set[int] = set()
    with pytest.raises(ConnectionError):
        box.drain(flaky)
    assert sent == [0, 1, 2] and box.pending() == 2
    assert Outbox(tmp_path / "outbox").drain(flaky) == 2  # a new process picks up where the cursor is
    assert sent == [0, 1, 2, 3, 4] and box.pending() == 0 and box.delayed() == 5


def test_an_operation_appended_while_the_queue_empties_is_not_deleted_with_it(tmp_path: Path) -> None:
    box = Outbox(tmp_path / "outbox")
    (tmp_path / "outbox").mkdir()
    box.queue.write_text('{"kind":"metrics","items":[["m",0.0,1000,0]]}\n{"kind":"met')  # a kill mid-line
    box.mend()
    for step in (1, 2):
        box.add({"kind": "metrics", "items": [["m", float(step), 1000 + step, step]]}, delayed=False)
    sent: list[int] = []

    def send(op: dict[str, Any]) -> None:
        step = op["items"][0][3]
        sent.append(step)
        if step == 2:  # the training thread appends after the sender read the queue, before it is emptied
            box.add({"kind": "metrics", "items": [["m", 3.0, 1003, 3]]}, delayed=False)

    assert box.drain(send) == 4
    assert sent == [0, 1, 2, 3] and not box.queue.exists() and box.delayed() == 0


class HungServer:
    """A tracking client whose server takes each request and answers only once `answer` is set."""

    def __init__(self) -> None:
        self.answer = threading.Event()
        self.asked = threading.Event()
        self.got: list[tuple[Any, ...]] = []

    def _wait(self) -> None:
        self.asked.set()
        assert self.answer.wait(timeout=60)

    def log_batch(self, run_id: str, metrics: Any = (), tags: Any = (), synchronous: bool = True) -> None:
        self._wait()
        self.got.extend(("metric", m.key, m.step, m.value, m.timestamp) for m in metrics)
        self.got.extend(("tag", t.key, t.value) for t in tags)

    def log_artifact(self, run_id: str, path: str, artifact_path: str | None = None) -> None:
        self._wait()
        self.got.append(("artifact", artifact_path, Path(path).name, Path(path).read_text()))

    def log_artifacts(self, run_id: str, local_dir: str, artifact_path: str | None = None) -> None:
        self._wait()
        files = sorted((f.relative_to(local_dir).as_posix(), f.read_text())
                       for f in Path(local_dir).rglob("*") if f.is_file())
        self.got.append(("artifacts", artifact_path, tuple(files)))

    def set_terminated(self, run_id: str, status: str) -> None:
        self._wait()
        self.got.append(("end", status))


def _fill(courier: Courier, steps: range) -> None:
    for step in steps:
        courier.send({"kind": "metrics", "items": [["train/loss", float(step), 1000 + step, step]]})


def _metrics(steps: range) -> list[tuple[Any, ...]]:
    return [("metric", "train/loss", s, float(s), 1000 + s) for s in steps]


ARTIFACT = ("artifact", "notes", "a.txt", "hello")
END = [("tag", "ablate.status", "finished"), ("end", "FINISHED")]


@pytest.fixture
def fail_fast_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # `Courier` sets these for its process: give the test process its own values back afterwards.
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")


def test_sending_never_waits_for_a_hung_server_and_delivers_everything_once_in_order(
        tmp_path: Path, fail_fast_env: None) -> None:
    server = HungServer()
    courier = Courier(server, "run0", "http://hung", tmp_path / "outbox", {})  # type: ignore[arg-type]
    started = time.monotonic()
    _fill(courier, range(20))
    assert server.asked.wait(timeout=30)  # the sender is inside its first request, which hangs
    _fill(courier, range(20, 40))
    courier.send_made("notes/a.txt", lambda p: p.write_text("hello"))
    assert time.monotonic() - started < 10  # a blocking send would sit out the hung request (60 s here)
    assert server.got == [] and Outbox(tmp_path / "outbox").pending() == 41
    server.answer.set()
    courier.finish({"ablate.status": "finished"}, "FINISHED")
    assert server.got == [*_metrics(range(40)), ARTIFACT, *END]
    assert not (tmp_path / "outbox" / "queue.jsonl").exists() and courier.outbox.delayed() == 0


def test_log_artifacts_goes_through_the_outbox_and_training_never_waits_for_a_frozen_server(
        tmp_path: Path, fail_fast_env: None) -> None:
    """Every step of a training loop, a folder of artifacts among them, is done while the server has not
    answered a single request (it answers only after the loop): a direct `log_artifacts` would block the
    loop on the frozen server instead. Then everything arrives once, in order, the folder as it was."""
    server = HungServer()
    tracker = Tracker(server, "run0", "0", "http://frozen", outbox=tmp_path / "outbox")  # type: ignore[arg-type]
    figures = tmp_path / "figures"
    (figures / "sub").mkdir(parents=True)
    (figures / "a.txt").write_text("alpha")
    (figures / "sub" / "b.txt").write_text("beta")
    for step in range(10):  # the training loop
        tracker.log_metrics({"train/loss": float(step)}, step=step, timestamp_ms=1000 + step)
        if step == 0:
            assert server.asked.wait(timeout=60)  # the sender is inside its first request, which hangs
        if step == 5:
            tracker.log_artifacts(figures, "figures")
            (figures / "a.txt").write_text("changed after logging")  # the queue holds the folder as logged
    assert not server.answer.is_set() and server.got == []  # the loop ended; the server answered nothing
    server.answer.set()
    tracker.end("finished")
    folder = ("artifacts", "figures", (("a.txt", "alpha"), ("sub/b.txt", "beta")))
    assert server.got == [*_metrics(range(6)), folder, *_metrics(range(6, 10)), *END]


def test_the_end_of_a_run_waits_for_a_hung_server_a_bounded_time_and_leaves_the_rest_to_the_next_run(
        tmp_path: Path, fail_fast_env: None, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(outbox, "FINISH_WAIT_S", 0.5)
    server = HungServer()
    courier = Courier(server, "run0", "http://hung", tmp_path / "outbox", {})  # type: ignore[arg-type]
    _fill(courier, range(5))
    courier.send_made("notes/a.txt", lambda p: p.write_text("hello"))
    started = time.monotonic()
    courier.finish({"ablate.status": "finished"}, "FINISHED")
    assert time.monotonic() - started < 10
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("warning: the tracking server http://hung is down or too slow: 8 records of run ")
    server.answer.set()  # the request in flight ends now; it stays queued (this process let go of the outbox)
    courier.sender.join(timeout=60)  # the sender returns after that request: nothing can follow it
    assert not courier.sender.is_alive()
    assert server.got == _metrics(range(1))
    later = HungServer()
    later.answer.set()
    monkeypatch.setattr(outbox, "MlflowClient", lambda uri: later)
    assert send_outbox(tmp_path / "outbox", "run0", "http://hung") == 0  # the next run of the command
    assert later.got == [*_metrics(range(5)), ARTIFACT, *END]  # step 0 again: MLflow drops the repeat
    assert not (tmp_path / "outbox" / "queue.jsonl").exists()


def _trial(number: int, state: TrialState, error: str | None = None) -> optuna.trial.FrozenTrial:
    attrs = {"status": "failed", "error": error} if state == TrialState.FAIL else {"status": "finished"}
    t = optuna.trial.create_trial(state=state, value=1.0 if state == TrialState.COMPLETE else None,
                                  user_attrs=attrs)
    t.number = number
    return t


def test_only_a_failure_repeated_by_the_first_trials_stops_a_study() -> None:
    missing = "AblateError: data folder runs/trial-0/x does not exist"
    same = [_trial(0, TrialState.FAIL, missing),
            _trial(1, TrialState.FAIL, missing.replace("trial-0", "trial-1"))]
    found = repeated_failure(same)
    assert found is not None and found[0] == missing and [t.number for t in found[1]] == [0, 1]
    assert repeated_failure([_trial(0, TrialState.FAIL, missing), _trial(1, TrialState.FAIL, "OOM")]) is None
    assert repeated_failure([_trial(0, TrialState.COMPLETE), *same]) is None  # it worked once: per trial
    assert repeated_failure(same[:1]) is None


def test_the_first_signal_waits_for_a_step_boundary_and_a_second_one_does_not() -> None:
    before = (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT))
    try:
        preempt.install()
        with preempt.deferred():
            os.kill(os.getpid(), signal.SIGTERM)  # delivered at the next bytecode: only a flag
            assert preempt.requested() == signal.SIGTERM and preempt.exit_code() == 143
            os.kill(os.getpid(), signal.SIGTERM)  # a repeat within REPEAT_S (forwarded + group): once
            preempt._received_at -= preempt.REPEAT_S + 1  # later: a real second request
            with pytest.raises(KeyboardInterrupt):
                os.kill(os.getpid(), signal.SIGINT)
                for _ in range(1000):  # the handler runs between bytecodes
                    pass
        preempt.reset()
        with pytest.raises(preempt.Preempted):  # outside a training loop: at once
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(1000):
                pass
        assert preempt.exit_code() == 130
    finally:
        preempt.reset()
        signal.signal(signal.SIGTERM, before[0])
        signal.signal(signal.SIGINT, before[1])


def test_a_signal_while_a_run_opens_is_raised_only_once_its_id_is_recorded() -> None:
    """A SIGTERM between creating the MLflow run and writing its id to the run folder left a run nothing
    named, and the resumed cell opened a second one (caught by the real-SLURM cancel test)."""
    before = signal.getsignal(signal.SIGTERM)
    recorded: list[str] = []
    try:
        preempt.install()
        with pytest.raises(preempt.Preempted):
            with preempt.held():
                os.kill(os.getpid(), signal.SIGTERM)
                for _ in range(1000):  # the handler runs between bytecodes: only a flag here
                    pass
                recorded.append("run id")
        assert recorded == ["run id"] and preempt.exit_code() == 143
        preempt.reset()
        with preempt.held():  # no signal: nothing raised
            recorded.append("again")
        assert recorded == ["run id", "again"]
    finally:
        preempt.reset()
        signal.signal(signal.SIGTERM, before)


GRACE = """
import os, signal, sys, time
from ablate.engine import preempt
preempt.install()
try:
    with preempt.deferred():
        os.kill(os.getpid(), signal.SIGTERM)
        print("signalled", flush=True)
        while True:  # a step (or an evaluation) that does not reach its boundary
            time.sleep(0.01)
except preempt.Preempted:
    print(preempt.late(), flush=True)
    sys.exit(preempt.exit_code())
"""


def test_the_first_signal_waits_for_a_step_boundary_no_longer_than_the_grace() -> None:
    env = dict(os.environ, ABLATE_PREEMPT_GRACE_S="0.5")
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", GRACE], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 143, done.stderr
    assert time.monotonic() - started >= 0.5
    signalled, line = done.stdout.splitlines()
    assert signalled == "signalled" and line.startswith(
        "no step boundary came within 0.5 s (ABLATE_PREEMPT_GRACE_S), so it stopped without a new checkpoint")


def test_a_step_boundary_within_the_grace_disarms_it(monkeypatch: pytest.MonkeyPatch) -> None:
    before = [signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGALRM)]
    monkeypatch.setenv(preempt.GRACE_ENV, "0.2")
    try:
        preempt.install()
        with preempt.deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):
                pass
            assert preempt.requested() == signal.SIGTERM
            preempt.at_boundary()  # what the trainer calls before its checkpoint
            time.sleep(0.5)  # the grace would have run out here
        assert preempt.late() == ""
    finally:
        preempt.reset()
        for signum, handler in zip((signal.SIGTERM, signal.SIGINT, signal.SIGALRM), before, strict=True):
            signal.signal(signum, handler)


def test_the_resume_line_repeats_workers_and_storage_but_not_a_password() -> None:
    from ablate.launch.resume import resume_command

    assert resume_command("study", "s.yaml", []) == "ablate study s.yaml"
    assert (resume_command("tune", "s.yaml", ["seed=3"], workers=2, storage="postgresql://bob:hunter2@db:5432/x")
            == "ablate tune s.yaml --set seed=3 --workers 2 --storage postgresql://bob:***@db:5432/x")
    assert resume_command("study", "s.yaml", [], storage="j.log") == "ablate study s.yaml --storage j.log"


def test_ctrl_c_while_the_server_process_is_created_stops_that_server(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The interrupt lands inside `subprocess.Popen` (the child exists, its handle not returned yet): it is
    held until the handle is there, then raised, and the server is stopped, not left running."""
    from ablate.tracking import server

    stopped: list[object] = []
    child = object()

    def popen_interrupted(*args: Any, **kwargs: Any) -> object:
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C now, before Popen returns
        return child

    monkeypatch.setattr(server.subprocess, "Popen", popen_interrupted)
    monkeypatch.setattr(server, "stop_server", stopped.append)
    monkeypatch.setattr(server, "_wait_for_health", lambda *a: pytest.fail("the interrupt came first"))
    before = signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C as in a fresh `ablate ui`
    try:
        with pytest.raises(KeyboardInterrupt):
            server.start_server("127.0.0.1", 0, f"sqlite:///{tmp_path / 'm.db'}", tmp_path / "art",
                                log_path=tmp_path / "log")
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # Ctrl-C works as before
    finally:
        signal.signal(signal.SIGINT, before)
    assert stopped == [child]
