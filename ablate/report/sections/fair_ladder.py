"""A fair ladder's section (``ablation.scales``: rule, tokens_counted, budgets, match, tune): what each rung
changes over the one before, and with per-rung tuning each variant's best setting at every rung, a best at
an edge of its grid flagged (the true best may lie beyond it, and the comparison at that rung is then
between a tuned variant and one tuned only to a bound), with the best rate's power law in parameters.

Renders ``ablate.report.compute.tuned_ladder``; decides nothing.
"""

from __future__ import annotations

from ablate.report.compute.tuned_ladder import FairLadder, fair_ladder
from ablate.report.render import Block, Para, Section, Table
from ablate.report.section_api import Inputs, Part, section


def show(value: object) -> str:
    """A setting as the spec writes it (0.003, 3e-05, rms); spec for a field the rung leaves as it is."""
    if value is None:
        return "spec"
    return f"{value:g}" if isinstance(value, float) else str(value)


# what set a rung's rate, beside its best (the rungs tuned on their own written grid carry no mark)
RULES = {"grid_from_below": " (grid from below)", "mup": " (muP, the smallest rung's rate)"}


def _rules(fair: FairLadder) -> list[Block]:
    """Which rule set each rung's rate where its own grid did not: a grid from the rungs below (and from
    what), or the smallest rung's rate under muP (and the check that allowed it)."""
    if not fair.derived:
        return []
    lines = [f"{b.variant} at {b.rung}: {b.source or b.rule}" for b in fair.derived if b.rule != "mup"]
    out: list[Block] = []
    if lines:
        out.append(Para("**Grids from the rungs below** (tuned smallest first, each rung's learning-rate "
                        "grid centred on the rate the rungs below predict): " + "; ".join(lines) + "."))
    if any(b.rule == "mup" for b in fair.derived):
        c = fair.mup_check or {}
        said = ""
        if c.get("widths"):
            said = (f" Its transfer check, {c.get('study')}: muP's best rate shifts {c.get('shift', 0):+.2f} "
                    f"log2 [{c.get('low', 0):+.2f}, {c.get('high', 0):+.2f}] from d{c['widths'][0]} to "
                    f"d{c['widths'][-1]}: {c.get('verdict')}.")
        rungs = ", ".join(dict.fromkeys(b.rung for b in fair.derived if b.rule == "mup"))
        out.append(Para(f"**muP** (Yang et al. 2022): rungs {rungs} were not tuned; every variant ran there "
                        "at its best rate at the smallest rung, under muP's multipliers." + said))
    return out


def _changes(fair: FairLadder) -> Table:
    rows = [[f"{a} → {b}", ", ".join(f"`{k}` {show(x)} → {show(y)}" for k, x, y in diff) or "nothing"]
            for a, b, diff in fair.changes]
    return Table(["rungs", "fields that change (the steps follow from the tokens)"], rows, align="ll")


def _bests(fair: FairLadder) -> Table:
    variants = list(dict.fromkeys(b.variant for b in fair.bests))
    rungs = list(dict.fromkeys(b.rung for b in fair.bests))
    at = {(b.variant, b.rung): b for b in fair.bests}
    rows = []
    for rung in rungs:
        cells = []
        for v in variants:
            b = at.get((v, rung))
            if b is None or b.best is None:
                cells.append("-")
                continue
            shown = ", ".join(show(x) for x in b.best.values())
            shown = f"{shown} (edge)" if b.edge else shown
            cells.append(shown + RULES.get(b.rule, ""))
        rows.append([rung, f"{at[(variants[0], rung)].params:,}", *cells])
    return Table(["rung", "N (baseline)", *variants], rows)


def _setup(fair: FairLadder) -> str:
    parts = []
    if fair.rule:
        r = fair.rule
        extra = "".join([f", heads of {r['d_head']}" if r.get("d_head") else "",
                         f", d_ff = {r['ffn_ratio']:g} x d_model" if r.get("ffn_ratio") else ""])
        parts.append(f"The rungs grow by one rule: d_model = {r['aspect_ratio']:g} x layers{extra}.")
    else:
        parts.append("The ladder declares no scaling rule (`scales.rule`): the fields each rung changes are "
                     "below.")
    if fair.tokens_per_param is not None:
        counted = ("every parameter (embeddings and output head included)" if fair.tokens_counted == "all"
                   else "the parameters without embeddings")
        parts.append(f"Each rung trains on {fair.tokens_per_param:g} tokens per parameter, counting "
                     f"{counted}.")
    if fair.budgets:
        parts.append("Data budgets per rung: " + ", ".join(f"{b:g}x" for b in fair.budgets)
                     + " of its tokens, each trained with its own full schedule.")
    if fair.match is not None:
        parts.append(f"Every variant's parameters and FLOPs are within ±{fair.match:.1%} of the baseline's "
                     "at every rung (checked before the first cell).")
    return " ".join(parts)


@section(12)  # after the ladder's transfer table
def part(inp: Inputs) -> Part | None:
    """The section "A fair ladder", for a ladder whose parent records its fairness."""
    fair = fair_ladder(inp.study.parent)
    if fair is None or (not fair.changes and not fair.tuned):
        return None
    blocks: list[Block] = [Para(_setup(fair)), _changes(fair)]
    if fair.tuned:
        grid = "; ".join(f"`{k}` {', '.join(show(v) for v in vs)}" for k, vs in fair.grid.items())
        seeds = ", ".join(map(str, fair.tuning_seeds))
        blocks.append(Para(f"Every variant was tuned at every rung on the same grid ({grid}, a rung's own "
                           f"where the spec gives one) on tuning seed(s) {seeds}, never evaluated; each then "
                           "ran the study's seeds at its own best. Best setting per rung:"))
        blocks.append(_bests(fair))
        blocks += _rules(fair)
        if fair.flagged:
            shown = ", ".join(f"{b.variant} at {b.rung}" for b in fair.flagged)
            blocks.append(Para("**At a grid edge** (the best may lie beyond the grid; that rung's "
                               f"comparison is against a bound of the best): {shown}."))
        for law in fair.laws:
            interval = (f" [{law.low:+.2f}, {law.high:+.2f}] at {law.level:.0%}" if law.low is not None
                        and law.high is not None else " (2 rungs: no interval)")
            blocks.append(Para(f"{law.variant}: the best learning rate scales as N^{law.exponent:+.2f}"
                               f"{interval}, over {law.rungs} rungs whose best was inside the grid."))
    data = {"rule": fair.rule, "tokens_counted": fair.tokens_counted, "budgets": fair.budgets,
            "changes": [{"from": a, "to": b, "fields": [k for k, _, _ in diff]}
                        for a, b, diff in fair.changes],
            "bests": [{"variant": b.variant, "rung": b.rung, "best": b.best, "edge": b.edge,
                       **({"rule": b.rule, "source": b.source} if b.rule != "tuned" else {})}
                      for b in fair.bests]}
    return Part("fair_ladder", sections=[Section("A fair ladder", blocks)], data={"fair_ladder": data})
