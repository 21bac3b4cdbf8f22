"""Evaluation of a model on one split: teacher-forced loss, decoding and quality metrics."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ablate.data.lm_corpus import LMData
from ablate.data.prepare import PreparedData, TokenBatcher
from ablate.engine import metrics
from ablate.engine.decode import decode_batch, length_sorted_batches
from ablate.engine.decoder_only import DecoderOnlyLM
from ablate.engine.encoder_decoder import Seq2SeqTransformer
from ablate.engine.lm_eval import capped, evaluate_lm, sample_texts, summed_nll, summed_over_ranks
from ablate.hardware import autocast_context
from ablate.spec.experiment import ExperimentSpec


@dataclass
class Translations:
    sources: list[str]
    references: list[str]
    hypotheses: list[str]
    hypothesis_ids: list[list[int]]
    reference_ids: list[list[int]]


@torch.no_grad()
def teacher_forced_loss(model: nn.Module, data: PreparedData, split: str, spec: ExperimentSpec,
                        device: torch.device, autocast: object, *, max_tokens: int | None = None,
                        rank: int = 0, world_size: int = 1) -> float:
    """Mean token cross-entropy without label smoothing (comparable across variants), float32, the generator
    and the log-softmax a chunk of rows at a time (lm_eval.summed_nll); on the batches that reach
    ``max_tokens`` target tokens (all when None), rank ``rank`` scoring every ``world_size``-th of them and
    the sums added over the ranks."""
    tok = data.tokenizers
    batcher = TokenBatcher(data.splits[split], spec.data.batch_tokens, spec.seed, shuffle=False,
                           specials=(tok.pad_id, tok.bos_id, tok.eos_id))
    pad = data.tokenizers.pad_id
    total, tokens = 0.0, 0
    batches = (batcher.collate(indices) for indices in batcher.epoch_batches(0))
    for i, batch in enumerate(capped(batches, max_tokens)):
        if i % world_size != rank:
            continue
        with autocast:  # type: ignore[attr-defined]
            src, tgt_in = batch.src.to(device), batch.tgt_in.to(device)  # (B, S), (B, T)
            total += summed_nll(model, batch.tgt_out.to(device), batch.n_tgt_tokens, pad, src, tgt_in)
        tokens += batch.n_tgt_tokens
    total, tokens = summed_over_ranks(total, tokens, world_size, device)
    return total / max(1, tokens)


def translate_split(model: Seq2SeqTransformer, data: PreparedData, split: str, spec: ExperimentSpec,
                    device: torch.device, limit: int | None = None, batch_size: int = 128) -> Translations:
    """Decode the first `limit` sentences of a split with the spec's decoding settings.

    128 sentences a batch (512 beam-4 rows): on 2 CPU threads the batched beam decodes the Multi30k
    validation set 12% faster than at 64 (scripts/decode_speed.py, 188 vs 174 sentences/s).
    """
    part = data.splits[split]
    n = len(part.src_ids) if limit is None else min(limit, len(part.src_ids))
    tok = data.tokenizers
    hyps: list[list[int]] = [[] for _ in range(n)]  # in the split's order, whatever the batch order
    for chunk, src in length_sorted_batches(part.src_ids, range(n), batch_size, tok.pad_id):
        outputs = decode_batch(model, src.to(device), spec.eval.decode, tok.bos_id, tok.eos_id)
        for i, out in zip(chunk, outputs, strict=True):
            hyps[i] = list(out)
    return Translations(
        sources=list(part.src_text[:n]),
        references=list(part.tgt_text[:n]),
        hypotheses=[tok.decode_tgt(h) for h in hyps],
        hypothesis_ids=hyps,
        reference_ids=[list(t) for t in part.tgt_ids[:n]],
    )


@torch.no_grad()
def evaluate(model: Seq2SeqTransformer | DecoderOnlyLM, data: PreparedData, split: str, spec: ExperimentSpec,
             device: torch.device, precision: str, decode: bool = True,
             limit: int | None = None, keep: dict[str, Translations] | None = None, *,
             max_tokens: int | None = None, rank: int = 0, world_size: int = 1,
             scored_nll: tuple[float, int] | None = None) -> dict[str, float]:
    """Metrics named `{split}/loss`, `{split}/ppl` and `{split}/bleu`+`chrf` (text) or `exact_match`.

    Decodes the first `limit` sentences, the whole split when None: the trainer passes
    ``eval.max_sentences`` (a cap that keeps evaluations during training cheap); the final val/test
    figures of a run decode every sentence. The losses score the batches that reach ``max_tokens`` target
    tokens (the trainer's ``eval.max_tokens``; all when None), rank ``rank`` of ``world_size`` (DDP) every
    ``world_size``-th batch, added over the ranks; every rank decodes the same sentences. A language model
    (``LMData``) gets :func:`ablate.engine.lm_eval.evaluate_lm`'s perplexities instead, and decodes nothing.
    ``keep``: the split's translations (the ones its metrics were computed on) are stored there under
    ``split``. ``scored_nll``: the loss's (summed nats, scored targets) on those batches at the training
    length, computed already (a pack's cells in one stacked forward: ablate/engine/packed_eval.py).
    """
    if isinstance(data, LMData):
        assert isinstance(model, DecoderOnlyLM)
        return evaluate_lm(model, data, split, spec, device, precision, max_tokens=max_tokens, rank=rank,
                           world_size=world_size, scored_nll=scored_nll)
    assert isinstance(model, Seq2SeqTransformer)

    was_training = model.training
    model.eval()
    try:
        loss = (scored_nll[0] / max(1, scored_nll[1]) if scored_nll is not None else
                teacher_forced_loss(model, data, split, spec, device, autocast_context(precision, device),
                                    max_tokens=max_tokens, rank=rank, world_size=world_size))
        out = {f"{split}/loss": loss, f"{split}/ppl": metrics.perplexity(loss)}
        if decode:
            with autocast_context(precision, device):
                tr = translate_split(model, data, split, spec, device, limit=limit)
            out.update(quality(tr, data.is_text, split))
            if keep is not None:
                keep[split] = tr
        return out
    finally:
        model.train(was_training)


def quality(tr: Translations, is_text: bool, split: str) -> dict[str, float]:
    if is_text:
        return {f"{split}/bleu": metrics.bleu(tr.hypotheses, tr.references),
                f"{split}/chrf": metrics.chrf(tr.hypotheses, tr.references)}
    return {f"{split}/exact_match": metrics.exact_match(tr.hypothesis_ids, tr.reference_ids)}


def has_split(data: PreparedData, split: str) -> bool:
    """Whether the prepared data has a non-empty ``split`` (sentence pairs or documents)."""
    if isinstance(data, LMData):
        return split in data.documents and len(data.documents[split].docs) > 0
    return split in data.splits and bool(data.splits[split].src_ids)


def samples_text(model: Seq2SeqTransformer | DecoderOnlyLM, data: PreparedData, spec: ExperimentSpec,
                 device: torch.device) -> str:
    """The run's sample artifact: translations of test (else val) sentences, or a language model's greedy
    continuations of document openings."""
    if isinstance(data, LMData):
        assert isinstance(model, DecoderOnlyLM)
        return sample_texts(model, data, spec.eval.samples)
    assert isinstance(model, Seq2SeqTransformer)
    samples = translate_split(model, data, "test" if "test" in data.splits else "val", spec, device,
                              limit=spec.eval.samples)
    return format_samples(samples, spec.eval.samples)


def format_samples(tr: Translations, count: int) -> str:
    lines = []
    for i in range(min(count, len(tr.sources))):
        lines += [f"SRC: {tr.sources[i]}", f"REF: {tr.references[i]}", f"HYP: {tr.hypotheses[i]}", ""]
    return "\n".join(lines)
