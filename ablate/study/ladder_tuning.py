"""A tuned ladder (``ablation.scales.tune``): every variant tuned at every rung with the same grid and the
same seeds, then judged at its own best per rung (Wen et al. 2025, "Fantastic Pretraining Optimizers and
Where to Find Them": speedups claimed against a baseline tuned once shrink or vanish once every optimizer is
tuned at every scale).

    scales:
      tune:
        grid: {train.optimizer.lr: [1.0e-3, 2.0e-3, 4.0e-3, 8.0e-3, 1.6e-2]}
        rungs: {l: {train.optimizer.lr: [5.0e-4, 1.0e-3, 2.0e-3, 4.0e-3, 8.0e-3]}}   # a rung's own grid
        seeds: [900]                                          # never the study's evaluation seeds

`ablate study` runs it in two phases in the study's one queue (ablate/study/ablation.py):

1. the tuning arm (`tune_arm`): every variant at every grid point of every size rung, on the tuning
   seeds, tagged ``ablate.arm: ladder_tune`` (a size with data budgets tunes at its smallest budget, and
   every budget of the size runs at that best: the schedule's length changes, the model does not);
2. the study's own cells (`tuned_plan`): every variant at every rung on the evaluation seeds at its own
   best point at that size; these are the cells every comparison, fit and verdict reads.

A point's score is the mean of its tuning seeds' metric; a point with a diverged or failed seed scores
worst (the rate is past the edge of stability, not lucky). The best point of a rung that sits at an edge of
its grid (the lowest or the highest value of a field) is flagged: the true best may lie beyond it. The best
learning rate's power law in parameters across the rungs is fitted per variant (ablate/stats/
lr_power_law.py). Everything the report needs is recorded on the parent (tag ``ablate.ladder_tune``,
`tuning_record`). With ``larger_rungs`` (ablate/study/rung_rates.py) the rungs above the smallest take their
rate grid from the rungs below (tuned smallest first: `rung_grids` knows a rung's grid once every rung below
it is tuned, so the tuning arm runs in as many phases as there are sizes) or, under muP, the smallest rung's
best rate.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ablate.spec.study_sections import LadderTune
from ablate.stats.lr_power_law import fit_rate_law
from ablate.study import mup_check
from ablate.study.cell_queue import CellRecords
from ablate.study.derived_specs import derive, show
from ablate.study.designs import spec_diff
from ablate.study.ladder_checks import grid_at, size_rungs
from ablate.study.rung_rates import FROM_BELOW, LR, MUP, TUNED, Below, grid_from, planned_grid
from ablate.study.study_plan import Cell, StudyPlan, short_field
from ablate.tracking import record


def tuning(plan: StudyPlan) -> LadderTune | None:
    """The plan's ``scales.tune``, or None (no ladder, or a ladder tuned once)."""
    abl = plan.spec.ablation
    return abl.scales.tune if abl is not None and abl.scales is not None else None


def variant_overrides(plan: StudyPlan) -> dict[str, dict[str, object]]:
    """Each variant's own overrides (without its rung's), the baseline's empty, in the plan's order."""
    first = plan.rungs[0]
    return {c.label: {k: v for k, v in c.overrides.items() if k not in first.overrides}
            for c in plan.cells if c.seed == plan.seeds[0] and c.rung == first.name}


def points(grid: Mapping[str, Sequence[object]]) -> list[dict[str, object]]:
    """Every combination of the grid's values, in the grid's order."""
    names = list(grid)
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*(grid[n] for n in names))]


def point_label(label: str, point: Mapping[str, object]) -> str:
    return f"{label} @ " + ", ".join(f"{short_field(k)}={show(v)}" for k, v in point.items())


@dataclass(frozen=True)
class TuneCell:
    """A tuning cell's place: its variant, size rung and grid point."""

    variant: str
    rung: str
    point: dict[str, Any]


@dataclass(frozen=True)
class RungGrid:
    """One variant's grid at one size rung, and the rule that set it (ablate/study/rung_rates.py)."""

    variant: str
    rung: str  # the size rung
    params: int  # the baseline's parameters without embeddings there (the rate law's N)
    grid: dict[str, list[Any]] | None  # None: not tuned here (muP above the smallest) or not known yet
    rule: str = TUNED
    source: str | None = None  # where a derived grid or rate came from, in words


def _cells_at(plan: StudyPlan, label: str, own: Mapping[str, Any], rung: Any,
              grid: Mapping[str, Sequence[Any]], seed: int) -> list[tuple[Cell, TuneCell]]:
    base_at = derive(plan.data, plan.smap, rung.overrides, plan.origin, seed=seed)
    out = []
    for point in points(grid):
        merged = {**rung.overrides, **own, **point}
        spec = derive(plan.data, plan.smap, merged, plan.origin, seed=seed)
        cell = Cell(point_label(label, point), seed, spec, merged, spec_diff(base_at, spec),
                    arm=record.LADDER_TUNE_ARM, rung=rung.name)
        out.append((cell, TuneCell(label, rung.size_rung, point)))
    return out


def rung_grids(plan: StudyPlan, records: CellRecords | None = None) -> list[RungGrid]:
    """Every (size rung, variant)'s tuning grid, in the plan's order of rungs and variants. ``records``
    None: as planned (a grid from below planned around the smallest grid's middle); else as the tuning
    cells' records allow (a grid from below once every rung below is tuned)."""
    tune = tuning(plan)
    assert tune is not None
    larger = tune.larger_rungs
    sizes = size_rungs(plan.rungs)
    found: dict[tuple[str, str], RungGrid] = {}
    for label, own in variant_overrides(plan).items():
        below: list[Below] = []
        known = True
        for i, rung in enumerate(sizes):
            base = grid_at(tune.grid, tune.rungs, rung.size_rung)
            at = RungGrid(label, rung.size_rung, rung.compute.params, base)
            if i and larger is not None and larger.mup is not None:
                at = dataclasses.replace(at, grid=None, rule=MUP,
                                         source=f"the rate tuned at {sizes[0].size_rung}")
            elif i and larger is not None and larger.grid_from_below is not None:
                rule = larger.grid_from_below
                if records is None:
                    at = dataclasses.replace(at, grid={**base, LR: planned_grid(rule, tune.grid[LR])},
                                             rule=FROM_BELOW, source="planned; centred on the rungs below")
                elif not known:
                    at = dataclasses.replace(at, grid=None, rule=FROM_BELOW)
                else:
                    values, source = grid_from(rule, below, rung.compute.params)
                    at = dataclasses.replace(at, grid={**base, LR: values}, rule=FROM_BELOW, source=source)
            found[(rung.size_rung, label)] = at
            if records is not None and at.grid is not None and known:
                scores, best, edge = _scored(plan, label, own, rung, at.grid, records)
                if best is None:
                    known = False
                elif LR in best:
                    below.append(Below(rung.size_rung, rung.compute.params, float(best[LR]), LR in edge))
    return [found[(r.size_rung, label)] for r in sizes for label in variant_overrides(plan)]


def tune_cells(plan: StudyPlan, records: CellRecords | None = None
               ) -> tuple[list[Cell], dict[str, TuneCell]]:
    """The tuning arm's cells, seed-major as the study's, and each one's (variant, rung, point) by key:
    every grid known (``rung_grids``), as planned without ``records``."""
    tune = tuning(plan)
    assert tune is not None
    cells: list[Cell] = []
    where: dict[str, TuneCell] = {}
    variants = variant_overrides(plan)
    rungs = {r.size_rung: r for r in size_rungs(plan.rungs)}
    grids = [g for g in rung_grids(plan, records) if g.grid is not None]
    for seed in tune.seeds:
        for g in grids:
            made = _cells_at(plan, g.variant, variants[g.variant], rungs[g.rung], g.grid or {}, seed)
            for cell, at in made:
                cells.append(cell)
                where[cell.key] = at
    return cells, where


def tune_arm(plan: StudyPlan, records: CellRecords | None = None) -> StudyPlan:
    """The tuning arm: its cells in the study's queue, on the tuning seeds (one look: no comparison); with
    ``records`` the cells every grid known so far needs (``rung_grids``)."""
    tune = tuning(plan)
    assert tune is not None
    cells, _ = tune_cells(plan, records)
    return dataclasses.replace(plan, cells=cells, seeds=list(tune.seeds), arm=record.LADDER_TUNE_ARM)


@dataclass(frozen=True)
class PointScore:
    point: dict[str, Any]
    mean: float | None  # over its tuning seeds; inf (or -inf) when one diverged or failed; None: not done
    seeds: int  # seeds done


@dataclass(frozen=True)
class RungBest:
    """One variant's tuning at one size rung."""

    variant: str
    rung: str
    params: int  # the baseline's parameters without embeddings at the rung (the rate law's N)
    scores: list[PointScore]
    best: dict[str, Any] | None  # None until every point's seeds are done
    edge: list[str]  # fields whose best value is the lowest or the highest of the rung's grid
    rule: str = TUNED  # what set the rung's grid or rate (ablate/study/rung_rates.py)
    source: str | None = None
    grid: dict[str, list[Any]] | None = None


def _score(values: Sequence[float | None], statuses: Sequence[str], worst: float) -> float | None:
    if any(s in ("diverged", "failed") for s in statuses):
        return worst
    done = [v for v, s in zip(values, statuses, strict=True) if s == "finished" and v is not None]
    return sum(done) / len(done) if done and len(done) == len(values) else None


def _scored(plan: StudyPlan, label: str, own: Mapping[str, Any], rung: Any, grid: Mapping[str, Sequence[Any]],
            records: CellRecords) -> tuple[list[PointScore], dict[str, Any] | None, list[str]]:
    """One (variant, rung)'s point scores over the tuning seeds, its best point (None until every point is
    done) and the fields at an edge of the grid."""
    tune = tuning(plan)
    assert tune is not None
    maximize = plan.direction == "maximize"
    worst = -math.inf if maximize else math.inf
    runs: dict[str, list[tuple[float | None, str]]] = {}
    for seed in tune.seeds:
        for cell, at in _cells_at(plan, label, own, rung, grid, seed):
            rec = records.get(cell.key)
            shown = json.dumps(at.point, sort_keys=True)
            runs.setdefault(shown, []).append((rec.metric if rec is not None else None,
                                               rec.status if rec is not None else "pending"))
    scores = []
    for point in points(grid):
        mine = runs.get(json.dumps(point, sort_keys=True), [])
        scores.append(PointScore(point, _score([v for v, _ in mine], [s for _, s in mine], worst),
                                 sum(s == "finished" for _, s in mine)))
    if not scores or any(s.mean is None for s in scores):
        return scores, None, []
    pick = (max if maximize else min)(scores, key=lambda s: s.mean)  # type: ignore[arg-type,return-value]
    return scores, pick.point, at_edge(grid, pick.point)


def best_per_rung(plan: StudyPlan, records: CellRecords) -> list[RungBest]:
    """Every (variant, size rung)'s scores and best point from the tuning cells' records, in the plan's
    order of rungs and variants; under muP a rung above the smallest takes the smallest's best."""
    variants = variant_overrides(plan)
    rungs = {r.size_rung: r for r in size_rungs(plan.rungs)}
    out: list[RungBest] = []
    first: dict[str, RungBest] = {}
    for g in rung_grids(plan, records):
        if g.rule == MUP:
            top = first[g.variant]
            out.append(RungBest(g.variant, g.rung, g.params, [], top.best, [], g.rule, g.source))
            continue
        if g.grid is None:  # a grid from below, the rungs below still tuning
            out.append(RungBest(g.variant, g.rung, g.params, [], None, [], g.rule, g.source))
            continue
        scores, best, edge = _scored(plan, g.variant, variants[g.variant], rungs[g.rung], g.grid, records)
        found = RungBest(g.variant, g.rung, g.params, scores, best, edge, g.rule, g.source, g.grid)
        first.setdefault(g.variant, found)
        out.append(found)
    return out


def at_edge(grid: Mapping[str, Sequence[object]], best: Mapping[str, object]) -> list[str]:
    """The fields whose best value is the lowest or highest of their (numeric) grid."""
    out = []
    for name, values in grid.items():
        numbers = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
        if len(numbers) == len(values) and best.get(name) in (min(numbers), max(numbers)):
            out.append(name)
    return out


def tuned_plan(plan: StudyPlan, bests: Sequence[RungBest]) -> StudyPlan:
    """The study's cells at each variant's own best point at each size (every budget of a size at its
    best), seed-major as plan_study orders them; each cell's diff is against the baseline's own best there."""
    chosen = {(b.variant, b.rung): b.best or {} for b in bests}
    variants = variant_overrides(plan)
    cells = []
    for seed in plan.seeds:
        for rung in plan.rungs:
            base = {**rung.overrides, **chosen.get(("baseline", rung.size_rung), {})}
            base_at = derive(plan.data, plan.smap, base, plan.origin, seed=seed)
            for label, own in variants.items():
                merged = {**rung.overrides, **own, **chosen.get((label, rung.size_rung), {})}
                spec = derive(plan.data, plan.smap, merged, plan.origin, seed=seed)
                cells.append(Cell(label, seed, spec, merged, spec_diff(base_at, spec), rung=rung.name))
    return dataclasses.replace(plan, cells=cells)


def complete(bests: Sequence[RungBest]) -> bool:
    return bool(bests) and all(b.best is not None for b in bests)


def tuning_record(plan: StudyPlan, bests: Sequence[RungBest]) -> dict[str, object]:
    """What the parent records (tag ``ablate.ladder_tune``): the grid and seeds, each (variant, rung)'s
    scores, best point and edge flag, and per variant the best learning rate's power law in parameters
    (rungs whose best sat at an edge of the grid left out of the fit: they only bound it)."""
    tune = tuning(plan)
    assert tune is not None
    laws: dict[str, Any] = {}
    if LR in tune.grid:
        for label in variant_overrides(plan):
            mine = [b for b in bests if b.variant == label and b.best is not None and LR not in b.edge]
            law = fit_rate_law([b.params for b in mine], [float(b.best[LR]) for b in mine  # type: ignore[index]
                                                          ]) if len(mine) >= 2 else None
            laws[label] = None if law is None else {
                "exponent": law.exponent, "low": law.exponent_low, "high": law.exponent_high,
                "level": law.level, "rungs": law.n, "coefficient": math.exp(law.intercept)}
    check = None
    if tune.larger_rungs is not None and tune.larger_rungs.mup is not None:  # what allowed muP's one rate
        found = mup_check.read_check(tune.larger_rungs.mup.check, Path(plan.origin).parent)
        check = found.as_dict() if isinstance(found, mup_check.MupCheck) else None
    return {"grid": tune.grid, "rung_grids": tune.rungs, "seeds": list(tune.seeds), "metric": plan.metric,
            **({"mup_check": check} if check is not None else {}),
            "rungs": [{"variant": b.variant, "rung": b.rung, "params": b.params, "best": b.best,
                       "edge": b.edge,
                       "scores": [{"point": s.point, "mean": _finite(s.mean), "seeds": s.seeds}
                                  for s in b.scores],
                       # what set a rung's grid or rate, where not its own written grid
                       **({"rule": b.rule, "source": b.source, "grid": b.grid} if b.rule != TUNED else {})}
                      for b in bests],
            "rate_laws": laws}


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def tuning_tag(plan: StudyPlan, bests: Sequence[RungBest]) -> dict[str, str]:
    return {record.LADDER_TUNE: json.dumps(tuning_record(plan, bests), sort_keys=True)}


def format_bests(bests: Sequence[RungBest]) -> list[str]:
    """Each variant's best point per rung, an edge flagged (the study's log and the dry run)."""
    lines = []
    for b in bests:
        if b.best is None:
            done = sum(s.mean is not None for s in b.scores)
            waits = " (its grid waits for the rungs below)" if not b.scores else ""
            lines.append(f"  {b.rung} {b.variant}: {done} of {len(b.scores)} grid points done{waits}")
            continue
        shown = ", ".join(f"{short_field(k)}={show(v)}" for k, v in b.best.items())
        edges = ", ".join(short_field(f) for f in b.edge)
        flag = f"  AT THE GRID'S EDGE ({edges}): the best may lie beyond" if b.edge else ""
        why = f" ({b.rule}: {b.source})" if b.rule != TUNED else ""
        lines.append(f"  {b.rung} {b.variant}: best {shown}{why}{flag}")
    return lines


def size_rung(plan: StudyPlan) -> Any:
    """The smallest size rung."""
    return size_rungs(plan.rungs)[0]


def describe(plan: StudyPlan) -> list[str]:
    """The dry run's lines on the tuning: the grid per rung, the cells, their planned FLOPs beside the
    evaluation cells'."""
    tune = tuning(plan)
    if tune is None:
        return []
    cells, _ = tune_cells(plan)
    flops = {r.name: r.compute.flops for r in plan.rungs}
    tuning_flops = sum(flops[c.rung] for c in cells if c.rung is not None)
    eval_flops = sum(flops[c.rung] for c in plan.cells if c.rung is not None)
    lines = [f"tuning (scales.tune): {len(cells)} cells: every variant at every grid point of every size, on "
             f"seeds {', '.join(map(str, tune.seeds))} (never evaluated); {tuning_flops:.3g} FLOPs planned, "
             f"{tuning_flops / eval_flops:.2f}x the evaluation cells' {eval_flops:.3g}"]
    larger = tune.larger_rungs
    for rung in size_rungs(plan.rungs):
        grid = grid_at(tune.grid, tune.rungs, rung.size_rung)
        shown = "; ".join(f"{short_field(k)} {', '.join(show(v) for v in vs)}" for k, vs in grid.items())
        first = rung.size_rung == size_rung(plan).size_rung
        if not first and larger is not None and larger.grid_from_below is not None:
            rule = larger.grid_from_below
            shown = (f"{short_field(LR)}: {rule.points} rates a factor {rule.factor:g} apart, derived when "
                     "the rungs below are tuned: around the power law of their best rates in parameters "
                     "(the rung below's best while only one is below)"
                     + "".join(f"; {short_field(k)} {', '.join(show(v) for v in vs)}"
                               for k, vs in grid.items() if k != LR))
        elif not first and larger is not None and larger.mup is not None:
            shown = (f"not tuned: every variant at its best rate of {size_rung(plan).size_rung}, under muP's "
                     f"multipliers (its transfer check: {larger.mup.check})")
        lines.append(f"  {rung.size_rung}: {shown}")
    lines.append("  then the evaluation seeds run each variant at its own best point at each size (every "
                 "data budget of a size at the size's best); a best at a grid edge is flagged in the report")
    return lines
