"""A short probe of one shape's cells packed against the same cells one after another, on this machine: the
planner packs a shape only where it pays (ablate/study/pack_plan.py).

:func:`probe_pack` builds K cells of the spec (seeds ``spec.seed ..``, tracking off, in a temporary folder),
checks on a real training batch that the pack computes what each cell computes alone
(:func:`~ablate.engine.packed_model.pack_problems`: a component vmap cannot batch is named), then times
:data:`TIMED_STEPS` optimizer steps of the K cells stepped one after another in one loop (what a worker
does with one cell a process, without the process count) and the same steps packed, after a warm-up step
each. Memory: a pack holds K cells' parameters, optimizer state and activations, so it is planned from one
cell's measured peak (:func:`fits`).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from ablate.data.prepare import prepare_data
from ablate.engine.packed_model import pack_problems
from ablate.engine.packed_trainer import PackedTrainer
from ablate.engine.progress import PeakMemory
from ablate.engine.trainer import Trainer
from ablate.hardware import prepare_device
from ablate.run.distributed import DistInfo, pick_device
from ablate.run.runner import build
from ablate.spec import metricnames
from ablate.spec.experiment import ExperimentSpec

TIMED_STEPS = 3
PAYS = 1.10  # packed must be this much faster than the cells one after another: a 10% margin over noise


@dataclass(frozen=True)
class PackProbe:
    """What the probe found for K cells of one shape."""

    cells: int
    problems: tuple[str, ...]  # why the shape cannot pack (empty: it can)
    alone_s: float = 0.0  # seconds for TIMED_STEPS steps of every cell, one cell after another
    packed_s: float = 0.0  # the same steps packed
    cell_peak_mb: float = 0.0  # one cell's peak memory above the process's at its start

    @property
    def speedup(self) -> float:
        return self.alone_s / self.packed_s if self.packed_s > 0 else 0.0

    @property
    def pays(self) -> bool:
        return not self.problems and self.speedup >= PAYS


def _trainers(spec: ExperimentSpec, cells: int, folder: Path, device: torch.device) -> list[Trainer]:
    data = prepare_data(spec)
    out = []
    for k in range(cells):
        cell = spec.model_copy(update={"seed": spec.seed + k})
        out.append(Trainer(cell, data, build(cell, data, device), folder / f"cell{k}", device,
                           show_progress=False))
    return out


def _timed(step: Callable[[], object], steps: int = TIMED_STEPS) -> float:
    step()  # warm-up: allocation, first kernels
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(steps):
        step()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - started


def shape_problems(spec: ExperimentSpec) -> list[str]:
    """What cannot pack in cells of ``spec``, without timing anything: two cells' models packed against
    alone on one training batch (:func:`~ablate.engine.packed_model.pack_problems`), on this machine's CPU.
    What a SLURM submission's dry run names before its jobs probe their own nodes."""
    cpu = spec.model_copy(update={"train": spec.train.model_copy(update={"device": "cpu"})})
    with tempfile.TemporaryDirectory(prefix="ablate-pack-check-") as tmp:
        trainers = _trainers(cpu, 2, Path(tmp), torch.device("cpu"))
        batch = trainers[0].next_batches(1)[0]
        return pack_problems([t.model for t in trainers], batch.model_inputs(),
                             lambda out: out.float().pow(2).mean())


def probe_pack(spec: ExperimentSpec, cells: int, steps: int = TIMED_STEPS) -> PackProbe:
    """Pack ``cells`` cells of ``spec`` and time ``steps`` steps of them against the same cells one after
    another (scripts/pack_speed.py times more)."""
    device = pick_device(DistInfo(), spec.train.device)
    prepare_device(device)
    threads = torch.get_num_threads()
    if spec.train.threads:
        torch.set_num_threads(spec.train.threads)
    try:
        with tempfile.TemporaryDirectory(prefix="ablate-pack-probe-") as tmp:
            trainers = _trainers(spec, max(2, cells), Path(tmp), device)
            batch = trainers[0].next_batches(1)[0]
            inputs = [t.to(device) for t in batch.model_inputs()]
            problems = pack_problems([t.model for t in trainers[:2]], inputs,
                                     lambda out: out.float().pow(2).mean())
            if problems:
                return PackProbe(cells, tuple(problems))
            first = trainers[0]
            memory = PeakMemory(device)
            memory.reset()
            first.train_step()  # one cell's step: its gradients, optimizer state and activations
            weights = sum(p.numel() * p.element_size() for p in first.model.parameters()) / 2**20
            peak = memory.metrics().get(metricnames.RUN_MEMORY, 0.0) + weights
            alone = _timed(lambda: [t.train_step() for t in trainers], steps)
            pack = PackedTrainer(trainers)
            packed = _timed(lambda: pack.train_step(list(range(len(trainers)))), steps)
            return PackProbe(cells, (), alone, packed, float(peak))
    finally:
        torch.set_num_threads(threads)


def device_memory_mb(device: torch.device) -> float:
    """Memory a pack may take on ``device``: the GPU's free memory, or the host's available memory."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return free / 2**20
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return float(line.split()[1]) / 1024
    except OSError:
        pass
    return float("inf")


def fits(cell_peak_mb: float, available_mb: float, limit: int) -> int:
    """The largest pack of at most ``limit`` cells whose planned memory (K x one cell's peak, with a 20%
    margin) fits ``available_mb``; 0 when not even one cell fits."""
    if cell_peak_mb <= 0:
        return limit
    return max(0, min(limit, int(available_mb / (1.2 * cell_peak_mb))))
