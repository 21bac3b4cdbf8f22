"""The seeds a new study needs, once a study's own seeds exist: at the effect they found and across its
interval, never at an assumed one (ablate/stats/replication_size.py, ablate/study/observed_needs.py, the
report's opening table); on a ladder with the gap's rung-level variance where the rungs estimate one."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from ablate.stats.replication_size import power_at, seeds_across, seeds_either, seeds_for, sized_at_found
from ablate.study import observed_needs
from ablate.study.cell_queue import CellRecord
from ablate.study.designs import plan_study
from tests.study.test_ladder import RUNGS, write


def test_without_a_claim_it_is_sized_at_the_effect_found_not_at_min_effect() -> None:
    # pairs whose mean is 0.07 with sd 0.05; min_effect 0.02 (far smaller): the "assumed" plan would size
    # the interval to lie within ±0.02, the effect found needs an interval excluding 0
    diffs = [0.02, 0.12, 0.05, 0.09, 0.07]
    found = sized_at_found(diffs, 0.05, None, None, 0.02, higher=False)
    assert found is not None
    sd = math.sqrt(sum((d - 0.07) ** 2 for d in diffs) / 4)
    assert found.observed == seeds_for(0.07, sd, 0.05, "beyond")
    assert found.observed is not None and found.observed < 10
    # across the interval: its end near 0 needs far more, or none
    assert found.at_lo is None or found.at_lo > 3 * found.observed
    # either way: where the interval's end lies well inside ±min_effect, "within" is the fewer seeds
    either = seeds_either(0.001, -0.01, 0.012, 0.02, 5, 0.05, 0.05)
    within = seeds_across(0.001, -0.01, 0.012, 0.02, 5, 0.05, "within", 0.05)
    assert either.observed == within.observed and either.observed is not None
    beyond = seeds_for(0.001, 0.02, 0.05, "beyond")
    assert beyond is None or beyond > 100


def test_no_effect_needs_the_pairs_a_study_calls_no_effect_from() -> None:
    # a huge equivalence margin: power is reached at 2 pairs, but no effect is called from 4 pairs on
    assert seeds_for(0.0, 0.01, 0.05, "within", 1.0) == 4


def test_the_rung_variance_is_noise_no_number_of_seeds_averages_away() -> None:
    sd, effect = 0.02, 0.03
    alone = seeds_for(effect, sd, 0.05, "beyond")
    with_rungs = seeds_for(effect, sd, 0.05, "beyond", rung_var=0.005 ** 2)
    assert alone is not None and with_rungs is not None and with_rungs > alone
    # a rung sd of 0.015: 0.03 is within 2.8 rung sds of 0, so no number of seeds reaches 80% power
    assert seeds_for(effect, sd, 0.05, "beyond", rung_var=0.015 ** 2) is None
    assert power_at(10_000, effect, sd, 0.05, "beyond", rung_var=0.015 ** 2) < 0.8


def _ladder_records(plan, gap: dict[str, float], scatter: float) -> dict[str, CellRecord]:  # type: ignore[no-untyped-def]
    """Every cell finished: the variant's gap per rung, plus a seed's own noise of +-scatter."""
    records = {}
    for c in plan.cells:
        noise = scatter * (1 if c.seed % 2 else -1)
        value = 3.0 + (gap[c.rung] + noise if c.label != "baseline" else 0.0)
        records[c.key] = CellRecord("finished", value)
    return records


def test_a_ladders_dry_run_sizes_each_rung_at_its_gap_found_with_the_rung_variance(tmp_path: Path) -> None:
    plan = plan_study(str(write(tmp_path, RUNGS + "\n    margin: 0.05", seeds="  seeds: [0, 1, 2, 3]")))
    # gaps that scatter about any line in log compute far more than the seeds' 0.002
    records = _ladder_records(plan, {"small": -0.10, "mid": -0.02, "large": -0.09}, 0.002)
    sizes = observed_needs.ladder_found_sizes(plan, records)
    assert set(sizes) == {"small", "mid", "large"}
    found, words = sizes["large"]["norm=rms"]
    assert found is not None and found.rung_var > 0 and words.startswith("sd with the rung-level variance")
    seeds_only = sized_at_found([-0.09 - 0.002, -0.09 + 0.002] * 2, plan.verdict_design.level, None, None,
                                0.05, higher=False)
    assert seeds_only is not None and (found.observed is None or found.observed > (seeds_only.observed or 0))
    lines = observed_needs.ladder_found_lines(plan, records)
    assert any(line.startswith("    rung large, norm=rms: ") and "rung sd" in line for line in lines)
    # rungs on one line: no rung variance, and the line says it sized on seed noise only
    straight = _ladder_records(plan, {"small": -0.10, "mid": -0.10, "large": -0.10}, 0.002)
    found, words = observed_needs.ladder_found_sizes(plan, straight)["large"]["norm=rms"]
    assert found is not None and found.rung_var == 0 and words.startswith("seed noise only")


@pytest.mark.parametrize("question", ["better", "none"])
def test_a_claim_is_sized_at_its_own_question(question: str) -> None:
    diffs = [-0.05, -0.03, -0.04, -0.06]
    found = sized_at_found(diffs, 0.05, question, 0.1 if question == "none" else None, None, higher=False)
    assert found is not None
    if question == "better":  # lower is better here: -0.045 is the claimed way
        assert found.observed is not None and found.power_here > 0
    else:  # within ±0.1 at -0.045
        assert found.observed is not None and found.observed >= 4
