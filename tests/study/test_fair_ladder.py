"""A fair ladder: one scaling rule, matched sizes, every variant tuned at every rung on seeds of
its own, data budgets per rung; its bad inputs are one located line each (ablate/study/ladder_checks.py,
ladder_tuning.py, rungs.py), the tuning picks each variant's best per rung and flags a best at a grid edge,
and a tiny tuned ladder runs end to end."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from mlflow import MlflowClient

from ablate.cli import main as cli_main
from ablate.launch.local_study import main_ablate
from ablate.spec.load import SpecError
from ablate.study import ladder_tuning, rung_rounds
from ablate.study.ablation import ladder_lines
from ablate.study.cell_queue import CellRecord
from ablate.study.designs import plan_study
from ablate.tracking import record
from tests.factories import TINY_STUDY_HEAD

SPEC = TINY_STUDY_HEAD + """\
ablation:
  axes: {{model.norm: [rms]}}
  metric: val/loss
  seeds: [0, 1]
  scales:
{scales}
"""
# width and depth together: d_model = 8 x layers, heads of 4, d_ff = 2 x d_model
RULED = """\
    rule: {aspect_ratio: 8, d_head: 4, ffn_ratio: 2}
    rungs:
      a: {model.d_model: 8, model.heads: 2, model.d_ff: 16, model.encoder_layers: 1,
          model.decoder_layers: 1}
      b: {model.d_model: 16, model.heads: 4, model.d_ff: 32, model.encoder_layers: 2,
          model.decoder_layers: 2}"""
TUNE = """
    tune:
      grid: {train.optimizer.lr: [1.0e-3, 3.0e-3, 1.0e-2]}
      rungs: {b: {train.optimizer.lr: [5.0e-4, 1.5e-3, 5.0e-3]}}
      seeds: [50]"""


def write(folder: Path, scales: str, name: str = "fair") -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(SPEC.format(name=name, scales=scales))
    return path


BAD = [  # (the scales section, the line the problem is reported at, the problem)
    (RULED + TUNE.replace("seeds: [50]", "seeds: [1, 50]"), "seeds: [1, 50]",
     "ablation.scales.tune.seeds: tuning seeds [1] are also evaluation seeds"),
    (RULED + TUNE.replace("[1.0e-3, 3.0e-3, 1.0e-2]", "[3.0e-3]"), "grid:",
     "ablation.scales.tune.grid.train.optimizer.lr: a grid of one value (0.003) tunes nothing"),
    (RULED + TUNE.replace("[5.0e-4, 1.5e-3, 5.0e-3]", "[1.5e-3, 1.5e-3]"), "rungs: {b:",
     "ablation.scales.tune.rungs.b.train.optimizer.lr: a grid of one value (0.0015) tunes nothing"),
    (RULED + TUNE.replace("train.optimizer.lr:", "model.norm:").replace("[1.0e-3, 3.0e-3, 1.0e-2]",
                                                                         "[builtin, custom]").replace(
        "\n      rungs: {b: {model.norm: [5.0e-4, 1.5e-3, 5.0e-3]}}", ""), "grid:",
     "ablation.scales.tune.grid.model.norm: model.norm is what a variant changes (model.norm)"),
    (RULED + "\n    speedup: true", "speedup:",
     "ablation.scales.speedup: a speedup is read from the baseline's loss-against-tokens fit, which needs at "
     "least 3 data budgets per rung (found 0)"),
    (RULED + "\n    budgets: [1, 2]\n    speedup: true", "speedup:",
     "ablation.scales.speedup: a speedup is read from the baseline's loss-against-tokens fit, which needs at "
     "least 3 data budgets per rung (found 2)"),
    (RULED.replace("model.d_model: 16, model.heads: 4, model.d_ff: 32, model.encoder_layers: 2",
                   "model.d_model: 16, model.heads: 4, model.d_ff: 32, model.encoder_layers: 1"), "b: {",
     "ablation.scales.rungs.b: rung 'b' breaks the scaling rule (ablation.scales.rule): d_model 16 is not "
     "aspect_ratio 8 x 1 layers (8)"),
    (RULED.replace("model.heads: 4, model.d_ff: 32", "model.heads: 2, model.d_ff: 48"), "b: {",
     "ablation.scales.rungs.b: rung 'b' breaks the scaling rule (ablation.scales.rule): heads 2 give "
     "d_head 8, not 4; d_ff 48 is not ffn_ratio 2 x d_model (32)"),
]


@pytest.mark.parametrize(("scales", "at", "message"), BAD, ids=[m[16:60] for _, _, m in BAD])
def test_a_bad_fair_ladder_is_one_located_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               scales: str, at: str, message: str) -> None:
    path = write(tmp_path, scales)
    lines = path.read_text().splitlines()
    line = next(i for i, text in enumerate(lines, start=1) if text.strip().startswith(at))
    with pytest.raises(SpecError) as err:
        plan_study(str(path))
    shown = [f"{p.where}: {p.path}: {p.message}" for p in err.value.problems]
    assert len(shown) == 1 and shown[0].startswith(f"{path}:{line}: {message}"), shown
    before = sorted(os.listdir(tmp_path))
    assert cli_main(["ablate", str(path), "--dry-run"]) == 2  # the command: exit 2, one line, no traceback
    said = capsys.readouterr().err.strip().splitlines()
    assert len(said) == 1 and said[0].startswith(f"error: {path}:{line}: "), said
    assert sorted(os.listdir(tmp_path)) == before  # nothing written


def test_a_variant_outside_the_size_tolerance_is_refused_at_its_line(tmp_path: Path) -> None:
    """A GLU at 2/3 d_ff drops the linear FFN's biases: at a small rung it is several percent smaller. With
    scales.match the study refuses it where the variant is written; glu_hidden: match_all matches it."""
    head = SPEC.replace("  axes: {{model.norm: [rms]}}\n", "  design: variants\n  variants:\n{variants}\n")
    lm = ("model: {{arch: decoder_only, d_model: 16, heads: 2, decoder_layers: 1, d_ff: 32, dropout: 0.0, "
          "max_positions: 8}}")
    head = head.replace(
        "model: {{d_model: 16, heads: 2, encoder_layers: 1, decoder_layers: 1, d_ff: 32, dropout: 0.0}}", lm)
    head = head.replace("eval: {{metric: exact_match, samples: 0}}", "eval: {{samples: 0, lengths: []}}")
    head = head.replace("task: reverse,", "task: copy_far,")
    scales = ("    match: 0.02\n    rungs:\n      a: {model.d_model: 8, model.d_ff: 16}\n"
              "      b: {model.d_model: 16}")
    for hidden, refused in (("match_params", True), ("match_all", False)):
        variant = ("    - {label: swiglu, model.ffn: swiglu, model.activation: relu, "
                   f"model.glu_hidden: {hidden}, model.glu_multiple_of: 1}}")
        path = tmp_path / f"{hidden}.yaml"
        path.write_text(head.format(name=hidden, scales=scales, variants=variant))
        if not refused:
            plan = plan_study(str(path))
            assert [r.name for r in plan.rungs] == ["a", "b"]
            continue
        with pytest.raises(SpecError) as err:
            plan_study(str(path))
        (problem,) = err.value.problems
        lines = path.read_text().splitlines()
        written = next(i for i, t in enumerate(lines, start=1) if "label: swiglu" in t)
        assert problem.where == f"{path}:{written}" and problem.path == "ablation.variants.0"
        assert "variant swiglu at rung a:" in problem.message and "outside ablation.scales.match ±2.0%" in \
            problem.message


def test_data_budgets_are_rungs_of_their_own_with_their_own_schedule(tmp_path: Path) -> None:
    scales = RULED + "\n    tokens_per_param: 2\n    budgets: [1, 2, 4]\n    speedup: true"
    plan = plan_study(str(write(tmp_path, scales)))
    names = [r.name for r in plan.rungs]
    assert sorted(names) == ["a-1x", "a-2x", "a-4x", "b-1x", "b-2x", "b-4x"]
    for size in ("a", "b"):
        mine = {r.budget: r for r in plan.rungs if r.size_rung == size}
        steps = {b: r.overrides["train.max_steps"] for b, r in mine.items()}
        assert steps[2.0] == 2 * steps[1.0] and steps[4.0] == 4 * steps[1.0], steps
        # each budget's cells end their own schedule there: the spec's max_steps is the budget's
        for r in mine.values():
            cells = [c for c in plan.cells if c.rung == r.name]
            assert {c.spec.train.max_steps for c in cells} == {r.overrides["train.max_steps"]}
    ladder = rung_rounds.ladder_record(plan)
    assert ladder is not None
    scale = json.loads(ladder.as_tag())  # the parent's tag, as the record writes it
    assert scale["budgets"] == [1.0, 2.0, 4.0] and scale["speedup"] is True
    assert {(r["name"], r["size"], r["budget"]) for r in scale["rungs"]} >= {("b-2x", "b", 2.0)}
    assert scale["rule"] == {"aspect_ratio": 8.0, "d_head": 4, "ffn_ratio": 2.0}


def test_tokens_per_param_can_count_every_parameter(tmp_path: Path) -> None:
    scales = RULED + "\n    tokens_per_param: 2\n    tokens_counted: all"
    plan = plan_study(str(write(tmp_path, scales)))
    for rung in plan.rungs:
        assert rung.params_all is not None and rung.params_all > rung.compute.params
        steps = rung.overrides["train.max_steps"]
        assert steps == max(1, round(2 * rung.params_all / 256))
    assert "counting every parameter" in "\n".join(ladder_lines(plan))


def _tuned_plan(tmp_path: Path) -> tuple[object, list[object], dict[str, ladder_tuning.TuneCell]]:
    plan = plan_study(str(write(tmp_path, RULED + TUNE)))
    cells, where = ladder_tuning.tune_cells(plan)
    return plan, cells, where


def test_every_variant_is_tuned_at_every_rung_on_its_own_grid_and_seeds(tmp_path: Path) -> None:
    plan, cells, where = _tuned_plan(tmp_path)
    assert len(cells) == 1 * 2 * 2 * 3  # tuning seeds x rungs x variants x grid points
    assert {c.seed for c in cells} == {50} and {c.arm for c in cells} == {record.LADDER_TUNE_ARM}
    grids = {(where[c.key].variant, c.rung): set() for c in cells}
    for c in cells:
        grids[(where[c.key].variant, c.rung)].add(c.spec.train.optimizer.lr)
    assert grids[("norm=rms", "a")] == {1e-3, 3e-3, 1e-2} and grids[("baseline", "b")] == {5e-4, 1.5e-3, 5e-3}
    for c in cells:
        assert c.spec.model.norm == ("rms" if where[c.key].variant == "norm=rms" else "builtin")
    assert len({c.key for c in cells}) == len(cells)
    rebuilt = plan.rebuild(cells[4].attrs())  # type: ignore[attr-defined]
    assert rebuilt.key == cells[4].key and rebuilt.arm == record.LADDER_TUNE_ARM


def test_the_best_point_per_rung_is_chosen_an_edge_flagged_and_a_diverged_point_never_wins(
        tmp_path: Path) -> None:
    plan, cells, where = _tuned_plan(tmp_path)
    # loss by rate: at a, the baseline's best is the middle 3e-3, norm=rms's the grid's top 1e-2; at b,
    # the baseline's lowest-loss rate 5e-3 diverged, so 1.5e-3 wins
    loss = {("baseline", "a"): {1e-3: 2.0, 3e-3: 1.5, 1e-2: 1.8},
            ("norm=rms", "a"): {1e-3: 2.2, 3e-3: 1.9, 1e-2: 1.6},
            ("baseline", "b"): {5e-4: 1.9, 1.5e-3: 1.4, 5e-3: 0.1},
            ("norm=rms", "b"): {5e-4: 1.2, 1.5e-3: 1.3, 5e-3: 1.5}}
    records = {}
    for c in cells:
        at = where[c.key]
        lr = at.point["train.optimizer.lr"]
        diverged = (at.variant, at.rung, lr) == ("baseline", "b", 5e-3)
        records[c.key] = CellRecord("diverged" if diverged else "finished", loss[(at.variant, at.rung)][lr])
    bests = {(b.variant, b.rung): b for b in ladder_tuning.best_per_rung(plan, records)}  # type: ignore[arg-type]
    assert bests[("baseline", "a")].best == {"train.optimizer.lr": 3e-3} and not bests[("baseline", "a")].edge
    assert bests[("norm=rms", "a")].best == {"train.optimizer.lr": 1e-2}
    assert bests[("norm=rms", "a")].edge == ["train.optimizer.lr"]
    assert bests[("baseline", "b")].best == {"train.optimizer.lr": 1.5e-3}
    assert bests[("norm=rms", "b")].edge == ["train.optimizer.lr"]  # the grid's bottom
    tuned = ladder_tuning.tuned_plan(plan, list(bests.values()))  # type: ignore[arg-type]
    assert len(tuned.cells) == len(plan.cells)  # type: ignore[attr-defined]
    for c in tuned.cells:
        assert c.spec.train.optimizer.lr == bests[(c.label, c.rung)].best["train.optimizer.lr"]  # type: ignore[index]
        assert c.arm == record.BASELINE_ARM and c.seed in (0, 1)
    rec = ladder_tuning.tuning_record(plan, list(bests.values()))  # type: ignore[arg-type]
    assert rec["seeds"] == [50] and len(rec["rungs"]) == 4
    assert set(rec["rate_laws"]) == {"baseline", "norm=rms"}
    # norm=rms's bests sit at edges on both rungs: they only bound its law, which is not fitted
    assert rec["rate_laws"]["norm=rms"] is None and rec["rate_laws"]["baseline"]["rungs"] == 2
    half = dict(records)
    half.pop(cells[0].key)
    assert not ladder_tuning.complete(ladder_tuning.best_per_rung(plan, half))  # type: ignore[arg-type]


@pytest.mark.soak  # 8 tuning cells and 8 evaluation cells of 4 steps (6 min on 2 shared cores)
def test_a_tiny_tuned_ladder_runs_its_tuning_then_its_cells_at_each_best(workdir: Path) -> None:
    tune = TUNE.replace("[1.0e-3, 3.0e-3, 1.0e-2]", "[1.0e-3, 1.0e-2]").replace(
        "[5.0e-4, 1.5e-3, 5.0e-3]", "[5.0e-4, 5.0e-3]")
    path = write(workdir, RULED + tune, name="tuned")
    assert main_ablate(str(path)) == 0
    client = MlflowClient()
    experiment = client.get_experiment_by_name("tuned")
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id], "tags.`ablate.kind` = 'cell'")
    tuning = [r for r in runs if r.data.tags.get(record.ARM) == record.LADDER_TUNE_ARM]
    judged = [r for r in runs if r.data.tags.get(record.ARM) == record.BASELINE_ARM]
    assert len(tuning) == 8 and {r.data.tags[record.SEED] for r in tuning} == {"50"}
    assert len(judged) == 8 and {r.data.tags[record.SEED] for r in judged} == {"0", "1"}
    parent = client.search_runs([experiment.experiment_id], "tags.`ablate.variant` = 'study'")[0]
    recorded = json.loads(parent.data.tags[record.LADDER_TUNE])
    best = {(r["variant"], r["rung"]): r["best"]["train.optimizer.lr"] for r in recorded["rungs"]}
    for r in judged:  # every judged cell at its variant's best at its rung
        lr = float(r.data.params["train.optimizer.lr"])
        assert lr == best[(r.data.tags[record.VARIANT], r.data.tags[record.RUNG])]
