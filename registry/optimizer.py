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

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from registry import Axis, Option, declare_axis, register

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


class PaperAdafactor(torch.optim.Adafactor):
    """torch.optim.Adafactor with the paper's epsilon1 (Shazeer & Stern 2018, Algorithm 4)::

        R_t = beta2_t R + (1 - beta2_t) (G^2 + eps1) 1_m       # row means; C_t likewise over columns
        V_hat = R_t C_t / (1_n^T R_t)        U = G / sqrt(V_hat)
        theta -= max(eps2, RMS(theta)) min(lr, 1/sqrt(t)) U / max(1, RMS(U) / d)

    torch adds no eps1: it clamps the row mean of R at eps1 and V_hat at eps1^2 with eps1 defaulting to
    float32's 1.19e-7, so once squared gradients fall below it (gradient RMS near 1e-4, common late in
    training) the estimate is floored and updates shrink (8-40% at RMS 1e-4). The state (step, row_var,
    col_var, variance) and parameter groups are torch's; ``group["eps"]`` is (eps1, eps2)."""

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            eps1, eps2 = group["eps"]
            lr, decay, d = float(group["lr"]), float(group["weight_decay"]), float(group["d"])
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad
                state = self.state[p]
                if not state:
                    state["step"] = torch.tensor(0.0)
                    if grad.dim() > 1:
                        rows, cols = grad.shape[:-1] + (1,), grad.shape[:-2] + (1, grad.shape[-1])
                        state["row_var"] = grad.new_zeros(rows)  # (..., rows, 1)
                        state["col_var"] = grad.new_zeros(cols)  # (..., 1, cols)
                    else:
                        state["variance"] = torch.zeros_like(grad, memory_format=torch.preserve_format)
                state["step"] += 1
                t = float(state["step"])
                one_minus_beta2 = t ** group["beta2_decay"]
                alpha = max(eps2, float(p.norm(2)) / (p.numel() ** 0.5)) * min(lr, 1 / t ** 0.5)
                if decay != 0:
                    p.mul_(1 - lr * decay)
                squared = grad * grad + eps1
                if grad.dim() > 1:
                    row, col = state["row_var"], state["col_var"]
                    row.lerp_(squared.mean(dim=-1, keepdim=True), one_minus_beta2)
                    col.lerp_(squared.mean(dim=-2, keepdim=True), one_minus_beta2)
                    v_hat = row @ col / row.mean(dim=-2, keepdim=True)  # (..., rows, cols)
                else:
                    state["variance"].lerp_(squared, one_minus_beta2)
                    v_hat = state["variance"]
                update = grad / v_hat.sqrt()
                denom = max(1.0, float(update.norm(2)) / (update.numel() ** 0.5 * d))
                p.add_(update, alpha=-alpha / denom)
        return loss


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


class MuonWithAdamW(torch.optim.Optimizer):
    """Muon on the hidden 2-D weight matrices and AdamW on every other parameter, as one optimizer.

    The two are torch's own (``torch.optim.Muon``, ``torch.optim.AdamW``; either may be absent where it has
    no parameter); this class only shares their parameter groups (``param_groups`` is the list of both,
    the very same dicts, so the trainer's schedule, gradient clipping and GradScaler see every parameter)
    and steps and checkpoints both.
    """

    def __init__(self, muon: torch.optim.Muon | None, adamw: torch.optim.AdamW | None) -> None:
        self.muon, self.adamw = muon, adamw
        params = [p for group in self._inner_groups() for p in group["params"]]
        super().__init__(params, {})
        self.param_groups = self._inner_groups()

    def _inner(self) -> list[torch.optim.Optimizer]:
        return [o for o in (self.muon, self.adamw) if o is not None]

    def _inner_groups(self) -> list[dict[str, Any]]:
        return [group for optimizer in self._inner() for group in optimizer.param_groups]

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for optimizer in self._inner():
            optimizer.step()
        return loss

    def state_dict(self) -> dict[str, Any]:
        return {"muon": None if self.muon is None else self.muon.state_dict(),
                "adamw": None if self.adamw is None else self.adamw.state_dict()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        for optimizer, saved in ((self.muon, state_dict["muon"]), (self.adamw, state_dict["adamw"])):
            if optimizer is not None:
                optimizer.load_state_dict(saved)
        # load_state_dict replaces each inner group's dict: share the new ones again
        self.param_groups = self._inner_groups()


def muon_scale(rule: str, shape: torch.Size) -> float:
    """The factor on a matrix's orthogonalised update (torch.optim.Muon's ``adjust_lr_fn``): original,
    ``sqrt(max(1, rows / cols))`` (Jordan et al.); match_rms_adamw, ``0.2 sqrt(max(rows, cols))`` (Liu et al.
    2025, eq. 4)."""
    rows, cols = shape[:2]
    if rule == "match_rms_adamw":
        return 0.2 * math.sqrt(max(rows, cols))
    return math.sqrt(max(1.0, rows / cols))


def newton_schulz_bf16(matrix: Tensor, steps: int, coefficients: tuple[float, float, float],
                       eps: float) -> Tensor:
    """torch.optim.Muon's iteration as torch runs it (in bf16, on the smaller side, from ``M / ||M||_F``),
    so a matrix that is not fused steps exactly as torch.optim.Muon steps it."""
    a, b, c = coefficients
    x = matrix.bfloat16()
    tall = matrix.size(0) > matrix.size(1)
    if tall:
        x = x.T
    x = x.div(x.norm().clamp(min=eps))
    for _ in range(steps):
        gram = x @ x.T
        x = torch.addmm(x, torch.addmm(gram, gram, gram, beta=b, alpha=c), x, beta=a)
    return x.T if tall else x


class BlockMuon(torch.optim.Muon):
    """torch.optim.Muon whose fused weights step block by block: ``blocks`` maps a parameter (by id) to the
    row sizes of the matrices it holds side by side (a fused QKV projection: (d, kv, kv)). The momentum is
    the whole weight's (it is elementwise); the Newton-Schulz iteration and the update's scale are each
    block's own. A parameter without blocks steps exactly as torch.optim.Muon steps it (its state and
    parameter groups are torch's, so checkpoints load either way)."""

    def __init__(self, params: Any, blocks: dict[int, tuple[int, ...]], **options: Any) -> None:
        super().__init__(params, **options)
        self.blocks = blocks

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr, decay, mu = float(group["lr"]), float(group["weight_decay"]), float(group["momentum"])
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.zeros_like(p.grad, memory_format=torch.preserve_format)
                buf: Tensor = state["momentum_buffer"]
                buf.lerp_(p.grad, 1 - mu)  # (1 - mu) g + mu buf
                update = p.grad.lerp(buf, mu) if group["nesterov"] else buf
                p.mul_(1 - lr * decay)  # decoupled weight decay
                rows = list(self.blocks.get(id(p), (p.size(0),)))
                rule = group["adjust_lr_fn"] or "original"
                for block, target in zip(update.split(rows), p.split(rows), strict=True):  # (rows_i, cols)
                    ortho = newton_schulz_bf16(block, group["ns_steps"], group["ns_coefficients"],
                                               group["eps"])
                    target.add_(ortho, alpha=-lr * muon_scale(rule, block.shape))
        return loss


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


def newton_schulz(matrix: Tensor, steps: int = 5,
                  coefficients: tuple[float, float, float] = (3.4445, -4.7750, 2.0315)) -> Tensor:
    """Jordan et al.'s quintic Newton-Schulz iteration, in float32 (torch's runs it in bf16):
    ``X <- a X + (b A + c A^2) X`` with ``A = X X^T``, from ``X = M / ||M||_F``; on the smaller side of the
    matrix. Its singular values approach [0.7, 1.2] (0.68 to 1.13 for a Gaussian 16 x 48 or 64 x 256; a
    square Gaussian's smallest, near 0, reaches only about 0.15 in 5 steps) while its singular vectors stay
    M's: the iterate the tests check torch's against (tests/registry/test_recipe_formulas.py)."""
    a, b, c = coefficients
    x = matrix.float()
    tall = x.size(0) > x.size(1)
    if tall:
        x = x.T
    x = x / x.norm().clamp(min=1e-7)
    for _ in range(steps):
        gram = x @ x.T
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x.T if tall else x
