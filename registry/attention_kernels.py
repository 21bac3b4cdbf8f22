"""The kernels behind the sdpa-based attention cores (registry/attention.py): which backend
``F.scaled_dot_product_attention`` takes (:func:`sdpa`, recorded as torch itself names it), and the fused
kernels that take a packed block's documents (:class:`~registry.masking.Documents`) without a (B, 1, T, T)
mask.

* :func:`sdpa`: sdpa with grouped keys and values (Ainslie et al. 2023) kept on a fused backend: where
  torch would take its math path for the grouped form (a mask on a GPU's memory-efficient kernel), K and
  V are repeated to every query head first, the memory of multi-head K/V for a fused kernel;
* :func:`flex_documents`: FlexAttention (Dong et al. 2024, "Flex Attention: A Programming Model for
  Generating Optimized Attention Kernels"): the documents' block mask skips the blocks no query may see,
  and a ``score_mod`` adds the soft cap and a position scheme's bias; a GPU's kernel (flex_attention has
  no CPU backward in torch 2.13);
* :func:`varlen_documents`: one causal sdpa call a document, as FlashAttention 2's variable-length kernels
  (Dao 2023) take packed sequences; a CPU's kernel.

The document kernels compute what the mask computes (tests/engine/test_document_attention.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.attention import SDPBackend
from torch.nn.attention.flex_attention import flex_attention

from registry.masking import Documents

_COMPILED_FLEX: list[Callable[..., Any]] = []

Record = Callable[[str], None]  # hears the backend an sdpa call took ("flash", "math"...)


def sdpa_backend(q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None, p: float, is_causal: bool,
                 scale: float | None, gqa: bool) -> str:
    """The backend sdpa takes for these arguments, torch's own choice: flash, efficient, cudnn, math."""
    choice = torch._fused_sdp_choice(q, k, v, attn_mask=attn_mask, dropout_p=p, is_causal=is_causal,
                                     scale=scale, enable_gqa=gqa)
    return SDPBackend(choice).name.lower().removesuffix("_attention")


def sdpa(q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None, p: float, is_causal: bool,
         scale: float | None, groups: int, record: Record | None) -> Tensor:
    """``F.scaled_dot_product_attention`` of q (B, heads, Tq, d_head) and k, v (B, heads / groups, Tk,
    d_head); ``record`` hears the backend it took (outside torch.compile). Grouped keys and values go in
    grouped unless that alone sends sdpa to its math path and the repeated form does not."""
    gqa = groups > 1
    if torch.compiler.is_compiling():
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=p, is_causal=is_causal,
                                              scale=scale, enable_gqa=gqa)
    backend = sdpa_backend(q, k, v, attn_mask, p, is_causal, scale, gqa)
    if gqa and backend == "math":
        k_all, v_all = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
        repeated = sdpa_backend(q, k_all, v_all, attn_mask, p, is_causal, scale, False)
        if repeated != "math":
            k, v, gqa, backend = k_all, v_all, False, repeated
    if record is not None:
        record(backend)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=p, is_causal=is_causal,
                                          scale=scale, enable_gqa=gqa)


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
                     scale: float | None, groups: int, record: Record) -> Tensor:
    """One sdpa call a document (consecutive rows that are one document each: one call), causal; a window
    or a position bias as that document's own (heads, L, L) mask. Nothing crosses a document's edge, so no
    work is spent on the blocks a (B, 1, T, T) mask would hide, nor memory on the mask. ``record`` hears
    the backend the first call took."""
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
        first, reported = not reported, True
        return sdpa(qs, ks, vs, m, p, m is None, scale, groups, record if first else None)

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
