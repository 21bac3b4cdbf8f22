"""Preemption: SIGTERM (SLURM, Kubernetes, systemd), SIGINT (Ctrl-C) and SIGUSR2 (submitit's warning before
a SLURM job's time limit or preemption, ``#SBATCH --signal=USR2@90``) stop a run at a step boundary.

`install` replaces their handlers in a command's process (and in each study worker); a SLURM job of ``ablate
study --slurm`` then requeues itself through submitit (ablate/launch/slurm_job.py). Inside `deferred()`
(the trainer's loop) the first signal only sets a flag: the trainer finishes the optimizer step it is in,
writes its checkpoint and returns ``killed``. Outside it (data preparation, the final evaluation), or at a
second signal, `Preempted` (a KeyboardInterrupt) is raised at once and the last checkpoint already written
is the resume point. The command exits ``128 + signal``: 143 for SIGTERM, 130 for SIGINT (`exit_code`), the
codes a shell and a batch scheduler expect (140 after SIGUSR2; `STOP_CODES`).

The wait for the step boundary is bounded: a very slow step, or an evaluation in progress, could outlast
what the scheduler grants before its SIGKILL. If no boundary comes within `grace_s` seconds of the first
signal (`GRACE_S` = 60, or ``ABLATE_PREEMPT_GRACE_S``; 0 waits without a bound), `Preempted` is raised
where the run is (`late` then says so in the interrupt line): the run stops without a new checkpoint, is
marked interrupted like a second signal would, and resumes from the last checkpoint. 60 s is half of the
120 s the README's SLURM (``--signal=TERM@120``) and Kubernetes (``terminationGracePeriodSeconds: 120``)
recipes grant: the other half is for the checkpoint at a boundary that came just in time, the tracker's
last records (`ablate.tracking.outbox.FINISH_WAIT_S`) and the exit. With a shorter grace from the
scheduler (Kubernetes' default is 30 s), set the variable to about half of it. The bound is a SIGALRM
timer: Python runs its handler between bytecodes, so a single native call that never returns (a hung
collective) is left to the scheduler's SIGKILL.

A signal repeated within `REPEAT_S` seconds counts once: SLURM signals every process of a job step and
`ablate --workers N` forwards a SIGTERM to its workers too, so a worker may see the same stop twice.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

REPEAT_S = 2.0
GRACE_S = 60.0  # seconds the first signal waits for a step boundary (see the module's docstring)
GRACE_ENV = "ABLATE_PREEMPT_GRACE_S"

# SIGUSR2 is submitit's default preemption signal (SUBMITIT_PREEMPT_SIGNAL), which SLURM sends --signal's
# seconds before a job's time limit; SIGUSR1 is left alone (NCCL may use it).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR2)
STOP_CODES = tuple(128 + s for s in STOP_SIGNALS)  # a command or worker stopped by one of them

_requested: int | None = None  # the first signal received, None while none came
_received: set[int] = set()  # every stop signal received (a SIGTERM and SIGUSR2 in a row count once)
_received_at = 0.0
_deferring = 0
_late = False  # the grace ran out before a step boundary came


class Preempted(KeyboardInterrupt):
    """Raised by the handler where a run cannot stop at a step boundary; handled like Ctrl-C."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def install() -> None:
    """Handle SIGTERM and SIGINT in this process (main thread only, as Python requires: elsewhere the
    handlers stay as they are)."""
    reset()
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in STOP_SIGNALS:
        signal.signal(signum, _handler)


def reset() -> None:
    global _requested, _received_at, _late
    _disarm()
    _requested, _received_at, _late = None, 0.0, False
    _received.clear()


def grace_s() -> float:
    """How long the first signal waits for a step boundary: ``ABLATE_PREEMPT_GRACE_S`` or `GRACE_S`."""
    try:
        return float(os.environ.get(GRACE_ENV) or GRACE_S)
    except ValueError:
        return GRACE_S


def _handler(signum: int, frame: FrameType | None) -> None:
    global _requested, _received_at
    now = time.monotonic()
    _received.add(signum)
    if _requested is not None and now - _received_at < REPEAT_S:
        return  # the same stop delivered twice (process group + forwarded): already on its way
    first = _requested is None
    if first:
        _requested, _received_at = signum, now
    if _deferring and first:
        _arm()
        return  # the trainer checkpoints at the end of the step it is in
    _disarm()
    raise Preempted(_requested or signum)


def _arm() -> None:
    seconds = grace_s()
    if seconds > 0 and hasattr(signal, "setitimer"):
        signal.signal(signal.SIGALRM, _grace_over)
        signal.setitimer(signal.ITIMER_REAL, seconds)


def _disarm() -> None:
    if hasattr(signal, "setitimer") and signal.getsignal(signal.SIGALRM) is _grace_over:
        signal.setitimer(signal.ITIMER_REAL, 0)


def _grace_over(signum: int, frame: FrameType | None) -> None:
    global _late
    if _requested is None:
        return  # reset since: nothing to stop
    _late = True
    raise Preempted(_requested)


def at_boundary() -> None:
    """The trainer reached a step boundary after the signal and checkpoints there: no bound any more."""
    _disarm()


def late() -> str:
    """The interrupt line's clause when the grace ran out before a step boundary, else ''."""
    if not _late:
        return ""
    return (f"no step boundary came within {grace_s():g} s ({GRACE_ENV}), so it stopped without a new "
            "checkpoint; ")


def requested() -> int | None:
    """The signal that asked this process to stop, None if none did."""
    return _requested


def received() -> frozenset[int]:
    """Every stop signal this process received since `install` (`requested` is only the first)."""
    return frozenset(_received)


def signal_name() -> str:
    return signal.Signals(_requested).name if _requested is not None else "SIGINT"


def exit_code() -> int:
    """128 + the signal number: 143 after SIGTERM, 130 after SIGINT (also the default: a plain Ctrl-C)."""
    return 128 + (_requested if _requested is not None else signal.SIGINT)


@contextmanager
def deferred() -> Iterator[None]:
    """Within this block the first signal waits for `requested()` to be checked at a step boundary."""
    global _deferring
    _deferring += 1
    try:
        yield
    finally:
        _deferring -= 1


@contextmanager
def held() -> Iterator[None]:
    """A few calls a stop must not cut in two (an MLflow run opened and its id written to the run folder):
    a first signal inside only sets the flag, and `Preempted` is raised once the block has ended, so the
    resumed run finds the id instead of opening a second run for the same cell."""
    before = _requested
    with deferred():
        yield
    # nested in the trainer's deferred(), the step boundary stops the run instead
    if _requested is not None and before is None and not _deferring:
        _disarm()
        raise Preempted(_requested)
