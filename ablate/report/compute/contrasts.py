"""A full-factorial study's effects, read from its runs: per axis, the main effect of each value against
the baseline's value (cells matched on every other axis and on the seed) and, per pair of axes, their
interaction (the difference of differences), on the primary metric and on val/loss; and the cell means of a
two-axis design. ``ablate.report.sections.factorial`` shows them.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from scipy import stats

from ablate.report.compute import statistics as st
from ablate.report.compute.loaded_study import Study, quality_meta
from ablate.spec import metricnames
from ablate.spec.error_lines import check_field_path
from ablate.stats.fixed_sample import CONFIDENCE, Effect, Summary, compare_differences, mean_ci
from ablate.stats.multiplicity import holm


@dataclass
class FactorialRow:
    kind: str  # 'main' | 'interaction'
    label: str
    metric: str
    effect: Effect
    p_holm: float
    verdict: str
    incomplete: int  # matched sets left out because one of their cells did not finish


def short_axis(key: str) -> str:
    return key.removeprefix("model.")  # as the study labels variants: 'residual=post_norm'


Levels = dict[str, dict[str, dict[str, str]]]  # an axis of named levels -> level -> field -> value as logged


def axis_value(params: dict[str, str], key: str, levels: Levels | None = None) -> str:
    """A run's value of one axis: of an axis of named levels, the level whose fields the run has (the one
    setting most of them where several do); an axis that sets a whole section reads as its flattened
    fields."""
    if levels and key in levels:
        matching = [(len(fields), name) for name, fields in levels[key].items()
                    if all(params.get(f) == v for f, v in fields.items())]
        return max(matching)[1] if matching else "—"
    if key in params:
        return params[key]
    sub = [f"{k[len(key) + 1:]}={v}" for k, v in sorted(params.items()) if k.startswith(key + ".")]
    return "; ".join(sub) or "—"


def level_axes(params: Mapping[str, str]) -> Levels:
    """The axes of named levels in a parent run's params (``ablation.axes.ffn.swiglu.model.ffn: swiglu``),
    each level's fields in spec order; a field's values (``ablation.axes.model.norm: [...]``) are not."""
    out: Levels = {}
    for name, value in params.items():
        rest = name.removeprefix("ablation.axes.")
        if rest == name or check_field_path(rest) is None:
            continue  # no axis, or an axis of a field's values
        axis, _, tail = rest.partition(".")
        level, _, field_ = tail.partition(".")
        if field_:
            out.setdefault(axis, {}).setdefault(level, {})[field_] = value
    return out


def factorial_axes(study: Study) -> dict[str, list[str]] | None:
    """Axis -> values (the baseline's first, then in spec order) of a full-factorial study, else None."""
    params = study.parent["params"]
    design = params.get("ablation.design") or study.record.design
    if design != "full_factorial" or study.baseline is None or study.kind != "ablation":
        return None
    base = study.of(study.baseline)[0].params
    levels = level_axes(params)
    axes: dict[str, list[str]] = {}
    names = [k.removeprefix("ablation.axes.") for k in params if k.startswith("ablation.axes.")]
    for key in sorted({k for k in names if check_field_path(k) is None} | set(levels)):
        if key in levels:
            listed = list(levels[key])
        else:
            try:
                listed = [v if isinstance(v, str) else json.dumps(v)
                          for v in json.loads(params[f"ablation.axes.{key}"])]
            except (ValueError, TypeError):
                listed = []
        seen = {axis_value(r.params, key, levels) for r in study.runs}
        rank = {v: (listed.index(v) if v in listed else len(listed), v) for v in seen}
        first = axis_value(base, key, levels)
        on_grid = {axis_value(r.params, key, levels) for r in study.runs if r.variant != study.baseline}
        if on_grid and on_grid <= set(listed) and first not in listed:
            # The base spec is off the grid (its value is in no axis list): compare with the first listed.
            first, seen = min(on_grid, key=lambda v: rank[v]), on_grid
        axes[key] = [first] + sorted(seen - {first}, key=lambda v: rank[v])
    return axes if axes and all(len(v) > 1 for v in axes.values()) else None


def _cells(study: Study, axes: dict[str, list[str]], metric: str
           ) -> tuple[dict[tuple[tuple[str, ...], int], float], set[tuple[tuple[str, ...], int]]]:
    """(values of finished cells, every planned cell present) keyed by (axis values in axes order, seed)."""
    values, present = {}, set()
    levels = level_axes(study.parent["params"])
    for r in study.runs:
        key = (tuple(axis_value(r.params, a, levels) for a in axes), r.seed)
        present.add(key)
        if r.status == "finished" and metric in r.metrics:
            values[key] = r.metrics[metric]
    return values, present


Strata = dict[tuple[str, ...], dict[int, float]]  # other axes' values -> seed -> contrast


def _contrast(axes: dict[str, list[str]], values: dict[tuple[tuple[str, ...], int], float],
              present: set[tuple[tuple[str, ...], int]], changes: dict[int, tuple[str, str]]
              ) -> tuple[Strata, int]:
    """Per matched set (same seed, same values of the unchanged axes): the signed sum over the 2**k
    corners of the changed axes, i.e. a difference (k=1) or a difference of differences (k=2), grouped by
    stratum (the unchanged axes' values)."""
    order = sorted(changes)
    out: Strata = {}
    incomplete = 0
    blocks = sorted({(tuple(v for i, v in enumerate(vals) if i not in changes), seed)
                     for vals, seed in present})
    for rest, seed in blocks:
        terms = []
        for corner in itertools.product((0, 1), repeat=len(order)):  # 0: the baseline's value, 1: the other
            vals = list(rest)
            for i, pick in zip(order, corner, strict=True):
                vals.insert(i, changes[i][pick])
            terms.append(((-1.0) ** (len(order) - sum(corner)), (tuple(vals), seed)))
        if any(key not in present for _, key in terms):
            continue  # not a matched set of this study (a seed or combination it never planned)
        if all(key in values for _, key in terms):
            out.setdefault(rest, {})[seed] = sum(sign * values[key] for sign, key in terms)
        else:
            incomplete += 1
    return out, incomplete


def equal_weight_effect(strata: Strata) -> Effect:
    """A contrast averaged over the strata with equal weights, never weighted by how many seeds adaptive
    stopping gave each stratum (its n counts seeds).

    One stratum: its paired differences. Every stratum with the same seeds: the strata averaged within each
    seed, a paired t-test over seeds (n = seeds, as a factorial main effect is defined). Strata with
    different seeds: the mean of the stratum means, its standard error ``sqrt(sum_k s_k^2 / n_k) / K`` and a
    t-interval on Welch-Satterthwaite degrees of freedom (each stratum needs 2 seeds; else the seeds every
    stratum has are averaged as in the balanced case)."""
    groups = [g for g in strata.values() if g]
    if len(groups) <= 1:
        return compare_differences(list(groups[0].values()) if groups else [])
    common = sorted(set.intersection(*(set(g) for g in groups)))
    balanced = all(set(g) == set(common) for g in groups)
    if balanced or any(len(g) < 2 for g in groups):
        return compare_differences([float(np.mean([g[s] for g in groups])) for s in common])
    means = np.array([np.mean(list(g.values())) for g in groups])
    parts = np.array([np.var(list(g.values()), ddof=1) / len(g) for g in groups])  # each mean's variance
    k = len(groups)
    estimate, se = float(means.mean()), float(math.sqrt(parts.sum()) / k)
    df = float(parts.sum() ** 2 / sum(v**2 / (len(g) - 1) for v, g in zip(parts, groups, strict=True)))
    seeds = len(set().union(*groups))
    if se == 0.0:
        return Effect(estimate, estimate, estimate, math.nan, "none", seeds, seeds, True, "none")
    half = float(stats.t.ppf(0.5 + CONFIDENCE / 2, df) * se)
    p = float(2.0 * stats.t.sf(abs(estimate) / se, df))
    return Effect(estimate, estimate - half, estimate + half, p, "equal-weight t over strata (Welch df)",
                     seeds, seeds, True)


def factorial_effects(study: Study) -> list[FactorialRow]:
    """Main effects of every axis value against the baseline's and pairwise interactions, per metric."""
    axes = factorial_axes(study)
    if axes is None:
        return []
    names = list(axes)
    metrics = [study.primary] + ([metricnames.VAL_LOSS] if study.primary != metricnames.VAL_LOSS else [])
    rows: list[FactorialRow] = []
    for metric in metrics:
        values, present = _cells(study, axes, metric)
        unit, dec, higher = quality_meta(metric)
        unit = unit if metric == study.primary else metric
        family: list[tuple[str, str, Effect, int, str, str | None]] = []
        for i, key in enumerate(names):
            base = axes[key][0]
            for value in axes[key][1:]:
                strata, lost = _contrast(axes, values, present, {i: (base, value)})
                label, ref = f"{short_axis(key)}={value} vs {base} (main effect)", f"{short_axis(key)}={base}"
                family.append(("main", label, equal_weight_effect(strata), lost, "seed", ref))
        for (i, a), (j, b) in itertools.combinations(enumerate(names), 2):
            for va in axes[a][1:]:
                for vb in axes[b][1:]:
                    changes = {i: (axes[a][0], va), j: (axes[b][0], vb)}
                    strata, lost = _contrast(axes, values, present, changes)
                    label = f"{short_axis(a)}={va} × {short_axis(b)}={vb} (interaction)"
                    family.append(("interaction", label, equal_weight_effect(strata), lost, "seed", None))
        adjusted = holm([e.p for _, _, e, _, _, _ in family])
        for (kind, label, e, lost, noun, reference), ph in zip(family, adjusted, strict=True):
            text = st.effect_sentence(label, e, unit, higher, dec, noun=noun, reference=reference)
            if lost:
                text += f" ({lost} matched {'pair' if kind == 'main' else 'set'}{'s' * (lost != 1)} " \
                        "left out: a cell did not finish)"
            rows.append(FactorialRow(kind, label, metric, e, ph, text, lost))
    return rows


@dataclass
class CellGrid:
    """A two-axis full factorial on one metric: rows = values of the first axis, columns of the second."""

    axes: tuple[str, str]
    rows: list[str]
    cols: list[str]
    means: dict[tuple[str, str], Summary]  # finished runs only
    unfinished: dict[tuple[str, str], int]


def cell_means(study: Study, metric: str) -> CellGrid | None:
    axes = factorial_axes(study)
    if axes is None or len(axes) != 2:
        return None
    a, b = list(axes)
    levels = level_axes(study.parent["params"])
    means, unfinished = {}, {}
    for va in axes[a]:
        for vb in axes[b]:
            runs = [r for r in study.runs
                    if axis_value(r.params, a, levels) == va and axis_value(r.params, b, levels) == vb]
            done = [r.metrics[metric] for r in runs if r.status == "finished" and metric in r.metrics]
            means[(va, vb)] = mean_ci(done)
            unfinished[(va, vb)] = sum(r.status != "finished" for r in runs)
    return CellGrid((short_axis(a), short_axis(b)), axes[a], axes[b], means, unfinished)
