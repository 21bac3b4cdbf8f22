"""Fair and transferable comparisons: an ablation's ``tune:`` and ``confirm:`` sections.

    ablation:
      axes: {model.norm: [layernorm, rmsnorm]}
      tune:                                    # an equal tuning budget for every variant
        space:                                 # as search.space
          train.optimizer.lr: {low: 1.0e-4, high: 3.0e-3, log: true}
          train.schedule.warmup_steps: {low: 0, high: 800, step: 100, int: true}
        trials: 12                             # per variant, the baseline included
        fidelity: {fraction: 0.25}             # or {steps: 300}; left out: as long as a cell
        seed: 0                                # the sampler's seed, the same for every variant
      confirm:                                 # verdicts checked at a larger scale, paired by seed
        spec: ../multi30k-de-en-local.yaml     # or overrides: {train.max_steps: 1800}
        seeds: 3                               # or [0, 1, 2]

This module holds what needs no Optuna: the checks of both sections against the spec (every problem
located at its file and line, raised with the rest of the plan's problems), the steps a tuning trial
trains (its fidelity), the spec a trial of a variant trains, and the budget `ablate study --dry-run`
prints. It imports nothing of ablate/study/designs.py (plan imports it).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ablate.spec.error_lines import check_field_path
from ablate.spec.experiment import ExperimentSpec, flatten
from ablate.spec.load import SpecError, load_spec_data, set_dotted
from ablate.spec.study_sections import ConfirmSpec, SearchParam, TuneSpec
from ablate.spec.yamlsrc import Loc, Problem, SourceMap
from ablate.study.derived_specs import derive, show

TUNE, CONFIRM = "ablation.tune", "ablation.confirm"


def fidelity_steps(tune: TuneSpec, spec: ExperimentSpec) -> int | None:
    """The steps one tuning trial trains: fidelity.steps, fidelity.fraction of train.max_steps (at least 1),
    or as long as a cell (None when the cell ends by epochs only)."""
    f, cell = tune.fidelity, spec.train.max_steps
    if f is None:
        return cell
    if f.steps is not None:
        return f.steps
    assert f.fraction is not None
    return None if cell is None else max(1, round(f.fraction * cell))


AUTO_SEEDS = 100  # seeds.max: auto may reach this many seeds (the schema's bound on seeds.max)


def evaluation_seeds(spec: ExperimentSpec) -> list[int]:
    """Every seed the study's cells may train on: its listed seeds, ``repeats`` from the spec's seed, a
    range's up to its max (``auto``: up to the most a range allows, as the plan's size is not known yet),
    and the confirmation cells' (``ablation.confirm.seeds``)."""
    abl, first = spec.ablation, spec.seed
    seeds = abl.seed_list(first, AUTO_SEEDS) if abl is not None else [first]
    confirm = abl.confirm.seed_list(first) if abl is not None and abl.confirm is not None else []
    return sorted(set(seeds) | set(confirm))


def sampler_seed(tune: TuneSpec, spec: ExperimentSpec) -> int:
    """The seed every search trains its trials on (and its sampler's): ``tune.seed``, else the first seed
    after the study's evaluation seeds, so that the search's choice and the verdicts it feeds never share
    one seed's noise (a trial on an evaluation seed picks the setting that suits that seed, then is judged
    on it)."""
    return tune.seed if tune.seed is not None else max(evaluation_seeds(spec)) + 1


def trial_overrides(tune: TuneSpec, spec: ExperimentSpec, variant: Mapping[str, object],
                    values: Mapping[str, object]) -> dict[str, object]:
    """What a tuning trial of a variant changes on the baseline: the variant's fields, the sampled values,
    and train.max_steps at the fidelity."""
    out = {**variant, **values}
    steps = fidelity_steps(tune, spec)
    if steps is not None and steps != spec.train.max_steps:
        out["train.max_steps"] = steps
    return out


def best_overrides(variant: Mapping[str, object], best: Mapping[str, object]) -> dict[str, object]:
    """A variant at its own best settings: its fields plus the best trial's values (at the cell's length)."""
    return {**variant, **best}


@dataclass(frozen=True)
class Change:
    """How far a variant's best value of one tuning dimension lies from the baseline's setting: as the
    reader reads it (``x3`` for a log range, ``+200`` for a linear one, ``a -> b`` for a choice) and as a
    fraction of the searched range (log ranges in log units; an ordered numeric choice by its steps; any
    other different choice counts 1)."""

    field: str
    baseline: Any
    best: Any
    shown: str
    of_range: float


def changes(space: Mapping[str, SearchParam], baseline: Mapping[str, object], best: Mapping[str, object]
            ) -> list[Change]:
    """Each dimension's change from the baseline's settings to a variant's best (the best-settings table)."""
    out = []
    for name, p in space.items():
        a: Any = baseline.get(name)
        b: Any = best.get(name, a)
        numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (a, b))
        if p.choice is not None or not numbers or p.low is None or p.high is None:
            same = a == b or show(a) == show(b)
            shown = "same" if same else f"{show(a)} -> {show(b)}"
            out.append(Change(name, a, b, shown, 0.0 if same else _choice_distance(p.choice, a, b)))
        elif p.log and a > 0 and b > 0:
            ratio = b / a
            out.append(Change(name, a, b, "same" if ratio == 1 else f"x{ratio:.3g}",
                              abs(math.log(ratio)) / math.log(p.high / p.low)))
        else:
            diff = b - a
            shown = "same" if diff == 0 else show(diff) if diff < 0 else f"+{show(diff)}"
            out.append(Change(name, a, b, shown, abs(diff) / (p.high - p.low)))
    return out


def _choice_distance(choices: Sequence[object] | None, a: object, b: object) -> float:
    """How far apart two different values of a choice lie: for an ordered list of numbers (d_ff 512, 1024,
    2048) the steps between them over the list's span, so a neighbour is not a jump across the range; any
    other change (a schedule's name) counts 1."""
    if choices is None or len(choices) < 2 or a not in choices or b not in choices:
        return 1.0
    numbers = [c for c in choices if isinstance(c, int | float) and not isinstance(c, bool)]
    if len(numbers) < len(choices) or not isinstance(a, int | float) or not isinstance(b, int | float):
        return 1.0
    ordered = sorted(numbers)
    return abs(ordered.index(a) - ordered.index(b)) / (len(ordered) - 1)


# ---------------------------------------------------------------- checks
def _as_number(value: object) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else -math.inf


def _touches(a: str, b: str) -> bool:
    """Two dotted fields overlap: equal, or one inside the other."""
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


def problems(spec: ExperimentSpec, data: Mapping[str, object], smap: SourceMap, origin: str,
             variants: Sequence[Mapping[str, object]]) -> list[Problem]:
    """Every problem of ``ablation.tune`` and ``ablation.confirm`` given the baseline ``data`` and the
    variants' overrides (the baseline's ``{}`` among them): each located where the spec says it."""
    abl = spec.ablation
    if abl is None:
        return []
    found: list[Problem] = []
    changed = list(dict.fromkeys(k for v in variants for k in v))
    if abl.tune is not None:
        found += _tune_problems(abl.tune, spec, data, smap, origin, changed)
    if abl.confirm is not None:
        found += _confirm_problems(abl.confirm, data, smap, origin, variants, changed)
    return found


def _tune_problems(tune: TuneSpec, spec: ExperimentSpec, data: Mapping[str, object], smap: SourceMap,
                   origin: str, changed: Sequence[str]) -> list[Problem]:
    out: list[Problem] = []

    def add(path: str, message: str) -> None:
        out.append(Problem(smap.where(path, origin), path, message))

    shared = tune.seed is not None and tune.seed in evaluation_seeds(spec)
    if shared:
        add(f"{TUNE}.seed", f"seed {tune.seed} is also one of the study's evaluation seeds: a search that "
            "tunes on an evaluation seed picks the setting that suits that seed, then is judged on it; take "
            f"another, or leave it out (the first seed after the study's: {max(evaluation_seeds(spec)) + 1})")
    f, cell = tune.fidelity, spec.train.max_steps
    if f is not None and f.fraction is not None and cell is None:
        add(f"{TUNE}.fidelity.fraction", "a fraction of the cell's steps needs train.max_steps (this cell "
            "ends by epochs): give fidelity: {steps: ...}")
    if f is not None and f.steps is not None and cell is not None and f.steps > cell:
        add(f"{TUNE}.fidelity.steps", f"{f.steps} steps is longer than a cell ({cell}, train.max_steps): a "
            "tuning trial should be at most as long")
    base = flatten(spec.resolved())
    for name, p in tune.space.items():
        at = f"{TUNE}.space.{name}"
        error = check_field_path(name)
        if error:
            add(at, error)
            continue
        clash = [k for k in changed if _touches(k, name)]
        if clash:
            add(at, f"{name} is what the variants change ({clash[0]}): tuning it would undo the comparison")
            continue
        if name == "train.max_steps" and f is not None:
            add(at, "train.max_steps is set by the tuning fidelity: leave it out of the space")
            continue
        if p.when:
            add(f"{at}.when", "conditional dimensions (when) are for search.space; a tuning space samples "
                "every dimension")
        if p.int and p.step is not None and p.step != int(p.step):
            add(at, "an int dimension needs an int step")
        value = base.get(name)
        if p.choice is None and not p.int and isinstance(value, int) and not isinstance(value, bool):
            add(at, f"{name} is an integer field: add `int: true` to sample integers")
        if p.log and p.step is not None:
            add(at, "log and step exclude each other")
        steps = fidelity_steps(tune, spec)
        longest = max(p.choice, default=None, key=_as_number) if p.choice is not None else p.high
        if name == "train.schedule.warmup_steps" and steps is not None and _as_number(longest) >= steps:
            # its trials would end inside their own warm-up, before the peak learning rate: the search
            # would rank warm-ups by how far they got, and favour the short ones
            add(at, f"warm-ups up to {show(longest)} steps reach past the {steps} steps a tuning trial "
                "trains (tune.fidelity): keep them shorter, or the fidelity longer")
    if out:
        return out
    for name, p in tune.space.items():  # each choice (or range end) must give a valid spec
        at = f"{TUNE}.space.{name}"
        values = list(p.choice) if p.choice is not None else [p.low, p.high]
        if p.int and p.choice is None:
            values = [int(v) for v in values]  # type: ignore[arg-type]
        for value in values:
            try:
                derive(data, smap, trial_overrides(tune, spec, {}, {name: value}), smap.where(at, origin))
            except SpecError as exc:
                out += [Problem(smap.where(at, origin), at, f"{name}={show(value)} gives an invalid spec: "
                                f"{sub.path}: {sub.message}") for sub in exc.problems]
    return out


def confirm_base(confirm: ConfirmSpec, data: Mapping[str, object], smap: SourceMap, origin: str
                 ) -> tuple[dict[str, object], SourceMap, str]:
    """The larger setting's raw data, source map and origin: this spec with ``overrides``, or the file
    ``spec`` names (relative to the file that names it). Raises SpecError located at ``confirm``."""
    if confirm.spec is None:
        larger = copy.deepcopy(dict(data))
        where = smap.copy()
        for key, value in confirm.overrides.items():
            at = f"{CONFIRM}.overrides.{key}"
            try:
                set_dotted(larger, key, copy.deepcopy(value))
            except KeyError as exc:
                problem = Problem(smap.where(at, origin), at, f"cannot set it: {exc.args[0]}")
                raise SpecError([problem]) from None
            where.drop_under(key)
            where.set(key, Loc(smap.where(at, origin)))
        return larger, where, origin
    at = f"{CONFIRM}.spec"
    written = smap.where(at, origin)
    source, _, line = written.rpartition(":")
    folder = Path(source if line.isdigit() else origin).parent
    path = folder / confirm.spec
    if not path.is_file():
        raise SpecError([Problem(written, at, f"file not found: {path}")])
    other, other_map = load_spec_data(path)
    # Its runs are the study's: tracked where the study's are (its parent run is in that store).
    other.pop("tracking", None)
    if "tracking" in data:
        other["tracking"] = copy.deepcopy(data["tracking"])
    return other, other_map, str(path)


def _confirm_problems(confirm: ConfirmSpec, data: Mapping[str, object], smap: SourceMap, origin: str,
                      variants: Sequence[Mapping[str, object]], changed: Sequence[str]) -> list[Problem]:
    out: list[Problem] = []
    for key in confirm.overrides:
        at = f"{CONFIRM}.overrides.{key}"
        error = check_field_path(key)
        clash = [k for k in changed if _touches(k, key)]
        if error:
            out.append(Problem(smap.where(at, origin), at, error))
        elif clash:
            out.append(Problem(smap.where(at, origin), at, f"{key} is what the variants change ({clash[0]}): "
                               "the larger setting must leave the variants as they are"))
    if out:
        return out
    try:
        larger, where, larger_origin = confirm_base(confirm, data, smap, origin)
    except SpecError as exc:
        return exc.problems
    at = CONFIRM if confirm.spec is None else f"{CONFIRM}.spec"
    for overrides in variants:  # each variant must exist at the larger setting too
        try:
            derive(larger, where, overrides, larger_origin)
        except SpecError as exc:
            shown = ", ".join(f"{k}={show(v)}" for k, v in overrides.items()) or "the baseline"
            out += [Problem(smap.where(at, origin), at, f"at the larger setting, {shown} gives an invalid "
                            f"spec: {sub.path}: {sub.message}") for sub in exc.problems]
    return out


# ---------------------------------------------------------------- the budget (--dry-run)
def _steps(n: int | None) -> str:
    return "as long as a cell (epochs)" if n is None else f"{n:,} steps"


def budget_lines(spec: ExperimentSpec, data: Mapping[str, object], smap: SourceMap, origin: str,
                 variants: int, cells: int) -> list[str]:
    """What ``tune:`` and ``confirm:`` add to a study, for `ablate study --dry-run`, phase by phase: the
    trials per variant, the steps each trains and their total; the cells at each variant's own best; the
    confirmation cells at most, and their steps; the whole study's steps at most."""
    abl = spec.ablation
    if abl is None or (abl.tune is None and abl.confirm is None):
        return []
    lines: list[str] = []
    cell = spec.train.max_steps
    totals: list[int | None] = [cells * cell if cell is not None else None]  # each phase's steps at most
    if abl.tune is not None:
        t = abl.tune
        per = fidelity_steps(t, spec)
        trials = variants * t.trials
        total = f"{trials * per:,} steps at most" if per is not None else "unknown steps (epochs)"
        fraction = f", {per / cell:.0%} of a cell" if per is not None and cell else ""
        lines.append(f"tuning: {t.trials} trials per variant x {variants} variants = {trials} trials of "
                     f"{_steps(per)} each{fraction}; {total} (pruned trials stop earlier)")
        lines.append(f"  each variant its own search over {', '.join(t.space)}: sampler {t.sampler} "
                     f"(seed {sampler_seed(t, spec)}), pruner {t.pruner.name}; then the study's cells run "
                     "each variant at its own best settings")
        if cell is not None:
            lines.append(f"  the study's cells: up to {cells} x {cell:,} = {cells * cell:,} steps")
            lines.append(f"  own best: up to {cells} x {cell:,} = {cells * cell:,} steps more (a variant "
                         "whose best settings are the baseline's reuses its cells)")
        totals += [trials * per if per is not None else None, totals[0]]
    if abl.confirm is not None:
        c = abl.confirm
        seeds = c.seed_list(spec.seed)
        try:
            larger, where, larger_origin = confirm_base(c, data, smap, origin)
            steps = derive(larger, where, {}, larger_origin).train.max_steps
        except SpecError:
            steps = None
        setting = c.spec or ", ".join(f"{k}={show(v)}" for k, v in c.overrides.items())
        most = variants * len(seeds)
        total = f"; {most * steps:,} steps at most" if steps is not None else ""
        lines.append(f"confirm at {setting}: each decided comparison rerun on seeds "
                     f"{', '.join(map(str, seeds))}, paired by seed: at most {variants} variants x "
                     f"{len(seeds)} seeds = {most} cells of {_steps(steps)}{total}")
        totals.append(most * steps if steps is not None else None)
    known = [n for n in totals if n is not None]
    if len(known) == len(totals):
        lines.append(f"in all, every phase together: {sum(known):,} steps at most")
    return lines
