"""Position information (axis ``positions``): at the embedding, on queries and keys, or as a score bias.

Component contract: ``cls(d_model: int, heads: int, max_positions: int, dropout: float, *, causal: bool,
**options)``, one instance per stack (the decoder's is ``causal``), with two hooks the model calls:

* ``embed(x (B, T, d), start_pos: int = 0) -> (B, T, d)``: at the (already sqrt(d)-scaled) token
  embeddings of positions ``start_pos .. start_pos+T-1``; additive tables add themselves here, every
  variant applies the position dropout here; additive tables also have ``embed_at(x, positions (B, T))``
  for explicit positions (a decoder-only model's packed documents each restart at 0);
* ``attention(q_start: int, q_len: int, k_len: int, device) -> PositionHooks | None``: once per forward,
  what each self-attention layer of the stack needs for queries at absolute positions
  ``q_start .. q_start+q_len-1`` and keys at ``0 .. k_len-1``: a ``rotate`` applied to the queries and to
  the new keys (rotary schemes: the keys in a KV cache are stored rotated) and/or an additive score
  ``bias`` of shape (heads, q_len, k_len) (ALiBi, T5's relative buckets). Cross-attention gets none.

Incremental decoding calls both with the absolute offset of the new tokens, so a rotary or ALiBi model
decodes with the KV cache exactly as it scores the whole sequence.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from registry import Axis, Option, declare_axis, register
from registry.dropout import Dropout

AXIS = declare_axis(Axis(
    kind="positions",
    default="sinusoidal",
    doc="how the model knows where a token is",
    contract=("cls(d_model, heads, max_positions, dropout, *, causal, **options); embed(x, start_pos) -> x; "
              "attention(q_start, q_len, k_len, device) -> PositionHooks | None"),
    hooks=("embedding: embed() after the token embedding (additive tables, position dropout)",
           "attention.rotary: PositionHooks.rotate on queries and new keys of self-attention",
           "attention.bias: PositionHooks.bias added to self-attention scores"),
))


@dataclass(frozen=True)
class PositionHooks:
    """What one forward's self-attention layers apply: built once per forward, shared by all layers."""

    rotate: Callable[[Tensor], Tensor] | None = None  # (B, heads, T, d_head) -> same: queries, new keys
    bias: Tensor | None = None  # (heads, Tq, Tk) float32, added to the attention scores


def _check_range(start_pos: int, length: int, max_positions: int) -> None:
    if start_pos + length > max_positions:
        raise ValueError(
            f"position {start_pos + length - 1} is beyond max_positions {max_positions}; "
            "raise model.max_positions or shorten the sequences"
        )


class _Positions(nn.Module):
    """Shared plumbing: the position dropout, the range check; no attention hooks by default."""

    def __init__(self, d_model: int, heads: int = 1, max_positions: int = 512, dropout: float = 0.0,
                 *, causal: bool = False) -> None:
        super().__init__()
        self.d_model, self.heads, self.max_positions, self.causal = d_model, heads, max_positions, causal
        self.dropout = Dropout(dropout)

    def embed(self, x: Tensor, start_pos: int = 0) -> Tensor:
        _check_range(start_pos, x.size(1), self.max_positions)
        return self.dropout(x)

    def attention(self, q_start: int, q_len: int, k_len: int, device: torch.device) -> PositionHooks | None:
        return None


def sinusoid_table(max_positions: int, d_model: int) -> Tensor:
    """(max_positions, d_model): sin on even features, cos on odd ones, wavelengths 2*pi .. 10000*2*pi."""
    position = torch.arange(max_positions, dtype=torch.float32).unsqueeze(1)  # (P, 1)
    div = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
    table = torch.zeros(max_positions, d_model)
    table[:, 0::2] = torch.sin(position * div)
    table[:, 1::2] = torch.cos(position * div)
    return table


@register("positions", "sinusoidal", check=lambda m: None if m["d_model"] % 2 == 0 else
          f"sinusoidal positions need an even d_model, not {m['d_model']}")
class SinusoidalPositions(_Positions):
    """Fixed sinusoidal encodings (Vaswani et al. 2017, section 3.5), added at the embedding.

    ``PE(pos, 2i) = sin(pos / 10000^(2i/d))``, ``PE(pos, 2i+1) = cos(pos / 10000^(2i/d))``: what all five
    tutorials use. The buffer is not saved in the state dict: it is a pure function of its sizes.
    """

    def __init__(self, d_model: int, heads: int = 1, max_positions: int = 512, dropout: float = 0.0,
                 *, causal: bool = False) -> None:
        super().__init__(d_model, heads, max_positions, dropout, causal=causal)
        self.table: Tensor
        self.register_buffer("table", sinusoid_table(max_positions, d_model), persistent=False)

    def embed(self, x: Tensor, start_pos: int = 0) -> Tensor:
        _check_range(start_pos, x.size(1), self.max_positions)
        return self.dropout(x + self.table[start_pos:start_pos + x.size(1)])  # (T, d) broadcasts over B

    def embed_at(self, x: Tensor, positions: Tensor) -> Tensor:
        """``embed`` at explicit positions (B, T): a packed block's documents each start at 0, so every
        position is below T, the bound checked (on the host: reading ``positions.max()`` waited for the
        device and broke torch.compile's graph)."""
        _check_range(0, x.size(1), self.max_positions)
        return self.dropout(x + self.table[positions])  # (B, T, d)


@register("positions", "learned")
class LearnedPositions(_Positions):
    """Learned absolute positions: ``nn.Embedding(max_positions, d)`` added at the embedding (Gehring et
    al. 2017; BERT, GPT). Vaswani et al. 2017 (table 3, row E) found them on par with sinusoids (25.7 vs
    25.8 BLEU); the Multi30k tutorial (preset d-multi30k-2019-postnorm-conv1d) defines one as the
    alternative. Cannot extrapolate past ``max_positions``; adds ``max_positions * d`` parameters per stack.
    """

    def __init__(self, d_model: int, heads: int = 1, max_positions: int = 512, dropout: float = 0.0,
                 *, causal: bool = False) -> None:
        super().__init__(d_model, heads, max_positions, dropout, causal=causal)
        self.table = nn.Embedding(max_positions, d_model)

    def embed(self, x: Tensor, start_pos: int = 0) -> Tensor:
        _check_range(start_pos, x.size(1), self.max_positions)
        weight = self.table.weight
        if weight.dim() == 2:  # the table's rows, sliced once and broadcast over the batch
            return self.dropout(x + weight[start_pos:start_pos + x.size(1)])
        # A packed template's table is stacked, (cells, P, d) (ablate/engine/packed_model.py): its rows are
        # looked up through the table's own forward, which the pack runs per cell on that cell's rows.
        at = torch.arange(start_pos, start_pos + x.size(1), device=x.device).expand(x.size(0), -1)
        return self.dropout(x + self.table(at))

    def embed_at(self, x: Tensor, positions: Tensor) -> Tensor:
        """``embed`` at explicit positions (B, T): a packed block's documents each start at 0 (every
        position below T, the bound checked on the host, as in :meth:`SinusoidalPositions.embed_at`)."""
        _check_range(0, x.size(1), self.max_positions)
        return self.dropout(x + self.table(positions))  # (B, T, d)


@register("positions", "none")
class NoPositions(_Positions):
    """No position information at all: the encoder sees a bag of tokens; the decoder only its causal mask
    (Haviv et al. 2022 found causal decoders learn positions without encodings). The floor any position
    scheme should beat."""


def rotate_pairs(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate features pairwise, ``(x_2i, x_2i+1)`` by angle ``theta_i * m``, as in Su et al. (eq. 34):
    ``(x_2i cos - x_2i+1 sin, x_2i sin + x_2i+1 cos)`` in float32 whatever ``x``'s dtype.

    ``x``: (B, heads, T, d_head); ``cos``, ``sin``: (T, d_head/2) for the T positions. The formula as
    written, what :class:`PairRotation` computes bit for bit (tests/engine/test_step_numbers.py).
    """
    pairs = x.float().unflatten(-1, (-1, 2))  # (B, h, T, d_head/2, 2)
    even, odd = pairs[..., 0], pairs[..., 1]
    out = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1)
    return out.flatten(-2).to(x.dtype)


def swap_pairs(x: Tensor) -> Tensor:
    """``(x_2i+1, x_2i)`` for every pair ``(x_2i, x_2i+1)`` of the last dimension: two strided copies."""
    out = torch.empty_like(x)
    into, source = out.unflatten(-1, (-1, 2)), x.unflatten(-1, (-1, 2))
    into[..., 0].copy_(source[..., 1])
    into[..., 1].copy_(source[..., 0])
    return out


def interleaved_tables(cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
    """(P, d_head/2) cosines and sines as the (P, d_head) factors :class:`PairRotation` multiplies by:
    ``(cos_i, cos_i)`` and ``(sin_i, -sin_i)`` for each pair i."""
    return cos.repeat_interleave(2, dim=-1), torch.stack((sin, -sin), dim=-1).flatten(-2)


class PairRotation(torch.autograd.Function):
    """:func:`rotate_pairs` as ``x * C + swap(x * S)`` on the whole contiguous head, with its backward
    ``g * C - swap(g * S)`` written out (``C``, ``S``: :func:`interleaved_tables`).

    The same numbers bit for bit, forward and backward: each output is one rounded product plus or minus
    another, as in the pairwise formula (``a + (-b)`` rounds as ``a - b``, and a sum of two terms does not
    depend on their order), and every product is its own kernel, so no compiler fuses one into a
    multiply-add. What it saves: the pairwise form multiplies stride-2 views of a strided head (the fused
    projection's), which the CPU's kernels run unvectorised, and its autograd graph of selects, a stack and
    six products scatters its gradients through zero-filled copies. On the CPU bench model (d 256, 4 heads,
    T 128) the rotation took a tenth of the train step's time and now takes a third of that
    (docs/benchmarks.md).
    """

    @staticmethod
    def forward(ctx: Any, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        real = x.float().contiguous()  # (B, heads, T, d_head); a copy of a strided or half-precision head
        out = real * cos
        out += swap_pairs(real * sin)  # (x_2i cos - x_2i+1 sin, x_2i+1 cos + x_2i sin)
        ctx.save_for_backward(cos, sin)
        return out.to(x.dtype)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None]:
        cos, sin = ctx.saved_tensors
        real = grad.float().contiguous()
        out = real * cos
        out -= swap_pairs(real * sin)  # (g_2i cos + g_2i+1 sin, g_2i+1 cos - g_2i sin): the inverse rotation
        return out.to(grad.dtype), None, None


def _even_head(m: Mapping[str, Any]) -> str | None:
    d_head = m["d_model"] // m["heads"]
    return None if d_head % 2 == 0 else f"rope rotates pairs: d_model/heads must be even, not {d_head}"


@register("positions", "rope", check=_even_head, options=(Option(
    "rope_base", float, 10000.0, "the base of the rotary frequencies theta_i = base^(-2i/d_head)", gt=1.0,
),))
class RotaryPositions(_Positions):
    """Rotary position embedding, RoPE (Su et al. 2021, "RoFormer", eq. 34).

    Each pair of query/key features ``(x_2i, x_2i+1)`` at position ``m`` is rotated by ``m * theta_i``,
    ``theta_i = base^(-2i/d_head)``, so ``q_m . k_n`` depends on ``m - n`` only. Applied in every
    self-attention layer, to queries and keys (keys are cached rotated); nothing is added at the embedding.
    The rotation runs as :class:`PairRotation`, the formula's numbers bit for bit in fewer passes.
    """

    def __init__(self, d_model: int, heads: int = 1, max_positions: int = 512, dropout: float = 0.0,
                 *, causal: bool = False, rope_base: float = 10000.0) -> None:
        super().__init__(d_model, heads, max_positions, dropout, causal=causal)
        d_head = d_model // heads
        if d_head % 2:
            raise ValueError(f"rope needs an even head size, found d_model/heads = {d_head}")
        self.base = rope_base
        inv_freq = rope_base ** (-torch.arange(0, d_head, 2, dtype=torch.float64) / d_head)  # (d_head/2,)
        angles = torch.arange(max_positions, dtype=torch.float64)[:, None] * inv_freq  # (P, d_head/2)
        self.cos: Tensor
        self.sin: Tensor
        self.register_buffer("cos", angles.cos().float(), persistent=False)
        self.register_buffer("sin", angles.sin().float(), persistent=False)
        # (P, d_head) factors of PairRotation: the same angles, each pair's cosine twice and (sin, -sin)
        self.cos_pairs: Tensor
        self.sin_pairs: Tensor
        cos_pairs, sin_pairs = interleaved_tables(self.cos, self.sin)
        self.register_buffer("cos_pairs", cos_pairs, persistent=False)
        self.register_buffer("sin_pairs", sin_pairs, persistent=False)

    def attention(self, q_start: int, q_len: int, k_len: int, device: torch.device) -> PositionHooks:
        _check_range(q_start, q_len, self.max_positions)
        cos = self.cos_pairs[q_start:q_start + q_len]  # (T, d_head); new keys share the queries' positions
        sin = self.sin_pairs[q_start:q_start + q_len]
        return PositionHooks(rotate=lambda x: PairRotation.apply(x, cos, sin))  # rotate_pairs bit for bit


def alibi_slopes(heads: int) -> Tensor:
    """ALiBi's head slopes (Press et al. 2022, section 3): the geometric sequence starting at and with ratio
    ``2^(-8/n)`` for n heads; a head count that is not a power of two takes the slopes of the closest lower
    power of two and then every other slope of the next one."""

    def power_of_two(n: int) -> list[float]:
        start = 2 ** (-8 / n)
        return [start ** (i + 1) for i in range(n)]

    if math.log2(heads).is_integer():
        return torch.tensor(power_of_two(heads))
    lower = 2 ** math.floor(math.log2(heads))
    return torch.tensor(power_of_two(lower) + power_of_two(2 * lower)[0::2][: heads - lower])


ALIBI_OPTIONS = (Option(
    "alibi_encoder", str, "directional",
    "ALiBi without a causal mask (the encoder): 'directional' makes every other head Press et al.'s causal "
    "bias read left to right and the rest its mirror image, read right to left, so the encoder tells "
    "directions apart; 'symmetric' is -m|i-j| on both sides (ablate's version 1), which cannot",
    choices=("directional", "symmetric"),
),)

# The bias of keys a one-directional encoder head does not look at: finite, so that a padding query whose
# visible side is all padding never gets a row of -inf (NaN in explicit attention), and representable in
# fp16; exp(-1e4) is 0 in the fp32 softmax, as good as masked.
ALIBI_HIDDEN = -1.0e4


@register("positions", "alibi", options=ALIBI_OPTIONS, version=2)
class ALiBiPositions(_Positions):
    """ALiBi, attention with linear biases (Press et al. 2022, eq. in section 3).

    Self-attention scores get ``-m_h * (i - j)`` for query i and key j <= i, one slope ``m_h`` per head
    (:func:`alibi_slopes`); nothing is added at the embedding, and cross-attention gets no bias. Press et
    al. define ALiBi for causal language models, where the causal mask hides j > i: that is the decoder's
    bias here. An encoder sees keys on both sides, which the paper does not define. The default
    (``alibi_encoder: directional``) keeps the paper's causal bias in the even-numbered heads (keys to the
    right hidden) and its mirror image ``-m_h * (j - i)`` for j >= i in the odd ones (keys to the left
    hidden), like the two directions of a bidirectional RNN: every head is the paper's own form, and the
    encoder can tell a token's left from its right, which it needs to order the source when cross-attention
    carries no positions. ``symmetric`` uses ``-m_h * |i - j|`` on both sides (version 1's only form): such
    an encoder is blind to direction and cannot learn to reverse a sequence. Relative biases give no
    absolute place: an encoder counts a token's distance to the source's end only from a token it can
    recognise there, so a source should end in eos (``data.source_eos``; the quickstart sets it). ALiBi has
    no parameters, so no init.

    Version 2: the directional encoder became the default.
    """

    def __init__(self, d_model: int, heads: int = 1, max_positions: int = 512, dropout: float = 0.0,
                 *, causal: bool = False, alibi_encoder: str = "directional") -> None:
        super().__init__(d_model, heads, max_positions, dropout, causal=causal)
        if alibi_encoder not in ("directional", "symmetric"):
            raise ValueError(f"alibi_encoder must be 'directional' or 'symmetric', not {alibi_encoder!r}")
        self.encoder_form = alibi_encoder
        self.slopes: Tensor
        self.looks_right: Tensor
        # (heads,) True for the heads that read right to left (odd heads of a directional encoder)
        one_sided = alibi_encoder == "directional" and not causal
        slopes = alibi_slopes(heads)
        if one_sided:  # each pair of heads reads both ways at the pair's steeper slope
            slopes = slopes[torch.arange(heads) // 2 * 2]
        self.register_buffer("slopes", slopes, persistent=False)
        self.register_buffer("looks_right", (torch.arange(heads) % 2 == 1) & one_sided, persistent=False)
        self.one_sided = one_sided

    def attention(self, q_start: int, q_len: int, k_len: int, device: torch.device) -> PositionHooks:
        _check_range(q_start, q_len, self.max_positions)
        q_pos = torch.arange(q_start, q_start + q_len, device=device)[:, None]
        offset = (torch.arange(k_len, device=device)[None, :] - q_pos).float()  # (Tq, Tk): key - query
        slopes = self.slopes.to(device)[:, None, None]  # (heads, 1, 1)
        if not self.one_sided:  # causal (the mask hides j > i), or the symmetric encoder
            return PositionHooks(bias=-slopes * offset.abs())  # (heads, Tq, Tk)
        looks_right = self.looks_right.to(device)[:, None, None]
        ahead = torch.where(looks_right, offset, -offset)  # distance in the direction the head reads
        bias = torch.where(ahead >= 0, -slopes * ahead, torch.full_like(ahead, ALIBI_HIDDEN))
        return PositionHooks(bias=bias)  # (heads, Tq, Tk)


def relative_buckets(relative: Tensor, bidirectional: bool, num_buckets: int, max_distance: int) -> Tensor:
    """T5's bucket of each relative position ``key - query`` (Raffel et al. 2020, section 2.1).

    Half the buckets (all of them when unidirectional) hold exact distances up to a quarter (half) of the
    buckets; the rest grow logarithmically up to ``max_distance``, beyond which all share the last bucket.
    Bidirectional: the other half for keys after the query. Unidirectional (causal): only keys before it.
    """
    buckets = torch.zeros_like(relative)
    if bidirectional:
        num_buckets //= 2
        buckets += (relative > 0).long() * num_buckets
        distance = relative.abs()
    else:
        distance = (-relative).clamp_min(0)
    exact = num_buckets // 2
    log_ratio = torch.log(distance.float().clamp_min(1) / exact) / math.log(max_distance / exact)
    large = (exact + (log_ratio * (num_buckets - exact)).long()).clamp_max(num_buckets - 1)
    return buckets + torch.where(distance < exact, distance, large)


class RelativeBias(nn.Module):
    """The learned (num_buckets, heads) table of T5's relative attention bias, initialised as T5's
    released implementation does: N(0, d_model^-1/2) (Mesh TensorFlow's T5, as ported to transformers'
    ``T5PreTrainedModel._init_weights`` with ``initializer_factor`` 1)."""

    def __init__(self, num_buckets: int, heads: int, d_model: int) -> None:
        super().__init__()
        self.std = d_model ** -0.5
        self.weight = nn.Parameter(torch.zeros(num_buckets, heads))

    def reset_parameters(self) -> None:
        nn.init.normal_(self.weight, 0.0, self.std)


@register("positions", "t5_bias", version=2, options=(
    Option("t5_buckets", int, 32, "relative-position buckets of the T5 bias", ge=4, le=1024),
    Option("t5_max_distance", int, 128, "distance from which all positions share the last T5 bucket",
           ge=2, le=1_000_000),
))
class T5RelativeBias(_Positions):
    """T5's bucketed relative position bias (Raffel et al. 2020, section 2.1).

    A learned scalar per (bucket of ``key - query``, head) is added to the self-attention scores; one table
    per stack, shared by its layers (as T5 does); bidirectional buckets in the encoder, causal ones in the
    decoder (:func:`relative_buckets`). Nothing is added at the embedding. Initialisation: the table is
    drawn from N(0, d_model^-1/2), as T5's released implementation does (:class:`RelativeBias`).

    Version 2: version 1 let the builder's Xavier draw overwrite the table.
    """

    def __init__(self, d_model: int, heads: int = 1, max_positions: int = 512, dropout: float = 0.0,
                 *, causal: bool = False, t5_buckets: int = 32, t5_max_distance: int = 128) -> None:
        super().__init__(d_model, heads, max_positions, dropout, causal=causal)
        if t5_max_distance <= t5_buckets // (2 if causal else 4):
            raise ValueError("t5_max_distance must exceed the exact-distance buckets")
        self.num_buckets, self.max_distance = t5_buckets, t5_max_distance
        self.relative = RelativeBias(t5_buckets, heads, d_model)

    def attention(self, q_start: int, q_len: int, k_len: int, device: torch.device) -> PositionHooks:
        _check_range(q_start, q_len, self.max_positions)
        q_pos = torch.arange(q_start, q_start + q_len, device=device)[:, None]
        relative = torch.arange(k_len, device=device)[None, :] - q_pos  # (Tq, Tk): key - query
        buckets = relative_buckets(relative, not self.causal, self.num_buckets, self.max_distance)
        bias = self.relative.weight[buckets]  # (Tq, Tk, heads)
        return PositionHooks(bias=bias.permute(2, 0, 1).float())
