"""Packed cells (ablate/engine/packed_model.py, packed_trainer.py): a pack of cells of one shape trains each
cell as it trains alone.

The tolerance: after 6 steps every loss of a packed cell's curve, every weight and the logits are within
2e-4 of the same cell alone (2e-3 under Muon and Adafactor: see LOOSER), relative to the largest value of
the tensor compared, at least 0.01. Both run in float32 and differ only in the order of float sums: one
batched product against one product per cell, padded rows and lengths, the full logits against the
chunked loss.

One slice is compared by what it does instead: the key projection's bias. Its gradient is zero in exact
arithmetic (softmax(s + c) = softmax(s) for a constant c added to every score of a row), so the optimizers
that normalise per element (Adam, Lion, Adafactor, Muon's AdamW part) step it at a full learning rate on
rounding noise near 1e-9, and two summation orders move it apart by up to steps x lr (measured: 2e-3 to 2e-2
after 6 steps, every other weight within 3e-8). It changes no output: the cells' logits are compared."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

import registry
from ablate.data.prepare import prepare_data
from ablate.engine import packed_trainer
from ablate.engine.dispatch import build_any
from ablate.engine.evaluate import evaluate
from ablate.engine.packed_model import NotPackable, pack_lengths, pack_problems, spec_problems
from ablate.engine.packed_trainer import PackedTrainer
from ablate.engine.trainer import Trainer
from ablate.spec.experiment import ExperimentSpec
from tests.factories import tiny_spec

ROOT = Path(__file__).resolve().parents[2]

TOLERANCE = 2e-4
# Muon orthogonalises in bfloat16 (torch.optim.Muon's Newton-Schulz: 8 bits of mantissa), so a float32
# rounding difference in its input can flip a bf16 rounding of an update lr in size; Adafactor divides each
# row's and column's gradient by its own small root mean square. Measured after 6 steps: 7e-4 and 3e-4 of
# the largest weight at most, against 3e-8 for the others.
LOOSER = {"muon": 2e-3, "adafactor": 2e-3}
OPTIMIZERS = registry.names("optimizer")  # every registered one
STEPS = {"train.max_steps": 6, "train.eval_every": 3, "train.checkpoint_every": 3, "train.clip_norm": 0.5,
         "train.schedule": {"name": "inverse_sqrt", "warmup_steps": 2}, "eval.samples": 0,
         "eval.metric": "exact_match", "model.dropout": 0.0}
LM: dict[str, Any] = {
    "data": {"source": "synthetic", "synthetic": {"task": "copy_far", "vocab_size": 16, "min_len": 4,
                                                  "max_len": 4, "train_size": 300, "val_size": 20,
                                                  "test_size": 20},
             "document_lines": 20, "max_len": 32, "batch_tokens": 256},
    "model": {"arch": "decoder_only", "d_model": 16, "heads": 2, "d_ff": 32, "decoder_layers": 1,
              "dropout": 0.0, "max_positions": 64},
}


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def cell_spec(arch: str, seed: int, *changes: dict[str, Any]) -> ExperimentSpec:
    lm = {"data": LM["data"], "model": LM["model"], "eval": {"samples": 0}} if arch == "decoder_only" else {}
    raw = tiny_spec({"model.d_model": 16, "model.d_ff": 32, "data.synthetic.train_size": 200}, STEPS, lm,
                    *changes, {"seed": seed})
    return ExperimentSpec.model_validate(raw)


def make_trainer(spec: ExperimentSpec, folder: Path) -> Trainer:
    data = prepare_data(spec)
    tok = data.tokenizers
    model = build_any(spec.model, tok.src_vocab_size, tok.tgt_vocab_size, pad_id=tok.pad_id, seed=spec.seed)
    return Trainer(spec, data, model, folder, torch.device("cpu"), show_progress=False)


def assert_close(packed: torch.Tensor, alone: torch.Tensor, what: str, tolerance: float = TOLERANCE) -> None:
    scale = max(float(alone.abs().max()), 1e-2)  # a bias that starts at 0 is compared at 1e-2
    assert float((packed - alone).abs().max()) <= tolerance * scale, what


def without_key_bias(name: str, t: torch.Tensor) -> torch.Tensor:
    """``t`` without the key projection's bias (see the module docstring): a fused (q, k, v) bias keeps its
    q and v parts, a fused (k, v) bias its v part."""
    if name.endswith("qkv.bias"):
        d = 16  # d_model of these cells
        kv = (t.numel() - d) // 2
        return torch.cat([t[:d], t[d + kv:]])
    if name.endswith(".kv.bias"):
        return t[t.numel() // 2:]
    return t


def packed_and_alone(tmp_path: Path, specs: list[ExperimentSpec]) -> tuple[list[Trainer], list[Trainer]]:
    packed = [make_trainer(s, tmp_path / f"packed{k}") for k, s in enumerate(specs)]
    outcomes = PackedTrainer(packed).fit()
    alone = [make_trainer(s, tmp_path / f"alone{k}") for k, s in enumerate(specs)]
    for t, outcome in zip(alone, outcomes, strict=True):
        assert t.fit().status == outcome.status
    return packed, alone


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
@pytest.mark.parametrize("arch", ["encoder_decoder", "decoder_only"])
def test_a_packed_cell_equals_the_cell_alone(tmp_path: Path, arch: str, optimizer: str) -> None:
    """Three seeds at two learning rates: each packed cell's loss curve, evaluations and weights after 6
    steps equal the cell trained alone (its seed's weights and data order, its own rate and clipping)."""
    lrs = [0.003, 0.01, 0.003]
    specs = [cell_spec(arch, seed, {"train.optimizer": {"name": optimizer, "lr": lr}})
             for seed, lr in zip((0, 1, 2), lrs, strict=True)]
    packed, alone = packed_and_alone(tmp_path, specs)
    tolerance = LOOSER.get(optimizer, TOLERANCE)
    for k, (p, a) in enumerate(zip(packed, alone, strict=True)):
        assert p.state.step == a.state.step == 6
        assert len(p.state.train_curve) == len(a.state.train_curve) > 0
        assert_close(torch.tensor([v for _, v in p.state.train_curve]),
                     torch.tensor([v for _, v in a.state.train_curve]), f"cell {k}: train loss", tolerance)
        assert [s for s, _ in p.state.history] == [s for s, _ in a.state.history]
        assert_close(torch.tensor([m["val/loss"] for _, m in p.state.history]),  # the pack's stacked forward
                     torch.tensor([m["val/loss"] for _, m in a.state.history]), f"cell {k}: val", tolerance)
        alone_params = dict(a.model.named_parameters())
        for name, param in p.model.named_parameters():
            assert_close(without_key_bias(name, param.detach()),
                         without_key_bias(name, alone_params[name].detach()), f"cell {k}: {name}", tolerance)
        batch = a.next_batches(1)[0]
        p.model.eval(), a.model.eval()
        with torch.no_grad():
            logits = p.model(*batch.model_inputs()), a.model(*batch.model_inputs())
            assert_close(*logits, f"cell {k}: logits", tolerance)
    # the cells really differ: seeds and rates gave each its own weights
    first = [dict(t.model.named_parameters()) for t in packed]
    name = next(iter(first[0]))
    assert not torch.equal(first[0][name], first[1][name])


@pytest.mark.parametrize("arch", ["encoder_decoder", "decoder_only"])
def test_a_packed_cell_with_dropout_draws_its_own_masks(tmp_path: Path, arch: str) -> None:
    """Dropout 0.1 on every sub-layer, the embeddings and the FFN: each packed cell draws its masks from its
    own seed's stream on its own rows and lengths (the cells' batches differ in length, so the pack pads),
    and its loss curve and weights after 6 steps equal the cell trained alone from ``torch.manual_seed``
    of its seed, as ablate/run/runner.py seeds it. The masks matter: without dropout the curve differs."""
    lrs = [0.003, 0.01, 0.003]
    specs = [cell_spec(arch, seed, {"model.dropout": 0.1, "train.optimizer": {"name": "adam", "lr": lr}})
             for seed, lr in zip((0, 1, 2), lrs, strict=True)]
    packed = [make_trainer(s, tmp_path / f"packed{k}") for k, s in enumerate(specs)]
    pack = PackedTrainer(packed)
    pack.fit()
    assert pack.pack is not None and pack.pack.dropouts > 0
    for k, spec in enumerate(specs):
        alone = make_trainer(spec, tmp_path / f"alone{k}")
        torch.manual_seed(spec.seed)  # what seed_everything leaves for the cell's first mask
        alone.fit()
        p = packed[k]
        assert_close(torch.tensor([v for _, v in p.state.train_curve]),
                     torch.tensor([v for _, v in alone.state.train_curve]), f"cell {k}: train loss")
        alone_params = dict(alone.model.named_parameters())
        for name, param in p.model.named_parameters():
            assert_close(without_key_bias(name, param.detach()),
                         without_key_bias(name, alone_params[name].detach()), f"cell {k}: {name}")
    undropped = make_trainer(cell_spec(arch, 0, {"model.dropout": 0.0, "train.optimizer": {"lr": lrs[0]}}),
                             tmp_path / "undropped")
    undropped.fit()
    curve = torch.tensor([v for _, v in packed[0].state.train_curve])
    assert float((curve - torch.tensor([v for _, v in undropped.state.train_curve])).abs().max()) > 1e-3


def test_padded_lengths_name_their_dimension() -> None:
    """Where a cell is shorter than the pack, its padded length moves off the model's widths and off the
    other kind's padded length, so a dropout tells a length from a width by its size."""
    assert pack_lengths([[5, 7], [7, 7]], {16, 32}, 64) == [8, 7]  # 7 is the target's: the source moves
    assert pack_lengths([[16, 12], [9, 9]], {16, 32}, 64) == [17, 9]
    assert pack_lengths([[16, 16]], {16}, 64) == [16]  # no cell shorter: nothing to cut
    with pytest.raises(NotPackable, match="positions"):
        pack_lengths([[15, 16]], {16, 17}, 16)


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_every_optimizer_steps_the_pack_in_one_call(tmp_path: Path, optimizer: str) -> None:
    """Every registered optimizer steps the stacked parameters at once (ablate/engine/packed_step.py: the
    elementwise ones directly, Muon's Newton-Schulz batched over cells, Adafactor's factored moments per
    cell), each cell's optimizer state a view of its slice (what its checkpoint saves); fp16's per-cell loss
    scaling steps each cell's own optimizer."""
    specs = [cell_spec("decoder_only", seed, {"train.optimizer": {"name": optimizer, "lr": 0.01}})
             for seed in (0, 1)]
    pack = PackedTrainer([make_trainer(s, tmp_path / f"c{k}") for k, s in enumerate(specs)])
    pack.train_step([0, 1])
    assert pack._step is not None
    opt = pack.trainers[1].optimizer
    inner = [o for o in (getattr(opt, "muon", None), getattr(opt, "adamw", None)) if o is not None] or [opt]
    tensors = [t for o in inner for state in o.state.values() for t in state.values()
               if isinstance(t, torch.Tensor)]
    assert tensors and all(t._base is not None for t in tensors)  # views of the pack's stacked state
    if optimizer == "adam":  # fp16: each cell's GradScaler decides its own step
        fp16 = [cell_spec("decoder_only", seed, {"train.precision": "fp16"}) for seed in (0, 1)]
        scaled = PackedTrainer([make_trainer(s, tmp_path / f"h{k}") for k, s in enumerate(fp16)])
        scaled.train_step([0, 1])
        assert scaled._step is None


VALIDATED = [("encoder_decoder", "sinusoidal"), ("decoder_only", "sinusoidal"), ("decoder_only", "learned")]


@pytest.mark.parametrize(("arch", "positions"), VALIDATED)
def test_a_packs_validation_loss_is_one_stacked_forward(tmp_path: Path, arch: str, positions: str,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """At each evaluation the pack scores every cell's validation loss in one stacked forward a batch
    (ablate/engine/packed_eval.py), and each cell's val/loss equals its loss evaluated alone; the metrics a
    cell computes alone (decoding's exact match) are its own too. Learned positions too: a validation
    window has no document positions, so its table is read from a start position (the fair ladder's cells:
    its stacked table once failed there, after training had packed)."""
    calls: list[int] = []
    original = packed_trainer.split_nll

    def counted(pack: Any, trainers: Any, split: str) -> Any:
        calls.append(len(trainers))
        return original(pack, trainers, split)

    monkeypatch.setattr(packed_trainer, "split_nll", counted)
    specs = [cell_spec(arch, seed, {"model.positions": positions}) for seed in (0, 1, 2)]
    packed = [make_trainer(s, tmp_path / f"p{k}") for k, s in enumerate(specs)]
    PackedTrainer(packed).fit()
    assert calls == [3, 3]  # steps 3 and 6, all three cells
    for k, t in enumerate(packed):
        for step, metrics in t.state.history:
            alone = evaluate(t.model, t.data, "val", t.spec, t.device, t.precision, decode=True,
                             limit=t.spec.eval.max_sentences, max_tokens=t.spec.eval.token_cap(t.spec.is_lm))
            if step == t.state.step:  # the weights now are the last evaluation's
                assert_close(torch.tensor(metrics["val/loss"]), torch.tensor(alone["val/loss"]), f"cell {k}")
                derived = ("val/loss", "val/ppl", "val/bpb")  # from the loss; the rest the cell's own alone
                assert {n: v for n, v in metrics.items() if n not in derived} == \
                    {n: v for n, v in alone.items() if n not in derived}


# Run in a fresh interpreter: process CPU time counts every thread, and a test worker's earlier tests can
# leave threads behind (a store's or a server's) whose CPU would land in whichever cell's window was open.
_CPU_SHARES = """
import json, sys, time
from pathlib import Path
from ablate.engine.packed_trainer import PackedTrainer
from tests.engine.test_packed import cell_spec, make_trainer
folder = Path(sys.argv[1])
trainers = [make_trainer(cell_spec("decoder_only", seed), folder / f"c{seed}") for seed in range(3)]
before = time.process_time()
for t in trainers:  # each segment starts here, as a run's does when it starts or resumes
    t.segment_cpu = before
PackedTrainer(trainers).fit()
spent = time.process_time() - before
print(json.dumps({"spent": spent, "shares": [t.cpu_seconds() for t in trainers]}))
"""


def test_each_packed_cell_counts_its_share_of_the_process_cpu_time(tmp_path: Path) -> None:
    """The shared step's CPU time goes 1/K to each cell, the pack's stacked evaluation too, a cell's own
    evaluations and checkpoints to it alone: the cells' cpu_seconds add up to the process's CPU time of the
    pack, not K times it, and none takes most of it."""
    done = subprocess.run([sys.executable, "-c", _CPU_SHARES, str(tmp_path)], cwd=ROOT, capture_output=True,
                          text=True, check=True)
    found = json.loads(done.stdout.strip().splitlines()[-1])
    spent, shares = found["spent"], found["shares"]
    assert all(0 < share < 0.6 * spent for share in shares), found
    assert sum(shares) == pytest.approx(spent, rel=0.1), found


def test_a_diverging_cell_ends_diverged_and_leaves_the_others_untouched(tmp_path: Path) -> None:
    """A cell at a learning rate that blows its loss up ends as diverged at the step it does alone; the
    pack is re-stacked without it and the other cells end equal to themselves alone."""
    rates = [0.003, 30.0, 0.01]
    specs = [cell_spec("encoder_decoder", seed, {"train.optimizer": {"name": "sgd", "lr": lr}})
             for seed, lr in enumerate(rates)]
    packed, alone = packed_and_alone(tmp_path, specs)
    assert packed[1].state.stop_status == alone[1].state.stop_status == "diverged"
    assert packed[1].state.step == alone[1].state.step < 6
    for k in (0, 2):
        assert packed[k].state.stop_status is None and packed[k].state.step == 6
        alone_params = dict(alone[k].model.named_parameters())
        for name, param in packed[k].model.named_parameters():
            assert_close(without_key_bias(name, param.detach()),
                         without_key_bias(name, alone_params[name].detach()), f"cell {k}: {name}")


def test_fp16_loss_scaling_is_each_cells_own(tmp_path: Path) -> None:
    """Each cell keeps its own GradScaler: the scales after 6 fp16 steps (an overflow halves one cell's scale
    and skips only that cell's step) are the ones each cell reaches alone, and so are its weights."""
    specs = [cell_spec("decoder_only", seed, {"train.precision": "fp16", "train.optimizer": {"lr": lr}})
             for seed, lr in ((0, 0.003), (1, 0.01))]
    packed, alone = packed_and_alone(tmp_path, specs)
    assert [t.scaler.get_scale() for t in packed] == [t.scaler.get_scale() for t in alone]
    assert all(t.scaler.is_enabled() for t in packed)
    for p, a in zip(packed, alone, strict=True):
        assert_close(torch.tensor([v for _, v in p.state.train_curve]),
                     torch.tensor([v for _, v in a.state.train_curve]), "fp16 train loss", 2e-3)


def test_components_that_cannot_pack_are_named_with_their_reason() -> None:
    """The probe runs two cells packed and alone: a unit vmap cannot batch (QK-norm's gain sits beside
    sdpa, which has no batching rule) and a parameter read outside its module's forward (T5's bias
    table, indexed by its owner) are named; a plain model packs, with dropout too (each cell's own
    masks, from the same state packed and alone); attention dropout refuses before a build."""
    def problems(arch: str, **model: Any) -> list[str]:
        spec = cell_spec(arch, 0, {f"model.{k}": v for k, v in model.items()})
        models = [build_any(spec.model, 16, 16, seed=seed) for seed in (0, 1)]
        inputs = ([torch.randint(1, 16, (4, 12))] if arch == "decoder_only"
                  else [torch.randint(1, 16, (40, 7)), torch.randint(1, 16, (40, 6))])
        return pack_problems(models, inputs, lambda out: out.float().pow(2).mean())

    assert problems("decoder_only") == [] and problems("encoder_decoder", norm="rms") == []
    qk = problems("decoder_only", attention="qk_norm")
    assert len(qk) == 1
    assert qk[0].startswith("attention=qk_norm: QKNormAttention (decoder.layers.0.self_attn): vmap cannot")
    t5 = problems("encoder_decoder", positions="t5_bias")
    assert len(t5) == 1 and t5[0].startswith("positions=t5_bias: registry/positions.py:")
    assert problems("encoder_decoder", positions="learned") == []  # its table read through its own forward
    assert problems("encoder_decoder", dropout=0.1) == [] and problems("decoder_only", dropout=0.3) == []
    assert spec_problems(cell_spec("encoder_decoder", 0, {"model.dropout": 0.1}).model) == []
    dropped = spec_problems(cell_spec("encoder_decoder", 0, {"model.attention_dropout": 0.1}).model)
    assert dropped and dropped[0].startswith("model.attention_dropout 0.1: drawn inside the attention kernel")
