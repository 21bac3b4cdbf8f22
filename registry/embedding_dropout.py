"""Dropout on the scaled token embeddings before positions are added (axis ``embedding_dropout``).

Component contract: ``cls(p: float) -> Module``, elementwise on the (B, T, d) token embeddings after the
``sqrt(d_model)`` scale and before ``positions.embed()`` (which applies the position dropout, if any, to
the sum). The builder passes the model's ``dropout`` rate. No parameters: checkpoints do not change.

Vaswani et al. 2017 (section 5.4) drop out "the sums of the embeddings and the positional encodings"
once, which is the default here (``none`` adds nothing). The 2019 Multi30k blog (preset
d-multi30k-2019-postnorm-conv1d) drops out the scaled embedding as well, so its embeddings see dropout
twice: ``before_positions``.
"""

from __future__ import annotations

from torch import Tensor, nn

from registry import Axis, declare_axis, register
from registry.dropout import Dropout

AXIS = declare_axis(Axis(
    kind="embedding_dropout",
    default="none",
    doc="an extra dropout on the sqrt(d)-scaled token embeddings, before the positions are added",
    contract="cls(p) -> Module (B, T, d) -> (B, T, d), elementwise, no parameters",
    hooks=("embedding: after the sqrt(d_model) scale, before positions.embed()",),
    added_later=True,  # every spec before the axis had none: their identity stays
))


@register("embedding_dropout", "none")
class NoEmbeddingDropout(nn.Module):
    """No dropout before the positions: at most the position dropout on embeddings + positions (Vaswani et
    al. 2017, section 5.4, and the tutorials a-blog-2025, c-lightning-2024, e-notebook-2024; the README of
    b-github-readme prints no dropout at the embeddings at all)."""

    def __init__(self, p: float = 0.0) -> None:
        super().__init__()

    def forward(self, x: Tensor) -> Tensor:
        return x


@register("embedding_dropout", "before_positions")
class EmbeddingDropoutBeforePositions(Dropout):
    """``drop(emb * sqrt(d))`` before the positions are added, at the model's dropout rate: with the
    position dropout on the sum, the embeddings see dropout twice, as in the 2019 Multi30k blog (sections
    "Encoder" and "Decoder": the scaled token embedding is dropped out, then its "Positional Encoding"
    drops out the sum with the positions again)."""
