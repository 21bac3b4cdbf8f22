"""The model's parametrisation applied after its controlled init (registry/parametrisation.py): the
standard one changes nothing; muP compares every parameter with the same parameter of a base model, built
from the same spec at the base width (the ``mup`` package's base shapes), and from that sets

* the init multipliers (each parameter's drawn values times one constant, :func:`apply`),
* the attention modules' 1/d_head score scale against the base head size,
* the output logit multiplier (``model.logit_multiplier``),
* and keeps each parameter's :class:`~registry.parametrisation.WidthShape` on the model
  (``model.width_shapes``), from which the trainer takes muP's learning rate per parameter group
  (ablate/engine/param_roles.py).

At the base width every multiplier is exactly 1 and muP is the standard parametrisation, bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ablate.engine.decoder_only import DecoderOnlyLM
from ablate.engine.encoder_decoder import Seq2SeqTransformer
from ablate.engine.init import drawn_std
from ablate.spec.experiment import ModelSpec
from registry.attention import MultiHeadAttention
from registry.parametrisation import WidthShape


def _params(model: nn.Module) -> dict[str, tuple[nn.Module, str, torch.Tensor]]:
    """{name: (module, attribute, parameter)} under ``named_parameters``' names (a tied tensor once)."""
    out: dict[str, tuple[nn.Module, str, torch.Tensor]] = {}
    seen: set[int] = set()
    for mod_name, module in model.named_modules():
        for pname, p in module.named_parameters(recurse=False):
            if id(p) not in seen:
                seen.add(id(p))
                out[f"{mod_name}.{pname}" if mod_name else pname] = (module, pname, p)
    return out


def base_spec(model_spec: ModelSpec, rule: Any) -> ModelSpec:
    """The same model at the rule's base sizes, in the standard parametrisation."""
    d_model, d_ff = rule.base_sizes(model_spec.d_model, model_spec.d_ff)
    return model_spec.model_copy(update={"d_model": d_model, "d_ff": d_ff, "parametrisation": "standard"})


def width_shapes(model: nn.Module, base: nn.Module, scheme: str) -> dict[str, WidthShape]:
    """Each parameter's shape and drawn std in ``model`` and in the ``base`` model (same names)."""
    theirs = _params(base)
    shapes = {}
    for name, (module, pname, p) in _params(model).items():
        b_module, _, b_p = theirs[name]
        shapes[name] = WidthShape(tuple(p.shape), tuple(b_p.shape), drawn_std(module, pname, p, scheme),
                                  drawn_std(b_module, pname, b_p, scheme))
    return shapes


@torch.no_grad()
def apply(model: Seq2SeqTransformer | DecoderOnlyLM, model_spec: ModelSpec, rule: Any,
          build_base: Callable[[ModelSpec], nn.Module], attention: list[MultiHeadAttention]) -> None:
    """Apply ``rule`` (the spec's parametrisation component) to a built, initialised ``model``."""
    model.parametrisation = rule
    model.width_shapes = {}
    if rule.base_width is None:
        return
    shapes = width_shapes(model, build_base(base_spec(model_spec, rule)), model_spec.init)
    for name, (_, _, p) in _params(model).items():
        multiplier = rule.init_multiplier(shapes[name])
        if multiplier != 1.0:
            p.mul_(multiplier)
    model.width_shapes = shapes
    model.logit_multiplier = float(rule.logit_multiplier)
    base_d_head = rule.base_d_head(model_spec.heads)
    for module in attention:
        if base_d_head is not None and base_d_head != module.d_head:
            module.width_scaled(base_d_head)
