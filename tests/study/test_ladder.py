"""A ladder of model sizes (``ablation.scales``): its bad inputs are one located line each, its cells are
variants x rungs x seeds paired by seed within a rung, its steps follow its tokens, and its rounds walk each
rung apart (ablate/study/rungs.py, ablate/study/rung_rounds.py)."""

from __future__ import annotations

import csv
import json
import os
from dataclasses import replace
from pathlib import Path

import pytest
from mlflow import MlflowClient

from ablate.cli import main as cli_main
from ablate.launch.local_study import main_ablate
from ablate.report.build import main_report
from ablate.spec.load import SpecError
from ablate.study import preregister, rung_rounds
from ablate.study.cell_queue import CellQueue, CellRecord
from ablate.study.designs import plan_study
from ablate.study.optuna_store import Store
from ablate.study.rungs import model_shape
from tests.factories import TINY_STUDY_HEAD

SPEC = TINY_STUDY_HEAD + """\
ablation:
  axes: {{model.norm: [rms]}}
  metric: val/loss
{seeds}
  scales:
{scales}
"""
RUNGS = """\
    rungs:
      small: {model.d_model: 8, model.d_ff: 16}
      large: {model.d_model: 16, model.d_ff: 32, tokens: 2048}
      mid: {model.d_model: 12, model.d_ff: 24, model.heads: 2, train.max_steps: 6}"""


def write(folder: Path, scales: str = RUNGS, seeds: str = "  seeds: [0, 1]", name: str = "lad") -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(SPEC.format(name="lad", seeds=seeds, scales=scales))
    return path


BAD = [  # (the scales section, the line the problem is reported at, the problem)
    ("    rungs:\n      only: {model.d_model: 8}", "rungs:",
     "ablation.scales.rungs: a ladder needs at least 2 rungs"),
    ("    rungs:\n      a: {}\n      b: {model.d_model: 8}", "a: {}",
     "ablation.scales.rungs.a: rung 'a' overrides nothing"),
    ("    rungs:\n      a: {model.d_modle: 8}\n      b: {model.d_model: 8}", "a: {",
     "ablation.scales.rungs.a.model.d_modle: 'model.d_modle' is not a spec field; did you mean "
     "'model.d_model'?"),
    ("    rungs:\n      a: {model.d_model: 8, tokens: 100, train.max_steps: 3}\n      b: {model.d_model: 16}",
     "a: {", "ablation.scales.rungs.a.tokens: give a rung's tokens or its train.max_steps, not both"),
    ("    rungs:\n      a: {model.d_model: 8}\n      b: {model.d_model: 16}\n    target: 1000", "target:",
     "ablation.scales.target: target 1e+03 FLOPs is not above the largest rung (b,"),
    ("    rungs:\n      a: {model.norm: builtin}\n      b: {model.d_model: 8}", "a: {",
     "ablation.scales.rungs.a: rung 'a' sets model.norm, which variant norm=rms changes"),
    ("    rungs:\n      a: {model.d_model: 8}\n      b: {model.d_model: 8, model.d_ff: 32}", "b: {",
     "ablation.scales.rungs.b: rung 'b' gives the same cells as rung 'a'"),
    ("    rungs:\n      a: {model.d_model: 8, model.heads: 3}\n      b: {model.d_model: 8}", "a: {",
     "ablation.scales.rungs.a: rung 'a' gives an invalid spec: model.heads"),
]


@pytest.mark.parametrize(("scales", "at", "message"), BAD, ids=[m[16:56] for _, _, m in BAD])
def test_a_bad_ladder_is_one_located_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], scales: str,
                                          at: str, message: str) -> None:
    path = write(tmp_path, scales)
    lines = path.read_text().splitlines()
    line = next(i for i, text in enumerate(lines, start=1) if text.strip().startswith(at))
    with pytest.raises(SpecError) as err:
        plan_study(str(path))
    shown = [f"{p.where}: {p.path}: {p.message}" for p in err.value.problems]
    assert shown == [f"{path}:{line}: " + message] or (len(shown) == 1 and shown[0].startswith(
        f"{path}:{line}: {message}")), shown
    before = sorted(os.listdir(tmp_path))
    assert cli_main(["ablate", str(path), "--dry-run"]) == 2  # the command: exit 2, one line, no traceback
    said = capsys.readouterr().err.strip().splitlines()
    assert len(said) == 1 and said[0].startswith(f"error: {path}:{line}: ") and message[:60] in said[0], said
    assert sorted(os.listdir(tmp_path)) == before  # nothing written


def test_a_ladder_with_tune_or_confirm_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, RUNGS + "\n  confirm: {overrides: {train.max_steps: 8}, seeds: 2}")
    with pytest.raises(SpecError, match="a ladder .scales. and confirm do not combine yet"):
        plan_study(str(path))


def test_cells_are_variants_by_rungs_by_seeds_paired_within_a_rung(tmp_path: Path) -> None:
    plan = plan_study(str(write(tmp_path)))
    assert [r.name for r in plan.rungs] == ["small", "mid", "large"]  # in order of planned compute
    assert len(plan.cells) == 2 * 3 * 2
    keys = {c.key for c in plan.cells}
    assert len(keys) == len(plan.cells)  # every cell its own run
    subs = rung_rounds.rung_plans(plan)
    assert [s.rung for s in subs] == ["small", "mid", "large"]
    for sub in subs:
        pairs = {(v, s) for v in ("baseline", "norm=rms") for s in (0, 1)}
        assert {(c.label, c.seed) for c in sub.cells} == pairs
        base = {c.seed: c for c in sub.cells if c.label == "baseline"}
        for c in sub.cells:  # within a rung, a variant differs from its seed's baseline in its choice alone
            assert [k for k, _, _ in c.diff] == ([] if c.label == "baseline" else ["model.norm"])
            assert c.spec.model.d_model == base[c.seed].spec.model.d_model
            assert c.attrs()["rung"] == sub.rung
    # steps: a rung's own train.max_steps, or its tokens over the batch's tokens
    steps = {s.rung: s.cells[0].spec.train.max_steps for s in subs}
    assert steps == {"small": 4, "mid": 6, "large": 2048 // 256}
    rebuilt = plan.rebuild(subs[2].cells[1].attrs())
    assert rebuilt.key == subs[2].cells[1].key and rebuilt.rung == "large"


def test_tokens_per_param_sets_each_rungs_steps_from_its_baselines_parameters(tmp_path: Path) -> None:
    scales = "    rungs:\n      a: {model.d_model: 8, model.d_ff: 16}\n      b: {model.d_model: 16}\n" \
             "    tokens_per_param: 3"
    plan = plan_study(str(write(tmp_path, scales)))
    for rung, sub in zip(plan.rungs, rung_rounds.rung_plans(plan), strict=True):
        n = model_shape(sub.cells[0].spec).non_embedding
        assert rung.compute.params == n and rung.tokens_from == "tokens_per_param"
        assert sub.cells[0].spec.train.max_steps == round(3 * n / 256)
        assert all(c.spec.train.max_steps == sub.cells[0].spec.train.max_steps for c in sub.cells)


def test_adaptive_seeds_walk_each_rung_apart(tmp_path: Path) -> None:
    plan = plan_study(str(write(tmp_path, seeds="  seeds: {min: 2, max: 3}\n  min_effect: 0.05")))
    assert plan.design is not None
    first = rung_rounds.needed(plan, {})
    assert first == [c.key for c in plan.cells if c.seed < 2]  # round one: min seeds at every rung
    records = {}
    for sub in rung_rounds.rung_plans(plan):
        for c in sub.cells:
            if c.seed < 2:
                # small: the same value in both seeds (identical, decided); elsewhere noisy (open)
                noisy = 0.0 if sub.rung == "small" else (0.3 if c.label == "baseline" else 0.1) * (1 + c.seed)
                records[c.key] = CellRecord("finished", 1.0 + noisy)
    more = set(rung_rounds.needed(plan, records)) - set(records)
    assert {c.rung for c in plan.cells if c.key in more} == {"mid", "large"}
    assert all(c.seed == 2 for c in plan.cells if c.key in more)
    text = rung_rounds.progress_text(plan, records)
    assert "rung small:" in text and "identical" in text and "rung large:" in text


@pytest.mark.soak  # 12 cells and a report, in the soak tier: the default suite stays under 10 minutes
def test_a_small_translation_ladder_on_the_synthetic_task_end_to_end(workdir: Path) -> None:
    """Train a 3-rung ladder of a 2-variant translation study, 2 seeds (12 cells), and report it: every cell
    records its rung and compute, the report opens with the ladder figure, runs.csv and report.json carry
    the ladder."""
    scales = ("    rungs:\n      a: {model.d_model: 8, model.d_ff: 16}\n      b: {model.d_model: 16}\n"
              "      c: {model.d_model: 24, model.d_ff: 48}\n    tokens_per_param: 2\n    target: 1e10\n"
              "    margin: 0.2")
    path = write(workdir, scales, name="e2e")
    assert main_ablate(str(path)) == 0
    client = MlflowClient()
    experiment = client.get_experiment_by_name("lad")
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id], "tags.`ablate.kind` = 'cell'")
    assert len(runs) == 12 and {r.data.tags["ablate.rung"] for r in runs} == {"a", "b", "c"}
    for r in runs:
        m = r.data.metrics
        assert m["final/train/flops"] > 0 and m["model/params_non_embedding"] > 0
        assert m["final/train/tokens"] > 0
    assert main_report("lad", str(workdir / "report")) == 0
    text = (workdir / "report" / "report.md").read_text()
    assert text[text.index("!["):].startswith("![`val/loss` against training compute over 3 rungs")
    assert "| comparison | transfer verdict |" in text and "## Across scales" in text
    data = json.loads((workdir / "report" / "report.json").read_text())["ladder"]
    assert [r["name"] for r in data["rungs"]] == ["a", "b", "c"]
    assert data["fits"]["baseline"]["all"]["form"] == "log_linear"  # 3 rungs: log-linear
    assert set(data["comparisons"]) == {"norm=rms"}
    with (workdir / "report" / "runs.csv").open() as fh:
        assert {row["rung"] for row in csv.DictReader(fh)} == {"a", "b", "c"}


def test_a_ladder_spec_that_changes_its_preregistered_design_is_refused(
        bare_workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The rungs (their overrides, the target, the margin) are part of the design recorded before the first
    cell, and every rung's comparisons are its family: changing a rung, adding one or removing one is one
    located refusal, exit 2, nothing queued."""
    path = write(bare_workdir, name="pre")
    plan = plan_study(str(path))
    store = Store(None)
    plan.bind(store)
    queue = CellQueue(store, plan.store_name, plan.direction)
    assert preregister.record_or_refuse(queue, plan, "plan") is True
    recorded = json.loads(queue.get(preregister.STORE_ATTR))
    rungs = recorded["scales"]["rungs"]
    assert recorded["family"] == 3 and [r["name"] for r in rungs] == ["small", "mid", "large"]
    assert rungs[2]["overrides"]["train.max_steps"] == 8  # the steps its tokens resolved to
    mid = "      mid: {model.d_model: 12, model.d_ff: 24, model.heads: 2, train.max_steps: 6}"
    for old, new in [("tokens: 2048", "tokens: 4096"),  # a rung's budget, a rung fewer, a margin
                     (mid, ""), ("    rungs:", "    margin: 0.1\n    rungs:")]:
        path.write_text(write(bare_workdir, name="pre").read_text().replace(old, new))
        assert cli_main(["ablate", str(path), "--dry-run"]) == 2
        said = capsys.readouterr().err.strip().splitlines()
        refusal = ("error: ablation.scales (a ladder's rungs, target and margin): study 'lad' was "
                   "pre-registered with scales")
        assert len(said) == 1 and said[0].startswith(refusal), said


def test_every_rungs_comparisons_are_one_family(tmp_path: Path) -> None:
    """Each comparison is made at every rung, and all of those verdicts share the study's alpha: the plan's
    family, each rung's sequential design and the pre-registered record all count comparisons x rungs."""
    plan = plan_study(str(write(tmp_path, seeds="  seeds: {min: 2, max: 3}\n  min_effect: 0.05")))
    assert plan.family == 1 * 3  # one comparison (norm=rms) at three rungs
    assert plan.design is not None and plan.design.family == 3
    assert plan.design.level == pytest.approx(0.05 / 3)
    assert {sub.design.family for sub in rung_rounds.rung_plans(plan) if sub.design} == {3}
    assert preregister.design_record(plan)["family"] == 3



def test_the_plan_says_plainly_when_its_seeds_can_decide_no_rung(tmp_path: Path) -> None:
    from ablate.study.sized_ladder import format_ladder_plan, ladder_plan, ladder_reach_line

    plan = plan_study(str(write(tmp_path, seeds="  seeds: [0, 1, 2]")))
    planned = ladder_plan(plan)
    assert planned is not None
    text = format_ladder_plan(planned)
    assert ("  cannot decide any rung: 3 seeds a rung: the exact sign-flip test's smallest p is 0.25, never "
            "below alpha 0.05, so every rung reads 'not testable' and no transfer verdict (grows, shrinks, "
            "reverses, holds) can be read from the rungs; the smallest design that could: 4 seeds a rung "
            "(the paired t-test)") in text.splitlines()
    # no rung's line claims an effect it could detect, and no transfer line claims power
    assert text.count("norm=rms: -, detects nothing (not testable)") == 3
    assert "transfer norm=rms" not in text
    # from 4 seeds a rung the paired t-test can decide: no such line
    assert ladder_reach_line(replace(planned.design, looks=(4,))) is None
