"""The packed step and loop: K cells' :class:`~ablate.engine.trainer.Trainer` objects stepped in lockstep
through one :class:`~ablate.engine.packed_model.PackedModel`.

Each cell keeps its whole trainer: its model (whose parameters are views of the pack's stacked storage),
its own optimizer built by the optimizer axis as alone (so every registered optimizer steps each cell as it
steps a cell alone: Adam's and Lion's elementwise moments, Adafactor's factored row and column moments, Muon's
Newton-Schulz on each cell's own matrices), its scheduler (a cell's learning rate and schedule are its own),
its GradScaler (fp16 loss scaling per cell: one cell's overflow skips only its own step), its clipping by its
own gradient norm, its data order (its batcher, seeded by its seed), its evaluations, best and last
checkpoints, metrics and stop. Only the forward and backward are shared: the cells' micro-batches are padded
to one shape and folded into one batch, and each cell's loss, weighted as alone, is summed into one
backward (a cell's gradient comes from its own loss only).

The loop is :meth:`Trainer.fit`'s, a cell at a time after each shared step: the same logging windows,
evaluations, early stopping, tuner prunes and divergence test, so a packed cell records what it records
alone. A cell that ends (diverged, early-stopped, pruned, or at its budget) leaves the pack, which is
re-stacked from the cells still training (their optimizers keep their state: it is keyed by the parameter
objects, which stay the cells'). A SIGTERM or Ctrl-C checkpoints every cell still training at the step's
boundary; each resumes from its own checkpoint, packed with any others or alone.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import cast

import torch

from ablate.data.lm_corpus import IGNORE, LMBatch
from ablate.data.prepare import Batch
from ablate.engine import preempt
from ablate.engine.packed_model import PackedModel, pad_rows
from ablate.engine.trainer import Trainer, TrainOutcome, current_lr
from ablate.hardware import autocast_context
from ablate.spec import metricnames

__all__ = ["PackedTrainer", "fold_batches"]


def fold_batches(batches: list[Batch | LMBatch], trainer: Trainer) -> tuple[list[torch.Tensor], torch.Tensor]:
    """The cells' micro-batches as one folded batch: inputs (K B, ...) and targets (K, B, T), each cell's
    padded to the largest rows and lengths among them (pad targets are ignored by the loss; a padding row
    starts with a real token, so no attention row is fully masked)."""
    rows = max(b.size for b in batches)
    if isinstance(batches[0], LMBatch):
        lm = [b for b in batches if isinstance(b, LMBatch)]
        cols = max(b.ids.size(1) for b in lm)
        pad = trainer.pad_id
        ids = torch.cat([pad_rows(b.ids, rows, cols, pad, first=pad) for b in lm])
        targets = torch.stack([pad_rows(b.targets, rows, cols, IGNORE) for b in lm])
        if lm[0].segments is None:
            return [ids], targets
        segments = [cast(torch.Tensor, b.segments) for b in lm]
        # a padded position is a document of its own
        return [ids, torch.cat([pad_rows(s, rows, cols, int(s.max()) + 1) for s in segments])], targets
    tok = trainer.data.tokenizers
    pad = tok.pad_id
    mt = [b for b in batches if isinstance(b, Batch)]
    src_cols, tgt_cols = max(b.src.size(1) for b in mt), max(b.tgt_in.size(1) for b in mt)
    src = torch.cat([pad_rows(b.src, rows, src_cols, pad, first=tok.eos_id) for b in mt])
    tgt_in = torch.cat([pad_rows(b.tgt_in, rows, tgt_cols, pad, first=tok.bos_id) for b in mt])
    targets = torch.stack([pad_rows(b.tgt_out, rows, tgt_cols, pad) for b in mt])
    return [src, tgt_in], targets


@dataclass
class PackedTrainer:
    """K cells' trainers of one shape, stepped as one stacked model (see the module docstring)."""

    trainers: list[Trainer]

    def __post_init__(self) -> None:
        first = self.trainers[0]
        self.device = first.device
        self.precision = first.precision
        for t in self.trainers:
            if t.world_size != 1:
                raise ValueError("a pack trains in one process: DDP cells run one a process")
            if (t.precision, t.spec.train.accumulation) != (self.precision, first.spec.train.accumulation):
                raise ValueError("a pack's cells share their precision and accumulation")
        self.live: list[int] = []
        self.pack: PackedModel | None = None

    def _repack(self, live: list[int]) -> PackedModel:
        if self.pack is None or live != self.live:
            self.live = list(live)
            self.pack = PackedModel([self.trainers[k].model for k in live])
        return self.pack

    # -- one optimizer step of every live cell
    def train_step(self, live: list[int]) -> tuple[list[float], list[int]]:
        """One optimizer step of each cell in ``live``: (loss, target tokens) per cell, as
        :meth:`Trainer.train_step` returns them alone."""
        pack = self._repack(live)
        cells = [self.trainers[k] for k in live]
        pack.zero_grad(set_to_none=True)
        for t in cells:
            t.model.train()
            t.optimizer.zero_grad(set_to_none=True)
        pack.template.train()
        steps = [t.next_batches(t.spec.train.accumulation) for t in cells]
        totals = [sum(b.n_tgt_tokens for b in batches) for batches in steps]
        loss_sums = [torch.zeros((), dtype=torch.float64, device=self.device) for _ in cells]
        for i in range(len(steps[0])):
            micro = [batches[i] for batches in steps]
            inputs, targets = fold_batches(micro, cells[0])
            inputs = [x.to(self.device, non_blocking=True) for x in inputs]
            targets = targets.to(self.device, non_blocking=True)
            with autocast_context(self.precision, self.device):
                logits = pack(*inputs)  # (K B, T, V)
            logits = logits.view(len(cells), -1, *logits.shape[1:])  # (K, B, T, V)
            total = torch.zeros((), device=self.device)
            for k, (t, batch) in enumerate(zip(cells, micro, strict=True)):
                ignore = IGNORE if isinstance(batch, LMBatch) else t.pad_id
                # the cell's own loss axis in fp32 on its own rows, weighted by its share of its step's tokens
                loss = t.loss_fn(logits[k].float().flatten(0, 1), targets[k].flatten(), ignore_index=ignore,
                                 label_smoothing=t.spec.train.label_smoothing)
                weight = batch.n_tgt_tokens / max(1, totals[k])
                total = total + t.scaler.scale(loss * weight)
                loss_sums[k] += loss.detach().double() * weight
            total.backward()
        pack.share_grads()
        for t in cells:
            if t.spec.train.clip_norm:
                t.scaler.unscale_(t.optimizer)  # clip true gradients, not scaled ones
                torch.nn.utils.clip_grad_norm_(t.model.parameters(), t.spec.train.clip_norm)
            t.scaler.step(t.optimizer)
            t.scaler.update()
            t.scheduler.step()
        return [float(s) for s in torch.stack(loss_sums).tolist()], totals  # one read of the device

    # -- the loop
    def after_step(self, t: Trainer, loss: float, tokens: int, elapsed: float) -> TrainOutcome | None:
        """:meth:`Trainer.fit`'s work after a step, for one cell: counts, the divergence test, the logging
        window, evaluation and checkpoints. Returns the cell's outcome when this step ended it."""
        tspec, st = t.spec.train, t.state
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
            st.stop_metrics = {metricnames.TRAIN_LOSS: loss, metricnames.TRAIN_LR: current_lr(t.optimizer)}
            t.record(dict(st.stop_metrics), step)
            st.stop_status, st.stop_reason = "diverged", f"loss {loss:.4g} at step {step}"
            t.save()
            return TrainOutcome("diverged", st, st.stop_reason)
        if t.averager is not None:
            t.averager.update(step, t.model)
        if st.window_steps >= max(1, min(50, tspec.eval_every // 4 or 1)):
            tps = st.window_tokens / max(st.window_seconds, 1e-9)
            mean_loss = st.window_loss / st.window_steps
            t.record({metricnames.TRAIN_LOSS: mean_loss, metricnames.TRAIN_LR: current_lr(t.optimizer),
                      metricnames.TOKENS_PER_S: tps}, step)
            st.train_curve.append((step, mean_loss))
            st.window_steps, st.window_loss, st.window_tokens, st.window_seconds = 0, 0.0, 0, 0.0
        if step % tspec.eval_every == 0 or t.finished_budget():
            metrics = t.run_evaluation()
            t.decide_stop(step, metrics)
            t.save()
            if st.stop_status is not None:
                return TrainOutcome(st.stop_status, st, st.stop_reason)
        elif step % tspec.checkpoint_every == 0:
            t.save()
        return None

    def fit(self) -> list[TrainOutcome]:
        """Train every cell to its end; one outcome per cell, in the trainers' order."""
        outcomes: dict[int, TrainOutcome] = {}
        for k, t in enumerate(self.trainers):
            if t.state.stop_status is not None:  # decided before a restart: ends where it ended
                outcomes[k] = TrainOutcome(t.state.stop_status, t.state, t.state.stop_reason)
        live = [k for k in range(len(self.trainers)) if k not in outcomes]
        with preempt.deferred():
            try:
                while live := [k for k in live if not self._ended(k, outcomes)]:
                    if preempt.requested():
                        preempt.at_boundary()
                        for k in live:
                            self.trainers[k].save()
                            outcomes[k] = TrainOutcome("killed", self.trainers[k].state, "interrupted by "
                                                       f"{preempt.signal_name()} at step "
                                                       f"{self.trainers[k].state.step}; checkpoint saved")
                        break
                    started, cpu = time.perf_counter(), time.process_time()
                    losses, tokens = self.train_step(live)
                    elapsed = time.perf_counter() - started
                    self._share_cpu(live, None, time.process_time() - cpu)
                    for k, loss, n in zip(live, losses, tokens, strict=True):
                        cpu = time.process_time()
                        ended = self.after_step(self.trainers[k], loss, n, elapsed)
                        self._share_cpu(live, k, time.process_time() - cpu)
                        if ended is not None:
                            outcomes[k] = ended
            except KeyboardInterrupt:
                for k in live:
                    outcomes.setdefault(k, TrainOutcome("killed", self.trainers[k].state, "interrupted "
                                                        "mid-step; resumes from the last checkpoint"))
            finally:
                for t in self.trainers:
                    t.writer.wait()
        return [outcomes.get(k, TrainOutcome("finished", t.state)) for k, t in enumerate(self.trainers)]

    def _share_cpu(self, live: list[int], owner: int | None, seconds: float) -> None:
        """Count ``seconds`` of this process's CPU time to the cell that spent it (``owner``: its evaluation
        or checkpoint) or, for the shared step (None), 1/K to each live cell; none to a cell that ended. A
        cell's ``cpu_seconds`` is then its part of the pack's, and the cells' sum the pack's."""
        for k, t in enumerate(self.trainers):
            if owner is not None:
                share = seconds if k == owner else 0.0
            else:
                share = seconds / len(live) if k in live else 0.0
            t.segment_cpu += seconds - share  # cpu_seconds() counts process_time() - segment_cpu

    def _ended(self, k: int, outcomes: dict[int, TrainOutcome]) -> bool:
        return k in outcomes or self.trainers[k].finished_budget()
