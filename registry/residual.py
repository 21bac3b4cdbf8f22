"""Residual wiring around a sub-layer: where the norm sits and how the branch is added (axis ``residual``).

Component contract: ``cls(norms: NormFactory, dropout: float, *, depth: Depth, **options)``;
``forward(x (B, T, d), sublayer: Callable[[Tensor], Tensor]) -> (B, T, d)``; class attribute
``final_norm: bool`` tells the builder whether each stack ends with one more norm. A variant takes its
norms from ``norms`` (``norms.new()`` a fresh one, ``norms.shared()`` the one norm of its layer), so one
norm shared by the sub-layers of a layer is a choice of the variant, not of the builder. Optional
``init_sublayer(module)``: called by the builder after controlled initialisation, for variants whose
paper prescribes the sub-layer's initial scale (DeepNorm).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from registry import Axis, Option, declare_axis, register
from registry.dropout import Dropout

AXIS = declare_axis(Axis(
    kind="residual",
    default="pre_norm",
    doc="where the norm sits around each sub-layer, and how the sub-layer's output joins the stream",
    contract="cls(norms, dropout, *, depth, **options); forward(x, sublayer) -> x; final_norm: bool",
    hooks=("every sub-layer of every layer (self-attention, cross-attention, feed-forward)",
           "stack end: one more norm when final_norm", "after init: init_sublayer(module) if defined"),
))

SubLayer = Callable[[Tensor], Tensor]


@dataclass(frozen=True)
class Depth:
    """Where a residual sits: its stack and both stacks' depths (DeepNorm's constants depend on them)."""

    stack: str  # "encoder" | "decoder"
    encoder_layers: int
    decoder_layers: int


class NormFactory:
    """The norms of one layer: ``new()`` builds a fresh norm, ``shared()`` returns the layer's single norm."""

    def __init__(self, make: Callable[[], nn.Module]) -> None:
        self._make = make
        self._shared: nn.Module | None = None

    def new(self) -> nn.Module:
        return self._make()

    def shared(self) -> nn.Module:
        if self._shared is None:
            self._shared = self._make()
        return self._shared


@register("residual", "pre_norm")
class PreNorm(nn.Module):
    """Pre-norm: ``x + drop(f(norm(x)))``, plus a final norm after each stack (Xiong et al. 2020).

    What most re-implementations do (the Annotated Transformer's ``SublayerConnection``; presets
    a-blog-2025-prenorm-custom-ln, b-github-readme, e-notebook-2024-scalar-ln). Not the 2017 paper: the
    residual stream itself is never normalised, so each stack needs a last norm before its output is used.
    """

    final_norm = True

    def __init__(self, norms: NormFactory, dropout: float = 0.0, *, depth: Depth | None = None) -> None:
        super().__init__()
        self.norm = norms.new()
        self.dropout = Dropout(dropout)

    def forward(self, x: Tensor, sublayer: SubLayer) -> Tensor:
        return x + self.dropout(sublayer(self.norm(x)))


@register("residual", "post_norm", options=(Option(
    "shared_layer_norm", bool, False,
    "one norm shared by all sub-layers of a layer, as in preset d-multi30k-2019-postnorm-conv1d",
    kwarg="shared", always=True,
),))
class PostNorm(nn.Module):
    """Post-norm: ``norm(x + drop(f(x)))``, no final stack norm (Vaswani et al. 2017, section 5.4).

    The Lightning and Multi30k tutorials; the Multi30k one (preset d-multi30k-2019-postnorm-conv1d) uses ONE
    norm for every sub-layer of a layer: ``shared_layer_norm: true``.
    """

    final_norm = False

    def __init__(self, norms: NormFactory, dropout: float = 0.0, *, depth: Depth | None = None,
                 shared: bool = False) -> None:
        super().__init__()
        self.norm = norms.shared() if shared else norms.new()
        self.dropout = Dropout(dropout)

    def forward(self, x: Tensor, sublayer: SubLayer) -> Tensor:
        return self.norm(x + self.dropout(sublayer(x)))


@register("residual", "sandwich")
class SandwichNorm(nn.Module):
    """Sandwich-LN (Ding et al. 2021, "CogView", section 2.4): ``x + drop(norm_out(f(norm_in(x))))``.

    Pre-norm plus a second norm at the end of each residual branch, which bounds what a branch can add
    to the stream; the stacks keep pre-norm's final norm.
    """

    final_norm = True

    def __init__(self, norms: NormFactory, dropout: float = 0.0, *, depth: Depth | None = None) -> None:
        super().__init__()
        self.norm = norms.new()
        self.out_norm = norms.new()
        self.dropout = Dropout(dropout)

    def forward(self, x: Tensor, sublayer: SubLayer) -> Tensor:
        return x + self.dropout(self.out_norm(sublayer(self.norm(x))))


def deepnorm_constants(depth: Depth) -> tuple[float, float]:
    """(alpha, beta) of DeepNet's encoder-decoder table (Wang et al. 2022, table 1), N encoder and M
    decoder layers: encoder ``alpha = 0.81 (N^4 M)^(1/16)``, ``beta = 0.87 (N^4 M)^(-1/16)``; decoder
    ``alpha = (3M)^(1/4)``, ``beta = (12M)^(-1/4)``; a decoder-only stack (no encoder, N = 0) takes the
    table's decoder-only row, ``alpha = (2M)^(1/4)``, ``beta = (8M)^(-1/4)``."""
    n, m = depth.encoder_layers, depth.decoder_layers
    if n == 0:
        return (2 * m) ** (1 / 4), (8 * m) ** (-1 / 4)
    if depth.stack == "encoder":
        return 0.81 * (n**4 * m) ** (1 / 16), 0.87 * (n**4 * m) ** (-1 / 16)
    return (3 * m) ** (1 / 4), (12 * m) ** (-1 / 4)


@register("residual", "deepnorm")
class DeepNorm(nn.Module):
    """DeepNorm (Wang et al. 2022, "DeepNet: Scaling Transformers to 1,000 Layers", eq. 4).

    Post-norm with the stream up-weighted: ``norm(alpha * x + drop(f(x)))``, and the value and output
    projections of attention and the feed-forward weights initialised ``beta`` times smaller (query and
    key projections keep gain 1), ``alpha`` and ``beta`` from both stacks' depths
    (:func:`deepnorm_constants`). No final stack norm.
    """

    final_norm = False

    def __init__(self, norms: NormFactory, dropout: float = 0.0, *, depth: Depth | None = None) -> None:
        super().__init__()
        if depth is None:
            raise ValueError("deepnorm needs the depths of both stacks (depth=Depth(...))")
        self.norm = norms.new()
        self.dropout = Dropout(dropout)
        self.alpha, self.beta = deepnorm_constants(depth)

    def forward(self, x: Tensor, sublayer: SubLayer) -> Tensor:
        return self.norm(x * self.alpha + self.dropout(sublayer(x)))

    @torch.no_grad()
    def init_sublayer(self, module: nn.Module) -> None:
        """Scale the value/output projections (attention) or every weight matrix (feed-forward) by beta."""
        scaled = getattr(module, "value_output_weights", None)
        weights = scaled() if callable(scaled) else [p for p in module.parameters() if p.dim() >= 2]
        for w in weights:
            w.mul_(self.beta)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha:.4g}, beta={self.beta:.4g}"


@register("residual", "rezero")
class ReZero(nn.Module):
    """ReZero (Bachlechner et al. 2020, "ReZero is All You Need", eq. 5): ``x + alpha * drop(f(x))``.

    No norm at all (the ``norm`` axis has no effect under it): one learned scalar ``alpha`` per sub-layer,
    initialised to 0, so every layer starts as the identity. No final stack norm.
    """

    final_norm = False

    def __init__(self, norms: NormFactory, dropout: float = 0.0, *, depth: Depth | None = None) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.zeros(1))
        self.dropout = Dropout(dropout)

    def reset_parameters(self) -> None:
        with torch.no_grad():
            self.alpha.zero_()

    def forward(self, x: Tensor, sublayer: SubLayer) -> Tensor:
        return x + self.alpha * self.dropout(sublayer(x))
