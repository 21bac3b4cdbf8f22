"""What a resumable run saves: the trainer's state, RNG states, and atomic checkpoint files.

A checkpoint holds model, optimizer, scheduler, scaler, RNG states and a `TrainState` (data position,
step, logging window, pending metrics, evaluation history, the MLflow run id and, once decided, why the
run stopped). It is written to a temporary file and renamed over the previous one, so a kill at any moment
leaves either the old or the new checkpoint whole, and it loads with ``weights_only=True``.
"""

from __future__ import annotations

import os
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

CHECKPOINT_VERSION = 1


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
    # Set when an evaluation or a step decides the end (early stop, tuner prune, divergence) and saved with
    # it: a run killed after that checkpoint but before its summary ends on restart, it does not train on.
    stop_status: str | None = None  # finished | pruned | diverged
    stop_reason: str = ""
    stop_metrics: dict[str, float] = field(default_factory=dict)  # a diverged run's last train/loss and lr


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
