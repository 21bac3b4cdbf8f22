"""`ablate run`: one spec from data to a tracked, evaluated, resumable run.

Order of work: validate (done by the caller) -> data -> model -> train ->
best weights -> val/test evaluation -> summary. A run directory keyed by the
spec hash and seed holds the checkpoints; starting the same spec again resumes
from it (the MLflow run id rides in the checkpoint, and in ``run_id`` from the
moment the run opens), and a finished run is reported, not retrained.
"""

from __future__ import annotations

import json
import os
import random
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

import ablate.tracking.record as R
from ablate.data.prepare import PreparedData, prepare_data
from ablate.engine import metrics as M
from ablate.engine.checkpoint import load_verified
from ablate.engine.evaluate import evaluate, has_split, samples_text
from ablate.engine.lm import DecoderOnlyLM, build_any
from ablate.engine.model import Seq2SeqTransformer
from ablate.engine.progress import PeakMemory
from ablate.engine.train import EvalHook, Trainer
from ablate.hardware import keep_freed_memory_in_process, resolve_precision
from ablate.spec.experiment import ExperimentSpec

TERMINAL = ("finished", "diverged", "pruned")


@dataclass
class RunResult:
    """What `run_experiment` returns (and ``summary.json`` holds). ``metrics`` is the run's result under
    plain names (``val/bleu``: the best checkpoint on the whole split); MLflow holds the same numbers as
    ``final/val/bleu`` (`ablate.tracking.record.final`), beside the training-time ``val/bleu`` curve."""

    status: str
    metrics: dict[str, float]
    spec_hash: str
    run_dir: str
    run_id: str | None = None
    checkpoint: str | None = None
    history: list[tuple[int, dict[str, float]]] = field(default_factory=list)
    reason: str = ""
    delayed: int = 0  # tracking operations that waited in the outbox for a server that did not answer
    resumed_at: int | None = None  # the checkpoint step this process went on from; None: trained from step 0


def run_label(variant: str, seed: int) -> str:
    """An MLflow run name: 'baseline · seed 1' (two seeds of one variant read differently)."""
    return f"{variant} · seed {seed}"


def run_dir_for(spec: ExperimentSpec) -> Path:
    return Path(spec.train.out_dir) / spec.name / f"{spec.spec_hash}-s{spec.seed}"


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


# ---------------------------------------------------------------- distributed
@dataclass
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1


def init_distributed() -> DistInfo:
    """Join the process group when started by torchrun (gloo on CPU, nccl on GPU)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DistInfo()
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    return DistInfo(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", "0")))


def pick_device(info: DistInfo) -> torch.device:
    if torch.cuda.is_available():
        torch.cuda.set_device(info.local_rank)
        return torch.device("cuda", info.local_rank)
    return torch.device("cpu")


# ---------------------------------------------------------------- the run
RUN_ID_FILE = "run_id"  # the MLflow run id, written as soon as the run opens (before any checkpoint)


def read_run_id(run_dir: Path) -> str | None:
    path = run_dir / RUN_ID_FILE
    return (path.read_text().strip() or None) if path.is_file() else None


def write_run_id(run_dir: Path, run_id: str) -> None:
    """Atomically: a kill between the run opening and its step-0 checkpoint resumes into this run."""
    run_dir.mkdir(parents=True, exist_ok=True)
    tmp = run_dir / f".{RUN_ID_FILE}.{os.getpid()}.tmp"
    tmp.write_text(run_id + "\n")
    os.replace(tmp, run_dir / RUN_ID_FILE)


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
    threads_before = torch.get_num_threads()
    if spec.train.threads:
        torch.set_num_threads(spec.train.threads)
    try:
        return _run(spec, hook=hook, run_dir=run_dir, tags=tags, parent_run_id=parent_run_id,
                    experiment=experiment, run_name=run_name, data=data, quiet=quiet, on_start=on_start,
                    variant=variant)
    finally:
        torch.set_num_threads(threads_before)


def _run(spec: ExperimentSpec, *, hook: EvalHook | None, run_dir: Path | None, tags: dict[str, str] | None,
         parent_run_id: str | None, experiment: str | None, run_name: str | None,
         data: PreparedData | None, quiet: bool, on_start: Callable[[str | None], None] | None,
         variant: str | None = None) -> RunResult:
    from ablate.tracking import NullTracker, Tracker

    dist_info = init_distributed()
    device = pick_device(dist_info)
    if device.type == "cpu":
        keep_freed_memory_in_process()  # a fifth of a CPU step went to page faults on freed logits
    run_dir = Path(run_dir) if run_dir is not None else run_dir_for(spec)
    summary_path = run_dir / "summary.json"
    if summary_path.exists():
        done = RunResult(**json.loads(summary_path.read_text()))
        if done.status in TERMINAL:
            if spec.tracking.enabled and dist_info.rank == 0 and (run_dir / OUTBOX).is_dir():
                from ablate.tracking import resolve_tracking_uri, send_outbox

                send_outbox(run_dir / OUTBOX, done.run_id, resolve_tracking_uri(spec.tracking.uri))
            return done

    if spec.tracking.enabled and dist_info.rank == 0:
        from ablate.tracking import check_reachable, resolve_tracking_uri

        check_reachable(resolve_tracking_uri(spec.tracking.uri))  # a dead server fails before data prep
    memory = PeakMemory(device)
    memory.reset()  # this run's peak, not the worker process's
    seed_everything(spec.seed)
    data = data if data is not None else prepare_data(spec)
    spec.selection_metric()  # a user error, before any MLflow run exists
    tok = data.tokenizers
    model = build_any(spec.model, tok.src_vocab_size, tok.tgt_vocab_size, pad_id=tok.pad_id,
                      seed=spec.seed).to(device)
    resume = _resume_point(run_dir / "last.pt")
    # The checkpoint's run id, else the one recorded when the run opened (killed before any checkpoint).
    resume_id = (resume["state"].get("run_id") if resume else None) or read_run_id(run_dir)

    is_main = dist_info.rank == 0
    tracker: Any = NullTracker()
    if spec.tracking.enabled and is_main:
        tracker = Tracker.start(spec, experiment=experiment, tags=tags,
                                run_name=run_name or run_label(spec.name, spec.seed),
                                variant=variant or (None if run_name else spec.name),
                                parent_run_id=parent_run_id, resume_run_id=resume_id,
                                outbox=run_dir / OUTBOX)  # a server outage queues records there
        if tracker.run_id and tracker.run_id != read_run_id(run_dir):
            write_run_id(run_dir, tracker.run_id)
    if on_start is not None:
        on_start(tracker.run_id)
    try:
        train_model: torch.nn.Module = model
        if spec.train.compile:
            # A study worker compiles one model per cell in the same process: dynamo's cache for the model's
            # forward would count every earlier cell's graphs toward its recompile limit (8) and, past it,
            # silently run eager. Each run compiles its own model anyway.
            torch._dynamo.reset()
            train_model = torch.compile(model)  # type: ignore[assignment]
        if dist_info.enabled:
            from torch.nn.parallel import DistributedDataParallel

            train_model = DistributedDataParallel(
                train_model, device_ids=[device.index] if device.type == "cuda" else None)
        trainer = Trainer(spec, data, model, run_dir, device, sink=tracker, hook=hook,
                          rank=dist_info.rank, world_size=dist_info.world_size, train_model=train_model,
                          memory=memory, show_progress=not quiet)
        padding = trainer.batcher.padding_fraction(0)
        if resume is not None:
            trainer.restore(resume)
            # Metrics flushed before the kill are already in MLflow; the tracker drops repeated steps.
            trainer.flush()
        else:
            trainer.state.run_id = tracker.run_id
            log_run_start(tracker, data, device, trainer.precision, model, padding)
            trainer.save()  # step 0: a kill from here on resumes into this same MLflow run
        outcome = trainer.fit()
        status, state = outcome.status, outcome.state
        metrics = dict(state.history[-1][1]) if state.history else {}
        metrics.update(state.stop_metrics)  # a diverged run: the real (non-finite) loss it ended with
        # Constants of the run (logged once at step 0 by log_run_start) and whole-run figures.
        run_level = {R.MODEL_PARAMS: float(_count(model)), R.PADDING: padding,
                     R.TOKENS_PER_S: state.target_tokens / max(state.train_seconds, 1e-9)}
        evaluated: dict[str, float] = {}
        if status in ("finished", "pruned") and is_main:
            evaluated = final_evaluation(spec, data, model, trainer, tracker, device)
        metrics.update(run_level)
        metrics.update(evaluated)
        metrics[R.WALL_TIME] = trainer.wall_seconds()  # earlier segments of a resumed run included
        peak = memory.metrics()
        metrics.update(peak)
        if status != "killed" and is_main:
            # The run's result (best checkpoint on the whole val/test splits, whole-run throughput, time and
            # memory) under final/ names at the last training step: the training-time curves of val/loss
            # etc. end where training ended, and one name means one thing.
            final = {**evaluated, R.TOKENS_PER_S: run_level[R.TOKENS_PER_S], **peak,
                     R.WALL_TIME: metrics[R.WALL_TIME]}
            tracker.log_metrics({R.final(k): v for k, v in final.items()}, step=state.step)
            if outcome.reason:
                tracker.set_tags({R.REASON: outcome.reason})
            kernels = model.attention_kernels()
            if kernels:  # sdpa's semantics through torch's fused kernel or two matmuls: which ones ran
                tracker.set_tags({R.ATTENTION_KERNEL: ", ".join(kernels)})
            val = [(s, m[R.VAL_LOSS]) for s, m in state.history if R.VAL_LOSS in m]
            tracker.log_loss_curve(state.train_curve, val)
        result = RunResult(status=status, metrics=metrics, spec_hash=spec.spec_hash, run_dir=str(run_dir),
                           run_id=tracker.run_id,
                           checkpoint=str(trainer.best_path) if trainer.best_path.exists() else None,
                           history=state.history, reason=outcome.reason, delayed=tracker.delayed(),
                           resumed_at=int(resume["state"]["step"]) if resume is not None else None)
        if is_main and status != "killed":
            write_summary(summary_path, result)
            tracker.log_artifact(summary_path)
        if status == "killed":
            tracker.end("interrupted")
            # Stopped at a step boundary: that step's checkpoint was just written. Mid-step (a second
            # signal): the last periodic checkpoint is the resume point.
            raise Interrupted(run_dir, None if "mid-step" in outcome.reason else state.step, outcome.reason)
        tracker.end(status)
        return result
    except KeyboardInterrupt:
        tracker.end("interrupted")
        raise
    except BaseException:
        try:
            tracker.end("failed")
        except Exception:  # noqa: BLE001 - the store may be what failed (full disk): keep the first error
            pass
        raise


OUTBOX = "outbox"  # in the run folder: tracking records waiting for a server that did not answer


class Interrupted(KeyboardInterrupt):
    """A run stopped by SIGTERM/SIGINT after writing its checkpoint (``step``)."""

    def __init__(self, run_dir: Path, step: int | None, reason: str) -> None:
        super().__init__(reason)
        self.run_dir, self.step, self.reason = run_dir, step, reason


def _resume_point(path: Path) -> dict[str, Any] | None:
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


def log_run_start(tracker: Any, data: PreparedData, device: torch.device, precision: str,
                  model: torch.nn.Module, padding: float) -> None:
    """What a new run records once (Tracker.start already logged the flattened spec, spec.yaml and the
    environment): the dataset input, the tokenizers (so `ablate translate` needs nothing but the run),
    the sacreBLEU signatures, the device and the precision it resolved to, and step-0 metrics."""
    tracker.log_dataset(data.name, data.fingerprint, source=data.source)
    tok = data.tokenizers
    tracker.log_text(tok.to_json(), R.TOKENIZERS_ARTIFACT)  # both sides and the normalisation
    tracker.log_text(tok.src.to_str(), R.SRC_TOKENIZER_ARTIFACT)  # plain Hugging Face tokenizers files
    tracker.log_text(tok.tgt.to_str(), R.TGT_TOKENIZER_ARTIFACT)
    # precision: auto trains in bf16 on one machine and fp32 on another: the run says which it got
    tags = {R.DEVICE: describe_device(device), R.PRECISION: precision}
    if data.is_text:
        sig = M.signatures()
        tags.update({R.BLEU_SIGNATURE: sig["bleu"], R.CHRF_SIGNATURE: sig["chrf"]})
    tracker.set_tags(tags)
    # Constants of the run: logged once (step 0), not again with the result.
    tracker.log_metrics({R.MODEL_PARAMS: float(_count(model)), R.PADDING: padding}, step=0)


def final_evaluation(spec: ExperimentSpec, data: PreparedData, model: Seq2SeqTransformer | DecoderOnlyLM,
                     trainer: Trainer, tracker: Any, device: torch.device) -> dict[str, float]:
    """Evaluate the best checkpoint (by the validation metric) on the whole val and test splits (no
    ``eval.max_sentences`` cap); log samples and artifacts."""
    best = load_verified(trainer.best_path)  # a torn best.pt is one line, not a zip-reader traceback
    if best is not None:
        model.load_state_dict(best[0]["model"])
    precision = resolve_precision(spec.train.precision, device)
    out: dict[str, float] = {}
    for split in ("val", "test"):
        if has_split(data, split):
            out.update(evaluate(model, data, split, spec, device, precision, decode=True, limit=None))
    if spec.eval.samples:
        tracker.log_text(samples_text(model, data, spec, device), R.SAMPLES_ARTIFACT)
    if spec.tracking.log_checkpoint and trainer.best_path.exists():
        tracker.log_artifact(trainer.best_path, R.CHECKPOINT_DIR)
    if spec.tracking.log_model:
        tracker.log_model(model)
    return out


def describe_device(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    import platform

    return f"cpu ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"


def write_summary(path: Path, result: RunResult) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(result), indent=2, sort_keys=True))
    os.replace(tmp, path)


def _count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


# ---------------------------------------------------------------- CLI entry points
# The summary's rows: result metrics under their MLflow names (final/ for what the final evaluation and
# the whole run measured, plain for the constants logged once), in reading order.
SUMMARY_KEYS = ("val/loss", "val/ppl", "val/bpb", "val/bleu", "val/chrf", "val/exact_match", "test/loss",
                "test/bpb", "test/bleu", "test/chrf", "test/exact_match", "train/loss", "model/params",
                "train/tokens_per_s", "train/wall_time_s", "data/padding_fraction", "peak_memory_mb")


def format_summary(spec: ExperimentSpec, result: RunResult) -> str:
    lines = [f"{spec.name} [{result.spec_hash}, seed {spec.seed}]: {result.status}"
             + (f" ({result.reason})" if result.reason else "")]
    whole_run = (R.TOKENS_PER_S, R.WALL_TIME, R.PEAK_MEMORY)
    metrics = dict(result.metrics)
    if "wall_time_s" in metrics:  # a summary.json written before train/wall_time_s
        metrics.setdefault(R.WALL_TIME, metrics.pop("wall_time_s"))
    final = result.status in ("finished", "pruned")  # a diverged run has its last training values only
    for key in SUMMARY_KEYS:
        if key in metrics:
            value = metrics[key]
            evaluated = final and key.startswith(("val/", "test/"))  # the best checkpoint, whole splits
            shown = R.final(key) if evaluated or key in whole_run else key
            text = f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"
            lines.append(f"  {shown:<28} {text}")
    lines.append(f"  {'run dir':<28} {result.run_dir}")
    if result.checkpoint:
        lines.append(f"  {'best checkpoint':<28} {result.checkpoint}")
    if result.run_id:
        lines.append(f"  {'MLflow run':<28} {result.run_id} (open with `ablate ui`)")
    return "\n".join(lines)


def main_run(spec_path: str, overrides: list[str], wait: bool = False, restart: bool = False) -> int:
    """`ablate run SPEC`: one writer per run folder (`RunLock`); SIGTERM/SIGINT checkpoint and exit 143/130
    with one line saying how to resume; ``restart`` trains the run from the start (a new MLflow run)."""
    from ablate.engine import preempt
    from ablate.run.lock import RunLock
    from ablate.spec.load import load_spec

    preempt.install()
    spec = load_spec(spec_path, overrides)
    run_dir = run_dir_for(spec)
    rank0 = int(os.environ.get("RANK", "0")) == 0
    command = " ".join(["ablate run", spec_path, *(f"--set {o}" for o in overrides)])
    if rank0 and spec.tracking.enabled and not (run_dir / "summary.json").exists():
        from ablate.tracking import check_reachable, resolve_tracking_uri

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


def clear_run(run_dir: Path) -> None:
    """`--restart`: drop the run folder's checkpoints, summary, run id and outbox; a new MLflow run starts."""
    import shutil

    if not run_dir.is_dir():
        return
    for path in run_dir.iterdir():
        if path.name == ".lock":
            continue
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()
    print(f"note: --restart: cleared {run_dir}; training from step 0 in a new MLflow run", file=sys.stderr)
