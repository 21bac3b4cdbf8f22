"""Position information added to the (already sqrt(d)-scaled) token embeddings.

Component contract (kind ``positions``): ``cls(d_model: int, max_positions: int, dropout: float)``;
``forward(x (B, T, d), start_pos: int = 0) -> (B, T, d)``: adds the encodings of positions
``start_pos .. start_pos+T-1`` (incremental decoding feeds one token at ``start_pos``) then applies
dropout (``dropout=0`` where a tutorial has no position dropout, e.g. tutorial B).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from registry import register
from registry.dropout import Dropout


def _check_range(start_pos: int, length: int, max_positions: int) -> None:
    if start_pos + length > max_positions:
        raise ValueError(
            f"position {start_pos + length - 1} is beyond max_positions {max_positions}; "
            "raise model.max_positions or shorten the sequences"
        )


def sinusoid_table(max_positions: int, d_model: int) -> Tensor:
    """(max_positions, d_model): sin on even features, cos on odd ones, wavelengths 2*pi .. 10000*2*pi."""
    position = torch.arange(max_positions, dtype=torch.float32).unsqueeze(1)  # (P, 1)
    div = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
    table = torch.zeros(max_positions, d_model)
    table[:, 0::2] = torch.sin(position * div)
    table[:, 1::2] = torch.cos(position * div)
    return table


@register("positions", "sinusoidal")
class SinusoidalPositions(nn.Module):
    """Fixed sinusoidal encodings (Vaswani et al. 2017, section 3.5), a non-trainable buffer.

    All five tutorials use this table (D defines a learned one as the alternative). The buffer is not
    saved in the state dict: it is a pure function of (max_positions, d_model).
    """

    def __init__(self, d_model: int, max_positions: int = 512, dropout: float = 0.0) -> None:
        super().__init__()
        self.max_positions = max_positions
        self.table: Tensor
        self.register_buffer("table", sinusoid_table(max_positions, d_model), persistent=False)
        self.dropout = Dropout(dropout)

    def forward(self, x: Tensor, start_pos: int = 0) -> Tensor:
        _check_range(start_pos, x.size(1), self.max_positions)
        return self.dropout(x + self.table[start_pos:start_pos + x.size(1)])  # (T, d) broadcasts over B


@register("positions", "learned")
class LearnedPositions(nn.Module):
    """Learned absolute positions: ``nn.Embedding(max_positions, d)`` (BERT/GPT style).

    Tutorial D defines this table as the alternative to sinusoids. Unlike sinusoids it cannot
    extrapolate past ``max_positions`` and adds ``max_positions * d`` parameters per stack.
    """

    def __init__(self, d_model: int, max_positions: int = 512, dropout: float = 0.0) -> None:
        super().__init__()
        self.max_positions = max_positions
        self.table = nn.Embedding(max_positions, d_model)
        self.dropout = Dropout(dropout)

    def forward(self, x: Tensor, start_pos: int = 0) -> Tensor:
        _check_range(start_pos, x.size(1), self.max_positions)
        return self.dropout(x + self.table.weight[start_pos:start_pos + x.size(1)])
