"""Fault injection, end to end: real `ablate` processes, real signals, a real `mlflow server` on 127.0.0.1
(killed, restarted, frozen), a real tmpfs filled up, a real PostgreSQL study store. Each fault ends in the
uninterrupted run's final weights and MLflow metrics (every step once), a terminal MLflow state, and
one-line messages without tracebacks.

The run is tiny (60 optimizer steps of a 1+1-layer reverse task, a few seconds); the instant of each
fault is drawn at random (the seed is printed: ABLATE_FAULT_SEED=N repeats a draw).
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
from mlflow import MlflowClient

from ablate.engine.checkpoint import load_checkpoint
from tests.stores import mlflow_store

SPEC = """
name: tiny
seed: 3
data:
  source: synthetic
  synthetic:
    {task: reverse, vocab_size: 12, min_len: 2, max_len: 6, train_size: 400, val_size: 24, test_size: 24}
  max_len: 10
  batch_tokens: 256
model: {d_model: 32, heads: 2, encoder_layers: 1, decoder_layers: 1, d_ff: 64, dropout: 0.1}
train:
  max_steps: 60
  eval_every: 20
  checkpoint_every: 7
  schedule: {name: inverse_sqrt, warmup_steps: 10}
  optimizer: {lr: 0.003}
  threads: 1
eval: {samples: 2, decode: {strategy: greedy}}
tracking: {enabled: true, log_checkpoint: false}
"""
KEYS = ("train/loss", "val/loss", "val/exact_match", "model/params", "data/padding_fraction")
SEED = int(os.environ.get("ABLATE_FAULT_SEED", str(int(time.time()) % 100_000)))


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> random.Random:
    print(f"ABLATE_FAULT_SEED={SEED}")
    return random.Random(f"{SEED}-{request.node.name}")


def _env(uri: str, delay: float = 0.0) -> dict[str, str]:
    # A checkpoint delay keeps the run alive long enough to be hit; it changes nothing it computes.
    if uri.startswith("sqlite:///"):
        db = Path(uri[len("sqlite:///"):])
        mlflow_store(db.parent, db.name)  # an empty store, unless the folder has one from a first launch
    return dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", MLFLOW_TRACKING_URI=uri,
                ABLATE_FAULT_CHECKPOINT_DELAY_S=str(delay), MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false")


def _start(folder: Path, uri: str, *args: str, delay: float = 0.0) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "ablate", "run", "spec.yaml", *args], cwd=folder,
                            env=_env(uri, delay), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _run(folder: Path, uri: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ablate", "run", "spec.yaml", *args], cwd=folder,
                          env=_env(uri), capture_output=True, text=True, timeout=300)


def _step(root: Path) -> int:
    found = list(root.glob("runs/tiny/*/last.pt"))
    try:
        return int(load_checkpoint(found[0])["state"]["step"]) if found else -1
    except Exception:  # noqa: BLE001 - replaced while read
        return -1


def _when(proc: subprocess.Popen[str], ready: Callable[[], bool], timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while not ready():
        if proc.poll() is not None or time.time() > deadline:
            out, err = proc.communicate()
            pytest.fail(f"the run ended (rc={proc.returncode}) before the fault:\n{out}\n{err}")
        time.sleep(0.01)


def _messages(stderr: str) -> list[str]:
    """ablate's own lines (notes, warnings, errors, the interrupt line), without MLflow's log lines."""
    lines = [ln for chunk in stderr.split("\n") for ln in chunk.split("\r")]
    return [ln for ln in lines if ln.startswith(("note:", "warning:", "error:", "interrupted"))]


def _no_traceback(proc: subprocess.CompletedProcess[str] | subprocess.Popen[str], out: str, err: str) -> None:
    assert "Traceback" not in out + err, out + err


def _final(root: Path) -> tuple[float, dict[str, torch.Tensor]]:
    (ckpt,) = root.glob("runs/tiny/*/last.pt")
    payload = load_checkpoint(ckpt)
    return payload["state"]["history"][-1][1]["val/loss"], payload["model"]


def _runs(uri: str, experiment: str = "tiny") -> list:  # type: ignore[type-arg]
    client = MlflowClient(uri)
    return client.search_runs([client.get_experiment_by_name(experiment).experiment_id])


def _assert_same_as(reference: Path, root: Path, uri: str, experiment: str = "tiny") -> None:
    """Final loss and weights bit for bit, one FINISHED MLflow run, every metric step once with the
    reference's values."""
    ref_loss, ref_w = _final(reference)
    loss, w = _final(root)
    assert loss == ref_loss
    assert all(torch.equal(t, w[k]) for k, t in ref_w.items())
    (run,) = _runs(uri, experiment)
    assert run.info.status == "FINISHED" and run.data.tags["ablate.status"] == "finished"
    client, ref_client = MlflowClient(uri), MlflowClient(f"sqlite:///{reference / 'mlflow.db'}")
    (ref_run,) = _runs(f"sqlite:///{reference / 'mlflow.db'}")
    for key in KEYS:
        got = [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, key)]
        assert len({s for s, _ in got}) == len(got), f"{key}: a step logged twice"
        want = [(m.step, m.value) for m in ref_client.get_metric_history(ref_run.info.run_id, key)]
        assert sorted(got) == sorted(want), key


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("reference")
    (folder / "spec.yaml").write_text(SPEC)
    done = _run(folder, f"sqlite:///{folder / 'mlflow.db'}")
    assert done.returncode == 0, done.stderr
    return folder


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "disk"
    mount.mkdir()
    try:
        made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mount)],
                              capture_output=True, text=True)
    except FileNotFoundError:
        pytest.skip("no mount command here")
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {made.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@contextmanager
def _kept_full(filler: Path) -> Iterator[None]:
    """Fill the file system holding `filler` to the last page, then take every page freed after that
    (a retry every millisecond) until the block exits."""
    stop = threading.Event()
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    page = b"\0" * 4096

    def take_free_space() -> None:
        while not stop.is_set():
            try:
                os.write(fd, page)
            except OSError:
                time.sleep(0.001)

    try:
        while True:  # full before the block starts, so the next write of the run fails
            os.write(fd, page)
    except OSError:
        pass
    taker = threading.Thread(target=take_free_space, daemon=True)
    taker.start()
    try:
        yield
    finally:
        stop.set()
        taker.join()
        os.close(fd)


@pytest.mark.soak
def test_a_full_disk_is_one_line_and_the_run_resumes_once_there_is_space(tmp_path: Path, reference: Path,
                                                                         small_disk: Path,
                                                                         rng: random.Random) -> None:
    """The run folder on an 8 MB tmpfs, filled up at a random step: exit 1 with one line naming the file
    and what needs space, the MLflow run FAILED (terminal), the last good checkpoint intact; with space
    again the same command ends exactly where the uninterrupted run ends."""
    (small_disk / "spec.yaml").write_text(SPEC)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"  # MLflow's store elsewhere: only the run folder is full
    # each checkpoint lingers 0.5 s after its write: the disk fills within that window on a busy machine too
    proc = _start(small_disk, uri, delay=0.5)
    at = rng.randint(1, 40)
    _when(proc, lambda: _step(small_disk) >= at)
    # The disk stays full, as it does when another process is writing to it: a checkpoint written just
    # before the fill would otherwise replace an older one and free exactly the space the next one needs.
    with _kept_full(small_disk / "filler"):
        out, err = proc.communicate(timeout=120)
    _no_traceback(proc, out, err)
    assert proc.returncode == 1, err
    (line,) = _messages(err)
    assert line.startswith("error: no space left on device writing ") and "runs/tiny/" in line, line
    (run,) = _runs(uri)
    assert run.info.status == "FAILED"
    (small_disk / "filler").unlink()
    again = _run(small_disk, uri)
    assert again.returncode == 0, again.stderr
    _assert_same_as(reference, small_disk, uri)


@pytest.mark.soak  # a reference run, a killed run and its resume: too long for the default suite
def test_sigterm_at_a_random_step_then_a_torn_checkpoint_resume_exactly(tmp_path: Path, reference: Path,
                                                                        rng: random.Random) -> None:
    """SIGTERM (what SLURM and Kubernetes send) at a random step: checkpoint at the next step boundary,
    exit 143, the MLflow run KILLED/interrupted, one line saying how to resume. Then the newest checkpoint
    is torn (cut in half): the rerun says so in one line, resumes from the previous good one and ends
    exactly where the uninterrupted run ends."""
    (tmp_path / "spec.yaml").write_text(SPEC)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    at = rng.randint(1, 40)
    proc = _start(tmp_path, uri, delay=0.15)
    _when(proc, lambda: _step(tmp_path) >= at)
    time.sleep(rng.uniform(0, 0.3))
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    _no_traceback(proc, out, err)
    assert proc.returncode == 143, err
    (line,) = [m for m in _messages(err) if m.startswith("interrupted")]
    stopped = _step(tmp_path)
    assert f"interrupted by SIGTERM: resume from checkpoint at step {stopped} in runs/tiny/" in line
    assert "`ablate run spec.yaml`" in line and at <= stopped < 60
    (run,) = _runs(uri)
    assert run.info.status == "KILLED" and run.data.tags["ablate.status"] == "interrupted"

    (last,) = tmp_path.glob("runs/tiny/*/last.pt")
    last.write_bytes(last.read_bytes()[: last.stat().st_size // 2])
    again = _run(tmp_path, uri)
    assert again.returncode == 0, again.stderr
    _no_traceback(again, again.stdout, again.stderr)
    (warning,) = _messages(again.stderr)
    assert f"checkpoint {last.relative_to(tmp_path)} is torn" in warning and "last.prev.pt at step" in warning
    _assert_same_as(reference, tmp_path, uri)


@pytest.mark.slow
@pytest.mark.soak
def test_two_launches_of_one_run_then_sigkill_and_a_stale_lock(tmp_path: Path, reference: Path,
                                                               rng: random.Random) -> None:
    """A second `ablate run` of a run being trained says who holds it and exits 2; the holder SIGKILLed at a
    random step leaves its lock behind, which the next launch takes over (pid gone) to finish exactly.

    The holder is stopped (SIGSTOP) while the second launch starts: on a slow machine that launch takes
    longer than the whole tiny run, which would otherwise end (and release its lock) before the kill."""
    (tmp_path / "spec.yaml").write_text(SPEC)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    first = _start(tmp_path, uri, delay=0.3)
    _when(first, lambda: _step(tmp_path) >= 0)
    first.send_signal(signal.SIGSTOP)  # it holds the lock, alive, and trains no further meanwhile
    second = _run(tmp_path, uri)
    assert second.returncode == 2, second.stderr
    (line,) = _messages(second.stderr)
    assert f"is being trained by pid {first.pid} on {socket.gethostname()}" in line and "--wait" in line
    at = rng.randint(1, 42)  # a checkpoint (every 7 steps) before the last one, at 56
    first.send_signal(signal.SIGCONT)
    _when(first, lambda: _step(tmp_path) >= at)
    first.send_signal(signal.SIGSTOP)  # where it is now: the kill cannot come after the run ended
    first.send_signal(signal.SIGKILL)
    first.communicate()
    assert list(tmp_path.glob("runs/tiny/*/.lock"))  # left behind by the killed holder
    third = _run(tmp_path, uri)
    assert third.returncode == 0, third.stderr
    _no_traceback(third, third.stdout, third.stderr)
    (note,) = _messages(third.stderr)
    assert f"took over the lock of pid {first.pid}" in note
    _assert_same_as(reference, tmp_path, uri)
    assert not list(tmp_path.glob("runs/tiny/*/.lock"))


STUCK = """
import os, signal, sys, time
from ablate.engine import trainer

def stuck(self):
    os.kill(os.getpid(), signal.SIGTERM)  # the scheduler's stop comes during an evaluation that does not end
    while True:
        time.sleep(0.05)

trainer.Trainer.run_evaluation = stuck
from ablate.cli import main
sys.exit(main(["run", "spec.yaml"]))
"""


@pytest.mark.soak
@pytest.mark.slow
def test_sigterm_during_an_evaluation_longer_than_the_grace_stops_without_a_new_checkpoint(
        tmp_path: Path, reference: Path) -> None:
    """The first evaluation (step 20) never ends and SIGTERM comes during it: after the grace
    (ABLATE_PREEMPT_GRACE_S, 1 s here) the run stops without waiting for a step boundary, in one line
    saying so, exit 143, the MLflow run KILLED/interrupted; the rerun resumes from the checkpoint of step 14
    and ends exactly where the uninterrupted run ends."""
    (tmp_path / "spec.yaml").write_text(SPEC)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    env = {**_env(uri), "ABLATE_PREEMPT_GRACE_S": "1"}
    done = subprocess.run([sys.executable, "-c", STUCK], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    _no_traceback(done, done.stdout, done.stderr)
    assert done.returncode == 143, done.stderr
    (line,) = [m for m in _messages(done.stderr) if m.startswith("interrupted")]
    assert line.startswith("interrupted by SIGTERM: no step boundary came within 1 s "
                           "(ABLATE_PREEMPT_GRACE_S), so it stopped without a new checkpoint; resume from "
                           "the last checkpoint in runs/tiny/")
    assert _step(tmp_path) == 14
    (run,) = _runs(uri)
    assert run.info.status == "KILLED" and run.data.tags["ablate.status"] == "interrupted"
    again = _run(tmp_path, uri)
    assert again.returncode == 0, again.stderr
    _assert_same_as(reference, tmp_path, uri)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _server(folder: Path, port: int) -> subprocess.Popen[bytes]:
    """`mlflow server` with its defaults in ``folder`` (sqlite:///mlflow.db, ./mlartifacts)."""
    log = open(folder / "server.log", "ab")  # noqa: SIM115 - the process keeps it
    mlflow_store(folder)  # the server's default store (sqlite:///mlflow.db): empty, or the one it had
    proc = subprocess.Popen([sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port",
                             str(port), "--workers", "1"], cwd=folder, stdout=log, stderr=subprocess.STDOUT,
                            env=_env(""), start_new_session=True)
    deadline = time.time() + 90
    while time.time() < deadline:
        assert proc.poll() is None, (folder / "server.log").read_text()
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                return proc
        except (urllib.error.URLError, OSError):
            time.sleep(0.25)
    pytest.fail("mlflow server did not start")


class Server:
    """One `mlflow server` (its own folder, one port) that a test may kill, start again on the same port
    and store, or freeze (SIGSTOP: the port still takes connections, nothing answers)."""

    def __init__(self, site: Path) -> None:
        self.site, self.port = site, _free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.proc = _server(site, self.port)

    def kill(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def restart(self) -> None:
        self.proc = _server(self.site, self.port)

    def freeze(self, frozen: bool) -> None:
        os.killpg(self.proc.pid, signal.SIGSTOP if frozen else signal.SIGCONT)


@pytest.fixture(scope="module")
def tracking_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = Server(tmp_path_factory.mktemp("site"))
    try:
        yield server
    finally:
        if server.proc.poll() is None:
            server.freeze(False)
            server.kill()


@pytest.fixture
def server(tracking_server: Server) -> Server:
    """The module's tracking server, up (a test before may have killed it). Each test logs to its own
    experiment (`_spec`)."""
    if tracking_server.proc.poll() is not None:
        tracking_server.restart()
    return tracking_server


def _spec(experiment: str) -> str:
    # The tracking section is not part of the run's identity: the same run as the reference's.
    return SPEC.replace("log_checkpoint: false}", f"log_checkpoint: false, experiment: {experiment}}}")


def _summary(root: Path) -> dict:  # type: ignore[type-arg]
    import json

    (summary,) = root.glob("runs/tiny/*/summary.json")
    return dict(json.loads(summary.read_text()))


@pytest.mark.soak
@pytest.mark.slow
def test_a_tracking_server_killed_mid_run_delays_records_without_losing_or_doubling_one(
        tmp_path: Path, reference: Path, server: Server, rng: random.Random) -> None:
    """The `mlflow server` SIGKILLed at a random step: training goes on (records queue in the run
    folder's outbox), the run ends with one warning line and a complete summary.json counting the delayed
    records; with the server back, the same command sends them in order: the MLflow run ends FINISHED with
    every metric step of the uninterrupted run exactly once."""
    (tmp_path / "spec.yaml").write_text(_spec("killed"))
    uri = server.uri
    proc = _start(tmp_path, uri, delay=0.15)
    at = rng.randint(1, 40)
    _when(proc, lambda: _step(tmp_path) >= at)
    server.kill()
    out, err = proc.communicate(timeout=180)
    _no_traceback(proc, out, err)
    assert proc.returncode == 0, err
    messages = _messages(err)
    assert any("does not answer" in m for m in messages) and "is down" in messages[-1], messages
    result = _summary(tmp_path)
    assert result["status"] == "finished" and result["delayed"] > 0 and "test/loss" in result["metrics"]
    server.restart()
    again = _run(tmp_path, uri)
    assert again.returncode == 0, again.stderr
    assert any(m.startswith("note: sent the records") for m in _messages(again.stderr)), again.stderr
    _assert_same_as(reference, tmp_path, uri, "killed")
    (run,) = _runs(uri, "killed")
    artifacts = {a.path for a in MlflowClient(uri).list_artifacts(run.info.run_id)}
    assert {"summary.json", "spec.yaml"} <= artifacts


@pytest.mark.soak  # 55 s: the server's restart sets its pace; the hang test below keeps the outbox in CI
def test_a_tracking_server_restarted_mid_run_gets_the_queued_records_during_that_same_run(
        tmp_path: Path, reference: Path, server: Server, rng: random.Random) -> None:
    """The `mlflow server` SIGKILLed at a random step and started again (same port, same store) while the
    run still trains: the run says once that the server does not answer and once that it answers again, and
    by the time it exits (no second command) its MLflow record is complete: FINISHED, every metric step of
    the uninterrupted run exactly once, its artifacts, nothing left in the outbox."""
    (tmp_path / "spec.yaml").write_text(_spec("restarted"))
    # Each checkpoint lingers 2 s: the run outlives the server's restart (several seconds on a busy machine).
    proc = _start(tmp_path, server.uri, delay=2.0)
    _when(proc, lambda: _step(tmp_path) >= rng.randint(1, 6))
    time.sleep(rng.uniform(0, 1.5))
    server.kill()
    server.restart()
    assert proc.poll() is None and _step(tmp_path) < 60, "the run ended before its server was back"
    out, err = proc.communicate(timeout=180)
    _no_traceback(proc, out, err)
    assert proc.returncode == 0, err
    messages = _messages(err)
    down = [m for m in messages if "does not answer" in m]
    back = [m for m in messages if "answers again" in m]
    assert len(down) == len(back) == 1 and messages.index(down[0]) < messages.index(back[0]), messages
    assert not any(m.startswith("warning:") for m in messages), messages
    assert _summary(tmp_path)["delayed"] > 0
    assert not list(tmp_path.glob("runs/tiny/*/outbox/queue.jsonl"))
    _assert_same_as(reference, tmp_path, server.uri, "restarted")
    (run,) = _runs(server.uri, "restarted")
    artifacts = {a.path for a in MlflowClient(server.uri).list_artifacts(run.info.run_id)}
    assert {"summary.json", "spec.yaml"} <= artifacts


@pytest.mark.soak
@pytest.mark.slow
def test_a_tracking_server_that_hangs_mid_run_holds_up_no_training_step(
        tmp_path: Path, reference: Path, server: Server, rng: random.Random) -> None:
    """The `mlflow server` frozen (SIGSTOP: connections are taken, nothing answers, a request waits for
    MLflow's 10 s timeout) at a random step until training has reached its last step: training never waits
    for it (no gap of seconds between the timestamps of its metrics, which are taken when they are logged),
    and once the server answers again (SIGCONT) the run delivers everything, every metric step once."""
    (tmp_path / "spec.yaml").write_text(_spec("hung"))
    proc = _start(tmp_path, server.uri, delay=0.15)
    _when(proc, lambda: _step(tmp_path) >= rng.randint(1, 30))
    server.freeze(True)
    try:
        _when(proc, lambda: _step(tmp_path) >= 60)
    finally:
        server.freeze(False)
    out, err = proc.communicate(timeout=180)
    _no_traceback(proc, out, err)
    assert proc.returncode == 0, err
    _assert_same_as(reference, tmp_path, server.uri, "hung")
    (run,) = _runs(server.uri, "hung")
    client = MlflowClient(server.uri)
    stamps = sorted({m.timestamp for key in ("train/loss", "val/loss")
                     for m in client.get_metric_history(run.info.run_id, key)})
    gaps = [b - a for a, b in zip(stamps, stamps[1:], strict=False)]
    assert max(gaps) < 5000, gaps  # waiting on the frozen server would leave one of 10 s or more


# Files the data check before a search accepts (they exist, parse and pair up) but no trial can train on:
# every sentence is longer than data.max_len.
NO_DATA = """
name: nodata
seed: 0
data:
  source: files
  max_len: 8
  files:
    format: text
    root: ./too-long
    train: {src: train.de, tgt: train.en}
    val: {src: val.de, tgt: val.en}
model: {d_model: 16, heads: 2, encoder_layers: 1, decoder_layers: 1, d_ff: 32, dropout: 0.0}
train: {max_steps: 10, eval_every: 5}
eval: {samples: 0}
search:
  trials: 5
  objectives: [{metric: val/loss, direction: minimize}]
  space:
    train.optimizer.lr: {low: 0.001, high: 0.01, log: true}
"""


@pytest.mark.slow  # a real training or study (the fast tier stays under 3 minutes)
def test_a_search_whose_first_trials_fail_the_same_way_stops_with_that_one_message(tmp_path: Path) -> None:
    """Every trial of a search over sentences none of which fits data.max_len would fail alike: it stops
    after the first two with one line and exit 2 instead of failing all five; the two go back to the queue
    for the rerun."""
    import optuna
    from optuna.trial import TrialState

    (tmp_path / "spec.yaml").write_text(NO_DATA)
    (tmp_path / "too-long").mkdir()
    for split in ("train", "val"):
        (tmp_path / "too-long" / f"{split}.de").write_text(("wort " * 60 + "\n") * 5)
        (tmp_path / "too-long" / f"{split}.en").write_text(("word " * 60 + "\n") * 5)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    done = subprocess.run([sys.executable, "-m", "ablate", "tune", "spec.yaml"], cwd=tmp_path, env=_env(uri),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    _no_traceback(done, done.stdout, done.stderr)
    (line,) = [m for m in _messages(done.stderr) if m.startswith("error:")]
    assert line.startswith("error: search stopped: its first 2 trials failed the same way: DataError: ")
    assert "no pair of 5 fits data.max_len 8" in line
    assert done.stderr.count("trial ") == 2 + line.count("trial ")  # trials 0 and 1 ran, no third
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(
        str(tmp_path / ".ablate" / "optuna-journal.log")))
    (study,) = optuna.get_all_study_summaries(storage)
    loaded = optuna.load_study(study_name=study.study_name, storage=storage)
    states = [t.state for t in loaded.get_trials()]
    assert states.count(TrialState.FAIL) == 2 and TrialState.COMPLETE not in states
    (parent,) = [r for r in _runs_of(uri, "nodata") if r.data.tags.get("ablate.kind") == "search"]
    assert parent.info.status == "FAILED" and "data.max_len" in parent.data.tags["ablate.error"]


def _runs_of(uri: str, experiment: str) -> list:  # type: ignore[type-arg]
    client = MlflowClient(uri)
    return client.search_runs([client.get_experiment_by_name(experiment).experiment_id])


STUDY = """
name: duo
seed: 0
data:
  source: synthetic
  synthetic: {task: reverse, vocab_size: 12, min_len: 3, max_len: 6, train_size: 200, val_size: 16,
              test_size: 16}
  max_len: 8
  batch_tokens: 256
model: {d_model: 16, heads: 2, encoder_layers: 1, decoder_layers: 1, d_ff: 32, dropout: 0.0}
train:
  max_steps: 60
  eval_every: 20
  checkpoint_every: 5
  threads: 1
  schedule: {name: inverse_sqrt, warmup_steps: 10}
eval: {metric: exact_match, samples: 0}
tracking: {log_checkpoint: false}
ablation:
  axes: {model.residual: [pre_norm, post_norm], model.ffn: [linear, conv1d]}
"""


def _study(folder: Path, delay: float = 0.0, storage: str | None = None) -> subprocess.Popen[str]:
    shared = ["--storage", storage] if storage else []
    return subprocess.Popen([sys.executable, "-m", "ablate", "ablate", "spec.yaml", "--workers", "2",
                             *shared],
                            cwd=folder, env=_env(f"sqlite:///{folder / 'mlflow.db'}", delay),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _cell_steps(folder: Path) -> int:
    best = -1
    for ckpt in folder.glob("runs/*/*/last.pt"):
        try:
            best = max(best, int(load_checkpoint(ckpt)["state"]["step"]))
        except Exception:  # noqa: BLE001 - replaced while read
            continue
    return best


@pytest.mark.soak
@pytest.mark.slow
@pytest.mark.postgres
def test_a_two_worker_study_survives_sigterm_and_sigkill_at_random_steps(tmp_path: Path, postgres_url: str,
                                                                         rng: random.Random) -> None:
    """`ablate study --workers 2 --storage postgresql://...` (the study a cluster's machines share): SIGTERM
    to the parent alone (Kubernetes) at a random step (the workers get it forwarded, checkpoint and re-queue
    their cells; exit 143, every MLflow run terminal), then a SIGKILL at another random step (the workers die
    with the parent), then the same command to the end: every cell has exactly one MLflow run, FINISHED,
    with the weights and metric steps of an uninterrupted two-worker study."""
    name = f"duo-{os.getpid()}-{int(time.time())}"  # its own study in a store other sessions may share
    ref, box = tmp_path / "ref", tmp_path / "faulty"
    for folder in (ref, box):
        folder.mkdir()
        (folder / "spec.yaml").write_text(STUDY.replace("name: duo\n", f"name: {name}\n"))
    done = _study(ref)  # the reference on the default journal store: only its results are compared
    out, err = done.communicate(timeout=600)
    assert done.returncode == 0, err

    proc = _study(box, delay=0.1, storage=postgres_url)
    _when(proc, lambda: _cell_steps(box) >= rng.randint(1, 50), timeout=300)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    _no_traceback(proc, out, err)
    assert proc.returncode == 143, err
    (line,) = [m for m in _messages(err) if m.startswith("interrupted")]
    # The resume command is the one that was started: its workers and its shared store.
    assert line.startswith("interrupted by SIGTERM:")
    assert f"`ablate study spec.yaml --workers 2 --storage {postgres_url}`" in line
    uri = f"sqlite:///{box / 'mlflow.db'}"
    statuses = {r.data.tags.get("ablate.status"): r.info.status for r in _runs_of(uri, name)}
    assert "RUNNING" not in statuses.values() and statuses.get("interrupted") == "KILLED", statuses

    proc = _study(box, delay=0.1, storage=postgres_url)
    _when(proc, lambda: _cell_steps(box) >= rng.randint(1, 55), timeout=300)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    again = _study(box, storage=postgres_url)
    out, err = again.communicate(timeout=600)
    assert again.returncode == 0, err
    _no_traceback(again, out, err)

    runs = _runs_of(uri, name)
    ref_runs = _runs_of(f"sqlite:///{ref / 'mlflow.db'}", name)
    cells = [r for r in runs if "ablate.cell" in r.data.tags]
    assert sorted(r.data.tags["ablate.cell"] for r in cells) == sorted(
        r.data.tags["ablate.cell"] for r in ref_runs if "ablate.cell" in r.data.tags)  # each cell once
    assert all(r.info.status == "FINISHED" for r in runs)
    client, ref_client = MlflowClient(uri), MlflowClient(f"sqlite:///{ref / 'mlflow.db'}")
    for run in cells:
        key = run.data.tags["ablate.cell"]
        (twin,) = [r for r in ref_runs if r.data.tags.get("ablate.cell") == key]
        for metric in ("train/loss", "val/loss", "val/exact_match"):
            got = [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, metric)]
            assert len({s for s, _ in got}) == len(got), (key, metric)
            want = [(m.step, m.value) for m in ref_client.get_metric_history(twin.info.run_id, metric)]
            assert sorted(got) == sorted(want), (key, metric)
        a = load_checkpoint(box / "runs" / name / key / "last.pt")["model"]
        b = load_checkpoint(ref / "runs" / name / key / "last.pt")["model"]
        assert all(torch.equal(t, a[k]) for k, t in b.items()), key
