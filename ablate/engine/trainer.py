"""The shared AMP trainer: one loop for every variant.

Reads like nanoGPT's train.py: autocast in plain sight, a GradScaler only for
fp16, ``unscale_`` before clipping, no callback framework. Everything a resume
needs (model, optimizer, scheduler, scaler, RNG states, data position, step,
pending metrics, and a stop once decided) goes into one checkpoint written
atomically (ablate/engine/checkpoint.py), so a run killed at any moment and restarted
ends exactly where an uninterrupted run ends.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, cast

import torch
import torch.distributed as dist
from torch import nn

import registry
from ablate.data.lm_corpus import IGNORE, LMBatch, LMData, PackedBatcher
from ablate.data.prepare import Batch, PreparedData, TokenBatcher
from ablate.engine import preempt
from ablate.engine.averaging import WeightAverager, make_averager
from ablate.engine.checkpoint import (
    CHECKPOINT_VERSION,
    CheckpointWriter,
    TrainState,
    load_checkpoint,
    own_storage,
    rng_state,
    save_checkpoint,
    set_rng_state,
    state_from_dict,
    state_to_dict,
)
from ablate.engine.decoder_only import DecoderOnlyLM
from ablate.engine.encoder_decoder import Seq2SeqTransformer
from ablate.engine.evaluate import evaluate
from ablate.engine.lm_eval import scores_by_chunks
from ablate.engine.param_roles import describe_groups, train_params
from ablate.engine.progress import PeakMemory, Progress
from ablate.engine.token_loss import token_loss
from ablate.errors import AblateError
from ablate.hardware import autocast_context, resolve_precision
from ablate.spec import metricnames
from ablate.spec.experiment import ExperimentSpec, TrainSpec
from registry.loss import CrossEntropy
from registry.optimizer import TrainParam

__all__ = ["CHECKPOINT_VERSION", "EvalHook", "TrainOutcome", "TrainState", "Trainer",
           "build_optimizer", "current_lr", "load_checkpoint", "lr_factor", "planned_steps",
           "save_checkpoint", "train_params_of"]

EvalHook = Callable[[int, dict[str, float]], bool]  # (step, metrics) -> True to stop the run (pruned)


class MetricSink(Protocol):
    def log_metrics(self, metrics: dict[str, float], step: int, timestamp_ms: int | None = None) -> None: ...


# ---------------------------------------------------------------- optimisation
def train_params_of(model: nn.Module, spec: TrainSpec) -> list[TrainParam]:
    """The model's parameters as the optimizer axis takes them: roles, the no-decay rule, muP's rates."""
    opt = spec.optimizer
    rule = getattr(registry.get("optimizer", opt.name), "mup_rule", None)
    return train_params(model, opt.no_decay, rule)


def build_optimizer(model: nn.Module, spec: TrainSpec) -> torch.optim.Optimizer:
    """The optimizer ``train.optimizer`` names (registry/optimizer.py), over the model's parameter groups."""
    opt = spec.optimizer
    options = opt.option_values()
    options.pop("no_decay")  # the parameter groups' rule, applied by train_params
    factory = registry.get("optimizer", opt.name)
    return cast(torch.optim.Optimizer, factory(train_params_of(model, spec), opt.lr, **options))


def lr_factor(step: int, spec: TrainSpec, total_steps: int | None = None) -> float:
    """Multiplier of the base lr at optimizer step `step` (0-based): the schedule ``train.schedule`` names
    (registry/schedule.py), after its warm-up.

    inverse_sqrt is Noam's schedule normalised to peak at 1.0 after warmup:
    min((s+1)/w, sqrt(w/(s+1))), so `optimizer.lr` is the peak learning rate. The schedules that decay
    towards the end (cosine, linear, wsd) reach their floor at ``total_steps`` (the trainer passes
    `planned_steps`, which knows the batches of an epoch; ``max_steps`` when not given).
    """
    sched = spec.schedule
    schedule = registry.get("schedule", sched.name)
    total = total_steps if total_steps is not None else spec.max_steps
    return float(schedule(step, warmup=sched.warmup_steps, total=total, **sched.option_values()))


def current_lr(optimizer: torch.optim.Optimizer) -> float:
    """The schedule's learning rate now: the first group's rate over its muP multiplier."""
    group = optimizer.param_groups[0]
    scale = group.get("lr_scale", 1.0)
    return float(group["lr"]) if scale == 1.0 else float(group["lr"]) / scale


def planned_steps(spec: TrainSpec, batches_per_epoch: int) -> int:
    """Optimizer steps the budget allows: ``max_steps``, ``epochs`` x steps per epoch, or the smaller.

    An epoch's batch count comes from epoch 0: bucketing reshuffles every epoch, which can move the count
    by a batch or so, and a step of ``accumulation`` micro-batches may straddle two epochs.
    """
    budgets = [spec.max_steps] if spec.max_steps is not None else []
    if spec.epochs is not None:
        budgets.append(math.ceil(spec.epochs * batches_per_epoch / spec.accumulation))
    return max(1, min(budgets))


# ---------------------------------------------------------------- the loop
@dataclass
class TrainOutcome:
    status: str  # finished | diverged | pruned | killed
    state: TrainState
    reason: str = ""


@dataclass
class Trainer:
    spec: ExperimentSpec
    data: PreparedData
    model: Seq2SeqTransformer | DecoderOnlyLM  # the plain module (evaluation, checkpoints)
    run_dir: Path
    device: torch.device
    sink: MetricSink | None = None
    hook: EvalHook | None = None
    rank: int = 0
    world_size: int = 1
    train_model: nn.Module | None = None  # DDP- or compile-wrapped view of `model` used for steps
    state: TrainState = field(default_factory=TrainState)
    memory: PeakMemory | None = None  # logs peak_memory_mb at each evaluation when given
    show_progress: bool = True

    def __post_init__(self) -> None:
        tspec = self.spec.train
        self.select_metric = self.spec.selection_metric()
        es = tspec.early_stopping
        self.select_mode = es.mode if es is not None else "min"
        self.precision = resolve_precision(tspec.precision, self.device)
        self.optimizer = build_optimizer(self.model, tspec)
        # what the run records of its groups (the no-decay rule, muP's rates): tag ablate.param_groups
        self.param_groups = describe_groups(self.optimizer, train_params_of(self.model, tspec))
        self.loss_fn: nn.Module = registry.get("loss", tspec.loss.name)(**tspec.loss.option_values())
        self.batcher: TokenBatcher | PackedBatcher
        if isinstance(self.data, LMData):  # a language model: packed blocks of data.max_len tokens
            self.batcher = PackedBatcher(self.data.documents["train"], self.data.block_len,
                                         self.spec.data.batch_tokens, self.spec.seed, shuffle=True,
                                         rank=self.rank, world_size=self.world_size)
        else:
            tok = self.data.tokenizers
            self.batcher = TokenBatcher(self.data.splits["train"], self.spec.data.batch_tokens,
                                        self.spec.seed, shuffle=True, rank=self.rank,
                                        world_size=self.world_size,
                                        specials=(tok.pad_id, tok.bos_id, tok.eos_id))
        self.total_steps = planned_steps(tspec, self.batcher.num_batches(0))
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: lr_factor(s, tspec, self.total_steps))
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=self.precision == "fp16")
        # train.weight_average: the averaged weights evaluated at the end beside the best checkpoint
        self.averager: WeightAverager | None = make_averager(tspec)
        self.pad_id = self.data.tokenizers.pad_id
        self.is_main = self.rank == 0
        self.segment_started = time.time()  # this process's part of the run; restore() adds the earlier ones
        self.segment_cpu = time.process_time()
        # a checkpoint above checkpoint.ASYNC_CHECKPOINT_BYTES is written while the next steps run
        self.writer = CheckpointWriter()

    # -- checkpoints
    @property
    def last_path(self) -> Path:
        return self.run_dir / "last.pt"

    @property
    def best_path(self) -> Path:
        return self.run_dir / "best.pt"

    def checkpoint_payload(self) -> dict[str, Any]:
        payload = {
            "version": CHECKPOINT_VERSION, "spec_hash": self.spec.spec_hash,
            "model": own_storage(self.model.state_dict()),  # a packed cell's are views of the pack's
            "optimizer": own_storage(self.optimizer.state_dict()),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict(),
            "rng": rng_state(),
            "state": state_to_dict(self.state),
        }
        if self.averager is not None:  # the snapshots or the moving average: a resumed run averages the same
            payload["weight_average"] = self.averager.state_dict()
        return payload

    def restore(self, payload: dict[str, Any]) -> None:
        self.model.load_state_dict(payload["model"])
        self.optimizer.load_state_dict(payload["optimizer"])
        self.scheduler.load_state_dict(payload["scheduler"])
        self.scaler.load_state_dict(payload["scaler"])
        set_rng_state(payload["rng"])
        self.state = state_from_dict(payload["state"])
        if self.averager is not None and "weight_average" in payload:
            self.averager.load_state_dict(payload["weight_average"], self.device)
        self.segment_started = time.time()
        self.segment_cpu = time.process_time()

    def wall_seconds(self) -> float:
        """The run's wall time so far: earlier segments up to the checkpoint resumed from, plus this one."""
        return self.state.wall_seconds + time.time() - self.segment_started

    def cpu_seconds(self) -> float:
        """The run's process CPU time so far (all threads), counted as ``wall_seconds``."""
        return self.state.cpu_seconds + time.process_time() - self.segment_cpu

    def save(self) -> None:
        """Checkpoint first, then flush metrics: a kill in between re-flushes (deduplicated) on resume."""
        if self.is_main:
            now, cpu = time.time(), time.process_time()
            self.state.wall_seconds += now - self.segment_started
            self.state.cpu_seconds += cpu - self.segment_cpu
            self.segment_started, self.segment_cpu = now, cpu
            # save_checkpoint looked up here at each call: ablate/bench/overhead.py times it
            self.writer.save(self.last_path, self.checkpoint_payload(), keep_previous=True,
                             write=save_checkpoint)
        # Written in the background, the checkpoint may land after this flush: a kill before it resumes
        # from the one before, whose steps are trained again and their metrics dropped as repeats.
        self.flush()

    def flush(self) -> None:
        if self.sink is not None and self.is_main:
            for step, metrics, measured in self.state.pending:
                self.sink.log_metrics(metrics, step, measured)
        self.state.pending = []

    def record(self, metrics: dict[str, float], step: int) -> None:
        self.state.pending.append((step, metrics, int(time.time() * 1000)))

    # -- one optimizer step
    def loss_on(self, batch: Any, model: nn.Module, smoothing: float) -> torch.Tensor:
        # (src, tgt_in) for translation, (ids, segments) for a language model's packed block
        inputs = [t.to(self.device, non_blocking=True) for t in batch.model_inputs()]
        targets = batch.targets.to(self.device, non_blocking=True)
        ignore = IGNORE if isinstance(batch, LMBatch) else self.pad_id
        with autocast_context(self.precision, self.device):
            if self.chunked_loss():
                hidden = model(*inputs, project=False)  # (B, T, d): the generator is applied with the loss
                # Loss in fp32 whatever the autocast dtype: half-precision log-softmax loses the small
                # probabilities. Chunked with the generator: the (B*T, V) logits are never held whole.
                return token_loss(hidden, self.model.generator, targets, ignore, smoothing,
                                  scored=batch.n_tgt_tokens)  # counted on the host: no wait for the device
            logits = model(*inputs)  # (B, T, V)
        # the loss axis (registry/loss.py) on the whole logits, in fp32: a loss term beyond the cross-entropy
        # (z-loss) or logits that are more than the generator's (a soft cap, muP's multiplier)
        loss: torch.Tensor = self.loss_fn(logits.float().flatten(0, 1), targets.flatten(),
                                          ignore_index=ignore, label_smoothing=smoothing)
        return loss

    def chunked_loss(self) -> bool:
        """Whether the loss is the plain cross-entropy of the generator's own logits, which token_loss
        computes a chunk of rows at a time: the loss axis's cross_entropy, no logits axis, a logit
        multiplier of 1."""
        return isinstance(self.loss_fn, CrossEntropy) and scores_by_chunks(self.model)

    def next_batches(self, count: int) -> list[Batch | LMBatch]:
        """The next `count` micro-batches of this rank; the position rolls over to the next epoch as soon
        as an epoch's last batch is taken, so the `epochs` budget ends exactly at an epoch's end."""
        st = self.state
        batches: list[Batch | LMBatch] = []
        while len(batches) < count:
            n = self.batcher.num_batches(st.epoch)
            if st.batch_in_epoch >= n:  # a checkpoint written before the roll-over moved here
                st.epoch, st.batch_in_epoch = st.epoch + 1, 0
                continue
            # rank r takes batches r, r + world_size, ... of the epoch's plan
            indices = self.batcher.all_batches(st.epoch)[self.rank + st.batch_in_epoch * self.world_size]
            batches.append(self.batcher.collate(indices.tolist()))
            st.batch_in_epoch += 1
            if st.batch_in_epoch >= n:
                st.epoch, st.batch_in_epoch = st.epoch + 1, 0
        return batches

    def global_sum(self, value: float) -> float:
        """Sum of `value` over the DDP ranks (the value itself in a single process)."""
        if self.world_size == 1:
            return value

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
        # the step's loss stays on the device until the step ends: one read a step, not one a micro-batch
        # (float64: the same sums, in the same order, as the Python floats before)
        loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)
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
            loss_sum += loss.detach().double() * batch.n_tgt_tokens / max(1, total_tokens)
        if self.world_size > 1:
            dist.all_reduce(loss_sum)  # the loss of the global batch, the same on every rank
        step_loss = float(loss_sum)  # the step's one read of the device
        if tspec.clip_norm:
            self.scaler.unscale_(self.optimizer)  # clip true gradients, not scaled ones
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), tspec.clip_norm)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.scheduler.step()
        return step_loss, total_tokens

    # -- the loop
    def finished_budget(self) -> bool:
        tspec = self.spec.train
        if tspec.max_steps is not None and self.state.step >= tspec.max_steps:
            return True
        return tspec.epochs is not None and self.state.epoch >= tspec.epochs

    def is_better(self, value: float) -> bool:
        best = self.state.best_value
        return best is None or (value < best if self.select_mode == "min" else value > best)

    def run_evaluation(self, scored_nll: tuple[float, int] | None = None) -> dict[str, float]:
        """Evaluate on val (decoding at most eval.max_sentences; ``scored_nll``: its loss's sums, by a pack),
        keep the best checkpoint by the selection metric, count evaluations without gain, log memory."""
        with torch.compiler.set_stance("force_eager"):  # layers compiled in place (compile_scope) run eager
            metrics = evaluate(self.model, self.data, "val", self.spec, self.device, self.precision,
                               decode=self.spec.eval.bleu_during_training, limit=self.spec.eval.max_sentences,
                               max_tokens=self.spec.eval.token_cap(self.spec.is_lm), rank=self.rank,
                               world_size=self.world_size, scored_nll=scored_nll)  # each rank its share
        step = self.state.step
        self.state.history.append((step, metrics))
        self.record(metrics, step)
        if self.memory is not None:
            self.record(self.memory.metrics(), step)
        key = self.select_metric
        if key not in metrics:  # selection_metric() rules this out; never fall back to another
            raise AblateError(f"train.early_stopping.metric: the evaluation at step {step} has no {key!r}")
        value = metrics[key]
        if self.is_better(value):
            self.state.best_value = value
            self.state.bad_evals = 0
            if self.is_main:
                self.writer.save(self.best_path, {"model": self.model.state_dict(), "step": step,
                                                  "spec_hash": self.spec.spec_hash, key: value},
                                 write=save_checkpoint)
        else:
            self.state.bad_evals += 1
        return metrics

    def decide_stop(self, step: int, metrics: dict[str, float]) -> None:
        """After an evaluation: the tuner's prune or early stopping, kept in the state (saved next)."""
        es = self.spec.train.early_stopping
        pruned = self.hook is not None and self.hook(step, metrics)  # the tuner hears every evaluation
        # At the last evaluation the training is done: pruning would save nothing and only take the run's
        # final evaluation (and the trial's place in the ranking) away, so the run finishes.
        if pruned and not self.finished_budget():
            self.state.stop_status, self.state.stop_reason = "pruned", f"stopped by the tuner at step {step}"
        elif es is not None and self.state.bad_evals >= es.patience:
            self.state.stop_status = "finished"
            self.state.stop_reason = (f"early stop at step {step}: {es.metric} did not improve on "
                                      f"{self.state.best_value:.4g} in {es.patience} evaluations")

    def fit(self) -> TrainOutcome:
        tspec = self.spec.train
        st = self.state
        if st.stop_status is not None:  # decided and saved before a restart: end where the first run ended
            return TrainOutcome(st.stop_status, st, st.stop_reason)
        progress = Progress(self.total_steps, start_step=st.step, enabled=self.is_main and self.show_progress)
        log_every = max(1, min(50, tspec.eval_every // 4 or 1))
        with preempt.deferred():
            try:
                while not self.finished_budget():
                    # A SIGTERM/SIGINT during the last step: checkpoint at this boundary and stop (all DDP
                    # ranks agree on the step, so none waits in an all-reduce for a rank that left).
                    if self.global_sum(1.0 if preempt.requested() else 0.0) > 0:
                        preempt.at_boundary()
                        self.save()
                        return TrainOutcome("killed", st, f"interrupted by {preempt.signal_name()} at step "
                                            f"{st.step}; checkpoint saved")
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
                        # the real value (nan/inf included): MLflow stores it, and it says how the run failed
                        lr = current_lr(self.optimizer)
                        st.stop_metrics = {metricnames.TRAIN_LOSS: loss, metricnames.TRAIN_LR: lr}
                        self.record(dict(st.stop_metrics), step)
                        st.stop_status, st.stop_reason = "diverged", f"loss {loss:.4g} at step {step}"
                        self.save()
                        return TrainOutcome("diverged", st, st.stop_reason)
                    if self.averager is not None:
                        self.averager.update(step, self.model)
                    if st.window_steps >= log_every:
                        mean_loss = st.window_loss / st.window_steps
                        lr = current_lr(self.optimizer)
                        tps = st.window_tokens / max(st.window_seconds, 1e-9)
                        self.record({metricnames.TRAIN_LOSS: mean_loss, metricnames.TRAIN_LR: lr,
                                     metricnames.TOKENS_PER_S: tps},
                                    step)
                        st.train_curve.append((step, mean_loss))
                        progress.update(step, mean_loss, lr, tps)
                        st.window_steps, st.window_loss, st.window_tokens, st.window_seconds = 0, 0.0, 0, 0.0
                    if step % tspec.eval_every == 0 or self.finished_budget():
                        metrics = self.run_evaluation()
                        progress.note(step, metrics)
                        self.decide_stop(step, metrics)
                        self.save()
                        if st.stop_status is not None:
                            return TrainOutcome(st.stop_status, st, st.stop_reason)
                    elif step % tspec.checkpoint_every == 0:
                        self.save()
            except KeyboardInterrupt:
                # A second signal, one outside `preempt.deferred`, or the first one's grace running out
                # stopped a step half-way: its state is not a boundary, so the last checkpoint written stays
                # the resume point.
                return TrainOutcome("killed", self.state, "interrupted mid-step; resumes from the last "
                                    "checkpoint")
            finally:
                progress.close()
                self.writer.wait()  # every checkpoint whole on disk before the run reads best.pt or exits
        return TrainOutcome("finished", self.state)
