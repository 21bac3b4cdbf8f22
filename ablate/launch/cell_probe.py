"""What one cell of a study costs here, measured part by part before the study runs (`probe_cell`), for the
dry run's wall-time estimate (ablate/launch/wall_time.py).

A cell is more than its training steps: a worker process starts (Python, torch and ablate imported), its
data is prepared (the first time cold, then from the cache the first left), the model is built, each
optimizer step runs at the cell's own batch shapes (length-bucketed batches: some short, some long),
evaluations come every ``train.eval_every`` steps, checkpoints are written, the best checkpoint is
evaluated on the whole validation and test splits at the end, and MLflow records the run. The probe times
each of these with the spec's own settings, in a temporary folder, and `CellParts.cell_s` adds them up
with the counts the spec implies.

Two parts cannot be timed as they are on an untrained model: decoding runs to the length bound, where a
trained model stops at its end-of-sentence. The probe decodes one batch of validation sentences and scales
its time by the steps a trained model takes (each batch's longest reference, batched as evaluation
batches them) over the steps it took.

Workers that share this machine's cores or a GPU each run slower than one alone: `probe_cell` runs as many
probes at once as workers will share the machine, each with the thread share a worker gets, and averages
what they measured.
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing as mp
import os
import statistics
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from queue import Empty
from typing import Any

import torch

from ablate.data.lm_corpus import LMData
from ablate.data.prepare import PreparedData, prepare_data
from ablate.engine.checkpoint import save_checkpoint
from ablate.engine.decode import length_sorted_batches
from ablate.engine.evaluate import evaluate, has_split, samples_text, translate_split
from ablate.engine.trainer import Trainer
from ablate.hardware import autocast_context, prepare_device, resolve_precision
from ablate.run.distributed import DistInfo, pick_device
from ablate.run.runner import build
from ablate.spec import metricnames
from ablate.spec.experiment import ExperimentSpec
from ablate.tracking import Tracker  # mlflow: imported only when the spec tracks

TIMED_STEPS = 20  # optimizer steps timed, after WARM_STEPS untimed ones (allocation, first kernels)
WARM_STEPS = 3
DECODE_BATCH = 128  # sentences decoded to time decoding: one batch, as evaluation batches them
LOG_RECORDS = 20  # metric records timed through MLflow, scaled to the cell's count


@dataclass(frozen=True)
class CellParts:
    """Seconds each part of one cell takes, and how many of each a cell has (from its spec)."""

    start_s: float  # a spawned worker process until it can train (0 when the probe ran in this process)
    prepare_s: float  # the data prepared the first time: corpus, tokenizers, batches
    reprepare_s: float  # prepared again (a worker's next seed): from the cache the first left
    build_s: float  # the model built on its device
    step_s: float  # one optimizer step, the mean over batches of the cell's own shapes
    eval_s: float  # one evaluation during training (val loss; decoding when the spec decodes then)
    final_s: float  # the best checkpoint on the whole val and test splits, decoded, and the samples
    checkpoint_s: float  # one checkpoint with its optimizer state (last.pt)
    best_s: float  # one best-so-far checkpoint (best.pt: the weights only)
    tracking_s: float  # MLflow's share of one cell: its run opened, params, artifacts, metrics, ended
    steps: int
    evals: int
    checkpoints: int

    def cell_s(self) -> float:
        """One cell, once its worker is up and its data prepared."""
        return (self.build_s + self.steps * self.step_s + self.evals * (self.eval_s + self.best_s)
                + self.checkpoints * self.checkpoint_s + self.final_s + self.tracking_s)

    def parts_text(self) -> str:
        """'1000 steps x 45 ms, 5 evaluations x 1.2 s, ...': what the cell time is made of."""
        return (f"{self.steps} steps x {_short(self.step_s)}, {self.evals} evaluations x "
                f"{_short(self.eval_s + self.best_s)}, {self.checkpoints} checkpoints x "
                f"{_short(self.checkpoint_s)}, final evaluation {_short(self.final_s)}, MLflow "
                f"{_short(self.tracking_s)}, model {_short(self.build_s)}")


def _short(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.1f} s"


def mean_parts(found: Sequence[CellParts]) -> CellParts:
    """The parts that several probes running at once measured, averaged (counts are the spec's)."""
    values: dict[str, Any] = {}
    for f in fields(CellParts):
        items = [getattr(p, f.name) for p in found]
        values[f.name] = items[0] if f.type in ("int", int) else statistics.fmean(items)
    return CellParts(**values)


def counts(spec: ExperimentSpec, total_steps: int) -> tuple[int, int]:
    """(evaluations, checkpoints) of a cell of ``total_steps`` steps: an evaluation every eval_every steps
    and at the last (each followed by a checkpoint), and a checkpoint every checkpoint_every steps
    between them (the trainer's loop)."""
    every, ckpt = spec.train.eval_every, spec.train.checkpoint_every
    evals = total_steps // every + (1 if total_steps % every else 0)
    between = sum(1 for s in range(ckpt, total_steps + 1, ckpt) if s % every and s != total_steps)
    return evals, evals + between


# ---------------------------------------------------------------- one probe, in this process
def probe_parts(spec: ExperimentSpec, threads: int | None = None) -> CellParts:
    """Measure every part of one cell of ``spec`` here, in a temporary folder (nothing of the study's
    written); ``threads``: torch's threads, the share a study worker gets (default: this process's)."""
    before = torch.get_num_threads()
    if spec.train.threads or threads:
        torch.set_num_threads(spec.train.threads or threads or before)
    try:
        with tempfile.TemporaryDirectory(prefix="ablate-probe-") as tmp:
            return _probe_in(_probe_spec(spec, Path(tmp)), Path(tmp))
    finally:
        torch.set_num_threads(before)


def _probe_spec(spec: ExperimentSpec, tmp: Path) -> ExperimentSpec:
    return spec.model_copy(update={
        "train": spec.train.model_copy(update={"out_dir": str(tmp / "runs")}),
        "data": spec.data.model_copy(update={"cache_dir": str(tmp / "cache")}),  # cold: its own cache
        "tracking": spec.tracking.model_copy(update={"enabled": False})})


def _timed(fn: Any, *args: Any, **kwargs: Any) -> tuple[Any, float]:
    started = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - started


def _probe_in(spec: ExperimentSpec, tmp: Path) -> CellParts:
    device = pick_device(DistInfo(), spec.train.device)
    prepare_device(device)
    data, prepare_s = _timed(prepare_data, spec)
    _, reprepare_s = _timed(prepare_data, spec)  # the cache the first call wrote
    model, build_s = _timed(build, spec, data, device)
    trainer = Trainer(spec, data, model, tmp / "run", device, show_progress=False, train_model=model)
    for _ in range(WARM_STEPS):
        trainer.train_step()
    steps = []
    for _ in range(TIMED_STEPS):
        steps.append(_timed(trainer.train_step)[1])
    _, checkpoint_s = _timed(trainer.save)
    payload = {"model": model.state_dict(), "step": trainer.state.step, "spec_hash": spec.spec_hash}
    _, best_s = _timed(save_checkpoint, tmp / "run" / "best.pt", payload)
    evals, checkpoints = counts(spec, trainer.total_steps)
    eval_s, final_s = _evaluation_seconds(spec, data, model, trainer, device)
    return CellParts(0.0, prepare_s, reprepare_s, build_s, statistics.fmean(steps), eval_s, final_s,
                     checkpoint_s, best_s, 0.0, trainer.total_steps, evals, checkpoints)


def _evaluation_seconds(spec: ExperimentSpec, data: PreparedData, model: Any, trainer: Trainer,
                        device: torch.device) -> tuple[float, float]:
    """(one evaluation during training, the final evaluation): language models as they are; a translation
    model's decoding scaled to a trained model's lengths (`decode_seconds`)."""
    precision = trainer.precision
    splits = [s for s in ("val", "test") if has_split(data, s)]
    if isinstance(data, LMData):
        loss = {s: _timed(evaluate, model, data, s, spec, device, precision, decode=False)[1] for s in splits}
        _, samples_s = _timed(samples_text, model, data, spec, device) if spec.eval.samples else (None, 0.0)
        return loss.get("val", 0.0), sum(loss.values()) + samples_s
    loss = {s: _timed(evaluate, model, data, s, spec, device, precision, decode=False)[1] for s in splits}
    per_sentence_step = decode_seconds(spec, data, model, device)
    during = 0.0
    if spec.eval.bleu_during_training and "val" in splits:
        during = per_sentence_step * decode_steps(spec, data, "val", spec.eval.max_sentences)
    final = sum(loss.values()) + per_sentence_step * sum(decode_steps(spec, data, s, None) for s in splits)
    if spec.eval.samples:
        final += per_sentence_step * decode_steps(spec, data, "test" if "test" in splits else "val",
                                                  spec.eval.samples)
    if spec.train.weight_average is not None:  # the averaged weights are read on the same splits again
        final *= 2
    return loss.get("val", 0.0) + during, final


def decode_seconds(spec: ExperimentSpec, data: PreparedData, model: Any, device: torch.device) -> float:
    """Seconds of decoding per (sentence x decoding step), timed on one batch of validation sentences."""
    part = data.splits["val"]
    n = min(DECODE_BATCH, len(part.src_ids))
    model.eval()
    with torch.no_grad(), autocast_context(resolve_precision(spec.train.precision, device), device):
        translations, seconds = _timed(translate_split, model, data, "val", spec, device, limit=n)
    model.train()
    taken = max(len(h) for h in translations.hypothesis_ids) + 1  # the batch runs to its longest row
    return seconds / (n * taken)


def decode_steps(spec: ExperimentSpec, data: PreparedData, split: str, limit: int | None) -> int:
    """Sentence x decoding steps a trained model takes on ``split`` (its first ``limit`` sentences): each
    evaluation batch runs to its longest reference, plus its end-of-sentence."""
    part = data.splits[split]
    n = len(part.src_ids) if limit is None else min(limit, len(part.src_ids))
    total = 0
    for chunk, _ in length_sorted_batches(part.src_ids, range(n), DECODE_BATCH, data.tokenizers.pad_id):
        total += len(chunk) * (max(len(part.tgt_ids[i]) for i in chunk) + 1)
    return total


# ---------------------------------------------------------------- MLflow's share
def tracking_seconds(spec: ExperimentSpec, parts: CellParts) -> float:
    """MLflow's share of one cell: a run opened with the spec's params and artifacts, the cell's metric
    records (LOG_RECORDS timed, scaled), its loss curve and summary, ended; on a temporary store made
    first (its creation, once per store, not counted)."""
    # In the store's folder, named by the environment too: MLflow puts a new store's artifacts under the
    # working directory, and parts of a run (its dataset input, figures) read the environment's store.
    with tempfile.TemporaryDirectory(prefix="ablate-probe-store-") as tmp, contextlib.chdir(tmp), \
            _environment("MLFLOW_TRACKING_URI", f"sqlite:///{Path(tmp) / 'mlflow.db'}") as uri:
        tracked = spec.model_copy(update={"tracking": spec.tracking.model_copy(
            update={"uri": uri, "experiment": "probe", "system_metrics": False})})
        Tracker.start(tracked, run_name="warm-up").end("finished")  # the store's tables: not a cell's cost
        started = time.perf_counter()
        tracker = Tracker.start(tracked, run_name="probe")
        log_every = max(1, min(50, spec.train.eval_every // 4 or 1))
        records = parts.steps // log_every + parts.evals
        timed = min(LOG_RECORDS, records)
        for step in range(timed):
            tracker.log_metrics({metricnames.TRAIN_LOSS: 1.0, metricnames.TRAIN_LR: 1e-3,
                                 metricnames.TOKENS_PER_S: 1.0}, step=step)
        tracker.flush()
        logging_s = time.perf_counter() - started
        tracker.log_loss_curve([(s, 1.0) for s in range(timed)], [])
        tracker.log_text("{}", "summary.json")
        tracker.end("finished")
        whole = time.perf_counter() - started
    return whole + logging_s * (records - timed) / max(1, timed)


@contextlib.contextmanager
def _environment(name: str, value: str) -> Iterator[str]:
    """``name`` set to ``value`` inside the block, put back as it was after it."""
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield value
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


# ---------------------------------------------------------------- several at once
def probe_cell(spec: ExperimentSpec, copies: int = 1, threads: int | None = None,
               spawned: bool = False) -> CellParts:
    """The cell's parts as ``copies`` workers sharing this machine meet them: that many probes at once,
    each on ``threads`` torch threads (one probe in this process when ``copies`` is 1 and the study's
    worker is this process, else spawned ones, whose start is timed too), averaged; MLflow's share
    measured once, after them (it is the store's, not the cores')."""
    if copies <= 1 and not spawned:
        parts = probe_parts(spec, threads)
    else:
        parts = mean_parts(_spawned_probes(spec, max(1, copies), threads))
    if spec.tracking.enabled:
        parts = CellParts(**{**asdict(parts), "tracking_s": tracking_seconds(spec, parts)})
    return parts


def _spawned_probes(spec: ExperimentSpec, copies: int, threads: int | None) -> list[CellParts]:
    ctx = mp.get_context("spawn")  # as study workers start (ablate/launch/local_workers.py)
    queue = ctx.Queue()
    text = spec.model_dump_json()
    started = time.time()
    procs = [ctx.Process(target=_probe_entry, args=(text, threads, queue), name=f"ablate-probe-{i}")
             for i in range(copies)]
    for p in procs:
        p.start()
    found: list[CellParts] = []
    try:
        while len(found) < copies:
            try:
                ready, parts = queue.get(timeout=2.0)
            except Empty:
                dead = [p for p in procs if p.exitcode not in (None, 0)]
                if dead:  # it said why on stderr; the estimate says it is unknown
                    raise ProbeFailed(f"a probe process exited with code {dead[0].exitcode}") from None
                continue
            found.append(CellParts(**{**parts, "start_s": max(0.0, ready - started)}))
    finally:
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
    return found


class ProbeFailed(Exception):
    """A probe could not measure the cell (a spawned probe died): the estimate is unknown, not wrong."""


def _probe_entry(spec_json: str, threads: int | None, queue: Any) -> None:
    """A spawned probe: when it is ready to train (its imports done), then what it measured."""
    ready = time.time()
    spec = ExperimentSpec.model_validate_json(spec_json)
    queue.put((ready, asdict(probe_parts(spec, threads))))
    queue.close()
    queue.join_thread()  # the result is through the pipe before this process ends


def study_seconds(parts: CellParts, cells: int, parallel: int, seeds: int) -> float:
    """Wall seconds of ``cells`` cells, ``parallel`` at a time, in whole waves: each worker starts once,
    prepares its data once per seed it meets (cold the first time, then from the cache), then trains its
    cells one after the other."""
    if cells <= 0:
        return 0.0
    waves = math.ceil(cells / max(1, parallel))
    preparations = max(1, min(waves, seeds))
    return (parts.start_s + parts.prepare_s + (preparations - 1) * parts.reprepare_s
            + waves * parts.cell_s())
