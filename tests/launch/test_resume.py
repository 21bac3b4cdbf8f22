"""The commands a study prints for what comes next are the commands that do it: a SLURM job's resume hint
submits jobs again (``--slurm`` and the job shape, from the submission's folder), the failed-cells hint keeps
the overrides and the store, a search's keeps ``--trials``, and the submission's status hint its overrides."""

from __future__ import annotations

from ablate.cli import build_parser
from ablate.launch.resume import Launched, plural, resume_command, status_command
from ablate.launch.slurm_submit import JobShape, submission_flags


def parses_as(command: str) -> dict[str, object]:
    words = command.split("&& ", 1)[-1].split()
    assert words[0] == "ablate"
    return vars(build_parser().parse_args(words[1:]))


def test_a_slurm_jobs_resume_hint_submits_the_same_jobs_again() -> None:
    shape = JobShape(jobs=4, partition="gpu", gpus_per_job=1, time="4:00:00", sbatch=("account=lab",))
    flags = submission_flags(shape, workers=None, workers_per_gpu=2)
    launched = Launched("s.yaml", ("seed=1",), 1, "postgresql://bob:pw@db/x", flags, "/home/bob/study")
    hint = launched.resume()
    assert hint == ("cd /home/bob/study && ablate study s.yaml --set seed=1 --storage "
                    "postgresql://bob:***@db/x --slurm --jobs 4 --workers-per-gpu 2 --partition gpu "
                    "--gpus-per-job 1 --time 4:00:00 --sbatch account=lab")
    args = parses_as(hint)
    assert args["slurm"] and args["jobs"] == 4 and args["partition"] == "gpu"
    assert args["overrides"] == ["seed=1"]
    assert args["sbatch"] == ["account=lab"] and args["workers_per_gpu"] == 2


def test_the_failed_cells_hint_keeps_the_overrides_and_the_store() -> None:
    hint = Launched("s.yaml", ("seed=1",), 2, "j.log").resume("--retry-failed")
    assert hint == "ablate study s.yaml --set seed=1 --workers 2 --storage j.log --retry-failed"
    assert parses_as(hint)["retry_failed"]
    slurm = Launched("s.yaml", (), 1, "j.log", ("--slurm",), "/w").resume("--retry-failed")
    assert parses_as(slurm)["slurm"] and parses_as(slurm)["retry_failed"]  # accepted with --slurm now


def test_a_searchs_hint_keeps_its_trials_and_the_status_hint_its_overrides() -> None:
    assert resume_command("tune", "q.yaml", [], extra=["--trials 3"]) == "ablate tune q.yaml --trials 3"
    status = status_command("s.yaml", ["seed=1"], "j.log")
    assert status == "ablate status s.yaml --set seed=1 --storage j.log"
    assert parses_as(status_command("s.yaml", ["seed=1"], "j.log"))["overrides"] == ["seed=1"]


def test_counts_are_worded_in_the_singular_and_the_plural() -> None:
    assert [plural(1, "worker process"), plural(2, "worker process"), plural(1, "job"), plural(3, "job")] == [
        "1 worker process", "2 worker processes", "1 job", "3 jobs"]
