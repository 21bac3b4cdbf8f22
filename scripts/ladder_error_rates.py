"""Error rates of a ladder's transfer rules by simulation (ablate/stats/ladder_rates.py): the table
docs/ladders.md quotes.

    python scripts/ladder_error_rates.py [--sims 2000] [--replicates 1000] [--seed 0] [--design fair4]

For each scenario (a true gap over the first committed ladder's 4 rungs, 6 pairs a rung, its paired sd per
rung; then over 6 rungs spanning 2 decades; then the fair ladder as committed, ladder-fair4-kdocs: 6 rungs
over 3.5 decades, 4 seeds a rung, its own sd per rung, judged at 0.05 over its 2 comparisons), prints the
true gap at the smallest and the largest rung, how often each verdict is given, the share of right and of
wrong verdicts, how often the line passed its lack-of-fit test, and the rolling backtests' coverage at the
nominal 98.3%.
"""

from __future__ import annotations

import argparse

from ablate.stats.ladder_rates import (
    ALPHA,
    ALPHA_FAIR4,
    COMPUTE,
    COMPUTE_6,
    COMPUTE_FAIR4,
    SCENARIOS,
    SDS,
    SDS_6,
    SDS_FAIR4,
    SEEDS,
    SEEDS_FAIR4,
    simulate,
    true_ends,
)
from ablate.stats.transfer import Transfer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sims", type=int, default=2000)
    ap.add_argument("--replicates", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--design", choices=("first", "six", "fair4"), action="append",
                    help="only these ladder designs (default: all three)")
    args = ap.parse_args()
    order = [Transfer.GROWS, Transfer.SHRINKS, Transfer.REVERSES, Transfer.HOLDS, Transfer.NOT_SETTLED]
    designs = {"first": ("4 rungs (the first committed ladder)", COMPUTE, SDS, SEEDS, ALPHA),
               "six": ("6 rungs over 2 decades", COMPUTE_6, SDS_6, SEEDS, ALPHA),
               "fair4": ("the fair ladder as committed (ladder-fair4-kdocs)", COMPUTE_FAIR4, SDS_FAIR4,
                         SEEDS_FAIR4, ALPHA_FAIR4)}
    for key in args.design or list(designs):
        label, compute, sds, seeds, alpha = designs[key]
        print(f"\n{label}, {args.sims} ladders a scenario, {args.replicates} trend replicates\n")
        header = " | ".join(v.value for v in order)
        print(f"| scenario | true gap, smallest -> largest | {header} | right | wrong | line fits | "
              "backtest coverage |")
        print("|---|---|" + "---:|" * (len(order) + 4))
        for k, s in enumerate(SCENARIOS):
            r = simulate(s, args.sims, args.seed + k, args.replicates, alpha=alpha, seeds=seeds,
                         compute=compute, sds=sds)
            low, high = true_ends(s, compute)
            shares = " | ".join(f"{r.share(v):.1%}" for v in order)
            right = f"{r.right:.1%}" if s.right else "-"
            print(f"| {s.name} | {low:+.3f} -> {high:+.3f} | {shares} | {right} | {r.wrong:.1%} | "
                  f"{r.trend_based / r.sims:.0%} | {r.coverage:.1%} |", flush=True)


if __name__ == "__main__":
    main()
