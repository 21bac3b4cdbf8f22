"""A pack's validation loss in one stacked forward: each cell's evaluation batches (the very batches its
evaluation alone scores: a translation split's unshuffled token batches, a language model's windows at the
training length, up to ``eval.max_tokens`` targets) folded as its training batches are, one forward of the
pack's template in eval mode, and each cell's summed cross-entropy on its own rows and targets. The cells'
evaluations then take these sums (:meth:`~ablate.engine.trainer.Trainer.run_evaluation`'s ``scored_nll``)
and compute the rest alone: decoding, samples, the perplexities at other lengths. A cell's loss equals its
loss alone up to the order of float sums (tests/engine/test_packed.py).

Where the cells' splits give different numbers of batches (a synthetic task drawn from each cell's seed),
:func:`split_nll` gives None and each cell evaluates alone.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence

import torch
import torch.nn.functional as F

from ablate.data.lm_corpus import IGNORE, LMBatch, LMData, window_batches
from ablate.data.prepare import Batch, TokenBatcher
from ablate.engine.lm_eval import capped
from ablate.engine.packed_fold import fold_batches
from ablate.engine.packed_model import PackedModel
from ablate.engine.trainer import Trainer
from ablate.hardware import autocast_context

__all__ = ["split_nll"]


def _batches(t: Trainer, split: str) -> Iterator[Batch | LMBatch]:
    """The batches ``t``'s evaluation of ``split`` scores its loss on, in its order."""
    cap = t.spec.eval.token_cap(t.spec.is_lm)
    tok = t.data.tokenizers
    if isinstance(t.data, LMData):
        docs = t.data.documents[split]
        return capped(window_batches(docs, t.data.block_len, None, t.spec.data.batch_tokens, tok.pad_id), cap)
    batcher = TokenBatcher(t.data.splits[split], t.spec.data.batch_tokens, t.spec.seed, shuffle=False,
                           specials=(tok.pad_id, tok.bos_id, tok.eos_id))
    return capped((batcher.collate(indices) for indices in batcher.epoch_batches(0)), cap)


@torch.no_grad()
def split_nll(pack: PackedModel, trainers: Sequence[Trainer], split: str) -> list[tuple[float, int]] | None:
    """Each cell's (summed nats, scored targets) on its evaluation batches of ``split``, the cells' batches
    folded into one forward each; None where the cells' batches do not pair up."""
    first = trainers[0]
    cells = len(trainers)
    totals, counts = [0.0] * cells, [0] * cells
    template = pack.template
    was_training = template.training
    template.eval()
    try:
        for group in itertools.zip_longest(*(_batches(t, split) for t in trainers)):
            if any(b is None for b in group):
                return None
            batches = [b for b in group if b is not None]
            inputs, targets = fold_batches(batches, first)
            with autocast_context(first.precision, first.device):
                logits = pack(*[x.to(first.device) for x in inputs])  # (K B, T, V)
            logits = logits.view(cells, -1, *logits.shape[1:])
            targets = targets.to(first.device)
            for k, (t, batch) in enumerate(zip(trainers, batches, strict=True)):
                ignore = IGNORE if isinstance(batch, LMBatch) else t.data.tokenizers.pad_id
                totals[k] += float(F.cross_entropy(logits[k].float().flatten(0, 1), targets[k].flatten(),
                                                   ignore_index=ignore, reduction="sum"))
                counts[k] += batch.n_tgt_tokens
    finally:
        template.train(was_training)
    return list(zip(totals, counts, strict=True))
