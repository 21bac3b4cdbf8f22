"""How a tuned ladder's rungs above the smallest get their learning rate (``scales.tune.larger_rungs``,
ablate/study/rung_rates.py, ladder_tuning.py, mup_check.py): a grid derived from the rungs below, tuned
smallest first, or the smallest rung's rate under muP once muP's own transfer check passed over the
ladder's widths; each bad input one located line."""

from __future__ import annotations

import csv
import math
import os
from pathlib import Path

import pytest

from ablate.cli import main as cli_main
from ablate.spec.load import SpecError
from ablate.study import ladder_tuning
from ablate.study.ablation import ladder_lines
from ablate.study.cell_queue import CellRecord
from ablate.study.designs import plan_study
from ablate.study.rung_rates import FROM_BELOW, MUP, Below, predicted
from ablate.study.study_plan import StudyPlan
from tests.study.test_fair_ladder import RULED, write

LR = "train.optimizer.lr"
THREE = RULED + """
      c: {model.d_model: 24, model.heads: 6, model.d_ff: 48, model.encoder_layers: 3,
          model.decoder_layers: 3}"""
FROM = """
    tune:
      grid: {train.optimizer.lr: [1.0e-3, 3.0e-3, 1.0e-2]}
      seeds: [50]
      larger_rungs: {grid_from_below: {points: 3, factor: 2}}"""


def _records(plan: StudyPlan, best: dict[tuple[str, str], float],
             edge_high: frozenset[tuple[str, str]] = frozenset()) -> dict[str, CellRecord]:
    """Every tuning cell the grids known so far need, finished with a loss whose minimum over the rung's
    grid is at the rate nearest ``best[(variant, rung)]`` (a loss falling with the rate where listed in
    ``edge_high``: the grid's top wins); repeated until no new cell appears (the study's phases)."""
    records: dict[str, CellRecord] = {}
    while True:
        cells, where = ladder_tuning.tune_cells(plan, records)
        new = [c for c in cells if c.key not in records]
        if not new:
            return records
        for c in new:
            at = where[c.key]
            lr = at.point[LR]
            key = (at.variant, at.rung)
            loss = -lr if key in edge_high else (math.log(lr) - math.log(best[key])) ** 2
            records[c.key] = CellRecord("finished", 2.0 + loss)


def test_each_rung_is_tuned_around_the_rate_the_rungs_below_predict_smallest_first(tmp_path: Path) -> None:
    plan = plan_study(str(write(tmp_path, THREE + FROM)))
    # planned: every rung's grid as many points as the rule gives (the dry run times them)
    planned, _ = ladder_tuning.tune_cells(plan)
    assert len(planned) == 3 * 2 * 3
    # before any record only the smallest rung is known: the others wait for the rungs below
    first, where = ladder_tuning.tune_cells(plan, {})
    assert {where[c.key].rung for c in first} == {"a"}
    lines = "\n".join(ladder_lines(plan))
    assert "b: train.optimizer.lr: 3 rates a factor 2 apart, derived when the rungs below are tuned" in lines
    records = _records(plan, {("baseline", "a"): 3e-3, ("baseline", "b"): 1.5e-3, ("baseline", "c"): 1e-3,
                              ("norm=rms", "a"): 3e-3, ("norm=rms", "b"): 3e-3, ("norm=rms", "c"): 3e-3},
                       edge_high=frozenset({("norm=rms", "b")}))
    bests = {(b.variant, b.rung): b for b in ladder_tuning.best_per_rung(plan, records)}
    assert ladder_tuning.complete(list(bests.values()))
    # b: one rung below, its best 3e-3: the grid a factor 2 apart around it
    b = bests[("baseline", "b")]
    assert b.rule == FROM_BELOW and b.grid == {LR: [1.5e-3, 3e-3, 6e-3]}
    assert "the best rate at a" in str(b.source)
    assert b.best == {LR: 1.5e-3} and b.edge == [LR]  # at the bottom of its derived grid: flagged
    # c: two rungs below, the nearest (b) at its edge: its bound centres the grid, said to be one
    c = bests[("baseline", "c")]
    assert c.grid is not None and "the best rate at b (at its grid's edge: a bound only)" in str(c.source)
    assert c.grid[LR] == pytest.approx([7.5e-4, 1.5e-3, 3e-3], rel=1e-3)
    rms_b = bests[("norm=rms", "b")]
    assert rms_b.best == {LR: 6e-3} and rms_b.edge == [LR]  # the top of its grid
    # the record says which rule set each rung's grid, and the smallest keeps its written grid
    rec = ladder_tuning.tuning_record(plan, list(bests.values()))
    rows = {(r["variant"], r["rung"]): r for r in rec["rungs"]}
    assert "rule" not in rows[("baseline", "a")] and rows[("baseline", "b")]["rule"] == FROM_BELOW
    tuned = ladder_tuning.tuned_plan(plan, list(bests.values()))
    assert {c.spec.train.optimizer.lr for c in tuned.cells if (c.label, c.rung) == ("baseline", "c")} == {
        c.best[LR]}  # type: ignore[index]


def test_two_bracketed_rungs_below_predict_by_their_power_law() -> None:
    below = [Below("a", 1_000, 8e-3, False), Below("b", 8_000, 4e-3, False)]
    rate, source = predicted(below, 64_000)
    assert rate == pytest.approx(2e-3) and "power law of the best rates at a, b" in source
    # one of them at its edge: the nearest bracketed rung's best
    rate, source = predicted([Below("a", 1_000, 8e-3, True), below[1]], 64_000)
    assert rate == 4e-3 and source == "the best rate at b"
    # the nearest at its edge: its bound, said to be one
    rate, source = predicted([below[0], Below("b", 8_000, 4e-3, True)], 64_000)
    assert rate == 4e-3 and source == "the best rate at b (at its grid's edge: a bound only)"


LARGER = [  # (the larger_rungs or grid line, the line the problem is reported at, the problem)
    ("{grid_from_below: {points: 1, factor: 2}}", "larger_rungs:",
     "ablation.scales.tune.larger_rungs.grid_from_below.points: "),
    ("{grid_from_below: {points: 3, factor: 1}}", "larger_rungs:",
     "ablation.scales.tune.larger_rungs.grid_from_below.factor: "),
    ("{grid_from_below: {points: 3, factor: 2}, mup: {check: x}}", "larger_rungs:",
     "ablation.scales.tune.larger_rungs.grid_from_below: give exactly one of grid_from_below or mup"),
]


@pytest.mark.parametrize(("larger", "at", "message"), LARGER, ids=["points", "factor", "both"])
def test_a_bad_larger_rungs_is_one_located_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                larger: str, at: str, message: str) -> None:
    path = write(tmp_path, THREE + FROM.replace("{grid_from_below: {points: 3, factor: 2}}", larger))
    _one_line(path, at, message, capsys)


def test_a_rungs_own_rate_grid_beside_grid_from_below_is_refused(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, THREE + FROM + "\n      rungs: {b: {train.optimizer.lr: [1.0e-3, 2.0e-3]}}")
    _one_line(path, "rungs: {b:", "ablation.scales.tune.rungs.b.train.optimizer.lr: rung 'b' gives its own "
              "train.optimizer.lr grid, but larger_rungs.grid_from_below sets the rate", capsys)


def _one_line(path: Path, at: str, message: str, capsys: pytest.CaptureFixture[str]) -> None:
    lines = path.read_text().splitlines()
    line = next(i for i, text in enumerate(lines, start=1) if text.strip().startswith(at))
    with pytest.raises(SpecError) as err:
        plan_study(str(path))
    shown = [f"{p.where}: {p.path}: {p.message}" for p in err.value.problems]
    assert len(shown) == 1 and shown[0].startswith(f"{path}:{line}: {message}"), shown
    before = sorted(os.listdir(path.parent))
    assert cli_main(["ablate", str(path), "--dry-run"]) == 2
    said = capsys.readouterr().err.strip().splitlines()
    assert len(said) == 1 and said[0].startswith(f"error: {path}:{line}: "), said
    assert sorted(os.listdir(path.parent)) == before


def _check_study(folder: Path, drift: float) -> Path:
    """A learning-rate transfer study's report folder: muP at widths 8, 16 and 32, 5 rates, 3 seeds; the
    best log2 rate moves by ``drift`` per doubling of the width."""
    folder.mkdir()
    rows = []
    for i, width in enumerate((8, 16, 32)):
        best = math.log2(4e-3) + drift * i
        for lr in (1e-3, 2e-3, 4e-3, 8e-3, 1.6e-2):
            for seed in (0, 1, 2):
                loss = 3.0 + 0.05 * (math.log2(lr) - best) ** 2 + 0.001 * seed
                rows.append({"variant": f"mup d{width} lr{lr:g}", "seed": seed, "status": "finished",
                             "val/loss": loss, "model.parametrisation": "mup", "model.d_model": width,
                             "train.optimizer.lr": lr})
    with open(folder / "runs.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return folder


MUP_TUNE = """
    tune:
      grid: {train.optimizer.lr: [1.0e-3, 3.0e-3, 1.0e-2]}
      seeds: [50]
      larger_rungs: {mup: {check: CHECK}}"""


def _mup_spec(tmp_path: Path, check: Path, parametrisation: str = "mup") -> Path:
    path = write(tmp_path, RULED + MUP_TUNE.replace("CHECK", check.name))
    text = path.read_text().replace("dropout: 0.0}", f"dropout: 0.0, parametrisation: {parametrisation}"
                                    + (", mup_base_width: 8}" if parametrisation == "mup" else "}"))
    path.write_text(text)
    return path


def test_mup_runs_every_rung_at_the_smallest_rungs_rate_once_its_check_passed(tmp_path: Path) -> None:
    plan = plan_study(str(_mup_spec(tmp_path, _check_study(tmp_path / "stable", 0.0))))
    cells, where = ladder_tuning.tune_cells(plan)
    assert {where[c.key].rung for c in cells} == {"a"}  # the smallest rung alone is tuned
    assert "b: not tuned: every variant at its best rate of a, under muP's multipliers" in "\n".join(
        ladder_lines(plan))
    records = {c.key: CellRecord("finished", 2.0 + (math.log(where[c.key].point[LR]) - math.log(3e-3)) ** 2)
               for c in cells}
    bests = {(b.variant, b.rung): b for b in ladder_tuning.best_per_rung(plan, records)}
    assert bests[("baseline", "b")].rule == MUP and bests[("baseline", "b")].best == {LR: 3e-3}
    tuned = ladder_tuning.tuned_plan(plan, list(bests.values()))
    assert {c.spec.train.optimizer.lr for c in tuned.cells} == {3e-3}
    assert {c.spec.model.parametrisation for c in tuned.cells} == {"mup"}


@pytest.mark.parametrize(("drift", "parametrisation", "message"), [
    (1.0, "mup", "muP's transfer check did not pass: drifting: muP's best rate from d8 to d32 shifts +2.00"),
    (0.0, "standard", "larger_rungs.mup runs every rung at the smallest rung's rate with muP's multipliers: "
                      "set model.parametrisation: mup (found standard)"),
])
def test_mup_without_a_passed_check_is_one_located_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        drift: float, parametrisation: str,
                                                        message: str) -> None:
    path = _mup_spec(tmp_path, _check_study(tmp_path / "drifting", drift), parametrisation)
    _one_line(path, "larger_rungs:", f"ablation.scales.tune.larger_rungs.mup.check: {message}", capsys)
