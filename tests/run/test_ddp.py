"""`torchrun --nproc_per_node=2 -m ablate run SPEC`: DistributedDataParallel on CPU (gloo), for real.

One torchrun run (2 processes) and one single-process run of the same data with the same global batch
(TokenBatcher gives rank r the batches r, r+2, ... of one epoch list, so a step of the 2-rank run sees
batches 2k and 2k+1; the single process sees the same two as accumulation micro-batches). Dropout is
0, so both runs must log the same train/loss at every step and the same val/loss (each rank scoring its
share of the validation batches), only rank 0 may talk to MLflow, and only rank 0 may write checkpoints (a
sitecustomize spy records every file replaced, with the writer's RANK).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow import MlflowClient

from ablate.data.prepare import TokenBatcher, prepare_data
from ablate.spec.load import load_spec

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

SPEC = """
name: {name}
seed: 1
data:
  source: synthetic
  synthetic: {{task: reverse, vocab_size: 12, min_len: 2, max_len: 8, train_size: 410, val_size: 16,
               test_size: 8}}
  max_len: 12
  batch_tokens: 64
model: {{d_model: 32, heads: 2, encoder_layers: 1, decoder_layers: 1, d_ff: 64, dropout: 0.0}}
train:
  max_steps: 8
  eval_every: 4
  checkpoint_every: 2
  accumulation: {accumulation}
  schedule: {{name: inverse_sqrt, warmup_steps: 4}}
  optimizer: {{lr: 0.003}}
  threads: 1
  out_dir: {out}
eval: {{samples: 1, bleu_during_training: false, decode: {{strategy: greedy}}}}
tracking: {{uri: "sqlite:///{db}", experiment: {name}, log_checkpoint: false}}
"""

# Records every os.replace (how checkpoints and summaries are written atomically) with the writer's RANK.
SPY = """
import os
_replace = os.replace
def _spy(src, dst, *args, **kwargs):
    _replace(src, dst, *args, **kwargs)
    with open(os.environ["ABLATE_TEST_WRITES"], "a") as fh:
        fh.write(f"{os.environ.get('RANK', '-')} {os.fspath(dst)}\\n")
os.replace = _spy
"""


def write_spec(folder: Path, name: str, accumulation: int) -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(SPEC.format(name=name, accumulation=accumulation, out=folder / f"runs-{name}",
                                db=folder / f"{name}.db"))
    return path


def run(cmd: list[str], cwd: Path, writes: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ABLATE_TEST_WRITES": str(writes), "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(cwd / "spy"), os.environ.get("PYTHONPATH", "")])}
    env.pop("MLFLOW_TRACKING_URI", None)
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=800)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return proc


def losses(db: Path, metric: str = "train/loss") -> tuple[int, dict[int, float]]:
    """(number of runs in the store, ``metric`` by step of the only run)."""
    client = MlflowClient(f"sqlite:///{db}")
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    curve = {m.step: m.value for m in client.get_metric_history(runs[0].info.run_id, metric)}
    return len(runs), curve


@pytest.mark.soak
def test_torchrun_two_ranks_matches_one_process_with_the_same_global_batch(tmp_path: Path) -> None:
    (tmp_path / "spy").mkdir()
    (tmp_path / "spy" / "sitecustomize.py").write_text(SPY)
    ddp_spec, single_spec = write_spec(tmp_path, "ddp", 1), write_spec(tmp_path, "single", 2)

    # Precondition of "same global batch": the epoch's batch list is the same whether it is cut for one
    # rank or two (no batch had to be split to even out the ranks), and the steps stay inside epoch 0.
    spec = load_spec(ddp_spec)
    train = prepare_data(spec).splits["train"]
    one = TokenBatcher(train, spec.data.batch_tokens, spec.seed, world_size=1).all_batches(0)
    two = TokenBatcher(train, spec.data.batch_tokens, spec.seed, world_size=2).all_batches(0)
    assert [b.tolist() for b in one] == [b.tolist() for b in two]
    steps = spec.train.max_steps
    assert steps is not None and len(one) >= 2 * steps

    writes = tmp_path / "writes.txt"
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                "-m", "ablate", "run", str(ddp_spec)]
    ddp = run(torchrun, tmp_path, writes)
    assert ddp.stdout.count("MLflow run") == 1  # the summary is printed by rank 0 only
    ddp_writes = [line.split(" ", 1) for line in writes.read_text().splitlines()]
    writes.unlink()
    run([sys.executable, "-m", "ablate", "run", str(single_spec)], tmp_path, writes)

    # Only rank 0 wrote checkpoints (last.pt every 2 steps, best.pt) and the summary.
    run_files = [(rank, Path(p)) for rank, p in ddp_writes if str(tmp_path / "runs-ddp") in p]
    assert {p.name for _, p in run_files} >= {"last.pt", "best.pt", "summary.json"}
    assert {rank for rank, _ in run_files} == {"0"}, run_files
    (run_dir,) = {p.parent for _, p in run_files}
    # (and `run_id`, where the runner records the MLflow run as soon as it opens: a kill resumes into it;
    # `.lock`, rank 0's hold on the run folder; each checkpoint's checksum, and the previous last.pt kept
    # until the new one was complete)
    listing = sorted(p.name for p in run_dir.iterdir() if p.name not in ("run_id", ".lock"))
    assert listing == ["best.pt", "best.pt.sha256", "last.prev.pt", "last.prev.pt.sha256", "last.pt",
                       "last.pt.sha256", "summary.json"]

    # Only rank 0 logged: one MLflow run in the DDP store; its loss curve equals the single process's.
    n_ddp, ddp_curve = losses(tmp_path / "ddp.db")
    n_single, single_curve = losses(tmp_path / "single.db")
    assert n_ddp == 1 and n_single == 1
    assert sorted(ddp_curve) == list(range(1, steps + 1))  # logged at every step
    assert sorted(ddp_curve) == sorted(single_curve)
    for step, value in ddp_curve.items():
        assert value == pytest.approx(single_curve[step], rel=1e-3), (step, ddp_curve, single_curve)
    assert ddp_curve[steps] < ddp_curve[1]  # and it did learn
    # Each rank scored its share of the validation batches and the sums were added over the ranks: the
    # single process's val/loss on the whole split (16 sentences, several batches), at every evaluation.
    ddp_val = losses(tmp_path / "ddp.db", "val/loss")[1]
    single_val = losses(tmp_path / "single.db", "val/loss")[1]
    assert sorted(ddp_val) == sorted(single_val) == [4, 8]
    for step, value in ddp_val.items():
        assert value == pytest.approx(single_val[step], rel=1e-5), (step, ddp_val, single_val)
