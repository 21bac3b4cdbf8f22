"""Worker processes shared by `ablate ablate` and `ablate tune`, and per-process caches."""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ablate.dburl import redacted
from ablate.engine import preempt

if TYPE_CHECKING:
    from ablate.spec.experiment import ExperimentSpec
    from ablate.tracking import NullTracker


def run_workers(target: Callable[..., int], args: tuple[Any, ...], workers: int,
                gpus: Sequence[int] | None = None) -> int:
    """Run ``target(*args, index, workers)`` in this process (1 worker) or N spawned ones, spread round
    robin over `gpus` (default: the GPUs this process sees; ablate/study/devices.py); the worst code."""
    if workers <= 1:
        return target(*args, 0, 1)  # on the first GPU: where pick_device puts a run anyway
    import multiprocessing as mp

    from ablate.hardware import visible_gpus
    from ablate.study.devices import worker_devices

    devices = worker_devices(workers, visible_gpus() if gpus is None else gpus)
    ctx = mp.get_context("spawn")  # fork would copy torch's thread pools and open connections
    procs = [ctx.Process(target=_worker_entry, args=(target, args, i, workers, devices[i]),
                         name=f"ablate-worker-{i}") for i in range(workers)]
    for p in procs:
        p.start()
    interrupted = False
    while any(p.is_alive() for p in procs):
        try:
            for p in procs:
                p.join()
        except KeyboardInterrupt:
            # Ctrl-C reached the workers too (one process group); a SIGTERM sent to this process only
            # (Kubernetes, systemd) did not: pass it on, so each worker checkpoints and re-queues its cell.
            # A worker counts the same signal twice within a second or two once (ablate/engine/preempt.py).
            interrupted = True
            _forward(procs)
    codes = [p.exitcode or 0 for p in procs]
    if interrupted:
        return preempt.exit_code()
    bad = [c if c > 0 else 1 for c in codes if c]  # a signal (negative code) counts as a failure
    return max(bad) if bad else 0


def _forward(procs: list[Any]) -> None:
    signum = preempt.requested() or signal.SIGINT
    for p in procs:
        if p.is_alive() and p.pid:
            try:
                os.kill(p.pid, signum)
            except ProcessLookupError:
                pass


def _worker_entry(target: Callable[..., int], args: tuple[Any, ...], index: int, workers: int,
                  device: str | None = None) -> None:
    if device is not None:
        from ablate.hardware import WORKER_DEVICE_ENV

        os.environ[WORKER_DEVICE_ENV] = device  # read by every run this worker trains (pick_device)
    if sys.platform.startswith("linux"):
        try:  # die with the parent (a SIGKILLed `ablate` must not leave orphans training)
            import ctypes
            import signal

            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except OSError:
            pass
    import torch

    torch.set_num_threads(threads_per_worker(workers))  # N workers share the cores, not oversubscribe them
    preempt.install()
    try:
        code = target(*args, index, workers)
    except KeyboardInterrupt:
        code = preempt.exit_code()
    sys.exit(code)


def local_workers(workers: int | None, per_gpu: int | None) -> int:
    """The number of worker processes ``--workers``/``--workers-per-gpu`` ask for on this machine."""
    from ablate.hardware import visible_gpus
    from ablate.study.devices import worker_count

    return worker_count(workers, per_gpu, visible_gpus() if per_gpu is not None else [])


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask: taskset, cgroups), else all of them; in a
    SLURM job no more than it was granted (``SLURM_CPUS_PER_TASK``: without cgroups the mask is the
    node's)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    granted = os.environ.get("SLURM_CPUS_PER_TASK", "")
    return min(cores, int(granted)) if granted.isdigit() and int(granted) > 0 else cores


def threads_per_worker(workers: int, cores: int | None = None) -> int:
    """Torch threads for each of `workers` local processes: an equal share of the cores, at least one."""
    return max(1, (usable_cores() if cores is None else cores) // max(1, workers))


def cached_data(spec: Any) -> Any:
    """Prepared data, reused by the next cell/trial of this process with the same data section and seed."""
    from ablate.data.prepare import prepare_data

    key = json.dumps([spec.data.model_dump(mode="json"), spec.seed], sort_keys=True)
    if _DATA.get("key") != key:
        _DATA.clear()
        _DATA.update(key=key, data=prepare_data(spec))
    return _DATA["data"]


_DATA: dict[str, Any] = {}


def leave_open(tracker: Any) -> None:
    """Stop holding a run without ending it (other processes or machines still add children)."""
    tracker.detach()


def open_parent(spec: ExperimentSpec, run_name: str, tags: dict[str, Any], resume_run_id: str | None,
                description: str | None = None) -> NullTracker:
    """Start the study's parent MLflow run, or reopen the one the store remembers. A remembered run the
    tracking store no longer has (mlflow.db deleted, another MLFLOW_TRACKING_URI) gets a fresh parent."""
    from ablate.errors import AblateError
    from ablate.tracking import Tracker

    if resume_run_id:
        try:
            return Tracker.start(spec, run_name=run_name, tags=tags, resume_run_id=resume_run_id)
        except AblateError as exc:
            print(f"note: {exc}; starting a new parent run", file=sys.stderr)
    return Tracker.start(spec, run_name=run_name, tags=tags, description=description)


def resume_command(verb: str, spec_path: str, overrides: Sequence[str], workers: int = 1,
                   storage: str | None = None) -> str:
    """The command that continues a study or search as it was started: the same overrides, workers and
    storage (a password in the storage URL shown as ***: it is not the message's to repeat)."""
    parts = [f"ablate {verb}", spec_path, *(f"--set {o}" for o in overrides)]
    if workers > 1:
        parts.append(f"--workers {workers}")
    if storage:
        parts.append(f"--storage {redacted(storage)}")
    return " ".join(parts)
