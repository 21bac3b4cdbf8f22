"""Operating characteristics of adaptive seeds (ablate/stats/sequential.py) on simulated metric streams.

    python scripts/sequential_sim.py [--min 3] [--max 8] [--step 1] [--min-effect E] [--reps 10000]

Each repetition is one comparison: per-seed differences ~ Normal(effect, 1) (the effect in seed-to-seed
standard deviations), walked through the planned looks as `ablate study` walks them. Prints, per true
effect, how often an effect is declared, how often "no effect as large as min_effect" is, the mean number
of seeds spent, and what a fixed design with the maximum number of seeds (one paired t-test) would find.
"""

from __future__ import annotations

import argparse

import numpy as np
from scipy import stats

from ablate.stats.sequential import Design, planned_looks, run_sequence


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--min", type=int, default=3)
    ap.add_argument("--max", type=int, default=8)
    ap.add_argument("--step", type=int, default=1)
    ap.add_argument("--min-effect", type=float, default=None)
    ap.add_argument("--reps", type=int, default=10_000)
    args = ap.parse_args()
    design = Design(planned_looks(args.min, args.max, args.step), min_effect=args.min_effect)
    print(design.describe())
    for effect in (0.0, 0.5, 1.0, 1.5, 2.0):
        x = np.random.default_rng(123).normal(effect, 1.0, (args.reps, args.max))  # (reps, max seeds)
        looks = [run_sequence(list(row), design) for row in x]
        found = np.mean([lk is not None and lk.state == "effect" for lk in looks])
        none = np.mean([lk is not None and lk.state == "no_effect" for lk in looks])
        seeds = np.mean([lk.n if lk is not None else 0 for lk in looks])
        fixed = np.mean(stats.ttest_1samp(x, 0.0, axis=1).pvalue < design.alpha)
        print(f"true effect {effect:.1f} sd: effect declared {found:.4f}, 'no effect' {none:.4f}, mean seeds "
              f"{seeds:.2f}; fixed {args.max}-seed paired t-test declares an effect {fixed:.4f}")


if __name__ == "__main__":
    main()
