"""Dropout for the components: ``nn.Dropout`` with a cheaper mask on CPU.

Not a registry kind: a helper the residual, ffn and positions components use. On CPU,
``nn.Dropout`` draws one Bernoulli number per element (``bernoulli_``, about 5 ns each on one core:
~10% of an fp32 training step of the benchmark model). Here one 64-bit random word gives four
15-bit lanes, each compared with ``round(p * 2**15)``: four decisions per RNG call, the
fwd + bwd of a (4096, 1024) dropout about 2x faster. The drop probability is ``p`` rounded to a
multiple of 2**-15 (0.1 -> 0.1000061) and kept values are scaled by ``1 / (1 - p_effective)``, so the
layer stays unbiased. CUDA, ``torch.compile`` (which fuses its own RNG) and ``p >= 1`` use
``F.dropout``. The mask is saved as a scaled float tensor (fewer passes than a bool mask, 3 more bytes
per element).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

LANE_BITS = 15
LANES = 1 << LANE_BITS  # 32768 levels per decision


def lane_threshold(p: float) -> int:
    """Lanes below this value are dropped: P(drop) = threshold / 2**15."""
    return round(p * LANES)


class _CPUDropout(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, p: float) -> Tensor:
        threshold = lane_threshold(p)
        n = x.numel()
        # random_() on int64 fills bits 0..62: the low 15 bits of each 16-bit lane are uniform.
        words = torch.empty((n + 3) // 4, dtype=torch.int64, device=x.device).random_()
        lanes = words.view(torch.int16)[:n].view(x.shape).bitwise_and_(LANES - 1)
        keep = (lanes >= threshold).to(x.dtype).mul_(LANES / (LANES - threshold))  # 0 or 1/(1-p)
        ctx.save_for_backward(keep)
        return x * keep

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        (keep,) = ctx.saved_tensors
        return grad * keep, None


class Dropout(nn.Dropout):
    """Drop-in ``nn.Dropout`` (same state dict, same train/eval behaviour); faster mask on CPU."""

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0.0:
            return x
        if x.device.type != "cpu" or self.p >= 1.0 or torch.compiler.is_compiling() or self.inplace:
            return F.dropout(x, self.p, True, self.inplace)
        return _CPUDropout.apply(x, self.p)
