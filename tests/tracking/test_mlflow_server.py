"""Real MLflow servers on 127.0.0.1 over a sqlite store in a temporary folder.

A server takes several seconds to start on a small machine, so one (a plain `mlflow ui` in the folder)
is shared by the module. The folder holds one run logged directly, in ablate's default layout
(mlflow.db + mlartifacts/), so both that server and `ablate ui` are shown a store written without them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import torch
from mlflow import MlflowClient

from ablate.engine.builders import build_model
from ablate.spec.experiment import ExperimentSpec
from ablate.tracking import Tracker, load_model
from ablate.tracking.server import ServerError, free_port, main_ui, start_server, stop_server

pytestmark = pytest.mark.slow
STARTUP = 60.0


def spec(name: str, uri: str) -> ExperimentSpec:
    return ExperimentSpec.model_validate({"name": name, "model": {"d_model": 16, "heads": 2, "d_ff": 32},
                                          "tracking": {"uri": uri}})


def get_json(url: str, body: dict[str, Any] | None = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def wait_until_up(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + STARTUP
    while time.monotonic() < deadline:
        assert process.poll() is None, f"server exited early:\n{log.read_text(errors='replace')}"
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2):
                return
        except (urllib.error.URLError, OSError):
            time.sleep(0.25)
    pytest.fail(f"no answer from {url} in {STARTUP} s:\n{log.read_text(errors='replace')}")


def wait_for_line(log: Path, text: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + STARTUP
    while text not in log.read_text(errors="replace"):
        assert process.poll() is None, f"exited early:\n{log.read_text(errors='replace')}"
        assert time.monotonic() < deadline, f"{text!r} not printed in {STARTUP} s"
        time.sleep(0.05)


def child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    env["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] = "false"
    return env


@pytest.fixture(scope="module", autouse=True)
def _no_env_uri() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("MLFLOW_TRACKING_URI", raising=False)
        yield


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A folder laid out as ablate's default store, holding one finished run: (folder, run id)."""
    folder = tmp_path_factory.mktemp("site")
    tracker = Tracker.start(spec("seeded", f"sqlite:///{folder / 'mlflow.db'}"), run_name="seed-run")
    tracker.log_metrics({"val/loss": 0.75}, step=10)
    tracker.end("finished")
    assert (folder / "mlartifacts" / "seeded" / str(tracker.run_id) / "artifacts" / "spec.yaml").is_file()
    return folder, str(tracker.run_id)


@pytest.fixture(scope="module")
def server(site: tuple[Path, str]) -> Iterator[str]:
    """A plain `mlflow ui` started in the folder: MLflow's own defaults (sqlite:///mlflow.db and
    ./mlartifacts), no store arguments. `start_server` itself is exercised by the `ablate ui` test."""
    folder, _ = site
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = folder / "plain-ui.out"
    with open(log, "wb") as out:
        plain = subprocess.Popen([sys.executable, "-m", "mlflow", "ui", "--port", str(port),
                                  "--workers", "1"], cwd=folder, env=child_env(), stdout=out,
                                 stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_until_up(url, plain, log)
        assert "Using sqlite:///mlflow.db" in log.read_text(errors="replace")
        yield url
    finally:
        stop_server(plain)
    assert plain.poll() is not None


def search_runs(url: str, experiment: str) -> list[dict[str, Any]]:
    exp = get_json(f"{url}/api/2.0/mlflow/experiments/get-by-name?experiment_name={experiment}")
    exp_id = exp["experiment"]["experiment_id"]
    found = get_json(f"{url}/api/2.0/mlflow/runs/search", {"experiment_ids": [exp_id]})
    return list(found.get("runs", []))


def test_run_logged_over_http(server: str, site: tuple[Path, str]) -> None:
    folder, _ = site
    tracker = Tracker.start(spec("over-http", server), run_name="remote")
    assert isinstance(tracker, Tracker)
    for step in (1, 2, 3):
        tracker.log_metrics({"train/loss": 1.0 / step}, step=step)
    tracker.log_text("hello", "notes/hello.txt")
    tracker.end("finished")
    client = MlflowClient(server)
    run = client.get_run(tracker.run_id)
    assert run.info.status == "FINISHED" and run.data.params["model.d_model"] == "16"
    assert [(m.step, m.value) for m in client.get_metric_history(tracker.run_id, "train/loss")] == [
        (1, 1.0), (2, 0.5), (3, 1.0 / 3)]
    # The server owns artifacts here: proxied (mlflow-artifacts:/) into its --artifacts-destination.
    exp = client.get_experiment(tracker.experiment_id)
    assert exp.artifact_location.startswith("mlflow-artifacts:")
    stored = folder / "mlartifacts" / tracker.experiment_id / tracker.run_id / "artifacts"
    assert (stored / "notes" / "hello.txt").read_text() == "hello"


def test_model_logged_over_http_loads_back_from_the_server(server: str,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """tracking.log_model through a server: the weights travel through its artifact proxy and come back
    without unpickling (MLflow's pickle loading switched off), giving the same logits."""
    model_spec = {"d_model": 16, "heads": 2, "d_ff": 32, "encoder_layers": 1, "decoder_layers": 1}
    run_spec = ExperimentSpec.model_validate({"name": "model-over-http", "model": model_spec,
                                              "tracking": {"uri": server, "log_model": True}})
    model = build_model(run_spec.model, 19, 21, pad_id=0, seed=1).eval()
    tracker = Tracker.start(run_spec)
    tracker.log_model(model)
    tracker.end()
    monkeypatch.setenv("MLFLOW_ALLOW_PICKLE_DESERIALIZATION", "false")
    loaded = load_model(tracker.run_id, tracking_uri=server)  # type: ignore[arg-type]
    src, tgt_in = torch.tensor([[4, 7, 9, 2]]), torch.tensor([[1, 5, 6]])
    with torch.no_grad():
        assert torch.equal(loaded(src, tgt_in), model(src, tgt_in))


WORKER = textwrap.dedent("""
    import sys
    from ablate.spec.experiment import ExperimentSpec
    from ablate.tracking import Tracker
    spec = ExperimentSpec(name="concurrent", tracking={"uri": sys.argv[1]})
    tracker = Tracker.start(spec, run_name=sys.argv[2])
    for step in range(int(sys.argv[3])):
        tracker.log_metrics({"train/loss": 1.0 / (step + 1), "train/lr": step * 1e-4, "val/loss": step}, step)
    tracker.end("finished")
""")


def test_two_processes_log_at_once(server: str, tmp_path: Path) -> None:
    """Both create the experiment (a create race) and log every step over HTTP; nothing is lost."""
    steps = 50
    workers = [subprocess.Popen([sys.executable, "-c", WORKER, server, f"worker-{i}", str(steps)],
                                cwd=tmp_path, env=child_env(), stderr=subprocess.PIPE) for i in range(2)]
    for worker in workers:
        _, err = worker.communicate(timeout=180)
        assert worker.returncode == 0, err.decode(errors="replace")
    client = MlflowClient(server)
    exp = client.get_experiment_by_name("concurrent")
    assert exp is not None
    runs = client.search_runs([exp.experiment_id])
    assert sorted(r.info.run_name for r in runs) == ["worker-0", "worker-1"]
    for run in runs:
        assert run.info.status == "FINISHED"
        for key in ("train/loss", "train/lr", "val/loss"):
            logged = client.get_metric_history(run.info.run_id, key)
            assert sorted(m.step for m in logged) == list(range(steps))
    assert not list(tmp_path.iterdir())  # nothing written locally by a client of a server


def test_a_port_in_use_is_refused_before_starting(server: str, tmp_path: Path) -> None:
    """Not mistaken for a server that came up: the one answering there is another."""
    port = int(server.rsplit(":", 1)[1])
    with pytest.raises(ServerError, match=f"port {port} on 127.0.0.1 is in use"):
        start_server("127.0.0.1", port, f"sqlite:///{tmp_path / 'other.db'}", tmp_path / "art",
                     timeout=STARTUP)


def test_a_server_that_dies_at_start_reports_its_log(tmp_path: Path) -> None:
    with pytest.raises(ServerError, match=r"(?s)exited with code [1-9].*its log .*unsupported URI 'nosuchdb://x'"):
        process, _ = start_server("127.0.0.1", 0, "nosuchdb://x", tmp_path / "art", timeout=STARTUP)
        stop_server(process)  # reached only when the test fails: leave no server behind


@pytest.mark.soak
def test_main_ui_serves_the_folder_store_until_ctrl_c(site: tuple[Path, str]) -> None:
    """(f) `ablate ui` in the folder: its REST API lists the run and its artifacts; SIGINT stops it."""
    folder, run_id = site
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = folder / f"ui-{port}.out"
    with open(log, "wb") as out:
        ui = subprocess.Popen([sys.executable, "-c", f"from ablate.tracking import main_ui; "
                               f"raise SystemExit(main_ui('127.0.0.1', {port}))"],
                              cwd=folder, env=child_env(), stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_until_up(url, ui, log)
        # What the user waits for before pressing Ctrl-C: the UI has started (the line comes after the
        # store was read), so the interrupt below never lands in the middle of the start.
        wait_for_line(log, "MLflow UI: ", ui)
        assert run_id in [r["info"]["run_id"] for r in search_runs(url, "seeded")]
        files = get_json(f"{url}/api/2.0/mlflow/artifacts/list?run_id={run_id}")["files"]
        assert {"spec.yaml", "environment.json"} <= {f["path"] for f in files}
    finally:
        ui.send_signal(signal.SIGINT)
        code = ui.wait(timeout=60)
    output = log.read_text(errors="replace")
    assert code == 0, output
    assert f"MLflow UI: {url}" in output and "stopped" in output
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"{url}/health", timeout=2)


def test_plain_mlflow_ui_in_the_folder_shows_runs_and_artifacts(server: str, site: tuple[Path, str]) -> None:
    """What ablate wrote without a server (mlflow.db, mlartifacts/<experiment>/) is what `mlflow ui` shows."""
    _, run_id = site
    assert run_id in [r["info"]["run_id"] for r in search_runs(server, "seeded")]
    with urllib.request.urlopen(f"{server}/get-artifact?path=spec.yaml&run_uuid={run_id}", timeout=10) as r:
        assert b"name: seeded" in r.read()


def command_line(process: psutil.Process) -> list[str]:
    """A child's arguments, or none for one that has exited: mlflow spawns short-lived helpers beside its
    server, and one caught between exit and reaping is a zombie whose command line cannot be read."""
    try:
        return process.cmdline()
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return []


def test_main_ui_with_a_server_uri_just_points_at_it(monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5999")
    assert main_ui("127.0.0.1", 5000) == 0
    assert "open http://127.0.0.1:5999" in capsys.readouterr().out


def test_ctrl_c_while_the_ui_starts_stops_its_server(site: tuple[Path, str]) -> None:
    """Ctrl-C before the server answers: exit 0, no traceback, and no mlflow server left running."""
    folder, _ = site
    port = free_port()
    log = folder / f"ui-early-{port}.out"
    with open(log, "wb") as out:
        ui = subprocess.Popen([sys.executable, "-c", f"from ablate.tracking import main_ui; "
                               f"raise SystemExit(main_ui('127.0.0.1', {port}))"],
                              cwd=folder, env=child_env(), stdout=out, stderr=subprocess.STDOUT)
    parent = psutil.Process(ui.pid)
    servers: list[psutil.Process] = []
    deadline = time.monotonic() + STARTUP
    while not servers:  # the mlflow server has been spawned but needs seconds before it answers
        assert ui.poll() is None and time.monotonic() < deadline, log.read_text(errors="replace")
        servers = [c for c in parent.children() if "server" in command_line(c)]
        time.sleep(0.02)
    ui.send_signal(signal.SIGINT)
    code = ui.wait(timeout=60)
    output = log.read_text(errors="replace")
    assert code == 0, output
    assert "stopped" in output and "Traceback" not in output and "MLflow UI:" not in output
    gone, alive = psutil.wait_procs(servers, timeout=20)
    assert not alive, [command_line(p) for p in alive]
