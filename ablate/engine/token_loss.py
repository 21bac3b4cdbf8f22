"""The training loss of both architectures: mean cross-entropy of the generator's logits against the target
tokens, computed with the generator a chunk of rows at a time, forward and gradient together, so the
(tokens, vocabulary) logits are never held whole (the fused linear cross-entropy of Liger Kernel, Hsu et al.
2024, written here with torch's own kernels).

What it computes is what the trainer computed before: ``F.cross_entropy(generator(hidden).float(), targets,
ignore_index=..., label_smoothing=...)``: the logits in the autocast dtype (bf16 or fp16 under mixed
precision, float32 otherwise), their log-softmax and the loss in float32. The differences are of rounding
only: the weight's gradient is summed over chunks, and the 1/n of the mean is applied to the gradients at
the end rather than to each logit's (tests/engine/test_token_loss.py states the tolerances); its float32
products run through oneDNN where that is the faster library (``ablate/engine/cpu_gemm.py``). What it
saves:

* rows whose target is ignored (padding, tokens an earlier window scored) cost nothing: the generator is
  applied to the scored rows only;
* no (tokens, vocabulary) tensor outlives its chunk: on GPT-2 small's batch (16 x 1024 tokens, 50,257
  types) the float32 logits, their log-softmax and their gradient were 3.3 GB each;
* the backward is a multiplication of three stored gradients by the loss's incoming gradient;
* the float32 log-softmax, softmax and gradient of a chunk are computed a block of rows at a time that stays
  in a CPU core's cache (:func:`score_chunk`), and the gradient overwrites the logits in their own dtype:
  one pass over the chunk in memory instead of several (under bf16, the float32 copy of the logits and the
  bf16 copy of the gradient were 11% of the language model's step).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ablate.engine.cpu_gemm import (
    Linear,
    gemm_nt,
    grid_floor,
    grid_rows,
    padded,
    takes_onednn,
    weight_grad,
    weight_grad_takes_onednn,
)

# Logits of one chunk (rows x vocabulary): 8M on a CPU (32 MB of float32; 1,024 rows of an 8,192-type
# vocabulary). The loss and gradients of 2,048 x 256 hidden rows, CPU ms, min of 5 (docs/benchmarks.md):
# 1 thread, rows 256 / 1,024 / whole logits: fp32 381 / 376 / 477, bf16 217 / 300 / 353; 2 threads: fp32
# 884 / 541 / 659, bf16 742 / 494 / 542 (smaller chunks' matmuls parallelise worse). 64M on a GPU.
CHUNK_ELEMENTS = {"cpu": 1 << 23}
GPU_CHUNK_ELEMENTS = 1 << 26
MIN_CHUNK_ROWS = 32
# float32 elements of the block of rows whose log-softmax and gradient are computed together on a CPU: 2 MB,
# a core's L2 cache here
SOFTMAX_BLOCK_ELEMENTS = 1 << 19


def chunk_rows(vocab: int, device: torch.device) -> int:
    """Rows of one chunk for a vocabulary of ``vocab`` types on ``device``; on a CPU a row count oneDNN's
    products take unpadded (``cpu_gemm.grid_floor``: 1,024 for 8,000 types, not 1,048)."""
    rows = max(MIN_CHUNK_ROWS, CHUNK_ELEMENTS.get(device.type, GPU_CHUNK_ELEMENTS) // max(1, vocab))
    return grid_floor(rows) if device.type == "cpu" else rows


def softmax_rows(vocab: int, rows: int, device: torch.device) -> int:
    """Rows of a chunk scored together (:func:`score_chunk`): a block that stays in a CPU core's cache, the
    whole chunk on a GPU."""
    if device.type != "cpu":
        return rows
    return max(1, min(rows, SOFTMAX_BLOCK_ELEMENTS // max(1, vocab)))


def compute_dtype(weight: Tensor) -> torch.dtype:
    """The dtype the generator's matmul runs in: autocast's where autocast is on, else the weight's."""
    device_type = weight.device.type
    if torch.is_autocast_enabled(device_type):
        return torch.get_autocast_dtype(device_type)
    return weight.dtype


def score_chunk(z: Tensor, targets: Tensor, smoothing: float, block: int, grad_bias: Tensor | None,
                grads: bool) -> Tensor:
    """The summed loss (float32 scalar) of one chunk's logits ``z`` (n, V) against ``targets`` (n,); with
    ``grads``, ``z`` is overwritten by the loss's gradient (in its own dtype) and ``grad_bias`` (V,) takes its
    column sums.

    ``block`` rows at a time: each block's float32 log-softmax, softmax and gradient stay in a CPU core's
    cache instead of several passes over the whole chunk in memory (the per-row operations are the same).
    """
    vocab = z.size(1)
    total = torch.zeros((), dtype=torch.float32, device=z.device)
    for first in range(0, z.size(0), block):
        z_b, t_b = z[first:first + block], targets[first:first + block]  # (b, V), (b,)
        logp = torch.log_softmax(z_b.float(), dim=-1)  # (b, V) float32
        total -= logp.gather(1, t_b[:, None]).sum() * (1.0 - smoothing)  # log p of each target
        if smoothing:
            total -= logp.sum() * (smoothing / vocab)
        if not grads:
            continue
        grad = logp.exp_()  # (b, V): softmax, in place of log p
        grad[torch.arange(t_b.numel(), device=z.device), t_b] -= 1.0 - smoothing
        if smoothing:
            grad -= smoothing / vocab
        if grad_bias is not None:
            grad_bias += grad.sum(0)
        z_b.copy_(grad)  # the gradient in z's dtype, in place of the logits
    return total


class LinearCrossEntropy(torch.autograd.Function):
    """Mean cross-entropy of ``hidden @ weight.T + bias`` (N, V) against ``targets`` (N,), with its
    gradients computed in the forward, one chunk of rows at a time (see the module's docstring).

    Per chunk: logits ``z`` in ``dtype`` (then float32), ``log p = log_softmax(z)``, the loss
    ``-(1 - eps) log p_t - eps/V sum_j log p_j`` and its gradient ``p - (1 - eps) onehot(t) - eps/V``
    (Szegedy et al. 2016's label smoothing, as ``F.cross_entropy`` defines it), cast to ``dtype`` for the
    two matmuls that give the gradients of the hidden rows and of the weight.
    """

    @staticmethod
    def forward(ctx: Any, hidden: Tensor, weight: Tensor, bias: Tensor | None,  # type: ignore[override]
                targets: Tensor, smoothing: float, dtype: torch.dtype, rows: int, grads: bool) -> Tensor:
        vocab = weight.size(0)
        with torch.autocast(hidden.device.type, enabled=False):  # the dtypes below are chosen explicitly
            h = hidden.to(dtype)  # (N, d): the scored rows
            w = weight.to(dtype)  # (V, d)
            b = None if bias is None else bias.to(dtype)
            grad_hidden = torch.empty(h.shape, dtype=hidden.dtype, device=h.device)
            grad_weight = torch.zeros(weight.shape, dtype=torch.float32, device=h.device)
            grad_bias = None if bias is None else torch.zeros(vocab, dtype=torch.float32, device=h.device)
            total = torch.zeros((), dtype=torch.float32, device=h.device)
            block = softmax_rows(vocab, rows, h.device)
            for start in range(0, h.size(0), rows):
                h_c, t_c = h[start:start + rows], targets[start:start + rows]  # (n, d), (n,)
                n = h_c.size(0)
                if takes_onednn(h_c, w):  # once here, not in each product: oneDNN's row grid, zero rows
                    h_c = padded(h_c, grid_rows(n))
                z = gemm_nt(h_c, w, b)  # (n', V) in dtype: the logits, then their gradient in place
                total += score_chunk(z[:n], t_c, smoothing, block, grad_bias, grads)
                if not grads:  # no backward will come (evaluation, torch.no_grad): the loss alone
                    continue
                z[n:].zero_()  # the padded rows' gradient: nothing
                grad_hidden[start:start + rows] = gemm_nt(z, w.t())[:n]  # (n, d) = grad @ w
                if dtype == torch.float32 and not weight_grad_takes_onednn(z, h_c):
                    grad_weight.addmm_(z.t(), h_c)  # (V, d), accumulated in place
                else:
                    grad_weight += weight_grad(z, h_c).float()
        ctx.save_for_backward(grad_hidden, grad_weight, grad_bias)
        ctx.weight_dtype, ctx.bias_dtype = weight.dtype, None if bias is None else bias.dtype
        return total

    @staticmethod
    def backward(ctx: Any, grad_total: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        grad_hidden, grad_weight, grad_bias = ctx.saved_tensors
        scale = grad_total.float()
        bias = None if grad_bias is None else (grad_bias * scale).to(ctx.bias_dtype)
        return ((grad_hidden * scale).to(grad_hidden.dtype), (grad_weight * scale).to(ctx.weight_dtype), bias,
                None, None, None, None, None)


def token_loss(hidden: Tensor, generator: nn.Module, targets: Tensor, ignore_index: int,
               label_smoothing: float = 0.0, scored: int | None = None) -> Tensor:
    """Mean cross-entropy (float32, a scalar) of ``generator(hidden)`` over the vocabulary against
    ``targets`` (B, T), leaving out targets equal to ``ignore_index``; ``hidden`` (B, T, d) are the final
    hidden states (the models' ``project=False``). Call it where the model ran: under its autocast.

    ``scored``: how many targets are not ``ignore_index``, where the caller knows it on the host (the
    trainer's batches count them when they are built): then nothing here waits for the device (the
    scored rows are found with ``nonzero_static`` of that size); without it the count is read from the
    device, one synchronisation.

    The fused path (:class:`LinearCrossEntropy`) serves a plain ``nn.Linear`` generator (every registered
    embeddings variant's); another module is applied whole and scored with ``F.cross_entropy``.
    """
    flat_targets = targets.flatten()
    if not (type(generator) is nn.Linear or type(generator) is Linear):  # Linear: oneDNN's products
        logits = generator(hidden)  # (B, T, V)
        return F.cross_entropy(logits.float().flatten(0, 1), flat_targets, ignore_index=ignore_index,
                               label_smoothing=label_smoothing)
    rows = hidden.flatten(0, 1)  # (N, d)
    keep = flat_targets != ignore_index
    n = int(keep.sum()) if scored is None else scored  # a sync only where the caller does not know it
    if n < flat_targets.numel():  # only the scored rows meet the generator
        index = torch.nonzero_static(keep, size=n).squeeze(1)  # (n,): no wait for the count
        rows, flat_targets = rows.index_select(0, index), flat_targets.index_select(0, index)
    weight, bias = generator.weight, generator.bias
    # the gradients are computed in the forward: only where a backward can follow
    grads = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (rows, weight, bias))
    total = LinearCrossEntropy.apply(rows, weight, bias, flat_targets, float(label_smoothing),
                                     compute_dtype(weight), chunk_rows(weight.size(0), weight.device), grads)
    return total / n  # nan without a scored target, as F.cross_entropy's mean
