"""Wen et al.'s speedup in a ladder's report (ablate/report/compute/tuned_speedups.py,
ablate/report/sections/speedup_table.py): budget rungs tagged with their size and multiple, the baseline's
loss-against-tokens fit per size, each variant's speedup and its trend with size."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ablate.report.compute.loaded_study import build_study
from ablate.report.compute.tuned_speedups import speedups_of
from ablate.report.render import Table
from ablate.report.section_api import Inputs
from ablate.report.sections import speedup_table

SIZES = [("s", 1e11, 1e6), ("m", 1e12, 4e6), ("l", 1e13, 1.6e7)]  # name, flops at 1x, tokens at 1x
SPEEDUP = {"s": 1.6, "m": 1.3, "l": 1.1}  # 'fast' shrinks towards 1x with size, as Muon's in Wen et al.


def frame() -> tuple[dict[str, object], pd.DataFrame]:
    rng = np.random.default_rng(0)
    rows, rungs = [], []
    for size, flops, tokens in SIZES:
        for m in (1, 2, 4):
            name = f"{size}-{m}x"
            rungs.append({"name": name, "flops": flops * m, "overrides": {}, "params": tokens / 20,
                          "tokens": tokens * m, "size": size, "budget": float(m)})
            for seed in range(4):
                base = 4.0 - 0.3 * math.log10(flops) / 10 - 0.1 * math.log2(m) + 0.005 * rng.standard_normal()
                # every variant runs every budget; its speedup is read at the size's smallest
                values = {"baseline": base,
                          "fast": base - 0.1 * math.log2(SPEEDUP[size]) + 0.005 * rng.standard_normal()}
                for variant, value in values.items():
                    rows.append({"run_id": f"{name}-{variant}-{seed}", "status": "FINISHED",
                                 "start_time": pd.Timestamp(len(rows), unit="s"),
                                 "tags.ablate.variant": variant, "tags.ablate.seed": str(seed),
                                 "tags.ablate.status": "finished", "tags.ablate.rung": name,
                                 "tags.ablate.size_rung": size, "tags.ablate.data_budget": str(m),
                                 "tags.ablate.kind": "cell", "metrics.final/val/loss": value,
                                 "metrics.final/train/flops": flops * m,
                                 "metrics.final/train/tokens": tokens * m})
    rungs.sort(key=lambda r: float(str(r["flops"])))
    tags = {"ablate.study": "sp", "ablate.kind": "ablation", "ablate.metric": "final/val/loss",
            "ablate.scales": json.dumps({"rungs": rungs})}
    parent = {"run_id": "p", "experiment_id": "1", "run_name": "sp", "status": "FINISHED",
              "params": {"ablation.metric": "val/loss", "ablation.alpha": "0.05"}, "metrics": {},
              "tags": tags}
    return parent, pd.DataFrame(rows)


def test_each_size_gives_the_speedup_the_runs_were_made_with_and_its_trend_shrinks() -> None:
    d = speedups_of(build_study(*frame()))
    assert d is not None and d.sizes == ["s", "m", "l"] and d.budgets == [[1, 2, 4]] * 3
    assert d.compute == pytest.approx([1e11, 1e12, 1e13])
    fast = d.variants[0]
    for s, size in zip(fast.at, ("s", "m", "l"), strict=True):
        assert s is not None and s.rung == size and s.lo < SPEEDUP[size] < s.hi
        assert s.value == pytest.approx(SPEEDUP[size], rel=0.15) and s.beyond == 0
    assert fast.trend is not None and fast.trend.verdict == "shrinks"


def test_the_section_renders_the_speedup_table(tmp_path: Path) -> None:
    part = speedup_table.part(Inputs(build_study(*frame()), tmp_path))
    assert part is not None and part.sections[0].title == "Speedup in data"
    table = part.sections[0].blocks[0]
    assert isinstance(table, Table) and table.header == ["variant", "s", "m", "l", "trend with size"]
    assert table.rows[0][1].startswith("1.") and "**shrinks**" in table.rows[0][-1]
    assert part.data["speedup"]["variants"]["fast"]["trend"]["verdict"] == "shrinks"


def test_a_study_without_budgets_has_no_speedup_section(tmp_path: Path) -> None:
    parent, runs = frame()
    runs = runs.drop(columns=["tags.ablate.size_rung", "tags.ablate.data_budget"])
    assert speedup_table.part(Inputs(build_study(parent, runs), tmp_path)) is None
