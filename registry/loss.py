"""The training loss (axis ``loss``, a recipe axis: the spec's ``train.loss.name``).

Component contract: ``cls(**options)`` -> an ``nn.Module`` without parameters, ``forward(logits (N, V)
float32, targets (N,), *, ignore_index: int, label_smoothing: float) -> ()`` the mean loss over the
positions whose target is not ``ignore_index``. The trainer calls it on every micro-batch in fp32 whatever
the autocast dtype. Evaluation always reports the plain cross-entropy (``val/loss``), so runs with
different loss terms stay comparable on the same scale.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from registry import Axis, Option, declare_axis, register

AXIS = declare_axis(Axis(
    kind="loss",
    default="cross_entropy",
    doc="the training objective on the output logits (evaluation reports the plain cross-entropy)",
    contract="cls(**options) -> Module; forward(logits (N, V), targets (N,), *, ignore_index, "
             "label_smoothing) -> mean loss",
    hooks=("the trainer: every micro-batch's loss, in fp32",),
    section="train.loss",
    added_later=True,  # every run before the axis trained on the plain cross-entropy
))


@register("loss", "cross_entropy")
class CrossEntropy(nn.Module):
    """The cross-entropy of the next (target) token, with optional label smoothing (Szegedy et al. 2016;
    0.1 in Vaswani et al. 2017): ``F.cross_entropy``."""

    def forward(self, logits: Tensor, targets: Tensor, *, ignore_index: int = -100,
                label_smoothing: float = 0.0) -> Tensor:
        return F.cross_entropy(logits, targets, ignore_index=ignore_index, label_smoothing=label_smoothing)


@register("loss", "z_loss", options=(Option(
    "z_loss_coef", float, 1e-4, "the z-loss coefficient alpha (Chowdhery et al. 2022, PaLM section 5: 1e-4)",
    gt=0.0, le=1.0),))
class ZLoss(nn.Module):
    """Cross-entropy plus the z-loss (Chowdhery et al. 2022, "PaLM", section 5; Wortsman et al. 2023):
    ``CE + alpha * log^2 Z`` with ``log Z = logsumexp(logits)`` per position, which pulls the softmax's
    normaliser towards 1 (log Z towards 0) and keeps the logits from drifting; alpha 1e-4 in PaLM. Its
    gradient in the logits is ``2 alpha log Z softmax(logits)`` (tests/registry/test_recipe_formulas.py).
    """

    def __init__(self, z_loss_coef: float = 1e-4) -> None:
        super().__init__()
        self.alpha = z_loss_coef

    def forward(self, logits: Tensor, targets: Tensor, *, ignore_index: int = -100,
                label_smoothing: float = 0.0) -> Tensor:
        ce = F.cross_entropy(logits, targets, ignore_index=ignore_index, label_smoothing=label_smoothing)
        kept = targets != ignore_index  # (N,)
        log_z = torch.logsumexp(logits[kept], dim=-1)  # (N_kept,)
        return ce + self.alpha * log_z.square().mean() if log_z.numel() else ce
