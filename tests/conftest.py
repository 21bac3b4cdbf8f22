"""Shared fixtures: a real PostgreSQL server for the multi-machine study/search tests, a one-node SLURM for
the ``--slurm`` tests (`slurm_cluster`, tests/slurm_cluster.py: skipped, with the reason, where it cannot
start).

`postgres_url` uses ``ABLATE_TEST_POSTGRES_URL`` when set (a server CI provides); otherwise it starts a
throwaway cluster from Debian's ``postgresql`` package (initdb into a temporary folder, ``pg_ctl start`` on
127.0.0.1 and a free port, as the ``postgres`` OS user when the tests run as root) and stops it at the end.
Without PostgreSQL binaries the tests that need it are skipped, unless ``CI=true``: there they fail.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


def _pg_bin() -> str | None:
    """The newest /usr/lib/postgresql/<ver>/bin holding initdb and pg_ctl (Debian's layout), or PATH."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(p.split("/")[4]) if p.split("/")[4].isdigit() else 0)
    if found:
        return os.path.dirname(found[-1])
    initdb = shutil.which("initdb")
    return os.path.dirname(initdb) if initdb and shutil.which("pg_ctl") else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_postgres(cmd: list[str]) -> list[str]:
    # PostgreSQL refuses to run as root: hand the server to the `postgres` account Debian creates.
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    env_url = os.environ.get("ABLATE_TEST_POSTGRES_URL")
    if env_url:
        yield env_url
        return
    bindir = _pg_bin()
    if bindir is None:
        reason = ("PostgreSQL is not installed (apt-get install postgresql) and ABLATE_TEST_POSTGRES_URL "
                  "is not set")
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    root = tempfile.mkdtemp(prefix="ablate-pg-")
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
    data, log, port = os.path.join(root, "data"), os.path.join(root, "server.log"), _free_port()
    run = dict(check=True, capture_output=True, text=True, timeout=120)
    try:
        subprocess.run(_as_postgres([f"{bindir}/initdb", "-D", data, "-U", "postgres", "-A", "trust",
                                     "--no-sync", "-E", "UTF8"]), **run)  # type: ignore[call-overload]
        options = f"-h 127.0.0.1 -p {port} -k {root} -c fsync=off -c max_connections=200"
        subprocess.run(_as_postgres([f"{bindir}/pg_ctl", "-D", data, "-l", log, "-o", options, "-w",
                                     "start"]), **run)  # type: ignore[call-overload]
    except subprocess.CalledProcessError as exc:
        shutil.rmtree(root, ignore_errors=True)
        pytest.fail(f"could not start a throwaway PostgreSQL: {exc.stderr or exc.stdout}")
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(_as_postgres([f"{bindir}/pg_ctl", "-D", data, "-m", "immediate", "-w", "stop"]),
                       capture_output=True, timeout=60)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[dict[str, str]]:
    """A one-node SLURM on 127.0.0.1 (Debian's slurm-wlm and munge, started as root); the environment that
    points sbatch and scontrol at it (``SLURM_CONF``)."""
    from tests.slurm_cluster import Unavailable, start_cluster

    try:
        cluster = start_cluster(Path(tempfile.mkdtemp(prefix="ablate-slurm-")) / "cluster")
    except Unavailable as exc:
        pytest.skip(f"no SLURM here: {exc}")
    try:
        yield cluster.env
    finally:
        cluster.stop()


@pytest.fixture
def crashing_ffn() -> Iterator[str]:
    """A real registered FFN component whose forward raises: a cell or trial that crashes mid-training."""
    from torch import nn

    import registry

    class CrashingFFN(nn.Module):
        """Raises in forward (tests: a crashing run must not stop a study)."""

        def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0) -> None:
            super().__init__()
            self.w1 = nn.Linear(d_model, d_ff)

        def forward(self, x: object) -> object:
            raise RuntimeError("boom: this component always crashes")

    registry.REGISTRY.add("ffn", "crash", CrashingFFN)
    try:
        yield "crash"
    finally:
        registry.REGISTRY._entries["ffn"].pop("crash", None)


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run in a temporary folder with its own, empty MLflow sqlite store (inherited by subprocesses)."""
    from tests.stores import mlflow_store

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_store(tmp_path))
    return tmp_path


@pytest.fixture
def bare_workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """`workdir` without the store in it: for tests that check a command writes nothing there."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    return tmp_path


@pytest.fixture(scope="module")
def single_thread() -> Iterator[None]:
    """Run a module's tests on one torch thread, and give the others back their thread count."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def pytest_configure(config: pytest.Config) -> None:
    """Studies started by a test train one cell a process unless the test asks for packs (``--pack K``):
    without it a study probes each shape's packing first (ablate/study/pack_plan.py), seconds a study that
    the tests of everything else need not spend, and a pack on a fast probe would change what they check.

    Under pytest-xdist each worker process owns an equal share of the cores (one each on 2 cores) as its
    affinity mask, so torch, the subprocesses a test starts and ablate's own thread planning
    (`launch.local_workers.usable_cores`) see only that share, and the workers never oversubscribe the
    machine (two 2-thread trainings on 2 cores run several times slower than one after the other)."""
    os.environ.setdefault("ABLATE_PACK_BOUND", "1")  # pack_plan.BOUND_ENV, inherited by subprocesses
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw") or not hasattr(os, "sched_setaffinity"):
        return
    cores = sorted(os.sched_getaffinity(0))
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    share = len(cores) // workers
    if share < 1:
        return  # more workers than cores: leave the scheduler to share them
    index = int(worker[2:])
    os.sched_setaffinity(0, set(cores[index * share:(index + 1) * share]))
    os.environ["OMP_NUM_THREADS"] = str(share)
    os.environ["MKL_NUM_THREADS"] = str(share)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A soak test is a slow test too. The default run leaves the soak tier out through addopts'
    ``-m 'not soak'``, but a ``-m`` on the command line replaces it: the inner loop's ``-m "not slow"``
    used to pull every soak test (a 16-run tuned study among them) back into the fast tier."""
    for item in items:
        if item.get_closest_marker("soak") is not None:
            item.add_marker(pytest.mark.slow)
