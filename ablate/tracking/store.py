"""MLflow stores for ablate: which one (URI precedence), where artifacts go, the experiment of a study,
the environment recorded on every run, and reading runs and models back.

``MLFLOW_TRACKING_URI`` > ``tracking.uri`` > ``sqlite:///mlflow.db`` in the working directory, with
artifacts in ``./mlartifacts`` beside the database, where a plain ``mlflow ui`` (or ``ablate ui``) started
in that folder finds them. MLflow's own client-side default for a sqlite store would put artifacts in
``./mlruns``; ablate never writes there, and refuses ``file:`` stores.
"""

from __future__ import annotations

import functools
import os
import platform
import re
import socket
import subprocess
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlparse

import mlflow
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from ablate.errors import AblateError

if TYPE_CHECKING:
    import torch

DEFAULT_DB = "mlflow.db"
ARTIFACTS_DIR = "mlartifacts"


# ---------------------------------------------------------------- stores
def resolve_tracking_uri(spec_uri: str | None = None) -> str:
    """``MLFLOW_TRACKING_URI`` > ``tracking.uri`` > ``sqlite:///<cwd>/mlflow.db``; never a file store."""
    uri = os.environ.get("MLFLOW_TRACKING_URI") or spec_uri
    if not uri:
        return f"sqlite:///{Path.cwd() / DEFAULT_DB}"
    if urlparse(uri).scheme in ("", "file"):
        raise AblateError(
            f"tracking URI {uri!r} is MLflow's deprecated file store (./mlruns); use sqlite:///mlflow.db, "
            "a database URL (postgresql://...) or the http:// address of an mlflow server"
        )
    return uri


def is_server_uri(uri: str) -> bool:
    """True when the store is an `mlflow server` reached over HTTP, which then decides where artifacts go."""
    return urlparse(uri).scheme in ("http", "https", "databricks")


def artifact_root(uri: str) -> Path | None:
    """Where runs of a database store keep their artifacts: ``mlartifacts/`` beside a sqlite file, else in
    the working directory; None for a server, which has its own (its ``--artifacts-destination``)."""
    if is_server_uri(uri):
        return None
    if uri.startswith("sqlite:///"):
        db = unquote(uri[len("sqlite:///"):].split("?", 1)[0])
        if db and db != ":memory:":
            return Path(db).resolve().parent / ARTIFACTS_DIR
    return Path.cwd() / ARTIFACTS_DIR


def experiment_id(client: MlflowClient, name: str, uri: str) -> str:
    """Get or create the experiment; two workers creating it at once both end up with the same id."""
    exp = client.get_experiment_by_name(name)
    if exp is None:
        root = artifact_root(uri)
        # One folder per experiment, named after it: runs then sit at mlartifacts/<name>/<run_id>/artifacts.
        location = (root / (re.sub(r"[^A-Za-z0-9_.\-]+", "_", name)[:100] or "experiment")).as_uri() \
            if root else None
        try:
            return client.create_experiment(name, artifact_location=location)
        except MlflowException as e:
            if e.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
            exp = client.get_experiment_by_name(name)  # lost the race: the other process created it
            if exp is None:
                raise
    if exp.lifecycle_stage == "deleted":
        client.restore_experiment(exp.experiment_id)
    return str(exp.experiment_id)


# ---------------------------------------------------------------- environment
def _git(args: list[str], cwd: Path) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None  # no git, not a repository, or a repository without commits
    return out.stdout.strip()


@functools.cache
def environment() -> dict[str, str]:
    """Versions, host and the git commit of the code that ran (ablate's source tree, else the cwd)."""
    env = {"python": platform.python_version(), "host": socket.gethostname(), "platform": platform.platform()}
    for package in ("ablate", "torch", "mlflow"):
        try:
            env[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            env[package] = "unknown"
    for where in (Path(__file__).resolve().parent, Path.cwd()):
        commit = _git(["rev-parse", "HEAD"], where)
        if commit:
            env["git_commit"] = commit
            changes = _git(["status", "--porcelain", "--untracked-files=no"], where)
            env["git_dirty"] = "true" if changes else "false"
            break
    return env


# ---------------------------------------------------------------- reading back
def use_uri(uri: str) -> None:
    """Point MLflow's fluent API (used by mlflow.pytorch) at ``uri``. `mlflow.set_tracking_uri` also
    exports MLFLOW_TRACKING_URI, which would then outrank every later spec's tracking.uri in
    `resolve_tracking_uri` and leak into child processes: the variable is put back as it was."""
    before = os.environ.get("MLFLOW_TRACKING_URI")
    mlflow.set_tracking_uri(uri)
    if before is None:
        os.environ.pop("MLFLOW_TRACKING_URI", None)
    else:
        os.environ["MLFLOW_TRACKING_URI"] = before


def _client(tracking_uri: str | None) -> MlflowClient:
    return MlflowClient(tracking_uri or resolve_tracking_uri(None))


def load_model(run_id: str, *, tracking_uri: str | None = None, map_location: str = "cpu") -> torch.nn.Module:
    """The last model `Tracker.log_model` logged in ``run_id`` (a pickle: trusted stores only)."""
    import mlflow.pytorch

    client = _client(tracking_uri)
    run = client.get_run(run_id)
    outputs = run.outputs.model_outputs if run.outputs else []
    if not outputs:
        raise AblateError(f"MLflow run {run_id} has no logged model (set tracking.log_model: true)")
    model_id = max(outputs, key=lambda o: o.step).model_id
    use_uri(client.tracking_uri)
    return mlflow.pytorch.load_model(f"models:/{model_id}", map_location=map_location)


def download_artifacts(run_id: str, path: str = "", dst: str | Path | None = None, *,
                       tracking_uri: str | None = None) -> Path:
    """Copy a run's artifact (file or folder; "" for all) to ``dst`` (a temporary folder if None)."""
    uri = tracking_uri or resolve_tracking_uri(None)
    local = mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path=path or None,
                                                dst_path=None if dst is None else str(dst), tracking_uri=uri)
    return Path(local)


@dataclass
class RunRow:
    """One run as `ablate runs` lists it."""

    experiment: str
    run_id: str
    name: str
    status: str  # ablate.status, else MLflow's status in lower case
    tags: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    start_time: int = 0


def list_runs(experiment: str | None = None, *, tracking_uri: str | None = None) -> list[RunRow]:
    """Runs of one experiment (AblateError if it does not exist) or of all, oldest first."""
    client = _client(tracking_uri)
    if experiment is not None:
        exp = client.get_experiment_by_name(experiment)
        if exp is None:
            names = ", ".join(e.name for e in client.search_experiments()) or "none"
            raise AblateError(f"no MLflow experiment {experiment!r} in {client.tracking_uri}; found: {names}")
        experiments = [exp]
    else:
        experiments = list(client.search_experiments())
    rows: list[RunRow] = []
    for exp in experiments:
        token = None
        while True:
            page = client.search_runs([exp.experiment_id], order_by=["attributes.start_time ASC"],
                                      page_token=token)
            for run in page:
                tags = dict(run.data.tags)
                rows.append(RunRow(exp.name, run.info.run_id, run.info.run_name or "",
                                   tags.get("ablate.status", run.info.status.lower()), tags,
                                   dict(run.data.metrics), run.info.start_time or 0))
            token = page.token
            if not token:
                break
    return rows
