"""The packed cells' clipping and optimizer step as one call over the stacked parameters, where it can be.

Adam and AdamW (Kingma & Ba 2015, Algorithm 1; Loshchilov & Hutter 2019, Algorithm 2) are elementwise: the
pack steps each stacked (K, ...) parameter once, with each cell's learning rate, weight decay and step count
as tensors along the cell dimension::

    m = beta1 m + (1 - beta1) g;   v = beta2 v + (1 - beta2) g^2
    theta -= lr_k / (1 - beta1^t_k) * m / (sqrt(v) / sqrt(1 - beta2^t_k) + eps)

(torch.optim.Adam's order of operations; Adam's weight decay as L2 on the gradient, AdamW's decoupled
``theta *= 1 - lr_k wd_k``). Clipping by each cell's own gradient norm is one norm per stacked gradient,
and the cells' norms combined along the cell dimension (``clip_grad_norm_``'s ``max / (norm + 1e-6)``,
at most 1). Each cell's optimizer keeps its state: its ``exp_avg``, ``exp_avg_sq`` and ``step`` are views
of the stacked moments, so its checkpoint holds its own, and a pack re-stacked or resumed reads them back.
Each cell's schedule still sets its groups' rates (:meth:`BatchedAdam.step` reads them every step).

Where the cells' optimizers are any other (SGD, Lion, Adafactor's factored moments, Muon's Newton-Schulz),
their betas differ, or a GradScaler scales their losses (fp16: a cell's overflow must skip only its own
step), :func:`batched_adam` gives None and the pack steps each cell's own optimizer in turn.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

__all__ = ["BatchedAdam", "batched_adam"]

KINDS = (torch.optim.Adam, torch.optim.AdamW)


def _same(optimizers: Sequence[torch.optim.Optimizer]) -> bool:
    first = optimizers[0]
    if type(first) not in KINDS or any(type(o) is not type(first) for o in optimizers):
        return False
    shape = [len(g["params"]) for g in first.param_groups]
    for o in optimizers:
        if [len(g["params"]) for g in o.param_groups] != shape:
            return False
        for g in o.param_groups:
            if g["amsgrad"] or g["maximize"] or g.get("differentiable") or g.get("capturable"):
                return False
            if (g["betas"], g["eps"]) != (first.param_groups[0]["betas"], first.param_groups[0]["eps"]):
                return False
    return True


def batched_adam(models: Sequence[nn.Module], optimizers: Sequence[torch.optim.Optimizer],
                 stacked: Sequence[nn.Parameter], names: Sequence[str], scaled: bool) -> BatchedAdam | None:
    """The batched step of these cells' optimizers over ``stacked`` (the pack's parameters, named
    ``names`` in each cell model), or None where the cells must step one at a time (see the docstring)."""
    if scaled or not optimizers or not _same(optimizers):
        return None
    return BatchedAdam(models, optimizers, stacked, names)


class BatchedAdam:
    """Adam or AdamW over a pack's stacked parameters; each cell's optimizer state a view of its slice."""

    def __init__(self, models: Sequence[nn.Module], optimizers: Sequence[torch.optim.Optimizer],
                 stacked: Sequence[nn.Parameter], names: Sequence[str]) -> None:
        self.optimizers = list(optimizers)
        self.decoupled = type(optimizers[0]) is torch.optim.AdamW
        self.beta1, self.beta2 = optimizers[0].param_groups[0]["betas"]
        self.eps = optimizers[0].param_groups[0]["eps"]
        index = {name: i for i, name in enumerate(names)}
        self.cell_params: list[list[nn.Parameter]] = []  # per cell, in the pack's order
        for model in models:
            own = dict(model.named_parameters())
            self.cell_params.append([own[name] for name in names])
        # each stacked parameter's group in the cells' optimizers (the same in every cell)
        where = {id(p): g for g, group in enumerate(optimizers[0].param_groups) for p in group["params"]}
        self.group = [where[id(self.cell_params[0][i])] for i in range(len(names))]
        self.stacked = [stacked[index[name]] for name in names]
        k = len(models)
        device = self.stacked[0].device
        self.steps = torch.zeros(k, dtype=torch.float32, device=device)
        self.m: list[Tensor] = []
        self.v: list[Tensor] = []
        for i, p in enumerate(self.stacked):
            m, v = torch.zeros_like(p), torch.zeros_like(p)
            for c in range(k):
                state = optimizers[c].state.get(self.cell_params[c][i], {})
                if "exp_avg" in state:  # a resumed cell, or one re-stacked from an earlier pack
                    m[c].copy_(state["exp_avg"])
                    v[c].copy_(state["exp_avg_sq"])
                    self.steps[c] = float(state["step"])
            self.m.append(m)
            self.v.append(v)
        self._share()

    def _share(self) -> None:
        """Each cell's optimizer state: views of the stacked moments, its own step count."""
        for c, opt in enumerate(self.optimizers):
            for i, p in enumerate(self.cell_params[c]):
                # views: the pack's step moves the cell's own state, which its checkpoint saves
                opt.state[p] = {"step": self.steps[c], "exp_avg": self.m[i][c], "exp_avg_sq": self.v[i][c]}

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
        bc1 = 1 - self.beta1 ** self.steps  # (K,)
        bc2_sqrt = (1 - self.beta2 ** self.steps).sqrt()
        for i, p in enumerate(self.stacked):
            g = p.grad
            if g is None:
                continue
            shape = (-1, *([1] * (p.dim() - 1)))
            lr = self._per_cell("lr", self.group[i], p)
            wd = self._per_cell("weight_decay", self.group[i], p)
            if self.decoupled:
                p.mul_(1 - lr * wd)
            elif bool((wd != 0).any()):
                g = g + wd * p
            m, v = self.m[i], self.v[i]
            m.lerp_(g, 1 - self.beta1)
            v.mul_(self.beta2).addcmul_(g, g, value=1 - self.beta2)
            denom = (v.sqrt() / bc2_sqrt.to(p.dtype).view(shape)).add_(self.eps)
            p.sub_(lr / bc1.to(p.dtype).view(shape) * m / denom)
