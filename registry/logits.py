"""What the output logits pass through (axis ``logits``).

Component contract: ``cls(**options)`` -> an ``nn.Module`` without parameters mapping the output
projection's logits ``(..., V) -> (..., V)``. Both architectures apply it to every logit the loss, the
evaluation and decoding see (after the parametrisation's output multiplier, muP's ``base/width``).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from registry import Axis, Option, declare_axis, register

AXIS = declare_axis(Axis(
    kind="logits",
    default="plain",
    doc="what the output projection's logits pass through before the loss and decoding",
    contract="cls(**options) -> Module (..., V) -> (..., V), no parameters",
    hooks=("the output projection of both architectures: training loss, evaluation and decoding",),
    added_later=True,  # every run before the axis used the logits as they are
))


@register("logits", "plain")
class PlainLogits(nn.Module):
    """The logits as the output projection gives them (Vaswani et al. 2017 and every tutorial)."""

    def forward(self, logits: Tensor) -> Tensor:
        return logits


@register("logits", "softcap", options=(Option(
    "logit_softcap", float, 30.0, "the cap c of the final logits, c * tanh(z / c) (Gemma 2: 30)",
    gt=0.0, le=1e4),))
class SoftCapLogits(nn.Module):
    """Final-logit soft-capping (Gemma Team 2024, "Gemma 2", section 2): ``c * tanh(z / c)``, so that every
    logit lies in (-c, c) (c = 30 in Gemma 2), smooth and about the identity for ``|z| << c``."""

    def __init__(self, logit_softcap: float = 30.0) -> None:
        super().__init__()
        self.cap = logit_softcap

    def forward(self, logits: Tensor) -> Tensor:
        return self.cap * torch.tanh(logits / self.cap)

    def extra_repr(self) -> str:
        return f"cap={self.cap}"
