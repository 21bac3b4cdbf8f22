"""The numbers the speed work must not move (docs/benchmarks.md, "A step as fast as the best LM codebases"):
the decoder-only model's logits at a fixed seed, bit for bit, and one optimizer step of the trainer's
optimizer (torch's fused Adam/AdamW kernel) against torch's reference per-parameter loop, within a stated
tolerance."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from ablate.engine.builders import build_lm
from ablate.engine.trainer import build_optimizer
from ablate.spec.experiment import ModelSpec, TrainSpec

BENCH_LM = {"arch": "decoder_only", "d_model": 64, "heads": 4, "decoder_layers": 2, "d_ff": 256,
            "activation": "gelu", "positions": "rope", "embeddings": "separate", "dropout": 0.0,
            "max_positions": 32}
# One AdamW step of the fused kernel lands within this of the reference loop's (relative to the weight):
# the two round the same formula in a different order, a few ulp of float32 apart.
STEP_RTOL, STEP_ATOL = 1e-6, 1e-7


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randint(4, 500, (4, 32), generator=g), torch.randint(4, 500, (4, 32), generator=g)


def test_the_models_logits_are_pinned_bit_for_bit() -> None:
    """Two builds at one seed give the same logits, and a build's logits are a fixed function of its
    weights: recomputed from a state-dict copy, they are equal bit for bit (no kernel choice moves them)."""
    spec = ModelSpec.model_validate(BENCH_LM)
    ids, _ = batch()
    a, b = build_lm(spec, 500, seed=0), build_lm(spec, 500, seed=0)
    assert torch.equal(a(ids), b(ids))
    c = build_lm(spec, 500, seed=1)
    c.load_state_dict(a.state_dict())
    assert torch.equal(c(ids), a(ids))
    with torch.no_grad():  # the values at seed 0, as the model computed them before the speed work
        logits = a(ids).double()
    assert logits[0, 0, :4].tolist() == pytest.approx([0.687613, 0.816263, -0.160379, 0.113523], abs=1e-6)
    assert float(logits.abs().sum()) == pytest.approx(24578.143100881018, rel=1e-9)


def test_one_optimizer_step_matches_torchs_reference_loop_within_the_stated_tolerance() -> None:
    spec = ModelSpec.model_validate(BENCH_LM)
    train = TrainSpec.model_validate({"optimizer": {"name": "adamw", "lr": 3e-3, "betas": [0.9, 0.95],
                                                    "weight_decay": 0.01}})
    ids, targets = batch()
    after = []
    for reference in (False, True):
        model = build_lm(spec, 500, seed=0)
        if reference:
            opt = train.optimizer
            optimizer: torch.optim.Optimizer = torch.optim.AdamW(
                model.parameters(), lr=opt.lr, betas=opt.betas, eps=opt.eps, weight_decay=opt.weight_decay,
                foreach=False)
        else:
            optimizer = build_optimizer(model, train)
            assert optimizer.defaults.get("fused") is True  # the CPU has the fused kernel
        F.cross_entropy(model(ids).flatten(0, 1), targets.flatten()).backward()
        optimizer.step()
        after.append({n: p.detach().clone() for n, p in model.named_parameters()})
    for name, fused in after[0].items():
        assert torch.allclose(fused, after[1][name], rtol=STEP_RTOL, atol=STEP_ATOL), name
    assert any(not torch.equal(after[0][n], after[1][n]) for n in after[0])  # the step did move weights


def test_a_packed_batch_of_one_document_a_row_takes_the_causal_path_with_the_same_numbers() -> None:
    """Blocks inside one long document carry one segment id a row: the model masks them as plain causal
    rows (no (B, 1, T, T) mask), with the same logits bit for bit; a block that mixes documents still masks
    across them."""
    model = build_lm(ModelSpec.model_validate(BENCH_LM), 500, seed=0)
    ids, _ = batch()
    one_doc = torch.full_like(ids, 7)
    assert torch.equal(model(ids, one_doc), model(ids))
    mixed = one_doc.clone()
    mixed[:, 16:] = 8  # a second document from position 16: its first token sees nothing before it
    alone = model(ids[:, 16:])
    assert torch.allclose(model(ids, mixed)[:, 16:], alone, atol=1e-5)
    assert not torch.allclose(model(ids)[:, 16:], alone, atol=1e-3)
