"""The numbers the speed work must not move (docs/benchmarks.md, "A step as fast as the best LM codebases"):
the decoder-only model's logits at a fixed seed, bit for bit, and one optimizer step of the trainer's
optimizer (torch's fused Adam/AdamW kernel) against torch's reference per-parameter loop, within a stated
tolerance; RoPE's PairRotation against its pairwise formula, bit for bit, forward and backward; the
trainer's chunked loss against cross-entropy of the whole logits, within a stated tolerance."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import registry
import registry.positions
from ablate.data.lm_corpus import IGNORE
from ablate.engine.builders import build_lm
from ablate.engine.token_loss import token_loss
from ablate.engine.trainer import build_optimizer
from ablate.hardware import autocast_context
from ablate.spec.experiment import ModelSpec, TrainSpec
from registry.positions import rotate_pairs

BENCH_LM = {"arch": "decoder_only", "d_model": 64, "heads": 4, "decoder_layers": 2, "d_ff": 256,
            "activation": "gelu", "positions": "rope", "embeddings": "separate", "dropout": 0.0,
            "max_positions": 32}
# One AdamW step of the fused kernel lands within this of the reference loop's (relative to the weight):
# the two round the same formula in a different order, a few ulp of float32 apart.
STEP_RTOL, STEP_ATOL = 1e-6, 1e-7
CPU = torch.device("cpu")


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
    # float32 sums are ordered by the CPU's kernels: another CPU moved this one by 3e-9 relative
    assert float(logits.abs().sum()) == pytest.approx(24578.143100881018, rel=1e-7)


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



@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", [(3, 10, 2, 8), (2, 128, 4, 64)])
def test_ropes_pair_rotation_is_its_pairwise_formula_bit_for_bit_forward_and_backward(
        dtype: torch.dtype, shape: tuple[int, int, int, int]) -> None:
    """On the head views the attention rotates (strided views of the fused q/k/v projection), PairRotation
    gives the pairwise formula's values and gradients exactly, in float32 and bfloat16."""
    g = torch.Generator().manual_seed(2)
    B, T, heads, d_head = shape
    rope = registry.get("positions", "rope")(heads * d_head, heads, T, 0.0, causal=True)
    cos, sin = rope.cos, rope.sin  # (T, d_head/2)
    fused = torch.randn(B, T, 3 * heads * d_head, generator=g).to(dtype)
    upstream = torch.randn(B, heads, T, d_head, generator=g).to(dtype)
    results = []
    for rotate in (lambda x: rotate_pairs(x, cos, sin), rope.attention(0, T, T, CPU).rotate):
        projected = fused.clone().requires_grad_()
        q, k, _ = (t.transpose(1, 2) for t in projected.view(B, T, 3, heads, d_head).unbind(2))
        out = rotate(q) + 2 * rotate(k)  # (B, heads, T, d_head)
        out.backward(upstream)
        results.append((out.detach(), projected.grad))
    (formula, formula_grad), (fast, fast_grad) = results
    assert fast.dtype == dtype and torch.equal(fast, formula)
    assert torch.equal(fast_grad, formula_grad)
    assert not torch.equal(formula, q.detach() + 2 * k.detach())  # it did rotate


class FormulaRotation:
    """Stands in for PairRotation: the pairwise formula itself, on the tables' cosines and sines."""

    @staticmethod
    def apply(x: torch.Tensor, cos_pairs: torch.Tensor, sin_pairs: torch.Tensor) -> torch.Tensor:
        return rotate_pairs(x, cos_pairs[..., 0::2], sin_pairs[..., 0::2])


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_rope_models_logits_and_gradients_are_the_pairwise_formulas_bit_for_bit(
        precision: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole model, forward and backward, with PairRotation and with the formula as written: the same
    logits and every parameter's gradient bit for bit."""
    ids, targets = batch()
    runs = []
    for rotation in (registry.positions.PairRotation, FormulaRotation):
        monkeypatch.setattr(registry.positions, "PairRotation", rotation)
        model = build_lm(ModelSpec.model_validate(BENCH_LM), 500, seed=0)
        with autocast_context(precision, CPU):
            logits = model(ids)
        F.cross_entropy(logits.float().flatten(0, 1), targets.flatten()).backward()
        runs.append((logits.detach(), {n: p.grad for n, p in model.named_parameters()}))
    assert torch.equal(runs[0][0], runs[1][0])
    assert all(torch.equal(grad, runs[1][1][name]) for name, grad in runs[0][1].items())


# The trainer's chunked loss against cross-entropy of the whole logits (tests/engine/test_token_loss.py):
# every parameter's gradient within this of its largest value, in float32 and under bf16 autocast
LOSS_RTOL = {"fp32": 1e-5, "bf16": 2e-2}
LR = 3e-3


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("embeddings", ["separate", "tied"])
def test_the_trainers_chunked_loss_moves_one_step_as_the_whole_logits_loss_within_the_stated_tolerance(
        precision: str, embeddings: str) -> None:
    ids, targets = batch()
    targets[:, :3] = IGNORE  # some unscored targets, as a window's already scored prefix
    losses, grads, steps = [], [], []
    for chunked in (True, False):
        model = build_lm(ModelSpec.model_validate({**BENCH_LM, "embeddings": embeddings}), 500, seed=0)
        with autocast_context(precision, CPU):
            if chunked:
                loss = token_loss(model(ids, project=False), model.generator, targets, IGNORE)
            else:
                logits = model(ids).float().flatten(0, 1)  # (B*T, V)
                loss = F.cross_entropy(logits, targets.flatten(), ignore_index=IGNORE)
        loss.backward()
        losses.append(float(loss.detach()))
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
        build_optimizer(model, TrainSpec.model_validate({"optimizer": {"name": "adamw", "lr": LR}})).step()
        steps.append({n: p.detach().clone() for n, p in model.named_parameters()})
    assert losses[0] == pytest.approx(losses[1], rel=1e-6)
    assert grads[0].keys() == grads[1].keys() and "generator.bias" in grads[0]
    for name, grad in grads[0].items():
        largest = float(grads[1][name].abs().max())
        assert float((grad - grads[1][name]).abs().max()) <= LOSS_RTOL[precision] * largest, name
    for name, weight in steps[0].items():
        # Adam's first step is lr * g / (|g| + eps), about lr * sign(g): where the reference gradient stands
        # well clear of the two gradients' stated disagreement, the two steps are the same to float32's
        # rounding; near zero a sign may differ (a step of 2 lr), as any rounding of the gradient may flip it.
        reference = grads[1][name]
        clear = reference.abs() > 10 * LOSS_RTOL[precision] * float(reference.abs().max())
        assert bool(clear.any()), name
        assert float((weight - steps[1][name]).abs()[clear].max()) <= 1e-3 * LR, name
