"""A fair ladder's checks before anything runs (``ablation.scales``: ``rule``, ``match``, ``tune``): one
scaling rule for every rung, each variant's size matched to the baseline's at every rung, and a tuning
grid that can tune; every problem located at the spec's line. Also what the dry run says of them: the
fields that change between rungs, and each variant's parameters and FLOPs beside the baseline's.

    scales:
      rule: {aspect_ratio: 16, d_head: 16, ffn_ratio: 4}   # d_model = 16 x layers, heads = d_model / 16
      match: 0.02                                          # every variant within 2% of the baseline's size

A rung that changes the model's shape and its size at once (the largest rung of reports/ladder-kdocs doubled
the depth at a fixed width, where the others widened at a fixed depth) confounds the two: under one rule the
aspect ratio, the head width and the feed-forward ratio hold, and only the size moves. A variant with fewer
parameters than the baseline at some rung (SwiGLU without ``glu_hidden: match_params``: 1.7% fewer there)
is compared at another size: outside ``match`` it is refused.

Imports nothing of the study's plan (ablate/study/designs.py calls it with the plan's parts).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ablate.engine.compute import Compute
from ablate.spec.error_lines import check_field_path
from ablate.spec.experiment import ExperimentSpec, flatten
from ablate.spec.load import SpecError
from ablate.spec.study_sections import AblationSpec, ScalesSpec
from ablate.spec.yamlsrc import Problem, SourceMap
from ablate.study import mup_check
from ablate.study.derived_specs import derive, show
from ablate.study.rungs import SCALES, Rung, planned


@dataclass(frozen=True)
class Variant:
    """A study's variant as the checks need it: its label, its overrides and where the spec writes it."""

    label: str
    overrides: Mapping[str, Any]
    at: str  # its dotted path in the spec (ablation.variants.2); '' for the baseline


@dataclass(frozen=True)
class SizeRow:
    """One variant at one size rung beside the baseline: parameters (without embeddings) and planned FLOPs."""

    rung: str
    label: str
    params: int
    flops: float
    base_params: int
    base_flops: float

    @property
    def params_off(self) -> float:
        return self.params / self.base_params - 1 if self.base_params else 0.0

    @property
    def flops_off(self) -> float:
        return self.flops / self.base_flops - 1 if self.base_flops else 0.0


def size_rungs(rungs: Sequence[Rung]) -> list[Rung]:
    """One rung per model size (a size's first data budget stands for it), in order of compute."""
    seen: dict[str, Rung] = {}
    for rung in rungs:
        seen.setdefault(rung.size_rung, rung)
    return list(seen.values())


def rule_breaks(scales: ScalesSpec, spec: ExperimentSpec) -> list[str]:
    """What a rung's model breaks of ``scales.rule`` (nothing without one)."""
    rule = scales.rule
    if rule is None:
        return []
    m, out = spec.model, []
    stacks = [m.decoder_layers] if spec.is_lm else [m.encoder_layers, m.decoder_layers]
    for depth in stacks:
        if abs(m.d_model - rule.aspect_ratio * depth) > 1e-9 * m.d_model:
            out.append(f"d_model {m.d_model} is not aspect_ratio {rule.aspect_ratio:g} x {depth} layers "
                       f"({rule.aspect_ratio * depth:g})")
            break
    if rule.d_head is not None and m.d_model != rule.d_head * m.heads:
        out.append(f"heads {m.heads} give d_head {m.d_model / m.heads:g}, not {rule.d_head}")
    if rule.ffn_ratio is not None and abs(m.d_ff - rule.ffn_ratio * m.d_model) > 1e-9 * m.d_ff:
        out.append(f"d_ff {m.d_ff} is not ffn_ratio {rule.ffn_ratio:g} x d_model "
                   f"({rule.ffn_ratio * m.d_model:g})")
    return out


def changed_fields(rungs: Sequence[Rung], data: Mapping[str, object], smap: SourceMap, origin: str
                   ) -> list[tuple[str, str, list[tuple[str, Any, Any]]]]:
    """Between each size rung and the next: (from, to, [(field, before, after)]) of every resolved spec field
    that changes (the step budget included), so that a reader sees what a rung scales."""
    sizes = size_rungs(rungs)
    flat = [flatten(derive(data, smap, r.overrides, origin).resolved()) for r in sizes]
    out = []
    for i in range(len(sizes) - 1):
        a, b = flat[i], flat[i + 1]
        diff = [(k, a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
        out.append((sizes[i].name, sizes[i + 1].name, diff))
    return out


def size_table(rungs: Sequence[Rung], variants: Sequence[Variant], data: Mapping[str, object],
               smap: SourceMap, origin: str) -> list[SizeRow]:
    """Each variant's parameters and planned FLOPs at each size rung beside the baseline's."""
    rows = []
    for rung in size_rungs(rungs):
        base: Compute = rung.compute
        for v in variants:
            if not v.overrides:
                continue
            compute = planned(derive(data, smap, {**rung.overrides, **v.overrides}, origin))
            rows.append(SizeRow(rung.name, v.label, compute.params, compute.flops, base.params, base.flops))
    return rows


def problems(abl: AblationSpec, rungs: Sequence[Rung], variants: Sequence[Variant], seeds: Sequence[int],
             data: Mapping[str, object], smap: SourceMap, origin: str) -> list[Problem]:
    """Every problem of ``scales.rule``, ``scales.match`` and ``scales.tune`` given the expanded rungs, each
    located where the spec writes the rung, the variant or the grid."""
    scales = abl.scales
    if scales is None or not rungs:
        return []
    out: list[Problem] = []

    def add(at: str, message: str) -> None:
        out.append(Problem(smap.where(at, origin), at, message))

    for rung in size_rungs(rungs):
        broken = rule_breaks(scales, derive(data, smap, rung.overrides, origin))
        if broken:
            add(f"{SCALES}.rungs.{rung.name}", f"rung {rung.name!r} breaks the scaling rule "
                f"({SCALES}.rule): {'; '.join(broken)}: every rung grows width and depth together")
    if scales.match is not None:
        for row in size_table(rungs, variants, data, smap, origin):
            worst = max(abs(row.params_off), abs(row.flops_off))
            if worst > scales.match:
                at = next(v.at for v in variants if v.label == row.label)
                add(at, f"variant {row.label} at rung {row.rung}: {row.params:,} parameters "
                    f"({row.params_off:+.1%}) and {row.flops:.3g} FLOPs ({row.flops_off:+.1%}) against the "
                    f"baseline's {row.base_params:,} and {row.base_flops:.3g}: outside {SCALES}.match "
                    f"±{scales.match:.1%}; match its size (e.g. model.glu_hidden: match_params)")
                break  # one line a study: the first variant found too far
    if scales.tune is not None:
        out += _tune_problems(scales, rungs, variants, seeds, data, smap, origin)
    return out


def _tune_problems(scales: ScalesSpec, rungs: Sequence[Rung], variants: Sequence[Variant],
                   seeds: Sequence[int], data: Mapping[str, object], smap: SourceMap, origin: str
                   ) -> list[Problem]:
    tune = scales.tune
    assert tune is not None
    out: list[Problem] = []
    at_tune = f"{SCALES}.tune"

    def add(at: str, message: str) -> None:
        out.append(Problem(smap.where(at, origin), at, message))

    shared = sorted(set(tune.seeds) & set(seeds))
    if shared:  # seeds from repeats: (a list is refused by the spec itself)
        add(f"{at_tune}.seeds", f"tuning seeds {shared} are also evaluation seeds: take others")
    changed = [k for v in variants for k in v.overrides]
    for name in tune.grid:
        at = f"{at_tune}.grid.{name}"
        error = check_field_path(name)
        clash = [k for k in changed if k == name or k.startswith(name + ".") or name.startswith(k + ".")]
        if error:
            add(at, error)
        elif clash:
            add(at, f"{name} is what a variant changes ({clash[0]}): tuning it would undo the comparison")
        elif name == "train.max_steps" or name.startswith("model."):
            add(at, f"{name} is what a rung sets: tune the recipe (learning rate, warm-up, decay), not the "
                "size")
    if out:
        return out
    if tune.larger_rungs is not None and tune.larger_rungs.mup is not None:  # muP's own check first
        specs = [(r.size_rung, derive(data, smap, r.overrides, origin)) for r in size_rungs(rungs)]
        out += mup_check.problems(tune.larger_rungs.mup.check, Path(origin).parent,
                                  specs[0][1].model.parametrisation,
                                  [(name, spec.model.d_model) for name, spec in specs], smap, origin)[0]
    for rung in size_rungs(rungs):
        for name, values in grid_at(tune.grid, tune.rungs, rung.size_rung).items():
            for value in values:
                try:
                    derive(data, smap, {**rung.overrides, name: value}, origin)
                except SpecError as exc:
                    at = f"{at_tune}.grid.{name}"
                    out += [Problem(smap.where(at, origin), at, f"{name}={show(value)} at rung {rung.name} "
                                    f"gives an invalid spec: {p.path}: {p.message}") for p in exc.problems]
    return out


def grid_at(grid: Mapping[str, Sequence[object]], per_rung: Mapping[str, Mapping[str, Sequence[object]]],
            rung: str) -> dict[str, list[object]]:
    """The grid a size rung tunes: ``tune.grid`` with the rung's own values where it gives some."""
    own = per_rung.get(rung, {})
    return {name: list(own.get(name, values)) for name, values in grid.items()}


def describe(abl: AblationSpec, rungs: Sequence[Rung], variants: Sequence[Variant],
             data: Mapping[str, object], smap: SourceMap, origin: str) -> list[str]:
    """The dry run's lines: the scaling rule, what changes between rungs, which parameters the tokens count,
    the data budgets and the size table."""
    scales = abl.scales
    if scales is None or not rungs:
        return []
    lines = []
    if scales.rule is not None:
        r = scales.rule
        extra = "".join([f", d_head {r.d_head}" if r.d_head else "",
                         f", d_ff {r.ffn_ratio:g} x d_model" if r.ffn_ratio else ""])
        lines.append(f"scaling rule: d_model = {r.aspect_ratio:g} x layers{extra}, at every rung")
    for a, b, diff in changed_fields(rungs, data, smap, origin):
        shown = ", ".join(f"{k} {show(x)} -> {show(y)}" for k, x, y in diff) or "nothing"
        lines.append(f"  {a} -> {b}: {shown}")
    counted = scales.tokens_counted or "non_embedding"
    if scales.tokens_per_param is not None:
        what = ("every parameter (embeddings and output head included)" if counted == "all"
                else "the parameters without embeddings (Kaplan et al.'s N)")
        lines.append(f"tokens: {scales.tokens_per_param:g} per parameter, counting {what}")
    if scales.budgets:
        shown = ", ".join(f"{b:g}x" for b in scales.budgets)
        lines.append(f"data budgets: {shown} of each size's tokens, each its own rung trained with its own "
                     "full schedule" + ("; the speedup is read from the baseline's loss against tokens"
                                   if scales.speedup else ""))
    rows = size_table(rungs, variants, data, smap, origin)
    if rows:
        tol = f" (tolerance ±{scales.match:.1%})" if scales.match is not None else " (no tolerance declared)"
        lines.append(f"sizes against the baseline{tol}:")
        lines += [f"  {r.rung} {r.label}: {r.params:,} parameters ({r.params_off:+.1%}), {r.flops:.3g} FLOPs "
                  f"({r.flops_off:+.1%})" for r in rows]
    return lines
