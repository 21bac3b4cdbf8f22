"""One SLURM job of ``ablate study --slurm``: the study's worker loop, and its requeue on preemption.

The job runs `main_ablate` with the job's workers, as ``ablate study SPEC --workers K --storage S`` would
on a machine of its own (spread over the job's GPUs, one share of its CPUs each).

Preemption and time limits go through submitit's own mechanism. SLURM signals the job (SIGUSR2, submitit's
preemption signal: ``#SBATCH --signal=USR2@120``, or ``scancel --signal=USR2 JOBID``); submitit's handler
would checkpoint and requeue at once, wherever the job is. ablate takes the signal first
(ablate/engine/preempt.py): the running cell stops at its next step boundary, writes its checkpoint and goes
back to the study's queue; then the job calls submitit's handler, which calls `StudyJob.checkpoint` and
requeues the job (``scontrol requeue``). The requeued job pops the waiting cell again and resumes it from
its checkpoint, in the same MLflow run (the run folder keeps its run id). A plain SIGTERM (``scancel``)
stops the same way and ends the job: no cell is lost, and a resubmitted study goes on.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

import torch
from submitit.helpers import Checkpointable, DelayedSubmission

from ablate.engine import preempt
from ablate.launch.local_study import main_ablate
from ablate.launch.local_workers import threads_per_worker
from ablate.launch.resume import Launched
from ablate.launch.slurm_queue import STOPPED_BY

PREEMPT_SIGNAL = signal.SIGUSR2  # submitit's default (SUBMITIT_PREEMPT_SIGNAL), handled by engine/preempt.py


class JobStopped(Exception):
    """A job whose study a signal stopped (``scancel``: SIGTERM; Ctrl-C under ``srun``: SIGINT): its cells
    saved their checkpoints and wait in the queue. The message starts with `STOPPED_BY`, which
    ablate/launch/slurm_queue.py reads back from submitit's result file."""

    def __init__(self, signal_name: str, code: int, resume: str) -> None:
        super().__init__(f"{STOPPED_BY} {signal_name} (exit {code}): the running cells saved their "
                         f"checkpoints and went back to the queue; resume with `{resume}`")


class StudyJob(Checkpointable):
    """The callable submitit pickles into each job: the study's spec, overrides, store and workers."""

    def __init__(self, spec_path: str, overrides: list[str], storage: str, workers: int, cwd: str,
                 launched: Launched | None = None) -> None:
        self.spec_path = spec_path
        self.overrides = list(overrides)
        self.storage = storage
        self.workers = workers
        self.cwd = cwd  # the submitting command's folder: a default MLflow store (sqlite) resolves there
        # the submission as typed (--slurm and the job shape), for the hints the job's log prints
        self.launched = launched or Launched(spec_path, tuple(overrides), 1, storage, ("--slurm",), cwd)

    def __call__(self) -> int:
        os.chdir(self.cwd)
        requeue = signal.getsignal(PREEMPT_SIGNAL)  # submitit's checkpoint-and-requeue, replaced below
        if self.workers <= 1:  # spawned workers set their own share (ablate/launch/local_workers.py)
            torch.set_num_threads(threads_per_worker(1))  # the job's CPUs, not the node's
        code = main_ablate(self.spec_path, self.overrides, workers=self.workers, storage=self.storage,
                           launched=self.launched)
        if PREEMPT_SIGNAL in preempt.received() and callable(requeue):
            print(f"{preempt.signal_name()}: the running cells saved their checkpoints at a step boundary; "
                  "requeueing this job", flush=True)
            requeue(PREEMPT_SIGNAL, None)  # calls self.checkpoint, then scontrol requeue, then exits
        if code in preempt.STOP_CODES:
            # Not a success: submitit would record ('success', 143) and log "Job completed successfully",
            # and `ablate status` would call the job done once SLURM forgets it. Raised, the signal is in
            # submitit's result file (read by ablate/launch/slurm_queue.py) and the job ends FAILED.
            raise JobStopped(preempt.signal_name(), code, self.launched.resume())
        return code

    def checkpoint(self, *args: Any, **kwargs: Any) -> DelayedSubmission:
        """What the requeued job runs: this job again (its cells' state is in the stores and run folders)."""
        print("checkpoint: the study's state is in its stores and run folders; the job runs again",
              file=sys.stderr, flush=True)
        return DelayedSubmission(StudyJob(self.spec_path, self.overrides, self.storage, self.workers,
                                          self.cwd, self.launched))
