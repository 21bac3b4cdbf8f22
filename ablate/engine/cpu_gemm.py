"""Float32 matrix products on a CPU through oneDNN where MKL leaves the CPU's AVX-512 units idle.

torch multiplies float32 matrices on an x86 CPU with MKL, whose AVX-512 kernels run on Intel CPUs only; on an
AMD CPU with AVX-512 it runs AVX2 code at half the vector width (``ablate.hardware.cpu_gemm_library`` says
where). oneDNN, which torch ships too and already uses for bf16 products, runs the same products with
AVX-512 there, about twice as fast. The matrix products were 79% of the language model's float32 train step
(``torch.profiler``, docs/benchmarks.md), so this is where the step's time is.

What routes through here: every plain ``nn.Linear`` of a built model (:func:`route_linears` gives it the
:class:`Linear` forward, which computes the same function; parameters, names, initialisation and state
dicts are untouched) and the trainer's chunked loss (``ablate/engine/token_loss.py``), forward and
backward. The product is ``a @ b.T`` (:func:`gemm_nt`): oneDNN's inner product with ``b`` as its weights,
on strided views, at a row count on a fixed grid (:func:`grid_rows`: oneDNN keeps a primitive per shape it
meets, so rows are padded with zeros up to one of 8 sizes an octave; a copy only where a batch's rows are
off the grid). Only float32 CPU tensors outside autocast and ``torch.compile`` take it, only products of at
least :data:`MIN_ROWS` rows (oneDNN's fixed cost per call is larger, so a decoding step's few rows stay with
MKL), and only layers at least :data:`MIN_WIDTH` wide both ways (a narrow product is small next to the row
padding and the autograd Function the oneDNN path adds around it); everything else is ``F.linear`` as before.

The two libraries sum in different orders: results agree to float32 rounding, not bit for bit
(``tests/engine/test_cpu_gemm.py`` states the tolerance), as the fused AdamW kernel's do.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ablate.hardware import cpu_gemm_library

# Rows (a product's first dimension) from which oneDNN's products are taken. Measured on a 2-core Zen 5, a
# Linear layer's forward and backward: at 8 rows a 256 x 1,024 layer took 208 us through MKL and 563 through
# oneDNN; from 64 rows oneDNN was at least as fast at every shape measured (docs/benchmarks.md).
MIN_ROWS = 64
# Inputs and outputs (K and N) from which a product is taken. Narrow layers pay for the oneDNN path's row
# padding (a copy of the input and of the output gradient, as large as the product's own input at K = 64)
# and its autograd Function: measured at 1 thread on a 2,043-row Linear's forward and backward (oneDNN
# against MKL on an AVX2 EPYC), 1.8x MKL's time at 64 x 64 and 1.3x from 256 x 256; the quickstart's layers
# (64 to 256 wide, a 24-type generator) took its step from 42.5k to 37.9k tokens/s on a Zen 5 when they
# moved to oneDNN (docs/benchmarks.md). The Multi30k cell's and the LM bench's layers are 256 and wider.
MIN_WIDTH = 128
ROW_STEP = 32  # the finest step of grid_rows' grid


def onednn_gemm_nt(a: Tensor, b: Tensor, bias: Tensor | None) -> Tensor:
    """``a @ b.T + bias`` by oneDNN's inner product: a (M, K), b (N, K), strided views taken as they are."""
    return torch.ops.mkldnn._linear_pointwise(a, b, bias, "none", [], "")  # (M, N)


def _grid_step(rows: int) -> int:
    """The grid's step in the octave of ``rows``: 2^(floor(log2 rows) - 3), at least :data:`ROW_STEP`."""
    return max(ROW_STEP, 1 << max(0, rows.bit_length() - 4))


def grid_rows(rows: int) -> int:
    """``rows`` rounded up to a grid of 8 sizes an octave (multiples of 2^(floor(log2 rows) - 3), at least
    :data:`ROW_STEP`): the row counts oneDNN's products are computed at.

    oneDNN builds and keeps a primitive (its JIT kernels) for every shape it meets, about 0.6 MB each
    (measured: 200 new row counts of one 256 x 1,024 product held 115 MB, not returned by malloc_trim).
    Length-bucketed batches bring a new row count at nearly every step: 150 float32 steps of the Multi30k
    study cell peaked at 2,484 MB against MKL's 1,222. On this grid a product meets at most 8 row counts
    an octave, for at most 1/8 more rows (zeros, whose results are dropped; a language model's blocks are
    on it already): the same run peaked at 1,478 MB against MKL's 1,228 (docs/benchmarks.md).
    """
    step = _grid_step(rows)
    return -(-rows // step) * step


def grid_floor(rows: int) -> int:
    """The largest :func:`grid_rows` size at most ``rows`` (``rows`` itself below :data:`MIN_ROWS`): a chunk
    of rows that oneDNN takes without padding."""
    if rows < MIN_ROWS:
        return rows
    step = _grid_step(rows)
    return rows // step * step


def laid_out(t: Tensor) -> bool:
    """Whether a matrix ``t`` (m, k) is one oneDNN's products read in place: rows (unit stride along a row,
    rows apart by at least a row) or columns (its transpose so); a size-1 dimension's stride does not count.

    Anything else (an expanded tensor's zero strides, a strided slice of both dimensions) sends oneDNN to a
    reference loop over elements: a routed Linear's backward of ``y.sum()``, whose output gradient is one
    value expanded to (2,048, 1,024), took 7.5 s against 13.5 ms for a dense gradient (2 threads, AMD EPYC,
    2026-12)."""
    m, k = t.shape
    s0, s1 = t.stride()
    rows = (s1 == 1 or k == 1) and (s0 >= k or m == 1)
    columns = (s0 == 1 or m == 1) and (s1 >= m or k == 1)
    return rows or columns


def dense(t: Tensor) -> Tensor:
    """``t`` itself where :func:`laid_out`, else a contiguous copy of it (made once, where it is met)."""
    return t if laid_out(t) else t.contiguous()


def padded(t: Tensor, rows: int) -> Tensor:
    """``t`` (m, k) with zero rows appended up to ``rows`` (``t`` itself when it has them and is
    :func:`laid_out`, a contiguous copy when it is not): a zero row adds nothing to a weight gradient's sum,
    and its own output rows are dropped."""
    if t.size(0) == rows:
        return dense(t)
    out = t.new_empty((rows, t.size(1)))
    out[: t.size(0)] = t
    out[t.size(0):].zero_()
    return out


def _eligible(a: Tensor, b: Tensor) -> bool:
    """float32 CPU operands, ``a`` of at least :data:`MIN_ROWS` rows, outside autocast and compile, on a
    CPU whose float32 products oneDNN takes (``ablate.hardware.cpu_gemm_library``)."""
    return (a.dtype == torch.float32 and b.dtype == torch.float32 and a.device.type == "cpu"
            and a.numel() >= MIN_ROWS * a.size(-1) and not torch.is_autocast_enabled("cpu")
            and not torch.compiler.is_compiling() and cpu_gemm_library() == "onednn")


def takes_onednn(a: Tensor, b: Tensor) -> bool:
    """Whether the product ``a @ b.T`` of ``a`` (..., K) and ``b`` (N, K) runs through oneDNN here."""
    return min(a.size(-1), b.size(0)) >= MIN_WIDTH and _eligible(a, b)


def weight_grad_takes_onednn(grad: Tensor, inputs: Tensor) -> bool:
    """Whether :func:`weight_grad`'s ``grad.T @ inputs``, for grad (M, N) and inputs (M, K), runs through
    oneDNN here: the same layer's rule as :func:`takes_onednn` (its K and N)."""
    return min(grad.size(-1), inputs.size(-1)) >= MIN_WIDTH and _eligible(grad, inputs)


def gemm_nt(a: Tensor, b: Tensor, bias: Tensor | None = None) -> Tensor:
    """``a @ b.T (+ bias)`` for a (M, K), b (N, K): through oneDNN where :func:`takes_onednn` (at
    :func:`grid_rows` rows), else MKL."""
    if not takes_onednn(a, b):
        return F.linear(a, b, bias)
    rows = a.size(0)
    return onednn_gemm_nt(padded(a, grid_rows(rows)), dense(b), bias)[:rows]


def weight_grad(grad: Tensor, inputs: Tensor) -> Tensor:
    """A Linear weight's gradient ``grad.T @ inputs`` (N, K), for grad (M, N) and inputs (M, K).

    Through oneDNN, both are taken at :func:`grid_rows` rows (zero rows add nothing), and the product runs
    fastest with the larger of the two output dimensions as its weights, so where N > K the transposed
    product ``inputs.T @ grad`` (K, N) is computed and returned as a transposed view (measured at the bench
    LM's shapes: 388 against 284 GFLOP/s for 1,024 x 256, 421 against 147 for the 8,192-type generator).
    """
    if not weight_grad_takes_onednn(grad, inputs):
        return grad.t() @ inputs
    rows = grid_rows(grad.size(0))
    grad, inputs = padded(grad, rows), padded(inputs, rows)  # laid out: copies only where they are not
    if grad.size(1) > inputs.size(1):
        return onednn_gemm_nt(inputs.t(), grad.t(), None).t()
    return onednn_gemm_nt(grad.t(), inputs.t(), None)


class OneDnnLinear(torch.autograd.Function):
    """``F.linear`` with its three products (output, input gradient, weight gradient) through oneDNN, at
    :func:`grid_rows` rows: the input is padded once and kept padded for the weight's gradient."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:  # type: ignore[override]
        rows = x.reshape(-1, x.size(-1))  # (M, K): a view where x is contiguous
        grid = padded(rows, grid_rows(rows.size(0)))  # (M', K), M' >= M
        ctx.save_for_backward(grid, weight)
        ctx.in_shape, ctx.has_bias = x.shape, bias is not None
        out = onednn_gemm_nt(grid, weight, bias)[: rows.size(0)]  # (M, N): the first rows, contiguous
        return out.view(*x.shape[:-1], weight.size(0))

    @staticmethod
    def backward(ctx: Any, grad_out: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        grid, weight = ctx.saved_tensors
        grad = grad_out.reshape(-1, weight.size(0))  # (M, N)
        rows = grad.size(0)
        # (M', N): zero rows where the input was padded; an expanded or strided gradient (the backward of
        # y.sum(), or of a transposed use of y) made dense once here, not read element by element 3 times
        grad = padded(grad, grid.size(0))
        grad_x = grad_w = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_x = onednn_gemm_nt(grad, weight.t(), None)[:rows].view(ctx.in_shape)  # grad @ weight
        if ctx.needs_input_grad[1]:
            grad_w = weight_grad(grad, grid)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_b = grad.sum(0)
        return grad_x, grad_w, grad_b


class Linear(nn.Linear):
    """``nn.Linear`` whose float32 CPU products run through oneDNN where :func:`takes_onednn` says so; the
    same parameters, initialisation and state dict, and ``F.linear`` everywhere else (GPU, autocast,
    ``torch.compile``, a few rows)."""

    def forward(self, x: Tensor) -> Tensor:
        if takes_onednn(x, self.weight):
            return OneDnnLinear.apply(x, self.weight, self.bias)  # type: ignore[no-any-return]
        return F.linear(x, self.weight, self.bias)


def route_linears(model: nn.Module) -> nn.Module:
    """Give every plain ``nn.Linear`` of ``model`` the :class:`Linear` forward (in place; returns ``model``).

    Only the class changes (a subclass of ``nn.Linear``): its parameters, their names and values, hooks and
    ``isinstance`` checks are as they were. A subclass a component defines keeps its own forward.
    """
    for module in model.modules():
        if type(module) is nn.Linear:
            module.__class__ = Linear
    return model
