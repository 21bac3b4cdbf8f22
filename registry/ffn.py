"""Position-wise feed-forward networks (axis ``ffn``).

Component contract: ``cls(d_model: int, d_ff: int, dropout: float, **options)`` (plus ``activation=`` an
``activation`` component for the variants that take one) -> ``forward(x (B, T, d)) -> (B, T, d)``.
``linear`` and ``conv1d`` name their layers ``w1`` and ``w2``, so under controlled init (ablate's builder
seeds a kernel-1 Conv1d weight (out, in, 1) like the Linear weight (out, in)) they start from the same
weights and biases and compute the same function.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from registry import Axis, Option, declare_axis, register
from registry.dropout import Dropout

AXIS = declare_axis(Axis(
    kind="ffn",
    default="linear",
    doc="the position-wise feed-forward network of every layer",
    contract="cls(d_model, d_ff, dropout, **options[, activation]) -> Module (B, T, d) -> (B, T, d)",
    hooks=("every layer: the feed-forward sub-layer, inside its residual wiring",),
))

# The activation sub-axis is declared right after its parent, before the variants that take it register.
from registry import activation as _activation  # noqa: E402,F401


def _relu() -> nn.Module:
    return nn.ReLU()


@register("ffn", "linear", takes=("activation",))
class LinearFFN(nn.Module):
    """``w2(drop(act(w1 x)))``: Linear -> activation -> Dropout -> Linear (Vaswani et al. 2017, eq. 2 with
    ReLU; the tutorials a-blog-2025, b-github-readme, c-lightning-2024 and e-notebook-2024)."""

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0,
                 activation: nn.Module | None = None) -> None:
        super().__init__()
        self.w1 = nn.Linear(d_model, d_ff)
        self.w2 = nn.Linear(d_ff, d_model)
        self.act = activation if activation is not None else _relu()
        self.dropout = Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.w2(self.dropout(self.act(self.w1(x))))


@register("ffn", "conv1d", takes=("activation",))
class Conv1dFFN(nn.Module):
    """The same FFN written with ``Conv1d(kernel_size=1)`` on a (B, d, T) view (preset
    d-multi30k-2019-postnorm-conv1d; the paper calls the FFN "two convolutions with kernel size 1").

    Given the same weights (``linear.w1.weight == conv.w1.weight[:, :, 0]``) it is the same function as
    ``linear`` (tests/registry/test_equivalence.py), but it pays two transposes and the conv path.
    """

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0,
                 activation: nn.Module | None = None) -> None:
        super().__init__()
        self.w1 = nn.Conv1d(d_model, d_ff, kernel_size=1)
        self.w2 = nn.Conv1d(d_ff, d_model, kernel_size=1)
        self.act = activation if activation is not None else _relu()
        self.dropout = Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        h = x.transpose(1, 2)  # (B, d, T): Conv1d wants channels first
        return self.w2(self.dropout(self.act(self.w1(h)))).transpose(1, 2)  # back to (B, T, d)


GLU_OPTIONS = (
    Option("glu_hidden", str, "match_params",
           "hidden size of a gated FFN: 'match_params' = 2/3 d_ff (three matrices hold as many weights as "
           "the linear FFN's two, Shazeer 2020), 'match_all' = (2 d d_ff + d_ff + d) / 3d (as many "
           "parameters as the linear FFN, its biases counted: a ladder's small rungs, where the biases are "
           "several percent), or 'd_ff'", choices=("match_params", "match_all", "d_ff")),
    Option("glu_multiple_of", int, 8, "the 2/3 d_ff hidden size is rounded to the nearest multiple of this",
           ge=1, le=4096),
)


def glu_hidden_size(d_ff: int, glu_hidden: str = "match_params", glu_multiple_of: int = 8,
                    d_model: int | None = None) -> int:
    """``d_ff``, ``2/3 d_ff``, or with ``match_all`` the linear FFN's parameters, biases included, over the
    gated FFN's three bias-free matrices, ``(2 d d_ff + d_ff + d) / 3d`` (needs ``d_model``); rounded to the
    nearest multiple of ``glu_multiple_of`` (at least one)."""
    if glu_hidden == "d_ff":
        return d_ff
    if glu_hidden == "match_all":
        if d_model is None:
            raise ValueError("glu_hidden match_all needs d_model")
        target = (2 * d_model * d_ff + d_ff + d_model) / (3 * d_model)
    else:
        target = 2 * d_ff / 3
    return max(glu_multiple_of, glu_multiple_of * round(target / glu_multiple_of))


class _GatedFFN(nn.Module):
    """``w2(drop(act(w1 x) * w3 x))``, no biases (Shazeer 2020, "GLU Variants Improve Transformer")."""

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0, glu_hidden: str = "match_params",
                 glu_multiple_of: int = 8) -> None:
        super().__init__()
        hidden = glu_hidden_size(d_ff, glu_hidden, glu_multiple_of, d_model)
        self.w1 = nn.Linear(d_model, hidden, bias=False)  # the gate
        self.w3 = nn.Linear(d_model, hidden, bias=False)  # the value
        self.w2 = nn.Linear(hidden, d_model, bias=False)
        self.dropout = Dropout(dropout)

    def gate(self, x: Tensor) -> Tensor:
        raise NotImplementedError

    def forward(self, x: Tensor) -> Tensor:
        return self.w2(self.dropout(self.gate(self.w1(x)) * self.w3(x)))


@register("ffn", "swiglu", options=GLU_OPTIONS)
class SwiGLU(_GatedFFN):
    """SwiGLU: ``(Swish_1(x W) * x V) W_2`` (Shazeer 2020, eq. 6; PaLM, LLaMA). Swish_1 = SiLU."""

    def gate(self, x: Tensor) -> Tensor:
        return F.silu(x)


@register("ffn", "geglu", options=GLU_OPTIONS)
class GEGLU(_GatedFFN):
    """GEGLU: ``(GELU(x W) * x V) W_2`` (Shazeer 2020, eq. 6; T5 v1.1)."""

    def gate(self, x: Tensor) -> Tensor:
        return F.gelu(x)
