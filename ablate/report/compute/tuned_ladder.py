"""What a fair ladder's parent records of its fairness, typed for the report (ablate/report/sections/
fair_ladder.py): the fields each size rung changes over the one before (tag ``ablate.scales``), the scaling
rule, the tokens counted, the data budgets and the size tolerance; and with per-rung tuning (tag
``ablate.ladder_tune``, ablate/study/ladder_tuning.py) each variant's best point per rung, whether it sat at
an edge of its grid, and the best rate's power law in parameters."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ablate.tracking import record


@dataclass(frozen=True)
class RungBest:
    variant: str
    rung: str
    params: int
    best: dict[str, Any] | None
    edge: list[str]
    rule: str = "tuned"  # what set its grid or rate: tuned (its own grid), grid_from_below, mup
    source: str | None = None  # where a derived grid or rate came from, in words


@dataclass(frozen=True)
class RateLaw:
    variant: str
    exponent: float
    low: float | None
    high: float | None
    level: float
    rungs: int


@dataclass(frozen=True)
class FairLadder:
    """The fairness a ladder's parent records (every field empty for a ladder recorded before them)."""

    changes: list[tuple[str, str, list[tuple[str, Any, Any]]]]  # (size rung, next, [(field, a, b)])
    rule: dict[str, Any] | None = None
    tokens_counted: str = "non_embedding"
    tokens_per_param: float | None = None
    budgets: list[float] = field(default_factory=list)
    match: float | None = None
    grid: dict[str, list[Any]] = field(default_factory=dict)
    tuning_seeds: list[int] = field(default_factory=list)
    bests: list[RungBest] = field(default_factory=list)
    laws: list[RateLaw] = field(default_factory=list)
    mup_check: dict[str, Any] | None = None  # under larger_rungs.mup: the transfer check that allowed it

    @property
    def derived(self) -> list[RungBest]:
        """The rungs whose grid or rate another rule set than their own written grid."""
        return [b for b in self.bests if b.rule != "tuned"]

    @property
    def tuned(self) -> bool:
        return bool(self.bests)

    @property
    def flagged(self) -> list[RungBest]:
        return [b for b in self.bests if b.edge]


def fair_ladder(parent: Mapping[str, Any]) -> FairLadder | None:
    """The ladder's fairness from its parent's tags, or None for a study without a ladder."""
    tags = parent.get("tags", {})
    text = tags.get(record.SCALES)
    if not text:
        return None
    scales = json.loads(text)
    sizes: list[dict[str, Any]] = []
    for r in scales["rungs"]:  # a size's budgets share its model: its first budget stands for it
        size = r.get("size", r["name"])
        if size not in [s["size"] for s in sizes]:
            sizes.append({"size": size, "overrides": {k: v for k, v in r.get("overrides", {}).items()
                                                      if k != "train.max_steps"}})
    changes = []
    for a, b in zip(sizes, sizes[1:], strict=False):
        keys = sorted(set(a["overrides"]) | set(b["overrides"]))
        diff = [(k, a["overrides"].get(k), b["overrides"].get(k)) for k in keys
                if a["overrides"].get(k) != b["overrides"].get(k)]
        changes.append((a["size"], b["size"], diff))
    out = FairLadder(changes, scales.get("rule"), scales.get("tokens_counted") or "non_embedding",
                     scales.get("tokens_per_param"), [float(b) for b in scales.get("budgets") or []],
                     scales.get("match"))
    tuned = tags.get(record.LADDER_TUNE)
    if not tuned:
        return out
    data = json.loads(tuned)
    bests = [RungBest(r["variant"], r["rung"], int(r["params"]), r.get("best"), list(r.get("edge") or []),
                      r.get("rule") or "tuned", r.get("source")) for r in data.get("rungs", [])]
    laws = [RateLaw(label, law["exponent"], law.get("low"), law.get("high"), law["level"], law["rungs"])
            for label, law in (data.get("rate_laws") or {}).items() if law is not None]
    return FairLadder(out.changes, out.rule, out.tokens_counted, out.tokens_per_param, out.budgets, out.match,
                      data.get("grid", {}), list(data.get("seeds", [])), bests, laws, data.get("mup_check"))
