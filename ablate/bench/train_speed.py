"""Train-step measurement for ``ablate bench``: the torch.nn.Transformer baseline, Multi30k-like
batches, the model-FLOP count, peak memory and interleaved step timers (method: ``ablate/bench/suite.py``)."""

from __future__ import annotations

import ctypes
import gc
import math
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

import registry
from ablate.data.prepare import Split, TokenBatcher
from ablate.engine import cpu_gemm
from ablate.engine.builders import build_model
from ablate.engine.encoder_decoder import Seq2SeqTransformer
from ablate.hardware import autocast_context
from ablate.spec import metricnames
from ablate.spec.experiment import ModelSpec, format_mask_fill, parse_mask_fill
from ablate.spec.model import drop_unset_options, options_of

PAD, BOS, EOS = 0, 1, 2
FLOP_FORMULA = ("6 * [S * (encoder matmul weights + cross-attention K/V weights) + T * (other decoder "
                "matmul weights + output projection) + 2d*(Le*sum s^2 + Ld*sum(t^2+t*s))] on non-pad tokens, "
                "weights counted in the model as built")


@dataclass(frozen=True)
class BenchConfig:
    vocab: int = 8000  # Multi30k-sized BPE vocabulary (the synthetic task's range is capped at 10000)
    batch_tokens: int = 4096
    min_len: int = 8  # Multi30k-like sentence lengths in tokens
    max_len: int = 30
    batches: int = 4  # distinct batches cycled through the timed steps
    warmup: int = 2
    iters: int = 6
    matmul_n: int = 2048
    overhead_steps: int = 12  # in 4 chunks
    agreement_steps: int = 300  # training of the tiny model the two beams must agree on
    decode_sentences: int = 64
    reference_sentences: int = 16
    decode_batch: int = 32
    quick: bool = False


BUILTIN_MODEL = {"d_model": 256, "heads": 4, "encoder_layers": 3, "decoder_layers": 3, "d_ff": 1024}
QUICK_MODEL = {"d_model": 32, "heads": 2, "encoder_layers": 1, "decoder_layers": 1, "d_ff": 64}
QUICK = BenchConfig(vocab=24, batch_tokens=256, batches=2, warmup=1, iters=3, matmul_n=256, overhead_steps=20,
                    decode_sentences=16, reference_sentences=8, decode_batch=8, quick=True)



def log(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- the baseline
class TorchTransformer(nn.Module):
    """``torch.nn.Transformer`` with the tutorials' wrapping: embeddings x sqrt(d), sinusoidal positions,
    dropout, output projection; key-padding masks on every attention and a causal mask on the decoder."""

    pe: torch.Tensor  # (max_positions, d) buffer

    def __init__(self, spec: ModelSpec, src_vocab: int, tgt_vocab: int, pad_id: int = PAD) -> None:
        super().__init__()
        d = spec.d_model
        self.pad_id, self.scale = pad_id, math.sqrt(d)
        self.src_embed = nn.Embedding(src_vocab, d, padding_idx=pad_id)
        self.tgt_embed = nn.Embedding(tgt_vocab, d, padding_idx=pad_id)
        pos = torch.arange(spec.max_positions).unsqueeze(1)
        freq = torch.exp(torch.arange(0, d, 2) * (-math.log(10000.0) / d))
        pe = torch.zeros(spec.max_positions, d)
        pe[:, 0::2], pe[:, 1::2] = torch.sin(pos * freq), torch.cos(pos * freq)
        self.register_buffer("pe", pe, persistent=False)  # (max_positions, d)
        self.drop = nn.Dropout(spec.dropout)
        with warnings.catch_warnings():  # "enable_nested_tensor ... norm_first": irrelevant in training
            warnings.simplefilter("ignore")
            self.core = nn.Transformer(d, spec.heads, spec.encoder_layers, spec.decoder_layers, spec.d_ff,
                                       spec.dropout, batch_first=True, norm_first=spec.residual == "pre_norm")
        for module in self.core.modules():
            if isinstance(module, nn.MultiheadAttention):
                module.dropout = spec.attention_dropout  # nn.Transformer ties it to `dropout`; ours does not
        self.out = nn.Linear(d, tgt_vocab)

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        src_pad, tgt_pad = src.eq(self.pad_id), tgt_in.eq(self.pad_id)  # (B, S), (B, T) True at pad
        t = tgt_in.size(1)
        causal = torch.ones(t, t, dtype=torch.bool, device=src.device).triu(1)  # True = may not attend
        x = self.drop(self.src_embed(src) * self.scale + self.pe[: src.size(1)])  # (B, S, d)
        y = self.drop(self.tgt_embed(tgt_in) * self.scale + self.pe[:t])  # (B, T, d)
        h = self.core(x, y, tgt_mask=causal, src_key_padding_mask=src_pad, tgt_key_padding_mask=tgt_pad,
                      memory_key_padding_mask=src_pad, tgt_is_causal=True)
        return self.out(h)  # (B, T, V)


# ---------------------------------------------------------------- inputs
def synthetic_batches(cfg: BenchConfig, seed: int = 0) -> tuple[list[Any], float]:
    """Batches cut by the project's TokenBatcher from Multi30k-like pairs; their target padding fraction."""
    g = torch.Generator().manual_seed(seed)
    n = max(64, 4 * cfg.batches * cfg.batch_tokens // cfg.min_len)
    span = cfg.max_len - cfg.min_len
    # Right-skewed lengths (mean ~ min + 0.3 span), like Multi30k's ~13-token sentences.
    src_len = cfg.min_len + torch.binomial(torch.full((n,), float(span)), torch.full((n,), 0.3), generator=g)
    tgt_len = (src_len + torch.randint(-3, 4, (n,), generator=g)).clamp(cfg.min_len, cfg.max_len)
    ids = lambda k: torch.randint(4, cfg.vocab, (int(k),), generator=g).tolist()  # noqa: E731
    split = Split(src_ids=[ids(k) for k in src_len], tgt_ids=[ids(k) for k in tgt_len],
                  src_text=[""] * n, tgt_text=[""] * n)
    batcher = TokenBatcher(split, cfg.batch_tokens, seed, shuffle=True)
    batches = [batcher.collate(i) for i in batcher.epoch_batches(0)[: cfg.batches]]
    real = sum(int(b.tgt_out.ne(PAD).sum()) for b in batches)
    return batches, 1.0 - real / sum(b.tgt_out.numel() for b in batches)


def _matmul_weights(module: nn.Module, skip: tuple[str, ...] = ()) -> int:
    """Multiply-accumulates per token of the Linear / Conv1d(kernel 1) weights under ``module``."""
    return sum(m.weight.numel() for name, m in module.named_modules()
               if isinstance(m, nn.Linear | nn.Conv1d) and not any(name.endswith(s) for s in skip))


def model_macs(model: nn.Module) -> tuple[int, int, int, int, int]:
    """(MACs per source token, MACs per target token, d_model, encoder layers, decoder layers) of a built
    ablate model: every matmul weight where it runs (the decoder's cross-attention K/V on source tokens)."""
    assert isinstance(model, Seq2SeqTransformer)
    kv: list[torch.Tensor] = [layer.cross_attn.kv.weight for layer in model.decoder.layers]  # type: ignore[union-attr,misc]
    cross_kv = sum(w.numel() for w in kv)
    per_src = _matmul_weights(model.encoder) + cross_kv
    per_tgt = _matmul_weights(model.decoder, skip=("cross_attn.kv",)) + model.generator.weight.numel()
    d = model.generator.weight.size(1)
    return per_src, per_tgt, d, len(model.encoder.layers), len(model.decoder.layers)


def train_flops(src: torch.Tensor, tgt_in: torch.Tensor, model: nn.Module) -> float:
    """Model FLOPs of one training step on a batch, from the model as built (FLOP_FORMULA): 2 FLOPs per
    multiply-accumulate, times 3 for forward and backward, on real (non-pad) tokens only."""
    per_src, per_tgt, d, le, ld = model_macs(model)
    s = src.ne(PAD).sum(1).double()  # (B,) real source lengths
    t = tgt_in.ne(PAD).sum(1).double()  # (B,) real target lengths
    dense = s.sum() * per_src + t.sum() * per_tgt
    attention = 2 * d * (le * (s * s).sum() + ld * (t * t + t * s).sum())  # QK^T and AV per layer
    return float(6 * (dense + attention))


# ---------------------------------------------------------------- measuring
def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _status_mb(field: str) -> float:
    """A /proc/self/status memory field (VmRSS, VmHWM) in MiB; 0 where there is no /proc."""
    try:
        line = next(x for x in Path("/proc/self/status").read_text().splitlines() if x.startswith(field))
        return int(line.split()[1]) / 1024
    except (OSError, StopIteration):
        return 0.0


MEMORY_METHOD = {"cuda": "torch.cuda.max_memory_allocated above the allocation before the model was built",
                 "cpu": "RSS high-water mark (VmHWM, reset through /proc/self/clear_refs) above the RSS "
                        "before the model was built (after malloc_trim)"}


def memory_level(device: torch.device) -> float:
    """Memory in use now (MiB), with freed memory handed back so that later growth shows."""
    gc.collect()
    if device.type == "cuda":
        sync(device)
        return torch.cuda.memory_allocated(device) / 2**20
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)  # freed heap pages back to the OS: the RSS counts live memory
    except (OSError, AttributeError):
        pass
    return _status_mb("VmRSS")


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return
    try:
        Path("/proc/self/clear_refs").write_text("5")  # "5" resets VmHWM (Linux >= 4.0)
    except OSError:
        MEMORY_METHOD["cpu"] = "process RSS high-water mark (not resettable here) above the RSS at the start"


def peak_level(device: torch.device) -> float:
    return torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else _status_mb("VmHWM")


def matmul_peak(dtype: torch.dtype, n: int, device: torch.device) -> float:
    """Best FLOP/s of an n x n @ n x n matmul: this machine's practical peak for the dtype, the faster of
    torch's own product and, where ablate's Linear layers use it, oneDNN's (``ablate/engine/cpu_gemm.py``:
    on a CPU where MKL leaves AVX-512 unused, torch.matmul's figure is half the machine's)."""
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    products: list[Callable[[], torch.Tensor]] = [lambda: torch.matmul(a, b)]
    if cpu_gemm.takes_onednn(a, b):
        products.append(lambda: cpu_gemm.onednn_gemm_nt(a, b, None))
    best = 0.0
    for product in products:
        times = []
        for _ in range(7):
            sync(device)
            started = time.perf_counter()
            product()
            sync(device)
            times.append(time.perf_counter() - started)
        best = max(best, 2 * n**3 / min(times[2:]))  # the first calls pay for allocation and kernel selection
    return best


class StepTimer:
    """One model + Adam, stepped on the bench batches: the trainer's step (autocast, loss in fp32, clip 1.0,
    Adam), each step synchronised. Built and warmed up on creation (peak memory per precision measured
    there), then timed one step at a time so that all models' steps can be interleaved."""

    def __init__(self, build: Callable[[], nn.Module], batches: list[Any], spec: ModelSpec, vocab: int,
                 device: torch.device, precisions: list[str], warmup: int) -> None:
        self.device, self.spec, self.vocab = device, spec, vocab
        self.data = [(b.src.to(device), b.tgt_in.to(device), b.tgt_out.to(device)) for b in batches]
        self.tokens = [int(out.ne(PAD).sum()) for _, _, out in self.data]
        base = memory_level(device)
        torch.manual_seed(0)
        self.model = build().to(device).train()
        self.flops = [train_flops(src, tgt_in, self._counted()) for src, tgt_in, _ in self.data]
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
        self.params = sum(p.numel() for p in self.model.parameters())
        self.peak_mb: dict[str, float] = {}
        self.timed: dict[str, list[tuple[float, float, float]]] = {p: [] for p in precisions}
        for p in precisions:  # peak of model + optimizer state + one step, above the level before the build
            reset_peak(device)
            for i in range(max(1, warmup)):
                self.step(p, i)
            self.peak_mb[p] = max(0.0, peak_level(device) - base)

    def _counted(self) -> nn.Module:
        """The model whose matmul weights are counted: torch.nn.Transformer's baseline is counted as the
        ablate model of the same spec (the same matmuls)."""
        if isinstance(self.model, Seq2SeqTransformer):
            return self.model
        return build_model(self.spec, self.vocab, self.vocab, PAD, 0)

    def step(self, precision: str, i: int) -> float:
        src, tgt_in, tgt_out = self.data[i % len(self.data)]
        sync(self.device)
        started = time.perf_counter()
        self.optimizer.zero_grad(set_to_none=True)
        with autocast_context(precision, self.device):
            logits = self.model(src, tgt_in)  # (B, T, V)
        loss = F.cross_entropy(logits.float().flatten(0, 1), tgt_out.flatten(), ignore_index=PAD)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        sync(self.device)
        return time.perf_counter() - started

    def timed_step(self, precision: str, i: int) -> None:
        seconds, k = self.step(precision, i), i % len(self.data)
        self.timed[precision].append((self.tokens[k] / seconds, self.flops[k] / seconds, seconds))

    def result(self, precision: str) -> dict[str, float]:
        runs = self.timed[precision]
        return {"tokens_per_s": statistics.median(r[0] for r in runs),
                "flops_per_s": statistics.median(r[1] for r in runs),
                "step_ms": 1000 * statistics.median(r[2] for r in runs),
                metricnames.PEAK_MEMORY: self.peak_mb[precision], "params": self.params}


def bench_training(base: ModelSpec, cfg: BenchConfig, device: torch.device, precisions: list[str],
                   batches: list[Any]) -> list[tuple[str, StepTimer]]:
    """torch.nn.Transformer, the spec's model and every axis variant; timed steps interleaved round-robin
    (model x precision), so that a change of machine load hits every row alike."""
    v = cfg.vocab
    configs: list[tuple[str, Callable[[], nn.Module], ModelSpec]] = [
        ("torch.nn.Transformer", lambda: TorchTransformer(base, v, v), base)]
    configs += [(label, partial(build_model, m, v, v, PAD, 0), m) for label, m in axis_variants(base)]
    # A throwaway first: process-wide one-time allocations (kernel caches, thread pools) are no row's memory.
    StepTimer(configs[1][1], batches[:1], base, v, device, precisions, 1)
    timers = []
    for label, build, mspec in configs:
        log(f"build + warm up: {label}")
        timers.append((label, StepTimer(build, batches, mspec, v, device, precisions, cfg.warmup)))
    for i in range(cfg.iters):
        log(f"timed round {i + 1}/{cfg.iters}")
        for _, timer in timers:
            for p in precisions:
                timer.timed_step(p, i)
    return timers


# ---------------------------------------------------------------- variants
def axis_variants(base: ModelSpec) -> list[tuple[str, ModelSpec]]:
    """The spec's model, then one model per registered variant of each declared axis (the other axes as
    the spec's; the options of the replaced variant dropped, the new variant's at their defaults). A
    sub-axis (activation) is varied only under a parent variant that takes it."""
    out = [("default", base)]
    current = drop_unset_options(base.model_dump())
    for axis in registry.model_axes():
        if axis.parent is not None:
            takers = {e.name for e in registry.REGISTRY.entries(axis.parent) if axis.kind in e.takes}
            if current[axis.parent] not in takers:
                continue
        for name in registry.names(axis.kind):
            chosen = getattr(base, axis.kind)
            is_mask = axis.kind == "mask"
            same = format_mask_fill(parse_mask_fill(name)) == chosen if is_mask else name == chosen
            if same:
                continue
            data = dict(current)
            for option in options_of(axis):  # the old variant's options go; `always` ones back to default
                if option.always:
                    data[option.name] = option.default
                else:
                    data.pop(option.name, None)
            # an option the new variant requires (muP's base width) at its declared example
            required = {o.name: o.example for o in registry.REGISTRY.entry(axis.kind, name).options
                        if o.required}
            out.append((f"{axis.kind}={name}",
                        ModelSpec.model_validate(data | {axis.kind: name} | required)))
    return out



