"""Where a run trains: the torchrun process group (DDP; gloo on CPU, nccl on GPU) and the device."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
import torch.distributed as dist

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
