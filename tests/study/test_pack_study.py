"""A study's packs (ablate/study/pack_plan.py, pack_cells.py): ``--pack K`` bounds them and refuses a K
below 1 in one line; the dry run lists the packs and names the variants that train one a process and why;
a packed study trains every cell as its own MLflow run, recording its pack."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
from mlflow import MlflowClient

from ablate.cli import main as cli_main
from ablate.launch.cell_probe import CellParts
from ablate.launch.study_command import main_launch
from ablate.launch.wall_time import (
    _ladder_estimate,
    finished_cell_seconds,
    local_sharing,
    remaining_wall_time,
)
from ablate.run.pack_probe import fits
from ablate.study.designs import plan_study
from ablate.study.pack_plan import BOUND_ENV, PACK_ENV
from ablate.study.pilot import PACK_COLUMN, pilot_from_rows
from ablate.tracking import record
from tests.factories import TINY_STUDY_HEAD

pytestmark = pytest.mark.usefixtures("single_thread")
SPEC = TINY_STUDY_HEAD + """\
ablation:
  axes: {{{axes}}}
  metric: val/loss
  seeds: [0, 1, 2]
"""


def write(folder: Path, name: str, axes: str) -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(SPEC.format(name=name, axes=axes))
    return path


@pytest.mark.parametrize(("pack", "message"), [
    ("0", "--pack 0: a pack holds at least one cell"), ("-3", "--pack -3: a pack holds at least one cell"),
    ("two", "--pack: 'two' is not a number of cells")])
def test_a_pack_below_one_cell_is_one_line_and_nothing_written(bare_workdir: Path, pack: str, message: str,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    path = write(bare_workdir, "bad", "model.norm: [rms]")
    assert cli_main(["study", str(path), "--pack", pack]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
    assert not (bare_workdir / "mlflow.db").exists() and not (bare_workdir / "runs").exists()


def test_the_dry_run_lists_the_packs_and_what_trains_alone(bare_workdir: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    path = write(bare_workdir, "dry", "model.norm: [rms], model.attention: [qk_norm], model.dropout: [0.1], "
                 "model.attention_dropout: [0.1]")
    assert main_launch(str(path), dry_run=True, pack="2") == 0
    out = capsys.readouterr().out
    assert "packs: up to 2 cells of one shape a pack (--pack)" in out
    assert "  baseline: 3 cells: 2 packs of up to 2 (probe:" in out
    assert "  norm=rms: 3 cells: 2 packs of up to 2" in out
    assert ("  attention=qk_norm: 3 cells: one a process (attention=qk_norm: QKNormAttention "
            "(encoder.layers.0.self_attn): vmap cannot batch it") in out
    assert "  dropout=0.1: 3 cells: 2 packs of up to 2 (probe:" in out  # each cell draws its own masks
    assert ("  attention_dropout=0.1: 3 cells: one a process (model.attention_dropout 0.1: drawn inside the "
            "attention kernel over the pack's rows, so a packed cell would not draw its own masks)") in out
    assert not (bare_workdir / "mlflow.db").exists()
    assert main_launch(str(path), dry_run=True, pack="1") == 0
    assert "packs: off (--pack 1): every cell trains one a process" in capsys.readouterr().out


def test_a_packed_study_trains_each_cell_as_its_own_run(workdir: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """Seeds 0 and 1 of each variant train as a pack of 2, seed 2 alone (no waiting cell of its shape is
    left to pack it with); every cell is a finished child run with its own seed, and the packed ones say
    their pack."""
    monkeypatch.setenv(PACK_ENV, "{}")  # restored after: the study command hands its decisions over here
    path = write(workdir, "packed", "model.norm: [rms]")
    assert main_launch(str(path), pack="2") == 0
    assert capsys.readouterr().out.count("pack of 2: ") == 2
    client = MlflowClient()
    experiment = client.get_experiment_by_name("packed")
    assert experiment is not None
    runs = [r for r in client.search_runs([experiment.experiment_id])
            if r.data.tags.get(record.KIND) == "cell"]
    assert len(runs) == 6 and {r.info.status for r in runs} == {"FINISHED"}
    packs = {(r.data.tags[record.VARIANT], r.data.tags[record.SEED]):
             (r.data.tags.get(record.PACK_SIZE), r.data.tags.get(record.PACK_INDEX)) for r in runs}
    for variant in ("baseline", "norm=rms"):
        assert packs[(variant, "0")] == ("2", "0") and packs[(variant, "1")] == ("2", "1")
        assert packs[(variant, "2")] == (None, None)
    assert cli_main(["status", str(path)]) == 0
    assert capsys.readouterr().out.count("finished") >= 6


def test_each_round_of_adaptive_seeds_packs_its_new_cells_by_shape(workdir: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Adaptive seeds (``seeds: {min: 2, max: 3}``) over a learning rate (one shape, so both arms' cells pack
    together): the first round's seeds 0 and 1 train as packs of 2, and the second round's seed 2 of each
    arm, queued only after the first round ended, as one more pack of 2; no comparison can settle on 2 pairs,
    so the study runs to its maximum as it does unpacked, each cell once."""
    monkeypatch.setenv(PACK_ENV, "{}")
    path = workdir / "rounds.yaml"
    path.write_text(TINY_STUDY_HEAD.format(name="rounds") + """ablation:
  axes: {train.optimizer.lr: [0.003]}
  metric: val/loss
  seeds: {min: 2, max: 3}
""")
    assert main_launch(str(path), pack="2") == 0
    client = MlflowClient(os.environ["MLFLOW_TRACKING_URI"])
    experiment = client.get_experiment_by_name("rounds")
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id])
    cells = [r for r in runs if r.data.tags.get(record.KIND) == "cell"]
    seeds = Counter((r.data.tags[record.VARIANT], r.data.tags[record.SEED]) for r in cells)
    arms = ("baseline", "train.optimizer.lr=0.003")
    assert seeds == Counter({(v, s): 1 for v in arms for s in ("0", "1", "2")})
    assert {r.data.tags.get(record.PACK_SIZE) for r in cells} == {"2"}  # every round's cells packed
    third = sorted(r.info.start_time for r in cells if r.data.tags[record.SEED] == "2")
    first_two = max(r.info.end_time for r in cells if r.data.tags[record.SEED] != "2")
    assert third[0] >= first_two  # seed 2 came in a round of its own


def test_a_cell_that_fits_not_even_alone_is_one_line_and_nothing_trained(
        bare_workdir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Memory is planned from one cell's measured peak: K cells take K x that (20% margin), so a device
    with room for 2.5 cells packs 2, and one without room for one cell refuses the study before it starts."""
    assert fits(100.0, 1000.0, 8) == 8 and fits(100.0, 300.0, 8) == 2 and fits(100.0, 100.0, 8) == 0
    monkeypatch.setattr("ablate.study.pack_plan.device_memory_mb", lambda device: 0.0)
    path = write(bare_workdir, "full", "model.norm: [rms]")
    assert cli_main(["study", str(path), "--pack", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "does not fit the 0 MB free on cpu, packed or alone" in err[0]
    assert not (bare_workdir / "mlflow.db").exists() and not (bare_workdir / "runs").exists()


def test_the_wall_time_estimate_knows_the_packs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """From a probe of one cell (100 steps of 1 s, 20 s of the rest): 6 cells one worker take 6 x 120 s; where
    the norm=rms cells pack at a measured 4x, their training steps take a quarter: 3 x 75 s less (8.2 min)."""
    parts = CellParts(start_s=0.0, prepare_s=0.0, reprepare_s=0.0, build_s=20.0, step_s=1.0, eval_s=0.0,
                      final_s=0.0, checkpoint_s=0.0, best_s=0.0, tracking_s=0.0, steps=100, evals=0,
                      checkpoints=0)
    monkeypatch.setattr("ablate.launch.wall_time.probe", lambda spec, sharing: parts)
    plan = plan_study(str(write(tmp_path, "est", "model.norm: [rms]")))
    sharing = local_sharing(1, 0)
    alone = remaining_wall_time(plan, {}, sharing)
    assert alone.startswith("estimated wall time: 12 min for 6 cells") and "packed" not in alone
    packed = remaining_wall_time(plan, {}, sharing, lambda cell: 4.0 if cell.label == "norm=rms" else 1.0)
    assert packed.startswith(alone) and "; packed: 8.2 min (the packed cells' training steps" in packed


def test_the_slurm_dry_run_lists_the_packs_its_jobs_run(bare_workdir: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """`--slurm --dry-run --pack 2`: the jobs' packs by shape (each job's worker runs a pack, sized on its
    own node), and what trains one a process and why, checked here before anything is submitted."""
    monkeypatch.setenv(BOUND_ENV, "1")  # restored after: the submission hands --pack to its jobs here
    path = write(bare_workdir, "jobs", "model.norm: [rms], model.attention: [qk_norm]")
    journal = bare_workdir / "shared" / "study.journal"
    assert cli_main(["study", str(path), "--slurm", "--dry-run", "--storage", str(journal), "--jobs", "2",
                     "--pack", "2"]) == 0
    out = capsys.readouterr().out
    assert "packs: up to 2 cells of one shape a pack, each run by one worker of a job (--pack)" in out
    assert "  baseline: 3 cells: 2 packs of up to 2" in out
    assert "  norm=rms: 3 cells: 2 packs of up to 2" in out
    assert ("  attention=qk_norm: 3 cells: one a process (attention=qk_norm: QKNormAttention "
            "(encoder.layers.0.self_attn): vmap cannot batch it") in out
    assert sorted(p.name for p in bare_workdir.iterdir()) == ["jobs.yaml"]  # a dry run writes nothing


def test_finished_packed_cells_count_their_share_of_the_pack(monkeypatch: pytest.MonkeyPatch) -> None:
    """A study's finished cells give the estimate its cell time: a cell packed with 3 others ran beside them
    in one worker for its 400 s, so it counts 100 s; a cell alone its own 120 s."""
    start = pd.Timestamp("2026-01-01")
    children = pd.DataFrame({
        f"tags.{record.KIND}": ["cell"] * 5, f"tags.{record.STATUS}": ["finished"] * 5,
        f"tags.{record.PACK_SIZE}": ["4", "4", "4", None, "4"],
        "start_time": [start] * 5,
        "end_time": [start + pd.Timedelta(seconds=s) for s in (400, 400, 400, 120, 400)]})
    monkeypatch.setattr("ablate.launch.wall_time.find_study_runs", lambda study: (None, children))
    found = finished_cell_seconds("packed")
    assert found is not None and found.seconds == 100.0
    assert "median of 5 finished cells of study packed, 4 of them packed" in found.source


def test_a_pilots_packed_cells_count_their_share_of_the_pack() -> None:
    """The ladder plan's hours come from a pilot's cell times: a packed pilot cell's wall time is its pack's,
    so it counts its share (its time over the pack's size)."""
    rows = [{"variant": v, "seed": s, "status": "finished", "val/loss": 1.0 + 0.1 * s,
             record.WALL_TIME: 60.0, PACK_COLUMN: pack}
            for v in ("baseline", "norm=rms") for s, pack in ((0, "3"), (1, "3"), (2, ""))]
    pilot = pilot_from_rows("pilot", rows, "val/loss")
    assert pilot.cell_seconds("baseline") == pytest.approx((20.0 + 20.0 + 60.0) / 3)


def test_a_ladders_estimate_knows_the_packs(monkeypatch: pytest.MonkeyPatch) -> None:
    """A ladder's estimate scales the probed cell's training by each rung's FLOPs; a cell that packs at a
    probed 4x trains in a quarter of that (its evaluations and records as alone)."""
    parts = CellParts(start_s=0.0, prepare_s=0.0, reprepare_s=0.0, build_s=20.0, step_s=1.0, eval_s=0.0,
                      final_s=0.0, checkpoint_s=0.0, best_s=0.0, tracking_s=0.0, steps=100, evals=0,
                      checkpoints=0)
    monkeypatch.setattr("ablate.launch.wall_time.planned", lambda spec: SimpleNamespace(flops=1.0))
    rungs = [SimpleNamespace(name="small", compute=SimpleNamespace(flops=1.0)),
             SimpleNamespace(name="large", compute=SimpleNamespace(flops=2.0))]
    cells = [SimpleNamespace(rung=r.name, label="baseline", seed=s) for r in rungs for s in range(2)]
    plan = SimpleNamespace(baseline=None, rungs=rungs)
    alone = _ladder_estimate(plan, cells, parts, local_sharing(1, 0))  # type: ignore[arg-type]
    assert alone.startswith("estimated wall time: 11 min for 4 cells of 2 rungs")  # 2 x 120 + 2 x 220 s
    packed = _ladder_estimate(plan, cells, parts, local_sharing(1, 0),  # type: ignore[arg-type]
                              lambda cell: 4.0 if cell.rung == "large" else 1.0)
    assert packed.startswith("estimated wall time: 6.3 min for 4 cells of 2 rungs")  # 2 x 120 + 2 x 70 s
    assert "2 packed cells' training at their probe's speed-up" in packed


@pytest.mark.soak  # beside the unpacked two-process PostgreSQL study (tests/study/test_study.py)
@pytest.mark.slow
@pytest.mark.postgres
def test_two_processes_finish_a_packed_study_on_postgresql_each_cell_once(workdir: Path,
                                                                           postgres_url: str) -> None:
    """Two `ablate study --pack 2 --storage postgresql://...` (two machines) share one packed study: every
    cell trains once, by one process or the other, in a pack of 2 or alone, and both end 0."""
    name = f"pg-packs-{os.getpid()}-{int(time.time())}"
    path = write(workdir, name, "model.norm: [rms]")
    cmd = [sys.executable, "-m", "ablate", "study", str(path), "--storage", postgres_url, "--pack", "2"]
    logs = [workdir / f"worker{i}.log" for i in range(2)]
    procs = [subprocess.Popen(cmd, cwd=workdir, stdout=log.open("w"), stderr=subprocess.STDOUT)
             for log in logs]
    codes = [p.wait(timeout=600) for p in procs]
    assert codes == [0, 0], [log.read_text()[-3000:] for log in logs]
    client = MlflowClient(os.environ["MLFLOW_TRACKING_URI"])  # the workdir's store, which both used
    experiment = client.get_experiment_by_name(name)
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id])
    cells = [r for r in runs if r.data.tags.get(record.KIND) == "cell"]
    per_cell = Counter(r.data.tags[record.CELL] for r in cells)
    assert len(per_cell) == 6 and set(per_cell.values()) == {1}  # no cell trained twice
    assert {r.data.tags[record.STATUS] for r in cells} == {"finished"}
    assert any(r.data.tags.get(record.PACK_SIZE) == "2" for r in cells)


def test_auto_probes_a_shape_only_where_the_probe_costs_little_of_its_steps(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A probe of K cells costs about 8K + 1 cell-steps: on a study whose cells are too short to repay it,
    auto trains one cell a process unprobed (on 2 CPU cores a 16-cell study of 50-step cells lost 6% to its
    probe); past 2% of the shape's planned steps it probes, and packs where the probe shows it pays."""
    from ablate.run import pack_probe
    from ablate.study import pack_plan

    probed: list[int] = []

    def fake_probe(spec: object, cells: int) -> pack_probe.PackProbe:
        probed.append(cells)
        return pack_probe.PackProbe(cells, (), alone_s=2.0, packed_s=1.0, cell_peak_mb=1.0)

    monkeypatch.setattr(pack_plan, "probe_pack", fake_probe)
    cells = plan_study(str(write(tmp_path, "short", "model.norm: [rms]"))).cells  # 6 cells of 4 steps
    auto = pack_plan.PackBound(limit=8, auto=True)
    short = pack_plan.decide_packs(cells, auto)
    assert probed == [] and set(short.sizes.values()) == {1}
    assert any("too few steps to probe: a probe costs about 25 cell-steps, more than 2% of this shape's 12"
               in line for line in short.lines)
    # the same cells at 500 steps each: 25 cell-steps are under 2% of 1,500, so the probe decides
    long = [replace(c, spec=c.spec.model_copy(update={"train": c.spec.train.model_copy(
        update={"max_steps": 500})})) for c in cells]
    decided = pack_plan.decide_packs(long, auto)
    assert probed == [3, 3] and set(decided.sizes.values()) == {8}  # up to the bound, as memory allows
    # a bound the user set packs short cells too: its probe checks only what cannot pack, and memory
    assert set(pack_plan.decide_packs(cells, pack_plan.PackBound(limit=3, auto=False)).sizes.values()) == {3}
