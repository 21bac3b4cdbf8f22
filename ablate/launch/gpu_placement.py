"""Which GPU each study worker trains on: `--workers N` spread round robin over the GPUs this process sees,
`--workers-per-gpu K` packing K workers (K cells at once) on each.

Pure functions of the GPU list (`ablate.hardware.visible_gpus()` by default) so that tests on a CPU can
hand them any list. A worker learns its device through ``ABLATE_DEVICE`` (`hardware.WORKER_DEVICE_ENV`),
which `ablate.run.distributed.pick_device` reads unless the spec pins ``train.device``.
"""

from __future__ import annotations

from collections.abc import Sequence

from ablate.errors import AblateError


def worker_count(workers: int | None, per_gpu: int | None, gpus: Sequence[int]) -> int:
    """How many local workers to start: ``--workers`` as given; with only ``--workers-per-gpu K``, K per
    visible GPU. More workers than K per GPU is a user error (it would pack more than K on one)."""
    if per_gpu is None:
        return max(1, workers or 1)
    if per_gpu < 1:
        raise AblateError(f"--workers-per-gpu {per_gpu}: expected 1 or more")
    if not gpus:
        raise AblateError("--workers-per-gpu: this process sees no GPU (torch.cuda.device_count() is 0); "
                          "use --workers N on a CPU")
    if workers is None:
        return per_gpu * len(gpus)
    if workers > per_gpu * len(gpus):
        raise AblateError(f"--workers {workers} with --workers-per-gpu {per_gpu}: {len(gpus)} GPUs hold at "
                          f"most {per_gpu * len(gpus)} workers")
    return max(1, workers)


def worker_devices(workers: int, gpus: Sequence[int]) -> list[str | None]:
    """Each worker's device, round robin over `gpus` (worker i on ``cuda:gpus[i % n]``); None for every
    worker when there is no GPU (each then trains where `pick_device` would put it: the CPU)."""
    if not gpus:
        return [None] * workers
    return [f"cuda:{gpus[i % len(gpus)]}" for i in range(workers)]
