"""`ablate bench`'s decoding-memory rows: the KV cache of the decoder-only model for every key/value head
count that divides the bench spec's heads (``model.kv_heads``: multi-head, grouped-query and multi-query
attention, Ainslie et al. 2023; Shazeer 2019), measured, not computed.

For each count, the same untrained model sizes decode ``DECODE_TOKENS`` tokens greedily for ``ROWS`` rows
through :class:`~ablate.engine.decoder_only.LMCache`; the row reports the bytes the cache holds then
(``LMCache.nbytes``: every layer's keys and values), per token and per row, its share of multi-head
attention's, the parameters, and the decoding speed (tokens per second over the timed steps, the prompt
excluded). The cache's bytes are exact (a tensor's elements times their size); the speed is this
machine's and needs a quiet machine like every other row of the bench.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch

from ablate.bench.lm_speed import lm_spec
from ablate.bench.train_speed import BenchConfig, log, sync
from ablate.engine.builders import build_lm
from ablate.spec.experiment import ModelSpec

DECODE_TOKENS = 128  # tokens decoded one at a time after a one-token prompt
ROWS = 8  # rows decoded together (a batch of prompts)


@torch.no_grad()
def _decode(model: torch.nn.Module, rows: int, tokens: int, vocab: int, device: torch.device
            ) -> tuple[int, float]:
    """(cache bytes after ``tokens`` steps, seconds of the steps) for greedy decoding of ``rows`` rows."""
    cache = model.init_cache()  # type: ignore[operator]
    ids = torch.randint(3, vocab, (rows, 1), generator=torch.Generator().manual_seed(0)).to(device)
    logits = model(ids, cache=cache, start_pos=0)
    sync(device)
    started = time.perf_counter()
    for t in range(1, tokens):
        ids = logits[:, -1:].argmax(-1)  # (rows, 1)
        logits = model(ids, cache=cache, start_pos=t)
    sync(device)
    return int(cache.nbytes), time.perf_counter() - started


def bench_kv_cache(base: ModelSpec, cfg: BenchConfig, device: torch.device) -> list[dict[str, Any]]:
    """One row per kv_heads dividing ``base.heads``, most heads (MHA) first."""
    counts = [n for n in range(base.heads, 0, -1) if base.heads % n == 0]
    rows: list[dict[str, Any]] = []
    tokens = min(DECODE_TOKENS, base.max_positions)
    mha_bytes = 0
    for kv in counts:
        log(f"decoder-only KV cache: kv_heads={kv}")
        spec = lm_spec(base, kv_heads=kv, max_positions=max(base.max_positions, tokens))
        model = build_lm(spec, cfg.vocab, seed=0).to(device).eval()
        times, nbytes = [], 0
        for _ in range(max(1, cfg.iters // 4)):
            nbytes, seconds = _decode(model, ROWS, tokens, cfg.vocab, device)
            times.append(seconds)
        mha_bytes = mha_bytes or nbytes
        rows.append({"kv_heads": kv, "heads": base.heads, "cache_bytes": nbytes,
                     "bytes_per_token": nbytes / (ROWS * tokens),
                     "per_token_formula": model.kv_cache_bytes_per_token(),
                     "fraction_of_mha": nbytes / mha_bytes,
                     "decode_tokens_per_s": ROWS * (tokens - 1) / statistics.median(times),
                     "params": model.num_parameters(), "rows": ROWS, "tokens": tokens})
        del model
    return rows


def kv_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The KV-cache rows of the bench table."""
    if not rows:
        return []
    first = rows[0]
    lines = ["", f"decoder-only KV cache ({first['rows']} rows x {first['tokens']} tokens, greedy, fp32): "
             f"{'kv_heads':>8}{'cache KB':>10}{'B/token':>9}{'vs MHA':>8}{'tok/s':>10}{'params':>12}"]
    for r in rows:
        lines.append(f"{'':<62}{r['kv_heads']:>8}{r['cache_bytes'] / 1024:>10.1f}{r['bytes_per_token']:>9.0f}"
                     f"{r['fraction_of_mha']:>8.3f}{r['decode_tokens_per_s']:>10,.0f}{r['params']:>12,}")
    return lines
