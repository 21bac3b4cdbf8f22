"""The packed cells' clipping and optimizer step as one call over the stacked parameters, where it can be.

The elementwise optimizers step each stacked (K, ...) parameter once, with each cell's learning rate,
weight decay and step count as tensors along the cell dimension, in the order of operations of the
optimizer a cell alone steps with:

- Adam and AdamW (Kingma & Ba 2015, Algorithm 1; Loshchilov & Hutter 2019, Algorithm 2; torch.optim.Adam's
  order): ``m = beta1 m + (1 - beta1) g``, ``v = beta2 v + (1 - beta2) g^2``, ``theta -= lr_k / (1 -
  beta1^t_k) * m / (sqrt(v) / sqrt(1 - beta2^t_k) + eps)``; Adam's weight decay as L2 on the gradient,
  AdamW's decoupled ``theta *= 1 - lr_k wd_k``;
- SGD with momentum (torch.optim.SGD): ``b = mu b + (1 - dampening) g`` (``b = g`` at a cell's first step),
  ``theta -= lr_k (g + mu b)`` with Nesterov's momentum, else ``theta -= lr_k b``; weight decay as L2;
- Lion (Chen et al. 2023, Algorithm 2; registry/optimizer.py): ``theta -= lr_k (sign(b1 m + (1 - b1) g) +
  wd_k theta)``, ``m = b2 m + (1 - b2) g``.

Clipping by each cell's own gradient norm is one norm per stacked gradient, the cells' norms combined along
the cell dimension (``clip_grad_norm_``'s ``max / (norm + 1e-6)``, at most 1). Each cell's optimizer keeps
its state: its moments (and step count) are views of the stacked ones, so its checkpoint holds its own, and
a pack re-stacked or resumed reads them back. Each cell's schedule still sets its groups' rates
(:meth:`BatchedStep.step` reads them every step).

Where the cells' optimizers are another kind (Adafactor's factored moments, Muon's Newton-Schulz), their
fixed options (betas, momentum, eps) differ, or a GradScaler scales their losses (fp16: a cell's overflow
must skip only its own step), :func:`batched_step` gives None and the pack steps each cell's own optimizer
in turn.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from registry.optimizer import Lion

__all__ = ["BatchedStep", "batched_step"]

# each batched kind: the state tensors its step keeps per parameter, and the group options the cells share
KINDS: dict[type, tuple[tuple[str, ...], tuple[str, ...]]] = {
    torch.optim.Adam: (("exp_avg", "exp_avg_sq"), ("betas", "eps")),
    torch.optim.AdamW: (("exp_avg", "exp_avg_sq"), ("betas", "eps")),
    torch.optim.SGD: (("momentum_buffer",), ("momentum", "dampening", "nesterov")),
    Lion: (("exp_avg",), ("betas",)),
}
UNSUPPORTED = ("amsgrad", "maximize", "differentiable", "capturable")  # options a batched step leaves out


def _same(optimizers: Sequence[torch.optim.Optimizer]) -> bool:
    first = optimizers[0]
    kind = type(first)
    if kind not in KINDS or any(type(o) is not kind for o in optimizers):
        return False
    shared = KINDS[kind][1]
    shape = [len(g["params"]) for g in first.param_groups]
    reference = [first.param_groups[0].get(key) for key in shared]
    for o in optimizers:
        if [len(g["params"]) for g in o.param_groups] != shape:
            return False
        for g in o.param_groups:
            if any(g.get(key) for key in UNSUPPORTED) or [g.get(key) for key in shared] != reference:
                return False
    return True


def batched_step(models: Sequence[nn.Module], optimizers: Sequence[torch.optim.Optimizer],
                 stacked: Sequence[nn.Parameter], names: Sequence[str], scaled: bool) -> BatchedStep | None:
    """The batched step of these cells' optimizers over ``stacked`` (the pack's parameters, named
    ``names`` in each cell model), or None where the cells must step one at a time (see the docstring)."""
    if scaled or not optimizers or not _same(optimizers):
        return None
    return BatchedStep(models, optimizers, stacked, names)


class BatchedStep:
    """An elementwise optimizer over a pack's stacked parameters; each cell's state a view of its slice."""

    def __init__(self, models: Sequence[nn.Module], optimizers: Sequence[torch.optim.Optimizer],
                 stacked: Sequence[nn.Parameter], names: Sequence[str]) -> None:
        self.optimizers = list(optimizers)
        self.kind = type(optimizers[0])
        self.keys = KINDS[self.kind][0]
        self.options = optimizers[0].param_groups[0]
        if self.kind is torch.optim.SGD and not self.options["momentum"]:
            self.keys = ()  # plain SGD keeps no buffer
        index = {name: i for i, name in enumerate(names)}
        self.cell_params = [[dict(m.named_parameters())[name] for name in names] for m in models]
        where = {id(p): g for g, group in enumerate(optimizers[0].param_groups) for p in group["params"]}
        self.group = [where[id(self.cell_params[0][i])] for i in range(len(names))]
        self.stacked = [stacked[index[name]] for name in names]
        k = len(models)
        device = self.stacked[0].device
        self.steps = torch.zeros(k, dtype=torch.float32, device=device)  # Adam's t per cell
        self.started = torch.zeros(k, dtype=torch.bool, device=device)  # SGD: a cell's buffer exists
        self.state: list[dict[str, Tensor]] = []
        for i, p in enumerate(self.stacked):
            tensors = {key: torch.zeros_like(p) for key in self.keys}
            for c in range(k):
                own = optimizers[c].state.get(self.cell_params[c][i], {})
                for key in self.keys:
                    if own.get(key) is not None:  # a resumed cell, or one re-stacked from an earlier pack
                        tensors[key][c].copy_(own[key])
                        self.started[c] = True
                if "step" in own:
                    self.steps[c] = float(own["step"])
            self.state.append(tensors)
        self._share()

    def _share(self) -> None:
        """Each cell's optimizer state: views of the stacked state (its step count too, for Adam)."""
        for c, opt in enumerate(self.optimizers):
            for i, p in enumerate(self.cell_params[c]):
                own: dict[str, Any] = {key: t[c] for key, t in self.state[i].items()}
                if "exp_avg_sq" in self.keys:
                    own["step"] = self.steps[c]
                opt.state[p] = own

    def _per_cell(self, key: str, group: int, like: Tensor) -> Tensor:
        values = [float(o.param_groups[group][key]) for o in self.optimizers]
        return torch.tensor(values, dtype=like.dtype, device=like.device).view(-1, *([1] * (like.dim() - 1)))

    def clip(self, max_norms: Sequence[float | None]) -> None:
        """Each cell's gradients scaled by ``max / (its norm + 1e-6)``, at most 1 (none where its max is
        falsy), as ``clip_grad_norm_`` clips a cell alone."""
        if not any(max_norms):
            return
        grads = [p.grad for p in self.stacked if p.grad is not None]
        norms = torch.stack([g.flatten(1).float().norm(dim=1) for g in grads]).norm(dim=0)  # (K,)
        limit = torch.tensor([m or float("inf") for m in max_norms], device=norms.device)
        coef = (limit / (norms + 1e-6)).clamp(max=1.0)
        for g in grads:
            g.mul_(coef.to(g.dtype).view(-1, *([1] * (g.dim() - 1))))

    @torch.no_grad()
    def step(self) -> None:
        """One step of every cell, at each cell's present rates (its schedule set them)."""
        self.steps += 1
        for i, p in enumerate(self.stacked):
            if p.grad is not None:
                lr = self._per_cell("lr", self.group[i], p)
                wd = self._per_cell("weight_decay", self.group[i], p)
                self._update(p, p.grad, self.state[i], lr, wd)
        self.started.fill_(True)

    def _update(self, p: Tensor, g: Tensor, state: dict[str, Tensor], lr: Tensor, wd: Tensor) -> None:
        shape = (-1, *([1] * (p.dim() - 1)))
        if self.kind is Lion:
            b1, b2 = self.options["betas"]
            m = state["exp_avg"]
            update = m.lerp(g, 1 - b1).sign_()
            p.mul_(1 - lr * wd).sub_(lr * update)
            m.lerp_(g, 1 - b2)
            return
        if self.kind is torch.optim.AdamW:
            p.mul_(1 - lr * wd)
        elif bool((wd != 0).any()):
            g = g + wd * p
        if self.kind is torch.optim.SGD:
            mu = self.options["momentum"]
            if mu:
                buf = state["momentum_buffer"]
                started = self.started.view(shape)
                buf.copy_(torch.where(started, buf * mu + g * (1 - self.options["dampening"]), g))
                g = g + mu * buf if self.options["nesterov"] else buf
            p.sub_(lr * g)
            return
        b1, b2 = self.options["betas"]
        m, v = state["exp_avg"], state["exp_avg_sq"]
        m.lerp_(g, 1 - b1)
        v.mul_(b2).addcmul_(g, g, value=1 - b2)
        bc1 = (1 - b1 ** self.steps).to(p.dtype).view(shape)
        bc2_sqrt = (1 - b2 ** self.steps).sqrt().to(p.dtype).view(shape)
        p.sub_(lr / bc1 * m / (v.sqrt() / bc2_sqrt).add_(self.options["eps"]))
