"""How a tuned ladder's rungs above the smallest get their learning rate (``scales.tune.larger_rungs``):

- ``grid_from_below: {points: N, factor: F}``: each variant's rung is tuned on N rates a factor F apart,
  centred on the rate the rungs below it predict for its size: the power law of their best rates in
  parameters (ablate/stats/lr_power_law.py, ``lr*(N) = c N^b``, as DeepSeek LLM 2024 section 3.1 fits it)
  with two or more rungs below whose best sat inside its grid (the nearest among them), else the nearest
  rung below's best, a bound where it sat at its grid's edge (its optimum may lie past it). So the
  rungs are tuned smallest first, each on a grid where its optimum is expected rather than one written
  before any rung ran (reports/ladder-kdocs ran every rung at 3e-3, where muP-transfer-wide put AdamW's
  best at 2.5e-2 and 1.2e-2). A rung whose best sat at its grid's edge only bounds the rate: it never
  enters the power law, and where it is the nearest rung below, the grid centres on its bound and says so.
- ``mup: {check: REPORT}``: the smallest rung alone is tuned; every rung runs at its best rate under muP's
  multipliers (Yang et al. 2022, "Tensor Programs V"), allowed once muP's own transfer check passed over
  these widths (ablate/study/mup_check.py).

Each rung's grid and the rule that set it are recorded with the tuning (ablate/study/ladder_tuning.py) and
shown by the dry run and the report.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ablate.spec.ladder_section import LR, GridFromBelow
from ablate.stats.lr_power_law import centred_grid, fit_rate_law

TUNED, FROM_BELOW, MUP = "tuned", "grid_from_below", "mup"  # what set a rung's grid or rate (the record's)


@dataclass(frozen=True)
class Below:
    """One rung below, as the prediction reads it: its name, the baseline's parameters there (the rate law's
    N), the variant's best rate and whether it sat at an edge of its grid."""

    rung: str
    params: int
    rate: float
    edge: bool


def _nice(value: float) -> float:
    return float(f"{value:.4g}")


def spaced(rule: GridFromBelow, centre: float) -> list[float]:
    """``rule.points`` rates a factor ``rule.factor`` apart, their geometric middle at ``centre``."""
    return [_nice(v) for v in centred_grid([rule.factor ** i for i in range(rule.points)], centre)]


def predicted(below: Sequence[Below], params: int) -> tuple[float, str]:
    """The rate the rungs below predict at ``params`` and where it came from, in words (``below`` in order
    of size, at least one)."""
    inside = [b for b in below if not b.edge]
    # the nearest rung below at its grid's edge bounds the rate where a law through older rungs may not
    law = (fit_rate_law([b.params for b in inside], [b.rate for b in inside])
           if len(inside) >= 2 and not below[-1].edge else None)
    if law is not None:
        names = ", ".join(b.rung for b in inside)
        return law.predict(params), (f"the power law of the best rates at {names} "
                                     f"(lr ∝ N^{law.exponent:+.2f}) at {params:,} parameters")
    near = below[-1]
    bound = "" if not near.edge else " (at its grid's edge: a bound only)"
    return near.rate, f"the best rate at {near.rung}{bound}"


def grid_from(rule: GridFromBelow, below: Sequence[Below], params: int) -> tuple[list[float], str]:
    """A rung's rate grid from the rungs below it, and its source in words."""
    centre, source = predicted(below, params)
    return spaced(rule, centre), (f"{rule.points} rates a factor {rule.factor:g} apart around {centre:.3g}: "
                                  f"{source}")


def planned_grid(rule: GridFromBelow, template: Sequence[float]) -> list[float]:
    """Before the rungs below are tuned: as many rates as the rule gives, around the smallest grid's middle
    (what the dry run plans and times; the run centres each on its prediction)."""
    logs = [math.log(v) for v in template]
    return spaced(rule, math.exp((min(logs) + max(logs)) / 2))


__all__ = ["FROM_BELOW", "LR", "MUP", "TUNED", "Below", "grid_from", "planned_grid", "predicted", "spaced"]
