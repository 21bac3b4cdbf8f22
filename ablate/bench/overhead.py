"""Framework overhead for ``ablate bench``: what `ablate run` adds around the training step.

Three arms train the bench model on the same batches in the same order, in alternating chunks of steps
(bare, tracked, untracked, bare, ...) so that changes of machine load hit all of them alike:

* **bare**: the step alone (forward, loss, backward, clip, optimizer and scheduler step) on pre-collated
  batches, reading the loss every step as the trainer does;
* **tracked**: `ablate run`'s training: a :class:`~ablate.engine.trainer.Trainer` with a real MLflow
  :class:`~ablate.tracking.Tracker` (a sqlite store in a temporary folder) as its metric sink, the spec's
  logging and checkpoint settings, collating its own batches, and the run's one-time work as
  ``run_experiment`` does it (open the MLflow run and log the spec, dataset, tags, parameter count; the
  step-0 checkpoint; at the end the final metrics, the loss-curve figure, the best checkpoint as an
  artifact, closing the run);
* **untracked**: the same trainer with tracking off.

``fit()`` stops at each chunk's step budget with an evaluation and a checkpoint, so every event is timed
one by one: train_step, evaluation, checkpoint writes (``last.pt``, ``best.pt``), MLflow flushes and the
loop around them. A few dozen steps cannot show the spec's cadence (a checkpoint every 200 steps, say), so
the overhead is projected to the spec's cadence and run length from these per-event costs::

    overhead = step + checkpoints + tracking, as fractions of the bare step time b (median):
    step        = (1 + in_step) (1 + in_loop) - 1
    checkpoints = [saves/step * last.pt + evals/step * best.pt + step-0 last.pt / run_steps] / b
    tracking    = [saves/step * flush + (MLflow start + end) / run_steps] / b

in_step: median over steps of trainer step / bare step on the same batch, - 1 (collation, moving batches);
in_loop: time in fit() outside train_step, evaluation and checkpoints over time in train_step (logging
records, progress, divergence checks); saves/step = 1/eval_every + 1/checkpoint_every - 1/lcm (fit saves at
both); evals/step = 1/eval_every (best.pt is written when the validation metric improves: at most that).
Evaluation (validation loss, decoding when the spec asks) is not overhead: reported separately. Tracking
alone (MLflow on vs off) is ``tracking / (1 + step + checkpoints)``; the untracked arm gives the same
comparison measured directly at this bench's cadence (a save per chunk). The store is created (schema
migrations, seconds) before the measured run starts, as a project's first run leaves it for the next ones:
``tracking.store_creation_seconds``, not counted.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

import ablate.engine.trainer as train_module
from ablate.bench.train_speed import BenchConfig, sync
from ablate.data.prepare import TokenBatcher, prepare_data
from ablate.engine.builders import build_model
from ablate.engine.trainer import Trainer, build_optimizer, lr_factor
from ablate.run.runner import describe_device
from ablate.spec.experiment import ExperimentSpec
from ablate.tracking import Tracker, record

if TYPE_CHECKING:
    from ablate.data.batching import Batch
    from ablate.data.prepare import PreparedData
    from ablate.engine.encoder_decoder import Seq2SeqTransformer
    from ablate.engine.trainer import Trainer
    from ablate.tracking import NullTracker

ASSUMED_RUN_STEPS = 10_000  # the run length one-time costs are spread over when the spec has no max_steps


def overhead_spec(spec: ExperimentSpec, cfg: BenchConfig, out_dir: str, tracking_uri: str) -> ExperimentSpec:
    """The bench model on synthetic data with the spec's train cadence and tracking options, tracking on."""
    steps = cfg.overhead_steps
    t = spec.train
    model = spec.model
    return ExperimentSpec.model_validate({
        "name": "bench-overhead", "seed": 0,
        "data": {"source": "synthetic", "max_len": cfg.max_len + 2, "batch_tokens": cfg.batch_tokens,
                 "cache_dir": out_dir,
                 "synthetic": {"task": "reverse", "vocab_size": min(cfg.vocab, 10_000),
                               "min_len": cfg.min_len, "max_len": cfg.max_len, "val_size": 8,
                               "test_size": cfg.decode_sentences,
                               "train_size": max(256, 4 * steps * cfg.batch_tokens // cfg.min_len)}},
        "model": model.model_dump() | {"max_positions": max(model.max_positions, 2 * cfg.max_len + 12)},
        "train": {"max_steps": steps, "eval_every": t.eval_every, "checkpoint_every": t.checkpoint_every,
                  "precision": "fp32", "schedule": {"name": "constant", "warmup_steps": 0},
                  "optimizer": {"lr": 3e-3}, "out_dir": out_dir},
        "eval": {"samples": 0, "bleu_during_training": False, "max_sentences": 8},
        "tracking": spec.tracking.model_dump() | {"enabled": True, "uri": tracking_uri,
                                                  "experiment": "bench-overhead"}})


@contextmanager
def temporary_tracking_store(folder: Path) -> Iterator[str]:
    """A sqlite MLflow store in ``folder`` (artifacts beside it), made the process's store through
    MLFLOW_TRACKING_URI (which outranks a spec's tracking.uri) until the block ends; then the variable is
    put back as it was."""
    uri = f"sqlite:///{folder.resolve() / 'mlflow.db'}"
    before = os.environ.get("MLFLOW_TRACKING_URI")
    os.environ["MLFLOW_TRACKING_URI"] = uri
    try:
        yield uri
    finally:
        if before is None:
            os.environ.pop("MLFLOW_TRACKING_URI", None)
        else:
            os.environ["MLFLOW_TRACKING_URI"] = before


class Clock:
    """Durations per label, in the order they happened."""

    def __init__(self) -> None:
        self.times: dict[str, list[float]] = defaultdict(list)

    def wrap(self, label: str, fn: Callable[..., Any],
             device: torch.device | None = None) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                if device is not None:
                    sync(device)
                self.times[label].append(time.perf_counter() - started)
        return timed

    def total(self, label: str) -> float:
        return sum(self.times.get(label, []))

    def mean(self, label: str, default: float = 0.0) -> float:
        values = self.times.get(label, [])
        return statistics.mean(values) if values else default


class TimedSink:
    """The trainer's metric sink: the tracker, each ``log_metrics`` call timed as a flush."""

    def __init__(self, tracker: Any, clock: Clock) -> None:
        self.tracker, self.clock = tracker, clock
        self.values = 0  # metric values handed to MLflow

    def log_metrics(self, metrics: Mapping[str, float], step: int, timestamp_ms: int | None = None) -> None:
        self.values += len(metrics)
        self.clock.wrap("flush", self.tracker.log_metrics)(dict(metrics), step, timestamp_ms)


@contextmanager
def timed_checkpoint_writes(clock: Clock, labels: dict[Path, str]) -> Iterator[None]:
    """Time every checkpoint file the trainer writes, as '<arm>/<file name>' (labels: run folder -> arm)."""
    original = train_module.save_checkpoint

    def timed(path: Path, payload: dict[str, Any], **options: Any) -> None:
        started = time.perf_counter()
        original(path, payload, **options)
        clock.times[f"{labels.get(Path(path).parent, '?')}/{Path(path).name}"].append(
            time.perf_counter() - started)

    train_module.save_checkpoint = timed  # the trainer looks it up in its module at every call
    try:
        yield
    finally:
        train_module.save_checkpoint = original


def saves_per_step(eval_every: int, checkpoint_every: int) -> float:
    """Trainer.fit saves at every evaluation and every checkpoint_every steps (once when both fall)."""
    return 1 / eval_every + 1 / checkpoint_every - 1 / math.lcm(eval_every, checkpoint_every)


def framework_overhead(spec: ExperimentSpec, cfg: BenchConfig, device: torch.device,
                       out_dir: str) -> tuple[dict[str, Any], Any, ExperimentSpec]:
    """The three arms of the module docstring: the JSON section, and the prepared data and the spec they
    trained on (the decode benchmark reuses both)."""
    folder = Path(out_dir)
    clock = Clock()
    warm, chunks = max(1, cfg.warmup), 4
    per_chunk = max(1, cfg.overhead_steps // chunks)
    with temporary_tracking_store(folder) as uri:
        ospec = overhead_spec(spec, cfg, out_dir, uri)
        data = prepare_data(ospec)
        batches = _trainer_batches(data, ospec, warm + chunks * per_chunk)
        raw_step = _raw_arm(ospec, data, device, batches)
        timed_raw = clock.wrap("raw/step", raw_step, device)
        arms = {"tracked": folder / "run-tracked", "untracked": folder / "run-untracked"}
        with timed_checkpoint_writes(clock, {path: arm for arm, path in arms.items()}):
            tracker, sink, tracked = _open_tracked_arm(ospec, data, device, arms["tracked"], clock)
            untracked = Trainer(ospec, data, _model(ospec, data, device), arms["untracked"], device)
            untracked.save()
            first_saves = {arm: len(clock.times[f"{arm}/last.pt"]) for arm in arms}
            flushes_before = len(clock.times["flush"])
            trainers = {"tracked": tracked, "untracked": untracked}
            _time_trainers(clock, trainers, raw_step, warm, device)
            for c in range(chunks):
                for _ in range(per_chunk):
                    timed_raw()
                ospec.train.max_steps = (c + 1) * per_chunk  # fit() trains to the budget, evaluates, saves
                for arm, trainer in trainers.items():
                    clock.wrap(f"{arm}/fit", trainer.fit)()
            flushes_in_saves = clock.times["flush"][flushes_before:]
            _end_tracked_arm(tracker, tracked, ospec, clock)
    section = summarize(clock, spec, per_chunk * chunks, per_chunk, first_saves, flushes_in_saves,
                        sink.values)
    return section, data, ospec


def _model(ospec: ExperimentSpec, data: PreparedData, device: torch.device) -> Seq2SeqTransformer:
    """One arm's model: the same weights in every arm (built from the spec's seed)."""
    tok = data.tokenizers
    return build_model(ospec.model, tok.src_vocab_size, tok.tgt_vocab_size, tok.pad_id, ospec.seed).to(device)


def _trainer_batches(data: PreparedData, ospec: ExperimentSpec, count: int) -> Iterator[Batch]:
    """The trainers' first ``count`` batches in their order, collated ahead: a bare loop does no data work."""
    batcher = TokenBatcher(data.splits["train"], ospec.data.batch_tokens, ospec.seed, shuffle=True)
    order: list[list[int]] = []
    for epoch in range(1000):
        if len(order) >= count:
            break
        order += batcher.epoch_batches(epoch)
    return iter([batcher.collate(i) for i in order])


def _raw_arm(ospec: ExperimentSpec, data: PreparedData, device: torch.device,
             batches: Iterator[Batch]) -> Callable[[], None]:
    """The bare training step (no framework): the same model, optimizer, schedule and clipping."""
    tspec, pad_id = ospec.train, data.tokenizers.pad_id
    raw = _model(ospec, data, device).train()
    optimizer = build_optimizer(raw, tspec)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_factor(s, tspec))

    def raw_step() -> None:
        b = next(batches)
        optimizer.zero_grad(set_to_none=True)
        logits = raw(b.src.to(device), b.tgt_in.to(device))
        loss = F.cross_entropy(logits.float().flatten(0, 1), b.tgt_out.to(device).flatten(),
                               ignore_index=pad_id)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(raw.parameters(), tspec.clip_norm or math.inf)
        optimizer.step()
        scheduler.step()
        float(loss.detach())  # the trainer reads the loss every step too

    return raw_step


def _open_tracked_arm(ospec: ExperimentSpec, data: PreparedData, device: torch.device, run_dir: Path,
                      clock: Clock) -> tuple[NullTracker, TimedSink, Trainer]:
    """The tracked arm as `run_experiment` starts a run: the store created (timed apart: a project's
    first run migrates its schema, later runs open it), the run opened, what a run records at its start,
    the step-0 checkpoint."""
    started = time.perf_counter()
    Tracker.start(ospec, run_name="bench-overhead-store").end("finished")
    clock.times["store/create"].append(time.perf_counter() - started)
    started = time.perf_counter()
    tracker = Tracker.start(ospec, run_name="bench-overhead")
    sink = TimedSink(tracker, clock)
    tracked = Trainer(ospec, data, _model(ospec, data, device), run_dir, device, sink=sink)
    tracked.state.run_id = tracker.run_id
    tracker.log_dataset(data.name, data.fingerprint, source=data.source)
    tracker.set_tags({record.DEVICE: describe_device(device)})
    tracker.log_metrics({record.MODEL_PARAMS: float(tracked.model.num_parameters())}, step=0)
    clock.times["tracked/start"].append(time.perf_counter() - started)
    tracked.save()  # run_experiment's step-0 checkpoint
    return tracker, sink, tracked


def _time_trainers(clock: Clock, trainers: Mapping[str, Trainer], raw_step: Callable[[], None], warm: int,
                   device: torch.device) -> None:
    """Time each trainer's evaluations, saves and (after the warm-up, the same batches in every arm) steps."""
    for arm, trainer in trainers.items():
        trainer.run_evaluation = clock.wrap(f"{arm}/evaluation", trainer.run_evaluation)  # type: ignore[method-assign]
        trainer.save = clock.wrap(f"{arm}/save", trainer.save)  # type: ignore[method-assign]
    for _ in range(warm):  # train_step does not count steps
        raw_step()
        for trainer in trainers.values():
            trainer.train_step()
    for arm, trainer in trainers.items():
        trainer.train_step = clock.wrap(f"{arm}/step", trainer.train_step, device)  # type: ignore[method-assign]


def _end_tracked_arm(tracker: NullTracker, tracked: Trainer, ospec: ExperimentSpec, clock: Clock) -> None:
    """The tracking side of `run_experiment`'s end of a run: result metrics, the loss curve, the
    checkpoint and model as the spec asks, the run's end."""
    started = time.perf_counter()
    state = tracked.state
    tracker.log_metrics({record.TOKENS_PER_S: state.target_tokens / max(state.train_seconds, 1e-9),
                         record.MODEL_PARAMS: float(tracked.model.num_parameters())}, step=state.step + 1)
    val = [(s, m[record.VAL_LOSS]) for s, m in state.history if record.VAL_LOSS in m]
    tracker.log_loss_curve(state.train_curve, val)  # what the runner draws at the end of a run
    if ospec.tracking.log_checkpoint and tracked.best_path.exists():
        tracker.log_artifact(tracked.best_path, record.CHECKPOINT_DIR)
    if ospec.tracking.log_model:
        tracker.log_model(tracked.model)
    tracker.end("finished")
    clock.times["tracked/end"].append(time.perf_counter() - started)


def summarize(clock: Clock, spec: ExperimentSpec, steps: int, per_chunk: int, first_saves: dict[str, int],
              flushes_in_saves: list[float], logged_values: int) -> dict[str, Any]:
    """The JSON section: measured per-event costs and the projection of the module docstring."""
    t = clock.times
    raw = t["raw/step"]
    b = statistics.median(raw)
    run_steps = spec.train.max_steps or ASSUMED_RUN_STEPS
    per_save = saves_per_step(spec.train.eval_every, spec.train.checkpoint_every)
    per_eval = 1 / spec.train.eval_every

    def arm(name: str) -> dict[str, Any]:
        steps_ = t[f"{name}/step"]
        evaluation = clock.total(f"{name}/evaluation") - clock.total(f"{name}/best.pt")  # best.pt: checkpoint
        outside = clock.total(f"{name}/fit") - sum(steps_) - clock.total(f"{name}/evaluation") \
            - clock.total(f"{name}/save")
        last = t[f"{name}/last.pt"]
        periodic = last[first_saves[name]:]
        return {"in_step": statistics.median(s / r for s, r in zip(steps_, raw, strict=True)) - 1.0,
                "in_loop": outside / sum(steps_),
                "last_checkpoint_s": statistics.mean(periodic) if periodic else 0.0,
                "first_checkpoint_s": sum(last[: first_saves[name]]),
                # best.pt holds the model only; when no evaluation improved, last.pt bounds it from above
                "best_checkpoint_s": clock.mean(f"{name}/best.pt",
                                                statistics.mean(periodic) if periodic else 0.0),
                "evaluation_s": evaluation, "evaluations": len(t[f"{name}/evaluation"]),
                "fit_s_without_evaluation": clock.total(f"{name}/fit") - evaluation}

    on, off = arm("tracked"), arm("untracked")
    flush = sum(flushes_in_saves) / max(1, len(t["tracked/save"]))  # MLflow time per save (fit's saves)
    one_time_tracking = clock.total("tracked/start") + clock.total("tracked/end")
    step_part = (1 + on["in_step"]) * (1 + on["in_loop"]) - 1
    checkpoints = (per_save * on["last_checkpoint_s"] + per_eval * on["best_checkpoint_s"]
                   + on["first_checkpoint_s"] / run_steps) / b
    tracking = (per_save * flush + one_time_tracking / run_steps) / b
    overhead = step_part + checkpoints + tracking
    return {
        "method": "ablate run's training (Trainer, MLflow tracking on in a temporary sqlite store, the "
                  "spec's checkpointing) against a bare loop of the same step on the same pre-collated "
                  f"batches, {steps} steps in 4 alternating chunks, each event timed; projected to the "
                  "spec's cadence (see ablate/bench/overhead.py): overhead = step + checkpoints + "
                  "tracking; evaluation reported separately (not overhead)",
        "steps": steps, "raw_step_s": b, "raw_seconds": sum(raw),
        "trainer_seconds": on["fit_s_without_evaluation"],
        "untracked_seconds": off["fit_s_without_evaluation"],
        "cadence": {"eval_every": spec.train.eval_every, "checkpoint_every": spec.train.checkpoint_every,
                    "run_steps": run_steps, "saves_per_step": per_save, "bench_steps_per_save": per_chunk},
        "step_overhead": on["in_step"], "loop_overhead": on["in_loop"],
        "components": {"step": step_part, "checkpoints": checkpoints, "tracking": tracking},
        "overhead_fraction": overhead,
        "checkpoint_seconds": on["last_checkpoint_s"], "best_checkpoint_seconds": on["best_checkpoint_s"],
        "evaluation_seconds": on["evaluation_s"] + off["evaluation_s"],
        "evaluations": on["evaluations"] + off["evaluations"],
        "measured_overhead_at_bench_cadence": on["fit_s_without_evaluation"] / sum(raw) - 1.0,
        "tracking": {"overhead_fraction": tracking / (1 + step_part + checkpoints),
                     "flush_seconds_per_save": flush, "start_seconds": clock.total("tracked/start"),
                     "end_seconds": clock.total("tracked/end"), "logged_values": logged_values,
                     "store_creation_seconds": clock.total("store/create"),  # once per store: not counted
                     "store": "sqlite (temporary)",
                     "measured_on_vs_off_at_bench_cadence":
                         on["fit_s_without_evaluation"] / off["fit_s_without_evaluation"] - 1.0},
    }
