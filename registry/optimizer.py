"""Optimizers (axis ``optimizer``, a recipe axis: the spec's ``train.optimizer.name``).

Component contract: a factory ``fn(params: list[TrainParam], lr: float, *, weight_decay: float,
**options) -> torch.optim.Optimizer``. ``params`` are the model's parameters, each with its name, its
``role`` in the model (a hidden weight matrix, an embedding, the output head, a norm's gain, a bias, or
another component parameter), the multiplier of the learning rate its parametrisation gives it
(``lr_scale``: muP's per-group learning rate, 1 under the standard one) and whether it is weight-decayed
(``decay``: the axis-wide ``no_decay`` rule). :func:`param_groups` turns them into torch parameter groups,
one per (lr_scale, decay), each keeping its ``lr_scale`` so that the trainer logs the schedule's learning
rate whatever the group. The trainer's schedule multiplies every group's learning rate (LambdaLR), so a
group's rate stays ``lr * lr_scale * schedule(step)``.

A factory may carry ``mup_rule``: how muP scales its per-group learning rates (Yang et al. 2022, Table 3):
``"adam"`` for optimizers that normalise the gradient entrywise (a hidden matrix's rate / width
multiplier), ``"sgd"`` for SGD (vector-like parameters' rate x width multiplier), None where muP's table
does not say (the spec refuses ``parametrisation: mup`` with it).

Defaults are each paper's where the paper gives one; every optimizer's step is checked against its
published update in tests/registry/test_recipe_formulas.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from registry import Axis, Option, declare_axis, register
from registry.optimizer_steps import BlockMuon, MuonWithAdamW, PaperAdafactor
from registry.optimizer_steps import (
    newton_schulz as newton_schulz,  # the iterate the tests check Muon against
)

# Parameter roles, as the engine classifies the model's parameters (ablate/engine/param_roles.py).
HIDDEN = "hidden"  # a 2-D (or kernel) weight inside the layers: attention projections, FFN matrices
EMBEDDING = "embedding"  # token embedding tables (an output head tied to one is an embedding)
OUTPUT = "output"  # the output projection's own weight (untied)
NORM = "norm"  # a norm's gain or bias
BIAS = "bias"  # a Linear or Conv1d bias
OTHER = "other"  # any other component parameter (QK-norm's gain, T5's bias table, ReZero's gate)
ROLES = (HIDDEN, EMBEDDING, OUTPUT, NORM, BIAS, OTHER)

# The no-weight-decay rule: which roles are left out of weight decay.
NO_DECAY_RULES: dict[str, tuple[str, ...]] = {
    "none": (),
    "norms_biases": (NORM, BIAS, OTHER),
    "norms_biases_embeddings": (NORM, BIAS, OTHER, EMBEDDING),
}

WEIGHT_DECAY = Option(
    "weight_decay", float, 0.0,
    "weight decay: L2 added to the gradient for sgd and adam, decoupled (theta -= lr * wd * theta) for "
    "adamw, adafactor, lion and muon", ge=0.0, lt=1.0,
)
NO_DECAY = Option(
    "no_decay", str, "none",
    "which parameters get no weight decay: none (every parameter decays: torch's default and every run "
    "before this option), norms_biases (norm gains, biases and other parameters below two dimensions: "
    "nanoGPT's rule, embeddings decay), norms_biases_embeddings (the same and the embeddings: minGPT's and "
    "OLMo's rule); the run records the groups it made (tag ablate.param_groups)",
    choices=tuple(NO_DECAY_RULES), added_later=True,
)

AXIS = declare_axis(Axis(
    kind="optimizer",
    default="adam",
    doc="the optimizer, over the model's parameter groups (the no-decay rule, muP's per-group rates)",
    contract="fn(params: list[TrainParam], lr, *, weight_decay, **options) -> torch.optim.Optimizer",
    hooks=("the trainer: one optimizer stepping every parameter; the schedule scales each group's rate",),
    options=(WEIGHT_DECAY, NO_DECAY),
    section="train.optimizer",
))


@dataclass(frozen=True)
class TrainParam:
    """One trainable parameter as an optimizer factory receives it."""

    name: str
    param: nn.Parameter
    role: str  # one of ROLES
    lr_scale: float = 1.0  # muP's multiplier of the learning rate (1: the standard parametrisation)
    decay: bool = True  # weight-decayed (the no_decay rule)
    # A fused weight's row blocks, each a matrix of its own (a fused QKV projection: (d, kv, kv)); empty:
    # the weight is one matrix. Muon orthogonalises each block separately (Jordan et al. 2024).
    chunks: tuple[int, ...] = ()


def param_groups(params: Iterable[TrainParam], lr: float, weight_decay: float,
                 lr_ratio: float = 1.0) -> list[dict[str, Any]]:
    """torch parameter groups, one per (lr_scale, decay) in order of first appearance: learning rate
    ``lr * lr_scale * lr_ratio``, weight decay ``weight_decay / lr_scale`` or 0. The standard parametrisation
    without a no-decay rule gives one group of every parameter in model order, as ``cls(model.parameters())``
    did.

    Under muP the decay is divided by the group's learning-rate multiplier, as the ``mup`` package's MuAdam,
    MuAdamW and MuSGD do by default (``decoupled_wd=False``: a hidden matrix's ``lr /= width_mult`` with
    ``weight_decay *= width_mult``): the decay each step applies, ``lr * weight_decay`` (AdamW's decoupled
    ``theta *= 1 - lr wd``, or SGD's and Adam's L2 term times the rate), is then the same at every width,
    as at the base width where the decay was tuned."""
    groups: dict[tuple[float, bool], dict[str, Any]] = {}
    for p in params:
        key = (p.lr_scale * lr_ratio, p.decay)
        if key not in groups:
            decay = weight_decay / p.lr_scale if p.decay else 0.0
            groups[key] = {"params": [], "lr": lr * key[0], "weight_decay": decay, "lr_scale": key[0]}
        groups[key]["params"].append(p.param)
    return list(groups.values())


BETAS = Option("betas", tuple, (0.9, 0.98),
               "Adam's (beta1, beta2): the decay of the first and second moment estimates; (0.9, 0.98) as in "
               "Vaswani et al. 2017", ge=0.0, lt=1.0)
EPS = Option("eps", float, 1e-9, "Adam's epsilon, added to the second moment's root (1e-9: Vaswani et al. "
             "2017)", gt=0.0, lt=1.0)


FUSED_DEVICES = ("cpu", "cuda")  # where torch's fused Adam/AdamW kernels run (torch 2.13)


def fused_where_possible(params: list[TrainParam]) -> dict[str, bool]:
    """``{"fused": True}`` where every parameter sits on a device with torch's fused Adam/AdamW kernel (one
    pass over all parameters): on the CPU bench model its step took 3.5x less time than torch's default
    per-parameter loop (scripts/lm_peers_speed.py, docs/benchmarks.md). It rounds differently by at most a
    few ulp of a weight per step (tests/engine/test_step_numbers.py pins it against the reference loop)."""
    tensors = [p.param for p in params]
    fused = bool(tensors) and all(t.device.type in FUSED_DEVICES and t.is_floating_point() for t in tensors)
    return {"fused": True} if fused else {}


@register("optimizer", "adam", options=(BETAS, EPS))
def adam(params: list[TrainParam], lr: float, *, weight_decay: float = 0.0,
         betas: tuple[float, float] = (0.9, 0.98), eps: float = 1e-9) -> torch.optim.Optimizer:
    """Adam (Kingma & Ba 2015, Algorithm 1): ``m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
    theta -= lr * m_hat / (sqrt(v_hat) + eps)``, weight decay as L2 on the gradient; torch.optim.Adam."""
    return torch.optim.Adam(param_groups(params, lr, weight_decay), lr=lr, betas=betas, eps=eps,
                            weight_decay=weight_decay, **fused_where_possible(params))


adam.mup_rule = "adam"  # type: ignore[attr-defined]


@register("optimizer", "adamw", options=(BETAS, EPS))
def adamw(params: list[TrainParam], lr: float, *, weight_decay: float = 0.0,
          betas: tuple[float, float] = (0.9, 0.98), eps: float = 1e-9) -> torch.optim.Optimizer:
    """AdamW (Loshchilov & Hutter 2019, Algorithm 2): Adam with decoupled weight decay,
    ``theta -= lr * (m_hat / (sqrt(v_hat) + eps) + wd * theta)``; torch.optim.AdamW."""
    return torch.optim.AdamW(param_groups(params, lr, weight_decay), lr=lr, betas=betas, eps=eps,
                             weight_decay=weight_decay, **fused_where_possible(params))


adamw.mup_rule = "adam"  # type: ignore[attr-defined]


SGD_OPTIONS = (
    Option("momentum", float, 0.9, "SGD's momentum mu (0: plain SGD)", ge=0.0, lt=1.0),
    Option("nesterov", bool, False, "Nesterov's momentum (Sutskever et al. 2013, eq. 3-4): the step "
           "looks ahead along the velocity; needs momentum > 0"),
)


def _nesterov_needs_momentum(section: Any) -> str | None:
    if section.get("nesterov") and not section.get("momentum"):
        return "nesterov needs momentum > 0 (Sutskever et al. 2013): set momentum, e.g. 0.9"
    return None


@register("optimizer", "sgd", options=SGD_OPTIONS, check=_nesterov_needs_momentum)
def sgd(params: list[TrainParam], lr: float, *, weight_decay: float = 0.0, momentum: float = 0.9,
        nesterov: bool = False) -> torch.optim.Optimizer:
    """SGD with momentum (Polyak 1964; Sutskever et al. 2013): ``b = mu b + g; theta -= lr * b``, or with
    Nesterov's momentum ``theta -= lr * (g + mu b)``; weight decay as L2; torch.optim.SGD."""
    return torch.optim.SGD(param_groups(params, lr, weight_decay), lr=lr, momentum=momentum,
                           nesterov=nesterov, weight_decay=weight_decay)


sgd.mup_rule = "sgd"  # type: ignore[attr-defined]


ADAFACTOR_OPTIONS = (
    Option("adafactor_beta2_decay", float, -0.8,
           "the second-moment decay schedule's exponent c: beta2_t = 1 - t^c (Shazeer & Stern 2018, "
           "section 7: -0.8)", ge=-10.0, le=0.0),
    Option("adafactor_eps", float, 1e-3,
           "epsilon2: the floor of the parameter scale RMS(theta) the step is relative to (section 8: 1e-3)",
           gt=0.0, lt=1.0),
    Option("adafactor_eps1", float, 1e-30,
           "epsilon1: added to the squared gradient before its row and column means (Algorithm 4: 1e-30); "
           "torch.optim.Adafactor instead clamps the row mean and the estimate at its dtype's eps (1.19e-7 "
           "in float32), which moves updates at small gradients", gt=0.0, lt=1.0, added_later=True),
    Option("adafactor_clip", float, 1.0,
           "update clipping threshold d: the update is divided by max(1, RMS(update) / d) (section 6: 1)",
           ge=1.0, le=1e6),
)


@register("optimizer", "adafactor", options=ADAFACTOR_OPTIONS, version=2)  # v2: the paper's eps1
def adafactor(params: list[TrainParam], lr: float, *, weight_decay: float = 0.0,
              adafactor_beta2_decay: float = -0.8, adafactor_eps: float = 1e-3, adafactor_eps1: float = 1e-30,
              adafactor_clip: float = 1.0) -> torch.optim.Optimizer:
    """Adafactor (Shazeer & Stern 2018, Algorithm 4): a matrix's second moment kept factored as row and
    column means, ``V_hat = R C / mean(R)`` of ``G^2 + eps1``; no first moment; the step relative to the
    parameter's scale, ``alpha_t = max(eps2, RMS(theta)) * min(lr, 1/sqrt(t))``, clipped at RMS d;
    :class:`PaperAdafactor` (torch.optim.Adafactor with the paper's eps1: version 2; version 1 was torch's,
    whose clamps at 1.19e-7 move updates at small gradients). ``lr`` caps the relative step size (torch's
    default 1e-2), it is not Adam's step size."""
    return PaperAdafactor(param_groups(params, lr, weight_decay), lr=lr, beta2_decay=adafactor_beta2_decay,
                          eps=(adafactor_eps1, adafactor_eps), d=adafactor_clip, weight_decay=weight_decay)


adafactor.mup_rule = None  # type: ignore[attr-defined]  # a scale-relative step: muP's table is silent


class Lion(torch.optim.Optimizer):
    """Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms", Algorithm 2)::

        c = b1 m + (1 - b1) g
        theta -= lr * (sign(c) + wd * theta)
        m = b2 m + (1 - b2) g

    Every coordinate moves by exactly ``lr`` (plus the decoupled decay): the paper takes a learning rate
    3-10x smaller than AdamW's and a weight decay 3-10x larger. Defaults b1 0.9, b2 0.99 (section 3.1).
    """

    def __init__(self, params: Any, lr: float = 1e-4, betas: tuple[float, float] = (0.9, 0.99),
                 weight_decay: float = 0.0) -> None:
        super().__init__(params, {"lr": lr, "betas": betas, "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            b1, b2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                m: Tensor = state["exp_avg"]
                update = m.lerp(p.grad, 1 - b1).sign_()  # sign(b1 m + (1 - b1) g)
                if group["weight_decay"]:
                    p.mul_(1 - group["lr"] * group["weight_decay"])
                p.add_(update, alpha=-group["lr"])
                m.lerp_(p.grad, 1 - b2)
        return loss


LION_BETAS = Option("lion_betas", tuple, (0.9, 0.99),
                    "Lion's (beta1, beta2): beta1 interpolates the update's sign, beta2 the momentum (Chen "
                    "et al. 2023: 0.9, 0.99)", ge=0.0, lt=1.0)


@register("optimizer", "lion", options=(LION_BETAS,))
def lion(params: list[TrainParam], lr: float, *, weight_decay: float = 0.0,
         lion_betas: tuple[float, float] = (0.9, 0.99)) -> torch.optim.Optimizer:
    """Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms", Algorithm 2): the sign of
    an interpolated momentum, ``theta -= lr * (sign(b1 m + (1-b1) g) + wd theta)``; ablate's own (torch has
    none): :class:`Lion`."""
    return Lion(param_groups(params, lr, weight_decay), lr=lr, betas=lion_betas, weight_decay=weight_decay)


lion.mup_rule = "adam"  # type: ignore[attr-defined]  # entrywise-normalised (a sign) like Adam's


MUON_OPTIONS = (
    Option("muon_momentum", float, 0.95, "Muon's momentum mu (Jordan et al. 2024: 0.95)", ge=0.0, lt=1.0),
    Option("muon_nesterov", bool, True, "Muon's Nesterov momentum (the speedrun's default)"),
    Option("muon_ns_steps", int, 5, "Newton-Schulz iterations orthogonalising each update (5: Jordan et al. "
           "2024)", ge=1, le=99),
    Option("muon_update_rms", str, "original",
           "how each matrix's update is scaled: original (Jordan et al.: lr * sqrt(max(1, rows/cols))) or "
           "match_adamw (Liu et al. 2025, eq. 4: lr * 0.2 * sqrt(max(rows, cols)), matching AdamW's update "
           "RMS so that AdamW's learning rate and weight decay carry over)",
           choices=("original", "match_adamw")),
    Option("muon_adamw_lr", float, 0.0,
           "the learning rate of the AdamW part (embeddings, output head, norms, biases); 0: "
           "train.optimizer.lr, as Liu et al. 2025 use one rate with match_adamw", ge=0.0, le=100.0, off=0.0),
    BETAS, EPS,
)


@register("optimizer", "muon", options=MUON_OPTIONS, version=2)  # v2: Q, K and V orthogonalised apart
def muon(params: list[TrainParam], lr: float, *, weight_decay: float = 0.0, muon_momentum: float = 0.95,
         muon_nesterov: bool = True, muon_ns_steps: int = 5, muon_update_rms: str = "original",
         muon_adamw_lr: float = 0.0, betas: tuple[float, float] = (0.9, 0.98),
         eps: float = 1e-9) -> torch.optim.Optimizer:
    """Muon (Jordan et al. 2024, "Muon: an optimizer for hidden layers"; Liu et al. 2025, "Muon is
    scalable for LLM training"): each hidden 2-D weight matrix steps along its Nesterov momentum
    orthogonalised by 5 Newton-Schulz iterations, ``O ~ U V^T`` of ``M = U S V^T`` (the quintic with
    coefficients (3.4445, -4.7750, 2.0315) pushes the singular values into about [0.7, 1.2]; a very small
    one of a square matrix stays below),
    ``theta -= lr * scale * O`` with decoupled weight decay; embeddings, the output head, norms, biases and
    every other parameter (and any weight that is not 2-D, a conv1d FFN's) step with AdamW, as the
    speedrun and Liu et al. do; :class:`BlockMuon` (torch.optim.Muon's step, block by block) and
    torch.optim.AdamW in :class:`MuonWithAdamW`.

    A fused weight (the attention's one QKV projection) is the queries', keys' and values' matrices side by
    side: each is orthogonalised on its own, with its own shape's scale, as Jordan et al.'s note and the
    speedrun do (version 2; version 1 orthogonalised the fused (3d, d) matrix as one, which couples the
    three updates' singular values)."""
    matrices = [p for p in params if p.role == HIDDEN and p.param.dim() == 2]
    others = [p for p in params if not (p.role == HIDDEN and p.param.dim() == 2)]
    rule = "match_rms_adamw" if muon_update_rms == "match_adamw" else "original"
    blocks = {id(p.param): p.chunks for p in matrices if p.chunks}
    inner_muon = BlockMuon(param_groups(matrices, lr, weight_decay), blocks, lr=lr, weight_decay=weight_decay,
                           momentum=muon_momentum, nesterov=muon_nesterov, ns_steps=muon_ns_steps,
                           adjust_lr_fn=rule) if matrices else None
    ratio = muon_adamw_lr / lr if muon_adamw_lr > 0 else 1.0
    inner_adamw = torch.optim.AdamW(param_groups(others, lr, weight_decay, lr_ratio=ratio), lr=lr * ratio,
                                    betas=betas, eps=eps, weight_decay=weight_decay) if others else None
    return MuonWithAdamW(inner_muon, inner_adamw)


muon.mup_rule = None  # type: ignore[attr-defined]  # Muon's own per-matrix scale: muP's table is silent
