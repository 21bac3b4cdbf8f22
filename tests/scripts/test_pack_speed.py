"""scripts/pack_speed.py (the packed-cells figures): a ladder's rungs become the cell spec's overrides, each
rung a spec the study accepts; the dry run's estimate is read as it prints it."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from ablate.spec.load import load_spec
from tests.scripts.script_loader import load_script

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def script() -> ModuleType:
    return load_script("pack_speed")


def test_each_rung_of_the_committed_ladder_is_its_cell_with_the_ladders_fields(script: ModuleType) -> None:
    ladder = ROOT / "experiments" / "ablations" / "ladder-kdocs.yaml"
    cell, rungs = script.ladder_rungs(str(ladder))
    assert Path(cell).resolve() == ROOT / "experiments" / "lm-kdocs-cell.yaml"
    assert [name for name, _ in rungs] == ["xs", "s", "m", "l"]
    whole = load_spec(str(ladder), [])
    for _, overrides in rungs:
        spec = load_spec(cell, overrides)
        # the ladder's own cell (its positions, norm, training length, evaluation) at the rung's size
        assert (spec.model.positions, spec.model.norm, spec.model.max_positions) == \
            (whole.model.positions, whole.model.norm, whole.model.max_positions)
        assert spec.eval.lengths == whole.eval.lengths == []
        fields = dict(o.split("=", 1) for o in overrides)
        assert spec.model.d_model == int(fields["model.d_model"])
    assert load_spec(cell, rungs[-1][1]).model.decoder_layers == 4  # l: the only rung with 4 layers
    assert load_spec(cell, rungs[0][1]).model.decoder_layers == 2


def test_a_spec_without_rungs_is_refused_in_one_line(script: ModuleType, tmp_path: Path) -> None:
    plain = ROOT / "experiments" / "lm-kdocs-cell.yaml"
    with pytest.raises(SystemExit, match="expected a ladder spec that extends one cell spec"):
        script.ladder_rungs(str(plain))
    child = tmp_path / "child.yaml"
    child.write_text(f"extends: {plain}\nname: child\n")
    with pytest.raises(SystemExit, match="no ablation.scales.rungs"):
        script.ladder_rungs(str(child))


def test_the_dry_runs_estimate_is_its_packed_figure_where_it_gives_one(script: ModuleType) -> None:
    line = "estimated wall time: 12 min for 6 cells, 1 at a time, at 2.0 min a cell; packed: 8.5 min (...)"
    assert script.estimated_seconds(line) == pytest.approx(510)
    assert script.estimated_seconds("estimated wall time: 95 s for 8 cells, 1 at a time") == 95
    assert script.estimated_seconds("estimated wall time: unknown (no steps)") is None
