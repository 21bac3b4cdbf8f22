"""`ablate study SPEC --slurm`: a study's workers as SLURM jobs, submitted through submitit.

Each of ``--jobs N`` jobs runs what ``ablate study SPEC --workers K`` runs on one machine
(ablate/launch/slurm_job.py): it queues the cells the study still needs, opens or reopens the parent run,
pops cells from the study's Optuna store until none is left, and runs the later arms, the same as any
other machine sharing the store. So every job must reach the same stores: the Optuna store is a
PostgreSQL URL or a journal file named explicitly (on a filesystem every node sees; the default
``.ablate/optuna-journal.log`` is a one-line error here), and MLflow a server or a database (a local
SQLite file is accepted with a note: it suits jobs on one node).

Nothing of ablate keeps running after the submission: the jobs coordinate through the stores, a job
signalled before its time limit or a preemption requeues itself (submitit's SIGUSR2, wired to the
trainer's step-boundary stop: ablate/launch/slurm_job.py), and `ablate status SPEC` reads the jobs' states
from SLURM (ablate/launch/slurm_queue.py). Logs go to the study's folder, ``<train.out_dir>/<study>/slurm``;
``squeue`` shows each job as ``ablate-<study>-w<i>``.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import submitit
from submitit.core.utils import FailedJobError, FailedSubmissionError
from submitit.slurm.slurm import _make_sbatch_string

from ablate.data.check import check_data
from ablate.dburl import redacted
from ablate.engine import preempt
from ablate.errors import AblateError
from ablate.launch.gpu_placement import worker_count
from ablate.launch.resume import Launched, plural, status_command
from ablate.launch.slurm_job import StudyJob
from ablate.launch.slurm_queue import record_jobs, recorded_jobs
from ablate.launch.wall_time import (
    job_sharing,  # torch: only for the estimate
    remaining_wall_time,
)
from ablate.study.cell_queue import CellQueue
from ablate.study.designs import format_plan, plan_study
from ablate.study.optuna_store import Store
from ablate.study.pack_plan import bound_given, job_pack_lines
from ablate.study.study_plan import StudyPlan
from ablate.tracking.mlflow_store import check_reachable, resolve_tracking_uri

SIGNAL_DELAY_S = 120  # SLURM signals a job this long before its time limit (--signal=USR2@120)
MAX_TIMEOUTS = 100  # requeues after a time limit (submitit's default 3 is too few for a long study)


@dataclass(frozen=True)
class JobShape:
    """What each job asks SLURM for, from the command line (--partition, --gpus-per-job, ...)."""

    jobs: int = 1
    partition: str | None = None
    gpus_per_job: int = 0
    cpus_per_job: int | None = None
    time: str | None = None  # SLURM's format: minutes, HH:MM:SS, D-HH:MM...
    sbatch: tuple[str, ...] = field(default_factory=tuple)  # KEY=VALUE or KEY: sbatch --KEY=VALUE


def main_slurm(spec_path: str, overrides: list[str], storage: str | None, dry_run: bool,
               workers: int | None, workers_per_gpu: int | None, jobs: int = 1, partition: str | None = None,
               gpus_per_job: int = 0, cpus_per_job: int | None = None, time: str | None = None,
               sbatch: Sequence[str] = (), retry_failed: bool = False) -> int:
    """Check the job shape, the stores and (where SLURM is) the sbatch parameters, then print them and the
    estimate (``dry_run``) or submit (``retry_failed``: the study's failed cells queued again first, here,
    once for every job). Every check comes before the first submission, and a refused one leaves nothing
    behind: a located line, exit code 2."""
    shape = JobShape(jobs, partition, gpus_per_job, cpus_per_job, time, tuple(sbatch))
    check_shape(shape)
    plan = plan_study(spec_path, overrides)  # a bad spec: its located errors before anything else
    check_data(spec_path, overrides, plan.spec)  # and its data files, as every command checks them
    shared = shared_storage(storage)
    per_job = job_workers(workers, workers_per_gpu, gpus_per_job)
    folder = log_folder(plan)
    params = executor_parameters(plan, shape)
    check_stores(plan, shared)  # an unreachable store or a refused login: now, not after the queue time
    test_only(params, folder, job_name(plan.name, 0), required=not dry_run)  # sbatch's own refusals
    print(tracking_line(plan))
    if dry_run:
        return _dry_run(plan, shape, shared, per_job, folder, params)
    if retry_failed:
        print(f"{retry_failed_cells(plan, shared)} failed cells queued again", flush=True)
    # what the jobs' logs print to resume the study: this submission, from this folder
    launched = Launched(spec_path, tuple(overrides), 1, shared,
                        submission_flags(shape, workers, workers_per_gpu), str(Path.cwd()))
    job = StudyJob(str(Path(spec_path).resolve()), overrides, shared, per_job, str(Path.cwd()), launched)
    first = len(recorded_jobs(folder))  # a resubmission's jobs are named on from the earlier ones'
    preempt.install()  # a Ctrl-C or SIGTERM between a job's sbatch and its record waits for the record
    submitted = submit(job, params, folder, jobs, plan.name, first,
                       on_submitted=lambda job_id, name: record_jobs(folder, [(job_id, name)]))
    print(f"submitted {plural(jobs, 'SLURM job')} ({', '.join(str(j.job_id) for j in submitted)}), "
          f"{plural(per_job, 'worker process')} each, logs in {folder}; "
          f"`{status_command(spec_path, overrides, shared)}` shows them beside the cells")
    return 0


def check_shape(shape: JobShape) -> None:
    """The job shape's numbers, before anything else: sbatch would refuse some only after the study's
    files were written, and take ``--cpus-per-task=0`` as no request at all."""
    for flag, value, least in (("--jobs", shape.jobs, 1), ("--gpus-per-job", shape.gpus_per_job, 0),
                               ("--cpus-per-job", shape.cpus_per_job, 1)):
        if value is not None and value < least:
            raise AblateError(f"{flag} {value}: expected {least} or more")
    pass_through(shape.sbatch)
    if shape.time:
        time_minutes(shape.time)


def check_stores(plan: StudyPlan, storage: str) -> None:
    """Open the Optuna store and reach the MLflow store (its login too, for a server), as every job will:
    an unreachable host, a wrong password or a missing database is one line here, not a failed job after
    its time in the queue."""
    if "://" in storage:
        Store(storage)
    if plan.spec.tracking.enabled:
        check_reachable(resolve_tracking_uri(plan.spec.tracking.uri))


def test_only(params: dict[str, Any], folder: Path, name: str, *, required: bool) -> None:
    """Ask sbatch whether it would take one job of these parameters (``sbatch --test-only``: SLURM's own
    check of the partition, the resources and every option, which submits nothing), from a script in a
    temporary folder: a refusal is one line before the study's folder exists. A dry run (not
    ``required``) only notes a refusal, or says nothing without sbatch: it may be run away from the
    cluster."""
    if shutil.which("sbatch") is None:
        if required:
            raise AblateError("--slurm: sbatch not found; submit from a machine of the SLURM cluster (a "
                              "login node), or add --dry-run to see the jobs' sbatch parameters")
        return
    with tempfile.TemporaryDirectory(prefix="ablate-sbatch-") as tmp:
        script = Path(tmp) / "job.sh"
        script.write_text(sbatch_script(params, folder, name))
        try:
            out = subprocess.run(["sbatch", "--test-only", str(script)], capture_output=True, text=True,
                                 timeout=60)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise AblateError(f"--slurm: sbatch --test-only did not answer: {exc}") from None
    if out.returncode != 0:
        refusal = f"--slurm: sbatch refuses the jobs: {sbatch_reason(out.stderr or out.stdout)}"
        if required:
            raise AblateError(refusal)
        print(f"note: {refusal}", file=sys.stderr)


def sbatch_reason(text: str) -> str:
    """sbatch's error lines as one line ('sbatch: error: ' prefixes off, repeats and help hints dropped)."""
    reasons: list[str] = []
    for line in text.splitlines():
        line = line.strip().removeprefix("sbatch: ").removeprefix("error: ").strip()
        if line and not line.startswith("Try ") and line not in reasons:
            reasons.append(line)
    return "; ".join(reasons) or "no reason given"


def submission_flags(shape: JobShape, workers: int | None, workers_per_gpu: int | None) -> tuple[str, ...]:
    """The command-line flags of this submission after ``--storage``: ``--slurm`` and the job shape as
    given, so that the command a job prints submits the same jobs again."""
    flags = ["--slurm"]
    if shape.jobs != 1:
        flags.append(f"--jobs {shape.jobs}")
    if workers is not None:
        flags.append(f"--workers {workers}")
    if workers_per_gpu is not None:
        flags.append(f"--workers-per-gpu {workers_per_gpu}")
    for flag, value in (("--partition", shape.partition), ("--gpus-per-job", shape.gpus_per_job or None),
                        ("--cpus-per-job", shape.cpus_per_job), ("--time", shape.time)):
        if value is not None:
            flags.append(f"{flag} {value}")
    flags += [f"--sbatch {option}" for option in shape.sbatch]
    return tuple(flags)


def retry_failed_cells(plan: StudyPlan, storage: str) -> int:
    """Queue the study's failed cells again (``--retry-failed --slurm``): once, at submission, rather than
    by each job; how many were queued. Nothing to do for a study the store has not seen."""
    if not Store.exists(storage):
        return 0
    store = Store(storage)
    plan.bind(store)
    queue = CellQueue(store, plan.store_name, plan.direction, create=False)
    if queue.study is None:
        return 0
    return queue.enqueue([c.attrs() for c in plan.cells], retry_failed=True)[1]


def shared_storage(storage: str | None) -> str:
    """The Optuna store every job reaches, as the jobs will name it (a journal file by its absolute
    path); the implicit default journal is this machine's, so it is refused."""
    if not storage:
        raise AblateError("--slurm needs a store every job reaches: --storage postgresql://USER@HOST/DB, or "
                          "--storage /shared/path/study.journal on a filesystem every node sees")
    if "://" in storage:
        if storage.startswith("sqlite"):
            print(f"note: --storage {storage}: a SQLite file suits jobs on one node only", file=sys.stderr)
        return storage
    return str(Path(storage).resolve())


def tracking_line(plan: StudyPlan) -> str:
    """Where the jobs record their runs; a local SQLite file gets a note (one node only)."""
    if not plan.spec.tracking.enabled:
        return "MLflow: tracking is off in this spec (tracking.enabled: false)"

    uri = resolve_tracking_uri(plan.spec.tracking.uri)
    if uri.startswith("sqlite"):
        return (f"MLflow: {redacted(uri)} (note: a local SQLite file suits jobs on this node only; on a "
                "cluster start an MLflow server and set MLFLOW_TRACKING_URI=http://HOST:PORT or "
                "tracking.uri)")
    return f"MLflow: {redacted(uri)}"


def job_workers(workers: int | None, per_gpu: int | None, gpus_per_job: int) -> int:
    """Worker processes in each job: --workers, else --workers-per-gpu x the job's GPUs, else one per GPU
    (at least one)."""
    if per_gpu is None and workers is None:
        return max(1, gpus_per_job)
    return worker_count(workers, per_gpu, list(range(gpus_per_job)) if per_gpu is not None else [])


def log_folder(plan: StudyPlan) -> Path:
    """The study's folder beside its run folders: submitit's pickles and the jobs' logs."""
    return (Path(plan.spec.train.out_dir) / plan.name / "slurm").resolve()


def time_minutes(text: str) -> int:
    """SLURM's time formats (MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS) in whole minutes."""
    try:
        days, _, clock = text.rpartition("-")
        parts = [int(p) for p in clock.split(":")]
        if days:
            hms = (parts + [0, 0])[:3]
            seconds = int(days) * 86400 + hms[0] * 3600 + hms[1] * 60 + hms[2]
        elif len(parts) == 1:
            seconds = parts[0] * 60
        elif len(parts) == 2:
            seconds = parts[0] * 60 + parts[1]
        else:
            seconds = parts[0] * 3600 + parts[1] * 60 + parts[2]
    except ValueError:
        raise AblateError(f"--time {text!r}: expected minutes, HH:MM:SS or D-HH:MM:SS") from None
    if seconds <= 0 or len(parts) > 3:
        raise AblateError(f"--time {text!r}: expected minutes, HH:MM:SS or D-HH:MM:SS")
    return max(1, -(-seconds // 60))


def pass_through(options: Sequence[str]) -> dict[str, Any]:
    """``--sbatch account=abc --sbatch exclusive`` -> {'account': 'abc', 'exclusive': True}."""
    out: dict[str, Any] = {}
    for option in options:
        key, sep, value = option.lstrip("-").partition("=")
        if not key:
            raise AblateError(f"--sbatch {option!r}: expected KEY=VALUE or KEY (an sbatch option)")
        out[key] = value if sep else True
    return out


def executor_parameters(plan: StudyPlan, shape: JobShape) -> dict[str, Any]:
    """submitit's parameters for every job (its AutoExecutor names; ``name`` is set per job)."""
    params: dict[str, Any] = {
        "nodes": 1, "tasks_per_node": 1,
        "timeout_min": time_minutes(shape.time) if shape.time else 60,
        "slurm_signal_delay_s": SIGNAL_DELAY_S,
        "slurm_additional_parameters": {"requeue": True, **pass_through(shape.sbatch)},
    }
    if shape.gpus_per_job:
        params["gpus_per_node"] = shape.gpus_per_job
    if shape.cpus_per_job:
        params["cpus_per_task"] = shape.cpus_per_job
    if shape.partition:
        params["slurm_partition"] = shape.partition
    return params


def job_name(study: str, index: int) -> str:
    return f"ablate-{study}-w{index}"


def sbatch_script(params: dict[str, Any], folder: Path, name: str) -> str:
    """The batch script submitit writes for one job with `params` (no SLURM needed to see it)."""
    slurm = {k.removeprefix("slurm_"): v for k, v in params.items()}
    slurm["time"] = slurm.pop("timeout_min")
    slurm["ntasks_per_node"] = slurm.pop("tasks_per_node")
    return str(_make_sbatch_string(command="python -u -m submitit.core._submit", folder=folder, job_name=name,
                                   **slurm))


def sbatch_lines(params: dict[str, Any], folder: Path, name: str) -> list[str]:
    """The ``#SBATCH`` lines submitit writes for one job with `params`."""
    return [line for line in sbatch_script(params, folder, name).splitlines() if line.startswith("#SBATCH")]


def _dry_run(plan: StudyPlan, shape: JobShape, storage: str, per_job: int, folder: Path,
             params: dict[str, Any]) -> int:
    print(format_plan(plan, diffs=False))
    print(f"Optuna store: {redacted(storage)}")
    print(f"would submit {plural(shape.jobs, 'job')} ({job_name(plan.name, 0)} ...), "
          f"{plural(per_job, 'worker process')} each, with these sbatch parameters:")
    print("\n".join(f"  {line}" for line in sbatch_lines(params, folder, job_name(plan.name, 0))))
    print("\n".join(job_pack_lines(plan.cells, bound_given())))  # --pack, as set_bound handed it here
    sharing = job_sharing(shape.jobs, per_job, shape.cpus_per_job, shape.gpus_per_job)
    print(remaining_wall_time(plan, _records(plan, storage), sharing))
    return 0


def _records(plan: StudyPlan, storage: str) -> dict[str, Any]:
    """Where the study's cells stand in the store (read only), for the estimate of what is left."""
    if not Store.exists(storage):
        return {}
    store = Store(storage, create=False)
    plan.bind(store)
    return dict(CellQueue(store, plan.store_name, plan.direction, create=False).records())


def submit(job: Any, params: dict[str, Any], folder: Path, jobs: int, study: str, first: int = 0,
           cluster: str = "slurm", on_submitted: Callable[[str, str], None] | None = None) -> list[Any]:
    """Submit `jobs` copies of `job`, the i-th named `job_name(study, first + i)`; submitit's Job of each.
    ``cluster="local"`` runs them with submitit's local executor (the tests' way without SLURM).

    ``on_submitted(job_id, name)`` records each job as soon as sbatch took it, inside `preempt.held`: a
    driver stopped between two submissions leaves every submitted job in the record. The folder (0700) and
    each job's pickle (0600; it holds the ``--storage`` URL, password included) are readable by their owner
    only; a failed submission removes what it wrote and is one line."""
    try:
        executor = submitit.AutoExecutor(folder=folder, cluster=cluster, slurm_max_num_timeout=MAX_TIMEOUTS)
    except RuntimeError as exc:  # submitit's "Could not detect srun": not on a SLURM cluster
        raise AblateError(f"--slurm: {exc}") from None
    executor.update_parameters(**params)
    out: list[Any] = []
    with private_folder(folder):
        for i in range(first, first + jobs):
            executor.update_parameters(name=job_name(study, i))
            before = set(os.listdir(folder))
            with preempt.held():
                try:
                    with contextlib.redirect_stderr(io.StringIO()):  # submitit prints sbatch's refusal too
                        submitted = executor.submit(job)
                except (FailedJobError, FailedSubmissionError) as exc:
                    for leftover in set(os.listdir(folder)) - before:
                        (folder / leftover).unlink(missing_ok=True)
                    done = f" ({len(out)} submitted before it: `ablate status` shows them)" if out else ""
                    raise AblateError(f"--slurm: sbatch refused job {job_name(study, i)}: "
                                      f"{sbatch_reason(str(exc))}{done}") from None
                for path in folder.glob(f"{submitted.job_id}_*"):  # its pickle and batch script
                    if path.is_file() and not path.is_symlink():
                        path.chmod(0o600)
                if on_submitted is not None:
                    on_submitted(str(submitted.job_id), job_name(study, i))
            out.append(submitted)
    return out


@contextlib.contextmanager
def private_folder(folder: Path) -> Iterator[None]:
    """`folder` made (if new) and kept mode 0700: submitit's pickles in it hold the job, the store's password
    with it, and the jobs' logs and a requeue's pickle land there too, so nothing in it is readable by
    others (the jobs' own umask is left alone: their run folders and records stay as the site shares
    them). Each job's pickle and batch script are 0600 besides. A folder left empty is removed."""
    new = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o700)
    try:
        yield
    finally:
        if new and not any(folder.iterdir()):
            folder.rmdir()
