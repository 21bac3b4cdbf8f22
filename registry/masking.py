"""Mask fill values: what a blocked attention score is replaced with (axis ``mask``).

Component contract: ``cls(fill: float | None = None)`` -> an ``nn.Module`` without parameters;
``fill_for(dtype)`` the value actually written in that dtype, and ``build(blocked, dtype, is_causal,
position_bias)`` -> :class:`AttnMask`, everything an attention core needs, built once per forward by the
model (never per layer). The cores apply it with :meth:`AttnMask.apply` (the tutorials'
``scores.masked_fill(mask == 0, fill)``, explicit attention) or as the additive :attr:`AttnMask.bias`
(``F.scaled_dot_product_attention``). ``-inf`` and ``-1e9`` are registered; any other negative number
(``-1e6`` in preset b-github-readme, ``-1e10`` in preset d-multi30k-2019-postnorm-conv1d) is a
:class:`FiniteFill` made by :func:`make_mask`: the axis accepts every negative number.

The variants only differ where a query row is *fully* masked (an all-padding source sentence, e.g.
an empty line) and in half precision; on partially masked rows every fill gives exactly zero weight
to blocked keys (exp underflows to 0 in the fp32 softmax), so the outputs are identical. Measured
with torch 2.13 on CPU (tests/registry/test_hazards.py):

=============  ============================  ====================================  =======================
fill           explicit, fully masked row    sdpa, fully masked row                fp16 / bf16
=============  ============================  ====================================  =======================
``-inf``       NaN (softmax of all -inf);    zeros (the attention output of that   representable: no
               the NaN spreads to the whole  row is 0; no NaN), with a bool or an  overflow, same rows
               sentence and to the loss      additive -inf mask
``-1e9``       uniform over all keys, pads   uniform in fp32/bf16 too: score+fill  -1e9 overflows fp16
``-1e10``      included (mean of V)          rounds to exactly the fill (the fp32  (``masked_fill``
                                             step at 1e9 is 64) while |score| < 32 raises): clamped
``-1e6``       uniform                       NOT uniform: the fp32 step at 1e6 is  as -1e9
                                             0.0625, the score differences stay,
                                             the row attends as if unmasked
=============  ============================  ====================================  =======================

Half precision: ``torch.zeros(1, dtype=torch.float16).masked_fill(m, -1e9)`` raises "value cannot be
converted to type c10::Half without overflow". :meth:`MaskFill.fill_for` therefore clamps a finite
fill to ``finfo(dtype).min / 2`` (-32752 in fp16; bf16 and fp32 hold -1e9 and keep it). Half of the
minimum, not the minimum, so that adding a score to the additive mask cannot round to -inf. Under
fp16 the clamped fill still zeroes blocked keys on partially masked rows (the softmax runs in fp32)
and explicit attention still gives a uniform row when fully masked; sdpa's fp32 accumulation keeps
the score differences next to -32752, so there a fully masked row gets ``softmax(scores)`` over all
keys instead of a uniform one.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn
from torch.nn.attention.flex_attention import create_block_mask

from registry import REGISTRY, Axis, declare_axis, register


def parse_mask_fill(value: object) -> float:
    """`-inf`, `-1e9` or any other negative number; YAML hands `-1e9` over as a string."""
    expected = "expected a negative number or -inf (e.g. -1e9)"
    if isinstance(value, bool):
        raise ValueError(f"found {str(value).lower()}; {expected}")
    if isinstance(value, str):
        text = value.strip().lower()
        if text in ("-inf", "-.inf", "-infinity"):
            return float("-inf")
        try:
            number = float(text)
        except ValueError:
            raise ValueError(f"found {value!r}; {expected}{_mask_hint(text)}") from None
    elif isinstance(value, int | float):
        number = float(value)
    else:
        raise ValueError(f"found {value!r}; {expected}")
    if math.isnan(number) or number >= 0:
        hint = f"; did you mean {format_mask_fill(-number)!r}?" if number > 0 else ""
        raise ValueError(f"found {value!r}; the mask fill must be negative (-inf, -1e9, -1e6 ...){hint}")
    return number


def format_mask_fill(value: float) -> str:
    """The canonical spelling: '-inf' or '-1e9' style, as users write it in YAML."""
    if math.isinf(value):
        return "-inf" if value < 0 else "inf"
    mantissa, exponent = f"{value:e}".split("e")
    mantissa = mantissa.rstrip("0").rstrip(".")
    return f"{mantissa}e{int(exponent)}"


def _mask_hint(text: str) -> str:
    names = REGISTRY.names("mask")  # '-inf', '-1e9' and any a plugin registers
    close = difflib.get_close_matches(text, names + [n for n in ("-inf", "-1e9") if n not in names], n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


AXIS = declare_axis(Axis(
    kind="mask",
    default="-inf",
    doc="the value written at blocked attention scores (padding, future positions)",
    contract="cls(fill); fill_for(dtype); build(blocked, dtype, is_causal, position_bias) -> AttnMask",
    hooks=("once per encode/decode: the masks of every attention layer (with the position bias folded in)",),
    canonical=lambda value: format_mask_fill(parse_mask_fill(value)),
    open_values=True,
    value_examples=("-1e6", "-1e10"),
))


@dataclass(frozen=True)
class Documents:
    """A packed block's documents, as the fused document kernels take them instead of a (B, 1, T, T) mask:
    query i sees key j when both are in one document, ``j <= i`` and, with a ``window``, ``i - j < window``.

    ``segments`` (B, T): the document id of each position. ``spans``: per row, the (start, end) of each
    document, read once per forward on the host where the kernel needs them (the CPU's per-document sdpa:
    :meth:`registry.attention.SDPAttention.attend_documents`), else None. ``block_mask``: FlexAttention's
    BlockMask of the same rule (built once per forward where flex runs), else None.
    """

    segments: Tensor
    window: int | None = None
    spans: tuple[tuple[tuple[int, int], ...], ...] | None = None
    block_mask: Any = None

    @classmethod
    def with_spans(cls, segments: Tensor, window: int | None) -> Documents:
        """The documents with each row's (start, end) spans, read from ``segments`` (a CPU tensor: host
        memory, no device to wait for; ``numpy()`` refuses a GPU tensor)."""
        seg = segments.numpy()  # (B, T)
        T = seg.shape[1]
        spans = []
        for row in seg:
            starts = [0, *(np.flatnonzero(row[1:] != row[:-1]) + 1).tolist(), T]
            spans.append(tuple(zip(starts[:-1], starts[1:], strict=True)))
        return cls(segments, window, spans=tuple(spans))

    @classmethod
    def with_block_mask(cls, segments: Tensor, window: int | None) -> Documents:
        """The documents with FlexAttention's BlockMask of their rule (Dong et al. 2024, "Flex Attention: A
        Programming Model for Generating Optimized Attention Kernels"): blocks of 128 x 128 positions that
        no query of one may see in the other are skipped, the causal half and other documents alike."""
        B, T = segments.shape

        def visible(b: Tensor, h: Tensor, q: Tensor, k: Tensor) -> Tensor:
            ok = (segments[b, q] == segments[b, k]) & (k <= q)
            return ok & (q - k < window) if window is not None else ok

        block_mask = create_block_mask(visible, B, None, T, T, device=segments.device)
        return cls(segments, window, block_mask=block_mask)

    def mean_length(self) -> float:
        """Mean tokens a document (``spans`` only; documents cut by a block's edge count as they are cut)."""
        assert self.spans is not None
        return self.segments.numel() / max(1, sum(len(row) for row in self.spans))

    def blocked(self) -> Tensor:
        """The rule as a (B, 1, T, T) bool mask, True where a query may not look (the reference form)."""
        T = self.segments.size(1)
        pos = torch.arange(T, device=self.segments.device)
        blocked = pos[None, :] > pos[:, None]  # (T, T): the future
        if self.window is not None:
            blocked = blocked | (pos[None, :] <= pos[:, None] - self.window)
        other = self.segments[:, :, None] != self.segments[:, None, :]  # (B, T, T)
        return (blocked | other)[:, None]


@dataclass(frozen=True)
class AttnMask:
    """A mask as attention cores consume it.

    ``blocked``: bool, True where a query may NOT attend, broadcastable to (B, heads, Tq, Tk), e.g.
    (B, 1, 1, S) for key padding or (T, T) for causal. ``bias``: the additive float tensor sdpa takes, in
    the compute dtype: 0 / fill where blocked, plus ``position_bias``; None with ``is_causal`` (sdpa then
    uses its own causal kernel; explicit attention and sdpa's matmul path read the (T, T) ``blocked``,
    built once per forward). ``fill``: the raw fill value. ``position_bias``: (heads, Tq, Tk) float32 of a
    position scheme (ALiBi, T5) or None. ``documents``: a packed block's documents where every core of the
    model takes them with a fused kernel (then ``blocked`` and ``bias`` are None: no (B, 1, T, T) tensor is
    built; see :class:`Documents`).
    """

    blocked: Tensor | None
    bias: Tensor | None
    fill: float
    is_causal: bool = False
    position_bias: Tensor | None = None
    documents: Documents | None = None

    def apply(self, scores: Tensor) -> Tensor:
        """Scores (B, heads, Tq, Tk) with the position bias added and blocked entries set to the fill, in
        the scores' dtype (the fill clamped to it: -1e9 does not fit in fp16)."""
        if self.position_bias is not None:
            scores = scores + self.position_bias.to(scores.dtype)
        if self.blocked is None:
            return scores
        return scores.masked_fill(self.blocked, clamp_fill(self.fill, scores.dtype))

    def index_select(self, index: Tensor) -> AttnMask:
        """Rows ``index`` of a mask with one row per batch row (a key-padding mask)."""
        blocked = None if self.blocked is None else self.blocked.index_select(0, index)
        bias = None if self.bias is None else self.bias.index_select(0, index)
        return AttnMask(blocked, bias, self.fill, self.is_causal, self.position_bias)


def clamp_fill(fill: float, dtype: torch.dtype) -> float:
    """The fill as written into ``dtype``: -inf stays, a finite fill is kept above finfo.min / 2."""
    if math.isinf(fill) or not dtype.is_floating_point:
        return fill
    return max(fill, torch.finfo(dtype).min / 2)


class MaskFill(nn.Module):
    """Replace blocked attention scores with ``fill`` (``scores.masked_fill(blocked, fill)``)."""

    default_fill: float = -1e9

    def __init__(self, fill: float | None = None) -> None:
        super().__init__()
        self.fill = float(self.default_fill if fill is None else fill)
        if not self.fill < 0:
            raise ValueError(f"a mask fill must be negative, found {self.fill}")

    def fill_for(self, dtype: torch.dtype) -> float:
        return clamp_fill(self.fill, dtype)

    def build(self, blocked: Tensor | None, dtype: torch.dtype, is_causal: bool = False,
              position_bias: Tensor | None = None) -> AttnMask:
        """The mask of one forward. With a ``position_bias`` (heads, Tq, Tk) the additive ``bias`` holds it
        too, so sdpa gets one tensor (and a causal mask is materialised instead of using sdpa's causal
        kernel); without one, a causal mask carries no tensor at all."""
        if position_bias is None and (blocked is None or is_causal):
            return AttnMask(blocked, None, self.fill, is_causal)
        if position_bias is None:
            assert blocked is not None
            bias = torch.zeros(blocked.shape, dtype=dtype, device=blocked.device)
            return AttnMask(blocked, bias.masked_fill_(blocked, self.fill_for(dtype)), self.fill, False)
        bias = position_bias.to(dtype)  # (heads, Tq, Tk), or with padding (B, heads, Tq, Tk) below
        if blocked is not None:
            bias = bias.masked_fill(blocked, self.fill_for(dtype))
        return AttnMask(blocked, bias, self.fill, False, position_bias)

    def extra_repr(self) -> str:
        return f"fill={self.fill}"


@register("mask", "-inf")
class NegInfFill(MaskFill):
    """Fill blocked scores with -inf (the 2025 pre-norm blog; what sdpa itself does with a bool mask).

    Exact zero weight on blocked keys in every dtype, but a fully masked query row (an all-padding
    source) gives NaN in explicit attention, which spreads to the loss; sdpa returns zeros there.
    """

    default_fill = float("-inf")

    def __init__(self, fill: float | None = None) -> None:
        super().__init__(fill)
        if not math.isinf(self.fill):
            raise ValueError(f"the -inf mask takes no finite fill, found {self.fill}")


@register("mask", "-1e9")
class FiniteFill(MaskFill):
    """Fill blocked scores with a large finite number, -1e9 by default (the Lightning and scalar-LN
    notebook tutorials; the GitHub README uses -1e6, the 2019 Multi30k blog -1e10).

    A fully masked query row gets a uniform distribution over all keys instead of NaN. -1e9 does not
    fit in fp16: the value written is clamped to finfo(fp16).min / 2 = -32752 (see ``fill_for``).
    """

    def __init__(self, fill: float | None = None) -> None:
        super().__init__(fill)
        if math.isinf(self.fill):
            raise ValueError("use the '-inf' mask for an infinite fill")


def make_mask(name: str, fill: float) -> MaskFill:
    """The mask component for a spec's ``mask`` (canonical name) and ``mask_fill`` (its float).

    A registered name gets its component (with that fill); any other negative number gets a
    :class:`FiniteFill` (or :class:`NegInfFill` for -inf), so the model accepts every fill the spec does.
    """
    if ("mask", name) in REGISTRY:
        return REGISTRY.get("mask", name)(fill)
    return NegInfFill() if math.isinf(fill) else FiniteFill(fill)
