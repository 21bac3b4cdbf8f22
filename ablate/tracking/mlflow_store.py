"""MLflow stores for ablate: which one (URI precedence), whether a network store answers, where artifacts
go, the experiment of a study, the environment recorded on every run (environment.json and its tags), and
reading runs and artifacts back (`list_runs`, `download_artifacts`; models: `ablate.tracking.models`).

``MLFLOW_TRACKING_URI`` > ``tracking.uri`` > ``sqlite:///mlflow.db`` in the working directory, with
artifacts in ``./mlartifacts`` beside the database, where a plain ``mlflow ui`` (or ``ablate ui``) started
in that folder finds them. MLflow's own client-side default for a sqlite store would put artifacts in
``./mlruns``; ablate never writes there, and refuses ``file:`` stores.
"""

from __future__ import annotations

import contextlib
import functools
import os
import platform
import re
import socket
import subprocess
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import mlflow
import torch
from mlflow import MlflowClient
from mlflow.data.code_dataset_source import CodeDatasetSource
from mlflow.data.dataset_source_registry import resolve_dataset_source
from mlflow.data.http_dataset_source import HTTPDatasetSource
from mlflow.exceptions import MlflowException
from mlflow.utils.credentials import get_default_host_creds
from mlflow.utils.rest_utils import http_request

from ablate.dburl import redacted, with_installed_driver
from ablate.errors import AblateError
from ablate.tracking import record

DEFAULT_DB = "mlflow.db"
ARTIFACTS_DIR = "mlartifacts"


# ---------------------------------------------------------------- stores
def resolve_tracking_uri(spec_uri: str | None = None) -> str:
    """``MLFLOW_TRACKING_URI`` > ``tracking.uri`` > ``sqlite:///<cwd>/mlflow.db``; never a file store.
    A plain ``postgresql://`` URL gets the installed driver named (see `ablate.dburl`)."""
    uri = os.environ.get("MLFLOW_TRACKING_URI") or spec_uri
    if not uri:
        return f"sqlite:///{Path.cwd() / DEFAULT_DB}"
    if urlparse(uri).scheme in ("", "file"):
        raise AblateError(
            f"tracking URI {uri!r} is MLflow's deprecated file store (./mlruns); use sqlite:///mlflow.db, "
            "a database URL (postgresql://...) or the http:// address of an mlflow server"
        )
    return with_installed_driver(uri)


def is_server_uri(uri: str) -> bool:
    """True when the store is an `mlflow server` reached over HTTP, which then decides where artifacts go."""
    return urlparse(uri).scheme in ("http", "https", "databricks")


# Ports of the schemes a tracking URI may name a network store with, when the URI gives none.
DEFAULT_PORTS = {"http": 80, "https": 443, "postgresql": 5432, "mysql": 3306, "mssql": 1433}


def check_reachable(uri: str, *, attempts: int = 3, timeout: float = 5.0) -> None:
    """Fail fast, as a one-line `AblateError`, when the host of a network store does not accept a TCP
    connection: MLflow itself would retry for minutes (about 4 for a server, 2 for PostgreSQL) and end in
    a traceback; and, for an MLflow server, when it refuses this client's login (`check_login`). Local
    sqlite stores and Databricks are not probed; nor is anything else past the connection (the store's
    own errors say what is wrong there)."""
    parsed = urlparse(uri)
    scheme = parsed.scheme.split("+", 1)[0]  # postgresql+psycopg2 -> postgresql
    if scheme not in DEFAULT_PORTS or not parsed.hostname:
        return
    try:
        port = parsed.port or DEFAULT_PORTS[scheme]
    except ValueError:
        raise AblateError(f"tracking URI {uri!r}: the port is not a number") from None
    error: OSError | None = None
    for attempt in range(attempts):
        try:
            with socket.create_connection((parsed.hostname, port), timeout=timeout):
                pass
            if scheme in ("http", "https"):
                check_login(uri, timeout=timeout)
            return
        except OSError as e:
            error = e
            if attempt + 1 < attempts:
                time.sleep(0.5 * (attempt + 1))  # a server still starting gets a moment
    what = "MLflow server" if scheme in ("http", "https") else f"{scheme} database"
    reason = getattr(error, "strerror", None) or str(error)
    raise AblateError(f"cannot reach the {what} of tracking URI {redacted(uri)} ({parsed.hostname}:{port}: "
                      f"{reason}); start it, or set tracking.uri / MLFLOW_TRACKING_URI to a running store")


LOGIN_REFUSED = (401, 403)  # the HTTP codes of a basic-auth server's refusal: no login, a wrong one


def check_login(uri: str, *, timeout: float = 5.0) -> None:
    """One read through MLflow's REST API with this client's credentials (MLFLOW_TRACKING_USERNAME /
    _PASSWORD, _TOKEN, or the URI's own), so that a server refusing them (``--app-name basic-auth``: 401) is
    one line now rather than a traceback, or a SLURM job failed after its time in the queue. Any other
    answer, or none, is left to the calls that follow (a server still starting, a hung one: the outbox's)."""
    creds = get_default_host_creds(uri)
    try:
        response = http_request(creds, "/api/2.0/mlflow/experiments/search", "GET", max_retries=0,
                                timeout=timeout, params={"max_results": 1})
    except (MlflowException, OSError, ValueError):
        return
    if response.status_code not in LOGIN_REFUSED:
        return
    user = creds.username or urlparse(uri).username
    who = f"the login of user {user!r}" if user else "a request without a login"
    fix = ("check MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD" if user else
           "set MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD (docs/scaling.md)")
    raise AblateError(f"the MLflow server {redacted(uri)} refuses {who} (HTTP {response.status_code}); {fix}")


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


def missing_local_store(uri: str) -> Path | None:
    """The sqlite file of a local store that does not exist yet (opening it would create it), else None:
    a command that only reads says so instead of leaving an empty store behind."""
    if not uri.startswith("sqlite:///"):
        return None
    db = unquote(uri[len("sqlite:///"):].split("?", 1)[0])
    if not db or db == ":memory:" or Path(db).exists():
        return None
    return Path(db).resolve()


def experiment_id(client: MlflowClient, name: str, uri: str, *, description: str = "") -> str:
    """Get or create the experiment; two workers creating it at once both end up with the same id.

    It is tagged as a model-training experiment (`record.EXPERIMENT_KIND`), so MLflow 3's UI opens it on
    its runs, not on an empty GenAI traces page; an experiment ablate made before that tag gets it now.
    ``description`` (the spec's) becomes the experiment's description when it has none."""
    exp = client.get_experiment_by_name(name)
    if exp is None:
        root = artifact_root(uri)
        # One folder per experiment, named after it: runs then sit at mlartifacts/<name>/<run_id>/artifacts.
        location = (root / (re.sub(r"[^A-Za-z0-9_.\-]+", "_", name)[:100] or "experiment")).as_uri() \
            if root else None
        tags = {record.EXPERIMENT_KIND: record.MODEL_TRAINING_KIND,
                **({record.NOTE: description} if description else {})}
        try:
            return client.create_experiment(name, artifact_location=location, tags=tags)
        except MlflowException as e:
            if e.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
            exp = client.get_experiment_by_name(name)  # lost the race: the other process created it
            if exp is None:
                raise
    if exp.lifecycle_stage == "deleted":
        client.restore_experiment(exp.experiment_id)
    if record.EXPERIMENT_KIND not in exp.tags:
        _set_missing_tag(client, exp.experiment_id, record.EXPERIMENT_KIND, record.MODEL_TRAINING_KIND)
    if description and not exp.tags.get(record.NOTE):
        _set_missing_tag(client, exp.experiment_id, record.NOTE, description)
    return str(exp.experiment_id)


def _set_missing_tag(client: MlflowClient, experiment: str, key: str, value: str) -> None:
    """Set an experiment tag that was missing when read. A study's workers all start on an experiment
    without it (an imported study's, one made before the tag existed) and race to add it: MLflow's SQL
    store reads, then inserts, so the losers fail on the table's unique key (``IntegrityError``). A tag
    that another process set meanwhile is what this one wanted: only a failure that left it unset raises."""
    try:
        client.set_experiment_tag(experiment, key, value)
    except MlflowException:
        if key not in client.get_experiment(experiment).tags:
            raise


def dataset_source(source: str) -> Any:
    """An MLflow DatasetSource for a URL, an existing local path, or anything else (hub name, synthetic)."""
    if urlparse(source).scheme in ("http", "https"):
        return HTTPDatasetSource(source)
    if os.path.exists(source):
        with warnings.catch_warnings():  # "can be interpreted in multiple ways": all of them are 'local'
            warnings.simplefilter("ignore", UserWarning)
            return resolve_dataset_source(str(Path(source).resolve()))

    return CodeDatasetSource({"source": source})


# ---------------------------------------------------------------- environment
def _git(args: list[str], cwd: Path) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None  # no git, not a repository, or a repository without commits
    return out.stdout.strip()


# The packages whose versions decide results (kernels, tokenisation, metrics, data, search, parsing); each
# is recorded in environment.json and as an ``ablate.version.<package>`` tag.
RESULT_PACKAGES = ("ablate", "torch", "mlflow", "sacrebleu", "tokenizers", "datasets", "optuna", "numpy",
                   "pydantic")


# /proc/cpuinfo's identity lines: a virtual machine's "model name" is often the bare family ("AMD EPYC"),
# which cannot tell a Zen 2 from a Zen 4 or a CPU with bf16 units from one without.
_CPU_IDENTITY = ("cpu family", "model", "stepping")
_BF16_FLAGS = ("avx512_bf16", "amx_bf16")


def cpu_model(cpuinfo: str | Path = "/proc/cpuinfo") -> str:
    """The CPU's full name: /proc/cpuinfo's model name with its family, model and stepping numbers and
    whether it has bf16 units ("AMD EPYC (family 25, model 17, stepping 1; bf16)"), else
    `platform.processor`, else the machine type: so that runs on different hardware are told apart."""
    fields: dict[str, str] = {}
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as info:
            for line in info:
                key, _, value = line.partition(":")
                if not line.strip():
                    break  # the first processor's block describes them all
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    name = fields.get("model name")
    if not name:
        return platform.processor() or platform.machine() or "unknown"
    numbers = ", ".join(f"{'family' if k == 'cpu family' else k} {fields[k]}" for k in _CPU_IDENTITY
                        if fields.get(k))
    bf16 = "; bf16" if set(fields.get("flags", "").split()) & set(_BF16_FLAGS) else ""
    return f"{name} ({numbers}{bf16})" if numbers or bf16 else name


def _gpu() -> dict[str, str]:
    """Name and count of the CUDA devices, and the CUDA version torch was built with; {} without CUDA."""
    if not torch.cuda.is_available():
        return {}
    try:
        count = torch.cuda.device_count()
        names = sorted({torch.cuda.get_device_name(i) for i in range(count)})
    except RuntimeError:  # a driver that answers is_available but not more: record no GPU, do not fail
        return {}
    return {"gpu": ", ".join(names), "gpu_count": str(count), "cuda": str(torch.version.cuda)}


@functools.cache
def environment() -> dict[str, str]:
    """Versions (python and `RESULT_PACKAGES`), host, platform, CPU model and logical core count, the GPU
    when CUDA is available, and the git commit of the code that ran (ablate's source tree, else the cwd)."""
    env = {"python": platform.python_version(), "host": socket.gethostname(), "platform": platform.platform()}
    for package in RESULT_PACKAGES:
        try:
            env[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            env[package] = "unknown"
    env["cpu"] = cpu_model()
    env["cpu_count"] = str(os.cpu_count() or 0)
    env.update(_gpu())
    for where in (Path(__file__).resolve().parent, Path.cwd()):
        commit = _git(["rev-parse", "HEAD"], where)
        if commit:
            env["git_commit"] = commit
            changes = _git(["status", "--porcelain", "--untracked-files=no"], where)
            env["git_dirty"] = "true" if changes else "false"
            break
    return env


def environment_tags() -> dict[str, str]:
    """The run tags of `environment`: host, CPU (and GPU), a version tag per package, the git commit."""
    env = environment()
    tags = {record.HOST: env["host"], record.CPU: env["cpu"],
            **{f"{record.VERSION_PREFIX}{k}": env[k] for k in ("python", *RESULT_PACKAGES)}}
    if "gpu" in env:
        tags[record.GPU] = env["gpu"]
    if "git_commit" in env:
        tags[record.GIT_COMMIT] = env["git_commit"]
        tags[record.GIT_DIRTY] = env["git_dirty"]
    return tags


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
    uri = tracking_uri or resolve_tracking_uri(None)
    check_reachable(uri)
    return MlflowClient(uri)



@contextlib.contextmanager
def quiet_transfers() -> Iterator[None]:
    """No tqdm bars from MLflow's artifact transfers (reports, model loads); a user setting wins."""
    key = "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"
    old = os.environ.get(key)
    os.environ[key] = old if old is not None else "false"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(key, None)


def download_artifacts(run_id: str, path: str = "", dst: str | Path | None = None, *,
                       tracking_uri: str | None = None) -> Path:
    """Copy a run's artifact (file or folder; "" for all) to ``dst`` (a temporary folder if None)."""
    uri = tracking_uri or resolve_tracking_uri(None)
    check_reachable(uri)
    with quiet_transfers():
        local = mlflow.artifacts.download_artifacts(
            run_id=run_id, artifact_path=path or None, dst_path=None if dst is None else str(dst),
            tracking_uri=uri)
    return Path(local)


@dataclass
class RootRun:
    """A run without a parent: a single run or a study's parent."""

    experiment_id: str
    run_id: str
    name: str
    tags: dict[str, str]


def latest_root_run(tracking_uri: str | None = None) -> RootRun | None:
    """The most recently started run that has no parent (what the user ran last), or None."""
    client = _client(tracking_uri)
    ids = [e.experiment_id for e in client.search_experiments()]
    if not ids:
        return None
    for run in client.search_runs(ids, order_by=["attributes.start_time DESC"], max_results=500):
        if record.PARENT_RUN not in run.data.tags:
            return RootRun(str(run.info.experiment_id), run.info.run_id, run.info.run_name or "",
                           dict(run.data.tags))
    return None


def resolve_run_id(run_id: str, *, tracking_uri: str | None = None) -> str:
    """A full run id from a unique prefix (`ablate runs` prints the first 8 characters); AblateError when
    no run or several runs start with it."""
    missing = missing_local_store(tracking_uri or resolve_tracking_uri(None))
    if missing is not None:  # reading must not leave an empty store behind
        raise AblateError(f"unknown run {run_id!r}: no MLflow store at {missing} (nothing has been tracked "
                          "from this folder; run it here, or set MLFLOW_TRACKING_URI to its store)")
    text = run_id.strip().lower()
    if len(text) == 32 or not text:
        return text
    client = _client(tracking_uri)
    ids = [e.experiment_id for e in client.search_experiments()]
    found: list[str] = []
    token = None
    while ids:
        page = client.search_runs(ids, page_token=token, max_results=1000)
        found += [r.info.run_id for r in page if r.info.run_id.startswith(text)]
        token = page.token
        if not token:
            break
    if len(found) == 1:
        return found[0]
    if not found:
        raise AblateError(f"no MLflow run id starts with {run_id!r} in {client.tracking_uri}")
    raise AblateError(f"run id prefix {run_id!r} is ambiguous: {', '.join(sorted(found)[:5])}"
                      + (" ..." if len(found) > 5 else ""))


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
                                   tags.get(record.STATUS, run.info.status.lower()), tags,
                                   dict(run.data.metrics), run.info.start_time or 0))
            token = page.token
            if not token:
                break
    return rows
