"""The run folder: keyed by the spec hash and seed, it holds a run's checkpoints, the MLflow run id from
the moment the run opens, the outbox of records waiting for a tracking server, and the summary of a run
that ended. Starting the same spec again resumes from it; ``--restart`` clears it.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ablate.spec import metricnames
from ablate.spec.experiment import ExperimentSpec
from ablate.tracking import record

RUN_ID_FILE = "run_id"  # the MLflow run id, written as soon as the run opens (before any checkpoint)
OUTBOX = "outbox"  # tracking records waiting for a server that did not answer
SUMMARY = "summary.json"  # a run that ended: its RunResult
LAST_CHECKPOINT = "last.pt"
TERMINAL = ("finished", "diverged", "pruned")  # a summary with one of these is not trained again


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


def run_dir_for(spec: ExperimentSpec) -> Path:
    return Path(spec.train.out_dir) / spec.name / f"{spec.spec_hash}-s{spec.seed}"


def read_run_id(run_dir: Path) -> str | None:
    path = run_dir / RUN_ID_FILE
    return (path.read_text().strip() or None) if path.is_file() else None


def write_run_id(run_dir: Path, run_id: str) -> None:
    """Atomically: a kill between the run opening and its step-0 checkpoint resumes into this run."""
    run_dir.mkdir(parents=True, exist_ok=True)
    tmp = run_dir / f".{RUN_ID_FILE}.{os.getpid()}.tmp"
    tmp.write_text(run_id + "\n")
    os.replace(tmp, run_dir / RUN_ID_FILE)


def read_summary(run_dir: Path) -> RunResult | None:
    path = run_dir / SUMMARY
    return RunResult(**json.loads(path.read_text())) if path.exists() else None


def write_summary(path: Path, result: RunResult) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(result), indent=2, sort_keys=True))
    os.replace(tmp, path)


def clear_run(run_dir: Path) -> None:
    """`--restart`: drop the run folder's checkpoints, summary, run id and outbox; a new MLflow run starts."""
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


# The summary's rows: result metrics under their MLflow names (final/ for what the final evaluation and
# the whole run measured, plain for the constants logged once), in reading order.
SUMMARY_KEYS = (metricnames.VAL_LOSS, metricnames.VAL_PPL, metricnames.VAL_BPB, metricnames.VAL_BLEU,
                metricnames.VAL_CHRF, metricnames.VAL_EXACT_MATCH,
                metricnames.TEST_LOSS, metricnames.TEST_BPB, metricnames.TEST_BLEU, metricnames.TEST_CHRF,
                metricnames.TEST_EXACT_MATCH, metricnames.TRAIN_LOSS,
                metricnames.MODEL_PARAMS, metricnames.TOKENS_PER_S, metricnames.WALL_TIME,
                metricnames.CPU_TIME, metricnames.PADDING, metricnames.PEAK_MEMORY, metricnames.RUN_MEMORY)


def format_summary(spec: ExperimentSpec, result: RunResult) -> str:
    lines = [f"{spec.name} [{result.spec_hash}, seed {spec.seed}]: {result.status}"
             + (f" ({result.reason})" if result.reason else "")]
    whole_run = (record.TOKENS_PER_S, record.WALL_TIME, record.CPU_TIME, record.PEAK_MEMORY,
                 record.RUN_MEMORY)
    metrics = dict(result.metrics)
    if "wall_time_s" in metrics:  # a summary.json written before train/wall_time_s
        metrics.setdefault(record.WALL_TIME, metrics.pop("wall_time_s"))
    final = result.status in ("finished", "pruned")  # a diverged run has its last training values only
    for key in SUMMARY_KEYS:
        if key in metrics:
            value = metrics[key]
            evaluated = final and key.startswith(("val/", "test/"))  # the best checkpoint, whole splits
            shown = record.final(key) if evaluated or key in whole_run else key
            text = f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"
            lines.append(f"  {shown:<28} {text}")
    lines.append(f"  {'run dir':<28} {result.run_dir}")
    if result.checkpoint:
        lines.append(f"  {'best checkpoint':<28} {result.checkpoint}")
    if result.run_id:
        lines.append(f"  {'MLflow run':<28} {result.run_id} (open with `ablate ui`)")
    return "\n".join(lines)
