"""`train.compile: true` trains the model under torch.compile with the same losses as eager mode.

Inductor generates C++ on CPU, so the test needs a C compiler; without one it is skipped with the reason.
Dropout is 0 (compiled dropout draws its own random numbers), so eager and compiled steps are the same
function and only kernel-level rounding may differ.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from ablate.engine.trainer import load_checkpoint
from ablate.run.runner import run_experiment
from ablate.spec.load import load_spec

pytestmark = [pytest.mark.soak,  # the soak tier: the default suite stays under 10 minutes
               pytest.mark.timeout(1200)]

SPEC = """
name: compile-{mode}
seed: 5
data:
  source: synthetic
  # One length and 15 full batches of 13 x 7 tokens: every step has the same shapes, so inductor
  # compiles forward and backward once (varying shapes would add a dynamic-shape recompile: minutes here).
  synthetic: {{task: reverse, vocab_size: 12, min_len: 6, max_len: 6, train_size: 195, val_size: 16,
               test_size: 4}}
  max_len: 8
  batch_tokens: 91
model: {{d_model: 16, heads: 2, encoder_layers: 1, decoder_layers: 1, d_ff: 32, dropout: 0.0}}
train:
  max_steps: 4
  eval_every: 1
  compile: {compile}
  optimizer: {{lr: 0.003}}
  schedule: {{name: constant, warmup_steps: 0}}
  threads: 1
  out_dir: {out}
eval: {{samples: 0, bleu_during_training: false, decode: {{strategy: greedy}}}}
tracking: {{enabled: false}}
"""


def compiler_problem() -> str | None:
    if not any(shutil.which(cc) for cc in ("gcc", "cc", "clang", "g++")):
        return "torch.compile (inductor) needs a C/C++ compiler and none is on PATH"
    if not hasattr(torch, "compile"):
        return "this torch has no torch.compile"
    return None


@pytest.mark.skipif(compiler_problem() is not None, reason=str(compiler_problem()))
def test_compiled_training_follows_the_eager_loss_curve(tmp_path: Path) -> None:
    curves = {}
    for mode, flag in (("eager", "false"), ("compiled", "true")):
        path = tmp_path / f"{mode}.yaml"
        path.write_text(SPEC.format(mode=mode, compile=flag, out=tmp_path / "runs"))
        result = run_experiment(load_spec(path), quiet=True)
        assert result.status == "finished", result.reason
        # eval_every 1: val/loss of the weights after every step, i.e. the whole training trajectory.
        curves[mode] = [(step, metrics["val/loss"]) for step, metrics in result.history]
    eager, compiled = curves["eager"], curves["compiled"]
    assert [s for s, _ in eager] == [s for s, _ in compiled] == [1, 2, 3, 4]
    assert eager[-1][1] < eager[0][1]  # the steps did change the weights
    for (step, a), (_, b) in zip(eager, compiled, strict=True):
        assert b == pytest.approx(a, rel=1e-4, abs=1e-5), (step, eager, compiled)


def test_compile_flag_wraps_the_training_model_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """torch.compile gets the model for the steps; evaluation and checkpoints use the plain one."""
    compiled: list[torch.nn.Module] = []

    def fake_compile(model: torch.nn.Module, **kwargs: object) -> torch.nn.Module:
        compiled.append(model)
        return model

    monkeypatch.setattr(torch, "compile", fake_compile)
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC.format(mode="flag", compile="true", out=tmp_path / "runs"))
    result = run_experiment(load_spec(path), quiet=True)
    assert result.status == "finished"
    assert len(compiled) == 1 and type(compiled[0]).__name__ == "Seq2SeqTransformer"
    state = load_checkpoint(Path(result.run_dir) / "best.pt")["model"]
    assert not any(key.startswith("_orig_mod.") for key in state)  # checkpoints hold the plain model's keys


def test_a_compiled_forward_compiles_once_for_one_shape() -> None:
    """The attention core records which kernel ran only outside compilation: a set mutated in a compiled
    forward is a failing guard, and the model recompiled at every call until dynamo's limit."""
    from ablate.engine.builders import build_model
    from ablate.spec.experiment import ModelSpec

    torch._dynamo.reset()
    model = build_model(ModelSpec(d_model=16, heads=2, encoder_layers=1, decoder_layers=1, d_ff=32,
                                  dropout=0.0), 12, 12, 0, 0).eval()
    compiled = torch.compile(model, backend="eager")  # dynamo's guards without inductor's C++ compile
    src, tgt = torch.randint(3, 12, (2, 5)), torch.randint(3, 12, (2, 4))
    with torch.no_grad(), torch._dynamo.config.patch(error_on_recompile=True):
        first = compiled(src, tgt)
        second = compiled(src, tgt)  # raises RecompileError when a guard failed
    assert torch.equal(first, second)
    assert model.attention_kernels() == []  # nothing recorded while compiled
    with torch.no_grad():
        model(src, tgt)
    assert model.attention_kernels()  # the eager module still records what it ran
