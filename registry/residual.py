"""Residual wiring around a sub-layer: where the norm sits.

Component contract (kind ``residual``): ``cls(norm: nn.Module, dropout: float)``;
``forward(x (B, T, d), sublayer: Callable[[Tensor], Tensor]) -> (B, T, d)``; class attribute
``final_norm: bool`` tells the model builder whether each stack ends with one more norm.
The norm is passed in (a ``norm`` component), so sharing one norm between the sub-layers of a
layer (preset D) is just passing the same module twice.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor, nn

from registry import register
from registry.dropout import Dropout

SubLayer = Callable[[Tensor], Tensor]


@register("residual", "pre_norm")
class PreNorm(nn.Module):
    """Pre-norm: ``x + drop(f(norm(x)))``, plus a final norm after each stack.

    What most re-implementations do (tutorials A, B, E; the Annotated Transformer's
    ``SublayerConnection``). Not the 2017 paper: the residual stream itself is never normalised, so
    each stack needs a last norm before its output is used.
    """

    final_norm = True

    def __init__(self, norm: nn.Module, dropout: float = 0.0) -> None:
        super().__init__()
        self.norm = norm
        self.dropout = Dropout(dropout)

    def forward(self, x: Tensor, sublayer: SubLayer) -> Tensor:
        return x + self.dropout(sublayer(self.norm(x)))


@register("residual", "post_norm")
class PostNorm(nn.Module):
    """Post-norm: ``norm(x + drop(f(x)))``, no final stack norm (the 2017 paper).

    Tutorials C and D. Preset D passes ONE norm shared by all sub-layers of a layer
    (``shared_layer_norm: true``); the builder then hands the same norm module to each wrapper.
    """

    final_norm = False

    def __init__(self, norm: nn.Module, dropout: float = 0.0) -> None:
        super().__init__()
        self.norm = norm
        self.dropout = Dropout(dropout)

    def forward(self, x: Tensor, sublayer: SubLayer) -> Tensor:
        return self.norm(x + self.dropout(sublayer(x)))
