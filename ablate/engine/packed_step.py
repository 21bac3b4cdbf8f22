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

Muon (:class:`BatchedMuon`) steps its momentum elementwise and each block's Newton-Schulz iteration as one
batched product over the cells; Adafactor (:class:`BatchedAdafactor`) keeps each cell's factored row and
column moments as stacks along the cell dimension. Where the cells' fixed options (betas, momentum, eps)
differ, or a GradScaler scales their losses (fp16: a cell's overflow must skip only its own step),
:func:`batched_step` gives None and the pack steps each cell's own optimizer in turn.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from registry.optimizer import Lion
from registry.optimizer_steps import MuonWithAdamW, PaperAdafactor, muon_scale

__all__ = ["Batched", "BatchedAdafactor", "BatchedMuon", "BatchedStep", "batched_step", "clip_cells",
           "newton_schulz_cells"]

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


def clip_cells(stacked: Sequence[Tensor], max_norms: Sequence[float | None]) -> None:
    """Each cell's gradients scaled by ``max / (its norm + 1e-6)``, at most 1 (none where its max is
    falsy), as ``clip_grad_norm_`` clips a cell alone: one norm per stacked gradient."""
    if not any(max_norms):
        return
    grads = [p.grad for p in stacked if p.grad is not None]
    norms = torch.stack([g.flatten(1).float().norm(dim=1) for g in grads]).norm(dim=0)  # (K,)
    limit = torch.tensor([m or float("inf") for m in max_norms], device=norms.device)
    coef = (limit / (norms + 1e-6)).clamp(max=1.0)
    for g in grads:
        g.mul_(coef.to(g.dtype).view(-1, *([1] * (g.dim() - 1))))


def batched_step(models: Sequence[nn.Module], optimizers: Sequence[torch.optim.Optimizer],
                 stacked: Sequence[nn.Parameter], names: Sequence[str], scaled: bool) -> Batched | None:
    """The batched step of these cells' optimizers over ``stacked`` (the pack's parameters, named
    ``names`` in each cell model), or None where the cells must step one at a time (see the docstring)."""
    if scaled or not optimizers or any(type(o) is not type(optimizers[0]) for o in optimizers):
        return None
    if type(optimizers[0]) is MuonWithAdamW:
        return BatchedMuon(models, optimizers, stacked, names) if BatchedMuon.applies(optimizers) else None
    if type(optimizers[0]) is PaperAdafactor:
        return BatchedAdafactor(models, optimizers, stacked, names) if BatchedAdafactor.applies(optimizers) \
            else None
    return BatchedStep(models, optimizers, stacked, names) if _same(optimizers) else None


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
        where = {id(p): g for g, group in enumerate(optimizers[0].param_groups) for p in group["params"]}
        first = dict(models[0].named_parameters())
        names = [name for name in names if id(first[name]) in where]  # this optimizer's own parameters
        self.cell_params = [[dict(m.named_parameters())[name] for name in names] for m in models]
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


def _shared(groups: Sequence[dict[str, Any]], keys: Sequence[str]) -> bool:
    """Whether every group holds the same values of ``keys`` (the options a batched step takes once)."""
    return all([g.get(key) for key in keys] == [groups[0].get(key) for key in keys] for g in groups)


def _groups_alike(optimizers: Sequence[torch.optim.Optimizer]) -> bool:
    shape = [len(g["params"]) for g in optimizers[0].param_groups]
    return all([len(g["params"]) for g in o.param_groups] == shape for o in optimizers)


class _Cells:
    """The parameters one optimizer of every cell steps: each cell's, the stacked one, its group index."""

    def __init__(self, models: Sequence[nn.Module], optimizers: Sequence[torch.optim.Optimizer],
                 stacked: Sequence[nn.Parameter], names: Sequence[str]) -> None:
        index = {name: i for i, name in enumerate(names)}
        where = {id(p): g for g, group in enumerate(optimizers[0].param_groups) for p in group["params"]}
        first = dict(models[0].named_parameters())
        self.names = [name for name in names if id(first[name]) in where]
        self.params = [[dict(m.named_parameters())[name] for name in self.names] for m in models]
        self.group = [where[id(p)] for p in self.params[0]]
        self.stacked = [stacked[index[name]] for name in self.names]
        self.optimizers = list(optimizers)

    def per_cell(self, key: str, group: int, like: Tensor) -> Tensor:
        values = [float(o.param_groups[group][key]) for o in self.optimizers]
        shape = (-1, *([1] * (like.dim() - 1)))
        return torch.tensor(values, dtype=torch.float32, device=like.device).view(shape)

    def own(self, key: str, i: int, like: Tensor) -> Tensor:
        """The stacked state ``key`` of parameter ``i``, each cell's slice read from its optimizer's state
        where it has one (a resumed cell, or one re-stacked from an earlier pack), else zeros."""
        out = torch.zeros_like(like)
        for c, opt in enumerate(self.optimizers):
            saved = opt.state.get(self.params[c][i], {}).get(key)
            if saved is not None:
                out[c].copy_(saved)
        return out


def newton_schulz_cells(update: Tensor, steps: int, coefficients: tuple[float, float, float],
                        eps: float) -> Tensor:
    """registry/optimizer_steps.py's ``newton_schulz_bf16`` (torch.optim.Muon's iteration, in bf16, on the
    smaller side, from ``M / ||M||_F``) over a (K, rows, cols) stack of matrices: one batched product each
    step for every cell."""
    a, b, c = coefficients
    x = update.bfloat16()
    tall = update.size(1) > update.size(2)
    if tall:
        x = x.mT
    x = x.div(x.flatten(1).norm(dim=1).clamp(min=eps).view(-1, 1, 1))
    for _ in range(steps):
        gram = x @ x.mT
        x = torch.baddbmm(x, torch.baddbmm(gram, gram, gram, beta=b, alpha=c), x, beta=a)
    return x.mT if tall else x


class BatchedMuon:
    """Muon with AdamW (registry/optimizer_steps.py's ``MuonWithAdamW``) over a pack: the hidden matrices'
    momentum elementwise on the stacked (K, rows, cols) weights and each block's Newton-Schulz iteration
    batched over the cells (:func:`newton_schulz_cells`), the rest one :class:`BatchedStep` of AdamW."""

    def __init__(self, models: Sequence[nn.Module], optimizers: Sequence[Any],
                 stacked: Sequence[nn.Parameter], names: Sequence[str]) -> None:
        muons = [o.muon for o in optimizers]
        adamws = [o.adamw for o in optimizers]
        self.adamw = BatchedStep(models, adamws, stacked, names) if adamws[0] is not None else None
        self.cells = _Cells(models, muons, stacked, names) if muons[0] is not None else None
        self.buffers: list[Tensor] = []
        self.blocks: list[list[int]] = []
        if self.cells is None:
            return
        for i, p in enumerate(self.cells.stacked):
            self.buffers.append(self.cells.own("momentum_buffer", i, p))
            self.blocks.append(list(muons[0].blocks.get(id(self.cells.params[0][i]), (p.size(1),))))
        for c, opt in enumerate(muons):  # views: each cell's checkpoint saves its own momentum
            for i, q in enumerate(self.cells.params[c]):
                opt.state[q] = {"momentum_buffer": self.buffers[i][c]}

    @staticmethod
    def applies(optimizers: Sequence[Any]) -> bool:
        for part in ("muon", "adamw"):
            inner = [getattr(o, part) for o in optimizers]
            if any((o is None) != (inner[0] is None) for o in inner) or inner[0] is None:
                continue
            if not _groups_alike(inner):
                return False
        muons = [o.muon for o in optimizers if o.muon is not None]
        keys = ("momentum", "nesterov", "ns_steps", "ns_coefficients", "eps", "adjust_lr_fn")
        adamws = [o.adamw for o in optimizers if o.adamw is not None]
        return (_shared([g for m in muons for g in m.param_groups], keys)
                and (not adamws or _same(adamws)))

    @torch.no_grad()
    def step(self) -> None:
        if self.adamw is not None:
            self.adamw.step()
        if self.cells is None:
            return
        options = self.cells.optimizers[0].param_groups[0]
        mu = float(options["momentum"])
        rule = options["adjust_lr_fn"] or "original"
        for i, p in enumerate(self.cells.stacked):
            if p.grad is None:
                continue
            lr = self.cells.per_cell("lr", self.cells.group[i], p)
            decay = self.cells.per_cell("weight_decay", self.cells.group[i], p)
            buf = self.buffers[i]
            buf.lerp_(p.grad, 1 - mu)
            update = p.grad.lerp(buf, mu) if options["nesterov"] else buf
            p.mul_(1 - lr * decay)
            for block, target in zip(update.split(self.blocks[i], dim=1), p.split(self.blocks[i], dim=1),
                                     strict=True):
                ortho = newton_schulz_cells(block, options["ns_steps"], options["ns_coefficients"],
                                            options["eps"])
                target.sub_(ortho * (lr * muon_scale(rule, block.shape[1:])))


class BatchedAdafactor:
    """registry/optimizer_steps.py's ``PaperAdafactor`` over a pack: each cell's factored row and column
    moments (Shazeer & Stern 2018, Algorithm 4) as (K, rows, 1) and (K, 1, cols) stacks, each cell's step
    count, relative step size and update clipping along the cell dimension."""

    def __init__(self, models: Sequence[nn.Module], optimizers: Sequence[Any],
                 stacked: Sequence[nn.Parameter], names: Sequence[str]) -> None:
        self.cells = _Cells(models, optimizers, stacked, names)
        k = len(optimizers)
        device = self.cells.stacked[0].device
        self.steps = torch.zeros(k, dtype=torch.float32, device=device)
        for c, opt in enumerate(optimizers):
            saved = [opt.state.get(q, {}).get("step") for q in self.cells.params[c]]
            self.steps[c] = float(saved[0]) if saved and saved[0] is not None else 0.0
        self.state: list[dict[str, Tensor]] = []
        for i, p in enumerate(self.cells.stacked):
            if p.dim() > 2:  # a matrix of each cell: factored
                rows = p.new_zeros(p.shape[:-1] + (1,))
                cols = p.new_zeros(p.shape[:-2] + (1, p.shape[-1]))
                self.state.append({"row_var": self.cells.own("row_var", i, rows),
                                   "col_var": self.cells.own("col_var", i, cols)})
            else:
                self.state.append({"variance": self.cells.own("variance", i, p)})
        for c, opt in enumerate(optimizers):
            for i, q in enumerate(self.cells.params[c]):
                opt.state[q] = {"step": self.steps[c], **{key: t[c] for key, t in self.state[i].items()}}

    @staticmethod
    def applies(optimizers: Sequence[Any]) -> bool:
        groups = [g for o in optimizers for g in o.param_groups]
        return _groups_alike(optimizers) and _shared(groups, ("eps", "beta2_decay", "d", "maximize")) \
            and not groups[0].get("maximize")

    @torch.no_grad()
    def step(self) -> None:
        self.steps += 1
        options = self.cells.optimizers[0].param_groups[0]
        eps1, eps2 = options["eps"]
        d = float(options["d"])
        for i, p in enumerate(self.cells.stacked):
            g = p.grad
            if g is None:
                continue
            shape = (-1, *([1] * (p.dim() - 1)))
            lr = self.cells.per_cell("lr", self.cells.group[i], p)
            decay = self.cells.per_cell("weight_decay", self.cells.group[i], p)
            t = self.steps.view(shape)
            one_minus_beta2 = t ** options["beta2_decay"]
            rms = (p.flatten(1).norm(dim=1) / (p[0].numel() ** 0.5)).view(shape)
            alpha = rms.clamp(min=eps2) * torch.minimum(lr, 1 / t ** 0.5)
            p.mul_(1 - lr * decay)
            squared = g * g + eps1
            state = self.state[i]
            if p.dim() > 2:
                row, col = state["row_var"], state["col_var"]
                row.lerp_(squared.mean(dim=-1, keepdim=True), one_minus_beta2)
                col.lerp_(squared.mean(dim=-2, keepdim=True), one_minus_beta2)
                v_hat = row @ col / row.mean(dim=-2, keepdim=True)
            else:
                state["variance"].lerp_(squared, one_minus_beta2)
                v_hat = state["variance"]
            update = g / v_hat.sqrt()
            update_rms = (update.flatten(1).norm(dim=1) / (update[0].numel() ** 0.5 * d)).view(shape)
            p.sub_(update * (alpha / update_rms.clamp(min=1.0)))


Batched = BatchedStep | BatchedMuon | BatchedAdafactor
