"""The report's "Perplexity by evaluation length": for a study of decoder-only language models evaluated
at several lengths (``eval.lengths``), each variant's perplexity against the evaluation length, the mean
over seeds with a band from the lowest to the highest seed, as in Press et al. 2022 (figure 1): a scheme
that extrapolates stays flat (or improves with the longer context) past the training length, one that does
not climbs.

Reads each finished run's result metrics ``<split>/ppl_at_<n>`` (the best checkpoint on the whole split;
``_sliding`` ones get their own lines when present), on the split of the study's primary metric.

A difference at the longest length mixes two things: how well a variant models text at the training
length, and how its perplexity grows past it. The growth table separates them: each seed's ratio
ppl(longest) / ppl(training length), and each variant's ratio against the baseline's, paired by seed (a
paired t-test on the log ratios, ablate/stats/fixed_sample.py): a scheme extrapolates better when its
perplexity grows less, whatever its level at the training length.
"""

from __future__ import annotations

import math
import re
import statistics
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure as MplFigure

from ablate.report import plots as figs
from ablate.report.compute import statistics as st
from ablate.report.render import Block, Figure, Para, Section, Table
from ablate.report.section_api import Inputs, Part, section

_NAME = re.compile(r"^(val|test)/ppl_at_(\d+)(_sliding)?$")
COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"]
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]

# variant -> window kind ('' or '_sliding') -> length -> one value per finished seed
ByLength = dict[str, dict[str, dict[int, list[float]]]]


def collect(inp: Inputs, split: str) -> ByLength:
    out: ByLength = {}
    for v in inp.study.variants:
        for r in inp.study.finished(v):
            for key, value in r.metrics.items():
                m = _NAME.match(key)
                if m and m.group(1) == split and math.isfinite(value):
                    kind = m.group(3) or ""
                    out.setdefault(v, {}).setdefault(kind, {}).setdefault(int(m.group(2)), []).append(value)
    return out


def draw(values: ByLength, path: Path, train_length: int | None) -> Path:
    """Perplexity (log scale) against the evaluation length (log2 scale), one line per variant (and per
    window kind), mean over seeds with a min-max band; a dotted line at the training length."""
    with figs._style():
        fig = MplFigure(figsize=(6.4, 4.2), layout="constrained")
        ax = fig.subplots()
        i = 0
        for variant, kinds in values.items():
            for kind, per_length in sorted(kinds.items()):
                lengths = sorted(per_length)
                mean = [float(np.mean(per_length[n])) for n in lengths]
                low = [min(per_length[n]) for n in lengths]
                high = [max(per_length[n]) for n in lengths]
                seeds = min(len(per_length[n]) for n in lengths)
                label = f"{variant}{' (sliding)' if kind else ''} (n={seeds})"
                ax.plot(lengths, mean, color=COLORS[i % len(COLORS)], marker=MARKERS[i % len(MARKERS)],
                        linestyle="--" if kind else "-", markerfacecolor="none", label=label)
                if seeds > 1:
                    ax.fill_between(lengths, low, high, color=COLORS[i % len(COLORS)], alpha=0.15,
                                    linewidth=0)
                i += 1
        if train_length:
            ax.axvline(train_length, color="#555555", linestyle=":", linewidth=1)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("evaluation length (tokens)")
        ax.set_ylabel("perplexity")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
        return figs.save(fig, path)


def _cell(values: list[float]) -> str:
    if not values:
        return "—"
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}"


def _train_length(inp: Inputs) -> int | None:
    for r in inp.study.runs:
        text = r.params.get("data.max_len")
        if text and text.isdigit():
            return int(text)
    return None


def growth(inp: Inputs, split: str, short: int, long: int) -> dict[str, dict[int, float]]:
    """Variant -> seed -> ppl(long) / ppl(short), non-overlapping windows, finished runs with both."""
    out: dict[str, dict[int, float]] = {}
    for v in inp.study.variants:
        for r in inp.study.finished(v):
            a, b = r.metrics.get(f"{split}/ppl_at_{short}"), r.metrics.get(f"{split}/ppl_at_{long}")
            if a is not None and b is not None and math.isfinite(a) and math.isfinite(b) and a > 0:
                out.setdefault(v, {})[r.seed] = b / a
    return out


def growth_table(inp: Inputs, split: str, short: int, long: int) -> Table | None:
    """Each variant's growth past the training length and, paired by seed, against the baseline's."""
    ratios = growth(inp, split, short, long)
    base = inp.study.baseline
    if not ratios or base not in ratios:
        return None
    logs = {v: {seed: math.log(r) for seed, r in per.items()} for v, per in ratios.items()}
    rows = []
    for v, per in ratios.items():
        mean = math.exp(statistics.mean(logs[v].values()))  # the geometric mean over seeds
        against = "—"
        if v != base:
            e = st.compare(logs[base], logs[v])
            if not math.isnan(e.lo):
                against = (f"x{math.exp(e.diff):.2f} [x{math.exp(e.lo):.2f}, x{math.exp(e.hi):.2f}], "
                           f"{e.test}, p {st.fmt_p(e.p)}, n={e.n_min}")
            elif not math.isnan(e.diff):
                against = f"x{math.exp(e.diff):.2f} (too few seeds for an interval)"
        rows.append([v, f"x{mean:.2f}", str(len(per)), against])
    caption = (f"Growth past the training length: each seed's ratio (geometric mean over seeds), and the "
               f"variant's ratio over the baseline's, paired by seed, with its 95% interval (below x1: it "
               f"grows less than {base})")
    return Table(["variant", f"ppl at {long} / ppl at {short}", "seeds", f"growth against {base}"], rows,
                 caption=caption)


@section(160)
def part(inp: Inputs) -> Part | None:
    split = inp.study.primary.split("/")[0] if "/" in inp.study.primary else "val"
    values = collect(inp, split)
    if not values:
        return None
    train_length = _train_length(inp)
    draw(values, inp.fig_dir / "ppl_by_length.png", train_length)
    lengths = sorted({n for kinds in values.values() for per in kinds.values() for n in per})
    rows = [[f"{variant}{' (sliding)' if kind else ''}", *(_cell(per.get(n, [])) for n in lengths)]
            for variant, kinds in values.items() for kind, per in sorted(kinds.items())]
    trained = f" Trained on blocks of {train_length} tokens (dotted line)." if train_length else ""
    blocks: list[Block] = [
        Para(f"Perplexity on the {split} split at each evaluation length: every target of every document "
             "scored once, in non-overlapping windows of that length (sliding windows where marked)."
             f"{trained} A scheme that extrapolates keeps its perplexity (or lowers it, with more "
             "context) past the training length (Press et al. 2022)."),
        Figure("figures/ppl_by_length.png", "Per variant: mean over seeds, band = min to max across seeds "
               "(finished runs); both axes logarithmic"),
        Table(["variant", *(f"{n}" for n in lengths)], rows,
              caption="Perplexity by evaluation length (tokens): mean ± sd over seeds"),
    ]
    grown = growth_table(inp, split, train_length, lengths[-1]) if (
        train_length in lengths and lengths[-1] > train_length) else None
    if grown is not None:
        blocks += [Para(f"A difference at {lengths[-1]} tokens mixes the perplexity at the training length "
                        "with its growth past it. The growth ratio separates the two: a scheme extrapolates "
                        "better when its perplexity grows less, whatever its level at the training length."),
                   grown]
    data = {v: {k or "windows": {str(n): vals for n, vals in per.items()} for k, per in kinds.items()}
            for v, kinds in values.items()}
    return Part("lengths", [Section("Perplexity by evaluation length", blocks)], data={"ppl_by_length": data})
