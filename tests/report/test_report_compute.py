"""The report's "Compute by part" (ablate/report/sections/compute_hours.py): CPU hours per part from the
runs' own records, and an estimate, said as one, for the runs that logged a wall time but no CPU time (they
ran before ablate logged it): left out, they made the cells of the committed modern-axes study look 5x
cheaper than their searches."""

from __future__ import annotations

from pathlib import Path

import pytest

from ablate.report.compute.loaded_study import Run, Search, Study
from ablate.report.render import Para, Table
from ablate.report.section_api import Inputs
from ablate.report.sections.compute_hours import part
from ablate.study.recorded_study import ArmDesign, StudyRecord
from ablate.tracking import record


def _run(n: int, wall: float, cpu: float | None) -> Run:
    metrics = {record.WALL_TIME: wall, **({record.CPU_TIME: cpu} if cpu is not None else {})}
    return Run(f"r{n}", "baseline", n, "finished", "h", 0.0, {}, metrics, {})


def _study(cells: list[Run], trials: list[Run]) -> Study:
    arms = StudyRecord(arm_design=ArmDesign(looks=(3,), alpha=0.05))  # a study with tune: or confirm:
    return Study("s", "ablation", {"tags": {}}, cells, ["baseline"], "baseline", "bleu", "val/bleu",
                 searches=[Search(_run(99, 0.0, None), trials)], record=arms)


def test_runs_without_cpu_time_count_at_the_logged_runs_cpu_per_wall_hour_and_say_so(tmp_path: Path) -> None:
    # two cells ran before CPU time was logged (3600 s wall each); one logged both (3600 s wall and CPU);
    # the two trials logged both (1800 s wall, 3600 s CPU each): 10800 s CPU over 7200 s wall, 1.5 per hour
    cells = [_run(0, 3600.0, None), _run(1, 3600.0, None), _run(2, 3600.0, 3600.0)]
    trials = [_run(3, 1800.0, 3600.0), _run(4, 1800.0, 3600.0)]
    made = part(Inputs(_study(cells, trials), tmp_path))
    assert made is not None
    assert made.data["cpu_per_wall_hour"] == pytest.approx(1.5)
    records = {p["part"]: p for p in made.data["compute"]}
    base = records["cells at the baseline's settings"]
    assert base["cpu_hours_logged"] == pytest.approx(1.0)
    assert base["cpu_hours_estimated"] == pytest.approx(2 * 1.5)  # 2 wall hours at 1.5 CPU per wall hour
    assert base["cpu_hours"] == pytest.approx(4.0) and base["runs_without_cpu_time"] == 2
    searches = records["searches (every trial)"]
    assert (searches["cpu_hours"], searches["cpu_hours_estimated"]) == (pytest.approx(2.0), 0.0)
    blocks = made.sections[0].blocks
    table = next(b for b in blocks if isinstance(b, Table))
    rows = {r[0]: r for r in table.rows}
    # the estimate is marked, and the shares are of the estimated whole (4 + 2 = 6 CPU hours)
    assert rows["cells at the baseline's settings"][3:6] == [
        "≈ 4.00", "67%", "2 without CPU time (1.00 h logged, 3.00 h estimated)"]
    assert rows["searches (every trial)"][3:6] == ["2.00", "33%", ""]
    assert rows["**all**"][1:4] == ["5", "4.00", "≈ 6.00"]
    said = " ".join(b.text for b in blocks if isinstance(b, Para))
    assert "2 run(s) logged a wall time but no CPU time" in said
    assert "1.50 CPU hours per wall hour, the ratio of the study's 3 run(s) that logged both" in said


def test_a_study_whose_runs_all_logged_cpu_time_has_no_estimate(tmp_path: Path) -> None:
    made = part(Inputs(_study([_run(0, 3600.0, 7200.0)], [_run(1, 1800.0, 1800.0)]), tmp_path))
    assert made is not None
    assert [p["cpu_hours_estimated"] for p in made.data["compute"]] == [0.0, 0.0, 0.0, 0.0]
    table = next(b for b in made.sections[0].blocks if isinstance(b, Table))
    assert [r[3] for r in table.rows] == ["2.00", "0.50", "0.00", "0.00", "2.50"]
    assert not any("no CPU time" in b.text for b in made.sections[0].blocks if isinstance(b, Para))
