"""Normalisation over the feature dimension (axis ``norm``).

Component contract: ``cls(d_model: int, *, eps: float, **options)`` -> an ``nn.Module`` mapping
``(..., d) -> (..., d)``; ``reset_parameters()`` sets its initial values (no randomness: every variant
starts the same in every seed). Gains are named ``weight`` and biases ``bias``, so variants with the same
shapes share their initial values under controlled init.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from registry import Axis, Option, declare_axis, register

AXIS = declare_axis(Axis(
    kind="norm",
    default="builtin",
    doc="the normalisation layer used by the residual wiring",
    contract="cls(d_model, *, eps, **options) -> Module (..., d) -> (..., d); reset_parameters()",
    hooks=("residual: each sub-layer's norm, and the final norm of a stack when the residual asks for one",),
    options=(Option("norm_eps", float, 1e-6, "the epsilon of every norm variant", kwarg="eps",
                    gt=0.0, lt=1.0),),
))

AFFINES = ("per_feature", "scalar")
NORM_AFFINE = Option(
    "norm_affine", str, "per_feature",
    "gain and bias per feature (d,) or one scalar each (1,), as the single-scalar hand-written LayerNorm of "
    "preset e-notebook-2024-scalar-ln", kwarg="affine", choices=AFFINES, always=True,
)


class _AffineNorm(nn.Module):
    def __init__(self, d_model: int, eps: float = 1e-6, affine: str = "per_feature") -> None:
        super().__init__()
        if affine not in AFFINES:
            raise ValueError(f"unknown norm affine {affine!r}; accepted: {', '.join(AFFINES)}")
        self.d_model = d_model
        self.eps = eps
        self.affine = affine
        size = d_model if affine == "per_feature" else 1
        self.weight = nn.Parameter(torch.ones(size))
        self.bias = nn.Parameter(torch.zeros(size))

    def reset_parameters(self) -> None:
        with torch.no_grad():
            self.weight.fill_(1.0)
            self.bias.zero_()

    def extra_repr(self) -> str:
        return f"{self.d_model}, eps={self.eps}, affine={self.affine}"


@register("norm", "builtin", options=(NORM_AFFINE,))
class BuiltinLayerNorm(_AffineNorm):
    """``torch.nn.LayerNorm`` semantics through the fused ``F.layer_norm`` kernel (Ba et al. 2016).

    ``gamma * (x - mean) / sqrt(var + eps) + beta`` with the biased variance and ``eps`` inside the root,
    as in the Lightning (c-lightning-2024) and Multi30k (d-multi30k-2019-postnorm-conv1d) tutorials.
    With ``norm_affine: scalar`` the kernel runs without affine and one scalar gain/bias is applied after
    it: no tutorial does this, but it makes a norm ablation on the scalar-gain preset
    (e-notebook-2024-scalar-ln) a one-factor change.
    """

    def forward(self, x: Tensor) -> Tensor:
        if self.affine == "per_feature":
            return F.layer_norm(x, (self.d_model,), self.weight, self.bias, self.eps)
        return F.layer_norm(x, (self.d_model,), None, None, self.eps) * self.weight + self.bias


@register("norm", "custom", options=(NORM_AFFINE,))
class CustomLayerNorm(_AffineNorm):
    """The tutorials' hand-written LayerNorm: ``gamma * (x - mean) / (std + eps) + beta``.

    ``std`` is torch's default *unbiased* estimate (divides by d-1) and ``eps`` sits outside the square
    root, as in the tutorials that print theirs (a-blog-2025; e-notebook-2024 with one scalar gamma/beta:
    ``norm_affine: scalar``; preset b-github-readme assumes it for a class its README does not print).
    Versus ``builtin`` the output is scaled by about ``sqrt((d-1)/d)``: a relative gap of
    ``1 - sqrt((d-1)/d)``, about ``1/(2d)``, and eps placement is negligible next to it
    (tests/registry/test_equivalence.py measures both at d = 32, 128, 512). Small, but not rounding error:
    a different function, whose gain the model must absorb.
    """

    def forward(self, x: Tensor) -> Tensor:
        mean = x.mean(-1, keepdim=True)
        std = x.std(-1, keepdim=True)  # unbiased, as in the tutorials
        return self.weight * (x - mean) / (std + self.eps) + self.bias


@register("norm", "rms")
class RMSNorm(nn.Module):
    """RMSNorm (Zhang & Sennrich 2019, "Root Mean Square Layer Normalization", eq. 4).

    ``y = x / sqrt(mean(x^2) + eps) * g``: no re-centring and no bias; ``g`` (d,) starts at ones. The
    mean of squares is taken in fp32 whatever the input dtype.
    """

    def __init__(self, d_model: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.d_model, self.eps = d_model, eps
        self.weight = nn.Parameter(torch.ones(d_model))

    def reset_parameters(self) -> None:
        with torch.no_grad():
            self.weight.fill_(1.0)

    def forward(self, x: Tensor) -> Tensor:
        rms = x.float().pow(2).mean(-1, keepdim=True).add(self.eps).rsqrt()  # (..., 1)
        return (x.float() * rms).to(x.dtype) * self.weight

    def extra_repr(self) -> str:
        return f"{self.d_model}, eps={self.eps}"


@register("norm", "scale")
class ScaleNorm(nn.Module):
    """ScaleNorm (Nguyen & Salazar 2019, "Transformers without Tears", eq. 6).

    ``y = g * x / max(||x||_2, eps)``: one learned scalar ``g`` per norm, initialised to ``sqrt(d)`` so that
    at the start each vector has the norm a unit-variance vector would have.
    """

    def __init__(self, d_model: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.d_model, self.eps = d_model, eps
        self.weight = nn.Parameter(torch.full((1,), math.sqrt(d_model)))

    def reset_parameters(self) -> None:
        with torch.no_grad():
            self.weight.fill_(math.sqrt(self.d_model))

    def forward(self, x: Tensor) -> Tensor:
        norm = torch.linalg.vector_norm(x.float(), dim=-1, keepdim=True).clamp_min(self.eps)  # (..., 1)
        return (x.float() / norm).to(x.dtype) * self.weight

    def extra_repr(self) -> str:
        return f"{self.d_model}, eps={self.eps}"
