"""Report figures, drawn with matplotlib's object API on the Agg renderer (no pyplot, no global backend).

Every figure is deterministic: matplotlib's default style (a user's matplotlibrc cannot change it),
fixed size and DPI, and PNG metadata without the 'Software' entry, so the same data give the same bytes.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import matplotlib
import matplotlib.cm
import matplotlib.colors
import matplotlib.style
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, MaxNLocator, NullFormatter

DPI = 110
PNG_METADATA: dict[str, str | None] = {"Software": None}  # no version string, no creation time

Curve = list[tuple[int, float]]


def _style() -> contextlib.AbstractContextManager[None]:
    return matplotlib.style.context("default")


def _color(i: int) -> str:
    cycle = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
             "#bcbd22", "#17becf"]
    return cycle[i % len(cycle)]


def save(fig: Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI, format="png", metadata=PNG_METADATA)
    return path


def save_vector(fig: Figure, path: Path) -> list[Path]:
    """The figure also as PDF and SVG beside ``path`` (for a paper), without creation dates, so a rerun
    writes the same bytes."""
    out = [path.with_suffix(".pdf"), path.with_suffix(".svg")]
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out[0], format="pdf", metadata={"CreationDate": None, "ModDate": None})
    with matplotlib.rc_context({"svg.hashsalt": path.stem}):  # element ids from a fixed salt
        fig.savefig(out[1], format="svg", metadata={"Date": None})
    return out


LINESTYLES = ["-", "--", ":", "-."]
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]


def _style_of(i: int) -> tuple[str, str]:
    """(line style, marker) of the i-th variant: two variants never share both, so identical curves drawn
    over each other still show as two lines (e.g. solid under dashed)."""
    return LINESTYLES[i % len(LINESTYLES)], MARKERS[i % len(MARKERS)]


def overlapping_variants(curves: Mapping[str, Mapping[str, Sequence[Curve]]],
                         metrics: Sequence[str]) -> list[list[str]]:
    """Groups (two or more) of variants whose curves are the same on every metric and every seed: their
    lines lie on top of each other, and the caption must say so."""
    groups: dict[tuple[object, ...], list[str]] = {}
    for variant, per_metric in curves.items():
        key = tuple(tuple(tuple(run) for run in per_metric.get(m, [])) for m in metrics)
        if any(key):
            groups.setdefault(key, []).append(variant)
    return [g for g in groups.values() if len(g) > 1]


def learning_curves(curves: Mapping[str, Mapping[str, Sequence[Curve]]], metrics: Sequence[str],
                    path: Path) -> Path:
    """One panel per metric; per variant the mean over seeds with a min-max band, each variant in its own
    colour, line style and marker.

    ``curves[variant][metric]`` holds one (step, value) list per seed. A metric no run logged during
    training (BLEU measured only at the end: ``eval.bleu_during_training: false``) gets no empty panel.
    """
    metrics = [m for m in metrics if any(run for per in curves.values() for run in per.get(m, []))] \
        or list(metrics)[:1]
    with _style():
        fig = Figure(figsize=(4.2 * len(metrics), 3.6), layout="constrained")
        axes = fig.subplots(1, len(metrics), squeeze=False)[0]
        for ax, metric in zip(axes, metrics, strict=True):
            for i, (variant, per_metric) in enumerate(curves.items()):
                runs = [r for r in per_metric.get(metric, []) if r]
                if not runs:
                    continue
                steps = sorted({s for run in runs for s, _ in run})
                table = [dict(run) for run in runs]
                mean, low, high = [], [], []
                for s in steps:
                    vals = [t[s] for t in table if s in t and math.isfinite(t[s])]
                    mean.append(np.mean(vals) if vals else np.nan)
                    low.append(min(vals) if vals else np.nan)
                    high.append(max(vals) if vals else np.nan)
                linestyle, marker = _style_of(i)
                # Later variants are drawn thinner and with hollow markers: one exactly on top of another
                # leaves the one below visible around it.
                ax.plot(steps, mean, color=_color(i), label=f"{variant} (n={len(runs)})", marker=marker,
                        markersize=max(3.0, 6.0 - i * 0.5), markerfacecolor="none", linestyle=linestyle,
                        linewidth=max(1.0, 2.2 - i * 0.3))
                if len(runs) > 1:
                    ax.fill_between(steps, low, high, color=_color(i), alpha=0.15, linewidth=0)
            ax.set_xlabel("step")
            ax.set_title(metric)
            ax.grid(alpha=0.3)
        handles, labels = axes[0].get_legend_handles_labels()
        if handles:
            fig.legend(handles, labels, loc="outside lower center", ncol=min(3, len(labels)), fontsize=8)
        return save(fig, path)


def forest_plot(rows: Sequence[tuple[str, float, float, float]], xlabel: str, path: Path,
                notes: Sequence[str | None] | None = None) -> Path:
    """Effects against the baseline: point = difference of means, bar = 95% interval (NaN: no bar); a row
    with a note ("not testable: p ≥ 0.25 with 3 seeds") grey, hollow, dotted and noted: never a finding."""
    notes = list(notes) if notes is not None else [None] * len(rows)
    with _style():
        fig = Figure(figsize=(7.0, 1.2 + 0.45 * max(1, len(rows))), layout="constrained")
        ax = fig.subplots()
        ys = np.arange(len(rows))[::-1]
        for y, (_, diff, lo, hi), note in zip(ys, rows, notes, strict=True):
            color = "#1f77b4" if note is None else "#9a9a9a"
            if math.isfinite(lo) and math.isfinite(hi):
                ax.plot([lo, hi], [y, y], color=color, linewidth=2, linestyle="-" if note is None else ":")
            face = "white" if note is not None else (color if math.isfinite(lo) else "#7f7f7f")
            ax.plot([diff], [y], "o", color=color if math.isfinite(lo) else "#7f7f7f", markerfacecolor=face)
            if note is not None:
                ax.annotate(note, (0.99, y), xycoords=("axes fraction", "data"), ha="right", va="bottom",
                            fontsize=7, color="#555555", xytext=(0, 3), textcoords="offset points")
        ax.axvline(0.0, color="#444444", linewidth=1, linestyle="--")
        ax.set_yticks(list(ys), [r[0] for r in rows], fontsize=8)
        ax.set_ylim(-0.7, len(rows) - 0.3)
        ax.set_xlabel(xlabel)
        ax.grid(axis="x", alpha=0.3)
        return save(fig, path)


Interval = tuple[float, float, float]  # (difference, low, high)


def verdict_forest(rows: Sequence[tuple[str, Interval, Interval | None]], band: float | None, xlabel: str,
                   labels: tuple[str, str], path: Path, own_best: Mapping[str, Interval] | None = None
                   ) -> Path:
    """The report's opening picture: per variant, the interval its verdict rests on (filled marker, upper
    bar) and the same interval on the test split (open marker, lower bar), with ±``band`` shaded; a variant
    in ``own_best`` (a tuned study whose search moved its settings) gets a third bar, its interval at its
    own best settings (square marker, lowest)."""
    own_best = own_best or {}
    with _style():
        fig = Figure(figsize=(7.0, 1.4 + 0.55 * max(1, len(rows)) + 0.25 * len(own_best)),
                     layout="constrained")
        ax = fig.subplots()
        if band is not None:
            ax.axvspan(-band, band, color="#dddddd", zorder=0, label=f"±{band:g}")
        ys = np.arange(len(rows))[::-1].astype(float)
        first = f"{labels[0]}, at the baseline's settings" if own_best else labels[0]
        first_own = True
        for y, (name, val, test) in zip(ys, rows, strict=True):
            diff, lo, hi = val
            ax.plot([lo, hi], [y + 0.12, y + 0.12], color="#1f77b4", linewidth=2.2)
            ax.plot([diff], [y + 0.12], "o", color="#1f77b4", label=first if y == ys[0] else None)
            if test is not None:
                t_diff, t_lo, t_hi = test
                ax.plot([t_lo, t_hi], [y - 0.12, y - 0.12], color="#ff7f0e", linewidth=1.6)
                ax.plot([t_diff], [y - 0.12], "o", markerfacecolor="white", color="#ff7f0e",
                        label=labels[1] if y == ys[0] else None)
            if name in own_best:
                o_diff, o_lo, o_hi = own_best[name]
                ax.plot([o_lo, o_hi], [y - 0.34, y - 0.34], color="#2ca02c", linewidth=2.2)
                ax.plot([o_diff], [y - 0.34], "s", color="#2ca02c",
                        label=f"{labels[0]}, at its own best" if first_own else None)
                first_own = False
        ax.axvline(0.0, color="#444444", linewidth=1, linestyle="--")
        ax.set_yticks(list(ys), [r[0] for r in rows], fontsize=8)
        ax.set_ylim(-0.7 - (0.2 if own_best and rows[-1][0] in own_best else 0.0), len(rows) - 0.3)
        ax.set_xlabel(xlabel)
        ax.grid(axis="x", alpha=0.3)
        ax.legend(fontsize=8, loc="best")
        save_vector(fig, path)  # the verdict figure goes into papers: PDF and SVG beside the PNG
        return save(fig, path)


@dataclass(frozen=True)
class CostPoint:
    """One variant in the quality-vs-cost plot: the means over finished seeds and the seeds' range."""
    label: str
    cost: float
    cost_lo: float
    cost_hi: float
    quality: float
    quality_lo: float
    quality_hi: float
    on_front: bool


def quality_vs_cost(points: Sequence[CostPoint], xlabel: str, ylabel: str, path: Path) -> Path:
    """Variants at (mean cost, mean quality) with bars from the lowest to the highest seed (a wall time never
    below zero, as a mean ± t-interval of two seeds can go), told apart by colour and marker in a legend
    below the plot (no label over a point or a label); the Pareto front joined."""
    with _style():
        fig = Figure(figsize=(6.4, 4.4 + 0.22 * math.ceil(len(points) / 2)), layout="constrained")
        ax = fig.subplots()
        for i, p in enumerate(points):
            if not (math.isfinite(p.cost) and math.isfinite(p.quality)):
                continue
            xerr = [[p.cost - p.cost_lo], [p.cost_hi - p.cost]] if p.cost_hi > p.cost_lo else None
            yerr = [[p.quality - p.quality_lo], [p.quality_hi - p.quality]] if p.quality_hi > p.quality_lo \
                else None
            ax.errorbar([p.cost], [p.quality], xerr=xerr, yerr=yerr, fmt=MARKERS[i % len(MARKERS)],
                        color=_color(i), capsize=3, markeredgecolor="black" if p.on_front else _color(i),
                        markersize=8 if p.on_front else 6,
                        label=p.label + (" (Pareto)" if p.on_front else ""))
        line = sorted((p.cost, p.quality) for p in points
                      if p.on_front and math.isfinite(p.cost) and math.isfinite(p.quality))
        if len(line) > 1:
            ax.step([x for x, _ in line], [y for _, y in line], where="post", color="black",
                    linewidth=1, linestyle=":", label="Pareto front")
        handles, labels = ax.get_legend_handles_labels()
        if handles:
            fig.legend(handles, labels, loc="outside lower center", ncol=2, fontsize=8)
        ax.set_xlim(left=0.0)  # wall time starts at zero: the bars' ends are measured times
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        return save(fig, path)


def optimisation_history(trials: Sequence[tuple[int, float]], objective: str, maximize: bool,
                         path: Path) -> Path:
    """Objective per completed trial and the best value so far."""
    with _style():
        fig = Figure(figsize=(6.4, 3.8), layout="constrained")
        ax = fig.subplots()
        pts = sorted((n, v) for n, v in trials if math.isfinite(v))
        if pts:
            ax.plot([n for n, _ in pts], [v for _, v in pts], "o", color="#1f77b4", label="trial")
            best = list(np.maximum.accumulate([v for _, v in pts]) if maximize
                        else np.minimum.accumulate([v for _, v in pts]))
            ax.step([n for n, _ in pts], best, where="post", color="#d62728", label="best so far")
            ax.legend(fontsize=8)
        ax.set_xlabel("trial")
        ax.set_ylabel(objective)
        ax.grid(alpha=0.3)
        return save(fig, path)


def expected_best(curves: Mapping[str, Sequence[tuple[int, float, float, float]]], ylabel: str,
                  path: Path) -> Path:
    """Dodge et al.'s expected validation performance: per variant the expected best score of n trials
    (``curves[variant]`` = (n, mean, band low, band high) rows) with its band, each variant in its own
    colour, line style and marker, so curves that cross show a ranking that depends on the budget."""
    with _style():
        fig = Figure(figsize=(6.4, 4.2 + 0.22 * math.ceil(len(curves) / 2)), layout="constrained")
        ax = fig.subplots()
        for i, (variant, rows) in enumerate(curves.items()):
            ns = [n for n, _, _, _ in rows]
            linestyle, marker = _style_of(i)
            ax.plot(ns, [m for _, m, _, _ in rows], color=_color(i), linestyle=linestyle, marker=marker,
                    markersize=4, markerfacecolor="none", label=variant)
            ax.fill_between(ns, [lo for _, _, lo, _ in rows], [hi for _, _, _, hi in rows], color=_color(i),
                            alpha=0.15, linewidth=0)
        handles, labels = ax.get_legend_handles_labels()
        if handles:
            fig.legend(handles, labels, loc="outside lower center", ncol=2, fontsize=8)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # a budget is a whole number of trials
        ax.set_xlabel("trials (tuning budget)")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        return save(fig, path)


def importances_bar(importances: Sequence[tuple[str, float]], path: Path) -> Path:
    with _style():
        fig = Figure(figsize=(6.4, 1.2 + 0.4 * max(1, len(importances))), layout="constrained")
        ax = fig.subplots()
        names = [n for n, _ in importances][::-1]
        ax.barh(names, [v for _, v in importances][::-1], color="#1f77b4")
        ax.set_xlabel("importance")
        ax.tick_params(axis="y", labelsize=8)
        return save(fig, path)


def parallel_coordinates(params: Sequence[str], rows: Sequence[Sequence[float | str]],
                         values: Sequence[float], objective: str, path: Path) -> Path:
    """One line per trial across the searched parameters (each axis scaled to [0, 1], its range written
    beside it; categories spread evenly), the objective last; lines coloured by the objective."""
    with _style():
        fig = Figure(figsize=(max(5.0, 1.8 * (len(params) + 1)), 4.0), layout="constrained")
        ax = fig.subplots()
        cols: list[np.ndarray] = []
        ticks: list[list[tuple[float, str]]] = []
        v = np.asarray(values, dtype=float)
        for col in [[r[j] for r in rows] for j in range(len(params))] + [list(v)]:
            if all(isinstance(x, int | float) and not isinstance(x, bool) for x in col):
                x = np.asarray(col, dtype=float)
                lo, hi = float(np.nanmin(x)), float(np.nanmax(x))
                cols.append((x - lo) / (hi - lo) if hi > lo else np.full_like(x, 0.5))
                ticks.append([(0.0, f"{lo:.3g}"), (1.0, f"{hi:.3g}")] if hi > lo else [(0.5, f"{lo:.3g}")])
            else:
                cats = sorted({str(x) for x in col})
                pos = {c: (k / (len(cats) - 1) if len(cats) > 1 else 0.5) for k, c in enumerate(cats)}
                cols.append(np.asarray([pos[str(x)] for x in col]))
                ticks.append([(p, c) for c, p in pos.items()])
        finite = v[np.isfinite(v)]
        vmin, vmax = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
        norm = matplotlib.colors.Normalize(vmin, vmax if vmax > vmin else vmin + 1.0)
        cmap = matplotlib.colormaps["viridis"]
        for i in range(len(rows)):
            colour = cmap(norm(v[i])) if np.isfinite(v[i]) else "#bbbbbb"
            ax.plot(range(len(cols)), [c[i] for c in cols], color=colour, alpha=0.8, linewidth=1.2)
        for j, labels in enumerate(ticks):
            ax.axvline(j, color="#444444", linewidth=0.8)
            for y, text in labels:
                ax.annotate(text[:24], (j, y), xytext=(4, 0), textcoords="offset points", fontsize=7,
                            va="center", ha="left")
        ax.set_xticks(range(len(cols)), [*params, objective], fontsize=8)
        ax.set_xlim(-0.1, len(cols) - 0.6)
        ax.set_yticks([])
        ax.set_ylim(-0.05, 1.05)
        ax.set_title(f"Trials coloured by {objective}", fontsize=10)
        fig.colorbar(matplotlib.cm.ScalarMappable(norm=norm, cmap=cmap), ax=ax, label=objective)
        return save(fig, path)


def attention_heatmaps(maps: Mapping[str, np.ndarray], labels: Mapping[str, tuple[list[str], list[str]]],
                       path: Path) -> Path:
    """Head-averaged last-layer maps: ``maps[name]`` is (Tq, Tk); ``labels[name]`` = (query, key) tokens."""
    with _style():
        fig = Figure(figsize=(4.2 * len(maps), 4.4), layout="constrained")
        axes = fig.subplots(1, len(maps), squeeze=False)[0]
        for ax, (name, weights) in zip(axes, maps.items(), strict=True):
            ax.imshow(weights, cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto", interpolation="nearest")
            q, k = labels[name]
            ax.set_xticks(range(len(k)), k, rotation=90, fontsize=7)
            ax.set_yticks(range(len(q)), q, fontsize=7)
            ax.set_title(name.replace("_", " "), fontsize=10)
            ax.set_xlabel("key")
            ax.set_ylabel("query")
        return save(fig, path)


@dataclass(frozen=True)
class LadderCurve:
    """One variant in the ladder figure: its seeds' points, its fitted curve and band over ``grid``."""

    label: str
    points: Sequence[tuple[float, Sequence[float]]]  # (compute, the seeds' values) per rung
    grid: Sequence[float]  # compute at which the curve and band are drawn
    curve: Sequence[float]
    lo: Sequence[float]
    hi: Sequence[float]


@dataclass(frozen=True)
class GapSeries:
    """A comparison in the ladder figure's lower panel: its gap at each rung, its fitted line's ends."""
    label: str
    color: int  # the variant's index among the curves: the same colour in both panels
    rungs: Sequence[tuple[float, float, float, float]]  # (compute, gap, lo, hi) per rung
    fitted: tuple[tuple[float, float, float, float], tuple[float, float, float, float]] | None  # the ends


def ladder_figure(curves: Sequence[LadderCurve], largest: float, target: float | None,
                  rung_notes: Sequence[tuple[float, str]], ylabel: str, path: Path,
                  gaps: Sequence[GapSeries] = (), gap_label: str = "gap vs baseline") -> Path:
    """The metric against training compute on a log axis: per variant its seeds (dots), rung means
    (markers), fitted curve and band, solid up to the largest rung and dashed beyond it (an
    extrapolation); the target marked; each rung's verdicts written above it (``rung_notes``: compute,
    text; neighbours too close to share a line are staggered). Under it, with ``gaps``, each comparison's
    gap on the same compute axis (the curves overlap where gaps are small): rung intervals as bars, the
    fitted line with its band. PDF and SVG beside the PNG."""
    with _style():
        fig = Figure(figsize=(7.5, 7.2 if gaps else 5.0), layout="constrained")
        ax, gx = fig.subplots(2, 1, sharex=True, height_ratios=(3, 2)) if gaps else (fig.subplots(), None)
        for i, c in enumerate(curves):
            color, (_, marker) = _color(i), _style_of(i)
            for x, values in c.points:
                ax.plot([x] * len(values), list(values), ".", color=color, alpha=0.35, markersize=4)
                if len(values):
                    ax.plot([x], [float(np.mean(values))], marker, color=color, markersize=6)
            grid = np.asarray(c.grid, dtype=float)
            inside = grid <= largest * (1 + 1e-9)
            curve, lo, hi = (np.asarray(v, dtype=float) for v in (c.curve, c.lo, c.hi))
            if np.isfinite(curve).any():
                ax.plot(grid[inside], curve[inside], "-", color=color, linewidth=1.6, label=c.label)
                ax.plot(grid[~inside], curve[~inside], "--", color=color, linewidth=1.2)
                ok = np.isfinite(lo) & np.isfinite(hi)
                ax.fill_between(grid[ok], lo[ok], hi[ok], color=color, alpha=0.12, linewidth=0)
            else:
                ax.plot([], [], marker, color=color, label=c.label)
        for a in [a for a in (ax, gx) if a is not None and target is not None]:
            a.axvline(float(target or 0.0), color="#444444", linestyle=":", linewidth=1.2,
                      label=f"target {target:.3g} FLOPs (extrapolated)" if a is ax else None)
        ax.set_xscale("log")
        _rung_notes(ax, rung_notes)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8, loc="best")
        if gx is not None:
            _gap_panel(gx, gaps, gap_label)
        (gx or ax).set_xlabel("training compute (FLOPs, 6ND + attention)")
        save_vector(fig, path)
        return save(fig, path)


def _rung_notes(ax: Axes, notes: Sequence[tuple[float, str]]) -> None:
    """Each rung's name and verdict marks above it, a note nearer its line's last than a tenth of the axis
    one line lower (neighbours never print over each other)."""
    bottom, top = ax.get_ylim()
    top = ax.set_ylim(bottom, top + 0.26 * (top - bottom))[1]  # headroom for the notes, two lines deep
    (left, right), last_on_line = (math.log10(v) for v in ax.get_xlim()), dict[int, float]()
    for x, text in sorted(notes):
        line = next(k for k in range(len(notes) + 1)
                    if k not in last_on_line or math.log10(x) - last_on_line[k] > 0.1 * (right - left))
        last_on_line[line] = math.log10(x)
        ax.annotate(text, (x, top), xytext=(0, -4 - 22 * (line % 2)), textcoords="offset points",
                    ha="center", va="top", fontsize=7, family="monospace", color="#333333")
    # ticks at the rungs (a ladder within a decade or two had labels on minor ticks, printed over each other)
    ax.xaxis.set_major_locator(FixedLocator(sorted(x for x, _ in notes)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.2g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())


def _gap_panel(ax: Axes, gaps: Sequence[GapSeries], label: str) -> None:
    """Each comparison's gap: rung means with intervals (nudged apart in x), the fitted line, its band."""
    ax.axhline(0.0, color="#444444", linewidth=0.8)
    for j, g in enumerate(gaps):
        color, (_, marker) = _color(g.color), _style_of(g.color)
        nudge = 10 ** (0.012 * (j - (len(gaps) - 1) / 2))  # a few per cent of a decade
        bars = [[d - lo if math.isfinite(lo) else 0.0 for _, d, lo, _ in g.rungs],
                [hi - d if math.isfinite(hi) else 0.0 for _, d, _, hi in g.rungs]]
        ax.errorbar([x * nudge for x, *_ in g.rungs], [d for _, d, _, _ in g.rungs], yerr=bars, fmt=marker,
                    color=color, markersize=5, capsize=2.5, linewidth=1.0, label=g.label)
        if g.fitted is not None:
            (x0, y0, lo0, hi0), (x1, y1, lo1, hi1) = g.fitted
            ax.plot([x0, x1], [y0, y1], "-", color=color, linewidth=1.4)
            ax.fill_between([x0, x1], [lo0, lo1], [hi0, hi1], color=color, alpha=0.12, linewidth=0)
    ax.set_ylabel(label)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, loc="best")
