"""muP's learning-rate transfer from a committed study's runs (docs/recipe.md).

    python scripts/lr_transfer.py reports/mup-transfer-docs [--metric val/loss] [--out docs/img/x.png]

Reads the study's ``runs.csv`` (one row per cell: ``model.parametrisation``, ``model.d_model``,
``train.optimizer.lr`` where a cell differs from the baseline, the baseline's own values otherwise, taken
from its ``export/``), groups the finished and diverged cells by parametrisation (a diverged cell counts as
the parametrisation's worst finite loss), and decides for each whether the best
learning rate moves with the width (ablate/stats/best_rate_shift.py: the best log2 rate per width from a
parabola through the seed means, its shift from the narrowest to the widest width with a 90% interval, the
jackknife's t with 5 seeds or fewer, else a seed bootstrap; stable inside +-1, drifts when the interval
excludes 0). muP's cells at its base width are the standard parametrisation's (the same model bit for
bit), so they are shared. Prints the table of seed-mean losses and the verdicts, and draws the loss against
the learning rate per width for both.
"""

from __future__ import annotations

import argparse
import math
import statistics
from pathlib import Path

from matplotlib.figure import Figure

from ablate.report.plots import save
from ablate.stats.best_rate_shift import SMALL, Transfer, transfer
from ablate.study.mup_check import Cells, read_cells


def read(report: Path, metric: str) -> dict[str, Cells]:
    """Each parametrisation's cells (ablate/study/mup_check.py: the reader a ladder's muP check uses)."""
    return read_cells(report, metric)


def _mean(cells: Cells, width: int, lr: float) -> float:
    return statistics.mean(v for (w, rate, _), v in cells.items() if w == width and rate == lr)


def table(cells: Cells) -> list[str]:
    widths = sorted({w for w, _, _ in cells})
    lrs = sorted({lr for _, lr, _ in cells})
    lines = ["  lr       " + "".join(f"{f'd{w}':>10}" for w in widths)]
    for lr in lrs:
        means = [_mean(cells, w, lr) for w in widths]
        lines.append(f"  {lr:<9.1e}" + "".join(f"{m:>10.4f}" for m in means))
    return lines


def draw(results: dict[str, tuple[Cells, Transfer]], out: Path, metric: str) -> None:
    fig = Figure(figsize=(9, 3.8))
    axes = fig.subplots(1, len(results), sharey=True)
    for ax, (name, (cells, result)) in zip(axes, results.items(), strict=True):
        lrs = sorted({lr for _, lr, _ in cells})
        for i, w in enumerate(result.widths):
            means = [_mean(cells, w, lr) for lr in lrs]
            ax.plot(lrs, means, marker="o", color=f"C{i}", label=f"d_model {w}")
            ax.axvline(result.best_lr(w), color=f"C{i}", linestyle=":", linewidth=1)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("peak learning rate (AdamW)")
        ax.set_title(f"{name}: best lr shift {result.shift:+.2f} log2 [{result.low:+.2f}, {result.high:+.2f}]"
                     f"\n{result.verdict}", fontsize=9)
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel(f"{metric} (mean of {results[next(iter(results))][1].seeds} seeds)")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    save(fig, out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("report", type=Path)
    parser.add_argument("--metric", default="val/loss")
    parser.add_argument("--out", type=Path, default=Path("docs/img/mup-transfer.png"))
    args = parser.parse_args()
    results = {}
    for name, cells in sorted(read(args.report, args.metric).items(), key=lambda kv: kv[0] != "standard"):
        result = transfer(cells)
        results[name] = (cells, result)
        print(f"{name}: mean {args.metric} by learning rate and width ({result.seeds} seeds)")
        print("\n".join(table(cells)))
        found = zip(result.widths, result.best_log2_lr, result.bracketed, strict=True)
        best = ", ".join(f"d{w} {2 ** b:.2e}{'' if inside else ' (at the grid edge)'}"
                         for w, b, inside in found)
        print(f"  best lr: {best}")
        interval = "jackknife t" if result.seeds <= SMALL else "seed-bootstrap"
        print(f"  shift d{result.widths[0]} -> d{result.widths[-1]}: {result.shift:+.2f} log2 (x"
              f"{math.pow(2, result.shift):.2f}), {100 * result.level:.0f}% {interval} interval "
              f"[{result.low:+.2f}, {result.high:+.2f}]: {result.verdict} (margin +-{result.margin:g})")
    draw(results, args.out, args.metric)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
