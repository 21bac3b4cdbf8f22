"""A tracking server that lets in only its users: a real `mlflow server --app-name basic-auth` on 127.0.0.1
(MLflow's own authentication, configured through its own variables: MLFLOW_AUTH_CONFIG_PATH,
MLFLOW_AUTH_ADMIN_PASSWORD, MLFLOW_FLASK_SERVER_SECRET_KEY). It refuses a request without credentials; a
study records through it with the worker's credentials in MLflow's client variables
(MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD); and the password is printed nowhere, logged nowhere
and recorded in no run (params, tags, artifacts, the run folders and the study's store)."""

from __future__ import annotations

import base64
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import textwrap
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ablate.cli import main
from ablate.tracking.server import start_server, stop_server
from tests.factories import STUDY_CELL, write_tiny_spec

ADMIN = "admin"
USER = "researcher"
SCALING = Path(__file__).resolve().parents[2] / "docs" / "scaling.md"


def call(url: str, path: str, auth: tuple[str, str] | None = None, body: dict[str, Any] | None = None,
         method: str | None = None) -> Any:
    """MLflow's REST API at ``path``, with basic auth when ``auth`` is given."""
    headers = {"Content-Type": "application/json"}
    if auth is not None:
        headers["Authorization"] = "Basic " + base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"{url}{path}", data=data, headers=headers, method=method)
    with urllib.request.urlopen(request, timeout=30) as response:
        text = response.read()
    return json.loads(text) if text else {}


@pytest.fixture
def auth_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, str, str]]:
    """(url, the admin's password, the researcher's password) of a basic-auth server whose user store and
    runs live in tmp_path; the researcher created through the admin API."""
    admin_pw, user_pw = "adm-" + secrets.token_hex(12), "pw-" + secrets.token_hex(12)
    config = tmp_path / "basic_auth.ini"
    config.write_text(f"""[mlflow]
default_permission = NO_PERMISSIONS
database_uri = sqlite:///{tmp_path / 'basic_auth.db'}
admin_username = {ADMIN}
authorization_function = mlflow.server.auth:authenticate_request_basic_auth
auth_cache_ttl_seconds = 300
""")  # the cache: without it every request hashes the password anew (PBKDF2), and a run's records queue
    monkeypatch.setenv("MLFLOW_AUTH_CONFIG_PATH", str(config))
    monkeypatch.setenv("MLFLOW_AUTH_ADMIN_PASSWORD", admin_pw)  # read once, when the admin is created
    monkeypatch.setenv("MLFLOW_FLASK_SERVER_SECRET_KEY", secrets.token_hex(16))
    process, url = start_server("127.0.0.1", 0, f"sqlite:///{tmp_path / 'server.db'}", tmp_path / "artifacts",
                                log_path=tmp_path / "server.log", app_name="basic-auth", timeout=120)
    try:
        call(url, "/api/2.0/mlflow/users/create", (ADMIN, admin_pw), {"username": USER, "password": user_pw})
        for name in ("MLFLOW_AUTH_ADMIN_PASSWORD", "MLFLOW_FLASK_SERVER_SECRET_KEY"):
            monkeypatch.delenv(name)  # the server's, not the study's
        yield url, admin_pw, user_pw
    finally:
        stop_server(process)


def files_holding(folder: Path, secret: str) -> list[str]:
    return [str(p) for p in folder.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]


@pytest.mark.slow
def test_the_server_refuses_strangers_and_a_study_records_through_it_without_leaking_the_password(
        auth_server: tuple[str, str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    url, admin_pw, user_pw = auth_server
    with pytest.raises(urllib.error.HTTPError) as refused:  # no credentials: not even a read
        call(url, "/api/2.0/mlflow/experiments/search", body={"max_results": 10})
    assert refused.value.code == 401
    with pytest.raises(urllib.error.HTTPError) as wrong:
        call(url, "/api/2.0/mlflow/experiments/search", (USER, "not-" + user_pw), {"max_results": 10})
    assert wrong.value.code == 401

    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", url)
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", USER)  # MLflow's own client variables
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", user_pw)
    study = "\nablation:\n  axes: {model.residual: [pre_norm, post_norm]}\n  seeds: [0]\n"
    spec = write_tiny_spec(work, STUDY_CELL, {"name": "guarded", "train.max_steps": 10,
                                              "train.eval_every": 5}, filename="guarded.yaml", extra=study)
    assert main(["study", str(spec)]) == 0
    assert main(["status", str(spec)]) == 0
    printed = capsys.readouterr()

    me = (USER, user_pw)
    found = call(url, "/api/2.0/mlflow/experiments/search", me, {"max_results": 100})["experiments"]
    (exp,) = [e for e in found if e["name"] == "guarded"]
    runs = call(url, "/api/2.0/mlflow/runs/search", me, {"experiment_ids": [exp["experiment_id"]]})["runs"]
    cells = [r for r in runs if {"key": "ablate.kind", "value": "cell"} in r["data"]["tags"]]
    assert len(runs) == 3 and len(cells) == 2
    assert {r["info"]["status"] for r in runs} == {"FINISHED"}, printed.err

    for secret in (user_pw, admin_pw):
        assert secret not in printed.out + printed.err  # printed nowhere
        assert secret not in json.dumps(runs)  # no param, tag or metric of a run
        assert files_holding(work, secret) == []  # run folders, the Optuna journal, the outboxes
        assert files_holding(tmp_path / "artifacts", secret) == []  # spec.yaml, environment.json, ...


@pytest.mark.slow
def test_a_refused_login_is_one_line_before_runs_are_read_or_jobs_submitted(
        auth_server: tuple[str, str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A wrong MLflow password (or none) was a traceback from `ablate runs`, and `--slurm` submitted jobs
    that failed after their time in the queue: now one line, exit 2, the password not repeated."""
    url, _, user_pw = auth_server
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", url)
    spec = write_tiny_spec(tmp_path, STUDY_CELL, {"name": "locked"}, filename="locked.yaml",
                           extra="\nablation:\n  axes: {model.residual: [pre_norm]}\n  seeds: [0]\n")
    slurm = ["study", str(spec), "--slurm", "--dry-run", "--storage", str(tmp_path / "s.journal")]
    wrong = "not-" + user_pw
    for password, who, fix in ((wrong, f"the login of user '{USER}'", "check MLFLOW_TRACKING_USERNAME"),
                               (None, "a request without a login", "set MLFLOW_TRACKING_USERNAME")):
        if password is None:
            monkeypatch.delenv("MLFLOW_TRACKING_USERNAME", raising=False)
            monkeypatch.delenv("MLFLOW_TRACKING_PASSWORD", raising=False)
        else:
            monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", USER)
            monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", password)
        for command in (["runs"], slurm):
            assert main(command) == 2, command
            err = capsys.readouterr().err.strip().splitlines()
            assert err == [f"error: the MLflow server {url} refuses {who} (HTTP 401); {fix} and "
                           "MLFLOW_TRACKING_PASSWORD" + (" (docs/scaling.md)" if password is None else "")]
            assert wrong not in err[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["basic_auth.db", "basic_auth.ini", "locked.yaml",
                                                          "server.db", "server.log"]  # the server's, the spec


@pytest.mark.parametrize("uri", ["http://bob:s3cret-pw@mlflow.lab:5000", "postgresql://bob:s3cret-pw@db/mlflow"])
def test_a_password_in_a_tracking_uri_is_shown_as_stars(uri: str, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """MLflow's variables are the way to pass credentials; a URI that carries one anyway is recorded (the
    run's spec.yaml and its tracking.uri param) and printed with the password as ***."""
    from ablate.spec.experiment import ExperimentSpec
    from ablate.tracking.server import main_ui
    from ablate.tracking.tracker import _spec_yaml

    spec = ExperimentSpec.model_validate({"name": "x", "tracking": {"uri": uri}})
    text = _spec_yaml(spec)
    assert "s3cret-pw" not in text and "bob:***@" in text
    if uri.startswith("http"):
        monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
        assert main_ui() == 0
        out = capsys.readouterr().out
        assert "s3cret-pw" not in out and "http://bob:***@mlflow.lab:5000" in out


def server_recipe() -> str:
    """The bash block of docs/scaling.md that starts the cluster's basic-auth MLflow server, as printed."""
    blocks = [textwrap.dedent(b) for b in re.findall(r"```bash\n(.*?)```", SCALING.read_text(), re.S)]
    (block,) = [b for b in blocks if "mlflow server" in b]
    return block


@pytest.mark.soak
def test_the_cluster_server_recipe_starts_on_loopback_and_lets_in_only_its_users(
        postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/scaling.md's server recipe as a user pastes it, against a real PostgreSQL: its placeholders
    filled (the database host, a port, the artifact folder, the config file), the admin's password typed
    at its `read`. It once named `postgresql://`, which SQLAlchemy 2.1 maps to psycopg 3 (not installed),
    and bound 0.0.0.0 over plain HTTP; now it starts, listens on 127.0.0.1 only, and refuses strangers."""
    import psycopg2

    recipe = server_recipe()
    assert "--host 127.0.0.1" in recipe and "0.0.0.0" not in recipe
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    host = postgres_url.split("@", 1)[1].split("/", 1)[0]  # 127.0.0.1:PORT of the throwaway cluster
    prefix = f"recipe{os.getpid()}_"
    conn = psycopg2.connect(postgres_url)
    conn.autocommit = True
    with conn.cursor() as cur:
        for db in ("mlflow", "mlflow_auth"):
            cur.execute(f"DROP DATABASE IF EXISTS {prefix}{db}")
            cur.execute(f"CREATE DATABASE {prefix}{db}")
    conn.close()
    script = (recipe.replace("USER:PASSWORD@DBHOST/", f"postgres:any@{host}/{prefix}")
              .replace("~/mlflow-auth.ini", str(tmp_path / "mlflow-auth.ini"))
              .replace("--port 5000", f"--port {port}")
              .replace("/shared/mlartifacts", str(tmp_path / "mlartifacts")))
    script += f"echo $! > {tmp_path / 'server.pid'}\n"  # the server's own group: stopped below
    admin_pw, user_pw = "adm-" + secrets.token_hex(12), "pw-" + secrets.token_hex(12)
    monkeypatch.chdir(tmp_path)
    with open(tmp_path / "server.log", "w") as log:  # a file: the server keeps it open after bash ends
        shell = subprocess.run(["bash", "-e", "-c", script], input=admin_pw + "\n", stdout=log, stderr=log,
                               text=True, timeout=60, start_new_session=True)
    assert shell.returncode == 0, (tmp_path / "server.log").read_text()
    server = int((tmp_path / "server.pid").read_text())
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300  # four workers start: minutes on 2 busy cores
        while True:
            try:
                call(url, "/api/2.0/mlflow/users/create", (ADMIN, admin_pw),
                     {"username": USER, "password": user_pw})
                break
            except urllib.error.HTTPError:
                raise
            except (urllib.error.URLError, ConnectionError) as exc:  # not listening yet
                assert time.monotonic() < deadline, f"the recipe's server did not answer: {exc}"
                time.sleep(1.0)
        with pytest.raises(urllib.error.HTTPError) as refused:
            call(url, "/api/2.0/mlflow/experiments/search", body={"max_results": 10})
        assert refused.value.code == 401
        found = call(url, "/api/2.0/mlflow/experiments/search", (USER, user_pw), {"max_results": 10})
        assert isinstance(found, dict)
        listening = subprocess.run(["ss", "-Hltn", f"sport = :{port}"], capture_output=True, text=True)
        if listening.returncode == 0:  # iproute2's ss: the one socket is on the loopback address
            assert [line.split()[3] for line in listening.stdout.splitlines()] == [f"127.0.0.1:{port}"]
    finally:
        group = os.getpgid(server)
        for sig in (signal.SIGTERM, signal.SIGKILL):  # uvicorn's workers may outlast a SIGTERM
            os.killpg(group, sig)
            time.sleep(5.0)
            if subprocess.run(["pgrep", "-g", str(group)], capture_output=True).returncode != 0:
                break
