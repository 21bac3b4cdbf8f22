"""The encoder-decoder skeleton, assembled from registry components by ``ablate.engine.builders.build_model``.

Blocks receive their sub-modules (``attn=``, ``ffn=``, residual wrappers holding their norms); nothing
here names a variant: the builder constructs each axis's chosen component from the registry with
the options its declaration lists. Per ``encode`` / ``decode`` call the model asks the position scheme of
the stack for its hooks (a rotation of queries and keys, a score bias) and the mask component for the
masks (with that bias folded in), once, and hands them to every layer. Parameters are initialised by
:func:`ablate.engine.init.init_parameters` from generators seeded per (seed, parameter name, shape), so two
variants built with the same seed start from identical values in every parameter they share.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import Tensor, nn

from ablate.engine.components import Stack, head_logits, record_attention, score_dtype
from registry.attention import KVCache, MultiHeadAttention, Rotate
from registry.masking import AttnMask, MaskFill
from registry.parametrisation import WidthShape
from registry.positions import PositionHooks


# ---------------------------------------------------------------- states passed between calls
@dataclass
class EncoderState:
    """What the decoder needs of the source: built once by ``encode``, read by every ``decode`` call."""
    memory: Tensor  # (B, S, d): encoder output
    src_pad: Tensor  # (B, S) bool, True where the source is padding
    key_mask: AttnMask | None = None  # the (B, 1, 1, S) key-padding mask encode built (bias in its dtype)

    def index_select(self, index: Tensor) -> EncoderState:
        mask = None if self.key_mask is None else self.key_mask.index_select(index)
        return EncoderState(self.memory.index_select(0, index), self.src_pad.index_select(0, index), mask)


@dataclass
class DecoderCache:
    """Per decoder layer: self-attention K/V (grown each step) and cross-attention K/V (set once).

    With a cache, :meth:`Seq2SeqTransformer.decode` reads the source side through it (cross K/V,
    padding mask), so reordering the cache is all a beam search needs. The source side has one row
    per source row given to ``init_cache``; after :meth:`select_beams` each such row serves ``beams``
    consecutive query rows (the hypotheses of one sentence) and is never copied per beam.
    """

    self_kv: list[KVCache]
    cross_kv: list[KVCache]
    src_pad: Tensor  # (n, S) bool, one row per source row
    cross_mask: AttnMask  # built once from src_pad
    beams: int = 1  # consecutive query rows per source row

    @property
    def length(self) -> int:
        """Target positions already decoded (the ``start_pos`` of the next call)."""
        return self.self_kv[0].length if self.self_kv else 0

    def reorder(self, index: Tensor) -> None:
        """Keep/reorder/duplicate query rows in place: row i becomes old row index[i] (any index)."""
        for c in self.self_kv:
            c.index_select(index)
        self._select_sources(index // self.beams if self.beams > 1 else index)
        self._set_beams(1)

    def select_beams(self, rows: Tensor, sentences: Tensor | None, beams: int) -> None:
        """A beam search step: query row i becomes old query row ``rows[i]``; the source side keeps
        the source rows ``sentences`` (None: all of them, in place, not copied), each of which then
        serves ``beams`` consecutive query rows, so ``rows`` holds ``beams`` per kept sentence."""
        for c in self.self_kv:
            c.index_select(rows)
        if sentences is not None:
            self._select_sources(sentences)
        self._set_beams(beams)

    def _set_beams(self, beams: int) -> None:
        self.beams = beams
        for c in self.cross_kv:
            c.group = beams

    def _select_sources(self, index: Tensor) -> None:
        for c in self.cross_kv:
            c.index_select(index)
        self.src_pad = self.src_pad.index_select(0, index)
        self.cross_mask = self.cross_mask.index_select(index)


# ---------------------------------------------------------------- blocks
class EncoderLayer(nn.Module):
    def __init__(self, attn: nn.Module, ffn: nn.Module, attn_res: nn.Module, ffn_res: nn.Module) -> None:
        super().__init__()
        self.self_attn, self.ffn = attn, ffn
        self.attn_res, self.ffn_res = attn_res, ffn_res

    def forward(self, x: Tensor, mask: AttnMask, rotate: Rotate | None = None) -> Tensor:
        x = self.attn_res(x, lambda h: self.self_attn(h, mask=mask, rotate=rotate))
        return self.ffn_res(x, self.ffn)

    def sublayers(self) -> list[tuple[nn.Module, nn.Module]]:
        """(residual wrapper, sub-layer) pairs, for the residual's init hook."""
        return [(self.attn_res, self.self_attn), (self.ffn_res, self.ffn)]


class DecoderLayer(nn.Module):
    def __init__(
        self,
        attn: nn.Module,
        cross_attn: nn.Module,
        ffn: nn.Module,
        attn_res: nn.Module,
        cross_res: nn.Module,
        ffn_res: nn.Module,
    ) -> None:
        super().__init__()
        self.self_attn, self.cross_attn, self.ffn = attn, cross_attn, ffn
        self.attn_res, self.cross_res, self.ffn_res = attn_res, cross_res, ffn_res

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None,
        self_mask: AttnMask | None,
        cross_mask: AttnMask,
        self_cache: KVCache | None = None,
        cross_cache: KVCache | None = None,
        rotate: Rotate | None = None,
    ) -> Tensor:
        x = self.attn_res(x, lambda h: self.self_attn(h, mask=self_mask, cache=self_cache, rotate=rotate))
        x = self.cross_res(x, lambda h: self.cross_attn(h, memory, mask=cross_mask, cache=cross_cache))
        return self.ffn_res(x, self.ffn)

    def sublayers(self) -> list[tuple[nn.Module, nn.Module]]:
        return [(self.attn_res, self.self_attn), (self.cross_res, self.cross_attn), (self.ffn_res, self.ffn)]


# ---------------------------------------------------------------- the model

class Seq2SeqTransformer(nn.Module):
    def __init__(
        self,
        src_embed: nn.Embedding,
        tgt_embed: nn.Embedding,
        src_pos: nn.Module,
        tgt_pos: nn.Module,
        encoder: Stack,
        decoder: Stack,
        generator: nn.Linear,
        mask: MaskFill,
        pad_id: int = 0,
        embed_scale: float = 1.0,
        embed_dropout: nn.Module | None = None,
        logits: nn.Module | None = None,
    ) -> None:
        super().__init__()
        self.src_embed, self.tgt_embed = src_embed, tgt_embed
        # The embedding_dropout axis: applied to the scaled token embeddings, before the positions.
        self.embed_dropout = embed_dropout if embed_dropout is not None else nn.Identity()
        self.src_pos, self.tgt_pos = src_pos, tgt_pos
        self.encoder, self.decoder = encoder, decoder
        self.generator = generator
        # the logits axis (a soft cap, or the logits as they are), after the parametrisation's multiplier
        self.logit_head = logits if logits is not None else nn.Identity()
        self.logit_multiplier = 1.0  # muP's base/width (ablate/engine/parametrise.py)
        # the parametrisation's rules and each parameter's WidthShape: muP's per-group learning rates
        self.parametrisation: Any = None
        self.width_shapes: dict[str, WidthShape] = {}
        self.mask = mask
        self.pad_id = pad_id
        self.embed_scale = embed_scale
        self.max_positions: int = getattr(tgt_pos, "max_positions", 1 << 30)

    # ------------------------------------------------------------ helpers
    def _compute_dtype(self, device_type: str) -> torch.dtype:
        return score_dtype(self.generator.weight, device_type)

    def logits(self, hidden: Tensor) -> Tensor:
        """The output logits (..., V) of final hidden states (..., d): the projection, the
        parametrisation's multiplier, then the logits axis's component."""
        return head_logits(self.generator, self.logit_multiplier, self.logit_head, hidden)

    def _embed(self, table: nn.Embedding, ids: Tensor) -> Tensor:
        x = table(ids)  # (B, T, d)
        return self.embed_dropout(x * self.embed_scale if self.embed_scale != 1.0 else x)

    def _key_mask(self, pad: Tensor, dtype: torch.dtype) -> AttnMask:
        return self.mask.build(pad[:, None, None, :], dtype)  # (B, 1, 1, S) broadcasts over heads, queries

    def _source_mask(self, enc: EncoderState, dtype: torch.dtype) -> AttnMask:
        """encode's key-padding mask; rebuilt only for another compute dtype (autocast in one call)."""
        if enc.key_mask is not None and enc.key_mask.bias is not None and enc.key_mask.bias.dtype == dtype:
            return enc.key_mask
        return self._key_mask(enc.src_pad, dtype)

    # ------------------------------------------------------------ public API
    def _hooks(self, positions: nn.Module, q_start: int, q_len: int, k_len: int, device: torch.device
               ) -> PositionHooks:
        hooks = positions.attention(q_start, q_len, k_len, device)  # type: ignore[operator]
        return hooks if hooks is not None else PositionHooks()

    def encode(self, src: Tensor) -> EncoderState:
        src_pad = src.eq(self.pad_id)  # (B, S)
        x = self.src_pos.embed(self._embed(self.src_embed, src))  # type: ignore[operator]
        dtype = self._compute_dtype(x.device.type)
        key_mask = self._key_mask(src_pad, dtype)  # (B, 1, 1, S): also the decoder's cross-attention mask
        hooks = self._hooks(self.src_pos, 0, src.size(1), src.size(1), src.device)
        mask = key_mask if hooks.bias is None else self.mask.build(
            src_pad[:, None, None, :], dtype, position_bias=hooks.bias)  # (B, heads, S, S) with the bias
        for layer in self.encoder.layers:
            x = layer(x, mask, hooks.rotate)
        return EncoderState(self.encoder.norm(x), src_pad, key_mask)

    def init_cache(self, enc: EncoderState) -> DecoderCache:
        cross = []
        for attn in self.attention_modules()["cross"]:
            k, v = attn.project_kv(enc.memory)  # 2 x (B, heads, S, d_head), once per source
            # contiguous once here: as views of the fused projection, every step's matmul would copy them
            cross.append(KVCache(k.contiguous(), v.contiguous()))
        mask = self._source_mask(enc, self._compute_dtype(enc.memory.device.type))
        return DecoderCache([KVCache() for _ in self.decoder.layers], cross, enc.src_pad, mask)

    def decode(
        self, tgt_in: Tensor, enc: EncoderState, cache: DecoderCache | None = None, start_pos: int = 0,
        project: bool = True,
    ) -> Tensor:
        """Logits (B, T, V). Without a cache ``tgt_in`` is the whole prefix; with one, only the new tokens.
        ``project=False``: the final hidden states (B, T, d) instead, for a caller that applies
        :meth:`logits` itself (beam search does, a chunk of rows at a time).

        The self-attention mask is causal only: targets are right-padded, so a real position never
        sees a pad and pad positions are ignored by the loss.
        """
        T = tgt_in.size(1)
        x = self.tgt_pos.embed(self._embed(self.tgt_embed, tgt_in), start_pos)  # type: ignore[operator]
        dtype = self._compute_dtype(x.device.type)
        device = tgt_in.device
        if cache is None:
            hooks = self._hooks(self.tgt_pos, 0, T, T, device)
            causal = torch.ones(T, T, dtype=torch.bool, device=device).triu_(1)  # (T, T) True above diagonal
            self_mask: AttnMask | None = self.mask.build(causal, dtype, is_causal=True,
                                                         position_bias=hooks.bias)
            cross_mask = self._source_mask(enc, dtype)
            memory: Tensor | None = enc.memory
        else:
            past = cache.length
            if start_pos != past:
                raise ValueError(f"start_pos {start_pos} does not match the {past} positions in the cache")
            hooks = self._hooks(self.tgt_pos, past, T, past + T, device)  # the new tokens' absolute positions
            self_mask = None  # one new token may see every cached one
            if T > 1:  # query i (absolute past+i) may see keys 0..past+i
                q_pos = torch.arange(past, past + T, device=device)[:, None]
                blocked = torch.arange(past + T, device=device)[None, :] > q_pos  # (T, past+T)
                self_mask = self.mask.build(blocked, dtype, position_bias=hooks.bias)
            elif hooks.bias is not None:
                self_mask = self.mask.build(None, dtype, position_bias=hooks.bias)  # (heads, 1, past+1)
            cross_mask, memory = cache.cross_mask, None
        for i, layer in enumerate(self.decoder.layers):
            x = layer(
                x, memory, self_mask, cross_mask,
                None if cache is None else cache.self_kv[i],
                None if cache is None else cache.cross_kv[i],
                hooks.rotate,
            )
        hidden = self.decoder.norm(x)
        return self.logits(hidden) if project else hidden

    def forward(self, src: Tensor, tgt_in: Tensor, project: bool = True) -> Tensor:
        """Logits (B, T, V) of the next target token at each position of ``tgt_in``; ``project=False``:
        the final hidden states (B, T, d) (the trainer's loss applies the generator itself)."""
        return self.decode(tgt_in, self.encode(src), project=project)

    def attention_modules(self) -> dict[str, list[MultiHeadAttention]]:
        """The attention modules per role, in layer order."""
        enc, dec = list(self.encoder.layers), list(self.decoder.layers)
        return {
            "encoder_self": [cast(MultiHeadAttention, layer.self_attn) for layer in enc],
            "decoder_self": [cast(MultiHeadAttention, layer.self_attn) for layer in dec],
            "cross": [cast(MultiHeadAttention, layer.cross_attn) for layer in dec],
        }

    @torch.no_grad()
    def attention_maps(self, src: Tensor, tgt_in: Tensor) -> dict[str, list[Tensor]]:
        """Attention probabilities per layer, each (heads, Tq, Tk), of one sentence pair (batch of 1)."""
        if src.size(0) != 1 or tgt_in.size(0) != 1:
            raise ValueError(f"attention_maps takes one sentence pair, found {src.size(0)}, {tgt_in.size(0)}")
        return record_attention(self, self.attention_modules(), lambda: self.forward(src, tgt_in))

    def attention_kernels(self) -> list[str]:
        """Which kernels attention cores report having run (sdpa: "sdpa-<backend>" as torch chose it, e.g.
        "sdpa-flash" or "sdpa-math", and/or "matmul"), sorted."""
        found: set[str] = set()
        for group in self.attention_modules().values():
            for module in group:
                found |= getattr(module, "kernels", set())
        return sorted(found)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())  # tied parameters counted once
