"""Averages of the weights a run passes through, evaluated at its end beside the best checkpoint.

Two kinds, one spec field (``train.weight_average``, ablate/spec/experiment.py):

- ``last_k`` (`LastK`): a snapshot of the weights every ``every`` optimizer steps, the last ``k`` kept;
  the average is their mean, theta_avg = (1/k) * sum_j theta_{t_j}. Vaswani et al. 2017 (section 6.1)
  averaged the last 5 checkpoints of the base model and 20 of the big one; fairseq's
  ``scripts/average_checkpoints.py`` does it from checkpoint files, here the snapshots stay in memory
  (the cells' models are small) and ride in the trainer's checkpoint.
- ``ema`` (`Ema`): theta_ema <- decay * theta_ema + (1 - decay) * theta after every optimizer step,
  started at the weights after the first step (as torch.optim.swa_utils' ``get_ema_multi_avg_fn`` copies
  on its first update; timm's ModelEmaV3 starts at the model it wraps).

What is averaged: the parameters, in fp32 whatever the autocast precision (the optimizer's weights are
fp32 master weights under autocast; a half-precision average would round every small update away), in
float64 while summing the snapshots. Buffers are not averaged: the models here have no running statistics
(no BatchNorm), only constant tables (sinusoids, masks), so the model's own buffers stay as they are and
no statistics need re-estimating (AveragedModel's ``update_bn``). Tied parameters are averaged once
(``named_parameters`` lists a shared tensor once).

The state (`state_dict`) holds plain tensors, lists and numbers: the checkpoint still loads with
``weights_only=True``, and a run killed and resumed averages exactly what an uninterrupted run averages.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch
from torch import nn

from ablate.spec.experiment import TrainSpec

Weights = dict[str, torch.Tensor]  # parameter name -> fp32 tensor


def fp32_parameters(model: nn.Module, device: torch.device | None = None) -> Weights:
    """A detached fp32 copy of every parameter (on ``device``, default: where each lives)."""
    return {name: p.detach().to(device=device or p.device, dtype=torch.float32, copy=True)
            for name, p in model.named_parameters()}


@torch.no_grad()
def load_weights(model: nn.Module, weights: Weights) -> None:
    """Copy ``weights`` into the model's parameters (each cast to its parameter's dtype and device)."""
    params = dict(model.named_parameters())
    missing = params.keys() - weights.keys()
    if missing:
        raise ValueError(f"averaged weights lack parameters: {', '.join(sorted(missing))}")
    for name, p in params.items():
        p.copy_(weights[name])


class WeightAverager(Protocol):
    """An average of the weights a run passes through: updated after each optimizer step, resumable."""

    def update(self, step: int, model: nn.Module) -> None:
        """After optimizer step ``step`` (1-based: the first step is 1)."""

    def averaged(self) -> Weights | None:
        """The averaged parameters, None before there is anything to average."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any], device: torch.device) -> None: ...


class LastK:
    """The mean of the last ``k`` snapshots, one every ``every`` steps (kept on the CPU)."""

    def __init__(self, k: int, every: int) -> None:
        self.k, self.every = k, every
        self.snapshots: list[tuple[int, Weights]] = []  # (step, weights), oldest first, at most k

    def update(self, step: int, model: nn.Module) -> None:
        if step % self.every:
            return
        self.snapshots.append((step, fp32_parameters(model, torch.device("cpu"))))
        del self.snapshots[: -self.k]

    def averaged(self) -> Weights | None:
        if not self.snapshots:
            return None
        out: Weights = {}
        for name in self.snapshots[-1][1]:
            # Summed in float64: k fp32 roundings of a running sum would each cost an ulp.
            total = torch.zeros_like(self.snapshots[-1][1][name], dtype=torch.float64)
            for _, weights in self.snapshots:
                total += weights[name]
            out[name] = (total / len(self.snapshots)).float()
        return out

    def steps(self) -> list[int]:
        """The steps of the snapshots kept, oldest first."""
        return [step for step, _ in self.snapshots]

    def state_dict(self) -> dict[str, Any]:
        return {"kind": "last_k", "snapshots": [(step, dict(w)) for step, w in self.snapshots]}

    def load_state_dict(self, state: dict[str, Any], device: torch.device) -> None:
        self.snapshots = [(int(step), {n: t.cpu().float() for n, t in w.items()})
                          for step, w in state["snapshots"]][-self.k:]


class Ema:
    """An exponential moving average of the weights (kept where the parameters live: no copy per step)."""

    def __init__(self, decay: float) -> None:
        self.decay = decay
        self.shadow: Weights | None = None
        self.updates = 0

    @torch.no_grad()
    def update(self, step: int, model: nn.Module) -> None:
        self.updates += 1
        if self.shadow is None:
            self.shadow = fp32_parameters(model)
            return
        for name, p in model.named_parameters():
            # lerp: s + w * (p - s) = decay * s + (1 - decay) * p with w = 1 - decay
            self.shadow[name].lerp_(p.detach().float(), 1.0 - self.decay)

    def averaged(self) -> Weights | None:
        return None if self.shadow is None else {n: t.clone() for n, t in self.shadow.items()}

    def state_dict(self) -> dict[str, Any]:
        return {"kind": "ema", "updates": self.updates, "shadow": self.shadow}

    def load_state_dict(self, state: dict[str, Any], device: torch.device) -> None:
        self.updates = int(state["updates"])
        shadow = state["shadow"]
        self.shadow = None if shadow is None else {n: t.to(device=device, dtype=torch.float32)
                                                   for n, t in shadow.items()}


def make_averager(spec: TrainSpec) -> WeightAverager | None:
    """The averager ``train.weight_average`` asks for (None when absent)."""
    avg = spec.weight_average
    if avg is None:
        return None
    if avg.kind == "last_k":
        assert avg.k is not None and avg.every is not None  # the spec's check
        return LastK(avg.k, avg.every)
    assert avg.decay is not None
    return Ema(avg.decay)
