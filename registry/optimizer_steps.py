"""The update rules the optimizer axis (registry/optimizer.py) steps with where torch's own is not the paper's
or does not exist as one optimizer: Muon block by block over a fused weight and with AdamW for the rest,
Adafactor with the paper's epsilon1, and the Newton-Schulz iterate the tests check Muon against. Each class
keeps torch's state and parameter groups, so checkpoints load either way."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor


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
