"""The component factory both architectures share: every registry component a model section names,
built the one way (:class:`Components`), the controlled initialisation of an assembled model
(:func:`initialise`), and the pieces both skeletons hold (:class:`Stack`, :func:`score_dtype`).

torchtune's split, learned from: components here, the thin builders that arrange them in
``ablate/engine/builders.py``, the skeletons in ``encoder_decoder.py`` and ``decoder_only.py``, and the
choice between the two architectures in ``ablate/engine/dispatch.py``. A new axis is taught here, in one
place.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import torch
from torch import Tensor, nn

import registry
from ablate.engine.init import init_parameters
from ablate.spec.experiment import ModelSpec
from registry.attention import MultiHeadAttention
from registry.masking import MaskFill, make_mask
from registry.residual import Depth, NormFactory


class Stack(nn.Module):
    """Layers plus the final norm (pre-norm) or an identity (post-norm)."""

    def __init__(self, layers: list[nn.Module], norm: nn.Module) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.norm = norm


def score_dtype(weight: Tensor, device_type: str) -> torch.dtype:
    """The dtype a model's attention scores have: the autocast dtype when autocast is on, else its weights'
    (masks are built in it, so a fill such as -1e9 is representable where the scores are)."""
    if torch.is_autocast_enabled(device_type):
        return torch.get_autocast_dtype(device_type)
    return weight.dtype


def head_logits(generator: nn.Module, multiplier: float, head: nn.Module, hidden: Tensor) -> Tensor:
    """The output logits (..., V) of final hidden states (..., d), as both skeletons give them: the output
    projection, the parametrisation's multiplier (muP's base/width; 1 otherwise), then the logits axis's
    component (the logits as they are, or soft-capped)."""
    out = generator(hidden)
    if multiplier != 1.0:
        out = out * multiplier
    return head(out)  # type: ignore[no-any-return]


class Components:
    """Every registry component a model section names, built the one way both architectures share: its
    contract's arguments (registry/<axis>.py), the options its axis and variant declare
    (``ModelSpec.option_values``) and the sub-axis components it takes (``activation``). The encoder-decoder
    (``ablate.engine.builders.build_model``) and the decoder-only model (``build_lm`` beside it) only arrange
    what this builds: a new axis is taught here, in one place."""

    def __init__(self, model_spec: ModelSpec) -> None:
        self.spec = model_spec

    def component(self, kind: str, *args: object, **kwargs: object) -> nn.Module:
        s = self.spec
        entry = registry.REGISTRY.entry(kind, getattr(s, kind))
        subs = {sub: self.component(sub) for sub in entry.takes}
        return cast(nn.Module, entry.obj(*args, **kwargs, **s.option_values(kind), **subs))

    def norm(self) -> nn.Module:
        return self.component("norm", self.spec.d_model)

    def residuals(self, n: int, depth: Depth) -> list[nn.Module]:
        """One layer's ``n`` residual connections (one norm each, or one shared: ``NormFactory``)."""
        norms = NormFactory(self.norm)
        return [self.component("residual", norms, self.spec.dropout, depth=depth) for _ in range(n)]

    def attention(self, cross: bool = False) -> nn.Module:
        s = self.spec
        grouped = {} if s.kv_heads is None else {"kv_heads": s.kv_heads}  # GQA / MQA (model.kv_heads)
        return self.component("attention", s.d_model, s.heads, s.attention_dropout, cross=cross, **grouped)

    def ffn(self) -> nn.Module:
        s = self.spec
        return self.component("ffn", s.d_model, s.d_ff, s.dropout)

    def stack_norm(self) -> nn.Module:
        """The norm after a stack, for a residual scheme that has one (pre-norm)."""
        return self.norm() if registry.get("residual", self.spec.residual).final_norm else nn.Identity()

    def positions(self, causal: bool) -> nn.Module:
        s = self.spec
        return self.component("positions", s.d_model, s.heads, s.max_positions,
                              s.dropout if s.position_dropout else 0.0, causal=causal)

    def embeddings(self, src_vocab_size: int, tgt_vocab_size: int) -> tuple[Any, Any, Any]:
        """(source embedding, target embedding, generator), as the embeddings variant ties them."""
        s = self.spec
        make = registry.REGISTRY.entry("embeddings", s.embeddings).obj
        return cast(tuple[Any, Any, Any],
                    make(src_vocab_size, tgt_vocab_size, s.d_model, **s.option_values("embeddings")))

    def mask(self) -> MaskFill:
        return make_mask(self.spec.mask, self.spec.mask_fill)

    def embedding_dropout(self) -> nn.Module:
        return self.component("embedding_dropout", self.spec.dropout)

    def logits(self) -> nn.Module:
        """What the output logits pass through (the logits axis: as they are, or soft-capped)."""
        return self.component("logits")

    def parametrisation(self) -> Any:
        """The parametrisation's rules for this model's sizes (registry/parametrisation.py)."""
        s = self.spec
        make = registry.REGISTRY.entry("parametrisation", s.parametrisation).obj
        return make(s.d_model, s.heads, **s.option_values("parametrisation"))

    @property
    def embed_scale(self) -> float:
        """The token embeddings' multiplier: sqrt(d_model) (muP: sqrt of its base width) where
        ``model.embed_scale`` is on."""
        return float(self.parametrisation().embed_multiplier(self.spec.d_model)) if self.spec.embed_scale \
            else 1.0


def initialise(model: nn.Module, layers: Sequence[nn.Module], seed: int, init: str) -> None:
    """Draw every parameter (:func:`init_parameters`), then run each residual's ``init_sublayer`` hook on
    its sublayer (DeepNorm: the paper's beta-scaled start of value/output and FFN weights)."""
    init_parameters(model, seed, init)
    for layer in layers:
        for residual, sublayer in layer.sublayers():  # type: ignore[operator]
            hook = getattr(residual, "init_sublayer", None)
            if hook is not None:
                hook(sublayer)


@torch.no_grad()
def record_attention(model: nn.Module, groups: Mapping[str, Sequence[MultiHeadAttention]],
                     forward: Callable[[], object]) -> dict[str, list[Tensor]]:
    """Attention probabilities per role and layer, each (heads, Tq, Tk), of the one example ``forward``
    runs through ``model`` in eval mode: the attention cores of ``groups`` keep their last weights for it
    (``model.attention: explicit``; sdpa keeps none), then forget them."""
    everything = [m for group in groups.values() for m in group]
    if not all(getattr(m, "returns_weights", False) for m in everything):
        raise ValueError("attention_maps needs model.attention: explicit (sdpa keeps no weights)")
    was_training = model.training
    model.eval()
    try:
        for m in everything:
            m.keep_weights = True
        forward()
        return {k: [m.last_weights[0] for m in group] for k, group in groups.items()}  # type: ignore[index]
    finally:
        for m in everything:
            m.keep_weights, m.last_weights = False, None
        model.train(was_training)

