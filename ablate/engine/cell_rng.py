"""Each packed cell's own random stream: the state torch's global generators would hold if the cell trained
alone, swapped in whenever the pack draws for that cell (ablate/engine/packed_model.py's dropout) or runs
that cell's own work (its evaluations and checkpoints, ablate/engine/packed_trainer.py).

A cell alone draws its dropout masks from torch's default generators (the CPU one, and the GPU's for a
tensor on a GPU), seeded by its seed before it trains (ablate/run/runner.py's ``seed_everything``) and
saved in and restored from its checkpoints (ablate/engine/checkpoint.py's ``rng_state``). A pack keeps one
such state per cell and swaps it into the global generators around each of the cell's draws, so the cell's
masks are the very masks it draws alone, in the same order: no component changes how it draws, and a
resumed cell continues the stream its checkpoint saved, packed or alone. numpy's and Python's generators
are not swapped: no training step draws from them (the batchers own seeded generators).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch

__all__ = ["CellStreams", "State", "seeded_state"]

State = tuple[torch.Tensor, torch.Tensor | None]  # the CPU generator's state, and the GPU's (None on a CPU)


def _global(device: torch.device) -> State:
    gpu = torch.cuda.get_rng_state(device) if device.type == "cuda" else None
    return torch.get_rng_state(), gpu


def _set_global(state: State, device: torch.device) -> None:
    torch.set_rng_state(state[0])
    if state[1] is not None:
        torch.cuda.set_rng_state(state[1], device)


def seeded_state(seed: int, device: torch.device) -> State:
    """The generators' state right after ``torch.manual_seed(seed)``, the global ones left as they are."""
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        return _global(device)


class CellStreams:
    """One random state per cell (the CPU generator's, and ``device``'s where it is a GPU)."""

    def __init__(self, states: Sequence[State], device: torch.device) -> None:
        self.states = list(states)
        self.device = device

    @classmethod
    def seeded(cls, seeds: Sequence[int], device: torch.device) -> CellStreams:
        """Each cell's stream as ``torch.manual_seed(seed)`` starts it (what a cell alone starts from)."""
        return cls([seeded_state(s, device) for s in seeds], device)

    @classmethod
    def current(cls, cells: int, device: torch.device) -> CellStreams:
        """Every cell's stream starting from the global generators' present state."""
        return cls([_global(device)] * cells, device)

    @staticmethod
    def now(device: torch.device) -> State:
        """The global generators' present state (what a cell opened last would start from)."""
        return _global(device)

    @contextmanager
    def drawing(self, cell: int) -> Iterator[None]:
        """Cell ``cell``'s state in the global generators for the block; its advanced state kept after."""
        outer = _global(self.device)
        _set_global(self.states[cell], self.device)
        try:
            yield
        finally:
            self.states[cell] = _global(self.device)
            _set_global(outer, self.device)
