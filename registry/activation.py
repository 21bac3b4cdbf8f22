"""The feed-forward activation (axis ``activation``, a sub-axis of ``ffn``).

Component contract: ``cls()`` -> an elementwise ``nn.Module`` without parameters. Only the FFN variants
that declare ``takes=("activation",)`` receive one (``linear``, ``conv1d``); the gated variants fix theirs
by name (SwiGLU: SiLU, GEGLU: GELU), and the spec refuses a non-default activation for them.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from registry import Axis, declare_axis, register

AXIS = declare_axis(Axis(
    kind="activation",
    default="relu",
    doc="the elementwise non-linearity inside the feed-forward network",
    contract="cls() -> Module, elementwise, no parameters",
    hooks=("ffn: passed as activation= to the FFN variants that take it",),
    parent="ffn",
    added_later=True,  # runs recorded before the axis existed used relu: their identity stays
))


@register("activation", "relu")
class ReLU(nn.Module):
    """``max(0, x)`` (Nair & Hinton 2010): the FFN of Vaswani et al. 2017 (eq. 2) and of the tutorials."""

    def forward(self, x: Tensor) -> Tensor:
        return F.relu(x)


@register("activation", "gelu")
class GELU(nn.Module):
    """``x * Phi(x)``, the exact Gaussian error linear unit (Hendrycks & Gimpel 2016; BERT, GPT-2)."""

    def forward(self, x: Tensor) -> Tensor:
        return F.gelu(x)


@register("activation", "silu")
class SiLU(nn.Module):
    """``x * sigmoid(x)``, SiLU / Swish-1 (Elfwing et al. 2018; Ramachandran et al. 2017)."""

    def forward(self, x: Tensor) -> Tensor:
        return F.silu(x)


@register("activation", "relu2")
class SquaredReLU(nn.Module):
    """``max(0, x)^2``, squared ReLU (So et al. 2021, "Primer: Searching for Efficient Transformers for
    Language Modeling", section 3: one of Primer's two modifications; the modded-nanogpt speedrun's FFN)."""

    def forward(self, x: Tensor) -> Tensor:
        return F.relu(x).square()
