"""A step with no needless host synchronisations.

A synchronisation is an operation whose result the host must read before it can go on (``.item()``,
``bool()``, ``int()`` of a tensor: aten's ``_local_scalar_dense``; ``nonzero`` and ``masked_select``, whose
output size is data), which on a GPU stalls the host until the device catches up. A dispatch mode counts
them inside the trainer's step, on a CPU, where the same operations run: the step may read its loss once
(the step's logged loss and divergence check), whatever the number of micro-batches. Before: one read of
each micro-batch's loss (trainer), the LM's ``bool()`` choosing the causal kernel, ``int(max())`` of the
packed positions and the loss's count of scored targets, four a micro-batch.

The CPU's per-document attention (``varlen``) reads the documents' spans with ``numpy()``: host memory,
and no aten operation; on a GPU that path does not run (FlexAttention's block mask is built on the device).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ablate.data.lm_corpus import prepare_lm
from ablate.data.prepare import prepare_data
from ablate.engine.builders import build_lm, build_model
from ablate.engine.trainer import Trainer
from ablate.spec.experiment import ExperimentSpec

SYNCS = {"_local_scalar_dense", "nonzero", "masked_select", "is_nonzero", "equal", "_unique2", "unique_dim",
         "unique_consecutive"}


class SyncCounter(TorchDispatchMode):
    """Counts the aten operations that make the host wait for a device's result."""

    def __init__(self) -> None:
        super().__init__()
        self.count: Counter[str] = Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = func._schema.name.split("::")[-1]
        if name in SYNCS:
            self.count[name] += 1
        return func(*args, **(kwargs or {}))


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def lm_trainer(tmp_path: Path, **model: object) -> Trainer:
    spec = ExperimentSpec.model_validate({
        "name": "syncs", "tracking": {"enabled": False}, "seed": 0,
        "data": {"source": "synthetic", "synthetic": {"task": "copy_far", "vocab_size": 16, "min_len": 4,
                                                      "max_len": 4, "train_size": 600, "val_size": 20,
                                                      "test_size": 4},
                 "document_lines": 20, "max_len": 32, "batch_tokens": 128},
        "model": {"arch": "decoder_only", "d_model": 32, "heads": 2, "d_ff": 64, "decoder_layers": 2,
                  "dropout": 0.0, "max_positions": 64, **model},
        "train": {"accumulation": 3, "max_steps": 2, "out_dir": str(tmp_path)}})
    data = prepare_lm(spec)
    net = build_lm(spec.model, data.tokenizers.tgt_vocab_size, seed=0)
    return Trainer(spec, data, net, tmp_path / "run", torch.device("cpu"), show_progress=False)


def translation_trainer(tmp_path: Path) -> Trainer:
    spec = ExperimentSpec.model_validate({
        "name": "syncs-mt", "tracking": {"enabled": False}, "seed": 0,
        "data": {"source": "synthetic", "synthetic": {"task": "reverse", "vocab_size": 12, "min_len": 3,
                                                      "max_len": 9, "train_size": 200, "val_size": 8,
                                                      "test_size": 4},
                 "max_len": 12, "batch_tokens": 96},
        "model": {"d_model": 16, "heads": 2, "encoder_layers": 1, "decoder_layers": 1, "d_ff": 32,
                  "dropout": 0.0},
        "train": {"accumulation": 3, "max_steps": 2, "out_dir": str(tmp_path)}})
    data = prepare_data(spec)
    tok = data.tokenizers
    net = build_model(spec.model, tok.src_vocab_size, tok.tgt_vocab_size, pad_id=tok.pad_id, seed=0)
    return Trainer(spec, data, net, tmp_path / "run", torch.device("cpu"), show_progress=False)


def syncs_of_a_step(trainer: Trainer, monkeypatch: pytest.MonkeyPatch, batches: list[Any] | None = None
                    ) -> Counter[str]:
    """The synchronisations of one optimizer step of 3 micro-batches, batches built beforehand (they are
    built on the host, before the copy to the device)."""
    batches = batches or trainer.next_batches(3)
    monkeypatch.setattr(trainer, "next_batches", lambda count: batches[:count])
    with SyncCounter() as counter:
        loss, tokens = trainer.train_step()
    assert tokens > 0 and loss == loss  # a real step: a finite loss over real targets
    return counter.count


@pytest.mark.parametrize("model", [{}, {"positions": "sinusoidal"}, {"positions": "alibi"}],
                         ids=["learned", "sinusoidal", "alibi"])
def test_a_language_model_step_of_three_micro_batches_reads_the_device_once(
        model: dict[str, object], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trainer = lm_trainer(tmp_path, positions=model.get("positions", "learned"))
    # packed blocks of several documents a row: the step's attention sees segments
    assert any(b.segments is not None for b in trainer.next_batches(1))
    assert syncs_of_a_step(trainer, monkeypatch) == Counter({"_local_scalar_dense": 1})


def test_a_translation_step_with_padded_targets_reads_the_device_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trainer = translation_trainer(tmp_path)
    # length-bucketed batches: those with padding, where the loss selects the scored rows
    padded = [b for b in trainer.next_batches(12) if b.n_tgt_tokens < b.targets.numel()][:3]
    assert len(padded) == 3
    assert syncs_of_a_step(trainer, monkeypatch, padded) == Counter({"_local_scalar_dense": 1})


def test_the_step_loss_read_once_is_the_token_weighted_mean_of_the_micro_batches(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The loss now stays on the device across micro-batches: it is still the token-weighted mean of their
    losses, summed in float64 in the same order as the Python floats before."""
    trainer = translation_trainer(tmp_path)
    batches = trainer.next_batches(3)
    model = trainer.model
    with torch.no_grad():
        losses = [float(trainer.loss_on(b, model, 0.0)) for b in batches]
    total = sum(b.n_tgt_tokens for b in batches)
    expected = 0.0
    for loss, b in zip(losses, batches, strict=True):
        expected += loss * b.n_tgt_tokens / total
    monkeypatch.setattr(trainer, "next_batches", lambda count: batches[:count])
    got, tokens = trainer.train_step()
    assert tokens == total and got == pytest.approx(expected, rel=1e-6)
