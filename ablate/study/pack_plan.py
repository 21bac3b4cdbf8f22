"""Which of a study's cells train packed (ablate/engine/packed_model.py), and how many to a pack.

Cells pack when their models are the same shape and their batches the same kind: the same ``model`` and
``data`` sections, precision, accumulation and device (:func:`pack_key`). What may differ inside a pack is
what a cell's own trainer owns: its seed (initial weights, data order), its learning rate and schedule,
optimizer, clipping, budget (a cell that ends leaves the pack). A component the pack cannot batch sends its
cells to one a process, and the dry run names it and why (:func:`pack_lines`).

How many: ``--pack K`` bounds a pack at K cells (``--pack 1``: none packs). Without it the bound is
:data:`AUTO_BOUND`, and the study packs a shape only where a short probe (ablate/run/pack_probe.py) shows
packing pays on this machine: on a GPU small cells wait on kernel launches and a pack removes them; on 2 CPU
cores the same cells are compute-bound and a pack only adds its padding, so there the probe keeps them one
a process and a study is never slower than unpacked, but for the probe itself. So the probe runs only
where it costs at most :data:`PROBE_SHARE` of the steps it decides (:func:`probe_steps`); a shape with
fewer trains one cell a process unprobed (a 16-cell study of 50-step cells lost 6% to its probe).
``ablate study`` decides each shape's pack size once, before any cell trains (:func:`decide_packs`: the
probe, and memory planned from one cell's measured peak), and hands the decisions to its workers in
:data:`PACK_ENV` (local workers and SLURM jobs inherit it).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass

from ablate.engine.packed_model import spec_problems
from ablate.errors import AblateError
from ablate.run.distributed import DistInfo, pick_device
from ablate.run.pack_probe import PAYS, TIMED_STEPS, device_memory_mb, fits, probe_pack, shape_problems
from ablate.spec.experiment import ExperimentSpec
from ablate.study.study_plan import Cell

PACK_ENV = "ABLATE_PACK"  # JSON {key id: pack size}: decided by `ablate study`, read by every worker
# --pack as given to `ablate study --slurm` (read by each job's study command), or a default for every
# study command without --pack (the test suite sets 1: its studies train one cell a process unless a test
# asks for packs)
BOUND_ENV = "ABLATE_PACK_BOUND"
AUTO_BOUND = 8  # the largest pack the planner tries on its own
PROBE_SHARE = 0.02  # the most of a shape's planned cell-steps its probe may cost under auto
PAYS_LINE = f"{PAYS:.2f}x"


@dataclass(frozen=True)
class PackBound:
    """How many cells a pack may hold (``limit``) and whether a probe decides below it (``auto``)."""

    limit: int
    auto: bool


def parse_bound(value: int | str | None) -> PackBound:
    """``--pack``'s value: None or "auto" -> :data:`AUTO_BOUND`, probed; K >= 1 -> at most K (1: off).
    Anything else is a located one-line error (the CLI exits 2)."""
    if value is None or value == "auto":
        return PackBound(AUTO_BOUND, auto=True)
    try:
        limit = int(value)
    except ValueError:
        raise AblateError(f"--pack: {value!r} is not a number of cells: give K >= 1 (1: no packing), "
                          "or leave it out to let a probe decide") from None
    if limit < 1:
        raise AblateError(f"--pack {limit}: a pack holds at least one cell: give K >= 1 (1: no packing)")
    return PackBound(limit, auto=False)


def set_bound(bound: PackBound) -> None:
    """Hand ``--pack`` to the SLURM jobs a submission starts (they inherit this process's environment)."""
    os.environ[BOUND_ENV] = "auto" if bound.auto else str(bound.limit)


def bound_given() -> PackBound:
    """The bound a SLURM submission handed its jobs (:func:`set_bound`) or :data:`BOUND_ENV` set otherwise;
    auto where none is."""
    return parse_bound(os.environ.get(BOUND_ENV) or None)


def pack_key(spec: ExperimentSpec) -> str:
    """What cells of one pack share: the model and data sections, precision, accumulation and device."""
    train = spec.train
    shared = {"model": spec.model.model_dump(mode="json"), "data": spec.data.model_dump(mode="json"),
              "precision": train.precision, "accumulation": train.accumulation, "device": train.device}
    return json.dumps(shared, sort_keys=True, default=str)


def key_id(spec: ExperimentSpec) -> str:
    """A short name of :func:`pack_key` (what the workers' decisions are keyed by)."""
    return hashlib.sha1(pack_key(spec).encode()).hexdigest()[:12]


def decided_sizes() -> dict[str, int]:
    """The pack size per shape that the study command decided (:data:`PACK_ENV`); empty: none packs."""
    raw = os.environ.get(PACK_ENV)
    return {str(k): int(v) for k, v in json.loads(raw).items()} if raw else {}


def hand_to_workers(sizes: dict[str, int]) -> None:
    """The decisions into this process's environment, which its workers and SLURM jobs inherit."""
    os.environ[PACK_ENV] = json.dumps(sizes, sort_keys=True)


def refusals(spec: ExperimentSpec) -> list[str]:
    """Why a cell of this spec trains one a process whatever the bound: what the pack cannot batch."""
    return spec_problems(spec.model)


@dataclass(frozen=True)
class Pack:
    """Cells trained together (one cell: trained alone) and, for a lone cell that could not pack, why."""

    cells: tuple[Cell, ...]
    why_alone: str = ""


def form_packs(cells: Sequence[Cell], limit: int) -> list[Pack]:
    """The cells grouped by :func:`pack_key` in their order, each group cut into packs of at most
    ``limit``; a cell whose spec refuses packing is a pack of its own with the reason."""
    groups: dict[str, list[Cell]] = {}
    alone: list[Pack] = []
    for cell in cells:
        problems = refusals(cell.spec)
        if problems and limit > 1:
            alone.append(Pack((cell,), "; ".join(problems)))
        else:
            groups.setdefault(pack_key(cell.spec), []).append(cell)
    packs = [Pack(tuple(group[i:i + limit])) for group in groups.values()
             for i in range(0, len(group), limit)]
    return packs + alone


@dataclass(frozen=True)
class PackDecision:
    """Each shape's pack size and measured speed-up (by :func:`key_id`), and the dry run's lines."""

    sizes: dict[str, int]
    speedups: dict[str, float]
    lines: list[str]

    def speedup(self, cell: Cell) -> float:
        """How much faster a cell's training steps run in its pack than alone (1: it trains alone)."""
        kid = key_id(cell.spec)
        return self.speedups.get(kid, 1.0) if self.sizes.get(kid, 1) > 1 else 1.0


def decide_packs(cells: Sequence[Cell], bound: PackBound) -> PackDecision:
    """Each shape's pack size (by :func:`key_id`) and the lines that say why, before anything trains: the
    probe on this machine (what cannot pack, and under auto whether packing pays), memory planned from one
    cell's measured peak. A shape not even one cell of which fits the device is an error (exit 2)."""
    sizes: dict[str, int] = {}
    speedups: dict[str, float] = {}
    notes: dict[str, str] = {}
    if bound.limit == 1:
        return PackDecision(sizes, speedups, pack_lines(cells, bound, sizes, notes))
    for pack in form_packs(cells, bound.limit):
        first = pack.cells[0]
        kid = key_id(first.spec)
        if pack.why_alone or kid in sizes:
            continue
        members = sum(1 for c in cells if key_id(c.spec) == kid and not refusals(c.spec))
        if members < 2:
            sizes[kid] = 1
            notes[kid] = "one cell of this shape: nothing to pack it with"
            continue
        planned = _planned_steps([c for c in cells if key_id(c.spec) == kid and not refusals(c.spec)])
        cost = probe_steps(min(bound.limit, members))
        if bound.auto and planned is not None and cost > PROBE_SHARE * planned:
            sizes[kid] = 1
            notes[kid] = (f"too few steps to probe: a probe costs about {cost} cell-steps, more than "
                          f"{PROBE_SHARE:.0%} of this shape's {planned:,} (--pack K packs without one)")
            continue
        probe = probe_pack(first.spec, min(bound.limit, members))
        speedups[kid] = probe.speedup
        device = pick_device(DistInfo(), first.spec.train.device)
        room = fits(probe.cell_peak_mb, device_memory_mb(device), bound.limit)
        if room == 0:
            free = device_memory_mb(device)
            raise AblateError(f"{first.label}: one cell's measured peak ({probe.cell_peak_mb:.0f} MB) does "
                              f"not fit the {free:.0f} MB free on {device}, packed or alone")
        if probe.problems:
            sizes[kid], notes[kid] = 1, "; ".join(probe.problems)
        elif bound.auto and not probe.pays:
            sizes[kid] = 1
            notes[kid] = (f"the probe's pack of {probe.cells} stepped at {probe.speedup:.2f}x "
                          f"the cells one after another here (packing needs {PAYS_LINE})")
        else:
            sizes[kid] = min(room, bound.limit)
            notes[kid] = (f"probe: {probe.speedup:.2f}x the cells one after another; memory planned at "
                          f"{probe.cell_peak_mb:.0f} MB a cell" + (f", so at most {room} a pack"
                                                                   if room < bound.limit else ""))
    return PackDecision(sizes, speedups, pack_lines(cells, bound, sizes, notes))


def probe_steps(cells: int) -> int:
    """What a probe of a ``cells``-cell pack costs, in one cell's steps: a warm-up step and
    :data:`TIMED_STEPS` of every cell alone, the same packed (about ``cells`` cell-steps each on a device
    a pack does not speed up, which is where the cost matters), and one step measuring memory."""
    return 2 * (TIMED_STEPS + 1) * cells + 1


def _planned_steps(cells: Sequence[Cell]) -> int | None:
    """The cells' planned optimizer steps in all; None where one ends by epochs (no count before it runs)."""
    steps = [c.spec.train.max_steps for c in cells]
    return None if any(s is None for s in steps) else sum(s for s in steps if s is not None)


def job_pack_lines(cells: Sequence[Cell], bound: PackBound) -> list[str]:
    """A SLURM submission's dry run: the packs its jobs will form (a job's workers each run a pack), what
    trains one a process and why (the spec's refusals, and what cannot pack, checked here on the CPU without
    timing); each job sizes its packs on its own node before its cells train (the probe, memory), so the
    sizes here are the bound's."""
    if bound.limit == 1:
        return pack_lines(cells, bound, {}, {})
    sizes: dict[str, int] = {}
    notes: dict[str, str] = {}
    for pack in form_packs(cells, bound.limit):
        kid = key_id(pack.cells[0].spec)
        if pack.why_alone or kid in sizes:
            continue
        problems = shape_problems(pack.cells[0].spec)
        sizes[kid] = 1 if problems else bound.limit
        notes[kid] = "; ".join(problems) if problems else (
            "each job's probe on its node decides whether packing pays" if bound.auto else "")
    lines = pack_lines(cells, bound, sizes, notes)
    how = "sized where each job's probe shows packing pays on its node" if bound.auto else "--pack"
    lines[0] = (f"packs: up to {bound.limit} cells of one shape a pack, each run by one worker of a job "
                f"({how})")
    return lines


def pack_lines(cells: Sequence[Cell], bound: PackBound, sizes: dict[str, int],
               notes: dict[str, str]) -> list[str]:
    """The dry run's account of packing: the bound, the packs by shape, the cells one a process and why
    (``sizes`` and ``notes`` by :func:`key_id`, from :func:`decide_packs`)."""
    if bound.limit == 1:
        return ["packs: off (--pack 1): every cell trains one a process"]
    head = (f"packs: up to {bound.limit} cells of one shape a pack"
            + (" where a short probe shows it pays here (--pack K bounds it, --pack 1 turns it off)"
               if bound.auto else " (--pack)"))
    lines = [head]
    shown: set[str] = set()
    for pack in form_packs(cells, bound.limit):
        first = pack.cells[0]
        label = first.label + (f" @ {first.rung}" if first.rung is not None else "")
        kid = key_id(first.spec)
        if kid in shown:
            continue
        shown.add(kid)
        if pack.why_alone:
            count = sum(1 for c in cells if key_id(c.spec) == kid)
            lines.append(f"  {label}: {count} cells: one a process ({pack.why_alone})")
            continue
        members = [c for c in cells if key_id(c.spec) == kid and not refusals(c.spec)]
        k = min(sizes.get(kid, 1), len(members))
        how = f"{-(-len(members) // k)} packs of up to {k}" if k > 1 else "one a process"
        note = notes.get(kid, "")
        lines.append(f"  {label}: {len(members)} cells: {how}" + (f" ({note})" if note else ""))
    return lines
