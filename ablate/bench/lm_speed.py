"""`ablate bench`'s decoder-only rows: training tokens/s and MFU of the decoder-only language model
(``model.arch: decoder_only``, ablate/engine/decoder_only.py) built from the bench spec's sizes, for the
spec's position scheme and every other registered one, on packed blocks, against the same matmul peak as the
encoder-decoder rows.

Model FLOPs of one step (``LM_FLOP_FORMULA``), as nanoGPT's and PaLM's MFU count them: 2 FLOPs per
multiply-accumulate, x3 for forward and backward, on every token of the blocks (packing leaves no
padding): ``6 * [N_tokens * (matmul weights of the layers + output projection) + 2 d L sum(T^2)]`` with
``T`` the block length and ``L`` the layers; the causal half of attention is credited like the
encoder-decoder count credits it (the full ``T^2``), so the two architectures' MFUs compare.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

import registry
from ablate.bench.train_speed import BenchConfig, log, sync
from ablate.engine.builders import build_lm
from ablate.engine.decoder_only import DecoderOnlyLM
from ablate.hardware import autocast_context
from ablate.spec.experiment import ModelSpec

LM_FLOP_FORMULA = ("6 * [tokens * (layer matmul weights + output projection) + 2d*L*sum(T^2)] over packed "
                   "blocks of T tokens, weights counted in the model as built")
BLOCK = 128  # tokens per packed block (the bench's training length)


def lm_spec(base: ModelSpec, **changes: Any) -> ModelSpec:
    """The bench spec's sizes and axes as a decoder-only model (its depth: the decoder's)."""
    data = {k: v for k, v in base.model_dump().items() if v is not None and k != "encoder_layers"}
    return ModelSpec.model_validate({**data, "arch": "decoder_only", **changes})


def lm_flops(model: DecoderOnlyLM, batch: int, block: int) -> float:
    """Model FLOPs of one training step on ``batch`` blocks of ``block`` tokens (LM_FLOP_FORMULA)."""
    per_token = sum(m.weight.numel() for m in model.decoder.modules() if isinstance(m, nn.Linear | nn.Conv1d))
    per_token += model.generator.weight.numel()
    d, layers = model.generator.weight.size(1), len(model.decoder.layers)
    tokens = batch * block
    return float(6 * (tokens * per_token + 2 * d * layers * batch * block * block))


def _blocks(cfg: BenchConfig, count: int, seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    rows = max(1, cfg.batch_tokens // BLOCK)
    return [(torch.randint(3, cfg.vocab, (rows, BLOCK), generator=g),
             torch.randint(3, cfg.vocab, (rows, BLOCK), generator=g)) for _ in range(count)]


def bench_lm(base: ModelSpec, cfg: BenchConfig, device: torch.device, precisions: list[str],
             peaks: dict[str, float]) -> list[dict[str, Any]]:
    """One row per (position scheme, precision): tokens/s (median over timed steps), step time, MFU."""
    schemes = [base.positions] + [n for n in registry.names("positions") if n != base.positions]
    batches = _blocks(cfg, cfg.batches, 0)
    rows: list[dict[str, Any]] = []
    for scheme in schemes:
        log(f"decoder-only: positions={scheme}")
        spec = lm_spec(base, positions=scheme, max_positions=max(base.max_positions, BLOCK))
        model = build_lm(spec, cfg.vocab, seed=0).to(device).train()
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
        flops = lm_flops(model, batches[0][0].size(0), BLOCK)
        for precision in precisions:
            times = []
            for i in range(cfg.warmup + cfg.iters):
                ids, targets = (t.to(device) for t in batches[i % len(batches)])
                sync(device)
                started = time.perf_counter()
                optimizer.zero_grad(set_to_none=True)
                with autocast_context(precision, device):
                    logits = model(ids)  # (B, T, V): one document per block, the causal kernel's path
                F.cross_entropy(logits.float().flatten(0, 1), targets.flatten()).backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                sync(device)
                if i >= cfg.warmup:
                    times.append(time.perf_counter() - started)
            step = statistics.median(times)
            label = "default" if scheme == base.positions else f"positions={scheme}"
            rows.append({"variant": label, "precision": precision, "block": BLOCK,
                         "tokens_per_s": ids.numel() / step, "step_ms": 1000 * step,
                         "mfu": flops / step / peaks[precision], "params": model.num_parameters()})
        del model, optimizer
    return rows


def lm_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The decoder-only rows of the bench table."""
    lines = ["", f"decoder-only (blocks of {BLOCK} tokens): {'variant':<18}{'prec':<6}{'tok/s':>10}"
             f"{'step ms':>9}{'MFU':>7}"]
    for r in rows:
        lines.append(f"{'':<36}{r['variant']:<18}{r['precision']:<6}{r['tokens_per_s']:>10,.0f}"
                     f"{r['step_ms']:>9.1f}{100 * r['mfu']:>6.1f}%")
    return lines
