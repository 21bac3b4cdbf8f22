"""Greedy and beam-search decoding.

Conventions shared by every function here: ``src`` is (B, S) right-padded with ``model.pad_id``;
outputs are token lists without bos/eos; ``max_len`` (an int, or a LongTensor with one value per
sentence) is the most decoding steps a sentence gets, one token per step, eos included, capped at
the model's ``max_positions``. Beam hypotheses are ranked by ``logprob / lp(len)`` with the GNMT
length penalty ``lp(len) = ((5 + len) / 6) ** alpha`` (Wu et al. 2016), ``len`` counting the eos of a
finished hypothesis.

Beam rules (the same in :func:`beam_search` and in the tutorials' one-sentence-at-a-time beam that the
benchmark times it against, ``ablate.bench.tutorial_beam``, so their outputs are identical): each step
takes the 2k best (hypothesis, token) extensions by summed log-prob; an eos among the first k of them
finishes that hypothesis; the first k non-eos extensions stay alive. A sentence stops when the best
extension of the step is eos (OpenNMT style: with alpha = 0 no alive hypothesis can beat it any more, as
log-probs only fall) or at its max_len, where its alive hypotheses are finished without eos; the best-
scoring finished one is returned. With k = 1 this is exactly greedy decoding, whatever alpha. (Stopping
at k finished hypotheses instead, as fairseq and HF's early stopping do, can return a worse sequence
than greedy: k short, unlikely eos endings may fill the list before the likely hypothesis ends: on the
trained copy model of tests/engine/test_decode.py that rule lost 1.37 nats to greedy on one sentence of
twelve.)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import Tensor

from ablate.engine.encoder_decoder import Seq2SeqTransformer
from ablate.spec.experiment import DecodeSpec

MaxLen = int | Tensor


@contextmanager
def inference(model: Seq2SeqTransformer) -> Iterator[None]:
    """Eval mode and no grad for the duration; the model's previous mode is restored after."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        model.train(was_training)


def step_limits(model: Seq2SeqTransformer, max_len: MaxLen, batch: int) -> Tensor:
    """(B,) long on CPU: steps per sentence, capped at max_positions (positions 0..limit-1 get fed)."""
    if isinstance(max_len, Tensor):
        limits = max_len.detach().to("cpu", torch.long).reshape(-1)
        if limits.numel() != batch:
            raise ValueError(f"max_len has {limits.numel()} values for {batch} sentences")
    else:
        limits = torch.full((batch,), int(max_len), dtype=torch.long)
    return limits.clamp(0, model.max_positions)


def gnmt_length_penalty(length: int, alpha: float) -> float:
    """GNMT: ((5 + length) / 6) ** alpha."""
    return ((5.0 + length) / 6.0) ** alpha


def greedy_decode(
    model: Seq2SeqTransformer, src: Tensor, bos_id: int, eos_id: int, max_len: MaxLen
) -> list[list[int]]:
    """Argmax decoding of a batch with the incremental KV cache."""
    B = src.size(0)
    limits = step_limits(model, max_len, B)
    steps = int(limits.max()) if B else 0
    with inference(model):
        enc = model.encode(src)
        cache = model.init_cache(enc)
        tokens = torch.full((B, 1), bos_id, dtype=torch.long, device=src.device)
        generated = torch.full((B, max(steps, 1)), eos_id, dtype=torch.long)
        lengths = limits.clone()  # tokens kept per sentence; the limit unless eos comes first
        alive = limits > 0
        for t in range(steps):
            nxt = model.decode(tokens, enc, cache, start_pos=t)[:, -1].argmax(-1)  # (B,)
            nxt_cpu = nxt.cpu()
            generated[:, t] = nxt_cpu
            hit_eos = alive & nxt_cpu.eq(eos_id)
            lengths[hit_eos] = t
            alive &= ~hit_eos & (t + 1 < limits)
            if not alive.any():
                break
            tokens = nxt[:, None]
    return [generated[b, : lengths[b]].tolist() for b in range(B)]


def beam_search(
    model: Seq2SeqTransformer,
    src: Tensor,
    bos_id: int,
    eos_id: int,
    beam: int,
    length_penalty: float,
    max_len: MaxLen,
) -> list[list[int]]:
    """Beam search batched over sentences x beams: encoder once, incremental KV cache, finished
    sentences dropped from the batch (the cache rows go with them). The source side (cross-attention
    K/V, padding mask) is kept once per sentence and shared by its beams; the first step runs one row
    per sentence, as all k beams still hold the same hypothesis."""
    k, alpha = beam, length_penalty
    B = src.size(0)
    limits = step_limits(model, max_len, B)
    finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(B)]
    with inference(model):
        active = (limits > 0).nonzero().squeeze(1)  # original sentence ids still decoding
        if active.numel() == 0:
            return [[] for _ in range(B)]
        enc = model.encode(src.index_select(0, active.to(src.device)))
        cache = model.init_cache(enc)  # one row per sentence: its source side stays that way
        device = enc.memory.device
        limits = limits[active]
        n = active.numel()
        scores = torch.full((n, k), float("-inf"), device=device)
        scores[:, 0] = 0.0  # one live hypothesis per sentence at the start
        seqs = torch.zeros((n * k, 0), dtype=torch.long, device=device)  # (n*k, t) tokens so far
        tokens = torch.full((n, 1), bos_id, dtype=torch.long, device=device)  # step 0: one row per sentence
        rank = torch.arange(2 * k, device=device)
        for t in range(int(limits.max())):
            hidden = model.decode(tokens, enc, cache, start_pos=t, project=False)[:, -1]  # (rows, d)
            top_s, top_i, V = _best_extensions(model, hidden, scores, first_step=t == 0)
            origin, tok = top_i // V, top_i % V
            is_eos = tok.eq(eos_id)
            # Finished: eos among the first k candidates (few: a python loop is fine).
            hits = (is_eos & (rank < k) & torch.isfinite(top_s)).nonzero().tolist()
            for j, r in hits:
                hyp = seqs[j * k + int(origin[j, r])].tolist()
                finished[int(active[j])].append((float(top_s[j, r]) / gnmt_length_penalty(t + 1, alpha), hyp))
            # Alive: the first k non-eos candidates in rank order (there are always >= k of them).
            pick = (is_eos.long() * (2 * k) + rank).argsort(dim=1)[:, :k]  # (n, k)
            scores = top_s.gather(1, pick)
            new_tok = tok.gather(1, pick)
            rows = (torch.arange(n, device=device)[:, None] * k + origin.gather(1, pick)).view(-1)
            seqs = torch.cat((seqs.index_select(0, rows), new_tok.view(-1, 1)), dim=1)
            at_limit = (t + 1 >= limits).tolist()
            for j in [j for j, flag in enumerate(at_limit) if flag]:
                for r in range(k):
                    s = float(scores[j, r])
                    if math.isfinite(s):
                        hyp = seqs[j * k + r].tolist()
                        finished[int(active[j])].append((s / gnmt_length_penalty(t + 1, alpha), hyp))
            best_is_eos = (is_eos[:, 0] & torch.isfinite(top_s[:, 0])).tolist()
            keep = [j for j in range(n) if not at_limit[j] and not best_is_eos[j]]
            if not keep:
                break
            keep_t = torch.tensor(keep, device=device)
            # Beam origins of the kept sentences; finished sentences leave the batch (and the source side).
            kept_rows = rows.view(n, k).index_select(0, keep_t).view(-1)
            cache.select_beams(kept_rows // k if t == 0 else kept_rows,  # step 0's cache: a row per sentence
                               None if len(keep) == n else keep_t, beams=k)
            seqs = seqs.view(n, k, -1).index_select(0, keep_t).view(len(keep) * k, -1)
            scores = scores.index_select(0, keep_t)
            tokens = new_tok.index_select(0, keep_t).view(-1, 1)
            active, limits = active[keep_t.cpu()], limits[keep_t.cpu()]
            n = len(keep)
    return [best_finished(f) for f in finished]


VOCAB_CHUNK = 64  # sentences scored at a time: 256 beam-4 rows of logits (8 MB at V=8000) stay in cache


def _best_extensions(model: Seq2SeqTransformer, hidden: Tensor, scores: Tensor,
                     first_step: bool) -> tuple[Tensor, Tensor, int]:
    """The 2k best (hypothesis, token) extensions per sentence by summed log-prob: (n, 2k) scores and
    indices into the sentence's k*V candidates (best first), and V.

    ``hidden`` has k rows per sentence, or one on the first step (every beam still holds the same
    hypothesis: projected once, scored k times). Sentences are scored VOCAB_CHUNK at a time: the
    logits, log-softmax and top-k of a chunk stay in cache (faster than over the whole batch: `ablate
    bench` times decoding), and the numbers are the same: each sentence's candidates never mix with another's.
    """
    n, k = scores.shape
    per = 1 if first_step else k
    best: list[tuple[Tensor, Tensor]] = []
    V = 0
    for a in range(0, n, VOCAB_CHUNK):
        b = min(n, a + VOCAB_CHUNK)
        logp = F.log_softmax(model.logits(hidden[a * per : b * per]).float(), dim=-1)
        if first_step:
            logp = logp.repeat_interleave(k, dim=0)
        V = logp.size(-1)
        cand = logp.add_(scores[a:b].reshape(-1, 1)).view(b - a, k * V)  # in place: no second buffer
        best.append(cand.topk(2 * k, dim=1))
    if len(best) == 1:
        return best[0][0], best[0][1], V
    return torch.cat([s for s, _ in best]), torch.cat([i for _, i in best]), V


def best_finished(finished: list[tuple[float, list[int]]]) -> list[int]:
    if not finished:
        return []
    return max(finished, key=lambda f: f[0])[1]  # first of equals wins, in both implementations


def sequence_logprob(
    model: Seq2SeqTransformer, src: Tensor, hyp: list[int], bos_id: int, eos_id: int
) -> float:
    """Model log-probability of ``hyp`` followed by eos, given ``src`` (1, S)."""
    device = src.device
    tgt_in = torch.tensor([[bos_id, *hyp]], dtype=torch.long, device=device)
    tgt_out = torch.tensor([[*hyp, eos_id]], dtype=torch.long, device=device)
    with inference(model):
        logp = F.log_softmax(model(src, tgt_in).float(), dim=-1)  # (1, T, V)
        return float(logp.gather(2, tgt_out[..., None]).sum())


def length_sorted_batches(sources: Sequence[Sequence[int]], index: Iterable[int], size: int, pad_id: int
                          ) -> Iterator[tuple[list[int], Tensor]]:
    """The sentences ``index`` names, shortest first so that batches carry little padding, in batches of
    ``size``: (their indices into ``sources``, right-padded source ids (B, S) on the CPU)."""
    order = sorted(index, key=lambda i: len(sources[i]))
    for start in range(0, len(order), size):
        chunk = order[start:start + size]
        src = torch.full((len(chunk), max(len(sources[i]) for i in chunk)), pad_id, dtype=torch.long)
        for row, i in enumerate(chunk):
            src[row, :len(sources[i])] = torch.tensor(sources[i], dtype=torch.long)
        yield chunk, src


def step_budget(src_len: Tensor, decode_spec: DecodeSpec) -> Tensor:
    """Decoding steps per sentence: floor(max_len_a * source length) + max_len_b."""
    return (decode_spec.max_len_a * src_len.double()).floor().long() + decode_spec.max_len_b


def decode_batch(
    model: Seq2SeqTransformer, src: Tensor, decode_spec: DecodeSpec, bos_id: int, eos_id: int
) -> list[list[int]]:
    """Decode as the spec says, each sentence within its :func:`step_budget`."""
    max_len = step_budget(src.ne(model.pad_id).sum(1).cpu(), decode_spec)
    if decode_spec.strategy == "greedy":
        return greedy_decode(model, src, bos_id, eos_id, max_len)
    return beam_search(model, src, bos_id, eos_id, decode_spec.beam, decode_spec.length_penalty, max_len)
