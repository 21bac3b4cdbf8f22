"""Decoding measurement for ``ablate bench``: greedy / batched beam / per-sentence reference beam
speed, and the agreement of the two beams on a tiny trained model (method: ``ablate/bench/suite.py``)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ablate.bench.train_speed import BOS, EOS, PAD, QUICK_MODEL, BenchConfig, sync
from ablate.bench.tutorial_beam import beam_search_reference
from ablate.data.prepare import TokenBatcher, prepare_data
from ablate.engine.builders import build_model
from ablate.engine.decode import beam_search, greedy_decode, length_sorted_batches, step_budget
from ablate.spec.experiment import ExperimentSpec, ModelSpec

Budget = Callable[[torch.Tensor], torch.Tensor]  # source lengths (B,) -> decoding steps (B,)


def decode_batches(sources: list[list[int]], index: list[int], size: int, budget: Budget,
                   device: torch.device) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Length-sorted, right-padded source batches (as the evaluator builds them) with their step budgets."""
    return [(src.to(device), budget(src.ne(PAD).sum(1)))
            for _, src in length_sorted_batches(sources, index, size, PAD)]


@torch.no_grad()
def decode_all(fn: Callable[..., list[list[int]]], model: nn.Module, batches: list[Any], device: torch.device,
               **kw: Any) -> tuple[float, list[list[int]]]:
    """(sentences/s, hypotheses) of one decoding function over the batches."""
    model.eval()
    hyps: list[list[int]] = []
    sync(device)
    started = time.perf_counter()
    for src, max_len in batches:
        hyps += fn(model, src, BOS, EOS, max_len=max_len, **kw)
    sync(device)
    return sum(src.size(0) for src, _ in batches) / (time.perf_counter() - started), hyps


def bench_decode(model: nn.Module, sources: list[list[int]], cfg: BenchConfig, length_penalty: float,
                 device: torch.device) -> dict[str, Any]:
    """Sentences/s of greedy, batched beam 4 and the per-sentence reference beam at the bench dims.

    The model is untrained: it (almost) never picks eos, so every sentence decodes its source length
    + 1 steps, Multi30k-like output lengths. Its flat distributions make near-ties between hypotheses
    common, so the two beams' agreement is checked on a trained model (:func:`beam_agreement`).
    """
    every = list(range(len(sources)))
    subset = every[:: max(1, len(every) // cfg.reference_sentences)][: cfg.reference_sentences]
    fixed: Budget = lambda lens: lens + 1  # noqa: E731
    beam = {"beam": 4, "length_penalty": length_penalty}
    decode_all(greedy_decode, model, decode_batches(sources, every[: cfg.decode_batch], cfg.decode_batch,
                                                    fixed, device), device)  # warm-up
    greedy, hyps = decode_all(greedy_decode, model, decode_batches(sources, every, cfg.decode_batch, fixed,
                                                                   device), device)
    beam_all, _ = decode_all(beam_search, model, decode_batches(sources, every, cfg.decode_batch, fixed,
                                                                device), device, **beam)
    # The speed-up compares both beams on the same sentences in the same batches.
    few = decode_batches(sources, subset, cfg.decode_batch, fixed, device)
    reference, _ = decode_all(beam_search_reference, model, few, device, **beam)
    beam_few, _ = decode_all(beam_search, model, few, device, **beam)
    return {"greedy_sent_per_s": greedy, "beam4_sent_per_s": beam_all,
            "reference_beam4_sent_per_s": reference, "beam4_subset_sent_per_s": beam_few,
            "beam_speedup": beam_few / reference,
            "sentences": len(every), "reference_sentences": len(subset),
            "mean_output_tokens": statistics.mean(map(len, hyps))}


def beam_agreement(base: ModelSpec, cfg: BenchConfig, device: torch.device, out_dir: str) -> dict[str, Any]:
    """Batched beam 4 (KV cache) vs the per-sentence reference beam on a tiny model with the spec's
    components, trained on the synthetic copy task with Multi30k-like lengths (peaked distributions,
    eos at varied positions); the decoding budget is the spec's max_len rule."""
    spec = ExperimentSpec.model_validate({
        "name": "bench-agreement", "data": {
            "source": "synthetic", "max_len": cfg.max_len + 2, "batch_tokens": 512, "cache_dir": out_dir,
            "synthetic": {"task": "copy", "vocab_size": 16, "min_len": cfg.min_len, "max_len": cfg.max_len,
                          "train_size": 4000, "val_size": 8, "test_size": cfg.reference_sentences}},
        "model": base.model_dump() | QUICK_MODEL | {"dropout": 0.0, "shared_layer_norm": False,
                                                    "max_positions": 2 * cfg.max_len + 12}})
    data = prepare_data(spec)
    tok, threads = data.tokenizers, torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model: one thread is fastest, and immune to busy cores
    try:
        model = build_model(spec.model, tok.src_vocab_size, tok.tgt_vocab_size, PAD, seed=0).to(device)
        optimizer = torch.optim.Adam(model.parameters(), lr=3e-3, betas=(0.9, 0.98), eps=1e-9)
        batcher = TokenBatcher(data.splits["train"], spec.data.batch_tokens, 0)
        order = batcher.epoch_batches(0) + batcher.epoch_batches(1)
        for indices in order[: cfg.agreement_steps]:
            b = batcher.collate(indices).to(device)
            optimizer.zero_grad(set_to_none=True)
            logits = model(b.src, b.tgt_in)  # (B, T, V)
            F.cross_entropy(logits.flatten(0, 1), b.tgt_out.flatten(), ignore_index=PAD).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
        dspec = spec.eval.decode
        rule: Budget = lambda lens: step_budget(lens, dspec)  # noqa: E731 - the evaluator's own budget
        part = data.splits["test"]
        batches = decode_batches(part.src_ids, list(range(len(part.src_ids))), cfg.decode_batch, rule, device)
        beam = {"beam": 4, "length_penalty": dspec.length_penalty}
        _, batched = decode_all(beam_search, model, batches, device, **beam)
        _, reference = decode_all(beam_search_reference, model, batches, device, **beam)
    finally:
        torch.set_num_threads(threads)
    order_ = sorted(range(len(part.src_ids)), key=lambda i: len(part.src_ids[i]))  # decode_batches' order
    exact = sum(h == part.tgt_ids[i] for h, i in zip(batched, order_, strict=True))
    mismatches = sum(a != b for a, b in zip(batched, reference, strict=True))
    return {"identical": mismatches == 0, "mismatches": mismatches, "agreement_sentences": len(batched),
            "agreement_model_steps": cfg.agreement_steps, "agreement_exact_match": exact / len(batched)}


