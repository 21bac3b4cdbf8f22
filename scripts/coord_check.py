"""The coordinate check of muP against the standard parametrisation, drawn (docs/recipe.md).

    python scripts/coord_check.py [--out docs/img/coord-check.png] [--steps 4] [--lr 0.03]

Runs ablate/engine/coord_check.py (the same function tests/engine/test_mup.py asserts on) at widths 32 to
512 and draws, for each parametrisation, the mean |x| of the last layer's output and of the logits against
the width, one line per training step (Yang et al. 2022, figure 5). Prints the slopes of log |x| against
log width at each step. About a minute on 2 CPU cores.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from matplotlib.figure import Figure

from ablate.engine import coord_check
from ablate.report.plots import save

WIDTHS = (32, 64, 128, 256, 512)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="docs/img/coord-check.png")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--lr", type=float, default=0.03)
    args = parser.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    rows = {p: coord_check.check(p, WIDTHS, steps=args.steps, lr=args.lr) for p in ("standard", "mup")}
    fig = Figure(figsize=(9, 6.2))
    axes = fig.subplots(2, 2, sharex=True)
    for col, (parametrisation, runs) in enumerate(rows.items()):
        for row, what in enumerate(("hidden", "logits")):
            ax = axes[row][col]
            for step in range(args.steps + 1):
                ax.plot([r.width for r in runs], [getattr(r, what)[step] for r in runs], marker="o",
                        label=f"step {step}", color=f"C{step}")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            title = "last layer's output" if what == "hidden" else "output logits"
            ax.set_title(f"{parametrisation}: {title}", fontsize=10)
            ax.set_xlabel("d_model")
            ax.set_ylabel("mean |x|")
            ax.grid(True, alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle(f"Coordinate check: Adam lr {args.lr}, 2 layers, random tokens (muP base width 32)",
                 fontsize=11)
    fig.tight_layout()
    save(fig, Path(args.out))
    for parametrisation, runs in rows.items():
        for what in ("hidden", "logits"):
            slopes = [coord_check.growth(runs, s, what) for s in range(args.steps + 1)]
            print(f"{parametrisation:<9} {what:<7} slope of log|x| on log width by step: "
                  + ", ".join(f"{x:+.2f}" for x in slopes))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
