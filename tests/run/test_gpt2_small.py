"""experiments/lm-gpt2-small-ksrc.yaml: GPT-2 small's shape (124M parameters with a 50,257-token vocabulary,
T 1024) trains a few steps on CPU from token shards. The corpus is a small slice the test writes, and the
tokenizer a word-level tokenizers JSON of GPT-2's vocabulary size that it makes itself (no download)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
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
