"""Where a run trains: the torchrun process group (DDP; gloo on CPU, nccl on GPU) and the device."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from ablate.engine.checkpoint import CheckpointError
from ablate.errors import AblateError
from ablate.hardware import WORKER_DEVICE_ENV, visible_gpus

T = TypeVar("T")


@dataclass
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        """Rank 0 alone tracks, evaluates and writes the summary."""
        return self.rank == 0


def init_distributed() -> DistInfo:
    """Join the process group when started by torchrun (gloo on CPU, nccl on GPU)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DistInfo()

    if not dist.is_initialized():
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    return DistInfo(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", "0")))


def pick_device(info: DistInfo, pinned: str | None = None) -> torch.device:
    """torchrun's rank's GPU; else the spec's ``train.device`` (`pinned`), else the GPU a study gave this
    worker (``ABLATE_DEVICE``), else the first GPU, else the CPU."""
    wanted = None if info.enabled else pinned or os.environ.get(WORKER_DEVICE_ENV) or None
    if wanted is not None:
        device = torch.device(wanted)
        _check_exists(device, "train.device" if pinned else WORKER_DEVICE_ENV)
        if device.type == "cuda":
            torch.cuda.set_device(device.index or 0)
            return torch.device("cuda", device.index or 0)
        return device
    if torch.cuda.is_available():
        torch.cuda.set_device(info.local_rank)
        return torch.device("cuda", info.local_rank)
    return torch.device("cpu")


def _check_exists(device: torch.device, source: str) -> None:
    """A GPU index this process cannot see is a user error, before anything is written."""
    if device.type != "cuda":
        return
    count = len(visible_gpus())
    if (device.index or 0) >= count:
        raise AblateError(f"{source}: {device} asked for, but this process sees {count} GPUs "
                          "(torch.cuda.device_count(), after CUDA_VISIBLE_DEVICES)")


def gather(info: DistInfo, value: Any) -> list[Any]:
    """Every rank's ``value`` (picklable), in rank order, on every rank; ``[value]`` in a single process."""
    if not info.enabled:
        return [value]
    values: list[Any] = [None] * info.world_size
    dist.all_gather_object(values, value)
    return values


def from_main(info: DistInfo, value: T) -> T:
    """Rank 0's ``value`` (picklable) on every rank; the value itself in a single process. Under nccl it
    travels through the GPU ``pick_device`` set for this rank."""
    if not info.enabled:
        return value
    box: list[Any] = [value if info.is_main else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]  # type: ignore[no-any-return]


def rank0_checkpoint(info: DistInfo, run_dir: Path, load: Callable[[], dict[str, Any] | None]
                     ) -> dict[str, Any] | None:
    """The checkpoint every rank resumes from: rank 0's. ``load`` reads this rank's own (``run_dir``'s
    newest good one, None where there is none).

    Several nodes need not share a run folder (node-local disks): a rank whose checkpoint is not rank 0's
    (none, an older step, a torn file) would otherwise resume elsewhere than rank 0 while DDP averages their
    gradients, and the replicas would part silently. The ranks compare what they found (the step and the
    checkpoint's own clock); where any differs from rank 0, rank 0's checkpoint is sent to every rank, and
    each rank that had another says so in one line. Where rank 0 has none, every rank starts at step 0. A
    rank 0 with only torn files stops every rank with its CheckpointError.
    """
    problem = None
    try:
        local = load()
    except CheckpointError as exc:
        local, problem = None, str(exc)
    if not info.enabled:
        if problem is not None:
            raise CheckpointError(problem)
        return local
    found = gather(info, ("error", problem) if problem is not None else _checkpoint_key(local))
    if found[0][0] == "error":
        raise CheckpointError(f"rank 0: {found[0][1]}")
    if all(key == found[0] for key in found):
        return local  # one shared folder, or the same checkpoint on every node
    resume = from_main(info, local if info.is_main else None)
    mine = found[info.rank]
    if mine != found[0]:
        have = "a torn checkpoint" if mine[0] == "error" else (
            "no checkpoint" if mine[1] is None else f"a checkpoint at step {mine[1]}")
        goes = f"rank 0's checkpoint at step {found[0][1]}" if resume is not None else "step 0, as rank 0"
        print(f"rank {info.rank}: {run_dir} holds {have}; resuming from {goes}", file=sys.stderr, flush=True)
    return resume


def _checkpoint_key(payload: dict[str, Any] | None) -> tuple[str, int | None, float, float]:
    """What tells two ranks' checkpoints apart without comparing them: the step, and the run's wall and CPU
    seconds at the moment it was written."""
    if payload is None:
        return ("none", None, 0.0, 0.0)
    state = payload["state"]
    return ("checkpoint", int(state["step"]), float(state.get("wall_seconds", 0.0)),
            float(state.get("cpu_seconds", 0.0)))
