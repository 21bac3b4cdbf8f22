"""Local worker processes shared by `ablate study` and `ablate tune`: N spawned processes, each on its
GPU (round robin, ablate/launch/gpu_placement.py) with its share of the CPU cores, a signal passed on to
all of them, and the :class:`~ablate.study.worker_pool.WorkerPool` that hands them to ``study/``."""

from __future__ import annotations

import ctypes
import multiprocessing as mp
import os
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ablate.engine import preempt
from ablate.hardware import WORKER_DEVICE_ENV, visible_gpus
from ablate.launch.gpu_placement import worker_count, worker_devices
from ablate.study.worker_pool import WorkerPool


def local_pool(workers: int) -> WorkerPool:
    """``workers`` local processes (:func:`run_workers`) for a study or search to train with."""
    return WorkerPool(workers, run_workers)


def run_workers(target: Callable[..., int], args: tuple[Any, ...], workers: int,
                gpus: Sequence[int] | None = None) -> int:
    """Run ``target(*args, index, workers)`` in this process (1 worker) or N spawned ones, spread round
    robin over `gpus` (default: the GPUs this process sees; ablate/launch/gpu_placement.py); the worst
    code."""
    if workers <= 1:
        return target(*args, 0, 1)  # on the first GPU: where pick_device puts a run anyway
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
        os.environ[WORKER_DEVICE_ENV] = device  # read by every run this worker trains (pick_device)
    if sys.platform.startswith("linux"):
        try:  # die with the parent (a SIGKILLed `ablate` must not leave orphans training)
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except OSError:
            pass
    torch.set_num_threads(threads_per_worker(workers))  # N workers share the cores, not oversubscribe them
    preempt.install()
    try:
        code = target(*args, index, workers)
    except KeyboardInterrupt:
        code = preempt.exit_code()
    sys.exit(code)


def local_workers(workers: int | None, per_gpu: int | None) -> int:
    """The number of worker processes ``--workers``/``--workers-per-gpu`` ask for on this machine."""
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
