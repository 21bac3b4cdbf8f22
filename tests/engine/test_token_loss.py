"""The trainer's loss (ablate/engine/token_loss.py): the generator applied with the cross-entropy a chunk of
rows at a time equals ``F.cross_entropy(generator(hidden).float(), ...)`` and its gradients within the
stated rounding, with ignored targets, label smoothing and chunk edges, in float32 and under bf16
autocast; it never holds a (tokens, vocabulary) tensor whole."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

import ablate.engine.token_loss
from ablate.engine.token_loss import chunk_rows, token_loss
from ablate.hardware import autocast_context

CPU = torch.device("cpu")
IGNORE = -100
# float32: the chunks' weight gradients are summed in another order and the mean's 1/n is applied to the
# gradients at the end, a few ulp of the largest value apart
FP32_RTOL = 1e-5
# bf16: the generator's matmuls run in bf16 as autocast runs them; the weight gradient is summed over
# chunks of bf16 products (one bf16 rounding each, 2^-8), the reference rounds one bf16 product
BF16_RTOL = 2e-2


def case(vocab: int = 300, d: int = 16, B: int = 3, T: int = 37, ignored: int = 9,
         bias: bool = True) -> tuple[torch.Tensor, nn.Linear, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(B, T, d, generator=g)
    generator = nn.Linear(d, vocab, bias=bias)
    with torch.no_grad():
        generator.weight.copy_(torch.randn(vocab, d, generator=g))
    targets = torch.randint(0, vocab, (B, T), generator=g)
    targets.view(-1)[torch.randperm(B * T, generator=g)[:ignored]] = IGNORE
    return hidden, generator, targets


def loss_and_grads(fused: bool, hidden: torch.Tensor, generator: nn.Linear, targets: torch.Tensor,
                   precision: str, smoothing: float = 0.0) -> list[torch.Tensor]:
    generator.zero_grad()
    h = hidden.clone().requires_grad_()
    with autocast_context(precision, CPU):
        if fused:
            loss = token_loss(h, generator, targets, IGNORE, smoothing)
        else:
            loss = F.cross_entropy(generator(h).float().flatten(0, 1), targets.flatten(), ignore_index=IGNORE,
                                   label_smoothing=smoothing)
    loss.backward()
    out = [loss.detach(), h.grad, generator.weight.grad]
    return out + ([generator.bias.grad] if generator.bias is not None else [])


def assert_close_to_largest(ours: list[torch.Tensor], reference: list[torch.Tensor], rtol: float) -> None:
    """Every value within ``rtol`` of the largest magnitude of its tensor (the rounding of a sum)."""
    for name, a, b in zip(("loss", "hidden", "weight", "bias"), ours, reference, strict=False):
        assert a.dtype == b.dtype and a.shape == b.shape, name
        scale = float(b.abs().max())
        assert float((a - b).abs().max()) <= rtol * scale, (name, float((a - b).abs().max()), scale)


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("bias", [True, False])
def test_the_chunked_loss_is_cross_entropy_of_the_logits_in_float32(
        smoothing: float, bias: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    # 40 rows a chunk: the 102 scored rows are 3 chunks, the last one cut short
    monkeypatch.setitem(ablate.engine.token_loss.CHUNK_ELEMENTS, "cpu", 300 * 40)
    hidden, generator, targets = case(bias=bias)
    assert chunk_rows(300, CPU) == 40
    ours = loss_and_grads(True, hidden, generator, targets, "fp32", smoothing)
    reference = loss_and_grads(False, hidden, generator, targets, "fp32", smoothing)
    assert_close_to_largest(ours, reference, FP32_RTOL)
    assert float(ours[0]) == pytest.approx(float(reference[0]), rel=1e-6)
    ignored = (targets == IGNORE).flatten()
    assert torch.all(ours[1].flatten(0, 1)[ignored] == 0)  # an ignored row gets no gradient


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_under_bf16_autocast_it_is_the_same_loss_within_bf16_rounding(
        smoothing: float, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(ablate.engine.token_loss.CHUNK_ELEMENTS, "cpu", 300 * 40)
    hidden, generator, targets = case()
    ours = loss_and_grads(True, hidden, generator, targets, "bf16", smoothing)
    reference = loss_and_grads(False, hidden, generator, targets, "bf16", smoothing)
    assert_close_to_largest(ours, reference, BF16_RTOL)
    # the logits are bf16 products in both: the loss agrees to float32's rounding of their log-softmax
    assert float(ours[0]) == pytest.approx(float(reference[0]), rel=1e-5)
    fp32 = loss_and_grads(False, hidden, generator, targets, "fp32", smoothing)
    assert float(ours[0]) != float(fp32[0])  # it did run in bf16


class MaxTensor(TorchDispatchMode):
    """Records the largest tensor any operation returns."""

    def __init__(self) -> None:
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, tuple | list) else (out,):
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.numel())
        return out


def test_no_tokens_by_vocabulary_tensor_is_ever_held_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(ablate.engine.token_loss.CHUNK_ELEMENTS, "cpu", 300 * 40)
    hidden, generator, targets = case(T=120, ignored=0)
    sizes = {}
    for fused in (True, False):
        with MaxTensor() as seen:
            loss_and_grads(fused, hidden, generator, targets, "fp32")
        sizes[fused] = seen.largest
    assert sizes[False] == 3 * 120 * 300  # the reference: the (B*T, V) logits and their gradient
    assert sizes[True] == 40 * 300  # one chunk's logits at most


def test_ignored_rows_never_meet_the_generator() -> None:
    """Only the scored rows are multiplied: the chunked loss of a batch is that of its scored rows alone."""
    hidden, generator, targets = case(ignored=40)
    scored = targets != IGNORE
    whole = token_loss(hidden, generator, targets, IGNORE)
    alone = token_loss(hidden[scored][None], generator, targets[scored][None], IGNORE)
    assert torch.equal(whole, alone)


def test_a_generator_that_is_not_a_plain_linear_is_scored_whole() -> None:
    class Scaled(nn.Linear):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return 2 * super().forward(x)

    hidden, plain, targets = case()
    scaled = Scaled(16, 300)
    scaled.load_state_dict(plain.state_dict())
    logits = (2 * plain(hidden)).float().flatten(0, 1)  # (B*T, V)
    expected = F.cross_entropy(logits, targets.flatten(), ignore_index=IGNORE)
    assert torch.equal(token_loss(hidden, scaled, targets, IGNORE), expected)


def test_without_gradients_it_is_the_same_loss_and_computes_none() -> None:
    """Under torch.no_grad (evaluation) the chunks skip the gradient work: the same loss, bit for bit."""
    hidden, generator, targets = case()
    with_grads = token_loss(hidden.clone().requires_grad_(), generator, targets, IGNORE, 0.1)
    with torch.no_grad():
        without = token_loss(hidden, generator, targets, IGNORE, 0.1)
    assert not without.requires_grad and torch.equal(without, with_grads.detach())


def test_without_a_scored_target_the_loss_is_nan_as_cross_entropys_mean() -> None:
    hidden, generator, targets = case()
    targets.fill_(IGNORE)
    assert math.isnan(float(token_loss(hidden, generator, targets, IGNORE).detach()))
    assert math.isnan(float(F.cross_entropy(generator(hidden).flatten(0, 1), targets.flatten(),
                                            ignore_index=IGNORE).detach()))


def test_chunks_hold_about_eight_million_logits_on_a_cpu() -> None:
    assert chunk_rows(8192, CPU) == 1024  # the bench LM's vocabulary
    assert chunk_rows(50257, CPU) == 160  # GPT-2's: 166 rounded down to oneDNN's row grid
    assert chunk_rows(8000, CPU) == 1024  # 1,048 rounded down likewise
    assert chunk_rows(10**6, CPU) == 32  # never fewer rows than this
