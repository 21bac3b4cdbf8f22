"""The shared AMP trainer: one loop for every variant.

Reads like nanoGPT's train.py: autocast in plain sight, a GradScaler only for
fp16, ``unscale_`` before clipping, no callback framework. Everything a resume
needs (model, optimizer, scheduler, scaler, RNG states, data position, step,
pending metrics) goes into one checkpoint written atomically, so a run killed
at any moment and restarted ends exactly where an uninterrupted run ends.
"""

from __future__ import annotations

import math
import os
import random
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager as ContextManager
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ablate.data import Batch, PreparedData, TokenBatcher
from ablate.evaluate import evaluate
from ablate.hardware import resolve_precision
from ablate.model import Seq2SeqTransformer
from ablate.spec import ExperimentSpec, TrainSpec

EvalHook = Callable[[int, dict[str, float]], bool]  # (step, metrics) -> True to stop the run (pruned)
CHECKPOINT_VERSION = 1


class MetricSink(Protocol):
    def log_metrics(self, metrics: dict[str, float], step: int) -> None: ...


# ---------------------------------------------------------------- precision
def autocast_context(precision: str, device: torch.device) -> ContextManager[Any]:
    if precision == "fp32":
        return nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)


# ---------------------------------------------------------------- optimisation
def build_optimizer(model: nn.Module, spec: TrainSpec) -> torch.optim.Optimizer:
    opt = spec.optimizer
    cls = torch.optim.AdamW if opt.name == "adamw" else torch.optim.Adam
    return cls(model.parameters(), lr=opt.lr, betas=opt.betas, eps=opt.eps, weight_decay=opt.weight_decay)


def lr_factor(step: int, spec: TrainSpec) -> float:
    """Multiplier of the base lr at optimizer step `step` (0-based).

    inverse_sqrt is Noam's schedule normalised to peak at 1.0 after warmup:
    min((s+1)/w, sqrt(w/(s+1))), so `optimizer.lr` is the peak learning rate.
    """
    sched = spec.schedule
    warmup = sched.warmup_steps
    s = step + 1
    if sched.name == "constant":
        return min(1.0, s / warmup) if warmup else 1.0
    if sched.name == "inverse_sqrt":
        if warmup == 0:
            return 1.0 / math.sqrt(s)
        return min(s / warmup, math.sqrt(warmup / s))
    # cosine decays to min_lr_ratio at max_steps (or stays at the floor beyond it)
    if warmup and s <= warmup:
        return s / warmup
    total = max(spec.max_steps or s, warmup + 1)
    progress = min(1.0, (s - warmup) / max(1, total - warmup))
    floor = sched.min_lr_ratio
    return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))


# ---------------------------------------------------------------- state
@dataclass
class TrainState:
    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0  # next batch index (in this rank's list) to consume
    first_loss: float | None = None
    best_value: float | None = None
    bad_evals: int = 0
    train_seconds: float = 0.0
    target_tokens: int = 0
    # The logging window lives in the state so that a resumed run logs the same averages.
    window_steps: int = 0
    window_loss: float = 0.0
    window_tokens: int = 0
    window_seconds: float = 0.0
    pending: list[tuple[int, dict[str, float]]] = field(default_factory=list)  # metrics not yet flushed
    history: list[tuple[int, dict[str, float]]] = field(default_factory=list)  # every evaluation
    train_curve: list[tuple[int, float]] = field(default_factory=list)  # (step, mean train loss) per window
    run_id: str | None = None


@dataclass
class TrainOutcome:
    status: str  # finished | diverged | pruned | killed
    state: TrainState
    reason: str = ""


def rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        # as plain types: weights_only loading refuses numpy arrays
        "numpy": _numpy_state_plain(),
        "python": random.getstate(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _numpy_state_plain() -> tuple[str, list[int], int, int, float]:
    name, keys, pos, has_gauss, cached = np.random.get_state()  # type: ignore[misc]
    return str(name), [int(k) for k in keys], int(pos), int(has_gauss), float(cached)


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(path: Path, payload: dict[str, Any]) -> None:
    """Write atomically: a kill mid-write leaves the previous checkpoint intact."""
    path.parent.mkdir(parents=True, exist_ok=True)
    for stale in path.parent.glob(f".{path.name}.*.tmp"):  # left by a process killed mid-write
        stale.unlink(missing_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    torch.save(payload, tmp)
    with open(tmp, "rb") as fh:
        os.fsync(fh.fileno())
    # Fault injection for the kill-during-write test: widen the window between write and rename.
    delay = float(os.environ.get("ABLATE_FAULT_CHECKPOINT_DELAY_S", "0") or 0)
    if delay:
        time.sleep(delay)
    os.replace(tmp, path)


def load_checkpoint(path: Path) -> dict[str, Any]:
    # weights_only=True refuses pickled code; RNG states and plain containers are allowed.
    return torch.load(path, map_location="cpu", weights_only=True)


def state_to_dict(state: TrainState) -> dict[str, Any]:
    return dict(state.__dict__)


def state_from_dict(data: dict[str, Any]) -> TrainState:
    state = TrainState(**{k: v for k, v in data.items() if k in TrainState.__dataclass_fields__})
    state.pending = [(int(s), dict(m)) for s, m in state.pending]
    state.history = [(int(s), dict(m)) for s, m in state.history]
    state.train_curve = [(int(s), float(v)) for s, v in state.train_curve]
    return state


# ---------------------------------------------------------------- the loop
@dataclass
class Trainer:
    spec: ExperimentSpec
    data: PreparedData
    model: Seq2SeqTransformer  # the plain module (evaluation, checkpoints)
    run_dir: Path
    device: torch.device
    sink: MetricSink | None = None
    hook: EvalHook | None = None
    rank: int = 0
    world_size: int = 1
    train_model: nn.Module | None = None  # DDP- or compile-wrapped view of `model` used for steps
    state: TrainState = field(default_factory=TrainState)

    def __post_init__(self) -> None:
        tspec = self.spec.train
        self.precision = resolve_precision(tspec.precision, self.device)
        self.optimizer = build_optimizer(self.model, tspec)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda s: lr_factor(s, tspec))
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=self.precision == "fp16")
        self.batcher = TokenBatcher(self.data.splits["train"], self.spec.data.batch_tokens, self.spec.seed,
                                    shuffle=True, rank=self.rank, world_size=self.world_size)
        self.pad_id = self.data.tokenizers.pad_id
        self.is_main = self.rank == 0

    # -- checkpoints
    @property
    def last_path(self) -> Path:
        return self.run_dir / "last.pt"

    @property
    def best_path(self) -> Path:
        return self.run_dir / "best.pt"

    def checkpoint_payload(self) -> dict[str, Any]:
        return {
            "version": CHECKPOINT_VERSION,
            "spec_hash": self.spec.spec_hash,
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict(),
            "rng": rng_state(),
            "state": state_to_dict(self.state),
        }

    def restore(self, payload: dict[str, Any]) -> None:
        self.model.load_state_dict(payload["model"])
        self.optimizer.load_state_dict(payload["optimizer"])
        self.scheduler.load_state_dict(payload["scheduler"])
        self.scaler.load_state_dict(payload["scaler"])
        set_rng_state(payload["rng"])
        self.state = state_from_dict(payload["state"])

    def save(self) -> None:
        """Checkpoint first, then flush metrics: a kill in between re-flushes (deduplicated) on resume."""
        if self.is_main:
            save_checkpoint(self.last_path, self.checkpoint_payload())
        self.flush()

    def flush(self) -> None:
        if self.sink is not None and self.is_main:
            for step, metrics in self.state.pending:
                self.sink.log_metrics(metrics, step)
        self.state.pending = []

    def record(self, metrics: dict[str, float], step: int) -> None:
        self.state.pending.append((step, metrics))

    # -- one optimizer step
    def loss_on(self, batch: Any, model: nn.Module, smoothing: float) -> torch.Tensor:
        src = batch.src.to(self.device, non_blocking=True)
        tgt_in = batch.tgt_in.to(self.device, non_blocking=True)
        tgt_out = batch.tgt_out.to(self.device, non_blocking=True)
        with autocast_context(self.precision, self.device):
            logits = model(src, tgt_in)  # (B, T, V)
        # Loss in fp32 whatever the autocast dtype: half-precision log-softmax loses the small probabilities.
        return F.cross_entropy(logits.float().flatten(0, 1), tgt_out.flatten(), ignore_index=self.pad_id,
                               label_smoothing=smoothing)

    def next_batches(self, count: int) -> list[Any]:
        batches: list[Batch] = []
        while len(batches) < count:
            order = self.batcher.epoch_batches(self.state.epoch)
            if self.state.batch_in_epoch >= len(order):
                self.state.epoch += 1
                self.state.batch_in_epoch = 0
                continue
            batches.append(self.batcher.collate(order[self.state.batch_in_epoch]))
            self.state.batch_in_epoch += 1
        return batches

    def global_sum(self, value: float) -> float:
        """Sum of `value` over the DDP ranks (the value itself in a single process)."""
        if self.world_size == 1:
            return value
        import torch.distributed as dist

        total = torch.tensor([value], dtype=torch.float64, device=self.device)
        dist.all_reduce(total)
        return float(total.item())

    def train_step(self) -> tuple[float, int]:
        """One optimizer step: (loss, target tokens) of the global batch, summed over DDP ranks."""
        tspec = self.spec.train
        # `or` would call len() on a torch.compile OptimizedModule (TypeError): test for None explicitly
        model = self.train_model if self.train_model is not None else self.model
        model.train()
        self.optimizer.zero_grad(set_to_none=True)
        batches = self.next_batches(tspec.accumulation)
        # Target tokens of the whole step on every rank: the step equals one big batch of all of them.
        total_tokens = int(self.global_sum(sum(b.n_tgt_tokens for b in batches)))
        loss_sum = 0.0
        for i, batch in enumerate(batches):
            # Weight each micro-batch by its share of the step's target tokens; DDP then averages the
            # ranks' gradients, so x world_size turns that average into the token-weighted sum.
            weight = batch.n_tgt_tokens * self.world_size / max(1, total_tokens)
            sync = nullcontext()
            if self.world_size > 1 and i < len(batches) - 1 and hasattr(model, "no_sync"):
                sync = model.no_sync()  # type: ignore[operator]  # all-reduce once per step, not per micro-batch
            with sync:
                loss = self.loss_on(batch, model, tspec.label_smoothing)
                self.scaler.scale(loss * weight).backward()
            loss_sum += float(loss.detach()) * batch.n_tgt_tokens / max(1, total_tokens)
        loss_sum = self.global_sum(loss_sum)  # the loss of the global batch, the same on every rank
        if tspec.clip_norm:
            self.scaler.unscale_(self.optimizer)  # clip true gradients, not scaled ones
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), tspec.clip_norm)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.scheduler.step()
        return loss_sum, total_tokens

    # -- the loop
    def finished_budget(self) -> bool:
        tspec = self.spec.train
        if tspec.max_steps is not None and self.state.step >= tspec.max_steps:
            return True
        return tspec.epochs is not None and self.state.epoch >= tspec.epochs

    def is_better(self, value: float) -> bool:
        es = self.spec.train.early_stopping
        mode = es.mode if es else "min"
        best = self.state.best_value
        return best is None or (value < best if mode == "min" else value > best)

    def run_evaluation(self) -> dict[str, float]:
        metrics = evaluate(self.model, self.data, "val", self.spec, self.device, self.precision,
                           decode=self.spec.eval.bleu_during_training)
        self.state.history.append((self.state.step, metrics))
        self.record(metrics, self.state.step)
        es = self.spec.train.early_stopping
        key = es.metric if es else "val/loss"
        value = metrics.get(key, metrics["val/loss"])
        if self.is_better(value):
            self.state.best_value = value
            self.state.bad_evals = 0
            if self.is_main:
                save_checkpoint(self.best_path, {"model": self.model.state_dict(), "step": self.state.step,
                                                 "spec_hash": self.spec.spec_hash, key: value})
        else:
            self.state.bad_evals += 1
        return metrics

    def fit(self) -> TrainOutcome:
        tspec = self.spec.train
        progress = Progress(tspec.max_steps, enabled=self.is_main)
        log_every = max(1, min(50, tspec.eval_every // 4 or 1))
        st = self.state
        try:
            while not self.finished_budget():
                started = time.perf_counter()
                loss, tokens = self.train_step()
                elapsed = time.perf_counter() - started
                st.step += 1
                st.train_seconds += elapsed
                st.target_tokens += tokens
                st.window_steps += 1
                st.window_loss += loss
                st.window_tokens += tokens
                st.window_seconds += elapsed
                step = st.step
                if st.first_loss is None:
                    st.first_loss = loss
                if not math.isfinite(loss) or loss > tspec.divergence_factor * max(st.first_loss, 1e-3):
                    self.record({"train/loss": loss if math.isfinite(loss) else 1e9}, step)
                    self.flush()
                    return TrainOutcome("diverged", st, f"loss {loss:.4g} at step {step}")
                if st.window_steps >= log_every:
                    mean_loss = st.window_loss / st.window_steps
                    lr = self.optimizer.param_groups[0]["lr"]
                    tps = st.window_tokens / max(st.window_seconds, 1e-9)
                    self.record({"train/loss": mean_loss, "train/lr": lr, "train/tokens_per_s": tps}, step)
                    st.train_curve.append((step, mean_loss))
                    progress.update(step, mean_loss, lr, tps)
                    st.window_steps, st.window_loss, st.window_tokens, st.window_seconds = 0, 0.0, 0, 0.0
                if step % tspec.eval_every == 0 or self.finished_budget():
                    metrics = self.run_evaluation()
                    progress.note(step, metrics)
                    stop = self.hook(step, metrics) if self.hook is not None else False
                    self.save()
                    if stop:
                        return TrainOutcome("pruned", self.state, f"stopped by the tuner at step {step}")
                    es = tspec.early_stopping
                    if es is not None and self.state.bad_evals >= es.patience:
                        return TrainOutcome("finished", self.state, f"early stop at step {step}")
                elif step % tspec.checkpoint_every == 0:
                    self.save()
        except KeyboardInterrupt:
            self.save()
            return TrainOutcome("killed", self.state, "interrupted (Ctrl-C); checkpoint saved")
        finally:
            progress.close()
        return TrainOutcome("finished", self.state)


class Progress:
    """A tqdm bar on a terminal; plain periodic lines when stderr is not a TTY (CI, logs)."""

    def __init__(self, total: int | None, enabled: bool = True) -> None:
        self.enabled = enabled
        self.bar: Any = None
        self.started = time.time()
        self.total = total
        if enabled and sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, unit="step", dynamic_ncols=True)
        self.last_line = 0.0

    def update(self, step: int, loss: float, lr: float, tps: float) -> None:
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.n = step
            self.bar.set_postfix(loss=f"{loss:.3f}", lr=f"{lr:.2e}", tok_s=f"{tps:,.0f}", refresh=False)
            self.bar.refresh()
        elif time.time() - self.last_line > 10:
            self.last_line = time.time()
            eta = ""
            if self.total:
                rate = step / max(1e-9, time.time() - self.started)
                remaining = max(0.0, (self.total - step) / max(rate, 1e-9))
                eta = f" eta {remaining:.0f}s"
            line = f"step {step}: loss {loss:.4f} lr {lr:.2e} {tps:,.0f} tok/s{eta}"
            print(line, file=sys.stderr, flush=True)

    def note(self, step: int, metrics: dict[str, float]) -> None:
        if not self.enabled:
            return
        text = "  ".join(f"{k} {v:.4g}" for k, v in sorted(metrics.items()))
        if self.bar is not None:
            self.bar.write(f"step {step}: {text}")
        else:
            print(f"step {step}: {text}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
