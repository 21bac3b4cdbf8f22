"""Multi-head attention: shared projections, swappable core (axis ``attention``).

Component contract: ``cls(d_model: int, heads: int, dropout: float = 0.0, cross: bool = False,
**options)`` (and ``kv_heads=`` when the spec sets ``model.kv_heads``); ``forward(x (B, T, d), memory
(B, S, d) | None = None, mask: AttnMask | None = None, cache: KVCache | None = None, rotate: Callable |
None = None) -> (B, T, d)``. Self-attention projects Q, K and V with ONE fused ``qkv`` Linear (d -> 3d);
cross-attention projects Q from ``x`` and K, V from ``memory`` with one fused ``kv`` Linear (d -> 2d).

Grouped keys and values (``kv_heads``, Ainslie et al. 2023, "GQA"; Shazeer 2019, "Fast Transformer
Decoding: One Write-Head is All You Need"): K and V get ``kv_heads`` heads, each shared by ``heads /
kv_heads`` consecutive query heads, so the fused projections are d -> d + 2 kv_heads d_head (self) and
d -> 2 kv_heads d_head (cross), and the KV cache holds ``kv_heads`` heads: ``kv_heads / heads`` of
multi-head attention's memory. ``kv_heads = heads`` is multi-head attention itself (the same modules and
parameters), 1 is multi-query attention. ``rotate`` (a rotary position scheme's hook) turns
the queries and the new keys before the keys are cached; a position scheme's score bias arrives inside
``mask``. With a cache, self-attention appends the new keys/values to it and cross-attention reuses the
keys/values stored in it (computed once per source by :meth:`MultiHeadAttention.project_kv`). All
variants have the same projection parameters (names and shapes), so they start from the same weights
under controlled init; only the core differs.

``sdpa`` means the semantics of ``F.scaled_dot_product_attention``. Where torch's fused CPU kernels are
slow (bf16 training, decoding a few queries per row), :class:`SDPAttention` computes the same function
with two matmuls: which kernel ran is an implementation detail, not a variant, and the module says which
one it used (:attr:`SDPAttention.kernels`: sdpa's backend as torch itself chose it, ``sdpa-flash`` or
``sdpa-math``...) so that a run can record it.

A packed block's documents (:class:`~registry.masking.Documents`) reach the sdpa-based cores without a
(B, 1, T, T) mask where they have a fused kernel for them (:meth:`MultiHeadAttention.document_kernel`;
FlexAttention on a GPU, one sdpa call a document on a CPU: registry/attention_kernels.py), grouped keys
and values included. :class:`KVCache` lives in registry/kv_cache.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from registry import Axis, Option, declare_axis, register
from registry.attention_kernels import flex_documents, sdpa, varlen_documents
from registry.kv_cache import KVCache as KVCache  # re-exported: its home before registry/kv_cache.py
from registry.masking import AttnMask

AXIS = declare_axis(Axis(
    kind="attention",
    default="sdpa",
    doc="the attention core (projections are shared by all variants)",
    contract=("cls(d_model, heads, dropout, cross, **options); forward(x, memory, mask, cache, rotate) -> x; "
              "project_kv(memory)"),
    hooks=("every self- and cross-attention sub-layer; receives the position scheme's rotate and bias",),
))

Rotate = Callable[[Tensor], Tensor]


class MultiHeadAttention(nn.Module):
    """Projections, head split/merge and caching; subclasses implement :meth:`attend`."""

    returns_weights = False  # True where attend() can keep the attention probabilities
    score_scale: float | None = None  # None: 1/sqrt(d_head); muP sets sqrt(base d_head)/d_head (width_scaled)

    def __init__(self, d_model: int, heads: int, dropout: float = 0.0, cross: bool = False,
                 kv_heads: int | None = None) -> None:
        super().__init__()
        if d_model % heads:
            raise ValueError(f"d_model {d_model} is not divisible by heads {heads}")
        kv = heads if kv_heads is None else kv_heads
        if kv < 1 or heads % kv:
            raise ValueError(f"kv_heads {kv} does not divide heads {heads}")
        self.d_model, self.heads, self.d_head = d_model, heads, d_model // heads
        self.kv_heads, self.groups = kv, heads // kv  # query heads per key/value head
        kv_dim = kv * self.d_head
        self.cross = cross
        self.dropout = dropout
        if cross:
            self.q = nn.Linear(d_model, d_model)
            self.kv = nn.Linear(d_model, 2 * kv_dim)
            self.kv.fused_chunks = 2  # type: ignore[assignment]  # controlled init: Xavier per chunk
        else:
            self.qkv = nn.Linear(d_model, d_model + 2 * kv_dim)
            # Xavier per chunk; grouped K and V are narrower than Q: the chunks' sizes
            chunks: int | tuple[int, ...] = 3 if kv == heads else (d_model, kv_dim, kv_dim)
            self.qkv.fused_chunks = chunks  # type: ignore[assignment]
        self.out = nn.Linear(d_model, d_model)
        self.keep_weights = False  # set by Seq2SeqTransformer.attention_maps
        self.last_weights: Tensor | None = None

    @property
    def scale(self) -> float:
        """What the scores Q K^T are multiplied by: 1/sqrt(d_head) (Vaswani et al. 2017, eq. 1) unless a
        variant or the parametrisation says otherwise."""
        return 1.0 / math.sqrt(self.d_head) if self.score_scale is None else self.score_scale

    def width_scaled(self, base_d_head: int) -> None:
        """muP's attention (Yang et al. 2022, section 4 and Table 3): scores scaled by 1/d_head instead of
        1/sqrt(d_head), as ``sqrt(base_d_head) / d_head`` so that it equals the standard 1/sqrt(d_head) at
        the base width."""
        self.score_scale = math.sqrt(base_d_head) / self.d_head

    def value_output_weights(self) -> list[Tensor]:
        """The value projection rows and the output projection: what DeepNorm initialises beta-scaled."""
        kv_dim = self.kv_heads * self.d_head
        fused = self.kv.weight[kv_dim:] if self.cross else self.qkv.weight[self.d_model + kv_dim:]
        return [fused, self.out.weight]

    def shape_qk(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        """Queries and keys as the core scores them (a variant may normalise them); keys are cached so."""
        return q, k

    def shape_k(self, k: Tensor) -> Tensor:
        """Cross-attention's keys alone as :meth:`shape_qk` shapes them (they may have fewer heads than the
        queries: a variant with per-head parameters on the queries overrides this)."""
        return self.shape_qk(k, k)[1]

    def _heads(self, x: Tensor, parts: int, heads: int | None = None) -> tuple[Tensor, ...]:
        # (B, T, parts*heads*d_head) -> parts x (B, heads, T, d_head): views, no copy. Unbinding dim 2 of
        # the (B, T, parts, heads, d_head) view (not a permuted one) lets backward stack the gradients
        # straight into the projection's layout: one copy instead of stack + clone.
        B, T, _ = x.shape
        h = self.heads if heads is None else heads
        return tuple(t.transpose(1, 2) for t in x.view(B, T, parts, h, self.d_head).unbind(2))

    def _qkv(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Self-attention's Q (B, heads, T, d_head), K and V (B, kv_heads, T, d_head) from ``x``."""
        if self.groups == 1:
            q, k, v = self._heads(self.qkv(x), 3)
            return q, k, v
        fused = self.qkv(x)  # (B, T, d + 2 kv_heads d_head)
        (q,) = self._heads(fused[..., : self.d_model], 1)
        k, v = self._heads(fused[..., self.d_model:], 2, self.kv_heads)
        return q, k, v

    def project_kv(self, memory: Tensor) -> tuple[Tensor, Tensor]:
        """Cross-attention keys and values of ``memory`` (B, S, d) -> 2 x (B, kv_heads, S, d_head)."""
        k, v = self._heads(self.kv(memory), 2, self.kv_heads)
        return self.shape_k(k), v

    def expand_kv(self, t: Tensor) -> Tensor:
        """(B, kv_heads, S, d_head) -> (B, heads, S, d_head): each key/value head repeated for the
        ``groups`` query heads sharing it (query head i reads kv head i // groups); a no-op for MHA."""
        return t if self.groups == 1 else t.repeat_interleave(self.groups, dim=1)

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None = None,
        mask: AttnMask | None = None,
        cache: KVCache | None = None,
        rotate: Rotate | None = None,
    ) -> Tensor:
        B, T, _ = x.shape
        if self.cross:
            (q,) = self._heads(self.q(x), 1)
            q = self.shape_qk(q, q)[0]
            if cache is not None and cache.k is not None and cache.v is not None:
                if cache.group > 1:
                    return self._attend_grouped(q, cache.k, cache.v, mask, cache.group)
                k, v = cache.k, cache.v
            else:
                if memory is None:
                    raise ValueError("cross-attention needs memory (or a cache holding its keys/values)")
                k, v = self.project_kv(memory)
                if cache is not None:
                    cache.fill(k, v)
        else:
            q, k, v = self._qkv(x)
            if rotate is not None:  # (B, heads, T, d_head): the new keys share the new queries' positions
                q, k = rotate(q), rotate(k)
            q, k = self.shape_qk(q, k)
            if cache is not None:
                k, v = cache.append(k, v)
        out = self.attend(q, k, v, mask)  # (B, heads, T, d_head)
        return self.out(out.transpose(1, 2).reshape(B, T, self.d_model))

    def _attend_grouped(self, q: Tensor, k: Tensor, v: Tensor, mask: AttnMask | None, group: int) -> Tensor:
        """Cross-attention where each K/V row (a sentence) serves ``group`` consecutive query rows (its
        beams): the beams' queries are attended together, as ``group * T`` queries of one row."""
        B, heads, T, d_head = q.shape
        n = B // group
        grouped = q.view(n, group, heads, T, d_head).transpose(1, 2).reshape(n, heads, group * T, d_head)
        out = self.attend(grouped, k, v, mask)  # (n, heads, group*T, d_head); the mask is per sentence
        out = out.view(n, heads, group, T, d_head).transpose(1, 2)  # (n, group, heads, T, d_head)
        return self.out(out.permute(0, 1, 3, 2, 4).reshape(B, T, self.d_model))

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: AttnMask | None) -> Tensor:
        raise NotImplementedError

    def document_kernel(self, device: torch.device) -> str | None:
        """The fused kernel this core takes a packed block's documents with on ``device`` ("flex",
        "varlen"), or None: the model then builds the (B, 1, T, T) mask (the reference form)."""
        return None


SMALL_QUERY = 8  # queries per row up to which CPU inference takes the matmul path (a beam's 4 per sentence)


@register("attention", "sdpa")
class SDPAttention(MultiHeadAttention):
    """``softmax(Q K^T / sqrt(d_head) + mask) V`` through ``F.scaled_dot_product_attention`` (Vaswani et
    al. 2017, eq. 1): fused kernels, fast, keeps no attention weights.

    What torch's own ``nn.MultiheadAttention`` calls since 2.0; none of the five tutorials uses it. The
    mask goes in as an additive bias built with the spec's fill value, so the fill semantics match
    ``explicit`` (see registry/masking.py for the fully-masked-row differences); a pure causal mask uses
    sdpa's ``is_causal`` kernel and no mask tensor at all. On CPU the same function is computed with two
    matmuls where the fused kernels are slow (:meth:`_attend_matmul`); ``kernels`` collects which ran.
    """

    def __init__(self, d_model: int, heads: int, dropout: float = 0.0, cross: bool = False,
                 kv_heads: int | None = None) -> None:
        super().__init__(d_model, heads, dropout, cross, kv_heads)
        # "sdpa-flash", "varlen-math", "flex", "matmul"...: an implementation detail a run records
        self.kernels: set[str] = set()

    # A CPU's kernel for documents: "varlen" (per-document sdpa); "flex" only without gradients (no CPU
    # backward in torch 2.13), where the tests hold its function to the reference
    cpu_document_kernel = "varlen"

    def _ran(self, kernel: str) -> None:
        # Eager calls only: a set mutated inside a compiled forward is a guard that fails once per module and
        # shape, so torch.compile recompiled until its limit (8) and fell back to eager (seen on an H100).
        # Evaluation runs the plain module, so a compiled run still records its kernels there.
        if not torch.compiler.is_compiling():
            self.kernels.add(kernel)

    def _ran_sdpa(self, backend: str) -> None:
        self._ran(f"sdpa-{backend}")  # sdpa's backend as torch names it: "fused" was said of every one

    def document_kernel(self, device: torch.device) -> str | None:
        """The fused kernel that takes a packed block's documents (:class:`~registry.masking.Documents`)
        here: "flex" on a GPU (FlexAttention, compiled; no dropout), "varlen" on a CPU outside
        torch.compile (one sdpa call a document, causal), None where only the (B, 1, T, T) mask serves."""
        if self.training and self.dropout > 0 and device.type != "cpu":
            return None  # flex_attention has no dropout
        if device.type == "cuda":
            return "flex"
        if device.type == "cpu" and not torch.compiler.is_compiling():
            return self.cpu_document_kernel
        return None

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: AttnMask | None) -> Tensor:
        p = self.dropout if self.training else 0.0
        if mask is not None and mask.documents is not None:
            return self.attend_documents(q, k, v, mask, p)
        if q.device.type == "cpu":
            if q.dtype == torch.bfloat16 and torch.is_grad_enabled():
                return self._attend_matmul(q, k, v, mask, p)
            if q.size(-2) <= SMALL_QUERY and not torch.is_grad_enabled():
                return self._attend_matmul(q, k, v, mask, p)  # incremental decoding: a few queries per row
        record = self._ran_sdpa  # hears the backend torch chose
        if mask is None or mask.is_causal:  # sdpa's own causal kernel: no mask tensor
            causal = mask is not None
            return sdpa(q, k, v, None, p, causal, self.score_scale, self.groups, record)
        bias = mask.bias
        if bias is not None and bias.dtype != q.dtype:
            bias = bias.to(q.dtype)  # only when called outside the dtype the model built the mask for
        if bias is not None and bias.dim() == 3:
            bias = bias[None]  # (1, heads, Tq, Tk): a 3-d mask sends sdpa on a CPU to its math path
        return sdpa(q, k, v, bias, p, False, self.score_scale, self.groups, record)

    def attend_documents(self, q: Tensor, k: Tensor, v: Tensor, mask: AttnMask, p: float) -> Tensor:
        """Attention inside each document of a packed block, causal (and windowed), with no (B, 1, T, T)
        mask: FlexAttention's block mask where the model built one, else one sdpa call a document
        (registry/attention_kernels.py)."""
        docs, bias, gqa = mask.documents, mask.position_bias, self.groups > 1
        assert docs is not None
        if docs.block_mask is not None:
            self._ran("flex")
            return flex_documents(q, k, v, docs.block_mask, bias, self.soft_cap(), self.scale, gqa)
        return varlen_documents(q, k, v, docs, bias, p, self.score_scale, self.groups,
                                lambda backend: self._ran(f"varlen-{backend}"))

    def soft_cap(self) -> float | None:
        """The cap of the attention logits a variant applies (:class:`SoftCapAttention`), else None."""
        return None

    def capped(self, scores: Tensor) -> Tensor:
        """The scaled scores as the softmax gets them (a soft cap in :class:`SoftCapAttention`)."""
        return scores

    def _attend_matmul(self, q: Tensor, k: Tensor, v: Tensor, mask: AttnMask | None, p: float) -> Tensor:
        """The same math as sdpa's math path, where torch's fused CPU kernels are slow.

        Training in bf16: the fused backward is several times slower than two (AMX) matmuls plus an fp32
        softmax at translation lengths (T <= 64). Decoding (<= SMALL_QUERY queries per row, no grad): the
        fused kernel's per-call set-up costs more than two batched matmuls. ``ablate bench`` measures both.
        Fully masked rows give zeros, as sdpa's fused kernel does (nan_to_num on the -inf rows).
        """
        self._ran("matmul")
        k, v = self.expand_kv(k), self.expand_kv(v)  # (B, heads, Tk, d_head)
        scores = self.capped(torch.matmul(q, k.transpose(-2, -1)) * self.scale)  # (B, h, Tq, Tk)
        if mask is not None and mask.is_causal:
            tq, tk = scores.shape[-2:]
            future = mask.blocked  # the model's (T, T) causal mask, built once per forward for all layers
            if future is None or tuple(future.shape[-2:]) != (tq, tk):
                future = torch.ones(tq, tk, dtype=torch.bool, device=q.device).triu(tk - tq + 1)
            scores = scores.masked_fill(future, float("-inf"))
        elif mask is not None and mask.bias is not None:
            # added in fp32 like the fused kernel, so a -1e6 fill keeps the score differences it keeps
            scores = scores.float() + mask.bias.float()
        weights = torch.softmax(scores, dim=-1, dtype=torch.float32).nan_to_num(0.0).to(v.dtype)
        if p > 0:
            weights = F.dropout(weights, p)
        return torch.matmul(weights, v)


def henry_g0(length: int) -> float:
    """Henry et al.'s initial score scale for sequences of ``length`` tokens: ``g0 = log2(L^2 - L)``
    (section 3.2; they take L as the 97.5th percentile of the training lengths)."""
    return math.log2(length * length - length)


QK_NORM_OPTIONS = (
    Option("qk_norm_scale", float, 12.0,
           "initial value g0 of the learned per-head score scale (12 ~ Henry et al.'s log2(L^2 - L) at "
           "L = 64); ignored when qk_norm_length is set", gt=0.0, le=1000.0),
    Option("qk_norm_length", int, 0,
           "L for Henry et al.'s rule g0 = log2(L^2 - L) (the 97.5th percentile of training lengths); "
           "0 uses qk_norm_scale", ge=0, le=1_000_000, off=0),
)


def _qk_norm_check(model: Mapping[str, Any]) -> str | None:
    length = model.get("qk_norm_length") or 0
    if length == 0 or length >= 2:
        return None
    return "qk_norm_length must be 0 (use qk_norm_scale) or at least 2"


@register("attention", "qk_norm", options=QK_NORM_OPTIONS, check=_qk_norm_check, version=2)
class QKNormAttention(SDPAttention):
    """Query-key normalisation (Henry et al. 2020, "Query-Key Normalization for Transformers", eq. 3).

    ``softmax(g * (Q/||Q||) (K/||K||)^T + mask) V``: queries and keys L2-normalised per head over d_head,
    the cosine similarities scaled by a learned ``g`` per head instead of 1/sqrt(d_head), which bounds
    every logit by ``g`` (the attention-logit growth that Dehghani et al. 2023 fix with normalised
    queries/keys in ViT-22B). Runs on the sdpa core, so it composes with every position scheme: a
    rotation keeps norms, and score biases are added after the scaling.

    Initialisation (the paper's, section 3.2): every head's ``g`` starts at ``g0``, the number
    ``qk_norm_scale`` or, with ``qk_norm_length`` L, ``log2(L^2 - L)`` (:func:`henry_g0`); the
    projections are the shared ones. Version 2: version 1 let the builder's Xavier draw overwrite ``g``
    (U(+-1.1) instead of g0, half the heads negative), so its runs did not measure QK-norm.
    """

    score_scale = 1.0  # g is folded into the queries

    def __init__(self, d_model: int, heads: int, dropout: float = 0.0, cross: bool = False,
                 qk_norm_scale: float = 12.0, qk_norm_length: int = 0, kv_heads: int | None = None) -> None:
        super().__init__(d_model, heads, dropout, cross, kv_heads)
        self.init_scale = henry_g0(qk_norm_length) if qk_norm_length >= 2 else qk_norm_scale
        # (heads, 1, 1): broadcasts over positions and features
        self.gain = nn.Parameter(torch.full((heads, 1, 1), self.init_scale))

    def reset_parameters(self) -> None:
        with torch.no_grad():
            self.gain.fill_(self.init_scale)

    def width_scaled(self, base_d_head: int) -> None:
        """Nothing: the learned gain times cosine similarities is bounded by g whatever the width, so
        muP's 1/d scaling does not apply (the logits never grow with d_head)."""

    def shape_qk(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        q = F.normalize(q.float(), dim=-1).to(q.dtype) * self.gain.to(q.dtype)
        return q, self.shape_k(k)

    def shape_k(self, k: Tensor) -> Tensor:
        return F.normalize(k.float(), dim=-1).to(k.dtype)


@register("attention", "explicit")
class ExplicitAttention(MultiHeadAttention):
    """``softmax(masked_fill(QK^T / sqrt(d_head)))V`` written out, as in the tutorials (the pre-norm
    blog and GitHub tutorials plot it).

    Slower than sdpa (it materialises the (B, heads, Tq, Tk) scores) but it can keep the attention
    probabilities for heat maps (``keep_weights``). Scores are masked in their own dtype with the
    dtype-safe fill and the softmax runs in fp32, also under autocast.
    """

    returns_weights = True

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: AttnMask | None) -> Tensor:
        k, v = self.expand_kv(k), self.expand_kv(v)  # (B, heads, Tk, d_head)
        scores = torch.matmul(q, k.transpose(-2, -1))  # (B, h, Tq, Tk)
        # divided by sqrt(d_head) as the tutorials write it (bit for bit as before); muP's scale multiplies
        scores = scores / math.sqrt(self.d_head) if self.score_scale is None else scores * self.score_scale
        if mask is not None:
            scores = mask.apply(scores)  # position bias added, blocked scores set to the dtype-safe fill
        weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(v.dtype)
        if self.keep_weights:
            self.last_weights = weights.detach()
        if self.training and self.dropout > 0:
            weights = F.dropout(weights, self.dropout)
        return torch.matmul(weights, v)


SOFTCAP = Option("attn_softcap", float, 50.0,
                 "the cap c of the attention logits, c * tanh(s / c) (Gemma 2: 50)", gt=0.0, le=1e4)


@register("attention", "softcap", options=(SOFTCAP,))
class SoftCapAttention(SDPAttention):
    """Attention-logit soft-capping (Gemma Team 2024, "Gemma 2", section 2: soft-capping): the scaled
    scores pass through ``c * tanh(s / c)`` before the mask and the softmax, so that no logit exceeds ``c``
    in size (c = 50 in Gemma 2; Grok-1 caps at 30). The projections are the shared ones; the capped scores
    need the matmul path (sdpa's fused kernels take no score function), so this core always runs it."""

    def __init__(self, d_model: int, heads: int, dropout: float = 0.0, cross: bool = False,
                 attn_softcap: float = 50.0, kv_heads: int | None = None) -> None:
        super().__init__(d_model, heads, dropout, cross, kv_heads)
        self.cap = attn_softcap

    def capped(self, scores: Tensor) -> Tensor:
        return self.cap * torch.tanh(scores / self.cap)

    def soft_cap(self) -> float | None:
        return self.cap

    def document_kernel(self, device: torch.device) -> str | None:
        """FlexAttention only (the cap is its ``score_mod``): on a GPU, or on a CPU without gradients where
        the tests ask for it; sdpa takes no score function, so the per-document path does not serve."""
        kernel = super().document_kernel(device)
        return kernel if kernel == "flex" else None

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: AttnMask | None) -> Tensor:
        p = self.dropout if self.training else 0.0
        if mask is not None and mask.documents is not None:
            return self.attend_documents(q, k, v, mask, p)
        return self._attend_matmul(q, k, v, mask, p)
