"""The decoder-only language model (``model.arch: decoder_only``), assembled from the same registry
components as the encoder-decoder model by ``ablate.engine.builders.build_lm``.

One stack of causal self-attention layers (no encoder, no cross-attention), as in GPT (Radford et al.
2018) and the LLaMA-style stacks whose papers made the modern variants' claims. Every axis applies as in
the translation decoder: residual placement and norms, FFN and activation, the attention core (QK-norm
included), the mask fill, the position scheme in its causal form (``causal=True``: ALiBi's ``-m (i - j)``,
T5's unidirectional buckets, RoPE, learned, sinusoidal, none) and the embeddings, tied (Press & Wolf 2017)
or separate. Only the target-side embedding of a registry embeddings variant is used; variants that tie
the source side (``shared``) are refused by the spec.

Packed training blocks (ablate/data/lm_corpus.py) carry a segment id per position: a query sees a key only
when both are in the same document and the key is not in its future, a block-diagonal causal mask (as
torchtune's packed datasets), and additive absolute positions (sinusoidal, learned) restart at each
document (``PositionHooks`` of relative schemes need no restart: their scores depend on ``i - j`` only).
Incremental decoding keeps one :class:`~registry.attention.KVCache` per layer, so generation costs one
position per step and equals the full forward.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import Tensor, nn

from ablate.engine.components import Stack, head_logits, record_attention, score_dtype
from ablate.errors import AblateError
from registry.attention import KVCache, MultiHeadAttention, Rotate
from registry.masking import AttnMask, Documents, MaskFill
from registry.parametrisation import WidthShape
from registry.positions import PositionHooks

# Mean tokens a document from which a CPU takes a packed block's documents one sdpa call each rather than
# through the (B, 1, T, T) mask (docs/benchmarks.md: the document-masked step)
VARLEN_MIN_LENGTH = 64


class PositionRangeError(AblateError):
    """A sequence longer than the position table a model was built with (learned positions cannot
    extrapolate): one line, exit code 2, instead of an index error deep inside an embedding."""


@dataclass
class LMCache:
    """Per layer, the self-attention keys and values of every position decoded so far."""

    layers: list[KVCache]

    @property
    def length(self) -> int:
        """Positions already decoded (the ``start_pos`` of the next call)."""
        return self.layers[0].length if self.layers else 0

    @property
    def nbytes(self) -> int:
        """Bytes of keys and values held by every layer (what ``ablate bench`` reports for decoding)."""
        return sum(c.nbytes for c in self.layers)

    def reorder(self, index: Tensor) -> None:
        """Keep / reorder / duplicate rows: row i becomes old row ``index[i]``."""
        for c in self.layers:
            c.index_select(index)


class LMLayer(nn.Module):
    """Causal self-attention then feed-forward, each inside its residual wrapper."""

    def __init__(self, attn: nn.Module, ffn: nn.Module, attn_res: nn.Module, ffn_res: nn.Module) -> None:
        super().__init__()
        self.self_attn, self.ffn = attn, ffn
        self.attn_res, self.ffn_res = attn_res, ffn_res

    def forward(self, x: Tensor, mask: AttnMask | None, cache: KVCache | None = None,
                rotate: Rotate | None = None) -> Tensor:
        x = self.attn_res(x, lambda h: self.self_attn(h, mask=mask, cache=cache, rotate=rotate))
        return self.ffn_res(x, self.ffn)

    def sublayers(self) -> list[tuple[nn.Module, nn.Module]]:
        """(residual wrapper, sub-layer) pairs, for the residual's init hook (DeepNorm)."""
        return [(self.attn_res, self.self_attn), (self.ffn_res, self.ffn)]


def segment_positions(segments: Tensor) -> Tensor:
    """(B, T) position of each token inside its document: 0 where the segment id changes, then counting.

    ``segments`` (B, T) holds one id per document inside a packed block (any ids, equal within a
    document, different between neighbours)."""
    B, T = segments.shape
    index = torch.arange(T, device=segments.device).expand(B, T)
    starts = torch.ones_like(segments, dtype=torch.bool)
    starts[:, 1:] = segments[:, 1:] != segments[:, :-1]
    start_index = torch.where(starts, index, torch.zeros_like(index)).cummax(dim=1).values  # (B, T)
    return index - start_index


class DecoderOnlyLM(nn.Module):
    """Token embedding -> position scheme -> causal layers -> final norm -> logits over the vocabulary."""

    def __init__(self, embed: nn.Embedding, positions: nn.Module, decoder: Stack, generator: nn.Linear,
                 mask: MaskFill, pad_id: int = 0, embed_scale: float = 1.0,
                 embed_dropout: nn.Module | None = None, logits: nn.Module | None = None,
                 window: int | None = None) -> None:
        super().__init__()
        self.embed, self.positions, self.decoder = embed, positions, decoder
        # the embedding_dropout axis: on the scaled token embeddings, before the positions are added
        self.embed_dropout = embed_dropout if embed_dropout is not None else nn.Identity()
        self.generator = generator
        # the logits axis (a soft cap, or the logits as they are), after the parametrisation's multiplier
        self.logit_head = logits if logits is not None else nn.Identity()
        self.logit_multiplier = 1.0  # muP's base/width (ablate/engine/parametrise.py)
        # the parametrisation's rules and each parameter's WidthShape: muP's per-group learning rates
        self.parametrisation: Any = None
        self.width_shapes: dict[str, WidthShape] = {}
        self.window = window  # sliding-window attention: a query sees itself and window - 1 earlier keys
        self.mask = mask
        self.pad_id = pad_id
        self.embed_scale = embed_scale
        self.max_positions: int = getattr(positions, "max_positions", 1 << 30)

    # ------------------------------------------------------------ helpers
    def _compute_dtype(self, device_type: str) -> torch.dtype:
        return score_dtype(self.generator.weight, device_type)

    def logits(self, hidden: Tensor) -> Tensor:
        """The output logits (..., V) of final hidden states (..., d): the projection, the
        parametrisation's multiplier, then the logits axis's component."""
        return head_logits(self.generator, self.logit_multiplier, self.logit_head, hidden)

    def check_length(self, end: int) -> None:
        """A one-line error when positions up to ``end - 1`` are past the position scheme's table."""
        if end > self.max_positions:
            name = type(self.positions).__name__
            learned = isinstance(getattr(self.positions, "table", None), nn.Embedding)
            why = ("learned positions cannot extrapolate beyond their table" if learned
                   else "raise model.max_positions")
            raise PositionRangeError(f"position {end - 1} is past the {self.max_positions} positions of this "
                                     f"model's {name} (model.max_positions {self.max_positions}): {why}")

    def _embed(self, ids: Tensor, start_pos: int, positions: Tensor | None) -> Tensor:
        x = self.embed(ids)  # (B, T, d)
        if self.embed_scale != 1.0:
            x = x * self.embed_scale
        x = self.embed_dropout(x)
        embed_at: Callable[[Tensor, Tensor], Tensor] | None = getattr(self.positions, "embed_at", None)
        if positions is not None and embed_at is not None:
            return embed_at(x, positions)  # absolute tables restart at each document of a packed block
        return self.positions.embed(x, start_pos)  # type: ignore[operator, no-any-return]

    def _hooks(self, q_start: int, q_len: int, k_len: int, device: torch.device) -> PositionHooks:
        hooks = self.positions.attention(q_start, q_len, k_len, device)  # type: ignore[operator]
        return hooks if hooks is not None else PositionHooks()

    # ------------------------------------------------------------ public API
    def forward(self, ids: Tensor, segments: Tensor | None = None, cache: LMCache | None = None,
                start_pos: int = 0, project: bool = True) -> Tensor:
        """Logits (B, T, V) of the next token at each position of ``ids`` (B, T).

        ``segments`` (B, T): the document of each position in a packed block (None: one document per row;
        right padding needs nothing, a causal query never sees a later pad). With a ``cache`` only the new
        tokens are given, at absolute positions ``start_pos ..``; ``project=False`` returns the final
        hidden states (B, T, d).
        """
        T = ids.size(1)
        device = ids.device
        past = 0 if cache is None else cache.length
        if cache is not None and start_pos != past:
            raise ValueError(f"start_pos {start_pos} does not match the {past} positions in the cache")
        self.check_length(start_pos + T)
        positions = segment_positions(segments) if segments is not None else None
        x = self._embed(ids, start_pos, positions)
        dtype = self._compute_dtype(device.type)
        hooks = self._hooks(start_pos, T, past + T, device)
        mask = self._mask(T, past, segments, dtype, hooks, device)
        for i, layer in enumerate(self.decoder.layers):
            x = layer(x, mask, None if cache is None else cache.layers[i], hooks.rotate)
        hidden = self.decoder.norm(x)
        return self.logits(hidden) if project else hidden

    def _mask(self, T: int, past: int, segments: Tensor | None, dtype: torch.dtype, hooks: PositionHooks,
              device: torch.device) -> AttnMask | None:
        """Causal (query ``past + i`` sees keys ``0 .. past + i``), block-diagonal over ``segments``, and with
        a sliding ``window`` only the keys ``past + i - window + 1 .. past + i``."""
        window = self.window
        if segments is not None:
            if past:
                raise ValueError("segments describe a packed block: decode it without a cache")
            documents = self._documents(segments, device)
            if documents is not None:  # a fused kernel takes them: no (B, 1, T, T) mask
                return AttnMask(None, None, self.mask.fill, position_bias=hooks.bias, documents=documents)
            blocked = Documents(segments, window).blocked()  # (B, 1, T, T) True where a query may not look
            return self.mask.build(blocked, dtype, position_bias=hooks.bias)
        if past == 0 and (window is None or T <= window):
            causal = torch.ones(T, T, dtype=torch.bool, device=device).triu_(1)
            return self.mask.build(causal, dtype, is_causal=True, position_bias=hooks.bias)
        if T > 1 or (window is not None and past + T > window):  # after a cached prefix, or a window
            return self.mask.build(self._causal(T, past, device), dtype, position_bias=hooks.bias)
        if hooks.bias is not None:  # one new token sees every cached one: only the position bias
            return self.mask.build(None, dtype, position_bias=hooks.bias)
        return None

    def _documents(self, segments: Tensor, device: torch.device) -> Documents | None:
        """A packed block's documents in the form the attention cores' fused kernel takes them (the same
        kernel in every layer), or None for the reference (B, 1, T, T) mask.

        FlexAttention (a GPU): its block mask, built here once for every layer. Per-document sdpa (a CPU):
        the documents' spans, read from host memory, where they average at least
        :data:`VARLEN_MIN_LENGTH` tokens; shorter ones cost more in calls than the mask's blocks."""
        cores = self.attention_modules()["decoder_self"]
        kernels = {getattr(core, "document_kernel", lambda _: None)(device) for core in cores}
        kernel = kernels.pop() if len(kernels) == 1 else None
        if kernel == "flex":
            return Documents.with_block_mask(segments, self.window)
        if kernel == "varlen":
            documents = Documents.with_spans(segments, self.window)
            return documents if documents.mean_length() >= VARLEN_MIN_LENGTH else None
        return None

    def _causal(self, T: int, past: int, device: torch.device) -> Tensor:
        """(T, past + T) bool, True where query ``past + i`` may not see key ``j``: ``j > past + i``, and
        with a window ``j <= past + i - window``."""
        q_pos = torch.arange(past, past + T, device=device)[:, None]
        k_pos = torch.arange(past + T, device=device)[None, :]
        blocked = k_pos > q_pos
        if self.window is not None:
            blocked |= k_pos <= q_pos - self.window
        return blocked

    def init_cache(self) -> LMCache:
        return LMCache([KVCache() for _ in self.decoder.layers])

    def kv_cache_bytes_per_token(self, dtype: torch.dtype = torch.float32) -> int:
        """Bytes the KV cache holds per decoded token (keys and values of every layer), in ``dtype``: 2 x
        layers x kv_heads x d_head x element size; ``kv_heads / heads`` of multi-head attention's."""
        size = torch.empty((), dtype=dtype).element_size()
        return sum(2 * m.kv_heads * m.d_head * size for m in self.attention_modules()["decoder_self"])

    def attention_modules(self) -> dict[str, list[MultiHeadAttention]]:
        """The attention modules per role (one role here), in layer order."""
        return {"decoder_self": [cast(MultiHeadAttention, layer.self_attn) for layer in self.decoder.layers]}

    def attention_maps(self, ids: Tensor) -> dict[str, list[Tensor]]:
        """Causal self-attention probabilities per layer, each (heads, T, T), of one sequence (batch of 1)."""
        if ids.size(0) != 1:
            raise ValueError(f"attention_maps takes one sequence, found {ids.size(0)}")
        return record_attention(self, self.attention_modules(), lambda: self.forward(ids))

    def attention_kernels(self) -> list[str]:
        """Which kernels the attention cores report having run, sorted (see Seq2SeqTransformer)."""
        found: set[str] = set()
        for module in self.attention_modules()["decoder_self"]:
            found |= getattr(module, "kernels", set())
        return sorted(found)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())
