"""The SLURM jobs of a study: the record ``--slurm`` keeps in the study's folder (``slurm/jobs.json``) and
their states as SLURM tells them now, for `ablate status SPEC`.

A job's state: pending, running, requeued (pending or running again after a preemption or a time limit:
SLURM's restart count), done (finished, or gone from SLURM's memory with submitit's result file written),
or what SLURM says otherwise (failed, cancelled, timeout). `scontrol show job` needs no accounting
database, which small clusters and the tests' one-node SLURM lack.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

RECORD = "jobs.json"
LIVE = ("PENDING", "RUNNING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED")  # not ended yet


def record_jobs(folder: Path, jobs: Sequence[tuple[str, str]]) -> None:
    """Append submitted (job id, name) pairs to the study's record (a resubmission adds its jobs)."""
    path = folder / RECORD
    known = json.loads(path.read_text()) if path.is_file() else []
    known += [{"job_id": job_id, "name": name, "submitted": time.time()} for job_id, name in jobs]
    folder.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(known, indent=1))
    tmp.replace(path)


def recorded_jobs(folder: Path) -> list[dict[str, object]]:
    path = folder / RECORD
    return list(json.loads(path.read_text())) if path.is_file() else []


def job_state(job_id: str, folder: Path) -> str:
    """What SLURM says of the job now, in the words `ablate status` prints."""
    try:
        out = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True,
                             timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown (scontrol did not answer)"
    fields = dict(item.split("=", 1) for item in out.stdout.split() if "=" in item)
    state = fields.get("JobState")
    if out.returncode != 0 or state is None:  # purged from the controller's memory (MinJobAge)
        return "done" if any(folder.glob(f"{job_id}_*_result.pkl")) else "gone (no result written)"
    restarts = int(fields.get("Restarts", "0") or 0)
    if state in LIVE and (restarts or state.startswith("REQUEUE")):
        return f"requeued ({restarts}x), {'running' if state == 'RUNNING' else 'pending'}"
    # COMPLETING: its processes are ending, and a requeue passes through it too: not done yet
    return {"PENDING": "pending", "RUNNING": "running", "COMPLETED": "done"}.get(state, state.lower())


def jobs_lines(folder: Path) -> list[str]:
    """`ablate status`'s lines for the study's SLURM jobs; none when it never ran on SLURM."""
    jobs = recorded_jobs(folder)
    if not jobs:
        return []
    lines = [f"SLURM jobs ({len(jobs)}; logs in {folder}):"]
    for job in jobs:
        job_id = str(job["job_id"])
        lines.append(f"  {job_id:>10}  {job['name']}  {job_state(job_id, folder)}")
    return lines
