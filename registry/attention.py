"""Multi-head attention: shared projections, swappable core.

Component contract (kind ``attention``): ``cls(d_model: int, heads: int, dropout: float = 0.0,
cross: bool = False)``; ``forward(x (B, T, d), memory (B, S, d) | None = None, mask: AttnMask | None
= None, cache: KVCache | None = None) -> (B, T, d)``. Self-attention projects Q, K and V with ONE
fused ``qkv`` Linear (d -> 3d); cross-attention projects Q from ``x`` and K, V from ``memory`` with one
fused ``kv`` Linear (d -> 2d). With a cache, self-attention appends the new keys/values to it and
cross-attention reuses the keys/values stored in it (computed once per source by
:meth:`MultiHeadAttention.project_kv`). Both variants have the same parameters (names and shapes),
so they start from the same weights under controlled init; only the core differs.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from registry import register
from registry.masking import AttnMask, clamp_fill


class KVCache:
    """Keys and values of one attention layer, each (B, heads, T, d_head).

    Self-attention caches grow by :meth:`append` each step; cross-attention caches are created
    holding the encoder output's K/V and never grow.
    """

    def __init__(self, k: Tensor | None = None, v: Tensor | None = None) -> None:
        self.k = k
        self.v = v

    @property
    def length(self) -> int:
        return 0 if self.k is None else self.k.size(2)

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        if self.k is None or self.v is None:
            self.k, self.v = k, v
        else:
            self.k = torch.cat((self.k, k), dim=2)
            self.v = torch.cat((self.v, v), dim=2)
        return self.k, self.v

    def index_select(self, index: Tensor) -> None:
        """Keep/reorder rows (hypotheses) of the batch dimension in place."""
        if self.k is not None and self.v is not None:
            self.k = self.k.index_select(0, index)
            self.v = self.v.index_select(0, index)


class MultiHeadAttention(nn.Module):
    """Projections, head split/merge and caching; subclasses implement :meth:`attend`."""

    returns_weights = False  # True where attend() can keep the attention probabilities

    def __init__(self, d_model: int, heads: int, dropout: float = 0.0, cross: bool = False) -> None:
        super().__init__()
        if d_model % heads:
            raise ValueError(f"d_model {d_model} is not divisible by heads {heads}")
        self.d_model, self.heads, self.d_head = d_model, heads, d_model // heads
        self.cross = cross
        self.dropout = dropout
        if cross:
            self.q = nn.Linear(d_model, d_model)
            self.kv = nn.Linear(d_model, 2 * d_model)
            self.kv.fused_chunks = 2  # type: ignore[assignment]  # controlled init: Xavier per chunk
        else:
            self.qkv = nn.Linear(d_model, 3 * d_model)
            self.qkv.fused_chunks = 3  # type: ignore[assignment]
        self.out = nn.Linear(d_model, d_model)
        self.keep_weights = False  # set by Seq2SeqTransformer.attention_maps
        self.last_weights: Tensor | None = None

    def _heads(self, x: Tensor, parts: int) -> tuple[Tensor, ...]:
        # (B, T, parts*d) -> parts x (B, heads, T, d_head): views, no copy. Unbinding dim 2 of the
        # (B, T, parts, heads, d_head) view (not a permuted one) lets backward stack the gradients
        # straight into the projection's layout: one copy instead of stack + clone.
        B, T, _ = x.shape
        return tuple(t.transpose(1, 2) for t in x.view(B, T, parts, self.heads, self.d_head).unbind(2))

    def project_kv(self, memory: Tensor) -> tuple[Tensor, Tensor]:
        """Cross-attention keys and values of ``memory`` (B, S, d) -> 2 x (B, heads, S, d_head)."""
        k, v = self._heads(self.kv(memory), 2)
        return k, v

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None = None,
        mask: AttnMask | None = None,
        cache: KVCache | None = None,
    ) -> Tensor:
        B, T, _ = x.shape
        if self.cross:
            (q,) = self._heads(self.q(x), 1)
            if cache is not None and cache.k is not None and cache.v is not None:
                k, v = cache.k, cache.v
            else:
                if memory is None:
                    raise ValueError("cross-attention needs memory (or a cache holding its keys/values)")
                k, v = self.project_kv(memory)
                if cache is not None:
                    cache.k, cache.v = k, v
        else:
            q, k, v = self._heads(self.qkv(x), 3)
            if cache is not None:
                k, v = cache.append(k, v)
        out = self.attend(q, k, v, mask)  # (B, heads, T, d_head)
        return self.out(out.transpose(1, 2).reshape(B, T, self.d_model))

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: AttnMask | None) -> Tensor:
        raise NotImplementedError


@register("attention", "sdpa")
class SDPAttention(MultiHeadAttention):
    """``F.scaled_dot_product_attention``: fused kernels, fast, keeps no attention weights.

    What torch's own ``nn.MultiheadAttention`` calls since 2.0; none of the five tutorials uses it.

    The mask goes in as an additive bias built with the spec's fill value, so the fill semantics
    match ``explicit`` (see registry/masking.py for the fully-masked-row differences); a pure causal
    mask uses sdpa's ``is_causal`` kernel and no mask tensor at all.
    """

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: AttnMask | None) -> Tensor:
        p = self.dropout if self.training else 0.0
        if q.device.type == "cpu" and q.dtype == torch.bfloat16 and torch.is_grad_enabled():
            return self._attend_bf16_cpu(q, k, v, mask, p)
        if mask is None:
            return F.scaled_dot_product_attention(q, k, v, dropout_p=p)
        if mask.is_causal:
            return F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
        bias = mask.bias
        if bias is not None and bias.dtype != q.dtype:
            bias = bias.to(q.dtype)  # only when called outside the dtype the model built the mask for
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=p)

    def _attend_bf16_cpu(self, q: Tensor, k: Tensor, v: Tensor, mask: AttnMask | None, p: float) -> Tensor:
        """The same math as sdpa's math path, for training in bf16 on a CPU.

        torch 2.13's fused CPU attention backward is 5-8x slower in bf16 than two (AMX) matmuls plus an
        fp32 softmax at translation lengths (T <= 64), which made bf16 barely faster than fp32. Fully
        masked rows give zeros, as sdpa's fused kernel does (nan_to_num on the -inf rows).
        """
        scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(self.d_head))  # (B, h, Tq, Tk)
        if mask is not None and mask.is_causal:
            tq, tk = scores.shape[-2:]
            future = torch.ones(tq, tk, dtype=torch.bool, device=q.device).triu(tk - tq + 1)
            scores = scores.masked_fill(future, float("-inf"))
        elif mask is not None and mask.bias is not None:
            # added in fp32 like the fused kernel, so a -1e6 fill keeps the score differences it keeps
            scores = scores.float() + mask.bias.float()
        weights = torch.softmax(scores, dim=-1, dtype=torch.float32).nan_to_num(0.0).to(v.dtype)
        if p > 0:
            weights = F.dropout(weights, p)
        return torch.matmul(weights, v)


@register("attention", "explicit")
class ExplicitAttention(MultiHeadAttention):
    """``softmax(masked_fill(QK^T / sqrt(d_head)))V`` written out, as in the tutorials (A, B plot it).

    Slower than sdpa (it materialises the (B, heads, Tq, Tk) scores) but it can keep the attention
    probabilities for heat maps (``keep_weights``). Scores are masked in their own dtype with the
    dtype-safe fill and the softmax runs in fp32, also under autocast.
    """

    returns_weights = True

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: AttnMask | None) -> Tensor:
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.d_head)  # (B, h, Tq, Tk)
        if mask is not None and mask.blocked is not None:
            scores = scores.masked_fill(mask.blocked, clamp_fill(mask.fill, scores.dtype))
        weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(v.dtype)
        if self.keep_weights:
            self.last_weights = weights.detach()
        if self.training and self.dropout > 0:
            weights = F.dropout(weights, self.dropout)
        return torch.matmul(weights, v)
