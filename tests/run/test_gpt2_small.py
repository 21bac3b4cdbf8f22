"""experiments/lm-gpt2-small-ksrc.yaml: GPT-2 small's shape (124M parameters with a 50,257-token vocabulary,
T 1024) trains a few steps on CPU from token shards, in one process and under `torchrun --nproc_per_node=2`
(gloo), where each rank reads its own blocks of the same shards and the loss curve is a single process's at
the same global batch. The corpus is a small slice the test writes, and the tokenizer a word-level
tokenizers JSON of GPT-2's vocabulary size that it makes itself (no download)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from mlflow import MlflowClient
from tokenizers import Tokenizer, models, pre_tokenizers

from ablate.data.lm_corpus import prepare_lm
from ablate.engine.builders import build_lm
from ablate.engine.trainer import Trainer
from ablate.spec.load import load_spec

pytestmark = [pytest.mark.soak,  # the soak tier: the default suite stays under 10 minutes
               pytest.mark.timeout(900), pytest.mark.usefixtures("single_thread")]
SPEC = Path(__file__).resolve().parents[2] / "experiments" / "lm-gpt2-small-ksrc.yaml"
VOCAB = 50_257  # GPT-2's


def gpt2_sized_tokenizer(path: Path) -> Path:
    words = ["<pad>", "<s>", "</s>", "<unk>", *(f"w{i}" for i in range(VOCAB - 4))]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(str(path))
    return path


def source_slice(folder: Path) -> Path:
    """'Source files', one a line: a few thousand tokens that repeat, so that three steps learn something."""
    folder.mkdir()
    for split, n in (("train", 40), ("val", 2), ("test", 2)):
        lines = [" ".join(f"w{(7 * d + j) % 300}" for j in range(400)) for d in range(n)]
        (folder / f"{split}.txt").write_text("\n".join(lines) + "\n")
    return folder


def test_gpt2_small_trains_a_few_steps_on_cpu_from_token_shards(tmp_path: Path) -> None:
    folder = source_slice(tmp_path / "ksrc")
    tokenizer = gpt2_sized_tokenizer(tmp_path / "tokenizer.json")
    spec = load_spec(str(SPEC), [
        f"data.text.root={folder}", "data.text.train=train.txt", "data.text.val=val.txt",
        "data.text.test=test.txt", "data.tokenizer.kind=file", f"data.tokenizer.path={tokenizer}",
        f"data.cache_dir={tmp_path / 'cache'}", "data.batch_tokens=1024", "train.accumulation=1",
        "train.max_steps=3", "train.eval_every=3", "train.schedule.warmup_steps=1", "train.precision=fp32",
        "eval.samples=0", f"train.out_dir={tmp_path / 'runs'}", "tracking.enabled=false"],
        check_hardware=False)
    data = prepare_lm(spec)
    assert data.tokenizers.tgt_vocab_size == VOCAB
    model = build_lm(spec.model, VOCAB, seed=0)
    params = model.num_parameters()
    assert abs(params - 124_439_808) / 124_439_808 < 0.001, params  # GPT-2 small's count, to 0.1%
    trainer = Trainer(spec, data, model, tmp_path / "run", torch.device("cpu"), show_progress=False)
    outcome = trainer.fit()
    assert outcome.status == "finished" and trainer.state.step == 3
    first = trainer.state.first_loss
    assert first is not None and math.isclose(first, math.log(VOCAB), rel_tol=0.1)  # starts near uniform
    history = dict(trainer.state.history)
    assert math.isfinite(history[3]["val/loss"]) and history[3]["val/loss"] < first  # and it learned


def test_gpt2_small_under_torchrun_matches_one_process_at_the_same_global_batch(tmp_path: Path) -> None:
    """Two ranks, one 1,024-token block each a step, against one process accumulating the same two blocks:
    both read one set of shards (built once), and log the same train/loss at every step (DDP's mean of the
    ranks' gradients against the sum of two micro-batches': float32 rounding apart). The spec's width,
    vocabulary, tied head and shards at 2 of its 12 layers: what DDP splits is the same, and each rank's
    step takes a third of the time (the whole depth trains in the one-process test above)."""
    folder = source_slice(tmp_path / "ksrc")
    tokenizer = gpt2_sized_tokenizer(tmp_path / "tokenizer.json")
    common = [f"data.text.root={folder}", "data.text.train=train.txt", "data.text.val=val.txt",
              "data.text.test=test.txt", "data.tokenizer.kind=file", f"data.tokenizer.path={tokenizer}",
              f"data.cache_dir={tmp_path / 'cache'}", "data.batch_tokens=1024", "train.max_steps=2",
              "train.eval_every=2", "train.checkpoint_every=100", "train.schedule.warmup_steps=1",
              "train.precision=fp32", "train.threads=1", "eval.samples=0", "tracking.log_checkpoint=false",
              "model.decoder_layers=2"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("MLFLOW_TRACKING_URI", None)
    ablate_run = ["-m", "ablate", "run", str(SPEC)]
    curves = {}
    for name, accumulation, launcher in (
            ("ddp", 1, [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]),
            ("single", 2, [sys.executable])):
        db = tmp_path / f"{name}.db"
        sets = [*common, f"train.accumulation={accumulation}", f"train.out_dir={tmp_path / name}",
                f"tracking.uri=sqlite:///{db}", f"tracking.experiment={name}"]
        cmd = [*launcher, *ablate_run, *(arg for kv in sets for arg in ("--set", kv))]
        proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=800)
        assert proc.returncode == 0, f"{name} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
        client = MlflowClient(f"sqlite:///{db}")
        (run,) = client.search_runs([e.experiment_id for e in client.search_experiments()])
        curves[name] = {m.step: m.value for m in client.get_metric_history(run.info.run_id, "train/loss")}
    shards = [p for p in (tmp_path / "cache" / "shards").iterdir() if p.is_dir()]
    assert len(shards) == 1  # one set of shards, built once, read by both ranks and by the single process
    assert sorted(curves["ddp"]) == sorted(curves["single"]) == [1, 2]
    for step, value in curves["ddp"].items():
        assert value == pytest.approx(curves["single"][step], rel=1e-4), (step, curves)
    assert math.isclose(curves["ddp"][1], math.log(VOCAB), rel_tol=0.1)  # a real first step, near uniform
