"""The speedup as Wen et al. (2025) measure it, on a ladder with data budgets: per variant and model size
the data the tuned baseline needs to reach the variant's final loss, with its interval, and the speedup's
trend with size. Renders ``ablate.report.compute.tuned_speedups``; decides nothing."""

from __future__ import annotations

import math

from ablate.report.compute.tuned_speedups import DataSpeedups, Speedup, SpeedupTrend, as_record, speedups_of
from ablate.report.render import Block, Para, Section, Table
from ablate.report.section_api import Inputs, Part, section

BEYOND = {1: " (beyond the largest budget: an extrapolation)", -1: " (below the smallest budget)", 0: ""}


def _cell(s: Speedup | None) -> str:
    if s is None:
        return "-"
    ci = f" [{s.lo:.2f}, {s.hi:.2f}]" if math.isfinite(s.lo) else ""
    lof = "" if s.line_fits else " (the loss-against-tokens line is rejected by its lack of fit)"
    return f"{s.value:.2f}x{ci}{BEYOND[s.beyond]}{lof}"


def _trend(t: SpeedupTrend | None) -> str:
    if t is None:
        return "- (fewer than 3 sizes)"
    per = 2 ** t.per_decade
    return (f"**{t.verdict}**: x{per:.2f} per 10x compute [x{2 ** t.lo:.2f}, x{2 ** t.hi:.2f}]")


def table(d: DataSpeedups) -> Table:
    rows = [[v.variant, *(_cell(s) for s in v.at), _trend(v.trend)] for v in d.variants]
    budgets = "; ".join(f"{s}: {', '.join(f'{m:g}x' for m in b)}" for s, b in zip(d.sizes, d.budgets,
                                                                                     strict=True))
    return Table(["variant", *d.sizes, "trend with size"], rows,
                 caption="The speedup (Wen et al. 2025): the tokens the tuned baseline needs to reach the "
                         f"variant's final {d.metric}, over the tokens the variant trained on, at each size; "
                         "from the baseline's final loss against log2 tokens over its data budgets "
                         f"({budgets}), each budget trained to the end of its own schedule; 95% delta-method "
                         "t intervals. The trend: the speedup's factor per 10x compute, the rungs' own "
                         "scatter included (95%).")


@section(15)  # after the ladder's transfer table
def part(inp: Inputs) -> Part | None:
    d = speedups_of(inp.study)
    if d is None:
        return None
    blocks: list[Block] = [table(d)]
    blocks += [Para(f"No speedup: {n}.") for n in d.notes]
    return Part("data_speedup", sections=[Section("Speedup in data", blocks)], data={"speedup": as_record(d)})
