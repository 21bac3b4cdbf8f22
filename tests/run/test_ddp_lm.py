"""`torchrun --nproc_per_node=2 -m ablate run SPEC` on a language model's token shards (gloo on CPU): both
ranks open the same shards (prepared once: the second rank waits on the build's lock), each rank reads its
own blocks (PackedBatcher gives rank r the batches r, r+2, ... of one epoch's list), and the loss curve
equals a single process's at the same global batch (2 micro-batches of accumulation)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow import MlflowClient

from ablate.data.lm_corpus import PackedBatcher, prepare_lm
from ablate.spec.load import load_spec

pytestmark = [pytest.mark.soak,  # the soak tier: the default suite stays under 10 minutes
               pytest.mark.timeout(900)]

WORDS = "the page fault handler maps the frame and the scheduler picks the next runnable task".split()
SPEC = """
name: {name}
seed: 1
data:
  source: text
  text: {{root: {corpus}, train: train.txt, val: val.txt}}
  document_lines: 1
  tokenizer: {{kind: bpe, vocab_size: 80}}
  max_len: 16
  batch_tokens: 64
  cache_dir: {cache}
model: {{arch: decoder_only, d_model: 32, heads: 2, decoder_layers: 1, d_ff: 64, dropout: 0.0,
        max_positions: 16}}
train:
  max_steps: 6
  eval_every: 6
  accumulation: {accumulation}
  schedule: {{name: constant, warmup_steps: 2}}
  optimizer: {{lr: 0.003}}
  threads: 1
  out_dir: {out}
eval: {{samples: 0}}
tracking: {{uri: "sqlite:///{db}", experiment: {name}, log_checkpoint: false}}
"""


def corpus(folder: Path) -> Path:
    folder.mkdir()
    for split, n in (("train", 120), ("val", 4)):
        lines = [" ".join(WORDS[(d + j) % len(WORDS)] for j in range(5 + d % 7)) for d in range(n)]
        (folder / f"{split}.txt").write_text("\n".join(lines) + "\n")
    return folder


def losses(db: Path) -> dict[int, float]:
    client = MlflowClient(f"sqlite:///{db}")
    (run,) = client.search_runs([e.experiment_id for e in client.search_experiments()])
    return {m.step: m.value for m in client.get_metric_history(run.info.run_id, "train/loss")}


def test_two_ranks_read_their_own_blocks_of_one_set_of_shards_and_match_one_process(tmp_path: Path) -> None:
    folder, cache = corpus(tmp_path / "text"), tmp_path / "cache"
    specs = {}
    for name, accumulation in (("ddp", 1), ("single", 2)):
        specs[name] = tmp_path / f"{name}.yaml"
        specs[name].write_text(SPEC.format(name=name, corpus=folder, cache=cache, accumulation=accumulation,
                                           out=tmp_path / f"runs-{name}", db=tmp_path / f"{name}.db"))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("MLFLOW_TRACKING_URI", None)
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                "-m", "ablate", "run", str(specs["ddp"])]
    for cmd in (torchrun, [sys.executable, "-m", "ablate", "run", str(specs["single"])]):
        proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=800)
        assert proc.returncode == 0, f"{cmd} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    shards = [p for p in (cache / "shards").iterdir() if p.is_dir()]
    assert len(shards) == 1 and (shards[0] / "meta.json").is_file()  # one set, built once, read by all

    spec = load_spec(str(specs["ddp"]))
    train = prepare_lm(spec).documents["train"]
    one = PackedBatcher(train, 16, 64, spec.seed).all_batches(0)
    ranks = [PackedBatcher(train, 16, 64, spec.seed, rank=r, world_size=2).epoch_batches(0) for r in (0, 1)]
    for step in range(spec.train.max_steps or 0):  # step k: rank 0 reads batch 2k, rank 1 batch 2k + 1
        assert ranks[0][step] == one[2 * step].tolist() and ranks[1][step] == one[2 * step + 1].tolist()
        assert not set(ranks[0][step]) & set(ranks[1][step])
    ddp, single = losses(tmp_path / "ddp.db"), losses(tmp_path / "single.db")
    assert sorted(ddp) == sorted(single) == list(range(1, 7))
    for step, value in ddp.items():
        assert value == pytest.approx(single[step], rel=1e-4), (step, ddp, single)
    assert ddp[6] < ddp[1]
