"""ablate.tracking against a real MLflow store (sqlite in a temporary folder; no mocks).

Creating a sqlite store runs MLflow's migrations (~2 s), so only the test of the default store gets a
fresh one; the others share one store per module and use their own experiment names.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import subprocess
import time
from importlib import metadata
from pathlib import Path

import mlflow
import pytest
import torch
from mlflow import MlflowClient

import ablate
from ablate import cli
from ablate.engine.builders import build_model
from ablate.engine.decode import greedy_decode
from ablate.engine.decoder_only import DecoderOnlyLM
from ablate.errors import AblateError
from ablate.spec.experiment import ExperimentSpec, flatten
from ablate.tracking import (
    MAX_PARAM_VALUE,
    NullTracker,
    Tracker,
    artifact_root,
    download_artifacts,
    list_runs,
    load_model,
    main_runs,
    resolve_tracking_uri,
)
from ablate.tracking import mlflow_store as tracking_store
from ablate.tracking import models as tracking_models
from ablate.tracking.server import free_port


@pytest.fixture(autouse=True)
def _no_env_uri(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One sqlite store shared by the tests of this module (a tracking.uri, not the cwd default)."""
    return f"sqlite:///{tmp_path_factory.mktemp('store') / 'mlflow.db'}"


def make_spec(name: str, uri: str | None = None, **tracking: object) -> ExperimentSpec:
    model = {"d_model": 16, "heads": 2, "d_ff": 32}
    return ExperimentSpec.model_validate({"name": name, "seed": 3, "model": model,
                                          "tracking": {"uri": uri, **tracking}})


def history(client: MlflowClient, run_id: str, key: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))


def expected_params(spec: ExperimentSpec) -> dict[str, str]:
    return {k: v if isinstance(v, str) else json.dumps(v, separators=(",", ":"))
            for k, v in flatten(spec.resolved()).items()}


# ---------------------------------------------------------------- stores
def test_uri_precedence_env_then_spec_then_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert resolve_tracking_uri(None) == f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert resolve_tracking_uri("http://127.0.0.1:5000") == "http://127.0.0.1:5000"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "postgresql+psycopg2://u@db/mlflow")
    assert resolve_tracking_uri("http://127.0.0.1:5000") == "postgresql+psycopg2://u@db/mlflow"
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    for file_store in ("./mlruns", "mlruns", f"file://{tmp_path}/mlruns"):
        with pytest.raises(AblateError, match="file store"):
            resolve_tracking_uri(file_store)


@pytest.mark.postgres
@pytest.mark.slow
def test_a_plain_postgresql_url_is_a_working_mlflow_store(postgres_url: str, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """`tracking.uri: postgresql://...` as users write it (no driver named) against a real PostgreSQL server:
    the run, its params and metric steps land in the database, its artifacts beside the working folder."""
    import psycopg2

    monkeypatch.chdir(tmp_path)
    conn = psycopg2.connect(resolve_tracking_uri(postgres_url).replace("+psycopg2", ""))
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute("DROP DATABASE IF EXISTS ablate_mlflow_test")
        cur.execute("CREATE DATABASE ablate_mlflow_test")
    conn.close()
    plain = postgres_url.rsplit("/", 1)[0] + "/ablate_mlflow_test"
    assert plain.startswith("postgresql://")
    spec = make_spec("pg-store", plain)
    tracker = Tracker.start(spec, run_name="on-postgres")
    assert isinstance(tracker, Tracker)
    tracker.log_metrics({"val/loss": 2.5}, step=10)
    tracker.log_metrics({"val/loss": 1.5}, step=20)
    tracker.end("finished")
    client = MlflowClient(resolve_tracking_uri(plain))
    run = client.get_run(tracker.run_id)
    assert run.info.status == "FINISHED" and run.data.tags["ablate.status"] == "finished"
    assert run.data.params == expected_params(spec)
    assert history(client, tracker.run_id, "val/loss") == [(10, 2.5), (20, 1.5)]
    assert (tmp_path / "mlartifacts").is_dir() and not (tmp_path / "mlruns").exists()


def test_artifacts_sit_beside_the_sqlite_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert artifact_root(f"sqlite:///{tmp_path / 'a' / 'x.db'}") == tmp_path / "a" / "mlartifacts"
    assert artifact_root("sqlite:///mlflow.db") == tmp_path / "mlartifacts"
    assert artifact_root("postgresql://u@db/mlflow") == tmp_path / "mlartifacts"
    assert artifact_root("http://127.0.0.1:5000") is None


@pytest.mark.slow
def test_default_store_round_trip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """(a) cwd default store: params, metrics with steps, tags, artifacts and dataset read back."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ckpt.txt").write_text("weights")
    corpus = tmp_path / "train.de"
    corpus.write_text("ein satz\n")
    spec = make_spec("default-store")
    tracker = Tracker.start(spec, run_name="base", tags={"ablate.variant": "pre_norm"})
    assert isinstance(tracker, Tracker)
    steps = [0, 10, 20, 30]
    for step in steps:
        tracker.log_metrics({"train/loss": 5.0 - step / 10, "train/lr": 1e-3 * (step + 1)}, step=step)
    tracker.log_metrics({"val/loss": 1.25, "val/bleu": 12.5}, step=30)
    tracker.set_tags({"custom": "yes"})
    tracker.log_text("a -> b\n", "samples/step30.txt")
    tracker.log_dict({"bleu": 12.5}, "results.json")
    tracker.log_artifact(tmp_path / "ckpt.txt", "checkpoints")
    tracker.log_dataset("synthetic-reverse", "0123456789abcdef", "synthetic:reverse/v1")
    tracker.log_dataset("multi30k", "feedbeef", str(corpus), context="eval")
    tracker.end("finished")

    assert (tmp_path / "mlflow.db").is_file()
    assert not (tmp_path / "mlruns").exists()
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = client.get_experiment_by_name("default-store")
    assert exp is not None
    assert [r.info.run_id for r in client.search_runs([exp.experiment_id])] == [tracker.run_id]
    run = client.get_run(tracker.run_id)
    assert run.info.status == "FINISHED" and run.info.run_name == "base"
    assert run.data.params == expected_params(spec)
    assert run.data.params["train.optimizer.betas"] == "[0.9,0.98]"
    assert history(client, tracker.run_id, "train/loss") == [(s, 5.0 - s / 10) for s in steps]
    assert history(client, tracker.run_id, "val/bleu") == [(30, 12.5)]
    tags = run.data.tags
    assert {k: tags[k] for k in ("ablate.study", "ablate.variant", "ablate.seed", "ablate.spec_hash",
                                  "ablate.status", "custom")} == {
        "ablate.study": "default-store", "ablate.variant": "pre_norm", "ablate.seed": "3",
        "ablate.spec_hash": spec.spec_hash, "ablate.status": "finished", "custom": "yes"}
    assert tags["ablate.host"] == socket.gethostname()
    assert tags["ablate.version.torch"] == torch.__version__
    assert tags["ablate.version.mlflow"] == mlflow.__version__
    ablate_dir = Path(__file__).resolve().parents[2] / "ablate"
    git = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ablate_dir, capture_output=True, text=True)
    if git.returncode == 0:
        assert tags["mlflow.source.git.commit"] == git.stdout.strip()
    # Artifacts: under ./mlartifacts/<experiment>/, where `mlflow ui` in this folder finds them.
    assert run.info.artifact_uri == (tmp_path / "mlartifacts" / "default-store" / tracker.run_id
                                     / "artifacts").as_uri()
    listed = {a.path for a in client.list_artifacts(tracker.run_id)}
    assert listed == {"spec.yaml", "environment.json", "samples", "results.json", "checkpoints"}
    assert [a.path for a in client.list_artifacts(tracker.run_id, "checkpoints")] == ["checkpoints/ckpt.txt"]
    env = json.loads(download_artifacts(tracker.run_id, "environment.json", tmp_path / "dl").read_text())
    assert env["torch"] == torch.__version__
    assert (download_artifacts(tracker.run_id, "samples/step30.txt", tmp_path / "dl").read_text()
            == "a -> b\n")
    assert run.inputs is not None
    inputs = {i.dataset.name: i for i in run.inputs.dataset_inputs}
    assert inputs["synthetic-reverse"].dataset.digest == "0123456789abcdef"
    assert "synthetic:reverse/v1" in inputs["synthetic-reverse"].dataset.source
    assert inputs["multi30k"].dataset.source_type == "local"
    assert str(corpus) in inputs["multi30k"].dataset.source
    assert {(t.key, t.value) for t in inputs["multi30k"].tags} == {("mlflow.data.context", "eval")}


RESULT_PACKAGES = ("sacrebleu", "tokenizers", "datasets", "optuna", "numpy", "pydantic", "torch", "mlflow",
                   "ablate")


def cpu_model_name() -> str:
    """What the CPU is called, read here independently of ablate.tracking.mlflow_store: the model name
    (which the full name recorded starts with)."""
    if Path("/proc/cpuinfo").is_file():
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.split(":")[0].strip() == "model name":
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


@pytest.mark.slow
def test_environment_is_recorded_as_tags_and_artifact(store: str, tmp_path: Path) -> None:
    """The versions that decide results, the CPU (and GPU) are read back from the store, not from ablate."""
    tracker = Tracker.start(make_spec("environment", store))
    tracker.end()
    client = MlflowClient(store)
    tags = client.get_run(tracker.run_id).data.tags  # type: ignore[arg-type]
    for package in RESULT_PACKAGES:
        assert tags[f"ablate.version.{package}"] == metadata.version(package), package
    assert tags["ablate.version.python"] == platform.python_version()
    assert tags["ablate.cpu"].startswith(cpu_model_name()) and cpu_model_name() != ""
    env = json.loads(download_artifacts(tracker.run_id, "environment.json", tmp_path,  # type: ignore[arg-type]
                                        tracking_uri=store).read_text())
    assert {p: env[p] for p in RESULT_PACKAGES} == {p: metadata.version(p) for p in RESULT_PACKAGES}
    assert env["cpu"] == tags["ablate.cpu"] and env["cpu_count"] == str(os.cpu_count())
    if torch.cuda.is_available():
        assert env["gpu"] == tags["ablate.gpu"] == torch.cuda.get_device_name(0)
        assert env["gpu_count"] == str(torch.cuda.device_count())
    else:
        assert "gpu" not in env and "ablate.gpu" not in tags


def test_cpu_model_without_cpuinfo(tmp_path: Path) -> None:
    (tmp_path / "cpuinfo").write_text("processor\t: 0\nmodel name\t: Example CPU @ 3.00GHz\n")
    assert tracking_store.cpu_model(tmp_path / "cpuinfo") == "Example CPU @ 3.00GHz"
    # a virtual machine's bare family name gets the numbers and bf16 units that tell its CPUs apart
    (tmp_path / "cpuinfo").write_text(
        "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\nmodel name\t: AMD EPYC\n"
        "stepping\t: 1\nflags\t\t: fpu avx2 avx512f avx512_bf16\n\nprocessor\t: 1\nmodel name\t: Other\n")
    full = "AMD EPYC (family 25, model 17, stepping 1; bf16)"
    assert tracking_store.cpu_model(tmp_path / "cpuinfo") == full
    (tmp_path / "cpuinfo").write_text("cpu family\t: 23\nmodel\t: 49\nmodel name\t: AMD EPYC\nflags\t: avx2")
    assert tracking_store.cpu_model(tmp_path / "cpuinfo") == "AMD EPYC (family 23, model 49)"
    expected = platform.processor() or platform.machine()
    assert tracking_store.cpu_model(tmp_path / "missing") == expected


def test_disabled_tracking_is_a_null_tracker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with Tracker.start(make_spec("off", enabled=False)) as tracker:
        assert type(tracker) is NullTracker and tracker.run_id is None
        tracker.log_metrics({"train/loss": 1.0}, step=1)
        tracker.log_text("x", "x.txt")
        assert tracker.log_model(torch.nn.Linear(2, 2)) is None
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- layout
def test_a_table_logged_again_replaces_the_earlier_one(store: str, tmp_path: Path) -> None:
    """A study parent logs its cells table each time `ablate study` stops: the table MLflow shows is the
    latest (MlflowClient.log_table would append every invocation's rows), in the format MLflow's own table
    reader takes, with a diverged cell's NaN as null, and listed once as a table for the UI."""
    tracker = Tracker.start(make_spec("tables", store), run_name="study")
    assert isinstance(tracker, Tracker)
    client = MlflowClient(store)
    tracker.log_table({"cell": ["a", "b"], "bleu": [31.5, float("nan")]}, "cells.json")
    first = json.loads(Path(client.download_artifacts(tracker.run_id, "cells.json", str(tmp_path)))
                       .read_text())
    assert first == {"columns": ["cell", "bleu"], "data": [["a", 31.5], ["b", None]]}
    tracker.log_table({"cell": ["a", "b", "c"], "bleu": [31.5, 0.6, 30.2]}, "cells.json")
    tracker.end("finished")

    tracking_store.use_uri(store)  # load_table finds the runs with MLflow's fluent search
    table = client.load_table(tracker.experiment_id, "cells.json", run_ids=[tracker.run_id])
    assert table["cell"].tolist() == ["a", "b", "c"]
    assert table["bleu"].tolist() == pytest.approx([31.5, 0.6, 30.2])  # pandas parses JSON floats loosely
    tags = client.get_run(tracker.run_id).data.tags
    assert json.loads(tags["mlflow.loggedArtifacts"]) == [{"path": "cells.json", "type": "table"}]


def test_long_and_many_params(store: str) -> None:
    tracker = Tracker.start(make_spec("params", store))
    assert isinstance(tracker, Tracker)
    many = {f"extra.p{i}": i for i in range(250)}  # more than one log_batch of params
    tracker.log_params({**many, "extra.long": "x" * (MAX_PARAM_VALUE + 500)})
    tracker.end()
    params = MlflowClient(store).get_run(tracker.run_id).data.params
    assert len(params["extra.long"]) == MAX_PARAM_VALUE and params["extra.long"].endswith("...")
    assert all(params[k] == str(v) for k, v in many.items())


def test_parent_and_child_runs(store: str) -> None:
    """(b) a study parent with child cells open at once; children point at it with mlflow.parentRunId."""
    spec = make_spec("study-b", store)
    parent = Tracker.start(spec, run_name="study")
    assert isinstance(parent, Tracker)
    children = [Tracker.start(spec, run_name=f"cell-{v}", parent_run_id=parent.run_id,
                              tags={"ablate.variant": v}) for v in ("pre_norm", "post_norm")]
    for child in children:
        child.log_metrics({"val/loss": 1.0}, step=5)
        child.end("finished")
    parent.end("finished")
    client = MlflowClient(store)
    exp = client.get_experiment_by_name("study-b")
    assert exp is not None
    found = client.search_runs([exp.experiment_id], f"tags.`mlflow.parentRunId` = '{parent.run_id}'")
    assert {r.info.run_id for r in found} == {c.run_id for c in children}
    assert {r.data.tags["ablate.variant"] for r in found} == {"pre_norm", "post_norm"}
    assert "mlflow.parentRunId" not in client.get_run(parent.run_id).data.tags


def test_a_metric_keeps_the_time_it_was_measured(store: str) -> None:
    """The trainer flushes a window of metrics at once; each value is stamped when it was measured (MLflow's
    wall-time axis), and a value given no time is stamped when it is logged."""
    tracker = Tracker.start(make_spec("stamps", store), run_name="cell")
    measured = [1_700_000_000_000 + 250 * i for i in range(3)]
    for step, stamp in zip((10, 20, 30), measured, strict=True):
        tracker.log_metrics({"train/loss": float(step)}, step=step, timestamp_ms=stamp)
    before = int(time.time() * 1000)
    tracker.log_metrics({"train/loss": 40.0}, step=40)
    tracker.end("finished")
    points = MlflowClient(store).get_metric_history(tracker.run_id, "train/loss")
    logged = sorted(points, key=lambda m: m.step)
    assert [m.timestamp for m in logged[:3]] == measured
    assert before <= logged[3].timestamp <= int(time.time() * 1000)


def test_resume_reopens_the_same_run_and_logs_each_step_once(store: str) -> None:
    """(c) killed at step 40, resumed from the checkpoint at step 20: steps 30, 40 replayed are dropped."""
    spec = make_spec("resume", store)
    client = MlflowClient(store)
    first = Tracker.start(spec, run_name="cell")
    assert isinstance(first, Tracker)
    for step in range(0, 50, 10):
        first.log_metrics({"train/loss": float(step)}, step=step)
    first.end("killed")
    assert client.get_run(first.run_id).info.status == "KILLED"

    again = Tracker.start(spec, resume_run_id=first.run_id)
    assert isinstance(again, Tracker) and again.run_id == first.run_id
    assert client.get_run(first.run_id).info.status == "RUNNING"
    assert client.get_run(first.run_id).data.tags["ablate.status"] == "running"
    assert again.last_step("train/loss") == 40
    for step in range(30, 80, 10):
        again.log_metrics({"train/loss": step + 0.5}, step=step)
    again.end("finished")

    exp = client.get_experiment_by_name("resume")
    assert exp is not None
    assert len(client.search_runs([exp.experiment_id])) == 1
    run = client.get_run(first.run_id)
    assert run.info.status == "FINISHED" and run.data.tags["ablate.status"] == "finished"
    assert history(client, first.run_id, "train/loss") == [
        (0, 0.0), (10, 10.0), (20, 20.0), (30, 30.0), (40, 40.0), (50, 50.5), (60, 60.5), (70, 70.5)]
    # Same spec, same machine: nothing to add beside what the run was created with.
    assert {a.path for a in client.list_artifacts(first.run_id)} == {"spec.yaml", "environment.json"}


def test_resume_keeps_identity_tags_and_survives_a_changed_param(store: str, tmp_path: Path) -> None:
    """A resume may come with other tracking options (not part of the run's identity): MLflow refuses to
    change a param, so the old value stays and the key is listed; the creation tags stay too."""
    first = Tracker.start(make_spec("resume-params", store), run_name="cell-a", tags={"ablate.variant": "a"})
    first.end("killed")
    again = Tracker.start(make_spec("resume-params", store, async_logging=True), resume_run_id=first.run_id)
    again.log_params({"extra.new": 1})
    again.end("finished")
    client = MlflowClient(store)
    run = client.get_run(first.run_id)  # type: ignore[arg-type]
    assert run.data.params["tracking.async_logging"] == "false" and run.data.params["extra.new"] == "1"
    assert run.data.tags["ablate.params_changed"] == "tracking.async_logging"
    assert (run.data.tags["ablate.variant"], run.info.run_name) == ("a", "cell-a")
    assert (run.info.status, run.data.tags["ablate.status"]) == ("FINISHED", "finished")
    # spec.yaml stays the one the params describe; the spec the run was resumed with is kept beside it.
    assert {a.path for a in client.list_artifacts(first.run_id)} == {  # type: ignore[arg-type]
        "spec.yaml", "spec.resumed.yaml", "environment.json"}
    spec_yaml = client.download_artifacts(first.run_id, "spec.yaml", str(tmp_path))  # type: ignore[arg-type]
    resumed_yaml = client.download_artifacts(first.run_id, "spec.resumed.yaml",  # type: ignore[arg-type]
                                             str(tmp_path))
    assert "async_logging: false" in Path(spec_yaml).read_text()
    assert "async_logging: true" in Path(resumed_yaml).read_text()


@pytest.mark.parametrize("scheme", ["http", "postgresql+psycopg2"])
def test_an_unreachable_store_is_a_one_line_error(scheme: str, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing listens there: an AblateError naming the store, instead of MLflow's minutes of retries and
    a traceback; the password is not shown and nothing is written locally."""
    monkeypatch.chdir(tmp_path)
    port = free_port()
    uri = f"{scheme}://user:secret@127.0.0.1:{port}/mlflow"
    what = "MLflow server" if scheme == "http" else "postgresql database"
    with pytest.raises(AblateError, match=f"cannot reach the {what} .*127.0.0.1:{port}") as raised:
        Tracker.start(make_spec("unreachable", uri))
    assert "secret" not in str(raised.value) and "\n" not in str(raised.value)
    assert list(tmp_path.iterdir()) == []


def test_ablate_runs_with_an_unreachable_server_exits_2(monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{free_port()}")
    assert cli.main(["runs"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("error: cannot reach the MLflow server")


def test_resume_of_an_unknown_run_is_a_user_error(store: str) -> None:
    with pytest.raises(AblateError, match="cannot resume"):
        Tracker.start(make_spec("resume-bad", store), resume_run_id="0" * 32)


@pytest.mark.parametrize(("status", "mlflow_status"), [
    ("finished", "FINISHED"), ("diverged", "FINISHED"), ("pruned", "FINISHED"),
    ("failed", "FAILED"), ("killed", "KILLED")])
def test_end_status(store: str, status: str, mlflow_status: str) -> None:
    """(d) every ablate status ends the run (never RUNNING) with the documented MLflow status."""
    tracker = Tracker.start(make_spec("statuses", store), run_name=status)
    assert isinstance(tracker, Tracker)
    tracker.log_metrics({"train/loss": float("nan")}, step=3)  # a diverged run keeps its last metrics
    tracker.end(status)  # type: ignore[arg-type]
    tracker.end("finished")  # a second end changes nothing
    run = MlflowClient(store).get_run(tracker.run_id)
    assert (run.info.status, run.data.tags["ablate.status"]) == (mlflow_status, status)
    assert run.info.end_time is not None


def test_unknown_status_is_rejected(store: str) -> None:
    tracker = Tracker.start(make_spec("statuses", store))
    with pytest.raises(ValueError, match="unknown run status"):
        tracker.end("done")  # type: ignore[arg-type]
    tracker.end("finished")


def test_context_manager_statuses(store: str) -> None:
    spec = make_spec("context", store)
    client = MlflowClient(store)
    with pytest.raises(ZeroDivisionError):
        with Tracker.start(spec, run_name="crash") as crashed:
            1 / 0  # noqa: B018
    with pytest.raises(KeyboardInterrupt):
        with Tracker.start(spec, run_name="ctrl-c") as interrupted:
            raise KeyboardInterrupt
    with Tracker.start(spec, run_name="ok") as ok:
        ok.log_metrics({"val/loss": 0.5}, step=1)
    crash = client.get_run(crashed.run_id)  # type: ignore[arg-type]
    assert (crash.info.status, crash.data.tags["ablate.status"]) == ("FAILED", "failed")
    assert crash.data.tags["ablate.error"] == "ZeroDivisionError: division by zero"
    assert client.get_run(interrupted.run_id).info.status == "KILLED"  # type: ignore[arg-type]
    assert client.get_run(ok.run_id).info.status == "FINISHED"  # type: ignore[arg-type]


def test_detach_leaves_the_run_open_for_others(store: str) -> None:
    """A study's parent handed over to other processes: RUNNING, and the exit hook leaves it alone."""
    from ablate.tracking import tracker as tracking

    parent = Tracker.start(make_spec("detached", store), run_name="study")
    parent.detach()
    parent.end("killed")  # after detach, this process no longer owns the run
    assert parent not in tracking._OPEN
    run = MlflowClient(store).get_run(parent.run_id)  # type: ignore[arg-type]
    assert (run.info.status, run.data.tags["ablate.status"]) == ("RUNNING", "running")
    again = Tracker.start(make_spec("detached", store), resume_run_id=parent.run_id)
    again.end("finished")
    assert MlflowClient(store).get_run(parent.run_id).info.status == "FINISHED"  # type: ignore[arg-type]


# ---------------------------------------------------------------- models, async, system metrics
def test_log_model_of_any_module_needs_allow_pickle(store: str, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """(g) a plain module comes back only through mlflow.pytorch's pickle, which must be asked for; nothing
    is written to ./mlruns."""
    monkeypatch.chdir(tmp_path)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3)).eval()
    tracker = Tracker.start(make_spec("models", store))
    assert isinstance(tracker, Tracker)
    uri = tracker.log_model(model)
    tracker.end()
    with pytest.raises(AblateError, match="pickled module.*allow_pickle=True"):
        load_model(tracker.run_id, tracking_uri=store)
    loaded = load_model(tracker.run_id, tracking_uri=store, allow_pickle=True)
    x = torch.randn(5, 4)
    assert torch.equal(loaded(x), model(x))
    assert uri is not None and uri.startswith("models:/")
    client = MlflowClient(store)
    logged = client.get_logged_model(uri.removeprefix("models:/"))
    assert logged.experiment_id == tracker.experiment_id and logged.source_run_id == tracker.run_id
    assert client.get_run(tracker.run_id).data.tags["ablate.model_uri"] == uri
    assert not (tmp_path / "mlruns").exists()
    assert not (Path(store[len("sqlite:///"):]).parent / "mlruns").exists()
    # mlflow.set_tracking_uri exports MLFLOW_TRACKING_URI; left set, it would outrank the next spec's uri.
    assert "MLFLOW_TRACKING_URI" not in os.environ
    without = Tracker.start(make_spec("models", store))
    without.end()
    with pytest.raises(AblateError, match="no logged model"):
        load_model(without.run_id, tracking_uri=store)  # type: ignore[arg-type]
    with pytest.raises(AblateError, match="no MLflow run"):
        load_model("0" * 32, tracking_uri=store)


def test_an_ablate_model_comes_back_without_unpickling(store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """(g) a real ablate model, logged and loaded back: same weights, logits and greedy translations. It is
    rebuilt from its spec and a weights_only state dict: with MLflow's pickle loading switched off it still
    loads, and both entry points (ablate.tracking.load_model, ablate.tracking.models.load_model) give the
    same model."""
    spec = ExperimentSpec.model_validate({
        "name": "ablate-model", "seed": 3, "tracking": {"uri": store, "log_model": True},
        "model": {"d_model": 16, "heads": 2, "d_ff": 32, "encoder_layers": 1, "decoder_layers": 2,
                  "embeddings": "tied", "positions": "learned", "norm": "custom", "max_positions": 128}})
    model = build_model(spec.model, 23, 23, pad_id=0, seed=5).eval()
    tracker = Tracker.start(spec)
    uri = tracker.log_model(model, step=7)
    tracker.end()
    assert uri is not None
    monkeypatch.setenv("MLFLOW_ALLOW_PICKLE_DESERIALIZATION", "false")
    loaded = load_model(tracker.run_id, tracking_uri=store)  # type: ignore[arg-type]
    again = tracking_models.load_model(tracker.run_id, tracking_uri=store)  # type: ignore[arg-type]
    assert type(loaded) is type(model) and not loaded.training
    assert loaded.generator.weight is loaded.tgt_embed.weight  # tied stays tied
    reference = model.state_dict()
    for other in (loaded, again):
        assert other.state_dict().keys() == reference.keys()
        assert all(torch.equal(other.state_dict()[k], v) for k, v in reference.items())
    src = torch.tensor([[5, 9, 3, 17, 2, 0], [4, 8, 15, 16, 2, 2]])  # the first row padded (pad_id 0)
    tgt_in = torch.tensor([[1, 6, 7], [1, 11, 12]])
    with torch.no_grad():
        assert torch.equal(loaded(src, tgt_in), model(src, tgt_in))
    assert greedy_decode(loaded, src, 1, 2, 12) == greedy_decode(model, src, 1, 2, 12)  # type: ignore[arg-type]
    # Still a genuine mlflow.pytorch model: MLflow's own loader (pickle, trusted here) reads it too.
    import mlflow.pytorch

    monkeypatch.setenv("MLFLOW_ALLOW_PICKLE_DESERIALIZATION", "true")
    tracking_store.use_uri(store)  # not mlflow.set_tracking_uri: it would export MLFLOW_TRACKING_URI
    with torch.no_grad():
        assert torch.equal(mlflow.pytorch.load_model(uri)(src, tgt_in), model(src, tgt_in))


def test_a_decoder_only_model_comes_back_without_unpickling(store: str,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A decoder-only language model is logged like the encoder-decoder: its weights and builder arguments
    beside the MLflow model, so it loads back with MLflow's pickle loading switched off, as the same
    architecture with the same weights and logits (it was logged as a bare pickle before)."""
    spec = ExperimentSpec.model_validate({
        "name": "lm-model", "seed": 3, "tracking": {"uri": store, "log_model": True},
        "data": {"source": "synthetic", "synthetic": {"task": "recall"}},
        "model": {"arch": "decoder_only", "d_model": 16, "heads": 2, "d_ff": 32, "decoder_layers": 2,
                  "positions": "rope", "max_positions": 128}})
    model = ablate.build_model(spec.model, 19, 19, pad_id=0, seed=5).eval()
    assert isinstance(model, DecoderOnlyLM)  # the public builder follows model.arch
    tracker = Tracker.start(spec)
    tracker.log_model(model, step=2)
    tracker.end()
    monkeypatch.setenv("MLFLOW_ALLOW_PICKLE_DESERIALIZATION", "false")
    loaded = load_model(tracker.run_id, tracking_uri=store)  # type: ignore[arg-type]
    assert type(loaded) is DecoderOnlyLM and not loaded.training
    assert all(torch.equal(loaded.state_dict()[k], v) for k, v in model.state_dict().items())
    ids = torch.tensor([[4, 9, 3, 17, 2, 11]])
    with torch.no_grad():
        assert torch.equal(loaded(ids), model(ids))


def test_async_logging_is_flushed_by_end(store: str) -> None:
    """(h) asynchronous batches are all in the store once end() returns."""
    tracker = Tracker.start(make_spec("async", store, async_logging=True))
    assert isinstance(tracker, Tracker)
    for step in range(60):
        tracker.log_metrics({"train/loss": 1.0 / (step + 1), "train/lr": step * 1e-4}, step=step)
    assert tracker._transport._pending  # type: ignore[attr-defined]  # really asynchronous: futures waiting
    tracker.end()
    client = MlflowClient(store)
    assert [s for s, _ in history(client, tracker.run_id, "train/loss")] == list(range(60))
    assert history(client, tracker.run_id, "train/lr")[-1] == (59, pytest.approx(59e-4))


def test_system_metrics(store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL", "0.2")
    tracker = Tracker.start(make_spec("system", store, system_metrics=True))
    wanted = {"system/cpu_utilization_percentage", "system/system_memory_usage_megabytes"}
    client = MlflowClient(store)
    deadline = time.monotonic() + 60  # the sampler logs every 0.2 s; a busy machine may take far longer
    while not wanted <= set(client.get_run(tracker.run_id).data.metrics):  # type: ignore[arg-type]
        assert time.monotonic() < deadline, "MLflow's system-metrics sampler logged nothing in 60 s"
        time.sleep(0.1)
    tracker.end()
    metrics = client.get_run(tracker.run_id).data.metrics  # type: ignore[arg-type]
    assert wanted <= set(metrics)


# ---------------------------------------------------------------- listing
@pytest.mark.slow
def test_list_runs_and_main_runs_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store)
    spec = make_spec("table")
    for variant, status, loss in (("pre_norm", "finished", 1.5), ("post_norm", "diverged", 9.25)):
        tracker = Tracker.start(spec, run_name=f"cell-{variant}", tags={"ablate.variant": variant})
        tracker.log_metrics({"val/loss": loss, "val/bleu": 20.0, "test/bleu": 19.0}, step=1)
        tracker.end(status)  # type: ignore[arg-type]
    rows = list_runs("table")
    assert [(r.name, r.status, r.metrics["val/loss"]) for r in rows] == [
        ("cell-pre_norm", "finished", 1.5), ("cell-post_norm", "diverged", 9.25)]
    assert main_runs("table") == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "experiment table (2 runs)"
    assert out[1].split() == ["run", "name", "variant", "seed", "status", "val/loss", "val/bleu", "test/bleu"]
    assert out[3].split() == [rows[1].run_id[:8], "cell-post_norm", "post_norm", "3", "diverged",
                              "9.25", "20", "19"]
    assert main_runs() == 0 and "experiment table (2 runs)" in capsys.readouterr().out
    with pytest.raises(AblateError, match="no MLflow experiment 'missing'"):
        main_runs("missing")
