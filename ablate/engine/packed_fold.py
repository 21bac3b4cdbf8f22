"""The cells' batches of a pack folded into one: each cell's micro-batch (or evaluation batch) padded to the
pack's rows and lengths and stacked along the batch dimension, as the pack's template takes them
(ablate/engine/packed_model.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

import torch

from ablate.data.lm_corpus import IGNORE, LMBatch
from ablate.data.prepare import Batch
from ablate.engine.packed_model import pad_rows

if TYPE_CHECKING:
    from ablate.engine.trainer import Trainer

__all__ = ["batch_lengths", "fold_batches"]


def batch_lengths(batches: Sequence[Batch | LMBatch]) -> list[list[int]]:
    """Each kind of length of the cells' micro-batches, per cell: a language model's sequence; a
    translation's source and target."""
    if isinstance(batches[0], LMBatch):
        return [[b.ids.size(1) for b in batches if isinstance(b, LMBatch)]]
    mt = [b for b in batches if isinstance(b, Batch)]
    return [[b.src.size(1) for b in mt], [b.tgt_in.size(1) for b in mt]]


def fold_batches(batches: list[Batch | LMBatch], trainer: Trainer,
                 lengths: Sequence[int] | None = None) -> tuple[list[torch.Tensor], torch.Tensor]:
    """The cells' micro-batches as one folded batch: inputs (K B, ...) and targets (K, B, T), each cell's
    padded to the largest rows and to ``lengths`` (default: the longest of each kind, as
    :func:`batch_lengths` orders them; pad targets are ignored by the loss; a padding row starts with a real
    token, so no attention row is fully masked)."""
    rows = max(b.size for b in batches)
    longest = lengths or [max(own) for own in batch_lengths(batches)]
    if isinstance(batches[0], LMBatch):
        lm = [b for b in batches if isinstance(b, LMBatch)]
        cols = longest[0]
        pad = trainer.pad_id
        ids = torch.cat([pad_rows(b.ids, rows, cols, pad, first=pad) for b in lm])
        targets = torch.stack([pad_rows(b.targets, rows, cols, IGNORE) for b in lm])
        if lm[0].segments is None:
            return [ids], targets
        segments = [cast(torch.Tensor, b.segments) for b in lm]
        # a padded position is a document of its own
        return [ids, torch.cat([pad_rows(s, rows, cols, int(s.max()) + 1) for s in segments])], targets
    tok = trainer.data.tokenizers
    pad = tok.pad_id
    mt = [b for b in batches if isinstance(b, Batch)]
    src_cols, tgt_cols = longest
    src = torch.cat([pad_rows(b.src, rows, src_cols, pad, first=tok.eos_id) for b in mt])
    tgt_in = torch.cat([pad_rows(b.tgt_in, rows, tgt_cols, pad, first=tok.bos_id) for b in mt])
    targets = torch.stack([pad_rows(b.tgt_out, rows, tgt_cols, pad) for b in mt])
    return [src, tgt_in], targets
