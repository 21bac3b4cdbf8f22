"""Run an `mlflow server` over ablate's store (`start_server`, and `ablate ui` on 127.0.0.1 printing its URL)
and print tables of runs (`ablate runs [--experiment NAME]`).

The server is a subprocess (``python -m mlflow server``), so this module does not import mlflow itself;
reading runs goes through `ablate.tracking.mlflow_store`. Servers bind to 127.0.0.1 unless told otherwise.
MLflow's GenAI job runner (seven extra worker processes of ~200 MB) is switched off unless asked for: ablate
never submits jobs.
"""

from __future__ import annotations

import math
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ablate.dburl import redacted
from ablate.errors import AblateError
from ablate.spec import metricnames
from ablate.spec.study_ref import study_name
from ablate.tracking import record
from ablate.tracking.comparison_view import (  # mlflow: a study to show
    cell_values,
    comparison_url,
    comparison_view,
    report_path,
    report_url,
    run_url,
)
from ablate.tracking.landing import LandingServer, logged_report, relinked, with_nav
from ablate.tracking.mlflow_store import (
    RunRow,
    artifact_root,
    is_server_uri,
    latest_root_run,
    list_runs,
    resolve_tracking_uri,
)
from ablate.tracking.read import find_study_runs


class ServerError(AblateError):
    """The MLflow server did not come up (port taken, bad store URI); the message ends with its log."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _port_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        # Like uvicorn: SO_REUSEADDR, so a port in TIME_WAIT after a stopped server counts as free.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _url(host: str, port: int) -> str:
    # A server bound to every interface is still reached through the loopback.
    shown = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)
    return f"http://[{shown}]:{port}" if ":" in shown else f"http://{shown}:{port}"


def _log_tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no server log)"


def start_server(host: str = "127.0.0.1", port: int = 5000, backend_uri: str | None = None,
                 artifacts_dir: str | Path | None = None, *, workers: int = 1, timeout: float = 60.0,
                 log_path: str | Path | None = None, jobs: bool = False,
                 app_name: str | None = None) -> tuple[subprocess.Popen[bytes], str]:
    """Start ``mlflow server`` and return (process, url) once ``/health`` answers.

    ``backend_uri`` defaults to `resolve_tracking_uri` (this folder's ``mlflow.db``); artifacts are served
    through the server (``mlflow-artifacts:/``) from ``artifacts_dir``, by default the ``mlartifacts``
    folder beside the database. ``port=0`` picks a free port. The server's output goes to ``log_path``
    (a temporary file if None). Raises `ServerError` with the log's end if it exits or does not answer
    within ``timeout`` seconds. Stop it with `stop_server`. ``app_name="basic-auth"``: MLflow's own
    authentication (users and passwords; its settings come from the environment: MLFLOW_AUTH_CONFIG_PATH,
    MLFLOW_AUTH_ADMIN_PASSWORD, MLFLOW_FLASK_SERVER_SECRET_KEY), /health answering without a login.
    """
    backend = backend_uri or resolve_tracking_uri(None)
    if is_server_uri(backend):
        raise AblateError(f"{redacted(backend)} is already an MLflow server: open it in a browser or log to "
                          "it")
    root = Path(artifacts_dir) if artifacts_dir is not None else artifact_root(backend)
    assert root is not None  # a database store always has one
    port = port or free_port(host)
    if not _port_free(host, port):
        raise ServerError(f"port {port} on {host} is in use (another server?); pick another port")
    log = Path(log_path) if log_path is not None else Path(
        tempfile.mkstemp(prefix="ablate-mlflow-server-", suffix=".log")[1])
    cmd = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", backend,
           "--artifacts-destination", str(root.resolve()), "--host", host, "--port", str(port),
           "--workers", str(workers), *(["--app-name", app_name] if app_name else [])]
    env = dict(os.environ)
    if not jobs:
        env.setdefault("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", "false")
    url = _url(host, port)
    process: subprocess.Popen[bytes] | None = None
    try:
        with _interrupt_after(), open(log, "ab") as out:
            # Its own session: Ctrl-C in the terminal reaches only us, and stop_server ends the whole group.
            process = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                       env=env, start_new_session=True)
        _wait_for_health(process, url, log, timeout)
    except BaseException:
        # Ctrl-C (or any error) while it starts: leave no server behind.
        if process is not None:
            stop_server(process)
        raise
    return process, url


@contextmanager
def _interrupt_after() -> Iterator[None]:
    """Hold a Ctrl-C back until the block ends, then raise it. Around the server's creation: an interrupt
    inside `subprocess.Popen` (the child forked, its handle not returned yet) would leave a server that
    nothing stops. Only the main thread receives signals; elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: held.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if held:
        raise KeyboardInterrupt


def _wait_for_health(process: subprocess.Popen[bytes], url: str, log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        code = process.poll()
        if code is not None:
            raise ServerError(f"mlflow server on {url} exited with code {code}; "
                              f"its log ({log}):\n{_log_tail(log)}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > deadline:
            raise ServerError(f"mlflow server on {url} did not answer within {timeout:.0f} s; "
                              f"its log ({log}):\n{_log_tail(log)}")
        time.sleep(0.25)


def stop_server(process: subprocess.Popen[bytes], timeout: float = 15.0) -> int | None:
    """End the server and the workers it started (SIGTERM to its process group, SIGKILL after
    ``timeout`` s); returns its exit code."""
    if process.poll() is not None:
        return process.returncode
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)  # the group start_server created: the server and its workers only
        except ProcessLookupError:
            break
        try:
            return process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            continue
    return process.wait()


@dataclass(frozen=True)
class Target:
    """What `ablate ui` links: ``url`` opens it (a study: its report, else its comparison view; a run: its
    page), and a study's parent run page (its cells table and plan) beside it. ``report`` is the logged
    report's artifact path in ``run_id``, which `main_ui` serves as the study's landing page."""

    what: str
    url: str
    parent_url: str | None = None
    comparison_url: str | None = None  # a study whose report opens first: its comparison view beside
    rung_urls: tuple[tuple[str, str], ...] = ()  # a ladder: each rung's own comparison, smallest first
    run_id: str | None = None
    report: str | None = None


def _study_target(uri: str, base_url: str, experiment_id: str, run_id: str, tags: dict[str, str],
                  name: str) -> Target:
    """A study's report (where one was logged), its comparison view (written into its experiment, its axes
    fitted to the cells' values; a ladder's also rung by rung) and its parent run page."""
    kind, metric = tags.get(record.KIND, "ablation"), tags.get(record.METRIC, "")
    metric = metric.split(",")[0].strip()  # a search with several objectives: the first
    study = tags.get(record.STUDY, name)
    report = report_url(uri, base_url, experiment_id, run_id)
    logged = report_path(uri, run_id) if report is not None else None
    parent = run_url(base_url, experiment_id, run_id)
    if not metric:
        return Target(f"{kind} study {study}", report or parent, run_id=run_id, report=logged)
    ladder = record.SCALES in tags
    values = cell_values(uri, experiment_id, kind, metric)
    key = comparison_view(uri, experiment_id, kind, metric, ladder, values.get(None))
    how = ("its trials" if kind != "ablation" else "its cells by rung and variant, seeds pooled" if ladder
           else "its cells by variant, seeds pooled")
    compare = comparison_url(base_url, experiment_id, key)
    rungs = tuple(
        (rung, comparison_url(base_url, experiment_id,
                              comparison_view(uri, experiment_id, kind, metric, ladder, cells, rung)))
        for rung, cells in values.items() if rung is not None and ladder and kind == "ablation")
    if report is not None:  # the verdicts first: the report's tables and figures, in the parent run
        return Target(f"{kind} study {study} (its report: verdicts, tables, figures)", report, parent,
                      f"{compare}  ({how}, on {metric})", rungs, run_id, logged)
    return Target(f"{kind} study {study} ({how}, on {metric})", compare, parent, rung_urls=rungs,
                  run_id=run_id)


def latest_target(uri: str, base_url: str) -> Target | None:
    """What was run last in the store: a study (its comparison view, and its parent run) or a single run
    (its page); None for an empty store. URLs go to MLflow 3's model-training view (the UI otherwise
    opens on its GenAI home)."""
    run = latest_root_run(uri)
    if run is None:
        return None
    if run.tags.get(record.KIND) in record.STUDY_KINDS:
        return _study_target(uri, base_url, run.experiment_id, run.run_id, run.tags, run.name)
    return Target(f"run {run.name or run.run_id}", run_url(base_url, run.experiment_id, run.run_id))


def _study_parent(study: str) -> dict[str, Any]:
    """The study's parent run (as `read.find_study_runs` gives it); a spec file names its study."""
    return find_study_runs(study_name(study))[0]


def study_target(parent: dict[str, Any], uri: str, base_url: str) -> Target:
    """A study's comparison view and parent run page, from its parent run (`_study_parent`)."""
    tags = parent["tags"]
    return _study_target(uri, base_url, str(parent["experiment_id"]), parent["run_id"], tags,
                         parent.get("run_name") or parent["run_id"])


def _print_target(target: Target, latest: bool, landing: str | None = None) -> None:
    """The study's links, its landing page (the report, served beside the UI) first where there is one."""
    if landing is not None:
        names = "each variant and rung" if target.rung_urls else "each variant"
        what = f"{target.what.removesuffix(')')}, {names} linked to its runs)"
        print(f"{'latest' if latest else 'open'} {what}: {landing}", flush=True)
        print(f"  the same report in MLflow (its links do not open there): {target.url}", flush=True)
    else:
        print(f"{'latest' if latest else 'open'} {target.what}: {target.url}", flush=True)
    if target.comparison_url is not None:
        print(f"  its runs compared: {target.comparison_url}", flush=True)
    for rung, url in target.rung_urls:
        print(f"  its runs compared at rung {rung}: {url}", flush=True)
    if target.parent_url is not None:
        print(f"  its parent run (cells table, power plan, report): {target.parent_url}", flush=True)


def _landing(target: Target | None, uri: str, url: str, host: str) -> LandingServer | None:
    """The study's report served as its landing page, its run links on the UI at ``url``; None without
    a logged report."""
    if target is None or target.report is None or target.run_id is None:
        return None
    compared = target.comparison_url.split("  (")[0] if target.comparison_url else None
    nav = [*([("its runs compared", compared)] if compared else []),
           *((f"at rung {rung}", link) for rung, link in target.rung_urls),
           *([("its parent run", target.parent_url)] if target.parent_url else []),
           ("this report", target.url), ("every experiment", f"{url}/#/experiments?{record.WORKFLOW_QUERY}")]
    return LandingServer(with_nav(relinked(logged_report(target.run_id, target.report, uri), url), nav), host)


UI_START_S = 240.0  # how long `ablate ui` waits for its MLflow server to answer


class _Terminated(Exception):
    """SIGTERM / SIGHUP reached `ablate ui`: stop the server like Ctrl-C does."""


def _raise_terminated(signum: int, frame: object) -> None:
    raise _Terminated(signal.Signals(signum).name)


def main_ui(host: str = "127.0.0.1", port: int = 5000, *, workers: int = 1, study: str | None = None) -> int:
    """`ablate ui`: serve the MLflow UI over the tracking store until Ctrl-C or SIGTERM, which end the
    server and its workers too (they run in their own process group: see `stop_server`). Prints the
    direct URL of ``study`` (its spec file, name or parent run id: an unknown one is an error before
    anything starts), else of the latest study or run."""
    parent = _study_parent(study) if study is not None else None
    uri = resolve_tracking_uri(None)
    if is_server_uri(uri):
        print(f"MLFLOW_TRACKING_URI is an MLflow server already: open {redacted(uri)}")
        if parent is not None:
            _print_target(study_target(parent, uri, uri.rstrip("/")), latest=False)
        return 0
    # port 0 (any free one): a log of its own, not one that every such UI appends to
    log = Path(tempfile.gettempdir()) / f"ablate-mlflow-ui-{port}.log" if port else Path(
        tempfile.mkstemp(prefix="ablate-mlflow-ui-", suffix=".log")[1])
    previous = {sig: signal.signal(sig, _raise_terminated) for sig in (signal.SIGTERM, signal.SIGHUP)}
    process: subprocess.Popen[bytes] | None = None
    landing: LandingServer | None = None
    try:
        # a server that fails exits at once (start_server notices); one that is slow (MLflow's imports take
        # a minute on two busy cores) is waited for
        process, url = start_server(host, port, uri, workers=workers, log_path=log, timeout=UI_START_S)
        target = latest_target(uri, url) if parent is None else study_target(parent, uri, url)
        landing = _landing(target, uri, url, host)
        print(f"MLflow UI: {url}/#/experiments?{record.WORKFLOW_QUERY}  (store {redacted(uri)}, artifacts "
              f"{artifact_root(uri)}, log {log}); Ctrl-C stops it", flush=True)
        if target is not None:
            _print_target(target, latest=parent is None, landing=None if landing is None else landing.url)
        code = process.wait()
    except (KeyboardInterrupt, _Terminated):  # start_server stops a server that was still starting
        if process is not None:
            stop_server(process)
        print("stopped", flush=True)
        return 0
    finally:
        if landing is not None:
            landing.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print(f"mlflow server exited with code {code}; its log ({log}):\n{_log_tail(log)}", file=sys.stderr)
    return 1


METRIC_COLUMNS = (metricnames.VAL_LOSS, metricnames.VAL_BLEU, metricnames.VAL_EXACT_MATCH,
                  metricnames.TEST_BLEU)


def _cell(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.4g}" if math.isfinite(value) else str(value)


def format_runs(rows: list[RunRow], experiment: str) -> str:
    """One experiment's runs as an aligned text table; metric columns only where some run has them."""
    metrics = [m for m in METRIC_COLUMNS if any(record.result_value(r.metrics,
                                                                    m) is not None for r in rows)] \
        or [record.VAL_LOSS]
    header = ["run", "name", "variant", "seed", "status", *metrics]
    body = [[r.run_id[:8], r.name, r.tags.get(record.VARIANT, "-"), r.tags.get(record.SEED, "-"),
             r.status, *(_cell(record.result_value(r.metrics, m)) for m in metrics)] for r in rows]
    widths = [max(len(str(line[i])) for line in [header, *body]) for i in range(len(header))]
    lines = [f"experiment {experiment} ({len(rows)} runs)"]
    for line in [header, *body]:
        lines.append("  ".join(str(v).ljust(w) for v, w in zip(line, widths, strict=True)).rstrip())
    return "\n".join(lines)


def main_runs(experiment: str | None = None) -> int:
    """`ablate runs`: the runs of one experiment (or of every experiment that has some) as tables."""
    rows = list_runs(experiment)
    by_experiment: dict[str, list[RunRow]] = {}
    for row in rows:
        by_experiment.setdefault(row.experiment, []).append(row)
    if experiment is not None:
        by_experiment.setdefault(experiment, [])
    if not by_experiment:
        print(f"no runs in {resolve_tracking_uri(None)}")
        return 0
    print("\n\n".join(format_runs(group, name) for name, group in by_experiment.items()))
    return 0
