"""The packed step and loop: K cells' :class:`~ablate.engine.trainer.Trainer` objects stepped in lockstep
through one :class:`~ablate.engine.packed_model.PackedModel`.

Each cell keeps its whole trainer: its model (whose parameters are views of the pack's stacked storage),
its own optimizer built by the optimizer axis as alone (so every registered optimizer steps each cell as it
steps a cell alone: Adam's and Lion's elementwise moments, Adafactor's factored row and column moments, Muon's
Newton-Schulz on each cell's own matrices; outside fp16 the cells' steps are one call over the stacked
parameters, Muon's Newton-Schulz batched over the cells, each cell's state a view of the stacked one:
ablate/engine/packed_step.py), its scheduler (a cell's learning rate and schedule are its own),
its GradScaler (fp16 loss scaling per cell: one cell's overflow skips only its own step), its clipping by its
own gradient norm, its data order (its batcher, seeded by its seed), its evaluations, best and last
checkpoints, metrics and stop. Only the forward and backward are shared: the cells' micro-batches are padded
to one shape and folded into one batch, and each cell's loss, weighted as alone, is summed into one
backward (a cell's gradient comes from its own loss only).

The loop is :meth:`Trainer.fit`'s, a cell at a time after each shared step: the same logging windows,
evaluations, early stopping, tuner prunes and divergence test, so a packed cell records what it records
alone. A cell that ends (diverged, early-stopped, pruned, or at its budget) leaves the pack, which is
re-stacked from the cells still training (their optimizers keep their state: it is keyed by the parameter
objects, which stay the cells'). Each cell keeps its own random state (ablate/engine/cell_rng.py), swapped
in for its dropout masks and for its own work after a step, so its masks and checkpoints are its own. A
SIGTERM or Ctrl-C checkpoints every cell still training at the step's
boundary; each resumes from its own checkpoint, packed with any others or alone.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import torch

from ablate.data.lm_corpus import IGNORE, LMBatch
from ablate.data.prepare import Batch
from ablate.engine import preempt
from ablate.engine.cell_rng import CellStreams
from ablate.engine.packed_eval import split_nll
from ablate.engine.packed_fold import batch_lengths, fold_batches
from ablate.engine.packed_model import PackedModel, pack_lengths
from ablate.engine.packed_step import Batched, batched_step, clip_cells
from ablate.engine.trainer import Trainer, TrainOutcome, current_lr
from ablate.hardware import autocast_context
from ablate.spec import metricnames

__all__ = ["PackedTrainer", "batch_lengths", "fold_batches"]


@dataclass
class PackedTrainer:
    """K cells' trainers of one shape, stepped as one stacked model (see the module docstring)."""

    trainers: list[Trainer]
    # each cell's random state as it starts training (ablate/engine/cell_rng.py); default: its seed's
    streams: CellStreams | None = field(default=None)

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
        if self.streams is None:
            self.streams = CellStreams.seeded([t.spec.seed for t in self.trainers], self.device)
        self.cell_streams: CellStreams = self.streams
        self._step_for: PackedModel | None = None
        self._eval_due: list[int] = []
        self._eval_sums: dict[int, tuple[float, int]] | None = None
        self._eval_cpu = 0.0  # CPU seconds of the stacked evaluation, run in the first due cell's step
        self._step: Batched | None = None

    def _repack(self, live: list[int]) -> PackedModel:
        if self.pack is None or live != self.live:
            self.live = list(live)
            chosen = list(live)
            self.pack = PackedModel([self.trainers[k].model for k in live],
                                    lambda c: self.cell_streams.drawing(chosen[c]))
        return self.pack

    def _batched(self, pack: PackedModel, cells: list[Trainer]) -> Batched | None:
        """The pack's batched optimizer step (ablate/engine/packed_step.py), made once per pack."""
        if self._step_for is not pack:
            self._step_for = pack
            scaled = any(t.scaler.is_enabled() for t in cells)
            self._step = batched_step([t.model for t in cells], [t.optimizer for t in cells],
                                      list(pack.stacked), pack.names, scaled)
        return self._step

    def _fold(self, pack: PackedModel, micro: list[Batch | LMBatch]
              ) -> tuple[list[torch.Tensor], torch.Tensor]:
        """The micro-batches folded; where the pack has dropouts, padded so that each cell's slice can be
        cut (:func:`~ablate.engine.packed_model.pack_lengths`) and the cells' extents handed to the pack."""
        if not pack.dropouts:
            return fold_batches(micro, self.trainers[self.live[0]])
        own = batch_lengths(micro)
        padded = pack_lengths(own, pack.widths, self.trainers[self.live[0]].spec.model.max_positions)
        pack.set_extents([b.size for b in micro],
                         {size: cells for size, cells in zip(padded, own, strict=True) if min(cells) < size})
        return fold_batches(micro, self.trainers[self.live[0]], padded)

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
            inputs, targets = self._fold(pack, micro)
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
        batched = self._batched(pack, cells)
        if batched is not None:  # one clip and one step over the stacked parameters
            clip_cells(list(pack.stacked), [t.spec.train.clip_norm for t in cells])
            batched.step()
            for t in cells:
                setattr(t.optimizer, "_opt_called", True)  # noqa: B010 - the scheduler's 'stepped' mark
                t.scheduler.step()
            return [float(s) for s in torch.stack(loss_sums).tolist()], totals
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
            metrics = t.run_evaluation(self._scored(t))
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
                            with self.cell_streams.drawing(k):  # its checkpoint saves its own stream
                                self.trainers[k].save()
                            outcomes[k] = TrainOutcome("killed", self.trainers[k].state, "interrupted by "
                                                       f"{preempt.signal_name()} at step "
                                                       f"{self.trainers[k].state.step}; checkpoint saved")
                        break
                    started, cpu = time.perf_counter(), time.process_time()
                    losses, tokens = self.train_step(live)
                    elapsed = time.perf_counter() - started
                    self._share_cpu(live, None, time.process_time() - cpu)
                    self._due(live)
                    for k, loss, n in zip(live, losses, tokens, strict=True):
                        cpu = time.process_time()
                        with self.cell_streams.drawing(k):
                            ended = self.after_step(self.trainers[k], loss, n, elapsed)
                        # the pack's stacked evaluation ran inside the first due cell's: shared, not its own
                        shared, self._eval_cpu = self._eval_cpu, 0.0
                        self._share_cpu(live, k, time.process_time() - cpu - shared)
                        self._share_cpu(live, None, shared)
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

    def _due(self, live: list[int]) -> None:
        """The cells whose next step ends at an evaluation (each at its own step: a resumed cell may be at
        another): where they are the whole pack, their validation losses are scored together, once the first
        of them asks."""
        self._eval_due = []
        for k in live:
            tspec, step = self.trainers[k].spec.train, self.trainers[k].state.step + 1
            if step % tspec.eval_every == 0 or (tspec.max_steps is not None and step >= tspec.max_steps):
                self._eval_due.append(k)
        self._eval_sums = None

    def _scored(self, t: Trainer) -> tuple[float, int] | None:
        """Cell ``t``'s validation loss sums from the pack's one stacked evaluation forward over the cells
        due (ablate/engine/packed_eval.py), or None: it scores its own."""
        k = self.trainers.index(t)
        if k not in self._eval_due or self._eval_due != self.live or self.pack is None or len(self.live) < 2:
            return None  # the pack's cells are not all evaluating now: each scores its own
        if self._eval_sums is None:
            cpu = time.process_time()
            sums = split_nll(self.pack, [self.trainers[j] for j in self._eval_due], "val")
            self._eval_sums = {} if sums is None else dict(zip(self._eval_due, sums, strict=True))
            self._eval_cpu = time.process_time() - cpu
        return self._eval_sums.get(k)

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
