"""`ablate study`'s entry: the study's workers on this machine (ablate/launch/local_study.py:
`main_ablate`), or as SLURM jobs with ``--slurm`` (ablate/launch/slurm_submit.py), each job running
`main_ablate` in its turn (ablate/launch/slurm_job.py). Kept apart from both so that neither imports the
other.
"""

from __future__ import annotations

from collections.abc import Sequence

from ablate.errors import AblateError
from ablate.launch.local_study import main_ablate
from ablate.launch.slurm_submit import main_slurm
from ablate.study.pack_plan import bound_given, parse_bound, set_bound


def main_launch(spec_path: str, overrides: Sequence[str] = (), workers: int | None = None,
                storage: str | None = None, dry_run: bool = False, retry_failed: bool = False,
                workers_per_gpu: int | None = None, slurm: bool = False, jobs: int = 1,
                partition: str | None = None, gpus_per_job: int = 0, cpus_per_job: int | None = None,
                time: str | None = None, sbatch: Sequence[str] = (), pack: str | None = None) -> int:
    """`ablate study SPEC [--slurm ...]`: the SLURM options without ``--slurm`` are a one-line error;
    ``pack``: ``--pack K`` (ablate/study/pack_plan.py), checked before anything else."""
    bound = parse_bound(pack) if pack is not None else bound_given()  # --pack 0: one line, exit 2
    if slurm:
        set_bound(bound)  # each job's study command decides its packs under the same bound
        return main_slurm(spec_path, list(overrides), storage, dry_run, workers, workers_per_gpu, jobs,
                          partition, gpus_per_job, cpus_per_job, time, sbatch, retry_failed)
    given = [name for name, value, default in (
        ("--jobs", jobs, 1), ("--partition", partition, None), ("--gpus-per-job", gpus_per_job, 0),
        ("--cpus-per-job", cpus_per_job, None), ("--time", time, None), ("--sbatch", list(sbatch), []))
        if value != default]
    if given:
        raise AblateError(f"{', '.join(given)}: SLURM options, for `ablate study SPEC --slurm ...`")
    return main_ablate(spec_path, overrides, workers, storage, dry_run, retry_failed, workers_per_gpu,
                       pack_bound=bound)
