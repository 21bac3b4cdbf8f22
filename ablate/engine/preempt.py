"""Preemption: SIGTERM (SLURM, Kubernetes, systemd) and SIGINT (Ctrl-C) stop a run at a step boundary.

`install` replaces both handlers in a command's process (and in each study worker). Inside `deferred()`
(the trainer's loop) the first signal only sets a flag: the trainer finishes the optimizer step it is in,
writes its checkpoint and returns ``killed``; the step bounds the delay. Outside it (data preparation,
the final evaluation), or at a second signal, `Preempted` (a KeyboardInterrupt) is raised at once and the
last checkpoint already written is the resume point. The command exits ``128 + signal``: 143 for
SIGTERM, 130 for SIGINT (`exit_code`), the codes a shell and a batch scheduler expect.

A signal repeated within `REPEAT_S` seconds counts once: SLURM signals every process of a job step and
`ablate --workers N` forwards a SIGTERM to its workers too, so a worker may see the same stop twice.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

REPEAT_S = 2.0

_requested: int | None = None  # the first signal received, None while none came
_received_at = 0.0
_deferring = 0


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
    signal.signal(signal.SIGTERM, _handler)
    signal.signal(signal.SIGINT, _handler)


def reset() -> None:
    global _requested, _received_at
    _requested, _received_at = None, 0.0


def _handler(signum: int, frame: FrameType | None) -> None:
    global _requested, _received_at
    now = time.monotonic()
    if _requested is not None and now - _received_at < REPEAT_S:
        return  # the same stop delivered twice (process group + forwarded): already on its way
    first = _requested is None
    if first:
        _requested, _received_at = signum, now
    if _deferring and first:
        return  # the trainer checkpoints at the end of the step it is in
    raise Preempted(_requested or signum)


def requested() -> int | None:
    """The signal that asked this process to stop, None if none did."""
    return _requested


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
