"""The worker processes a study or search trains its cells with, passed in from above.

`study/` decides which cells run and runs one worker's loop (``ablate/study/train_cells.py: worker``); how
many such loops run and where (spawned processes spread over the GPUs, SLURM jobs) is ``ablate/launch/``'s,
the floor above, which hands a :class:`WorkerPool` down. Without one, a study runs its single worker in
this process (:data:`IN_PROCESS`), which is what `--workers 1` does anyway.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# what a study's or search's worker loop is handed: the spec's path, its --set overrides, the Optuna storage
WorkerArgs = tuple[str, list[str], str | None]
# start(target, args, workers): ``target(*args, index, workers)`` in ``workers`` loops; the worst exit code
Start = Callable[[Callable[..., int], tuple[Any, ...], int], int]


def _in_this_process(target: Callable[..., int], args: tuple[object, ...], workers: int) -> int:
    return target(*args, 0, 1)


@dataclass(frozen=True)
class WorkerPool:
    """``size`` worker loops, started by ``start`` (``ablate.launch.local_workers.run_workers`` for local
    processes)."""

    size: int
    start: Start = _in_this_process

    def run(self, target: Callable[..., int], args: tuple[object, ...]) -> int:
        """Run ``target(*args, index, size)`` in every loop of the pool; the worst exit code."""
        return self.start(target, args, max(1, self.size))


IN_PROCESS = WorkerPool(1)
