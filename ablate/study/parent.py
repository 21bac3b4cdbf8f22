"""What an ablation study's parent MLflow run shows: its description (what it compares, the metric it
ranks by, the cells and their outcome so far) and the cells table artifact."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import ablate.tracking.record as R


def parent_description(plan: Any, records: Mapping[str, Any]) -> str:
    """The study parent run's description (markdown in MLflow's UI): what it compares, the metric it
    ranks by, and the cells with their outcome so far."""
    abl = plan.spec.ablation
    assert abl is not None
    metric = R.final(plan.metric)
    lines = [f"**Ablation study {plan.name}**: design {abl.design}, {len(plan.variants)} variants x "
             f"{len(plan.seeds)} seed(s) = {len(plan.cells)} cells.",
             f"Cells rank by **{metric}** ({plan.direction}): the best checkpoint on the whole validation "
             "split; child runs are named `variant · seed N`.", ""]
    if plan.spec.description:
        lines += [plan.spec.description, ""]
    table = cells_table(plan, records)
    lines += ["| variant | seed | status | " + metric + " | run |", "|---|---:|---|---:|---|"]
    for row in zip(*table.values(), strict=True):
        lines.append("| " + " | ".join("-" if v in (None, "") else str(v) for v in row) + " |")
    return "\n".join(lines)


def cells_table(plan: Any, records: Mapping[str, Any]) -> dict[str, list[Any]]:
    """Columns of the cells table (variant, seed, status, metric, run id) as MLflow's log_table takes."""
    metric = R.final(plan.metric)
    cols: dict[str, list[Any]] = {"variant": [], "seed": [], "status": [], metric: [], "run": []}
    for c in plan.cells:
        r = records.get(c.key)
        cols["variant"].append(c.label)
        cols["seed"].append(c.seed)
        cols["status"].append(r.status if r else "pending")
        cols[R.final(plan.metric)].append(round(r.metric, 4) if r and r.metric is not None else None)
        cols["run"].append((r.run_id or "")[:8] if r else "")
    return cols
