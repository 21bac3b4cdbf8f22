"""A language model's evaluation (loss, perplexity, bits per byte, perplexity by evaluation length) and
sampling through the KV cache.

The metric names are ablate/spec/metricnames.py's: ``{split}/loss`` and ``{split}/ppl`` over
non-overlapping windows of the training length ``data.max_len``, ``{split}/bpb`` from the same sum, and
for each of ``eval.lengths`` ``{split}/ppl_at_<n>`` (and ``_sliding`` with ``eval.sliding_stride``), the
curve of Press et al. 2022's figure 1, with ``{split}/loss_growth_at_<n>``: the loss there minus the loss
at the training length, which separates extrapolation from the level at the training length. Every
target of every document is scored exactly once at each length, so the perplexities differ only by how
much context each prediction had and by whether the model copes with positions it never trained on.

An evaluation during training scores the split's first ``eval.max_tokens`` targets (whole batches, the same
ones at every evaluation; 2^21 by default), and under DDP each rank scores every ``world_size``-th batch of
them, the sums added over the ranks (:func:`summed_over_ranks`). The log-softmax is float32 and taken a
chunk of rows at a time with the generator, as the training loss (ablate/engine/token_loss.py): no
(tokens, vocabulary) float32 logits are held whole.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from typing import TypeVar

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor, nn

from ablate.data.lm_corpus import IGNORE, LMBatch, LMData, LMSplit, bits_per_byte, window_batches
from ablate.data.prepare import Batch
from ablate.engine.decoder_only import DecoderOnlyLM
from ablate.engine.token_loss import token_loss
from ablate.hardware import autocast_context
from ablate.spec import metricnames
from ablate.spec.experiment import ExperimentSpec
from registry.logits import PlainLogits

Batchlike = TypeVar("Batchlike", LMBatch, Batch)  # a language model's windows or sentence pairs


def scores_by_chunks(model: nn.Module) -> bool:
    """Whether the model's logits are its generator's own (no logits axis, a logit multiplier of 1), so that
    the cross-entropy can take the generator a chunk of rows at a time (token_loss)."""
    head = getattr(model, "logit_head", None)
    return isinstance(head, PlainLogits | nn.Identity) and getattr(model, "logit_multiplier", None) == 1.0


@torch.no_grad()
def summed_nll(model: nn.Module, targets: Tensor, scored: int, ignore: int, *inputs: Tensor) -> float:
    """The summed cross-entropy in nats of ``model(*inputs)``'s predictions of ``targets`` (B, T), leaving
    out ``ignore`` (``scored`` targets are not): float32 log-softmax, the generator and the loss a chunk of
    rows at a time where the logits are the generator's, else on the whole logits. Call it under the
    model's autocast."""
    if scored == 0:
        return 0.0
    if scores_by_chunks(model):
        hidden = model(*inputs, project=False)  # (B, T, d)
        generator = model.generator
        assert isinstance(generator, nn.Module)
        return float(token_loss(hidden, generator, targets, ignore)) * scored  # the mean x its count
    logits = model(*inputs)  # (B, T, V): a soft cap or a multiplier stands between generator and loss
    return float(F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), ignore_index=ignore,
                                 reduction="sum"))


def capped(batches: Iterable[Batchlike], max_tokens: int | None) -> Iterator[Batchlike]:
    """The batches in order, up to and including the one that brings the scored targets to ``max_tokens``
    (all of them when None)."""
    seen = 0
    for batch in batches:
        if max_tokens is not None and seen >= max_tokens:
            return
        seen += batch.n_tgt_tokens
        yield batch


def summed_over_ranks(total: float, count: int, world_size: int, device: torch.device) -> tuple[float, int]:
    """(total, count) added over the DDP ranks; themselves in a single process."""
    if world_size == 1:
        return total, count
    sums = torch.tensor([total, float(count)], dtype=torch.float64, device=device)
    dist.all_reduce(sums)
    return float(sums[0]), int(sums[1])


@torch.no_grad()
def window_nll(model: DecoderOnlyLM, docs: LMSplit | Sequence[Sequence[int]], length: int, stride: int | None,
               batch_tokens: int, device: torch.device, precision: str, pad_id: int = 0, *,
               max_tokens: int | None = None, rank: int = 0, world_size: int = 1) -> tuple[float, int]:
    """(summed negative log-likelihood in nats, scored targets) over the documents' windows (a split's
    documents are read one by one from its memory map), at most the batches that reach ``max_tokens``;
    rank ``rank`` of ``world_size`` scores batches rank, rank + world_size, ... and every rank returns the
    sums over all of them."""
    model.check_length(length)  # one line before any work, not an error half-way through the split
    total, count = 0.0, 0
    for i, batch in enumerate(capped(window_batches(docs, length, stride, batch_tokens, pad_id), max_tokens)):
        if i % world_size != rank:
            continue
        with autocast_context(precision, device):
            ids, targets = batch.ids.to(device), batch.targets.to(device)  # (B, T) each
            total += summed_nll(model, targets, batch.n_tgt_tokens, IGNORE, ids)
        count += batch.n_tgt_tokens
    return summed_over_ranks(total, count, world_size, device)


@torch.no_grad()
def evaluate_lm(model: DecoderOnlyLM, data: LMData, split: str, spec: ExperimentSpec, device: torch.device,
                precision: str, *, max_tokens: int | None = None, rank: int = 0, world_size: int = 1,
                scored_nll: tuple[float, int] | None = None) -> dict[str, float]:
    """``{split}/loss``, ``/ppl``, ``/bpb`` at the training length, and the perplexity at each of
    ``eval.lengths`` (non-overlapping; sliding too with ``eval.sliding_stride``), each on at most
    ``max_tokens`` targets (the whole split when None), shared over ``world_size`` ranks; ``scored_nll``:
    the training length's (summed nats, scored targets), computed already (a pack's stacked forward)."""
    was_training = model.training
    model.eval()
    try:
        part = data.documents[split]
        tokens = spec.data.batch_tokens
        pad = data.tokenizers.pad_id

        def scored(length: int, stride: int | None) -> tuple[float, int]:
            return window_nll(model, part, length, stride, tokens, device, precision, pad,
                              max_tokens=max_tokens, rank=rank, world_size=world_size)

        nll, count = scored(data.block_len, None) if scored_nll is None else scored_nll
        loss = nll / max(1, count)
        # bits per byte of the whole split: a capped evaluation's mean loss over all of the split's targets
        nats = nll if count >= part.n_targets else loss * part.n_targets
        out = {f"{split}/loss": loss, f"{split}/ppl": _ppl(loss),
               f"{split}/bpb": bits_per_byte(nats, part.n_bytes)}
        stride = spec.eval.sliding_stride
        for length in spec.eval.lengths:
            if length == data.block_len:  # its non-overlapping windows were just scored: the same numbers
                n, c = nll, count
            else:
                n, c = scored(length, None)
            out.update(_at_length(split, length, n / max(1, c), loss, length != data.block_len, False))
            if stride is not None:
                n, c = scored(length, stride)
                out.update(_at_length(split, length, n / max(1, c), loss, length != data.block_len, True))
        return out
    finally:
        model.train(was_training)


def _at_length(split: str, length: int, loss_at: float, loss: float, growth: bool, sliding: bool
               ) -> dict[str, float]:
    """The perplexity at ``length`` and, past (or short of) the training length, the loss growth there."""
    out = {metricnames.length_metric(split, length, sliding): _ppl(loss_at)}
    if growth:
        out[metricnames.growth_metric(split, length, sliding)] = loss_at - loss
    return out


def _ppl(loss: float) -> float:
    return math.exp(min(loss, 100.0))  # a diverged model's perplexity stays a (huge) finite number


@torch.no_grad()
def generate(model: DecoderOnlyLM, prompt: Sequence[int], max_new: int, *, temperature: float = 1.0,
             top_k: int | None = None, greedy: bool = False, eos_id: int | None = None,
             generator: torch.Generator | None = None) -> list[int]:
    """Continue ``prompt`` (ids, bos first) by up to ``max_new`` tokens through the KV cache: the prompt in
    one forward, then one position per step. Greedy takes the argmax; otherwise a sample from
    ``softmax(logits / temperature)`` restricted to the ``top_k`` most likely tokens (Fan et al. 2018).
    Stops at ``eos_id`` or at the model's last position."""
    if not prompt:
        raise ValueError("generate needs a prompt of at least one token (bos)")
    model.eval()
    device = model.generator.weight.device
    cache = model.init_cache()
    ids = torch.tensor([list(prompt)], dtype=torch.long, device=device)
    out: list[int] = []
    max_new = min(max_new, model.max_positions - len(prompt))
    logits = model(ids, cache=cache, start_pos=0)[0, -1]  # (V,)
    for _ in range(max(0, max_new)):
        nxt = _pick(logits.float(), temperature, top_k, greedy, generator)
        if eos_id is not None and nxt == eos_id:
            break
        out.append(nxt)
        step = torch.tensor([[nxt]], dtype=torch.long, device=device)
        if cache.length + 1 > model.max_positions:
            break
        logits = model(step, cache=cache, start_pos=cache.length)[0, -1]
    return out


def _pick(logits: torch.Tensor, temperature: float, top_k: int | None, greedy: bool,
          generator: torch.Generator | None) -> int:
    if greedy or temperature <= 0:
        return int(logits.argmax())
    scaled = logits / temperature
    if top_k is not None and top_k < scaled.numel():
        kth = scaled.topk(top_k).values[-1]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    probs = torch.softmax(scaled, dim=-1).cpu()
    return int(torch.multinomial(probs, 1, generator=generator))


def sample_texts(model: DecoderOnlyLM, data: LMData, count: int, max_new: int = 64) -> str:
    """Greedy continuations of the first words of ``count`` validation documents (the run's samples)."""
    tok = data.tokenizers
    part = data.documents["test"] if "test" in data.documents else data.documents["val"]
    lines = []
    for i in range(min(count, len(part.docs))):
        doc: list[int] = np.asarray(part.docs[i]).tolist()
        text = part.texts[i] if part.texts is not None else tok.decode_tgt(doc)
        head = doc[: max(1, min(len(doc) // 2, 16))]
        cont = generate(model, [tok.bos_id, *head], max_new, greedy=True, eos_id=tok.eos_id)
        lines += [f"PROMPT: {tok.decode_tgt(head)}", f"REF:    {text}", f"GEN:    {tok.decode_tgt(cont)}", ""]
    return "\n".join(lines)
