"""An ablation study's plan: the spec is the baseline, its ``ablation`` section the design, and every cell
(variant x seed) a spec of its own, identified by its hash and seed (`plan_study`); and how a plan and
its cells' states read in a terminal (`format_plan`, `format_grid`). Running the cells:
ablate/study/ablation.py.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ablate.errors import AblateError
from ablate.spec import metricnames
from ablate.spec.axis_fields import ignored_fields, new_components_default, settled_overrides
from ablate.spec.axis_levels import level_fields
from ablate.spec.experiment import ExperimentSpec, flatten
from ablate.spec.load import SpecError, load_spec, load_spec_data
from ablate.spec.study_sections import AblationSpec
from ablate.spec.yamlsrc import Problem, SourceMap, join
from ablate.stats.sequential import Design
from ablate.study import arm_settings as tuning
from ablate.study import ladder_checks, rung_rounds
from ablate.study.cell_queue import CellRecords
from ablate.study.derived_specs import derive, show
from ablate.study.rungs import Rung
from ablate.study.rungs import expand as expand_rungs
from ablate.study.sizing import choose_max, pilot_of
from ablate.study.study_plan import Cell, StudyPlan, short_field
from ablate.tracking import record

_NOT_COMPARED = ("seed", "ablation", "search", "description")


def study_metric(spec: ExperimentSpec) -> str:
    """ablation.metric, where 'auto' is BLEU on text, exact match on synthetic tasks and perplexity for a
    decoder-only language model; with train.weight_average, the averaged weights' reading of it
    ('val/averaged/bleu': the noise the option removes is the point of setting it), so that naming the
    plain 'val/bleu' is how a study with averaging decides on the best checkpoint instead."""
    assert spec.ablation is not None
    if spec.ablation.metric != "auto":
        return spec.ablation.metric
    if spec.is_lm:
        auto = metricnames.VAL_PPL
    elif spec.eval.metric != "auto":
        auto = f"val/{spec.eval.metric}"
    else:
        auto = metricnames.VAL_EXACT_MATCH if spec.data.source == "synthetic" else metricnames.VAL_BLEU
    return record.averaged(auto) if spec.train.weight_average is not None else auto


def _label(overrides: Mapping[str, object]) -> str:
    return ", ".join(f"{short_field(k)}={show(v)}" for k, v in overrides.items()) or "baseline"


def _compared(spec: ExperimentSpec) -> dict[str, object]:
    data = spec.resolved()
    for key in _NOT_COMPARED:
        data.pop(key, None)
    return flatten(data)


def spec_diff(baseline: ExperimentSpec, other: ExperimentSpec) -> list[tuple[str, Any, Any]]:
    """Fields whose resolved values differ (the seed aside; a field a component of either spec ignores, such
    as model.activation under a gated FFN, is no difference): what a report says distinguishes two runs."""
    a, b = _compared(baseline), _compared(other)
    ignored = ignored_fields(a) | ignored_fields(b)  # a sub-axis the component of either spec does not take
    return [(k, a.get(k), b.get(k)) for k in sorted(set(a) | set(b))
            if a.get(k) != b.get(k) and k not in ignored
            and not new_components_default(k, a.get(k), b.get(k))]


def _expand_cells(data: Mapping[str, object], smap: SourceMap, origin: str, seeds: Sequence[int],
                  rungs: list[Rung], variants: list[tuple[str, dict[str, object]]]) -> list[Cell]:
    """Every (seed, rung, variant) cell, seed-major: an interrupted study has complete comparisons for the
    first seeds; on a ladder each rung's variants are paired by seed within the rung."""
    cells = []
    at_rungs: list[Rung | None] = [*rungs] or [None]
    for seed in seeds:
        for rung in at_rungs:
            at_rung = rung.overrides if rung is not None else {}
            base_at_seed = derive(data, smap, at_rung, origin, seed=seed)
            for label, overrides_ in variants:
                merged = {**at_rung, **overrides_}
                cell_spec = derive(data, smap, merged, origin, seed=seed)
                cells.append(Cell(label, seed, cell_spec, merged, spec_diff(base_at_seed, cell_spec),
                                  rung=None if rung is None else rung.name))
    return cells


def plan_study(spec_path: str, overrides: Sequence[str] = (), size: bool = True) -> StudyPlan:
    """Expand the ablation design into cells; an invalid variant is a spec error naming its axis. ``size``
    false: a ``seeds.max: auto`` is not chosen from the pilot (nothing read beyond the spec; `ablate
    validate`), its cells planned at ``seeds.min``."""
    spec = load_spec(spec_path, overrides)
    abl = spec.ablation
    if abl is None:
        raise AblateError(f"{spec_path} has no ablation section: nothing to ablate (see `ablate run`)")
    data, smap = load_spec_data(spec_path, overrides)
    origin = str(spec_path)
    baseline = derive(data, smap, {}, origin)
    variants: list[tuple[str, dict[str, Any], ExperimentSpec]] = [("baseline", {}, baseline)]
    seen, problems = {baseline.spec_hash}, list[Problem]()
    written: dict[str, str] = {"baseline": ""}  # each variant's place in the spec
    design = abl.design

    def add(given: dict[str, object], at: str, label: str | None = None) -> None:
        label = label or _label(given)
        where = smap.where(at, origin)
        overrides_ = settled_overrides(data, given)
        try:
            variant = derive(data, smap, overrides_, where)
        except SpecError as exc:  # name the axis (or variant) at fault, then what the cell's spec says
            shown = ", ".join(f"{k}={show(v)}" for k, v in given.items())
            problems.extend(Problem(where, at, f"{shown} gives an invalid spec: {p.path}: {p.message}"
                                    + _levels_hint(design, p.message)) for p in exc.problems)
            return
        if variant.spec_hash not in seen:  # a value equal to the baseline's is the baseline
            seen.add(variant.spec_hash)
            variants.append((label, overrides_, variant))
            written[label] = at

    def is_base(given: dict[str, object]) -> bool:
        try:
            return derive(data, smap, settled_overrides(data, given), origin).spec_hash == baseline.spec_hash
        except SpecError:
            return False  # invalid alone, valid with another axis' value (full factorial)

    axes = axis_levels(abl)
    if abl.design == "one_at_a_time":
        for level in (level for levels in axes.values() for level in levels):
            add(level.fields, level.at, level.label)
    elif abl.design == "full_factorial":
        problems += _shared_fields(axes, smap, origin)
        for combo in itertools.product(*axes.values()):
            chosen = {k: v for level in combo for k, v in level.fields.items()}
            changed = [level.label for level in combo if not is_base(level.fields)]
            add(chosen, "ablation.axes", ", ".join(changed) or "baseline")
    else:
        for i, entry in enumerate(abl.variants):
            entry = dict(entry)
            label = entry.pop("label", None)
            add(flatten(entry), f"ablation.variants.{i}", str(label) if label else None)
    problems += _unknown_claims(abl, [label for label, _, _ in variants[1:]], smap, origin)
    problems += tuning.problems(spec, data, smap, origin, [o for _, o, _ in variants])  # tune:, confirm:
    labelled = [(label, overrides_) for label, overrides_, _ in variants]
    rungs: list[Rung] = []
    if abl.scales is not None:  # a ladder: every variant at every rung
        rungs, found = expand_rungs(abl.scales, data, smap, origin, labelled)
        problems += found
        if not found:  # a fair ladder: one scaling rule, matched sizes, a grid that tunes
            placed = [ladder_checks.Variant(label, o, written[label]) for label, o in labelled]
            listed = (abl.seeds if isinstance(abl.seeds, list)
                      else [spec.seed + i for i in range(abl.repeats or 1)])
            problems += ladder_checks.problems(abl, rungs, placed, listed, data, smap, origin)
    if problems:
        raise SpecError(problems)
    if abl.seeds is not None and not isinstance(abl.seeds, list) and abl.seeds.max == "auto":
        at_min = abl.model_copy(update={"seeds": abl.seeds.model_copy(update={"max": abl.seeds.min})})
        abl = spec.ablation = _auto_max(spec, origin, [label for label, _, _ in variants]) if size else at_min
    seeds = abl.seed_list(spec.seed)
    cells = _expand_cells(data, smap, origin, seeds, rungs, labelled)
    return StudyPlan(spec, baseline, cells, list(seeds), study_metric(spec), data, smap, origin,
                     list(overrides), rungs=rungs)


def _unknown_claims(abl: AblationSpec, labels: list[str], smap: SourceMap, origin: str) -> list[Problem]:
    """A published result (``ablation.expect``) about a variant the study does not run, one line each."""
    problems = []
    for i, claim in enumerate(abl.expect):
        if claim.variant not in labels:
            at = f"ablation.expect.{i}.variant"
            known = ", ".join(repr(v) for v in labels) or "none"
            problems.append(Problem(smap.where(at, origin), at,
                                    f"no variant {claim.variant!r} in this study; its variants: {known}"))
    return problems


@dataclass(frozen=True)
class Level:
    """One value of an ablation axis: the fields it sets, its label part (``norm=rms``, ``ffn=gelu_mlp``)
    and where the spec gives it."""

    label: str
    fields: dict[str, Any]
    at: str


def axis_levels(abl: AblationSpec) -> dict[str, list[Level]]:
    """Each axis of ``ablation.axes`` as its levels: a field's values (``model.norm: [builtin, rms]``: one
    field each) or an axis's named levels (``ffn: {swiglu: {model.ffn: swiglu}, gelu_mlp: {model.ffn: linear,
    model.activation: gelu}}``: the fields each sets)."""
    out: dict[str, list[Level]] = {}
    for key, values in abl.axes.items():
        if isinstance(values, dict):
            out[key] = [Level(f"{key}={name}", level_fields(fields), join(f"ablation.axes.{key}", name))
                        for name, fields in values.items()]
        else:
            out[key] = [Level(_label({key: value}), {key: value}, join(f"ablation.axes.{key}", i))
                        for i, value in enumerate(values)]
    return out


def _shared_fields(axes: dict[str, list[Level]], smap: SourceMap, origin: str) -> list[Problem]:
    """Two axes of a factorial that set one field would overwrite each other in some cells."""
    problems, owner = [], dict[str, str]()
    for key, levels in axes.items():
        for field in dict.fromkeys(f for level in levels for f in level.fields):
            if field in owner and owner[field] != key:
                at = f"ablation.axes.{key}"
                problems.append(Problem(smap.where(at, origin), at, f"axis {key!r} sets {field}, which axis "
                                        f"{owner[field]!r} sets too: a factorial's axes set distinct fields "
                                        "(one axis may set several, as named levels)"))
            owner.setdefault(field, key)
    return problems


def _levels_hint(design: str, message: str) -> str:
    """A factorial cell two list axes cannot form (a gated FFN with a GELU): point at named levels."""
    if design != "full_factorial" or " applies to " not in message:
        return ""
    return ("; a component and the settings it takes are one axis of named levels, e.g. ffn: {swiglu: "
            "{model.ffn: swiglu}, gelu_mlp: {model.ffn: linear, model.activation: gelu}} (docs/spec.md)")


def _auto_max(spec: ExperimentSpec, origin: str, labels: list[str]) -> AblationSpec:
    """The ablation section with ``seeds.max: auto`` resolved by the budget (ablate/study/sizing.py): the
    largest maximum whose worst case fits it, at the pilot's cell times. Deterministic, so every worker
    that plans the study reaches the same maximum; the store's pre-registered design holds it thereafter."""
    abl = spec.ablation
    assert abl is not None and abl.seeds is not None and not isinstance(abl.seeds, list)
    pilot = pilot_of(spec, origin, study_metric(spec))
    assert pilot is not None and abl.seeds.budget is not None  # the spec requires both with max: auto
    first = Design((abl.seeds.min,), abl.alpha, abl.min_effect, max(1, len(labels) - 1))
    chosen = choose_max(first, len(labels), abl.seeds.budget, pilot.seconds, labels[1:])
    return abl.model_copy(update={"seeds": abl.seeds.model_copy(update={"max": chosen})})


# ---------------------------------------------------------------- printing
def _shown(value: object) -> str:
    # A variant's own option (rope_base, glu_hidden) is absent from a spec without that variant.
    return "(not used)" if value is None else show(value)


def _default_design_note(abl: AblationSpec, variants: int) -> list[str]:
    """Several axes and no ``design:`` is one-at-a-time, which a reader of the axes may take for a grid."""
    if "design" in abl.model_fields_set or len(abl.axes) < 2:
        return []
    grid = math.prod(len(values) for values in abl.axes.values())
    return [f"note: design left to its default, one_at_a_time: each axis changes alone from the baseline "
            f"({variants} variants), never two together; `design: full_factorial` runs every combination "
            f"({grid} variants)"]


def format_plan(plan: StudyPlan, diffs: bool = True) -> str:
    abl = plan.spec.ablation
    assert abl is not None
    seeds = f"{len(plan.seeds)} seed{'s' if len(plan.seeds) > 1 else ''}"
    design, shown = plan.design, plan.cells
    rungs = max(1, len(plan.rungs))
    if design is None:
        count = f"{len(plan.cells)} cells"
    else:
        first = design.looks[0]
        low = first * len(plan.variants) * rungs
        if first == design.looks[-1]:  # one look: a range whose min is its max
            seeds, count = f"{first} seeds (one look)", f"{low} cells"
        else:
            seeds = f"{first} to {design.looks[-1]} seeds (adaptive)"
            count = f"{low} to {len(plan.cells)} cells"
        shown = [c for c in plan.cells if c.seed in plan.seeds[:first]]
    at_rungs = f" x {rungs} rungs" if plan.rungs else ""
    lines = [f"study {plan.name}: design {abl.design}, {len(plan.variants)} variants{at_rungs} x {seeds} "
             f"= {count}; metric {plan.metric} ({plan.direction})"]
    lines += _default_design_note(abl, len(plan.variants))
    lines += rung_rounds.describe(plan)
    if design is not None:
        each = " (at each rung)" if plan.rungs else ""
        lines.append(f"adaptive seeds{each}: {design.describe()}; round 1 runs the {len(shown)} cells below, "
                     "each later round adds seeds only to the comparisons still open")
    width = max(len(c.label) for c in plan.cells)
    for c in shown:
        at = f"  rung {c.rung}" if c.rung is not None else ""
        lines.append(f"  {c.label:<{width}}  seed {c.seed:<4}{at} {c.key}")
        if diffs and c.seed == plan.seeds[0] and c.rung in (None, plan.rungs[0].name if plan.rungs else None):
            lines.extend(f"      {k}: {_shown(a)} -> {_shown(b)}" for k, a, b in c.diff)
    if abl.expect:  # what the report will say each run reproduces or contradicts
        lines.append(f"checks {len(abl.expect)} published result{'s' if len(abl.expect) > 1 else ''} "
                     "(the report opens with each):")
        lines.extend(f"  {claim.variant}: {claim.effect} ({claim.source})" for claim in abl.expect)
    lines += tuning.budget_lines(plan.spec, plan.data, plan.smap, plan.origin, len(plan.variants),
                                 len(plan.cells))
    return "\n".join(lines)


def format_grid(plan: StudyPlan, records: CellRecords) -> str:
    width = max([len(c.label) for c in plan.cells] + [4])
    metric_name = record.final(plan.metric)  # a cell's value is its best checkpoint's, logged under final/
    rung_width = max([len(r.name) for r in plan.rungs] + [4]) if plan.rungs else 0
    rung_head = f"  {'rung':<{rung_width}}" if plan.rungs else ""
    head = f"  {'cell':<{width}}{rung_head}  {'seed':>4}  {'status':<11} {metric_name:>16}  {'step':>6}  run"
    cells = plan.cells
    if plan.design is not None:  # adaptive: the cells needed so far and those already run
        needed = set(rung_rounds.needed(plan, records)) | set(records)
        cells = [c for c in plan.cells if c.key in needed]
    lines = [f"study {plan.name} ({len(cells)} cells, metric {metric_name}, {plan.direction})", head]
    counts: Counter[str] = Counter()
    for c in cells:
        r = records.get(c.key)
        status = r.status if r else "pending"
        counts[status] += 1
        metric = f"{r.metric:.4g}" if r and r.metric is not None else "-"
        step = str(r.step) if r and r.step is not None else "-"
        at = f"  {c.rung or '':<{rung_width}}" if plan.rungs else ""
        lines.append(f"  {c.label:<{width}}{at}  {c.seed:>4}  {status:<11} {metric:>16}  {step:>6}  "
                     f"{(r.run_id or '-') if r else '-'}")
    lines.append(", ".join(f"{n} {s}" for s, n in counts.most_common()))
    if plan.design is not None:
        lines.append(rung_rounds.progress_text(plan, records))
    return "\n".join(lines)


# ---------------------------------------------------------------- running
