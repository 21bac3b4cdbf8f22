"""A pilot: an earlier study on the same cell whose seeds tell a new study how noisy its comparisons are
and how long its cells take (``ablation.pilot``), read before the new study runs anything.

A pilot is named as a report folder (``reports/<study>``, which holds ``runs.csv``), that ``runs.csv``
itself, or its ``export`` folder, relative to the spec's folder; or as a study name in the tracking store
(MLflow, read through ablate/tracking/read.py). Only its cells at the baseline's settings count: they are
the pairs a plan is about (a tuned arm changes the hyperparameters between variants).

What it gives, per variant label of the pilot: the paired differences ``variant - baseline`` of the chosen
metric over the seeds where both finished, and the cells' measured training time with the machines it was
measured on (runs.csv's ``machine`` column, the runs' CPU and GPU tags): a plan's hours are that machine's.
The pooled paired sd stands for a variant the pilot did not run.
"""

from __future__ import annotations

import csv
import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ablate.errors import AblateError
from ablate.stats.power import upper_sd
from ablate.tracking import record
from ablate.tracking.read import find_study_runs, tags_and_params

RUNS_CSV = "runs.csv"
MACHINE_COLUMN = "machine"  # runs.csv's column of the machine a cell ran on (ablate.tracking.record.machine)
PACK_COLUMN = "pack_size"  # the pack a cell trained in (ablate.tracking.record.PACK_SIZE); absent: alone
RUNG_COLUMN = "rung"  # a ladder's runs.csv: the rung each cell ran at (ablate.tracking.record.RUNG)
# one cell as a runs.csv row: arm, variant, seed, status, machine, rung and its metrics (text as read from the
# csv, numbers from the store)
PilotRow = dict[str, float | str | None]


@dataclass(frozen=True)
class PairedNoise:
    """The spread of one comparison's paired differences in a pilot, or pooled over its comparisons."""

    sd: float
    df: int  # degrees of freedom behind sd (pairs - 1, summed when pooled)
    basis: str  # 'positions=rope, 8 pairs' or 'pooled over 6 comparisons, 44 pairs'

    @property
    def upper(self) -> float:
        """The upper 80% confidence bound the plan sizes on (ablate/stats/power.py upper_sd)."""
        return upper_sd(self.sd, self.df)


@dataclass(frozen=True)
class Pilot:
    name: str  # as the spec names it
    metric: str  # the metric its differences are of (plain name: 'val/bleu')
    differences: dict[str, list[float]]  # variant label -> per-seed paired differences
    seconds: dict[str, float]  # variant label (baseline included) -> mean training seconds of its cells
    seeds: tuple[int, ...]  # the seeds its baseline ran (a new study should use others)
    machines: tuple[tuple[str, int], ...] = ()  # where its timed cells ran: (machine, cells), most first

    def noise(self, label: str) -> PairedNoise | None:
        """The pilot's paired sd for ``label``: its own where it has 2 or more pairs, else pooled."""
        own = self.differences.get(label, [])
        if len(own) >= 2:
            return PairedNoise(paired_sd(own), len(own) - 1, f"{label}, {len(own)} pairs")
        return self.pooled()

    def pooled(self) -> PairedNoise | None:
        groups = [d for d in self.differences.values() if len(d) >= 2]
        df = sum(len(d) - 1 for d in groups)
        if not df:
            return None
        var = sum((len(d) - 1) * paired_sd(d) ** 2 for d in groups) / df
        pairs = sum(len(d) for d in groups)
        return PairedNoise(math.sqrt(var), df, f"pooled over {len(groups)} comparisons, {pairs} pairs")

    def timed_on(self) -> str | None:
        """The machine(s) its cell times were measured on, in words; None where no cell names one."""
        if not self.machines:
            return None
        if len(self.machines) == 1:
            return self.machines[0][0]
        named = [f"{machine} ({cells} cell{'s' * (cells != 1)})" for machine, cells in self.machines]
        return f"{', '.join(named[:-1])} and {named[-1]}, averaged over them"

    def cell_seconds(self, label: str) -> float | None:
        """A cell's measured training time: the variant's own mean, else the baseline's."""
        return self.seconds.get(label, self.seconds.get("baseline"))


def paired_sd(values: list[float]) -> float:
    """The sample sd (n - 1) of paired differences."""
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def read_pilot(name: str, spec_dir: Path, metric: str) -> Pilot:
    """The pilot ``name`` (a report folder, runs.csv or export folder relative to ``spec_dir``, else a
    study in the tracking store) read for ``metric``; an AblateError naming what is missing otherwise."""
    rows = pilot_rows(name, spec_dir)
    rungs = sorted({str(row.get(RUNG_COLUMN)) for row in rows if row.get(RUNG_COLUMN)})
    if rungs:
        raise AblateError(f"ablation.pilot: {name} is a ladder (rungs {', '.join(rungs)}): its noise differs "
                          "by rung, so it sizes a ladder (ablation.scales) rung by rung, not one cell")
    return pilot_from_rows(name, rows, record.unfinal(metric))


def pilot_rows(name: str, spec_dir: Path) -> list[PilotRow]:
    """The pilot's cells as runs.csv rows (its report folder's runs.csv, else the tracking store's)."""
    path = _runs_csv(name, spec_dir)
    return _csv_rows(path) if path is not None else _store_rows(name)


def _runs_csv(name: str, spec_dir: Path) -> Path | None:
    base = Path(name) if Path(name).is_absolute() else spec_dir / name
    for candidate in (base, base / RUNS_CSV, base.parent / RUNS_CSV):
        if candidate.is_file() and candidate.name == RUNS_CSV:
            return candidate
    if base.exists():
        raise AblateError(f"ablation.pilot: {base} has no {RUNS_CSV} (name a study's report folder, its "
                          "runs.csv, or a study in the tracking store)")
    return None


def _csv_rows(path: Path) -> list[PilotRow]:
    with path.open(newline="") as fh:
        return [dict(row) for row in csv.DictReader(fh)]


def _store_rows(name: str) -> list[PilotRow]:
    """The study's child runs in the tracking store, as runs.csv rows (superseded cells left out)."""
    try:
        _, children = find_study_runs(name)
    except AblateError as exc:
        raise AblateError(f"ablation.pilot: {name!r} is neither a report folder (no such path) nor a study "
                          f"in the tracking store: {exc}") from None
    rows = []
    for rec in children.to_dict("records"):
        tags, _ = tags_and_params(rec)
        if tags.get(record.SUPERSEDED) or tags.get(record.KIND) != "cell":
            continue
        metrics = record.result_metrics({k[8:]: v for k, v in rec.items() if k.startswith("metrics.")
                                    and isinstance(v, int | float) and math.isfinite(v)})
        rows.append({"arm": tags.get(record.ARM) or record.BASELINE_ARM, "variant": tags.get(record.VARIANT),
                     "seed": tags.get(record.SEED), "status": tags.get(record.STATUS),
                     MACHINE_COLUMN: record.machine(tags), RUNG_COLUMN: tags.get(record.RUNG) or "",
                     PACK_COLUMN: tags.get(record.PACK_SIZE) or "", **metrics})
    return rows


def pilot_from_rows(name: str, rows: Iterable[Mapping[str, float | str | None]], metric: str) -> Pilot:
    """Paired differences and cell times from runs.csv-shaped rows (arm, variant, seed, status, metrics); a
    packed cell's time is its share of its pack's (its wall time over the pack's size)."""
    rows = list(rows)
    values: dict[str, dict[int, float]] = {}
    times: dict[str, list[float]] = {}
    machines: Counter[str] = Counter()
    for row in rows:
        if (row.get("arm") or record.BASELINE_ARM) != record.BASELINE_ARM or row.get("status") != "finished":
            continue
        label, seed = str(row["variant"]), int(str(row["seed"]))
        value = _number(row.get(metric))
        if value is not None:
            values.setdefault(label, {})[seed] = value
        if (seconds := _number(row.get(record.WALL_TIME))) is not None:
            # a cell packed with K - 1 others trained beside them in one process: its share of that time
            times.setdefault(label, []).append(seconds / max(1.0, _number(row.get(PACK_COLUMN)) or 1.0))
            if row.get(MACHINE_COLUMN):
                machines[str(row[MACHINE_COLUMN])] += 1
    if "baseline" not in values:
        known = sorted({m for row in rows for m in row if "/" in m})
        raise AblateError(f"ablation.pilot: {name} has no finished baseline cell with {metric}"
                          + (f" (its metrics: {', '.join(known)})" if known else ""))
    base = values["baseline"]
    differences = {label: [v[s] - base[s] for s in sorted(v) if s in base]
                   for label, v in values.items() if label != "baseline"}
    mean_times = {label: sum(t) / len(t) for label, t in times.items()}
    return Pilot(name, metric, differences, mean_times, tuple(sorted(base)),
                 tuple(sorted(machines.items(), key=lambda kv: (-kv[1], kv[0]))))


def _number(value: float | str | None) -> float | None:
    if value is None or value == "":
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None
