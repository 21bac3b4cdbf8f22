"""Position-wise feed-forward networks.

Component contract (kind ``ffn``): ``cls(d_model: int, d_ff: int, dropout: float)``;
``forward(x (B, T, d)) -> (B, T, d)``. Both variants name their layers ``w1`` and ``w2``, so under
controlled init (ablate/engine/model.py seeds a kernel-1 Conv1d weight (out, in, 1) like the Linear weight
(out, in)) they start from the same weights and biases and compute the same function.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from registry import register
from registry.dropout import Dropout


@register("ffn", "linear")
class LinearFFN(nn.Module):
    """Linear -> ReLU -> Dropout -> Linear (Vaswani et al. 2017 eq. 2; tutorials A, B, C, E)."""

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.w1 = nn.Linear(d_model, d_ff)
        self.w2 = nn.Linear(d_ff, d_model)
        self.dropout = Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.w2(self.dropout(F.relu(self.w1(x))))


@register("ffn", "conv1d")
class Conv1dFFN(nn.Module):
    """The same FFN written with ``Conv1d(kernel_size=1)`` on a (B, d, T) view (tutorial D).

    The paper notes the FFN is "two convolutions with kernel size 1"; given the same weights
    (``linear.w1.weight == conv.w1.weight[:, :, 0]``) it is the same function as ``linear``
    (tests/registry/test_equivalence.py), but it pays two transposes and the conv path.
    """

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.w1 = nn.Conv1d(d_model, d_ff, kernel_size=1)
        self.w2 = nn.Conv1d(d_ff, d_model, kernel_size=1)
        self.dropout = Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        h = x.transpose(1, 2)  # (B, d, T): Conv1d wants channels first
        return self.w2(self.dropout(F.relu(self.w1(h)))).transpose(1, 2)  # back to (B, T, d)
