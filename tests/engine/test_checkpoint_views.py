"""A checkpoint of tensors that view a larger storage (ablate/engine/checkpoint.py's ``own_storage``): a
packed cell's weights and Adam state are views of the pack's stacked tensors, its step count one element of
a vector its parameters share. Saved as views, the file holds every cell's tensors and a resumed Adam counts
a step once per parameter; saved through ``own_storage``, each tensor is the cell's own."""

from __future__ import annotations

import io

import torch
from torch import nn

from ablate.engine.checkpoint import own_storage


def packed_like_adam() -> tuple[nn.Linear, torch.optim.Adam]:
    """Cell 1 of a pack of 3 after 4 steps: its two parameters' moments views of stacked (3, ...) tensors and
    their step counts one shared element of the pack's per-cell step vector."""
    torch.manual_seed(0)
    cell = nn.Linear(4, 2)
    adam = torch.optim.Adam(cell.parameters(), lr=0.1)
    steps = torch.full((3,), 4.0)
    for p in cell.parameters():
        adam.state[p] = {"step": steps[1], "exp_avg": torch.rand(3, *p.shape)[1],
                         "exp_avg_sq": torch.rand(3, *p.shape)[1]}
    return cell, adam


def reloaded(state: dict) -> dict:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def test_a_view_is_copied_to_its_own_storage_and_a_whole_tensor_is_kept() -> None:
    whole, stacked = torch.rand(5), torch.rand(3, 5)
    owned = own_storage({"a": whole, "b": [stacked[1]], "c": (7, "x")})
    assert owned["a"] is whole  # nothing to copy
    assert torch.equal(owned["b"][0], stacked[1])
    assert owned["b"][0].untyped_storage().nbytes() == 5 * 4  # its own five floats, not the stack's 15
    assert owned["c"] == (7, "x")


def test_a_packed_cells_adam_resumes_counting_each_step_once() -> None:
    cell, adam = packed_like_adam()
    for label, state, expected in (("as views", adam.state_dict(), 4 + 2),
                                   ("owned", own_storage(adam.state_dict()), 4 + 1)):
        again = torch.optim.Adam(nn.Linear(4, 2).parameters(), lr=0.1)
        again.load_state_dict(reloaded(state))
        for p in again.param_groups[0]["params"]:
            p.grad = torch.ones_like(p)
        again.step()
        counts = [float(s["step"]) for s in again.state.values()]
        # the views reload sharing one count, which each of the 2 parameters then advances
        assert counts == [expected, expected], (label, counts)
