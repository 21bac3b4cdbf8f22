"""`ablate run`: one spec from data to a tracked, evaluated, resumable run.

`run_experiment` is a short sequence of named steps (`_run`): find the place (process group, device,
run folder), report a finished run instead of training it, check the tracking store, prepare the data,
build the model, open the tracker, make the trainer (the model compiled and wrapped in DDP as asked),
start or resume, train, take the result (the best checkpoint on whole val/test) and finish (summary.json,
the run's end). The run folder (`ablate.run.rundir`) holds the checkpoints; starting the same spec again
resumes from it (the MLflow run id rides in the checkpoint, and in ``run_id`` from the moment the run
opens), and a finished run is reported, not retrained.
"""

from __future__ import annotations

import os
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch
from torch.nn.parallel import DistributedDataParallel

from ablate.data.check import checked_spec
from ablate.data.lm_corpus import LMData
from ablate.data.prepare import PreparedData, prepare_data
from ablate.engine import preempt
from ablate.engine.checkpoint import load_verified
from ablate.engine.compute import Compute, mean_lengths, shape_of, training_compute
from ablate.engine.dispatch import build_any, compile_layers, eager
from ablate.engine.metrics import signatures
from ablate.engine.progress import PeakMemory
from ablate.engine.trainer import EvalHook, Trainer, TrainOutcome
from ablate.hardware import busy_cores_note, fp32_matmul, prepare_device
from ablate.run.distributed import DistInfo, from_main, init_distributed, pick_device, rank0_checkpoint
from ablate.run.evaluation import Model, describe_device, final_evaluation
from ablate.run.lock import RunLock
from ablate.run.rundir import (  # noqa: F401  # run_dir_for, RunResult: importable from here too
    LAST_CHECKPOINT,
    OUTBOX,
    SUMMARY,
    TERMINAL,
    RunResult,
    clear_run,
    format_summary,
    read_run_id,
    read_summary,
    run_dir_for,
    write_run_id,
    write_summary,
)
from ablate.spec.experiment import ExperimentSpec
from ablate.tracking import NullTracker, Tracker, check_reachable, record, resolve_tracking_uri, send_outbox

if TYPE_CHECKING:
    from ablate.tracking import NullTracker
    from ablate.tracking.tracker import Status

Checkpoint = dict[str, Any]  # a verified checkpoint's payload: {"model", "optimizer", "state", ...}


def run_label(variant: str, seed: int) -> str:
    """An MLflow run name: 'baseline · seed 1' (two seeds of one variant read differently)."""
    return f"{variant} · seed {seed}"


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


class Interrupted(KeyboardInterrupt):
    """A run stopped by SIGTERM/SIGINT after writing its checkpoint (``step``)."""

    def __init__(self, run_dir: Path, step: int | None, reason: str) -> None:
        super().__init__(reason)
        self.run_dir, self.step, self.reason = run_dir, step, reason


@dataclass(frozen=True)
class RunOptions:
    """How a caller wants the run made (see `run_experiment`); the spec says what is trained."""

    hook: EvalHook | None = None
    run_dir: Path | None = None
    tags: dict[str, str] | None = None
    parent_run_id: str | None = None
    experiment: str | None = None
    run_name: str | None = None
    data: PreparedData | None = None
    quiet: bool = False
    on_start: Callable[[str | None], None] | None = None
    variant: str | None = None


@dataclass(frozen=True)
class Place:
    """Where the run happens: its process group, device and folder."""

    dist: DistInfo
    device: torch.device
    run_dir: Path


# ---------------------------------------------------------------- the run, step by step
def run_experiment(spec: ExperimentSpec, *, hook: EvalHook | None = None, run_dir: Path | None = None,
                   tags: dict[str, str] | None = None, parent_run_id: str | None = None,
                   experiment: str | None = None, run_name: str | None = None,
                   data: PreparedData | None = None, quiet: bool = False,
                   on_start: Callable[[str | None], None] | None = None,
                   variant: str | None = None) -> RunResult:
    """Train and evaluate one spec; resume from its run directory when a checkpoint is there.

    ``on_start`` receives the MLflow run id (None when tracking is off) as soon as the run is open, so a
    study's cell or a tuner's trial knows its run even when training later crashes. ``quiet`` hides the
    progress display. ``variant`` is the run's ``ablate.variant`` (default: the run name, else the spec's
    name; runs are named 'variant · seed N'). ``train.threads`` applies to this run only: torch's
    thread count is restored after.
    """
    options = RunOptions(hook, run_dir, tags, parent_run_id, experiment, run_name, data, quiet, on_start,
                         variant)
    threads_before = torch.get_num_threads()
    if spec.train.threads:
        torch.set_num_threads(spec.train.threads)
    else:
        busy_cores_note(spec.train.device, quiet)
    try:
        return _run(spec, options)
    finally:
        torch.set_num_threads(threads_before)


def _run(spec: ExperimentSpec, options: RunOptions) -> RunResult:
    """The steps of a run, in order; docs/architecture.md walks through them."""
    place = find_place(spec, options.run_dir)
    done = finished_run(spec, place)
    if done is not None:
        return done
    check_tracking_store(spec, place)
    memory = PeakMemory(place.device)
    memory.reset()  # this run's peak, not the worker process's
    data = prepare(spec, options.data)
    model = build(spec, data, place.device)
    resume = agreed_resume(place)
    with preempt.held():  # a stop here would leave a run whose id nothing recorded: resumed, a second one
        tracker = open_tracker(spec, options, place, resume)
        if options.on_start is not None:
            options.on_start(tracker.run_id)
    try:
        trainer = make_trainer(spec, options, place, data, model, tracker, memory)
        padding = start_or_resume(trainer, resume, tracker, data, place, model)
        outcome = trainer.fit()
        metrics = result_metrics(spec, place, data, model, trainer, tracker, outcome, memory, padding)
        return finish(spec, place, trainer, tracker, outcome, metrics, resume)
    except KeyboardInterrupt:
        tracker.end("interrupted")
        raise
    except BaseException as exc:
        try:
            tracker.set_tags({record.ERROR: f"{type(exc).__name__}: {exc}"[-2000:]})  # MLflow says why
            tracker.end("failed")
        except Exception:  # noqa: BLE001 - the store may be what failed (full disk): keep the first error
            pass
        raise


def find_place(spec: ExperimentSpec, run_dir: Path | None) -> Place:
    """Join torchrun's process group if started by it, pick the device, name the run folder."""
    dist = init_distributed()
    device = pick_device(dist, spec.train.device)
    prepare_device(device)
    return Place(dist, device, Path(run_dir) if run_dir is not None else run_dir_for(spec))


def finished_run(spec: ExperimentSpec, place: Place) -> RunResult | None:
    """A run that already ended is reported, not retrained (rank 0's folder decides for every rank under
    torchrun); records its outbox still holds are sent."""
    done = from_main(place.dist, read_summary(place.run_dir))
    if done is None or done.status not in TERMINAL:
        return None
    if spec.tracking.enabled and place.dist.is_main and (place.run_dir / OUTBOX).is_dir():
        send_outbox(place.run_dir / OUTBOX, done.run_id, resolve_tracking_uri(spec.tracking.uri))
    return done


def check_tracking_store(spec: ExperimentSpec, place: Place) -> None:
    """A dead tracking server fails in one line before the data is prepared."""
    if spec.tracking.enabled and place.dist.is_main:
        check_reachable(resolve_tracking_uri(spec.tracking.uri))


def prepare(spec: ExperimentSpec, data: PreparedData | None) -> PreparedData:
    """Seed everything, then the corpus, tokenizers and batches (unless a study worker has them)."""
    seed_everything(spec.seed)
    data = data if data is not None else prepare_data(spec)
    spec.selection_metric()  # a user error, before any MLflow run exists
    if spec.eval.downstream is not None:  # an unknown task or missing task files: before the run too
        from ablate.run.downstream import check_tasks  # lazy: lm-eval is the optional interop extra
        check_tasks(spec.eval.downstream)
    return data


def build(spec: ExperimentSpec, data: PreparedData, device: torch.device) -> Model:
    """The model from the registry, initialised from the spec's seed (the same weights for every variant
    in every parameter they share)."""
    tok = data.tokenizers
    return build_any(spec.model, tok.src_vocab_size, tok.tgt_vocab_size, pad_id=tok.pad_id,
                     seed=spec.seed).to(device)


def open_tracker(spec: ExperimentSpec, options: RunOptions, place: Place,
                 resume: Checkpoint | None) -> NullTracker:
    """The run's MLflow record (a NullTracker off rank 0 or with tracking off): resumed into the run the
    checkpoint names, else the one the folder recorded when it opened (killed before any checkpoint). Its
    id goes into the run folder at once."""
    if not (spec.tracking.enabled and place.dist.is_main):
        return NullTracker()
    resume_id = (resume["state"].get("run_id") if resume else None) or read_run_id(place.run_dir)
    name = options.run_name
    tracker = Tracker.start(spec, experiment=options.experiment, tags=options.tags,
                            run_name=name or run_label(spec.name, spec.seed),
                            variant=options.variant or (None if name else spec.name),
                            parent_run_id=options.parent_run_id, resume_run_id=resume_id,
                            outbox=place.run_dir / OUTBOX)  # a server outage queues records there
    if tracker.run_id and tracker.run_id != read_run_id(place.run_dir):
        write_run_id(place.run_dir, tracker.run_id)
    return tracker


def wrap(spec: ExperimentSpec, model: Model, place: Place) -> torch.nn.Module:
    """What the training step calls: the model, compiled if asked, inside DDP under torchrun."""
    train_model: torch.nn.Module = model
    if (tspec := spec.train).compile:
        # A study worker compiles one model per cell in the same process: dynamo's cache for the model's
        # forward would count every earlier cell's graphs toward its recompile limit (8) and, past it,
        # silently run eager. Each run compiles its own model anyway.
        torch._dynamo.reset()
        if tspec.compile_scope == "layer":  # compile_mode None: torch's default
            compile_layers(model, tspec.compile_mode)
        else:
            train_model = torch.compile(model, mode=tspec.compile_mode)  # type: ignore[assignment]
    if place.dist.enabled:
        device = place.device
        train_model = DistributedDataParallel(
            train_model, device_ids=[device.index] if device.type == "cuda" else None)
    return train_model


def make_trainer(spec: ExperimentSpec, options: RunOptions, place: Place, data: PreparedData, model: Model,
                 tracker: NullTracker, memory: PeakMemory) -> Trainer:
    return Trainer(spec, data, model, place.run_dir, place.device, sink=tracker, hook=options.hook,
                   rank=place.dist.rank, world_size=place.dist.world_size,
                   train_model=wrap(spec, model, place), memory=memory, show_progress=not options.quiet)


def start_or_resume(trainer: Trainer, resume: Checkpoint | None, tracker: NullTracker, data: PreparedData,
                    place: Place, model: Model) -> float:
    """Go on from the checkpoint, or record the run's start and write its step-0 checkpoint; the padding
    fraction of the first epoch."""
    padding = trainer.batcher.padding_fraction(0)
    if resume is not None:
        trainer.restore(resume)
        # Metrics flushed before the kill are already in MLflow; the tracker drops repeated steps.
        trainer.flush()
    else:
        trainer.state.run_id = tracker.run_id
        log_run_start(tracker, data, place.device, trainer.precision, model, padding)
        tracker.set_tags({record.PARAM_GROUPS: trainer.param_groups})  # the no-decay rule and muP's rates
        trainer.save()  # step 0: a kill from here on resumes into this same MLflow run
    return padding


def result_metrics(spec: ExperimentSpec, place: Place, data: PreparedData, model: Model, trainer: Trainer,
                   tracker: NullTracker, outcome: TrainOutcome, memory: PeakMemory,
                   padding: float) -> dict[str, float]:
    """The run's result: the last evaluation (or the non-finite loss it diverged with), the best
    checkpoint on the whole val/test splits, whole-run throughput, time and memory; logged under final/
    names unless the run was interrupted."""
    status, state = outcome.status, outcome.state
    metrics = dict(state.history[-1][1]) if state.history else {}
    metrics.update(state.stop_metrics)  # a diverged run: the real (non-finite) loss it ended with
    # Constants of the run (logged once at step 0 by log_run_start) and whole-run figures.
    compute = run_compute(model, data, state.target_tokens)
    run_level = {**_constants(model, padding),
                 record.TOKENS_PER_S: state.target_tokens / max(state.train_seconds, 1e-9),
                 record.TRAIN_TOKENS: float(compute.tokens), record.TRAIN_FLOPS: compute.flops}
    evaluated: dict[str, float] = {}
    if status in ("finished", "pruned") and place.dist.is_main:
        with eager():  # per-layer compiled runs evaluate eager
            evaluated = final_evaluation(spec, data, model, trainer, tracker, place.device)
    metrics.update({**run_level, **evaluated})
    metrics[record.WALL_TIME] = trainer.wall_seconds()  # earlier segments of a resumed run included
    metrics[record.CPU_TIME] = trainer.cpu_seconds()
    peak = memory.metrics()
    metrics.update(peak)
    if status != "killed" and place.dist.is_main:
        final = {**evaluated, record.TOKENS_PER_S: run_level[record.TOKENS_PER_S], **peak,
                 record.TRAIN_TOKENS: float(compute.tokens), record.TRAIN_FLOPS: compute.flops,
                 record.WALL_TIME: metrics[record.WALL_TIME], record.CPU_TIME: metrics[record.CPU_TIME]}
        log_run_end(tracker, model, outcome, final)
    return metrics


def log_run_end(tracker: NullTracker, model: Model, outcome: TrainOutcome, final: dict[str, float]) -> None:
    """The run's result under final/ names at the last training step (the training-time curves of val/loss
    etc. end where training ended, and one name means one thing), why it stopped, the attention kernels
    that ran, the loss curve."""
    state = outcome.state
    tracker.log_metrics({record.final(k): v for k, v in final.items()}, step=state.step)
    if outcome.reason:
        tracker.set_tags({record.REASON: outcome.reason})
    kernels = model.attention_kernels()
    if kernels:  # sdpa's semantics through torch's fused kernel or two matmuls: which ones ran
        tracker.set_tags({record.ATTENTION_KERNEL: ", ".join(kernels)})
    val = [(s, m[record.VAL_LOSS]) for s, m in state.history if record.VAL_LOSS in m]
    tracker.log_loss_curve(state.train_curve, val)


def finish(spec: ExperimentSpec, place: Place, trainer: Trainer, tracker: NullTracker,
           outcome: TrainOutcome, metrics: dict[str, float], resume: Checkpoint | None) -> RunResult:
    """Write summary.json and end the MLflow run; an interrupted run raises `Interrupted` instead."""
    status, state = outcome.status, outcome.state
    result = RunResult(status=status, metrics=metrics, spec_hash=spec.spec_hash, run_dir=str(place.run_dir),
                       run_id=tracker.run_id,
                       checkpoint=str(trainer.best_path) if trainer.best_path.exists() else None,
                       history=state.history, reason=outcome.reason, delayed=tracker.delayed(),
                       resumed_at=int(resume["state"]["step"]) if resume is not None else None)
    if status == "killed":
        tracker.end("interrupted")
        # Stopped at a step boundary: that step's checkpoint was just written. Mid-step (a second
        # signal): the last periodic checkpoint is the resume point.
        raise Interrupted(place.run_dir, None if "mid-step" in outcome.reason else state.step,
                          outcome.reason)
    if place.dist.is_main:
        summary = place.run_dir / SUMMARY
        write_summary(summary, result)
        tracker.log_artifact(summary)
    tracker.end(cast("Status", status))  # finished, diverged or pruned here
    return result


def agreed_resume(place: Place) -> Checkpoint | None:
    """The checkpoint every rank resumes from: rank 0's (ablate.run.distributed.rank0_checkpoint)."""
    return rank0_checkpoint(place.dist, place.run_dir, lambda: _resume_point(place.run_dir / LAST_CHECKPOINT))


def _resume_point(path: Path) -> Checkpoint | None:
    """The newest good checkpoint of the run (see `load_verified`), saying in one line when a torn one
    was skipped."""
    found = load_verified(path)
    if found is None:
        return None
    payload, used, problems = found
    if problems:
        print(f"warning: {'; '.join(problems)}: resuming from {used} at step {payload['state']['step']}",
              file=sys.stderr, flush=True)
    return payload


def log_run_start(tracker: NullTracker, data: PreparedData, device: torch.device, precision: str,
                  model: torch.nn.Module, padding: float) -> None:
    """What a new run records once (Tracker.start already logged the flattened spec, spec.yaml and the
    environment): the dataset input, the tokenizers (so `ablate translate` needs nothing but the run),
    the sacreBLEU signatures, the device and the precision it resolved to, and step-0 metrics."""
    tracker.log_dataset(data.name, data.fingerprint, source=data.source)
    tok = data.tokenizers
    tracker.log_text(tok.to_json(), record.TOKENIZERS_ARTIFACT)  # both sides and the normalisation
    tracker.log_text(tok.src.to_str(), record.SRC_TOKENIZER_ARTIFACT)  # plain Hugging Face tokenizers files
    tracker.log_text(tok.tgt.to_str(), record.TGT_TOKENIZER_ARTIFACT)
    # precision: auto trains in bf16 on one machine and fp32 on another: the run says which it got
    tags = {record.DEVICE: describe_device(device), record.DEVICE_INDEX: str(device),
            record.PRECISION: precision, record.FP32_MATMUL: fp32_matmul(device)}
    if data.is_text:
        sig = signatures()
        tags.update({record.BLEU_SIGNATURE: sig["bleu"], record.CHRF_SIGNATURE: sig["chrf"]})
    tracker.set_tags(tags)
    # Constants of the run: logged once (step 0), not again with the result.
    tracker.log_metrics(_constants(model, padding), step=0)


def _count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def _constants(model: torch.nn.Module, padding: float) -> dict[str, float]:
    """A run's constants, logged once at step 0: parameters (all, and without embeddings: the N of
    ablate/engine/compute.py), padding, the vocabulary the model predicts (a tokenizer file's own size, which
    the spec's ``data.tokenizer.vocab_size`` does not say) and, for a decoder-only model, the KV cache's bytes
    per decoded token (model.kv_heads: what grouped-query attention saves in decoding)."""
    out = {record.MODEL_PARAMS: float(_count(model)), record.PADDING: padding,
           record.NON_EMBEDDING_PARAMS: float(shape_of(model).non_embedding)}
    kv = getattr(model, "kv_cache_bytes_per_token", None)
    if kv is not None:
        out[record.KV_CACHE] = float(kv())
    vocab = getattr(getattr(model, "generator", None), "out_features", None)  # the output projection's
    if vocab is not None:
        out[record.VOCAB_SIZE] = float(vocab)
    return out


def run_compute(model: torch.nn.Module, data: PreparedData, tokens: int) -> Compute:
    """The run's training compute (ablate/engine/compute.py): a language model's blocks are its context; a
    translation model's sentence lengths are its training split's."""
    if isinstance(data, LMData):
        return training_compute(model, tokens, context=data.block_len)
    train = data.splits["train"]
    source_len, target_len = mean_lengths(train.src_ids, train.tgt_ids)
    return training_compute(model, tokens, source_len=source_len, target_len=target_len)


# ---------------------------------------------------------------- CLI entry point
def main_run(spec_path: str, overrides: list[str], wait: bool = False, restart: bool = False) -> int:
    """`ablate run SPEC`: one writer per run folder (`RunLock`); SIGTERM/SIGINT checkpoint and exit 143/130
    with one line saying how to resume; ``restart`` trains the run from the start (a new MLflow run)."""
    preempt.install()
    spec = checked_spec(spec_path, overrides)  # the spec and its data files: located lines, nothing written
    run_dir = run_dir_for(spec)
    rank0 = int(os.environ.get("RANK", "0")) == 0
    command = " ".join(["ablate run", spec_path, *(f"--set {o}" for o in overrides)])
    if rank0 and spec.tracking.enabled and not (run_dir / SUMMARY).exists():
        check_reachable(resolve_tracking_uri(spec.tracking.uri))  # a dead server: nothing written, no lock
    try:
        lock = RunLock(run_dir, wait=wait) if rank0 else None
        if lock is not None:
            lock.acquire()
        try:
            if restart and rank0:
                clear_run(run_dir)
            result = run_experiment(spec)
        finally:
            if lock is not None:
                lock.release()
    except KeyboardInterrupt as exc:
        step = exc.step if isinstance(exc, Interrupted) else None
        where = f"checkpoint at step {step}" if step is not None else "the last checkpoint"
        print(f"interrupted by {preempt.signal_name()}: {preempt.late()}resume from {where} in {run_dir} "
              f"with `{command}`", file=sys.stderr, flush=True)
        return preempt.exit_code()
    if int(os.environ.get("RANK", "0")) == 0:
        print(format_summary(spec, result))
    return 0 if result.status in TERMINAL else 1
