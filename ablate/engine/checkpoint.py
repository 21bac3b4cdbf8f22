"""What a resumable run saves: the trainer's state, RNG states, and atomic checkpoint files.

A checkpoint holds model, optimizer, scheduler, scaler, RNG states and a `TrainState` (data position,
step, logging window, pending metrics, evaluation history, the MLflow run id and, once decided, why the
run stopped). It is written to a temporary file and renamed over the previous one, so a kill at any moment
leaves either the old or the new checkpoint whole, and it loads with ``weights_only=True``. Each file has
a ``.sha256`` beside it (hash and size); `load_verified` checks it and falls back to the previous good
checkpoint (``last.prev.pt``) when the newest is torn. Files without a checksum (older runs) still load.

A checkpoint above :data:`ASYNC_CHECKPOINT_BYTES` is written by :class:`CheckpointWriter` on a thread of its
own, the way torch.distributed.checkpoint's ``async_save`` and torchtitan write theirs: the step waits only
for a copy of the tensors (the next step changes the originals in place), not for the serialisation, the
sha256, the write and the fsync, which are :func:`save_checkpoint`'s as for every other checkpoint.
"""

from __future__ import annotations

import hashlib
import io
import os
import random
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ablate.errors import AblateError, StorageError

CHECKPOINT_VERSION = 1

# Checkpoints of more tensor bytes than this are written in the background (CheckpointWriter). Below it a
# synchronous write costs the step little: the Multi30k study cell's 110 MB (model, Adam's two moments) took
# about 0.4 s every 240 steps; GPT-2 small's 1.5 GB (124M parameters, float32, AdamW) would stall every
# rank for several seconds at each checkpoint, 12 GB at 1B parameters for a minute.
ASYNC_CHECKPOINT_BYTES = 256 << 20


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


def own_storage(tree: Any) -> Any:
    """``tree`` (a state dict, nested) with every tensor that views a larger storage copied to its own. A
    packed cell's weights and optimizer state are views of the pack's stacked tensors (its Adam step count
    one element of a per-cell vector that all its parameters share): saved as they are, a cell's checkpoint
    would hold every cell's tensors, and a resumed Adam would count each step once per parameter."""
    if isinstance(tree, torch.Tensor):
        whole = tree.untyped_storage().nbytes()
        return tree.clone() if whole != tree.numel() * tree.element_size() else tree
    if isinstance(tree, dict):
        return {key: own_storage(value) for key, value in tree.items()}
    if isinstance(tree, list | tuple):
        return type(tree)(own_storage(value) for value in tree)
    return tree


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


def tensor_bytes(payload: Any) -> int:
    """Bytes of the tensors in a checkpoint payload (nested dicts, lists and tuples)."""
    if isinstance(payload, torch.Tensor):
        return payload.numel() * payload.element_size()
    if isinstance(payload, dict):
        return sum(tensor_bytes(v) for v in payload.values())
    if isinstance(payload, list | tuple):
        return sum(tensor_bytes(v) for v in payload)
    return 0


def snapshot(payload: Any) -> Any:
    """The payload with every tensor copied to the CPU: what the background write serialises while the
    training goes on changing the model's and optimizer's tensors in place."""
    if isinstance(payload, torch.Tensor):
        return payload.detach().to("cpu", copy=True)
    if isinstance(payload, dict):
        return {k: snapshot(v) for k, v in payload.items()}
    if isinstance(payload, list):
        return [snapshot(v) for v in payload]
    if isinstance(payload, tuple):
        return tuple(snapshot(v) for v in payload)
    return payload


class CheckpointWriter:
    """Writes checkpoints of more than ``threshold`` tensor bytes on background threads, in order.

    :meth:`save` returns once the payload's tensors are copied (:func:`snapshot`); a thread then runs
    :func:`save_checkpoint` (temporary file, sha256, fsync, atomic rename, the previous file kept), so a kill
    mid-write leaves the previous checkpoint as a synchronous write does. Writes happen one after another in
    the order saved; at most ``in_flight`` wait at a time (best.pt and last.pt after an evaluation), a
    further :meth:`save` waits for the oldest, which bounds the copies held in memory. :meth:`wait` blocks
    until every write is on disk and raises the error one met (a full disk is a StorageError naming the
    file, as in the foreground). Smaller checkpoints are written at once, after the writes before them.
    """

    def __init__(self, threshold: int | None = None, in_flight: int = 2) -> None:
        self.threshold = ASYNC_CHECKPOINT_BYTES if threshold is None else threshold
        self.in_flight = in_flight
        self._threads: deque[threading.Thread] = deque()
        self._errors: list[BaseException] = []

    def save(self, path: Path, payload: dict[str, Any], *, keep_previous: bool = False,
             write: Callable[..., None] | None = None) -> bool:
        """Write ``payload`` to ``path`` with ``write`` (:func:`save_checkpoint`, or a caller's wrapper of
        it); True when the write goes on in the background."""
        write = write or save_checkpoint
        if tensor_bytes(payload) <= self.threshold:
            self.wait()  # in order: an earlier background write of the same file must not land after this
            write(path, payload, keep_previous=keep_previous)
            return False
        self._settle(self.in_flight - 1)
        copied = snapshot(payload)
        before = self._threads[-1] if self._threads else None
        thread = threading.Thread(target=self._write, args=(before, write, path, copied, keep_previous),
                                  name=f"checkpoint {path.name}")
        self._threads.append(thread)
        thread.start()  # not a daemon: an ending interpreter waits for the file to be whole
        return True

    def _write(self, before: threading.Thread | None, write: Callable[..., None], path: Path,
               payload: dict[str, Any], keep_previous: bool) -> None:
        if before is not None:
            before.join()  # last.pt's rotation to last.prev.pt never interleaves with another write
        try:
            write(path, payload, keep_previous=keep_previous)
        except BaseException as exc:  # noqa: BLE001 - handed to the training thread by wait()
            self._errors.append(exc)

    @property
    def busy(self) -> bool:
        """Whether a background write is still going."""
        return any(t.is_alive() for t in self._threads)

    def _settle(self, keep: int) -> None:
        """Wait until at most ``keep`` writes are in flight; raise the first error a finished one met."""
        while len(self._threads) > max(0, keep):
            self._threads.popleft().join()
        if self._errors:
            error, self._errors = self._errors[0], []
            raise error

    def wait(self) -> None:
        """Block until every background write is on disk; raise what one failed with."""
        self._settle(0)
