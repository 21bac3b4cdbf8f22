"""What a resumable run saves: the trainer's state, RNG states, and atomic checkpoint files.

A checkpoint holds model, optimizer, scheduler, scaler, RNG states and a `TrainState` (data position,
step, logging window, pending metrics, evaluation history, the MLflow run id and, once decided, why the
run stopped). It is written to a temporary file and renamed over the previous one, so a kill at any moment
leaves either the old or the new checkpoint whole, and it loads with ``weights_only=True``. Each file has
a ``.sha256`` beside it (hash and size); `load_verified` checks it and falls back to the previous good
checkpoint (``last.prev.pt``) when the newest is torn. Files without a checksum (older runs) still load.
"""

from __future__ import annotations

import hashlib
import io
import os
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ablate.errors import AblateError, StorageError

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
    # Wall-clock seconds of the run up to this checkpoint, over every segment it was resumed in: a resumed
    # run's train/wall_time_s then counts the time before the kill, not its last segment only.
    wall_seconds: float = 0.0
    # The process CPU time of the run (every thread: core-seconds), over its segments as wall_seconds: what
    # a study's report adds up as the CPU hours each of its parts cost. 0 in checkpoints written before it.
    cpu_seconds: float = 0.0
    # The logging window lives in the state so that a resumed run logs the same averages.
    window_steps: int = 0
    window_loss: float = 0.0
    window_tokens: int = 0
    window_seconds: float = 0.0
    # Metrics not yet flushed: (step, metrics, wall-clock ms when measured). Flushes come at checkpoints, so
    # the time travels with them: MLflow's wall-time axis then shows when a value was measured.
    pending: list[tuple[int, dict[str, float], int | None]] = field(default_factory=list)
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


SUM_SUFFIX = ".sha256"  # beside each checkpoint: "<sha256> <size in bytes>" of the file it verifies


class CheckpointError(AblateError):
    """No readable checkpoint to resume: the user chooses `--restart` (exit 2)."""


def previous_path(path: Path) -> Path:
    """Where the previous good checkpoint waits until the next one is complete: last.pt -> last.prev.pt."""
    return path.with_name(f"{path.stem}.prev{path.suffix}")


def sum_path(path: Path) -> Path:
    return path.with_name(path.name + SUM_SUFFIX)


def save_checkpoint(path: Path, payload: dict[str, Any], *, keep_previous: bool = False) -> None:
    """Write atomically with a checksum: a kill mid-write leaves the previous checkpoint intact.

    The payload is serialised in memory first, so its size and sha256 are known before the disk is
    touched and a full disk is an OSError naming the file (torch's zip writer says only "file write
    failed"). With ``keep_previous`` the checkpoint being replaced moves to `previous_path` first: a file
    torn after its rename (a node lost while the file system flushed) still has a good one beside it.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    for stale in path.parent.glob(f".{path.name}.*.tmp"):  # left by a process killed mid-write
        stale.unlink(missing_ok=True)
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    data = buffer.getbuffer()
    digest = hashlib.sha256(data).hexdigest()
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as exc:
        tmp.unlink(missing_ok=True)  # give the space back
        raise StorageError.from_os(exc, tmp, f"a {len(data) / 1e6:.1f} MB checkpoint") from None
    # Fault injection for the kill-during-write test: widen the window between write and rename.
    delay = float(os.environ.get("ABLATE_FAULT_CHECKPOINT_DELAY_S", "0") or 0)
    if delay:
        time.sleep(delay)
    try:
        if keep_previous and path.exists():
            prev = previous_path(path)
            if sum_path(path).exists():
                os.replace(sum_path(path), sum_path(prev))
            else:
                sum_path(prev).unlink(missing_ok=True)
            os.replace(path, prev)
        # The checksum first: a kill between the two renames leaves a sum without its file (ignored) and
        # the previous checkpoint, never a new file checked against an old sum.
        _write_text(sum_path(path), f"{digest} {len(data)}\n")
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise StorageError.from_os(exc, path, "a checkpoint") from None


def _write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def load_checkpoint(path: Path) -> dict[str, Any]:
    # weights_only=True refuses pickled code; RNG states and plain containers are allowed.
    return torch.load(path, map_location="cpu", weights_only=True)


def verify(path: Path) -> str | None:
    """Why ``path`` cannot be trusted (torn, wrong checksum), None when its checksum matches or it has none
    (checkpoints written before checksums existed load as they are)."""
    sums = sum_path(path)
    if not sums.exists():
        return None
    try:
        digest, size = sums.read_text().split()
    except (OSError, ValueError):
        return None  # a sum file cut short: judge the checkpoint by whether it loads
    actual = path.stat().st_size
    if actual != int(size):
        return f"torn: {actual} of {int(size)} bytes"
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return None if h.hexdigest() == digest else "checksum mismatch"


def load_verified(path: Path) -> tuple[dict[str, Any], Path, list[str]] | None:
    """The newest good checkpoint of ``path`` (itself, else `previous_path`), the file it came from and a
    one-line note per bad file skipped; None when neither exists. Raises `CheckpointError` when files
    exist but none is good."""
    problems: list[str] = []
    candidates = [p for p in (path, previous_path(path)) if p.exists()]
    if not candidates:
        return None
    for candidate in candidates:
        why = verify(candidate)
        if why is None:
            try:
                return load_checkpoint(candidate), candidate, problems
            except Exception as exc:  # noqa: BLE001 - any reader error means the file is unusable
                why = f"unreadable ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
        problems.append(f"checkpoint {candidate} is {why}")
    raise CheckpointError(f"{'; '.join(problems)}; no earlier good checkpoint: run the same command with "
                          "--restart to train this run from the start")


def state_to_dict(state: TrainState) -> dict[str, Any]:
    return dict(state.__dict__)


def state_from_dict(data: dict[str, Any]) -> TrainState:
    state = TrainState(**{k: v for k, v in data.items() if k in TrainState.__dataclass_fields__})
    # A checkpoint written before the time was kept has (step, metrics): logged at flush time, as then.
    state.pending = [(int(p[0]), dict(p[1]), int(p[2]) if len(p) > 2 and p[2] is not None else None)
                     for p in state.pending]
    state.history = [(int(s), dict(m)) for s, m in state.history]
    state.train_curve = [(int(s), float(v)) for s, v in state.train_curve]
    return state
