"""The fused kernels that take a packed block's documents (:class:`~registry.masking.Documents`) in the
sdpa-based attention cores (registry/attention.py), without a (B, 1, T, T) mask.

* :func:`flex_documents`: FlexAttention (Dong et al. 2024, "Flex Attention: A Programming Model for
  Generating Optimized Attention Kernels"): the documents' block mask skips the blocks no query may see,
  and a ``score_mod`` adds the soft cap and a position scheme's bias; a GPU's kernel (flex_attention has
  no CPU backward in torch 2.13).
* :func:`varlen_documents`: one causal sdpa call a document, as FlashAttention 2's variable-length kernels
  (Dao 2023) take packed sequences; a CPU's kernel.

Both compute what the mask computes (tests/engine/test_document_attention.py holds them to it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.attention.flex_attention import flex_attention

from registry.masking import Documents

_COMPILED_FLEX: list[Callable[..., Any]] = []

# What a kernel reports of its sdpa calls: (q, k, v, attn_mask, dropout_p, is_causal) of one of them
Report = Callable[[Tensor, Tensor, Tensor, Tensor | None, float, bool], None]


def compiled_flex() -> Callable[..., Any]:
    """``flex_attention`` through torch.compile, compiled once per process (eager flex_attention is a slow
    reference that materialises the scores): what an eager model calls; a compiled model's graph holds
    flex_attention itself."""
    if not _COMPILED_FLEX:
        _COMPILED_FLEX.append(torch.compile(flex_attention, dynamic=False))
    return _COMPILED_FLEX[0]


def flex_documents(q: Tensor, k: Tensor, v: Tensor, block_mask: Any, bias: Tensor | None, cap: float | None,
                   scale: float, gqa: bool) -> Tensor:
    """``flex_attention`` with the documents' block mask; the soft ``cap`` and a position scheme's (heads,
    T, T) ``bias`` as its ``score_mod`` (after the scaling and the cap, as the reference adds them)."""
    position = None if bias is None else bias.float()

    def score_mod(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        if cap is not None:
            score = cap * torch.tanh(score / cap)
        if position is not None:
            score = score + position[h, q_idx, kv_idx]
        return score

    modify = score_mod if cap is not None or position is not None else None
    flex = cast(Callable[..., Any], flex_attention) if torch.compiler.is_compiling() else compiled_flex()
    return cast(Tensor, flex(q, k, v, score_mod=modify, block_mask=block_mask, scale=scale, enable_gqa=gqa))


def varlen_documents(q: Tensor, k: Tensor, v: Tensor, docs: Documents, bias: Tensor | None, p: float,
                     scale: float | None, gqa: bool, report: Report) -> Tensor:
    """One sdpa call a document (consecutive rows that are one document each: one call), causal; a window
    or a position bias as that document's own (heads, L, L) mask. Nothing crosses a document's edge, so no
    work is spent on the blocks a (B, 1, T, T) mask would hide, nor memory on the mask. ``report`` hears
    the first call's arguments (the attention core records the backend sdpa takes for them)."""
    assert docs.spans is not None
    T = q.size(2)
    window = docs.window
    reported = False

    def attend(qs: Tensor, ks: Tensor, vs: Tensor, start: int) -> Tensor:
        nonlocal reported
        L = qs.size(2)
        m: Tensor | None = None
        if bias is not None or (window is not None and L > window):
            pos = torch.arange(L, device=q.device)
            hidden = pos[None, :] > pos[:, None]  # (L, L)
            if window is not None:
                hidden |= pos[None, :] <= pos[:, None] - window
            end = start + L
            base = torch.zeros(L, L, device=q.device) if bias is None else bias[:, start:end, start:end]
            m = base.float().masked_fill(hidden, float("-inf")).to(q.dtype)  # a diagonal: no row all -inf
            m = m if m.dim() == 2 else m[None]  # (L, L) or (1, heads, L, L): a 3-d mask is sdpa's math path
        if not reported:
            report(qs, ks, vs, m, p, m is None)
            reported = True
        return F.scaled_dot_product_attention(qs, ks, vs, attn_mask=m, dropout_p=p, is_causal=m is None,
                                              scale=scale, enable_gqa=gqa)

    # rows in runs: consecutive rows that are one document each (one call), or one row of several. Cut
    # with split, whose backward is one concatenation (a slice's backward would fill a zero tensor of the
    # whole of q, k and v for every piece)
    runs: list[tuple[int, tuple[tuple[int, int], ...] | None]] = []  # (rows, the row's spans | None: whole)
    for row_spans in docs.spans:
        if len(row_spans) == 1 and runs and runs[-1][1] is None:
            runs[-1] = (runs[-1][0] + 1, None)
        else:
            runs.append((1, None if len(row_spans) == 1 else row_spans))
    sizes = [rows for rows, _ in runs]
    out: list[Tensor] = []
    for (_, spans), qr, kr, vr in zip(runs, q.split(sizes), k.split(sizes), v.split(sizes), strict=True):
        if spans is None:
            out.append(attend(qr, kr, vr, 0))
            continue
        lengths = [end - start for start, end in spans]
        pieces = zip(qr.split(lengths, 2), kr.split(lengths, 2), vr.split(lengths, 2), spans, strict=True)
        out.append(torch.cat([attend(qs, ks, vs, start) for qs, ks, vs, (start, _) in pieces], dim=2))
    assert sum(sizes) == q.size(0) and all(o.size(2) == T for o in out)
    return out[0] if len(out) == 1 else torch.cat(out, dim=0)  # (B, heads, T, d_head)
