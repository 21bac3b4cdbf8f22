"""`ablate study --slurm`: jobs through submitit that run the study's worker loop against shared stores.

The default suite checks what needs no SLURM: the stores a cluster needs, the sbatch parameters the dry run
prints, and one study run by a job through submitit's local executor (the same `StudyJob` and `submit`).
The soak tier runs a real one-node SLURM (tests/slurm_cluster.py, skipped with the reason where it cannot
start): 2 jobs give the cells and metrics of ``--workers 2``; a job signalled like a preemption requeues
and finishes its cell in the same MLflow run; a job cancelled outright loses no finished cell.
"""

from __future__ import annotations

import functools
import math
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from mlflow import MlflowClient

from ablate.cli import main as cli_main
from ablate.launch.resume import Launched
from ablate.launch.slurm_job import StudyJob
from ablate.launch.slurm_queue import ended_state, job_result, job_state, record_jobs, recorded_jobs
from ablate.launch.slurm_submit import JobShape, executor_parameters, log_folder, submit, time_minutes
from ablate.study.cell_queue import CellQueue
from ablate.study.designs import plan_study
from ablate.study.optuna_store import Store
from tests.factories import STUDY_CELL, write_tiny_spec
from tests.stores import mlflow_store
from tests.study.test_study import assert_each_cell_once, study_runs

REPO = Path(__file__).resolve().parents[2]
ENDED = ("done", "cancelled", "failed", "timeout", "gone", "node_fail", "out_of_memory")


def write_study(folder: Path, name: str, axes: str, seeds: str, steps: int = 20) -> Path:
    changes = {"name": name, "train.max_steps": steps, "train.eval_every": max(10, steps // 2)}
    return write_tiny_spec(folder, STUDY_CELL, changes, filename=f"{name}.yaml",
                           extra=f"\nablation:\n  axes: {axes}\n  seeds: {seeds}\n")


# ---------------------------------------------------------------- no SLURM needed
def test_slurm_needs_a_store_every_job_reaches(bare_workdir: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    path = write_study(bare_workdir, "nostore", "{model.residual: [pre_norm]}", "[0]")
    assert cli_main(["ablate", str(path), "--slurm", "--jobs", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --slurm needs a store every job reaches")
    assert sorted(os.listdir(bare_workdir)) == ["nostore.yaml"]  # nothing queued, nothing submitted


def test_dry_run_prints_the_sbatch_parameters_and_an_estimate(bare_workdir: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    path = write_study(bare_workdir, "shape", "{model.residual: [pre_norm, post_norm]}", "[0, 1, 2]")
    journal = bare_workdir / "shared" / "study.journal"
    assert cli_main(["ablate", str(path), "--slurm", "--dry-run", "--storage", str(journal), "--jobs", "3",
                     "--partition", "gpu", "--gpus-per-job", "2", "--cpus-per-job", "8", "--time", "1-02:00",
                     "--sbatch", "account=lab", "--sbatch", "exclusive"]) == 0
    out = capsys.readouterr().out
    folder = bare_workdir / "runs" / "shape" / "slurm"
    for line in ("#SBATCH --job-name=ablate-shape-w0", "#SBATCH --partition=gpu", "#SBATCH --time=1560",
                 "#SBATCH --gpus-per-node=2", "#SBATCH --cpus-per-task=8", "#SBATCH --signal=USR2@120",
                 "#SBATCH --account=lab", "#SBATCH --exclusive", "#SBATCH --requeue",
                 f"#SBATCH --output={folder}/%j_0_log.out"):
        assert line in out, line
    assert "3 jobs (ablate-shape-w0 ...), 2 worker processes each" in out  # one worker per GPU of a job
    assert "estimated wall time:" in out and "for 6 cells, 6 at a time" in out and "probe" in out
    assert sorted(os.listdir(bare_workdir)) == ["shape.yaml"]  # a dry run writes nothing


def test_slurm_options_without_slurm_are_one_line(bare_workdir: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    path = write_study(bare_workdir, "noslurm", "{model.residual: [pre_norm]}", "[0]")
    assert cli_main(["ablate", str(path), "--jobs", "4", "--partition", "gpu"]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: --jobs, --partition: SLURM options, for `ablate study SPEC --slurm ...`")


def test_slurm_time_formats_are_read_as_sbatch_reads_them() -> None:
    assert [time_minutes(t) for t in ("90", "5:30", "01:30:00", "2-00", "1-02:30", "0-00:00:30")] == [
        90, 6, 90, 2880, 1590, 1]
    from ablate.errors import AblateError

    for bad in ("soon", "0", "1:2:3:4"):
        with pytest.raises(AblateError, match="--time"):
            time_minutes(bad)


@pytest.mark.parametrize("flags, line", [
    (["--gpus-per-job", "-1"], "error: --gpus-per-job -1: expected 0 or more"),
    (["--cpus-per-job", "0"], "error: --cpus-per-job 0: expected 1 or more"),  # sbatch took 0 as no request
    (["--jobs", "0"], "error: --jobs 0: expected 1 or more"),
    (["--sbatch", "=1"], "error: --sbatch '=1': expected KEY=VALUE or KEY (an sbatch option)"),
    (["--time", "soon"], "error: --time 'soon': expected minutes, HH:MM:SS or D-HH:MM:SS"),
])
def test_a_bad_job_shape_is_one_line_before_anything_is_written(
        bare_workdir: Path, capsys: pytest.CaptureFixture[str], flags: list[str], line: str) -> None:
    path = write_study(bare_workdir, "badshape", "{model.residual: [pre_norm]}", "[0]")
    assert cli_main(["ablate", str(path), "--slurm", "--storage", "s.journal", *flags]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [line]
    assert sorted(os.listdir(bare_workdir)) == ["badshape.yaml"]


def test_a_submission_away_from_slurm_is_one_line_and_writes_nothing(
        bare_workdir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_study(bare_workdir, "nosbatch", "{model.residual: [pre_norm]}", "[0]")
    monkeypatch.setenv("PATH", str(bare_workdir / "bin"))  # no sbatch (nor anything else) on it
    assert cli_main(["ablate", str(path), "--slurm", "--storage", "s.journal"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: --slurm: sbatch not found; submit from a machine of the SLURM cluster (a login node), or add "
        "--dry-run to see the jobs' sbatch parameters"]
    assert sorted(os.listdir(bare_workdir)) == ["nosbatch.yaml"]


def test_a_job_the_record_lacks_is_read_from_submitits_batch_script(tmp_path: Path) -> None:
    """A driver SIGKILLed after sbatch answered but before its record: the job's batch script, which
    submitit names after the job id, still puts it in `ablate status` and in the resubmission's naming."""
    record_jobs(tmp_path, [("41", "ablate-k-w0")])
    (tmp_path / "42_submission.sh").write_text("#!/bin/bash\n#SBATCH --job-name=ablate-k-w1\n")
    (tmp_path / ".submission_file_0123abcd.sh").write_text("#SBATCH --job-name=ablate-k-w2\n")  # not sbatched
    assert [(j["job_id"], j["name"]) for j in recorded_jobs(tmp_path)] == [
        ("41", "ablate-k-w0"), ("42", "ablate-k-w1")]
    record_jobs(tmp_path, [("43", "ablate-k-w2")])  # the record in its order, then the script's job
    assert [j["job_id"] for j in recorded_jobs(tmp_path)] == ["41", "43", "42"]


def test_each_job_is_recorded_as_it_is_submitted_and_its_files_are_the_owners(bare_workdir: Path) -> None:
    """submitit's local executor in place of sbatch: the record holds each job before the next is
    submitted, and the folder (0700) and the pickled jobs (0600), which hold the --storage URL with its
    password, are readable by their owner only."""
    folder = bare_workdir / "runs" / "owned" / "slurm"
    seen: list[list[str]] = []

    def on_submitted(job_id: str, name: str) -> None:
        record_jobs(folder, [(job_id, name)])
        seen.append([str(j["name"]) for j in recorded_jobs(folder)])

    secret = "postgresql://bob:s3cret-pw@db.example/ablate"
    jobs = submit(functools.partial(len, secret), {"timeout_min": 5}, folder, 2, "owned", first=3,
                  cluster="local", on_submitted=on_submitted)
    assert [j.result() for j in jobs] == [len(secret)] * 2
    assert seen == [["ablate-owned-w3"], ["ablate-owned-w3", "ablate-owned-w4"]]
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    pickles = list(folder.glob("*_submitted.pkl"))
    assert len(pickles) == 2 and all(secret.encode() in p.read_bytes() for p in pickles)
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in pickles)


@pytest.mark.soak  # in the soak tier: the default suite stays under 10 minutes
def test_a_job_runs_the_study_through_submitits_local_executor(workdir: Path) -> None:
    """The code path of a SLURM job (StudyJob, submit) with submitit's local executor: the job queues the
    cells, opens the parent run and trains every cell; each run records the device it trained on."""
    path = write_study(workdir, "localjob", "{model.residual: [pre_norm, post_norm]}", "[0]")
    plan = plan_study(str(path))
    job = StudyJob(str(path), [], str(workdir / "study.journal"), 1, str(workdir))
    (submitted,) = submit(job, executor_parameters(plan, JobShape()), log_folder(plan), 1, plan.name,
                          cluster="local")
    assert submitted.result() == 0, submitted.stderr()
    for run in assert_each_cell_once(path):
        assert run.data.tags["ablate.device_index"] == "cpu"


@pytest.mark.slow
def test_a_job_stopped_by_sigterm_is_recorded_as_cancelled_and_prints_the_slurm_command(
        workdir: Path) -> None:
    """`scancel` sends the job SIGTERM: its cell checkpoints and the study stops with 143. submitit used to
    record that as ('success', 143), "Job completed successfully", and `ablate status` said "done" once
    SLURM had forgotten the job; its log said to resume with a command lacking --slurm. The same job code
    path through submitit's local executor (here `scontrol` knows no such job: SLURM has forgotten it)."""
    path = write_study(workdir, "stopped", "{model.residual: [pre_norm, post_norm]}", "[0]", steps=2000)
    plan = plan_study(str(path))
    storage = str(workdir / "study.journal")
    launched = Launched(path.name, ("train.eval_every=500",), 1, storage,
                        ("--slurm", "--jobs 2", "--time 30"), str(workdir))
    job = StudyJob(str(path), ["train.eval_every=500"], storage, 1, str(workdir), launched)
    folder = log_folder(plan)
    (submitted,) = submit(job, executor_parameters(plan, JobShape()), folder, 1, plan.name, cluster="local")
    run_dirs = workdir / "runs" / "stopped"
    wait_for(lambda: any(run_dirs.glob("*/last.prev.pt")), 120, "a checkpoint after step 0")
    submitted._process.send_signal(signal.SIGTERM)  # what scancel sends first
    wait_for(submitted.done, 120, "the job's end")
    log = submitted.stdout() + submitted.stderr()
    assert "Job completed successfully" not in log
    hint = (f"resume with `cd {workdir} && ablate study stopped.yaml --set train.eval_every=500 --storage "
            f"{storage} --slurm --jobs 2 --time 30`")
    assert hint in log, log[-3000:]
    assert job_state(str(submitted.job_id), folder) == "cancelled (SIGTERM)"
    store = Store(storage)
    plan = plan_study(str(path), ["train.eval_every=500"])  # the study the job ran: with its override
    plan.bind(store)
    statuses = {r.status for r in CellQueue(store, plan.store_name, plan.direction).records().values()}
    assert statuses == {"interrupted", "pending"}  # the stopped cell resumes first, nothing is lost


# ---------------------------------------------------------------- a real one-node SLURM (soak)
@pytest.fixture
def on_slurm(slurm_cluster: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """sbatch and scontrol find the test cluster; the jobs import this tree."""
    monkeypatch.setenv("SLURM_CONF", slurm_cluster["SLURM_CONF"])
    monkeypatch.setenv("PYTHONPATH", str(REPO))


def wait_for_jobs(folder: Path, timeout_s: float) -> list[str]:
    """Poll the study's SLURM jobs until each has ended; their last states."""
    deadline = time.monotonic() + timeout_s
    while True:
        states = [job_state(str(j["job_id"]), folder) for j in recorded_jobs(folder)]
        if states and all(s.startswith(ENDED) for s in states):
            return states
        assert time.monotonic() < deadline, f"SLURM jobs still {states} after {timeout_s:.0f} s"
        time.sleep(1.0)


def wait_for(predicate: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout_s:.0f} s"
        time.sleep(0.5)


def final_metrics(name: str) -> dict[tuple[str, str], float]:
    """(spec hash, seed) -> final/val/loss of every cell of the study in the current MLflow store."""
    _, children = study_runs(name)
    return {(r.data.tags["ablate.spec_hash"], r.data.tags["ablate.seed"]): r.data.metrics["final/val/loss"]
            for r in children}


def scontrol(job_id: str) -> dict[str, str]:
    out = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True,
                         timeout=30)
    return dict(item.split("=", 1) for item in out.stdout.split() if "=" in item)


@pytest.mark.soak
def test_two_jobs_give_the_cells_and_metrics_of_two_workers(on_slurm: None, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_study(tmp_path, "twin", "{model.residual: [pre_norm, post_norm]}", "[0, 1]")
    found = {}
    for mode in ("workers", "slurm"):
        folder = tmp_path / mode
        folder.mkdir()
        monkeypatch.chdir(folder)
        monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_store(folder))
        store = ["--storage", str(folder / "study.journal")]
        if mode == "workers":  # 2 processes on the 2 cores, one torch thread each (train.threads: 1)
            assert cli_main(["ablate", str(path), "--workers", "2", *store]) == 0
        else:  # 2 jobs of one CPU each
            jobs = ["--slurm", "--jobs", "2", "--cpus-per-job", "1"]
            assert cli_main(["ablate", str(path), *jobs, *store]) == 0
            assert wait_for_jobs(folder / "runs" / "twin" / "slurm", 150) == ["done", "done"]
            assert_each_cell_once(path)
        found[mode] = final_metrics("twin")
    assert set(found["slurm"]) == set(found["workers"]) and len(found["slurm"]) == 4  # same hashes, seeds
    for cell, loss in found["workers"].items():
        assert math.isclose(found["slurm"][cell], loss, rel_tol=1e-5), cell


@pytest.mark.soak
def test_a_preempted_job_requeues_and_finishes_its_cell_in_the_same_run(workdir: Path,
                                                                        on_slurm: None) -> None:
    # 1000 steps (about 20 s on 2 cores): at 100 a fast machine finished the cell between its second
    # checkpoint and the USR2, which then found nothing left to resume
    path = write_study(workdir, "pre", "{model.residual: [pre_norm]}", "[0]", steps=1000)
    assert cli_main(["ablate", str(path), "--slurm", "--storage", str(workdir / "study.journal")]) == 0
    folder = workdir / "runs" / "pre" / "slurm"
    (job,) = [str(j["job_id"]) for j in recorded_jobs(folder)]
    (cell,) = plan_study(str(path)).cells
    run_dir = workdir / "runs" / "pre" / cell.key
    wait_for(lambda: (run_dir / "last.prev.pt").is_file(), 120, "a checkpoint after step 0")  # mid-cell
    run_id = (run_dir / "run_id").read_text().strip()
    subprocess.run(["scancel", "--signal=USR2", job], check=True, timeout=30)  # submitit's signal
    assert wait_for_jobs(folder, 150) == ["done"]
    assert scontrol(job)["Restarts"] == "1"  # requeued once, by its checkpoint hook
    log = (folder / f"{job}_0_log.out").read_text()
    assert "requeueing this job" in log and f"[{cell.key}]: started" in log
    assert "from step " in log.split("requeueing this job")[1]  # the requeued job resumed the checkpoint
    (run,) = assert_each_cell_once(path)
    assert run.info.run_id == run_id and run.info.status == "FINISHED"  # the same MLflow run, finished


@pytest.mark.soak
def test_a_cancelled_job_loses_no_finished_cell_and_a_resubmitted_study_finishes(workdir: Path,
                                                                                 on_slurm: None) -> None:
    # 600 steps (about 12 s a cell on 2 cores): at 40 a fast machine finished the second cell in the
    # half second between the first one's log line and the cancel, and the job ended done
    path = write_study(workdir, "cut", "{model.residual: [pre_norm]}", "[0, 1]", steps=600)
    command = ["ablate", str(path), "--slurm", "--storage", str(workdir / "study.journal")]
    assert cli_main(command) == 0
    folder = workdir / "runs" / "cut" / "slurm"
    (job,) = [str(j["job_id"]) for j in recorded_jobs(folder)]
    log = folder / f"{job}_0_log.out"
    wait_for(lambda: log.is_file() and ": finished, " in log.read_text(), 120, "a finished cell")
    subprocess.run(["scancel", job], check=True, timeout=30)  # outright: SIGTERM, then SIGKILL
    assert wait_for_jobs(folder, 90) == ["cancelled (SIGTERM)"]  # its study stopped, its cell checkpointed
    # Once SLURM forgets the job (MinJobAge) only submitit's result file is left: it says the same
    assert ended_state(job_result(job, folder), None) == "cancelled (SIGTERM)"
    text = log.read_text() + (folder / f"{job}_0_log.err").read_text()  # the hints go to stderr
    assert "Job completed successfully" not in text
    journal = workdir / "study.journal"
    assert f"resume with `cd {workdir} && ablate study {path} --storage {journal} --slurm`" in text
    client = MlflowClient(os.environ["MLFLOW_TRACKING_URI"])
    before = {r.info.run_id: r.info.end_time for r in study_runs("cut")[1] if r.info.status == "FINISHED"}
    assert before  # at least the cell that finished before the cancel
    assert cli_main(command) == 0  # resubmitted
    assert [j["name"] for j in recorded_jobs(folder)] == ["ablate-cut-w0", "ablate-cut-w1"]  # named on
    assert wait_for_jobs(folder, 150)[-1] == "done"
    runs = assert_each_cell_once(path)  # every cell once: the finished ones were not trained again
    for run_id, ended in before.items():
        assert client.get_run(run_id).info.end_time == ended
    assert len(runs) == 2


def free_port() -> int:
    """A port nothing listens on (just released by the OS)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def squeue_names(study: str) -> dict[str, str]:
    """job id -> name of the cluster's jobs of `study` (its jobs are named ablate-<study>-w<i>)."""
    out = subprocess.run(["squeue", "-h", "-o", "%i %j"], capture_output=True, text=True, timeout=30,
                         check=True)
    jobs = dict(line.split(" ", 1) for line in out.stdout.splitlines() if line.strip())
    return {job_id: name for job_id, name in jobs.items() if name.startswith(f"ablate-{study}-w")}


@pytest.mark.soak
def test_what_sbatch_or_a_store_refuses_is_one_line_before_anything_is_submitted(
        bare_workdir: Path, on_slurm: None, capsys: pytest.CaptureFixture[str]) -> None:
    """A partition SLURM lacks, an option sbatch does not know, GPUs the node has not (sbatch --test-only
    refuses each), and an Optuna store no one answers at (its password is not repeated): each one line,
    exit 2, no job, no study folder, no submitit file."""
    path = write_study(bare_workdir, "refused", "{model.residual: [pre_norm]}", "[0]")
    journal = ["--storage", str(bare_workdir / "s.journal")]
    cases = [
        ([*journal, "--partition", "nosuch"], "invalid partition specified: nosuch"),
        ([*journal, "--sbatch", "bogus=1"], "unrecognized option '--bogus=1'"),
        ([*journal, "--gpus-per-job", "1"], "Invalid generic resource (gres) specification"),
        (["--storage", f"postgresql://ablate:pw-{os.getpid()}@127.0.0.1:{free_port()}/ablate"],
         "cannot open the Optuna store postgresql://ablate:***@127.0.0.1:"),
    ]
    for flags, reason in cases:
        assert cli_main(["ablate", str(path), "--slurm", *flags]) == 2, flags
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: ") and reason in err[0], (flags, err)
        assert f"pw-{os.getpid()}" not in err[0]
        assert sorted(os.listdir(bare_workdir)) == ["refused.yaml"], flags
        assert squeue_names("refused") == {}


@pytest.mark.soak
def test_a_driver_stopped_between_submissions_leaves_every_job_in_the_record(
        bare_workdir: Path, on_slurm: None, postgres_url: str) -> None:
    """SIGTERM to `ablate study --slurm --jobs 8` once its first job is recorded: every job SLURM holds is
    in jobs.json (each is recorded as sbatch answers, the signal waiting for the record), a resubmission
    names its jobs on from them, and the study's folder and files, whose pickles hold the --storage
    password, are readable by their owner only. The jobs are submitted held (``--sbatch hold``): none runs."""
    path = write_study(bare_workdir, "halt", "{model.residual: [pre_norm]}", "[0]")
    password = f"pw-{os.getpid()}"  # the throwaway cluster trusts every login: any password opens it
    storage = postgres_url.replace("postgres@", f"postgres:{password}@", 1)
    command = [sys.executable, "-m", "ablate", "study", str(path), "--slurm", "--storage", storage,
               "--sbatch", "hold"]
    folder = bare_workdir / "runs" / "halt" / "slurm"
    try:
        driver = subprocess.Popen([*command, "--jobs", "8"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True)
        wait_for(lambda: bool(recorded_jobs(folder)) or driver.poll() is not None, 120, "the first job")
        driver.send_signal(signal.SIGTERM)
        _, err = driver.communicate(timeout=60)
        assert driver.returncode == 143, err
        recorded = {str(j["job_id"]): str(j["name"]) for j in recorded_jobs(folder)}
        assert squeue_names("halt") == recorded and 1 <= len(recorded) < 8
        assert sorted(recorded.values()) == [f"ablate-halt-w{i}" for i in range(len(recorded))]
        again = subprocess.run([*command, "--jobs", "1"], capture_output=True, text=True, timeout=120)
        assert again.returncode == 0, again.stderr
        names = [str(j["name"]) for j in recorded_jobs(folder)]
        assert names[-1] == f"ablate-halt-w{len(recorded)}" and squeue_names("halt") == {
            str(j["job_id"]): str(j["name"]) for j in recorded_jobs(folder)}
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700  # nothing in it readable by others
        pickles = list(folder.glob("*_submitted.pkl"))
        assert len(pickles) == len(recorded) + 1 and any(password.encode() in p.read_bytes() for p in pickles)
        assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in pickles)
        assert password not in again.stdout + again.stderr + err
    finally:
        for job_id in squeue_names("halt"):
            subprocess.run(["scancel", job_id], timeout=30)
