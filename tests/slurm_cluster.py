"""A throwaway one-node SLURM for the ``--slurm`` tests: Debian's slurm-wlm (slurmctld + slurmd) with munge,
on 127.0.0.1, started as root from a slurm.conf written into a temporary folder (tests/conftest.py's
`slurm_cluster` fixture). No cgroups: proctrack/linuxproc, task/none, select/cons_tres.

`start_cluster` returns the environment that points sbatch, squeue and scontrol at it (``SLURM_CONF``), or
raises `Unavailable` with the reason the tests skip for (not root, a binary missing, a daemon that did not
come up: its log's last lines).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "scontrol")
# A requeued job may start again only once its credential expired (SLURM's 120 s by default): short here,
# so that a preempted job restarts within the tests' time.
CRED_EXPIRE_S = 5


class Unavailable(Exception):
    """Why SLURM cannot run here (the tests skip with it)."""


@dataclass
class Cluster:
    root: Path
    env: dict[str, str]
    pids: list[int] = field(default_factory=list)

    def stop(self) -> None:
        """Cancel every job (a job's processes outlive the daemons otherwise), then end the daemons."""
        run = dict(env=self.env, capture_output=True, text=True, timeout=30)
        subprocess.run(["scancel", "--user", "root"], **run)  # type: ignore[call-overload]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            out = subprocess.run(["squeue", "-h", "-o", "%i"], **run)  # type: ignore[call-overload]
            if out.returncode != 0 or not out.stdout.strip():
                break
            time.sleep(1.0)
        for pid in reversed(self.pids):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        time.sleep(1.0)
        shutil.rmtree(self.root, ignore_errors=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _conf(root: Path, ctld_port: int, node_port: int) -> str:
    cpus = os.cpu_count() or 1
    return f"""\
ClusterName=ablatetest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={node_port}
AuthType=auth/munge
AuthInfo=socket={root}/munge/socket,cred_expire={CRED_EXPIRE_S}
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
SlurmUser=root
SlurmdUser=root
ReturnToService=2
MinJobAge=600
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
NodeName=localhost NodeAddr=127.0.0.1 CPUs={cpus} RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
"""


def _start_munge(root: Path) -> None:
    munge = root / "munge"
    munge.mkdir(mode=0o700)
    key = munge / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    subprocess.run(["munged", "--force", f"--socket={munge}/socket", f"--key-file={key}",
                    f"--log-file={munge}/log", f"--pid-file={munge}/pid", f"--seed-file={munge}/seed"],
                   check=True, capture_output=True, timeout=30)


def _pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _wait_idle(env: dict[str, str], root: Path, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        out = subprocess.run(["sinfo", "-h", "-o", "%T"], env=env, capture_output=True, text=True, timeout=30)
        if out.stdout.strip() in ("idle", "mixed"):
            return
        time.sleep(0.5)
    logs = [(root / name) for name in ("slurmctld.log", "slurmd.log")]
    tail = " | ".join(p.read_text().strip().splitlines()[-1] for p in logs if p.is_file() and p.read_text())
    raise Unavailable(f"the one-node SLURM did not come up within {seconds:.0f} s: {tail}")


def start_cluster(root: Path) -> Cluster:
    """Start munged, slurmctld and slurmd for a one-node cluster whose files live in `root`."""
    if os.geteuid() != 0:
        raise Unavailable("SLURM's daemons are started as root here, and the tests do not run as root")
    missing = [d for d in DAEMONS if shutil.which(d) is None]
    if missing:
        raise Unavailable(f"{', '.join(missing)} not installed (apt-get install slurm-wlm munge)")
    for sub in ("state", "spool"):
        (root / sub).mkdir(parents=True)
    conf = root / "slurm.conf"
    conf.write_text(_conf(root, _free_port(), _free_port()))
    env = {**os.environ, "SLURM_CONF": str(conf)}
    cluster = Cluster(root, env)
    try:
        _start_munge(root)
        cluster.pids.append(_pid(root / "munge" / "pid") or 0)
        subprocess.run(["slurmctld", "-f", str(conf)], env=env, check=True, capture_output=True, timeout=60)
        subprocess.run(["slurmd", "-f", str(conf), "-N", "localhost"], env=env, check=True,
                       capture_output=True, timeout=60)
        time.sleep(0.5)
        cluster.pids += [p for p in (_pid(root / "slurmctld.pid"), _pid(root / "slurmd.pid")) if p]
        _wait_idle(env, root)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        cluster.stop()
        detail = (getattr(exc, "stderr", b"") or b"").decode(errors="replace").strip()
        raise Unavailable(f"could not start SLURM: {exc}: {detail}") from None
    except Unavailable:
        cluster.stop()
        raise
    return cluster
