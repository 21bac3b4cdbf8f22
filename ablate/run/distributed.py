"""Where a run trains: the torchrun process group (DDP; gloo on CPU, nccl on GPU) and the device."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch


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
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    return DistInfo(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", "0")))


def pick_device(info: DistInfo) -> torch.device:
    if torch.cuda.is_available():
        torch.cuda.set_device(info.local_rank)
        return torch.device("cuda", info.local_rank)
    return torch.device("cpu")
