"""How the model's width enters its initialisation and learning rates (axis ``parametrisation``).

Component contract: ``cls(d_model: int, heads: int, **options)`` -> an object with ``base_width`` (None:
nothing is width-relative; the class attribute ``width_relative`` says so before one is built) and the rules
the builder and the trainer apply:

* ``base_sizes(d_model, d_ff) -> (d_model, d_ff)``: the base model the width multipliers compare with;
* ``init_multiplier(shape: WidthShape) -> float``: each parameter's initial values are multiplied by it,
  after the builder's controlled init drew them (one constant per tensor);
* ``lr_multiplier(shape: WidthShape, rule: str) -> float``: the learning rate of the parameter's group,
  relative to ``train.optimizer.lr``, under the optimizer's ``mup_rule`` (``adam`` or ``sgd``);
* ``logit_multiplier``: the output logits are multiplied by it;
* ``embed_multiplier(d_model) -> float``: the token embeddings' scale where ``model.embed_scale`` is on;
* ``base_d_head(heads) -> int | None``: attention scores are scaled 1/d_head against this head size.

A parameter's :class:`WidthShape` says which of its dimensions grow with the width: those that differ
between the model and the base model the builder builds from ``base_sizes`` (the ``mup`` package's "base
shapes", Yang et al. 2022, appendix), so a plugin component's parameters are classified as the built-ins'.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from registry import Axis, Option, declare_axis, register

AXIS = declare_axis(Axis(
    kind="parametrisation",
    default="standard",
    doc="how the width enters the init, the per-group learning rates, the output logits and attention",
    contract=("cls(d_model, heads, **options); base_width; base_sizes(); init_multiplier(shape); "
              "lr_multiplier(shape, rule); logit_multiplier; embed_multiplier(d); base_d_head(heads)"),
    hooks=("model build: init multipliers after the controlled init, the embedding scale, the attention "
           "scale, the output logit multiplier", "the trainer: a learning rate per parameter group"),
    added_later=True,  # every run before the axis used the standard parametrisation
))


@dataclass(frozen=True)
class WidthShape:
    """A parameter's shape in the model and in the base model, and the std of what the builder's init
    draws for each (None: the component's own init, a norm's ones)."""

    shape: tuple[int, ...]
    base: tuple[int, ...]
    std: float | None = None
    base_std: float | None = None

    @property
    def infinite(self) -> int:
        """How many dimensions grow with the width (0: a scalar or a vocabulary-sized bias; 1: vector-like:
        embeddings, the output head, biases, norm gains; 2: matrix-like, the hidden weights)."""
        return sum(a != b for a, b in zip(self.shape, self.base, strict=True))

    @property
    def fan_in_mult(self) -> float:
        return self.shape[1] / self.base[1] if len(self.shape) >= 2 else 1.0

    @property
    def fan_out_mult(self) -> float:
        return self.shape[0] / self.base[0] if self.shape else 1.0

    @property
    def width_mult(self) -> float:
        """The growth of the one growing dimension of a vector-like parameter (1 otherwise)."""
        ratios = [a / b for a, b in zip(self.shape, self.base, strict=True) if a != b]
        return ratios[0] if len(ratios) == 1 else 1.0


@register("parametrisation", "standard")
class Standard:
    """The standard parametrisation (SP): the init and learning rate the spec says, for every width
    (Yang et al. 2022 call it SP: with it the best learning rate shifts as the model widens)."""

    base_width: int | None = None
    width_relative = False
    logit_multiplier = 1.0

    def __init__(self, d_model: int, heads: int) -> None:
        self.d_model, self.heads = d_model, heads

    def base_sizes(self, d_model: int, d_ff: int) -> tuple[int, int]:
        return d_model, d_ff

    def init_multiplier(self, shape: WidthShape) -> float:
        return 1.0

    def lr_multiplier(self, shape: WidthShape, rule: str) -> float:
        return 1.0

    def embed_multiplier(self, d_model: int) -> float:
        return math.sqrt(d_model)

    def base_d_head(self, heads: int) -> int | None:
        return None


def _base_width_check(section: Mapping[str, Any]) -> str | None:
    base, d_model, heads = section.get("mup_base_width"), section["d_model"], section["heads"]
    if not isinstance(base, int) or base <= 0:
        return None  # required: said by the option itself
    if base % heads:
        return f"mup_base_width {base} is not divisible by heads {heads}: the base model needs whole heads"
    if base > d_model:
        return (f"mup_base_width {base} is wider than d_model {d_model}: the base is the narrow model the "
                f"hyperparameters were tuned at, e.g. mup_base_width: {max(heads, d_model // 4)}")
    return None


@register("parametrisation", "mup", options=(Option(
    "mup_base_width", int, 0, "the d_model the hyperparameters were tuned at (muP's base width): the width "
    "multiplier is d_model / mup_base_width", ge=1, le=65536, required=True, example=8),),
    check=_base_width_check, version=2)  # v2: weight decay / the group's lr multiplier, as mup.MuAdamW
class MuP:
    """The maximal update parametrisation, muP (Yang et al. 2022, "Tensor Programs V: Tuning Large Neural
    Networks via Zero-Shot Hyperparameter Transfer", Table 3 and its multiplier form, Table 8), against a
    base width ``b`` (``m = d_model / b``), so that at ``d_model = b`` it is the standard parametrisation:

    * init: vector-like parameters (embeddings, the output head, biases, norm gains) start with the std
      they have at the base width; hidden (matrix-like) weights with variance ``base variance * fan_in
      base / fan_in``; the sqrt(d_model) embedding scale becomes sqrt(b);
    * output logits multiplied by ``1/m``;
    * attention scores scaled by ``1/d_head`` (as ``sqrt(d_head base) / d_head``);
    * learning rates per group: Adam-like optimizers (adam, adamw, lion) divide a hidden matrix's rate by
      its fan-in multiplier and keep the others'; SGD multiplies a vector-like parameter's by its width
      multiplier and a hidden matrix's by fan_out / fan_in multipliers (the ``mup`` package's MuAdam and
      MuSGD);
    * weight decay per group divided by that learning-rate multiplier (registry/optimizer.py
      ``param_groups``), as MuAdam/MuAdamW/MuSGD do by default (``decoupled_wd=False``), so the decay
      ``lr * weight_decay`` each step applies is the base width's at every width (version 2; version 1
      kept the spec's decay for every group, so a wider model decayed its hidden matrices less).

    With it the activations keep their size across widths during training (the coordinate check,
    tests/engine/test_mup.py; docs/recipe.md) and the best learning rate transfers from the base width.
    """

    width_relative = True
    logit_multiplier: float

    def __init__(self, d_model: int, heads: int, mup_base_width: int = 0) -> None:
        if mup_base_width < 1:
            raise ValueError("mup needs mup_base_width, the width its hyperparameters were tuned at")
        self.d_model, self.heads, self.base_width = d_model, heads, mup_base_width
        self.width_mult = d_model / mup_base_width
        self.logit_multiplier = 1.0 if d_model == mup_base_width else mup_base_width / d_model

    def base_sizes(self, d_model: int, d_ff: int) -> tuple[int, int]:
        """The base model: width ``b``, and a feed-forward width shrunk in the same proportion."""
        assert self.base_width is not None
        return self.base_width, max(1, round(d_ff * self.base_width / d_model))

    def init_multiplier(self, shape: WidthShape) -> float:
        if shape.std is None or shape.base_std is None or shape.std == 0 or shape.infinite == 0:
            return 1.0
        if shape.infinite == 1:
            return shape.base_std / shape.std
        return shape.base_std / math.sqrt(shape.fan_in_mult) / shape.std

    def lr_multiplier(self, shape: WidthShape, rule: str) -> float:
        if shape.infinite == 0:
            return 1.0
        if rule == "sgd":
            return shape.width_mult if shape.infinite == 1 else shape.fan_out_mult / shape.fan_in_mult
        return 1.0 / shape.fan_in_mult if shape.infinite >= 2 else 1.0

    def embed_multiplier(self, d_model: int) -> float:
        assert self.base_width is not None
        return math.sqrt(d_model if d_model == self.base_width else self.base_width)

    def base_d_head(self, heads: int) -> int | None:
        assert self.base_width is not None
        return self.base_width // heads
