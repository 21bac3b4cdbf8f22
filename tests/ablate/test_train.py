"""The shared trainer: schedules, precision paths, divergence, atomic checkpoints, kill-and-resume."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from mlflow.tracking import MlflowClient

from ablate.hardware import cpu_has_fast_bf16, resolve_precision
from ablate.runner import run_experiment
from ablate.spec import TrainSpec
from ablate.specload import load_spec
from ablate.train import load_checkpoint, lr_factor, save_checkpoint

TINY = """
name: tiny
seed: 3
data:
  source: synthetic
  synthetic:
    {task: reverse, vocab_size: 12, min_len: 2, max_len: 6, train_size: 400, val_size: 24, test_size: 24}
  max_len: 10
  batch_tokens: 256
model: {d_model: 32, heads: 2, encoder_layers: 1, decoder_layers: 1, d_ff: 64, dropout: 0.1}
train:
  max_steps: 40
  eval_every: 20
  checkpoint_every: 5
  schedule: {name: inverse_sqrt, warmup_steps: 10}
  optimizer: {lr: 0.003}
  threads: 1
eval: {samples: 2, decode: {strategy: greedy}}
tracking: {enabled: false}
"""


def write_spec(folder: Path, text: str = TINY, name: str = "tiny.yaml") -> Path:
    path = folder / name
    path.write_text(text)
    return path


def test_lr_schedules_have_the_documented_shape() -> None:
    noam = TrainSpec.model_validate({"schedule": {"name": "inverse_sqrt", "warmup_steps": 100}})
    factors = [lr_factor(s, noam) for s in range(400)]
    assert factors[99] == pytest.approx(1.0)  # peak at the end of warmup
    assert factors[0] == pytest.approx(0.01)
    assert all(a < b for a, b in zip(factors[:99], factors[1:100], strict=True))  # linear warmup rises
    assert factors[399] == pytest.approx(math.sqrt(100 / 400))  # then decays as 1/sqrt(step)
    const = TrainSpec.model_validate({"schedule": {"name": "constant", "warmup_steps": 0}})
    assert {lr_factor(s, const) for s in range(50)} == {1.0}
    cos = TrainSpec.model_validate({"max_steps": 200, "schedule": {"name": "cosine", "warmup_steps": 20,
                                                                    "min_lr_ratio": 0.1}})
    assert lr_factor(19, cos) == pytest.approx(1.0)
    assert lr_factor(199, cos) == pytest.approx(0.1)
    assert lr_factor(109, cos) == pytest.approx(0.55, abs=0.01)


def test_auto_precision_picks_bf16_only_where_the_cpu_has_bf16_units() -> None:
    cpu = torch.device("cpu")
    assert resolve_precision("auto", cpu) == ("bf16" if cpu_has_fast_bf16() else "fp32")
    assert resolve_precision("fp16", cpu) == "fp16"


def test_checkpoint_write_is_atomic_and_loads_with_weights_only(tmp_path: Path) -> None:
    target = tmp_path / "last.pt"
    save_checkpoint(target, {"a": torch.ones(2), "step": 1})
    save_checkpoint(target, {"a": torch.zeros(2), "step": 2})
    assert load_checkpoint(target)["step"] == 2
    assert [p.name for p in tmp_path.iterdir()] == ["last.pt"]  # no temp file left behind


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_every_precision_path_trains_with_finite_loss(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      precision: str) -> None:
    monkeypatch.chdir(tmp_path)
    spec = load_spec(write_spec(tmp_path), [f"train.precision={precision}", "train.max_steps=6",
                                           "train.eval_every=6", "eval.samples=0"])
    result = run_experiment(spec)
    assert result.status == "finished"
    losses = [m["val/loss"] for _, m in result.history]
    assert losses and all(math.isfinite(v) for v in losses)
    assert math.isfinite(result.metrics["test/loss"])


def test_divergent_spec_ends_as_diverged_not_an_exception(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    spec = load_spec(write_spec(tmp_path), [
        "model.residual=post_norm", "train.optimizer.lr=50.0", "train.schedule.name=constant",
        "train.schedule.warmup_steps=0", "train.clip_norm=null", "train.max_steps=60"])
    result = run_experiment(spec)
    assert result.status == "diverged"
    assert "loss" in result.reason
    summary = (Path(result.run_dir) / "summary.json").read_text()
    assert '"diverged"' in summary


def test_finished_run_is_reported_not_retrained(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    spec = load_spec(write_spec(tmp_path), ["train.max_steps=4", "train.eval_every=4", "eval.samples=0"])
    first = run_experiment(spec)
    mtime = (Path(first.run_dir) / "last.pt").stat().st_mtime_ns
    second = run_experiment(spec)
    assert second.metrics == first.metrics
    assert (Path(first.run_dir) / "last.pt").stat().st_mtime_ns == mtime


def _final_state(run_dir: Path) -> tuple[float, dict[str, torch.Tensor]]:
    ckpt = load_checkpoint(run_dir / "last.pt")
    history = ckpt["state"]["history"]
    return history[-1][1]["val/loss"], ckpt["model"]


def _run_cli(spec_path: Path, cwd: Path, checkpoint_delay: float = 0.0) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1",
               ABLATE_FAULT_CHECKPOINT_DELAY_S=str(checkpoint_delay))
    return subprocess.Popen([sys.executable, "-m", "ablate", "run", str(spec_path)], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def _kill_when(proc: subprocess.Popen[bytes], ready: callable, timeout: float = 120) -> None:  # type: ignore[valid-type]
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        if ready():
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            return
        time.sleep(0.01)
    out = proc.stdout.read().decode() if proc.stdout else ""
    pytest.fail(f"run ended before it could be killed (rc={proc.poll()}):\n{out}")


@pytest.mark.parametrize("kill_point", ["mid_training", "during_checkpoint_write"])
def test_killed_run_resumes_to_the_same_final_loss_and_weights(tmp_path: Path, kill_point: str) -> None:
    text = (TINY.replace("max_steps: 40", "max_steps: 60")
            .replace("checkpoint_every: 5", "checkpoint_every: 7")
            .replace("tracking: {enabled: false}", "tracking: {enabled: true}"))
    reference_dir, resumed_dir = tmp_path / "reference", tmp_path / "resumed"
    reference_dir.mkdir()
    resumed_dir.mkdir()
    ref = subprocess.run([sys.executable, "-m", "ablate", "run", str(write_spec(reference_dir, text))],
                         cwd=reference_dir, capture_output=True, text=True,
                         env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert ref.returncode == 0, ref.stderr
    spec_path = write_spec(resumed_dir, text)
    run_root = resumed_dir / "runs" / "tiny"

    def checkpoint_exists() -> bool:
        return any(run_root.glob("*/last.pt"))

    def checkpoint_being_written() -> bool:
        # a later checkpoint mid-write while an earlier one is in place
        return checkpoint_exists() and any(run_root.glob("*/.last.pt.*.tmp"))

    if kill_point == "mid_training":
        _kill_when(_run_cli(spec_path, resumed_dir), checkpoint_exists)
    else:
        _kill_when(_run_cli(spec_path, resumed_dir, checkpoint_delay=0.5), checkpoint_being_written)
        assert any(run_root.glob("*/.last.pt.*.tmp"))  # really killed between write and rename
    again = subprocess.run([sys.executable, "-m", "ablate", "run", str(spec_path)], cwd=resumed_dir,
                           capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert again.returncode == 0, again.stderr
    (ref_dir,) = (reference_dir / "runs" / "tiny").iterdir()
    (res_dir,) = run_root.iterdir()
    ref_loss, ref_weights = _final_state(ref_dir)
    res_loss, res_weights = _final_state(res_dir)
    assert res_loss == ref_loss
    for name, tensor in ref_weights.items():
        assert torch.equal(tensor, res_weights[name]), name
    # MLflow: the resumed run continued the same run; every metric step appears exactly once.
    client = MlflowClient(tracking_uri=f"sqlite:///{resumed_dir / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("tiny").experiment_id])
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"
    assert runs[0].data.tags["ablate.status"] == "finished"
    ref_client = MlflowClient(tracking_uri=f"sqlite:///{reference_dir / 'mlflow.db'}")
    (ref_run,) = ref_client.search_runs([ref_client.get_experiment_by_name("tiny").experiment_id])
    for key in ("train/loss", "val/loss", "val/exact_match"):
        steps = [m.step for m in client.get_metric_history(runs[0].info.run_id, key)]
        assert len(steps) == len(set(steps)), key
        ref_steps = [m.step for m in ref_client.get_metric_history(ref_run.info.run_id, key)]
        assert sorted(steps) == sorted(ref_steps), key


def test_ctrl_c_saves_a_checkpoint_and_ends_the_mlflow_run_as_killed(tmp_path: Path) -> None:
    text = (TINY.replace("max_steps: 40", "max_steps: 100000").replace("eval_every: 20", "eval_every: 100000")
            .replace("tracking: {enabled: false}", "tracking: {enabled: true}"))
    spec_path = write_spec(tmp_path, text)
    run_root = tmp_path / "runs" / "tiny"
    proc = _run_cli(spec_path, tmp_path)
    deadline = time.time() + 120
    # wait for a periodic checkpoint after step 0, so the run is really training
    while time.time() < deadline and proc.poll() is None:
        ckpts = list(run_root.glob("*/last.pt"))
        if ckpts and load_checkpoint(ckpts[0])["state"]["step"] >= 5:
            break
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, out.decode()
    assert b"Traceback" not in out
    (ckpt,) = run_root.glob("*/last.pt")
    assert load_checkpoint(ckpt)["state"]["step"] >= 5
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("tiny").experiment_id])
    assert run.info.status == "KILLED"
    assert run.data.tags["ablate.status"] == "killed"


def test_quickstart_learns_its_task(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The embedded default really learns: a shortened fixed-seed quickstart passes an exact-match bar."""
    monkeypatch.chdir(tmp_path)
    quickstart = Path(__file__).resolve().parents[2] / "experiments" / "quickstart.yaml"
    spec = load_spec(quickstart, ["tracking.enabled=false", "train.max_steps=600", "train.eval_every=600",
                                  "data.synthetic.val_size=100", "data.synthetic.test_size=100"])
    result = run_experiment(spec)
    assert result.status == "finished"
    assert result.metrics["test/exact_match"] >= 0.8, result.metrics
