"""The SLURM jobs of a study: the record ``--slurm`` keeps in the study's folder (``slurm/jobs.json``) and
their states as SLURM tells them now, for `ablate status SPEC`.

A job's state: pending, running, requeued (pending or running again after a preemption or a time limit:
SLURM's restart count), done (its study ran to its end), cancelled (a signal stopped its study: its cells
wait in the queue), failed, or what SLURM says otherwise (timeout, node_fail...). An ended job's words come
from submitit's result file when there is one, so they stay the same once SLURM forgets the job
(``MinJobAge``, 300 s by default): a job stopped by ``scancel`` is "cancelled (SIGTERM)" before and after.
`scontrol show job` needs no accounting database, which small clusters and the tests' one-node SLURM lack.
"""

from __future__ import annotations

import json
import pickle
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

RECORD = "jobs.json"
STOPPED_BY = "ablate: study stopped by"  # how a job's result file says a signal stopped its study
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
    """The study's jobs: its record, and any job submitit wrote a batch script for that the record lacks
    (a driver killed by SIGKILL just after sbatch answered), so `ablate status` shows every job and a
    resubmission names its jobs on from all of them."""
    path = folder / RECORD
    known: list[dict[str, object]] = list(json.loads(path.read_text())) if path.is_file() else []
    ids = {str(job["job_id"]) for job in known}
    for script in sorted(folder.glob("*_submission.sh")):
        job_id = script.name.split("_", 1)[0]
        if job_id.isdigit() and job_id not in ids:
            known.append({"job_id": job_id, "name": _job_name(script), "submitted": script.stat().st_mtime})
            ids.add(job_id)
    return known


def _job_name(script: Path) -> str:
    """The ``#SBATCH --job-name=`` of a batch script submitit wrote ('?' when unreadable)."""
    try:
        lines = script.read_text().splitlines()
    except OSError:
        return "?"
    return next((line.split("=", 1)[1] for line in lines if line.startswith("#SBATCH --job-name=")), "?")


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
        return ended_state(job_result(job_id, folder), None) or "gone (no result written)"
    restarts = int(fields.get("Restarts", "0") or 0)
    if state in LIVE and (restarts or state.startswith("REQUEUE")):
        return f"requeued ({restarts}x), {'running' if state == 'RUNNING' else 'pending'}"
    # COMPLETING: its processes are ending, and a requeue passes through it too: not done yet
    if state in LIVE:
        return {"PENDING": "pending", "RUNNING": "running"}.get(state, state.lower())
    return ended_state(job_result(job_id, folder), state) or state.lower()


def job_result(job_id: str, folder: Path) -> tuple[str, object] | None:
    """submitit's result file of the job: ('success', exit code) or ('error', the traceback's text); None
    before the job wrote one. Written by the job itself into the study's folder (submitit's own format)."""
    for path in sorted(folder.glob(f"{job_id}_*_result.pkl")):
        try:
            with open(path, "rb") as f:
                outcome = pickle.load(f)
        except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError):
            continue  # being written, or not submitit's
        if isinstance(outcome, tuple) and len(outcome) == 2:
            return str(outcome[0]), outcome[1]
    return None


def ended_state(result: tuple[str, object] | None, slurm_state: str | None) -> str | None:
    """An ended job in `ablate status`'s words from its result file: done, cancelled (SIGTERM), failed; or
    SLURM's word without one (None when neither says)."""
    if result is None:
        return {"COMPLETED": "done"}.get(slurm_state or "", slurm_state.lower() if slurm_state else None)
    kind, value = result
    if kind == "success":
        return "done"
    text = str(value)
    if STOPPED_BY in text:
        stopped = text.split(STOPPED_BY, 1)[1].split()[0]
        return f"cancelled ({stopped})"
    last = next((line for line in reversed(text.strip().splitlines()) if line.strip()), "")
    return f"failed ({last.strip()[:120]})" if last else "failed"


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
