"""One contract for every registered variant of the training recipe's axes (optimizer, schedule, loss),
plugins included: the cases come from ``registry.axes("train.optimizer")`` and its kin, so a new variant is
covered without touching this file.

- an optimizer, built the trainer's way (``build_optimizer``: parameter roles, the no-decay rule, the
  schedule's LambdaLR), steps every parameter, lowers the loss of a fixed batch, survives a checkpoint
  (saved and loaded through ``torch.save``: the resumed steps equal the uninterrupted ones bit for bit) and
  runs under a GradScaler with ``unscale_`` before clipping, as the trainer does;
- every no-decay rule leaves exactly its roles out of weight decay;
- a schedule warms up linearly to 1 at the end of the warm-up and stays in [0, 1] up to and past the end;
- a loss is finite with finite gradients, ignores the ignored positions and is at least the cross-entropy
  it adds to.
"""

from __future__ import annotations

import copy
import dataclasses
import io
import json
import math

import pytest
import torch
import torch.nn.functional as F

import registry
from ablate.engine.builders import build_lm
from ablate.engine.param_roles import parameter_roles
from ablate.engine.trainer import build_optimizer, lr_factor
from ablate.spec.experiment import ModelSpec, TrainSpec
from registry.optimizer import NO_DECAY_RULES

pytestmark = pytest.mark.usefixtures("single_thread")
registry.load_plugins()

V = 29
OPTIMIZERS = registry.names("optimizer")
SCHEDULES = registry.names("schedule")
LOSSES = registry.names("loss")


def _model(seed: int = 0) -> torch.nn.Module:
    spec = ModelSpec(arch="decoder_only", d_model=16, heads=2, d_ff=32, decoder_layers=2, dropout=0.0,
                     max_positions=32, embeddings="separate")
    return build_lm(spec, V, seed=seed)


def _train(name: str, **optimizer: object) -> TrainSpec:
    return TrainSpec.model_validate({"optimizer": {"name": name, "lr": 3e-3, **optimizer},
                                     "schedule": {"name": "constant", "warmup_steps": 2}, "max_steps": 50})


def _batch(seed: int = 0) -> torch.Tensor:
    return torch.randint(3, V, (4, 13), generator=torch.Generator().manual_seed(seed))


def _loss(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    logits = model(ids[:, :-1])
    return F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten())


def _step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler: object,
          ids: torch.Tensor) -> float:
    optimizer.zero_grad(set_to_none=True)
    loss = _loss(model, ids)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    scheduler.step()  # type: ignore[attr-defined]
    return float(loss.detach())


def _schedule(optimizer: torch.optim.Optimizer, spec: TrainSpec) -> torch.optim.lr_scheduler.LambdaLR:
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_factor(s, spec))


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_an_optimizer_steps_every_parameter_and_lowers_the_loss(name: str) -> None:
    model, spec = _model(), _train(name)
    optimizer = build_optimizer(model, spec)
    scheduler = _schedule(optimizer, spec)
    grouped = [p for g in optimizer.param_groups for p in g["params"]]
    assert sorted(map(id, grouped)) == sorted(id(p) for p in model.parameters())  # each once
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    ids = _batch()
    first = _step(model, optimizer, scheduler, ids)
    moved = [n for n, p in model.named_parameters() if not torch.equal(p.detach(), before[n])]
    assert len(moved) == len(before), set(before) - set(moved)
    for _ in range(15):
        last = _step(model, optimizer, scheduler, ids)
    assert math.isfinite(last) and last < first, (first, last)


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_an_optimizer_resumes_from_its_checkpoint_exactly(name: str) -> None:
    model, spec = _model(), _train(name)
    optimizer = build_optimizer(model, spec)
    scheduler = _schedule(optimizer, spec)
    for i in range(3):
        _step(model, optimizer, scheduler, _batch(i))
    buffer = io.BytesIO()
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict()}, buffer)
    buffer.seek(0)
    saved = torch.load(buffer, weights_only=True)
    resumed = _model(seed=1)  # other weights, replaced by the checkpoint's
    resumed.load_state_dict(saved["model"])
    optimizer2 = build_optimizer(resumed, spec)
    scheduler2 = _schedule(optimizer2, spec)
    optimizer2.load_state_dict(saved["optimizer"])
    scheduler2.load_state_dict(saved["scheduler"])
    for i in range(3, 6):
        _step(model, optimizer, scheduler, _batch(i))
        _step(resumed, optimizer2, scheduler2, _batch(i))
    for (n, a), (_, b) in zip(model.state_dict().items(), resumed.state_dict().items(), strict=True):
        assert torch.equal(a, b), n


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_an_optimizer_runs_under_a_grad_scaler_as_the_trainer_drives_it(name: str) -> None:
    model, spec = _model(), _train(name)
    optimizer = build_optimizer(model, spec)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**8)
    for i in range(3):
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(_loss(model, _batch(i))).backward()
        scaler.unscale_(optimizer)  # clip true gradients: every group's parameters are unscaled
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
    assert all(torch.isfinite(p).all() for p in model.parameters())


@pytest.mark.parametrize("rule", list(NO_DECAY_RULES))
def test_the_no_decay_rule_leaves_exactly_its_roles_undecayed(rule: str) -> None:
    model = _model()
    roles = parameter_roles(model)
    names = {id(p): n for n, p in model.named_parameters()}
    for name in OPTIMIZERS:
        optimizer = build_optimizer(model, _train(name, weight_decay=0.1, no_decay=rule))
        for group in optimizer.param_groups:
            for p in group["params"]:
                exempt = roles[names[id(p)]] in NO_DECAY_RULES[rule]
                assert group["weight_decay"] == (0.0 if exempt else 0.1), (name, rule, names[id(p)])


@pytest.mark.parametrize("name", SCHEDULES)
def test_a_schedule_warms_up_to_the_peak_and_stays_in_range(name: str) -> None:
    schedule = registry.get("schedule", name)
    options = TrainSpec.model_validate({"schedule": {"name": name}}).schedule.option_values()
    warmup, total = 8, 40
    values = [schedule(step, warmup=warmup, total=total, **options) for step in range(2 * total)]
    assert values[:warmup] == pytest.approx([(s + 1) / warmup for s in range(warmup)])
    assert all(0.0 <= v <= 1.0 + 1e-12 for v in values), name
    assert registry.REGISTRY.entry("schedule", name).summary  # a docstring naming its origin
    if getattr(schedule, "needs_total", False):
        with pytest.raises(ValueError, match="total_steps"):
            schedule(warmup + 1, warmup=warmup, total=None, **options)


@pytest.mark.parametrize("name", LOSSES)
def test_a_loss_is_finite_ignores_ignored_positions_and_adds_to_the_cross_entropy(name: str) -> None:
    options = TrainSpec.model_validate({"loss": {"name": name}}).loss.option_values()
    loss_fn = registry.get("loss", name)(**options)
    logits = (torch.randn(7, V, generator=torch.Generator().manual_seed(0)) * 4).requires_grad_(True)
    targets = torch.tensor([1, 5, -100, 3, 9, -100, 0])
    loss = loss_fn(logits, targets, ignore_index=-100, label_smoothing=0.1)
    loss.backward()
    assert loss.dim() == 0 and math.isfinite(float(loss.detach()))
    assert logits.grad is not None and torch.isfinite(logits.grad).all()
    assert float(logits.grad[targets == -100].abs().max()) == 0.0
    ce = F.cross_entropy(logits.detach(), targets, ignore_index=-100, label_smoothing=0.1)
    assert float(loss.detach()) >= float(ce) - 1e-6
    copy.deepcopy(loss_fn)  # a loss holds no state the trainer would need to checkpoint
    assert not list(loss_fn.parameters())


def test_a_recipe_variants_version_enters_only_its_own_runs_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    """Raising lion's implementation version makes lion's runs new cells (and stale ones tagged so), and
    leaves every other optimizer's run where it was (registry/__init__.py, Entry.version)."""
    from ablate.spec.experiment import ExperimentSpec
    from ablate.tracking.versions import stale_reason, versions_tag

    def spec(name: str) -> ExperimentSpec:
        return ExperimentSpec.model_validate({"name": "v", "train": {"optimizer": {"name": name}}})

    before = {name: spec(name).spec_hash for name in ("lion", "adamw")}
    bucket = registry.REGISTRY._entries["optimizer"]
    monkeypatch.setitem(bucket, "lion", dataclasses.replace(bucket["lion"], version=2))
    assert spec("lion").spec_hash != before["lion"] and spec("adamw").spec_hash == before["adamw"]
    assert json.loads(versions_tag(spec("lion"))["ablate.component_versions"]) == {"optimizer": 2}
    assert versions_tag(spec("adamw")) == {}
    params = {"train.optimizer.name": "lion", "model.norm": "builtin"}
    assert stale_reason(params, {}) == "optimizer=lion v1, now v2"
    assert stale_reason(params, {"ablate.component_versions": '{"optimizer": 2}'}) is None
