"""`ablate tune SPEC` on this machine: the search of ``ablate/study/search.py`` with its trials trained by
``--workers N`` local processes (ablate/launch/local_workers.py), and, when a signal stops it, the command
that resumes it."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from ablate.engine import preempt
from ablate.launch.local_workers import local_pool, local_workers
from ablate.launch.resume import resume_command
from ablate.study.search import close_tune, run_tune, start_tune


def main_tune(spec_path: str, overrides: Sequence[str] = (), workers: int | None = 1,
              storage: str | None = None, trials: int | None = None,
              workers_per_gpu: int | None = None) -> int:
    """`ablate tune SPEC`: run (or continue) the spec's search; print and log the results when it is done."""
    workers = local_workers(workers, workers_per_gpu)
    preempt.install()
    search = start_tune(spec_path, overrides, storage, trials)
    code = 130
    try:
        code = run_tune(search, (spec_path, list(overrides), storage), local_pool(workers))
    except KeyboardInterrupt:
        code = preempt.exit_code()
    finally:
        interrupted = code in preempt.STOP_CODES
        if interrupted:
            again = resume_command("tune", spec_path, overrides, workers, storage,
                                   [f"--trials {trials}"] if trials is not None else [])
            print(f"interrupted by {preempt.signal_name()}: the running trial saved its checkpoint and went "
                  f"back to the queue; resume with `{again}`", file=sys.stderr)
        stopped = close_tune(search, interrupted)
    return stopped or code
