"""A run's training compute: its parameters without embeddings, the tokens it trained on, and its FLOPs.

The formula is Kaplan et al. 2020 ("Scaling Laws for Neural Language Models", section 2.1 and Table 1):

* ``N``, the non-embedding parameters: those of the layer stacks (``encoder.*`` and ``decoder.*``:
  attention, feed-forward, norms), leaving out the token embeddings, the position tables or biases and
  the output projection, whose size is the vocabulary's and not the model's;
* a forward pass costs ``2 N + 2 n_layer n_ctx d_model`` FLOPs per token (the matrix multiplies, then the
  attention scores and their weighted sum over a context of ``n_ctx``), and training three times that
  (the backward pass costs twice the forward), so ``D`` tokens cost

      C = 6 N D + 6 n_layer n_ctx d_model D.

A decoder-only model reads packed blocks of ``data.max_len`` tokens: ``n_ctx`` is the block length and
``D`` the tokens it predicted. An encoder-decoder reads each source token through the encoder and each
target token through the decoder, whose cross-attention looks at the source as well:

      C = 6 (N_enc D_src + N_dec D_tgt) + 6 d_model (L_enc T_src D_src + L_dec (T_tgt + T_src) D_tgt),

with ``D_tgt`` the target tokens it trained on (the trainer's count), ``T_src`` and ``T_tgt`` the mean
lengths of the training split's sentences (target with its end-of-sentence token) and ``D_src = D_tgt
T_src / T_tgt``. The same function estimates a planned cell before it runs (``planned_tokens``): a language
model trains exactly ``max_steps x batch_tokens`` tokens, a translation model up to that many.

Pure arithmetic on a built model's parameter counts and a few numbers of its data; nothing here trains.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from torch import nn

FORMULA = "C = 6·N·D + 6·n_layer·n_ctx·d_model·D (Kaplan et al. 2020, N without embeddings)"
STACKS = ("encoder", "decoder")  # the modules whose parameters N counts (ablate.engine.components.Stack)


@dataclass(frozen=True)
class Shape:
    """What the formula needs of a model: its stacks' parameters and layers, and its width."""

    encoder_params: int  # 0 for a decoder-only model
    decoder_params: int
    encoder_layers: int
    decoder_layers: int
    d_model: int

    @property
    def non_embedding(self) -> int:
        return self.encoder_params + self.decoder_params


@dataclass(frozen=True)
class Compute:
    """One run's training compute."""

    params: int  # N: parameters without embeddings
    tokens: int  # D: the tokens it trained on (target tokens for an encoder-decoder)
    flops: float  # C by FORMULA


def shape_of(model: nn.Module) -> Shape:
    """The stacks' parameter counts and layers of a built model (either architecture)."""
    counts = {name: 0 for name in STACKS}
    layers = {name: 0 for name in STACKS}
    for name in STACKS:
        stack = getattr(model, name, None)
        if stack is None:
            continue
        counts[name] = sum(p.numel() for p in stack.parameters())
        layers[name] = len(getattr(stack, "layers", ()))
    width = _width(model)
    return Shape(counts["encoder"], counts["decoder"], layers["encoder"], layers["decoder"], width)


def _width(model: nn.Module) -> int:
    """d_model: the width of the token embedding (every architecture has one)."""
    for module in model.modules():
        if isinstance(module, nn.Embedding):
            return int(module.embedding_dim)
    raise ValueError("a model without a token embedding has no d_model to count attention FLOPs with")


def decoder_only_flops(shape: Shape, tokens: float, context: float) -> float:
    """C for ``tokens`` predicted tokens in blocks of ``context``."""
    return 6.0 * shape.decoder_params * tokens + 6.0 * shape.decoder_layers * context * shape.d_model * tokens


def encoder_decoder_flops(shape: Shape, target_tokens: float, source_len: float, target_len: float) -> float:
    """C for ``target_tokens`` target tokens of sentences with mean lengths ``source_len`` and
    ``target_len`` (the source tokens are ``target_tokens * source_len / target_len``)."""
    if target_len <= 0:
        return math.nan
    source_tokens = target_tokens * source_len / target_len
    matmuls = 6.0 * (shape.encoder_params * source_tokens + shape.decoder_params * target_tokens)
    attention = 6.0 * shape.d_model * (shape.encoder_layers * source_len * source_tokens
                                       + shape.decoder_layers * (target_len + source_len) * target_tokens)
    return matmuls + attention


def training_compute(model: nn.Module, tokens: int, *, context: float | None = None,
                     source_len: float | None = None, target_len: float | None = None) -> Compute:
    """The compute of a model that trained on ``tokens``: a decoder-only model gives ``context`` (its block
    length), an encoder-decoder the mean ``source_len`` and ``target_len`` of its training sentences."""
    shape = shape_of(model)
    if shape.encoder_params == 0:
        assert context is not None, "a decoder-only model's FLOPs need its block length"
        flops = decoder_only_flops(shape, tokens, context)
    else:
        assert source_len is not None and target_len is not None, "an encoder-decoder needs sentence lengths"
        flops = encoder_decoder_flops(shape, tokens, source_len, target_len)
    return Compute(shape.non_embedding, int(tokens), flops)


def mean_lengths(source_ids: list[list[int]], target_ids: list[list[int]]) -> tuple[float, float]:
    """(mean source length, mean target length + 1 for the end-of-sentence token) of a split's sentences."""
    if not source_ids:
        return math.nan, math.nan
    n = len(source_ids)
    return sum(len(s) for s in source_ids) / n, sum(len(t) + 1 for t in target_ids) / n


def planned_compute(shape: Shape, steps: int, batch_tokens: int, max_len: int) -> Compute:
    """A cell's compute before it runs: ``steps x batch_tokens`` tokens, exact for a language model (its
    blocks are full); for an encoder-decoder an upper bound (batches are at most ``batch_tokens``) with
    both sentence lengths at ``max_len``, also an upper bound."""
    tokens = steps * batch_tokens
    if shape.encoder_params == 0:
        return Compute(shape.non_embedding, tokens, decoder_only_flops(shape, tokens, max_len))
    return Compute(shape.non_embedding, tokens, encoder_decoder_flops(shape, tokens, max_len, max_len))
