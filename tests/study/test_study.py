"""Ablation studies: cell expansion, controlled cells, resumable and parallel runs on real stores.

Real Optuna stores (journal file, PostgreSQL), a real MLflow sqlite store in a temporary folder, tiny
synthetic specs (d_model 16, 1+1 layers, a few dozen steps).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch
from mlflow import MlflowClient

from ablate.cli import main as cli_main
from ablate.data.prepare import TokenBatcher, prepare_data
from ablate.launch.local_study import main_ablate
from ablate.launch.status import main_status
from ablate.spec.load import SpecError, load_spec
from ablate.study.designs import plan_study
from tests.factories import STUDY_CELL, write_tiny_spec


def write_spec(folder: Path, name: str, ablation: str, steps: int = 20, eval_every: int = 10,
               **model: Any) -> Path:
    changes = {"name": name, "train.max_steps": steps, "train.eval_every": eval_every,
               **{f"model.{k}": v for k, v in model.items()}}
    return write_tiny_spec(folder, STUDY_CELL, changes, extra=ablation, filename=f"{name}.yaml")


def study_runs(name: str) -> tuple[list, list]:
    """(parent runs, child runs) of the study's MLflow experiment."""
    client = MlflowClient(os.environ["MLFLOW_TRACKING_URI"])
    exp = client.get_experiment_by_name(name)
    assert exp is not None, f"no MLflow experiment {name}"
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    return parents, children


def assert_each_cell_once(path: Path, statuses: dict[str, str] | None = None) -> list:
    plan = plan_study(str(path))
    parents, children = study_runs(plan.name)
    assert len(parents) == 1 and parents[0].data.tags["ablate.kind"] == "ablation"
    per_cell = Counter(r.data.tags["ablate.cell"] for r in children)
    assert per_cell == Counter({c.key: 1 for c in plan.cells})  # every cell exactly one run
    for r in children:
        assert r.data.tags["mlflow.parentRunId"] == parents[0].info.run_id
        cell = next(c for c in plan.cells if c.key == r.data.tags["ablate.cell"])
        assert r.data.tags["ablate.variant"] == cell.label
        assert r.data.tags["ablate.seed"] == str(cell.seed)
        assert r.data.tags["ablate.spec_hash"] == cell.spec.spec_hash
        expected = (statuses or {}).get(cell.label, "finished")
        assert r.data.tags["ablate.status"] == expected, (cell.label, r.data.tags["ablate.status"])
    return children


# ---------------------------------------------------------------- expansion (nothing trains)
def test_one_at_a_time_counts_labels_and_diffs(tmp_path: Path) -> None:
    path = write_spec(tmp_path, "oat", """
ablation:
  design: one_at_a_time
  axes:
    model.residual: [pre_norm, post_norm]
    model.positions: [sinusoidal, learned]
    model.mask: ["-inf", -1e9, -1e6]
    train.schedule.warmup_steps: [10, 0]
  repeats: 2
""")
    plan = plan_study(str(path), ["seed=7"])
    # 1 + sum(len(values) - 1): a value equal to the baseline's is the baseline itself.
    assert plan.variants == ["baseline", "residual=post_norm", "positions=learned", "mask=-1e9", "mask=-1e6",
                             "train.schedule.warmup_steps=0"]
    assert plan.seeds == [7, 8] and len(plan.cells) == 12
    assert len({c.key for c in plan.cells}) == 12
    for cell in plan.cells:
        assert cell.spec.seed == cell.seed and cell.key == f"{cell.spec.spec_hash}-s{cell.seed}"
        assert cell.spec.ablation is None and cell.spec.search is None
    by = {(c.label, c.seed): c for c in plan.cells}
    assert by[("baseline", 7)].diff == []
    assert by[("residual=post_norm", 7)].diff == [("model.residual", "pre_norm", "post_norm")]
    assert by[("mask=-1e9", 8)].diff == [("model.mask", "-inf", "-1e9")]
    assert by[("train.schedule.warmup_steps=0", 7)].spec.train.schedule.warmup_steps == 0
    assert by[("baseline", 7)].spec.spec_hash != by[("baseline", 8)].spec.spec_hash  # the seed is identity
    assert plan.metric == "val/exact_match" and plan.direction == "maximize"


def test_full_factorial_and_explicit_variants(tmp_path: Path) -> None:
    factorial = plan_study(str(write_spec(tmp_path, "ff", """
ablation:
  design: full_factorial
  axes:
    model.residual: [pre_norm, post_norm]
    train.schedule.warmup_steps: [10, 0]
""")))
    assert factorial.variants == ["baseline", "train.schedule.warmup_steps=0", "residual=post_norm",
                                  "residual=post_norm, train.schedule.warmup_steps=0"]
    last = factorial.cells[-1]
    assert last.diff == [("model.residual", "pre_norm", "post_norm"), ("train.schedule.warmup_steps", 10, 0)]

    variants = plan_study(str(write_spec(tmp_path, "var", """
ablation:
  design: variants
  variants:
    - {label: tutorial-E layer norm, model: {norm: custom, norm_affine: scalar}}
    - {train.optimizer.lr: 0.01}
    - {model.residual: pre_norm}
  seeds: [3]
""")))
    # The third variant equals the baseline, which every design includes first.
    assert variants.variants == ["baseline", "tutorial-E layer norm", "train.optimizer.lr=0.01"]
    assert variants.cells[1].diff == [("model.norm", "builtin", "custom"),
                                      ("model.norm_affine", "per_feature", "scalar")]
    assert {c.seed for c in variants.cells} == {3}


def test_named_levels_cross_a_gated_ffn_with_a_gelu_mlp(tmp_path: Path) -> None:
    factorial = plan_study(str(write_spec(tmp_path, "levels", """
ablation:
  design: full_factorial
  axes:
    ffn:
      gelu_mlp: {model.ffn: linear, model.activation: gelu}
      swiglu: {model.ffn: swiglu}
    model.norm: [builtin, rms]
""", ffn="linear", activation="gelu")))
    assert factorial.variants == ["baseline", "norm=rms", "ffn=swiglu", "ffn=swiglu, norm=rms"]
    cells = {c.label: c for c in factorial.cells}
    swiglu = cells["ffn=swiglu, norm=rms"]
    # the gated FFN fixes its own activation: the field goes back to its default, and is no difference
    model = swiglu.spec.model
    assert (model.ffn, model.activation, model.norm) == ("swiglu", "relu", "rms")
    assert [k for k, _, _ in swiglu.diff] == ["model.ffn", "model.norm"]  # its GLU options at their defaults
    assert cells["norm=rms"].spec.model.activation == "gelu"
    # a cell rebuilt from what the store keeps (its overrides) is the same cell
    assert factorial.rebuild(swiglu.attrs()).key == swiglu.key
    # the same crossing as two lists of field values cannot be built: the error says how it can
    with pytest.raises(SpecError) as err:
        plan_study(str(write_spec(tmp_path, "lists", """
ablation:
  design: full_factorial
  axes:
    model.ffn: [linear, swiglu]
    model.activation: [relu, gelu]
""")))
    assert "activation applies to ffn: conv1d, linear only" in str(err.value)
    assert "one axis of named levels, e.g. ffn: {swiglu: {model.ffn: swiglu}" in str(err.value)
    # a GLU's own width goes with it where a level swaps in a plain MLP
    back = plan_study(str(write_spec(tmp_path, "back", """
ablation:
  axes:
    ffn: {gelu_mlp: {model.ffn: linear, model.activation: gelu}}
""", ffn="swiglu", glu_multiple_of=16)))
    mlp = back.cells[-1]
    assert (mlp.label, mlp.spec.model.ffn, mlp.spec.model.activation) == ("ffn=gelu_mlp", "linear", "gelu")
    # the GELU is the new FFN's, not a change of a setting the baseline's gated FFN took; of the GLU's own
    # options, the one the spec set (glu_multiple_of 16) goes with it, the one at its default is no change
    assert [k for k, _, _ in mlp.diff] == ["model.ffn", "model.glu_multiple_of"]
    # and the other way round: SwiGLU's own options at their defaults are SwiGLU's, not changes anyone made
    forth = plan_study(str(write_spec(tmp_path, "forth", """
ablation:
  axes:
    model.ffn: [swiglu]
""")))
    assert [k for k, _, _ in forth.cells[-1].diff] == ["model.ffn"]


def test_named_levels_are_checked_where_the_spec_is_loaded(tmp_path: Path) -> None:
    path = write_spec(tmp_path, "badlevels", """
ablation:
  design: full_factorial
  axes:
    model.ffn.x: {a: {model.ffn: swiglu}}
    ffn:
      swiglu: {model.ffn: swiglu, model.actvation: gelu}
      empty: {}
""")
    with pytest.raises(SpecError) as err:
        load_spec(path)
    lines = [str(p) for p in err.value.problems]
    assert any("ablation.axes.model.ffn.x: an axis of named levels is named by a word" in x for x in lines)
    assert any("ablation.axes.ffn.empty: level 'empty' sets nothing" in line for line in lines)
    assert any("ablation.axes.ffn.swiglu.model.actvation:" in line and "activation" in line for line in lines)
    # a level's own conflict is reported at the level, as it is written
    path = write_spec(tmp_path, "conflict", """
ablation:
  axes:
    ffn: {geglu: {model.ffn: geglu, model.activation: gelu}}
""")
    with pytest.raises(SpecError) as err:
        load_spec(path)
    text = str(err.value)
    assert re.search(r":\d+: ablation.axes.ffn.geglu: model.ffn: 'geglu', model.activation: 'gelu' gives an "
                     r"invalid spec: model.activation: activation applies to ffn", text), text


def test_invalid_variant_is_a_spec_error_naming_the_axis(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                         ) -> None:
    path = write_spec(tmp_path, "bad", """
ablation:
  design: variants
  variants:
    - {model.d_model: 15}
""")
    with pytest.raises(SpecError) as err:
        plan_study(str(path))
    text = str(err.value)
    assert text.startswith(f"{path}:")
    assert "ablation.variants.0: model.d_model=15 gives an invalid spec" in text
    assert "not divisible by heads 2" in text
    assert cli_main(["ablate", str(path), "--dry-run"]) == 2
    assert "error:" in capsys.readouterr().err


def test_dry_run_prints_cells_and_diffs_and_writes_nothing(bare_workdir: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    workdir = bare_workdir
    path = write_spec(workdir, "dry", """
ablation:
  axes: {model.residual: [pre_norm, post_norm], model.ffn: [linear, conv1d], model.positions: [rope]}
  seeds: [0, 1]
""")
    assert main_ablate(str(path), dry_run=True) == 0
    out = capsys.readouterr().out
    assert "4 variants x 2 seeds = 8 cells" in out
    assert "model.residual: pre_norm -> post_norm" in out and "model.ffn: linear -> conv1d" in out
    # rope's own option at its default is rope's, not a change: the baseline has none, and it is not listed
    assert "model.positions: sinusoidal -> rope" in out and "rope_base" not in out
    assert sorted(os.listdir(workdir)) == ["dry.yaml"]  # no MLflow db, no Optuna store, no run folders


@pytest.mark.slow
def test_cells_of_one_seed_are_controlled(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the trainer actually gets, cell by cell through `ablate study`: within a seed every variant
    trains on the same batches in the same order at every step (past an epoch boundary) and starts from
    identical values in every parameter it shares with the baseline; another seed differs in both."""
    import ablate.run.runner

    seen: dict[tuple[str, int], tuple[dict[str, torch.Tensor], list[tuple[torch.Tensor, ...]]]] = {}
    build = ablate.run.runner.build_any

    def recording_build(model_spec: Any, *args: Any, seed: int, **kwargs: Any) -> torch.nn.Module:
        model = build(model_spec, *args, seed=seed, **kwargs)
        weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
        batches: list[tuple[torch.Tensor, ...]] = []

        def record(module: torch.nn.Module, inputs: tuple[torch.Tensor, ...]) -> None:
            if module.training:  # training steps only, not the evaluations
                batches.append(tuple(x.detach().clone() for x in inputs))

        model.register_forward_pre_hook(record)
        seen[(model_spec.model_dump_json(), seed)] = (weights, batches)
        return model

    monkeypatch.setattr(ablate.run.runner, "build_any", recording_build)
    path = write_spec(workdir, "ctl", """
ablation:
  axes: {model.residual: [pre_norm, post_norm], model.positions: [sinusoidal, learned]}
  seeds: [0, 1]
""", steps=12, eval_every=12)
    assert main_ablate(str(path), ["tracking.enabled=false"]) == 0
    plan = plan_study(str(path), ["tracking.enabled=false"])
    runs = {(c.label, c.seed): seen[(c.spec.model.model_dump_json(), c.seed)] for c in plan.cells}
    assert len(seen) == len(runs) == 6  # every cell trained once, in this process

    base_w, base_batches = runs[("baseline", 0)]
    assert len(base_batches) == 12  # one batch a step (no accumulation)
    assert len({b[0].shape for b in base_batches}) > 1  # varied buckets: the order is really compared
    spec = plan.cells[0].spec
    epoch = len(TokenBatcher(prepare_data(spec).splits["train"], spec.data.batch_tokens, spec.seed,
                             shuffle=True).epoch_batches(0))
    assert epoch < 12  # the steps cross an epoch boundary (a new shuffle)
    for label in ("residual=post_norm", "positions=learned"):
        weights, batches = runs[(label, 0)]
        assert len(batches) == len(base_batches)
        for step, (ours, theirs) in enumerate(zip(base_batches, batches, strict=True)):
            assert all(torch.equal(a, b) for a, b in zip(ours, theirs, strict=True)), (label, step)
        shared = [k for k in base_w if k in weights and base_w[k].shape == weights[k].shape]
        assert len(shared) >= 0.8 * len(base_w)
        assert all(torch.equal(base_w[k], weights[k]) for k in shared), label
    assert runs[("positions=learned", 0)][0].keys() - base_w.keys()  # its learned table: not shared
    seed1_w, seed1_batches = runs[("baseline", 1)]
    assert not all(torch.equal(a[0], b[0]) for a, b in zip(base_batches, seed1_batches, strict=True))
    assert not all(torch.equal(base_w[k], seed1_w[k]) for k in base_w if base_w[k].numel() > 1)


def test_experiment_ablations_expand() -> None:
    root = Path(__file__).resolve().parents[2] / "experiments" / "ablations"
    plans = {p.name: plan_study(str(p)) for p in sorted(root.glob("*.yaml"))}
    assert {k: len(v.cells) for k, v in plans.items()} == {
        "modern-axes.yaml": 14, "quick-axes.yaml": 12, "tutorial-axes.yaml": 18, "warmup-vs-norm.yaml": 8,
        # Multi30k studies with a seed range: every cell up to the maximum (adaptive rounds run fewer)
        "modern-axes-multi30k.yaml": 56, "tutorial-axes-multi30k.yaml": 48,
        "warmup-vs-norm-multi30k.yaml": 24, "presets-multi30k.yaml": 48,
        # the decoder-only LM cell: five position schemes x four seeds
        "positions-extrapolation.yaml": 20,
        # the same five schemes on long documents (Python docs pages), four seeds
        "positions-extrapolation-docs.yaml": 20,
        # sinusoidal's level at L traced: positions x embeddings x width, 2 x 2 x 2, three seeds
        "positions-level-trace-docs.yaml": 24,
        # the long-document positions claims again under a plan: 4 schemes x 34 seeds at most
        "positions-extrapolation-sized-docs.yaml": 136,
        # a fixed list of 8 seeds, two variants: the noise with and without weight averaging
        "averaging-noise-multi30k.yaml": 16,
        # seeds.max: auto chose 18 from the pilot's cell times and a 6.2-hour budget: 3 variants x 18
        "sized-axes-multi30k.yaml": 54,
        # a ladder: 4 variants x 4 rungs x 6 seeds, and its pilot ladder on 2 seeds of its own
        "ladder-kdocs.yaml": 96, "ladder-kdocs-pilot.yaml": 32,
        # a margin claim: seeds.max: auto chose 15 from a 30-cell budget, 2 variants x 15
        "rope-margin-multi30k.yaml": 30,
        # the recipe studies on the Python-docs LM cell: kv_heads 1 and 2 against MHA, 24 seeds at most
        "gqa-docs.yaml": 72,
        # Muon against AdamW: its 3-seed pilot, then 15 seeds at most from the pilot's plan
        "muon-pilot-docs.yaml": 6, "muon-vs-adamw-docs.yaml": 30,
        # muP against standard: a learning-rate grid at each width and parametrisation, 3 seeds
        "mup-transfer-docs.yaml": 90,
        # the same with the grid two steps wider (2e-3 to 1.28e-1), on fresh seeds: 35 settings x 3
        "mup-transfer-wide-docs.yaml": 105,
        # WSD against cosine, fixed rates and each tuned: 37 seeds at most
        "wsd-vs-cosine-docs.yaml": 74, "wsd-vs-cosine-tuned-docs.yaml": 74,
        # the fair ladder: 3 variants x 6 rungs x 3 seeds at each variant's best per rung (its 54 tuning
        # cells come first), and its rerun on 4 seeds; Muon's speedup: 2 variants x 6 sizes x 3 data
        # budgets x 4 seeds (36 tuning)
        "ladder-fair-kdocs.yaml": 54, "ladder-fair4-kdocs.yaml": 72, "muon-speedup-kdocs.yaml": 144,
        # SwiGLU vs a GELU MLP (named levels) x RMSNorm vs LayerNorm: 4 variants x 8 seeds at most
        "ffn-norm-factorial-docs.yaml": 32}
    assert plans["modern-axes.yaml"].variants == [
        "baseline", "norm=rms", "positions=rope", "positions=alibi", "ffn=swiglu", "embeddings=tied",
        "attention=qk_norm"]
    axes = ["baseline", "residual=post_norm", "positions=learned", "ffn=conv1d", "norm=custom", "mask=-1e9"]
    assert plans["quick-axes.yaml"].variants == axes and plans["tutorial-axes.yaml"].variants == axes
    assert plans["tutorial-axes.yaml"].seeds == [0, 1, 2] and plans["tutorial-axes.yaml"].metric == "val/bleu"
    assert plans["warmup-vs-norm.yaml"].variants[-1] == "residual=post_norm, train.schedule.warmup_steps=0"
    assert plans["ffn-norm-factorial-docs.yaml"].variants == ["baseline", "norm=rms", "ffn=swiglu",
                                                              "ffn=swiglu, norm=rms"]
    assert plans["presets-multi30k.yaml"].variants == [  # the five tutorial designs against the cell
        "baseline", "a-blog-2025", "b-github-readme", "c-lightning-2024", "d-multi30k-2019",
        "e-notebook-2024"]


# ---------------------------------------------------------------- running
@pytest.mark.slow
def test_killed_study_resumes_without_rerunning_finished_cells(workdir: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    path = write_spec(workdir, "kill", """
ablation:
  axes: {model.residual: [pre_norm, post_norm], model.ffn: [linear, conv1d]}
""", steps=80, eval_every=20)
    plan = plan_study(str(path))
    dirs = [workdir / "runs" / "kill" / c.key for c in plan.cells]
    log = open(workdir / "first.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "ablate", "ablate", str(path)], cwd=workdir,
                            stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        if (dirs[0] / "summary.json").exists() and (dirs[1] / "last.pt").exists():
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)  # no chance to clean up: the store must cope
    proc.wait()
    assert (dirs[0] / "summary.json").exists(), (workdir / "first.log").read_text()[-3000:]
    assert (dirs[1] / "last.pt").exists() and not (dirs[1] / "summary.json").exists()
    finished_at = (dirs[0] / "summary.json").stat().st_mtime_ns

    assert main_status(str(path)) == 0
    grid = capsys.readouterr().out
    assert "1 finished" in grid and "1 interrupted" in grid and "1 pending" in grid

    assert main_ablate(str(path)) == 0
    out = capsys.readouterr().out
    assert (dirs[0] / "summary.json").stat().st_mtime_ns == finished_at  # not retrained
    lines = {c.key: next(x for x in out.splitlines() if x.startswith(f"cell {c.label} seed {c.seed}: "))
             for c in plan.cells[1:]}
    resumed_line, fresh_line = lines[plan.cells[1].key], lines[plan.cells[2].key]
    assert re.search(r"\(\d+s from step \d+; \d+s of training over all its segments\)$", resumed_line)
    assert re.search(r"\(\d+s\)$", fresh_line)
    children = assert_each_cell_once(path)
    resumed = next(r for r in children if r.data.tags["ablate.cell"] == plan.cells[1].key)
    client = MlflowClient(os.environ["MLFLOW_TRACKING_URI"])
    history = client.get_metric_history(resumed.info.run_id, "val/loss")
    steps = sorted(m.step for m in history)  # one run, resumed: every evaluation step exactly once
    assert steps == sorted(set(steps)) and {20, 40, 60, 80} <= set(steps)
    parents, _ = study_runs(plan.name)
    assert parents[0].info.status == "FINISHED"


@pytest.mark.soak
@pytest.mark.slow
def test_two_local_workers_finish_the_grid_once_with_a_diverging_cell(
        workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_spec(workdir, "par", """
ablation:
  axes: {model.residual: [pre_norm, post_norm], train.optimizer.lr: [0.001, 100.0]}
  seeds: [0, 1]
""")
    assert main_ablate(str(path), workers=2) == 0
    children = assert_each_cell_once(path, {"train.optimizer.lr=100": "diverged"})
    assert len(children) == 6
    capsys.readouterr()
    assert main_status(str(path)) == 0
    grid = capsys.readouterr().out
    assert "4 finished, 2 diverged" in grid
    # Rerunning finds nothing to do: diverged cells are results, not failures.
    assert main_ablate(str(path), workers=2) == 0
    assert "0 cells queued" in capsys.readouterr().out
    assert len(study_runs("par")[1]) == 6


@pytest.mark.slow
def test_failed_cell_reruns_only_with_retry_failed(workdir: Path, crashing_ffn: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    import optuna

    from ablate.study.optuna_store import Store

    path = write_spec(workdir, "fail", f"""
ablation:
  axes: {{model.ffn: [linear, {crashing_ffn}]}}
""", steps=10, eval_every=5)
    plan = plan_study(str(path))
    crashed_key = plan.cells[1].key

    def attempts() -> int:
        study = optuna.load_study(study_name=plan.bind(Store()), storage=Store().storage)
        return sum(t.user_attrs.get("ablate.cell") == crashed_key for t in study.get_trials())

    assert main_ablate(str(path)) == 1  # the study completes; the exit code says a cell failed
    assert "1 finished, 1 failed" in capsys.readouterr().out
    runs = [r for r in study_runs("fail")[1] if r.data.tags["ablate.cell"] == crashed_key]
    assert len(runs) == 1 and runs[0].data.tags["ablate.status"] == "failed"
    assert attempts() == 1
    assert main_status(str(path)) == 0  # the crashed cell's row names its run (known since it opened)
    row = next(line for line in capsys.readouterr().out.splitlines() if f"ffn={crashing_ffn}" in line)
    assert "failed" in row and row.endswith(runs[0].info.run_id)
    assert main_ablate(str(path)) == 1
    assert attempts() == 1  # skipped without --retry-failed
    assert main_ablate(str(path), retry_failed=True) == 1
    assert attempts() == 2  # tried again (resuming its checkpoint and MLflow run), failed again
    assert_each_cell_once(path, {f"ffn={crashing_ffn}": "failed"})


class FlakyFFN(torch.nn.Module):
    """A linear FFN that raises while ``broken`` (a cell that fails, then works when run again)."""

    broken = True

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.w1 = torch.nn.Linear(d_model, d_ff)
        self.w2 = torch.nn.Linear(d_ff, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if FlakyFFN.broken:
            raise RuntimeError("boom: a flaky component")
        return self.w2(torch.relu(self.w1(x)))


@pytest.mark.slow
def test_a_failed_segment_stays_visible_in_mlflow_and_status_once_retried(
        workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A cell fails, then finishes under --retry-failed in the same MLflow run: the run used to end FINISHED
    with no trace of its failed segment, which only its Optuna trial kept."""
    import registry

    registry.REGISTRY.add("ffn", "flaky", FlakyFFN)
    FlakyFFN.broken = True
    try:
        path = write_spec(workdir, "flaky", "\nablation:\n  axes: {model.ffn: [linear, flaky]}\n",
                          steps=10, eval_every=5)
        assert main_ablate(str(path)) == 1
        FlakyFFN.broken = False
        assert main_ablate(str(path), retry_failed=True) == 0
        runs = {r.data.tags["ablate.variant"]: r for r in study_runs("flaky")[1]}
        run = runs["ffn=flaky"]
        assert run.info.status == "FINISHED" and run.data.tags["ablate.status"] == "finished"
        segments = json.loads(run.data.tags["ablate.failed_segments"])
        assert segments == ["RuntimeError: boom: a flaky component"]
        assert "ablate.failed_segments" not in runs["baseline"].data.tags
        capsys.readouterr()
        assert main_status(str(path)) == 0
        out = capsys.readouterr().out
        assert ("earlier failed attempts:\n  ffn=flaky seed 0: failed 1x before this attempt (last: "
                "RuntimeError: boom: a flaky component)") in out
    finally:
        registry.REGISTRY._entries["ffn"].pop("flaky", None)


@pytest.mark.soak
@pytest.mark.slow
@pytest.mark.postgres
def test_two_processes_share_a_postgres_store(workdir: Path, postgres_url: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """Two `ablate study --storage postgresql://...` (two machines) split the cells: each runs once."""
    name = f"pg-{os.getpid()}-{int(time.time())}"
    path = write_spec(workdir, name, """
ablation:
  axes: {model.residual: [pre_norm, post_norm], model.ffn: [linear, conv1d]}
  seeds: [0, 1]
""", steps=6, eval_every=3)  # the cells only need to exist: what is tested is who runs them
    cmd = [sys.executable, "-m", "ablate", "ablate", str(path), "--storage", postgres_url]
    logs = [open(workdir / f"worker{i}.log", "w") for i in range(2)]
    procs = [subprocess.Popen(cmd, cwd=workdir, stdout=log, stderr=subprocess.STDOUT) for log in logs]
    codes = [p.wait(timeout=600) for p in procs]
    assert codes == [0, 0], [(workdir / f"worker{i}.log").read_text()[-3000:] for i in range(2)]
    assert_each_cell_once(path)
    started = [(workdir / f"worker{i}.log").read_text().count(": started") for i in range(2)]
    assert sum(started) == 6, started  # no cell was started twice
    assert main_status(str(path), storage=postgres_url) == 0
    assert "6 finished" in capsys.readouterr().out
