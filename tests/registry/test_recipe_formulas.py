"""The training recipe's variants against their papers, on problems small enough to follow by hand: each
optimizer's step against its published update, each schedule at named steps, the z-loss's gradient and
the soft caps' bounds (registry/optimizer.py, schedule.py, loss.py, logits.py, attention.py)."""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import registry
from ablate.engine.builders import build_lm
from ablate.engine.param_roles import train_params
from ablate.spec.experiment import ModelSpec
from registry.attention import SoftCapAttention
from registry.logits import SoftCapLogits
from registry.loss import ZLoss
from registry.optimizer import EMBEDDING, HIDDEN, NORM, MuonWithAdamW, TrainParam, newton_schulz

pytestmark = pytest.mark.usefixtures("single_thread")


def _param(*shape: int, seed: int = 0) -> nn.Parameter:
    return nn.Parameter(torch.randn(*shape, generator=torch.Generator().manual_seed(seed)))


def _grads(shape: tuple[int, ...], steps: int, seed: int = 1) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*shape, generator=g) for _ in range(steps)]


def _run(optimizer: torch.optim.Optimizer, p: nn.Parameter, grads: list[torch.Tensor]) -> list[torch.Tensor]:
    """Step ``optimizer`` with the given gradients; the parameter after each step."""
    out = []
    for grad in grads:
        p.grad = grad.clone()
        optimizer.step()
        out.append(p.detach().clone())
    return out


def _make(name: str, params: list[TrainParam], lr: float, **options: object) -> torch.optim.Optimizer:
    optimizer: torch.optim.Optimizer = registry.get("optimizer", name)(params, lr, **options)
    return optimizer


# ---------------------------------------------------------------- optimizers
def test_lion_steps_by_the_sign_of_the_interpolated_momentum() -> None:
    """Chen et al. 2023, Algorithm 2: c = b1 m + (1-b1) g; theta -= lr (sign(c) + wd theta);
    m = b2 m + (1-b2) g. Every coordinate moves by exactly lr (+ the decay)."""
    p = _param(3, 4)
    lr, wd, (b1, b2) = 0.01, 0.1, (0.9, 0.99)
    theta, m = p.detach().clone(), torch.zeros(3, 4)
    grads = _grads((3, 4), 3)
    lion = _make("lion", [TrainParam("w", p, HIDDEN)], lr, weight_decay=wd, lion_betas=(b1, b2))
    got = _run(lion, p, grads)
    for grad, after in zip(grads, got, strict=True):
        c = b1 * m + (1 - b1) * grad
        theta = theta - lr * (torch.sign(c) + wd * theta)
        m = b2 * m + (1 - b2) * grad
        torch.testing.assert_close(after, theta, rtol=0, atol=1e-6)


def test_lion_without_decay_moves_every_coordinate_by_exactly_lr() -> None:
    p = _param(5, 2)
    before = p.detach().clone()
    (after,) = _run(_make("lion", [TrainParam("w", p, HIDDEN)], 0.003), p, _grads((5, 2), 1))
    torch.testing.assert_close((after - before).abs(), torch.full((5, 2), 0.003), rtol=0, atol=1e-7)


def test_sgd_nesterov_step_is_sutskevers() -> None:
    """Sutskever et al. 2013 as torch writes it: b = mu b + g; theta -= lr (g + mu b)."""
    p = _param(4)
    lr, mu = 0.1, 0.9
    theta, b = p.detach().clone(), torch.zeros(4)
    grads = _grads((4,), 3)
    got = _run(_make("sgd", [TrainParam("w", p, HIDDEN)], lr, momentum=mu, nesterov=True), p, grads)
    for grad, after in zip(grads, got, strict=True):
        b = mu * b + grad
        theta = theta - lr * (grad + mu * b)
        torch.testing.assert_close(after, theta, rtol=0, atol=1e-6)
    # heavy-ball momentum (nesterov off) is another update: the test can tell them apart
    p2 = _param(4)
    plain = _run(_make("sgd", [TrainParam("w", p2, HIDDEN)], lr, momentum=mu, nesterov=False), p2, grads)
    assert not torch.allclose(plain[1], got[1])


def test_adafactor_keeps_the_factored_second_moment() -> None:
    """Shazeer & Stern 2018, Algorithm 4: R = row means of g^2, C = column means; V_hat = R C / mean(R).
    At step 1 (beta2_1 = 1 - 1^-0.8 = 0) the factors are the gradient's own; for a gradient whose squares
    are rank one, V_hat is g^2 exactly, so the update is sign(g), scaled by max(eps2, RMS(theta)) *
    min(lr, 1/sqrt(t))."""
    p = _param(3, 5)
    u, v = torch.tensor([1.0, -2.0, 0.5]), torch.tensor([0.3, -1.0, 2.0, 1.5, -0.7])
    grad = torch.outer(u, v)  # (3, 5): g^2 = (u^2)(v^2)^T is rank one
    lr = 0.01
    before = p.detach().clone()
    optimizer = _make("adafactor", [TrainParam("w", p, HIDDEN)], lr)
    (after,) = _run(optimizer, p, [grad])
    state = optimizer.state[p]
    torch.testing.assert_close(state["row_var"], (grad**2).mean(dim=-1, keepdim=True))
    torch.testing.assert_close(state["col_var"], (grad**2).mean(dim=-2, keepdim=True))
    v_hat = state["row_var"] @ state["col_var"] / state["row_var"].mean()
    torch.testing.assert_close(v_hat, grad**2, rtol=1e-5, atol=1e-6)
    alpha = max(1e-3, float(before.pow(2).mean().sqrt())) * min(lr, 1.0)
    torch.testing.assert_close(after, before - alpha * torch.sign(grad), rtol=0, atol=1e-6)


def test_adafactor_adds_the_papers_eps1_so_its_update_ignores_the_gradients_scale() -> None:
    """Algorithm 4 adds eps1 = 1e-30 to G^2 before the factored means, so U = G / sqrt(V_hat) is the same for
    G and 1e-4 G: the step does not depend on the gradient's scale. torch.optim.Adafactor clamps the row mean
    at float32's eps (1.19e-7) instead, which at gradient RMS 1e-4 shrinks V_hat and inflates the update
    (update clipping off here, d = 1e6, so that the clip does not hide it)."""
    grads = _grads((6, 10), 3, seed=11)
    steps = {}
    for scale in (1.0, 1e-4):
        p = _param(6, 10, seed=12)
        optimizer = _make("adafactor", [TrainParam("w", p, HIDDEN)], 0.01, adafactor_clip=1e6)
        steps[scale] = _run(optimizer, p, [g * scale for g in grads])[-1]
    torch.testing.assert_close(steps[1e-4], steps[1.0], rtol=0, atol=1e-6)
    start = _param(6, 10, seed=12).detach()
    p = _param(6, 10, seed=12)
    torch_small = _run(torch.optim.Adafactor([p], lr=0.01, d=1e6), p, [g * 1e-4 for g in grads])[-1]
    off = float((torch_small - steps[1e-4]).norm() / (steps[1e-4] - start).norm())
    assert off > 0.5  # torch's step is more than 50% off the paper's here
    p = _param(6, 10, seed=12)
    at_unit = _run(torch.optim.Adafactor([p], lr=0.01, d=1e6), p, grads)[-1]
    torch.testing.assert_close(at_unit, steps[1.0], rtol=0, atol=1e-6)  # the same where its clamps are idle


def test_adafactor_keeps_a_zero_gradient_row_finite() -> None:
    """A row that never gets a gradient (an embedding's unused token) has V_hat = eps1 there, not 0: its
    update is 0, never 0/0."""
    p = _param(4, 5, seed=13)
    grad = _grads((4, 5), 1, seed=14)[0]
    grad[2] = 0.0
    before = p.detach().clone()
    (after,) = _run(_make("adafactor", [TrainParam("w", p, HIDDEN)], 0.01), p, [grad])
    assert torch.isfinite(after).all()
    torch.testing.assert_close(after[2], before[2], rtol=0, atol=0)


def _singular_values(x: torch.Tensor) -> torch.Tensor:
    return torch.linalg.svdvals(x.float())


def test_newton_schulz_iterate_is_near_orthogonal_with_the_matrix_singular_vectors() -> None:
    """Jordan et al. 2024: 5 quintic iterations from M / ||M||_F put every singular value in about
    [0.7, 1.2] (not exactly 1: the coefficients maximise the slope at zero) and keep M's singular vectors,
    so the iterate is close to U V^T."""
    m = torch.randn(16, 48, generator=torch.Generator().manual_seed(3))
    x = newton_schulz(m)
    s = _singular_values(x)
    assert float(s.min()) > 0.6 and float(s.max()) < 1.25, s
    u, _, vh = torch.linalg.svd(m, full_matrices=False)
    polar = u @ vh
    # X = U S' V^T: projected on U and V^T, only the diagonal S' is left
    core = u.T @ x @ vh.T
    off = core - torch.diag(torch.diagonal(core))
    assert float(off.abs().max()) < 1e-3
    cosine = float((x * polar).sum() / (x.norm() * polar.norm()))
    assert cosine > 0.97
    tall = newton_schulz(m.T)  # a tall matrix is orthogonalised on its smaller side
    torch.testing.assert_close(tall, x.T, rtol=1e-4, atol=1e-5)


def test_muon_steps_hidden_matrices_along_the_orthogonalised_momentum_and_the_rest_with_adamw() -> None:
    """One step from zero momentum: Nesterov's update is (1 - mu) g + mu^2 ... = g (1 - mu^2) for torch's
    EMA momentum; its Newton-Schulz iterate times lr * sqrt(max(1, rows/cols)) is the matrix's step. The
    embedding and the norm's gain step exactly as AdamW steps them."""
    hidden, embed, gain = _param(8, 24, seed=1), _param(10, 8, seed=2), _param(8, seed=3)
    params = [TrainParam("layer.w", hidden, HIDDEN), TrainParam("embed.weight", embed, EMBEDDING),
              TrainParam("norm.weight", gain, NORM)]
    before = {name: p.detach().clone() for name, p in (("h", hidden), ("e", embed), ("g", gain))}
    lr = 0.02
    optimizer = _make("muon", params, lr)
    assert isinstance(optimizer, MuonWithAdamW)
    assert {id(p) for g in optimizer.muon.param_groups for p in g["params"]} == {id(hidden)}
    grads = {"h": _grads((8, 24), 1, seed=4)[0], "e": _grads((10, 8), 1, seed=5)[0], "g": _grads((8,), 1)[0]}
    for name, p in (("h", hidden), ("e", embed), ("g", gain)):
        p.grad = grads[name].clone()
    optimizer.step()
    mu = 0.95
    nesterov = grads["h"] * (1 - mu) + mu * (grads["h"] * (1 - mu))  # g.lerp(buf, mu), buf = (1 - mu) g
    expected = before["h"] - lr * math.sqrt(max(1.0, 8 / 24)) * newton_schulz(nesterov)
    # torch runs the iteration in bf16: agreement to bf16's resolution of a unit-scale iterate
    assert float((hidden.detach() - expected).abs().max()) < lr * 2e-2
    reference = [nn.Parameter(before["e"].clone()), nn.Parameter(before["g"].clone())]
    adamw = torch.optim.AdamW(reference, lr=lr, betas=(0.9, 0.98), eps=1e-9, weight_decay=0.0)
    reference[0].grad, reference[1].grad = grads["e"].clone(), grads["g"].clone()
    adamw.step()
    torch.testing.assert_close(embed.detach(), reference[0].detach(), rtol=0, atol=0)
    torch.testing.assert_close(gain.detach(), reference[1].detach(), rtol=0, atol=0)


def test_muon_update_rms_matching_is_liu_et_als_scale() -> None:
    """Liu et al. 2025, eq. 4: with match_adamw the orthogonalised update is scaled by 0.2 sqrt(max(A, B)),
    so its RMS is about 0.2, AdamW's typical update RMS, whatever the matrix's shape."""
    for rows, cols in ((8, 24), (32, 32), (64, 16)):
        p = _param(rows, cols, seed=rows)
        before = p.detach().clone()
        optimizer = _make("muon", [TrainParam("w", p, HIDDEN)], 1.0, muon_update_rms="match_adamw",
                          muon_nesterov=False, muon_momentum=0.0)
        (after,) = _run(optimizer, p, _grads((rows, cols), 1, seed=cols))
        rms = float((after - before).pow(2).mean().sqrt())
        assert 0.13 < rms < 0.25, (rows, cols, rms)


def test_muon_steps_an_unfused_matrix_exactly_as_torchs_muon() -> None:
    for rule, torch_rule in (("original", "original"), ("match_adamw", "match_rms_adamw")):
        ours, theirs = _param(24, 8, seed=20), _param(24, 8, seed=20)
        optimizer = _make("muon", [TrainParam("w", ours, HIDDEN)], 0.02, weight_decay=0.1,
                          muon_update_rms=rule)
        reference = torch.optim.Muon([theirs], lr=0.02, weight_decay=0.1, adjust_lr_fn=torch_rule)
        grads = _grads((24, 8), 3, seed=21)
        torch.testing.assert_close(_run(optimizer, ours, grads)[-1], _run(reference, theirs, grads)[-1],
                                   rtol=0, atol=0)


def test_muon_orthogonalises_q_k_and_v_of_a_fused_projection_separately() -> None:
    """Jordan et al.'s note (and the speedrun): the fused QKV weight is three matrices; each block steps as
    torch.optim.Muon steps that matrix alone (its own Newton-Schulz iterate and its own shape's scale), with
    grouped K and V narrower than Q. The fused weight orthogonalised whole would differ."""
    rows = (16, 8, 8)  # Q (d 16), K and V (2 kv heads of 4)
    fused = _param(32, 16, seed=22)
    grads = _grads((32, 16), 3, seed=23)
    optimizer = _make("muon", [TrainParam("attn.qkv.weight", fused, HIDDEN, chunks=rows)], 0.02,
                      weight_decay=0.1)
    after = _run(optimizer, fused, grads)[-1]
    start = _param(32, 16, seed=22).detach()
    for block, w in enumerate(start.split(list(rows))):
        alone = nn.Parameter(w.clone())
        block_grads = [g.split(list(rows))[block] for g in grads]
        expected = _run(torch.optim.Muon([alone], lr=0.02, weight_decay=0.1), alone, block_grads)[-1]
        torch.testing.assert_close(after.split(list(rows))[block], expected, rtol=0, atol=0)
    whole = nn.Parameter(start.clone())
    together = _run(torch.optim.Muon([whole], lr=0.02, weight_decay=0.1), whole, grads)[-1]
    assert float((together - after).abs().max()) > 1e-3


def test_the_model_gives_muon_the_fused_projections_blocks() -> None:
    """The engine reads each fused Linear's blocks (registry/attention.py fused_chunks) into TrainParam:
    self-attention's QKV as (d, kv, kv), grouped or not; every other matrix as one."""
    for kv_heads, expected in ((None, (32, 32, 32)), (2, (32, 16, 16))):
        spec = ModelSpec(arch="decoder_only", d_model=32, heads=4, d_ff=64, decoder_layers=1, dropout=0.0,
                         max_positions=16, kv_heads=kv_heads)
        blocks = {p.name: p.chunks for p in train_params(build_lm(spec, 20, seed=0))}
        fused = {name: c for name, c in blocks.items() if c}
        assert list(fused.values()) == [expected], fused
        assert all(".qkv." in name for name in fused)


def test_relu2_is_the_squared_relu_and_its_gradient() -> None:
    """So et al. 2021 (Primer), section 3: ReLU^2(x) = max(0, x)^2, derivative 2 max(0, x)."""
    x = torch.tensor([-2.0, -0.5, 0.0, 0.25, 1.0, 3.0], requires_grad=True)
    act = registry.get("activation", "relu2")()
    y = act(x)
    torch.testing.assert_close(y, torch.tensor([0.0, 0.0, 0.0, 0.0625, 1.0, 9.0]))
    y.sum().backward()
    assert x.grad is not None
    torch.testing.assert_close(x.grad, torch.tensor([0.0, 0.0, 0.0, 0.5, 2.0, 6.0]))


def test_muon_state_round_trips_through_its_state_dict() -> None:
    hidden, embed = _param(6, 6, seed=1), _param(5, 6, seed=2)
    params = [TrainParam("w", hidden, HIDDEN), TrainParam("e", embed, EMBEDDING)]
    optimizer = _make("muon", params, 0.01)
    for grad_h, grad_e in zip(_grads((6, 6), 2), _grads((5, 6), 2, seed=7), strict=True):
        hidden.grad, embed.grad = grad_h, grad_e
        optimizer.step()
    saved = copy.deepcopy(optimizer.state_dict())  # as a checkpoint on disk holds it
    clone_h, clone_e = nn.Parameter(hidden.detach().clone()), nn.Parameter(embed.detach().clone())
    restored = _make("muon", [TrainParam("w", clone_h, HIDDEN), TrainParam("e", clone_e, EMBEDDING)], 0.01)
    restored.load_state_dict(saved)
    assert restored.param_groups[0] is restored.muon.param_groups[0]  # the groups are shared again
    for opt, (h, e) in ((optimizer, (hidden, embed)), (restored, (clone_h, clone_e))):
        h.grad, e.grad = _grads((6, 6), 1, seed=9)[0], _grads((5, 6), 1, seed=10)[0]
        opt.step()
    torch.testing.assert_close(clone_h, hidden, rtol=0, atol=0)
    torch.testing.assert_close(clone_e, embed, rtol=0, atol=0)


# ---------------------------------------------------------------- schedules
def _at(name: str, step: int, warmup: int = 10, total: int | None = 110, **options: object) -> float:
    return float(registry.get("schedule", name)(step, warmup=warmup, total=total, **options))


def test_every_schedule_warms_up_linearly_to_the_peak() -> None:
    for name in registry.names("schedule"):
        assert _at(name, 0) == pytest.approx(0.1), name  # (0 + 1) / 10
        assert _at(name, 4) == pytest.approx(0.5), name
        assert _at(name, 9) == pytest.approx(1.0), name  # the warm-up's last step is the peak


def test_cosine_linear_and_inverse_sqrt_at_named_steps() -> None:
    # 100 steps after a warm-up of 10: half-way is step 59 ((59 + 1 - 10) / 100)
    assert _at("cosine", 59) == pytest.approx(0.5)
    assert _at("cosine", 59, min_lr_ratio=0.1) == pytest.approx(0.1 + 0.9 * 0.5)
    assert _at("cosine", 109, min_lr_ratio=0.1) == pytest.approx(0.1)  # the last step: the floor
    assert _at("cosine", 500, min_lr_ratio=0.1) == pytest.approx(0.1)  # and beyond it
    assert _at("linear", 59) == pytest.approx(0.5)
    assert _at("linear", 34) == pytest.approx(0.75)
    assert _at("linear", 109, min_lr_ratio=0.2) == pytest.approx(0.2)
    assert _at("inverse_sqrt", 39) == pytest.approx(math.sqrt(10 / 40))  # sqrt(w / s): a quarter -> 1/2
    assert _at("inverse_sqrt", 3, warmup=0) == pytest.approx(0.5)  # 1 / sqrt(4)
    assert _at("constant", 100) == 1.0 and _at("constant", 0, warmup=0) == 1.0


def test_wsd_holds_the_peak_then_decays_over_its_fraction() -> None:
    """Hägele et al. 2024: total 110, decay fraction 0.2 -> the last 22 steps (88..109) decay."""
    opts = {"wsd_decay_fraction": 0.2, "min_lr_ratio": 0.0}
    assert _at("wsd", 10, wsd_shape="linear", **opts) == 1.0  # stable right after the warm-up
    assert _at("wsd", 87, wsd_shape="linear", **opts) == 1.0  # the stable phase's last step
    assert _at("wsd", 109, wsd_shape="linear", **opts) == pytest.approx(0.0)  # the floor at the end
    # half-way through the decay, x = 11 / 22
    assert _at("wsd", 98, wsd_shape="linear", **opts) == pytest.approx(0.5)
    assert _at("wsd", 98, wsd_shape="cosine", **opts) == pytest.approx(0.5)
    assert _at("wsd", 98, wsd_shape="1-sqrt", **opts) == pytest.approx(1 - math.sqrt(0.5))
    assert _at("wsd", 92, wsd_shape="cosine", **opts) == pytest.approx(0.5 * (1 + math.cos(math.pi * 5 / 22)))
    assert _at("wsd", 109, wsd_shape="1-sqrt", wsd_decay_fraction=0.2, min_lr_ratio=0.1) == pytest.approx(0.1)
    # a fraction of 1: the decay takes every step after the warm-up, as a cosine or linear schedule does
    for step in (10, 40, 77, 109):
        whole = _at("wsd", step, wsd_shape="linear", wsd_decay_fraction=1.0)
        assert whole == pytest.approx(_at("linear", step))


def test_the_trainer_reads_the_schedule_from_the_registry_and_keeps_the_old_values() -> None:
    """lr_factor is the registered schedule; the three schedules of before give their old values."""
    from ablate.engine.trainer import lr_factor
    from ablate.spec.experiment import TrainSpec

    spec = TrainSpec.model_validate({"schedule": {"name": "cosine", "warmup_steps": 10, "min_lr_ratio": 0.1},
                                     "max_steps": 110})
    assert lr_factor(59, spec) == pytest.approx(0.55)
    noam = TrainSpec.model_validate({"schedule": {"name": "inverse_sqrt", "warmup_steps": 4}})
    assert [lr_factor(s, noam) for s in (0, 3, 15)] == [0.25, 1.0, 0.5]


# ---------------------------------------------------------------- loss terms and caps
def test_z_loss_adds_alpha_log_z_squared_and_its_gradient() -> None:
    """PaLM's z-loss: alpha log^2 Z; d/dz_i = 2 alpha log Z softmax(z)_i, on top of the cross-entropy's."""
    logits = torch.randn(6, 11, generator=torch.Generator().manual_seed(0)) * 3
    targets = torch.tensor([1, 4, -100, 7, 0, 10])  # one ignored position
    alpha = 1e-2
    z = logits.clone().requires_grad_(True)
    loss = ZLoss(alpha)(z, targets, ignore_index=-100)
    kept = targets != -100
    log_z = torch.logsumexp(logits[kept], dim=-1)
    ce = F.cross_entropy(logits, targets, ignore_index=-100)
    torch.testing.assert_close(loss, ce + alpha * log_z.square().mean())
    loss.backward()
    ce_z = logits.clone().requires_grad_(True)
    F.cross_entropy(ce_z, targets, ignore_index=-100).backward()
    assert ce_z.grad is not None and z.grad is not None
    expected = torch.zeros_like(logits)
    expected[kept] = 2 * alpha * log_z[:, None] * torch.softmax(logits[kept], dim=-1) / int(kept.sum())
    torch.testing.assert_close(z.grad - ce_z.grad, expected, rtol=1e-5, atol=1e-7)
    assert float(z.grad[~kept].abs().max()) == 0.0  # an ignored position gets no gradient at all


def test_the_plain_cross_entropy_variant_is_torchs() -> None:
    logits, targets = torch.randn(5, 7), torch.tensor([0, 3, 6, 2, 1])
    ce = registry.get("loss", "cross_entropy")()
    assert torch.equal(ce(logits, targets, label_smoothing=0.1), F.cross_entropy(logits, targets,
                                                                                  label_smoothing=0.1))


def test_final_logit_soft_cap_is_bounded_and_near_identity_for_small_logits() -> None:
    """Gemma 2: c tanh(z / c) lies in (-c, c), and is about z where |z| << c."""
    cap = SoftCapLogits(30.0)
    z = torch.tensor([-1e6, -300.0, -1.0, 0.0, 0.5, 29.0, 1e6])
    out = cap(z)
    assert float(out.abs().max()) <= 30.0  # tanh saturates to exactly 1 in float32 far out
    assert bool((out.abs() < 30.0)[2:-1].all())
    torch.testing.assert_close(out[2:5], z[2:5], rtol=2e-3, atol=1e-3)
    torch.testing.assert_close(out, 30.0 * torch.tanh(z / 30.0))


def test_attention_soft_cap_bounds_every_score_before_the_softmax() -> None:
    """The capped core's attention equals softmax(c tanh(q k^T / sqrt(d) / c)) V, however large the scores."""
    torch.manual_seed(0)
    attn = SoftCapAttention(8, 2, attn_softcap=5.0).eval()
    q, k, v = (torch.randn(1, 2, 4, 4) * 40 for _ in range(3))  # scores in the thousands
    out = attn.attend(q, k, v, None)
    scores = 5.0 * torch.tanh(q @ k.transpose(-2, -1) / 2.0 / 5.0)  # 1/sqrt(d_head 4) = 1/2
    assert float(scores.abs().max()) <= 5.0
    torch.testing.assert_close(out, torch.softmax(scores, dim=-1) @ v, rtol=1e-5, atol=1e-5)
