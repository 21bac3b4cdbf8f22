"""Error rates of a ladder's transfer rules by simulation (ablate/stats/ladder_rates.py): the table
docs/ladders.md quotes.

    python scripts/ladder_error_rates.py [--sims 2000] [--replicates 1000] [--seed 0]

For each scenario (a true gap over the committed ladder's 4 rungs, 6 pairs a rung, its paired sd per rung;
then over 6 rungs spanning 2 decades), prints how often each verdict is given, the share of right and of
wrong verdicts, how often the line passed its lack-of-fit test, and the rolling backtests' coverage at the
nominal 98.3%.
"""

from __future__ import annotations

import argparse

from ablate.stats.ladder_rates import COMPUTE, COMPUTE_6, SCENARIOS, SDS, SDS_6, simulate
from ablate.stats.transfer import Transfer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sims", type=int, default=2000)
    ap.add_argument("--replicates", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    order = [Transfer.GROWS, Transfer.SHRINKS, Transfer.REVERSES, Transfer.HOLDS, Transfer.NOT_SETTLED]
    for label, compute, sds in (("4 rungs (the committed ladder)", COMPUTE, SDS),
                                ("6 rungs over 2 decades", COMPUTE_6, SDS_6)):
        print(f"\n{label}, {args.sims} ladders a scenario, {args.replicates} trend replicates\n")
        header = " | ".join(v.value for v in order)
        print(f"| scenario | {header} | right | wrong | line fits | backtest coverage |")
        print("|---|" + "---:|" * (len(order) + 4))
        for k, s in enumerate(SCENARIOS):
            r = simulate(s, args.sims, args.seed + k, args.replicates, compute=compute, sds=sds)
            shares = " | ".join(f"{r.share(v):.1%}" for v in order)
            right = f"{r.right:.1%}" if s.right else "-"
            print(f"| {s.name} | {shares} | {right} | {r.wrong:.1%} | {r.trend_based / r.sims:.0%} | "
                  f"{r.coverage:.1%} |", flush=True)


if __name__ == "__main__":
    main()
