"""muP's own learning-rate transfer check, read from a finished lr-transfer study, before a ladder may run
every rung at the rate tuned at its smallest (``scales.tune.larger_rungs.mup``).

The check study is a learning-rate search at several widths under each parametrisation (as
experiments/ablations/mup-transfer-docs.yaml and mup-transfer-wide-docs.yaml): one cell per (width, rate,
seed). Its report folder's ``runs.csv`` (each cell's ``model.parametrisation``, ``model.d_model`` and
``train.optimizer.lr`` where it differs from the baseline, the baseline's own values from the folder's
``export/``) is grouped by parametrisation; a diverged cell counts as the parametrisation's worst finite
value (a rate that diverges was tried and lost). muP's cells at its base width are the standard
parametrisation's (the same model bit for bit), so they are shared. ablate/stats/best_rate_shift.py
decides whether muP's best rate moves from the narrowest width to the widest: "stable" (its interval inside
one grid step) is the check passing.

A ladder may lean on it only where it was checked: muP must be "stable" in the named study, and every size
rung's ``model.d_model`` must lie within the widths the study searched (a transfer seen from 32 to 128 says
nothing of 512). Anything else is one located line (``problems``). scripts/lr_transfer.py prints the same
check with its table and figure.
"""

from __future__ import annotations

import csv
import json
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ablate.spec import metricnames
from ablate.spec.yamlsrc import Problem, SourceMap
from ablate.stats.best_rate_shift import Transfer, transfer
from ablate.tracking import record

Cells = dict[tuple[int, float, int], float]
RUNS_CSV = "runs.csv"
MUP = "mup"
AT = "ablation.scales.tune.larger_rungs.mup.check"


def _baseline(report: Path) -> dict[str, object]:
    """The baseline's resolved spec as flat fields, from a cell's run.json in the export."""
    for path in sorted((report / "export" / "cells").glob("*/run.json")):
        run = json.loads(path.read_text())
        if run.get("tags", {}).get(record.VARIANT) == "baseline":
            return dict(run.get("params", {}))
    return {}


def _field(row: dict[str, str], base: dict[str, object], key: str) -> str:
    """A cell's value of ``key``: its runs.csv column, or the baseline's where the cell kept it."""
    return row.get(key) or str(base.get(key, ""))


def read_cells(report: Path, metric: str = metricnames.VAL_LOSS) -> dict[str, Cells]:
    """Each parametrisation's (width, rate, seed) -> metric from a report folder (module doc)."""
    base = _baseline(report)
    cells: dict[str, Cells] = defaultdict(dict)
    diverged: dict[str, list[tuple[int, float, int]]] = defaultdict(list)
    with open(report / RUNS_CSV, newline="") as fh:
        for row in csv.DictReader(fh):
            if row["status"] not in ("finished", "diverged"):
                continue
            parametrisation = _field(row, base, "model.parametrisation") or "standard"
            width = int(float(_field(row, base, "model.d_model")))
            lr = float(_field(row, base, "train.optimizer.lr"))
            key = (width, lr, int(row["seed"]))
            value = float(row[metric]) if row.get(metric) else math.nan
            if row["status"] == "diverged" or not math.isfinite(value):
                diverged[parametrisation].append(key)
            else:
                cells[parametrisation][key] = value
    for parametrisation, keys in diverged.items():
        worst = max(cells[parametrisation].values(), default=math.nan)
        for key in keys:
            cells[parametrisation][key] = worst
    if MUP in cells and "standard" in cells:  # the base width: the standard cells are muP's
        base_width = min(w for w, _, _ in cells[MUP]) // 2
        for (w, lr, s), value in cells["standard"].items():
            if w == base_width:
                cells[MUP].setdefault((w, lr, s), value)
    return dict(cells)


@dataclass(frozen=True)
class MupCheck:
    """The named study's check of muP, and the widths it searched."""

    study: str
    result: Transfer

    @property
    def passed(self) -> bool:
        return self.result.verdict == "stable"

    def covers(self, width: int) -> bool:
        return self.result.widths[0] <= width <= self.result.widths[-1]

    def describe(self) -> str:
        r = self.result
        return (f"{self.study}: muP's best rate from d{r.widths[0]} to d{r.widths[-1]} shifts "
                f"{r.shift:+.2f} log2 [{r.low:+.2f}, {r.high:+.2f}] ({100 * r.level:.0f}%, {r.seeds} seeds): "
                f"{r.verdict} (stable: inside ±{r.margin:g})")

    def as_dict(self) -> dict[str, object]:
        r = self.result
        return {"study": self.study, "widths": list(r.widths), "shift": r.shift, "low": r.low, "high": r.high,
                "level": r.level, "margin": r.margin, "seeds": r.seeds, "verdict": r.verdict}


def read_check(name: str, spec_dir: Path) -> MupCheck | str:
    """The check study ``name`` (a report folder relative to ``spec_dir``) read and decided, or why it
    cannot be."""
    folder = Path(name) if Path(name).is_absolute() else spec_dir / name
    if not (folder / RUNS_CSV).is_file():
        return f"{folder} has no {RUNS_CSV}: name a finished learning-rate transfer study's report folder"
    cells = read_cells(folder).get(MUP)
    if not cells:
        return f"{name} has no muP cells (model.parametrisation: mup): it checks no muP transfer"
    try:
        return MupCheck(name, transfer(cells))
    except ValueError as exc:
        return f"{name} cannot check muP's transfer: {exc}"


def problems(name: str, spec_dir: Path, parametrisation: str, widths: Sequence[tuple[str, int]],
             smap: SourceMap, origin: str) -> tuple[list[Problem], MupCheck | None]:
    """Whether a ladder may run every rung at its smallest rung's rate under muP: the spec's
    parametrisation, the check passed, and each size rung's width (``widths``: (rung, d_model)) among the
    widths it searched; each failure one located line."""
    def problem(message: str, at: str = AT) -> Problem:
        return Problem(smap.where(at, origin), at, message)

    out = []
    if parametrisation != MUP:
        out.append(problem(f"larger_rungs.mup runs every rung at the smallest rung's rate with muP's "
                           f"multipliers: set model.parametrisation: mup (found {parametrisation}) and its "
                           "model.mup_base_width"))
    found = read_check(name, spec_dir)
    if isinstance(found, str):
        return [*out, problem(found)], None
    if not found.passed:
        out.append(problem(f"muP's transfer check did not pass: {found.describe()}; tune every rung "
                           "instead (leave larger_rungs out, or grid_from_below)"))
    outside = [f"{rung} (d{w})" for rung, w in widths if not found.covers(w)]
    if outside:
        r = found.result
        out.append(problem(f"rung(s) {', '.join(outside)} lie outside the widths {name} checked "
                           f"(d{r.widths[0]}-d{r.widths[-1]}): muP's transfer was not seen there"))
    return out, found
