"""`ablate study SPEC` on this machine: the study's cells trained by ``--workers N`` local processes,
spread round robin over the GPUs this process sees (ablate/launch/gpu_placement.py). The study itself
(its queue, parent run, rounds and arms) is ``ablate/study/ablation.py``'s; this module starts it, hands
it the worker processes (ablate/launch/local_workers.py), and turns how it ended into an exit code and,
when a signal stopped it, the command that resumes it. Each SLURM job of ``--slurm`` runs
:func:`main_ablate` in its turn (ablate/launch/slurm_job.py).
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping, Sequence

from ablate import hardware
from ablate.data.check import check_data
from ablate.engine import preempt
from ablate.launch.gpu_placement import worker_devices
from ablate.launch.local_workers import local_pool, local_workers
from ablate.launch.resume import Launched, plural
from ablate.launch.wall_time import local_sharing, remaining_wall_time
from ablate.study import failfast, ladder_tuning
from ablate.study.ablation import Ended, close_study, dry_run, open_study, pilot_times, run_study
from ablate.study.designs import plan_study
from ablate.study.pack_plan import PackBound, PackDecision, bound_given, decide_packs, hand_to_workers
from ablate.study.study_plan import StudyPlan


def main_ablate(spec_path: str, overrides: Sequence[str] = (), workers: int | None = 1,
                storage: str | None = None, dry_run: bool = False, retry_failed: bool = False,
                workers_per_gpu: int | None = None, launched: Launched | None = None,
                pack_bound: PackBound | None = None) -> int:
    """`ablate study SPEC`: run (or resume) every cell, then with ``tune:`` each variant's search and its
    cells at its own best, then with ``confirm:`` the decided comparisons at the larger setting
    (ablate/study/arms.py); 0 when all finished or diverged, 1 if some failed, 2 when a repeated failure
    stopped it, 130 when interrupted. ``dry_run`` prints the cells, their diffs and the budget of every
    phase, and where each stands, and writes nothing. ``launched``: how the study was started when that
    was not this command line (a SLURM job: ``--slurm`` and its shape), for the hints it prints.
    ``pack_bound``: ``--pack`` (a SLURM job: the bound its submission gave, from the environment); each
    shape's pack size is decided here, before any cell trains, and handed to the workers."""
    workers = local_workers(workers, workers_per_gpu)
    preempt.install()
    plan = plan_study(spec_path, overrides)
    check_data(spec_path, overrides, plan.spec)  # a missing or malformed data file: now, not in a cell
    packs = decide_packs(plan.cells, pack_bound or bound_given())  # may refuse: exit 2
    if dry_run:
        return _dry_run(plan, storage, workers, packs)
    if any(size > 1 for size in packs.sizes.values()):
        print("\n".join(packs.lines), flush=True)
    hand_to_workers(packs.sizes)
    study = open_study(plan, storage, retry_failed, workers)
    code = 130
    try:
        code = run_study(study, (spec_path, list(overrides), storage), local_pool(workers), retry_failed)
    except KeyboardInterrupt:
        code = preempt.exit_code()  # the running cell saved its checkpoint and went back to the queue
    finally:
        ended = close_study(study, interrupted=code in preempt.STOP_CODES)
    again = launched or Launched(spec_path, tuple(overrides), workers, storage)
    return _exit_code(study.arms, ended, code, again)


def _dry_run(plan: StudyPlan, storage: str | None, workers: int, packs: PackDecision) -> int:
    """The study's dry run (ablate/study/ablation.py), then where its workers would train and how long it
    would take (its packed cells' steps at their probe's speed-up); 2 when a start would refuse the spec."""
    records = dry_run(plan, storage, workers)
    if records is None:
        return 2
    print("\n".join(packs.lines))  # after the plan's own lines: the study and its design come first
    print(workers_line(workers))
    if not pilot_times(plan):  # the plan gave the time from the pilot's cells; else measure it here
        timed = plan
        if ladder_tuning.tuning(plan) is not None:  # a tuned ladder's tuning cells are time spent too
            timed = dataclasses.replace(plan, cells=plan.cells + ladder_tuning.tune_cells(plan)[0])
            print("the estimate below counts the tuning cells and the study's cells together")
        print(remaining_wall_time(timed, records, local_sharing(workers, len(hardware.visible_gpus())),
                                  packs.speedup))
    return 0


def workers_line(workers: int) -> str:
    """Where the dry run's workers would train: the GPUs this process sees, round robin, or the CPU."""
    gpus = hardware.visible_gpus()  # through the module: a test stands in GPUs there
    if not gpus:
        return f"workers: {workers}, on the CPU (no GPU visible to torch)"
    return (f"workers: {workers}, round robin over the {len(gpus)} visible GPUs: "
            + ", ".join(str(d) for d in worker_devices(workers, gpus)))


def _exit_code(arms: Mapping[str, StudyPlan], ended: Ended, code: int, launched: Launched) -> int:
    """2 for a study stopped by a repeated failure, the signal's code when interrupted (with the command
    that resumes it), 1 when cells failed, else the workers' code."""
    if ended.why:
        print(f"error: study stopped: its first {failfast.FIRST} cells failed the same way: {ended.why}; fix "
              f"that and run the same command again (`{launched.resume()}`: the failed cells are queued "
              "again)", file=sys.stderr)
        return 2
    if ended.interrupted:
        print(f"interrupted by {preempt.signal_name()}: running cells saved their checkpoints; resume with "
              f"`{launched.resume()}`", file=sys.stderr)
        return code
    keys = {c.key for arm in arms.values() for c in arm.cells}
    failed = [k for k in keys if ended.records.get(k) and ended.records[k].status == "failed"]
    if failed:
        print(f"{plural(len(failed), 'cell')} failed; `{launched.resume('--retry-failed')}` runs "
              f"{'it' if len(failed) == 1 else 'them'} again", file=sys.stderr)
        return 1
    return code
